//! Kafka ingestion under faults, against a real broker (Tansu): SIGKILL in
//! the middle of ingestion, a restart with no Kafka commit to go by, a
//! consumer far faster than the store, and a second group member joining
//! and leaving. Every produced point must end up readable exactly once.

mod common;

use std::time::{Duration, Instant};

use common::http::free_port;
use common::kafka::{
    Load, assert_cpu_oracle, committed_total, group_committed_total, query, status, wait_for,
    wait_for_group_commit,
};
use common::scenario::Scenario;
use common::server;
use halite::tsbs::{self, CPU_FIELDS};
use serde_json::json;

fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[test]
fn sigkill_during_ingest_loses_nothing_and_duplicates_nothing() {
    const HOSTS: u64 = 50;
    const POINTS: u64 = 400_000;
    const PER_MESSAGE: u64 = 10;
    let kills: usize = std::env::var("HALITE_KAFKA_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut sc = Scenario::new()
        .topic("cpu", 4)
        .set("kafka.commit_interval=\"300ms\"")
        .seed("HALITE_KAFKA_SEED")
        .build();

    // The producer keeps writing while the service is killed and restarted:
    // a restart cycle (start, group join, a random wait) takes ~3 s.
    let rate = (POINTS / (kills as u64 * 3)).max(100);
    let producer = sc.produce_in_background(
        "cpu",
        Load {
            hosts: HOSTS,
            points: POINTS,
            per_message: PER_MESSAGE,
            rate,
        },
    );
    let mut killed_mid_ingest = 0;
    for kill in 0..kills {
        let mut srv = sc.start();
        // Killed once it is consuming (or has had nothing to consume for a
        // while), at a random moment after.
        let deadline = Instant::now() + Duration::from_secs(20);
        while status(&srv.addr)["messages"] == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(sc.rng().below(700)));
        let before = status(&srv.addr);
        srv.child.kill().expect("SIGKILL");
        srv.child.wait().expect("wait");
        if before["points"].as_u64() > Some(0) {
            killed_mid_ingest += 1;
        }
        eprintln!(
            "kill {kill}: {} messages, {} points written in this run, resumed {}",
            before["messages"], before["points"], before["resumed"]
        );
    }
    producer.join().expect("producer");
    assert!(
        killed_mid_ingest > 0,
        "no kill landed while points were written"
    );

    let srv = sc.start();
    let messages = (POINTS / PER_MESSAGE) as i64;
    wait_for_group_commit(sc.bootstrap(), "cpu", 4, messages);
    // Exactly once as a cell: counts equal the oracle's, so a replayed
    // point rewrote its cell instead of adding one.
    let got = assert_cpu_oracle(&srv.addr, HOSTS, POINTS);
    assert_eq!(got.len() as u64, HOSTS * 10);
    // And after a clean restart (WAL replay of what is not flushed).
    server::stop(srv);
    let srv = sc.start();
    assert_cpu_oracle(&srv.addr, HOSTS, POINTS);
    server::stop(srv);
}

/// The broker keeps its topics on S3 (Tansu's `s3://` storage over
/// s3s-fs) and is killed and started again several times while a producer
/// writes and the service consumes: both ride through, and every produced
/// point ends up readable exactly once as a cell.
#[test]
fn broker_restarts_mid_ingest_lose_nothing() {
    const HOSTS: u64 = 20;
    // Tansu on S3 serves about a dozen record batches a second to a
    // consumer here: big messages, so the run is about the restarts.
    const POINTS: u64 = 12_000;
    const PER_MESSAGE: u64 = 100;
    const RESTARTS: usize = 3;
    let mut sc = Scenario::new()
        .broker_on_s3()
        .topic("cpu", 4)
        .set("kafka.commit_interval=\"300ms\"")
        .seed("HALITE_KAFKA_SEED")
        .build();
    let srv = sc.start();
    let started = Instant::now();
    let producer = sc.produce_in_background(
        "cpu",
        Load {
            hosts: HOSTS,
            points: POINTS,
            per_message: PER_MESSAGE,
            rate: 2_000,
        },
    );
    let mut restarted_mid_ingest = 0;
    for restart in 0..RESTARTS {
        std::thread::sleep(Duration::from_millis(1_500 + sc.rng().below(1_500)));
        let before = status(&srv.addr);
        sc.broker_mut().restart();
        if before["points"].as_u64() > Some(0) && before["points"].as_u64() < Some(POINTS) {
            restarted_mid_ingest += 1;
        }
        eprintln!(
            "broker restart {restart} at {:.1} s: {} messages, {} points consumed so far",
            started.elapsed().as_secs_f64(),
            before["messages"],
            before["points"]
        );
    }
    producer.join().expect("producer");
    assert!(restarted_mid_ingest > 0, "no restart landed mid-ingest");
    // A producer's retry across a restart may have sent a message twice:
    // at least every message is committed.
    let messages = (POINTS / PER_MESSAGE) as i64;
    let deadline = Instant::now() + Duration::from_secs(90);
    while group_committed_total(sc.bootstrap(), "halite", "cpu", 4) < messages {
        assert!(
            Instant::now() < deadline,
            "the group never committed every message"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let got = assert_cpu_oracle(&srv.addr, HOSTS, POINTS);
    assert_eq!(got.len() as u64, HOSTS * 10);
    eprintln!(
        "{RESTARTS} broker restarts ridden through; {POINTS} points in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    server::stop(srv);
}

#[test]
fn a_restart_resumes_from_the_store_when_no_commit_happened() {
    const HOSTS: u64 = 20;
    const POINTS: u64 = 100_000;
    let sc = Scenario::new().topic("cpu", 4).build();
    sc.produce(
        "cpu",
        Load {
            hosts: HOSTS,
            points: POINTS,
            per_message: 1,
            rate: 0,
        },
    );
    // No interval commits: only the store knows how far ingestion got.
    let mut srv = sc.start_with(&["kafka.commit_interval=\"1h\""]);
    let s = wait_for(&srv.addr, "every point durable", |s| s["points"] == POINTS);
    assert_eq!(committed_total(&s, "cpu"), 0, "{s}");
    srv.child.kill().expect("SIGKILL");
    srv.child.wait().expect("wait");

    let srv = sc.start_with(&["kafka.commit_interval=\"200ms\""]);
    let s = wait_for(&srv.addr, "every message committed", |s| {
        committed_total(s, "cpu") == POINTS as i64
    });
    let resumed = s["resumed"].as_array().expect("resumed");
    assert_eq!(
        resumed.len(),
        4,
        "every partition resumed from the store: {s}"
    );
    // Only the batches in the pipeline at the kill are read again, not the
    // whole topic: at most (4 queued + 4 writing + 8 in flight) batches of
    // 2,000 messages.
    let replayed = s["messages"].as_u64().expect("messages");
    assert!(
        replayed < POINTS / 2,
        "replayed {replayed} of {POINTS}: {s}"
    );
    assert_cpu_oracle(&srv.addr, HOSTS, POINTS);
    server::stop(srv);
}

#[test]
fn a_consumer_faster_than_the_store_holds_back_fetches_each_message_once_and_memory_stays_bounded()
{
    const HOSTS: u64 = 100;
    const POINTS: u64 = 1_500_000;
    // Tiny MemStores (flushes hold writers back), a small fetch buffer and
    // librdkafka prefetch (64 MiB by default, bounded here too); the data
    // is ~600 MB as cells.
    let sc = Scenario::new()
        .topic("cpu", 4)
        .client("\"queued.max.messages.kbytes\" = \"16384\"")
        .set("region.global_memstore_size=\"16MiB\"")
        .set("kafka.max_buffered=\"8MiB\"")
        .set("kafka.writers=2")
        .set("kafka.max_in_flight=4")
        .set("kafka.commit_interval=\"200ms\"")
        .build();
    sc.produce(
        "cpu",
        Load {
            hosts: HOSTS,
            points: POINTS,
            per_message: 10,
            rate: 0,
        },
    );
    let srv = sc.start();
    let pid = srv.child.id();
    let base = rss_bytes(pid);
    // Peak RSS while the first and the second half of the points go in.
    let mut peaks = [base, base];
    let deadline = Instant::now() + Duration::from_secs(120);
    let messages = (POINTS / 10) as i64;
    loop {
        let rss = rss_bytes(pid);
        let s = status(&srv.addr);
        let half = usize::from(s["points"].as_u64().unwrap_or(0) > POINTS / 2);
        peaks[half] = peaks[half].max(rss);
        if std::env::var_os("HALITE_TRACE_RSS").is_some() {
            eprintln!("{} MiB, {} points", rss >> 20, s["points"]);
        }
        if committed_total(&s, "cpu") == messages {
            break;
        }
        assert!(Instant::now() < deadline, "ingestion stalled: {s}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // librdkafka's statistics come every second.
    std::thread::sleep(Duration::from_millis(2500));
    let s = status(&srv.addr);
    eprintln!(
        "rss: {} MiB at start, peak {} MiB in the first half, {} MiB in the second; \
         holds {}, pauses {}, {} messages fetched for {messages}",
        base >> 20,
        peaks[0] >> 20,
        peaks[1] >> 20,
        s["holds"],
        s["pauses"],
        s["fetched_messages"]
    );
    // Writers that keep taking batches, only slower than the broker
    // sends, are waited for: the partitions pause only when they are
    // stuck for a second (a flush that long on a loaded machine), not
    // each time the buffer fills.
    let (holds, pauses) = (
        s["holds"].as_u64().unwrap_or(0),
        s["pauses"].as_u64().unwrap_or(0),
    );
    assert!(holds > 0, "never held back: {s}");
    assert!(
        pauses * 4 <= holds,
        "paused {pauses} times in {holds} holds: {s}"
    );
    // Holding back leaves what librdkafka prefetched where it is; a pause
    // drops it (up to queued.max.messages.kbytes), and the broker sends it
    // again after the resume.
    let (fetched, fetched_bytes) = (
        s["fetched_messages"].as_u64().unwrap_or(0),
        s["fetched_bytes"].as_u64().unwrap_or(0),
    );
    let prefetch = (16u64 << 20) * fetched / fetched_bytes.max(1) + 1;
    let messages = messages as u64;
    assert!(
        fetched >= messages && fetched <= messages + messages / 20 + pauses * prefetch,
        "{fetched} messages fetched for {messages}: {s}"
    );
    // Bounded: memory does not grow with the input (the second half of the
    // points peaks no higher than the first, give or take the allocator)...
    assert!(
        peaks[1] < peaks[0] + (96 << 20),
        "RSS grew with the input: {} MiB, then {} MiB",
        peaks[0] >> 20,
        peaks[1] >> 20
    );
    // ...and stays far below the ~330 MB of messages (~1.1 GB as cells):
    // MemStores (16 MiB, their 2 MiB arena chunks per region and a 64 MiB
    // pool of spare chunks), the fetch buffer (8 MiB), librdkafka's
    // prefetch (16 MiB), two writers' batches and four submitted ones
    // waiting for their WAL sync (each a few MiB as cells), WAL buffers
    // and what the allocator keeps per thread: mimalloc holds freed pages
    // for reuse a while (with MIMALLOC_PURGE_DELAY=0 this peak measured
    // 159-177 MiB instead of 280-320).
    let bound = base + (384 << 20);
    let peak = peaks[0].max(peaks[1]);
    assert!(
        peak < bound,
        "peak RSS {} MiB over {} MiB",
        peak >> 20,
        bound >> 20
    );
    assert_cpu_oracle(&srv.addr, HOSTS, POINTS);
    server::stop(srv);
}

#[test]
fn two_members_share_the_partitions_and_together_hold_every_point() {
    const HOSTS: u64 = 20;
    const POINTS: u64 = 60_000;
    let sc = Scenario::new()
        .topic("cpu", 4)
        .set("kafka.commit_interval=\"200ms\"")
        .build();
    let a = sc.start_member("a", free_port(), &[]);
    // Points keep coming for ~6 s while the group changes.
    let producer = sc.produce_in_background(
        "cpu",
        Load {
            hosts: HOSTS,
            points: POINTS,
            per_message: 1,
            rate: 10_000,
        },
    );
    wait_for(&a.addr, "the first member to consume", |s| {
        s["points"].as_u64() > Some(0)
    });
    let port_b = free_port();
    let b = sc.start_member("b", port_b, &[]);
    wait_for(&b.addr, "the second member to get partitions", |s| {
        s["points"].as_u64() > Some(1000)
    });
    // B leaves cleanly: its last commit covers what it wrote.
    server::stop(b);
    producer.join().expect("producer");
    wait_for_group_commit(sc.bootstrap(), "cpu", 4, POINTS as i64);
    let b = sc.start_member("b", port_b, &["kafka.brokers=\"\""]);

    // Together they hold every point (at-least-once: a point near a
    // hand-over may be in both), each equal to the oracle.
    let steps = POINTS / HOSTS;
    let mut in_both = 0;
    for host in 0..HOSTS {
        let mut seen = vec![0u8; steps as usize];
        for srv in [&a, &b] {
            let answer = query(
                &srv.addr,
                &json!({
                    "table": "metrics:cpu",
                    "series": [["metric", "cpu"], ["host", tsbs::host_name(host)]],
                    "start_ms": 0, "end_ms": u64::MAX / 2,
                }),
            );
            for row in answer["rows"].as_array().expect("rows") {
                let cells = row["cells"].as_array().expect("cells");
                assert_eq!(cells.len(), 10);
                let ts = cells[0]["timestamp"].as_u64().expect("ts");
                let step = (ts - tsbs::T0_MS) / tsbs::INTERVAL_MS;
                for c in cells {
                    let i = CPU_FIELDS
                        .iter()
                        .position(|f| c["qualifier"] == *f)
                        .expect("known field");
                    assert_eq!(c["value"].as_f64(), Some(tsbs::cpu_value(host, step, i)));
                }
                seen[step as usize] += 1;
            }
        }
        in_both += seen.iter().filter(|&&n| n == 2).count();
        let missing: Vec<usize> = (0..seen.len()).filter(|&s| seen[s] == 0).collect();
        assert!(missing.is_empty(), "host {host} misses steps {missing:?}");
    }
    eprintln!("points held by both members: {in_both} of {POINTS}");
    server::stop(a);
    server::stop(b);
}

#[test]
fn sigterm_under_load_drops_readiness_first_and_commits_exactly_what_is_durable() {
    const HOSTS: u64 = 50;
    const POINTS: u64 = 300_000;
    const PER_MESSAGE: u64 = 10;
    let sc = Scenario::new()
        .topic("cpu", 4)
        .set("kafka.commit_interval=\"5s\"")
        .build();
    let producer = sc.produce_in_background(
        "cpu",
        Load {
            hosts: HOSTS,
            points: POINTS,
            per_message: PER_MESSAGE,
            rate: 30_000,
        },
    );
    let mut srv = sc.start();
    wait_for(&srv.addr, "points flowing", |s| {
        s["points"].as_u64() > Some(20_000)
    });

    // Readiness is watched from the moment of the signal until the
    // listener closes.
    let addr = srv.addr.clone();
    let watcher = std::thread::spawn(move || {
        let mut seen = Vec::new();
        loop {
            match common::http::request(&addr, "GET", "/readyz", None, b"") {
                Ok(r) => seen.push(r.status),
                Err(_) => return seen,
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let signalled = Instant::now();
    // SAFETY: sending a signal to our own child process by its pid.
    assert_eq!(
        unsafe { libc::kill(srv.child.id() as i32, libc::SIGTERM) },
        0
    );
    let exit = srv.child.wait().expect("wait");
    let took = signalled.elapsed();
    assert!(exit.success(), "exit: {exit:?}");
    assert!(took < Duration::from_secs(30), "took {took:?} to stop");
    let seen = watcher.join().expect("watcher");
    let first_down = seen.iter().position(|&s| s == 503);
    assert!(
        first_down.is_some() && seen[first_down.unwrap_or(0)..].iter().all(|&s| s == 503),
        "readiness did not drop for good before the listener closed: {seen:?}"
    );
    let committed_at_exit =
        common::kafka::group_committed_total(sc.bootstrap(), "halite", "cpu", 4);
    assert!(committed_at_exit > 0);

    // The store holds exactly what was committed: no partition resumes
    // ahead of its commit, and nothing below it is read again.
    producer.join().expect("producer");
    let srv = sc.start();
    let messages = (POINTS / PER_MESSAGE) as i64;
    let s = wait_for(&srv.addr, "the rest consumed", |s| {
        s["messages"].as_i64() == Some(messages - committed_at_exit)
    });
    assert_eq!(s["resumed"], json!([]), "{s}");
    wait_for_group_commit(sc.bootstrap(), "cpu", 4, messages);
    let s = status(&srv.addr);
    assert_eq!(
        s["messages"].as_i64(),
        Some(messages - committed_at_exit),
        "messages read twice: {s}"
    );
    assert_cpu_oracle(&srv.addr, HOSTS, POINTS);
    eprintln!(
        "stopped in {took:?} with {committed_at_exit} of {messages} messages committed; \
         readiness 503 for {} polls before the listener closed",
        seen.len() - first_down.unwrap_or(0)
    );
    server::stop(srv);
}

/// Every answer a user can get from the table, as bytes.
fn answers(addr: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let calls = [
        ("/api/v1/tables/metrics:cpu/scan", json!({"limit": 100_000})),
        (
            "/api/v1/query",
            json!({"table": "metrics:cpu", "series": [["metric", "cpu"]]}),
        ),
        (
            "/api/v1/query",
            json!({"table": "metrics:cpu", "series": [["metric", "cpu"]],
                   "aggregate": {"functions": ["count", "sum", "min", "max", "first", "last"],
                                 "downsample_ms": 60_000}}),
        ),
    ];
    for (path, body) in calls {
        let r = common::http::request(
            addr,
            "POST",
            path,
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .expect("call");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        out.push(r.body);
    }
    out
}

/// Commits offset 0 for every partition of `topic` in the `halite` group,
/// as `kafka-consumer-groups --reset-offsets --to-earliest` does.
fn reset_group_to_earliest(bootstrap: &str, topic: &str, partitions: i32) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let consumer: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "halite")
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Offset(0))
            .expect("partition");
    }
    consumer
        .commit(&tpl, CommitMode::Sync)
        .expect("commit offsets 0");
}

#[test]
fn ingesting_a_topic_twice_more_changes_no_answer_by_a_byte() {
    const HOSTS: u64 = 20;
    const POINTS: u64 = 40_000;
    let sc = Scenario::new()
        .topic("cpu", 4)
        .set("kafka.commit_interval=\"200ms\"")
        .build();
    sc.produce(
        "cpu",
        Load {
            hosts: HOSTS,
            points: POINTS,
            per_message: 10,
            rate: 0,
        },
    );
    let messages = (POINTS / 10) as i64;
    let srv = sc.start();
    wait_for_group_commit(sc.bootstrap(), "cpu", 4, messages);
    let once = answers(&srv.addr);
    assert!(
        once.iter().all(|a| a.len() > 10_000),
        "answers too small to tell"
    );
    server::stop(srv);

    // Twice more, from the start: the group reset, the store's own
    // position set aside as a user replaying a topic would.
    let replay = ["kafka.resume_from_store=false"];
    for round in 0..2 {
        reset_group_to_earliest(sc.bootstrap(), "cpu", 4);
        assert_eq!(
            common::kafka::group_committed_total(sc.bootstrap(), "halite", "cpu", 4),
            0
        );
        let srv = sc.start_with(&replay);
        let s = wait_for(&srv.addr, "the whole topic again", |s| {
            s["messages"].as_i64() == Some(messages) && committed_total(s, "cpu") == messages
        });
        assert_eq!(s["points"].as_u64(), Some(POINTS), "round {round}: {s}");
        let again = answers(&srv.addr);
        for (i, (a, b)) in once.iter().zip(&again).enumerate() {
            assert!(
                a == b,
                "round {round}: answer {i} changed ({} bytes, then {})",
                a.len(),
                b.len()
            );
        }
        server::stop(srv);
    }
}

/// A stop while the broker hangs (or died a moment ago): the last commit
/// cannot reach the group coordinator and must not hold the stop up. A
/// synchronous commit waited for the coordinator without a bound, and the
/// demo's Ctrl-C overran its 8 s deadline (exit 1, "the kafka consumer did
/// not stop") when the stop came before librdkafka saw the broker gone.
#[test]
fn a_stop_while_the_broker_hangs_ends_in_time() {
    // Nothing is committed before the stop: the last commit has it all.
    let sc = Scenario::new()
        .topic("cpu", 4)
        .set("kafka.commit_interval=\"1h\"")
        .build();
    sc.produce(
        "cpu",
        Load {
            hosts: 10,
            points: 20_000,
            per_message: 10,
            rate: 0,
        },
    );
    let srv = sc.start();
    wait_for(&srv.addr, "every point ingested", |s| {
        s["points"].as_u64() >= Some(20_000)
    });
    sc.broker().freeze();
    let signalled = Instant::now();
    server::stop(srv);
    assert!(
        signalled.elapsed() < Duration::from_secs(8),
        "the stop took {:?}",
        signalled.elapsed()
    );
}
