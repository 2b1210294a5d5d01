//! The store: every table's regions, spread over writer shards.
//!
//! ```text
//! write(table, rows) ─ route each row to its region ─▶ bounded queue of the
//!   region's shard ─▶ shard thread: Region::submit (MemStore + its WAL)
//!   ─▶ the shard's WAL groups the commits of all its regions ─▶ ack
//! ```
//!
//! Each of N shards (default: one per core) owns the regions whose id
//! modulo N is its number, one WAL, and one thread fed by a bounded channel,
//! so a slow disk fills the queues and slows the producers instead of
//! growing memory. Reads go straight to the regions.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};
use parking_lot::{Mutex, RwLock};

use crate::catalog::{Catalog, CreateTable, TableDescriptor, TableName};
use crate::cell::{EntryBatch, Row, RowMutation};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::region::maintenance::Maintenance;
use crate::region::read::{Get, Scan, ScanPage};
use crate::region::sst::cache::BlockCache;
use crate::region::wal::record::{SourcePosition, SourceShard};
use crate::region::wal::{Wal, WalOptions};
use crate::region::{PendingWrite, RecoveringRegion, Region, RegionDescriptor, RegionOptions};
use crate::schema::{Durability, FamilySpec};
use crate::table::{RegionHandle, RoutedRows, Table, TableScanner, region_index};

/// Store settings.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Writer shards (default: one per core).
    pub shards: usize,
    /// Batches queued per shard before producers wait (default 64).
    pub queue_depth: usize,
    pub wal: WalOptions,
    pub region: RegionOptions,
    pub block_cache_bytes: usize,
    /// Flush threads shared by all regions (default 2).
    pub flush_threads: usize,
    /// Compaction threads shared by all regions (default 1).
    pub compaction_threads: usize,
    /// Regions whose store files pass this many bytes split (default 10 GiB).
    pub max_region_size: u64,
    /// All MemStores together: above this the largest flush and writers
    /// wait (default 1 GiB).
    pub global_memstore_bytes: usize,
}

/// A write handed to the shards by [`Store::submit_encoded`], not yet known
/// to be durable; [`Store::wait`] finishes it.
pub struct PendingBatch {
    name: TableName,
    origin: Option<SourcePosition>,
    /// The layout the rows were routed by.
    table: Arc<Table>,
    replies: Vec<Receiver<Submitted>>,
    /// Rows refused by closed regions are routed again until then.
    deadline: std::time::Instant,
}

struct WriteJob {
    region: Arc<Region>,
    rows: Rows,
    durability: crate::schema::Durability,
    origin: Option<SourcePosition>,
    reply: Sender<Submitted>,
}

/// What a shard did with a write job.
enum Submitted {
    Pending(PendingWrite),
    /// The region was closed (split, altered, or shutting down): nothing of
    /// the batch was logged or applied, and here are its rows back.
    Refused(Rows),
    Failed(Error),
}

/// The rows of a write: as a caller built them, or already encoded as
/// entries by the ingest path.
enum Rows {
    Mutations(Vec<RowMutation>),
    Entries(EntryBatch),
}

impl Rows {
    /// The rows grouped by the region of `table` they belong to.
    fn by_region(self, table: &Table) -> Vec<(usize, Rows)> {
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

    fn is_empty(&self) -> bool {
        match self {
            Rows::Mutations(rows) => rows.is_empty(),
            Rows::Entries(batch) => batch.is_empty(),
        }
    }
}

/// Rows written per salt bucket (`halite_bucket_rows_written_total`): the
/// hot-spotting that salting exists to prevent, made visible. The bucket
/// is the row key's first `width` bytes. Tables of more than 4096 buckets
/// are not counted (the label would be too many series).
fn count_bucket_rows(table: &Table, rows: &Rows) {
    let Some(salt) = &table.desc.key.salt else {
        return;
    };
    if salt.buckets > 4096 {
        return;
    }
    let mut counts = vec![0u64; salt.buckets as usize];
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
    let name = table.desc.name.to_string();
    for (bucket, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
        metrics::counter!(
            "halite_bucket_rows_written_total",
            "table" => name.clone(),
            "bucket" => bucket.to_string()
        )
        .increment(*n);
    }
}

/// How long a write waits for a split or alter to open the new regions.
const LAYOUT_CHANGE_WAIT: Duration = Duration::from_secs(30);

struct Shard {
    wal: Arc<Wal>,
    tx: Option<Sender<WriteJob>>,
    thread: Option<JoinHandle<()>>,
}

/// All tables of one server.
pub struct Store {
    dir: PathBuf,
    options: StoreOptions,
    catalog: Catalog,
    shards: Vec<Shard>,
    tables: RwLock<HashMap<TableName, Arc<Table>>>,
    cache: Arc<BlockCache>,
    clock: Arc<dyn Clock>,
    /// Serialises table creation and removal with opening their regions.
    ddl: Mutex<()>,
    maintenance: Arc<Maintenance>,
    /// Set by `close`: a closed region then means shutdown, not a split.
    closing: AtomicBool,
    memory_waits: std::sync::atomic::AtomicU64,
}

fn region_dir(dir: &Path, id: u64) -> PathBuf {
    dir.join("regions").join(format!("{id:010}"))
}

impl Store {
    /// Opens the catalog, the shard WALs and every region (replaying what
    /// was not flushed), and removes the leftovers of dropped tables.
    pub fn open(
        dir: impl AsRef<Path>,
        options: StoreOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        let maintenance = Maintenance::new(options.flush_threads, options.compaction_threads)
            .map_err(|e| Error::io(&dir, "spawn flush and compaction threads", e))?;
        let catalog = Catalog::open(dir.join("catalog"))?;
        let cache = BlockCache::new(options.block_cache_bytes);
        let mut shards = Vec::with_capacity(options.shards.max(1));
        for i in 0..options.shards.max(1) {
            let wal = Arc::new(Wal::open(
                dir.join("wal").join(format!("shard-{i}")),
                options.wal.clone(),
            )?);
            let (tx, rx) = bounded(options.queue_depth.max(1));
            let thread = std::thread::Builder::new()
                .name(format!("halite-shard-{i}"))
                .spawn(move || shard_loop(rx))
                .map_err(|e| Error::io(&dir, "spawn shard thread", e))?;
            shards.push(Shard {
                wal,
                tx: Some(tx),
                thread: Some(thread),
            });
        }
        let store = Store {
            dir,
            options,
            catalog,
            shards,
            tables: RwLock::new(HashMap::new()),
            cache,
            clock,
            ddl: Mutex::new(()),
            maintenance,
            closing: AtomicBool::new(false),
            memory_waits: std::sync::atomic::AtomicU64::new(0),
        };
        // A split that did not reach its commit point is undone: the parent
        // is still in the catalog, and the daughters' directories are
        // leftovers, removed below.
        for intent in store.catalog.pending_splits() {
            store.catalog.abandon_split(&intent)?;
        }
        let descs = store.catalog.tables(None);
        let mut recovering = HashMap::new();
        for desc in &descs {
            let families: Vec<_> = desc.families.iter().map(FamilySpec::descriptor).collect();
            for info in &desc.regions {
                recovering.insert(info.id, store.load_region(info, &families)?);
            }
        }
        store.replay_wals(&mut recovering)?;
        for desc in descs {
            let mut regions = Vec::with_capacity(desc.regions.len());
            for info in &desc.regions {
                let region = recovering
                    .remove(&info.id)
                    .expect("every region of the catalog was loaded above");
                regions.push(RegionHandle::Local(Arc::new(region.open(
                    store.shard_of(info.id).wal.clone(),
                    store.clock.clone(),
                    Some(store.maintenance.clone()),
                )?)));
            }
            store
                .tables
                .write()
                .insert(desc.name.clone(), Arc::new(Table { desc, regions }));
        }
        store.remove_leftovers()?;
        Ok(store)
    }

    /// Replays each shard's WAL once, into all of its regions; the shards
    /// in parallel, as they were written.
    fn replay_wals(&self, recovering: &mut HashMap<u64, RecoveringRegion>) -> Result<()> {
        let now = self.clock.now_ms();
        let shard_count = self.shards.len() as u64;
        let mut per_shard: Vec<HashMap<u64, RecoveringRegion>> =
            (0..self.shards.len()).map(|_| HashMap::new()).collect();
        for (id, region) in recovering.drain() {
            per_shard[(id % shard_count) as usize].insert(id, region);
        }
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let handles: Vec<_> = per_shard
                .iter_mut()
                .zip(&self.shards)
                .filter(|(regions, _)| !regions.is_empty())
                .map(|(regions, shard)| {
                    scope.spawn(move || -> Result<()> {
                        let after: HashMap<u64, u64> = regions
                            .values()
                            .map(|r| (r.id(), r.flushed_seq()))
                            .collect();
                        let started = std::time::Instant::now();
                        let (mut records, mut rows) = (0u64, 0u64);
                        shard.wal.replay_regions(&after, |edits| {
                            if let Some(region) = regions.get_mut(&edits.region_id) {
                                records += 1;
                                rows += edits.rows.len() as u64;
                                region.replay(edits, now);
                            }
                        })?;
                        if records > 0 {
                            tracing::info!(
                                wal = %shard.wal.dir().display(),
                                regions = after.len(),
                                records,
                                rows,
                                seconds = started.elapsed().as_secs_f64(),
                                "replayed unflushed edits from the WAL"
                            );
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a WAL replay thread panicked"))
                .collect()
        });
        for regions in per_shard {
            recovering.extend(regions);
        }
        results.into_iter().collect()
    }

    fn load_region(
        &self,
        info: &crate::catalog::RegionInfo,
        families: &[crate::schema::FamilyDescriptor],
    ) -> Result<RecoveringRegion> {
        RecoveringRegion::load(
            region_dir(&self.dir, info.id),
            RegionDescriptor {
                id: info.id,
                families: families.to_vec(),
                start: info.start.clone(),
                end: info.end.clone(),
            },
            self.options.region.clone(),
            self.cache.clone(),
        )
    }

    fn shard_of(&self, region_id: u64) -> &Shard {
        &self.shards[(region_id % self.shards.len() as u64) as usize]
    }

    fn open_table(&self, desc: TableDescriptor) -> Result<Table> {
        let families: Vec<_> = desc.families.iter().map(FamilySpec::descriptor).collect();
        let mut regions = Vec::with_capacity(desc.regions.len());
        for info in &desc.regions {
            regions.push(RegionHandle::Local(Arc::new(
                self.open_region(info, &families)?,
            )));
        }
        Ok(Table { desc, regions })
    }

    fn open_region(
        &self,
        info: &crate::catalog::RegionInfo,
        families: &[crate::schema::FamilyDescriptor],
    ) -> Result<Region> {
        let wal = self.shard_of(info.id).wal.clone();
        let mut region = self.load_region(info, families)?;
        region.replay_wal(&wal, self.clock.now_ms())?;
        region.open(wal, self.clock.clone(), Some(self.maintenance.clone()))
    }

    /// Region directories and WAL edits of regions the catalog no longer
    /// names (a drop that a crash interrupted).
    fn remove_leftovers(&self) -> Result<()> {
        let live = self.catalog.region_ids();
        let regions = self.dir.join("regions");
        if let Ok(entries) = std::fs::read_dir(&regions) {
            for e in entries.flatten() {
                let id = e.file_name().to_string_lossy().parse::<u64>().ok();
                if id.is_some_and(|id| !live.contains(&id)) {
                    std::fs::remove_dir_all(e.path())
                        .map_err(|err| Error::io(e.path(), "remove dropped region", err))?;
                }
            }
        }
        for s in &self.shards {
            s.wal.forget_regions_except(&live);
        }
        Ok(())
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub fn table(&self, name: &TableName) -> Result<Arc<Table>> {
        self.tables
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no such table. table=`{name}`")))
    }

    pub fn create_table(&self, req: &CreateTable) -> Result<TableDescriptor> {
        let _ddl = self.ddl.lock();
        // The regions' directories (with empty manifests) are made and
        // synced before the catalog names them, as a split's daughters
        // are: a crash in between leaves directories no catalog names
        // (removed at start), never a region without its directory.
        let desc = self
            .catalog
            .create_table_with(req, self.clock.now_ms(), |desc| {
                let mut parent = None;
                for r in &desc.regions {
                    let dir = region_dir(&self.dir, r.id);
                    std::fs::create_dir_all(&dir)
                        .map_err(|e| Error::io(&dir, "create region directory", e))?;
                    crate::region::manifest::Manifest {
                        next_file_id: 1,
                        ..Default::default()
                    }
                    .store(&dir)?;
                    parent = dir.parent().map(Path::to_path_buf);
                }
                if let Some(parent) = parent {
                    crate::fsutil::fsync_dir(&parent)
                        .map_err(|e| Error::io(&parent, "sync regions directory", e))?;
                }
                Ok(())
            })?;
        let table = self.open_table(desc.clone())?;
        self.tables
            .write()
            .insert(desc.name.clone(), Arc::new(table));
        Ok(desc)
    }

    /// Changes family attributes or adds families. The regions are closed
    /// (flushed) and reopened with the new attributes: new store files use
    /// them, and the next major compaction rewrites the old files. Writes
    /// during the switch fail with a retryable error.
    pub fn alter_families(
        &self,
        name: &TableName,
        families: &[FamilySpec],
    ) -> Result<TableDescriptor> {
        self.alter(name, families, None)
    }

    /// Changes family attributes, adds families and, when given, the
    /// table's durability; the regions reopen with the new descriptor
    /// (writes in flight are routed again, as after a split).
    pub fn alter(
        &self,
        name: &TableName,
        families: &[FamilySpec],
        durability: Option<Durability>,
    ) -> Result<TableDescriptor> {
        let _ddl = self.ddl.lock();
        let old = self.table(name)?;
        let desc = self.catalog.alter(name, families, durability)?;
        for r in old.regions() {
            r.local().close()?;
        }
        let table = self.open_table(desc.clone())?;
        self.tables
            .write()
            .insert(desc.name.clone(), Arc::new(table));
        Ok(desc)
    }

    /// Drops a table: out of the catalog first (so a crash cannot bring it
    /// back), then its regions' files.
    pub fn drop_table(&self, name: &TableName) -> Result<()> {
        let _ddl = self.ddl.lock();
        let table = self.table(name)?;
        self.catalog.drop_table(name)?;
        self.tables.write().remove(name);
        for r in table.regions() {
            // Already gone from the catalog: nothing to flush.
            r.local().close_without_flush();
            self.shard_of(r.id()).wal.mark_flushed(r.id(), u64::MAX);
            let d = region_dir(&self.dir, r.id());
            std::fs::remove_dir_all(&d).map_err(|e| Error::io(&d, "remove dropped region", e))?;
        }
        Ok(())
    }

    /// Writes rows (each with a full row key) with the table's durability;
    /// returns when they are acknowledged. Rows are routed to their regions
    /// through the shard queues. Rows that meet a region closed by a split
    /// (or an alter) are routed again once the new regions are open: a
    /// closed region refuses a batch before any of it is logged or applied.
    pub fn write(
        &self,
        name: &TableName,
        rows: Vec<RowMutation>,
        origin: Option<SourcePosition>,
    ) -> Result<()> {
        self.write_rows(name, Rows::Mutations(rows), origin)
    }

    /// Writes rows already encoded as entries (see
    /// [`crate::ingest::PointEncoder`]) like [`Store::write`]; the regions
    /// check the entries against their families and limits.
    pub fn write_entries(
        &self,
        name: &TableName,
        batch: EntryBatch,
        origin: Option<SourcePosition>,
    ) -> Result<()> {
        self.write_rows(name, Rows::Entries(batch), origin)
    }

    fn write_rows(
        &self,
        name: &TableName,
        rows: Rows,
        origin: Option<SourcePosition>,
    ) -> Result<()> {
        let pending = self.submit_rows(name, rows, origin)?;
        self.wait(pending)
    }

    /// Writes rows a [`crate::ingest::PointEncoder`] encoded and split by
    /// region; acknowledged as the table's durability says.
    pub fn write_encoded(
        &self,
        name: &TableName,
        rows: RoutedRows,
        origin: Option<SourcePosition>,
    ) -> Result<()> {
        let pending = self.submit_encoded(name, rows, origin)?;
        self.wait(pending)
    }

    /// Hands encoded rows to the writer shards and returns without waiting
    /// for them to be durable: [`Store::wait`] does, so a caller can encode
    /// its next batch while this one is logged (the Kafka writers do).
    /// Writes submitted one after the other are logged in that order per
    /// region. When the table's regions are still the ones the rows were
    /// split by, each batch goes to its region as it is.
    pub fn submit_encoded(
        &self,
        name: &TableName,
        rows: RoutedRows,
        origin: Option<SourcePosition>,
    ) -> Result<PendingBatch> {
        self.wait_for_memory()?;
        let table = self.table(name)?;
        let same_layout = rows.region_ids.len() == table.desc.regions.len()
            && rows
                .region_ids
                .iter()
                .zip(&table.desc.regions)
                .all(|(id, r)| *id == r.id);
        let per_region: Vec<(usize, Rows)> = rows
            .batches
            .into_iter()
            .enumerate()
            .filter(|(_, b)| !b.is_empty())
            .flat_map(|(i, b)| {
                if same_layout {
                    vec![(i, Rows::Entries(b))]
                } else {
                    Rows::Entries(b).by_region(&table)
                }
            })
            .collect();
        for (_, r) in &per_region {
            count_bucket_rows(&table, r);
        }
        let replies = self.send_routed(&table, per_region, origin.as_ref())?;
        Ok(PendingBatch {
            name: name.clone(),
            origin,
            table,
            replies,
            deadline: std::time::Instant::now() + LAYOUT_CHANGE_WAIT,
        })
    }

    fn submit_rows(
        &self,
        name: &TableName,
        rows: Rows,
        origin: Option<SourcePosition>,
    ) -> Result<PendingBatch> {
        self.wait_for_memory()?;
        let table = self.table(name)?;
        count_bucket_rows(&table, &rows);
        let replies = self.send_once(&table, vec![rows], origin.as_ref())?;
        Ok(PendingBatch {
            name: name.clone(),
            origin,
            table,
            replies,
            deadline: std::time::Instant::now() + LAYOUT_CHANGE_WAIT,
        })
    }

    /// Records a Kafka position in the store without data: an edits record
    /// with no rows, logged in the table's first region. Ingestion writes
    /// one when a partition's pipeline drains, so the store's resume
    /// position catches up with the last batches' own durability (each
    /// batch's records only know what was durable before it).
    pub fn submit_position(
        &self,
        name: &TableName,
        origin: SourcePosition,
    ) -> Result<PendingBatch> {
        let table = self.table(name)?;
        let region = table.regions.first().ok_or(Error::Closed)?.local().clone();
        let (reply, rx) = bounded(1);
        self.shard_of(region.id())
            .tx
            .as_ref()
            .ok_or(Error::Closed)?
            .send(WriteJob {
                region,
                rows: Rows::Entries(EntryBatch::new()),
                durability: table.desc.durability,
                origin: Some(origin.clone()),
                reply,
            })
            .map_err(|_| Error::Closed)?;
        Ok(PendingBatch {
            name: name.clone(),
            origin: Some(origin),
            table,
            replies: vec![rx],
            deadline: std::time::Instant::now() + LAYOUT_CHANGE_WAIT,
        })
    }

    /// Waits until a submitted write is acknowledged as its table's
    /// durability says; rows that met a region closed by a split are
    /// routed again to its daughters.
    pub fn wait(&self, pending: PendingBatch) -> Result<()> {
        let PendingBatch {
            name,
            origin,
            mut table,
            mut replies,
            deadline,
        } = pending;
        loop {
            let refused = Store::collect_replies(replies)?;
            if refused.is_empty() {
                return Ok(());
            }
            if self.closing.load(Ordering::SeqCst) || std::time::Instant::now() > deadline {
                return Err(Error::Closed);
            }
            // The split publishes its daughters within milliseconds.
            if Arc::ptr_eq(&table, &self.table(&name)?) {
                std::thread::sleep(Duration::from_millis(2));
            }
            table = self.table(&name)?;
            replies = self.send_once(&table, refused, origin.as_ref())?;
        }
    }

    /// Per source shard (a Kafka topic and partition), the position below
    /// which every message written into `name` is durable, from the
    /// positions its regions' writes carried (recovered from WAL records and
    /// manifests at open).
    pub fn source_positions(&self, name: &TableName) -> Result<BTreeMap<SourceShard, u64>> {
        let mut all = BTreeMap::new();
        for region in self.table(name)?.regions() {
            for (p, offset) in region.local().source_positions() {
                let at = all.entry(p).or_insert(offset);
                *at = (*at).max(offset);
            }
        }
        Ok(all)
    }

    /// Makes every write acknowledged so far durable, ASYNC_WAL ones
    /// included: one sync barrier per shard WAL.
    pub fn sync_wals(&self) -> Result<()> {
        let tickets = self
            .shards
            .iter()
            .map(|s| s.wal.sync())
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for t in tickets {
            t.wait()?;
        }
        Ok(())
    }

    /// Per region of `name`: the highest sequence id written so far, or
    /// (with `flushed`) the highest in store files. SKIP_WAL writes are
    /// durable once the flushed one passes what the written one was.
    pub fn region_seqs(&self, name: &TableName, flushed: bool) -> Result<HashMap<u64, u64>> {
        Ok(self
            .table(name)?
            .regions()
            .iter()
            .map(|r| {
                let seq = if flushed {
                    r.local().flushed_seq()
                } else {
                    r.local().last_seq()
                };
                (r.id(), seq)
            })
            .collect())
    }

    /// Flushes every region of `name` that holds unflushed writes.
    pub fn flush_table(&self, name: &TableName) -> Result<()> {
        for r in self.table(name)?.regions() {
            r.flush()?;
        }
        Ok(())
    }

    /// Whether closing flushes the MemStores (`region.flush_on_close`).
    pub fn flushes_on_close(&self) -> bool {
        self.options.region.flush_on_close
    }

    /// Every open table.
    pub fn open_tables(&self) -> Vec<Arc<Table>> {
        self.tables.read().values().cloned().collect()
    }

    /// What keeps writes from going on, if anything: a WAL stopped by an
    /// I/O error (until a restart), a full disk (until it has room), or
    /// flushes failing (their data stays in the WAL; writes wait once
    /// MemStores fill). `None` when all is well.
    pub fn trouble(&self) -> Option<String> {
        for (shard, s) in self.shards.iter().enumerate() {
            if let Some(cause) = s.wal.failure() {
                return Some(format!(
                    "the WAL of shard {shard} stopped after an I/O error ({cause}); restart to recover"
                ));
            }
            if s.wal.stats().disk_full.load(Ordering::Relaxed) {
                return Some(format!(
                    "the disk is full: the WAL of shard {shard} cannot prepare its next segment; \
                     writes wait until there is room"
                ));
            }
        }
        let tables = self.tables.read();
        for t in tables.values() {
            for r in t.regions() {
                if let Some(f) = r.local().flush_trouble() {
                    return Some(format!(
                        "{}flushes of region {} of `{}` have failed for {:.0} s ({}); \
                         writes wait once MemStores fill",
                        if f.no_space { "the disk is full: " } else { "" },
                        r.id(),
                        t.desc.name,
                        f.since.elapsed().as_secs_f64(),
                        f.error
                    ));
                }
            }
        }
        None
    }

    /// Whether writes wait for disk space (a WAL segment or a flush failed
    /// with `ENOSPC`).
    pub fn disk_full(&self) -> bool {
        self.shards
            .iter()
            .any(|s| s.wal.stats().disk_full.load(Ordering::Relaxed))
            || self.tables.read().values().any(|t| {
                t.regions()
                    .iter()
                    .any(|r| r.local().flush_trouble().is_some_and(|f| f.no_space))
            })
    }

    /// The shards' WALs, in shard order.
    pub fn wals(&self) -> Vec<Arc<Wal>> {
        self.shards.iter().map(|s| s.wal.clone()).collect()
    }

    pub fn block_cache(&self) -> &Arc<BlockCache> {
        &self.cache
    }

    /// The largest value a cell may hold.
    pub fn max_value_size(&self) -> usize {
        self.options.region.max_value_size
    }

    /// Bytes in the MemStores of every region.
    pub fn memstore_bytes(&self) -> usize {
        self.tables
            .read()
            .values()
            .flat_map(|t| t.regions.iter())
            .map(|r| r.memstore_bytes())
            .sum()
    }

    /// Holds a writer while all MemStores together are over the global
    /// limit, flushing the largest ones (HBase blocks updates the same way):
    /// a slow disk then slows the producers instead of growing memory.
    fn wait_for_memory(&self) -> Result<()> {
        let mut waited: Option<Instant> = None;
        let outcome = loop {
            if !self.relieve_memory() {
                break Ok(());
            }
            if self.closing.load(Ordering::SeqCst) {
                break Err(Error::Closed);
            }
            waited.get_or_insert_with(Instant::now);
            self.memory_waits.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(5));
        };
        if let Some(since) = waited {
            metrics::histogram!("halite_memstore_blocked_seconds")
                .record(since.elapsed().as_secs_f64());
        }
        outcome
    }

    /// Whether all MemStores together are over the global limit; when they
    /// are, the largest are asked to flush (until what is left would be
    /// under 90 % of it).
    pub fn relieve_memory(&self) -> bool {
        let limit = self.options.global_memstore_bytes;
        if self.memstore_bytes() <= limit {
            return false;
        }
        let regions: Vec<(usize, Arc<Region>)> = self
            .tables
            .read()
            .values()
            .flat_map(|t| t.regions.iter())
            .map(|r| (r.memstore_bytes(), r.local().clone()))
            .collect();
        let mut total: usize = regions.iter().map(|(b, _)| b).sum();
        if total <= limit {
            return false;
        }
        let mut by_size = regions;
        by_size.sort_by_key(|r| std::cmp::Reverse(r.0));
        for (bytes, r) in &by_size {
            if total <= limit / 10 * 9 {
                break;
            }
            r.request_flush();
            total = total.saturating_sub(*bytes);
        }
        true
    }

    /// How many times writers waited for MemStores to flush under the
    /// global limit.
    pub fn memory_waits(&self) -> u64 {
        self.memory_waits.load(Ordering::Relaxed)
    }

    /// One routing pass: each region's rows go to its shard; the replies
    /// say what the shards did.
    fn send_once(
        &self,
        table: &Arc<Table>,
        rows: Vec<Rows>,
        origin: Option<&SourcePosition>,
    ) -> Result<Vec<Receiver<Submitted>>> {
        let per_region: Vec<(usize, Rows)> = rows
            .into_iter()
            .flat_map(|r| r.by_region(table))
            .filter(|(_, r)| !r.is_empty())
            .collect();
        self.send_routed(table, per_region, origin)
    }

    /// Sends each region's rows to its shard.
    fn send_routed(
        &self,
        table: &Arc<Table>,
        per_region: Vec<(usize, Rows)>,
        origin: Option<&SourcePosition>,
    ) -> Result<Vec<Receiver<Submitted>>> {
        let mut replies = Vec::with_capacity(per_region.len());
        for (i, rows) in per_region {
            let region = table.regions[i].local().clone();
            let (reply, rx) = bounded(1);
            let tx = self
                .shard_of(region.id())
                .tx
                .as_ref()
                .ok_or(Error::Closed)?;
            tx.send(WriteJob {
                region,
                rows,
                durability: table.desc.durability,
                origin: origin.cloned(),
                reply,
            })
            .map_err(|_| Error::Closed)?;
            replies.push(rx);
        }
        Ok(replies)
    }

    /// Waits for the shards' replies to one routing pass: the rows of
    /// regions that turned out closed come back; other failures are errors.
    fn collect_replies(replies: Vec<Receiver<Submitted>>) -> Result<Vec<Rows>> {
        let mut first_error = None;
        let mut refused = Vec::new();
        for rx in replies {
            let outcome = match rx.recv() {
                Ok(Submitted::Pending(p)) => p.wait(),
                Ok(Submitted::Refused(rows)) => {
                    refused.push(rows);
                    Ok(())
                }
                Ok(Submitted::Failed(e)) => Err(e),
                Err(_) => Err(Error::Closed),
            };
            if let Err(e) = outcome {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(refused), Err)
    }

    pub fn get(&self, name: &TableName, get: &Get) -> Result<Option<Row>> {
        let table = self.table(name)?;
        table.regions[region_index(&table, &get.row)].get(get)
    }

    /// A raw scan over the table's regions in order (reverse: backwards),
    /// with offset, limit and continuation spanning region boundaries.
    pub fn scan(&self, name: &TableName, scan: &Scan) -> Result<ScanPage> {
        let mut scanner = self.scanner(name, scan)?;
        let mut rows = Vec::new();
        while let Some(row) = scanner.next_row()? {
            rows.push(row);
        }
        Ok(ScanPage {
            rows,
            continuation: scanner.continuation()?,
        })
    }

    /// A raw scan's rows one at a time, for answers that stream.
    pub fn scanner(&self, name: &TableName, scan: &Scan) -> Result<TableScanner> {
        TableScanner::new(self.table(name)?, scan.clone())
    }

    /// Splits every region whose store files pass `max_region_size` (one
    /// split per region per call); returns how many split. Daughters are
    /// major-compacted right away, which drops the rows each holds of the
    /// other and lets them split again later.
    pub fn split_oversized(&self) -> Result<usize> {
        let tables: Vec<Arc<Table>> = self.tables.read().values().cloned().collect();
        let mut splits = 0;
        for t in tables {
            // Daughters of a split that a crash cut off before their
            // compaction still hold foreign rows; rewrite them first.
            for r in t.regions.iter().filter(|r| r.local().has_foreign_rows()) {
                r.compact(true)?;
            }
            let big: Vec<u64> = t
                .regions
                .iter()
                .filter(|r| r.store_bytes() > self.options.max_region_size)
                .map(|r| r.id())
                .collect();
            for id in big {
                if let Some(daughters) = self.split_region(&t.desc.name, id)? {
                    splits += 1;
                    for d in daughters {
                        d.compact(true)?;
                    }
                }
            }
        }
        Ok(splits)
    }

    /// Splits region `id` of `name` at its middle row; `None` when it has
    /// no row to split at (or is gone). Crash-safe: the catalog records the
    /// intent first, the daughters are made of hard links to the parent's
    /// flushed files and synced, and one catalog update replaces the parent
    /// by the daughters; a crash before that update leaves the parent as it
    /// was (restart removes the daughters), a crash after it leaves the
    /// daughters (restart removes the parent's directory). Writes that meet
    /// the closed parent are routed again to the daughters.
    pub fn split_region(&self, name: &TableName, id: u64) -> Result<Option<[Arc<Region>; 2]>> {
        let _ddl = self.ddl.lock();
        let Ok(table) = self.table(name) else {
            return Ok(None);
        };
        let Some(i) = table.regions.iter().position(|r| r.id() == id) else {
            return Ok(None);
        };
        let parent = table.regions[i].local().clone();
        let Some(at) = parent.split_row() else {
            return Ok(None);
        };
        let intent = self.catalog.begin_split(name, id, &at)?;
        crate::failpoint::hit("split-after-intent");
        let outcome = (|| -> Result<TableDescriptor> {
            parent.close_for_split()?;
            crate::failpoint::hit("split-after-parent-flush");
            for d in intent.daughters {
                parent.link_files_into(&region_dir(&self.dir, d))?;
            }
            crate::failpoint::hit("split-after-daughters");
            self.catalog.finish_split(&intent)
        })();
        let desc = match outcome {
            Ok(desc) => desc,
            Err(e) => {
                // Not committed: back to the parent as it is on disk.
                let _ = self.catalog.abandon_split(&intent);
                for d in intent.daughters {
                    let _ = std::fs::remove_dir_all(region_dir(&self.dir, d));
                }
                let families: Vec<_> = table
                    .desc
                    .families
                    .iter()
                    .map(FamilySpec::descriptor)
                    .collect();
                let mut regions = table.regions.clone();
                regions[i] = RegionHandle::Local(Arc::new(
                    self.open_region(&table.desc.regions[i], &families)?,
                ));
                self.tables.write().insert(
                    name.clone(),
                    Arc::new(Table {
                        desc: table.desc.clone(),
                        regions,
                    }),
                );
                return Err(e);
            }
        };
        crate::failpoint::hit("split-after-commit");
        let families: Vec<_> = desc.families.iter().map(FamilySpec::descriptor).collect();
        let mut regions = table.regions.clone();
        let mut daughters = Vec::with_capacity(2);
        for info in &desc.regions[i..i + 2] {
            daughters.push(Arc::new(self.open_region(info, &families)?));
        }
        regions.splice(
            i..i + 1,
            daughters.iter().map(|d| RegionHandle::Local(d.clone())),
        );
        self.tables
            .write()
            .insert(name.clone(), Arc::new(Table { desc, regions }));
        // Everything of the parent is in the daughters' files now.
        self.shard_of(id).wal.mark_flushed(id, u64::MAX);
        let d = region_dir(&self.dir, id);
        std::fs::remove_dir_all(&d).map_err(|e| Error::io(&d, "remove split parent", e))?;
        let [a, b]: [Arc<Region>; 2] = daughters
            .try_into()
            .map_err(|_| Error::Internal("a split makes two daughters".into()))?;
        metrics::counter!("halite_region_splits_total", "table" => name.to_string()).increment(1);
        tracing::info!(
            table = %name,
            parent = id,
            daughters = %format!("{} {}", a.id(), b.id()),
            at = %crate::codec::to_hex(&at),
            "region split"
        );
        Ok(Some([a, b]))
    }

    /// Flushes every region (for shutdown and tests).
    pub fn flush_all(&self) -> Result<()> {
        for t in self.tables.read().values() {
            for r in t.regions() {
                r.flush()?;
            }
        }
        Ok(())
    }

    /// Stops the shards, flushes and closes every region, closes the WALs.
    pub fn close(mut self) -> Result<()> {
        self.closing.store(true, Ordering::SeqCst);
        for s in &mut self.shards {
            s.tx.take();
            if let Some(t) = s.thread.take() {
                let _ = t.join();
            }
        }
        let tables: Vec<Arc<Table>> = self.tables.write().drain().map(|(_, t)| t).collect();
        for t in tables {
            for r in t.regions() {
                r.local().close()?;
            }
        }
        self.maintenance.shutdown();
        for s in &self.shards {
            s.wal.close();
        }
        Ok(())
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        for s in &mut self.shards {
            s.tx.take();
            if let Some(t) = s.thread.take() {
                let _ = t.join();
            }
        }
    }
}

fn shard_loop(rx: Receiver<WriteJob>) {
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

/// A chore of the store run every interval on a thread of its own. It
/// holds the store weakly: it never keeps it open.
pub struct Chore {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Chore {
    pub fn start(
        store: &Arc<Store>,
        name: &str,
        every: Duration,
        chore: impl Fn(&Store) + Send + 'static,
    ) -> std::io::Result<Chore> {
        let (stop, rx) = bounded::<()>(1);
        let store = Arc::downgrade(store);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) = rx.recv_timeout(every)
                {
                    let Some(store) = store.upgrade() else { return };
                    chore(&store);
                }
            })?;
        Ok(Chore {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops; waits for a run under way to finish.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Chore {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Checks region sizes every interval and splits the oversized ones.
pub struct Splitter;

impl Splitter {
    pub fn start(store: &Arc<Store>, every: Duration) -> std::io::Result<Chore> {
        Chore::start(store, "halite-split", every, |store| {
            if let Err(e) = store.split_oversized() {
                tracing::error!(error = %e, "region split failed; the region stays whole");
            }
        })
    }
}

/// Keeps all MemStores together under the global limit also while no
/// write comes (writers enforce it only as they arrive): over it, the
/// largest are flushed.
pub struct MemoryGuard;

impl MemoryGuard {
    /// How often the MemStores are weighed.
    pub const EVERY: Duration = Duration::from_millis(250);

    pub fn start(store: &Arc<Store>) -> std::io::Result<Chore> {
        Chore::start(store, "halite-memory", Self::EVERY, |store| {
            store.relieve_memory();
        })
    }
}
