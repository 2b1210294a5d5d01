//! Workload 1, the disk limit: fio appending with an fdatasync after every
//! write, against halite's WAL appending records of the same size, one
//! synced record at a time (as fio does) and with several in flight (as
//! group commit runs under load).

use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use halite::region::wal::{Wal, WalOptions};

/// Record header in a WAL segment: length (4), CRC32C (4), kind (1).
const RECORD_HEADER: usize = 9;

pub struct DiskRow {
    pub batch: usize,
    pub fio_mb_s: f64,
    pub fio_syncs_s: f64,
    pub fio_sync_p50_us: f64,
    pub wal_mb_s: f64,
    pub wal_syncs_s: f64,
    pub wal_pipelined_mb_s: f64,
    pub wal_pipelined_bytes_per_sync: f64,
    pub backend: String,
}

pub const BATCHES: [usize; 3] = [4 * 1024, 64 * 1024, 1024 * 1024];

pub fn fio_command(dir: &Path, batch: usize, secs: u64) -> Vec<String> {
    [
        "fio",
        "--name=wal-append",
        &format!("--directory={}", dir.display()),
        &format!("--filename=fio-{batch}.dat"),
        "--rw=write",
        &format!("--bs={batch}"),
        "--size=16G",
        &format!("--runtime={secs}"),
        "--file_append=1",
        "--fallocate=none",
        "--create_on_open=1",
        "--fdatasync=1",
        "--ioengine=sync",
        "--output-format=json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn fio(dir: &Path, batch: usize, secs: u64) -> (f64, f64, f64) {
    let cmd = fio_command(dir, batch, secs);
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .output()
        .expect("fio: install Debian's fio (make bench does)");
    assert!(
        out.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(dir.join(format!("fio-{batch}.dat")));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("fio json");
    let job = &json["jobs"][0];
    let bw = job["write"]["bw_bytes"].as_f64().unwrap_or(0.0);
    let iops = job["write"]["iops"].as_f64().unwrap_or(0.0);
    let p50 = job["sync"]["lat_ns"]["percentile"]["50.000000"]
        .as_f64()
        .unwrap_or(0.0);
    (bw / 1e6, iops, p50 / 1e3)
}

/// Appends records of `batch` framed bytes for `secs`, keeping `in_flight`
/// synced appends outstanding; (MB/s, syncs/s, bytes per sync, backend).
fn wal(dir: &Path, batch: usize, secs: u64, in_flight: usize) -> (f64, f64, f64, String) {
    let _ = std::fs::remove_dir_all(dir);
    let wal = Wal::open(dir, WalOptions::default()).expect("open wal");
    let payload = vec![0x5Au8; batch - RECORD_HEADER];
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let mut pending = std::collections::VecDeque::new();
    let mut seq = 0u64;
    let mut bytes = 0u64;
    while Instant::now() < deadline {
        while pending.len() < in_flight {
            seq += 1;
            pending.push_back(wal.append(1, seq, payload.clone(), true).expect("append"));
        }
        if let Some(t) = pending.pop_front() {
            t.wait().expect("durable");
            bytes += batch as u64;
        }
    }
    for t in pending {
        t.wait().expect("durable");
        bytes += batch as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    let syncs = wal.stats().syncs.get() as f64;
    let backend = format!("{:?}", wal.backend());
    let _ = wal.stats().appends.load(Ordering::Relaxed);
    wal.close();
    let _ = std::fs::remove_dir_all(dir);
    (
        bytes as f64 / secs / 1e6,
        syncs / secs,
        bytes as f64 / syncs.max(1.0),
        backend,
    )
}

/// Means of two runs' figures.
fn mean2(a: (f64, f64, f64), b: (f64, f64, f64)) -> (f64, f64, f64) {
    ((a.0 + b.0) / 2.0, (a.1 + b.1) / 2.0, (a.2 + b.2) / 2.0)
}

/// Each batch size: fio and the one-in-flight WAL take turns, fio, WAL,
/// WAL, fio, `turn_secs` each, and each figure is the mean of its two
/// turns. This disk's fdatasync latency wanders (fio gave 17-22 MB/s at
/// 4 KiB from one run to the next); taking turns this way weighs a steady
/// drift on both alike, where one run after the other weighed it on the
/// ratio.
pub fn run(dir: &Path, turn_secs: u64) -> Vec<DiskRow> {
    BATCHES
        .iter()
        .map(|&batch| {
            let wal_turn = || {
                let (mb_s, syncs_s, _, backend) = wal(&dir.join("wal"), batch, turn_secs, 1);
                ((mb_s, syncs_s, 0.0), backend)
            };
            let fio_a = fio(dir, batch, turn_secs);
            let (wal_a, backend) = wal_turn();
            let (wal_b, _) = wal_turn();
            let fio_b = fio(dir, batch, turn_secs);
            let (fio_mb_s, fio_syncs_s, fio_sync_p50_us) = mean2(fio_a, fio_b);
            let (wal_mb_s, wal_syncs_s, _) = mean2(wal_a, wal_b);
            let (wal_pipelined_mb_s, _, wal_pipelined_bytes_per_sync, _) =
                wal(&dir.join("wal"), batch, 2 * turn_secs, 8);
            let row = DiskRow {
                batch,
                fio_mb_s,
                fio_syncs_s,
                fio_sync_p50_us,
                wal_mb_s,
                wal_syncs_s,
                wal_pipelined_mb_s,
                wal_pipelined_bytes_per_sync,
                backend,
            };
            println!(
                "disk batch={batch} fio_mb_s={fio_mb_s:.1} ({:.1}, {:.1}) wal_mb_s={wal_mb_s:.1} ({:.1}, {:.1}) ratio={:.2} wal_pipelined_mb_s={wal_pipelined_mb_s:.1}",
                fio_a.0,
                fio_b.0,
                wal_a.0,
                wal_b.0,
                wal_mb_s / fio_mb_s
            );
            row
        })
        .collect()
}
