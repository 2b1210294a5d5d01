//! Size tiers (Cassandra's size-tiered rule, which its TWCS runs in the
//! window still filling): a run of adjacent files of about one size merges
//! into one file of the next tier. Each byte is rewritten once a tier,
//! about log_T(flushes) times, where the ratio rule folds the largest file
//! into a merge again every few flushes once the newer files add up to it.

use std::ops::Range;
use std::sync::Arc;

use super::picker::CompactionPicker;
use crate::region::sst::SstReader;

/// Merges the oldest run of `tier_files` or more adjacent files each
/// within a factor two of the run's first, at most `max_files` of them
/// (`region.compaction`'s settings).
pub struct TieredPicker {
    tier_files: usize,
    max_files: usize,
}

impl TieredPicker {
    pub fn new(tier_files: usize, max_files: usize) -> Self {
        let tier_files = tier_files.max(2);
        TieredPicker {
            tier_files,
            max_files: max_files.max(tier_files),
        }
    }

    /// The run to merge, from the files' sizes, oldest first.
    pub fn pick_sizes(&self, sizes: &[u64]) -> Option<Range<usize>> {
        let similar = |a: u64, b: u64| a <= b.saturating_mul(2) && b <= a.saturating_mul(2);
        let mut start = 0;
        while start < sizes.len() {
            let mut end = start + 1;
            while end < sizes.len() && similar(sizes[end], sizes[start]) {
                end += 1;
            }
            if end - start >= self.tier_files {
                return Some(start..end.min(start + self.max_files));
            }
            start = end;
        }
        None
    }
}

impl CompactionPicker for TieredPicker {
    fn pick_minor(&self, files: &[Arc<SstReader>]) -> Option<Range<usize>> {
        let sizes: Vec<u64> = files.iter().map(|f| f.size()).collect();
        self.pick_sizes(&sizes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tier_of_similar_files_merges_and_a_larger_file_is_left_out() {
        let p = TieredPicker::new(4, 10);
        assert_eq!(p.pick_sizes(&[100, 110, 90]), None);
        assert_eq!(p.pick_sizes(&[100, 110, 90, 120]), Some(0..4));
        // The merged file of the tier before stays out of this one.
        assert_eq!(p.pick_sizes(&[400, 100, 110, 90, 120]), Some(1..5));
        // Tiers of tiers: four files of the first tier's size merge too.
        assert_eq!(p.pick_sizes(&[400, 420, 390, 410, 100]), Some(0..4));
        // Sizes off by more than twice from the run's first break it.
        assert_eq!(p.pick_sizes(&[100, 210, 100, 100, 100]), None);
        assert_eq!(p.pick_sizes(&[100, 210, 100, 100, 100, 100]), Some(2..6));
        // At most max_files at once.
        assert_eq!(TieredPicker::new(4, 5).pick_sizes(&[1; 12]), Some(0..5));
        assert_eq!(
            TieredPicker::new(3, 10).pick_sizes(&[100, 110, 90]),
            Some(0..3)
        );
    }

    /// Write amplification of the two rules over one window's flushes of
    /// equal size (flush + compactions, then one merge as the window
    /// closes), the figures the choice of tiers rests on.
    #[test]
    fn tiers_rewrite_less_than_the_ratio_rule_in_a_filling_window() {
        fn amplification(pick: impl Fn(&[u64]) -> Option<Range<usize>>, flushes: usize) -> f64 {
            let mut files: Vec<u64> = Vec::new();
            let mut written = 0;
            for flushed in std::iter::repeat_n(100, flushes) {
                files.push(flushed);
                written += flushed;
                while let Some(r) = pick(&files) {
                    let merged: u64 = files[r.clone()].iter().sum();
                    written += merged;
                    files.splice(r, [merged]);
                }
            }
            if files.len() > 1 {
                written += files.iter().sum::<u64>();
            }
            written as f64 / (100 * flushes) as f64
        }
        let tiered = TieredPicker::new(4, 10);
        let ratio = super::super::ratio::RatioPicker::new(&Default::default());
        for flushes in [8, 26, 60] {
            let t = amplification(|s| tiered.pick_sizes(s), flushes);
            let r = amplification(|s| ratio.pick_sizes(s), flushes);
            assert!(t < r, "{flushes} flushes: tiers {t:.2}, ratio {r:.2}");
        }
    }
}
