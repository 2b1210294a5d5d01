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
//! as a bad message. Batches finish out of order; [`OffsetTracker`] keeps
//! the lowest unfinished one as the limit. A crash or a rebalance replays
//! at most what was not committed, and a replayed point rewrites the same
//! cell. Each write carries its Kafka position into the WAL record
//! ([`SourcePosition`]: topic = stream, partition = shard, offset = position).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use parking_lot::{Condvar, Mutex};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError as KafkaErr, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde::Deserialize;

use super::line_protocol::Precision;
use super::{Format, PointEncoder, Uniquifiers};
use crate::catalog::TableName;
use crate::clock::Clock;
use crate::query::engine::QueryEngine;
use crate::region::wal::record::SourcePosition;
use crate::schema::Durability;
use crate::store::{PendingBatch, Store};
use crate::units::{ByteSize, Dur};

/// One consumed topic.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicConfig {
    pub topic: String,
    /// `namespace:table` the points go to.
    pub table: String,
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
    /// 64MiB). Past it the consumer pauses its partitions until half of it
    /// is written; librdkafka's own prefetch (`queued.max.messages.kbytes`)
    /// comes on top.
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
}

/// Errors starting the consumer; each says which setting to fix.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error("kafka client setup failed: {0}; check [kafka] brokers and client settings")]
    Client(#[from] rdkafka::error::KafkaError),
    #[error("kafka topic `{topic}`: {reason}")]
    Topic { topic: String, reason: String },
}

/// Counters of the pipeline since start.
#[derive(Debug, Default)]
pub struct IngestStats {
    pub messages: AtomicU64,
    pub points: AtomicU64,
    pub bad_messages: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub batches_failed: AtomicU64,
    pub commits: AtomicU64,
    pub pauses: AtomicU64,
    /// Delete messages carried out.
    pub deletes: AtomicU64,
    /// Last committed offset (the next to consume) per topic and partition:
    /// the group's, read at start and at each assignment, then ours.
    pub committed: Mutex<BTreeMap<PartitionKey, i64>>,
    /// Per topic and partition, the offset below which every message is
    /// durable in the store: recovered at start, then as batches finish.
    pub durable: Mutex<BTreeMap<PartitionKey, i64>>,
    /// Every partition of the topics seen (listed even before any offset).
    pub known: Mutex<BTreeSet<PartitionKey>>,
    /// Partitions started at the store's durable position, ahead of the
    /// group's committed offset, and where.
    pub resumed: Mutex<BTreeMap<PartitionKey, i64>>,
    /// The consumer has joined its group (had a first assignment, maybe
    /// empty when the group has more members than partitions).
    pub joined: AtomicBool,
    pub assigned_partitions: AtomicU64,
}

impl IngestStats {
    /// The group's committed offsets as librdkafka answered them (ours, if
    /// newer, stay); every partition listed is known, committed or not.
    fn record_committed(&self, tpl: &TopicPartitionList) {
        let mut committed = self.committed.lock();
        let mut known = self.known.lock();
        for e in tpl.elements() {
            let p = (e.topic().to_string(), e.partition());
            if let Offset::Offset(o) = e.offset() {
                let at = committed.entry(p.clone()).or_insert(o);
                *at = (*at).max(o);
            }
            known.insert(p);
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let committed: Vec<serde_json::Value> = self
            .committed
            .lock()
            .iter()
            .map(|((t, p), o)| serde_json::json!({"topic": t, "partition": p, "offset": o}))
            .collect();
        let resumed: Vec<serde_json::Value> = self
            .resumed
            .lock()
            .iter()
            .map(|((t, p), o)| serde_json::json!({"topic": t, "partition": p, "offset": o}))
            .collect();
        let partitions: Vec<serde_json::Value> = {
            let committed = self.committed.lock();
            let durable = self.durable.lock();
            let known = self.known.lock();
            let keys: BTreeSet<&PartitionKey> = committed
                .keys()
                .chain(durable.keys())
                .chain(known.iter())
                .collect();
            keys.into_iter()
                .map(|k| {
                    serde_json::json!({
                        "topic": k.0,
                        "partition": k.1,
                        "committed": committed.get(k),
                        "durable": durable.get(k),
                    })
                })
                .collect()
        };
        serde_json::json!({
            "messages": n(&self.messages),
            "points": n(&self.points),
            "bad_messages": n(&self.bad_messages),
            "dead_lettered": n(&self.dead_lettered),
            "batches_failed": n(&self.batches_failed),
            "commits": n(&self.commits),
            "pauses": n(&self.pauses),
            "deletes": n(&self.deletes),
            "committed": committed,
            "partitions": partitions,
            "resumed": resumed,
            "joined": self.joined.load(Ordering::Acquire),
            "assigned_partitions": n(&self.assigned_partitions),
        })
    }
}

pub type PartitionKey = (String, i32);

/// Per partition: the batches sent and not yet finished, by first offset.
/// The committable offset is one past the last message of the longest run
/// of finished batches from the front.
#[derive(Default)]
struct OffsetTracker {
    partitions: HashMap<PartitionKey, PartitionOffsets>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum BatchState {
    Sent,
    /// Written to a table whose writes are acknowledged before they are
    /// durable; done once this happens.
    Written(Waiting),
    Done,
    /// Could not be written: the partition's commits stop before it until a
    /// restart replays it.
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Waiting {
    /// ASYNC_WAL: a sync of the WAL.
    WalSync,
    /// SKIP_WAL: flushes of the table's regions past these sequence ids
    /// (region id -> highest sequence id when the batch was written).
    Flush {
        table: TableName,
        seqs: HashMap<u64, u64>,
    },
}

#[derive(Default)]
struct PartitionOffsets {
    /// first offset -> (last offset, state)
    in_flight: BTreeMap<i64, (i64, BatchState)>,
    /// Next offset to consume once everything before it is durable.
    committable: Option<i64>,
    committed: Option<i64>,
    /// Highest committable offset recorded in the store on its own.
    noted_in_store: Option<i64>,
}

impl OffsetTracker {
    fn sent(&mut self, p: &PartitionKey, first: i64, last: i64) {
        let po = self.partitions.entry(p.clone()).or_default();
        // The first batch of an assignment starts where consumption
        // started: at the committed offset or the durable position
        // recovered from the store, so everything below it is durable.
        po.committable.get_or_insert(first);
        po.in_flight.insert(first, (last, BatchState::Sent));
    }

    /// The offset below which every message of the partition is durable
    /// (or handled), as known now.
    fn durable_below(&self, p: &PartitionKey) -> Option<i64> {
        self.partitions.get(p).and_then(|po| po.committable)
    }

    /// A batch is durable (or handled, `Done`) or given up (`Failed`); moves
    /// the committable offset past every done batch at the front.
    ///
    /// A batch is named by its first and last offsets: after a partition
    /// was revoked and assigned again, a late word about a batch of the
    /// earlier assignment may meet one of the new that starts at the same
    /// offset. It applies only if it ends at the same offset too — then it
    /// holds the very same messages, so their being durable is true of it.
    fn finished(&mut self, p: &PartitionKey, first: i64, last: i64, state: BatchState) {
        let Some(po) = self.partitions.get_mut(p) else {
            return; // revoked meanwhile: the next owner replays it
        };
        if let Some(b) = po.in_flight.get_mut(&first)
            && b.0 == last
        {
            b.1 = state;
        }
        while let Some((&f, &(last, BatchState::Done))) = po.in_flight.first_key_value() {
            po.in_flight.remove(&f);
            po.committable = Some(last + 1);
        }
    }

    /// The partition starts at `at`, a position the store recovered:
    /// everything before it is durable, and the store knows it.
    fn resumed_at(&mut self, p: &PartitionKey, at: i64) {
        let po = self.partitions.entry(p.clone()).or_default();
        po.committable = po.committable.max(Some(at));
        po.noted_in_store = po.noted_in_store.max(Some(at));
    }

    /// The committable offset of a partition with no batch in flight, when
    /// the store has not been told of it yet.
    fn drained_position(&self, p: &PartitionKey) -> Option<i64> {
        let po = self.partitions.get(p)?;
        let at = po.committable?;
        (po.in_flight.is_empty() && po.noted_in_store < Some(at)).then_some(at)
    }

    fn position_noted(&mut self, p: &PartitionKey, at: i64) {
        if let Some(po) = self.partitions.get_mut(p) {
            po.noted_in_store = po.noted_in_store.max(Some(at));
        }
    }

    /// Batches written and waiting to become durable.
    fn waiting(&self) -> Vec<(PartitionKey, (i64, i64), Waiting)> {
        self.partitions
            .iter()
            .flat_map(|(p, po)| {
                po.in_flight
                    .iter()
                    .filter_map(|(&first, (last, state))| match state {
                        BatchState::Written(w) => Some((p.clone(), (first, *last), w.clone())),
                        _ => None,
                    })
            })
            .collect()
    }

    /// Whether a batch of the partition that starts before `first` is
    /// still being written (its points may not be readable yet).
    fn sent_before(&self, p: &PartitionKey, first: i64) -> bool {
        self.partitions.get(p).is_some_and(|po| {
            po.in_flight
                .range(..first)
                .any(|(_, b)| b.1 == BatchState::Sent)
        })
    }

    /// Batches of the partition still being written.
    fn in_flight(&self, p: &PartitionKey) -> usize {
        self.partitions.get(p).map_or(0, |po| {
            po.in_flight
                .values()
                .filter(|b| b.1 == BatchState::Sent)
                .count()
        })
    }

    /// Offsets that moved since the last commit.
    fn to_commit(&self) -> Vec<(PartitionKey, i64)> {
        self.partitions
            .iter()
            .filter_map(|(p, po)| match po.committable {
                Some(c) if po.committed != Some(c) => Some((p.clone(), c)),
                _ => None,
            })
            .collect()
    }

    fn committed(&mut self, done: &[(PartitionKey, i64)]) {
        for (p, o) in done {
            if let Some(po) = self.partitions.get_mut(p) {
                po.committed = Some(*o);
            }
        }
    }
}

/// State shared by the consumer thread, the rebalance callbacks and the
/// writers.
struct Shared {
    tracker: Mutex<OffsetTracker>,
    /// Signalled whenever a batch finishes.
    batch_done: Condvar,
    /// Bumped on every revoke: batches built before it are dropped.
    generation: AtomicU64,
    stats: Arc<IngestStats>,
    store: Arc<Store>,
    /// Runs the deletes that messages ask for.
    queries: Arc<QueryEngine>,
    /// The partitions this member holds, kept from the rebalance callbacks'
    /// own lists: asking librdkafka (`assignment()`) from a callback run
    /// while the consumer closes can wait forever (see `rebalance`).
    assigned: Mutex<BTreeSet<PartitionKey>>,
    /// The consumer is closing after its last commit: a revoke then has
    /// nothing left to wait for or commit.
    closing: AtomicBool,
    /// librdkafka reported every broker down, and no message came since.
    brokers_down: AtomicBool,
    /// Per partition, which batch hands its rows to the store next, and
    /// the decoded batches waiting for their turn (see [`writer_loop`]).
    sequence: Mutex<HashMap<PartitionKey, PartitionSequence>>,
}

/// A partition's batches in the order they were consumed: the writers
/// decode in parallel, but hand rows to the store in this order, so the
/// WAL logs a partition in offset order (of two points with one key the
/// later wins; a delete message sees every point before it and none
/// after).
#[derive(Default)]
struct PartitionSequence {
    /// The sequence number of the batch whose turn it is.
    next: u64,
    /// Batches decoded ahead of their turn, by sequence number.
    parked: BTreeMap<u64, (Batch, Option<Decoded>)>,
}

impl Shared {
    /// Marks done the written batches that became durable: one WAL sync
    /// covers every ASYNC_WAL batch written before it; a SKIP_WAL batch
    /// waits for its regions' flushes.
    fn settle(&self) {
        let waiting = self.tracker.lock().waiting();
        if waiting.is_empty() {
            return;
        }
        let mut durable = Vec::new();
        if waiting.iter().any(|w| w.2 == Waiting::WalSync) {
            match self.store.sync_wals() {
                Ok(()) => durable.extend(
                    waiting
                        .iter()
                        .filter(|w| w.2 == Waiting::WalSync)
                        .map(|w| (w.0.clone(), w.1)),
                ),
                Err(e) => {
                    tracing::error!(error = %e, "syncing the WAL for ASYNC_WAL batches failed")
                }
            }
        }
        let mut flushed: HashMap<TableName, HashMap<u64, u64>> = HashMap::new();
        for (p, first, w) in &waiting {
            let Waiting::Flush { table, seqs } = w else {
                continue;
            };
            if !flushed.contains_key(table) {
                match self.store.region_seqs(table, true) {
                    Ok(f) => {
                        flushed.insert(table.clone(), f);
                    }
                    Err(e) => {
                        tracing::error!(%table, error = %e, "reading flushed sequence ids failed");
                        continue;
                    }
                }
            }
            let f = &flushed[table];
            // A region gone since (split, so flushed first) holds nothing.
            if seqs
                .iter()
                .all(|(region, seq)| f.get(region).is_none_or(|done| done >= seq))
            {
                durable.push((p.clone(), *first));
            }
        }
        let mut tracker = self.tracker.lock();
        for (p, (first, last)) in durable {
            tracker.finished(&p, first, last, BatchState::Done);
        }
    }

    /// Commits what is durable, synchronously; `only` limits it to some
    /// partitions.
    fn commit(&self, consumer: &BaseConsumer<IngestContext>, only: Option<&[PartitionKey]>) {
        let started = Instant::now();
        self.settle();
        let offsets: Vec<(PartitionKey, i64)> = self
            .tracker
            .lock()
            .to_commit()
            .into_iter()
            .filter(|(p, _)| only.is_none_or(|o| o.contains(p)))
            .collect();
        if offsets.is_empty() {
            return;
        }
        // Durable whether or not the commit gets through.
        self.stats.durable.lock().extend(offsets.iter().cloned());
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), offset) in &offsets {
            if let Err(e) = tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset)) {
                tracing::error!(%topic, partition, offset, error = %e, "cannot list an offset to commit");
            }
        }
        match consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                self.tracker.lock().committed(&offsets);
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
                self.stats.committed.lock().extend(offsets.iter().cloned());
                metrics::histogram!("halite_kafka_commit_duration_seconds")
                    .record(started.elapsed().as_secs_f64());
                for ((topic, partition), offset) in &offsets {
                    let labels = [
                        ("topic", topic.clone()),
                        ("partition", partition.to_string()),
                    ];
                    metrics::gauge!("halite_kafka_committed_offset", &labels).set(*offset as f64);
                    // The high watermark librdkafka saw in its last fetch
                    // response (no broker round trip).
                    if let Some(high) = cached_high_watermark(consumer, topic, *partition) {
                        metrics::gauge!("halite_kafka_consumer_lag", &labels)
                            .set((high - offset).max(0) as f64);
                    }
                }
            }
            // Not fatal: the next commit carries the same (or later) offsets.
            Err(e) => tracing::warn!(error = %e, "offset commit failed (will retry)"),
        }
    }
}

/// The high watermark librdkafka cached from the partition's last fetch
/// response. (Asking the broker is a ListOffsets request, which Tansu
/// answers wrongly, and a round trip per partition.)
fn cached_high_watermark(
    consumer: &BaseConsumer<IngestContext>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client handle is valid for as long as `consumer` lives;
    // the topic is a NUL-terminated string and the out-parameters are
    // locals, none kept by librdkafka after the call.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}

struct IngestContext {
    shared: Arc<Shared>,
    /// Durable positions recovered from the store at start.
    recovered: HashMap<PartitionKey, i64>,
    /// Whether the group rebalances cooperatively, read at the first
    /// callback (an assignment, while the group is up) and kept.
    cooperative: std::sync::OnceLock<bool>,
}

impl ClientContext for IngestContext {}

impl ConsumerContext for IngestContext {
    /// librdkafka's rebalance, with two additions: before partitions go, the
    /// batches in flight are waited for and committed; when partitions
    /// come, each starts at the durable position recovered from the store
    /// where that is ahead of the group's committed offset.
    ///
    /// No request to the consumer group follows the (un)assign: when the
    /// consumer closes with its brokers gone, the group terminates as soon
    /// as the last unassign is handled, and a request queued in that
    /// moment (`assignment()`, `rebalance_protocol()`) is dropped without
    /// an answer, so its caller — this callback, inside the consumer's
    /// drop — waited forever. What is held comes from the callbacks' own
    /// partition lists instead.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = *self.cooperative.get_or_init(|| {
            matches!(
                consumer.rebalance_protocol(),
                RebalanceProtocol::Cooperative
            )
        });
        let partitions: Vec<String> = tpl
            .elements()
            .iter()
            .map(|e| format!("{}/{}", e.topic(), e.partition()))
            .collect();
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                tracing::info!(partitions = %partitions.join(" "), "kafka partitions assigned");
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                tracing::info!(partitions = %partitions.join(" "), "kafka partitions revoked");
            }
            _ => {}
        }
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.resume_from_store(consumer, tpl);
                if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.revoke(consumer, tpl);
                if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
            other => {
                tracing::error!(error = ?other, "kafka rebalance failed; dropping the assignment");
                self.revoke(consumer, tpl);
                consumer.unassign()
            }
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "applying the kafka rebalance failed");
        }
        let listed: Vec<PartitionKey> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        let assigned = {
            let mut held = self.shared.assigned.lock();
            match err {
                RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                    if !cooperative {
                        held.clear();
                    }
                    held.extend(listed);
                }
                RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS if cooperative => {
                    for p in listed {
                        held.remove(&p);
                    }
                }
                _ => held.clear(),
            }
            held.len()
        };
        let stats = &self.shared.stats;
        stats
            .assigned_partitions
            .store(assigned as u64, Ordering::Relaxed);
        if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS {
            stats.joined.store(true, Ordering::Release);
        }
        metrics::gauge!("halite_kafka_assigned_partitions").set(assigned as f64);
    }
}

impl IngestContext {
    /// Waits for the revoked partitions' batches in flight to become
    /// durable and commits them, so the next owner starts where we stopped
    /// instead of replaying.
    fn revoke(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        let revoked: Vec<PartitionKey> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        if self.shared.closing.load(Ordering::SeqCst) {
            // The consumer drained and committed before it closed.
            let mut tracker = self.shared.tracker.lock();
            for p in &revoked {
                tracker.partitions.remove(p);
            }
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut tracker = self.shared.tracker.lock();
        while revoked.iter().any(|p| tracker.in_flight(p) > 0) && Instant::now() < deadline {
            self.shared
                .batch_done
                .wait_for(&mut tracker, Duration::from_millis(50));
        }
        drop(tracker);
        self.shared.commit(consumer, Some(&revoked));
        let mut tracker = self.shared.tracker.lock();
        for p in &revoked {
            tracker.partitions.remove(p);
        }
    }

    /// Starts assigned partitions at the store's durable position where it
    /// is ahead of the committed offset (the process died between a durable
    /// write and the commit that would have covered it).
    fn resume_from_store(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let ours: Vec<(PartitionKey, i64)> = tpl
            .elements()
            .iter()
            .filter_map(|e| {
                let p = (e.topic().to_string(), e.partition());
                self.recovered.get(&p).map(|&o| (p, o))
            })
            .collect();
        let committed = match consumer.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
            Ok(c) => c,
            Err(e) => {
                // Starting from the committed offsets replays more; no loss.
                tracing::warn!(error = %e, "reading committed offsets failed; not resuming from the store");
                return;
            }
        };
        self.shared.stats.record_committed(&committed);
        if ours.is_empty() {
            return;
        }
        for ((topic, partition), durable) in ours {
            let at = match committed
                .find_partition(&topic, partition)
                .map(|e| e.offset())
            {
                Some(Offset::Offset(c)) => c,
                _ => -1,
            };
            if durable > at.max(0) {
                if let Err(e) = tpl.set_partition_offset(&topic, partition, Offset::Offset(durable))
                {
                    tracing::error!(%topic, partition, offset = durable, error = %e, "cannot start a partition at the store's position");
                    continue;
                }
                tracing::info!(
                    %topic,
                    partition,
                    offset = durable,
                    committed = at,
                    "partition resumes from the store's durable position"
                );
                // Committed at the next commit even if no message comes,
                // so the group (and its lag) learns what the store holds.
                self.shared
                    .tracker
                    .lock()
                    .resumed_at(&(topic.clone(), partition), durable);
                self.shared
                    .stats
                    .resumed
                    .lock()
                    .insert((topic, partition), durable);
            }
        }
    }
}

/// Messages of one partition, written together.
struct Batch {
    topic: Arc<TopicRoute>,
    partition: i32,
    generation: u64,
    /// Its place among the partition's batches handed to the writers.
    seq: u64,
    started: Instant,
    /// Every payload, back to back: one buffer per batch rather than one
    /// allocation per message.
    payloads: Vec<u8>,
    /// Offset and end (in `payloads`) of each message.
    messages: Vec<(i64, usize)>,
}

impl Batch {
    fn push(&mut self, offset: i64, payload: &[u8]) {
        self.payloads.extend_from_slice(payload);
        self.messages.push((offset, self.payloads.len()));
    }

    fn bytes(&self) -> usize {
        self.payloads.len()
    }

    fn first_offset(&self) -> Option<i64> {
        self.messages.first().map(|m| m.0)
    }

    fn last_offset(&self) -> Option<i64> {
        self.messages.last().map(|m| m.0)
    }

    /// Each message's offset and payload.
    fn iter(&self) -> impl Iterator<Item = (i64, &[u8])> {
        let starts = std::iter::once(0).chain(self.messages.iter().map(|m| m.1));
        self.messages
            .iter()
            .zip(starts)
            .map(|(&(offset, end), start)| (offset, &self.payloads[start..end]))
    }
}

struct TopicRoute {
    topic: String,
    table: TableName,
    format: Format,
    precision: Option<Precision>,
}

/// The running pipeline; [`KafkaIngest::stop`] drains it.
pub struct KafkaIngest {
    stop: Arc<AtomicBool>,
    consumer: Option<JoinHandle<()>>,
    pub stats: Arc<IngestStats>,
}

impl KafkaIngest {
    /// Joins the group and starts consuming. Tables must exist.
    pub fn start(
        config: &KafkaConfig,
        store: Arc<Store>,
        queries: Arc<QueryEngine>,
        clock: Arc<dyn Clock>,
    ) -> Result<KafkaIngest, KafkaError> {
        let mut routes = HashMap::new();
        for t in &config.topics {
            let bad = |reason: String| KafkaError::Topic {
                topic: t.topic.clone(),
                reason,
            };
            let table = TableName::parse(&t.table).map_err(|e| bad(e.to_string()))?;
            store.catalog().table(&table).map_err(|e| {
                bad(format!(
                    "{e}; create the table (or list it under [[tables]]) first"
                ))
            })?;
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
                    format: t.format,
                    precision,
                }),
            );
        }
        let stats = Arc::new(IngestStats::default());
        let shared = Arc::new(Shared {
            tracker: Mutex::new(OffsetTracker::default()),
            batch_done: Condvar::new(),
            generation: AtomicU64::new(0),
            stats: stats.clone(),
            store: store.clone(),
            queries,
            assigned: Mutex::new(BTreeSet::new()),
            closing: AtomicBool::new(false),
            brokers_down: AtomicBool::new(false),
            sequence: Mutex::new(HashMap::new()),
        });
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", &config.brokers)
            .set("group.id", &config.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest");
        for (k, v) in &config.client {
            client.set(k, v);
        }
        let mut recovered = HashMap::new();
        for route in routes.values() {
            let positions =
                store
                    .source_positions(&route.table)
                    .map_err(|e| KafkaError::Topic {
                        topic: route.topic.clone(),
                        reason: e.to_string(),
                    })?;
            for ((topic, partition), offset) in positions {
                if topic != route.topic {
                    continue;
                }
                let key = (topic, partition as i32);
                stats.durable.lock().insert(key.clone(), offset as i64);
                if config.resume_from_store {
                    recovered.insert(key, offset as i64);
                }
            }
        }
        let consumer: BaseConsumer<IngestContext> = client.create_with_context(IngestContext {
            shared: shared.clone(),
            recovered,
            cooperative: std::sync::OnceLock::new(),
        })?;
        let topics: Vec<&str> = config.topics.iter().map(|t| t.topic.as_str()).collect();
        consumer.subscribe(&topics)?;
        let dead_letters = match &config.dead_letter_topic {
            Some(topic) => {
                let mut pc = ClientConfig::new();
                pc.set("bootstrap.servers", &config.brokers)
                    .set("linger.ms", "5");
                for (k, v) in &config.client {
                    // Consumer-only settings would make the producer refuse to start.
                    if !k.starts_with("session.")
                        && !k.starts_with("heartbeat.")
                        && !k.starts_with("fetch.")
                        && !k.starts_with("auto.")
                        && !k.starts_with("group.")
                        && !k.starts_with("enable.auto")
                    {
                        pc.set(k, v);
                    }
                }
                Some(DeadLetters {
                    topic: topic.clone(),
                    producer: pc.create()?,
                })
            }
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
        let consumer_loop = ConsumerLoop {
            consumer,
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
            .spawn(move || consumer_loop.run())
            .map_err(|e| KafkaError::Topic {
                topic: String::new(),
                reason: format!("cannot start the consumer thread: {e}"),
            })?;
        Ok(KafkaIngest {
            stop,
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
                std::thread::sleep(Duration::from_millis(20));
            }
            if h.is_finished() {
                let _ = h.join();
            } else {
                tracing::error!(
                    waited_s = STOP_DEADLINE.as_secs(),
                    "the kafka consumer did not stop; leaving it (a restart resumes at the store's durable positions)"
                );
            }
        }
    }
}

/// How long a stop waits for the consumer to drain, commit and close.
const STOP_DEADLINE: Duration = Duration::from_secs(8);

struct ConsumerLoop {
    consumer: BaseConsumer<IngestContext>,
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

    fn run(mut self) {
        self.read_group_offsets();
        // Batches still filling, one per partition (a few dozen at most: a
        // scan beats hashing the topic name of every message)...
        let mut pending: Vec<Batch> = Vec::new();
        // ...and full ones waiting for a writer, oldest first.
        let mut ready: VecDeque<Batch> = VecDeque::new();
        // Payload bytes held in both; over `max_buffered` the partitions
        // pause, and resume under half of it.
        let mut buffered = 0usize;
        let mut paused = false;
        let mut seen_generation = self.shared.generation.load(Ordering::SeqCst);
        let mut polls = 0u64;
        let mut last_commit = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            while let Some(b) = ready.pop_front() {
                let bytes = b.bytes();
                match self.try_send(b) {
                    None => buffered -= bytes,
                    Some(b) => {
                        ready.push_front(b);
                        break;
                    }
                }
            }
            let timeout = if ready.is_empty() {
                Duration::from_millis(10)
            } else {
                Duration::from_millis(1)
            };
            let polled = self.consumer.poll(timeout);
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
                            pending.push(Batch {
                                topic: route.clone(),
                                partition: m.partition(),
                                generation: self.shared.generation.load(Ordering::SeqCst),
                                seq: 0,
                                started: Instant::now(),
                                payloads: Vec::new(),
                                messages: Vec::with_capacity(self.batch_messages),
                            });
                            pending.len() - 1
                        }),
                    };
                    if let Some(at) = at {
                        let payload = m.payload().unwrap_or_default();
                        buffered += payload.len();
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
            // Writers saturated: stop fetching instead of buffering without
            // bound; the gap between the two marks keeps it from flapping.
            if !paused && buffered > self.max_buffered {
                paused = self.set_paused(true);
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
            if check_time && last_commit.elapsed() >= self.commit_interval {
                self.shared.commit(&self.consumer, None);
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
        // A commit waits for the group coordinator: with every broker down
        // it could take a session timeout, and nothing is lost without it
        // (a restart resumes at the store's durable positions).
        if self.shared.brokers_down.load(Ordering::Relaxed) {
            tracing::info!(
                "kafka brokers are down: the last commit is left to the store's positions"
            );
        } else {
            self.shared.commit(&self.consumer, None);
        }
        self.shared.closing.store(true, Ordering::SeqCst);
        self.consumer.unsubscribe();
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

struct DeadLetters {
    topic: String,
    producer: ThreadedProducer<DefaultProducerContext>,
}

impl DeadLetters {
    /// Sends the original payload with the reason and its source position
    /// in headers; waits until the broker has it.
    fn send(
        &self,
        source: &str,
        partition: i32,
        offset: i64,
        payload: &[u8],
        reason: &str,
    ) -> bool {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "halite-error",
                value: Some(reason),
            })
            .insert(Header {
                key: "halite-source-topic",
                value: Some(source),
            })
            .insert(Header {
                key: "halite-source-partition",
                value: Some(&partition.to_string()),
            })
            .insert(Header {
                key: "halite-source-offset",
                value: Some(&offset.to_string()),
            });
        let record: BaseRecord<'_, (), [u8]> = BaseRecord::to(&self.topic)
            .payload(payload)
            .headers(headers.clone());
        match self.producer.send(record) {
            Ok(()) => true,
            // The payload with the headers passes the size limit: the
            // dead letter goes without it, saying where the original is.
            Err((
                rdkafka::error::KafkaError::MessageProduction(
                    rdkafka::types::RDKafkaErrorCode::MessageSizeTooLarge,
                ),
                _,
            )) => {
                let headers = headers.insert(Header {
                    key: "halite-payload-omitted",
                    value: Some(&payload.len().to_string()),
                });
                let record: BaseRecord<'_, (), [u8]> = BaseRecord::to(&self.topic).headers(headers);
                match self.producer.send(record) {
                    Ok(()) => true,
                    Err((e, _)) => {
                        tracing::error!(error = %e, "dead-letter produce failed");
                        false
                    }
                }
            }
            Err((e, _)) => {
                tracing::error!(error = %e, "dead-letter produce failed");
                false
            }
        }
    }

    fn flush(&self) -> bool {
        match self.producer.flush(Duration::from_secs(30)) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "dead-letter flush failed");
                false
            }
        }
    }
}

fn writer_loop(
    rx: Receiver<Batch>,
    done: Sender<Submitted>,
    store: &Store,
    shared: &Shared,
    clock: &dyn Clock,
    dead_letters: &Option<DeadLetters>,
) {
    for batch in rx {
        // Decoded here, in parallel with the other writers...
        let decoded = decode_ahead(&batch, store, clock);
        let key = (batch.topic.topic.clone(), batch.partition);
        let mut seq = batch.seq;
        let mut job = Some((batch, decoded));
        // ...and handed to the store in the partition's order: a batch
        // decoded before its turn is parked, and the writer of the batch
        // before it hands it on too.
        loop {
            {
                let mut sequence = shared.sequence.lock();
                let ps = sequence.entry(key.clone()).or_default();
                if ps.next != seq {
                    if let Some(j) = job.take() {
                        ps.parked.insert(seq, j);
                    }
                    break;
                }
            }
            let Some((batch, decoded)) = job.take() else {
                break;
            };
            let submitted =
                submit_batch(&batch, decoded, store, shared, clock, dead_letters.as_ref());
            drop(batch);
            if let Err(crossbeam_channel::SendError(s)) = done.send(submitted) {
                // The completion thread is gone (it never leaves before the
                // writers): finish here.
                finish_batch(s, store, shared);
            }
            let mut sequence = shared.sequence.lock();
            let ps = sequence.entry(key.clone()).or_default();
            ps.next = seq + 1;
            match ps.parked.remove(&ps.next) {
                Some(next) => {
                    seq = ps.next;
                    job = Some(next);
                }
                None => break,
            }
        }
    }
}

/// Waits for the writers' batches to be durable, in the order submitted,
/// and marks them finished, so the writers go on encoding meanwhile.
fn completion_loop(rx: Receiver<Submitted>, store: &Store, shared: &Shared) {
    for s in rx {
        finish_batch(s, store, shared);
    }
}

/// A batch handed to the store, its durability still to come.
struct Submitted {
    key: PartitionKey,
    first: i64,
    last: i64,
    messages: u64,
    route: Arc<TopicRoute>,
    /// `None` when there was nothing to write, or nothing could be.
    write: Option<(PendingBatch, Durability)>,
    points: u64,
    cells: u64,
    /// Something already failed: the batch is `Failed` whatever comes.
    failed: bool,
}

/// Marks a submitted batch finished once its points are durable (or
/// written, for tables that are durable later).
fn finish_batch(s: Submitted, store: &Store, shared: &Shared) {
    let route = &s.route;
    let mut state = if s.failed {
        BatchState::Failed
    } else {
        BatchState::Done
    };
    if let Some((pending, durability)) = s.write {
        match store.wait(pending) {
            Err(e) => {
                tracing::error!(
                    topic = %route.topic,
                    partition = s.key.1,
                    first_offset = s.first,
                    error = %e,
                    "writing a batch failed; its partition's commits stop before it"
                );
                state = BatchState::Failed;
            }
            Ok(()) => {
                if state == BatchState::Done {
                    state = match durability {
                        Durability::SyncWal => BatchState::Done,
                        Durability::AsyncWal => BatchState::Written(Waiting::WalSync),
                        Durability::SkipWal => match store.region_seqs(&route.table, false) {
                            Ok(seqs) => BatchState::Written(Waiting::Flush {
                                table: route.table.clone(),
                                seqs,
                            }),
                            Err(e) => {
                                tracing::error!(table = %route.table, error = %e, "reading sequence ids failed");
                                BatchState::Failed
                            }
                        },
                    };
                }
            }
        }
    }
    // Points written before a delete message were waited for when it
    // ran: a batch's points count once it did not fail.
    if state != BatchState::Failed && s.points > 0 {
        shared.stats.points.fetch_add(s.points, Ordering::Relaxed);
        let labels = [
            ("topic", route.topic.clone()),
            ("table", route.table.to_string()),
        ];
        metrics::counter!("halite_kafka_points_total", &labels).increment(s.points);
        metrics::counter!("halite_kafka_cells_total", &labels).increment(s.cells);
    }
    metrics::counter!("halite_kafka_messages_total", "topic" => route.topic.clone())
        .increment(s.messages);
    if state == BatchState::Failed {
        shared.stats.batches_failed.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("halite_kafka_batches_failed_total", "topic" => route.topic.clone())
            .increment(1);
    }
    let drained_at = {
        let mut tracker = shared.tracker.lock();
        tracker.finished(&s.key, s.first, s.last, state);
        tracker.drained_position(&s.key)
    };
    shared.batch_done.notify_all();
    if let Some(durable_below) = drained_at {
        note_drained_position(&s.route, &s.key, durable_below, store, shared);
    }
}

/// The partition has nothing in the pipeline and everything before
/// `durable_below` is durable: the store learns it, so a crash before the
/// next Kafka commit resumes exactly there rather than at the position the
/// last batch's records carried (what was durable before that batch).
fn note_drained_position(
    route: &TopicRoute,
    key: &PartitionKey,
    durable_below: i64,
    store: &Store,
    shared: &Shared,
) {
    let origin = SourcePosition {
        stream: route.topic.clone(),
        shard: key.1 as u32,
        durable_below: durable_below as u64,
    };
    let noted = store
        .submit_position(&route.table, origin)
        .and_then(|pending| store.wait(pending));
    match noted {
        Ok(()) => shared.tracker.lock().position_noted(key, durable_below),
        // Only an optimisation is lost: the next batch's records carry it.
        Err(e) => tracing::debug!(topic = %route.topic, error = %e, "noting a position failed"),
    }
}

/// A batch's rows and bad messages, decoded ahead of its turn.
struct Decoded {
    desc: crate::catalog::TableDescriptor,
    entries: crate::table::RoutedRows,
    /// Bad messages by their index in the batch.
    bad: Vec<(usize, BadMessage)>,
}

/// Decodes a batch off the ordered path; `None` when it must be decoded
/// in its turn: it may hold a delete message (which needs the points
/// before it in the store first), or its table cannot take rows (the
/// turn reports it).
fn decode_ahead(batch: &Batch, store: &Store, clock: &dyn Clock) -> Option<Decoded> {
    let route = &batch.topic;
    if route.format == Format::Json
        && batch
            .iter()
            .any(|(_, p)| memchr::memmem::find(p, b"\"delete\"").is_some())
    {
        return None;
    }
    let desc = store.catalog().table(&route.table).ok()?;
    let mut encoder = PointEncoder::new(&desc, store.max_value_size()).ok()?;
    encoder.reserve_for_bytes(batch.bytes());
    let stream = Uniquifiers::stream(&route.topic, batch.partition);
    let now = clock.now_ms();
    let mut bad = Vec::new();
    for (i, (offset, payload)) in batch.iter().enumerate() {
        encoder.set_uniquifiers(Uniquifiers::Message { stream, offset });
        if let Err(reason) = decode_message(&mut encoder, route, payload, now) {
            bad.push((i, reason));
        }
    }
    let entries = encoder.finish();
    Some(Decoded { desc, entries, bad })
}

/// Hands a batch's points to the store (decoding them first unless
/// `decoded` did), carrying out its delete messages in place; bad messages
/// go to the dead-letter topic. What comes back waits for durability in
/// [`finish_batch`]. Runs in the partition's order.
fn submit_batch(
    batch: &Batch,
    decoded: Option<Decoded>,
    store: &Store,
    shared: &Shared,
    clock: &dyn Clock,
    dead_letters: Option<&DeadLetters>,
) -> Submitted {
    let route = &batch.topic;
    let mut submitted = Submitted {
        key: (route.topic.clone(), batch.partition),
        first: batch.first_offset().unwrap_or(0),
        last: batch.last_offset().unwrap_or(0),
        messages: batch.messages.len() as u64,
        route: route.clone(),
        write: None,
        points: 0,
        cells: 0,
        failed: false,
    };
    let mut bad: Vec<(i64, &[u8], BadMessage)> = Vec::new();
    let (desc, entries) = match decoded {
        Some(d) => {
            let payloads: Vec<(i64, &[u8])> = batch.iter().collect();
            bad.extend(
                d.bad
                    .into_iter()
                    .map(|(i, b)| (payloads[i].0, payloads[i].1, b)),
            );
            (d.desc, d.entries)
        }
        None => match decode_in_turn(batch, store, shared, clock, &mut submitted, &mut bad) {
            Some(decoded) => decoded,
            None => return submitted,
        },
    };
    submitted.points += entries.rows() as u64;
    submitted.cells += entries.cells() as u64;
    if entries.rows() > 0 {
        // The record carries what is durable before it, so a restart can
        // resume there even if no Kafka commit said so.
        let origin = shared
            .tracker
            .lock()
            .durable_below(&submitted.key)
            .map(|durable_below| SourcePosition {
                stream: route.topic.clone(),
                shard: batch.partition as u32,
                durable_below: durable_below as u64,
            });
        match store.submit_encoded(&route.table, entries, origin) {
            Ok(pending) => submitted.write = Some((pending, desc.durability)),
            Err(e) => {
                tracing::error!(
                    topic = %route.topic,
                    partition = batch.partition,
                    first_offset = submitted.first,
                    error = %e,
                    "writing a batch failed; its partition's commits stop before it"
                );
                submitted.failed = true;
                return submitted;
            }
        }
    }
    if bad.is_empty() {
        return submitted;
    }
    shared
        .stats
        .bad_messages
        .fetch_add(bad.len() as u64, Ordering::Relaxed);
    for (offset, _, bad) in &bad {
        metrics::counter!(
            "halite_kafka_bad_messages_total",
            "topic" => route.topic.clone(),
            "reason" => bad.kind
        )
        .increment(1);
        tracing::warn!(
            topic = %route.topic,
            partition = batch.partition,
            offset,
            reason = %bad.reason,
            "bad message"
        );
    }
    let Some(dl) = dead_letters else {
        return submitted; // counted and logged is all that is asked
    };
    let mut sent = true;
    for (offset, payload, bad) in &bad {
        sent &= dl.send(&route.topic, batch.partition, *offset, payload, &bad.reason);
    }
    if sent && dl.flush() {
        shared
            .stats
            .dead_lettered
            .fetch_add(bad.len() as u64, Ordering::Relaxed);
        metrics::counter!("halite_kafka_dead_lettered_total", "topic" => route.topic.clone())
            .increment(bad.len() as u64);
    } else {
        submitted.failed = true;
    }
    submitted
}

/// Decodes a batch in its turn, carrying out its delete messages as they
/// come (the points before one are written and made readable first);
/// `None` when the batch failed (`submitted` says so).
fn decode_in_turn<'b>(
    batch: &'b Batch,
    store: &Store,
    shared: &Shared,
    clock: &dyn Clock,
    submitted: &mut Submitted,
    bad: &mut Vec<(i64, &'b [u8], BadMessage)>,
) -> Option<(crate::catalog::TableDescriptor, crate::table::RoutedRows)> {
    let route = &batch.topic;
    let desc = match store.catalog().table(&route.table) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(topic = %route.topic, error = %e, "cannot write the topic's batch");
            submitted.failed = true;
            return None;
        }
    };
    let now = clock.now_ms();
    let mut encoder = match PointEncoder::new(&desc, store.max_value_size()) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(topic = %route.topic, error = %e, "cannot write the topic's batch");
            submitted.failed = true;
            return None;
        }
    };
    encoder.reserve_for_bytes(batch.bytes());
    let stream = Uniquifiers::stream(&route.topic, batch.partition);
    for (offset, payload) in batch.iter() {
        if route.format == Format::Json
            && let Some(delete) = delete_message(payload)
        {
            // A delete applies to every point before it in the partition
            // and to none after: those before are made readable first.
            let Ok(fresh) = PointEncoder::new(&desc, store.max_value_size()) else {
                submitted.failed = true; // the table made one above
                return None;
            };
            let before = std::mem::replace(&mut encoder, fresh).finish();
            submitted.points += before.rows() as u64;
            submitted.cells += before.cells() as u64;
            let outcome = (if before.rows() > 0 {
                store.write_encoded(&route.table, before, None)
            } else {
                Ok(())
            })
            .map_err(DeleteFailure::Store)
            .and_then(|()| {
                wait_for_batches_before(shared, &submitted.key, submitted.first);
                delete.map_err(DeleteFailure::Bad).and_then(|q| {
                    shared
                        .queries
                        .delete_points(&route.table, &q)
                        .map_err(DeleteFailure::Store)
                })
            });
            // Durable through the delete, and the store told so: a restart
            // then resumes after it instead of running it again over points
            // written after it (their replay would write them at the same
            // timestamps, which the markers hide).
            let outcome = outcome.and_then(|rows| {
                durable_through(store, &desc, route, batch.partition, offset + 1)
                    .map(|()| rows)
                    .map_err(DeleteFailure::Store)
            });
            match outcome {
                Ok(rows) => {
                    shared.stats.deletes.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(topic = %route.topic, partition = batch.partition, offset, rows, "deleted points");
                }
                Err(DeleteFailure::Bad(reason)) => bad.push((
                    offset,
                    payload,
                    BadMessage {
                        kind: "bad_delete",
                        reason,
                    },
                )),
                Err(DeleteFailure::Store(e))
                    if e.kind() == crate::error::ErrorKind::InvalidInput =>
                {
                    bad.push((
                        offset,
                        payload,
                        BadMessage {
                            kind: "bad_delete",
                            reason: e.to_string(),
                        },
                    ))
                }
                Err(DeleteFailure::Store(e)) => {
                    tracing::error!(
                        topic = %route.topic,
                        partition = batch.partition,
                        offset,
                        error = %e,
                        "a delete failed; its partition's commits stop before it"
                    );
                    submitted.failed = true;
                    return None;
                }
            }
            continue;
        }
        encoder.set_uniquifiers(Uniquifiers::Message { stream, offset });
        if let Err(reason) = decode_message(&mut encoder, route, payload, now) {
            bad.push((offset, payload, reason));
        }
    }
    let entries = encoder.finish();
    Some((desc, entries))
}

/// Why a delete message was not carried out.
enum DeleteFailure {
    /// The message is wrong: it goes where bad messages go.
    Bad(String),
    /// The store failed (or refused what the message asks).
    Store(crate::error::Error),
}

/// A JSON message `{"delete": {"series": [...], "start_ms": …, "end_ms": …,
/// "fields": [...]}}` (what `POST …/delete` takes for points): `None` when
/// the message is not a delete, else the query it deletes, or why it is
/// wrong.
fn delete_message(payload: &[u8]) -> Option<Result<crate::query::Query, String>> {
    // Most messages are points: only one naming `delete` is read twice.
    memchr::memmem::find(payload, b"\"delete\"")?;
    let serde_json::Value::Object(mut top) = serde_json::from_slice(payload).ok()? else {
        return None;
    };
    if top.len() != 1 {
        return None;
    }
    let body = top.remove("delete")?;
    Some(serde_path_to_error::deserialize(body).map_err(|e| {
        let inner = crate::codec::bounded(&e.inner().to_string(), 240).into_owned();
        match e.path().to_string().as_str() {
            "." => format!("delete: {inner}"),
            path => format!("delete: field `{path}`: {inner}"),
        }
    }))
}

/// Makes every write of the table durable as its durability says (a WAL
/// sync for ASYNC_WAL, a flush for SKIP_WAL) and records in the store that
/// the partition is durable below `durable_below`.
fn durable_through(
    store: &Store,
    desc: &crate::catalog::TableDescriptor,
    route: &TopicRoute,
    partition: i32,
    durable_below: i64,
) -> crate::error::Result<()> {
    match desc.durability {
        Durability::SyncWal => {}
        Durability::AsyncWal => store.sync_wals()?,
        Durability::SkipWal => store.flush_table(&route.table)?,
    }
    let origin = SourcePosition {
        stream: route.topic.clone(),
        shard: partition as u32,
        durable_below: durable_below as u64,
    };
    let noted = store.submit_position(&route.table, origin)?;
    store.wait(noted)
}

/// Waits until every batch of the partition before `first` is written,
/// so a delete at `first` or later sees their points.
fn wait_for_batches_before(shared: &Shared, p: &PartitionKey, first: i64) {
    let mut tracker = shared.tracker.lock();
    while tracker.sent_before(p, first) {
        shared
            .batch_done
            .wait_for(&mut tracker, Duration::from_millis(50));
    }
}

/// Why a message is bad: `kind` is the metric label (`unreadable`: not
/// UTF-8 or not JSON points; `bad_point`: a point that does not fit the
/// table; `no_points`), `reason` the full text for logs and dead letters.
struct BadMessage {
    kind: &'static str,
    reason: String,
}

/// Adds a message's points to `encoder`; a message with any bad point is
/// reported bad (its good points are still written: rewriting them when the
/// dead letter is replayed is harmless).
fn decode_message(
    encoder: &mut PointEncoder<'_>,
    route: &TopicRoute,
    payload: &[u8],
    now: u64,
) -> Result<(), BadMessage> {
    let rows_before = encoder.rows();
    let errors = encoder
        .add_body(route.format, payload, route.precision, now)
        .map_err(|reason| BadMessage {
            kind: "unreadable",
            reason,
        })?;
    let what = match route.format {
        Format::Line => "line",
        Format::Json => "point",
    };
    if !errors.is_empty() {
        // The first few say what is wrong; all of them could outgrow the
        // log line and the dead letter's headers (a broker refuses a
        // message past its size limit).
        const SHOWN: usize = 5;
        let mut reason = errors
            .iter()
            .take(SHOWN)
            .map(|(n, reason)| {
                let mut r = format!("{what} {n}: {reason}");
                if r.len() > 300 {
                    let cut = (0..=300)
                        .rev()
                        .find(|&i| r.is_char_boundary(i))
                        .unwrap_or(0);
                    r.truncate(cut);
                    r.push('…');
                }
                r
            })
            .collect::<Vec<_>>()
            .join("; ");
        if errors.len() > SHOWN {
            reason.push_str(&format!("; and {} more", errors.len() - SHOWN));
        }
        return Err(BadMessage {
            kind: "bad_point",
            reason,
        });
    }
    // Line protocol without a single point is not a message we understand.
    if route.format == Format::Line && encoder.rows() == rows_before {
        return Err(BadMessage {
            kind: "no_points",
            reason: "message holds no points".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_stop_at_the_first_batch_not_yet_durable() {
        let mut t = OffsetTracker::default();
        let p = ("t".to_string(), 0);
        t.sent(&p, 0, 9);
        t.sent(&p, 10, 19);
        t.sent(&p, 20, 29);
        t.finished(&p, 10, 19, BatchState::Done);
        t.finished(&p, 20, 29, BatchState::Done);
        // Where consumption started is durable; nothing past it yet.
        assert_eq!(t.to_commit(), vec![(p.clone(), 0)]);
        assert_eq!(t.durable_below(&p), Some(0));
        t.finished(&p, 0, 9, BatchState::Done);
        assert_eq!(t.to_commit(), vec![(p.clone(), 30)]);
        assert_eq!(t.durable_below(&p), Some(30));
        t.committed(&[(p.clone(), 30)]);
        assert!(t.to_commit().is_empty());
        // A batch that failed holds the offset back for good.
        t.sent(&p, 30, 39);
        t.sent(&p, 40, 49);
        t.finished(&p, 30, 39, BatchState::Failed);
        t.finished(&p, 40, 49, BatchState::Done);
        assert!(t.to_commit().is_empty());
        assert_eq!(t.in_flight(&p), 0, "nothing left to wait for");
        t.sent(&p, 50, 50);
        assert_eq!(t.in_flight(&p), 1);
        // A revoked partition's late batch changes nothing.
        t.partitions.remove(&p);
        t.finished(&p, 50, 50, BatchState::Done);
        assert!(t.to_commit().is_empty());
    }

    #[test]
    fn a_drained_partition_tells_the_store_its_position_once() {
        let mut t = OffsetTracker::default();
        let p = ("t".to_string(), 0);
        // Resumed from the store at 100: committed later, not noted again.
        t.resumed_at(&p, 100);
        assert_eq!(t.to_commit(), vec![(p.clone(), 100)]);
        assert_eq!(t.drained_position(&p), None);
        t.sent(&p, 100, 109);
        t.sent(&p, 110, 119);
        t.finished(&p, 100, 109, BatchState::Done);
        // A batch still in the pipeline: its own record will carry more.
        assert_eq!(t.drained_position(&p), None);
        t.finished(&p, 110, 119, BatchState::Done);
        assert_eq!(t.drained_position(&p), Some(120));
        t.position_noted(&p, 120);
        assert_eq!(t.drained_position(&p), None);
        // Written but not yet durable (ASYNC_WAL) is not drained.
        t.sent(&p, 120, 129);
        t.finished(&p, 120, 129, BatchState::Written(Waiting::WalSync));
        assert_eq!(t.drained_position(&p), None);
    }

    /// The commit rule over thousands of random interleavings of what the
    /// pipeline does concurrently: batches fetched, written by any writer
    /// in any order (SYNC_WAL, ASYNC_WAL, SKIP_WAL), WAL syncs, flushes,
    /// acknowledgements arriving late and out of order, failed writes,
    /// partitions revoked and assigned again (at the committed offset or at
    /// a position the store recovered). Every offset the tracker offers to
    /// commit must have every message below it durable — synced in the
    /// WAL or flushed — at that moment; and once everything settles, the
    /// commit reaches the end of what was fetched.
    #[test]
    fn every_commit_follows_the_sync_or_flush_of_everything_below_it() {
        #[derive(Clone, Copy, PartialEq)]
        enum Mode {
            Sync,
            Async,
            Skip,
        }
        struct Flight {
            p: usize,
            first: i64,
            last: i64,
            mode: Mode,
        }
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        const PARTITIONS: usize = 3;
        let mut commits_checked = 0u64;
        for _ in 0..20_000 {
            let keys: Vec<PartitionKey> = (0..PARTITIONS)
                .map(|i| ("t".to_string(), i as i32))
                .collect();
            let mut t = OffsetTracker::default();
            let mut fetch = [0i64; PARTITIONS];
            let mut assigned = [true; PARTITIONS];
            let mut group_commit = [0i64; PARTITIONS];
            // Partitions where a write failed: their commits may stop.
            let mut failed = [false; PARTITIONS];
            let mut durable: Vec<Vec<bool>> = vec![Vec::new(); PARTITIONS];
            let mut queued: Vec<Flight> = Vec::new(); // fetched, not yet written
            let mut in_wal: Vec<(Flight, bool)> = Vec::new(); // (batch, failed)
            let mut in_memstore: Vec<Flight> = Vec::new();
            let mut acks: Vec<(usize, i64, i64, BatchState)> = Vec::new();
            let mark = |durable: &mut Vec<Vec<bool>>, f: &Flight| {
                let d = &mut durable[f.p];
                if d.len() <= f.last as usize {
                    d.resize(f.last as usize + 1, false);
                }
                for o in f.first..=f.last {
                    d[o as usize] = true;
                }
            };
            for _ in 0..120 {
                match next(10) {
                    0 | 1 => {
                        let p = next(PARTITIONS as u64) as usize;
                        if assigned[p] {
                            let n = 1 + next(5) as i64;
                            let first = fetch[p];
                            fetch[p] += n;
                            t.sent(&keys[p], first, first + n - 1);
                            let mode = [Mode::Sync, Mode::Async, Mode::Skip][next(3) as usize];
                            queued.push(Flight {
                                p,
                                first,
                                last: first + n - 1,
                                mode,
                            });
                        }
                    }
                    2 if !queued.is_empty() => {
                        // Any writer, any order.
                        let f = queued.swap_remove(next(queued.len() as u64) as usize);
                        if next(25) == 0 {
                            failed[f.p] = true;
                            acks.push((f.p, f.first, f.last, BatchState::Failed));
                            continue;
                        }
                        match f.mode {
                            Mode::Sync => in_wal.push((f, false)),
                            Mode::Async => {
                                acks.push((
                                    f.p,
                                    f.first,
                                    f.last,
                                    BatchState::Written(Waiting::WalSync),
                                ));
                                in_wal.push((f, false));
                            }
                            Mode::Skip => {
                                acks.push((
                                    f.p,
                                    f.first,
                                    f.last,
                                    BatchState::Written(Waiting::Flush {
                                        table: TableName::parse("t").expect("name"),
                                        seqs: HashMap::new(),
                                    }),
                                ));
                                in_memstore.push(f);
                            }
                        }
                    }
                    3 => {
                        // A WAL sync: everything appended is durable;
                        // SYNC_WAL writers hear of it on their own time.
                        for (f, _) in in_wal.drain(..) {
                            mark(&mut durable, &f);
                            if f.mode == Mode::Sync {
                                acks.push((f.p, f.first, f.last, BatchState::Done));
                            }
                        }
                    }
                    4 => {
                        // What the pipeline's settle does: the batches
                        // written and waiting, then a WAL sync or flushes,
                        // then those batches are done.
                        let waiting = t.waiting();
                        let wal = next(2) == 0;
                        if wal {
                            for (f, _) in in_wal.drain(..) {
                                mark(&mut durable, &f);
                                if f.mode == Mode::Sync {
                                    acks.push((f.p, f.first, f.last, BatchState::Done));
                                }
                            }
                        } else {
                            for f in in_memstore.drain(..) {
                                mark(&mut durable, &f);
                            }
                        }
                        for (key, (first, last), w) in waiting {
                            if (w == Waiting::WalSync) == wal {
                                t.finished(&key, first, last, BatchState::Done);
                            }
                        }
                    }
                    9 => {
                        // A flush on its own (size, age).
                        for f in in_memstore.drain(..) {
                            mark(&mut durable, &f);
                        }
                    }
                    5 | 6 if !acks.is_empty() => {
                        let (p, first, last, state) =
                            acks.swap_remove(next(acks.len() as u64) as usize);
                        t.finished(&keys[p], first, last, state);
                    }
                    7 => {
                        let offered = t.to_commit();
                        for (key, o) in &offered {
                            let p = key.1 as usize;
                            for below in 0..*o {
                                assert!(
                                    durable[p].get(below as usize).copied().unwrap_or(false)
                                        || below < group_commit[p],
                                    "offset {o} of partition {p} offered while {below} is not durable"
                                );
                            }
                            group_commit[p] = *o;
                            commits_checked += 1;
                        }
                        t.committed(&offered);
                    }
                    8 => {
                        // A rebalance: revoked, or assigned again — at the
                        // group's commit, or at the store's durable
                        // position when that is further.
                        let p = next(PARTITIONS as u64) as usize;
                        if assigned[p] {
                            assigned[p] = false;
                            t.partitions.remove(&keys[p]);
                        } else {
                            assigned[p] = true;
                            let durable_prefix =
                                durable[p].iter().take_while(|d| **d).count() as i64;
                            let start =
                                group_commit[p].max(if next(2) == 0 { durable_prefix } else { 0 });
                            if start > group_commit[p] {
                                t.resumed_at(&keys[p], start);
                            }
                            fetch[p] = start;
                        }
                    }
                    _ => {}
                }
            }
            // Everything settles: the commit reaches what was fetched,
            // unless a write failed (then it stops before it, for good).
            for f in queued.drain(..) {
                acks.push((f.p, f.first, f.last, BatchState::Written(Waiting::WalSync)));
                in_wal.push((f, false));
            }
            for (p, first, last, state) in acks.drain(..) {
                t.finished(&keys[p], first, last, state);
            }
            let waiting = t.waiting();
            for (f, _) in in_wal.drain(..) {
                mark(&mut durable, &f);
                if f.mode == Mode::Sync {
                    t.finished(&keys[f.p], f.first, f.last, BatchState::Done);
                }
            }
            for f in in_memstore.drain(..) {
                mark(&mut durable, &f);
            }
            for (key, (first, last), _) in waiting {
                t.finished(&key, first, last, BatchState::Done);
            }
            for p in 0..PARTITIONS {
                if assigned[p] && !failed[p] && t.partitions.contains_key(&keys[p]) {
                    assert_eq!(t.durable_below(&keys[p]), Some(fetch[p]), "partition {p}");
                }
            }
        }
        assert!(
            commits_checked > 10_000,
            "{commits_checked} commits checked"
        );
    }
}
