//! MemStores flush on size, age and close in the background, and writers are
//! held back (not memory grown) when flushes cannot keep up.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Harness, small_wal};
use halite::cell::RowMutation;
use halite::region::RegionOptions;
use halite::region::read::Scan;
use halite::region::wal::io::IoBackendChoice;
use halite::schema::{Durability, FamilyDescriptor};

fn rows(batch: u32, n: u32) -> Vec<RowMutation> {
    (0..n)
        .map(|i| RowMutation::new(format!("b{batch:06}-{i:04}")).put("cf", "q", 1, vec![7u8; 256]))
        .collect()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn size_triggers_a_background_flush() {
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf")],
        RegionOptions {
            flush_size: 256 * 1024,
            ..RegionOptions::default()
        },
        small_wal(IoBackendChoice::Auto),
    );
    for b in 0..20 {
        h.region()
            .mutate(&rows(b, 100), Durability::SyncWal)
            .expect("write");
    }
    wait_until("a flush", || {
        h.region().stats().flushes.load(Ordering::Relaxed) > 0
    });
    assert!(h.region().memstore_bytes() < 20 * 100 * 300);
    assert_eq!(
        h.region().scan(&Scan::new()).expect("scan").rows.len(),
        2000
    );
}

#[test]
fn age_triggers_a_background_flush() {
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf")],
        RegionOptions {
            flush_age: Duration::from_millis(200),
            ..RegionOptions::default()
        },
        small_wal(IoBackendChoice::Auto),
    );
    h.region()
        .mutate(&rows(0, 10), Durability::SyncWal)
        .expect("write");
    h.clock.advance(1_000);
    wait_until("an age flush", || {
        h.region().stats().flushes.load(Ordering::Relaxed) > 0
    });
    assert_eq!(h.region().memstore_bytes(), 0);
}

#[test]
fn close_flushes_and_the_wal_is_emptied() {
    let mut h = Harness::new(
        vec![FamilyDescriptor::new("cf")],
        RegionOptions::default(),
        small_wal(IoBackendChoice::Auto),
    );
    for b in 0..10 {
        h.region()
            .mutate(&rows(b, 50), Durability::SyncWal)
            .expect("write");
    }
    h.reopen_clean();
    assert_eq!(
        h.region().memstore_bytes(),
        0,
        "nothing should need replay after a clean close"
    );
    assert!(!h.region().file_paths().is_empty());
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 500);
}

#[test]
fn writers_wait_instead_of_growing_memory() {
    let flush_size = 128 * 1024;
    let h = Arc::new(Harness::new(
        vec![FamilyDescriptor::new("cf")],
        RegionOptions {
            flush_size,
            blocking_multiplier: 2,
            ..RegionOptions::default()
        },
        small_wal(IoBackendChoice::Auto),
    ));
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (h, done, peak) = (h.clone(), done.clone(), peak.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(h.region().memstore_bytes(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let h = h.clone();
            s.spawn(move || {
                for b in 0..60u32 {
                    h.region()
                        .mutate(&rows(t * 1000 + b, 40), Durability::AsyncWal)
                        .expect("write");
                }
            });
        }
    });
    done.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");
    // Blocking limit plus at most one in-flight batch per writer.
    let batch_bytes = 40 * (256 + 40 + 96);
    let bound = flush_size * 2 + 4 * batch_bytes;
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak <= bound,
        "memstore peaked at {peak} bytes, bound {bound}"
    );
    assert_eq!(
        h.region().scan(&Scan::new()).expect("scan").rows.len(),
        4 * 60 * 40
    );
}

#[test]
fn skip_wal_writes_are_durable_only_once_flushed() {
    let mut h = Harness::new(
        vec![FamilyDescriptor::new("cf")],
        RegionOptions::default(),
        small_wal(IoBackendChoice::Auto),
    );
    let bytes_before = h
        .wal
        .as_ref()
        .expect("wal")
        .stats()
        .bytes
        .load(Ordering::Relaxed);
    h.region()
        .mutate(&rows(1, 10), Durability::SkipWal)
        .expect("write");
    assert_eq!(
        h.region().scan(&Scan::new()).expect("scan").rows.len(),
        10,
        "visible at once"
    );
    assert_eq!(
        h.wal
            .as_ref()
            .expect("wal")
            .stats()
            .bytes
            .load(Ordering::Relaxed),
        bytes_before,
        "SKIP_WAL wrote to the WAL"
    );
    // Lost by a crash before a flush...
    h.reopen_unflushed();
    assert!(h.region().scan(&Scan::new()).expect("scan").rows.is_empty());
    // ...kept once flushed.
    h.region()
        .mutate(&rows(2, 10), Durability::SkipWal)
        .expect("write");
    h.region().flush().expect("flush");
    h.reopen_unflushed();
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 10);
}

#[test]
fn async_wal_writes_survive_a_process_crash() {
    let mut h = Harness::new(
        vec![FamilyDescriptor::new("cf")],
        RegionOptions::default(),
        small_wal(IoBackendChoice::Auto),
    );
    h.region()
        .mutate(&rows(1, 25), Durability::AsyncWal)
        .expect("write");
    h.reopen_unflushed();
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 25);
}
