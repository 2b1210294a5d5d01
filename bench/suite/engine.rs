//! Workload 2, the storage engine: halite's region store (in-process: WAL,
//! MemStore, flushes to store files, compactions) against RocksDB's
//! `db_bench`, entry for entry. A RocksDB key/value pair is one halite cell:
//! db_bench writes 48-byte keys and 9-byte values, the size of a TSBS cell's
//! key (row, family, qualifier, timestamp, kind) and typed float value;
//! halite writes TSBS rows of 10 such cells. Writes go in batches of 1,000
//! entries on both sides (100 rows for halite), with the WAL on and no
//! sync (RocksDB `--sync=0`, halite ASYNC_WAL), or synced per batch
//! (`--sync=1`, SYNC_WAL).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use halite::cell::RowMutation;
use halite::clock::SystemClock;
use halite::region::read::Scan;
use halite::region::sst::cache::BlockCache;
use halite::region::wal::{Wal, WalOptions};
use halite::region::{Region, RegionDescriptor, RegionOptions};
use halite::schema::{BloomType, Compression, DataBlockEncoding, Durability, FamilyDescriptor};
use halite::tsbs;

const HOSTS: u64 = 100;
pub const KEY_SIZE: usize = 48;
pub const VALUE_SIZE: usize = 9;
const BATCH_ENTRIES: usize = 1000;
const SEEKS: usize = 20_000;

#[derive(Default)]
pub struct EngineFigures {
    /// Entries (cells) per second.
    pub fillseq_batch1: Option<f64>,
    pub fillseq: f64,
    pub fillseq_sync: f64,
    pub fillrandom: f64,
    pub readseq: f64,
    /// Seeks, each followed by 100 entries, per second.
    pub seekrandom: f64,
}

pub struct DbBench {
    pub commands: Vec<String>,
    pub figures: EngineFigures,
}

fn db_bench(
    dir: &Path,
    entries: u64,
    args: &[&str],
    commands: &mut Vec<String>,
) -> Vec<(String, f64)> {
    let db = dir.join("rocksdb");
    let _ = std::fs::remove_dir_all(&db);
    let mut cmd = vec![
        "db_bench".to_string(),
        format!("--db={}", db.display()),
        format!("--num={entries}"),
        format!("--key_size={KEY_SIZE}"),
        format!("--value_size={VALUE_SIZE}"),
        "--compression_type=snappy".to_string(),
        "--threads=1".to_string(),
    ];
    cmd.extend(args.iter().map(|s| s.to_string()));
    commands.push(cmd.join(" "));
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .output()
        .expect("db_bench: install Debian's rocksdb-tools (make bench does)");
    assert!(
        out.status.success(),
        "db_bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&db);
    // "fillseq      :       0.664 micros/op 1506775 ops/sec ..."
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let words: Vec<&str> = rest.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "ops/sec")?;
            Some((name.trim().to_string(), words.get(at - 1)?.parse().ok()?))
        })
        .collect()
}

pub fn rocksdb(dir: &Path, entries: u64) -> DbBench {
    let mut commands = Vec::new();
    let get = |runs: &[(String, f64)], name: &str| {
        runs.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("db_bench printed no {name} figure"))
    };
    let batch = format!("--batch_size={BATCH_ENTRIES}");
    let seeks = format!("--reads={SEEKS}");
    let r = db_bench(
        dir,
        entries,
        &["--benchmarks=fillseq", "--sync=0"],
        &mut commands,
    );
    let fillseq_batch1 = Some(get(&r, "fillseq"));
    let r = db_bench(
        dir,
        entries,
        &["--benchmarks=fillseq,readseq", &batch, "--sync=0"],
        &mut commands,
    );
    let (fillseq, readseq) = (get(&r, "fillseq"), get(&r, "readseq"));
    let r = db_bench(
        dir,
        entries,
        &["--benchmarks=fillseq", &batch, "--sync=1"],
        &mut commands,
    );
    let fillseq_sync = get(&r, "fillseq");
    let r = db_bench(
        dir,
        entries,
        &[
            "--benchmarks=fillrandom,seekrandom",
            &batch,
            "--sync=0",
            "--seek_nexts=100",
            &seeks,
        ],
        &mut commands,
    );
    let (fillrandom, seekrandom) = (get(&r, "fillrandom"), get(&r, "seekrandom"));
    DbBench {
        commands,
        figures: EngineFigures {
            fillseq_batch1,
            fillseq,
            fillseq_sync,
            fillrandom,
            readseq,
            seekrandom,
        },
    }
}

fn open_region(dir: &Path) -> (Arc<Wal>, Region) {
    let _ = std::fs::remove_dir_all(dir);
    let wal = Arc::new(Wal::open(dir.join("wal"), WalOptions::default()).expect("wal"));
    let family = FamilyDescriptor::new("cpu")
        .compression(Compression::Snappy)
        .data_block_encoding(DataBlockEncoding::TimeSeries)
        .bloom(BloomType::Row);
    let region = Region::open(
        dir.join("region"),
        RegionDescriptor::new(1, vec![family]),
        RegionOptions::default(),
        wal.clone(),
        Arc::new(SystemClock),
        BlockCache::new(256 * 1024 * 1024),
    )
    .expect("region");
    (wal, region)
}

/// Writes `rows` in batches of 100 rows (1,000 cells), four batches in
/// flight; cells per second until the last is acknowledged.
fn fill(region: &Region, rows: &[(u64, u64)], durability: Durability) -> f64 {
    let started = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    for chunk in rows.chunks(BATCH_ENTRIES / tsbs::CPU_FIELDS.len()) {
        let batch: Vec<RowMutation> = chunk
            .iter()
            .map(|&(host, step)| {
                tsbs::cpu_row("cpu", host, step, tsbs::T0_MS + step * tsbs::INTERVAL_MS)
            })
            .collect();
        pending.push_back(region.submit(&batch, durability, None).expect("submit"));
        if pending.len() >= 4 {
            pending.pop_front().expect("one").wait().expect("written");
        }
    }
    for p in pending {
        p.wait().expect("written");
    }
    (rows.len() * tsbs::CPU_FIELDS.len()) as f64 / started.elapsed().as_secs_f64()
}

pub fn halite(dir: &Path, entries: u64) -> EngineFigures {
    let rows_total = entries / tsbs::CPU_FIELDS.len() as u64;
    let steps = rows_total / HOSTS;
    // Key order: host ascending, then newest first (reversed timestamps).
    let in_key_order: Vec<(u64, u64)> = (0..HOSTS)
        .flat_map(|h| (0..steps).rev().map(move |s| (h, s)))
        .collect();
    let mut shuffled = in_key_order.clone();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for i in (1..shuffled.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        shuffled.swap(i, (x % (i as u64 + 1)) as usize);
    }

    let (_wal, region) = open_region(&dir.join("fillseq"));
    let fillseq = fill(&region, &in_key_order, Durability::AsyncWal);
    // readseq over flushed, compacted files, as db_bench reads its own.
    region.flush().expect("flush");
    region.compact(true).expect("compact");
    let started = Instant::now();
    let mut scanner = region.scanner(&Scan::default()).expect("scanner");
    let mut cells = 0usize;
    while let Some(row) = scanner.next_row().expect("row") {
        cells += row.cells.len();
    }
    assert_eq!(cells as u64, rows_total * tsbs::CPU_FIELDS.len() as u64);
    let readseq = cells as f64 / started.elapsed().as_secs_f64();
    // Seeks to random rows, each reading 100 cells (10 rows).
    let started = Instant::now();
    for i in 0..SEEKS {
        let (host, step) = shuffled[i % shuffled.len()];
        let start = tsbs::cpu_row_key(host, tsbs::T0_MS + step * tsbs::INTERVAL_MS);
        let page = region
            .scan(&Scan {
                start: Some(start),
                limit: Some(10),
                ..Scan::default()
            })
            .expect("seek");
        std::hint::black_box(page);
    }
    let seekrandom = SEEKS as f64 / started.elapsed().as_secs_f64();
    region.close().expect("close");

    let (_wal, region) = open_region(&dir.join("fillseq-sync"));
    let fillseq_sync = fill(&region, &in_key_order, Durability::SyncWal);
    region.close().expect("close");

    let (_wal, region) = open_region(&dir.join("fillrandom"));
    let fillrandom = fill(&region, &shuffled, Durability::AsyncWal);
    region.close().expect("close");
    for d in ["fillseq", "fillseq-sync", "fillrandom"] {
        let _ = std::fs::remove_dir_all(dir.join(d));
    }
    EngineFigures {
        fillseq_batch1: None,
        fillseq,
        fillseq_sync,
        fillrandom,
        readseq,
        seekrandom,
    }
}
