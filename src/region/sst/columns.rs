//! Rows decoded by column for a series read: what a store file (or a
//! MemStore) holds of some columns of one family, over a row range, with
//! each value already a [`Value`]. The read path's column reader
//! (`region::read::columns`) merges these across sources; a time-series
//! block decodes straight into them ([`super::ts_block::decode_columns`]),
//! never building the standard block body.

use crate::value::Value;

/// Which cells a column read takes: puts of `qualifiers` in `family`, in
/// rows `[start, stop)`.
#[derive(Debug, Clone, Copy)]
pub struct ColumnSelect<'a> {
    pub family: &'a [u8],
    /// A cell's column is its qualifier's index here.
    pub qualifiers: &'a [Vec<u8>],
    pub start: &'a [u8],
    pub stop: Option<&'a [u8]>,
}

impl ColumnSelect<'_> {
    /// The column of a (family, qualifier), if selected.
    pub fn column_of(&self, family: &[u8], qualifier: &[u8]) -> Option<u32> {
        if family != self.family {
            return None;
        }
        self.qualifiers
            .iter()
            .position(|q| q.as_slice() == qualifier)
            .map(|i| i as u32)
    }
}

/// How a block's read ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockRead {
    /// At a row at or past `stop`: nothing further is wanted.
    Stop,
    /// At the block's end.
    End,
    /// After the rows asked for; more of the block may follow them.
    Cut,
}

/// One selected cell of a row.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnCell {
    /// Index into [`ColumnSelect::qualifiers`].
    pub column: u32,
    pub timestamp: u64,
    pub ttl_ms: Option<u64>,
    /// `None`: bytes that are no [`Value`] (the cell still hides older
    /// versions of its column). Taken by the reader that answers with it.
    pub value: Option<Value>,
}

/// Rows with their selected cells, in key order, cells in the order the
/// source holds them (by qualifier, newest version first).
#[derive(Debug, Default)]
pub struct ColumnRows {
    keys: Vec<u8>,
    rows: Vec<RowAt>,
    cells: Vec<ColumnCell>,
}

#[derive(Debug, Clone)]
struct RowAt {
    key: std::ops::Range<usize>,
    cells: std::ops::Range<usize>,
}

impl ColumnRows {
    pub fn clear(&mut self) {
        self.keys.clear();
        self.rows.clear();
        self.cells.clear();
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Bytes the buffers hold room for.
    pub fn capacity_bytes(&self) -> usize {
        self.keys.capacity()
            + self.rows.capacity() * std::mem::size_of::<RowAt>()
            + self.cells.capacity() * std::mem::size_of::<ColumnCell>()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Adds a cell of `row`, which is the last row added or one after it.
    pub fn push(
        &mut self,
        row: &[u8],
        column: u32,
        timestamp: u64,
        ttl_ms: Option<u64>,
        value: Option<Value>,
    ) {
        self.continue_row(row);
        self.push_cell(column, timestamp, ttl_ms, value);
    }

    /// Goes on with `row` if it is the last row added (a row a block
    /// boundary cut), else starts it.
    pub fn continue_row(&mut self, row: &[u8]) {
        let same_row = self
            .rows
            .last()
            .is_some_and(|r| &self.keys[r.key.clone()] == row);
        if !same_row {
            self.start_row(row);
        }
    }

    /// Starts a row after the last one (a row with no cell is none: give
    /// it at least one).
    pub fn start_row(&mut self, row: &[u8]) {
        let at = self.keys.len();
        self.keys.extend_from_slice(row);
        let cell = self.cells.len();
        self.rows.push(RowAt {
            key: at..self.keys.len(),
            cells: cell..cell,
        });
    }

    /// Adds a cell to the row started last.
    pub fn push_cell(
        &mut self,
        column: u32,
        timestamp: u64,
        ttl_ms: Option<u64>,
        value: Option<Value>,
    ) {
        self.cells.push(ColumnCell {
            column,
            timestamp,
            ttl_ms,
            value,
        });
        if let Some(r) = self.rows.last_mut() {
            r.cells.end = self.cells.len();
        }
    }

    /// Row `i`'s key.
    pub fn key(&self, i: usize) -> &[u8] {
        &self.keys[self.rows[i].key.clone()]
    }

    /// Row `i`'s key and cells, whose values a reader may take.
    pub fn row_mut(&mut self, i: usize) -> (&[u8], &mut [ColumnCell]) {
        let r = &self.rows[i];
        (&self.keys[r.key.clone()], &mut self.cells[r.cells.clone()])
    }
}
