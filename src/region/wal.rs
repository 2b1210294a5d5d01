//! The write-ahead log: group commit on a dedicated thread.
//!
//! Callers hand an encoded edits record to [`Wal::append`] and get a
//! [`Ticket`] that resolves when the record is durable (SYNC_WAL) or written
//! (ASYNC_WAL). The WAL thread takes every request that arrived meanwhile,
//! frames them into one buffer and submits one write (+ fdatasync) for all of
//! them: one sync covers the whole group. With io_uring several such batches
//! are in flight at once; tickets are still resolved strictly in submission
//! order, so an acknowledged record never sits behind a lost one.
//!
//! Segments are preallocated and zero-filled (or recycled) in the background
//! so a sync does not also have to grow the file. A segment is closed with an
//! end record; at recovery every closed segment must end with one, and only
//! the last segment may have a torn tail, which is cut at the last whole
//! record (see `docs/wal.md`).

pub mod io;
pub mod record;

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::{Condvar, Mutex};

use crate::error::kind::ErrorKind;
use io::{Completion, IoBackendChoice, IoBackendKind, SyncCounter, WalIo};
use record::{Edits, Frame, SEGMENT_HEADER_LEN, TYPE_EDITS, TYPE_SEGMENT_END};

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("wal i/o error. path=`{path}`, op=`{op}`: {source}")]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("wal record corrupt: {what}. segment=`{path}`, offset=`{offset}`")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: &'static str,
    },
    #[error(
        "wal stopped after a fatal i/o error and accepts no writes; restart to recover. cause: {0}"
    )]
    Failed(String),
    #[error("wal is closed")]
    Closed,
    #[error("wal record too large: {len} bytes, limit {limit}; split the batch")]
    TooLarge { len: usize, limit: usize },
}

impl WalError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            WalError::Io { .. } => ErrorKind::Internal,
            WalError::Corrupt { .. } => ErrorKind::Corruption,
            WalError::Failed(_) | WalError::Closed => ErrorKind::Closed,
            WalError::TooLarge { .. } => ErrorKind::InvalidInput,
        }
    }
    fn io(path: &Path, op: &'static str, source: std::io::Error) -> Self {
        WalError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }
}

/// WAL settings.
#[derive(Debug, Clone)]
pub struct WalOptions {
    /// Preallocated size of a segment (default 64 MiB).
    pub segment_size: u64,
    /// Most bytes framed into one group commit (default 4 MiB).
    pub max_batch_bytes: usize,
    /// io_uring with fallback, or sync I/O only.
    pub io: IoBackendChoice,
    /// Batches in flight at once on io_uring (default 4).
    pub depth: usize,
    /// How often ASYNC_WAL writes are synced (default 1 s).
    pub async_sync_interval: Duration,
    /// Reuse flushed segments instead of deleting them (default on).
    pub recycle: bool,
    /// Preallocated segments a shard keeps ready beside the live one: the
    /// prepared next one and flushed ones kept for reuse (default 3).
    /// Flushed segments past it are deleted.
    pub spare_segments: usize,
    /// A log idle this long with everything in it flushed gives its
    /// preallocated space back: it goes on in a small segment, and
    /// preallocates again once written to (default 10 s; zero: never).
    pub release_after_idle: Duration,
    /// What recovery does with damage in the middle of the log.
    pub recovery: WalRecovery,
}

/// Recovery of damage in the middle of the log — in data a later record
/// says was synced, or anywhere before a closed segment's end — as opposed
/// to a torn tail, which is always cut off (it holds nothing acknowledged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WalRecovery {
    /// Refuse to open, naming the file and offset (the default: nothing
    /// acknowledged is given up without an operator saying so).
    #[default]
    Strict,
    /// Open with every record before the damage and none after it (later
    /// segments are set aside as `.damaged`), logged and counted: a
    /// point-in-time recovery.
    StopAtDamage,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_size: 64 * 1024 * 1024,
            max_batch_bytes: 4 * 1024 * 1024,
            io: IoBackendChoice::Auto,
            depth: 4,
            async_sync_interval: Duration::from_secs(1),
            recycle: true,
            spare_segments: 3,
            release_after_idle: Duration::from_secs(10),
            recovery: WalRecovery::Strict,
        }
    }
}

/// Resolves when the record it was issued for is durable (or written, for
/// ASYNC_WAL), or with the error that stopped the WAL.
#[derive(Debug, Clone)]
pub struct Ticket(Arc<TicketInner>);

#[derive(Debug, Default)]
struct TicketInner {
    outcome: Mutex<Option<Result<(), String>>>,
    cv: Condvar,
}

impl Ticket {
    fn new() -> Self {
        Ticket(Arc::new(TicketInner::default()))
    }
    /// A ticket that is already resolved (nothing to wait for).
    pub fn done() -> Self {
        let t = Ticket::new();
        t.resolve(Ok(()));
        t
    }
    fn resolve(&self, outcome: Result<(), String>) {
        *self.0.outcome.lock() = Some(outcome);
        self.0.cv.notify_all();
    }
    pub fn is_resolved(&self) -> bool {
        self.0.outcome.lock().is_some()
    }
    pub fn wait(&self) -> Result<(), WalError> {
        let mut outcome = self.0.outcome.lock();
        while outcome.is_none() {
            self.0.cv.wait(&mut outcome);
        }
        match outcome.as_ref().expect("loop exits only when resolved") {
            Ok(()) => Ok(()),
            Err(e) => Err(WalError::Failed(e.clone())),
        }
    }
}

/// What runs when a record's outcome is known, on the WAL's thread, before
/// any waiter of its ticket wakes: a region completes the write's MVCC
/// transaction here, so that a flush waiting for it never depends on the
/// writer coming back to wait.
pub type OnResolved = Box<dyn FnOnce(&Result<(), String>) + Send>;

/// The WAL side of a ticket. Dropping it unresolved — a request still
/// queued when the WAL stops — fails the ticket, so no waiter hangs.
struct Resolver {
    ticket: Ticket,
    then: Option<OnResolved>,
}

impl Resolver {
    fn new(ticket: Ticket, then: Option<OnResolved>) -> Self {
        Resolver { ticket, then }
    }

    fn resolve(mut self, outcome: Result<(), String>) {
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: Result<(), String>) {
        if let Some(then) = self.then.take() {
            then(&outcome);
        }
        self.ticket.resolve(outcome);
    }
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Resolver").field(&self.ticket).finish()
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        if !self.ticket.is_resolved() {
            self.finish(Err("wal closed before the record was written".into()));
        }
    }
}

enum Request {
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

/// Counters the WAL keeps for metrics and tests.
#[derive(Debug, Default)]
pub struct WalStats {
    pub appends: AtomicU64,
    pub bytes: AtomicU64,
    pub batches: AtomicU64,
    pub syncs: Arc<SyncCounter>,
    /// Synced batches whose writers were told their records are durable:
    /// each must have had a data sync of its own or a later one.
    pub group_commits: AtomicU64,
    /// Sum of sync latencies in µs, for a mean in benchmarks.
    pub sync_micros: AtomicU64,
    pub segments_rolled: AtomicU64,
    /// Damaged spots in the middle of the log that recovery stopped at.
    pub damage_stops: AtomicU64,
    /// Writes are waiting for room to prepare the next segment.
    pub disk_full: AtomicBool,
    /// Most batches seen in flight at once (io_uring pipelining at work).
    pub max_in_flight: AtomicU64,
}

#[derive(Debug)]
struct ClosedSegment {
    id: u64,
    path: PathBuf,
    /// Highest sequence id per region in the segment.
    max_seq: HashMap<u64, u64>,
}

#[derive(Debug, Default)]
struct Segments {
    closed: Vec<ClosedSegment>,
    flushed: HashMap<u64, u64>,
    free: Vec<PathBuf>,
    /// A next segment is prepared (or being prepared) beside the live one.
    spare_ready: bool,
}

impl Segments {
    /// Whether every edit of `max_seq` (region -> highest sequence id) is
    /// in store files.
    fn all_flushed(&self, max_seq: &HashMap<u64, u64>) -> bool {
        max_seq
            .iter()
            .all(|(region, max)| self.flushed.get(region).is_some_and(|f| f >= max))
    }
}

struct Shared {
    dir: PathBuf,
    options: WalOptions,
    segments: Mutex<Segments>,
    failed: Mutex<Option<String>>,
    stats: WalStats,
    /// Set by `close`: a writer waiting out a full disk gives up.
    closing: AtomicBool,
}

impl Shared {
    /// Deletes (or keeps for reuse) closed segments whose every edit is in
    /// store files.
    fn collect_garbage(&self) {
        let mut segs = self.segments.lock();
        let Segments {
            closed,
            flushed,
            free,
            spare_ready,
        } = &mut *segs;
        let kept_ready = free.len() + usize::from(*spare_ready);
        let mut room = self.options.spare_segments.saturating_sub(kept_ready);
        let mut keep = Vec::with_capacity(closed.len());
        for seg in closed.drain(..) {
            let done = seg
                .max_seq
                .iter()
                .all(|(region, max)| flushed.get(region).is_some_and(|f| f >= max));
            if !done {
                keep.push(seg);
                continue;
            }
            if self.options.recycle && room > 0 {
                room -= 1;
                let to = self.dir.join(format!("{:020}.free", seg.id));
                if fs::rename(&seg.path, &to).is_ok() {
                    free.push(to);
                    continue;
                }
            }
            let _ = fs::remove_file(&seg.path);
        }
        *closed = keep;
    }
}

/// A segment found at open, kept for replay until its edits are flushed.
#[derive(Debug, Clone)]
struct RecoveredSegment {
    id: u64,
    path: PathBuf,
    /// Bytes holding whole records (header included).
    valid_len: u64,
}

/// The write-ahead log of one writer (one per shard).
pub struct Wal {
    shared: Arc<Shared>,
    tx: Mutex<Option<Sender<Request>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    recovered: Vec<RecoveredSegment>,
    backend: IoBackendKind,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.shared.dir)
            .field("backend", &self.backend)
            .finish()
    }
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.log"))
}

fn fsync_dir(dir: &Path) -> Result<(), WalError> {
    crate::fsutil::fsync_dir(dir).map_err(|e| WalError::io(dir, "fsync directory", e))
}

impl Wal {
    /// Opens (or creates) the WAL in `dir`: checks every segment, cuts a torn
    /// tail off the last one, and starts the writer thread on a new segment.
    pub fn open(dir: impl AsRef<Path>, options: WalOptions) -> Result<Wal, WalError> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| WalError::io(&dir, "create directory", e))?;
        let mut ids = Vec::new();
        let mut free = Vec::new();
        for entry in fs::read_dir(&dir).map_err(|e| WalError::io(&dir, "list directory", e))? {
            let entry = entry.map_err(|e| WalError::io(&dir, "list directory", e))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(id) = name
                .strip_suffix(".log")
                .and_then(|s| s.parse::<u64>().ok())
            {
                ids.push(id);
            } else if name.ends_with(".free") {
                free.push(path);
            } else if name.ends_with(".spare") {
                // Prepared but never used (a close or crash came first):
                // reuse it; preparation tops up whatever is missing.
                free.push(path);
            }
        }
        ids.sort_unstable();
        // The live segment and the spare take two; past the bound the rest
        // go (an earlier run may have kept more, or had another bound).
        free.sort();
        while free.len() > options.spare_segments + 1 {
            let surplus = free.remove(0);
            fs::remove_file(&surplus).map_err(|e| WalError::io(&surplus, "remove surplus", e))?;
        }

        let mut recovered = Vec::new();
        let mut closed = Vec::new();
        let mut damage_stops = 0;
        let mut ids_iter = ids.iter().enumerate();
        while let Some((i, &id)) = ids_iter.next() {
            let path = segment_path(&dir, id);
            let is_last = i + 1 == ids.len();
            let scanned = scan_segment(&path, id, is_last, options.recovery)?;
            recovered.push(RecoveredSegment {
                id,
                path: path.clone(),
                valid_len: scanned.valid_len,
            });
            closed.push(ClosedSegment {
                id,
                path,
                max_seq: scanned.max_seq,
            });
            if scanned.stopped {
                damage_stops += 1;
                // Nothing after the damage is replayed: later segments are
                // kept aside, under a name recovery does not read.
                for (_, &later) in ids_iter.by_ref() {
                    let from = segment_path(&dir, later);
                    let to = dir.join(format!("{later:020}.damaged"));
                    fs::rename(&from, &to).map_err(|e| WalError::io(&from, "set aside", e))?;
                }
                fsync_dir(&dir)?;
            }
        }
        let next_id = ids.last().map_or(1, |id| id + 1);

        let stats = WalStats::default();
        stats.damage_stops.store(damage_stops, Ordering::Relaxed);
        let io = io::open_backend(options.io, options.depth, stats.syncs.clone());
        let backend = io.kind();
        let shared = Arc::new(Shared {
            dir: dir.clone(),
            options: options.clone(),
            segments: Mutex::new(Segments {
                closed,
                flushed: HashMap::new(),
                free,
                spare_ready: false,
            }),
            failed: Mutex::new(None),
            stats,
            closing: AtomicBool::new(false),
        });
        let recycled = shared.segments.lock().free.pop();
        let file = prepare_segment(&dir, next_id, options.segment_size, recycled)?;
        activate_segment(&dir, next_id)?;
        let (tx, rx) = crossbeam_channel::bounded(4096);
        let mut writer = Writer {
            io,
            shared: shared.clone(),
            seg_id: next_id,
            file: Arc::new(file),
            seg_path: Arc::from(segment_path(&dir, next_id)),
            offset: SEGMENT_HEADER_LEN,
            seg_max_seq: HashMap::new(),
            spare: None,
            next_batch: 0,
            inflight: VecDeque::new(),
            unsynced: false,
            last_sync: Instant::now(),
            synced_to: SEGMENT_HEADER_LEN,
            claimed: SEGMENT_HEADER_LEN,
            preallocated: true,
            last_write: Instant::now(),
        };
        writer.prepare_spare();
        let thread = std::thread::Builder::new()
            .name("halite-wal".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| WalError::io(&dir, "spawn wal thread", e))?;
        Ok(Wal {
            shared,
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            recovered,
            backend,
        })
    }

    pub fn backend(&self) -> IoBackendKind {
        self.backend
    }

    pub fn stats(&self) -> &WalStats {
        &self.shared.stats
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Queues an encoded edits record; `max_seq` is the highest sequence id in
    /// it (for segment deletion). With `sync`, the ticket resolves after
    /// fdatasync; without, after the write.
    pub fn append(
        &self,
        region_id: u64,
        max_seq: u64,
        payload: Vec<u8>,
        sync: bool,
    ) -> Result<Ticket, WalError> {
        self.append_then(region_id, max_seq, Vec::new(), payload, sync, None)
    }

    /// [`Wal::append`], with `then` run as soon as the outcome is known
    /// (not when it is called on an error returned here).
    pub fn append_then(
        &self,
        region_id: u64,
        max_seq: u64,
        head: Vec<u8>,
        body: Vec<u8>,
        sync: bool,
        then: Option<OnResolved>,
    ) -> Result<Ticket, WalError> {
        let len = head.len() + body.len();
        if len > record::MAX_RECORD_LEN {
            return Err(WalError::TooLarge {
                len,
                limit: record::MAX_RECORD_LEN,
            });
        }
        if let Some(cause) = self.shared.failed.lock().clone() {
            return Err(WalError::Failed(cause));
        }
        let ticket = Ticket::new();
        let tx = self.tx.lock().clone().ok_or(WalError::Closed)?;
        let request = Request::Append {
            region_id,
            max_seq,
            head,
            body,
            sync,
            ticket: Resolver::new(ticket.clone(), then),
        };
        match tx.send(request) {
            Ok(()) => Ok(ticket),
            Err(crossbeam_channel::SendError(Request::Append { ticket: mut r, .. })) => {
                // Not run: the caller handles the error returned here.
                r.then = None;
                Err(WalError::Closed)
            }
            Err(_) => Err(WalError::Closed),
        }
    }

    /// A barrier: the ticket resolves once every record appended before this
    /// call (ASYNC_WAL ones included) is synced to disk.
    pub fn sync(&self) -> Result<Ticket, WalError> {
        if let Some(cause) = self.shared.failed.lock().clone() {
            return Err(WalError::Failed(cause));
        }
        let ticket = Ticket::new();
        let tx = self.tx.lock().clone().ok_or(WalError::Closed)?;
        tx.send(Request::Sync {
            ticket: Resolver::new(ticket.clone(), None),
        })
        .map_err(|_| WalError::Closed)?;
        Ok(ticket)
    }

    /// Records that every edit of `region_id` up to `seq` is in store files,
    /// so segments holding nothing newer can go.
    pub fn mark_flushed(&self, region_id: u64, seq: u64) {
        {
            let mut segs = self.shared.segments.lock();
            let f = segs.flushed.entry(region_id).or_insert(0);
            *f = (*f).max(seq);
        }
        self.shared.collect_garbage();
    }

    /// Forgets the edits of every region not in `live` (regions of dropped
    /// tables), so they no longer keep segments alive.
    pub fn forget_regions_except(&self, live: &std::collections::BTreeSet<u64>) {
        {
            let mut segs = self.shared.segments.lock();
            let dead: Vec<u64> = segs
                .closed
                .iter()
                .flat_map(|s| s.max_seq.keys().copied())
                .filter(|r| !live.contains(r))
                .collect();
            for r in dead {
                segs.flushed.insert(r, u64::MAX);
            }
        }
        self.shared.collect_garbage();
    }

    /// Number of segment files holding edits not yet known to be flushed,
    /// plus the active one.
    pub fn live_segments(&self) -> usize {
        self.shared.segments.lock().closed.len() + 1
    }

    /// Replays the edits of `region_id` with sequence ids above `after_seq`
    /// from the segments found at open, in log order.
    pub fn replay(
        &self,
        region_id: u64,
        after_seq: u64,
        apply: impl FnMut(Edits),
    ) -> Result<(), WalError> {
        self.replay_regions(&HashMap::from([(region_id, after_seq)]), apply)
    }

    /// Replays, in one pass over the segments found at open and in log
    /// order, the edits of every region in `after` with sequence ids above
    /// the one it maps to. A shard holds many regions: reading its log once
    /// for each would make a restart as many times slower.
    pub fn replay_regions(
        &self,
        after: &HashMap<u64, u64>,
        mut apply: impl FnMut(Edits),
    ) -> Result<(), WalError> {
        for seg in &self.recovered {
            let buf = match fs::read(&seg.path) {
                Ok(b) => b,
                // Deleted after its edits were flushed: nothing to replay.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(WalError::io(&seg.path, "read segment", e)),
            };
            let end = (seg.valid_len as usize).min(buf.len());
            let mut pos = SEGMENT_HEADER_LEN as usize;
            while pos < end {
                let Frame::Record {
                    kind,
                    payload,
                    next,
                } = record::read_frame(&buf[..end], pos, seg.id)
                else {
                    return Err(WalError::Corrupt {
                        path: seg.path.clone(),
                        offset: pos as u64,
                        what: "segment changed since it was checked at open",
                    });
                };
                let corrupt = |e: crate::codec::DecodeError| WalError::Corrupt {
                    path: seg.path.clone(),
                    offset: (pos + record::FRAME_HEADER_LEN + e.offset) as u64,
                    what: e.what,
                };
                if kind == TYPE_EDITS {
                    // Records of regions not asked for are skipped before
                    // their rows are decoded.
                    let region_id = record::edits_region(payload).map_err(corrupt)?;
                    if let Some(&after_seq) = after.get(&region_id) {
                        let edits = record::decode_edits(payload).map_err(corrupt)?;
                        let last = edits.first_seq + edits.rows.len() as u64;
                        if last > after_seq + 1 {
                            apply(edits);
                        }
                    }
                }
                pos = next;
            }
        }
        Ok(())
    }

    /// Stops the writer after it has written and synced everything queued.
    pub fn close(&self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        if let Some(tx) = self.tx.lock().take() {
            let _ = tx.send(Request::Shutdown);
        }
        if let Some(t) = self.thread.lock().take() {
            // The last owner can be a write completed on the WAL's own
            // thread (a region dropped while its write was in flight):
            // that thread stops by itself once it sees the shutdown.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    /// The fatal error that stopped the WAL, if any.
    pub fn failure(&self) -> Option<String> {
        self.shared.failed.lock().clone()
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.close();
    }
}

/// What the check of one segment found.
struct ScannedSegment {
    /// Bytes holding whole records (header included), up to where reading
    /// stops.
    valid_len: u64,
    /// Highest sequence id per region among those records.
    max_seq: HashMap<u64, u64>,
    /// Damage in the middle of the log was found (and stopped at, in
    /// `StopAtDamage` mode): later segments must not be replayed.
    stopped: bool,
}

/// How a segment's records end, as [`check_segment`] reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentEnd {
    /// A segment-end record at this offset.
    Closed(u64),
    /// The last segment's written part ends here: zeros, or a frame cut
    /// short that nothing later claims was synced (recovery cuts it off).
    TornTail(u64),
    /// Damage in the middle of the log at this offset: in a closed segment
    /// before its end record, or in data a later sync point says was
    /// synced.
    Damage { offset: u64, what: &'static str },
}

/// The result of reading a segment's records without changing anything.
#[derive(Debug, Clone)]
pub struct SegmentCheck {
    pub end: SegmentEnd,
    /// Edits records read before the end.
    pub records: u64,
    /// Highest sequence id per region among them.
    pub max_seq: HashMap<u64, u64>,
}

/// Reads every record of segment `id` in `buf` (its whole file) and says
/// how it ends; `is_last` says whether it is the live (last) segment,
/// which may end in a torn tail. A bad header is an error.
pub fn check_segment(
    buf: &[u8],
    id: u64,
    is_last: bool,
) -> Result<SegmentCheck, (u64, &'static str)> {
    if buf.len() < SEGMENT_HEADER_LEN as usize || &buf[..8] != record::SEGMENT_MAGIC {
        return Err((0, "bad segment header magic"));
    }
    if buf[8..16] != id.to_le_bytes() {
        return Err((8, "segment header names another segment"));
    }
    let mut max_seq = HashMap::new();
    let mut records = 0;
    let mut pos = SEGMENT_HEADER_LEN as usize;
    let end = loop {
        let damage: &'static str = match record::read_frame(buf, pos, id) {
            Frame::Record {
                kind: TYPE_SEGMENT_END,
                ..
            } => break SegmentEnd::Closed(pos as u64),
            Frame::Record {
                kind: record::TYPE_SYNC_POINT,
                next,
                ..
            } => {
                pos = next;
                continue;
            }
            Frame::Record { payload, next, .. } => match record::decode_edits(payload) {
                Ok(edits) => {
                    if !edits.rows.is_empty() {
                        let last = edits.first_seq + edits.rows.len() as u64 - 1;
                        let m = max_seq.entry(edits.region_id).or_insert(0);
                        *m = last.max(*m);
                    }
                    records += 1;
                    pos = next;
                    continue;
                }
                // A record whose checksum holds but whose edits do not
                // decode was written wrong: damage whatever its place.
                Err(e) => {
                    break SegmentEnd::Damage {
                        offset: pos as u64,
                        what: e.what,
                    };
                }
            },
            Frame::EndOfData if !is_last => "closed segment has no end record",
            Frame::EndOfData => "zeros where synced records should be",
            Frame::Bad { what } => what,
        };
        let synced_past = record::highest_sync_claim_after(buf, pos + 1, id)
            .is_some_and(|claim| claim > pos as u64);
        break if is_last && !synced_past {
            SegmentEnd::TornTail(pos as u64)
        } else {
            SegmentEnd::Damage {
                offset: pos as u64,
                what: damage,
            }
        };
    };
    Ok(SegmentCheck {
        end,
        records,
        max_seq,
    })
}

/// Checks one segment at recovery: a torn tail is cut off by writing an end
/// record over it; damage in the middle of the log is an error, or with
/// `WalRecovery::StopAtDamage` where reading stops (cut off the same way).
fn scan_segment(
    path: &Path,
    id: u64,
    is_last: bool,
    mode: WalRecovery,
) -> Result<ScannedSegment, WalError> {
    let buf = fs::read(path).map_err(|e| WalError::io(path, "read segment", e))?;
    let corrupt = |offset: u64, what: &'static str| WalError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what,
    };
    let check = check_segment(&buf, id, is_last).map_err(|(o, w)| corrupt(o, w))?;
    let end_here = |pos: u64| -> Result<(), WalError> {
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| WalError::io(path, "open segment", e))?;
        let mut end = Vec::new();
        record::frame_into(&mut end, id, TYPE_SEGMENT_END, &[]);
        file.write_all_at(&end, pos)
            .and_then(|_| file.sync_data())
            .map_err(|e| WalError::io(path, "write end record", e))
    };
    let scanned = |valid_len, stopped| ScannedSegment {
        valid_len,
        max_seq: check.max_seq.clone(),
        stopped,
    };
    match check.end {
        SegmentEnd::Closed(at) => Ok(scanned(at, false)),
        SegmentEnd::TornTail(at) => {
            // Torn tail (or never written): end the segment here so the
            // next recovery sees a cleanly closed segment.
            end_here(at)?;
            Ok(scanned(at, false))
        }
        SegmentEnd::Damage { offset, what } => match mode {
            WalRecovery::Strict => Err(corrupt(offset, what)),
            WalRecovery::StopAtDamage => {
                tracing::error!(
                    segment = %path.display(),
                    offset,
                    damage = what,
                    "damage in the middle of the WAL: recovering the records before it, \
                     giving up every record after it (wal.recovery = \"stop_at_damage\")"
                );
                end_here(offset)?;
                Ok(scanned(offset, true))
            }
        },
    }
}

/// Creates `<id>.spare`: header, then zeros (or a recycled file's old bytes)
/// up to the segment size, synced, so appends overwrite allocated blocks.
fn prepare_segment(
    dir: &Path,
    id: u64,
    size: u64,
    recycled: Option<PathBuf>,
) -> Result<File, WalError> {
    let spare = dir.join(format!("{id:020}.spare"));
    let reused = match recycled {
        Some(from) => fs::rename(&from, &spare).is_ok(),
        None => false,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(!reused)
        .open(&spare)
        .map_err(|e| WalError::io(&spare, "create segment", e))?;
    let io_err = |e| WalError::io(&spare, "preallocate segment", e);
    crate::fault::fail_if_armed(crate::fault::Site::WalPrepare, &spare).map_err(io_err)?;
    file.write_all_at(&record::segment_header(id), 0)
        .map_err(io_err)?;
    let have = file.metadata().map_err(io_err)?.len();
    if have < size {
        let zeros = vec![0u8; 1024 * 1024];
        let mut at = have.max(SEGMENT_HEADER_LEN);
        while at < size {
            let n = (size - at).min(zeros.len() as u64) as usize;
            file.write_all_at(&zeros[..n], at).map_err(io_err)?;
            at += n as u64;
        }
    }
    if reused {
        // Stale records of the old segment fail their checksum (the segment
        // id is part of it); zero the first frame anyway so an empty reused
        // segment reads as empty rather than torn.
        file.write_all_at(&[0u8; record::FRAME_HEADER_LEN], SEGMENT_HEADER_LEN)
            .map_err(io_err)?;
    }
    file.sync_all().map_err(io_err)?;
    Ok(file)
}

/// Makes a prepared segment live: from here on recovery reads it.
fn activate_segment(dir: &Path, id: u64) -> Result<(), WalError> {
    let spare = dir.join(format!("{id:020}.spare"));
    let live = segment_path(dir, id);
    fs::rename(&spare, &live).map_err(|e| WalError::io(&live, "activate segment", e))?;
    fsync_dir(dir)
}

struct Batch {
    id: u64,
    tickets: Vec<Resolver>,
    outcome: Option<std::io::Result<()>>,
    sync: bool,
    submitted: Instant,
    /// Segment offset just past the batch.
    end: u64,
}

struct Writer {
    io: Box<dyn WalIo>,
    shared: Arc<Shared>,
    seg_id: u64,
    file: Arc<File>,
    seg_path: Arc<Path>,
    offset: u64,
    seg_max_seq: HashMap<u64, u64>,
    spare: Option<JoinHandle<Result<File, WalError>>>,
    next_batch: u64,
    inflight: VecDeque<Batch>,
    unsynced: bool,
    last_sync: Instant,
    /// Offset of the active segment up to which everything is synced...
    synced_to: u64,
    /// ...and the highest such offset written down in a sync point record.
    claimed: u64,
    /// The live segment was preallocated (zero-filled to `segment_size`);
    /// a segment begun after an idle release grows as it is written.
    preallocated: bool,
    /// When a batch was last submitted.
    last_write: Instant,
}

/// How long the writer waits for a completion before looking for new
/// requests: short against a sync (≈150 µs+), so the next batch is submitted
/// while the previous one syncs.
const REAP_WAIT: Duration = Duration::from_micros(100);

impl Writer {
    fn run(mut self, rx: Receiver<Request>) {
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
                } else if (self.preallocated || self.spare.is_some()) && !release.is_zero() {
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

    fn failed(&self) -> Option<String> {
        self.shared.failed.lock().clone()
    }

    fn fail(&mut self, cause: String) {
        self.shared.failed.lock().get_or_insert(cause.clone());
        for b in self.inflight.drain(..) {
            for t in b.tickets {
                t.resolve(Err(cause.clone()));
            }
        }
    }

    /// Frames `requests` into one buffer and submits it as one batch.
    fn submit(&mut self, requests: Vec<Request>) {
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

    fn reap(&mut self, wait: Option<Duration>) {
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

    fn drain(&mut self) {
        while !self.inflight.is_empty() {
            self.reap(Some(Duration::from_millis(10)));
        }
    }

    fn prepare_spare(&mut self) {
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
    fn roll(&mut self) -> Result<(), WalError> {
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

    /// Gives back a quiet log's preallocated space: once nothing was
    /// written for `release_after_idle` and every edit of the live segment
    /// is flushed, the log goes on in a new segment that is not
    /// preallocated, and the old one, the spare and the kept flushed
    /// segments are deleted.
    fn release_if_idle(&mut self) -> Result<(), WalError> {
        let release = self.shared.options.release_after_idle;
        if release.is_zero()
            || self.last_write.elapsed() < release
            || self.failed().is_some()
            || !self.inflight.is_empty()
            || self.unsynced
        {
            return Ok(());
        }
        if !self.preallocated {
            // Written to after a release and quiet again before the spare
            // asked for then was taken (a slow disk zero-fills it after the
            // last write): the spare goes, and the log stays small.
            if let Some(h) = self.spare.take() {
                let _ = h.join();
                self.shared.segments.lock().spare_ready = false;
                let spare = self
                    .shared
                    .dir
                    .join(format!("{:020}.spare", self.seg_id + 1));
                if let Err(e) = fs::remove_file(&spare)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(path = %spare.display(), error = %e, "could not delete an unused WAL spare");
                }
            }
            return Ok(());
        }
        {
            let segs = self.shared.segments.lock();
            if !segs.closed.is_empty() || !segs.all_flushed(&self.seg_max_seq) {
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
            if let Err(e) = fs::remove_file(path) {
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

    fn close_segment(&mut self) -> Result<(), WalError> {
        let path = segment_path(&self.shared.dir, self.seg_id);
        let mut end = Vec::new();
        record::frame_into(&mut end, self.seg_id, TYPE_SEGMENT_END, &[]);
        self.file
            .write_all_at(&end, self.offset)
            .and_then(|_| self.file.sync_data())
            .map_err(|e| WalError::io(&path, "close segment", e))?;
        self.shared.stats.syncs.add();
        self.unsynced = false;
        Ok(())
    }

    fn finish(mut self) {
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

fn request_len(r: &Request) -> usize {
    match r {
        Request::Append { head, body, .. } => head.len() + body.len() + record::FRAME_HEADER_LEN,
        Request::Sync { .. } | Request::Shutdown => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_request_fails_its_ticket_instead_of_hanging() {
        let ticket = Ticket::new();
        drop(Resolver::new(ticket.clone(), None));
        assert!(matches!(ticket.wait(), Err(WalError::Failed(_))));
        let ticket = Ticket::new();
        Resolver::new(ticket.clone(), None).resolve(Ok(()));
        assert!(ticket.wait().is_ok());
    }

    #[test]
    fn appends_after_close_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::open(
            dir.path(),
            WalOptions {
                segment_size: 64 * 1024,
                ..WalOptions::default()
            },
        )
        .unwrap();
        wal.close();
        assert!(matches!(
            wal.append(1, 1, vec![1], true),
            Err(WalError::Closed)
        ));
        assert!(matches!(wal.sync(), Err(WalError::Closed)));
    }

    #[test]
    fn a_sync_barrier_syncs_earlier_async_appends_and_they_replay() {
        for io in [IoBackendChoice::Auto, IoBackendChoice::Sync] {
            let dir = tempfile::tempdir().unwrap();
            let options = WalOptions {
                segment_size: 64 * 1024,
                io,
                // No timer sync during the test: only the barrier syncs.
                async_sync_interval: Duration::from_secs(3600),
                ..WalOptions::default()
            };
            let wal = Wal::open(dir.path(), options.clone()).unwrap();
            let rows = crate::cell::EntryBatch::from_rows(&[vec![crate::cell::Entry {
                key: crate::cell::encode_key(
                    b"r",
                    b"f",
                    b"q",
                    1,
                    crate::cell::CellKind::Put,
                    false,
                ),
                ttl_ms: None,
                value: b"v".to_vec(),
            }]]);
            for seq in 1..=3 {
                wal.append(7, seq, record::encode_edits(7, seq, None, &rows), false)
                    .unwrap()
                    .wait()
                    .unwrap();
            }
            let before = wal.stats().syncs.get();
            wal.sync().unwrap().wait().unwrap();
            assert_eq!(wal.stats().syncs.get(), before + 1, "{io:?}");
            assert_eq!(wal.stats().appends.load(Ordering::Relaxed), 3);
            drop(wal);
            let wal = Wal::open(dir.path(), options).unwrap();
            let mut seqs = Vec::new();
            wal.replay(7, 0, |e| seqs.push(e.first_seq)).unwrap();
            assert_eq!(seqs, vec![1, 2, 3], "{io:?}");
        }
    }

    #[test]
    fn one_pass_replays_each_asked_region_above_its_flushed_seq_in_log_order() {
        let dir = tempfile::tempdir().unwrap();
        let options = WalOptions {
            segment_size: 64 * 1024,
            ..WalOptions::default()
        };
        let wal = Wal::open(dir.path(), options.clone()).unwrap();
        let rows = crate::cell::EntryBatch::from_rows(&[vec![crate::cell::Entry {
            key: crate::cell::encode_key(b"r", b"f", b"q", 1, crate::cell::CellKind::Put, false),
            ttl_ms: None,
            value: vec![b'v'; 300],
        }]]);
        // Enough records for several segments, regions interleaved.
        for seq in 1..=400u64 {
            let region = seq % 4;
            wal.append(
                region,
                seq,
                record::encode_edits(region, seq, None, &rows),
                false,
            )
            .unwrap()
            .wait()
            .unwrap();
        }
        drop(wal);
        let wal = Wal::open(dir.path(), options).unwrap();
        assert!(wal.recovered.len() > 1, "the test needs several segments");
        // Region 2 is not asked for; region 3 has flushed through seq 199.
        let after = HashMap::from([(0, 0), (1, 0), (3, 199)]);
        let mut seen: Vec<(u64, u64)> = Vec::new();
        wal.replay_regions(&after, |e| seen.push((e.region_id, e.first_seq)))
            .unwrap();
        let expected: Vec<(u64, u64)> = (1..=400u64)
            .map(|seq| (seq % 4, seq))
            .filter(|&(r, seq)| r == 0 || r == 1 || (r == 3 && seq > 199))
            .collect();
        assert_eq!(seen, expected);
        // The single-region form gives the same as the one pass, per region.
        let mut three = Vec::new();
        wal.replay(3, 199, |e| three.push(e.first_seq)).unwrap();
        let from_pass: Vec<u64> = seen.iter().filter(|p| p.0 == 3).map(|p| p.1).collect();
        assert_eq!(three, from_pass);
    }
}
