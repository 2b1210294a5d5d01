//! A real Prometheus (Debian's `prometheus`) on a loopback port with its
//! own TSDB directory, stopped (killed) when dropped: it scrapes halite in
//! the dashboard tests, and writes to and reads from halite in the remote
//! write and read tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
        Prometheus::with_args(dir, config, &[])
    }

    /// [`Prometheus::with_config`] with more flags, such as
    /// `--web.enable-remote-write-receiver`.
    pub fn with_args(dir: &Path, config: &str, args: &[&str]) -> Prometheus {
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
            .args(args)
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

    /// Its HTTP query API, as [`PromApi`] asks any server's.
    pub fn api(&self) -> PromApi {
        PromApi {
            addr: self.addr.clone(),
            prefix: String::new(),
        }
    }

    /// An instant query evaluated at `time` (seconds since the epoch).
    pub fn query_at(&self, expr: &str, time: f64) -> Json {
        self.api().query_at(expr, time)
    }

    /// A range query, as Grafana's panels send it.
    pub fn query_range(&self, expr: &str, start: f64, end: f64, step: f64) -> Json {
        self.api().query_range(expr, start, end, step)
    }

    /// `GET path` of Prometheus' HTTP API, its JSON answer (status 200).
    pub fn get(&self, path: &str) -> Json {
        self.api().get(path)
    }

    /// Prometheus' own metrics, as text.
    pub fn metrics(&self) -> String {
        request(&self.addr, "GET", "/metrics", None, b"")
            .expect("prometheus metrics")
            .text()
    }
}

/// Prometheus' HTTP query API at `addr` under `prefix`: a real
/// Prometheus' (no prefix) or halite's own (`/prometheus`).
pub struct PromApi {
    pub addr: String,
    pub prefix: String,
}

impl PromApi {
    /// An instant query evaluated at `time` (seconds since the epoch).
    pub fn query_at(&self, expr: &str, time: f64) -> Json {
        self.get(&format!(
            "/api/v1/query?query={}&time={time:.3}",
            percent_encode(expr)
        ))
    }

    /// A range query, as Grafana's panels send it.
    pub fn query_range(&self, expr: &str, start: f64, end: f64, step: f64) -> Json {
        self.get(&format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={step}",
            percent_encode(expr)
        ))
    }

    /// `GET prefix + path`, its JSON answer (status 200).
    pub fn get(&self, path: &str) -> Json {
        let path = format!("{}{path}", self.prefix);
        let r = request(&self.addr, "GET", &path, None, b"").expect("prometheus api");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        serde_json::from_slice(&r.body).expect("json")
    }
}

/// An exporter on a loopback port whose `n`th scrape answers
/// `exposition(n)`; it stops with the flag. Returns its address.
pub fn exporter(
    stop: Arc<AtomicBool>,
    exposition: impl Fn(u64) -> String + Send + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    listener.set_nonblocking(true).expect("nonblocking");
    let scrapes = AtomicU64::new(0);
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok((mut conn, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let _ = conn.set_nonblocking(false);
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 4096];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let body = exposition(scrapes.fetch_add(1, Ordering::Relaxed));
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
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

/// A snappy `ReadRequest` of one query over all time with `Equal`
/// matchers, and hints naming `func` when given.
pub fn read_request(matchers: &[(&str, &str)], func: Option<&str>) -> Vec<u8> {
    read_request_between(matchers, 0, (1 << 32) - 1, func)
}

/// [`read_request`] of the samples in `[start_ms, end_ms]`.
pub fn read_request_between(
    matchers: &[(&str, &str)],
    start_ms: u64,
    end_ms: u64,
    func: Option<&str>,
) -> Vec<u8> {
    use halite::ingest::remote_write::encode_message;
    let varint = |mut v: u64, out: &mut Vec<u8>| loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    };
    let mut query = vec![0x08];
    varint(start_ms, &mut query);
    query.push(0x10);
    varint(end_ms, &mut query);
    for (name, value) in matchers {
        let mut matcher = Vec::new();
        encode_message(2, name.as_bytes(), &mut matcher);
        encode_message(3, value.as_bytes(), &mut matcher);
        encode_message(3, &matcher, &mut query);
    }
    if let Some(func) = func {
        let mut hints = Vec::new();
        encode_message(2, func.as_bytes(), &mut hints);
        encode_message(4, &hints, &mut query);
    }
    let mut read = Vec::new();
    encode_message(1, &query, &mut read);
    snap::raw::Encoder::new()
        .compress_vec(&read)
        .expect("snappy")
}

/// The series of a `ReadResponse` with one query's result.
pub fn read_answer(body: &[u8]) -> Vec<halite::ingest::remote_write::Series> {
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .expect("snappy answer");
    // ReadResponse { results = 1 { timeseries = 1 } }: unwrap two levels.
    let results = halite::ingest::remote_write::fields(&raw).expect("response");
    halite::ingest::remote_write::decode_series_list(results[0].1.bytes()).expect("series")
}
