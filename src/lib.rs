//! halite: time-series ingestion and storage with HBase-style row keys.
//!
//! # Layout
//!
//! The modules follow the path a point takes:
//!
//! ```text
//! cell (cells, keys, order)  schema (family attributes, durability)
//!   │
//!   ▼
//! region ─┬─ wal/        group commit on io_uring (or write+fdatasync),
//!         │              CRC32C records, segments, recovery
//!         ├─ memstore    skiplist + MVCC read point
//!         ├─ flush       MemStore → one store file per family
//!         ├─ sst/        store files: blocks, index, bloom, trailer
//!         ├─ block_cache decoded blocks under a byte budget
//!         ├─ manifest    the live file set, replaced atomically
//!         └─ compaction  minor (ratio) and major (drops dead cells)
//!   │
//!   ▼
//! scan (merge → resolve versions/deletes/TTL → filters → pages)
//! ```
//!
//! Formats and the durability contract are specified in `docs/`.

#![deny(clippy::unwrap_used)]

pub mod api;
pub mod catalog;
pub mod cell;
pub mod cli;
pub mod client;
pub mod clock;
pub mod codec;
pub mod config;
pub mod error;
pub mod failpoint;
pub mod fault;
pub mod fsutil;
pub mod fuzz;
pub mod ingest;
pub mod key;
pub mod query;
pub mod region;
pub mod schema;
pub mod store;
pub mod table;
pub mod telemetry;
pub mod tsbs;
pub mod value;
pub mod verify;

pub use cell::{Cell, Row, RowMutation};
pub use error::{Error, ErrorKind, Result};
