//! Aggregation pushed into the bucket scans: partials per series, field
//! and window, folded as cells stream by and combined across buckets.

use std::collections::BTreeMap;
use std::sync::Arc;

use crossbeam_channel::bounded;

use super::plan::{key_window, plan, query_columns, ts_offset};
use super::pool::{Job, QueryPool};
use super::{AggregatePage, Partial, Query, SeriesAggregate};
use crate::codec::bytes_equal;
use crate::error::{Error, Result};
use crate::key::{FieldEncoding, FieldValue, KeySchema};
use crate::region::read::{CellSink, ContinuationToken, KeyTimeWindow, Scan};
use crate::table::{Table, TableScanner};

/// A bucket's partials of one series: by field, then window.
pub(super) type FieldPartials = BTreeMap<Vec<u8>, BTreeMap<Option<u64>, Partial>>;

/// The partials of the series being read. A bucket's rows come series by
/// series, and a series' rows window by window, so each field keeps its
/// open window apart and touches its map only when the window closes; the
/// fields are found by where the row's previous cell's field was, since
/// rows of a series mostly name the same columns in the same order.
pub(super) struct SeriesAcc {
    pub(super) series: Vec<u8>,
    pub(super) fields: Vec<FieldAcc>,
}

pub(super) struct FieldAcc {
    pub(super) qualifier: Vec<u8>,
    pub(super) open: Option<(Option<u64>, Partial)>,
    pub(super) closed: BTreeMap<Option<u64>, Partial>,
}

impl FieldAcc {
    pub(super) fn add(&mut self, w: Option<u64>, ts: u64, v: f64) {
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
    pub(super) fn finish(mut self) -> (Vec<u8>, BTreeMap<Option<u64>, Partial>) {
        if let Some((w, p)) = self.open.take() {
            close_window(&mut self.closed, w, p);
        }
        (self.qualifier, self.closed)
    }
}

pub(super) fn close_window(
    closed: &mut BTreeMap<Option<u64>, Partial>,
    w: Option<u64>,
    p: Partial,
) {
    closed
        .entry(w)
        .and_modify(|known| known.combine(&p))
        .or_insert(p);
}

impl SeriesAcc {
    pub(super) fn new(series: Vec<u8>) -> Self {
        SeriesAcc {
            series,
            fields: Vec::new(),
        }
    }

    /// Adds a value of `field` at `ts` (window `w`). `hint` is where the
    /// field after the row's previous one is: rows of a series mostly name
    /// the same columns in the same order.
    pub(super) fn add(&mut self, hint: &mut usize, field: &[u8], w: Option<u64>, ts: u64, v: f64) {
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
    pub(super) fn finish_into(self, partials: &mut BucketPartials) {
        let fields: FieldPartials = self.fields.into_iter().map(FieldAcc::finish).collect();
        merge_series(partials, self.series, fields);
    }
}

/// Adds a series' partials to a bucket's.
pub(super) fn merge_series(partials: &mut BucketPartials, series: Vec<u8>, fields: FieldPartials) {
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
pub(super) struct BucketAgg<'a> {
    /// Where the series identity's parts are in a row key.
    pub(super) identity: &'a [std::ops::Range<usize>],
    /// The query's time on the key's time field (the table's unit).
    pub(super) time: KeyTimeWindow,
    pub(super) window: Option<u64>,
    pub(super) partials: BucketPartials,
    /// The series of the rows being read: a bucket's rows come series by
    /// series, so its partials are looked up in `partials` only when the
    /// series changes, not per row.
    pub(super) current: Option<SeriesAcc>,
    /// The time and window of the row being read; `None` when the row is
    /// outside the query's time.
    pub(super) row: Option<(u64, Option<u64>)>,
    /// Where the row's next field likely is in `current`.
    pub(super) hint: usize,
}

impl BucketAgg<'_> {
    pub(super) fn finish(mut self) -> BucketPartials {
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
        let Some(ts) = self.time.time_of(key).filter(|t| self.time.holds(*t)) else {
            return true;
        };
        // The raw row API writes (and deletes) rows of any key: one too
        // short for the schema's fields is of no series.
        if self.identity.iter().any(|r| r.end > key.len()) {
            return true;
        }
        self.row = Some((ts, self.window.map(|w| ts - ts % w)));
        let same_series = self.current.as_ref().is_some_and(|acc| {
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
pub(super) type AggKey = (Vec<u8>, Vec<u8>, Option<u64>);

/// A bucket's partials by series, then field, then window: nested so a
/// lookup borrows the key bytes instead of allocating them.
pub(super) type BucketPartials = BTreeMap<Vec<u8>, FieldPartials>;

/// Most functions one aggregate computes.
pub const MAX_FUNCTIONS: usize = 64;

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
    // Each function is a value of every aggregate answered: a request of
    // a few bytes a function must not ask for gigabytes.
    if agg.functions.len() > MAX_FUNCTIONS {
        return Err(Error::InvalidInput(format!(
            "aggregate names {} functions; it takes at most {MAX_FUNCTIONS}",
            agg.functions.len()
        )));
    }
    if q.series_limit.is_some() {
        return Err(Error::InvalidInput(
            "series_limit limits raw rows: drop it, or the aggregate".into(),
        ));
    }
    let window = agg.window(table.desc.key.time_unit)?;
    let schema = table.desc.key.clone();
    let p = plan(&schema, q)?;
    p.record_buckets();
    let (_, ts_at, ts_enc) = ts_offset(&schema)
        .ok_or_else(|| Error::InvalidInput("aggregation needs a timestamp key field".into()))?;
    // What an answer is per: the series identity (the bytes of every field
    // that is not time or a uniquifier, in key order), or with `group_by`
    // the bytes of those fields only: a group's series fold into one.
    if let Some(group) = &agg.group_by {
        for name in group {
            if !schema
                .fields
                .iter()
                .any(|f| &f.name == name && f.encoding.is_identity())
            {
                return Err(Error::InvalidInput(format!(
                    "group_by `{name}` is not a series field of the key (one of {})",
                    schema
                        .fields
                        .iter()
                        .filter(|f| f.encoding.is_identity())
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    }
    let grouped = |name: &str| {
        agg.group_by
            .as_ref()
            .is_none_or(|group| group.iter().any(|g| g == name))
    };
    let mut identity: Vec<std::ops::Range<usize>> = Vec::new();
    let mut at = schema.prefix_len();
    for f in &schema.fields {
        let w = f.encoding.width();
        if f.encoding.is_identity() && grouped(&f.name) {
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
    let (columns, filters) = query_columns(&table, q)?;
    let mut waits = Vec::new();
    for range in &p.ranges {
        let (start, stop) = range.salted(&schema.salt_bytes(range.bucket));
        let scan = Scan {
            start: Some(start),
            stop,
            columns: columns.clone(),
            ..Scan::new()
        };
        let (tx, rx) = bounded(1);
        let identity = identity.clone();
        let time = key_window(ts_at, &ts_enc, p.start, p.end);
        let time_range = p.cell_time_range();
        let key_window = p.key_window;
        let table = table.clone();
        let columns = columns.clone();
        let filters = filters.clone();
        let job: Job = Box::new(move || {
            let mut agg = BucketAgg {
                identity: &identity,
                time,
                window,
                partials: BTreeMap::new(),
                current: None,
                row: None,
                hint: 0,
            };
            let open = |start: Vec<u8>, stop: Option<Vec<u8>>| {
                TableScanner::new(
                    table.clone(),
                    Scan {
                        start: Some(start),
                        stop,
                        columns: columns.clone(),
                        filters: filters.clone(),
                        key_window,
                        time_range,
                        ..Scan::new()
                    },
                )
            };
            // With fields between the query's series and the time (all
            // hosts of a metric, say), the scanner seeks to each series'
            // window instead of reading the rows around it.
            let start = scan.start.clone().unwrap_or_default();
            let outcome = open(start, scan.stop.clone())
                .and_then(|mut scanner| scanner.scan_cells(&mut agg))
                .map(|_ran_out| ());
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
        // One range: nothing to run beside it, so no thread hop.
        if p.ranges.len() == 1 {
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
        .filter(|f| f.encoding.is_identity() && grouped(&f.name))
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
        partial: Vec::new(),
    })
}

/// An aggregate's place in the answer's order, as a continuation token
/// carries it: the series identity (fixed width for a table), the field's
/// length (u32 BE) and name, then the window (1 and 8 bytes BE, or 0).
pub(super) fn encode_agg_key(
    (series, field, window): (&Vec<u8>, &Vec<u8>, &Option<u64>),
) -> Vec<u8> {
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

pub(super) fn decode_agg_key(bytes: &[u8], identity_len: usize) -> Option<AggKey> {
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

pub(super) fn decode_identity(
    schema: &KeySchema,
    names: &[&str],
    bytes: &[u8],
) -> Vec<(String, FieldValue)> {
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
