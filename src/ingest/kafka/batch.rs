//! A partition's messages as the consumer hands them to a writer, and
//! what a writer decoded from them.

use std::sync::Arc;
use std::time::Instant;

use crate::catalog::TableName;
use crate::ingest::Format;
use crate::ingest::line_protocol::Precision;

/// Messages of one partition, written together.
pub(super) struct Batch {
    pub(super) topic: Arc<TopicRoute>,
    pub(super) partition: i32,
    pub(super) generation: u64,
    /// Cluster mode: the partition's incarnation when the batch was
    /// fetched (see `shared::ClusterRoutes`); a batch of an earlier one
    /// is dropped instead of written.
    pub(super) incarnation: u64,
    /// Its place among the partition's batches handed to the writers.
    pub(super) seq: u64,
    pub(super) started: Instant,
    /// Every payload, back to back: one buffer per batch rather than one
    /// allocation per message.
    pub(super) payloads: Vec<u8>,
    /// Offset and end (in `payloads`) of each message.
    pub(super) messages: Vec<(i64, usize)>,
}

impl Batch {
    pub(super) fn push(&mut self, offset: i64, payload: &[u8]) {
        self.payloads.extend_from_slice(payload);
        self.messages.push((offset, self.payloads.len()));
    }

    pub(super) fn bytes(&self) -> usize {
        self.payloads.len()
    }

    pub(super) fn first_offset(&self) -> Option<i64> {
        self.messages.first().map(|m| m.0)
    }

    pub(super) fn last_offset(&self) -> Option<i64> {
        self.messages.last().map(|m| m.0)
    }

    /// Each message's offset and payload.
    pub(super) fn iter(&self) -> impl Iterator<Item = (i64, &[u8])> {
        let starts = std::iter::once(0).chain(self.messages.iter().map(|m| m.1));
        self.messages
            .iter()
            .zip(starts)
            .map(|(&(offset, end), start)| (offset, &self.payloads[start..end]))
    }
}

pub(super) struct TopicRoute {
    pub(super) topic: String,
    /// The table the points go to; of a topic mapped to a database, the
    /// one its positions are noted in (the database's `__tags`).
    pub(super) table: TableName,
    /// A topic mapped to a database: each measurement's table.
    pub(super) database: Option<String>,
    pub(super) format: Format,
    pub(super) precision: Option<Precision>,
}

impl TopicRoute {
    /// What metrics call the route's table (`<db>:*` for a database).
    pub(super) fn table_label(&self) -> String {
        match &self.database {
            Some(db) => format!("{db}:*"),
            None => self.table.to_string(),
        }
    }
}

/// A batch's rows and bad messages, decoded ahead of its turn.
pub(super) struct Decoded {
    /// The rows of each table the batch writes (one, but for a topic
    /// mapped to a database).
    pub(super) tables: Vec<(crate::catalog::TableDescriptor, crate::table::RoutedRows)>,
    /// Bad messages by their index in the batch.
    pub(super) bad: Vec<(usize, BadMessage)>,
}

/// Why a message is bad: `kind` is the metric label (`unreadable`: not
/// UTF-8 or not JSON points; `bad_point`: a point that does not fit the
/// table; `no_points`), `reason` the full text for logs and dead letters.
pub(super) struct BadMessage {
    pub(super) kind: &'static str,
    pub(super) reason: String,
}
