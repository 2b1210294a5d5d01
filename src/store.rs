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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, bounded};
use parking_lot::{Mutex, RwLock};

use crate::catalog::{Catalog, CreateTable, TableDescriptor, TableName};
use crate::cell::{Row, RowMutation};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::query::{Query, QueryPage, QueryPool, QueryRows, SeriesAggregate};
use crate::region::block_cache::BlockCache;
use crate::region::maintenance::Maintenance;
use crate::region::wal::record::Origin;
use crate::region::wal::{Wal, WalOptions};
use crate::region::{PendingWrite, Region, RegionDescriptor, RegionOptions};
use crate::scan::{ContinuationToken, Get, RowScanner, RowView, Scan, ScanPage};
use crate::schema::FamilySpec;

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
    /// Threads that run bucket scans of logical queries (default: two per
    /// core).
    pub query_threads: usize,
    /// Flush threads shared by all regions (default 2).
    pub flush_threads: usize,
    /// Compaction threads shared by all regions (default 1).
    pub compaction_threads: usize,
}

impl StoreOptions {
    pub fn from_config(c: &Config) -> Self {
        StoreOptions {
            shards: c.server.shards,
            queue_depth: 64,
            wal: c.wal_options(),
            region: c.region_options(),
            block_cache_bytes: c.cache.block_cache_size.0 as usize,
            query_threads: c.server.query_threads,
            flush_threads: c.region.flush_threads,
            compaction_threads: c.region.compaction_threads,
        }
    }
}

struct WriteJob {
    region: Arc<Region>,
    rows: Vec<RowMutation>,
    durability: crate::schema::Durability,
    origin: Option<Origin>,
    reply: Sender<Result<PendingWrite>>,
}

struct Shard {
    wal: Arc<Wal>,
    tx: Option<Sender<WriteJob>>,
    thread: Option<JoinHandle<()>>,
}

/// An open table: its descriptor and its regions in key order.
pub struct Table {
    pub desc: TableDescriptor,
    regions: Vec<Arc<Region>>,
}

impl Table {
    pub fn regions(&self) -> &[Arc<Region>] {
        &self.regions
    }
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
    pool: Arc<QueryPool>,
    maintenance: Arc<Maintenance>,
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
        let options_query_threads = options.query_threads;
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
            pool: Arc::new(QueryPool::new(options_query_threads)),
            maintenance,
        };
        for desc in store.catalog.tables(None) {
            let table = store.open_table(desc)?;
            store
                .tables
                .write()
                .insert(table.desc.name.clone(), Arc::new(table));
        }
        store.remove_leftovers()?;
        Ok(store)
    }

    fn shard_of(&self, region_id: u64) -> &Shard {
        &self.shards[(region_id % self.shards.len() as u64) as usize]
    }

    fn open_table(&self, desc: TableDescriptor) -> Result<Table> {
        let families: Vec<_> = desc.families.iter().map(FamilySpec::descriptor).collect();
        let mut regions = Vec::with_capacity(desc.regions.len());
        for info in &desc.regions {
            let region = Region::open_with(
                region_dir(&self.dir, info.id),
                RegionDescriptor {
                    id: info.id,
                    families: families.clone(),
                },
                self.options.region.clone(),
                self.shard_of(info.id).wal.clone(),
                self.clock.clone(),
                self.cache.clone(),
                Some(self.maintenance.clone()),
            )?;
            regions.push(Arc::new(region));
        }
        Ok(Table { desc, regions })
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
        let desc = self.catalog.create_table(req, self.clock.now_ms())?;
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
        let _ddl = self.ddl.lock();
        let old = self.table(name)?;
        let desc = self.catalog.alter_families(name, families)?;
        for r in old.regions() {
            r.close()?;
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
            r.close_without_flush();
            self.shard_of(r.id()).wal.mark_flushed(r.id(), u64::MAX);
            let d = region_dir(&self.dir, r.id());
            std::fs::remove_dir_all(&d).map_err(|e| Error::io(&d, "remove dropped region", e))?;
        }
        Ok(())
    }

    /// Writes rows (each with a full row key) with the table's durability;
    /// returns when they are acknowledged. Rows are routed to their regions
    /// through the shard queues.
    pub fn write(
        &self,
        name: &TableName,
        rows: Vec<RowMutation>,
        origin: Option<Origin>,
    ) -> Result<()> {
        let table = self.table(name)?;
        let mut per_region: HashMap<usize, Vec<RowMutation>> = HashMap::new();
        for row in rows {
            let i = region_index(&table, &row.row);
            per_region.entry(i).or_default().push(row);
        }
        let mut replies = Vec::with_capacity(per_region.len());
        for (i, rows) in per_region {
            let region = table.regions[i].clone();
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
                origin: origin.clone(),
                reply,
            })
            .map_err(|_| Error::Closed)?;
            replies.push(rx);
        }
        let mut first_error = None;
        for rx in replies {
            let outcome = rx
                .recv()
                .map_err(|_| Error::Closed)
                .and_then(|r| r)
                .and_then(|p| p.wait());
            if let Err(e) = outcome {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
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

    /// A logical query's rows one at a time, for answers that stream.
    pub fn query_rows(&self, name: &TableName, q: &Query) -> Result<QueryRows> {
        QueryRows::new(self.table(name)?, self.pool.clone(), q)
    }

    /// A logical series query (see [`crate::query`]): one page of rows.
    pub fn query(&self, name: &TableName, q: &Query) -> Result<QueryPage> {
        crate::query::run(self.table(name)?, self.pool.clone(), q)
    }

    /// A logical series query with aggregation pushed into the bucket scans.
    pub fn aggregate(&self, name: &TableName, q: &Query) -> Result<Vec<SeriesAggregate>> {
        crate::query::aggregate(self.table(name)?, &self.pool, q)
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
        for s in &mut self.shards {
            s.tx.take();
            if let Some(t) = s.thread.take() {
                let _ = t.join();
            }
        }
        let tables: Vec<Arc<Table>> = self.tables.write().drain().map(|(_, t)| t).collect();
        for t in tables {
            for r in t.regions() {
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

fn region_index(table: &Table, row: &[u8]) -> usize {
    table
        .desc
        .regions
        .partition_point(|r| r.start.as_slice() <= row)
        .saturating_sub(1)
}

fn shard_loop(rx: Receiver<WriteJob>) {
    for job in rx {
        let outcome = job
            .region
            .submit(&job.rows, job.durability, job.origin.as_ref());
        let _ = job.reply.send(outcome);
    }
}

/// Streams a scan over a table's regions in key order (or reverse), one
/// region scanner at a time, clipped to each region's range.
pub struct TableScanner {
    table: Arc<Table>,
    scan: Scan,
    /// Regions still to read, in scan order.
    pending: Vec<usize>,
    current: Option<RowScanner>,
    to_skip: usize,
    remaining: Option<usize>,
    /// Key of the last row handed out (the continuation point).
    last_key: Option<Vec<u8>>,
}

impl TableScanner {
    pub fn new(table: Arc<Table>, scan: Scan) -> Result<Self> {
        let (start, stop) = scan.bounds()?;
        let mut pending: Vec<usize> = (0..table.regions.len())
            .filter(|&i| {
                let r = &table.desc.regions[i];
                let before_stop = stop
                    .as_ref()
                    .is_none_or(|s| r.start.as_slice() < s.as_slice());
                let after_start = start
                    .as_ref()
                    .is_none_or(|s| r.end.is_empty() || r.end.as_slice() > s.as_slice());
                before_stop && after_start
            })
            .collect();
        if !scan.reverse {
            pending.reverse(); // popped from the back
        }
        Ok(TableScanner {
            to_skip: scan.offset,
            remaining: scan.limit,
            table,
            scan,
            pending,
            current: None,
            last_key: None,
        })
    }

    /// After the rows ran out: a token to continue after the last row when
    /// the limit cut the answer short and rows remain.
    pub fn continuation(&mut self) -> Result<Option<ContinuationToken>> {
        if self.remaining != Some(0) {
            return Ok(None);
        }
        let Some(last) = self.last_key.take() else {
            return Ok(None);
        };
        self.remaining = Some(1);
        self.to_skip = 0;
        let more = self.next_view()?.is_some();
        self.remaining = Some(0);
        Ok(more.then_some(ContinuationToken {
            row: last,
            reverse: self.scan.reverse,
        }))
    }

    fn open_next(&mut self) -> Result<bool> {
        let Some(i) = self.pending.pop() else {
            return Ok(false);
        };
        let info = &self.table.desc.regions[i];
        let mut scan = Scan {
            offset: 0,
            limit: None,
            ..self.scan.clone()
        };
        // Clip to the region; the region scanner intersects with the scan's
        // own bounds and its continuation token.
        if scan
            .start
            .as_ref()
            .is_none_or(|s| s.as_slice() < info.start.as_slice())
        {
            scan.start = Some(info.start.clone());
        }
        if !info.end.is_empty()
            && scan
                .stop
                .as_ref()
                .is_none_or(|s| s.as_slice() > info.end.as_slice())
        {
            scan.stop = Some(info.end.clone());
        }
        self.current = Some(self.table.regions[i].scanner(&scan)?);
        Ok(true)
    }

    pub fn next_row(&mut self) -> Result<Option<Row>> {
        Ok(self.next_view()?.map(|v| v.to_row()))
    }

    /// The next row, borrowed until the next call: no allocation per cell.
    pub fn next_view(&mut self) -> Result<Option<RowView<'_>>> {
        if self.remaining == Some(0) {
            return Ok(None);
        }
        loop {
            if self.current.is_none() && !self.open_next()? {
                return Ok(None);
            }
            let has_row = self
                .current
                .as_mut()
                .expect("opened above")
                .next_view()?
                .is_some();
            if !has_row {
                self.current = None;
                continue;
            }
            if self.to_skip > 0 {
                self.to_skip -= 1;
                continue;
            }
            if let Some(r) = self.remaining.as_mut() {
                *r -= 1;
            }
            let view = self.current.as_ref().and_then(|c| c.current_view());
            if let Some(v) = &view {
                let last = self.last_key.get_or_insert_with(Vec::new);
                last.clear();
                last.extend_from_slice(v.key());
            }
            return Ok(view);
        }
    }
}
