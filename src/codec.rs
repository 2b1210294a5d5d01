//! Little helpers for the binary formats: LEB128 varints and a bounds-checked
//! reader that reports where it ran out instead of panicking.

#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// The first index in `0..n` for which `below` is false, `below` being
/// true up to some index and false from there (as `slice::partition_point`,
/// for sequences that are not a slice).
pub fn partition_index(n: usize, mut below: impl FnMut(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// A xorshift64 generator seeded with `state` (not 0): tests' random
/// numbers, the same on every run.
#[cfg(test)]
pub(crate) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// How many leading bytes `a` and `b` have in common, eight at a time
/// (keys of one row share tens of bytes, and prefix encoding asks this for
/// every cell it writes).
#[inline]
pub fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let diff = x ^ y;
        if diff != 0 {
            return i + (diff.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// `a == b`, compared in 8-byte words inline (see [`compare_bytes`]): the
/// scan asks it of a row key and a column for every cell it reads.
#[inline]
pub fn bytes_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && common_prefix_len(a, b) == a.len()
}

/// Byte-wise lexicographic order, as `a.cmp(b)`, compared in 8-byte words
/// inline. Keys are a few tens of bytes and skiplist inserts and merges
/// compare them millions of times a second: the call into libc's `memcmp`
/// cost more than the comparison (10-15 % of ingest CPU).
#[inline]
pub fn compare_bytes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let shared = common_prefix_len(a, b);
    match (a.get(shared), b.get(shared)) {
        (Some(x), Some(y)) => x.cmp(y),
        _ => a.len().cmp(&b.len()),
    }
}

/// A cursor over a byte slice whose every read is checked. Errors carry the
/// offset (relative to the slice) at which the data stopped making sense.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Where and why a [`Reader`] gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError {
    pub offset: usize,
    pub what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    pub fn at(buf: &'a [u8], pos: usize) -> Self {
        Reader { buf, pos }
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    fn fail<T>(&self, what: &'static str) -> Result<T, DecodeError> {
        Err(DecodeError {
            offset: self.pos,
            what,
        })
    }

    #[inline(always)]
    pub fn varint(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        // Most varints in blocks and WAL records (lengths) are one byte.
        if let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        self.varint_multibyte(what)
    }

    #[inline(never)]
    fn varint_multibyte(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        let mut shift = 0;
        loop {
            let Some(&b) = self.buf.get(self.pos) else {
                return self.fail(what);
            };
            if shift == 63 && b > 1 {
                return self.fail(what);
            }
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return self.fail(what);
            }
        }
    }

    /// A varint that must fit in `usize` and be at most `max`.
    #[inline]
    pub fn len(&mut self, max: usize, what: &'static str) -> Result<usize, DecodeError> {
        let start = self.pos;
        let v = self.varint(what)?;
        if v > max as u64 {
            return Err(DecodeError {
                offset: start,
                what,
            });
        }
        Ok(v as usize)
    }

    #[inline]
    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return self.fail(what);
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.bytes(1, what)?[0])
    }
    pub fn u32_le(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64_le(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let b = self.bytes(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A varint length followed by that many bytes.
    pub fn len_prefixed(
        &mut self,
        max: usize,
        what: &'static str,
    ) -> Result<&'a [u8], DecodeError> {
        let n = self.len(max, what)?;
        self.bytes(n, what)
    }
}

pub fn put_len_prefixed(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Lowercase hex digits of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// Bytes from hex digits (either case).
pub fn from_hex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err(format!("hex string has odd length: `{}`", quote_prefix(s)));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("not hex: `{}`", quote_prefix(s)))
        })
        .collect()
}

/// Longest prefix of a user's input an error message quotes.
pub const QUOTED_CHARS: usize = 64;

/// At most the first [`QUOTED_CHARS`] characters of `s`, marked when cut:
/// what an error quotes of a user's input, so a huge value does not come
/// back whole (twice, in a partial write's message and its list).
pub fn quote_prefix(s: &str) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(QUOTED_CHARS) {
        None => std::borrow::Cow::Borrowed(s),
        Some((cut, _)) => {
            std::borrow::Cow::Owned(format!("{}… ({} bytes in all)", &s[..cut], s.len()))
        }
    }
}

/// `s` cut to at most `max` bytes (at a character boundary), marked when
/// cut: for messages that may carry a user's input inside.
pub fn bounded(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    std::borrow::Cow::Owned(format!("{}… ({} bytes in all)", &s[..cut], s.len()))
}

/// The smallest key greater than every key starting with `prefix`, or `None`
/// if there is none (all 0xff).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last != 0xff {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefix_len_matches_the_bytewise_answer() {
        let a: Vec<u8> = (0..40u8).collect();
        for cut in 0..=40 {
            for flip in [cut, 39] {
                let mut b = a[..cut].to_vec();
                b.extend_from_slice(&a[cut..]);
                if flip < b.len() && flip >= cut {
                    b[flip] ^= 0x10;
                }
                let want = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
                assert_eq!(common_prefix_len(&a, &b), want);
                assert_eq!(common_prefix_len(&a[..cut], &b), want.min(cut));
            }
        }
    }

    proptest::proptest! {
        /// The word-wise comparisons answer as the byte-wise ones, for
        /// lengths around the 8-byte steps and bytes that differ in any
        /// place (small alphabets make long shared prefixes likely).
        #[test]
        fn word_wise_comparisons_agree_with_slices(
            a in proptest::collection::vec(0u8..3, 0..40),
            b in proptest::collection::vec(0u8..3, 0..40),
            high in 0u8..2,
        ) {
            let lift = |v: &[u8]| v.iter().map(|x| x | (high << 7)).collect::<Vec<u8>>();
            let (a, b) = (lift(&a), lift(&b));
            proptest::prop_assert_eq!(compare_bytes(&a, &b), a.cmp(&b));
            proptest::prop_assert_eq!(compare_bytes(&a, &a), std::cmp::Ordering::Equal);
            proptest::prop_assert_eq!(bytes_equal(&a, &b), a == b);
            let prefix = &a[..a.len() / 2];
            proptest::prop_assert_eq!(compare_bytes(prefix, &a), prefix.cmp(&a[..]));
        }
    }

    #[test]
    fn varints_round_trip_and_reject_overlong() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            assert_eq!(buf.len(), varint_len(v));
            assert_eq!(Reader::new(&buf).varint("v").unwrap(), v);
        }
        assert!(Reader::new(&[0xff; 11]).varint("v").is_err());
        assert!(Reader::new(&[0x80]).varint("v").is_err());
    }

    #[test]
    fn prefix_successor_skips_ff() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
    }
}
