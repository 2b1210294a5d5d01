//! The WAL thread: takes every request that arrived meanwhile, writes the
//! group with one sync, rolls segments, and gives an idle log's space back.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};

use super::error::WalError;
use super::io::{Completion, WalIo};
use super::record::{self, SEGMENT_HEADER_LEN, TYPE_EDITS, TYPE_SEGMENT_END};
use super::segment::{activate_segment, fsync_dir, prepare_segment, segment_path};
use super::shared::{ClosedSegment, Shared};
use super::ticket::Resolver;

pub(super) enum Request {
    Append {
        region_id: u64,
        max_seq: u64,
        /// The payload is `head ‖ body`, framed without being joined.
        head: Vec<u8>,
        body: Vec<u8>,
        sync: bool,
        ticket: Resolver,
    },
    /// Resolves once everything appended before it is synced.
    Sync {
        ticket: Resolver,
    },
    Shutdown,
}

pub(super) struct Batch {
    pub(super) id: u64,
    pub(super) tickets: Vec<Resolver>,
    pub(super) outcome: Option<std::io::Result<()>>,
    pub(super) sync: bool,
    pub(super) submitted: Instant,
    /// Segment offset just past the batch.
    pub(super) end: u64,
}

pub(super) struct Writer {
    pub(super) io: Box<dyn WalIo>,
    pub(super) shared: Arc<Shared>,
    pub(super) seg_id: u64,
    pub(super) file: Arc<File>,
    pub(super) seg_path: Arc<Path>,
    pub(super) offset: u64,
    pub(super) seg_max_seq: HashMap<u64, u64>,
    pub(super) spare: Option<JoinHandle<Result<File, WalError>>>,
    pub(super) next_batch: u64,
    pub(super) inflight: VecDeque<Batch>,
    pub(super) unsynced: bool,
    pub(super) last_sync: Instant,
    /// Offset of the active segment up to which everything is synced...
    pub(super) synced_to: u64,
    /// ...and the highest such offset written down in a sync point record.
    pub(super) claimed: u64,
    /// The live segment was preallocated (zero-filled to `segment_size`);
    /// a segment begun after an idle release grows as it is written.
    pub(super) preallocated: bool,
    /// When a batch was last submitted.
    pub(super) last_write: Instant,
}

/// How long the writer waits for a completion before looking for new
/// requests: short against a sync (≈150 µs+), so the next batch is submitted
/// while the previous one syncs.
pub(super) const REAP_WAIT: Duration = Duration::from_micros(100);

impl Writer {
    pub(super) fn run(mut self, rx: Receiver<Request>) {
        let max_bytes = self.shared.options.max_batch_bytes;
        let interval = self.shared.options.async_sync_interval;
        let mut pending: Vec<Request> = Vec::new();
        let mut pending_bytes = 0usize;
        let mut closing = false;
        loop {
            if self.inflight.is_empty() && pending.is_empty() {
                if closing {
                    break;
                }
                let release = self.shared.options.release_after_idle;
                let timeout = if self.unsynced {
                    interval.saturating_sub(self.last_sync.elapsed())
                } else if self.holds_space() && !release.is_zero() {
                    // Looked at again until the flushes caught up.
                    release
                        .saturating_sub(self.last_write.elapsed())
                        .max(Duration::from_secs(1).min(release))
                } else {
                    Duration::from_secs(3600)
                };
                match rx.recv_timeout(timeout) {
                    Ok(Request::Shutdown) | Err(RecvTimeoutError::Disconnected) => closing = true,
                    Ok(r) => {
                        pending_bytes += request_len(&r);
                        pending.push(r);
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        if let Err(e) = self.release_if_idle() {
                            self.fail(e.to_string());
                        }
                    }
                }
            }
            while !closing && pending_bytes < max_bytes {
                match rx.try_recv() {
                    Ok(Request::Shutdown) | Err(TryRecvError::Disconnected) => closing = true,
                    Ok(r) => {
                        pending_bytes += request_len(&r);
                        pending.push(r);
                    }
                    Err(TryRecvError::Empty) => break,
                }
            }
            let timer_due = self.unsynced && self.last_sync.elapsed() >= interval;
            let room = self.inflight.len() < self.io.depth();
            if room && (!pending.is_empty() || timer_due) {
                self.submit(std::mem::take(&mut pending));
                pending_bytes = 0;
            }
            if !self.inflight.is_empty() {
                let blocked = pending.is_empty() || self.inflight.len() >= self.io.depth();
                self.reap(if blocked { Some(REAP_WAIT) } else { None });
            }
        }
        self.finish();
    }

    pub(super) fn failed(&self) -> Option<String> {
        self.shared.failed.lock().clone()
    }

    pub(super) fn fail(&mut self, cause: String) {
        self.shared.failed.lock().get_or_insert(cause.clone());
        for b in self.inflight.drain(..) {
            for t in b.tickets {
                t.resolve(Err(cause.clone()));
            }
        }
    }

    /// Frames `requests` into one buffer and submits it as one batch.
    pub(super) fn submit(&mut self, requests: Vec<Request>) {
        if let Some(cause) = self.failed() {
            for r in requests {
                if let Request::Append { ticket, .. } | Request::Sync { ticket } = r {
                    ticket.resolve(Err(cause.clone()));
                }
            }
            return;
        }
        self.last_write = Instant::now();
        if !self.preallocated {
            // Written to again after an idle release: a segment is
            // preallocated beside, and taken as soon as it is ready.
            match &self.spare {
                None => self.prepare_spare(),
                Some(h) if h.is_finished() => {
                    if let Err(e) = self.roll() {
                        self.fail(e.to_string());
                        return self.submit(requests);
                    }
                }
                Some(_) => {}
            }
        }
        let total: usize = requests.iter().map(request_len).sum();
        if self.offset + total as u64 + record::FRAME_HEADER_LEN as u64
            > self.shared.options.segment_size
            && self.offset > SEGMENT_HEADER_LEN
            && let Err(e) = self.roll()
        {
            self.fail(e.to_string());
            return self.submit(requests);
        }
        let mut buf = Vec::with_capacity(total + record::SYNC_POINT_LEN);
        // What is known synced so far goes first: recovery then knows that
        // damage before it is corruption, not a torn tail.
        if self.synced_to > self.claimed {
            record::frame_into(
                &mut buf,
                self.seg_id,
                record::TYPE_SYNC_POINT,
                &self.synced_to.to_le_bytes(),
            );
            self.claimed = self.synced_to;
        }
        let mut tickets = Vec::with_capacity(requests.len());
        let mut sync =
            self.unsynced && self.last_sync.elapsed() >= self.shared.options.async_sync_interval;
        let mut appends = 0u64;
        for r in requests {
            match r {
                Request::Append {
                    region_id,
                    max_seq,
                    head,
                    body,
                    sync: wants_sync,
                    ticket,
                } => {
                    record::frame_parts_into(&mut buf, self.seg_id, TYPE_EDITS, &head, &body);
                    let m = self.seg_max_seq.entry(region_id).or_insert(0);
                    *m = max_seq.max(*m);
                    sync |= wants_sync;
                    appends += 1;
                    tickets.push(ticket);
                }
                Request::Sync { ticket } => {
                    sync = true;
                    tickets.push(ticket);
                }
                Request::Shutdown => {}
            }
        }
        // A sync covers only writes finished before it starts. Unsynced
        // writes still in flight could otherwise land after it, or not at
        // all, leaving a hole before synced records that recovery, which
        // stops at the first bad record, would not read past.
        if sync && self.inflight.iter().any(|b| !b.sync) {
            self.drain();
            if let Some(cause) = self.failed() {
                for t in tickets {
                    t.resolve(Err(cause.clone()));
                }
                return;
            }
        }
        let stats = &self.shared.stats;
        stats.appends.fetch_add(appends, Ordering::Relaxed);
        stats.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        stats.batches.fetch_add(1, Ordering::Relaxed);
        metrics::histogram!("halite_wal_batch_records").record(appends as f64);
        let id = self.next_batch;
        self.next_batch += 1;
        let bytes = buf.len();
        let offset = self.offset;
        self.offset += bytes as u64;
        if let Err(e) = self
            .io
            .submit(id, &self.file, &self.seg_path, offset, buf, sync)
        {
            self.fail(format!("submit wal write: {e}"));
            for t in tickets {
                t.resolve(Err(e.to_string()));
            }
            return;
        }
        if sync {
            crate::failpoint::hit("wal-group-commit");
            self.unsynced = false;
            self.last_sync = Instant::now();
        } else if bytes > 0 {
            self.unsynced = true;
        }
        self.inflight.push_back(Batch {
            id,
            tickets,
            outcome: None,
            sync,
            submitted: Instant::now(),
            end: offset + bytes as u64,
        });
        self.shared
            .stats
            .max_in_flight
            .fetch_max(self.inflight.len() as u64, Ordering::Relaxed);
        // The sync backend completes inline; collect at once.
        self.reap(None);
    }

    pub(super) fn reap(&mut self, wait: Option<Duration>) {
        let mut done: Vec<Completion> = Vec::new();
        if let Err(e) = self.io.reap(wait, &mut done) {
            self.fail(format!("reap wal completions: {e}"));
            return;
        }
        for c in done {
            if let Some(b) = self.inflight.iter_mut().find(|b| b.id == c.id) {
                b.outcome = Some(c.result);
            }
        }
        while self.inflight.front().is_some_and(|b| b.outcome.is_some()) {
            let b = self.inflight.pop_front().expect("front checked above");
            match b.outcome.expect("checked above") {
                Ok(()) => {
                    if b.sync {
                        // Every batch before it is complete (they finish in
                        // order) and unsynced ones finished before its sync
                        // began: the segment is durable up to its end.
                        self.synced_to = self.synced_to.max(b.end);
                        let took = b.submitted.elapsed();
                        self.shared
                            .stats
                            .sync_micros
                            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
                        metrics::histogram!("halite_wal_sync_duration_seconds")
                            .record(took.as_secs_f64());
                    }
                    if b.sync && !b.tickets.is_empty() {
                        self.shared
                            .stats
                            .group_commits
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    for t in b.tickets {
                        t.resolve(Ok(()));
                    }
                }
                Err(e) => {
                    // Never retried: after a failed fsync the page cache may
                    // have dropped the dirty pages, so "retry and succeed"
                    // could acknowledge data that is not on disk.
                    let cause = format!(
                        "wal write/fdatasync failed. segment=`{}`: {e}",
                        segment_path(&self.shared.dir, self.seg_id).display()
                    );
                    // Failed before the writers hear of it, so whoever
                    // was refused sees the cause in `failure()`.
                    self.fail(cause.clone());
                    for t in b.tickets {
                        t.resolve(Err(cause.clone()));
                    }
                    return;
                }
            }
        }
    }

    pub(super) fn drain(&mut self) {
        while !self.inflight.is_empty() {
            self.reap(Some(Duration::from_millis(10)));
        }
    }

    pub(super) fn prepare_spare(&mut self) {
        let dir = self.shared.dir.clone();
        let id = self.seg_id + 1;
        let size = self.shared.options.segment_size;
        let recycled = {
            let mut segs = self.shared.segments.lock();
            segs.spare_ready = true;
            segs.free.pop()
        };
        self.spare = std::thread::Builder::new()
            .name("halite-wal-prep".into())
            .spawn(move || prepare_segment(&dir, id, size, recycled))
            .ok();
    }

    /// Closes the active segment with an end record and moves to the next.
    pub(super) fn roll(&mut self) -> Result<(), WalError> {
        self.drain();
        if let Some(cause) = self.failed() {
            return Err(WalError::Failed(cause));
        }
        self.close_segment()?;
        let next = self.seg_id + 1;
        self.shared.segments.lock().spare_ready = false;
        let file = loop {
            let prepared = match self.spare.take().map(|h| h.join()) {
                Some(Ok(Ok(file))) => Ok(file),
                _ => {
                    let recycled = self.shared.segments.lock().free.pop();
                    prepare_segment(
                        &self.shared.dir,
                        next,
                        self.shared.options.segment_size,
                        recycled,
                    )
                }
            };
            match prepared {
                Ok(file) => break file,
                // A full disk is waited out, not fatal: nothing was written
                // (the batch waits, and the writers behind it), and the next
                // segment is prepared again once there is room.
                Err(WalError::Io { source, path, .. })
                    if crate::fault::is_no_space(&source)
                        && !self.shared.closing.load(Ordering::SeqCst) =>
                {
                    if !self.shared.stats.disk_full.swap(true, Ordering::SeqCst) {
                        tracing::error!(
                            segment = %path.display(),
                            "the disk is full: WAL writes wait until the next segment can be \
                             prepared (free space on the data directory's file system)"
                        );
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(e),
            }
        };
        if self.shared.stats.disk_full.swap(false, Ordering::SeqCst) {
            tracing::info!("the disk has room again: WAL writes go on");
        }
        activate_segment(&self.shared.dir, next)?;
        self.shared.segments.lock().closed.push(ClosedSegment {
            id: self.seg_id,
            path: segment_path(&self.shared.dir, self.seg_id),
            max_seq: std::mem::take(&mut self.seg_max_seq),
        });
        self.seg_id = next;
        self.file = Arc::new(file);
        self.seg_path = Arc::from(segment_path(&self.shared.dir, next));
        self.offset = SEGMENT_HEADER_LEN;
        self.synced_to = SEGMENT_HEADER_LEN;
        self.claimed = SEGMENT_HEADER_LEN;
        self.shared
            .stats
            .segments_rolled
            .fetch_add(1, Ordering::Relaxed);
        self.preallocated = true;
        // A just-flushed segment feeds the next spare instead of a fresh
        // zero-fill.
        self.shared.collect_garbage();
        self.prepare_spare();
        Ok(())
    }

    /// Whether an idle release has something to give back: preallocated
    /// space, or, after an earlier release, the records written to the
    /// small segment since and the spare they asked for, when the log went
    /// quiet before taking it (on a slow disk its zero-fill ends after the
    /// last write).
    fn holds_space(&self) -> bool {
        self.preallocated || self.spare.is_some() || self.offset > SEGMENT_HEADER_LEN
    }

    /// Gives back a quiet log's space: once nothing was written for
    /// `release_after_idle` and every edit of the live segment is flushed,
    /// the log goes on in a new segment that is not preallocated, and the
    /// old one, the spare and the kept flushed segments are deleted.
    pub(super) fn release_if_idle(&mut self) -> Result<(), WalError> {
        let release = self.shared.options.release_after_idle;
        if release.is_zero()
            || self.last_write.elapsed() < release
            || self.failed().is_some()
            || !self.inflight.is_empty()
            || self.unsynced
        {
            return Ok(());
        }
        if !self.holds_space() {
            return Ok(());
        }
        {
            let segs = self.shared.segments.lock();
            if !segs.closed.is_empty() || !segs.all_flushed(&self.seg_max_seq) {
                // Edits not in store files hold the space: a region written
                // once and then left alone (a namespace's dictionary) would
                // hold it for good. Its MemStore is flushed instead, as
                // HBase flushes the regions holding its oldest logs.
                let mut holding: Vec<u64> = segs
                    .closed
                    .iter()
                    .flat_map(|seg| segs.unflushed(&seg.max_seq))
                    .chain(segs.unflushed(&self.seg_max_seq))
                    .collect();
                holding.sort_unstable();
                holding.dedup();
                drop(segs);
                *self.shared.holding_space.lock() = holding;
                return Ok(());
            }
        }
        if let Some(h) = self.spare.take() {
            let _ = h.join();
        }
        let next = self.seg_id + 1;
        let dir = self.shared.dir.clone();
        // The small segment first, under the spare's name (which it
        // replaces: `prepare_segment` truncates a file it does not reuse).
        // Housekeeping that fails costs nothing: the log goes on as it was.
        let file = match prepare_segment(&dir, next, SEGMENT_HEADER_LEN, None) {
            Ok(file) => file,
            Err(e) => {
                tracing::warn!(error = %e, "could not give an idle WAL's space back; trying later");
                self.last_write = Instant::now();
                self.prepare_spare();
                return Ok(());
            }
        };
        self.close_segment()?;
        activate_segment(&dir, next)?;
        let old = segment_path(&dir, self.seg_id);
        let free = {
            let mut segs = self.shared.segments.lock();
            segs.spare_ready = false;
            std::mem::take(&mut segs.free)
        };
        for path in free.iter().chain(std::iter::once(&old)) {
            if let Err(e) = crate::fsutil::remove_file(path) {
                tracing::warn!(path = %path.display(), error = %e, "could not delete a flushed WAL segment");
            }
        }
        fsync_dir(&dir)?;
        self.seg_id = next;
        self.file = Arc::new(file);
        self.seg_path = Arc::from(segment_path(&dir, next));
        self.offset = SEGMENT_HEADER_LEN;
        self.synced_to = SEGMENT_HEADER_LEN;
        self.claimed = SEGMENT_HEADER_LEN;
        self.seg_max_seq.clear();
        self.preallocated = false;
        tracing::debug!(dir = %dir.display(), "idle WAL gave back its preallocated segments");
        Ok(())
    }

    pub(super) fn close_segment(&mut self) -> Result<(), WalError> {
        let path = segment_path(&self.shared.dir, self.seg_id);
        let mut end = Vec::new();
        record::frame_into(&mut end, self.seg_id, TYPE_SEGMENT_END, &[]);
        self.file
            .write_all_at(&end, self.offset)
            .and_then(|_| {
                crate::fault::power::wrote(&path, self.offset, &end);
                crate::fsutil::sync_file_data(&self.file, &path)
            })
            .map_err(|e| WalError::io(&path, "close segment", e))?;
        self.shared.stats.syncs.add();
        self.unsynced = false;
        Ok(())
    }

    pub(super) fn finish(mut self) {
        self.drain();
        if self.failed().is_none()
            && let Err(e) = self.close_segment()
        {
            self.fail(e.to_string());
        }
        if let Some(h) = self.spare.take() {
            // The prepared spare stays on disk; the next open reuses it.
            let _ = h.join();
        }
    }
}

pub(super) fn request_len(r: &Request) -> usize {
    match r {
        Request::Append { head, body, .. } => head.len() + body.len() + record::FRAME_HEADER_LEN,
        Request::Sync { .. } | Request::Shutdown => 0,
    }
}
