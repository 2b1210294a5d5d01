//! The write-ahead log: group commit on a dedicated thread.
//!
//! Callers hand an encoded edits record to [`Wal::append`] and get a
//! [`Ticket`] that resolves when the record is durable (SYNC_WAL) or written
//! (ASYNC_WAL). The WAL thread takes every request that arrived meanwhile,
//! frames them into one buffer and submits one write (+ fdatasync) for all of
//! them: one sync covers the whole group. With io_uring several such batches
//! are in flight at once; tickets are still resolved strictly in submission
//! order, so an acknowledged record never sits behind a lost one.
//!
//! Segments are preallocated and zero-filled (or recycled) in the background
//! so a sync does not also have to grow the file. A segment is closed with an
//! end record; at recovery every closed segment must end with one, and only
//! the last segment may have a torn tail, which is cut at the last whole
//! record (see `docs/wal.md`).
//!
//! This file opens, recovers, appends to and closes the log; the WAL thread
//! is in `writer.rs`, segment files and their checks in `segment.rs`, what
//! the two share in `shared.rs`, tickets in `ticket.rs`, the record format in
//! `record.rs` and the I/O backends in `io.rs`.

pub mod error;
pub mod io;
mod options;
pub mod record;
mod segment;
mod shared;
mod ticket;
mod writer;

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use io::IoBackendKind;
use record::{Edits, Frame, SEGMENT_HEADER_LEN, TYPE_EDITS};
use segment::{activate_segment, fsync_dir, prepare_segment, scan_segment, segment_path};
use shared::{ClosedSegment, Segments, Shared};
use ticket::Resolver;
use writer::{Request, Writer};

pub use error::WalError;
pub use options::{WalOptions, WalRecovery};
pub use segment::{SegmentCheck, SegmentEnd, check_segment};
pub use shared::WalStats;
pub use ticket::{OnResolved, Ticket};

/// A segment found at open, kept for replay until its edits are flushed.
#[derive(Debug, Clone)]
struct RecoveredSegment {
    id: u64,
    path: PathBuf,
    /// Bytes holding whole records (header included).
    valid_len: u64,
}

/// The write-ahead log of one writer (one per shard).
pub struct Wal {
    shared: Arc<Shared>,
    tx: Mutex<Option<Sender<Request>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    recovered: Vec<RecoveredSegment>,
    backend: IoBackendKind,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.shared.dir)
            .field("backend", &self.backend)
            .finish()
    }
}

impl Wal {
    /// Opens (or creates) the WAL in `dir`: checks every segment, cuts a torn
    /// tail off the last one, and starts the writer thread on a new segment.
    pub fn open(dir: impl AsRef<Path>, options: WalOptions) -> Result<Wal, WalError> {
        let dir = dir.as_ref().to_path_buf();
        crate::fsutil::create_dir_all(&dir)
            .map_err(|e| WalError::io(&dir, "create directory", e))?;
        let mut ids = Vec::new();
        let mut free = Vec::new();
        for entry in fs::read_dir(&dir).map_err(|e| WalError::io(&dir, "list directory", e))? {
            let entry = entry.map_err(|e| WalError::io(&dir, "list directory", e))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(id) = name
                .strip_suffix(".log")
                .and_then(|s| s.parse::<u64>().ok())
            {
                ids.push(id);
            } else if name.ends_with(".free") {
                free.push(path);
            } else if name.ends_with(".spare") {
                // Prepared but never used (a close or crash came first):
                // reuse it; preparation tops up whatever is missing.
                free.push(path);
            }
        }
        ids.sort_unstable();
        // The live segment and the spare take two; past the bound the rest
        // go (an earlier run may have kept more, or had another bound).
        free.sort();
        while free.len() > options.spare_segments + 1 {
            let surplus = free.remove(0);
            crate::fsutil::remove_file(&surplus)
                .map_err(|e| WalError::io(&surplus, "remove surplus", e))?;
        }

        let mut recovered = Vec::new();
        let mut closed = Vec::new();
        let mut damage_stops = 0;
        let mut ids_iter = ids.iter().enumerate();
        while let Some((i, &id)) = ids_iter.next() {
            let path = segment_path(&dir, id);
            let is_last = i + 1 == ids.len();
            let scanned = scan_segment(&path, id, is_last, options.recovery)?;
            recovered.push(RecoveredSegment {
                id,
                path: path.clone(),
                valid_len: scanned.valid_len,
            });
            closed.push(ClosedSegment {
                id,
                path,
                max_seq: scanned.max_seq,
            });
            if scanned.stopped {
                damage_stops += 1;
                // Nothing after the damage is replayed: later segments are
                // kept aside, under a name recovery does not read.
                for (_, &later) in ids_iter.by_ref() {
                    let from = segment_path(&dir, later);
                    let to = dir.join(format!("{later:020}.damaged"));
                    crate::fsutil::rename(&from, &to)
                        .map_err(|e| WalError::io(&from, "set aside", e))?;
                }
                fsync_dir(&dir)?;
            }
        }
        let next_id = ids.last().map_or(1, |id| id + 1);

        let stats = WalStats::default();
        stats.damage_stops.store(damage_stops, Ordering::Relaxed);
        let io = io::open_backend(options.io, options.depth, stats.syncs.clone());
        let backend = io.kind();
        let shared = Arc::new(Shared {
            dir: dir.clone(),
            options: options.clone(),
            segments: Mutex::new(Segments {
                closed,
                flushed: HashMap::new(),
                free,
                spare_ready: false,
            }),
            failed: Mutex::new(None),
            stats,
            closing: AtomicBool::new(false),
            holding_space: Default::default(),
        });
        let recycled = shared.segments.lock().free.pop();
        let file = prepare_segment(&dir, next_id, options.segment_size, recycled)?;
        activate_segment(&dir, next_id)?;
        let (tx, rx) = crossbeam_channel::bounded(4096);
        let mut writer = Writer {
            io,
            shared: shared.clone(),
            seg_id: next_id,
            file: Arc::new(file),
            seg_path: Arc::from(segment_path(&dir, next_id)),
            offset: SEGMENT_HEADER_LEN,
            seg_max_seq: HashMap::new(),
            spare: None,
            next_batch: 0,
            inflight: VecDeque::new(),
            unsynced: false,
            last_sync: Instant::now(),
            synced_to: SEGMENT_HEADER_LEN,
            claimed: SEGMENT_HEADER_LEN,
            preallocated: true,
            last_write: Instant::now(),
        };
        writer.prepare_spare();
        let thread = std::thread::Builder::new()
            .name("halite-wal".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| WalError::io(&dir, "spawn wal thread", e))?;
        Ok(Wal {
            shared,
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            recovered,
            backend,
        })
    }

    pub fn backend(&self) -> IoBackendKind {
        self.backend
    }

    pub fn stats(&self) -> &WalStats {
        &self.shared.stats
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Queues an encoded edits record; `max_seq` is the highest sequence id in
    /// it (for segment deletion). With `sync`, the ticket resolves after
    /// fdatasync; without, after the write.
    pub fn append(
        &self,
        region_id: u64,
        max_seq: u64,
        payload: Vec<u8>,
        sync: bool,
    ) -> Result<Ticket, WalError> {
        self.append_then(region_id, max_seq, Vec::new(), payload, sync, None)
    }

    /// [`Wal::append`], with `then` run as soon as the outcome is known
    /// (not when it is called on an error returned here).
    pub fn append_then(
        &self,
        region_id: u64,
        max_seq: u64,
        head: Vec<u8>,
        body: Vec<u8>,
        sync: bool,
        then: Option<OnResolved>,
    ) -> Result<Ticket, WalError> {
        let len = head.len() + body.len();
        if len > record::MAX_RECORD_LEN {
            return Err(WalError::TooLarge {
                len,
                limit: record::MAX_RECORD_LEN,
            });
        }
        if let Some(cause) = self.shared.failed.lock().clone() {
            return Err(WalError::Failed(cause));
        }
        let ticket = Ticket::new();
        let tx = self.tx.lock().clone().ok_or(WalError::Closed)?;
        let request = Request::Append {
            region_id,
            max_seq,
            head,
            body,
            sync,
            ticket: Resolver::new(ticket.clone(), then),
        };
        match tx.send(request) {
            Ok(()) => Ok(ticket),
            Err(crossbeam_channel::SendError(Request::Append { ticket: mut r, .. })) => {
                // Not run: the caller handles the error returned here.
                r.then = None;
                Err(WalError::Closed)
            }
            Err(_) => Err(WalError::Closed),
        }
    }

    /// A barrier: the ticket resolves once every record appended before this
    /// call (ASYNC_WAL ones included) is synced to disk.
    pub fn sync(&self) -> Result<Ticket, WalError> {
        if let Some(cause) = self.shared.failed.lock().clone() {
            return Err(WalError::Failed(cause));
        }
        let ticket = Ticket::new();
        let tx = self.tx.lock().clone().ok_or(WalError::Closed)?;
        tx.send(Request::Sync {
            ticket: Resolver::new(ticket.clone(), None),
        })
        .map_err(|_| WalError::Closed)?;
        Ok(ticket)
    }

    /// Records that every edit of `region_id` up to `seq` is in store files,
    /// so segments holding nothing newer can go.
    pub fn mark_flushed(&self, region_id: u64, seq: u64) {
        {
            let mut segs = self.shared.segments.lock();
            let f = segs.flushed.entry(region_id).or_insert(0);
            *f = (*f).max(seq);
        }
        self.shared.collect_garbage();
    }

    /// Regions whose unflushed edits keep this log, idle for
    /// `release_after_idle`, from giving its preallocated space back; each
    /// named once. Flushing them lets the log shrink at its next look.
    pub fn take_regions_holding_space(&self) -> Vec<u64> {
        std::mem::take(&mut *self.shared.holding_space.lock())
    }

    /// Forgets the edits of every region not in `live` (regions of dropped
    /// tables), so they no longer keep segments alive.
    pub fn forget_regions_except(&self, live: &std::collections::BTreeSet<u64>) {
        {
            let mut segs = self.shared.segments.lock();
            let dead: Vec<u64> = segs
                .closed
                .iter()
                .flat_map(|s| s.max_seq.keys().copied())
                .filter(|r| !live.contains(r))
                .collect();
            for r in dead {
                segs.flushed.insert(r, u64::MAX);
            }
        }
        self.shared.collect_garbage();
    }

    /// Number of segment files holding edits not yet known to be flushed,
    /// plus the active one.
    pub fn live_segments(&self) -> usize {
        self.shared.segments.lock().closed.len() + 1
    }

    /// Replays the edits of `region_id` with sequence ids above `after_seq`
    /// from the segments found at open, in log order.
    pub fn replay(
        &self,
        region_id: u64,
        after_seq: u64,
        apply: impl FnMut(Edits),
    ) -> Result<(), WalError> {
        self.replay_regions(&HashMap::from([(region_id, after_seq)]), apply)
    }

    /// Replays, in one pass over the segments found at open and in log
    /// order, the edits of every region in `after` with sequence ids above
    /// the one it maps to. A shard holds many regions: reading its log once
    /// for each would make a restart as many times slower.
    pub fn replay_regions(
        &self,
        after: &HashMap<u64, u64>,
        mut apply: impl FnMut(Edits),
    ) -> Result<(), WalError> {
        for seg in &self.recovered {
            let buf = match fs::read(&seg.path) {
                Ok(b) => b,
                // Deleted after its edits were flushed: nothing to replay.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(WalError::io(&seg.path, "read segment", e)),
            };
            let end = (seg.valid_len as usize).min(buf.len());
            let mut pos = SEGMENT_HEADER_LEN as usize;
            while pos < end {
                let Frame::Record {
                    kind,
                    payload,
                    next,
                } = record::read_frame(&buf[..end], pos, seg.id)
                else {
                    return Err(WalError::Corrupt {
                        path: seg.path.clone(),
                        offset: pos as u64,
                        what: "segment changed since it was checked at open",
                    });
                };
                let corrupt = |e: crate::codec::DecodeError| WalError::Corrupt {
                    path: seg.path.clone(),
                    offset: (pos + record::FRAME_HEADER_LEN + e.offset) as u64,
                    what: e.what,
                };
                if kind == TYPE_EDITS {
                    // Records of regions not asked for are skipped before
                    // their rows are decoded.
                    let region_id = record::edits_region(payload).map_err(corrupt)?;
                    if let Some(&after_seq) = after.get(&region_id) {
                        let edits = record::decode_edits(payload).map_err(corrupt)?;
                        // The record's last sequence id: a position-only
                        // record takes one of its own (`write.rs`), so it
                        // is replayed when it comes after the flush too.
                        let last = edits.first_seq + (edits.rows.len() as u64).max(1) - 1;
                        if last > after_seq {
                            apply(edits);
                        }
                    }
                }
                pos = next;
            }
        }
        Ok(())
    }

    /// Stops the writer after it has written and synced everything queued.
    pub fn close(&self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        if let Some(tx) = self.tx.lock().take() {
            let _ = tx.send(Request::Shutdown);
        }
        if let Some(t) = self.thread.lock().take() {
            // The last owner can be a write completed on the WAL's own
            // thread (a region dropped while its write was in flight):
            // that thread stops by itself once it sees the shutdown.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    /// The fatal error that stopped the WAL, if any.
    pub fn failure(&self) -> Option<String> {
        self.shared.failed.lock().clone()
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::io::IoBackendChoice;
    use super::*;

    #[test]
    fn a_dropped_request_fails_its_ticket_instead_of_hanging() {
        let ticket = Ticket::new();
        drop(Resolver::new(ticket.clone(), None));
        assert!(matches!(ticket.wait(), Err(WalError::Failed(_))));
        let ticket = Ticket::new();
        Resolver::new(ticket.clone(), None).resolve(Ok(()));
        assert!(ticket.wait().is_ok());
    }

    #[test]
    fn appends_after_close_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(
            dir.path(),
            WalOptions {
                segment_size: 64 * 1024,
                ..WalOptions::default()
            },
        )
        .unwrap();
        wal.close();
        assert!(matches!(
            wal.append(1, 1, vec![1], true),
            Err(WalError::Closed)
        ));
        assert!(matches!(wal.sync(), Err(WalError::Closed)));
    }

    #[test]
    fn a_sync_barrier_syncs_earlier_async_appends_and_they_replay() {
        for io in [IoBackendChoice::Auto, IoBackendChoice::Sync] {
            let dir = tempfile::tempdir().unwrap();
            let options = WalOptions {
                segment_size: 64 * 1024,
                io,
                // No timer sync during the test: only the barrier syncs.
                async_sync_interval: Duration::from_secs(3600),
                ..WalOptions::default()
            };
            let wal = Wal::open(dir.path(), options.clone()).unwrap();
            let rows = crate::cell::EntryBatch::from_rows(&[vec![crate::cell::Entry {
                key: crate::cell::encode_key(
                    b"r",
                    b"f",
                    b"q",
                    1,
                    crate::cell::CellKind::Put,
                    false,
                ),
                ttl_ms: None,
                value: b"v".to_vec(),
            }]]);
            for seq in 1..=3 {
                wal.append(7, seq, record::encode_edits(7, seq, None, &rows), false)
                    .unwrap()
                    .wait()
                    .unwrap();
            }
            let before = wal.stats().syncs.get();
            wal.sync().unwrap().wait().unwrap();
            assert_eq!(wal.stats().syncs.get(), before + 1, "{io:?}");
            assert_eq!(wal.stats().appends.load(Ordering::Relaxed), 3);
            drop(wal);
            let wal = Wal::open(dir.path(), options).unwrap();
            let mut seqs = Vec::new();
            wal.replay(7, 0, |e| seqs.push(e.first_seq)).unwrap();
            assert_eq!(seqs, vec![1, 2, 3], "{io:?}");
        }
    }

    #[test]
    fn one_pass_replays_each_asked_region_above_its_flushed_seq_in_log_order() {
        let dir = tempfile::tempdir().unwrap();
        let options = WalOptions {
            segment_size: 64 * 1024,
            ..WalOptions::default()
        };
        let wal = Wal::open(dir.path(), options.clone()).unwrap();
        let rows = crate::cell::EntryBatch::from_rows(&[vec![crate::cell::Entry {
            key: crate::cell::encode_key(b"r", b"f", b"q", 1, crate::cell::CellKind::Put, false),
            ttl_ms: None,
            value: vec![b'v'; 300],
        }]]);
        // Enough records for several segments, regions interleaved.
        for seq in 1..=400u64 {
            let region = seq % 4;
            wal.append(
                region,
                seq,
                record::encode_edits(region, seq, None, &rows),
                false,
            )
            .unwrap()
            .wait()
            .unwrap();
        }
        drop(wal);
        let wal = Wal::open(dir.path(), options).unwrap();
        assert!(wal.recovered.len() > 1, "the test needs several segments");
        // Region 2 is not asked for; region 3 has flushed through seq 199.
        let after = HashMap::from([(0, 0), (1, 0), (3, 199)]);
        let mut seen: Vec<(u64, u64)> = Vec::new();
        wal.replay_regions(&after, |e| seen.push((e.region_id, e.first_seq)))
            .unwrap();
        let expected: Vec<(u64, u64)> = (1..=400u64)
            .map(|seq| (seq % 4, seq))
            .filter(|&(r, seq)| r == 0 || r == 1 || (r == 3 && seq > 199))
            .collect();
        assert_eq!(seen, expected);
        // The single-region form gives the same as the one pass, per region.
        let mut three = Vec::new();
        wal.replay(3, 199, |e| three.push(e.first_seq)).unwrap();
        let from_pass: Vec<u64> = seen.iter().filter(|p| p.0 == 3).map(|p| p.1).collect();
        assert_eq!(three, from_pass);
    }
}
