//! What a hostile or careless client sends (issue #57), against the real
//! server: statements nested or chained past any dashboard's, names too
//! long for the dictionary, zero bytes as a remote write, a tag named
//! twice and times past 2262 through every door, and inputs whose errors
//! would quote megabytes. Each is answered, with an error naming the
//! problem where it is refused, and leaves nothing behind: the server
//! stays up, and later writes of new series are taken. (A page of another
//! site, in a real browser: tests/explorer.rs.)

mod common;

use common::http::request_with;
use common::scenario::Scenario;
use common::server::stop;
use halite::ingest::remote_write::{Series, encode_write_request};
use serde_json::json;

fn post(addr: &str, path: &str, content_type: &str, body: &[u8]) -> common::http::Response {
    request_with(addr, "POST", path, &[("Content-Type", content_type)], body).expect("request")
}

fn influxql(addr: &str, db: &str, q: &str) -> common::http::Response {
    let form = serde_urlencoded::to_string([("q", q)]).expect("form");
    post(
        addr,
        &format!("/query?db={db}"),
        "application/x-www-form-urlencoded",
        form.as_bytes(),
    )
}

fn remote_write(addr: &str, body: &[u8]) -> common::http::Response {
    request_with(
        addr,
        "POST",
        "/api/v1/write",
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "snappy"),
            ("X-Prometheus-Remote-Write-Version", "0.1.0"),
        ],
        body,
    )
    .expect("remote write")
}

fn sample(labels: &[(&str, &str)], value: f64, ms: i64) -> Series {
    Series {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        samples: vec![(value, ms)],
    }
}

fn alive(srv: &mut common::server::Server) {
    assert!(
        matches!(srv.child.try_wait(), Ok(None)),
        "the server died: {:?}",
        srv.child.try_wait()
    );
    let r = request_with(&srv.addr, "GET", "/readyz", &[], b"").expect("readyz");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// The `host` values of `SELECT * FROM cpu` answered by `r`, sorted.
fn hosts_of(r: &common::http::Response) -> Vec<String> {
    assert_eq!(r.status, 200, "{}", r.text());
    let answer = r.json();
    let series = &answer["results"][0]["series"][0];
    let column = series["columns"]
        .as_array()
        .and_then(|c| c.iter().position(|c| c == "host"))
        .unwrap_or_else(|| panic!("no host column: {answer}"));
    let mut hosts: Vec<String> = series["values"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|row| row[column].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// Database `d` with 20 points of `cpu`, a minute apart up to now, of
/// hosts `h0`…`h3`; the time of the newest (ns).
fn twenty_cpu_points(addr: &str) -> i64 {
    assert_eq!(influxql(addr, "", "CREATE DATABASE d").status, 200);
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as i64;
    let lines: String = (0..20)
        .map(|i| {
            format!(
                "cpu,host=h{} v={i} {}\n",
                i % 4,
                now_ns - i * 60_000_000_000
            )
        })
        .collect();
    let w = post(addr, "/write?db=d", "text/plain", lines.as_bytes());
    assert_eq!(w.status, 204, "{}", w.text());
    now_ns
}

/// Parentheses thousands deep, unbalanced ones, and chains of thousands
/// of ANDs and ORs (a dashboard variable expanded into ORs): the server
/// used to abort on each (`stack overflow`, every connection lost). Deep
/// nesting is a 400 naming the limit; long chains are answered.
#[test]
fn nested_and_long_influxql_is_answered_not_a_crash() {
    let sc = Scenario::new().build();
    let mut srv = sc.start();
    let addr = srv.addr.clone();
    assert_eq!(influxql(&addr, "", "CREATE DATABASE d").status, 200);
    let lines: String = (0..50)
        .map(|i| format!("cpu,host=h{i} v={i} 1700000000000000000\n"))
        .collect();
    let w = post(&addr, "/write?db=d", "text/plain", lines.as_bytes());
    assert_eq!(w.status, 204, "{}", w.text());

    let deep = format!(
        "SELECT * FROM cpu WHERE {}host = 'h1'{}",
        "(".repeat(3000),
        ")".repeat(3000)
    );
    let unbalanced = format!("SELECT * FROM cpu WHERE {}", "(".repeat(10_000));
    for q in [&deep, &unbalanced] {
        let r = influxql(&addr, "d", q);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(
            r.text().contains("more than 100 deep"),
            "the error names the limit: {}",
            r.text()
        );
        alive(&mut srv);
    }
    // As deep as the limit is still answered.
    let at_limit = format!(
        "SELECT * FROM cpu WHERE {}host = 'h1'{}",
        "(".repeat(100),
        ")".repeat(100)
    );
    assert_eq!(hosts_of(&influxql(&addr, "d", &at_limit)), ["h1"]);

    let ors = (0..7000)
        .map(|i| format!("host = 'h{}'", i * 7))
        .collect::<Vec<_>>()
        .join(" OR ");
    let r = influxql(&addr, "d", &format!("SELECT * FROM cpu WHERE {ors}"));
    let want: Vec<String> = {
        let mut h: Vec<String> = (0..50)
            .filter(|i| i % 7 == 0)
            .map(|i| format!("h{i}"))
            .collect();
        h.sort();
        h
    };
    assert_eq!(hosts_of(&r), want);
    let ands = (0..5000)
        .map(|i| format!("v >= {}", i % 40))
        .collect::<Vec<_>>()
        .join(" AND ");
    let r = influxql(&addr, "d", &format!("SELECT * FROM cpu WHERE {ands}"));
    let mut want: Vec<String> = (39..50).map(|i| format!("h{i}")).collect();
    want.sort();
    assert_eq!(hosts_of(&r), want);
    // Chains inside parentheses inside chains.
    let nested =
        format!("SELECT * FROM cpu WHERE ({ors}) AND ((v >= 40 AND v < 45) OR host = 'h7')");
    assert_eq!(hosts_of(&influxql(&addr, "d", &nested)), ["h42", "h7"]);
    alive(&mut srv);
    stop(srv);
}

/// A tag value, tag key, field key or Prometheus label too long for the
/// dictionary was refused, but its entry stayed behind, and every later
/// write of something new (a new host, another measurement) failed with
/// the same error until a restart. Now the point alone is refused, and a
/// refused point records nothing: the dictionary's table does not grow
/// with points refused at the series limit either.
#[test]
fn a_refused_point_leaves_nothing_behind() {
    let sc = Scenario::new().set("influx.series_limit=5").build();
    let srv = sc.start();
    let addr = srv.addr.clone();
    assert_eq!(influxql(&addr, "", "CREATE DATABASE bad").status, 200);
    let write = |body: &str| post(&addr, "/write?db=bad", "text/plain", body.as_bytes());
    assert_eq!(write("cpu,host=h1 v=1").status, 204);
    let long = "x".repeat(65_536);
    let refused = [
        format!("cpu,host={long} v=1"),
        format!("cpu,{long}=a v=1"),
        format!("cpu,host=h9 {long}=1"),
        format!("{long},host=h1 v=1"),
    ];
    for (i, bad) in refused.iter().enumerate() {
        let r = write(bad);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(
            r.text().len() < 2048,
            "a bounded error: {} bytes",
            r.text().len()
        );
        // A new series and another measurement after it.
        let r = write(&format!("cpu,host=new{i} v=2"));
        assert_eq!(r.status, 204, "after refusing {i}: {}", r.text());
    }
    let r = write("other,host=h1 v=3");
    assert_eq!(r.status, 204, "{}", r.text());

    // Prometheus' samples: a 64 KiB label value, then a new series.
    let r = remote_write(
        &addr,
        &encode_write_request(&[sample(&[("__name__", "up"), ("job", &long)], 1.0, 1_000)]),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let r = remote_write(
        &addr,
        &encode_write_request(&[sample(&[("__name__", "up"), ("job", "a")], 1.0, 1_000)]),
    );
    assert_eq!(r.status, 204, "{}", r.text());

    // cpu holds h1 and new0..new3, its limit of five. Count what the
    // dictionary holds, refuse many new series, count again.
    let tags_rows = || {
        let r = post(
            &addr,
            "/api/v1/tables/bad:__tags/scan",
            "application/json",
            br#"{"limit": 100000}"#,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["rows"].as_array().map_or(0, Vec::len)
    };
    let before = tags_rows();
    let many: String = (0..200)
        .map(|i| format!("cpu,host=refused{i},rack=r{i} v=1\n"))
        .collect();
    let r = write(&many);
    assert_eq!(r.status, 503, "the series limit: {}", r.text());
    assert_eq!(
        tags_rows(),
        before,
        "refused points left dictionary entries"
    );
    stop(srv);
}

/// 64 MiB of zero bytes was a valid remote write (204, nothing written):
/// field number 0 is no protobuf.
#[test]
fn zero_bytes_are_not_a_remote_write() {
    let sc = Scenario::new().build();
    let srv = sc.start();
    let zeros = snap::raw::Encoder::new()
        .compress_vec(&vec![0u8; 64 << 20])
        .expect("compress");
    let r = remote_write(&srv.addr, &zeros);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("field number"), "{}", r.text());
    stop(srv);
}

/// One rule for what each door used to resolve its own way: a tag (or
/// label) named twice is refused (InfluxDB's `duplicate tags`), where
/// `/api/v1/write` took the first; a key named twice in a JSON point is
/// refused, where the last won; a time past 2262 (InfluxDB's range) is
/// refused in a table of milliseconds too, where the year 292,278,994
/// was stored. A field named twice is the last, as InfluxDB's.
#[test]
fn every_door_keeps_one_rule_for_ambiguous_points() {
    let sc = Scenario::new().example_config().build();
    let srv = sc.start();
    let addr = srv.addr.clone();
    assert_eq!(influxql(&addr, "", "CREATE DATABASE d").status, 200);
    let made = post(
        &addr,
        "/write?db=d",
        "text/plain",
        b"cpu,host=first usage_user=0 1",
    );
    assert_eq!(made.status, 204, "{}", made.text());
    let refused = |r: common::http::Response, reason: &str, door: &str| {
        assert_eq!(r.status, 400, "{door}: {}", r.text());
        assert!(r.text().contains(reason), "{door}: {}", r.text());
    };
    let far = "9223372036854775807";
    // InfluxDB's /write.
    let influx = |body: &str| {
        post(
            &addr,
            "/write?db=d&precision=ms",
            "text/plain",
            body.as_bytes(),
        )
    };
    refused(
        influx("cpu,host=a,host=b v=1 1000"),
        "duplicate tags",
        "/write",
    );
    refused(
        influx(&format!("cpu,host=a v=1 {far}")),
        "out of range",
        "/write",
    );
    // halite's own write: open tags, a declared key, JSON.
    let native = |table: &str, ct: &str, body: &str| {
        post(
            &addr,
            &format!("/api/v1/write?table={table}&precision=ms"),
            ct,
            body.as_bytes(),
        )
    };
    for table in ["d:cpu", "metrics:cpu"] {
        let door = format!("/api/v1/write {table}");
        refused(
            native(table, "text/plain", "cpu,host=a,host=b usage_user=1 1000"),
            "duplicate tags",
            &door,
        );
        refused(
            native(
                table,
                "text/plain",
                &format!("cpu,host=a usage_user=1 {far}"),
            ),
            "out of range",
            &door,
        );
        refused(
            native(
                table,
                "application/json",
                r#"{"metric": "cpu", "tags": {"host": "a", "host": "b"}, "ts": 1000, "fields": {"usage_user": 1.0}}"#,
            ),
            "duplicate tags",
            &door,
        );
        refused(
            native(
                table,
                "application/json",
                r#"{"metric": "cpu", "ts": 1000, "ts": 2000, "tags": {"host": "a"}, "fields": {"usage_user": 1.0}}"#,
            ),
            "key `ts` is given twice",
            &door,
        );
        refused(
            native(
                table,
                "application/json",
                &format!(
                    r#"{{"metric": "cpu", "tags": {{"host": "a"}}, "ts": {far}, "fields": {{"usage_user": 1.0}}}}"#
                ),
            ),
            "out of range",
            &door,
        );
        // A field twice: the last, through line protocol and JSON.
        let r = native(
            table,
            "text/plain",
            "cpu,host=twice usage_user=1,usage_user=2 1000",
        );
        assert_eq!(r.status, 204, "{door}: {}", r.text());
        let r = native(
            table,
            "application/json",
            r#"{"metric": "cpu", "tags": {"host": "twice"}, "ts": 2000, "fields": {"usage_user": 3.0, "usage_user": 4.0}}"#,
        );
        assert_eq!(r.status, 204, "{door}: {}", r.text());
        let mut values: Vec<f64> = if table == "metrics:cpu" {
            let q = post(
                &addr,
                "/api/v1/query",
                "application/json",
                json!({"table": table, "series": [["metric", "cpu"], ["host", "twice"]]})
                    .to_string()
                    .as_bytes(),
            );
            assert_eq!(q.status, 200, "{}", q.text());
            q.json()["rows"]
                .as_array()
                .expect("rows")
                .iter()
                .flat_map(|r| r["cells"].as_array().cloned().unwrap_or_default())
                .filter(|c| c["qualifier"] == "usage_user")
                .filter_map(|c| c["value"].as_f64())
                .collect()
        } else {
            let q = influxql(
                &addr,
                "d",
                "SELECT usage_user FROM cpu WHERE host = 'twice'",
            );
            assert_eq!(q.status, 200, "{}", q.text());
            q.json()["results"][0]["series"][0]["values"]
                .as_array()
                .expect("values")
                .iter()
                .filter_map(|row| row[1].as_f64())
                .collect()
        };
        values.sort_by(f64::total_cmp);
        assert_eq!(values, [2.0, 4.0], "{door}");
    }
    // Prometheus' remote write.
    refused(
        remote_write(
            &addr,
            &encode_write_request(&[sample(
                &[("__name__", "up"), ("job", "a"), ("job", "b")],
                1.0,
                1_000,
            )]),
        ),
        "not unique",
        "remote write",
    );
    refused(
        remote_write(
            &addr,
            &encode_write_request(&[sample(&[("__name__", "up"), ("job", "a")], 1.0, i64::MAX)]),
        ),
        "out of range",
        "remote write",
    );
    stop(srv);
}

/// Errors quote a bounded prefix of what they refuse: one bad 20 MB line
/// came back as a 20 MB error, 100,000 bad lines as 10.8 MB, a path of
/// 10,000 characters whole.
#[test]
fn errors_stay_small_whatever_they_refuse() {
    let sc = Scenario::new().example_config().build();
    let srv = sc.start();
    let addr = srv.addr.clone();
    assert_eq!(influxql(&addr, "", "CREATE DATABASE d").status, 200);
    let huge_line = format!("cpu,host=a {}\n", "x".repeat(20_000_000));
    let many_bad: String = (0..100_000).map(|i| format!("bad line {i}\n")).collect();
    for (path, body) in [
        ("/write?db=d", &huge_line),
        ("/write?db=d", &many_bad),
        ("/api/v1/write?table=metrics:cpu", &huge_line),
        ("/api/v1/write?table=metrics:cpu", &many_bad),
        ("/api/v1/write?table=d:cpu", &many_bad),
    ] {
        let r = post(&addr, path, "text/plain", body.as_bytes());
        assert_eq!(r.status, 400, "{path}");
        assert!(
            r.body.len() < 40_000,
            "{path}: a {} byte error: {}",
            r.body.len(),
            String::from_utf8_lossy(&r.body[..2000.min(r.body.len())])
        );
    }
    let r = post(&addr, "/write?db=d", "text/plain", many_bad.as_bytes());
    assert!(
        r.text().contains("… and 99900 more"),
        "{}",
        &r.text()[..500]
    );
    let r = post(
        &addr,
        "/api/v1/write?table=metrics:cpu",
        "text/plain",
        many_bad.as_bytes(),
    );
    assert_eq!(r.json()["rejected_count"], json!(100_000));
    assert_eq!(r.json()["rejected"].as_array().map(Vec::len), Some(100));
    let long = "a".repeat(10_000);
    for path in [
        format!("/{long}"),
        format!("/api/v1/tables/{long}"),
        format!("/api/v1/tables/ns:{long}/scan"),
    ] {
        let r = request_with(&addr, "GET", &path, &[], b"").expect("request");
        assert!(r.status >= 400, "{}", r.status);
        assert!(r.body.len() < 1024, "a {} byte error", r.body.len());
    }
    let r = influxql(
        &addr,
        "d",
        &format!("SELECT * FROM cpu WHERE host = '{long}' garbage"),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.body.len() < 1024, "a {} byte error", r.body.len());
    let r = influxql(&addr, &long, "SELECT * FROM cpu");
    assert!(r.body.len() < 1024, "a {} byte error", r.body.len());
    stop(srv);
}

/// A gzipped body to `/api/v1/write` was read as its compressed bytes
/// ("not UTF-8"): every write route inflates gzip now, refuses a body
/// that is not what its encoding says, and an encoding it does not read.
#[test]
fn every_write_route_reads_gzip_and_names_what_it_cannot_read() {
    use std::io::Write;
    let gzip = |bytes: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).expect("gzip");
        e.finish().expect("gzip")
    };
    let sc = Scenario::new().example_config().build();
    let srv = sc.start();
    let addr = srv.addr.clone();
    assert_eq!(influxql(&addr, "", "CREATE DATABASE d").status, 200);
    let send = |path: &str, ct: &str, encoding: &str, body: &[u8]| {
        request_with(
            &addr,
            "POST",
            path,
            &[("Content-Type", ct), ("Content-Encoding", encoding)],
            body,
        )
        .expect("request")
    };
    let line = b"cpu,host=gz usage_user=1.5 1700000000000";
    let json_point =
        br#"{"metric": "cpu", "tags": {"host": "gz"}, "ts": 1700000001000, "fields": {"usage_user": 2.5}}"#;
    // InfluxDB's /write first: it makes the measurement `d:cpu`.
    for path in [
        "/write?db=d&precision=ms",
        "/api/v1/write?table=metrics:cpu&precision=ms",
        "/api/v1/write?table=d:cpu&precision=ms",
    ] {
        let r = send(path, "text/plain", "gzip", &gzip(line));
        assert_eq!(r.status, 204, "{path}: {}", r.text());
        let r = send(path, "text/plain", "gzip", line);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert!(r.text().contains("not gzip"), "{path}: {}", r.text());
        let r = send(path, "text/plain", "br", line);
        assert_eq!(r.status, 415, "{path}: {}", r.text());
        assert!(r.text().contains("`br`"), "{path}: {}", r.text());
    }
    let r = send(
        "/api/v1/write?table=metrics:cpu&precision=ms",
        "application/json",
        "gzip",
        &gzip(json_point),
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let q = post(
        &addr,
        "/api/v1/query",
        "application/json",
        json!({"table": "metrics:cpu", "series": [["metric", "cpu"], ["host", "gz"]]})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(
        q.json()["rows"].as_array().map(Vec::len),
        Some(2),
        "{}",
        q.text()
    );
    stop(srv);
}

/// A request hyper cannot parse (a malformed or repeated
/// `Content-Length`) got a bare 400 with no body: it says why now.
#[test]
fn a_request_that_is_not_http_is_told_why() {
    use std::io::{Read, Write};
    let sc = Scenario::new().build();
    let srv = sc.start();
    for head in [
        "POST /api/v1/write?table=x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\nhello",
        "POST /write?db=d HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    ] {
        let mut c = std::net::TcpStream::connect(&srv.addr).expect("connect");
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        c.write_all(head.as_bytes()).expect("send");
        let mut answer = String::new();
        let _ = c.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        let (_, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
        let body: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("Content-Length")),
            "{body}"
        );
    }
    // And the server goes on answering.
    let r = request_with(&srv.addr, "GET", "/readyz", &[], b"").expect("readyz");
    assert_eq!(r.status, 200);
    stop(srv);
}

/// Requests of a few bytes that asked for gigabytes, or killed a query
/// thread for good (found by reading the code, issue #58's session): each
/// is now refused with an error naming its limit, and the server answers
/// the next request as before.
/// - 500 functions over a million buckets (≈15 GB of answer), and the same
///   statement repeated until the request's answers pass their bound;
/// - an InfluxQL query of megabytes (the parser holds words a character);
/// - a native aggregate of a hundred functions;
/// - remote write of a series of 300 labels, and of a million and one
///   empty series (48 bytes each read, two sent);
/// - remote read of 101 queries;
/// - a raw row delete whose key is too short for the table's fields: every
///   aggregate over the table then panicked a query thread, and after as
///   many queries as threads every query answered 503.
#[test]
fn small_requests_that_asked_for_gigabytes_are_refused_naming_the_limit() {
    let sc = Scenario::new().build();
    let mut srv = sc.start();
    let addr = srv.addr.clone();
    let now_ns = twenty_cpu_points(&addr);

    let error_of = |r: &common::http::Response| -> String {
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["results"][0]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error: {}", r.text()))
            .to_string()
    };
    let calls = vec!["count(v)"; 500].join(", ");
    let wide = format!("SELECT {calls} FROM cpu WHERE time > now() - 11d GROUP BY time(1s)");
    let e = error_of(&influxql(&addr, "d", &wide));
    assert!(e.contains("more than 5000000 values"), "{e}");
    alive(&mut srv);
    // A raw statement repeating `*` asks for a cell per column per point:
    // 3,000 points and 2,000 stars were 12M cells from a 4 KB query.
    let lines: String = (0..3_000)
        .map(|i| format!("many,host=h{} v={i} {}\n", i % 4, now_ns - i * 1_000_000))
        .collect();
    let w = post(&addr, "/write?db=d", "text/plain", lines.as_bytes());
    assert_eq!(w.status, 204, "{}", w.text());
    let stars = vec!["*"; 2_000].join(",");
    let e = error_of(&influxql(&addr, "d", &format!("SELECT {stars} FROM many")));
    assert!(
        e.contains("over 5000000, and it names a column twice or one the measurement lacks"),
        "{e}"
    );
    alive(&mut srv);
    // Each column once, or a few twice over few points, is answered.
    for q in [
        "SELECT * FROM many",
        "SELECT *, * FROM cpu",
        "SELECT v, nothing FROM many",
    ] {
        let r = influxql(&addr, "d", q);
        assert_eq!(r.status, 200, "{q}: {}", r.text());
        let answer = r.json();
        assert!(answer["results"][0].get("error").is_none(), "{q}: {answer}");
    }
    // The same functions whose answer a LIMIT or fill(none) keeps small
    // are answered.
    for tail in ["LIMIT 10", "fill(none)"] {
        let r = influxql(&addr, "d", &format!("{wide} {tail}"));
        assert_eq!(r.status, 200, "{}", r.text());
        let answer = r.json();
        assert!(
            answer["results"][0].get("error").is_none(),
            "{tail}: {answer}"
        );
        let rows = answer["results"][0]["series"][0]["values"]
            .as_array()
            .map(Vec::len);
        let want = if tail == "LIMIT 10" { 10 } else { 20 };
        assert_eq!(rows, Some(want), "{tail}");
    }
    // Each statement alone is answered (1.9M values); six of them are not.
    let one = "SELECT count(v) FROM cpu WHERE time > now() - 11d GROUP BY time(1s)";
    let r = influxql(&addr, "d", one);
    assert_eq!(r.status, 200);
    let values = r.json()["results"][0]["series"][0]["values"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    assert!(values > 900_000, "{values} buckets");
    let six = [one; 6].join("; ");
    let r = influxql(&addr, "d", &six);
    assert_eq!(r.status, 200);
    let results = r.json()["results"].as_array().cloned().expect("results");
    assert_eq!(results.len(), 6, "stops at the statement past the bound");
    let e = results[5]["error"].as_str().unwrap_or_default().to_string();
    assert!(e.contains("more than 10000000 values"), "{e}");
    alive(&mut srv);
    // Chunks of one row each: as many pieces as rows, in order.
    let r = request_with(
        &addr,
        "GET",
        &format!(
            "/query?db=d&chunked=true&chunk_size=1&q={}",
            serde_urlencoded::to_string([("x", "SELECT v FROM cpu WHERE host = 'h1'")])
                .expect("q")
                .trim_start_matches("x=")
        ),
        &[],
        b"",
    )
    .expect("chunked");
    assert_eq!(r.status, 200, "{}", r.text());
    let pieces: Vec<serde_json::Value> = r
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(pieces.len(), 5, "{}", r.text());
    assert!(
        pieces[..4]
            .iter()
            .all(|p| p["results"][0]["partial"] == true)
    );
    assert!(pieces[4]["results"][0].get("partial").is_none());
    let q = format!(
        "SELECT v FROM cpu WHERE {}",
        vec!["v = 1"; 200_000].join(" OR ")
    );
    let r = influxql(&addr, "d", &q);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("over halite's limit of 1048576"),
        "{}",
        r.text()
    );
    alive(&mut srv);

    // The native API: a table whose key has a field after its time.
    let table = json!({
        "name": "d:k",
        "families": [{"name": "f"}],
        "key": {
            "fields": [
                {"name": "ts", "type": "reversed_timestamp"},
                {"name": "host", "type": "string", "width": 8}
            ],
            "salt": {"buckets": 4}
        }
    });
    let created = post(
        &addr,
        "/api/v1/tables",
        "application/json",
        table.to_string().as_bytes(),
    );
    assert_eq!(created.status, 201, "{}", created.text());
    let now_ms = now_ns / 1_000_000;
    let rows: String = (0..8)
        .map(|i| format!("m,host=h{i} v={i} {}\n", now_ms - i * 1000))
        .collect();
    let w = post(
        &addr,
        "/api/v1/write?table=d:k&precision=ms",
        "text/plain",
        rows.as_bytes(),
    );
    assert_eq!(w.status, 204, "{}", w.text());
    let aggregate = |functions: serde_json::Value| {
        post(
            &addr,
            "/api/v1/query",
            "application/json",
            json!({"table": "d:k", "start_ms": now_ms - 3_600_000, "end_ms": now_ms + 1,
                   "aggregate": {"functions": functions}})
            .to_string()
            .as_bytes(),
        )
    };
    let r = aggregate(json!(vec!["min"; 100]));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("at most 64"), "{}", r.text());
    // A salt byte and a time, no host: a key no series has.
    let short = format!("00{:016x}", u64::MAX - now_ms as u64);
    let d = post(
        &addr,
        "/api/v1/tables/d:k/delete",
        "application/json",
        json!({ "row": short }).to_string().as_bytes(),
    );
    assert_eq!(d.status, 200, "{}", d.text());
    for _ in 0..6 {
        let r = aggregate(json!(["count"]));
        assert_eq!(r.status, 200, "{}", r.text());
        let counted: f64 = r.json()["aggregates"]
            .as_array()
            .expect("aggregates")
            .iter()
            .map(|a| a["values"]["count"].as_f64().unwrap_or(0.0))
            .sum();
        assert_eq!(counted, 8.0, "{}", r.text());
    }
    alive(&mut srv);

    // Prometheus' doors.
    let labels: Vec<(String, String)> = std::iter::once(("__name__".to_string(), "up".to_string()))
        .chain((0..299).map(|i| (format!("l{i}"), "x".to_string())))
        .collect();
    let wide = Series {
        labels,
        samples: vec![(1.0, now_ms)],
    };
    let r = remote_write(&addr, &encode_write_request(&[wide]));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("more than 256 labels"), "{}", r.text());
    let empty_series = [0x0a, 0x00].repeat(1_000_001);
    let body = snap::raw::Encoder::new()
        .compress_vec(&empty_series)
        .expect("compress");
    let r = remote_write(&addr, &body);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("more than 1000000 series"),
        "{}",
        r.text()
    );
    // ReadRequest { queries: [Query { start 0, end 1 }] × 101 }.
    let queries = [0x0a, 0x04, 0x08, 0x00, 0x10, 0x01].repeat(101);
    let body = snap::raw::Encoder::new()
        .compress_vec(&queries)
        .expect("compress");
    let r = request_with(
        &addr,
        "POST",
        "/api/v1/read",
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "snappy"),
        ],
        &body,
    )
    .expect("remote read");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("more than 100 queries"), "{}", r.text());
    let ok = remote_write(
        &addr,
        &encode_write_request(&[sample(&[("__name__", "up"), ("job", "j")], 1.0, now_ms)]),
    );
    assert_eq!(ok.status, 204, "{}", ok.text());
    alive(&mut srv);
    stop(srv);
}

/// The server's resident memory at its peak since the last reset, in MiB
/// (Linux's `VmHWM`).
fn peak_mib(srv: &common::server::Server) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", srv.child.id())).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb / 1024)
        .expect("VmHWM")
}

/// Sets the peak back to what the server holds now (writing 5 to
/// `clear_refs`, Linux 4.0 on).
fn reset_peak(srv: &common::server::Server) {
    std::fs::write(format!("/proc/{}/clear_refs", srv.child.id()), "5").expect("clear_refs");
}

/// How far above what it held the server's memory rose while answering
/// `ask`, in MiB, and the answer.
fn memory_for(
    srv: &common::server::Server,
    ask: impl FnOnce() -> common::http::Response,
) -> (u64, common::http::Response) {
    reset_peak(srv);
    let before = peak_mib(srv);
    let answer = ask();
    (peak_mib(srv).saturating_sub(before), answer)
}

/// Requests of a few kilobytes that each took gigabytes (by reading, then
/// measured): a GROUP BY time(1s) of 500 functions over 11 days with
/// LIMIT 10 made every one of its 950,400 rows (11 GB, 53 s) to answer
/// ten; a 24 KB gzipped write of 12.5M bad lines kept a reason per line
/// (2.9 GB) to list a hundred; a 3 MB remote write of 31M empty samples
/// read them all (half a gigabyte) before counting them. Each server is
/// fresh, so the memory a request takes is its own. The answers are the
/// same as before.
#[test]
fn small_requests_take_little_memory() {
    const MAX_MIB: u64 = 300;
    let mut took: Vec<(&str, u64)> = Vec::new();
    let sc = Scenario::new().build();
    let mut srv = sc.start();
    let now_ns = twenty_cpu_points(&srv.addr);
    let calls = vec!["count(v)"; 500].join(", ");
    let q = format!("SELECT {calls} FROM cpu WHERE time > now() - 11d GROUP BY time(1s) LIMIT 10");
    let (mib, r) = memory_for(&srv, || influxql(&srv.addr, "d", &q));
    eprintln!("GROUP BY time(1s) LIMIT 10: {mib} MiB");
    took.push(("GROUP BY time LIMIT 10", mib));
    let answer = r.json();
    let rows = answer["results"][0]["series"][0]["values"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(rows.len(), 10, "{}", &r.text()[..500.min(r.text().len())]);
    assert_eq!(rows[0].as_array().map(Vec::len), Some(501));
    // A transformation's leaves are selected whole, LIMIT applying after
    // it: 950,400 buckets of one call are answered, five calls refused.
    let q = "SELECT non_negative_derivative(mean(v), 1s) FROM cpu WHERE time > now() - 11d GROUP BY time(1s) LIMIT 10";
    let (mib, r) = memory_for(&srv, || influxql(&srv.addr, "d", q));
    eprintln!("derivative GROUP BY time(1s) LIMIT 10: {mib} MiB");
    took.push(("derivative GROUP BY time LIMIT 10", mib));
    assert_eq!(r.status, 200, "{}", r.text());
    let answer = r.json();
    assert!(answer["results"][0]["error"].is_null(), "{answer}");
    let calls = ["derivative(mean(v))"; 5].join(", ");
    let q = format!("SELECT {calls} FROM cpu WHERE time > now() - 11d GROUP BY time(1s) LIMIT 10");
    let (mib, r) = memory_for(&srv, || influxql(&srv.addr, "d", &q));
    eprintln!("5 derivatives GROUP BY time(1s) LIMIT 10: {mib} MiB");
    took.push(("5 derivatives GROUP BY time LIMIT 10", mib));
    assert!(
        r.text().contains("more than 2000000 values"),
        "{}",
        r.text()
    );
    alive(&mut srv);
    stop(srv);

    let sc = Scenario::new().build();
    let mut srv = sc.start();
    assert_eq!(influxql(&srv.addr, "", "CREATE DATABASE d").status, 200);
    let bad = {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        for _ in 0..12_500 {
            gz.write_all(&b"x\n".repeat(1000)).expect("gzip");
        }
        gz.finish().expect("gzip")
    };
    assert!(bad.len() < 100_000, "{} bytes", bad.len());
    let (mib, r) = memory_for(&srv, || {
        request_with(
            &srv.addr,
            "POST",
            "/write?db=d",
            &[("Content-Encoding", "gzip")],
            &bad,
        )
        .expect("write")
    });
    eprintln!("12.5M bad lines: {mib} MiB");
    took.push(("12.5M bad lines", mib));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("… and 12499900 more"),
        "{}",
        &r.text()[..300]
    );
    // Good lines among bad ones are still written.
    let mixed = format!("x\ncpu,host=a v=1 {now_ns}\nx\n");
    let r = post(&srv.addr, "/write?db=d", "text/plain", mixed.as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        hosts_of(&influxql(&srv.addr, "d", "SELECT * FROM cpu")),
        ["a"]
    );
    alive(&mut srv);
    stop(srv);

    let sc = Scenario::new().build();
    let mut srv = sc.start();
    // One series of 31M samples, each its field number and a zero length.
    let empty_samples = 31 << 20;
    let mut series = Vec::with_capacity(2 * empty_samples + 8);
    for _ in 0..empty_samples {
        series.extend_from_slice(&[0x12, 0x00]);
    }
    let mut raw = vec![0x0a];
    let mut len = series.len() as u64;
    while len >= 0x80 {
        raw.push((len as u8) | 0x80);
        len >>= 7;
    }
    raw.push(len as u8);
    raw.extend_from_slice(&series);
    drop(series);
    let body = snap::raw::Encoder::new()
        .compress_vec(&raw)
        .expect("snappy");
    drop(raw);
    let (mib, r) = memory_for(&srv, || remote_write(&srv.addr, &body));
    eprintln!("31M empty samples: {mib} MiB");
    took.push(("31M empty samples", mib));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text()
            .contains("more than 1000000 samples (prometheus.max_samples_per_request)"),
        "{}",
        r.text()
    );
    alive(&mut srv);
    stop(srv);

    // 63 KB naming 2,100 new measurements: each was a table made alone,
    // rewriting the whole catalog (1-2 GB and 40-60 s at 2,000), and
    // nothing bounded how many a database held.
    let sc = Scenario::new().build();
    let mut srv = sc.start();
    let now_ns = twenty_cpu_points(&srv.addr);
    let body: String = (0..2_100)
        .map(|i| format!("m{i},host=a v={i} {now_ns}\n"))
        .collect();
    let (mib, r) = memory_for(&srv, || {
        post(&srv.addr, "/write?db=d", "text/plain", body.as_bytes())
    });
    eprintln!("2,100 new measurements: {mib} MiB");
    took.push(("2,100 new measurements", mib));
    assert_eq!(r.status, 400, "{}", r.text());
    let error = r.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(
        error.starts_with(
            "partial write: max-measurements limit exceeded: the database holds \
             `influx.max_measurements` (2000) measurements: measurement \"m1999\" is new\n"
        ) && error.ends_with("\n… and 1 more dropped=101"),
        "{}",
        &error[error.len() - 300..]
    );
    let measurements = influxql(&srv.addr, "d", "SHOW MEASUREMENTS").json();
    let names = measurements["results"][0]["series"][0]["values"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(names.len(), 2_000, "{measurements}");
    let count = influxql(&srv.addr, "d", "SELECT count(v) FROM m1998").json();
    assert_eq!(
        count["results"][0]["series"][0]["values"][0][1], 1,
        "{count}"
    );
    // Measurements there take points; a new one is refused, naming why.
    let r = post(
        &srv.addr,
        "/write?db=d",
        "text/plain",
        format!("m7,host=b v=1 {now_ns}\nnew,host=b v=1 {now_ns}\n").as_bytes(),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.json()["error"]
            .as_str()
            .is_some_and(|e| e.ends_with("measurement \"new\" is new dropped=1")),
        "{}",
        r.text()
    );
    assert_eq!(
        hosts_of(&influxql(&srv.addr, "d", "SELECT * FROM m7")),
        ["a", "b"]
    );
    alive(&mut srv);
    stop(srv);
    assert!(
        took.iter().all(|&(_, mib)| mib < MAX_MIB),
        "over {MAX_MIB} MiB: {took:?}"
    );
}
