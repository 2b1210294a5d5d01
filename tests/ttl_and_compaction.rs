//! TTL hides expired cells at once; compaction removes them from disk, drops
//! a file of only expired cells whole, and merges small files.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Harness, foreground_options, small_wal};
use halite::cell::RowMutation;
use halite::clock::Clock;
use halite::fault::{self, Fault, Site};
use halite::region::RegionOptions;
use halite::region::read::{Get, Scan};
use halite::region::sst::SstReader;
use halite::region::wal::io::IoBackendChoice;
use halite::schema::{Durability, FamilyDescriptor};

#[test]
fn a_file_of_only_expired_cells_is_dropped_whole() {
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf").ttl_secs(60)],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    let now = h.clock.now_ms();
    let old: Vec<RowMutation> = (0..100)
        .map(|i| RowMutation::new(format!("old{i:03}")).put("cf", "q", now - 30_000, "x"))
        .collect();
    write_and_flush(&h, &old);
    let fresh: Vec<RowMutation> = (0..100)
        .map(|i| RowMutation::new(format!("new{i:03}")).put("cf", "q", now + 50_000, "y"))
        .collect();
    write_and_flush(&h, &fresh);
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 200);
    h.clock.advance(40_000);
    // Hidden at once, before any compaction.
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 100);
    let paths = h.region().file_paths();
    h.region().compact(false).expect("compact");
    assert_eq!(
        h.region()
            .stats()
            .expired_files_dropped
            .load(Ordering::Relaxed),
        1
    );
    assert_eq!(h.region().file_paths().len(), 1);
    assert!(!paths[0].exists(), "the expired file is still on disk");
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 100);
}

#[test]
fn major_compaction_removes_deleted_surplus_and_expired_cells_from_disk() {
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf").versions(2).ttl_secs(100)],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    let now = h.clock.now_ms();
    let mut muts = Vec::new();
    for i in 0..200u64 {
        let mut m = RowMutation::new(format!("r{i:04}"));
        for v in 0..5u64 {
            m = m.put("cf", "q", now - 1000 * v, vec![v as u8; 100]);
        }
        muts.push(m);
    }
    write_and_flush(&h, &muts);
    let deletes: Vec<RowMutation> = (0..100u64)
        .map(|i| RowMutation::new(format!("r{i:04}")).delete_row(None))
        .collect();
    write_and_flush(&h, &deletes);
    let before = h.region().store_bytes();
    h.region().compact(true).expect("major");
    let after = h.region().store_bytes();
    // 5 versions → 2 kept, half the rows deleted: about a fifth remains.
    assert!(after * 3 < before, "{before} → {after} bytes");
    assert_eq!(h.region().file_paths().len(), 1);
    let rows = h
        .region()
        .scan(&Scan {
            max_versions: 10,
            ..Scan::new()
        })
        .expect("scan")
        .rows;
    assert_eq!(rows.len(), 100);
    assert!(rows.iter().all(|r| r.cells.len() == 2));
    // Past the TTL everything goes, file and all.
    h.clock.advance(200_000);
    assert!(h.region().get(&Get::new("r0150")).expect("get").is_none());
    h.region().compact(true).expect("major");
    assert!(h.region().file_paths().is_empty());
}

#[test]
fn min_versions_keeps_the_newest_even_when_expired() {
    let h = Harness::new(
        vec![
            FamilyDescriptor::new("cf")
                .versions(3)
                .min_versions(1)
                .ttl_secs(10),
        ],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    let now = h.clock.now_ms();
    h.region()
        .mutate(
            &[RowMutation::new("r")
                .put("cf", "q", now - 2, "old")
                .put("cf", "q", now - 1, "new")],
            Durability::SyncWal,
        )
        .expect("write");
    h.clock.advance(60_000);
    h.region().flush().expect("flush");
    h.region().compact(true).expect("major");
    let row = h
        .region()
        .get(&Get {
            max_versions: 3,
            ..Get::new("r")
        })
        .expect("get")
        .expect("kept by MIN_VERSIONS");
    assert_eq!(row.cells.len(), 1);
    assert_eq!(row.cells[0].value.as_ref(), b"new");
}

#[test]
fn minor_compaction_merges_small_files() {
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf")],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    for f in 0..6u32 {
        let rows: Vec<RowMutation> = (0..50u32)
            .map(|i| {
                RowMutation::new(format!("r{:05}", i * 6 + f)).put("cf", "q", 1, vec![f as u8; 50])
            })
            .collect();
        h.region()
            .mutate(&rows, Durability::SyncWal)
            .expect("write");
        h.region().flush().expect("flush");
    }
    assert_eq!(h.region().file_paths().len(), 6);
    h.region().compact(false).expect("minor");
    assert!(h.region().file_paths().len() < 6);
    assert_eq!(h.region().stats().compactions.load(Ordering::Relaxed), 1);
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 300);
}

/// Compacts (minor) until nothing more is picked.
fn compact_until_settled(h: &Harness) {
    for _ in 0..50 {
        let before = h.region().stats().compactions.load(Ordering::Relaxed);
        h.region().compact(false).expect("minor");
        if h.region().stats().compactions.load(Ordering::Relaxed) == before {
            return;
        }
    }
    panic!("minor compactions never settled");
}

/// Every row and cell the region answers, as (row, ts, value).
fn everything(h: &Harness) -> Vec<(Vec<u8>, u64, Vec<u8>)> {
    let mut out = Vec::new();
    for row in h.region().scan(&Scan::new()).expect("scan").rows {
        for c in row.cells {
            out.push((row.key.to_vec(), c.timestamp, c.value.to_vec()));
        }
    }
    out
}

/// TIME_WINDOW compaction: files end up each within one window; an older
/// window's files merge once into one, which is then left alone; a late
/// point that arrived with the newest window's points is moved into a
/// file of its own window; a major compaction keeps one file per window;
/// and every answer stays the same throughout.
#[test]
fn time_window_compaction_keeps_each_window_in_its_own_files() {
    const HOUR: u64 = 3_600_000;
    // An hour's three flushes of one size make a tier, merged while the
    // hour still fills.
    let mut options = foreground_options();
    options.compaction.tier_files = 3;
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf").time_window(3_600)],
        options,
        small_wal(IoBackendChoice::Auto),
    );
    let base = (h.clock.now_ms() / HOUR - 10) * HOUR;
    let write = |hour: u64, batch: u64, late_hour: Option<u64>| {
        let mut rows: Vec<RowMutation> = (0..40u64)
            .map(|s| {
                let ts = base + hour * HOUR + batch * 60_000 + s;
                RowMutation::new(format!("s{s:03}-{ts}")).put(
                    "cf",
                    "v",
                    ts,
                    format!("{hour}.{batch}"),
                )
            })
            .collect();
        if let Some(late) = late_hour {
            let ts = base + late * HOUR + 30 * 60_000;
            rows.push(RowMutation::new(format!("s000-{ts}")).put("cf", "v", ts, "late"));
        }
        h.region()
            .mutate(&rows, Durability::SyncWal)
            .expect("write");
        h.region().flush().expect("flush");
    };
    let window_of = |ts: u64| (ts - base) / HOUR;
    // Hours 0, 1 and 2, three flushes each, compacting as a server would.
    for hour in 0..3 {
        for batch in 0..3 {
            write(hour, batch, None);
            compact_until_settled(&h);
        }
    }
    let ranges = h.region().file_time_ranges(b"cf");
    let windows: Vec<(u64, u64)> = ranges
        .iter()
        .map(|(a, b)| (window_of(*a), window_of(*b)))
        .collect();
    // Hours 0 and 1 closed: one file each. Hour 2 is the newest window:
    // its files merge as tiers fill.
    assert_eq!(&windows[..2], &[(0, 0), (1, 1)], "{windows:?}");
    assert!(windows[2..].iter().all(|w| *w == (2, 2)), "{windows:?}");
    let closed = h.region().file_paths()[..2].to_vec();
    // Hour 3 arrives with a point of hour 1 among it.
    write(3, 0, Some(1));
    write(3, 1, None);
    write(3, 2, None);
    let before_compacting = everything(&h);
    compact_until_settled(&h);
    let ranges = h.region().file_time_ranges(b"cf");
    for (lo, hi) in &ranges {
        assert_eq!(
            window_of(*lo),
            window_of(*hi),
            "a file spans windows: {ranges:?}"
        );
    }
    let windows: Vec<u64> = ranges.iter().map(|(lo, _)| window_of(*lo)).collect();
    // Hour 2 (no longer the newest) merged into one file; the late point
    // sits in an hour-1 file of its own, next to where it arrived.
    assert_eq!(
        windows.iter().filter(|w| **w == 2).count(),
        1,
        "{windows:?}"
    );
    assert_eq!(
        windows.iter().filter(|w| **w == 1).count(),
        2,
        "{windows:?}"
    );
    assert_eq!(
        windows.iter().filter(|w| **w == 0).count(),
        1,
        "{windows:?}"
    );
    // The closed windows' files were not rewritten.
    for p in &closed {
        assert!(p.exists(), "{} was rewritten", p.display());
    }
    assert_eq!(everything(&h), before_compacting);
    // A major compaction: one file per window, the same answers.
    h.region().compact(true).expect("major");
    let ranges = h.region().file_time_ranges(b"cf");
    let windows: Vec<(u64, u64)> = ranges
        .iter()
        .map(|(a, b)| (window_of(*a), window_of(*b)))
        .collect();
    assert_eq!(windows, vec![(0, 0), (1, 1), (2, 2), (3, 3)]);
    assert_eq!(everything(&h), before_compacting);
    let late: Vec<_> = before_compacting
        .iter()
        .filter(|c| c.2 == b"late")
        .collect();
    assert_eq!(late.len(), 1);
}

/// A RATIO family compacts across windows: the same writes end in files
/// that span hours (what the TIME_WINDOW test above rules out).
#[test]
fn ratio_compaction_mixes_windows() {
    const HOUR: u64 = 3_600_000;
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf")],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    let base = (h.clock.now_ms() / HOUR - 10) * HOUR;
    for hour in 0..3u64 {
        for batch in 0..3u64 {
            let rows: Vec<RowMutation> = (0..40u64)
                .map(|s| {
                    let ts = base + hour * HOUR + batch * 60_000 + s;
                    RowMutation::new(format!("s{s:03}-{ts}")).put("cf", "v", ts, "x")
                })
                .collect();
            h.region()
                .mutate(&rows, Durability::SyncWal)
                .expect("write");
            h.region().flush().expect("flush");
            compact_until_settled(&h);
        }
    }
    let ranges = h.region().file_time_ranges(b"cf");
    assert!(
        ranges.iter().any(|(lo, hi)| lo / HOUR != hi / HOUR),
        "{ranges:?}"
    );
}

/// A point stamped far in the future does not make today's window count
/// as closed: today's files still wait for the ratio rule rather than
/// being merged again on every flush.
#[test]
fn a_future_point_leaves_the_current_window_open() {
    const HOUR: u64 = 3_600_000;
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf").time_window(3_600)],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    let now = h.clock.now_ms();
    let future = now + 100 * 365 * 24 * HOUR;
    h.region()
        .mutate(
            &[RowMutation::new("future").put("cf", "v", future, "x")],
            Durability::SyncWal,
        )
        .expect("write");
    h.region().flush().expect("flush");
    for batch in 0..2u64 {
        let rows: Vec<RowMutation> = (0..40u64)
            .map(|s| RowMutation::new(format!("s{s:03}-{batch}")).put("cf", "v", now + s, "y"))
            .collect();
        h.region()
            .mutate(&rows, Durability::SyncWal)
            .expect("write");
        h.region().flush().expect("flush");
        compact_until_settled(&h);
    }
    // Two small files of the current hour: under the ratio rule's three.
    assert_eq!(h.region().stats().compactions.load(Ordering::Relaxed), 0);
    assert_eq!(h.region().file_time_ranges(b"cf").len(), 3);
}

/// Writes `rows` (puts or deletes) and flushes them into a store file.
fn write_and_flush(h: &Harness, rows: &[RowMutation]) {
    h.region().mutate(rows, Durability::SyncWal).expect("write");
    h.region().flush().expect("flush");
}

/// The delete markers held by the region's store files, read from each
/// file's metadata.
fn delete_markers_on_disk(h: &Harness) -> u64 {
    h.region()
        .file_paths()
        .iter()
        .map(|p| {
            SstReader::open(p, 0, h.cache.clone(), false, false)
                .expect("open store file")
                .meta()
                .delete_markers
        })
        .sum()
}

/// Options whose periodic major compaction is due a minute (times the
/// region's jitter, at most 1.5) after a family's oldest file was written.
fn major_every_minute() -> RegionOptions {
    let mut options = foreground_options();
    options.compaction.major_interval = Duration::from_secs(60);
    options
}

/// A region due a major compaction a minute after its oldest file: 100
/// rows in one file, and the delete markers of ten of them in a second.
fn rows_then_deletes() -> (Harness, u64) {
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf")],
        major_every_minute(),
        small_wal(IoBackendChoice::Auto),
    );
    let now = h.clock.now_ms();
    let rows: Vec<RowMutation> = (0..100u64)
        .map(|i| RowMutation::new(format!("r{i:04}")).put("cf", "q", now, "x"))
        .collect();
    write_and_flush(&h, &rows);
    let deletes: Vec<RowMutation> = (0..10u64)
        .map(|i| RowMutation::new(format!("r{i:04}")).delete_row(None))
        .collect();
    write_and_flush(&h, &deletes);
    (h, now)
}

/// The periodic major compaction (HBase's `hbase.hregion.majorcompaction`):
/// once the oldest file is old enough, the compaction a flush or the
/// compaction check asks for is a major one where it would drop
/// something, and nothing where it would not.
#[test]
fn a_due_major_compaction_runs_where_it_would_drop_something() {
    let (h, _) = rows_then_deletes();
    assert_eq!(delete_markers_on_disk(&h), 10);
    // Not due yet, and two files are fewer than a minor compaction merges.
    h.region().compact(false).expect("compact");
    assert_eq!(h.region().file_paths().len(), 2);

    h.clock.advance(91_000);
    h.region().compact(false).expect("compact");
    assert_eq!(
        h.region().file_paths().len(),
        1,
        "the due major compaction did not run"
    );
    assert_eq!(delete_markers_on_disk(&h), 0);
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 90);

    // One file with nothing to drop: left alone however old it gets.
    let settled = h.region().file_paths();
    let compactions = h.region().stats().compactions.load(Ordering::Relaxed);
    h.clock.advance(1_000_000);
    h.region().compact(false).expect("compact");
    assert_eq!(h.region().file_paths(), settled);
    assert_eq!(
        h.region().stats().compactions.load(Ordering::Relaxed),
        compactions
    );
}

/// A periodic major compaction that fails (the disk full for its second
/// copy) waits an hour before it is tried again, and minor compactions go
/// on meanwhile: the compaction check comes every few minutes, and a full
/// rewrite failing at each would hold every minor back.
#[test]
fn a_failed_periodic_major_compaction_waits_an_hour_and_minors_go_on() {
    let (h, now) = rows_then_deletes();
    h.clock.advance(91_000);

    fault::arm(&h.root, Site::StoreWrite, Fault::NoSpace, 0, 1);
    assert!(
        h.region().compact(false).is_err(),
        "the periodic major compaction did not meet the full disk"
    );
    assert_eq!(fault::hits(&h.root), 1);
    fault::disarm(&h.root);
    assert_eq!(h.region().file_paths().len(), 2, "the inputs stay live");

    // The disk has room again, but the hour is not up: a third file makes
    // a minor compaction, which keeps the delete markers.
    let more: Vec<RowMutation> = (100..250u64)
        .map(|i| RowMutation::new(format!("r{i:04}")).put("cf", "q", now, "x"))
        .collect();
    write_and_flush(&h, &more);
    h.clock.advance(60_000);
    h.region().compact(false).expect("compact");
    assert_eq!(h.region().file_paths().len(), 1, "the minor compaction ran");
    assert_eq!(
        delete_markers_on_disk(&h),
        10,
        "the major compaction was tried again within the hour"
    );

    h.clock.advance(3_600_000);
    h.region().compact(false).expect("compact");
    assert_eq!(
        delete_markers_on_disk(&h),
        0,
        "not tried again after the hour"
    );
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 240);
}

/// A TIME_WINDOW family's old windows are not rewritten by the periodic
/// major compaction; it runs only to drop delete markers, which may hide
/// cells of any window and so need every file rewritten together.
#[test]
fn a_time_window_family_gets_a_periodic_major_compaction_only_for_delete_markers() {
    const HOUR: u64 = 3_600_000;
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf").time_window(3_600)],
        major_every_minute(),
        small_wal(IoBackendChoice::Auto),
    );
    let base = (h.clock.now_ms() / HOUR - 10) * HOUR;
    for window in 0..2u64 {
        let rows: Vec<RowMutation> = (0..50u64)
            .map(|i| {
                RowMutation::new(format!("w{window}r{i:03}")).put(
                    "cf",
                    "q",
                    base + window * HOUR + i,
                    "x",
                )
            })
            .collect();
        h.region()
            .mutate(&rows, Durability::SyncWal)
            .expect("write");
        h.region().flush().expect("flush");
    }
    let windows = h.region().file_paths();
    assert_eq!(windows.len(), 2);
    h.clock.advance(1_000_000);
    h.region().compact(false).expect("compact");
    assert_eq!(
        h.region().file_paths(),
        windows,
        "closed windows of one file each were rewritten"
    );

    let deletes: Vec<RowMutation> = (0..5u64)
        .map(|i| RowMutation::new(format!("w0r{i:03}")).delete_row(None))
        .collect();
    write_and_flush(&h, &deletes);
    assert_eq!(delete_markers_on_disk(&h), 5);
    h.region().compact(false).expect("compact");
    assert_eq!(delete_markers_on_disk(&h), 0, "the markers stayed on disk");
    // Still one file a window; the deleted rows are gone.
    assert_eq!(h.region().file_paths().len(), 2);
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 95);
}
