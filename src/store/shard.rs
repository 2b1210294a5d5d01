//! The store's writer shards: a write's rows grouped by region, queued to
//! the shard that owns each region, and the shard threads that log and
//! apply them.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use crate::cell::{EntryBatch, RowMutation};
use crate::error::Error;
use crate::region::wal::Wal;
use crate::region::wal::record::SourcePosition;
use crate::region::{PendingWrite, Region};
use crate::table::{Table, region_index};

pub(super) struct WriteJob {
    pub(super) region: Arc<Region>,
    pub(super) rows: Rows,
    pub(super) durability: crate::schema::Durability,
    pub(super) origin: Option<SourcePosition>,
    pub(super) reply: Sender<Submitted>,
}

/// What a shard did with a write job.
pub(super) enum Submitted {
    Pending(PendingWrite),
    /// The region was closed (split, altered, or shutting down): nothing of
    /// the batch was logged or applied, and here are its rows back.
    Refused(Rows),
    Failed(Error),
}

/// The rows of a write: as a caller built them, or already encoded as
/// entries by the ingest path.
pub(super) enum Rows {
    Mutations(Vec<RowMutation>),
    Entries(EntryBatch),
}

impl Rows {
    /// The rows grouped by the region of `table` they belong to.
    pub(super) fn by_region(self, table: &Table) -> Vec<(usize, Rows)> {
        match self {
            Rows::Mutations(rows) => {
                let mut per_region: HashMap<usize, Vec<RowMutation>> = HashMap::new();
                for row in rows {
                    per_region
                        .entry(region_index(table, &row.row))
                        .or_default()
                        .push(row);
                }
                per_region
                    .into_iter()
                    .map(|(i, rows)| (i, Rows::Mutations(rows)))
                    .collect()
            }
            Rows::Entries(batch) => {
                let regions: Vec<usize> = (0..batch.rows())
                    .map(|i| batch.row_key(i).map_or(0, |row| region_index(table, row)))
                    .collect();
                // Sized exactly, so no batch grows (and touches fresh pages)
                // while rows are copied in. Indexed by region: a table has
                // at most a few thousand, and hashing per row cost more.
                let mut sizes = vec![(0usize, 0usize, 0usize); table.regions.len()];
                for (i, &r) in regions.iter().enumerate() {
                    let (bytes, entries) = batch.row_size(i);
                    if let Some(s) = sizes.get_mut(r) {
                        *s = (s.0 + bytes, s.1 + entries, s.2 + 1);
                    }
                }
                if sizes.iter().filter(|s| s.2 > 0).count() <= 1 {
                    return vec![(regions.first().copied().unwrap_or(0), Rows::Entries(batch))];
                }
                let mut per_region: Vec<Option<EntryBatch>> = sizes
                    .into_iter()
                    .map(|(b, e, n)| (n > 0).then(|| EntryBatch::with_capacity(b, e, n)))
                    .collect();
                for (i, r) in regions.into_iter().enumerate() {
                    if let Some(Some(out)) = per_region.get_mut(r) {
                        out.push_row_from(&batch, i);
                    }
                }
                per_region
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, b)| b.map(|b| (i, Rows::Entries(b))))
                    .collect()
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        match self {
            Rows::Mutations(rows) => rows.is_empty(),
            Rows::Entries(batch) => batch.is_empty(),
        }
    }
}

/// Rows written per table (`halite_rows_written_total`), and per salt
/// bucket (`halite_bucket_rows_written_total`): the hot-spotting that
/// salting exists to prevent, made visible. The bucket is the row key's
/// first `width` bytes. Buckets of tables of more than 4096 are not
/// counted (the label would be too many series).
pub(super) fn count_rows_written(table: &Table, rows: &Rows) {
    let total = match rows {
        Rows::Mutations(rows) => rows.len(),
        Rows::Entries(batch) => batch.rows(),
    };
    let name = table.desc.name.to_string();
    metrics::counter!("halite_rows_written_total", "table" => name.clone()).increment(total as u64);
    let Some(salt) = &table.desc.key.salt else {
        return;
    };
    if salt.max_buckets() > 4096 {
        return;
    }
    let mut counts = vec![0u64; salt.max_buckets() as usize];
    let mut add = |row: &[u8]| {
        let bucket = match (salt.width, row) {
            (1, [b, ..]) => usize::from(*b),
            (2, [hi, lo, ..]) => usize::from(u16::from_be_bytes([*hi, *lo])),
            _ => return,
        };
        if let Some(c) = counts.get_mut(bucket) {
            *c += 1;
        }
    };
    match rows {
        Rows::Mutations(rows) => rows.iter().for_each(|r| add(&r.row)),
        Rows::Entries(batch) => (0..batch.rows())
            .filter_map(|i| batch.row_key(i))
            .for_each(add),
    }
    for (bucket, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
        metrics::counter!(
            "halite_bucket_rows_written_total",
            "table" => name.clone(),
            "bucket" => bucket.to_string()
        )
        .increment(*n);
    }
}

pub(super) struct Shard {
    pub(super) wal: Arc<Wal>,
    pub(super) tx: Option<Sender<WriteJob>>,
    pub(super) thread: Option<JoinHandle<()>>,
}

pub(super) fn shard_loop(rx: Receiver<WriteJob>) {
    for job in rx {
        let submitted = match &job.rows {
            Rows::Mutations(rows) => job.region.submit(rows, job.durability, job.origin.as_ref()),
            Rows::Entries(batch) => {
                job.region
                    .submit_batch(batch, job.durability, job.origin.as_ref())
            }
        };
        let outcome = match submitted {
            Ok(p) => Submitted::Pending(p),
            Err(Error::Closed) => Submitted::Refused(job.rows),
            Err(e) => Submitted::Failed(e),
        };
        let _ = job.reply.send(outcome);
    }
}
