//! A forward cursor over one MemStore at a read point: how the read path
//! (`read::merge`), flushes and compactions take a MemStore's entries.

use std::cmp::Ordering;
use std::sync::Arc;

use super::{MemEntry, MemStore, RawRow};
use crate::cell::compare_keys;

/// A forward cursor over one MemStore at a fixed read point, a row at a
/// time. It holds the MemStore, which keeps the bytes of the loaded entries
/// alive.
pub struct MemCursor {
    mem: Arc<MemStore>,
    read_point: u64,
    /// The last row loaded: the next load starts after it.
    last_row: Option<RawRow>,
    /// Whole keys of the loaded entries.
    keys: Vec<u8>,
    entries: Vec<MemEntry>,
    pos: usize,
    /// Rows the next load asks for: one after a seek (a Get reads one row),
    /// doubling while the scan goes on.
    batch: usize,
}

/// Most rows a MemStore scan loads at once.
const MAX_BATCH_ROWS: usize = 128;

impl MemCursor {
    pub fn new(mem: Arc<MemStore>, read_point: u64) -> Self {
        MemCursor {
            mem,
            read_point,
            last_row: None,
            keys: Vec::new(),
            entries: Vec::new(),
            pos: 0,
            batch: 1,
        }
    }

    /// The current entry's key; empty past the end.
    pub(crate) fn key(&self) -> &[u8] {
        self.current().map_or(&[], |e| e.key(&self.keys))
    }

    /// The greatest row strictly below `row` (or the last row) visible at
    /// the cursor's read point.
    pub(crate) fn last_row_before(&self, row: Option<&[u8]>) -> Option<Vec<u8>> {
        self.mem.last_row_before(row, self.read_point)
    }

    pub(crate) fn current(&self) -> Option<&MemEntry> {
        self.entries.get(self.pos)
    }

    pub(crate) fn load(&mut self, from: &[u8], after: bool) {
        self.pos = 0;
        self.last_row = self.mem.load_rows(
            from,
            after,
            self.read_point,
            self.batch,
            &mut self.entries,
            &mut self.keys,
        );
    }

    pub(crate) fn seek(&mut self, target: &[u8]) {
        self.batch = 1;
        self.load(crate::cell::row_of(target), false);
        while self
            .current()
            .is_some_and(|e| compare_keys(e.key(&self.keys), target) == Ordering::Less)
        {
            self.advance();
        }
    }

    pub(crate) fn skip_to(&mut self, target: &[u8]) {
        if self.current().is_none() {
            return;
        }
        // Past the loaded rows a walk would load and step over every row
        // between (a whole series skipped by a scan): the skiplist seeks.
        let past_loaded = self
            .entries
            .last()
            .is_some_and(|e| compare_keys(e.key(&self.keys), target) == Ordering::Less);
        if past_loaded {
            self.seek(target);
            return;
        }
        while self
            .current()
            .is_some_and(|e| compare_keys(e.key(&self.keys), target) == Ordering::Less)
        {
            self.advance();
        }
    }

    pub(crate) fn advance(&mut self) {
        self.pos += 1;
        if self.pos >= self.entries.len() {
            // Past the loaded rows: load the next ones after the last.
            if let Some(last) = self.last_row {
                self.batch = (self.batch * 2).min(MAX_BATCH_ROWS);
                self.load(last.as_slice(), true);
            }
        }
    }
}
