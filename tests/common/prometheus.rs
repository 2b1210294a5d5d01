//! A real Prometheus (Debian's `prometheus`) on a loopback port with its
//! own TSDB directory, stopped (killed) when dropped: it scrapes halite in
//! the dashboard tests, and writes to and reads from halite in the remote
//! write and read tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use super::http::{free_port, request};

pub struct Prometheus {
    child: Child,
    pub addr: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    pub fn start(dir: &Path, target: &str) -> Prometheus {
        Prometheus::start_over(dir, &[target])
    }

    /// A Prometheus scraping every one of `targets` each second.
    pub fn start_over(dir: &Path, targets: &[&str]) -> Prometheus {
        let listed = targets
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(", ");
        Prometheus::with_config(
            dir,
            &format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: halite\n    \
                 static_configs:\n      - targets: [{listed}]\n"
            ),
        )
    }

    /// A Prometheus with `config` (YAML), its TSDB under `dir`.
    pub fn with_config(dir: &Path, config: &str) -> Prometheus {
        std::fs::create_dir_all(dir).expect("prometheus dir");
        let file = dir.join("prometheus.yml");
        std::fs::write(&file, config).expect("prometheus config");
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus: install Debian's `prometheus` package (.ci/run does)");
        let p = Prometheus { child, addr };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !request(&p.addr, "GET", "/-/ready", None, b"").is_ok_and(|r| r.status == 200) {
            assert!(Instant::now() < deadline, "prometheus did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    pub fn query(&self, expr: &str) -> Json {
        self.get(&format!("/api/v1/query?query={}", percent_encode(expr)))
    }

    /// An instant query evaluated at `time` (seconds since the epoch).
    pub fn query_at(&self, expr: &str, time: f64) -> Json {
        self.get(&format!(
            "/api/v1/query?query={}&time={time:.3}",
            percent_encode(expr)
        ))
    }

    fn get(&self, path: &str) -> Json {
        let r = request(&self.addr, "GET", path, None, b"").expect("prometheus query");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        serde_json::from_slice(&r.body).expect("json")
    }

    /// Prometheus' own metrics, as text.
    pub fn metrics(&self) -> String {
        request(&self.addr, "GET", "/metrics", None, b"")
            .expect("prometheus metrics")
            .text()
    }
}

pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
