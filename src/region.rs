//! A region: a contiguous row-key range of one table with its MemStore,
//! store files per family, and a share of a WAL.
//!
//! # Write path
//!
//! [`Region::submit`] validates a batch of row mutations and turns them into
//! entries, waits while MemStores are over the blocking limit (backpressure),
//! then under the write lock reserves sequence ids (one per row), queues the
//! WAL record and inserts into the active MemStore. The returned
//! [`PendingWrite`] resolves when the WAL says the record is durable; only then
//! does the MVCC read point move past it, so readers see a row's edits all at
//! once and never before they are durable.
//!
//! # Flush and compaction
//!
//! A flush swaps the active MemStore for a new one under the write lock (so
//! every sequence id up to the swap is in the snapshot), waits for the
//! in-flight writes of the snapshot, writes one store file per family, then
//! records them in the manifest with the flushed sequence id and lets the WAL
//! drop what is covered. Compaction merges store files in the background;
//! both publish their result by swapping the region's file lists, so readers
//! and writers never wait for them.

pub mod block_cache;
pub mod compaction;
pub mod flush;
pub mod maintenance;
pub mod manifest;
pub mod memstore;
pub mod read;
pub mod sst;
pub mod wal;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex, RwLock};

use crate::cell::{self, CellKind, EntryBatch, KeyRef, Mutation, Row, RowMutation};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::region::memstore::cursor::MemCursor;
use crate::region::read::merge::{Merge, Source};
use crate::region::read::{Get, RowScanner, Scan, ScanPage};
use crate::schema::{Durability, FamilyDescriptor};
use block_cache::BlockCache;
use manifest::Manifest;
use memstore::{MemStore, Mvcc};
use sst::SstReader;
use wal::record::{Edits, SourcePosition, SourceShard, encode_edits_body, encode_edits_head};
use wal::{Ticket, Wal};

/// Region settings; every bound has a default.
#[derive(Debug, Clone)]
pub struct RegionOptions {
    /// Flush the MemStore when it holds this many bytes (default 128 MiB).
    pub flush_size: usize,
    /// Writers wait while MemStores hold more than `flush_size` × this
    /// (default 4), as HBase's `hbase.hregion.memstore.block.multiplier`.
    pub blocking_multiplier: usize,
    /// Flush a MemStore whose oldest edit is this old (default 1 hour).
    pub flush_age: Duration,
    /// Largest cell value accepted (default 10 MiB).
    pub max_value_size: usize,
    /// Flush the MemStore when the region closes (default on).
    pub flush_on_close: bool,
    /// Run flushes and compactions on background threads (default on).
    pub background: bool,
    pub compaction: compaction::CompactionOptions,
}

impl Default for RegionOptions {
    fn default() -> Self {
        RegionOptions {
            flush_size: 128 * 1024 * 1024,
            blocking_multiplier: 4,
            flush_age: Duration::from_secs(3600),
            max_value_size: 10 * 1024 * 1024,
            flush_on_close: true,
            background: true,
            compaction: compaction::CompactionOptions::default(),
        }
    }
}

/// What a region is: its id, families and rows.
#[derive(Debug, Clone, Default)]
pub struct RegionDescriptor {
    pub id: u64,
    pub families: Vec<FamilyDescriptor>,
    /// Rows `[start, end)` the region serves (empty `end`: to the end).
    /// Store files linked from a split parent hold rows outside it, which
    /// reads never ask for and compactions drop.
    pub start: Vec<u8>,
    pub end: Vec<u8>,
}

impl RegionDescriptor {
    pub fn new(id: u64, families: Vec<FamilyDescriptor>) -> Self {
        RegionDescriptor {
            id,
            families,
            ..RegionDescriptor::default()
        }
    }

    pub fn contains(&self, row: &[u8]) -> bool {
        row >= self.start.as_slice() && (self.end.is_empty() || row < self.end.as_slice())
    }
}

/// Counters for metrics, benchmarks and tests.
#[derive(Debug, Default)]
pub struct RegionStats {
    pub flushes: AtomicU64,
    pub flushed_bytes: AtomicU64,
    pub flush_micros: AtomicU64,
    pub compactions: AtomicU64,
    pub compacted_bytes_in: AtomicU64,
    pub compacted_bytes_out: AtomicU64,
    pub expired_files_dropped: AtomicU64,
    pub writer_stalls: AtomicU64,
    pub writer_stall_micros: AtomicU64,
    pub files_skipped_by_bloom: AtomicU64,
    /// Files a read left out because their time range cannot match.
    pub files_skipped_by_time: AtomicU64,
    /// Flushes that failed (the data stays in the MemStore and the WAL,
    /// and the next flush tries again).
    pub flush_failures: AtomicU64,
}

/// The last flush failed, and keeps failing until one succeeds.
#[derive(Debug, Clone)]
pub struct FlushTrouble {
    pub error: String,
    /// The disk is full (`ENOSPC`).
    pub no_space: bool,
    pub since: Instant,
    last_logged: Instant,
}

/// What readers snapshot: MemStores newest first, files per family oldest
/// first.
#[derive(Debug, Clone)]
struct State {
    active: Arc<MemStore>,
    flushing: Vec<Arc<MemStore>>,
    files: BTreeMap<Vec<u8>, Vec<Arc<SstReader>>>,
}

enum Work {
    Flush,
    Compact,
    Stop,
}

pub(crate) struct Inner {
    id: u64,
    /// Rows this region serves (see [`RegionDescriptor`]).
    rows: (Vec<u8>, Vec<u8>),
    dir: PathBuf,
    options: RegionOptions,
    families: Arc<HashMap<Vec<u8>, FamilyDescriptor>>,
    family_order: Vec<Vec<u8>>,
    wal: Arc<Wal>,
    clock: Arc<dyn Clock>,
    cache: Arc<BlockCache>,
    write_lock: Mutex<()>,
    mvcc: Mvcc,
    state: RwLock<State>,
    manifest: Mutex<Manifest>,
    next_file_id: AtomicU64,
    flush_lock: Mutex<()>,
    compaction_lock: Mutex<()>,
    /// Writers blocked on memory wait here; flushes notify.
    room: (Mutex<()>, Condvar),
    poisoned: Mutex<Option<String>>,
    /// Set while flushes fail, cleared by the next that succeeds.
    flush_trouble: Mutex<Option<FlushTrouble>>,
    closed: AtomicBool,
    stats: RegionStats,
    work_tx: Sender<Work>,
    compact_tx: Sender<Work>,
    /// Shared flush and compaction threads, when the region has no threads
    /// of its own. Weak: the store owns them, and a pool thread must never
    /// end up holding the last reference to its own pool.
    maintenance: Option<std::sync::Weak<maintenance::Maintenance>>,
    /// A flush request is queued: later writes need not queue another.
    flush_requested: AtomicBool,
    /// A flush was asked for from outside (the store's memory limit): due
    /// whatever the MemStore's size.
    flush_forced: AtomicBool,
    /// Source positions (Kafka's, say) carried by the writes this region
    /// took (and recovered from its manifest and WAL); the manifest keeps
    /// them.
    positions: Mutex<BTreeMap<SourceShard, u64>>,
}

/// One region of a table.
pub struct Region {
    inner: Arc<Inner>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("id", &self.inner.id)
            .field("dir", &self.inner.dir)
            .finish()
    }
}

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

fn family_dir(dir: &Path, family: &[u8]) -> PathBuf {
    dir.join(String::from_utf8_lossy(family).as_ref())
}

impl Region {
    /// Opens a region in `dir`, creating it if new: loads the manifest and
    /// its store files, removes leftovers of interrupted flushes or
    /// compactions, and replays the region's unflushed edits from `wal`.
    pub fn open(
        dir: impl AsRef<Path>,
        descriptor: RegionDescriptor,
        options: RegionOptions,
        wal: Arc<Wal>,
        clock: Arc<dyn Clock>,
        cache: Arc<BlockCache>,
    ) -> Result<Region> {
        Region::open_with(dir, descriptor, options, wal, clock, cache, None)
    }

    /// Like [`Region::open`]; with `maintenance`, flushes and compactions run
    /// on those shared threads instead of two threads of the region's own.
    pub fn open_with(
        dir: impl AsRef<Path>,
        descriptor: RegionDescriptor,
        options: RegionOptions,
        wal: Arc<Wal>,
        clock: Arc<dyn Clock>,
        cache: Arc<BlockCache>,
        maintenance: Option<Arc<maintenance::Maintenance>>,
    ) -> Result<Region> {
        let mut recovering = RecoveringRegion::load(dir, descriptor, options, cache)?;
        recovering.replay_wal(&wal, clock.now_ms())?;
        recovering.open(wal, clock, maintenance)
    }
}

/// A region whose manifest and store files are loaded and whose unflushed
/// edits are being replayed into its MemStore; [`RecoveringRegion::open`]
/// makes it a [`Region`]. Kept apart so that a store opening many regions
/// reads each shard's WAL once for all of them, not once per region.
pub struct RecoveringRegion {
    dir: PathBuf,
    descriptor: RegionDescriptor,
    options: RegionOptions,
    cache: Arc<BlockCache>,
    manifest: Manifest,
    files: BTreeMap<Vec<u8>, Vec<Arc<SstReader>>>,
    active: Arc<MemStore>,
    last_seq: u64,
    positions: BTreeMap<SourceShard, u64>,
}

impl RecoveringRegion {
    /// Loads the manifest and its store files, and removes leftovers of
    /// interrupted flushes or compactions.
    pub fn load(
        dir: impl AsRef<Path>,
        descriptor: RegionDescriptor,
        options: RegionOptions,
        cache: Arc<BlockCache>,
    ) -> Result<RecoveringRegion> {
        let dir = dir.as_ref().to_path_buf();
        for f in &descriptor.families {
            f.validate()?;
        }
        if descriptor.families.is_empty() {
            return Err(Error::InvalidInput(
                "a region needs at least one column family".into(),
            ));
        }
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, "create region directory", e))?;
        let mut manifest = Manifest::load(&dir)?.unwrap_or(Manifest {
            next_file_id: 1,
            ..Default::default()
        });
        let mut files = BTreeMap::new();
        for family in &descriptor.families {
            let fdir = family_dir(&dir, &family.name);
            fs::create_dir_all(&fdir)
                .map_err(|e| Error::io(&fdir, "create family directory", e))?;
            let live = manifest
                .families
                .entry(family.name.clone())
                .or_default()
                .clone();
            remove_leftovers(&fdir, &live)?;
            let mut readers = Vec::with_capacity(live.len());
            for id in live {
                let path = fdir.join(sst::file_name(id));
                readers.push(SstReader::open(
                    &path,
                    id,
                    cache.clone(),
                    family.block_cache,
                    family.in_memory,
                )?);
            }
            files.insert(family.name.clone(), readers);
        }
        let last_seq = manifest.flushed_seq;
        let positions = manifest.positions.clone();
        Ok(RecoveringRegion {
            dir,
            descriptor,
            options,
            cache,
            manifest,
            files,
            active: Arc::new(MemStore::new()),
            last_seq,
            positions,
        })
    }

    pub fn id(&self) -> u64 {
        self.descriptor.id
    }

    /// The highest sequence id already in store files: the WAL's edits up
    /// to it need no replay.
    pub fn flushed_seq(&self) -> u64 {
        self.manifest.flushed_seq
    }

    /// Replays this region's unflushed edits from `wal` alone (a store
    /// opening many regions replays each shard's log once for all of them).
    pub fn replay_wal(&mut self, wal: &Wal, now_ms: u64) -> Result<()> {
        wal.replay(self.id(), self.flushed_seq(), |edits| {
            self.replay(edits, now_ms)
        })?;
        Ok(())
    }

    /// Applies one WAL record of this region: rows at or below the flushed
    /// sequence id are skipped, the rest go into the MemStore.
    pub fn replay(&mut self, edits: Edits, now_ms: u64) {
        if let Some(o) = &edits.origin {
            note_position(&mut self.positions, o);
        }
        let flushed = self.manifest.flushed_seq;
        for (i, row) in edits.rows.into_iter().enumerate() {
            let seq = edits.first_seq + i as u64;
            if seq <= flushed {
                continue;
            }
            self.last_seq = self.last_seq.max(seq);
            if let Some(first) = row.first() {
                let key = cell::row_of(&first.key).to_vec();
                self.active.insert_row(
                    &key,
                    seq,
                    row.iter().map(|e| cell::EntryRef {
                        key: &e.key,
                        ttl_ms: e.ttl_ms,
                        value: &e.value,
                    }),
                    now_ms,
                );
            }
        }
    }

    /// Makes the region live: writes go to `wal`, and flushes and
    /// compactions run on `maintenance` (or threads of its own).
    pub fn open(
        self,
        wal: Arc<Wal>,
        clock: Arc<dyn Clock>,
        maintenance: Option<Arc<maintenance::Maintenance>>,
    ) -> Result<Region> {
        let RecoveringRegion {
            dir,
            descriptor,
            options,
            cache,
            manifest,
            files,
            active,
            last_seq,
            positions,
        } = self;
        wal.mark_flushed(descriptor.id, manifest.flushed_seq);
        let families: HashMap<Vec<u8>, FamilyDescriptor> = descriptor
            .families
            .iter()
            .map(|f| (f.name.clone(), f.clone()))
            .collect();

        let (work_tx, work_rx) = crossbeam_channel::bounded(64);
        let (compact_tx, compact_rx) = crossbeam_channel::bounded(1);
        let inner = Arc::new(Inner {
            id: descriptor.id,
            rows: (descriptor.start.clone(), descriptor.end.clone()),
            dir,
            next_file_id: AtomicU64::new(manifest.next_file_id),
            manifest: Mutex::new(manifest),
            families: Arc::new(families),
            family_order: descriptor.families.iter().map(|f| f.name.clone()).collect(),
            options,
            wal,
            clock,
            cache,
            write_lock: Mutex::new(()),
            mvcc: Mvcc::new(last_seq),
            state: RwLock::new(State {
                active,
                flushing: Vec::new(),
                files,
            }),
            flush_lock: Mutex::new(()),
            compaction_lock: Mutex::new(()),
            room: (Mutex::new(()), Condvar::new()),
            poisoned: Mutex::new(None),
            flush_trouble: Mutex::new(None),
            closed: AtomicBool::new(false),
            stats: RegionStats::default(),
            work_tx,
            compact_tx,
            maintenance: maintenance.as_ref().map(Arc::downgrade),
            flush_requested: AtomicBool::new(false),
            flush_forced: AtomicBool::new(false),
            positions: Mutex::new(positions),
        });
        let mut workers = Vec::new();
        if let Some(m) = &maintenance {
            m.register(&inner);
        } else if inner.options.background {
            let w = inner.clone();
            workers.push(
                std::thread::Builder::new()
                    .name(format!("halite-flush-{}", inner.id))
                    .spawn(move || flush_loop(w, work_rx))
                    .map_err(|e| Error::io(&inner.dir, "spawn flush thread", e))?,
            );
            let w = inner.clone();
            workers.push(
                std::thread::Builder::new()
                    .name(format!("halite-compact-{}", inner.id))
                    .spawn(move || compaction_loop(w, compact_rx))
                    .map_err(|e| Error::io(&inner.dir, "spawn compaction thread", e))?,
            );
        }
        Ok(Region {
            inner,
            workers: Mutex::new(workers),
        })
    }
}

impl Region {
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    pub fn stats(&self) -> &RegionStats {
        &self.inner.stats
    }

    /// Why flushes of this region are failing, while they are.
    pub fn flush_trouble(&self) -> Option<FlushTrouble> {
        self.inner.flush_trouble.lock().clone()
    }

    pub fn families(&self) -> &HashMap<Vec<u8>, FamilyDescriptor> {
        &self.inner.families
    }

    /// Per source shard (a Kafka topic and partition), the position below
    /// which every message is durable, as far as this region's writes tell.
    pub fn source_positions(&self) -> BTreeMap<SourceShard, u64> {
        self.inner.positions.lock().clone()
    }

    /// Applies row mutations with the given durability and waits until they
    /// are acknowledged.
    pub fn mutate(&self, rows: &[RowMutation], durability: Durability) -> Result<()> {
        self.submit(rows, durability, None)?.wait()
    }

    /// Queues row mutations; the returned handle resolves when they are
    /// durable (per `durability`). Each row's mutations are atomic. `origin`
    /// records where the batch came from (Kafka) in the WAL.
    pub fn submit(
        &self,
        rows: &[RowMutation],
        durability: Durability,
        origin: Option<&SourcePosition>,
    ) -> Result<PendingWrite> {
        self.inner.submit(rows, durability, origin)
    }

    /// Like [`Region::submit`], for rows already encoded as entries (see
    /// [`crate::ingest::PointEncoder`]); refused the same way when closed.
    pub fn submit_batch(
        &self,
        entries: &EntryBatch,
        durability: Durability,
        origin: Option<&SourcePosition>,
    ) -> Result<PendingWrite> {
        self.inner.submit_batch(entries, durability, origin)
    }

    /// Reads one row.
    pub fn get(&self, get: &Get) -> Result<Option<Row>> {
        let mut stop = get.row.clone();
        stop.push(0);
        let scan = Scan {
            start: Some(get.row.clone()),
            stop: Some(stop),
            columns: get.columns.clone(),
            time_range: get.time_range,
            max_versions: get.max_versions,
            limit: Some(1),
            ..Scan::default()
        };
        let mut scanner = self.inner.scanner(&scan, Some(get))?;
        scanner.next_row()
    }

    /// Opens a streaming scanner on a consistent snapshot.
    pub fn scanner(&self, scan: &Scan) -> Result<RowScanner> {
        self.inner.scanner(scan, None)
    }

    /// Reads one page of a scan.
    pub fn scan(&self, scan: &Scan) -> Result<ScanPage> {
        self.inner.scanner(scan, None)?.page()
    }

    /// Flushes the MemStore to store files now.
    pub fn flush(&self) -> Result<()> {
        let outcome = flush::flush(&self.inner);
        self.inner.note_flush(&outcome);
        outcome
    }

    /// Asks for a minor compaction in the background; it runs when the
    /// compaction policy finds files to merge.
    pub fn request_compaction(&self) {
        self.inner.request_compaction();
    }

    /// Compacts now: a major compaction rewrites every family into one file
    /// and drops deleted, surplus and expired cells; a minor one merges the
    /// files the policy selects.
    pub fn compact(&self, major: bool) -> Result<()> {
        compaction::compact(&self.inner, major)
    }

    /// Live store files per family.
    pub fn file_counts(&self) -> BTreeMap<Vec<u8>, usize> {
        self.inner
            .state
            .read()
            .files
            .iter()
            .map(|(f, v)| (f.clone(), v.len()))
            .collect()
    }

    /// Paths of the live store files.
    pub fn file_paths(&self) -> Vec<PathBuf> {
        self.inner
            .state
            .read()
            .files
            .values()
            .flatten()
            .map(|r| r.path().to_path_buf())
            .collect()
    }

    /// Asks for a flush in the background whatever the MemStore's size (the
    /// store does when all MemStores together pass its memory limit).
    pub fn request_flush(&self) {
        if self.inner.state.read().active.is_empty() {
            return;
        }
        self.inner.flush_forced.store(true, Ordering::SeqCst);
        self.inner.request_flush();
    }

    /// The rows this region serves: start (inclusive) and end (exclusive;
    /// empty for the last region).
    pub fn row_range(&self) -> (&[u8], &[u8]) {
        (&self.inner.rows.0, &self.inner.rows.1)
    }

    /// The highest sequence id given to a write so far.
    pub fn last_seq(&self) -> u64 {
        self.inner.mvcc.last_assigned()
    }

    /// Every write with a sequence id up to this is in store files.
    pub fn flushed_seq(&self) -> u64 {
        self.inner.manifest.lock().flushed_seq
    }

    /// Bytes in MemStores (active and being flushed).
    pub fn memstore_bytes(&self) -> usize {
        self.inner.memstore_bytes()
    }

    /// Bytes of live store files.
    pub fn store_bytes(&self) -> u64 {
        self.inner
            .state
            .read()
            .files
            .values()
            .flatten()
            .map(|r| r.size())
            .sum()
    }

    /// Whether some store file holds rows outside the region's range: files
    /// linked from a split parent, until a compaction rewrites them. Such a
    /// region must not split again.
    pub fn has_foreign_rows(&self) -> bool {
        let (start, end) = &self.inner.rows;
        self.inner.state.read().files.values().flatten().any(|r| {
            let m = r.meta();
            m.entries > 0
                && (cell::row_of(&m.first_key) < start.as_slice()
                    || (!end.is_empty() && cell::row_of(&m.last_key) >= end.as_slice()))
        })
    }

    /// Where the region would split: the first row of the middle block of
    /// its largest store file, when that row lies strictly inside the
    /// region (so both halves are non-empty ranges) and no file holds
    /// foreign rows.
    pub fn split_row(&self) -> Option<Vec<u8>> {
        if self.has_foreign_rows() {
            return None;
        }
        let st = self.inner.state.read();
        let largest = st.files.values().flatten().max_by_key(|r| r.size())?;
        let mid = largest.middle_row()?;
        let (start, end) = &self.inner.rows;
        (mid.as_slice() > start.as_slice() && (end.is_empty() || mid.as_slice() < end.as_slice()))
            .then_some(mid)
    }

    /// Refuses further writes, stops background work and flushes whatever
    /// the MemStore holds, whatever `flush_on_close` says: the region's data
    /// is then all in store files, ready to be linked into daughters.
    pub fn close_for_split(&self) -> Result<()> {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.stop_background();
        flush::flush(&self.inner)
    }

    /// Makes `dir` a region holding this (closed, flushed) region's store
    /// files as hard links, with a manifest naming them: a split daughter.
    /// Everything is fsynced before this returns.
    pub fn link_files_into(&self, dir: &Path) -> Result<()> {
        let manifest = self.inner.manifest.lock().clone();
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create region directory", e))?;
        for (family, ids) in &manifest.families {
            let from = family_dir(&self.inner.dir, family);
            let to = family_dir(dir, family);
            fs::create_dir_all(&to).map_err(|e| Error::io(&to, "create family directory", e))?;
            for id in ids {
                let target = to.join(sst::file_name(*id));
                match fs::hard_link(from.join(sst::file_name(*id)), &target) {
                    Ok(()) => {}
                    // A retried split after a crash: the link is already there.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(Error::io(&target, "link store file", e)),
                }
            }
            crate::fsutil::fsync_dir(&to)
                .map_err(|e| Error::io(&to, "sync family directory", e))?;
        }
        Manifest {
            next_file_id: self.inner.next_file_id.load(Ordering::SeqCst),
            ..manifest
        }
        .store(dir)?;
        if let Some(parent) = dir.parent() {
            crate::fsutil::fsync_dir(parent)
                .map_err(|e| Error::io(parent, "sync regions directory", e))?;
        }
        Ok(())
    }

    /// Stops background work and refuses further writes without flushing:
    /// for a region whose data is being deleted.
    pub fn close_without_flush(&self) {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.stop_background();
    }

    /// Stops background work: the region's own threads, or waits out what
    /// shared threads are doing for it (they skip closed regions after).
    fn stop_background(&self) {
        let _ = self.inner.work_tx.send(Work::Stop);
        let _ = self.inner.compact_tx.send(Work::Stop);
        for w in self.workers.lock().drain(..) {
            let _ = w.join();
        }
        drop(self.inner.compaction_lock.lock());
        drop(self.inner.flush_lock.lock());
    }

    /// Stops background work, flushes (if configured) and refuses further
    /// writes. The WAL is not closed: it may serve other regions.
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.stop_background();
        if self.inner.options.flush_on_close && self.inner.poisoned.lock().is_none() {
            flush::flush(&self.inner)?;
        }
        Ok(())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        let _ = self.inner.work_tx.try_send(Work::Stop);
        let _ = self.inner.compact_tx.try_send(Work::Stop);
        for w in self.workers.lock().drain(..) {
            let _ = w.join();
        }
    }
}

fn note_position(positions: &mut BTreeMap<SourceShard, u64>, o: &SourcePosition) {
    let at = positions
        .entry((o.stream.clone(), o.shard))
        .or_insert(o.durable_below);
    *at = (*at).max(o.durable_below);
}

/// Deletes store files (and temporary files) the manifest does not name.
fn remove_leftovers(fdir: &Path, live: &[u64]) -> Result<()> {
    let entries = fs::read_dir(fdir).map_err(|e| Error::io(fdir, "list family directory", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(fdir, "list family directory", e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let id = name
            .strip_suffix(".sst")
            .and_then(|s| s.parse::<u64>().ok());
        let leftover = name.ends_with(".tmp") || id.is_some_and(|id| !live.contains(&id));
        if leftover {
            fs::remove_file(entry.path())
                .map_err(|e| Error::io(entry.path(), "remove leftover file", e))?;
        }
    }
    Ok(())
}

/// Flushes on request, on size and on age. Never compacts, so a long
/// compaction cannot hold MemStores in memory.
fn flush_loop(inner: Arc<Inner>, rx: Receiver<Work>) {
    let tick =
        (inner.options.flush_age / 4).clamp(Duration::from_millis(50), Duration::from_secs(10));
    let mut backoff_until: Option<Instant> = None;
    loop {
        let work = match rx.recv_timeout(tick) {
            Ok(w) => Some(w),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
        };
        if matches!(work, Some(Work::Stop)) || inner.closed.load(Ordering::SeqCst) {
            return;
        }
        if backoff_until.is_some_and(|t| Instant::now() < t) {
            continue;
        }
        if matches!(work, Some(Work::Flush)) {
            inner.clear_flush_request();
        }
        let flush = inner.flush_due();
        if flush {
            if let Err(_e) = flush::flush(&inner) {
                // The data is still in the MemStore and the WAL: try again
                // later rather than spin on a failing disk.
                backoff_until = Some(Instant::now() + Duration::from_secs(1));
                continue;
            }
        }
        if flush {
            inner.request_compaction();
        }
    }
}

/// Runs minor compactions after flushes, one at a time.
fn compaction_loop(inner: Arc<Inner>, rx: Receiver<Work>) {
    loop {
        // Polls the closed flag too: a Stop sent with try_send may not fit
        // behind a queued request.
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(Work::Compact) if !inner.closed.load(Ordering::SeqCst) => {
                // Failures leave the files as they were; the next flush retries.
                let _ = compaction::compact(&inner, false);
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout)
                if !inner.closed.load(Ordering::SeqCst) => {}
            _ => return,
        }
    }
}

impl Inner {
    fn memstore_bytes(&self) -> usize {
        let s = self.state.read();
        s.active.bytes() + s.flushing.iter().map(|m| m.bytes()).sum::<usize>()
    }

    fn needs_flush(&self) -> bool {
        self.state.read().active.bytes() >= self.options.flush_size
    }

    /// Notes how a flush went: a failure is logged (the first, then at most
    /// every 30 s while they go on) and counted; a success after failures
    /// is logged once.
    pub(crate) fn note_flush(&self, outcome: &Result<()>) {
        let mut trouble = self.flush_trouble.lock();
        match outcome {
            Ok(()) => {
                if let Some(t) = trouble.take() {
                    tracing::info!(
                        region = self.id,
                        failing_s = t.since.elapsed().as_secs_f64(),
                        "flushes succeed again"
                    );
                }
            }
            Err(e) => {
                self.stats.flush_failures.fetch_add(1, Ordering::Relaxed);
                let no_space = e.is_no_space();
                let now = Instant::now();
                let log = trouble
                    .as_ref()
                    .is_none_or(|t| now.duration_since(t.last_logged) >= Duration::from_secs(30));
                if log {
                    tracing::error!(
                        region = self.id,
                        error = %e,
                        no_space,
                        "flushing the MemStore failed; its data is safe in the WAL and \
                         the flush is retried, but writes wait once MemStores fill up{}",
                        if no_space { " (the disk is full: free space on it)" } else { "" }
                    );
                }
                let since = trouble.as_ref().map_or(now, |t| t.since);
                *trouble = Some(FlushTrouble {
                    error: e.to_string(),
                    no_space,
                    since,
                    last_logged: if log {
                        now
                    } else {
                        trouble.as_ref().map_or(now, |t| t.last_logged)
                    },
                });
            }
        }
    }

    fn poison(&self, cause: String) {
        self.poisoned.lock().get_or_insert(cause);
        self.mvcc.poison();
        self.room.1.notify_all();
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        if let Some(cause) = self.poisoned.lock().clone() {
            return Err(Error::Poisoned(cause));
        }
        Ok(())
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Whether the MemStores should be flushed now: the active one is full
    /// or old, or together they are over the blocking limit.
    fn flush_due(&self) -> bool {
        let first = self.state.read().active.first_write_ms();
        let aged = first != 0
            && self.clock.now_ms().saturating_sub(first)
                >= self.options.flush_age.as_millis() as u64;
        aged || self.flush_forced.load(Ordering::SeqCst)
            || self.needs_flush()
            || self.memstore_bytes() >= self.blocking_limit()
    }

    fn blocking_limit(&self) -> usize {
        self.options
            .flush_size
            .saturating_mul(self.options.blocking_multiplier.max(1))
    }

    fn clear_flush_request(&self) {
        self.flush_requested.store(false, Ordering::SeqCst);
    }

    /// Queues one flush request; more writes before it is served add none.
    fn request_flush(self: &Arc<Self>) {
        if self.flush_requested.swap(true, Ordering::SeqCst) {
            return;
        }
        let queued = match &self.maintenance {
            Some(m) => m.upgrade().is_some_and(|m| m.request_flush(self)),
            None => self.work_tx.try_send(Work::Flush).is_ok(),
        };
        if !queued {
            // Nothing will be served for this request: let the next write
            // ask again instead of waiting for the timer.
            self.clear_flush_request();
        }
    }

    fn request_compaction(self: &Arc<Self>) {
        match &self.maintenance {
            Some(m) => {
                if let Some(m) = m.upgrade() {
                    m.request_compaction(self);
                }
            }
            None => {
                // A pending request already covers this one.
                let _ = self.compact_tx.try_send(Work::Compact);
            }
        }
    }

    /// One of a write's two conditions (in the MemStore, durable) is met;
    /// the second completes it.
    fn pass_gate(self: &Arc<Self>, gate: &AtomicU8, last_seq: u64) {
        if gate.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.mvcc.complete(last_seq);
            self.after_write();
        }
    }

    fn after_write(self: &Arc<Self>) {
        if self.needs_flush() {
            self.request_flush();
        }
    }

    /// Validates row mutations and encodes them into one batch.
    fn to_entries(&self, rows: &[RowMutation], now: u64) -> Result<EntryBatch> {
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
    fn wait_for_room(self: &Arc<Self>) -> Result<()> {
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
                let outcome = flush::flush(self);
                self.note_flush(&outcome);
                outcome?;
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

    fn submit(
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
    fn submit_batch(
        self: &Arc<Self>,
        entries: &EntryBatch,
        durability: Durability,
        origin: Option<&SourcePosition>,
    ) -> Result<PendingWrite> {
        self.check_open()?;
        self.check_entries(entries)?;
        self.submit_entries(entries, durability, origin, self.clock.now_ms())
    }

    fn check_entries(&self, entries: &EntryBatch) -> Result<()> {
        let mut check = CellCheck::new(self);
        for i in 0..entries.rows() {
            for e in entries.row(i) {
                let bad = |what: &str| Error::InvalidInput(format!("row {i}: {what}"));
                let key = KeyRef::parse(e.key).ok_or_else(|| bad("malformed entry key"))?;
                if key.row != entries.row_key(i).unwrap_or_default() {
                    return Err(bad("entries of one row name different rows"));
                }
                if key.has_ttl != e.ttl_ms.is_some() {
                    return Err(bad("entry key's TTL flag disagrees with its TTL"));
                }
                check.family(key.family)?;
                check.cell(i, key.qualifier, e.value.len(), e.ttl_ms)?;
            }
        }
        Ok(())
    }

    fn submit_entries(
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

    /// Reads work on a closed region too (it holds its last state): a reader
    /// that started before a split or an alter finishes on the old region.
    fn scanner(&self, scan: &Scan, get: Option<&Get>) -> Result<RowScanner> {
        let (start, stop) = scan.bounds()?;
        let state = self.state.read().clone();
        let read_point = self.mvcc.read_point();
        let mut sources = Vec::new();
        sources.push(Source::Mem(MemCursor::new(
            state.active.clone(),
            read_point,
        )));
        for m in &state.flushing {
            sources.push(Source::Mem(MemCursor::new(m.clone(), read_point)));
        }
        for (family, files) in &state.files {
            if !scan.columns.wants_family(family) {
                continue;
            }
            let projection = scan.columns.projection_for(family).map(Arc::new);
            for reader in files.iter().rev() {
                if !reader.overlaps_rows(start.as_deref(), stop.as_deref()) {
                    continue;
                }
                // Nothing in a file entirely older than the range can change
                // the answer: its puts are out of range and older than any
                // in range, and its markers only mask older puts.
                if reader.meta().max_ts < scan.time_range.min {
                    self.stats
                        .files_skipped_by_time
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                // A file entirely newer than the range is still read: its
                // versions count against VERSIONS before the range applies.
                if get.is_none() && !reader.may_contain_rows(start.as_deref(), stop.as_deref()) {
                    self.stats
                        .files_skipped_by_bloom
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if let Some(get) = get
                    && !bloom_may_match(reader, get, family)
                {
                    self.stats
                        .files_skipped_by_bloom
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                sources.push(Source::File(reader.iter_projected(projection.clone())));
            }
        }
        RowScanner::new(
            Merge::new(sources),
            self.families.clone(),
            self.clock.now_ms(),
            scan,
        )
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

fn bloom_may_match(reader: &SstReader, get: &Get, family: &[u8]) -> bool {
    let qualifiers: Vec<&[u8]> = get
        .columns
        .columns
        .iter()
        .filter(|(f, _)| f == family)
        .map(|(_, q)| q.as_slice())
        .collect();
    let whole_family = get.columns.is_all() || get.columns.families.iter().any(|f| f == family);
    if whole_family || qualifiers.is_empty() {
        return reader.may_contain_row(&get.row);
    }
    // Family delete markers live at the empty qualifier: probe it too.
    qualifiers
        .iter()
        .chain(std::iter::once(&&b""[..]))
        .any(|q| reader.may_contain_column(&get.row, q))
}
