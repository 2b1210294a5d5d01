//! Rows and values written as JSON by hand, straight into an answer's
//! buffer: rows are most of every answer, and going through serde costs
//! several times as much per row.

use crate::key::{FieldRef, KeySchema};
use crate::region::read::RowCells;
use crate::value::Value;

/// A row as the API answers it: `{"row": hex, "key": {"bucket", "fields"},
/// "cells": [{"family", "qualifier", "timestamp", "value"}]}`. Values are
/// typed JSON when they are typed values, else `{"hex": …}`. Written by
/// hand straight into the answer's buffer: rows are most of every answer,
/// and going through serde costs several times as much per row.
pub(super) struct RowOut<'a, R: RowCells> {
    pub(super) schema: &'a KeySchema,
    pub(super) row: &'a R,
}

impl<R: RowCells> RowOut<'_, R> {
    pub(super) fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"row\":\"");
        push_hex(out, self.row.key());
        out.extend_from_slice(b"\",\"key\":");
        let key_at = out.len();
        out.extend_from_slice(b"{\"bucket\":");
        match self.schema.salt_bucket(self.row.key()) {
            Some(b) => push_u64(out, u64::from(b)),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"fields\":{");
        let mut first = true;
        let decoded = self.schema.decode_each(self.row.key(), |name, v| {
            if !first {
                out.push(b',');
            }
            first = false;
            push_str(out, name);
            out.push(b':');
            match v {
                FieldRef::Uint(u) => push_u64(out, u),
                FieldRef::Str(s) => push_str(out, s),
            }
        });
        if decoded.is_ok() {
            out.extend_from_slice(b"}}");
        } else {
            out.truncate(key_at);
            out.extend_from_slice(b"null");
        }
        out.extend_from_slice(b",\"cells\":[");
        for (i, c) in self.row.cells().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"family\":");
            push_bytes_as_str(out, c.family);
            out.extend_from_slice(b",\"qualifier\":");
            push_bytes_as_str(out, c.qualifier);
            out.extend_from_slice(b",\"timestamp\":");
            push_u64(out, c.timestamp);
            out.extend_from_slice(b",\"value\":");
            push_value(out, c.value);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
    }
}

/// A cell value as JSON: typed values as themselves, other bytes as
/// `{"hex": "..."}`.
pub(super) fn push_value(out: &mut Vec<u8>, value: &[u8]) {
    match Value::decode(value) {
        // Writing JSON into a Vec cannot fail.
        Some(Value::Float(f)) => {
            let _ = serde_json::to_writer(&mut *out, &f);
        }
        Some(v) => {
            let _ = serde_json::to_writer(&mut *out, &v);
        }
        None => {
            out.extend_from_slice(b"{\"hex\":\"");
            push_hex(out, value);
            out.extend_from_slice(b"\"}");
        }
    }
}

/// Bytes (a family, a qualifier) as a JSON string, invalid UTF-8 replaced.
pub(super) fn push_bytes_as_str(out: &mut Vec<u8>, b: &[u8]) {
    match std::str::from_utf8(b) {
        Ok(s) => push_str(out, s),
        Err(_) => push_str(out, &String::from_utf8_lossy(b)),
    }
}

pub(super) fn push_hex(out: &mut Vec<u8>, b: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(b.len() * 2);
    for x in b {
        out.push(DIGITS[(x >> 4) as usize]);
        out.push(DIGITS[(x & 15) as usize]);
    }
}

pub(super) fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Bytes a JSON string can hold as they are (printable ASCII but `"` and
/// `\`).
static JSON_PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0x20;
    while b < 0x7f {
        t[b] = b != b'"' as usize && b != b'\\' as usize;
        b += 1;
    }
    t
};

/// A JSON string: written as it is when nothing in it needs escaping.
pub(super) fn push_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| JSON_PLAIN[b as usize]) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::{Value as Json_, json};

    use super::*;
    use crate::cell::{Cell, Row};
    use crate::key::FieldValue;

    #[test]
    fn rows_written_by_hand_are_the_json_serde_would_write() {
        let schema: KeySchema = serde_json::from_value(json!({
            "fields": [
                {"name": "host", "type": "string", "width": 8},
                {"name": "ts", "type": "timestamp"}
            ],
            "salt": {"buckets": 4}
        }))
        .expect("schema");
        let key = schema
            .encode_ordered(&[
                FieldValue::Str("a\"b\\é".into()),
                FieldValue::Uint(1_700_000_000_123),
            ])
            .expect("key");
        let cell = |q: &[u8], v: Vec<u8>| Cell {
            family: Bytes::from_static(b"f"),
            qualifier: Bytes::copy_from_slice(q),
            timestamp: 42,
            value: Bytes::from(v),
        };
        let row = Row {
            key: key.clone(),
            cells: vec![
                cell(b"usage", Value::Float(99.5).encode()),
                cell(b"n\n\"q", Value::Int(-3).encode()),
                cell(b"s", Value::Str("x\ty".into()).encode()),
                cell(b"raw", vec![0xff, 0x00]),
            ],
        };
        let mut out = Vec::new();
        RowOut {
            schema: &schema,
            row: &row,
        }
        .write_json(&mut out);
        let got: Json_ = serde_json::from_slice(&out).expect("valid JSON");
        let decoded = schema.decode(&key).expect("decodes");
        let want = json!({
            "row": key.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            "key": {"bucket": decoded.bucket, "fields": {"host": "a\"b\\é", "ts": 1_700_000_000_123u64}},
            "cells": [
                {"family": "f", "qualifier": "usage", "timestamp": 42, "value": 99.5},
                {"family": "f", "qualifier": "n\n\"q", "timestamp": 42, "value": -3},
                {"family": "f", "qualifier": "s", "timestamp": 42, "value": "x\ty"},
                {"family": "f", "qualifier": "raw", "timestamp": 42, "value": {"hex": "ff00"}},
            ]
        });
        assert_eq!(got, want);
    }
}
