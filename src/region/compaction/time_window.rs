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
    fn pick_filling(&self, files: &[Arc<SstReader>]) -> Option<Range<usize>> {
        self.tiers.pick_minor(files).or_else(|| {
            (files.len() > self.max_files)
                .then(|| self.ratio.pick_minor(files))
                .flatten()
        })
    }

    /// The window of a file: that of its newest cell.
    pub fn window_of_file(&self, f: &SstReader) -> u64 {
        f.meta().max_ts / self.window_ms
    }
}

impl CompactionPicker for TimeWindowPicker {
    fn pick_minor(&self, files: &[Arc<SstReader>]) -> Option<Range<usize>> {
        let windows: Vec<u64> = files.iter().map(|f| self.window_of_file(f)).collect();
        // Windows still filling: the newest data's, or the clock's when a
        // point from the future would make that one later (which would
        // otherwise leave today's window "closed" and merged every flush).
        let open_from = (*windows.iter().max()?).min(self.now_ms / self.window_ms);
        // Runs of adjacent files of one window, oldest first: a merge stays
        // within a run, so the output keeps the run's place in the age
        // order ("newer file wins" for equal keys).
        let mut start = 0;
        while start < files.len() {
            let mut end = start + 1;
            while end < files.len() && windows[end] == windows[start] {
                end += 1;
            }
            let run = if windows[start] >= open_from {
                self.pick_filling(&files[start..end])
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
}
