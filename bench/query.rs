//! Query benchmark (`make bench-query`), end to end over HTTP.
//!
//! Starts `halite serve` on a loopback port, loads TSBS-style data (100
//! hosts, 10 cpu fields, one row per host every 10 s; 1,000,000 rows unless
//! HALITE_BENCH_ROWS says otherwise) into a 16-bucket salted table through
//! `/api/v1/write` (line protocol, 5,000-line batches built before the clock
//! starts, 2 keep-alive client connections, SYNC_WAL), reporting rows/s and
//! the server's CPU per row, then times:
//!
//! - q1: last 100 points of one host's usage_user
//! - q2: one host, all 10 fields, one hour (360 rows)
//! - q3: all 100 hosts, max(usage_user) per host over one hour (aggregation
//!   pushed into the 16 bucket scans)
//!
//! twice: right after the load (`query_fresh`, MemStores full, flushes and
//! compactions under way) and settled after a flush and major compaction
//! (`query`, the lines the issue asks for). Then, in-process on the same
//! data after the server stops, the q3 fan-out with a one-thread pool
//! against the default pool. `HALITE_BENCH_DIR` keeps the data.

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite::catalog::TableName;
use halite::clock::SystemClock;
use halite::config::Config;
use halite::query::pool::QueryPool;
use halite::query::{AggFn, Aggregate, Query};
use halite::store::Store;
use halite::tsbs::{CPU_FIELDS, cpu_value};
use support::{Conn, process_cpu_secs, time_query};

mod support;

const HOSTS: u64 = 100;
const BATCH_LINES: usize = 5_000;
const T0_MS: u64 = 1_700_000_000_000;

/// The three queries of the issue, with their answers checked.
struct Queries {
    steps: u64,
    q1: String,
    q2: String,
    q3: String,
}

impl Queries {
    fn new(steps: u64, hour_start: u64, last_ts: u64) -> Self {
        Queries {
            steps,
            q1: r#"{"table":"metrics:cpu","series":[["metric","cpu"],["host","host_0042"]],"fields":["usage_user"],"limit":100}"#.to_string(),
            q2: format!(
                r#"{{"table":"metrics:cpu","series":[["metric","cpu"],["host","host_0042"]],"start_ms":{hour_start},"end_ms":{}}}"#,
                last_ts + 1
            ),
            q3: format!(
                r#"{{"table":"metrics:cpu","series":[["metric","cpu"]],"fields":["usage_user"],"start_ms":{hour_start},"end_ms":{},"aggregate":{{"functions":["max"]}}}}"#,
                last_ts + 1
            ),
        }
    }

    fn run(&self, addr: &str, label: &str) {
        let steps = self.steps;
        let (p50, p99) = time_query(addr, &self.q1, 300, |r| {
            assert_eq!(
                r["rows"].as_array().expect("rows").len(),
                100.min(steps as usize)
            )
        });
        println!("{label} q1 p50_us={p50:.0} p99_us={p99:.0}");
        let (p50, p99) = time_query(addr, &self.q2, 200, |r| {
            let rows = r["rows"].as_array().expect("rows");
            assert_eq!(rows.len(), 360.min(steps as usize));
            assert_eq!(rows[0]["cells"].as_array().expect("cells").len(), 10);
        });
        println!("{label} q2 p50_us={p50:.0} p99_us={p99:.0}");
        let (p50, p99) = time_query(addr, &self.q3, 50, |r| {
            assert_eq!(
                r["aggregates"].as_array().expect("aggs").len(),
                HOSTS as usize
            )
        });
        println!("{label} q3 p50_us={p50:.0} p99_us={p99:.0}");
    }
}

fn main() {
    let rows: u64 = std::env::var("HALITE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let steps = rows / HOSTS;
    // HALITE_BENCH_DIR keeps the data (for profiling a server on it after).
    let temp = tempfile::tempdir().expect("tmp");
    let dir_path = std::env::var_os("HALITE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temp.path().to_path_buf());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let config_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/halite.toml");
    let mut server = Command::new(env!("CARGO_BIN_EXE_halite"))
        .arg("serve")
        .arg("--config")
        .arg(&config_path)
        .args(["--set", &format!("data_dir=\"{}\"", dir_path.display())])
        .args(["--set", &format!("server.listen=\"{addr}\"")])
        .stdout(Stdio::null())
        .spawn()
        .expect("start halite serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "query bench: {rows} rows x {} fields into metrics:cpu (16 salt buckets) over http://{addr}",
        CPU_FIELDS.len()
    );

    // Ingest: two connections, each writing every other batch. The bodies
    // are built first, so the clock measures the server, not the client's
    // formatting.
    let mut bodies: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let mut body = String::with_capacity(BATCH_LINES * 200);
    let mut lines = 0;
    for step in 0..steps {
        for host in 0..HOSTS {
            body.push_str(&format!("cpu,host=host_{host:04} "));
            for (i, f) in CPU_FIELDS.iter().enumerate() {
                if i > 0 {
                    body.push(',');
                }
                body.push_str(&format!("{f}={}", cpu_value(host, step, i)));
            }
            body.push_str(&format!(" {}\n", T0_MS + step * 10_000));
            lines += 1;
            if lines == BATCH_LINES {
                let n = bodies[0].len() + bodies[1].len();
                bodies[n % 2].push(std::mem::take(&mut body));
                lines = 0;
            }
        }
    }
    if !body.is_empty() {
        bodies[0].push(body);
    }
    let cpu_before = process_cpu_secs(server.id());
    let started = Instant::now();
    std::thread::scope(|s| {
        for worker_bodies in &bodies {
            let addr = addr.clone();
            s.spawn(move || {
                let mut c = Conn::open(&addr);
                for body in worker_bodies {
                    let (status, out) = c.call(
                        "POST",
                        "/api/v1/write?table=metrics:cpu&precision=ms",
                        "text/plain",
                        body.as_bytes(),
                    );
                    assert_eq!(status, 204, "{}", String::from_utf8_lossy(&out));
                }
            });
        }
    });
    let ingest_secs = started.elapsed().as_secs_f64();
    let server_cpu = process_cpu_secs(server.id()) - cpu_before;
    drop(bodies);
    println!(
        "http ingest: {rows} rows in {ingest_secs:.2}s, server CPU {:.2} s ({:.1} us per row)",
        server_cpu,
        server_cpu * 1e6 / rows as f64
    );

    let last_ts = T0_MS + (steps - 1) * 10_000;
    let hour_start = last_ts.saturating_sub(3_600_000) + 1;
    // Right after the load, with flushes and compactions under way.
    let queries = Queries::new(steps, hour_start, last_ts);
    queries.run(&addr, "query_fresh");
    // Then settled, as a store is most of its life: flushed and compacted.
    let t = Instant::now();
    for op in ["flush", "compact"] {
        let (status, out) = Conn::open(&addr).call(
            "POST",
            &format!("/api/v1/tables/metrics:cpu/{op}"),
            "application/json",
            b"",
        );
        assert_eq!(status, 204, "{}", String::from_utf8_lossy(&out));
    }
    println!(
        "flush + major compaction after the load: {:.2}s",
        t.elapsed().as_secs_f64()
    );
    queries.run(&addr, "query");

    // SAFETY: signalling our own child process.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let status = server.wait().expect("server exit");
    assert!(status.success(), "server exit {status:?}");

    // Fan-out: the same q3, one thread against the default pool.
    let config = Config::load(
        Some(&config_path),
        &[format!("data_dir=\"{}\"", dir_path.display())],
    )
    .expect("config");
    let store =
        Store::open(&dir_path, config.store_options(), Arc::new(SystemClock)).expect("store");
    let table = store
        .table(&TableName::parse("metrics:cpu").expect("name"))
        .expect("table");
    let q = Query {
        series: vec![("metric".into(), halite::key::FieldValue::Str("cpu".into()))],
        start_ms: Some(hour_start),
        end_ms: Some(last_ts + 1),
        fields: vec!["usage_user".into()],
        aggregate: Some(Aggregate {
            functions: vec![AggFn::Max],
            downsample_ms: None,
            downsample: None,
            group_by: None,
        }),
        ..Query::default()
    };
    let time_pool = |pool: &QueryPool| {
        let mut best = f64::MAX;
        for _ in 0..15 {
            let t = Instant::now();
            let out =
                halite::query::aggregate::aggregate(table.clone(), pool, &q).expect("aggregate");
            assert_eq!(out.aggregates.len(), HOSTS as usize);
            best = best.min(t.elapsed().as_secs_f64());
        }
        best
    };
    let sequential = time_pool(&QueryPool::new(1));
    let parallel = time_pool(&QueryPool::new(config.server.query_threads));
    println!(
        "q3 in-process: sequential {:.2} ms, parallel ({} threads) {:.2} ms",
        sequential * 1e3,
        config.server.query_threads,
        parallel * 1e3
    );
    println!("query fanout_speedup={:.2}", sequential / parallel);
    println!("http_ingest rows_per_s={:.0}", rows as f64 / ingest_secs);
    drop(table);
    store.close().expect("close");
}
