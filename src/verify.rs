//! `halite verify <data-dir>`: reads everything a data directory holds and
//! reports what is wrong, by file and offset, changing nothing — for a
//! stopped server, or after a crash before restarting one.
//!
//! - the catalog (`catalog/CATALOG`): checksum and document;
//! - every region directory: its manifest (checksum, format), every live
//!   store file it names (trailer, meta, index, bloom filter, every block's
//!   checksum and keys — see [`SstReader::check_all`]); regions of the
//!   catalog without a directory, and store files a manifest does not name;
//! - every WAL segment of every shard: each record's frame and checksum and
//!   edits, and how the segment ends — closed, a torn tail (what a crash
//!   leaves; recovery cuts it off), or damage in the middle of the log
//!   (what recovery refuses, see `docs/wal.md`).
//!
//! Findings are problems (data a read or a recovery would not accept) or
//! notes (leftovers and torn tails the next start tidies away).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::catalog::Catalog;
use crate::region::manifest::Manifest;
use crate::region::sst::cache::BlockCache;
use crate::region::sst::{SstError, SstReader};
use crate::region::wal::{SegmentEnd, check_segment};

/// One thing found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub path: PathBuf,
    pub offset: Option<u64>,
    pub what: String,
    /// A problem (true), or a note on something the next start tidies.
    pub problem: bool,
}

/// What a verification read and found.
#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub tables: usize,
    pub regions: usize,
    pub store_files: usize,
    pub cells: u64,
    pub wal_segments: usize,
    pub wal_records: u64,
    pub findings: Vec<Finding>,
}

impl Report {
    pub fn problems(&self) -> usize {
        self.findings.iter().filter(|f| f.problem).count()
    }

    fn problem(&mut self, path: &Path, offset: Option<u64>, what: impl Into<String>) {
        self.findings.push(Finding {
            path: path.to_path_buf(),
            offset,
            what: what.into(),
            problem: true,
        });
    }

    fn note(&mut self, path: &Path, offset: Option<u64>, what: impl Into<String>) {
        self.findings.push(Finding {
            path: path.to_path_buf(),
            offset,
            what: what.into(),
            problem: false,
        });
    }
}

fn region_dir_name(id: u64) -> String {
    format!("{id:010}")
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Bytes checked of the bytes to check (every store file and WAL
/// segment), told after each file: what a progress bar shows.
struct Progress<'a> {
    done: u64,
    total: u64,
    tell: &'a mut dyn FnMut(u64, u64),
}

impl Progress<'_> {
    fn checked(&mut self, path: &Path) {
        self.done += std::fs::metadata(path).map_or(0, |m| m.len());
        // A file that grew since it was counted moves the total along.
        self.total = self.total.max(self.done);
        (self.tell)(self.done, self.total);
    }
}

/// The bytes of every store file (`regions/*/*/*.sst`) and WAL segment
/// (`wal/*/*.log`) under `dir`.
fn bytes_to_check(dir: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut total = 0;
    for region in sorted_entries(&dir.join("regions")) {
        for family in sorted_entries(&region) {
            for f in sorted_entries(&family) {
                if f.extension().is_some_and(|e| e == "sst") {
                    total += size(&f);
                }
            }
        }
    }
    for shard in sorted_entries(&dir.join("wal")) {
        for f in sorted_entries(&shard) {
            if f.extension().is_some_and(|e| e == "log") {
                total += size(&f);
            }
        }
    }
    total
}

/// Verifies the data directory `dir`; `Err` when it is not one (no
/// catalog, no regions, no WAL: nothing to verify).
pub fn verify(dir: &Path) -> Result<Report, String> {
    verify_with_progress(dir, &mut |_, _| {})
}

/// [`verify`], telling `progress(done, total)` in bytes after each store
/// file and WAL segment; it ends with `done == total`.
pub fn verify_with_progress(
    dir: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report, String> {
    let catalog_dir = dir.join("catalog");
    let regions_dir = dir.join("regions");
    let wal_dir = dir.join("wal");
    if !catalog_dir.exists() && !regions_dir.exists() && !wal_dir.exists() {
        return Err(format!(
            "{} is not a halite data directory (no catalog/, regions/ or wal/ in it)",
            dir.display()
        ));
    }
    let mut report = Report::default();
    let mut progress = Progress {
        done: 0,
        total: bytes_to_check(dir),
        tell: progress,
    };
    (progress.tell)(0, progress.total);

    // The catalog: which regions should exist.
    let mut expected: BTreeSet<u64> = BTreeSet::new();
    let mut daughters: BTreeSet<u64> = BTreeSet::new();
    match Catalog::inspect(&catalog_dir) {
        Ok((tables, splits)) => {
            report.tables = tables.len();
            expected.extend(tables.iter().flat_map(|t| t.regions.iter().map(|r| r.id)));
            daughters.extend(splits.iter().flat_map(|s| s.daughters));
        }
        Err(e) => {
            let path = catalog_dir.join("CATALOG");
            let offset = match &e {
                crate::error::Error::CatalogCorrupt { offset, .. } => Some(*offset),
                _ => None,
            };
            report.problem(&path, offset, e.to_string());
        }
    }

    // Regions and their store files.
    let cache = BlockCache::new(1 << 20);
    let mut seen: BTreeSet<u64> = BTreeSet::new();
    for region in sorted_entries(&regions_dir) {
        if !region.is_dir() {
            continue;
        }
        let Some(id) = region
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u64>().ok())
        else {
            report.note(&region, None, "not a region directory");
            continue;
        };
        seen.insert(id);
        report.regions += 1;
        if !expected.is_empty() && !expected.contains(&id) {
            let why = if daughters.contains(&id) {
                "a daughter of a split that did not finish (undone at next start)"
            } else {
                "a region the catalog does not name (a leftover, removed at next start)"
            };
            report.note(&region, None, why);
            continue;
        }
        verify_region(&region, &cache, &mut report, &mut progress);
    }
    for id in expected.difference(&seen) {
        report.problem(
            &regions_dir.join(region_dir_name(*id)),
            None,
            "a region of the catalog has no directory",
        );
    }

    // WAL segments, shard by shard.
    for shard in sorted_entries(&wal_dir) {
        if shard.is_dir() {
            verify_wal(&shard, &mut report, &mut progress);
        }
    }
    // Files not checked (leftovers no manifest names) count as passed.
    progress.done = progress.total;
    (progress.tell)(progress.total, progress.total);
    Ok(report)
}

fn verify_region(
    region: &Path,
    cache: &Arc<BlockCache>,
    report: &mut Report,
    progress: &mut Progress,
) {
    let manifest = match Manifest::load(region) {
        Ok(m) => m,
        Err(e) => {
            let offset = match &e {
                crate::region::manifest::ManifestError::Corrupt { offset, .. } => Some(*offset),
                _ => None,
            };
            report.problem(&region.join("MANIFEST"), offset, e.to_string());
            return;
        }
    };
    let mut live: BTreeSet<PathBuf> = BTreeSet::new();
    if let Some(m) = &manifest {
        for (family, files) in &m.families {
            let fdir = region.join(String::from_utf8_lossy(family).as_ref());
            for &file_id in files {
                let path = fdir.join(crate::region::sst::file_name(file_id));
                live.insert(path.clone());
                if !path.exists() {
                    report.problem(
                        &path,
                        None,
                        "a live store file (named in the manifest) is missing",
                    );
                    continue;
                }
                report.store_files += 1;
                let checked = SstReader::open(&path, file_id, cache.clone(), false, false)
                    .and_then(|r| r.check_all());
                match checked {
                    Ok(cells) => report.cells += cells,
                    Err(SstError::Corrupt { offset, what, .. }) => {
                        report.problem(&path, Some(offset), what)
                    }
                    Err(e) => report.problem(&path, None, e.to_string()),
                }
                progress.checked(&path);
            }
        }
    }
    // Store files no manifest names: an interrupted flush or compaction.
    for fdir in sorted_entries(region) {
        if !fdir.is_dir() {
            continue;
        }
        for f in sorted_entries(&fdir) {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if (name.ends_with(".sst") || name.ends_with(".tmp")) && !live.contains(&f) {
                report.note(
                    &f,
                    None,
                    "a store file the manifest does not name (left by an interrupted \
                     flush or compaction; removed at next start)",
                );
            }
        }
    }
}

fn verify_wal(shard: &Path, report: &mut Report, progress: &mut Progress) {
    let mut segments: Vec<(u64, PathBuf)> = Vec::new();
    for f in sorted_entries(shard) {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(id) = name.strip_suffix(".log").and_then(|s| s.parse().ok()) {
            segments.push((id, f));
        } else if name.ends_with(".damaged") {
            report.note(
                &f,
                None,
                "a segment set aside by a stop_at_damage recovery (never read again)",
            );
        }
    }
    segments.sort();
    let n = segments.len();
    for (i, (id, path)) in segments.iter().enumerate() {
        report.wal_segments += 1;
        verify_segment(path, *id, i + 1 == n, report);
        progress.checked(path);
    }
}

fn verify_segment(path: &Path, id: u64, last: bool, report: &mut Report) {
    let buf = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            report.problem(path, None, format!("cannot read: {e}"));
            return;
        }
    };
    match check_segment(&buf, id, last) {
        Err((offset, what)) => report.problem(path, Some(offset), what),
        Ok(check) => {
            report.wal_records += check.records;
            match check.end {
                SegmentEnd::Closed(_) => {}
                SegmentEnd::TornTail(at) => report.note(
                    path,
                    Some(at),
                    "the live segment ends in a torn tail (what a crash leaves: nothing \
                     acknowledged; cut off at next start)",
                ),
                SegmentEnd::Damage { offset, what } => report.problem(
                    path,
                    Some(offset),
                    format!("{what} (damage in the middle of the log: see wal.recovery)"),
                ),
            }
        }
    }
}
