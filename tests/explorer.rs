//! The explorer page (`GET /`) in a real browser: headless chromium,
//! driven through chromedriver, against `halite serve` holding known
//! points. The chart must show exactly the aggregates the query API
//! answers, and those must be the averages of the points written (worked
//! out here, not asked of halite); the rows under it must be the newest
//! points; a table of open tag sets (InfluxDB line protocol) must chart
//! through InfluxQL; Draw must end the range at points that arrived after
//! the listing; a table of many Prometheus metrics must be refused with
//! nothing stale left on the page; the status view must count the rows just written and
//! see the rate of the ones written while it watches. Screenshots of both
//! views are left in `target/explorer/`.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use common::http::{create_table, request};
use common::scenario::Scenario;
use common::server::stop;
use common::webdriver::Browser;
use serde_json::{Value, json};

const HOSTS: u64 = 3;
const POINTS: u64 = 720;
const STEP_MS: u64 = 10_000;
const BASE_MS: u64 = 1_700_000_000_000;

fn usage_user(host: u64, i: u64) -> f64 {
    ((i * 7 + host * 13) % 1000) as f64 / 10.0
}

fn usage_system(host: u64, i: u64) -> f64 {
    (i % 50) as f64 + host as f64
}

fn lines(hosts: std::ops::Range<u64>, points: std::ops::Range<u64>, base_ms: u64) -> String {
    let mut body = String::new();
    for i in points {
        for h in hosts.clone() {
            body.push_str(&format!(
                "cpu,host=host_{h} usage_user={},usage_system={} {}\n",
                usage_user(h, i),
                usage_system(h, i),
                base_ms + i * STEP_MS
            ));
        }
    }
    body
}

fn post(addr: &str, path: &str, content_type: &str, body: &[u8]) -> common::http::Response {
    request(addr, "POST", path, Some(content_type), body).expect("request")
}

fn artefact(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("..")
        .join("explorer")
        .join(name)
}

#[test]
fn explorer_charts_what_the_query_api_answers_in_a_real_browser() {
    let sc = Scenario::new().build();
    let srv = sc.start();
    let addr = srv.addr.clone();
    create_table(
        &addr,
        &json!({
            "name": "metrics:cpu",
            "families": [{"name": "f", "data_block_encoding": "TIME_SERIES", "compression": "SNAPPY"}],
            "key": {
                "fields": [
                    {"name": "metric", "type": "string", "width": 16},
                    {"name": "host", "type": "string", "width": 16},
                    {"name": "ts", "type": "reversed_timestamp"}
                ],
                "salt": {"buckets": 4, "width": 1, "from": "series"}
            }
        }),
    );
    // The older half in store files, the newer in the MemStore: the page
    // reads both.
    for (half, flush) in [(0..POINTS / 2, true), (POINTS / 2..POINTS, false)] {
        let w = post(
            &addr,
            "/api/v1/write?table=metrics:cpu&precision=ms",
            "text/plain",
            lines(0..HOSTS, half, BASE_MS).as_bytes(),
        );
        assert_eq!(w.status, 204, "{}", w.text());
        if flush {
            let f = post(
                &addr,
                "/api/v1/tables/metrics:cpu/flush",
                "application/json",
                b"",
            );
            assert!(f.status < 300, "{}", f.text());
        }
    }

    let browser = Browser::start(1280, 1000);
    browser.goto(&format!("http://{addr}/"));
    // A first visit charts the first table by itself.
    let first = browser.wait_for(
        "const e = window.explorer; return e.error ? {error: e.error} \
         : (e.drawn >= 1 && e.chart) ? {table: e.table.name, points: e.chart.windows_ms.length} : null",
        Duration::from_secs(20),
        "a first chart without a click",
    );
    assert_eq!(first["table"], json!("metrics:cpu"), "{first}");
    assert!(first["points"].as_u64().is_some_and(|n| n > 0), "{first}");
    // Picking the table in the list draws it again and marks it.
    browser.eval("window.explorer.drawn = 0; return true");
    browser.click("#tables a[data-table=\"metrics:cpu\"]");
    let listed = browser.wait_for(
        "const e = window.explorer; return e.listing && e.drawn >= 1 \
         && document.querySelector('#tables a.on').dataset.table === 'metrics:cpu' \
         ? e.listing.series.map(s => s.key.host) : null",
        Duration::from_secs(20),
        "the series of metrics:cpu after a click",
    );
    assert_eq!(listed, json!(["host_0", "host_1", "host_2"]));

    // Then one series and two fields over 6 hours by the page's own link.
    browser.eval(
        "location.hash = new URLSearchParams({table: 'metrics:cpu', \
         series: 'metric=cpu, host=host_1', fields: 'usage_system,usage_user', \
         range: '21600000', fn: 'avg'}).toString(); window.explorer.drawn = 0; return true",
    );
    browser.wait_for(
        "const e = window.explorer; return (e.drawn >= 1 && e.request && e.rows \
         && e.request.series[1][1] === 'host_1') || e.error",
        Duration::from_secs(20),
        "the chart of host_1",
    );
    let state = browser.eval(
        "return {error: window.explorer.error, request: window.explorer.request, \
         chart: window.explorer.chart, rows: window.explorer.rows, \
         canvas: document.querySelector('#chart canvas') !== null, \
         curl: document.getElementById('curl').textContent}",
    );
    assert!(
        state["error"].is_null(),
        "the page failed: {}",
        state["error"]
    );
    assert_eq!(state["canvas"], json!(true), "no chart canvas");
    let request_sent = &state["request"];
    let newest = BASE_MS + (POINTS - 1) * STEP_MS;
    assert_eq!(request_sent["end_ms"], json!(newest + 1));
    assert_eq!(request_sent["start_ms"], json!(newest + 1 - 21_600_000));
    assert!(
        state["curl"]
            .as_str()
            .is_some_and(|c| c.contains("/api/v1/query") && c.contains("host_1")),
        "the request is shown as curl: {}",
        state["curl"]
    );

    // The same request through the API, and the averages worked out here.
    let downsample = request_sent["aggregate"]["downsample_ms"]
        .as_u64()
        .expect("downsample");
    assert!(downsample > 1, "one window per pixel of a 6-hour range");
    let answer = post(
        &addr,
        "/api/v1/query",
        "application/json",
        request_sent.to_string().as_bytes(),
    )
    .json();
    let mut expected: BTreeMap<(String, u64), (f64, u64)> = BTreeMap::new();
    for i in 0..POINTS {
        let ts = BASE_MS + i * STEP_MS;
        let w = ts - ts % downsample;
        for (field, v) in [
            ("usage_system", usage_system(1, i)),
            ("usage_user", usage_user(1, i)),
        ] {
            let e = expected.entry((field.to_string(), w)).or_default();
            e.0 += v;
            e.1 += 1;
        }
    }
    let aggregates = answer["aggregates"].as_array().expect("aggregates");
    assert_eq!(
        aggregates.len(),
        expected.len(),
        "one aggregate per field and window"
    );
    let chart = &state["chart"];
    let windows: Vec<u64> = chart["windows_ms"]
        .as_array()
        .expect("windows")
        .iter()
        .map(|w| w.as_u64().expect("window"))
        .collect();
    assert_eq!(
        windows.len(),
        expected.len() / 2,
        "one chart point per window"
    );
    for a in aggregates {
        let field = a["field"].as_str().expect("field");
        let w = a["window_ms"].as_u64().expect("window");
        let avg = a["values"]["avg"].as_f64().expect("avg");
        let (s, n) = expected[&(field.to_string(), w)];
        assert!(
            (avg - s / n as f64).abs() < 1e-9,
            "{field} at {w}: the API says {avg}, the points {}",
            s / n as f64
        );
        let at = windows.binary_search(&w).expect("the window is charted");
        let drawn = chart["values"][field][at].as_f64().expect("charted value");
        assert_eq!(
            drawn, avg,
            "{field} at {w}: the chart draws what the API answered"
        );
    }

    // The rows under the chart: the range's first 100 in key order, the
    // newest first (reversed timestamps), with both fields.
    let rows = &state["rows"];
    assert_eq!(
        rows["columns"],
        json!(["time", "usage_system", "usage_user"])
    );
    let first = &rows["rows"][0];
    assert_eq!(first[0], json!(newest));
    assert_eq!(first[1].as_f64(), Some(usage_system(1, POINTS - 1)));
    assert_eq!(first[2].as_f64(), Some(usage_user(1, POINTS - 1)));
    assert_eq!(rows["rows"].as_array().map(Vec::len), Some(100));
    browser.screenshot(&artefact("data.png"));

    // Points that arrive after the series was listed: Draw ends the range
    // at the new newest point (it once kept the one from the listing).
    let later = post(
        &addr,
        "/api/v1/write?table=metrics:cpu&precision=ms",
        "text/plain",
        lines(1..2, POINTS..POINTS + 60, BASE_MS).as_bytes(),
    );
    assert_eq!(later.status, 204, "{}", later.text());
    browser.eval("window.explorer.drawn = 0; return true");
    browser.click("#draw");
    let end = browser.wait_for(
        "const e = window.explorer; return e.drawn >= 1 && e.request ? e.request.end_ms : null",
        Duration::from_secs(20),
        "a draw after more points arrived",
    );
    assert_eq!(end, json!(BASE_MS + (POINTS + 59) * STEP_MS + 1));

    // A measurement written by an InfluxDB client charts through InfluxQL.
    let db = post(
        &addr,
        "/query",
        "application/x-www-form-urlencoded",
        b"q=CREATE+DATABASE+telegraf",
    );
    assert_eq!(db.status, 200, "{}", db.text());
    let mut influx_lines = String::new();
    for i in 0..60u64 {
        influx_lines.push_str(&format!(
            "mem,host=web1 used_percent={} {}\n",
            i as f64 / 2.0,
            (BASE_MS + i * 60_000) * 1_000_000
        ));
    }
    let w = post(
        &addr,
        "/write?db=telegraf",
        "text/plain",
        influx_lines.as_bytes(),
    );
    assert_eq!(w.status, 204, "{}", w.text());
    browser.goto(&format!(
        "http://{addr}/#table=telegraf%3Amem&fields=used_percent&range=3600000&fn=max"
    ));
    let influx_state = browser.wait_for(
        "const e = window.explorer; return (e.table && e.table.name === 'telegraf:mem' && e.chart && e.rows) \
         ? {chart: e.chart, request: e.request, rows: e.rows} : (e.error ? {error: e.error} : null)",
        Duration::from_secs(20),
        "the InfluxDB measurement's chart",
    );
    assert!(influx_state["error"].is_null(), "{}", influx_state["error"]);
    let q = influx_state["request"]["q"]
        .as_str()
        .expect("InfluxQL")
        .to_string();
    assert!(q.starts_with("SELECT max(\"used_percent\")"), "{q}");
    let values: Vec<f64> = influx_state["chart"]["values"]["used_percent"]
        .as_array()
        .expect("values")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    // The hour ending at the newest point holds minutes 0..59, each its
    // own window's max (windows are a few seconds wide).
    assert_eq!(values.len(), 60, "{q}");
    assert_eq!(values.last().copied(), Some(29.5));
    assert_eq!(influx_state["rows"]["rows"][0][1].as_f64(), Some(29.5));

    // A table Prometheus writes holds many metrics: the page says so, and
    // nothing of the measurement charted before stays on it.
    let samples = halite::ingest::remote_write::encode_write_request(&[
        halite::ingest::remote_write::Series {
            labels: vec![
                ("__name__".into(), "load".into()),
                ("job".into(), "a".into()),
            ],
            samples: vec![(1.5, BASE_MS as i64)],
        },
        halite::ingest::remote_write::Series {
            labels: vec![("__name__".into(), "up".into()), ("job".into(), "a".into())],
            samples: vec![(1.0, BASE_MS as i64)],
        },
    ]);
    let w = post(
        &addr,
        "/api/v1/prom/write?db=prom",
        "application/x-protobuf",
        &samples,
    );
    assert_eq!(w.status, 204, "{}", w.text());
    browser.goto(&format!("http://{addr}/#table=prom%3Asamples"));
    let refused = browser.wait_for(
        "const e = window.explorer; return e.table && e.table.name === 'prom:samples' && e.error \
         ? {error: e.error, chart: e.chart, canvas: document.querySelector('#chart canvas') !== null, \
            rows: !document.getElementById('rows').hidden, request: !document.getElementById('request').hidden} \
         : null",
        Duration::from_secs(20),
        "the page's word on a table of many metrics",
    );
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("PromQL")),
        "{refused}"
    );
    assert_eq!(
        refused,
        json!({"error": refused["error"], "chart": null, "canvas": false, "rows": false, "request": false}),
        "nothing of telegraf:mem's chart stays"
    );

    // The status view counts what was written, and sees a new write's rate.
    browser.goto(&format!("http://{addr}/#view=status"));
    let rows_written = browser.wait_for(
        "const s = window.explorer.status; return s ? s.rows_written : null",
        Duration::from_secs(20),
        "the status view's first refresh",
    );
    assert_eq!(
        rows_written.as_f64(),
        Some((HOSTS * POINTS + 60 + 60 + 2) as f64),
        "rows written, as /metrics counts them"
    );
    let more = post(
        &addr,
        "/api/v1/write?table=metrics:cpu&precision=ms",
        "text/plain",
        lines(0..HOSTS, POINTS..POINTS + 100, BASE_MS).as_bytes(),
    );
    assert_eq!(more.status, 204, "{}", more.text());
    let rate = browser.wait_for(
        "const s = window.explorer.status; return s && s.rows_per_s > 0 ? s.rows_per_s : null",
        Duration::from_secs(20),
        "a rate for the rows written while the status view watched",
    );
    assert!(rate.as_f64().is_some_and(|r| r > 0.0));
    let card = browser.eval(
        "return document.querySelector('[data-card=\"rows written / s\"] strong').textContent",
    );
    assert_ne!(card, json!("0"), "the card shows the rate");
    browser.screenshot(&artefact("status.png"));

    drop(browser);
    stop(srv);
}

/// A server that checks tokens: the page asks for one, charts with it,
/// and shows its requests naming the token by variable only.
#[test]
fn explorer_asks_for_a_token_when_the_server_checks_them() {
    const BOOT: &str = "bootstrap-secret-for-the-explorer-0123";
    let sc = Scenario::new()
        .set("auth.enabled=true")
        .env("HALITE__AUTH__BOOTSTRAP_TOKEN", BOOT)
        .build();
    let srv = sc.start();
    let addr = srv.addr.clone();
    let boot = format!("Bearer {BOOT}");
    let send = |method: &str, path: &str, ct: &str, body: &[u8]| {
        common::http::request_with(
            &addr,
            method,
            path,
            &[("Authorization", boot.as_str()), ("Content-Type", ct)],
            body,
        )
        .expect("request")
    };
    let spec = json!({
        "name": "cpu",
        "families": [{"name": "f", "data_block_encoding": "TIME_SERIES"}],
        "key": {
            "fields": [
                {"name": "metric", "type": "string", "width": 16},
                {"name": "host", "type": "string", "width": 16},
                {"name": "ts", "type": "reversed_timestamp"}
            ],
            "salt": {"buckets": 2}
        }
    });
    let r = send(
        "POST",
        "/api/v1/tables",
        "application/json",
        spec.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let w = send(
        "POST",
        "/api/v1/write?table=cpu&precision=ms",
        "text/plain",
        lines(0..HOSTS, 0..60, BASE_MS).as_bytes(),
    );
    assert_eq!(w.status, 204, "{}", w.text());
    let made = send(
        "POST",
        "/api/v1/tokens",
        "application/json",
        br#"{"name": "explorer", "scopes": ["read"]}"#,
    );
    assert_eq!(made.status, 201, "{}", made.text());
    let token = made.json()["token"].as_str().expect("token").to_string();

    let browser = Browser::start(1280, 900);
    browser.goto(&format!("http://{addr}/"));
    let asked = browser.wait_for(
        "const e = window.explorer; return e.error && !document.getElementById('token-form').hidden \
         ? e.error : null",
        Duration::from_secs(20),
        "the page asking for a token",
    );
    assert!(
        asked.as_str().is_some_and(|m| m.contains("token")),
        "{asked}"
    );
    browser.eval(&format!(
        "document.getElementById('token').value = {}; return true",
        json!(token)
    ));
    browser.click("#use-token");
    let drawn = browser.wait_for(
        "const e = window.explorer; return e.error ? {error: e.error} \
         : (e.drawn >= 1 && e.chart) ? {table: e.table.name, \
            curl: document.getElementById('curl').textContent, \
            form: document.getElementById('token-form').hidden} : null",
        Duration::from_secs(20),
        "a chart once the token is given",
    );
    assert_eq!(drawn["table"], json!("default:cpu"), "{drawn}");
    assert_eq!(drawn["form"], json!(true), "{drawn}");
    let curl = drawn["curl"].as_str().unwrap_or("");
    assert!(
        curl.contains("$HALITE_TOKEN") && !curl.contains(&token),
        "{curl}"
    );
    stop(srv);
}

/// Serves `html` to every request on a free loopback port, until the
/// test ends: a page of another site, for the browser to open.
fn serve_page(html: String) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the page's server");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(&stream);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{html}",
                html.len()
            );
            let _ = (&stream).write_all(answer.as_bytes());
        }
    });
    port
}

fn browser_refusals(addr: &str, reason: &str) -> f64 {
    let text = request(addr, "GET", "/metrics", None, b"")
        .expect("metrics")
        .text();
    text.lines()
        .filter(|l| {
            l.starts_with("halite_http_browser_refusals_total")
                && l.contains(&format!("reason=\"{reason}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A page of another site (another origin: `localhost` on another port,
/// and `127.0.0.1` on another port, which is the same site) makes its
/// visitor's browser send every kind of request that changes data to a
/// loopback server without tokens, in the "simple" forms a page needs no
/// permission for (`text/plain` POSTs, a GET of `/query`). Each is refused
/// (and counted, so the browser did send them) and nothing changes; a
/// page reached under a name rebound to 127.0.0.1 is not served; the
/// server's own page still is. Before the browser guard every one wrote.
#[test]
fn a_page_of_another_site_cannot_write_or_delete_through_a_browser() {
    let sc = Scenario::new().build();
    let srv = sc.start();
    let addr = srv.addr.clone();
    create_table(
        &addr,
        &json!({
            "name": "metrics:cpu",
            "families": [{"name": "f"}],
            "key": {
                "fields": [
                    {"name": "metric", "type": "string", "width": 16},
                    {"name": "host", "type": "string", "width": 16},
                    {"name": "ts", "type": "reversed_timestamp"}
                ],
            }
        }),
    );
    let w = post(
        &addr,
        "/api/v1/write?table=metrics:cpu&precision=ms",
        "text/plain",
        lines(0..1, 0..5, BASE_MS).as_bytes(),
    );
    assert_eq!(w.status, 204, "{}", w.text());
    let q = post(
        &addr,
        "/query",
        "application/x-www-form-urlencoded",
        b"q=CREATE+DATABASE+site",
    );
    assert_eq!(q.status, 200, "{}", q.text());

    let attacks = |target: &str| {
        format!(
            r#"<!doctype html><title>loading</title><script>
const base = {target:?};
const post = (path, body) => fetch(base + path, {{method: 'POST', mode: 'no-cors',
    headers: {{'Content-Type': 'text/plain'}}, body}});
Promise.allSettled([
  post('/api/v1/write?table=metrics:cpu&precision=ms', 'cpu,host=evil usage_user=666 {BASE_MS}'),
  post('/write?db=site', 'cpu,host=evil v=666'),
  post('/api/v1/tables/metrics:cpu/delete',
       JSON.stringify({{series: [['metric', 'cpu'], ['host', 'host_0']]}})),
  post('/api/v1/namespaces', JSON.stringify({{name: 'evil'}})),
  fetch(base + '/query?q=CREATE+DATABASE+evil_db', {{mode: 'no-cors'}}),
]).then(() => {{ document.title = 'sent'; }});
</script>"#
        )
    };
    let browser = Browser::start_with(
        1024,
        768,
        &["--host-resolver-rules=MAP rebound.test 127.0.0.1".to_string()],
    );
    let target = format!("http://{addr}");
    for (page_host, sent) in [("localhost", 5.0), ("127.0.0.1", 10.0)] {
        let port = serve_page(attacks(&target));
        browser.goto(&format!("http://{page_host}:{port}/"));
        browser.wait_for(
            "return document.title === 'sent'",
            Duration::from_secs(20),
            "the page's requests sent",
        );
        // Every request reached the server and was refused there (not
        // stopped by the browser, which would prove nothing).
        assert_eq!(browser_refusals(&addr, "origin"), sent, "from {page_host}");
    }
    let count = |host: &str| {
        let r = post(
            &addr,
            "/api/v1/query",
            "application/json",
            json!({
                "table": "metrics:cpu",
                "series": [["metric", "cpu"], ["host", host]],
                "fields": ["usage_user"],
                "aggregate": {"functions": ["count"]}
            })
            .to_string()
            .as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["aggregates"]
            .as_array()
            .expect("aggregates")
            .iter()
            .map(|x| x["values"]["count"].as_f64().unwrap_or(0.0) as u64)
            .sum::<u64>()
    };
    assert_eq!(count("host_0"), 5, "the series the page deleted");
    assert_eq!(count("evil"), 0, "the point the page wrote");
    let namespaces = request(&addr, "GET", "/api/v1/namespaces", None, b"")
        .expect("namespaces")
        .text();
    assert!(!namespaces.contains("evil"), "{namespaces}");
    let influx = post(
        &addr,
        "/query?db=site",
        "application/x-www-form-urlencoded",
        b"q=SELECT+*+FROM+cpu",
    )
    .text();
    assert!(!influx.contains("666"), "{influx}");

    // DNS rebinding: the name resolves to the server, the page would be
    // same-origin with it and could read its answers.
    browser.goto(&format!("http://rebound.test:{}/", sc.port));
    let text = browser.wait_for(
        "return document.body && document.body.innerText",
        Duration::from_secs(10),
        "the answer under a rebound name",
    );
    assert!(
        text.as_str().is_some_and(|t| t.contains("forbidden_host")),
        "{text}"
    );
    // The page, and the icon the browser asks for after it.
    assert!(browser_refusals(&addr, "host") >= 1.0);
    // The server's own page, by address and by localhost.
    for host in [addr.clone(), format!("localhost:{}", sc.port)] {
        browser.goto(&format!("http://{host}/"));
        browser.wait_for(
            "const e = window.explorer; return e && e.tables && e.tables.length > 0",
            Duration::from_secs(20),
            "the explorer listing the tables",
        );
    }
    drop(browser);
    stop(srv);
}
