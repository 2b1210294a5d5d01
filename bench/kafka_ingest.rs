#![allow(dead_code)]
//! The Kafka ingestion measurement, shared by `make bench-kafka` and the
//! suite (`make bench`): a real broker (Tansu) pre-loaded with TSBS rows,
//! one per message, then a bare rdkafka consumer and halite reading them.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{process_cpu_secs, thread_cpu_secs};
use crate::{http, kafka};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

const HOSTS: u64 = 100;
pub const PARTITIONS: i32 = 8;

/// Reads every message of the topic from the beginning; messages/s.
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

/// What one run measured.
pub struct KafkaFigures {
    pub messages: u64,
    pub preload_secs: f64,
    pub consume_only_rows_per_s: f64,
    pub rows_per_s: f64,
    pub committed_secs: f64,
    pub durable_secs: f64,
    pub server_cpu_us_per_row: f64,
    pub pauses: serde_json::Value,
    pub commits: serde_json::Value,
    /// Server CPU per row by kind of thread, µs.
    pub per_thread: Vec<(String, f64)>,
    pub exit: String,
}

/// Pre-loads `rows` TSBS rows (one per message) into a fresh broker's
/// 8-partition topic, then times a bare consumer and halite (with
/// `extra_settings` as `--set` overrides) reading them all.
pub fn run(rows: u64, extra_settings: &[String]) -> KafkaFigures {
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/halite.toml");
    run_with(
        &KafkaLoad {
            data: "cpu",
            topic: "cpu",
            hosts: HOSTS,
            rows,
            per_message: 1,
            config: &config,
        },
        extra_settings,
    )
}

/// What goes through the broker: `halite produce --data <data>` into
/// `topic`, read by halite under `config` (whose `[kafka.topics]` names
/// the topic).
pub struct KafkaLoad<'a> {
    pub data: &'a str,
    pub topic: &'a str,
    pub hosts: u64,
    pub rows: u64,
    pub per_message: u64,
    pub config: &'a std::path::Path,
}

/// [`run`] for any load.
pub fn run_with(load: &KafkaLoad, extra_settings: &[String]) -> KafkaFigures {
    let rows = load.rows;
    let broker = kafka::Broker::start();
    broker.create_topic(load.topic, PARTITIONS as u32);
    let exe = env!("CARGO_BIN_EXE_halite");

    let t = Instant::now();
    let out = Command::new(exe)
        .args([
            "produce",
            "--brokers",
            &broker.bootstrap,
            "--topic",
            load.topic,
        ])
        .args(["--data", load.data])
        .args([
            "--hosts",
            &load.hosts.to_string(),
            "--points",
            &rows.to_string(),
        ])
        .args(["--per-message", &load.per_message.to_string()])
        .output()
        .expect("halite produce");
    assert!(
        out.status.success(),
        "produce failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "produced N points in M messages to …"
    let said = String::from_utf8_lossy(&out.stdout);
    let messages: u64 = said
        .split_whitespace()
        .skip_while(|w| *w != "in")
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("produce said: {said}"));
    let preload_secs = t.elapsed().as_secs_f64();
    let consume_rate =
        consume_only(&broker.bootstrap, load.topic, messages) * rows as f64 / messages as f64;

    let temp = tempfile::tempdir().expect("tmp");
    let port = http::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut server = Command::new(exe)
        .arg("serve")
        .arg("--config")
        .arg(load.config)
        .args(["--set", &format!("data_dir=\"{}\"", temp.path().display())])
        .args(["--set", &format!("server.listen=\"{addr}\"")])
        .args(["--set", &format!("kafka.brokers=\"{}\"", broker.bootstrap)])
        .args(["--set", "kafka.commit_interval=\"100ms\""])
        .args(["--set", "log.level=\"warn\""])
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
        if durable.is_some() && committed as u64 >= messages {
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
    let per_thread = threads_at_durable
        .iter()
        .map(|(name, end)| {
            let us = (end - threads_at_start.get(name).unwrap_or(&0.0)) * 1e6 / rows as f64;
            (name.clone(), us)
        })
        .filter(|(_, us)| *us >= 0.05)
        .collect();
    KafkaFigures {
        messages,
        preload_secs,
        consume_only_rows_per_s: consume_rate,
        rows_per_s: rows as f64 / secs,
        committed_secs,
        durable_secs: secs,
        server_cpu_us_per_row: cpu * 1e6 / rows as f64,
        pauses: status["pauses"].clone(),
        commits: status["commits"].clone(),
        per_thread,
        exit: exit.to_string(),
    }
}
