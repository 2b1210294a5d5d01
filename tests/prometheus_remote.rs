//! Prometheus remote write and remote read (issue #23), against a real
//! Prometheus (Debian's `prometheus`): one scrapes an exporter of known
//! values and halite's own `/metrics` every second and remote-writes to
//! halite; a second, with an empty TSDB and nothing to scrape, reads
//! everything back from halite through remote read. The same PromQL at
//! the same instant must answer alike through both.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::http::free_port;
use common::influx::assert_close;
use common::prometheus::{Prometheus, read_answer, read_request};
use common::server::{command, spawn_ready};
use serde_json::Value as Json;

/// The exporter's text at its `n`th scrape: counters that grow by known
/// steps, gauges that move, a histogram.
fn exposition(n: u64) -> String {
    let f = n as f64;
    format!(
        "# TYPE test_requests_total counter\n\
         test_requests_total{{code=\"200\",handler=\"/a\"}} {}\n\
         test_requests_total{{code=\"500\",handler=\"/a\"}} {}\n\
         test_requests_total{{code=\"200\",handler=\"/b\"}} {}\n\
         # TYPE test_temperature gauge\n\
         test_temperature{{room=\"kitchen\"}} {}\n\
         test_temperature{{room=\"hall\"}} {}\n\
         # TYPE test_latency_seconds histogram\n\
         test_latency_seconds_bucket{{le=\"0.1\"}} {}\n\
         test_latency_seconds_bucket{{le=\"0.5\"}} {}\n\
         test_latency_seconds_bucket{{le=\"+Inf\"}} {}\n\
         test_latency_seconds_sum {}\n\
         test_latency_seconds_count {}\n",
        n * 7,
        n,
        n * 3 + n % 4,
        20.0 + (n % 5) as f64 * 0.25,
        18.5 - (n % 3) as f64 * 0.5,
        n * 2,
        n * 5,
        n * 6,
        f * 1.7,
        n * 6
    )
}

/// A result set in a comparable order (by its series' labels).
/// Samples a Prometheus failed to remote-write (by its own count).
fn samples_failed(p: &Prometheus) -> f64 {
    common::metric_sum(
        &p.metrics(),
        "prometheus_remote_storage_samples_failed_total",
    )
}

fn sorted(answer: &Json) -> Json {
    let mut result = answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    result.sort_by_key(|r| r["metric"].to_string());
    Json::Array(result)
}

#[test]
fn prometheus_reads_back_through_halite_what_it_wrote() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(
        command(&dir.path().join("halite"), port, &[] as &[&str]),
        port,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let exporter = common::prometheus::exporter(stop.clone(), exposition);
    let writer = Prometheus::with_config(
        &dir.path().join("writer"),
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: exporter\n    static_configs:\n      - targets: ['{exporter}']\n\
             \x20 - job_name: halite\n    static_configs:\n      - targets: ['{}']\n\
             remote_write:\n  - url: http://{}/api/v1/write\n    queue_config:\n      \
             batch_send_deadline: 1s\n      min_backoff: 100ms\n      max_backoff: 1s\n",
            halite.addr, halite.addr
        ),
    );
    let reader = Prometheus::with_config(
        &dir.path().join("reader"),
        &format!(
            "global:\n  scrape_interval: 1m\nremote_read:\n  - url: http://{}/api/v1/read\n    read_recent: true\n",
            halite.addr
        ),
    );
    std::thread::sleep(Duration::from_secs(14));
    // An instant well behind the writer's newest samples, so every sample
    // at or before it has been sent (batches go at least every second).
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
        - 4.0;
    std::thread::sleep(Duration::from_secs(2));
    let queries = [
        "up",
        "count(up)",
        "sum by (job) (up)",
        "test_temperature",
        "test_requests_total",
        "test_requests_total{handler=~\"/a|/b\"}",
        "test_requests_total{code!=\"200\"}",
        "test_requests_total{handler!~\"/b\"}",
        "rate(test_requests_total[5s])",
        "irate(test_requests_total[5s])",
        "increase(test_requests_total[6s])",
        "sum by (code) (rate(test_requests_total[5s]))",
        "max_over_time(test_temperature[8s])",
        "min_over_time(test_temperature[8s])",
        "avg_over_time(test_temperature[8s])",
        "count_over_time(test_temperature[8s])",
        "changes(test_temperature[8s])",
        "delta(test_temperature[8s])",
        "test_temperature offset 3s",
        "sum(test_temperature)",
        "topk(1, test_temperature)",
        "histogram_quantile(0.9, sum by (le) (rate(test_latency_seconds_bucket[5s])))",
        "rate(test_latency_seconds_sum[5s]) / rate(test_latency_seconds_count[5s])",
        "sum(rate(halite_http_requests_total[5s]))",
        "resets(test_requests_total[8s])",
    ];
    let mut compared = 0;
    for q in queries {
        let (a, b) = (writer.query_at(q, at), reader.query_at(q, at));
        assert_eq!(a["status"], "success", "{q}: {a}");
        assert_eq!(b["status"], "success", "{q}: {b}");
        let (a, b) = (sorted(&a), sorted(&b));
        assert!(
            a.as_array().is_some_and(|r| !r.is_empty()),
            "{q}: the writer's own TSDB has no answer: {a}"
        );
        assert_close(&a, &b, q);
        compared += 1;
    }
    assert_eq!(compared, queries.len());
    let failed = samples_failed(&writer);
    assert_eq!(failed, 0.0, "samples the writer failed to send");
    stop.store(true, Ordering::Relaxed);
    drop(reader);
    drop(writer);
    common::server::stop(halite);
}

/// A halite that checks tokens: Prometheus writes with a bearer token
/// (`authorization: credentials`) and reads with Basic auth (the token as
/// password), each token scoped to what it does; a writer with a wrong
/// token is refused and counted, and what was written reads back alike.
#[test]
fn prometheus_writes_and_reads_with_tokens() {
    const BOOT: &str = "prometheus-bootstrap-token-0123456789";
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let mut cmd = command(
        &dir.path().join("halite"),
        port,
        &["--set", "auth.enabled=true"],
    );
    cmd.env("HALITE__AUTH__BOOTSTRAP_TOKEN", BOOT);
    let halite = spawn_ready(cmd, port);
    let token = |scope: &str| {
        let body = format!(
            r#"{{"name": "prometheus", "scopes": ["{scope}"], "namespaces": ["prometheus"]}}"#
        );
        let r = common::http::request_with(
            &halite.addr,
            "POST",
            "/api/v1/tokens",
            &[
                ("Authorization", &format!("Bearer {BOOT}")),
                ("Content-Type", "application/json"),
            ],
            body.as_bytes(),
        )
        .expect("make token");
        assert_eq!(r.status, 201, "{}", r.text());
        r.json()["token"].as_str().expect("token").to_string()
    };
    let (write_token, read_token) = (token("write"), token("read"));
    let stop = Arc::new(AtomicBool::new(false));
    let exporter = common::prometheus::exporter(stop.clone(), exposition);
    let writer_config = |credentials: &str| {
        format!(
            "global:\n  scrape_interval: 1s\n\
             scrape_configs:\n  - job_name: exporter\n    static_configs:\n      - targets: ['{exporter}']\n\
             remote_write:\n  - url: http://{}/api/v1/write\n    authorization:\n      credentials: {credentials}\n    \
             queue_config:\n      batch_send_deadline: 1s\n      min_backoff: 100ms\n      max_backoff: 1s\n",
            halite.addr
        )
    };
    let writer = Prometheus::with_config(&dir.path().join("writer"), &writer_config(&write_token));
    // A read token cannot write.
    let refused = Prometheus::with_config(&dir.path().join("refused"), &writer_config(&read_token));
    let reader = Prometheus::with_config(
        &dir.path().join("reader"),
        &format!(
            "global:\n  scrape_interval: 1m\nremote_read:\n  - url: http://{}/api/v1/read\n    read_recent: true\n    \
             basic_auth:\n      username: grafana\n      password: {read_token}\n",
            halite.addr
        ),
    );
    std::thread::sleep(Duration::from_secs(10));
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
        - 4.0;
    std::thread::sleep(Duration::from_secs(2));
    for q in [
        "test_temperature",
        "count_over_time(test_temperature[6s])",
        "test_requests_total",
    ] {
        let (a, b) = (writer.query_at(q, at), reader.query_at(q, at));
        assert_eq!(a["status"], "success", "{q}: {a}");
        assert_eq!(b["status"], "success", "{q}: {b}");
        let (a, b) = (sorted(&a), sorted(&b));
        assert!(a.as_array().is_some_and(|r| !r.is_empty()), "{q}: {a}");
        assert_close(&a, &b, q);
    }
    let metrics = common::http::request(&halite.addr, "GET", "/metrics", None, b"")
        .expect("metrics")
        .text();
    let forbidden: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("halite_auth_failures_total") && l.contains("forbidden"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        forbidden > 0.0,
        "the read token's writes were not refused:\n{metrics}"
    );
    let failed_sends = samples_failed(&refused);
    assert!(
        failed_sends > 0.0,
        "Prometheus did not see its writes refused"
    );
    stop.store(true, Ordering::Relaxed);
    drop(refused);
    drop(reader);
    drop(writer);
    common::server::stop(halite);
}

use halite::ingest::remote_write::encode_write_request as write_request;

/// What Prometheus' client does with each answer: 4xx drops the batch, so
/// only what cannot be fixed is 4xx; a series limit is 503 (retried); a
/// staleness marker is stored with its bits.
#[test]
fn remote_write_refusals_are_what_prometheus_expects() {
    use common::http::request_with;
    use halite::ingest::remote_write::Series;
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(
        command(
            dir.path(),
            port,
            &[
                "--set",
                "influx.series_limit=2",
                "--set",
                "prometheus.max_samples_per_request=3",
                "--set",
                "prometheus.max_read_samples=3",
            ],
        ),
        port,
    );
    let post = |path: &str, body: &[u8]| {
        request_with(
            &halite.addr,
            "POST",
            path,
            &[
                ("Content-Type", "application/x-protobuf"),
                ("Content-Encoding", "snappy"),
                ("X-Prometheus-Remote-Write-Version", "0.1.0"),
            ],
            body,
        )
        .expect("request")
    };
    let series = |name: &str, job: &str, samples: Vec<(f64, i64)>| Series {
        labels: [("__name__", name), ("job", job)]
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        samples,
    };
    let stale = f64::from_bits(0x7ff0_0000_0000_0002);
    let r = post(
        "/api/v1/write",
        &write_request(&[series("up", "a", vec![(1.0, 1_000), (stale, 2_000)])]),
    );
    assert_eq!(r.status, 204, "{}", r.text());
    for (what, body) in [
        ("not snappy", b"plain text".to_vec()),
        (
            "not protobuf",
            snap::raw::Encoder::new()
                .compress_vec(&[0x0f, 1])
                .expect("c"),
        ),
        (
            "no __name__",
            write_request(&[series("", "a", vec![(1.0, 1_000)])]),
        ),
    ] {
        let r = post("/api/v1/write", &body);
        assert_eq!(r.status, 400, "{what}: {}", r.text());
    }
    // A third series passes the limit of 2: 503, and the known ones land.
    let r = post(
        "/api/v1/write",
        &write_request(&[
            series("up", "b", vec![(1.0, 1_000)]),
            series("up", "c", vec![(1.0, 1_000)]),
            series("up", "a", vec![(0.0, 3_000)]),
        ]),
    );
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("limit of 2 series"), "{}", r.text());
    // Read `up{job="a"}` back: its three samples, the marker's bits kept.
    let r = post("/api/v1/read", &read_request(&[("job", "a")], None));
    assert_eq!(r.status, 200, "{}", r.text());
    let got = read_answer(&r.body);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0].labels,
        vec![
            ("__name__".to_string(), "up".to_string()),
            ("job".to_string(), "a".to_string())
        ]
    );
    let samples: Vec<(u64, i64)> = got[0]
        .samples
        .iter()
        .map(|(v, t)| (v.to_bits(), *t))
        .collect();
    assert_eq!(
        samples,
        vec![
            (1f64.to_bits(), 1_000),
            (stale.to_bits(), 2_000),
            (0f64.to_bits(), 3_000)
        ]
    );
    // A series lookup (Prometheus' /api/v1/series hints `func: "series"`)
    // lists the same series, with one sample each rather than all.
    let r = post(
        "/api/v1/read",
        &read_request(&[("__name__", "up")], Some("series")),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let listed = read_answer(&r.body);
    let jobs: Vec<(&str, usize)> = listed
        .iter()
        .map(|s| (s.labels[1].1.as_str(), s.samples.len()))
        .collect();
    assert_eq!(jobs, vec![("a", 1), ("b", 1)]);
    // Bounds: more samples in one write than the limit (3) is 400; a read
    // answering more than its limit (3) is 400, naming the settings.
    let four = write_request(&[series(
        "up",
        "a",
        (4..8).map(|t| (1.0, t * 1_000)).collect(),
    )]);
    let r = post("/api/v1/write", &four);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("max_samples_per_request"), "{}", r.text());
    let r = post("/api/v1/read", &read_request(&[("__name__", "up")], None));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("max_read_samples"), "{}", r.text());
    // A body claiming to decompress to 100 MiB is refused before the
    // allocation, on either path.
    let bomb = [0x80, 0x80, 0x80, 0x32, 0x00];
    for path in ["/api/v1/read", "/api/v1/write"] {
        let r = post(path, &bomb);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert!(r.text().contains("over the limit"), "{path}: {}", r.text());
    }
    common::server::stop(halite);
}

/// Prometheus' samples read through InfluxQL (`/query?db=prometheus`,
/// measurement `samples`) keep their times: the table's keys hold
/// milliseconds, which the InfluxQL path read as nanoseconds (points of
/// 2023 answered as of January 1970, and no time condition met them).
#[test]
fn samples_read_through_influxql_keep_their_times() {
    use common::http::request_with;
    use halite::ingest::remote_write::Series;
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(command(dir.path(), port, &[] as &[&str]), port);
    const T: i64 = 1_700_000_000_000;
    let body = write_request(&[Series {
        labels: vec![("__name__".into(), "up".into()), ("job".into(), "a".into())],
        samples: vec![(1.0, T), (2.0, T + 60_000), (3.0, T + 61_500)],
    }]);
    let r = request_with(
        &halite.addr,
        "POST",
        "/api/v1/write",
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "snappy"),
        ],
        &body,
    )
    .expect("write");
    assert_eq!(r.status, 204, "{}", r.text());
    let influxql = |q: &str| {
        let form = serde_urlencoded::to_string([("q", q), ("epoch", "ms")]).expect("form");
        let r = request_with(
            &halite.addr,
            "POST",
            "/query?db=prometheus",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            form.as_bytes(),
        )
        .expect("query");
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["results"][0]["series"][0]["values"].clone()
    };
    assert_eq!(
        influxql("SELECT value FROM samples"),
        serde_json::json!([[T, 1], [T + 60_000, 2], [T + 61_500, 3]])
    );
    assert_eq!(
        influxql(&format!(
            "SELECT value FROM samples WHERE time > {}ms",
            T + 60_000
        )),
        serde_json::json!([[T + 61_500, 3]])
    );
    assert_eq!(
        influxql(&format!(
            "SELECT count(value) FROM samples WHERE time >= {T}ms AND time < {}ms GROUP BY time(1m)",
            T + 120_000
        )),
        // The range's three minutes; `count` of an empty one is 0.
        serde_json::json!([
            [T - T % 60_000, 1],
            [T - T % 60_000 + 60_000, 2],
            [T - T % 60_000 + 120_000, 0]
        ])
    );
    common::server::stop(halite);
}

/// InfluxDB's measurements answer Prometheus' remote read too (issue
/// "One engine behind every door"): each numeric field of a measurement
/// is the metric `<measurement>_<field>` (VictoriaMetrics' naming), its
/// tags the labels, a boolean 1 or 0, a string field left out; times cut
/// to milliseconds, the newer point of one millisecond standing. Before,
/// remote read saw only the samples Prometheus wrote.
#[test]
fn remote_read_answers_influxdb_measurements_as_metrics() {
    use common::http::request_with;
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(command(dir.path(), port, &[] as &[&str]), port);
    let form = serde_urlencoded::to_string([("q", "CREATE DATABASE telegraf")]).expect("form");
    let r = request_with(
        &halite.addr,
        "POST",
        "/query",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        form.as_bytes(),
    )
    .expect("create");
    assert_eq!(r.status, 200, "{}", r.text());
    // Within the reads' range (read_request asks up to 2^32 - 1 ms).
    const T: i64 = 1_000_000_000;
    let lines = format!(
        "cpu,host=a usage=1.5,n=3i,up=true,s=\"x\" {t0}\n\
         cpu,host=a usage=2.5,n=4i,up=false {t1}\n\
         cpu,host=a usage=9.5 {t1b}\n\
         cpu,host=b usage=7 {t0}\n\
         mem,host=a used=10i {t0}\n",
        t0 = T * 1_000_000,
        t1 = (T + 1_000) * 1_000_000,
        // The same millisecond as t1, later: the one read.
        t1b = (T + 1_000) * 1_000_000 + 500,
    );
    let r = request_with(
        &halite.addr,
        "POST",
        "/write?db=telegraf",
        &[],
        lines.as_bytes(),
    )
    .expect("write");
    assert_eq!(r.status, 204, "{}", r.text());
    let read = |matchers: &[(&str, &str)]| {
        let r = request_with(
            &halite.addr,
            "POST",
            "/api/v1/read?db=telegraf",
            &[
                ("Content-Type", "application/x-protobuf"),
                ("Content-Encoding", "snappy"),
            ],
            &read_request(matchers, None),
        )
        .expect("read");
        assert_eq!(r.status, 200, "{}", r.text());
        read_answer(&r.body)
            .into_iter()
            .map(|s| {
                let name = s
                    .labels
                    .iter()
                    .find(|(k, _)| k == "__name__")
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                let host = s
                    .labels
                    .iter()
                    .find(|(k, _)| k == "host")
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                (name, host, s.samples)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        read(&[("__name__", "cpu_usage")]),
        vec![
            (
                "cpu_usage".to_string(),
                "a".to_string(),
                vec![(1.5, T), (9.5, T + 1_000)]
            ),
            ("cpu_usage".to_string(), "b".to_string(), vec![(7.0, T)]),
        ]
    );
    let a = read(&[("host", "a")]);
    let names: Vec<&str> = a.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["cpu_n", "cpu_up", "cpu_usage", "mem_used"]);
    assert_eq!(
        a[1].2,
        vec![(1.0, T), (0.0, T + 1_000)],
        "a boolean as 1 and 0"
    );
    assert_eq!(a[0].2, vec![(3.0, T), (4.0, T + 1_000)]);
    assert!(read(&[("__name__", "cpu_s")]).is_empty(), "a string field");
    common::server::stop(halite);
}
