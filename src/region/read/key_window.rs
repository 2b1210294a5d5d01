//! A time window on a timestamp inside the row key. A scan given one reads
//! only the rows whose key time falls in it, and moves past the rest of a
//! series with a seek instead of reading it row by row: "one host, one
//! hour" on a key of metric, host, dc, time reads the hour of each of the
//! host's series, not their whole history.

use crate::codec::prefix_successor;

/// Rows whose key holds, at byte `at`, a big-endian timestamp in
/// `[start, end)`. The key bytes before `at` name the row's series (every
/// key field before the time is fixed-width), so a row outside the window
/// tells the scan where that series' window is, as an HBase filter's seek
/// hint does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyTimeWindow {
    /// Offset of the timestamp in the whole row key (salt included).
    pub at: usize,
    /// The key holds `u64::MAX - t`: newest first.
    pub reversed: bool,
    pub start: u64,
    pub end: u64,
}

/// Where a row stands against its series' window, in key order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    Inside,
    /// Sorts before the window: the series' window is ahead.
    Before,
    /// Sorts after the window: the series has nothing more in it.
    After,
    /// Too short to hold a time: never in the window.
    Unreadable,
}

impl KeyTimeWindow {
    /// The time a row key holds, if it is long enough.
    pub fn time_of(&self, row: &[u8]) -> Option<u64> {
        let raw = u64::from_be_bytes(row.get(self.at..self.at + 8)?.try_into().ok()?);
        Some(if self.reversed { u64::MAX - raw } else { raw })
    }

    /// Whether time `t` is in the window. An end of u64::MAX is no end, as
    /// in `rows_of`.
    pub fn holds(&self, t: u64) -> bool {
        t >= self.start && (self.end == u64::MAX || t < self.end)
    }

    pub(crate) fn place(&self, row: &[u8]) -> Placement {
        let Some(t) = self.time_of(row) else {
            return Placement::Unreadable;
        };
        if self.holds(t) {
            Placement::Inside
        } else if (t < self.start) != self.reversed {
            // Oldest first, early rows come before the window; newest
            // first, late ones do.
            Placement::Before
        } else {
            Placement::After
        }
    }

    /// The row range `[lo, hi)` holding `series`' rows in the window
    /// (`series` is a key's bytes before `at`); `hi = None` for the end of
    /// the key space.
    pub fn rows_of(&self, series: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
        let with = |ts: u64| [series, &ts.to_be_bytes()].concat();
        let (start, end) = (self.start, self.end);
        if !self.reversed {
            return (
                with(start),
                if end == u64::MAX {
                    prefix_successor(series)
                } else {
                    Some(with(end))
                },
            );
        }
        // t in [start, end) <=> MAX - t in (MAX - end, MAX - start].
        (
            if end == u64::MAX {
                series.to_vec()
            } else {
                with(u64::MAX - (end - 1))
            },
            if start == 0 {
                prefix_successor(series)
            } else {
                Some(with(u64::MAX - start + 1))
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(series: &[u8], t: u64, reversed: bool) -> Vec<u8> {
        let stored = if reversed { u64::MAX - t } else { t };
        [series, &stored.to_be_bytes(), b"tail"].concat()
    }

    #[test]
    fn a_row_is_placed_by_its_time_and_the_window_bounds_its_rows() {
        for reversed in [false, true] {
            let w = KeyTimeWindow {
                at: 3,
                reversed,
                start: 100,
                end: 200,
            };
            let (lo, hi) = w.rows_of(b"abc");
            let hi = hi.expect("bounded");
            for t in [0, 99, 100, 150, 199, 200, 5_000, u64::MAX] {
                let k = key(b"abc", t, reversed);
                let place = w.place(&k);
                let inside = (100..200).contains(&t);
                assert_eq!(place == Placement::Inside, inside, "t={t}");
                assert_eq!(inside, k >= lo && k < hi, "t={t} reversed={reversed}");
                if place == Placement::Before {
                    assert!(k < lo, "t={t} reversed={reversed}");
                }
                if place == Placement::After {
                    assert!(k >= hi, "t={t} reversed={reversed}");
                }
            }
            assert_eq!(w.place(b"abc1234"), Placement::Unreadable);
        }
    }
}
