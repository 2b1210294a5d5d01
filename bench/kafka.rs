//! Kafka ingestion benchmark (`make bench-kafka`), against a real broker.
//!
//! Starts Tansu on a loopback port, pre-loads 2,000,000 TSBS cpu rows
//! (line protocol, one row per message, keyed by host; HALITE_BENCH_ROWS
//! says otherwise) into an 8-partition topic with `halite produce`, then
//! measures in the same run:
//!
//! a. a bare rdkafka consumer that reads every message and drops it
//!    (partitions assigned directly, so no group join is timed);
//! b. `halite serve` consuming the topic into the SYNC_WAL table of
//!    `configs/halite.toml`, timed from its first consumed message to the
//!    moment every point is durable (the pipeline's own counters, polled
//!    every 10 ms), and on to the commit of the last offset.
//!
//! It prints the two lines, then the server's CPU per row.
//! `HALITE_BENCH_SET` adds `--set` overrides to the server, space-separated.

#[path = "../tests/common/http.rs"]
mod http;
#[path = "../tests/common/kafka.rs"]
mod kafka;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

const HOSTS: u64 = 100;
const PARTITIONS: i32 = 8;

/// User + system CPU seconds a process has used so far.
fn process_cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// CPU seconds per kind of server thread (names with their digits
/// dropped: `halite-kafka-w0` counts as `halite-kafka-w`).
fn thread_cpu_secs(pid: u32) -> std::collections::BTreeMap<String, f64> {
    let mut by_kind = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return by_kind;
    };
    for t in tasks.flatten() {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let name: String = head
            .split_once('(')
            .map_or("", |(_, n)| n)
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .collect();
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        *by_kind.entry(name).or_insert(0.0) += (ticks(11) + ticks(12)) / hz;
    }
    by_kind
}

/// Reads every message of the topic from the beginning; rows/s.
fn consume_only(bootstrap: &str, topic: &str, messages: u64) -> f64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "bench-consume-only")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("tpl");
    }
    consumer.assign(&tpl).expect("assign");
    let mut read = 0u64;
    let mut bytes = 0usize;
    let mut started = None;
    let deadline = Instant::now() + Duration::from_secs(300);
    while read < messages {
        assert!(
            Instant::now() < deadline,
            "consume-only read {read} of {messages}"
        );
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("message");
            started.get_or_insert_with(Instant::now);
            bytes += rdkafka::Message::payload(&m).map_or(0, <[u8]>::len);
            read += 1;
        }
    }
    let secs = started.expect("read something").elapsed().as_secs_f64();
    std::hint::black_box(bytes);
    read as f64 / secs
}

fn ingest_status(addr: &str) -> serde_json::Value {
    let r = http::request(addr, "GET", "/api/v1/ingest", None, b"").expect("ingest status");
    serde_json::from_slice(&r.body).expect("json")
}

fn main() {
    let rows: u64 = std::env::var("HALITE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let broker = kafka::Broker::start();
    broker.create_topic("cpu", PARTITIONS as u32);
    let exe = env!("CARGO_BIN_EXE_halite");

    let t = Instant::now();
    let out = Command::new(exe)
        .args(["produce", "--brokers", &broker.bootstrap, "--topic", "cpu"])
        .args(["--hosts", &HOSTS.to_string(), "--points", &rows.to_string()])
        .args(["--per-message", "1"])
        .output()
        .expect("halite produce");
    assert!(
        out.status.success(),
        "produce failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "kafka bench: {rows} TSBS rows (10 fields, line protocol, one row per message) \
         in {PARTITIONS} partitions, pre-loaded in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let consume_rate = consume_only(&broker.bootstrap, "cpu", rows);
    println!("kafka_consume_only rows_per_s={consume_rate:.0}");

    // HALITE_BENCH_SET="kafka.writers=2 kafka.batch_messages=2000" tries settings.
    let extra_settings: Vec<String> = std::env::var("HALITE_BENCH_SET")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    let temp = tempfile::tempdir().expect("tmp");
    let port = http::free_port();
    let addr = format!("127.0.0.1:{port}");
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/halite.toml");
    let mut server = Command::new(exe)
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .args(["--set", &format!("data_dir=\"{}\"", temp.path().display())])
        .args(["--set", &format!("server.listen=\"{addr}\"")])
        .args(["--set", &format!("kafka.brokers=\"{}\"", broker.bootstrap)])
        .args(["--set", "kafka.commit_interval=\"100ms\""])
        .args(extra_settings.iter().flat_map(|s| ["--set", s.as_str()]))
        .stdout(Stdio::null())
        .spawn()
        .expect("start halite serve");
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut started: Option<(Instant, f64)> = None;
    let mut durable: Option<(f64, f64)> = None;
    let mut threads_at_start = std::collections::BTreeMap::new();
    let mut threads_at_durable = std::collections::BTreeMap::new();
    loop {
        assert!(Instant::now() < deadline, "halite did not ingest every row");
        std::thread::sleep(Duration::from_millis(10));
        let Ok(r) = http::request(&addr, "GET", "/api/v1/ingest", None, b"") else {
            continue;
        };
        let s: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
        if started.is_none() && s["messages"].as_u64() > Some(0) {
            started = Some((Instant::now(), process_cpu_secs(server.id())));
            threads_at_start = thread_cpu_secs(server.id());
        }
        let Some((t0, cpu0)) = started else { continue };
        if durable.is_none() && s["points"].as_u64() >= Some(rows) {
            durable = Some((
                t0.elapsed().as_secs_f64(),
                process_cpu_secs(server.id()) - cpu0,
            ));
            threads_at_durable = thread_cpu_secs(server.id());
        }
        let committed: i64 = s["committed"]
            .as_array()
            .map_or(0, |c| c.iter().filter_map(|c| c["offset"].as_i64()).sum());
        if durable.is_some() && committed as u64 >= rows {
            break;
        }
    }
    let (t0, _) = started.expect("started");
    let committed_secs = t0.elapsed().as_secs_f64();
    let (secs, cpu) = durable.expect("durable");
    let status = ingest_status(&addr);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let exit = server.wait().expect("wait");

    let rate = rows as f64 / secs;
    println!(
        "kafka_ingest rows_per_s={rate:.0} cells_per_s={:.0} ratio_to_consume_only={:.2}",
        rate * 10.0,
        rate / consume_rate
    );
    println!(
        "kafka_ingest durable_s={secs:.2} all_committed_s={committed_secs:.2} \
         server_cpu_us_per_row={:.2} pauses={} commits={} (server exit: {exit})",
        cpu * 1e6 / rows as f64,
        status["pauses"],
        status["commits"]
    );
    // Where the server's CPU went, per kind of thread (µs per row).
    let per_thread: Vec<String> = threads_at_durable
        .iter()
        .map(|(name, end)| {
            let us = (end - threads_at_start.get(name).unwrap_or(&0.0)) * 1e6 / rows as f64;
            (name, us)
        })
        .filter(|(_, us)| *us >= 0.05)
        .map(|(name, us)| format!("{name}={us:.2}"))
        .collect();
    println!(
        "kafka_ingest server_cpu_us_per_row_by_thread {}",
        per_thread.join(" ")
    );
}
