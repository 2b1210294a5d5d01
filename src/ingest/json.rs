//! JSON points: a body holds one point object or an array of them, each
//! read on its own so one wrong point is refused by its number while the
//! others are written.

use std::borrow::Cow;

use serde::Deserialize;

use super::line_protocol::Point;
use crate::value::Value;

/// The points of a JSON body, not yet read (see [`JsonPoint::read`]).
pub fn points(body: &[u8]) -> Result<Vec<serde_json::Value>, String> {
    let body: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        format!(
            "body is not JSON: {}",
            crate::codec::bounded(&e.to_string(), 240)
        )
    })?;
    match body {
        serde_json::Value::Array(points) => Ok(points),
        point @ serde_json::Value::Object(_) => Ok(vec![point]),
        _ => Err("JSON points are an object or an array of objects".into()),
    }
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
    /// In the write's precision (milliseconds by default); absent means
    /// now.
    #[serde(default)]
    pub ts: Option<i64>,
    pub fields: serde_json::Map<String, serde_json::Value>,
    /// The cells' TTL in milliseconds (capped at the family's).
    #[serde(default)]
    pub ttl_ms: Option<u64>,
}

impl JsonPoint {
    /// Reads one point of a body, or says which field is wrong.
    pub fn read(point: serde_json::Value) -> Result<JsonPoint, String> {
        serde_path_to_error::deserialize(point).map_err(|e| {
            let inner = e.inner().to_string();
            let inner = crate::codec::bounded(&inner, 240);
            match e.path().to_string().as_str() {
                "." => format!("not a point: {inner}"),
                path => format!("field `{path}`: {inner}"),
            }
        })
    }

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
