//! Sources of entries (MemStores and store files) and their k-way merge.
//!
//! Sources are ordered newest first: when two carry the same cell key
//! (row, family, qualifier, timestamp, kind), the newer one's entry is the
//! one returned and the rest are skipped.

use std::cmp::Ordering;

use crate::cell::compare_keys;
use crate::error::Result;
use crate::region::memstore::cursor::MemCursor;
use crate::region::sst::SstIter;

/// One input of a merge.
pub enum Source {
    Mem(MemCursor),
    File(SstIter),
}

impl Source {
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        match self {
            Source::Mem(m) => m.seek(target),
            Source::File(f) => f.seek(target)?,
        }
        Ok(())
    }
    pub fn valid(&self) -> bool {
        match self {
            Source::Mem(m) => m.current().is_some(),
            Source::File(f) => f.valid(),
        }
    }
    /// Only meaningful when `valid()`.
    pub fn key(&self) -> &[u8] {
        match self {
            Source::Mem(m) => m.key(),
            Source::File(f) => f.key(),
        }
    }
    pub fn ttl_ms(&self) -> Option<u64> {
        match self {
            Source::Mem(m) => m.current().and_then(|e| e.ttl_ms),
            Source::File(f) => f.ttl_ms(),
        }
    }
    pub fn value(&self) -> &[u8] {
        match self {
            Source::Mem(m) => m.current().map_or(&[], |e| e.value()),
            Source::File(f) => f.value(),
        }
    }
    pub fn advance(&mut self) -> Result<()> {
        match self {
            Source::Mem(m) => m.advance(),
            Source::File(f) => f.advance()?,
        }
        Ok(())
    }
    /// Moves forward to the first key >= `target` (not behind the current).
    pub fn skip_to(&mut self, target: &[u8]) -> Result<()> {
        match self {
            Source::Mem(m) => m.skip_to(target),
            Source::File(f) => f.skip_to(target)?,
        }
        Ok(())
    }
    /// The value, shared with the block it was read from where possible.
    pub fn value_bytes(&self) -> bytes::Bytes {
        match self {
            Source::Mem(m) => m.current().map_or_else(bytes::Bytes::new, |e| {
                bytes::Bytes::copy_from_slice(e.value())
            }),
            Source::File(f) => f.value_bytes(),
        }
    }
    /// The greatest row strictly below `row` (or the last row) in this source.
    pub fn last_row_before(&self, row: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        Ok(match self {
            Source::Mem(m) => m.last_row_before(row),
            Source::File(f) => f.reader().last_row_before(row)?,
        })
    }
}

/// Merges sources into one stream in key order without duplicates. A
/// binary min-heap of source indices; ties go to the lower index (newer).
pub struct Merge {
    sources: Vec<Source>,
    heap: Vec<usize>,
    /// Key of the entry last returned, to skip older duplicates.
    last: Vec<u8>,
    /// The least source under the top (`heap[1]` or `heap[2]`), found
    /// when the top last changed: while only the top moves it stays so.
    runner_up: Option<usize>,
    /// The top's key is below the runner-up's, so no other source holds
    /// it: advancing takes one comparison with the runner-up instead of
    /// a sift and a duplicate check (a compaction's sources take turns
    /// once a series, so this is most entries).
    top_alone: bool,
}

impl Merge {
    pub fn new(sources: Vec<Source>) -> Self {
        Merge {
            sources,
            heap: Vec::new(),
            last: Vec::new(),
            runner_up: None,
            top_alone: false,
        }
    }

    fn less(&self, a: usize, b: usize) -> bool {
        match compare_keys(self.sources[a].key(), self.sources[b].key()) {
            Ordering::Less => true,
            Ordering::Equal => a < b,
            Ordering::Greater => false,
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < n && self.less(self.heap[l], self.heap[m]) {
                m = l;
            }
            if r < n && self.less(self.heap[r], self.heap[m]) {
                m = r;
            }
            if m == i {
                return;
            }
            self.heap.swap(i, m);
            i = m;
        }
    }

    fn rebuild(&mut self) {
        self.heap.clear();
        self.heap
            .extend((0..self.sources.len()).filter(|&i| self.sources[i].valid()));
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
        self.settle_top();
    }

    /// Finds the runner-up of a new top and whether the top is alone.
    fn settle_top(&mut self) {
        self.runner_up = match self.heap.len() {
            0 | 1 => None,
            2 => Some(self.heap[1]),
            _ if self.less(self.heap[2], self.heap[1]) => Some(self.heap[2]),
            _ => Some(self.heap[1]),
        };
        self.top_alone = self.runner_up.is_some_and(|r| {
            compare_keys(self.sources[self.heap[0]].key(), self.sources[r].key()) == Ordering::Less
        });
    }

    /// Positions every source at the first key >= `target`.
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        for s in &mut self.sources {
            s.seek(target)?;
        }
        self.rebuild();
        Ok(())
    }

    /// Moves forward to the first key >= `target`, which must not be
    /// before the current key: each source behind it steps forward (within
    /// a block, or seeks when the target is further), the rest stay put.
    pub fn skip_to(&mut self, target: &[u8]) -> Result<()> {
        for &i in &self.heap {
            if compare_keys(self.sources[i].key(), target) == Ordering::Less {
                self.sources[i].skip_to(target)?;
            }
        }
        self.rebuild();
        Ok(())
    }

    pub fn valid(&self) -> bool {
        !self.heap.is_empty()
    }

    fn top(&self) -> &Source {
        &self.sources[self.heap[0]]
    }
    pub fn key(&self) -> &[u8] {
        self.top().key()
    }
    pub fn ttl_ms(&self) -> Option<u64> {
        self.top().ttl_ms()
    }
    pub fn value(&self) -> &[u8] {
        self.top().value()
    }
    pub fn value_bytes(&self) -> bytes::Bytes {
        self.top().value_bytes()
    }

    fn advance_top(&mut self) -> Result<()> {
        let i = self.heap[0];
        self.sources[i].advance()?;
        if !self.sources[i].valid() {
            let last = self.heap.len() - 1;
            self.heap.swap(0, last);
            self.heap.pop();
        }
        // One source left (a compacted region, mostly): nothing to reorder.
        if self.heap.len() > 1 {
            self.sift_down(0);
        }
        Ok(())
    }

    /// Moves past the current entry and every older duplicate of it.
    pub fn advance(&mut self) -> Result<()> {
        if self.heap.is_empty() {
            return Ok(());
        }
        if self.heap.len() == 1 {
            // One source never repeats a key: store files hold unique keys
            // and MemStore cursors resolve equal keys to the newest.
            return self.advance_top();
        }
        if self.top_alone
            && let Some(runner_up) = self.runner_up
        {
            let top = self.heap[0];
            self.sources[top].advance()?;
            if self.sources[top].valid()
                && compare_keys(self.sources[top].key(), self.sources[runner_up].key())
                    == Ordering::Less
            {
                return Ok(());
            }
            // Nothing else held the key just passed: reorder only.
            if !self.sources[top].valid() {
                self.heap.swap_remove(0);
            }
            self.sift_down(0);
            self.settle_top();
            return Ok(());
        }
        self.last.clear();
        let top = self.heap[0];
        self.last.extend_from_slice(self.sources[top].key());
        self.advance_top()?;
        while !self.heap.is_empty()
            && compare_keys(self.sources[self.heap[0]].key(), &self.last) == Ordering::Equal
        {
            self.advance_top()?;
        }
        self.settle_top();
        Ok(())
    }

    /// The greatest row strictly below `row` over every source.
    pub fn last_row_before(&self, row: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        let mut best: Option<Vec<u8>> = None;
        for s in &self.sources {
            if let Some(r) = s.last_row_before(row)?
                && best.as_ref().is_none_or(|b| r > *b)
            {
                best = Some(r);
            }
        }
        Ok(best)
    }
}
