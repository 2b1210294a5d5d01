//! `[kafka]`: the consumer group, its topics and its bounds.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::ingest::Format;
use crate::units::{ByteSize, Dur};

/// One consumed topic.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicConfig {
    pub topic: String,
    /// `namespace:table` the points go to: a table with a declared key,
    /// or one of open tag sets (then not in cluster mode yet), whose
    /// names the namespace's dictionary keeps, as the HTTP doors' do.
    #[serde(default)]
    pub table: String,
    /// Or the database (namespace) they go to, as InfluxDB's `/write?db=`
    /// takes them: each measurement into its table of open tag sets, made
    /// on its first point (remote writes into its `samples` table). Not in
    /// cluster mode yet.
    #[serde(default)]
    pub database: Option<String>,
    #[serde(default)]
    pub format: Format,
    /// Timestamp precision of the messages: ns, us, ms or s; by default
    /// ns for line protocol and ms for JSON points.
    #[serde(default)]
    pub precision: Option<String>,
}

/// `[kafka]`: the consumer group and its topics.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// `bootstrap.servers`; empty (the default) turns Kafka ingestion off.
    pub brokers: String,
    pub group_id: String,
    /// How often durable offsets are committed (default 1s).
    pub commit_interval: Dur,
    /// A partition's batch is written when it holds this many messages,
    /// or this many payload bytes (default 1MiB: a batch's encoded rows
    /// take a few times that while written)...
    pub batch_messages: usize,
    pub batch_bytes: ByteSize,
    /// ...or its first message waited this long (default 20ms).
    pub batch_wait: Dur,
    /// Writer threads decoding batches and handing them to the store
    /// (default 4); the queue to them holds as many again.
    pub writers: usize,
    /// Batches handed to the store and not yet durable (default 8): a WAL
    /// sync covers all of them at once while the writers decode the next.
    /// After a crash without a Kafka commit, the store's own positions lag
    /// by about this many batches plus the writers' (see durability.md).
    pub max_in_flight: usize,
    /// Message bytes fetched and not yet handed to a writer (default
    /// 64MiB). Past it the consumer takes no message until a writer takes
    /// a batch, and pauses its partitions when none does for a second,
    /// until half of it is written; librdkafka's own prefetch
    /// (`queued.max.messages.kbytes`) comes on top.
    pub max_buffered: ByteSize,
    /// Where bad messages go, with the reason in headers; none: only counted
    /// and logged.
    pub dead_letter_topic: Option<String>,
    /// Start a partition at the store's durable position when that is past
    /// the group's committed offset (default true: a crash between a
    /// durable write and its commit replays nothing). Set false to start
    /// at the committed offsets as they are — to replay a topic after
    /// resetting the group (`kafka-consumer-groups --reset-offsets`).
    pub resume_from_store: bool,
    /// librdkafka settings passed through as they are (both consumer and
    /// dead-letter producer), e.g. `"session.timeout.ms" = "6000"`.
    pub client: BTreeMap<String, String>,
    pub topics: Vec<TopicConfig>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: String::new(),
            group_id: "halite".into(),
            commit_interval: Dur(Duration::from_secs(1)),
            batch_messages: 2000,
            batch_bytes: ByteSize(1 << 20),
            batch_wait: Dur(Duration::from_millis(20)),
            writers: 4,
            max_in_flight: 8,
            max_buffered: ByteSize(64 << 20),
            dead_letter_topic: None,
            resume_from_store: true,
            client: BTreeMap::new(),
            topics: Vec::new(),
        }
    }
}

impl KafkaConfig {
    pub fn enabled(&self) -> bool {
        !self.brokers.is_empty() && !self.topics.is_empty()
    }

    /// A producer's settings: the brokers and the `client` settings a
    /// producer takes (consumer-only ones would make it refuse to start).
    pub fn producer_config(&self) -> rdkafka::config::ClientConfig {
        let mut pc = rdkafka::config::ClientConfig::new();
        pc.set("bootstrap.servers", &self.brokers)
            .set("linger.ms", "5");
        for (k, v) in &self.client {
            let consumer_only = [
                "session.",
                "heartbeat.",
                "fetch.",
                "auto.",
                "group.",
                "enable.auto",
                // The consumer's statistics feed /api/v1/ingest; a
                // producer's would only be logged.
                "statistics.",
            ]
            .iter()
            .any(|p| k.starts_with(p));
            if !consumer_only {
                pc.set(k, v);
            }
        }
        pc
    }
}
