//! `make bench-scale` (issue #24): TSBS's devops data set, cpu-only, at
//! scale — `HALITE_BENCH_HOSTS` hosts (4,000) with TSBS's ten tags, ten
//! cpu fields every 10 s for `HALITE_BENCH_DAYS` days (1: 34.56M rows) —
//! streamed as it is made (`halite::tsbs::devops::Bodies`: the same bytes
//! for every system, never on disk) into halite (its InfluxDB protocol,
//! open tag sets), VictoriaMetrics and InfluxDB 1.6 over the same two
//! keep-alive connections, 10,000 lines a body. For each: rows/s overall
//! and per tenth of the run, server CPU per row, peak RSS, bytes per value
//! of the whole data directory (WAL included) once settled, write
//! amplification (halite), restart time on the data. Then TSBS's 15 query
//! types, `HALITE_BENCH_QUERIES` (5) of each from one seed, through
//! InfluxQL on halite and InfluxDB: p50 and p99, and the answers of the two
//! compared. `HALITE_BENCH_ONLY=halite-influxql,InfluxDB` picks systems.
//! Report in `bench/SCALE.md`. It measures; it asserts nothing about time.

#[path = "../tests/common/http.rs"]
mod http;
#[path = "../tests/common/influx.rs"]
mod influx;
#[allow(dead_code)]
#[path = "suite/service.rs"]
mod service;
mod support;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use halite::tsbs::devops::{self, Bodies, QueryType, Rng};
use serde_json::Value as Json;
use service::{Kind, Server};
use support::{Conn, percentiles, process_cpu_secs, status_mib, url_encode};

const LINES_PER_BODY: usize = 10_000;
const CONNECTIONS: usize = 2;
const SEED: u64 = 2016;

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Ingest {
    rows: u64,
    secs: f64,
    tenths: Vec<f64>,
    cpu_us_per_row: f64,
    peak_rss_mib: f64,
    retries: u64,
    generate_secs: f64,
}

/// Streams the data set into `server`: one thread makes the bodies, two
/// send them; a 5xx (a full cache or MemStore) is retried after 100 ms
/// and counted.
fn ingest(server: &Server, hosts: u64, steps: u64) -> Ingest {
    let bodies = Bodies::new(hosts, steps, LINES_PER_BODY);
    let rows = bodies.total();
    let (tx, rx) = mpsc::sync_channel::<(String, u64)>(4);
    let rx = Arc::new(Mutex::new(rx));
    let acked = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let tenths = Arc::new(Mutex::new(vec![0.0; 10]));
    let cpu_before = process_cpu_secs(server.pid);
    let started = Instant::now();
    let generate_secs = std::thread::scope(|s| {
        let maker = s.spawn(move || {
            let mut busy = Duration::ZERO;
            let mut bodies = bodies;
            loop {
                let t = Instant::now();
                let Some(body) = bodies.next() else { break };
                busy += t.elapsed();
                let lines = body.bytes().filter(|b| *b == b'\n').count() as u64;
                if tx.send((body, lines)).is_err() {
                    break;
                }
            }
            busy.as_secs_f64()
        });
        for _ in 0..CONNECTIONS {
            let (rx, acked, retries, tenths) =
                (rx.clone(), acked.clone(), retries.clone(), tenths.clone());
            let (addr, path, name) = (&server.addr, server.write_path(), server.kind.name());
            s.spawn(move || {
                let mut conn = Conn::open(addr);
                loop {
                    let next = rx.lock().expect("receiver").recv();
                    let Ok((body, lines)) = next else { break };
                    loop {
                        let (status, out) = conn.call("POST", path, "text/plain", body.as_bytes());
                        if (200..300).contains(&status) {
                            break;
                        }
                        assert!(
                            status >= 500,
                            "{name} refused a write: {status} {}",
                            String::from_utf8_lossy(&out)
                        );
                        retries.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    let before = acked.fetch_add(lines, Ordering::Relaxed);
                    let (from, to) = (before * 10 / rows, (before + lines) * 10 / rows);
                    if to > from {
                        let mut t = tenths.lock().expect("tenths");
                        for k in from..to.min(10) {
                            t[k as usize] = started.elapsed().as_secs_f64();
                        }
                    }
                }
            });
        }
        maker.join().expect("maker")
    });
    let secs = started.elapsed().as_secs_f64();
    let marks = tenths.lock().expect("tenths").clone();
    let per_tenth = rows as f64 / 10.0;
    let tenths = (0..10)
        .map(|k| {
            let from = if k == 0 { 0.0 } else { marks[k - 1] };
            per_tenth / (marks[k] - from).max(1e-9)
        })
        .collect();
    Ingest {
        rows,
        secs,
        tenths,
        cpu_us_per_row: (process_cpu_secs(server.pid) - cpu_before) * 1e6 / rows as f64,
        peak_rss_mib: status_mib(server.pid, "VmHWM:"),
        retries: retries.load(Ordering::Relaxed),
        generate_secs,
    }
}

/// halite's write amplification gauge for the bench table.
fn write_amplification(server: &Server) -> Option<f64> {
    let (_, body) = Conn::open(&server.addr).get("/metrics");
    String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.starts_with("halite_write_amplification{") && l.contains("table=\"bench:cpu\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

struct QueryRun {
    name: String,
    p50_ms: f64,
    p99_ms: f64,
    answers: Vec<Json>,
}

fn queries(server: &Server, hosts: u64, steps: u64, per_type: usize) -> Vec<QueryRun> {
    let end = devops::START_MS + steps * devops::INTERVAL_MS;
    let mut rng = Rng::new(SEED);
    let mut conn = Conn::open(&server.addr);
    let mut out = Vec::new();
    for kind in QueryType::ALL {
        let mut times = Vec::with_capacity(per_type);
        let mut answers = Vec::with_capacity(per_type);
        for _ in 0..per_type {
            let q = kind.influxql(&mut rng, hosts, devops::START_MS, end);
            let path = format!("/query?db=bench&epoch=ms&q={}", url_encode(&q));
            let started = Instant::now();
            let (status, body) = conn.get(&path);
            times.push(started.elapsed().as_secs_f64() * 1e3);
            assert_eq!(
                status,
                200,
                "{}: {q}: {}",
                server.kind.name(),
                String::from_utf8_lossy(&body)
            );
            answers.push(serde_json::from_slice(&body).unwrap_or(Json::Null));
        }
        let (p50, p99) = percentiles(times);
        eprintln!(
            "{} {}: p50 {p50:.1} ms, p99 {p99:.1} ms",
            server.kind.name(),
            kind.name()
        );
        out.push(QueryRun {
            name: kind.name(),
            p50_ms: p50,
            p99_ms: p99,
            answers,
        });
    }
    out
}

/// Whether two answers hold the same values (floats within 1e-9
/// relative).
fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
        }
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

struct SystemRun {
    kind: Kind,
    ingest: Ingest,
    disk_bytes: u64,
    wal_bytes: u64,
    write_amplification: Option<f64>,
    restart_s: f64,
    queries: Vec<QueryRun>,
}

fn main() {
    let hosts = env_f64("HALITE_BENCH_HOSTS", 4_000.0) as u64;
    let days = env_f64("HALITE_BENCH_DAYS", 1.0);
    let per_type = env_f64("HALITE_BENCH_QUERIES", 5.0) as usize;
    let steps = (days * 86_400_000.0 / devops::INTERVAL_MS as f64) as u64;
    let only = std::env::var("HALITE_BENCH_ONLY").ok();
    let root = std::env::var_os("HALITE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let temp = tempfile::tempdir_in(&root).expect("bench dir");
    println!(
        "bench-scale: {hosts} hosts × {steps} steps = {} rows, {per_type} queries of each type",
        hosts * steps
    );
    let mut runs = Vec::new();
    for kind in [Kind::HaliteInflux, Kind::Victoria, Kind::Influx] {
        if only.as_deref().is_some_and(|o| {
            !o.split(',')
                .any(|k| kind.name().eq_ignore_ascii_case(k.trim()))
        }) {
            continue;
        }
        let mut server = Server::start(kind, temp.path(), false);
        let ingest = ingest(&server, hosts, steps);
        eprintln!(
            "{}: {:.0} rows/s, {:.2} µs CPU/row, peak RSS {:.0} MiB, {} retries",
            kind.name(),
            ingest.rows as f64 / ingest.secs,
            ingest.cpu_us_per_row,
            ingest.peak_rss_mib,
            ingest.retries
        );
        server.settle();
        let (disk_bytes, wal_bytes) = server.disk();
        let write_amplification = (kind == Kind::HaliteInflux)
            .then(|| write_amplification(&server))
            .flatten();
        let restarting = Instant::now();
        server.restart_untraced();
        let restart_s = restarting.elapsed().as_secs_f64();
        let queries = if kind == Kind::Victoria {
            Vec::new()
        } else {
            queries(&server, hosts, steps, per_type)
        };
        server.stop();
        runs.push(SystemRun {
            kind,
            ingest,
            disk_bytes,
            wal_bytes,
            write_amplification,
            restart_s,
            queries,
        });
    }
    let report = report(&runs, hosts, steps, per_type);
    print!("{report}");
    if only.is_none() {
        let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/SCALE.md");
        std::fs::write(&out, &report).expect("write bench/SCALE.md");
        println!("written to {}", out.display());
    }
}

fn report(runs: &[SystemRun], hosts: u64, steps: u64, per_type: usize) -> String {
    let rows = hosts * steps;
    let mut r = String::new();
    let _ = writeln!(
        r,
        "# At scale: TSBS devops, cpu-only\n\n`make bench-scale`: {hosts} hosts with TSBS's ten tags, \
         ten cpu fields every 10 s, {steps} steps: {rows} rows ({} values), streamed as made, \
         {LINES_PER_BODY} lines a body over {CONNECTIONS} keep-alive connections, the same bytes \
         for every system, one system at a time on this machine.\n",
        rows * 10
    );
    let _ = writeln!(
        r,
        "| system | rows/s | first tenth | last tenth | last ÷ first | server CPU µs/row | peak RSS MiB | bytes/value (WAL incl.) | of it WAL | write amplification | restart s | 5xx retried |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for s in runs {
        let i = &s.ingest;
        let _ = writeln!(
            r,
            "| {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.1} MiB | {} | {:.1} | {} |",
            s.kind.name(),
            i.rows as f64 / i.secs,
            i.tenths[0],
            i.tenths[9],
            i.tenths[9] / i.tenths[0],
            i.cpu_us_per_row,
            i.peak_rss_mib,
            s.disk_bytes as f64 / (i.rows * 10) as f64,
            s.wal_bytes as f64 / (1 << 20) as f64,
            s.write_amplification
                .map_or("–".to_string(), |w| format!("{w:.2}")),
            s.restart_s,
            i.retries
        );
    }
    let _ = writeln!(r, "\nRows/s per tenth of the run:\n");
    for s in runs {
        let tenths: Vec<String> = s.ingest.tenths.iter().map(|t| format!("{t:.0}")).collect();
        let _ = writeln!(
            r,
            "- {}: {} (the client spent {:.0} s making the bodies)",
            s.kind.name(),
            tenths.join(", "),
            s.ingest.generate_secs
        );
    }
    let with_queries: Vec<&SystemRun> = runs.iter().filter(|s| !s.queries.is_empty()).collect();
    if with_queries.is_empty() {
        return r;
    }
    let _ = writeln!(
        r,
        "\nTSBS's 15 query types in InfluxQL, {per_type} of each from seed {SEED}, one at a time \
         on settled data (VictoriaMetrics answers PromQL, not InfluxQL: not run here yet).\n"
    );
    let names: Vec<&str> = with_queries.iter().map(|s| s.kind.name()).collect();
    let _ = writeln!(
        r,
        "| query | {} | answers |\n|---|{}---|",
        names
            .iter()
            .map(|n| format!("{n} p50 / p99 ms"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(names.len())
    );
    for (i, q) in with_queries[0].queries.iter().enumerate() {
        let cells: Vec<String> = with_queries
            .iter()
            .map(|s| format!("{:.1} / {:.1}", s.queries[i].p50_ms, s.queries[i].p99_ms))
            .collect();
        let agreement = if with_queries.len() == 2 {
            let (a, b) = (&with_queries[0].queries[i], &with_queries[1].queries[i]);
            // InfluxDB's flag on long series is not an answer (see
            // `without_long_partial`).
            let equal = a
                .answers
                .iter()
                .zip(&b.answers)
                .filter(|(x, y)| {
                    same(
                        &influx::without_long_partial((*x).clone()),
                        &influx::without_long_partial((*y).clone()),
                    )
                })
                .count();
            format!("{equal} of {} equal", a.answers.len())
        } else {
            "–".to_string()
        };
        let _ = writeln!(r, "| {} | {} | {agreement} |", q.name, cells.join(" | "));
    }
    r
}
