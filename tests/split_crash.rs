//! Crash-safe region splits over the real server: `halite serve` is made to
//! SIGKILL itself at each step of a split while writers
//! write; after a restart every acknowledged write is readable, the catalog
//! is intact (its regions tile the key space, the interrupted split is
//! finished or undone), and regions go on splitting.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::http::{create_table, request, request_with};
use common::scenario::Scenario;
use common::server::stop;
use serde_json::{Value, json};

/// Small regions on two shards, checked for a split every 20 ms.
fn scenario() -> Scenario {
    Scenario::new()
        .set("region.flush_size=\"64KiB\"")
        .set("region.max_size=\"256KiB\"")
        .set("region.split_check_interval=\"20ms\"")
        .set("server.shards=2")
        .build()
}

fn regions(addr: &str) -> Vec<Value> {
    let r = request(addr, "GET", "/api/v1/tables/events", None, b"").expect("describe");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["regions"].as_array().expect("regions").clone()
}

/// The regions tile the key space: no row belongs to two or to none.
fn assert_tiles(regions: &[Value]) {
    assert_eq!(regions[0]["start"], "");
    assert_eq!(regions.last().expect("regions")["end"], "");
    for w in regions.windows(2) {
        assert_eq!(w[0]["end"], w[1]["start"], "regions must tile: {regions:?}");
    }
}

/// Batch `b`: 100 hosts at one timestamp, values naming the batch.
fn batch_body(b: u64) -> String {
    (0..100)
        .map(|h| {
            format!(
                "ev,host=h{h:03} v={b}i,pad=\"{}\" {}\n",
                "x".repeat(60),
                1_000_000 + b
            )
        })
        .collect()
}

/// Writes batches from `from` until the server stops answering (or `until`);
/// returns the acknowledged ones.
fn write_until_gone(addr: &str, from: u64, until: u64) -> Vec<u64> {
    let mut acked = Vec::new();
    for b in from..until {
        match request(
            addr,
            "POST",
            "/api/v1/write?table=events&precision=ms",
            None,
            batch_body(b).as_bytes(),
        ) {
            Ok(r) if r.status == 204 => acked.push(b),
            Ok(r) => panic!("write answered {}: {}", r.status, r.text()),
            Err(_) => break,
        }
    }
    acked
}

/// Every point of every acknowledged batch, read back in one streamed scan.
fn assert_all_readable(addr: &str, acked: &[u64]) {
    let r = request_with(
        addr,
        "POST",
        "/api/v1/tables/events/scan",
        &[
            ("Accept", "application/x-ndjson"),
            ("Content-Type", "application/json"),
        ],
        b"{}",
    )
    .expect("scan");
    assert_eq!(r.status, 200, "{}", r.text());
    let mut seen = std::collections::HashSet::new();
    for line in r.text().lines() {
        let row: Value = serde_json::from_str(line).expect("json line");
        if let Some(ts) = row["key"]["fields"]["ts"].as_u64() {
            let host = row["key"]["fields"]["host"]
                .as_str()
                .expect("host")
                .to_string();
            seen.insert((host, ts - 1_000_000));
        }
    }
    for &b in acked {
        for h in 0..100 {
            assert!(
                seen.contains(&(format!("h{h:03}"), b)),
                "acknowledged point h{h:03}@{b} is lost"
            );
        }
    }
}

#[test]
fn a_crash_at_any_step_of_a_split_loses_nothing() {
    for failpoint in [
        "split-after-intent",
        "split-after-parent-flush",
        "split-after-daughters",
        "split-after-commit",
    ] {
        let sc = scenario();
        let s = sc.start_with_env(&[], &[("HALITE_FAILPOINT", failpoint)]);
        let table = json!({
            "name": "events",
            "families": [{"name": "f"}],
            "key": {"fields": [{"name": "host", "type": "string", "width": 8},
                               {"name": "ts", "type": "timestamp"}]}
        });
        create_table(&s.addr, &table);

        // Writes go on until the first split kills the server.
        let acked = write_until_gone(&s.addr, 0, 100_000);
        let mut s = s;
        let status = s.child.wait().expect("reap");
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "{failpoint}: the server did not die at the failpoint ({status:?})"
        );
        assert!(!acked.is_empty(), "{failpoint}: nothing acknowledged");

        // Restart without the failpoint (and without splitting, to see what
        // recovery left): the split was undone or finished.
        let s = sc.start_with(&["region.split_check_interval=\"1h\""]);
        let after = regions(&s.addr);
        assert_tiles(&after);
        let committed = failpoint == "split-after-commit";
        let want = if committed { 2 } else { 1 };
        assert_eq!(after.len(), want, "{failpoint}: {after:?}");
        assert_all_readable(&s.addr, &acked);
        // The table's first region is 1; its split's daughters 2 and 3.
        let mut dirs: Vec<String> = std::fs::read_dir(sc.data().join("regions"))
            .expect("regions dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        dirs.sort();
        let expected = if committed {
            ["0000000002", "0000000003"].as_slice()
        } else {
            ["0000000001"].as_slice()
        };
        assert_eq!(dirs, expected, "{failpoint}: region directories");
        stop(s);

        let s = sc.start();
        // Regions go on splitting, and nothing is lost on the way.
        let next = acked.last().copied().unwrap_or(0) + 1;
        let mut more = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while regions(&s.addr).len() <= want {
            assert!(
                Instant::now() < deadline,
                "{failpoint}: no split after restart"
            );
            let from = next + more.len() as u64;
            more.extend(write_until_gone(&s.addr, from, from + 20));
        }
        assert_tiles(&regions(&s.addr));
        stop(s);
        let s = sc.start();
        assert_all_readable(&s.addr, &acked);
        assert_all_readable(&s.addr, &more);
        stop(s);
    }
}
