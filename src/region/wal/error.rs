//! The WAL's errors, each naming the file and offset it is about.

use std::path::{Path, PathBuf};

use crate::error::kind::ErrorKind;

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("wal i/o error. path=`{path}`, op=`{op}`: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("wal record corrupt: {what}. segment=`{path}`, offset=`{offset}`")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: &'static str,
    },
    #[error(
        "wal stopped after a fatal i/o error and accepts no writes; restart to recover. cause: {0}"
    )]
    Failed(String),
    #[error("wal is closed")]
    Closed,
    #[error("wal record too large: {len} bytes, limit {limit}; split the batch")]
    TooLarge { len: usize, limit: usize },
}

impl WalError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            WalError::Io { .. } => ErrorKind::Internal,
            WalError::Corrupt { .. } => ErrorKind::Corruption,
            WalError::Failed(_) | WalError::Closed => ErrorKind::Closed,
            WalError::TooLarge { .. } => ErrorKind::InvalidInput,
        }
    }
    pub(super) fn io(path: &Path, op: &'static str, source: std::io::Error) -> Self {
        WalError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }
}
