//! Time-window compaction (HBase's date-tiered compaction, Cassandra's
//! and GreptimeDB's TWCS): a file belongs to the window of its newest
//! cell. The newest window (and any later, a point from the future's)
//! compacts by size tiers (`tier_files` of about one size at once) while
//! points still arrive in it, as Cassandra's TWCS does (the ratio rule
//! only once it holds more than `max_files` files no tier takes); a run
//! of files of an older window merges once into one file, and a window of
//! one file is never rewritten again. `rewrite` splits every output at
//! window boundaries (`window_of_cell`), so a late point leaves the newer
//! files it arrived with for a file of its own window, and whole windows
//! expire by TTL without a rewrite.

use std::ops::Range;
use std::sync::Arc;

use super::picker::CompactionPicker;
use super::ratio::RatioPicker;
use super::tiered::TieredPicker;
use crate::region::options::CompactionOptions;
use crate::region::sst::SstReader;

pub struct TimeWindowPicker {
    window_ms: u64,
    max_files: usize,
    tiers: TieredPicker,
    ratio: RatioPicker,
    now_ms: u64,
}

impl TimeWindowPicker {
    pub fn new(window_ms: u64, options: &CompactionOptions, now_ms: u64) -> Self {
        TimeWindowPicker {
            window_ms: window_ms.max(1),
            max_files: options.max_files.max(2),
            tiers: TieredPicker::new(options.tier_files, options.max_files),
            ratio: RatioPicker::new(options),
            now_ms,
        }
    }

    /// A run of the window still filling: tiers, or the ratio rule when
    /// sizes no tier takes have piled up past `max_files`.
    fn pick_filling(&self, sizes: &[u64]) -> Option<Range<usize>> {
        self.tiers.pick_sizes(sizes).or_else(|| {
            (sizes.len() > self.max_files)
                .then(|| self.ratio.pick_sizes(sizes))
                .flatten()
        })
    }

    /// The run to merge, from each file's window and size, oldest first.
    pub fn pick_windows(&self, windows: &[u64], sizes: &[u64]) -> Option<Range<usize>> {
        // Windows still filling: the newest data's, or the clock's when a
        // point from the future would make that one later (which would
        // otherwise leave today's window "closed" and merged every flush).
        let open_from = (*windows.iter().max()?).min(self.now_ms / self.window_ms);
        // Runs of adjacent files of one window, oldest first: a merge stays
        // within a run, so the output keeps the run's place in the age
        // order ("newer file wins" for equal keys).
        let mut start = 0;
        while start < windows.len() {
            let mut end = start + 1;
            while end < windows.len() && windows[end] == windows[start] {
                end += 1;
            }
            let run = if windows[start] >= open_from {
                self.pick_filling(&sizes[start..end])
                    .map(|r| start + r.start..start + r.end)
            } else if end - start >= 2 {
                Some(start..end.min(start + self.max_files))
            } else {
                None
            };
            if run.is_some() {
                return run;
            }
            start = end;
        }
        None
    }

    /// The window of a file: that of its newest cell.
    pub fn window_of_file(&self, f: &SstReader) -> u64 {
        f.meta().max_ts / self.window_ms
    }
}

impl CompactionPicker for TimeWindowPicker {
    fn pick_minor(&self, files: &[Arc<SstReader>]) -> Option<Range<usize>> {
        let windows: Vec<u64> = files.iter().map(|f| self.window_of_file(f)).collect();
        let sizes: Vec<u64> = files.iter().map(|f| f.size()).collect();
        self.pick_windows(&windows, &sizes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3_600_000;

    fn picker(tier_files: usize, max_files: usize, now_window: u64) -> TimeWindowPicker {
        let options = CompactionOptions {
            tier_files,
            max_files,
            ..Default::default()
        };
        TimeWindowPicker::new(HOUR, &options, now_window * HOUR)
    }

    #[test]
    fn a_closed_window_merges_once_and_a_single_file_window_stays() {
        let p = picker(4, 10, 5);
        // Window 3 is closed and holds two files: they merge, whatever
        // their sizes; window 4's lone file waits for its tier.
        assert_eq!(p.pick_windows(&[3, 3, 4], &[1000, 1, 50]), Some(0..2));
        // Closed windows of one file each are never picked again.
        assert_eq!(p.pick_windows(&[1, 2, 3, 4], &[100; 4]), None);
        // A point from the future does not close today's window.
        assert_eq!(p.pick_windows(&[5, 5, 9], &[100, 100, 1]), None);
    }

    #[test]
    fn the_filling_window_falls_back_to_the_ratio_rule_past_max_files() {
        let p = picker(4, 6, 5);
        // Sizes that alternate between 100 and 250 make no tier (no two
        // adjacent files within twice each other): up to max_files they
        // wait.
        let alternating: Vec<u64> = (0..7).map(|i| if i % 2 == 0 { 100 } else { 250 }).collect();
        assert_eq!(p.pick_windows(&[5; 6], &alternating[..6]), None);
        // One more file than max_files: the ratio rule takes them, at most
        // max_files at once.
        assert_eq!(p.pick_windows(&[5; 7], &alternating), Some(0..6));
        let ratio = RatioPicker::new(&CompactionOptions {
            max_files: 6,
            ..Default::default()
        });
        assert_eq!(ratio.pick_sizes(&alternating), Some(0..6));
        // Where a tier exists, it goes first, even past max_files.
        let mut tiered = vec![4000, 2000, 1000];
        tiered.extend([100; 5]);
        assert_eq!(p.pick_windows(&[5; 8], &tiered), Some(3..8));
    }
}
