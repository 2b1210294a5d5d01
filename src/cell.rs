//! Cells, their keys and their order.
//!
//! A cell is (row, family, qualifier, timestamp, kind, value). Cells sort by
//! row ascending, family ascending, qualifier ascending, timestamp
//! **descending** (newest first), then kind with delete markers before puts
//! at the same timestamp — HBase's order, kept exactly.
//!
//! # Encoded key layout
//!
//! One layout is used in the MemStore, the WAL and store files:
//!
//! | bytes       | field                                             |
//! |-------------|---------------------------------------------------|
//! | 2           | row length, u16 big-endian (1..=65535)            |
//! | row length  | row                                               |
//! | 1           | family length (1..=255)                           |
//! | fam length  | family                                            |
//! | rest − 9    | qualifier (its length is implied)                 |
//! | 8           | timestamp, u64 big-endian (epoch ms)              |
//! | 1           | kind code (low 4 bits) and flags (high bits)      |
//!
//! The kind byte's bit 7 says the entry carries a per-cell TTL, stored with
//! the value rather than in the key so it never changes the order.

use std::cmp::Ordering;

use bytes::Bytes;

use crate::codec::compare_bytes;

pub const MAX_ROW_LEN: usize = u16::MAX as usize;
pub const MAX_FAMILY_LEN: usize = u8::MAX as usize;
pub const MAX_QUALIFIER_LEN: usize = 64 * 1024;
/// Fixed bytes of a key besides row, family and qualifier.
pub const KEY_OVERHEAD: usize = 2 + 1 + 8 + 1;
pub const TTL_FLAG: u8 = 0x80;
pub(crate) const KIND_MASK: u8 = 0x0f;

/// What a cell is. The discriminant is the sort order at equal timestamps:
/// family deletes, then column deletes, then version deletes, then puts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum CellKind {
    /// Masks every put in the row's family with timestamp <= this one.
    DeleteFamily = 1,
    /// Masks every version of one column with timestamp <= this one.
    DeleteColumn = 2,
    /// Masks exactly one version of one column.
    DeleteVersion = 3,
    Put = 4,
}

impl CellKind {
    pub fn from_code(code: u8) -> Option<CellKind> {
        match code & KIND_MASK {
            1 => Some(CellKind::DeleteFamily),
            2 => Some(CellKind::DeleteColumn),
            3 => Some(CellKind::DeleteVersion),
            4 => Some(CellKind::Put),
            _ => None,
        }
    }
    pub fn is_delete(self) -> bool {
        self != CellKind::Put
    }
}

/// A borrowed view of an encoded key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRef<'a> {
    pub row: &'a [u8],
    pub family: &'a [u8],
    pub qualifier: &'a [u8],
    pub timestamp: u64,
    pub kind: CellKind,
    pub has_ttl: bool,
}

impl<'a> KeyRef<'a> {
    /// Parses an encoded key; `None` if it is malformed.
    pub fn parse(key: &'a [u8]) -> Option<KeyRef<'a>> {
        if key.len() < KEY_OVERHEAD + 2 {
            return None;
        }
        let row_len = u16::from_be_bytes([key[0], key[1]]) as usize;
        let fam_at = 2 + row_len;
        let fam_len = *key.get(fam_at)? as usize;
        let qual_at = fam_at + 1 + fam_len;
        let ts_at = key.len() - 9;
        if row_len == 0 || fam_len == 0 || qual_at > ts_at {
            return None;
        }
        let ts = u64::from_be_bytes(key[ts_at..ts_at + 8].try_into().ok()?);
        let kind_byte = key[key.len() - 1];
        Some(KeyRef {
            row: &key[2..fam_at],
            family: &key[fam_at + 1..qual_at],
            qualifier: &key[qual_at..ts_at],
            timestamp: ts,
            kind: CellKind::from_code(kind_byte)?,
            has_ttl: kind_byte & TTL_FLAG != 0,
        })
    }

    /// Parses a key given as its row and what follows the row in it
    /// (an [`EntryRef`]'s parts); `None` if it is malformed.
    pub fn from_parts(row: &'a [u8], after_row: &'a [u8]) -> Option<KeyRef<'a>> {
        let (family, qualifier, timestamp, kind_byte) = split_after_row(after_row)?;
        if row.is_empty() || row.len() > MAX_ROW_LEN || family.is_empty() {
            return None;
        }
        Some(KeyRef {
            row,
            family,
            qualifier,
            timestamp,
            kind: CellKind::from_code(kind_byte)?,
            has_ttl: kind_byte & TTL_FLAG != 0,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        encode_key(
            self.row,
            self.family,
            self.qualifier,
            self.timestamp,
            self.kind,
            self.has_ttl,
        )
    }
}

/// Encodes a key. Callers have checked the length limits.
pub fn encode_key(
    row: &[u8],
    family: &[u8],
    qualifier: &[u8],
    timestamp: u64,
    kind: CellKind,
    has_ttl: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(KEY_OVERHEAD + row.len() + family.len() + qualifier.len());
    encode_key_into(&mut out, row, family, qualifier, timestamp, kind, has_ttl);
    out
}

pub fn encode_key_into(
    out: &mut Vec<u8>,
    row: &[u8],
    family: &[u8],
    qualifier: &[u8],
    timestamp: u64,
    kind: CellKind,
    has_ttl: bool,
) {
    debug_assert!(!row.is_empty() && row.len() <= MAX_ROW_LEN);
    debug_assert!(!family.is_empty() && family.len() <= MAX_FAMILY_LEN);
    out.reserve(KEY_OVERHEAD + row.len() + family.len() + qualifier.len());
    out.extend_from_slice(&(row.len() as u16).to_be_bytes());
    out.extend_from_slice(row);
    out.push(family.len() as u8);
    out.extend_from_slice(family);
    out.extend_from_slice(qualifier);
    out.extend_from_slice(&timestamp.to_be_bytes());
    out.push(kind as u8 | if has_ttl { TTL_FLAG } else { 0 });
}

/// The smallest possible key of a row: every cell of the row sorts at or
/// after it. Used to seek to a row.
pub fn first_key_of_row(row: &[u8]) -> Vec<u8> {
    // Family length 0 is below every real family; timestamp MAX and the
    // lowest kind code sort first among equal (row, family, qualifier).
    let mut out = Vec::with_capacity(row.len() + KEY_OVERHEAD);
    out.extend_from_slice(&(row.len() as u16).to_be_bytes());
    out.extend_from_slice(row);
    out.push(0);
    out.extend_from_slice(&u64::MAX.to_be_bytes());
    out.push(0);
    out
}

/// The smallest key of a column within a row.
pub fn first_key_of_column(row: &[u8], family: &[u8], qualifier: &[u8]) -> Vec<u8> {
    let mut out = encode_key(
        row,
        family,
        qualifier,
        u64::MAX,
        CellKind::DeleteFamily,
        false,
    );
    let last = out.len() - 1;
    out[last] = 0;
    out
}

/// Writes into `out` the smallest key of a column within a row (as
/// [`first_key_of_column`], without allocating).
pub fn first_key_of_column_into(out: &mut Vec<u8>, row: &[u8], family: &[u8], qualifier: &[u8]) {
    out.clear();
    out.extend_from_slice(&(row.len() as u16).to_be_bytes());
    out.extend_from_slice(row);
    out.push(family.len() as u8);
    out.extend_from_slice(family);
    out.extend_from_slice(qualifier);
    out.extend_from_slice(&u64::MAX.to_be_bytes());
    out.push(0);
}

/// The row of an encoded key, without parsing the rest.
#[inline]
pub fn row_of(key: &[u8]) -> &[u8] {
    if key.len() < 2 {
        return &[];
    }
    let row_len = u16::from_be_bytes([key[0], key[1]]) as usize;
    key.get(2..2 + row_len).unwrap_or(&[])
}

/// Total order on encoded keys. Malformed keys (which readers reject before
/// they get here) fall back to byte order rather than panicking.
#[inline]
pub fn compare_keys(a: &[u8], b: &[u8]) -> Ordering {
    match (split_key(a), split_key(b)) {
        (Some(ka), Some(kb)) => compare_bytes(ka.0, kb.0)
            .then_with(|| compare_after_row((ka.1, ka.2, ka.3, ka.4), (kb.1, kb.2, kb.3, kb.4))),
        _ => a.cmp(b),
    }
}

/// [`compare_keys`] for two keys of one row, given what follows the row in
/// each (`family length ‖ family ‖ qualifier ‖ timestamp ‖ kind`): a row's
/// cells are checked for order without comparing its row again and again.
#[inline]
pub fn compare_keys_after_row(a: &[u8], b: &[u8]) -> Ordering {
    match (split_after_row(a), split_after_row(b)) {
        (Some(ka), Some(kb)) => compare_after_row(ka, kb),
        _ => a.cmp(b),
    }
}

/// (family, qualifier, timestamp, kind byte): a key without its row.
type AfterRow<'a> = (&'a [u8], &'a [u8], u64, u8);

/// The order of two keys of one row: family, qualifier, timestamp newest
/// first, then kind.
#[inline]
fn compare_after_row(a: AfterRow<'_>, b: AfterRow<'_>) -> Ordering {
    compare_bytes(a.0, b.0)
        .then_with(|| compare_bytes(a.1, b.1))
        .then_with(|| b.2.cmp(&a.2))
        .then_with(|| (a.3 & KIND_MASK).cmp(&(b.3 & KIND_MASK)))
}

/// What follows a key's row, split; `None` when it does not hold a family,
/// a timestamp and a kind byte.
#[inline]
fn split_after_row(rest: &[u8]) -> Option<AfterRow<'_>> {
    let fam_len = *rest.first()? as usize;
    let qual_at = 1 + fam_len;
    let ts_at = rest.len().checked_sub(9)?;
    if qual_at > ts_at {
        return None;
    }
    let ts = u64::from_be_bytes(rest[ts_at..ts_at + 8].try_into().ok()?);
    Some((
        &rest[1..qual_at],
        &rest[qual_at..ts_at],
        ts,
        rest[rest.len() - 1],
    ))
}

/// (row, family, qualifier, timestamp, kind byte).
pub(crate) type KeyFields<'a> = (&'a [u8], &'a [u8], &'a [u8], u64, u8);

/// (row, family, qualifier, timestamp, kind byte) without validation of the
/// kind code; fast path for comparisons.
#[inline]
pub(crate) fn split_key(key: &[u8]) -> Option<KeyFields<'_>> {
    if key.len() < KEY_OVERHEAD {
        return None;
    }
    let row_end = 2 + u16::from_be_bytes([key[0], key[1]]) as usize;
    let (family, qualifier, ts, kind) = split_after_row(key.get(row_end..)?)?;
    Some((&key[2..row_end], family, qualifier, ts, kind))
}

/// Whether two keys name the same (row, family, qualifier).
#[inline]
pub fn same_column(a: &[u8], b: &[u8]) -> bool {
    match (split_key(a), split_key(b)) {
        (Some(ka), Some(kb)) => ka.0 == kb.0 && ka.1 == kb.1 && ka.2 == kb.2,
        _ => false,
    }
}

/// A cell as readers see it. The byte fields are reference-counted: a
/// value read from a store file is a slice of its decoded block, and the
/// family and qualifier are shared by the cells of a scan that name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub family: Bytes,
    pub qualifier: Bytes,
    pub timestamp: u64,
    pub value: Bytes,
}

/// A row as readers see it: its cells in family, qualifier, newest-first order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub key: Vec<u8>,
    pub cells: Vec<Cell>,
}

/// One change to one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// `timestamp: None` takes the region's clock at write time.
    Put {
        family: Vec<u8>,
        qualifier: Vec<u8>,
        timestamp: Option<u64>,
        value: Vec<u8>,
        /// Per-cell TTL in milliseconds; capped by the family TTL.
        ttl_ms: Option<u64>,
    },
    DeleteVersion {
        family: Vec<u8>,
        qualifier: Vec<u8>,
        timestamp: u64,
    },
    DeleteColumn {
        family: Vec<u8>,
        qualifier: Vec<u8>,
        timestamp: Option<u64>,
    },
    DeleteFamily {
        family: Vec<u8>,
        timestamp: Option<u64>,
    },
    /// Every family of the row.
    DeleteRow { timestamp: Option<u64> },
}

/// Changes to one row, applied atomically: readers see all or none of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowMutation {
    pub row: Vec<u8>,
    pub mutations: Vec<Mutation>,
}

impl RowMutation {
    pub fn new(row: impl Into<Vec<u8>>) -> Self {
        RowMutation {
            row: row.into(),
            mutations: Vec::new(),
        }
    }

    pub fn put(
        mut self,
        family: impl Into<Vec<u8>>,
        qualifier: impl Into<Vec<u8>>,
        timestamp: u64,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        self.mutations.push(Mutation::Put {
            family: family.into(),
            qualifier: qualifier.into(),
            timestamp: Some(timestamp),
            value: value.into(),
            ttl_ms: None,
        });
        self
    }

    pub fn put_with_ttl(
        mut self,
        family: impl Into<Vec<u8>>,
        qualifier: impl Into<Vec<u8>>,
        timestamp: u64,
        value: impl Into<Vec<u8>>,
        ttl_ms: u64,
    ) -> Self {
        self.mutations.push(Mutation::Put {
            family: family.into(),
            qualifier: qualifier.into(),
            timestamp: Some(timestamp),
            value: value.into(),
            ttl_ms: Some(ttl_ms),
        });
        self
    }

    pub fn delete_version(
        mut self,
        family: impl Into<Vec<u8>>,
        qualifier: impl Into<Vec<u8>>,
        timestamp: u64,
    ) -> Self {
        self.mutations.push(Mutation::DeleteVersion {
            family: family.into(),
            qualifier: qualifier.into(),
            timestamp,
        });
        self
    }

    pub fn delete_column(
        mut self,
        family: impl Into<Vec<u8>>,
        qualifier: impl Into<Vec<u8>>,
        timestamp: Option<u64>,
    ) -> Self {
        self.mutations.push(Mutation::DeleteColumn {
            family: family.into(),
            qualifier: qualifier.into(),
            timestamp,
        });
        self
    }

    pub fn delete_family(mut self, family: impl Into<Vec<u8>>, timestamp: Option<u64>) -> Self {
        self.mutations.push(Mutation::DeleteFamily {
            family: family.into(),
            timestamp,
        });
        self
    }

    pub fn delete_row(mut self, timestamp: Option<u64>) -> Self {
        self.mutations.push(Mutation::DeleteRow { timestamp });
        self
    }
}

/// An entry of the storage engine: an encoded key, an optional per-cell TTL
/// and the value (empty for delete markers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: Vec<u8>,
    pub ttl_ms: Option<u64>,
    pub value: Vec<u8>,
}

/// Entries of several rows encoded into one buffer: one allocation per batch
/// instead of several per cell. Rows keep their order; a row's entries are
/// applied atomically.
///
/// A row's key is stored once, before its entries, and each entry keeps
/// only what follows the row in its key (`family length ‖ family ‖
/// qualifier ‖ timestamp ‖ kind`): a time-series point of ten fields under
/// a 100-byte row key was otherwise ten copies of the key to write, check
/// and log, where one does.
#[derive(Debug, Default, Clone)]
pub struct EntryBatch {
    buf: Vec<u8>,
    entries: Vec<EntrySpan>,
    rows: Vec<RowSpan>,
    /// Where the row being written keeps its key in `buf`, once its first
    /// entry came.
    open: Option<(usize, usize)>,
    /// An entry named another row than its row's first entry did: the
    /// batch, and any batch its rows are copied into, is refused whole
    /// ([`EntryBatch::mixes_rows`]).
    mixed_rows: bool,
    /// Bytes of the entries with whole keys, as logged and stored.
    logical_bytes: usize,
}

/// Batches are equal when their rows and entries are: whether a row was
/// known sorted is a hint, not content.
impl PartialEq for EntryBatch {
    fn eq(&self, other: &Self) -> bool {
        self.rows.len() == other.rows.len()
            && self.entries.len() == other.entries.len()
            && self.mixed_rows == other.mixed_rows
            && (0..self.rows.len())
                .all(|i| self.row_key(i) == other.row_key(i) && self.row(i).eq(other.row(i)))
    }
}
impl Eq for EntryBatch {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EntrySpan {
    /// Where the key after the row starts in the buffer; the value follows it.
    start: usize,
    key_len: usize,
    value_len: usize,
    ttl_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RowSpan {
    key_at: usize,
    key_len: usize,
    /// Index in `entries` one past the row's last entry.
    end: usize,
    /// Its writer put its entries in strictly rising key order
    /// ([`EntryBatch::end_sorted_row`]), so the MemStore need not check.
    sorted: bool,
}

/// A borrowed entry of an [`EntryBatch`]: its row, the rest of its key
/// (`family length ‖ family ‖ qualifier ‖ timestamp ‖ kind`), its TTL and
/// its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRef<'a> {
    pub row: &'a [u8],
    pub after_row: &'a [u8],
    pub ttl_ms: Option<u64>,
    pub value: &'a [u8],
}

impl EntryRef<'_> {
    /// The length of the entry's whole encoded key.
    pub fn key_len(&self) -> usize {
        2 + self.row.len() + self.after_row.len()
    }

    /// Appends the entry's whole encoded key (`u16 row length ‖ row ‖
    /// rest`) to `out`.
    pub fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.row.len() as u16).to_be_bytes());
        out.extend_from_slice(self.row);
        out.extend_from_slice(self.after_row);
    }

    /// The entry's whole encoded key.
    pub fn key(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.key_len());
        self.write_key(&mut key);
        key
    }

    /// Bytes of the entry with its whole key.
    fn logical_len(&self) -> usize {
        self.key_len() + self.value.len()
    }
}

impl EntryBatch {
    pub fn new() -> Self {
        EntryBatch::default()
    }

    /// Room for the entries of `rows`, so encoding them allocates once
    /// instead of growing (fresh pages for every step of the growth cost
    /// more than the encoding on this path).
    pub fn for_rows(rows: &[RowMutation]) -> Self {
        let mut bytes = 0;
        let mut entries = 0;
        for r in rows {
            bytes += r.row.len();
            for m in &r.mutations {
                let (f, q, v) = match m {
                    Mutation::Put {
                        family,
                        qualifier,
                        value,
                        ..
                    } => (family.len(), qualifier.len(), value.len()),
                    Mutation::DeleteVersion {
                        family, qualifier, ..
                    }
                    | Mutation::DeleteColumn {
                        family, qualifier, ..
                    } => (family.len(), qualifier.len(), 0),
                    Mutation::DeleteFamily { family, .. } => (family.len(), 0, 0),
                    // One marker per family, which the batch does not know:
                    // a guess is enough for a capacity.
                    Mutation::DeleteRow { .. } => (16, 0, 0),
                };
                bytes += f + q + v + KEY_OVERHEAD;
                entries += 1;
            }
        }
        EntryBatch::with_capacity(bytes, entries, rows.len())
    }

    /// Room for `bytes` of keys and values in `entries` entries of `rows` rows.
    pub fn with_capacity(bytes: usize, entries: usize, rows: usize) -> Self {
        EntryBatch {
            buf: Vec::with_capacity(bytes),
            entries: Vec::with_capacity(entries),
            rows: Vec::with_capacity(rows),
            ..EntryBatch::default()
        }
    }

    /// Room for `bytes` more of keys and values in `entries` more entries of
    /// `rows` more rows.
    pub fn reserve(&mut self, bytes: usize, entries: usize, rows: usize) {
        self.buf.reserve(bytes);
        self.entries.reserve(entries);
        self.rows.reserve(rows);
    }

    /// Appends an entry to the current row. Callers have checked the limits.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        row: &[u8],
        family: &[u8],
        qualifier: &[u8],
        timestamp: u64,
        kind: CellKind,
        ttl_ms: Option<u64>,
        value: &[u8],
    ) {
        self.push_with(row, family, qualifier, timestamp, kind, ttl_ms, |out| {
            out.extend_from_slice(value)
        });
    }

    /// Appends an entry whose value `write_value` encodes in place, so a
    /// typed value never needs a buffer of its own.
    #[allow(clippy::too_many_arguments)]
    pub fn push_with(
        &mut self,
        row: &[u8],
        family: &[u8],
        qualifier: &[u8],
        timestamp: u64,
        kind: CellKind,
        ttl_ms: Option<u64>,
        write_value: impl FnOnce(&mut Vec<u8>),
    ) {
        debug_assert!(!row.is_empty() && row.len() <= MAX_ROW_LEN);
        self.use_row(row);
        self.push_cell_with(family, qualifier, timestamp, kind, ttl_ms, write_value);
    }

    /// Starts the current row's key, or checks that `row` is it.
    fn use_row(&mut self, row: &[u8]) {
        match self.open {
            None => self.start_row(row),
            Some((at, len)) => {
                if self.buf[at..at + len] != *row {
                    self.mixed_rows = true;
                }
            }
        }
    }

    /// Starts a row of key `row`, whose entries [`EntryBatch::push_cell_with`]
    /// appends; the row before it must have been ended.
    pub fn start_row(&mut self, row: &[u8]) {
        self.end_misused_row();
        let at = self.buf.len();
        self.buf.extend_from_slice(row);
        self.open = Some((at, row.len()));
    }

    /// Appends an entry to the row [`EntryBatch::start_row`] started.
    pub fn push_cell_with(
        &mut self,
        family: &[u8],
        qualifier: &[u8],
        timestamp: u64,
        kind: CellKind,
        ttl_ms: Option<u64>,
        write_value: impl FnOnce(&mut Vec<u8>),
    ) {
        debug_assert!(!family.is_empty() && family.len() <= MAX_FAMILY_LEN);
        let row_len = match self.open {
            Some((_, len)) => len,
            None => {
                // No row started: a row without a key, which the batch's
                // check refuses.
                self.mixed_rows = true;
                self.open = Some((self.buf.len(), 0));
                0
            }
        };
        let start = self.buf.len();
        self.buf.push(family.len() as u8);
        self.buf.extend_from_slice(family);
        self.buf.extend_from_slice(qualifier);
        self.buf.extend_from_slice(&timestamp.to_be_bytes());
        self.buf
            .push(kind as u8 | if ttl_ms.is_some() { TTL_FLAG } else { 0 });
        let key_len = self.buf.len() - start;
        write_value(&mut self.buf);
        self.record_entry(start, key_len, row_len, ttl_ms);
    }

    /// Records the entry whose rest of key (`key_len` bytes) and value were
    /// just written from `start`, in a row of key `row_len` bytes long.
    fn record_entry(&mut self, start: usize, key_len: usize, row_len: usize, ttl_ms: Option<u64>) {
        let value_len = self.buf.len() - start - key_len;
        self.logical_bytes += 2 + row_len + key_len + value_len;
        self.entries.push(EntrySpan {
            start,
            key_len,
            value_len,
            ttl_ms,
        });
    }

    /// Appends an already encoded entry to the current row.
    pub fn push_encoded(&mut self, key: &[u8], ttl_ms: Option<u64>, value: &[u8]) {
        let row = row_of(key);
        let after_row = key.get(2 + row.len()..).unwrap_or_default();
        self.use_row(row);
        let start = self.buf.len();
        self.buf.extend_from_slice(after_row);
        self.buf.extend_from_slice(value);
        self.record_entry(start, after_row.len(), row.len(), ttl_ms);
    }

    /// A row left open where a new one begins is a caller's mistake: it is
    /// ended there (so every row's key and entries stay back to back) and
    /// the batch marked, to be refused rather than written wrong.
    fn end_misused_row(&mut self) {
        if self.open.is_some() {
            self.mixed_rows = true;
            self.close_row(false);
        }
    }

    /// Closes the current row (possibly empty).
    pub fn end_row(&mut self) {
        self.close_row(false);
    }

    fn close_row(&mut self, sorted: bool) {
        let (key_at, key_len) = self.open.take().unwrap_or((self.buf.len(), 0));
        self.rows.push(RowSpan {
            key_at,
            key_len,
            end: self.entries.len(),
            sorted,
        });
    }

    /// Ends the current row, whose entries the caller pushed in strictly
    /// rising key order ([`compare_keys`]): the MemStore takes them as
    /// they are. Rows of one family, time and kind whose qualifiers rise
    /// byte by byte are such rows.
    pub fn end_sorted_row(&mut self) {
        debug_assert!({
            let from = self.rows.last().map_or(0, |r| r.end);
            (from + 1..self.entries.len()).all(|i| {
                compare_keys_after_row(self.entry_after_row(i - 1), self.entry_after_row(i))
                    == Ordering::Less
            })
        });
        self.close_row(true);
    }

    /// Whether row `i` was ended by [`EntryBatch::end_sorted_row`].
    pub fn row_is_sorted(&self, i: usize) -> bool {
        self.rows.get(i).is_some_and(|r| r.sorted)
    }

    /// Whether some entry named another row than its row's first entry:
    /// such a batch must not be written.
    pub fn mixes_rows(&self) -> bool {
        self.mixed_rows
    }

    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    fn row_entries(&self, i: usize) -> std::ops::Range<usize> {
        let from = if i == 0 { 0 } else { self.rows[i - 1].end };
        from..self.rows[i].end
    }

    /// The row key of row `i`; `None` for a row without entries, or
    /// past the last row.
    pub fn row_key(&self, i: usize) -> Option<&[u8]> {
        let r = self.rows.get(i)?;
        (!self.row_entries(i).is_empty()).then(|| &self.buf[r.key_at..r.key_at + r.key_len])
    }

    /// Bytes (in this batch's buffer) and entries of row `i`.
    pub fn row_size(&self, i: usize) -> (usize, usize) {
        let entries = self.row_entries(i);
        let bytes = self.rows[i].key_len
            + self.entries[entries.clone()]
                .iter()
                .map(|e| e.key_len + e.value_len)
                .sum::<usize>();
        (bytes, entries.len())
    }

    /// Appends row `i` of `other` as a row of this batch.
    pub fn push_row_from(&mut self, other: &EntryBatch, i: usize) {
        self.end_misused_row();
        self.mixed_rows |= other.mixed_rows;
        let entries = other.row_entries(i);
        let r = other.rows[i];
        if entries.is_empty() {
            self.close_row(r.sorted);
            return;
        }
        // A row's key and entries lie back to back in the buffer.
        let last = other.entries[entries.end - 1];
        let shift = self.buf.len() as isize - r.key_at as isize;
        self.buf
            .extend_from_slice(&other.buf[r.key_at..last.start + last.key_len + last.value_len]);
        self.entries
            .extend(other.entries[entries.clone()].iter().map(|e| EntrySpan {
                start: (e.start as isize + shift) as usize,
                ..*e
            }));
        self.logical_bytes += other.row(i).map(|e| e.logical_len()).sum::<usize>();
        self.open = Some(((r.key_at as isize + shift) as usize, r.key_len));
        self.close_row(r.sorted);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Lets `rewrite` change every row key in place (its length stays): a
    /// row encoded before its table's salt changed gets its bucket again.
    pub fn rewrite_rows(&mut self, mut rewrite: impl FnMut(&mut [u8])) {
        for r in &self.rows {
            if r.key_len > 0 {
                rewrite(&mut self.buf[r.key_at..r.key_at + r.key_len]);
            }
        }
    }

    /// Entries (cells) in all rows.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes of keys and values, each key whole (as the WAL's and store
    /// files' readers see them), though this batch keeps a row's key once.
    pub fn bytes(&self) -> usize {
        self.logical_bytes
    }

    fn entry_after_row(&self, i: usize) -> &[u8] {
        let e = self.entries[i];
        &self.buf[e.start..e.start + e.key_len]
    }

    /// The entries of row `i`.
    pub fn row(&self, i: usize) -> impl ExactSizeIterator<Item = EntryRef<'_>> {
        let r = self.rows[i];
        let row = &self.buf[r.key_at..r.key_at + r.key_len];
        self.entries[self.row_entries(i)]
            .iter()
            .map(move |e| EntryRef {
                row,
                after_row: &self.buf[e.start..e.start + e.key_len],
                ttl_ms: e.ttl_ms,
                value: &self.buf[e.start + e.key_len..e.start + e.key_len + e.value_len],
            })
    }

    pub fn from_rows(rows: &[Vec<Entry>]) -> Self {
        let mut b = EntryBatch::new();
        for row in rows {
            for e in row {
                b.push_encoded(&e.key, e.ttl_ms, &e.value);
            }
            b.end_row();
        }
        b
    }

    pub fn to_rows(&self) -> Vec<Vec<Entry>> {
        (0..self.rows())
            .map(|i| {
                self.row(i)
                    .map(|e| Entry {
                        key: e.key(),
                        ttl_ms: e.ttl_ms,
                        value: e.value.to_vec(),
                    })
                    .collect()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_copied_between_batches_keep_their_entries() {
        let mut a = EntryBatch::new();
        a.push(b"r1", b"f", b"a", 1, CellKind::Put, None, b"x");
        a.push(b"r1", b"f", b"b", 1, CellKind::Put, Some(5), b"yy");
        a.end_row();
        a.end_row(); // an empty row
        a.push(b"r2", b"f", b"a", 2, CellKind::DeleteColumn, None, b"");
        a.end_row();
        assert_eq!(a.row_key(0), Some(&b"r1"[..]));
        assert_eq!(a.row_key(1), None);
        assert_eq!(a.row_key(2), Some(&b"r2"[..]));
        assert_eq!(a.row_size(1), (0, 0));
        let (bytes, entries) = a.row_size(0);
        assert_eq!(entries, 2);
        let mut b = EntryBatch::with_capacity(bytes, entries, 2);
        b.push(b"r0", b"f", b"z", 9, CellKind::Put, None, b"first");
        b.end_row();
        b.push_row_from(&a, 2);
        b.push_row_from(&a, 1);
        b.push_row_from(&a, 0);
        assert_eq!(b.rows(), 4);
        let rows = b.to_rows();
        assert_eq!(rows[1], a.to_rows()[2]);
        assert!(rows[2].is_empty());
        assert_eq!(rows[3], a.to_rows()[0]);
        assert_eq!(rows[3][1].ttl_ms, Some(5));
        assert_eq!(rows[3][1].value, b"yy");
        // Sizes count each entry's whole key, whichever way it came in.
        let whole = |batch: &EntryBatch| -> usize {
            batch
                .to_rows()
                .iter()
                .flatten()
                .map(|e| e.key.len() + e.value.len())
                .sum()
        };
        assert_eq!(a.bytes(), whole(&a));
        assert_eq!(b.bytes(), whole(&b));
        assert!(!a.mixes_rows() && !b.mixes_rows());
    }

    #[test]
    fn a_row_key_is_kept_once_and_rewritten_once() {
        let mut b = EntryBatch::new();
        b.start_row(b"s1-host");
        for q in [&b"a"[..], b"b", b"c"] {
            b.push_cell_with(b"f", q, 7, CellKind::Put, None, |out| out.push(q[0]));
        }
        b.end_sorted_row();
        b.push(b"s2-host", b"f", b"a", 7, CellKind::Put, None, b"x");
        b.end_row();
        assert_eq!(b.row_key(0), Some(&b"s1-host"[..]));
        assert!(b.row_is_sorted(0) && !b.row_is_sorted(1));
        // The key and three cells of 1 + 1 + 1 + 8 + 1 bytes and a 1-byte value.
        assert_eq!(b.row_size(0), (7 + 3 * 13, 3));
        b.rewrite_rows(|row| row[1] = b'9');
        let rows = b.to_rows();
        assert_eq!(rows[0].len(), 3);
        for e in &rows[0] {
            assert_eq!(KeyRef::parse(&e.key).unwrap().row, b"s9-host");
        }
        assert_eq!(KeyRef::parse(&rows[1][0].key).unwrap().row, b"s9-host");
        assert_eq!(
            KeyRef::parse(&rows[0][2].key).unwrap().qualifier,
            b"c",
            "entries keep their own rest of the key"
        );
    }

    #[test]
    fn an_entry_naming_another_row_marks_the_batch() {
        let mut b = EntryBatch::new();
        b.push(b"r1", b"f", b"a", 1, CellKind::Put, None, b"");
        b.end_row();
        b.push(b"r2", b"f", b"a", 1, CellKind::Put, None, b"");
        assert!(!b.mixes_rows());
        b.push(b"r3", b"f", b"b", 1, CellKind::Put, None, b"");
        b.end_row();
        assert!(b.mixes_rows());
        // A copy of any of its rows (a split by region) carries the mark:
        // the batch is refused wherever its rows go.
        let mut copy = EntryBatch::new();
        copy.push_row_from(&b, 0);
        assert!(copy.mixes_rows());
        // A row begun while another is open, or cells without a row, are
        // marked too, and the rows stay whole.
        let mut open = EntryBatch::new();
        open.start_row(b"r1");
        open.push_cell_with(b"f", b"a", 1, CellKind::Put, None, |_| {});
        open.start_row(b"r2");
        open.push_cell_with(b"f", b"b", 1, CellKind::Put, None, |_| {});
        open.end_row();
        assert!(open.mixes_rows());
        assert_eq!(open.rows(), 2);
        assert_eq!(open.row_key(0), Some(&b"r1"[..]));
        assert_eq!(open.row_key(1), Some(&b"r2"[..]));
        let mut keyless = EntryBatch::new();
        keyless.push_cell_with(b"f", b"a", 1, CellKind::Put, None, |_| {});
        keyless.end_row();
        assert!(keyless.mixes_rows());
    }

    fn k(row: &[u8], fam: &[u8], q: &[u8], ts: u64, kind: CellKind) -> Vec<u8> {
        encode_key(row, fam, q, ts, kind, false)
    }

    #[test]
    fn order_is_row_family_qualifier_newest_first_markers_first() {
        let mut keys = [
            k(b"r2", b"f", b"a", 1, CellKind::Put),
            k(b"r1", b"g", b"a", 1, CellKind::Put),
            k(b"r1", b"f", b"b", 5, CellKind::Put),
            k(b"r1", b"f", b"a", 1, CellKind::Put),
            k(b"r1", b"f", b"a", 9, CellKind::Put),
            k(b"r1", b"f", b"a", 9, CellKind::DeleteColumn),
            k(b"r1", b"f", b"", 9, CellKind::DeleteFamily),
            k(b"r", b"f", b"zz", 1, CellKind::Put),
        ];
        keys.sort_by(|a, b| compare_keys(a, b));
        let shown: Vec<_> = keys
            .iter()
            .map(|key| {
                let p = KeyRef::parse(key).unwrap();
                (
                    p.row.to_vec(),
                    p.family.to_vec(),
                    p.qualifier.to_vec(),
                    p.timestamp,
                    p.kind,
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                (
                    b"r".to_vec(),
                    b"f".to_vec(),
                    b"zz".to_vec(),
                    1,
                    CellKind::Put
                ),
                (
                    b"r1".to_vec(),
                    b"f".to_vec(),
                    b"".to_vec(),
                    9,
                    CellKind::DeleteFamily
                ),
                (
                    b"r1".to_vec(),
                    b"f".to_vec(),
                    b"a".to_vec(),
                    9,
                    CellKind::DeleteColumn
                ),
                (
                    b"r1".to_vec(),
                    b"f".to_vec(),
                    b"a".to_vec(),
                    9,
                    CellKind::Put
                ),
                (
                    b"r1".to_vec(),
                    b"f".to_vec(),
                    b"a".to_vec(),
                    1,
                    CellKind::Put
                ),
                (
                    b"r1".to_vec(),
                    b"f".to_vec(),
                    b"b".to_vec(),
                    5,
                    CellKind::Put
                ),
                (
                    b"r1".to_vec(),
                    b"g".to_vec(),
                    b"a".to_vec(),
                    1,
                    CellKind::Put
                ),
                (
                    b"r2".to_vec(),
                    b"f".to_vec(),
                    b"a".to_vec(),
                    1,
                    CellKind::Put
                ),
            ]
        );
    }

    #[test]
    fn first_key_of_row_sorts_before_every_cell_of_the_row() {
        let first = first_key_of_row(b"r1");
        assert_eq!(
            compare_keys(
                &first,
                &k(b"r1", b"\0", b"", u64::MAX, CellKind::DeleteFamily)
            ),
            Ordering::Less
        );
        assert_eq!(
            compare_keys(&first, &k(b"r0\xff", b"z", b"z", 0, CellKind::Put)),
            Ordering::Greater
        );
        let col = first_key_of_column(b"r1", b"f", b"q");
        assert_eq!(
            compare_keys(
                &col,
                &k(b"r1", b"f", b"q", u64::MAX, CellKind::DeleteFamily)
            ),
            Ordering::Less
        );
        assert_eq!(
            compare_keys(&col, &k(b"r1", b"f", b"p", 0, CellKind::Put)),
            Ordering::Greater
        );
    }

    #[test]
    fn parse_rejects_malformed_keys_without_panicking() {
        assert!(KeyRef::parse(b"").is_none());
        assert!(KeyRef::parse(&[0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]).is_none());
        let mut good = k(b"r", b"f", b"q", 3, CellKind::Put);
        assert!(KeyRef::parse(&good).is_some());
        let last = good.len() - 1;
        good[last] = 9;
        assert!(KeyRef::parse(&good).is_none());
    }
}
