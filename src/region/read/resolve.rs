//! Turns the merged entries of one column into the versions a reader sees.
//!
//! The rule, applied the same way by reads and by major compaction so that
//! compaction never changes an answer:
//!
//! 1. A put is masked by a family delete of its row and family at or after
//!    its timestamp, by a column delete at or after it, or by a version
//!    delete at exactly its timestamp (HBase's rule: a delete masks puts by
//!    timestamp, whenever they were written, until a major compaction
//!    removes the marker).
//! 2. The unmasked puts, newest first, are cut to the family's `VERSIONS`.
//! 3. Of those, expired cells (family TTL, or a shorter per-cell TTL) are
//!    hidden, except the newest `MIN_VERSIONS`, which are always kept.

use crate::cell::{CellKind, KeyRef};
use crate::codec::bytes_equal;
use crate::schema::FamilyDescriptor;

/// One entry of a column group, as merged. Its value lives in the group's
/// buffer ([`ColumnGroup::value`]).
#[derive(Debug, Clone)]
pub struct GroupEntry {
    pub timestamp: u64,
    pub kind: CellKind,
    pub ttl_ms: Option<u64>,
    value: std::ops::Range<usize>,
}

/// The versions of one column that survive, newest first, each with its
/// index in the group.
pub fn resolve_column(
    entries: &[GroupEntry],
    family_delete_ts: Option<u64>,
    family: &FamilyDescriptor,
    now_ms: u64,
    out: &mut Vec<usize>,
) {
    out.clear();
    // Most columns of time-series rows hold exactly one put.
    if let [only] = entries
        && only.kind == CellKind::Put
    {
        let masked = family_delete_ts.is_some_and(|m| only.timestamp <= m);
        let expired = family
            .expires_at(only.timestamp, only.ttl_ms)
            .is_some_and(|at| at <= now_ms);
        if !masked && (family.min_versions > 0 || !expired) {
            out.push(0);
        }
        return;
    }
    let column_delete_ts = entries
        .iter()
        .filter(|e| e.kind == CellKind::DeleteColumn)
        .map(|e| e.timestamp)
        .max();
    let masked_at = family_delete_ts.max(column_delete_ts);
    let mut kept = 0u32;
    let mut last_ts = None;
    for (i, e) in entries.iter().enumerate() {
        if e.kind != CellKind::Put || last_ts == Some(e.timestamp) {
            continue;
        }
        last_ts = Some(e.timestamp);
        if masked_at.is_some_and(|m| e.timestamp <= m) {
            continue;
        }
        let version_deleted = entries
            .iter()
            .any(|d| d.kind == CellKind::DeleteVersion && d.timestamp == e.timestamp);
        if version_deleted {
            continue;
        }
        if kept >= family.versions {
            break;
        }
        let expired = family
            .expires_at(e.timestamp, e.ttl_ms)
            .is_some_and(|at| at <= now_ms);
        if kept < family.min_versions || !expired {
            out.push(i);
        }
        kept += 1;
    }
}

/// Accumulates one column at a time from a stream of entries in key order.
/// Values are copied into one reused buffer: no allocation per entry.
#[derive(Debug, Default)]
pub struct ColumnGroup {
    pub family: Vec<u8>,
    pub qualifier: Vec<u8>,
    pub entries: Vec<GroupEntry>,
    values: Vec<u8>,
    /// Whether the scan wants this column (decided once, at `start`).
    pub wanted: bool,
}

impl ColumnGroup {
    pub fn push(&mut self, timestamp: u64, kind: CellKind, ttl_ms: Option<u64>, value: &[u8]) {
        let start = self.values.len();
        self.values.extend_from_slice(value);
        self.entries.push(GroupEntry {
            timestamp,
            kind,
            ttl_ms,
            value: start..self.values.len(),
        });
    }

    pub fn value(&self, e: &GroupEntry) -> &[u8] {
        &self.values[e.value.clone()]
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.values.clear();
    }

    pub fn matches(&self, key: &KeyRef<'_>) -> bool {
        !self.entries.is_empty() && self.is_column(key)
    }

    /// Whether `key` is of the column the group was started for.
    pub fn is_column(&self, key: &KeyRef<'_>) -> bool {
        bytes_equal(&self.family, key.family) && bytes_equal(&self.qualifier, key.qualifier)
    }

    pub fn start(&mut self, key: &KeyRef<'_>, wanted: bool) {
        if !bytes_equal(&self.family, key.family) {
            self.family.clear();
            self.family.extend_from_slice(key.family);
        }
        self.qualifier.clear();
        self.qualifier.extend_from_slice(key.qualifier);
        self.wanted = wanted;
        self.clear();
    }
}
