//! Three halite nodes as one cluster (docs/cluster.md): one consumer
//! group over an 8-partition topic, one object store (s3s-fs) holding the
//! store files, manifests, leases and the catalog. Each node owns the
//! regions of the partitions the group assigns it and reads the others'
//! from the object store.
//!
//! While points stream in, one node at a time is killed with SIGKILL at a
//! random moment (five times): within 10 s the survivors own every
//! partition, and the killed node comes back. At the end every point
//! produced is readable, once, from every node.
//!
//! `HALITE_CLUSTER_SEED` repeats a run's kill moments and victims.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use common::http::{free_port, request};
use common::kafka::assert_cpu_oracle;
use common::s3::{ACCESS_KEY, S3, SECRET_KEY};
use common::scenario::Scenario;
use common::server::Server;
use halite::objects::Objects;
use serde_json::Value as Json;

const TOPIC: &str = "cpu";
const PARTITIONS: u32 = 8;
const TABLE: &str = "metrics:cpu";

struct Node {
    name: String,
    port: u16,
    server: Option<Server>,
}

impl Node {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

fn cluster_scenario(s3: &S3) -> Scenario {
    cluster_builder(s3).build()
}

fn cluster_builder(s3: &S3) -> common::scenario::Builder {
    Scenario::new()
        .topic(TOPIC, PARTITIONS)
        .seed("HALITE_CLUSTER_SEED")
        .set("objects.url=\"s3://halite/cluster\"")
        .set(&format!("objects.endpoint=\"{}\"", s3.endpoint))
        .set("objects.region=\"us-east-1\"")
        .set(&format!("objects.access_key_id=\"{ACCESS_KEY}\""))
        .set(&format!("objects.secret_access_key=\"{SECRET_KEY}\""))
        .set("objects.allow_http=true")
        // Frequent flushes publish positions often: a new owner replays
        // little.
        .set("region.flush_age=\"2s\"")
        .set("kafka.commit_interval=\"500ms\"")
}

/// Starts `node` on a fresh port, and makes sure the node answering there
/// is this one (tests running beside this one pick free ports too, and a
/// port can be taken between being found free and being bound).
fn start(sc: &Scenario, node: &mut Node) {
    let setting = format!("cluster.node=\"{}\"", node.name);
    for _ in 0..5 {
        node.port = free_port();
        let mut server = sc.start_member(&node.name, node.port, &[&setting]);
        std::thread::sleep(Duration::from_millis(200));
        let ours = matches!(server.child.try_wait(), Ok(None))
            && cluster_status(&node.addr()).is_some_and(|s| s["node"] == node.name.as_str());
        if ours {
            node.server = Some(server);
            return;
        }
        let _ = server.child.kill();
        let _ = server.child.wait();
    }
    panic!("node {} did not start", node.name);
}

/// Nodes of these names, each started as [`start`] starts one.
fn start_nodes(sc: &Scenario, names: &[&str]) -> Vec<Node> {
    let mut nodes: Vec<Node> = names
        .iter()
        .map(|n| Node {
            name: n.to_string(),
            port: free_port(),
            server: None,
        })
        .collect();
    for node in &mut nodes {
        start(sc, node);
    }
    nodes
}

fn cluster_status(addr: &str) -> Option<Json> {
    let r = request(addr, "GET", "/api/v1/cluster", None, b"").ok()?;
    (r.status == 200).then(|| serde_json::from_slice(&r.body).ok())?
}

/// Which live node holds each partition, when every partition is held
/// by exactly one of `nodes` (none fenced) and its lease names it.
fn owners(nodes: &[&Node]) -> Option<BTreeMap<u32, String>> {
    owners_of(nodes, TOPIC, PARTITIONS)
}

/// [`owners`] of `topic`'s `partitions` partitions.
fn owners_of(nodes: &[&Node], topic: &str, partitions: u32) -> Option<BTreeMap<u32, String>> {
    let mut held: BTreeMap<u32, String> = BTreeMap::new();
    let mut leases = BTreeMap::new();
    for node in nodes {
        let s = cluster_status(&node.addr())?;
        for h in s["held"].as_array()? {
            if h["topic"] != topic || h["fenced"] == true {
                continue;
            }
            let p = h["partition"].as_u64()? as u32;
            if held.insert(p, node.name.clone()).is_some() {
                return None; // two nodes think they hold it
            }
        }
        for l in s["leases"].as_array()? {
            leases.insert(l["shard"].as_str()?.to_string(), l["owner"].clone());
        }
    }
    let all = (0..partitions).all(|p| {
        held.get(&p)
            .is_some_and(|n| leases.get(&format!("{topic}/{p}")) == Some(&Json::from(n.as_str())))
    });
    all.then_some(held)
}

fn wait_for_owners(nodes: &[&Node], within: Duration, what: &str) -> Duration {
    let started = Instant::now();
    loop {
        if owners(nodes).is_some() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{what}: the partitions were not all owned within {within:?}: {:?}",
            nodes
                .iter()
                .map(|n| cluster_status(&n.addr()))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn produce(bootstrap: &str, via: &str, hosts: u64, points: u64, rate: u64) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_halite"))
        .args(["produce", "--brokers", bootstrap, "--topic", TOPIC])
        .args(["--hosts", &hosts.to_string()])
        .args(["--points", &points.to_string()])
        .args(["--per-message", "10"])
        .args(["--rate", &rate.to_string()])
        .args(["--by-bucket", TABLE, "--server", via])
        .spawn()
        .expect("halite produce")
}

/// Every series' count of points, as a node answers it.
fn count_answer(addr: &str) -> Json {
    common::kafka::query(
        addr,
        &serde_json::json!({
            "table": TABLE,
            "series": [["metric", "cpu"]],
            "start_ms": 0, "end_ms": u64::MAX / 2,
            "aggregate": {"functions": ["count"]}
        }),
    )
}

/// The points of the table a node reads (counted by one field).
fn count(addr: &str) -> u64 {
    let answer = count_answer(addr);
    answer["aggregates"]
        .as_array()
        .expect("aggregates")
        .iter()
        .filter(|a| a["field"] == "usage_user")
        .map(|a| a["values"]["count"].as_f64().unwrap_or(0.0))
        .sum::<f64>() as u64
}

fn ingested(addr: &str) -> u64 {
    let r = request(addr, "GET", "/api/v1/ingest", None, b"").expect("ingest status");
    let s: Json = serde_json::from_slice(&r.body).expect("json");
    s["points"].as_u64().unwrap_or(0)
}

#[test]
fn three_nodes_survive_five_kills_and_every_point_is_read_once_from_every_node() {
    let s3 = S3::start(&["halite"]);
    let mut sc = cluster_scenario(&s3);
    let mut nodes = start_nodes(&sc, &["a", "b", "c"]);
    let everyone: Vec<&Node> = nodes.iter().collect();
    wait_for_owners(&everyone, Duration::from_secs(60), "at start");

    // 40 hosts x 1,500 steps at 1,500 points a second: about 40 s of
    // ingest, through the kills.
    let (hosts, points, rate) = (40u64, 60_000u64, 1_500u64);
    let mut producer = produce(sc.bootstrap(), &nodes[0].addr(), hosts, points, rate);

    let mut failovers = Vec::new();
    for round in 0..5 {
        let pause = Duration::from_millis(1_000 + sc.rng().below(4_000));
        std::thread::sleep(pause);
        let victim = sc.rng().below(3) as usize;
        let killed_at = Instant::now();
        if let Some(mut server) = nodes[victim].server.take() {
            server.child.kill().expect("kill -9");
            let _ = server.child.wait();
        }
        let survivors: Vec<&Node> = nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != victim)
            .map(|(_, n)| n)
            .collect();
        // Before the group notices, a query through a survivor cannot
        // have the dead owner's MemStore edits: it says so.
        let answer = count_answer(&survivors[0].addr());
        assert_eq!(answer["partial"], true, "right after a kill: {answer}");
        assert!(
            !answer["missing_buckets"]
                .as_array()
                .expect("buckets")
                .is_empty(),
            "{answer}"
        );
        wait_for_owners(&survivors, Duration::from_secs(10), "after a kill");
        let failover = killed_at.elapsed();
        let answer = count_answer(&survivors[0].addr());
        assert!(
            answer.get("partial").is_none(),
            "every owner answers: {answer}"
        );
        eprintln!(
            "round {round}: killed node {} after {pause:?}; the survivors owned every partition {failover:?} later",
            nodes[victim].name
        );
        failovers.push(failover);
        start(&sc, &mut nodes[victim]);
        let everyone: Vec<&Node> = nodes.iter().collect();
        wait_for_owners(&everyone, Duration::from_secs(60), "after a restart");
    }
    let status = producer.wait().expect("producer");
    assert!(status.success(), "halite produce failed");
    every_point_from_every_node(&nodes, hosts, points);
    eprintln!("failovers: {failovers:?}");
}

/// Once the topic is consumed, every node reads every point produced,
/// once: regions other nodes own from their files on the object store
/// and their owners' MemStore edits (nothing is flushed for it).
fn every_point_from_every_node(nodes: &[Node], hosts: u64, points: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let stored: Vec<u64> = nodes.iter().map(|n| count(&n.addr())).collect();
        if stored.iter().all(|s| *s == points) {
            break;
        }
        let counted = nodes.iter().map(|n| ingested(&n.addr())).sum::<u64>();
        assert!(
            Instant::now() < deadline,
            "{stored:?} of {points} points readable (the nodes counted {counted} since their starts)"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    for node in nodes {
        assert_cpu_oracle(&node.addr(), hosts, points);
    }
}

/// The store files on the object store: name and the epoch it carries.
fn stored_files(objects: &Objects) -> BTreeSet<String> {
    objects
        .list("regions")
        .expect("list")
        .into_iter()
        .map(|(name, _)| name)
        .filter(|n| n.ends_with(".sst"))
        .collect()
}

fn signal(node: &Node, signal: i32) {
    let pid = node.server.as_ref().expect("running").child.id() as i32;
    // SAFETY: a signal to a child process of this test, by its pid.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(rc, 0, "kill({pid}, {signal})");
}

fn held_epochs(node: &Node) -> BTreeMap<u32, u64> {
    let s = cluster_status(&node.addr()).expect("cluster status");
    s["held"]
        .as_array()
        .expect("held")
        .iter()
        .map(|h| {
            (
                h["partition"].as_u64().expect("partition") as u32,
                h["epoch"].as_u64().expect("epoch"),
            )
        })
        .collect()
}

#[test]
fn a_paused_owner_is_fenced_when_it_resumes_and_writes_nothing_the_new_owner_reads() {
    let s3 = S3::start(&["halite"]);
    let sc = cluster_scenario(&s3);
    let unused = tempfile::tempdir().expect("tmp");
    let objects = Objects::open(&s3.config("halite", "cluster"), unused.path()).expect("objects");
    let log = sc.dir().join("a.log");
    let mut a = Node {
        name: "a".into(),
        port: free_port(),
        server: None,
    };
    let mut cmd = sc.command_at(&sc.dir().join("a"), a.port, &["cluster.node=\"a\""]);
    cmd.stderr(std::fs::File::create(&log).expect("log file"));
    a.server = Some(common::server::spawn_ready(cmd, a.port));
    assert!(
        cluster_status(&a.addr()).is_some_and(|s| s["node"] == "a"),
        "another server took node a's port"
    );
    wait_for_owners(&[&a], Duration::from_secs(60), "node a alone");

    // Points stream in the whole time, so a's MemStores hold some when it
    // stops.
    let (hosts, points, rate) = (40u64, 24_000u64, 1_000u64);
    let mut producer = produce(sc.bootstrap(), &a.addr(), hosts, points, rate);
    std::thread::sleep(Duration::from_secs(4));
    let a_epochs = held_epochs(&a);
    assert_eq!(a_epochs.len(), PARTITIONS as usize);
    signal(&a, libc::SIGSTOP);

    // The group moves everything to b, which takes the leases at newer
    // epochs and adopts the manifests.
    let mut b = Node {
        name: "b".into(),
        port: free_port(),
        server: None,
    };
    start(&sc, &mut b);
    wait_for_owners(&[&b], Duration::from_secs(30), "b while a is paused");
    for (p, epoch) in held_epochs(&b) {
        assert!(
            epoch > a_epochs[&p],
            "partition {p}: b at {epoch}, a had {}",
            a_epochs[&p]
        );
    }
    std::thread::sleep(Duration::from_secs(3));
    let before = stored_files(&objects);

    signal(&a, libc::SIGCONT);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("fenced: another node owns the partition now") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a never said it was fenced:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let nodes = [a, b];
    let everyone: Vec<&Node> = nodes.iter().collect();
    wait_for_owners(&everyone, Duration::from_secs(60), "after a resumed");
    let status = producer.wait().expect("producer");
    assert!(status.success(), "halite produce failed");
    every_point_from_every_node(&nodes, hosts, points);

    // Whatever a uploaded under its old epochs after it resumed, its
    // clean-up deleted: no manifest names it, and it is gone.
    let old: BTreeSet<u64> = a_epochs.values().copied().collect();
    for name in stored_files(&objects).difference(&before) {
        let epoch = halite::ownership::epoch_of_file(name).expect("an epoch");
        assert!(
            !old.contains(&epoch),
            "{name} written under a fenced epoch and left behind"
        );
    }
}

#[test]
fn an_object_store_outage_holds_ingestion_back_and_loses_nothing() {
    let mut s3 = S3::start(&["halite"]);
    let sc = Scenario::new()
        .topic(TOPIC, PARTITIONS)
        .set("objects.url=\"s3://halite/cluster\"")
        .set(&format!("objects.endpoint=\"{}\"", s3.endpoint))
        .set("objects.region=\"us-east-1\"")
        .set(&format!("objects.access_key_id=\"{ACCESS_KEY}\""))
        .set(&format!("objects.secret_access_key=\"{SECRET_KEY}\""))
        .set("objects.allow_http=true")
        .set("region.flush_age=\"1s\"")
        // Small MemStores and buffers: an outage of a few seconds fills
        // them, and the consumer must hold back.
        .set("region.flush_size=\"64KiB\"")
        .set("region.blocking_multiplier=2")
        .set("region.global_memstore_size=\"1MiB\"")
        .set("kafka.max_buffered=\"256KiB\"")
        .build();
    let mut a = Node {
        name: "a".into(),
        port: free_port(),
        server: None,
    };
    start(&sc, &mut a);
    wait_for_owners(&[&a], Duration::from_secs(60), "at start");
    let (hosts, points, rate) = (40u64, 30_000u64, 2_000u64);
    let mut producer = produce(sc.bootstrap(), &a.addr(), hosts, points, rate);
    std::thread::sleep(Duration::from_secs(3));

    s3.stop();
    let stopped = Instant::now();
    let pauses_before = ingest_counter(&a, "pauses");
    let mut held_back = false;
    while stopped.elapsed() < Duration::from_secs(10) {
        held_back |= ingest_counter(&a, "pauses") > pauses_before;
        std::thread::sleep(Duration::from_millis(200));
    }
    let failures = metric_sum(&a, "halite_flush_failures_total");
    s3.restart();
    assert!(
        held_back,
        "the consumer never paused while the object store was away"
    );
    assert!(
        failures > 0.0,
        "no flush failed while the object store was away"
    );

    let status = producer.wait().expect("producer");
    assert!(status.success(), "halite produce failed");
    every_point_from_every_node(&[a], hosts, points);
}

fn ingest_counter(node: &Node, name: &str) -> u64 {
    let r = request(&node.addr(), "GET", "/api/v1/ingest", None, b"").expect("ingest status");
    let s: Json = serde_json::from_slice(&r.body).expect("json");
    s[name].as_u64().unwrap_or(0)
}

/// The sum of a metric's samples in `/metrics`.
fn metric_sum(node: &Node, name: &str) -> f64 {
    let r = request(&node.addr(), "GET", "/metrics", None, b"").expect("metrics");
    common::metric_sum(&r.text(), name)
}

#[test]
fn http_writes_go_through_the_topic_and_every_node_reads_them() {
    let s3 = S3::start(&["halite"]);
    let sc = cluster_scenario(&s3);
    let nodes = start_nodes(&sc, &["a", "b"]);
    let everyone: Vec<&Node> = nodes.iter().collect();
    wait_for_owners(&everyone, Duration::from_secs(60), "at start");

    // The same points `halite produce` would make, written over HTTP to
    // one node in bodies of mixed hosts: each point reaches the owner of
    // its bucket through the topic.
    let (hosts, points) = (30u64, 6_000u64);
    let mut body = String::new();
    for i in 0..points {
        halite::tsbs::cpu_line(i % hosts, i / hosts, &mut body);
        if body.len() > 64 * 1024 || i + 1 == points {
            let via = &nodes[(i % 2) as usize].addr();
            let r = request(
                via,
                "POST",
                &format!("/api/v1/write?table={TABLE}&precision=ms"),
                None,
                body.as_bytes(),
            )
            .expect("write");
            assert_eq!(r.status, 204, "{}", r.text());
            body.clear();
        }
    }
    every_point_from_every_node(&nodes, hosts, points);
    for node in &nodes {
        assert_eq!(ingest_counter(node, "misrouted_points"), 0);
    }
    // InfluxQL reads the declared table on every node, the other's
    // regions too (issue #58): measurement `cpu` of database `metrics`.
    for node in &nodes {
        let influxql = |q: &str| {
            let path = format!(
                "/query?{}",
                serde_urlencoded::to_string([("db", "metrics"), ("q", q)]).expect("form")
            );
            let r = request(&node.addr(), "GET", &path, None, b"").expect("query");
            assert_eq!(r.status, 200, "{}", r.text());
            r.json()
        };
        let counted = influxql("SELECT count(usage_user) FROM cpu");
        assert_eq!(
            counted["results"][0]["series"][0]["values"][0][1],
            serde_json::json!(points),
            "node {}: {counted}",
            node.name
        );
        let hosts_seen = influxql("SHOW TAG VALUES FROM cpu WITH KEY = \"host\"");
        assert_eq!(
            hosts_seen["results"][0]["series"][0]["values"]
                .as_array()
                .map(Vec::len),
            Some(hosts as usize),
            "node {}: {hosts_seen}",
            node.name
        );
    }
    // `halite cluster` shows every partition's owner and epoch, and which
    // it holds itself.
    let owners = owners(&everyone).expect("owners");
    let out = Command::new(env!("CARGO_BIN_EXE_halite"))
        .args(["cluster", "--server", &nodes[0].addr()])
        .output()
        .expect("halite cluster");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("node a, objects s3://halite/cluster"),
        "{text}"
    );
    for (p, owner) in &owners {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("cpu/{p} ")))
            .unwrap_or_else(|| panic!("no cpu/{p} in\n{text}"));
        assert!(line.contains(&format!(" {owner} ")), "{line}");
        assert_eq!(line.contains("held here"), owner == "a", "{line}");
    }

    // A producer that keys by host (not by bucket) sends most points to a
    // partition that does not carry their bucket: its consumer sends them
    // on to the right one, and every point is read from every node (the
    // 30 hosts again, whose points are the same cells, and 10 new ones).
    common::kafka::produce(
        sc.bootstrap(),
        TOPIC,
        common::kafka::Load {
            hosts: 40,
            points: 8_000,
            per_message: 10,
            rate: 0,
        },
    );
    every_point_from_every_node(&nodes, 40, 8_000);
    let misrouted: u64 = nodes
        .iter()
        .map(|n| ingest_counter(n, "misrouted_points"))
        .sum();
    assert!(misrouted > 0, "keyed by host, some points were misrouted");
    // InfluxDB's /write into the declared table, through the topic, on
    // either node; a measurement with no table is refused, naming why.
    let lines = "cpu,host=host_0999 usage_user=1.5 1700000000000\n\
                 cpu,host=host_0999 usage_user=2.5 1700000010000\n\
                 newthing,host=a v=1 1700000000000";
    let r = request(
        &nodes[1].addr(),
        "POST",
        "/write?db=metrics&precision=ms",
        None,
        lines.as_bytes(),
    )
    .expect("influx write");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("partial write") && r.text().contains("metrics:newthing"),
        "{}",
        r.text()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let path = format!(
            "/query?{}",
            serde_urlencoded::to_string([
                ("db", "metrics"),
                (
                    "q",
                    "SELECT sum(usage_user) FROM cpu WHERE host = 'host_0999'"
                )
            ])
            .expect("form")
        );
        let r = request(&nodes[0].addr(), "GET", &path, None, b"").expect("query");
        assert_eq!(r.status, 200, "{}", r.text());
        if r.json()["results"][0]["series"][0]["values"][0][1].as_f64() == Some(4.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the /write never arrived: {}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every point of series `host` a node reads, as `(ts, usage_user)`.
fn series_points(addr: &str, host: &str) -> Vec<(u64, f64)> {
    let answer = common::kafka::query(
        addr,
        &serde_json::json!({
            "table": TABLE,
            "series": [["metric", "cpu"], ["host", host]],
            "fields": ["usage_user"]
        }),
    );
    assert!(answer.get("partial").is_none(), "{answer}");
    answer["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["key"]["fields"]["ts"].as_u64().expect("ts"),
                r["cells"][0]["value"].as_f64().expect("value"),
            )
        })
        .collect()
}

#[test]
fn a_salt_epoch_in_a_cluster_gives_new_buckets_to_their_partitions_and_every_node_reads_them() {
    let s3 = S3::start(&["halite"]);
    let sc = cluster_scenario(&s3);
    let mut nodes = start_nodes(&sc, &["a", "b"]);
    let everyone: Vec<&Node> = nodes.iter().collect();
    wait_for_owners(&everyone, Duration::from_secs(60), "at start");

    // Points stamped ahead of the clock, so that the epoch (which starts
    // ahead of it) can start in their middle.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let (hosts, steps, step_ms) = (20u64, 200u64, 1_000u64);
    let t0 = now_ms + 600_000;
    let from = t0 + steps / 2 * step_ms;
    let value = |h: u64, s: u64| ((h * 7 + s * 3) % 100) as f64 + 0.25;
    let write = |steps: std::ops::Range<u64>| {
        for s in steps {
            let body: String = (0..hosts)
                .map(|h| {
                    format!(
                        "cpu,host=h{h:02} usage_user={},usage_idle={}i {}\n",
                        value(h, s),
                        h + s,
                        t0 + s * step_ms
                    )
                })
                .collect();
            let via = nodes[(s % 2) as usize].addr();
            let r = request(
                &via,
                "POST",
                &format!("/api/v1/write?table={TABLE}&precision=ms"),
                None,
                body.as_bytes(),
            )
            .expect("write");
            assert_eq!(r.status, 204, "{}", r.text());
        }
    };
    let patch = |via: &Node, body: Json| {
        request(
            &via.addr(),
            "PATCH",
            &format!("/api/v1/tables/{TABLE}"),
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .expect("patch")
    };
    // Too close to the clock for every node to learn it in time.
    let r = patch(
        &nodes[1],
        serde_json::json!({"salt": {"buckets": 32, "from_ms": now_ms + 2_000}}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("ahead of the clock"), "{}", r.text());
    write(0..steps / 2);
    let deadline = Instant::now() + Duration::from_secs(60);
    while nodes.iter().any(|n| count(&n.addr()) != hosts * steps / 2) {
        assert!(Instant::now() < deadline, "the first half was not read");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Points at or after the start are already stored (the last step
    // written is before `from`, so ask for one inside what was written).
    let r = patch(
        &nodes[1],
        serde_json::json!({"salt": {"buckets": 32, "from_ms": from - 10 * step_ms}}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("already holds points"), "{}", r.text());

    let r = patch(
        &nodes[1],
        serde_json::json!({"salt": {"buckets": 32, "from_ms": from}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let desc: Json = serde_json::from_slice(&r.body).expect("json");
    let region_ids: BTreeSet<u64> = desc["regions"]
        .as_array()
        .expect("regions")
        .iter()
        .map(|r| r["id"].as_u64().expect("id"))
        .collect();
    assert_eq!(region_ids.len(), 32, "a region per bucket: {desc}");
    // Within a few refreshes every node has the new layout, and each new
    // bucket's region is held by the node holding its partition.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let held: BTreeSet<u64> = nodes
            .iter()
            .filter_map(|n| cluster_status(&n.addr()))
            .flat_map(|s| {
                s["held"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .flat_map(|h| {
                        h["regions"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                            .into_iter()
                            .filter_map(|r| r.as_u64())
                    })
            })
            .collect();
        let layouts_known = nodes.iter().all(|n| {
            request(
                &n.addr(),
                "GET",
                &format!("/api/v1/tables/{TABLE}"),
                None,
                b"",
            )
            .ok()
            .and_then(|r| serde_json::from_slice::<Json>(&r.body).ok())
            .is_some_and(|d| d["regions"].as_array().map(Vec::len) == Some(32))
        });
        if layouts_known && held == region_ids {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "held {held:?} of {region_ids:?}, layouts known: {layouts_known}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    write(steps / 2..steps);
    let expected = |h: u64| -> Vec<(u64, f64)> {
        // Newest first: the key's time is reversed.
        (0..steps)
            .rev()
            .map(|s| (t0 + s * step_ms, value(h, s)))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    for node in &nodes {
        for h in 0..hosts {
            loop {
                let got = series_points(&node.addr(), &format!("h{h:02}"));
                if got == expected(h) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {} host {h}: {} of {steps} points",
                    node.name,
                    got.len()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }

    // The survivor of a kill takes the new buckets' regions with the rest
    // and reads every point again.
    nodes[1]
        .server
        .as_mut()
        .expect("b runs")
        .child
        .kill()
        .expect("kill -9");
    let survivor = [&nodes[0]];
    wait_for_owners(&survivor, Duration::from_secs(30), "after the kill");
    let deadline = Instant::now() + Duration::from_secs(60);
    for h in 0..hosts {
        loop {
            let got = series_points(&nodes[0].addr(), &format!("h{h:02}"));
            if got == expected(h) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "after the kill, host {h}: {} of {steps} points",
                got.len()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Two nodes serving HTTPS and checking tokens (a bootstrap token from the
/// environment, `auth.enabled`): they take their partitions, read each
/// other's unflushed points over HTTPS with the bootstrap token, and a
/// client holding a read-only token made on one node reads every point
/// from either node, whole (no region left out for an owner that did not
/// answer). Without a token a node answers 401; plain HTTP gets nowhere.
#[test]
fn a_cluster_over_https_with_tokens_reads_every_point_from_every_node() {
    const BOOT: &str = "cluster-bootstrap-token-0123456789";
    let s3 = S3::start(&["halite"]);
    let certs = tempfile::tempdir().expect("temp dir");
    let (cert, key) = common::certs::make_certificate(certs.path(), "node");
    let sc = cluster_builder(&s3)
        .set(&format!("server.tls_cert=\"{}\"", cert.display()))
        .set(&format!("server.tls_key=\"{}\"", key.display()))
        .set("auth.enabled=true")
        // Unflushed points stay in the owners' MemStores: the other node
        // must ask for them.
        .set("region.flush_age=\"1h\"")
        .env("HALITE__AUTH__BOOTSTRAP_TOKEN", BOOT)
        .env("HALITE_CACERT", &cert.display().to_string())
        .build();
    let tls = halite::client::Tls {
        ca_file: Some(cert.clone()),
    };
    let admin = halite::client::HttpClient::new(&tls, Some(BOOT.into()), false).expect("client");
    let anonymous = halite::client::HttpClient::new(&tls, None, false).expect("client");
    let https = |port: u16| format!("https://127.0.0.1:{port}");
    let call =
        |client: &halite::client::HttpClient, port: u16, method: &str, path: &str, body: &[u8]| {
            client
                .request(
                    &https(port),
                    method,
                    path,
                    &[("Content-Type", "application/json")],
                    body,
                    Duration::from_secs(30),
                )
                .expect("https request")
        };

    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        let port = free_port();
        let setting = format!("cluster.node=\"{name}\"");
        let server =
            common::server::spawn(sc.command_at(&sc.dir().join(name), port, &[&setting]), port);
        nodes.push((port, server));
    }
    let held = |port: u16| -> Option<usize> {
        let r = admin
            .request(
                &https(port),
                "GET",
                "/api/v1/cluster",
                &[],
                b"",
                Duration::from_secs(5),
            )
            .ok()?;
        (r.status == 200).then(|| r.json()["held"].as_array().map_or(0, |h| h.len()))
    };
    // Both nodes in the group, the partitions shared out between them.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let counts: Vec<usize> = nodes.iter().map(|(p, _)| held(*p).unwrap_or(0)).collect();
        if counts.iter().all(|&c| c > 0) && counts.iter().sum::<usize>() == PARTITIONS as usize {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the nodes never shared the partitions out: {counts:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Points written over HTTPS to node a go through the topic to their
    // owners.
    let (hosts, points) = (16u64, 4_000u64);
    let mut body = String::new();
    for i in 0..points {
        halite::tsbs::cpu_line(i % hosts, i / hosts, &mut body);
    }
    let r = admin
        .request(
            &https(nodes[0].0),
            "POST",
            &format!("/api/v1/write?table={TABLE}&precision=ms"),
            &[],
            body.as_bytes(),
            Duration::from_secs(30),
        )
        .expect("write");
    assert_eq!(r.status, 204, "{}", r.text());

    let made = call(
        &admin,
        nodes[0].0,
        "POST",
        "/api/v1/tokens",
        br#"{"name": "reader", "scopes": ["read"]}"#,
    );
    let made_at = Instant::now();
    assert_eq!(made.status, 201, "{}", made.text());
    let reader_token = made.json()["token"].as_str().expect("token").to_string();
    let reader = halite::client::HttpClient::new(&tls, Some(reader_token), false).expect("client");
    let query = serde_json::json!({
        "table": TABLE,
        "series": [["metric", "cpu"]],
        "start_ms": 0, "end_ms": u64::MAX / 2,
        "aggregate": {"functions": ["count"]}
    })
    .to_string();
    for (port, _) in &nodes {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = call(&reader, *port, "POST", "/api/v1/query", query.as_bytes());
            // The other node learns of the new token when it next reads
            // the shared catalog (every 5 s).
            if r.status == 401 && made_at.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(300));
                continue;
            }
            assert_eq!(
                r.status,
                200,
                "node on {port} (token made on {}): {}",
                nodes[0].0,
                r.text()
            );
            let answer = r.json();
            let counted: f64 = answer["aggregates"]
                .as_array()
                .expect("aggregates")
                .iter()
                .filter(|a| a["field"] == "usage_user")
                .map(|a| a["values"]["count"].as_f64().unwrap_or(0.0))
                .sum();
            let partial = answer["partial"] == true;
            if counted as u64 == points && !partial {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node on {port} read {counted} of {points} points; regions left out: {}",
                answer["missing_regions"]
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        let r = call(&anonymous, *port, "POST", "/api/v1/query", query.as_bytes());
        assert_eq!(r.status, 401, "{}", r.text());
        let plain = request(&format!("127.0.0.1:{port}"), "GET", "/readyz", None, b"");
        assert!(
            !plain.is_ok_and(|r| r.status == 200),
            "plain HTTP must not be served"
        );
    }
    // The tail reads between the nodes really happened, with the token.
    let tail_reads: f64 = nodes
        .iter()
        .map(|(port, _)| {
            let r = call(&admin, *port, "GET", "/metrics", b"");
            r.text()
                .lines()
                .filter(|l| l.starts_with("halite_http_requests_total") && l.contains("tail"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>()
        })
        .sum();
    assert!(tail_reads > 0.0, "no node asked another for its tail");
    for (_, server) in nodes {
        common::server::stop(server);
    }
}

/// InfluxQL over `db` on `addr`: the status and the answer.
fn influxql_in(addr: &str, db: &str, q: &str) -> (u16, Json) {
    let form = serde_urlencoded::to_string([("db", db), ("q", q)]).expect("form");
    let r = request(
        addr,
        "POST",
        "/query",
        Some("application/x-www-form-urlencoded"),
        form.as_bytes(),
    )
    .expect("query");
    (r.status, r.json())
}

/// Waits until every node of `nodes` answers `q` over `db` as `expected`.
fn wait_for_answer(nodes: &[&Node], db: &str, q: &str, expected: &Json, within: Duration) {
    let deadline = Instant::now() + within;
    for node in nodes {
        loop {
            let (status, answer) = influxql_in(&node.addr(), db, q);
            if status == 200 && answer == *expected {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {}: {q} answered {status} {answer}, not {expected}",
                node.name
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// A database in cluster mode (issue #58): Telegraf's lines of many
/// measurements and tags reach a two-node cluster half through a topic
/// mapped to the database (Telegraf's Kafka output, partitions chosen
/// by the producer) and half through InfluxDB's `/write` on either node,
/// after a `CREATE DATABASE` on one. Each measurement's table of open
/// tag sets is made by whichever node meets it first, in the shared
/// catalog; the names get the same UIDs on both nodes from the shared
/// dictionary on the object store. Every node answers the dashboard's
/// statements as InfluxDB 1.6 given the same lines, again after one node
/// is killed (its partitions replayed by the other), and again from the
/// killed node restarted cold.
#[test]
fn a_database_in_a_cluster_answers_influxql_as_influxdb_does_from_every_node() {
    const T0: u64 = 1_700_000_000_000_000_000;
    const DB_PARTITIONS: u32 = 4;
    let influx = common::influx::Influx::start();
    let s3 = S3::start(&["halite"]);
    let sc = cluster_builder(&s3)
        .topic("telegraf", DB_PARTITIONS)
        .topic("prom", 2)
        .config_append(
            r#"
[[kafka.topics]]
topic = "telegraf"
database = "telegraf"
format = "line"

[[kafka.topics]]
topic = "prom"
database = "prom"
format = "remote_write"
"#,
        )
        .build();
    let mut nodes = start_nodes(&sc, &["a", "b"]);
    let wait_for_every_partition = |nodes: &[&Node], what: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while owners_of(nodes, "telegraf", DB_PARTITIONS).is_none()
            || owners_of(nodes, "prom", 2).is_none()
            || owners(nodes).is_none()
        {
            assert!(
                Instant::now() < deadline,
                "{what}: partitions not all owned"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for_every_partition(&nodes.iter().collect::<Vec<_>>(), "at start");

    for addr in [&influx.addr, &nodes[0].addr()] {
        let (status, answer) = influxql_in(addr, "", "CREATE DATABASE telegraf");
        assert_eq!(status, 200, "{addr}: {answer}");
    }
    // The oracle gets every line; the cluster half through the topic (the
    // producer picking partitions) and half through `/write` on a node.
    let write_all = |messages: &[String], via: &[&Node]| {
        let r = request(
            &influx.addr,
            "POST",
            "/write?db=telegraf",
            None,
            messages.join("\n").as_bytes(),
        )
        .expect("influx write");
        assert_eq!(r.status, 204, "{}", r.text());
        let (by_kafka, by_http) = messages.split_at(messages.len() / 2);
        common::kafka::produce_payloads(sc.bootstrap(), "telegraf", by_kafka);
        for (i, body) in by_http.chunks(3).enumerate() {
            let r = request(
                &via[i % via.len()].addr(),
                "POST",
                "/write?db=telegraf",
                None,
                body.join("\n").as_bytes(),
            )
            .expect("write");
            assert_eq!(r.status, 204, "{}", r.text());
        }
    };
    write_all(
        &common::influx::telegraf_messages(T0, 10),
        &nodes.iter().collect::<Vec<_>>(),
    );

    // Prometheus' remote write on one node, into database `prom`.
    let t_ms = (T0 / 1_000_000) as i64;
    let samples: Vec<halite::ingest::remote_write::Series> = (0..6)
        .map(|i| halite::ingest::remote_write::Series {
            labels: vec![
                ("__name__".into(), "load".into()),
                ("instance".into(), format!("i{}", i % 3)),
            ],
            samples: vec![(i as f64 + 0.5, t_ms + i * 1000)],
        })
        .collect();
    let r = common::http::request_with(
        &nodes[1].addr(),
        "POST",
        "/api/v1/prom/write?db=prom",
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "snappy"),
        ],
        &halite::ingest::remote_write::encode_write_request(&samples),
    )
    .expect("remote write");
    assert_eq!(r.status, 204, "{}", r.text());
    // Remote read of both databases on a node: the samples as written,
    // and the Telegraf points as `<measurement>_<field>` metrics.
    let remote_read = |addr: &str, db: &str, matchers: &[(&str, &str)]| {
        use common::prometheus::{read_answer, read_request_between};
        let r = common::http::request_with(
            addr,
            "POST",
            &format!("/api/v1/read?db={db}"),
            &[
                ("Content-Type", "application/x-protobuf"),
                ("Content-Encoding", "snappy"),
            ],
            &read_request_between(matchers, t_ms as u64, t_ms as u64 + 3_600_000, None),
        )
        .expect("remote read");
        assert_eq!(r.status, 200, "{}", r.text());
        read_answer(&r.body)
    };
    let read_back = |nodes: &[&Node], when: &str, per_series: usize| {
        for node in nodes {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let got = remote_read(&node.addr(), "prom", &[("__name__", "load")]);
                let points: Vec<(f64, i64)> = got.iter().flat_map(|s| s.samples.clone()).collect();
                if got.len() == 3 && points.len() == 6 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{when}, node {}: remote read gave {got:?}",
                    node.name
                );
                std::thread::sleep(Duration::from_millis(250));
            }
            let user = remote_read(
                &node.addr(),
                "telegraf",
                &[("__name__", "cpu_usage_user"), ("host", "web-2")],
            );
            assert_eq!(user.len(), 2, "{when}, node {}: {user:?}", node.name);
            assert!(
                user.iter().all(|s| s.samples.len() == per_series),
                "{when}, node {}: {user:?}",
                node.name
            );
        }
    };

    let statements = common::influx::telegraf_statements(T0);
    let counted = "SELECT count(usage_idle) FROM cpu";
    let check = |nodes: &[&Node], when: &str| {
        let expected: Vec<Json> = statements
            .iter()
            .map(|q| influxql_in(&influx.addr, "telegraf", q).1)
            .collect();
        // Every point has arrived on every node once the counts agree.
        let all = influxql_in(&influx.addr, "telegraf", counted).1;
        wait_for_answer(nodes, "telegraf", counted, &all, Duration::from_secs(60));
        wait_for_answer(
            nodes,
            "telegraf",
            "SELECT count(free) FROM disk",
            &influxql_in(&influx.addr, "telegraf", "SELECT count(free) FROM disk").1,
            Duration::from_secs(30),
        );
        for node in nodes {
            for (q, want) in statements.iter().zip(&expected) {
                let (status, got) = influxql_in(&node.addr(), "telegraf", q);
                assert_eq!(status, 200, "{when}, node {}: {q}: {got}", node.name);
                common::influx::assert_close(
                    want,
                    &got,
                    &format!(
                        "{when}, node {}: {q}: influx {want} halite {got}",
                        node.name
                    ),
                );
            }
        }
    };
    check(&nodes.iter().collect::<Vec<_>>(), "written");
    read_back(&nodes.iter().collect::<Vec<_>>(), "written", 10);
    // The producer chose the partitions: most lines' buckets were another
    // partition's, and their consumers sent them on.
    let misrouted: u64 = nodes
        .iter()
        .map(|n| ingest_counter(n, "misrouted_points"))
        .sum();
    assert!(misrouted > 0, "no line went on to its bucket's partition");

    // Ten more intervals, and b killed as soon as they are acknowledged:
    // what b had not published is replayed by a from the topic.
    write_all(
        &common::influx::telegraf_messages(T0 + 100 * 1_000_000_000, 10),
        &nodes.iter().collect::<Vec<_>>(),
    );
    nodes[1]
        .server
        .as_mut()
        .expect("b runs")
        .child
        .kill()
        .expect("kill -9");
    let _ = nodes[1].server.take().map(|mut s| s.child.wait());
    wait_for_every_partition(&[&nodes[0]], "after the kill");
    check(&[&nodes[0]], "after b was killed");
    read_back(&[&nodes[0]], "after b was killed", 20);
    // Back with an empty disk: it reads what it needs from the store.
    let cold = sc.dir().join("b");
    let _ = std::fs::remove_dir_all(&cold);
    start(&sc, &mut nodes[1]);
    wait_for_every_partition(&nodes.iter().collect::<Vec<_>>(), "after b came back");
    check(&nodes.iter().collect::<Vec<_>>(), "b back cold");
    read_back(&nodes.iter().collect::<Vec<_>>(), "b back cold", 20);
}
