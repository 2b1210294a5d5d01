//! The manifest: which store files are live in a region, atomically.
//!
//! A region directory holds one `MANIFEST` file, replaced whole on every
//! change: written to `MANIFEST.tmp`, fsynced, renamed over `MANIFEST`, and
//! the directory fsynced. A crash leaves either the old or the new manifest,
//! never a mix; store files not named in it are leftovers and are deleted at
//! open.
//!
//! | bytes | field                                         |
//! |-------|-----------------------------------------------|
//! | 8     | magic `HALMAN\0\x01`                          |
//! | 4     | CRC32C of the body, u32 LE                    |
//! | 4     | body length, u32 LE                           |
//! | n     | body                                          |
//!
//! Body: `varint next_file_id · varint flushed_seq · varint family_count`,
//! then per family `name (len-prefixed) · varint file_count · varint
//! file_id*`, then (absent in manifests written before Kafka ingestion,
//! read as none) `varint position_count` and per source shard (a Kafka
//! partition) `stream (len-prefixed) · varint shard · varint
//! durable_below`: the resume
//! positions the region's WAL records carried, kept when the WAL segments
//! holding them are deleted after a flush.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::codec::{DecodeError, Reader, put_len_prefixed, put_varint};
use crate::error::kind::ErrorKind;
use crate::region::wal::record::SourceShard;

const MAGIC: &[u8; 8] = b"HALMAN\0\x01";
pub const MANIFEST_FILE: &str = "MANIFEST";

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("manifest i/o error. path=`{path}`, op=`{op}`: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("manifest corrupt: {what}. file=`{path}`, offset=`{offset}`")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: &'static str,
    },
}

impl ManifestError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ManifestError::Io { .. } => ErrorKind::Internal,
            ManifestError::Corrupt { .. } => ErrorKind::Corruption,
        }
    }
}

/// The live state of a region's files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    pub next_file_id: u64,
    /// Every edit with a sequence id up to this is in store files.
    pub flushed_seq: u64,
    /// Live store files per family, oldest first.
    pub families: BTreeMap<Vec<u8>, Vec<u64>>,
    /// Per source shard (a Kafka topic and partition): every message below
    /// this position is durable (see
    /// [`crate::region::wal::record::SourcePosition`]).
    pub positions: BTreeMap<SourceShard, u64>,
}

impl Manifest {
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        put_varint(&mut body, self.next_file_id);
        put_varint(&mut body, self.flushed_seq);
        put_varint(&mut body, self.families.len() as u64);
        for (name, files) in &self.families {
            put_len_prefixed(&mut body, name);
            put_varint(&mut body, files.len() as u64);
            for id in files {
                put_varint(&mut body, *id);
            }
        }
        put_varint(&mut body, self.positions.len() as u64);
        for ((stream, shard), position) in &self.positions {
            put_len_prefixed(&mut body, stream.as_bytes());
            put_varint(&mut body, u64::from(*shard));
            put_varint(&mut body, *position);
        }
        crate::fsutil::seal(MAGIC, &body)
    }

    pub fn decode(buf: &[u8]) -> Result<Manifest, DecodeError> {
        let body = crate::fsutil::unseal(MAGIC, buf).map_err(|(offset, what)| DecodeError {
            offset: offset as usize,
            what,
        })?;
        let mut r = Reader::new(body);
        let next_file_id = r.varint("next file id")?;
        let flushed_seq = r.varint("flushed sequence id")?;
        let n = r.len(body.len(), "family count")?;
        let mut families = BTreeMap::new();
        for _ in 0..n {
            let name = r.len_prefixed(body.len(), "family name")?.to_vec();
            let count = r.len(body.len(), "file count")?;
            let mut files = Vec::with_capacity(count);
            for _ in 0..count {
                files.push(r.varint("file id")?);
            }
            families.insert(name, files);
        }
        let mut positions = BTreeMap::new();
        if !r.is_empty() {
            let n = r.len(body.len(), "position count")?;
            for _ in 0..n {
                let stream = r.len_prefixed(body.len(), "position stream")?;
                let stream = String::from_utf8(stream.to_vec()).map_err(|_| DecodeError {
                    offset: r.pos(),
                    what: "position stream is not utf-8",
                })?;
                let shard =
                    u32::try_from(r.varint("position shard")?).map_err(|_| DecodeError {
                        offset: r.pos(),
                        what: "position shard",
                    })?;
                positions.insert((stream, shard), r.varint("position")?);
            }
        }
        Ok(Manifest {
            next_file_id,
            flushed_seq,
            families,
            positions,
        })
    }

    /// Reads the manifest of `dir`, or `None` for a new region.
    pub fn load(dir: &Path) -> Result<Option<Manifest>, ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        let buf = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(ManifestError::Io {
                    path,
                    op: "read manifest",
                    source,
                });
            }
        };
        Manifest::decode(&buf)
            .map(Some)
            .map_err(|e| ManifestError::Corrupt {
                path,
                offset: e.offset as u64,
                what: e.what,
            })
    }

    /// Replaces the manifest of `dir` atomically.
    pub fn store(&self, dir: &Path) -> Result<(), ManifestError> {
        crate::fsutil::replace_atomically(dir, MANIFEST_FILE, &self.encode()).map_err(|source| {
            ManifestError::Io {
                path: dir.join(MANIFEST_FILE),
                op: "replace manifest",
                source,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_checksum() {
        let mut m = Manifest {
            next_file_id: 9,
            flushed_seq: 1234,
            ..Default::default()
        };
        m.families.insert(b"cf".to_vec(), vec![3, 5, 8]);
        m.families.insert(b"meta".to_vec(), vec![]);
        m.positions.insert(("cpu".into(), 3), 1_000_000);
        m.positions.insert(("mem".into(), 0), 7);
        let buf = m.encode();
        assert_eq!(Manifest::decode(&buf).unwrap(), m);
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 1;
            assert!(Manifest::decode(&bad).is_err(), "flip at {i}");
        }
    }

    #[test]
    fn manifests_without_positions_still_read() {
        let mut m = Manifest {
            next_file_id: 2,
            flushed_seq: 10,
            ..Default::default()
        };
        m.families.insert(b"f".to_vec(), vec![1]);
        // The layout before positions: the body stops after the families.
        let mut body = Vec::new();
        put_varint(&mut body, 2);
        put_varint(&mut body, 10);
        put_varint(&mut body, 1);
        put_len_prefixed(&mut body, b"f");
        put_varint(&mut body, 1);
        put_varint(&mut body, 1);
        let old = crate::fsutil::seal(MAGIC, &body);
        assert_eq!(Manifest::decode(&old).unwrap(), m);
    }
}
