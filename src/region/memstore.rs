//! The MemStore: a lock-free skiplist of recent edits that readers scan while
//! the writer inserts, plus the MVCC read point that makes a row's edits
//! visible all at once.
//!
//! Entry bytes (key ‖ value) are copied into large chunks owned by the
//! MemStore — HBase's MSLAB (MemStore-local allocation buffer) — so an insert
//! costs no allocation of its own, readers copy nothing, and a flushed
//! MemStore frees a few chunks instead of millions of small buffers.

use std::cmp::Ordering;
use std::collections::{BTreeMap, VecDeque};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};

use parking_lot::{Condvar, Mutex};

use crate::cell::{CellKind, EntryBatch, EntryRef, KIND_MASK, TTL_FLAG, compare_keys_after_row};
use crate::codec::{Reader, compare_bytes, put_len_prefixed, put_varint};
use crate::region::wal::record::SourceShard;

pub mod cursor;
mod row;
mod skiplist;
use row::{RawSlice, RowNode};
use skiplist::{Node, SkipList, Splice};

/// Chunk size of the MemStore-local allocation buffer.
const CHUNK: usize = 2 * 1024 * 1024;
/// Entries at least this big get a chunk of their own, so one large value
/// does not waste the rest of a shared chunk.
const OWN_CHUNK: usize = CHUNK / 8;

/// Alignment of skiplist nodes in the arena (and so of its chunks).
const NODE_ALIGN: usize = std::mem::align_of::<Node>();

/// Chunks of entry bytes, appended to and never moved.
#[derive(Debug, Default)]
struct Arena {
    inner: Mutex<ArenaChunks>,
}

#[derive(Debug, Default)]
struct ArenaChunks {
    /// Raw pointers (from [`Arena::new_chunk`]), so writing into the unused tail
    /// of a chunk never creates a `&mut` over bytes readers may be reading.
    chunks: Vec<(*mut u8, usize)>,
    /// The chunk being filled and how much of it is used.
    current: Option<(*mut u8, usize, usize)>,
    /// State of the generator of skiplist tower heights (0: not seeded).
    heights: u64,
    /// By a hash of a row without its last 8 bytes (a time-series row's
    /// series, its timestamp cut off): the series' first node in key order,
    /// its newest point. A series' next point goes right before it
    /// (`SkipList::insert_before`): with many series in a batch, each
    /// row's search across the MemStore was most of an insert's cost.
    series_heads:
        std::collections::HashMap<u64, *const Node, std::hash::BuildHasherDefault<PassThrough>>,
}

// SAFETY: the raw chunk pointers are owned by the arena, only written under
// its mutex, and only into bytes no reader has been given yet.
unsafe impl Send for ArenaChunks {}

/// Chunks of flushed MemStores kept for the next ones, so a new MemStore
/// reuses memory that is already resident instead of faulting in fresh
/// pages while the old arena's pages linger in the allocator.
static SPARE_CHUNKS: Mutex<Vec<SpareChunk>> = Mutex::new(Vec::new());
/// At most this many spare chunks (64 MiB) are kept.
const MAX_SPARE_CHUNKS: usize = 32;

struct SpareChunk(*mut u8);
// SAFETY: a spare chunk is owned by the pool alone; no reference to its
// bytes exists once its arena dropped.
unsafe impl Send for SpareChunk {}

impl Arena {
    fn new_chunk(len: usize) -> *mut u8 {
        if len == CHUNK
            && let Some(SpareChunk(p)) = SPARE_CHUNKS.lock().pop()
        {
            return p;
        }
        // Not zeroed: an arena only reads bytes it wrote, and zeroing cost
        // a pass over every fresh chunk (1-2 % of ingest CPU).
        let layout = Arena::chunk_layout(len);
        // SAFETY: the layout's size is not zero (chunks hold at least one
        // entry's bytes; `len` is CHUNK or over OWN_CHUNK).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        p
    }

    fn chunk_layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len, NODE_ALIGN).expect("a chunk's size fits a layout")
    }

    /// Places a skiplist node for (`row`, `seq`) of `height` levels in the
    /// arena, whose chunks the caller has locked, followed by the row and
    /// the cell blob it points at: one allocation, and a search that reaches
    /// the node finds its row in the next cache line.
    fn node_locked(
        inner: &mut ArenaChunks,
        height: usize,
        row: &[u8],
        seq: u64,
        cells: &[u8],
    ) -> *mut Node {
        let node_len = Node::size(height);
        let len = node_len + row.len() + cells.len();
        let at = if len >= OWN_CHUNK {
            let p = Arena::new_chunk(len);
            inner.chunks.push((p, len));
            p
        } else {
            let aligned = |used: usize| used.next_multiple_of(NODE_ALIGN);
            let fits = matches!(inner.current, Some((_, used, cap)) if aligned(used) + len <= cap);
            if !fits {
                let p = Arena::new_chunk(CHUNK);
                inner.chunks.push((p, CHUNK));
                inner.current = Some((p, 0, CHUNK));
            }
            let (p, used, cap) = inner.current.expect("set above");
            let start = aligned(used);
            inner.current = Some((p, start + len, cap));
            // SAFETY: start + len <= cap, so the range is inside the chunk.
            unsafe { p.add(start) }
        };
        // SAFETY: `at..at+len` is inside a chunk we own, aligned to
        // NODE_ALIGN (chunks are, and `start` is rounded up to it), and has
        // not been handed to anyone; the sources do not overlap it.
        unsafe {
            let row_at = at.add(node_len);
            let cells_at = row_at.add(row.len());
            std::ptr::copy_nonoverlapping(row.as_ptr(), row_at, row.len());
            std::ptr::copy_nonoverlapping(cells.as_ptr(), cells_at, cells.len());
            let key = RowNode {
                row: RawSlice {
                    ptr: row_at,
                    len: row.len(),
                },
                seq,
                cells: RawSlice {
                    ptr: cells_at,
                    len: cells.len(),
                },
            };
            Node::init(at, key, height)
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for (p, len) in self.inner.get_mut().chunks.drain(..) {
            if len == CHUNK {
                let mut spare = SPARE_CHUNKS.lock();
                if spare.len() < MAX_SPARE_CHUNKS {
                    // Reused as is: an arena only reads bytes it wrote.
                    spare.push(SpareChunk(p));
                    continue;
                }
            }
            // SAFETY: each pointer came from `new_chunk` with the layout of
            // exactly `len` bytes and is freed once, here.
            unsafe { std::alloc::dealloc(p, Arena::chunk_layout(len)) };
        }
    }
}

/// One cell of a MemStore, as a reader sees it. Only valid while its
/// MemStore lives: readers keep an `Arc<MemStore>` next to these.
#[derive(Debug, Clone, Copy)]
pub struct MemEntry {
    /// Where the whole key is in the loader's key buffer (nodes store keys
    /// without their row, which the node holds once).
    key_at: u32,
    key_len: u32,
    value: RawSlice,
    pub seq: u64,
    pub ttl_ms: Option<u64>,
}

impl MemEntry {
    /// The entry's key, from the key buffer it was loaded with.
    pub fn key<'k>(&self, keys: &'k [u8]) -> &'k [u8] {
        &keys[self.key_at as usize..(self.key_at + self.key_len) as usize]
    }
    pub fn value(&self) -> &[u8] {
        self.value.as_slice()
    }
}

/// Per-row bytes counted against the flush size besides the cells: the
/// skiplist node with its tower (64 bytes with one level, 1.33 levels on
/// average) and alignment.
const ROW_OVERHEAD: usize = 72;

/// Bytes of a series' entry in a MemStore's `series_heads` (key, pointer,
/// the table's spare room), counted against the flush size.
const SERIES_HEAD_BYTES: usize = 32;

/// A hasher for keys that are hashes already (xxh3 of a series).
#[derive(Default)]
struct PassThrough(u64);

impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; any other input still hashes.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Debug, Default)]
pub struct MemStore {
    /// Nodes live in `arena`, which must outlive the list (it does: fields
    /// drop in declaration order).
    rows: SkipList,
    arena: Arena,
    bytes: AtomicUsize,
    cells: AtomicUsize,
    max_seq: AtomicU64,
    min_ts: AtomicU64,
    max_ts: AtomicU64,
    /// Delete markers inserted: a read over sources without any resolves
    /// a column among its puts alone (see `read::columns`).
    delete_markers: AtomicU64,
    /// When the first edit arrived (ms), for age-based flushes.
    first_write_ms: AtomicU64,
    /// Highest sequence id the MemStore may hold, fixed when it is taken
    /// out of service for a flush.
    sealed_seq: AtomicU64,
    /// The region's source positions when it was sealed: what its edits
    /// and the files before it cover (a region without a WAL publishes
    /// them with the flushed file).
    sealed_positions: Mutex<BTreeMap<SourceShard, u64>>,
}

impl MemStore {
    pub fn new() -> Self {
        MemStore {
            min_ts: AtomicU64::new(u64::MAX),
            ..Default::default()
        }
    }

    /// Inserts one row mutation: `entries` all belong to `row`. Among equal
    /// cell keys in one mutation the last one wins.
    pub fn insert_row<'a>(
        &self,
        row: &[u8],
        seq: u64,
        entries: impl Iterator<Item = EntryRef<'a>>,
        now_ms: u64,
    ) {
        let mut inserter = self.inserter();
        inserter.row(row, seq, entries, false);
        inserter.finish(now_ms);
    }

    /// Inserts the rows of `batch`, row `i` with sequence id `first_seq + i`:
    /// the writer's path, which pays for the arena lock and the shared
    /// counters once per batch rather than per row.
    ///
    /// Rows go in in reverse key order (oldest first among equal rows), so
    /// each lands right before the one before it: a series' points, newest
    /// first in key order, each go before the series' newest node (see
    /// `series_heads`) without a search from the top of the list.
    /// A batch of many series' points was otherwise a search across the
    /// MemStore per row.
    pub fn insert_batch(&self, batch: &EntryBatch, first_seq: u64, now_ms: u64) {
        let mut order: Vec<(&[u8], usize)> = (0..batch.rows())
            .filter_map(|i| batch.row_key(i).map(|row| (row, i)))
            .collect();
        order.sort_unstable_by(|(a, i), (b, j)| compare_bytes(b, a).then(i.cmp(j)));
        let mut inserter = self.inserter();
        for (row, i) in order {
            inserter.row(
                row,
                first_seq + i as u64,
                batch.row(i),
                batch.row_is_sorted(i),
            );
        }
        inserter.finish(now_ms);
    }

    fn inserter<'a>(&self) -> Inserter<'_, 'a> {
        Inserter {
            memstore: self,
            arena: self.arena.inner.lock(),
            splice: Splice::new(),
            cells: Vec::new(),
            blob: Vec::new(),
            bytes: 0,
            cell_count: 0,
            min_ts: u64::MAX,
            max_ts: 0,
            max_seq: 0,
            delete_markers: 0,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    /// Cells inserted (before replacement of equal keys).
    pub fn cells(&self) -> usize {
        self.cells.load(AtomicOrdering::Relaxed)
    }
    pub fn max_seq(&self) -> u64 {
        self.max_seq.load(AtomicOrdering::Relaxed)
    }
    /// Delete markers inserted so far. An edit's markers are counted
    /// before the read point passes the edit (its nodes are linked
    /// earlier, but a reader below its sequence id skips them): a reader
    /// that takes the read point first, then this count, counts every
    /// marker it can see.
    pub fn delete_markers(&self) -> u64 {
        self.delete_markers.load(AtomicOrdering::Acquire)
    }
    pub fn time_range(&self) -> (u64, u64) {
        (
            self.min_ts.load(AtomicOrdering::Relaxed),
            self.max_ts.load(AtomicOrdering::Relaxed),
        )
    }
    pub fn first_write_ms(&self) -> u64 {
        self.first_write_ms.load(AtomicOrdering::Relaxed)
    }
    pub fn seal(&self, seq: u64) {
        self.sealed_seq.store(seq, AtomicOrdering::Release);
    }
    /// Seals at `seq` and keeps the positions the region's writes up to
    /// it carried; called under the region's write lock.
    pub fn seal_at(&self, seq: u64, positions: BTreeMap<SourceShard, u64>) {
        *self.sealed_positions.lock() = positions;
        self.seal(seq);
    }
    pub fn sealed_positions(&self) -> BTreeMap<SourceShard, u64> {
        self.sealed_positions.lock().clone()
    }
    pub fn sealed_seq(&self) -> u64 {
        self.sealed_seq.load(AtomicOrdering::Acquire)
    }

    /// Loads the cells of up to `max_rows` rows, starting at the first row
    /// at or after `from` (or strictly after, with `after`) that has edits
    /// visible at `read_point`. Each row's cells go to `out` sorted by cell
    /// key with only the newest edit of equal keys; returns the last row
    /// loaded (`None`: none left). One skiplist search serves them all,
    /// which is what makes scans of a MemStore cheap. Callers must hold an
    /// `Arc` of this MemStore for as long as they keep the entries.
    pub fn load_rows(
        &self,
        from: &[u8],
        after: bool,
        read_point: u64,
        max_rows: usize,
        out: &mut Vec<MemEntry>,
        keys: &mut Vec<u8>,
    ) -> Option<RawRow> {
        out.clear();
        keys.clear();
        let mut loaded = 0;
        let mut last = None;
        let _ = self.visit_rows(from, after, read_point, |row, cells| {
            for cell in cells {
                let key_at = keys.len();
                keys.extend_from_slice(&(row.len() as u16).to_be_bytes());
                keys.extend_from_slice(row);
                keys.extend_from_slice(cell.after_row);
                out.push(MemEntry {
                    key_at: key_at as u32,
                    key_len: (keys.len() - key_at) as u32,
                    value: RawSlice::of(cell.value),
                    seq: cell.seq,
                    ttl_ms: cell.ttl_ms,
                });
            }
            last = Some(RawRow(RawSlice::of(row)));
            loaded += 1;
            if loaded >= max_rows {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        last
    }

    /// Every row with an edit visible at `read_point`, in key order, with
    /// its cells in key order, one per key (the newest edit's): a flush's
    /// walk. Unlike [`Self::load_rows`] it makes no whole keys and copies
    /// nothing: a row's cells are handed over as the node stores them.
    pub fn walk_rows<'m, E>(
        &'m self,
        read_point: u64,
        mut each: impl FnMut(&'m [u8], &[RowCell<'m>]) -> Result<(), E>,
    ) -> Result<(), E> {
        let visited = self.visit_rows(&[], false, read_point, |row, cells| {
            match each(row, cells) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => ControlFlow::Break(e),
            }
        });
        match visited {
            ControlFlow::Continue(()) => Ok(()),
            ControlFlow::Break(e) => Err(e),
        }
    }

    /// The rows at or after `from` (or strictly after, with `after`) with
    /// an edit visible at `read_point`, in key order, each with its cells
    /// in key order, one per key, until `each` breaks. One skiplist
    /// search serves them all, which is what makes scans of a MemStore
    /// cheap. A row's nodes come newest first: only a row written more
    /// than once is sorted (stable, so that order holds among equal keys)
    /// and deduplicated, keeping the first (newest).
    fn visit_rows<'m, B>(
        &'m self,
        from: &[u8],
        after: bool,
        read_point: u64,
        mut each: impl FnMut(&'m [u8], &[RowCell<'m>]) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        // (row, u64::MAX) is the first node of a row; (row, 0) its last.
        let probe = RowNode::probe(from, if after { 0 } else { u64::MAX });
        let mut at = self.rows.seek(&probe, after);
        let mut cells: Vec<RowCell<'m>> = Vec::new();
        let mut row: Option<&'m [u8]> = None;
        let mut nodes = 0;
        let mut finish = |row: &'m [u8], nodes: usize, cells: &mut Vec<RowCell<'m>>| {
            if nodes > 1 {
                cells.sort_by(|a, b| compare_keys_after_row(a.after_row, b.after_row));
                cells.dedup_by(|later, first| {
                    compare_keys_after_row(later.after_row, first.after_row) == Ordering::Equal
                });
            }
            let flow = if cells.is_empty() {
                ControlFlow::Continue(())
            } else {
                each(row, cells)
            };
            cells.clear();
            flow
        };
        while !at.is_null() {
            let node = *self.rows.key(at);
            at = self.rows.successor(at);
            let node_row = self.arena_bytes(node.row);
            if let Some(r) = row
                && r != node_row
            {
                finish(r, nodes, &mut cells)?;
                nodes = 0;
            }
            row = Some(node_row);
            if node.seq > read_point {
                continue;
            }
            nodes += 1;
            cells.extend(BlobCells::new(self.arena_bytes(node.cells), node.seq));
        }
        match row {
            Some(r) => finish(r, nodes, &mut cells),
            None => ControlFlow::Continue(()),
        }
    }

    /// Bytes of this MemStore's arena, for as long as the MemStore lives.
    fn arena_bytes(&self, slice: RawSlice) -> &[u8] {
        // SAFETY: every RawSlice of a node of this MemStore's list points
        // into its arena, whose chunks are written once before the node is
        // published and freed only when the MemStore is dropped, which the
        // borrow of `self` rules out.
        unsafe { std::slice::from_raw_parts(slice.ptr, slice.len) }
    }

    /// The greatest row strictly below `row` (any row with `None`) that has
    /// an edit visible at `read_point`.
    pub fn last_row_before(&self, row: Option<&[u8]>, read_point: u64) -> Option<Vec<u8>> {
        let upper = row.map(|r| RowNode::probe(r, u64::MAX));
        let mut at = self.rows.last_before(upper.as_ref());
        // Each step back is a search from the top (nodes link forward only),
        // but edits above the read point are few: those still in flight.
        while !at.is_null() {
            let node = self.rows.key(at);
            if node.seq <= read_point {
                return Some(node.row.as_slice().to_vec());
            }
            at = self.rows.last_before(Some(node));
        }
        None
    }
}

/// A row key held in a MemStore's arena.
#[derive(Debug, Clone, Copy)]
pub struct RawRow(RawSlice);

impl RawRow {
    pub fn as_slice(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// Rows going into a MemStore, with the arena locked and the shared
/// counters summed up until [`Inserter::finish`]. Readers never take the
/// arena lock, so holding it over a batch delays no one but other writers,
/// and a region has one writer at a time.
struct Inserter<'m, 'a> {
    memstore: &'m MemStore,
    arena: parking_lot::MutexGuard<'m, ArenaChunks>,
    /// Where the last row went in the skiplist.
    splice: Splice,
    /// Scratch, reused row after row.
    cells: Vec<EntryRef<'a>>,
    blob: Vec<u8>,
    bytes: usize,
    cell_count: usize,
    min_ts: u64,
    max_ts: u64,
    max_seq: u64,
    delete_markers: u64,
}

impl<'a> Inserter<'_, 'a> {
    /// Adds one row mutation: `entries` all belong to `row`. Among equal
    /// cell keys in one mutation the last one wins. `known_sorted`: the
    /// writer put them in strictly rising key order
    /// (`EntryBatch::end_sorted_row`), which is then not checked again.
    fn row(
        &mut self,
        row: &[u8],
        seq: u64,
        entries: impl Iterator<Item = EntryRef<'a>>,
        known_sorted: bool,
    ) {
        let cells = &mut self.cells;
        cells.clear();
        cells.extend(entries);
        if cells.is_empty() {
            return;
        }
        // Writers that encode cells in key order (the ingest path does)
        // skip the sort. The cells share the row, so only what follows it
        // is compared.
        let sorted = known_sorted
            || cells
                .windows(2)
                .all(|w| compare_keys_after_row(w[0].after_row, w[1].after_row) == Ordering::Less);
        if !sorted {
            cells.reverse();
            // Stable: after the reverse, the last written of equal keys is first.
            cells.sort_by(|a, b| compare_keys_after_row(a.after_row, b.after_row));
            cells.dedup_by(|later, first| {
                compare_keys_after_row(later.after_row, first.after_row) == Ordering::Equal
            });
        }
        let blob = &mut self.blob;
        blob.clear();
        for c in cells.iter() {
            // What follows the row ends with the timestamp (8 bytes) and
            // the kind byte.
            if let Some(ts) = c
                .after_row
                .len()
                .checked_sub(9)
                .and_then(|at| c.after_row.get(at..at + 8))
            {
                let ts = u64::from_be_bytes(ts.try_into().unwrap_or_default());
                self.min_ts = self.min_ts.min(ts);
                self.max_ts = self.max_ts.max(ts);
            }
            debug_assert!(c.row == row);
            if c.after_row
                .last()
                .is_some_and(|kind| kind & KIND_MASK != CellKind::Put as u8)
            {
                self.delete_markers += 1;
            }
            // The key without its row (`u16 length ‖ row`), which the node
            // stores once: a row's cells then cost about half the memory.
            put_len_prefixed(blob, c.after_row);
            if let Some(ttl) = c.ttl_ms {
                put_varint(blob, ttl);
            }
            put_len_prefixed(blob, c.value);
        }
        if self.arena.heights == 0 {
            self.arena.heights = 0x9e37_79b9_7f4a_7c15;
        }
        let height = skiplist::random_height(&mut self.arena.heights);
        let node = Arena::node_locked(&mut self.arena, height, row, seq, blob);
        let series = row
            .len()
            .checked_sub(8)
            .map(|n| xxhash_rust::xxh3::xxh3_64(&row[..n]));
        let head = series.and_then(|s| self.arena.series_heads.get(&s).copied());
        let rows = &self.memstore.rows;
        // SAFETY: we hold the arena lock, so we are the only inserter, and
        // have held it since the splice (this inserter's own) was made; the
        // node is fresh from this MemStore's arena, and a series head is a
        // node linked into this MemStore's list.
        let placed = head.is_some_and(|h| unsafe { rows.insert_before(&mut self.splice, node, h) });
        if !placed {
            // SAFETY: as above.
            unsafe { rows.insert(&mut self.splice, node) };
        }
        if let Some(s) = series
            && head.is_none_or(|h| rows.key(node) < rows.key(h))
        {
            self.arena.series_heads.insert(s, node);
            if head.is_none() {
                self.bytes += SERIES_HEAD_BYTES;
            }
        }
        self.bytes += row.len() + blob.len() + ROW_OVERHEAD;
        self.cell_count += cells.len();
        self.max_seq = self.max_seq.max(seq);
    }

    /// Publishes the counters of the rows added.
    fn finish(self, now_ms: u64) {
        let m = self.memstore;
        if self.cell_count == 0 {
            return;
        }
        // Before the edits are published (the read point moves past them
        // after this): a reader that sees them sees the count.
        m.delete_markers
            .fetch_add(self.delete_markers, AtomicOrdering::Release);
        m.bytes.fetch_add(self.bytes, AtomicOrdering::Relaxed);
        m.cells.fetch_add(self.cell_count, AtomicOrdering::Relaxed);
        m.min_ts.fetch_min(self.min_ts, AtomicOrdering::Relaxed);
        m.max_ts.fetch_max(self.max_ts, AtomicOrdering::Relaxed);
        m.max_seq.fetch_max(self.max_seq, AtomicOrdering::Relaxed);
        let _ = m.first_write_ms.compare_exchange(
            0,
            now_ms.max(1),
            AtomicOrdering::Relaxed,
            AtomicOrdering::Relaxed,
        );
    }
}

/// One cell of a row as [`MemStore::walk_rows`] hands it over: the key
/// without its row (`family length ‖ family ‖ qualifier ‖ timestamp ‖
/// kind`), the cell's TTL and value, and the sequence id of its edit.
#[derive(Debug, Clone, Copy)]
pub struct RowCell<'m> {
    pub after_row: &'m [u8],
    pub ttl_ms: Option<u64>,
    pub value: &'m [u8],
    pub seq: u64,
}

/// The cells of a node's blob, in order (see `RowNode`). The blob was
/// written by `insert_row` in this process, so it is well formed; a
/// malformed one would be a bug, and is cut short rather than trusted.
struct BlobCells<'m> {
    blob: &'m [u8],
    r: Reader<'m>,
    /// The sequence id of the node's edit.
    seq: u64,
}

impl<'m> BlobCells<'m> {
    fn new(blob: &'m [u8], seq: u64) -> Self {
        BlobCells {
            blob,
            r: Reader::new(blob),
            seq,
        }
    }
}

impl<'m> Iterator for BlobCells<'m> {
    type Item = RowCell<'m>;

    fn next(&mut self) -> Option<RowCell<'m>> {
        if self.r.is_empty() {
            return None;
        }
        let len = self.blob.len();
        let Ok(after_row) = self.r.len_prefixed(len, "key") else {
            debug_assert!(false, "malformed memstore blob");
            return None;
        };
        let ttl_ms = if after_row.last().is_some_and(|b| b & TTL_FLAG != 0) {
            self.r.varint("ttl").ok()
        } else {
            None
        };
        let Ok(value) = self.r.len_prefixed(len, "value") else {
            debug_assert!(false, "malformed memstore blob");
            return None;
        };
        Some(RowCell {
            after_row,
            ttl_ms,
            value,
            seq: self.seq,
        })
    }
}

/// Multi-version concurrency control: hands out sequence ids and publishes
/// the read point only past edits that are complete, in order.
#[derive(Debug)]
pub struct Mvcc {
    inner: Mutex<MvccInner>,
    read_point: AtomicU64,
    advanced: Condvar,
    poisoned: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct MvccInner {
    next_seq: u64,
    /// (last seq of a write, done) in seq order.
    pending: VecDeque<(u64, bool)>,
}

impl Mvcc {
    pub fn new(last_seq: u64) -> Self {
        Mvcc {
            inner: Mutex::new(MvccInner {
                next_seq: last_seq + 1,
                pending: VecDeque::new(),
            }),
            read_point: AtomicU64::new(last_seq),
            advanced: Condvar::new(),
            poisoned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Reserves `n` consecutive sequence ids; returns the first.
    pub fn begin(&self, n: u64) -> u64 {
        let mut inner = self.inner.lock();
        let first = inner.next_seq;
        inner.next_seq += n.max(1);
        let last = inner.next_seq - 1;
        inner.pending.push_back((last, false));
        first
    }

    /// Marks the write ending at `last` complete and advances the read point
    /// over every complete write at the front.
    pub fn complete(&self, last: u64) {
        let mut inner = self.inner.lock();
        if let Some(slot) = inner.pending.iter_mut().find(|(l, _)| *l == last) {
            slot.1 = true;
        }
        let mut advanced = None;
        while let Some(&(l, true)) = inner.pending.front() {
            inner.pending.pop_front();
            advanced = Some(l);
        }
        if let Some(l) = advanced {
            self.read_point.store(l, AtomicOrdering::Release);
            self.advanced.notify_all();
        }
    }

    pub fn read_point(&self) -> u64 {
        self.read_point.load(AtomicOrdering::Acquire)
    }

    /// Highest sequence id handed out.
    pub fn last_assigned(&self) -> u64 {
        self.inner.lock().next_seq - 1
    }

    /// Blocks until every write up to `seq` is complete; false if a write
    /// failed for good (the region stopped), so it never will be.
    pub fn wait_for(&self, seq: u64) -> bool {
        let mut inner = self.inner.lock();
        while self.read_point() < seq {
            if self.poisoned.load(AtomicOrdering::Acquire) {
                return false;
            }
            if inner.pending.is_empty() {
                return true;
            }
            self.advanced.wait(&mut inner);
        }
        true
    }

    /// A write failed and will never complete: wake everyone waiting on it.
    pub fn poison(&self) {
        let _inner = self.inner.lock();
        self.poisoned.store(true, AtomicOrdering::Release);
        self.advanced.notify_all();
    }
}

/// The MemStores a reader sees: the active one and those being flushed.
pub type MemStores = Vec<Arc<MemStore>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_point_advances_only_over_complete_prefix() {
        let m = Mvcc::new(10);
        let a = m.begin(2); // 11..=12
        let b = m.begin(1); // 13
        assert_eq!((a, b), (11, 13));
        m.complete(13);
        assert_eq!(m.read_point(), 10);
        m.complete(12);
        assert_eq!(m.read_point(), 13);
    }
}

#[cfg(test)]
mod row_tests {
    use super::*;
    use crate::cell::{CellKind, EntryBatch};

    fn batch(cells: &[(&str, u64, &str)]) -> EntryBatch {
        let mut b = EntryBatch::new();
        for (q, ts, v) in cells {
            b.push(
                b"r",
                b"f",
                q.as_bytes(),
                *ts,
                CellKind::Put,
                None,
                v.as_bytes(),
            );
        }
        b.end_row();
        b
    }

    fn read(m: &MemStore, read_point: u64) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        m.load_rows(b"", false, read_point, 1, &mut out, &mut Vec::new());
        out.iter()
            .map(|e| (String::from_utf8(e.value().to_vec()).unwrap(), e.seq))
            .collect()
    }

    #[test]
    fn later_edits_win_and_rows_merge_in_key_order() {
        let m = MemStore::new();
        // Within one mutation the last of equal keys wins.
        m.insert_row(
            b"r",
            1,
            batch(&[("b", 5, "b1"), ("a", 5, "a1"), ("b", 5, "b2")]).row(0),
            0,
        );
        assert_eq!(read(&m, 1), vec![("a1".into(), 1), ("b2".into(), 1)]);
        // A later mutation of the same row shadows equal keys, adds others.
        m.insert_row(b"r", 2, batch(&[("a", 5, "a2"), ("c", 5, "c2")]).row(0), 0);
        assert_eq!(
            read(&m, 2),
            vec![("a2".into(), 2), ("b2".into(), 1), ("c2".into(), 2)]
        );
        // Invisible edits are not read.
        assert_eq!(read(&m, 1), vec![("a1".into(), 1), ("b2".into(), 1)]);
        assert_eq!(m.last_row_before(None, 2), Some(b"r".to_vec()));
        assert_eq!(m.last_row_before(Some(b"r"), 2), None);
    }
}

#[cfg(test)]
mod skiplist_tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cell::{CellKind, EntryBatch, compare_keys, row_of};

    fn row_name(id: u8) -> Vec<u8> {
        format!("r{id:02}").into_bytes()
    }

    /// Per row, per qualifier: the newest sequence id at or below
    /// `read_point`, as the model says a reader must see it.
    type Model = BTreeMap<Vec<u8>, BTreeMap<u8, u64>>;

    fn visible(writes: &[(u8, u8, u64)], read_point: u64) -> Model {
        let mut model = Model::new();
        for &(row, qual, seq) in writes.iter().filter(|w| w.2 <= read_point) {
            let newest = model
                .entry(row_name(row))
                .or_default()
                .entry(qual)
                .or_insert(seq);
            *newest = (*newest).max(seq);
        }
        model
    }

    /// What `load_rows` from `from` returns, as (row, qualifier, seq) per row.
    fn loaded(m: &MemStore, from: &[u8], after: bool, read_point: u64) -> Model {
        let (mut out, mut keys) = (Vec::new(), Vec::new());
        m.load_rows(from, after, read_point, usize::MAX, &mut out, &mut keys);
        let mut got = Model::new();
        let mut last_key: Option<Vec<u8>> = None;
        for e in &out {
            let key = e.key(&keys);
            if let Some(prev) = &last_key {
                assert_eq!(compare_keys(prev, key), Ordering::Less, "keys out of order");
            }
            last_key = Some(key.to_vec());
            let qual = key[key.len() - 10];
            let seq: u64 = std::str::from_utf8(e.value()).unwrap().parse().unwrap();
            assert_eq!(seq, e.seq);
            got.entry(row_of(key).to_vec())
                .or_default()
                .insert(qual, seq);
        }
        got
    }

    /// A flush's walk gives what a scan from the start loads: the same
    /// whole keys, TTLs and values, in the same order.
    fn assert_walk_is_the_scan(m: &MemStore, read_point: u64) {
        let (mut out, mut keys) = (Vec::new(), Vec::new());
        m.load_rows(b"", false, read_point, usize::MAX, &mut out, &mut keys);
        let scanned: Vec<(Vec<u8>, Option<u64>, Vec<u8>)> = out
            .iter()
            .map(|e| (e.key(&keys).to_vec(), e.ttl_ms, e.value().to_vec()))
            .collect();
        let mut walked = Vec::new();
        m.walk_rows::<()>(read_point, |row, cells| {
            for c in cells {
                let mut key = (row.len() as u16).to_be_bytes().to_vec();
                key.extend_from_slice(row);
                key.extend_from_slice(c.after_row);
                walked.push((key, c.ttl_ms, c.value.to_vec()));
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(walked, scanned);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Batches of single-cell rows over a few rows and qualifiers, in
        /// any order: every read matches the newest visible write per cell,
        /// from any starting row and at any read point.
        #[test]
        fn reads_match_a_model_of_the_writes(
            batches in proptest::collection::vec(
                proptest::collection::vec((0u8..30, 0u8..3), 1..60), 1..12),
            probe in 0u8..32,
        ) {
            let m = MemStore::new();
            let mut writes = Vec::new();
            let mut seq = 1;
            for (n, rows) in batches.iter().enumerate() {
                let mut b = EntryBatch::new();
                for (i, &(row, qual)) in rows.iter().enumerate() {
                    let value = (seq + i as u64).to_string();
                    b.push(&row_name(row), b"f", &[b'a' + qual], 5, CellKind::Put, None, value.as_bytes());
                    b.end_row();
                    writes.push((row, b'a' + qual, seq + i as u64));
                }
                if n % 3 == 2 {
                    // The recovery path: one row at a time.
                    for i in 0..b.rows() {
                        m.insert_row(b.row_key(i).unwrap(), seq + i as u64, b.row(i), 0);
                    }
                } else {
                    m.insert_batch(&b, seq, 0);
                }
                seq += rows.len() as u64;
            }
            m.rows.check_levels();
            for read_point in [seq / 3, seq / 2, seq] {
                assert_walk_is_the_scan(&m, read_point);
                let model = visible(&writes, read_point);
                proptest::prop_assert_eq!(&loaded(&m, b"", false, read_point), &model);
                let from = row_name(probe);
                for after in [false, true] {
                    let expect: Model = model
                        .iter()
                        .filter(|(r, _)| if after { **r > from } else { **r >= from })
                        .map(|(r, c)| (r.clone(), c.clone()))
                        .collect();
                    proptest::prop_assert_eq!(&loaded(&m, &from, after, read_point), &expect);
                }
                let before = model.range(..from.clone()).next_back().map(|(r, _)| r.clone());
                proptest::prop_assert_eq!(m.last_row_before(Some(&from), read_point), before);
                let last = model.keys().next_back().cloned();
                proptest::prop_assert_eq!(m.last_row_before(None, read_point), last);
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Rows of several cells over two families, with TTLs, delete
        /// markers and rows written again: the flush's walk hands over
        /// what a scan from the start loads, at any read point.
        #[test]
        fn a_walk_of_rows_is_a_scan_from_the_start(
            batches in proptest::collection::vec(
                proptest::collection::vec(
                    (0u8..12, proptest::collection::vec((0u8..2, 0u8..4, 0u64..3, 0u8..3, proptest::bool::ANY), 1..6)),
                    1..20),
                1..8),
        ) {
            let m = MemStore::new();
            let mut seq = 1;
            for rows in &batches {
                let mut b = EntryBatch::new();
                for (i, (row, cells)) in rows.iter().enumerate() {
                    for &(family, qual, ts, kind, ttl) in cells {
                        let kind = [CellKind::Put, CellKind::DeleteVersion, CellKind::DeleteColumn][kind as usize];
                        let value = format!("{}-{qual}", seq + i as u64);
                        b.push(&row_name(*row), [&b"f"[..], b"g"][family as usize], &[b'a' + qual], ts, kind, ttl.then_some(60_000), value.as_bytes());
                    }
                    b.end_row();
                }
                m.insert_batch(&b, seq, 0);
                seq += rows.len() as u64;
            }
            for read_point in [seq / 2, seq] {
                assert_walk_is_the_scan(&m, read_point);
            }
        }
    }

    /// A time-series row: a series (its name's length varies, so series
    /// of different lengths interleave in key order) and a reversed time.
    fn series_row(series: u8, t: u16) -> Vec<u8> {
        let mut row = format!("s{}", "x".repeat(series as usize)).into_bytes();
        row.extend_from_slice(&(u64::MAX - u64::from(t)).to_be_bytes());
        row
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Series' points in any order — mostly newer than the series'
        /// newest (placed by its head without a search), some older, some
        /// repeated — read back as a model says, from any row.
        #[test]
        fn series_points_in_any_order_match_a_model(
            batches in proptest::collection::vec(
                proptest::collection::vec((0u8..6, 0u16..8, 0u8..2, proptest::bool::weighted(0.8)), 1..80),
                1..12),
            probe in (0u8..6, 0u16..400),
        ) {
            let m = MemStore::new();
            let mut model = Model::new();
            let mut seq = 1;
            for (n, rows) in batches.iter().enumerate() {
                let mut b = EntryBatch::new();
                for (i, &(series, step, qual, newer)) in rows.iter().enumerate() {
                    // Newer points move on with the batches; the others
                    // land among earlier ones.
                    let t = if newer { n as u16 * 30 + step } else { step * 40 };
                    let row = series_row(series, t);
                    let s = seq + i as u64;
                    b.push(&row, b"f", &[b'a' + qual], 5, CellKind::Put, None, s.to_string().as_bytes());
                    b.end_row();
                    let newest = model.entry(row).or_default().entry(b'a' + qual).or_insert(s);
                    *newest = (*newest).max(s);
                }
                m.insert_batch(&b, seq, 0);
                seq += rows.len() as u64;
            }
            m.rows.check_levels();
            assert_walk_is_the_scan(&m, u64::MAX);
            proptest::prop_assert_eq!(&loaded(&m, b"", false, u64::MAX), &model);
            let from = series_row(probe.0, probe.1);
            for after in [false, true] {
                let expect: Model = model
                    .iter()
                    .filter(|(r, _)| if after { **r > from } else { **r >= from })
                    .map(|(r, c)| (r.clone(), c.clone()))
                    .collect();
                proptest::prop_assert_eq!(&loaded(&m, &from, after, u64::MAX), &expect);
            }
        }
    }

    /// A reader scanning while the writer inserts sees rows in order and
    /// never fewer than it saw before.
    #[test]
    fn readers_scan_while_a_writer_inserts() {
        let m = Arc::new(MemStore::new());
        let writer = {
            let m = m.clone();
            std::thread::spawn(move || {
                let mut seq = 1;
                for round in 0..200u32 {
                    let mut b = EntryBatch::new();
                    for i in 0..50u32 {
                        let row = format!("r{:05}", (i * 7919 + round * 31) % 20_000);
                        b.push(row.as_bytes(), b"f", b"q", 5, CellKind::Put, None, b"v");
                        b.end_row();
                    }
                    m.insert_batch(&b, seq, 0);
                    seq += 50;
                }
            })
        };
        let mut seen = 0;
        while !writer.is_finished() || seen == 0 {
            let (mut out, mut keys) = (Vec::new(), Vec::new());
            m.load_rows(b"", false, u64::MAX, usize::MAX, &mut out, &mut keys);
            for pair in out.windows(2) {
                assert_eq!(
                    compare_keys(pair[0].key(&keys), pair[1].key(&keys)),
                    Ordering::Less
                );
            }
            assert!(out.len() >= seen);
            seen = out.len();
        }
        writer.join().unwrap();
    }
}
