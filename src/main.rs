//! The `halite` command. For now it runs the storage-engine demo; the service
//! (`serve`) and client verbs arrive with the region set and the HTTP API.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use halite::clock::{Clock, SystemClock};
use halite::config::Config;
use halite::region::block_cache::BlockCache;
use halite::region::wal::Wal;
use halite::region::{Region, RegionDescriptor};
use halite::scan::{Get, Scan};
use halite::schema::{Compression, Durability, FamilyDescriptor};
use halite::tsbs;

const USAGE: &str = "usage: halite demo [--config PATH] [--set KEY=VALUE]... [--dir PATH]
                   [--hosts N] [--points-per-host N]

  demo   ingest TSBS-style cpu rows (host + reversed timestamp keys, one
         cell per field) into one region with SYNC_WAL, flush, compact,
         and read them back. Engine settings come from the config file
         (configs/halite.toml documents each), HALITE__SECTION__KEY
         environment variables and --set flags. Data goes to --dir, or a
         fresh temporary directory.";

struct DemoArgs {
    dir: Option<PathBuf>,
    config: Option<PathBuf>,
    overrides: Vec<String>,
    hosts: u64,
    points: u64,
}

fn parse_demo(args: &[String]) -> Result<DemoArgs, String> {
    let mut out = DemoArgs {
        dir: None,
        config: None,
        overrides: Vec::new(),
        hosts: 100,
        points: 2_000,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match a.as_str() {
            "--dir" => out.dir = Some(PathBuf::from(value("--dir")?)),
            "--config" => out.config = Some(PathBuf::from(value("--config")?)),
            "--set" => out.overrides.push(value("--set")?),
            "--hosts" => {
                out.hosts = value("--hosts")?
                    .parse()
                    .map_err(|_| "--hosts takes a number")?
            }
            "--points-per-host" => {
                out.points = value("--points-per-host")?
                    .parse()
                    .map_err(|_| "--points-per-host takes a number")?
            }
            other => return Err(format!("unknown argument `{other}`\n\n{USAGE}")),
        }
    }
    Ok(out)
}

fn demo(args: DemoArgs) -> Result<(), Box<dyn std::error::Error>> {
    let own_dir = args.dir.is_none();
    let dir = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("halite-demo-{}", std::process::id()))
    });
    let config = Config::load(args.config.as_deref(), &args.overrides)?;
    println!("halite demo: data in {}", dir.display());
    let wal = Arc::new(Wal::open(dir.join("wal"), config.wal_options())?);
    println!("wal backend: {}", wal.backend().as_str());
    let family = FamilyDescriptor::new("cpu").compression(Compression::Snappy);
    let region = Region::open(
        dir.join("region-1"),
        RegionDescriptor {
            id: 1,
            families: vec![family],
        },
        config.region_options(),
        wal.clone(),
        Arc::new(SystemClock),
        BlockCache::new(config.cache.block_cache_size.0 as usize),
    )?;
    let start_ts = SystemClock.now_ms() - args.points * 10_000;
    let started = Instant::now();
    let mut batch = Vec::with_capacity(1000);
    let mut rows = 0u64;
    for p in 0..args.points {
        let ts = start_ts + p * 10_000;
        for h in 0..args.hosts {
            batch.push(tsbs::cpu_row("cpu", h, p, ts));
            if batch.len() == 1000 {
                region.mutate(&batch, Durability::SyncWal)?;
                rows += batch.len() as u64;
                batch.clear();
            }
        }
    }
    if !batch.is_empty() {
        region.mutate(&batch, Durability::SyncWal)?;
        rows += batch.len() as u64;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "ingested {rows} rows ({} cells) with SYNC_WAL in {secs:.2}s: {:.0} cells/s, {} wal syncs",
        rows * 10,
        rows as f64 * 10.0 / secs,
        wal.stats().syncs.get()
    );
    region.flush()?;
    region.compact(true)?;
    println!(
        "flushed and compacted: {} store file(s), {} bytes on disk",
        region.file_paths().len(),
        region.store_bytes()
    );

    let host = args.hosts / 2;
    let prefix = tsbs::host_prefix(host);
    let started = Instant::now();
    let page = region.scan(&Scan {
        prefix: Some(prefix),
        limit: Some(5),
        ..Scan::new()
    })?;
    println!("last 5 points of host_{host:04} ({:?}):", started.elapsed());
    for row in &page.rows {
        let ts = tsbs::cpu_row_ts(&row.key).unwrap_or(0);
        let user = row
            .cells
            .iter()
            .find(|c| c.qualifier.as_ref() == b"usage_user")
            .and_then(|c| halite::value::numeric(&c.value));
        println!("  ts={ts} usage_user={user:?} cells={}", row.cells.len());
    }
    let get = region.get(&Get::new(tsbs::cpu_row_key(0, start_ts)))?;
    println!(
        "get host_0000 at the first timestamp: {} cells",
        get.map_or(0, |r| r.cells.len())
    );
    region.close()?;
    wal.close();
    if own_dir {
        std::fs::remove_dir_all(&dir)?;
        println!("done; removed {}", dir.display());
    } else {
        println!("done; the data stays in {}", dir.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("demo") => match parse_demo(&args[1..]) {
            Ok(a) => match demo(a) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            },
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
