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
//! InfluxQL on halite and InfluxDB and the MetricsQL TSBS writes on
//! VictoriaMetrics: p50 and p99, and the answers of halite and InfluxDB
//! compared; and the same for four forms Telegraf dashboards send that
//! TSBS has none of (a rate of every host over 12 hours, the sum of those
//! rates through a subquery, median and stddev, top 5 hosts), on halite
//! and InfluxDB. Then the same points sent out of order (10 % up to a minute
//! late, 1 % an hour late) into a fresh server, its rates, and the first
//! query of each type answered as in order (`HALITE_BENCH_OUT_OF_ORDER=0`
//! skips it). Before that, a mixed run on the settled data: ingest of the
//! next hours held at half the system's own rate while two clients run
//! single-groupby-1-1-1 back to back (`HALITE_BENCH_MIXED=0` skips it).
//! Last, the Kafka leg: the data set's first `HALITE_BENCH_KAFKA_MINUTES`
//! (60; 0 skips it) through a real broker, one point a message and 100,
//! halite against a bare consumer of the same topic.
//! `HALITE_BENCH_ONLY=halite-influxql,InfluxDB` picks systems.
//! Report in `bench/SCALE.md`, the figures in `bench/scale.json` and SVG
//! charts of them in `bench/scale-*.svg` (`HALITE_BENCH_CHARTS=<json>`
//! only draws the charts of an earlier run; `HALITE_BENCH_KEEP=1` keeps
//! the data directories, to profile queries on them; `HALITE_BENCH_SET`
//! adds space-separated `--set` overrides to halite's server). It
//! measures; it asserts nothing about time.

mod charts;
#[path = "../tests/common/http.rs"]
mod http;
#[path = "../tests/common/influx.rs"]
mod influx;
#[path = "../tests/common/kafka.rs"]
mod kafka;
mod kafka_ingest;
#[path = "../tests/common/s3.rs"]
mod s3;
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
fn ingest(server: &Server, bodies: Bodies) -> Ingest {
    ingest_paced(server, bodies, None)
}

/// [`ingest`], at most `rows_per_s` when given: a body is made no sooner
/// than its first row is due.
fn ingest_paced(server: &Server, bodies: Bodies, rows_per_s: Option<f64>) -> Ingest {
    let rows = bodies.total();
    let (tx, rx) = mpsc::sync_channel::<(String, u64)>(4);
    let rx = Arc::new(Mutex::new(rx));
    let acked = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let tenths = Arc::new(Mutex::new(vec![0.0; 10]));
    let cpu_before = process_cpu_secs(server.pid);
    let bar = halite::cli::progress_bar(
        rows,
        &format!("{} ingest", server.kind.name()),
        halite::cli::ProgressUnit::Count("rows"),
    );
    let started = Instant::now();
    let generate_secs = std::thread::scope(|s| {
        let maker = s.spawn(move || {
            let mut busy = Duration::ZERO;
            let mut bodies = bodies;
            let mut made = 0u64;
            loop {
                if let Some(rate) = rows_per_s {
                    let due = Duration::from_secs_f64(made as f64 / rate);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
                let t = Instant::now();
                let Some(body) = bodies.next() else { break };
                busy += t.elapsed();
                let lines = body.bytes().filter(|b| *b == b'\n').count() as u64;
                made += lines;
                if tx.send((body, lines)).is_err() {
                    break;
                }
            }
            busy.as_secs_f64()
        });
        for _ in 0..CONNECTIONS {
            let (rx, acked, retries, tenths, bar) = (
                rx.clone(),
                acked.clone(),
                retries.clone(),
                tenths.clone(),
                bar.clone(),
            );
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
                    bar.set_position(before + lines);
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
    bar.finish_and_clear();
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
/// Write amplification two ways: halite's metric (store-file bytes
/// written by flushes and compactions ÷ the raw key and value bytes
/// ingested, which encoding and compression put far under 1), and the
/// LSM measure: store-file bytes written ÷ bytes flushed, how many times
/// compaction rewrote each flushed byte, plus the flush.
struct Amplification {
    of_ingested: f64,
    of_flushed: f64,
    /// ÷ flushed after the last flush, before the settling major
    /// compaction: what the compaction policy itself wrote during ingest.
    of_flushed_before_major: f64,
}

fn write_amplification(server: &Server) -> Option<Amplification> {
    let (_, body) = Conn::open(&server.addr).get("/metrics");
    let text = String::from_utf8_lossy(&body);
    let value = |name: &str| -> Option<f64> {
        text.lines()
            .find(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{'))
                    && l.contains("table=\"bench:cpu\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let flushed = value("halite_flushed_bytes_total")?;
    let compacted = value("halite_compaction_written_bytes_total").unwrap_or(0.0);
    let of_flushed = (flushed + compacted) / flushed.max(1.0);
    Some(Amplification {
        of_ingested: value("halite_write_amplification")?,
        of_flushed,
        of_flushed_before_major: of_flushed,
    })
}

struct QueryRun {
    name: String,
    /// The requests sent, in order.
    paths: Vec<String>,
    p50_ms: f64,
    p99_ms: f64,
    /// The answers as sent: parsed only to compare, one at a time (a
    /// high-cpu-all answer at 4,000 hosts is hundreds of MB of JSON, and
    /// ten times that parsed; keeping them parsed got the bench killed).
    answers: Vec<Vec<u8>>,
}

/// One query of type `kind` drawn by `rng`, in the language of `system`:
/// (the query, the request path). VictoriaMetrics answers the MetricsQL
/// TSBS writes for it; the types TSBS has none for give `None` there.
fn query_request(
    system: Kind,
    kind: QueryType,
    rng: &mut Rng,
    hosts: u64,
    end: u64,
) -> Option<(String, String)> {
    if system == Kind::Victoria {
        let r = kind.promql(rng, hosts, devops::START_MS, end)?;
        let path = format!(
            "/api/v1/query_range?query={}&start={}&end={}&step={}",
            url_encode(&r.query),
            r.start_s,
            r.end_s,
            r.step_s
        );
        return Some((r.query, path));
    }
    let q = kind.influxql(rng, hosts, devops::START_MS, end);
    let path = format!("/query?db=bench&epoch=ms&q={}", url_encode(&q));
    Some((q, path))
}

/// Sends query `q` as `path`: (ms it took, the answer), which must be 200.
fn timed_get(server: &Server, conn: &mut Conn, q: &str, path: &str) -> (f64, Vec<u8>) {
    let started = Instant::now();
    let (status, body) = conn.get(path);
    let ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(
        status,
        200,
        "{}: {q}: {}",
        server.kind.name(),
        String::from_utf8_lossy(&body)
    );
    (ms, body)
}

/// Clients running one query type back to back, and what they saw.
struct QueryLoad {
    p50_ms: f64,
    p99_ms: f64,
    queries: usize,
}

/// `MIXED_CLIENTS` clients run `kind` (drawn from `seed`) back to back
/// until `done` says stop: the latencies of all of them.
fn query_load(
    server: &Server,
    kind: QueryType,
    hosts: u64,
    end: u64,
    seed: u64,
    done: &(dyn Fn() -> bool + Sync),
) -> QueryLoad {
    let times: Vec<f64> = std::thread::scope(|s| {
        let clients: Vec<_> = (0..MIXED_CLIENTS as u64)
            .map(|c| {
                s.spawn(move || {
                    let mut rng = Rng::new(seed ^ (c + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    let mut conn = Conn::open(&server.addr);
                    let mut times = Vec::new();
                    while !done() {
                        let Some((q, path)) =
                            query_request(server.kind, kind, &mut rng, hosts, end)
                        else {
                            break;
                        };
                        times.push(timed_get(server, &mut conn, &q, &path).0);
                    }
                    times
                })
            })
            .collect();
        clients
            .into_iter()
            .flat_map(|c| c.join().expect("query client"))
            .collect()
    });
    let queries = times.len();
    let (p50_ms, p99_ms) = if times.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        percentiles(times)
    };
    QueryLoad {
        p50_ms,
        p99_ms,
        queries,
    }
}

/// Ingest held at half the rate the system reached alone, while
/// `MIXED_CLIENTS` clients run single-groupby-1-1-1 back to back over the
/// settled day; beside it the same query load alone first.
struct MixedRun {
    target_rows_per_s: f64,
    ingest: Ingest,
    alone: QueryLoad,
    loaded: QueryLoad,
}

const MIXED_CLIENTS: usize = 2;
/// About how long the mixed ingest runs (its rows are sized from it).
const MIXED_SECS: f64 = 60.0;
const MIXED_ALONE_SECS: f64 = 15.0;

fn mixed(server: &Server, hosts: u64, steps: u64, max_rows_per_s: f64) -> MixedRun {
    let kind = QueryType::ALL[0];
    let end = devops::START_MS + steps * devops::INTERVAL_MS;
    let started = Instant::now();
    let alone = query_load(server, kind, hosts, end, SEED, &|| {
        started.elapsed().as_secs_f64() >= MIXED_ALONE_SECS
    });
    let target = max_rows_per_s / 2.0;
    let more_steps = ((target * MIXED_SECS) / hosts as f64).ceil().max(1.0) as u64;
    let ingesting = std::sync::atomic::AtomicBool::new(true);
    let (ingest, loaded) = std::thread::scope(|s| {
        let queries = s.spawn(|| {
            query_load(server, kind, hosts, end, SEED + 1, &|| {
                !ingesting.load(Ordering::Relaxed)
            })
        });
        let ingest = ingest_paced(
            server,
            Bodies::continued(hosts, steps, more_steps, LINES_PER_BODY),
            Some(target),
        );
        ingesting.store(false, Ordering::Relaxed);
        (ingest, queries.join().expect("queries"))
    });
    eprintln!(
        "{} mixed: ingest {:.0} rows/s of {target:.0} asked; single-groupby-1-1-1 from {MIXED_CLIENTS} \
         clients p50/p99 {:.1}/{:.1} ms alone, {:.1}/{:.1} ms under ingest",
        server.kind.name(),
        ingest.rows as f64 / ingest.secs,
        alone.p50_ms,
        alone.p99_ms,
        loaded.p50_ms,
        loaded.p99_ms
    );
    MixedRun {
        target_rows_per_s: target,
        ingest,
        alone,
        loaded,
    }
}

fn queries(server: &Server, hosts: u64, steps: u64, per_type: usize) -> Vec<QueryRun> {
    let end = devops::START_MS + steps * devops::INTERVAL_MS;
    let mut rng = Rng::new(SEED);
    let mut conn = Conn::open(&server.addr);
    let mut out = Vec::new();
    for kind in QueryType::ALL {
        let mut times = Vec::with_capacity(per_type);
        let mut answers = Vec::with_capacity(per_type);
        let mut paths = Vec::with_capacity(per_type);
        for _ in 0..per_type {
            let Some((q, path)) = query_request(server.kind, kind, &mut rng, hosts, end) else {
                continue;
            };
            let (ms, body) = timed_get(server, &mut conn, &q, &path);
            times.push(ms);
            answers.push(body);
            paths.push(path);
        }
        if times.is_empty() {
            out.push(QueryRun {
                name: kind.name(),
                paths,
                p50_ms: f64::NAN,
                p99_ms: f64::NAN,
                answers,
            });
            continue;
        }
        let (p50, p99) = percentiles(times);
        eprintln!(
            "{} {}: p50 {p50:.1} ms, p99 {p99:.1} ms",
            server.kind.name(),
            kind.name()
        );
        out.push(QueryRun {
            name: kind.name(),
            paths,
            p50_ms: p50,
            p99_ms: p99,
            answers,
        });
    }
    if server.kind != Kind::Victoria {
        out.extend(dashboard_queries(server, &mut conn, steps, per_type));
    }
    out
}

/// The forms Telegraf dashboards send that TSBS has none of (issue #60),
/// over the cpu data: each `per_type` times from the same seed, over a
/// window drawn within the data (12 hours, or 1 where it says so).
const DASHBOARD_FORMS: [(&str, u64, &str); 4] = [
    (
        "rate of every host, 12h by 5m",
        12,
        "SELECT non_negative_derivative(mean(usage_user), 1s) FROM cpu WHERE time >= {from}ms AND time < {to}ms GROUP BY time(5m), hostname",
    ),
    (
        "sum of the hosts' rates (subquery), 12h by 5m",
        12,
        "SELECT sum(r) FROM (SELECT non_negative_derivative(mean(usage_user), 1s) AS r FROM cpu WHERE time >= {from}ms AND time < {to}ms GROUP BY time(5m), hostname) WHERE time >= {from}ms AND time < {to}ms GROUP BY time(5m)",
    ),
    (
        "median and stddev of every host, 1h by 1m",
        1,
        "SELECT median(usage_user), stddev(usage_user) FROM cpu WHERE time >= {from}ms AND time < {to}ms GROUP BY time(1m)",
    ),
    (
        "top 5 hosts, 1h",
        1,
        "SELECT top(usage_user, hostname, 5) FROM cpu WHERE time >= {from}ms AND time < {to}ms",
    ),
];

fn dashboard_queries(
    server: &Server,
    conn: &mut Conn,
    steps: u64,
    per_type: usize,
) -> Vec<QueryRun> {
    let mut rng = Rng::new(SEED ^ 60);
    let span_ms = steps * devops::INTERVAL_MS;
    let mut out = Vec::new();
    for (name, hours, form) in DASHBOARD_FORMS {
        let window_ms = hours * 3_600_000;
        let (mut times, mut answers, mut paths) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..per_type {
            let from = devops::START_MS + rng.below(span_ms.saturating_sub(window_ms).max(1));
            let q = form
                .replace("{from}", &from.to_string())
                .replace("{to}", &(from + window_ms).to_string());
            let path = format!("/query?db=bench&epoch=ms&q={}", url_encode(&q));
            let (ms, body) = timed_get(server, conn, &q, &path);
            times.push(ms);
            answers.push(body);
            paths.push(path);
        }
        let (p50_ms, p99_ms) = if times.is_empty() {
            (f64::NAN, f64::NAN)
        } else {
            percentiles(times)
        };
        eprintln!(
            "{} {name}: p50 {p50_ms:.1} ms, p99 {p99_ms:.1} ms",
            server.kind.name()
        );
        out.push(QueryRun {
            name: name.to_string(),
            paths,
            p50_ms,
            p99_ms,
            answers,
        });
    }
    out
}

/// Whether two answer bodies hold the same values (InfluxDB's flag on
/// long series is not an answer: see `without_long_partial`).
fn same_bodies(a: &[u8], b: &[u8]) -> bool {
    let parse = |body: &[u8]| {
        influx::without_long_partial(serde_json::from_slice(body).unwrap_or(Json::Null))
    };
    same(&parse(a), &parse(b))
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

/// The same data sent out of order ([`Bodies::out_of_order`]) into a
/// fresh server: its ingest, and how many of the in-order run's first
/// answer of each type it gave again.
struct OutOfOrderRun {
    ingest: Ingest,
    equal: usize,
    compared: usize,
}

/// Sends the first request of each query type of `earlier` again and
/// counts the answers equal to the first time's: (equal, compared).
fn same_answers(server: &Server, earlier: &[QueryRun]) -> (usize, usize) {
    let mut conn = Conn::open(&server.addr);
    let (mut equal, mut compared) = (0, 0);
    for q in earlier {
        let (Some(path), Some(before)) = (q.paths.first(), q.answers.first()) else {
            continue;
        };
        let (status, body) = conn.get(path);
        compared += 1;
        if status == 200 && same_bodies(&body, before) {
            equal += 1;
        } else {
            eprintln!(
                "{} {}: out of order, another answer",
                server.kind.name(),
                q.name
            );
        }
    }
    (equal, compared)
}

struct SystemRun {
    kind: Kind,
    ingest: Ingest,
    out_of_order: Option<OutOfOrderRun>,
    disk_bytes: u64,
    wal_bytes: u64,
    write_amplification: Option<Amplification>,
    restart_s: f64,
    queries: Vec<QueryRun>,
    mixed: Option<MixedRun>,
}

fn main() {
    let bench_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench");
    if let Some(from) = std::env::var_os("HALITE_BENCH_CHARTS") {
        let text = std::fs::read_to_string(&from).expect("read the results");
        let results: Json = serde_json::from_str(&text).expect("results are JSON");
        charts::draw_all(&results, &bench_dir).expect("draw the charts");
        println!("charts drawn into {}", bench_dir.display());
        return;
    }
    let hosts = env_f64("HALITE_BENCH_HOSTS", 4_000.0) as u64;
    let days = env_f64("HALITE_BENCH_DAYS", 1.0);
    let per_type = env_f64("HALITE_BENCH_QUERIES", 5.0) as usize;
    let steps = (days * 86_400_000.0 / devops::INTERVAL_MS as f64) as u64;
    let only = std::env::var("HALITE_BENCH_ONLY").ok();
    let with_out_of_order = std::env::var("HALITE_BENCH_OUT_OF_ORDER").map_or(true, |v| v != "0");
    let with_mixed = std::env::var("HALITE_BENCH_MIXED").map_or(true, |v| v != "0");
    let root = std::env::var_os("HALITE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let mut temp = tempfile::tempdir_in(&root).expect("bench dir");
    // Kept from the start, so a run that fails leaves its servers' logs
    // (`server.log` beside each system's data).
    if std::env::var_os("HALITE_BENCH_KEEP").is_some() {
        temp.disable_cleanup(true);
        eprintln!("the data stays under {}", temp.path().display());
    }
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
        let ingest = ingest(&server, Bodies::new(hosts, steps, LINES_PER_BODY));
        eprintln!(
            "{}: {:.0} rows/s, {:.2} µs CPU/row, peak RSS {:.0} MiB, {} retries",
            kind.name(),
            ingest.rows as f64 / ingest.secs,
            ingest.cpu_us_per_row,
            ingest.peak_rss_mib,
            ingest.retries
        );
        // halite's settling ends in a major compaction, which rewrites
        // every byte once more: the policy's own amplification is read
        // before it.
        let before_major = (kind == Kind::HaliteInflux)
            .then(|| {
                server.flush_and_rest();
                write_amplification(&server)
            })
            .flatten();
        server.settle();
        let (disk_bytes, wal_bytes) = server.disk();
        let write_amplification = (kind == Kind::HaliteInflux)
            .then(|| write_amplification(&server))
            .flatten()
            .map(|w| Amplification {
                of_flushed_before_major: before_major.as_ref().map_or(f64::NAN, |b| b.of_flushed),
                ..w
            });
        let restarting = Instant::now();
        server.restart_untraced();
        let restart_s = restarting.elapsed().as_secs_f64();
        let queries = queries(&server, hosts, steps, per_type);
        let mixed =
            with_mixed.then(|| mixed(&server, hosts, steps, ingest.rows as f64 / ingest.secs));
        server.stop();
        let out_of_order = with_out_of_order.then(|| {
            let server = Server::start(kind, temp.path(), false);
            let late = crate::ingest(&server, Bodies::out_of_order(hosts, steps, LINES_PER_BODY));
            server.settle();
            let (equal, compared) = same_answers(&server, &queries);
            eprintln!(
                "{} out of order: {:.0} rows/s, {:.2} µs CPU/row, {equal} of {compared} answers as in order",
                kind.name(),
                late.rows as f64 / late.secs,
                late.cpu_us_per_row,
            );
            server.stop();
            OutOfOrderRun {
                ingest: late,
                equal,
                compared,
            }
        });
        runs.push(SystemRun {
            kind,
            ingest,
            out_of_order,
            disk_bytes,
            wal_bytes,
            write_amplification,
            restart_s,
            queries,
            mixed,
        });
    }
    let kafka_minutes = env_f64("HALITE_BENCH_KAFKA_MINUTES", 60.0);
    let kafka_runs: Vec<KafkaRun> = if kafka_minutes > 0.0 {
        kafka_legs(hosts, kafka_minutes)
    } else {
        Vec::new()
    };
    let mut report = report(&runs, hosts, steps, per_type);
    report.push_str(&kafka_report(&kafka_runs, hosts, kafka_minutes));
    print!("{report}");
    let mut results = results_json(&runs, hosts, steps, per_type);
    results["kafka"] = kafka_runs
        .iter()
        .map(|k| {
            serde_json::json!({
                "points_per_message": k.per_message,
                "rows": k.rows,
                "messages": k.figures.messages,
                "bare_consumer_rows_per_s": k.figures.consume_only_rows_per_s,
                "rows_per_s": k.figures.rows_per_s,
                "server_cpu_us_per_row": k.figures.server_cpu_us_per_row,
            })
        })
        .collect();
    let (md, json) = if only.is_none() {
        (bench_dir.join("SCALE.md"), bench_dir.join("scale.json"))
    } else {
        // A partial run leaves the full run's report alone.
        (temp.path().join("SCALE.md"), temp.path().join("scale.json"))
    };
    std::fs::write(&md, &report).expect("write the report");
    let pretty = serde_json::to_string_pretty(&results).expect("results as JSON");
    std::fs::write(&json, pretty).expect("write the results");
    if only.is_none() {
        charts::draw_all(&results, &bench_dir).expect("draw the charts");
        println!(
            "written to {}, {} and bench/scale-*.svg",
            md.display(),
            json.display()
        );
    }
}

/// The Kafka leg: the data set's first minutes through a real broker.
struct KafkaRun {
    per_message: u64,
    rows: u64,
    figures: kafka_ingest::KafkaFigures,
}

/// The first `minutes` of the data set (every host) produced into Tansu,
/// one point per message and then 100 (a host's consecutive points), each
/// read by a bare consumer and by halite into the declared-key table of
/// `configs/tsbs-devops.toml` (every TSBS tag a key field), durably.
fn kafka_legs(hosts: u64, minutes: f64) -> Vec<KafkaRun> {
    let steps = ((minutes * 60_000.0) / devops::INTERVAL_MS as f64)
        .ceil()
        .max(1.0) as u64;
    let rows = hosts * steps;
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/tsbs-devops.toml");
    [1u64, 100]
        .into_iter()
        .map(|per_message| {
            let figures = kafka_ingest::run_with(
                &kafka_ingest::KafkaLoad {
                    data: "devops",
                    topic: "devops",
                    hosts,
                    rows,
                    per_message,
                    config: &config,
                },
                &[],
            );
            eprintln!(
                "kafka, {per_message} points a message: bare consumer {:.0} rows/s, halite {:.0} rows/s \
                 ({:.2}x), {:.2} µs CPU/row",
                figures.consume_only_rows_per_s,
                figures.rows_per_s,
                figures.rows_per_s / figures.consume_only_rows_per_s,
                figures.server_cpu_us_per_row
            );
            KafkaRun {
                per_message,
                rows,
                figures,
            }
        })
        .collect()
}

fn kafka_report(runs: &[KafkaRun], hosts: u64, minutes: f64) -> String {
    let mut r = String::new();
    if runs.is_empty() {
        return r;
    }
    let _ = writeln!(
        r,
        "\nThrough Kafka: the data set's first {minutes:.0} minutes ({hosts} hosts, {} rows) produced \
         into Tansu ({} partitions), read by a bare rdkafka consumer that drops every message, \
         and by halite into `configs/tsbs-devops.toml`'s table (every TSBS tag a key field, \
         SYNC_WAL), timed to every point durable:\n\n\
         | points a message | messages | bare consumer rows/s | halite rows/s | ÷ bare | halite CPU µs/row |\n\
         |---|---|---|---|---|---|",
        runs[0].rows,
        kafka_ingest::PARTITIONS
    );
    for k in runs {
        let f = &k.figures;
        let _ = writeln!(
            r,
            "| {} | {} | {:.0} | {:.0} | {:.2} | {:.2} |",
            k.per_message,
            f.messages,
            f.consume_only_rows_per_s,
            f.rows_per_s,
            f.rows_per_s / f.consume_only_rows_per_s,
            f.server_cpu_us_per_row
        );
    }
    r
}

/// The figures of the run, for the charts and for comparing runs.
fn results_json(runs: &[SystemRun], hosts: u64, steps: u64, per_type: usize) -> Json {
    let systems: Vec<Json> = runs
        .iter()
        .map(|s| {
            let i = &s.ingest;
            serde_json::json!({
                "name": s.kind.name(),
                "rows_per_s": i.rows as f64 / i.secs,
                "tenths": i.tenths,
                "cpu_us_per_row": i.cpu_us_per_row,
                "peak_rss_mib": i.peak_rss_mib,
                "bytes_per_value": s.disk_bytes as f64 / (i.rows * 10) as f64,
                "disk_bytes": s.disk_bytes,
                "wal_bytes": s.wal_bytes,
                "write_amplification": s.write_amplification.as_ref().map(|w| w.of_ingested),
                "write_amplification_of_flushed": s.write_amplification.as_ref().map(|w| w.of_flushed),
                "write_amplification_of_flushed_before_major": s.write_amplification.as_ref().map(|w| w.of_flushed_before_major),
                "restart_s": s.restart_s,
                "retries": i.retries,
                "out_of_order": s.out_of_order.as_ref().map(|o| serde_json::json!({
                    "rows_per_s": o.ingest.rows as f64 / o.ingest.secs,
                    "tenths": o.ingest.tenths,
                    "cpu_us_per_row": o.ingest.cpu_us_per_row,
                    "peak_rss_mib": o.ingest.peak_rss_mib,
                    "answers_equal": o.equal,
                    "answers_compared": o.compared,
                })),
                "mixed": s.mixed.as_ref().map(|m| serde_json::json!({
                    "target_rows_per_s": m.target_rows_per_s,
                    "rows_per_s": m.ingest.rows as f64 / m.ingest.secs,
                    "clients": MIXED_CLIENTS,
                    "alone_p50_ms": m.alone.p50_ms,
                    "alone_p99_ms": m.alone.p99_ms,
                    "alone_queries": m.alone.queries,
                    "loaded_p50_ms": m.loaded.p50_ms,
                    "loaded_p99_ms": m.loaded.p99_ms,
                    "loaded_queries": m.loaded.queries,
                })),
                "queries": s.queries.iter().map(|q| serde_json::json!({
                    "name": q.name,
                    "p50_ms": q.p50_ms,
                    "p99_ms": q.p99_ms,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({
        "hosts": hosts,
        "steps": steps,
        "rows": hosts * steps,
        "queries_per_type": per_type,
        "systems": systems,
    })
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
    if runs.is_empty() {
        return r;
    }
    let _ = writeln!(
        r,
        "| system | rows/s | first tenth | last tenth | last ÷ first | server CPU µs/row | peak RSS MiB | bytes/value (WAL incl.) | of it WAL | write amplification: ÷ ingested, ÷ flushed (before the settling major compaction) | restart s | 5xx retried |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
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
                .as_ref()
                .map_or("–".to_string(), |w| format!(
                    "{:.2}, {:.2} ({:.2})",
                    w.of_ingested, w.of_flushed, w.of_flushed_before_major
                )),
            s.restart_s,
            i.retries
        );
    }
    let late: Vec<&SystemRun> = runs.iter().filter(|s| s.out_of_order.is_some()).collect();
    if !late.is_empty() {
        let _ = writeln!(
            r,
            "\nThe same points again into a fresh server of each system, {}.{} % of them late by \
             up to a minute (after newer points of their host) and {}.{} % late by an hour, the \
             same bytes for every system; then the first query of each type again:\n\n\
             | system | rows/s | ÷ in order | server CPU µs/row | peak RSS MiB | 5xx retried | answers as in order |\n\
             |---|---|---|---|---|---|---|",
            devops::LATE_WITHIN_A_MINUTE / 10,
            devops::LATE_WITHIN_A_MINUTE % 10,
            devops::LATE_BY_AN_HOUR / 10,
            devops::LATE_BY_AN_HOUR % 10,
        );
        for s in late {
            let Some(o) = &s.out_of_order else { continue };
            let rate = o.ingest.rows as f64 / o.ingest.secs;
            let _ = writeln!(
                r,
                "| {} | {rate:.0} | {:.2} | {:.2} | {:.0} | {} | {} of {} |",
                s.kind.name(),
                rate / (s.ingest.rows as f64 / s.ingest.secs),
                o.ingest.cpu_us_per_row,
                o.ingest.peak_rss_mib,
                o.ingest.retries,
                o.equal,
                o.compared
            );
        }
    }
    let mixed: Vec<&SystemRun> = runs.iter().filter(|s| s.mixed.is_some()).collect();
    if !mixed.is_empty() {
        let _ = writeln!(
            r,
            "\nMixed: on the settled data, {MIXED_CLIENTS} clients run single-groupby-1-1-1 back \
             to back, {MIXED_ALONE_SECS:.0} s alone and then while the next hours of the data set \
             are sent at half the rate the system reached alone (about {MIXED_SECS:.0} s of rows):\n\n\
             | system | ingest asked rows/s | got | ÷ asked | query p50 / p99 ms alone | under ingest | p99 ÷ alone | queries alone / under ingest |\n\
             |---|---|---|---|---|---|---|---|"
        );
        for s in mixed {
            let Some(m) = &s.mixed else { continue };
            let got = m.ingest.rows as f64 / m.ingest.secs;
            let _ = writeln!(
                r,
                "| {} | {:.0} | {got:.0} | {:.2} | {:.1} / {:.1} | {:.1} / {:.1} | {:.2} | {} / {} |",
                s.kind.name(),
                m.target_rows_per_s,
                got / m.target_rows_per_s,
                m.alone.p50_ms,
                m.alone.p99_ms,
                m.loaded.p50_ms,
                m.loaded.p99_ms,
                m.loaded.p99_ms / m.alone.p99_ms,
                m.alone.queries,
                m.loaded.queries
            );
        }
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
        "\nTSBS's 15 query types, {per_type} of each from seed {SEED}, one at a time on settled \
         data: InfluxQL on halite and InfluxDB, the MetricsQL TSBS writes for VictoriaMetrics \
         (a range query; TSBS has none for high-cpu, lastpoint and groupby-orderby-limit: –). \
         The answers of halite and InfluxDB are compared; VictoriaMetrics' windows end at each \
         step where InfluxQL's buckets start there, so its answers are not. Below them, four \
         forms Telegraf dashboards send that TSBS has none of, on halite and InfluxDB.\n"
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
    let halite = with_queries.iter().find(|s| s.kind == Kind::HaliteInflux);
    let influx = with_queries.iter().find(|s| s.kind == Kind::Influx);
    for (i, q) in with_queries[0].queries.iter().enumerate() {
        let cells: Vec<String> = with_queries
            .iter()
            .map(|s| match s.queries.get(i) {
                Some(q) if q.p50_ms.is_finite() => format!("{:.1} / {:.1}", q.p50_ms, q.p99_ms),
                _ => "–".to_string(),
            })
            .collect();
        let agreement = match (halite, influx) {
            (Some(h), Some(x)) => {
                let (a, b) = (&h.queries[i], &x.queries[i]);
                // InfluxDB's flag on long series is not an answer (see
                // `without_long_partial`).
                let equal = a
                    .answers
                    .iter()
                    .zip(&b.answers)
                    .filter(|(x, y)| same_bodies(x, y))
                    .count();
                format!("{equal} of {} equal", a.answers.len())
            }
            _ => "–".to_string(),
        };
        let _ = writeln!(r, "| {} | {} | {agreement} |", q.name, cells.join(" | "));
    }
    r
}
