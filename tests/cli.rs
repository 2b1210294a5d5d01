//! The client verbs against a running server: readable tables, `--json`,
//! and a non-zero exit with the server's message on errors.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::scenario::Scenario;
use common::server::stop;

fn halite(addr: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_halite"))
        .args(args)
        .args(["--server", addr])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn halite");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).expect("write stdin");
    }
    drop(input);
    child.wait_with_output().expect("halite output")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn client_verbs_talk_to_a_running_server() {
    let sc = Scenario::new().build();
    let s = sc.start();
    let a = s.addr.clone();
    let spec = r#"{"name": "sensors", "families": [{"name": "f"}],
                   "key": {"fields": [{"name": "site", "type": "string", "width": 8},
                                      {"name": "sensor", "type": "uint", "width": 4},
                                      {"name": "ts", "type": "reversed_timestamp"}],
                           "salt": {"buckets": 4}}}"#;
    assert!(
        ok(&halite(&a, &["table", "create", "-"], Some(spec)))
            .contains("created default:sensors with 4 region(s)")
    );
    let list = ok(&halite(&a, &["table", "list"], None));
    assert!(
        list.lines().next().expect("header").starts_with("TABLE"),
        "{list}"
    );
    assert!(list.contains("default:sensors"), "{list}");

    let lines = "m,site=oslo,sensor=7 temp=21.5,ok=t 1700000000000\nm,site=oslo,sensor=7 temp=22.0 1700000060000\nm,site=rome,sensor=1 temp=30 1700000000000\n";
    assert!(
        ok(&halite(
            &a,
            &["put", "--table", "sensors", "--precision", "ms"],
            Some(lines)
        ))
        .contains("wrote 3 point(s)")
    );

    // One series: key fields are typed from the schema (sensor is a number).
    let out = ok(&halite(
        &a,
        &[
            "query",
            "--table",
            "sensors",
            "--series",
            "site=oslo,sensor=7",
            "--fields",
            "temp",
        ],
        None,
    ));
    let rows: Vec<&str> = out.lines().collect();
    assert!(
        rows[0].starts_with("site") && rows[0].contains("f:temp"),
        "{out}"
    );
    assert!(
        rows[1].contains("1700000060000") && rows[1].contains("22.0"),
        "newest first: {out}"
    );
    assert!(out.contains("(2 row(s))"), "{out}");

    let agg = ok(&halite(
        &a,
        &[
            "query",
            "--table",
            "sensors",
            "--agg",
            "max,count",
            "--fields",
            "temp",
        ],
        None,
    ));
    assert!(agg.contains("oslo") && agg.contains("rome"), "{agg}");
    let page = ok(&halite(
        &a,
        &[
            "query", "--table", "sensors", "--agg", "count", "--limit", "1",
        ],
        None,
    ));
    assert!(page.contains("more: --continuation"), "{page}");
    let json = ok(&halite(
        &a,
        &[
            "query",
            "--table",
            "sensors",
            "--series",
            "site=rome",
            "--json",
        ],
        None,
    ));
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["rows"][0]["key"]["fields"]["sensor"], 1);
    let row_hex = v["rows"][0]["row"].as_str().expect("row").to_string();
    assert!(ok(&halite(&a, &["get", "--table", "sensors", &row_hex], None)).contains("30.0"));
    assert!(
        ok(&halite(
            &a,
            &["scan", "--table", "sensors", "--limit", "2"],
            None
        ))
        .contains("(2 row(s))")
    );

    // Errors: the server's message and a failing exit status.
    let bad = halite(
        &a,
        &["put", "--table", "sensors"],
        Some("m,site=x,sensor=zz temp=1\n"),
    );
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("unsigned integer"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let missing = halite(&a, &["table", "describe", "nope"], None);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("404"));

    // Scan filters: a value filter on cells, and one on rows by a column.
    let hot = ok(&halite(
        &a,
        &[
            "scan",
            "--table",
            "sensors",
            "--value-filter",
            ">= 22",
            "--columns",
            "f:temp",
        ],
        None,
    ));
    assert!(
        hot.contains("(2 row(s))") && hot.contains("bucket"),
        "{hot}"
    );
    let by_ok = ok(&halite(
        &a,
        &[
            "scan",
            "--table",
            "sensors",
            "--value-filter",
            "= true",
            "--filter-column",
            "f:ok",
            "--filter-if-missing",
        ],
        None,
    ));
    assert!(
        by_ok.contains("(1 row(s))") && by_ok.contains("21.5"),
        "{by_ok}"
    );
    let q = ok(&halite(
        &a,
        &[
            "query",
            "--table",
            "sensors",
            "--value-filter",
            "> 25",
            "--filter-field",
            "temp",
        ],
        None,
    ));
    assert!(q.contains("(1 row(s))") && q.contains("rome"), "{q}");
    let got = ok(&halite(
        &a,
        &[
            "get",
            "--table",
            "sensors",
            &row_hex,
            "--columns",
            "f:temp",
            "--max-versions",
            "2",
        ],
        None,
    ));
    assert!(got.contains("30.0"), "{got}");
    assert!(ok(&halite(&a, &["count", "--table", "sensors"], None)).contains("3 row(s)"));
    assert!(
        ok(&halite(
            &a,
            &["count", "--table", "sensors", "--series", "site=oslo"],
            None
        ))
        .contains("2 row(s)")
    );

    // Deletes: points of a series over a time range, then one row.
    let out = ok(&halite(
        &a,
        &[
            "delete",
            "--table",
            "sensors",
            "--series",
            "site=oslo,sensor=7",
            "--start",
            "1700000030000",
        ],
        None,
    ));
    assert!(out.contains("deleted 1 row(s)"), "{out}");
    assert!(
        ok(&halite(
            &a,
            &["count", "--table", "sensors", "--series", "site=oslo"],
            None
        ))
        .contains("1 row(s)")
    );
    let out = ok(&halite(
        &a,
        &["delete", "--table", "sensors", "--row", &row_hex],
        None,
    ));
    assert!(out.contains("deleted 1 row(s)"), "{out}");
    assert!(ok(&halite(&a, &["count", "--table", "sensors"], None)).contains("1 row(s)"));
    assert!(
        !halite(&a, &["delete", "--table", "sensors"], None)
            .status
            .success()
    );

    // Flush, major compaction, durability, namespaces.
    assert!(ok(&halite(&a, &["table", "flush", "sensors"], None)).contains("flushed"));
    assert!(ok(&halite(&a, &["table", "compact", "sensors"], None)).contains("compacted"));
    let out = ok(&halite(
        &a,
        &["table", "alter", "sensors", "--durability", "ASYNC_WAL"],
        None,
    ));
    assert!(out.contains("ASYNC_WAL"), "{out}");
    assert!(ok(&halite(&a, &["namespace", "create", "plant"], None)).contains("created"));
    let ns = ok(&halite(&a, &["namespace", "list"], None));
    assert!(ns.contains("plant") && ns.contains("default"), "{ns}");
    assert!(ok(&halite(&a, &["namespace", "drop", "plant"], None)).contains("dropped"));
    let help = ok(&halite(&a, &["--help"], None));
    for verb in ["delete", "count", "namespace", "scan", "query", "table"] {
        assert!(help.contains(verb), "--help lists {verb}: {help}");
    }

    assert!(ok(&halite(&a, &["table", "drop", "sensors"], None)).contains("dropped"));
    stop(s);
}
