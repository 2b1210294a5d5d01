//! PromQL served by halite (`/prometheus/api/v1/…`) against a real
//! Prometheus 2.42 (Debian's) holding the same samples: one remote-write
//! body of counters with a reset, gauges with a gap and a stale marker,
//! and a classic histogram goes to both, and every query of the list is
//! asked of both, as an instant query at two times and as a range query
//! at two steps. The answers must be equal (values to 1e-6 relative) or
//! the same kind of error.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::http::{free_port, request, request_with};
use common::prometheus::{Prometheus, percent_encode};
use common::server::{command, spawn_ready};
use halite::ingest::remote_write::{Series, encode_message, encode_series};
use serde_json::Value as Json;

const STEP_MS: i64 = 15_000;
const SAMPLES: i64 = 160;
const STALE: u64 = 0x7ff0_0000_0000_0002;

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut l: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    l.sort();
    l
}

/// The data set: 40 minutes of samples every 15 s from `t0`.
fn data(t0: i64) -> Vec<Series> {
    let at = |i: i64| t0 + i * STEP_MS;
    let mut out = Vec::new();
    for (instance, code, rate) in [("a", "200", 3.0), ("a", "500", 0.5), ("b", "200", 7.0)] {
        let mut v = 0.0;
        let samples = (0..SAMPLES)
            .map(|i| {
                // A counter reset halfway through instance a's 200s.
                if instance == "a" && code == "200" && i == 80 {
                    v = 2.0;
                } else {
                    v += rate * (1.0 + (i % 4) as f64);
                }
                (v, at(i))
            })
            .collect();
        out.push(Series {
            labels: labels(&[
                ("__name__", "http_requests_total"),
                ("job", "api"),
                ("instance", instance),
                ("code", code),
            ]),
            samples,
        });
    }
    for room in ["kitchen", "hall"] {
        let samples = (0..SAMPLES)
            .filter(|i| room == "kitchen" || !(50..70).contains(i))
            .filter(|i| room == "kitchen" || !(121..130).contains(i))
            .map(|i| {
                let v = if room == "hall" && i == 120 {
                    f64::from_bits(STALE)
                } else {
                    20.0 + 5.0 * ((i as f64) / 9.0).sin() + if room == "hall" { 2.5 } else { 0.0 }
                };
                (v, at(i))
            })
            .collect();
        out.push(Series {
            labels: labels(&[("__name__", "temperature"), ("room", room)]),
            samples,
        });
    }
    for (le, share) in [("0.1", 0.2), ("0.5", 0.6), ("1", 0.9), ("+Inf", 1.0)] {
        let samples = (0..SAMPLES)
            .map(|i| (((i * 10) as f64 * share).floor(), at(i)))
            .collect();
        out.push(Series {
            labels: labels(&[
                ("__name__", "req_duration_seconds_bucket"),
                ("job", "api"),
                ("le", le),
            ]),
            samples,
        });
    }
    for (instance, v) in [("a", 1.0), ("b", 0.0)] {
        out.push(Series {
            labels: labels(&[("__name__", "up"), ("job", "api"), ("instance", instance)]),
            samples: (0..SAMPLES).map(|i| (v, at(i))).collect(),
        });
    }
    out
}

fn write_request(series: &[Series]) -> Vec<u8> {
    let mut req = Vec::new();
    for s in series {
        let mut ts = Vec::new();
        encode_series(s, &mut ts);
        encode_message(1, &ts, &mut req);
    }
    snap::raw::Encoder::new()
        .compress_vec(&req)
        .expect("snappy")
}

/// The expressions asked of both.
const QUERIES: &[&str] = &[
    "http_requests_total",
    "http_requests_total{code=\"200\"}",
    "http_requests_total{code!=\"200\"}",
    "http_requests_total{instance=~\"a|b\",code=~\"2..\"}",
    "http_requests_total{instance!~\"a\"}",
    "{__name__=~\"http_.*\",job=\"api\"}",
    "http_requests_total offset 5m",
    "temperature",
    "temperature offset 10m",
    "temperature @ end()",
    "temperature @ start()",
    "rate(http_requests_total[5m])",
    "rate(http_requests_total[1m])",
    "rate(http_requests_total[5m] offset 3m)",
    "irate(http_requests_total[5m])",
    "increase(http_requests_total[10m])",
    "delta(temperature[5m])",
    "idelta(temperature[5m])",
    "deriv(temperature[10m])",
    "predict_linear(temperature[10m], 600)",
    "resets(http_requests_total[20m])",
    "changes(temperature[10m])",
    "avg_over_time(temperature[5m])",
    "min_over_time(temperature[5m])",
    "max_over_time(temperature[5m])",
    "sum_over_time(temperature[5m])",
    "count_over_time(temperature[5m])",
    "last_over_time(temperature[5m])",
    "present_over_time(temperature[5m])",
    "stddev_over_time(temperature[5m])",
    "stdvar_over_time(temperature[5m])",
    "quantile_over_time(0.9, temperature[10m])",
    "absent_over_time(nonexistent[5m])",
    "absent(nonexistent{job=\"x\"})",
    "absent(temperature)",
    "holt_winters(temperature[10m], 0.5, 0.5)",
    "sum(http_requests_total)",
    "sum by (instance) (rate(http_requests_total[5m]))",
    "sum without (code) (rate(http_requests_total[5m]))",
    "avg(temperature)",
    "min by (job) (http_requests_total)",
    "max(temperature)",
    "count(http_requests_total)",
    "group by (job) (http_requests_total)",
    "stddev(temperature)",
    "stdvar(temperature)",
    "topk(2, http_requests_total)",
    "bottomk(1, temperature)",
    "quantile(0.5, http_requests_total)",
    "count_values(\"value\", up)",
    "histogram_quantile(0.9, rate(req_duration_seconds_bucket[5m]))",
    "histogram_quantile(0.5, sum by (le) (rate(req_duration_seconds_bucket[5m])))",
    "abs(temperature - 22)",
    "ceil(temperature)",
    "floor(temperature)",
    "round(temperature, 0.5)",
    "sqrt(temperature)",
    "exp(temperature / 10)",
    "ln(temperature)",
    "log2(temperature)",
    "log10(temperature)",
    "clamp(temperature, 18, 22)",
    "clamp_min(temperature, 21)",
    "clamp_max(temperature, 21)",
    "sgn(temperature - 21)",
    "timestamp(temperature)",
    "time()",
    "vector(1)",
    "scalar(up{instance=\"a\"})",
    "scalar(up)",
    "hour()",
    "day_of_week()",
    "month(vector(1700000000))",
    "label_replace(up, \"host\", \"$1\", \"instance\", \"(.*)\")",
    "label_join(up, \"both\", \"-\", \"job\", \"instance\")",
    "sort(temperature)",
    "sort_desc(http_requests_total)",
    "1 + 1",
    "2 ^ 3 * 4 - 1",
    "temperature * 2",
    "100 - temperature",
    "temperature > 21",
    "temperature > bool 21",
    "21 < temperature",
    "http_requests_total / on (instance) group_left up",
    "http_requests_total * ignoring (code) group_left up",
    "up + on (instance) group_right http_requests_total",
    "temperature{room=\"kitchen\"} - ignoring (room) temperature{room=\"hall\"}",
    "rate(http_requests_total[5m]) / ignoring (code) group_left sum without (code) (rate(http_requests_total[5m]))",
    "up == 1",
    "up and http_requests_total",
    "up and on (instance) http_requests_total{code=\"500\"}",
    "http_requests_total or up",
    "temperature unless temperature{room=\"hall\"}",
    "max_over_time(rate(http_requests_total[1m])[5m:1m])",
    "avg_over_time(temperature[10m:30s])",
    "rate(http_requests_total[5m:])",
    "-temperature",
    "http_requests_total + http_requests_total",
    "up + up{instance=\"a\"}",
    "http_requests_total + up",
    "rate(temperature)",
    "sum(",
    "unknown_function(up)",
    "label_replace(up, \"1bad\", \"x\", \"instance\", \".*\")",
    "label_replace(up, \"host\", \"$1\", \"nothere\", \"(.+)\")",
    "label_replace(up, \"instance\", \"\", \"instance\", \".*\")",
    "max_over_time(temperature[5m] offset -1m)",
    "rate(http_requests_total[5m] @ end())",
    "temperature @ end() offset 5m",
    "sum_over_time(temperature[10m:1m] offset 2m)",
    "rate(http_requests_total[10m:15s])",
    "topk by (instance) (1, http_requests_total)",
    "quantile by (instance) (0.9, http_requests_total)",
    "count_values by (job) (\"v\", up)",
    "sum(temperature) by (room)",
    "avg by (room) (temperature) > 21",
    "http_requests_total > on (instance) group_left up",
    "http_requests_total >= bool on (instance) group_left up",
    "temperature != bool temperature",
    "scalar(up{instance=\"a\"}) * temperature",
    "time() - timestamp(temperature)",
    "minute(timestamp(up))",
    "days_in_month()",
    "year()",
    "day_of_month()",
    "day_of_year()",
    "\"hello\"",
    "42",
    "-1 * temperature",
    "temperature % 3",
    "temperature ^ 2",
    "temperature atan2 20",
    "temperature[1m]",
    "http_requests_total[2m] offset 1m",
    "sum(rate(http_requests_total[5m])) by (code) / ignoring (code) group_left sum(rate(http_requests_total[5m]))",
    "1 - avg by (instance) (up)",
    "sort_desc(sum by (instance) (increase(http_requests_total[10m])))",
    "histogram_quantile(0.99, sum by (job, le) (rate(req_duration_seconds_bucket[10m])))",
    "histogram_quantile(1.5, rate(req_duration_seconds_bucket[5m]))",
    "deriv(http_requests_total[1m])",
    "increase(http_requests_total[1m])",
    "changes(http_requests_total[5m])",
    "count(temperature > 20)",
    "max without () (temperature)",
    "sum by () (up)",
    "exp(temperature)",
    "absent_over_time(temperature[1m])",
    "present_over_time(nonexistent[5m])",
    "vector(time()) - 1",
    "pi()",
    "up offset 1h",
];

/// Two answers are equal: the same status, and for a success the same
/// result type and series with values within 1e-6 relative.
fn same(halite: &Json, prom: &Json) -> Result<(), String> {
    if halite["status"] != prom["status"] {
        return Err(format!("status: halite {halite}, prometheus {prom}"));
    }
    if prom["status"] == "error" {
        return match halite["errorType"] == prom["errorType"] {
            true => Ok(()),
            false => Err(format!("errorType: halite {halite}, prometheus {prom}")),
        };
    }
    let (h, p) = (&halite["data"], &prom["data"]);
    if h["resultType"] != p["resultType"] {
        return Err(format!("resultType: halite {h}, prometheus {p}"));
    }
    let value_close = |a: &Json, b: &Json| -> bool {
        let num = |v: &Json| v.as_str().and_then(|s| s.parse::<f64>().ok());
        let time = |v: &Json| v.as_f64();
        match (a.as_array(), b.as_array()) {
            (Some(a), Some(b)) if a.len() == 2 && b.len() == 2 => {
                let (ta, tb) = (time(&a[0]), time(&b[0]));
                let (va, vb) = (num(&a[1]), num(&b[1]));
                let times = matches!((ta, tb), (Some(x), Some(y)) if (x - y).abs() < 1e-6);
                let values = match (va, vb) {
                    (Some(x), Some(y)) if x.is_nan() && y.is_nan() => true,
                    (Some(x), Some(y)) if x == y => true,
                    (Some(x), Some(y)) => (x - y).abs() <= 1e-6 * x.abs().max(y.abs()).max(1e-9),
                    _ => a[1] == b[1],
                };
                times && values
            }
            _ => a == b,
        }
    };
    match p["resultType"].as_str() {
        Some("scalar") | Some("string") => match value_close(&h["result"], &p["result"]) {
            true => Ok(()),
            false => Err(format!("halite {h}, prometheus {p}")),
        },
        _ => {
            let keyed = |r: &Json| -> Vec<(String, Json)> {
                let mut v: Vec<(String, Json)> = r
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|s| (s["metric"].to_string(), s))
                    .collect();
                v.sort_by(|a, b| a.0.cmp(&b.0));
                v
            };
            let (hs, ps) = (keyed(&h["result"]), keyed(&p["result"]));
            let hk: Vec<&String> = hs.iter().map(|(k, _)| k).collect();
            let pk: Vec<&String> = ps.iter().map(|(k, _)| k).collect();
            if hk != pk {
                return Err(format!("series: halite {hk:?}, prometheus {pk:?}"));
            }
            for ((key, hv), (_, pv)) in hs.iter().zip(&ps) {
                if let Some(pvalue) = pv.get("value") {
                    if !value_close(&hv["value"], pvalue) {
                        return Err(format!(
                            "{key}: halite {}, prometheus {pvalue}",
                            hv["value"]
                        ));
                    }
                } else {
                    let a = hv["values"].as_array().cloned().unwrap_or_default();
                    let b = pv["values"].as_array().cloned().unwrap_or_default();
                    if a.len() != b.len() || a.iter().zip(&b).any(|(x, y)| !value_close(x, y)) {
                        return Err(format!(
                            "{key}: halite {} points {}, prometheus {} points {}",
                            a.len(),
                            hv["values"],
                            b.len(),
                            pv["values"]
                        ));
                    }
                }
            }
            Ok(())
        }
    }
}

fn get(addr: &str, path: &str) -> Json {
    let r = request(addr, "GET", path, None, b"").expect("request");
    serde_json::from_slice(&r.body)
        .unwrap_or_else(|_| panic!("{path}: status {} body {}", r.status, r.text()))
}

#[test]
fn promql_answers_as_prometheus_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(command(dir.path(), port, &[] as &[&str]), port);
    let prom = Prometheus::with_args(
        &dir.path().join("prometheus"),
        "global:\n  scrape_interval: 1h\n",
        &["--web.enable-remote-write-receiver"],
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let t0 = (now / 60_000) * 60_000 - 45 * 60_000;
    let body = write_request(&data(t0));
    for addr in [&halite.addr, &prom.addr] {
        let r = request_with(
            addr,
            "POST",
            "/api/v1/write",
            &[
                ("Content-Type", "application/x-protobuf"),
                ("Content-Encoding", "snappy"),
                ("X-Prometheus-Remote-Write-Version", "0.1.0"),
            ],
            &body,
        )
        .expect("remote write");
        assert!(
            r.status == 204 || r.status == 200,
            "{addr}: {} {}",
            r.status,
            r.text()
        );
    }

    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    // Inside the data, and past its end (the lookback's edge).
    let instants = [t0 + 30 * 60_000 + 7_000, t0 + SAMPLES * STEP_MS + 200_000];
    let ranges = [
        (t0 + 5 * 60_000, t0 + 42 * 60_000, "60"),
        (t0 + 1_000, t0 + 45 * 60_000, "37s"),
    ];
    let mut asked = 0;
    let mut differ = Vec::new();
    for q in QUERIES {
        let e = percent_encode(q);
        let mut paths: Vec<String> = instants
            .iter()
            .map(|t| format!("/api/v1/query?query={e}&time={}", secs(*t)))
            .collect();
        paths.extend(ranges.iter().map(|(s, end, step)| {
            format!(
                "/api/v1/query_range?query={e}&start={}&end={}&step={step}",
                secs(*s),
                secs(*end)
            )
        }));
        for path in paths {
            asked += 1;
            let h = get(&halite.addr, &format!("/prometheus{path}"));
            let p = get(&prom.addr, &path);
            if let Err(why) = same(&h, &p) {
                differ.push(format!("{path}\n    {q}\n    {why}"));
            }
        }
    }
    eprintln!(
        "promql: {asked} answers compared, {} equal, {} different",
        asked - differ.len(),
        differ.len()
    );
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

#[test]
fn grafana_save_and_test_and_metric_browser() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(command(dir.path(), port, &[] as &[&str]), port);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let t0 = (now / 60_000) * 60_000 - 45 * 60_000;
    let r = request_with(
        &halite.addr,
        "POST",
        "/api/v1/write",
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "snappy"),
        ],
        &write_request(&data(t0)),
    )
    .expect("write");
    assert_eq!(r.status, 204, "{}", r.text());
    // Grafana's "Save & test": `1+1`, then the build information.
    let one = get(&halite.addr, "/prometheus/api/v1/query?query=1%2B1");
    assert_eq!(one["status"], "success", "{one}");
    assert_eq!(one["data"]["resultType"], "scalar");
    assert_eq!(one["data"]["result"][1], "2");
    let build = get(&halite.addr, "/prometheus/api/v1/status/buildinfo");
    assert_eq!(build["data"]["version"], "2.42.0", "{build}");
    // The metric browser: names, labels, values, series by match[].
    let names = get(&halite.addr, "/prometheus/api/v1/label/__name__/values");
    assert_eq!(
        names["data"],
        serde_json::json!([
            "http_requests_total",
            "req_duration_seconds_bucket",
            "temperature",
            "up"
        ]),
        "{names}"
    );
    let labels = get(
        &halite.addr,
        &format!("/prometheus/api/v1/labels?match[]={}", percent_encode("up")),
    );
    assert_eq!(
        labels["data"],
        serde_json::json!(["__name__", "instance", "job"]),
        "{labels}"
    );
    let rooms = get(
        &halite.addr,
        &format!(
            "/prometheus/api/v1/label/room/values?match[]={}",
            percent_encode("temperature")
        ),
    );
    assert_eq!(rooms["data"], serde_json::json!(["hall", "kitchen"]));
    let series = get(
        &halite.addr,
        &format!(
            "/prometheus/api/v1/series?match[]={}",
            percent_encode("http_requests_total{instance=\"a\"}")
        ),
    );
    assert_eq!(series["data"].as_array().map(Vec::len), Some(2), "{series}");
    let missing = get(&halite.addr, "/prometheus/api/v1/series");
    assert_eq!(missing["errorType"], "bad_data", "{missing}");
    // A panel's POST form, as Grafana sends range queries.
    let form = format!(
        "query={}&start={}&end={}&step=60",
        percent_encode("sum(rate(http_requests_total[5m]))"),
        (t0 + 10 * 60_000) / 1000,
        (t0 + 20 * 60_000) / 1000
    );
    let r = request_with(
        &halite.addr,
        "POST",
        "/prometheus/api/v1/query_range",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        form.as_bytes(),
    )
    .expect("range");
    assert_eq!(r.status, 200, "{}", r.text());
    let body: Json = serde_json::from_slice(&r.body).expect("json");
    assert_eq!(
        body["data"]["result"][0]["values"].as_array().map(Vec::len),
        Some(11),
        "{body}"
    );
    // Too fine a step is Prometheus' own refusal.
    let fine = get(
        &halite.addr,
        "/prometheus/api/v1/query_range?query=up&start=0&end=100000&step=1",
    );
    assert_eq!(fine["errorType"], "bad_data", "{fine}");
}

/// A query nesting thousands of levels deep once aborted the whole
/// service (the tree is walked recursively): it is refused, and the
/// service answers on.
#[test]
fn deeply_nested_queries_are_refused_and_the_service_stays_up() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(command(dir.path(), port, &[] as &[&str]), port);
    let parens = format!("{}up{}", "(".repeat(20_000), ")".repeat(20_000));
    let chain = vec!["1"; 20_000].join("+");
    for q in [parens, chain] {
        let form = format!("query={}", percent_encode(&q));
        let r = request_with(
            &halite.addr,
            "POST",
            "/prometheus/api/v1/query",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            form.as_bytes(),
        )
        .expect("the service answers");
        assert_eq!(r.status, 400, "{}", r.text());
        let body: Json = serde_json::from_slice(&r.body).expect("json");
        assert_eq!(body["errorType"], "bad_data", "{body}");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains("nests")),
            "{body}"
        );
    }
    // Deep but within the limit: answered.
    let nested = format!("{}1{}", "(".repeat(400), ")".repeat(400));
    let r = get(
        &halite.addr,
        &format!("/prometheus/api/v1/query?query={}", percent_encode(&nested)),
    );
    assert_eq!(r["data"]["result"][1], "1", "{r}");
    let one = get(&halite.addr, "/prometheus/api/v1/query?query=1%2B1");
    assert_eq!(one["status"], "success");
}
