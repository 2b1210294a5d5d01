//! Continuation tokens as clients see them: the engine's "after this key"
//! wrapped with the kind of request and the table that issued it, so a
//! token handed to another kind of request, or another table, is refused
//! instead of silently starting over or skipping rows.
//!
//! Layout (hex on the wire): `[2][kind][reverse][xxh3-64 of the table
//! name, 8 bytes BE][after: the engine's position]`. Version 1 tokens
//! (`[1][reverse][row]`) carried neither kind nor table and are refused.

use super::error::ApiError;
use crate::catalog::TableName;
use crate::codec::{from_hex, quote_prefix, to_hex};
use crate::region::read::ContinuationToken;

const VERSION: u8 = 2;

/// Which request a token continues; each resumes from a different kind of
/// position (a salted row key, an unsalted key, an aggregate's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// `POST /tables/{t}/scan`: after a row key.
    Scan = 1,
    /// `POST /query` raw rows: after an unsalted key.
    Rows = 2,
    /// `POST /query` with `aggregate`: after an aggregate (series, field,
    /// window).
    Aggregates = 3,
}

impl PageKind {
    fn name(self) -> &'static str {
        match self {
            PageKind::Scan => "a scan",
            PageKind::Rows => "a query of rows",
            PageKind::Aggregates => "an aggregate query",
        }
    }

    fn from_byte(b: u8) -> Option<PageKind> {
        Some(match b {
            1 => PageKind::Scan,
            2 => PageKind::Rows,
            3 => PageKind::Aggregates,
            _ => return None,
        })
    }
}

/// Where tokens of one answer belong: a kind of request on one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageScope {
    kind: PageKind,
    table: u64,
}

impl PageScope {
    pub fn new(kind: PageKind, table: &TableName) -> Self {
        PageScope {
            kind,
            table: xxhash_rust::xxh3::xxh3_64(table.to_string().as_bytes()),
        }
    }

    /// The token a client gets for the engine's position `t`.
    pub fn encode(&self, t: &ContinuationToken) -> String {
        let mut bytes = Vec::with_capacity(11 + t.row.len());
        bytes.push(VERSION);
        bytes.push(self.kind as u8);
        bytes.push(u8::from(t.reverse));
        bytes.extend_from_slice(&self.table.to_be_bytes());
        bytes.extend_from_slice(&t.row);
        to_hex(&bytes)
    }

    /// The engine's position in `token`, if it was issued for this scope.
    pub fn decode(&self, token: &str) -> Result<ContinuationToken, ApiError> {
        let foreign = || {
            ApiError::bad(format!(
                "continuation token `{}` is not one this server issued; start again without it",
                quote_prefix(token)
            ))
        };
        let bytes = from_hex(token).map_err(|_| foreign())?;
        if bytes.len() < 11 || bytes[0] != VERSION || bytes[2] > 1 {
            return Err(foreign());
        }
        let kind = PageKind::from_byte(bytes[1]).ok_or_else(foreign)?;
        if kind != self.kind {
            return Err(ApiError::bad(format!(
                "continuation token belongs to {}, not {}: pass it to the request that returned it",
                kind.name(),
                self.kind.name()
            )));
        }
        let table = u64::from_be_bytes(bytes[3..11].try_into().expect("8 bytes"));
        if table != self.table {
            return Err(ApiError::bad(
                "continuation token belongs to another table: pass it to the request that returned it",
            ));
        }
        Ok(ContinuationToken {
            reverse: bytes[2] == 1,
            row: bytes[11..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_resume_only_their_own_kind_and_table() {
        let cpu = TableName::parse("metrics:cpu").expect("name");
        let mem = TableName::parse("metrics:mem").expect("name");
        let at = ContinuationToken {
            row: b"host\x00\xff".to_vec(),
            reverse: true,
        };
        let scan = PageScope::new(PageKind::Scan, &cpu);
        let token = scan.encode(&at);
        assert_eq!(scan.decode(&token).expect("own token"), at);
        let e = PageScope::new(PageKind::Rows, &cpu)
            .decode(&token)
            .expect_err("scan token in a query");
        assert!(e.message.contains("belongs to a scan"), "{}", e.message);
        let e = PageScope::new(PageKind::Scan, &mem)
            .decode(&token)
            .expect_err("another table");
        assert!(e.message.contains("another table"), "{}", e.message);
        // A version 1 token (no kind, no table) and junk.
        for junk in ["0101686f7374", "", "zz", "02", &"ab".repeat(500)] {
            let e = scan.decode(junk).expect_err(junk);
            assert!(e.message.len() < 300, "{}", e.message);
        }
    }
}
