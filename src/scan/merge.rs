//! Sources of entries (MemStores and store files) and their k-way merge.
//!
//! Sources are ordered newest first: when two carry the same cell key
//! (row, family, qualifier, timestamp, kind), the newer one's entry is the
//! one returned and the rest are skipped.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use crate::cell::compare_keys;
use crate::error::Result;
use crate::region::memstore::{MemKey, MemStore, MemValue};
use crate::region::sst::SstIter;

const MEM_BATCH: usize = 128;

/// A forward cursor over one MemStore at a fixed read point.
pub struct MemCursor {
    mem: Arc<MemStore>,
    read_point: u64,
    buf: VecDeque<(MemKey, MemValue)>,
    /// Last key fetched from the skiplist (visible or not).
    fetched_to: Option<MemKey>,
    exhausted: bool,
}

impl MemCursor {
    pub fn new(mem: Arc<MemStore>, read_point: u64) -> Self {
        MemCursor {
            mem,
            read_point,
            buf: VecDeque::new(),
            fetched_to: None,
            exhausted: true,
        }
    }

    fn fill(&mut self) {
        while self.buf.is_empty() && !self.exhausted {
            let from = match &self.fetched_to {
                Some(k) => Bound::Excluded(k),
                None => Bound::Unbounded,
            };
            match self
                .mem
                .read_batch(from, self.read_point, MEM_BATCH, &mut self.buf)
            {
                Some(last) => self.fetched_to = Some(last),
                None => self.exhausted = true,
            }
        }
    }

    fn seek(&mut self, target: &[u8]) {
        self.buf.clear();
        self.exhausted = false;
        let start = MemKey {
            key: target.to_vec(),
            seq: u64::MAX,
        };
        match self.mem.read_batch(
            Bound::Included(&start),
            self.read_point,
            MEM_BATCH,
            &mut self.buf,
        ) {
            Some(last) => self.fetched_to = Some(last),
            None => self.exhausted = true,
        }
        self.fill();
    }

    fn advance(&mut self) {
        self.buf.pop_front();
        self.fill();
    }
}

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
            Source::Mem(m) => !m.buf.is_empty(),
            Source::File(f) => f.valid(),
        }
    }
    /// Only meaningful when `valid()`.
    pub fn key(&self) -> &[u8] {
        match self {
            Source::Mem(m) => m.buf.front().map_or(&[], |e| &e.0.key),
            Source::File(f) => f.key(),
        }
    }
    pub fn ttl_ms(&self) -> Option<u64> {
        match self {
            Source::Mem(m) => m.buf.front().and_then(|e| e.1.ttl_ms),
            Source::File(f) => f.ttl_ms(),
        }
    }
    pub fn value(&self) -> &[u8] {
        match self {
            Source::Mem(m) => m.buf.front().map_or(&[], |e| &e.1.value),
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
    /// The greatest row strictly below `row` (or the last row) in this source.
    pub fn last_row_before(&self, row: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        Ok(match self {
            Source::Mem(m) => m.mem.last_row_before(row, m.read_point),
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
    has_last: bool,
}

impl Merge {
    pub fn new(sources: Vec<Source>) -> Self {
        Merge {
            sources,
            heap: Vec::new(),
            last: Vec::new(),
            has_last: false,
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
        self.heap = (0..self.sources.len())
            .filter(|&i| self.sources[i].valid())
            .collect();
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    /// Positions every source at the first key >= `target`.
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        for s in &mut self.sources {
            s.seek(target)?;
        }
        self.has_last = false;
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

    fn advance_top(&mut self) -> Result<()> {
        let i = self.heap[0];
        self.sources[i].advance()?;
        if !self.sources[i].valid() {
            let last = self.heap.len() - 1;
            self.heap.swap(0, last);
            self.heap.pop();
        }
        if !self.heap.is_empty() {
            self.sift_down(0);
        }
        Ok(())
    }

    /// Moves past the current entry and every older duplicate of it.
    pub fn advance(&mut self) -> Result<()> {
        if self.heap.is_empty() {
            return Ok(());
        }
        self.last.clear();
        let top = self.heap[0];
        self.last.extend_from_slice(self.sources[top].key());
        self.has_last = true;
        self.advance_top()?;
        while !self.heap.is_empty()
            && compare_keys(self.sources[self.heap[0]].key(), &self.last) == Ordering::Equal
        {
            self.advance_top()?;
        }
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
