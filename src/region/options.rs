//! A region's settings: data, every bound with its default. A leaf, so the
//! region's parts read them without importing the region.

use std::time::Duration;

/// Region settings; every bound has a default.
#[derive(Debug, Clone)]
pub struct RegionOptions {
    /// Flush the MemStore when it holds this many bytes (default 128 MiB).
    pub flush_size: usize,
    /// Writers wait while MemStores hold more than `flush_size` × this
    /// (default 4), as HBase's `hbase.hregion.memstore.block.multiplier`.
    pub blocking_multiplier: usize,
    /// Flush a MemStore whose oldest edit is this old (default 1 hour).
    pub flush_age: Duration,
    /// Largest cell value accepted (default 10 MiB).
    pub max_value_size: usize,
    /// Flush the MemStore when the region closes (default on).
    pub flush_on_close: bool,
    /// Run flushes and compactions on background threads (default on).
    pub background: bool,
    pub compaction: CompactionOptions,
}

impl Default for RegionOptions {
    fn default() -> Self {
        RegionOptions {
            flush_size: 128 * 1024 * 1024,
            blocking_multiplier: 4,
            flush_age: Duration::from_secs(3600),
            max_value_size: 10 * 1024 * 1024,
            flush_on_close: true,
            background: true,
            compaction: CompactionOptions::default(),
        }
    }
}

/// `[region.compaction]`: the ratio rule's settings and the periodic major
/// compaction's.
#[derive(Debug, Clone)]
pub struct CompactionOptions {
    /// Fewest files a minor compaction merges (default 3).
    pub min_files: usize,
    /// Most files a minor compaction merges (default 10).
    pub max_files: usize,
    /// A file joins a minor compaction if it is at most this many times the
    /// size of the newer files in the run (default 1.2).
    pub ratio: f64,
    /// Files of about one size (each within twice the first's) that a
    /// TIME_WINDOW family's filling window merges at once (default 4,
    /// Cassandra's `min_threshold`): more rewrites less, but leaves more
    /// files for a read of the newest data.
    pub tier_files: usize,
    /// A family whose oldest file is this old gets a major compaction when
    /// the compaction check next looks (default 7 days, HBase's
    /// `hbase.hregion.majorcompaction`; zero: never), spread by a jitter of
    /// half of it either way per region and family so that they do not
    /// all rewrite at once. A family with nothing a major compaction would
    /// drop is left alone (see `compaction::periodic_major_due`).
    pub major_interval: Duration,
}

impl Default for CompactionOptions {
    fn default() -> Self {
        CompactionOptions {
            min_files: 3,
            max_files: 10,
            ratio: 1.2,
            tier_files: 4,
            major_interval: Duration::from_secs(7 * 86_400),
        }
    }
}
