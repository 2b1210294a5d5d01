//! Typed cell values for time-series fields, as Influx line protocol has
//! them. A value cell holds one tag byte and the payload:
//!
//! | tag | type | payload |
//! |---|---|---|
//! | 1 | float | f64, 8 bytes big-endian |
//! | 2 | int | i64, 8 bytes big-endian |
//! | 3 | uint | u64, 8 bytes big-endian |
//! | 4 | bool | 1 byte, 0 or 1 |
//! | 5 | string | UTF-8 bytes |
//!
//! Aggregations read float, int and uint as numbers and skip the others.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    Float(f64),
    Int(i64),
    Uint(u64),
    Bool(bool),
    Str(String),
}

const FLOAT: u8 = 1;
const INT: u8 = 2;
const UINT: u8 = 3;
const BOOL: u8 = 4;
const STR: u8 = 5;

impl Value {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9);
        self.encode_into(&mut out);
        out
    }

    /// Appends the encoded value to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Value::Float(v) => {
                out.push(FLOAT);
                out.extend_from_slice(&v.to_be_bytes());
            }
            Value::Int(v) => {
                out.push(INT);
                out.extend_from_slice(&v.to_be_bytes());
            }
            Value::Uint(v) => {
                out.push(UINT);
                out.extend_from_slice(&v.to_be_bytes());
            }
            Value::Bool(v) => {
                out.push(BOOL);
                out.push(u8::from(*v));
            }
            Value::Str(s) => {
                out.push(STR);
                out.extend_from_slice(s.as_bytes());
            }
        }
    }

    /// `None` for bytes that are not a typed value.
    pub fn decode(bytes: &[u8]) -> Option<Value> {
        let (&tag, rest) = bytes.split_first()?;
        let eight = || rest.try_into().ok().map(|b: [u8; 8]| b);
        Some(match tag {
            FLOAT => Value::Float(f64::from_be_bytes(eight()?)),
            INT => Value::Int(i64::from_be_bytes(eight()?)),
            UINT => Value::Uint(u64::from_be_bytes(eight()?)),
            BOOL if rest.len() == 1 && rest[0] <= 1 => Value::Bool(rest[0] == 1),
            STR => Value::Str(String::from_utf8(rest.to_vec()).ok()?),
            _ => return None,
        })
    }

    /// The value as a number, for aggregation.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(v) => Some(*v),
            Value::Int(v) => Some(*v as f64),
            Value::Uint(v) => Some(*v as f64),
            Value::Bool(_) | Value::Str(_) => None,
        }
    }
}

/// The number in a value cell, without building a [`Value`].
pub fn numeric(bytes: &[u8]) -> Option<f64> {
    let (&tag, rest) = bytes.split_first()?;
    let b: [u8; 8] = rest.try_into().ok()?;
    match tag {
        FLOAT => Some(f64::from_be_bytes(b)),
        INT => Some(i64::from_be_bytes(b) as f64),
        UINT => Some(u64::from_be_bytes(b) as f64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_junk_is_refused() {
        for v in [
            Value::Float(-1.25),
            Value::Int(-7),
            Value::Uint(u64::MAX),
            Value::Bool(true),
            Value::Str("idle".into()),
        ] {
            assert_eq!(Value::decode(&v.encode()), Some(v.clone()));
        }
        assert_eq!(numeric(&Value::Int(-7).encode()), Some(-7.0));
        assert_eq!(numeric(&Value::Str("x".into()).encode()), None);
        assert_eq!(Value::decode(&[9, 1, 2]), None);
        assert_eq!(Value::decode(&[FLOAT, 1, 2]), None);
        assert_eq!(Value::decode(&[]), None);
    }
}
