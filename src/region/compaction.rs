//! Compaction: merging store files so reads touch few of them, and (major)
//! dropping what no read can return any more.
//!
//! Minor compactions take a contiguous run of files (by age) chosen by a
//! [`CompactionPicker`] (HBase's ratio rule, [`RatioPicker`], or time
//! windows for a TIME_WINDOW family, [`TimeWindowPicker`], whose filling
//! window merges by size tiers, [`tiered::TieredPicker`]), so the output
//! takes the run's place in the age order and
//! "newer file wins" stays true for equal keys. A major compaction rewrites
//! all files of a family with [`resolve_column`] — the read rule — keeping
//! only what a read at this moment would see (with every version up to
//! `VERSIONS`) and no delete markers. Files whose every cell is past the
//! family TTL are dropped without being read (only when `MIN_VERSIONS` is 0).

pub mod picker;
pub mod ratio;
pub mod tiered;
pub mod time_window;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::inner::{Inner, family_dir};
use super::sst::{BlockWalk, FileMeta, SstReader, SstWriter};
use crate::cell::{CellKind, KeyRef, compare_keys, encode_key};
use crate::error::{Error, Result};
pub use crate::region::options::CompactionOptions;
use crate::region::read::merge::{Merge, Source};
use crate::region::read::resolve::{ColumnGroup, resolve_column};
use crate::schema::FamilyDescriptor;
pub use picker::CompactionPicker;
pub use ratio::RatioPicker;
pub use time_window::TimeWindowPicker;

/// Most files one compaction of a TIME_WINDOW family writes; inputs that
/// span more windows are written in windows a whole multiple as wide, so
/// boundaries still fall on the family's windows.
const MAX_WINDOW_OUTPUTS: u64 = 64;

/// Whether every cell of the file is past the family TTL. Only the family
/// TTL counts: a cell whose own shorter TTL ran out may still shadow an
/// older cell with the same key in another file, and dropping it would bring
/// that one back.
fn file_expired(r: &SstReader, fam: &FamilyDescriptor, now: u64) -> bool {
    let m = r.meta();
    fam.min_versions == 0
        && m.entries > 0
        && fam
            .ttl_ms()
            .is_some_and(|t| m.max_ts.saturating_add(t) <= now)
}

/// Whether a family is due its periodic major compaction (HBase's
/// `hbase.hregion.majorcompaction`): its oldest live file is older than
/// `major_interval`, spread per region and family by up to half of it
/// either way, and the rewrite would drop something. A RATIO family
/// already in one file without delete markers or cells past its TTL is
/// left as it is. A TIME_WINDOW family needs one only for delete markers,
/// which may hide cells in any window and so go only when every file is
/// rewritten together: its closed windows are merged by minor compactions
/// and expire whole, so without markers its old windows are never
/// rewritten again (surplus versions in different windows stay on disk;
/// reads never return them).
fn periodic_major_due(
    inner: &Inner,
    family: &[u8],
    fam: &FamilyDescriptor,
    live: &[Arc<SstReader>],
    now: u64,
) -> bool {
    let interval = inner.options.compaction.major_interval.as_millis() as u64;
    let Some(oldest) = live.iter().map(|f| f.meta().created_ms).min() else {
        return false;
    };
    if interval == 0
        || oldest.saturating_add(jittered(interval, inner.id, family)) > now
        || inner.periodic_major_retry_ms.load(Ordering::Relaxed) > now
    {
        return false;
    }
    let delete_markers = live.iter().any(|f| f.meta().delete_markers > 0);
    if fam.time_window_ms().is_some() {
        return delete_markers;
    }
    // With MIN_VERSIONS a rewrite keeps expired cells, so they call for
    // none.
    let past_ttl = |f: &Arc<SstReader>| {
        fam.min_versions == 0
            && fam
                .ttl_ms()
                .is_some_and(|t| f.meta().entries > 0 && f.meta().min_ts.saturating_add(t) <= now)
    };
    delete_markers || live.len() > 1 || live.iter().any(past_ttl)
}

/// `interval` times a factor in [0.5, 1.5) fixed by the region and family,
/// so that regions opened together do not all rewrite together.
fn jittered(interval: u64, region: u64, family: &[u8]) -> u64 {
    let mut seed = region.to_le_bytes().to_vec();
    seed.extend_from_slice(family);
    let unit = (xxhash_rust::xxh3::xxh3_64(&seed) >> 11) as f64 / (1u64 << 53) as f64;
    (interval as f64 * (0.5 + unit)) as u64
}

pub(crate) fn compact(inner: &Inner, major: bool) -> Result<()> {
    let _c = inner.compaction_lock.lock();
    // Closing waits out a compaction under way through this lock; one that
    // took it after that wait must not change a closed region's files
    // (a split is linking them).
    if inner.is_closed() {
        return Ok(());
    }
    inner.check_not_fenced()?;
    for family in &inner.family_order {
        compact_family(inner, family, major)?;
    }
    if let Some(shared) = &inner.shared {
        shared.delete_retired();
    }
    Ok(())
}

fn compact_family(inner: &Inner, family: &[u8], major: bool) -> Result<()> {
    let started = std::time::Instant::now();
    let fam = &inner.families[family];
    let now = inner.clock.now_ms();
    let files = inner
        .state
        .read()
        .files
        .get(family)
        .cloned()
        .unwrap_or_default();
    let expired: Vec<u64> = files
        .iter()
        .filter(|f| file_expired(f, fam, now))
        .map(|f| f.file_id())
        .collect();
    let live: Vec<Arc<SstReader>> = files
        .iter()
        .filter(|f| !expired.contains(&f.file_id()))
        .cloned()
        .collect();
    let periodic = !major && periodic_major_due(inner, family, fam, &live, now);
    if periodic {
        tracing::info!(
            region = inner.id,
            family = %String::from_utf8_lossy(family),
            files = live.len(),
            "periodic major compaction"
        );
    }
    let major = major || periodic;
    let selected: Vec<Arc<SstReader>> = if major {
        live
    } else {
        let options = &inner.options.compaction;
        let picked = match fam.time_window_ms() {
            Some(window) => TimeWindowPicker::new(window, options, now).pick_minor(&live),
            None => RatioPicker::new(options).pick_minor(&live),
        };
        picked.map(|r| live[r].to_vec()).unwrap_or_default()
    };
    if expired.is_empty() && selected.is_empty() {
        return Ok(());
    }

    let outputs = if selected.is_empty() {
        Vec::new()
    } else {
        match rewrite(inner, fam, &selected, major, now) {
            Ok(outputs) => outputs,
            Err(e) => {
                if periodic {
                    // Minor compactions go on meanwhile; a failing full
                    // rewrite (too little disk for a second copy, say) is
                    // tried again in an hour, not at every flush.
                    inner
                        .periodic_major_retry_ms
                        .store(now.saturating_add(3_600_000), Ordering::Relaxed);
                    tracing::warn!(
                        region = inner.id,
                        error = %e,
                        "the periodic major compaction failed; it is tried again in an hour"
                    );
                }
                return Err(e);
            }
        }
    };
    let selected_ids: Vec<u64> = selected.iter().map(|f| f.file_id()).collect();
    // A failure from here on removes the outputs: the inputs stay live.
    let forget_outputs = || {
        for (_, path) in &outputs {
            let _ = crate::fsutil::remove_file(path);
        }
    };
    if let Some(shared) = &inner.shared {
        for (id, path) in &outputs {
            if let Err(e) = shared.upload(family, *id, path) {
                forget_outputs();
                return Err(e);
            }
        }
    }
    let mut out_readers = Vec::with_capacity(outputs.len());
    for (id, path) in &outputs {
        match SstReader::open(
            path,
            *id,
            inner.cache.clone(),
            fam.block_cache,
            fam.in_memory,
        ) {
            Ok(r) => out_readers.push(r),
            Err(e) => {
                forget_outputs();
                return Err(e.into());
            }
        }
    }

    // Manifest changes one at a time; the manifest itself stays readable
    // while one is written (to the object store, that is a request).
    let _changing = inner.manifest_change.lock();
    let mut next = inner.manifest.lock().clone();
    let list = next.families.entry(family.to_vec()).or_default();
    let at = list
        .iter()
        .position(|id| selected_ids.contains(id))
        .unwrap_or(list.len());
    let before = list[..at].iter().filter(|id| !expired.contains(id)).count();
    list.retain(|id| !selected_ids.contains(id) && !expired.contains(id));
    // Outputs hold no equal keys (a key's time is in one window), so
    // their order among themselves is free: oldest window first.
    for (i, (id, _)) in outputs.iter().enumerate() {
        list.insert(before + i, *id);
    }
    next.next_file_id = inner.next_file_id.load(Ordering::SeqCst);
    crate::failpoint::hit("compaction-before-manifest");
    let stored = match &inner.shared {
        Some(shared) => shared.publish(&next),
        None => next.store(&inner.dir).map_err(Error::from),
    };
    if let Err(e) = stored {
        drop(out_readers);
        forget_outputs();
        return Err(e);
    }
    let removed: Vec<Arc<SstReader>> = {
        let mut st = inner.state.write();
        let readers = st.files.entry(family.to_vec()).or_default();
        let (gone, mut kept): (Vec<_>, Vec<_>) = readers
            .drain(..)
            .partition(|r| selected_ids.contains(&r.file_id()) || expired.contains(&r.file_id()));
        let at = before.min(kept.len());
        kept.splice(at..at, out_readers);
        *readers = kept;
        gone
    };
    *inner.manifest.lock() = next;

    let bytes_in: u64 = selected.iter().map(|f| f.size()).sum();
    let bytes_out: u64 = inner.state.read().files.get(family).map_or(0, |v| {
        v.iter()
            .filter(|r| outputs.iter().any(|(id, _)| *id == r.file_id()))
            .map(|r| r.size())
            .sum()
    });
    inner
        .stats
        .compactions
        .fetch_add(u64::from(!selected.is_empty()), Ordering::Relaxed);
    if !selected.is_empty() {
        metrics::histogram!("halite_compaction_duration_seconds")
            .record(started.elapsed().as_secs_f64());
    }
    inner
        .stats
        .compacted_bytes_in
        .fetch_add(bytes_in, Ordering::Relaxed);
    inner
        .stats
        .compacted_bytes_out
        .fetch_add(bytes_out, Ordering::Relaxed);
    inner
        .stats
        .expired_files_dropped
        .fetch_add(expired.len() as u64, Ordering::Relaxed);
    // Readers here that still hold these files keep their open
    // descriptors, so the local names go now; readers elsewhere may hold
    // the previous manifest, so the objects wait out a grace period.
    if let Some(shared) = &inner.shared {
        let gone: Vec<u64> = removed.iter().map(|r| r.file_id()).collect();
        shared.retire(family, &gone);
    }
    for r in removed {
        inner.cache.evict_reader(r.reader_id());
        let _ = crate::fsutil::remove_file(r.path());
    }
    Ok(())
}

/// Merges `selected` into new files: one, or one per time window of a
/// TIME_WINDOW family; none when nothing survives.
fn rewrite(
    inner: &Inner,
    fam: &FamilyDescriptor,
    selected: &[Arc<SstReader>],
    major: bool,
    now: u64,
) -> Result<Vec<(u64, std::path::PathBuf)>> {
    let (start, end) = &inner.rows;
    let window_ms = fam.time_window_ms().map(|w| {
        let oldest = selected
            .iter()
            .filter(|r| r.meta().entries > 0)
            .map(|r| r.meta().min_ts)
            .min()
            .unwrap_or(0);
        let newest = selected.iter().map(|r| r.meta().max_ts).max().unwrap_or(0);
        let spanned = newest / w - oldest / w + 1;
        // k windows a piece over `spanned` windows that need not start on
        // a multiple of k: at most spanned / k + 1 pieces.
        w.saturating_mul(spanned.div_ceil(MAX_WINDOW_OUTPUTS - 1))
    });
    let mut out = Outputs {
        inner,
        fam,
        now,
        window_ms,
        writers: std::collections::BTreeMap::new(),
    };
    let max_seq = selected.iter().map(|r| r.meta().max_seq).max().unwrap_or(0);
    // Only files linked from a split parent reach past the region's end:
    // without one, no entry needs comparing with it (a row comparison an
    // entry was a tenth of a compaction's own work).
    let reaches_past_end = !end.is_empty()
        && selected.iter().any(|r| {
            r.meta().entries > 0 && crate::cell::row_of(&r.meta().last_key) >= end.as_slice()
        });
    let end: &[u8] = if reaches_past_end { end } else { &[] };
    let reaches_before_start = !start.is_empty()
        && selected.iter().any(|r| {
            r.meta().entries > 0 && crate::cell::row_of(&r.meta().first_key) < start.as_slice()
        });
    let result = if !major && end.is_empty() && !reaches_before_start {
        // Newest file first: among equal keys the newer goes first.
        let mut walks: Vec<BlockWalk> = selected
            .iter()
            .rev()
            .map(|r| BlockWalk::new(r.clone()))
            .collect();
        write_minor_by_blocks(&mut walks, &mut out)
    } else {
        let sources = selected
            .iter()
            .rev()
            // A compaction reads every block once: filling the cache with
            // them would evict the hot set and hold memory the writers need.
            .map(|r| Source::File(r.iter_uncached()))
            .collect();
        let mut merge = Merge::new(sources);
        // Only the region's own rows: files linked from a split parent
        // hold the other daughter's too, and this is where they are
        // dropped.
        match merge.seek(&crate::cell::first_key_of_row(start)) {
            Err(e) => Err(e),
            Ok(()) if major => write_major(&mut merge, &mut out, fam, now, end),
            Ok(()) => write_minor(&mut merge, &mut out, end),
        }
    };
    if let Err(e) = result {
        out.abandon();
        return Err(e);
    }
    out.finish(max_seq)
}

/// The files one compaction writes, opened as cells for them come: a
/// single one (window 0), or one per window of `window_ms` by each cell's
/// timestamp.
struct Outputs<'a> {
    inner: &'a Inner,
    fam: &'a FamilyDescriptor,
    now: u64,
    window_ms: Option<u64>,
    writers: std::collections::BTreeMap<u64, (u64, SstWriter)>,
}

impl Outputs<'_> {
    fn add(&mut self, key: &[u8], ttl_ms: Option<u64>, value: &[u8]) -> Result<()> {
        let window = match self.window_ms {
            Some(w) => {
                KeyRef::parse(key)
                    .ok_or_else(|| Error::InvalidInput("malformed key in compaction".into()))?
                    .timestamp
                    / w
            }
            None => 0,
        };
        self.writer(window)?.add(key, ttl_ms, value)?;
        Ok(())
    }

    /// The file of `window`, opened on first use.
    fn writer(&mut self, window: u64) -> Result<&mut SstWriter> {
        let writer = match self.writers.entry(window) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let id = self.inner.next_file_id.fetch_add(1, Ordering::SeqCst);
                let dir = family_dir(&self.inner.dir, &self.fam.name);
                e.insert((id, SstWriter::create(&dir, id, self.fam, self.now)?))
            }
        };
        Ok(&mut writer.1)
    }

    /// The window whose file may take `file`'s blocks whole: a file of
    /// puts only, all of one window, of a family whose files take whole
    /// blocks (`SstWriter::takes_whole_blocks`).
    fn whole_block_window(&mut self, file: &FileMeta) -> Result<Option<u64>> {
        if file.delete_markers != 0 || file.entries == 0 {
            return Ok(None);
        }
        let window = match self.window_ms {
            Some(w) if file.min_ts / w != file.max_ts / w => return Ok(None),
            Some(w) => file.max_ts / w,
            None => 0,
        };
        Ok(self.writer(window)?.takes_whole_blocks().then_some(window))
    }

    fn abandon(self) {
        for (_, (_, w)) in self.writers {
            w.abandon();
        }
    }

    /// The written files, oldest window first; on a failure none is left.
    fn finish(self, max_seq: u64) -> Result<Vec<(u64, std::path::PathBuf)>> {
        let mut done = Vec::with_capacity(self.writers.len());
        let mut writers = self.writers.into_values();
        for (id, w) in writers.by_ref() {
            if w.entries() == 0 {
                w.abandon();
                continue;
            }
            match w.finish(max_seq) {
                Ok((path, _, _)) => done.push((id, path)),
                Err(e) => {
                    for (_, rest) in writers {
                        rest.abandon();
                    }
                    for (_, path) in &done {
                        let _ = crate::fsutil::remove_file(path);
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(done)
    }
}

/// Whether the merge has passed the region's last row.
fn past_end(merge: &Merge, end: &[u8]) -> bool {
    !end.is_empty() && crate::cell::row_of(merge.key()) >= end
}

fn write_minor(merge: &mut Merge, w: &mut Outputs, end: &[u8]) -> Result<()> {
    while merge.valid() && !past_end(merge, end) {
        w.add(merge.key(), merge.ttl_ms(), merge.value())?;
        merge.advance()?;
    }
    Ok(())
}

/// A minor compaction of files that hold only the region's rows, block
/// by block: a block that no other input's key falls inside goes to the
/// new file as its file holds it, and only blocks whose keys interleave
/// with another file's are decoded and merged entry by entry. Files of
/// in-order points interleave only at the seams between series (a
/// series' points of one flush all come before those of the flush
/// before), so nearly all their blocks are copied.
fn write_minor_by_blocks(walks: &mut [BlockWalk], out: &mut Outputs) -> Result<()> {
    let mut bound: Vec<u8> = Vec::new();
    // A key written that an older file holds too: its older entries are
    // skipped when their walks reach them (a merge keeps the newest).
    let mut shadowing: Vec<u8> = Vec::new();
    let equal = |a: &[u8], b: &[u8]| compare_keys(a, b) == std::cmp::Ordering::Equal;
    loop {
        // The walk at the smallest key (the newest among equal keys), and
        // the smallest key of the others: how far it may go alone.
        let mut first: Option<usize> = None;
        let mut second: Option<usize> = None;
        for i in 0..walks.len() {
            let Some(key) = walks[i].key() else {
                continue;
            };
            let below = |j: Option<usize>| {
                j.and_then(|j| walks[j].key())
                    .is_none_or(|k| compare_keys(key, k) == std::cmp::Ordering::Less)
            };
            if below(first) {
                second = first;
                first = Some(i);
            } else if below(second) {
                second = Some(i);
            }
        }
        let Some(s) = first else {
            return Ok(());
        };
        let walk = &mut walks[s];
        if !shadowing.is_empty() && walk.key().is_some_and(|k| equal(k, &shadowing)) {
            if !walk.in_block() {
                walk.open_block()?;
                out.inner
                    .stats
                    .compaction_blocks_merged
                    .fetch_add(1, Ordering::Relaxed);
            }
            walk.advance()?;
            continue;
        }
        bound.clear();
        if let Some(key) = second.and_then(|j| walks[j].key()) {
            bound.extend_from_slice(key);
        }
        // Equal keys go newest file first, and walks are newest first.
        let tie_goes_first = second.is_none_or(|j| s < j);
        let walk = &mut walks[s];
        if !walk.in_block() {
            let file = walk.reader().clone();
            if let Some(window) = out.whole_block_window(file.meta())? {
                let below = (!bound.is_empty()).then_some((&bound[..], tie_goes_first));
                if let Some(block) = walk.take_block(below)? {
                    out.writer(window)?.copy_block(&block, file.meta())?;
                    out.inner
                        .stats
                        .compaction_blocks_copied
                        .fetch_add(1, Ordering::Relaxed);
                    if equal(&block.last_key, &bound) {
                        shadowing.clone_from(&block.last_key);
                    }
                    continue;
                }
            }
            walk.open_block()?;
            out.inner
                .stats
                .compaction_blocks_merged
                .fetch_add(1, Ordering::Relaxed);
        }
        while walk.in_block() {
            let key = walk.key().unwrap_or_default();
            if !bound.is_empty() {
                match compare_keys(key, &bound) {
                    std::cmp::Ordering::Less => {}
                    std::cmp::Ordering::Equal if tie_goes_first => {
                        shadowing.clear();
                        shadowing.extend_from_slice(key);
                    }
                    _ => break,
                }
            }
            out.add(key, walk.ttl_ms(), walk.value())?;
            walk.advance()?;
        }
    }
}

fn write_major(
    merge: &mut Merge,
    w: &mut Outputs,
    fam: &FamilyDescriptor,
    now: u64,
    end: &[u8],
) -> Result<()> {
    let mut group = ColumnGroup::default();
    let mut row: Vec<u8> = Vec::new();
    let mut family_delete: Option<u64> = None;
    let mut survivors = Vec::new();
    let mut emit =
        |row: &[u8], group: &mut ColumnGroup, family_delete: Option<u64>| -> Result<()> {
            if group.entries.is_empty() {
                return Ok(());
            }
            resolve_column(&group.entries, family_delete, fam, now, &mut survivors);
            for &i in &survivors {
                let e = &group.entries[i];
                let key = encode_key(
                    row,
                    &group.family,
                    &group.qualifier,
                    e.timestamp,
                    CellKind::Put,
                    e.ttl_ms.is_some(),
                );
                w.add(&key, e.ttl_ms, group.value(e))?;
            }
            group.clear();
            Ok(())
        };
    while merge.valid() && !past_end(merge, end) {
        let k = KeyRef::parse(merge.key())
            .ok_or_else(|| Error::InvalidInput("malformed key in compaction".into()))?;
        if k.row != row.as_slice() || !group.matches(&k) {
            emit(&row, &mut group, family_delete)?;
            if k.row != row.as_slice() {
                row = k.row.to_vec();
                family_delete = None;
            }
            group.start(&k, true);
        }
        if k.kind == CellKind::DeleteFamily {
            family_delete = family_delete.max(Some(k.timestamp));
        }
        group.push(k.timestamp, k.kind, merge.ttl_ms(), merge.value());
        merge.advance()?;
    }
    emit(&row, &mut group, family_delete)
}
