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
//!
//! # Files
//!
//! This file opens, recovers, splits and closes regions. The state every
//! part shares is in `inner.rs`, the write path in `write.rs`, settings in
//! `options.rs`; `flush.rs`, `compaction/` and `read/` work on the state;
//! `maintenance.rs` runs flushes and compactions for many regions through
//! the `maintenance::Maintained` trait this file implements.

pub mod compaction;
pub mod file_cache;
pub mod flush;
pub mod inner;
pub mod maintenance;
pub mod manifest;
pub mod memstore;
pub mod options;
pub mod read;
pub mod remote;
pub mod shared_files;
pub mod sst;
pub mod tail;
pub mod wal;
mod write;

pub use inner::{FlushTrouble, RegionStats};
pub use options::RegionOptions;
pub use write::PendingWrite;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::cell::{self, EntryBatch, Row, RowMutation};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::region::read::{Get, RowScanner, Scan, ScanPage};
use crate::schema::{Durability, FamilyDescriptor};
use inner::{Inner, State, Work, family_dir, note_position};
use maintenance::Maintained;
use manifest::Manifest;
use memstore::{MemStore, Mvcc};
use shared_files::SharedFiles;
use sst::SstReader;
use sst::cache::BlockCache;
use wal::Wal;
use wal::record::{Edits, SourcePosition, SourceShard};

/// A region's MemStore edits in a row range and the store files it reads,
/// from one snapshot (see [`Region::tail`]).
#[derive(Debug)]
pub struct RegionTail {
    /// The owner's epoch (cluster mode).
    pub epoch: u64,
    pub files: BTreeMap<Vec<u8>, Vec<u64>>,
    pub rows: cell::EntryBatch,
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
    shared: Option<Arc<SharedFiles>>,
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
        let manifest = Manifest::load(dir.as_ref())?.unwrap_or(Manifest {
            next_file_id: 1,
            ..Default::default()
        });
        RecoveringRegion::with_manifest(dir, descriptor, options, cache, manifest)
    }

    /// Opens a region whose files and manifest live on the object store,
    /// as the owner of its source shard (`shared`): stamps the manifest
    /// with the owner's epoch, downloads the files the local cache (`dir`)
    /// lacks, and starts with empty MemStores: the source topic replays
    /// what the files do not hold, from the manifest's positions.
    pub fn adopt(
        dir: impl AsRef<Path>,
        descriptor: RegionDescriptor,
        options: RegionOptions,
        cache: Arc<BlockCache>,
        shared: Arc<SharedFiles>,
    ) -> Result<RecoveringRegion> {
        let mut manifest = shared.adopt()?.unwrap_or_default();
        // This owner's files get ids of its own epoch.
        manifest.next_file_id = manifest
            .next_file_id
            .max(shared_files::first_file_id(shared.epoch()));
        let mut downloaded = 0;
        for family in &descriptor.families {
            let fdir = family_dir(dir.as_ref(), &family.name);
            for id in manifest.families.get(&family.name).into_iter().flatten() {
                downloaded += usize::from(shared.fetch(
                    &family.name,
                    *id,
                    &fdir.join(sst::file_name(*id)),
                )?);
            }
        }
        if downloaded > 0 {
            tracing::info!(
                region = descriptor.id,
                downloaded,
                "downloaded the region's store files from the object store"
            );
        }
        let mut region =
            RecoveringRegion::with_manifest(dir, descriptor, options, cache, manifest)?;
        region.shared = Some(shared);
        Ok(region)
    }

    /// Opens the store files `manifest` names in `dir` and removes the
    /// files it does not name.
    fn with_manifest(
        dir: impl AsRef<Path>,
        descriptor: RegionDescriptor,
        options: RegionOptions,
        cache: Arc<BlockCache>,
        mut manifest: Manifest,
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
        crate::fsutil::create_dir_all(&dir)
            .map_err(|e| Error::io(&dir, "create region directory", e))?;
        let mut files = BTreeMap::new();
        for family in &descriptor.families {
            let fdir = family_dir(&dir, &family.name);
            crate::fsutil::create_dir_all(&fdir)
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
            shared: None,
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
        if edits.rows.is_empty() && edits.first_seq > flushed {
            // A position-only record's sequence id is not given out again.
            self.last_seq = self.last_seq.max(edits.first_seq);
        }
        for (i, row) in edits.rows.into_iter().enumerate() {
            let seq = edits.first_seq + i as u64;
            if seq <= flushed {
                continue;
            }
            self.last_seq = self.last_seq.max(seq);
            if let Some(first) = row.first() {
                // The record's entries all name this row (decode_edits checks).
                let key = cell::row_of(&first.key).to_vec();
                self.active.insert_row(
                    &key,
                    seq,
                    row.iter().map(|e| cell::EntryRef {
                        row: &key,
                        after_row: e.key.get(2 + key.len()..).unwrap_or_default(),
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
            shared,
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
            manifest_change: Mutex::new(()),
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
            compaction_requested: AtomicBool::new(false),
            periodic_major_retry_ms: AtomicU64::new(0),
            flush_forced: AtomicBool::new(false),
            positions: Mutex::new(positions),
            shared,
        });
        let mut workers = Vec::new();
        if let Some(m) = &maintenance {
            m.register(&(inner.clone() as Arc<dyn Maintained>));
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
        let mut scanner = self.inner.scanner(&get.to_scan(), Some(get))?;
        scanner.next_row()
    }

    /// Opens a streaming scanner on a consistent snapshot.
    pub fn scanner(&self, scan: &Scan) -> Result<RowScanner> {
        self.inner.scanner(scan, None)
    }

    /// The rows of a scan that names single columns, each given to `sink`
    /// with its values by their column's index in `scan.columns.columns`,
    /// until it answers false (then false): a reader that folds points
    /// takes them this way, without rows of cells.
    pub fn scan_columns(
        &self,
        scan: &Scan,
        read: read::columns::ColumnRead,
        sink: &mut dyn crate::region::read::columns::ColumnSink,
    ) -> Result<bool> {
        self.inner.scan_columns(scan, read, sink)
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

    /// What a node reading this region from elsewhere needs besides the
    /// object store (cluster mode): the store files this region reads now
    /// (ids per family: all published) and every edit of its MemStores in
    /// rows `[start, stop)` (delete markers too, newest first among equal
    /// keys), taken from one snapshot, so the two together are exactly
    /// what a read here would merge.
    pub fn tail(&self, start: Option<&[u8]>, stop: Option<&[u8]>) -> Result<RegionTail> {
        let state = self.inner.state.read().clone();
        let read_point = self.inner.mvcc.read_point();
        let files = state
            .files
            .iter()
            .map(|(f, readers)| (f.clone(), readers.iter().map(|r| r.file_id()).collect()))
            .collect();
        let mut sources = vec![read::merge::Source::Mem(memstore::cursor::MemCursor::new(
            state.active.clone(),
            read_point,
        ))];
        for m in &state.flushing {
            sources.push(read::merge::Source::Mem(memstore::cursor::MemCursor::new(
                m.clone(),
                read_point,
            )));
        }
        let mut merge = read::merge::Merge::new(sources);
        merge.seek(&cell::first_key_of_row(start.unwrap_or_default()))?;
        let mut rows = cell::EntryBatch::new();
        let mut row: Vec<u8> = Vec::new();
        let mut last: Vec<u8> = Vec::new();
        while merge.valid() {
            let key = merge.key();
            if stop.is_some_and(|s| cell::row_of(key) >= s) {
                break;
            }
            // Equal keys: the first (newest edit) wins, as a flush keeps.
            if !last.is_empty() && cell::compare_keys(&last, key) == std::cmp::Ordering::Equal {
                merge.advance()?;
                continue;
            }
            let k = cell::KeyRef::parse(key)
                .ok_or_else(|| Error::InvalidInput("malformed key in MemStore".into()))?;
            if k.row != row.as_slice() {
                if !row.is_empty() {
                    rows.end_row();
                }
                row = k.row.to_vec();
            }
            rows.push(
                k.row,
                k.family,
                k.qualifier,
                k.timestamp,
                k.kind,
                merge.ttl_ms(),
                merge.value(),
            );
            last.clear();
            last.extend_from_slice(key);
            merge.advance()?;
        }
        if !row.is_empty() {
            rows.end_row();
        }
        Ok(RegionTail {
            epoch: self.inner.shared.as_ref().map_or(0, |s| s.epoch()),
            files,
            rows,
        })
    }

    /// The region's way to the object store, when its files live there.
    pub fn shared_files(&self) -> Option<&Arc<SharedFiles>> {
        self.inner.shared.as_ref()
    }

    /// The manifest as last written (published, for a region on the object
    /// store).
    pub fn manifest(&self) -> Manifest {
        self.inner.manifest.lock().clone()
    }

    /// The live store files: (path, file id, bytes).
    pub fn store_files(&self) -> Vec<(PathBuf, u64, u64)> {
        self.inner
            .state
            .read()
            .files
            .values()
            .flatten()
            .map(|r| (r.path().to_path_buf(), r.file_id(), r.size()))
            .collect()
    }

    /// Paths of the live store files.
    pub fn file_paths(&self) -> Vec<PathBuf> {
        self.store_files()
            .into_iter()
            .map(|(path, _, _)| path)
            .collect()
    }

    /// The time range (oldest, newest cell timestamp in ms) of each live
    /// store file of `family`, oldest file first.
    pub fn file_time_ranges(&self, family: &[u8]) -> Vec<(u64, u64)> {
        self.inner
            .state
            .read()
            .files
            .get(family)
            .into_iter()
            .flatten()
            .map(|r| (r.meta().min_ts, r.meta().max_ts))
            .collect()
    }

    /// Asks for a flush in the background whatever the MemStore's size (the
    /// store does when all MemStores together pass its memory limit).
    pub fn request_flush(&self) {
        // MemStores a failed flush left are flushed again too.
        {
            let s = self.inner.state.read();
            if s.active.is_empty() && s.flushing.is_empty() {
                return;
            }
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

    /// [`Self::memstore_bytes`] as (what a flush asked for now would
    /// write, what a flush under way is writing). A failed flush leaves
    /// its MemStores waiting, and the next flush writes them first: while
    /// flushes fail, they count as the first.
    pub fn memstore_split(&self) -> (usize, usize) {
        let failing = self.inner.flush_trouble.lock().is_some();
        let s = self.inner.state.read();
        let flushing: usize = s.flushing.iter().map(|m| m.bytes()).sum();
        if failing {
            (s.active.bytes() + flushing, 0)
        } else {
            (s.active.bytes(), flushing)
        }
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

    /// The newest cell version (ms) the region holds, in its MemStores or
    /// store files; 0 when it holds none.
    pub fn newest_cell_ms(&self) -> u64 {
        self.cell_time_range().map_or(0, |(_, newest)| newest)
    }

    /// The oldest and newest cell versions (ms) the region holds, in its
    /// MemStores or store files; `None` when it holds none. Bounds only: a
    /// cell past its TTL or under a delete marker still counts until
    /// compacted.
    pub fn cell_time_range(&self) -> Option<(u64, u64)> {
        let st = self.inner.state.read();
        let memstores = std::iter::once(&st.active)
            .chain(st.flushing.iter())
            .filter(|m| m.cells() > 0)
            .map(|m| m.time_range());
        let files = st
            .files
            .values()
            .flatten()
            .filter(|r| r.meta().entries > 0)
            .map(|r| (r.meta().min_ts, r.meta().max_ts));
        memstores
            .chain(files)
            .reduce(|(lo, hi), (min, max)| (lo.min(min), hi.max(max)))
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
        // A region on the object store does not split: its daughters would
        // need a catalog all nodes share (docs/cluster.md).
        if self.has_foreign_rows() || self.inner.shared.is_some() {
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
        crate::fsutil::create_dir_all(dir)
            .map_err(|e| Error::io(dir, "create region directory", e))?;
        for (family, ids) in &manifest.families {
            let from = family_dir(&self.inner.dir, family);
            let to = family_dir(dir, family);
            crate::fsutil::create_dir_all(&to)
                .map_err(|e| Error::io(&to, "create family directory", e))?;
            for id in ids {
                let target = to.join(sst::file_name(*id));
                match crate::fsutil::hard_link(&from.join(sst::file_name(*id)), &target) {
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
            crate::fsutil::remove_file(&entry.path())
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

impl Maintained for Inner {
    fn is_closed(&self) -> bool {
        Inner::is_closed(self)
    }

    fn flush_due(&self) -> bool {
        Inner::flush_due(self)
    }

    fn clear_flush_request(&self) {
        Inner::clear_flush_request(self)
    }

    fn mark_compaction_requested(&self) -> bool {
        self.compaction_requested.swap(true, Ordering::SeqCst)
    }

    fn clear_compaction_request(&self) {
        self.compaction_requested.store(false, Ordering::SeqCst);
    }

    fn flush_now(&self) -> Result<()> {
        let outcome = flush::flush(self);
        self.note_flush(&outcome);
        outcome
    }

    fn compact_minor(&self) -> Result<()> {
        compaction::compact(self, false)
    }
}
