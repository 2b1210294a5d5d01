//! What every part of a store file shares: the magic and version, the
//! projection a reader decodes for, the file's meta, and its errors.

use std::path::{Path, PathBuf};

use crate::codec::DecodeError;
use crate::error::kind::ErrorKind;

pub const SST_MAGIC: &[u8; 8] = b"HALSST\0\x01";

/// The qualifiers a scan reads from one family. A TIME_SERIES block, being
/// stored by column, decodes only these (and every delete marker), so a
/// query for one field of ten walks a tenth of the cells; other blocks are
/// read whole and the scan skips what it does not want.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    qualifiers: Vec<Vec<u8>>,
    /// Its key in the block cache, never 0 (the whole block's).
    id: u64,
}

impl Projection {
    pub fn new(mut qualifiers: Vec<Vec<u8>>) -> Projection {
        qualifiers.sort();
        qualifiers.dedup();
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for q in &qualifiers {
            h.update(&(q.len() as u64).to_le_bytes());
            h.update(q);
        }
        Projection {
            qualifiers,
            id: h.digest() | 1,
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn wants(&self, qualifier: &[u8]) -> bool {
        self.qualifiers
            .binary_search_by(|q| q.as_slice().cmp(qualifier))
            .is_ok()
    }
}
pub const SST_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum SstError {
    #[error("store file i/o error. path=`{path}`, op=`{op}`: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("store file corrupt: {what}. file=`{path}`, offset=`{offset}`")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: &'static str,
    },
}

impl SstError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            SstError::Io { .. } => ErrorKind::Internal,
            SstError::Corrupt { .. } => ErrorKind::Corruption,
        }
    }
    pub(crate) fn io(path: &Path, op: &'static str, source: std::io::Error) -> Self {
        SstError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }
    pub(crate) fn corrupt(path: &Path, offset: u64, what: &'static str) -> Self {
        SstError::Corrupt {
            path: path.to_path_buf(),
            offset,
            what,
        }
    }
    pub(crate) fn decode(path: &Path, base: u64, e: DecodeError) -> Self {
        SstError::corrupt(path, base + e.offset as u64, e.what)
    }
}

/// What a store file says about itself (its meta block).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    pub family: Vec<u8>,
    pub first_key: Vec<u8>,
    pub last_key: Vec<u8>,
    pub min_ts: u64,
    pub max_ts: u64,
    /// Entries of any kind.
    pub entries: u64,
    pub delete_markers: u64,
    /// Highest sequence id of any edit in the file.
    pub max_seq: u64,
    /// Latest expiry of any cell from per-cell TTLs; `u64::MAX` when some
    /// cell has none (then only the family TTL can expire the file).
    pub max_cell_expiry: u64,
    pub created_ms: u64,
    pub data_bytes: u64,
}

/// A data block as its file holds it, for another file of the family to
/// hold as it is: a compaction copies a block no other input's key falls
/// inside instead of decoding and coding it again.
pub struct WholeBlock {
    /// The framed block, checksum included.
    pub frame: Vec<u8>,
    pub first_key: Vec<u8>,
    pub last_key: Vec<u8>,
    pub entries: u64,
    /// Length of its payload before compression.
    pub payload_len: u64,
}

pub fn file_name(file_id: u64) -> String {
    format!("{file_id:020}.sst")
}
