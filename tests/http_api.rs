//! End to end over real HTTP on loopback: `halite serve` as a separate
//! process; tables created through the API; 200,000 points written as line
//! protocol into a 16-bucket salted table; logical queries, pages with
//! continuation tokens, aggregates, raw scans and gets checked against an
//! oracle; bad input answered with the right status; SIGTERM stops cleanly
//! and the data is there after a restart.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::http::{free_port, request};
use common::server::{start, stop};
use serde_json::{Value, json};

const HOSTS: u64 = 100;
const POINTS: u64 = 2_000;
const T0_MS: u64 = 1_700_000_000_000;

fn post_json(addr: &str, path: &str, body: &Value) -> common::http::Response {
    request(
        addr,
        "POST",
        path,
        Some("application/json"),
        body.to_string().as_bytes(),
    )
    .expect("request")
}

fn value(h: u64, p: u64) -> f64 {
    ((h * 7919 + p * 104729) % 10_000) as f64 / 100.0
}

fn host(h: u64) -> String {
    format!("host_{h:03}")
}

#[test]
fn http_end_to_end_against_an_oracle() {
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let s = start(dir.path(), port, &[]);
    let a = s.addr.clone();

    // Admin: namespace and a 16-bucket salted table.
    assert_eq!(
        post_json(&a, "/api/v1/namespaces", &json!({"name": "metrics"})).status,
        201
    );
    assert_eq!(
        post_json(&a, "/api/v1/namespaces", &json!({"name": "metrics"})).status,
        409
    );
    let table = json!({
        "name": "metrics:cpu",
        "families": [{"name": "f", "compression": "SNAPPY"}],
        "key": {
            "fields": [
                {"name": "metric", "type": "string", "width": 8},
                {"name": "host", "type": "string", "width": 12},
                {"name": "ts", "type": "reversed_timestamp"}
            ],
            "salt": {"buckets": 16}
        }
    });
    let created = post_json(&a, "/api/v1/tables", &table);
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(
        created.json()["regions"].as_array().expect("regions").len(),
        16
    );
    assert_eq!(post_json(&a, "/api/v1/tables", &table).status, 409);

    // 200,000 points as line protocol, 10,000 lines a request (ms precision).
    let mut oracle: BTreeMap<(String, u64), f64> = BTreeMap::new();
    let mut body = String::new();
    for p in 0..POINTS {
        for h in 0..HOSTS {
            let ts = T0_MS + p * 10_000;
            let v = value(h, p);
            oracle.insert((host(h), ts), v);
            body.push_str(&format!("cpu,host={} usage_user={v} {ts}\n", host(h)));
        }
        if (p + 1) % 100 == 0 {
            let r = request(
                &a,
                "POST",
                "/api/v1/write?table=metrics:cpu&precision=ms",
                Some("text/plain"),
                body.as_bytes(),
            )
            .expect("write");
            assert_eq!(r.status, 204, "{}", r.text());
            body.clear();
        }
    }
    assert_eq!(oracle.len(), 200_000);

    // One series: one bucket, newest first, a time range.
    let q = json!({"table": "metrics:cpu", "series": [["metric","cpu"],["host", host(42)]],
                   "start_ms": T0_MS + 1_000_000, "end_ms": T0_MS + 2_000_000});
    let r = post_json(&a, "/api/v1/query", &q).json();
    assert_eq!(r["buckets_scanned"], 1);
    let got: Vec<(u64, f64)> = r["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| {
            (
                row["key"]["fields"]["ts"].as_u64().expect("ts"),
                row["cells"][0]["value"].as_f64().expect("value"),
            )
        })
        .collect();
    let mut want: Vec<(u64, f64)> = oracle
        .iter()
        .filter(|((h, ts), _)| {
            *h == host(42) && (T0_MS + 1_000_000..T0_MS + 2_000_000).contains(ts)
        })
        .map(|((_, ts), v)| (*ts, *v))
        .collect();
    want.reverse();
    assert_eq!(got, want);

    // All hosts, pages of 700 with continuation tokens: every point exactly
    // once, in (host, newest-first) order, over 16 buckets.
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut q = json!({"table": "metrics:cpu", "series": [["metric","cpu"]], "limit": 700,
                           "start_ms": T0_MS, "end_ms": T0_MS + 100 * 10_000});
        if let Some(t) = &token {
            q["continuation"] = json!(t);
        }
        let r = post_json(&a, "/api/v1/query", &q).json();
        assert_eq!(r["buckets_scanned"], 16);
        for row in r["rows"].as_array().expect("rows") {
            seen.push((
                row["key"]["fields"]["host"]
                    .as_str()
                    .expect("host")
                    .to_string(),
                row["key"]["fields"]["ts"].as_u64().expect("ts"),
            ));
        }
        match r["continuation"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    let mut want: Vec<(String, u64)> = oracle
        .keys()
        .filter(|(_, ts)| *ts < T0_MS + 100 * 10_000)
        .cloned()
        .collect();
    want.sort_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
    assert_eq!(
        seen.len(),
        want.len(),
        "paged query returned a different number of points"
    );
    assert!(seen == want, "paged query order differs from the oracle");

    // Aggregates: max and count per host over one hour.
    let q = json!({"table": "metrics:cpu", "series": [["metric","cpu"]], "start_ms": T0_MS, "end_ms": T0_MS + 3_600_000,
                   "aggregate": {"functions": ["max", "count"]}});
    let r = post_json(&a, "/api/v1/query", &q).json();
    let aggs = r["aggregates"].as_array().expect("aggregates");
    assert_eq!(aggs.len(), HOSTS as usize);
    for agg in aggs {
        let h = agg["series"]["host"].as_str().expect("host");
        let pts: Vec<f64> = oracle
            .iter()
            .filter(|((hh, ts), _)| hh == h && *ts < T0_MS + 3_600_000)
            .map(|(_, v)| *v)
            .collect();
        assert_eq!(agg["values"]["count"].as_f64(), Some(pts.len() as f64));
        assert_eq!(
            agg["values"]["max"].as_f64(),
            Some(pts.iter().cloned().fold(f64::MIN, f64::max))
        );
    }

    // Raw scan and get.
    let r = post_json(
        &a,
        "/api/v1/tables/metrics:cpu/scan",
        &json!({"limit": 5, "reverse": true}),
    )
    .json();
    let rows = r["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 5);
    let row_hex = rows[0]["row"].as_str().expect("row");
    let g = request(
        &a,
        "GET",
        &format!("/api/v1/tables/metrics:cpu/rows/{row_hex}"),
        None,
        b"",
    )
    .expect("get");
    assert_eq!(g.status, 200);
    assert_eq!(g.json()["row"], rows[0]["row"]);

    // Bad input gets the right status and changes nothing else.
    let bad = request(
        &a,
        "POST",
        "/api/v1/write?table=metrics:cpu&precision=ms",
        None,
        b"cpu,host=x usage_user=1 1\ncpu,host=y usage_user=oops 1\n",
    )
    .expect("write");
    assert_eq!(bad.status, 400);
    let j = bad.json();
    assert_eq!(j["written"], 1);
    assert_eq!(j["rejected"][0]["line"], 2);
    assert_eq!(
        request(&a, "POST", "/api/v1/write?table=nope", None, b"m v=1")
            .expect("w")
            .status,
        404
    );
    assert_eq!(
        post_json(
            &a,
            "/api/v1/query",
            &json!({"table": "metrics:cpu", "bogus": 1})
        )
        .status,
        400
    );
    let big = vec![b'x'; 26 * 1024 * 1024];
    let r = request(&a, "POST", "/api/v1/write?table=metrics:cpu", None, &big).expect("big");
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["code"], "too_large");
    stop(s);

    // After a restart (clean), everything is still there.
    let s = start(dir.path(), port, &[]);
    let r = post_json(
        &s.addr,
        "/api/v1/query",
        &json!({"table": "metrics:cpu", "series": [["metric","cpu"],["host", host(7)]]}),
    )
    .json();
    assert_eq!(r["rows"].as_array().expect("rows").len(), POINTS as usize);
    stop(s);
}

/// kill -9 during writes: every write the server acknowledged (204) is
/// readable after a restart, and the catalog is intact.
#[test]
fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().expect("tmp");
    let port = free_port();
    for round in 0..3u64 {
        let s = start(dir.path(), port, &[]);
        let a = s.addr.clone();
        if round == 0 {
            let t = json!({
                "name": "k",
                "families": [{"name": "f"}],
                "key": {"fields": [{"name": "metric", "type": "string", "width": 4},
                                   {"name": "host", "type": "string", "width": 8},
                                   {"name": "ts", "type": "timestamp"}],
                        "salt": {"buckets": 8}}
            });
            assert_eq!(post_json(&a, "/api/v1/tables", &t).status, 201);
        }
        // A writer thread sends batches until the server dies; it records
        // the batches that were acknowledged.
        let writer = std::thread::spawn(move || {
            let mut acked = Vec::new();
            for batch in 0..10_000u64 {
                let mut body = String::new();
                for h in 0..50 {
                    let ts = 1_000_000 + (round * 10_000 + batch) * 1000;
                    body.push_str(&format!("m,host=h{h} v={batch}i {ts}\n"));
                }
                match request(
                    &a,
                    "POST",
                    "/api/v1/write?table=k&precision=ms",
                    None,
                    body.as_bytes(),
                ) {
                    Ok(r) if r.status == 204 => acked.push(round * 10_000 + batch),
                    _ => break,
                }
            }
            acked
        });
        std::thread::sleep(Duration::from_millis(300 + 200 * round));
        let mut s = s;
        s.child.kill().expect("SIGKILL");
        s.child.wait().expect("reap");
        let acked = writer.join().expect("writer");
        assert!(
            !acked.is_empty(),
            "nothing was acknowledged before the kill"
        );

        let s = start(dir.path(), port, &[]);
        for &b in acked.iter().step_by(7).chain(acked.last()) {
            let ts = 1_000_000 + b * 1000;
            let q =
                json!({"table": "k", "series": [["metric","m"]], "start_ms": ts, "end_ms": ts + 1});
            let r = post_json(&s.addr, "/api/v1/query", &q).json();
            assert_eq!(
                r["rows"].as_array().expect("rows").len(),
                50,
                "acknowledged batch {b} lost after kill -9 (round {round})"
            );
        }
        let tables = request(&s.addr, "GET", "/api/v1/tables", None, b"")
            .expect("tables")
            .json();
        assert_eq!(
            tables.as_array().expect("tables").len(),
            1,
            "catalog lost a table"
        );
        stop(s);
    }
}
