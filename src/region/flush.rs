//! MemStore flush: snapshot, write one store file per family, publish.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::inner::{Inner, family_dir};
use super::memstore::MemStore;
use super::sst::{SstReader, SstWriter};
use crate::error::{Error, Result};

/// Flushes every MemStore that is waiting (left by a failed attempt) and
/// then the active one. Serialised by the region's flush lock.
pub(crate) fn flush(inner: &Inner) -> Result<()> {
    let _flushing = inner.flush_lock.lock();
    inner.check_not_fenced()?;
    // Whatever asked for it, this flush serves every pending request; writes
    // from here on may ask again.
    inner.clear_flush_request();
    inner.flush_forced.store(false, Ordering::SeqCst);
    loop {
        let oldest = inner.state.read().flushing.last().cloned();
        match oldest {
            Some(m) => flush_snapshot(inner, m)?,
            None => break,
        }
    }
    let snapshot = {
        let _w = inner.write_lock.lock();
        let mut st = inner.state.write();
        if st.active.is_empty() {
            // Every write so far is in published files: a region on the
            // object store publishes how far its source positions moved
            // (messages without rows for it), so a new owner starts there.
            if inner.shared.is_some() {
                let positions = inner.positions.lock().clone();
                drop(st);
                drop(_w);
                return publish_positions(inner, positions);
            }
            return Ok(());
        }
        // Every sequence id handed out so far belongs to this MemStore or
        // an older one: ids are assigned and inserted under the write lock.
        let old = std::mem::replace(&mut st.active, Arc::new(MemStore::new()));
        // The positions of exactly the writes it holds: they are noted
        // under the write lock too.
        old.seal_at(inner.mvcc.last_assigned(), inner.positions.lock().clone());
        st.flushing.insert(0, old.clone());
        old
    };
    flush_snapshot(inner, snapshot)
}

/// Publishes the region's manifest with `positions` when they moved past
/// the published ones (a region on the object store only).
fn publish_positions(
    inner: &Inner,
    positions: BTreeMap<crate::region::wal::record::SourceShard, u64>,
) -> Result<()> {
    let Some(shared) = &inner.shared else {
        return Ok(());
    };
    let _changing = inner.manifest_change.lock();
    let mut next = inner.manifest.lock().clone();
    if next.positions == positions {
        return Ok(());
    }
    next.positions = positions;
    shared.publish(&next)?;
    *inner.manifest.lock() = next;
    Ok(())
}

fn flush_snapshot(inner: &Inner, snapshot: Arc<MemStore>) -> Result<()> {
    let sealed = snapshot.sealed_seq();
    if !inner.mvcc.wait_for(sealed) {
        return Err(Error::Poisoned(
            inner
                .poisoned
                .lock()
                .clone()
                .unwrap_or_else(|| "write failed".into()),
        ));
    }
    let started = Instant::now();
    let now = inner.clock.now_ms();
    let mut writers: BTreeMap<Vec<u8>, (u64, SstWriter)> = BTreeMap::new();
    let written = write_files(inner, &snapshot, now, &mut writers);
    if let Err(e) = written {
        for (_, (_, w)) in writers {
            w.abandon();
        }
        return Err(e);
    }
    let mut finished = Vec::new();
    // A failure from here on leaves no file behind: the data is still in
    // the MemStore and the WAL, and the next flush writes new files.
    let forget = |finished: &[(Vec<u8>, u64, std::path::PathBuf)]| {
        for (_, _, path) in finished {
            let _ = crate::fsutil::remove_file(path);
        }
    };
    let mut pending = writers.into_iter();
    while let Some((family, (id, w))) = pending.next() {
        match w.finish(sealed) {
            Ok((path, _meta, _size)) => finished.push((family, id, path)),
            Err(e) => {
                pending.for_each(|(_, (_, w))| w.abandon());
                forget(&finished);
                return Err(e.into());
            }
        }
    }
    if let Some(shared) = &inner.shared {
        for (family, id, path) in &finished {
            if let Err(e) = shared.upload(family, *id, path) {
                forget(&finished);
                return Err(e);
            }
        }
    }
    let mut readers = Vec::new();
    for (family, id, path) in &finished {
        let fam = &inner.families[family];
        match SstReader::open(
            path,
            *id,
            inner.cache.clone(),
            fam.block_cache,
            fam.in_memory,
        ) {
            Ok(r) => readers.push((family.clone(), r)),
            Err(e) => {
                forget(&finished);
                return Err(e.into());
            }
        }
    }

    // Manifest changes one at a time; the manifest itself stays readable
    // while one is written (to the object store, that is a request).
    let _changing = inner.manifest_change.lock();
    let mut next = inner.manifest.lock().clone();
    for (family, id, _) in &finished {
        next.families.entry(family.clone()).or_default().push(*id);
    }
    next.flushed_seq = next.flushed_seq.max(sealed);
    next.next_file_id = inner.next_file_id.load(Ordering::SeqCst);
    let stored = match &inner.shared {
        // Without a WAL, what the files cover is what the snapshot held.
        Some(shared) => {
            next.positions = snapshot.sealed_positions();
            crate::failpoint::hit("flush-before-manifest");
            shared.publish(&next)
        }
        None => {
            // The WAL segments carrying them go once this is flushed.
            next.positions = inner.positions.lock().clone();
            crate::failpoint::hit("flush-before-manifest");
            next.store(&inner.dir).map_err(Error::from)
        }
    };
    if let Err(e) = stored {
        drop(readers);
        forget(&finished);
        return Err(e);
    }
    {
        let mut st = inner.state.write();
        let mut bytes = 0;
        for (family, reader) in readers {
            bytes += reader.size();
            st.files.entry(family).or_default().push(reader);
        }
        st.flushing.retain(|m| !Arc::ptr_eq(m, &snapshot));
        inner
            .stats
            .flushed_bytes
            .fetch_add(bytes, Ordering::Relaxed);
    }
    *inner.manifest.lock() = next;
    inner.wal.mark_flushed(inner.id, sealed);
    inner.stats.flushes.fetch_add(1, Ordering::Relaxed);
    let took = started.elapsed();
    inner
        .stats
        .flush_micros
        .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    metrics::histogram!("halite_flush_duration_seconds").record(took.as_secs_f64());
    inner.room.1.notify_all();
    Ok(())
}

fn write_files(
    inner: &Inner,
    snapshot: &Arc<MemStore>,
    now: u64,
    writers: &mut BTreeMap<Vec<u8>, (u64, SstWriter)>,
) -> Result<()> {
    // One whole key at a time, its row written once per row: the
    // MemStore keeps a row's cells without it.
    let mut key: Vec<u8> = Vec::new();
    snapshot.walk_rows(u64::MAX, |row, cells| {
        key.clear();
        key.extend_from_slice(&(row.len() as u16).to_be_bytes());
        key.extend_from_slice(row);
        let row_end = key.len();
        // A row's cells come family by family: one writer for each run.
        let mut rest = cells;
        while let Some(first) = rest.first() {
            let family = family_of(first.after_row)?;
            let run = rest
                .iter()
                .position(|c| family_of(c.after_row).ok() != Some(family))
                .unwrap_or(rest.len());
            let (this, next) = rest.split_at(run);
            rest = next;
            // A family dropped from the schema: no file takes its cells.
            if !open_writer(inner, family, now, writers)? {
                continue;
            }
            let (_, w) = writers.get_mut(family).expect("opened above");
            for cell in this {
                key.truncate(row_end);
                key.extend_from_slice(cell.after_row);
                w.add(&key, cell.ttl_ms, cell.value)?;
            }
        }
        Ok(())
    })
}

/// The family of a cell key without its row.
fn family_of(after_row: &[u8]) -> Result<&[u8]> {
    after_row
        .first()
        .and_then(|&n| after_row.get(1..1 + n as usize))
        .ok_or_else(|| Error::InvalidInput("malformed key in MemStore".into()))
}

/// Makes sure a store file is being written for `family`; false when the
/// region has no such family.
fn open_writer(
    inner: &Inner,
    family: &[u8],
    now: u64,
    writers: &mut BTreeMap<Vec<u8>, (u64, SstWriter)>,
) -> Result<bool> {
    if writers.contains_key(family) {
        return Ok(true);
    }
    let Some(fam) = inner.families.get(family) else {
        return Ok(false);
    };
    let id = inner.next_file_id.fetch_add(1, Ordering::SeqCst);
    let w = SstWriter::create(&family_dir(&inner.dir, family), id, fam, now)?;
    writers.insert(family.to_vec(), (id, w));
    Ok(true)
}
