//! Storage engine benchmark (`make bench-engine`).
//!
//! Ingests TSBS-style "cpu" rows — 100 hosts, 10 float fields, one row per
//! host every 10 s, row key = host + reversed timestamp, one cell per field —
//! into one region with SYNC_WAL from one writer thread (which keeps a few
//! batches in flight, as an ingest pipeline does), then scans everything and
//! times Gets on cached blocks. In the same run it measures the raw disk
//! limit: appending the same bytes in the same batch sizes with fdatasync and
//! nothing else.
//!
//! Environment: `HALITE_BENCH_ROWS` (default 1,000,000), `HALITE_BENCH_DIR`
//! (default: a temp dir), `HALITE_BENCH_BATCH` rows per write (default 1000).

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use halite::clock::SystemClock;
use halite::region::read::{Get, Scan};
use halite::region::sst::cache::BlockCache;
use halite::region::wal::{Wal, WalOptions};
use halite::region::{Region, RegionDescriptor, RegionOptions};
use halite::schema::{Compression, Durability, FamilyDescriptor};
use halite::tsbs::{self, CPU_FIELDS, cpu_row_key};

const HOSTS: u64 = 100;
const MEMSTORE_FLUSH: usize = 64 * 1024 * 1024;
const BLOCKING_MULTIPLIER: usize = 4;
const CACHE: usize = 128 * 1024 * 1024;
const IN_FLIGHT: usize = 4;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn peak_rss_mb() -> f64 {
    status_mb("VmHWM:")
}

fn rss_mb() -> f64 {
    status_mb("VmRSS:")
}

fn status_mb(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Appends `total` bytes in `batch`-byte writes, each followed by
/// fdatasync, to a new file: the disk's limit for a WAL of this batch size.
fn raw_append_mb_per_s(dir: &Path, batch: usize, total: u64) -> (f64, f64) {
    let path = dir.join("raw-append.bin");
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .expect("create raw file");
    let buf = vec![0x5au8; batch.max(1)];
    let started = Instant::now();
    let mut written = 0u64;
    let mut syncs = 0u64;
    while written < total {
        f.write_all(&buf).expect("raw write");
        f.sync_data().expect("raw fdatasync");
        written += buf.len() as u64;
        syncs += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&path);
    (written as f64 / secs / 1e6, syncs as f64 / secs)
}

fn main() {
    let rows = env_u64("HALITE_BENCH_ROWS", 1_000_000);
    let batch_rows = env_u64("HALITE_BENCH_BATCH", 1000) as usize;
    let tmp = tempfile::tempdir_in(
        std::env::var("HALITE_BENCH_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string()),
    )
    .expect("bench dir");
    let dir = tmp.path();
    println!(
        "engine bench: {rows} rows x {} fields, batches of {batch_rows} rows, dir {}",
        CPU_FIELDS.len(),
        dir.display()
    );

    let wal = Arc::new(Wal::open(dir.join("wal"), WalOptions::default()).expect("wal"));
    println!("wal backend: {}", wal.backend().as_str());
    let cache = BlockCache::new(CACHE);
    let region = Arc::new(
        Region::open(
            dir.join("region"),
            RegionDescriptor::new(
                1,
                vec![FamilyDescriptor::new("cpu").compression(Compression::Snappy)],
            ),
            RegionOptions {
                flush_size: MEMSTORE_FLUSH,
                blocking_multiplier: BLOCKING_MULTIPLIER,
                compaction: halite::region::compaction::CompactionOptions {
                    min_files: env_u64("HALITE_BENCH_COMPACT_MIN", 3) as usize,
                    ..Default::default()
                },
                ..RegionOptions::default()
            },
            wal.clone(),
            Arc::new(SystemClock),
            cache.clone(),
        )
        .expect("region"),
    );
    // Samples memory during ingest, to show where the peak comes from.
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (sampling, region) = (sampling.clone(), region.clone());
        std::thread::spawn(move || {
            let mut worst = (0.0f64, 0usize);
            while sampling.load(Ordering::Relaxed) {
                let rss = rss_mb();
                if rss > worst.0 {
                    worst = (rss, region.memstore_bytes());
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            worst
        })
    };

    let start_ts = 1_700_000_000_000u64;
    let steps = rows.div_ceil(HOSTS);
    let started = Instant::now();
    let mut pending = VecDeque::new();
    let mut batch = Vec::with_capacity(batch_rows);
    let mut written = 0u64;
    let (mut t_build, mut t_submit, mut t_wait) = (0f64, 0f64, 0f64);
    let mut t0 = Instant::now();
    'outer: for step in 0..steps {
        let ts = start_ts + step * 10_000;
        for host in 0..HOSTS {
            batch.push(tsbs::cpu_row("cpu", host, step, ts));
            written += 1;
            if batch.len() == batch_rows || written == rows {
                t_build += t0.elapsed().as_secs_f64();
                t0 = Instant::now();
                let w = region
                    .submit(&batch, Durability::SyncWal, None)
                    .expect("submit");
                pending.push_back(w);
                batch.clear();
                t_submit += t0.elapsed().as_secs_f64();
                t0 = Instant::now();
                if pending.len() >= IN_FLIGHT {
                    pending
                        .pop_front()
                        .expect("non-empty")
                        .wait()
                        .expect("durable");
                }
                t_wait += t0.elapsed().as_secs_f64();
                t0 = Instant::now();
            }
            if written == rows {
                break 'outer;
            }
        }
    }
    for w in pending {
        w.wait().expect("durable");
    }
    let ingest_secs = started.elapsed().as_secs_f64();
    sampling.store(false, Ordering::Relaxed);
    let worst = sampler.join().expect("sampler");
    println!(
        "ingest rss peak sampled: {:.0} MiB with {:.0} MiB in memstores",
        worst.0,
        worst.1 as f64 / 1048576.0
    );
    println!(
        "writer thread: building rows {t_build:.2}s, submit {t_submit:.2}s, waiting for durability {t_wait:.2}s"
    );
    let stats = wal.stats();
    let wal_bytes = stats.bytes.load(Ordering::Relaxed);
    let batches = stats.batches.load(Ordering::Relaxed).max(1);
    let syncs = stats.syncs.get();
    let cells = rows * CPU_FIELDS.len() as u64;
    let wal_mb_s = wal_bytes as f64 / ingest_secs / 1e6;
    let avg_batch = (wal_bytes / batches) as usize;
    // The same bytes, the same batch size, appended with fdatasync.
    let (raw_mb_s, raw_syncs_s) =
        raw_append_mb_per_s(dir, avg_batch, wal_bytes.min(512 * 1024 * 1024));
    println!(
        "wal: {wal_bytes} bytes in {batches} group commits (avg {avg_batch} bytes), {syncs} data syncs, up to {} batches in flight, {} flushes, {} stalls ({:.2}s)",
        stats.max_in_flight.load(Ordering::Relaxed),
        region.stats().flushes.load(Ordering::Relaxed),
        region.stats().writer_stalls.load(Ordering::Relaxed),
        region.stats().writer_stall_micros.load(Ordering::Relaxed) as f64 / 1e6
    );
    println!(
        "raw append+fdatasync at {avg_batch} bytes: {raw_mb_s:.1} MB/s, {raw_syncs_s:.0} syncs/s"
    );
    println!(
        "engine_ingest cells_per_s={:.0} wal_mb_per_s={:.1} syncs_per_s={:.0} disk_limit_ratio={:.2}",
        cells as f64 / ingest_secs,
        wal_mb_s,
        syncs as f64 / ingest_secs,
        wal_mb_s / raw_mb_s
    );

    println!(
        "rss after ingest: {:.0} MiB (peak so far {:.0})",
        rss_mb(),
        peak_rss_mb()
    );
    region.flush().expect("flush");
    region.compact(true).expect("compact");
    println!(
        "rss after flush + major compaction: {:.0} MiB (peak so far {:.0})",
        rss_mb(),
        peak_rss_mb()
    );
    println!(
        "store: {} file(s), {} bytes ({:.2} bytes/cell)",
        region.file_paths().len(),
        region.store_bytes(),
        region.store_bytes() as f64 / cells as f64
    );

    // Full scan, twice: the first reads blocks from the OS, the second from
    // the block cache where it fits.
    // Full scans, reading rows as borrowed views (no allocation per cell)
    // and, for comparison, as owned rows. The first pass also warms the
    // block cache; the best pass of each kind is reported.
    let (mut view_rate, mut owned_rate) = (0.0f64, 0.0f64);
    for _ in 0..env_u64("HALITE_BENCH_SCANS", 5) {
        let started = Instant::now();
        let mut n = 0u64;
        let mut scanner = region.scanner(&Scan::new()).expect("scanner");
        while let Some(row) = scanner.next_view().expect("row") {
            n += row.len() as u64;
        }
        assert_eq!(n, cells, "scan returned {n} cells");
        view_rate = view_rate.max(n as f64 / started.elapsed().as_secs_f64());

        let started = Instant::now();
        let mut n = 0u64;
        for row in region.scanner(&Scan::new()).expect("scanner") {
            n += row.expect("row").cells.len() as u64;
        }
        assert_eq!(n, cells, "scan returned {n} cells");
        owned_rate = owned_rate.max(n as f64 / started.elapsed().as_secs_f64());
    }
    println!("full scan as owned rows: {owned_rate:.0} cells/s");
    println!(
        "rss after scans: {:.0} MiB (peak so far {:.0}), block cache {:.0} MiB",
        rss_mb(),
        peak_rss_mb(),
        cache.bytes() as f64 / 1048576.0
    );
    println!("engine_scan cells_per_s={view_rate:.0}");

    // Gets: on cached blocks (a hot set, the newest tenth of the points,
    // warmed first) as the target states, and over all rows (mostly cache
    // misses: the data is larger than the cache) for comparison.
    let mut x = 0x2545F4914F6CDD1Du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let steps_written = rows.div_ceil(HOSTS);
    let hot_steps = (steps_written / 10).max(1);
    let key_at = |host: u64, step: u64| cpu_row_key(host, start_ts + step * 10_000);
    let hot: Vec<Vec<u8>> = (0..20_000)
        .map(|_| {
            let step = steps_written - 1 - next() % hot_steps;
            key_at(next() % HOSTS, step)
        })
        .collect();
    let all: Vec<Vec<u8>> = (0..20_000)
        .map(|_| {
            let r = next() % rows;
            key_at(r % HOSTS, r / HOSTS)
        })
        .collect();
    let time_gets = |keys: &[Vec<u8>]| {
        let mut lat = Vec::with_capacity(keys.len());
        for k in keys {
            let t = Instant::now();
            let row = region.get(&Get::new(k.clone())).expect("get").expect("row");
            lat.push(t.elapsed().as_nanos() as f64 / 1000.0);
            assert_eq!(row.cells.len(), CPU_FIELDS.len());
        }
        lat.sort_by(|a, b| a.total_cmp(b));
        (lat[lat.len() / 2], lat[lat.len() * 99 / 100])
    };
    let (p50, p99) = time_gets(&all);
    println!("gets over all rows (mostly uncached): p50 {p50:.1} us, p99 {p99:.1} us");
    time_gets(&hot);
    let misses = cache.stats().misses.load(Ordering::Relaxed);
    let (p50, p99) = time_gets(&hot);
    let hot_misses = cache.stats().misses.load(Ordering::Relaxed) - misses;
    println!(
        "hot-set gets: {} keys, {hot_misses} block cache misses while timed",
        hot.len()
    );
    println!("engine_get p50_us={p50:.1} p99_us={p99:.1}");
    println!(
        "budgets: memstore blocking limit {} MiB, block cache {} MiB",
        MEMSTORE_FLUSH * BLOCKING_MULTIPLIER / (1024 * 1024),
        CACHE / (1024 * 1024)
    );
    println!("engine_peak_rss_mb={:.0}", peak_rss_mb());
    region.close().expect("close");
    wal.close();
}
