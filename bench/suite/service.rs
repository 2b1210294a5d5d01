//! Workloads 3 and 4: the services. halite, InfluxDB 1.x and
//! VictoriaMetrics run as real servers on loopback, each with data under a
//! fresh directory, each started under `strace` counting its sync system
//! calls. The same TSBS rows go to each as Influx line protocol over HTTP,
//! in the same 5,000-line bodies built before the clock starts, from two
//! keep-alive connections. Then each settles (flushes, compactions) and its
//! directory is measured, and q1/q2/q3 are timed on each, their answers
//! checked and q3's compared across systems.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    Conn, disk_bytes, disk_bytes_where, percentiles, process_cpu_secs, status_mib, url_encode,
    wait_ready,
};
use halite::tsbs::{self, CPU_FIELDS};

pub const HOSTS: u64 = 100;
pub const BATCH_LINES: usize = 5_000;
pub const CONNECTIONS: usize = 2;
pub const QUERY_HOST: &str = "host_0042";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Halite,
    /// halite through its InfluxDB 1.x protocol: `/write` into open tag
    /// sets, InfluxDB's own InfluxQL statements through `/query`.
    HaliteInflux,
    Influx,
    Victoria,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Halite => "halite",
            Kind::HaliteInflux => "halite-influxql",
            Kind::Influx => "InfluxDB",
            Kind::Victoria => "VictoriaMetrics",
        }
    }

    fn ready_path(self) -> &'static str {
        match self {
            Kind::Halite | Kind::HaliteInflux => "/readyz",
            Kind::Influx => "/ping",
            Kind::Victoria => "/health",
        }
    }

    fn is_halite(self) -> bool {
        matches!(self, Kind::Halite | Kind::HaliteInflux)
    }

    /// The table holding the data, for halite's flush and compact.
    fn halite_table(self) -> &'static str {
        match self {
            Kind::HaliteInflux => "bench:cpu",
            _ => "metrics:cpu",
        }
    }
}

pub struct Server {
    pub kind: Kind,
    /// `strace` with the server as its child while the ingest is counted;
    /// then the server itself, restarted untraced on the same data, for
    /// settling and queries: a traced process pays on its thread wake-ups,
    /// not only on the traced calls (halite's q1 took 2x as long), and
    /// strace's seccomp filter cannot be detached (the traced calls would
    /// fail with ENOSYS).
    process: Child,
    args: Vec<String>,
    pub pid: u32,
    pub addr: String,
    pub dir: PathBuf,
    trace_log: PathBuf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port()
}

/// Sync system calls, traced with seccomp-bpf so other calls run untraced.
const TRACED: &str = "trace=fsync,fdatasync,sync_file_range,syncfs,msync";

impl Server {
    /// Starts a system on a fresh data directory under `root`, under strace
    /// counting its sync calls when `traced`.
    pub fn start(kind: Kind, root: &Path, traced: bool) -> Server {
        let dir = root.join(kind.name());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("data dir");
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let args: Vec<String> = match kind {
            Kind::Halite | Kind::HaliteInflux => {
                let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/halite.toml");
                let mut args: Vec<String> = vec![
                    env!("CARGO_BIN_EXE_halite").to_string(),
                    "serve".into(),
                    "--config".into(),
                    config.display().to_string(),
                    "--set".into(),
                    format!("data_dir=\"{}\"", dir.join("data").display()),
                    "--set".into(),
                    format!("server.listen=\"{addr}\""),
                    "--set".into(),
                    "log.level=\"warn\"".into(),
                ];
                // HALITE_BENCH_SET="influx.time_window=3600" tries settings.
                for setting in std::env::var("HALITE_BENCH_SET")
                    .unwrap_or_default()
                    .split_whitespace()
                {
                    args.extend(["--set".into(), setting.to_string()]);
                }
                args
            }
            Kind::Influx => {
                let conf = dir.join("influxdb.conf");
                std::fs::write(&conf, influx_config(&dir, port)).expect("influx config");
                vec![
                    "influxd".into(),
                    "-config".into(),
                    conf.display().to_string(),
                ]
            }
            Kind::Victoria => vec![
                "victoria-metrics".into(),
                format!("-storageDataPath={}", dir.join("data").display()),
                format!("-httpListenAddr={addr}"),
                "-retentionPeriod=100y".into(),
                "-loggerLevel=ERROR".into(),
                // It closes a keep-alive connection after 2 minutes by
                // default (to spread load behind a balancer); the bench
                // sends over two connections for as long as the ingest.
                "-http.connTimeout=24h".into(),
                // Its response cache answers a repeated range query from
                // the last answer; halite and InfluxDB keep no such cache,
                // so each query is timed reading the data.
                "-search.disableCache".into(),
            ],
        };
        let trace_log = dir.join("syncs.strace");
        let (process, pid) = if traced {
            let tracer = Command::new("strace")
                .args(["-f", "--seccomp-bpf", "-ttt", "-e", TRACED, "-o"])
                .arg(&trace_log)
                .arg("--")
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("strace: install Debian's strace (make bench does)");
            wait_ready(&addr, kind.ready_path(), kind.name());
            let pid = traced_child(tracer.id());
            (tracer, pid)
        } else {
            let child = spawn(&args, kind, &dir.join("server.log"));
            wait_ready(&addr, kind.ready_path(), kind.name());
            let pid = child.id();
            (child, pid)
        };
        let server = Server {
            kind,
            process,
            pid,
            addr,
            dir,
            args,
            trace_log,
        };
        if matches!(kind, Kind::Influx | Kind::HaliteInflux) {
            let (status, out) = Conn::open(&server.addr).call(
                "POST",
                "/query?q=CREATE%20DATABASE%20bench",
                "text/plain",
                b"",
            );
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
        }
        server
    }

    pub fn write_path(&self) -> &'static str {
        match self.kind {
            Kind::Halite => "/api/v1/write?table=metrics:cpu&precision=ms",
            Kind::Influx | Kind::HaliteInflux => "/write?db=bench&precision=ms",
            Kind::Victoria => "/write?precision=ms",
        }
    }

    /// Sync system calls made between two instants (epoch seconds).
    pub fn syncs_between(&self, from: f64, to: f64) -> u64 {
        let log = std::fs::read_to_string(&self.trace_log).unwrap_or_default();
        log.lines()
            .filter(|l| !l.contains("resumed>"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .filter(|t| (from..=to).contains(t))
            .count() as u64
    }

    /// WAL syncs halite counted itself (io_uring syncs are not system calls).
    pub fn halite_wal_syncs(&self) -> u64 {
        let (_, body) = Conn::open(&self.addr).get("/metrics");
        String::from_utf8_lossy(&body)
            .lines()
            .filter(|l| l.starts_with("halite_wal_syncs_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// Makes the data reach its resting form: flushed and compacted
    /// (halite on request; the others by their own schedules, so their
    /// directories are watched until they stop changing).
    pub fn settle(&self) {
        self.settle_with(&["flush", "compact"]);
    }

    /// [`Server::settle`] without halite's major compaction: what flushes
    /// and the compaction policy leave (bench/scale.rs reads halite's write
    /// amplification there; the suite only settles).
    #[allow(dead_code)]
    pub fn flush_and_rest(&self) {
        self.settle_with(&["flush"]);
    }

    fn settle_with(&self, halite_ops: &[&str]) {
        match self.kind {
            Kind::Halite | Kind::HaliteInflux => {
                for op in halite_ops {
                    let (status, out) = Conn::open(&self.addr).call(
                        "POST",
                        &format!("/api/v1/tables/{}/{op}", self.kind.halite_table()),
                        "application/json",
                        b"",
                    );
                    assert_eq!(status, 204, "{}", String::from_utf8_lossy(&out));
                }
            }
            Kind::Influx => {}
            Kind::Victoria => {
                let (status, _) = Conn::open(&self.addr).get("/internal/force_flush");
                assert_eq!(status, 200);
            }
        }
        let mut last = 0;
        let mut same = 0;
        let started = Instant::now();
        let deadline = started + Duration::from_secs(90);
        // halite's WAL gives its preallocated segments back once idle for
        // `wal.release_after_idle` (10 s) with everything flushed: the
        // directory is not at rest before that.
        let rest_after = if self.kind.is_halite() {
            Duration::from_secs(12)
        } else {
            Duration::ZERO
        };
        while (same < 3 || started.elapsed() < rest_after) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_secs(2));
            let now = disk_bytes(&self.dir);
            if now == last {
                same += 1;
            } else {
                same = 0;
                last = now;
            }
        }
    }

    /// (the whole data directory's bytes, WAL included, and of them the
    /// WAL's and other logs kept beside the data).
    pub fn disk(&self) -> (u64, u64) {
        let not_trace = |p: &Path| !p.ends_with("syncs.strace") && !p.ends_with("influxdb.conf");
        let all = disk_bytes_where(&self.dir, &not_trace);
        let wal = match self.kind {
            Kind::Halite | Kind::HaliteInflux => disk_bytes(&self.dir.join("data/wal")),
            Kind::Influx => disk_bytes(&self.dir.join("wal")),
            Kind::Victoria => 0,
        };
        (all, wal)
    }

    /// The server's command line, as run.
    pub fn command(&self) -> String {
        self.args.join(" ")
    }

    /// Stops the server and starts it again on the same data and address,
    /// without strace.
    pub fn restart_untraced(&mut self) {
        self.halt();
        self.process = spawn(&self.args, self.kind, &self.dir.join("server.log"));
        self.pid = self.process.id();
        wait_ready(&self.addr, self.kind.ready_path(), self.kind.name());
    }

    pub fn stop(mut self) {
        self.halt();
    }

    /// SIGTERM, and SIGKILL if it has not exited in 30 s; nothing if it
    /// has exited already (its pid may be another process's by now). The
    /// server stays stopped until [`Server::restart_untraced`].
    pub fn halt(&mut self) {
        if let Ok(Some(_)) = self.process.try_wait() {
            return;
        }
        // SAFETY: signalling a process this benchmark started.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.process.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: as above.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        let _ = self.process.wait();
    }
}

/// The server alone, untraced, its output appended to `log` (a crash's
/// last words stay there for whoever keeps the data:
/// `HALITE_BENCH_KEEP=1`).
fn spawn(args: &[String], kind: Kind, log: &Path) -> Child {
    let (program, args) = args.split_first().expect("a command");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("open {}: {e}", log.display()));
    let log_too = log.try_clone().expect("clone the log's handle");
    Command::new(program)
        .args(args)
        .stdout(Stdio::from(log_too))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", kind.name()))
}

/// The pid strace started.
fn traced_child(tracer: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{tracer}/task/{tracer}/children"))
            .unwrap_or_default();
        if let Some(pid) = children
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "strace started no server");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// InfluxDB 1.x with its defaults (a WAL fsync per write, as shipped),
/// except: loopback addresses, data under `dir`, no reporting or
/// monitoring database, quiet logs, and snapshots and full compactions
/// after a few seconds of quiet rather than 10 minutes and 4 hours, so its
/// data reaches its resting size within the benchmark.
fn influx_config(dir: &Path, http_port: u16) -> String {
    format!(
        r#"reporting-disabled = true
bind-address = "127.0.0.1:{rpc}"

[meta]
  dir = "{dir}/meta"

[data]
  dir = "{dir}/data"
  wal-dir = "{dir}/wal"
  wal-fsync-delay = "0s"
  query-log-enabled = false
  cache-snapshot-write-cold-duration = "2s"
  compact-full-write-cold-duration = "5s"

[monitor]
  store-enabled = false

[http]
  bind-address = "127.0.0.1:{http_port}"
  log-enabled = false
  suppress-write-log = true

[logging]
  level = "warn"
"#,
        rpc = free_port(),
        dir = dir.display(),
    )
}

/// The TSBS rows as line protocol, in bodies of [`BATCH_LINES`] lines.
pub fn bodies(rows: u64) -> Vec<Vec<u8>> {
    let steps = rows / HOSTS;
    let mut out = Vec::new();
    let mut body = String::with_capacity(BATCH_LINES * 200);
    let mut lines = 0;
    for step in 0..steps {
        for host in 0..HOSTS {
            tsbs::cpu_line(host, step, &mut body);
            lines += 1;
            if lines == BATCH_LINES {
                out.push(std::mem::take(&mut body).into_bytes());
                body.reserve(BATCH_LINES * 200);
                lines = 0;
            }
        }
    }
    if !body.is_empty() {
        out.push(body.into_bytes());
    }
    out
}

pub struct IngestFigures {
    pub rows_per_s: f64,
    pub server_cpu_us_per_row: f64,
    pub peak_rss_mib: f64,
    pub batches: usize,
    /// Sync system calls during the ingest (in the traced pass).
    pub sync_calls: u64,
    /// Rows per second of the traced pass, which counted the syncs.
    pub traced_rows_per_s: f64,
    /// WAL syncs the server counted itself (halite's io_uring syncs).
    pub own_wal_syncs: Option<u64>,
}

/// Ingests twice on fresh data: untraced for the rate, CPU and memory
/// (strace slows a process on every thread wake-up, not only on the calls
/// it counts), then under strace for the sync counts. Returns the traced
/// server, holding the data, with the figures of both passes.
pub fn ingest_measured(
    kind: Kind,
    root: &Path,
    bodies: &[Vec<u8>],
    rows: u64,
) -> (Server, IngestFigures) {
    let plain = Server::start(kind, root, false);
    let untraced = ingest(&plain, bodies, rows);
    plain.stop();
    let server = Server::start(kind, root, true);
    let traced = ingest(&server, bodies, rows);
    let figures = IngestFigures {
        sync_calls: traced.sync_calls,
        own_wal_syncs: traced.own_wal_syncs,
        traced_rows_per_s: traced.rows_per_s,
        ..untraced
    };
    (server, figures)
}

fn ingest(server: &Server, bodies: &[Vec<u8>], rows: u64) -> IngestFigures {
    let epoch = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64()
    };
    let wal_before = server.kind.is_halite().then(|| server.halite_wal_syncs());
    let cpu_before = process_cpu_secs(server.pid);
    let from = epoch();
    let started = Instant::now();
    std::thread::scope(|s| {
        for c in 0..CONNECTIONS {
            let path = server.write_path();
            let addr = &server.addr;
            s.spawn(move || {
                let mut conn = Conn::open(addr);
                for body in bodies.iter().skip(c).step_by(CONNECTIONS) {
                    let (status, out) = conn.call("POST", path, "text/plain", body);
                    assert!(
                        (200..300).contains(&status),
                        "{} refused a write: {status} {}",
                        server.kind.name(),
                        String::from_utf8_lossy(&out)
                    );
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let to = epoch();
    let cpu = process_cpu_secs(server.pid) - cpu_before;
    IngestFigures {
        rows_per_s: rows as f64 / secs,
        server_cpu_us_per_row: cpu * 1e6 / rows as f64,
        peak_rss_mib: status_mib(server.pid, "VmHWM:"),
        batches: bodies.len(),
        sync_calls: server.syncs_between(from, to),
        traced_rows_per_s: rows as f64 / secs,
        own_wal_syncs: wal_before.map(|b| server.halite_wal_syncs() - b),
    }
}

/// The query windows: q1 the last 100 points, q2 and q3 the last hour
/// (360 points per series), all ending at the newest timestamp.
pub struct Window {
    pub last_ms: u64,
}

impl Window {
    pub fn new(rows: u64) -> Window {
        Window {
            last_ms: tsbs::T0_MS + (rows / HOSTS - 1) * tsbs::INTERVAL_MS,
        }
    }
    fn hour_after_ms(&self) -> u64 {
        self.last_ms - 3_600_000
    }
}

pub struct QueryFigures {
    /// (p50, p99) in µs.
    pub q1: (f64, f64),
    pub q2: (f64, f64),
    pub q3: (f64, f64),
    /// q3's answer: max usage_user per host.
    pub q3_answer: BTreeMap<String, f64>,
    pub commands: [String; 3],
}

/// One query as sent: method, path, body.
type Request = (String, String, String);

/// A check of an answer that returns the number of values it holds.
type Check = dyn Fn(&serde_json::Value) -> usize;

/// Latencies (µs) of `runs` requests on `conn`, after checking that the
/// answer holds `expect` values when `first` is still empty (it then keeps
/// that answer).
fn time_runs(
    conn: &mut Conn,
    (method, path, body): &Request,
    runs: usize,
    expect: usize,
    check: &Check,
    first: &mut serde_json::Value,
) -> Vec<f64> {
    let mut lat = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let (status, out) = conn.call(method, path, "application/json", body.as_bytes());
        let us = t.elapsed().as_secs_f64() * 1e6;
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&out));
        if first.is_null() {
            *first = serde_json::from_slice(&out).expect("json answer");
            let got = check(first);
            assert_eq!(got, expect, "{path} answered {got} values: {first}");
        }
        lat.push(us);
    }
    lat
}

/// Values in series-shaped answers (InfluxDB's, halite's `"shape":
/// "series"`): rows times columns other than `time`.
fn series_values(series: &[serde_json::Value]) -> usize {
    series
        .iter()
        .map(|s| {
            let columns = s["columns"].as_array().map_or(1, Vec::len) - 1;
            s["values"].as_array().map_or(0, Vec::len) * columns
        })
        .sum()
}

/// A system's three queries, as sent, and how to count an answer's values.
struct QuerySet {
    requests: [Request; 3],
    count: Box<Check>,
}

fn query_set(server: &Server, w: &Window) -> QuerySet {
    let last = w.last_ms;
    let hour = w.hour_after_ms();
    let (q1, q2, q3): (Request, Request, Request) = match server.kind {
        Kind::Halite => {
            let post = |body: String| ("POST".to_string(), "/api/v1/query".to_string(), body);
            (
                post(format!(
                    r#"{{"table":"metrics:cpu","shape":"series","series":[["metric","cpu"],["host","{QUERY_HOST}"]],"fields":["usage_user"],"limit":100}}"#
                )),
                post(format!(
                    r#"{{"table":"metrics:cpu","shape":"series","series":[["metric","cpu"],["host","{QUERY_HOST}"]],"start_ms":{},"end_ms":{}}}"#,
                    hour + 1,
                    last + 1
                )),
                post(format!(
                    r#"{{"table":"metrics:cpu","series":[["metric","cpu"]],"fields":["usage_user"],"start_ms":{},"end_ms":{},"aggregate":{{"functions":["max"]}}}}"#,
                    hour + 1,
                    last + 1
                )),
            )
        }
        Kind::Influx | Kind::HaliteInflux => {
            let get = |q: String| {
                (
                    "GET".to_string(),
                    format!("/query?db=bench&epoch=ms&q={}", url_encode(&q)),
                    String::new(),
                )
            };
            (
                get(format!(
                    "SELECT usage_user FROM cpu WHERE host = '{QUERY_HOST}' ORDER BY time DESC LIMIT 100"
                )),
                get(format!(
                    "SELECT {} FROM cpu WHERE host = '{QUERY_HOST}' AND time > {hour}ms AND time <= {last}ms",
                    CPU_FIELDS.join(",")
                )),
                get(format!(
                    "SELECT max(usage_user) FROM cpu WHERE time > {hour}ms AND time <= {last}ms GROUP BY host"
                )),
            )
        }
        Kind::Victoria => {
            let at = last as f64 / 1000.0;
            let get = |q: String| {
                (
                    "GET".to_string(),
                    format!("/api/v1/query?query={}&time={at}&nocache=1", url_encode(&q)),
                    String::new(),
                )
            };
            (
                get(format!("cpu_usage_user{{host=\"{QUERY_HOST}\"}}[1000s]")),
                get(format!(
                    "{{__name__=~\"cpu_.*\",host=\"{QUERY_HOST}\"}}[1h]"
                )),
                get("max_over_time(cpu_usage_user[1h])".to_string()),
            )
        }
    };
    let kind = server.kind;
    let count = move |answer: &serde_json::Value| -> usize {
        match kind {
            Kind::Halite => {
                if let Some(series) = answer["series"].as_array() {
                    series_values(series)
                } else if let Some(rows) = answer["rows"].as_array() {
                    rows.iter()
                        .map(|r| r["cells"].as_array().map_or(0, Vec::len))
                        .sum()
                } else {
                    answer["aggregates"].as_array().map_or(0, Vec::len)
                }
            }
            Kind::Influx | Kind::HaliteInflux => answer["results"][0]["series"]
                .as_array()
                .map_or(0, |series| series_values(series)),
            Kind::Victoria => answer["data"]["result"].as_array().map_or(0, |result| {
                result
                    .iter()
                    .map(|r| r["values"].as_array().map_or(1, Vec::len))
                    .sum()
            }),
        }
    };
    QuerySet {
        requests: [q1, q2, q3],
        count: Box::new(count),
    }
}

/// Runs of each query per system, and the rounds they are split into.
const QUERY_RUNS: [usize; 3] = [300, 200, 50];
const QUERY_ROUNDS: usize = 10;

/// Times q1, q2 and q3 on every server, taking turns: each query runs in
/// rounds, every server a slice of its runs per round, in forward order on
/// even rounds and backward on odd ones. This machine's speed drifts over
/// seconds (neighbours on the host); systems timed one after another carried
/// that drift into their ratios, systems timed in turns share it.
pub fn queries(servers: &[&Server], w: &Window) -> Vec<QueryFigures> {
    let sets: Vec<QuerySet> = servers.iter().map(|s| query_set(s, w)).collect();
    let mut conns: Vec<Conn> = servers.iter().map(|s| Conn::open(&s.addr)).collect();
    let expect = [100, 360 * CPU_FIELDS.len(), HOSTS as usize];
    let mut figures: Vec<[(f64, f64); 3]> = vec![[(0.0, 0.0); 3]; servers.len()];
    let mut q3_answers = vec![serde_json::Value::Null; servers.len()];
    for q in 0..3 {
        let mut lat: Vec<Vec<f64>> = vec![Vec::new(); servers.len()];
        let mut first = vec![serde_json::Value::Null; servers.len()];
        // Warm-up, untimed: caches and connections.
        for (i, set) in sets.iter().enumerate() {
            time_runs(
                &mut conns[i],
                &set.requests[q],
                5,
                expect[q],
                &*set.count,
                &mut first[i],
            );
        }
        for round in 0..QUERY_ROUNDS {
            let per_round = QUERY_RUNS[q].div_ceil(QUERY_ROUNDS);
            let order: Vec<usize> = if round % 2 == 0 {
                (0..servers.len()).collect()
            } else {
                (0..servers.len()).rev().collect()
            };
            for i in order {
                let set = &sets[i];
                lat[i].extend(time_runs(
                    &mut conns[i],
                    &set.requests[q],
                    per_round,
                    expect[q],
                    &*set.count,
                    &mut first[i],
                ));
            }
        }
        for (i, l) in lat.into_iter().enumerate() {
            figures[i][q] = percentiles(l);
        }
        if q == 2 {
            q3_answers = first;
        }
    }
    let show = |(m, p, b): &Request| {
        if b.is_empty() {
            format!("{m} {p}")
        } else {
            format!("{m} {p} {b}")
        }
    };
    servers
        .iter()
        .zip(sets.iter().zip(figures))
        .zip(q3_answers)
        .map(|((server, (set, [q1, q2, q3])), answer)| QueryFigures {
            q1,
            q2,
            q3,
            q3_answer: max_per_host(server.kind, &answer),
            commands: [
                show(&set.requests[0]),
                show(&set.requests[1]),
                show(&set.requests[2]),
            ],
        })
        .collect()
}

fn max_per_host(kind: Kind, answer: &serde_json::Value) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    match kind {
        Kind::Halite => {
            for a in answer["aggregates"].as_array().into_iter().flatten() {
                if let (Some(h), Some(v)) =
                    (a["series"]["host"].as_str(), a["values"]["max"].as_f64())
                {
                    out.insert(h.to_string(), v);
                }
            }
        }
        Kind::Influx | Kind::HaliteInflux => {
            for s in answer["results"][0]["series"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if let (Some(h), Some(v)) = (s["tags"]["host"].as_str(), s["values"][0][1].as_f64())
                {
                    out.insert(h.to_string(), v);
                }
            }
        }
        Kind::Victoria => {
            for r in answer["data"]["result"].as_array().into_iter().flatten() {
                if let (Some(h), Some(v)) = (
                    r["metric"]["host"].as_str(),
                    r["value"][1].as_str().and_then(|v| v.parse().ok()),
                ) {
                    out.insert(h.to_string(), v);
                }
            }
        }
    }
    out
}
