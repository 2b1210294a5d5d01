//! Opens and reads store files. Nothing read from disk is trusted: the
//! trailer, every block frame and every decoded length is checked, and a
//! failure names the file and offset.

use std::cmp::Ordering;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::block::{Block, BlockIter, Entries, EntryCursor};
use super::bloom::{Bloom, hash, rowcol_key};
use super::columns::{BlockRead, ColumnRows, ColumnRuns, ColumnSelect, RunRead};
use super::format::{FileMeta, Projection, SST_MAGIC, SST_VERSION, SstError, WholeBlock};
use super::frame::{FRAME_OVERHEAD, Payload, unframe, unframe_payload, unframe_projected};
use super::ts_block;
use super::writer::{TRAILER_LEN, decode_meta};
use crate::cell::{CellKind, KeyRef, compare_keys, first_key_of_row};
use crate::codec::Reader;
use crate::region::sst::cache::BlockCache;
use crate::schema::BloomType;
use crate::value::Value;

/// Largest block we agree to allocate for (a sane bound on a damaged length).
const MAX_BLOCK: usize = 256 * 1024 * 1024;

#[derive(Debug, Clone)]
struct IndexEntry {
    first_key: Vec<u8>,
    offset: u64,
    size: u64,
}

/// Most bytes of data blocks [`ReadAhead`] reads at once: a walk over
/// one series' blocks (about 17 of some 4 KiB at 4,000 TSBS hosts) in
/// one read instead of a read a block, whose system call and page-cache
/// lookup took a tenth of a fold.
pub const READ_AHEAD_BYTES: u64 = 256 * 1024;

/// Consecutive data blocks of one store file read at once, for a walk
/// over them (a fold); kept between walks for its buffer.
#[derive(Debug, Default)]
pub struct ReadAhead {
    /// Whose blocks `bytes` holds (`None`: nobody's).
    reader_id: Option<u64>,
    /// Where in the file `bytes` starts.
    offset: u64,
    /// How much of `bytes` holds the file's bytes.
    len: usize,
    bytes: Vec<u8>,
}

impl ReadAhead {
    /// Whether it holds bytes `from..to` of reader `reader_id`'s file.
    fn holds(&self, reader_id: u64, from: u64, to: u64) -> bool {
        self.reader_id == Some(reader_id)
            && self.offset <= from
            && to <= self.offset + self.len as u64
    }

    /// Bytes the buffer holds room for.
    pub fn capacity_bytes(&self) -> usize {
        self.bytes.capacity()
    }
}

/// An open store file.
#[derive(Debug)]
pub struct SstReader {
    path: PathBuf,
    file: File,
    file_id: u64,
    reader_id: u64,
    size: u64,
    meta: FileMeta,
    bloom_type: BloomType,
    bloom_prefix_len: usize,
    bloom: Option<Bloom>,
    index: Vec<IndexEntry>,
    /// The index's first rows, searchable without touching them.
    first_rows: RowPrints,
    cache: Arc<BlockCache>,
    use_cache: bool,
    in_memory: bool,
}

/// Eight bytes of each data block's first row, after the prefix every
/// row of the file shares: a search of the index for a row compares
/// these (one array, a few cache lines) and reads a block's first key
/// only among blocks whose eight bytes equal the row's. A file's first
/// rows share salt, metric and more; the eight bytes after them tell
/// most series apart. A row shorter than the window is padded with
/// zeros, which keeps the order: of two rows, the smaller never has the
/// larger eight bytes.
#[derive(Debug, Default)]
struct RowPrints {
    shared: Vec<u8>,
    prints: Vec<u64>,
}

impl RowPrints {
    fn new(index: &[IndexEntry]) -> Self {
        let (Some(first), Some(last)) = (index.first(), index.last()) else {
            return RowPrints::default();
        };
        let (first, last) = (
            crate::cell::row_of(&first.first_key),
            crate::cell::row_of(&last.first_key),
        );
        // Rows in between sort between these two, so share their prefix.
        let shared = first[..crate::codec::common_prefix_len(first, last)].to_vec();
        let prints = index
            .iter()
            .map(|e| Self::print_after(crate::cell::row_of(&e.first_key), shared.len()))
            .collect();
        RowPrints { shared, prints }
    }

    fn print_after(row: &[u8], from: usize) -> u64 {
        let mut window = [0u8; 8];
        let tail = row.get(from..).unwrap_or_default();
        let n = tail.len().min(8);
        window[..n].copy_from_slice(&tail[..n]);
        u64::from_be_bytes(window)
    }

    /// The print of `row`, if it shares the file's prefix.
    fn of(&self, row: &[u8]) -> Option<u64> {
        row.starts_with(&self.shared)
            .then(|| Self::print_after(row, self.shared.len()))
    }
}

impl SstReader {
    pub fn open(
        path: &Path,
        file_id: u64,
        cache: Arc<BlockCache>,
        use_cache: bool,
        in_memory: bool,
    ) -> Result<Arc<SstReader>, SstError> {
        let file = File::open(path).map_err(|e| SstError::io(path, "open store file", e))?;
        let size = file
            .metadata()
            .map_err(|e| SstError::io(path, "stat store file", e))?
            .len();
        if size < TRAILER_LEN as u64 {
            return Err(SstError::corrupt(path, 0, "file shorter than a trailer"));
        }
        let trailer_at = size - TRAILER_LEN as u64;
        let mut trailer = [0u8; TRAILER_LEN];
        file.read_exact_at(&mut trailer, trailer_at)
            .map_err(|e| SstError::io(path, "read trailer", e))?;
        if &trailer[44..52] != SST_MAGIC {
            return Err(SstError::corrupt(
                path,
                trailer_at + 44,
                "bad trailer magic",
            ));
        }
        let crc = u32::from_le_bytes(trailer[40..44].try_into().expect("4 bytes"));
        if crc32c::crc32c(&trailer[..40]) != crc {
            return Err(SstError::corrupt(
                path,
                trailer_at,
                "trailer checksum mismatch",
            ));
        }
        let version = u32::from_le_bytes(trailer[36..40].try_into().expect("4 bytes"));
        if version != SST_VERSION {
            return Err(SstError::corrupt(
                path,
                trailer_at + 36,
                "unsupported store file version",
            ));
        }
        let mut parts = [(0u64, 0u64); 3];
        for (i, part) in parts.iter_mut().enumerate() {
            let at = i * 12;
            let off = u64::from_le_bytes(trailer[at..at + 8].try_into().expect("8 bytes"));
            let len = u32::from_le_bytes(trailer[at + 8..at + 12].try_into().expect("4 bytes"));
            if off
                .checked_add(u64::from(len))
                .is_none_or(|end| end > trailer_at)
            {
                return Err(SstError::corrupt(
                    path,
                    trailer_at + at as u64,
                    "block pointer past the trailer",
                ));
            }
            *part = (off, u64::from(len));
        }
        let [bloom_ptr, index_ptr, meta_ptr] = parts;
        let read_part = |(off, len): (u64, u64), what: &'static str| -> Result<Vec<u8>, SstError> {
            let mut buf = vec![0u8; len as usize];
            file.read_exact_at(&mut buf, off)
                .map_err(|e| SstError::io(path, what, e))?;
            unframe(&buf, MAX_BLOCK).map_err(|e| SstError::decode(path, off, e))
        };
        let meta_body = read_part(meta_ptr, "read meta block")?;
        let (meta, bloom_type, bloom_prefix_len) =
            decode_meta(&meta_body).map_err(|e| SstError::decode(path, meta_ptr.0, e))?;
        let bloom_body = read_part(bloom_ptr, "read bloom block")?;
        let bloom = if bloom_type == BloomType::None {
            None
        } else {
            Some(Bloom::decode(&bloom_body).map_err(|e| SstError::decode(path, bloom_ptr.0, e))?)
        };
        let index_body = read_part(index_ptr, "read index block")?;
        let index = decode_index(&index_body, bloom_ptr.0)
            .map_err(|e| SstError::decode(path, index_ptr.0, e))?;
        if (index.is_empty()) != (meta.entries == 0) {
            return Err(SstError::corrupt(
                path,
                index_ptr.0,
                "index and meta disagree on emptiness",
            ));
        }
        Ok(Arc::new(SstReader {
            path: path.to_path_buf(),
            file,
            file_id,
            reader_id: cache.new_reader_id(),
            size,
            meta,
            bloom_type,
            bloom_prefix_len,
            bloom,
            first_rows: RowPrints::new(&index),
            index,
            cache,
            use_cache,
            in_memory,
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn file_id(&self) -> u64 {
        self.file_id
    }
    /// This open file's key in the block cache.
    pub fn reader_id(&self) -> u64 {
        self.reader_id
    }
    pub fn meta(&self) -> &FileMeta {
        &self.meta
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn block_count(&self) -> usize {
        self.index.len()
    }

    /// False only when the bloom filter proves the row is absent.
    pub fn may_contain_row(&self, row: &[u8]) -> bool {
        match (&self.bloom, self.bloom_type) {
            (Some(b), BloomType::Row) => b.may_contain(hash(row)),
            (Some(b), BloomType::RowPrefix) => {
                b.may_contain(hash(&row[..row.len().min(self.bloom_prefix_len)]))
            }
            _ => true,
        }
    }

    /// False only when the bloom filter proves the (row, qualifier) absent.
    pub fn may_contain_column(&self, row: &[u8], qualifier: &[u8]) -> bool {
        match (&self.bloom, self.bloom_type) {
            (Some(_), BloomType::Row | BloomType::RowPrefix) => self.may_contain_row(row),
            (Some(b), BloomType::RowCol) => b.may_contain(hash(&rowcol_key(row, qualifier))),
            _ => true,
        }
    }

    /// False only when a ROWPREFIX bloom proves that no row in
    /// `[start, stop)` is in the file: every such row shares the bloom's
    /// prefix, and the prefix is absent.
    pub fn may_contain_rows(&self, start: Option<&[u8]>, stop: Option<&[u8]>) -> bool {
        let (Some(b), BloomType::RowPrefix) = (&self.bloom, self.bloom_type) else {
            return true;
        };
        let (Some(start), Some(stop)) = (start, stop) else {
            return true;
        };
        let Some(prefix) = start.get(..self.bloom_prefix_len) else {
            return true;
        };
        let within =
            crate::codec::prefix_successor(prefix).is_some_and(|end| stop <= end.as_slice());
        !within || b.may_contain(hash(prefix))
    }

    /// The first row of the middle data block: where a region split puts
    /// its boundary (HBase's midkey).
    pub fn middle_row(&self) -> Option<Vec<u8>> {
        let e = self.index.get(self.index.len() / 2)?;
        Some(crate::cell::row_of(&e.first_key).to_vec())
    }

    /// Whether any key of the file can fall in rows [start, stop).
    pub fn overlaps_rows(&self, start: Option<&[u8]>, stop: Option<&[u8]>) -> bool {
        if self.meta.entries == 0 {
            return false;
        }
        let first_row = crate::cell::row_of(&self.meta.first_key);
        let last_row = crate::cell::row_of(&self.meta.last_key);
        start.is_none_or(|s| last_row >= s) && stop.is_none_or(|s| first_row < s)
    }

    pub(crate) fn block(&self, i: usize) -> Result<Arc<Block>, SstError> {
        self.block_with(i, true, None)
    }

    /// Reads data block `i`, using the cache when the family allows;
    /// `fill_cache: false` still uses cached blocks but does not add new ones
    /// (compactions read everything once and would evict the hot set).
    /// With a projection, a time-series block is decoded (and cached) with
    /// only the projection's columns; other blocks are the whole block.
    fn block_with(
        &self,
        i: usize,
        fill_cache: bool,
        projection: Option<&Projection>,
    ) -> Result<Arc<Block>, SstError> {
        let entry = &self.index[i];
        let whole = (self.reader_id, entry.offset, 0);
        if self.use_cache {
            if let Some(p) = projection
                && let Some(b) = self.cache.get(&(self.reader_id, entry.offset, p.id()))
            {
                return Ok(b);
            }
            // A whole block serves a projected read unless a projected
            // decode of it would be smaller.
            if let Some(b) = self.cache.get(&whole)
                && (projection.is_none() || !b.from_time_series)
            {
                return Ok(b);
            }
        }
        let mut buf = vec![0u8; entry.size as usize];
        self.file
            .read_exact_at(&mut buf, entry.offset)
            .map_err(|e| SstError::io(&self.path, "read data block", e))?;
        let (body, time_series) = unframe_projected(&buf, MAX_BLOCK, projection)
            .map_err(|e| SstError::decode(&self.path, entry.offset, e))?;
        let mut block =
            Block::parse(body).map_err(|e| SstError::corrupt(&self.path, entry.offset, e.what))?;
        block.from_time_series = time_series;
        let block = Arc::new(block);
        if self.use_cache && fill_cache {
            let key = match projection {
                Some(p) if time_series => (self.reader_id, entry.offset, p.id()),
                _ => whole,
            };
            self.cache.insert(key, block.clone(), self.in_memory);
        }
        Ok(block)
    }

    /// The first data block that may hold `row` or a row after it: the
    /// last whose first key is below the row's first key, which is the
    /// last whose first row is below `row` (compared as rows, without a
    /// key made or parsed: a read of each series' newest point does this
    /// once a series and file).
    pub(crate) fn first_block_for_row(&self, row: &[u8]) -> usize {
        let below = |i: usize| crate::cell::row_of(&self.index[i].first_key) < row;
        let Some(print) = self.first_rows.of(row) else {
            // Not of the shared prefix: every first row is on one side.
            return if row < self.first_rows.shared.as_slice() {
                0
            } else {
                self.index.len().saturating_sub(1)
            };
        };
        let prints = &self.first_rows.prints;
        crate::codec::partition_index(prints.len(), |i| match prints[i].cmp(&print) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => below(i),
        })
        .saturating_sub(1)
    }

    /// Whether data block `i` exists and may hold a row before `stop`.
    pub(crate) fn block_starts_before(&self, i: usize, stop: Option<&[u8]>) -> bool {
        self.index
            .get(i)
            .is_some_and(|e| stop.is_none_or(|s| crate::cell::row_of(&e.first_key) < s))
    }

    /// The row of data block `i`'s first key.
    pub(crate) fn block_first_row(&self, i: usize) -> Option<&[u8]> {
        self.index.get(i).map(|e| crate::cell::row_of(&e.first_key))
    }

    /// Adds what `select` takes of data block `i` to `out`, and says how
    /// the read ended. A time-series block decodes straight into `out`,
    /// stopping after `max_rows` rows (and is not cached: its payload is
    /// cheaper to decode again than the body it would make is to keep);
    /// a standard or cached block is read entry by entry, whole. For
    /// files without delete markers: a marker is reported as damage.
    pub(crate) fn read_columns(
        &self,
        i: usize,
        select: &ColumnSelect<'_>,
        max_rows: Option<usize>,
        out: &mut ColumnRows,
    ) -> Result<BlockRead, SstError> {
        let entry = &self.index[i];
        let whole = (self.reader_id, entry.offset, 0);
        let cached = self.use_cache.then(|| self.cache.get(&whole)).flatten();
        let block = match cached {
            Some(block) => block,
            None => {
                let buf = self.block_bytes(i)?;
                let payload = unframe_payload(&buf, MAX_BLOCK)
                    .map_err(|e| SstError::decode(&self.path, entry.offset, e))?;
                let body = match payload {
                    Payload::TimeSeries(payload) => {
                        return ts_block::decode_columns(
                            &payload, MAX_BLOCK, select, max_rows, out,
                        )
                        .map_err(|e| SstError::corrupt(&self.path, entry.offset, e.what));
                    }
                    Payload::Standard(body) => body.into_owned(),
                };
                let block = Arc::new(
                    Block::parse(body)
                        .map_err(|e| SstError::corrupt(&self.path, entry.offset, e.what))?,
                );
                if self.use_cache {
                    self.cache.insert(whole, block.clone(), self.in_memory);
                }
                block
            }
        };
        columns_of_block(block, select, out)
            .map_err(|e| SstError::corrupt(&self.path, entry.offset, e.what))
    }

    /// Decodes what `select` takes of data block `i` into `out` by column
    /// (see [`ts_block::decode_runs`]) where it can; where it cannot,
    /// [`Self::read_columns`] reads the block.
    ///
    /// The block's frame comes from `ahead`, which reads it with the
    /// blocks after it that start before `select.stop`, up to
    /// [`READ_AHEAD_BYTES`].
    pub(crate) fn read_runs(
        &self,
        i: usize,
        select: &ColumnSelect<'_>,
        answers: Option<&dyn Fn(u64) -> bool>,
        out: &mut ColumnRuns,
        ahead: &mut ReadAhead,
    ) -> Result<RunRead, SstError> {
        let entry = &self.index[i];
        if self.use_cache && self.cache.get(&(self.reader_id, entry.offset, 0)).is_some() {
            return Ok(RunRead::Rows);
        }
        let buf = self.frame_ahead(i, select.stop, ahead)?;
        let payload = unframe_payload(buf, MAX_BLOCK)
            .map_err(|e| SstError::decode(&self.path, entry.offset, e))?;
        match payload {
            Payload::TimeSeries(payload) => Ok(
                match ts_block::decode_runs(&payload, MAX_BLOCK, select, answers, out)
                    .map_err(|e| SstError::corrupt(&self.path, entry.offset, e.what))?
                {
                    Some(read) => RunRead::Runs(read),
                    None => RunRead::Rows,
                },
            ),
            Payload::Standard(_) => Ok(RunRead::Standard),
        }
    }

    /// Data block `i` for a cursor that walks it once and leaves the cache
    /// as it is (a compaction): a time-series block decoded straight into
    /// its entries, any other block (or one cached) as a block.
    /// `spare` is the buffer the time-series entries are decoded into (the
    /// last block's, which a walk is done with: a block's keys are some
    /// hundred kilobytes, grown again for every block without it).
    fn block_once(&self, i: usize, spare: Entries) -> Result<BlockCursor, SstError> {
        let entry = &self.index[i];
        if self.use_cache
            && let Some(block) = self.cache.get(&(self.reader_id, entry.offset, 0))
        {
            return Ok(BlockCursor::Body(BlockIter::new(block)));
        }
        let buf = self.block_bytes(i)?;
        self.block_of_frame(i, &buf, spare)
    }

    /// [`Self::block_once`] of block `i`'s frame, read already.
    fn block_of_frame(
        &self,
        i: usize,
        buf: &[u8],
        spare: Entries,
    ) -> Result<BlockCursor, SstError> {
        let entry = &self.index[i];
        let corrupt =
            |e: crate::codec::DecodeError| SstError::corrupt(&self.path, entry.offset, e.what);
        match unframe_payload(buf, MAX_BLOCK)
            .map_err(|e| SstError::decode(&self.path, entry.offset, e))?
        {
            Payload::TimeSeries(payload) => {
                let mut entries = spare;
                if ts_block::decode_entries(&payload, MAX_BLOCK, &mut entries).map_err(corrupt)? {
                    return Ok(BlockCursor::Entries(EntryCursor::new(entries)));
                }
                // Whole keys past the limit: the body, which the writer
                // kept within the block size, holds them prefix-encoded.
                let block = self.block_with(i, false, None)?;
                Ok(BlockCursor::Body(BlockIter::new(block)))
            }
            Payload::Standard(body) => {
                let block = Block::parse(body.into_owned()).map_err(corrupt)?;
                Ok(BlockCursor::Body(BlockIter::new(Arc::new(block))))
            }
        }
    }

    /// Data block `i`'s frame, from `ahead` when it holds it, else read
    /// into it with the blocks after it that start before `stop`.
    fn frame_ahead<'b>(
        &self,
        i: usize,
        stop: Option<&[u8]>,
        ahead: &'b mut ReadAhead,
    ) -> Result<&'b [u8], SstError> {
        let entry = &self.index[i];
        let (from, to) = (entry.offset, entry.offset + entry.size);
        if !ahead.holds(self.reader_id, from, to) {
            let mut end = to;
            for j in i + 1..self.index.len() {
                let next = &self.index[j];
                let next_end = next.offset + next.size;
                if next.offset < end
                    || next_end - from > READ_AHEAD_BYTES
                    || !self.block_starts_before(j, stop)
                {
                    break;
                }
                end = next_end;
            }
            let len = (end - from) as usize;
            if ahead.bytes.len() < len {
                ahead.bytes.resize(len, 0);
            }
            ahead.reader_id = None;
            self.file
                .read_exact_at(&mut ahead.bytes[..len], from)
                .map_err(|e| SstError::io(&self.path, "read data blocks", e))?;
            (ahead.reader_id, ahead.offset, ahead.len) = (Some(self.reader_id), from, len);
        }
        let at = (from - ahead.offset) as usize;
        Ok(&ahead.bytes[at..at + entry.size as usize])
    }

    /// Data block `i` as the file holds it (framed).
    fn block_bytes(&self, i: usize) -> Result<Vec<u8>, SstError> {
        let entry = &self.index[i];
        let mut buf = vec![0u8; entry.size as usize];
        self.file
            .read_exact_at(&mut buf, entry.offset)
            .map_err(|e| SstError::io(&self.path, "read data block", e))?;
        Ok(buf)
    }

    /// Index of the block that may hold the first key >= `target`.
    fn block_for(&self, target: &[u8]) -> usize {
        // Last block whose first key is < target; the key may also be the
        // first of the next block, which the iterator reaches by moving on.
        let n = self
            .index
            .partition_point(|e| compare_keys(&e.first_key, target) == Ordering::Less);
        n.saturating_sub(1)
    }

    pub fn iter(self: &Arc<Self>) -> SstIter {
        self.iter_projected(None)
    }

    /// A cursor that, in time-series blocks, sees only the projection's
    /// columns and the delete markers (see [`Projection`]).
    pub fn iter_projected(self: &Arc<Self>, projection: Option<Arc<Projection>>) -> SstIter {
        SstIter {
            reader: self.clone(),
            block_idx: 0,
            it: None,
            fill_cache: true,
            projection,
        }
    }

    /// A cursor that does not add the blocks it reads to the cache.
    pub fn iter_uncached(self: &Arc<Self>) -> SstIter {
        SstIter {
            fill_cache: false,
            ..self.iter()
        }
    }

    /// The row of the last key strictly before the first key of `row`
    /// (i.e. the greatest row < `row`); with `None`, the last row.
    pub fn last_row_before(&self, row: Option<&[u8]>) -> Result<Option<Vec<u8>>, SstError> {
        if self.meta.entries == 0 {
            return Ok(None);
        }
        let target = match row {
            None => return Ok(Some(crate::cell::row_of(&self.meta.last_key).to_vec())),
            Some(r) => first_key_of_row(r),
        };
        let mut i = self
            .index
            .partition_point(|e| compare_keys(&e.first_key, &target) == Ordering::Less);
        while i > 0 {
            i -= 1;
            let block = self.block(i)?;
            let mut it = BlockIter::new(block);
            let base = self.index[i].offset;
            if let Some(k) = it
                .last_key_before(&target)
                .map_err(|e| SstError::corrupt(&self.path, base, e.what))?
            {
                return Ok(Some(crate::cell::row_of(&k).to_vec()));
            }
        }
        Ok(None)
    }

    /// Reads every block and checks everything a read relies on: each
    /// block's checksum and encoding, keys well formed and strictly
    /// increasing across the file, each block starting at its index key,
    /// the meta block's counts, time range and first/last keys, and the
    /// bloom filter answering "maybe" for every key the file holds (a miss
    /// would hide data from reads). Returns the entries checked.
    pub fn check_all(&self) -> Result<u64, SstError> {
        Ok(self
            .check_all_while(&|| true)?
            .expect("a check that always goes on finishes"))
    }

    /// [`SstReader::check_all`], asking `go_on` before each block: `None`
    /// when it answered false (a server stopping does not wait for the
    /// scrub to finish a file of gigabytes).
    pub fn check_all_while(&self, go_on: &dyn Fn() -> bool) -> Result<Option<u64>, SstError> {
        let mut n = 0u64;
        let mut deletes = 0u64;
        let (mut min_ts, mut max_ts) = (u64::MAX, 0u64);
        let mut first: Option<Vec<u8>> = None;
        let mut last: Vec<u8> = Vec::new();
        // The row whose bloom answer was checked last: a row's cells all
        // get the same answer, and hashing each took a third of the scrub.
        let mut bloom_row: Vec<u8> = Vec::new();
        for i in 0..self.index.len() {
            if !go_on() {
                return Ok(None);
            }
            let block = self.block_with(i, false, None)?;
            let base = self.index[i].offset;
            let bad = |what| SstError::corrupt(&self.path, base, what);
            let mut it = BlockIter::new(block);
            it.seek_first().map_err(|e| bad(e.what))?;
            if !it.valid() {
                return Err(bad("data block holds no entry"));
            }
            if it.key() != self.index[i].first_key.as_slice() {
                return Err(bad("block does not start at its index key"));
            }
            while it.valid() {
                let Some(k) = crate::cell::KeyRef::parse(it.key()) else {
                    return Err(bad("malformed cell key"));
                };
                if n > 0 && compare_keys(&last, it.key()) != Ordering::Less {
                    return Err(bad("keys out of order"));
                }
                let bloom_holds = match self.bloom_type {
                    BloomType::None => true,
                    BloomType::Row | BloomType::RowPrefix => {
                        let same_row = n > 0 && bloom_row.as_slice() == k.row;
                        if !same_row {
                            bloom_row.clear();
                            bloom_row.extend_from_slice(k.row);
                        }
                        same_row || self.may_contain_row(k.row)
                    }
                    BloomType::RowCol => self.may_contain_column(k.row, k.qualifier),
                };
                if !bloom_holds {
                    return Err(bad("bloom filter misses a key the file holds"));
                }
                if k.kind != crate::cell::CellKind::Put {
                    deletes += 1;
                }
                min_ts = min_ts.min(k.timestamp);
                max_ts = max_ts.max(k.timestamp);
                if first.is_none() {
                    first = Some(it.key().to_vec());
                }
                last.clear();
                last.extend_from_slice(it.key());
                n += 1;
                it.advance().map_err(|e| bad(e.what))?;
            }
        }
        let meta_wrong = |what| SstError::corrupt(&self.path, 0, what);
        if n != self.meta.entries {
            return Err(meta_wrong("entry count disagrees with meta"));
        }
        if deletes != self.meta.delete_markers {
            return Err(meta_wrong("delete marker count disagrees with meta"));
        }
        if n > 0 {
            if (min_ts, max_ts) != (self.meta.min_ts, self.meta.max_ts) {
                return Err(meta_wrong("time range disagrees with meta"));
            }
            if first.as_deref() != Some(self.meta.first_key.as_slice())
                || last != self.meta.last_key
            {
                return Err(meta_wrong("first or last key disagrees with meta"));
            }
        }
        Ok(Some(n))
    }
}

fn decode_index(body: &[u8], data_end: u64) -> Result<Vec<IndexEntry>, crate::codec::DecodeError> {
    let mut r = Reader::new(body);
    let n = r.len(body.len(), "index entry count")?;
    let mut out: Vec<IndexEntry> = Vec::with_capacity(n);
    let mut expect_at = 0u64;
    for _ in 0..n {
        let at = r.pos();
        let first_key = r.len_prefixed(body.len(), "index key")?.to_vec();
        let offset = r.varint("block offset")?;
        let size = r.varint("block size")?;
        let bad = |what| crate::codec::DecodeError { offset: at, what };
        if offset != expect_at {
            return Err(bad("data blocks not contiguous"));
        }
        if size < FRAME_OVERHEAD as u64 || offset + size > data_end {
            return Err(bad("block extent out of range"));
        }
        if crate::cell::KeyRef::parse(&first_key).is_none() {
            return Err(bad("malformed index key"));
        }
        if let Some(prev) = out.last()
            && compare_keys(&prev.first_key, &first_key) != Ordering::Less
        {
            return Err(bad("index keys out of order"));
        }
        expect_at = offset + size;
        out.push(IndexEntry {
            first_key,
            offset,
            size,
        });
    }
    if expect_at != data_end {
        return Err(crate::codec::DecodeError {
            offset: r.pos(),
            what: "index does not cover the data blocks",
        });
    }
    Ok(out)
}

/// [`SstReader::read_columns`] of a block in the standard encoding.
fn columns_of_block(
    block: Arc<Block>,
    select: &ColumnSelect<'_>,
    out: &mut ColumnRows,
) -> Result<BlockRead, crate::codec::DecodeError> {
    let mut it = BlockIter::new(block);
    it.seek(&first_key_of_row(select.start))?;
    while it.valid() {
        let Some(k) = KeyRef::parse(it.key()) else {
            return Err(crate::codec::DecodeError {
                offset: 0,
                what: "malformed key",
            });
        };
        if select.stop.is_some_and(|stop| k.row >= stop) {
            return Ok(BlockRead::Stop);
        }
        if let Some(column) = select.column_of(k.family, k.qualifier) {
            if k.kind != CellKind::Put {
                return Err(crate::codec::DecodeError {
                    offset: 0,
                    what: "delete marker in a file that counts none",
                });
            }
            out.push(
                k.row,
                column,
                k.timestamp,
                it.ttl_ms(),
                Value::decode(it.value()),
            );
        }
        it.advance()?;
    }
    Ok(BlockRead::End)
}

/// A forward cursor over a store file.
#[derive(Debug)]
pub struct SstIter {
    reader: Arc<SstReader>,
    block_idx: usize,
    it: Option<BlockCursor>,
    fill_cache: bool,
    projection: Option<Arc<Projection>>,
}

/// A cursor over one data block: a decoded body, or (for a walk that
/// leaves the cache alone) a time-series block's entries.
#[derive(Debug)]
enum BlockCursor {
    Body(BlockIter),
    Entries(EntryCursor),
}

impl BlockCursor {
    fn seek_first(&mut self) -> Result<(), crate::codec::DecodeError> {
        match self {
            BlockCursor::Body(it) => it.seek_first(),
            BlockCursor::Entries(it) => {
                it.seek(&[]);
                Ok(())
            }
        }
    }

    fn seek(&mut self, target: &[u8]) -> Result<(), crate::codec::DecodeError> {
        match self {
            BlockCursor::Body(it) => it.seek(target),
            BlockCursor::Entries(it) => {
                it.seek(target);
                Ok(())
            }
        }
    }

    fn skip_to(&mut self, target: &[u8]) -> Result<(), crate::codec::DecodeError> {
        match self {
            BlockCursor::Body(it) => it.skip_to(target),
            BlockCursor::Entries(it) => {
                it.skip_to(target);
                Ok(())
            }
        }
    }

    fn advance(&mut self) -> Result<(), crate::codec::DecodeError> {
        match self {
            BlockCursor::Body(it) => it.advance(),
            BlockCursor::Entries(it) => {
                it.advance();
                Ok(())
            }
        }
    }

    fn valid(&self) -> bool {
        match self {
            BlockCursor::Body(it) => it.valid(),
            BlockCursor::Entries(it) => it.valid(),
        }
    }

    fn key(&self) -> &[u8] {
        match self {
            BlockCursor::Body(it) => it.key(),
            BlockCursor::Entries(it) => it.key(),
        }
    }

    fn value(&self) -> &[u8] {
        match self {
            BlockCursor::Body(it) => it.value(),
            BlockCursor::Entries(it) => it.value(),
        }
    }

    fn ttl_ms(&self) -> Option<u64> {
        match self {
            BlockCursor::Body(it) => it.ttl_ms(),
            BlockCursor::Entries(it) => it.ttl_ms(),
        }
    }

    fn value_bytes(&self) -> bytes::Bytes {
        match self {
            BlockCursor::Body(it) => it.value_bytes(),
            BlockCursor::Entries(it) => bytes::Bytes::copy_from_slice(it.value()),
        }
    }
}

impl SstIter {
    pub fn reader(&self) -> &Arc<SstReader> {
        &self.reader
    }

    fn corrupt(&self, e: crate::codec::DecodeError) -> SstError {
        let base = self
            .reader
            .index
            .get(self.block_idx)
            .map_or(0, |e| e.offset);
        SstError::corrupt(&self.reader.path, base, e.what)
    }

    fn load(&mut self, i: usize) -> Result<(), SstError> {
        self.block_idx = i;
        if i >= self.reader.index.len() {
            self.it = None;
            return Ok(());
        }
        let mut it = self.open_block(i)?;
        it.seek_first().map_err(|e| self.corrupt(e))?;
        self.it = Some(it);
        Ok(())
    }

    fn open_block(&mut self, i: usize) -> Result<BlockCursor, SstError> {
        if !self.fill_cache && self.projection.is_none() {
            let spare = match self.it.take() {
                Some(BlockCursor::Entries(cursor)) => cursor.into_entries(),
                _ => Entries::default(),
            };
            return self.reader.block_once(i, spare);
        }
        let block = self
            .reader
            .block_with(i, self.fill_cache, self.projection.as_deref())?;
        Ok(BlockCursor::Body(BlockIter::new(block)))
    }

    /// Moves to the next block while the current one is used up.
    fn settle(&mut self) -> Result<(), SstError> {
        while self.it.as_ref().is_some_and(|it| !it.valid()) {
            self.load(self.block_idx + 1)?;
        }
        Ok(())
    }

    pub fn seek_to_first(&mut self) -> Result<(), SstError> {
        self.load(0)?;
        self.settle()
    }

    /// Positions at the first key >= `target`.
    pub fn seek(&mut self, target: &[u8]) -> Result<(), SstError> {
        if self.reader.index.is_empty() {
            self.it = None;
            return Ok(());
        }
        let i = self.reader.block_for(target);
        self.block_idx = i;
        let mut it = self.open_block(i)?;
        it.seek(target).map_err(|e| self.corrupt(e))?;
        self.it = Some(it);
        self.settle()
    }

    /// Moves forward to the first key >= `target` (which must not be
    /// before the current key): by stepping within the current block, by a
    /// seek when the target is in a later one.
    pub fn skip_to(&mut self, target: &[u8]) -> Result<(), SstError> {
        let later_block = self
            .reader
            .index
            .get(self.block_idx + 1)
            .is_some_and(|next| compare_keys(&next.first_key, target) != Ordering::Greater);
        if later_block {
            return self.seek(target);
        }
        if let Some(it) = self.it.as_mut()
            && let Err(e) = it.skip_to(target)
        {
            return Err(self.corrupt(e));
        }
        self.settle()
    }

    pub fn valid(&self) -> bool {
        self.it.as_ref().is_some_and(|it| it.valid())
    }

    pub fn key(&self) -> &[u8] {
        self.it.as_ref().map_or(&[], |it| it.key())
    }
    pub fn value(&self) -> &[u8] {
        self.it.as_ref().map_or(&[], |it| it.value())
    }
    pub fn ttl_ms(&self) -> Option<u64> {
        self.it.as_ref().and_then(|it| it.ttl_ms())
    }
    pub fn value_bytes(&self) -> bytes::Bytes {
        self.it
            .as_ref()
            .map_or_else(bytes::Bytes::new, |it| it.value_bytes())
    }

    pub fn advance(&mut self) -> Result<(), SstError> {
        if let Some(it) = self.it.as_mut() {
            if let Err(e) = it.advance() {
                return Err(self.corrupt(e));
            }
        }
        self.settle()
    }
}

/// A compaction's walk over one store file, block by block: each block is
/// either taken whole ([`BlockWalk::take_block`]) or opened and read entry
/// by entry, without the block cache.
pub struct BlockWalk {
    reader: Arc<SstReader>,
    /// The first block neither taken nor opened.
    next: usize,
    open: Option<BlockCursor>,
    /// The next block's frame, read by a `take_block` that left it.
    read: Option<Vec<u8>>,
    /// Buffers of the last block read entry by entry, for the next.
    spare: Entries,
}

impl BlockWalk {
    pub fn new(reader: Arc<SstReader>) -> Self {
        BlockWalk {
            reader,
            next: 0,
            open: None,
            read: None,
            spare: Entries::default(),
        }
    }

    pub fn reader(&self) -> &Arc<SstReader> {
        &self.reader
    }

    /// The key the walk is at: the open block's entry, else the first key
    /// of the next block; `None` past the file's end.
    pub fn key(&self) -> Option<&[u8]> {
        match &self.open {
            Some(it) => Some(it.key()),
            None => self.reader.index.get(self.next).map(|e| &e.first_key[..]),
        }
    }

    /// Whether the walk is inside a block opened entry by entry.
    pub fn in_block(&self) -> bool {
        self.open.is_some()
    }

    /// The next block as the file holds it, and the walk past it, when
    /// every key of it is below `bound` (or, where the bound's flag says
    /// so, at most the bound: equal keys of a newer file go first); with
    /// no bound, whenever it can. `None` (and the walk stays) when it is
    /// not below, or not a time-series block, whose payload says how many
    /// entries it holds and, from its rows alone, its last key. The
    /// checksum is checked: a compaction never carries damage on.
    pub fn take_block(
        &mut self,
        bound: Option<(&[u8], bool)>,
    ) -> Result<Option<WholeBlock>, SstError> {
        let i = self.next;
        let Some(entry) = self.reader.index.get(i) else {
            return Ok(None);
        };
        let frame = match self.read.take() {
            Some(frame) => frame,
            None => self.reader.block_bytes(i)?,
        };
        let damaged = |e| SstError::decode(&self.reader.path, entry.offset, e);
        let (entries, last_key, payload_len) = match unframe_payload(&frame, MAX_BLOCK) {
            Err(e) => return Err(damaged(e)),
            Ok(Payload::Standard(_)) => (None, Vec::new(), 0),
            Ok(Payload::TimeSeries(payload)) => (
                Some(ts_block::entry_count(&payload).map_err(damaged)?),
                ts_block::last_key(&payload, MAX_BLOCK).map_err(damaged)?,
                payload.len() as u64,
            ),
        };
        let below =
            bound.is_none_or(
                |(bound, tie_is_below)| match compare_keys(&last_key, bound) {
                    Ordering::Less => true,
                    Ordering::Equal => tie_is_below,
                    Ordering::Greater => false,
                },
            );
        let Some(entries) = entries.filter(|_| below) else {
            self.read = Some(frame);
            return Ok(None);
        };
        let block = WholeBlock {
            first_key: entry.first_key.clone(),
            last_key,
            entries,
            payload_len,
            frame,
        };
        self.next += 1;
        Ok(Some(block))
    }

    /// Opens the next block to read it entry by entry.
    pub fn open_block(&mut self) -> Result<(), SstError> {
        let i = self.next;
        if i >= self.reader.index.len() {
            return Ok(());
        }
        let spare = std::mem::take(&mut self.spare);
        let mut it = match self.read.take() {
            Some(frame) => self.reader.block_of_frame(i, &frame, spare)?,
            None => self.reader.block_once(i, spare)?,
        };
        it.seek_first().map_err(|e| {
            SstError::corrupt(&self.reader.path, self.reader.index[i].offset, e.what)
        })?;
        self.next += 1;
        self.open = Some(it);
        self.close_if_done();
        Ok(())
    }

    /// The open block's entry: value and TTL (its key is [`Self::key`]).
    pub fn value(&self) -> &[u8] {
        self.open.as_ref().map_or(&[], |it| it.value())
    }

    pub fn ttl_ms(&self) -> Option<u64> {
        self.open.as_ref().and_then(|it| it.ttl_ms())
    }

    /// The open block's next entry; past its last the walk is between
    /// blocks again.
    pub fn advance(&mut self) -> Result<(), SstError> {
        if let Some(it) = self.open.as_mut()
            && let Err(e) = it.advance()
        {
            let offset = self.reader.index[self.next - 1].offset;
            return Err(SstError::corrupt(&self.reader.path, offset, e.what));
        }
        self.close_if_done();
        Ok(())
    }

    fn close_if_done(&mut self) {
        if self.open.as_ref().is_some_and(|it| !it.valid()) {
            if let Some(BlockCursor::Entries(cursor)) = self.open.take() {
                self.spare = cursor.into_entries();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{CellKind, encode_key};
    use crate::region::sst::writer::SstWriter;
    use crate::schema::FamilyDescriptor;

    /// The index search by first-row prints finds the block a search of
    /// the first rows themselves finds, for rows of the file, rows
    /// between them, rows shorter or longer than the print window, and
    /// rows outside the prefix the file's rows share.
    #[test]
    fn first_block_for_a_row_is_the_one_the_first_rows_say() {
        let dir = tempfile::tempdir().expect("tempdir");
        let family = FamilyDescriptor::new("f").block_size(1024);
        let mut next = crate::codec::xorshift(0x9e37_79b9_7f4a_7c15u64);
        // Series of a few lengths under one shared prefix, each with
        // points: many blocks share a series' print.
        let mut rows: Vec<Vec<u8>> = Vec::new();
        for series in 0..40u64 {
            let mut head = b"\x03metric".to_vec();
            head.extend((0..(series % 7)).map(|i| (series * 31 + i) as u8));
            for t in 0..(next() % 60) {
                let mut row = head.clone();
                row.extend_from_slice(&(u64::MAX - t).to_be_bytes());
                rows.push(row);
            }
            rows.push(head);
        }
        rows.sort();
        rows.dedup();
        let mut w = SstWriter::create(dir.path(), 1, &family, 0).expect("writer");
        for row in &rows {
            for q in [&b"a"[..], b"b"] {
                let key = encode_key(row, b"f", q, 7, CellKind::Put, false);
                w.add(&key, None, b"0123456789abcdef").expect("add");
            }
        }
        let (path, _, _) = w.finish(1).expect("finish");
        let reader =
            SstReader::open(&path, 1, BlockCache::new(1 << 20), false, false).expect("open");
        assert!(reader.block_count() > 20, "{} blocks", reader.block_count());
        let expected = |row: &[u8]| {
            (0..reader.block_count())
                .filter(|&i| reader.block_first_row(i).is_some_and(|r| r < row))
                .count()
                .saturating_sub(1)
        };
        let mut probes: Vec<Vec<u8>> = rows.clone();
        probes.extend([
            Vec::new(),
            b"\x03".to_vec(),
            b"\x02zzz".to_vec(),
            b"\x04".to_vec(),
            b"\x03metric".to_vec(),
            b"\x03metriz".to_vec(),
        ]);
        for _ in 0..2000 {
            let mut row = rows[(next() % rows.len() as u64) as usize].clone();
            match next() % 4 {
                0 => row.truncate((next() % (row.len() as u64 + 1)) as usize),
                1 => row.push(next() as u8),
                2 => {
                    let at = (next() % row.len() as u64) as usize;
                    row[at] = row[at].wrapping_add(1);
                }
                _ => {
                    let at = (next() % row.len() as u64) as usize;
                    row[at] = row[at].wrapping_sub(1);
                }
            }
            probes.push(row);
        }
        for row in &probes {
            assert_eq!(reader.first_block_for_row(row), expected(row), "{row:?}");
        }
    }

    /// A time-series file of 60 series of 1 to 90 points of two columns
    /// (series of several lengths), in blocks of `block_size`.
    fn series_file(dir: &std::path::Path, block_size: usize) -> Arc<SstReader> {
        let mut family = FamilyDescriptor::new("f").block_size(block_size);
        family.data_block_encoding = crate::schema::DataBlockEncoding::TimeSeries;
        let mut w = SstWriter::create(dir, 1, &family, 0).expect("writer");
        let head = |series: u64| {
            format!(
                "series-{}",
                "x".repeat((series % 5) as usize) + &series.to_string()
            )
        };
        let mut keys = Vec::new();
        for n in 0..60u64 {
            // Series from a handful of points to several blocks' worth.
            for t in 0..(1 + (n * 37) % 90) {
                let mut row = head(n).into_bytes();
                row.extend_from_slice(&(u64::MAX - t).to_be_bytes());
                for q in [&b"idle"[..], b"user"] {
                    keys.push((encode_key(&row, b"f", q, t, CellKind::Put, false), t));
                }
            }
        }
        keys.sort_by(|a, b| crate::cell::compare_keys(&a.0, &b.0));
        for (key, t) in &keys {
            let value = crate::value::Value::Float(*t as f64 / 4.0).encode();
            w.add(key, None, &value).expect("add");
        }
        let (path, _, _) = w.finish(1).expect("finish");
        SstReader::open(&path, 1, BlockCache::new(1 << 20), false, false).expect("open")
    }

    /// Blocks read ahead give each block as a read of it alone does,
    /// whichever block of whichever file was read before; a read ahead
    /// stops at the blocks past the read's stop and at
    /// [`READ_AHEAD_BYTES`].
    #[test]
    fn blocks_read_ahead_are_the_blocks_read_alone() {
        let (dir_small, dir_large) = (tempfile::tempdir(), tempfile::tempdir());
        let small = series_file(dir_small.expect("tempdir").path(), 1024);
        let large = series_file(dir_large.expect("tempdir").path(), 4096);
        let qualifiers = [b"idle".to_vec(), b"user".to_vec()];
        let runs_of = |reader: &SstReader, i: usize, stop: Option<&[u8]>, ahead: &mut ReadAhead| {
            let select = ColumnSelect {
                family: b"f",
                qualifiers: &qualifiers,
                start: b"",
                stop,
            };
            let mut runs = ColumnRuns::default();
            runs.clear(qualifiers.len());
            let read = reader
                .read_runs(i, &select, None, &mut runs, ahead)
                .expect("reads");
            let mut rows = Vec::new();
            runs.each_row(&mut |key, cells| {
                rows.push((key.to_vec(), cells.to_vec()));
                true
            });
            (read, rows)
        };
        let mut ahead = ReadAhead::default();
        let mut seed = 11u64;
        for _ in 0..400 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let reader = if seed >> 63 == 0 { &small } else { &large };
            let i = (seed >> 20) as usize % reader.block_count();
            let stop_block = i + 1 + (seed >> 40) as usize % 4;
            let stop = reader.block_first_row(stop_block).map(<[u8]>::to_vec);
            let block = &reader.index[i];
            let held = ahead.holds(reader.reader_id, block.offset, block.offset + block.size);
            let alone = runs_of(reader, i, stop.as_deref(), &mut ReadAhead::default());
            let shared = runs_of(reader, i, stop.as_deref(), &mut ahead);
            assert_eq!(alone, shared, "block {i}");
            if !held {
                assert_eq!(ahead.offset, block.offset);
                let read_to = ahead.offset + ahead.len as u64;
                let past_stop = reader.index.get(stop_block).map(|e| e.offset + e.size);
                assert!(
                    past_stop.is_none_or(|end| read_to < end),
                    "read past the stop"
                );
                let before_stop = &reader.index[(stop_block - 1).min(reader.block_count() - 1)];
                assert_eq!(read_to, before_stop.offset + before_stop.size, "read ahead");
            }
        }
    }

    /// A cursor that leaves the cache alone reads time-series blocks
    /// straight into entries: it gives what a cursor through decoded
    /// bodies gives, from the start and after a seek to any key.
    #[test]
    fn uncached_cursors_read_what_cached_ones_do() {
        let dir = tempfile::tempdir().expect("tempdir");
        let reader = series_file(dir.path(), 2048);
        let walk = |mut it: SstIter| {
            let mut out = Vec::new();
            while it.valid() {
                out.push((
                    it.key().to_vec(),
                    it.value().to_vec(),
                    it.value_bytes().to_vec(),
                ));
                it.advance().expect("advance");
            }
            out
        };
        let mut cached = reader.iter();
        cached.seek_to_first().expect("first");
        let all = walk(cached);
        let mut uncached = reader.iter_uncached();
        uncached.seek_to_first().expect("first");
        assert_eq!(walk(uncached), all);
        assert!(all.len() > 1000, "{} entries", all.len());
        for (i, (key, _, _)) in all.iter().enumerate().step_by(37) {
            // The key itself, and a target just before or after it.
            let mut near = key.clone();
            *near.last_mut().expect("a key") ^= 1;
            for target in [key.clone(), near] {
                let mut it = reader.iter_uncached();
                it.seek(&target).expect("seek");
                let at = all.partition_point(|(k, _, _)| {
                    crate::cell::compare_keys(k, &target) == Ordering::Less
                });
                assert_eq!(walk(it), all[at..].to_vec(), "seek near entry {i}");
            }
        }
    }

    /// A compaction's walk takes a block whole only when its last key
    /// (read from its rows, wherever the next block starts) is below the
    /// bound it is given, or equal where ties go first; a block it
    /// leaves is then opened from the frame it read. Blocks taken whole
    /// and entries read one by one, written again, make a file that
    /// checks out and holds what the first did.
    #[test]
    fn a_walk_takes_a_block_whole_only_below_its_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let reader = series_file(dir.path(), 2048);
        let mut all = Vec::new();
        let mut it = reader.iter_uncached();
        it.seek_to_first().expect("first");
        while it.valid() {
            all.push((it.key().to_vec(), it.value().to_vec()));
            it.advance().expect("advance");
        }
        let starts: Vec<usize> = (0..reader.block_count())
            .map(|i| {
                all.iter()
                    .position(|(k, _)| *k == reader.index[i].first_key)
                    .expect("a block starts at an entry")
            })
            .chain([all.len()])
            .collect();
        assert!(starts.len() > 10, "{} blocks", starts.len() - 1);
        let out_dir = tempfile::tempdir().expect("tempdir");
        let mut family = FamilyDescriptor::new("f").block_size(2048);
        family.data_block_encoding = crate::schema::DataBlockEncoding::TimeSeries;
        family.bloom = BloomType::None;
        let mut w = SstWriter::create(out_dir.path(), 2, &family, 0).expect("writer");
        assert!(w.takes_whole_blocks());
        let mut walk = BlockWalk::new(reader.clone());
        for i in 0..reader.block_count() {
            let (first, last) = (&all[starts[i]].0, &all[starts[i + 1] - 1].0);
            assert_eq!(walk.key(), Some(&first[..]));
            assert!(
                walk.take_block(Some((last, false)))
                    .expect("read")
                    .is_none()
            );
            if i % 2 == 0 {
                let block = walk
                    .take_block(Some((last, true)))
                    .expect("read")
                    .expect("taken when ties go first");
                assert_eq!((&block.first_key, &block.last_key), (first, last));
                assert_eq!(block.entries as usize, starts[i + 1] - starts[i]);
                w.copy_block(&block, reader.meta()).expect("copy");
            } else {
                walk.open_block().expect("open");
                let mut n = 0;
                while walk.in_block() {
                    assert_eq!(walk.key(), Some(&all[starts[i] + n].0[..]));
                    w.add(walk.key().expect("a key"), walk.ttl_ms(), walk.value())
                        .expect("add");
                    walk.advance().expect("advance");
                    n += 1;
                }
                assert_eq!(n, starts[i + 1] - starts[i]);
            }
        }
        assert_eq!(walk.key(), None);
        let (path, meta, _) = w.finish(1).expect("finish");
        assert_eq!(meta.entries as usize, all.len());
        let copy = SstReader::open(&path, 2, BlockCache::new(1 << 20), false, false).expect("open");
        assert_eq!(copy.check_all().expect("checks out"), all.len() as u64);
        let mut it = copy.iter_uncached();
        it.seek_to_first().expect("first");
        for (key, value) in &all {
            assert_eq!((it.key(), it.value()), (&key[..], &value[..]));
            it.advance().expect("advance");
        }
        assert!(!it.valid());
    }

    /// A time-series block at least half full ends before a new series
    /// starts: in every block, a series that starts after the block's
    /// first entry starts in its first half (by the body size the writer
    /// counts), and blocks still fill up within a series.
    #[test]
    fn time_series_blocks_end_before_a_new_series_once_an_eighth_full() {
        use crate::region::sst::block::{BlockCells, BlockIter};
        let dir = tempfile::tempdir().expect("tempdir");
        let block_size = 2048;
        let reader = series_file(dir.path(), block_size);
        let series_of = |key: &[u8]| {
            let row = crate::cell::row_of(key);
            row[..row.len() - 8].to_vec()
        };
        let (mut cut_late, mut full_blocks) = (0, 0);
        for i in 0..reader.block_count() {
            let mut it = BlockIter::new(reader.block(i).expect("block"));
            it.seek_first().expect("first");
            let mut cells = BlockCells::default();
            let mut last_series: Option<Vec<u8>> = None;
            while it.valid() {
                let series = series_of(it.key());
                if last_series.as_ref().is_some_and(|s| *s != series)
                    && crate::region::sst::writer::SERIES_CUT * cells.size() >= block_size
                {
                    cut_late += 1;
                }
                cells.add(it.key(), it.ttl_ms(), it.value());
                last_series = Some(series);
                it.advance().expect("advance");
            }
            full_blocks += usize::from(cells.size() >= block_size);
        }
        assert_eq!(cut_late, 0, "a series started past a block's first eighth");
        // Every row in the bloom filter, every key in order, the index
        // and meta true.
        reader.check_all().expect("the file checks out");
        assert!(full_blocks > 10, "{full_blocks} full blocks");
    }
}
