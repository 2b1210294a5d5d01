//! Why points of a write were refused, as types: each door answers the
//! kinds differently (InfluxDB's `unable to parse` and its partial write
//! of dropped points, a retry-later for the series limit, a dead letter
//! on Kafka), and tells them apart by kind, not by the words.
//!
//! A write of millions of bad lines is counted whole but keeps only the
//! first [`KEPT`] reasons of each kind: every door lists at most a hundred,
//! and a 25 KB gzipped body of 12.5M bad lines once held gigabytes of
//! reasons no answer showed.

/// What a refused point ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The point cannot be read, or is not one this table takes (a bad
    /// time, a value too long, no fields, a tag the key lacks …).
    Invalid,
    /// The point is well formed but conflicts with what the table holds
    /// or reserves: a field's type, a field or tag named `time`. InfluxDB
    /// drops such points and says how many (`dropped=N`).
    Conflict,
    /// A point of a new series at the table's series limit.
    SeriesLimit,
    /// A point older than its retention policy keeps points (InfluxDB
    /// drops it: `points beyond retention policy`).
    BeyondRetention,
}

const KINDS: usize = 4;

impl RefusalKind {
    fn index(self) -> usize {
        match self {
            RefusalKind::Invalid => 0,
            RefusalKind::Conflict => 1,
            RefusalKind::SeriesLimit => 2,
            RefusalKind::BeyondRetention => 3,
        }
    }
}

/// InfluxDB's reason for points older than their retention policy keeps.
pub const BEYOND_RETENTION: &str = "points beyond retention policy";

/// One point refused: its kind and the reason a user reads.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason}")]
pub struct PointRefusal {
    pub kind: RefusalKind,
    pub reason: String,
}

impl PointRefusal {
    pub fn conflict(reason: impl Into<String>) -> Self {
        PointRefusal {
            kind: RefusalKind::Conflict,
            reason: reason.into(),
        }
    }

    pub fn beyond_retention() -> Self {
        PointRefusal {
            kind: RefusalKind::BeyondRetention,
            reason: BEYOND_RETENTION.into(),
        }
    }

    pub fn series_limit(reason: impl Into<String>) -> Self {
        PointRefusal {
            kind: RefusalKind::SeriesLimit,
            reason: reason.into(),
        }
    }
}

/// Most checks refuse a point as [`RefusalKind::Invalid`].
impl From<String> for PointRefusal {
    fn from(reason: String) -> Self {
        PointRefusal {
            kind: RefusalKind::Invalid,
            reason,
        }
    }
}

impl From<&str> for PointRefusal {
    fn from(reason: &str) -> Self {
        reason.to_string().into()
    }
}

/// Reasons kept of each kind; more are counted only.
pub const KEPT: usize = 100;

/// The refused points of one write, each by its number in the body (line,
/// point or series, from 1): all counted, the first [`KEPT`] of each kind
/// kept.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Refusals {
    kept: Vec<(usize, PointRefusal)>,
    counts: [usize; KINDS],
}

impl Refusals {
    pub fn push(&mut self, number: usize, refusal: PointRefusal) {
        let count = &mut self.counts[refusal.kind.index()];
        *count += 1;
        if *count <= KEPT {
            self.kept.push((number, refusal));
        }
    }

    /// Adds `other`'s, their numbers moved on by `base` (a later piece of
    /// one body).
    pub fn append(&mut self, other: Refusals, base: usize) {
        for (number, refusal) in other.kept {
            self.push(number + base, refusal);
        }
        for (kind, extra) in self.counts.iter_mut().zip(other.counts) {
            // What `other` counted beyond its kept ones.
            *kind += extra.saturating_sub(KEPT.min(extra));
        }
    }

    /// Every refused point.
    pub fn len(&self) -> usize {
        self.counts.iter().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn count(&self, kind: RefusalKind) -> usize {
        self.counts[kind.index()]
    }

    /// The kept refusals of `kind`, in the order they were met.
    pub fn of_kind(&self, kind: RefusalKind) -> impl Iterator<Item = &(usize, PointRefusal)> {
        self.kept.iter().filter(move |(_, r)| r.kind == kind)
    }

    /// The first `n` refused points by number, whatever their kind (each
    /// of them is among its kind's first, so kept).
    pub fn first(&self, n: usize) -> Vec<&(usize, PointRefusal)> {
        let mut all: Vec<&(usize, PointRefusal)> = self.kept.iter().collect();
        all.sort_by_key(|(number, _)| *number);
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_refusals_are_counted_and_the_first_of_each_kind_kept() {
        let mut all = Refusals::default();
        for i in 1..=1000 {
            all.push(i, format!("bad {i}").into());
        }
        all.push(1001, PointRefusal::conflict("type"));
        assert_eq!(all.len(), 1001);
        assert_eq!(all.count(RefusalKind::Invalid), 1000);
        assert_eq!(all.of_kind(RefusalKind::Invalid).count(), KEPT);
        assert_eq!(all.of_kind(RefusalKind::Conflict).count(), 1);
        let first = all.first(3);
        assert_eq!(first[0].0, 1);
        assert_eq!(first[2].1.reason, "bad 3");

        let mut whole = Refusals::default();
        whole.push(1, PointRefusal::series_limit("full"));
        whole.append(all, 10);
        assert_eq!(whole.len(), 1002);
        assert_eq!(whole.count(RefusalKind::Invalid), 1000);
        assert_eq!(whole.first(2)[1].0, 11);
        assert_eq!(whole.of_kind(RefusalKind::Invalid).count(), KEPT);
    }
}
