//! Raw rows of a query: one cursor per bucket, read a batch ahead on the
//! pool and merged by the unsalted key; paging and deletes by query.

use std::collections::VecDeque;
use std::sync::Arc;

use crossbeam_channel::{Receiver, bounded};
use parking_lot::Mutex;

use super::plan::{plan, query_columns};
use super::pool::QueryPool;
use super::{Query, QueryPage};
use crate::cell::RowMutation;
use crate::codec::{compare_bytes, prefix_successor};
use crate::error::{Error, Result};
use crate::region::read::{Columns, ContinuationToken, Filter, RowCells, Scan, ScannedRow};
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
    pub(super) salt_len: usize,
    pub(super) reverse: bool,
    pub(super) to_skip: usize,
    pub(super) remaining: Option<usize>,
    /// Unsalted key of the last row handed out.
    pub(super) last_key: Option<Vec<u8>>,
    /// Cells handed out, counted once when the rows are dropped.
    pub(super) cells_returned: u64,
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
        let token = match &q.continuation {
            Some(t) => {
                let t = ContinuationToken::decode(t)?;
                if t.reverse != q.reverse {
                    return Err(Error::InvalidInput(
                        "continuation token belongs to a query in the other direction".into(),
                    ));
                }
                Some(t.row)
            }
            None => None,
        };
        // Each bucket needs at most offset + limit rows, and one more to
        // tell whether a continuation token is owed: a bucket stopped at
        // exactly the limit looks finished.
        let need = q
            .limit
            .map(|l| l.saturating_add(q.offset).saturating_add(1));
        let mut cursors = Vec::with_capacity(p.buckets.len());
        for &b in &p.buckets {
            let salt = schema.salt_bytes(b);
            let with_salt = |k: &[u8]| [salt.as_slice(), k].concat();
            let mut start = with_salt(&p.lo);
            let mut stop = match &p.hi {
                Some(h) => Some(with_salt(h)),
                None => prefix_successor(&salt),
            };
            if let Some(after) = &token {
                let key = with_salt(after);
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
            let scan = Scan {
                start: Some(start),
                stop,
                columns: columns.clone(),
                filters: filters.clone(),
                key_window: p.key_window,
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
                inline: p.buckets.len() == 1,
            };
            // Start every bucket at once: the first batches load in parallel.
            c.request(&pool)?;
            cursors.push(c);
        }
        Ok(QueryRows {
            pool,
            cursors,
            salt_len,
            reverse: q.reverse,
            to_skip: q.offset,
            remaining: q.limit,
            last_key: None,
            cells_returned: 0,
        })
    }

    /// How many bucket scanners the query runs.
    pub fn buckets(&self) -> usize {
        self.cursors.len()
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
        let mut more = false;
        for c in &mut self.cursors {
            c.fill(&self.pool)?;
            more |= !c.buf.is_empty();
        }
        Ok(match (more, &self.last_key) {
            (true, Some(last)) => Some(ContinuationToken {
                row: last.clone(),
                reverse: self.reverse,
            }),
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
        || q.limit.is_some()
        || q.offset != 0
        || q.reverse
        || q.continuation.is_some()
    {
        return Err(Error::InvalidInput(
            "a delete takes series, a time range, family and fields: drop aggregate, value_filter, limit, offset, reverse and continuation".into(),
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
