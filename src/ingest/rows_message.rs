//! Rows already encoded, as one Kafka message: how a write that arrives
//! over HTTP reaches its table's topic in cluster mode (docs/cluster.md),
//! so the topic stays the one log every point goes through.
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `\0HALROWS` (line protocol and JSON never start with NUL) |
//! | rest | a WAL edits record (`region/wal/record.rs`, region 0, sequence 0, no origin) holding the rows |
//!
//! The keys were made once, by the node that took the write (uniquifiers
//! included), so replaying the message writes the same cells again.
//!
//! A topic mapped to a database carries the rows of many tables: there a
//! rows message names its table.
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `\0HALROWT` |
//! | 1 | n, the table's name's length |
//! | n | the table's name within the database (`cpu`, `samples`) |
//! | rest | a WAL edits record, as above |

use crate::cell::{Entry, EntryBatch};
use crate::region::wal::record::{decode_edits, encode_edits};

pub const ROWS_MAGIC: &[u8; 8] = b"\0HALROWS";

/// The message carrying `rows`.
pub fn encode_rows_message(rows: &EntryBatch) -> Vec<u8> {
    let mut out = ROWS_MAGIC.to_vec();
    out.extend_from_slice(&encode_edits(0, 0, None, rows));
    out
}

pub const TABLE_ROWS_MAGIC: &[u8; 8] = b"\0HALROWT";

/// Whether a message carries encoded rows (not points to decode).
pub fn is_rows_message(payload: &[u8]) -> bool {
    payload.starts_with(ROWS_MAGIC)
}

/// The message carrying `rows` of table `table` of a database (a name
/// of at most 255 bytes, as every table's is).
pub fn encode_table_rows_message(table: &str, rows: &EntryBatch) -> Vec<u8> {
    let mut out = TABLE_ROWS_MAGIC.to_vec();
    out.push(table.len() as u8);
    out.extend_from_slice(table.as_bytes());
    out.extend_from_slice(&encode_edits(0, 0, None, rows));
    out
}

/// Whether a message carries encoded rows of a named table.
pub fn is_table_rows_message(payload: &[u8]) -> bool {
    payload.starts_with(TABLE_ROWS_MAGIC)
}

/// The table and rows of a named rows message.
pub fn decode_table_rows_message(payload: &[u8]) -> Result<(&str, Vec<Vec<Entry>>), String> {
    let body = payload
        .strip_prefix(TABLE_ROWS_MAGIC.as_slice())
        .ok_or("not a rows message")?;
    let n = *body.first().ok_or("rows message cut before its table")? as usize;
    let table = body
        .get(1..1 + n)
        .and_then(|b| std::str::from_utf8(b).ok())
        .ok_or("rows message cut in its table, or the table is not UTF-8")?;
    let at = 8 + 1 + n;
    decode_edits(&body[1 + n..])
        .map(|e| (table, e.rows))
        .map_err(|e| {
            format!(
                "rows message unreadable at byte {}: {}",
                e.offset + at,
                e.what
            )
        })
}

/// The rows of a rows message, each a list of entries of one row.
pub fn decode_rows_message(payload: &[u8]) -> Result<Vec<Vec<Entry>>, String> {
    let body = payload
        .strip_prefix(ROWS_MAGIC.as_slice())
        .ok_or("not a rows message")?;
    decode_edits(body).map(|e| e.rows).map_err(|e| {
        format!(
            "rows message unreadable at byte {}: {}",
            e.offset + 8,
            e.what
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::CellKind;

    #[test]
    fn rows_round_trip_and_damage_is_an_error() {
        let mut b = EntryBatch::new();
        b.push(b"row-1", b"f", b"a", 10, CellKind::Put, None, b"1.5");
        b.push(b"row-1", b"f", b"b", 10, CellKind::Put, Some(60_000), b"2");
        b.end_row();
        b.push(b"row-2", b"f", b"a", 11, CellKind::Put, None, b"3");
        b.end_row();
        let msg = encode_rows_message(&b);
        assert!(is_rows_message(&msg));
        assert!(!is_rows_message(b"cpu,host=a v=1 1"));
        let rows = decode_rows_message(&msg).expect("decode");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].len(), 2);
        assert_eq!(rows[0][1].ttl_ms, Some(60_000));
        assert_eq!(rows[1][0].value, b"3");
        for cut in 8..msg.len() {
            assert!(decode_rows_message(&msg[..cut]).is_err(), "cut at {cut}");
        }
        let named = encode_table_rows_message("cpu", &b);
        assert!(is_table_rows_message(&named) && !is_rows_message(&named));
        let (table, rows) = decode_table_rows_message(&named).expect("decode");
        assert_eq!((table, rows.len()), ("cpu", 2));
        for cut in 8..named.len() {
            assert!(
                decode_table_rows_message(&named[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }
}
