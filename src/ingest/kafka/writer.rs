//! The writer threads: a partition's batches decoded in parallel and
//! handed to the store in offset order, deletes run in their turn, and
//! each batch marked done once durable.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::batch::{BadMessage, Batch, Decoded, TopicRoute};
use super::dead_letter::DeadLetters;
use super::deletes::{DeleteFailure, delete_message};
use super::offsets::{BatchState, PartitionKey, Waiting};
use super::shared::Shared;
use crate::clock::Clock;
use crate::ingest::refusal::Refusals;
use crate::ingest::{Format, PointEncoder, Uniquifiers};
use crate::region::wal::record::SourcePosition;
use crate::schema::Durability;
use crate::store::{PendingBatch, Store};

pub(super) fn writer_loop(
    rx: Receiver<Batch>,
    done: Sender<Submitted>,
    store: &Store,
    shared: &Shared,
    clock: &dyn Clock,
    dead_letters: &Option<DeadLetters>,
) {
    for batch in rx {
        // Decoded here, in parallel with the other writers...
        let decoded = decode_ahead(&batch, store, shared, clock);
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
pub(super) fn completion_loop(rx: Receiver<Submitted>, store: &Store, shared: &Shared) {
    for s in rx {
        finish_batch(s, store, shared);
    }
}

/// A batch handed to the store, its durability still to come.
pub(super) struct Submitted {
    pub(super) key: PartitionKey,
    pub(super) first: i64,
    pub(super) last: i64,
    pub(super) messages: u64,
    pub(super) route: Arc<TopicRoute>,
    /// Each table's write (none when there was nothing to write, or
    /// nothing could be).
    pub(super) writes: Vec<(PendingBatch, Durability, crate::catalog::TableName)>,
    pub(super) points: u64,
    pub(super) cells: u64,
    /// Something already failed: the batch is `Failed` whatever comes.
    pub(super) failed: bool,
    /// Cluster mode: the partition's incarnation the batch belongs to.
    pub(super) incarnation: u64,
}

/// Marks a submitted batch finished once its points are durable (or
/// written, for tables that are durable later).
pub(super) fn finish_batch(s: Submitted, store: &Store, shared: &Shared) {
    let route = &s.route;
    let mut state = if s.failed {
        BatchState::Failed
    } else {
        BatchState::Done
    };
    // A database's topic writes tables that log their writes (its
    // decoding refuses SKIP_WAL ones), so one wait covers them all.
    for (pending, durability, table) in s.writes {
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
                // A cluster's points are safe in the topic, and committed
                // from the manifests: written is done.
                if state != BatchState::Failed && shared.cluster.is_none() {
                    state = match durability {
                        Durability::SyncWal => state,
                        // Never a weaker wait than an earlier table's.
                        Durability::AsyncWal if state == BatchState::Done => {
                            BatchState::Written(Waiting::WalSync)
                        }
                        Durability::AsyncWal => state,
                        // At most one a batch: only a topic of one table
                        // writes SKIP_WAL tables.
                        Durability::SkipWal => match store.region_seqs(&table, false) {
                            Ok(seqs) => BatchState::Written(Waiting::Flush {
                                table: table.clone(),
                                seqs,
                            }),
                            Err(e) => {
                                tracing::error!(table = %table, error = %e, "reading sequence ids failed");
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
            ("table", route.table_label()),
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
    if let Some(routes) = &shared.cluster
        && state == BatchState::Failed
    {
        // Later batches would move the regions' positions past this one:
        // the partition is read again from its manifests' position.
        tracing::warn!(topic = %route.topic, partition = s.key.1, first_offset = s.first, "a batch was not written; the partition is taken again and replayed from its manifests");
        routes.retake.lock().insert(s.key.clone());
    }
    let drained_at = {
        let mut tracker = shared.tracker.lock();
        tracker.finished(&s.key, s.first, s.last, state);
        tracker.drained_position(&s.key)
    };
    shared.batch_done.notify_all();
    let current = shared
        .cluster
        .as_ref()
        .is_none_or(|routes| routes.incarnation(&s.key) == s.incarnation);
    if let Some(durable_below) = drained_at.filter(|_| current) {
        note_drained_position(&s.route, &s.key, durable_below, store, shared);
    }
}

/// The partition has nothing in the pipeline and everything before
/// `durable_below` is durable: the store learns it, so a crash before the
/// next Kafka commit resumes exactly there rather than at the position the
/// last batch's records carried (what was durable before that batch).
pub(super) fn note_drained_position(
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

/// Decodes a batch off the ordered path; `None` when it must be decoded
/// in its turn: it may hold a delete message (which needs the points
/// before it in the store first), or its table cannot take rows (the
/// turn reports it).
pub(super) fn decode_ahead(
    batch: &Batch,
    store: &Store,
    shared: &Shared,
    clock: &dyn Clock,
) -> Option<Decoded> {
    let route = &batch.topic;
    if let Some(db) = &route.database {
        return decode_database(batch, db, store, shared, clock).ok();
    }
    if route.format == Format::Json
        && batch
            .iter()
            .any(|(_, p)| memchr::memmem::find(p, b"\"delete\"").is_some())
    {
        return None;
    }
    // The layout the store routes by now (in cluster mode the catalog can
    // be ahead of it for a moment, while a refresh lays the table out).
    let desc = store.table(&route.table).ok()?.desc.clone();
    let dictionary = dictionary_of(&desc, store, shared).ok()?;
    let mut encoder = encoder_of(&desc, dictionary.as_deref(), route, store).ok()?;
    encoder.reserve_for_bytes(batch.bytes());
    let stream = Uniquifiers::stream(&route.topic, batch.partition);
    let now = clock.now_ms();
    let mut bad = Vec::new();
    for (i, (offset, payload)) in batch.iter().enumerate() {
        encoder.set_uniquifiers(Uniquifiers::Message { stream, offset });
        if let Err(reason) = decode_message(&mut encoder, route, payload, now, store.is_cluster()) {
            bad.push((i, reason));
        }
    }
    // What the points use of the dictionary is durable before they are
    // handed on; a failure decodes the batch again in its turn, which
    // fails it if this fails again.
    if encoder.needs_durable_dictionary() {
        dictionary.as_deref()?.make_durable(store).ok()?;
    }
    let entries = encoder.finish();
    Some(Decoded {
        tables: vec![(desc, entries)],
        bad,
    })
}

/// The dictionary a table's points take their UIDs from: its namespace's,
/// the one every door shares, when the table has open tag sets.
fn dictionary_of(
    desc: &crate::catalog::TableDescriptor,
    store: &Store,
    shared: &Shared,
) -> crate::error::Result<Option<Arc<crate::series::Dictionary>>> {
    if !desc.key.is_open_tags() {
        return Ok(None);
    }
    shared
        .tag_sets
        .dictionary(store, &desc.name.namespace)
        .map(Some)
}

/// An encoder of `desc`'s points, with `dictionary` for a table of open
/// tag sets. Line protocol and JSON into such a table are one
/// measurement's points, the table's own (as InfluxQL reads the table);
/// remote writes bring every metric of a samples table.
fn encoder_of<'t>(
    desc: &'t crate::catalog::TableDescriptor,
    dictionary: Option<&'t crate::series::Dictionary>,
    route: &TopicRoute,
    store: &Store,
) -> Result<PointEncoder<'t>, String> {
    let mut encoder = PointEncoder::new(desc, store.max_value_size())?;
    if let Some(d) = dictionary {
        encoder.set_dictionary(d);
        if route.format != Format::RemoteWrite {
            encoder.one_measurement();
        }
    }
    Ok(encoder)
}

/// Makes what `encoder`'s points use of the dictionary durable, so they
/// may be handed to the store; `false` (logged) when that failed.
fn dictionary_durable(
    encoder: &PointEncoder<'_>,
    dictionary: Option<&crate::series::Dictionary>,
    store: &Store,
    route: &TopicRoute,
) -> bool {
    let (true, Some(d)) = (encoder.needs_durable_dictionary(), dictionary) else {
        return true;
    };
    match d.make_durable(store) {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(
                topic = %route.topic,
                error = %e,
                "writing the dictionary failed; its partition's commits stop before the batch"
            );
            false
        }
    }
}

/// Hands a batch's points to the store (decoding them first unless
/// `decoded` did), carrying out its delete messages in place; bad messages
/// go to the dead-letter topic. What comes back waits for durability in
/// [`finish_batch`]. Runs in the partition's order.
pub(super) fn submit_batch(
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
        writes: Vec::new(),
        points: 0,
        cells: 0,
        failed: false,
        incarnation: batch.incarnation,
    };
    if let Some(routes) = &shared.cluster
        && routes.incarnation(&submitted.key) != batch.incarnation
    {
        // Fetched before the partition was taken again (or let go): the
        // replay from the manifests' position reads it again.
        return submitted;
    }
    let mut bad: Vec<(i64, &[u8], BadMessage)> = Vec::new();
    let decoded = match (decoded, &route.database) {
        (Some(d), _) => Some(d),
        (None, Some(db)) => match decode_database(batch, db, store, shared, clock) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::error!(topic = %route.topic, error = %e, "cannot write the topic's batch");
                submitted.failed = true;
                return submitted;
            }
        },
        (None, None) => None,
    };
    let tables = match decoded {
        Some(d) => {
            let payloads: Vec<(i64, &[u8])> = batch.iter().collect();
            bad.extend(
                d.bad
                    .into_iter()
                    .map(|(i, b)| (payloads[i].0, payloads[i].1, b)),
            );
            d.tables
        }
        None => match decode_in_turn(batch, store, shared, clock, &mut submitted, &mut bad) {
            Some(decoded) => vec![decoded],
            None => return submitted,
        },
    };
    for (desc, entries) in tables {
        if !write_table(batch, &desc, entries, store, shared, &mut submitted) {
            return submitted;
        }
    }
    if bad.is_empty() {
        return submitted;
    }
    dead_letter(batch, bad, shared, dead_letters, &mut submitted);
    submitted
}

/// Hands one table's rows of a batch to the store (in cluster mode the
/// rows of another partition's buckets on to it first); `false` when the
/// batch is done with, failed or no longer this node's.
fn write_table(
    batch: &Batch,
    desc: &crate::catalog::TableDescriptor,
    mut entries: crate::table::RoutedRows,
    store: &Store,
    shared: &Shared,
    submitted: &mut Submitted,
) -> bool {
    let route = &batch.topic;
    if shared.cluster.is_some() {
        match store.split_off_foreign_rows(&mut entries, &route.topic, batch.partition as u32) {
            // Fenced or revoked meanwhile: the partition's owner writes it.
            None => return false,
            Some(foreign) if foreign.rows() == 0 => {}
            Some(foreign) => {
                let misrouted = foreign.rows();
                shared
                    .stats
                    .misrouted
                    .fetch_add(misrouted as u64, Ordering::Relaxed);
                metrics::counter!("halite_kafka_misrouted_points_total", "topic" => route.topic.clone())
                    .increment(misrouted as u64);
                tracing::debug!(
                    topic = %route.topic,
                    partition = batch.partition,
                    first_offset = submitted.first,
                    points = misrouted,
                    "points of buckets another partition carries go on to it"
                );
                // Acknowledged by the brokers before this batch counts as
                // written: a failure reads the batch again (and sends them
                // again: the same cells, written twice, are one).
                let sent = shared
                    .forward
                    .as_ref()
                    .ok_or_else(|| crate::error::Error::Internal("no forwarding producer".into()))
                    .and_then(|f| {
                        use crate::ingest::RowsSink;
                        let pending = f.submit_rows(desc, foreign)?;
                        f.wait_rows(pending)
                    });
                if let Err(e) = sent {
                    tracing::error!(
                        topic = %route.topic,
                        partition = batch.partition,
                        first_offset = submitted.first,
                        error = %e,
                        "sending points on to their bucket's partition failed; the batch is read again"
                    );
                    submitted.failed = true;
                    return false;
                }
            }
        }
    }
    submitted.points += entries.rows() as u64;
    submitted.cells += entries.cells() as u64;
    if entries.rows() > 0 {
        let origin = if shared.cluster.is_some() {
            // In cluster mode the region's position says which messages
            // its MemStore and files hold: a partition's rows reach a
            // region in offset order, so all of this batch's and every
            // earlier one's.
            Some(SourcePosition {
                stream: route.topic.clone(),
                shard: batch.partition as u32,
                durable_below: submitted.last as u64 + 1,
            })
        } else {
            // The record carries what is durable before it, so a restart
            // can resume there even if no Kafka commit said so.
            shared
                .tracker
                .lock()
                .durable_below(&submitted.key)
                .map(|durable_below| SourcePosition {
                    stream: route.topic.clone(),
                    shard: batch.partition as u32,
                    durable_below: durable_below as u64,
                })
        };
        match store.submit_encoded(&desc.name, entries, origin) {
            Ok(pending) => submitted
                .writes
                .push((pending, desc.durability, desc.name.clone())),
            Err(e) => {
                tracing::error!(
                    topic = %route.topic,
                    partition = batch.partition,
                    first_offset = submitted.first,
                    error = %e,
                    "writing a batch failed; its partition's commits stop before it"
                );
                submitted.failed = true;
                return false;
            }
        }
    }
    true
}

/// Counts, logs and dead-letters a batch's bad messages (a failure to
/// send them fails the batch, which is read again).
fn dead_letter(
    batch: &Batch,
    bad: Vec<(i64, &[u8], BadMessage)>,
    shared: &Shared,
    dead_letters: Option<&DeadLetters>,
    submitted: &mut Submitted,
) {
    let route = &batch.topic;
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
        return; // counted and logged is all that is asked
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
}

/// Decodes a batch in its turn, carrying out its delete messages as they
/// come (the points before one are written and made readable first);
/// `None` when the batch failed (`submitted` says so).
pub(super) fn decode_in_turn<'b>(
    batch: &'b Batch,
    store: &Store,
    shared: &Shared,
    clock: &dyn Clock,
    submitted: &mut Submitted,
    bad: &mut Vec<(i64, &'b [u8], BadMessage)>,
) -> Option<(crate::catalog::TableDescriptor, crate::table::RoutedRows)> {
    let route = &batch.topic;
    let desc = match store.table(&route.table) {
        Ok(t) => t.desc.clone(),
        Err(e) => {
            tracing::error!(topic = %route.topic, error = %e, "cannot write the topic's batch");
            submitted.failed = true;
            return None;
        }
    };
    let now = clock.now_ms();
    let dictionary = match dictionary_of(&desc, store, shared) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(topic = %route.topic, error = %e, "cannot open the table's dictionary");
            submitted.failed = true;
            return None;
        }
    };
    let mut encoder = match encoder_of(&desc, dictionary.as_deref(), route, store) {
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
            if shared.cluster.is_some() {
                // A delete reaches every bucket, and a cluster's buckets
                // are owned partition by partition: not carried out.
                bad.push((
                    offset,
                    payload,
                    BadMessage {
                        kind: "bad_delete",
                        reason: "delete messages are not carried out in cluster mode yet \
                                 (docs/cluster.md); delete through a single node's API"
                            .into(),
                    },
                ));
                continue;
            }
            // A delete applies to every point before it in the partition
            // and to none after: those before are made readable first.
            let Ok(fresh) = encoder_of(&desc, dictionary.as_deref(), route, store) else {
                submitted.failed = true; // the table made one above
                return None;
            };
            if !dictionary_durable(&encoder, dictionary.as_deref(), store, route) {
                submitted.failed = true;
                return None;
            }
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
                shared.deletes.delete_points(&route.table, delete)
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
        if let Err(reason) = decode_message(&mut encoder, route, payload, now, store.is_cluster()) {
            bad.push((offset, payload, reason));
        }
    }
    if !dictionary_durable(&encoder, dictionary.as_deref(), store, route) {
        submitted.failed = true;
        return None;
    }
    let entries = encoder.finish();
    Some((desc, entries))
}

/// Makes every write of the table durable as its durability says (a WAL
/// sync for ASYNC_WAL, a flush for SKIP_WAL) and records in the store that
/// the partition is durable below `durable_below`.
pub(super) fn durable_through(
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
pub(super) fn wait_for_batches_before(shared: &Shared, p: &PartitionKey, first: i64) {
    let mut tracker = shared.tracker.lock();
    while tracker.sent_before(p, first) {
        shared
            .batch_done
            .wait_for(&mut tracker, Duration::from_millis(50));
    }
}

/// Adds a message's points to `encoder`; a message with any bad point is
/// reported bad (its good points are still written: rewriting them when the
/// dead letter is replayed is harmless).
pub(super) fn decode_message(
    encoder: &mut PointEncoder<'_>,
    route: &TopicRoute,
    payload: &[u8],
    now: u64,
    shared_dictionary: bool,
) -> Result<(), BadMessage> {
    if crate::ingest::rows_message::is_rows_message(payload) {
        // Rows carry their UIDs as the node that made them had them: a
        // table of open tag sets takes points, whose names it looks up,
        // but where every node's UIDs are the same (a cluster's shared
        // dictionary: a remote write into a database's samples topic).
        if encoder.has_open_tags() && !shared_dictionary {
            return Err(BadMessage {
                kind: "bad_rows",
                reason: format!(
                    "a rows message for table `{}`, which has open tag sets: send it points \
                     (line protocol, JSON or remote write), whose names its dictionary gives UIDs",
                    route.table
                ),
            });
        }
        // An HTTP write a cluster's node passed through the topic.
        return crate::ingest::rows_message::decode_rows_message(payload)
            .and_then(|rows| encoder.add_encoded_rows(rows))
            .map_err(|reason| BadMessage {
                kind: "bad_rows",
                reason,
            });
    }
    let rows_before = encoder.rows();
    let errors = encoder
        .add_body(route.format, payload, route.precision, now)
        .map_err(|reason| BadMessage {
            kind: "unreadable",
            reason,
        })?;
    if !errors.is_empty() {
        return Err(bad_points(route.format, &errors));
    }
    // Line protocol without a single point is not a message we understand.
    if route.format == Format::Line && encoder.rows() == rows_before {
        return Err(no_points());
    }
    Ok(())
}

fn no_points() -> BadMessage {
    BadMessage {
        kind: "no_points",
        reason: "message holds no points".into(),
    }
}

/// A message some of whose points (by number, in order) were refused.
fn bad_points(format: Format, errors: &Refusals) -> BadMessage {
    let what = match format {
        Format::Line => "line",
        Format::Json => "point",
        Format::RemoteWrite => "series",
    };
    // The first few say what is wrong; all of them could outgrow the
    // log line and the dead letter's headers (a broker refuses a
    // message past its size limit).
    const SHOWN: usize = 5;
    let mut reason = errors
        .first(SHOWN)
        .into_iter()
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
    BadMessage {
        kind: "bad_point",
        reason,
    }
}

/// A point of a message of a database's topic.
enum DatabasePoint<'b> {
    Line(&'b str),
    Json(crate::ingest::json::JsonPoint),
    /// Rows an HTTP write on another node of a cluster encoded.
    Rows(Vec<Vec<crate::cell::Entry>>),
}

/// The table of a measurement a batch of a database's topic names.
enum TableSlot {
    Found(Arc<crate::table::Table>),
    /// New: made with the others after the batch is read.
    ToMake(crate::catalog::TableName),
    /// Its points are refused, for this reason.
    Refused(String),
}

impl TableSlot {
    /// `table`, unless it does not log its writes (a topic mapped to a
    /// database writes only tables that do).
    fn found(table: Arc<crate::table::Table>) -> Result<TableSlot, String> {
        if table.desc.durability == Durability::SkipWal {
            return Err(format!(
                "table `{}` is SKIP_WAL: a topic mapped to a database writes tables that log \
                 their writes",
                table.desc.name
            ));
        }
        Ok(TableSlot::Found(table))
    }
}

/// A message of a database's topic, read: its points by table, and what
/// was refused before they reach a table's encoder.
struct DatabaseMessage<'b> {
    offset: i64,
    /// Table (index into the batch's), number in the message, point.
    points: Vec<(usize, usize, DatabasePoint<'b>)>,
    refused: Refusals,
}

/// Decodes a batch of a topic mapped to a database: each line (or JSON
/// point) into its measurement's table (`ingest::databases`), made on its
/// first point as InfluxDB's `/write` makes it, with the one dictionary
/// of the database. `Err` when the batch cannot be written (it fails, and
/// is read again).
fn decode_database(
    batch: &Batch,
    db: &str,
    store: &Store,
    shared: &Shared,
    clock: &dyn Clock,
) -> crate::error::Result<Decoded> {
    use crate::ingest::databases;
    let route = &batch.topic;
    let dictionary = shared.tag_sets.dictionary(store, db)?;
    let now = clock.now_ms();
    // The database's default retention policy, as `/write` without `rp`.
    let target =
        crate::ingest::retention::write_target(store, db, None, now).map_err(|e| e.to_string());
    let line_precision = route.precision.unwrap_or_default();
    let json_precision = route
        .precision
        .unwrap_or(crate::ingest::line_protocol::Precision::Milliseconds);
    // Every point's table is found, or named to be made, before any
    // encoder borrows the tables; the new ones are made at once after the
    // batch is read.
    let mut slots: Vec<TableSlot> = Vec::new();
    let mut table_of: std::collections::HashMap<String, Result<usize, String>> =
        std::collections::HashMap::new();
    // A measurement's table is made on its first point; a rows message
    // (an HTTP write another node of a cluster passed on) names a table
    // that node made, which a catalog refresh finds.
    let mut table_index =
        |measurement: &str, rows: bool| -> crate::error::Result<Result<usize, String>> {
            if let Some(known) = table_of.get(measurement) {
                return Ok(known.clone());
            }
            let name = match rows {
                false => match &target {
                    Ok(target) => databases::measurement_table(&target.tables, measurement)
                        .map_err(|bad| bad.to_string()),
                    Err(no_policy) => Err(no_policy.clone()),
                },
                true => crate::catalog::TableName::parse(&format!("{db}:{measurement}"))
                    .map_err(|e| e.to_string()),
            };
            let found = match name {
                Err(bad) => Err(bad),
                // Named by another node, which made it: a table the catalog
                // lacks is a bad message, not a batch to read again.
                Ok(name) if rows => match databases::existing_table(store, &name) {
                    Err(crate::error::Error::NotFound(_)) => Err(format!(
                        "a rows message for table `{name}`, which the catalog does not hold"
                    )),
                    got => TableSlot::found(got?).map(|slot| {
                        slots.push(slot);
                        slots.len() - 1
                    }),
                },
                Ok(name) => {
                    let slot = match store.table(&name) {
                        Ok(table) => TableSlot::found(table),
                        Err(crate::error::Error::NotFound(_)) => Ok(TableSlot::ToMake(name)),
                        Err(e) => return Err(e),
                    };
                    slot.map(|slot| {
                        slots.push(slot);
                        slots.len() - 1
                    })
                }
            };
            table_of.insert(measurement.to_string(), found.clone());
            Ok(found)
        };
    let mut bad = Vec::new();
    let mut messages = Vec::new();
    for (i, (offset, payload)) in batch.iter().enumerate() {
        let mut message = DatabaseMessage {
            offset,
            points: Vec::new(),
            refused: Refusals::default(),
        };
        let unreadable = |reason: String| BadMessage {
            kind: "unreadable",
            reason,
        };
        if crate::ingest::rows_message::is_table_rows_message(payload) {
            let bad_rows = |reason: String| BadMessage {
                kind: "bad_rows",
                reason,
            };
            // Their UIDs are a cluster's shared dictionary's: a single
            // node counts its own.
            if !store.is_cluster() {
                bad.push((
                    i,
                    bad_rows(format!(
                        "a rows message of a cluster's node, whose UIDs are the cluster's: \
                         this node keeps database `{db}`'s dictionary itself; send it points"
                    )),
                ));
                continue;
            }
            match crate::ingest::rows_message::decode_table_rows_message(payload) {
                Err(reason) => bad.push((i, bad_rows(reason))),
                Ok((table, rows)) => {
                    match table_index(table, true)? {
                        Ok(t) => message.points.push((t, 1, DatabasePoint::Rows(rows))),
                        Err(reason) => message.refused.push(1, reason.into()),
                    }
                    messages.push((i, message));
                }
            }
            continue;
        }
        match route.format {
            Format::Line => {
                let text = match std::str::from_utf8(payload) {
                    Ok(t) => t,
                    Err(e) => {
                        bad.push((i, unreadable(format!("line protocol must be UTF-8: {e}"))));
                        continue;
                    }
                };
                for (number, line) in crate::ingest::line_protocol::lines(text) {
                    match table_index(&databases::measurement_of(line), false)? {
                        Ok(t) => message.points.push((t, number, DatabasePoint::Line(line))),
                        Err(reason) => message.refused.push(number, reason.into()),
                    }
                }
            }
            Format::Json => {
                if delete_message(payload).is_some() {
                    bad.push((
                        i,
                        BadMessage {
                            kind: "bad_delete",
                            reason: format!(
                                "delete messages are carried out in a topic mapped to a table; \
                                 this one is mapped to database `{db}`"
                            ),
                        },
                    ));
                    continue;
                }
                let points = match crate::ingest::json::points(payload) {
                    Ok(p) => p,
                    Err(reason) => {
                        bad.push((i, unreadable(reason)));
                        continue;
                    }
                };
                for (k, point) in points.into_iter().enumerate() {
                    let read = point.and_then(crate::ingest::json::JsonPoint::read);
                    match read {
                        Err(reason) => message.refused.push(k + 1, reason.into()),
                        Ok(jp) => match table_index(&jp.metric, false)? {
                            Ok(t) => message.points.push((t, k + 1, DatabasePoint::Json(jp))),
                            Err(reason) => message.refused.push(k + 1, reason.into()),
                        },
                    }
                }
            }
            // Mapped to the samples table when the route was made.
            Format::RemoteWrite => {
                return Err(crate::error::Error::Internal(
                    "remote writes of a database's topic go to its samples table".into(),
                ));
            }
        }
        messages.push((i, message));
    }
    let to_make: Vec<crate::catalog::TableName> = slots
        .iter()
        .filter_map(|slot| match slot {
            TableSlot::ToMake(name) => Some(name.clone()),
            _ => None,
        })
        .collect();
    if !to_make.is_empty() {
        let template = &shared.template;
        let mut made =
            databases::tables_or_make(store, &to_make, template.max_measurements, |name| {
                template.measurement_request(name, target.as_ref().ok().and_then(|t| t.ttl_secs))
            })?
            .into_iter();
        for slot in &mut slots {
            if matches!(slot, TableSlot::ToMake(_)) {
                *slot = match made.next().expect("a table or a refusal per name") {
                    Ok(table) => TableSlot::found(table).unwrap_or_else(TableSlot::Refused),
                    Err(no_table) => TableSlot::Refused(no_table.to_string()),
                };
            }
        }
    }
    // An encoder per slot whose table was found (`None`: refused).
    let mut encoders: Vec<Option<PointEncoder>> = Vec::with_capacity(slots.len());
    for slot in &slots {
        let TableSlot::Found(t) = slot else {
            encoders.push(None);
            continue;
        };
        let mut encoder = PointEncoder::new(&t.desc, store.max_value_size())
            .map_err(crate::error::Error::InvalidInput)?;
        if t.desc.key.is_open_tags() {
            encoder.set_dictionary(&dictionary);
            match target
                .as_ref()
                .ok()
                .and_then(|target| target.tables.measurement_of(&t.desc.name.table))
            {
                Some(m) => encoder.one_measurement_named(m),
                None => encoder.one_measurement(),
            }
            encoder.set_oldest(target.as_ref().ok().and_then(|t| t.oldest_ms));
        }
        encoders.push(Some(encoder));
    }
    let stream = Uniquifiers::stream(&route.topic, batch.partition);
    let mut started: Vec<Option<i64>> = vec![None; encoders.len()];
    for (i, message) in messages {
        let rows_before: usize = encoders.iter().flatten().map(PointEncoder::rows).sum();
        let mut errors = message.refused;
        for (t, number, point) in message.points {
            let Some(encoder) = encoders[t].as_mut() else {
                if let TableSlot::Refused(reason) = &slots[t] {
                    errors.push(number, reason.clone().into());
                }
                continue;
            };
            if started[t] != Some(message.offset) {
                started[t] = Some(message.offset);
                encoder.start_body();
                encoder.set_uniquifiers(Uniquifiers::Message {
                    stream,
                    offset: message.offset,
                });
            }
            let added = match point {
                DatabasePoint::Line(line) => encoder.add_line(number, line, line_precision, now),
                DatabasePoint::Json(jp) => encoder.add_json_point(number, &jp, json_precision, now),
                DatabasePoint::Rows(rows) => encoder.add_encoded_rows(rows).map_err(Into::into),
            };
            if let Err(reason) = added {
                errors.push(number, reason);
            }
        }
        if !errors.is_empty() {
            bad.push((i, bad_points(route.format, &errors)));
        } else if route.format == Format::Line
            && encoders
                .iter()
                .flatten()
                .map(PointEncoder::rows)
                .sum::<usize>()
                == rows_before
        {
            bad.push((i, no_points()));
        }
    }
    // What the points use of the dictionary is durable before they are
    // handed on.
    if encoders
        .iter()
        .flatten()
        .any(PointEncoder::needs_durable_dictionary)
    {
        dictionary.make_durable(store)?;
    }
    // Unreadable messages were found as they were read, the others as
    // they were encoded: dead-lettered in offset order all the same.
    bad.sort_by_key(|(i, _)| *i);
    let tables = slots
        .iter()
        .zip(encoders)
        .filter_map(|(slot, encoder)| match (slot, encoder) {
            (TableSlot::Found(t), Some(encoder)) => Some((t.desc.clone(), encoder.finish())),
            _ => None,
        })
        .filter(|(_, rows)| rows.rows() > 0)
        .collect();
    Ok(Decoded { tables, bad })
}
