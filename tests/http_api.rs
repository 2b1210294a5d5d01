//! End to end over real HTTP on loopback: `halite serve` as a separate
//! process; tables created through the API; 200,000 points written as line
//! protocol into a 16-bucket salted table; logical queries, pages with
//! continuation tokens, aggregates, raw scans and gets checked against an
//! oracle; bad input answered with the right status; SIGTERM stops cleanly
//! and the data is there after a restart.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::http::{request, request_with};
use common::scenario::Scenario;
use common::server::stop;
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
    let sc = Scenario::new().build();
    let s = sc.start();
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

    // The TSBS forms over HTTP: 3 hosts by value set, each one's last
    // point (`series_limit` 1 on newest-first keys), and max across them
    // per hour grouped by metric.
    let three = [host(3), host(42), host(77)];
    let r = post_json(
        &a,
        "/api/v1/query",
        &json!({"table": "metrics:cpu", "series": [["metric","cpu"]],
                "series_in": [["host", three]], "series_limit": 1}),
    )
    .json();
    assert_eq!(r["buckets_scanned"], 3, "{r}");
    let last: Vec<(String, u64)> = r["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| {
            (
                row["key"]["fields"]["host"]
                    .as_str()
                    .expect("host")
                    .to_string(),
                row["key"]["fields"]["ts"].as_u64().expect("ts"),
            )
        })
        .collect();
    let newest = T0_MS + (POINTS - 1) * 10_000;
    assert_eq!(
        last,
        three
            .iter()
            .map(|h| (h.clone(), newest))
            .collect::<Vec<_>>()
    );
    let r = post_json(
        &a,
        "/api/v1/query",
        &json!({"table": "metrics:cpu", "series": [["metric","cpu"]],
                "series_in": [["host", three]], "start_ms": T0_MS, "end_ms": T0_MS + 7_200_000,
                "aggregate": {"functions": ["max"], "downsample_ms": 3_600_000, "group_by": ["metric"]}}),
    )
    .json();
    let mut want: BTreeMap<u64, f64> = BTreeMap::new();
    for ((h, ts), v) in &oracle {
        if three.contains(h) && (T0_MS..T0_MS + 7_200_000).contains(ts) {
            let max = want.entry(ts - ts % 3_600_000).or_insert(f64::MIN);
            *max = max.max(*v);
        }
    }
    let got: BTreeMap<u64, f64> = r["aggregates"]
        .as_array()
        .expect("aggregates")
        .iter()
        .map(|agg| {
            assert_eq!(agg["series"], json!({"metric": "cpu"}));
            (
                agg["window_ms"].as_u64().expect("window"),
                agg["values"]["max"].as_f64().expect("max"),
            )
        })
        .collect();
    assert_eq!(got, want, "{r}");

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
    let s = sc.start();
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
    let sc = Scenario::new().build();
    for round in 0..3u64 {
        let s = sc.start();
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

        let s = sc.start();
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

/// A body larger than a write piece (`server.write_piece`, 256 KiB here)
/// is written piece by piece:
/// bad lines in any piece come back with their line number in the whole
/// body, the later of two points with one key wins across pieces, and a
/// body that is not UTF-8 anywhere changes nothing. Queries in the series
/// shape lay rows out as InfluxDB does, page with continuation, and are
/// refused where they do not apply.
#[test]
fn large_bodies_in_pieces_and_series_shaped_answers() {
    let sc = Scenario::new().set("server.write_piece=256KiB").build();
    let s = sc.start();
    let a = s.addr.clone();
    assert_eq!(
        post_json(&a, "/api/v1/namespaces", &json!({"name": "metrics"})).status,
        201
    );
    let table = json!({
        "name": "metrics:cpu",
        "families": [{"name": "f"}],
        "key": {
            "fields": [
                {"name": "metric", "type": "string", "width": 8},
                {"name": "host", "type": "string", "width": 12},
                {"name": "ts", "type": "reversed_timestamp"}
            ],
            "salt": {"buckets": 4}
        }
    });
    assert_eq!(post_json(&a, "/api/v1/tables", &table).status, 201);
    let write = |body: &[u8]| {
        request(
            &a,
            "POST",
            "/api/v1/write?table=metrics:cpu&precision=ms",
            Some("text/plain"),
            body,
        )
        .expect("write")
    };

    // 3 hosts × 6,000 timestamps, two fields (host_2 lacks `b` at odd
    // steps), bad lines spread through the body, and host_0's first point
    // written again at the very end with another value.
    let mut body = String::new();
    let mut line = 0;
    let mut bad_lines = Vec::new();
    for step in 0..6_000u64 {
        for h in 0..3u64 {
            let ts = T0_MS + step * 1_000;
            line += 1;
            if step % 1_500 == 7 && h == 1 {
                body.push_str("cpu,host=host_1 a=oops,b= nonsense\n");
                bad_lines.push(line);
                continue;
            }
            if h == 2 && step % 2 == 1 {
                body.push_str(&format!("cpu,host=host_2 a={step} {ts}\n"));
            } else {
                body.push_str(&format!("cpu,host=host_{h} a={step},b={h} {ts}\n"));
            }
        }
    }
    body.push_str(&format!("cpu,host=host_0 a=-1,b=-1 {T0_MS}\n"));
    assert!(body.len() > 2 * 256 * 1024, "{}", body.len());
    let r = write(body.as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    let answer = r.json();
    assert_eq!(answer["error"]["code"], "partial_write");
    let rejected: Vec<u64> = answer["rejected"]
        .as_array()
        .expect("rejected")
        .iter()
        .map(|x| x["line"].as_u64().expect("line"))
        .collect();
    assert_eq!(rejected, bad_lines);
    assert_eq!(
        answer["written"].as_u64(),
        Some(18_001 - bad_lines.len() as u64)
    );

    // Not UTF-8 in its last piece: refused whole.
    let mut bad_utf8 = Vec::new();
    for step in 0..10_000u64 {
        bad_utf8
            .extend_from_slice(format!("cpu,host=host_9 a={step} {}\n", T0_MS + step).as_bytes());
    }
    bad_utf8.extend_from_slice(b"cpu,host=host_\xff a=1\n");
    assert_eq!(write(&bad_utf8).status, 400);

    let query = |q: Value| {
        let r = post_json(&a, "/api/v1/query", &q);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let nine =
        query(json!({"table": "metrics:cpu", "series": [["metric","cpu"],["host","host_9"]]}));
    assert_eq!(nine["rows"].as_array().map(Vec::len), Some(0));

    // One series, newest first: the columns, a missing field as null, and
    // the rewritten first point.
    let r = query(json!({"table": "metrics:cpu", "shape": "series",
                         "series": [["metric","cpu"],["host","host_2"]], "limit": 3}));
    assert_eq!(
        r["series"],
        json!([{"key": {"metric": "cpu", "host": "host_2"}, "columns": ["time", "a", "b"],
                "values": [[T0_MS + 5_999_000, 5999.0, null],
                           [T0_MS + 5_998_000, 5998.0, 2.0],
                           [T0_MS + 5_997_000, 5997.0, null]]}])
    );
    let r = query(
        json!({"table": "metrics:cpu", "shape": "series", "fields": ["a"],
                         "series": [["metric","cpu"],["host","host_0"]],
                         "start_ms": T0_MS, "end_ms": T0_MS + 1}),
    );
    assert_eq!(r["series"][0]["values"], json!([[T0_MS, -1.0]]));

    // All series over three timestamps, in pages of 4 rows: a series cut by
    // a page goes on in the next, and the pages together are the whole.
    let whole = query(
        json!({"table": "metrics:cpu", "shape": "series", "fields": ["a"],
                             "series": [["metric","cpu"]],
                             "start_ms": T0_MS + 10_000, "end_ms": T0_MS + 13_000}),
    );
    let flatten = |answer: &Value| -> Vec<(String, Value)> {
        answer["series"]
            .as_array()
            .expect("series")
            .iter()
            .flat_map(|s| {
                let host = s["key"]["host"].as_str().expect("host").to_string();
                s["values"]
                    .as_array()
                    .expect("values")
                    .iter()
                    .map(move |v| (host.clone(), v.clone()))
            })
            .collect()
    };
    let all = flatten(&whole);
    assert_eq!(all.len(), 9);
    assert_eq!(whole["series"].as_array().map(Vec::len), Some(3));
    let mut paged = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut q = json!({"table": "metrics:cpu", "shape": "series", "fields": ["a"],
                           "series": [["metric","cpu"]], "limit": 4,
                           "start_ms": T0_MS + 10_000, "end_ms": T0_MS + 13_000});
        if let Some(t) = &token {
            q["continuation"] = json!(t);
        }
        let page = query(q);
        paged.extend(flatten(&page));
        pages += 1;
        match page["continuation"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    assert_eq!(paged, all);
    assert!(pages >= 3, "{pages}");

    // Where the shape does not apply.
    let agg = post_json(
        &a,
        "/api/v1/query",
        &json!({"table": "metrics:cpu", "shape": "series", "series": [["metric","cpu"]],
                "aggregate": {"functions": ["max"]}}),
    );
    assert_eq!(agg.status, 400, "{}", agg.text());
    let ndjson = request_with(
        &a,
        "POST",
        "/api/v1/query",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/x-ndjson"),
        ],
        json!({"table": "metrics:cpu", "shape": "series"})
            .to_string()
            .as_bytes(),
    )
    .expect("query");
    assert_eq!(ndjson.status, 400, "{}", ndjson.text());
    assert_eq!(
        post_json(
            &a,
            "/api/v1/query",
            &json!({"table": "metrics:cpu", "shape": "wide"})
        )
        .status,
        400
    );
    stop(s);
}

/// A family's compaction policy is part of its schema: TIME_WINDOW with a
/// window is taken and shown as written; a window without TIME_WINDOW, or
/// one out of range, is a 400 that says so.
#[test]
fn time_window_families_are_created_shown_and_checked() {
    let sc = Scenario::new().build();
    let s = sc.start();
    let a = s.addr.clone();
    let table = |name: &str, family: Value| {
        json!({
            "name": name,
            "families": [family],
            "key": {"fields": [
                {"name": "metric", "type": "string", "width": 8},
                {"name": "ts", "type": "reversed_timestamp"}
            ]}
        })
    };
    let created = post_json(
        &a,
        "/api/v1/tables",
        &table(
            "default:tw",
            json!({"name": "f", "compaction": "TIME_WINDOW", "time_window": 3600}),
        ),
    );
    assert_eq!(created.status, 201, "{}", created.text());
    let shown = request(&a, "GET", "/api/v1/tables/default:tw", None, b"").expect("get");
    assert_eq!(shown.status, 200, "{}", shown.text());
    let family = &shown.json()["families"][0];
    assert_eq!(family["compaction"], "TIME_WINDOW", "{family}");
    assert_eq!(family["time_window"], 3600, "{family}");
    for (name, family, says) in [
        (
            "default:bad1",
            json!({"name": "f", "time_window": 3600}),
            "time_window applies only to COMPACTION => TIME_WINDOW",
        ),
        (
            "default:bad2",
            json!({"name": "f", "compaction": "time_window", "time_window": 10}),
            "time_window must be between 60 seconds and 366 days",
        ),
    ] {
        let r = post_json(&a, "/api/v1/tables", &table(name, family));
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(r.text().contains(says), "{}", r.text());
    }
    // A measurement's table, made by its first point, is date-tiered by
    // a day ([influx] compaction and time_window).
    let created = request(
        &a,
        "POST",
        "/query",
        Some("application/x-www-form-urlencoded"),
        b"q=CREATE+DATABASE+telegraf",
    )
    .expect("create database");
    assert_eq!(created.status, 200, "{}", created.text());
    let w = request(
        &a,
        "POST",
        "/write?db=telegraf",
        Some("text/plain"),
        b"cpu,host=a usage_user=1 1700000000000000000\n",
    )
    .expect("write");
    assert_eq!(w.status, 204, "{}", w.text());
    let shown = request(&a, "GET", "/api/v1/tables/telegraf:cpu", None, b"").expect("get");
    assert_eq!(shown.status, 200, "{}", shown.text());
    let family = &shown.json()["families"][0];
    assert_eq!(family["compaction"], "TIME_WINDOW", "{family}");
    assert_eq!(family["time_window"], 86_400, "{family}");
    stop(s);
}

/// `configs/tsbs-devops.toml`'s table (every TSBS tag a key field) takes
/// every one of 4,000 hosts' devops lines (their tags fit the key's
/// widths), answers one host's series by all its tags, and counts points
/// per region with `group_by`.
#[test]
fn the_tsbs_devops_table_takes_every_hosts_tags() {
    use halite::tsbs::devops;
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/configs/tsbs-devops.toml"
    ))
    .expect("configs/tsbs-devops.toml");
    // Its table, without its [kafka] settings (the example config has them).
    let table = &shipped[shipped.find("[[tables]]").expect("a table")
        ..shipped.find("[kafka]").expect("kafka settings")];
    let sc = Scenario::new().config_append(&format!("\n{table}")).build();
    let s = sc.start();
    let a = s.addr.clone();
    const HOSTS: u64 = 4_000;
    const STEPS: u64 = 3;
    let mut body = String::new();
    for step in 0..STEPS {
        for host in 0..HOSTS {
            devops::line(&devops::series_prefix(host), host, step, &mut body);
        }
    }
    let w = request(
        &a,
        "POST",
        "/api/v1/write?table=bench:devops&precision=ms",
        Some("text/plain"),
        body.as_bytes(),
    )
    .expect("write");
    assert_eq!(w.status, 204, "{}", w.text());
    // Host 7 by all its tags, in key order.
    let tags: BTreeMap<&str, String> = devops::host_tags(7).into_iter().collect();
    let order = [
        "region",
        "datacenter",
        "rack",
        "os",
        "arch",
        "team",
        "service",
        "service_version",
        "service_environment",
        "hostname",
    ];
    let mut series = vec![json!(["metric", "cpu"])];
    series.extend(order.iter().map(|k| json!([k, tags[k]])));
    let r = post_json(
        &a,
        "/api/v1/query",
        &json!({"table": "bench:devops", "series": series}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let rows = r.json()["rows"].as_array().expect("rows").clone();
    assert_eq!(rows.len(), STEPS as usize);
    assert!(
        rows.iter()
            .all(|row| row["cells"].as_array().map(Vec::len) == Some(10))
    );
    // Points per region across every host and field.
    let mut want: BTreeMap<String, f64> = BTreeMap::new();
    for host in 0..HOSTS {
        *want
            .entry(devops::host_tags(host)[1].1.clone())
            .or_default() += (STEPS * 10) as f64;
    }
    let r = post_json(
        &a,
        "/api/v1/query",
        &json!({"table": "bench:devops", "series": [["metric", "cpu"]],
                "aggregate": {"functions": ["count"], "group_by": ["region"]}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let mut got: BTreeMap<String, f64> = BTreeMap::new();
    for agg in r.json()["aggregates"].as_array().expect("aggregates") {
        let region = agg["series"]["region"]
            .as_str()
            .expect("region")
            .to_string();
        *got.entry(region).or_default() += agg["values"]["count"].as_f64().expect("count");
    }
    assert_eq!(got, want);
    stop(s);
}
