//! `make bench-prom` (issue #23): Prometheus remote write into halite and
//! into VictoriaMetrics (`/api/v1/write` on both), the same snappy
//! `WriteRequest` bodies over the same two keep-alive connections:
//! samples/s and server CPU per sample. Then remote read from halite: a
//! day of one series, and a day of 100 series, p50/p99 (VictoriaMetrics
//! has no remote read; its `/api/v1/export` of the same series is printed
//! beside as a reference, not as the same work).
//!
//! Data: TSBS-style cpu values, `HALITE_BENCH_HOSTS` hosts (100) × 10
//! metrics (`cpu_usage_user` …, label `host`) × a day at 10 s (8,640
//! steps; `HALITE_BENCH_STEPS`), 2,000 samples per request, one sample
//! per series per request as Prometheus' queues send them.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use halite::ingest::remote_write::{Series, encode_message, encode_write_request};
use halite::tsbs::{CPU_FIELDS, INTERVAL_MS, T0_MS, cpu_value, host_name};
use support::{Conn, percentiles, process_cpu_secs, wait_ready};

const SAMPLES_PER_REQUEST: usize = 2_000;
const CONNECTIONS: usize = 2;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    l.local_addr().expect("addr").to_string()
}

fn bodies(hosts: u64, steps: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut batch: Vec<Series> = Vec::with_capacity(SAMPLES_PER_REQUEST);
    for step in 0..steps {
        for host in 0..hosts {
            for (i, field) in CPU_FIELDS.iter().enumerate() {
                batch.push(Series {
                    labels: vec![
                        ("__name__".into(), format!("cpu_{field}")),
                        ("host".into(), host_name(host)),
                    ],
                    samples: vec![(
                        cpu_value(host, step, i),
                        (T0_MS + step * INTERVAL_MS) as i64,
                    )],
                });
                if batch.len() == SAMPLES_PER_REQUEST {
                    out.push(encode_write_request(&batch));
                    batch.clear();
                }
            }
        }
    }
    if !batch.is_empty() {
        out.push(encode_write_request(&batch));
    }
    out
}

struct Server {
    child: Child,
    addr: String,
    name: &'static str,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(name: &'static str, dir: &Path) -> Server {
    let addr = free_addr();
    let (mut cmd, ready) = if name == "halite" {
        let mut c = Command::new(env!("CARGO_BIN_EXE_halite"));
        c.args(["serve", "--config"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/halite.toml"))
            .args([
                "--set",
                &format!("data_dir=\"{}\"", dir.join("halite").display()),
            ])
            .args(["--set", &format!("server.listen=\"{addr}\"")])
            .args(["--set", "log.level=\"warn\""]);
        (c, "/readyz")
    } else {
        let mut c = Command::new("victoria-metrics");
        c.arg(format!("-storageDataPath={}", dir.join("vm").display()))
            .arg(format!("-httpListenAddr={addr}"))
            .args(["-retentionPeriod=100y", "-loggerLevel=ERROR"]);
        (c, "/health")
    };
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("start {name}: {e} (make bench-peers installs VictoriaMetrics)")
        });
    wait_ready(&addr, ready, name);
    Server { child, addr, name }
}

/// (samples/s, server CPU µs per sample).
fn ingest(server: &Server, bodies: &[Vec<u8>], samples: u64) -> (f64, f64) {
    let cpu = process_cpu_secs(server.child.id());
    let started = Instant::now();
    std::thread::scope(|s| {
        for c in 0..CONNECTIONS {
            s.spawn(move || {
                let mut conn = Conn::open(&server.addr);
                for body in bodies.iter().skip(c).step_by(CONNECTIONS) {
                    let (status, out) =
                        conn.call("POST", "/api/v1/write", "application/x-protobuf", body);
                    assert!(
                        (200..300).contains(&status),
                        "{} refused a write: {status} {}",
                        server.name,
                        String::from_utf8_lossy(&out)
                    );
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    let cpu = process_cpu_secs(server.child.id()) - cpu;
    (samples as f64 / secs, cpu * 1e6 / samples as f64)
}

/// A snappy `ReadRequest` of one query: the day, the matchers (name,
/// value) all equality.
fn read_request(end_ms: i64, matchers: &[(&str, &str)]) -> Vec<u8> {
    let mut query = Vec::new();
    // start_timestamp_ms = 1, end_timestamp_ms = 2 (varints).
    for (field, v) in [(1u64, T0_MS as i64), (2, end_ms)] {
        query.push((field << 3) as u8);
        let mut x = v as u64;
        while x >= 0x80 {
            query.push((x as u8) | 0x80);
            x >>= 7;
        }
        query.push(x as u8);
    }
    for (name, value) in matchers {
        let mut m = Vec::new();
        encode_message(2, name.as_bytes(), &mut m);
        encode_message(3, value.as_bytes(), &mut m);
        encode_message(3, &m, &mut query);
    }
    let mut request = Vec::new();
    encode_message(1, &query, &mut request);
    snap::raw::Encoder::new()
        .compress_vec(&request)
        .expect("compress")
}

fn time(runs: usize, mut call: impl FnMut() -> usize) -> (f64, f64, usize) {
    let mut lat = Vec::with_capacity(runs);
    let mut bytes = 0;
    for _ in 0..runs {
        let t = Instant::now();
        bytes = call();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (p50, p99) = percentiles(lat);
    (p50, p99, bytes)
}

fn main() {
    let hosts = env_u64("HALITE_BENCH_HOSTS", 100);
    let steps = env_u64("HALITE_BENCH_STEPS", 8_640);
    let samples = hosts * steps * CPU_FIELDS.len() as u64;
    let dir = tempfile::tempdir().expect("temp dir");
    let bodies = bodies(hosts, steps);
    println!(
        "bench-prom: {samples} samples ({hosts} hosts x {} metrics x {steps} steps) in {} requests",
        CPU_FIELDS.len(),
        bodies.len()
    );
    let end_ms = (T0_MS + (steps - 1) * INTERVAL_MS) as i64;
    let mut rates = Vec::new();
    for name in ["halite", "VictoriaMetrics"] {
        let server = start(name, dir.path());
        let (rate, cpu) = ingest(&server, &bodies, samples);
        println!("remote_write {name} samples_per_s={rate:.0} server_cpu_us_per_sample={cpu:.2}");
        rates.push(rate);
        let host = host_name(hosts / 2);
        if name == "halite" {
            for (what, matchers, runs) in [
                (
                    "one_series_day",
                    vec![("__name__", "cpu_usage_user"), ("host", host.as_str())],
                    50,
                ),
                ("100_series_day", vec![("__name__", "cpu_usage_user")], 10),
            ] {
                let body = read_request(end_ms, &matchers);
                let mut conn = Conn::open(&server.addr);
                let (p50, p99, bytes) = time(runs, || {
                    let (status, out) =
                        conn.call("POST", "/api/v1/read", "application/x-protobuf", &body);
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
                    out.len()
                });
                println!(
                    "remote_read halite {what} p50_us={p50:.0} p99_us={p99:.0} answer_bytes={bytes}"
                );
            }
        } else {
            let _ = Command::new("curl")
                .args([
                    "-s",
                    &format!("http://{}/internal/force_flush", server.addr),
                ])
                .output();
            for (what, selector, runs) in [
                (
                    "one_series_day",
                    format!("cpu_usage_user{{host=\"{host}\"}}"),
                    50,
                ),
                ("100_series_day", "cpu_usage_user".to_string(), 10),
            ] {
                let path = format!(
                    "/api/v1/export?match[]={}&start={}&end={}",
                    support::url_encode(&selector),
                    T0_MS / 1000,
                    end_ms / 1000 + 1
                );
                let mut conn = Conn::open(&server.addr);
                let (p50, p99, bytes) = time(runs, || {
                    let (status, out) = conn.get(&path);
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
                    out.len()
                });
                println!(
                    "export VictoriaMetrics {what} p50_us={p50:.0} p99_us={p99:.0} answer_bytes={bytes} (JSON lines, for reference)"
                );
            }
        }
    }
    println!(
        "ratio remote_write halite / VictoriaMetrics = {:.2}",
        rates[0] / rates[1]
    );
}
