//! Configuration: one TOML file (`configs/halite.toml`), every setting with
//! a default, overridable by environment variables and command-line flags.
//!
//! Overrides name a setting by its path: `wal.depth` is set by the
//! environment variable `HALITE__WAL__DEPTH` or the flag
//! `--set wal.depth=8`. Flags win over the environment, which wins over the
//! file. Sizes take `KiB`/`MiB`/`GiB` suffixes (`"64MiB"`) or plain bytes;
//! durations take `ms`/`s`/`m`/`h` (`"250ms"`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use crate::units::{ByteSize, Dur};

use crate::region::RegionOptions;
use crate::region::compaction::CompactionOptions;
use crate::region::wal::io::IoBackendChoice;
use crate::region::wal::{WalOptions, WalRecovery};
use crate::schema::{BloomType, CompactionStrategy, FamilySpec};
use crate::store::StoreOptions;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file. path=`{path}`: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config is not valid TOML or has a wrong setting: {0}")]
    Parse(String),
    #[error("override `{0}` must look like `section.key=value`")]
    BadOverride(String),
    #[error("invalid setting `{key}`: {why}")]
    Invalid { key: &'static str, why: String },
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where WAL segments and regions live (default `data`).
    pub data_dir: PathBuf,
    pub server: ServerConfig,
    pub wal: WalConfig,
    pub region: RegionConfig,
    pub cache: CacheConfig,
    /// Tables created at start-up when missing (namespaces too).
    pub tables: Vec<crate::catalog::CreateTable>,
    /// Kafka ingestion; off unless brokers and topics are set.
    pub kafka: crate::ingest::kafka::KafkaConfig,
    /// The object store a cluster's nodes keep store files, manifests,
    /// leases and the catalog on (read in cluster mode only).
    pub objects: crate::objects::ObjectsConfig,
    pub cluster: ClusterConfig,
    pub log: LogConfig,
    pub influx: InfluxConfig,
    pub prometheus: PrometheusConfig,
    pub auth: AuthConfig,
}

/// `[auth]`: who may use the API (docs/security.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Require a token on every route but `/healthz`, `/readyz`, `/ping`,
    /// the explorer's files and (with `metrics_open`) `/metrics`. Default
    /// false, but authentication is on whatever this says when
    /// `server.listen` is not a loopback address (unless `insecure`).
    pub enabled: bool,
    /// A token with admin over everything, for making the first tokens
    /// and for a cluster's nodes to call on each other: at least 16
    /// characters (say `openssl rand -hex 32`), better given in the
    /// environment (`HALITE__AUTH__BOOTSTRAP_TOKEN`) than in a file.
    pub bootstrap_token: String,
    /// `/metrics` answers without a token (default true, as Prometheus
    /// scrapes without one unless told).
    pub metrics_open: bool,
    /// Serve without authentication even on an address other machines
    /// reach (`halite serve --insecure`).
    pub insecure: bool,
    /// Refused credentials an address may present before each further
    /// refusal waits its turn, from 100 ms doubling up to 5 s (default 5;
    /// 0: never slowed). docs/security.md, "Guessing".
    pub slow_after_failures: u32,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            enabled: false,
            bootstrap_token: String::new(),
            metrics_open: true,
            insecure: false,
            slow_after_failures: 5,
        }
    }
}

/// `[influx]`: the InfluxDB 1.x protocol (`/write`, `/query`, `/ping`).
/// A database is a namespace; a measurement is a table of open tag sets,
/// made on its first point with these settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InfluxConfig {
    /// Salt buckets (and regions) of a measurement's table (default 4).
    pub buckets: u32,
    /// Most series a measurement's table holds (default 1,000,000); a
    /// write of new series past it is answered 503.
    pub series_limit: u64,
    /// Most tables a database holds for writes to make a new
    /// measurement's (default 2,000); lines of a new measurement past it
    /// are refused, naming the setting.
    pub max_measurements: usize,
    /// The compaction policy of a measurement's family (default
    /// `TIME_WINDOW`: files by time window, a closed window merged once and
    /// then left alone, as InfluxDB's shards by time; `RATIO` otherwise).
    pub compaction: CompactionStrategy,
    /// Seconds of a `TIME_WINDOW` window (default 86,400: a day).
    pub time_window: u64,
    /// The bloom filter of a measurement's family (default `NONE`: a row
    /// is one point, and measurements are read by scans of series, which
    /// a filter of every point's row does not serve; at 4,000 hosts it
    /// was 8 % of the files. `ROW` serves gets of single rows).
    pub bloom: BloomType,
}

impl Default for InfluxConfig {
    fn default() -> Self {
        InfluxConfig {
            buckets: 4,
            series_limit: 1_000_000,
            max_measurements: 2_000,
            compaction: CompactionStrategy::TimeWindow,
            time_window: 86_400,
            bloom: BloomType::None,
        }
    }
}

impl InfluxConfig {
    /// The family every measurement's (and Prometheus samples') table
    /// holds its fields in.
    pub fn family(&self) -> FamilySpec {
        FamilySpec {
            compaction: self.compaction,
            time_window: (self.compaction == CompactionStrategy::TimeWindow)
                .then_some(self.time_window),
            bloomfilter: self.bloom,
            ..FamilySpec::time_series("f")
        }
    }

    /// How a database's measurement and samples tables are made.
    pub fn template(&self) -> crate::ingest::databases::TableTemplate {
        crate::ingest::databases::TableTemplate {
            family: self.family(),
            buckets: self.buckets,
            series_limit: self.series_limit,
            max_measurements: self.max_measurements,
        }
    }
}

/// `[prometheus]`: remote write and remote read (`/api/v1/write`,
/// `/api/v1/read`). Samples go into the tables `[influx]` describes.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrometheusConfig {
    /// Most samples one remote-write request may hold (default
    /// 1,000,000; Prometheus sends `queue_config.max_samples_per_send`,
    /// 500 or 2,000 by default); a larger request is answered 400.
    pub max_samples_per_request: usize,
    /// Most samples one remote-read request may answer (default
    /// 50,000,000, as Prometheus' `--storage.remote.read-sample-limit`);
    /// past it the request is answered 400.
    pub max_read_samples: usize,
}

impl Default for PrometheusConfig {
    fn default() -> Self {
        PrometheusConfig {
            max_samples_per_request: 1_000_000,
            max_read_samples: 50_000_000,
        }
    }
}

/// `[cluster]`: several nodes sharing one consumer group and one object
/// store (docs/cluster.md). Off unless `node` is set.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's name, unique among the cluster's nodes; empty (the
    /// default): a single node, everything on its own disk.
    pub node: String,
    /// Where the other nodes reach this node's API (`host:port`); empty:
    /// `server.listen`.
    pub advertise: String,
    /// Disk kept for store files of regions other nodes own, which
    /// queries here read (default 4GiB); the least recently read go first.
    pub cache_size: ByteSize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node: String::new(),
            advertise: String::new(),
            cache_size: ByteSize(4 << 30),
        }
    }
}

impl ClusterConfig {
    pub fn enabled(&self) -> bool {
        !self.node.is_empty()
    }
}

/// `[log]`: the service's log lines, on stderr.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `human` (default) or `json` (one object per line).
    pub format: String,
    /// A `RUST_LOG`-style filter (default `info`); `RUST_LOG` wins.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: "human".into(),
            level: "info".into(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the HTTP API (default 127.0.0.1:8070).
    pub listen: String,
    /// A second address answering only `/metrics`, `/healthz` and `/readyz`,
    /// for a scraper kept off the API's port (default empty: the API port
    /// serves them alone).
    pub metrics_listen: String,
    /// Largest request body accepted (default 25MiB, as InfluxDB).
    pub max_body: ByteSize,
    /// Line protocol is encoded and handed to the writers in pieces of about
    /// this much (default 4MiB), so a bigger body's logging overlaps its
    /// parsing. A piece should hold several points of each series: a piece
    /// with one point per series makes every MemStore insert a search
    /// across the MemStore (256KiB pieces cost 13.2 µs of CPU a row at
    /// 1,000 TSBS hosts, 4MiB pieces 8.2).
    pub write_piece: ByteSize,
    /// How long a request body may take to arrive once its headers have
    /// (default 30s); a slower or stalled client gets 408 and writes nothing.
    pub body_timeout: Dur,
    /// How long a request's headers may take to arrive (default 10s),
    /// counted from their first byte (from the connection's start for its
    /// first request): a client stalled inside them is disconnected.
    pub header_timeout: Dur,
    /// How long a kept-alive connection may wait between requests
    /// (default 5m, longer than the 90 s Go's clients keep idle
    /// connections, so they close first and never send on one the server
    /// is closing).
    pub idle_timeout: Dur,
    /// PEM certificate chain: with `tls_key`, the API and metrics ports
    /// speak HTTPS only. Read again on SIGHUP.
    pub tls_cert: String,
    /// PEM private key of `tls_cert`.
    pub tls_key: String,
    /// Writer shards, each with a WAL (default: one per core).
    pub shards: usize,
    /// Threads for the bucket scans of queries (default: two per core).
    pub query_threads: usize,
    /// Origins (`https://grafana.example.com`) whose pages may write,
    /// delete and administer through their visitors' browsers (default
    /// none: only this server's own pages and clients that are not
    /// browsers; `*`: any page). docs/security.md, "Browsers".
    pub allowed_origins: Vec<String>,
    /// Host names a server that checks no tokens answers besides IP
    /// addresses, `localhost` and its listen and advertised names
    /// (default none; `*`: any), against DNS rebinding.
    pub allowed_hosts: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        ServerConfig {
            listen: "127.0.0.1:8070".into(),
            metrics_listen: String::new(),
            max_body: ByteSize(25 << 20),
            write_piece: ByteSize(4 << 20),
            body_timeout: Dur(Duration::from_secs(30)),
            header_timeout: Dur(Duration::from_secs(10)),
            idle_timeout: Dur(Duration::from_secs(300)),
            tls_cert: String::new(),
            tls_key: String::new(),
            shards: cores,
            query_threads: 2 * cores,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WalConfig {
    /// Preallocated size of a segment (default 64MiB).
    pub segment_size: ByteSize,
    /// Most bytes framed into one group commit (default 4MiB).
    pub max_batch_bytes: ByteSize,
    /// `auto` (io_uring, falling back to write+fdatasync) or `sync`.
    pub io: String,
    /// Batches in flight at once on io_uring (default 4).
    pub depth: usize,
    /// How often ASYNC_WAL writes are synced (default 1s).
    pub async_sync_interval: Dur,
    /// Reuse flushed segments instead of deleting them (default true).
    pub recycle: bool,
    /// Preallocated segments a shard keeps ready beside the live one (the
    /// next one and flushed ones kept for reuse; default 3): flushed
    /// segments past it are deleted.
    pub spare_segments: usize,
    /// A log idle this long with everything flushed gives its preallocated
    /// space back (default 10s; "0s": never).
    pub release_after_idle: Dur,
    /// Damage in the middle of the log at recovery: `strict` refuses to
    /// open (default), `stop_at_damage` recovers what precedes it.
    pub recovery: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegionConfig {
    /// Flush a MemStore at this size (default 128MiB).
    pub flush_size: ByteSize,
    /// Writers wait above flush_size × this (default 4).
    pub blocking_multiplier: usize,
    /// Flush a MemStore whose oldest edit is this old (default 1h).
    pub flush_age: Dur,
    /// Largest cell value accepted (default 10MiB).
    pub max_value_size: ByteSize,
    /// Flush when a region closes (default true).
    pub flush_on_close: bool,
    /// Flush threads shared by every region of the server (default 2).
    pub flush_threads: usize,
    /// Compaction threads shared by every region of the server (default 1).
    pub compaction_threads: usize,
    /// All MemStores of the server together: from 80 % of this the
    /// largest are flushed while writes go on (HBase's lower limit), and
    /// above it writers wait (default 1GiB; HBase's
    /// `hbase.regionserver.global.memstore.size`).
    pub global_memstore_size: ByteSize,
    /// A region whose store files pass this size splits in two at its
    /// middle row (default 10GiB, HBase's `hbase.hregion.max.filesize`).
    pub max_size: ByteSize,
    /// How often region sizes are checked against `max_size` (default 10s).
    pub split_check_interval: Dur,
    /// The scrub reads every live store file again at this many bytes a
    /// second and checks it (default 8MiB; 0 turns it off), and at most
    /// a fifth of one core. Damage shows in `/readyz` and
    /// `halite_scrub_damaged_files`.
    pub scrub_rate: ByteSize,
    pub compaction: CompactionConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// Fewest files a minor compaction merges (default 3).
    pub min_files: usize,
    /// Most files a minor compaction merges (default 10).
    pub max_files: usize,
    /// Size ratio of HBase's selection rule (default 1.2).
    pub ratio: f64,
    /// Files of about one size a TIME_WINDOW family's filling window
    /// merges at once (default 4).
    pub tier_files: usize,
    /// How often every region is looked over for a compaction, also when
    /// no flush comes: files past their TTL dropped, closed time windows
    /// merged, a periodic major compaction due (default 5m).
    pub check_interval: Dur,
    /// Age of a family's oldest file at which it gets a major compaction
    /// (default 168h, HBase's 7 days; "0s": never).
    pub major_interval: Dur,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Block cache budget (default 256MiB).
    pub block_cache_size: ByteSize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("data"),
            server: ServerConfig::default(),
            wal: WalConfig::default(),
            region: RegionConfig::default(),
            cache: CacheConfig::default(),
            tables: Vec::new(),
            kafka: crate::ingest::kafka::KafkaConfig::default(),
            objects: crate::objects::ObjectsConfig::default(),
            cluster: ClusterConfig::default(),
            log: LogConfig::default(),
            influx: InfluxConfig::default(),
            prometheus: PrometheusConfig::default(),
            auth: AuthConfig::default(),
        }
    }
}

impl Default for WalConfig {
    fn default() -> Self {
        let d = WalOptions::default();
        WalConfig {
            segment_size: ByteSize(d.segment_size),
            max_batch_bytes: ByteSize(d.max_batch_bytes as u64),
            io: "auto".into(),
            depth: d.depth,
            async_sync_interval: Dur(d.async_sync_interval),
            recycle: d.recycle,
            spare_segments: d.spare_segments,
            release_after_idle: Dur(d.release_after_idle),
            recovery: "strict".into(),
        }
    }
}

impl Default for RegionConfig {
    fn default() -> Self {
        let d = RegionOptions::default();
        RegionConfig {
            flush_size: ByteSize(d.flush_size as u64),
            blocking_multiplier: d.blocking_multiplier,
            flush_age: Dur(d.flush_age),
            max_value_size: ByteSize(d.max_value_size as u64),
            flush_on_close: d.flush_on_close,
            flush_threads: 2,
            compaction_threads: 1,
            global_memstore_size: ByteSize(1 << 30),
            max_size: ByteSize(10 << 30),
            split_check_interval: Dur(std::time::Duration::from_secs(10)),
            scrub_rate: ByteSize(8 << 20),
            compaction: CompactionConfig::default(),
        }
    }
}

impl Default for CompactionConfig {
    fn default() -> Self {
        let d = CompactionOptions::default();
        CompactionConfig {
            min_files: d.min_files,
            max_files: d.max_files,
            ratio: d.ratio,
            tier_files: d.tier_files,
            check_interval: Dur(std::time::Duration::from_secs(300)),
            major_interval: Dur(d.major_interval),
        }
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            block_cache_size: ByteSize(256 << 20),
        }
    }
}

impl Config {
    /// Reads `path` (if given), applies `HALITE__…` environment variables,
    /// then `overrides` (`section.key=value`), and checks the result.
    pub fn load(path: Option<&Path>, overrides: &[String]) -> Result<Config, ConfigError> {
        let text = match path {
            Some(p) => std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                path: p.to_path_buf(),
                source,
            })?,
            None => String::new(),
        };
        let mut doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        let mut env: Vec<(String, String)> = std::env::vars()
            .filter_map(|(k, v)| {
                k.strip_prefix("HALITE__")
                    .map(|rest| (rest.to_ascii_lowercase().replace("__", "."), v))
            })
            .collect();
        env.sort();
        for (key, value) in env {
            set_path(&mut doc, &key, &value)?;
        }
        for o in overrides {
            let (key, value) = o
                .split_once('=')
                .ok_or_else(|| ConfigError::BadOverride(o.clone()))?;
            set_path(&mut doc, key.trim(), value.trim())?;
        }
        let config: Config = toml::Value::Table(doc)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        let bad = |key, why: &str| {
            Err(ConfigError::Invalid {
                key,
                why: why.into(),
            })
        };
        if self.server.tls_cert.is_empty() != self.server.tls_key.is_empty() {
            return bad(
                "server.tls_cert",
                "server.tls_cert and server.tls_key go together: set both (PEM files) or neither",
            );
        }
        if self.server.header_timeout.0.is_zero() {
            return bad("server.header_timeout", "must be more than 0");
        }
        if self.server.idle_timeout.0.is_zero() {
            return bad("server.idle_timeout", "must be more than 0");
        }
        let boot = &self.auth.bootstrap_token;
        if !boot.is_empty() && (boot.len() < 16 || boot.chars().any(char::is_whitespace)) {
            return bad(
                "auth.bootstrap_token",
                "must be at least 16 characters without spaces (say the output of `openssl rand -hex 32`)",
            );
        }
        if !matches!(self.log.format.as_str(), "human" | "json") {
            return bad("log.format", "must be `human` or `json`");
        }
        if !matches!(self.wal.io.as_str(), "auto" | "sync") {
            return bad("wal.io", "must be `auto` or `sync`");
        }
        if self.wal.spare_segments == 0 {
            return bad(
                "wal.spare_segments",
                "must be at least 1: without a prepared segment every roll zero-fills one while writes wait",
            );
        }
        if !matches!(self.wal.recovery.as_str(), "strict" | "stop_at_damage") {
            return bad("wal.recovery", "must be `strict` or `stop_at_damage`");
        }
        if self.wal.segment_size.0 < 64 * 1024 {
            return bad("wal.segment_size", "must be at least 64KiB");
        }
        if self.wal.depth == 0 || self.wal.depth > 64 {
            return bad("wal.depth", "must be 1..=64");
        }
        if self.region.flush_size.0 < 64 * 1024 {
            return bad("region.flush_size", "must be at least 64KiB");
        }
        if self.region.flush_threads == 0 || self.region.compaction_threads == 0 {
            return bad(
                "region",
                "flush_threads and compaction_threads must be at least 1",
            );
        }
        if self.region.global_memstore_size.0 < self.region.flush_size.0 {
            return bad(
                "region.global_memstore_size",
                "must be at least region.flush_size",
            );
        }
        if self.region.max_size.0 < self.region.flush_size.0 {
            return bad(
                "region.max_size",
                "must be at least region.flush_size, or every flush would split",
            );
        }
        if self.region.blocking_multiplier == 0 {
            return bad("region.blocking_multiplier", "must be at least 1");
        }
        if self.server.shards == 0 || self.server.shards > 256 {
            return bad("server.shards", "must be 1..=256");
        }
        if self.server.query_threads == 0 {
            return bad("server.query_threads", "must be at least 1");
        }
        if self.cluster.enabled() {
            let plain = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
            if self.cluster.node.len() > 64 || !self.cluster.node.chars().all(plain) {
                return bad(
                    "cluster.node",
                    "must be 1..=64 of letters, digits, '.', '_', '-'",
                );
            }
            if !self.objects.url.starts_with("s3://") {
                return bad(
                    "objects.url",
                    "cluster mode needs an S3-compatible object store (`s3://bucket/prefix`): \
                     its conditional writes are what keep two nodes from owning one partition",
                );
            }
            if !self.kafka.enabled() {
                return bad(
                    "kafka",
                    "cluster mode needs [kafka] brokers and topics: the topics are the log \
                     and their partitions are what the nodes own",
                );
            }
        }
        if self.influx.compaction == CompactionStrategy::TimeWindow
            && !(60..=366 * 86_400).contains(&self.influx.time_window)
        {
            return bad(
                "influx.time_window",
                "must be between 60 seconds and 366 days (31,622,400)",
            );
        }
        if self.influx.bloom == BloomType::RowPrefix {
            return bad(
                "influx.bloom",
                "must be NONE, ROW or ROWCOL: a measurement's rows have no prefix length \
                 common to all of them",
            );
        }
        let c = &self.region.compaction;
        if c.min_files < 2 || c.max_files < c.min_files || c.ratio <= 0.0 {
            return bad(
                "region.compaction",
                "needs 2 <= min_files <= max_files and ratio > 0",
            );
        }
        if c.tier_files < 2 || c.tier_files > c.max_files {
            return bad(
                "region.compaction.tier_files",
                "needs 2 <= tier_files <= max_files: it is how many files of one size merge \
                 at once",
            );
        }
        if c.check_interval.0.is_zero() {
            return bad(
                "region.compaction.check_interval",
                "must be above zero: it is how often regions are looked over for expired \
                 files and due compactions",
            );
        }
        Ok(())
    }

    /// The store's settings (the store takes no [`Config`], so it knows
    /// nothing of files, overrides or the services beside it).
    pub fn store_options(&self) -> StoreOptions {
        StoreOptions {
            shards: self.server.shards,
            queue_depth: 64,
            wal: self.wal_options(),
            region: self.region_options(),
            block_cache_bytes: self.cache.block_cache_size.0 as usize,
            flush_threads: self.region.flush_threads,
            compaction_threads: self.region.compaction_threads,
            max_region_size: self.region.max_size.0,
            global_memstore_bytes: self.region.global_memstore_size.0 as usize,
        }
    }

    pub fn wal_options(&self) -> WalOptions {
        WalOptions {
            segment_size: self.wal.segment_size.0,
            max_batch_bytes: self.wal.max_batch_bytes.0 as usize,
            io: if self.wal.io == "sync" {
                IoBackendChoice::Sync
            } else {
                IoBackendChoice::Auto
            },
            depth: self.wal.depth,
            async_sync_interval: self.wal.async_sync_interval.0,
            recycle: self.wal.recycle,
            spare_segments: self.wal.spare_segments,
            release_after_idle: self.wal.release_after_idle.0,
            recovery: if self.wal.recovery == "stop_at_damage" {
                WalRecovery::StopAtDamage
            } else {
                WalRecovery::Strict
            },
        }
    }

    pub fn region_options(&self) -> RegionOptions {
        RegionOptions {
            flush_size: self.region.flush_size.0 as usize,
            blocking_multiplier: self.region.blocking_multiplier,
            flush_age: self.region.flush_age.0,
            max_value_size: self.region.max_value_size.0 as usize,
            flush_on_close: self.region.flush_on_close,
            background: true,
            compaction: CompactionOptions {
                min_files: self.region.compaction.min_files,
                max_files: self.region.compaction.max_files,
                ratio: self.region.compaction.ratio,
                tier_files: self.region.compaction.tier_files,
                major_interval: self.region.compaction.major_interval.0,
            },
        }
    }
}

/// Sets `a.b.c = value` in a TOML table; the value is parsed as TOML when it
/// can be (numbers, booleans) and taken as a string otherwise.
fn set_path(doc: &mut toml::Table, key: &str, raw: &str) -> Result<(), ConfigError> {
    let parts: Vec<&str> = key.split('.').filter(|p| !p.is_empty()).collect();
    let Some((last, parents)) = parts.split_last() else {
        return Err(ConfigError::BadOverride(key.into()));
    };
    let mut table = doc;
    for p in parents {
        let entry = table
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry
            .as_table_mut()
            .ok_or_else(|| ConfigError::BadOverride(format!("{key} (`{p}` is not a section)")))?;
    }
    let value = format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()));
    table.insert(last.to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_config_parses_to_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/halite.toml");
        let c = Config::load(Some(&path), &[]).unwrap();
        let d = Config::default();
        assert_eq!(c.wal.segment_size, d.wal.segment_size);
        assert_eq!(c.wal.depth, d.wal.depth);
        assert_eq!(c.region.flush_size, d.region.flush_size);
        assert_eq!(c.region.flush_age, d.region.flush_age);
        assert_eq!(c.cache.block_cache_size, d.cache.block_cache_size);
        assert_eq!(c.region.compaction.ratio, d.region.compaction.ratio);
        assert_eq!(c.influx.compaction, d.influx.compaction);
        assert_eq!(c.influx.time_window, d.influx.time_window);
        assert_eq!(
            c.region.compaction.check_interval,
            d.region.compaction.check_interval
        );
        assert_eq!(
            c.region.compaction.major_interval,
            d.region.compaction.major_interval
        );
        assert_eq!(
            c.region_options().compaction.major_interval,
            std::time::Duration::from_secs(7 * 86_400)
        );
    }

    #[test]
    fn overrides_apply_and_bad_values_are_named() {
        let c = Config::load(
            None,
            &[
                "wal.depth=8".into(),
                "region.flush_size=\"32MiB\"".into(),
                "wal.io=sync".into(),
            ],
        )
        .unwrap();
        assert_eq!(c.wal.depth, 8);
        assert_eq!(c.region.flush_size, ByteSize(32 << 20));
        assert_eq!(c.wal_options().io, IoBackendChoice::Sync);
        let e = Config::load(None, &["wal.io=uring".into()]).unwrap_err();
        assert!(e.to_string().contains("wal.io"), "{e}");
        let e = Config::load(None, &["wal.nope=1".into()]).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
        let e = Config::load(None, &["region.flush_age=\"5 parsecs\"".into()]).unwrap_err();
        assert!(e.to_string().contains("unit"), "{e}");
        let e =
            Config::load(None, &["region.compaction.check_interval=\"0s\"".into()]).unwrap_err();
        assert!(e.to_string().contains("check_interval"), "{e}");
        let e = Config::load(None, &["server.idle_timeout=\"100000d\"".into()]).unwrap_err();
        assert!(e.to_string().contains("ten years"), "{e}");
        let c = Config::load(None, &["region.compaction.major_interval=\"0s\"".into()]).unwrap();
        assert!(c.region_options().compaction.major_interval.is_zero());
    }

    #[test]
    fn the_tsbs_devops_config_feeds_its_table_from_its_topic() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/tsbs-devops.toml");
        let c = Config::load(Some(&path), &["kafka.brokers=\"127.0.0.1:9\"".into()]).unwrap();
        assert_eq!(c.tables.len(), 1);
        let table = &c.tables[0];
        assert_eq!(c.kafka.topics.len(), 1);
        assert_eq!(c.kafka.topics[0].table, table.name.to_string());
        // Every one of TSBS's ten tags is a key field.
        for (tag, _) in crate::tsbs::devops::host_tags(0) {
            assert!(table.key.fields.iter().any(|f| f.name == tag), "{tag}");
        }
    }

    #[test]
    fn measurement_tables_are_date_tiered_unless_set_otherwise() {
        let c = Config::default();
        let f = c.influx.family().descriptor();
        assert_eq!(f.compaction, CompactionStrategy::TimeWindow);
        assert_eq!(f.time_window_secs, Some(86_400));
        let c = Config::load(
            None,
            &[
                "influx.compaction=\"RATIO\"".into(),
                "influx.time_window=3600".into(),
            ],
        )
        .unwrap();
        let f = c.influx.family().descriptor();
        assert_eq!(
            (f.compaction, f.time_window_secs),
            (CompactionStrategy::Ratio, None)
        );
        let c = Config::load(None, &["influx.time_window=3600".into()]).unwrap();
        assert_eq!(c.influx.family().descriptor().time_window_secs, Some(3600));
        let e = Config::load(None, &["influx.time_window=10".into()]).unwrap_err();
        assert!(e.to_string().contains("influx.time_window"), "{e}");
    }

    /// A measurement's family keeps no bloom filter unless asked: its rows
    /// are points, read by scans of series.
    #[test]
    fn measurement_tables_keep_a_bloom_filter_only_when_asked() {
        let c = Config::default();
        assert_eq!(c.influx.family().descriptor().bloom, BloomType::None);
        let c = Config::load(None, &["influx.bloom=\"ROW\"".into()]).unwrap();
        assert_eq!(c.influx.family().descriptor().bloom, BloomType::Row);
        let e = Config::load(None, &["influx.bloom=\"ROWPREFIX\"".into()]).unwrap_err();
        assert!(e.to_string().contains("influx.bloom"), "{e}");
    }
}
