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
use common::prometheus::{Prometheus, percent_encode};
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

/// The data explorer's structure: InfluxQL targets on the `$datasource`
/// variable (an InfluxDB data source), the variables each panel names,
/// and the provisioned data source it is meant for.
fn check_explorer_structure(d: &Json) {
    assert!(d["schemaVersion"].as_u64().expect("schemaVersion") >= 30);
    assert_eq!(d["uid"], "halite-explorer");
    let vars = d["templating"]["list"].as_array().expect("templating");
    let names: Vec<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
    assert_eq!(
        names,
        ["datasource", "measurement", "field", "tag", "value"]
    );
    assert_eq!(vars[0]["query"], "influxdb");
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().expect("panels") {
        let title = p["title"].as_str().expect("title");
        assert!(ids.insert(p["id"].as_u64().expect("id")), "{title}: id");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        for t in p["targets"].as_array().expect("targets") {
            assert_eq!(t["rawQuery"], true, "{title}");
            let q = t["query"].as_str().expect("query");
            for needle in ["$measurement", "$timeFilter"] {
                assert!(q.contains(needle), "{title}: {q} lacks {needle}");
            }
        }
    }
    let provisioned =
        std::fs::read_to_string(repo("grafana/provisioning/datasources/influxdb.yaml"))
            .expect("influxdb.yaml");
    for n in [
        "apiVersion: 1",
        "type: influxdb",
        "dbName: demo",
        "url: http://127.0.0.1:8070",
    ] {
        assert!(provisioned.contains(n), "influxdb.yaml lacks `{n}`");
    }
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
    // An hour of six hosts in four regions, every 10 s, as `make run`
    // writes them.
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
        for p in d["panels"].as_array().expect("panels") {
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
    assert_eq!(compared, 2 * d["panels"].as_array().map_or(0, Vec::len));
    server::stop(halite);
}
