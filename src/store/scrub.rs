//! The scrub: every live store file of this node's regions is read again
//! from disk, at a bounded rate, and checked as `halite verify` checks it
//! (every block's checksum and encoding, key order, the index, the meta
//! block, the bloom filter). A damaged file is named in `/readyz` and
//! counted in `halite_scrub_damaged_files` until it is no longer live.
//!
//! Reads go around the block cache, so what is checked is what the disk
//! holds, not a copy read before the damage. One file is checked at a
//! time, read as fast as the disk gives it; the next waits `n / rate`
//! after a file of `n` bytes, so `rate` is the average, not a ceiling,
//! and at least [`IDLE_PER_BUSY`] times as long as the check took: the
//! scrub takes at most a fifth of one core from ingest and queries
//! (checking a compressed time-series file costs far more CPU than
//! reading it). Its thread also runs at the lowest CPU priority (nice
//! 19): when every core is busy it waits for the others, and its rest,
//! measured on the clock, grows with the wait. A stopping server does not
//! wait for a file's check to end. A file that reads clean again
//! (restored) is no longer damaged.

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

/// The least time the scrub rests after a check, per unit of time the
/// check took.
const IDLE_PER_BUSY: u32 = 4;

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
        let niced = std::sync::atomic::AtomicBool::new(false);
        let chore = Chore::start_stoppable(store, "halite-scrub", TICK, move |store, go_on| {
            if !niced.swap(true, std::sync::atomic::Ordering::Relaxed) {
                lowest_cpu_priority();
            }
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
            let began = Instant::now();
            if !check(store, &path, file_id, go_on) {
                return;
            }
            metrics::counter!("halite_scrub_checked_bytes_total").increment(bytes);
            metrics::counter!("halite_scrub_checked_files_total").increment(1);
            let rest = Duration::from_secs_f64(bytes as f64 / rate as f64)
                .max(began.elapsed() * IDLE_PER_BUSY);
            pass.next_at = Instant::now() + rest;
        })?;
        Ok(Some(chore))
    }
}

/// Checks one file as it is on disk now: damage is noted in the store, a
/// clean check clears what an earlier one noted (the file was restored).
/// False when `go_on` stopped the check before the file's end.
fn check(store: &Store, path: &std::path::Path, file_id: u64, go_on: &dyn Fn() -> bool) -> bool {
    let checked = SstReader::open(path, file_id, store.cache.clone(), false, false)
        .and_then(|r| r.check_all_while(go_on));
    let what = match checked {
        Ok(None) => return false,
        Ok(Some(_)) => {
            let damaged = store.clear_damage(path);
            metrics::gauge!("halite_scrub_damaged_files").set(damaged as f64);
            return true;
        }
        // Compacted away or dropped since the pass began: nothing to say.
        Err(SstError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return true;
        }
        // Out of descriptors, a permission, a failing read: not the
        // file's bytes. Said, and tried again next pass.
        Err(e @ SstError::Io { .. }) => {
            tracing::warn!(path = %path.display(), error = %e, "the scrub could not read a store file");
            return true;
        }
        Err(SstError::Corrupt { offset, what, .. }) => format!("at offset {offset}: {what}"),
    };
    tracing::error!(path = %path.display(), problem = %what, "the scrub found a damaged store file");
    let damaged = store.note_damage(path, what);
    metrics::gauge!("halite_scrub_damaged_files").set(damaged as f64);
    true
}

/// Puts the calling thread at nice 19, the lowest CPU priority. Checks
/// cost CPU (decoding every block) that ingest and queries need more; at
/// this priority the scrub takes what they leave. A refusal (a sandbox)
/// leaves the thread where it was, which the rate bounds anyway.
fn lowest_cpu_priority() {
    // SAFETY: gettid and setpriority take no pointers; on Linux a
    // thread id names that one thread for PRIO_PROCESS.
    let refused = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) != 0
    };
    if refused {
        tracing::debug!(error = %std::io::Error::last_os_error(), "the scrub's thread keeps its CPU priority");
    }
}
