//! The WAL's settings: data, every bound with its default.

use std::time::Duration;

use super::io::IoBackendChoice;

/// WAL settings.
#[derive(Debug, Clone)]
pub struct WalOptions {
    /// Preallocated size of a segment (default 64 MiB).
    pub segment_size: u64,
    /// Most bytes framed into one group commit (default 4 MiB).
    pub max_batch_bytes: usize,
    /// io_uring with fallback, or sync I/O only.
    pub io: IoBackendChoice,
    /// Batches in flight at once on io_uring (default 4).
    pub depth: usize,
    /// How often ASYNC_WAL writes are synced (default 1 s).
    pub async_sync_interval: Duration,
    /// Reuse flushed segments instead of deleting them (default on).
    pub recycle: bool,
    /// Preallocated segments a shard keeps ready beside the live one: the
    /// prepared next one and flushed ones kept for reuse (default 3).
    /// Flushed segments past it are deleted.
    pub spare_segments: usize,
    /// A log idle this long with everything in it flushed gives its
    /// preallocated space back: it goes on in a small segment, and
    /// preallocates again once written to (default 10 s; zero: never).
    pub release_after_idle: Duration,
    /// What recovery does with damage in the middle of the log.
    pub recovery: WalRecovery,
}

/// Recovery of damage in the middle of the log — in data a later record
/// says was synced, or anywhere before a closed segment's end — as opposed
/// to a torn tail, which is always cut off (it holds nothing acknowledged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WalRecovery {
    /// Refuse to open, naming the file and offset (the default: nothing
    /// acknowledged is given up without an operator saying so).
    #[default]
    Strict,
    /// Open with every record before the damage and none after it (later
    /// segments are set aside as `.damaged`), logged and counted: a
    /// point-in-time recovery.
    StopAtDamage,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_size: 64 * 1024 * 1024,
            max_batch_bytes: 4 * 1024 * 1024,
            io: IoBackendChoice::Auto,
            depth: 4,
            async_sync_interval: Duration::from_secs(1),
            recycle: true,
            spare_segments: 3,
            release_after_idle: Duration::from_secs(10),
            recovery: WalRecovery::Strict,
        }
    }
}
