//! The store's background chores: each runs every interval on a thread of
//! its own and holds the store weakly.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Sender, bounded};

use super::Store;

/// A chore of the store run every interval on a thread of its own. It
/// holds the store weakly: it never keeps it open.
pub struct Chore {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Chore {
    pub fn start(
        store: &Arc<Store>,
        name: &str,
        every: Duration,
        chore: impl Fn(&Store) + Send + 'static,
    ) -> std::io::Result<Chore> {
        Self::start_stoppable(store, name, every, move |store, _| chore(store))
    }

    /// [`Chore::start`] for a chore whose run can be long: it is handed
    /// a check that turns false once the chore is stopped, so that
    /// [`Chore::stop`] need not wait for the run to end.
    pub fn start_stoppable(
        store: &Arc<Store>,
        name: &str,
        every: Duration,
        chore: impl Fn(&Store, &dyn Fn() -> bool) + Send + 'static,
    ) -> std::io::Result<Chore> {
        let (stop, rx) = bounded::<()>(1);
        let store = Arc::downgrade(store);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // Stopping drops the sender.
                let go_on = || {
                    !matches!(
                        rx.try_recv(),
                        Err(crossbeam_channel::TryRecvError::Disconnected)
                    )
                };
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) = rx.recv_timeout(every)
                {
                    let Some(store) = store.upgrade() else { return };
                    chore(&store, &go_on);
                }
            })?;
        Ok(Chore {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops; waits for a run under way to finish.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Chore {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Checks region sizes every interval and splits the oversized ones.
pub struct Splitter;

impl Splitter {
    pub fn start(store: &Arc<Store>, every: Duration) -> std::io::Result<Chore> {
        Chore::start(store, "halite-split", every, |store| {
            if let Err(e) = store.split_oversized() {
                tracing::error!(error = %e, "region split failed; the region stays whole");
            }
        })
    }
}

/// Every interval, asks each region served here for a compaction check,
/// so that retention, closed time windows and the periodic major
/// compaction do not wait for a flush (`region.compaction.check_interval`).
pub struct CompactionChecker;

impl CompactionChecker {
    pub fn start(store: &Arc<Store>, every: Duration) -> std::io::Result<Chore> {
        Chore::start(store, "halite-compact-check", every, |store| {
            store.request_compaction_checks()
        })
    }
}

/// Keeps all MemStores together under the global limit also while no
/// write comes (writers enforce it only as they arrive): over it, the
/// largest are flushed. And flushes the regions an idle WAL names as
/// holding its space, so a quiet node's logs shrink.
pub struct MemoryGuard;

impl MemoryGuard {
    /// How often the MemStores are weighed.
    pub const EVERY: Duration = Duration::from_millis(250);

    pub fn start(store: &Arc<Store>) -> std::io::Result<Chore> {
        Chore::start(store, "halite-memory", Self::EVERY, |store| {
            store.relieve_memory();
            store.flush_regions_holding_idle_wals();
        })
    }
}

/// Cluster mode: reads the shared catalog again every few seconds, so
/// tables another node created are served here too.
pub struct CatalogRefresh;

impl CatalogRefresh {
    pub const EVERY: Duration = super::cluster::CATALOG_REFRESH;

    pub fn start(store: &Arc<Store>) -> std::io::Result<Chore> {
        Chore::start(store, "halite-catalog", Self::EVERY, |store| {
            if let Err(e) = store.refresh_catalog() {
                tracing::warn!(error = %e, "reading the shared catalog failed; trying again");
            }
        })
    }
}
