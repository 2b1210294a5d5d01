//! Column family attributes and write durability, as HBase names them.

use crate::error::{Error, Result};

use serde::{Deserialize, Serialize};

/// Which keys a store file's bloom filter holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BloomType {
    #[serde(rename = "NONE", alias = "none")]
    None,
    /// Row keys: Gets skip files that cannot hold the row.
    #[serde(rename = "ROW", alias = "row")]
    Row,
    /// Row + qualifier: Gets of given columns skip files without them.
    #[serde(rename = "ROWCOL", alias = "rowcol")]
    RowCol,
    /// The first `prefix_length` bytes of row keys (HBase's
    /// `RowPrefixBloomFilter.prefix_length`): scans within one prefix — a
    /// series query — skip files without it, which a ROW bloom cannot do.
    #[serde(rename = "ROWPREFIX", alias = "rowprefix")]
    RowPrefix,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compression {
    #[serde(rename = "NONE", alias = "none")]
    None,
    #[serde(rename = "SNAPPY", alias = "snappy")]
    Snappy,
}

/// How keys inside a data block are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataBlockEncoding {
    /// Every key whole.
    #[serde(rename = "NONE", alias = "none")]
    None,
    /// Each key stores only what differs from the previous one.
    #[serde(rename = "PREFIX", alias = "prefix")]
    Prefix,
    /// By column, with time-series codecs: delta-of-delta timestamps and
    /// row-key counters, decimal-aware deltas (or Gorilla XOR) for floats,
    /// deltas for integers (`src/region/sst/ts_block.rs`); read back as
    /// PREFIX blocks.
    #[serde(rename = "TIME_SERIES", alias = "time_series")]
    TimeSeries,
}

/// Which store files a family's minor compactions merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CompactionStrategy {
    /// HBase's ratio rule over files by age, whatever time they hold.
    #[default]
    #[serde(rename = "RATIO", alias = "ratio")]
    Ratio,
    /// Time windows (HBase's date-tiered, Cassandra's and GreptimeDB's
    /// TWCS): a file belongs to the window of its newest cell; the newest
    /// window compacts by size tiers, an older one once into a single
    /// file and then never again; every output is split at window
    /// boundaries, so late points land in their own window's file.
    #[serde(rename = "TIME_WINDOW", alias = "time_window")]
    TimeWindow,
}

/// When a write is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Durability {
    /// No WAL: durable only once flushed to a store file.
    #[serde(rename = "SKIP_WAL", alias = "skip_wal")]
    SkipWal,
    /// Written to the WAL at once, synced on an interval.
    #[serde(rename = "ASYNC_WAL", alias = "async_wal")]
    AsyncWal,
    /// Acknowledged after the WAL is synced (fdatasync).
    #[default]
    #[serde(rename = "SYNC_WAL", alias = "sync_wal")]
    SyncWal,
}

/// A column family as written in configuration and API requests, with
/// HBase's attribute names; every attribute but `name` has HBase's default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilySpec {
    pub name: String,
    #[serde(default = "FamilySpec::one")]
    pub versions: u32,
    #[serde(default)]
    pub min_versions: u32,
    /// Seconds; absent is forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
    #[serde(default = "FamilySpec::block")]
    pub blocksize: usize,
    #[serde(default = "FamilySpec::yes")]
    pub blockcache: bool,
    #[serde(default)]
    pub in_memory: bool,
    #[serde(default = "FamilySpec::row")]
    pub bloomfilter: BloomType,
    /// Bytes of row prefix a ROWPREFIX bloom holds; when absent, a table
    /// sets it to the salt + series identity of its key schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_length: Option<usize>,
    #[serde(default = "FamilySpec::no_compression")]
    pub compression: Compression,
    #[serde(default = "FamilySpec::prefix")]
    pub data_block_encoding: DataBlockEncoding,
    /// The minor-compaction policy (RATIO unless named).
    #[serde(default, skip_serializing_if = "FamilySpec::is_ratio")]
    pub compaction: CompactionStrategy,
    /// Seconds of a TIME_WINDOW family's window (default a day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_window: Option<u64>,
}

impl FamilySpec {
    fn one() -> u32 {
        1
    }
    fn block() -> usize {
        64 * 1024
    }
    fn yes() -> bool {
        true
    }
    fn row() -> BloomType {
        BloomType::Row
    }
    fn no_compression() -> Compression {
        Compression::None
    }
    fn prefix() -> DataBlockEncoding {
        DataBlockEncoding::Prefix
    }
    fn is_ratio(c: &CompactionStrategy) -> bool {
        *c == CompactionStrategy::Ratio
    }

    /// A family with every attribute at its default.
    pub fn named(name: &str) -> FamilySpec {
        serde_json::from_value(serde_json::json!({ "name": name }))
            .expect("a family of defaults deserialises")
    }

    /// The family halite makes for tables it creates itself (InfluxDB
    /// measurements, Prometheus samples): TIME_SERIES blocks, snappy.
    /// A family of InfluxDB's and Prometheus' points: time-series
    /// blocks of 256 KiB bodies. A body repeats each cell's key, so such
    /// a block is about 9 KiB on disk; at 64 KiB a block's own header,
    /// first key and index entry took a tenth of the room (TSBS at 3
    /// days: 1.34 bytes a value at 64 KiB, 1.19 at 256 KiB).
    pub fn time_series(name: &str) -> FamilySpec {
        FamilySpec {
            data_block_encoding: DataBlockEncoding::TimeSeries,
            compression: Compression::Snappy,
            blocksize: 256 * 1024,
            ..FamilySpec::named(name)
        }
    }

    pub fn descriptor(&self) -> FamilyDescriptor {
        FamilyDescriptor {
            name: self.name.as_bytes().to_vec(),
            versions: self.versions,
            min_versions: self.min_versions,
            ttl_secs: self.ttl,
            block_size: self.blocksize,
            block_cache: self.blockcache,
            in_memory: self.in_memory,
            bloom: self.bloomfilter,
            bloom_prefix_len: self.prefix_length.unwrap_or(0),
            compression: self.compression,
            data_block_encoding: self.data_block_encoding,
            compaction: self.compaction,
            time_window_secs: self.time_window,
        }
    }
}

/// A TIME_WINDOW family's window when it names none: a day, as HBase's
/// date-tiered base window and TWCS's usual choice for daily queries.
pub const DEFAULT_TIME_WINDOW_SECS: u64 = 86_400;

/// A column family and its storage attributes. Defaults follow HBase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyDescriptor {
    pub name: Vec<u8>,
    /// Most versions of a column kept (default 1).
    pub versions: u32,
    /// Versions kept even when expired (default 0).
    pub min_versions: u32,
    /// Seconds a cell lives after its timestamp; `None` is forever.
    pub ttl_secs: Option<u64>,
    /// Target uncompressed size of a data block (default 64 KiB).
    pub block_size: usize,
    /// Whether data blocks of this family enter the block cache.
    pub block_cache: bool,
    /// Cache priority: in-memory families are evicted last.
    pub in_memory: bool,
    pub bloom: BloomType,
    /// Row prefix length of a ROWPREFIX bloom (0 for other blooms).
    pub bloom_prefix_len: usize,
    pub compression: Compression,
    pub data_block_encoding: DataBlockEncoding,
    pub compaction: CompactionStrategy,
    /// A TIME_WINDOW family's window in seconds as written (`None`: the
    /// default, see [`FamilyDescriptor::time_window_ms`]; a RATIO family
    /// with one set is refused by [`FamilyDescriptor::validate`]).
    pub time_window_secs: Option<u64>,
}

impl FamilyDescriptor {
    pub fn new(name: impl Into<Vec<u8>>) -> Self {
        FamilyDescriptor {
            name: name.into(),
            versions: 1,
            min_versions: 0,
            ttl_secs: None,
            block_size: 64 * 1024,
            block_cache: true,
            in_memory: false,
            bloom: BloomType::Row,
            bloom_prefix_len: 0,
            compression: Compression::None,
            data_block_encoding: DataBlockEncoding::Prefix,
            compaction: CompactionStrategy::Ratio,
            time_window_secs: None,
        }
    }

    /// TIME_WINDOW compaction with windows of `secs` seconds.
    pub fn time_window(mut self, secs: u64) -> Self {
        self.compaction = CompactionStrategy::TimeWindow;
        self.time_window_secs = Some(secs);
        self
    }

    /// A TIME_WINDOW family's window in milliseconds.
    pub fn time_window_ms(&self) -> Option<u64> {
        match self.compaction {
            CompactionStrategy::TimeWindow => Some(
                self.time_window_secs
                    .unwrap_or(DEFAULT_TIME_WINDOW_SECS)
                    .saturating_mul(1000),
            ),
            CompactionStrategy::Ratio => None,
        }
    }

    pub fn versions(mut self, n: u32) -> Self {
        self.versions = n;
        self
    }
    pub fn min_versions(mut self, n: u32) -> Self {
        self.min_versions = n;
        self
    }
    pub fn ttl_secs(mut self, secs: u64) -> Self {
        self.ttl_secs = Some(secs);
        self
    }
    pub fn block_size(mut self, bytes: usize) -> Self {
        self.block_size = bytes;
        self
    }
    pub fn block_cache(mut self, on: bool) -> Self {
        self.block_cache = on;
        self
    }
    pub fn in_memory(mut self, on: bool) -> Self {
        self.in_memory = on;
        self
    }
    /// A ROWPREFIX bloom over the first `len` bytes of row keys.
    pub fn bloom_prefix(mut self, len: usize) -> Self {
        self.bloom = BloomType::RowPrefix;
        self.bloom_prefix_len = len;
        self
    }
    pub fn bloom(mut self, bloom: BloomType) -> Self {
        self.bloom = bloom;
        self
    }
    pub fn compression(mut self, c: Compression) -> Self {
        self.compression = c;
        self
    }
    pub fn data_block_encoding(mut self, e: DataBlockEncoding) -> Self {
        self.data_block_encoding = e;
        self
    }

    /// Family TTL in milliseconds, if any.
    pub fn ttl_ms(&self) -> Option<u64> {
        self.ttl_secs.map(|s| s.saturating_mul(1000))
    }

    /// The time at which a cell written at `timestamp` expires, or `None`
    /// if never. A cell TTL cannot outlive the family TTL.
    pub fn expires_at(&self, timestamp: u64, cell_ttl_ms: Option<u64>) -> Option<u64> {
        let ttl = match (self.ttl_ms(), cell_ttl_ms) {
            (Some(f), Some(c)) => Some(f.min(c)),
            (f, c) => f.or(c),
        };
        ttl.map(|t| timestamp.saturating_add(t))
    }

    pub fn validate(&self) -> Result<()> {
        let name = String::from_utf8_lossy(&self.name);
        if self.name.is_empty() || self.name.len() > crate::cell::MAX_FAMILY_LEN {
            return Err(Error::InvalidInput(format!(
                "family name must be 1..=255 bytes. family=`{name}`"
            )));
        }
        if self
            .name
            .iter()
            .any(|b| !(b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-' || *b == b'.'))
        {
            return Err(Error::InvalidInput(format!(
                "family name may hold only letters, digits, '_', '-' and '.'. family=`{name}`"
            )));
        }
        match (self.bloom, self.bloom_prefix_len) {
            (BloomType::RowPrefix, 0) => {
                return Err(Error::InvalidInput(format!(
                    "BLOOMFILTER => ROWPREFIX needs a prefix_length of at least 1 byte. family=`{name}`"
                )));
            }
            (BloomType::RowPrefix, n) if n > u16::MAX as usize => {
                return Err(Error::InvalidInput(format!(
                    "prefix_length must be at most 65535 bytes. family=`{name}`"
                )));
            }
            (BloomType::RowPrefix, _) | (_, 0) => {}
            (_, _) => {
                return Err(Error::InvalidInput(format!(
                    "prefix_length applies only to BLOOMFILTER => ROWPREFIX. family=`{name}`"
                )));
            }
        }
        if self.versions == 0 {
            return Err(Error::InvalidInput(format!(
                "VERSIONS must be at least 1. family=`{name}`"
            )));
        }
        if self.min_versions > self.versions {
            return Err(Error::InvalidInput(format!(
                "MIN_VERSIONS cannot exceed VERSIONS. family=`{name}`, min_versions=`{}`, versions=`{}`",
                self.min_versions, self.versions
            )));
        }
        if self.block_size < 1024 || self.block_size > 16 * 1024 * 1024 {
            return Err(Error::InvalidInput(format!(
                "BLOCKSIZE must be between 1 KiB and 16 MiB. family=`{name}`, block_size=`{}`",
                self.block_size
            )));
        }
        match (self.compaction, self.time_window_secs) {
            (CompactionStrategy::Ratio, Some(_)) => {
                return Err(Error::InvalidInput(format!(
                    "time_window applies only to COMPACTION => TIME_WINDOW. family=`{name}`"
                )));
            }
            (CompactionStrategy::TimeWindow, Some(w)) if !(60..=366 * 86_400).contains(&w) => {
                return Err(Error::InvalidInput(format!(
                    "time_window must be between 60 seconds and 366 days. family=`{name}`, time_window=`{w}`"
                )));
            }
            _ => {}
        }
        if self.ttl_secs == Some(0) {
            return Err(Error::InvalidInput(format!(
                "TTL must be at least 1 second (omit it for forever). family=`{name}`"
            )));
        }
        Ok(())
    }
}
