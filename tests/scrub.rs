//! The scrub against a running server: it reads every live store file
//! again from disk, and a byte changed on disk under a live file is found,
//! named in `/readyz` (503) and counted in `halite_scrub_damaged_files`,
//! until the file reads clean again or is no longer live.

mod common;

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::http::{create_table, request};
use common::scenario::Scenario;
use common::server::stop;
use serde_json::json;

fn metric(addr: &str, name: &str) -> f64 {
    let text = request(addr, "GET", "/metrics", None, b"")
        .expect("metrics")
        .text();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Flips bits of the byte at `at` of `file` on disk; a second flip puts
/// it back.
fn flip_byte(file: &std::path::Path, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .expect("open store file");
    let mut byte = [0u8; 1];
    f.read_exact_at(&mut byte, at).expect("read");
    byte[0] ^= 0x5a;
    f.write_all_at(&byte, at).expect("write");
}

/// The nice value of the first thread of process `pid` whose name starts
/// with `name` (`/proc/<pid>/task/<tid>/stat`, field 19).
fn thread_nice(pid: u32, name: &str) -> Option<i64> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(name) {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        // After "pid (comm) ", the fields from the third on.
        let rest = &stat[stat.rfind(')')? + 2..];
        return rest.split(' ').nth(16)?.parse().ok();
    }
    None
}

fn store_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "sst") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_scrub_finds_a_byte_changed_on_disk_and_readyz_names_the_file() {
    let sc = Scenario::new().set("region.scrub_rate=\"64MiB\"").build();
    let srv = sc.start();
    let a = srv.addr.clone();
    create_table(
        &a,
        &json!({
            "name": "cpu",
            "families": [{"name": "f", "data_block_encoding": "TIME_SERIES"}],
            "key": {
                "fields": [
                    {"name": "metric", "type": "string", "width": 8},
                    {"name": "host", "type": "string", "width": 8},
                    {"name": "ts", "type": "reversed_timestamp"}
                ]
            }
        }),
    );
    let mut lines = String::new();
    for i in 0..20_000u64 {
        lines.push_str(&format!(
            "cpu,host=h{} usage_user={},usage_system={} {}\n",
            i % 10,
            (i * 7919) % 1000,
            i % 97,
            1_700_000_000_000 + i * 1000
        ));
    }
    let r = request(
        &a,
        "POST",
        "/api/v1/write?table=cpu&precision=ms",
        Some("text/plain"),
        lines.as_bytes(),
    )
    .expect("write");
    assert_eq!(r.status, 204, "{}", r.text());
    let r = request(&a, "POST", "/api/v1/tables/cpu/flush", None, b"").expect("flush");
    assert!(r.status < 300, "{}", r.text());
    let files = store_files(&sc.data().join("regions"));
    assert_eq!(files.len(), 1, "{files:?}");

    // A clean pass over the healthy file first.
    wait_until("a clean scrub pass", || {
        metric(&a, "halite_scrub_passes_total") >= 1.0
    });
    assert!(metric(&a, "halite_scrub_checked_files_total") >= 1.0);
    assert_eq!(metric(&a, "halite_scrub_damaged_files"), 0.0);
    // The scrub takes only CPU the rest leave: its thread is at nice 19,
    // the server's others where they started.
    assert_eq!(thread_nice(srv.child.id(), "halite-scrub"), Some(19));
    assert_eq!(thread_nice(srv.child.id(), "halite-compact-"), Some(0));
    assert_eq!(
        request(&a, "GET", "/readyz", None, b"")
            .expect("readyz")
            .status,
        200
    );

    // One byte of a data block changes on disk (the page cache holds the
    // change: the scrub reads what the disk now says).
    let file = &files[0];
    let at = std::fs::metadata(file).expect("size").len() / 3;
    flip_byte(file, at);

    wait_until("the damage found", || {
        metric(&a, "halite_scrub_damaged_files") == 1.0
    });
    let ready = request(&a, "GET", "/readyz", None, b"").expect("readyz");
    assert_eq!(ready.status, 503, "{}", ready.text());
    let why = ready.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let within = file
        .strip_prefix(sc.data())
        .expect("under the data directory");
    assert!(
        why.contains("scrub")
            && why.contains(&within.display().to_string())
            && !why.contains(&sc.data().display().to_string()),
        "{why}"
    );

    // The byte put back (a restored file): the next pass clears it.
    flip_byte(file, at);
    wait_until("the restored file read clean", || {
        metric(&a, "halite_scrub_damaged_files") == 0.0
    });
    assert_eq!(
        request(&a, "GET", "/readyz", None, b"")
            .expect("readyz")
            .status,
        200
    );

    // Damaged again, then gone with its table.
    flip_byte(file, at);
    wait_until("the damage found again", || {
        metric(&a, "halite_scrub_damaged_files") == 1.0
    });

    // Once the file is gone (its table dropped), so is the damage.
    let r = request(&a, "DELETE", "/api/v1/tables/cpu", None, b"").expect("drop");
    assert!(r.status < 300, "{}", r.text());
    wait_until("the damage forgotten", || {
        metric(&a, "halite_scrub_damaged_files") == 0.0
    });
    assert_eq!(
        request(&a, "GET", "/readyz", None, b"")
            .expect("readyz")
            .status,
        200
    );
    stop(srv);
}

/// A stoppable chore's long run ends when the chore is stopped, rather
/// than holding the stop until it is done: the scrub checks a file of
/// gigabytes in such a run, and a stopping server waited for it (9 s in
/// a bench's restart).
#[test]
fn stopping_a_chore_ends_the_run_under_way() {
    use halite::clock::SystemClock;
    use halite::config::Config;
    use halite::store::Store;
    use halite::store::chores::Chore;

    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(
        Store::open(
            dir.path(),
            Config::default().store_options(),
            Arc::new(SystemClock),
        )
        .expect("open store"),
    );
    let (said, heard) = std::sync::mpsc::channel::<&str>();
    let chore = Chore::start_stoppable(
        &store,
        "long-chore",
        Duration::from_millis(10),
        move |_, go_on| {
            let _ = said.send("running");
            // Far longer than the test waits for the stop.
            let until = Instant::now() + Duration::from_secs(120);
            while go_on() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = said.send(if go_on() { "ran out" } else { "stopped" });
        },
    )
    .expect("start the chore");
    assert_eq!(heard.recv_timeout(Duration::from_secs(30)), Ok("running"));
    chore.stop();
    assert_eq!(heard.try_recv(), Ok("stopped"));
}
