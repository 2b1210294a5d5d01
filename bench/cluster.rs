//! Cluster benchmark (`make bench-cluster`, issue 21): the same TSBS rows
//! ingested by one node and by three nodes of a cluster on this machine,
//! against a real broker (Tansu) and a real S3 server (s3s-fs).
//!
//! 1. The rows go into an 8-partition topic first (`halite produce
//!    --by-bucket`, through a node with Kafka off that only tells the key
//!    schema), so the nodes' work is timed alone.
//! 2. One node (a cluster of one: the same code path) consumes the topic;
//!    then three nodes (another consumer group, another object-store
//!    prefix) consume it. Rows/s from the nodes' start to every point
//!    readable, and the CPU the nodes used by then (start-up, group joins
//!    and rebalances included) per row; and the CPU per row once the
//!    flushes and compactions the rows brought are done (a catch-up cut
//!    at its last row leaves a varying share of them owed).
//! 3. q1 (the last 100 points of one host) and q2 (one host, all fields,
//!    one hour) through a node of the three that does not own the host's
//!    bucket, through its owner, and through the single node, once every
//!    region was major-compacted (no flush or compaction under the
//!    timings).
//! 4. A steady stream at a fixed rate, consumed by the single node and the
//!    three at once: the CPU per row of each over the same window (the
//!    catch-up's CPU in 2 also holds the flushes by age and compactions its
//!    length brings, and three nodes on two cores take longer).
//! 5. One of the three killed (SIGKILL) while its partitions hold unflushed
//!    points: the time until the survivors own every partition, and the
//!    bytes they replay against the bytes the victim had not published.
//!
//! Two cores run all the nodes, the broker and the object store here: the
//! cluster cannot be faster; the CPU per row says what it costs.

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::http::{free_port, request};
use common::s3::{ACCESS_KEY, S3, SECRET_KEY};
use common::scenario::Scenario;
use common::server::Server;
use serde_json::Value as Json;
use support::{process_cpu_secs, thread_cpu_secs, time_query};

const TOPIC: &str = "cpu";
const PARTITIONS: u32 = 8;
const TABLE: &str = "metrics:cpu";
const HOSTS: u64 = 100;
/// Long enough for several flushes by age (5 s) of every region, so that
/// when one lands does not decide the CPU per row.
const STEADY_WINDOW: Duration = Duration::from_secs(22);

struct Node {
    name: String,
    server: Server,
}

impl Node {
    fn addr(&self) -> &str {
        &self.server.addr
    }

    fn cpu(&self) -> f64 {
        process_cpu_secs(self.server.child.id())
    }
}

/// The nodes' CPU seconds by thread name, summed over the nodes.
fn threads(nodes: &[&Node]) -> BTreeMap<String, f64> {
    let mut by_name = BTreeMap::new();
    for n in nodes {
        for (name, secs) in thread_cpu_secs(n.server.child.id()) {
            *by_name.entry(name).or_insert(0.0) += secs;
        }
    }
    by_name
}

/// Where the nodes' CPU went from `before` (by thread name, the largest
/// first), and the flushes and compactions they ran: what a cluster adds
/// per row shows up here.
fn print_work(label: &str, nodes: &[&Node], before: &BTreeMap<String, f64>) {
    let mut sorted: Vec<(String, f64)> = threads(nodes)
        .into_iter()
        .map(|(name, secs)| {
            let was = before.get(&name).copied().unwrap_or(0.0);
            (name, secs - was)
        })
        .collect();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top: Vec<String> = sorted
        .iter()
        .take(12)
        .map(|(name, secs)| format!("{}={secs:.2}", name.replace(' ', "_")))
        .collect();
    println!("cluster_threads {label} cpu_s {}", top.join(" "));
    let sum = |name: &str| -> f64 { nodes.iter().map(|n| metric_sum(n.addr(), name)).sum() };
    println!(
        "cluster_work {label} flushes={} flushed_mib={:.1} compactions={} compaction_read_mib={:.1} (from the start)",
        sum("halite_flushes_total"),
        sum("halite_flushed_bytes_total") / 1048576.0,
        sum("halite_compactions_total"),
        sum("halite_compaction_read_bytes_total") / 1048576.0,
    );
}

/// A metric's samples in a node's scrape, summed over their labels.
fn metric_sum(addr: &str, name: &str) -> f64 {
    let Ok(r) = request(addr, "GET", "/metrics", None, b"") else {
        return 0.0;
    };
    r.text()
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn get_json(addr: &str, path: &str) -> Option<Json> {
    let r = request(addr, "GET", path, None, b"").ok()?;
    (r.status == 200).then(|| serde_json::from_slice(&r.body).ok())?
}

/// Starts a node of `cluster` (its own object-store prefix and consumer
/// group) without waiting for it.
fn spawn_node(sc: &Scenario, cluster: &str, name: &str) -> Node {
    let port = free_port();
    let mut settings = vec![
        format!("cluster.node=\"{name}\""),
        format!("objects.url=\"s3://halite/{cluster}\""),
        format!("kafka.group_id=\"{cluster}\""),
    ];
    // HALITE_BENCH_SET="region.flush_age=\"10s\"" tries other settings.
    settings.extend(
        std::env::var("HALITE_BENCH_SET")
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from),
    );
    let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
    let data = sc.dir().join(format!("{cluster}-{name}"));
    Node {
        name: name.to_string(),
        server: common::server::spawn(sc.command_at(&data, port, &refs), port),
    }
}

fn wait_ready(node: &Node) {
    support::wait_ready(node.addr(), "/readyz", &node.name);
}

/// Points the nodes ingested so far (replays count again).
fn ingested(nodes: &[&Node]) -> u64 {
    nodes
        .iter()
        .filter_map(|n| get_json(n.addr(), "/api/v1/ingest"))
        .map(|s| s["points"].as_u64().unwrap_or(0))
        .sum()
}

/// Partition → owner, once every partition is held by one of `nodes`.
fn owners(nodes: &[&Node]) -> Option<BTreeMap<u32, String>> {
    let mut held = BTreeMap::new();
    for n in nodes {
        let s = get_json(n.addr(), "/api/v1/cluster")?;
        for h in s["held"].as_array()? {
            if h["topic"] == TOPIC && h["fenced"] != true {
                held.insert(h["partition"].as_u64()? as u32, n.name.clone());
            }
        }
    }
    (held.len() == PARTITIONS as usize).then_some(held)
}

/// The points of the table `addr` reads (counted by one field): every
/// node's MemStores included.
fn readable(addr: &str) -> u64 {
    let body = format!(
        r#"{{"table":"{TABLE}","series":[["metric","cpu"]],"fields":["usage_user"],"aggregate":{{"functions":["count"]}}}}"#
    );
    let Ok(r) = request(
        addr,
        "POST",
        "/api/v1/query",
        Some("application/json"),
        body.as_bytes(),
    ) else {
        return 0;
    };
    let Ok(answer) = serde_json::from_slice::<Json>(&r.body) else {
        return 0;
    };
    if answer.get("partial").is_some() {
        return 0;
    }
    answer["aggregates"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x["values"]["count"].as_f64().unwrap_or(0.0))
                .sum::<f64>() as u64
        })
        .unwrap_or(0)
}

/// Replayed bytes per partition, from a node's scrape.
fn replayed_by_partition(addr: &str) -> BTreeMap<u32, f64> {
    let mut out = BTreeMap::new();
    let Ok(r) = request(addr, "GET", "/metrics", None, b"") else {
        return out;
    };
    for line in r.text().lines() {
        let Some(rest) = line.strip_prefix("halite_cluster_replay_bytes_total{") else {
            continue;
        };
        let partition = rest
            .split("partition=\"")
            .nth(1)
            .and_then(|p| p.split('"').next())
            .and_then(|p| p.parse::<u32>().ok());
        let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let (Some(p), Some(v)) = (partition, value) {
            *out.entry(p).or_insert(0.0) += v;
        }
    }
    out
}

/// Replayed bytes per partition, summed over `nodes`.
fn replayed(nodes: &[&Node]) -> BTreeMap<u32, f64> {
    let mut out = BTreeMap::new();
    for n in nodes {
        for (p, v) in replayed_by_partition(n.addr()) {
            *out.entry(p).or_insert(0.0) += v;
        }
    }
    out
}

/// Waits until every one of `rows` points is readable through the first
/// of `nodes` (asked once the nodes ingested that many, replays
/// included); (seconds from `since`, CPU seconds the nodes used from
/// `cpu_before`).
fn ingest(nodes: &[&Node], rows: u64, since: Instant, cpu_before: f64) -> (f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(900);
    // Asked ten times a second: each ask is a request to every node, CPU
    // the nodes' figure would count (three nodes, three times as many).
    while ingested(nodes) < rows {
        assert!(Instant::now() < deadline, "ingest did not finish");
        std::thread::sleep(Duration::from_millis(100));
    }
    loop {
        let n = readable(nodes[0].addr());
        assert!(n <= rows, "{n} points read, {rows} produced");
        if n == rows {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ingest did not finish: {n} of {rows} read"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let secs = since.elapsed().as_secs_f64();
    let cpu: f64 = nodes.iter().map(|n| n.cpu()).sum();
    (secs, cpu - cpu_before)
}

/// Waits until the nodes' MemStores are flushed and no flush or
/// compaction has run for 3 s: the work the ingested rows brought, done.
/// A catch-up cut off at its last row leaves compactions owed, and how
/// many depends on when flushes by age fell; the CPU up to here is what
/// the rows cost. (CPU seconds the nodes used from `cpu_before`, seconds
/// the wait took.)
fn settle(nodes: &[&Node], cpu_before: f64) -> (f64, f64) {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    let work = || -> (f64, f64) {
        let sum = |name: &str| -> f64 { nodes.iter().map(|n| metric_sum(n.addr(), name)).sum() };
        (
            sum("halite_memstore_bytes"),
            sum("halite_flushes_total") + sum("halite_compactions_total"),
        )
    };
    let (mut done, mut still_since) = (work().1, Instant::now());
    loop {
        assert!(Instant::now() < deadline, "the nodes never settled");
        std::thread::sleep(Duration::from_millis(250));
        let (memstore, now) = work();
        if now != done || memstore > 0.0 {
            (done, still_since) = (now, Instant::now());
        } else if still_since.elapsed() >= Duration::from_secs(3) {
            break;
        }
    }
    let cpu: f64 = nodes.iter().map(|n| n.cpu()).sum();
    (cpu - cpu_before, started.elapsed().as_secs_f64())
}

/// Message payload bytes of `partition` from `from` to its end (the
/// producer is stopped: the end does not move).
fn payload_bytes(bootstrap: &str, partition: i32, from: i64) -> u64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "bench-cluster-sizes")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, partition, Offset::Offset(from))
        .expect("offset");
    consumer.assign(&tpl).expect("assign");
    let mut bytes = 0u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "reading partition {partition}");
        match consumer.poll(Duration::from_millis(500)) {
            None => continue,
            Some(Ok(m)) => bytes += m.payload().map_or(0, |p| p.len() as u64),
            Some(Err(KafkaError::PartitionEOF(_))) => return bytes,
            Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::PartitionEOF))) => {
                return bytes;
            }
            Some(Err(e)) => panic!("reading partition {partition}: {e}"),
        }
    }
}

fn main() {
    let rows: u64 = std::env::var("HALITE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let steps = rows / HOSTS;
    let rows = steps * HOSTS;
    let s3 = S3::start(&["halite"]);
    let mut builder = Scenario::new();
    // HALITE_BENCH_CLIENT='"partition.assignment.strategy" = "cooperative-sticky"'
    // adds lines to [kafka.client] (librdkafka settings), `;`-separated.
    for line in std::env::var("HALITE_BENCH_CLIENT")
        .unwrap_or_default()
        .split(';')
    {
        if !line.trim().is_empty() {
            builder = builder.client(line.trim());
        }
    }
    let sc = builder
        .topic(TOPIC, PARTITIONS)
        .set(&format!("objects.endpoint=\"{}\"", s3.endpoint))
        .set("objects.region=\"us-east-1\"")
        .set(&format!("objects.access_key_id=\"{ACCESS_KEY}\""))
        .set(&format!("objects.secret_access_key=\"{SECRET_KEY}\""))
        .set("objects.allow_http=true")
        .set("kafka.commit_interval=\"1s\"")
        // Flushes publish positions every few seconds, as a cluster would
        // run to keep replays short.
        .set("region.flush_age=\"5s\"")
        .build();

    // 1. The topic, loaded before any node consumes it.
    let schema = sc.start_member("schema", free_port(), &["kafka.brokers=\"\""]);
    let loaded = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_halite"))
        .args(["produce", "--brokers", sc.bootstrap(), "--topic", TOPIC])
        .args(["--hosts", &HOSTS.to_string(), "--points", &rows.to_string()])
        .args(["--per-message", "10", "--by-bucket", TABLE])
        .args(["--server", &schema.addr])
        .output()
        .expect("halite produce");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::server::stop(schema);
    println!(
        "cluster bench: {rows} TSBS rows ({HOSTS} hosts, 10 fields, 10 rows per message) in \
         {PARTITIONS} partitions, loaded in {:.1} s",
        loaded.elapsed().as_secs_f64()
    );

    // 2a. One node, timed from its start (as the three are).
    let since = Instant::now();
    let solo = spawn_node(&sc, "solo", "a");
    wait_ready(&solo);
    let (secs, cpu) = ingest(&[&solo], rows, since, 0.0);
    let solo_cpu_us = cpu / rows as f64 * 1e6;
    print_work("nodes=1", &[&solo], &BTreeMap::new());
    println!(
        "cluster_ingest nodes=1 rows_per_s={:.0} secs={secs:.2} cpu_us_per_row={solo_cpu_us:.2}",
        rows as f64 / secs
    );

    // 2b. Three nodes, started together.
    let since = Instant::now();
    let trio: Vec<Node> = ["a", "b", "c"]
        .iter()
        .map(|n| spawn_node(&sc, "trio", n))
        .collect();
    trio.iter().for_each(wait_ready);
    let refs: Vec<&Node> = trio.iter().collect();
    let (secs, cpu) = ingest(&refs, rows, since, 0.0);
    let trio_cpu_us = cpu / rows as f64 * 1e6;
    print_work("nodes=3", &refs, &BTreeMap::new());
    let points = ingested(&refs);
    println!(
        "cluster_ingest nodes=3 rows_per_s={:.0} secs={secs:.2} cpu_us_per_row={trio_cpu_us:.2} \
         cpu_ratio_to_one_node={:.2} points_ingested={points} (replays after rebalances count again)",
        rows as f64 / secs,
        trio_cpu_us / solo_cpu_us
    );
    // 2c. Both settled: the compactions each still owed, done.
    let (solo_settled, solo_wait) = settle(&[&solo], 0.0);
    let (trio_settled, trio_wait) = settle(&refs, 0.0);
    print_work("settled nodes=1", &[&solo], &BTreeMap::new());
    print_work("settled nodes=3", &refs, &BTreeMap::new());
    let (solo_settled_us, trio_settled_us) = (
        solo_settled / rows as f64 * 1e6,
        trio_settled / rows as f64 * 1e6,
    );
    println!(
        "cluster_settled nodes=1 cpu_us_per_row={solo_settled_us:.2} waited_s={solo_wait:.1} \
         nodes=3 cpu_us_per_row={trio_settled_us:.2} waited_s={trio_wait:.1} \
         cpu_ratio_to_one_node={:.2} (from the start until no flush or compaction is owed)",
        trio_settled_us / solo_settled_us
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let owner_of = loop {
        if let Some(o) = owners(&refs) {
            break o;
        }
        assert!(
            Instant::now() < deadline,
            "the three never owned every partition"
        );
        std::thread::sleep(Duration::from_millis(100));
    };

    // 3. q1 and q2 through a non-owner, the owner, and the single node,
    // each region major-compacted by its owner first so that flushes and
    // compactions after the ingest do not run under the timings.
    for n in trio.iter().chain([&solo]) {
        let r = request(
            n.addr(),
            "POST",
            &format!("/api/v1/tables/{TABLE}/compact"),
            None,
            b"",
        )
        .expect("compact");
        assert_eq!(r.status, 204, "{}", r.text());
    }
    let host = "host_0042";
    let desc = get_json(trio[0].addr(), &format!("/api/v1/tables/{TABLE}")).expect("table");
    let bucket_of_host = {
        let table: halite::catalog::TableDescriptor =
            serde_json::from_value(desc).expect("descriptor");
        let key = table
            .key
            .encode(&[
                ("metric", halite::key::FieldValue::Str("cpu".into())),
                ("host", halite::key::FieldValue::Str(host.into())),
                ("ts", halite::key::FieldValue::Uint(0)),
            ])
            .expect("key");
        table.key.salt_bucket(&key).unwrap_or(0)
    };
    let owner_name = &owner_of[&(bucket_of_host % PARTITIONS)];
    let owner = trio.iter().find(|n| &n.name == owner_name).expect("owner");
    let other = trio.iter().find(|n| &n.name != owner_name).expect("other");
    let last_ts = halite::tsbs::T0_MS + (steps - 1) * 10_000;
    let hour_start = last_ts.saturating_sub(3_600_000 - 10_000);
    let q1 = format!(
        r#"{{"table":"{TABLE}","series":[["metric","cpu"],["host","{host}"]],"fields":["usage_user"],"limit":100}}"#
    );
    let q2 = format!(
        r#"{{"table":"{TABLE}","series":[["metric","cpu"],["host","{host}"]],"start_ms":{hour_start},"end_ms":{}}}"#,
        last_ts + 1
    );
    let mut q_lines = Vec::new();
    for (label, body, runs, want) in [
        ("q1", &q1, 300, 100.min(steps as usize)),
        ("q2", &q2, 200, 360.min(steps as usize)),
    ] {
        let check = |a: &Json| {
            assert!(a.get("partial").is_none(), "a partial answer: {a}");
            assert_eq!(a["rows"].as_array().map(Vec::len), Some(want), "{label}");
        };
        let (solo_p50, _) = time_query(solo.addr(), body, runs, check);
        let (owner_p50, _) = time_query(owner.addr(), body, runs, check);
        let (other_p50, other_p99) = time_query(other.addr(), body, runs, check);
        q_lines.push(format!(
            "cluster_query {label} single_node_p50_us={solo_p50:.0} owner_p50_us={owner_p50:.0} \
             non_owner_p50_us={other_p50:.0} non_owner_p99_us={other_p99:.0} \
             non_owner_to_owner={:.2} non_owner_to_single_node={:.2}",
            other_p50 / owner_p50,
            other_p50 / solo_p50
        ));
    }
    for l in &q_lines {
        println!("{l}");
    }

    // Idle: what the nodes cost with nothing to ingest (consumers'
    // polls, catalog refreshes, chores), per node and second.
    let (solo_idle, trio_idle) = (threads(&[&solo]), threads(&refs));
    std::thread::sleep(Duration::from_secs(5));
    print_work("idle_5s nodes=1", &[&solo], &solo_idle);
    print_work("idle_5s nodes=3", &refs, &trio_idle);

    // 4. A steady stream: the same rows produced again (the same cells
    // written again) at rows/45 per second, consumed by the single node
    // and by the three at once (each its own group), so both see the same
    // rate, the same flushes by age and the same contention over one
    // window: the CPU per row a running cluster costs, apart from the
    // catch-up above (whose length decides how many flushes by age, and
    // so compactions, it runs).
    let mut producer = std::process::Command::new(env!("CARGO_BIN_EXE_halite"))
        .args(["produce", "--brokers", sc.bootstrap(), "--topic", TOPIC])
        .args(["--hosts", &HOSTS.to_string(), "--points", &rows.to_string()])
        .args(["--per-message", "10", "--rate", &(rows / 45).to_string()])
        .args(["--by-bucket", TABLE])
        .args(["--server", trio[0].addr()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("halite produce");
    std::thread::sleep(Duration::from_secs(2));
    let steady_sample = || {
        (
            solo.cpu(),
            ingested(&[&solo]),
            refs.iter().map(|n| n.cpu()).sum::<f64>(),
            ingested(&refs),
        )
    };
    let (solo_cpu0, solo_points0, trio_cpu0, trio_points0) = steady_sample();
    let (solo_threads, trio_threads) = (threads(&[&solo]), threads(&refs));
    std::thread::sleep(STEADY_WINDOW);
    let (solo_cpu1, solo_points1, trio_cpu1, trio_points1) = steady_sample();
    let solo_steady_us =
        (solo_cpu1 - solo_cpu0) / (solo_points1 - solo_points0).max(1) as f64 * 1e6;
    let trio_steady_us =
        (trio_cpu1 - trio_cpu0) / (trio_points1 - trio_points0).max(1) as f64 * 1e6;
    println!(
        "cluster_steady rate_rows_per_s={} window_s={} nodes=1 rows={} cpu_us_per_row={solo_steady_us:.2} \
         nodes=3 rows={} cpu_us_per_row={trio_steady_us:.2} cpu_ratio_to_one_node={:.2}",
        rows / 45,
        STEADY_WINDOW.as_secs(),
        solo_points1 - solo_points0,
        trio_points1 - trio_points0,
        trio_steady_us / solo_steady_us
    );
    print_work("steady nodes=1", &[&solo], &solo_threads);
    print_work("steady nodes=3", &refs, &trio_threads);
    drop(solo);
    drop(refs);

    // 5. A node killed while it ingests the stream, flushes every few
    // seconds, the victim and the producer killed together. What the
    // victim had not published is what the survivors must replay.
    std::thread::sleep(Duration::from_secs(1));
    let replayed_before = replayed(&trio[..2].iter().collect::<Vec<_>>());
    let status = get_json(trio[2].addr(), "/api/v1/cluster").expect("victim status");
    let mut trio = trio;
    let mut victim = trio.pop().expect("victim");
    let killed = Instant::now();
    victim.server.child.kill().expect("kill");
    let _ = producer.kill();
    let _ = victim.server.child.wait();
    let _ = producer.wait();
    let survivors: Vec<&Node> = trio.iter().collect();
    let failover = loop {
        if owners(&survivors).is_some() {
            break killed.elapsed().as_secs_f64();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(120),
            "the survivors never owned every partition"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut unflushed = 0u64;
    let mut moved = Vec::new();
    for h in status["held"].as_array().expect("held") {
        let p = h["partition"].as_u64().expect("partition") as u32;
        let from = h["published_below"].as_i64().unwrap_or(0);
        unflushed += payload_bytes(sc.bootstrap(), p as i32, from);
        moved.push(p);
    }
    // A replay is counted when it reaches the partition's end: wait until
    // the counts have not moved for 8 s.
    let since_kill = |now: &BTreeMap<u32, f64>| -> BTreeMap<u32, f64> {
        now.iter()
            .map(|(p, v)| (*p, v - replayed_before.get(p).copied().unwrap_or(0.0)))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    let (mut after, mut still_since) = (since_kill(&replayed(&survivors)), Instant::now());
    while Instant::now() < deadline && still_since.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(200));
        let now = since_kill(&replayed(&survivors));
        if now != after {
            (after, still_since) = (now, Instant::now());
        }
    }
    let moved_replayed: f64 = moved.iter().filter_map(|p| after.get(p)).sum();
    let all_replayed: f64 = after.values().sum();
    assert_eq!(readable(survivors[0].addr()), rows, "every point, once");
    println!(
        "cluster_failover kill_to_all_owned_s={failover:.2} moved_partitions={} \
         replay_bytes={moved_replayed:.0} unflushed_bytes={unflushed} \
         replay_to_unflushed={:.2} all_replay_bytes={all_replayed:.0} \
         (the survivors' own partitions too: an eager rebalance revokes every partition)",
        moved.len(),
        moved_replayed / unflushed.max(1) as f64
    );
}
