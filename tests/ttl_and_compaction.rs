//! TTL hides expired cells at once; compaction removes them from disk, drops
//! a file of only expired cells whole, and merges small files.

mod common;

use std::sync::atomic::Ordering;

use common::{Harness, foreground_options, small_wal};
use halite::cell::RowMutation;
use halite::clock::Clock;
use halite::region::read::{Get, Scan};
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
    h.region().mutate(&old, Durability::SyncWal).expect("write");
    h.region().flush().expect("flush");
    let fresh: Vec<RowMutation> = (0..100)
        .map(|i| RowMutation::new(format!("new{i:03}")).put("cf", "q", now + 50_000, "y"))
        .collect();
    h.region()
        .mutate(&fresh, Durability::SyncWal)
        .expect("write");
    h.region().flush().expect("flush");
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
    h.region()
        .mutate(&muts, Durability::SyncWal)
        .expect("write");
    h.region().flush().expect("flush");
    let deletes: Vec<RowMutation> = (0..100u64)
        .map(|i| RowMutation::new(format!("r{i:04}")).delete_row(None))
        .collect();
    h.region()
        .mutate(&deletes, Durability::SyncWal)
        .expect("delete");
    h.region().flush().expect("flush");
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
