//! Writes a store file from cells in key order.
//!
//! # Meta block body
//!
//! ```text
//! family (len-prefixed) · first_key (len-prefixed) · last_key (len-prefixed)
//! · varint min_ts · varint max_ts · varint entries · varint delete_markers
//! · varint max_seq · varint max_cell_expiry · varint created_ms
//! · varint data_bytes · u8 bloom (0 none, 1 row, 2 rowcol)
//! ```
//!
//! # Index block body
//!
//! `varint count`, then per data block: first key (len-prefixed), varint
//! offset, varint framed size.
//!
//! # Trailer (fixed 52 bytes at the end of the file)
//!
//! | bytes | field                                  |
//! |-------|----------------------------------------|
//! | 8+4   | bloom block offset (u64 LE), size (u32) |
//! | 8+4   | index block offset, size               |
//! | 8+4   | meta block offset, size                |
//! | 4     | format version (u32 LE)                |
//! | 4     | CRC32C of the 40 bytes above           |
//! | 8     | magic `HALSST\0\x01`                   |
//!
//! The file is written under a temporary name, synced, renamed into place
//! and the directory synced, so a crash never leaves a half file under a
//! live name.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::block::{BlockBuilder, BlockCells};
use super::bloom::{Bloom, hash, rowcol_key};
use super::format::{FileMeta, SST_MAGIC, SST_VERSION, SstError, WholeBlock, file_name};
use super::frame::{frame, frame_time_series};
use crate::cell::{CellKind, KeyRef, row_of};
use crate::codec::{put_len_prefixed, put_varint};
use crate::schema::{BloomType, Compression, DataBlockEncoding, FamilyDescriptor};

pub const TRAILER_LEN: usize = 52;

/// A time-series block whose body has reached BLOCKSIZE / this ends
/// before a new series.
pub(crate) const SERIES_CUT: usize = 8;

pub struct SstWriter {
    tmp_path: PathBuf,
    final_path: PathBuf,
    dir: PathBuf,
    out: std::io::BufWriter<File>,
    offset: u64,
    block: BlockBuilder,
    /// A time-series family's block: its entries as added (`block` stays
    /// empty), encoded when it is full.
    cells: Option<BlockCells>,
    block_first_key: Option<Vec<u8>>,
    block_size: usize,
    snappy: bool,
    bloom_type: BloomType,
    bloom_prefix_len: usize,
    bloom_hashes: Vec<u64>,
    last_bloom_key: Vec<u8>,
    index: Vec<(Vec<u8>, u64, u64)>,
    scratch: Vec<u8>,
    meta: FileMeta,
    /// The last key of the last block written out.
    last_key: Vec<u8>,
}

/// The last key of the block being built (empty when it is empty): a
/// time-series family's cells, or the body of any other.
fn building_last_key<'a>(cells: &'a Option<BlockCells>, block: &'a BlockBuilder) -> &'a [u8] {
    match cells {
        Some(cells) => cells.last_key(),
        None => block.last_key(),
    }
}

impl SstWriter {
    pub fn create(
        dir: &Path,
        file_id: u64,
        family: &FamilyDescriptor,
        created_ms: u64,
    ) -> Result<Self, SstError> {
        let final_path = dir.join(file_name(file_id));
        let tmp_path = dir.join(format!("{}.tmp", file_name(file_id)));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp_path)
            .map_err(|e| SstError::io(&tmp_path, "create store file", e))?;
        crate::fault::power::created(&tmp_path);
        Ok(SstWriter {
            tmp_path,
            final_path,
            dir: dir.to_path_buf(),
            out: std::io::BufWriter::with_capacity(256 * 1024, file),
            offset: 0,
            block: BlockBuilder::new(family.data_block_encoding != DataBlockEncoding::None),
            cells: (family.data_block_encoding == DataBlockEncoding::TimeSeries)
                .then(BlockCells::default),
            block_first_key: None,
            block_size: family.block_size,
            snappy: family.compression == Compression::Snappy,
            bloom_type: family.bloom,
            bloom_prefix_len: family.bloom_prefix_len,
            bloom_hashes: Vec::new(),
            last_bloom_key: Vec::new(),
            index: Vec::new(),
            scratch: Vec::new(),
            meta: FileMeta {
                family: family.name.clone(),
                first_key: Vec::new(),
                last_key: Vec::new(),
                min_ts: u64::MAX,
                max_ts: 0,
                entries: 0,
                delete_markers: 0,
                max_seq: 0,
                max_cell_expiry: 0,
                created_ms,
                data_bytes: 0,
            },
            last_key: Vec::new(),
        })
    }

    pub fn entries(&self) -> u64 {
        self.meta.entries
    }

    /// Bytes written so far (data blocks).
    pub fn written(&self) -> u64 {
        self.offset
    }

    /// Adds an entry; keys must come in strictly increasing order.
    pub fn add(&mut self, key: &[u8], ttl_ms: Option<u64>, value: &[u8]) -> Result<(), SstError> {
        debug_assert!(
            self.meta.entries == 0
                || crate::cell::compare_keys(self.last_key(), key) == std::cmp::Ordering::Less,
            "store file keys out of order"
        );
        let parsed = KeyRef::parse(key).ok_or_else(|| {
            SstError::corrupt(&self.tmp_path, self.offset, "malformed key given to writer")
        })?;
        // A time-series block at least an eighth full ends before a new
        // series: a read of a series' newest points then starts at a
        // block's first row, or in its first eighth, instead of decoding
        // on average half a block of other series' rows to get there.
        // (Series of a day's file are many blocks long: the blocks cut
        // short cost little room.)
        let mut shared = 0;
        if let Some(cells) = &self.cells
            && !cells.is_empty()
        {
            shared = cells.shared_with_last(key);
            // Keys are `u16 row length ‖ row ‖ …`: sharing the length and
            // all of the row but its last eight bytes (a time-series
            // row's time) is the same series.
            let head = 2 + parsed.row.len().saturating_sub(8);
            if shared < head && SERIES_CUT * cells.size() >= self.block_size {
                self.flush_block()?;
                shared = 0;
            }
        }
        if self.block_first_key.is_none() {
            self.block_first_key = Some(key.to_vec());
        }
        let block_size = match &mut self.cells {
            Some(cells) => {
                cells.add_sharing(key, ttl_ms, value, shared);
                cells.size()
            }
            None => {
                self.block.add(key, ttl_ms, value);
                self.block.size()
            }
        };
        let m = &mut self.meta;
        if m.entries == 0 {
            m.first_key = key.to_vec();
        }
        m.entries += 1;
        m.min_ts = m.min_ts.min(parsed.timestamp);
        m.max_ts = m.max_ts.max(parsed.timestamp);
        if parsed.kind != CellKind::Put {
            m.delete_markers += 1;
        }
        let expiry = match ttl_ms {
            Some(t) => parsed.timestamp.saturating_add(t),
            None => u64::MAX,
        };
        m.max_cell_expiry = m.max_cell_expiry.max(expiry);

        // Keys arrive sorted, so equal bloom keys of rows and prefixes are
        // adjacent: hashing only changes keeps one hash per row or prefix.
        // A key sharing its whole row (and the row's length) with the
        // last one has the last one's row and prefix.
        let same_row = shared >= 2 + parsed.row.len();
        match self.bloom_type {
            BloomType::None => {}
            BloomType::Row | BloomType::RowPrefix if same_row => {}
            BloomType::Row => self.add_bloom_key(row_of(key)),
            BloomType::RowPrefix => {
                let row = row_of(key);
                self.add_bloom_key(&row[..row.len().min(self.bloom_prefix_len)]);
            }
            BloomType::RowCol => {
                let k = rowcol_key(parsed.row, parsed.qualifier);
                self.add_bloom_key(&k);
            }
        }
        if block_size >= self.block_size {
            self.flush_block()?;
        }
        Ok(())
    }

    fn add_bloom_key(&mut self, k: &[u8]) {
        if k != self.last_bloom_key.as_slice() {
            self.bloom_hashes.push(hash(k));
            self.last_bloom_key.clear();
            self.last_bloom_key.extend_from_slice(k);
        }
    }

    /// The key last added: the block's being built holds it, and a
    /// block's last key is kept when it is written out (copying every key
    /// as it came was a memmove an entry).
    fn last_key(&self) -> &[u8] {
        match building_last_key(&self.cells, &self.block) {
            [] => &self.last_key,
            building => building,
        }
    }

    fn flush_block(&mut self) -> Result<(), SstError> {
        self.scratch.clear();
        let last = building_last_key(&self.cells, &self.block);
        if !last.is_empty() {
            self.last_key.clear();
            self.last_key.extend_from_slice(last);
        }
        match &mut self.cells {
            Some(cells) if cells.is_empty() => return Ok(()),
            Some(cells) => {
                frame_time_series(cells, self.snappy, &mut self.scratch);
                cells.clear();
            }
            None if self.block.is_empty() => return Ok(()),
            None => {
                let body = self.block.finish();
                frame(&body, self.snappy, &mut self.scratch);
            }
        }
        self.meta.data_bytes += u64::from(payload_len(&self.scratch));
        let first = self
            .block_first_key
            .take()
            .expect("set with the block's first entry");
        self.index
            .push((first, self.offset, self.scratch.len() as u64));
        self.write_scratch()
    }

    /// Whether [`Self::copy_block`] may be given this family's blocks: a
    /// time-series family without a bloom filter (a copied block's keys
    /// are not seen, so none could go into one).
    pub fn takes_whole_blocks(&self) -> bool {
        self.cells.is_some() && self.bloom_type == BloomType::None
    }

    /// Appends a data block of another file of this family as that file
    /// holds it. Its keys must all come after every key given so far, and
    /// `file` (the meta of the file it came from) must hold no delete
    /// marker and have all its cells go to this file: its time range and
    /// latest expiry are this block's bounds.
    pub fn copy_block(&mut self, block: &WholeBlock, file: &FileMeta) -> Result<(), SstError> {
        debug_assert!(self.takes_whole_blocks() && file.delete_markers == 0);
        debug_assert!(
            self.meta.entries == 0
                || crate::cell::compare_keys(self.last_key(), &block.first_key)
                    == std::cmp::Ordering::Less,
            "copied block out of order"
        );
        self.flush_block()?;
        let m = &mut self.meta;
        if m.entries == 0 {
            m.first_key = block.first_key.clone();
        }
        m.entries += block.entries;
        m.min_ts = m.min_ts.min(file.min_ts);
        m.max_ts = m.max_ts.max(file.max_ts);
        m.max_cell_expiry = m.max_cell_expiry.max(file.max_cell_expiry);
        m.data_bytes += block.payload_len;
        self.last_key.clone_from(&block.last_key);
        self.index.push((
            block.first_key.clone(),
            self.offset,
            block.frame.len() as u64,
        ));
        self.scratch.clear();
        self.scratch.extend_from_slice(&block.frame);
        self.write_scratch()
    }

    fn write_scratch(&mut self) -> Result<(), SstError> {
        crate::fault::fail_if_armed(crate::fault::Site::StoreWrite, &self.tmp_path)
            .map_err(|e| SstError::io(&self.tmp_path, "write store file", e))?;
        self.out
            .write_all(&self.scratch)
            .map_err(|e| SstError::io(&self.tmp_path, "write store file", e))?;
        // Recorded before the buffer reaches the file; the sync below is
        // recorded only after the buffer is flushed, so it covers this.
        crate::fault::power::wrote(&self.tmp_path, self.offset, &self.scratch);
        self.offset += self.scratch.len() as u64;
        Ok(())
    }

    /// Writes a framed block, snappy-compressed when asked (and smaller
    /// so); returns (offset, size).
    fn write_block(&mut self, body: &[u8], snappy: bool) -> Result<(u64, u32), SstError> {
        self.scratch.clear();
        frame(body, snappy, &mut self.scratch);
        let at = self.offset;
        let size = self.scratch.len() as u32;
        self.write_scratch()?;
        Ok((at, size))
    }

    /// Completes the file, syncs it and moves it under its live name; on a
    /// failure the temporary file is removed.
    pub fn finish(self, max_seq: u64) -> Result<(PathBuf, FileMeta, u64), SstError> {
        let tmp = self.tmp_path.clone();
        let done = self.finish_file(max_seq);
        if done.is_err() {
            let _ = crate::fsutil::remove_file(&tmp);
        }
        done
    }

    fn finish_file(mut self, max_seq: u64) -> Result<(PathBuf, FileMeta, u64), SstError> {
        self.flush_block()?;
        self.meta.last_key = std::mem::take(&mut self.last_key);
        self.meta.max_seq = max_seq;
        if self.meta.entries == 0 {
            self.meta.min_ts = 0;
        }

        let mut body = Vec::new();
        if self.bloom_type != BloomType::None {
            Bloom::build(&self.bloom_hashes).encode(&mut body);
        }
        // A filter's bits do not compress.
        let bloom = self.write_block(&body, false)?;

        body.clear();
        put_varint(&mut body, self.index.len() as u64);
        for (key, off, size) in &self.index {
            put_len_prefixed(&mut body, key);
            put_varint(&mut body, *off);
            put_varint(&mut body, *size);
        }
        // First keys of neighbouring blocks share most of their bytes:
        // snappy took a time-series file's index to a sixth of its size.
        let index = self.write_block(&body, self.snappy)?;

        body.clear();
        encode_meta(
            &self.meta,
            self.bloom_type,
            self.bloom_prefix_len,
            &mut body,
        );
        let meta = self.write_block(&body, false)?;

        let mut trailer = Vec::with_capacity(TRAILER_LEN);
        for (off, size) in [bloom, index, meta] {
            trailer.extend_from_slice(&off.to_le_bytes());
            trailer.extend_from_slice(&size.to_le_bytes());
        }
        trailer.extend_from_slice(&SST_VERSION.to_le_bytes());
        let crc = crc32c::crc32c(&trailer);
        trailer.extend_from_slice(&crc.to_le_bytes());
        trailer.extend_from_slice(SST_MAGIC);
        debug_assert_eq!(trailer.len(), TRAILER_LEN);
        self.scratch = trailer;
        self.write_scratch()?;

        let file = self
            .out
            .into_inner()
            .map_err(|e| SstError::io(&self.tmp_path, "write store file", e.into_error()))?;
        crate::fault::fail_if_armed(crate::fault::Site::StoreSync, &self.tmp_path)
            .and_then(|_| crate::fsutil::sync_file(&file, &self.tmp_path))
            .map_err(|e| SstError::io(&self.tmp_path, "fsync store file", e))?;
        drop(file);
        crate::fsutil::rename(&self.tmp_path, &self.final_path)
            .map_err(|e| SstError::io(&self.final_path, "rename store file", e))?;
        // fsync the folder, or the rename may not survive a crash.
        crate::fsutil::fsync_dir(&self.dir)
            .map_err(|e| SstError::io(&self.dir, "fsync directory", e))?;
        Ok((self.final_path, self.meta, self.offset))
    }

    /// Removes the temporary file of an abandoned write.
    pub fn abandon(self) {
        let _ = crate::fsutil::remove_file(&self.tmp_path);
    }
}

/// A frame's payload length before compression (see `frame`).
fn payload_len(frame: &[u8]) -> u32 {
    frame
        .get(1..5)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn encode_meta(m: &FileMeta, bloom: BloomType, prefix_len: usize, out: &mut Vec<u8>) {
    put_len_prefixed(out, &m.family);
    put_len_prefixed(out, &m.first_key);
    put_len_prefixed(out, &m.last_key);
    for v in [
        m.min_ts,
        m.max_ts,
        m.entries,
        m.delete_markers,
        m.max_seq,
        m.max_cell_expiry,
        m.created_ms,
        m.data_bytes,
    ] {
        put_varint(out, v);
    }
    out.push(match bloom {
        BloomType::None => 0,
        BloomType::Row => 1,
        BloomType::RowCol => 2,
        BloomType::RowPrefix => 3,
    });
    if bloom == BloomType::RowPrefix {
        put_varint(out, prefix_len as u64);
    }
}

/// The meta block: what the file holds, its bloom type and (ROWPREFIX) the
/// bloom's prefix length.
pub(crate) fn decode_meta(
    body: &[u8],
) -> Result<(FileMeta, BloomType, usize), crate::codec::DecodeError> {
    let mut r = crate::codec::Reader::new(body);
    let family = r.len_prefixed(body.len(), "family")?.to_vec();
    let first_key = r.len_prefixed(body.len(), "first key")?.to_vec();
    let last_key = r.len_prefixed(body.len(), "last key")?.to_vec();
    let mut v = [0u64; 8];
    for slot in v.iter_mut() {
        *slot = r.varint("meta field")?;
    }

    let bloom = match r.u8("bloom type")? {
        0 => BloomType::None,
        1 => BloomType::Row,
        2 => BloomType::RowCol,
        3 => BloomType::RowPrefix,
        _ => {
            return Err(crate::codec::DecodeError {
                offset: r.pos() - 1,
                what: "unknown bloom type",
            });
        }
    };
    let prefix_len = if bloom == BloomType::RowPrefix {
        let n = r.varint("bloom prefix length")?;
        if n == 0 || n > u64::from(u16::MAX) {
            return Err(crate::codec::DecodeError {
                offset: r.pos() - 1,
                what: "bloom prefix length out of range",
            });
        }
        n as usize
    } else {
        0
    };
    Ok((
        FileMeta {
            family,
            first_key,
            last_key,
            min_ts: v[0],
            max_ts: v[1],
            entries: v[2],
            delete_markers: v[3],
            max_seq: v[4],
            max_cell_expiry: v[5],
            created_ms: v[6],
            data_bytes: v[7],
        },
        bloom,
        prefix_len,
    ))
}
