//! Crash test: a child process writes acknowledged batches (with frequent
//! flushes and compactions) and is SIGKILLed at random moments. After each
//! kill the region is reopened: every acknowledged batch must be readable
//! whole, no row may be half there, and every store file must verify.
//!
//! `HALITE_CRASH_KILLS` sets the number of kills (default 20).

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use common::{Harness, small_wal};
use halite::cell::RowMutation;
use halite::region::RegionOptions;
use halite::region::compaction::CompactionOptions;
use halite::region::read::Scan;
use halite::region::sst::SstReader;
use halite::region::wal::io::IoBackendChoice;
use halite::schema::{Compression, Durability, FamilyDescriptor};

const ROWS_PER_BATCH: u64 = 8;
const QUALIFIERS: u64 = 5;

fn families() -> Vec<FamilyDescriptor> {
    vec![
        FamilyDescriptor::new("cf")
            .compression(Compression::Snappy)
            .block_size(4096),
    ]
}

fn options() -> RegionOptions {
    RegionOptions {
        flush_size: 48 * 1024,
        blocking_multiplier: 8,
        compaction: CompactionOptions {
            min_files: 3,
            max_files: 6,
            ratio: 1.2,
            ..CompactionOptions::default()
        },
        ..RegionOptions::default()
    }
}

fn value(batch: u64, row: u64, q: u64) -> Vec<u8> {
    format!(
        "v-{batch}-{row}-{q}-{}",
        batch.wrapping_mul(2654435761) ^ row
    )
    .into_bytes()
}

fn row_key(batch: u64, row: u64) -> Vec<u8> {
    format!("b{batch:08}-{row:03}").into_bytes()
}

fn batch_rows(batch: u64) -> Vec<RowMutation> {
    (0..ROWS_PER_BATCH)
        .map(|r| {
            let mut m = RowMutation::new(row_key(batch, r));
            for q in 0..QUALIFIERS {
                m = m.put("cf", format!("q{q}"), 1_000 + batch, value(batch, r, q));
            }
            m
        })
        .collect()
}

/// The child: writes batches from `HALITE_CRASH_START` on, printing
/// `ACK <n>` once batch n is acknowledged, until killed.
#[test]
#[ignore = "run by crash_recovery_under_sigkill as a child process"]
fn crash_child() {
    let Ok(dir) = std::env::var("HALITE_CRASH_DIR") else {
        return;
    };
    let start: u64 = std::env::var("HALITE_CRASH_START")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let io = if std::env::var("HALITE_CRASH_SYNC_IO").is_ok() {
        IoBackendChoice::Sync
    } else {
        IoBackendChoice::Auto
    };
    let h = open_at(Path::new(&dir), io);
    let region = h.region();
    let mut batch = start;
    loop {
        let durability = if batch % 4 == 3 {
            Durability::AsyncWal
        } else {
            Durability::SyncWal
        };
        region
            .mutate(&batch_rows(batch), durability)
            .expect("write");
        println!("ACK {batch}");
        if batch % 50 == 25 {
            region.compact(batch % 100 == 25).expect("compact");
        }
        batch += 1;
    }
}

fn open_at(dir: &Path, io: IoBackendChoice) -> Harness {
    let wal = small_wal(io);
    let mut h = Harness::new_at(dir, families(), options(), wal);
    h.open();
    h
}

/// Reopens the region and checks it; returns the highest complete batch.
fn verify(dir: &Path, acked: i64) -> u64 {
    let h = open_at(dir, IoBackendChoice::Auto);
    let region = h.region();
    let mut rows_per_batch = std::collections::BTreeMap::<u64, u64>::new();
    let scan = Scan::new();
    for row in region.scanner(&scan).expect("scanner") {
        let row = row.expect("row");
        let key = String::from_utf8(row.key.clone()).expect("utf8 key");
        let batch: u64 = key[1..9].parse().expect("batch");
        let r: u64 = key[10..].parse().expect("row");
        assert_eq!(
            row.cells.len() as u64,
            QUALIFIERS,
            "row {key} is partial: {:?}",
            row.cells
        );
        for (q, cell) in row.cells.iter().enumerate() {
            assert_eq!(cell.value, value(batch, r, q as u64), "row {key} q{q}");
            assert_eq!(cell.timestamp, 1_000 + batch);
        }
        *rows_per_batch.entry(batch).or_default() += 1;
    }
    for b in 0..=acked.max(-1) {
        let b = b as u64;
        assert_eq!(
            rows_per_batch.get(&b).copied().unwrap_or(0),
            ROWS_PER_BATCH,
            "acknowledged batch {b} is not whole after the crash (acked up to {acked})"
        );
    }
    let cache = halite::region::sst::cache::BlockCache::new(1 << 20);
    for path in region.file_paths() {
        let reader =
            SstReader::open(&path, 0, cache.clone(), false, false).expect("store file opens");
        reader.check_all().expect("store file verifies");
    }
    let highest = rows_per_batch.keys().next_back().copied();
    // Batches are written in order and each is one WAL record: nothing past
    // the first missing batch may be present.
    if let Some(max) = highest {
        for b in 0..=max {
            assert_eq!(
                rows_per_batch.get(&b).copied().unwrap_or(0),
                ROWS_PER_BATCH,
                "batch {b} missing while later batch {max} is present"
            );
        }
    }
    drop(h);
    highest.map_or(0, |m| m + 1)
}

fn run_kills(kills: usize, sync_io: bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("test binary path");
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15 ^ kills as u64 ^ u64::from(sync_io);
    let mut next_batch = 0u64;
    let mut total_acked = 0i64;
    let started = Instant::now();
    for kill in 0..kills {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let run_for = Duration::from_millis(30 + seed % 300);
        let mut cmd = Command::new(&exe);
        cmd.args([
            "--exact",
            "crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HALITE_CRASH_DIR", dir.path())
        .env("HALITE_CRASH_START", next_batch.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        if sync_io {
            cmd.env("HALITE_CRASH_SYNC_IO", "1");
        }
        let mut child = cmd.spawn().expect("spawn child");
        let acked = Arc::new(AtomicI64::new(next_batch as i64 - 1));
        let stdout = child.stdout.take().expect("piped stdout");
        let acked_w = acked.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line
                    .strip_prefix("ACK ")
                    .and_then(|n| n.parse::<i64>().ok())
                {
                    acked_w.store(n, Ordering::SeqCst);
                }
            }
        });
        // Wait for the child to get going, then kill it mid-flight.
        let deadline = Instant::now() + Duration::from_secs(20);
        while acked.load(Ordering::SeqCst) < next_batch as i64 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(run_for);
        child.kill().expect("SIGKILL child");
        let status = child.wait().expect("reap child");
        assert!(!status.success(), "child exited on its own: {status:?}");
        reader.join().expect("reader thread");
        let acked_now = acked.load(Ordering::SeqCst);
        total_acked = total_acked.max(acked_now);
        next_batch = verify(dir.path(), total_acked);
        assert!(
            next_batch as i64 > total_acked,
            "kill {kill}: recovered up to batch {next_batch} but {total_acked} was acknowledged"
        );
    }
    eprintln!(
        "crash test ({}): {kills} kills, {} batches acknowledged, {:.1}s",
        if sync_io { "sync io" } else { "auto io" },
        total_acked + 1,
        started.elapsed().as_secs_f64()
    );
}

fn kills() -> usize {
    std::env::var("HALITE_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

#[test]
fn crash_recovery_under_sigkill() {
    run_kills(kills(), false);
}

#[test]
fn crash_recovery_under_sigkill_sync_io() {
    run_kills(kills() / 2 + 1, true);
}
