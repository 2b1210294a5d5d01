//! The data block codec.
//!
//! # Data block body
//!
//! ```text
//! entry*  restart_offset* (u32 LE each)  restart_count (u32 LE)
//! entry = varint shared · varint unshared · varint value_len
//!         · key suffix (unshared bytes)
//!         · [varint ttl_ms, when the key's kind byte has the TTL flag]
//!         · value
//! ```
//!
//! `shared` is how many leading bytes the key has in common with the previous
//! key; it is 0 at every restart point (every 16th entry), so a seek binary
//! searches the restarts and then decodes at most 16 entries.

use std::cmp::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use crate::cell::{KIND_MASK, TTL_FLAG, compare_keys};
use crate::codec::{DecodeError, Reader, common_prefix_len, put_varint, varint_len};

pub const RESTART_INTERVAL: usize = 16;

/// Builds a data block body.
#[derive(Debug, Default)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    last_key: Vec<u8>,
    count: usize,
    prefix: bool,
}

impl BlockBuilder {
    pub fn new(prefix_encoding: bool) -> Self {
        BlockBuilder {
            prefix: prefix_encoding,
            ..Default::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the body would have now.
    pub fn size(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    /// The key last added to the block being built (empty when none).
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    pub fn add(&mut self, key: &[u8], ttl_ms: Option<u64>, value: &[u8]) {
        let shared = if self.count % RESTART_INTERVAL == 0 {
            self.restarts.push(self.buf.len() as u32);
            0
        } else if self.prefix {
            crate::codec::common_prefix_len(&self.last_key, key)
        } else {
            0
        };
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&key[shared..]);
        if let Some(ttl) = ttl_ms {
            put_varint(&mut self.buf, ttl);
        }
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.count += 1;
    }

    /// Returns the finished body and resets the builder.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut body = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            body.extend_from_slice(&r.to_le_bytes());
        }
        body.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.restarts.clear();
        self.last_key.clear();
        self.count = 0;
        body
    }
}

/// Entries (key, TTL, value) back to back in two buffers, in the order
/// given: what a block is made of ([`BlockCells`]) or decoded into for a
/// reader that walks every entry once ([`EntryCursor`]).
#[derive(Debug, Default)]
pub struct Entries {
    keys: Vec<u8>,
    values: Vec<u8>,
    /// Per entry: where its key and value end, its TTL.
    ends: Vec<(usize, usize, Option<u64>)>,
}

impl Entries {
    pub fn push(&mut self, key: &[u8], ttl_ms: Option<u64>, value: &[u8]) {
        self.keys.extend_from_slice(key);
        self.values.extend_from_slice(value);
        self.ends.push((self.keys.len(), self.values.len(), ttl_ms));
    }

    /// Like [`Self::push`], the key and value made in place by `write`,
    /// which appends the key's bytes to its first buffer and the value's
    /// to its second.
    pub fn push_with(
        &mut self,
        ttl_ms: Option<u64>,
        write: impl FnOnce(&mut Vec<u8>, &mut Vec<u8>) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        write(&mut self.keys, &mut self.values)?;
        self.ends.push((self.keys.len(), self.values.len(), ttl_ms));
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of all keys and values.
    pub fn bytes(&self) -> usize {
        self.keys.len() + self.values.len()
    }

    /// The key last added (empty when none).
    pub fn last_key(&self) -> &[u8] {
        self.ends.len().checked_sub(1).map_or(&[], |i| self.key(i))
    }

    pub fn key(&self, i: usize) -> &[u8] {
        let from = i.checked_sub(1).map_or(0, |p| self.ends[p].0);
        &self.keys[from..self.ends[i].0]
    }

    /// Entry `i`: key, TTL, value.
    pub fn entry(&self, i: usize) -> (&[u8], Option<u64>, &[u8]) {
        let (from_key, from_value) = i
            .checked_sub(1)
            .map_or((0, 0), |p| (self.ends[p].0, self.ends[p].1));
        let (key_end, value_end, ttl) = self.ends[i];
        (
            &self.keys[from_key..key_end],
            ttl,
            &self.values[from_value..value_end],
        )
    }

    /// Empties it, keeping its buffers.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.values.clear();
        self.ends.clear();
    }
}

/// A data block's entries as they were added, with the size of the body
/// [`BlockBuilder`] would make of them (prefix encoded). A time-series
/// family's block is encoded from these (`ts_block::encode_cells`) and the
/// body is built only where that encoding is not smaller: building the
/// body and reading it back first was a tenth of flush and compaction.
#[derive(Debug, Default)]
pub struct BlockCells {
    entries: Entries,
    /// Bytes of the body's entries.
    entries_len: usize,
}

impl BlockCells {
    pub fn add(&mut self, key: &[u8], ttl_ms: Option<u64>, value: &[u8]) {
        self.add_sharing(key, ttl_ms, value, self.shared_with_last(key));
    }

    /// Bytes `key` shares with the key last added (0 when none).
    pub fn shared_with_last(&self, key: &[u8]) -> usize {
        common_prefix_len(self.last_key(), key)
    }

    /// [`Self::add`] of a key that shares `shared_with_last` bytes with
    /// the key last added ([`Self::shared_with_last`]), which the caller
    /// worked out already.
    pub fn add_sharing(
        &mut self,
        key: &[u8],
        ttl_ms: Option<u64>,
        value: &[u8],
        shared_with_last: usize,
    ) {
        let shared = match self.len() {
            n if n % RESTART_INTERVAL == 0 => 0,
            _ => shared_with_last,
        };
        self.entries_len += varint_len(shared as u64)
            + varint_len((key.len() - shared) as u64)
            + varint_len(value.len() as u64)
            + (key.len() - shared)
            + ttl_ms.map_or(0, varint_len)
            + value.len();
        self.entries.push(key, ttl_ms, value);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The key last added (empty when none).
    pub fn last_key(&self) -> &[u8] {
        self.entries.last_key()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes the body would have ([`BlockBuilder::size`]).
    pub fn size(&self) -> usize {
        self.entries_len + 4 * self.len().div_ceil(RESTART_INTERVAL) + 4
    }

    /// Entry `i`: key, TTL, value.
    pub fn entry(&self, i: usize) -> (&[u8], Option<u64>, &[u8]) {
        self.entries.entry(i)
    }

    /// The body [`BlockBuilder`] makes of these entries.
    pub fn body(&self) -> Vec<u8> {
        let mut b = BlockBuilder::new(true);
        for i in 0..self.len() {
            let (key, ttl, value) = self.entry(i);
            b.add(key, ttl, value);
        }
        b.finish()
    }

    /// Empties it, keeping its buffers for the next block.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.entries_len = 0;
    }
}

/// A forward cursor over a block's [`Entries`]: how a compaction walks a
/// time-series block, decoded straight into its entries
/// (`ts_block::decode_entries`) rather than into a prefix-encoded body
/// that a [`BlockIter`] would then decode again.
#[derive(Debug)]
pub struct EntryCursor {
    entries: Entries,
    at: usize,
}

impl EntryCursor {
    pub fn new(entries: Entries) -> Self {
        EntryCursor { entries, at: 0 }
    }

    /// Its entries' buffers, for the next block's.
    pub fn into_entries(self) -> Entries {
        self.entries
    }

    pub fn valid(&self) -> bool {
        self.at < self.entries.len()
    }

    pub fn key(&self) -> &[u8] {
        self.entries.key(self.at)
    }

    pub fn value(&self) -> &[u8] {
        self.entries.entry(self.at).2
    }

    pub fn ttl_ms(&self) -> Option<u64> {
        self.entries.entry(self.at).1
    }

    pub fn advance(&mut self) {
        self.at += 1;
    }

    /// To the first entry at or after `target`, from the first entry.
    pub fn seek(&mut self, target: &[u8]) {
        self.at = crate::codec::partition_index(self.entries.len(), |i| {
            compare_keys(self.entries.key(i), target) == Ordering::Less
        });
    }

    /// On to the first entry at or after `target` (not before the current).
    pub fn skip_to(&mut self, target: &[u8]) {
        while self.valid() && compare_keys(self.key(), target) == Ordering::Less {
            self.at += 1;
        }
    }
}

/// A decoded data block: its body and where the entries end.
#[derive(Debug)]
pub struct Block {
    data: Bytes,
    entries_end: usize,
    restarts: Vec<u32>,
    /// Decoded from a time-series block: a projected read of it is worth
    /// decoding rather than reading this whole one.
    pub from_time_series: bool,
}

impl Block {
    /// Checks the restart array; entries are checked as they are decoded.
    pub fn parse(data: Vec<u8>) -> Result<Block, DecodeError> {
        let n_at = data.len().checked_sub(4).ok_or(DecodeError {
            offset: 0,
            what: "data block too short",
        })?;
        let n = u32::from_le_bytes(data[n_at..].try_into().expect("4 bytes")) as usize;
        let restarts_at =
            n.checked_mul(4)
                .and_then(|b| n_at.checked_sub(b))
                .ok_or(DecodeError {
                    offset: n_at,
                    what: "restart count out of range",
                })?;
        let mut restarts = Vec::with_capacity(n);
        for i in 0..n {
            let at = restarts_at + 4 * i;
            let r = u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"));
            if r as usize >= restarts_at.max(1) || restarts.last().is_some_and(|p| *p >= r) {
                return Err(DecodeError {
                    offset: at,
                    what: "restart offset out of order or out of range",
                });
            }
            restarts.push(r);
        }
        if n == 0 || restarts[0] != 0 {
            return Err(DecodeError {
                offset: restarts_at,
                what: "data block has no first restart",
            });
        }
        Ok(Block {
            data: Bytes::from(data),
            entries_end: restarts_at,
            restarts,
            from_time_series: false,
        })
    }

    /// Heap bytes, for the cache's budget.
    pub fn charge(&self) -> usize {
        self.data.len() + self.restarts.capacity() * 4 + 64
    }
}

/// A cursor over one block.
#[derive(Debug, Clone)]
pub struct BlockIter {
    block: Arc<Block>,
    /// Offset of the current entry; `entries_end` when exhausted.
    at: usize,
    next_at: usize,
    key: Vec<u8>,
    /// Leading bytes the current key shares with the one before it.
    shared: usize,
    ttl_ms: Option<u64>,
    value: (usize, usize),
}

impl BlockIter {
    /// Positioned before the first entry; call [`BlockIter::seek_first`].
    pub fn new(block: Arc<Block>) -> Self {
        let end = block.entries_end;
        BlockIter {
            block,
            at: end,
            next_at: 0,
            key: Vec::new(),
            shared: 0,
            ttl_ms: None,
            value: (0, 0),
        }
    }

    pub fn valid(&self) -> bool {
        self.at < self.block.entries_end
    }
    pub fn key(&self) -> &[u8] {
        &self.key
    }
    pub fn ttl_ms(&self) -> Option<u64> {
        self.ttl_ms
    }
    pub fn value(&self) -> &[u8] {
        &self.block.data[self.value.0..self.value.1]
    }
    /// The value as a slice of the block, without copying.
    pub fn value_bytes(&self) -> Bytes {
        self.block.data.slice(self.value.0..self.value.1)
    }

    /// Decodes the entry at `at`, whose predecessor's key is in `self.key`.
    fn decode_at(&mut self, at: usize) -> Result<(), DecodeError> {
        let data = &self.block.data[..self.block.entries_end];
        let mut r = Reader::at(data, at);
        let shared = r.len(self.key.len(), "shared key length")?;
        let unshared = r.len(data.len(), "key suffix length")?;
        let value_len = r.len(data.len(), "value length")?;
        let suffix = r.bytes(unshared, "key suffix")?;
        self.key.truncate(shared);
        self.key.extend_from_slice(suffix);
        self.shared = shared;
        if self.key.len() < crate::cell::KEY_OVERHEAD {
            return Err(DecodeError {
                offset: at,
                what: "key shorter than its fixed fields",
            });
        }
        self.ttl_ms = if self.key[self.key.len() - 1] & TTL_FLAG != 0 {
            Some(r.varint("cell ttl")?)
        } else {
            None
        };
        let v_at = r.pos();
        r.bytes(value_len, "value")?;
        self.at = at;
        self.value = (v_at, v_at + value_len);
        self.next_at = r.pos();
        Ok(())
    }

    pub fn seek_first(&mut self) -> Result<(), DecodeError> {
        self.key.clear();
        if self.block.entries_end == 0 {
            self.at = self.block.entries_end;
            return Ok(());
        }
        self.decode_at(0)
    }

    pub fn advance(&mut self) -> Result<(), DecodeError> {
        if !self.valid() {
            return Ok(());
        }
        if self.next_at >= self.block.entries_end {
            self.at = self.block.entries_end;
            return Ok(());
        }
        self.decode_at(self.next_at)
    }

    /// Decodes the entry at restart `i` (whose shared length must be 0)
    /// into `self.key`; a seek's binary search compares it in place.
    fn restart_key(&mut self, i: usize) -> Result<&[u8], DecodeError> {
        self.key.clear();
        let at = self.block.restarts[i] as usize;
        self.decode_at(at)?;
        Ok(&self.key)
    }

    /// Index of the last restart whose key is before `target` (0 if none).
    fn restart_before(&mut self, target: &[u8], strictly: bool) -> Result<usize, DecodeError> {
        let (mut lo, mut hi) = (0usize, self.block.restarts.len());
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            let ord = compare_keys(self.restart_key(mid)?, target);
            if ord == Ordering::Less || (!strictly && ord == Ordering::Equal) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Positions at the first entry with key >= `target`; invalid if none.
    pub fn seek(&mut self, target: &[u8]) -> Result<(), DecodeError> {
        if self.block.entries_end == 0 {
            // A projected block that kept nothing.
            self.at = 0;
            return Ok(());
        }
        let r = self.restart_before(target, true)?;
        self.key.clear();
        self.decode_at(self.block.restarts[r] as usize)?;
        while self.valid() && compare_keys(&self.key, target) == Ordering::Less {
            self.advance()?;
        }
        Ok(())
    }

    /// Steps forward to the first entry with key >= `target` (invalid if
    /// the block has none): for targets a few entries ahead, cheaper than a
    /// seek's binary search.
    ///
    /// When `target` is the first key of a column (as skips over unwanted
    /// columns use), entries of the target's row and family — known from
    /// the prefix they share with the entry before — compare by qualifier
    /// alone, without parsing the whole key.
    pub fn skip_to(&mut self, target: &[u8]) -> Result<(), DecodeError> {
        let column_start = crate::cell::split_key(target)
            .filter(|&(_, _, _, ts, kind)| ts == u64::MAX && kind & KIND_MASK == 0);
        let Some((row, family, qualifier, _, _)) = column_start else {
            while self.valid() && compare_keys(&self.key, target) == Ordering::Less {
                self.advance()?;
            }
            return Ok(());
        };
        // Bytes of row length, row, family length and family.
        let prefix = 2 + row.len() + 1 + family.len();
        let mut in_column_family = false;
        // Where the previous entry's qualifier first fell below the target's,
        // if it did at a byte both have. An entry sharing that byte with the
        // previous one falls below at the same place: no compare needed.
        // (One whose qualifier ends before that byte is a proper prefix of
        // the target's, so also below it.)
        let mut below_at: Option<usize> = None;
        while self.valid() {
            in_column_family = if in_column_family && self.shared >= prefix {
                true
            } else {
                self.key.len() >= prefix + 9 && self.key[..prefix] == target[..prefix]
            };
            let before = if !in_column_family {
                below_at = None;
                compare_keys(&self.key, target) == Ordering::Less
            } else if below_at.is_some_and(|d| self.shared > prefix + d) {
                true
            } else {
                let (below, at) = qualifier_below(&self.key[prefix..self.key.len() - 9], qualifier);
                below_at = at;
                below
            };
            if !before {
                break;
            }
            self.advance()?;
        }
        Ok(())
    }

    /// The last key in the block strictly before `target`, if any.
    pub fn last_key_before(&mut self, target: &[u8]) -> Result<Option<Vec<u8>>, DecodeError> {
        if self.block.entries_end == 0 {
            return Ok(None);
        }
        let r = self.restart_before(target, true)?;
        self.key.clear();
        self.decode_at(self.block.restarts[r] as usize)?;
        let mut last = None;
        while self.valid() && compare_keys(&self.key, target) == Ordering::Less {
            last = Some(self.key.clone());
            self.advance()?;
        }
        Ok(last)
    }
}

/// Whether qualifier `q` sorts before `target`, and the index of the
/// first byte where it is smaller (`None` when it is not below, or is below
/// only by being a proper prefix). Qualifiers are short: a byte loop beats
/// a call to `memcmp`.
#[inline]
fn qualifier_below(q: &[u8], target: &[u8]) -> (bool, Option<usize>) {
    for (i, (a, b)) in q.iter().zip(target).enumerate() {
        if a != b {
            return (a < b, (a < b).then_some(i));
        }
    }
    (q.len() < target.len(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{CellKind, encode_key};

    fn build(n: u64, prefix: bool) -> (Arc<Block>, Vec<Vec<u8>>) {
        let mut b = BlockBuilder::new(prefix);
        let mut keys = vec![];
        for i in 0..n {
            let key = encode_key(
                format!("row{:04}", i / 3).as_bytes(),
                b"f",
                b"q",
                1000 - i % 3,
                CellKind::Put,
                i % 5 == 0,
            );
            b.add(&key, (i % 5 == 0).then_some(i), format!("v{i}").as_bytes());
            keys.push(key);
        }
        (Arc::new(Block::parse(b.finish()).unwrap()), keys)
    }

    /// Entries kept as added have the size of the body the builder makes
    /// of them after every entry (the writer ends its blocks by it) and
    /// give that body, TTLs, long values and restarts included.
    #[test]
    fn block_cells_size_and_body_are_the_builders() {
        let mut b = BlockBuilder::new(true);
        let mut cells = BlockCells::default();
        for i in 0..200u64 {
            let key = encode_key(
                format!("row{:04}", i / 7).as_bytes(),
                b"f",
                format!("q{}", i % 7).as_bytes(),
                1_000_000 - i,
                CellKind::Put,
                i % 5 == 0,
            );
            let ttl = (i % 5 == 0).then_some(i << (i % 40));
            let value = vec![i as u8; (i as usize * 13) % 300];
            b.add(&key, ttl, &value);
            cells.add(&key, ttl, &value);
            assert_eq!(cells.size(), b.size(), "after entry {i}");
            assert_eq!(cells.entry(i as usize), (&key[..], ttl, &value[..]));
        }
        assert_eq!(cells.len(), 200);
        assert_eq!(cells.body(), b.finish());
        cells.clear();
        assert!(cells.is_empty());
        assert_eq!(cells.size(), BlockBuilder::new(true).size());
    }

    /// Skipping to a column lands where a plain key comparison would,
    /// however the qualifiers share prefixes with each other and the target.
    #[test]
    fn skipping_to_a_column_lands_on_its_first_key() {
        let qualifiers: [&[u8]; 9] = [
            b"a", b"ab", b"abc", b"abd", b"abda", b"b", b"ba", b"bab", b"c",
        ];
        let mut keys = Vec::new();
        for row in [&b"r1"[..], b"r2", b"r3"] {
            for family in [&b"f"[..], b"g"] {
                for q in qualifiers {
                    for ts in [9, 3] {
                        keys.push(encode_key(row, family, q, ts, CellKind::Put, false));
                    }
                }
            }
        }
        for prefix in [true, false] {
            let mut b = BlockBuilder::new(prefix);
            for k in &keys {
                b.add(k, None, b"v");
            }
            let block = Arc::new(Block::parse(b.finish()).unwrap());
            let targets: [&[u8]; 6] = [b"", b"aa", b"abcz", b"abd", b"bb", b"d"];
            for row in [&b"r0"[..], b"r2", b"r4"] {
                for family in [&b"f"[..], b"g"] {
                    for q in qualifiers.iter().chain(targets.iter()) {
                        let target = crate::cell::first_key_of_column(row, family, q);
                        let want = keys
                            .iter()
                            .find(|k| compare_keys(k, &target) != Ordering::Less);
                        for from in (0..keys.len()).step_by(5) {
                            if compare_keys(&keys[from], &target) == Ordering::Greater {
                                break;
                            }
                            let mut it = BlockIter::new(block.clone());
                            it.seek(&keys[from]).unwrap();
                            it.skip_to(&target).unwrap();
                            assert_eq!(it.valid().then(|| it.key()), want.map(|k| &k[..]));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn iterate_and_seek_every_key() {
        for prefix in [true, false] {
            let (block, keys) = build(100, prefix);
            let mut it = BlockIter::new(block.clone());
            it.seek_first().unwrap();
            for (i, k) in keys.iter().enumerate() {
                assert!(it.valid());
                assert_eq!(it.key(), &k[..]);
                assert_eq!(it.value(), format!("v{i}").as_bytes());
                assert_eq!(it.ttl_ms(), (i % 5 == 0).then_some(i as u64));
                it.advance().unwrap();
            }
            assert!(!it.valid());
            for (i, k) in keys.iter().enumerate() {
                let mut it = BlockIter::new(block.clone());
                it.seek(k).unwrap();
                assert_eq!(it.key(), &k[..]);
                let before = it.last_key_before(k).unwrap();
                assert_eq!(
                    before.as_deref(),
                    if i == 0 { None } else { Some(&keys[i - 1][..]) }
                );
            }
        }
    }
}
