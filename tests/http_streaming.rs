//! Streamed answers over real HTTP: NDJSON and Apache Arrow IPC for raw
//! scans, logical queries and aggregates, checked against an oracle; the
//! Arrow answer also decoded by `pyarrow` (from the project venv, which
//! `make test` sets up) to the same rows; a client that goes away mid-answer
//! does not hurt the server.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, TimestampMillisecondType};
use arrow_array::{Array, RecordBatch};
use arrow_ipc::reader::StreamReader;
use common::http::{create_table, request, request_with};
use common::scenario::Scenario;
use common::server::{Server, stop};
use serde_json::{Value, json};

const HOSTS: u64 = 24;
const POINTS: u64 = 500;
const T0_MS: u64 = 1_700_000_000_000;
const NDJSON: &str = "application/x-ndjson";
const ARROW: &str = "application/vnd.apache.arrow.stream";

fn host(h: u64) -> String {
    format!("host_{h:03}")
}

fn value(h: u64, p: u64) -> f64 {
    ((h * 7919 + p * 104729) % 10_000) as f64 / 100.0
}

fn post(addr: &str, path: &str, accept: &str, body: &Value) -> common::http::Response {
    request_with(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json"), ("Accept", accept)],
        body.to_string().as_bytes(),
    )
    .expect("request")
}

/// (host, ts) -> value, ordered as the table orders its logical keys
/// (host ascending, newest first).
type Oracle = Vec<(String, u64, f64)>;

fn setup() -> (Scenario, Server, Oracle) {
    let sc = Scenario::new().build();
    let s = sc.start();
    let table = json!({
        "name": "cpu",
        "families": [{"name": "f"}],
        "key": {
            "fields": [
                {"name": "metric", "type": "string", "width": 8},
                {"name": "host", "type": "string", "width": 12},
                {"name": "ts", "type": "reversed_timestamp"}
            ],
            "salt": {"buckets": 8}
        }
    });
    create_table(&s.addr, &table);
    let mut oracle = BTreeMap::new();
    let mut body = String::new();
    for p in 0..POINTS {
        for h in 0..HOSTS {
            let ts = T0_MS + p * 10_000;
            let v = value(h, p);
            oracle.insert((host(h), u64::MAX - ts), v);
            body.push_str(&format!("cpu,host={} usage_user={v} {ts}\n", host(h)));
        }
    }
    let r = request(
        &s.addr,
        "POST",
        "/api/v1/write?table=cpu&precision=ms",
        Some("text/plain"),
        body.as_bytes(),
    )
    .expect("write");
    assert_eq!(r.status, 204, "{}", r.text());
    let oracle = oracle
        .into_iter()
        .map(|((h, rev), v)| (h, u64::MAX - rev, v))
        .collect();
    (sc, s, oracle)
}

/// NDJSON rows as (host, ts, value), and the trailer line.
fn ndjson_rows(body: &[u8]) -> (Oracle, Value) {
    let text = std::str::from_utf8(body).expect("utf-8");
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let trailer = lines.pop().expect("a trailer line");
    let rows = lines
        .iter()
        .map(|r| {
            (
                r["key"]["fields"]["host"]
                    .as_str()
                    .expect("host")
                    .to_string(),
                r["key"]["fields"]["ts"].as_u64().expect("ts"),
                r["cells"][0]["value"].as_f64().expect("value"),
            )
        })
        .collect();
    (rows, trailer)
}

fn arrow_batches(body: &[u8]) -> (Vec<RecordBatch>, Option<String>) {
    let reader = StreamReader::try_new(body, None).expect("an Arrow IPC stream");
    let token = reader
        .schema()
        .metadata()
        .get("halite:continuation")
        .cloned();
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .expect("every batch decodes");
    (batches, token)
}

/// Arrow cells as (host, ts, value); one cell per row in this table.
fn arrow_rows(batches: &[RecordBatch]) -> Oracle {
    let mut out = Vec::new();
    for b in batches {
        let hosts = b.column_by_name("host").expect("host").as_string::<i32>();
        let ts = b
            .column_by_name("ts")
            .expect("ts")
            .as_primitive::<TimestampMillisecondType>();
        let v = b
            .column_by_name("value_float")
            .expect("value_float")
            .as_primitive::<Float64Type>();
        let q = b
            .column_by_name("qualifier")
            .expect("qualifier")
            .as_string::<i32>();
        for i in 0..b.num_rows() {
            assert_eq!(q.value(i), "usage_user");
            assert!(!v.is_null(i));
            out.push((hosts.value(i).to_string(), ts.value(i) as u64, v.value(i)));
        }
    }
    out
}

#[test]
fn ndjson_streams_whole_answers_and_pages_with_a_trailer() {
    let (_sc, s, oracle) = setup();
    let a = &s.addr;
    // More rows than a JSON page holds (10,000): all of them, in order.
    assert!(oracle.len() > 10_000);
    let r = post(
        a,
        "/api/v1/query",
        NDJSON,
        &json!({"table": "cpu", "series": [["metric", "cpu"]]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some(NDJSON));
    let (rows, trailer) = ndjson_rows(&r.body);
    assert_eq!(trailer, json!({"rows": oracle.len(), "continuation": null}));
    assert!(rows == oracle, "streamed query differs from the oracle");

    // Pages by limit: the trailer's token continues exactly after the page.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut q = json!({"table": "cpu", "series": [["metric", "cpu"]], "limit": 2_500});
        if let Some(t) = &token {
            q["continuation"] = json!(t);
        }
        let (rows, trailer) = ndjson_rows(&post(a, "/api/v1/query", NDJSON, &q).body);
        pages += 1;
        seen.extend(rows);
        match trailer["continuation"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    assert_eq!(pages, oracle.len().div_ceil(2_500));
    assert!(seen == oracle, "NDJSON pages differ from the oracle");

    // A raw scan streams every row too (keys are salted: compare as sets).
    let r = post(a, "/api/v1/tables/cpu/scan", NDJSON, &json!({}));
    let (mut rows, trailer) = ndjson_rows(&r.body);
    assert_eq!(trailer["rows"], oracle.len());
    rows.sort_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
    assert!(rows == oracle, "streamed scan differs from the oracle");

    // Aggregates as NDJSON: one line per series.
    let r = post(
        a,
        "/api/v1/query",
        NDJSON,
        &json!({"table": "cpu", "series": [["metric", "cpu"]], "aggregate": {"functions": ["max"]}}),
    );
    let mut lines: Vec<Value> = r
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    // The last line is a trailer: how many, and no continuation (no limit).
    let trailer = lines.pop().expect("trailer");
    assert_eq!(trailer, json!({"aggregates": HOSTS, "continuation": null}));
    assert_eq!(lines.len(), HOSTS as usize);
    for l in &lines {
        let h = l["series"]["host"].as_str().expect("host");
        let max = oracle
            .iter()
            .filter(|(hh, _, _)| hh == h)
            .map(|x| x.2)
            .fold(f64::MIN, f64::max);
        assert_eq!(l["values"]["max"].as_f64(), Some(max));
    }

    // Errors found before the answer starts are ordinary JSON errors.
    let r = post(a, "/api/v1/query", NDJSON, &json!({"table": "nope"}));
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "not_found");
    let r = post(
        a,
        "/api/v1/query",
        NDJSON,
        &json!({"table": "cpu", "series": [["host", "x"]]}),
    );
    assert_eq!(r.status, 400);
    stop(s);
}

#[test]
fn arrow_answers_decode_to_the_oracle_with_arrow_and_pyarrow() {
    let (sc, s, oracle) = setup();
    let a = &s.addr;
    let q = json!({"table": "cpu", "series": [["metric", "cpu"]]});
    let r = post(a, "/api/v1/query", ARROW, &q);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some(ARROW));
    let (batches, token) = arrow_batches(&r.body);
    assert_eq!(token, None);
    assert!(batches.len() > 1, "a long answer comes in several batches");
    let schema = batches[0].schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "row",
            "bucket",
            "metric",
            "host",
            "ts",
            "family",
            "qualifier",
            "timestamp",
            "value_float",
            "value_int",
            "value_uint",
            "value_bool",
            "value_string",
            "value_bytes"
        ]
    );
    assert!(
        arrow_rows(&batches) == oracle,
        "Arrow rows differ from the oracle"
    );

    // The same bytes through pyarrow.
    let file = sc.dir().join("answer.arrows");
    std::fs::write(&file, &r.body).expect("write answer");
    let script = r#"
import json, sys
import pyarrow as pa
t = pa.ipc.open_stream(open(sys.argv[1], "rb")).read_all()
ts = [int(x.timestamp() * 1000) for x in t.column("ts").to_pylist()]
print(json.dumps([[h, ms, v] for h, ms, v in zip(t.column("host").to_pylist(), ts, t.column("value_float").to_pylist())]))
"#;
    let out = std::process::Command::new(python())
        .args(["-c", script])
        .arg(&file)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "pyarrow failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let py: Vec<(String, u64, f64)> = serde_json::from_slice(&out.stdout).expect("python's JSON");
    assert!(py == oracle, "pyarrow read different rows");

    // A limit makes a page; its token (schema metadata) continues it.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut q = json!({"table": "cpu", "series": [["metric", "cpu"]], "limit": 4_000});
        if let Some(t) = &token {
            q["continuation"] = json!(t);
        }
        let (batches, next) = arrow_batches(&post(a, "/api/v1/query", ARROW, &q).body);
        let rows = arrow_rows(&batches);
        assert!(rows.len() <= 4_000);
        seen.extend(rows);
        match next {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert!(seen == oracle, "Arrow pages differ from the oracle");

    // Raw scan as Arrow: every row.
    let r = post(a, "/api/v1/tables/cpu/scan", ARROW, &json!({}));
    let (batches, _) = arrow_batches(&r.body);
    let mut rows = arrow_rows(&batches);
    rows.sort_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
    assert!(rows == oracle, "Arrow scan differs from the oracle");

    // Aggregates as Arrow: one row per series.
    let r = post(
        a,
        "/api/v1/query",
        ARROW,
        &json!({"table": "cpu", "series": [["metric", "cpu"]], "aggregate": {"functions": ["max", "count"]}}),
    );
    let (batches, _) = arrow_batches(&r.body);
    let b = &batches[0];
    assert_eq!(b.num_rows(), HOSTS as usize);
    let hosts = b.column_by_name("host").expect("host").as_string::<i32>();
    let max = b
        .column_by_name("max")
        .expect("max")
        .as_primitive::<Float64Type>();
    let count = b
        .column_by_name("count")
        .expect("count")
        .as_primitive::<Float64Type>();
    for i in 0..b.num_rows() {
        let pts: Vec<f64> = oracle
            .iter()
            .filter(|(h, _, _)| h == hosts.value(i))
            .map(|x| x.2)
            .collect();
        assert_eq!(count.value(i), pts.len() as f64);
        assert_eq!(max.value(i), pts.iter().cloned().fold(f64::MIN, f64::max));
    }
    stop(s);
}

/// The project venv's Python (`make venv`), or `HALITE_PYTHON`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("HALITE_PYTHON") {
        return p.into();
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        venv.exists(),
        "no Python with pyarrow at {}: run `make venv` (make test does) or set HALITE_PYTHON",
        venv.display()
    );
    venv
}

#[test]
fn a_client_that_goes_away_mid_answer_does_not_hurt_the_server() {
    let (_sc, s, oracle) = setup();
    for _ in 0..5 {
        let mut c = TcpStream::connect(&s.addr).expect("connect");
        let body = json!({"table": "cpu"}).to_string();
        write!(
            c,
            "POST /api/v1/query HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {NDJSON}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("send");
        let mut first = [0u8; 4096];
        let n = c.read(&mut first).expect("read the start of the answer");
        assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
        drop(c);
    }
    // The server still answers, whole.
    let r = post(&s.addr, "/api/v1/query", NDJSON, &json!({"table": "cpu"}));
    let (rows, trailer) = ndjson_rows(&r.body);
    assert_eq!(trailer["rows"], oracle.len());
    assert!(rows == oracle);
    stop(s);
}
