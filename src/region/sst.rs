//! Store files: our HFile. The full format is in `docs/store-file.md`; the
//! byte layout of each part is documented where it is encoded.
//!
//! ```text
//! [data block]* [bloom block] [index block] [meta block] [trailer]
//! ```
//!
//! Every block (data, bloom, index, meta) is framed the same way
//! ([`frame::frame`]): compression byte, uncompressed length, body, CRC32C.
//! A reader checks every length and offset it reads against the file before
//! using it; damage is an [`SstError::Corrupt`] naming the file and offset.

pub mod block;
pub mod bloom;
pub mod cache;
pub mod columns;
pub mod format;
pub mod frame;
pub mod reader;
pub mod ts_block;
pub mod writer;

pub use format::{FileMeta, Projection, SST_MAGIC, SST_VERSION, SstError, WholeBlock, file_name};
pub use reader::{BlockWalk, ReadAhead, SstIter, SstReader};
pub use writer::SstWriter;
