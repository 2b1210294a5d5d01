//! The seam for a compaction policy: which store files a minor compaction
//! merges. The rewrite itself (merge, resolve, write, swap the manifest) is
//! the same for every policy and stays in `compaction.rs`.

use std::ops::Range;
use std::sync::Arc;

use crate::region::sst::SstReader;

/// Chooses the files of one family that a minor compaction merges.
pub trait CompactionPicker {
    /// `files` are the family's live store files, oldest first. The answer
    /// is a contiguous run of them (so the output takes the run's place in
    /// the age order and "newer file wins" stays true for equal keys), or
    /// `None` when nothing is worth compacting yet.
    fn pick_minor(&self, files: &[Arc<SstReader>]) -> Option<Range<usize>>;
}
