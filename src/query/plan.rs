//! A query planned: the key range per salt bucket, the time window, the
//! columns and filters the bucket scans apply.

use super::{Query, ValueFilter};
use crate::codec::prefix_successor;
use crate::error::{Error, Result};
use crate::key::{FieldEncoding, FieldValue, KeySchema, TimeUnit};
use crate::region::read::{Columns, Filter, KeyTimeWindow, TimeRange};
use crate::table::Table;

/// Most series prefixes `series_in` may name (the product of its sets).
const MAX_SERIES_PREFIXES: usize = 10_000;

/// Where a query's rows are in one table.
pub(super) struct Plan {
    /// The salt buckets read, ascending.
    pub(super) buckets: Vec<u32>,
    /// The key ranges read, by bucket then start: one per series prefix
    /// named (one without `series_in`) in each of its buckets.
    pub(super) ranges: Vec<BucketRange>,
    /// The time range on the key's timestamp field, when the range cannot
    /// narrow the scan (other fields stand between the series named and the
    /// time): the bucket scanners seek to each series' window.
    pub(super) key_window: Option<KeyTimeWindow>,
    /// `[start, end)` in `unit`, the table's.
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) unit: TimeUnit,
}

/// A key range in one bucket: `[lo, hi)` after the salt (`hi` `None`: to
/// the end of the bucket).
pub(super) struct BucketRange {
    pub(super) bucket: u32,
    pub(super) lo: Vec<u8>,
    pub(super) hi: Option<Vec<u8>>,
}

impl BucketRange {
    /// The range with `salt` in front: `[start, stop)` of a scan.
    pub(super) fn salted(&self, salt: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
        let with_salt = |k: &[u8]| [salt, k].concat();
        (
            with_salt(&self.lo),
            match &self.hi {
                Some(h) => Some(with_salt(h)),
                None => prefix_successor(salt),
            },
        )
    }
}

impl Plan {
    /// Counts the plan's buckets in `halite_query_buckets`, once per query
    /// run (not per plan: the API also plans to decide where to run one).
    pub(super) fn record_buckets(&self) {
        metrics::histogram!("halite_query_buckets").record(self.buckets.len() as f64);
    }

    /// The query's time range as a range of cell versions. The write API
    /// gives every cell its point's timestamp, so this selects the same
    /// rows as the key's timestamp field — and lets scans leave out store
    /// files entirely older than the range without opening them.
    pub(super) fn cell_time_range(&self) -> TimeRange {
        // Cell versions are the key's time in whole milliseconds.
        TimeRange {
            min: self.unit.to_ms_floor(self.start).unwrap_or(u64::MAX),
            max: self.unit.to_ms_ceil(self.end),
        }
    }
}

/// The first timestamp field: its index, byte offset in the key, encoding.
pub(super) fn ts_offset(schema: &KeySchema) -> Option<(usize, usize, FieldEncoding)> {
    let mut at = schema.prefix_len();
    for (i, f) in schema.fields.iter().enumerate() {
        if f.encoding.is_time() {
            return Some((i, at, f.encoding.clone()));
        }
        at += f.encoding.width();
    }
    None
}

/// `[start, end)` on the timestamp at byte `at` of a key in `enc`.
pub(super) fn key_window(at: usize, enc: &FieldEncoding, start: u64, end: u64) -> KeyTimeWindow {
    KeyTimeWindow {
        at,
        reversed: *enc == FieldEncoding::ReversedTimestamp,
        start,
        end,
    }
}

/// The query's family (the table's first by default), column selection
/// and value filter.
pub(super) fn query_columns(table: &Table, q: &Query) -> Result<(Columns, Vec<Filter>)> {
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

/// Whether `q` is a raw read of at most `max_rows` rows of one series (one
/// bucket, the scan bounded by the series and its time window, no row read
/// only to be dropped for its time): from a few hundred microseconds to a
/// few milliseconds of work, cheaper to run where the request arrived than
/// to hand to another thread and back.
pub fn reads_one_series_page(schema: &KeySchema, q: &Query, max_rows: usize) -> bool {
    q.aggregate.is_none()
        && q.limit
            .is_some_and(|l| l.saturating_add(q.offset) <= max_rows)
        && plan(schema, q).is_ok_and(|p| p.ranges.len() == 1 && p.key_window.is_none())
}

pub(super) fn plan(schema: &KeySchema, q: &Query) -> Result<Plan> {
    if schema.md5_prefix > 0 {
        return Err(Error::InvalidInput(
            "this table has hashed keys (md5_prefix): it serves gets and raw scans, not series queries".into(),
        ));
    }
    if schema.is_open_tags() {
        return Err(Error::InvalidInput(
            "this table has open tag sets: browse it with InfluxQL through /query (SHOW …); \
             its series queries are not answered yet"
                .into(),
        ));
    }
    let named = |i: usize, name: &str| match schema.fields.get(i) {
        Some(f) if f.name == name => Ok(()),
        _ => Err(Error::InvalidInput(format!(
            "series fields must be leading key fields in key order; `{name}` is not field {} ({})",
            i + 1,
            schema
                .fields
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    };
    let mut values = Vec::with_capacity(q.series.len());
    for (i, (name, v)) in q.series.iter().enumerate() {
        named(i, name)?;
        values.push(v.clone());
    }
    // `series_in`: further fields, each one of a set of values; every
    // combination is a series prefix of its own.
    let mut value_sets: Vec<Vec<FieldValue>> = vec![values];
    for (j, (name, set)) in q.series_in.iter().enumerate() {
        named(q.series.len() + j, name)?;
        if set.is_empty() {
            return Err(Error::InvalidInput(format!(
                "series_in `{name}` has no values: give at least one"
            )));
        }
        if value_sets.len().saturating_mul(set.len()) > MAX_SERIES_PREFIXES {
            return Err(Error::InvalidInput(format!(
                "series_in names more than {MAX_SERIES_PREFIXES} combinations of values: \
                 name fewer, or leave the field out and filter the answer"
            )));
        }
        value_sets = value_sets
            .into_iter()
            .flat_map(|known| {
                set.iter().map(move |v| {
                    let mut next = known.clone();
                    next.push(v.clone());
                    next
                })
            })
            .collect();
    }
    let mut leads = value_sets
        .iter()
        .map(|v| Ok((schema.encode_leading(v)?, v)))
        .collect::<Result<Vec<_>>>()?;
    // A value named twice is one series prefix, read once.
    leads.sort_by(|a, b| a.0.cmp(&b.0));
    leads.dedup_by(|a, b| a.0 == b.0);
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
    let ts = ts_offset(schema);
    if ts.is_none() && (q_start.is_some() || q_end.is_some()) {
        return Err(Error::InvalidInput(
            "the table's key has no timestamp field: drop the time range".into(),
        ));
    }
    // The time narrows each series' key range when it follows the fields
    // named; otherwise the bucket scanners seek to each series' window.
    let narrows = ts
        .as_ref()
        .is_some_and(|(i, _, _)| *i == q.series.len() + q.series_in.len());
    let window = match &ts {
        Some((_, at, enc)) if !narrows && (q_start.is_some() || q_end.is_some()) => {
            Some(key_window(*at, enc, start, end))
        }
        _ => None,
    };
    let mut ranges = Vec::new();
    for (lead, values) in &leads {
        let buckets: Vec<u32> = match schema.buckets_for_leading(values, start, end)? {
            _ if start == end => Vec::new(), // an empty range matches nothing
            Some(b) => b,
            None => (0..schema.buckets()).collect(),
        };
        let (mut lo, mut hi) = (lead.clone(), prefix_successor(lead));
        if let Some((_, _, enc)) = &ts
            && narrows
            && start < end
        {
            (lo, hi) = key_window(lead.len(), enc, start, end).rows_of(lead);
        }
        if lead.is_empty() && hi.as_ref().is_some_and(|h| h.is_empty()) {
            hi = None;
        }
        for bucket in buckets {
            ranges.push(BucketRange {
                bucket,
                lo: lo.clone(),
                hi: hi.clone(),
            });
        }
    }
    ranges.sort_by(|a, b| (a.bucket, &a.lo).cmp(&(b.bucket, &b.lo)));
    let mut buckets: Vec<u32> = ranges.iter().map(|r| r.bucket).collect();
    buckets.dedup();
    Ok(Plan {
        buckets,
        ranges,
        key_window: window,
        start,
        end,
        unit,
    })
}
