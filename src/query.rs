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
//!
//! This file holds the vocabulary (a query, its aggregates, its pages);
//! `plan.rs` turns a query into key ranges per bucket, `rows.rs` merges
//! the buckets' raw rows, `aggregate.rs` folds aggregates in the bucket
//! scans, `pool.rs` runs them, and `engine.rs` ties them to the store.

pub mod aggregate;
pub mod engine;
pub mod influx_delete;
mod influx_expr;
mod influx_reduce;
mod influx_rows;
pub mod influx_select;
mod influx_subquery;
pub mod influxql;
pub mod measurements;
pub mod plan;
pub mod pool;
pub mod prom_read;
pub mod rows;
pub mod series_list;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::key::{FieldValue, TimeUnit};
use crate::region::read::{CompareOp, ContinuationToken, Operand, ScannedRow};

/// The memory one request's compiled regular expressions may take in
/// all. regex-lite bounds each at 10 MiB, but not how many a request
/// brings: a query of thousands of large distinct patterns would hold
/// gigabytes.
pub const REGEX_MEMORY: usize = 64 << 20;

/// Compiles `pattern`, one of `count` a request compiles, within its share
/// of [`REGEX_MEMORY`]. Too large a pattern is an error naming the limit.
pub fn compile_regex(pattern: &str, count: usize) -> Result<regex_lite::Regex, String> {
    let share = (REGEX_MEMORY / count.max(1)).min(10 << 20);
    regex_lite::RegexBuilder::new(pattern)
        .size_limit(share)
        .build()
        .map_err(|e| {
            format!(
                "{e} (one of {count} regular expressions in the request, each within {share} \
                 bytes compiled)"
            )
        })
}

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
    /// Aggregate across series: one answer per field, window and value of
    /// these key fields (`[]`: all series together). Absent: per series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<Vec<String>>,
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
    /// Further leading key fields after `series`, each one of a set of
    /// values (`[["host", ["h1", "h2"]]]`): the rows of every combination.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series_in: Vec<(String, Vec<FieldValue>)>,
    /// At most this many rows of each series (the key before its time
    /// field), its first in the answer's order: 1 on newest-first keys is
    /// every series' last point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series_limit: Option<usize>,
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
    /// Cluster mode: regions read without their owner's MemStore edits
    /// (it did not answer): the page may miss their newest points.
    pub partial: Vec<u64>,
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

/// Runs an aggregated query: partials per bucket in parallel, combined.
/// One page of aggregates, in (series, field, window) order.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregatePage {
    pub aggregates: Vec<SeriesAggregate>,
    /// Where the next page starts, when `limit` cut this one short.
    pub continuation: Option<ContinuationToken>,
    /// As [`QueryPage::partial`].
    pub partial: Vec<u64>,
}

/// The scan of one series of a table of open tag sets (`series` as
/// `KeySchema::tag_series` gives it) over times `[lo, hi]` in the key's
/// unit: its keys run newest first, so the scan starts at `hi` and stops
/// below `lo` (a negative bound counts as 0).
///
/// A point's cells carry its time floored to milliseconds as their
/// version (as every write of an open-tag table makes them), so a store
/// file whose newest version is older than `lo` holds none of the
/// series' points in range, nor does one whose oldest version is newer
/// than `hi`: the scan's time range says so, and the region passes such
/// files by without a seek into each (at 3 days of data, a range read a
/// block of every day's file per series).
pub fn series_time_scan(
    schema: &crate::key::KeySchema,
    series: &[u8],
    lo: i64,
    hi: i64,
) -> crate::region::read::Scan {
    let version_of = |t: i64| {
        u64::try_from(t)
            .ok()
            .and_then(|t| schema.time_unit.to_ms_floor(t))
    };
    let oldest_version = version_of(lo).unwrap_or(0);
    let past_newest = version_of(hi).map_or(u64::MAX, |v| v.saturating_add(1));
    crate::region::read::Scan {
        time_range: crate::region::read::TimeRange {
            min: oldest_version,
            max: past_newest.max(oldest_version),
        },
        versions_are_key_times: true,
        ..newest_first_scan(schema.tag_series_prefix(series), lo, hi)
    }
}

/// A scan of the rows starting with `prefix` and ending in a reversed
/// time in `[lo, hi]` (the key's unit), newest first: their key range
/// alone, the cell versions not bounding it.
pub fn newest_first_scan(prefix: Vec<u8>, lo: i64, hi: i64) -> crate::region::read::Scan {
    let at = |t: i64| -> Vec<u8> {
        let mut k = prefix.clone();
        k.extend_from_slice(&(u64::MAX - t.max(0) as u64).to_be_bytes());
        k
    };
    crate::region::read::Scan {
        start: Some(at(hi)),
        stop: (lo > 0).then(|| at(lo - 1)),
        prefix: Some(prefix.clone()),
        ..crate::region::read::Scan::default()
    }
}
