//! Bad input at the edges (issue #7), against the real server: oversized
//! bodies (declared and chunked), keys past 64 KiB, invalid UTF-8 in tags,
//! NaN and infinities, timestamps before 1970 and after 2262,
//! unknown tables, wrong content types, and slow, stalled and abandoned
//! clients. Each gets a clear error (status, code, a message saying what
//! to do) and changes nothing else: good points sent beside bad ones are
//! written, other clients are served, and the store holds exactly the good
//! points afterwards. (Bad Kafka messages: tests/kafka.rs.)

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::http::request;
use common::scenario::Scenario;
use common::server;
use serde_json::{Value as Json, json};

const WRITE: &str = "/api/v1/write?table=metrics:cpu&precision=ms";
const T0: u64 = 1_700_000_000_000;

/// The example config (its `metrics:cpu` table) with small body limits.
fn scenario() -> Scenario {
    Scenario::new()
        .example_config()
        .set("server.max_body=\"1MiB\"")
        .set("server.body_timeout=\"1s\"")
        .build()
}

fn error_of(r: &common::http::Response) -> (String, String) {
    let body: Json = serde_json::from_slice(&r.body).expect("a JSON error");
    (
        body["error"]["code"].as_str().expect("code").to_string(),
        body["error"]["message"]
            .as_str()
            .expect("message")
            .to_string(),
    )
}

/// Points of host `host` in the table, all fields counted as usage_user.
fn points_of(addr: &str, host: &str) -> u64 {
    let r = request(
        addr,
        "POST",
        "/api/v1/query",
        Some("application/json"),
        json!({
            "table": "metrics:cpu",
            "series": [["metric", "cpu"], ["host", host]],
            "fields": ["usage_user"],
            "aggregate": {"functions": ["count"]}
        })
        .to_string()
        .as_bytes(),
    )
    .expect("query");
    assert_eq!(r.status, 200, "{}", r.text());
    let a: Json = serde_json::from_slice(&r.body).expect("json");
    a["aggregates"]
        .as_array()
        .expect("aggregates")
        .iter()
        .map(|x| x["values"]["count"].as_f64().unwrap_or(0.0) as u64)
        .sum()
}

fn write(addr: &str, body: &[u8]) -> common::http::Response {
    request(addr, "POST", WRITE, Some("text/plain"), body).expect("write")
}

/// One bad line beside a good one: the bad one is refused with `reason`,
/// the good one written.
fn refused_beside_a_good_point(addr: &str, bad: &str, good_ts: u64, reason: &str) {
    let body = format!("{bad}\ncpu,host=good usage_user=1 {good_ts}\n");
    let r = write(addr, body.as_bytes());
    assert_eq!(r.status, 400, "{bad}: {}", r.text());
    let v: Json = serde_json::from_slice(&r.body).expect("json");
    assert_eq!(v["error"]["code"], "partial_write", "{v}");
    assert_eq!(v["written"], 1, "{v}");
    let why = v["rejected"][0]["reason"].as_str().expect("reason");
    assert!(
        why.contains(reason),
        "{bad}: reason `{why}` lacks `{reason}`"
    );
}

#[test]
fn bad_points_are_refused_with_a_reason_and_good_ones_beside_them_land() {
    let sc = scenario();
    let srv = sc.start();
    let a = &srv.addr;
    let mut good = 0u64;
    let mut next_good = || {
        good += 1;
        T0 + good * 1000
    };

    // A key past 64 KiB, in a tag.
    let long = "x".repeat(70_000);
    refused_beside_a_good_point(
        a,
        &format!("cpu,host={long} usage_user=1 {T0}"),
        next_good(),
        "host",
    );
    // NaN and infinities are not numbers a query can aggregate.
    for v in ["NaN", "nan", "inf", "-inf", "Infinity", "-Infinity"] {
        refused_beside_a_good_point(
            a,
            &format!("cpu,host=a usage_user={v} {T0}"),
            next_good(),
            "not a finite number",
        );
    }
    // Before 1970 (the key holds an unsigned, reversed timestamp).
    refused_beside_a_good_point(
        a,
        "cpu,host=a usage_user=1 -1000",
        next_good(),
        "before 1970",
    );
    refused_beside_a_good_point(
        a,
        "cpu,host=a usage_user=1 99999999999999999999",
        next_good(),
        "not an integer",
    );
    // Past 2262 (InfluxDB's last time, in nanoseconds) is refused in a
    // table of milliseconds too, one rule for every door; the last
    // millisecond before it is stored and read back.
    refused_beside_a_good_point(
        a,
        "cpu,host=future usage_user=7 9000000000000000",
        next_good(),
        "after 2262",
    );
    let last = 9_223_372_036_854u64;
    let r = write(a, format!("cpu,host=future usage_user=7 {last}").as_bytes());
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(points_of(a, "future"), 1);

    // Invalid UTF-8 in a tag: the body is refused whole, nothing written.
    let mut body = b"cpu,host=ok usage_user=1 1700000000000\ncpu,host=".to_vec();
    body.extend_from_slice(&[0xff, 0xfe]);
    body.extend_from_slice(b" usage_user=1 1700000000000\n");
    let r = write(a, &body);
    assert_eq!(r.status, 400);
    let (code, msg) = error_of(&r);
    assert_eq!(code, "invalid_input");
    assert!(msg.contains("UTF-8"), "{msg}");
    assert_eq!(points_of(a, "ok"), 0);
    // JSON points: a number out of range, a NaN spelled as a string.
    let r = request(
        a,
        "POST",
        WRITE,
        Some("application/json"),
        br#"[{"metric":"cpu","tags":{"host":"j"},"ts":1700000000000,"fields":{"usage_user":1e999}}]"#,
    )
    .expect("write");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(error_of(&r).1.contains("out of range"), "{}", r.text());
    assert_eq!(points_of(a, "j"), 0);

    // Unknown tables, for every call that names one.
    let r = request(a, "POST", "/api/v1/write?table=nope", None, b"m v=1").expect("write");
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(error_of(&r).1.contains("nope"), "{}", r.text());
    for (path, body) in [
        ("/api/v1/query", json!({"table": "no:such"})),
        ("/api/v1/tables/no:such/scan", json!({})),
    ] {
        let r = request(
            a,
            "POST",
            path,
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .expect("call");
        assert_eq!(r.status, 404, "{path}: {}", r.text());
    }

    assert_eq!(points_of(a, "good"), good, "every good point, once");
    server::stop(srv);
    let report = halite::verify::verify(sc.data()).expect("verify");
    assert_eq!(report.problems(), 0, "{report:?}");
}

#[test]
fn oversized_bodies_and_wrong_content_types_are_refused_before_anything_is_read() {
    let sc = scenario();
    let srv = sc.start();
    let a = &srv.addr;

    // Declared too large: refused from the headers.
    let big = "cpu,host=big usage_user=1 1700000000000\n".repeat(40_000);
    assert!(big.len() > 1 << 20);
    let r = write(a, big.as_bytes());
    assert_eq!(r.status, 413, "{}", r.text());
    let (code, msg) = error_of(&r);
    assert_eq!(code, "too_large");
    assert!(msg.contains("server.max_body"), "{msg}");
    // Chunked, with no length up front: refused once it passes the limit.
    let mut s = TcpStream::connect(a).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "POST {WRITE} HTTP/1.1\r\nHost: {a}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .expect("head");
    for chunk in big.as_bytes().chunks(64 * 1024) {
        if write!(s, "{:x}\r\n", chunk.len()).is_err()
            || s.write_all(chunk).is_err()
            || s.write_all(b"\r\n").is_err()
        {
            break; // the server answered and closed
        }
    }
    let _ = s.write_all(b"0\r\n\r\n");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(points_of(a, "big"), 0);

    // Wrong content types.
    for (path, ct, body) in [
        (WRITE, "application/xml", b"<cpu/>".to_vec()),
        (WRITE, "application/msgpack", vec![1, 2, 3]),
        ("/api/v1/query", "text/xml", b"<q/>".to_vec()),
        (
            "/api/v1/tables",
            "multipart/form-data; boundary=x",
            b"--x--".to_vec(),
        ),
    ] {
        let r = request(a, "POST", path, Some(ct), &body).expect("call");
        assert_eq!(r.status, 415, "{path} {ct}: {}", r.text());
        let (code, msg) = error_of(&r);
        assert_eq!(code, "unsupported_media_type");
        assert!(msg.contains("application/json"), "{msg}");
    }
    // Protobuf is Prometheus' remote write: a body that is not one is a
    // 400 naming what it must be, and nothing is written.
    let r = request(a, "POST", WRITE, Some("application/x-protobuf"), &[1, 2, 3]).expect("call");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("snappy"), "{}", r.text());
    // A JSON body sent as line protocol (no type) is a clear 400.
    let r = request(a, "POST", "/api/v1/query", None, b"cpu v=1").expect("query");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(error_of(&r).1.contains("not valid"), "{}", r.text());
    server::stop(srv);
}

#[test]
fn slow_stalled_and_abandoned_clients_change_nothing_and_hold_no_one_up() {
    let sc = scenario();
    let srv = sc.start();
    let a = srv.addr.clone();
    let line = b"cpu,host=slow usage_user=1 1700000000000\n";

    // Many clients stall: in their headers, or in a body they promised.
    let mut stalled = Vec::new();
    for i in 0..60 {
        let mut s = TcpStream::connect(&a).expect("connect");
        if i % 2 == 0 {
            write!(s, "POST {WRITE} HTTP/1.1\r\nHost: {a}\r\nContent-Le").expect("head");
        } else {
            write!(
                s,
                "POST {WRITE} HTTP/1.1\r\nHost: {a}\r\nContent-Length: {}\r\n\r\n",
                line.len() * 2
            )
            .expect("head");
            s.write_all(line).expect("half the body");
        }
        stalled.push(s);
    }
    // Others are served meanwhile, at once.
    let started = Instant::now();
    let r = write(&a, b"cpu,host=prompt usage_user=1 1700000000000\n");
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(points_of(&a, "prompt"), 1);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a write and a query took {:?} beside stalled clients",
        started.elapsed()
    );
    // A stalled body is answered 408 after server.body_timeout (1 s).
    let mut s = stalled.pop().expect("a body-stalled client");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("server.body_timeout"), "{answer}");
    // Clients that go away mid-body write nothing.
    for _ in 0..20 {
        let mut s = TcpStream::connect(&a).expect("connect");
        write!(
            s,
            "POST {WRITE} HTTP/1.1\r\nHost: {a}\r\nContent-Length: {}\r\n\r\n",
            line.len() * 2
        )
        .expect("head");
        s.write_all(line).expect("half the body");
        drop(s);
    }
    drop(stalled);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(points_of(&a, "slow"), 0, "a partial body was written");
    let r = write(&a, b"cpu,host=after usage_user=1 1700000000000\n");
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(points_of(&a, "after"), 1);
    server::stop(srv);
}
