//! halite: time-series ingestion and storage with HBase-style row keys.
//!
//! # Layout
//!
//! The modules follow the path a point takes (`docs/architecture.md` says
//! where each kind of change goes):
//!
//! ```text
//! app         serve(): wiring and ordered shutdown     (main.rs: the CLI)
//! demo        `make run`: serve on its own broker and producer
//! api/        HTTP: writes, reads, admin, internal (node to node); JSON,
//!             NDJSON and Arrow answers
//! telemetry   metrics and logs, from the store's region stats
//! config      every stage's settings, read from TOML
//!   ▼
//! ingest/     line protocol, JSON, Kafka: points → rows routed by region
//!             (a Kafka delete message goes to the PointDeletes seam,
//!             which app wires to the query engine)
//! query/      logical queries: plan, rows (bucket scans merged),
//!   ▼         aggregate, pool; engine = the query pool over the store
//! series      open tag sets: the UID dictionary, field types and
//!             series index in each namespace's `__tags` table
//! store       tables, writer shards, splits, recovery, the memory limit;
//!             cluster mode (partitions taken and released)
//! verify      `halite verify`: a data directory checked offline
//!   ▼
//! table       routing, RoutedRows, TableScanner, RegionHandle
//!   ▼
//! region ─┬─ wal/        group commit on io_uring (or write+fdatasync),
//!         │              CRC32C records, segments, recovery
//!         ├─ memstore/   skiplist + MVCC read point; its cursor
//!         ├─ flush       MemStore → one store file per family
//!         ├─ compaction/ which files (a CompactionPicker: ratio) and the
//!         │              rewrite; major drops dead cells
//!         ├─ sst/        store files: frame, blocks, time-series blocks,
//!         │              bloom, reader, writer; the block cache
//!         ├─ manifest    the live file set, replaced atomically
//!         ├─ shared_files cluster mode: uploads, publishes, adoption
//!         ├─ remote      a region another node owns (file_cache, tail)
//!         └─ read/       merge → resolve versions/deletes/TTL → filters → pages
//!   ▼
//! cli  client  tsbs   (the CLI's verbs and HTTP client; TSBS-style data)
//! catalog  key  schema  cell  value  codec  clock  fsutil  units  error/kind
//! auth        API tokens: scopes over namespaces, hashed secrets
//! objects     the object store (local directory or S3), blocking calls
//! ownership   epoch leases and fenced region manifests on it
//! ```
//!
//! Nothing imports a line above its own, but for `error.rs`: the crate's
//! `Error` wraps the WAL's, the store files' and the manifest's errors
//! (taken from `wal/error.rs`, `sst/format.rs` and `manifest.rs`, which
//! import only leaves), and the bottom line's files return it; their kind,
//! `error/kind.rs`, is a leaf. `fault`, `failpoint` and
//! `fuzz` exist for tests (fault injection, crash points, fuzz targets) and
//! are not part of the documented surface.
//!
//! Formats and the durability contract are specified in `docs/`.

#![deny(clippy::unwrap_used)]

pub mod api;
pub mod app;
pub mod auth;
pub mod catalog;
pub mod cell;
pub mod cli;
pub mod client;
pub mod clock;
pub mod codec;
pub mod config;
pub mod demo;
pub mod error;
#[doc(hidden)]
pub mod failpoint;
#[doc(hidden)]
pub mod fault;
pub mod fsutil;
#[doc(hidden)]
pub mod fuzz;
pub mod ingest;
pub mod key;
pub mod objects;
pub mod ownership;
pub mod prom;
pub mod query;
pub mod region;
pub mod schema;
pub mod series;
pub mod store;
pub mod table;
pub mod telemetry;
pub mod tsbs;
pub mod units;
pub mod value;
pub mod verify;

pub use cell::{Cell, Row, RowMutation};
pub use error::{Error, ErrorKind, Result};
