//! The region's write path: a batch of mutations (or rows encoded by the
//! ingest path) checked cell by cell, held back while the MemStores are
//! over their blocking limit, logged to the WAL and applied to the active
//! MemStore under the write lock (see the module doc of `region`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use super::inner::{Inner, note_position};
use super::maintenance::Maintained;
use super::wal::Ticket;
use super::wal::record::{SourcePosition, encode_edits_body, encode_edits_head};
use crate::cell::{self, CellKind, EntryBatch, KeyRef, Mutation, RowMutation};
use crate::error::{Error, Result};
use crate::schema::Durability;

/// A write queued to the WAL. Waiting on it (or dropping it) makes it
/// visible once durable.
#[must_use = "a write is acknowledged only once waited on"]
pub struct PendingWrite {
    inner: Option<Arc<Inner>>,
    ticket: Ticket,
}

impl PendingWrite {
    /// Whether the write is durable (or failed) already.
    pub fn is_done(&self) -> bool {
        self.ticket.is_resolved()
    }

    /// Blocks until the write is durable and visible.
    pub fn wait(mut self) -> Result<()> {
        let inner = self.inner.take().expect("taken only here or in drop");
        finish_write(&inner, &self.ticket)
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let _ = finish_write(&inner, &self.ticket);
        }
    }
}

fn finish_write(inner: &Arc<Inner>, ticket: &Ticket) -> Result<()> {
    // Completed (MVCC, flush request) as soon as it was both in the
    // MemStore and durable; the ticket resolves only after that.
    match ticket.wait() {
        Ok(()) => Ok(()),
        Err(e) => {
            inner.poison(e.to_string());
            Err(e.into())
        }
    }
}

impl Inner {
    /// Validates row mutations and encodes them into one batch.
    pub(crate) fn to_entries(&self, rows: &[RowMutation], now: u64) -> Result<EntryBatch> {
        let mut out = EntryBatch::for_rows(rows);
        let mut check = CellCheck::new(self);
        for (i, rm) in rows.iter().enumerate() {
            let bad = |what: String| Error::InvalidInput(format!("row {i}: {what}"));
            if rm.row.is_empty() || rm.row.len() > cell::MAX_ROW_LEN {
                return Err(bad(format!(
                    "row key must be 1..={} bytes, got {}",
                    cell::MAX_ROW_LEN,
                    rm.row.len()
                )));
            }
            let ts = |t: Option<u64>| match t {
                Some(t) if t != u64::MAX => t,
                _ => now,
            };
            let row = rm.row.as_slice();
            for m in &rm.mutations {
                match m {
                    Mutation::Put {
                        family: f,
                        qualifier: q,
                        timestamp,
                        value,
                        ttl_ms,
                    } => {
                        check.family(f)?;
                        check.cell(i, q, value.len(), *ttl_ms)?;
                        out.push(row, f, q, ts(*timestamp), CellKind::Put, *ttl_ms, value);
                    }
                    Mutation::DeleteVersion {
                        family: f,
                        qualifier: q,
                        timestamp,
                    } => {
                        check.family(f)?;
                        check.cell(i, q, 0, None)?;
                        out.push(
                            row,
                            f,
                            q,
                            ts(Some(*timestamp)),
                            CellKind::DeleteVersion,
                            None,
                            &[],
                        );
                    }
                    Mutation::DeleteColumn {
                        family: f,
                        qualifier: q,
                        timestamp,
                    } => {
                        check.family(f)?;
                        check.cell(i, q, 0, None)?;
                        out.push(row, f, q, ts(*timestamp), CellKind::DeleteColumn, None, &[]);
                    }
                    Mutation::DeleteFamily {
                        family: f,
                        timestamp,
                    } => {
                        check.family(f)?;
                        out.push(
                            row,
                            f,
                            b"",
                            ts(*timestamp),
                            CellKind::DeleteFamily,
                            None,
                            &[],
                        );
                    }
                    Mutation::DeleteRow { timestamp } => {
                        for f in &self.family_order {
                            out.push(
                                row,
                                f,
                                b"",
                                ts(*timestamp),
                                CellKind::DeleteFamily,
                                None,
                                &[],
                            );
                        }
                    }
                }
            }
            out.end_row();
        }
        Ok(out)
    }

    /// Waits while MemStores are over the blocking limit.
    pub(crate) fn wait_for_room(self: &Arc<Self>) -> Result<()> {
        let limit = self.blocking_limit();
        if self.memstore_bytes() < limit {
            return Ok(());
        }
        let started = Instant::now();
        self.stats.writer_stalls.fetch_add(1, Ordering::Relaxed);
        self.request_flush();
        let mut guard = self.room.0.lock();
        while self.memstore_bytes() >= limit {
            self.check_open()?;
            // Deduplicated: cheap to repeat while the flush runs.
            self.request_flush();
            if !self.options.background {
                drop(guard);
                self.flush_now()?;
                guard = self.room.0.lock();
                continue;
            }
            self.room.1.wait_for(&mut guard, Duration::from_millis(100));
        }
        self.stats
            .writer_stall_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        metrics::histogram!("halite_write_stall_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        Ok(())
    }

    pub(crate) fn submit(
        self: &Arc<Self>,
        rows: &[RowMutation],
        durability: Durability,
        origin: Option<&SourcePosition>,
    ) -> Result<PendingWrite> {
        self.check_open()?;
        let now = self.clock.now_ms();
        let entries = self.to_entries(rows, now)?;
        self.submit_entries(&entries, durability, origin, now)
    }

    /// Writes entries encoded elsewhere (the ingest path encodes points
    /// straight into a batch); they are checked as `to_entries` would have.
    pub(crate) fn submit_batch(
        self: &Arc<Self>,
        entries: &EntryBatch,
        durability: Durability,
        origin: Option<&SourcePosition>,
    ) -> Result<PendingWrite> {
        self.check_open()?;
        self.check_entries(entries)?;
        self.submit_entries(entries, durability, origin, self.clock.now_ms())
    }

    pub(crate) fn check_entries(&self, entries: &EntryBatch) -> Result<()> {
        if entries.mixes_rows() {
            return Err(Error::InvalidInput(
                "entries of one row name different rows: send each row's cells as a row of their own".into(),
            ));
        }
        let mut check = CellCheck::new(self);
        for i in 0..entries.rows() {
            for e in entries.row(i) {
                let bad = |what: &str| Error::InvalidInput(format!("row {i}: {what}"));
                let key = KeyRef::from_parts(e.row, e.after_row)
                    .ok_or_else(|| bad("malformed entry key"))?;
                if key.has_ttl != e.ttl_ms.is_some() {
                    return Err(bad("entry key's TTL flag disagrees with its TTL"));
                }
                check.family(key.family)?;
                check.cell(i, key.qualifier, e.value.len(), e.ttl_ms)?;
            }
        }
        Ok(())
    }

    pub(crate) fn submit_entries(
        self: &Arc<Self>,
        entries: &EntryBatch,
        durability: Durability,
        origin: Option<&SourcePosition>,
        now: u64,
    ) -> Result<PendingWrite> {
        // Without rows, a record is worth writing only for the Kafka
        // position it carries (see `Store::submit_position`).
        if entries.is_empty() && origin.is_none() {
            return Ok(PendingWrite {
                inner: None,
                ticket: Ticket::done(),
            });
        }
        self.wait_for_room()?;
        self.stats
            .ingested_bytes
            .fetch_add(entries.bytes() as u64, Ordering::Relaxed);
        // A region on the object store is logged by its source topic: a
        // new owner replays the topic from the manifest's positions.
        let durability = if self.shared.is_some() {
            Durability::SkipWal
        } else {
            durability
        };
        let body = (durability != Durability::SkipWal).then(|| encode_edits_body(entries));
        // A position-only record takes a sequence id of its own, like a row.
        let n = (entries.rows() as u64).max(1);
        let ticket = {
            let _w = self.write_lock.lock();
            self.check_open()?;
            let first = self.mvcc.begin(n);
            let last = first + n - 1;
            // The write completes (becomes visible, and flushes stop
            // waiting for it) once it is both in the MemStore and durable,
            // whichever comes last — without waiting for its writer to
            // come back for it: a writer blocked on a full MemStore must
            // not hold up the flush that would make room.
            let gate = Arc::new(AtomicU8::new(2));
            let ticket = match body {
                Some(body) => {
                    let head = encode_edits_head(self.id, first, origin);
                    let inner = Arc::downgrade(self);
                    let gate = gate.clone();
                    let then: crate::region::wal::OnResolved = Box::new(move |outcome| {
                        if let Some(inner) = inner.upgrade() {
                            match outcome {
                                Ok(()) => inner.pass_gate(&gate, last),
                                Err(e) => inner.poison(e.clone()),
                            }
                        }
                    });
                    match self.wal.append_then(
                        self.id,
                        last,
                        head,
                        body,
                        durability == Durability::SyncWal,
                        Some(then),
                    ) {
                        Ok(t) => t,
                        Err(e) => {
                            self.poison(e.to_string());
                            return Err(e.into());
                        }
                    }
                }
                None => {
                    gate.fetch_sub(1, Ordering::SeqCst);
                    Ticket::done()
                }
            };
            let active = self.state.read().active.clone();
            active.insert_batch(entries, first, now);
            if let Some(o) = origin {
                note_position(&mut self.positions.lock(), o);
            }
            self.pass_gate(&gate, last);
            ticket
        };
        Ok(PendingWrite {
            inner: Some(self.clone()),
            ticket,
        })
    }
}

/// The checks every cell passes on its way in, whether it comes as a
/// mutation or already encoded: its family exists, its qualifier, value and
/// cell TTL are within bounds.
struct CellCheck<'a> {
    region: &'a Inner,
    /// The family found last: cells of a row mostly share one.
    known_family: &'a [u8],
}

impl<'a> CellCheck<'a> {
    fn new(region: &'a Inner) -> Self {
        CellCheck {
            region,
            known_family: &[],
        }
    }

    fn family(&mut self, name: &[u8]) -> Result<()> {
        if !name.is_empty() && name == self.known_family {
            return Ok(());
        }
        let (f, _) = self
            .region
            .families
            .get_key_value(name)
            .ok_or_else(|| Error::UnknownFamily(String::from_utf8_lossy(name).into_owned()))?;
        self.known_family = f.as_slice();
        Ok(())
    }

    /// `row` is the cell's row's place in its batch, for the message.
    fn cell(
        &self,
        row: usize,
        qualifier: &[u8],
        value_len: usize,
        ttl_ms: Option<u64>,
    ) -> Result<()> {
        let bad = |what: String| Error::InvalidInput(format!("row {row}: {what}"));
        if qualifier.len() > cell::MAX_QUALIFIER_LEN {
            return Err(bad(format!(
                "qualifier longer than {} bytes",
                cell::MAX_QUALIFIER_LEN
            )));
        }
        let limit = self.region.options.max_value_size;
        if value_len > limit {
            return Err(bad(format!(
                "value of {value_len} bytes exceeds the limit of {limit} bytes"
            )));
        }
        if ttl_ms == Some(0) {
            return Err(bad("cell TTL must be at least 1 ms".into()));
        }
        Ok(())
    }
}
