//! The scrub: every live store file of this node's regions is read again
//! from disk, at a bounded rate, and checked as `halite verify` checks it
//! (every block's checksum and encoding, key order, the index, the meta
//! block, the bloom filter). A damaged file is named in `/readyz` and
//! counted in `halite_scrub_damaged_files` until it is no longer live.
//!
//! Reads go around the block cache, so what is checked is what the disk
//! holds, not a copy read before the damage. One file is checked at a
//! time, read as fast as the disk gives it; the next waits `n / rate`
//! after a file of `n` bytes, so `rate` is the average, not a ceiling. A
//! file that reads clean again (restored) is no longer damaged.

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Store;
use super::chores::Chore;
use crate::region::sst::SstReader;
use crate::region::sst::format::SstError;

/// How often the chore looks whether the next file is due.
const TICK: Duration = Duration::from_millis(200);

struct Pass {
    /// The files of this pass still to check.
    queue: VecDeque<(PathBuf, u64, u64)>,
    /// Whether a pass over some files is under way (it counts when done).
    under_way: bool,
    next_at: Instant,
}

/// Starts the scrub at `rate` bytes a second (0: never).
pub struct Scrubber;

impl Scrubber {
    pub fn start(store: &Arc<Store>, rate: u64) -> std::io::Result<Option<Chore>> {
        if rate == 0 {
            return Ok(None);
        }
        let pass = Mutex::new(Pass {
            queue: VecDeque::new(),
            under_way: false,
            next_at: Instant::now(),
        });
        let chore = Chore::start(store, "halite-scrub", TICK, move |store| {
            let mut pass = pass.lock();
            if Instant::now() < pass.next_at {
                return;
            }
            if pass.queue.is_empty() {
                if pass.under_way {
                    metrics::counter!("halite_scrub_passes_total").increment(1);
                }
                let files = store.live_store_files();
                // Damage of a file no longer live (compacted away, its
                // table dropped) is over.
                let live: BTreeSet<PathBuf> = files.iter().map(|(p, _, _)| p.clone()).collect();
                let damaged = store.forget_damage_except(&live);
                metrics::gauge!("halite_scrub_damaged_files").set(damaged as f64);
                pass.queue = files.into();
                pass.under_way = !pass.queue.is_empty();
                if !pass.under_way {
                    // Nothing to check yet: look again in a while.
                    pass.next_at = Instant::now() + Duration::from_secs(1);
                    return;
                }
            }
            let Some((path, file_id, bytes)) = pass.queue.pop_front() else {
                return;
            };
            check(store, &path, file_id);
            metrics::counter!("halite_scrub_checked_bytes_total").increment(bytes);
            metrics::counter!("halite_scrub_checked_files_total").increment(1);
            pass.next_at = Instant::now() + Duration::from_secs_f64(bytes as f64 / rate as f64);
        })?;
        Ok(Some(chore))
    }
}

/// Checks one file as it is on disk now: damage is noted in the store, a
/// clean check clears what an earlier one noted (the file was restored).
fn check(store: &Store, path: &std::path::Path, file_id: u64) {
    let checked = SstReader::open(path, file_id, store.cache.clone(), false, false)
        .and_then(|r| r.check_all());
    let what = match checked {
        Ok(_) => {
            let damaged = store.clear_damage(path);
            metrics::gauge!("halite_scrub_damaged_files").set(damaged as f64);
            return;
        }
        // Compacted away or dropped since the pass began: nothing to say.
        Err(SstError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return;
        }
        // Out of descriptors, a permission, a failing read: not the
        // file's bytes. Said, and tried again next pass.
        Err(e @ SstError::Io { .. }) => {
            tracing::warn!(path = %path.display(), error = %e, "the scrub could not read a store file");
            return;
        }
        Err(SstError::Corrupt { offset, what, .. }) => format!("at offset {offset}: {what}"),
    };
    tracing::error!(path = %path.display(), problem = %what, "the scrub found a damaged store file");
    let damaged = store.note_damage(path, what);
    metrics::gauge!("halite_scrub_damaged_files").set(damaged as f64);
}
