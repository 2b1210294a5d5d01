//! The column reader: a forward scan of named columns of one family,
//! merged across a region's sources a row at a time rather than a cell at
//! a time, for reads that fold many points (InfluxQL over a series).
//!
//! It gives what a [`super::RowScanner`] over the same sources gives for
//! a forward scan of those columns with `max_versions` 1 and no filters
//! (each row's newest visible put per column, within the time range; rows
//! left with no cell are not given), with each value a [`Value`]. It
//! holds only where no source has a delete marker: the caller checks
//! that first and reads through the `RowScanner` otherwise. With puts
//! only, a column's answer is found among the row's puts alone, so
//! sources are merged by row, and time-series blocks decode straight into
//! columns ([`ColumnRows`]) without building the standard block body.
//! A fold whose sink takes runs ([`ColumnSink::takes_runs`]) gets the
//! blocks of a store file that alone holds the rest of its rows by column
//! instead ([`ColumnRuns`]: no cell, value or row key made per point).

use std::cell::RefCell;
use std::sync::Arc;

use crate::cell::{CellKind, KeyRef, first_key_of_row};
use crate::error::{Error, Result};
use crate::region::memstore::cursor::MemCursor;
use crate::region::sst::columns::{BlockRead, ColumnRows, ColumnRuns, ColumnSelect, RunRead};
use crate::region::sst::{ReadAhead, SstReader};
use crate::schema::FamilyDescriptor;
use crate::value::Value;

use super::{Columns, RowScanner, TimeRange};

/// Where a column read's rows go: each row's key and its columns' values
/// (by index into the selected qualifiers, in qualifier order), until it
/// answers false. A closure over (key, cells) is one.
pub trait ColumnSink {
    fn row(&mut self, key: &[u8], cells: &[(u32, Value)]) -> bool;

    /// Whether the sink takes a fold's rows by column ([`Self::runs`]):
    /// then a store file that alone holds the rest of a read gives its
    /// blocks' rows as [`ColumnRuns`] where it can.
    fn takes_runs(&self) -> bool {
        false
    }

    /// A block's rows by column, in key order after the rows given
    /// before; false ends the read. A row a block boundary cut comes as
    /// a row ([`Self::row`]) with all its cells, never in runs. (Taken
    /// apart by [`ColumnRuns::each_row`], a row's cells come by column.)
    fn runs(&mut self, runs: &ColumnRuns) -> bool {
        runs.each_row(&mut |key, cells| self.row(key, cells))
    }
}

impl<F: FnMut(&[u8], &[(u32, Value)]) -> bool> ColumnSink for F {
    fn row(&mut self, key: &[u8], cells: &[(u32, Value)]) -> bool {
        self(key, cells)
    }
}

/// What a column read is for, which decides how it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnRead {
    /// Every row of the range (an aggregate): the column reader decodes
    /// whole blocks straight into columns.
    Fold,
    /// About the first `n` rows (a series' newest points): each source
    /// decodes a block only as far as `n` rows in range, and walks it
    /// again for more if more are wanted, where a fold decodes each
    /// block it meets to its end or the range's.
    FirstRows(usize),
}

/// Rows a MemStore source decodes at once.
const MEM_ROWS: usize = 256;

thread_local! {
    /// Row buffers of this thread's finished column reads, for its next:
    /// a statement reads thousands of series, each from a few sources,
    /// and growing new buffers for each took 7 % of a double-groupby's
    /// time in a profile.
    static SPARE_ROWS: RefCell<Vec<ColumnRows>> = const { RefCell::new(Vec::new()) };
    /// This thread's last fold's buffers, for its next (see
    /// `SPARE_ROWS`; a fold's blocks read ahead are a few hundred KiB).
    static SPARE_FOLD: RefCell<Option<FoldBuffers>> = const { RefCell::new(None) };
}

/// Most spare row buffers a thread keeps, and the largest it keeps (a
/// block's rows take tens of KiB): at most 8 MiB a thread.
const SPARE_BUFFERS: usize = 8;
const SPARE_BUFFER_BYTES: usize = 1 << 20;

/// One source of a column read, newest first as in [`super::merge`].
pub enum ColumnSource {
    Mem(MemCursor),
    File(Arc<SstReader>),
}

/// What the reader answers with besides the columns: the family's rules
/// and the scan's time range.
pub struct ColumnRules<'a> {
    pub family: &'a FamilyDescriptor,
    pub now_ms: u64,
    pub time_range: TimeRange,
    /// Rows each source decodes at a time, when few are wanted (see
    /// [`ColumnRead::FirstRows`]).
    pub max_rows: Option<usize>,
}

/// A source with the rows it has decoded and not yet given.
struct Cursor {
    source: Place,
    rows: ColumnRows,
    at: usize,
    /// Rows a decode stops after (a read of a series' first rows).
    max_rows: Option<usize>,
}

enum Place {
    Mem {
        cursor: MemCursor,
        done: bool,
    },
    File {
        reader: Arc<SstReader>,
        next_block: usize,
        /// Where a decode cut short by `max_rows` goes on in
        /// `next_block`: rows from this key (empty: from the start).
        resume: Vec<u8>,
        done: bool,
    },
}

impl Cursor {
    fn open(source: ColumnSource, select: &ColumnSelect<'_>, max_rows: Option<usize>) -> Cursor {
        let source = match source {
            ColumnSource::Mem(mut cursor) => {
                cursor.seek(&first_key_of_row(select.start));
                Place::Mem {
                    cursor,
                    done: false,
                }
            }
            ColumnSource::File(reader) => Place::File {
                next_block: reader.first_block_for_row(select.start),
                reader,
                resume: Vec::new(),
                done: false,
            },
        };
        let rows = SPARE_ROWS
            .with(|spare| spare.borrow_mut().pop())
            .unwrap_or_default();
        Cursor {
            source,
            rows,
            at: 0,
            max_rows,
        }
    }

    /// The current row's key, decoding more rows when those decoded are
    /// used up; `None` at the source's end.
    fn row(&mut self, select: &ColumnSelect<'_>) -> Result<Option<&[u8]>> {
        while self.at >= self.rows.len() && !self.done() {
            self.rows.clear();
            self.at = 0;
            self.decode(select)?;
        }
        Ok(self.current())
    }

    /// The current row's key, of the rows decoded so far.
    fn current(&self) -> Option<&[u8]> {
        (self.at < self.rows.len()).then(|| self.rows.key(self.at))
    }

    fn done(&self) -> bool {
        match &self.source {
            Place::Mem { done, .. } | Place::File { done, .. } => *done,
        }
    }

    /// Decodes the next rows into `self.rows` (maybe none). A row is never
    /// cut between two decodes: a source then gave its key twice.
    fn decode(&mut self, select: &ColumnSelect<'_>) -> Result<()> {
        let rows = &mut self.rows;
        let max_rows = self.max_rows;
        match &mut self.source {
            Place::Mem { cursor, done } => loop {
                let Some(entry) = cursor.current() else {
                    *done = true;
                    return Ok(());
                };
                let Some(k) = KeyRef::parse(cursor.key()) else {
                    return Err(Error::Internal("malformed key in a MemStore".into()));
                };
                if select.stop.is_some_and(|stop| k.row >= stop) {
                    *done = true;
                    return Ok(());
                }
                let batch = max_rows.unwrap_or(MEM_ROWS).clamp(1, MEM_ROWS);
                if rows.len() >= batch && k.row != rows.key(rows.len() - 1) {
                    return Ok(());
                }
                if let Some(column) = select.column_of(k.family, k.qualifier) {
                    if k.kind != CellKind::Put {
                        return Err(Error::Internal(
                            "delete marker in a MemStore that counts none".into(),
                        ));
                    }
                    rows.push(
                        k.row,
                        column,
                        k.timestamp,
                        entry.ttl_ms,
                        Value::decode(entry.value()),
                    );
                }
                cursor.advance();
            },
            Place::File {
                reader,
                next_block,
                resume,
                done,
            } => {
                // Where a fold's row that goes on in the next block ends:
                // that block is read only so far, and the rest of it
                // next time (read whole, a row cut at every block's end,
                // as a wide row is, drew a series' every block into one
                // decode).
                let mut row_end: Option<Vec<u8>> = None;
                loop {
                    if !reader.block_starts_before(*next_block, select.stop) {
                        *done = true;
                        return Ok(());
                    }
                    let from = ColumnSelect {
                        start: select.start.max(resume.as_slice()),
                        stop: match (row_end.as_deref(), select.stop) {
                            (Some(end), Some(stop)) => Some(end.min(stop)),
                            (end, stop) => end.or(stop),
                        },
                        ..*select
                    };
                    match reader.read_columns(*next_block, &from, max_rows, rows)? {
                        BlockRead::Stop if row_end.is_some() => {
                            // The row is whole; the block goes on after it.
                            *resume = row_end.unwrap_or_default();
                            return Ok(());
                        }
                        BlockRead::Stop => {
                            *done = true;
                            return Ok(());
                        }
                        BlockRead::Cut => {
                            // The next decode walks this block again to
                            // the row after the last one given.
                            resume.clear();
                            resume.extend_from_slice(rows.key(rows.len() - 1));
                            resume.push(0);
                            return Ok(());
                        }
                        BlockRead::End => {
                            resume.clear();
                            *next_block += 1;
                        }
                    }
                    // A row may go on in the next block: read that too.
                    let goes_on = !rows.is_empty()
                        && reader.block_first_row(*next_block) == Some(rows.key(rows.len() - 1));
                    if !goes_on {
                        return Ok(());
                    }
                    if max_rows.is_none() {
                        let mut end = rows.key(rows.len() - 1).to_vec();
                        end.push(0);
                        row_end = Some(end);
                    }
                }
            }
        }
    }
}

impl Drop for Cursor {
    fn drop(&mut self) {
        let mut rows = std::mem::take(&mut self.rows);
        if rows.capacity_bytes() > SPARE_BUFFER_BYTES {
            return;
        }
        rows.clear();
        SPARE_ROWS.with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() < SPARE_BUFFERS {
                spare.push(rows);
            }
        });
    }
}

/// A version of a column in the row being resolved: which source (its
/// rank, newest first) and which of its cells.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    column: u32,
    timestamp: u64,
    ttl_ms: Option<u64>,
    source: usize,
    cell: usize,
}

/// Reads `select` from `sources` (newest first), giving `sink` each row's
/// key and its columns' values (by index into `select.qualifiers`, in
/// qualifier order) until it answers false; false then.
pub fn read_columns(
    sources: Vec<ColumnSource>,
    select: &ColumnSelect<'_>,
    rules: &ColumnRules<'_>,
    sink: &mut dyn ColumnSink,
) -> Result<bool> {
    let mut cursors: Vec<Cursor> = sources
        .into_iter()
        .map(|s| Cursor::open(s, select, rules.max_rows))
        .collect();
    if sink.takes_runs() && rules.max_rows.is_none() {
        // One store file and no MemStore row in range: the file alone
        // answers, by column from its first block (a decode into rows
        // first would go on through every block whose last row the next
        // one goes on with, which is every block of a wide row).
        let mut file = None;
        let mut others = false;
        for c in &mut cursors {
            match &c.source {
                Place::File {
                    reader, next_block, ..
                } => {
                    others |= file.is_some();
                    file = Some((reader.clone(), *next_block));
                }
                Place::Mem { .. } => others |= c.row(select)?.is_some(),
            }
        }
        if !others && let Some((reader, block)) = file {
            return fold_file(&reader, block, Vec::new(), select, rules, sink);
        }
    }
    // A copied row key: the row several sources hold, being resolved,
    // or the smallest row of the other sources, which ends a run.
    let mut bound: Vec<u8> = Vec::new();
    let mut at_row: Vec<usize> = Vec::new();
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut out: Vec<(u32, Value)> = Vec::new();
    loop {
        // The sources at the smallest row.
        at_row.clear();
        for c in cursors.iter_mut() {
            c.row(select)?;
        }
        for (i, c) in cursors.iter().enumerate() {
            let Some(key) = c.current() else {
                continue;
            };
            let order = match at_row.first() {
                None => std::cmp::Ordering::Less,
                Some(&m) => key.cmp(cursors[m].current().unwrap_or_default()),
            };
            match order {
                std::cmp::Ordering::Less => {
                    at_row.clear();
                    at_row.push(i);
                }
                std::cmp::Ordering::Equal => at_row.push(i),
                std::cmp::Ordering::Greater => {}
            }
        }
        let Some(&first) = at_row.first() else {
            return Ok(true);
        };
        if sink.takes_runs()
            && rules.max_rows.is_none()
            && cursors
                .iter()
                .enumerate()
                .all(|(i, c)| i == first || c.current().is_none())
            && let Place::File {
                reader, next_block, ..
            } = &cursors[first].source
        {
            // One store file holds the rest: its rows decoded so far go
            // as rows, its blocks after them by column.
            let (reader, next_block, done) = (reader.clone(), *next_block, cursors[first].done());
            let resume = match &cursors[first].source {
                Place::File { resume, .. } => resume.clone(),
                Place::Mem { .. } => Vec::new(),
            };
            let c = &mut cursors[first];
            while c.at < c.rows.len() {
                if !give_row(c, select, rules, &mut candidates, &mut out, sink) {
                    return Ok(false);
                }
                c.at += 1;
            }
            if done {
                return Ok(true);
            }
            return fold_file(&reader, next_block, resume, select, rules, sink);
        }
        if at_row.len() > 1 {
            // Versions of the row in several sources: resolve them.
            let c = &cursors[first];
            bound.clear();
            bound.extend_from_slice(c.rows.key(c.at));
            resolve_current(
                &mut cursors,
                &at_row,
                select,
                rules,
                &mut candidates,
                &mut out,
            );
            for &i in &at_row {
                cursors[i].at += 1;
            }
            if !out.is_empty() && !sink.row(&bound, &out) {
                return Ok(false);
            }
            continue;
        }
        // A run of rows only `first` holds, up to the next row of another
        // source (a series' points from one file or MemStore, mostly):
        // each row's columns are resolved within the source alone.
        let other = cursors
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != first)
            .filter_map(|(_, c)| c.current())
            .min();
        bound.clear();
        if let Some(key) = other {
            bound.extend_from_slice(key);
        }
        let other = other.is_some();
        loop {
            let c = &mut cursors[first];
            if other && c.rows.key(c.at) >= bound.as_slice() {
                break;
            }
            resolve_current(
                &mut cursors,
                &at_row,
                select,
                rules,
                &mut candidates,
                &mut out,
            );
            let c = &mut cursors[first];
            if !out.is_empty() && !sink.row(c.rows.key(c.at), &out) {
                return Ok(false);
            }
            c.at += 1;
            // Its decoded rows given, a file whose next block lies wholly
            // before the other sources' next row gives its blocks up to
            // that row by column, and goes on from that row after. Row by
            // row, series in files whose times overlap (a region not yet
            // compacted) took 45 % of a double-groupby-1's samples.
            if sink.takes_runs()
                && rules.max_rows.is_none()
                && other
                && c.at >= c.rows.len()
                && let Place::File {
                    reader,
                    next_block,
                    resume,
                    done: false,
                } = &c.source
                && reader.block_starts_before(*next_block + 1, Some(&bound))
            {
                let (reader, block) = (reader.clone(), *next_block);
                let start = select.start.max(resume.as_slice()).to_vec();
                let until = ColumnSelect {
                    start: &start,
                    stop: Some(&bound),
                    ..*select
                };
                if !fold_file(&reader, block, Vec::new(), &until, rules, sink)? {
                    return Ok(false);
                }
                c.rows.clear();
                c.at = 0;
                c.source = Place::File {
                    next_block: reader.first_block_for_row(&bound),
                    reader,
                    resume: bound.clone(),
                    done: false,
                };
                break;
            }
            if c.row(select)?.is_none() {
                break;
            }
        }
    }
}

/// A row of a fold's store file cut by a block boundary, gathered
/// before it is given: from `block` on, its key and the cells so far.
struct CutRow {
    block: usize,
    key: Vec<u8>,
    cells: Vec<(u32, Value)>,
}

/// Reads the rows of `select` in `reader` from data block `block` on
/// (from row `resume` in it, when not empty), the read's only source from
/// there, for a sink that takes runs: each block by column where
/// [`SstReader::read_runs`] can, else as rows resolved by the rules.
/// False when the sink ended the read.
fn fold_file(
    reader: &Arc<SstReader>,
    block: usize,
    resume: Vec<u8>,
    select: &ColumnSelect<'_>,
    rules: &ColumnRules<'_>,
    sink: &mut dyn ColumnSink,
) -> Result<bool> {
    let mut buffers = SPARE_FOLD
        .with(|spare| spare.borrow_mut().take())
        .unwrap_or_default();
    let folded = fold_file_with(reader, block, resume, select, rules, sink, &mut buffers);
    if buffers.ahead.capacity_bytes() <= SPARE_BUFFER_BYTES {
        SPARE_FOLD.with(|spare| *spare.borrow_mut() = Some(buffers));
    }
    folded
}

/// A fold's buffers: a block's runs, and the blocks read ahead.
#[derive(Default)]
struct FoldBuffers {
    runs: ColumnRuns,
    ahead: ReadAhead,
}

/// [`fold_file`] with its buffers.
fn fold_file_with(
    reader: &Arc<SstReader>,
    mut block: usize,
    mut resume: Vec<u8>,
    select: &ColumnSelect<'_>,
    rules: &ColumnRules<'_>,
    sink: &mut dyn ColumnSink,
    buffers: &mut FoldBuffers,
) -> Result<bool> {
    let FoldBuffers { runs, ahead } = buffers;
    let family = rules.family;
    // Whether a lone put at a timestamp answers: always, without a TTL or
    // a time range to refuse it.
    let answers = |ts: u64| {
        let expired = family
            .expires_at(ts, None)
            .is_some_and(|at| at <= rules.now_ms);
        (family.min_versions > 0 || !expired) && rules.time_range.contains(ts)
    };
    let plain = family.ttl_ms().is_none() && rules.time_range == TimeRange::default();
    let answers: Option<&dyn Fn(u64) -> bool> = (!plain).then_some(&answers);
    let mut cut: Option<CutRow> = None;
    let mut key = Vec::new();
    loop {
        if !reader.block_starts_before(block, select.stop) {
            return Ok(cut.is_none_or(|c| give_cut_row(c, family, sink)));
        }
        runs.clear(select.qualifiers.len());
        // A block read from inside (`resume`) is read as rows.
        let read = match resume.is_empty() {
            true => reader.read_runs(block, select, answers, runs, ahead)?,
            false => RunRead::Rows,
        };
        let read = match read {
            RunRead::Runs(read) => read,
            other => {
                // Rows resolved by the rules, from the cut row's start.
                let (from, resume) = match cut.take() {
                    Some(c) => (c.block, c.key),
                    None => (block, std::mem::take(&mut resume)),
                };
                let mut c = Cursor {
                    source: Place::File {
                        reader: reader.clone(),
                        next_block: from,
                        resume,
                        done: false,
                    },
                    rows: SPARE_ROWS
                        .with(|spare| spare.borrow_mut().pop())
                        .unwrap_or_default(),
                    at: 0,
                    max_rows: None,
                };
                // A standard block: the file's others are too.
                let whole_file = other == RunRead::Standard;
                let (mut candidates, mut out) = (Vec::new(), Vec::new());
                loop {
                    if c.row(select)?.is_none() {
                        return Ok(true);
                    }
                    if !give_row(&mut c, select, rules, &mut candidates, &mut out, sink) {
                        return Ok(false);
                    }
                    c.at += 1;
                    // Back to runs only at a block's start: a decode that
                    // ended inside a block (after a row it cut) goes on
                    // from there.
                    let at_block_start =
                        matches!(&c.source, Place::File { resume, .. } if resume.is_empty());
                    if !whole_file && c.at == c.rows.len() && at_block_start {
                        break;
                    }
                }
                let Place::File { next_block, .. } = c.source else {
                    unreachable!("a file's cursor")
                };
                if c.done() {
                    return Ok(true);
                }
                block = next_block;
                continue;
            }
        };
        if let Some((first, _)) = runs.row_span()
            && let Some(c) = cut.as_mut()
        {
            runs.row_key(first, &mut key);
            if key == c.key {
                runs.row_cells(first, &mut c.cells);
                runs.drop_first_row();
            }
        }
        let next_first = reader.block_first_row(block + 1);
        let last_cut = match runs.row_span() {
            Some((_, last)) => {
                runs.row_key(last, &mut key);
                next_first == Some(key.as_slice())
            }
            None => false,
        };
        if let Some(c) = cut.take() {
            if runs.is_empty() && next_first == Some(c.key.as_slice()) {
                cut = Some(c);
            } else if !give_cut_row(c, family, sink) {
                return Ok(false);
            }
        }
        if last_cut && let Some((_, last)) = runs.row_span() {
            let mut cells = Vec::new();
            runs.row_cells(last, &mut cells);
            runs.drop_last_row();
            cut = Some(CutRow {
                block,
                key: key.clone(),
                cells,
            });
        }
        if !runs.is_empty() && !sink.runs(runs) {
            return Ok(false);
        }
        if read == BlockRead::Stop {
            return Ok(cut.is_none_or(|c| give_cut_row(c, family, sink)));
        }
        block += 1;
    }
}

/// Gives `sink` the row a lone cursor is at, resolved within it (false:
/// the sink ended the read).
fn give_row(
    c: &mut Cursor,
    select: &ColumnSelect<'_>,
    rules: &ColumnRules<'_>,
    candidates: &mut Vec<Candidate>,
    out: &mut Vec<(u32, Value)>,
    sink: &mut dyn ColumnSink,
) -> bool {
    resolve_current(
        std::slice::from_mut(c),
        &[0],
        select,
        rules,
        candidates,
        out,
    );
    out.is_empty() || sink.row(c.rows.key(c.at), out)
}

/// Gives a cut row's cells to `sink`, each column's once: the first
/// (newest) of two versions, or neither where the family keeps none (as
/// [`resolve`] answers).
fn give_cut_row(mut c: CutRow, family: &FamilyDescriptor, sink: &mut dyn ColumnSink) -> bool {
    let mut twice = Vec::new();
    for (i, (column, _)) in c.cells.iter().enumerate() {
        if c.cells[..i].iter().any(|(earlier, _)| earlier == column) {
            twice.push(*column);
        }
    }
    if !twice.is_empty() {
        let mut seen = Vec::new();
        c.cells.retain(|(column, _)| {
            let keep = !seen.contains(column) && (family.versions > 0 || !twice.contains(column));
            seen.push(*column);
            keep
        });
    }
    c.cells.is_empty() || sink.row(&c.key, &c.cells)
}

/// Resolves the row the sources `at_row` are at into `out`, taking the
/// values it answers with. One source with one version of each column (a
/// series' rows, mostly) needs no sorting: each cell is its column's only
/// version, in qualifier order already.
fn resolve_current(
    cursors: &mut [Cursor],
    at_row: &[usize],
    select: &ColumnSelect<'_>,
    rules: &ColumnRules<'_>,
    candidates: &mut Vec<Candidate>,
    out: &mut Vec<(u32, Value)>,
) {
    if let [source] = *at_row {
        let c = &mut cursors[source];
        let (_, cells) = c.rows.row_mut(c.at);
        if !cells.windows(2).any(|w| w[0].column == w[1].column) {
            out.clear();
            for cell in cells.iter_mut() {
                let only = Candidate {
                    column: cell.column,
                    timestamp: cell.timestamp,
                    ttl_ms: cell.ttl_ms,
                    source,
                    cell: 0,
                };
                if resolve(&[only], rules).is_some()
                    && let Some(value) = cell.value.take()
                {
                    out.push((cell.column, value));
                }
            }
            return;
        }
    }
    resolve_row(cursors, at_row, select, rules, candidates, out);
}

/// Resolves the row the sources `at_row` are at (each column's version,
/// by [`resolve`]) into `out`, taking the values it answers with.
fn resolve_row(
    cursors: &mut [Cursor],
    at_row: &[usize],
    select: &ColumnSelect<'_>,
    rules: &ColumnRules<'_>,
    candidates: &mut Vec<Candidate>,
    out: &mut Vec<(u32, Value)>,
) {
    out.clear();
    candidates.clear();
    for &i in at_row {
        let c = &mut cursors[i];
        let (_, cells) = c.rows.row_mut(c.at);
        candidates.extend(cells.iter().enumerate().map(|(cell, v)| Candidate {
            column: v.column,
            timestamp: v.timestamp,
            ttl_ms: v.ttl_ms,
            source: i,
            cell,
        }));
    }
    let qualifiers = select.qualifiers;
    candidates.sort_by(|a, b| {
        qualifiers[a.column as usize]
            .cmp(&qualifiers[b.column as usize])
            .then(b.timestamp.cmp(&a.timestamp))
            .then(a.source.cmp(&b.source))
    });
    let mut group = 0;
    while group < candidates.len() {
        let column = candidates[group].column;
        let end = candidates[group..]
            .iter()
            .position(|c| c.column != column)
            .map_or(candidates.len(), |n| group + n);
        if let Some(pick) = resolve(&candidates[group..end], rules) {
            let c = &mut cursors[pick.source];
            let (_, cells) = c.rows.row_mut(c.at);
            if let Some(value) = cells[pick.cell].value.take() {
                out.push((column, value));
            }
        }
        group = end;
    }
}

/// The version of one column a read with `max_versions` 1 answers with,
/// from its puts newest first (ties: newest source first), by the rules of
/// [`super::resolve::resolve_column`] and the scan's time range.
fn resolve(versions: &[Candidate], rules: &ColumnRules<'_>) -> Option<Candidate> {
    let family = rules.family;
    let mut kept = 0u32;
    let mut last_ts = None;
    for v in versions {
        if last_ts == Some(v.timestamp) {
            continue;
        }
        last_ts = Some(v.timestamp);
        // A lone put is answered even past VERSIONS 0, as resolve does.
        if kept >= family.versions && versions.len() > 1 {
            return None;
        }
        let expired = family
            .expires_at(v.timestamp, v.ttl_ms)
            .is_some_and(|at| at <= rules.now_ms);
        if (kept < family.min_versions || !expired) && rules.time_range.contains(v.timestamp) {
            return Some(*v);
        }
        kept += 1;
    }
    None
}

/// What [`read_columns`] gives, read from a [`RowScanner`] whose scan
/// names single `columns`: for reads the column reader cannot make.
pub fn rows_by_column(
    scanner: &mut RowScanner,
    columns: &Columns,
    sink: &mut dyn ColumnSink,
) -> Result<bool> {
    let mut out = Vec::new();
    while let Some(row) = scanner.next_view()? {
        out.clear();
        for c in row.cells() {
            let column = columns
                .columns
                .iter()
                .position(|(f, q)| f.as_slice() == c.family && q.as_slice() == c.qualifier);
            if let (Some(column), Some(value)) = (column, Value::decode(c.value)) {
                out.push((column as u32, value));
            }
        }
        if !out.is_empty() && !sink.row(row.key(), &out) {
            return Ok(false);
        }
    }
    Ok(true)
}
