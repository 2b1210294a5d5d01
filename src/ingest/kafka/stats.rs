//! The pipeline's counters, as `/api/v1/ingest` shows them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use rdkafka::{Offset, TopicPartitionList};

use super::offsets::PartitionKey;

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
    /// Times the consumer stopped taking messages because its buffer was
    /// full and the writers behind, without pausing its partitions.
    pub holds: AtomicU64,
    /// Messages and their bytes librdkafka fetched from the brokers (from
    /// its statistics, every second): more than `messages` when some were
    /// fetched again (after a pause, a rebalance, a seek).
    pub fetched_messages: AtomicU64,
    pub fetched_bytes: AtomicU64,
    /// Statistics came (they are off with `statistics.interval.ms = 0`).
    pub fetched_known: AtomicBool,
    /// Delete messages carried out.
    pub deletes: AtomicU64,
    /// Cluster mode: points dropped because their bucket travels in
    /// another partition than the one they came in.
    pub misrouted: AtomicU64,
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
    pub(super) fn record_committed(&self, tpl: &TopicPartitionList) {
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

    /// librdkafka's running totals of what it fetched.
    pub(super) fn record_fetched(&self, messages: u64, bytes: u64) {
        self.fetched_messages.store(messages, Ordering::Relaxed);
        self.fetched_bytes.store(bytes, Ordering::Relaxed);
        self.fetched_known.store(true, Ordering::Relaxed);
        metrics::counter!("halite_kafka_fetched_messages_total").absolute(messages);
        metrics::counter!("halite_kafka_fetched_bytes_total").absolute(bytes);
    }

    pub fn to_json(&self) -> serde_json::Value {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let fetched = self.fetched_known.load(Ordering::Relaxed);
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
            "holds": n(&self.holds),
            "fetched_messages": fetched.then(|| n(&self.fetched_messages)),
            "fetched_bytes": fetched.then(|| n(&self.fetched_bytes)),
            "deletes": n(&self.deletes),
            "misrouted_points": n(&self.misrouted),
            "committed": committed,
            "partitions": partitions,
            "resumed": resumed,
            "joined": self.joined.load(Ordering::Acquire),
            "assigned_partitions": n(&self.assigned_partitions),
        })
    }
}
