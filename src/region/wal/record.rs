//! WAL segment and record layout.
//!
//! # Segment
//!
//! A segment file `<id:020>.log` starts with a 16-byte header and holds
//! framed records after it; the rest of the file is preallocated (zeros, or
//! stale records of a recycled segment, which fail their checksum because the
//! segment id is part of it).
//!
//! | bytes | header field                 |
//! |-------|------------------------------|
//! | 8     | magic `HALWAL\0\x01`         |
//! | 8     | segment id, u64 LE           |
//!
//! # Record frame
//!
//! | bytes | field                                                          |
//! |-------|----------------------------------------------------------------|
//! | 4     | payload length n, u32 LE (0 with a 0 checksum: end of data)    |
//! | 4     | CRC32C over segment id (u64 LE) ‖ type ‖ payload, u32 LE       |
//! | 1     | type: 1 = edits, 2 = segment end, 3 = sync point               |
//! | n     | payload                                                        |
//!
//! A sync point's payload is 8 bytes, u64 LE: the offset in this segment
//! up to which everything was synced (fdatasync completed) before the
//! record was written. Recovery uses the claims to tell damage in data
//! that was durable (corruption) from a torn tail (a crash or power loss
//! cutting writes that were never acknowledged).
//!
//! # Edits payload
//!
//! ```text
//! varint region_id · varint first_seq · varint flags
//! [flags & 1: source position = varint stream_len, stream, varint shard, varint durable_below]
//! varint row_count
//!   per row (sequence id = first_seq + index):
//!   varint entry_count
//!     per entry: varint key_len, key, [varint ttl_ms if key has the TTL flag],
//!                varint value_len, value
//! ```

use crate::cell::{Entry, EntryBatch, KeyRef, TTL_FLAG, row_of};
use crate::codec::{DecodeError, Reader, put_len_prefixed, put_varint};

pub const SEGMENT_MAGIC: &[u8; 8] = b"HALWAL\0\x01";
pub const SEGMENT_HEADER_LEN: u64 = 16;
pub const FRAME_HEADER_LEN: usize = 9;
pub const TYPE_EDITS: u8 = 1;
pub const TYPE_SEGMENT_END: u8 = 2;
pub const TYPE_SYNC_POINT: u8 = 3;
/// A sync point frame: header and its 8-byte payload.
pub const SYNC_POINT_LEN: usize = FRAME_HEADER_LEN + 8;
/// No single record may exceed this; bigger batches are split by callers.
pub const MAX_RECORD_LEN: usize = 256 * 1024 * 1024;

const FLAG_ORIGIN: u64 = 1;
/// Entry keys are prefix-compressed against the entry before in their row
/// (every record this version writes; records without it hold whole keys).
const FLAG_PREFIX_KEYS: u64 = 2;

pub fn segment_header(segment_id: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    h[..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..].copy_from_slice(&segment_id.to_le_bytes());
    h
}

pub fn record_crc(segment_id: u64, kind: u8, payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&segment_id.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &[kind]);
    crc32c::crc32c_append(crc, payload)
}

/// Appends one framed record to `out`.
pub fn frame_into(out: &mut Vec<u8>, segment_id: u64, kind: u8, payload: &[u8]) {
    frame_parts_into(out, segment_id, kind, &[], payload);
}

/// Appends one framed record whose payload is `head ‖ body` to `out`,
/// without joining the two first.
pub fn frame_parts_into(out: &mut Vec<u8>, segment_id: u64, kind: u8, head: &[u8], body: &[u8]) {
    let crc = crc32c::crc32c_append(record_crc(segment_id, kind, head), body);
    out.extend_from_slice(&((head.len() + body.len()) as u32).to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(head);
    out.extend_from_slice(body);
}

/// A source's stream and shard: for Kafka, a topic and a partition.
pub type SourceShard = (String, u32);

/// Where a batch of edits came from in the source that fed it (a stream,
/// one of its shards, a position in the shard; for Kafka: topic, partition,
/// offset), so ingestion can resume from the WAL (or, once flushed, from the
/// region manifest) after a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePosition {
    /// The source's stream (a Kafka topic).
    pub stream: String,
    /// The stream's shard (a Kafka partition).
    pub shard: u32,
    /// Every message of the shard below this position was durable (or
    /// handled as a bad message) when the record was written: a fact that
    /// stays true, so any record carrying it is enough to resume from it.
    pub durable_below: u64,
}

/// A decoded edits record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edits {
    pub region_id: u64,
    pub first_seq: u64,
    pub origin: Option<SourcePosition>,
    /// One entry list per row; row `i` has sequence id `first_seq + i`.
    pub rows: Vec<Vec<Entry>>,
}

pub fn encode_edits(
    region_id: u64,
    first_seq: u64,
    origin: Option<&SourcePosition>,
    rows: &EntryBatch,
) -> Vec<u8> {
    let mut out = encode_edits_head(region_id, first_seq, origin);
    out.extend_from_slice(&encode_edits_body(rows));
    out
}

/// The row part of an edits payload; independent of the sequence id, so a
/// writer can encode it before taking the region's write lock.
/// The rows of an edits record. Keys of one row repeat its row key and
/// family (and often a qualifier prefix), so each key stores only what
/// differs from the key before it in the row: for time-series rows that
/// makes the WAL about a quarter of the size of whole keys.
pub fn encode_edits_body(rows: &EntryBatch) -> Vec<u8> {
    // A batch that mixes rows is refused before it is logged (and a rows
    // message is made only of rows the point encoder or a decoded record
    // made, whose entries share their row).
    debug_assert!(!rows.mixes_rows());
    let mut out = Vec::with_capacity(rows.bytes() / 2 + rows.rows() * 64 + 8);
    put_varint(&mut out, rows.rows() as u64);
    for i in 0..rows.rows() {
        let row = rows.row(i);
        put_varint(&mut out, row.len() as u64);
        // The batch keeps the row once: the first key is written whole
        // (`u16 length ‖ row ‖ rest`), and each after it shares the row
        // and whatever its rest has in common with the rest before it.
        let mut prev: Option<&[u8]> = None;
        for e in row {
            match prev {
                None => {
                    put_varint(&mut out, 0);
                    put_varint(&mut out, e.key_len() as u64);
                    e.write_key(&mut out);
                }
                Some(prev) => {
                    let shared = crate::codec::common_prefix_len(prev, e.after_row);
                    put_varint(&mut out, (2 + e.row.len() + shared) as u64);
                    put_len_prefixed(&mut out, &e.after_row[shared..]);
                }
            }
            if let Some(ttl) = e.ttl_ms {
                put_varint(&mut out, ttl);
            }
            put_len_prefixed(&mut out, e.value);
            prev = Some(e.after_row);
        }
    }
    out
}

/// The header of an edits payload (region, first sequence id, origin),
/// which the body follows.
pub fn encode_edits_head(
    region_id: u64,
    first_seq: u64,
    origin: Option<&SourcePosition>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    put_varint(&mut out, region_id);
    put_varint(&mut out, first_seq);
    match origin {
        Some(o) => {
            put_varint(&mut out, FLAG_ORIGIN | FLAG_PREFIX_KEYS);
            put_len_prefixed(&mut out, o.stream.as_bytes());
            put_varint(&mut out, u64::from(o.shard));
            put_varint(&mut out, o.durable_below);
        }
        None => put_varint(&mut out, FLAG_PREFIX_KEYS),
    }
    out
}

/// The region an edits record belongs to, read without decoding its rows.
pub fn edits_region(payload: &[u8]) -> Result<u64, DecodeError> {
    Reader::new(payload).varint("region id")
}

pub fn decode_edits(payload: &[u8]) -> Result<Edits, DecodeError> {
    let mut r = Reader::new(payload);
    let region_id = r.varint("region id")?;
    let first_seq = r.varint("first sequence id")?;
    let flags = r.varint("flags")?;
    let origin = if flags & FLAG_ORIGIN != 0 {
        let stream = r.len_prefixed(payload.len(), "source stream")?;
        let stream = String::from_utf8(stream.to_vec()).map_err(|_| DecodeError {
            offset: r.pos(),
            what: "source stream is not utf-8",
        })?;
        let shard = r.varint("source shard")?;
        let shard = u32::try_from(shard).map_err(|_| DecodeError {
            offset: r.pos(),
            what: "source shard",
        })?;
        Some(SourcePosition {
            stream,
            shard,
            durable_below: r.varint("source position")?,
        })
    } else {
        None
    };
    let prefix_keys = flags & FLAG_PREFIX_KEYS != 0;
    let row_count = r.len(payload.len(), "row count")?;
    let mut rows = Vec::with_capacity(row_count);
    for _ in 0..row_count {
        let n = r.len(payload.len(), "entry count")?;
        let mut entries: Vec<Entry> = Vec::with_capacity(n);
        for _ in 0..n {
            let key_at = r.pos();
            let key = if prefix_keys {
                let prev = entries.last().map_or(&[][..], |e| e.key.as_slice());
                let shared = r.len(prev.len(), "shared key length")?;
                let suffix = r.len_prefixed(payload.len(), "key suffix")?;
                [&prev[..shared], suffix].concat()
            } else {
                r.len_prefixed(payload.len(), "key")?.to_vec()
            };
            let parsed = KeyRef::parse(&key).ok_or(DecodeError {
                offset: key_at,
                what: "malformed cell key",
            })?;
            if entries
                .first()
                .is_some_and(|first| row_of(&first.key) != parsed.row)
            {
                return Err(DecodeError {
                    offset: key_at,
                    what: "entries of one row name different rows",
                });
            }
            let ttl_ms = if key[key.len() - 1] & TTL_FLAG != 0 {
                Some(r.varint("cell ttl")?)
            } else {
                None
            };
            debug_assert_eq!(parsed.has_ttl, ttl_ms.is_some());
            let value = r.len_prefixed(payload.len(), "value")?;
            entries.push(Entry {
                key,
                ttl_ms,
                value: value.to_vec(),
            });
        }
        rows.push(entries);
    }
    if !r.is_empty() {
        return Err(DecodeError {
            offset: r.pos(),
            what: "trailing bytes after edits",
        });
    }
    Ok(Edits {
        region_id,
        first_seq,
        origin,
        rows,
    })
}

/// What the scan of one segment found.
#[derive(Debug)]
pub enum Frame<'a> {
    Record {
        kind: u8,
        payload: &'a [u8],
        next: usize,
    },
    /// Zeros where the next frame would be: the written part ends here.
    EndOfData,
    /// A frame that does not check out (torn write, stale or damaged data).
    Bad { what: &'static str },
}

/// Reads the frame at `pos` of a segment's bytes.
pub fn read_frame(buf: &[u8], pos: usize, segment_id: u64) -> Frame<'_> {
    let Some(header) = buf.get(pos..pos + FRAME_HEADER_LEN) else {
        return if buf.len() <= pos || buf[pos..].iter().all(|b| *b == 0) {
            Frame::EndOfData
        } else {
            Frame::Bad {
                what: "frame header cut short",
            }
        };
    };
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let kind = header[8];
    if len == 0 && crc == 0 && kind == 0 {
        return Frame::EndOfData;
    }
    if len > MAX_RECORD_LEN {
        return Frame::Bad {
            what: "record length out of range",
        };
    }
    let start = pos + FRAME_HEADER_LEN;
    let Some(payload) = buf.get(start..start + len) else {
        return Frame::Bad {
            what: "record runs past the end of the segment",
        };
    };
    if record_crc(segment_id, kind, payload) != crc {
        return Frame::Bad {
            what: "record checksum mismatch",
        };
    }
    if kind != TYPE_EDITS && kind != TYPE_SEGMENT_END && kind != TYPE_SYNC_POINT {
        return Frame::Bad {
            what: "unknown record type",
        };
    }
    Frame::Record {
        kind,
        payload,
        next: start + len,
    }
}

/// The highest sync point claim in `buf` at or after `from`: the offset up
/// to which a later record says the segment was synced. Frames after damage
/// cannot be walked one by one, so this looks at every offset for the shape
/// of a sync point (length 8, type 3) and trusts only checksummed ones.
pub fn highest_sync_claim_after(buf: &[u8], from: usize, segment_id: u64) -> Option<u64> {
    let mut best = None;
    let mut at = from;
    while at + SYNC_POINT_LEN <= buf.len() {
        if buf[at..at + 4] == [8, 0, 0, 0]
            && buf[at + 8] == TYPE_SYNC_POINT
            && let Frame::Record {
                kind: TYPE_SYNC_POINT,
                payload,
                ..
            } = read_frame(buf, at, segment_id)
        {
            let claim = u64::from_le_bytes(payload.try_into().expect("8 bytes"));
            best = best.max(Some(claim));
        }
        at += 1;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{CellKind, encode_key};

    #[test]
    fn a_record_framed_in_two_parts_is_the_record_framed_whole() {
        let (head, body) = (b"head".as_slice(), b"and the body".as_slice());
        let mut parts = Vec::new();
        frame_parts_into(&mut parts, 9, TYPE_EDITS, head, body);
        let mut whole = Vec::new();
        frame_into(&mut whole, 9, TYPE_EDITS, &[head, body].concat());
        assert_eq!(parts, whole);
        // The checksum covers the segment id: another segment's is different.
        let mut other = Vec::new();
        frame_into(&mut other, 10, TYPE_EDITS, &[head, body].concat());
        assert_ne!(parts, other);
    }

    #[test]
    fn edits_round_trip_with_ttl_and_origin() {
        let rows = vec![
            vec![
                Entry {
                    key: encode_key(b"r1", b"f", b"q", 5, CellKind::Put, true),
                    ttl_ms: Some(1000),
                    value: b"v".to_vec(),
                },
                Entry {
                    key: encode_key(b"r1", b"f", b"", 5, CellKind::DeleteFamily, false),
                    ttl_ms: None,
                    value: vec![],
                },
            ],
            vec![],
        ];
        let origin = SourcePosition {
            stream: "cpu".into(),
            shard: 3,
            durable_below: 99,
        };
        let payload = encode_edits(7, 42, Some(&origin), &EntryBatch::from_rows(&rows));
        let back = decode_edits(&payload).unwrap();
        assert_eq!(back.region_id, 7);
        assert_eq!(back.first_seq, 42);
        assert_eq!(back.origin, Some(origin));
        assert_eq!(back.rows, rows);
        for cut in 0..payload.len() {
            assert!(decode_edits(&payload[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn keys_are_prefix_compressed_and_whole_key_records_still_decode() {
        let row: Vec<Entry> = ["usage_idle", "usage_user"]
            .iter()
            .map(|q| Entry {
                key: encode_key(
                    b"cpu-host_0001-1700000000",
                    b"f",
                    q.as_bytes(),
                    9,
                    CellKind::Put,
                    false,
                ),
                ttl_ms: None,
                value: vec![1, 2, 3],
            })
            .collect();
        let rows = vec![row];
        let batch = EntryBatch::from_rows(&rows);
        let payload = encode_edits(1, 1, None, &batch);
        let whole_keys: usize = rows[0].iter().map(|e| e.key.len()).sum();
        assert!(
            payload.len() < whole_keys,
            "the second key should share the first's row, family and `usage_`"
        );
        assert_eq!(decode_edits(&payload).unwrap().rows, rows);

        // A record written before prefix compression: flags 0, whole keys.
        let mut old = Vec::new();
        put_varint(&mut old, 1);
        put_varint(&mut old, 1);
        put_varint(&mut old, 0);
        put_varint(&mut old, 1);
        put_varint(&mut old, rows[0].len() as u64);
        for e in &rows[0] {
            put_len_prefixed(&mut old, &e.key);
            put_len_prefixed(&mut old, &e.value);
        }
        assert_eq!(decode_edits(&old).unwrap().rows, rows);
    }

    /// The body as records were written while a batch kept every entry's
    /// whole key: each key shares with the key before it in its row
    /// whatever prefix they have in common.
    fn body_of_whole_keys(rows: &[Vec<Entry>]) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, rows.len() as u64);
        for row in rows {
            put_varint(&mut out, row.len() as u64);
            let mut prev: &[u8] = &[];
            for e in row {
                let shared = crate::codec::common_prefix_len(prev, &e.key);
                put_varint(&mut out, shared as u64);
                put_len_prefixed(&mut out, &e.key[shared..]);
                if let Some(ttl) = e.ttl_ms {
                    put_varint(&mut out, ttl);
                }
                put_len_prefixed(&mut out, &e.value);
                prev = &e.key;
            }
        }
        out
    }

    #[test]
    fn a_batch_keeping_each_row_once_logs_the_bytes_of_whole_keys() {
        let entry = |row: &[u8], q: &[u8], ts: u64, kind: CellKind, ttl: Option<u64>| Entry {
            key: encode_key(row, b"f", q, ts, kind, ttl.is_some()),
            ttl_ms: ttl,
            value: if kind == CellKind::Put {
                q.to_vec()
            } else {
                vec![]
            },
        };
        let rows = vec![
            vec![
                entry(b"host_1", b"", 9, CellKind::DeleteFamily, None),
                entry(b"host_1", b"usage_idle", 9, CellKind::Put, None),
                entry(b"host_1", b"usage_idle", 8, CellKind::Put, Some(60_000)),
                entry(b"host_1", b"usage_user", 9, CellKind::Put, None),
            ],
            vec![],
            vec![entry(b"host_10", b"usage_user", 9, CellKind::Put, None)],
            vec![
                entry(b"host_1", b"a", 1, CellKind::Put, None),
                entry(b"host_1", b"ab", 1, CellKind::Put, None),
            ],
        ];
        let batch = EntryBatch::from_rows(&rows);
        assert_eq!(encode_edits_body(&batch), body_of_whole_keys(&rows));
        assert_eq!(
            batch.bytes(),
            rows.iter()
                .flatten()
                .map(|e| e.key.len() + e.value.len())
                .sum::<usize>()
        );
        assert_eq!(batch.to_rows(), rows);
        let payload = encode_edits(3, 1, None, &batch);
        assert_eq!(decode_edits(&payload).unwrap().rows, rows);
    }

    #[test]
    fn a_record_whose_row_names_two_rows_is_refused() {
        let rows = vec![vec![
            Entry {
                key: encode_key(b"r1", b"f", b"a", 1, CellKind::Put, false),
                ttl_ms: None,
                value: vec![],
            },
            Entry {
                key: encode_key(b"r2", b"f", b"b", 1, CellKind::Put, false),
                ttl_ms: None,
                value: vec![],
            },
        ]];
        let mut payload = Vec::new();
        put_varint(&mut payload, 1);
        put_varint(&mut payload, 1);
        put_varint(&mut payload, FLAG_PREFIX_KEYS);
        payload.extend_from_slice(&body_of_whole_keys(&rows));
        let err = decode_edits(&payload).expect_err("two rows in one");
        assert_eq!(err.what, "entries of one row name different rows");
    }

    #[test]
    fn frames_check_segment_id_and_detect_tears() {
        let mut seg = vec![];
        frame_into(&mut seg, 5, TYPE_EDITS, b"hello");
        let whole = seg.len();
        seg.extend_from_slice(&[0u8; 32]);
        match read_frame(&seg, 0, 5) {
            Frame::Record { payload, next, .. } => {
                assert_eq!(payload, b"hello");
                assert_eq!(next, whole);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(read_frame(&seg, whole, 5), Frame::EndOfData));
        assert!(matches!(read_frame(&seg, 0, 6), Frame::Bad { .. }));
        assert!(matches!(
            read_frame(&seg[..whole - 1], 0, 5),
            Frame::Bad { .. }
        ));
    }
}
