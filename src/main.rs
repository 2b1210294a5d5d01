//! The `halite` command: `serve` runs the service; `demo` runs it on a
//! local Kafka feed (`make run`); `produce` writes test data into Kafka; the
//! other verbs are clients of a running server.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

unsafe extern "C" {
    /// mimalloc's own setter (linked in with the allocator); its Rust
    /// bindings do not name the option set here.
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc.h (v3, as libmimalloc-sys 0.1.49
/// builds it): milliseconds before emptied pages go back to the OS.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// mimalloc hands emptied pages back to the OS 10 ms after they empty.
/// The write path frees and allocates megabytes per request (encoded
/// batches, WAL buffers), so at that delay each request faulted fresh,
/// kernel-zeroed pages back in: a second's delay halved ingest's page
/// faults (265,000 -> 143,000 for 1,000,000 rows) and cut its CPU by
/// 9-12 %. `MIMALLOC_PURGE_DELAY` in the environment still decides.
fn keep_freed_pages_a_while() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets an integer option of the allocator this binary links;
        // mimalloc allows it at any time.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 1000) };
    }
}

use clap::{Parser, Subcommand};
use halite::cli;
use halite::cli::{ProgressUnit, progress_bar};
use halite::config::Config;
use halite::ingest::Format;
use halite::ingest::produce::{Dataset, ProduceSpec, produce_with_progress};

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
    /// The API token to present (default: HALITE_TOKEN from the
    /// environment, which keeps it out of the shell's history).
    #[arg(long, global = true)]
    token: Option<String>,
    /// PEM certificates to trust for an https:// server beyond the public
    /// roots: its CA's, or its own self-signed one (default:
    /// HALITE_CACERT from the environment).
    #[arg(long, global = true)]
    cacert: Option<PathBuf>,
}

#[derive(Subcommand)]
enum TableCmd {
    /// Create a table from a JSON spec (a file, or - for stdin; see docs/api.md).
    Create { spec: PathBuf },
    /// Show a table's descriptor.
    Describe { name: String },
    /// Change family attributes or add families (a JSON list of
    /// families), and/or the durability.
    Alter {
        name: String,
        families: Option<String>,
        /// SKIP_WAL, ASYNC_WAL or SYNC_WAL (HBase's ALTER DURABILITY).
        #[arg(long)]
        durability: Option<String>,
    },
    /// List tables.
    List,
    /// Drop a table and its data.
    Drop { name: String },
    /// Flush every region's MemStore to store files (HBase's `flush`).
    Flush { name: String },
    /// Major-compact every region: deleted, expired and surplus cells go.
    Compact { name: String },
}

#[derive(Subcommand)]
enum TokenCmd {
    /// Make a token; it is printed once (docs/security.md).
    Create {
        /// What it is for (shown in `token list`).
        #[arg(long, default_value = "")]
        name: String,
        /// read, write or admin; repeat or comma-separate for several.
        #[arg(long = "scope", value_delimiter = ',', required = true)]
        scopes: Vec<String>,
        /// Namespaces it may touch; none: every namespace.
        #[arg(long = "namespace", value_delimiter = ',')]
        namespaces: Vec<String>,
    },
    /// List tokens (never their secrets).
    List,
    /// Revoke a token by id: it stops working at once.
    Revoke { id: String },
}

#[derive(Subcommand)]
enum NamespaceCmd {
    /// List namespaces.
    List,
    /// Create a namespace.
    Create { name: String },
    /// Drop an empty namespace.
    Drop { name: String },
}

/// A value filter on the command line: `--value-filter '>= 50'` (the value
/// as JSON: `50`, `50.0`, `"idle"`, `true`; a bare word is a string).
#[derive(clap::Args)]
struct ValueFilterArgs {
    /// Keep values that compare true: 'OP VALUE', OP one of < <= = != >= >.
    #[arg(long)]
    value_filter: Option<String>,
}

impl ValueFilterArgs {
    /// The request's `value_filter`, naming `target` (a scan's `column`, a
    /// query's `field`) when one is given.
    fn json(self, key: &str, target: Option<String>) -> Result<Option<serde_json::Value>, String> {
        match (self.value_filter, target) {
            (Some(f), target) => {
                let mut f = value_filter_json(&f)?;
                if let Some(t) = target {
                    f[key] = serde_json::json!(t);
                }
                Ok(Some(f))
            }
            (None, Some(_)) => Err(format!("--filter-{key} needs --value-filter")),
            (None, None) => Ok(None),
        }
    }
}

fn value_filter_json(spec: &str) -> Result<serde_json::Value, String> {
    let spec = spec.trim();
    let split = spec
        .find(|c: char| !matches!(c, '<' | '>' | '=' | '!'))
        .unwrap_or(spec.len());
    let (op, value) = spec.split_at(split);
    let value = value.trim();
    if op.is_empty() || value.is_empty() {
        return Err(format!(
            "--value-filter takes 'OP VALUE' (say '>= 50'), got `{spec}`"
        ));
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| serde_json::json!(value));
    Ok(serde_json::json!({ "op": op, "value": value }))
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
    /// Who owns what in a cluster: every partition's lease (owner and
    /// epoch) and the partitions the server holds.
    Cluster {
        #[command(flatten)]
        conn: Conn,
    },
    /// Manage API tokens on a running server (needs an admin token).
    Token {
        #[command(subcommand)]
        cmd: TokenCmd,
        #[command(flatten)]
        conn: Conn,
    },
    /// Manage namespaces on a running server.
    Namespace {
        #[command(subcommand)]
        cmd: NamespaceCmd,
        #[command(flatten)]
        conn: Conn,
    },
    /// Read one row by its hex row key.
    Get {
        #[arg(long)]
        table: String,
        row: String,
        /// `family:qualifier` or `family`, comma-separated.
        #[arg(long)]
        columns: Option<String>,
        /// Cell versions at or after this (epoch ms).
        #[arg(long)]
        min_ts: Option<u64>,
        /// Cell versions before this (epoch ms).
        #[arg(long)]
        max_ts: Option<u64>,
        #[arg(long)]
        max_versions: Option<u32>,
        #[command(flatten)]
        conn: Conn,
    },
    /// A raw scan (row keys in hex; a salted table's rows come bucket by
    /// bucket, and the bucket is shown).
    Scan {
        #[arg(long)]
        table: String,
        #[arg(long)]
        prefix: Option<String>,
        #[arg(long)]
        start: Option<String>,
        #[arg(long)]
        stop: Option<String>,
        /// Families, comma-separated.
        #[arg(long, default_value = "")]
        families: String,
        /// `family:qualifier`, comma-separated.
        #[arg(long, default_value = "")]
        columns: String,
        #[arg(long)]
        min_ts: Option<u64>,
        #[arg(long)]
        max_ts: Option<u64>,
        #[arg(long)]
        max_versions: Option<u32>,
        /// Keep cells whose qualifier starts with this.
        #[arg(long)]
        column_prefix: Option<String>,
        #[command(flatten)]
        filter: ValueFilterArgs,
        /// Filter whole rows by this column's value (`family:qualifier`).
        #[arg(long)]
        filter_column: Option<String>,
        /// With --filter-column: drop rows without the column.
        #[arg(long)]
        filter_if_missing: bool,
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
    /// Delete one row (--row, optionally --family, --column, --timestamp,
    /// --exact), or the points of series over a time range (--series,
    /// --start, --end, optionally --fields).
    Delete {
        #[arg(long)]
        table: String,
        /// Hex row key.
        #[arg(long)]
        row: Option<String>,
        #[arg(long)]
        family: Option<String>,
        /// `family:qualifier`.
        #[arg(long)]
        column: Option<String>,
        /// Versions at or before this (epoch ms); the server's clock if absent.
        #[arg(long)]
        timestamp: Option<u64>,
        /// Only the version at exactly --timestamp.
        #[arg(long)]
        exact: bool,
        /// Leading key fields: metric=cpu,host=h1.
        #[arg(long)]
        series: Option<String>,
        /// Start of the time range, epoch ms (inclusive).
        #[arg(long)]
        start: Option<u64>,
        /// End of the time range, epoch ms (exclusive).
        #[arg(long)]
        end: Option<u64>,
        /// Fields (qualifiers), comma-separated: only these are deleted.
        #[arg(long, default_value = "")]
        fields: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Count the rows of series (HBase's `count`): --series, --start, --end.
    Count {
        #[arg(long)]
        table: String,
        #[arg(long, default_value = "")]
        series: String,
        #[arg(long)]
        start: Option<u64>,
        #[arg(long)]
        end: Option<u64>,
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
        #[command(flatten)]
        filter: ValueFilterArgs,
        /// Keep the rows whose value of this field passes --value-filter
        /// (else each value is filtered on its own).
        #[arg(long)]
        filter_field: Option<String>,
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
        /// cpu (one tag, `host`) or devops (TSBS's ten tags, as
        /// `make bench-scale` sends them; line protocol only).
        #[arg(long, default_value = "cpu")]
        data: String,
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
        /// Cluster mode: send each message to the partition carrying its
        /// salt bucket in this table (`ns:table`, read from --server).
        #[arg(long)]
        by_bucket: Option<String>,
        /// Stamp each host's newest point now (cpu data), so a
        /// dashboard's default time range shows them; otherwise the same
        /// times every run (from 2023-11-14T22:13:20Z).
        #[arg(long)]
        ending_now: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Check a data directory (catalog, manifests, store files, WAL) and
    /// report damage by file and offset; changes nothing. Exit status 1
    /// when there are problems.
    Verify {
        /// The server's data_dir.
        dir: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the service: the HTTP API over the tables of the config.
    Serve {
        /// Config file (configs/halite.toml documents every setting).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Override a setting: --set server.listen=127.0.0.1:9000
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Serve without authentication even on an address other
        /// machines reach (auth.insecure).
        #[arg(long)]
        insecure: bool,
    },
    /// The demo (`make run`): a local Kafka broker (Tansu), the service on
    /// the config's tables consuming it, TSBS-style points produced into
    /// it, a query's answer; runs until Ctrl-C. Data goes to a temporary
    /// directory, removed at the end unless --keep.
    Demo {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// The Tansu binary (default: HALITE_TANSU, else the one `make venv`
        /// installs into .venv).
        #[arg(long)]
        tansu: Option<PathBuf>,
        #[arg(long, default_value_t = 100)]
        hosts: u64,
        #[arg(long, default_value_t = 300_000)]
        points: u64,
        #[arg(long)]
        keep: bool,
    },
}

/// `halite verify`: the report on stdout; 0 when nothing is wrong, 1 with
/// problems, 2 when the directory is not a data directory.
fn verify(dir: &std::path::Path, json: bool) -> ExitCode {
    let bar = progress_bar(0, "checking", ProgressUnit::Bytes);
    let report = halite::verify::verify_with_progress(dir, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report)
                .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        );
    } else {
        for f in &report.findings {
            let offset = f.offset.map_or(String::new(), |o| format!(" offset {o}:"));
            println!(
                "{} {}{offset} {}",
                if f.problem { "PROBLEM" } else { "note" },
                f.path.display(),
                f.what
            );
        }
        println!(
            "checked {} tables, {} regions, {} store files ({} cells), {} WAL segments ({} records): {} problems, {} notes",
            report.tables,
            report.regions,
            report.store_files,
            report.cells,
            report.wal_segments,
            report.wal_records,
            report.problems(),
            report.findings.len() - report.problems()
        );
    }
    if report.problems() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn client(conn: &Conn) -> Result<cli::Client, String> {
    let token = conn
        .token
        .clone()
        .or_else(|| std::env::var("HALITE_TOKEN").ok())
        .filter(|t| !t.is_empty());
    let mut tls = halite::client::Tls::from_env();
    if let Some(ca) = &conn.cacert {
        tls.ca_file = Some(ca.clone());
    }
    let http = halite::client::HttpClient::new(&tls, token, false).map_err(|e| e.to_string())?;
    Ok(cli::Client {
        addr: conn.server.trim().trim_end_matches('/').to_string(),
        json: conn.json,
        http,
    })
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
    let r = c.get_path(&format!("/api/v1/tables/{table}"))?;
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

/// `s` percent-encoded for a query string (unreserved characters, `:`
/// and `,` as they are).
fn query_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:,".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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
            let c = client(&conn)?;
            match cmd {
                TableCmd::Create { spec } => c.table_create(&read_input(&spec)?),
                TableCmd::Describe { name } => c.table_describe(&name),
                TableCmd::Alter {
                    name,
                    families,
                    durability,
                } => c.table_alter(&name, families.as_deref(), durability.as_deref()),
                TableCmd::List => c.table_list(),
                TableCmd::Drop { name } => c.table_drop(&name),
                TableCmd::Flush { name } => c.table_flush(&name),
                TableCmd::Compact { name } => c.table_compact(&name),
            }
        }
        Command::Cluster { conn } => client(&conn)?.cluster(),
        Command::Token { cmd, conn } => {
            let c = client(&conn)?;
            match cmd {
                TokenCmd::Create {
                    name,
                    scopes,
                    namespaces,
                } => c.token_create(&name, &scopes, &namespaces),
                TokenCmd::List => c.token_list(),
                TokenCmd::Revoke { id } => c.token_revoke(&id),
            }
        }
        Command::Namespace { cmd, conn } => {
            let c = client(&conn)?;
            match cmd {
                NamespaceCmd::List => c.namespace_list(),
                NamespaceCmd::Create { name } => c.namespace_create(&name),
                NamespaceCmd::Drop { name } => c.namespace_drop(&name),
            }
        }
        Command::Delete {
            table,
            row,
            family,
            column,
            timestamp,
            exact,
            series,
            start,
            end,
            fields,
            conn,
        } => {
            let c = client(&conn)?;
            let spec = match (row, series) {
                (Some(_), Some(_)) => return Err("give --row or --series, not both".into()),
                (Some(row), None) => serde_json::json!({
                    "row": row, "family": family, "column": column, "timestamp": timestamp, "exact": exact,
                }),
                (None, Some(series)) => {
                    if family.is_some() || column.is_some() || timestamp.is_some() || exact {
                        return Err(
                            "--family, --column, --timestamp and --exact go with --row".into()
                        );
                    }
                    serde_json::json!({
                        "series": series_values(&c, &table, &series)?,
                        "start_ms": start, "end_ms": end,
                        "fields": split_list(&fields),
                    })
                }
                (None, None) => {
                    return Err("give --row (one row) or --series (points of series)".into());
                }
            };
            c.delete(&table, &spec)
        }
        Command::Count {
            table,
            series,
            start,
            end,
            conn,
        } => {
            let c = client(&conn)?;
            c.count(&serde_json::json!({
                "table": table,
                "series": series_values(&c, &table, &series)?,
                "start_ms": start, "end_ms": end,
            }))
        }
        Command::Put {
            table,
            precision,
            lines,
            conn,
        } => {
            let body = if lines.is_empty() {
                read_input(std::path::Path::new("-"))?
            } else {
                lines.join("\n")
            };
            client(&conn)?.put(&table, &precision, &body)
        }
        Command::Get {
            table,
            row,
            columns,
            min_ts,
            max_ts,
            max_versions,
            conn,
        } => {
            let params: Vec<String> = [
                columns.map(|c| format!("columns={}", query_value(&c))),
                min_ts.map(|t| format!("min_ts={t}")),
                max_ts.map(|t| format!("max_ts={t}")),
                max_versions.map(|v| format!("max_versions={v}")),
            ]
            .into_iter()
            .flatten()
            .collect();
            let row = if params.is_empty() {
                row
            } else {
                format!("{row}?{}", params.join("&"))
            };
            client(&conn)?.get(&table, &row)
        }
        Command::Scan {
            table,
            prefix,
            start,
            stop,
            families,
            columns,
            min_ts,
            max_ts,
            max_versions,
            column_prefix,
            filter,
            filter_column,
            filter_if_missing,
            limit,
            offset,
            reverse,
            continuation,
            conn,
        } => {
            let mut spec = serde_json::json!({
                "prefix": prefix, "start": start, "stop": stop,
                "families": split_list(&families), "columns": split_list(&columns),
                "min_ts": min_ts, "max_ts": max_ts, "max_versions": max_versions,
                "column_prefix": column_prefix,
                "limit": limit, "offset": offset, "reverse": reverse, "continuation": continuation,
            });
            if let Some(f) = filter.json("column", filter_column)? {
                spec["value_filter"] = f;
                if spec["value_filter"]["column"].is_string() {
                    spec["value_filter"]["filter_if_missing"] =
                        serde_json::json!(filter_if_missing);
                }
            }
            client(&conn)?.scan(&table, &spec)
        }
        Command::Query {
            table,
            series,
            start,
            end,
            fields,
            agg,
            downsample,
            filter,
            filter_field,
            limit,
            offset,
            reverse,
            continuation,
            conn,
        } => {
            let c = client(&conn)?;
            let mut q = serde_json::json!({
                "table": table,
                "series": series_values(&c, &table, &series)?,
                "start_ms": start, "end_ms": end,
                "fields": split_list(&fields),
                "limit": limit, "offset": offset, "reverse": reverse, "continuation": continuation,
            });
            if let Some(f) = filter.json("field", filter_field)? {
                q["value_filter"] = f;
            }
            let functions = split_list(&agg);
            if !functions.is_empty() {
                q["aggregate"] =
                    serde_json::json!({ "functions": functions, "downsample_ms": downsample });
            }
            c.query(&q)
        }
        Command::Serve { .. }
        | Command::Demo { .. }
        | Command::Produce { .. }
        | Command::Verify { .. } => Err("not a client verb".into()),
    }
}

/// A table's descriptor as a running server has it.
fn table_descriptor(
    c: &cli::Client,
    table: &str,
) -> Result<halite::catalog::TableDescriptor, Box<dyn std::error::Error>> {
    let server = &c.addr;
    let r = c.get_path(&format!("/api/v1/tables/{table}"))?;
    if r.status != 200 {
        return Err(format!("table `{table}` at {server}: {} ({})", r.text(), r.status).into());
    }
    Ok(serde_json::from_value(r.json())
        .map_err(|e| format!("table `{table}` at {server}: unreadable descriptor: {e}"))?)
}

fn main() -> ExitCode {
    keep_freed_pages_a_while();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Produce {
            brokers,
            topic,
            data,
            hosts,
            points,
            per_message,
            format,
            rate,
            by_bucket,
            ending_now,
            conn,
        } => {
            let format = match format.as_str() {
                "line" => Ok(Format::Line),
                "json" => Ok(Format::Json),
                other => Err(format!("unknown format `{other}`: use line or json").into()),
            };
            let by_bucket = by_bucket
                .map(|table| table_descriptor(&client(&conn)?, &table))
                .transpose();
            format.and_then(|format| {
                let dataset = match data.as_str() {
                    "cpu" => Dataset::Cpu,
                    "devops" => Dataset::Devops,
                    other => {
                        return Err(format!("unknown data `{other}`: use cpu or devops").into());
                    }
                };
                let spec = ProduceSpec {
                    brokers,
                    topic,
                    dataset,
                    hosts,
                    points,
                    points_per_message: per_message,
                    format,
                    rate,
                    by_bucket: by_bucket?,
                    ending_now,
                };
                let started = Instant::now();
                let bar = progress_bar(points, "producing", ProgressUnit::Count("points"));
                let messages = produce_with_progress(&spec, &mut |done| bar.set_position(done));
                bar.finish_and_clear();
                let messages = messages?;
                println!(
                    "produced {points} points in {messages} messages to {} in {:.2}s",
                    spec.topic,
                    started.elapsed().as_secs_f64()
                );
                Ok(())
            })
        }
        Command::Verify { dir, json } => return verify(&dir, json),
        Command::Serve {
            config,
            mut overrides,
            insecure,
        } => {
            if insecure {
                overrides.push("auth.insecure=true".into());
            }
            Config::load(config.as_deref(), &overrides)
                .map_err(Into::into)
                .and_then(halite::app::serve)
        }
        Command::Demo {
            config,
            overrides,
            tansu,
            hosts,
            points,
            keep,
        } => Config::load(config.as_deref(), &overrides)
            .map_err(Into::into)
            .and_then(|c| halite::demo::demo(c, tansu, hosts, points, keep)),
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
