//! The read path of one region: Get and Scan over MemStores and store files.
//!
//! A scan merges its sources ([`merge::Merge`]), groups entries by row and
//! column, resolves versions, deletes and TTL ([`resolve`]), applies the
//! column selection and filters, and pages with offset, limit and a
//! continuation token. Reverse scans return rows in descending order (cells
//! within a row stay in their normal order, as in HBase).

pub mod columns;
pub mod key_window;
pub mod merge;
pub mod resolve;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::cell::{Cell, CellKind, KeyRef, Row, first_key_of_row};
use crate::codec::{bytes_equal, compare_bytes, prefix_successor};
use crate::error::{Error, Result};
use crate::schema::FamilyDescriptor;
pub use key_window::KeyTimeWindow;
use key_window::Placement;
use merge::Merge;
use resolve::{ColumnGroup, resolve_column};

/// `[min, max)` in epoch milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub min: u64,
    pub max: u64,
}

impl Default for TimeRange {
    fn default() -> Self {
        TimeRange {
            min: 0,
            max: u64::MAX,
        }
    }
}

impl TimeRange {
    pub fn contains(&self, ts: u64) -> bool {
        ts >= self.min && ts < self.max
    }
}

pub use crate::value::{CompareOp, Operand};

/// Filters, all of which must pass (HBase's FilterList MUST_PASS_ALL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Keep cells whose qualifier starts with the prefix.
    ColumnPrefix(Vec<u8>),
    /// Keep cells whose value compares true (HBase ValueFilter), typed
    /// as [`Operand`] says.
    Value { op: CompareOp, operand: Operand },
    /// Keep rows whose newest value of one column compares true (HBase
    /// SingleColumnValueFilter). Rows without the column pass unless
    /// `filter_if_missing`.
    SingleColumnValue {
        family: Vec<u8>,
        qualifier: Vec<u8>,
        op: CompareOp,
        operand: Operand,
        filter_if_missing: bool,
    },
}

/// Which columns a read returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Columns {
    /// Whole families; empty with no `columns` means every family.
    pub families: Vec<Vec<u8>>,
    /// Single columns (family, qualifier).
    pub columns: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Columns {
    pub fn all() -> Self {
        Columns::default()
    }
    pub fn is_all(&self) -> bool {
        self.families.is_empty() && self.columns.is_empty()
    }
    /// Whether any column of `family` is selected.
    pub fn wants_family(&self, family: &[u8]) -> bool {
        self.is_all()
            || self.families.iter().any(|f| f == family)
            || self.columns.iter().any(|(f, _)| f == family)
    }
    pub fn wants(&self, family: &[u8], qualifier: &[u8]) -> bool {
        self.is_all()
            || self.families.iter().any(|f| bytes_equal(f, family))
            || self
                .columns
                .iter()
                .any(|(f, q)| bytes_equal(q, qualifier) && bytes_equal(f, family))
    }

    /// The qualifiers of `family` this selection reads, when it names
    /// single columns of it rather than the whole family.
    pub fn projection_for(&self, family: &[u8]) -> Option<crate::region::sst::Projection> {
        if self.is_all() || self.families.iter().any(|f| f == family) {
            return None;
        }
        Some(crate::region::sst::Projection::new(
            self.columns
                .iter()
                .filter(|(f, _)| f == family)
                .map(|(_, q)| q.clone())
                .collect(),
        ))
    }

    /// For a column this selection does not want: writes into `out` the
    /// first key of the next column of `row` that it may want — the next
    /// wanted qualifier of `family`, else the next family. False when
    /// there is no such key to skip to.
    pub(crate) fn next_wanted_key(
        &self,
        out: &mut Vec<u8>,
        row: &[u8],
        family: &[u8],
        qualifier: &[u8],
    ) -> bool {
        let next = self
            .columns
            .iter()
            .filter(|(f, q)| f == family && q.as_slice() > qualifier)
            .map(|(_, q)| q)
            .min();
        match next {
            Some(q) => crate::cell::first_key_of_column_into(out, row, family, q),
            None if family.len() < crate::cell::MAX_FAMILY_LEN => {
                // `family ‖ 0` sorts after every key of `family`, before
                // any other family.
                let mut next_family = Vec::with_capacity(family.len() + 1);
                next_family.extend_from_slice(family);
                next_family.push(0);
                crate::cell::first_key_of_column_into(out, row, &next_family, b"");
            }
            None => return false,
        }
        true
    }
}

/// `[start, stop)` rows; `None` is open.
pub(crate) type RowBounds = (Option<Vec<u8>>, Option<Vec<u8>>);

/// A scan, as HBase's `Scan`: a row range, what to return, and paging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// First row, inclusive.
    pub start: Option<Vec<u8>>,
    /// Last row, exclusive.
    pub stop: Option<Vec<u8>>,
    /// Only rows starting with this (combined with start/stop).
    pub prefix: Option<Vec<u8>>,
    pub columns: Columns,
    pub time_range: TimeRange,
    /// Each cell's version is its row's key time (floored to ms), as
    /// every write of a table of open tag sets makes it: a store file
    /// whose versions all lie past the time range, and which holds no
    /// delete marker, then holds no version of a cell in range (nor one
    /// that outranks it), and is passed by.
    pub versions_are_key_times: bool,
    /// Versions per column (default 1).
    pub max_versions: u32,
    pub filters: Vec<Filter>,
    /// Only rows whose key time is in this window, the rest of each
    /// series skipped by seeks.
    pub key_window: Option<KeyTimeWindow>,
    /// At most this many rows of each series, the rest skipped by seeks.
    pub rows_per_series: Option<RowsPerSeries>,
    /// Rows to skip before the first returned.
    pub offset: usize,
    /// Most rows returned; `None` for all.
    pub limit: Option<usize>,
    pub reverse: bool,
    /// Resume after the last row of a previous page.
    pub continuation: Option<ContinuationToken>,
}

impl Default for Scan {
    fn default() -> Self {
        Scan {
            start: None,
            stop: None,
            prefix: None,
            columns: Columns::all(),
            time_range: TimeRange::default(),
            versions_are_key_times: false,
            max_versions: 1,
            filters: Vec::new(),
            key_window: None,
            rows_per_series: None,
            offset: 0,
            limit: None,
            reverse: false,
            continuation: None,
        }
    }
}

impl Scan {
    pub fn new() -> Self {
        Scan::default()
    }
    pub fn range(start: impl Into<Vec<u8>>, stop: impl Into<Vec<u8>>) -> Self {
        Scan {
            start: Some(start.into()),
            stop: Some(stop.into()),
            ..Scan::default()
        }
    }
    pub fn with_prefix(prefix: impl Into<Vec<u8>>) -> Self {
        Scan {
            prefix: Some(prefix.into()),
            ..Scan::default()
        }
    }

    /// The effective [start, stop) after prefix and continuation.
    pub(crate) fn bounds(&self) -> Result<RowBounds> {
        let mut start = self.start.clone();
        let mut stop = self.stop.clone();
        if let Some(p) = &self.prefix {
            if start.as_ref().is_none_or(|s| s < p) {
                start = Some(p.clone());
            }
            if let Some(end) = prefix_successor(p)
                && stop.as_ref().is_none_or(|s| *s > end)
            {
                stop = Some(end);
            }
        }
        if let Some(token) = &self.continuation {
            if token.reverse != self.reverse {
                return Err(Error::InvalidInput(
                    "continuation token belongs to a scan in the other direction".into(),
                ));
            }
            if self.reverse {
                if stop.as_ref().is_none_or(|s| *s > token.row) {
                    stop = Some(token.row.clone());
                }
            } else {
                let mut after = token.row.clone();
                after.push(0);
                if start.as_ref().is_none_or(|s| *s < after) {
                    start = Some(after);
                }
            }
        }
        Ok((start, stop))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_versions == 0 {
            return Err(Error::InvalidInput(
                "max_versions must be at least 1".into(),
            ));
        }
        if self.time_range.min > self.time_range.max {
            return Err(Error::InvalidInput(format!(
                "time range is empty: min {} > max {}",
                self.time_range.min, self.time_range.max
            )));
        }
        if let Some(w) = &self.key_window
            && w.start > w.end
        {
            return Err(Error::InvalidInput(format!(
                "key time window is inverted: start {} > end {}",
                w.start, w.end
            )));
        }
        Ok(())
    }
}

/// At most `rows` rows of each series, a series being the rows that share
/// their first `series_len` key bytes (a key too short is its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowsPerSeries {
    pub series_len: usize,
    pub rows: usize,
}

/// Where a page ended; opaque to clients, printable as hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinuationToken {
    pub row: Vec<u8>,
    pub reverse: bool,
}

impl ContinuationToken {
    const VERSION: u8 = 1;

    pub fn encode(&self) -> String {
        let mut bytes = vec![Self::VERSION, u8::from(self.reverse)];
        bytes.extend_from_slice(&self.row);
        crate::codec::to_hex(&bytes)
    }

    pub fn decode(s: &str) -> Result<ContinuationToken> {
        let bad = || {
            Error::InvalidInput(format!(
                "continuation token is not one this server issued: `{s}`"
            ))
        };
        if s.len() % 2 != 0 || s.len() < 4 {
            return Err(bad());
        }
        let bytes = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(s.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
            .collect::<Result<Vec<u8>>>()?;
        if bytes[0] != Self::VERSION || bytes[1] > 1 {
            return Err(bad());
        }
        Ok(ContinuationToken {
            reverse: bytes[1] == 1,
            row: bytes[2..].to_vec(),
        })
    }
}

/// One page of a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage {
    pub rows: Vec<Row>,
    /// Present when the limit cut the page short and more rows follow.
    pub continuation: Option<ContinuationToken>,
}

/// A Get, as HBase's: one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Get {
    pub row: Vec<u8>,
    pub columns: Columns,
    pub time_range: TimeRange,
    pub max_versions: u32,
}

impl Get {
    pub fn new(row: impl Into<Vec<u8>>) -> Self {
        Get {
            row: row.into(),
            columns: Columns::all(),
            time_range: TimeRange::default(),
            max_versions: 1,
        }
    }

    /// The one-row scan that answers this get.
    pub fn to_scan(&self) -> Scan {
        let mut stop = self.row.clone();
        stop.push(0);
        Scan {
            start: Some(self.row.clone()),
            stop: Some(stop),
            columns: self.columns.clone(),
            time_range: self.time_range,
            max_versions: self.max_versions,
            limit: Some(1),
            ..Scan::default()
        }
    }
}

/// A row readers answer from, whichever way it is held: an owned [`Row`]
/// or a [`ScannedRow`].
pub trait RowCells {
    fn key(&self) -> &[u8];
    fn cell_count(&self) -> usize;
    /// Cell `i` (< `cell_count()`), in family, qualifier, newest-first order.
    fn cell(&self, i: usize) -> CellView<'_>;
    fn cells(&self) -> impl ExactSizeIterator<Item = CellView<'_>> + Clone {
        (0..self.cell_count()).map(move |i| self.cell(i))
    }
}

impl RowCells for Row {
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn cell_count(&self) -> usize {
        self.cells.len()
    }
    fn cell(&self, i: usize) -> CellView<'_> {
        let c = &self.cells[i];
        CellView {
            family: &c.family,
            qualifier: &c.qualifier,
            timestamp: c.timestamp,
            value: &c.value,
        }
    }
}

/// A resolved row in three buffers: its key, its cells' bytes and where
/// each cell's parts lie in them. The scanner fills one over and over; a
/// copy of it is a row that owns its bytes for three allocations, where a
/// [`Row`] takes two more and a reference count per cell part.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScannedRow {
    key: Vec<u8>,
    bytes: Vec<u8>,
    cells: Vec<CellSpan>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct CellSpan {
    family: std::ops::Range<usize>,
    qualifier: std::ops::Range<usize>,
    timestamp: u64,
    value: std::ops::Range<usize>,
}

impl ScannedRow {
    fn clear(&mut self) {
        self.key.clear();
        self.bytes.clear();
        self.cells.clear();
    }

    fn put(&mut self, bytes: &[u8]) -> std::ops::Range<usize> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        start..self.bytes.len()
    }

    /// Like `put`, reusing the last cell's family when it is the same.
    fn put_family(&mut self, family: &[u8]) -> std::ops::Range<usize> {
        match self.cells.last() {
            Some(c) if bytes_equal(&self.bytes[c.family.clone()], family) => c.family.clone(),
            _ => self.put(family),
        }
    }

    pub fn view(&self) -> RowView<'_> {
        RowView { buf: self }
    }
}

impl RowCells for ScannedRow {
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn cell_count(&self) -> usize {
        self.cells.len()
    }
    fn cell(&self, i: usize) -> CellView<'_> {
        self.view().cell(i)
    }
}

/// A row borrowed from a scanner: valid until the scanner moves on. Reading
/// rows this way costs no allocation per cell.
#[derive(Debug, Clone, Copy)]
pub struct RowView<'a> {
    buf: &'a ScannedRow,
}

/// A cell borrowed from a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellView<'a> {
    pub family: &'a [u8],
    pub qualifier: &'a [u8],
    pub timestamp: u64,
    pub value: &'a [u8],
}

impl<'a> RowView<'a> {
    pub fn key(&self) -> &'a [u8] {
        &self.buf.key
    }

    pub fn len(&self) -> usize {
        self.buf.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.cells.is_empty()
    }

    fn cell(&self, i: usize) -> CellView<'a> {
        let buf = self.buf;
        let c = &buf.cells[i];
        CellView {
            family: &buf.bytes[c.family.clone()],
            qualifier: &buf.bytes[c.qualifier.clone()],
            timestamp: c.timestamp,
            value: &buf.bytes[c.value.clone()],
        }
    }

    pub fn cells(&self) -> impl ExactSizeIterator<Item = CellView<'a>> + 'a {
        let view = *self;
        (0..self.len()).map(move |i| view.cell(i))
    }

    /// A copy that owns its bytes.
    pub fn to_scanned(&self) -> ScannedRow {
        self.buf.clone()
    }

    /// An owned copy: one allocation for all cell bytes, which the cells
    /// share.
    pub fn to_row(&self) -> Row {
        let shared = Bytes::copy_from_slice(&self.buf.bytes);
        Row {
            key: self.buf.key.clone(),
            cells: self
                .buf
                .cells
                .iter()
                .map(|c| Cell {
                    family: shared.slice(c.family.clone()),
                    qualifier: shared.slice(c.qualifier.clone()),
                    timestamp: c.timestamp,
                    value: shared.slice(c.value.clone()),
                })
                .collect(),
        }
    }
}

/// Where a scan's resolved cells go, row by row: a row buffer, or a
/// reader that folds cells as they come (aggregates) and so never builds
/// rows it would only take apart again.
pub trait CellSink {
    /// The cells that follow, until the next call, are of `row` (none,
    /// when every cell of the row resolved away). False ends the scan
    /// here, before the row.
    fn start_row(&mut self, row: &[u8]) -> bool;
    fn cell(&mut self, family: &[u8], qualifier: &[u8], timestamp: u64, value: &[u8]);
}

impl CellSink for ScannedRow {
    fn start_row(&mut self, _row: &[u8]) -> bool {
        true
    }

    fn cell(&mut self, family: &[u8], qualifier: &[u8], timestamp: u64, value: &[u8]) {
        // Versions of one column share its family and qualifier bytes, and
        // the columns of a row mostly one family.
        let (family, qualifier) = match self.cells.last() {
            Some(c)
                if bytes_equal(&self.bytes[c.qualifier.clone()], qualifier)
                    && bytes_equal(&self.bytes[c.family.clone()], family) =>
            {
                (c.family.clone(), c.qualifier.clone())
            }
            _ => (self.put_family(family), self.put(qualifier)),
        };
        let value = self.put(value);
        self.cells.push(CellSpan {
            family,
            qualifier,
            timestamp,
            value,
        });
    }
}

/// Streams the rows of a scan from a consistent snapshot.
pub struct RowScanner {
    merge: Merge,
    assembler: Assembler,
    start: Option<Vec<u8>>,
    stop: Option<Vec<u8>>,
    reverse: bool,
    to_skip: usize,
    remaining: Option<usize>,
    /// Reverse scans: rows below this one are next.
    reverse_bound: Option<Vec<u8>>,
    key_window: Option<KeyTimeWindow>,
    rows_per_series: Option<RowsPerSeries>,
    /// The series of the last row returned, and how many of its rows were.
    series: Vec<u8>,
    series_rows: usize,
    started: bool,
    done: bool,
    row: ScannedRow,
}

/// Resolves the column groups of one row into cells.
struct Assembler {
    families: Arc<HashMap<Vec<u8>, FamilyDescriptor>>,
    now_ms: u64,
    columns: Columns,
    time_range: TimeRange,
    max_versions: u32,
    filters: Vec<Filter>,
    group: ColumnGroup,
    survivors: Vec<usize>,
    /// The family of the last group resolved.
    family: Option<FamilyDescriptor>,
    /// Where a skip over unwanted columns goes (reused buffer).
    skip_target: Vec<u8>,
    /// The family of the row's entries being read (reused buffer): its
    /// family delete applies until the family changes.
    row_family: Vec<u8>,
}

impl RowScanner {
    pub(crate) fn new(
        merge: Merge,
        families: Arc<HashMap<Vec<u8>, FamilyDescriptor>>,
        now_ms: u64,
        scan: &Scan,
    ) -> Result<Self> {
        scan.validate()?;
        let (start, stop) = scan.bounds()?;
        let empty = matches!((&start, &stop), (Some(a), Some(b)) if a >= b);
        Ok(RowScanner {
            merge,
            assembler: Assembler {
                families,
                now_ms,
                columns: scan.columns.clone(),
                time_range: scan.time_range,
                max_versions: scan.max_versions,
                filters: scan.filters.clone(),
                group: ColumnGroup::default(),
                survivors: Vec::new(),
                family: None,
                skip_target: Vec::new(),
                row_family: Vec::new(),
            },
            reverse_bound: stop.clone(),
            key_window: scan.key_window,
            rows_per_series: scan.rows_per_series,
            series: Vec::new(),
            series_rows: 0,
            start,
            stop,
            reverse: scan.reverse,
            to_skip: scan.offset,
            remaining: scan.limit,
            started: false,
            done: empty
                || scan.limit == Some(0)
                || scan.key_window.is_some_and(|w| w.start == w.end),
            row: ScannedRow::default(),
        })
    }

    /// Reads one page: up to the scan's limit, with a continuation token if
    /// more rows follow.
    pub fn page(mut self) -> Result<ScanPage> {
        let mut rows = Vec::new();
        while let Some(row) = self.next_row()? {
            rows.push(row);
        }
        let continuation = match (rows.last(), self.remaining) {
            (Some(last), Some(0)) => {
                // Probe for one more row so a client knows when to stop.
                self.remaining = Some(1);
                self.to_skip = 0;
                self.done = false;
                let reverse = self.reverse;
                self.next_view()?.map(|_| ContinuationToken {
                    row: last.key.clone(),
                    reverse,
                })
            }
            _ => None,
        };
        Ok(ScanPage { rows, continuation })
    }

    /// The row the last [`RowScanner::next_view`] returned, again.
    pub fn current_view(&self) -> Option<RowView<'_>> {
        (!self.row.key.is_empty()).then(|| self.row.view())
    }

    /// The next row of the scan as an owned [`Row`], or `None` at its end.
    pub fn next_row(&mut self) -> Result<Option<Row>> {
        Ok(self.next_view()?.map(|v| v.to_row()))
    }

    /// The next row of the scan, borrowed until the next call.
    pub fn next_view(&mut self) -> Result<Option<RowView<'_>>> {
        while !self.done {
            let found = if self.reverse {
                self.next_row_reverse()?
            } else {
                self.next_row_forward()?
            };
            if !found {
                self.done = true;
                break;
            }
            if self.row.cells.is_empty() {
                continue;
            }
            if let Some(limit) = self.rows_per_series {
                let key = &self.row.key;
                let series = key.get(..limit.series_len).unwrap_or(key);
                if bytes_equal(series, &self.series) {
                    self.series_rows += 1;
                } else {
                    self.series.clear();
                    self.series.extend_from_slice(series);
                    self.series_rows = 1;
                }
                if self.series_rows > limit.rows {
                    continue;
                }
            }
            if self.to_skip > 0 {
                self.to_skip -= 1;
                continue;
            }
            if let Some(r) = self.remaining.as_mut() {
                *r -= 1;
                if *r == 0 {
                    self.done = true;
                }
            }
            return Ok(Some(self.row.view()));
        }
        Ok(None)
    }

    fn next_row_forward(&mut self) -> Result<bool> {
        if !self.next_row_key_forward()? {
            return Ok(false);
        }
        self.read_row()?;
        Ok(true)
    }

    /// Clears `self.row` and puts the next row's key in it, if the scan
    /// has one more row.
    fn next_row_key_forward(&mut self) -> Result<bool> {
        if !self.started {
            self.started = true;
            let seek = first_key_of_row(self.start.as_deref().unwrap_or(&[]));
            self.merge.seek(&seek)?;
        }
        loop {
            if !self.merge.valid() {
                return Ok(false);
            }
            let row = crate::cell::row_of(self.merge.key());
            if self
                .stop
                .as_deref()
                .is_some_and(|s| compare_bytes(row, s).is_ge())
            {
                return Ok(false);
            }
            if self.series_full(row) {
                match prefix_successor(&self.series) {
                    Some(next) => {
                        self.merge.skip_to(&first_key_of_row(&next))?;
                        continue;
                    }
                    None => return Ok(false),
                }
            }
            if let Some(w) = self.key_window {
                let place = w.place(row);
                if place != Placement::Inside {
                    // Every target sorts after `row`, as skip_to needs.
                    let target = match place {
                        Placement::Before => w.rows_of(&row[..w.at]).0,
                        Placement::After => match prefix_successor(&row[..w.at]) {
                            Some(next) => next,
                            None => return Ok(false),
                        },
                        _ => [row, &[0]].concat(),
                    };
                    self.merge.skip_to(&first_key_of_row(&target))?;
                    continue;
                }
            }
            self.row.clear();
            self.row.key.extend_from_slice(row);
            return Ok(true);
        }
    }

    /// Streams the rest of the scan's cells to `sink` without building
    /// rows; false when the sink ended it. A scan that pages (offset,
    /// limit), runs in reverse or filters whole rows is read as rows
    /// first: those need the whole row.
    pub fn scan_cells<S: CellSink>(&mut self, sink: &mut S) -> Result<bool> {
        let by_rows = self.reverse
            || self.to_skip > 0
            || self.remaining.is_some()
            || self.rows_per_series.is_some()
            || self.assembler.has_row_filter();
        if by_rows {
            while let Some(row) = self.next_view()? {
                if !feed_row(&row, sink) {
                    self.done = true;
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        while !self.done {
            if !self.next_row_key_forward()? {
                self.done = true;
                break;
            }
            let key = std::mem::take(&mut self.row.key);
            let read = read_row_into(&mut self.merge, &mut self.assembler, &key, sink);
            self.row.key = key;
            if !read? {
                self.done = true;
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn next_row_reverse(&mut self) -> Result<bool> {
        loop {
            let Some(row) = self.merge.last_row_before(self.reverse_bound.as_deref())? else {
                return Ok(false);
            };
            if self.start.as_ref().is_some_and(|s| row < *s) {
                return Ok(false);
            }
            if self.series_full(&row) {
                self.reverse_bound = Some(self.series.clone());
                continue;
            }
            if let Some(w) = self.key_window {
                // Each bound is below `row`: the walk only goes down.
                match w.place(&row) {
                    Placement::Inside => {}
                    Placement::After => {
                        let hi = w.rows_of(&row[..w.at]).1;
                        self.reverse_bound = Some(hi.unwrap_or(row));
                        continue;
                    }
                    Placement::Before => {
                        self.reverse_bound = Some(row[..w.at].to_vec());
                        continue;
                    }
                    Placement::Unreadable => {
                        self.reverse_bound = Some(row);
                        continue;
                    }
                }
            }
            self.merge.seek(&first_key_of_row(&row))?;
            self.row.clear();
            self.row.key.extend_from_slice(&row);
            self.reverse_bound = Some(row);
            self.read_row()?;
            return Ok(true);
        }
    }

    /// Whether `row` belongs to the series whose rows per series were all
    /// returned: the rest of it is skipped.
    fn series_full(&self, row: &[u8]) -> bool {
        self.rows_per_series.is_some_and(|limit| {
            self.series_rows >= limit.rows
                && self.series.len() == limit.series_len
                && row.starts_with(&self.series)
        })
    }

    /// Consumes every entry of the row in `self.row.key` from the merge and
    /// resolves it into `self.row`.
    fn read_row(&mut self) -> Result<()> {
        // The key moves out for the read so the row can take the cells.
        let key = std::mem::take(&mut self.row.key);
        let read = read_row_into(&mut self.merge, &mut self.assembler, &key, &mut self.row);
        self.row.key = key;
        read?; // A row buffer takes every row.
        if !self.assembler.row_passes(&self.row) {
            self.row.cells.clear();
        }
        Ok(())
    }
}

/// Hands a row's cells to `sink`; false when the sink ended the scan.
pub fn feed_row<S: CellSink>(row: &RowView<'_>, sink: &mut S) -> bool {
    if !sink.start_row(row.key()) {
        return false;
    }
    for c in row.cells() {
        sink.cell(c.family, c.qualifier, c.timestamp, c.value);
    }
    true
}

/// Consumes every entry of `row` from the merge and resolves it into
/// `sink`; false, with nothing consumed, when the sink ends the scan.
fn read_row_into<S: CellSink>(
    merge: &mut Merge,
    a: &mut Assembler,
    row: &[u8],
    sink: &mut S,
) -> Result<bool> {
    let mut family_delete: Option<u64> = None;
    a.group.clear();
    a.row_family.clear();
    if !sink.start_row(row) {
        return Ok(false);
    }
    while merge.valid() {
        let key = merge.key();
        let Some(k) = KeyRef::parse(key) else {
            return Err(Error::InvalidInput("malformed key in merge".into()));
        };
        if !bytes_equal(k.row, row) {
            break;
        }
        let same_column = a.group.is_column(&k);
        if !same_column || a.group.entries.is_empty() {
            a.emit_group(family_delete, sink);
            if !bytes_equal(k.family, &a.row_family) {
                a.row_family.clear();
                a.row_family.extend_from_slice(k.family);
                family_delete = None;
            }
            // The column of the group before, again (the same column of the
            // next row, mostly): whether it is wanted or skipped is the
            // column's alone, so what was decided then stands, and the
            // group, emptied by `emit_group`, takes its entries.
            if !same_column {
                // A column the scan does not want is skipped whole, up to
                // the next one it wants: its versions cannot change the
                // answer. (The empty qualifier is never skipped: family
                // deletes live there.)
                let wanted = a.columns.wants(k.family, k.qualifier);
                if !k.qualifier.is_empty()
                    && !wanted
                    && a.columns
                        .next_wanted_key(&mut a.skip_target, k.row, k.family, k.qualifier)
                {
                    a.group.clear();
                    merge.skip_to(&a.skip_target)?;
                    continue;
                }
                a.group.start(&k, wanted);
            }
        }
        if k.kind == CellKind::DeleteFamily {
            family_delete = family_delete.max(Some(k.timestamp));
        }
        let value = if k.kind == CellKind::Put && a.group.wanted {
            merge.value()
        } else {
            &[]
        };
        a.group.push(k.timestamp, k.kind, merge.ttl_ms(), value);
        merge.advance()?;
    }
    a.emit_group(family_delete, sink);
    Ok(true)
}

impl Assembler {
    fn emit_group<S: CellSink>(&mut self, family_delete: Option<u64>, sink: &mut S) {
        if self.group.entries.is_empty() {
            return;
        }
        let g = &self.group;
        if !g.wanted {
            self.group.clear();
            return;
        }
        // Consecutive groups are mostly of one family: look it up on change.
        if self
            .family
            .as_ref()
            .is_none_or(|f| !bytes_equal(&f.name, &g.family))
        {
            self.family = self.families.get(&g.family).cloned();
        }
        let Some(family) = self.family.as_ref() else {
            self.group.clear();
            return;
        };
        resolve_column(
            &g.entries,
            family_delete,
            family,
            self.now_ms,
            &mut self.survivors,
        );
        let mut n = 0;
        for &i in &self.survivors {
            let e = &g.entries[i];
            if !self.time_range.contains(e.timestamp) {
                continue;
            }
            if n >= self.max_versions {
                break;
            }
            let value = g.value(e);
            let pass = self.filters.iter().all(|f| match f {
                Filter::ColumnPrefix(p) => g.qualifier.starts_with(p),
                Filter::Value { op, operand } => operand.passes(*op, value),
                Filter::SingleColumnValue { .. } => true,
            });
            if !pass {
                continue;
            }
            n += 1;
            sink.cell(&g.family, &g.qualifier, e.timestamp, value);
        }
        self.group.clear();
    }

    fn has_row_filter(&self) -> bool {
        self.filters
            .iter()
            .any(|f| matches!(f, Filter::SingleColumnValue { .. }))
    }

    fn row_passes(&self, row: &ScannedRow) -> bool {
        self.filters.iter().all(|f| match f {
            Filter::SingleColumnValue {
                family,
                qualifier,
                op,
                operand,
                filter_if_missing,
            } => match row
                .view()
                .cells()
                .find(|c| c.family == family.as_slice() && c.qualifier == qualifier.as_slice())
            {
                Some(c) => operand.passes(*op, c.value),
                None => !filter_if_missing,
            },
            _ => true,
        })
    }
}

impl Iterator for RowScanner {
    type Item = Result<Row>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_row().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_reject_junk() {
        let t = ContinuationToken {
            row: b"host\x00\xff".to_vec(),
            reverse: true,
        };
        assert_eq!(ContinuationToken::decode(&t.encode()).unwrap(), t);
        for junk in ["", "zz", "0201", "01", "0103"] {
            assert!(ContinuationToken::decode(junk).is_err(), "{junk}");
        }
    }
}
