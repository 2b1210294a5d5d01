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
use halite::cli;
use halite::clock::{Clock, SystemClock};
use halite::config::Config;
use halite::ingest::Format;
use halite::ingest::kafka::KafkaIngest;
use halite::ingest::produce::{ProduceSpec, produce};
use halite::region::block_cache::BlockCache;
use halite::region::wal::Wal;
use halite::region::{Region, RegionDescriptor};
use halite::scan::{Get, Scan};
use halite::schema::{Compression, Durability, FamilyDescriptor};
use halite::store::{Splitter, Store, StoreOptions};
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

/// How client verbs reach the server.
#[derive(clap::Args)]
struct Conn {
    /// Address of a running `halite serve`.
    #[arg(long, global = true, default_value = "127.0.0.1:8070")]
    server: String,
    /// Print the server's JSON answer instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum TableCmd {
    /// Create a table from a JSON spec (a file, or - for stdin; see docs/api.md).
    Create { spec: PathBuf },
    /// Show a table's descriptor.
    Describe { name: String },
    /// Change family attributes or add families: a JSON list of families.
    Alter { name: String, families: String },
    /// List tables.
    List,
    /// Drop a table and its data.
    Drop { name: String },
}

#[derive(Subcommand)]
enum Command {
    /// Manage tables on a running server.
    Table {
        #[command(subcommand)]
        cmd: TableCmd,
        #[command(flatten)]
        conn: Conn,
    },
    /// Write points in line protocol (arguments, or stdin when none).
    Put {
        #[arg(long)]
        table: String,
        /// Timestamp precision: ns, us, ms or s.
        #[arg(long, default_value = "ns")]
        precision: String,
        lines: Vec<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Read one row by its hex row key.
    Get {
        #[arg(long)]
        table: String,
        row: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// A raw scan (row keys in hex).
    Scan {
        #[arg(long)]
        table: String,
        #[arg(long)]
        prefix: Option<String>,
        #[arg(long)]
        start: Option<String>,
        #[arg(long)]
        stop: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[arg(long)]
        reverse: bool,
        #[arg(long)]
        continuation: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// A logical series query: --series metric=cpu,host=h1 (leading key
    /// fields, in key order).
    Query {
        #[arg(long)]
        table: String,
        #[arg(long, default_value = "")]
        series: String,
        /// Start of the time range, epoch ms (inclusive).
        #[arg(long)]
        start: Option<u64>,
        /// End of the time range, epoch ms (exclusive).
        #[arg(long)]
        end: Option<u64>,
        /// Fields (qualifiers), comma-separated.
        #[arg(long, default_value = "")]
        fields: String,
        /// Aggregators, comma-separated: min,max,sum,count,avg,first,last.
        #[arg(long, default_value = "")]
        agg: String,
        /// Downsample window in ms (with --agg).
        #[arg(long)]
        downsample: Option<u64>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[arg(long, default_value_t = 0)]
        offset: usize,
        #[arg(long)]
        reverse: bool,
        #[arg(long)]
        continuation: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Produce deterministic TSBS-style cpu points into a Kafka topic.
    Produce {
        /// bootstrap.servers of the broker.
        #[arg(long, default_value = "127.0.0.1:9092")]
        brokers: String,
        #[arg(long, default_value = "cpu")]
        topic: String,
        #[arg(long, default_value_t = 100)]
        hosts: u64,
        /// Points in all; point i is host i % hosts at step i / hosts.
        #[arg(long, default_value_t = 100_000)]
        points: u64,
        /// Points per message.
        #[arg(long, default_value_t = 10)]
        per_message: usize,
        /// line (Influx line protocol, ms timestamps) or json.
        #[arg(long, default_value = "line")]
        format: String,
        /// Points per second; 0 is as fast as possible.
        #[arg(long, default_value_t = 0)]
        rate: u64,
    },
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
    let splitter = Splitter::start(&store, config.region.split_check_interval.0)?;
    let kafka = if config.kafka.enabled() {
        let k = KafkaIngest::start(&config.kafka, store.clone(), clock.clone())?;
        println!(
            "consuming {} from {} as group {}",
            config
                .kafka
                .topics
                .iter()
                .map(|t| format!("{} -> {}", t.topic, t.table))
                .collect::<Vec<_>>()
                .join(", "),
            config.kafka.brokers,
            config.kafka.group_id
        );
        Some(k)
    } else {
        None
    };
    let state = Arc::new(AppState {
        store: store.clone(),
        clock,
        ready: false.into(),
        max_body: config.server.max_body.0 as usize,
        ingest: kafka.as_ref().map(|k| k.stats.clone()),
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
    // Stop fetching, make what was fetched durable, commit it.
    if let Some(k) = kafka {
        k.stop();
    }
    drop(runtime);
    drop(state);
    splitter.stop();
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
        RegionDescriptor::new(1, vec![family]),
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

fn client(conn: &Conn) -> cli::Client {
    cli::Client {
        addr: conn
            .server
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string(),
        json: conn.json,
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}

/// `metric=cpu,host=h1` with each value typed by the table's key schema.
fn series_values(c: &cli::Client, table: &str, series: &str) -> Result<serde_json::Value, String> {
    let pairs: Vec<(String, String)> = split_list(series)
        .into_iter()
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("series part `{p}` must be field=value"))
        })
        .collect::<Result<_, _>>()?;
    if pairs.is_empty() {
        return Ok(serde_json::json!([]));
    }
    let r = halite::client::request(
        &c.addr,
        "GET",
        &format!("/api/v1/tables/{table}"),
        None,
        b"",
    )
    .map_err(|e| format!("cannot reach halite at {}: {e}", c.addr))?;
    let desc = r.json();
    let fields = desc["key"]["fields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for (k, v) in pairs {
        let numeric = fields
            .iter()
            .find(|f| f["name"] == k.as_str())
            .is_some_and(|f| f["type"] != "string");
        let value = if numeric {
            serde_json::json!(
                v.parse::<u64>()
                    .map_err(|_| format!("key field `{k}` takes a number, got `{v}`"))?
            )
        } else {
            serde_json::json!(v)
        };
        out.push(serde_json::json!([k, value]));
    }
    Ok(serde_json::Value::Array(out))
}

fn read_input(path: &std::path::Path) -> Result<String, String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    }
}

fn run_client(command: Command) -> Result<(), String> {
    match command {
        Command::Table { cmd, conn } => {
            let c = client(&conn);
            match cmd {
                TableCmd::Create { spec } => c.table_create(&read_input(&spec)?),
                TableCmd::Describe { name } => c.table_describe(&name),
                TableCmd::Alter { name, families } => c.table_alter(&name, &families),
                TableCmd::List => c.table_list(),
                TableCmd::Drop { name } => c.table_drop(&name),
            }
        }
        Command::Put { table, precision, lines, conn } => {
            let body = if lines.is_empty() { read_input(std::path::Path::new("-"))? } else { lines.join("\n") };
            client(&conn).put(&table, &precision, &body)
        }
        Command::Get { table, row, conn } => client(&conn).get(&table, &row),
        Command::Scan { table, prefix, start, stop, limit, reverse, continuation, conn } => client(&conn).scan(
            &table,
            &serde_json::json!({ "prefix": prefix, "start": start, "stop": stop, "limit": limit, "reverse": reverse, "continuation": continuation }),
        ),
        Command::Query { table, series, start, end, fields, agg, downsample, limit, offset, reverse, continuation, conn } => {
            let c = client(&conn);
            let mut q = serde_json::json!({
                "table": table,
                "series": series_values(&c, &table, &series)?,
                "start_ms": start, "end_ms": end,
                "fields": split_list(&fields),
                "limit": limit, "offset": offset, "reverse": reverse, "continuation": continuation,
            });
            let functions = split_list(&agg);
            if !functions.is_empty() {
                q["aggregate"] = serde_json::json!({ "functions": functions, "downsample_ms": downsample });
            }
            c.query(&q)
        }
        Command::Serve { .. } | Command::Demo { .. } | Command::Produce { .. } => {
            Err("not a client verb".into())
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Produce {
            brokers,
            topic,
            hosts,
            points,
            per_message,
            format,
            rate,
        } => {
            let format = match format.as_str() {
                "line" => Ok(Format::Line),
                "json" => Ok(Format::Json),
                other => Err(format!("unknown format `{other}`: use line or json").into()),
            };
            format.and_then(|format| {
                let spec = ProduceSpec {
                    brokers,
                    topic,
                    hosts,
                    points,
                    points_per_message: per_message,
                    format,
                    rate,
                };
                let started = Instant::now();
                let messages = produce(&spec)?;
                println!(
                    "produced {points} points in {messages} messages to {} in {:.2}s",
                    spec.topic,
                    started.elapsed().as_secs_f64()
                );
                Ok(())
            })
        }
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
        other => run_client(other).map_err(Into::into),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
