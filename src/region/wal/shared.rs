//! What the WAL and its writer thread share: the segments closed and kept,
//! what regions flushed, the failure that stopped the log, its counters.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

use parking_lot::Mutex;

use super::io::SyncCounter;
use super::options::WalOptions;

/// Counters the WAL keeps for metrics and tests.
#[derive(Debug, Default)]
pub struct WalStats {
    pub appends: AtomicU64,
    pub bytes: AtomicU64,
    pub batches: AtomicU64,
    pub syncs: Arc<SyncCounter>,
    /// Synced batches whose writers were told their records are durable:
    /// each must have had a data sync of its own or a later one.
    pub group_commits: AtomicU64,
    /// Sum of sync latencies in µs, for a mean in benchmarks.
    pub sync_micros: AtomicU64,
    pub segments_rolled: AtomicU64,
    /// Damaged spots in the middle of the log that recovery stopped at.
    pub damage_stops: AtomicU64,
    /// Writes are waiting for room to prepare the next segment.
    pub disk_full: AtomicBool,
    /// Most batches seen in flight at once (io_uring pipelining at work).
    pub max_in_flight: AtomicU64,
}

#[derive(Debug)]
pub(super) struct ClosedSegment {
    pub(super) id: u64,
    pub(super) path: PathBuf,
    /// Highest sequence id per region in the segment.
    pub(super) max_seq: HashMap<u64, u64>,
}

#[derive(Debug, Default)]
pub(super) struct Segments {
    pub(super) closed: Vec<ClosedSegment>,
    pub(super) flushed: HashMap<u64, u64>,
    pub(super) free: Vec<PathBuf>,
    /// A next segment is prepared (or being prepared) beside the live one.
    pub(super) spare_ready: bool,
}

impl Segments {
    /// Whether every edit of `max_seq` (region -> highest sequence id) is
    /// in store files.
    pub(super) fn all_flushed(&self, max_seq: &HashMap<u64, u64>) -> bool {
        self.unflushed(max_seq).next().is_none()
    }

    /// The regions of `max_seq` (region -> highest sequence id) with edits
    /// not in store files yet.
    pub(super) fn unflushed<'a>(
        &'a self,
        max_seq: &'a HashMap<u64, u64>,
    ) -> impl Iterator<Item = u64> + 'a {
        max_seq
            .iter()
            .filter(|(region, max)| self.flushed.get(region).is_none_or(|f| f < max))
            .map(|(region, _)| *region)
    }
}

pub(super) struct Shared {
    pub(super) dir: PathBuf,
    pub(super) options: WalOptions,
    pub(super) segments: Mutex<Segments>,
    pub(super) failed: Mutex<Option<String>>,
    pub(super) stats: WalStats,
    /// Set by `close`: a writer waiting out a full disk gives up.
    pub(super) closing: AtomicBool,
    /// Regions whose unflushed edits keep an idle log from giving its
    /// space back: the writer names them, the store has them flushed.
    pub(super) holding_space: Mutex<Vec<u64>>,
}

impl Shared {
    /// Deletes (or keeps for reuse) closed segments whose every edit is in
    /// store files.
    pub(super) fn collect_garbage(&self) {
        let mut segs = self.segments.lock();
        let Segments {
            closed,
            flushed,
            free,
            spare_ready,
        } = &mut *segs;
        let kept_ready = free.len() + usize::from(*spare_ready);
        let mut room = self.options.spare_segments.saturating_sub(kept_ready);
        let mut keep = Vec::with_capacity(closed.len());
        for seg in closed.drain(..) {
            let done = seg
                .max_seq
                .iter()
                .all(|(region, max)| flushed.get(region).is_some_and(|f| f >= max));
            if !done {
                keep.push(seg);
                continue;
            }
            if self.options.recycle && room > 0 {
                room -= 1;
                let to = self.dir.join(format!("{:020}.free", seg.id));
                if crate::fsutil::rename(&seg.path, &to).is_ok() {
                    free.push(to);
                    continue;
                }
            }
            let _ = crate::fsutil::remove_file(&seg.path);
        }
        *closed = keep;
    }
}
