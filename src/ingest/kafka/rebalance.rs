//! librdkafka's rebalance callbacks: a partition that goes is drained
//! and committed first; one that comes starts at the store's durable
//! position where that is ahead of the group's.

use std::collections::HashMap;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::offsets::PartitionKey;
use super::shared::Shared;

/// How long an assignment keeps trying to take a partition's regions
/// (the object store may be away a while).
const TAKE_DEADLINE: Duration = Duration::from_secs(10);

/// How long an assignment waits for the group's committed offsets.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(3);

pub(super) struct IngestContext {
    /// Weak: a consumer closing after its loop stopped (brokers hung, the
    /// group leave unanswered) does not hold the store.
    pub(super) shared: Weak<Shared>,
    /// Durable positions recovered from the store at start.
    pub(super) recovered: HashMap<PartitionKey, i64>,
    /// Whether the group rebalances cooperatively, read at the first
    /// callback (an assignment, while the group is up) and kept.
    pub(super) cooperative: std::sync::OnceLock<bool>,
}

impl ClientContext for IngestContext {
    /// Keeps the client's totals of messages and bytes fetched; the rest
    /// of librdkafka's statistics is not read (nor decoded).
    fn stats_raw(&self, statistics: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Fetched {
            rxmsgs: u64,
            rxmsg_bytes: u64,
        }
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        match serde_json::from_slice::<Fetched>(statistics) {
            Ok(f) => shared.stats.record_fetched(f.rxmsgs, f.rxmsg_bytes),
            Err(e) => tracing::debug!(error = %e, "librdkafka statistics without fetch totals"),
        }
    }
}

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
        let Some(shared) = self.shared.upgrade() else {
            // The consumer loop is gone (the close after a stop): only
            // librdkafka's side of the rebalance is left.
            if let Err(e) = apply_rebalance(consumer, err, tpl, cooperative) {
                tracing::debug!(error = %e, "applying a rebalance while closing failed");
            }
            return;
        };
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
        let mut untaken = TopicPartitionList::new();
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                if shared.cluster.is_some() {
                    untaken = self.take_shards(&shared, tpl);
                } else {
                    self.resume_from_store(&shared, consumer, tpl);
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.revoke(&shared, consumer, tpl);
            }
            other => {
                tracing::error!(error = ?other, "kafka rebalance failed; dropping the assignment");
                self.revoke(&shared, consumer, tpl);
            }
        }
        if let Err(e) = apply_rebalance(consumer, err, tpl, cooperative) {
            tracing::error!(error = %e, "applying the kafka rebalance failed");
        }
        // Held back until they are taken (the consumer loop tries again
        // every second).
        if untaken.count() > 0
            && let Err(e) = consumer.pause(&untaken)
        {
            tracing::error!(error = %e, "pausing partitions not yet taken failed");
        }
        let listed: Vec<PartitionKey> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        let assigned = {
            let mut held = shared.assigned.lock();
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
        let stats = &shared.stats;
        stats
            .assigned_partitions
            .store(assigned as u64, Ordering::Relaxed);
        if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS {
            stats.joined.store(true, Ordering::Release);
        }
        metrics::gauge!("halite_kafka_assigned_partitions").set(assigned as f64);
    }
}

/// librdkafka's side of a rebalance: the partitions assigned, or let go
/// (all of them when the rebalance failed).
fn apply_rebalance(
    consumer: &BaseConsumer<IngestContext>,
    err: RDKafkaRespErr,
    tpl: &TopicPartitionList,
    cooperative: bool,
) -> rdkafka::error::KafkaResult<()> {
    match err {
        RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS if cooperative => {
            consumer.incremental_assign(tpl)
        }
        RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => consumer.assign(tpl),
        RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS if cooperative => {
            consumer.incremental_unassign(tpl)
        }
        _ => consumer.unassign(),
    }
}

impl IngestContext {
    /// Waits for the revoked partitions' batches in flight to become
    /// durable and commits them, so the next owner starts where we stopped
    /// instead of replaying.
    pub(super) fn revoke(
        &self,
        shared: &Shared,
        consumer: &BaseConsumer<Self>,
        tpl: &TopicPartitionList,
    ) {
        shared.generation.fetch_add(1, Ordering::SeqCst);
        let revoked: Vec<PartitionKey> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        if shared.closing.load(Ordering::SeqCst) {
            // The consumer drained and committed before it closed.
            let mut tracker = shared.tracker.lock();
            for p in &revoked {
                tracker.partitions.remove(p);
            }
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut tracker = shared.tracker.lock();
        while revoked.iter().any(|p| tracker.in_flight(p) > 0) && Instant::now() < deadline {
            shared
                .batch_done
                .wait_for(&mut tracker, Duration::from_millis(50));
        }
        drop(tracker);
        // Partitions lost with the session (the coordinator did not hear
        // from us in time) have a new generation without us: a commit
        // would be refused, or wait for a coordinator that does not answer.
        if !consumer.assignment_lost() {
            shared.commit(consumer, Some(&revoked));
        }
        let mut tracker = shared.tracker.lock();
        for p in &revoked {
            tracker.partitions.remove(p);
        }
        drop(tracker);
        self.release_shards(shared, &revoked);
    }

    /// Cluster mode: the revoked partitions' regions close here (their
    /// MemStores dropped: the next owner replays the topic from what the
    /// manifests cover).
    fn release_shards(&self, shared: &Shared, revoked: &[PartitionKey]) {
        let Some(routes) = &shared.cluster else {
            return;
        };
        for (topic, partition) in revoked {
            let key = (topic.clone(), *partition);
            routes.next_incarnation(&key);
            routes.retake.lock().remove(&key);
            routes.end_replay(&key);
            shared.store.release_shard(topic, *partition as u32);
            routes.committed.lock().remove(&key);
        }
    }

    /// Cluster mode: takes each assigned partition's lease and regions and
    /// starts it where their manifests say (its start when a region never
    /// published a position). The object store may be away for a while:
    /// each partition is tried for up to `TAKE_DEADLINE`; those it could
    /// not take come back, to be paused and taken later.
    pub(super) fn take_shards(
        &self,
        shared: &Shared,
        tpl: &mut TopicPartitionList,
    ) -> TopicPartitionList {
        let mut untaken = TopicPartitionList::new();
        let Some(routes) = &shared.cluster else {
            return untaken;
        };
        let assigned: Vec<PartitionKey> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        // One deadline for the whole assignment: past it, the partitions
        // left are not tried here (each try may wait out the object
        // store's own retries) but paused and taken later.
        let deadline = Instant::now() + TAKE_DEADLINE;
        let mut gave_up = false;
        for (topic, partition) in assigned {
            let partitions = routes.partitions.lock().get(&topic).copied().unwrap_or(1);
            let feeds = routes
                .tables
                .get(&topic)
                .cloned()
                .unwrap_or(crate::store::cluster::ShardFeeds::Tables(Vec::new()));
            let mut pause = Duration::from_millis(100);
            let start = loop {
                if gave_up {
                    break None;
                }
                match shared
                    .store
                    .take_shard(&topic, partition as u32, partitions, &feeds)
                {
                    Ok(start) => break Some(start),
                    Err(e) if Instant::now() < deadline => {
                        tracing::warn!(%topic, partition, error = %e, "taking the partition's regions failed; trying again");
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_secs(2));
                    }
                    Err(e) => {
                        tracing::error!(%topic, partition, error = %e, "cannot take the partition's regions now; it stays paused and is tried again");
                        gave_up = true;
                        break None;
                    }
                }
            };
            let key = (topic.clone(), partition);
            let Some(start) = start else {
                untaken.add_partition(&topic, partition);
                routes.retake.lock().insert(key);
                continue;
            };
            routes.next_incarnation(&key);
            routes.replay_from(&key, start.from.unwrap_or(0) as i64, None);
            let offset = start
                .from
                .map_or(Offset::Beginning, |o| Offset::Offset(o as i64));
            if let Err(e) = tpl.set_partition_offset(&topic, partition, offset) {
                tracing::error!(%topic, partition, error = %e, "cannot start a partition at its manifests' position");
            }
            if let Some(from) = start.from {
                shared
                    .stats
                    .resumed
                    .lock()
                    .insert((topic.clone(), partition), from as i64);
            }
        }
        untaken
    }

    /// Starts assigned partitions at the store's durable position where it
    /// is ahead of the committed offset (the process died between a durable
    /// write and the commit that would have covered it).
    pub(super) fn resume_from_store(
        &self,
        shared: &Shared,
        consumer: &BaseConsumer<Self>,
        tpl: &mut TopicPartitionList,
    ) {
        let ours: Vec<(PartitionKey, i64)> = tpl
            .elements()
            .iter()
            .filter_map(|e| {
                let p = (e.topic().to_string(), e.partition());
                self.recovered.get(&p).map(|&o| (p, o))
            })
            .collect();
        // Well inside the stop's deadline (8 s): a broker that dies while
        // this waits must not keep a Ctrl-C from stopping the service.
        let committed = match consumer.committed_offsets(tpl.clone(), COMMITTED_TIMEOUT) {
            Ok(c) => c,
            Err(e) => {
                // Starting from the committed offsets replays more; no loss.
                tracing::warn!(error = %e, "reading committed offsets failed; not resuming from the store");
                return;
            }
        };
        shared.stats.record_committed(&committed);
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
                shared
                    .tracker
                    .lock()
                    .resumed_at(&(topic.clone(), partition), durable);
                shared
                    .stats
                    .resumed
                    .lock()
                    .insert((topic, partition), durable);
            }
        }
    }
}
