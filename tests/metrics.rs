//! `/metrics` while the service ingests from a real broker: the scrape
//! passes `promtool check metrics` (Debian's `prometheus` package, which
//! CI installs) and its values agree with what happened.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::http::{free_port, request};
use common::kafka::{Load, wait_for_group_commit};
use common::scenario::Scenario;
use common::server;

const POINTS: u64 = 20_000;

fn scrape(addr: &str) -> String {
    let r = request(addr, "GET", "/metrics", None, b"").expect("scrape");
    assert_eq!(r.status, 200, "{}", r.text());
    r.text().to_string()
}

/// The value of the sample whose name and labels start as `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool: install Debian's `prometheus` package (.ci/run does)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write scrape");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn metrics_scraped_during_ingest_pass_promtool_and_match_what_happened() {
    let sc = Scenario::new()
        .topic("cpu", 4)
        .set("kafka.commit_interval=\"200ms\"")
        .build();
    let srv = sc.start();

    // A scrape while the points stream in, and one after.
    let producer = sc.produce_in_background(
        "cpu",
        Load {
            hosts: 20,
            points: POINTS,
            per_message: 1,
            rate: 5000,
        },
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let during = loop {
        let text = scrape(&srv.addr);
        if sample(&text, "halite_kafka_points_total").unwrap_or(0.0) > 0.0 {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no points ingested:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    promtool_check(&during);
    producer.join().expect("producer");
    wait_for_group_commit(sc.bootstrap(), "cpu", 4, POINTS as i64);
    // One more commit interval, so the lag gauges saw the last commit.
    std::thread::sleep(std::time::Duration::from_millis(500));
    // A raw query of one host: one bucket scanned, its cells returned.
    let q = serde_json::json!({
        "table": "metrics:cpu",
        "series": [["metric", "cpu"], ["host", halite::tsbs::host_name(3)]],
        "start_ms": 0, "end_ms": u64::MAX / 2, "limit": 10
    })
    .to_string();
    let r = request(
        &srv.addr,
        "POST",
        "/api/v1/query",
        Some("application/json"),
        q.as_bytes(),
    )
    .expect("query");
    assert_eq!(r.status, 200, "{}", r.text());
    // And a raw scan of 5 rows.
    let r = request(
        &srv.addr,
        "POST",
        "/api/v1/tables/metrics:cpu/scan",
        Some("application/json"),
        br#"{"limit": 5}"#,
    )
    .expect("scan");
    assert_eq!(r.status, 200, "{}", r.text());
    let after = scrape(&srv.addr);
    promtool_check(&after);
    assert_eq!(
        sample(&after, "halite_scan_cells_returned_total"),
        Some(50.0)
    );
    assert_eq!(sample(&after, "halite_healthy"), Some(1.0));
    assert_eq!(sample(&after, "halite_kafka_paused_partitions"), Some(0.0));
    assert_eq!(
        sample(&after, "halite_query_cells_returned_total"),
        Some(100.0)
    );
    assert_eq!(sample(&after, "halite_query_buckets_count"), Some(1.0));
    assert_eq!(sample(&after, "halite_query_buckets_sum"), Some(1.0));
    let region_series = after
        .lines()
        .filter(|l| l.starts_with("halite_region_store_files{table=\"metrics:cpu\",region="))
        .count();
    assert_eq!(region_series, 16, "{after}");

    let points = sample(
        &after,
        "halite_kafka_points_total{topic=\"cpu\",table=\"metrics:cpu\"}",
    );
    assert_eq!(points, Some(POINTS as f64), "{after}");
    assert_eq!(
        sample(&after, "halite_kafka_messages_total{topic=\"cpu\"}"),
        Some(POINTS as f64)
    );
    // The 20 hosts' rows spread over the 16 buckets, and the buckets
    // together got every point.
    let mut bucket_rows = 0.0;
    let mut buckets = 0;
    for b in 0..16 {
        let labels = format!("{{table=\"metrics:cpu\",bucket=\"{b}\"}}");
        if let Some(n) = sample(&after, &format!("halite_bucket_rows_written_total{labels}")) {
            bucket_rows += n;
            buckets += 1;
        }
    }
    assert_eq!(bucket_rows, POINTS as f64, "{after}");
    assert!(buckets >= 8, "rows in only {buckets} buckets");
    let mut committed = 0.0;
    for p in 0..4 {
        let labels = format!("{{topic=\"cpu\",partition=\"{p}\"}}");
        committed += sample(&after, &format!("halite_kafka_committed_offset{labels}"))
            .unwrap_or_else(|| panic!("no committed offset for partition {p}:\n{after}"));
        assert_eq!(
            sample(&after, &format!("halite_kafka_consumer_lag{labels}")),
            Some(0.0),
            "partition {p} caught up"
        );
    }
    assert_eq!(committed, POINTS as f64);
    assert!(sample(&after, "halite_kafka_commit_duration_seconds_count").unwrap_or(0.0) > 0.0);
    assert!(sample(&after, "halite_memstore_bytes{table=\"metrics:cpu\"}").unwrap_or(0.0) > 0.0);
    assert_eq!(
        sample(&after, "halite_regions{table=\"metrics:cpu\"}"),
        Some(16.0)
    );
    assert!(sample(&after, "halite_wal_syncs_total").unwrap_or(0.0) > 0.0);
    assert!(sample(&after, "halite_wal_sync_duration_seconds_count").unwrap_or(0.0) > 0.0);
    assert!(after.contains("halite_wal_backend_info{shard=\"0\",backend=\""));
    assert!(sample(&after, "halite_process_resident_memory_bytes").unwrap_or(0.0) > 1e6);
    assert_eq!(sample(&after, "halite_ready"), Some(1.0));
    assert!(
        sample(
            &after,
            "halite_http_requests_total{route=\"/metrics\",method=\"GET\",status=\"200\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{after}"
    );
    // Labels hold route templates, never a table name from a path.
    let _ = request(&srv.addr, "GET", "/api/v1/tables/metrics:cpu", None, b"");
    let text = scrape(&srv.addr);
    assert!(text.contains("route=\"/api/v1/tables/{table}\""), "{text}");
    server::stop(srv);
}

#[test]
fn json_logs_are_one_object_per_line() {
    let sc = Scenario::new()
        .example_config()
        .set("log.format=\"json\"")
        .build();
    let mut cmd = sc.command(&[]);
    cmd.env_remove("RUST_LOG").stderr(Stdio::piped());
    let mut srv = server::spawn_ready(cmd, sc.port);
    // Read while the service runs, so a full pipe never holds it up.
    let mut stderr = srv.child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).expect("utf-8 log");
        text
    });
    // SAFETY: signalling our own child process.
    assert_eq!(
        unsafe { libc::kill(srv.child.id() as i32, libc::SIGTERM) },
        0
    );
    assert!(srv.child.wait().expect("wait").success());
    let text = reader.join().expect("log reader");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let messages: Vec<&str> = lines
        .iter()
        .map(|l| {
            assert_eq!(l["level"], "INFO", "{l}");
            l["fields"]["message"].as_str().expect("message")
        })
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("halite serving http://")),
        "{messages:?}"
    );
    assert!(messages.contains(&"halite stopped cleanly"), "{messages:?}");
    let created = lines
        .iter()
        .find(|l| l["fields"]["message"] == "created table")
        .expect("a created table line");
    assert_eq!(created["fields"]["table"], "metrics:cpu");
}

#[test]
fn a_separate_metrics_port_serves_only_monitoring_routes() {
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let sc = Scenario::new()
        .set(&format!("server.metrics_listen=\"{metrics_addr}\""))
        .build();
    let srv = sc.start();
    let text = scrape(&metrics_addr);
    assert_eq!(sample(&text, "halite_build_info"), Some(1.0), "{text}");
    promtool_check(&text);
    for path in ["/healthz", "/readyz"] {
        let r = request(&metrics_addr, "GET", path, None, b"").expect("request");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    // The API stays on its own port; the metrics port does not answer it.
    let r = request(&metrics_addr, "GET", "/api/v1/tables", None, b"").expect("request");
    assert_eq!(r.status, 404);
    let r = request(&srv.addr, "GET", "/api/v1/tables", None, b"").expect("request");
    assert_eq!(r.status, 200);
    assert_eq!(sample(&scrape(&srv.addr), "halite_build_info"), Some(1.0));
    // Both listeners stop on SIGTERM, and the process exits 0.
    server::stop(srv);
    assert!(request(&metrics_addr, "GET", "/healthz", None, b"").is_err());
}
