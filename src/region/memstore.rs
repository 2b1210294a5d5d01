//! The MemStore: a lock-free skiplist of recent edits that readers scan while
//! the writer inserts, plus the MVCC read point that makes a row's edits
//! visible all at once.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};

use crossbeam_skiplist::SkipMap;
use parking_lot::{Condvar, Mutex};

use crate::cell::compare_keys;

/// A MemStore key: the encoded cell key and the edit's sequence id. Equal
/// cell keys order newest edit first, so the first visible one wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemKey {
    pub key: Vec<u8>,
    pub seq: u64,
}

impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_keys(&self.key, &other.key).then_with(|| other.seq.cmp(&self.seq))
    }
}
impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Clone)]
pub struct MemValue {
    pub ttl_ms: Option<u64>,
    pub value: Vec<u8>,
}

/// Fixed per-entry overhead counted against the flush size: skiplist node,
/// tower pointers and two `Vec` headers.
const ENTRY_OVERHEAD: usize = 96;

#[derive(Debug, Default)]
pub struct MemStore {
    map: SkipMap<MemKey, MemValue>,
    bytes: AtomicUsize,
    max_seq: AtomicU64,
    min_ts: AtomicU64,
    max_ts: AtomicU64,
    /// When the first edit arrived (ms), for age-based flushes.
    first_write_ms: AtomicU64,
    /// Highest sequence id the MemStore may hold, fixed when it is taken
    /// out of service for a flush.
    sealed_seq: AtomicU64,
}

impl MemStore {
    pub fn new() -> Self {
        MemStore {
            min_ts: AtomicU64::new(u64::MAX),
            ..Default::default()
        }
    }

    pub fn insert(&self, key: Vec<u8>, seq: u64, ttl_ms: Option<u64>, value: Vec<u8>, now_ms: u64) {
        let size = key.len() + value.len() + ENTRY_OVERHEAD;
        if let Some(k) = crate::cell::KeyRef::parse(&key) {
            self.min_ts.fetch_min(k.timestamp, AtomicOrdering::Relaxed);
            self.max_ts.fetch_max(k.timestamp, AtomicOrdering::Relaxed);
        }
        self.map
            .insert(MemKey { key, seq }, MemValue { ttl_ms, value });
        self.bytes.fetch_add(size, AtomicOrdering::Relaxed);
        self.max_seq.fetch_max(seq, AtomicOrdering::Relaxed);
        let _ = self.first_write_ms.compare_exchange(
            0,
            now_ms.max(1),
            AtomicOrdering::Relaxed,
            AtomicOrdering::Relaxed,
        );
    }

    pub fn bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn max_seq(&self) -> u64 {
        self.max_seq.load(AtomicOrdering::Relaxed)
    }
    pub fn time_range(&self) -> (u64, u64) {
        (
            self.min_ts.load(AtomicOrdering::Relaxed),
            self.max_ts.load(AtomicOrdering::Relaxed),
        )
    }
    pub fn first_write_ms(&self) -> u64 {
        self.first_write_ms.load(AtomicOrdering::Relaxed)
    }
    pub fn seal(&self, seq: u64) {
        self.sealed_seq.store(seq, AtomicOrdering::Release);
    }
    pub fn sealed_seq(&self) -> u64 {
        self.sealed_seq.load(AtomicOrdering::Acquire)
    }

    /// Up to `n` entries from `from` on (inclusive or not) with sequence ids
    /// at most `read_point`, appended to `out`. Batching amortises the
    /// skiplist search over many entries.
    pub fn read_batch(
        &self,
        from: Bound<&MemKey>,
        read_point: u64,
        n: usize,
        out: &mut VecDeque<(MemKey, MemValue)>,
    ) -> Option<MemKey> {
        let mut last = None;
        let mut taken = 0;
        for e in self.map.range((from, Bound::Unbounded)) {
            last = Some(e.key().clone());
            taken += 1;
            if e.key().seq <= read_point {
                out.push_back((e.key().clone(), e.value().clone()));
            }
            if taken >= n {
                break;
            }
        }
        last
    }

    /// The greatest row strictly below `row` (any row with `None`) that has
    /// an entry visible at `read_point`.
    pub fn last_row_before(&self, row: Option<&[u8]>, read_point: u64) -> Option<Vec<u8>> {
        let upper = row.map(|r| MemKey {
            key: crate::cell::first_key_of_row(r),
            seq: u64::MAX,
        });
        let range = match &upper {
            Some(u) => self
                .map
                .range::<MemKey, _>((Bound::Unbounded, Bound::Excluded(u))),
            None => self
                .map
                .range::<MemKey, _>((Bound::Unbounded, Bound::Unbounded)),
        };
        range
            .rev()
            .find(|e| e.key().seq <= read_point)
            .map(|e| crate::cell::row_of(&e.key().key).to_vec())
    }
}

/// Multi-version concurrency control: hands out sequence ids and publishes
/// the read point only past edits that are complete, in order.
#[derive(Debug)]
pub struct Mvcc {
    inner: Mutex<MvccInner>,
    read_point: AtomicU64,
    advanced: Condvar,
    poisoned: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct MvccInner {
    next_seq: u64,
    /// (last seq of a write, done) in seq order.
    pending: VecDeque<(u64, bool)>,
}

impl Mvcc {
    pub fn new(last_seq: u64) -> Self {
        Mvcc {
            inner: Mutex::new(MvccInner {
                next_seq: last_seq + 1,
                pending: VecDeque::new(),
            }),
            read_point: AtomicU64::new(last_seq),
            advanced: Condvar::new(),
            poisoned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Reserves `n` consecutive sequence ids; returns the first.
    pub fn begin(&self, n: u64) -> u64 {
        let mut inner = self.inner.lock();
        let first = inner.next_seq;
        inner.next_seq += n.max(1);
        let last = inner.next_seq - 1;
        inner.pending.push_back((last, false));
        first
    }

    /// Marks the write ending at `last` complete and advances the read point
    /// over every complete write at the front.
    pub fn complete(&self, last: u64) {
        let mut inner = self.inner.lock();
        if let Some(slot) = inner.pending.iter_mut().find(|(l, _)| *l == last) {
            slot.1 = true;
        }
        let mut advanced = None;
        while let Some(&(l, true)) = inner.pending.front() {
            inner.pending.pop_front();
            advanced = Some(l);
        }
        if let Some(l) = advanced {
            self.read_point.store(l, AtomicOrdering::Release);
            self.advanced.notify_all();
        }
    }

    pub fn read_point(&self) -> u64 {
        self.read_point.load(AtomicOrdering::Acquire)
    }

    /// Highest sequence id handed out.
    pub fn last_assigned(&self) -> u64 {
        self.inner.lock().next_seq - 1
    }

    /// Blocks until every write up to `seq` is complete; false if a write
    /// failed for good (the region stopped), so it never will be.
    pub fn wait_for(&self, seq: u64) -> bool {
        let mut inner = self.inner.lock();
        while self.read_point() < seq {
            if self.poisoned.load(AtomicOrdering::Acquire) {
                return false;
            }
            if inner.pending.is_empty() {
                return true;
            }
            self.advanced.wait(&mut inner);
        }
        true
    }

    /// A write failed and will never complete: wake everyone waiting on it.
    pub fn poison(&self) {
        let _inner = self.inner.lock();
        self.poisoned.store(true, AtomicOrdering::Release);
        self.advanced.notify_all();
    }
}

/// The MemStores a reader sees: the active one and those being flushed.
pub type MemStores = Vec<Arc<MemStore>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_point_advances_only_over_complete_prefix() {
        let m = Mvcc::new(10);
        let a = m.begin(2); // 11..=12
        let b = m.begin(1); // 13
        assert_eq!((a, b), (11, 13));
        m.complete(13);
        assert_eq!(m.read_point(), 10);
        m.complete(12);
        assert_eq!(m.read_point(), 13);
    }
}
