//! Shared flush and compaction threads for many regions: a store with
//! hundreds of regions runs a fixed number of each (HBase's flusher count
//! and compaction threads) instead of two threads per region.
//!
//! Regions register themselves; a request names a region by a weak
//! reference, so a closed or dropped region costs nothing. Flush threads
//! also look over every registered region on a timer for MemStores that are
//! too old or too big.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};
use parking_lot::Mutex;

use crate::error::Result;

/// What the shared threads do to a region. The region implements it
/// (`region.rs`, over its `Inner`), so these threads, and the region's
/// state that asks them for work, need not know how a flush or a
/// compaction runs.
pub(crate) trait Maintained: Send + Sync {
    fn is_closed(&self) -> bool;
    /// The MemStores are full, old, or over the blocking limit.
    fn flush_due(&self) -> bool;
    fn clear_flush_request(&self);
    /// Notes a compaction request as queued; true if one already was.
    fn mark_compaction_requested(&self) -> bool;
    /// The region's queued compaction request is being served (or could
    /// not be queued): a new one may be queued.
    fn clear_compaction_request(&self);
    /// Flushes the MemStores now, and notes how it went.
    fn flush_now(&self) -> Result<()>;
    /// A minor compaction, if the files call for one.
    fn compact_minor(&self) -> Result<()>;
}

/// How often flush threads look for aged MemStores.
const TICK: Duration = Duration::from_millis(250);

pub struct Maintenance {
    flush_tx: Mutex<Option<Sender<Weak<dyn Maintained>>>>,
    compact_tx: Mutex<Option<Sender<Weak<dyn Maintained>>>>,
    regions: Arc<Mutex<Vec<Weak<dyn Maintained>>>>,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintenance").finish_non_exhaustive()
    }
}

impl Maintenance {
    pub fn new(
        flush_threads: usize,
        compaction_threads: usize,
    ) -> std::io::Result<Arc<Maintenance>> {
        let (flush_tx, flush_rx) = bounded::<Weak<dyn Maintained>>(1024);
        let (compact_tx, compact_rx) = bounded::<Weak<dyn Maintained>>(1024);
        let m = Arc::new(Maintenance {
            flush_tx: Mutex::new(Some(flush_tx)),
            compact_tx: Mutex::new(Some(compact_tx)),
            regions: Arc::new(Mutex::new(Vec::new())),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Mutex::new(Vec::new()),
        });
        for i in 0..flush_threads.max(1) {
            let (rx, regions, stop) = (flush_rx.clone(), m.regions.clone(), m.stop.clone());
            let weak_m = Arc::downgrade(&m);
            m.threads.lock().push(
                std::thread::Builder::new()
                    .name(format!("halite-flush-{i}"))
                    .spawn(move || flusher(rx, regions, stop, weak_m))?,
            );
        }
        for i in 0..compaction_threads.max(1) {
            let (rx, stop) = (compact_rx.clone(), m.stop.clone());
            m.threads.lock().push(
                std::thread::Builder::new()
                    .name(format!("halite-compact-{i}"))
                    .spawn(move || compactor(rx, stop))?,
            );
        }
        Ok(m)
    }

    pub(crate) fn register(&self, region: &Arc<dyn Maintained>) {
        let mut regions = self.regions.lock();
        regions.retain(|r| r.strong_count() > 0);
        regions.push(Arc::downgrade(region));
    }

    /// Queues a flush request; false if it could not be queued.
    pub(crate) fn request_flush(&self, region: &Arc<dyn Maintained>) -> bool {
        self.flush_tx
            .lock()
            .as_ref()
            .is_some_and(|tx| tx.try_send(Arc::downgrade(region)).is_ok())
    }

    /// Queues a compaction request unless the region has one queued
    /// already (the compaction check and flushes ask often; a queue full of
    /// one busy region's requests would drop another region's).
    pub(crate) fn request_compaction(&self, region: &Arc<dyn Maintained>) {
        if region.mark_compaction_requested() {
            return;
        }
        let queued = self
            .compact_tx
            .lock()
            .as_ref()
            .is_some_and(|tx| tx.try_send(Arc::downgrade(region)).is_ok());
        if !queued {
            region.clear_compaction_request();
        }
    }

    /// Stops the threads after the work they are doing.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.flush_tx.lock().take();
        self.compact_tx.lock().take();
        let me = std::thread::current().id();
        for t in self.threads.lock().drain(..) {
            // Never join ourselves, should the last reference go on a pool
            // thread: that thread exits on its own once it sees `stop`.
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn flush_and_compact(inner: &Arc<dyn Maintained>, maint: &Weak<Maintenance>) {
    if inner.is_closed() || !inner.flush_due() {
        return;
    }
    let outcome = inner.flush_now();
    if outcome.is_ok()
        && let Some(m) = maint.upgrade()
    {
        m.request_compaction(inner);
    }
    // On failure the data is still in the MemStore and the WAL; the next
    // request or tick tries again.
}

fn flusher(
    rx: Receiver<Weak<dyn Maintained>>,
    regions: Arc<Mutex<Vec<Weak<dyn Maintained>>>>,
    stop: Arc<AtomicBool>,
    maint: Weak<Maintenance>,
) {
    loop {
        match rx.recv_timeout(TICK) {
            Ok(weak) => {
                if let Some(inner) = weak.upgrade() {
                    inner.clear_flush_request();
                    flush_and_compact(&inner, &maint);
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let live: Vec<Arc<dyn Maintained>> =
                    regions.lock().iter().filter_map(Weak::upgrade).collect();
                for inner in live {
                    flush_and_compact(&inner, &maint);
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn compactor(rx: Receiver<Weak<dyn Maintained>>, stop: Arc<AtomicBool>) {
    while let Ok(weak) = rx.recv() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if let Some(inner) = weak.upgrade() {
            // Cleared first: a flush during this compaction queues the next.
            inner.clear_compaction_request();
            if !inner.is_closed() {
                // Failures leave the files as they were; the next flush or
                // compaction check retries.
                let _ = inner.compact_minor();
            }
        }
    }
}
