//! The MemStore's row node and the raw byte slices it points at: the key
//! the skiplist orders (`skiplist.rs`) and the MemStore stores (`memstore.rs`).

use std::cmp::Ordering;

use crate::codec::compare_bytes;

/// Bytes owned by the MemStore's arena; valid for as long as the arena lives.
#[derive(Debug, Clone, Copy)]
pub(super) struct RawSlice {
    pub(super) ptr: *const u8,
    pub(super) len: usize,
}

// SAFETY: a RawSlice points at bytes that are written once, before the slice
// is published, and never changed or freed while the owning MemStore lives.
unsafe impl Send for RawSlice {}
// SAFETY: as above; the bytes are immutable after publication.
unsafe impl Sync for RawSlice {}

impl RawSlice {
    pub(super) fn of(bytes: &[u8]) -> Self {
        RawSlice {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }
    pub(super) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` lies inside an arena chunk (or, for a
        // search probe, a buffer borrowed for the duration of the search)
        // that outlives every slice handed out: entries leave the MemStore
        // only through `load_rows`, whose callers hold an `Arc<MemStore>`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A skiplist node: one row mutation. Nodes order by row, then newest edit
/// first; the row's cells, sorted by cell key, are one blob in the arena:
///
/// ```text
/// per cell: varint len · key without its row (family length · family ·
///           qualifier · timestamp · kind) · [varint ttl_ms if the kind
///           byte has the TTL flag] · varint value_len · value
/// ```
///
/// Time-series rows carry several cells each, so one node per row instead of
/// one per cell divides the skiplist's work (and cache misses) by the number
/// of fields.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowNode {
    pub(super) row: RawSlice,
    pub(super) seq: u64,
    pub(super) cells: RawSlice,
}

impl RowNode {
    pub(super) fn probe(row: &[u8], seq: u64) -> RowNode {
        RowNode {
            row: RawSlice::of(row),
            seq,
            cells: RawSlice::of(&[]),
        }
    }
}

impl PartialEq for RowNode {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for RowNode {}
impl Ord for RowNode {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_bytes(self.row.as_slice(), other.row.as_slice())
            .then_with(|| other.seq.cmp(&self.seq))
    }
}
impl PartialOrd for RowNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
