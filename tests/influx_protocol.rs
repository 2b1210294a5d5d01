//! The InfluxDB 1.x protocol (issue #22), checked against a real InfluxDB
//! (Debian's `influxd`, 1.6): the same writes and statements through both,
//! the same answers. Statements halite does not answer yet (SELECT) are
//! listed in docs/compatibility.md.

mod common;

use std::io::Write;

use common::http::{free_port, request, request_with};
use common::influx::{Influx, assert_close};
use common::server::{Server, command, spawn_ready};
use serde_json::{Value as Json, json};

const DB: &str = "telegraf";

/// What Telegraf's outputs.influxdb sends, with the escapes line protocol
/// has, several measurements and every field type InfluxDB 1.6 takes.
const LINES: &str = r#"cpu,cpu=cpu0,host=web-1,region=eu-west usage_user=12.5,usage_idle=80.25 1700000000000000000
cpu,cpu=cpu1,host=web-1,region=eu-west usage_user=3,usage_idle=95 1700000000000000000
cpu,cpu=cpu0,host=db\ 2,region=us-east usage_user=40.125,usage_idle=55.5 1700000010000000000
cpu,cpu=cpu-total,host=web-1 usage_user=7.5,usage_idle=90 1700000010000000000
mem,host=web-1 used=1024i,available_percent=42.5,active=true 1700000000000000000
disk,host=web-1,path=/var,fstype=ext4 free=123456789i,used_percent=61.2 1700000000000000000
disk,device=a\,b\=c,host=web-1 free=5i 1700000000000000000
system,host=web-1 uptime_format="3 days, 4:05",load1=0.5 1700000000000000000
"#;

struct Pair {
    influx: Influx,
    halite: Server,
    _dir: tempfile::TempDir,
}

fn start() -> Pair {
    let influx = Influx::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(command(dir.path(), port, &[] as &[&str]), port);
    Pair {
        influx,
        halite,
        _dir: dir,
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

fn form(pairs: &[(&str, &str)]) -> String {
    serde_urlencoded::to_string(pairs).expect("form")
}

/// `CREATE DATABASE name` on one server, as Telegraf sends it (a form,
/// by POST); it must answer 200.
fn create_database(addr: &str, name: &str) {
    let r = request(
        addr,
        "POST",
        "/query",
        Some("application/x-www-form-urlencoded"),
        form(&[("q", &format!("CREATE DATABASE {name}"))]).as_bytes(),
    )
    .expect("create database");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// (status, JSON body or Null) of the same request to both servers.
fn both(
    p: &Pair,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> [(u16, Json); 2] {
    [&p.influx.addr, &p.halite.addr].map(|addr| {
        let r = request_with(addr, method, path, headers, body).expect("request");
        let json = if r.body.is_empty() {
            Json::Null
        } else {
            serde_json::from_slice(&r.body)
                .unwrap_or_else(|e| panic!("{addr} {path}: not JSON ({e}): {}", r.text()))
        };
        (r.status, json)
    })
}

fn query(p: &Pair, params: &[(&str, &str)]) -> [(u16, Json); 2] {
    let path = format!("/query?{}", form(params));
    both(p, "GET", &path, &[], b"")
}

#[test]
fn writes_and_show_statements_answer_as_influxdb_does() {
    let p = start();

    // Telegraf's first request: CREATE DATABASE as a form, by POST.
    let create = form(&[("q", &format!("CREATE DATABASE \"{DB}\""))]);
    let [a, b] = both(
        &p,
        "POST",
        "/query",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        create.as_bytes(),
    );
    assert_eq!(a, b, "CREATE DATABASE by POST");
    assert_eq!(a.1, json!({"results": [{"statement_id": 0}]}));
    // Again, by GET: still no error, and InfluxDB's warning.
    let [a, b] = query(&p, &[("q", &format!("CREATE DATABASE {DB}"))]);
    assert_eq!(a, b, "CREATE DATABASE by GET");

    // /ping, both ways.
    for method in ["GET", "HEAD"] {
        let [a, b] = both(&p, method, "/ping", &[], b"");
        assert_eq!((a.0, b.0), (204, 204), "{method} /ping");
    }
    let r = request(&p.halite.addr, "GET", "/ping", None, b"").expect("ping");
    assert!(
        r.headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("x-influxdb-version") && v.starts_with("1.")),
        "{:?}",
        r.headers
    );

    // Writes: a gzipped body as Telegraf sends it, then what goes wrong.
    let gz = gzip(LINES.as_bytes());
    let telegraf = [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Encoding", "gzip"),
        ("User-Agent", "Telegraf/1.30.0 Go/1.22.0"),
    ];
    let [a, b] = both(&p, "POST", &format!("/write?db={DB}"), &telegraf, &gz);
    assert_eq!(a, b, "a good gzipped body");
    assert_eq!(a.0, 204);
    let later = "net,host=web-1,interface=eth0 bytes_recv=10i 1700000100\n\
                 net,host=web-2,interface=eth0 bytes_recv=20i 1700000100";
    for (precision, body) in [
        ("s", later.to_string()),
        ("ms", later.replace("eth0", "eth1")),
    ] {
        let [a, b] = both(
            &p,
            "POST",
            &format!("/write?db={DB}&precision={precision}"),
            &[],
            body.as_bytes(),
        );
        assert_eq!(a, b, "precision={precision}");
    }
    let [a, b] = both(&p, "POST", &format!("/write?db={DB}"), &[], b"");
    assert_eq!(a, b, "an empty body");
    assert_eq!(a.0, 204);
    let [a, b] = both(&p, "POST", "/write?db=nope", &[], b"cpu v=1");
    assert_eq!(a, b, "an unknown database");
    assert_eq!(a.0, 404);
    let [a, b] = both(&p, "POST", "/write", &[], b"cpu v=1");
    assert_eq!(a, b, "no database");
    // A field of another type than the measurement's: that point dropped,
    // the others written, InfluxDB's words.
    let conflict = "cpu,host=web-9 usage_user=5i 1700000020000000000\n\
                    cpu,host=web-8 usage_user=5 1700000020000000000";
    let [a, b] = both(
        &p,
        "POST",
        &format!("/write?db={DB}"),
        &[],
        conflict.as_bytes(),
    );
    assert_eq!(a, b, "a field type conflict");
    assert_eq!(a.0, 400);
    // A line that cannot be read: the same status and the same shape (the
    // parsers' reasons differ in their words).
    let unreadable = "cpu,host=web-7 usage_user=1 1700000030000000000\nnot a point\n";
    let [a, b] = both(
        &p,
        "POST",
        &format!("/write?db={DB}"),
        &[],
        unreadable.as_bytes(),
    );
    assert_eq!((a.0, b.0), (400, 400));
    for (who, answer) in [("influxdb", &a.1), ("halite", &b.1)] {
        let e = answer["error"].as_str().unwrap_or_default();
        assert!(
            e.starts_with("partial write: unable to parse 'not a point': ")
                && e.ends_with(" dropped=0"),
            "{who}: {e}"
        );
    }
    // Nothing readable at all: no "partial write".
    let [a, b] = both(&p, "POST", &format!("/write?db={DB}"), &[], b"oops\n");
    assert_eq!((a.0, b.0), (400, 400));
    for (who, answer) in [("influxdb", &a.1), ("halite", &b.1)] {
        let e = answer["error"].as_str().unwrap_or_default();
        assert!(e.starts_with("unable to parse 'oops': "), "{who}: {e}");
    }

    // The statements Grafana and a user browsing the data send.
    let statements = [
        "SHOW DATABASES",
        "SHOW measurements",
        "SHOW MEASUREMENTS LIMIT 2",
        "SHOW TAG KEYS",
        "SHOW TAG KEYS FROM \"cpu\"",
        "SHOW TAG VALUES FROM \"cpu\" WITH KEY = \"host\"",
        "SHOW TAG VALUES WITH KEY IN (\"host\", \"region\")",
        "SHOW TAG VALUES WITH KEY = \"device\"",
        "SHOW TAG VALUES WITH KEY = \"nope\"",
        "SHOW FIELD KEYS",
        "SHOW FIELD KEYS FROM \"mem\"",
        "SHOW SERIES",
        "SHOW SERIES FROM \"cpu\"",
        "SHOW SERIES LIMIT 3",
        "SHOW RETENTION POLICIES ON \"telegraf\"",
        "SHOW MEASUREMENTS; SHOW TAG KEYS FROM mem",
        // Grafana's template variables chained on another (`$host`), its
        // measurement search box, and the rest of the meta queries' forms
        // (issue #60): each was "not answered yet" before.
        "SHOW TAG VALUES FROM \"cpu\" WITH KEY = \"cpu\" WHERE \"host\" =~ /^web-1$/",
        "SHOW TAG VALUES WITH KEY = \"host\" WHERE \"region\" = 'eu-west' OR \"path\" = '/var'",
        "SHOW TAG VALUES WITH KEY =~ /^(host|region)$/ WHERE host !~ /db/",
        "SHOW TAG VALUES FROM cpu WITH KEY != \"host\"",
        "SHOW TAG VALUES WITH KEY !~ /o/ LIMIT 1 OFFSET 1",
        "SHOW TAG VALUES WITH KEY = \"host\" WHERE \"nope\" = ''",
        "SHOW TAG VALUES WITH KEY = \"host\" WHERE usage_user > 1",
        "SHOW MEASUREMENTS WITH MEASUREMENT =~ /(?i)CP|dIsK/ LIMIT 100",
        "SHOW MEASUREMENTS WITH MEASUREMENT = mem",
        "SHOW MEASUREMENTS WITH MEASUREMENT !~ /m/",
        "SHOW MEASUREMENTS WHERE \"host\" = 'db 2'",
        "SHOW MEASUREMENTS WITH MEASUREMENT =~ /m|c/ WHERE fstype = 'ext4' OR cpu = 'cpu1' LIMIT 5 OFFSET 1",
        "SHOW TAG KEYS WHERE host = 'web-1' AND region = 'eu-west'",
        "SHOW TAG KEYS FROM cpu LIMIT 2 OFFSET 1",
        "SHOW SERIES WHERE host = 'web-1' AND cpu != 'cpu1'",
        "SHOW SERIES FROM cpu WHERE region =~ /east|west/ LIMIT 2 OFFSET 1",
        "SHOW SERIES WHERE (host = 'db 2' OR device =~ /a/) AND region !~ /eu/",
        "SHOW FIELD KEYS LIMIT 1 OFFSET 1",
        "SHOW SERIES CARDINALITY",
        "SHOW SERIES EXACT CARDINALITY",
        "SHOW SERIES CARDINALITY FROM cpu WHERE host = 'web-1'",
        "SHOW MEASUREMENT CARDINALITY",
        "SHOW MEASUREMENT EXACT CARDINALITY WHERE region = 'eu-west'",
        "SHOW MEASUREMENT CARDINALITY ON nope",
        "SHOW SERIES EXACT CARDINALITY ON nope",
        "SHOW TAG KEY CARDINALITY",
        "SHOW TAG KEY EXACT CARDINALITY FROM cpu WHERE host = 'db 2'",
        "SHOW TAG VALUES CARDINALITY WITH KEY = host",
        "SHOW TAG VALUES EXACT CARDINALITY WITH KEY =~ /host|region/",
        "SHOW FIELD KEY CARDINALITY",
        "SHOW FIELD KEY EXACT CARDINALITY FROM disk WHERE fstype = 'ext4'",
        "SHOW TAG KEY CARDINALITY LIMIT 1 OFFSET 1",
    ];
    for q in statements {
        // SHOW DATABASES among them: halite's `default` namespace, and
        // namespaces of declared-key tables, are no databases.
        let [a, b] = query(&p, &[("db", DB), ("q", q)]);
        assert_eq!(a, b, "{q}");
    }
    for (params, what) in [
        (
            vec![("db", "nope"), ("q", "SHOW MEASUREMENTS")],
            "an unknown database",
        ),
        (vec![("q", "SHOW MEASUREMENTS")], "no database"),
        (
            vec![("q", "SHOW MEASUREMENTS ON nope")],
            "ON an unknown database",
        ),
        (vec![("db", DB), ("q", "blah")], "a parse error"),
        (
            vec![("db", DB), ("q", "SHOW TAG VALUES FROM cpu")],
            "a clause missing",
        ),
        (vec![("db", DB)], "no q"),
    ] {
        let [a, b] = query(&p, &params);
        assert_eq!(a, b, "{what}");
    }
}

#[test]
fn dictionary_and_series_survive_a_kill() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let start = || spawn_ready(command(dir.path(), port, &[] as &[&str]), port);
    let mut halite = start();
    let post = |addr: &str, path: &str, body: &str| {
        request(addr, "POST", path, None, body.as_bytes()).expect("request")
    };
    create_database(&halite.addr, "metrics");
    let r = post(&halite.addr, "/write?db=metrics", LINES);
    assert_eq!(r.status, 204, "{}", r.text());
    let show = |addr: &str| {
        let path = format!(
            "/query?{}",
            form(&[("db", "metrics"), ("q", "SHOW SERIES; SHOW FIELD KEYS")])
        );
        request(addr, "GET", &path, None, b"").expect("show").json()
    };
    let before = show(&halite.addr);
    assert_eq!(
        before
            .pointer("/results/0/series/0/values")
            .map(|v| v.as_array().map(Vec::len)),
        Some(Some(8)),
        "{before}"
    );
    // Acknowledged means durable: a SIGKILL keeps every UID, field type
    // and series.
    halite.child.kill().expect("kill");
    halite.child.wait().expect("wait");
    halite = start();
    assert_eq!(show(&halite.addr), before);
    // The field type survived too: a conflicting point is still refused,
    // and a point of a known series adds no series.
    let r = post(
        &halite.addr,
        "/write?db=metrics",
        "mem,host=web-1 used=1.5 1700000050000000000",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let r = post(
        &halite.addr,
        "/write?db=metrics",
        "mem,host=web-1 used=7i 1700000050000000000\nmem,host=web-3 used=8i 1700000050000000000",
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let after = show(&halite.addr);
    assert_eq!(
        after
            .pointer("/results/0/series/0/values")
            .map(|v| v.as_array().map(Vec::len)),
        Some(Some(9)),
        "{after}"
    );
    // New names after the restart get UIDs of their own: the series read
    // back by name are what was written.
    assert!(after.to_string().contains("mem,host=web-3"), "{after}");
}

#[test]
fn a_series_limit_answers_503_and_keeps_the_other_points() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(
        command(dir.path(), port, &["--set", "influx.series_limit=2"]),
        port,
    );
    create_database(&halite.addr, "small");
    let body = "cpu,host=a v=1 1\ncpu,host=b v=2 1\ncpu,host=c v=3 1\ncpu,host=a v=4 2\n";
    let r = request(
        &halite.addr,
        "POST",
        "/write?db=small",
        None,
        body.as_bytes(),
    )
    .expect("write");
    // Telegraf drops a batch answered with a 4xx and retries a 5xx.
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        r.headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("retry-after")),
        "{:?}",
        r.headers
    );
    let e = r.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(
        e.contains("small:cpu") && e.contains("limit of 2 series"),
        "{e}"
    );
    let path = format!("/query?{}", form(&[("db", "small"), ("q", "SHOW SERIES")]));
    let series = request(&halite.addr, "GET", &path, None, b"")
        .expect("show")
        .json();
    assert_eq!(
        series.pointer("/results/0/series/0/values"),
        Some(&json!([["cpu,host=a"], ["cpu,host=b"]])),
        "{series}"
    );
    let metrics = request(&halite.addr, "GET", "/metrics", None, b"")
        .expect("metrics")
        .text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("halite_series_refused_total{")
                && l.contains("small:cpu")
                && l.ends_with(" 1")),
        "{metrics}"
    );
}

const T0: i64 = 1_700_000_000;

/// Statements share one resolved list of a measurement's series; a series
/// written after a statement was answered is in the next answer.
#[test]
fn a_series_written_after_a_statement_is_in_the_next_answer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(command::<&str>(dir.path(), port, &[]), port);
    create_database(&halite.addr, "grow");
    let write = |body: &str| {
        let r = request(
            &halite.addr,
            "POST",
            "/write?db=grow",
            None,
            body.as_bytes(),
        )
        .expect("write");
        assert_eq!(r.status, 204, "{}", r.text());
    };
    let ask = |q: &str| {
        let path = format!(
            "/query?{}",
            form(&[("db", "grow"), ("epoch", "s"), ("q", q)])
        );
        request(&halite.addr, "GET", &path, None, b"")
            .expect("query")
            .json()
    };
    let count = "SELECT count(v) FROM cpu GROUP BY host";
    write("cpu,host=a v=1 1000000000\n");
    assert_eq!(
        ask(count)
            .pointer("/results/0/series")
            .map(|s| s.as_array().map(Vec::len)),
        Some(Some(1))
    );
    assert_eq!(
        ask("SHOW SERIES").pointer("/results/0/series/0/values"),
        Some(&json!([["cpu,host=a"]]))
    );
    write("cpu,host=b v=2 1000000000\ncpu,host=a v=3 2000000000\n");
    let answer = ask(count);
    let series = answer.pointer("/results/0/series").expect("series");
    assert_eq!(
        series,
        &json!([
            {"name": "cpu", "tags": {"host": "a"}, "columns": ["time", "count"], "values": [[0, 2]]},
            {"name": "cpu", "tags": {"host": "b"}, "columns": ["time", "count"], "values": [[0, 1]]},
        ]),
        "{answer}"
    );
    assert_eq!(
        ask("SHOW SERIES").pointer("/results/0/series/0/values"),
        Some(&json!([["cpu,host=a"], ["cpu,host=b"]]))
    );
}

/// A series written body after body, its tags in another order or with
/// escapes, stays one series with every point, as in InfluxDB: once a
/// series is durable halite remembers a line's text of it and takes that
/// text for its names after, so a remembered text must give the key the
/// names give, and lines refused for their tags must still be refused.
#[test]
fn a_series_written_in_several_texts_keeps_every_point_as_influxdb_does() {
    let p = start();
    for addr in [&p.influx.addr, &p.halite.addr] {
        create_database(addr, "texts");
    }
    for round in 0..5u64 {
        let t = 1_700_000_000 + round * 10;
        let body = format!(
            "weather,city=a\\ b,station=x\\,1 temp={round}.5 {t}\n\
             weather,station=x\\,1,city=a\\ b humidity={round}i {t1}\n\
             weather,city=c,station=y temp=-{round}.25,humidity=7i {t}\n\
             weather,city=c temp=1 {t}\n",
            t1 = t + 1
        );
        let [a, b] = both(
            &p,
            "POST",
            "/write?db=texts&precision=s",
            &[],
            body.as_bytes(),
        );
        assert_eq!((a.0, b.0), (204, 204), "round {round}: {a:?} {b:?}");
        // Refused every time, also after the good lines' texts are known.
        let bad = format!("weather,city=c,time=x temp=1 {t}\nweather,city=c,city=d temp=1 {t}\n");
        let [a, b] = both(
            &p,
            "POST",
            "/write?db=texts&precision=s",
            &[],
            bad.as_bytes(),
        );
        assert_eq!((a.0, b.0), (400, 400), "round {round}: {a:?} {b:?}");
    }
    for q in [
        "SHOW SERIES",
        "SELECT * FROM weather GROUP BY *",
        "SELECT count(temp), sum(humidity) FROM weather GROUP BY city, station",
    ] {
        let [a, b] = query(&p, &[("db", "texts"), ("epoch", "s"), ("q", q)]);
        assert_eq!(a, b, "{q}");
        assert_eq!(a.0, 200, "{q}: {a:?}");
    }
}

/// A quiet node gives its WAL's preallocated space back once everything in
/// it is flushed. The namespace's dictionary is written once, when its
/// series are new, and then left alone: its unflushed edits held the space
/// for good (a third of the data directory at rest in `make bench-scale`)
/// until an idle log had the regions holding it flushed.
#[test]
fn a_quiet_node_gives_its_wal_space_back_though_the_dictionary_was_written_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(
        command(
            dir.path(),
            port,
            &["--set", "wal.release_after_idle=\"1s\""],
        ),
        port,
    );
    create_database(&halite.addr, "quiet");
    let body: String = (0..2_000)
        .map(|i| format!("cpu,host=h{} v={i} {}\n", i % 50, 1_000_000_000 + i))
        .collect();
    let r = request(
        &halite.addr,
        "POST",
        "/write?db=quiet",
        None,
        body.as_bytes(),
    )
    .expect("write");
    assert_eq!(r.status, 204, "{}", r.text());
    let r = request(
        &halite.addr,
        "POST",
        "/api/v1/tables/quiet:cpu/flush",
        None,
        b"",
    )
    .expect("flush");
    assert_eq!(r.status, 204, "{}", r.text());
    let wal = dir.path().join("wal");
    let written = common::du(&wal);
    assert!(written > 1 << 20, "the WAL preallocates: {written} bytes");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let now = common::du(&wal);
        if now < 64 << 10 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL still holds {now} bytes 30 s after the last write (it held {written})"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Nothing was lost on the way: the points and their series answer.
    let path = format!(
        "/query?{}",
        form(&[("db", "quiet"), ("q", "SELECT count(v) FROM cpu")])
    );
    let answer = request(&halite.addr, "GET", &path, None, b"")
        .expect("query")
        .json();
    assert_eq!(
        answer.pointer("/results/0/series/0/values/0/1"),
        Some(&json!(2000)),
        "{answer}"
    );
}

/// TSBS-like cpu points every 10 s for 30 minutes of four hosts in two
/// regions; host_3 is silent for five minutes (fill has gaps to fill).
fn cpu_lines() -> String {
    let mut out = String::new();
    for h in 0..4i64 {
        let region = if h < 2 { "eu" } else { "us" };
        for i in 0..180i64 {
            if h == 3 && (60..90).contains(&i) {
                continue;
            }
            let user = ((i * 7 + h * 13) % 1000) as f64 / 10.0 + 0.125;
            let system = ((i * 3 + h * 29) % 500) as f64 / 7.0;
            let requests = (i * 11 + h) % 97;
            out.push_str(&format!(
                "cpu,host=host_{h},region={region} usage_user={user},usage_system={system},requests={requests}i {}\n",
                T0 + i * 10
            ));
        }
    }
    out
}

/// `CREATE DATABASE bench` on both servers, which answer alike.
fn create_bench(p: &Pair) {
    let create = form(&[("q", "CREATE DATABASE bench")]);
    let [a, b] = both(
        p,
        "POST",
        "/query",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        create.as_bytes(),
    );
    assert_eq!(a, b);
}

/// Memory points of hosts last heard from at different ages, in two
/// store files and the MemStore: host_b went quiet two hours before the
/// newest point, host_c reports rarely, host_d only lately.
fn mem_parts() -> [String; 3] {
    let line = |host: &str, at: i64, i: i64| {
        format!(
            "mem,host={host} free={}.5,used={}i,state=\"s{}\" {}\n",
            (i * 37) % 100,
            (i * 13) % 50,
            i % 3,
            T0 + at
        )
    };
    let mut parts = [String::new(), String::new(), String::new()];
    for i in 0..7i64 {
        let at = -3 * 3600 + i * 600;
        parts[0].push_str(&line("host_a", at, i));
        parts[0].push_str(&line("host_b", at, i + 50));
        parts[1].push_str(&line("host_a", at + 3600, i + 7));
        parts[2].push_str(&line("host_a", at + 7200, i + 14));
    }
    parts[0].push_str(&line("host_c", -150 * 60, 3));
    parts[1].push_str(&line("host_c", -90 * 60, 4));
    parts[2].push_str(&line("host_c", -10, 5));
    parts[2].push_str(&line("host_d", -30 * 60, 6));
    parts
}

/// A raw `ORDER BY time DESC LIMIT n` reads each series' last hour first
/// and the time before only for a series with fewer points there; a read
/// with a lower bound passes older store files by. Both answer as
/// InfluxDB does, for series last heard from at every age.
#[test]
fn newest_points_and_recent_ranges_answer_as_influxdb_does_across_store_files() {
    let p = start();
    create_bench(&p);
    let parts = mem_parts();
    for (i, part) in parts.iter().enumerate() {
        let [a, b] = both(
            &p,
            "POST",
            "/write?db=bench&precision=s",
            &[],
            part.as_bytes(),
        );
        assert_eq!((a.0, b.0), (204, 204), "{a:?} {b:?}");
        if i < 2 {
            let r = request(
                &p.halite.addr,
                "POST",
                "/api/v1/tables/bench:mem/flush",
                None,
                b"",
            )
            .expect("flush");
            assert_eq!(r.status, 204, "{}", r.text());
        }
    }
    let t = |secs: i64| format!("{}s", T0 + secs);
    let statements = vec![
        "SELECT * FROM mem GROUP BY host ORDER BY time DESC LIMIT 1".to_string(),
        "SELECT * FROM mem GROUP BY host ORDER BY time DESC LIMIT 3".to_string(),
        "SELECT free FROM mem WHERE used > 20 GROUP BY host ORDER BY time DESC LIMIT 2".to_string(),
        "SELECT free, state FROM mem WHERE host = 'host_b' OR host = 'host_c' ORDER BY time DESC LIMIT 4".to_string(),
        format!(
            "SELECT free, used FROM mem WHERE time >= {} GROUP BY host ORDER BY time DESC LIMIT 2 OFFSET 1",
            t(-160 * 60)
        ),
        format!(
            "SELECT mean(free) FROM mem WHERE time >= {} AND time <= {} GROUP BY time(20m), host",
            t(-100 * 60),
            t(0)
        ),
        format!(
            "SELECT count(used), last(state) FROM mem WHERE time >= {} AND time < {} GROUP BY host",
            t(-95 * 60),
            t(-5 * 60)
        ),
        format!(
            "SELECT max(free) FROM mem WHERE time <= {} GROUP BY time(30m) LIMIT 2",
            t(0)
        ),
        // Only the oldest file holds points this old: the newer file is
        // passed by (the MemStore is read, its points out of range).
        format!(
            "SELECT free, used FROM mem WHERE time <= {} GROUP BY host",
            t(-125 * 60)
        ),
        format!(
            "SELECT max(free), count(used) FROM mem WHERE time >= {} AND time <= {} GROUP BY time(10m), host",
            t(-3 * 3600),
            t(-125 * 60)
        ),
    ];
    for q in &statements {
        let [a, b] = query(&p, &[("db", "bench"), ("q", q.as_str())]);
        assert_eq!(a.0, b.0, "{q}: {} / {}", a.1, b.1);
        assert_close(&a.1, &b.1, q);
        assert!(
            a.1.pointer("/results/0/series/0").is_some(),
            "{q} answers something: {}",
            a.1
        );
    }
    // A lower bound past every time there is answers nothing (it
    // overflowed on the way to the last hour's read, and answered each
    // series' newest point in release builds).
    let q = "SELECT * FROM mem WHERE time >= 9223372036854775807 ORDER BY time DESC LIMIT 1";
    let r = request(
        &p.halite.addr,
        "GET",
        &format!("/query?{}", form(&[("db", "bench"), ("q", q)])),
        None,
        b"",
    )
    .expect("query");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"results": [{"statement_id": 0}]}), "{q}");
}

#[test]
fn select_statements_answer_as_influxdb_does() {
    let p = start();
    create_bench(&p);
    let [a, b] = both(
        &p,
        "POST",
        "/write?db=bench&precision=s",
        &[],
        cpu_lines().as_bytes(),
    );
    assert_eq!((a.0, b.0), (204, 204), "{a:?} {b:?}");
    // Tags whose names sort otherwise than a GROUP BY lists them: InfluxDB
    // orders the series by host before zone, whatever the statement says.
    // A string and a boolean field, and an integer 0 then 184 six
    // minutes later (a linear fill InfluxDB works out in bucket steps).
    let minute = T0 - T0 % 60;
    let net = format!(
        "net,host=a,zone=z2 v=1i,s=\"up\",ok=true {T0}\nnet,host=b,zone=z1 v=2i {T0}\nnet,host=c,zone=z1 v=3i {T0}\nnet,host=c,zone=z0 v=4i {T0}\n\
         lin v=0i {minute}\nlin v=184i {}\n",
        minute + 360
    );
    let [a, b] = both(
        &p,
        "POST",
        "/write?db=bench&precision=s",
        &[],
        net.as_bytes(),
    );
    assert_eq!((a.0, b.0), (204, 204), "{a:?} {b:?}");
    let t = |secs: i64| format!("{}s", T0 + secs);
    let ms = |secs: i64| format!("{}ms", (T0 + secs) * 1000);
    let statements = vec![
        "SELECT sum(v) FROM net GROUP BY zone, host".to_string(),
        "SELECT sum(v) FROM net GROUP BY zone, host SLIMIT 2".to_string(),
        "SELECT sum(v) FROM net GROUP BY zone, host SLIMIT 2 SOFFSET 1".to_string(),
        "SELECT v FROM net GROUP BY zone, host SLIMIT 3".to_string(),
        "SELECT sum(v) FROM net GROUP BY zone, host ORDER BY time DESC SLIMIT 3".to_string(),
        format!(
            "SELECT last(s), first(ok), max(v) FROM net WHERE time >= {} AND time < {} GROUP BY time(1m) fill(3)",
            t(-120),
            t(120)
        ),
        format!(
            "SELECT max(v), mean(v) FROM lin WHERE time >= {minute}s AND time < {}s GROUP BY time(1m) fill(linear)",
            minute + 420
        ),
        // Under a LIMIT only the answer's buckets are made; fill(linear)
        // still draws its line through the values beyond them.
        format!(
            "SELECT max(v), mean(v) FROM lin WHERE time >= {minute}s AND time < {}s GROUP BY time(1m) fill(linear) LIMIT 3",
            minute + 420
        ),
        format!(
            "SELECT max(v) FROM lin WHERE time >= {minute}s AND time < {}s GROUP BY time(1m) fill(linear) LIMIT 2 OFFSET 2",
            minute + 420
        ),
        format!(
            "SELECT max(v), mean(v) FROM lin WHERE time >= {minute}s AND time < {}s GROUP BY time(1m) fill(linear) ORDER BY time DESC LIMIT 3",
            minute + 420
        ),
        format!(
            "SELECT max(v) FROM lin WHERE time >= {minute}s AND time < {}s GROUP BY time(1m) fill(none) LIMIT 1 OFFSET 1",
            minute + 420
        ),
        format!(
            "SELECT max(v) FROM lin WHERE time >= {minute}s AND time < {}s GROUP BY time(1m) fill(previous) ORDER BY time DESC LIMIT 4 OFFSET 1",
            minute + 420
        ),
        // Bounds before 1970: nothing is stored there, and an aggregate's
        // time is its lower bound, written as InfluxDB writes it.
        "SELECT usage_user FROM cpu WHERE host = 'host_1' AND time >= '1960-01-01T00:00:00Z' LIMIT 2"
            .to_string(),
        "SELECT count(usage_user) FROM cpu WHERE time > -1000000000".to_string(),
        format!(
            "SELECT max(usage_user), count(usage_user) FROM cpu WHERE time >= '1969-12-31T23:00:00.5Z' AND time <= {}",
            t(0)
        ),
        "SELECT usage_user FROM cpu WHERE time < '1965-01-01T00:00:00Z'".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE time >= '1969-12-31T00:00:00Z' AND time < '1970-01-01T00:00:00Z'"
            .to_string(),
        format!(
            "SELECT count(usage_user) FROM cpu WHERE time >= '1969-01-01T00:00:00Z' AND time <= {} GROUP BY time(1000d)",
            t(0)
        ),
        format!(
            "SELECT count(usage_user) FROM cpu WHERE time >= '1969-01-01T00:00:00Z' AND time <= {} GROUP BY time(1000d) LIMIT 2",
            t(0)
        ),
        format!(
            "SELECT max(usage_user) FROM cpu WHERE time >= '1969-01-01T00:00:00Z' AND time <= {} GROUP BY time(1000d) fill(none)",
            t(0)
        ),
        // `time` named in the select list is the time column, its alias
        // that column's name.
        "SELECT time, usage_user FROM cpu WHERE host = 'host_1' LIMIT 3".to_string(),
        "SELECT time AS t, usage_user FROM cpu WHERE host = 'host_1' LIMIT 3".to_string(),
        "SELECT usage_user, time FROM cpu WHERE host = 'host_1' ORDER BY time DESC LIMIT 2"
            .to_string(),
        "SELECT time AS t, max(usage_user) FROM cpu GROUP BY host".to_string(),
        format!(
            "SELECT time AS bucket, count(usage_user) FROM cpu WHERE time >= {} AND time < {} GROUP BY time(10m)",
            t(0),
            t(1800)
        ),
        "SELECT time FROM cpu".to_string(),
        // Retention policies: halite has `autogen` alone.
        "SELECT usage_user FROM \"autogen\".\"cpu\" WHERE host = 'host_0' LIMIT 2".to_string(),
        "SELECT usage_user FROM bench.autogen.cpu WHERE host = 'host_0' LIMIT 2".to_string(),
        "SELECT usage_user FROM bench..cpu WHERE host = 'host_0' LIMIT 2".to_string(),
        "SELECT usage_user FROM \"rp_1y\".\"cpu\" LIMIT 2".to_string(),
        "SELECT max(usage_user) FROM bench.rp_1y.cpu".to_string(),
        // An integer column filled: linearly and with a fraction, both
        // truncated to integers; a float column filled with floats.
        format!(
            "SELECT max(requests), min(requests), mean(requests) FROM cpu WHERE host = 'host_3' AND time >= {} AND time < {} GROUP BY time(1m) fill(linear)",
            t(300),
            t(1200)
        ),
        format!(
            "SELECT count(requests), sum(requests), max(usage_user), mean(requests) FROM cpu WHERE host = 'host_3' AND time >= {} AND time < {} GROUP BY time(1m) fill(1.5)",
            t(300),
            t(1200)
        ),
        format!(
            "SELECT spread(requests), last(requests) FROM cpu WHERE host = 'host_3' AND time >= {} AND time < {} GROUP BY time(1m) fill(-2.75)",
            t(300),
            t(1200)
        ),
        format!(
            "SELECT usage_user FROM cpu WHERE host = 'host_1' AND time >= {} AND time < {}",
            t(0),
            t(300)
        ),
        "SELECT * FROM cpu WHERE host = 'host_2' LIMIT 5".to_string(),
        "SELECT usage_user, usage_system FROM cpu WHERE region = 'eu' ORDER BY time DESC LIMIT 7"
            .to_string(),
        "SELECT usage_user FROM cpu WHERE host != 'host_0' AND region = 'us' LIMIT 4 OFFSET 2"
            .to_string(),
        "SELECT usage_user, requests FROM cpu WHERE usage_user > 95 AND host = 'host_1'"
            .to_string(),
        // Newest first with an offset over two series and a field
        // condition (each series is read only as far as the answer needs).
        "SELECT usage_user FROM cpu WHERE region = 'us' AND usage_user > 50 ORDER BY time DESC LIMIT 5 OFFSET 3"
            .to_string(),
        "SELECT * FROM cpu WHERE host = 'host_0' AND time >= '2023-11-14T22:20:00Z' LIMIT 3"
            .to_string(),
        "SELECT mean(usage_user) FROM cpu".to_string(),
        "SELECT max(usage_user) FROM cpu WHERE host = 'host_0'".to_string(),
        "SELECT min(usage_user), max(usage_user), min(usage_system) FROM cpu".to_string(),
        "SELECT count(usage_user), sum(requests), spread(requests) FROM cpu GROUP BY host"
            .to_string(),
        "SELECT mean(requests), sum(usage_system), spread(usage_user) FROM cpu GROUP BY region"
            .to_string(),
        format!(
            "SELECT mean(usage_user) FROM cpu WHERE time >= {} AND time < {} GROUP BY time(5m)",
            t(0),
            t(1800)
        ),
        format!(
            "SELECT mean(usage_user), max(usage_system) FROM cpu WHERE time >= {} AND time < {} GROUP BY time(5m), host",
            t(0),
            t(1800)
        ),
        format!(
            "SELECT mean(usage_user) FROM cpu WHERE host = 'host_3' AND time >= {} AND time < {} GROUP BY time(1m, 30s) fill(none)",
            t(0),
            t(1800)
        ),
        format!(
            "SELECT mean(usage_user) FROM cpu WHERE host = 'host_3' AND time >= {} AND time < {} GROUP BY time(1m) fill(null)",
            t(300),
            t(1200)
        ),
        format!(
            "SELECT mean(usage_user) FROM cpu WHERE host = 'host_3' AND time >= {} AND time < {} GROUP BY time(1m) fill(0)",
            t(300),
            t(1200)
        ),
        format!(
            "SELECT mean(usage_user) FROM cpu WHERE host = 'host_3' AND time >= {} AND time < {} GROUP BY time(1m) fill(previous)",
            t(300),
            t(1200)
        ),
        format!(
            "SELECT mean(usage_user) FROM cpu WHERE host = 'host_3' AND time >= {} AND time < {} GROUP BY time(1m) fill(linear)",
            t(300),
            t(1200)
        ),
        format!(
            "SELECT count(usage_user) FROM cpu WHERE host = 'host_3' AND time >= {} AND time < {} GROUP BY time(2m)",
            t(300),
            t(1200)
        ),
        "SELECT first(usage_user), last(usage_user) FROM cpu GROUP BY *".to_string(),
        "SELECT last(usage_system) FROM cpu WHERE region = 'us'".to_string(),
        "SELECT percentile(usage_user, 95) FROM cpu WHERE host = 'host_1'".to_string(),
        "SELECT percentile(usage_user, 50), percentile(requests, 90) FROM cpu GROUP BY region"
            .to_string(),
        format!(
            "SELECT mean(\"usage_user\") AS avg FROM \"cpu\" WHERE (\"host\" = 'host_0' OR \"host\" = 'host_1') AND time >= {} and time <= {} GROUP BY time(10m) fill(null)",
            ms(0),
            ms(1799)
        ),
        format!(
            "SELECT count(usage_user) FROM cpu WHERE time >= {} AND time < {} GROUP BY time(10m), region SLIMIT 1",
            t(0),
            t(1800)
        ),
        format!(
            "SELECT max(usage_user) FROM cpu WHERE time > {} AND time <= {}",
            t(60),
            t(120)
        ),
        format!(
            "SELECT max(usage_user) FROM cpu WHERE host = 'host_2' AND time >= {} AND time < {} GROUP BY time(5m) ORDER BY time DESC LIMIT 3",
            t(0),
            t(1800)
        ),
        "SELECT mean(usage_user) FROM cpu WHERE time >= now() - 1h".to_string(),
        "SELECT count(requests) FROM cpu WHERE time <= now() GROUP BY host SLIMIT 2 SOFFSET 1"
            .to_string(),
        "SELECT mean(usage_user) FROM cpu WHERE host =~ /^host_(0|3)$/ GROUP BY host".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE region !~ /e/ AND host =~ /host/".to_string(),
        format!(
            "SELECT mean(\"usage_user\") FROM \"cpu\" WHERE (\"host\" =~ /^host_1$/) AND time >= {} and time <= {} GROUP BY time(5m) fill(null)",
            ms(0),
            ms(1799)
        ),
        "SELECT usage_user FROM nope".to_string(),
        "SELECT usage_user FROM cpu WHERE host = 'nobody'".to_string(),
        // Series found by their tag values (an index), and conditions
        // that name tags otherwise (read through the whole list):
        "SELECT count(usage_user) FROM cpu WHERE (host = 'host_0' OR host = 'host_3') AND region = 'us' GROUP BY host".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE host = 'host_0' AND region = 'us'".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE host = 'host_0' OR region = 'us' GROUP BY host".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE region = 'eu' AND (host = 'host_1' OR usage_user > 90) GROUP BY host".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE nosuchtag = 'x'".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE nosuchtag = '' GROUP BY host".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE host = 'host_2' OR host = 'host_2' OR host = 'nobody' GROUP BY host".to_string(),
        // The TSBS devops query forms, as tsbs_generate_queries writes them
        // for InfluxDB (its `hostname` is `host` here; T0 is 22:13:20).
        // single-groupby-1-1-1:
        "SELECT max(usage_user) from cpu where (host = 'host_1') and time >= '2023-11-14T22:13:20Z' and time < '2023-11-14T22:23:20Z' group by time(1m)".to_string(),
        // single-groupby-5-8-1 and cpu-max-all-8 (every field, all hosts):
        "SELECT max(usage_user),max(usage_system),max(requests) from cpu where (host = 'host_0' or host = 'host_1' or host = 'host_2' or host = 'host_3') and time >= '2023-11-14T22:20:00Z' and time < '2023-11-14T22:40:00Z' group by time(1m)".to_string(),
        // double-groupby-5:
        "SELECT mean(usage_user), mean(usage_system), mean(requests) from cpu where time >= '2023-11-14T22:13:20Z' and time < '2023-11-14T22:43:20Z' group by time(10m),host".to_string(),
        // groupby-orderby-limit: no lower time bound, so the intervals
        // start at the data's first point:
        "SELECT max(usage_user) from cpu WHERE time < '2023-11-14T22:31:30Z' group by time(1m) limit 5".to_string(),
        "SELECT max(usage_user) from cpu WHERE time < '2023-11-14T22:31:30Z' group by time(1m) ORDER BY time DESC limit 5".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE time < '2023-11-14T22:31:30Z' AND host = 'host_3' GROUP BY time(3m), region".to_string(),
        // Oldest buckets first with a limit: the window from the table's
        // oldest time (or the lower bound) is read, and read on above it
        // for a group whose first value comes later. usage_user > 5 is
        // first met at 22:14:30 by host_0 (its window starts a bucket
        // late), usage_user > 80 only after 22:31 (nothing in the
        // window); host_3 has nothing from 22:23:20 to 22:28:10.
        "SELECT max(usage_user) FROM cpu WHERE time < '2023-11-14T22:31:30Z' GROUP BY time(1m), host LIMIT 3".to_string(),
        "SELECT max(usage_user) FROM cpu WHERE usage_user > 5 AND time < '2023-11-14T22:31:30Z' GROUP BY time(1m), host LIMIT 3".to_string(),
        "SELECT max(usage_user), count(requests) FROM cpu WHERE usage_user > 80 AND time < '2023-11-14T22:40:00Z' GROUP BY time(1m), host fill(7) LIMIT 2 OFFSET 1".to_string(),
        // (InfluxDB 1.6 never answers this form with an offset in
        // GROUP BY time and no lower bound; with a lower bound it does.)
        "SELECT count(usage_user) FROM cpu WHERE time < '2023-11-14T22:31:30Z' GROUP BY time(1m), host LIMIT 2 SLIMIT 2 SOFFSET 1".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE time >= '2023-11-14T22:13:00Z' AND time < '2023-11-14T22:31:30Z' GROUP BY time(1m, -100s), host LIMIT 2 SLIMIT 2 SOFFSET 1".to_string(),
        "SELECT max(usage_user) FROM cpu WHERE host = 'host_3' AND time >= '2023-11-14T22:22:00Z' AND time < '2023-11-14T22:40:00Z' GROUP BY time(1m) fill(previous) LIMIT 5".to_string(),
        "SELECT max(usage_user) FROM cpu WHERE host = 'host_3' AND time >= '2023-11-14T22:23:30Z' AND time < '2023-11-14T22:40:00Z' GROUP BY time(1m) LIMIT 3".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE time >= '2023-11-14T22:23:30Z' AND time < '2023-11-14T22:40:00Z' GROUP BY time(1m), host fill(7) LIMIT 2 OFFSET 1".to_string(),
        "SELECT max(usage_user) FROM cpu WHERE usage_user > 80 AND time >= '2023-11-14T22:13:00Z' AND time < '2023-11-14T22:40:00Z' GROUP BY time(1m), host LIMIT 2 SLIMIT 3".to_string(),
        "SELECT max(usage_user) FROM cpu WHERE time < '2023-11-14T22:31:30Z' GROUP BY time(1m), host fill(none) LIMIT 3".to_string(),
        // Newest buckets first with a limit: only the window of the
        // answer's buckets is read. host_3 has no point from 22:23:20 to
        // 22:28:10, so its window holds nothing (two empty buckets) or
        // starts empty, where InfluxDB still answers from its first point.
        "SELECT max(usage_user) FROM cpu WHERE time < '2023-11-14T22:28:20Z' GROUP BY time(1m), host ORDER BY time DESC LIMIT 2".to_string(),
        "SELECT max(usage_user) FROM cpu WHERE time < '2023-11-14T22:29:00Z' GROUP BY time(1m), host ORDER BY time DESC LIMIT 3".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE host = 'host_3' AND time < '2023-11-14T22:28:20Z' GROUP BY time(1m) fill(7) ORDER BY time DESC LIMIT 2 OFFSET 1".to_string(),
        "SELECT mean(usage_user) FROM cpu WHERE time >= '2023-11-14T22:13:20Z' AND time < '2023-11-14T22:28:20Z' GROUP BY time(2m), host ORDER BY time DESC LIMIT 2".to_string(),
        // No host meets the condition below 22:23:00, host_3 nowhere.
        "SELECT max(usage_user) FROM cpu WHERE usage_user > 50 AND time < '2023-11-14T22:28:20Z' GROUP BY time(1m), host ORDER BY time DESC LIMIT 6".to_string(),
        "SELECT count(usage_user) FROM cpu WHERE time < '2023-11-14T22:28:20Z' GROUP BY time(1m, -100s), host ORDER BY time DESC LIMIT 2 SLIMIT 2 SOFFSET 2".to_string(),
        // fill(previous) under ORDER BY time DESC takes the newer
        // bucket's value (InfluxDB fills in the order it answers).
        "SELECT max(usage_user) FROM cpu WHERE host = 'host_3' AND time < '2023-11-14T22:28:20Z' GROUP BY time(1m) fill(previous) ORDER BY time DESC LIMIT 2".to_string(),
        "SELECT max(usage_user) FROM cpu WHERE host = 'host_3' AND time < '2023-11-14T22:31:00Z' GROUP BY time(1m) fill(previous) ORDER BY time DESC".to_string(),
        format!(
            "SELECT mean(usage_user) FROM cpu WHERE host = 'host_3' AND time >= {} AND time < {} GROUP BY time(1m) fill(linear) ORDER BY time DESC",
            t(300),
            t(1200)
        ),
        "SELECT max(usage_user) FROM cpu WHERE host = 'host_3' AND time < '2023-11-14T22:14:00Z' GROUP BY time(1m) ORDER BY time DESC LIMIT 5".to_string(),
        // lastpoint:
        "SELECT * from cpu group by \"host\" order by time desc limit 1".to_string(),
        // high-cpu-all and high-cpu-1:
        "SELECT * from cpu where usage_user > 90.0  and time >= '2023-11-14T22:13:20Z' and time < '2023-11-14T22:33:20Z'".to_string(),
        "SELECT * from cpu where usage_user > 90.0 and (host = 'host_1') and time >= '2023-11-14T22:13:20Z' and time < '2023-11-14T22:43:20Z'".to_string(),
        // Two series at the same instants in one group: first() and
        // last() take the larger value, as InfluxDB's reducers do.
        format!(
            "SELECT last(usage_user), first(usage_system) FROM cpu WHERE region = 'eu' AND time >= {} AND time < {} GROUP BY time(10m)",
            t(0),
            t(1800)
        ),
        // Descending: the series in reverse order too, SLIMIT counting so.
        format!(
            "SELECT max(usage_user) FROM cpu WHERE time >= {} AND time < {} GROUP BY time(5m), host ORDER BY time DESC SLIMIT 2",
            t(0),
            t(1800)
        ),
    ];
    let mut compared = 0;
    for q in &statements {
        for epoch in [None, Some("ms")] {
            let mut params = vec![("db", "bench"), ("q", q.as_str())];
            if let Some(e) = epoch {
                params.push(("epoch", e));
            }
            let [a, b] = query(&p, &params);
            assert_eq!(a.0, b.0, "{q} (epoch {epoch:?}): {} / {}", a.1, b.1);
            assert_close(&a.1, &b.1, &format!("{q} (epoch {epoch:?})"));
            compared += 1;
        }
    }
    assert_eq!(compared, statements.len() * 2);
    for epoch in [
        "u", "us", "µ", "ns", "s", "m", "h", "week", " ms ", "s\t", " ",
    ] {
        let q = "SELECT usage_user FROM cpu WHERE host = 'host_2' LIMIT 2";
        let [a, b] = query(&p, &[("db", "bench"), ("q", q), ("epoch", epoch)]);
        assert_eq!(a.0, b.0, "{q} (epoch {epoch}): {} / {}", a.1, b.1);
        assert_close(&a.1, &b.1, &format!("{q} (epoch {epoch})"));
    }
    // chunked=true: a JSON object per series (and per chunk_size values).
    for (q, size) in [
        (
            "SELECT max(usage_user) FROM cpu GROUP BY region; SELECT count(requests) FROM cpu",
            "10000",
        ),
        (
            "SELECT usage_user FROM cpu WHERE host = 'host_0' LIMIT 5",
            "2",
        ),
    ] {
        let path = format!(
            "/query?{}",
            form(&[
                ("db", "bench"),
                ("q", q),
                ("chunked", "true"),
                ("chunk_size", size)
            ])
        );
        let [a, b] = [&p.influx.addr, &p.halite.addr].map(|addr| {
            let r = request(addr, "GET", &path, None, b"").expect("query");
            assert_eq!(r.status, 200, "{}", r.text());
            r.text()
                .lines()
                .map(|l| serde_json::from_str::<Json>(l).expect("a JSON line"))
                .collect::<Vec<_>>()
        });
        assert_close(&Json::Array(a), &Json::Array(b), &format!("chunked {q}"));
    }
}

/// Answers that differed from InfluxDB 1.6 without the docs saying so:
/// which series `SLIMIT` and `SOFFSET` keep with two `GROUP BY` tags (the
/// order of InfluxDB's tag-set keys: `ab` before `a`, a missing tag), that
/// they keep them before a field condition is applied, and that
/// `mean()` of a string field (or a boolean) is an error.
#[test]
fn slimit_and_functions_over_strings_answer_as_influxdb_does() {
    let p = start();
    for addr in [&p.influx.addr, &p.halite.addr] {
        create_database(addr, "compat");
    }
    let lines = "slim,host=a,region=r1 v=1,s=\"x\",ok=true 1700000000000000000\n\
                 slim,host=ab,region=r1 v=2,s=\"y\",ok=false 1700000000000000000\n\
                 slim,host=b v=3,s=\"z\",ok=true 1700000001000000000\n\
                 slim,region=r2 v=4,s=\"w\",ok=true 1700000002000000000\n\
                 slim,host=a,region=r0 v=5,s=\"v\",ok=false 1700000003000000000\n\
                 slim,host=a,region=r1 v=6 1700000004000000000\n";
    let [a, b] = both(&p, "POST", "/write?db=compat", &[], lines.as_bytes());
    assert_eq!((a.0, b.0), (204, 204), "{a:?} {b:?}");
    let statements = [
        "SELECT sum(v) FROM slim GROUP BY host, region",
        "SELECT sum(v) FROM slim GROUP BY host, region SLIMIT 1",
        "SELECT sum(v) FROM slim GROUP BY host, region SLIMIT 2",
        "SELECT sum(v) FROM slim GROUP BY region, host SLIMIT 2 SOFFSET 2",
        "SELECT sum(v) FROM slim GROUP BY host, region SLIMIT 3 SOFFSET 3",
        "SELECT sum(v) FROM slim GROUP BY host, region SLIMIT 1 SOFFSET 9",
        "SELECT sum(v) FROM slim GROUP BY host, region SOFFSET 1",
        "SELECT v FROM slim GROUP BY host, region SLIMIT 3",
        "SELECT v FROM slim GROUP BY * SLIMIT 2",
        "SELECT sum(v) FROM slim GROUP BY host, region ORDER BY time DESC SLIMIT 2",
        // The first tag set chosen, before the condition empties it.
        "SELECT v FROM slim WHERE v > 4 GROUP BY host, region SLIMIT 2",
        "SELECT max(v) FROM slim WHERE v > 4 GROUP BY host SLIMIT 1",
        "SELECT v FROM slim WHERE time > 1700000003500000000 GROUP BY host SLIMIT 1",
        "SELECT v FROM slim SLIMIT 1",
        "SELECT v FROM slim SOFFSET 1",
        "SELECT mean(s) FROM slim",
        "SELECT sum(s) FROM slim",
        "SELECT max(s) FROM slim",
        "SELECT min(s) FROM slim GROUP BY host",
        "SELECT spread(s) FROM slim",
        "SELECT percentile(s, 50) FROM slim",
        "SELECT mean(ok) FROM slim",
        "SELECT sum(ok) FROM slim",
        "SELECT count(s), first(s), last(ok) FROM slim",
        "SELECT mean(v), mean(s) FROM slim",
        "SHOW DATABASES",
    ];
    for q in statements {
        let [a, b] = query(&p, &[("db", "compat"), ("q", q)]);
        assert_eq!(a.0, b.0, "{q}: {} / {}", a.1, b.1);
        assert_close(&a.1, &b.1, q);
    }
}

/// Python's `influxdb` client library (influxdb-python 5.3.2, in the
/// project's venv), run by `tests/clients/influxdb_python.py` against each
/// server: everything the library hands back (points, their Python types,
/// the errors it raises) must be the same. The library asks for
/// MessagePack answers, so this is also their test.
#[test]
fn the_python_influxdb_client_reads_halite_as_it_reads_influxdb() {
    let p = start();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".venv/bin/python");
    let script = root.join("tests/clients/influxdb_python.py");
    let run = |addr: &str| -> Json {
        let (host, port) = addr.rsplit_once(':').expect("host:port");
        let out = std::process::Command::new(&python)
            .arg(&script)
            .args([host, port])
            .output()
            .expect("the venv's python: run `make venv` (make test does)");
        assert!(
            out.status.success(),
            "{addr}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("the script prints JSON")
    };
    let (a, b) = (run(&p.influx.addr), run(&p.halite.addr));
    for key in ["version_1x", "write_dicts", "write_lines"] {
        assert_eq!(b[key], json!(["bool", true]), "{key}: {b}");
    }
    assert!(
        a["queries"].as_object().is_some_and(|q| q.len() == 16),
        "{a}"
    );
    assert_close(&a, &b, "influxdb-python");
}

/// The `influx` CLI that ships with InfluxDB (Debian's influxdb-client),
/// pointed at each server in turn: the same statements print the same
/// JSON.
#[test]
fn the_influx_cli_reads_halite_as_it_reads_influxdb() {
    let p = start();
    let cli = |addr: &str, q: &str| -> Json {
        let (host, port) = addr.rsplit_once(':').expect("host:port");
        let out = std::process::Command::new("influx")
            .args([
                "-host",
                host,
                "-port",
                port,
                "-database",
                "cli",
                "-format",
                "json",
            ])
            .args(["-precision", "rfc3339", "-execute", q])
            .output()
            .expect("influx: install Debian's influxdb-client (make test does)");
        assert!(
            out.status.success(),
            "{q}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{q}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    };
    for addr in [&p.influx.addr, &p.halite.addr] {
        create_database(addr, "cli");
        let r = request(
            addr,
            "POST",
            "/write?db=cli&precision=s",
            None,
            cpu_lines().as_bytes(),
        )
        .expect("write");
        assert_eq!(r.status, 204, "{}", r.text());
    }
    for q in [
        "SHOW MEASUREMENTS",
        "SHOW TAG VALUES WITH KEY = \"host\"",
        "SELECT max(usage_user), min(usage_system) FROM cpu GROUP BY region",
        "SELECT usage_user FROM cpu WHERE host = 'host_2' ORDER BY time DESC LIMIT 3",
    ] {
        let (a, b) = (cli(&p.influx.addr, q), cli(&p.halite.addr, q));
        assert_close(&a, &b, q);
    }
}

/// TSBS's devops data set (cpu-only, its ten tags; 16 hosts, 13 hours at
/// 10 s) and its 15 query types as `tsbs_generate_queries` writes them for
/// InfluxDB, two of each from one seed: halite answers as InfluxDB 1.6.
#[test]
fn the_15_tsbs_devops_query_types_answer_as_influxdb_does() {
    use halite::tsbs::devops::{Bodies, INTERVAL_MS, QueryType, Rng, START_MS};
    let p = start();
    // HALITE_TSBS_HOSTS and HALITE_TSBS_HOURS run it on more data.
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let hosts = env("HALITE_TSBS_HOSTS", 16);
    let steps = env("HALITE_TSBS_HOURS", 13) * 3_600_000 / INTERVAL_MS;
    for addr in [&p.influx.addr, &p.halite.addr] {
        create_database(addr, "tsbs");
        for body in Bodies::new(hosts, steps, 5_000) {
            let r = request(
                addr,
                "POST",
                "/write?db=tsbs&precision=ms",
                None,
                body.as_bytes(),
            )
            .expect("write");
            assert_eq!(r.status, 204, "{addr}: {}", r.text());
        }
    }
    let end = START_MS + steps * INTERVAL_MS;
    let mut compared = 0;
    // As written (partly flushed already at the test server's flush
    // size), then from one store file a region after a flush and a major
    // compaction (read by column, a series' rows in runs, `fold_file`).
    for stored in [false, true] {
        if stored {
            for step in ["flush", "compact"] {
                let path = format!("/api/v1/tables/tsbs:cpu/{step}");
                let r = request(&p.halite.addr, "POST", &path, None, b"").expect(step);
                assert!(r.status / 100 == 2, "{step}: {}", r.text());
            }
        }
        let mut rng = Rng::new(2016);
        for kind in QueryType::ALL {
            for _ in 0..2 {
                let q = kind.influxql(&mut rng, hosts, START_MS, end);
                // HALITE_TSBS_ONLY=high-cpu runs only the types so named.
                if std::env::var("HALITE_TSBS_ONLY").is_ok_and(|only| !kind.name().contains(&only))
                {
                    compared += 2;
                    continue;
                }
                for epoch in [None, Some("ms")] {
                    let mut params = vec![("db", "tsbs"), ("q", q.as_str())];
                    if let Some(e) = epoch {
                        params.push(("epoch", e));
                    }
                    let [a, b] = query(&p, &params);
                    let at = format!("{} {q} (epoch {epoch:?}, stored {stored})", kind.name());
                    assert_eq!(a.0, 200, "{at}: {}", a.1);
                    assert_eq!(b.0, 200, "{at}: {}", b.1);
                    if !matches!(kind, QueryType::HighCpu { .. }) {
                        assert!(
                            a.1.pointer("/results/0/series/0").is_some(),
                            "{at}: InfluxDB answered no series: {}",
                            a.1
                        );
                    }
                    assert_close(
                        &common::influx::without_long_partial(a.1.clone()),
                        &b.1,
                        &at,
                    );
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 120);
}

/// Telegraf-like counters and gauges for the transformations: `net`
/// (integer byte counters, one reset, a host silent for a while) of
/// three hosts and two interfaces, `mem` and a boolean. Each series is a
/// second or so apart from the others, so rows of series merged in time
/// order have no ties (whose order InfluxDB leaves to its heap).
fn counter_lines() -> String {
    let mut out = String::new();
    for h in 0..3i64 {
        for (n, iface) in ["eth0", "eth1"].into_iter().enumerate() {
            let mut bytes = 1_000 * (h + 1);
            for i in 0..60i64 {
                if h == 2 && (20..28).contains(&i) {
                    continue;
                }
                bytes += (i * 37 + h * 11 + n as i64 * 5) % 300;
                if h == 1 && n == 0 && i == 30 {
                    bytes = 7;
                }
                let packets = bytes as f64 / 3.0 + 0.25;
                out.push_str(&format!(
                    "net,host=h{h},interface={iface} bytes_recv={bytes}i,packets_recv={packets},err_in={}i {}\n",
                    i / 7,
                    T0 + i * 10 + h * 2 + n as i64
                ));
            }
        }
        for i in 0..20i64 {
            let used = 1_000_000 + (i * 7_919 + h * 104_729) % 500_000;
            out.push_str(&format!(
                "mem,host=h{h} used={used}i,total=2000000i,available_percent={},up={} {}\n",
                100.0 - used as f64 / 20_000.0,
                i % 3 != 0,
                T0 + i * 30 + h * 2
            ));
        }
    }
    out
}

/// The rates of counters, arithmetic in the select list and the other
/// transformations (issue #60) as Telegraf dashboards and Grafana's
/// editor write them: each statement through InfluxDB 1.6 and halite
/// given the same points, every answer (status and body) equal, errors
/// included. Before, each was a parse error (`found (, expected )`).
#[test]
fn transformations_and_arithmetic_answer_as_influxdb_does() {
    let p = start();
    create_bench(&p);
    let [a, b] = both(
        &p,
        "POST",
        "/write?db=bench&precision=s",
        &[],
        counter_lines().as_bytes(),
    );
    assert_eq!((a.0, b.0), (204, 204), "{a:?} {b:?}");
    let s = |secs: i64| format!("{}s", T0 + secs);
    let ms = |secs: i64| format!("{}ms", (T0 + secs) * 1000);
    // Grafana's $timeFilter over the points, aligned and not.
    let range = format!("time >= {} AND time <= {}", ms(0), ms(600));
    let unaligned = format!("time >= {} AND time <= {}", s(17), s(583));
    let statements = vec![
        // Telegraf's network panel, as Grafana's editor writes it.
        format!(
            "SELECT non_negative_derivative(mean(\"bytes_recv\"), 1s) FROM \"net\" WHERE (\"host\" =~ /^h0$/) AND {range} GROUP BY time(30s), \"interface\" fill(null)"
        ),
        format!(
            "SELECT non_negative_derivative(mean(\"bytes_recv\"), 1s) * 8 AS \"bits\" FROM \"net\" WHERE {unaligned} GROUP BY time(1m), \"host\", \"interface\" fill(null)"
        ),
        format!(
            "SELECT derivative(mean(bytes_recv)), difference(max(bytes_recv)), non_negative_difference(last(err_in)) FROM net WHERE {unaligned} GROUP BY time(40s), host"
        ),
        format!(
            "SELECT mean(bytes_recv), derivative(mean(bytes_recv), 10s) FROM net WHERE host = 'h2' AND {unaligned} GROUP BY time(30s), interface"
        ),
        format!(
            "SELECT derivative(mean(bytes_recv), 1s) FROM net WHERE host = 'h2' AND {unaligned} GROUP BY time(30s) fill(0)"
        ),
        format!(
            "SELECT derivative(mean(bytes_recv), 1s) FROM net WHERE host = 'h2' AND {unaligned} GROUP BY time(30s) fill(previous)"
        ),
        format!(
            "SELECT derivative(mean(bytes_recv), 1s) FROM net WHERE host = 'h2' AND {unaligned} GROUP BY time(30s) fill(linear)"
        ),
        format!(
            "SELECT mean(packets_recv), derivative(mean(packets_recv)) FROM net WHERE host = 'h2' AND {unaligned} GROUP BY time(30s) fill(7)"
        ),
        format!(
            "SELECT derivative(mean(bytes_recv), 1s) FROM net WHERE {range} GROUP BY time(1m), host fill(none)"
        ),
        format!(
            "SELECT derivative(max(bytes_recv)), non_negative_derivative(max(bytes_recv)) FROM net WHERE {unaligned} GROUP BY time(1m), host ORDER BY time DESC"
        ),
        format!(
            "SELECT mean(bytes_recv), derivative(mean(bytes_recv)) FROM net WHERE host = 'h2' AND {range} GROUP BY time(1m) LIMIT 3 OFFSET 2"
        ),
        format!(
            "SELECT derivative(mean(bytes_recv)) FROM net WHERE {range} GROUP BY time(1m), host SLIMIT 2 SOFFSET 1"
        ),
        format!(
            "SELECT moving_average(mean(packets_recv), 3), cumulative_sum(sum(err_in)), elapsed(last(err_in), 1s) FROM net WHERE {unaligned} GROUP BY time(1m), host"
        ),
        // Descending, fill(previous) takes the newer bucket's value, and
        // the bucket beyond the range is the one after it.
        format!(
            "SELECT derivative(mean(bytes_recv), 1s) FROM net WHERE host = 'h2' AND {unaligned} GROUP BY time(30s) fill(previous) ORDER BY time DESC"
        ),
        format!(
            "SELECT mean(bytes_recv), non_negative_difference(mean(bytes_recv)) FROM net WHERE host = 'h2' AND {unaligned} GROUP BY time(30s) fill(previous) ORDER BY time DESC LIMIT 6"
        ),
        // Raw points: rates, differences and running sums of each series.
        "SELECT non_negative_derivative(bytes_recv, 1s) FROM net WHERE host = 'h1' GROUP BY interface"
            .to_string(),
        "SELECT derivative(bytes_recv), difference(bytes_recv), non_negative_difference(bytes_recv) FROM net WHERE host = 'h1' AND interface = 'eth0'"
            .to_string(),
        "SELECT derivative(packets_recv, 1m) FROM net GROUP BY host LIMIT 4 OFFSET 1".to_string(),
        "SELECT difference(bytes_recv), derivative(bytes_recv) FROM net WHERE host = 'h0' AND interface = 'eth1' ORDER BY time DESC LIMIT 5"
            .to_string(),
        "SELECT cumulative_sum(err_in), moving_average(packets_recv, 4), elapsed(bytes_recv, 1s) FROM net WHERE host = 'h2' AND interface = 'eth0'"
            .to_string(),
        "SELECT elapsed(up) FROM mem WHERE host = 'h0' ORDER BY time DESC".to_string(),
        "SELECT non_negative_derivative(bytes_recv) FROM net WHERE host = 'h0'".to_string(),
        // Arithmetic over aggregates: Grafana's memory and CPU panels.
        format!(
            "SELECT 100 - mean(\"available_percent\") FROM \"mem\" WHERE {range} GROUP BY time(2m), \"host\" fill(null)"
        ),
        format!(
            "SELECT mean(\"used\") / 1024 / 1024 AS \"MiB\", max(used) - min(used), mean(used) / mean(total) * 100 FROM mem WHERE {unaligned} GROUP BY time(3m), host"
        ),
        format!("SELECT last(used) / last(total) * 100 FROM mem WHERE {range} GROUP BY host"),
        format!("SELECT last(used) / 1024 FROM mem WHERE host = 'h1' AND {range}"),
        format!(
            "SELECT sum(err_in) % 3, count(err_in) * 2, max(err_in) & 1, sum(err_in) / 0 FROM net WHERE {range} GROUP BY host"
        ),
        format!(
            "SELECT mean(bytes_recv) + mean(packets_recv) FROM net WHERE {unaligned} GROUP BY time(2m), host fill(none)"
        ),
        // Arithmetic over raw points.
        "SELECT bytes_recv * 8, packets_recv - bytes_recv, bytes_recv / 3, bytes_recv % 7, -err_in, (err_in + 1) * 2 FROM net WHERE host = 'h0' AND interface = 'eth0' LIMIT 12"
            .to_string(),
        "SELECT used / total * 100 AS pct, available_percent FROM mem WHERE host = 'h2'".to_string(),
        "SELECT up & true, up | false, up ^ up FROM mem WHERE host = 'h1'".to_string(),
        "SELECT used * 2, up FROM mem WHERE host = 'h1' ORDER BY time DESC LIMIT 3".to_string(),
        "SELECT available_percent % 0, used % 0 FROM mem WHERE host = 'h0' LIMIT 2".to_string(),
        "SELECT bytes_recv * 8 FROM net WHERE host = 'h0' ORDER BY time DESC LIMIT 2 OFFSET 1"
            .to_string(),
        // Errors, each as InfluxDB words it.
        "SELECT derivative(bytes_recv), err_in FROM net".to_string(),
        "SELECT derivative(mean(bytes_recv)) FROM net".to_string(),
        format!("SELECT derivative(bytes_recv) FROM net WHERE {range} GROUP BY time(1m)"),
        "SELECT derivative(bytes_recv, 0s) FROM net".to_string(),
        "SELECT derivative(bytes_recv, 5) FROM net".to_string(),
        "SELECT derivative(bytes_recv, 1s, 2) FROM net".to_string(),
        "SELECT difference(bytes_recv, 1s) FROM net".to_string(),
        "SELECT moving_average(bytes_recv) FROM net".to_string(),
        "SELECT moving_average(bytes_recv, 1) FROM net".to_string(),
        "SELECT moving_average(bytes_recv, 2.5) FROM net".to_string(),
        "SELECT nosuch(bytes_recv) FROM net".to_string(),
        "SELECT nosuch(mean(bytes_recv)) FROM net".to_string(),
        "SELECT mean(derivative(bytes_recv)) FROM net".to_string(),
        "SELECT mean(bytes_recv * 2) FROM net".to_string(),
        "SELECT mean(bytes_recv) + err_in FROM net".to_string(),
        "SELECT 1 + 2 FROM net".to_string(),
        "SELECT host * 2 FROM net".to_string(),
        "SELECT bytes_recv + 'x' FROM net".to_string(),
        "SELECT packets_recv & 1 FROM net".to_string(),
        "SELECT up + 1 FROM mem".to_string(),
        "SELECT cumulative_sum(up) FROM mem".to_string(),
        "SELECT moving_average(up, 2) FROM mem".to_string(),
        "SELECT mean(err_in) & 3 FROM net".to_string(),
        "SELECT count(up) + 'x' FROM mem".to_string(),
        "SELECT bytes_recv * (true + 1) FROM net".to_string(),
        "SELECT non_negative_derivative(up) FROM mem".to_string(),
        // A name nobody wrote takes the other side's type: no error.
        "SELECT nosuch + 'x' FROM net".to_string(),
        "SELECT derivative(nosuch) FROM net".to_string(),
        "SELECT nosuch * 2 FROM net".to_string(),
    ];
    let (mut compared, mut answered, mut refused) = (0, 0, 0);
    for q in &statements {
        for epoch in [None, Some("s")] {
            let mut params = vec![("db", "bench"), ("q", q.as_str())];
            if let Some(e) = epoch {
                params.push(("epoch", e));
            }
            let [a, b] = query(&p, &params);
            assert_eq!(a.0, b.0, "{q} (epoch {epoch:?}): {} / {}", a.1, b.1);
            assert_close(&a.1, &b.1, &format!("{q} (epoch {epoch:?})"));
            let result = &a.1["results"][0];
            if result.get("error").is_some() {
                refused += 1;
            } else if result["series"][0]["values"]
                .as_array()
                .is_some_and(|v| !v.is_empty())
            {
                answered += 1;
            }
            compared += 1;
        }
    }
    assert_eq!(compared, statements.len() * 2);
    // The statements above the errors answer rows (but the last three,
    // of a field nobody wrote); the errors are errors.
    assert_eq!((answered, refused), (2 * 34, 2 * 26), "answered, refused");
}

/// The function menus of Grafana's InfluxQL editor and the select list's
/// other forms (issue #60), each statement through InfluxDB 1.6 and
/// halite given the same points (`counter_lines` and a measurement with
/// a string field), every answer equal, errors included: median, mode,
/// stddev, distinct and count(distinct()), integral, top and bottom (with
/// tags), sample (of buckets it answers whole: InfluxDB's choice among
/// more points is random), selectors beside fields and tags, calls of `*`
/// and `/re/`, `/re/` columns, `::` casts, bare `ORDER BY asc`, and
/// several measurements or a pattern in `FROM` (`FROM /^(mem|s)$/`), and
/// subqueries (a sum of per-host rates).
/// Before, each was an error ("undefined function", a parse error, or
/// `mean(*)` refused), and a count of a field the measurement lacks was 0
/// where InfluxDB answers null.
#[test]
fn function_menus_answer_as_influxdb_does() {
    let p = start();
    create_bench(&p);
    let mut lines = counter_lines();
    for (host, field, n, secs) in [
        ("a", "x", 1, 0),
        ("a", "y", 2, 10),
        ("b", "x", 2, 10),
        ("b", "z", 3, 20),
    ] {
        lines.push_str(&format!(
            "s,host={host} f=\"{field}\",n={n}i {}\n",
            T0 + secs
        ));
    }
    let [a, b] = both(
        &p,
        "POST",
        "/write?db=bench&precision=s",
        &[],
        lines.as_bytes(),
    );
    assert_eq!((a.0, b.0), (204, 204), "{a:?} {b:?}");
    let statements: Vec<&str> = FUNCTION_MENUS.lines().filter(|l| !l.is_empty()).collect();
    let (mut answered, mut refused, mut unparsed) = (0, 0, 0);
    for q in &statements {
        for epoch in [None, Some("s")] {
            let mut params = vec![("db", "bench"), ("q", *q)];
            if let Some(e) = epoch {
                params.push(("epoch", e));
            }
            let [a, b] = query(&p, &params);
            assert_eq!(a.0, b.0, "{q} (epoch {epoch:?}): {} / {}", a.1, b.1);
            assert_close(&a.1, &b.1, &format!("{q} (epoch {epoch:?})"));
            let result = &a.1["results"][0];
            if a.0 == 400 {
                unparsed += 1;
            } else if result.get("error").is_some() {
                refused += 1;
            } else if result["series"][0]["values"]
                .as_array()
                .is_some_and(|v| !v.is_empty())
            {
                answered += 1;
            }
        }
    }
    assert_eq!(statements.len(), 273);
    assert_eq!(
        (answered, refused, unparsed),
        (2 * 203, 2 * 52, 2 * 5),
        "answered, refused, unparsed"
    );
}

/// The statements of [`function_menus_answer_as_influxdb_does`], a line
/// each (times are `counter_lines`' T0 = 1700000000 s on).
const FUNCTION_MENUS: &str = r#"
SELECT median(bytes_recv), mode(err_in), stddev(packets_recv), spread(bytes_recv) FROM net WHERE host='h0'
SELECT median(bytes_recv) FROM net WHERE host='h0' AND interface='eth0' AND time >= 1700000000s AND time < 1700000040s GROUP BY time(20s)
SELECT distinct(err_in) FROM net WHERE host='h0'
SELECT count(distinct(err_in)) FROM net GROUP BY host
SELECT distinct(err_in) FROM net WHERE time >= 1700000000s AND time < 1700000200s GROUP BY time(100s)
SELECT top(bytes_recv, 3) FROM net
SELECT top(bytes_recv, host, 2) FROM net
SELECT top(bytes_recv, host, interface, 4), packets_recv FROM net
SELECT bottom(bytes_recv, 2) FROM net WHERE time >= 1700000000s AND time < 1700000200s GROUP BY time(100s)
SELECT max(bytes_recv), host FROM net
SELECT max(bytes_recv), packets_recv, host FROM net GROUP BY interface
SELECT mean(*) FROM mem
SELECT last(*) FROM mem
SELECT max(/a/) FROM mem
SELECT integral(used) FROM mem WHERE host='h0'
SELECT integral(available_percent, 1m) FROM mem WHERE host='h0' AND time >= 1700000000s AND time < 1700000300s GROUP BY time(100s)
SELECT sample(used, 100) FROM mem WHERE host='h0' LIMIT 3
SELECT mode(up), median(used), stddev(used) FROM mem WHERE host='h0' AND time >= 1700000000s AND time < 1700000100s GROUP BY time(20s)
SELECT stddev(used) FROM mem WHERE host='h0' AND time >= 1700000000s AND time < 1700000100s GROUP BY time(20s) fill(none)
SELECT distinct(err_in) FROM net WHERE host='h0' AND time >= 1700000000s AND time < 1700000100s GROUP BY time(20s) fill(none)
SELECT distinct(up) FROM mem WHERE host='h0' AND time >= 1700000000s AND time < 1700000100s GROUP BY time(20s) fill(0)
SELECT median(up) FROM mem
SELECT stddev(up) FROM mem
SELECT mode(host) FROM mem
SELECT median(host) FROM mem
SELECT distinct(err_in), max(err_in) FROM net
SELECT mean(distinct(err_in)) FROM net
SELECT top(bytes_recv, 2), max(err_in) FROM net
SELECT top(bytes_recv) FROM net
SELECT top(bytes_recv, 0) FROM net
SELECT top(bytes_recv, 2.5) FROM net
SELECT top(bytes_recv, 'x', 2) FROM net
SELECT top(bytes_recv, host, 2) FROM net GROUP BY host
SELECT top(up, 2) FROM mem
SELECT sample(used, 0) FROM mem
SELECT sample(used) FROM mem
SELECT integral(up) FROM mem
SELECT integral(used, 5) FROM mem
SELECT distinct(used) FROM mem WHERE host='h0' LIMIT 3 OFFSET 1
SELECT count(distinct(up)) FROM mem
SELECT distinct(host) FROM mem
SELECT distinct(err_in) FROM net WHERE host='h2' AND interface='eth0' AND time >= 1700000180s AND time < 1700000300s GROUP BY time(20s)
SELECT top(err_in, 3) FROM net WHERE host='h2' AND interface='eth0' AND time >= 1700000180s AND time < 1700000300s GROUP BY time(20s)
SELECT top(err_in, 3) FROM net WHERE time >= 1700000180s AND time < 1700000300s
SELECT bottom(err_in, host, 2) FROM net
SELECT sample(err_in, 5) FROM net WHERE host='h2' AND interface='eth0' AND time >= 1700000180s AND time < 1700000300s GROUP BY time(20s)
SELECT mode(err_in) FROM net WHERE time >= 1700000000s AND time < 1700000140s
SELECT median(err_in), mean(err_in) FROM net WHERE host='h2' AND interface='eth0' AND time >= 1700000160s AND time < 1700000300s GROUP BY time(20s) fill(previous)
SELECT "used"::field, "host"::tag FROM mem WHERE host='h0' LIMIT 2
SELECT mean("used"::field) FROM mem WHERE "host"::tag = 'h0'
SELECT mean(used) FROM mem GROUP BY "host"::tag
SELECT used FROM mem WHERE host='h0' ORDER BY asc LIMIT 1
SELECT used FROM mem WHERE host='h0' ORDER BY desc LIMIT 1
SELECT used FROM mem ORDER BY host LIMIT 1
SELECT max(bytes_recv), host FROM net WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(100s)
SELECT max(bytes_recv), min(bytes_recv), host FROM net
SELECT mean(bytes_recv), host FROM net
SELECT max(bytes_recv), * FROM net WHERE host='h0'
SELECT last(bytes_recv), host FROM net WHERE host='h2' AND time >= 1700000180s AND time < 1700000300s GROUP BY time(20s)
SELECT last(bytes_recv), host FROM net WHERE host='h2' AND time >= 1700000180s AND time < 1700000300s GROUP BY time(20s) fill(none)
SELECT percentile(bytes_recv, 50), interface FROM net WHERE host='h2'
SELECT top(bytes_recv, 2) FROM net GROUP BY host
SELECT top(bytes_recv, 2) FROM net ORDER BY time DESC
SELECT top(bytes_recv, 5) FROM net WHERE host='h0' LIMIT 2 OFFSET 1
SELECT top(bytes_recv, host, 2), host FROM net
SELECT max(*) FROM mem
SELECT count(*) FROM mem
SELECT median(*), mode(*), stddev(*), spread(*) FROM mem
SELECT mean(*) AS x FROM mem
SELECT /u/ FROM mem LIMIT 1
SELECT top(*, 2) FROM mem
SELECT distinct(*) FROM mem
SELECT percentile(*, 50) FROM mem
SELECT integral(*) FROM mem WHERE host='h0'
SELECT count(distinct(*)) FROM mem
SELECT integral(used) FROM mem
SELECT integral(used), mean(used) FROM mem WHERE host='h0'
SELECT last(bytes_recv), host, err_in FROM net WHERE host='h2' AND time >= 1700000180s AND time < 1700000300s GROUP BY time(20s) fill(previous)
SELECT last(bytes_recv), host, err_in FROM net WHERE host='h2' AND time >= 1700000180s AND time < 1700000300s GROUP BY time(20s) fill(3)
SELECT max(bytes_recv), * FROM net WHERE host='h0' GROUP BY interface
SELECT max(bytes_recv), host FROM net GROUP BY host
SELECT /o/ FROM mem LIMIT 1
SELECT /o/, used FROM mem LIMIT 1
SELECT sample(used, 2.5) FROM mem
SELECT sample(used, -1) FROM mem
SELECT mode(up) FROM mem WHERE host='h0'
SELECT first(used), nosuch FROM mem WHERE host='h0'
SELECT max(used) AS m, host AS h FROM mem
SELECT max(nosuch), host FROM mem
SELECT distinct(nosuch) FROM mem
SELECT top(nosuch, 2) FROM mem
SELECT median(nosuch), mode(nosuch) FROM mem
SELECT mode(f), count(distinct(f)), median(n), mode(n) FROM s
SELECT distinct(f) FROM s
SELECT median(f) FROM s
SELECT stddev(f) FROM s
SELECT integral(f) FROM s
SELECT top(f, 2) FROM s
SELECT max(n), f FROM s
SELECT mode(n) FROM s WHERE time >= 1700000000s AND time < 1700000030s GROUP BY time(10s) fill(1.5)
SELECT median(n) FROM s WHERE time >= 1700000000s AND time < 1700000030s GROUP BY time(10s) fill(1)
SELECT count(distinct(n)) FROM s WHERE time >= 1700000000s AND time < 1700000040s GROUP BY time(10s)
SELECT integral(n) FROM s
SELECT integral(n) FROM s WHERE time >= 1700000000s AND time < 1700000040s GROUP BY time(10s)
SELECT integral(n), mean(n) FROM s WHERE time >= 1700000000s AND time < 1700000040s GROUP BY time(10s)
SELECT top(bytes_recv, 2) FROM net WHERE time >= 1700000000s AND time < 1700000200s GROUP BY time(100s) ORDER BY time DESC
SELECT distinct(err_in) FROM net WHERE time >= 1700000000s AND time < 1700000200s GROUP BY time(100s) ORDER BY time DESC
SELECT distinct(err_in) FROM net ORDER BY time DESC
SELECT top(bytes_recv, 2), host FROM net WHERE time >= 1700000000s AND time < 1700000200s GROUP BY time(100s) ORDER BY time DESC
SELECT distinct(err_in) FROM net WHERE time >= 1700000100s
SELECT integral(used) FROM mem WHERE host='h0' AND time >= 1699999000s
SELECT max(used), host FROM mem WHERE time >= 1700000000s AND time < 1700000100s GROUP BY time(50s) ORDER BY time DESC
SELECT bottom(used, host, 2) FROM mem WHERE time >= 1700000000s AND time < 1700000100s GROUP BY time(50s)
SELECT host, max(used) FROM mem
SELECT host, top(used, host, 2), total FROM mem
SELECT max(*), host FROM mem
SELECT mode(bytes_recv), median(bytes_recv), stddev(bytes_recv) FROM net WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(1m), host
SELECT mode(err_in) FROM net WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(1m)
SELECT mode(err_in) FROM net WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(30s), interface
SELECT median(packets_recv), percentile(packets_recv, 90), stddev(packets_recv) FROM net GROUP BY host, interface
SELECT count(distinct(err_in)), count(err_in), max(err_in) FROM net WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(2m) fill(none)
SELECT count(distinct(up)) FROM mem WHERE time >= 1700000000s AND time < 1700000700s GROUP BY time(2m), host fill(7)
SELECT top(bytes_recv, 2) FROM net WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(2m), host
SELECT top(bytes_recv, interface, 1) FROM net WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(5m), host
SELECT bottom(packets_recv, host, 3), interface FROM net WHERE time >= 1700000100s
SELECT top(bytes_recv, 3) FROM net GROUP BY host SLIMIT 2 SOFFSET 1
SELECT distinct(err_in) FROM net GROUP BY host LIMIT 3
SELECT distinct(err_in) AS d FROM net WHERE host = 'h1'
SELECT top(bytes_recv, 2) AS t, host FROM net
SELECT err_in, top(bytes_recv, 2), host FROM net WHERE interface = 'eth1'
SELECT packets_recv, max(bytes_recv) FROM net GROUP BY host
SELECT last(available_percent), used, up FROM mem WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(2m), host
SELECT first(used), * FROM mem GROUP BY host
SELECT min(up), max(up), first(up), last(up) FROM mem GROUP BY host
SELECT max(up) FROM mem WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(2m) fill(previous)
SELECT max(used), host FROM mem WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(2m) ORDER BY time DESC LIMIT 2
SELECT min(used), available_percent FROM mem WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(100s) fill(linear)
SELECT percentile(used, 75), host, up FROM mem WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(3m)
SELECT mean(*) FROM mem GROUP BY *
SELECT count(*) FROM net WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(5m)
SELECT max(/_recv/) FROM net GROUP BY host
SELECT last(/^a/) FROM mem
SELECT /recv/ FROM net WHERE host='h0' LIMIT 2
SELECT /e/ FROM net WHERE host='h0' GROUP BY interface LIMIT 2
SELECT mean(*), max(*) FROM mem WHERE host='h2'
SELECT median(*) AS m FROM net GROUP BY interface
SELECT spread(*) FROM mem WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m) fill(none)
SELECT integral(packets_recv) FROM net WHERE host='h1' AND interface='eth0'
SELECT integral(packets_recv, 10s) FROM net WHERE host='h2' AND interface='eth1' AND time >= 1700000100s AND time < 1700000400s GROUP BY time(1m)
SELECT integral(available_percent) FROM mem WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(150s)
SELECT integral(available_percent), mean(available_percent) FROM mem WHERE host='h1' AND time >= 1700000000s AND time < 1700000600s GROUP BY time(150s)
SELECT integral(available_percent) FROM mem WHERE host='h0' AND time >= 1700000000s
SELECT integral(used, 0s) FROM mem
SELECT integral(used, 1s, 2) FROM mem
SELECT integral(mean(used)) FROM mem
SELECT integral(used), host FROM mem
SELECT median(used), host FROM mem
SELECT count(distinct(used)), host FROM mem
SELECT distinct(used, total) FROM mem
SELECT distinct() FROM mem
SELECT top(used, host) FROM mem
SELECT top(used, host, 0) FROM mem
SELECT top(used, 2, host) FROM mem
SELECT top(mean(used), 2) FROM mem
SELECT bottom(up, 2) FROM mem
SELECT sample(used, 60) FROM mem WHERE host='h1' AND time >= 1700000100s AND time < 1700000300s
SELECT sample(up, 100), host FROM mem WHERE host='h2' AND time >= 1700000000s AND time < 1700000200s GROUP BY time(1m)
SELECT sample(mean(used), 2) FROM mem
SELECT sample(used, 'x') FROM mem
SELECT mode(available_percent), mode(used), mode(total) FROM mem GROUP BY host
SELECT stddev(total), stddev(used) FROM mem WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m) fill(0)
SELECT median(used) FROM mem WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m) fill(linear)
SELECT mean(used) FROM mem WHERE host::tag = 'h1'
SELECT used::integer FROM mem WHERE host = 'h1' LIMIT 2
SELECT mean(used::integer) FROM mem GROUP BY host::tag
SELECT used FROM mem WHERE host='h0' ORDER BY time ASC LIMIT 1
SELECT used FROM mem WHERE host='h0' ORDER BY DESC LIMIT 2
SELECT mean(used) FROM mem WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m) ORDER BY desc
SELECT used FROM mem ORDER BY used
SELECT used FROM mem ORDER BY time, host
SELECT used::bogus FROM mem
SELECT count(distinct(err_in)) * 2 FROM net
SELECT mean(*) * 2 FROM mem
SELECT derivative(distinct(err_in)) FROM net
SELECT mode(host), count(distinct(host)) FROM mem
SELECT percentile(used, 50), *  FROM mem WHERE host='h2'
SELECT * FROM mem, s LIMIT 1
SELECT * FROM /^(mem|s)$/ LIMIT 1
SELECT mean(used), mean(n) FROM mem, s
SELECT mean(used) FROM mem, s
SELECT max(used), host FROM /m/
SELECT mean(*) FROM /^(mem|s)$/
SELECT count(n) FROM s, mem GROUP BY host
SELECT count(n), count(used) FROM s, mem GROUP BY host
SELECT used, n FROM /^(mem|s)$/ WHERE host='a' OR host='h0' LIMIT 1
SELECT mean(used) FROM mem, s SLIMIT 1
SELECT mean(used) FROM /^nosuch/
SELECT mean(used) FROM bench.autogen./^m/
SELECT mean(used) FROM bench../^m/
SELECT n FROM s, s LIMIT 1
SELECT count(n), count(used) FROM s, mem GROUP BY host SLIMIT 2 SOFFSET 1
SELECT count(n), count(used) FROM s, mem GROUP BY host SOFFSET 1
SELECT count(n), count(used) FROM s, mem GROUP BY host ORDER BY time DESC
SELECT last(*) FROM /^(mem|s)$/ GROUP BY host
SELECT * FROM /^(mem|s)$/ GROUP BY host LIMIT 1
SELECT /^u/ FROM mem, net WHERE host = 'h1' LIMIT 2
SELECT mean(bytes_recv), mean(used) FROM /^(net|mem)$/ WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m), host
SELECT top(n, 1) FROM s, mem
SELECT non_negative_derivative(mean(bytes_recv), 1s) FROM /^net$/ WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m), host
SELECT count(nosuch), count(used) FROM mem
SELECT count(nosuch), count(used) FROM mem WHERE time >= 1700000000s AND time < 1700000100s GROUP BY time(50s)
SELECT count(distinct(nosuch)), count(used) FROM mem
SELECT count(n), count(used) FROM s WHERE time >= 1700000000s AND time < 1700000030s GROUP BY time(10s)
SELECT sum(rate) FROM (SELECT non_negative_derivative(mean(bytes_recv), 1s) AS rate FROM net WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(1m), host) WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(1m)
SELECT sum(rate) FROM (SELECT non_negative_derivative(mean(bytes_recv), 1s) AS rate FROM net GROUP BY time(1m), host, interface) WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(1m), host
SELECT max(m) FROM (SELECT mean(used) AS m FROM mem GROUP BY host)
SELECT max(m), min(m) FROM (SELECT mean(used) AS m FROM mem WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(2m), host) WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(2m)
SELECT mean(used) FROM (SELECT used FROM mem WHERE host = 'h1')
SELECT * FROM (SELECT used, total FROM mem WHERE host = 'h1') LIMIT 3
SELECT used FROM (SELECT used, host FROM mem) WHERE used > 1300000
SELECT count(used) FROM (SELECT used FROM mem) GROUP BY host
SELECT mean(m) FROM (SELECT max(used) AS m FROM mem GROUP BY host)
SELECT last(m) FROM (SELECT max(used) AS m FROM mem GROUP BY host) GROUP BY host
SELECT sum(c) FROM (SELECT count(bytes_recv) AS c FROM net WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m), host, interface) WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m) fill(0)
SELECT max(d) FROM (SELECT difference(bytes_recv) AS d FROM net WHERE host = 'h1')
SELECT mean(x) FROM (SELECT mean(used) * 2 AS x FROM mem GROUP BY host)
SELECT sum(m) FROM (SELECT mean(used) AS m FROM mem WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m), host ORDER BY time DESC) WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m)
SELECT top(m, 2) FROM (SELECT max(used) AS m FROM mem GROUP BY host)
SELECT mean(m) FROM (SELECT max(used) AS m FROM (SELECT used FROM mem) GROUP BY host)
SELECT mean(nosuch) FROM (SELECT used FROM mem)
SELECT mean(used) FROM (SELECT used FROM nosuch)
SELECT mean(x) FROM (SELECT used * 2 AS x FROM mem) GROUP BY host
SELECT max(used) FROM (SELECT used FROM mem LIMIT 5)
SELECT sum(m) FROM (SELECT mean(used) AS m FROM mem WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m), host ORDER BY time DESC) WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m) ORDER BY time DESC
SELECT m FROM (SELECT mean(used) AS m FROM mem WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(2m), host) WHERE time >= 1700000000s AND time < 1700000300s
SELECT mean(m) FROM (SELECT mean(used) AS m FROM mem GROUP BY time(2m), host) WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(2m)
SELECT non_negative_derivative(sum(b), 1s) FROM (SELECT max(bytes_recv) AS b FROM net WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(1m), host, interface) WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(1m)
SELECT stddev(used) FROM mem WHERE host='h0' AND time >= 1700000000s AND time < 1700000100s GROUP BY time(20s) fill(0)
SELECT stddev(used), count(used) FROM mem WHERE host='h0' AND time >= 1700000000s AND time < 1700000100s GROUP BY time(20s) fill(previous)
SELECT stddev(used) FROM mem WHERE host='h0' AND time >= 1700000000s AND time < 1700000030s
SELECT max(used), nosuch FROM mem WHERE host='h0' AND time >= 1700000000s AND time < 1700000100s GROUP BY time(20s) fill(0)
SELECT mean(/^nomatch/), max(used) FROM mem
SELECT sample(/u/, 2), host FROM mem
SELECT median(used, 5) FROM mem
SELECT mode(used, 1) FROM mem
SELECT used FROM mem ORDER BY Time LIMIT 1
SELECT used FROM mem WHERE host='h0' ORDER BY "time" DESC LIMIT 1
SELECT mean(used) FROM mem, bench.autogen.s
SELECT max(bytes_recv), host, interface FROM net WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(1m) fill(none)
SELECT last(packets_recv), err_in FROM net WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(1m), host fill(previous)
SELECT top(*, 2.5) FROM mem
SELECT top(mean(x), 0) FROM mem
SELECT bottom(/u/, host, 'x', 2) FROM mem
SELECT top(used, 'x', 0) FROM mem
SELECT max(m) FROM (SELECT mean(used) AS m FROM mem) GROUP BY host
SELECT mean(m) FROM (SELECT max(used) AS m FROM mem GROUP BY host) WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(2m)
SELECT mean(c), min(c), count(c) FROM (SELECT count(bytes_recv) AS c FROM net WHERE host = 'h2' GROUP BY time(20s), interface) WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(1m)
SELECT sum(m) FROM (SELECT mean(used) AS m FROM mem WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m), host) WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m) ORDER BY time DESC
SELECT * FROM (SELECT * FROM mem WHERE host = 'h0') LIMIT 2
SELECT * FROM (SELECT mean(used) FROM mem GROUP BY host)
SELECT non_negative_derivative(sum(b), 1s) FROM (SELECT max(bytes_recv) AS b FROM net GROUP BY time(1m), host, interface) WHERE time >= 1700000000s AND time < 1700000600s GROUP BY time(1m)
SELECT max(used), host FROM (SELECT used, host FROM mem LIMIT 100)
SELECT percentile(used, 1) FROM mem WHERE host='h0' AND time >= 1700000000s AND time < 1700000200s GROUP BY time(40s) fill(none)
SELECT stddev(used) FROM mem WHERE host='h0' AND time >= 1700000000s AND time < 1700000200s GROUP BY time(20s) fill(previous)
SELECT stddev(used) FROM mem WHERE host='h0' AND time >= 1700000000s AND time < 1700000200s GROUP BY time(20s) fill(linear)
SELECT last(bytes_recv), host, err_in FROM net WHERE host='h2' AND time >= 1700000180s AND time < 1700000300s GROUP BY time(20s) fill(linear)
SELECT sum(m) FROM (SELECT mean(used) AS m FROM mem GROUP BY time(1m), host fill(null)) WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m)
SELECT count(m) FROM (SELECT mean(used) AS m FROM mem GROUP BY time(1m), host) WHERE time >= 1700000000s AND time < 1700000300s GROUP BY time(1m)
SELECT sum(r) FROM (SELECT non_negative_derivative(mean(packets_recv), 1s) AS r FROM net WHERE time >= 1700000017123ms AND time < 1700000583456ms GROUP BY time(1m), host) WHERE time >= 1700000017123ms AND time < 1700000583456ms GROUP BY time(1m)
SELECT sum(r) FROM (SELECT non_negative_derivative(mean(packets_recv), 1s) AS r FROM net WHERE time >= 1700000017123ms AND time < 1700000583456ms GROUP BY time(2m), host) WHERE time >= 1700000017123ms AND time < 1700000583456ms GROUP BY time(2m)
SELECT r FROM (SELECT non_negative_derivative(mean(packets_recv), 1s) AS r FROM net WHERE time >= 1700000017123ms AND time < 1700000583456ms GROUP BY time(2m), host) WHERE time >= 1700000017123ms AND time < 1700000583456ms
SELECT top(packets_recv, host, 2) FROM net WHERE time >= 1700000017123ms AND time < 1700000583456ms
SELECT top(bytes_recv, interface, 3) FROM net WHERE time >= 1700000017123ms AND time < 1700000583456ms
"#;

/// Start of the Telegraf hour of [`telegraf_lines`], seconds.
const TELEGRAF_T0: i64 = 1_700_100_000;

/// Telegraf's system inputs as its InfluxDB output writes them, for the
/// fields the dashboards of `tests/data/telegraf_dashboards.influxql`
/// chart: two hosts, a point every 10 s for an hour (the second host 3 s
/// later, and silent for five minutes), gauges, counters that grow (one
/// resets, as a counter does when its host restarts) and a string.
fn telegraf_lines() -> String {
    type Tags = &'static [(&'static str, &'static str)];
    type Fields = &'static [(&'static str, char)];
    // (measurement, its tag sets beside `host`, fields and their kinds:
    // f a float gauge, i an integer gauge, c an integer counter, s text).
    let specs: &[(&str, &[Tags], Fields)] = &[
        (
            "system",
            &[&[]],
            &[
                ("load1", 'f'),
                ("load5", 'f'),
                ("load15", 'f'),
                ("n_cpus", 'i'),
                ("n_users", 'i'),
                ("uptime", 'c'),
                ("uptime_format", 's'),
            ],
        ),
        (
            "processes",
            &[&[]],
            &[
                ("running", 'i'),
                ("blocked", 'i'),
                ("sleeping", 'i'),
                ("stopped", 'i'),
                ("zombies", 'i'),
                ("paging", 'i'),
                ("unknown", 'i'),
                ("total", 'i'),
                ("total_threads", 'i'),
            ],
        ),
        (
            "cpu",
            &[
                &[("cpu", "cpu0")],
                &[("cpu", "cpu1")],
                &[("cpu", "cpu-total")],
            ],
            &[
                ("usage_user", 'f'),
                ("usage_system", 'f'),
                ("usage_softirq", 'f'),
                ("usage_steal", 'f'),
                ("usage_nice", 'f'),
                ("usage_irq", 'f'),
                ("usage_iowait", 'f'),
                ("usage_guest", 'f'),
                ("usage_guest_nice", 'f'),
                ("usage_idle", 'f'),
            ],
        ),
        (
            "mem",
            &[&[]],
            &[
                ("total", 'i'),
                ("used", 'i'),
                ("cached", 'i'),
                ("free", 'i'),
                ("buffered", 'i'),
                ("used_percent", 'f'),
            ],
        ),
        (
            "swap",
            &[&[]],
            &[
                ("total", 'i'),
                ("used", 'i'),
                ("free", 'i'),
                ("in", 'c'),
                ("out", 'c'),
                ("used_percent", 'f'),
            ],
        ),
        (
            "disk",
            &[
                &[("device", "sda1"), ("fstype", "ext4"), ("path", "/")],
                &[("device", "sda2"), ("fstype", "ext4"), ("path", "/boot")],
            ],
            &[
                ("total", 'i'),
                ("used", 'i'),
                ("free", 'i'),
                ("inodes_total", 'i'),
                ("inodes_free", 'i'),
                ("inodes_used", 'i'),
                ("used_percent", 'f'),
            ],
        ),
        (
            "diskio",
            &[
                &[("name", "sda")],
                &[("name", "nvme0n1")],
                &[("name", "loop0")],
            ],
            &[
                ("reads", 'c'),
                ("writes", 'c'),
                ("read_bytes", 'c'),
                ("write_bytes", 'c'),
                ("read_time", 'c'),
                ("write_time", 'c'),
            ],
        ),
        (
            "net",
            &[
                &[("interface", "eth0")],
                &[("interface", "ens3")],
                &[("interface", "lo")],
            ],
            &[
                ("bytes_recv", 'c'),
                ("bytes_sent", 'c'),
                ("packets_recv", 'c'),
                ("packets_sent", 'c'),
                ("drop_in", 'c'),
                ("drop_out", 'c'),
                ("err_in", 'c'),
                ("err_out", 'c'),
            ],
        ),
        (
            "net",
            &[&[("interface", "all")]],
            &[
                ("tcp_activeopens", 'c'),
                ("tcp_estabresets", 'c'),
                ("tcp_outrsts", 'c'),
                ("tcp_passiveopens", 'c'),
                ("udp_indatagrams", 'c'),
                ("udp_outdatagrams", 'c'),
            ],
        ),
        (
            "netstat",
            &[&[]],
            &[
                ("tcp_close", 'i'),
                ("tcp_close_wait", 'i'),
                ("tcp_closing", 'i'),
                ("tcp_established", 'i'),
                ("tcp_fin_wait1", 'i'),
                ("tcp_fin_wait2", 'i'),
                ("tcp_last_ack", 'i'),
                ("tcp_syn_recv", 'i'),
                ("tcp_syn_sent", 'i'),
                ("tcp_time_wait", 'i'),
            ],
        ),
        (
            "nstat",
            &[&[("name", "snmp")]],
            &[
                ("TcpExtTCPAbortOnClose", 'c'),
                ("TcpExtTCPAbortOnData", 'c'),
                ("TcpExtTCPAbortOnTimeout", 'c'),
                ("TcpExtTCPAbortFailed", 'c'),
                ("TcpExtTCPAbortOnLinger", 'c'),
                ("TcpExtTCPAbortOnMemory", 'c'),
                ("TcpExtSyncookiesFailed", 'c'),
                ("TcpExtSyncookiesRecv", 'c'),
                ("TcpExtSyncookiesSent", 'c'),
                ("IcmpInEchos", 'c'),
                ("IcmpOutEchos", 'c'),
                ("IcmpInEchoReps", 'c'),
                ("IcmpOutEchoReps", 'c'),
                ("IcmpInErrors", 'c'),
                ("IcmpOutErrors", 'c'),
                ("IcmpInCsumErrors", 'c'),
                ("IpInDiscards", 'c'),
                ("IpOutDiscards", 'c'),
                ("IpInHdrErrors", 'c'),
                ("IpInAddrErrors", 'c'),
                ("IpOutNoRoutes", 'c'),
                ("IpInUnknownProtos", 'c'),
                ("Ip6InDiscards", 'c'),
                ("Ip6OutDiscards", 'c'),
                ("Ip6InHdrErrors", 'c'),
                ("Ip6InAddrErrors", 'c'),
                ("Ip6OutNoRoutes", 'c'),
                ("Ip6InUnknownProtos", 'c'),
                ("UdpSndbufErrors", 'c'),
                ("UdpRcvbufErrors", 'c'),
                ("UdpInCsumErrors", 'c'),
                ("UdpInErrors", 'c'),
                ("UdpNoPorts", 'c'),
            ],
        ),
        (
            "kernel",
            &[&[]],
            &[
                ("context_switches", 'c'),
                ("processes_forked", 'c'),
                ("interrupts", 'c'),
            ],
        ),
        (
            "linux_sysctl_fs",
            &[&[]],
            &[("file-max", 'i'), ("file-nr", 'i')],
        ),
        (
            "interrupts",
            &[
                &[("device", "timer"), ("irq", "0"), ("type", "IO-APIC")],
                &[("device", "i8042"), ("irq", "1"), ("type", "IO-APIC")],
                &[
                    ("device", "Non-maskable_interrupts"),
                    ("irq", "NMI"),
                    ("type", ""),
                ],
            ],
            &[("total", 'c'), ("CPU0", 'c')],
        ),
        (
            "conntrack",
            &[&[]],
            &[("ip_conntrack_count", 'f'), ("ip_conntrack_max", 'f')],
        ),
        (
            "internal_write",
            &[&[("output", "influxdb")]],
            &[("write_time_ns", 'c'), ("metrics_written", 'c')],
        ),
        (
            "internal_gather",
            &[&[("input", "cpu")], &[("input", "mem")]],
            &[("gather_time_ns", 'c')],
        ),
        (
            "internal_agent",
            &[&[]],
            &[
                ("metrics_written", 'c'),
                ("gather_errors", 'c'),
                ("metrics_dropped", 'c'),
            ],
        ),
    ];
    let hosts = ["web-01.example.com", "db-2"];
    let mut out = String::new();
    for (h, host) in hosts.iter().enumerate() {
        for (m, (measurement, tag_sets, fields)) in specs.iter().enumerate() {
            for (t, tags) in tag_sets.iter().enumerate() {
                let mut key = format!("{measurement},host={host}");
                for (k, v) in tags.iter().filter(|(_, v)| !v.is_empty()) {
                    key.push_str(&format!(",{k}={v}"));
                }
                for i in 0..360i64 {
                    if h == 1 && (120..150).contains(&i) {
                        continue;
                    }
                    let values: Vec<String> = fields
                        .iter()
                        .enumerate()
                        .map(|(f, (name, kind))| {
                            let seed = (h * 7919 + m * 104 + t * 31 + f * 7) as i64;
                            let value = match kind {
                                'f' => format!("{}", ((seed + i * 7) % 1000) as f64 / 10.0),
                                'i' => format!("{}i", (seed * 13 + i * 3) % 500 + seed),
                                'c' => {
                                    let step = 5 + seed % 50;
                                    let at = |i: i64| seed * 1000 + step * i + (i * i) % 13;
                                    // The first host's eth0 restarts at point 200.
                                    let v = if h == 0 && *measurement == "net" && t == 0 && i >= 200
                                    {
                                        at(i) - at(200)
                                    } else {
                                        at(i)
                                    };
                                    format!("{v}i")
                                }
                                _ => format!("\"{} days, {:02}:{:02}\"", i / 100, i % 24, i % 60),
                            };
                            format!("{name}={value}")
                        })
                        .collect();
                    out.push_str(&format!(
                        "{key} {} {}\n",
                        values.join(","),
                        TELEGRAF_T0 + i * 10 + h as i64 * 3
                    ));
                }
            }
        }
    }
    out
}

/// Grafana's expansion of a query's `$timeFilter` (its Go backend's:
/// milliseconds), `$interval` and `$__interval`, and the variables
/// (values already in Grafana's regex format: escaped, several as
/// `(a|b)`).
fn grafana_expand(q: &str, range_ms: (i64, i64), interval: &str, vars: &[(&str, &str)]) -> String {
    let mut q = q
        .replace(
            "$timeFilter",
            &format!("time >= {}ms and time <= {}ms", range_ms.0, range_ms.1),
        )
        .replace("$__interval", interval)
        .replace("$interval", interval);
    for (name, value) in vars {
        q = q.replace(&format!("${name}"), value);
    }
    q
}

/// The template variables and every panel query of two published Telegraf
/// system dashboards (Grafana's 928 and 5955, `tests/data/
/// telegraf_dashboards.influxql`), expanded as Grafana expands them (two
/// intervals; one server and one interface chosen, then both servers and
/// one interface), through InfluxDB 1.6 and halite given the same
/// Telegraf points: every answer equal, as Grafana asks for it
/// (`epoch=ms`). Before, queries of the form `GROUP BY time(10s), * ORDER
/// BY asc` (the dashboards' load, memory, process and TCP panels) were a
/// parse error.
#[test]
fn published_telegraf_dashboards_answer_as_influxdb_does() {
    let p = start();
    create_database(&p.influx.addr, DB);
    create_database(&p.halite.addr, DB);
    let lines = telegraf_lines();
    // In bodies of about 1 MiB, each ending at a line's end.
    let mut rest = lines.as_str();
    while !rest.is_empty() {
        let cut = rest
            .char_indices()
            .skip(1 << 20)
            .find(|(_, c)| *c == '\n')
            .map_or(rest.len(), |(i, _)| i + 1);
        let (body, more) = rest.split_at(cut);
        rest = more;
        let [a, b] = both(
            &p,
            "POST",
            &format!("/write?db={DB}&precision=s"),
            &[],
            body.as_bytes(),
        );
        assert_eq!((a.0, b.0), (204, 204), "{a:?} {b:?}");
    }
    let queries: Vec<&str> = include_str!("data/telegraf_dashboards.influxql")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    let range_ms = (
        (TELEGRAF_T0 + 300) * 1000 + 250,
        (TELEGRAF_T0 + 3300) * 1000 + 750,
    );
    let choices: [&[(&str, &str)]; 2] = [
        &[
            ("server", r"web-01\.example\.com"),
            ("netif", "(eth0|ens3)"),
            ("interface", "(eth0|ens3)"),
            ("disk", "(sda|nvme0n1)"),
            ("mountpoint", r"(\/|\/boot)"),
            ("cpu", "cpu0"),
        ],
        &[
            ("server", r"(web-01\.example\.com|db-2)"),
            ("netif", "eth0"),
            ("interface", "eth0"),
            ("disk", "sda"),
            ("mountpoint", r"\/"),
            ("cpu", "cpu1"),
        ],
    ];
    let (mut compared, mut answered) = (0, 0);
    let mut differ = Vec::new();
    for q in &queries {
        for interval in ["10s", "1m"] {
            for vars in choices {
                let sent = grafana_expand(q, range_ms, interval, vars);
                let [a, b] = query(&p, &[("db", DB), ("q", &sent), ("epoch", "ms")]);
                compared += 1;
                let same = a.0 == b.0
                    && std::panic::catch_unwind(|| assert_close(&a.1, &b.1, &sent)).is_ok();
                if !same {
                    differ.push(format!("{sent}\n  influxdb: {}\n  halite:   {}", a.1, b.1));
                }
                if a.1["results"][0]["series"][0]["values"]
                    .as_array()
                    .is_some_and(|v| !v.is_empty())
                {
                    answered += 1;
                }
            }
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {compared} differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
    assert_eq!(queries.len(), 161);
    assert_eq!(compared, 161 * 4);
    // Every query answers rows, for each interval and choice.
    assert_eq!(answered, 161 * 4, "answered");
}

/// One step of [`retention_policies_and_drops_answer_as_influxdb_does`]:
/// a statement, or a write (path suffix, body).
enum Step {
    Q(String),
    W(&'static str, String),
}

/// The steps: policies made, changed and dropped, writes to them and past
/// them, reads of each, `DROP MEASUREMENT` and `DROP DATABASE`, as a user
/// moving a Telegraf database onto a 30-day policy sends them. Times are
/// relative to now (`now` s): both servers keep or refuse by their clock.
fn retention_steps(now: i64) -> Vec<Step> {
    use Step::{Q, W};
    let q = |s: &str| Q(s.replace("$db", "rp"));
    let old = now - 40 * 86_400;
    let hour = now - 3_600;
    let minute = now - 60;
    vec![
        q("CREATE DATABASE $db"),
        q("SHOW RETENTION POLICIES"),
        W("", format!("cpu,host=a v=1 {hour}\ncpu,host=b v=2 {old}\n")),
        q("CREATE RETENTION POLICY \"30d\" ON $db DURATION 30d REPLICATION 1 DEFAULT"),
        q("CREATE RETENTION POLICY \"30d\" ON $db DURATION 30d REPLICATION 1 DEFAULT"),
        q("CREATE RETENTION POLICY \"30d\" ON $db DURATION 20d REPLICATION 1"),
        q("CREATE RETENTION POLICY x ON $db DURATION 30m REPLICATION 1"),
        q("CREATE RETENTION POLICY x ON $db DURATION 1h REPLICATION 0"),
        q("CREATE RETENTION POLICY x ON $db DURATION 1h REPLICATION 2"),
        q("CREATE RETENTION POLICY x ON $db DURATION 1h REPLICATION 2 DEFAULT"),
        q("CREATE RETENTION POLICY y ON $db DURATION 1h REPLICATION 1 SHARD DURATION 10m"),
        q("CREATE RETENTION POLICY z ON $db DURATION INF REPLICATION 1"),
        q("CREATE RETENTION POLICY w ON $db DURATION 400d REPLICATION 1 SHARD DURATION 2h"),
        q("CREATE RETENTION POLICY v ON $db DURATION 3d REPLICATION 1"),
        q("CREATE RETENTION POLICY u ON nope DURATION 3d REPLICATION 1"),
        q("CREATE RETENTION POLICY a ON $db DURATION 2h REPLICATION 1 SHARD DURATION 3h"),
        q("CREATE RETENTION POLICY \"\" ON $db DURATION 2h REPLICATION 1"),
        q("SHOW RETENTION POLICIES"),
        q("SHOW RETENTION POLICIES ON $db"),
        // Into the default (30d): a point of 40 days ago is beyond it,
        // alone and among others.
        W("", format!("cpu,host=a v=1 {hour}")),
        W("", format!("cpu,host=b v=2 {old}")),
        W(
            "",
            format!("cpu,host=b v=2 {old}\ncpu,host=b v=2 {old}\ncpu,host=c v=3 {minute}"),
        ),
        W("&rp=autogen", format!("cpu,host=c v=3 {minute}")),
        W("&rp=v", format!("mem,host=d v=3 {minute}")),
        W("&rp=nope", format!("mem,host=d v=3 {minute}")),
        q("SELECT * FROM cpu"),
        q("SELECT * FROM autogen.cpu"),
        q("SELECT * FROM \"30d\".cpu"),
        q("SELECT * FROM \"$db\".\"30d\".cpu"),
        q("SELECT * FROM \"$db\"..cpu"),
        q("SELECT * FROM mem"),
        q("SELECT * FROM v.mem"),
        q("SELECT * FROM nope.mem"),
        q("SELECT count(v) FROM v.mem, autogen.cpu"),
        q("SELECT * FROM v./.*/"),
        q("SELECT * FROM /.*/"),
        q("SELECT * FROM mem, cpu"),
        q("SELECT mean(v) FROM (SELECT v FROM autogen.cpu)"),
        // The index is the database's: series of every policy. Field
        // keys are a policy's.
        q("SHOW MEASUREMENTS"),
        q("SHOW SERIES"),
        q("SHOW SERIES FROM autogen.mem"),
        q("SHOW TAG KEYS"),
        q("SHOW TAG KEYS FROM v.mem"),
        q("SHOW TAG VALUES FROM autogen.mem WITH KEY = host"),
        q("SHOW SERIES CARDINALITY"),
        q("SHOW MEASUREMENT CARDINALITY"),
        q("SHOW FIELD KEYS"),
        q("SHOW FIELD KEYS FROM v.mem"),
        q("SHOW FIELD KEYS FROM mem"),
        q("SHOW FIELD KEYS FROM nope.mem"),
        q("ALTER RETENTION POLICY v ON $db DURATION 2h"),
        q("ALTER RETENTION POLICY v ON $db DURATION 30m"),
        q("ALTER RETENTION POLICY v ON $db DEFAULT"),
        q("ALTER RETENTION POLICY nope ON $db DEFAULT"),
        q("ALTER RETENTION POLICY v ON nope DEFAULT"),
        q("ALTER RETENTION POLICY v ON $db SHARD DURATION 3h"),
        q("ALTER RETENTION POLICY v ON $db REPLICATION 3"),
        q("ALTER RETENTION POLICY v ON $db"),
        q("ALTER RETENTION POLICY v ON $db DURATION 1d SHARD DURATION 2d"),
        q("ALTER RETENTION POLICY v ON $db DURATION 2d SHARD DURATION 2d DEFAULT"),
        q("SHOW RETENTION POLICIES"),
        q("SELECT * FROM mem"),
        // From every policy; written again it takes any field type.
        q("DROP MEASUREMENT cpu"),
        q("SELECT * FROM cpu"),
        q("SELECT * FROM autogen.cpu"),
        q("SHOW SERIES"),
        q("SHOW MEASUREMENTS"),
        W("", format!("cpu,host=q v=\"s\" {minute}")),
        q("SELECT * FROM cpu"),
        q("SHOW SERIES"),
        q("SHOW FIELD KEYS"),
        q("DROP MEASUREMENT nope"),
        q("DROP MEASUREMENT"),
        q("DROP MEASUREMENT \"30d\".cpu"),
        // Its points go with it; the default keeps its name (InfluxDB's
        // index keeps its series: SHOW SERIES would list them).
        q("DROP RETENTION POLICY v ON $db"),
        q("DROP RETENTION POLICY v ON $db"),
        q("DROP RETENTION POLICY v ON nope"),
        q("SHOW RETENTION POLICIES"),
        W("", "mem,host=d v=3".into()),
        q("SELECT * FROM mem"),
        q("SELECT * FROM v.mem"),
        q("ALTER RETENTION POLICY \"30d\" ON $db DEFAULT"),
        q("CREATE DATABASE $db2 WITH DURATION 3d REPLICATION 1 SHARD DURATION 2h NAME three"),
        q("SHOW RETENTION POLICIES ON $db2"),
        W("", format!("cpu,host=a v=1 {hour}")),
        q("CREATE DATABASE $db3 WITH DURATION 3d"),
        q("SHOW RETENTION POLICIES ON $db3"),
        q("CREATE DATABASE $db4 WITH NAME foo"),
        q("CREATE DATABASE $db4 WITH NAME bar"),
        q("CREATE DATABASE $db4 WITH NAME foo"),
        q("CREATE DATABASE $db4 WITH DURATION 1d NAME foo"),
        q("CREATE DATABASE $db4"),
        q("SHOW RETENTION POLICIES ON $db4"),
        q("CREATE DATABASE $db5 WITH"),
        q("CREATE DATABASE $db5 WITH DURATION 30m"),
        q("CREATE DATABASE $db5 WITH REPLICATION 1 DURATION 3d"),
        q("DROP DATABASE nope"),
        q("DROP DATABASE $db2"),
        q("DROP DATABASE $db3"),
        q("SHOW RETENTION POLICIES ON $db2"),
        q("CREATE RETENTION POLICY a ON $db DURATION -2h REPLICATION 1"),
        q("CREATE RETENTION POLICY a ON $db DURATION 1x REPLICATION 1"),
        q("CREATE RETENTION POLICY a ON $db DURATION 2h REPLICATION 1.5"),
        q("CREATE RETENTION POLICY a ON $db REPLICATION 1 DURATION 2h"),
        q("CREATE RETENTION POLICY a ON $db DURATION 2h REPLICATION 1 DEFAULT SHARD DURATION 1h"),
        q("CREATE RETENTION POLICY a"),
        q("DROP RETENTION POLICY x"),
        q("ALTER RETENTION POLICY autogen ON $db DURATION 5h SHARD DURATION 1h REPLICATION 1"),
        q("ALTER RETENTION POLICY autogen ON $db DURATION INF"),
        q("SHOW RETENTION POLICIES"),
        q("SELECT * FROM autogen.cpu"),
        q("DROP DATABASE $db"),
        q("SELECT * FROM cpu"),
        q("SHOW RETENTION POLICIES"),
        q("CREATE DATABASE $db"),
        q("SHOW SERIES"),
        q("SHOW RETENTION POLICIES"),
    ]
}

/// Runs `steps` through InfluxDB and through halite (killed and started
/// again after the step `restart_after`) into database `db`, asserting
/// each answer equal; the steps compared.
fn compare_steps(db: &str, steps: &[Step], restart_after: &str) -> usize {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let start_halite = || spawn_ready(command(dir.path(), port, &[] as &[&str]), port);
    let mut p = Pair {
        influx: Influx::start(),
        halite: start_halite(),
        _dir: tempfile::tempdir().expect("temp dir"),
    };
    let mut restarted = false;
    for (i, step) in steps.iter().enumerate() {
        let [mut a, b] = match step {
            Step::Q(q) => {
                let body = form(&[("db", db), ("q", q)]);
                let headers = [("Content-Type", "application/x-www-form-urlencoded")];
                both(&p, "POST", "/query", &headers, body.as_bytes())
            }
            Step::W(rp, lines) => {
                let path = format!("/write?db={db}&precision=s{rp}");
                both(&p, "POST", &path, &[], lines.as_bytes())
            }
        };
        let what = match step {
            Step::Q(q) => q.clone(),
            Step::W(rp, lines) => format!("write{rp}: {lines}"),
        };
        // InfluxDB names the shard that refused (`shard 1: fields not
        // supported …`); halite has no shards to name.
        if let Some(e) = a.1.pointer_mut("/results/0/error")
            && let Some(text) = e.as_str()
            && let Some((_, rest)) = text.strip_prefix("shard ").and_then(|t| t.split_once(": "))
        {
            *e = json!(rest);
        }
        assert_eq!(a, b, "step {i}, {what}");
        // What was changed holds across a kill: kept in the catalog, and
        // the dictionary's rows deleted, not only forgotten in memory.
        if !restarted && what == restart_after {
            p.halite.child.kill().expect("kill");
            p.halite.child.wait().expect("wait");
            p.halite = start_halite();
            restarted = true;
        }
    }
    assert!(restarted, "no step {restart_after}");
    steps.len()
}

#[test]
fn retention_policies_and_drops_answer_as_influxdb_does() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let compared = compare_steps("rp", &retention_steps(now), "DROP MEASUREMENT nope");
    assert_eq!(compared, 117);
}

/// What InfluxDB cannot show: a point past its policy's duration is gone
/// at once (InfluxDB answers it until its shard group is deleted), a
/// table made for a policy keeps its points no longer than the policy, and
/// a policy name halite cannot name tables after is refused by name.
#[test]
fn a_retention_policy_duration_holds_to_the_point() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let halite = spawn_ready(command(dir.path(), port, &[] as &[&str]), port);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let q = |statement: &str| {
        let path = format!("/query?{}", form(&[("db", "keep"), ("q", statement)]));
        request(&halite.addr, "POST", &path, None, b"")
            .expect("query")
            .json()
    };
    let write = |rp: &str, body: String| {
        let path = format!("/write?db=keep&precision=s&rp={rp}");
        request(&halite.addr, "POST", &path, None, body.as_bytes()).expect("write")
    };
    let count = |from: &str| {
        q(&format!("SELECT count(v) FROM {from}"))
            .pointer("/results/0/series/0/values/0/1")
            .cloned()
    };
    q("CREATE DATABASE keep");
    let r = write(
        "autogen",
        format!(
            "disk,host=a v=1 {}\ndisk,host=a v=2 {}",
            now - 7_200,
            now - 60
        ),
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(count("disk"), Some(json!(2)));
    let r = q("ALTER RETENTION POLICY autogen ON keep DURATION 1h SHARD DURATION 1h");
    assert_eq!(r, json!({"results": [{"statement_id": 0}]}));
    assert_eq!(
        count("disk"),
        Some(json!(1)),
        "the point of 2 hours ago is gone"
    );
    let r = write("autogen", format!("disk,host=a v=3 {}", now - 7_200));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"error": "partial write: points beyond retention policy dropped=1"})
    );
    q("CREATE RETENTION POLICY day ON keep DURATION 1d REPLICATION 1");
    let r = write("day", format!("io,host=a v=1 {}", now - 2 * 86_400));
    assert_eq!(r.status, 400, "{}", r.text());
    let r = write("day", format!("io,host=a v=1 {}", now - 60));
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(count("day.io"), Some(json!(1)));
    assert_eq!(count("io"), None, "the default policy is autogen");
    let r = q("CREATE RETENTION POLICY \"a.b\" ON keep DURATION 1d REPLICATION 1");
    let error = r.pointer("/results/0/error").and_then(Json::as_str);
    assert!(
        error.is_some_and(|e| e.contains("retention policy's tables")),
        "{r}"
    );
    assert_eq!(
        q("SHOW RETENTION POLICIES")
            .pointer("/results/0/series/0/values")
            .and_then(Json::as_array)
            .map(Vec::len),
        Some(2)
    );
}

/// The points of [`deletes_and_dropped_series_answer_as_influxdb_does`].
/// (Times in seconds.)
const DELETE_LINES: &str = "cpu,host=a v=1 1\ncpu,host=a v=2 2\ncpu,host=b v=3 1\n\
mem,host=a v=4 1\nmem,host=c v=5 3\ndisk,host=a,path=/ v=1 1\ndisk,host=a,path=/x v=2 1\n";

fn delete_steps() -> Vec<Step> {
    use Step::{Q, W};
    let q = |s: &str| Q(s.to_string());
    let lines = || W("", DELETE_LINES.to_string());
    vec![
        q("CREATE DATABASE del"),
        lines(),
        q("DELETE"),
        q("DELETE FROM"),
        q("DELETE FROM cpu WHERE"),
        q("DELETE WHERE v > 1"),
        // A range: the series keeps its other point, and stays listed.
        q("DELETE FROM cpu WHERE time < 1500000000"),
        q("SELECT * FROM cpu"),
        q("SHOW SERIES"),
        // A whole series goes from SHOW SERIES too.
        q("DELETE FROM cpu WHERE host = 'b'"),
        q("SHOW SERIES"),
        q("SELECT * FROM cpu"),
        q("DROP SERIES"),
        q("DROP SERIES FROM mem WHERE time > 0"),
        q("DROP SERIES WHERE host = 'c'"),
        q("SHOW SERIES"),
        q("SELECT * FROM mem"),
        // Written again at the deleted times: read back.
        lines(),
        q("SHOW SERIES"),
        q("SELECT * FROM /.*/"),
        q("DELETE FROM /c.*/"),
        q("SHOW SERIES"),
        q("DROP SERIES FROM /m.*/"),
        q("SHOW SERIES"),
        q("DELETE FROM nope"),
        q("DROP SERIES FROM nope"),
        q("DELETE FROM autogen.cpu"),
        q("DROP SERIES FROM autogen.cpu"),
        lines(),
        q("DELETE FROM cpu, mem WHERE time >= 2000000000"),
        q("SELECT * FROM /.*/"),
        q("SHOW SERIES"),
        q("DELETE FROM disk WHERE path = '/x'"),
        q("SHOW SERIES"),
        q("SHOW TAG VALUES WITH KEY = path"),
        q("DELETE WHERE host =~ /a/ AND time >= 0 AND time <= 1000000000"),
        q("SELECT * FROM /.*/"),
        q("SHOW SERIES"),
        q("SHOW MEASUREMENTS"),
        lines(),
        q("SELECT * FROM /.*/"),
        q("SHOW SERIES"),
        q("DELETE WHERE time < now()"),
        q("SHOW SERIES"),
        q("SHOW MEASUREMENTS"),
        q("DELETE WHERE nope = ''"),
        q("DROP SERIES FROM cpu WHERE host = 'a' AND time < 5"),
        // Every retention policy's points go.
        lines(),
        q("CREATE RETENTION POLICY two ON del DURATION INF REPLICATION 1"),
        W("&rp=two", DELETE_LINES.to_string()),
        q("SELECT count(v) FROM two.cpu"),
        q("SELECT count(v) FROM autogen.cpu"),
        q("DELETE FROM cpu WHERE host = 'a'"),
        q("SELECT count(v) FROM two.cpu"),
        q("SELECT count(v) FROM autogen.cpu"),
        q("SHOW SERIES"),
        q("DROP SERIES FROM mem"),
        q("SELECT * FROM two.mem"),
        q("SHOW SERIES"),
        q("DELETE FROM nope WHERE host = 'a'"),
    ]
}

#[test]
fn deletes_and_dropped_series_answer_as_influxdb_does() {
    let compared = compare_steps("del", &delete_steps(), "SHOW MEASUREMENTS");
    assert_eq!(compared, 60);
}

/// `SELECT … INTO` as users downsample by hand: raw copies (tags become
/// fields unless `GROUP BY *`), aggregates per bucket and tag, every
/// measurement into its own (`:MEASUREMENT`), into another retention
/// policy (past its duration: refused), type conflicts, nothing to write.
fn into_steps() -> Vec<Step> {
    use Step::{Q, W};
    let q = |s: &str| Q(s.to_string());
    vec![
        q("CREATE DATABASE ds"),
        W(
            "",
            "cpu,host=a,dc=x v=1,s=\"p\",b=true 1\ncpu,host=a,dc=x v=2,n=5i 2\n\
             cpu,host=b v=3 61\nmem,host=a used=4i 1\n"
                .into(),
        ),
        q("SELECT * INTO copy FROM cpu"),
        q("SELECT * FROM copy"),
        q("SHOW TAG KEYS FROM copy"),
        q("SHOW FIELD KEYS FROM copy"),
        q("SELECT * INTO copy2 FROM cpu GROUP BY *"),
        q("SHOW TAG KEYS FROM copy2"),
        q("SELECT * FROM copy2"),
        q(
            "SELECT mean(v), count(v) INTO down FROM cpu WHERE time >= 0 AND time < 120s GROUP BY time(1m), host",
        ),
        q("SELECT * FROM down"),
        q("SHOW FIELD KEYS FROM down"),
        q(
            "SELECT mean(*) INTO autogen.:MEASUREMENT_x FROM /.*/ WHERE time >= 0 AND time < 120s GROUP BY time(1m)",
        ),
        q(
            "SELECT max(*) INTO \"ds\".autogen.:MEASUREMENT FROM /cpu|mem/ WHERE time >= 0 AND time < 120s GROUP BY time(1m), *",
        ),
        q("SHOW MEASUREMENTS"),
        q("SELECT * FROM mem"),
        q("SELECT * FROM cpu"),
        q("SELECT mean(v) INTO nodb.autogen.x FROM cpu"),
        q("SELECT mean(v) INTO y FROM cpu WHERE time > 1000s GROUP BY time(1m)"),
        q("SELECT v INTO cpu FROM cpu"),
        q("SELECT * FROM cpu"),
        q("CREATE RETENTION POLICY year ON ds DURATION 52w REPLICATION 1"),
        q(
            "SELECT mean(v) AS v INTO year.cpu_1m FROM cpu WHERE time >= 0 AND time < 120s GROUP BY time(1m), *",
        ),
        q("SELECT * FROM year.cpu_1m"),
        q("SELECT mean(v) INTO t FROM cpu"),
        q("SELECT * FROM t"),
        q("SELECT s INTO str FROM cpu"),
        q("SELECT * FROM str"),
        q("SELECT v INTO copy FROM cpu"),
        q("SELECT s AS v INTO copy FROM cpu"),
        q("SELECT count(v) INTO c FROM cpu GROUP BY host"),
        q("SELECT * FROM c GROUP BY host"),
        q("SHOW SERIES FROM c"),
        q("SELECT * FROM copy"),
    ]
}

#[test]
fn select_into_writes_as_influxdb_does() {
    let compared = compare_steps("ds", &into_steps(), "SHOW MEASUREMENTS");
    assert_eq!(compared, 34);
}

/// Continuous queries downsample on InfluxDB 1.6's schedule: the same
/// points (in buckets still to come when the queries are made), the same
/// queries, and once the buckets are past, the same points written by
/// both. `RESAMPLE EVERY … FOR …` recomputes the buckets it covers.
#[test]
fn continuous_queries_downsample_as_influxdb_does() {
    let p = start();
    let post = |q: &str| {
        let body = form(&[("db", "cq"), ("q", q)]);
        let headers = [("Content-Type", "application/x-www-form-urlencoded")];
        both(&p, "POST", "/query", &headers, body.as_bytes())
    };
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as i64
    };
    let [a, b] = post("CREATE DATABASE cq");
    assert_eq!(a, b);
    // Four whole seconds, starting two from now.
    let t0 = now() / 1000 + 2;
    let mut lines = String::new();
    for k in 0..4 {
        for (quarter, host) in [(0, "a"), (1, "b"), (2, "a"), (3, "b")] {
            let ms = (t0 + k) * 1000 + quarter * 250;
            lines.push_str(&format!("m,host={host} v={} {ms}\n", k * 10 + quarter));
        }
    }
    let [a, b] = both(
        &p,
        "POST",
        "/write?db=cq&precision=ms",
        &[],
        lines.as_bytes(),
    );
    assert_eq!((a.0, b.0), (204, 204), "{a:?} {b:?}");
    for q in [
        "CREATE CONTINUOUS QUERY per_second ON cq BEGIN SELECT mean(v), count(v) INTO cq.autogen.m_1s \
         FROM m GROUP BY time(1s), host END",
        "CREATE CONTINUOUS QUERY per_two ON cq RESAMPLE EVERY 2s FOR 4s BEGIN SELECT max(v) INTO m_2s \
         FROM m GROUP BY time(2s) END",
        // Again, the same: no error; another of the name: InfluxDB's.
        "CREATE CONTINUOUS QUERY per_two ON cq RESAMPLE EVERY 2s FOR 4s BEGIN SELECT max(v) INTO m_2s \
         FROM m GROUP BY time(2s) END",
        "CREATE CONTINUOUS QUERY per_two ON cq BEGIN SELECT min(v) INTO m_2s FROM m GROUP BY time(2s) END",
        "CREATE CONTINUOUS QUERY raw ON cq BEGIN SELECT v INTO m_raw FROM m END",
        "CREATE CONTINUOUS QUERY nowhere ON cq BEGIN SELECT mean(v) INTO nope.x FROM m GROUP BY time(1s) END",
        "CREATE CONTINUOUS QUERY nodb ON nodb BEGIN SELECT mean(v) INTO x FROM m GROUP BY time(1s) END",
        "CREATE CONTINUOUS QUERY short ON cq RESAMPLE FOR 1s BEGIN SELECT mean(v) INTO x FROM m GROUP BY time(2s) END",
        "CREATE CONTINUOUS QUERY bare ON cq RESAMPLE BEGIN SELECT mean(v) INTO x FROM m GROUP BY time(2s) END",
    ] {
        let [a, b] = post(q);
        assert_eq!(a, b, "{q}");
    }
    let names = |answer: &Json| -> Vec<Json> {
        answer["results"][0]["series"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["name"] == "cq")
            .flat_map(|s| s["values"].as_array().cloned().unwrap_or_default())
            .map(|v| v[0].clone())
            .collect()
    };
    let [a, b] = post("SHOW CONTINUOUS QUERIES");
    assert_eq!(names(&a.1), names(&b.1), "{} / {}", a.1, b.1);
    assert_eq!(
        names(&b.1),
        [json!("per_second"), json!("per_two"), json!("raw")]
    );
    // Both run over each bucket once it is past: every one of the four
    // seconds, two hosts each, is written (waited for, as a loaded
    // machine may run them late).
    let range = format!("time >= {}s AND time < {}s", t0, t0 + 4);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let [a, b] = post(&format!("SELECT count(mean) FROM m_1s WHERE {range}"));
        let eight = Some(&json!(8));
        if a.1.pointer("/results/0/series/0/values/0/1") == eight
            && b.1.pointer("/results/0/series/0/values/0/1") == eight
            && now() > (t0 + 4) * 1000 + 2_500
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{} / {}", a.1, b.1);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for q in [
        format!("SELECT * FROM m_1s WHERE {range} GROUP BY host"),
        format!("SELECT * FROM m_2s WHERE {range}"),
        "SHOW MEASUREMENTS".to_string(),
    ] {
        let [a, b] = post(&q);
        assert_eq!(a, b, "{q}");
        assert!(
            a.1.pointer("/results/0/series/0/values/0").is_some(),
            "{q}: {}",
            a.1
        );
    }
    for q in [
        "DROP CONTINUOUS QUERY per_second ON cq",
        "DROP CONTINUOUS QUERY per_second ON cq",
        "DROP CONTINUOUS QUERY per_two ON cq",
        "DROP CONTINUOUS QUERY raw ON cq",
        "SHOW CONTINUOUS QUERIES",
    ] {
        let [a, b] = post(q);
        if q.starts_with("SHOW") {
            assert_eq!(names(&a.1), names(&b.1));
            assert!(names(&b.1).is_empty(), "{}", b.1);
        } else {
            assert_eq!(a, b, "{q}");
        }
    }
}

/// InfluxDB 1.6's math functions, of fields, calls and expressions, each
/// statement compared whole (numbers to 1e-9: Go's and Rust's libm
/// differ in the last bits).
const MATH_STATEMENTS: &str = r#"
SELECT floor(n), ceil(n), round(n), sqrt(n), pow(n, 2) FROM ints
SELECT abs(v), round(v), floor(v), ceil(v) FROM ints
SELECT abs(s) FROM ints
SELECT abs(b) FROM ints
SELECT abs(-1) FROM ints
SELECT abs(n, 2) FROM ints
SELECT pow(n) FROM ints
SELECT abs(mean(n)), round(mean(v) * 10) FROM ints
SELECT abs(derivative(n)) FROM ints
SELECT pow(2, n) FROM ints
SELECT atan2(n, v) FROM ints
SELECT abs(nope) FROM ints
SELECT round(v), floor(n) + 1 FROM ints
SELECT abs(mean(n)) FROM ints WHERE time >= 0 AND time < 4s GROUP BY time(1s)
SELECT abs(mean(n)) FROM ints WHERE time >= 0 AND time < 4s GROUP BY time(1s) fill(0)
SELECT pow(n, 0.5), exp(n), sin(n), cos(n), tan(n), atan(n), log(n, n) FROM ints WHERE n > 0
SELECT sqrt(v), log10(v + 10), log2(n + 4), ln(n + 4), asin(v / 10), acos(v / 10) FROM ints
SELECT floor(v) FROM ints GROUP BY host
SELECT max(abs(n)) FROM ints
SELECT abs(v) FROM ints ORDER BY time DESC LIMIT 2
SELECT abs(last(v)) - first(n) FROM ints GROUP BY host
SELECT round(non_negative_derivative(mean(v), 1s)) FROM ints WHERE time >= 0 AND time < 4s GROUP BY time(1s)
SELECT ceil(v * 3) / 2 FROM ints
SELECT abs(v) FROM ints LIMIT 1 OFFSET 1
SELECT floor(n) FROM ints WHERE host = 'b'
SELECT abs(v) + abs(v) AS twice, sqrt(abs(v)) FROM ints
"#;

#[test]
fn math_functions_answer_as_influxdb_does() {
    let p = start();
    create_bench(&p);
    let lines = "ints,host=a n=-3i,s=\"x\",v=-2.5,b=true 1000000000\n\
                 ints,host=a n=5i,v=0 2000000000\n\
                 ints,host=b n=7i,v=0.25 2500000000\n\
                 ints,host=b n=9i,v=4 3500000000\n";
    let [a, b] = both(&p, "POST", "/write?db=bench", &[], lines.as_bytes());
    assert_eq!((a.0, b.0), (204, 204), "{a:?} {b:?}");
    let statements: Vec<&str> = MATH_STATEMENTS.lines().filter(|l| !l.is_empty()).collect();
    let mut answered = 0;
    for q in &statements {
        let [a, b] = query(&p, &[("db", "bench"), ("q", q)]);
        assert_eq!(a.0, b.0, "{q}: {} / {}", a.1, b.1);
        assert_close(&a.1, &b.1, q);
        answered += usize::from(a.1.pointer("/results/0/series/0/values/0").is_some());
    }
    assert_eq!((statements.len(), answered), (26, 21));
    // Not as InfluxDB 1.6, whose abs() of an integer answers it unchanged.
    let r = request(
        &p.halite.addr,
        "GET",
        &format!(
            "/query?{}",
            form(&[("db", "bench"), ("q", "SELECT abs(n) FROM ints")])
        ),
        None,
        b"",
    )
    .expect("query");
    assert_eq!(
        r.json().pointer("/results/0/series/0/values/0/1"),
        Some(&json!(3))
    );
}
