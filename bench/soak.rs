//! Soak (`make soak`, issue #7): the service of `configs/halite.toml`
//! ingests TSBS cpu points from a real broker (Tansu) at a fixed rate for
//! `HALITE_SOAK_MINUTES` (default 30) while a client queries it every
//! second. Every 30 s it samples ingest throughput, RSS, open files, disk
//! use and query latency; at the end it compares the first third of the run
//! with the last (flat means the ratio stays near 1) and writes the report
//! to `bench/SOAK.md`. It measures; it asserts nothing.

#[path = "../tests/common/http.rs"]
mod http;
#[path = "../tests/common/kafka.rs"]
mod kafka;
#[path = "../tests/common/s3.rs"]
mod s3;
mod support;

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use support::{disk_bytes, percentiles, status_mib};

const HOSTS: u64 = 100;
const SAMPLE: Duration = Duration::from_secs(30);

struct Sample {
    at_s: f64,
    points_per_s: f64,
    rss_mib: f64,
    open_files: usize,
    disk_mib: f64,
    query_p50_ms: f64,
    query_p99_ms: f64,
    queries: usize,
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn points(addr: &str) -> u64 {
    let r = http::request(addr, "GET", "/api/v1/ingest", None, b"").expect("status");
    let s: Json = serde_json::from_slice(&r.body).expect("json");
    s["points"].as_u64().unwrap_or(0)
}

fn main() {
    let minutes: f64 = std::env::var("HALITE_SOAK_MINUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30.0);
    let rate: u64 = std::env::var("HALITE_SOAK_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        // Tansu keeps topics in memory: 5,000 points/s for 30 min is ~2 GB.
        .unwrap_or(5_000);
    let duration = Duration::from_secs_f64(minutes * 60.0);
    let broker = kafka::Broker::start();
    broker.create_topic("cpu", 4);
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("data");
    let port = http::free_port();
    let addr = format!("127.0.0.1:{port}");
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/halite.toml");
    let mut server = Command::new(env!("CARGO_BIN_EXE_halite"))
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--set", &format!("data_dir=\"{}\"", data.display())])
        .args(["--set", &format!("server.listen=\"{addr}\"")])
        .args(["--set", &format!("kafka.brokers=\"{}\"", broker.bootstrap)])
        .args(["--set", "log.level=\"warn\""])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("halite serve");
    let pid = server.id();
    support::wait_ready(&addr, "/readyz", "halite");

    let total_points = rate * duration.as_secs();
    let producer = kafka::produce_in_background(
        &broker.bootstrap,
        "cpu",
        kafka::Load {
            hosts: HOSTS,
            points: total_points,
            per_message: 10,
            rate,
        },
    );
    // Queries all along, over the newest ten minutes of data time (60
    // steps): one host's points of a field, and the per-minute max of a
    // field over every host.
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(parking_lot::Mutex::new(Vec::<f64>::new()));
    let querier = {
        let (stop, latencies, addr) = (stop.clone(), latencies.clone(), addr.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let steps = points(&addr) / HOSTS;
                let end = halite::tsbs::T0_MS + steps * halite::tsbs::INTERVAL_MS;
                let start = end.saturating_sub(60 * halite::tsbs::INTERVAL_MS);
                let q = if i % 2 == 0 {
                    json!({"table": "metrics:cpu",
                           "series": [["metric", "cpu"], ["host", halite::tsbs::host_name(i % HOSTS)]],
                           "fields": ["usage_user"], "start_ms": start, "end_ms": end})
                } else {
                    json!({"table": "metrics:cpu", "series": [["metric", "cpu"]],
                           "fields": ["usage_user"], "start_ms": start, "end_ms": end,
                           "aggregate": {"functions": ["max"], "downsample_ms": 60_000}})
                };
                let started = Instant::now();
                if let Ok(r) = http::request(
                    &addr,
                    "POST",
                    "/api/v1/query",
                    Some("application/json"),
                    q.to_string().as_bytes(),
                ) && r.status == 200
                {
                    latencies.lock().push(started.elapsed().as_secs_f64() * 1e3);
                }
                i += 1;
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut last_points = points(&addr);
    let mut last_at = Instant::now();
    while started.elapsed() < duration {
        std::thread::sleep(SAMPLE);
        let now_points = points(&addr);
        let lat: Vec<f64> = std::mem::take(&mut *latencies.lock());
        let (p50, p99) = if lat.is_empty() {
            (0.0, 0.0)
        } else {
            percentiles(lat.clone())
        };
        let s = Sample {
            at_s: started.elapsed().as_secs_f64(),
            points_per_s: (now_points - last_points) as f64 / last_at.elapsed().as_secs_f64(),
            rss_mib: status_mib(pid, "VmRSS:"),
            open_files: open_files(pid),
            disk_mib: disk_bytes(&data) as f64 / (1 << 20) as f64,
            query_p50_ms: p50,
            query_p99_ms: p99,
            queries: lat.len(),
        };
        eprintln!(
            "soak t={:.0}s points/s={:.0} rss={:.0}MiB fds={} disk={:.0}MiB q p50={:.1}ms p99={:.1}ms",
            s.at_s,
            s.points_per_s,
            s.rss_mib,
            s.open_files,
            s.disk_mib,
            s.query_p50_ms,
            s.query_p99_ms
        );
        samples.push(s);
        last_points = now_points;
        last_at = Instant::now();
    }
    stop.store(true, Ordering::SeqCst);
    let _ = querier.join();
    let _ = producer.join();
    let peak_rss = status_mib(pid, "VmHWM:");
    // SAFETY: signalling the child we started.
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
    let exit = server.wait().expect("wait");

    let third = (samples.len() / 3).max(1);
    let mean = |xs: &[Sample], f: &dyn Fn(&Sample) -> f64| {
        xs.iter().map(f).sum::<f64>() / xs.len().max(1) as f64
    };
    let first = &samples[..third.min(samples.len())];
    let last = &samples[samples.len().saturating_sub(third)..];
    let mut report = String::new();
    let _ = writeln!(
        report,
        "# Soak\n\n`make soak`: {minutes} min at {rate} points/s offered ({HOSTS} hosts, 10 fields, \
         10 points a message, 4 partitions) into the SYNC_WAL table of configs/halite.toml, \
         one query a second; sampled every {} s. Server exit: {exit}; peak RSS {peak_rss:.0} MiB.\n",
        SAMPLE.as_secs()
    );
    let _ = writeln!(
        report,
        "| t (s) | points/s | RSS MiB | open files | disk MiB | query p50 ms | query p99 ms | queries |\n|---|---|---|---|---|---|---|---|"
    );
    for s in &samples {
        let _ = writeln!(
            report,
            "| {:.0} | {:.0} | {:.0} | {} | {:.0} | {:.1} | {:.1} | {} |",
            s.at_s,
            s.points_per_s,
            s.rss_mib,
            s.open_files,
            s.disk_mib,
            s.query_p50_ms,
            s.query_p99_ms,
            s.queries
        );
    }
    let _ = writeln!(
        report,
        "\nLast third ÷ first third: points/s {:.2}, RSS {:.2}, open files {:.2}, query p50 {:.2} \
         (disk grows with the data: {:.0} → {:.0} MiB).",
        mean(last, &|s| s.points_per_s) / mean(first, &|s| s.points_per_s),
        mean(last, &|s| s.rss_mib) / mean(first, &|s| s.rss_mib),
        mean(last, &|s| s.open_files as f64) / mean(first, &|s| s.open_files as f64),
        mean(last, &|s| s.query_p50_ms) / mean(first, &|s| s.query_p50_ms).max(1e-9),
        mean(first, &|s| s.disk_mib),
        mean(last, &|s| s.disk_mib),
    );
    print!("{report}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/SOAK.md");
    std::fs::write(&out, report).expect("write bench/SOAK.md");
    println!("written to {}", out.display());
}
