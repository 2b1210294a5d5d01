//! Block framing: every block of a store file is framed the same way.
//!
//! # Frame (every block in a store file)
//!
//! | bytes | field                                              |
//! |-------|----------------------------------------------------|
//! | 1     | low 4 bits: compression, 0 = none, 1 = snappy (raw format); bit 4: the payload is a time-series block (`ts_block`) |
//! | 4     | uncompressed payload length, u32 LE                |
//! | n     | payload (compressed when the byte says so)         |
//! | 4     | CRC32C over all preceding bytes of the frame, LE   |
//!
//! A time-series payload decodes into the data block body (`block`).

use std::borrow::Cow;

use super::block::BlockCells;
use super::format::Projection;
use super::ts_block;
use crate::codec::DecodeError;

pub const FRAME_OVERHEAD: usize = 9;
pub const COMPRESSION_NONE: u8 = 0;
pub const COMPRESSION_SNAPPY: u8 = 1;
/// Frame flag: the payload is a time-series block, not a body.
pub const TIME_SERIES: u8 = 0x10;
const COMPRESSION_MASK: u8 = 0x0f;

/// Frames a block body, compressing it with snappy when asked and when that
/// actually saves space.
pub fn frame(body: &[u8], snappy: bool, out: &mut Vec<u8>) {
    frame_payload(body, 0, snappy, out);
}

/// Frames a data block's entries as a time-series block when that is
/// smaller than their body (`ts_block`), else as their body.
pub fn frame_time_series(entries: &BlockCells, snappy: bool, out: &mut Vec<u8>) {
    match ts_block::encode_cells(entries) {
        Some(ts) if ts.len() < entries.size() => frame_payload(&ts, TIME_SERIES, snappy, out),
        _ => frame_payload(&entries.body(), 0, snappy, out),
    }
}

fn frame_payload(body: &[u8], flags: u8, snappy: bool, out: &mut Vec<u8>) {
    let start = out.len();
    let compressed = if snappy {
        snap::raw::Encoder::new()
            .compress_vec(body)
            .ok()
            .filter(|c| c.len() + c.len() / 8 < body.len())
    } else {
        None
    };
    match &compressed {
        Some(c) => {
            out.push(COMPRESSION_SNAPPY | flags);
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(c);
        }
        None => {
            out.push(COMPRESSION_NONE | flags);
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(body);
        }
    }
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Checks a frame and returns its body. Offsets in errors are relative to
/// the frame start.
pub fn unframe(frame: &[u8], max_len: usize) -> Result<Vec<u8>, DecodeError> {
    unframe_projected(frame, max_len, None).map(|(body, _)| body)
}

/// Like [`unframe`]; a time-series block keeps only what `projection`
/// wants. Also says whether the block was a time-series block.
pub fn unframe_projected(
    frame: &[u8],
    max_len: usize,
    projection: Option<&Projection>,
) -> Result<(Vec<u8>, bool), DecodeError> {
    match unframe_payload(frame, max_len)? {
        Payload::Standard(body) => Ok((body.into_owned(), false)),
        Payload::TimeSeries(payload) => ts_block::decode_projected(&payload, max_len, projection)
            .map(|body| (body, true))
            .map_err(|e| DecodeError {
                offset: FRAME_HEADER + e.offset,
                what: e.what,
            }),
    }
}

/// A checked, decompressed block, not yet decoded (borrowed from the
/// frame when it was not compressed).
pub enum Payload<'a> {
    /// The standard block body.
    Standard(Cow<'a, [u8]>),
    /// A time-series payload ([`ts_block`]), which decodes into one.
    TimeSeries(Cow<'a, [u8]>),
}

/// Checks a frame's checksum and flags and decompresses its payload.
pub fn unframe_payload(frame: &[u8], max_len: usize) -> Result<Payload<'_>, DecodeError> {
    if frame.len() < FRAME_OVERHEAD {
        return Err(DecodeError {
            offset: 0,
            what: "block shorter than its frame",
        });
    }
    let (head, crc_bytes) = frame.split_at(frame.len() - 4);
    let crc = u32::from_le_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
    if crc32c::crc32c(head) != crc {
        return Err(DecodeError {
            offset: 0,
            what: "block checksum mismatch",
        });
    }
    let raw_len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if raw_len > max_len {
        return Err(DecodeError {
            offset: 1,
            what: "block length out of range",
        });
    }
    let flags = head[0] & !COMPRESSION_MASK;
    if flags & !TIME_SERIES != 0 {
        return Err(DecodeError {
            offset: 0,
            what: "unknown block flags",
        });
    }
    let payload = decompress(head, raw_len)?;
    Ok(if flags & TIME_SERIES != 0 {
        Payload::TimeSeries(payload)
    } else {
        Payload::Standard(payload)
    })
}

/// Bytes of a frame before its payload.
const FRAME_HEADER: usize = 5;

fn decompress(head: &[u8], raw_len: usize) -> Result<Cow<'_, [u8]>, DecodeError> {
    let body = &head[FRAME_HEADER..];
    match head[0] & COMPRESSION_MASK {
        COMPRESSION_NONE if body.len() == raw_len => Ok(Cow::Borrowed(body)),
        COMPRESSION_SNAPPY => {
            let n = snap::raw::decompress_len(body).map_err(|_| DecodeError {
                offset: 5,
                what: "snappy header invalid",
            })?;
            if n != raw_len {
                return Err(DecodeError {
                    offset: 5,
                    what: "snappy length disagrees with block header",
                });
            }
            snap::raw::Decoder::new()
                .decompress_vec(body)
                .map(Cow::Owned)
                .map_err(|_| DecodeError {
                    offset: 5,
                    what: "snappy data invalid",
                })
        }
        COMPRESSION_NONE => Err(DecodeError {
            offset: 1,
            what: "block length disagrees with its frame",
        }),
        _ => Err(DecodeError {
            offset: 0,
            what: "unknown block compression",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_detect_flips() {
        let body: Vec<u8> = (0..5000u32).flat_map(|i| (i % 17).to_le_bytes()).collect();
        for snappy in [false, true] {
            let mut f = vec![];
            frame(&body, snappy, &mut f);
            assert_eq!(unframe(&f, 1 << 20).unwrap(), body);
            for i in 0..f.len() {
                let mut bad = f.clone();
                bad[i] ^= 0x40;
                assert!(unframe(&bad, 1 << 20).is_err(), "flip at {i}");
            }
        }
    }
}
