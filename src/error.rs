//! The public error surface.
//!
//! Every module has its own detailed error enum; they all convert into
//! [`Error`], whose [`ErrorKind`] tells a caller what to do about it (fix the
//! input, retry later, restore from a replica, stop). The HTTP layer maps the
//! kind onto a status code in one place.

use std::path::PathBuf;

pub mod kind;

pub use kind::ErrorKind;

use crate::objects::ObjectError;
use crate::ownership::OwnershipError;
use crate::region::manifest::ManifestError;
use crate::region::sst::format::SstError;
use crate::region::wal::error::WalError;

/// The crate-wide error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error(transparent)]
    Sst(#[from] SstError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The object store (store files and manifests beyond this node).
    #[error(transparent)]
    Objects(#[from] ObjectError),
    /// A lease or fenced manifest; `OwnershipError::Fenced` means another
    /// node owns the region now (see [`Error::is_fenced`]).
    #[error(transparent)]
    Ownership(#[from] OwnershipError),
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("unknown column family. family=`{0}`")]
    UnknownFamily(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("catalog corrupt: {what}. file=`{path}`, offset=`{offset}`")]
    CatalogCorrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("region is closed; reopen it to continue")]
    Closed,
    /// In cluster mode: a write for a region this node does not own.
    #[error("{0}")]
    NotOwned(String),
    /// Something the request needs is away for now (the brokers, say);
    /// the same request may succeed later.
    #[error("{0}")]
    Unavailable(String),
    #[error(
        "region stopped accepting writes after a fatal I/O error; restart to recover from the WAL. cause: {0}"
    )]
    Poisoned(String),
    /// An answer could not be encoded or sent (the client went away, say).
    #[error("{0}")]
    Internal(String),
    #[error("i/o error. path=`{path}`, op=`{op}`: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Wal(e) => e.kind(),
            Error::Sst(e) => e.kind(),
            Error::Manifest(e) => e.kind(),
            Error::Objects(e) => e.kind(),
            Error::Ownership(OwnershipError::Fenced { .. }) => ErrorKind::Closed,
            Error::Ownership(e) => e.kind(),
            Error::InvalidInput(_) => ErrorKind::InvalidInput,
            Error::UnknownFamily(_) | Error::NotFound(_) => ErrorKind::NotFound,
            Error::Conflict(_) => ErrorKind::Conflict,
            Error::CatalogCorrupt { .. } => ErrorKind::Corruption,
            Error::Closed | Error::Poisoned(_) => ErrorKind::Closed,
            Error::NotOwned(_) | Error::Unavailable(_) => ErrorKind::Unavailable,
            Error::Io { .. } | Error::Internal(_) => ErrorKind::Internal,
        }
    }

    /// Whether another node took over what this one was writing: the
    /// region stopped for good on this node, and nothing is to be retried.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Error::Ownership(OwnershipError::Fenced { .. }))
    }

    /// Whether the error is the disk being full (`ENOSPC`), wherever it
    /// came from.
    pub fn is_no_space(&self) -> bool {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = source {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && crate::fault::is_no_space(io)
            {
                return true;
            }
            source = e.source();
        }
        false
    }

    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            op,
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
