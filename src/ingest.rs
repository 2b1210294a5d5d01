//! Turning points into rows: decoders (Influx line protocol, JSON) and the
//! mapping of a point onto a table's key schema.
//!
//! A point maps to one row per series and timestamp, one cell per field
//! (tall layout). Key fields take their values by name: `metric` (or
//! `measurement`) from the measurement, timestamp fields from the point's
//! time, every other field from the tag of that name. A tag that is not a key
//! field is an error: silently dropping it would merge distinct series.

pub mod line_protocol;

use std::borrow::Cow;

use serde::Deserialize;

use crate::catalog::TableDescriptor;
use crate::cell::RowMutation;
use crate::key::{FieldEncoding, FieldValue};
use crate::value::Value;
use line_protocol::{Point, Precision};

/// Maps a point onto a row of `table`; `now_ms` stands in for a missing
/// timestamp. Errors say which key field or value is wrong.
pub fn point_to_row(
    table: &TableDescriptor,
    point: &Point<'_>,
    precision: Precision,
    now_ms: u64,
) -> Result<RowMutation, String> {
    let ts = match point.timestamp {
        Some(t) => precision
            .to_ms(t)
            .ok_or_else(|| format!("timestamp {t} is before 1970 or out of range"))?,
        None => now_ms,
    };
    for (k, _) in &point.tags {
        if !table.key.fields.iter().any(|f| f.name == *k) {
            return Err(format!(
                "tag `{k}` is not a key field of table `{}` (key fields: {})",
                table.name,
                table
                    .key
                    .fields
                    .iter()
                    .map(|f| f.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    let mut values = Vec::with_capacity(table.key.fields.len());
    for f in &table.key.fields {
        let tag = point
            .tags
            .iter()
            .find(|(k, _)| *k == f.name)
            .map(|(_, v)| v);
        let v = match (&f.encoding, tag) {
            (FieldEncoding::Timestamp | FieldEncoding::ReversedTimestamp, _) => {
                FieldValue::Uint(ts)
            }
            (FieldEncoding::String { .. }, Some(v)) => FieldValue::Str(v.to_string()),
            (FieldEncoding::String { .. }, None)
                if f.name == "metric" || f.name == "measurement" =>
            {
                FieldValue::Str(point.measurement.to_string())
            }
            (FieldEncoding::Uint { .. } | FieldEncoding::Uniquifier { .. }, Some(v)) => {
                FieldValue::Uint(v.parse().map_err(|_| {
                    format!("tag `{}` must be an unsigned integer, got `{v}`", f.name)
                })?)
            }
            (FieldEncoding::Uniquifier { .. }, None) => FieldValue::Uint(0),
            (_, None) => {
                return Err(format!(
                    "point has no tag `{}`, a key field of table `{}`",
                    f.name, table.name
                ));
            }
        };
        values.push(v);
    }
    let key = table
        .key
        .encode_ordered(&values)
        .map_err(|e| e.to_string())?;
    let family = table
        .families
        .first()
        .map(|f| f.name.as_str())
        .ok_or_else(|| "table has no column family".to_string())?;
    if point.fields.is_empty() {
        return Err("point has no fields".into());
    }
    let mut row = RowMutation::new(key);
    row.mutations.reserve(point.fields.len());
    for (name, value) in &point.fields {
        if let Value::Float(v) = value
            && !v.is_finite()
        {
            return Err(format!("field `{name}` is not a finite number"));
        }
        row = row.put(family, name.as_bytes(), ts, value.encode());
    }
    Ok(row)
}

/// A JSON point: `{"metric": "cpu", "tags": {"host": "h1"}, "ts": <ms>,
/// "fields": {"usage": 1.5, "state": "idle", "up": true}}`. Numbers with a
/// fraction or exponent are floats, others integers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonPoint {
    pub metric: String,
    #[serde(default)]
    pub tags: std::collections::BTreeMap<String, String>,
    /// Epoch milliseconds; absent means now.
    #[serde(default)]
    pub ts: Option<i64>,
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl JsonPoint {
    pub fn to_point(&self) -> Result<Point<'_>, String> {
        let mut fields = Vec::with_capacity(self.fields.len());
        for (k, v) in &self.fields {
            let value = match v {
                serde_json::Value::Bool(b) => Value::Bool(*b),
                serde_json::Value::String(s) => Value::Str(s.clone()),
                serde_json::Value::Number(n) if n.is_i64() => {
                    Value::Int(n.as_i64().unwrap_or_default())
                }
                serde_json::Value::Number(n) if n.is_u64() => {
                    Value::Uint(n.as_u64().unwrap_or_default())
                }
                serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
                other => {
                    return Err(format!(
                        "field `{k}` has a value of the wrong type: {other}"
                    ));
                }
            };
            fields.push((Cow::Borrowed(k.as_str()), value));
        }
        Ok(Point {
            measurement: Cow::Borrowed(&self.metric),
            tags: self
                .tags
                .iter()
                .map(|(k, v)| (Cow::Borrowed(k.as_str()), Cow::Borrowed(v.as_str())))
                .collect(),
            fields,
            timestamp: self.ts,
        })
    }
}

/// One JSON point or an array of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum JsonPoints {
    One(JsonPoint),
    Many(Vec<JsonPoint>),
}

impl JsonPoints {
    pub fn into_vec(self) -> Vec<JsonPoint> {
        match self {
            JsonPoints::One(p) => vec![p],
            JsonPoints::Many(v) => v,
        }
    }
}
