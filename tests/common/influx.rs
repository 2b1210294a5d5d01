//! A real InfluxDB 1.x (Debian's `influxd`) on a loopback port with its
//! own directory: the oracle the InfluxDB protocol tests compare halite
//! against. Stopped (killed) when dropped.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use super::http::{free_port, request};

pub struct Influx {
    child: Child,
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Influx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Influx {
    /// Starts `influxd` and waits until `/ping` answers.
    pub fn start() -> Influx {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let conf = dir.path().join("influxdb.conf");
        std::fs::write(
            &conf,
            format!(
                r#"reporting-disabled = true
bind-address = "127.0.0.1:{rpc}"

[meta]
  dir = "{d}/meta"

[data]
  dir = "{d}/data"
  wal-dir = "{d}/wal"
  query-log-enabled = false

[monitor]
  store-enabled = false

[http]
  bind-address = "127.0.0.1:{port}"
  log-enabled = false

[logging]
  level = "warn"
"#,
                rpc = free_port(),
                d = dir.path().display()
            ),
        )
        .expect("influxdb.conf");
        let child = Command::new("influxd")
            .arg("-config")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("influxd: install Debian's influxdb package (make test does)");
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = request(&addr, "GET", "/ping", None, b"")
                && r.status == 204
            {
                break;
            }
            assert!(Instant::now() < deadline, "influxd did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Influx {
            child,
            addr,
            _dir: dir,
        }
    }
}

/// Numbers equal within 1e-9 relative (an integer and a float of one
/// value too), everything else exactly.
pub fn assert_close(a: &Json, b: &Json, at: &str) {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            let tolerance = 1e-9 * x.abs().max(y.abs()).max(1.0);
            assert!((x - y).abs() <= tolerance, "{at}: {x} != {y}");
        }
        (Json::Array(x), Json::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: lengths differ");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                assert_close(x, y, &format!("{at}[{i}]"));
            }
        }
        (Json::Object(x), Json::Object(y)) => {
            let keys = |m: &serde_json::Map<String, Json>| m.keys().cloned().collect::<Vec<_>>();
            let (mut kx, mut ky) = (keys(x), keys(y));
            kx.sort();
            ky.sort();
            assert_eq!(kx, ky, "{at}: keys differ");
            for (k, v) in x {
                assert_close(v, &y[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

/// InfluxDB 1.6 marks `"partial": true` on a series of more than 10,000
/// rows in a whole (not chunked) answer although every row is there: its
/// handler merges the 10,000-row chunks and keeps the first chunk's flag.
/// halite sends no such flag; the rows are what is compared.
pub fn without_long_partial(mut answer: Json) -> Json {
    // `get_mut`, not `[]`: indexing a Value mutably adds the key.
    let results = answer.get_mut("results").and_then(Json::as_array_mut);
    for result in results.into_iter().flatten() {
        let series = result.get_mut("series").and_then(Json::as_array_mut);
        for series in series.into_iter().flatten() {
            let long = series["values"]
                .as_array()
                .is_some_and(|v| v.len() > 10_000);
            if long && series["partial"] == true {
                series.as_object_mut().map(|o| o.remove("partial"));
            }
        }
    }
    answer
}

/// Telegraf's messages of `intervals` 10 s intervals from `t0` (ns), one
/// message a host's interval holding every measurement its plugins sent
/// (cpu, system, net, disk), as Telegraf's Kafka output batches them.
pub fn telegraf_messages(t0: u64, intervals: u64) -> Vec<String> {
    const S: u64 = 1_000_000_000;
    let mut messages = Vec::new();
    for k in 0..intervals {
        for (h, host) in ["web-1", "web-2", "db-1"].iter().enumerate() {
            let t = t0 + k * 10 * S + h as u64;
            let mut m = Vec::new();
            for c in 0..2u64 {
                m.push(format!(
                    "cpu,cpu=cpu{c},host={host} usage_idle={}.5,usage_user={} {t}",
                    90 - (k + c + h as u64) % 30,
                    (k * 3 + c) % 11
                ));
            }
            m.push(format!(
                "system,host={host} load1={}.25,n_cpus=2i,uptime={}i {t}",
                k % 4,
                1000 + k * 10
            ));
            for iface in ["eth0", "lo"] {
                m.push(format!(
                    "net,host={host},interface={iface} bytes_recv={}i,bytes_sent={}i {t}",
                    k * 1000 + h as u64,
                    k * 700
                ));
            }
            if h != 2 {
                m.push(format!(
                    "disk,device=sda1,fstype=ext4,host={host},mode=rw,path=/ free={}i,used_percent={}.5 {t}",
                    5000 - k,
                    40 + k
                ));
            }
            messages.push(m.join("\n"));
        }
    }
    messages
}

/// What a Telegraf dashboard and its variables ask of
/// [`telegraf_messages`]' points (`t0` as there, 100 s of them).
pub fn telegraf_statements(t0: u64) -> Vec<String> {
    let t = |secs: u64| format!("{}", t0 + secs * 1_000_000_000);
    vec![
        "SHOW MEASUREMENTS".to_string(),
        "SHOW TAG KEYS".to_string(),
        "SHOW FIELD KEYS".to_string(),
        "SHOW SERIES".to_string(),
        "SHOW TAG VALUES WITH KEY = \"interface\"".to_string(),
        "SELECT * FROM net WHERE host = 'web-2' AND interface = 'eth0'".to_string(),
        "SELECT * FROM disk WHERE host = 'web-1'".to_string(),
        format!(
            "SELECT mean(usage_idle), max(usage_user) FROM cpu WHERE time >= {} AND time < {} GROUP BY time(20s), host fill(none)",
            t(0),
            t(100)
        ),
        "SELECT last(load1), sum(uptime) FROM system GROUP BY host".to_string(),
        "SELECT sum(bytes_recv), count(bytes_sent) FROM net GROUP BY interface".to_string(),
        "SELECT mean(used_percent) FROM disk GROUP BY *".to_string(),
    ]
}
