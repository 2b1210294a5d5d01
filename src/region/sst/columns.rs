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

/// How a block read by column for a fold went ([`ColumnRuns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunRead {
    /// Decoded into runs, ending as the [`BlockRead`] says.
    Runs(BlockRead),
    /// Not decoded: a selected cell needs the read's rules (a delete
    /// marker, a TTL, versions, the time range), or the block is cached
    /// whole. Read it as [`ColumnRows`].
    Rows,
    /// Not decoded: a standard block, as a file's other blocks will be.
    Standard,
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

/// What sees rows one at a time: a key and its cells (column, value),
/// until it answers false.
pub type RowFn<'f> = dyn FnMut(&[u8], &[(u32, Value)]) -> bool + 'f;

/// A block's rows decoded column by column, for a fold: rows that share
/// all of their key but its last 8 bytes (one series' points) form a
/// run, each row is its key's tail, and each selected column is its rows
/// and values side by side, with no cell made per value. Only rows whose
/// selected cells answer as they are go in (one put per column, none
/// hidden by a TTL or the read's time range): a block with others is
/// read as [`ColumnRows`].
#[derive(Debug, Default)]
pub struct ColumnRuns {
    heads: Vec<u8>,
    runs: Vec<RunAt>,
    tails: Vec<u64>,
    columns: Vec<RunColumn>,
}

#[derive(Debug, Clone)]
struct RunAt {
    head: std::ops::Range<usize>,
    rows: std::ops::Range<usize>,
}

/// One selected column of [`ColumnRuns`]: the rows that hold it, in
/// order, and their values (floats apart: a fold adds them without
/// looking at a value's type).
#[derive(Debug, Default)]
struct RunColumn {
    rows: Vec<u32>,
    floats: Vec<f64>,
    values: Vec<Value>,
}

impl RunColumn {
    /// Entry `i`'s value.
    fn value(&self, i: usize) -> Value {
        match self.floats.get(i) {
            Some(&x) if self.values.is_empty() => Value::Float(x),
            _ => self.values[i].clone(),
        }
    }
}

/// The values of one column of a run: which rows hold it (indexes into
/// [`ColumnRuns::tails`], ascending) and the values, floats or any.
pub struct RunValues<'a> {
    pub rows: &'a [u32],
    pub values: RunValueSlice<'a>,
}

pub enum RunValueSlice<'a> {
    Floats(&'a [f64]),
    Values(&'a [Value]),
}

impl ColumnRuns {
    /// Empties the runs for a block read for `columns` selected columns.
    pub fn clear(&mut self, columns: usize) {
        self.heads.clear();
        self.runs.clear();
        self.tails.clear();
        self.columns.resize_with(columns, RunColumn::default);
        for c in &mut self.columns {
            c.rows.clear();
            c.floats.clear();
            c.values.clear();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Starts a run of rows whose keys begin with `head`.
    pub fn start_run(&mut self, head: &[u8]) {
        let at = self.heads.len();
        self.heads.extend_from_slice(head);
        let row = self.tails.len();
        self.runs.push(RunAt {
            head: at..self.heads.len(),
            rows: row..row,
        });
    }

    /// Adds a row to the run started last (its key is the run's head and
    /// `tail`); its cells follow through `push_float` and `push_value`.
    pub fn push_row(&mut self, tail: u64) {
        self.tails.push(tail);
        if let Some(r) = self.runs.last_mut() {
            r.rows.end = self.tails.len();
        }
    }

    /// Adds `n` rows to the run started last, the k-th's key tail
    /// `after + k·step` (wrapping), each holding `columns` (their values
    /// follow as [`Self::push_cell`]'s do).
    pub fn push_stepped_rows(
        &mut self,
        after: u64,
        step: u64,
        n: usize,
        columns: impl Iterator<Item = u32>,
    ) {
        // Each element from its index, not from the one before: loops
        // the compiler can vectorize.
        let first = self.tails.len();
        self.tails.resize(first + n, 0);
        for (k, t) in (1u64..).zip(&mut self.tails[first..]) {
            *t = after.wrapping_add(step.wrapping_mul(k));
        }
        if let Some(r) = self.runs.last_mut() {
            r.rows.end = self.tails.len();
        }
        for column in columns {
            let rows = &mut self.columns[column as usize].rows;
            let at = rows.len();
            rows.resize(at + n, 0);
            for (row, r) in (first as u32..).zip(&mut rows[at..]) {
                *r = row;
            }
        }
    }

    /// Marks the row added last as holding column `column`: its values
    /// follow, one per row marked, through [`Self::values_mut`].
    pub fn push_cell(&mut self, column: u32) {
        let row = self.tails.len() as u32 - 1;
        self.columns[column as usize].rows.push(row);
    }

    /// Where column `column`'s values go: floats, or values of any type
    /// (a column's values in one block are all one or all the other).
    pub fn values_mut(&mut self, column: u32) -> (&mut Vec<f64>, &mut Vec<Value>) {
        let c = &mut self.columns[column as usize];
        (&mut c.floats, &mut c.values)
    }

    /// Each run: its key head and its rows (indexes into `tails`).
    pub fn runs(&self) -> impl Iterator<Item = (&[u8], std::ops::Range<usize>)> + '_ {
        self.runs
            .iter()
            .map(|r| (&self.heads[r.head.clone()], r.rows.clone()))
    }

    /// Each row's key tail (the last 8 bytes of its key, big-endian).
    pub fn tails(&self) -> &[u64] {
        &self.tails
    }

    /// Column `column`'s values in rows `rows`.
    pub fn column(&self, column: u32, rows: std::ops::Range<usize>) -> RunValues<'_> {
        let c = &self.columns[column as usize];
        let from = c.rows.partition_point(|&r| (r as usize) < rows.start);
        let to = from + c.rows[from..].partition_point(|&r| (r as usize) < rows.end);
        RunValues {
            rows: &c.rows[from..to],
            values: if c.values.is_empty() {
                RunValueSlice::Floats(&c.floats[from..to])
            } else {
                RunValueSlice::Values(&c.values[from..to])
            },
        }
    }

    /// The first and the last row (`None`: no row).
    pub fn row_span(&self) -> Option<(usize, usize)> {
        Some((
            self.runs.first()?.rows.start,
            self.runs.last()?.rows.end - 1,
        ))
    }

    /// Row `row`'s key, into `key`.
    pub fn row_key(&self, row: usize, key: &mut Vec<u8>) {
        let run = self
            .runs
            .iter()
            .find(|r| r.rows.contains(&row))
            .expect("a row of the runs");
        key.clear();
        key.extend_from_slice(&self.heads[run.head.clone()]);
        key.extend_from_slice(&self.tails[row].to_be_bytes());
    }

    /// Row `row`'s cells, added to `cells`.
    pub fn row_cells(&self, row: usize, cells: &mut Vec<(u32, Value)>) {
        for (j, c) in self.columns.iter().enumerate() {
            if let Ok(i) = c.rows.binary_search(&(row as u32)) {
                cells.push((j as u32, c.value(i)));
            }
        }
    }

    /// Leaves the first row out of the runs.
    pub fn drop_first_row(&mut self) {
        if let Some(r) = self.runs.first_mut() {
            r.rows.start += 1;
            if r.rows.is_empty() {
                self.runs.remove(0);
            }
        }
    }

    /// Leaves the last row out of the runs.
    pub fn drop_last_row(&mut self) {
        if let Some(r) = self.runs.last_mut() {
            r.rows.end -= 1;
            if r.rows.is_empty() {
                self.runs.pop();
            }
        }
    }

    /// Each row as a key and its cells (by column), as [`ColumnRows`]
    /// would give it, until `each` answers false (false then).
    pub fn each_row(&self, each: &mut RowFn<'_>) -> bool {
        let mut key = Vec::new();
        let mut cells = Vec::new();
        let mut at = vec![0usize; self.columns.len()];
        for (head, rows) in self.runs() {
            for row in rows {
                key.clear();
                key.extend_from_slice(head);
                key.extend_from_slice(&self.tails[row].to_be_bytes());
                cells.clear();
                for (j, c) in self.columns.iter().enumerate() {
                    // Rows dropped from the runs still have their values.
                    while c.rows.get(at[j]).is_some_and(|&r| (r as usize) < row) {
                        at[j] += 1;
                    }
                    let i = at[j];
                    if c.rows.get(i) != Some(&(row as u32)) {
                        continue;
                    }
                    at[j] += 1;
                    cells.push((j as u32, c.value(i)));
                }
                if !cells.is_empty() && !each(&key, &cells) {
                    return false;
                }
            }
        }
        true
    }
}
