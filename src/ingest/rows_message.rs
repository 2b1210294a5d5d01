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

use crate::cell::{Entry, EntryBatch};
use crate::region::wal::record::{decode_edits, encode_edits};

pub const ROWS_MAGIC: &[u8; 8] = b"\0HALROWS";

/// The message carrying `rows`.
pub fn encode_rows_message(rows: &EntryBatch) -> Vec<u8> {
    let mut out = ROWS_MAGIC.to_vec();
    out.extend_from_slice(&encode_edits(0, 0, None, rows));
    out
}

/// Whether a message carries encoded rows (not points to decode).
pub fn is_rows_message(payload: &[u8]) -> bool {
    payload.starts_with(ROWS_MAGIC)
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
    }
}
