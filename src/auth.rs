//! API tokens: what a token may do (scopes over namespaces), how one is
//! made, and how a presented token is checked against what the catalog
//! keeps of it.
//!
//! A token reads `hal_<id>_<secret>`: 16 hex digits naming it and 64 hex
//! digits (32 random bytes) of secret. The catalog keeps the id, the
//! scopes and the SHA-256 of the secret, never the secret itself: the
//! token is shown once, when it is made. A presented secret's digest is
//! compared with the kept one in constant time. docs/security.md is the
//! user's side of this.

use std::fmt;

use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

/// What a token may do. `admin` includes `read` and `write`; `write`
/// does not include `read` (a collector such as Telegraf only writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Read,
    Write,
    Admin,
}

impl Scope {
    pub fn parse(s: &str) -> Result<Scope, AuthError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "read" => Ok(Scope::Read),
            "write" => Ok(Scope::Write),
            "admin" => Ok(Scope::Admin),
            _ => Err(AuthError::Invalid(format!(
                "scope `{s}` is not one of read, write, admin"
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }

    /// Whether holding `self` allows what `need` asks.
    pub fn covers(self, need: Scope) -> bool {
        self == need || self == Scope::Admin
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("{0}")]
    Invalid(String),
    #[error("cannot draw random bytes for a token from the operating system")]
    NoRandomness,
}

/// A token as the catalog keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub id: String,
    /// What the token is for, as its maker named it.
    pub name: String,
    pub scopes: Vec<Scope>,
    /// The namespaces it may touch; empty: every namespace (and what
    /// belongs to none: namespaces themselves, tokens, the cluster).
    pub namespaces: Vec<String>,
    pub created_ms: u64,
    /// SHA-256 of the secret, hex.
    pub secret_sha256: String,
}

/// What a request may do once its credentials are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Authentication is off: everything is allowed.
    Unchecked,
    /// A route anyone may call, reached without checking credentials:
    /// nothing else is allowed.
    Anonymous,
    /// The bootstrap token from the config: admin over everything.
    Bootstrap,
    Token {
        id: String,
        scopes: Vec<Scope>,
        /// Empty: every namespace.
        namespaces: Vec<String>,
    },
}

impl Caller {
    pub fn from_record(r: &TokenRecord) -> Caller {
        Caller::Token {
            id: r.id.clone(),
            scopes: r.scopes.clone(),
            namespaces: r.namespaces.clone(),
        }
    }

    /// Whether the caller may do `scope` in namespace `ns`; `None` asks
    /// for what belongs to no one namespace, which only a token over every
    /// namespace may do.
    pub fn may(&self, scope: Scope, ns: Option<&str>) -> bool {
        match self {
            Caller::Unchecked | Caller::Bootstrap => true,
            Caller::Anonymous => false,
            Caller::Token {
                scopes, namespaces, ..
            } => {
                scopes.iter().any(|s| s.covers(scope))
                    && (namespaces.is_empty()
                        || ns.is_some_and(|ns| namespaces.iter().any(|n| n == ns)))
            }
        }
    }

    /// Whether the caller holds `scope` on at least one namespace: enough
    /// to be let through to a handler that checks the namespace itself.
    pub fn holds(&self, scope: Scope) -> bool {
        match self {
            Caller::Unchecked | Caller::Bootstrap => true,
            Caller::Anonymous => false,
            Caller::Token { scopes, .. } => scopes.iter().any(|s| s.covers(scope)),
        }
    }

    /// Whether a listing shows namespace `ns` to the caller: any scope on it.
    pub fn sees(&self, ns: &str) -> bool {
        [Scope::Read, Scope::Write, Scope::Admin]
            .iter()
            .any(|s| self.may(*s, Some(ns)))
    }
}

/// Prefix of every token halite makes (secret scanners look for it).
pub const TOKEN_PREFIX: &str = "hal_";
const ID_BYTES: usize = 8;
const SECRET_BYTES: usize = 32;

/// A token just made: the text to hand its user (once) and its record.
pub struct NewToken {
    pub token: String,
    pub record: TokenRecord,
}

/// Makes a token. Scopes are kept sorted and once each; namespaces too.
pub fn mint(
    name: &str,
    scopes: &[Scope],
    namespaces: &[String],
    now_ms: u64,
) -> Result<NewToken, AuthError> {
    if scopes.is_empty() {
        return Err(AuthError::Invalid(
            "a token needs at least one scope: read, write or admin".into(),
        ));
    }
    if name.len() > 200 || name.chars().any(char::is_control) {
        return Err(AuthError::Invalid(
            "a token's name must be at most 200 characters, none of them control characters".into(),
        ));
    }
    let mut scopes = scopes.to_vec();
    scopes.sort();
    scopes.dedup();
    let mut namespaces = namespaces.to_vec();
    namespaces.sort();
    namespaces.dedup();
    let rng = ring::rand::SystemRandom::new();
    let mut id = [0u8; ID_BYTES];
    let mut secret = [0u8; SECRET_BYTES];
    ring::rand::SecureRandom::fill(&rng, &mut id).map_err(|_| AuthError::NoRandomness)?;
    ring::rand::SecureRandom::fill(&rng, &mut secret).map_err(|_| AuthError::NoRandomness)?;
    let id = hex(&id);
    let secret = hex(&secret);
    Ok(NewToken {
        token: format!("{TOKEN_PREFIX}{id}_{secret}"),
        record: TokenRecord {
            id,
            name: name.to_string(),
            scopes,
            namespaces,
            created_ms: now_ms,
            secret_sha256: hex(&sha256(secret.as_bytes())),
        },
    })
}

/// The id and secret of a token halite made; `None` for any other text.
pub fn split(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix(TOKEN_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let hex_of = |s: &str, n: usize| s.len() == 2 * n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex_of(id, ID_BYTES) && hex_of(secret, SECRET_BYTES)).then_some((id, secret))
}

/// Whether `secret` is the one `record` was made with.
pub fn secret_matches(record: &TokenRecord, secret: &str) -> bool {
    let presented = hex(&sha256(secret.as_bytes()));
    bool::from(presented.as_bytes().ct_eq(record.secret_sha256.as_bytes()))
}

/// A configured token (the bootstrap token) as kept in memory: its digest.
#[derive(Clone)]
pub struct KnownSecret([u8; 32]);

impl KnownSecret {
    pub fn new(secret: &str) -> KnownSecret {
        KnownSecret(sha256(secret.as_bytes()))
    }

    pub fn matches(&self, presented: &str) -> bool {
        bool::from(sha256(presented.as_bytes()).ct_eq(&self.0))
    }
}

impl fmt::Debug for KnownSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KnownSecret(..)")
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_matches_its_record_and_nothing_else() {
        let made = mint("telegraf", &[Scope::Write], &["metrics".into()], 7).expect("mint");
        let (id, secret) = split(&made.token).expect("halite's own format");
        assert_eq!(id, made.record.id);
        assert!(secret_matches(&made.record, secret));
        let mut wrong = secret.to_string();
        let last = if wrong.ends_with('0') { "1" } else { "0" };
        wrong.replace_range(wrong.len() - 1.., last);
        assert!(!secret_matches(&made.record, &wrong));
        assert!(!made.record.secret_sha256.contains(secret));
        let other = mint("telegraf", &[Scope::Write], &[], 7).expect("mint");
        assert_ne!(other.record.id, made.record.id);
    }

    #[test]
    fn scopes_and_namespaces_decide_what_a_token_may_do() {
        let writer = Caller::Token {
            id: "a".into(),
            scopes: vec![Scope::Write],
            namespaces: vec!["metrics".into()],
        };
        assert!(writer.may(Scope::Write, Some("metrics")));
        assert!(!writer.may(Scope::Read, Some("metrics")));
        assert!(!writer.may(Scope::Write, Some("other")));
        assert!(!writer.may(Scope::Write, None));
        assert!(writer.sees("metrics") && !writer.sees("other"));
        let admin = Caller::Token {
            id: "b".into(),
            scopes: vec![Scope::Admin],
            namespaces: vec![],
        };
        assert!(admin.may(Scope::Read, Some("x")) && admin.may(Scope::Write, None));
    }

    #[test]
    fn only_halites_token_shape_splits() {
        assert!(split("hal_0123456789abcdef_").is_none());
        assert!(split("Bearer x").is_none());
        let t = format!("hal_{}_{}", "a".repeat(16), "b".repeat(64));
        assert_eq!(
            split(&t),
            Some(("a".repeat(16).as_str(), "b".repeat(64).as_str()))
        );
        assert!(KnownSecret::new("sixteen-chars-xx").matches("sixteen-chars-xx"));
        assert!(!KnownSecret::new("sixteen-chars-xx").matches("sixteen-chars-xy"));
    }
}
