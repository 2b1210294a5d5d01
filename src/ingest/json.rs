//! JSON points: a body holds one point object or an array of them, each
//! read on its own so one wrong point is refused by its number while the
//! others are written.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::line_protocol::Point;
use crate::value::Value;

/// The points of a JSON body, not yet read (see [`JsonPoint::read`]),
/// each refused on its own when it names a key or a tag twice: JSON
/// readers keep either one, and a tag given twice is refused through
/// every door, as InfluxDB's line protocol does. A field given twice is
/// the last one, as in line protocol.
pub fn points(body: &[u8]) -> Result<Vec<Result<serde_json::Value, String>>, String> {
    let parsed: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        format!(
            "body is not JSON: {}",
            crate::codec::bounded(&e.to_string(), 240)
        )
    })?;
    let points = match parsed {
        serde_json::Value::Array(points) => points,
        point @ serde_json::Value::Object(_) => vec![point],
        _ => return Err("JSON points are an object or an array of objects".into()),
    };
    // The same text read again: it parsed once, so it does again.
    let mut twice = serde_json::Deserializer::from_slice(body);
    let duplicates = BodyKeys
        .deserialize(&mut twice)
        .map_err(|e| format!("body is not JSON: {e}"))?;
    Ok(points
        .into_iter()
        .enumerate()
        .map(|(i, point)| match duplicates.get(i) {
            Some(Some(why)) => Err(why.clone()),
            _ => Ok(point),
        })
        .collect())
}

/// Reads a body for the first key given twice in each point (or in its
/// tags), without keeping the body.
struct BodyKeys;

impl<'de> DeserializeSeed<'de> for BodyKeys {
    type Value = Vec<Option<String>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BodyKeys {
    type Value = Vec<Option<String>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a point or an array of points")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(first) = seq.next_element_seed(Keys { of: Of::Point })? {
            out.push(first);
        }
        Ok(out)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Ok(vec![Keys { of: Of::Point }.visit_map(map)?])
    }
}

#[derive(Clone, Copy)]
enum Of {
    Point,
    Tags,
}

/// The first key given twice in a point or its tags, if any.
struct Keys {
    of: Of,
}

impl<'de> DeserializeSeed<'de> for Keys {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Keys {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = std::collections::HashSet::new();
        let mut first = None;
        while let Some(key) = map.next_key::<String>()? {
            let inner = match (self.of, key.as_str()) {
                (Of::Point, "tags") => map.next_value_seed(Keys { of: Of::Tags })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    None
                }
            };
            if first.is_none() {
                first = inner;
            }
            if first.is_none() && !seen.insert(key.clone()) {
                let quoted = crate::codec::quote_prefix(&key);
                first = Some(match self.of {
                    Of::Point => format!("key `{quoted}` is given twice"),
                    Of::Tags => format!("duplicate tags: tag `{quoted}` is given twice"),
                });
            }
        }
        Ok(first)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
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
                        "field `{}` has a value of the wrong type: {}",
                        crate::codec::quote_prefix(k),
                        crate::codec::bounded(&other.to_string(), 64)
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
