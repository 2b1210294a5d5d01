//! Cluster mode's HTTP writes: the rows a write encoded go to the topic
//! that feeds their table, each bucket's rows to the partition that
//! carries the bucket (as rows messages, `ingest/rows_message.rs`, keyed
//! by bucket), and the write is answered once the brokers acknowledged
//! them all (`acks=all`). One log, two doors: the partition's owner
//! writes them into its regions like any other message (docs/cluster.md).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded};
use rdkafka::ClientContext;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext};

use super::KafkaError;
use super::config::KafkaConfig;
use super::polled_producer::PolledProducer;
use crate::catalog::{TableDescriptor, TableName};
use crate::cell::EntryBatch;
use crate::error::Error;
use crate::ingest::RowsSink;
use crate::ingest::rows_message::{encode_rows_message, encode_table_rows_message};
use crate::store::cluster::partition_of_bucket;
use crate::table::RoutedRows;

/// Encoded rows past this many bytes go in more than one message (brokers
/// refuse messages past about 1 MB by default).
const MESSAGE_BYTES: usize = 512 * 1024;

/// How long a write waits for the brokers' acknowledgement.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Hands each message's delivery report to the write waiting for it.
struct Deliveries;

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<Sender<Result<(), String>>>;

    fn delivery(&self, result: &DeliveryResult<'_>, reply: Self::DeliveryOpaque) {
        let _ = reply.send(result.as_ref().map(|_| ()).map_err(|(e, _)| e.to_string()));
    }
}

/// Writes a table's rows into its topic.
pub struct TopicWriter {
    producer: PolledProducer<Deliveries>,
    /// Per table: its topic and the topic's partition count.
    routes: HashMap<TableName, (String, u32)>,
    /// Per database mapped to a topic: the topic and its partition count
    /// (it carries the rows of every table of open tag sets of the
    /// database, each message naming its table).
    databases: HashMap<String, (String, u32)>,
}

/// Messages sent and not yet acknowledged.
pub struct PendingTopicWrite {
    replies: Vec<Receiver<Result<(), String>>>,
}

impl TopicWriter {
    /// A producer over the brokers of `[kafka]` for every table a topic
    /// feeds (partition counts read from the brokers).
    pub fn start(config: &KafkaConfig) -> Result<TopicWriter, KafkaError> {
        let mut pc = config.producer_config();
        pc.set("acks", "all");
        let producer = PolledProducer::create(&pc, Deliveries)?;
        let mut routes = HashMap::new();
        let mut databases = HashMap::new();
        for t in &config.topics {
            let md = producer
                .client()
                .fetch_metadata(Some(&t.topic), Duration::from_secs(10))?;
            let partitions = md
                .topics()
                .iter()
                .find(|m| m.name() == t.topic)
                .map_or(0, |m| m.partitions().len() as u32);
            if partitions == 0 {
                return Err(KafkaError::Topic {
                    topic: t.topic.clone(),
                    reason: "the topic has no partitions (create it first)".into(),
                });
            }
            // A database's topic of remote writes feeds its samples
            // table alone; one of lines or JSON every table of the
            // database, its rows messages naming theirs.
            match &t.database {
                Some(db) if t.format == crate::ingest::Format::RemoteWrite => {
                    let samples = TableName::parse(&format!(
                        "{db}:{}",
                        crate::ingest::databases::SAMPLES_TABLE
                    ))
                    .map_err(|e| KafkaError::Topic {
                        topic: t.topic.clone(),
                        reason: e.to_string(),
                    })?;
                    routes.insert(samples, (t.topic.clone(), partitions));
                    continue;
                }
                Some(db) => {
                    databases.insert(db.clone(), (t.topic.clone(), partitions));
                    continue;
                }
                None => {}
            }
            let table = TableName::parse(&t.table).map_err(|e| KafkaError::Topic {
                topic: t.topic.clone(),
                reason: e.to_string(),
            })?;
            routes.insert(table, (t.topic.clone(), partitions));
        }
        Ok(TopicWriter {
            producer,
            routes,
            databases,
        })
    }

    /// Whether database `db` has a topic of lines or JSON (its
    /// measurements' tables can be written in cluster mode).
    pub fn has_database(&self, db: &str) -> bool {
        self.databases.contains_key(db)
    }

    /// Whether `table` has a topic: its own, or its database's.
    pub fn carries(&self, table: &TableName) -> bool {
        self.routes.contains_key(table) || self.has_database(&table.namespace)
    }

    fn send(
        &self,
        (topic, named): (&str, Option<&str>),
        partition: u32,
        bucket: u32,
        rows: &EntryBatch,
        replies: &mut Vec<Receiver<Result<(), String>>>,
    ) -> Result<(), Error> {
        let payload = match named {
            Some(table) => encode_table_rows_message(table, rows),
            None => encode_rows_message(rows),
        };
        let key = bucket.to_string();
        let (tx, rx) = bounded(1);
        let record = BaseRecord::with_opaque_to(topic, Box::new(tx))
            .partition(partition as i32)
            .key(&key)
            .payload(&payload);
        self.producer.send(record).map_err(|(e, _)| {
            Error::Unavailable(format!(
                "the brokers did not take the write for topic `{topic}` ({e}); try again"
            ))
        })?;
        replies.push(rx);
        Ok(())
    }
}

impl RowsSink for TopicWriter {
    type Pending = PendingTopicWrite;

    fn submit_rows(
        &self,
        table: &TableDescriptor,
        rows: RoutedRows,
    ) -> Result<PendingTopicWrite, Error> {
        let database = || {
            self.databases
                .get(&table.name.namespace)
                .filter(|_| table.key.is_open_tags())
                .map(|(topic, p)| ((topic.as_str(), Some(table.name.table.as_str())), p))
        };
        let (to, partitions) = self
            .routes
            .get(&table.name)
            .map(|(topic, p)| ((topic.as_str(), None), p))
            .or_else(database)
            .ok_or_else(|| {
                Error::InvalidInput(format!(
                    "table `{}` has no topic under [kafka] topics: in cluster mode a write goes \
                     through its table's topic (or, for a table of open tag sets, its \
                     database's: `database = \"{}\"`)",
                    table.name, table.name.namespace
                ))
            })?;
        // Rows by bucket, from the buckets of the regions they were split by.
        let mut by_bucket: BTreeMap<u32, EntryBatch> = BTreeMap::new();
        for (id, batch) in rows.region_ids.iter().zip(&rows.batches) {
            if batch.is_empty() {
                continue;
            }
            let start = table
                .regions
                .iter()
                .find(|r| r.id == *id)
                .map_or(&[][..], |r| r.start.as_slice());
            let bucket = table.key.salt_bucket(start).unwrap_or(0);
            let into = by_bucket.entry(bucket).or_default();
            for i in 0..batch.rows() {
                into.push_row_from(batch, i);
            }
        }
        let mut replies = Vec::new();
        for (bucket, batch) in by_bucket {
            let partition = partition_of_bucket(bucket, *partitions);
            let mut piece = EntryBatch::new();
            for i in 0..batch.rows() {
                piece.push_row_from(&batch, i);
                if piece.bytes() >= MESSAGE_BYTES {
                    self.send(to, partition, bucket, &piece, &mut replies)?;
                    piece = EntryBatch::new();
                }
            }
            if !piece.is_empty() {
                self.send(to, partition, bucket, &piece, &mut replies)?;
            }
        }
        Ok(PendingTopicWrite { replies })
    }

    fn wait_rows(&self, pending: PendingTopicWrite) -> Result<(), Error> {
        for rx in pending.replies {
            match rx.recv_timeout(DELIVERY_TIMEOUT) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(Error::Unavailable(format!(
                        "the brokers did not acknowledge the write ({e}); try again"
                    )));
                }
                Err(_) => {
                    return Err(Error::Unavailable(
                        "the brokers did not acknowledge the write in time; try again".into(),
                    ));
                }
            }
        }
        Ok(())
    }
}
