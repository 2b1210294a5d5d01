//! The Grafana dashboards: their structure is what Grafana's provisioning
//! loads, and every query in them returns data from a real Prometheus
//! (Debian's `prometheus` package, which CI installs) scraping a halite that
//! ingests from a real Kafka broker (the cluster dashboard: two nodes of a
//! cluster over a real S3 server, s3s-fs). The data explorer dashboard
//! reads halite through Grafana's InfluxDB data source: its queries run,
//! as Grafana sends them, through halite and a real InfluxDB 1.6 holding
//! the same points, and must answer alike.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::http::{free_port, request};
use common::influx::{Influx, assert_close};
use common::kafka::{Load, wait_for_group_commit};
use common::prometheus::{PromApi, Prometheus, percent_encode};
use common::scenario::Scenario;
use common::server;
use serde_json::{Value as Json, json};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn dashboard() -> Json {
    load("grafana/dashboards/halite-overview.json")
}

fn cluster_dashboard() -> Json {
    load("grafana/dashboards/halite-cluster.json")
}

fn load(path: &str) -> Json {
    let text = std::fs::read_to_string(repo(path)).expect("dashboard json");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every PromQL expression of every panel.
fn queries(d: &Json) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            out.push((
                p["title"].as_str().expect("title").to_string(),
                t["expr"].as_str().expect("expr").to_string(),
            ));
        }
    }
    out
}

#[test]
fn the_dashboards_have_the_structure_grafana_provisioning_loads() {
    let d = dashboard();
    check_structure(&d);
    let vars = d["templating"]["list"].as_array().expect("templating");
    assert!(
        vars.iter()
            .any(|v| v["name"] == "table" && v["type"] == "query"),
        "no $table variable"
    );
    check_structure(&cluster_dashboard());
}

fn check_structure(d: &Json) {
    assert!(d["schemaVersion"].as_u64().expect("schemaVersion") >= 30);
    for key in ["uid", "title"] {
        assert!(!d[key].as_str().expect(key).is_empty(), "{key}");
    }
    let vars = d["templating"]["list"].as_array().expect("templating");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no ${name} variable"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    let panels = d["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10);
    let mut ids = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().expect("panel title");
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "{title}: id"
        );
        assert!(
            ["timeseries", "stat", "gauge", "table"].contains(&p["type"].as_str().expect("type")),
            "{title}: type"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        for k in ["h", "w", "x", "y"] {
            assert!(p["gridPos"][k].is_u64(), "{title}: gridPos.{k}");
        }
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no targets");
        for t in targets {
            assert!(t["refId"].is_string(), "{title}: refId");
            assert!(
                !t["expr"].as_str().expect("expr").is_empty(),
                "{title}: expr"
            );
        }
    }
    // Every metric a query names is one halite documents (and so exports:
    // the Prometheus test below proves that).
    let documented = std::fs::read_to_string(repo("docs/metrics.md")).expect("docs/metrics.md");
    for (title, expr) in queries(d) {
        for name in expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("halite_"))
        {
            let base = name.strip_suffix("_bucket").unwrap_or(name);
            let family = base
                .strip_suffix("_hits_total")
                .or_else(|| base.strip_suffix("_misses_total"))
                .map_or(base.to_string(), |b| format!("{b}_hits_total"));
            assert!(
                documented.contains(&format!("`{base}`"))
                    || documented.contains(&format!("`{family}`")),
                "{title}: {name} is not in docs/metrics.md"
            );
        }
    }
    for (file, needles) in [
        (
            "grafana/provisioning/datasources/prometheus.yaml",
            &["apiVersion: 1", "datasources:", "type: prometheus"][..],
        ),
        (
            "grafana/provisioning/dashboards/halite.yaml",
            &["apiVersion: 1", "providers:", "type: file", "path:"][..],
        ),
    ] {
        let text = std::fs::read_to_string(repo(file)).expect(file);
        for n in needles {
            assert!(text.contains(n), "{file} lacks `{n}`");
        }
    }
}

#[test]
fn every_dashboard_query_returns_data_from_a_real_prometheus() {
    const POINTS: u64 = 30_000;
    let sc = Scenario::new()
        .topic("cpu", 4)
        .topic("dead", 1)
        .set("kafka.dead_letter_topic=\"dead\"")
        .set("kafka.commit_interval=\"200ms\"")
        .build();
    let srv = sc.start();
    let prometheus = Prometheus::start(sc.dir(), &srv.addr);

    // Load for a few scrapes: points at a steady rate, a poison message,
    // queries, a flush and a compaction, a request for a missing table.
    let producer = sc.produce_in_background(
        "cpu",
        Load {
            hosts: 20,
            points: POINTS,
            per_message: 1,
            rate: 5000,
        },
    );
    let poison = Command::new(env!("CARGO_BIN_EXE_halite"))
        .args(["produce", "--brokers", sc.bootstrap(), "--topic", "cpu"])
        .args(["--hosts", "1", "--points", "1", "--format", "json"])
        .output()
        .expect("produce json into a line topic");
    assert!(poison.status.success());
    let q = json!({
        "table": "metrics:cpu", "series": [["metric", "cpu"]],
        "start_ms": 0, "end_ms": u64::MAX / 2,
        "aggregate": {"functions": ["max"]}
    })
    .to_string();
    let started = Instant::now();
    let mut flushed = 0;
    while started.elapsed() < Duration::from_secs(8) {
        let r = request(
            &srv.addr,
            "POST",
            "/api/v1/query",
            Some("application/json"),
            q.as_bytes(),
        )
        .expect("query");
        assert_eq!(r.status, 200, "{}", r.text());
        let r = request(&srv.addr, "GET", "/api/v1/tables/metrics:nope", None, b"").expect("get");
        assert_eq!(r.status, 404);
        if started.elapsed() > Duration::from_secs(2 + 2 * flushed) && flushed < 2 {
            for op in ["flush", "compact"] {
                let r = request(
                    &srv.addr,
                    "POST",
                    &format!("/api/v1/tables/metrics:cpu/{op}"),
                    None,
                    b"",
                )
                .expect(op);
                assert!(r.status < 300, "{op}: {}", r.text());
            }
            flushed += 1;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    producer.join().expect("producer");
    wait_for_group_commit(sc.bootstrap(), "cpu", 4, POINTS as i64 + 1);
    // A few more scrapes after the last events, for the rate windows.
    std::thread::sleep(Duration::from_secs(3));
    assert_every_query_has_data(&prometheus, &dashboard(), &[]);
    server::stop(srv);
}

/// Every query of `d` answers, and with data but for those naming a
/// metric of `may_be_empty` (events the run does not make happen).
fn assert_every_query_has_data(prometheus: &Prometheus, d: &Json, may_be_empty: &[&str]) {
    let mut empty = Vec::new();
    for (title, expr) in queries(d) {
        let expr = expr.replace("$table", ".*");
        let answer = prometheus.query(&expr);
        assert_eq!(answer["status"], "success", "{title}: {expr}: {answer}");
        if answer["data"]["result"]
            .as_array()
            .is_none_or(|r| r.is_empty())
            && !may_be_empty.iter().any(|m| expr.contains(m))
        {
            empty.push(format!("{title}: {expr}"));
        }
    }
    assert!(
        empty.is_empty(),
        "queries without data:\n{}",
        empty.join("\n")
    );
}

#[test]
fn every_cluster_dashboard_query_returns_data_from_a_real_prometheus() {
    let s3 = common::s3::S3::start(&["halite"]);
    let sc = Scenario::new()
        .topic("cpu", 4)
        .set("objects.url=\"s3://halite/cluster\"")
        .set(&format!("objects.endpoint=\"{}\"", s3.endpoint))
        .set("objects.region=\"us-east-1\"")
        .set(&format!(
            "objects.access_key_id=\"{}\"",
            common::s3::ACCESS_KEY
        ))
        .set(&format!(
            "objects.secret_access_key=\"{}\"",
            common::s3::SECRET_KEY
        ))
        .set("objects.allow_http=true")
        .set("region.flush_age=\"1s\"")
        .build();
    let (pa, pb) = (free_port(), free_port());
    let a = sc.start_member("a", pa, &["cluster.node=\"a\""]);
    let b = sc.start_member("b", pb, &["cluster.node=\"b\""]);
    let prometheus = Prometheus::start_over(sc.dir(), &[&a.addr, &b.addr]);

    // Points by bucket, and a few by host hash (misrouted in part); reads
    // through both nodes (each reads the other's regions: tails, the file
    // cache); then a takeover and its replay: b stops.
    let by_bucket = |points: u64| {
        let out = Command::new(env!("CARGO_BIN_EXE_halite"))
            .args(["produce", "--brokers", sc.bootstrap(), "--topic", "cpu"])
            .args(["--hosts", "20", "--points", &points.to_string()])
            .args(["--by-bucket", "metrics:cpu", "--server", &a.addr])
            .output()
            .expect("produce");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !request(&a.addr, "GET", "/api/v1/tables/metrics:cpu", None, b"")
        .is_ok_and(|r| r.status == 200)
    {
        assert!(Instant::now() < deadline, "no table");
        std::thread::sleep(Duration::from_millis(200));
    }
    by_bucket(10_000);
    sc.produce(
        "cpu",
        Load {
            hosts: 4,
            points: 40,
            per_message: 1,
            rate: 0,
        },
    );
    let q = json!({
        "table": "metrics:cpu", "series": [["metric", "cpu"]],
        "start_ms": 0, "end_ms": u64::MAX / 2,
        "aggregate": {"functions": ["count"]}
    })
    .to_string();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        for node in [&a.addr, &b.addr] {
            let r = request(
                node,
                "POST",
                "/api/v1/query",
                Some("application/json"),
                q.as_bytes(),
            )
            .expect("query");
            assert_eq!(r.status, 200, "{}", r.text());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    server::stop(b);
    by_bucket(2_000);
    std::thread::sleep(Duration::from_secs(12));
    assert_every_query_has_data(
        &prometheus,
        &cluster_dashboard(),
        // No node was paused past its session here (tests/cluster.rs
        // fences one).
        &["halite_cluster_fenced_total"],
    );
    server::stop(a);
}

/// The explorer's panels on data sources of `kind` (`influxdb` or
/// `prometheus`), those inside collapsed rows among them.
fn explorer_panels(d: &Json, kind: &str) -> Vec<Json> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        let nested = p["panels"].as_array().into_iter().flatten();
        for q in std::iter::once(p).chain(nested) {
            if q["type"] != "row" && q["datasource"]["type"] == kind {
                out.push(q.clone());
            }
        }
    }
    out
}

/// The data explorer's structure: a row of InfluxQL panels on the
/// `$datasource` variable (an InfluxDB data source) and a row of PromQL
/// panels on `$promsource` (a Prometheus), the variables each names, and
/// the provisioned data sources it is meant for.
fn check_explorer_structure(d: &Json) {
    assert!(d["schemaVersion"].as_u64().expect("schemaVersion") >= 30);
    assert_eq!(d["uid"], "halite-explorer");
    let vars = d["templating"]["list"].as_array().expect("templating");
    let names: Vec<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "datasource",
            "measurement",
            "field",
            "tag",
            "value",
            "promsource",
            "metric",
            "label",
            "label_value"
        ]
    );
    assert_eq!(vars[0]["query"], "influxdb");
    assert_eq!(vars[5]["query"], "prometheus");
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().expect("panels") {
        let nested = p["panels"].as_array().into_iter().flatten();
        for q in std::iter::once(p).chain(nested) {
            let title = q["title"].as_str().expect("title");
            assert!(ids.insert(q["id"].as_u64().expect("id")), "{title}: id");
        }
    }
    let (influxql, promql) = (
        explorer_panels(d, "influxdb"),
        explorer_panels(d, "prometheus"),
    );
    assert!(influxql.len() >= 10 && promql.len() >= 10);
    for p in &influxql {
        let title = p["title"].as_str().expect("title");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        for t in p["targets"].as_array().expect("targets") {
            assert_eq!(t["rawQuery"], true, "{title}");
            let q = t["query"].as_str().expect("query");
            for needle in ["$measurement", "$timeFilter"] {
                assert!(q.contains(needle), "{title}: {q} lacks {needle}");
            }
        }
    }
    for p in &promql {
        let title = p["title"].as_str().expect("title");
        assert_eq!(p["datasource"]["uid"], "${promsource}", "{title}");
        for t in p["targets"].as_array().expect("targets") {
            let q = t["expr"].as_str().expect("expr");
            for needle in ["$metric", "$label_value"] {
                assert!(q.contains(needle), "{title}: {q} lacks {needle}");
            }
        }
    }
    for (file, needles) in [
        (
            "grafana/provisioning/datasources/influxdb.yaml",
            &[
                "apiVersion: 1",
                "type: influxdb",
                "dbName: metrics",
                "url: http://127.0.0.1:8070",
            ][..],
        ),
        (
            "grafana/provisioning/datasources/halite-promql.yaml",
            &[
                "apiVersion: 1",
                "type: prometheus",
                "uid: halite-promql",
                "url: http://127.0.0.1:8070/prometheus",
            ][..],
        ),
        (
            "configs/prometheus-reader.yml",
            &[
                "remote_read:",
                "url: http://127.0.0.1:8070/api/v1/read",
                "read_recent: true",
            ][..],
        ),
        (
            "configs/prometheus.yml",
            &["remote_write:", "url: http://127.0.0.1:8070/api/v1/write"][..],
        ),
    ] {
        let text = std::fs::read_to_string(repo(file)).expect(file);
        for n in needles {
            assert!(text.contains(n), "{file} lacks `{n}`");
        }
    }
    // Prometheus' own check of the two configurations the README starts.
    let checked = Command::new("promtool")
        .args(["check", "config", "--syntax-only"])
        .arg(repo("configs/prometheus.yml"))
        .arg(repo("configs/prometheus-reader.yml"))
        .output()
        .expect("promtool: install Debian's `prometheus` package (.ci/run does)");
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// What Grafana's InfluxDB data source sends for a raw InfluxQL query:
/// `$timeFilter` and `$__interval` expanded, variables substituted (a
/// multi-value one inside a regex as `(a|b)`).
fn interpolate(query: &str, vars: &[(&str, String)], from_ms: i64, to_ms: i64) -> String {
    let mut q = query
        .replace(
            "$timeFilter",
            &format!("time >= {from_ms}ms and time <= {to_ms}ms"),
        )
        .replace("$__interval", "1m");
    for (name, value) in vars {
        q = q.replace(&format!("${name}"), value);
    }
    q
}

#[test]
fn every_explorer_query_answers_from_halite_as_from_influxdb() {
    use halite::tsbs::cpu_line_tagged;
    let d = load("grafana/dashboards/halite-explorer.json");
    check_explorer_structure(&d);
    let influx = Influx::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = server::spawn_ready(server::command(dir.path(), port, &[] as &[&str]), port);
    // An hour of six hosts in four regions, every 10 s: the dashboard's
    // tag variable has two tags to offer.
    const T0_MS: i64 = 1_700_000_000_000;
    let mut lines = String::new();
    for step in 0..360u64 {
        for host in 0..6u64 {
            cpu_line_tagged(host, step, T0_MS as u64 + step * 10_000, &mut lines);
        }
    }
    let ask = |addr: &str, q: &str| -> Json {
        let path = format!("/query?db=demo&epoch=ms&q={}", percent_encode(q));
        let r = request(addr, "GET", &path, None, b"").expect("query");
        assert_eq!(r.status, 200, "{addr} {q}: {}", r.text());
        serde_json::from_slice(&r.body).expect("JSON")
    };
    for addr in [&influx.addr, &halite.addr] {
        let r =
            request(addr, "POST", "/query?q=CREATE%20DATABASE%20demo", None, b"").expect("create");
        assert_eq!(r.status, 200, "{}", r.text());
        let r = request(
            addr,
            "POST",
            "/write?db=demo&precision=ms",
            None,
            lines.as_bytes(),
        )
        .expect("write");
        assert_eq!(r.status, 204, "{}", r.text());
    }
    let both = |q: &str| -> Json {
        let (a, b) = (ask(&influx.addr, q), ask(&halite.addr, q));
        assert_close(&a, &b, q);
        assert!(
            a["results"][0]["series"]
                .as_array()
                .is_some_and(|s| !s.is_empty()),
            "{q}: no data: {a}"
        );
        b
    };
    let first_column = |answer: &Json| -> Vec<String> {
        answer["results"][0]["series"][0]["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v[0].as_str())
            .map(str::to_string)
            .collect()
    };
    // "Save & test", then the variables in dashboard order.
    both("SHOW measurements");
    let vars = d["templating"]["list"]
        .as_array()
        .expect("templating")
        .clone();
    let var_query = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .and_then(|v| v["query"].as_str())
            .expect("variable query")
            .to_string()
    };
    let measurements = first_column(&both(&var_query("measurement")));
    assert_eq!(measurements, ["cpu"]);
    let mut compared = 0;
    for (tag, field, pick) in [
        ("host", "usage_user", vec![0usize, 2, 3]),
        ("region", "usage_system", vec![0, 1]),
    ] {
        let mut chosen: Vec<(&str, String)> = vec![("measurement", "cpu".to_string())];
        let fields = first_column(&both(&interpolate(&var_query("field"), &chosen, 0, 0)));
        assert!(fields.iter().any(|f| f == field), "{fields:?}");
        chosen.push(("field", field.to_string()));
        let tags = first_column(&both(&interpolate(&var_query("tag"), &chosen, 0, 0)));
        assert_eq!(tags, ["host", "region"]);
        chosen.push(("tag", tag.to_string()));
        // SHOW TAG VALUES answers (key, value) rows.
        let answer = both(&interpolate(&var_query("value"), &chosen, 0, 0));
        let values: Vec<String> = answer["results"][0]["series"][0]["values"]
            .as_array()
            .expect("tag values")
            .iter()
            .filter_map(|row| row[1].as_str().map(str::to_string))
            .collect();
        let picked: Vec<String> = pick.iter().map(|i| values[*i].clone()).collect();
        chosen.push(("value", format!("({})", picked.join("|"))));
        for p in explorer_panels(&d, "influxdb") {
            for t in p["targets"].as_array().expect("targets") {
                let q = interpolate(
                    t["query"].as_str().expect("query"),
                    &chosen,
                    T0_MS + 600_000,
                    T0_MS + 2_400_000,
                );
                both(&q);
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 2 * explorer_panels(&d, "influxdb").len());
    server::stop(halite);
}

/// The exporter behind the PromQL explorer test at its `n`th scrape:
/// temperatures by room and floor, requests by code.
fn rooms(n: u64) -> String {
    let mut out = String::from("# TYPE explore_temperature gauge\n");
    for (i, (room, floor)) in [
        ("kitchen", "0"),
        ("hall", "0"),
        ("study", "1"),
        ("attic", "2"),
    ]
    .iter()
    .enumerate()
    {
        let v = 18.0 + i as f64 + ((n + i as u64) % 7) as f64 * 0.25;
        out.push_str(&format!(
            "explore_temperature{{room=\"{room}\",floor=\"{floor}\"}} {v}\n"
        ));
    }
    out.push_str("# TYPE explore_requests_total counter\n");
    for (i, code) in ["200", "404", "500"].iter().enumerate() {
        out.push_str(&format!(
            "explore_requests_total{{code=\"{code}\"}} {}\n",
            n * (9 - 3 * i as u64) + n % 2
        ));
    }
    out
}

/// What Grafana's Prometheus data source sends: `$__interval`,
/// `$__rate_interval` and `$__range` expanded, variables substituted
/// (longest name first, so `$label_value` is not read as `$label`).
fn interpolate_promql(
    expr: &str,
    vars: &[(&str, String)],
    range_s: u64,
    interval_s: u64,
) -> String {
    // Grafana: max($__interval + scrape interval, 4 × scrape interval),
    // the scrape interval being the data source's (1 s here).
    let rate_interval = (interval_s + 1).max(4);
    let mut all: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (format!("${k}"), v.clone()))
        .collect();
    all.push(("$__interval".into(), format!("{interval_s}s")));
    all.push(("$__rate_interval".into(), format!("{rate_interval}s")));
    all.push(("$__range".into(), format!("{range_s}s")));
    all.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
    let mut q = expr.to_string();
    for (k, v) in all {
        q = q.replace(&k, &v);
    }
    q
}

/// The values a `label_values(selector, label)` variable lists, asked as
/// Grafana asks a Prometheus without the labels-match API: the series of
/// the selector over the dashboard's range.
fn label_values(p: &PromApi, query: &str, from: f64, to: f64) -> Vec<String> {
    let inner = query
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .expect("label_values(…)");
    let (selector, label) = inner
        .rsplit_once(',')
        .expect("label_values(selector, label)");
    let answer = p.get(&format!(
        "/api/v1/series?match[]={}&start={from:.3}&end={to:.3}",
        percent_encode(selector.trim())
    ));
    assert_eq!(answer["status"], "success", "{query}: {answer}");
    let values: BTreeSet<String> = answer["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s[label.trim()].as_str().map(str::to_string))
        .collect();
    values.into_iter().collect()
}

/// A `query_result(expr)` variable: each series of the instant answer as
/// Grafana writes it (`name{k="v",…} value ms`), then the variable's
/// regex, every match of a global one.
fn query_result_values(p: &PromApi, query: &str, regex: &str, at: f64) -> Vec<String> {
    let expr = query
        .strip_prefix("query_result(")
        .and_then(|q| q.strip_suffix(')'))
        .expect("query_result(…)");
    let answer = p.query_at(expr, at);
    assert_eq!(answer["status"], "success", "{query}: {answer}");
    let pattern = regex
        .strip_prefix('/')
        .and_then(|r| r.strip_suffix("/g"))
        .expect("a global /regex/g");
    let re = regex_lite::Regex::new(pattern).expect("regex");
    let mut out = BTreeSet::new();
    for series in answer["data"]["result"].as_array().into_iter().flatten() {
        let mut metric = series["metric"].as_object().cloned().unwrap_or_default();
        let name = metric
            .remove("__name__")
            .and_then(|n| n.as_str().map(str::to_string))
            .unwrap_or_default();
        let labels: Vec<String> = metric
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", v.as_str().unwrap_or_default()))
            .collect();
        let text = format!(
            "{name}{{{}}} {} {}",
            labels.join(","),
            series["value"][1].as_str().unwrap_or_default(),
            series["value"][0]
        );
        for c in re.captures_iter(&text) {
            out.insert(c[1].to_string());
        }
    }
    out.into_iter().collect()
}

/// The explorer's PromQL row through Grafana's Prometheus data source: a
/// real Prometheus scrapes an exporter and remote-writes to halite; a
/// second, with an empty TSDB, reads halite through remote read, as
/// `configs/prometheus-reader.yml` does for `grafana/provisioning`'s
/// `halite-promql` data source. Every variable and panel query, as
/// Grafana sends it, answers through the reader as through the writer's
/// own TSDB, with data, and so does halite's own PromQL (`/prometheus`,
/// the provisioned data source's URL).
#[test]
fn every_explorer_promql_query_answers_through_halite_as_from_prometheus() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let d = load("grafana/dashboards/halite-explorer.json");
    check_explorer_structure(&d);
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = server::spawn_ready(
        server::command(&dir.path().join("halite"), port, &[] as &[&str]),
        port,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let exporter = common::prometheus::exporter(stop.clone(), rooms);
    let writer = Prometheus::with_config(
        &dir.path().join("writer"),
        &format!(
            "global:\n  scrape_interval: 1s\n\
             scrape_configs:\n  - job_name: rooms\n    static_configs:\n      - targets: ['{exporter}']\n\
             remote_write:\n  - url: http://{}/api/v1/write\n    queue_config:\n      \
             batch_send_deadline: 1s\n      min_backoff: 100ms\n      max_backoff: 1s\n",
            halite.addr
        ),
    );
    let reader_config = std::fs::read_to_string(repo("configs/prometheus-reader.yml"))
        .expect("configs/prometheus-reader.yml")
        .replace("127.0.0.1:8070", &halite.addr);
    let reader = Prometheus::with_config(&dir.path().join("reader"), &reader_config);
    let direct = PromApi {
        addr: halite.addr.clone(),
        prefix: "/prometheus".into(),
    };
    let (writer_api, reader_api) = (writer.api(), reader.api());
    std::thread::sleep(Duration::from_secs(16));
    // Grafana's range ends here (every sample before it has been sent:
    // batches go each second); 12 s of it, a 2 s interval.
    let to = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
        - 4.0)
        .floor();
    let (range_s, interval_s) = (12u64, 2u64);
    let from = to - range_s as f64;
    let vars = d["templating"]["list"]
        .as_array()
        .expect("templating")
        .clone();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no ${name}"))
            .clone()
    };
    let both_lists = |f: &dyn Fn(&PromApi) -> Vec<String>, what: &str| {
        let (a, b, c) = (f(&writer_api), f(&reader_api), f(&direct));
        assert!(!a.is_empty(), "{what}: the writer lists nothing");
        assert_eq!(a, b, "{what}: through the reader");
        assert_eq!(a, c, "{what}: halite's own PromQL");
        a
    };
    let metric_query = var("metric")["query"].as_str().expect("query").to_string();
    let metrics = both_lists(&|p| label_values(p, &metric_query, from, to), &metric_query);
    for m in ["explore_temperature", "explore_requests_total", "up"] {
        assert!(metrics.iter().any(|x| x == m), "{m} not in {metrics:?}");
    }
    let mut compared = 0;
    for (metric, label, pick) in [
        ("explore_temperature", "room", Some(vec!["hall", "kitchen"])),
        ("explore_requests_total", "code", None),
    ] {
        let mut chosen: Vec<(&str, String)> = vec![("metric", metric.to_string())];
        let label_var = var("label");
        let q = interpolate_promql(
            label_var["query"].as_str().expect("q"),
            &chosen,
            range_s,
            interval_s,
        );
        let regex = label_var["regex"].as_str().expect("regex").to_string();
        let labels = both_lists(&|p| query_result_values(p, &q, &regex, to), &q);
        assert!(
            labels.iter().any(|l| l == label),
            "{label} not in {labels:?}"
        );
        chosen.push(("label", label.to_string()));
        let q = interpolate_promql(
            var("label_value")["query"].as_str().expect("q"),
            &chosen,
            range_s,
            interval_s,
        );
        let values = both_lists(&|p| label_values(p, &q, from, to), &q);
        let value = match &pick {
            // A multi-value selection: Grafana's regex of the values.
            Some(picked) => {
                for v in picked {
                    assert!(values.iter().any(|x| x == v), "{v} not in {values:?}");
                }
                format!("({})", picked.join("|"))
            }
            // "All": the variable's allValue.
            None => var("label_value")["allValue"]
                .as_str()
                .expect("allValue")
                .to_string(),
        };
        chosen.push(("label_value", value));
        for p in explorer_panels(&d, "prometheus") {
            let title = p["title"].as_str().expect("title");
            for t in p["targets"].as_array().expect("targets") {
                let expr = interpolate_promql(
                    t["expr"].as_str().expect("expr"),
                    &chosen,
                    range_s,
                    interval_s,
                );
                let (a, b, c) = if t["instant"] == true {
                    (
                        writer.query_at(&expr, to),
                        reader.query_at(&expr, to),
                        direct.query_at(&expr, to),
                    )
                } else {
                    // Grafana aligns the range to the step.
                    let step = interval_s as f64;
                    let (start, end) = ((from / step).floor() * step, (to / step).floor() * step);
                    (
                        writer.query_range(&expr, start, end, step),
                        reader.query_range(&expr, start, end, step),
                        direct.query_range(&expr, start, end, step),
                    )
                };
                let at = format!("{title}: {expr}");
                assert_eq!(a["status"], "success", "{at}: {a}");
                assert_eq!(b["status"], "success", "{at}: {b}");
                assert_eq!(c["status"], "success", "{at}: halite's own PromQL: {c}");
                let sorted = |j: &Json| {
                    let mut r = j["data"]["result"].as_array().cloned().unwrap_or_default();
                    r.sort_by_key(|x| x["metric"].to_string());
                    Json::Array(r)
                };
                let (a, b, c) = (sorted(&a), sorted(&b), sorted(&c));
                assert!(
                    a.as_array().is_some_and(|r| !r.is_empty()),
                    "{at}: the writer has no answer"
                );
                assert_close(&a, &b, &at);
                assert_close(&a, &c, &format!("{at} (halite's own PromQL)"));
                compared += 1;
            }
        }
    }
    assert!(compared >= 20, "{compared}");
    stop.store(true, Ordering::Relaxed);
    drop(reader);
    drop(writer);
    server::stop(halite);
}
