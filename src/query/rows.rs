//! Raw rows of a query: one cursor per bucket, read a batch ahead on the
//! pool and merged by the unsalted key; paging and deletes by query.

use std::collections::VecDeque;
use std::sync::Arc;

use crossbeam_channel::{Receiver, bounded};
use parking_lot::Mutex;

use super::plan::{plan, query_columns, ts_offset};
use super::pool::QueryPool;
use super::{Query, QueryPage};
use crate::cell::RowMutation;
use crate::codec::compare_bytes;
use crate::error::{Error, Result};
use crate::region::read::{
    Columns, ContinuationToken, Filter, RowCells, RowsPerSeries, Scan, ScannedRow,
};
use crate::table::{Table, TableScanner};

/// A batch of a bucket's rows, and whether the bucket is done.
pub(super) type Batch = Result<(Vec<ScannedRow>, bool)>;

/// Reads one bucket's rows a batch at a time on the pool.
pub(super) struct BucketCursor {
    pub(super) scanner: Arc<Mutex<TableScanner>>,
    pub(super) buf: VecDeque<ScannedRow>,
    pub(super) inflight: Option<Receiver<Batch>>,
    pub(super) done: bool,
    /// A query of one bucket reads it on the caller's thread: nothing to
    /// overlap, and two thread hops saved per batch.
    pub(super) inline: bool,
}

pub(super) const BATCH: usize = 256;

/// Reads up to a batch of a bucket's rows; true when the bucket has no
/// more.
pub(super) fn read_batch(s: &mut TableScanner, rows: &mut Vec<ScannedRow>) -> Result<bool> {
    loop {
        match s.next_view()? {
            Some(row) => {
                rows.push(row.to_scanned());
                if rows.len() == BATCH {
                    return Ok(false);
                }
            }
            None => return Ok(true),
        }
    }
}

impl BucketCursor {
    pub(super) fn request(&mut self, pool: &QueryPool) -> Result<()> {
        if self.done || self.inflight.is_some() || self.inline {
            return Ok(());
        }
        let (tx, rx) = bounded(1);
        let scanner = self.scanner.clone();
        pool.run(Box::new(move || {
            let mut rows = Vec::with_capacity(BATCH);
            let outcome = read_batch(&mut scanner.lock(), &mut rows).map(|done| (rows, done));
            // The query may be gone: then nobody listens, and that is fine.
            let _ = tx.send(outcome);
        }))?;
        self.inflight = Some(rx);
        Ok(())
    }

    /// Makes sure a row is buffered if the bucket has one.
    pub(super) fn fill(&mut self, pool: &QueryPool) -> Result<()> {
        while self.buf.is_empty() && !self.done {
            if self.inline {
                let mut rows = Vec::with_capacity(BATCH);
                self.done = read_batch(&mut self.scanner.lock(), &mut rows)?;
                self.buf.extend(rows);
                continue;
            }
            self.request(pool)?;
            let rx = self.inflight.take().expect("requested above");
            let (rows, done) = rx.recv().map_err(|_| Error::Closed)??;
            self.buf.extend(rows);
            self.done = done;
        }
        // Read ahead one batch while the merge works through this one.
        self.request(pool)
    }
}

/// A raw (non-aggregated) query's rows, merged from its bucket scanners in
/// logical order, one at a time: a page collects them, a streamed answer
/// sends them as they come. Dropping it stops every bucket scanner.
pub struct QueryRows {
    pub(super) pool: Arc<QueryPool>,
    pub(super) cursors: Vec<BucketCursor>,
    /// Salt buckets the cursors read.
    pub(super) buckets: usize,
    pub(super) salt_len: usize,
    pub(super) reverse: bool,
    pub(super) to_skip: usize,
    pub(super) remaining: Option<usize>,
    /// `series_limit`: the unsalted series length and the rows kept of
    /// each series, counted again here since a series' rows may come from
    /// several buckets or regions.
    pub(super) series_limit: Option<(usize, usize)>,
    pub(super) series: SeriesCount,
    /// Unsalted key of the last row handed out.
    pub(super) last_key: Option<Vec<u8>>,
    /// Cells handed out, counted once when the rows are dropped.
    pub(super) cells_returned: u64,
}

/// The series of the last row handed out (unsalted) and how many of its
/// rows were.
#[derive(Default)]
pub(super) struct SeriesCount {
    pub(super) prefix: Vec<u8>,
    pub(super) rows: usize,
}

impl Drop for QueryRows {
    fn drop(&mut self) {
        metrics::counter!("halite_query_cells_returned_total").increment(self.cells_returned);
    }
}

impl QueryRows {
    pub fn new(table: Arc<Table>, pool: Arc<QueryPool>, q: &Query) -> Result<Self> {
        let selection = query_columns(&table, q)?;
        Self::with_selection(table, pool, q, selection)
    }

    /// The rows a delete of `q` reaches: with no family or fields named,
    /// every family of them (a delete takes whole rows).
    pub(super) fn for_delete(table: Arc<Table>, pool: Arc<QueryPool>, q: &Query) -> Result<Self> {
        let (columns, filters) = query_columns(&table, q)?;
        let columns = if q.family.is_none() && q.fields.is_empty() {
            Columns::all()
        } else {
            columns
        };
        Self::with_selection(table, pool, q, (columns, filters))
    }

    pub(super) fn with_selection(
        table: Arc<Table>,
        pool: Arc<QueryPool>,
        q: &Query,
        (columns, filters): (Columns, Vec<Filter>),
    ) -> Result<Self> {
        let schema = &table.desc.key;
        let p = plan(schema, q)?;
        p.record_buckets();
        let salt_len = schema.salt.as_ref().map_or(0, |s| s.width);
        // A series is its key before the time field; with `series_limit`
        // a token also carries how many rows of its series were returned.
        let series_len = match q.series_limit {
            Some(0) => {
                return Err(Error::InvalidInput(
                    "series_limit must be at least 1 (leave it out for every row)".into(),
                ));
            }
            Some(_) => Some(
                ts_offset(schema)
                    .map(|(_, at, _)| at - salt_len)
                    .ok_or_else(|| {
                        Error::InvalidInput(
                            "series_limit needs a timestamp key field (a series is the key before it)"
                                .into(),
                        )
                    })?,
            ),
            None => None,
        };
        let mut series = SeriesCount::default();
        let token = match &q.continuation {
            Some(t) => {
                let t = ContinuationToken::decode(t)?;
                if t.reverse != q.reverse {
                    return Err(Error::InvalidInput(
                        "continuation token belongs to a query in the other direction".into(),
                    ));
                }
                let mut row = t.row;
                if let Some(len) = series_len {
                    let count = row
                        .len()
                        .checked_sub(4)
                        .filter(|&at| at >= len)
                        .ok_or_else(|| {
                            Error::InvalidInput(
                                "continuation token is not one of a query with series_limit".into(),
                            )
                        })?;
                    let rows = u32::from_be_bytes(row[count..].try_into().expect("4 bytes"));
                    row.truncate(count);
                    series.prefix = row[..len].to_vec();
                    series.rows = rows as usize;
                }
                Some(row)
            }
            None => None,
        };
        // Each bucket needs at most offset + limit rows, and one more to
        // tell whether a continuation token is owed: a bucket stopped at
        // exactly the limit looks finished. Not with `series_limit`: the
        // merge may drop rows a bucket counted (a series resumed from a
        // token, or spread over buckets), so buckets read on a batch at a
        // time as the merge asks.
        let need = q
            .limit
            .filter(|_| series_len.is_none())
            .map(|l| l.saturating_add(q.offset).saturating_add(1));
        let rows_per_series = match (series_len, q.series_limit) {
            (Some(len), Some(rows)) => Some(RowsPerSeries {
                series_len: salt_len + len,
                rows,
            }),
            _ => None,
        };
        let mut cursors = Vec::with_capacity(p.ranges.len());
        for range in &p.ranges {
            let salt = schema.salt_bytes(range.bucket);
            let (mut start, mut stop) = range.salted(&salt);
            if let Some(after) = &token {
                let key = [salt.as_slice(), after].concat();
                if q.reverse {
                    if stop.as_ref().is_none_or(|s| *s > key) {
                        stop = Some(key);
                    }
                } else {
                    let mut next = key;
                    next.push(0);
                    if next > start {
                        start = next;
                    }
                }
            }
            if stop.as_ref().is_some_and(|s| *s <= start) {
                continue; // all of it before the token
            }
            let scan = Scan {
                start: Some(start),
                stop,
                columns: columns.clone(),
                filters: filters.clone(),
                key_window: p.key_window,
                rows_per_series,
                time_range: p.cell_time_range(),
                limit: need,
                reverse: q.reverse,
                ..Scan::new()
            };
            let scanner = TableScanner::new(table.clone(), scan)?;
            let mut c = BucketCursor {
                scanner: Arc::new(Mutex::new(scanner)),
                buf: VecDeque::new(),
                inflight: None,
                done: false,
                inline: p.ranges.len() == 1,
            };
            // Start every range at once: the first batches load in parallel.
            c.request(&pool)?;
            cursors.push(c);
        }
        Ok(QueryRows {
            pool,
            cursors,
            buckets: p.buckets.len(),
            salt_len,
            reverse: q.reverse,
            to_skip: q.offset,
            remaining: q.limit,
            series_limit: series_len.zip(q.series_limit),
            series,
            last_key: None,
            cells_returned: 0,
        })
    }

    /// How many salt buckets the query reads.
    pub fn buckets(&self) -> usize {
        self.buckets
    }

    /// The next row in logical order, or `None` at the end or the limit.
    pub fn next_row(&mut self) -> Result<Option<ScannedRow>> {
        loop {
            if self.remaining == Some(0) {
                return Ok(None);
            }
            let Some(row) = self.pop_smallest()? else {
                return Ok(None);
            };
            if let Some((len, most)) = self.series_limit {
                let key = &row.key()[self.salt_len..];
                let series = key.get(..len).unwrap_or(key);
                if series == self.series.prefix.as_slice() {
                    self.series.rows += 1;
                } else {
                    self.series.prefix.clear();
                    self.series.prefix.extend_from_slice(series);
                    self.series.rows = 1;
                }
                if self.series.rows > most {
                    continue;
                }
            }
            if self.to_skip > 0 {
                self.to_skip -= 1;
                continue;
            }
            if let Some(r) = self.remaining.as_mut() {
                *r -= 1;
            }
            let last = self.last_key.get_or_insert_with(Vec::new);
            last.clear();
            last.extend_from_slice(&row.key()[self.salt_len..]);
            self.cells_returned += row.cell_count() as u64;
            return Ok(Some(row));
        }
    }

    /// Whether `key` (salted) is of the series last handed out, which has
    /// all the rows `series_limit` gives it.
    fn in_full_series(&self, key: &[u8]) -> bool {
        self.series_limit.is_some_and(|(len, most)| {
            self.series.rows >= most
                && key
                    .get(self.salt_len..self.salt_len + len)
                    .is_some_and(|series| series == self.series.prefix.as_slice())
        })
    }

    pub(super) fn pop_smallest(&mut self) -> Result<Option<ScannedRow>> {
        let mut best: Option<usize> = None;
        for i in 0..self.cursors.len() {
            self.cursors[i].fill(&self.pool)?;
            let Some(row) = self.cursors[i].buf.front() else {
                continue;
            };
            let better = match best {
                None => true,
                Some(b) => {
                    let cur = &self.cursors[b].buf[0].key()[self.salt_len..];
                    let o = compare_bytes(&row.key()[self.salt_len..], cur);
                    if self.reverse { o.is_gt() } else { o.is_lt() }
                }
            };
            if better {
                best = Some(i);
            }
        }
        Ok(best.and_then(|b| self.cursors[b].buf.pop_front()))
    }

    /// After the rows ran out: a token to continue after the last row when
    /// the limit cut the answer short and rows remain.
    pub fn continuation(&mut self) -> Result<Option<ContinuationToken>> {
        if self.remaining != Some(0) {
            return Ok(None);
        }
        // Rows of a series already given its `series_limit` rows are not
        // more: the merge would drop them.
        let mut more = false;
        for i in 0..self.cursors.len() {
            loop {
                self.cursors[i].fill(&self.pool)?;
                let Some(row) = self.cursors[i].buf.front() else {
                    break;
                };
                if !self.in_full_series(row.key()) {
                    more = true;
                    break;
                }
                self.cursors[i].buf.pop_front();
            }
            if more {
                break;
            }
        }
        Ok(match (more, &self.last_key) {
            (true, Some(last)) => {
                let mut row = last.clone();
                if self.series_limit.is_some() {
                    let rows = u32::try_from(self.series.rows).unwrap_or(u32::MAX);
                    row.extend_from_slice(&rows.to_be_bytes());
                }
                Some(ContinuationToken {
                    row,
                    reverse: self.reverse,
                })
            }
            _ => None,
        })
    }
}

/// Deletes what `q` selects (series by leading key fields, a time range,
/// optionally some fields of a family), handing the delete markers to
/// `write` a chunk at a time; returns the rows reached. Each row gets a
/// row delete (or, with fields, column deletes) at its newest cell's
/// timestamp: what the rows held when the delete ran is hidden at once,
/// and a version written later with a newer timestamp is not.
pub fn delete(
    table: Arc<Table>,
    pool: Arc<QueryPool>,
    q: &Query,
    mut write: impl FnMut(Vec<RowMutation>) -> Result<()>,
) -> Result<u64> {
    if q.aggregate.is_some()
        || q.value_filter.is_some()
        || q.series_limit.is_some()
        || q.limit.is_some()
        || q.offset != 0
        || q.reverse
        || q.continuation.is_some()
    {
        return Err(Error::InvalidInput(
            "a delete takes series, a time range, family and fields: drop aggregate, value_filter, series_limit, limit, offset, reverse and continuation".into(),
        ));
    }
    let timed = q.start.is_some() || q.end.is_some() || q.start_ms.is_some() || q.end_ms.is_some();
    if q.series.is_empty() && !timed {
        return Err(Error::InvalidInput(
            "a delete names series or a time range (or both); to empty a whole table, drop it"
                .into(),
        ));
    }
    const CHUNK: usize = 1000;
    let mut rows = QueryRows::for_delete(table, pool, q)?;
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut reached = 0;
    while let Some(row) = rows.next_row()? {
        reached += 1;
        let mut m = RowMutation::new(row.key().to_vec());
        if q.fields.is_empty() && q.family.is_none() {
            let newest = row.cells().map(|c| c.timestamp).max().unwrap_or(0);
            m = m.delete_row(Some(newest));
        } else if q.fields.is_empty() {
            let newest = row.cells().map(|c| c.timestamp).max().unwrap_or(0);
            m = m.delete_family(q.family.clone().unwrap_or_default(), Some(newest));
        } else {
            for c in row.cells() {
                m = m.delete_column(c.family.to_vec(), c.qualifier.to_vec(), Some(c.timestamp));
            }
        }
        chunk.push(m);
        if chunk.len() == CHUNK {
            write(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)))?;
        }
    }
    if !chunk.is_empty() {
        write(chunk)?;
    }
    Ok(reached)
}

/// Runs a raw (non-aggregated) query page.
pub fn run(table: Arc<Table>, pool: Arc<QueryPool>, q: &Query) -> Result<QueryPage> {
    let mut rows_of = QueryRows::new(table, pool, q)?;
    let mut rows = Vec::new();
    while let Some(row) = rows_of.next_row()? {
        rows.push(row);
    }
    Ok(QueryPage {
        continuation: rows_of.continuation()?,
        buckets_scanned: rows_of.buckets(),
        rows,
        partial: Vec::new(),
    })
}
