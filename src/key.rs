//! Row-key design: a table's key schema turns a point's named fields into a
//! row key and back (DESIGN §2).
//!
//! ```text
//! [salt: width bytes = hash(salt fields) % buckets] [md5 prefix] field₁ field₂ … fieldₙ
//! ```
//!
//! - **Field order** is the field swap / promotion: putting `metric` or
//!   `host` before the timestamp keeps a series contiguous.
//! - **Encodings** make byte order equal logical order: fixed-width strings
//!   padded with zero bytes (so "a" < "ab" < "b", and "02" < "10"), big-endian
//!   unsigned integers, timestamps (epoch time in the table's unit, ms by
//!   default, big-endian), reversed
//!   timestamps (`u64::MAX - ts`, newest first) and uniquifiers.
//! - **Salt** spreads writes over `buckets` pre-split regions: the series
//!   identity by default (OpenTSDB: one series stays in one bucket), or the
//!   timestamp (the seed articles' `hash(ts) % N`: even writes, every read
//!   fans out), or any listed fields. The hash is xxh3-64 of the encoded salt
//!   fields, a stable function, so keys written today route the same later.
//! - **Hashed keys** (`md5_prefix`) put the first bytes of the MD5 of the
//!   encoded fields in front, for random-access tables; such keys still
//!   decode, but a range of them is not a range of field values.
//!
//! Byte layout and rules are also in `docs/row-keys.md`.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::codec::quote_prefix;
use crate::error::Error;

/// How a field is stored in the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldEncoding {
    /// UTF-8 text of at most `width` bytes, zero-padded; longer is an error.
    String { width: usize },
    /// Unsigned integer in `width` bytes (1, 2, 4 or 8), big-endian.
    Uint { width: usize },
    /// Epoch time in the schema's [`TimeUnit`] (ms by default), 8 bytes
    /// big-endian: oldest first.
    Timestamp,
    /// `u64::MAX - epoch time`, 8 bytes big-endian: newest first.
    ReversedTimestamp,
    /// A number that makes otherwise equal keys distinct (a sequence or
    /// nanotime suffix), `width` bytes big-endian.
    Uniquifier { width: usize },
}

impl FieldEncoding {
    /// Part of the series identity (not a timestamp or uniquifier).
    pub fn is_identity(&self) -> bool {
        !self.is_time() && !matches!(self, FieldEncoding::Uniquifier { .. })
    }

    /// Bytes the field takes in a key.
    pub fn width(&self) -> usize {
        match self {
            FieldEncoding::String { width } => *width,
            FieldEncoding::Uint { width } | FieldEncoding::Uniquifier { width } => *width,
            FieldEncoding::Timestamp | FieldEncoding::ReversedTimestamp => 8,
        }
    }

    pub fn is_time(&self) -> bool {
        matches!(
            self,
            FieldEncoding::Timestamp | FieldEncoding::ReversedTimestamp
        )
    }
}

/// A key field: `{ name = "host", type = "string", width = 16 }` in TOML or
/// JSON. Types: `string` and `uint` and `uniquifier` (with `width`),
/// `timestamp`, `reversed_timestamp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "FieldSpec", into = "FieldSpec")]
pub struct KeyField {
    pub name: String,
    pub encoding: FieldEncoding,
}

/// The written form of a [`KeyField`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FieldSpec {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    width: Option<usize>,
}

impl TryFrom<FieldSpec> for KeyField {
    type Error = String;
    fn try_from(f: FieldSpec) -> Result<Self, String> {
        let width = |kind: &str| {
            f.width
                .ok_or_else(|| format!("key field `{}` of type {kind} needs a width", f.name))
        };
        let encoding = match f.kind.as_str() {
            "string" => FieldEncoding::String {
                width: width("string")?,
            },
            "uint" => FieldEncoding::Uint {
                width: width("uint")?,
            },
            "uniquifier" => FieldEncoding::Uniquifier {
                width: width("uniquifier")?,
            },
            "timestamp" => FieldEncoding::Timestamp,
            "reversed_timestamp" => FieldEncoding::ReversedTimestamp,
            other => {
                return Err(format!(
                    "key field `{}` has unknown type `{other}`; use string, uint, timestamp, reversed_timestamp or uniquifier",
                    f.name
                ));
            }
        };
        Ok(KeyField {
            name: f.name,
            encoding,
        })
    }
}

impl From<KeyField> for FieldSpec {
    fn from(f: KeyField) -> Self {
        let (kind, width) = match f.encoding {
            FieldEncoding::String { width } => ("string", Some(width)),
            FieldEncoding::Uint { width } => ("uint", Some(width)),
            FieldEncoding::Uniquifier { width } => ("uniquifier", Some(width)),
            FieldEncoding::Timestamp => ("timestamp", None),
            FieldEncoding::ReversedTimestamp => ("reversed_timestamp", None),
        };
        FieldSpec {
            name: f.name,
            kind: kind.into(),
            width,
        }
    }
}

/// Which fields the salt hashes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SaltFrom {
    /// Every field but timestamps and uniquifiers: one series, one bucket.
    #[default]
    Series,
    /// The timestamp field(s) only.
    Timestamp,
    /// These fields, by name.
    Fields(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Salt {
    /// Number of buckets (and pre-split regions), 2..=65535.
    pub buckets: u32,
    /// Bytes of salt: 1 (up to 256 buckets) or 2.
    #[serde(default = "one")]
    pub width: usize,
    #[serde(default)]
    pub from: SaltFrom,
    /// Later bucket counts, each from a time on (in the table's time unit),
    /// oldest first: a point is salted with the count of the epoch its time
    /// falls in, so keys written before a change keep their buckets and
    /// nothing is rewritten.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub epochs: Vec<SaltEpoch>,
}

/// A bucket count from a time on: `{ from = 1790000000000, buckets = 16 }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaltEpoch {
    /// The first time (in the table's time unit) salted with `buckets`.
    pub from: u64,
    pub buckets: u32,
}

fn one() -> usize {
    1
}

impl Salt {
    /// The bucket count of points at time `ts`.
    pub fn buckets_at(&self, ts: u64) -> u32 {
        self.epochs
            .iter()
            .rev()
            .find(|e| e.from <= ts)
            .map_or(self.buckets, |e| e.buckets)
    }

    /// Every bucket count in use, with the times `[from, until)` it
    /// salts (`until` None: from then on).
    pub fn epoch_spans(&self) -> Vec<(u64, Option<u64>, u32)> {
        let mut spans = Vec::with_capacity(self.epochs.len() + 1);
        let mut from = 0;
        let mut buckets = self.buckets;
        for e in &self.epochs {
            spans.push((from, Some(e.from), buckets));
            (from, buckets) = (e.from, e.buckets);
        }
        spans.push((from, None, buckets));
        spans
    }

    /// The most buckets any epoch has: the table's bucket regions.
    pub fn max_buckets(&self) -> u32 {
        self.epochs
            .iter()
            .map(|e| e.buckets)
            .fold(self.buckets, u32::max)
    }

    /// Writes `bucket` as this salt's bytes at the start of `head`.
    fn put(&self, head: &mut [u8], bucket: u32) {
        if self.width == 1 {
            head[0] = bucket as u8;
        } else {
            head[..2].copy_from_slice(&(bucket as u16).to_be_bytes());
        }
    }

    /// Whether the salt hashes this field.
    pub fn hashes(&self, f: &KeyField) -> bool {
        match &self.from {
            SaltFrom::Series => f.encoding.is_identity(),
            SaltFrom::Timestamp => f.encoding.is_time(),
            SaltFrom::Fields(names) => names.contains(&f.name),
        }
    }
}

/// The whole key schema of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySchema {
    pub fields: Vec<KeyField>,
    #[serde(default)]
    pub salt: Option<Salt>,
    /// Bytes of MD5 put before the fields (hashed-key mode); 0 for none.
    #[serde(default)]
    pub md5_prefix: usize,
    /// What one step of the time fields is: `s`, `ms` (the default), `us`
    /// or `ns`. Points keep every distinct time the unit holds; cell
    /// versions stay in milliseconds (TTL and the region clock use them).
    #[serde(default, skip_serializing_if = "TimeUnit::is_default")]
    pub time_unit: TimeUnit,
    /// Open tag sets (OpenTSDB's layout) instead of declared `fields`:
    /// every series is a metric and any set of tags, each string a UID
    /// from the namespace's dictionary (`series.rs`), and the key is
    /// `[salt][metric uid][tag count][tag-key uid, tag-value uid … by
    /// tag-key uid][reversed time]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<OpenTags>,
}

/// Bytes of one UID in an open-tag key.
pub const UID_WIDTH: usize = 4;

/// What a table of open tag sets allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenTags {
    /// Most tags one series may carry (one byte counts them).
    #[serde(default = "OpenTags::default_max_tags")]
    pub max_tags: usize,
    /// Most series the table holds: a point of a new series past it is
    /// refused (and counted), the table's other series go on.
    #[serde(default = "OpenTags::default_series_limit")]
    pub series_limit: u64,
}

impl OpenTags {
    fn default_max_tags() -> usize {
        64
    }
    fn default_series_limit() -> u64 {
        1_000_000
    }
}

impl Default for OpenTags {
    fn default() -> Self {
        OpenTags {
            max_tags: Self::default_max_tags(),
            series_limit: Self::default_series_limit(),
        }
    }
}

/// An open-tag key taken apart: the metric's UID, the (tag key, tag
/// value) UIDs in key order, and the time (in the table's unit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagKey {
    pub metric: u32,
    pub tags: Vec<(u32, u32)>,
    pub time: u64,
}

/// The unit of a table's time fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TimeUnit {
    #[serde(rename = "s")]
    Seconds,
    #[default]
    #[serde(rename = "ms")]
    Milliseconds,
    #[serde(rename = "us")]
    Microseconds,
    #[serde(rename = "ns")]
    Nanoseconds,
}

impl TimeUnit {
    fn is_default(&self) -> bool {
        *self == TimeUnit::Milliseconds
    }

    /// Steps of this unit in a second.
    pub fn per_second(self) -> u64 {
        match self {
            TimeUnit::Seconds => 1,
            TimeUnit::Milliseconds => 1_000,
            TimeUnit::Microseconds => 1_000_000,
            TimeUnit::Nanoseconds => 1_000_000_000,
        }
    }

    /// `s`, `ms`, `us` or `ns`.
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "s",
            TimeUnit::Milliseconds => "ms",
            TimeUnit::Microseconds => "us",
            TimeUnit::Nanoseconds => "ns",
        }
    }

    /// `t` (in this unit) in whole epoch milliseconds, rounded down; `None`
    /// past the u64 range (seconds beyond year 584 million).
    pub fn to_ms_floor(self, t: u64) -> Option<u64> {
        match self {
            TimeUnit::Seconds => t.checked_mul(1_000),
            TimeUnit::Milliseconds => Some(t),
            TimeUnit::Microseconds => Some(t / 1_000),
            TimeUnit::Nanoseconds => Some(t / 1_000_000),
        }
    }

    /// `ms` milliseconds in this unit, rounded down, saturating.
    pub fn from_ms_floor(self, ms: u64) -> u64 {
        match self {
            TimeUnit::Seconds => ms / 1_000,
            TimeUnit::Milliseconds => ms,
            TimeUnit::Microseconds => ms.saturating_mul(1_000),
            TimeUnit::Nanoseconds => ms.saturating_mul(1_000_000),
        }
    }

    /// Like [`TimeUnit::to_ms_floor`] but rounded up, and saturating: an
    /// exclusive end that still lets every time below `t` in.
    pub fn to_ms_ceil(self, t: u64) -> u64 {
        match self {
            TimeUnit::Seconds => t.saturating_mul(1_000),
            TimeUnit::Milliseconds => t,
            TimeUnit::Microseconds => t.div_ceil(1_000),
            TimeUnit::Nanoseconds => t.div_ceil(1_000_000),
        }
    }

    /// The first time of this unit at or after `ms` epoch milliseconds,
    /// saturating (so an open end stays open).
    pub fn from_ms_ceil(self, ms: u64) -> u64 {
        match self {
            TimeUnit::Seconds => ms.div_ceil(1_000),
            TimeUnit::Milliseconds => ms,
            TimeUnit::Microseconds => ms.saturating_mul(1_000),
            TimeUnit::Nanoseconds => ms.saturating_mul(1_000_000),
        }
    }
}

/// A field value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FieldValue {
    Uint(u64),
    Str(String),
}

/// A field value borrowed from its source (a parsed point), so encoding a
/// key on the ingest path allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldRef<'a> {
    Uint(u64),
    Str(&'a str),
}

impl std::fmt::Display for FieldRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldRef::Uint(v) => write!(f, "{v}"),
            FieldRef::Str(s) => f.write_str(s),
        }
    }
}

impl FieldValue {
    pub fn as_ref(&self) -> FieldRef<'_> {
        match self {
            FieldValue::Uint(v) => FieldRef::Uint(*v),
            FieldValue::Str(s) => FieldRef::Str(s),
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            FieldValue::Uint(v) => Some(*v),
            FieldValue::Str(_) => None,
        }
    }
}

impl std::fmt::Display for FieldValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldValue::Uint(v) => write!(f, "{v}"),
            FieldValue::Str(s) => f.write_str(s),
        }
    }
}

/// A decoded key: its bucket (if salted) and its fields by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedKey {
    pub bucket: Option<u32>,
    pub fields: Vec<(String, FieldValue)>,
}

fn invalid(msg: String) -> Error {
    Error::InvalidInput(msg)
}

impl KeySchema {
    /// Checks the schema; every problem names the field.
    pub fn validate(&self) -> Result<(), Error> {
        if let Some(tags) = &self.tags {
            return self.validate_open_tags(tags);
        }
        if self.fields.is_empty() {
            return Err(invalid("a key schema needs at least one field".into()));
        }
        let mut names = std::collections::HashSet::new();
        for f in &self.fields {
            if f.name.is_empty() || !names.insert(f.name.as_str()) {
                return Err(invalid(format!(
                    "key field names must be unique and non-empty. field=`{}`",
                    f.name
                )));
            }
            match f.encoding {
                FieldEncoding::String { width } if width == 0 || width > 1024 => {
                    return Err(invalid(format!(
                        "string key field width must be 1..=1024. field=`{}`",
                        f.name
                    )));
                }
                FieldEncoding::Uint { width } | FieldEncoding::Uniquifier { width }
                    if ![1, 2, 4, 8].contains(&width) =>
                {
                    return Err(invalid(format!(
                        "integer key field width must be 1, 2, 4 or 8. field=`{}`",
                        f.name
                    )));
                }
                _ => {}
            }
        }
        if self.md5_prefix > 16 {
            return Err(invalid("md5_prefix is at most 16 bytes".into()));
        }
        if self.time_unit != TimeUnit::Milliseconds
            && !self.fields.iter().any(|f| f.encoding.is_time())
        {
            return Err(invalid(format!(
                "time_unit `{}` needs a timestamp or reversed_timestamp key field",
                self.time_unit.name()
            )));
        }
        let uniquifiers = self
            .fields
            .iter()
            .filter(|f| matches!(f.encoding, FieldEncoding::Uniquifier { .. }))
            .count();
        if uniquifiers > 1 {
            return Err(invalid(
                "a key has at most one uniquifier field: one number already makes equal keys distinct"
                    .into(),
            ));
        }
        if let Some(s) = &self.salt {
            if !(s.width == 1 || s.width == 2) {
                return Err(invalid("salt width must be 1 or 2 bytes".into()));
            }
            let max = if s.width == 1 { 256 } else { 65_536 };
            for buckets in std::iter::once(s.buckets).chain(s.epochs.iter().map(|e| e.buckets)) {
                if buckets < 2 || buckets > max {
                    return Err(invalid(format!(
                        "salt buckets must be 2..={max} for a {}-byte salt, got {buckets}",
                        s.width
                    )));
                }
            }
            if !s.epochs.is_empty() && self.time_field().is_none() {
                return Err(invalid(
                    "salt epochs need a timestamp key field: a point's time picks its bucket count"
                        .into(),
                ));
            }
            if s.epochs.windows(2).any(|w| w[0].from >= w[1].from) {
                return Err(invalid("salt epochs must start at increasing times".into()));
            }
            let salt_fields = self.salt_field_indexes();
            if salt_fields.is_empty() {
                return Err(invalid(
                    "the salt hashes no field: list fields that exist".into(),
                ));
            }
            if let SaltFrom::Fields(names) = &s.from
                && let Some(missing) = names
                    .iter()
                    .find(|n| !self.fields.iter().any(|f| &f.name == *n))
            {
                return Err(invalid(format!(
                    "salt names an unknown field. field=`{missing}`"
                )));
            }
        }
        Ok(())
    }

    fn validate_open_tags(&self, tags: &OpenTags) -> Result<(), Error> {
        if !self.fields.is_empty() {
            return Err(invalid(
                "a key of open tag sets has no declared fields: every tag of a point is part of its series"
                    .into(),
            ));
        }
        if self.md5_prefix != 0 {
            return Err(invalid(
                "a key of open tag sets takes a salt, not an md5_prefix".into(),
            ));
        }
        if tags.max_tags == 0 || tags.max_tags > 255 {
            return Err(invalid("max_tags must be 1..=255".into()));
        }
        if tags.series_limit == 0 {
            return Err(invalid("series_limit must be at least 1".into()));
        }
        if let Some(s) = &self.salt {
            if s.width != 1 && s.width != 2 {
                return Err(invalid("salt width must be 1 or 2 bytes".into()));
            }
            let max = if s.width == 1 { 256 } else { 65_536 };
            if s.buckets < 2 || s.buckets > max {
                return Err(invalid(format!(
                    "salt buckets must be 2..={max} for a {}-byte salt, got {}",
                    s.width, s.buckets
                )));
            }
            if s.from != SaltFrom::Series || !s.epochs.is_empty() {
                return Err(invalid(
                    "a key of open tag sets is salted by its series, with one bucket count".into(),
                ));
            }
        }
        Ok(())
    }

    /// Whether the table's series are open tag sets (no declared fields).
    pub fn is_open_tags(&self) -> bool {
        self.tags.is_some()
    }

    /// Encodes an open-tag key into `out` (replacing what it held): `tags`
    /// sorted by tag-key UID, `time` in the table's unit. The salt hashes
    /// the series (metric and tags), so a series lives in one bucket.
    pub fn encode_tag_key(&self, metric: u32, tags: &[(u32, u32)], time: u64, out: &mut Vec<u8>) {
        debug_assert!(tags.windows(2).all(|w| w[0].0 < w[1].0));
        out.clear();
        let prefix = self.prefix_len();
        out.resize(prefix, 0);
        out.extend_from_slice(&metric.to_be_bytes());
        out.push(tags.len() as u8);
        for (k, v) in tags {
            out.extend_from_slice(&k.to_be_bytes());
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&(u64::MAX - time).to_be_bytes());
        let (head, rest) = out.split_at_mut(prefix);
        self.salt_tag_series(head, &rest[..rest.len() - 8]);
    }

    /// Salts an open-tag key's `head` by its series: one bucket a series.
    fn salt_tag_series(&self, head: &mut [u8], series: &[u8]) {
        if let Some(salt) = &self.salt {
            let b = (xxhash_rust::xxh3::xxh3_64(series) % u64::from(salt.buckets)) as u32;
            salt.put(head, b);
        }
    }

    /// The start of every key of an open-tag series (`tag_series` of one
    /// of its keys): its salt and the series.
    pub fn tag_series_prefix(&self, series: &[u8]) -> Vec<u8> {
        let mut out = vec![0; self.prefix_len()];
        self.salt_tag_series(&mut out, series);
        out.extend_from_slice(series);
        out
    }

    /// The series part of an open-tag key: metric, tag count and tags,
    /// without salt or time; `None` when `key` is not such a key.
    pub fn tag_series<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        let head = key.get(..key.len().checked_sub(8)?)?;
        self.is_tag_series_head(head)
            .then(|| &head[self.prefix_len()..])
    }

    /// Whether `head` (an open-tag key less its 8 bytes of time) is of
    /// the shape salt, metric, tag count, that many tags.
    pub fn is_tag_series_head(&self, head: &[u8]) -> bool {
        let prefix = self.prefix_len();
        head.get(prefix + UID_WIDTH)
            .is_some_and(|&n| head.len() == prefix + UID_WIDTH + 1 + n as usize * 2 * UID_WIDTH)
    }

    /// Takes an open-tag key apart; `None` when it is not one.
    pub fn decode_tag_key(&self, key: &[u8]) -> Option<TagKey> {
        let series = self.tag_series(key)?;
        let (metric, tags) = decode_tag_series(series)?;
        let time = u64::MAX - u64::from_be_bytes(key[key.len() - 8..].try_into().ok()?);
        Some(TagKey { metric, tags, time })
    }

    /// Bytes of salt (and hash prefix) before the fields.
    pub fn prefix_len(&self) -> usize {
        self.salt.as_ref().map_or(0, |s| s.width) + self.md5_prefix
    }

    /// Total key length: every field has a fixed width.
    pub fn key_len(&self) -> usize {
        self.prefix_len()
            + self
                .fields
                .iter()
                .map(|f| f.encoding.width())
                .sum::<usize>()
    }

    /// Buckets (and bucket regions) of the table: the most any salt epoch
    /// has.
    pub fn buckets(&self) -> u32 {
        self.salt.as_ref().map_or(1, Salt::max_buckets)
    }

    /// This schema with the bucket count `buckets` from `from` (in its
    /// time unit) on, checked: a salted schema, an epoch later than the
    /// last, a count the salt's width holds. `table` names it in errors.
    pub fn with_salt_epoch(
        &self,
        table: &str,
        from: u64,
        buckets: u32,
    ) -> Result<KeySchema, Error> {
        let mut key = self.clone();
        let Some(salt) = key.salt.as_mut() else {
            return Err(invalid(format!(
                "table `{table}` has no salt: only a salted table's bucket count can change"
            )));
        };
        if let Some(last) = salt.epochs.last()
            && last.from >= from
        {
            return Err(invalid(format!(
                "table `{table}` already has a salt epoch from {}; a new one starts later",
                last.from
            )));
        }
        salt.epochs.push(SaltEpoch { from, buckets });
        key.validate()?;
        Ok(key)
    }

    /// How many times the bucket count changed: rows encoded under another
    /// generation may need their salt again ([`KeySchema::resalt_row`]).
    pub fn salt_generation(&self) -> usize {
        self.salt.as_ref().map_or(0, |s| s.epochs.len())
    }

    /// The index and byte offset (within the encoded fields) of the first
    /// time field: the time that picks a point's salt epoch.
    fn time_field(&self) -> Option<(usize, usize)> {
        let mut at = 0;
        for (i, f) in self.fields.iter().enumerate() {
            if f.encoding.is_time() {
                return Some((i, at));
            }
            at += f.encoding.width();
        }
        None
    }

    /// The time of encoded fields, for their salt epoch.
    fn time_of(&self, encoded_fields: &[u8]) -> u64 {
        let Some((i, at)) = self.time_field() else {
            return 0;
        };
        let raw = encoded_fields
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_be_bytes);
        match self.fields[i].encoding {
            FieldEncoding::ReversedTimestamp => u64::MAX - raw,
            _ => raw,
        }
    }

    /// Sets the salt of a full row key again from its fields, for rows
    /// encoded before the bucket count changed; `false` when the row is not
    /// one of this schema's keys (left as it is).
    pub fn resalt_row(&self, row: &mut [u8]) -> bool {
        let Some(salt) = &self.salt else {
            return true;
        };
        if row.len() != self.key_len() {
            return false;
        }
        let (head, fields) = row.split_at_mut(self.prefix_len());
        let Some(b) = self.bucket_of(fields) else {
            return true;
        };
        salt.put(head, b);
        true
    }

    /// Indexes of the fields the salt hashes, in key order.
    pub fn salt_field_indexes(&self) -> Vec<usize> {
        let Some(s) = &self.salt else {
            return Vec::new();
        };
        self.fields
            .iter()
            .enumerate()
            .filter(|(_, f)| s.hashes(f))
            .map(|(i, _)| i)
            .collect()
    }

    /// Whether a key is its series' bytes (the salt and every field but
    /// the last) followed by the time, its last field, so that the series'
    /// bytes may be kept and reused for its next point: not when a hash
    /// prefix, the salt (by its fields or its epochs) or a uniquifier
    /// depends on the point rather than its series.
    pub fn is_series_then_time(&self) -> bool {
        let Some((last, series)) = self.fields.split_last() else {
            return false;
        };
        self.tags.is_none()
            && self.md5_prefix == 0
            && last.encoding.is_time()
            && series.iter().all(|f| f.encoding.is_identity())
            && self
                .salt
                .as_ref()
                .is_none_or(|s| s.epochs.is_empty() && !s.hashes(last))
    }

    /// Appends `time` as the last field of a key that
    /// [`KeySchema::is_series_then_time`] says ends in it.
    pub fn put_last_time(&self, time: u64, out: &mut Vec<u8>) {
        match self.fields.last().map(|f| &f.encoding) {
            Some(FieldEncoding::ReversedTimestamp) => {
                out.extend_from_slice(&(u64::MAX - time).to_be_bytes())
            }
            _ => out.extend_from_slice(&time.to_be_bytes()),
        }
    }

    /// Length of the series identity: the leading fields before the first
    /// timestamp or uniquifier, plus salt and hash prefix. The ROWPREFIX bloom
    /// filter covers this many bytes.
    pub fn series_prefix_len(&self) -> usize {
        if self.tags.is_some() {
            // Series differ in length: the bloom covers salt and metric.
            return self.prefix_len() + UID_WIDTH;
        }
        let fields: usize = self
            .fields
            .iter()
            .take_while(|f| {
                !f.encoding.is_time() && !matches!(f.encoding, FieldEncoding::Uniquifier { .. })
            })
            .map(|f| f.encoding.width())
            .sum();
        self.prefix_len() + fields
    }

    fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// Encodes one field value into `out`.
    fn encode_field(&self, i: usize, value: FieldRef<'_>, out: &mut Vec<u8>) -> Result<(), Error> {
        let f = &self.fields[i];
        let wrong = |want: &str| {
            invalid(format!(
                "key field `{}` needs {want}, got `{}`",
                f.name,
                quote_prefix(&value.to_string())
            ))
        };
        match (&f.encoding, value) {
            (FieldEncoding::String { width }, FieldRef::Str(s)) => {
                if s.len() > *width {
                    return Err(invalid(format!(
                        "key field `{}` is {} bytes, longer than its width {width}: `{}`",
                        f.name,
                        s.len(),
                        quote_prefix(s)
                    )));
                }
                if s.as_bytes().contains(&0) {
                    return Err(invalid(format!(
                        "key field `{}` may not contain a NUL byte",
                        f.name
                    )));
                }
                out.extend_from_slice(s.as_bytes());
                out.resize(out.len() + width - s.len(), 0);
            }
            (
                FieldEncoding::Uint { width } | FieldEncoding::Uniquifier { width },
                FieldRef::Uint(v),
            ) => {
                if *width < 8 && v >= 1u64 << (8 * width) {
                    return Err(invalid(format!(
                        "key field `{}` value {v} does not fit in {width} byte(s)",
                        f.name
                    )));
                }
                out.extend_from_slice(&v.to_be_bytes()[8 - width..]);
            }
            (FieldEncoding::Timestamp, FieldRef::Uint(v)) => {
                out.extend_from_slice(&v.to_be_bytes())
            }
            (FieldEncoding::ReversedTimestamp, FieldRef::Uint(v)) => {
                out.extend_from_slice(&(u64::MAX - v).to_be_bytes())
            }
            (FieldEncoding::String { .. }, _) => return Err(wrong("a string")),
            _ => return Err(wrong("an unsigned integer")),
        }
        Ok(())
    }

    /// The salt bucket of a key whose encoded fields (after any salt and
    /// hash prefix) are `encoded_fields`.
    fn bucket_of(&self, encoded_fields: &[u8]) -> Option<u32> {
        let salt = self.salt.as_ref()?;
        // The hashed fields are usually adjacent (the series identity leads
        // the key): hash them in place, gathering only when they are not.
        let mut span: Option<(usize, usize)> = None;
        let mut adjacent = true;
        let mut at = 0;
        for f in &self.fields {
            let w = f.encoding.width();
            if salt.hashes(f) {
                span = match span {
                    None => Some((at, at + w)),
                    Some((from, to)) => {
                        adjacent &= to == at;
                        Some((from, at + w))
                    }
                };
            }
            at += w;
        }
        let hash = match span {
            None => xxhash_rust::xxh3::xxh3_64(&[]),
            Some((from, to)) if adjacent => xxhash_rust::xxh3::xxh3_64(&encoded_fields[from..to]),
            Some(_) => {
                let mut hashed = Vec::new();
                let mut at = 0;
                for f in &self.fields {
                    let w = f.encoding.width();
                    if salt.hashes(f) {
                        hashed.extend_from_slice(&encoded_fields[at..at + w]);
                    }
                    at += w;
                }
                xxhash_rust::xxh3::xxh3_64(&hashed)
            }
        };
        let buckets = if salt.epochs.is_empty() {
            salt.buckets
        } else {
            salt.buckets_at(self.time_of(encoded_fields))
        };
        Some((hash % u64::from(buckets)) as u32)
    }

    /// The salt bytes of a bucket.
    pub fn salt_bytes(&self, bucket: u32) -> Vec<u8> {
        match &self.salt {
            Some(s) if s.width == 1 => vec![bucket as u8],
            Some(_) => (bucket as u16).to_be_bytes().to_vec(),
            None => Vec::new(),
        }
    }

    /// Encodes a full key from named values; every field must be given.
    pub fn encode(&self, values: &[(&str, FieldValue)]) -> Result<Vec<u8>, Error> {
        let mut ordered: Vec<Option<&FieldValue>> = vec![None; self.fields.len()];
        for (name, v) in values {
            let i = self
                .field_index(name)
                .ok_or_else(|| invalid(format!("no key field named `{name}`")))?;
            ordered[i] = Some(v);
        }
        let mut key = Vec::with_capacity(self.key_len());
        self.encode_with(&mut key, |i, f| {
            ordered[i]
                .map(FieldValue::as_ref)
                .ok_or_else(|| invalid(format!("key field `{}` is missing", f.name)))
        })?;
        Ok(key)
    }

    /// Encodes values given in key order.
    pub fn encode_ordered(&self, values: &[FieldValue]) -> Result<Vec<u8>, Error> {
        if values.len() != self.fields.len() {
            return Err(invalid(format!(
                "key needs {} field values, got {}",
                self.fields.len(),
                values.len()
            )));
        }
        let mut key = Vec::with_capacity(self.key_len());
        self.encode_with(&mut key, |i, _| Ok(values[i].as_ref()))?;
        Ok(key)
    }

    /// Encodes a full key into `out` (replacing what it held), asking
    /// `value_of` for each field's value in key order. The ingest path
    /// encodes every row through here with one reused buffer.
    pub fn encode_with<'v>(
        &self,
        out: &mut Vec<u8>,
        mut value_of: impl FnMut(usize, &KeyField) -> Result<FieldRef<'v>, Error>,
    ) -> Result<(), Error> {
        out.clear();
        let prefix = self.prefix_len();
        out.resize(prefix, 0);
        for (i, f) in self.fields.iter().enumerate() {
            let v = value_of(i, f)?;
            self.encode_field(i, v, out)?;
        }
        let (head, fields) = out.split_at_mut(prefix);
        let mut at = 0;
        if let (Some(salt), Some(b)) = (&self.salt, self.bucket_of(fields)) {
            salt.put(head, b);
            at = salt.width;
        }
        if self.md5_prefix > 0 {
            let digest = md5::compute(&*fields);
            head[at..].copy_from_slice(&digest.0[..self.md5_prefix]);
        }
        Ok(())
    }

    /// Encodes the leading fields `values` (in key order, fewer than all):
    /// the prefix every key of those values starts with, after the salt.
    pub fn encode_leading(&self, values: &[FieldValue]) -> Result<Vec<u8>, Error> {
        if values.len() > self.fields.len() {
            return Err(invalid("more values than key fields".into()));
        }
        let mut out = Vec::new();
        for (i, v) in values.iter().enumerate() {
            self.encode_field(i, v.as_ref(), &mut out)?;
        }
        Ok(out)
    }

    /// The buckets a query with these leading values and times `[start,
    /// end)` (in the table's unit) reads, when the values fix
    /// every salt field: one per salt epoch the times meet (fewer where
    /// epochs agree); `None` when it must fan out over every bucket.
    pub fn buckets_for_leading(
        &self,
        values: &[FieldValue],
        start: u64,
        end: u64,
    ) -> Result<Option<Vec<u32>>, Error> {
        let Some(salt) = &self.salt else {
            return Ok(None);
        };
        let salt_fields = self.salt_field_indexes();
        if salt_fields.iter().any(|&i| i >= values.len()) {
            return Ok(None);
        }
        let mut encoded = self.encode_leading(values)?;
        let full: usize = self.fields.iter().map(|f| f.encoding.width()).sum();
        encoded.resize(full, 0);
        if salt.epochs.is_empty() {
            return Ok(self.bucket_of(&encoded).map(|b| vec![b]));
        }
        // The salt fields are fixed, so only the time moves a point between
        // buckets: put each epoch's first time met into the fields.
        let Some((i, at)) = self.time_field() else {
            return Ok(None);
        };
        if salt_fields.contains(&i) {
            // The values fix the time too: one point in time, one epoch.
            return Ok(self.bucket_of(&encoded).map(|b| vec![b]));
        }
        let mut buckets = Vec::new();
        for (from, until, _) in salt.epoch_spans() {
            if until.is_some_and(|u| u <= start) || from >= end {
                continue;
            }
            let t = from.max(start);
            let raw = match self.fields[i].encoding {
                FieldEncoding::ReversedTimestamp => u64::MAX - t,
                _ => t,
            };
            encoded[at..at + 8].copy_from_slice(&raw.to_be_bytes());
            if let Some(b) = self.bucket_of(&encoded)
                && !buckets.contains(&b)
            {
                buckets.push(b);
            }
        }
        buckets.sort_unstable();
        Ok(Some(buckets))
    }

    /// Decodes a key back to named fields.
    pub fn decode(&self, key: &[u8]) -> Result<DecodedKey, Error> {
        let mut fields = Vec::with_capacity(self.fields.len());
        let bucket = self.decode_each(key, |name, v| {
            fields.push((
                name.to_string(),
                match v {
                    FieldRef::Uint(u) => FieldValue::Uint(u),
                    FieldRef::Str(s) => FieldValue::Str(s.to_string()),
                },
            ));
        })?;
        Ok(DecodedKey { bucket, fields })
    }

    /// The salt bucket a key (of this schema's length) is in.
    pub fn salt_bucket(&self, key: &[u8]) -> Option<u32> {
        let s = self.salt.as_ref()?;
        Some(match (s.width, key) {
            (1, [b, ..]) => u32::from(*b),
            (_, [hi, lo, ..]) => u32::from(u16::from_be_bytes([*hi, *lo])),
            _ => return None,
        })
    }

    /// Decodes a key field by field into `each(name, value)`, borrowing the
    /// key's bytes (answers write thousands of keys: no allocation per
    /// field); returns the salt bucket.
    pub fn decode_each<'k>(
        &self,
        key: &'k [u8],
        mut each: impl FnMut(&str, FieldRef<'k>),
    ) -> Result<Option<u32>, Error> {
        self.check_len(key)?;
        let bucket = self.salt_bucket(key);
        let mut at = self.prefix_len();
        for f in &self.fields {
            let w = f.encoding.width();
            let bytes = &key[at..at + w];
            at += w;
            each(&f.name, decode_field(f, bytes)?);
        }
        Ok(bucket)
    }

    fn check_len(&self, key: &[u8]) -> Result<(), Error> {
        if key.len() != self.key_len() {
            return Err(invalid(format!(
                "key is {} bytes, the schema's keys are {}",
                key.len(),
                self.key_len()
            )));
        }
        Ok(())
    }

    /// Where field `index` lies in a key of this schema (fields are of
    /// fixed width).
    pub fn field_range(&self, index: usize) -> std::ops::Range<usize> {
        let start = self.prefix_len()
            + self.fields[..index]
                .iter()
                .map(|f| f.encoding.width())
                .sum::<usize>();
        start..start + self.fields[index].encoding.width()
    }

    /// Field `index` of `key` alone.
    pub fn decode_field_at<'k>(&self, key: &'k [u8], index: usize) -> Result<FieldRef<'k>, Error> {
        self.check_len(key)?;
        decode_field(&self.fields[index], &key[self.field_range(index)])
    }

    /// The logical order of two value lists (key order): strings and numbers
    /// ascending, reversed timestamps descending. Byte order of encoded keys
    /// within one bucket equals this.
    pub fn logical_cmp(&self, a: &[FieldValue], b: &[FieldValue]) -> Ordering {
        for (f, (x, y)) in self.fields.iter().zip(a.iter().zip(b)) {
            let o = match (x, y) {
                (FieldValue::Str(x), FieldValue::Str(y)) => x.as_bytes().cmp(y.as_bytes()),
                (FieldValue::Uint(x), FieldValue::Uint(y)) => {
                    if f.encoding == FieldEncoding::ReversedTimestamp {
                        y.cmp(x)
                    } else {
                        x.cmp(y)
                    }
                }
                _ => Ordering::Equal,
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }
}

/// A series of an open-tag key (`KeySchema::tag_series`) taken apart:
/// the metric UID and the (tag key, tag value) UIDs.
pub fn decode_tag_series(series: &[u8]) -> Option<(u32, Vec<(u32, u32)>)> {
    let uid = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(
            series.get(at..at + UID_WIDTH)?.try_into().ok()?,
        ))
    };
    let metric = uid(0)?;
    let n = *series.get(UID_WIDTH)? as usize;
    if series.len() != UID_WIDTH + 1 + n * 2 * UID_WIDTH {
        return None;
    }
    let tags = (0..n)
        .map(|i| {
            let at = UID_WIDTH + 1 + i * 2 * UID_WIDTH;
            Some((uid(at)?, uid(at + UID_WIDTH)?))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((metric, tags))
}

/// One field's value from its bytes in a key.
fn decode_field<'k>(f: &KeyField, bytes: &'k [u8]) -> Result<FieldRef<'k>, Error> {
    Ok(match f.encoding {
        FieldEncoding::String { .. } => {
            let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1);
            // Padding is trailing NULs only: a NUL before the end is
            // not a key this schema writes (and could not be
            // encoded back).
            if bytes[..end].contains(&0) {
                return Err(invalid(format!(
                    "key field `{}` holds a NUL byte before its end",
                    f.name
                )));
            }
            let s = std::str::from_utf8(&bytes[..end])
                .map_err(|_| invalid(format!("key field `{}` is not UTF-8", f.name)))?;
            FieldRef::Str(s)
        }
        FieldEncoding::Uint { .. } | FieldEncoding::Uniquifier { .. } => {
            let mut b = [0u8; 8];
            b[8 - bytes.len()..].copy_from_slice(bytes);
            FieldRef::Uint(u64::from_be_bytes(b))
        }
        FieldEncoding::Timestamp => {
            FieldRef::Uint(u64::from_be_bytes(bytes.try_into().expect("8 bytes")))
        }
        FieldEncoding::ReversedTimestamp => {
            FieldRef::Uint(u64::MAX - u64::from_be_bytes(bytes.try_into().expect("8 bytes")))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu() -> KeySchema {
        toml::from_str(
            r#"
            fields = [
              { name = "metric", type = "string", width = 8 },
              { name = "host", type = "string", width = 12 },
              { name = "ts", type = "reversed_timestamp" },
            ]
            salt = { buckets = 16 }
            "#,
        )
        .unwrap()
    }

    /// A point is salted with its time's epoch; a series query reads the
    /// bucket of each epoch its range meets; a row encoded under the old
    /// count is salted again.
    #[test]
    fn salt_epochs_pick_the_count_by_the_points_time() {
        let before = cpu();
        let mut grown = cpu();
        grown.salt.as_mut().unwrap().epochs.push(SaltEpoch {
            from: 1_000,
            buckets: 64,
        });
        grown.validate().unwrap();
        assert_eq!(grown.buckets(), 64);
        assert_eq!(grown.salt_generation(), 1);
        let values = |host: &str, ts: u64| {
            vec![
                FieldValue::Str("cpu".into()),
                FieldValue::Str(host.into()),
                FieldValue::Uint(ts),
            ]
        };
        // A host whose bucket differs between 16 and 64 buckets.
        let host = (0..100)
            .map(|i| format!("h{i}"))
            .find(|h| {
                before.encode_ordered(&values(h, 0)).unwrap()[0]
                    != grown.encode_ordered(&values(h, 1_000)).unwrap()[0]
            })
            .expect("some host moves");
        let old = before.encode_ordered(&values(&host, 999)).unwrap()[0];
        let new = grown.encode_ordered(&values(&host, 1_000)).unwrap()[0];
        assert_eq!(grown.encode_ordered(&values(&host, 999)).unwrap()[0], old);
        let lead = &values(&host, 0)[..2];
        let mut both = vec![u32::from(old), u32::from(new)];
        both.sort_unstable();
        assert_eq!(
            grown.buckets_for_leading(lead, 0, 5_000).unwrap(),
            Some(both)
        );
        assert_eq!(
            grown.buckets_for_leading(lead, 0, 1_000).unwrap(),
            Some(vec![u32::from(old)])
        );
        assert_eq!(
            grown.buckets_for_leading(lead, 1_000, 1_001).unwrap(),
            Some(vec![u32::from(new)])
        );
        assert_eq!(
            grown.buckets_for_leading(&lead[..1], 0, 5_000).unwrap(),
            None
        );
        let mut row = before.encode_ordered(&values(&host, 2_000)).unwrap();
        assert!(grown.resalt_row(&mut row));
        assert_eq!(row, grown.encode_ordered(&values(&host, 2_000)).unwrap());
        assert!(!grown.resalt_row(&mut [1, 2, 3]));
        // Epochs start at increasing times, within the salt's width.
        let mut bad = grown.clone();
        bad.salt.as_mut().unwrap().epochs.push(SaltEpoch {
            from: 1_000,
            buckets: 8,
        });
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("increasing")
        );
        let mut bad = grown.clone();
        bad.salt.as_mut().unwrap().epochs[0].buckets = 257;
        assert!(bad.validate().unwrap_err().to_string().contains("2..=256"));
    }

    /// The salt is part of the stored format: pin how it is computed.
    #[test]
    fn salt_hashes_the_salted_fields_adjacent_or_not() {
        let series = cpu();
        let key = series
            .encode_ordered(&[
                FieldValue::Str("cpu".into()),
                FieldValue::Str("host_7".into()),
                FieldValue::Uint(9),
            ])
            .unwrap();
        let identity = &key[1..1 + 8 + 12];
        assert_eq!(u64::from(key[0]), xxhash_rust::xxh3::xxh3_64(identity) % 16);
        let apart: KeySchema = toml::from_str(
            r#"
            fields = [
              { name = "host", type = "string", width = 4 },
              { name = "ts", type = "timestamp" },
              { name = "dc", type = "uint", width = 2 },
            ]
            salt = { buckets = 300, width = 2, from = { fields = ["host", "dc"] } }
            md5_prefix = 2
            "#,
        )
        .unwrap();
        apart.validate().unwrap();
        let key = apart
            .encode_ordered(&[
                FieldValue::Str("ab".into()),
                FieldValue::Uint(7),
                FieldValue::Uint(513),
            ])
            .unwrap();
        let fields = [&b"ab\0\0"[..], &7u64.to_be_bytes(), &[2, 1]].concat();
        assert_eq!(&key[4..], fields.as_slice());
        let hashed = [&b"ab\0\0"[..], &[2, 1]].concat();
        let bucket = xxhash_rust::xxh3::xxh3_64(&hashed) % 300;
        assert_eq!(u64::from(u16::from_be_bytes([key[0], key[1]])), bucket);
        assert_eq!(&key[2..4], &md5::compute(&fields).0[..2]);
        assert_eq!(apart.decode(&key).unwrap().bucket, Some(bucket as u32));
    }

    #[test]
    fn schema_from_toml_round_trips_a_key() {
        let s = cpu();
        s.validate().unwrap();
        assert_eq!(s.key_len(), 1 + 8 + 12 + 8);
        assert_eq!(s.series_prefix_len(), 1 + 8 + 12);
        let key = s
            .encode(&[
                ("ts", FieldValue::Uint(1_700_000_000_000)),
                ("host", FieldValue::Str("host_7".into())),
                ("metric", FieldValue::Str("cpu".into())),
            ])
            .unwrap();
        let d = s.decode(&key).unwrap();
        assert!(d.bucket.unwrap() < 16);
        assert_eq!(
            d.fields,
            vec![
                ("metric".to_string(), FieldValue::Str("cpu".into())),
                ("host".to_string(), FieldValue::Str("host_7".into())),
                ("ts".to_string(), FieldValue::Uint(1_700_000_000_000)),
            ]
        );
        // One series, one bucket: the salt ignores the timestamp.
        let other_time = s
            .encode_ordered(&[
                FieldValue::Str("cpu".into()),
                FieldValue::Str("host_7".into()),
                FieldValue::Uint(5),
            ])
            .unwrap();
        assert_eq!(key[0], other_time[0]);
        assert_eq!(
            s.buckets_for_leading(
                &[
                    FieldValue::Str("cpu".into()),
                    FieldValue::Str("host_7".into())
                ],
                0,
                u64::MAX
            )
            .unwrap(),
            Some(vec![u32::from(key[0])])
        );
        assert_eq!(
            s.buckets_for_leading(&[FieldValue::Str("cpu".into())], 0, u64::MAX)
                .unwrap(),
            None
        );
    }

    #[test]
    fn bad_values_and_schemas_are_named() {
        let s = cpu();
        let e = s
            .encode_ordered(&[
                FieldValue::Str("a-very-long-metric".into()),
                FieldValue::Str("h".into()),
                FieldValue::Uint(1),
            ])
            .unwrap_err();
        assert!(
            e.to_string().contains("metric") && e.to_string().contains("width 8"),
            "{e}"
        );
        let e = s
            .encode(&[("metric", FieldValue::Str("cpu".into()))])
            .unwrap_err();
        assert!(e.to_string().contains("`host` is missing"), "{e}");
        let e = s
            .encode_ordered(&[
                FieldValue::Uint(1),
                FieldValue::Str("h".into()),
                FieldValue::Uint(1),
            ])
            .unwrap_err();
        assert!(e.to_string().contains("needs a string"), "{e}");
        let mut bad = cpu();
        bad.salt = Some(Salt {
            buckets: 300,
            width: 1,
            from: SaltFrom::Series,
            epochs: Vec::new(),
        });
        assert!(bad.validate().unwrap_err().to_string().contains("2..=256"));
        let mut bad = cpu();
        bad.fields.push(KeyField {
            name: "n".into(),
            encoding: FieldEncoding::Uint { width: 3 },
        });
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("1, 2, 4 or 8")
        );
    }

    #[test]
    fn one_field_decodes_alone_where_its_range_says() {
        let s: KeySchema = toml::from_str(
            r#"
            fields = [ { name = "host", type = "string", width = 6 }, { name = "ts", type = "reversed_timestamp" }, { name = "n", type = "uint", width = 2 } ]
            salt = { buckets = 16, width = 1, from = "series" }
            "#,
        )
        .unwrap();
        s.validate().unwrap();
        assert_eq!(s.field_range(0), 1..7);
        assert_eq!(s.field_range(1), 7..15);
        assert_eq!(s.field_range(2), 15..17);
        let k = s
            .encode_ordered(&[
                FieldValue::Str("web".into()),
                FieldValue::Uint(1_700_000_000_000),
                FieldValue::Uint(513),
            ])
            .unwrap();
        let mut all = Vec::new();
        s.decode_each(&k, |_, v| all.push(format!("{v:?}")))
            .unwrap();
        for (i, want) in all.iter().enumerate() {
            assert_eq!(&format!("{:?}", s.decode_field_at(&k, i).unwrap()), want);
        }
        assert!(matches!(
            s.decode_field_at(&k, 1).unwrap(),
            FieldRef::Uint(1_700_000_000_000)
        ));
        assert!(s.decode_field_at(&k[1..], 0).is_err());
    }

    #[test]
    fn timestamp_salt_and_md5_prefix() {
        let s: KeySchema = toml::from_str(
            r#"
            fields = [ { name = "id", type = "uint", width = 4 }, { name = "ts", type = "timestamp" } ]
            salt = { buckets = 300, width = 2, from = "timestamp" }
            md5_prefix = 4
            "#,
        )
        .unwrap();
        s.validate().unwrap();
        assert_eq!(s.key_len(), 2 + 4 + 4 + 8);
        let k = s
            .encode_ordered(&[FieldValue::Uint(42), FieldValue::Uint(99)])
            .unwrap();
        assert_eq!(
            s.decode(&k).unwrap().fields[0],
            ("id".to_string(), FieldValue::Uint(42))
        );
        // The salt hashes the timestamp only.
        let k2 = s
            .encode_ordered(&[FieldValue::Uint(7), FieldValue::Uint(99)])
            .unwrap();
        assert_eq!(k[..2], k2[..2]);
    }

    fn open_tags(buckets: Option<u32>) -> KeySchema {
        KeySchema {
            fields: Vec::new(),
            salt: buckets.map(|b| Salt {
                buckets: b,
                width: 1,
                from: SaltFrom::Series,
                epochs: Vec::new(),
            }),
            md5_prefix: 0,
            time_unit: TimeUnit::Nanoseconds,
            tags: Some(OpenTags::default()),
        }
    }

    #[test]
    fn open_tag_keys_round_trip_and_keep_a_series_in_one_bucket() {
        let k = open_tags(Some(16));
        k.validate().expect("valid");
        let mut key = Vec::new();
        let tags = [(1, 7), (3, 2)];
        k.encode_tag_key(5, &tags, 1_700_000_000_000_000_000, &mut key);
        assert_eq!(key.len(), 1 + 4 + 1 + 2 * 8 + 8);
        let back = k.decode_tag_key(&key).expect("decodes");
        assert_eq!(
            back,
            TagKey {
                metric: 5,
                tags: tags.to_vec(),
                time: 1_700_000_000_000_000_000
            }
        );
        // Every time of a series: one bucket, newest first.
        let mut later = Vec::new();
        k.encode_tag_key(5, &tags, 1_700_000_000_000_000_001, &mut later);
        assert_eq!(later[0], key[0]);
        assert!(later < key);
        assert_eq!(k.tag_series(&later), k.tag_series(&key));
        // A series with one more tag is not a key range of the shorter
        // one: the tag count tells them apart before the tags do.
        let mut shorter = Vec::new();
        k.encode_tag_key(5, &tags[..1], 0, &mut shorter);
        let short_series = k.tag_series(&shorter).expect("series");
        let long_series = k.tag_series(&key).expect("series");
        assert!(!long_series.starts_with(short_series));
        // Not an open-tag key: nothing decodes.
        assert_eq!(k.decode_tag_key(&key[..key.len() - 1]), None);
        assert_eq!(k.decode_tag_key(b""), None);
        let mut unsalted = Vec::new();
        open_tags(None).encode_tag_key(5, &[], 9, &mut unsalted);
        assert_eq!(
            open_tags(None)
                .decode_tag_key(&unsalted)
                .map(|t| (t.metric, t.tags.len(), t.time)),
            Some((5, 0, 9))
        );
    }

    #[test]
    fn open_tag_schemas_refuse_what_they_cannot_hold() {
        let mut k = open_tags(Some(4));
        k.fields.push(KeyField {
            name: "host".into(),
            encoding: FieldEncoding::String { width: 8 },
        });
        assert!(k.validate().is_err());
        let mut k = open_tags(Some(4));
        k.salt.as_mut().expect("salt").epochs.push(SaltEpoch {
            from: 10,
            buckets: 8,
        });
        assert!(k.validate().is_err());
        let mut k = open_tags(None);
        k.tags = Some(OpenTags {
            max_tags: 0,
            series_limit: 1,
        });
        assert!(k.validate().is_err());
        let mut k = open_tags(None);
        k.md5_prefix = 2;
        assert!(k.validate().is_err());
    }
}
