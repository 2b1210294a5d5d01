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

pub fn run(dir: &Path, secs: u64) -> Vec<DiskRow> {
    BATCHES
        .iter()
        .map(|&batch| {
            let (fio_mb_s, fio_syncs_s, fio_sync_p50_us) = fio(dir, batch, secs);
            let (wal_mb_s, wal_syncs_s, _, backend) = wal(&dir.join("wal"), batch, secs, 1);
            let (wal_pipelined_mb_s, _, wal_pipelined_bytes_per_sync, _) =
                wal(&dir.join("wal"), batch, secs, 8);
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
                "disk batch={batch} fio_mb_s={fio_mb_s:.1} wal_mb_s={wal_mb_s:.1} ratio={:.2} wal_pipelined_mb_s={wal_pipelined_mb_s:.1}",
                wal_mb_s / fio_mb_s
            );
            row
        })
        .collect()
}
