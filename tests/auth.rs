//! Tokens against a running server: every route, called with no token, a
//! wrong one, one without the scope, one for another namespace and the
//! right one, answers 401, 401, 403, 403 and its own answer, and nothing
//! a refused request asked for happens. Then the ways clients send
//! tokens, revocation, the CLI, and the refusal to serve a public address
//! with nothing to check tokens against.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::http::{Response, request_with};
use common::scenario::Scenario;
use common::server::stop;
use serde_json::{Value as Json, json};

const BOOT: &str = "bootstrap-secret-for-tests-0123456789";

fn call(
    addr: &str,
    method: &str,
    path: &str,
    auth: Option<&str>,
    ct: Option<&str>,
    body: &[u8],
) -> Response {
    let mut headers: Vec<(&str, &str)> = Vec::new();
    if let Some(ct) = ct {
        headers.push(("Content-Type", ct));
    }
    if let Some(a) = auth {
        headers.push(("Authorization", a));
    }
    request_with(addr, method, path, &headers, body).expect("request")
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Makes a token with the bootstrap token; the token's text.
fn make_token(addr: &str, scopes: &[&str], namespaces: &[&str]) -> (String, String) {
    let body = json!({"name": "test", "scopes": scopes, "namespaces": namespaces}).to_string();
    let r = call(
        addr,
        "POST",
        "/api/v1/tokens",
        Some(&bearer(BOOT)),
        Some("application/json"),
        body.as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let j = r.json();
    (
        j["id"].as_str().expect("id").to_string(),
        j["token"].as_str().expect("token").to_string(),
    )
}

fn table_spec(name: &str) -> Json {
    json!({
        "name": name,
        "families": [{"name": "f"}],
        "key": {
            "fields": [
                {"name": "metric", "type": "string", "width": 8},
                {"name": "host", "type": "string", "width": 8},
                {"name": "ts", "type": "reversed_timestamp"}
            ],
            "salt": {"buckets": 2}
        }
    })
}

/// What a refused request must not have changed: namespaces, tables,
/// tokens, and the points of every table.
fn world(addr: &str) -> Json {
    let boot = bearer(BOOT);
    let get = |path: &str| call(addr, "GET", path, Some(&boot), None, b"").json();
    let count = |table: &str| {
        let q = json!({"table": table, "series": [["metric", "cpu"]], "aggregate": {"functions": ["count"]}});
        call(
            addr,
            "POST",
            "/api/v1/query",
            Some(&boot),
            Some("application/json"),
            q.to_string().as_bytes(),
        )
        .json()
    };
    let influx = |db: &str| {
        call(
            addr,
            "GET",
            &format!("/query?db={db}&q=SELECT%20count(v)%20FROM%20m"),
            Some(&boot),
            None,
            b"",
        )
        .json()
    };
    let mut tables: Vec<String> = get("/api/v1/tables")
        .as_array()
        .expect("tables")
        .iter()
        .map(|t| t["name"].as_str().unwrap_or("").to_string())
        // A namespace's dictionary table is made by its first InfluxQL
        // read (this function's own), so it is no change to look for.
        .filter(|t| !t.ends_with(":__tags"))
        .collect();
    tables.sort();
    json!({
        "namespaces": get("/api/v1/namespaces"),
        "tables": tables,
        "tokens": get("/api/v1/tokens"),
        "alpha": count("alpha:t"),
        "beta": count("beta:t"),
        "influx": influx("alpha"),
        "influx_beta": influx("beta"),
        "durability": get("/api/v1/tables/alpha:t")["durability"],
    })
}

/// One route as a test calls it.
struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    /// A token with another scope, or the right scope over `beta` only.
    refused_by: Vec<&'static str>,
    /// A token it must be let through with.
    allowed_for: &'static str,
}

fn case(
    what: &'static str,
    method: &'static str,
    path: &str,
    body: Option<(&'static str, Vec<u8>)>,
    refused_by: &[&'static str],
    allowed_for: &'static str,
) -> Case {
    let (content_type, body) = match body {
        Some((ct, b)) => (Some(ct), b),
        None => (None, Vec::new()),
    };
    Case {
        what,
        method,
        path: path.to_string(),
        content_type,
        body,
        refused_by: refused_by.to_vec(),
        allowed_for,
    }
}

fn json_body(v: Json) -> Option<(&'static str, Vec<u8>)> {
    Some(("application/json", v.to_string().into_bytes()))
}

/// An empty Prometheus remote-write or remote-read request (snappy of no
/// bytes).
fn empty_protobuf() -> Option<(&'static str, Vec<u8>)> {
    Some(("application/x-protobuf", vec![0]))
}

#[test]
fn every_route_answers_401_403_or_itself_by_token_and_changes_nothing_when_refused() {
    let sc = Scenario::new()
        .set("auth.enabled=true")
        // Credentials refused by the dozen from one address, which would
        // be slowed: slowing is the last test's.
        .set("auth.slow_after_failures=0")
        .env("HALITE__AUTH__BOOTSTRAP_TOKEN", BOOT)
        .build();
    let srv = sc.start();
    let a = srv.addr.clone();
    let boot = bearer(BOOT);
    for ns in ["alpha", "beta", "gamma"] {
        let body = json!({"name": ns}).to_string();
        let r = call(
            &a,
            "POST",
            "/api/v1/namespaces",
            Some(&boot),
            Some("application/json"),
            body.as_bytes(),
        );
        assert_eq!(r.status, 201, "{}", r.text());
    }
    for t in ["alpha:t", "beta:t"] {
        let body = table_spec(t).to_string();
        let r = call(
            &a,
            "POST",
            "/api/v1/tables",
            Some(&boot),
            Some("application/json"),
            body.as_bytes(),
        );
        assert_eq!(r.status, 201, "{}", r.text());
        let r = call(
            &a,
            "POST",
            &format!("/api/v1/write?table={t}&precision=ms"),
            Some(&boot),
            Some("text/plain"),
            b"cpu,host=h1 v=1 1000\ncpu,host=h1 v=2 2000\n",
        );
        assert_eq!(r.status, 204, "{}", r.text());
    }
    let r = call(
        &a,
        "POST",
        "/write?db=alpha&precision=s",
        Some(&boot),
        None,
        b"m,host=h1 v=1 1\n",
    );
    assert_eq!(r.status, 204, "{}", r.text());

    let mut tokens = std::collections::BTreeMap::new();
    for (name, scopes, namespaces) in [
        ("read@alpha", &["read"][..], &["alpha"][..]),
        ("write@alpha", &["write"], &["alpha"]),
        ("admin@alpha", &["admin"], &["alpha"]),
        ("read@beta", &["read"], &["beta"]),
        ("write@beta", &["write"], &["beta"]),
        ("admin@beta", &["admin"], &["beta"]),
        ("read@all", &["read"], &[]),
        ("write@all", &["write"], &[]),
        ("admin@all", &["admin"], &[]),
    ] {
        tokens.insert(name, make_token(&a, scopes, namespaces).1);
    }
    let (spare_id, _) = make_token(&a, &["read"], &["gamma"]);

    let cases = vec![
        case(
            "list namespaces",
            "GET",
            "/api/v1/namespaces",
            None,
            &["write@alpha"],
            "read@alpha",
        ),
        case(
            "create namespace",
            "POST",
            "/api/v1/namespaces",
            json_body(json!({"name": "delta"})),
            &["write@all", "read@all", "admin@alpha"],
            "admin@all",
        ),
        case(
            "drop namespace",
            "DELETE",
            "/api/v1/namespaces/gamma",
            None,
            &["write@all", "admin@alpha"],
            "admin@all",
        ),
        case(
            "list tables",
            "GET",
            "/api/v1/tables",
            None,
            &["write@alpha"],
            "read@alpha",
        ),
        case(
            "create table",
            "POST",
            "/api/v1/tables",
            json_body(table_spec("alpha:t2")),
            &["write@alpha", "read@alpha", "admin@beta"],
            "admin@alpha",
        ),
        case(
            "describe table",
            "GET",
            "/api/v1/tables/alpha:t",
            None,
            &["write@alpha", "read@beta"],
            "read@alpha",
        ),
        case(
            "alter table",
            "PATCH",
            "/api/v1/tables/alpha:t",
            json_body(json!({"durability": "ASYNC_WAL"})),
            &["write@alpha", "read@alpha", "admin@beta"],
            "admin@alpha",
        ),
        case(
            "flush table",
            "POST",
            "/api/v1/tables/alpha:t/flush",
            None,
            &["write@alpha", "admin@beta"],
            "admin@alpha",
        ),
        case(
            "compact table",
            "POST",
            "/api/v1/tables/alpha:t/compact",
            None,
            &["write@alpha", "admin@beta"],
            "admin@alpha",
        ),
        case(
            "get row",
            "GET",
            "/api/v1/tables/alpha:t/rows/00",
            None,
            &["write@alpha", "read@beta"],
            "read@alpha",
        ),
        case(
            "scan",
            "POST",
            "/api/v1/tables/alpha:t/scan",
            json_body(json!({"limit": 5})),
            &["write@alpha", "read@beta"],
            "read@alpha",
        ),
        case(
            "series",
            "GET",
            "/api/v1/tables/alpha:t/series",
            None,
            &["write@alpha", "read@beta"],
            "read@alpha",
        ),
        case(
            "delete points",
            "POST",
            "/api/v1/tables/alpha:t/delete",
            json_body(json!({"series": [["metric", "cpu"]], "start_ms": 0, "end_ms": 1_000_000})),
            &["read@alpha", "write@beta"],
            "write@alpha",
        ),
        case(
            "halite write",
            "POST",
            "/api/v1/write?table=alpha:t&precision=ms",
            Some(("text/plain", b"cpu,host=h2 v=3 3000\n".to_vec())),
            &["read@alpha", "write@beta"],
            "write@alpha",
        ),
        case(
            "halite query",
            "POST",
            "/api/v1/query",
            json_body(json!({"table": "alpha:t", "series": [["metric", "cpu"]]})),
            &["write@alpha", "read@beta"],
            "read@alpha",
        ),
        case(
            "remote write",
            "POST",
            "/api/v1/write?db=alpha",
            empty_protobuf(),
            &["read@alpha", "write@beta"],
            "write@alpha",
        ),
        case(
            "prom write",
            "POST",
            "/api/v1/prom/write?db=alpha",
            empty_protobuf(),
            &["read@alpha", "write@beta"],
            "write@alpha",
        ),
        case(
            "remote read",
            "POST",
            "/api/v1/read?db=alpha",
            empty_protobuf(),
            &["write@alpha", "read@beta"],
            "read@alpha",
        ),
        case(
            "prom read",
            "POST",
            "/api/v1/prom/read?db=alpha",
            empty_protobuf(),
            &["write@alpha", "read@beta"],
            "read@alpha",
        ),
        case(
            "ingest status",
            "GET",
            "/api/v1/ingest",
            None,
            &["write@all", "read@alpha"],
            "read@all",
        ),
        case(
            "cluster status",
            "GET",
            "/api/v1/cluster",
            None,
            &["write@all", "read@alpha"],
            "read@all",
        ),
        case(
            "list tokens",
            "GET",
            "/api/v1/tokens",
            None,
            &["read@all", "write@all", "admin@alpha"],
            "admin@all",
        ),
        case(
            "create token",
            "POST",
            "/api/v1/tokens",
            json_body(json!({"scopes": ["read"]})),
            &["read@all", "write@all", "admin@alpha"],
            "admin@all",
        ),
        case(
            "revoke token",
            "DELETE",
            &format!("/api/v1/tokens/{spare_id}"),
            None,
            &["read@all", "write@all", "admin@alpha"],
            "admin@all",
        ),
        case(
            "region tail",
            "GET",
            "/internal/v1/regions/1/tail",
            None,
            &["read@all", "write@all", "admin@alpha"],
            "admin@all",
        ),
        case(
            "influx write",
            "POST",
            "/write?db=alpha&precision=s",
            Some(("text/plain", b"m,host=h2 v=2 2\n".to_vec())),
            &["read@alpha", "write@beta"],
            "write@alpha",
        ),
        case(
            "influx v2 write",
            "POST",
            "/api/v2/write?bucket=alpha/autogen&precision=s",
            Some(("text/plain", b"m,host=h3 v=3 3\n".to_vec())),
            &["read@alpha", "write@beta"],
            "write@alpha",
        ),
        case(
            "influx query",
            "GET",
            "/query?db=alpha&q=SELECT%20v%20FROM%20m",
            None,
            &["write@alpha", "read@beta"],
            "read@alpha",
        ),
        case(
            "influx create database",
            "POST",
            "/query?q=CREATE%20DATABASE%20epsilon",
            None,
            &["read@all", "write@all", "admin@alpha"],
            "admin@all",
        ),
    ];

    let before = world(&a);
    let wrong_hal = format!("hal_{}_{}", "0".repeat(16), "1".repeat(64));
    let mut refusals = 0;
    for c in &cases {
        let send = |auth: Option<&str>| call(&a, c.method, &c.path, auth, c.content_type, &c.body);
        let none = send(None);
        assert_eq!(
            none.status,
            401,
            "{} without a token: {}",
            c.what,
            none.text()
        );
        assert!(none.text().contains("token"), "{}: {}", c.what, none.text());
        for wrong in [
            bearer(&wrong_hal),
            bearer("not-a-token"),
            "Basic !!!".to_string(),
            "Digest x".to_string(),
        ] {
            let r = send(Some(&wrong));
            assert_eq!(r.status, 401, "{} with `{wrong}`: {}", c.what, r.text());
        }
        for t in &c.refused_by {
            let r = send(Some(&bearer(&tokens[t])));
            assert_eq!(r.status, 403, "{} with {t}: {}", c.what, r.text());
            refusals += 1;
        }
    }
    // A namespace given twice is refused, not checked as one and used as
    // the other.
    for path in [
        "/write?db=alpha&db=beta&precision=s",
        "/api/v2/write?bucket=alpha&bucket=beta&precision=s",
        "/api/v1/write?table=alpha:t&table=beta:t&precision=ms",
    ] {
        let r = call(
            &a,
            "POST",
            path,
            Some(&bearer(&tokens["write@alpha"])),
            Some("text/plain"),
            b"m,host=dup v=9 9\n",
        );
        assert_eq!(r.status, 400, "{path}: {}", r.text());
    }
    // A SELECT or SHOW naming its database in FROM is checked against that
    // database, not the request's `db`.
    for q in [
        "SELECT%20v%20FROM%20alpha.autogen.m",
        "SELECT%20v%20FROM%20alpha..m",
        "SHOW%20TAG%20KEYS%20FROM%20alpha.autogen.m",
    ] {
        let r = call(
            &a,
            "GET",
            &format!("/query?db=beta&q={q}"),
            Some(&bearer(&tokens["read@beta"])),
            None,
            b"",
        );
        assert_eq!(r.status, 403, "{q}: {}", r.text());
    }
    // A continuous query runs later as no caller: its maker must be
    // allowed to read what it reads and write where it writes now. And a
    // SELECT … INTO writes into its target's database.
    for (q, token) in [
        (
            "CREATE CONTINUOUS QUERY c ON beta BEGIN SELECT mean(v) INTO m2 FROM alpha..m GROUP BY time(1m) END",
            "admin@beta",
        ),
        (
            "CREATE CONTINUOUS QUERY c ON beta BEGIN SELECT mean(v) INTO alpha..m2 FROM m GROUP BY time(1m) END",
            "admin@beta",
        ),
        ("SELECT v INTO alpha..m2 FROM m", "read@beta"),
        ("SELECT v INTO m2 FROM m", "read@beta"),
    ] {
        let body = serde_urlencoded::to_string([("db", "beta"), ("q", q)]).expect("form");
        let r = call(
            &a,
            "POST",
            "/query",
            Some(&bearer(&tokens[token])),
            Some("application/x-www-form-urlencoded"),
            body.as_bytes(),
        );
        assert_eq!(r.status, 403, "{q}: {}", r.text());
    }
    assert_eq!(world(&a), before, "a refused request changed something");

    for c in &cases {
        let r = call(
            &a,
            c.method,
            &c.path,
            Some(&bearer(&tokens[c.allowed_for])),
            c.content_type,
            &c.body,
        );
        assert!(
            !matches!(r.status, 401 | 403),
            "{} with {}: {} {}",
            c.what,
            c.allowed_for,
            r.status,
            r.text()
        );
        // A mutation let through does what it says (its change shows).
        let expect = match c.what {
            "create namespace" | "create table" | "halite write" | "create token" => Some(201),
            "drop namespace" | "revoke token" | "influx write" | "influx v2 write" => Some(204),
            "list namespaces" | "list tables" | "describe table" | "halite query"
            | "influx query" => Some(200),
            _ => None,
        };
        if let Some(status) = expect {
            let ok = r.status == status || (c.what == "halite write" && r.status == 204);
            assert!(
                ok,
                "{} with {}: {} {}",
                c.what,
                c.allowed_for,
                r.status,
                r.text()
            );
        }
    }
    let after = world(&a);
    assert_ne!(after, before, "the allowed requests changed nothing");

    // Listings show only what the token may see.
    let seen = call(
        &a,
        "GET",
        "/api/v1/namespaces",
        Some(&bearer(&tokens["read@beta"])),
        None,
        b"",
    )
    .json();
    assert_eq!(seen, json!(["beta"]));
    let tables = call(
        &a,
        "GET",
        "/api/v1/tables",
        Some(&bearer(&tokens["read@beta"])),
        None,
        b"",
    )
    .json();
    let names: Vec<&str> = tables
        .as_array()
        .expect("tables")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|t| !t.ends_with(":__tags"))
        .collect();
    assert_eq!(names, vec!["beta:t"]);
    // FROM db.rp.m reads that database (the request's db is another).
    let other = call(
        &a,
        "GET",
        "/query?db=beta&epoch=s&q=SELECT%20v%20FROM%20alpha.autogen.m%20WHERE%20host%3D%27h1%27",
        Some(&bearer(&tokens["read@alpha"])),
        None,
        b"",
    )
    .json();
    assert_eq!(
        other["results"][0]["series"][0]["values"],
        json!([[1, 1]]),
        "{other}"
    );
    let dbs = call(
        &a,
        "GET",
        "/query?q=SHOW%20DATABASES",
        Some(&bearer(&tokens["read@alpha"])),
        None,
        b"",
    )
    .json();
    assert_eq!(
        dbs["results"][0]["series"][0]["values"],
        json!([["alpha"]]),
        "{dbs}"
    );

    // Open routes need nothing; the failures were counted.
    for path in ["/healthz", "/readyz", "/ping", "/", "/metrics"] {
        let r = call(&a, "GET", path, None, None, b"");
        assert!(r.status < 300, "{path}: {} {}", r.status, r.text());
    }
    let metrics = call(&a, "GET", "/metrics", None, None, b"").text();
    let counted = |reason: &str| -> f64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("halite_auth_failures_total")
                    && l.contains(&format!("reason=\"{reason}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0.0)
    };
    assert!(counted("missing") >= cases.len() as f64, "{metrics}");
    assert!(counted("invalid") >= 4.0 * cases.len() as f64);
    assert!(counted("forbidden") >= f64::from(refusals));
    stop(srv);
}

#[test]
fn clients_send_tokens_their_own_ways_and_a_revoked_token_stops_at_once() {
    let sc = Scenario::new()
        .set("auth.enabled=true")
        // Credentials refused by the dozen from one address, which would
        // be slowed: slowing is the last test's.
        .set("auth.slow_after_failures=0")
        .set("auth.metrics_open=false")
        .env("HALITE__AUTH__BOOTSTRAP_TOKEN", BOOT)
        .build();
    let srv = sc.start();
    let a = srv.addr.clone();
    let (id, token) = make_token(&a, &["read", "write"], &["default"]);
    let basic = |user: &str, pass: &str| {
        use base64::Engine;
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
        )
    };
    let ping = "/query?db=default&q=SHOW%20MEASUREMENTS";
    // Bearer and Token (InfluxDB 2 clients), Basic with the token as the
    // password (InfluxDB 1 clients, Telegraf, Prometheus) or as the user.
    for auth in [
        bearer(&token),
        format!("Token {token}"),
        basic("telegraf", &token),
        basic(&token, ""),
    ] {
        let r = call(&a, "GET", ping, Some(&auth), None, b"");
        assert_eq!(r.status, 200, "{auth}: {}", r.text());
    }
    // ?u=&p= (InfluxDB 1 clients), on a query and on a write.
    let r = call(
        &a,
        "GET",
        &format!("{ping}&u=me&p={token}"),
        None,
        None,
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(
        &a,
        "POST",
        &format!("/write?db=default&u=me&p={token}"),
        None,
        None,
        b"m v=1 1\n",
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let r = call(
        &a,
        "POST",
        "/write?db=default&u=me&p=wrong",
        None,
        None,
        b"m v=1 1\n",
    );
    assert_eq!(r.status, 401);
    assert!(
        r.json()["error"].as_str().is_some(),
        "InfluxDB's error shape: {}",
        r.text()
    );
    // /metrics closed: a read token over every namespace opens it.
    assert_eq!(call(&a, "GET", "/metrics", None, None, b"").status, 401);
    assert_eq!(
        call(&a, "GET", "/metrics", Some(&bearer(&token)), None, b"").status,
        403
    );
    assert_eq!(
        call(&a, "GET", "/metrics", Some(&bearer(BOOT)), None, b"").status,
        200
    );

    let r = call(
        &a,
        "DELETE",
        &format!("/api/v1/tokens/{id}"),
        Some(&bearer(BOOT)),
        None,
        b"",
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let r = call(&a, "GET", ping, Some(&bearer(&token)), None, b"");
    assert_eq!(r.status, 401, "a revoked token still works: {}", r.text());
    // The list never shows a secret or its digest.
    let list = call(&a, "GET", "/api/v1/tokens", Some(&bearer(BOOT)), None, b"").text();
    assert!(
        !list.contains("sha256") && !list.contains(&token[20..]),
        "{list}"
    );

    // Tokens live in the catalog: a restart keeps them.
    let (_, kept) = make_token(&a, &["read"], &[]);
    stop(srv);
    let srv = sc.start();
    let r = call(
        &srv.addr,
        "GET",
        "/api/v1/tables",
        Some(&bearer(&kept)),
        None,
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    stop(srv);
}

fn halite(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_halite"));
    cmd.args(args).env_remove("HALITE_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null()).output().expect("run halite")
}

#[test]
fn the_cli_makes_and_uses_tokens() {
    let sc = Scenario::new()
        .set("auth.enabled=true")
        // Credentials refused by the dozen from one address, which would
        // be slowed: slowing is the last test's.
        .set("auth.slow_after_failures=0")
        .env("HALITE__AUTH__BOOTSTRAP_TOKEN", BOOT)
        .build();
    let srv = sc.start();
    let server = ["--server", srv.addr.as_str()];
    let out = halite(&[&["table", "list"][..], &server].concat(), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("401") && err.contains("token"), "{err}");

    let out = halite(
        &[
            &[
                "token",
                "create",
                "--name",
                "collector",
                "--scope",
                "write,read",
                "--namespace",
                "default",
            ][..],
            &server,
            &["--token", BOOT],
        ]
        .concat(),
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let token = text
        .lines()
        .last()
        .expect("the token, last")
        .trim()
        .to_string();
    assert!(token.starts_with("hal_"), "{text}");

    let spec = sc.dir().join("table.json");
    std::fs::write(&spec, table_spec("default:made").to_string()).expect("write spec");
    let spec = spec.display().to_string();
    let out = halite(
        &[&["table", "create", &spec][..], &server].concat(),
        &[("HALITE_TOKEN", &token)],
    );
    assert!(!out.status.success(), "a read+write token made a table");
    assert!(String::from_utf8_lossy(&out.stderr).contains("403"));
    let out = halite(
        &[&["namespace", "list"][..], &server].concat(),
        &[("HALITE_TOKEN", &token)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim().lines().last(),
        Some("default")
    );

    let out = halite(
        &[&["token", "list"][..], &server].concat(),
        &[("HALITE_TOKEN", BOOT)],
    );
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        listed.contains("collector") && listed.contains("read,write") && !listed.contains(&token),
        "{listed}"
    );
    let id = &token[4..20];
    let out = halite(
        &[&["token", "revoke", id][..], &server].concat(),
        &[("HALITE_TOKEN", BOOT)],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = halite(
        &[&["namespace", "list"][..], &server].concat(),
        &[("HALITE_TOKEN", &token)],
    );
    assert!(!out.status.success(), "a revoked token still works");
    stop(srv);
}

#[test]
fn a_public_address_without_a_token_to_check_is_refused_with_what_to_do() {
    // The check comes before anything listens: nothing binds 0.0.0.0.
    let dir = tempfile::tempdir().expect("tempdir");
    let port = common::http::free_port();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_halite"))
        .args(["serve", "--set"])
        .arg(format!("data_dir=\"{}\"", dir.path().display()))
        .args(["--set", &format!("server.listen=\"0.0.0.0:{port}\"")])
        .env_remove("HALITE__AUTH__BOOTSTRAP_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run halite serve");
    assert!(!out.status.success());
    assert!(started.elapsed() < Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    for hint in [
        "0.0.0.0",
        "bootstrap_token",
        "halite token create",
        "--insecure",
    ] {
        assert!(
            err.contains(hint),
            "the refusal does not say `{hint}`: {err}"
        );
    }
    // A bootstrap token too short to be a secret is refused by name.
    let out = Command::new(env!("CARGO_BIN_EXE_halite"))
        .args(["serve", "--set"])
        .arg(format!("data_dir=\"{}\"", dir.path().display()))
        .args(["--set", "auth.bootstrap_token=\"short\""])
        .stdin(Stdio::null())
        .output()
        .expect("run halite serve");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("auth.bootstrap_token"));
}

/// Guessing tokens: each refusal is logged with its address and reason
/// (never the token) and counted; past `auth.slow_after_failures` an
/// address's refusals wait their turn, one after another, however many
/// connections it guesses over, while a good token is answered at once.
/// Making and revoking tokens is logged and counted too.
#[test]
fn guessing_is_logged_counted_and_slowed() {
    use std::sync::Arc;
    let sc = Scenario::new()
        .set("auth.enabled=true")
        .set("auth.slow_after_failures=2")
        .env("HALITE__AUTH__BOOTSTRAP_TOKEN", BOOT)
        .build();
    let log = sc.dir().join("server.log");
    let mut cmd = sc.command(&[]);
    cmd.stderr(std::process::Stdio::from(
        std::fs::File::create(&log).expect("log file"),
    ));
    let srv = common::server::spawn_ready(cmd, sc.port);
    let a = srv.addr.clone();
    let guess = "hal_guessedid_guessedsecretguessedsecret";
    let wrong = |a: &str| call(a, "GET", "/api/v1/tables", Some(&bearer(guess)), None, b"").status;
    // Two refused at once.
    let started = Instant::now();
    assert_eq!(wrong(&a), 401);
    assert_eq!(wrong(&a), 401);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    // Then five more over five connections at once: turns of 100, 200,
    // 400, 800 and 1,600 ms, one after another (3.1 s), not side by side.
    let a = Arc::new(a);
    let started = Instant::now();
    let guesses: Vec<_> = (0..5)
        .map(|_| {
            let a = a.clone();
            std::thread::spawn(move || wrong(&a))
        })
        .collect();
    // A good token meanwhile is not held back.
    std::thread::sleep(Duration::from_millis(300));
    let good = Instant::now();
    let r = call(&a, "GET", "/api/v1/tables", Some(&bearer(BOOT)), None, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        good.elapsed() < Duration::from_millis(500),
        "{:?}",
        good.elapsed()
    );
    for g in guesses {
        assert_eq!(g.join().expect("guess"), 401);
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(3000),
        "five slowed guesses took {took:?}"
    );
    let (id, _token) = make_token(&a, &["read"], &[]);
    let r = call(
        &a,
        "DELETE",
        &format!("/api/v1/tokens/{id}"),
        Some(&bearer(BOOT)),
        None,
        b"",
    );
    assert_eq!(r.status, 204, "{}", r.text());
    let metrics = call(&a, "GET", "/metrics", None, None, b"").text();
    let value = |line_start: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(line_start))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        value("halite_auth_failures_total{reason=\"invalid\"}"),
        7.0,
        "{metrics}"
    );
    assert_eq!(value("halite_auth_slowed_total"), 5.0, "{metrics}");
    assert_eq!(
        value("halite_auth_tokens_total{change=\"created\"}"),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        value("halite_auth_tokens_total{change=\"revoked\"}"),
        1.0,
        "{metrics}"
    );
    stop(srv);
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        !text.contains("guessedsecret"),
        "a token in the log:\n{text}"
    );
    assert!(!text.contains(BOOT), "the bootstrap token in the log");
    let refusals = text
        .lines()
        .filter(|l| l.contains("refused credentials"))
        .count();
    assert!(refusals >= 5, "{text}");
    assert!(text.contains("address=127.0.0.1"), "{text}");
    assert!(
        text.contains("token created") && text.contains("token revoked"),
        "{text}"
    );
}
