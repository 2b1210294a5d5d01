//! What the benchmark binaries share: a keep-alive HTTP/1.1 client (peers
//! answer with chunked bodies too), process CPU and memory from `/proc`,
//! bytes on disk, percentiles.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// A keep-alive HTTP/1.1 connection.
pub struct Conn {
    reader: BufReader<TcpStream>,
    host: String,
}

impl Conn {
    pub fn open(addr: &str) -> Conn {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.set_nodelay(true).expect("nodelay");
        Conn {
            reader: BufReader::new(s),
            host: addr.to_string(),
        }
    }

    /// Sends a request and reads the whole answer: (status, body).
    pub fn call(
        &mut self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> (u16, Vec<u8>) {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        );
        // One write for head and body, as curl and Python's http.client do
        // for small bodies: two writes on a no-delay socket are two segments,
        // and the server wakes for each.
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        let mut line = String::new();
        let sent = self.reader.get_mut().write_all(&request).is_ok();
        let read = match sent {
            true => self.reader.read_line(&mut line).unwrap_or(0),
            false => 0,
        };
        if read == 0 {
            // The server closed the kept-alive connection while it was
            // idle (halite after server.idle_timeout, as nginx after
            // keepalive_timeout; comparing two large answers takes
            // longer): send again on a new one, as HTTP clients do.
            *self = Conn::open(&self.host);
            self.reader.get_mut().write_all(&request).expect("send");
            self.reader.read_line(&mut line).expect("status");
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {line:?}"));
        let mut len = 0usize;
        let mut chunked = false;
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("header");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().expect("length");
                } else if k.eq_ignore_ascii_case("transfer-encoding")
                    && v.trim().eq_ignore_ascii_case("chunked")
                {
                    chunked = true;
                }
            }
        }
        let mut out = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line).expect("chunk size");
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .expect("chunk size");
                let at = out.len();
                out.resize(at + size, 0);
                self.reader.read_exact(&mut out[at..]).expect("chunk");
                line.clear();
                self.reader.read_line(&mut line).expect("chunk end");
                if size == 0 {
                    break;
                }
            }
        } else {
            out.resize(len, 0);
            self.reader.read_exact(&mut out).expect("body");
        }
        (status, out)
    }

    pub fn get(&mut self, path: &str) -> (u16, Vec<u8>) {
        self.call("GET", path, "text/plain", b"")
    }
}

/// Waits until `GET path` answers 2xx.
pub fn wait_ready(addr: &str, path: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(s) = TcpStream::connect(addr) {
            drop(s);
            let ok = std::panic::catch_unwind(|| Conn::open(addr).get(path).0)
                .is_ok_and(|status| (200..300).contains(&status));
            if ok {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{what} did not become ready");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Percent-encodes a query-string value.
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// (p50, p99) of `v`.
pub fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[(v.len() * 99 / 100).min(v.len() - 1)])
}

/// User + system CPU seconds a process has used so far.
pub fn process_cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// CPU seconds of each of `pid`'s live threads, summed by thread name
/// (digits dropped, so a pool's workers add up under one name): where a
/// process's CPU goes.
pub fn thread_cpu_secs(pid: u32) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let name: String = head
            .split_once('(')
            .map_or("", |(_, n)| n)
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .collect();
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        *out.entry(name).or_insert(0.0) += (ticks(11) + ticks(12)) / hz;
    }
    out
}

/// A `/proc/<pid>/status` field in MiB (`VmHWM:` is the peak RSS).
pub fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Bytes allocated on disk under `path` (blocks, not lengths: sparse and
/// preallocated files count for what they hold).
pub fn disk_bytes(path: &Path) -> u64 {
    disk_bytes_where(path, &|_| true)
}

/// Like [`disk_bytes`], for the files `keep` accepts.
pub fn disk_bytes_where(path: &Path, keep: &dyn Fn(&Path) -> bool) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_dir() {
        std::fs::read_dir(path)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| disk_bytes_where(&e.path(), keep))
                    .sum()
            })
            .unwrap_or(0)
    } else if keep(path) {
        meta.blocks() * 512
    } else {
        0
    }
}

/// The first line a command prints (stdout, else stderr), or why not.
pub fn command_line_output(cmd: &str, args: &[&str]) -> String {
    match std::process::Command::new(cmd).args(args).output() {
        Ok(o) => {
            let text = if o.stdout.iter().any(|b| !b.is_ascii_whitespace()) {
                o.stdout
            } else {
                o.stderr
            };
            String::from_utf8_lossy(&text)
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string()
        }
        Err(e) => format!("not available ({e})"),
    }
}

/// (p50, p99) µs of `runs` POSTs of the query `body` on one keep-alive
/// connection, after 5 warm-up requests; `check` sees the first answer.
pub fn time_query(
    addr: &str,
    body: &str,
    runs: usize,
    check: impl Fn(&serde_json::Value),
) -> (f64, f64) {
    let mut c = Conn::open(addr);
    let mut lat = Vec::with_capacity(runs);
    for i in 0..runs + 5 {
        let t = Instant::now();
        let (status, out) = c.call("POST", "/api/v1/query", "application/json", body.as_bytes());
        let us = t.elapsed().as_secs_f64() * 1e6;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
        if i == 0 {
            check(&serde_json::from_slice(&out).expect("json"));
        }
        if i >= 5 {
            lat.push(us);
        }
    }
    percentiles(lat)
}
