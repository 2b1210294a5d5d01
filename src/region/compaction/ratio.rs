//! HBase's ratio rule: the oldest file that is at most `ratio` times the
//! size of the newer files of its run starts the run.

use std::ops::Range;
use std::sync::Arc;

use super::picker::CompactionPicker;
use crate::region::options::CompactionOptions;
use crate::region::sst::SstReader;

/// Minor compactions by HBase's ratio rule, with the family's
/// `region.compaction` settings.
pub struct RatioPicker {
    min_files: usize,
    max_files: usize,
    ratio: f64,
}

impl RatioPicker {
    pub fn new(options: &CompactionOptions) -> Self {
        RatioPicker {
            min_files: options.min_files,
            max_files: options.max_files,
            ratio: options.ratio,
        }
    }

    /// The run to merge, from the files' sizes, oldest first.
    pub fn pick_sizes(&self, sizes: &[u64]) -> Option<Range<usize>> {
        let n = sizes.len();
        if n < self.min_files.max(2) {
            return None;
        }
        for start in 0..n {
            let end = (start + self.max_files.max(2)).min(n);
            if end - start < self.min_files.max(2) {
                break;
            }
            let rest: u64 = sizes[start + 1..end].iter().sum();
            if sizes[start] as f64 <= self.ratio * rest as f64 {
                return Some(start..end);
            }
        }
        None
    }
}

impl CompactionPicker for RatioPicker {
    fn pick_minor(&self, files: &[Arc<SstReader>]) -> Option<Range<usize>> {
        let sizes: Vec<u64> = files.iter().map(|f| f.size()).collect();
        self.pick_sizes(&sizes)
    }
}
