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

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

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

/// A comparison of a value filter: HBase's CompareOperator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Less,
    LessOrEqual,
    Equal,
    NotEqual,
    GreaterOrEqual,
    Greater,
}

impl CompareOp {
    /// `<`, `<=`, `=` (or `==`), `!=`, `>=`, `>`.
    pub fn parse(s: &str) -> Option<CompareOp> {
        Some(match s {
            "<" => CompareOp::Less,
            "<=" => CompareOp::LessOrEqual,
            "=" | "==" => CompareOp::Equal,
            "!=" => CompareOp::NotEqual,
            ">=" => CompareOp::GreaterOrEqual,
            ">" => CompareOp::Greater,
            _ => return None,
        })
    }

    fn holds(self, o: Ordering) -> bool {
        match self {
            CompareOp::Less => o.is_lt(),
            CompareOp::LessOrEqual => o.is_le(),
            CompareOp::Equal => o.is_eq(),
            CompareOp::NotEqual => o.is_ne(),
            CompareOp::GreaterOrEqual => o.is_ge(),
            CompareOp::Greater => o.is_gt(),
        }
    }
}

/// What a value filter compares cells with. Numbers (float, int, uint)
/// compare by value across the three types, exactly (no rounding through
/// f64); strings by their UTF-8 bytes (code point order); `false < true`.
/// A cell of another kind than the operand (a string against a number, an
/// untyped cell against anything typed) never passes, whatever the
/// operator, `!=` included. NaN is unordered, as in IEEE 754: only `!=`
/// passes. `Bytes` compares a cell's stored bytes, type tag included, as
/// HBase's BinaryComparator does, whatever the cell holds.
#[derive(Debug, Clone)]
pub enum Operand {
    Float(f64),
    Int(i64),
    Uint(u64),
    Bool(bool),
    Str(String),
    Bytes(Vec<u8>),
}

impl PartialEq for Operand {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Operand::Float(a), Operand::Float(b)) => a.to_bits() == b.to_bits(),
            (Operand::Int(a), Operand::Int(b)) => a == b,
            (Operand::Uint(a), Operand::Uint(b)) => a == b,
            (Operand::Bool(a), Operand::Bool(b)) => a == b,
            (Operand::Str(a), Operand::Str(b)) => a == b,
            (Operand::Bytes(a), Operand::Bytes(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Operand {}

/// How a cell compares with an operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Ordered(Ordering),
    /// Same kind, but no order (NaN).
    Unordered,
    /// Different kinds: never passes.
    Mismatch,
}

impl Operand {
    /// Whether the stored value `cell` passes `cell op self`.
    pub fn passes(&self, op: CompareOp, cell: &[u8]) -> bool {
        match self.compare(cell) {
            Comparison::Ordered(o) => op.holds(o),
            Comparison::Unordered => op == CompareOp::NotEqual,
            Comparison::Mismatch => false,
        }
    }

    /// How the stored value `cell` compares with this operand (cell on the
    /// left).
    pub fn compare(&self, cell: &[u8]) -> Comparison {
        if let Operand::Bytes(b) = self {
            return Comparison::Ordered(cell.cmp(b));
        }
        let Some((&tag, rest)) = cell.split_first() else {
            return Comparison::Mismatch;
        };
        let number = || -> Option<Number> {
            let b: [u8; 8] = rest.try_into().ok()?;
            Some(match tag {
                FLOAT => Number::Float(f64::from_be_bytes(b)),
                INT => Number::Int(i64::from_be_bytes(b)),
                UINT => Number::Uint(u64::from_be_bytes(b)),
                _ => return None,
            })
        };
        let ordered = |o: Option<Ordering>| o.map_or(Comparison::Unordered, Comparison::Ordered);
        match self {
            Operand::Float(v) => number().map_or(Comparison::Mismatch, |n| {
                ordered(n.compare(Number::Float(*v)))
            }),
            Operand::Int(v) => number().map_or(Comparison::Mismatch, |n| {
                ordered(n.compare(Number::Int(*v)))
            }),
            Operand::Uint(v) => number().map_or(Comparison::Mismatch, |n| {
                ordered(n.compare(Number::Uint(*v)))
            }),
            Operand::Bool(v) => match (tag, rest) {
                (BOOL, [b]) if *b <= 1 => Comparison::Ordered((*b == 1).cmp(v)),
                _ => Comparison::Mismatch,
            },
            // Bytes tagged as a string that are not UTF-8 are no typed
            // value (answers show them as hex): another kind.
            Operand::Str(v) if tag == STR && std::str::from_utf8(rest).is_ok() => {
                Comparison::Ordered(rest.cmp(v.as_bytes()))
            }
            Operand::Str(_) => Comparison::Mismatch,
            Operand::Bytes(_) => unreachable!("compared above"),
        }
    }
}

impl CompareOp {
    pub fn as_str(self) -> &'static str {
        match self {
            CompareOp::Less => "<",
            CompareOp::LessOrEqual => "<=",
            CompareOp::Equal => "=",
            CompareOp::NotEqual => "!=",
            CompareOp::GreaterOrEqual => ">=",
            CompareOp::Greater => ">",
        }
    }
}

impl Serialize for CompareOp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CompareOp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        CompareOp::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown comparison `{}`; use <, <=, =, !=, >=, >",
                crate::codec::quote_prefix(&s)
            ))
        })
    }
}

/// JSON: a number (integers stay integers, `50.0` is a float), a string,
/// `true`/`false`, or `{"hex": "…"}` for raw bytes.
impl Serialize for Operand {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Operand::Float(v) => s.serialize_f64(*v),
            Operand::Int(v) => s.serialize_i64(*v),
            Operand::Uint(v) => s.serialize_u64(*v),
            Operand::Bool(v) => s.serialize_bool(*v),
            Operand::Str(v) => s.serialize_str(v),
            Operand::Bytes(b) => {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("hex", &crate::codec::to_hex(b))?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Operand {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Operand;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number, a string, true/false or {\"hex\": \"…\"}")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Operand, E> {
                Ok(Operand::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Operand, E> {
                Ok(match i64::try_from(v) {
                    Ok(i) => Operand::Int(i),
                    Err(_) => Operand::Uint(v),
                })
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Operand, E> {
                Ok(Operand::Float(v))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Operand, E> {
                Ok(Operand::Bool(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Operand, E> {
                Ok(Operand::Str(v.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Operand, A::Error> {
                let bad = || serde::de::Error::custom("a bytes operand is {\"hex\": \"…\"}");
                let key: std::borrow::Cow<'de, str> = m.next_key()?.ok_or_else(bad)?;
                if key != "hex" {
                    return Err(bad());
                }
                let hex: std::borrow::Cow<'de, str> = m.next_value()?;
                if m.next_key::<std::borrow::Cow<'de, str>>()?.is_some() {
                    return Err(bad());
                }
                crate::codec::from_hex(&hex)
                    .map(Operand::Bytes)
                    .map_err(serde::de::Error::custom)
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A number of one of the three numeric types, compared exactly.
#[derive(Debug, Clone, Copy)]
enum Number {
    Float(f64),
    Int(i64),
    Uint(u64),
}

impl Number {
    /// `None` when either side is NaN.
    fn compare(self, other: Number) -> Option<Ordering> {
        use Number::*;
        match (self, other) {
            (Float(a), Float(b)) => a.partial_cmp(&b),
            (Int(a), Int(b)) => Some(a.cmp(&b)),
            (Uint(a), Uint(b)) => Some(a.cmp(&b)),
            (Int(a), Uint(b)) => Some(if a < 0 {
                Ordering::Less
            } else {
                (a as u64).cmp(&b)
            }),
            (Uint(_), Int(_)) => other.compare(self).map(Ordering::reverse),
            (Float(a), Int(b)) => float_against_int(a, b),
            (Float(a), Uint(b)) => float_against_uint(a, b),
            (Int(_) | Uint(_), Float(_)) => other.compare(self).map(Ordering::reverse),
        }
    }
}

/// 2^63 and 2^64, exactly representable as f64.
const TWO_63: f64 = 9_223_372_036_854_775_808.0;
const TWO_64: f64 = 18_446_744_073_709_551_616.0;

/// `a` against `b` without rounding `b` to f64 (which would make
/// 2^53 + 1 equal to 2^53): the integral part of `a` is compared as an
/// integer, then its fraction breaks a tie.
fn float_against_int(a: f64, b: i64) -> Option<Ordering> {
    if a.is_nan() {
        return None;
    }
    if a < -TWO_63 {
        return Some(Ordering::Less);
    }
    if a >= TWO_63 {
        return Some(Ordering::Greater);
    }
    let whole = a.trunc();
    // In range and integral: the cast is exact.
    Some((whole as i64).cmp(&b).then(a.total_cmp(&whole)))
}

fn float_against_uint(a: f64, b: u64) -> Option<Ordering> {
    if a.is_nan() {
        return None;
    }
    if a < 0.0 {
        return Some(Ordering::Less);
    }
    if a >= TWO_64 {
        return Some(Ordering::Greater);
    }
    let whole = a.trunc();
    Some((whole as u64).cmp(&b).then(a.total_cmp(&whole)))
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

    /// The cell kinds a filter can meet, extremes included.
    fn arb_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let special_floats = prop::sample::select(vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            -5.0,
            50.0,
            9_007_199_254_740_992.0,
            9_223_372_036_854_775_808.0,
            -9_223_372_036_854_775_808.0,
            18_446_744_073_709_551_616.0,
            0.5,
            -0.5,
        ]);
        let special_ints = prop::sample::select(vec![
            i64::MIN,
            i64::MAX,
            -1,
            0,
            5,
            50,
            9_007_199_254_740_993,
        ]);
        prop_oneof![
            special_floats.prop_map(Value::Float),
            (-100.0f64..100.0).prop_map(Value::Float),
            any::<f64>().prop_map(Value::Float),
            special_ints.prop_map(Value::Int),
            (-100i64..100).prop_map(Value::Int),
            any::<u64>().prop_map(Value::Uint),
            (0u64..100).prop_map(Value::Uint),
            Just(Value::Uint(u64::MAX)),
            any::<bool>().prop_map(Value::Bool),
            "[a-c]{0,3}".prop_map(Value::Str),
        ]
    }

    /// A cell: a typed value, or bytes that are not one.
    fn arb_cell() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            8 => arb_value().prop_map(|v| v.encode()),
            1 => proptest::collection::vec(any::<u8>(), 0..4),
        ]
    }

    fn arb_operand() -> impl proptest::strategy::Strategy<Value = Operand> {
        use proptest::prelude::*;
        prop_oneof![
            8 => arb_value().prop_map(|v| match v {
                Value::Float(x) => Operand::Float(x),
                Value::Int(x) => Operand::Int(x),
                Value::Uint(x) => Operand::Uint(x),
                Value::Bool(x) => Operand::Bool(x),
                Value::Str(x) => Operand::Str(x),
            }),
            1 => proptest::collection::vec(any::<u8>(), 0..4).prop_map(Operand::Bytes),
        ]
    }

    /// The model's exact number: a float's floor and whether a fraction is
    /// left, in i128, beside an integer's value (every i64 and u64 fits).
    #[derive(Clone, Copy)]
    enum Exact {
        Int(i128),
        Float(f64),
    }

    fn model_numbers(a: Exact, b: Exact) -> Option<Ordering> {
        // Past 2^100 every integer here is smaller in magnitude.
        let key = |f: f64| -> Option<(i128, bool)> {
            if f.is_nan() {
                return None;
            }
            Some(if f >= 2f64.powi(100) {
                (i128::MAX, false)
            } else if f <= -(2f64.powi(100)) {
                (i128::MIN, false)
            } else {
                (f.floor() as i128, f > f.floor())
            })
        };
        match (a, b) {
            (Exact::Float(x), Exact::Float(y)) => x.partial_cmp(&y),
            (Exact::Int(x), Exact::Int(y)) => Some(x.cmp(&y)),
            (Exact::Float(x), Exact::Int(y)) => key(x).map(|k| k.cmp(&(y, false))),
            (Exact::Int(x), Exact::Float(y)) => key(y).map(|k| (x, false).cmp(&k)),
        }
    }

    /// The plain model of a value filter: which cells `cell op operand` keeps.
    fn model(op: CompareOp, cell: &[u8], operand: &Operand) -> bool {
        let order = |o: Option<Ordering>| match o {
            Some(o) => match op {
                CompareOp::Less => o == Ordering::Less,
                CompareOp::LessOrEqual => o != Ordering::Greater,
                CompareOp::Equal => o == Ordering::Equal,
                CompareOp::NotEqual => o != Ordering::Equal,
                CompareOp::GreaterOrEqual => o != Ordering::Less,
                CompareOp::Greater => o == Ordering::Greater,
            },
            None => op == CompareOp::NotEqual,
        };
        if let Operand::Bytes(b) = operand {
            return order(Some(cell.cmp(b)));
        }
        let exact = |v: &Value| match v {
            Value::Float(x) => Some(Exact::Float(*x)),
            Value::Int(x) => Some(Exact::Int(i128::from(*x))),
            Value::Uint(x) => Some(Exact::Int(i128::from(*x))),
            _ => None,
        };
        let Some(value) = Value::decode(cell) else {
            return false;
        };
        match (operand, &value) {
            (Operand::Float(x), v) => {
                exact(v).is_some_and(|v| order(model_numbers(v, Exact::Float(*x))))
            }
            (Operand::Int(x), v) => {
                exact(v).is_some_and(|v| order(model_numbers(v, Exact::Int(i128::from(*x)))))
            }
            (Operand::Uint(x), v) => {
                exact(v).is_some_and(|v| order(model_numbers(v, Exact::Int(i128::from(*x)))))
            }
            (Operand::Bool(x), Value::Bool(v)) => order(Some(v.cmp(x))),
            (Operand::Str(x), Value::Str(v)) => order(Some(v.as_str().cmp(x.as_str()))),
            _ => false,
        }
    }

    const OPS: [CompareOp; 6] = [
        CompareOp::Less,
        CompareOp::LessOrEqual,
        CompareOp::Equal,
        CompareOp::NotEqual,
        CompareOp::GreaterOrEqual,
        CompareOp::Greater,
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
        #[test]
        fn value_filters_compare_as_the_model_says(cell in arb_cell(), operand in arb_operand()) {
            for op in OPS {
                proptest::prop_assert_eq!(
                    operand.passes(op, &cell),
                    model(op, &cell, &operand),
                    "{:?} {} {:?}", Value::decode(&cell), op.as_str(), operand
                );
            }
        }
    }

    #[test]
    fn value_filters_compare_values_not_bytes() {
        let f = |v: f64| Value::Float(v).encode();
        let i = |v: i64| Value::Int(v).encode();
        // The cases the byte comparison got wrong.
        assert!(!Operand::Float(50.0).passes(CompareOp::GreaterOrEqual, &f(-5.0)));
        assert!(Operand::Int(0).passes(CompareOp::Less, &f(-5.0)));
        assert!(!Operand::Int(50).passes(CompareOp::GreaterOrEqual, &i(5)));
        assert!(
            Operand::Str("idle".into())
                .passes(CompareOp::Equal, &Value::Str("idle".into()).encode())
        );
        // Exact across types: 2^53 is less than 2^53 + 1, which rounds
        // to 2^53 as f64.
        assert!(
            Operand::Int(9_007_199_254_740_993)
                .passes(CompareOp::Less, &f(9_007_199_254_740_992.0))
        );
        // NaN is unordered; another type never passes, `!=` included.
        assert!(Operand::Float(1.0).passes(CompareOp::NotEqual, &f(f64::NAN)));
        assert!(!Operand::Float(1.0).passes(CompareOp::Less, &f(f64::NAN)));
        assert!(!Operand::Str("1".into()).passes(CompareOp::NotEqual, &f(1.0)));
        assert!(!Operand::Float(1e308).passes(CompareOp::Less, &f(f64::INFINITY)));
    }

    #[test]
    fn operands_read_from_json_keep_their_type() {
        let op = |j: &str| serde_json::from_str::<Operand>(j).expect(j);
        assert_eq!(op("50"), Operand::Int(50));
        assert_eq!(op("50.0"), Operand::Float(50.0));
        assert_eq!(op("-5"), Operand::Int(-5));
        assert_eq!(op("18446744073709551615"), Operand::Uint(u64::MAX));
        assert_eq!(op("\"idle\""), Operand::Str("idle".into()));
        assert_eq!(op("true"), Operand::Bool(true));
        assert_eq!(op(r#"{"hex": "00ff"}"#), Operand::Bytes(vec![0, 0xff]));
        assert!(serde_json::from_str::<Operand>(r#"{"hex": "0"}"#).is_err());
        assert!(serde_json::from_str::<Operand>("null").is_err());
        assert!(serde_json::from_str::<CompareOp>("\"~\"").is_err());
    }
}
