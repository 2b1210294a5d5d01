//! What a caller can do about an error: the one public classification
//! every module's error maps onto. A leaf, so the modules whose errors
//! [`crate::error::Error`] wraps can name their kind without importing it.

/// What a caller can do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is wrong; retrying it unchanged fails again.
    InvalidInput,
    /// The thing named does not exist (table, family).
    NotFound,
    /// The thing to create exists already, or is still in use.
    Conflict,
    /// Temporarily unable (overloaded, shutting down a writer); retry later.
    Unavailable,
    /// Data on disk failed a check; the named file needs attention.
    Corruption,
    /// The region or store was closed or stopped after a fatal I/O error.
    Closed,
    /// An I/O or internal failure that is neither of the above.
    Internal,
}
