//! `DATA_BLOCK_ENCODING => TIME_SERIES`: a data block stored by column,
//! with the codecs time series want, transcoded from and back to the
//! standard block body (so the block cache, iterators and seeks are the
//! same for every encoding; the cost is paid once per block read from
//! disk).
//!
//! A block's entries are grouped into rows (consecutive entries with the
//! same row key). What a time-series block repeats from row to row costs
//! about a bit; what changes is coded by how it changes:
//!
//! * **regular rows** cost one bit: the row key's counter and the first
//!   timestamp move by the same step as before, with the same columns,
//!   one timestamp for all cells, all plain puts.
//! * **row keys**: a key that differs from the previous one only in its last
//!   8 bytes, read as a big-endian counter (a timestamp or reversed
//!   timestamp field), is stored as the delta-of-delta of that counter
//!   (Gorilla's timestamps); any other key as shared-prefix length and
//!   suffix.
//! * **columns**: (family, qualifier) pairs go into a dictionary; a row
//!   whose cells name the same columns as the row before costs one bit.
//! * **cell timestamps**: the row's first as a delta-of-delta against the
//!   rows before; one bit when every cell of the row has that timestamp.
//! * **kinds and TTLs**: one bit when every cell of the row is a put
//!   without a TTL.
//! * **values**, per column, by the best of four codecs:
//!   - *decimal*: floats that are all exactly `m / 10^e` for a shared `e`
//!     (sensor values with a few decimals, VictoriaMetrics' observation):
//!     the mantissas' deltas, zigzagged, Rice-coded with a parameter fitted
//!     to the column;
//!   - *xor*: other floats, Gorilla's XOR with the previous value;
//!   - *integer*: int or uint values, deltas Rice-coded like decimals;
//!   - *raw*: anything else (strings, booleans, delete markers), each value
//!     length-prefixed.
//!
//! # Layout
//!
//! ```text
//! u8 format (1)
//! varint entries · varint rows
//! varint families · len-prefixed each
//! varint columns · per column: varint family index · len-prefixed qualifier
//! varint bytes · row bit stream      (per row, see `encode_rows`)
//! varint bytes · row key suffixes    (of keys not coded as a counter step)
//! per column: u8 codec · codec parameters · varint bytes · value data
//! ```
//!
//! Bit streams are little-endian: bits fill each byte from its lowest bit.
//! Decoding checks every count and length against what is left and against
//! the size the rebuilt body may have; damage is a [`DecodeError`], never a
//! panic or a wrong block.

use crate::cell::{KEY_OVERHEAD, KIND_MASK, TTL_FLAG, encode_key_into};
use crate::codec::{DecodeError, Reader, put_len_prefixed, put_varint};

use super::block::{Block, BlockBuilder, BlockCells, BlockIter, Entries};
use super::columns::{BlockRead, ColumnRows, ColumnRuns, ColumnSelect};
use crate::value::Value;

const FORMAT: u8 = 1;

const CODEC_RAW: u8 = 0;
const CODEC_DECIMAL: u8 = 1;
const CODEC_XOR: u8 = 2;
const CODEC_INT: u8 = 3;

/// Value tags of `crate::value` that the numeric codecs understand.
const TAG_FLOAT: u8 = 1;
const TAG_INT: u8 = 2;
const TAG_UINT: u8 = 3;

/// Largest decimal exponent tried: 10^15 and every mantissa below 2^53
/// are exact as f64, so `m / 10^e` is one correctly rounded division.
const MAX_DECIMAL_EXP: u32 = 15;
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];
const MAX_EXACT_MANTISSA: f64 = (1u64 << 53) as f64;

/// A Rice code's unary part longer than this escapes to a length code, so
/// one outlier (a series boundary) costs bits, not thousands.
const RICE_ESCAPE: u32 = 16;

fn err(offset: usize, what: &'static str) -> DecodeError {
    DecodeError { offset, what }
}

// ---------------------------------------------------------------- bits --

/// Appends bits, lowest first.
#[derive(Default)]
struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl BitWriter {
    /// The low `n` (<= 57) bits of `v`.
    fn bits(&mut self, v: u64, n: u32) {
        debug_assert!(n <= 57);
        if n == 0 {
            return;
        }
        self.acc |= (v & ((1u64 << n) - 1)) << self.n;
        self.n += n;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    fn wide(&mut self, v: u64, n: u32) {
        if n > 32 {
            self.bits(v, 32);
            self.bits(v >> 32, n - 32);
        } else {
            self.bits(v, n);
        }
    }

    fn bit(&mut self, b: bool) {
        self.bits(u64::from(b), 1);
    }

    /// `zeros` zero bits, then a one.
    fn unary(&mut self, zeros: u32) {
        let mut z = zeros;
        while z > 32 {
            self.bits(0, 32);
            z -= 32;
        }
        self.bits(1 << z, z + 1);
    }

    /// Any u64: its bit length n in unary, then its n - 1 low bits (the
    /// top one is implied). 0 costs 1 bit, 1 two, 2..=3 four.
    fn len_code(&mut self, v: u64) {
        let n = 64 - v.leading_zeros();
        self.unary(n);
        if n > 1 {
            self.wide(v, n - 1);
        }
    }

    fn signed(&mut self, v: i64) {
        self.len_code(zigzag(v));
    }

    /// Rice code with parameter `k`, escaping long quotients.
    fn rice(&mut self, v: u64, k: u32) {
        let q = v >> k;
        if q < u64::from(RICE_ESCAPE) {
            self.unary(q as u32);
            self.wide(v, k);
        } else {
            self.bits(0, RICE_ESCAPE);
            self.len_code(v);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

/// Reads what a [`BitWriter`] wrote; running past the end is an error.
struct BitReader<'a> {
    data: &'a [u8],
    /// Next byte of `data` to load.
    at: usize,
    acc: u64,
    n: u32,
    /// Offset of the stream in the payload, for errors.
    base: usize,
}

impl<'a> BitReader<'a> {
    fn new(data: &'a [u8], base: usize) -> Self {
        BitReader {
            data,
            at: 0,
            acc: 0,
            n: 0,
            base,
        }
    }

    fn fail<T>(&self, what: &'static str) -> Result<T, DecodeError> {
        Err(err(self.base + self.at, what))
    }

    #[inline]
    fn refill(&mut self) {
        debug_assert!(self.n < 57);
        // Eight bytes at once where eight are left: as many whole bytes
        // as fit above the bits held.
        if let Some(word) = self.data.get(self.at..self.at + 8) {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            // Called with fewer than 57 bits held, so 0..=7 bytes fit and
            // the mask's shift stays below 64.
            let take = (63 - self.n) / 8;
            self.acc |= word << self.n;
            // The bytes not taken were shifted in above them: drop them.
            self.acc &= (1u64 << (self.n + take * 8)) - 1;
            self.at += take as usize;
            self.n += take * 8;
            return;
        }
        while self.n <= 56 && self.at < self.data.len() {
            self.acc |= u64::from(self.data[self.at]) << self.n;
            self.at += 1;
            self.n += 8;
        }
    }

    /// `n` (<= 32) bits.
    #[inline]
    fn bits(&mut self, n: u32) -> Result<u64, DecodeError> {
        if n == 0 {
            return Ok(0);
        }
        if self.n < n {
            self.refill();
            if self.n < n {
                return self.fail("bit stream ends early");
            }
        }
        let v = self.acc & ((1u64 << n) - 1);
        self.acc >>= n;
        self.n -= n;
        Ok(v)
    }

    fn wide(&mut self, n: u32) -> Result<u64, DecodeError> {
        if n > 32 {
            let lo = self.bits(32)?;
            let hi = self.bits(n - 32)?;
            Ok(lo | hi << 32)
        } else {
            self.bits(n)
        }
    }

    #[inline]
    fn bit(&mut self) -> Result<bool, DecodeError> {
        Ok(self.bits(1)? == 1)
    }

    /// How many one bits come next, up to `max` and to the bits one
    /// refill holds (so at most 63), none consumed.
    #[inline]
    fn peek_ones(&mut self, max: usize) -> usize {
        if self.n < 57 {
            self.refill();
        }
        let held = self.n.min(63);
        ((!self.acc).trailing_zeros().min(held) as usize).min(max)
    }

    /// Consumes `n` bits [`Self::peek_ones`] counted.
    #[inline]
    fn skip_peeked(&mut self, n: usize) {
        debug_assert!(n < 64 && n as u32 <= self.n);
        self.acc >>= n;
        self.n -= n as u32;
    }

    /// Zero bits before the next one (at most `max`; `max` zeros in a row
    /// are returned as `max` without a one consumed).
    #[inline]
    fn zeros(&mut self, max: u32) -> Result<u32, DecodeError> {
        let mut count = 0;
        loop {
            if self.n == 0 {
                self.refill();
                if self.n == 0 {
                    return self.fail("bit stream ends early");
                }
            }
            let tz = self.acc.trailing_zeros().min(self.n);
            if count + tz >= max {
                let take = max - count;
                self.acc >>= take;
                self.n -= take;
                return Ok(max);
            }
            if tz < self.n {
                self.acc >>= tz + 1;
                self.n -= tz + 1;
                return Ok(count + tz);
            }
            count += tz;
            self.acc = 0;
            self.n = 0;
        }
    }

    fn len_code(&mut self) -> Result<u64, DecodeError> {
        let n = self.zeros(65)?;
        match n {
            0 => Ok(0),
            1 => Ok(1),
            2..=64 => Ok(self.wide(n - 1)? | 1 << (n - 1)),
            _ => self.fail("length code too long"),
        }
    }

    fn signed(&mut self) -> Result<i64, DecodeError> {
        Ok(unzigzag(self.len_code()?))
    }

    #[inline(always)]
    fn rice(&mut self, k: u32) -> Result<u64, DecodeError> {
        // The common case, the whole code among the bits held: the
        // quotient's zeros and its one, then k bits. A code is mostly a
        // few bits: refilling only below half a word, not before each
        // code, took a tenth off a fold over ten decimal columns.
        if self.n < 32 {
            self.refill();
        }
        let q = self.acc.trailing_zeros();
        if q < RICE_ESCAPE && q + 1 + k <= self.n {
            let rest = self.acc >> (q + 1);
            let low = rest & ((1u64 << k) - 1);
            self.acc = rest >> k;
            self.n -= q + 1 + k;
            return Ok(u64::from(q) << k | low);
        }
        let q = self.zeros(RICE_ESCAPE)?;
        if q == RICE_ESCAPE {
            return self.len_code();
        }
        let low = self.wide(k)?;
        Ok(u64::from(q) << k | low)
    }
}

/// A decimal column's next mantissa: the first of a block on its own,
/// each after as a Rice-coded step from the one before.
#[inline(always)]
fn next_mantissa(
    bits: &mut BitReader<'_>,
    k: u32,
    prev: &mut Option<i64>,
) -> Result<i64, DecodeError> {
    let m = match *prev {
        None => unzigzag(bits.len_code()?),
        Some(p) => p.wrapping_add(unzigzag(bits.rice(k)?)),
    };
    *prev = Some(m);
    if (m as f64).abs() >= MAX_EXACT_MANTISSA {
        return bits.fail("decimal mantissa out of range");
    }
    Ok(m)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// The Rice parameter for values of this mean (about log2 of it).
fn rice_parameter(sum: u128, count: usize) -> u32 {
    if count == 0 {
        return 0;
    }
    let mean = (sum / count as u128) as u64;
    // ln 2 of the mean, rounded down to a power of two.
    let target = mean - mean / 4 - mean / 16;
    (63 - target.max(1).leading_zeros()).min(56)
}

// ------------------------------------------------------------- encoding --

/// One entry of the body being encoded.
struct Cell<'b> {
    column: usize,
    timestamp: u64,
    kind: u8,
    ttl: Option<u64>,
    value: &'b [u8],
}

/// Encodes a standard data block body; `None` when the body cannot be read
/// (the caller then stores it as it is).
pub fn encode(body: Vec<u8>) -> Option<Vec<u8>> {
    let block = std::sync::Arc::new(Block::parse(body).ok()?);
    let mut it = BlockIter::new(block);
    it.seek_first().ok()?;
    let mut cells = BlockCells::default();
    while it.valid() {
        cells.add(it.key(), it.ttl_ms(), it.value());
        it.advance().ok()?;
    }
    encode_cells(&cells)
}

/// Encodes a data block's entries; `None` when a key cannot be read (the
/// caller then stores the entries' body as it is).
pub fn encode_cells(entries: &BlockCells) -> Option<Vec<u8>> {
    let mut columns: Vec<(&[u8], &[u8])> = Vec::new();
    let mut column_of = std::collections::HashMap::<(&[u8], &[u8]), usize>::new();
    // Cells in order, and where each row's cells start.
    let mut cells: Vec<Cell<'_>> = Vec::with_capacity(entries.len());
    let mut rows: Vec<(&[u8], usize)> = Vec::new();
    for i in 0..entries.len() {
        let (whole_key, ttl, value) = entries.entry(i);
        let key = crate::cell::KeyRef::parse(whole_key)?;
        let new_row = rows.last().is_none_or(|(row, _)| *row != key.row);
        if new_row {
            rows.push((key.row, cells.len()));
        }
        // Rows of a series name the same columns in the same order: the
        // column at this place in the row before is the first guess.
        let row_start = rows.last().map_or(0, |r| r.1);
        let place = cells.len() - row_start;
        let guess = rows
            .len()
            .checked_sub(2)
            .and_then(|prev| cells.get(rows[prev].1 + place))
            .map(|c| c.column)
            .filter(|&c| c < columns.len() && columns[c] == (key.family, key.qualifier));
        let column = match guess {
            Some(c) => c,
            None => *column_of
                .entry((key.family, key.qualifier))
                .or_insert_with(|| {
                    columns.push((key.family, key.qualifier));
                    columns.len() - 1
                }),
        };
        cells.push(Cell {
            column,
            timestamp: key.timestamp,
            kind: whole_key[whole_key.len() - 1],
            ttl,
            value,
        });
    }
    // Row i's cells: cells[rows[i].1 .. rows[i + 1].1].
    let row_cells: Vec<(&[u8], &[Cell<'_>])> = rows
        .iter()
        .enumerate()
        .map(|(i, &(row, from))| {
            let to = rows.get(i + 1).map_or(cells.len(), |r| r.1);
            (row, &cells[from..to])
        })
        .collect();

    let mut out = Vec::with_capacity(entries.size() / 4);
    out.push(FORMAT);
    put_varint(&mut out, entries.len() as u64);
    put_varint(&mut out, rows.len() as u64);
    // Families once (a store file holds one), then columns naming them.
    let mut families: Vec<&[u8]> = Vec::new();
    for (family, _) in &columns {
        if !families.contains(family) {
            families.push(family);
        }
    }
    put_varint(&mut out, families.len() as u64);
    for family in &families {
        put_len_prefixed(&mut out, family);
    }
    put_varint(&mut out, columns.len() as u64);
    for (family, qualifier) in &columns {
        let f = families.iter().position(|g| g == family).unwrap_or(0);
        put_varint(&mut out, f as u64);
        put_len_prefixed(&mut out, qualifier);
    }
    let (row_bits, row_bytes) = encode_rows(&row_cells);
    put_len_prefixed(&mut out, &row_bits);
    put_len_prefixed(&mut out, &row_bytes);
    let mut per_column: Vec<Vec<&[u8]>> = vec![Vec::new(); columns.len()];
    for c in &cells {
        per_column[c.column].push(c.value);
    }
    for values in &per_column {
        encode_values(values, &mut out);
    }
    Some(out)
}

/// Per row: the key, the columns, the timestamps, the kinds.
fn encode_rows(rows: &[(&[u8], &[Cell<'_>])]) -> (Vec<u8>, Vec<u8>) {
    let mut bits = BitWriter::default();
    let mut suffixes = Vec::new();
    let mut prev_row: &[u8] = &[];
    let mut prev_tail_delta: i64 = 0;
    let mut prev_columns: Vec<usize> = Vec::new();
    let mut prev_ts: u64 = 0;
    let mut prev_ts_delta: i64 = 0;
    for (row, cells) in rows {
        let step = row.len() == prev_row.len()
            && row.len() >= 8
            && row[..row.len() - 8] == prev_row[..prev_row.len() - 8];
        let same_columns = cells.len() == prev_columns.len()
            && cells.iter().zip(&prev_columns).all(|(c, p)| c.column == *p);
        let first = cells[0].timestamp;
        let one_ts = cells.iter().all(|c| c.timestamp == first);
        let plain = cells
            .iter()
            .all(|c| c.kind == crate::cell::CellKind::Put as u8 && c.ttl.is_none());
        // The common case in one bit: the series goes on at its pace.
        let regular = step
            && tail(row).wrapping_sub(tail(prev_row)) as i64 == prev_tail_delta
            && same_columns
            && first.wrapping_sub(prev_ts) as i64 == prev_ts_delta
            && one_ts
            && plain;
        bits.bit(regular);
        if regular {
            prev_row = row;
            prev_ts = first;
            continue;
        }
        // Row key: a counter step, or shared prefix + suffix.
        bits.bit(step);
        if step {
            let delta = tail(row).wrapping_sub(tail(prev_row)) as i64;
            bits.signed(delta.wrapping_sub(prev_tail_delta));
            prev_tail_delta = delta;
        } else {
            let shared = crate::codec::common_prefix_len(prev_row, row);
            bits.len_code(shared as u64);
            bits.len_code((row.len() - shared) as u64);
            suffixes.extend_from_slice(&row[shared..]);
            prev_tail_delta = 0;
        }
        prev_row = row;

        // Columns: the previous row's, or listed.
        bits.bit(same_columns);
        if !same_columns {
            bits.len_code(cells.len() as u64);
            prev_columns.clear();
            for c in cells.iter() {
                bits.len_code(c.column as u64);
                prev_columns.push(c.column);
            }
        }

        // Timestamps: the first as a delta-of-delta; the others usually equal it.
        let delta = first.wrapping_sub(prev_ts) as i64;
        bits.signed(delta.wrapping_sub(prev_ts_delta));
        prev_ts_delta = delta;
        prev_ts = first;
        bits.bit(one_ts);
        if !one_ts {
            for c in &cells[1..] {
                bits.signed(c.timestamp.wrapping_sub(first) as i64);
            }
        }

        // Kinds: all plain puts, or each kind byte (and TTL).
        bits.bit(plain);
        if !plain {
            for c in cells.iter() {
                bits.bits(u64::from(c.kind), 8);
                if c.kind & TTL_FLAG != 0 {
                    bits.len_code(c.ttl.unwrap_or(0));
                }
            }
        }
    }
    (bits.finish(), suffixes)
}

fn tail(row: &[u8]) -> u64 {
    let t: [u8; 8] = row[row.len() - 8..].try_into().expect("8 bytes");
    u64::from_be_bytes(t)
}

/// The 8-byte payload of a typed numeric value with tag `tag`.
fn numeric(v: &[u8], tag: u8) -> Option<u64> {
    match v {
        [t, rest @ ..] if *t == tag && rest.len() == 8 => {
            Some(u64::from_be_bytes(rest.try_into().expect("8 bytes")))
        }
        _ => None,
    }
}

/// The exponent that makes `v` an exact decimal `m / 10^e`, searching from
/// `from` up.
fn decimal_exponent(v: f64, from: u32) -> Option<u32> {
    (from..=MAX_DECIMAL_EXP).find(|&e| mantissa(v, e).is_some())
}

/// `m` with `m / 10^e == v` exactly (bit for bit), if there is one.
fn mantissa(v: f64, e: u32) -> Option<i64> {
    let scale = POW10[e as usize];
    let m = (v * scale).round();
    (m.abs() < MAX_EXACT_MANTISSA && (m / scale).to_bits() == v.to_bits()).then_some(m as i64)
}

/// The floats as `m / 10^exp` with one exponent: the least that each
/// value in turn needs (searching up from the one before), every value
/// then exact at it; `None` when there is none. A value is worked out
/// once, and again only if the exponent rose after it (the division that
/// checks a mantissa was half of encoding a column twice over).
fn decimal_mantissas(floats: &[f64]) -> Option<(u32, Vec<i64>)> {
    let mut exp = 0;
    let mut mantissas = Vec::with_capacity(floats.len());
    // Values before this one were worked out at a lower exponent.
    let mut current_from = 0;
    for (i, &f) in floats.iter().enumerate() {
        let m = match mantissa(f, exp) {
            Some(m) => m,
            None => {
                exp = decimal_exponent(f, exp + 1)?;
                current_from = i;
                mantissa(f, exp)?
            }
        };
        mantissas.push(m);
    }
    for (m, &f) in mantissas[..current_from].iter_mut().zip(floats) {
        *m = mantissa(f, exp)?;
    }
    Some((exp, mantissas))
}

fn encode_values(values: &[&[u8]], out: &mut Vec<u8>) {
    let floats: Option<Vec<f64>> = values
        .iter()
        .map(|v| numeric(v, TAG_FLOAT).map(f64::from_bits))
        .collect();
    if let Some(floats) = floats {
        match decimal_mantissas(&floats) {
            Some((exp, m)) => {
                out.push(CODEC_DECIMAL);
                out.push(exp as u8);
                encode_deltas(m.iter().map(|&m| m as u64), out);
            }
            None => {
                out.push(CODEC_XOR);
                put_len_prefixed(out, &encode_xor(&floats));
            }
        }
        return;
    }
    for tag in [TAG_INT, TAG_UINT] {
        let ints: Option<Vec<u64>> = values.iter().map(|v| numeric(v, tag)).collect();
        if let Some(ints) = ints {
            out.push(CODEC_INT);
            out.push(tag);
            encode_deltas(ints.into_iter(), out);
            return;
        }
    }
    out.push(CODEC_RAW);
    let mut raw = Vec::new();
    for v in values {
        put_len_prefixed(&mut raw, v);
    }
    put_len_prefixed(out, &raw);
}

/// The first value, then each delta zigzagged and Rice-coded with a
/// parameter fitted to the column (written before the data).
fn encode_deltas(values: impl Iterator<Item = u64>, out: &mut Vec<u8>) {
    let values: Vec<u64> = values.collect();
    let deltas: Vec<u64> = values
        .windows(2)
        .map(|w| zigzag(w[1].wrapping_sub(w[0]) as i64))
        .collect();
    let sum: u128 = deltas.iter().map(|&d| u128::from(d)).sum();
    let k = rice_parameter(sum, deltas.len());
    out.push(k as u8);
    let mut bits = BitWriter::default();
    if let Some(&first) = values.first() {
        bits.len_code(zigzag(first as i64));
    }
    for d in deltas {
        bits.rice(d, k);
    }
    put_len_prefixed(out, &bits.finish());
}

/// Gorilla's XOR coding of floats.
fn encode_xor(values: &[f64]) -> Vec<u8> {
    let mut bits = BitWriter::default();
    let mut prev = 0u64;
    let (mut lead, mut trail) = (u32::MAX, 0u32);
    for (i, v) in values.iter().enumerate() {
        let v = v.to_bits();
        if i == 0 {
            bits.wide(v, 64);
            prev = v;
            continue;
        }
        let x = v ^ prev;
        prev = v;
        if x == 0 {
            bits.bit(false);
            continue;
        }
        bits.bit(true);
        let (l, t) = (x.leading_zeros().min(63), x.trailing_zeros());
        if lead != u32::MAX && l >= lead && t >= trail {
            // Inside the previous window: its meaningful bits only.
            bits.bit(false);
            bits.wide(x >> trail, 64 - lead - trail);
        } else {
            bits.bit(true);
            bits.bits(u64::from(l), 6);
            let len = 64 - l - t;
            bits.bits(u64::from(len - 1), 6);
            bits.wide(x >> t, len);
            (lead, trail) = (l, t);
        }
    }
    bits.finish()
}

// ------------------------------------------------------------- decoding --

/// Decodes a payload back into the standard block body, refusing to build
/// one longer than `max_len`.
pub fn decode(payload: &[u8], max_len: usize) -> Result<Vec<u8>, DecodeError> {
    decode_projected(payload, max_len, None)
}

/// Like [`decode`], keeping only the puts of the projection's qualifiers
/// (and every delete marker, with an empty value): the other columns'
/// values are not even decoded. May give a body with no entries.
pub fn decode_projected(
    payload: &[u8],
    max_len: usize,
    projection: Option<&super::format::Projection>,
) -> Result<Vec<u8>, DecodeError> {
    let mut w = RowWalker::open(payload, max_len)?;
    let wanted: Vec<bool> = w
        .columns
        .iter()
        .map(|(_, q)| projection.is_none_or(|p| p.wants(q)))
        .collect();
    let mut builder = BlockBuilder::new(true);
    let mut key = Vec::new();
    let mut value = Vec::new();
    while w.next_row()? {
        for i in 0..w.row_columns.len() {
            let (c, (kind, ttl)) = (w.row_columns[i], w.kind(i));
            if !wanted[c] && kind & KIND_MASK == crate::cell::CellKind::Put as u8 {
                continue;
            }
            key.clear();
            w.cell_key_into(i, &mut key);
            value.clear();
            // A marker of a column left out keeps an empty value: reads
            // never look at a marker's value, and its column is not decoded.
            if wanted[c] {
                w.decoders[c].next(&mut value)?;
            }
            builder.add(&key, ttl, &value);
            if builder.size() > max_len {
                return Err(err(0, "time-series block decodes past its size limit"));
            }
        }
    }
    w.finish()?;
    if builder.is_empty() {
        // A projection that kept nothing: one restart at 0, no entries.
        return Ok([0u32.to_le_bytes(), 1u32.to_le_bytes()].concat());
    }
    Ok(builder.finish())
}

/// Decodes a payload into its entries, in order, as [`decode`]'s body
/// holds them: for a reader that walks each entry once (a compaction),
/// which a body would make encode every key's prefix and then decode it
/// again. False (and `out` unfinished) when the entries would pass
/// `max_len` bytes of keys and values: whole keys can be many times the
/// body of a block of long keys, which the caller then reads as a body.
pub fn decode_entries(
    payload: &[u8],
    max_len: usize,
    out: &mut Entries,
) -> Result<bool, DecodeError> {
    out.clear();
    let mut w = RowWalker::open(payload, max_len)?;
    while w.next_row()? {
        for i in 0..w.row_columns.len() {
            let (c, ttl) = (w.row_columns[i], w.kind(i).1);
            out.push_with(ttl, |key, value| {
                w.cell_key_into(i, key);
                w.decoders[c].next(value)
            })?;
            if out.bytes() > max_len {
                return Ok(false);
            }
        }
    }
    w.finish()?;
    Ok(true)
}

/// How many entries a time-series payload holds, from its header alone.
pub fn entry_count(payload: &[u8]) -> Result<u64, DecodeError> {
    let mut r = Reader::new(payload);
    if r.bytes(1, "time-series block format")? != [FORMAT] {
        return Err(err(0, "unknown time-series block format"));
    }
    r.varint("entry count")
}

/// The last key of a time-series payload, from its row stream alone (no
/// value is decoded): how a compaction tells that a block ends before
/// another input's next key.
pub fn last_key(payload: &[u8], max_len: usize) -> Result<Vec<u8>, DecodeError> {
    let mut w = RowWalker::open(payload, max_len)?;
    while w.next_row()? {}
    let Some(last) = w.row_columns.len().checked_sub(1) else {
        return Err(err(0, "empty time-series block"));
    };
    let mut key = Vec::new();
    w.cell_key_into(last, &mut key);
    Ok(key)
}

/// Decodes the rows of `[select.start, select.stop)` straight into
/// `out` (at most `max_rows` of them), with only the selected columns'
/// puts, their values as [`Value`]s: no standard body is built. Rows after
/// the last one given are not decoded. A delete marker of a selected
/// column is an error: the caller reads only blocks of files without
/// markers, through [`ColumnRows`]' rules.
pub fn decode_columns(
    payload: &[u8],
    max_len: usize,
    select: &ColumnSelect<'_>,
    max_rows: Option<usize>,
    out: &mut ColumnRows,
) -> Result<BlockRead, DecodeError> {
    let mut w = RowWalker::open(payload, max_len)?;
    let selected = w.selected(select);
    let mut stop = select.stop.map(KeyBound::new);
    let mut start = KeyBound::new(select.start);
    // Rows come in key order: once one is at or past `start`, all are.
    let mut before = true;
    // The block's first row may go on from the last block's last.
    let mut first_row = true;
    let mut rows = 0usize;
    // The row's selected cells (position in the row, block column, read
    // column), worked out again only when a row names other columns: a
    // row of ten fields read for one looked at all ten.
    let mut picked: Vec<(usize, usize, u32)> = Vec::new();
    // Values of the rows before the range, per column, passed over in one
    // go when the first row in range comes (they are most of what a read
    // of a series' newest point decodes).
    let mut skips = vec![0usize; w.columns.len()];
    while w.next_row()? {
        if stop
            .as_mut()
            .is_some_and(|stop| stop.cmp(&w.row, w.tail_only).is_ge())
        {
            return Ok(BlockRead::Stop);
        }
        if before && !start.cmp(&w.row, w.tail_only).is_lt() {
            before = false;
            for (decoder, n) in w.decoders.iter_mut().zip(&skips) {
                decoder.skip_values(*n)?;
            }
        }
        w.pick_columns(&selected, &mut picked);
        let mut started = false;
        for &(i, c, column) in &picked {
            let (kind, ttl) = w.kind(i);
            if kind & KIND_MASK != crate::cell::CellKind::Put as u8 {
                return Err(err(0, "delete marker in a file that counts none"));
            }
            // Rows before the range still move the column's values on.
            if before {
                skips[c] += 1;
                continue;
            }
            let value = w.decoders[c].next_value()?;
            if !started {
                if max_rows.is_some_and(|n| rows >= n) {
                    return Ok(BlockRead::Cut);
                }
                rows += 1;
                if first_row {
                    out.continue_row(&w.row);
                    first_row = false;
                } else {
                    out.start_row(&w.row);
                }
                started = true;
            }
            out.push_cell(column, w.timestamp(i), ttl, value);
        }
    }
    w.finish()?;
    Ok(BlockRead::End)
}

/// Decodes the rows of `[select.start, select.stop)` into `out` by
/// column ([`ColumnRuns`]), for a fold; `None` (and `out` to be cleared)
/// when a selected cell does not answer as it is: a delete marker, a
/// cell TTL, two versions of a column in a row, a raw value that is no
/// [`Value`], a key shorter than 8 bytes, or a timestamp `answers`
/// refuses (a family TTL or the read's time range). Such a block is read
/// with [`decode_columns`] and its rules instead.
///
/// `answers` must hold on one interval of times (as a time range and a
/// TTL's "not before" do): a run of regular rows is checked at its ends.
pub fn decode_runs(
    payload: &[u8],
    max_len: usize,
    select: &ColumnSelect<'_>,
    answers: Option<&dyn Fn(u64) -> bool>,
    out: &mut ColumnRuns,
) -> Result<Option<BlockRead>, DecodeError> {
    let mut w = RowWalker::open(payload, max_len)?;
    let selected = w.selected(select);
    let mut stop = select.stop.map(KeyBound::new);
    let mut start = KeyBound::new(select.start);
    let mut before = true;
    let mut run_open = false;
    let mut picked: Vec<(usize, usize, u32)> = Vec::new();
    // The rows first, then each column's values in one go: a column's
    // values are a stream of their own, and decoding one after another
    // lets a decimal's divisions overlap (one value at a time, a fold
    // over ten columns spent half its time waiting on them).
    let mut skips = vec![0usize; w.columns.len()];
    let mut takes = vec![0usize; w.columns.len()];
    let mut read = BlockRead::End;
    let mut probe = Vec::new();
    while w.next_row()? {
        if stop
            .as_mut()
            .is_some_and(|stop| stop.cmp(&w.row, w.tail_only).is_ge())
        {
            read = BlockRead::Stop;
            break;
        }
        // A run goes on only while every row walked, given or not, keeps
        // its head.
        run_open = run_open && w.tail_only;
        before = before && start.cmp(&w.row, w.tail_only).is_lt();
        if w.pick_columns(&selected, &mut picked) {
            // A column twice in a row is two versions: its answer needs
            // the version rules.
            if picked.windows(2).any(|p| p[0].1 == p[1].1) {
                return Ok(None);
            }
        }
        if !w.kinds.is_empty() {
            for &(i, _, _) in &picked {
                if w.kind(i) != (crate::cell::CellKind::Put as u8, None) {
                    return Ok(None);
                }
            }
        }
        if before {
            for &(_, c, _) in &picked {
                skips[c] += 1;
            }
            continue;
        }
        if picked.is_empty() {
            continue;
        }
        if w.row.len() < 8 {
            return Ok(None);
        }
        if let Some(answers) = answers
            && picked.iter().any(|&(i, _, _)| !answers(w.timestamp(i)))
        {
            return Ok(None);
        }
        if !run_open {
            out.start_run(&w.row[..w.row.len() - 8]);
            run_open = true;
        }
        out.push_row(tail(&w.row));
        for &(_, c, column) in &picked {
            out.push_cell(column);
            takes[c] += 1;
        }
        // Most of a series' rows are regular (a one bit each: this row's
        // columns, key step and time step). They go in at once when the
        // last of them is before `stop` and its time and the first's are
        // answered: keys and times move by one step without wrapping, so
        // then every row between is too.
        let n = w.regular_ahead();
        if n > 0 && stepped_rows_answer(&w, n, stop.as_mut(), answers, &mut probe) {
            let step = w.prev_tail_delta as u64;
            out.push_stepped_rows(tail(&w.row), step, n, picked.iter().map(|p| p.2));
            for &(_, c, _) in &picked {
                takes[c] += n;
            }
            w.skip_regular(n);
        }
    }
    if read == BlockRead::End {
        w.finish()?;
    }
    for (c, column) in selected.iter().enumerate() {
        let Some(column) = *column else { continue };
        let decoder = &mut w.decoders[c];
        decoder.skip_values(skips[c])?;
        let (floats, values) = out.values_mut(column);
        if !decoder.decode_into(takes[c], floats, values)? {
            return Ok(None);
        }
    }
    Ok(Some(read))
}

/// Whether the `n` regular rows after the walker's row (see
/// [`RowWalker::regular_ahead`]) are all before `stop` and all answered,
/// as row-by-row checks would find: true only when their keys and times
/// step without wrapping, so that checking the last key, and the first
/// and last time, checks them all (`answers` holds on an interval of
/// times: a time range, and a TTL's "not before").
fn stepped_rows_answer(
    w: &RowWalker<'_>,
    n: usize,
    stop: Option<&mut KeyBound<'_>>,
    answers: Option<&dyn Fn(u64) -> bool>,
    probe: &mut Vec<u8>,
) -> bool {
    let steps = n as i128;
    let last_tail = i128::from(tail(&w.row)) + steps * i128::from(w.prev_tail_delta as u64);
    let Ok(last_tail) = u64::try_from(last_tail) else {
        return false;
    };
    if let Some(stop) = stop {
        probe.clear();
        probe.extend_from_slice(&w.row[..w.row.len() - 8]);
        probe.extend_from_slice(&last_tail.to_be_bytes());
        if stop.cmp(probe, true).is_ge() {
            return false;
        }
    }
    if let Some(answers) = answers {
        let delta = i128::from(w.prev_ts_delta);
        let first = u64::try_from(i128::from(w.prev_ts) + delta);
        let last = u64::try_from(i128::from(w.prev_ts) + steps * delta);
        match (first, last) {
            (Ok(first), Ok(last)) if answers(first) && answers(last) => {}
            _ => return false,
        }
    }
    true
}

/// A key compared with row after row of a block, where most rows differ
/// from the one before only in their last 8 bytes (a series' points): the
/// rest is compared once, not once a row (comparing whole keys took a
/// tenth of an aggregate's time).
struct KeyBound<'k> {
    bound: &'k [u8],
    /// How the last row compared with `bound` but for the last 8 bytes of
    /// each, where both have the same length.
    head: Option<std::cmp::Ordering>,
}

impl<'k> KeyBound<'k> {
    fn new(bound: &'k [u8]) -> Self {
        KeyBound { bound, head: None }
    }

    /// How `row` compares with the bound; `tail_only`: `row` differs from
    /// the row last compared only in its last 8 bytes.
    fn cmp(&mut self, row: &[u8], tail_only: bool) -> std::cmp::Ordering {
        if row.len() < 8 || row.len() != self.bound.len() {
            self.head = None;
            return row.cmp(self.bound);
        }
        let at = row.len() - 8;
        let head = match self.head {
            Some(head) if tail_only => head,
            _ => *self.head.insert(row[..at].cmp(&self.bound[..at])),
        };
        head.then_with(|| tail(row).cmp(&tail(self.bound)))
    }
}

/// A time-series block's header and streams, read row by row: after each
/// [`RowWalker::next_row`], `row` is the row's key, `row_columns` its
/// cells' columns, and [`RowWalker::timestamp`] and [`RowWalker::kind`]
/// theirs (the values stay in `decoders`, one per column, for the caller
/// to take in order).
struct RowWalker<'a> {
    columns: Vec<(&'a [u8], &'a [u8])>,
    decoders: Vec<ValueDecoder<'a>>,
    entries: usize,
    rows: usize,
    bits: BitReader<'a>,
    suffixes: Reader<'a>,
    suffixes_at: usize,
    row: Vec<u8>,
    /// `row` differs from the row before only in its last 8 bytes.
    tail_only: bool,
    row_columns: Vec<usize>,
    /// Set when a row names other columns than the row before; the
    /// caller clears it once it has looked.
    columns_changed: bool,
    timestamps: Vec<u64>,
    kinds: Vec<(u8, Option<u64>)>,
    prev_tail_delta: i64,
    prev_ts: u64,
    prev_ts_delta: i64,
    rows_read: usize,
    decoded: usize,
}

impl<'a> RowWalker<'a> {
    fn open(payload: &'a [u8], max_len: usize) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        if r.bytes(1, "time-series block format")? != [FORMAT] {
            return Err(err(0, "unknown time-series block format"));
        }
        // Every entry has a key of at least KEY_OVERHEAD + 2 bytes in the body.
        let entries = r.len(max_len / (KEY_OVERHEAD + 2), "entry count")?;
        let rows = r.len(entries, "row count")?;
        let family_count = r.len(payload.len(), "family count")?;
        let mut families = Vec::with_capacity(family_count.min(256));
        for _ in 0..family_count {
            let family = r.len_prefixed(u8::MAX as usize, "column family")?;
            if family.is_empty() {
                return Err(err(r.pos(), "empty column family"));
            }
            families.push(family);
        }
        let column_count = r.len(payload.len(), "column count")?;
        let mut columns = Vec::with_capacity(column_count.min(1024));
        for _ in 0..column_count {
            let f = r.len(families.len().saturating_sub(1), "column family index")?;
            let family = *families
                .get(f)
                .ok_or_else(|| err(r.pos(), "column family index out of range"))?;
            let qualifier = r.len_prefixed(payload.len(), "column qualifier")?;
            columns.push((family, qualifier));
        }
        let bits_at = r.pos();
        let row_bits = r.len_prefixed(payload.len(), "row bits")?;
        let suffixes_at = r.pos();
        let row_suffixes = r.len_prefixed(payload.len(), "row key suffixes")?;
        let mut decoders = Vec::with_capacity(columns.len());
        for _ in 0..columns.len() {
            decoders.push(ValueDecoder::read(&mut r)?);
        }
        if !r.is_empty() {
            return Err(err(r.pos(), "bytes after the last column"));
        }
        Ok(RowWalker {
            columns,
            decoders,
            entries,
            rows,
            bits: BitReader::new(row_bits, bits_at),
            suffixes: Reader::new(row_suffixes),
            suffixes_at,
            row: Vec::new(),
            tail_only: false,
            row_columns: Vec::new(),
            columns_changed: true,
            timestamps: Vec::new(),
            kinds: Vec::new(),
            prev_tail_delta: 0,
            prev_ts: 0,
            prev_ts_delta: 0,
            rows_read: 0,
            decoded: 0,
        })
    }

    /// Each of the block's columns' read column (`None`: not selected).
    fn selected(&self, select: &ColumnSelect<'_>) -> Vec<Option<u32>> {
        self.columns
            .iter()
            .map(|(f, q)| select.column_of(f, q))
            .collect()
    }

    /// The current row's selected cells as (place in the row, block
    /// column, read column) into `picked`, when its columns are not the
    /// row before's; true when they changed.
    fn pick_columns(
        &mut self,
        selected: &[Option<u32>],
        picked: &mut Vec<(usize, usize, u32)>,
    ) -> bool {
        if !std::mem::take(&mut self.columns_changed) {
            return false;
        }
        picked.clear();
        picked.extend(
            self.row_columns
                .iter()
                .enumerate()
                .filter_map(|(i, &c)| Some((i, c, selected[c]?))),
        );
        true
    }

    /// Appends the whole cell key of the current row's cell `i` to `out`.
    fn cell_key_into(&self, i: usize, out: &mut Vec<u8>) {
        let (kind, ttl) = self.kind(i);
        let kind = crate::cell::CellKind::from_code(kind & KIND_MASK)
            .expect("checked by the walker, or a plain put");
        let (family, qualifier) = self.columns[self.row_columns[i]];
        let ts = self.timestamp(i);
        encode_key_into(out, &self.row, family, qualifier, ts, kind, ttl.is_some());
    }

    /// Reads the next row's key and cells; false after the last row.
    fn next_row(&mut self) -> Result<bool, DecodeError> {
        if self.rows_read == self.rows {
            return Ok(false);
        }
        self.rows_read += 1;
        let bits = &mut self.bits;
        let row = &mut self.row;
        let regular = bits.bit()?;
        self.tail_only = true;
        if regular {
            if row.len() < 8 || self.row_columns.is_empty() {
                return bits.fail("regular row before any row");
            }
            let t = tail(row).wrapping_add(self.prev_tail_delta as u64);
            let at = row.len() - 8;
            row[at..].copy_from_slice(&t.to_be_bytes());
        } else if bits.bit()? {
            if row.len() < 8 {
                return bits.fail("row key step on a key shorter than 8 bytes");
            }
            let delta = self.prev_tail_delta.wrapping_add(bits.signed()?);
            let t = tail(row).wrapping_add(delta as u64);
            let at = row.len() - 8;
            row[at..].copy_from_slice(&t.to_be_bytes());
            self.prev_tail_delta = delta;
        } else {
            let shared = bits.len_code()?;
            let suffix = bits.len_code()?;
            if shared > row.len() as u64 || suffix > u64::from(u16::MAX) {
                return bits.fail("row key prefix or suffix out of range");
            }
            self.tail_only = false;
            row.truncate(shared as usize);
            row.extend_from_slice(self.suffixes.bytes(suffix as usize, "row key suffix")?);
            if row.is_empty() || row.len() > crate::cell::MAX_ROW_LEN {
                return bits.fail("row key length out of range");
            }
            self.prev_tail_delta = 0;
        }

        let left = self.entries - self.decoded;
        if !regular && !bits.bit()? {
            let count = bits.len_code()?;
            if count == 0 || count > left as u64 {
                return bits.fail("cells per row out of range");
            }
            self.row_columns.clear();
            self.columns_changed = true;
            for _ in 0..count {
                let c = bits.len_code()?;
                if c >= self.columns.len() as u64 {
                    return bits.fail("column index out of range");
                }
                self.row_columns.push(c as usize);
            }
        }
        let cells = self.row_columns.len();
        if cells == 0 || cells > left {
            return bits.fail("cells per row out of range");
        }

        let dod = if regular { 0 } else { bits.signed()? };
        let delta = self.prev_ts_delta.wrapping_add(dod);
        let first = self.prev_ts.wrapping_add(delta as u64);
        self.prev_ts_delta = delta;
        self.prev_ts = first;
        // Left empty when every cell has the row's first timestamp, and
        // `kinds` when every cell is a plain put (most rows): see
        // `timestamp` and `kind`.
        self.timestamps.clear();
        if !regular && !bits.bit()? {
            self.timestamps.push(first);
            for _ in 1..cells {
                self.timestamps
                    .push(first.wrapping_add(bits.signed()? as u64));
            }
        }

        self.kinds.clear();
        if !regular && !bits.bit()? {
            for _ in 0..cells {
                let kind = bits.bits(8)? as u8;
                if crate::cell::CellKind::from_code(kind & KIND_MASK).is_none()
                    || kind & !(KIND_MASK | TTL_FLAG) != 0
                {
                    return bits.fail("unknown cell kind");
                }
                let ttl = if kind & TTL_FLAG != 0 {
                    Some(bits.len_code()?)
                } else {
                    None
                };
                self.kinds.push((kind, ttl));
            }
        }
        self.decoded += cells;
        Ok(true)
    }

    /// How many of the next rows are regular (a one bit each: the row
    /// before's columns, key step and time step), up to 63 and to the
    /// rows and cells the block says are left; none read.
    fn regular_ahead(&mut self) -> usize {
        let cells = self.row_columns.len();
        if cells == 0 || self.row.len() < 8 {
            return 0;
        }
        let rows_left = self.rows - self.rows_read;
        let cells_left = (self.entries - self.decoded) / cells;
        self.bits.peek_ones(rows_left.min(cells_left))
    }

    /// Moves past `n` regular rows [`Self::regular_ahead`] counted, as
    /// `n` calls of [`Self::next_row`] would: the row is the last of them.
    fn skip_regular(&mut self, n: usize) {
        self.bits.skip_peeked(n);
        let steps = n as u64;
        let t = tail(&self.row).wrapping_add((self.prev_tail_delta as u64).wrapping_mul(steps));
        let at = self.row.len() - 8;
        self.row[at..].copy_from_slice(&t.to_be_bytes());
        self.prev_ts = self
            .prev_ts
            .wrapping_add((self.prev_ts_delta as u64).wrapping_mul(steps));
        self.tail_only = true;
        self.timestamps.clear();
        self.kinds.clear();
        self.rows_read += n;
        self.decoded += n * self.row_columns.len();
    }

    /// The timestamp of the row's cell `i`.
    #[inline]
    fn timestamp(&self, i: usize) -> u64 {
        self.timestamps.get(i).copied().unwrap_or(self.prev_ts)
    }

    /// The kind byte and TTL of the row's cell `i`.
    #[inline]
    fn kind(&self, i: usize) -> (u8, Option<u64>) {
        self.kinds
            .get(i)
            .copied()
            .unwrap_or((crate::cell::CellKind::Put as u8, None))
    }

    /// After the last row: checks that the block held what it said.
    fn finish(&self) -> Result<(), DecodeError> {
        if self.decoded != self.entries {
            return Err(err(0, "time-series block holds fewer entries than it says"));
        }
        if !self.suffixes.is_empty() {
            return Err(err(self.suffixes_at, "row key suffixes left over"));
        }
        if self.entries == 0 {
            return Err(err(0, "empty time-series block"));
        }
        Ok(())
    }
}

/// The values of one column, decoded one at a time as rows ask for them.
enum ValueDecoder<'a> {
    Raw(Reader<'a>),
    Decimal {
        bits: BitReader<'a>,
        scale: f64,
        k: u32,
        prev: Option<i64>,
    },
    Int {
        bits: BitReader<'a>,
        tag: u8,
        k: u32,
        prev: Option<u64>,
    },
    Xor {
        bits: BitReader<'a>,
        prev: Option<u64>,
        lead: u32,
        trail: u32,
    },
}

impl<'a> ValueDecoder<'a> {
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let codec = r.bytes(1, "column codec")?[0];
        Ok(match codec {
            CODEC_RAW => ValueDecoder::Raw(Reader::new(r.len_prefixed(usize::MAX, "raw values")?)),
            CODEC_DECIMAL => {
                let exp = r.bytes(1, "decimal exponent")?[0];
                if u32::from(exp) > MAX_DECIMAL_EXP {
                    return Err(err(r.pos(), "decimal exponent out of range"));
                }
                let k = rice_k(r)?;
                let at = r.pos();
                ValueDecoder::Decimal {
                    bits: BitReader::new(r.len_prefixed(usize::MAX, "decimal values")?, at),
                    scale: POW10[exp as usize],
                    k,
                    prev: None,
                }
            }
            CODEC_INT => {
                let tag = r.bytes(1, "integer type")?[0];
                if tag != TAG_INT && tag != TAG_UINT {
                    return Err(err(r.pos(), "integer type unknown"));
                }
                let k = rice_k(r)?;
                let at = r.pos();
                ValueDecoder::Int {
                    bits: BitReader::new(r.len_prefixed(usize::MAX, "integer values")?, at),
                    tag,
                    k,
                    prev: None,
                }
            }
            CODEC_XOR => {
                let at = r.pos();
                ValueDecoder::Xor {
                    bits: BitReader::new(r.len_prefixed(usize::MAX, "xor values")?, at),
                    prev: None,
                    lead: 0,
                    trail: 0,
                }
            }
            _ => return Err(err(r.pos(), "unknown column codec")),
        })
    }

    /// Moves past the column's next value without making it: a read's
    /// rows before its range (the rows of the series before it, in the
    /// block where a series' newest point is read) are most of what a
    /// read of each series' last point decodes.
    fn skip_value(&mut self) -> Result<(), DecodeError> {
        match self {
            ValueDecoder::Decimal { bits, k, prev, .. } => {
                next_mantissa(bits, *k, prev).map(|_| ())
            }
            _ => self.next_decoded().map(|_| ()),
        }
    }

    /// Moves past the column's next `n` values, a decimal column's in one
    /// loop of Rice codes (no value is made, so none is checked against
    /// the exact range: a value given later still is).
    fn skip_values(&mut self, n: usize) -> Result<(), DecodeError> {
        if let ValueDecoder::Decimal { bits, k, prev, .. } = self {
            let mut left = n;
            let mut m = match *prev {
                Some(p) => p,
                None if n == 0 => return Ok(()),
                None => {
                    left -= 1;
                    unzigzag(bits.len_code()?)
                }
            };
            for _ in 0..left {
                m = m.wrapping_add(unzigzag(bits.rice(*k)?));
            }
            *prev = Some(m);
            return Ok(());
        }
        for _ in 0..n {
            self.skip_value()?;
        }
        Ok(())
    }

    /// Decodes the column's next `n` values onto `floats` (a float
    /// codec's) or `values` (the others'); false: a raw value that is no
    /// [`Value`].
    fn decode_into(
        &mut self,
        n: usize,
        floats: &mut Vec<f64>,
        values: &mut Vec<Value>,
    ) -> Result<bool, DecodeError> {
        if let ValueDecoder::Decimal {
            bits,
            scale,
            k,
            prev,
        } = self
        {
            floats.reserve(n);
            for _ in 0..n {
                let m = next_mantissa(bits, *k, prev)?;
                floats.push(m as f64 / *scale);
            }
            return Ok(true);
        }
        for _ in 0..n {
            match self.next_decoded()? {
                Decoded::Number(TAG_FLOAT, bits) => floats.push(f64::from_bits(bits)),
                Decoded::Number(TAG_INT, bits) => values.push(Value::Int(bits as i64)),
                Decoded::Number(_, bits) => values.push(Value::Uint(bits)),
                Decoded::Raw(bytes) => match Value::decode(bytes) {
                    Some(v) => values.push(v),
                    None => return Ok(false),
                },
            }
        }
        Ok(true)
    }

    /// The next value of the column as a [`Value`] (`None`: a raw value
    /// that is not one), without its byte form where the codec is numeric.
    fn next_value(&mut self) -> Result<Option<Value>, DecodeError> {
        Ok(match self.next_decoded()? {
            Decoded::Raw(v) => Value::decode(v),
            Decoded::Number(TAG_FLOAT, bits) => Some(Value::Float(f64::from_bits(bits))),
            Decoded::Number(TAG_INT, bits) => Some(Value::Int(bits as i64)),
            Decoded::Number(_, bits) => Some(Value::Uint(bits)),
        })
    }

    /// Appends the next value of the column to `out`, in its byte form.
    fn next(&mut self, out: &mut Vec<u8>) -> Result<(), DecodeError> {
        match self.next_decoded()? {
            Decoded::Raw(v) => out.extend_from_slice(v),
            Decoded::Number(tag, bits) => {
                out.push(tag);
                out.extend_from_slice(&bits.to_be_bytes());
            }
        }
        Ok(())
    }

    fn next_decoded(&mut self) -> Result<Decoded<'a>, DecodeError> {
        Ok(match self {
            ValueDecoder::Raw(r) => Decoded::Raw(r.len_prefixed(usize::MAX, "raw value")?),
            ValueDecoder::Decimal {
                bits,
                scale,
                k,
                prev,
            } => {
                let m = next_mantissa(bits, *k, prev)?;
                Decoded::Number(TAG_FLOAT, (m as f64 / *scale).to_bits())
            }
            ValueDecoder::Int { bits, tag, k, prev } => {
                let v = match *prev {
                    None => unzigzag(bits.len_code()?) as u64,
                    Some(p) => p.wrapping_add(unzigzag(bits.rice(*k)?) as u64),
                };
                *prev = Some(v);
                Decoded::Number(*tag, v)
            }
            ValueDecoder::Xor {
                bits,
                prev,
                lead,
                trail,
            } => {
                let v = match *prev {
                    None => bits.wide(64)?,
                    Some(p) => {
                        if !bits.bit()? {
                            p
                        } else {
                            if bits.bit()? {
                                *lead = bits.bits(6)? as u32;
                                let len = bits.bits(6)? as u32 + 1;
                                if *lead + len > 64 {
                                    return bits.fail("xor window out of range");
                                }
                                *trail = 64 - *lead - len;
                            }
                            let x = bits.wide(64 - *lead - *trail)? << *trail;
                            p ^ x
                        }
                    }
                };
                *prev = Some(v);
                Decoded::Number(TAG_FLOAT, v)
            }
        })
    }
}

/// One value as its codec gives it: a raw value's bytes, or a number's
/// value tag and 64 bits.
enum Decoded<'a> {
    Raw(&'a [u8]),
    Number(u8, u64),
}

fn rice_k(r: &mut Reader<'_>) -> Result<u32, DecodeError> {
    let k = u32::from(r.bytes(1, "rice parameter")?[0]);
    if k > 56 {
        return Err(err(r.pos(), "rice parameter out of range"));
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{CellKind, KeyRef, encode_key};
    use crate::value::Value;

    fn body(entries: &[(Vec<u8>, Option<u64>, Vec<u8>)]) -> Vec<u8> {
        let mut b = BlockBuilder::new(true);
        for (k, t, v) in entries {
            b.add(k, *t, v);
        }
        b.finish()
    }

    fn round_trip(entries: &[(Vec<u8>, Option<u64>, Vec<u8>)]) -> usize {
        let plain = body(entries);
        let encoded = encode(plain.clone()).expect("encodes");
        let decoded = decode(&encoded, 1 << 24).expect("decodes");
        assert_eq!(decoded, plain, "the body comes back byte for byte");
        // Straight into entries (a compaction's read): the same entries.
        let mut straight = Entries::default();
        let whole = decode_entries(&encoded, 1 << 24, &mut straight).expect("decodes");
        assert!(whole, "the entries fit");
        let got: Vec<(Vec<u8>, Option<u64>, Vec<u8>)> = (0..straight.len())
            .map(|i| {
                let (k, ttl, v) = straight.entry(i);
                (k.to_vec(), ttl, v.to_vec())
            })
            .collect();
        assert_eq!(got, entries, "the entries come back as they were");
        // A compaction's look at where the block ends: its last key, from
        // the rows alone.
        let last = &entries.last().expect("a block holds entries").0;
        assert_eq!(&last_key(&encoded, 1 << 24).expect("decodes"), last);
        encoded.len()
    }

    fn tsbs_entries(rows: u64, hosts: u64) -> Vec<(Vec<u8>, Option<u64>, Vec<u8>)> {
        let mut out = Vec::new();
        for h in 0..hosts {
            for step in (0..rows).rev() {
                let ts = crate::tsbs::T0_MS + step * crate::tsbs::INTERVAL_MS;
                let row = crate::tsbs::cpu_row_key(h, ts);
                let mut cells: Vec<(&str, f64)> = crate::tsbs::CPU_FIELDS
                    .iter()
                    .enumerate()
                    .map(|(i, f)| (*f, crate::tsbs::cpu_value(h, step, i)))
                    .collect();
                cells.sort_by(|a, b| a.0.cmp(b.0));
                for (q, v) in cells {
                    let key = encode_key(&row, b"f", q.as_bytes(), ts, CellKind::Put, false);
                    out.push((key, None, Value::Float(v).encode()));
                }
            }
        }
        out.sort_by(|a, b| crate::cell::compare_keys(&a.0, &b.0));
        out
    }

    #[test]
    fn sensor_rows_shrink_to_about_a_byte_and_a_half_per_value() {
        let entries = tsbs_entries(300, 2);
        let plain = body(&entries).len();
        let encoded = round_trip(&entries);
        let per_value = encoded as f64 / entries.len() as f64;
        assert!(
            per_value < 1.6,
            "{per_value} bytes per value ({plain} plain)"
        );
    }

    #[test]
    fn every_kind_of_cell_comes_back_exactly() {
        let mut e = Vec::new();
        let row = |s: &str| s.as_bytes().to_vec();
        let k = |r: &[u8], q: &str, ts: u64, kind: CellKind, ttl: bool| {
            encode_key(r, b"f", q.as_bytes(), ts, kind, ttl)
        };
        // Deletes, TTLs, versions of one column, mixed types, odd floats.
        e.push((
            k(&row("a"), "", 9, CellKind::DeleteFamily, false),
            None,
            vec![],
        ));
        e.push((
            k(&row("a"), "q", 9, CellKind::DeleteColumn, false),
            None,
            vec![],
        ));
        e.push((
            k(&row("a"), "q", 8, CellKind::Put, true),
            Some(5_000),
            Value::Int(-3).encode(),
        ));
        e.push((
            k(&row("a"), "q", 7, CellKind::Put, false),
            None,
            Value::Int(i64::MAX).encode(),
        ));
        e.push((
            k(&row("a"), "s", 7, CellKind::Put, false),
            None,
            Value::Str("x".into()).encode(),
        ));
        e.push((
            k(&row("ab"), "f", 7, CellKind::Put, false),
            None,
            Value::Float(-0.0).encode(),
        ));
        e.push((
            k(&row("ab"), "u", 1, CellKind::Put, false),
            None,
            Value::Uint(u64::MAX).encode(),
        ));
        e.push((
            k(&row("b"), "f", 0, CellKind::Put, false),
            None,
            Value::Float(f64::MIN_POSITIVE).encode(),
        ));
        e.push((
            k(&row("b"), "u", u64::MAX, CellKind::Put, false),
            None,
            Value::Uint(0).encode(),
        ));
        e.push((
            k(&row("bbbbbbbbbbbb"), "f", 3, CellKind::DeleteVersion, false),
            None,
            vec![],
        ));
        e.push((
            k(&row("bbbbbbbbbbbc"), "f", 3, CellKind::Put, false),
            None,
            Value::Float(1e300).encode(),
        ));
        e.push((
            k(&row("c"), "raw", 3, CellKind::Put, false),
            None,
            b"not typed".to_vec(),
        ));
        round_trip(&e);
    }

    /// The exponent and mantissas are what searching every value in turn
    /// and then working all of them out at the exponent found gives,
    /// whatever the order in which the values need more decimals.
    #[test]
    fn decimal_mantissas_are_those_of_one_search_then_one_pass() {
        fn searched_then_worked_out(floats: &[f64]) -> Option<(u32, Vec<i64>)> {
            let mut exp = 0;
            for &f in floats {
                exp = decimal_exponent(f, exp)?;
            }
            let m: Option<Vec<i64>> = floats.iter().map(|&f| mantissa(f, exp)).collect();
            Some((exp, m?))
        }
        let mut next = crate::codec::xorshift(0x2545_f491_4f6c_dd1du64);
        let cases: Vec<Vec<f64>> = vec![
            vec![],
            vec![58.13, 58.1, 58.0, 0.07],
            vec![1.0, 0.5, 0.25, 0.125, 3.0],
            vec![0.1, 0.2, 0.30000000000000004],
            vec![1e-9, 2.0, -0.001],
            vec![f64::MAX, 1.5],
            vec![1.5, f64::MIN_POSITIVE],
            vec![123456789.123, 0.1],
        ];
        for floats in cases.into_iter().chain((0..500).map(|_| {
            (0..(next() % 12))
                .map(|_| {
                    let digits = (next() % 7) as i32;
                    (next() % 100_000) as f64 / 10f64.powi(digits)
                        * if next() % 5 == 0 { -1.0 } else { 1.0 }
                })
                .collect()
        })) {
            assert_eq!(
                decimal_mantissas(&floats),
                searched_then_worked_out(&floats),
                "{floats:?}"
            );
        }
    }

    #[test]
    fn codecs_round_trip_their_edge_values() {
        let floats = [0.1, 0.2, 1e-5, 123456.789, -7.25, 0.0, 3.0, 99.99];
        let xor = [
            std::f64::consts::PI,
            1.0 / 3.0,
            -1.0 / 7.0,
            f64::MAX,
            f64::EPSILON,
            2.5,
        ];
        for set in [&floats[..], &xor[..]] {
            let e: Vec<_> = set
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let row = format!("row{i:03}");
                    let key = encode_key(row.as_bytes(), b"f", b"v", 1, CellKind::Put, false);
                    (key, None, Value::Float(*v).encode())
                })
                .collect();
            round_trip(&e);
        }
        let ints = [i64::MIN, i64::MAX, 0, -1, 1, 1 << 40];
        let e: Vec<_> = ints
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let key = encode_key(
                    format!("r{i}").as_bytes(),
                    b"f",
                    b"v",
                    1,
                    CellKind::Put,
                    false,
                );
                (key, None, Value::Int(*v).encode())
            })
            .collect();
        round_trip(&e);
    }

    /// Rice codes of every length read back between other codes, however
    /// the bits held fall against the reader's refills (it refills only
    /// below half a word), and a stream cut short is an error.
    #[test]
    fn rice_codes_read_back_across_refills() {
        let mut next = crate::codec::xorshift(0x9E37_79B9_7F4A_7C15u64);
        let mut codes = Vec::new();
        for i in 0..20_000u64 {
            let k = (next() % 24) as u32;
            // Mostly near 2^k; now and then far past the escape.
            let v = match i % 17 {
                0 => next() >> (next() % 64),
                _ => next() % (1u64 << (k + 3)),
            };
            codes.push((v, k, i % 5 == 0));
        }
        let mut w = BitWriter::default();
        for &(v, k, flag) in &codes {
            w.rice(v, k);
            w.bit(flag);
        }
        let bytes = w.finish();
        let mut r = BitReader::new(&bytes, 0);
        for (i, &(v, k, flag)) in codes.iter().enumerate() {
            assert_eq!(r.rice(k).expect("a whole code"), v, "code {i}");
            assert_eq!(r.bit().expect("a whole bit"), flag, "bit {i}");
        }
        let cut = &bytes[..bytes.len() / 2];
        let mut r = BitReader::new(cut, 0);
        let read = codes
            .iter()
            .take_while(|&&(v, k, _)| r.rice(k).is_ok_and(|got| got == v) && r.bit().is_ok())
            .count();
        assert!(read < codes.len(), "a cut stream read to its end");
    }

    /// A row's key and its cells by column.
    type RowCells = (Vec<u8>, Vec<(u32, Value)>);

    /// Each row of `runs` as [`ColumnRuns::each_row`] gives it.
    fn rows_of_runs(runs: &ColumnRuns) -> Vec<RowCells> {
        let mut given = Vec::new();
        runs.each_row(&mut |key, cells| {
            given.push((key.to_vec(), cells.to_vec()));
            true
        });
        given
    }

    /// A row's cells of [`ColumnRows`] as runs give them: by column.
    fn by_column(cells: &[crate::region::sst::columns::ColumnCell]) -> Vec<(u32, Value)> {
        let mut cells: Vec<(u32, Value)> = cells
            .iter()
            .map(|c| (c.column, c.value.clone().expect("a value")))
            .collect();
        cells.sort_by_key(|(c, _)| *c);
        cells
    }

    /// A read by column from any row of a block (the rows before it
    /// passed over, their values skipped column by column) gives what the
    /// whole block gives from that row on, as rows and as runs.
    #[test]
    fn reads_from_inside_a_block_skip_to_the_same_values() {
        let entries = tsbs_entries(60, 3);
        let encoded = encode(body(&entries)).expect("encodes");
        let qualifiers: Vec<Vec<u8>> = ["usage_user", "usage_idle", "usage_steal"]
            .iter()
            .map(|q| q.as_bytes().to_vec())
            .collect();
        let mut whole = ColumnRows::default();
        let all = ColumnSelect {
            family: b"f",
            qualifiers: &qualifiers,
            start: b"",
            stop: None,
        };
        decode_columns(&encoded, 1 << 24, &all, None, &mut whole).expect("decodes");
        assert_eq!(whole.len(), 180);
        for from in [1, 59, 60, 61, 119, 179] {
            let start = whole.key(from).to_vec();
            let select = ColumnSelect {
                start: &start,
                ..all
            };
            let mut rows = ColumnRows::default();
            decode_columns(&encoded, 1 << 24, &select, None, &mut rows).expect("decodes");
            assert_eq!(rows.len(), 180 - from, "rows from {from}");
            let mut runs = ColumnRuns::default();
            runs.clear(qualifiers.len());
            decode_runs(&encoded, 1 << 24, &select, None, &mut runs)
                .expect("decodes")
                .expect("plain puts");
            let given = rows_of_runs(&runs);
            assert_eq!(given.len(), 180 - from, "runs from {from}");
            for (i, (key, cells)) in given.iter().enumerate() {
                let (want_key, want) = whole.row_mut(from + i);
                assert_eq!(key.as_slice(), want_key);
                let want = by_column(want);
                assert_eq!(cells, &want, "row {} from {from}", from + i);
                let by_rows = by_column(rows.row_mut(i).1);
                assert_eq!(by_rows, want, "row {} from {from} as rows", from + i);
            }
        }
    }

    /// Runs of regular rows taken at once give what rows checked one by
    /// one give: the same rows before every stop (mid-series, between
    /// rows, a bound shorter than a row), and a "no" whenever a row in
    /// range has a time outside the read's. Series here are longer than
    /// a batch (63 rows), with gaps and a row missing a column that end
    /// a run of regular rows.
    #[test]
    fn stepped_rows_read_as_rows_checked_one_by_one() {
        let mut entries = tsbs_entries(150, 3);
        let step = crate::tsbs::INTERVAL_MS;
        // A gap (rows 40..44 of host 1), and row 100 of host 2 without
        // usage_user.
        let gap = |ts: u64| (40..44).contains(&((ts - crate::tsbs::T0_MS) / step));
        entries.retain(|(key, _, _)| {
            let k = KeyRef::parse(key).expect("a key");
            let host1 = k.row == crate::tsbs::cpu_row_key(1, k.timestamp).as_slice();
            let host2 = k.row == crate::tsbs::cpu_row_key(2, k.timestamp).as_slice();
            !(host1 && gap(k.timestamp)
                || host2
                    && k.timestamp == crate::tsbs::T0_MS + 100 * step
                    && k.qualifier == b"usage_user")
        });
        let encoded = encode(body(&entries)).expect("encodes");
        let qualifiers: Vec<Vec<u8>> = ["usage_user", "usage_idle"]
            .iter()
            .map(|q| q.as_bytes().to_vec())
            .collect();
        let all = ColumnSelect {
            family: b"f",
            qualifiers: &qualifiers,
            start: b"",
            stop: None,
        };
        let mut whole = ColumnRows::default();
        decode_columns(&encoded, 1 << 24, &all, None, &mut whole).expect("decodes");
        assert_eq!(whole.len(), 3 * 150 - 4);
        let keys: Vec<Vec<u8>> = (0..whole.len()).map(|i| whole.key(i).to_vec()).collect();
        let mut bounds: Vec<Vec<u8>> = Vec::new();
        for i in (0..keys.len()).step_by(5).chain([1, 63, 64, 65, 150, 151]) {
            let key = &keys[i];
            bounds.push(key.clone());
            let mut after = key.clone();
            after.push(0);
            bounds.push(after);
            let mut between = key.clone();
            let at = between.len() - 1;
            between[at] = between[at].wrapping_add(1);
            bounds.push(between);
            bounds.push(key[..key.len() - 8].to_vec());
        }
        let t0 = crate::tsbs::T0_MS;
        let windows = [
            None,
            Some((0, u64::MAX)),
            Some((t0, t0 + 150 * step)),
            Some((t0 + step, u64::MAX)),
            Some((0, t0 + 149 * step)),
            Some((t0 + 70 * step, t0 + 80 * step)),
        ];
        let starts: Vec<Vec<u8>> = vec![Vec::new(), keys[10].clone(), keys[200].clone()];
        let mut checked = 0;
        for start in &starts {
            for stop in bounds.iter().map(Some).chain([None]) {
                let select = ColumnSelect {
                    start,
                    stop: stop.map(Vec::as_slice),
                    ..all
                };
                let mut rows = ColumnRows::default();
                let want_read =
                    decode_columns(&encoded, 1 << 24, &select, None, &mut rows).expect("decodes");
                for window in windows {
                    let answers =
                        move |ts: u64| window.is_none_or(|(lo, hi)| (lo..hi).contains(&ts));
                    let mut runs = ColumnRuns::default();
                    runs.clear(qualifiers.len());
                    let got = decode_runs(&encoded, 1 << 24, &select, Some(&answers), &mut runs)
                        .expect("decodes");
                    let all_answer = (0..rows.len())
                        .all(|i| rows.row_mut(i).1.iter().all(|c| answers(c.timestamp)));
                    let Some(read) = got else {
                        assert!(!all_answer, "refused though every time answers: {window:?}");
                        continue;
                    };
                    assert!(
                        all_answer,
                        "taken though a time does not answer: {window:?}"
                    );
                    assert_eq!(read, want_read);
                    let given = rows_of_runs(&runs);
                    assert_eq!(given.len(), rows.len(), "stop {stop:?}");
                    for (i, (key, cells)) in given.iter().enumerate() {
                        let (want_key, want) = rows.row_mut(i);
                        assert_eq!(key.as_slice(), want_key);
                        assert_eq!(cells, &by_column(want));
                    }
                    checked += 1;
                }
            }
        }
        assert!(checked > 1000, "{checked} reads compared");
    }

    #[test]
    fn damage_is_an_error_never_a_panic() {
        let encoded = encode(body(&tsbs_entries(40, 1))).expect("encodes");
        let qualifiers = [b"usage_user".to_vec(), b"usage_system".to_vec()];
        let select = ColumnSelect {
            family: b"f",
            qualifiers: &qualifiers,
            start: b"",
            stop: None,
        };
        let mut runs = ColumnRuns::default();
        runs.clear(qualifiers.len());
        for i in 0..encoded.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = encoded.clone();
                bad[i] ^= flip;
                let _ = decode(&bad, 1 << 20);
                let _ = decode_entries(&bad, 1 << 20, &mut Entries::default());
                let _ = last_key(&bad, 1 << 20);
                let _ = decode_runs(&bad, 1 << 20, &select, None, &mut runs);
            }
        }
        for cut in 0..encoded.len() {
            // Values are not read for it: only no panic is asked.
            let _ = last_key(&encoded[..cut], 1 << 20);
            let _ = decode_runs(&encoded[..cut], 1 << 20, &select, None, &mut runs);
            assert!(decode(&encoded[..cut], 1 << 20).is_err(), "cut at {cut}");
            let into_entries = decode_entries(&encoded[..cut], 1 << 20, &mut Entries::default());
            assert!(into_entries.is_err(), "cut at {cut}");
        }
        assert!(decode(&encoded, 100).is_err(), "size limit");
        assert!(
            decode_entries(&encoded, 100, &mut Entries::default()).is_err(),
            "size limit"
        );
        // Whole keys take more than the body they come from: entries past
        // the body's size are no error but a "no" (the caller reads the
        // body instead).
        let plain = body(&tsbs_entries(40, 1)).len();
        assert!(decode(&encoded, plain).is_ok(), "the body fits");
        let fits = decode_entries(&encoded, plain, &mut Entries::default());
        assert!(
            matches!(fits, Ok(false)),
            "entries past the body's size: {fits:?}"
        );
    }
}
