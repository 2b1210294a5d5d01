//! A region's tail as its owner sends it to a node reading the region
//! (cluster mode): the store files it reads now and its MemStores' edits
//! in a row range ([`crate::region::Region::tail`]), over the internal
//! route `GET /internal/v1/regions/{id}/tail`.
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `HALTAIL1` |
//! | varint | the owner's epoch |
//! | varint | family count, then per family: name (len-prefixed), varint file count, varint file id each |
//! | rest | a WAL edits record (`wal/record.rs`, region 0, sequence 0) holding the edits, one row after another |

use std::collections::BTreeMap;

use super::RegionTail;
use super::wal::record::{decode_edits, encode_edits};
use crate::cell::{EntryBatch, KeyRef};
use crate::codec::{Reader, put_len_prefixed, put_varint};

const MAGIC: &[u8; 8] = b"HALTAIL1";

pub fn encode_tail(tail: &RegionTail) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    put_varint(&mut out, tail.epoch);
    put_varint(&mut out, tail.files.len() as u64);
    for (family, ids) in &tail.files {
        put_len_prefixed(&mut out, family);
        put_varint(&mut out, ids.len() as u64);
        for id in ids {
            put_varint(&mut out, *id);
        }
    }
    out.extend_from_slice(&encode_edits(0, 0, None, &tail.rows));
    out
}

pub fn decode_tail(buf: &[u8]) -> Result<RegionTail, String> {
    let body = buf
        .strip_prefix(MAGIC.as_slice())
        .ok_or("a region tail starts with HALTAIL1")?;
    let bad =
        |e: crate::codec::DecodeError| format!("region tail at byte {}: {}", e.offset + 8, e.what);
    let mut r = Reader::new(body);
    let epoch = r.varint("epoch").map_err(bad)?;
    let families = r.len(body.len(), "family count").map_err(bad)?;
    let mut files = BTreeMap::new();
    for _ in 0..families {
        let name = r.len_prefixed(body.len(), "family").map_err(bad)?.to_vec();
        let n = r.len(body.len(), "file count").map_err(bad)?;
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            ids.push(r.varint("file id").map_err(bad)?);
        }
        files.insert(name, ids);
    }
    let edits = decode_edits(&body[r.pos()..]).map_err(|e| {
        format!(
            "region tail edits at byte {}: {}",
            e.offset + 8 + r.pos(),
            e.what
        )
    })?;
    let mut rows = EntryBatch::new();
    for row in edits.rows {
        for e in &row {
            let k = KeyRef::parse(&e.key).ok_or("a malformed key in a region tail")?;
            rows.push(
                k.row,
                k.family,
                k.qualifier,
                k.timestamp,
                k.kind,
                e.ttl_ms,
                &e.value,
            );
        }
        rows.end_row();
    }
    Ok(RegionTail { epoch, files, rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::CellKind;

    #[test]
    fn tails_round_trip_and_damage_is_an_error() {
        let mut rows = EntryBatch::new();
        rows.push(b"r1", b"f", b"a", 5, CellKind::Put, None, b"x");
        rows.push(b"r1", b"f", b"a", 4, CellKind::DeleteColumn, None, b"");
        rows.end_row();
        let tail = RegionTail {
            epoch: 7,
            files: BTreeMap::from([(b"f".to_vec(), vec![(7 << 32) | 1, (7 << 32) | 3])]),
            rows,
        };
        let buf = encode_tail(&tail);
        let back = decode_tail(&buf).expect("decode");
        assert_eq!(back.epoch, 7);
        assert_eq!(back.files, tail.files);
        assert_eq!(back.rows.rows(), 1);
        assert_eq!(back.rows.len(), 2);
        for cut in 0..buf.len() {
            assert!(decode_tail(&buf[..cut]).is_err(), "cut at {cut}");
        }
    }
}
