//! State shared by the consumer thread, the rebalance callbacks and the
//! writers; commits of what is durable.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};

use super::batch::{Batch, Decoded};
use super::deletes::PointDeletes;
use super::offsets::{BatchState, OffsetTracker, PartitionKey, Waiting};
use super::stats::IngestStats;
use crate::catalog::TableName;
use crate::store::Store;

/// State shared by the consumer thread, the rebalance callbacks and the
/// writers.
pub(super) struct Shared {
    pub(super) tracker: Mutex<OffsetTracker>,
    /// Signalled whenever a batch finishes.
    pub(super) batch_done: Condvar,
    /// Bumped on every revoke: batches built before it are dropped.
    pub(super) generation: AtomicU64,
    pub(super) stats: Arc<IngestStats>,
    pub(super) store: Arc<Store>,
    /// Runs the deletes that messages ask for.
    pub(super) deletes: Arc<dyn PointDeletes>,
    /// The partitions this member holds, kept from the rebalance callbacks'
    /// own lists: asking librdkafka (`assignment()`) from a callback run
    /// while the consumer closes can wait forever (see `rebalance`).
    pub(super) assigned: Mutex<BTreeSet<PartitionKey>>,
    /// The consumer is closing after its last commit: a revoke then has
    /// nothing left to wait for or commit.
    pub(super) closing: AtomicBool,
    /// librdkafka reported every broker down, and no message came since.
    pub(super) brokers_down: AtomicBool,
    /// Per partition, which batch hands its rows to the store next, and
    /// the decoded batches waiting for their turn (see `writer::writer_loop`).
    pub(super) sequence: Mutex<HashMap<PartitionKey, PartitionSequence>>,
    /// In cluster mode: what the group's assignments make this node own.
    pub(super) cluster: Option<ClusterRoutes>,
    /// In cluster mode: sends rows a message brought to the wrong
    /// partition on to their bucket's.
    pub(super) forward: Option<Arc<super::topic_writer::TopicWriter>>,
    /// Every namespace's dictionary, the one the HTTP doors use: points
    /// of a table of open tag sets take their UIDs from it.
    pub(super) tag_sets: Arc<crate::series::TagSets>,
    /// How a topic mapped to a database makes its measurements' tables.
    pub(super) template: crate::ingest::databases::TableTemplate,
}

/// Cluster mode: each topic's partition count (a table's bucket `b`
/// travels in partition `b % partitions`) and the tables it feeds.
#[derive(Debug, Default)]
pub(super) struct ClusterRoutes {
    pub(super) partitions: Mutex<HashMap<String, u32>>,
    pub(super) tables: HashMap<String, crate::store::cluster::ShardFeeds>,
    /// Per partition, the offset last committed (the published position).
    pub(super) committed: Mutex<HashMap<PartitionKey, i64>>,
    /// Per partition, how many times this node took it (or let it go):
    /// batches fetched before the last change are dropped, so nothing
    /// read before a partition was taken again writes into its regions
    /// (their positions would claim what the replay has not rewritten).
    pub(super) incarnations: Mutex<HashMap<PartitionKey, u64>>,
    /// Partitions to take again from their manifests' positions: a take
    /// that failed (paused until it succeeds), or a batch that could not
    /// be written (later batches must not move positions past it).
    pub(super) retake: Mutex<BTreeSet<PartitionKey>>,
    /// Partitions being replayed since they were taken, until the consumer
    /// reaches where the partition ended when it was taken.
    pub(super) replaying: Mutex<HashMap<PartitionKey, Replay>>,
    /// How many there are (read per message without the lock).
    pub(super) replays: std::sync::atomic::AtomicUsize,
}

/// A partition's replay after it was taken: from its manifests' position
/// to the end the partition had then.
#[derive(Debug)]
pub(super) struct Replay {
    pub(super) from: i64,
    /// The partition's end when it was taken (the high watermark of the
    /// consumer's fetches; unknown until the first one).
    pub(super) until: Option<i64>,
    pub(super) started: Instant,
    pub(super) messages: u64,
    pub(super) bytes: u64,
}

impl ClusterRoutes {
    pub(super) fn incarnation(&self, p: &PartitionKey) -> u64 {
        self.incarnations.lock().get(p).copied().unwrap_or(0)
    }

    pub(super) fn next_incarnation(&self, p: &PartitionKey) {
        *self.incarnations.lock().entry(p.clone()).or_insert(0) += 1;
    }

    /// A partition was taken and is read from `from` (its start: 0).
    pub(super) fn replay_from(&self, p: &PartitionKey, from: i64, until: Option<i64>) {
        let mut r = self.replaying.lock();
        r.insert(
            p.clone(),
            Replay {
                from,
                until,
                started: Instant::now(),
                messages: 0,
                bytes: 0,
            },
        );
        self.replays.store(r.len(), Ordering::Relaxed);
    }

    /// A message of a partition being replayed came (`high`: the
    /// partition's end as the last fetch said); a replay that reached its
    /// end is logged and measured.
    pub(super) fn replayed(
        &self,
        p: &PartitionKey,
        offset: i64,
        bytes: usize,
        high: impl FnOnce() -> Option<i64>,
    ) {
        let mut r = self.replaying.lock();
        let Some(replay) = r.get_mut(p) else {
            return;
        };
        replay.messages += 1;
        replay.bytes += bytes as u64;
        if replay.until.is_none() {
            replay.until = high();
        }
        if replay.until.is_some_and(|until| offset + 1 >= until) {
            let took = replay.started.elapsed().as_secs_f64();
            tracing::info!(
                topic = %p.0,
                partition = p.1,
                from = replay.from,
                messages = replay.messages,
                bytes = replay.bytes,
                took_s = took,
                "replayed the partition up to where it ended when it was taken"
            );
            let labels = [("topic", p.0.clone()), ("partition", p.1.to_string())];
            metrics::counter!("halite_cluster_replay_bytes_total", &labels).increment(replay.bytes);
            metrics::histogram!("halite_cluster_replay_seconds").record(took);
            r.remove(p);
            self.replays.store(r.len(), Ordering::Relaxed);
        }
    }

    /// A partition let go stops counting as replayed.
    pub(super) fn end_replay(&self, p: &PartitionKey) {
        let mut r = self.replaying.lock();
        r.remove(p);
        self.replays.store(r.len(), Ordering::Relaxed);
    }
}

/// A partition's batches in the order they were consumed: the writers
/// decode in parallel, but hand rows to the store in this order, so the
/// WAL logs a partition in offset order (of two points with one key the
/// later wins; a delete message sees every point before it and none
/// after).
#[derive(Default)]
pub(super) struct PartitionSequence {
    /// The sequence number of the batch whose turn it is.
    pub(super) next: u64,
    /// Batches decoded ahead of their turn, by sequence number.
    pub(super) parked: BTreeMap<u64, (Batch, Option<Decoded>)>,
}

impl Shared {
    /// Marks done the written batches that became durable: one WAL sync
    /// covers every ASYNC_WAL batch written before it; a SKIP_WAL batch
    /// waits for its regions' flushes.
    pub(super) fn settle(&self) {
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
    /// partitions. A revoke commits this way (the partitions' next owner
    /// reads the commit, and a rebalance means the brokers answer); the
    /// consumer loop uses [`Shared::commit_within`].
    pub(super) fn commit<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        only: Option<&[PartitionKey]>,
    ) {
        let started = Instant::now();
        let Some((tpl, offsets)) = self.to_commit(consumer, only) else {
            return;
        };
        match consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => self.committed(&offsets, started),
            // Not fatal: the next commit carries the same (or later) offsets.
            Err(e) => tracing::warn!(error = %e, "offset commit failed (will retry)"),
        }
    }

    /// Commits what is durable, waiting at most `wait` for the group
    /// coordinator. A synchronous commit waits for it without a bound:
    /// with the brokers hung, or gone a moment before librdkafka noticed,
    /// the consumer loop (and a stop) waited with it. The commit goes on
    /// a thread of its own, which holds the consumer (not this state, nor
    /// the store) until the coordinator answers or librdkafka gives up;
    /// `busy` says one is still out, and no other starts meanwhile.
    pub(super) fn commit_within<C: ConsumerContext + 'static>(
        &self,
        consumer: &Arc<BaseConsumer<C>>,
        wait: Duration,
        busy: &Arc<AtomicBool>,
    ) {
        if busy.load(Ordering::SeqCst) {
            return;
        }
        let started = Instant::now();
        let Some((tpl, offsets)) = self.to_commit(consumer, None) else {
            return;
        };
        let (tx, rx) = crossbeam_channel::bounded(1);
        busy.store(true, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("halite-commit".into())
            .spawn({
                let (consumer, busy) = (consumer.clone(), busy.clone());
                move || {
                    let result = consumer.commit(&tpl, CommitMode::Sync);
                    busy.store(false, Ordering::SeqCst);
                    let _ = tx.send(result);
                }
            });
        if let Err(e) = spawned {
            busy.store(false, Ordering::SeqCst);
            tracing::warn!(error = %e, "cannot start a commit; the next one carries its offsets");
            return;
        }
        match rx.recv_timeout(wait) {
            Ok(Ok(())) => self.committed(&offsets, started),
            Ok(Err(e)) => tracing::warn!(error = %e, "offset commit failed (will retry)"),
            Err(_) => tracing::warn!(
                waited_s = wait.as_secs_f64(),
                "the group coordinator did not answer a commit in time; the store's positions \
                 stand in for it until one gets through"
            ),
        }
    }

    /// What is durable and not committed yet, as a partition list and as
    /// offsets; the consumer lag gauges are set from it.
    fn to_commit<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        only: Option<&[PartitionKey]>,
    ) -> Option<(TopicPartitionList, Vec<(PartitionKey, i64)>)> {
        self.settle();
        let offsets: Vec<(PartitionKey, i64)> = match &self.cluster {
            // A cluster's node commits what the object store holds: a new
            // owner replays from there (the manifests), and the group's
            // offsets and lag say the same.
            Some(routes) => {
                let held: Vec<PartitionKey> = self.assigned.lock().iter().cloned().collect();
                let committed = routes.committed.lock();
                held.into_iter()
                    .filter(|p| only.is_none_or(|o| o.contains(p)))
                    .filter_map(|p| {
                        let at = self.store.published_position(&p.0, p.1 as u32)? as i64;
                        (committed.get(&p) != Some(&at)).then_some((p, at))
                    })
                    .collect()
            }
            None => self
                .tracker
                .lock()
                .to_commit()
                .into_iter()
                .filter(|(p, _)| only.is_none_or(|o| o.contains(p)))
                .collect(),
        };
        if offsets.is_empty() {
            return None;
        }
        // Durable whether or not the commit gets through.
        self.stats.durable.lock().extend(offsets.iter().cloned());
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), offset) in &offsets {
            if let Err(e) = tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset)) {
                tracing::error!(%topic, partition, offset, error = %e, "cannot list an offset to commit");
            }
            // The high watermark librdkafka saw in its last fetch response
            // (no broker round trip) against what is durable.
            if let Some(high) = cached_high_watermark(consumer, topic, *partition) {
                let labels = [
                    ("topic", topic.clone()),
                    ("partition", partition.to_string()),
                ];
                metrics::gauge!("halite_kafka_consumer_lag", &labels)
                    .set((high - offset).max(0) as f64);
            }
        }
        Some((tpl, offsets))
    }

    /// Records offsets the group holds now.
    fn committed(&self, offsets: &[(PartitionKey, i64)], started: Instant) {
        self.tracker.lock().committed(offsets);
        if let Some(routes) = &self.cluster {
            routes.committed.lock().extend(offsets.iter().cloned());
        }
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        self.stats.committed.lock().extend(offsets.iter().cloned());
        metrics::histogram!("halite_kafka_commit_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        for ((topic, partition), offset) in offsets {
            let labels = [
                ("topic", topic.clone()),
                ("partition", partition.to_string()),
            ];
            metrics::gauge!("halite_kafka_committed_offset", &labels).set(*offset as f64);
        }
    }
}

/// The high watermark librdkafka cached from the partition's last fetch
/// response. (Asking the broker is a ListOffsets request, which Tansu
/// answers wrongly, and a round trip per partition.)
pub(super) fn cached_high_watermark<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
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
