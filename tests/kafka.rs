//! Kafka ingestion against a real broker (Tansu): every produced point lands
//! and equals the oracle, bad messages go to the dead-letter topic with
//! their reason, offsets are committed for exactly what was handled, and a
//! restart resumes there without replaying.

mod common;

use std::time::{Duration, Instant};

use common::kafka::{
    Load, assert_cpu_oracle, assert_cpu_oracle_in, committed_total, query, status, wait_for,
};
use common::scenario::Scenario;
use common::server;
use halite::tsbs::{self, CPU_FIELDS};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::json;

const HOSTS: u64 = 100;
const POINTS: u64 = 200_000;

#[test]
fn kafka_points_land_bad_ones_are_dead_lettered_and_commits_resume() {
    // The example config plus a JSON topic for the same table.
    let sc = Scenario::new()
        .topic("cpu", 8)
        .topic("cpu_json", 2)
        .topic("dead", 1)
        .config_append(
            "\n[[kafka.topics]]\ntopic = \"cpu_json\"\ntable = \"metrics:cpu\"\nformat = \"json\"\n",
        )
        .set("kafka.dead_letter_topic=\"dead\"")
        .set("kafka.commit_interval=\"200ms\"")
        .build();
    let srv = sc.start();

    // 200,000 points, 20 per message, over 8 partitions.
    sc.produce(
        "cpu",
        Load {
            hosts: HOSTS,
            points: POINTS,
            per_message: 20,
            rate: 0,
        },
    );
    let cpu_messages = (POINTS / 20) as i64;

    // Poison, mixed with good JSON points.
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", sc.bootstrap())
        .create()
        .expect("producer");
    let long_host = "h".repeat(40);
    // Bad values, a tag too wide for its key field, a key past 64 KiB, a
    // NaN, a message of 600 KB, a tag named twice (the first was taken),
    // a time past 2262 (stored).
    let poison_lines = [
        "cpu,host=host_0001 usage_user=oops 1700000000000".to_string(),
        format!("cpu,host={long_host} usage_user=1 1700000000000"),
        format!("cpu,host={} usage_user=1 1700000000000", "k".repeat(70_000)),
        "cpu,host=host_0002 usage_user=NaN 1700000000000".to_string(),
        format!(
            "cpu,host=big_msg usage_user=1 1700000000000\n{}",
            "cpu,host=big_msg usage_user=\"x\" bad\n".repeat(15_000)
        ),
        "cpu,host=host_0003,host=host_0004 usage_user=1 1700000000000".to_string(),
        "cpu,host=host_0005 usage_user=1 9223372036854775807".to_string(),
    ];
    let json_good = json!([
        {"metric": "cpu", "tags": {"host": "json_a"}, "ts": 1_700_000_000_000u64, "fields": {"usage_user": 1.5}},
        {"metric": "cpu", "tags": {"host": "json_b"}, "ts": 1_700_000_000_000u64, "fields": {"usage_user": 2.5}},
    ])
    .to_string();
    let poison_json = [
        "{not json".to_string(),
        json!({"metric": "cpu", "tags": {"host": "json_c"}, "ts": 1, "fields": {"usage_user": {"nested": 1}}})
            .to_string(),
        r#"{"metric": "cpu", "tags": {"host": "json_e", "host": "json_f"}, "ts": 1700000000000, "fields": {"usage_user": 1}}"#
            .to_string(),
    ];
    for line in &poison_lines {
        producer
            .send(BaseRecord::<'_, (), str>::to("cpu").payload(line))
            .map_err(|(e, _)| e)
            .expect("produce poison");
    }
    for payload in poison_json.iter().chain(std::iter::once(&json_good)) {
        producer
            .send(BaseRecord::<'_, (), str>::to("cpu_json").payload(payload))
            .map_err(|(e, _)| e)
            .expect("produce json");
    }
    // Ten points of json_d, then a delete of three of them, then a delete
    // that is wrong: one partition (one key), so in this order.
    const T_D: u64 = 1_700_000_100_000;
    let json_d = json!((0..10)
        .map(|i| json!({"metric": "cpu", "tags": {"host": "json_d"}, "ts": T_D + i * 1000, "fields": {"usage_user": i}}))
        .collect::<Vec<_>>())
    .to_string();
    let delete = json!({"delete": {"series": [["metric", "cpu"], ["host", "json_d"]],
                                   "start_ms": T_D + 2000, "end_ms": T_D + 5000}})
    .to_string();
    let bad_delete = json!({"delete": {"series": "json_d"}}).to_string();
    // Points after the delete, at times it did not cover, stay.
    let after = json!((10..12)
        .map(|i| json!({"metric": "cpu", "tags": {"host": "json_d"}, "ts": T_D + i * 1000, "fields": {"usage_user": i}}))
        .collect::<Vec<_>>())
    .to_string();
    for payload in [&json_d, &delete, &bad_delete, &after] {
        producer
            .send(
                BaseRecord::<'_, str, str>::to("cpu_json")
                    .key("json_d")
                    .payload(payload),
            )
            .map_err(|(e, _)| e)
            .expect("produce json_d");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");

    let s = wait_for(&srv.addr, "every message handled and committed", |s| {
        committed_total(s, "cpu") == cpu_messages + 7 && committed_total(s, "cpu_json") == 8
    });
    // The good line of the 600 KB message lands; its bad lines are the
    // message's reason to be dead-lettered.
    assert_eq!(s["points"], POINTS + 3 + 12, "{s}");
    assert_eq!(s["bad_messages"], 11, "{s}");
    assert_eq!(s["dead_lettered"], 11, "{s}");
    assert_eq!(s["batches_failed"], 0, "{s}");
    assert_eq!(s["deletes"], 1, "{s}");
    let answer = query(
        &srv.addr,
        &json!({"table": "metrics:cpu", "series": [["metric", "cpu"], ["host", "json_d"]]}),
    );
    let left: Vec<u64> = answer["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["cells"][0]["value"].as_u64().expect("value"))
        .collect();
    assert_eq!(
        left,
        vec![11, 10, 9, 8, 7, 6, 5, 1, 0],
        "the delete took points 2, 3 and 4"
    );

    // Every point equals the oracle.
    let got = assert_cpu_oracle(&srv.addr, HOSTS, POINTS);
    assert_eq!(got.len() as u64, HOSTS * 10 + 4, "series x fields");
    let steps = POINTS / HOSTS;
    assert_eq!(
        got[&("json_b".to_string(), "usage_user".to_string())]["max"].as_f64(),
        Some(2.5)
    );
    for host in [0, 37, 99] {
        let answer = query(
            &srv.addr,
            &json!({
                "table": "metrics:cpu",
                "series": [["metric", "cpu"], ["host", tsbs::host_name(host)]],
                "start_ms": 0, "end_ms": u64::MAX / 2,
            }),
        );
        let rows = answer["rows"].as_array().expect("rows");
        assert_eq!(rows.len() as u64, steps);
        // Newest first: row j is step steps-1-j.
        for (j, row) in rows.iter().enumerate() {
            let step = steps - 1 - j as u64;
            let cells = row["cells"].as_array().expect("cells");
            assert_eq!(cells.len(), 10);
            for c in cells {
                let i = CPU_FIELDS
                    .iter()
                    .position(|f| c["qualifier"] == *f)
                    .expect("known field");
                assert_eq!(c["timestamp"], tsbs::T0_MS + step * tsbs::INTERVAL_MS);
                assert_eq!(c["value"].as_f64(), Some(tsbs::cpu_value(host, step, i)));
            }
        }
    }

    // The dead letters: original payloads, with reason and source.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", sc.bootstrap())
        .set("group.id", "test-dead-letters")
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("dead", 0, Offset::Beginning)
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let mut dead = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while dead.len() < 11 && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.expect("dead letter");
            let headers = m.headers().expect("headers");
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|h| h.key == name)
                    .and_then(|h| h.value)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default()
            };
            dead.push((
                String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                header("halite-error"),
                header("halite-source-topic"),
            ));
        }
    }
    drop(consumer);
    dead.sort();
    let mut want: Vec<(String, &str)> = poison_lines
        .iter()
        .map(|p| (p.clone(), "cpu"))
        .chain(poison_json.iter().map(|p| (p.clone(), "cpu_json")))
        .chain(std::iter::once((bad_delete.clone(), "cpu_json")))
        .collect();
    want.sort();
    assert_eq!(dead.len(), 11, "{dead:?}");
    for ((payload, reason, source), (want_payload, want_source)) in dead.iter().zip(&want) {
        assert_eq!(payload, want_payload);
        assert_eq!(source, want_source);
        assert!(!reason.is_empty(), "no reason for {payload}");
    }
    assert!(dead.iter().any(|d| d.1.contains("width")), "{dead:?}");
    assert!(dead.iter().any(|d| d.1.contains("JSON")), "{dead:?}");
    assert!(dead.iter().any(|d| d.1.contains("finite")), "{dead:?}");
    assert!(dead.iter().any(|d| d.1.contains("`series`")), "{dead:?}");
    assert_eq!(
        dead.iter()
            .filter(|d| d.1.contains("duplicate tags"))
            .count(),
        2,
        "{dead:?}"
    );
    assert!(
        dead.iter().any(|d| d.1.contains("out of range")),
        "{dead:?}"
    );

    // A clean stop commits; a restart resumes after it and replays nothing.
    server::stop(srv);
    let srv = sc.start();
    producer
        .send(
            BaseRecord::<'_, str, str>::to("cpu")
                .key("k")
                .payload("cpu,host=late usage_user=7 1700000000000\n"),
        )
        .map_err(|(e, _)| e)
        .expect("produce late");
    producer.flush(Duration::from_secs(30)).expect("flush");
    let s = wait_for(&srv.addr, "the late message", |s| s["points"] == 1);
    assert_eq!(s["messages"], 1, "only the new message was consumed: {s}");
    // After the restart every partition shows its committed offset (not
    // only those this process committed since) and its durable position.
    let s = wait_for(&srv.addr, "the late message committed", |s| {
        committed_total(s, "cpu") == cpu_messages + 8
    });
    assert_eq!(committed_total(&s, "cpu_json"), 8, "{s}");
    let partitions = s["partitions"].as_array().expect("partitions");
    assert_eq!(partitions.len(), 10, "{s}");
    // Every cpu partition had messages; cpu_json's keyed ones all went to
    // one partition, and the other is listed with nothing committed yet.
    for p in partitions.iter().filter(|p| p["topic"] == "cpu") {
        assert!(p["committed"].is_i64(), "{p}");
        assert!(p["durable"].as_i64() >= p["committed"].as_i64(), "{p}");
    }
    server::stop(srv);
}

/// Tables that acknowledge writes before they are durable: ASYNC_WAL
/// offsets are committed after a WAL sync, SKIP_WAL offsets only after a
/// flush (or at a clean shutdown, which flushes).
#[test]
fn async_and_skip_wal_tables_commit_only_what_is_durable() {
    const HOSTS: u64 = 20;
    const POINTS: u64 = 2_000;
    let mut config = String::new();
    for (name, durability) in [("cpu_async", "ASYNC_WAL"), ("cpu_skip", "SKIP_WAL")] {
        config.push_str(&format!(
            r#"
[[tables]]
name = "metrics:{name}"
durability = "{durability}"
families = [{{ name = "f" }}]
[tables.key]
fields = [
  {{ name = "metric", type = "string", width = 16 }},
  {{ name = "host", type = "string", width = 16 }},
  {{ name = "ts", type = "reversed_timestamp" }},
]
salt = {{ buckets = 4, width = 1, from = "series" }}
[[kafka.topics]]
topic = "{name}"
table = "metrics:{name}"
precision = "ms"
"#
        ));
    }
    let sc = Scenario::new()
        .topic("cpu_async", 2)
        .topic("cpu_skip", 2)
        .config_append(&config)
        .set("kafka.commit_interval=\"200ms\"")
        .build();
    let srv = sc.start();
    let produce = |topic: &str, points: u64| {
        sc.produce(
            topic,
            Load {
                hosts: HOSTS,
                points,
                per_message: 1,
                rate: 0,
            },
        )
    };
    produce("cpu_async", POINTS);
    produce("cpu_skip", POINTS);
    let messages = POINTS as i64;
    wait_for(&srv.addr, "the ASYNC_WAL topic committed", |s| {
        committed_total(s, "cpu_async") == messages && s["points"] == 2 * POINTS
    });
    // Every SKIP_WAL point is written, and stays uncommitted while only in
    // MemStores (far below the flush size, and an hour from flush_age).
    std::thread::sleep(Duration::from_secs(1));
    let s = status(&srv.addr);
    assert_eq!(committed_total(&s, "cpu_skip"), 0, "{s}");
    let r = common::http::request(
        &srv.addr,
        "POST",
        "/api/v1/tables/metrics:cpu_skip/flush",
        None,
        b"",
    )
    .expect("flush");
    assert!(r.status < 300, "{}", r.text());
    wait_for(
        &srv.addr,
        "the SKIP_WAL topic committed after the flush",
        |s| committed_total(s, "cpu_skip") == messages,
    );
    assert_cpu_oracle_in(&srv.addr, "metrics:cpu_async", HOSTS, POINTS);
    assert_cpu_oracle_in(&srv.addr, "metrics:cpu_skip", HOSTS, POINTS);

    // More SKIP_WAL points, then a clean stop: it flushes them and commits,
    // so the restart replays nothing and the points are there.
    produce("cpu_skip", 2 * POINTS);
    wait_for(&srv.addr, "the new points written", |s| {
        s["points"] == 4 * POINTS
    });
    server::stop(srv);
    let srv = sc.start();
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", sc.bootstrap())
        .create()
        .expect("producer");
    producer
        .send(
            BaseRecord::<'_, (), str>::to("cpu_skip")
                .payload("cpu,host=late usage_user=7 1700000000000\n"),
        )
        .map_err(|(e, _)| e)
        .expect("produce late");
    producer.flush(Duration::from_secs(30)).expect("flush");
    let s = wait_for(&srv.addr, "the late message", |s| s["points"] == 1);
    assert_eq!(s["messages"], 1, "nothing replayed after a clean stop: {s}");
    assert_cpu_oracle_in(&srv.addr, "metrics:cpu_skip", HOSTS, 2 * POINTS);
    server::stop(srv);
}

/// Kafka feeds tables of open tag sets as the HTTP doors do (issue "One
/// engine behind every door"): Telegraf's line protocol with any tags into
/// a measurement's table, read through InfluxQL; Prometheus remote-write
/// requests, one a message, into a samples table, read through remote
/// read. A point of another measurement, a rows message (whose UIDs are
/// some node's) and a series without `__name__` are dead-lettered; the
/// names are durable before the points, so they answer the same after a
/// restart. Before, every such point was dead-lettered ("write it through
/// /write").
#[test]
fn kafka_feeds_tables_of_open_tag_sets() {
    use common::prometheus::{read_answer, read_request};
    use halite::ingest::remote_write::{Series, encode_write_request};
    let sc = Scenario::new()
        .topic("telegraf", 4)
        .topic("prom", 2)
        .topic("dead", 1)
        .set("kafka.dead_letter_topic=\"dead\"")
        .set("kafka.commit_interval=\"200ms\"")
        .config_append(
            r#"
[[tables]]
name = "telegraf:cpu"
families = [{ name = "f", data_block_encoding = "TIME_SERIES" }]
[tables.key]
fields = []
tags = {}
time_unit = "ns"
salt = { buckets = 4, width = 1, from = "series" }

[[tables]]
name = "prometheus:samples"
families = [{ name = "f", data_block_encoding = "TIME_SERIES" }]
[tables.key]
fields = []
tags = {}
time_unit = "ms"
salt = { buckets = 4, width = 1, from = "series" }

[[kafka.topics]]
topic = "telegraf"
table = "telegraf:cpu"
format = "line"

[[kafka.topics]]
topic = "prom"
table = "prometheus:samples"
format = "remote_write"
"#,
        )
        .build();
    let srv = sc.start();
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", sc.bootstrap())
        .create()
        .expect("producer");
    const T0: u64 = 1_700_000_000_000_000_000;
    // 210 points of 21 series (7 hosts x 3 data centres; a rack tag on
    // some), 10 lines a message; then the messages to refuse.
    let lines: Vec<String> = (0..210u64)
        .map(|i| {
            let rack = if i % 3 == 0 {
                format!(",rack=r{}", i % 5)
            } else {
                String::new()
            };
            format!(
                "cpu,host=h{},dc=d{}{rack} usage=1.5,n={i}i {}",
                i % 7,
                i % 3,
                T0 + (i / 21) * 1_000_000_000
            )
        })
        .collect();
    for chunk in lines.chunks(10) {
        let payload = chunk.join("\n");
        producer
            .send(BaseRecord::<'_, (), str>::to("telegraf").payload(&payload))
            .map_err(|(e, _)| e)
            .expect("produce");
    }
    let mut rows = halite::ingest::rows_message::ROWS_MAGIC.to_vec();
    rows.extend_from_slice(b"any rows at all");
    let refused_lines = [b"mem,host=h1 used=1i 1700000000000000000".to_vec(), rows];
    for payload in &refused_lines {
        producer
            .send(BaseRecord::<'_, (), [u8]>::to("telegraf").payload(payload))
            .map_err(|(e, _)| e)
            .expect("produce");
    }
    let sample = |labels: &[(&str, &str)], v: f64, ms: i64| Series {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        samples: vec![(v, ms)],
    };
    let stale = f64::from_bits(0x7ff0_0000_0000_0002);
    let writes = [
        encode_write_request(&[
            sample(&[("__name__", "up"), ("job", "a")], 1.0, 1_000),
            sample(&[("__name__", "up"), ("job", "b")], 0.0, 1_000),
        ]),
        encode_write_request(&[sample(&[("__name__", "up"), ("job", "a")], stale, 2_000)]),
        encode_write_request(&[sample(&[("job", "no-name")], 1.0, 1_000)]),
    ];
    for payload in &writes {
        producer
            .send(BaseRecord::<'_, (), [u8]>::to("prom").payload(payload))
            .map_err(|(e, _)| e)
            .expect("produce");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let s = wait_for(&srv.addr, "every message handled and committed", |s| {
        committed_total(s, "telegraf") == 23 && committed_total(s, "prom") == 3
    });
    assert_eq!(s["points"], 210 + 3, "{s}");
    assert_eq!(s["bad_messages"], 3, "{s}");
    assert_eq!(s["dead_lettered"], 3, "{s}");

    let influxql = |q: &str| {
        let form = serde_urlencoded::to_string([("q", q)]).expect("form");
        let r = common::http::request(
            &srv.addr,
            "POST",
            "/query?db=telegraf",
            Some("application/x-www-form-urlencoded"),
            form.as_bytes(),
        )
        .expect("query");
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let check = || {
        let per_host = influxql("SELECT count(usage), sum(n) FROM cpu GROUP BY host");
        let series = per_host["results"][0]["series"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(series.len(), 7, "{per_host}");
        for (h, one) in series.iter().enumerate() {
            let want_sum: u64 = (0..210u64).filter(|i| i % 7 == h as u64).sum();
            assert_eq!(one["tags"]["host"], json!(format!("h{h}")), "{one}");
            assert_eq!(one["values"][0][1], json!(30), "{one}");
            assert_eq!(one["values"][0][2], json!(want_sum), "{one}");
        }
        let racks = influxql("SHOW TAG VALUES FROM cpu WITH KEY = \"rack\"");
        assert_eq!(
            racks["results"][0]["series"][0]["values"]
                .as_array()
                .map(Vec::len),
            Some(5),
            "{racks}"
        );
    };
    check();
    let read = |matchers: &[(&str, &str)]| {
        let r = common::http::request_with(
            &srv.addr,
            "POST",
            "/api/v1/read",
            &[
                ("Content-Type", "application/x-protobuf"),
                ("Content-Encoding", "snappy"),
            ],
            &read_request(matchers, None),
        )
        .expect("remote read");
        assert_eq!(r.status, 200, "{}", r.text());
        read_answer(&r.body)
    };
    let up = read(&[("__name__", "up")]);
    assert_eq!(up.len(), 2, "{up:?}");
    let a = up
        .iter()
        .find(|s| s.labels.contains(&("job".into(), "a".into())))
        .expect("job a");
    assert_eq!(a.samples.len(), 2);
    assert_eq!(a.samples[1].1, 2_000);
    assert_eq!(
        a.samples[1].0.to_bits(),
        stale.to_bits(),
        "the staleness marker"
    );

    // The dead letters say why.
    let mut reasons = dead_letter_reasons(sc.bootstrap(), 3);
    reasons.sort();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons.iter().any(|r| r.contains("measurement `mem`")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("rows message")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("__name__")),
        "{reasons:?}"
    );

    // The names were durable before the points: a restart reads them.
    server::stop(srv);
    let srv = sc.start();
    let per_host = influxql_at(&srv.addr, "SELECT count(usage) FROM cpu GROUP BY host");
    assert_eq!(
        per_host["results"][0]["series"].as_array().map(Vec::len),
        Some(7),
        "{per_host}"
    );
    server::stop(srv);
}

/// The status and answer of InfluxQL `q` over database `db`, as a form.
fn influxql_in(addr: &str, db: &str, q: &str) -> (u16, serde_json::Value) {
    let form = serde_urlencoded::to_string([("db", db), ("q", q)]).expect("form");
    let r = common::http::request(
        addr,
        "POST",
        "/query",
        Some("application/x-www-form-urlencoded"),
        form.as_bytes(),
    )
    .expect("query");
    (r.status, r.json())
}

fn influxql_at(addr: &str, q: &str) -> serde_json::Value {
    let (status, answer) = influxql_in(addr, "telegraf", q);
    assert_eq!(status, 200, "{answer}");
    answer
}

/// Telegraf-style lines through Kafka into declared-key tables (the
/// source documents' row keys: salt, metric, host, reversed time) answer
/// InfluxQL as the same lines written to InfluxDB 1.6 do (issue #58): a
/// table's `metric` key field is the measurement (two in one table), a
/// table without one is the measurement of its name, every other key
/// field a tag, its cells the fields. Prometheus' remote read answers the
/// same points as `<measurement>_<field>` metrics.
#[test]
fn kafka_lines_in_declared_tables_answer_influxql_as_influxdb_does() {
    let influx = common::influx::Influx::start();
    let sc = Scenario::new()
        .topic("lines", 2)
        .topic("disks", 1)
        .set("kafka.commit_interval=\"200ms\"")
        .config_append(
            r#"
[[tables]]
name = "telegraf:metrics"
families = [{ name = "f", data_block_encoding = "TIME_SERIES" }]
[tables.key]
fields = [
  { name = "metric", type = "string", width = 8 },
  { name = "host", type = "string", width = 8 },
  { name = "cpu", type = "string", width = 8 },
  { name = "ts", type = "reversed_timestamp" },
]
time_unit = "ns"
salt = { buckets = 4, width = 1, from = "series" }

[[tables]]
name = "telegraf:disk"
families = [{ name = "f" }]
[tables.key]
fields = [
  { name = "host", type = "string", width = 8 },
  { name = "path", type = "string", width = 8 },
  { name = "ts", type = "reversed_timestamp" },
]
time_unit = "ms"

[[tables]]
name = "telegraf:events"
families = [{ name = "f" }]
[tables.key]
fields = [
  { name = "host", type = "string", width = 8 },
  { name = "ts", type = "timestamp" },
]

[[kafka.topics]]
topic = "lines"
table = "telegraf:metrics"
format = "line"

[[kafka.topics]]
topic = "disks"
table = "telegraf:disk"
format = "line"
precision = "ms"
"#,
        )
        .build();
    let srv = sc.start();
    const T0: u64 = 1_700_000_000_000_000_000;
    const S: u64 = 1_000_000_000;
    let mut lines = Vec::new();
    for k in 0..12u64 {
        for (h, host) in ["web-1", "web-2", "db-1"].iter().enumerate() {
            for c in 0..2u64 {
                let user = (k * 7 + h as u64 * 3 + c) % 50;
                lines.push(format!(
                    "cpu,cpu=cpu{c},host={host} usage_user={user}.5,usage_idle={} {}",
                    100 - user,
                    T0 + k * 10 * S + c * 1_000_000
                ));
            }
            lines.push(format!(
                "mem,cpu=all,host={host} used={}i,available_percent={}.25,active={} {}",
                1024 + k * 10 + h as u64,
                40 + k,
                k % 2 == 0,
                T0 + k * 10 * S
            ));
        }
    }
    let disks: Vec<String> = (0..8u64)
        .map(|k| {
            format!(
                "disk,host=web-{},path=/var{} free={}i,used_percent={}.5 {}",
                k % 2 + 1,
                k % 3,
                1000 - k,
                60 + k,
                T0 / 1_000_000 + k * 15_000
            )
        })
        .collect();
    let r = common::http::request(
        &influx.addr,
        "POST",
        "/query",
        Some("application/x-www-form-urlencoded"),
        b"q=CREATE+DATABASE+telegraf",
    )
    .expect("create database");
    assert_eq!(r.status, 200, "{}", r.text());
    for (path, body) in [
        ("/write?db=telegraf", lines.join("\n")),
        ("/write?db=telegraf&precision=ms", disks.join("\n")),
    ] {
        let r = common::http::request(&influx.addr, "POST", path, None, body.as_bytes())
            .expect("influx write");
        assert_eq!(r.status, 204, "{}", r.text());
    }
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", sc.bootstrap())
        .create()
        .expect("producer");
    for (topic, body) in [("lines", &lines), ("disks", &disks)] {
        for chunk in body.chunks(5) {
            producer
                .send(BaseRecord::<'_, (), str>::to(topic).payload(&chunk.join("\n")))
                .map_err(|(e, _)| e)
                .expect("produce");
        }
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let messages = |n: usize| n.div_ceil(5) as i64;
    let s = wait_for(&srv.addr, "every message handled and committed", |s| {
        committed_total(s, "lines") == messages(lines.len())
            && committed_total(s, "disks") == messages(disks.len())
    });
    assert_eq!(s["bad_messages"], 0, "{s}");

    let ask = |addr: &str, q: &str| influxql_in(addr, "telegraf", q);
    let t = |secs: u64| format!("{}", T0 + secs * S);
    let statements = [
        "SHOW MEASUREMENTS".to_string(),
        "SHOW TAG KEYS".to_string(),
        "SHOW TAG KEYS FROM cpu".to_string(),
        "SHOW TAG VALUES WITH KEY = \"host\"".to_string(),
        "SHOW TAG VALUES FROM cpu WITH KEY IN (\"host\", \"cpu\")".to_string(),
        "SHOW FIELD KEYS".to_string(),
        "SHOW SERIES".to_string(),
        "SHOW SERIES FROM disk".to_string(),
        "SELECT * FROM cpu WHERE host = 'web-1' AND cpu = 'cpu0'".to_string(),
        // Raw rows of one series at a time: InfluxDB 1.6 orders rows of
        // several series at one instant as its merge leaves them
        // (docs/compatibility.md).
        "SELECT * FROM mem WHERE host = 'web-2'".to_string(),
        "SELECT * FROM disk".to_string(),
        "SELECT mean(usage_user), max(usage_idle), count(usage_user) FROM cpu GROUP BY host".to_string(),
        format!(
            "SELECT mean(usage_user) FROM cpu WHERE time >= {} AND time < {} GROUP BY time(20s), host fill(none)",
            t(0),
            t(60)
        ),
        format!(
            "SELECT sum(used) FROM mem WHERE time >= {} AND time < {} GROUP BY time(30s) fill(0)",
            t(0),
            t(120)
        ),
        "SELECT last(usage_user), first(usage_idle) FROM cpu GROUP BY *".to_string(),
        "SELECT usage_user FROM cpu WHERE host =~ /web/ GROUP BY host ORDER BY time DESC LIMIT 3".to_string(),
        "SELECT count(free), sum(used_percent) FROM disk GROUP BY path".to_string(),
        "SELECT used, active FROM mem WHERE active = true AND host != 'db-1' GROUP BY host".to_string(),
        "SELECT max(usage_user) FROM cpu WHERE usage_idle > 80 GROUP BY cpu".to_string(),
        "SELECT spread(available_percent), mean(used) FROM mem WHERE cpu = 'all' GROUP BY host SLIMIT 2".to_string(),
        "SELECT * FROM nothing".to_string(),
    ];
    for q in &statements {
        let (a_status, a) = ask(&influx.addr, q);
        let (b_status, b) = ask(&srv.addr, q);
        assert_eq!((a_status, b_status), (200, 200), "{q}: {a} / {b}");
        common::influx::assert_close(&a, &b, &format!("{q}: influx {a} halite {b}"));
        assert!(
            q.contains("nothing") || b["results"][0]["series"].is_array(),
            "{q} answered nothing: {b}"
        );
    }
    // Remote read answers the same points, a metric a numeric field
    // (`<measurement>_<field>`), the tags its labels, booleans 1 or 0.
    {
        use common::prometheus::{read_answer, read_request_between};
        let read = |matchers: &[(&str, &str)]| {
            let r = common::http::request_with(
                &srv.addr,
                "POST",
                "/api/v1/read?db=telegraf",
                &[
                    ("Content-Type", "application/x-protobuf"),
                    ("Content-Encoding", "snappy"),
                ],
                &read_request_between(matchers, T0 / 1_000_000, T0 / 1_000_000 + 3_600_000, None),
            )
            .expect("remote read");
            assert_eq!(r.status, 200, "{}", r.text());
            read_answer(&r.body)
        };
        let user = read(&[("__name__", "cpu_usage_user"), ("host", "web-2")]);
        assert_eq!(user.len(), 2, "{user:?}");
        for (c, series) in user.iter().enumerate() {
            let labels: Vec<(&str, &str)> = series
                .labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let cpu = format!("cpu{c}");
            assert_eq!(
                labels,
                [
                    ("__name__", "cpu_usage_user"),
                    ("cpu", cpu.as_str()),
                    ("host", "web-2")
                ]
            );
            let want: Vec<(f64, i64)> = (0..12u64)
                .map(|k| {
                    let user = (k * 7 + 3 + c as u64) % 50;
                    (
                        user as f64 + 0.5,
                        ((T0 + k * 10 * S) / 1_000_000 + c as u64) as i64,
                    )
                })
                .collect();
            assert_eq!(series.samples, want, "{labels:?}");
        }
        let active = read(&[("__name__", "mem_active"), ("host", "db-1")]);
        assert_eq!(active.len(), 1, "{active:?}");
        let values: Vec<f64> = active[0].samples.iter().map(|s| s.0).collect();
        assert_eq!(
            values,
            (0..12)
                .map(|k| f64::from(u8::from(k % 2 == 0)))
                .collect::<Vec<_>>()
        );
        let free = read(&[("__name__", "disk_free")]);
        assert_eq!(
            free.iter().map(|s| s.samples.len()).sum::<usize>(),
            8,
            "{free:?}"
        );
    }
    // InfluxDB's /write takes the declared table too, as the topic does.
    let r = common::http::request(
        &srv.addr,
        "POST",
        "/write?db=telegraf&precision=ms",
        None,
        format!(
            "disk,host=web-9,path=/x free=5i,used_percent=1.5 {}",
            T0 / 1_000_000
        )
        .as_bytes(),
    )
    .expect("influx write");
    assert_eq!(r.status, 204, "{}", r.text());
    let (_, free) = ask(&srv.addr, "SELECT sum(free) FROM disk WHERE host = 'web-9'");
    assert_eq!(
        free["results"][0]["series"][0]["values"][0][1],
        json!(5),
        "{free}"
    );
    // The config's own `metrics` (declared keys only) is a database too.
    let (_, databases) = ask(&srv.addr, "SHOW DATABASES");
    assert_eq!(
        databases["results"][0]["series"][0]["values"],
        json!([["metrics"], ["telegraf"]]),
        "{databases}"
    );
    // A declared key InfluxQL cannot read newest first says so.
    let (status, events) = ask(&srv.addr, "SELECT * FROM events");
    assert_eq!(status, 200, "{events}");
    let error = events["results"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("telegraf:events") && error.contains("reversed_timestamp"),
        "{events}"
    );
    server::stop(srv);
}

/// A topic mapped to a database takes Telegraf's Kafka output as it is:
/// messages of many measurements with any tags, each measurement into its
/// table of open tag sets, made on its first point as `/write` makes it
/// (issue #58; before, a topic fed one table, and such lines were
/// dead-lettered). InfluxQL answers as InfluxDB 1.6 given the same lines;
/// a JSON topic mapped to another database is read the same way; lines
/// halite refuses (a measurement it cannot name a table after, a field of
/// another type) are dead-lettered with the reason; after a restart the
/// topic resumes where it was and every answer is the same.
#[test]
fn a_topic_mapped_to_a_database_answers_influxql_as_influxdb_does() {
    let influx = common::influx::Influx::start();
    let sc = Scenario::new()
        .topic("telegraf", 3)
        .topic("sensors", 1)
        .topic("dead", 1)
        .set("kafka.dead_letter_topic=\"dead\"")
        .set("kafka.commit_interval=\"200ms\"")
        // The four measurements of telegraf_messages, and no more.
        .set("influx.max_measurements=4")
        .config_append(
            r#"
[[kafka.topics]]
topic = "telegraf"
database = "telegraf"
format = "line"

[[kafka.topics]]
topic = "sensors"
database = "sensors"
format = "json"
"#,
        )
        .build();
    let mut srv = sc.start();
    const T0: u64 = 1_700_000_000_000_000_000;
    let messages = common::influx::telegraf_messages(T0, 10);
    let r = common::http::request(
        &influx.addr,
        "POST",
        "/query",
        Some("application/x-www-form-urlencoded"),
        b"q=CREATE+DATABASE+telegraf",
    )
    .expect("create database");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = common::http::request(
        &influx.addr,
        "POST",
        "/write?db=telegraf",
        None,
        messages.join("\n").as_bytes(),
    )
    .expect("influx write");
    assert_eq!(r.status, 204, "{}", r.text());
    let bad = [
        format!("__private,host=web-1 v=1 {T0}"),
        format!("system,host=web-1 load1=\"high\" {T0}"),
    ];
    let sensors: Vec<String> = (0..6u64)
        .map(|k| {
            json!([
                {"metric": "temperature", "tags": {"room": format!("r{}", k % 2)},
                 "ts": T0 / 1_000_000 + k * 1000, "fields": {"celsius": 20.0 + k as f64}},
                {"metric": "humidity", "tags": {"room": "r0", "floor": "1"},
                 "ts": T0 / 1_000_000 + k * 1000, "fields": {"percent": 40 + k}}
            ])
            .to_string()
        })
        .collect();
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", sc.bootstrap())
        .create()
        .expect("producer");
    for (topic, payloads) in [
        ("telegraf", messages.iter().chain(&bad).collect::<Vec<_>>()),
        ("sensors", sensors.iter().collect()),
    ] {
        for p in payloads {
            producer
                .send(BaseRecord::<'_, (), str>::to(topic).payload(p.as_str()))
                .map_err(|(e, _)| e)
                .expect("produce");
        }
    }
    // Rows a cluster's node encoded, its UIDs the cluster's: a single
    // node, which counts its own, dead-letters them.
    let mut rows = halite::cell::EntryBatch::new();
    let mut key = vec![0u8];
    for uid in [1u32, 1, 1] {
        key.extend_from_slice(&uid.to_be_bytes());
        if key.len() == 5 {
            key.push(1);
        }
    }
    key.extend_from_slice(&(u64::MAX - T0).to_be_bytes());
    rows.push(
        &key,
        b"f",
        b"usage_idle",
        T0,
        halite::cell::CellKind::Put,
        None,
        &1.5f64.to_be_bytes(),
    );
    rows.end_row();
    let named = halite::ingest::rows_message::encode_table_rows_message("cpu", &rows);
    producer
        .send(BaseRecord::<'_, (), [u8]>::to("telegraf").payload(&named))
        .map_err(|(e, _)| e)
        .expect("produce");
    producer.flush(Duration::from_secs(30)).expect("flush");
    let expected = (messages.len() + bad.len() + 1) as i64;
    let s = wait_for(&srv.addr, "every message handled and committed", |s| {
        committed_total(s, "telegraf") == expected
            && committed_total(s, "sensors") == sensors.len() as i64
    });
    assert_eq!(s["bad_messages"], 3, "{s}");
    let reasons = dead_letter_reasons(sc.bootstrap(), 3);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("a rows message of a cluster's node")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("names a measurement's table after it")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("field type conflict")),
        "{reasons:?}"
    );
    // A fifth measurement is past the database's limit: dead-lettered,
    // naming it, and the four take points still.
    for p in [
        format!("overflow,host=web-1 v=1 {T0}"),
        format!("net,host=web-9,interface=eth0 bytes_recv=1i,bytes_sent=1i {T0}"),
    ] {
        producer
            .send(BaseRecord::<'_, (), str>::to("telegraf").payload(&p))
            .map_err(|(e, _)| e)
            .expect("produce");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let s = wait_for(
        &srv.addr,
        "the two more messages handled and committed",
        |s| committed_total(s, "telegraf") == expected + 2,
    );
    assert_eq!(s["bad_messages"], 4, "{s}");
    let reasons = dead_letter_reasons(sc.bootstrap(), 4);
    assert!(
        reasons.iter().any(|r| r.contains(
            "max-measurements limit exceeded: the database holds `influx.max_measurements` (4)"
        )),
        "{reasons:?}"
    );
    let (status, hosts) = influxql_in(
        &srv.addr,
        "telegraf",
        "SHOW TAG VALUES FROM net WITH KEY = host",
    );
    assert_eq!(status, 200, "{hosts}");
    assert!(hosts.to_string().contains("web-9"), "{hosts}");
    let r = common::http::request(
        &influx.addr,
        "POST",
        "/write?db=telegraf",
        None,
        format!("net,host=web-9,interface=eth0 bytes_recv=1i,bytes_sent=1i {T0}").as_bytes(),
    )
    .expect("influx write");
    assert_eq!(r.status, 204, "{}", r.text());

    let statements = common::influx::telegraf_statements(T0);
    let answers = |addr: &str| -> Vec<serde_json::Value> {
        statements
            .iter()
            .map(|q| {
                let (status, a) = influxql_in(addr, "telegraf", q);
                assert_eq!(status, 200, "{q}: {a}");
                assert!(
                    a["results"][0]["series"].is_array(),
                    "{q} answered nothing: {a}"
                );
                a
            })
            .collect()
    };
    let before = answers(&srv.addr);
    for (q, (a, b)) in statements
        .iter()
        .zip(answers(&influx.addr).iter().zip(&before))
    {
        common::influx::assert_close(a, b, &format!("{q}: influx {a} halite {b}"));
    }
    let sensor_counts = |addr: &str| {
        let (status, a) = influxql_in(
            addr,
            "sensors",
            "SELECT count(celsius) FROM temperature GROUP BY room",
        );
        assert_eq!(status, 200, "{a}");
        let (status, b) = influxql_in(addr, "sensors", "SELECT sum(percent) FROM humidity");
        assert_eq!(status, 200, "{b}");
        (
            a["results"][0]["series"].clone(),
            b["results"][0]["series"][0]["values"].clone(),
        )
    };
    let (rooms, humidity) = sensor_counts(&srv.addr);
    let counts: Vec<i64> = rooms
        .as_array()
        .expect("series")
        .iter()
        .map(|s| s["values"][0][1].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(counts, [3, 3], "{rooms}");
    assert_eq!(humidity[0][1], json!(40 * 6 + 15), "{humidity}");

    // Restarted: the same answers, nothing read twice.
    server::stop(srv);
    srv = sc.start();
    wait_for(&srv.addr, "the partitions taken again", |s| {
        committed_total(s, "telegraf") == expected + 2
    });
    // Given time to read anything again, it read nothing.
    std::thread::sleep(Duration::from_secs(2));
    let s = wait_for(&srv.addr, "the status", |_| true);
    assert_eq!(s["points"], 0, "read again after the restart: {s}");
    assert_eq!(answers(&srv.addr), before);
    assert_eq!(sensor_counts(&srv.addr), (rooms, humidity));
    server::stop(srv);
}

/// The reasons (`halite-error`) of the first `n` dead letters of `dead`.
fn dead_letter_reasons(bootstrap: &str, n: usize) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "test-dead-letter-reasons")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("dead", 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    let mut reasons = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while reasons.len() < n && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.expect("dead letter");
            reasons.push(
                m.headers()
                    .and_then(|h| {
                        h.iter()
                            .find(|x| x.key == "halite-error")
                            .and_then(|x| x.value)
                            .map(|v| String::from_utf8_lossy(v).into_owned())
                    })
                    .unwrap_or_default(),
            );
        }
    }
    reasons
}

/// A topic mapped to a database writes into the database's default
/// retention policy, as `/write` without `rp` does: its measurements'
/// tables keep the policy's duration, and a point older than it is
/// dead-lettered with InfluxDB's reason.
#[test]
fn a_topic_mapped_to_a_database_writes_its_default_retention_policy() {
    let sc = Scenario::new()
        .topic("lines", 1)
        .topic("dead", 1)
        .set("kafka.dead_letter_topic=\"dead\"")
        .set("kafka.commit_interval=\"200ms\"")
        .config_append(
            r#"
[[kafka.topics]]
topic = "lines"
database = "week"
format = "line"
"#,
        )
        .build();
    let srv = sc.start();
    for q in [
        "CREATE DATABASE week",
        "CREATE RETENTION POLICY seven ON week DURATION 7d REPLICATION 1 DEFAULT",
    ] {
        let (status, a) = influxql_in(&srv.addr, "week", q);
        assert_eq!(
            (status, a.pointer("/results/0/error")),
            (200, None),
            "{q}: {a}"
        );
    }
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let day_ns = 86_400 * 1_000_000_000u64;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", sc.bootstrap())
        .create()
        .expect("producer");
    let messages = [
        format!("cpu,host=a v=1 {}", now_ns - 60_000_000_000),
        format!("cpu,host=b v=2 {}", now_ns - 8 * day_ns),
        format!("cpu,host=c v=3 {}", now_ns - 6 * day_ns),
    ];
    for m in &messages {
        producer
            .send(BaseRecord::<'_, (), str>::to("lines").payload(m.as_str()))
            .map_err(|(e, _)| e)
            .expect("produce");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    wait_for(&srv.addr, "every message handled and committed", |s| {
        committed_total(s, "lines") == messages.len() as i64
    });
    let reasons = dead_letter_reasons(sc.bootstrap(), 1);
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("points beyond retention policy")),
        "{reasons:?}"
    );
    for (q, count) in [
        ("SELECT count(v) FROM cpu", Some(json!(2))),
        ("SELECT count(v) FROM seven.cpu", Some(json!(2))),
        ("SELECT count(v) FROM autogen.cpu", None),
    ] {
        let (status, a) = influxql_in(&srv.addr, "week", q);
        assert_eq!(status, 200, "{q}: {a}");
        assert_eq!(
            a.pointer("/results/0/series/0/values/0/1").cloned(),
            count,
            "{q}: {a}"
        );
    }
    let r = common::http::request(
        &srv.addr,
        "GET",
        "/api/v1/tables/week:__rp.seven.cpu",
        None,
        b"",
    )
    .expect("table");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json().pointer("/families/0/ttl"),
        Some(&json!(7 * 86_400)),
        "{}",
        r.text()
    );
}
