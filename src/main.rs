//! The `halite` command: `serve` runs the service; `demo` runs the storage
//! engine demo.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use halite::api::{self, AppState};
use halite::catalog::CreateTable;
use halite::clock::{Clock, SystemClock};
use halite::config::Config;
use halite::region::block_cache::BlockCache;
use halite::region::wal::Wal;
use halite::region::{Region, RegionDescriptor};
use halite::scan::{Get, Scan};
use halite::schema::{Compression, Durability, FamilyDescriptor};
use halite::store::{Store, StoreOptions};
use halite::tsbs;

#[derive(Parser)]
#[command(
    name = "halite",
    version,
    about = "Time-series ingestion and storage with HBase-style row keys"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service: the HTTP API over the tables of the config.
    Serve {
        /// Config file (configs/halite.toml documents every setting).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Override a setting: --set server.listen=127.0.0.1:9000
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
    },
    /// Ingest TSBS-style cpu rows into one region with SYNC_WAL, flush,
    /// compact and read them back. Data goes to --dir or a temporary
    /// directory that is removed afterwards.
    Demo {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        #[arg(long)]
        dir: Option<PathBuf>,
        #[arg(long, default_value_t = 100)]
        hosts: u64,
        #[arg(long, default_value_t = 2000)]
        points_per_host: u64,
    },
}

fn serve(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let started = Instant::now();
    let store = Arc::new(Store::open(
        &config.data_dir,
        StoreOptions::from_config(&config),
        clock.clone(),
    )?);
    ensure_tables(&store, &config.tables)?;
    let state = Arc::new(AppState {
        store: store.clone(),
        clock,
        ready: false.into(),
        max_body: config.server.max_body.0 as usize,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&config.server.listen).await?;
        let addr = listener.local_addr()?;
        state.ready.store(true, Ordering::Release);
        println!(
            "halite serving http://{addr} (data in {}, {} table(s), started in {:.2}s)",
            config.data_dir.display(),
            store.catalog().tables(None).len(),
            started.elapsed().as_secs_f64()
        );
        let ready = state.clone();
        let shutdown = async move {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
            // Readiness drops first, so load balancers stop sending.
            ready.ready.store(false, Ordering::Release);
        };
        api::serve(listener, state.clone(), shutdown).await
    })?;
    drop(runtime);
    drop(state);
    let store = Arc::try_unwrap(store).map_err(|_| "store still in use at shutdown")?;
    store.close()?;
    println!("halite stopped cleanly");
    Ok(())
}

/// Creates the configured tables (and their namespaces) that do not exist.
fn ensure_tables(store: &Store, tables: &[CreateTable]) -> Result<(), Box<dyn std::error::Error>> {
    for t in tables {
        if !store.catalog().namespaces().contains(&t.name.namespace) {
            store.catalog().create_namespace(&t.name.namespace)?;
        }
        if store.catalog().table(&t.name).is_err() {
            store.create_table(t)?;
            println!("created table {}", t.name);
        }
    }
    Ok(())
}

fn demo(
    config: Config,
    dir: Option<PathBuf>,
    hosts: u64,
    points: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let own_dir = dir.is_none();
    let dir = dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("halite-demo-{}", std::process::id()))
    });
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
    let start_ts = SystemClock.now_ms() - points * 10_000;
    let started = Instant::now();
    let mut batch = Vec::with_capacity(1000);
    let mut rows = 0u64;
    for p in 0..points {
        let ts = start_ts + p * 10_000;
        for h in 0..hosts {
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
    let host = hosts / 2;
    let started = Instant::now();
    let page = region.scan(&Scan {
        prefix: Some(tsbs::host_prefix(host)),
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
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Serve { config, overrides } => Config::load(config.as_deref(), &overrides)
            .map_err(Into::into)
            .and_then(serve),
        Command::Demo {
            config,
            overrides,
            dir,
            hosts,
            points_per_host,
        } => Config::load(config.as_deref(), &overrides)
            .map_err(Into::into)
            .and_then(|c| demo(c, dir, hosts, points_per_host)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
