//! Crash torture (issue #7): the whole service ingests from a real broker
//! (Tansu) while a producer keeps writing and a client keeps changing the
//! catalog, and is SIGKILLed again and again — at random moments, and at
//! chosen ones: in a WAL group commit, between a flush's store files and
//! its manifest, likewise in a compaction, between a manifest's or the
//! catalog's new version and its rename, at each step of a region split.
//! Settings are shrunk so flushes, compactions and splits happen all the
//! time.
//!
//! After every kill: `halite verify` finds no problem in the data
//! directory, and every point below the group's committed offsets is
//! readable (those are never fetched again, so they must have been durable
//! before the kill). At the end, after catch-up: every produced point is
//! there exactly once, as the TSBS oracle says.
//!
//! `HALITE_TORTURE_KILLS` sets the number of kills (default 10, one of
//! each kind; `make torture` runs 100).

mod common;

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::http::request;
use common::kafka::{Load, assert_cpu_oracle};
use common::scenario::Scenario;
use common::server;
use halite::tsbs::{self, CPU_FIELDS};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::json;

const HOSTS: u64 = 20;
const PER_MESSAGE: u64 = 10;
const PARTITIONS: i32 = 4;

/// Where the service kills itself (`HALITE_FAILPOINT`), and how many hits
/// of the point to let pass first (at most); "" is a kill from outside at a
/// random moment.
const KILLS: [(&str, u64); 10] = [
    ("", 0),
    ("wal-group-commit", 100),
    ("flush-before-manifest", 6),
    ("compaction-before-manifest", 3),
    ("manifest-before-rename", 12),
    ("catalog-before-rename", 4),
    ("split-after-intent", 2),
    ("split-after-parent-flush", 2),
    ("split-after-daughters", 2),
    ("split-after-commit", 2),
];

/// Small enough that every kind of background work happens every second.
const SHRUNK: [&str; 7] = [
    "region.flush_size=\"256KiB\"",
    "region.max_size=\"512KiB\"",
    "region.split_check_interval=\"300ms\"",
    "region.compaction.min_files=2",
    "wal.segment_size=\"256KiB\"",
    "kafka.commit_interval=\"200ms\"",
    "kafka.batch_messages=200",
];

/// The messages of the topic as the test reads them itself: per partition,
/// by offset, the host and the number of points.
struct TopicCopy {
    consumer: BaseConsumer,
    partitions: Vec<Vec<(u64, u64)>>,
    hosts: HashMap<String, u64>,
}

impl TopicCopy {
    fn new(bootstrap: &str) -> TopicCopy {
        let consumer: BaseConsumer = rdkafka::config::ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "torture-reader")
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "100")
            .create()
            .expect("reader");
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset("cpu", p, rdkafka::Offset::Beginning)
                .expect("partition");
        }
        consumer.assign(&tpl).expect("assign");
        TopicCopy {
            consumer,
            partitions: vec![Vec::new(); PARTITIONS as usize],
            hosts: (0..HOSTS).map(|h| (tsbs::host_name(h), h)).collect(),
        }
    }

    /// Takes the next message, if one comes within `wait`.
    fn take(&mut self, wait: Duration) -> bool {
        let Some(m) = self.consumer.poll(wait) else {
            return false;
        };
        let m = m.expect("message");
        let p = m.partition() as usize;
        assert_eq!(
            m.offset() as usize,
            self.partitions[p].len(),
            "offsets run on"
        );
        let host = std::str::from_utf8(m.key().expect("keyed by host")).expect("utf-8");
        let points = m.payload().map_or(0, |b| {
            b.split(|&c| c == b'\n').filter(|l| !l.is_empty()).count()
        });
        self.partitions[p].push((self.hosts[host], points as u64));
        true
    }

    /// Reads until every partition holds at least `upto` messages.
    fn read_to(&mut self, upto: &[i64]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while (0..PARTITIONS as usize).any(|p| (self.partitions[p].len() as i64) < upto[p]) {
            assert!(Instant::now() < deadline, "the topic was not read back");
            self.take(Duration::from_millis(100));
        }
    }

    /// Reads until the topic holds `points` points; returns its messages.
    fn read_all(&mut self, points: u64) -> i64 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let total: u64 = self.partitions.iter().flatten().map(|&(_, n)| n).sum();
            if total >= points {
                return self.partitions.iter().map(|p| p.len() as i64).sum();
            }
            assert!(
                Instant::now() < deadline,
                "{total} of {points} points in the topic"
            );
            self.take(Duration::from_millis(100));
        }
    }

    /// Per host, how many of its points lie below the offsets (a host's
    /// messages are in step order in its one partition).
    fn steps_below(&mut self, committed: &[i64]) -> Vec<u64> {
        self.read_to(committed);
        let mut steps = vec![0u64; HOSTS as usize];
        for (p, msgs) in self.partitions.iter().enumerate() {
            for &(host, points) in &msgs[..committed[p] as usize] {
                steps[host as usize] += points;
            }
        }
        steps
    }
}

/// The group's committed offsets, per partition (asked without joining).
fn committed_offsets(bootstrap: &str) -> Vec<i64> {
    let consumer: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "halite")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition("cpu", p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    (0..PARTITIONS)
        .map(
            |p| match committed.find_partition("cpu", p).map(|e| e.offset()) {
                Some(rdkafka::Offset::Offset(o)) => o,
                _ => 0,
            },
        )
        .collect()
}

/// Every host's first `steps[host]` points are there, every field, and no
/// more of them than that (a replay rewrites a cell, it adds none).
fn assert_committed_readable(addr: &str, steps: &[u64]) {
    for (host, &k) in steps.iter().enumerate() {
        if k == 0 {
            continue;
        }
        let r = request(
            addr,
            "POST",
            "/api/v1/query",
            Some("application/json"),
            json!({
                "table": "metrics:cpu",
                "series": [["metric", "cpu"], ["host", tsbs::host_name(host as u64)]],
                "start_ms": 0,
                "end_ms": tsbs::T0_MS + k * tsbs::INTERVAL_MS,
                "aggregate": {"functions": ["count"]}
            })
            .to_string()
            .as_bytes(),
        )
        .expect("query");
        assert_eq!(r.status, 200, "{}", r.text());
        let answer: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
        let counts: HashMap<String, f64> = answer["aggregates"]
            .as_array()
            .expect("aggregates")
            .iter()
            .map(|a| {
                (
                    a["field"].as_str().expect("field").to_string(),
                    a["values"]["count"].as_f64().expect("count"),
                )
            })
            .collect();
        for f in CPU_FIELDS {
            assert_eq!(
                counts.get(f).copied(),
                Some(k as f64),
                "host {host} field {f}: {k} points committed"
            );
        }
    }
}

fn assert_verifies(data: &Path, after: &str) {
    let report = halite::verify::verify(data).expect("a data directory");
    assert_eq!(report.problems(), 0, "after {after}: {report:#?}");
}

/// Creates, alters and drops a table in a loop while the service runs (or
/// is down: errors are expected then), so kills land in catalog changes.
fn churn_catalog(port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let addr = format!("127.0.0.1:{port}");
        let mut changes = 0;
        while !stop.load(Ordering::SeqCst) {
            let steps: [(&str, &str, serde_json::Value); 4] = [
                ("POST", "/api/v1/namespaces", json!({"name": "churn"})),
                (
                    "POST",
                    "/api/v1/tables",
                    json!({"name": "churn:t", "families": [{"name": "f"}],
                           "key": {"fields": [{"name": "k", "type": "string", "width": 8}]},
                           "split_points": ["6d"]}),
                ),
                (
                    "PATCH",
                    "/api/v1/tables/churn:t",
                    json!({"families": [{"name": "f", "versions": 3}]}),
                ),
                ("DELETE", "/api/v1/tables/churn:t", json!(null)),
            ];
            for (method, path, body) in steps {
                let body = if body.is_null() {
                    Vec::new()
                } else {
                    body.to_string().into_bytes()
                };
                if let Ok(r) = request(&addr, method, path, Some("application/json"), &body)
                    && r.status < 300
                {
                    changes += 1;
                }
                std::thread::sleep(Duration::from_millis(150));
            }
        }
        changes
    })
}

#[test]
fn sigkill_at_any_moment_loses_nothing_committed_and_nothing_produced() {
    let kills: usize = std::env::var("HALITE_TORTURE_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KILLS.len());
    // Plain uncompressed blocks: store files grow fast enough to split.
    let mut sc = SHRUNK
        .iter()
        .fold(Scenario::new(), |sc, setting| sc.set(setting))
        .topic("cpu", PARTITIONS as u32)
        .config_replace(
            "compression = \"SNAPPY\", bloomfilter = \"ROWPREFIX\", data_block_encoding = \"TIME_SERIES\"",
            "compression = \"NONE\", bloomfilter = \"ROWPREFIX\"",
        )
        .seed("HALITE_TORTURE_SEED")
        .build();
    // The check between kills: the same store, no consumer, no flush at
    // the end (the next run must still recover from the WAL).
    let check_settings = ["kafka.brokers=\"\"", "region.flush_on_close=false"];
    // About 8 s of service per kill.
    let points = (kills as u64 * 8 * 2_000).max(50_000);
    let producer = sc.produce_in_background(
        "cpu",
        Load {
            hosts: HOSTS,
            points,
            per_message: PER_MESSAGE,
            rate: 2_000,
        },
    );
    let stop_churn = Arc::new(AtomicBool::new(false));
    let churn = churn_catalog(sc.port, stop_churn.clone());
    let mut topic = TopicCopy::new(sc.bootstrap());

    let mut at_site: HashMap<&str, usize> = HashMap::new();
    let mut from_outside = 0;
    let mut committed_checked = 0u64;
    for kill in 0..kills {
        let (site, most) = KILLS[kill % KILLS.len()];
        let failpoint = (!site.is_empty()).then(|| format!("{site}@{}", 1 + sc.rng().below(most)));
        // Not waited for: it may die before it is ready, which is the point.
        let env: Vec<(&str, &str)> = failpoint
            .iter()
            .map(|fp| ("HALITE_FAILPOINT", fp.as_str()))
            .collect();
        let mut srv = sc.launch(&[], &env);
        let deadline = if site.is_empty() {
            Instant::now() + Duration::from_millis(2_000 + sc.rng().below(6_000))
        } else {
            Instant::now() + Duration::from_secs(20)
        };
        let died_by_itself = loop {
            if let Some(status) = srv.child.try_wait().expect("try_wait") {
                assert_eq!(
                    status.signal(),
                    Some(libc::SIGKILL),
                    "kill {kill}: the service exited on its own ({status:?})"
                );
                break true;
            }
            if Instant::now() >= deadline {
                srv.child.kill().expect("SIGKILL");
                srv.child.wait().expect("wait");
                break false;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if died_by_itself {
            *at_site.entry(site).or_default() += 1;
        } else {
            from_outside += 1;
        }
        let what = failpoint.as_deref().unwrap_or("a random moment");
        eprintln!(
            "kill {kill}: {}",
            match (died_by_itself, &failpoint) {
                (true, _) => format!("at {what}"),
                (false, Some(_)) => format!("from outside ({what} not reached)"),
                (false, None) => "from outside, at a random moment".to_string(),
            }
        );
        assert_verifies(sc.data(), what);
        let committed = committed_offsets(sc.bootstrap());
        let steps = topic.steps_below(&committed);
        let check = sc.start_with(&check_settings);
        assert_committed_readable(&check.addr, &steps);
        committed_checked += steps.iter().sum::<u64>();
        server::stop(check);
    }
    producer.join().expect("producer");
    stop_churn.store(true, Ordering::SeqCst);
    let catalog_changes = churn.join().expect("churn");

    // Catch-up: every produced point exactly once.
    let srv = sc.start();
    let messages = topic.read_all(points);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let committed: i64 = committed_offsets(sc.bootstrap()).iter().sum();
        if committed == messages {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "catch-up: the group committed {committed} of {messages} messages; {}",
            common::kafka::status(&srv.addr)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_cpu_oracle(&srv.addr, HOSTS, points);
    server::stop(srv);
    assert_verifies(sc.data(), "the last clean stop");
    eprintln!(
        "torture: {kills} kills ({} at chosen points: {at_site:?}; {from_outside} from outside), \
         {committed_checked} committed points checked after kills, {catalog_changes} catalog \
         changes, {points} points in the end",
        kills - from_outside
    );
    assert!(
        kills < KILLS.len() || at_site.len() >= KILLS.len() / 2,
        "too few kills landed at their chosen points: {at_site:?}"
    );
}
