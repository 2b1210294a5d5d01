//! `make soak-prom` (issue #23): the Prometheus test's setup, run for
//! `HALITE_SOAK_MINUTES` (default 10) at a realistic size. A real
//! Prometheus scrapes `HALITE_SOAK_TARGETS` exporters (4) of
//! `HALITE_SOAK_HOSTS` hosts (100) each — per host 10 cpu gauges, 4
//! request counters and a 12-bucket latency histogram, 28 series — and
//! halite's own `/metrics`, every second, and remote-writes everything to
//! halite with its default queue settings. A second Prometheus with an
//! empty TSDB reads from halite (remote read) and answers dashboard
//! queries all along. Every 30 s: samples/s arriving, the writer's
//! pending samples and send lag, failed and retried samples, halite's
//! RSS, CPU and disk, query latencies. At the end the same PromQL goes
//! through both Prometheus and the answers are compared. Report in
//! `bench/SOAK-PROM.md`. It measures; it asserts nothing.

#[path = "../tests/common/http.rs"]
mod http;
#[path = "../tests/common/prometheus.rs"]
mod prometheus;
mod support;

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus::Prometheus;
use serde_json::Value as Json;
use support::{disk_bytes, percentiles, process_cpu_secs, status_mib};

const SAMPLE: Duration = Duration::from_secs(30);
const MODES: [&str; 10] = [
    "user",
    "system",
    "idle",
    "nice",
    "iowait",
    "irq",
    "softirq",
    "steal",
    "guest",
    "guest_nice",
];
const CODES: [&str; 4] = ["200", "404", "500", "503"];
const BUCKETS: [&str; 12] = [
    "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf",
];

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Target `target`'s exposition at its `n`th scrape: TSBS cpu values as
/// gauges, counters growing by steps that differ by host and code, a
/// histogram whose observations move between buckets.
fn exposition(target: u64, hosts: u64, n: u64) -> String {
    let mut out = String::with_capacity(hosts as usize * 28 * 64);
    out.push_str("# TYPE soak_cpu_usage gauge\n");
    for h in 0..hosts {
        let host = halite::tsbs::host_name(target * hosts + h);
        for (i, mode) in MODES.iter().enumerate() {
            let v = halite::tsbs::cpu_value(target * hosts + h, n, i);
            let _ = writeln!(out, "soak_cpu_usage{{host=\"{host}\",mode=\"{mode}\"}} {v}");
        }
    }
    out.push_str("# TYPE soak_requests_total counter\n");
    for h in 0..hosts {
        let host = halite::tsbs::host_name(target * hosts + h);
        for (i, code) in CODES.iter().enumerate() {
            let step = (h % 7 + 1) * (4 - i as u64);
            let _ = writeln!(
                out,
                "soak_requests_total{{host=\"{host}\",code=\"{code}\"}} {}",
                n * step + n / 3
            );
        }
    }
    out.push_str("# TYPE soak_latency_seconds histogram\n");
    for h in 0..hosts {
        let host = halite::tsbs::host_name(target * hosts + h);
        // 20 observations a scrape; bucket b takes a share that cycles
        // with the host and the scrape, so every bucket is a counter.
        let total = n * 20;
        for (b, le) in BUCKETS.iter().enumerate() {
            let per = |r: u64| {
                if b + 1 == BUCKETS.len() {
                    20
                } else {
                    (20 * (b as u64 + 1 + r) / (BUCKETS.len() as u64 + 2)).min(20)
                }
            };
            let cumulative: u64 = (0..3)
                .map(|r| {
                    let first = (r + 3 - h % 3) % 3;
                    let scrapes = if first >= n {
                        0
                    } else {
                        (n - 1 - first) / 3 + 1
                    };
                    scrapes * per(r)
                })
                .sum();
            let _ = writeln!(
                out,
                "soak_latency_seconds_bucket{{host=\"{host}\",le=\"{le}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "soak_latency_seconds_sum{{host=\"{host}\"}} {}\nsoak_latency_seconds_count{{host=\"{host}\"}} {total}",
            total as f64 * 0.137
        );
    }
    out
}

/// The sum over a metric's lines of a Prometheus' own `/metrics`.
fn own_metric(p: &Prometheus, name: &str) -> f64 {
    p.metrics()
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

struct Sample {
    at_s: f64,
    samples_per_s: f64,
    pending: f64,
    lag_s: f64,
    failed: f64,
    retried: f64,
    rss_mib: f64,
    cpu_percent: f64,
    disk_mib: f64,
    queries: Vec<(f64, f64, usize)>,
}

/// The dashboard queries the reader answers all along: (name, PromQL,
/// range in seconds (0: an instant query), step).
fn dashboard(first_instance: &str) -> Vec<(&'static str, String, f64, f64)> {
    vec![
        (
            "one series, 10 min",
            format!(
                "max_over_time(soak_cpu_usage{{instance=\"{first_instance}\",host=\"{}\",mode=\"user\"}}[10m])",
                halite::tsbs::host_name(0)
            ),
            0.0,
            0.0,
        ),
        (
            "rate by code, 4 series, 5 min",
            format!(
                "sum by (code) (rate(soak_requests_total{{host=\"{}\"}}[1m]))",
                halite::tsbs::host_name(1)
            ),
            300.0,
            15.0,
        ),
        (
            "p99 over 1,200 buckets, 5 min",
            format!(
                "histogram_quantile(0.99, sum by (le) (rate(soak_latency_seconds_bucket{{instance=\"{first_instance}\"}}[1m])))"
            ),
            300.0,
            30.0,
        ),
    ]
}

fn main() {
    let minutes = env_f64("HALITE_SOAK_MINUTES", 10.0);
    let targets = env_f64("HALITE_SOAK_TARGETS", 4.0) as u64;
    let hosts = env_f64("HALITE_SOAK_HOSTS", 100.0) as u64;
    let duration = Duration::from_secs_f64(minutes * 60.0);
    let tmp = tempfile::tempdir().expect("tmp");
    let data = tmp.path().join("halite");
    let port = http::free_port();
    let addr = format!("127.0.0.1:{port}");
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/halite.toml");
    let mut server = Command::new(env!("CARGO_BIN_EXE_halite"))
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--set", &format!("data_dir=\"{}\"", data.display())])
        .args(["--set", &format!("server.listen=\"{addr}\"")])
        .args(["--set", "log.level=\"warn\""])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("halite serve");
    let pid = server.id();
    support::wait_ready(&addr, "/readyz", "halite");

    let stop = Arc::new(AtomicBool::new(false));
    let exporters: Vec<String> = (0..targets)
        .map(|t| prometheus::exporter(stop.clone(), move |n| exposition(t, hosts, n)))
        .collect();
    let listed = exporters
        .iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let writer = Prometheus::with_config(
        &tmp.path().join("writer"),
        &format!(
            "global:\n  scrape_interval: 1s\n\
             scrape_configs:\n  - job_name: soak\n    static_configs:\n      - targets: [{listed}]\n\
             \x20 - job_name: halite\n    static_configs:\n      - targets: ['{addr}']\n\
             remote_write:\n  - url: http://{addr}/api/v1/write\n"
        ),
    );
    let reader = Arc::new(Prometheus::with_config(
        &tmp.path().join("reader"),
        &format!(
            "global:\n  scrape_interval: 1m\nremote_read:\n  - url: http://{addr}/api/v1/read\n    read_recent: true\n"
        ),
    ));
    let series = targets * hosts * (MODES.len() + CODES.len() + BUCKETS.len() + 2) as u64;
    eprintln!(
        "soak-prom: {targets} targets × {hosts} hosts ({series} series) scraped every second, {minutes} min"
    );

    // Dashboard queries through the reader, one every 5 s in turn.
    let board = dashboard(&exporters[0]);
    let latencies = Arc::new(parking_lot::Mutex::new(vec![
        Vec::<f64>::new();
        board.len()
    ]));
    let errors = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let querier = {
        let (stop, latencies, errors, reader, board) = (
            stop.clone(),
            latencies.clone(),
            errors.clone(),
            reader.clone(),
            board.clone(),
        );
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(30));
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let (_, expr, range, step) = &board[i % board.len()];
                let end = now_s();
                let started = Instant::now();
                let answer = if *range == 0.0 {
                    reader.query_at(expr, end)
                } else {
                    reader.query_range(expr, end - range, end, *step)
                };
                let ms = started.elapsed().as_secs_f64() * 1e3;
                let has_data = answer["data"]["result"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty());
                if answer["status"] == "success" && has_data {
                    latencies.lock()[i % board.len()].push(ms);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
                std::thread::sleep(Duration::from_secs(5));
            }
        })
    };

    let started = Instant::now();
    let mut samples = Vec::new();
    let sent = |p: &Prometheus| own_metric(p, "prometheus_remote_storage_samples_total");
    let (mut last_sent, mut last_cpu, mut last_at) =
        (sent(&writer), process_cpu_secs(pid), Instant::now());
    while started.elapsed() < duration {
        std::thread::sleep(SAMPLE);
        let now_sent = sent(&writer);
        let now_cpu = process_cpu_secs(pid);
        let seconds = last_at.elapsed().as_secs_f64();
        let taken: Vec<Vec<f64>> = std::mem::take(&mut *latencies.lock());
        *latencies.lock() = vec![Vec::new(); board.len()];
        let queries = taken
            .into_iter()
            .map(|lat| {
                if lat.is_empty() {
                    (0.0, 0.0, 0)
                } else {
                    let n = lat.len();
                    let (p50, p99) = percentiles(lat);
                    (p50, p99, n)
                }
            })
            .collect();
        let s = Sample {
            at_s: started.elapsed().as_secs_f64(),
            samples_per_s: (now_sent - last_sent) / seconds,
            pending: own_metric(&writer, "prometheus_remote_storage_samples_pending"),
            lag_s: own_metric(
                &writer,
                "prometheus_remote_storage_highest_timestamp_in_seconds",
            ) - own_metric(
                &writer,
                "prometheus_remote_storage_queue_highest_sent_timestamp_seconds",
            ),
            failed: own_metric(&writer, "prometheus_remote_storage_samples_failed_total"),
            retried: own_metric(&writer, "prometheus_remote_storage_samples_retried_total"),
            rss_mib: status_mib(pid, "VmRSS:"),
            cpu_percent: (now_cpu - last_cpu) / seconds * 100.0,
            disk_mib: disk_bytes(&data) as f64 / (1 << 20) as f64,
            queries,
        };
        eprintln!(
            "soak-prom t={:.0}s samples/s={:.0} pending={:.0} lag={:.1}s failed={} retried={} rss={:.0}MiB cpu={:.0}% disk={:.0}MiB queries={:?}",
            s.at_s,
            s.samples_per_s,
            s.pending,
            s.lag_s,
            s.failed,
            s.retried,
            s.rss_mib,
            s.cpu_percent,
            s.disk_mib,
            s.queries
        );
        samples.push(s);
        (last_sent, last_cpu, last_at) = (now_sent, now_cpu, Instant::now());
    }
    stop.store(true, Ordering::SeqCst);
    let _ = querier.join();

    // The same PromQL through both, at an instant every sample of which
    // has been sent (the lag was seconds), over ranges the run covers.
    let at = now_s() - 30.0;
    let checks = [
        "count(soak_cpu_usage)",
        "sum by (mode) (soak_cpu_usage)",
        "sum(rate(soak_requests_total[5m]))",
        "sum by (code) (increase(soak_requests_total[2m]))",
        "histogram_quantile(0.9, sum by (le) (rate(soak_latency_seconds_bucket[5m])))",
        "max_over_time(soak_cpu_usage{host=\"host_0003\"}[5m])",
        "avg_over_time(soak_cpu_usage{mode=\"idle\"}[1m] offset 2m)",
        "count_over_time(up[5m])",
        "sum(rate(halite_http_requests_total[1m]))",
    ];
    let mut agreed = 0;
    let mut report_checks = String::new();
    for q in checks {
        let (a, b) = (writer.query_at(q, at), reader.query_at(q, at));
        let same = same_answer(&a, &b);
        agreed += usize::from(same);
        let _ = writeln!(
            report_checks,
            "| `{q}` | {} | {} |",
            a["data"]["result"].as_array().map_or(0, Vec::len),
            if same { "equal" } else { "DIFFERENT" }
        );
    }
    let failed = own_metric(&writer, "prometheus_remote_storage_samples_failed_total");
    let total_sent = sent(&writer);
    let peak_rss = status_mib(pid, "VmHWM:");
    let query_errors = errors.load(Ordering::Relaxed);
    drop(writer);
    drop(reader);
    // SAFETY: signalling the child we started.
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
    let exit = server.wait().expect("wait");

    let mut report = String::new();
    let _ = writeln!(
        report,
        "# Soak: Prometheus remote write and read\n\n`make soak-prom`: {minutes} min. A real \
         Prometheus scrapes {targets} exporters of {hosts} hosts ({series} series in all) and \
         halite's `/metrics` every second and remote-writes to halite (default queue settings); \
         a second Prometheus with an empty TSDB reads from halite and answers a dashboard query \
         every 5 s. Sampled every {} s. Samples sent in all {total_sent:.0}, failed {failed}; \
         reader queries without an answer: {query_errors}. halite exit: {exit}; peak RSS \
         {peak_rss:.0} MiB.\n",
        SAMPLE.as_secs()
    );
    let names: Vec<&str> = board.iter().map(|b| b.0).collect();
    let _ = writeln!(
        report,
        "| t (s) | samples/s | pending | send lag s | failed | retried | RSS MiB | CPU % | disk MiB | {} |\n|---|---|---|---|---|---|---|---|---|{}",
        names
            .iter()
            .map(|n| format!("{n}: p50 / p99 ms"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(names.len())
    );
    for s in &samples {
        let _ = writeln!(
            report,
            "| {:.0} | {:.0} | {:.0} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
            s.at_s,
            s.samples_per_s,
            s.pending,
            s.lag_s,
            s.failed,
            s.retried,
            s.rss_mib,
            s.cpu_percent,
            s.disk_mib,
            s.queries
                .iter()
                .map(|(p50, p99, n)| if *n == 0 {
                    "–".to_string()
                } else {
                    format!("{p50:.0} / {p99:.0}")
                })
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    let third = (samples.len() / 3).max(1);
    let mean = |xs: &[Sample], f: &dyn Fn(&Sample) -> f64| {
        xs.iter().map(f).sum::<f64>() / xs.len().max(1) as f64
    };
    let first = &samples[..third.min(samples.len())];
    let last = &samples[samples.len().saturating_sub(third)..];
    let _ = writeln!(
        report,
        "\nLast third ÷ first third: samples/s {:.2}, RSS {:.2}, CPU {:.2}.\n\n\
         The same PromQL through the writer (its own TSDB) and the reader (halite only), \
         {agreed} of {} equal:\n\n| query | series | answers |\n|---|---|---|\n{report_checks}",
        mean(last, &|s| s.samples_per_s) / mean(first, &|s| s.samples_per_s).max(1e-9),
        mean(last, &|s| s.rss_mib) / mean(first, &|s| s.rss_mib).max(1e-9),
        mean(last, &|s| s.cpu_percent) / mean(first, &|s| s.cpu_percent).max(1e-9),
        checks.len()
    );
    print!("{report}");
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/SOAK-PROM.md");
    std::fs::write(&out, report).expect("write bench/SOAK-PROM.md");
    println!("written to {}", out.display());
}

/// Two answers with the same series and values within 1e-9 relative.
fn same_answer(a: &Json, b: &Json) -> bool {
    let sorted = |j: &Json| {
        let mut r = j["data"]["result"].as_array().cloned().unwrap_or_default();
        r.sort_by_key(|x| x["metric"].to_string());
        r
    };
    let (a, b) = (sorted(a), sorted(b));
    a.len() == b.len()
        && !a.is_empty()
        && a.iter().zip(&b).all(|(x, y)| {
            x["metric"] == y["metric"] && {
                let v = |j: &Json| j["value"][1].as_str().and_then(|s| s.parse::<f64>().ok());
                match (v(x), v(y)) {
                    (Some(p), Some(q)) => {
                        p == q
                            || (p - q).abs() <= 1e-9 * p.abs().max(q.abs())
                            || (p.is_nan() && q.is_nan())
                    }
                    _ => false,
                }
            }
        })
}
