//! Kafka ingestion: a consumer group over the configured topics, each topic
//! feeding one table in one message format, with at-least-once delivery.
//!
//! ```text
//! consumer thread ── batches per partition ──▶ bounded queue ──▶ writer threads
//!   poll, pause/resume,                          (full: pause)     decode, write (durable),
//!   commit what is durable  ◀──── offsets done ────────────────── dead-letter bad messages
//! ```
//!
//! A partition's committed offset only ever moves to just past a message
//! whose batch — and every batch before it — is durable in the store
//! (acknowledged after the WAL sync, per the table's durability) or handled
//! as a bad message. Batches finish out of order; `offsets::OffsetTracker` keeps
//! the lowest unfinished one as the limit. A crash or a rebalance replays
//! at most what was not committed, and a replayed point rewrites the same
//! cell. Each write carries its Kafka position into the WAL record
//! ([`crate::region::wal::record::SourcePosition`]: topic = stream,
//! partition = shard, offset = position).
//!
//! This file starts and stops the pipeline and runs the consumer thread;
//! `config.rs` holds the `[kafka]` settings, `offsets.rs` what may be
//! committed, `shared.rs` the state the threads share and the commit,
//! `rebalance.rs` the group's callbacks, `batch.rs` what the consumer hands
//! the writers, `writer.rs` the writers, `deletes.rs` delete messages and
//! the seam that carries them out, `dead_letter.rs` the bad messages and
//! `stats.rs` the counters.

mod batch;
pub mod config;
mod dead_letter;
mod deletes;
mod offsets;
mod polled_producer;
mod rebalance;
mod shared;
pub mod stats;
pub mod topic_writer;
mod writer;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError, bounded};
use parking_lot::{Condvar, Mutex};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError as KafkaErr, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::catalog::TableName;
use crate::clock::Clock;
use crate::ingest::line_protocol::Precision;
use crate::store::Store;
use crate::store::cluster::ShardFeeds;

use batch::{Batch, TopicRoute};
use dead_letter::DeadLetters;
use offsets::{OffsetTracker, Waiting};
use rebalance::IngestContext;
use shared::Shared;
use writer::{Submitted, completion_loop, writer_loop};

pub use config::{KafkaConfig, TopicConfig};
pub use deletes::{DeleteFailure, PointDeletes, read_delete};
pub use offsets::PartitionKey;
pub use stats::IngestStats;

/// Errors starting the consumer; each says which setting to fix.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error("kafka client setup failed: {0}; check [kafka] brokers and client settings")]
    Client(#[from] rdkafka::error::KafkaError),
    #[error("kafka topic `{topic}`: {reason}")]
    Topic { topic: String, reason: String },
}

/// The running pipeline; [`KafkaIngest::stop`] drains it.
pub struct KafkaIngest {
    stop: Arc<AtomicBool>,
    /// The consumer loop is done: batches written, last commit tried, the
    /// store no longer held (the consumer may still be leaving the group).
    stopped: Arc<AtomicBool>,
    consumer: Option<JoinHandle<()>>,
    pub stats: Arc<IngestStats>,
}

/// The table a topic mapped to database `db` notes its positions in (its
/// dictionary's), and the database whose measurements it writes; remote
/// writes go to the one samples table, made now.
fn database_route(
    store: &Store,
    tag_sets: &crate::series::TagSets,
    template: &crate::ingest::databases::TableTemplate,
    db: &str,
    format: crate::ingest::Format,
) -> Result<(TableName, Option<String>), String> {
    match store.catalog().create_namespace(db) {
        Ok(()) | Err(crate::error::Error::Conflict(_)) => {}
        Err(e) => return Err(e.to_string()),
    }
    if format == crate::ingest::Format::RemoteWrite {
        let name = TableName::parse(&format!("{db}:{}", crate::ingest::databases::SAMPLES_TABLE))
            .map_err(|e| e.to_string())?;
        crate::ingest::databases::table_or_make(store, &name, || template.samples_request(&name))
            .map_err(|e| e.to_string())?;
        return Ok((name, None));
    }
    let dictionary = tag_sets.dictionary(store, db).map_err(|e| e.to_string())?;
    Ok((dictionary.table().clone(), Some(db.to_string())))
}

impl KafkaIngest {
    /// Joins the group and starts consuming. Tables must exist.
    pub fn start(
        config: &KafkaConfig,
        store: Arc<Store>,
        deletes: Arc<dyn PointDeletes>,
        clock: Arc<dyn Clock>,
        topics: Option<Arc<topic_writer::TopicWriter>>,
        tag_sets: Arc<crate::series::TagSets>,
        template: crate::ingest::databases::TableTemplate,
    ) -> Result<KafkaIngest, KafkaError> {
        let mut routes = HashMap::new();
        for t in &config.topics {
            let bad = |reason: String| KafkaError::Topic {
                topic: t.topic.clone(),
                reason,
            };
            let (table, database) = match (t.table.is_empty(), &t.database) {
                (false, None) => (
                    TableName::parse(&t.table).map_err(|e| bad(e.to_string()))?,
                    None,
                ),
                (true, Some(db)) => {
                    database_route(&store, &tag_sets, &template, db, t.format).map_err(bad)?
                }
                _ => {
                    return Err(bad(
                        "give the topic a `table` or a `database`, one of them".into()
                    ));
                }
            };
            // A database's tables are made as their measurements arrive
            // (its dictionary's own table is not, in cluster mode).
            if t.database.is_none() {
                let desc = store.catalog().table(&table).map_err(|e| {
                    bad(format!(
                        "{e}; create the table (or list it under [[tables]]) first"
                    ))
                })?;
                // A table topic's open tag sets would take rows messages
                // (HTTP writes in cluster mode) as one table's, which a
                // database's topic carries as named rows: map the topic
                // to the database instead.
                if desc.key.is_open_tags() && store.is_cluster() {
                    return Err(bad(format!(
                        "table `{table}` has open tag sets: in cluster mode map the topic to its \
                         database (`database = \"{}\"`), whose tables its partitions carry",
                        table.namespace
                    )));
                }
            }
            let precision = t
                .precision
                .as_deref()
                .map(|p| {
                    Precision::parse(p)
                        .ok_or_else(|| bad(format!("unknown precision `{p}`; use ns, us, ms or s")))
                })
                .transpose()?;
            routes.insert(
                t.topic.clone(),
                Arc::new(TopicRoute {
                    topic: t.topic.clone(),
                    table,
                    database,
                    format: t.format,
                    precision,
                }),
            );
        }
        let cluster = if store.is_cluster() {
            // Two topics of one database would both own its samples table
            // (a database's topic of lines owns every table of it).
            let mut of_database: HashMap<&str, &str> = HashMap::new();
            for t in &config.topics {
                if let Some(db) = &t.database
                    && let Some(other) = of_database.insert(db, &t.topic)
                {
                    return Err(KafkaError::Topic {
                        topic: t.topic.clone(),
                        reason: format!(
                            "database `{db}` is mapped to topic `{other}` too; in cluster mode a \
                             database has one topic, whose partitions carry every table of it \
                             (remote writes over HTTP travel in a topic of lines too)"
                        ),
                    });
                }
            }
            let mut tables: HashMap<String, ShardFeeds> = HashMap::new();
            let mut fed_by: HashMap<TableName, String> = HashMap::new();
            for route in routes.values() {
                if let Some(other) = fed_by.insert(route.table.clone(), route.topic.clone()) {
                    return Err(KafkaError::Topic {
                        topic: route.topic.clone(),
                        reason: format!(
                            "table `{}` is fed by topic `{other}` too; in cluster mode a table \
                             has one topic, whose partitions carry its buckets",
                            route.table
                        ),
                    });
                }
                let feeds = match &route.database {
                    Some(db) => ShardFeeds::Database(db.clone()),
                    None => ShardFeeds::Tables(vec![route.table.clone()]),
                };
                tables.insert(route.topic.clone(), feeds);
            }
            Some(shared::ClusterRoutes {
                tables,
                ..Default::default()
            })
        } else {
            None
        };
        let stats = Arc::new(IngestStats::default());
        let shared = Arc::new(Shared {
            tracker: Mutex::new(OffsetTracker::default()),
            batch_done: Condvar::new(),
            generation: AtomicU64::new(0),
            stats: stats.clone(),
            store: store.clone(),
            deletes,
            assigned: Mutex::new(BTreeSet::new()),
            closing: AtomicBool::new(false),
            brokers_down: AtomicBool::new(false),
            sequence: Mutex::new(HashMap::new()),
            // Points a producer sent to another partition than their
            // bucket's go on to that partition (through the node's one
            // producer, which its HTTP writes use too).
            forward: match (&cluster, topics) {
                (Some(_), Some(t)) => Some(t),
                (Some(_), None) => Some(Arc::new(topic_writer::TopicWriter::start(config)?)),
                (None, _) => None,
            },
            cluster,
            tag_sets,
            template,
        });
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", &config.brokers)
            .set("group.id", &config.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            // What librdkafka fetched, for `/api/v1/ingest` and the
            // metrics (a message fetched twice is broker work done twice).
            .set("statistics.interval.ms", "1000");
        for (k, v) in &config.client {
            client.set(k, v);
        }
        let mut recovered = HashMap::new();
        for route in routes.values() {
            // Every table a batch wrote notes what was durable before it,
            // whichever: a database's topic resumes at the furthest.
            let tables = match &route.database {
                Some(db) => store
                    .catalog()
                    .tables(Some(db))
                    .into_iter()
                    .map(|t| t.name)
                    .collect(),
                None => vec![route.table.clone()],
            };
            for table in tables {
                let positions = store
                    .source_positions(&table)
                    .map_err(|e| KafkaError::Topic {
                        topic: route.topic.clone(),
                        reason: e.to_string(),
                    })?;
                for ((topic, partition), offset) in positions {
                    if topic != route.topic {
                        continue;
                    }
                    let key = (topic, partition as i32);
                    let mut durable = stats.durable.lock();
                    let at = durable.entry(key.clone()).or_insert(offset as i64);
                    *at = (*at).max(offset as i64);
                    if config.resume_from_store {
                        let at = recovered.entry(key).or_insert(offset as i64);
                        *at = (*at).max(offset as i64);
                    }
                }
            }
        }
        let consumer: BaseConsumer<IngestContext> = client.create_with_context(IngestContext {
            shared: Arc::downgrade(&shared),
            recovered,
            cooperative: std::sync::OnceLock::new(),
        })?;
        let topics: Vec<&str> = config.topics.iter().map(|t| t.topic.as_str()).collect();
        if let Some(routes) = &shared.cluster {
            // Which partition carries which bucket depends on the count.
            for topic in &topics {
                let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
                let partitions = md
                    .topics()
                    .iter()
                    .find(|t| t.name() == *topic)
                    .map_or(0, |t| t.partitions().len() as u32);
                if partitions == 0 {
                    return Err(KafkaError::Topic {
                        topic: topic.to_string(),
                        reason: "the topic has no partitions (create it first); in cluster mode \
                                 its partitions are what the nodes own"
                            .into(),
                    });
                }
                routes
                    .partitions
                    .lock()
                    .insert(topic.to_string(), partitions);
            }
        }
        consumer.subscribe(&topics)?;
        let dead_letters = match &config.dead_letter_topic {
            Some(topic) => Some(DeadLetters {
                topic: topic.clone(),
                producer: polled_producer::PolledProducer::create(
                    &config.producer_config(),
                    rdkafka::producer::DefaultProducerContext,
                )?,
            }),
            None => None,
        };
        let dead_letters = Arc::new(dead_letters);
        let writers = config.writers.max(1);
        let (tx, rx) = bounded::<Batch>(writers);
        // Batches submitted and waiting to be durable; a bound, so a slow
        // disk stops the writers (and then the consumer) instead of piling
        // up batches.
        let (done_tx, done_rx) = bounded::<Submitted>(config.max_in_flight.max(1));
        let mut writer_threads = Vec::new();
        for i in 0..writers {
            let rx = rx.clone();
            let done_tx = done_tx.clone();
            let store = store.clone();
            let shared = shared.clone();
            let clock = clock.clone();
            let dead_letters = dead_letters.clone();
            writer_threads.push(
                std::thread::Builder::new()
                    .name(format!("halite-kafka-w{i}"))
                    .spawn(move || {
                        writer_loop(rx, done_tx, &store, &shared, &*clock, &dead_letters)
                    })
                    .map_err(|e| KafkaError::Topic {
                        topic: String::new(),
                        reason: format!("cannot start a writer thread: {e}"),
                    })?,
            );
        }
        drop(rx);
        drop(done_tx);
        {
            let store = store.clone();
            let shared = shared.clone();
            // Joined after the writers, whose senders end its loop.
            writer_threads.push(
                std::thread::Builder::new()
                    .name("halite-kafka-done".into())
                    .spawn(move || completion_loop(done_rx, &store, &shared))
                    .map_err(|e| KafkaError::Topic {
                        topic: String::new(),
                        reason: format!("cannot start the completion thread: {e}"),
                    })?,
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::new(AtomicBool::new(false));
        let consumer_loop = ConsumerLoop {
            consumer: Arc::new(consumer),
            commit_busy: Arc::new(AtomicBool::new(false)),
            shared,
            routes,
            tx: Some(tx),
            next_seq: HashMap::new(),
            writer_threads,
            stop: stop.clone(),
            batch_messages: config.batch_messages.max(1),
            batch_bytes: (config.batch_bytes.0 as usize).max(1),
            batch_wait: config.batch_wait.0,
            commit_interval: config.commit_interval.0,
            max_buffered: config.max_buffered.0 as usize,
        };
        let handle = std::thread::Builder::new()
            .name("halite-kafka".into())
            .spawn({
                let stopped = stopped.clone();
                move || {
                    let consumer = consumer_loop.run();
                    // Everything is written and the store let go of: what is
                    // left is leaving the group, which waits for brokers that
                    // may not answer (a hung broker: a socket timeout).
                    stopped.store(true, Ordering::SeqCst);
                    drop(consumer);
                }
            })
            .map_err(|e| KafkaError::Topic {
                topic: String::new(),
                reason: format!("cannot start the consumer thread: {e}"),
            })?;
        Ok(KafkaIngest {
            stop,
            stopped,
            consumer: Some(handle),
            stats,
        })
    }

    /// Stops fetching, writes what was fetched, waits for it to be durable,
    /// commits, and leaves the group.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for KafkaIngest {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.consumer.take() {
            // Draining waits for the writers (bounded by the store); past
            // that, a consumer stuck in librdkafka must not hold up the
            // shutdown forever: it is left behind, loudly.
            let deadline = Instant::now() + STOP_DEADLINE;
            while !h.is_finished() && Instant::now() < deadline {
                if self.stopped.load(Ordering::SeqCst) {
                    // Only the group leave is left: a moment for it, not more.
                    let leave = Instant::now() + GROUP_LEAVE_WAIT;
                    while !h.is_finished() && Instant::now() < leave.min(deadline) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if h.is_finished() {
                let _ = h.join();
            } else if self.stopped.load(Ordering::SeqCst) {
                tracing::warn!(
                    "the kafka consumer is still leaving its group (the brokers do not answer); \
                     left to finish: everything it took is written"
                );
            } else {
                tracing::error!(
                    waited_s = STOP_DEADLINE.as_secs(),
                    "the kafka consumer did not stop; leaving it (a restart resumes at the store's durable positions)"
                );
            }
        }
    }
}

/// How often partitions marked to be taken again are tried.
const RETAKE_EVERY: Duration = Duration::from_secs(1);
/// How long a consumer holding back (its buffer full) sleeps before it
/// looks again whether a writer took a batch.
const HOLD_STEP: Duration = Duration::from_millis(1);
/// Writers that take no batch for this long while the buffer is full are
/// stuck (a store that cannot flush, say): the partitions pause.
const PAUSE_AFTER_STUCK: Duration = Duration::from_secs(1);

/// How long the consumer loop waits for the coordinator's answer to a
/// commit (the last one at a stop inside [`STOP_DEADLINE`]).
const COMMIT_WAIT: Duration = Duration::from_secs(3);

/// How long a stop waits for the consumer to leave its group once the
/// rest is done (the group notices a member gone after its session
/// timeout anyway).
const GROUP_LEAVE_WAIT: Duration = Duration::from_secs(2);

/// How long a stop waits for the consumer to drain, commit and close.
const STOP_DEADLINE: Duration = Duration::from_secs(8);

struct ConsumerLoop {
    /// Shared with a commit still waiting for the coordinator.
    consumer: Arc<BaseConsumer<IngestContext>>,
    /// A commit is out (see `Shared::commit_within`).
    commit_busy: Arc<AtomicBool>,
    shared: Arc<Shared>,
    routes: HashMap<String, Arc<TopicRoute>>,
    tx: Option<Sender<Batch>>,
    /// The sequence number the next batch of each partition gets.
    next_seq: HashMap<PartitionKey, u64>,
    writer_threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    batch_messages: usize,
    batch_bytes: usize,
    batch_wait: Duration,
    commit_interval: Duration,
    max_buffered: usize,
}

impl ConsumerLoop {
    /// The group's committed offsets of every partition of the topics,
    /// also those other members hold, for `/api/v1/ingest` (best effort:
    /// the consumer goes on without them).
    fn read_group_offsets(&self) {
        let mut tpl = TopicPartitionList::new();
        for topic in self.routes.keys() {
            match self
                .consumer
                .fetch_metadata(Some(topic), Duration::from_secs(2))
            {
                Ok(md) => {
                    for t in md.topics() {
                        for p in t.partitions() {
                            tpl.add_partition(t.name(), p.id());
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(%topic, error = %e, "reading the topic's partitions failed");
                }
            }
        }
        if tpl.count() == 0 {
            return;
        }
        match self.consumer.committed_offsets(tpl, Duration::from_secs(2)) {
            Ok(c) => self.shared.stats.record_committed(&c),
            Err(e) => tracing::debug!(error = %e, "reading the group's committed offsets failed"),
        }
    }

    /// Consumes until stopped; hands back the consumer, which has left
    /// the group or is still leaving it, once nothing else is held.
    fn run(mut self) -> Arc<BaseConsumer<IngestContext>> {
        self.read_group_offsets();
        // Batches still filling, one per partition (a few dozen at most: a
        // scan beats hashing the topic name of every message)...
        let mut pending: Vec<Batch> = Vec::new();
        // ...and full ones waiting for a writer, oldest first.
        let mut ready: VecDeque<Batch> = VecDeque::new();
        // Payload bytes held in both; over `max_buffered` no message is
        // taken until the writers take a batch, and when they take none
        // for a while the partitions pause, and resume under half of it.
        let mut buffered = 0usize;
        let mut paused = false;
        let mut holding = false;
        let mut last_handoff = Instant::now();
        let mut seen_generation = self.shared.generation.load(Ordering::SeqCst);
        let mut polls = 0u64;
        let mut last_commit = Instant::now();
        let mut last_retake = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            while let Some(b) = ready.pop_front() {
                let bytes = b.bytes();
                match self.try_send(b) {
                    None => {
                        buffered -= bytes;
                        last_handoff = Instant::now();
                    }
                    Some(b) => {
                        ready.push_front(b);
                        break;
                    }
                }
            }
            // Short polls only while something waits on time (a batch to
            // hand over, one filling up): an idle consumer wakes ten times
            // a second (every poll ends in rdkafka's busy wait of up to a
            // millisecond; a message wakes a poll at once anyway).
            let timeout = if !ready.is_empty() {
                Duration::from_millis(1)
            } else if !pending.is_empty() {
                Duration::from_millis(10)
            } else {
                Duration::from_millis(100)
            };
            // A full buffer with writers that keep taking batches (only
            // slower than the broker sends): no poll, so librdkafka's
            // prefetch fills to its own limit and its fetches wait. A
            // pause would drop what librdkafka prefetched, and the broker
            // would send it all again after the resume (against a store
            // held back by its flushes, tests/kafka_faults.rs, 15 pauses
            // had 16 % of the messages fetched twice).
            let hold = !paused && buffered > self.max_buffered;
            if hold && !holding {
                self.shared.stats.holds.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("halite_kafka_holds_total").increment(1);
                // The writers' clock starts now, not at their last batch
                // (after an idle spell, long ago).
                last_handoff = Instant::now();
            }
            holding = hold;
            // Writers with nothing to take (everything still filling up,
            // waiting on batch_wait) are not stuck.
            if ready.is_empty() {
                last_handoff = Instant::now();
            }
            let polled = if hold {
                std::thread::sleep(HOLD_STEP);
                None
            } else {
                self.consumer.poll(timeout)
            };
            // The clock is read now and then, not per message.
            polls += 1;
            let check_time = polled.is_none() || polls % 64 == 0;
            match polled {
                Some(Ok(m)) => {
                    self.shared.stats.messages.fetch_add(1, Ordering::Relaxed);
                    // A load per message, a store only after an outage:
                    // no write to a line the writers read on the hot path.
                    if self.shared.brokers_down.load(Ordering::Relaxed) {
                        self.shared.brokers_down.store(false, Ordering::Relaxed);
                        tracing::info!("kafka brokers reachable again");
                    }
                    let at = pending
                        .iter()
                        .position(|b| b.partition == m.partition() && b.topic.topic == m.topic());
                    let at = match at {
                        Some(at) => Some(at),
                        None => self.routes.get(m.topic()).map(|route| {
                            let incarnation = self.shared.cluster.as_ref().map_or(0, |c| {
                                c.incarnation(&(m.topic().to_string(), m.partition()))
                            });
                            pending.push(Batch {
                                topic: route.clone(),
                                partition: m.partition(),
                                generation: self.shared.generation.load(Ordering::SeqCst),
                                incarnation,
                                seq: 0,
                                started: Instant::now(),
                                // A batch ends at batch_bytes or a little
                                // past: room for that at once (up to 8 MiB),
                                // rather than a copy of the whole batch at
                                // each doubling.
                                payloads: Vec::with_capacity(
                                    self.batch_bytes.min(8 << 20) + (64 << 10),
                                ),
                                messages: Vec::with_capacity(self.batch_messages),
                            });
                            pending.len() - 1
                        }),
                    };
                    if let Some(at) = at {
                        let payload = m.payload().unwrap_or_default();
                        buffered += payload.len();
                        if let Some(routes) = &self.shared.cluster
                            && routes.replays.load(Ordering::Relaxed) > 0
                        {
                            let key = (m.topic().to_string(), m.partition());
                            routes.replayed(&key, m.offset(), payload.len(), || {
                                shared::cached_high_watermark(
                                    &self.consumer,
                                    m.topic(),
                                    m.partition(),
                                )
                            });
                        }
                        pending[at].push(m.offset(), payload);
                        if pending[at].messages.len() >= self.batch_messages
                            || pending[at].bytes() >= self.batch_bytes
                        {
                            ready.push_back(pending.swap_remove(at));
                        }
                    }
                }
                // Once per outage, and quietly when stopping (the broker
                // may be stopping too).
                Some(Err(KafkaErr::MessageConsumption(RDKafkaErrorCode::AllBrokersDown)))
                    if !self.shared.brokers_down.swap(true, Ordering::Relaxed) =>
                {
                    if self.stop.load(Ordering::SeqCst) {
                        tracing::info!("kafka brokers are down while stopping");
                    } else {
                        tracing::warn!("every kafka broker is down; retrying");
                    }
                }
                Some(Err(KafkaErr::MessageConsumption(RDKafkaErrorCode::AllBrokersDown))) => {}
                Some(Err(e)) => tracing::warn!(error = %e, "kafka consumer error"),
                None => {}
            }
            // Batches built before a revoke belong to partitions we may no
            // longer own: their next owner reads them again.
            let generation = self.shared.generation.load(Ordering::SeqCst);
            if generation != seen_generation {
                seen_generation = generation;
                pending.retain(|b| b.generation == generation);
                ready.retain(|b| b.generation == generation);
                buffered = pending.iter().chain(&ready).map(Batch::bytes).sum();
            }
            if check_time {
                let mut i = 0;
                while i < pending.len() {
                    if pending[i].started.elapsed() >= self.batch_wait {
                        ready.push_back(pending.swap_remove(i));
                    } else {
                        i += 1;
                    }
                }
            }
            // Writers stuck (nothing taken for a while): pause, so polls
            // go on serving the group's events (a rebalance waits for
            // them) without taking messages; the gap between the two
            // marks keeps it from flapping.
            if holding && last_handoff.elapsed() >= PAUSE_AFTER_STUCK {
                paused = self.set_paused(true);
                if !paused {
                    // Tried again in a second, not at every turn.
                    last_handoff = Instant::now();
                }
            } else if paused && buffered <= self.max_buffered / 2 {
                paused = !self.set_paused(false);
            }
            if check_time {
                let assigned = self
                    .shared
                    .stats
                    .assigned_partitions
                    .load(Ordering::Relaxed);
                metrics::gauge!("halite_kafka_paused_partitions").set(if paused {
                    assigned as f64
                } else {
                    0.0
                });
                metrics::gauge!("halite_kafka_buffered_bytes").set(buffered as f64);
            }
            if check_time && self.shared.cluster.is_some() {
                self.stop_fenced_partitions();
                if last_retake.elapsed() >= RETAKE_EVERY {
                    last_retake = Instant::now();
                    self.retake_partitions(&mut pending, &mut ready);
                    buffered = pending.iter().chain(&ready).map(Batch::bytes).sum();
                }
            }
            if check_time && last_commit.elapsed() >= self.commit_interval {
                self.shared
                    .commit_within(&self.consumer, COMMIT_WAIT, &self.commit_busy);
                last_commit = Instant::now();
            }
        }
        // Shutdown: what was fetched is written, then committed.
        let tx = self.tx.take();
        if let Some(tx) = &tx {
            let mut remaining: Vec<Batch> = ready.into_iter().chain(pending).collect();
            for b in &mut remaining {
                b.seq = self.take_seq(b);
            }
            for b in remaining {
                self.track(&b);
                let _ = tx.send(b);
            }
        }
        drop(tx);
        for w in std::mem::take(&mut self.writer_threads) {
            let _ = w.join();
        }
        // SKIP_WAL points are durable once flushed; closing the store would
        // flush them anyway, so do it now and commit them.
        if self.shared.store.flushes_on_close() {
            let mut tables: Vec<TableName> = Vec::new();
            for (_, _, w) in self.shared.tracker.lock().waiting() {
                if let Waiting::Flush { table, .. } = w
                    && !tables.contains(&table)
                {
                    tables.push(table);
                }
            }
            for t in tables {
                if let Err(e) = self.shared.store.flush_table(&t) {
                    tracing::error!(table = %t, error = %e, "flushing at shutdown failed");
                }
            }
        }
        // Everything fetched is written: a revoke from now on (the session
        // lost meanwhile, the close) has nothing to wait for or commit.
        self.shared.closing.store(true, Ordering::SeqCst);
        // The last commit waits for the group coordinator a few seconds at
        // most: with the brokers down or hung it would not answer, and
        // nothing is lost without it (a restart resumes at the store's
        // durable positions).
        if self.shared.brokers_down.load(Ordering::Relaxed) {
            tracing::info!(
                "kafka brokers are down: the last commit is left to the store's positions"
            );
        } else {
            self.shared
                .commit_within(&self.consumer, COMMIT_WAIT, &self.commit_busy);
        }
        self.consumer.unsubscribe();
        let ConsumerLoop { consumer, .. } = self;
        consumer
    }

    fn track(&self, b: &Batch) {
        if let (Some(first), Some(last)) = (b.first_offset(), b.last_offset()) {
            self.shared
                .tracker
                .lock()
                .sent(&(b.topic.topic.clone(), b.partition), first, last);
        }
    }

    /// The next sequence number of a batch's partition.
    fn take_seq(&mut self, b: &Batch) -> u64 {
        let next = self
            .next_seq
            .entry((b.topic.topic.clone(), b.partition))
            .or_insert(0);
        *next += 1;
        *next - 1
    }

    /// Hands a batch to the writers; gives it back when they are all busy.
    fn try_send(&mut self, mut b: Batch) -> Option<Batch> {
        self.tx.as_ref()?;
        b.seq = self.take_seq(&b);
        self.track(&b);
        let outcome = self.tx.as_ref()?.try_send(b);
        match outcome {
            Ok(()) => None,
            Err(TrySendError::Full(b)) | Err(TrySendError::Disconnected(b)) => {
                // Not sent after all: forget it (and its number) until it is.
                let key = (b.topic.topic.clone(), b.partition);
                if let Some(next) = self.next_seq.get_mut(&key) {
                    *next -= 1;
                }
                if let Some(first) = b.first_offset() {
                    let mut t = self.shared.tracker.lock();
                    if let Some(po) = t.partitions.get_mut(&key) {
                        po.in_flight.remove(&first);
                    }
                }
                Some(b)
            }
        }
    }

    /// Cluster mode: partitions whose regions another node took while this
    /// one still held them (a pause past the group's session, say) are
    /// released and paused here; the group's next rebalance revokes them.
    fn stop_fenced_partitions(&self) {
        let fenced = self.shared.store.release_fenced();
        if fenced.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for (topic, partition) in &fenced {
            tpl.add_partition(topic, *partition as i32);
        }
        if let Err(e) = self.consumer.pause(&tpl) {
            tracing::warn!(error = %e, "pausing fenced partitions failed");
        }
    }

    /// Cluster mode: takes the partitions marked for it again, each once
    /// none of its batches is being written: its fetched batches are
    /// dropped, its regions released and taken from their manifests, and
    /// it is read again from their position. One that cannot be taken
    /// yet stays paused and marked.
    fn retake_partitions(&mut self, pending: &mut Vec<Batch>, ready: &mut VecDeque<Batch>) {
        let Some(routes) = &self.shared.cluster else {
            return;
        };
        let marked: Vec<PartitionKey> = routes.retake.lock().iter().cloned().collect();
        for key in marked {
            let (topic, partition) = (&key.0, key.1);
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(topic, partition);
            if !self.shared.assigned.lock().contains(&key) {
                routes.retake.lock().remove(&key);
                continue;
            }
            if let Err(e) = self.consumer.pause(&tpl) {
                tracing::warn!(%topic, partition, error = %e, "pausing a partition to take it again failed");
            }
            if self.shared.tracker.lock().in_flight(&key) > 0 {
                continue; // next time
            }
            routes.next_incarnation(&key);
            pending.retain(|b| b.topic.topic != *topic || b.partition != partition);
            ready.retain(|b| b.topic.topic != *topic || b.partition != partition);
            self.shared.store.release_shard(topic, partition as u32);
            let partitions = routes.partitions.lock().get(topic).copied().unwrap_or(1);
            let feeds = routes
                .tables
                .get(topic)
                .cloned()
                .unwrap_or(ShardFeeds::Tables(Vec::new()));
            match self
                .shared
                .store
                .take_shard(topic, partition as u32, partitions, &feeds)
            {
                Ok(start) => {
                    routes.next_incarnation(&key);
                    routes.replay_from(&key, start.from.unwrap_or(0) as i64, None);
                    self.shared.tracker.lock().partitions.remove(&key);
                    let offset = start
                        .from
                        .map_or(Offset::Beginning, |o| Offset::Offset(o as i64));
                    if let Err(e) =
                        self.consumer
                            .seek(topic, partition, offset, Duration::from_secs(10))
                    {
                        tracing::warn!(%topic, partition, error = %e, "seeking a partition taken again failed; trying again");
                        continue;
                    }
                    if let Err(e) = self.consumer.resume(&tpl) {
                        tracing::warn!(%topic, partition, error = %e, "resuming a partition taken again failed; trying again");
                        continue;
                    }
                    routes.retake.lock().remove(&key);
                    tracing::info!(%topic, partition, epoch = start.epoch, from = ?start.from, "took the partition again; reading it from its manifests' position");
                }
                Err(e) => {
                    tracing::warn!(%topic, partition, error = %e, "taking the partition failed; it stays paused and is tried again");
                }
            }
        }
    }

    /// Pauses or resumes every assigned partition; true when it did.
    fn set_paused(&self, paused: bool) -> bool {
        let mut assignment = TopicPartitionList::new();
        for (topic, partition) in self.shared.assigned.lock().iter() {
            assignment.add_partition(topic, *partition);
        }
        let result = if paused {
            self.consumer.pause(&assignment)
        } else {
            self.consumer.resume(&assignment)
        };
        match result {
            Ok(()) => {
                if paused {
                    self.shared.stats.pauses.fetch_add(1, Ordering::Relaxed);
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, paused, "kafka pause/resume failed");
                false
            }
        }
    }
}
