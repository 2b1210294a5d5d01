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
//!
//! This file opens and closes the store, keeps its tables and routes their
//! writes; `shard.rs` holds the shards and their threads, `recovery.rs` the
//! WAL replay at open, `split.rs` region splits and `chores.rs` the
//! background chores (splits, the global MemStore limit).

pub mod chores;
pub mod cluster;
mod recovery;
pub mod scrub;
mod shard;
mod split;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, bounded};
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
use crate::region::{Region, RegionOptions};
use crate::schema::{Durability, FamilySpec};
use crate::table::{RegionHandle, RoutedRows, Table, TableScanner, region_index};

use shard::{Rows, Shard, Submitted, WriteJob, count_rows_written, shard_loop};

/// A cluster node's WAL segment size: nothing is written there.
const CLUSTER_WAL_SEGMENT: u64 = 64 * 1024;

/// All MemStores together past this share of `global_memstore_bytes`
/// start flushing, with writers going on; past the whole of it they wait.
pub const FLUSH_FROM_PERCENT: usize = 80;

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
    /// The layout the rows were routed by (`None`: a cluster's position
    /// record of a shard, which reaches its regions whatever their table).
    table: Option<Arc<Table>>,
    replies: Vec<Receiver<Submitted>>,
    /// Rows refused by closed regions are routed again until then.
    deadline: std::time::Instant,
}

/// How long a write waits for a split or alter to open the new regions.
const LAYOUT_CHANGE_WAIT: Duration = Duration::from_secs(30);

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
    /// Live store files the scrub found damaged (`store/scrub.rs`), with
    /// what was wrong; kept until the file is no longer live.
    damaged: Mutex<std::collections::BTreeMap<PathBuf, String>>,
    /// Cluster mode: the object store, and the shards this node owns.
    cluster: Option<cluster::Cluster>,
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
        Store::open_with(dir, options, clock, None)
    }

    /// Opens the store of a cluster's node: the catalog is the one the
    /// nodes share on the object store, and no region is open until the
    /// node takes the shard that carries it ([`Store::take_shard`]); until
    /// then each is read from what its owner published.
    pub fn open_cluster(
        dir: impl AsRef<Path>,
        options: StoreOptions,
        clock: Arc<dyn Clock>,
        storage: cluster::ClusterStorage,
    ) -> Result<Store> {
        Store::open_with(dir, options, clock, Some(storage))
    }

    fn open_with(
        dir: impl AsRef<Path>,
        options: StoreOptions,
        clock: Arc<dyn Clock>,
        storage: Option<cluster::ClusterStorage>,
    ) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        let maintenance = Maintenance::new(options.flush_threads, options.compaction_threads)
            .map_err(|e| Error::io(&dir, "spawn flush and compaction threads", e))?;
        let catalog = match &storage {
            Some(s) => Catalog::open_shared(s.objects.clone())?,
            None => Catalog::open(dir.join("catalog"))?,
        };
        let cache = BlockCache::new(options.block_cache_bytes);
        // In a cluster the topic is the log and no point goes to a WAL:
        // its segments are not preallocated (two zero-filled 64 MiB files
        // per shard took 0.15-0.2 s of CPU at every start, and the disk).
        let wal_options = match &storage {
            Some(_) => WalOptions {
                segment_size: CLUSTER_WAL_SEGMENT,
                spare_segments: 0,
                ..options.wal.clone()
            },
            None => options.wal.clone(),
        };
        let mut shards = Vec::with_capacity(options.shards.max(1));
        for i in 0..options.shards.max(1) {
            let wal = Arc::new(Wal::open(
                dir.join("wal").join(format!("shard-{i}")),
                wal_options.clone(),
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
            damaged: Mutex::new(std::collections::BTreeMap::new()),
            cluster: storage.map(cluster::Cluster::new),
        };
        if store.cluster.is_some() {
            store.open_cluster_tables()?;
            return Ok(store);
        }
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
                .insert(desc.name.clone(), Arc::new(Table::new(desc, regions)));
        }
        store.remove_leftovers()?;
        Ok(store)
    }

    fn shard_of(&self, region_id: u64) -> &Shard {
        &self.shards[(region_id % self.shards.len() as u64) as usize]
    }

    fn open_table(&self, desc: TableDescriptor) -> Result<Table> {
        if let Some(c) = &self.cluster {
            return Ok(c.unowned_table(desc, &self.cache, &self.clock));
        }
        let families: Vec<_> = desc.families.iter().map(FamilySpec::descriptor).collect();
        let mut regions = Vec::with_capacity(desc.regions.len());
        for info in &desc.regions {
            regions.push(RegionHandle::Local(Arc::new(
                self.open_region(info, &families)?,
            )));
        }
        Ok(Table::new(desc, regions))
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
        self.create_tables(std::slice::from_ref(req), None)?
            .pop()
            .ok_or_else(|| Error::Conflict(format!("table exists. table=`{}`", req.name)))
    }

    /// Creates the tables of `reqs` not there yet (as many as `limit`
    /// leaves room for), in one change of the catalog, and opens them;
    /// answers the tables made, in `reqs`' order (one already there, or
    /// past the limit, is left out).
    pub fn create_tables(
        &self,
        reqs: &[CreateTable],
        limit: Option<crate::catalog::TableLimit<'_>>,
    ) -> Result<Vec<TableDescriptor>> {
        let _ddl = self.ddl.lock();
        if reqs.iter().any(|req| req.key.salt_generation() > 0) {
            self.refuse_in_cluster("a table with salt epochs")?;
        }
        // The regions' directories (with empty manifests) are made and
        // synced before the catalog names them, as a split's daughters
        // are: a crash in between leaves directories no catalog names
        // (removed at start), never a region without its directory.
        let made = self
            .catalog
            .create_tables_with(reqs, self.clock.now_ms(), limit, |made| {
                // A cluster's regions start on the object store, with
                // their first owner.
                if self.cluster.is_some() {
                    return Ok(());
                }
                let ids: Vec<u64> = made
                    .iter()
                    .flat_map(|desc| desc.regions.iter().map(|r| r.id))
                    .collect();
                self.make_region_dirs(&ids)
            })?;
        for desc in &made {
            // In a cluster the shards held here that feed it take its
            // regions.
            if let Some(cluster) = &self.cluster {
                self.relayout_table(cluster, desc.clone())?;
                continue;
            }
            let table = self.open_table(desc.clone())?;
            self.tables
                .write()
                .insert(desc.name.clone(), Arc::new(table));
        }
        Ok(made)
    }

    /// Empty regions' directories, each with an empty manifest, synced.
    fn make_region_dirs(&self, ids: &[u64]) -> Result<()> {
        let mut parent = None;
        for &id in ids {
            let dir = region_dir(&self.dir, id);
            crate::fsutil::create_dir_all(&dir)
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
    }

    /// Changes a salted table's bucket count from time `from` (in the
    /// table's unit) on; nothing written is rewritten. No point of the new
    /// epoch may be stored under the old count, so `from` must lie ahead of
    /// the server's clock, and ahead of every cell the table holds, once
    /// its regions are closed and nothing more can be written under the
    /// old count. The regions reopen with the new layout (a region per new
    /// bucket): a batch encoded under the old count meets a closed region,
    /// comes back, and is salted again before it is routed.
    pub fn add_salt_epoch(
        &self,
        name: &TableName,
        from: u64,
        buckets: u32,
    ) -> Result<TableDescriptor> {
        let _ddl = self.ddl.lock();
        let old = self.table(name)?;
        let unit = old.desc.key.time_unit;
        // The request checked before anything closes (the catalog checks
        // it again under its own lock).
        old.desc
            .key
            .with_salt_epoch(&name.to_string(), from, buckets)?;
        let ahead_of_clock = || {
            let now = unit.from_ms_ceil(self.clock.now_ms());
            if from <= now {
                return Err(Error::InvalidInput(format!(
                    "a salt epoch starts ahead of the server's clock (now {now} in the table's \
                     unit `{}`, asked {from}): points already written keep the buckets they have",
                    unit.name()
                )));
            }
            Ok(())
        };
        ahead_of_clock()?;
        let from_ms = unit.to_ms_floor(from).unwrap_or(u64::MAX);
        if let Some(cluster) = &self.cluster {
            return self.add_cluster_salt_epoch(cluster, &old, from, from_ms, buckets);
        }
        let desc = self.with_regions_closed(&old, || {
            ahead_of_clock()?;
            for r in old.regions().iter().filter_map(RegionHandle::local) {
                let newest = r.newest_cell_ms();
                if newest >= from_ms {
                    return Err(Error::InvalidInput(format!(
                        "table `{name}` already holds a point stamped {newest} ms, at or after \
                         the new epoch's start ({from_ms} ms): it would stay under the old \
                         bucket count where reads of the new epoch do not look; start the \
                         epoch after the newest point"
                    )));
                }
            }
            let (desc, _) = self
                .catalog
                .add_salt_epoch(name, from, buckets, |_, ids| self.make_region_dirs(ids))?;
            Ok(desc)
        })?;
        tracing::info!(table = %name, from, buckets, regions = desc.regions.len(), "salt epoch added");
        Ok(desc)
    }

    /// Closes `table`'s regions (flushed; writes meeting them come back
    /// and are routed again), runs `change`, which returns the table's new
    /// descriptor, and opens the regions it names. When a close or
    /// `change` fails, the table opens again as the catalog has it.
    fn with_regions_closed(
        &self,
        table: &Table,
        change: impl FnOnce() -> Result<TableDescriptor>,
    ) -> Result<TableDescriptor> {
        let changed = table
            .regions()
            .iter()
            .filter_map(RegionHandle::local)
            .try_for_each(|r| r.close())
            .and_then(|()| change());
        let desc = match changed {
            Ok(desc) => desc,
            Err(e) => {
                let current = self.catalog.table(&table.desc.name)?;
                let reopened = self.open_table(current)?;
                self.tables
                    .write()
                    .insert(table.desc.name.clone(), Arc::new(reopened));
                return Err(e);
            }
        };
        let reopened = self.open_table(desc.clone())?;
        self.tables
            .write()
            .insert(desc.name.clone(), Arc::new(reopened));
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
        self.refuse_in_cluster("altering a table")?;
        let old = self.table(name)?;
        let desc = self.catalog.alter(name, families, durability)?;
        // The catalog changed first: the regions reopen with the new
        // attributes whatever the closes say.
        self.with_regions_closed(&old, || Ok(desc))
    }

    /// Drops a table: out of the catalog first (so a crash cannot bring it
    /// back), then its regions' files.
    pub fn drop_table(&self, name: &TableName) -> Result<()> {
        let _ddl = self.ddl.lock();
        self.refuse_in_cluster("dropping a table")?;
        let table = self.table(name)?;
        self.catalog.drop_table(name)?;
        self.remove_dropped(name, &table)
    }

    /// Drops namespace `ns` with every table in it: all out of the catalog
    /// in one change, then their regions' files.
    pub fn drop_namespace(&self, ns: &str) -> Result<()> {
        let _ddl = self.ddl.lock();
        self.refuse_in_cluster("dropping a namespace")?;
        let open: Vec<(TableName, Arc<Table>)> = self
            .tables
            .read()
            .iter()
            .filter(|(name, _)| name.namespace == ns)
            .map(|(name, t)| (name.clone(), t.clone()))
            .collect();
        // A crash after this change leaves region directories the catalog
        // does not name, which the next open removes.
        self.catalog.drop_namespace_and_tables(ns)?;
        for (name, table) in open {
            self.remove_dropped(&name, &table)?;
        }
        Ok(())
    }

    /// A table the catalog no longer names: closed without a flush, its
    /// WAL edits released, its regions' directories removed.
    fn remove_dropped(&self, name: &TableName, table: &Table) -> Result<()> {
        self.tables.write().remove(name);
        for r in table.regions() {
            // Already gone from the catalog: nothing to flush.
            if let Some(r) = r.local() {
                r.close_without_flush();
            }
            self.shard_of(r.id()).wal.mark_flushed(r.id(), u64::MAX);
            let d = region_dir(&self.dir, r.id());
            crate::fsutil::remove_dir_all(&d)
                .map_err(|e| Error::io(&d, "remove dropped region", e))?;
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
        let mut rows = rows;
        if rows.salt_generation != table.desc.key.salt_generation() {
            // Encoded before the bucket count changed: salted again, and
            // (as the layout changed with it) routed again below.
            for b in &mut rows.batches {
                b.rewrite_rows(|row| {
                    table.desc.key.resalt_row(row);
                });
            }
            rows.region_ids.clear();
        }
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
            count_rows_written(&table, r);
        }
        let replies = self.send_routed(&table, per_region, origin.as_ref())?;
        Ok(PendingBatch {
            name: name.clone(),
            origin,
            table: Some(table),
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
        count_rows_written(&table, &rows);
        let replies = self.send_once(&table, vec![rows], origin.as_ref())?;
        Ok(PendingBatch {
            name: name.clone(),
            origin,
            table: Some(table),
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
        // In cluster mode every region of the shard keeps its own
        // position (a new owner replays from the lowest): all the tables
        // its partition feeds (a database's topic feeds many, and names
        // its dictionary's table, which a cluster does not have). A
        // single node's store reads them all at start, so one region of
        // the table holds it.
        let (regions, durability, table) = if self.is_cluster() {
            let regions = self.regions_for_position(&origin.stream, origin.shard);
            (regions, Durability::SyncWal, None)
        } else {
            let table = self.table(name)?;
            let regions = vec![
                table
                    .regions
                    .first()
                    .and_then(RegionHandle::local)
                    .ok_or(Error::Closed)?
                    .clone(),
            ];
            (regions, table.desc.durability, Some(table))
        };
        let mut replies = Vec::with_capacity(regions.len());
        for region in regions {
            let (reply, rx) = bounded(1);
            self.shard_of(region.id())
                .tx
                .as_ref()
                .ok_or(Error::Closed)?
                .send(WriteJob {
                    region,
                    rows: Rows::Entries(EntryBatch::new()),
                    durability,
                    origin: Some(origin.clone()),
                    reply,
                })
                .map_err(|_| Error::Closed)?;
            replies.push(rx);
        }
        Ok(PendingBatch {
            name: name.clone(),
            origin: Some(origin),
            table,
            replies,
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
            table,
            mut replies,
            deadline,
        } = pending;
        let mut table = table;
        loop {
            let refused = Store::collect_replies(replies)?;
            if refused.is_empty() {
                return Ok(());
            }
            if self.closing.load(Ordering::SeqCst) || std::time::Instant::now() > deadline {
                return Err(Error::Closed);
            }
            let Some(routed_by) = &table else {
                return Err(Error::Closed);
            };
            // The split publishes its daughters within milliseconds.
            if Arc::ptr_eq(routed_by, &self.table(&name)?) {
                std::thread::sleep(Duration::from_millis(2));
            }
            let now = self.table(&name)?;
            table = Some(now.clone());
            let table = now;
            let refused = refused
                .into_iter()
                .map(|rows| match rows {
                    // Encoded rows met a region the layout change closed:
                    // salted again in case the bucket count changed with it.
                    Rows::Entries(mut b) => {
                        b.rewrite_rows(|row| {
                            table.desc.key.resalt_row(row);
                        });
                        Rows::Entries(b)
                    }
                    other => other,
                })
                .collect();
            replies = self.send_once(&table, refused, origin.as_ref())?;
        }
    }

    /// Per source shard (a Kafka topic and partition), the position below
    /// which every message written into `name` is durable, from the
    /// positions its regions' writes carried (recovered from WAL records and
    /// manifests at open).
    pub fn source_positions(&self, name: &TableName) -> Result<BTreeMap<SourceShard, u64>> {
        let mut all = BTreeMap::new();
        for region in self
            .table(name)?
            .regions()
            .iter()
            .filter_map(RegionHandle::local)
        {
            for (p, offset) in region.source_positions() {
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
            .filter_map(RegionHandle::local)
            .map(|r| {
                let seq = if flushed {
                    r.flushed_seq()
                } else {
                    r.last_seq()
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
            for r in t.regions().iter().filter_map(RegionHandle::local) {
                if let Some(f) = r.flush_trouble() {
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
        if let Some((path, what)) = self.damaged.lock().iter().next() {
            // Named within the data directory: /readyz is open to anyone.
            let shown = path.strip_prefix(&self.dir).unwrap_or(path);
            return Some(format!(
                "the scrub found a damaged store file: {} in the data directory ({what}); \
                 reads of its rows fail until it is replaced: restore it (the next pass \
                 clears this), or drop and reload its table",
                shown.display()
            ));
        }
        None
    }

    /// The live store files of this node's regions: (path, file id,
    /// bytes).
    pub fn live_store_files(&self) -> Vec<(PathBuf, u64, u64)> {
        let tables = self.tables.read();
        let mut out = Vec::new();
        for t in tables.values() {
            for r in t.regions().iter().filter_map(RegionHandle::local) {
                out.extend(r.store_files());
            }
        }
        out
    }

    /// Records what the scrub found wrong with a live store file; how
    /// many damaged files there are.
    pub fn note_damage(&self, path: &Path, what: String) -> usize {
        let mut damaged = self.damaged.lock();
        damaged.insert(path.to_path_buf(), what);
        damaged.len()
    }

    /// Forgets what the scrub noted of `path` (it checked clean again);
    /// how many damaged files remain.
    pub fn clear_damage(&self, path: &Path) -> usize {
        let mut damaged = self.damaged.lock();
        damaged.remove(path);
        damaged.len()
    }

    /// Forgets damage of files no longer live (compacted away, dropped);
    /// how many damaged files remain.
    pub fn forget_damage_except(&self, live: &std::collections::BTreeSet<PathBuf>) -> usize {
        let mut damaged = self.damaged.lock();
        damaged.retain(|p, _| live.contains(p));
        damaged.len()
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
                    .filter_map(RegionHandle::local)
                    .any(|r| r.flush_trouble().is_some_and(|f| f.no_space))
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

    /// Asks every region served here for a compaction check (HBase's
    /// CompactionChecker): a compaction otherwise follows only a flush, so
    /// a region no longer written to would keep files past their TTL,
    /// closed time windows unmerged and its periodic major compaction
    /// waiting. A check that finds nothing to do reads only file metadata.
    pub fn request_compaction_checks(&self) {
        for table in self.tables.read().values() {
            for region in table.regions.iter() {
                region.request_compaction();
            }
        }
    }

    /// Whether all MemStores together are over the global limit, when
    /// writers wait. From [`FLUSH_FROM_PERCENT`] of it, the largest active
    /// MemStores are asked to flush until what is neither flushed nor
    /// flushing would be back under that mark: as HBase's lower limit,
    /// flushes start before the limit, so writers go on while they run.
    /// Started only at the limit, every flush was a wait: through Kafka,
    /// past the first GiB of devops rows the writers spent about a second
    /// of every second blocked, with a third of the two cores idle.
    pub fn relieve_memory(&self) -> bool {
        let limit = self.options.global_memstore_bytes;
        let flush_from = limit / 100 * FLUSH_FROM_PERCENT;
        let total = self.memstore_bytes();
        if total <= flush_from {
            return false;
        }
        let regions: Vec<(usize, usize, Arc<Region>)> = self
            .tables
            .read()
            .values()
            .flat_map(|t| t.regions.iter())
            .filter_map(RegionHandle::local)
            .map(|r| {
                let (active, flushing) = r.memstore_split();
                (active, flushing, r.clone())
            })
            .collect();
        let total: usize = regions.iter().map(|(a, f, _)| a + f).sum();
        if total <= flush_from {
            return false;
        }
        // What a flush under way frees is freed already, as far as asking
        // for more goes; what a failed one left is not (its region is
        // asked again, or writers would wait on it until its flush_age).
        let mut staying: usize = regions.iter().map(|(a, _, _)| a).sum();
        let mut by_size = regions;
        by_size.sort_by_key(|r| std::cmp::Reverse(r.0));
        for (active, _, r) in &by_size {
            if staying <= flush_from / 10 * 9 {
                break;
            }
            r.request_flush();
            staying = staying.saturating_sub(*active);
        }
        total > limit
    }

    /// Has the regions flushed whose unflushed edits keep an idle WAL from
    /// giving its preallocated space back (`Wal::take_regions_holding_space`);
    /// true when some were asked.
    pub fn flush_regions_holding_idle_wals(&self) -> bool {
        let wanted: std::collections::BTreeSet<u64> = self
            .shards
            .iter()
            .flat_map(|s| s.wal.take_regions_holding_space())
            .collect();
        if wanted.is_empty() {
            return false;
        }
        let tables = self.tables.read();
        for r in tables
            .values()
            .flat_map(|t| t.regions.iter())
            .filter_map(RegionHandle::local)
            .filter(|r| wanted.contains(&r.id()))
        {
            r.request_flush();
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
            let Some(region) = table.regions[i].local().cloned() else {
                return Err(Error::NotOwned(format!(
                    "region {} of `{}` is owned by another node; its rows go through \
                     the partition that node consumes",
                    table.regions[i].id(),
                    table.desc.name
                )));
            };
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
        table.regions[region_index(&table, &get.row)].get(get, None)
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

    /// As [`Table::scan_columns`], on table `name`.
    pub fn scan_columns(
        &self,
        name: &TableName,
        scan: &Scan,
        read: crate::region::read::columns::ColumnRead,
        sink: &mut dyn crate::region::read::columns::ColumnSink,
    ) -> Result<()> {
        self.table(name)?.scan_columns(scan, read, sink)
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
            for r in t.regions().iter().filter_map(RegionHandle::local) {
                r.close()?;
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
