//! Logical series queries over salted tables: the parallel multi-prefix
//! scanner.
//!
//! A query names a table, values for the leading key fields (say `metric`
//! and `host`), a time range and fields. With salted keys the matching rows
//! sit under every salt bucket, so the query becomes one scanner per bucket,
//! each over the same logical range under its salt prefix (one bucket only
//! when the values fix every salt field).
//!
//! Bucket scanners are read in batches by a bounded pool of threads, each
//! bucket at most one batch ahead of what the merge has used; the merge
//! orders rows by the unsalted key, which is exactly the order an unsalted
//! table would have. Offset and limit apply after the merge; each bucket
//! stops after offset + limit rows; dropping the query stops every bucket
//! (a batch in flight finishes, and nothing more is read). Nothing is
//! buffered whole, unlike OpenTSDB's SaltScanner.
//!
//! With aggregation, each bucket computes partial min/max/sum/count/first/
//! last per series, field and downsample window while it scans, and the
//! merge combines the partials: raw points never leave the bucket scans.

pub mod engine;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, bounded};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::cell::RowMutation;
use crate::codec::{bytes_equal, compare_bytes, prefix_successor};
use crate::error::{Error, Result};
use crate::key::{FieldEncoding, FieldValue, KeySchema, TimeUnit};
use crate::region::read::{
    CellSink, Columns, CompareOp, ContinuationToken, Filter, Operand, RowCells, Scan, ScannedRow,
    TimeRange,
};
use crate::table::{Table, TableScanner};

/// OpenTSDB's aggregators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AggFn {
    Min,
    Max,
    Sum,
    Count,
    Avg,
    First,
    Last,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Aggregate {
    pub functions: Vec<AggFn>,
    /// Window length in ms; absent: one window over the whole range.
    #[serde(default)]
    pub downsample_ms: Option<u64>,
    /// Window length in the table's time unit (instead of `downsample_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downsample: Option<u64>,
}

impl Aggregate {
    /// The window length in `unit`, from whichever of the two was given.
    fn window(&self, unit: TimeUnit) -> Result<Option<u64>> {
        let window = match (self.downsample, self.downsample_ms) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidInput(
                    "give downsample (in the table's time unit) or downsample_ms, not both".into(),
                ));
            }
            (Some(w), None) => Some(w),
            (None, Some(ms)) => {
                let w = unit.from_ms_ceil(ms);
                if unit.to_ms_floor(w) != Some(ms) {
                    return Err(Error::InvalidInput(format!(
                        "downsample_ms {ms} is not a whole number of the table's {}: give downsample in {}",
                        unit.name(),
                        unit.name()
                    )));
                }
                Some(w)
            }
            (None, None) => None,
        };
        if window == Some(0) {
            return Err(Error::InvalidInput(
                "the downsample window must be at least 1".into(),
            ));
        }
        Ok(window)
    }
}

/// A logical query. `Default` is every row of the table, oldest key first.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Query {
    /// Values of leading key fields, in key order (`[["metric","cpu"],["host","h1"]]`).
    #[serde(default)]
    pub series: Vec<(String, FieldValue)>,
    /// Time range `[start_ms, end_ms)` on the key's timestamp field, in
    /// epoch milliseconds...
    #[serde(default)]
    pub start_ms: Option<u64>,
    #[serde(default)]
    pub end_ms: Option<u64>,
    /// ...or `[start, end)` in the table's time unit (ns for an ns table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<u64>,
    /// Column family; the table's first when absent.
    #[serde(default)]
    pub family: Option<String>,
    /// Qualifiers to return; all when empty.
    #[serde(default)]
    pub fields: Vec<String>,
    #[serde(default)]
    pub offset: usize,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub reverse: bool,
    /// Opaque token from a previous page ("after this logical key").
    #[serde(default)]
    pub continuation: Option<String>,
    #[serde(default)]
    pub aggregate: Option<Aggregate>,
    /// Keep only values (or, with `field`, rows) that compare true.
    #[serde(default)]
    pub value_filter: Option<ValueFilter>,
}

/// A value predicate of a query, compared typed (see [`Operand`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueFilter {
    pub op: CompareOp,
    pub value: Operand,
    /// Keep the rows whose value of this field compares true, with all
    /// their asked fields (`usage_user > 90`, and the row's other fields);
    /// without it, keep each field value that compares true on its own.
    #[serde(default)]
    pub field: Option<String>,
}

/// One page of raw rows, in logical order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryPage {
    pub rows: Vec<ScannedRow>,
    pub continuation: Option<ContinuationToken>,
    pub buckets_scanned: usize,
}

/// Aggregates of one series, field and window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesAggregate {
    pub series: Vec<(String, FieldValue)>,
    pub field: String,
    /// Start of the downsample window (in the table's time unit), when
    /// downsampling.
    pub window: Option<u64>,
    pub values: Vec<(AggFn, f64)>,
}

/// Partial aggregate state; partials of one series from several buckets
/// combine into the same answer as one scan would give.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Partial {
    pub min: f64,
    pub max: f64,
    pub sum: f64,
    pub count: u64,
    pub first: (u64, f64),
    pub last: (u64, f64),
}

impl Partial {
    fn new(ts: u64, v: f64) -> Self {
        Partial {
            min: v,
            max: v,
            sum: v,
            count: 1,
            first: (ts, v),
            last: (ts, v),
        }
    }

    fn add(&mut self, ts: u64, v: f64) {
        self.combine(&Partial::new(ts, v));
    }

    pub fn combine(&mut self, o: &Partial) {
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
        self.count += o.count;
        if o.first.0 < self.first.0 {
            self.first = o.first;
        }
        if o.last.0 > self.last.0 {
            self.last = o.last;
        }
    }

    pub fn value(&self, f: AggFn) -> f64 {
        match f {
            AggFn::Min => self.min,
            AggFn::Max => self.max,
            AggFn::Sum => self.sum,
            AggFn::Count => self.count as f64,
            AggFn::Avg => self.sum / self.count as f64,
            AggFn::First => self.first.1,
            AggFn::Last => self.last.1,
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads that run bucket scans (a batch at a time).
pub struct QueryPool {
    tx: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl QueryPool {
    pub fn new(threads: usize) -> Self {
        let (tx, rx) = bounded::<Job>(1024);
        let threads = (0..threads.max(1))
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("halite-query-{i}"))
                    .spawn(move || {
                        for job in rx {
                            job();
                        }
                    })
                    .expect("spawn query thread")
            })
            .collect();
        QueryPool {
            tx: Some(tx),
            threads,
        }
    }

    fn run(&self, job: Job) -> Result<()> {
        self.tx
            .as_ref()
            .ok_or(Error::Closed)?
            .send(job)
            .map_err(|_| Error::Closed)
    }
}

impl Drop for QueryPool {
    fn drop(&mut self) {
        self.tx.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Where a query's rows are in one table.
struct Plan {
    buckets: Vec<u32>,
    /// Range after the salt: [lo, hi) (hi `None`: to the end of the bucket).
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
    /// Offset of the timestamp field in the key, when rows must be filtered
    /// on it (it does not follow the series fields directly).
    ts_filter: Option<(usize, FieldEncoding)>,
    /// `[start, end)` in `unit`, the table's.
    start: u64,
    end: u64,
    unit: TimeUnit,
}

impl Plan {
    /// Counts the plan's buckets in `halite_query_buckets`, once per query
    /// run (not per plan: the API also plans to decide where to run one).
    fn record_buckets(&self) {
        metrics::histogram!("halite_query_buckets").record(self.buckets.len() as f64);
    }

    /// The query's time range as a range of cell versions. The write API
    /// gives every cell its point's timestamp, so this selects the same
    /// rows as the key's timestamp field — and lets scans leave out store
    /// files entirely older than the range without opening them.
    fn cell_time_range(&self) -> TimeRange {
        // Cell versions are the key's time in whole milliseconds.
        TimeRange {
            min: self.unit.to_ms_floor(self.start).unwrap_or(u64::MAX),
            max: self.unit.to_ms_ceil(self.end),
        }
    }
}

/// The first timestamp field: its index, byte offset in the key, encoding.
fn ts_offset(schema: &KeySchema) -> Option<(usize, usize, FieldEncoding)> {
    let mut at = schema.prefix_len();
    for (i, f) in schema.fields.iter().enumerate() {
        if f.encoding.is_time() {
            return Some((i, at, f.encoding.clone()));
        }
        at += f.encoding.width();
    }
    None
}

/// Keys bounding `[start, end)` on a timestamp field that directly follows
/// `prefix`: `[lo, hi)`, `hi = None` for the end of the prefix.
fn time_window(
    prefix: &[u8],
    enc: &FieldEncoding,
    start: u64,
    end: u64,
) -> (Vec<u8>, Option<Vec<u8>>) {
    let with = |ts: u64| [prefix, &ts.to_be_bytes()].concat();
    match enc {
        FieldEncoding::Timestamp => (
            with(start),
            if end == u64::MAX {
                prefix_successor(prefix)
            } else {
                Some(with(end))
            },
        ),
        // ts in [start, end) <=> MAX - ts in (MAX - end, MAX - start].
        _ => (
            if end == u64::MAX {
                prefix.to_vec()
            } else {
                with(u64::MAX - (end - 1))
            },
            if start == 0 {
                prefix_successor(prefix)
            } else {
                Some(with(u64::MAX - start + 1))
            },
        ),
    }
}

/// The query's family (the table's first by default), column selection
/// and value filter.
fn query_columns(table: &Table, q: &Query) -> Result<(Columns, Vec<Filter>)> {
    let family = q
        .family
        .clone()
        .or_else(|| table.desc.families.first().map(|f| f.name.clone()))
        .ok_or_else(|| Error::InvalidInput("table has no families".into()))?;
    if !table.desc.families.iter().any(|f| f.name == family) {
        return Err(Error::UnknownFamily(family));
    }
    let filters = match &q.value_filter {
        None => Vec::new(),
        Some(ValueFilter {
            op,
            value,
            field: None,
        }) => vec![Filter::Value {
            op: *op,
            operand: value.clone(),
        }],
        Some(ValueFilter {
            op,
            value,
            field: Some(field),
        }) => {
            if !q.fields.is_empty() && !q.fields.contains(field) {
                return Err(Error::InvalidInput(format!(
                    "value_filter.field `{field}` must be one of the query's fields, or leave `fields` empty"
                )));
            }
            vec![Filter::SingleColumnValue {
                family: family.clone().into_bytes(),
                qualifier: field.clone().into_bytes(),
                op: *op,
                operand: value.clone(),
                filter_if_missing: true,
            }]
        }
    };
    let columns = if q.fields.is_empty() {
        Columns {
            families: vec![family.into_bytes()],
            columns: vec![],
        }
    } else {
        Columns {
            families: vec![],
            columns: q
                .fields
                .iter()
                .map(|f| (family.clone().into_bytes(), f.clone().into_bytes()))
                .collect(),
        }
    };
    Ok((columns, filters))
}

fn key_ts(key: &[u8], at: usize, enc: &FieldEncoding) -> Option<u64> {
    let raw = u64::from_be_bytes(key.get(at..at + 8)?.try_into().ok()?);
    Some(match enc {
        FieldEncoding::ReversedTimestamp => u64::MAX - raw,
        _ => raw,
    })
}

/// Whether `q` is a raw read of at most `max_rows` rows of one series (one
/// bucket, the scan bounded by the series and its time window, no row read
/// only to be dropped for its time): from a few hundred microseconds to a
/// few milliseconds of work, cheaper to run where the request arrived than
/// to hand to another thread and back.
pub fn reads_one_series_page(schema: &KeySchema, q: &Query, max_rows: usize) -> bool {
    q.aggregate.is_none()
        && q.limit
            .is_some_and(|l| l.saturating_add(q.offset) <= max_rows)
        && plan(schema, q).is_ok_and(|p| p.buckets.len() == 1 && p.ts_filter.is_none())
}

fn plan(schema: &KeySchema, q: &Query) -> Result<Plan> {
    if schema.md5_prefix > 0 {
        return Err(Error::InvalidInput(
            "this table has hashed keys (md5_prefix): it serves gets and raw scans, not series queries".into(),
        ));
    }
    let mut values = Vec::with_capacity(q.series.len());
    for (i, (name, v)) in q.series.iter().enumerate() {
        match schema.fields.get(i) {
            Some(f) if &f.name == name => values.push(v.clone()),
            _ => {
                return Err(Error::InvalidInput(format!(
                    "series fields must be leading key fields in key order; `{name}` is not field {} ({})",
                    i + 1,
                    schema
                        .fields
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }
    let lead = schema.encode_leading(&values)?;
    let unit = schema.time_unit;
    let either = |t: Option<u64>, ms: Option<u64>, name: &str| match (t, ms) {
        (Some(_), Some(_)) => Err(Error::InvalidInput(format!(
            "give {name} (in the table's time unit) or {name}_ms, not both"
        ))),
        (Some(t), None) => Ok(Some(t)),
        (None, ms) => Ok(ms.map(|ms| unit.from_ms_ceil(ms))),
    };
    let (q_start, q_end) = (
        either(q.start, q.start_ms, "start")?,
        either(q.end, q.end_ms, "end")?,
    );
    let start = q_start.unwrap_or(0);
    let end = q_end.unwrap_or(u64::MAX);
    if start > end {
        return Err(Error::InvalidInput(format!(
            "time range is inverted: start {start} > end {end}"
        )));
    }
    let buckets: Vec<u32> = match schema.bucket_for_leading(&values)? {
        _ if start == end => Vec::new(), // an empty range matches nothing
        Some(b) => vec![b],
        None => (0..schema.buckets()).collect(),
    };
    let (mut lo, mut hi) = (lead.clone(), prefix_successor(&lead));
    let mut ts_filter = None;
    if let Some((i, at, enc)) = ts_offset(schema) {
        if i == values.len() {
            // The timestamp follows the series: the range narrows the scan.
            if start < end {
                (lo, hi) = time_window(&lead, &enc, start, end);
            }
        } else if q_start.is_some() || q_end.is_some() {
            ts_filter = Some((at, enc));
        }
    } else if q_start.is_some() || q_end.is_some() {
        return Err(Error::InvalidInput(
            "the table's key has no timestamp field: drop the time range".into(),
        ));
    }
    if lead.is_empty() && hi.as_ref().is_some_and(|h| h.is_empty()) {
        hi = None;
    }
    Ok(Plan {
        buckets,
        lo,
        hi,
        ts_filter,
        start,
        end,
        unit,
    })
}

/// A batch of a bucket's rows, and whether the bucket is done.
type Batch = Result<(Vec<ScannedRow>, bool)>;

/// Reads one bucket's rows a batch at a time on the pool.
struct BucketCursor {
    scanner: Arc<Mutex<TableScanner>>,
    buf: VecDeque<ScannedRow>,
    inflight: Option<Receiver<Batch>>,
    done: bool,
    /// A query of one bucket reads it on the caller's thread: nothing to
    /// overlap, and two thread hops saved per batch.
    inline: bool,
}

const BATCH: usize = 256;

/// Reads up to a batch of a bucket's rows that pass the timestamp filter;
/// true when the bucket has no more.
fn read_batch(
    s: &mut TableScanner,
    filter: Option<&(usize, FieldEncoding, u64, u64)>,
    rows: &mut Vec<ScannedRow>,
) -> Result<bool> {
    loop {
        match s.next_view()? {
            Some(row) => {
                let keep = filter.is_none_or(|(at, enc, start, end)| {
                    key_ts(row.key(), *at, enc).is_some_and(|t| t >= *start && t < *end)
                });
                if keep {
                    rows.push(row.to_scanned());
                    if rows.len() == BATCH {
                        return Ok(false);
                    }
                }
            }
            None => return Ok(true),
        }
    }
}

impl BucketCursor {
    fn request(
        &mut self,
        pool: &QueryPool,
        filter: Option<(usize, FieldEncoding, u64, u64)>,
    ) -> Result<()> {
        if self.done || self.inflight.is_some() || self.inline {
            return Ok(());
        }
        let (tx, rx) = bounded(1);
        let scanner = self.scanner.clone();
        pool.run(Box::new(move || {
            let mut rows = Vec::with_capacity(BATCH);
            let outcome = read_batch(&mut scanner.lock(), filter.as_ref(), &mut rows)
                .map(|done| (rows, done));
            // The query may be gone: then nobody listens, and that is fine.
            let _ = tx.send(outcome);
        }))?;
        self.inflight = Some(rx);
        Ok(())
    }

    /// Makes sure a row is buffered if the bucket has one.
    fn fill(
        &mut self,
        pool: &QueryPool,
        filter: Option<(usize, FieldEncoding, u64, u64)>,
    ) -> Result<()> {
        while self.buf.is_empty() && !self.done {
            if self.inline {
                let mut rows = Vec::with_capacity(BATCH);
                self.done = read_batch(&mut self.scanner.lock(), filter.as_ref(), &mut rows)?;
                self.buf.extend(rows);
                continue;
            }
            self.request(pool, filter.clone())?;
            let rx = self.inflight.take().expect("requested above");
            let (rows, done) = rx.recv().map_err(|_| Error::Closed)??;
            self.buf.extend(rows);
            self.done = done;
        }
        // Read ahead one batch while the merge works through this one.
        self.request(pool, filter)
    }
}

/// A raw (non-aggregated) query's rows, merged from its bucket scanners in
/// logical order, one at a time: a page collects them, a streamed answer
/// sends them as they come. Dropping it stops every bucket scanner.
pub struct QueryRows {
    pool: Arc<QueryPool>,
    cursors: Vec<BucketCursor>,
    filter: Option<(usize, FieldEncoding, u64, u64)>,
    salt_len: usize,
    reverse: bool,
    to_skip: usize,
    remaining: Option<usize>,
    /// Unsalted key of the last row handed out.
    last_key: Option<Vec<u8>>,
    /// Cells handed out, counted once when the rows are dropped.
    cells_returned: u64,
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
    fn for_delete(table: Arc<Table>, pool: Arc<QueryPool>, q: &Query) -> Result<Self> {
        let (columns, filters) = query_columns(&table, q)?;
        let columns = if q.family.is_none() && q.fields.is_empty() {
            Columns::all()
        } else {
            columns
        };
        Self::with_selection(table, pool, q, (columns, filters))
    }

    fn with_selection(
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
        // Each bucket needs at most offset + limit rows — counted after the
        // timestamp filter, so with a filter the scanners cannot stop early on
        // their own (the merge still reads only a batch ahead per bucket).
        let need = match p.ts_filter {
            Some(_) => None,
            None => q.limit.map(|l| l.saturating_add(q.offset)),
        };
        let filter = p
            .ts_filter
            .clone()
            .map(|(at, enc)| (at, enc, p.start, p.end));
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
            c.request(&pool, filter.clone())?;
            cursors.push(c);
        }
        Ok(QueryRows {
            pool,
            cursors,
            filter,
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

    fn pop_smallest(&mut self) -> Result<Option<ScannedRow>> {
        let mut best: Option<usize> = None;
        for i in 0..self.cursors.len() {
            self.cursors[i].fill(&self.pool, self.filter.clone())?;
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
            c.fill(&self.pool, self.filter.clone())?;
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
    })
}

/// A bucket's partials of one series: by field, then window.
type FieldPartials = BTreeMap<Vec<u8>, BTreeMap<Option<u64>, Partial>>;

/// The partials of the series being read. A bucket's rows come series by
/// series, and a series' rows window by window, so each field keeps its
/// open window apart and touches its map only when the window closes; the
/// fields are found by where the row's previous cell's field was, since
/// rows of a series mostly name the same columns in the same order.
struct SeriesAcc {
    series: Vec<u8>,
    fields: Vec<FieldAcc>,
}

struct FieldAcc {
    qualifier: Vec<u8>,
    open: Option<(Option<u64>, Partial)>,
    closed: BTreeMap<Option<u64>, Partial>,
}

impl FieldAcc {
    fn add(&mut self, w: Option<u64>, ts: u64, v: f64) {
        match &mut self.open {
            Some((open, p)) if *open == w => p.add(ts, v),
            open => {
                if let Some((w, p)) = open.replace((w, Partial::new(ts, v))) {
                    close_window(&mut self.closed, w, p);
                }
            }
        }
    }

    /// The field's qualifier and its partials by window.
    fn finish(mut self) -> (Vec<u8>, BTreeMap<Option<u64>, Partial>) {
        if let Some((w, p)) = self.open.take() {
            close_window(&mut self.closed, w, p);
        }
        (self.qualifier, self.closed)
    }
}

fn close_window(closed: &mut BTreeMap<Option<u64>, Partial>, w: Option<u64>, p: Partial) {
    closed
        .entry(w)
        .and_modify(|known| known.combine(&p))
        .or_insert(p);
}

impl SeriesAcc {
    fn new(series: Vec<u8>) -> Self {
        SeriesAcc {
            series,
            fields: Vec::new(),
        }
    }

    /// Adds a value of `field` at `ts` (window `w`). `hint` is where the
    /// field after the row's previous one is: rows of a series mostly name
    /// the same columns in the same order.
    fn add(&mut self, hint: &mut usize, field: &[u8], w: Option<u64>, ts: u64, v: f64) {
        let at = match self.fields.get(*hint) {
            Some(f) if bytes_equal(&f.qualifier, field) => *hint,
            _ => match self
                .fields
                .iter()
                .position(|f| bytes_equal(&f.qualifier, field))
            {
                Some(at) => at,
                None => {
                    self.fields.push(FieldAcc {
                        qualifier: field.to_vec(),
                        open: None,
                        closed: BTreeMap::new(),
                    });
                    self.fields.len() - 1
                }
            },
        };
        self.fields[at].add(w, ts, v);
        *hint = at + 1;
    }

    /// Adds the series' partials to a bucket's.
    fn finish_into(self, partials: &mut BucketPartials) {
        let fields: FieldPartials = self.fields.into_iter().map(FieldAcc::finish).collect();
        merge_series(partials, self.series, fields);
    }
}

/// Adds a series' partials to a bucket's.
fn merge_series(partials: &mut BucketPartials, series: Vec<u8>, fields: FieldPartials) {
    match partials.entry(series) {
        std::collections::btree_map::Entry::Vacant(v) => {
            v.insert(fields);
        }
        std::collections::btree_map::Entry::Occupied(mut o) => {
            let known = o.get_mut();
            for (field, windows) in fields {
                let known = known.entry(field).or_default();
                for (w, p) in windows {
                    known.entry(w).and_modify(|k| k.combine(&p)).or_insert(p);
                }
            }
        }
    }
}

/// Folds a bucket's cells into partials as the scan resolves them.
struct BucketAgg<'a> {
    /// Where the series identity's parts are in a row key.
    identity: &'a [std::ops::Range<usize>],
    ts_at: usize,
    ts_enc: &'a FieldEncoding,
    /// `[start, end)` in the table's time unit.
    start: u64,
    end: u64,
    window: Option<u64>,
    partials: BucketPartials,
    /// The series of the rows being read: a bucket's rows come series by
    /// series, so its partials are looked up in `partials` only when the
    /// series changes, not per row.
    current: Option<SeriesAcc>,
    /// The time and window of the row being read; `None` when the row is
    /// outside the query's time.
    row: Option<(u64, Option<u64>)>,
    /// Where the row's next field likely is in `current`.
    hint: usize,
    /// A skip scan: the rows read are one series' time window at a time,
    /// and the scan stops where a seek beats reading on.
    skip: Option<SkipScan>,
}

/// Where a bucket's skip scan stands.
#[derive(Default)]
struct SkipScan {
    /// The series (key prefix up to the time field) of the last row read,
    /// once a row was read.
    series: Option<Vec<u8>>,
    /// Whether `current` holds `series`' partials yet.
    series_open: bool,
    /// Where to read on when the scan stopped: the start of `series`' time
    /// window, when rows before it came first; else after `series`.
    seek_to: Option<Vec<u8>>,
    /// A key too short to hold a time field: the skip scan cannot go on.
    broken: bool,
}

impl BucketAgg<'_> {
    fn finish(mut self) -> BucketPartials {
        if let Some(acc) = self.current.take() {
            acc.finish_into(&mut self.partials);
        }
        self.partials
    }
}

impl CellSink for BucketAgg<'_> {
    fn start_row(&mut self, key: &[u8]) -> bool {
        self.row = None;
        self.hint = 0;
        // In a skip scan a series is its key prefix up to the time field
        // (every field before it is identity, the salt one per bucket).
        let mut same_series = None;
        if let Some(skip) = self.skip.as_mut() {
            let Some(prefix) = key.get(..self.ts_at) else {
                skip.broken = true;
                return false;
            };
            if !skip
                .series
                .as_deref()
                .is_some_and(|known| bytes_equal(known, prefix))
            {
                let series = skip.series.get_or_insert_with(Vec::new);
                series.clear();
                series.extend_from_slice(prefix);
                skip.series_open = false;
                let (lo, _) = time_window(prefix, self.ts_enc, self.start, self.end);
                if compare_bytes(key, &lo).is_lt() {
                    skip.seek_to = Some(lo);
                    return false;
                }
            }
            same_series = Some(skip.series_open);
        }
        let Some(ts) = key_ts(key, self.ts_at, self.ts_enc) else {
            return true;
        };
        if ts < self.start || ts >= self.end {
            // A skip scan is at or after the series' window here, so past
            // it: the rest of the series is left by a seek.
            return self.skip.is_none();
        }
        self.row = Some((ts, self.window.map(|w| ts - ts % w)));
        let same_series = same_series.unwrap_or_else(|| {
            self.current.as_ref().is_some_and(|acc| {
                let mut at = 0;
                self.identity.iter().all(|r| {
                    let part = &key[r.clone()];
                    let same = acc
                        .series
                        .get(at..at + part.len())
                        .is_some_and(|known| bytes_equal(known, part));
                    at += part.len();
                    same
                })
            })
        });
        if !same_series {
            if let Some(acc) = self.current.take() {
                acc.finish_into(&mut self.partials);
            }
            let mut series = Vec::new();
            for r in self.identity {
                series.extend_from_slice(&key[r.clone()]);
            }
            self.current = Some(SeriesAcc::new(series));
            if let Some(skip) = self.skip.as_mut() {
                skip.series_open = true;
            }
        }
        true
    }

    fn cell(&mut self, _family: &[u8], qualifier: &[u8], _timestamp: u64, value: &[u8]) {
        let (Some((ts, w)), Some(acc)) = (self.row, self.current.as_mut()) else {
            return;
        };
        if let Some(v) = crate::value::numeric(value) {
            acc.add(&mut self.hint, qualifier, w, ts, v);
        }
    }
}

/// Key of one aggregate: series identity bytes, field, window start.
type AggKey = (Vec<u8>, Vec<u8>, Option<u64>);

/// A bucket's partials by series, then field, then window: nested so a
/// lookup borrows the key bytes instead of allocating them.
type BucketPartials = BTreeMap<Vec<u8>, FieldPartials>;

/// Runs an aggregated query: partials per bucket in parallel, combined.
/// One page of aggregates, in (series, field, window) order.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregatePage {
    pub aggregates: Vec<SeriesAggregate>,
    /// Where the next page starts, when `limit` cut this one short.
    pub continuation: Option<ContinuationToken>,
}

pub fn aggregate(table: Arc<Table>, pool: &QueryPool, q: &Query) -> Result<AggregatePage> {
    let agg = q
        .aggregate
        .clone()
        .ok_or_else(|| Error::InvalidInput("query has no aggregate".into()))?;
    if agg.functions.is_empty() {
        return Err(Error::InvalidInput(
            "aggregate needs at least one function".into(),
        ));
    }
    let window = agg.window(table.desc.key.time_unit)?;
    let schema = table.desc.key.clone();
    let p = plan(&schema, q)?;
    p.record_buckets();
    let (_, ts_at, ts_enc) = ts_offset(&schema)
        .ok_or_else(|| Error::InvalidInput("aggregation needs a timestamp key field".into()))?;
    // Series identity: the bytes of every field that is not time or a
    // uniquifier, in key order.
    let mut identity: Vec<std::ops::Range<usize>> = Vec::new();
    let mut at = schema.prefix_len();
    for f in &schema.fields {
        let w = f.encoding.width();
        if f.encoding.is_identity() {
            // Adjacent parts are one range: one comparison per row.
            match identity.last_mut() {
                Some(last) if last.end == at => last.end = at + w,
                _ => identity.push(at..at + w),
            }
        }
        at += w;
    }
    let identity_len: usize = identity.iter().map(|r| r.len()).sum();
    let after = match &q.continuation {
        Some(t) => Some(
            decode_agg_key(&ContinuationToken::decode(t)?.row, identity_len).ok_or_else(|| {
                Error::InvalidInput(
                    "continuation token is not one of this aggregate query's".into(),
                )
            })?,
        ),
        None => None,
    };
    // Skip scan: when fields sit between the query's series and the
    // timestamp (all hosts of a metric, say), each series is found, its time
    // window read directly, and the scan jumps to the next series — instead
    // of reading every row of the bucket and dropping most of them.
    let skip_scan = p.ts_filter.is_some()
        && schema
            .fields
            .iter()
            .take_while(|f| !f.encoding.is_time())
            .all(|f| f.encoding.is_identity());
    let (columns, filters) = query_columns(&table, q)?;
    let mut waits = Vec::new();
    for &b in &p.buckets {
        let salt = schema.salt_bytes(b);
        let start = [salt.as_slice(), &p.lo].concat();
        let stop = match &p.hi {
            Some(h) => Some([salt.as_slice(), h].concat()),
            None => prefix_successor(&salt),
        };
        let scan = Scan {
            start: Some(start),
            stop,
            columns: columns.clone(),
            ..Scan::new()
        };
        let (tx, rx) = bounded(1);
        let identity = identity.clone();
        let ts_enc = ts_enc.clone();
        let (start, end) = (p.start, p.end);
        let time_range = p.cell_time_range();
        let table = table.clone();
        let columns = columns.clone();
        let filters = filters.clone();
        let job: Job = Box::new(move || {
            let mut agg = BucketAgg {
                identity: &identity,
                ts_at,
                ts_enc: &ts_enc,
                start,
                end,
                window,
                partials: BTreeMap::new(),
                current: None,
                row: None,
                hint: 0,
                skip: None,
            };
            let open = |start: Vec<u8>, stop: Option<Vec<u8>>| {
                TableScanner::new(
                    table.clone(),
                    Scan {
                        start: Some(start),
                        stop,
                        columns: columns.clone(),
                        filters: filters.clone(),
                        time_range,
                        ..Scan::new()
                    },
                )
            };
            let mut read = || -> Result<()> {
                let start = scan.start.clone().unwrap_or_default();
                if !skip_scan {
                    open(start, scan.stop.clone())?.scan_cells(&mut agg)?;
                    return Ok(());
                }
                // Each series' time window is read, and the scan stops at
                // the first row outside it: a new scanner goes on from the
                // window's start when newer rows came first (reversed
                // timestamps), else from the next series.
                agg.skip = Some(SkipScan::default());
                let mut pos = Some(start);
                while let Some(at) = pos.take() {
                    let ran_out = open(at, scan.stop.clone())?.scan_cells(&mut agg)?;
                    let Some(skip) = agg.skip.as_mut() else {
                        break;
                    };
                    if ran_out || skip.broken {
                        break;
                    }
                    pos = match skip.seek_to.take() {
                        Some(lo) => Some(lo),
                        None => skip.series.as_deref().and_then(prefix_successor),
                    }
                    .filter(|n| scan.stop.as_ref().is_none_or(|s| n < s));
                }
                Ok(())
            };
            let outcome = read();
            let partials = agg.finish();
            let flat = outcome.map(|()| {
                let mut flat: BTreeMap<AggKey, Partial> = BTreeMap::new();
                for (series, fields) in partials {
                    for (field, windows) in fields {
                        for (w, p) in windows {
                            flat.insert((series.clone(), field.clone(), w), p);
                        }
                    }
                }
                flat
            });
            let _ = tx.send(flat);
        });
        // One bucket: nothing to run beside it, so no thread hop.
        if p.buckets.len() == 1 {
            job();
        } else {
            pool.run(job)?;
        }
        waits.push(rx);
    }
    let mut all: BTreeMap<AggKey, Partial> = BTreeMap::new();
    for rx in waits {
        for (k, p) in rx.recv().map_err(|_| Error::Closed)?? {
            all.entry(k).and_modify(|x| x.combine(&p)).or_insert(p);
        }
    }
    // Decode series identities back to field values for the answer.
    let names: Vec<&str> = schema
        .fields
        .iter()
        .filter(|f| {
            !matches!(
                f.encoding,
                FieldEncoding::Timestamp
                    | FieldEncoding::ReversedTimestamp
                    | FieldEncoding::Uniquifier { .. }
            )
        })
        .map(|f| f.name.as_str())
        .collect();
    let after = match after {
        Some(k) => std::ops::Bound::Excluded(k),
        None => std::ops::Bound::Unbounded,
    };
    let mut rest = all
        .range((after, std::ops::Bound::Unbounded))
        .skip(q.offset);
    let mut aggregates = Vec::new();
    let mut last = None;
    for ((series, field, window), p) in rest.by_ref().take(q.limit.unwrap_or(usize::MAX)) {
        aggregates.push(SeriesAggregate {
            series: decode_identity(&schema, &names, series),
            field: String::from_utf8_lossy(field).into_owned(),
            window: *window,
            values: agg.functions.iter().map(|f| (*f, p.value(*f))).collect(),
        });
        last = Some((series, field, window));
    }
    let continuation = match (rest.next(), last) {
        (Some(_), Some(last)) => Some(ContinuationToken {
            row: encode_agg_key(last),
            reverse: false,
        }),
        _ => None,
    };
    Ok(AggregatePage {
        aggregates,
        continuation,
    })
}

/// An aggregate's place in the answer's order, as a continuation token
/// carries it: the series identity (fixed width for a table), the field's
/// length (u32 BE) and name, then the window (1 and 8 bytes BE, or 0).
fn encode_agg_key((series, field, window): (&Vec<u8>, &Vec<u8>, &Option<u64>)) -> Vec<u8> {
    let mut out = Vec::with_capacity(series.len() + field.len() + 11);
    out.extend_from_slice(series);
    out.extend_from_slice(&(field.len() as u32).to_be_bytes());
    out.extend_from_slice(field);
    match window {
        Some(w) => {
            out.push(1);
            out.extend_from_slice(&w.to_be_bytes());
        }
        None => out.push(0),
    }
    out
}

fn decode_agg_key(bytes: &[u8], identity_len: usize) -> Option<AggKey> {
    let series = bytes.get(..identity_len)?.to_vec();
    let rest = &bytes[identity_len..];
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let field = rest.get(4..4 + len)?.to_vec();
    let window = match rest.get(4 + len..)? {
        [0] => None,
        [1, w @ ..] => Some(u64::from_be_bytes(w.try_into().ok()?)),
        _ => return None,
    };
    Some((series, field, window))
}

fn decode_identity(schema: &KeySchema, names: &[&str], bytes: &[u8]) -> Vec<(String, FieldValue)> {
    let mut out = Vec::new();
    let mut at = 0;
    for f in &schema.fields {
        if !names.contains(&f.name.as_str()) {
            continue;
        }
        let (w, value) = match &f.encoding {
            FieldEncoding::String { width } => {
                let raw = &bytes[at..at + width];
                let end = raw.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
                (
                    *width,
                    FieldValue::Str(String::from_utf8_lossy(&raw[..end]).into_owned()),
                )
            }
            FieldEncoding::Uint { width } | FieldEncoding::Uniquifier { width } => {
                let mut b = [0u8; 8];
                b[8 - width..].copy_from_slice(&bytes[at..at + width]);
                (*width, FieldValue::Uint(u64::from_be_bytes(b)))
            }
            _ => continue,
        };
        out.push((f.name.clone(), value));
        at += w;
    }
    out
}
