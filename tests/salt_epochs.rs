//! Salt epochs over real HTTP: a table's bucket count changes from a time
//! on while points stream in, and every query answers as it does on a
//! table that had the new count all along; a bad change is refused with
//! what to do.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::http::{create_table, request};
use common::scenario::Scenario;
use serde_json::{Value, json};

const HOSTS: u64 = 40;
const STEPS: u64 = 200;
const STEP_MS: u64 = 1_000;

fn post(addr: &str, method: &str, path: &str, body: &Value) -> common::http::Response {
    request(
        addr,
        method,
        path,
        Some("application/json"),
        body.to_string().as_bytes(),
    )
    .expect("request")
}

fn table(name: &str, buckets: u32) -> Value {
    json!({
        "name": name,
        "families": [{"name": "f"}],
        "key": {
            "fields": [
                {"name": "metric", "type": "string", "width": 8},
                {"name": "host", "type": "string", "width": 8},
                {"name": "ts", "type": "reversed_timestamp"}
            ],
            "salt": {"buckets": buckets}
        }
    })
}

fn lines(t0: u64, step: u64) -> String {
    let ts = t0 + step * STEP_MS;
    (0..HOSTS)
        .map(|h| {
            format!(
                "cpu,host=h{h:02} user={}.25,idle={}i {ts}\n",
                (h * 7 + step * 3) % 100,
                (h + step) % 50
            )
        })
        .collect()
}

/// An answer without what depends on the bucket count: the salted row
/// key, the bucket, how many buckets were scanned.
fn without_salt(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "row" | "bucket" | "buckets_scanned"))
                .map(|(k, v)| (k.clone(), without_salt(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_salt).collect()),
        other => other.clone(),
    }
}

/// Every page of a query, its rows (or aggregates) in one list.
fn all_pages(addr: &str, q: &Value) -> Value {
    let mut q = q.clone();
    let mut out = Vec::new();
    loop {
        let r = post(addr, "POST", "/api/v1/query", &q);
        assert_eq!(r.status, 200, "{q}: {}", r.text());
        let a: Value = r.json();
        for list in ["rows", "aggregates"] {
            if let Some(items) = a[list].as_array() {
                out.extend(items.iter().map(without_salt));
            }
        }
        match a["continuation"].as_str() {
            Some(token) => q["continuation"] = json!(token),
            None => return Value::Array(out),
        }
    }
}

#[test]
fn a_bucket_count_changed_mid_ingest_answers_as_if_it_had_always_been() {
    let sc = Scenario::new().build();
    let s = sc.start();
    let a = s.addr.clone();
    create_table(&a, &table("grown", 8));
    create_table(&a, &table("always", 16));
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    // Points stamped ahead of the clock, so the epoch (which starts ahead
    // of it) can start in the middle of them.
    let t0 = now_ms + 600_000;
    let from = t0 + STEPS / 2 * STEP_MS;

    let written = Arc::new(AtomicU64::new(0));
    let changed = Arc::new(AtomicBool::new(false));
    let writer = {
        let (a, written, changed) = (a.clone(), written.clone(), changed.clone());
        std::thread::spawn(move || {
            for step in 0..STEPS {
                if t0 + step * STEP_MS >= from {
                    // Points of the new epoch wait for the change.
                    while !changed.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                let body = lines(t0, step);
                for t in ["grown", "always"] {
                    let r = request(
                        &a,
                        "POST",
                        &format!("/api/v1/write?table={t}&precision=ms"),
                        Some("text/plain"),
                        body.as_bytes(),
                    )
                    .expect("write");
                    assert_eq!(r.status, 204, "{t} step {step}: {}", r.text());
                }
                written.store(step + 1, Ordering::SeqCst);
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while written.load(Ordering::SeqCst) < STEPS / 5 {
        assert!(Instant::now() < deadline, "the writer is stuck");
        std::thread::sleep(Duration::from_millis(5));
    }

    // Refused: a time the clock has passed, a table without salt fields
    // to change, a count the salt width cannot hold.
    let r = post(
        &a,
        "PATCH",
        "/api/v1/tables/grown",
        &json!({"salt": {"buckets": 16, "from_ms": now_ms - 1}}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("ahead of the server's clock"),
        "{}",
        r.text()
    );
    let r = post(
        &a,
        "PATCH",
        "/api/v1/tables/grown",
        &json!({"salt": {"buckets": 300, "from_ms": from}}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("2..=256"), "{}", r.text());

    // The change, while the writer goes on writing.
    let r = post(
        &a,
        "PATCH",
        "/api/v1/tables/grown",
        &json!({"salt": {"buckets": 16, "from_ms": from}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let desc: Value = r.json();
    assert_eq!(
        desc["key"]["salt"]["epochs"],
        json!([{"from": from, "buckets": 16}])
    );
    assert_eq!(
        desc["regions"].as_array().map(Vec::len),
        Some(16),
        "a region per bucket of the new count: {desc}"
    );
    changed.store(true, Ordering::SeqCst);
    writer.join().expect("writer");
    // A second epoch must start after the first.
    let r = post(
        &a,
        "PATCH",
        "/api/v1/tables/grown",
        &json!({"salt": {"buckets": 12, "from_ms": from - 1}}),
    );
    assert_eq!(r.status, 400, "{}", r.text());

    let tail_start = from + 37 * STEP_MS;
    let queries = [
        // One series across the change, before it, after it.
        json!({"series": [["metric", "cpu"], ["host", "h07"]]}),
        json!({"series": [["metric", "cpu"], ["host", "h13"]], "start_ms": t0, "end_ms": from}),
        json!({"series": [["metric", "cpu"], ["host", "h21"]], "start_ms": from, "end_ms": u64::MAX / 2}),
        json!({"series": [["metric", "cpu"], ["host", "h33"]], "start_ms": from - 5 * STEP_MS, "end_ms": from + 5 * STEP_MS, "reverse": true}),
        // Every series, paged, and a window of them.
        json!({"series": [["metric", "cpu"]], "limit": 700}),
        json!({"series": [["metric", "cpu"]], "start_ms": from - 3 * STEP_MS, "end_ms": tail_start, "fields": ["user"]}),
        // Aggregates: whole series, downsampled across the change, one
        // series, a value filter.
        json!({"series": [["metric", "cpu"]], "aggregate": {"functions": ["count", "sum", "min", "max", "first", "last"]}}),
        json!({"series": [["metric", "cpu"]], "aggregate": {"functions": ["avg", "count"], "downsample_ms": 7_000}, "start_ms": t0 + 61 * STEP_MS, "end_ms": from + 29 * STEP_MS}),
        json!({"series": [["metric", "cpu"], ["host", "h02"]], "aggregate": {"functions": ["count", "last"], "downsample_ms": 30_000}}),
        json!({"series": [["metric", "cpu"]], "value_filter": {"op": ">", "value": 90, "field": "user"}}),
    ];
    for q in queries {
        let mut grown = q.clone();
        grown["table"] = json!("grown");
        let mut always = q.clone();
        always["table"] = json!("always");
        let (g, w) = (all_pages(&a, &grown), all_pages(&a, &always));
        assert!(
            g.as_array().is_some_and(|g| !g.is_empty()),
            "{q} answers something"
        );
        assert_eq!(g, w, "{q}");
    }
    // Every point once: 40 hosts × 200 steps.
    let count = all_pages(
        &a,
        &json!({"table": "grown", "series": [["metric", "cpu"]], "aggregate": {"functions": ["count"]}}),
    );
    let total: f64 = count
        .as_array()
        .expect("aggregates")
        .iter()
        .filter(|x| x["field"] == "user")
        .map(|x| x["values"]["count"].as_f64().expect("count"))
        .sum();
    assert_eq!(total, (HOSTS * STEPS) as f64);

    // A point already stored at or after the asked start would stay under
    // the old count: refused, and the table takes writes as before.
    create_table(&a, &table("early", 4));
    let future = now_ms + 3_600_000;
    let write = |ts: u64| {
        request(
            &a,
            "POST",
            "/api/v1/write?table=early&precision=ms",
            Some("text/plain"),
            format!("cpu,host=h01 user=1.5,idle=3i {ts}\n").as_bytes(),
        )
        .expect("write")
    };
    assert_eq!(write(future).status, 204);
    let r = post(
        &a,
        "PATCH",
        "/api/v1/tables/early",
        &json!({"salt": {"buckets": 8, "from_ms": future - 60_000}}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("already holds a point stamped"),
        "{}",
        r.text()
    );
    assert_eq!(write(future + 1).status, 204, "the table reopened");
    let r = post(
        &a,
        "PATCH",
        "/api/v1/tables/early",
        &json!({"salt": {"buckets": 8, "from_ms": future + 60_000}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());

    // A restart keeps the epochs: the same answers from what is on disk.
    let q = json!({"table": "grown", "series": [["metric", "cpu"], ["host", "h07"]]});
    let before = all_pages(&a, &q);
    common::server::stop(s);
    let s = sc.start();
    assert_eq!(all_pages(&s.addr, &q), before);
    common::server::stop(s);
}
