//! Answers the HTTP API once got wrong, each checked over real HTTP against
//! `halite serve`: value filters compare typed values; JSON writes read
//! `precision`; distinct points stay distinct (a table's time unit, the
//! uniquifier); a Get takes columns, a time range and versions; JSON
//! aggregate answers are whole or paged with a token; a token works only
//! for the request and table that issued it; every error is the
//! documented JSON.

mod common;

use std::collections::BTreeSet;

use common::http::{create_table, request};
use common::scenario::Scenario;
use common::server::{self, stop};
use serde_json::{Value, json};

fn post(addr: &str, path: &str, body: &Value) -> common::http::Response {
    request(
        addr,
        "POST",
        path,
        Some("application/json"),
        body.to_string().as_bytes(),
    )
    .expect("request")
}

fn write_lines(addr: &str, table: &str, query: &str, lines: &str) -> common::http::Response {
    request(
        addr,
        "POST",
        &format!("/api/v1/write?table={table}{query}"),
        Some("text/plain"),
        lines.as_bytes(),
    )
    .expect("write")
}

fn table(name: &str, time_type: &str, extra_fields: &[Value], unit: Option<&str>) -> Value {
    let mut fields = vec![
        json!({"name": "metric", "type": "string", "width": 8}),
        json!({"name": "host", "type": "string", "width": 8}),
        json!({"name": "ts", "type": time_type}),
    ];
    fields.extend(extra_fields.iter().cloned());
    let mut key = json!({"fields": fields, "salt": {"buckets": 4}});
    if let Some(u) = unit {
        key["time_unit"] = json!(u);
    }
    json!({"name": name, "families": [{"name": "f", "versions": 3}], "key": key})
}

/// (time field of the key, qualifier) of every cell of an answer's rows.
fn cells(answer: &Value) -> BTreeSet<(u64, String)> {
    answer["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .flat_map(|r| {
            let ts = r["key"]["fields"]["ts"].as_u64().expect("ts");
            r["cells"]
                .as_array()
                .expect("cells")
                .iter()
                .map(move |c| (ts, c["qualifier"].as_str().expect("q").to_string()))
        })
        .collect()
}

fn set(items: &[(u64, &str)]) -> BTreeSet<(u64, String)> {
    items.iter().map(|(t, q)| (*t, q.to_string())).collect()
}

const T1: u64 = 1_700_000_000_000;
const T2: u64 = 1_700_000_001_000;

#[test]
fn value_filters_compare_typed_values_in_scans_and_queries() {
    let sc = Scenario::new().build();
    let s = sc.start();
    let a = s.addr.clone();
    create_table(&a, &table("vf", "reversed_timestamp", &[], None));
    let r = write_lines(
        &a,
        "vf",
        "&precision=ms",
        &format!(
            "cpu,host=a v=-5.0,i=5i,s=\"idle\" {T1}\ncpu,host=a v=50.0,i=60i,s=\"busy\" {T2}\n"
        ),
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let scan = |filter: Value, columns: &[&str]| {
        let r = post(
            &a,
            "/api/v1/tables/vf/scan",
            &json!({"value_filter": filter, "columns": columns}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        cells(&r.json())
    };
    // Each of these was answered wrongly by the byte comparison.
    assert_eq!(
        scan(json!({"op": ">=", "value": 50.0}), &[]),
        set(&[(T2, "i"), (T2, "v")]),
        "-5.0 is not >= 50.0; 60 is"
    );
    assert_eq!(
        scan(json!({"op": "<", "value": 0}), &[]),
        set(&[(T1, "v")]),
        "-5.0 < 0"
    );
    assert_eq!(
        scan(json!({"op": ">=", "value": 50}), &["f:i"]),
        set(&[(T2, "i")]),
        "5 is not >= 50"
    );
    assert_eq!(
        scan(json!({"op": "=", "value": "idle"}), &[]),
        set(&[(T1, "s")]),
        "a string equals itself"
    );
    // A row filter keeps whole rows by one column, HBase's
    // SingleColumnValueFilter.
    assert_eq!(
        scan(json!({"op": ">", "value": 0, "column": "f:v"}), &[]),
        set(&[(T2, "i"), (T2, "s"), (T2, "v")])
    );
    // A series query: values, and rows by one field.
    let query = |filter: Value| {
        let r = post(
            &a,
            "/api/v1/query",
            &json!({"table": "vf", "series": [["metric", "cpu"]], "value_filter": filter}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        cells(&r.json())
    };
    assert_eq!(query(json!({"op": "<", "value": 0.0})), set(&[(T1, "v")]));
    assert_eq!(
        query(json!({"op": "<=", "value": -5, "field": "v"})),
        set(&[(T1, "i"), (T1, "s"), (T1, "v")])
    );
    // Aggregates see only the values that pass.
    let r = post(
        &a,
        "/api/v1/query",
        &json!({"table": "vf", "series": [["metric", "cpu"]], "fields": ["v"],
                "value_filter": {"op": ">", "value": -10}, "aggregate": {"functions": ["count", "min"]}}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["aggregates"][0]["values"],
        json!({"count": 2.0, "min": -5.0})
    );
    // A row filter on a column the scan does not return is refused, not
    // silently passed.
    let r = post(
        &a,
        "/api/v1/tables/vf/scan",
        &json!({"value_filter": {"op": ">", "value": 0, "column": "f:v"}, "columns": ["f:i"]}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    // A bad comparison names itself.
    let r = post(
        &a,
        "/api/v1/tables/vf/scan",
        &json!({"value_filter": {"op": "~", "value": 1}}),
    );
    assert_eq!(r.status, 400);
    assert!(r.text().contains("unknown comparison"), "{}", r.text());
    stop(s);
}

#[test]
fn json_writes_read_precision_and_distinct_points_stay_distinct() {
    let sc = Scenario::new().build();
    let s = sc.start();
    let a = s.addr.clone();
    create_table(&a, &table("ms", "timestamp", &[], None));
    create_table(&a, &table("ns", "timestamp", &[], Some("ns")));
    create_table(
        &a,
        &table(
            "uq",
            "timestamp",
            &[json!({"name": "seq", "type": "uniquifier", "width": 8})],
            None,
        ),
    );
    let times = |table: &str| -> Vec<u64> {
        let r = post(
            &a,
            "/api/v1/query",
            &json!({"table": table, "series": [["metric", "cpu"]]}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|r| r["key"]["fields"]["ts"].as_u64().expect("ts"))
            .collect()
    };

    // JSON points in seconds, with precision=s: not 1970.
    let r = request(
        &a,
        "POST",
        "/api/v1/write?table=ms&precision=s",
        Some("application/json"),
        json!({"metric": "cpu", "tags": {"host": "a"}, "ts": 1_700_000_000, "fields": {"v": 1.0}})
            .to_string()
            .as_bytes(),
    )
    .expect("write");
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(times("ms"), vec![1_700_000_000_000]);

    // An ns table keeps two points 500 ns apart.
    let base = 1_700_000_000_000_000_000u64;
    let r = write_lines(
        &a,
        "ns",
        "",
        &format!("cpu,host=a v=1 {base}\ncpu,host=a v=2 {}\n", base + 500),
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(times("ns"), vec![base, base + 500]);
    let r = post(
        &a,
        "/api/v1/query",
        &json!({"table": "ns", "series": [["metric", "cpu"]], "start": base + 1, "end": base + 501}),
    );
    assert_eq!(
        r.json()["rows"].as_array().expect("rows").len(),
        1,
        "{}",
        r.text()
    );

    // A ms table refuses, by name, the second of two points in one write
    // that only the cut digits told apart; the first stays.
    let r = write_lines(
        &a,
        "ms",
        "",
        &format!("cpu,host=b v=1 {base}\ncpu,host=b v=2 {}\n", base + 500),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let body = r.json();
    assert_eq!(body["written"], 1);
    assert_eq!(body["rejected"][0]["line"], 2);
    assert!(
        body["rejected"][0]["reason"]
            .as_str()
            .expect("reason")
            .contains("time_unit"),
        "{body}"
    );

    // Across the pieces of a large body too, naming lines in the whole body.
    let mut big = format!("cpu,host=c v=0 {base}\n");
    let mut lines = 1;
    while big.len() < 300 * 1024 {
        big.push_str(&format!(
            "cpu,host=d v={lines} {}\n",
            base + lines * 1_000_000
        ));
        lines += 1;
    }
    big.push_str(&format!("cpu,host=c v=1 {}\n", base + 7));
    let r = write_lines(&a, "ms", "", &big);
    assert_eq!(r.status, 400, "{}", &r.text()[..r.text().len().min(300)]);
    let body = r.json();
    assert_eq!(body["rejected"][0]["line"], lines + 1);
    assert!(
        body["rejected"][0]["reason"]
            .as_str()
            .expect("reason")
            .contains("time of point 1 "),
        "{}",
        body["rejected"][0]
    );

    // A uniquifier keeps same-time points apart, in one write and in two.
    for _ in 0..2 {
        let r = write_lines(
            &a,
            "uq",
            "&precision=ms",
            &format!("cpu,host=a v=1 {T1}\ncpu,host=a v=2 {T1}\n"),
        );
        assert_eq!(r.status, 204, "{}", r.text());
    }
    assert_eq!(times("uq"), vec![T1; 4]);
    // As series, the uniquifier is a column beside time, not a new series.
    let r = post(
        &a,
        "/api/v1/query",
        &json!({"table": "uq", "series": [["metric", "cpu"]], "shape": "series"}),
    );
    let series = r.json()["series"].clone();
    assert_eq!(series.as_array().expect("series").len(), 1, "{series}");
    assert_eq!(series[0]["columns"], json!(["time", "seq", "v"]));
    assert_eq!(series[0]["values"].as_array().expect("values").len(), 4);
    // ...and an explicit tag is used as given, so a retried write is idempotent.
    for _ in 0..2 {
        let r = write_lines(
            &a,
            "uq",
            "&precision=ms",
            &format!("cpu,host=c,seq=7 v=1 {T1}\n"),
        );
        assert_eq!(r.status, 204, "{}", r.text());
    }
    let r = post(
        &a,
        "/api/v1/query",
        &json!({"table": "uq", "series": [["metric", "cpu"], ["host", "c"]]}),
    );
    assert_eq!(r.json()["rows"].as_array().expect("rows").len(), 1);
    stop(s);
}

#[test]
fn gets_pages_tokens_and_errors_answer_as_documented() {
    let sc = Scenario::new().build();
    let s = sc.start();
    let a = s.addr.clone();
    create_table(&a, &table("cpu", "reversed_timestamp", &[], None));
    create_table(&a, &table("mem", "reversed_timestamp", &[], None));

    // A table's namespace comes with it, as from the config.
    create_table(&a, &table("plant:temps", "timestamp", &[], None));
    let ns = request(&a, "GET", "/api/v1/namespaces", None, b"").expect("namespaces");
    assert!(
        ns.json()
            .as_array()
            .expect("list")
            .contains(&json!("plant")),
        "{}",
        ns.text()
    );

    // A key without time: one row per series, each point a version.
    create_table(
        &a,
        &json!({"name": "dev", "families": [{"name": "f", "versions": 3}],
                "key": {"fields": [{"name": "metric", "type": "string", "width": 8},
                                   {"name": "host", "type": "string", "width": 8}]}}),
    );
    let r = write_lines(
        &a,
        "dev",
        "&precision=ms",
        &format!(
            "cpu,host=a v=1 {T1}\ncpu,host=a v=2 {}\ncpu,host=a v=3,w=9 {}\n",
            T1 + 10,
            T1 + 20
        ),
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let scan = post(&a, "/api/v1/tables/dev/scan", &json!({}));
    let row = scan.json()["rows"][0]["row"]
        .as_str()
        .expect("row")
        .to_string();
    let get = |query: &str| {
        request(
            &a,
            "GET",
            &format!("/api/v1/tables/dev/rows/{row}{query}"),
            None,
            b"",
        )
        .expect("get")
    };
    let versions = |r: &common::http::Response| -> Vec<(String, u64)> {
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["cells"]
            .as_array()
            .expect("cells")
            .iter()
            .map(|c| {
                (
                    c["qualifier"].as_str().expect("q").to_string(),
                    c["timestamp"].as_u64().expect("ts"),
                )
            })
            .collect()
    };
    let v = |ts: u64| ("v".to_string(), ts);
    let w = |ts: u64| ("w".to_string(), ts);
    assert_eq!(versions(&get("")), vec![v(T1 + 20), w(T1 + 20)]);
    assert_eq!(versions(&get("?columns=f:w")), vec![w(T1 + 20)]);
    assert_eq!(
        versions(&get("?columns=f:v&max_versions=3")),
        vec![v(T1 + 20), v(T1 + 10), v(T1)]
    );
    assert_eq!(
        versions(&get(&format!(
            "?columns=f&max_versions=3&min_ts={}&max_ts={}",
            T1 + 5,
            T1 + 20
        ))),
        vec![v(T1 + 10)]
    );
    let r = get(&format!("?max_ts={T1}"));
    assert_eq!(
        r.status,
        404,
        "nothing before the first version: {}",
        r.text()
    );
    let r = get("?colums=f:w");
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .expect("msg")
            .contains("colums")
    );
    let r = get("?columns=nope:w");
    assert_eq!(r.status, 404, "{}", r.text());

    // 10,500 one-point windows: a JSON aggregate answer holds them all, and
    // pages of 4,000 cover them once each.
    let mut lines = String::new();
    for i in 0..10_500u64 {
        lines.push_str(&format!("cpu,host=b v={i} {}\n", T1 + i));
    }
    assert_eq!(write_lines(&a, "mem", "&precision=ms", &lines).status, 204);
    let agg = json!({"table": "mem", "series": [["metric", "cpu"]],
                     "aggregate": {"functions": ["max"], "downsample_ms": 1}});
    let r = post(&a, "/api/v1/query", &agg);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["aggregates"].as_array().expect("aggs").len(),
        10_500
    );
    assert_eq!(r.json()["continuation"], Value::Null);
    let mut windows = Vec::new();
    let mut page = agg.clone();
    page["limit"] = json!(4000);
    let mut pages = 0;
    let query_token = loop {
        let r = post(&a, "/api/v1/query", &page);
        assert_eq!(r.status, 200, "{}", r.text());
        let body = r.json();
        windows.extend(
            body["aggregates"]
                .as_array()
                .expect("aggs")
                .iter()
                .map(|a| a["window_ms"].as_u64().expect("window")),
        );
        pages += 1;
        match body["continuation"].as_str() {
            Some(t) => page["continuation"] = json!(t),
            None => break page["continuation"].as_str().expect("a token").to_string(),
        }
    };
    assert_eq!(pages, 3);
    assert_eq!(windows, (0..10_500).map(|i| T1 + i).collect::<Vec<_>>());

    // A token is for the request and table that issued it.
    let r = post(&a, "/api/v1/tables/mem/scan", &json!({"limit": 1}));
    let scan_token = r.json()["continuation"]
        .as_str()
        .expect("token")
        .to_string();
    let r = post(
        &a,
        "/api/v1/query",
        &json!({"table": "mem", "series": [["metric", "cpu"]], "continuation": scan_token}),
    );
    assert_eq!(r.status, 400, "a scan's token in a query: {}", r.text());
    assert!(r.text().contains("belongs to a scan"), "{}", r.text());
    let r = post(
        &a,
        "/api/v1/tables/cpu/scan",
        &json!({"continuation": scan_token}),
    );
    assert_eq!(r.status, 400, "another table's token: {}", r.text());
    let r = post(
        &a,
        "/api/v1/query",
        &json!({"table": "mem", "series": [["metric", "cpu"]], "continuation": query_token}),
    );
    assert_eq!(r.status, 400, "an aggregate's token for rows: {}", r.text());

    // A field of the wrong type is named.
    for (body, field) in [
        (json!({"table": "mem", "limit": "5"}), "limit"),
        (json!({"table": "mem", "start_ms": "x"}), "start_ms"),
        (json!({"table": "mem", "series": "cpu"}), "series"),
        (json!({"table": 5}), "table"),
    ] {
        let r = post(&a, "/api/v1/query", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let message = r.json()["error"]["message"]
            .as_str()
            .expect("message")
            .to_string();
        assert!(message.contains(&format!("`{field}`")), "{body}: {message}");
    }
    let r = post(&a, "/api/v1/tables/mem/scan", &json!({"reverse": "yes"}));
    assert!(r.text().contains("`reverse`"), "{}", r.text());
    // A huge bad value comes back as a bounded prefix, not whole.
    let huge = "h".repeat(100 * 1024);
    let r = write_lines(&a, "mem", "", &format!("cpu,host={huge} v=1 1\n"));
    assert_eq!(r.status, 400, "{}", &r.text()[..200]);
    assert!(r.body.len() < 2048, "{} bytes of answer", r.body.len());
    // One bad JSON point is refused by its number; the others are written.
    let r = request(
        &a,
        "POST",
        "/api/v1/write?table=mem",
        Some("application/json"),
        json!([{"metric": "cpu", "tags": {"host": "j"}, "ts": T1, "fields": {"v": 1}},
               {"metric": "cpu", "tags": {"host": "j"}, "ts": "soon", "fields": {"v": 2}}])
        .to_string()
        .as_bytes(),
    )
    .expect("write");
    assert_eq!(r.status, 400, "{}", r.text());
    let body = r.json();
    assert_eq!(body["written"], 1, "{body}");
    assert_eq!(body["rejected"][0]["line"], 2, "{body}");
    assert!(
        body["rejected"][0]["reason"]
            .as_str()
            .expect("reason")
            .contains("`ts`"),
        "{body}"
    );

    // Errors are the documented JSON everywhere.
    for (method, path, status) in [
        ("GET", "/api/v1/nothing", 404),
        ("DELETE", "/api/v1/query", 405),
        ("POST", "/api/v1/write", 400),
        ("POST", "/api/v1/write?table=cpu&precison=s", 400),
    ] {
        let r = request(&a, method, path, Some("text/plain"), b"cpu,host=a v=1").expect("req");
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
        assert!(
            r.json()["error"]["message"].is_string(),
            "{method} {path}: {}",
            r.text()
        );
    }
    stop(s);
}

/// Bytes of store files under `dir`.
fn store_file_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "sst") {
                total += e.metadata().map_or(0, |m| m.len());
            }
        }
    }
    total
}

#[test]
fn deletes_ttls_and_durability_reach_the_data_model() {
    let sc = Scenario::new().build();
    let s = sc.start();
    let a = s.addr.clone();
    create_table(&a, &table("cpu", "reversed_timestamp", &[], None));
    let count = |series: Value, body: &Value| -> usize {
        let mut q = body.clone();
        q["table"] = json!("cpu");
        q["series"] = series;
        let r = post(&a, "/api/v1/query", &q);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["rows"].as_array().expect("rows").len()
    };
    let host = |h: &str| json!([["metric", "cpu"], ["host", h]]);
    // 4 hosts x 2,000 points, two fields each.
    let mut lines = String::new();
    for h in 0..4 {
        for i in 0..2000u64 {
            lines.push_str(&format!(
                "cpu,host=h{h} u={i}.5,s={}.25 {}\n",
                i % 97,
                T1 + i * 1000
            ));
        }
    }
    assert_eq!(write_lines(&a, "cpu", "&precision=ms", &lines).status, 204);
    assert_eq!(post(&a, "/api/v1/tables/cpu/flush", &json!({})).status, 204);
    let full = store_file_bytes(sc.data());

    // One series over a time range: the rows go at once.
    let r = post(
        &a,
        "/api/v1/tables/cpu/delete",
        &json!({"series": host("h1"), "start_ms": T1 + 100_000, "end_ms": T1 + 600_000}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["deleted_rows"], 500);
    assert_eq!(count(host("h1"), &json!({})), 1500);
    assert_eq!(count(host("h0"), &json!({})), 2000);
    // Only some fields: the rows keep the others.
    let r = post(
        &a,
        "/api/v1/tables/cpu/delete",
        &json!({"series": host("h2"), "fields": ["u"]}),
    );
    assert_eq!(r.json()["deleted_rows"], 2000, "{}", r.text());
    assert_eq!(count(host("h2"), &json!({"fields": ["u"]})), 0);
    assert_eq!(count(host("h2"), &json!({"fields": ["s"]})), 2000);
    // Every series under a key prefix (the metric), over a time range.
    let r = post(
        &a,
        "/api/v1/tables/cpu/delete",
        &json!({"series": [["metric", "cpu"]], "start_ms": T1 + 1_000_000}),
    );
    assert_eq!(r.json()["deleted_rows"], 4000, "{}", r.text());
    assert_eq!(count(host("h3"), &json!({})), 1000);
    // One row as HBase deletes it.
    let rows = post(
        &a,
        "/api/v1/query",
        &json!({"table": "cpu", "series": host("h3"), "limit": 1}),
    )
    .json();
    let row = rows["rows"][0]["row"].as_str().expect("row").to_string();
    let r = post(
        &a,
        "/api/v1/tables/cpu/delete",
        &json!({"row": row, "column": "f:s"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = request(
        &a,
        "GET",
        &format!("/api/v1/tables/cpu/rows/{row}"),
        None,
        b"",
    )
    .expect("get");
    assert_eq!(r.json()["cells"].as_array().expect("cells").len(), 1);
    let r = post(&a, "/api/v1/tables/cpu/delete", &json!({"row": row}));
    assert_eq!(r.status, 200);
    let r = request(
        &a,
        "GET",
        &format!("/api/v1/tables/cpu/rows/{row}"),
        None,
        b"",
    )
    .expect("get");
    assert_eq!(r.status, 404);
    let r = post(
        &a,
        "/api/v1/tables/cpu/delete",
        &json!({"series": host("h3"), "limit": 5}),
    );
    assert_eq!(r.status, 400, "a delete takes no limit: {}", r.text());
    for empty in [json!({}), json!({"series": []})] {
        let r = post(&a, "/api/v1/tables/cpu/delete", &empty);
        assert_eq!(
            r.status,
            400,
            "an empty delete would empty the table: {}",
            r.text()
        );
    }
    assert_eq!(
        count(host("h0"), &json!({})),
        1000,
        "an empty delete changed nothing"
    );

    // Durable like a write: a restart keeps every delete.
    stop(s);
    let s = sc.start();
    let a = s.addr.clone();
    let count = |series: Value| -> usize {
        let r = post(
            &a,
            "/api/v1/query",
            &json!({"table": "cpu", "series": series}),
        );
        r.json()["rows"].as_array().expect("rows").len()
    };
    assert_eq!(count(host("h1")), 500, "h1 after both deletes");
    assert_eq!(count(host("h3")), 999);
    // The next major compaction drops deleted cells from disk.
    let r = request(&a, "POST", "/api/v1/tables/cpu/flush", None, b"").expect("flush");
    assert_eq!(r.status, 204);
    let before = store_file_bytes(sc.data());
    let r = request(&a, "POST", "/api/v1/tables/cpu/compact", None, b"").expect("compact");
    assert_eq!(r.status, 204, "{}", r.text());
    let after = store_file_bytes(sc.data());
    assert!(
        after * 2 < full && after < before,
        "store files: {full} bytes written, {before} before compaction, {after} after"
    );
    assert_eq!(count(host("h0")), 1000);

    // A cell TTL per write (parameter) and per point (JSON): hidden once
    // passed, and never longer than the family's TTL.
    create_table(
        &a,
        &json!({"name": "ttl", "families": [{"name": "f", "ttl": 4}],
                "key": {"fields": [{"name": "metric", "type": "string", "width": 8},
                                   {"name": "host", "type": "string", "width": 8},
                                   {"name": "ts", "type": "reversed_timestamp"}]}}),
    );
    let now_rows = |h: &str| -> usize {
        let r = post(
            &a,
            "/api/v1/query",
            &json!({"table": "ttl", "series": [["metric", "cpu"], ["host", h]]}),
        );
        r.json()["rows"].as_array().expect("rows").len()
    };
    let write = |query: &str, ct: &str, body: &str| {
        let r = request(
            &a,
            "POST",
            &format!("/api/v1/write?table=ttl{query}"),
            Some(ct),
            body.as_bytes(),
        )
        .expect("write");
        assert_eq!(r.status, 204, "{}", r.text());
    };
    // Long enough for the reads below on a slow machine (300 ms was not,
    // on a CI run: the first cell had expired before it was read).
    write("&ttl_ms=1000", "text/plain", "cpu,host=short v=1\n");
    write(
        "",
        "application/json",
        &json!({"metric": "cpu", "tags": {"host": "json"}, "fields": {"v": 1}, "ttl_ms": 1000})
            .to_string(),
    );
    write("&ttl_ms=3600000", "text/plain", "cpu,host=long v=1\n");
    write("", "text/plain", "cpu,host=plain v=1\n");
    assert_eq!(
        (
            now_rows("short"),
            now_rows("json"),
            now_rows("long"),
            now_rows("plain")
        ),
        (1, 1, 1, 1)
    );
    std::thread::sleep(std::time::Duration::from_millis(1300));
    assert_eq!(
        (now_rows("short"), now_rows("json")),
        (0, 0),
        "past their cell TTL"
    );
    assert_eq!(now_rows("long"), 1);
    std::thread::sleep(std::time::Duration::from_millis(3000));
    assert_eq!(
        (now_rows("long"), now_rows("plain")),
        (0, 0),
        "past the family's TTL"
    );

    // ALTER DURABILITY, kept across a restart.
    let r = request(
        &a,
        "PATCH",
        "/api/v1/tables/cpu",
        Some("application/json"),
        br#"{"durability": "ASYNC_WAL"}"#,
    )
    .expect("alter");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["durability"], "ASYNC_WAL");
    assert_eq!(
        write_lines(
            &a,
            "cpu",
            "&precision=ms",
            &format!("cpu,host=h9 u=1 {T1}\n")
        )
        .status,
        204
    );
    stop(s);
    let s = sc.start();
    let r = request(&s.addr, "GET", "/api/v1/tables/cpu", None, b"").expect("describe");
    assert_eq!(r.json()["durability"], "ASYNC_WAL");
    stop(s);
}

#[test]
fn a_flush_through_the_api_that_leaves_many_files_schedules_a_compaction() {
    let sc = Scenario::new().build();
    let s = sc.start();
    let a = s.addr.clone();
    create_table(
        &a,
        &json!({"name": "fl", "families": [{"name": "f"}],
                "key": {"fields": [{"name": "metric", "type": "string", "width": 8},
                                   {"name": "host", "type": "string", "width": 8},
                                   {"name": "ts", "type": "timestamp"}]}}),
    );
    for i in 0..4u64 {
        let r = write_lines(
            &a,
            "fl",
            "&precision=ms",
            &format!("cpu,host=a v={i} {}\n", T1 + i),
        );
        assert_eq!(r.status, 204);
        let r = request(&a, "POST", "/api/v1/tables/fl/flush", None, b"").expect("flush");
        assert_eq!(r.status, 204, "{}", r.text());
    }
    let compactions = || -> f64 {
        let r = request(&a, "GET", "/metrics", None, b"").expect("metrics");
        r.text()
            .lines()
            .find(|l| l.starts_with("halite_compactions_total{") && l.contains("default:fl"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while compactions() < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "four flushed files and no compaction"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let r = post(
        &a,
        "/api/v1/query",
        &json!({"table": "fl", "series": [["metric", "cpu"]]}),
    );
    assert_eq!(r.json()["rows"].as_array().expect("rows").len(), 4);
    stop(s);
}

#[test]
fn the_global_memstore_limit_holds_after_writes_stop() {
    let sc = Scenario::new()
        .set("region.flush_size=\"128KiB\"")
        .set("region.global_memstore_size=\"256KiB\"")
        .build();
    let s = sc.start();
    let a = s.addr.clone();
    let mut t = table("mem", "reversed_timestamp", &[], None);
    t["key"]["salt"] = json!({"buckets": 16});
    create_table(&a, &t);
    let memstore = || -> f64 {
        let r = request(&a, "GET", "/metrics", None, b"").expect("metrics");
        r.text()
            .lines()
            .filter(|l| l.starts_with("halite_memstore_bytes{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    // One write under 256 KiB of text (one piece, so the limit is checked
    // once, before it) that leaves every region under its flush size and
    // all of them together over the global limit; then nothing more.
    let mut lines = String::new();
    let mut i = 0u64;
    while lines.len() < 200 * 1024 {
        lines.push_str(&format!(
            "cpu,host=h{} u={i}.5,s={i}.25,w={i} {}\n",
            i % 64,
            T1 + i
        ));
        i += 1;
    }
    assert_eq!(write_lines(&a, "mem", "&precision=ms", &lines).status, 204);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let bytes = memstore();
        if bytes <= 256.0 * 1024.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "MemStores hold {bytes} bytes 10 s after the last write, over the 256 KiB limit"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let r = post(
        &a,
        "/api/v1/query",
        &json!({"table": "mem", "series": [["metric", "cpu"]]}),
    );
    assert_eq!(r.json()["rows"].as_array().expect("rows").len() as u64, i);
    stop(s);
}

/// Makes `io_uring_setup` fail with ENOSYS in the child, as a container's
/// seccomp profile does (Docker's default blocks it).
fn block_io_uring(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    const IO_URING_SETUP: u32 = 425; // x86_64 and the generic table alike
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    // SAFETY: prctl only changes the child about to exec; the filter
    // program is plain data that outlives the call.
    unsafe {
        cmd.pre_exec(|| {
            let filter = [
                // Load the syscall number (seccomp_data.nr, offset 0).
                libc::sock_filter {
                    code: LD_W_ABS,
                    jt: 0,
                    jf: 0,
                    k: 0,
                },
                libc::sock_filter {
                    code: JEQ_K,
                    jt: 0,
                    jf: 1,
                    k: IO_URING_SETUP,
                },
                libc::sock_filter {
                    code: RET_K,
                    jt: 0,
                    jf: 0,
                    k: RET_ERRNO | libc::ENOSYS as u32,
                },
                libc::sock_filter {
                    code: RET_K,
                    jt: 0,
                    jf: 0,
                    k: RET_ALLOW,
                },
            ];
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, 2, &prog as *const libc::sock_fprog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn the_io_uring_fallback_and_region_splits_are_logged() {
    let sc = Scenario::new()
        .set("region.flush_size=\"64KiB\"")
        .set("region.global_memstore_size=\"64MiB\"")
        .set("region.max_size=\"64KiB\"")
        .set("region.split_check_interval=\"200ms\"")
        .env("RUST_LOG", "info")
        .build();
    let log_path = sc.dir().join("halite.log");
    let mut cmd = sc.command(&[]);
    cmd.stderr(std::fs::File::create(&log_path).expect("log"));
    block_io_uring(&mut cmd);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut srv = server::spawn_ready(cmd, sc.port);
    let addr = srv.addr.clone();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(log().contains("io_uring is unavailable"), "{}", log());
    let metrics = request(&addr, "GET", "/metrics", None, b"")
        .expect("metrics")
        .text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("halite_wal_backend_info") && l.contains("backend=\"sync\"")),
        "{metrics}"
    );
    // A region past max_size splits, and says so.
    let t = table("big", "reversed_timestamp", &[], None);
    let mut t = t;
    t["key"]["salt"] = Value::Null;
    create_table(&addr, &t);
    let mut lines = String::new();
    for i in 0..6000u64 {
        lines.push_str(&format!(
            "cpu,host=h{} u={i}.5,s=\"padding-{i:08}\" {}\n",
            i % 50,
            T1 + i
        ));
    }
    assert_eq!(
        write_lines(&addr, "big", "&precision=ms", &lines).status,
        204
    );
    let r = request(&addr, "POST", "/api/v1/tables/big/flush", None, b"").expect("flush");
    assert_eq!(r.status, 204);
    while !log().contains("region split") {
        assert!(
            std::time::Instant::now() < deadline,
            "no split logged: {}",
            log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: signals our own child.
    unsafe { libc::kill(srv.child.id() as i32, libc::SIGTERM) };
    assert!(srv.child.wait().expect("wait").success(), "{}", log());
}

#[test]
fn a_settled_data_directory_holds_its_data_not_empty_wal_segments() {
    let sc = Scenario::new()
        .set("wal.release_after_idle=\"300ms\"")
        .build();
    let s = sc.start();
    let a = s.addr.clone();
    let settled = |what: &str, limit: u64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let (all, sst) = (common::du(sc.data()), store_file_bytes(sc.data()));
            if all <= sst + limit {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: {all} bytes on disk for {sst} bytes of store files"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    // Empty: a few KiB, not a preallocated segment or two per WAL shard.
    settled("empty", 512 * 1024);
    let mut t = table("cpu", "reversed_timestamp", &[], None);
    t["key"]["salt"] = json!({"buckets": 8});
    create_table(&a, &t);
    for round in 0..4u64 {
        let mut lines = String::new();
        for i in 0..20_000u64 {
            let n = round * 20_000 + i;
            lines.push_str(&format!(
                "cpu,host=h{} u={}.5,s={} {}\n",
                n % 100,
                n % 977,
                n % 13,
                T1 + n
            ));
        }
        assert_eq!(write_lines(&a, "cpu", "&precision=ms", &lines).status, 204);
    }
    assert_eq!(post(&a, "/api/v1/tables/cpu/flush", &json!({})).status, 204);
    let r = request(&a, "POST", "/api/v1/tables/cpu/compact", None, b"").expect("compact");
    assert_eq!(r.status, 204);
    // Flushed, compacted and idle: the store files and little else.
    settled("after ingest, flush and compaction", 1024 * 1024);
    let r = post(
        &a,
        "/api/v1/query",
        &json!({"table": "cpu", "series": [["metric", "cpu"]], "limit": 1}),
    );
    assert_eq!(r.status, 200);
    stop(s);
}

/// `GET /api/v1/tables/{table}/series` lists each series once, with its
/// newest point's time and fields, for newest-first and oldest-first keys
/// (both found by seeking, not by reading the points), across salt buckets
/// and in key order; a listing cut by its limit says so; a table of open
/// tag sets lists its dictionary; bad requests are the documented 400s.
/// And the explorer's page and files are served, the unknown one a 404.
#[test]
fn series_listings_and_the_explorer_files_answer_as_documented() {
    let sc = Scenario::new().build();
    let s = sc.start();
    let a = s.addr.clone();
    let get = |path: &str| request(&a, "GET", path, None, b"").expect("get");
    for (name, time_type) in [("newest", "reversed_timestamp"), ("oldest", "timestamp")] {
        let mut t = table(name, time_type, &[], None);
        t["key"]["salt"] = json!({"buckets": 4});
        create_table(&a, &t);
        let mut lines = String::new();
        for i in 0..50u64 {
            for h in 0..7u64 {
                // Host 3 stops early; host 5 writes a second field late.
                if h == 3 && i >= 20 {
                    continue;
                }
                let extra = if h == 5 && i == 49 { ",z=1i" } else { "" };
                lines.push_str(&format!("cpu,host=h{h} u={i}{extra} {}\n", T1 + i * 1000));
            }
        }
        lines.push_str(&format!("mem,host=h0 free=1 {}\n", T1));
        assert_eq!(write_lines(&a, name, "&precision=ms", &lines).status, 204);
        if name == "oldest" {
            // Some of it in store files: the listing merges both.
            assert_eq!(
                post(&a, &format!("/api/v1/tables/{name}/flush"), &json!({})).status,
                204
            );
        }
        let r = get(&format!("/api/v1/tables/{name}/series"));
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["key_fields"], json!(["metric", "host"]));
        assert_eq!(v["truncated"], json!(false));
        let got: Vec<(String, String, u64, Value)> = v["series"]
            .as_array()
            .expect("series")
            .iter()
            .map(|s| {
                (
                    s["key"]["metric"].as_str().expect("metric").to_string(),
                    s["key"]["host"].as_str().expect("host").to_string(),
                    s["newest_ms"].as_u64().expect("newest_ms"),
                    s["fields"].clone(),
                )
            })
            .collect();
        let mut want: Vec<(String, String, u64, Value)> = (0..7u64)
            .map(|h| {
                let newest = if h == 3 { 19 } else { 49 };
                let fields = if h == 5 {
                    json!(["u", "z"])
                } else {
                    json!(["u"])
                };
                ("cpu".into(), format!("h{h}"), T1 + newest * 1000, fields)
            })
            .collect();
        want.push(("mem".into(), "h0".into(), T1, json!(["free"])));
        assert_eq!(got, want, "{name}");
        let cut = get(&format!("/api/v1/tables/{name}/series?limit=3")).json();
        assert_eq!(cut["series"].as_array().map(Vec::len), Some(3));
        assert_eq!(cut["truncated"], json!(true));
    }
    for bad in ["limit=0", "limit=10001", "limit=x", "start=1"] {
        let r = get(&format!("/api/v1/tables/newest/series?{bad}"));
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert!(r.json()["error"]["message"].is_string(), "{bad}");
    }
    assert_eq!(get("/api/v1/tables/nope/series").status, 404);

    // A table of open tag sets lists its dictionary.
    let r = request(
        &a,
        "POST",
        "/query",
        Some("application/x-www-form-urlencoded"),
        b"q=CREATE+DATABASE+telegraf",
    )
    .expect("create database");
    assert_eq!(r.status, 200);
    let r = request(
        &a,
        "POST",
        "/write?db=telegraf",
        Some("text/plain"),
        b"disk,host=a,path=/ used=1i,free=2i 1700000000000000000\ndisk,host=b,path=/ used=3i 1700000000000000000\n",
    )
    .expect("influx write");
    assert_eq!(r.status, 204, "{}", r.text());
    let v = get("/api/v1/tables/telegraf:disk/series").json();
    assert_eq!(v["open_tags"], json!(true));
    assert_eq!(
        v["series"],
        json!([
            {"metric": "disk", "tags": {"host": "a", "path": "/"}, "fields": ["free", "used"]},
            {"metric": "disk", "tags": {"host": "b", "path": "/"}, "fields": ["free", "used"]},
        ])
    );

    // The explorer: its page, its files, and a 404 in the API's shape.
    let page = get("/");
    assert_eq!(page.status, 200);
    assert!(page.text().contains("halite explorer"));
    let header = |r: &common::http::Response, name: &str| {
        r.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    assert!(header(&page, "content-type").is_some_and(|v| v.starts_with("text/html")));
    assert!(
        header(&page, "content-security-policy").is_some_and(|v| v.contains("default-src 'self'"))
    );
    for (file, kind) in [
        ("app.js", "text/javascript"),
        ("app.css", "text/css"),
        ("uPlot.iife.min.js", "text/javascript"),
        ("uPlot.min.css", "text/css"),
        ("uPlot.LICENSE", "text/plain"),
    ] {
        let r = get(&format!("/ui/{file}"));
        assert_eq!(r.status, 200, "{file}");
        assert!(
            header(&r, "content-type").is_some_and(|v| v.starts_with(kind)),
            "{file}"
        );
        assert!(!r.body.is_empty(), "{file}");
    }
    let missing = get("/ui/secret.txt");
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["code"], json!("not_found"));
    stop(s);
}
