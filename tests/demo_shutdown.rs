//! Ctrl-C in `make run`: SIGINT to the whole process group of `halite demo`
//! (as a terminal sends it) at moments spread over its life, from start-up
//! through ingestion to idling, half of the times after its broker died
//! first. Each time it must exit 0 within 10 s, its broker gone and its
//! data directory removed. (Once, one try in eleven hung forever in the
//! consumer's close.) `HALITE_DEMO_SIGINTS` sets how many tries (default
//! 8), `HALITE_DEMO_SEED` the moments.

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::http::free_port;
use common::kafka::tansu_binary;
use common::rng::Rng;

/// The demo's broker: the child of its main thread.
fn children(pid: u32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn alive(pid: i32) -> bool {
    // A zombie has exited; only its entry is left.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn sigint_to_the_demo_stops_it_cleanly_at_any_moment() {
    let tries: u64 = std::env::var("HALITE_DEMO_SIGINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let mut rng = Rng::from_env_or("HALITE_DEMO_SEED", 0x5eed_0de0);
    let tansu = tansu_binary();
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/halite.toml");
    for i in 0..tries {
        let tmp = tempfile::tempdir().expect("tmpdir for the demo");
        let logs = tempfile::tempdir().expect("logs");
        let port = free_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_halite"))
            .arg("demo")
            .arg("--config")
            .arg(&config)
            .arg("--tansu")
            .arg(&tansu)
            .args(["--points", "20000", "--hosts", "10", "--set"])
            .arg(format!("server.listen=\"127.0.0.1:{port}\""))
            .env("TMPDIR", tmp.path())
            .stdout(Stdio::from(
                std::fs::File::create(logs.path().join("out")).expect("out"),
            ))
            .stderr(Stdio::from(
                std::fs::File::create(logs.path().join("err")).expect("err"),
            ))
            .process_group(0)
            .spawn()
            .expect("spawn halite demo");
        let pid = child.id();
        // Moments from the first instant (start-up) to well after the
        // points were ingested.
        let wait_ms = rng.below(7000);
        std::thread::sleep(Duration::from_millis(wait_ms));
        let brokers = children(pid);
        let broker_first = i % 2 == 1;
        if broker_first {
            for b in &brokers {
                // SAFETY: signals a child process of the demo by pid.
                unsafe { libc::kill(*b, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(rng.below(500)));
        }
        // SAFETY: signals the demo's own process group, as a terminal does.
        assert_eq!(unsafe { libc::killpg(pid as i32, libc::SIGINT) }, 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = || {
            format!(
                "try {i} (SIGINT after {wait_ms} ms, broker killed first: {broker_first})\n{}",
                std::fs::read_to_string(logs.path().join("err")).unwrap_or_default()
            )
        };
        let Some(status) = status else {
            let stacks = std::fs::read_dir(format!("/proc/{pid}/task"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|t| std::fs::read_to_string(t.path().join("stat")).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("");
            // SAFETY: as above.
            unsafe { libc::killpg(pid as i32, libc::SIGKILL) };
            for b in &brokers {
                // SAFETY: as above.
                unsafe { libc::kill(*b, libc::SIGKILL) };
            }
            let _ = child.wait();
            panic!(
                "the demo did not stop within 10 s: {}\nthreads:\n{stacks}",
                log()
            );
        };
        assert!(status.success(), "exit {status:?}: {}", log());
        // The broker outlives the service now: no alarm about it at a
        // plain Ctrl-C (once a warning per poll, "AllBrokersDown").
        if !broker_first {
            let err = std::fs::read_to_string(logs.path().join("err")).unwrap_or_default();
            assert!(
                !err.contains("AllBrokersDown") && !err.contains("broker is down"),
                "{}",
                log()
            );
        }
        for b in &brokers {
            assert!(!alive(*b), "the broker {b} outlived the demo: {}", log());
        }
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .expect("tmpdir")
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "left behind {left:?}: {}", log());
    }
}

/// `make run 2>&1 | tee log`, then Ctrl-C: `tee` ends at once, and every
/// line the demo writes while it stops meets a closed pipe. The logger
/// reported that failure with `eprintln!`, which panicked on the same
/// stderr: the service died and left its data directory. It must stop as
/// at a plain Ctrl-C.
#[test]
fn sigint_after_the_output_pipe_closed_stops_the_demo_cleanly() {
    use std::io::BufRead;
    let tansu = tansu_binary();
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/halite.toml");
    let tmp = tempfile::tempdir().expect("tmpdir for the demo");
    let port = free_port();
    let (reader, writer) = std::io::pipe().expect("a pipe");
    let mut child = Command::new(env!("CARGO_BIN_EXE_halite"))
        .arg("demo")
        .arg("--config")
        .arg(&config)
        .arg("--tansu")
        .arg(&tansu)
        .args(["--points", "20000", "--hosts", "10", "--set"])
        .arg(format!("server.listen=\"127.0.0.1:{port}\""))
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::from(writer.try_clone().expect("pipe")))
        .stderr(Stdio::from(writer))
        .process_group(0)
        .spawn()
        .expect("spawn halite demo");
    let pid = child.id();
    // Reads (as tee would) until the demo has said everything it says at
    // start, then ends, closing the pipe's only reading end.
    let (seen, reading) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            let done = line.contains("see the data in your browser");
            lines.push(line);
            if done {
                break;
            }
        }
        let _ = seen.send(lines);
    });
    let lines = reading
        .recv_timeout(Duration::from_secs(90))
        .expect("the demo's start-up lines");
    assert!(
        lines.iter().any(|l| l.contains("see the data")),
        "{lines:?}"
    );
    // The points came in through Kafka only, and InfluxQL reads them (the
    // last hour of a host: 360 points, the newest stamped now).
    let asked = lines
        .iter()
        .position(|l| l.starts_with("InfluxQL (database `metrics`)"))
        .unwrap_or_else(|| panic!("no InfluxQL answer in {lines:?}"));
    let answer: serde_json::Value =
        serde_json::from_str(lines[asked + 1].trim()).expect("the answer is JSON");
    let series = &answer["results"][0]["series"][0];
    assert_eq!(series["name"], "cpu", "{answer}");
    assert!(series["values"][0][1].is_number(), "{answer}");
    assert!(
        !lines.iter().any(|l| l.contains("/write")),
        "the demo writes through Kafka only: {lines:?}"
    );
    std::thread::sleep(Duration::from_millis(200));
    let brokers = children(pid);
    // SAFETY: signals the demo's own process group, as a terminal does.
    assert_eq!(unsafe { libc::killpg(pid as i32, libc::SIGINT) }, 0);
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            // SAFETY: as above.
            unsafe { libc::killpg(pid as i32, libc::SIGKILL) };
            let _ = child.wait();
            panic!("the demo did not stop within 15 s of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit {status:?}");
    for b in &brokers {
        assert!(!alive(*b), "the broker {b} outlived the demo");
    }
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("tmpdir")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind {left:?}");
}
