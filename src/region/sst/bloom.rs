//! Bloom filter over rows (ROW) or rows + qualifiers (ROWCOL).
//!
//! Body layout: `varint hashes · varint bit_count · bits (little-endian
//! bytes)`. Probes use double hashing over one xxh3-64 of the key.

use xxhash_rust::xxh3::xxh3_64;

use crate::codec::{DecodeError, Reader, put_varint};

/// The bytes hashed for a row + qualifier probe: the row is length-prefixed
/// so ("ab","c") and ("a","bc") differ.
pub fn rowcol_key(row: &[u8], qualifier: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + row.len() + qualifier.len());
    k.extend_from_slice(&(row.len() as u16).to_be_bytes());
    k.extend_from_slice(row);
    k.extend_from_slice(qualifier);
    k
}

pub fn hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

#[derive(Debug, Clone)]
pub struct Bloom {
    hashes: u32,
    bits: Vec<u8>,
}

impl Bloom {
    /// About 1 % false positives at 10 bits per key.
    pub fn build(key_hashes: &[u64]) -> Bloom {
        let bit_count = (key_hashes.len() * 10).max(64);
        let mut bloom = Bloom {
            hashes: 7,
            bits: vec![0u8; bit_count.div_ceil(8)],
        };
        for h in key_hashes {
            bloom.insert(*h);
        }
        bloom
    }

    fn bit_count(&self) -> u64 {
        self.bits.len() as u64 * 8
    }

    fn insert(&mut self, h: u64) {
        let n = self.bit_count();
        let (mut a, b) = (h, h.rotate_left(32) | 1);
        for _ in 0..self.hashes {
            let bit = a % n;
            self.bits[(bit / 8) as usize] |= 1 << (bit % 8);
            a = a.wrapping_add(b);
        }
    }

    pub fn may_contain(&self, h: u64) -> bool {
        let n = self.bit_count();
        if n == 0 {
            return true;
        }
        let (mut a, b) = (h, h.rotate_left(32) | 1);
        for _ in 0..self.hashes {
            let bit = a % n;
            if self.bits[(bit / 8) as usize] & (1 << (bit % 8)) == 0 {
                return false;
            }
            a = a.wrapping_add(b);
        }
        true
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, u64::from(self.hashes));
        put_varint(out, self.bit_count());
        out.extend_from_slice(&self.bits);
    }

    pub fn decode(body: &[u8]) -> Result<Bloom, DecodeError> {
        let mut r = Reader::new(body);
        let hashes = r.len(30, "bloom hash count")? as u32;
        let bit_count = r.len(body.len() * 8, "bloom bit count")?;
        if bit_count % 8 != 0 || hashes == 0 {
            return Err(DecodeError {
                offset: 0,
                what: "bloom parameters invalid",
            });
        }
        let bits = r.bytes(bit_count / 8, "bloom bits")?.to_vec();
        Ok(Bloom { hashes, bits })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let keys: Vec<u64> = (0..10_000u32).map(|i| hash(&i.to_be_bytes())).collect();
        let bloom = Bloom::build(&keys);
        let mut buf = vec![];
        bloom.encode(&mut buf);
        let bloom = Bloom::decode(&buf).unwrap();
        assert!(keys.iter().all(|h| bloom.may_contain(*h)));
        let fp = (10_000..20_000u32)
            .filter(|i| bloom.may_contain(hash(&i.to_be_bytes())))
            .count();
        assert!(fp < 300, "false positives {fp}");
    }
}
