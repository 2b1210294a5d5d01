//! One test's world, assembled the same way in every test that runs the
//! service: a temporary directory holding the data (and the config), a
//! free loopback port, and, when asked for, a Tansu broker with topics,
//! the example config with the quick group joins tests need, settings on
//! top, environment variables and a seeded generator.
//!
//! ```ignore
//! let sc = Scenario::new()
//!     .topic("cpu", 4)
//!     .set("kafka.commit_interval=\"200ms\"")
//!     .seed("HALITE_KAFKA_SEED")
//!     .build();
//! let srv = sc.start();
//! ```
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use super::http::free_port;
use super::kafka::{self, Broker, Load};
use super::rng::Rng;
use super::server::{self, Server};

/// What a test asks of its world; [`Builder::build`] starts it.
#[derive(Default)]
pub struct Builder {
    topics: Vec<(String, u32)>,
    broker: bool,
    broker_on_s3: bool,
    example_config: bool,
    client: Vec<String>,
    edits: Vec<(String, String)>,
    appended: String,
    settings: Vec<String>,
    env: Vec<(String, String)>,
    seed: Option<String>,
}

/// A started world: the broker (if any) runs until the scenario drops;
/// services are started from it and owned by the test.
pub struct Scenario {
    broker: Option<Broker>,
    rng: Option<Rng>,
    config: Option<PathBuf>,
    settings: Vec<String>,
    env: Vec<(String, String)>,
    data: PathBuf,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Scenario {
    /// A world with only the service: no broker, no config file.
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> Builder {
        Builder::default()
    }
}

impl Builder {
    /// A broker, with no topics of its own yet.
    pub fn broker(mut self) -> Self {
        self.broker = true;
        self
    }

    /// The broker keeps its topics on an S3 server, so they survive its
    /// restarts ([`Scenario::broker_mut`], `Broker::restart`).
    pub fn broker_on_s3(mut self) -> Self {
        self.broker = true;
        self.broker_on_s3 = true;
        self
    }

    /// A broker holding `name` with `partitions` partitions.
    pub fn topic(mut self, name: &str, partitions: u32) -> Self {
        self.broker = true;
        self.topics.push((name.to_string(), partitions));
        self
    }

    /// The example config (`configs/halite.toml`, its table included)
    /// even without a broker.
    pub fn example_config(mut self) -> Self {
        self.example_config = true;
        self
    }

    /// A librdkafka setting for the service's consumer (`"key" = "value"`).
    pub fn client(mut self, line: &str) -> Self {
        self.client.push(line.to_string());
        self
    }

    /// Replaces `from` by `to` in the example config (which must hold
    /// `from`: a test relying on a line that changed fails loudly).
    pub fn config_replace(mut self, from: &str, to: &str) -> Self {
        self.edits.push((from.to_string(), to.to_string()));
        self
    }

    /// Appends TOML (tables, topics) to the example config.
    pub fn config_append(mut self, toml: &str) -> Self {
        self.appended.push_str(toml);
        self
    }

    /// A `key=value` setting every start of the service gets.
    pub fn set(mut self, setting: &str) -> Self {
        self.settings.push(setting.to_string());
        self
    }

    /// An environment variable every start of the service gets.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// A generator seeded from `var` when it is set (printed either way,
    /// so a failing run can be repeated).
    pub fn seed(mut self, var: &str) -> Self {
        self.seed = Some(var.to_string());
        self
    }

    pub fn build(self) -> Scenario {
        let dir = tempfile::tempdir().expect("temp dir");
        let broker = self.broker.then(|| {
            if self.broker_on_s3 {
                Broker::start_on_s3()
            } else {
                Broker::start()
            }
        });
        if let Some(b) = &broker {
            for (name, partitions) in &self.topics {
                b.create_topic(name, *partitions);
            }
        }
        let wants_config = self.example_config
            || broker.is_some()
            || !self.edits.is_empty()
            || !self.appended.is_empty();
        let config = wants_config.then(|| {
            let path = dir.path().join("halite.toml");
            std::fs::write(&path, self.config_text()).expect("write config");
            path
        });
        let mut settings = Vec::new();
        if let Some(b) = &broker {
            settings.push(format!("kafka.brokers=\"{}\"", b.bootstrap));
        }
        settings.extend(self.settings);
        Scenario {
            rng: self.seed.as_deref().map(Rng::from_env),
            broker,
            config,
            settings,
            env: self.env,
            data: dir.path().join("data"),
            port: free_port(),
            dir,
        }
    }

    /// The example config with the quick group joins Tansu needs in tests
    /// (it holds a join for half the session timeout), this test's
    /// librdkafka settings, edits and additions.
    fn config_text(&self) -> String {
        let example = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/halite.toml"),
        )
        .expect("example config");
        let client = self
            .client
            .iter()
            .map(|l| format!("\n{l}"))
            .collect::<String>();
        let quick = [
            (
                "\"session.timeout.ms\" = \"6000\"",
                "\"session.timeout.ms\" = \"3000\"".to_string(),
            ),
            (
                "\"heartbeat.interval.ms\" = \"2000\"",
                "\"heartbeat.interval.ms\" = \"1000\"".to_string(),
            ),
            (
                "\"fetch.wait.max.ms\" = \"100\"",
                format!("\"fetch.wait.max.ms\" = \"100\"{client}"),
            ),
        ];
        let mut text = example;
        let edits = quick
            .iter()
            .map(|(f, t)| (f.to_string(), t.clone()))
            .chain(self.edits.iter().cloned());
        for (from, to) in edits {
            assert!(
                text.contains(&from),
                "the example config no longer holds {from}"
            );
            text = text.replace(&from, &to);
        }
        text.push_str(&self.appended);
        text
    }
}

impl Scenario {
    /// The service's data directory (inside the scenario's directory).
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// The scenario's directory: the data, the config, whatever else the
    /// test puts there; deleted when the scenario drops.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The config a start of the service reads (file, settings), with its
    /// data directory at `data`: for a test that opens a store in-process
    /// the way the service would.
    pub fn config_at(&self, data: &Path) -> halite::config::Config {
        let mut settings = self.settings.clone();
        settings.push(format!("data_dir=\"{}\"", data.display()));
        halite::config::Config::load(self.config.as_deref(), &settings).expect("the config loads")
    }

    pub fn broker(&self) -> &Broker {
        self.broker.as_ref().expect("the scenario has no broker")
    }

    pub fn broker_mut(&mut self) -> &mut Broker {
        self.broker.as_mut().expect("the scenario has no broker")
    }

    pub fn bootstrap(&self) -> &str {
        &self.broker().bootstrap
    }

    pub fn rng(&mut self) -> &mut Rng {
        self.rng
            .as_mut()
            .expect("the scenario was built without seed()")
    }

    /// `halite serve` over `data` on `port` with the scenario's config,
    /// settings and environment, then `more` settings (later ones win),
    /// not started: a test may still change where its output goes or what
    /// it may call.
    pub fn command_at(&self, data: &Path, port: u16, more: &[&str]) -> Command {
        let mut args: Vec<String> = Vec::new();
        if let Some(config) = &self.config {
            args.push("--config".into());
            args.push(config.display().to_string());
        }
        for s in self
            .settings
            .iter()
            .map(String::as_str)
            .chain(more.iter().copied())
        {
            args.push("--set".into());
            args.push(s.to_string());
        }
        let mut cmd = server::command(data, port, &args);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// [`Scenario::command_at`] over the scenario's data and port.
    pub fn command(&self, more: &[&str]) -> Command {
        self.command_at(&self.data, self.port, more)
    }

    /// Starts the service and waits until it is ready.
    pub fn start(&self) -> Server {
        self.start_with(&[])
    }

    /// [`Scenario::start`] with more settings for this start only.
    pub fn start_with(&self, more: &[&str]) -> Server {
        self.start_with_env(more, &[])
    }

    /// [`Scenario::start_with`] and environment variables for this start
    /// only (`HALITE_FAILPOINT`, say).
    pub fn start_with_env(&self, more: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = self.command(more);
        cmd.envs(env.iter().copied());
        server::spawn_ready(cmd, self.port)
    }

    /// Another member over its own data directory (`name` inside the
    /// scenario's directory) on `port`, with the scenario's settings.
    pub fn start_member(&self, name: &str, port: u16, more: &[&str]) -> Server {
        server::spawn_ready(self.command_at(&self.dir().join(name), port, more), port)
    }

    /// Starts the service without waiting: it may die before it is ready.
    pub fn launch(&self, more: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = self.command(more);
        cmd.envs(env.iter().copied());
        server::spawn(cmd, self.port)
    }

    /// Runs `halite produce` into `topic` and requires it to succeed.
    pub fn produce(&self, topic: &str, load: Load) {
        kafka::produce(self.bootstrap(), topic, load);
    }

    /// [`Scenario::produce`] on a thread, for load while the test acts.
    pub fn produce_in_background(&self, topic: &str, load: Load) -> std::thread::JoinHandle<()> {
        kafka::produce_in_background(self.bootstrap(), topic, load)
    }
}
