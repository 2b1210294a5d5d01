//! Cluster mode (docs/cluster.md): each node's store owns the regions of
//! the source shards (Kafka partitions) the consumer group assigned it,
//! and reads every other region from what its owner published on the
//! object store.
//!
//! A shard carries a fixed set of salt buckets: bucket `b` of a table
//! travels in partition `b % partitions` of the topic that feeds the
//! table (the producers send it there: `halite produce`, and HTTP writes
//! in cluster mode). Taking a shard ([`Store::take_shard`]) takes its
//! lease at the next epoch, adopts each of its regions' manifests and
//! opens them from the object store; the consumer then replays the
//! partition from the lowest position those manifests cover. Releasing
//! it (a revoke, or a fence: another node took it) drops the regions'
//! MemStores: whatever they held is still in the topic.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde::Serialize;

use super::{Store, region_dir};
use crate::catalog::{TableDescriptor, TableName};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::objects::Objects;
use crate::ownership::{self, ShardOwner};
use crate::region::file_cache::FileCache;
use crate::region::remote::{Nodes, RemoteRegion};
use crate::region::shared_files::{OwnedShard, SharedFiles, names_in_manifest};
use crate::region::sst::cache::BlockCache;
use crate::region::wal::record::SourceShard;
use crate::region::{RecoveringRegion, RegionDescriptor};
use crate::schema::FamilySpec;
use crate::table::{RegionHandle, RoutedRows, Table};

/// What a cluster's node needs to reach the shared storage.
pub struct ClusterStorage {
    pub objects: Arc<Objects>,
    /// This node's name: leases and manifests say who wrote them.
    pub node: String,
    /// Where the other nodes reach this node's API (`host:port`).
    pub address: String,
    /// Where every node listens (for their regions' MemStore tails).
    pub nodes: Arc<Nodes>,
    /// Store files of regions other nodes own, downloaded for queries.
    pub files: Arc<FileCache>,
}

/// The tables a shard's partition feeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardFeeds {
    /// These tables (a topic mapped to a table).
    Tables(Vec<TableName>),
    /// Every table of open tag sets of a database, those made later too
    /// (a topic mapped to a database: a measurement's table is made on
    /// its first point).
    Database(String),
}

impl ShardFeeds {
    /// Whether the shard's partition feeds table `desc`.
    pub fn feeds(&self, desc: &TableDescriptor) -> bool {
        match self {
            ShardFeeds::Tables(names) => names.contains(&desc.name),
            // Names starting with `__` are halite's own (a single node's
            // dictionary table).
            ShardFeeds::Database(db) => {
                desc.name.namespace == *db
                    && desc.key.is_open_tags()
                    && !desc.name.table.starts_with("__")
            }
        }
    }
}

/// A shard this node owns.
struct HeldShard {
    owner: Arc<OwnedShard>,
    /// The shard's regions: their table and id.
    regions: Vec<(TableName, u64)>,
    /// The tables the shard feeds, and its stream's shard count: which
    /// buckets it carries (a region a salt epoch adds joins it, and a
    /// table made later of a database it feeds).
    feeds: ShardFeeds,
    partitions: u32,
    since: Instant,
}

pub(crate) struct Cluster {
    storage: ClusterStorage,
    held: Mutex<BTreeMap<SourceShard, HeldShard>>,
}

/// A shard this node owns, as `/api/v1/cluster` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct HeldShardInfo {
    pub topic: String,
    pub partition: u32,
    pub epoch: u64,
    pub regions: Vec<u64>,
    pub fenced: bool,
    /// Every message of the partition below this is in the published
    /// files of all the shard's regions (none yet: absent).
    pub published_below: Option<u64>,
    pub held_s: f64,
}

/// Where the consumption of a shard starts once this node took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardStart {
    pub epoch: u64,
    /// Every message below this is in the published files of every region
    /// of the shard; `None`: some region never published a position, so
    /// the partition is replayed from its start.
    pub from: Option<u64>,
    pub regions: usize,
}

/// The partition of a topic with `partitions` partitions that carries
/// salt bucket `bucket`.
pub fn partition_of_bucket(bucket: u32, partitions: u32) -> u32 {
    bucket % partitions.max(1)
}

/// How often a node reads the shared catalog again (new tables, changed
/// layouts).
pub const CATALOG_REFRESH: std::time::Duration = std::time::Duration::from_secs(5);

/// How many catalog refreshes ahead of the clock a salt epoch starts in
/// cluster mode.
pub const EPOCH_LEAD_REFRESHES: u64 = 3;

/// A shard's name on the object store (its lease): `topic/partition`.
pub fn shard_name(stream: &str, shard: u32) -> String {
    format!("{stream}/{shard}")
}

impl Cluster {
    pub(super) fn new(storage: ClusterStorage) -> Cluster {
        Cluster {
            storage,
            held: Mutex::new(BTreeMap::new()),
        }
    }

    fn remote(
        &self,
        desc: &TableDescriptor,
        i: usize,
        cache: &Arc<BlockCache>,
        clock: &Arc<dyn Clock>,
    ) -> RegionHandle {
        RegionHandle::Remote(Arc::new(RemoteRegion::new(
            descriptor_of(desc, i),
            self.storage.objects.clone(),
            self.storage.files.clone(),
            self.storage.nodes.clone(),
            cache.clone(),
            clock.clone(),
        )))
    }

    /// A table none of whose regions this node owns.
    pub(super) fn unowned_table(
        &self,
        desc: TableDescriptor,
        cache: &Arc<BlockCache>,
        clock: &Arc<dyn Clock>,
    ) -> Table {
        let regions = (0..desc.regions.len())
            .map(|i| self.remote(&desc, i, cache, clock))
            .collect();
        Table::new(desc, regions)
    }
}

fn descriptor_of(desc: &TableDescriptor, i: usize) -> RegionDescriptor {
    let info = &desc.regions[i];
    RegionDescriptor {
        id: info.id,
        families: desc.families.iter().map(FamilySpec::descriptor).collect(),
        start: info.start.clone(),
        end: info.end.clone(),
    }
}

/// The indexes of `desc`'s regions that partition `shard` of `partitions`
/// carries (a region's bucket is the salt of its first row).
fn regions_of_shard(desc: &TableDescriptor, shard: u32, partitions: u32) -> Vec<usize> {
    desc.regions
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            let bucket = desc.key.salt_bucket(&r.start).unwrap_or(0);
            partition_of_bucket(bucket, partitions) == shard
        })
        .map(|(i, _)| i)
        .collect()
}

impl Store {
    /// Whether this store is a cluster's node.
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The node's name in cluster mode.
    pub fn node_name(&self) -> Option<&str> {
        self.cluster.as_ref().map(|c| c.storage.node.as_str())
    }

    /// The object store of a cluster's node.
    pub fn objects(&self) -> Option<&Arc<Objects>> {
        self.cluster.as_ref().map(|c| &c.storage.objects)
    }

    /// The file cache of a cluster's node.
    pub fn file_cache(&self) -> Option<&Arc<FileCache>> {
        self.cluster.as_ref().map(|c| &c.storage.files)
    }

    pub(super) fn refuse_in_cluster(&self, what: &str) -> Result<()> {
        if self.cluster.is_some() {
            return Err(Error::InvalidInput(format!(
                "{what} is not supported in cluster mode yet (docs/cluster.md)"
            )));
        }
        Ok(())
    }

    /// At open: every table of the shared catalog, none of whose regions
    /// this node owns yet; region directories a previous run left are
    /// removed (their data is on the object store), and the WALs keep
    /// nothing (the topics are the log).
    pub(super) fn open_cluster_tables(&self) -> Result<()> {
        let regions = self.dir.join("regions");
        if regions.exists() {
            crate::fsutil::remove_dir_all(&regions)
                .map_err(|e| Error::io(&regions, "remove the previous run's regions", e))?;
        }
        for s in &self.shards {
            s.wal.forget_regions_except(&Default::default());
        }
        if let Some(c) = &self.cluster {
            c.storage
                .nodes
                .register(&c.storage.node, &c.storage.address)?;
        }
        self.refresh_catalog()?;
        Ok(())
    }

    /// Reads the shared catalog again and opens the tables other nodes
    /// created since (as regions this node does not own).
    pub fn refresh_catalog(&self) -> Result<()> {
        let Some(cluster) = &self.cluster else {
            return Ok(());
        };
        let _ddl = self.ddl.lock();
        self.catalog.refresh()?;
        self.open_catalog_changes(cluster)
    }

    /// Opens the tables the shared catalog gained and the layouts it
    /// changed. Called under the DDL lock.
    pub(super) fn open_catalog_changes(&self, cluster: &Cluster) -> Result<()> {
        let mut first_error = None;
        for desc in self.catalog.tables(None) {
            let known = self.tables.read().get(&desc.name).map(|t| t.desc.clone());
            match known {
                Some(known) if known == desc => {}
                Some(_) => {
                    let name = desc.name.clone();
                    // One table's trouble does not hold the others back.
                    if let Err(e) = self.relayout_table(cluster, desc) {
                        tracing::warn!(table = %name, error = %e, "laying the table out again failed; the next refresh tries again");
                        first_error.get_or_insert(e);
                    }
                }
                // A table made since: its regions are taken by the shards
                // held here that feed it, read as other nodes' otherwise.
                None => {
                    let name = desc.name.clone();
                    if let Err(e) = self.relayout_table(cluster, desc) {
                        tracing::warn!(table = %name, error = %e, "opening a new table failed; the next refresh tries again");
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Takes partition `shard` of topic `stream` (of `partitions`), which
    /// feeds `feeds`: its lease at the next epoch, then each of its
    /// regions adopted from the object store and opened here. Returns
    /// where consuming the partition must start for nothing to be lost.
    pub fn take_shard(
        &self,
        stream: &str,
        shard: u32,
        partitions: u32,
        feeds: &ShardFeeds,
    ) -> Result<ShardStart> {
        let Some(cluster) = &self.cluster else {
            return Err(Error::InvalidInput(
                "shards are taken in cluster mode only".into(),
            ));
        };
        let _ddl = self.ddl.lock();
        let key: SourceShard = (stream.to_string(), shard);
        if cluster.held.lock().contains_key(&key) {
            // Assigned again without a revoke between: this node still
            // owns it, unless a fence said otherwise.
            self.release_locked(cluster, &key);
        }
        let started = Instant::now();
        let name = shard_name(stream, shard);
        let owner = Arc::new(OwnedShard::new(ShardOwner::acquire(
            cluster.storage.objects.clone(),
            &name,
            &cluster.storage.node,
        )?));
        let mut held = HeldShard {
            owner: owner.clone(),
            regions: Vec::new(),
            feeds: feeds.clone(),
            partitions,
            since: Instant::now(),
        };
        // A database's tables, every one the shared catalog names: one
        // another node made that this node had not opened yet would be
        // left out of the start position, and its rows between its own
        // published position and the others' never replayed.
        if let ShardFeeds::Database(_) = feeds {
            self.catalog.refresh()?;
            self.open_catalog_changes(cluster)?;
        }
        let tables: Vec<TableName> = match feeds {
            ShardFeeds::Tables(names) => names.clone(),
            ShardFeeds::Database(_) => self
                .tables
                .read()
                .values()
                .filter(|t| feeds.feeds(&t.desc))
                .map(|t| t.desc.name.clone())
                .collect(),
        };
        let mut from: Option<Option<u64>> = None;
        let mut opened = Vec::new();
        let outcome = (|| -> Result<()> {
            for table_name in &tables {
                let table = self.table(table_name)?;
                let mut regions = table.regions.clone();
                for i in regions_of_shard(&table.desc, shard, partitions) {
                    let id = table.desc.regions[i].id;
                    let region = self.adopt_region(cluster, &owner, &table.desc, i)?;
                    let position = region.manifest().positions.get(&key).copied();
                    from = Some(match from {
                        None => position,
                        Some(f) => f.zip(position).map(|(a, b)| a.min(b)),
                    });
                    let region = Arc::new(region);
                    opened.push(region.clone());
                    regions[i] = RegionHandle::Local(region);
                    held.regions.push((table_name.clone(), id));
                }
                self.tables.write().insert(
                    table_name.clone(),
                    Arc::new(Table::new(table.desc.clone(), regions)),
                );
            }
            Ok(())
        })();
        let regions = held.regions.len();
        cluster.held.lock().insert(key.clone(), held);
        if let Err(e) = outcome {
            // What was opened goes again; the lease stays this node's
            // until another takes it.
            self.release_locked(cluster, &key);
            return Err(e);
        }
        let start = ShardStart {
            epoch: owner.epoch(),
            from: from.flatten(),
            regions,
        };
        tracing::info!(
            topic = stream,
            partition = shard,
            epoch = start.epoch,
            regions,
            from = ?start.from,
            took_s = started.elapsed().as_secs_f64(),
            "took the partition's regions"
        );
        metrics::counter!("halite_cluster_shards_taken_total").increment(1);
        metrics::gauge!(
            "halite_cluster_partition_epoch",
            "topic" => stream.to_string(),
            "partition" => shard.to_string()
        )
        .set(start.epoch as f64);
        metrics::gauge!("halite_cluster_partitions_held").set(cluster.held.lock().len() as f64);
        metrics::histogram!("halite_cluster_take_seconds").record(started.elapsed().as_secs_f64());
        drop(opened);
        Ok(start)
    }

    /// Region `i` of `desc`, adopted from the object store under
    /// `owner`'s epoch and opened here.
    fn adopt_region(
        &self,
        cluster: &Cluster,
        owner: &Arc<OwnedShard>,
        desc: &TableDescriptor,
        i: usize,
    ) -> Result<crate::region::Region> {
        let id = desc.regions[i].id;
        let shared = Arc::new(SharedFiles::new(
            cluster.storage.objects.clone(),
            owner.clone(),
            id,
        ));
        RecoveringRegion::adopt(
            region_dir(&self.dir, id),
            descriptor_of(desc, i),
            self.options.region.clone(),
            self.cache.clone(),
            shared,
        )?
        .open(
            self.shard_of(id).wal.clone(),
            self.clock.clone(),
            Some(self.maintenance.clone()),
        )
    }

    /// A table new here, or whose layout changed in the shared catalog
    /// (a salt epoch added regions for new buckets): the regions it had
    /// keep their handles; a new one is adopted by the shard held here
    /// that carries its bucket (and starts at the position the shard has
    /// published: no message before it was salted into it, or written
    /// before the table was made), or read as another node's. Called
    /// under the DDL lock.
    pub(super) fn relayout_table(&self, cluster: &Cluster, desc: TableDescriptor) -> Result<()> {
        let old = self.table(&desc.name).ok();
        let mut regions = Vec::with_capacity(desc.regions.len());
        let mut joined: Vec<(SourceShard, u64)> = Vec::new();
        for (i, info) in desc.regions.iter().enumerate() {
            if let Some(h) = old
                .as_ref()
                .and_then(|old| old.regions.iter().find(|h| h.id() == info.id))
            {
                regions.push(h.clone());
                continue;
            }
            let bucket = desc.key.salt_bucket(&info.start).unwrap_or(0);
            let holder = cluster
                .held
                .lock()
                .iter()
                .find(|(key, h)| {
                    h.feeds.feeds(&desc)
                        && !h.owner.is_fenced()
                        && partition_of_bucket(bucket, h.partitions) == key.1
                })
                .map(|(key, h)| (key.clone(), h.owner.clone()));
            let Some((key, owner)) = holder else {
                regions.push(cluster.remote(&desc, i, &self.cache, &self.clock));
                continue;
            };
            let region = self.adopt_region(cluster, &owner, &desc, i)?;
            // It starts where its shard's published files do (no message
            // before was salted into it), published before it serves, so
            // the shard's commits and a next owner's start never wait on
            // it. A failure leaves everything as it was: the next refresh
            // tries again.
            if let Some(durable_below) = self.published_position(&key.0, key.1) {
                let origin = crate::region::wal::record::SourcePosition {
                    stream: key.0.clone(),
                    shard: key.1,
                    durable_below,
                };
                region
                    .submit_batch(
                        &crate::cell::EntryBatch::new(),
                        desc.durability,
                        Some(&origin),
                    )?
                    .wait()?;
                region.flush()?;
            }
            tracing::info!(
                table = %desc.name,
                region = info.id,
                bucket,
                topic = %key.0,
                partition = key.1,
                "took a new bucket's region with its partition"
            );
            joined.push((key, info.id));
            regions.push(RegionHandle::Local(Arc::new(region)));
        }
        let name = desc.name.clone();
        self.tables
            .write()
            .insert(name.clone(), Arc::new(Table::new(desc, regions)));
        // After the table, never with its lock held: readers take the
        // tables' lock first, then the shards'.
        let mut held = cluster.held.lock();
        for (key, id) in joined {
            if let Some(h) = held.get_mut(&key)
                && !h.regions.iter().any(|(_, r)| *r == id)
            {
                h.regions.push((name.clone(), id));
            }
        }
        Ok(())
    }

    /// [`Store::add_salt_epoch`] in cluster mode (under the DDL lock, the
    /// request checked): every node learns the new count from the shared
    /// catalog within [`CATALOG_REFRESH`], so the epoch must start
    /// [`EPOCH_LEAD_REFRESHES`] refreshes ahead of the clock; points this
    /// node holds at or after it refuse the change (the API asks every
    /// node's, through a query, first). The new buckets' regions join the
    /// partitions that carry them, here and on every node that refreshes.
    pub(super) fn add_cluster_salt_epoch(
        &self,
        cluster: &Cluster,
        table: &Table,
        from: u64,
        from_ms: u64,
        buckets: u32,
    ) -> Result<TableDescriptor> {
        let lead_ms = CATALOG_REFRESH.as_millis() as u64 * EPOCH_LEAD_REFRESHES;
        let earliest_ms = self.clock.now_ms() + lead_ms;
        if from_ms < earliest_ms {
            return Err(Error::InvalidInput(format!(
                "in cluster mode a salt epoch starts at least {} s ahead of the clock (every \
                 node must have the new count before its first point): start it at or after \
                 {earliest_ms} ms, asked {from_ms} ms",
                lead_ms / 1000
            )));
        }
        for r in table.regions().iter().filter_map(RegionHandle::local) {
            let newest = r.newest_cell_ms();
            if newest >= from_ms {
                return Err(Error::InvalidInput(format!(
                    "table `{}` already holds a point stamped {newest} ms, at or after the new \
                     epoch's start ({from_ms} ms); start the epoch after the newest point",
                    table.desc.name
                )));
            }
        }
        let (desc, _) = self
            .catalog
            .add_salt_epoch(&table.desc.name, from, buckets, |_, _| Ok(()))?;
        // The epoch is in the catalog now: laying the table out here is
        // what every refresh does, and the next one tries again.
        if let Err(e) = self.relayout_table(cluster, desc.clone()) {
            tracing::warn!(table = %desc.name, error = %e, "laying the table out again failed; the next refresh tries again");
        }
        tracing::info!(table = %desc.name, from, buckets, regions = desc.regions.len(), "salt epoch added");
        Ok(desc)
    }

    /// Lets partition `shard` of `stream` go (revoked): its regions close
    /// without a flush, and are read from the object store from now on.
    pub fn release_shard(&self, stream: &str, shard: u32) {
        let Some(cluster) = &self.cluster else {
            return;
        };
        let key = (stream.to_string(), shard);
        // Revoked long after another node took it (this one was paused
        // past its session): that is a fence, with its clean-up.
        let owner = cluster.held.lock().get(&key).map(|h| h.owner.clone());
        if let Some(owner) = owner {
            if let Err(e) = owner.with_owner(|o| o.check_lease()) {
                tracing::debug!(topic = stream, partition = shard, error = %e, "the lease at release");
            }
            if owner.is_fenced() {
                self.release_fenced();
                return;
            }
        }
        let _ddl = self.ddl.lock();
        self.release_locked(cluster, &key);
    }

    fn release_locked(&self, cluster: &Cluster, key: &SourceShard) {
        let Some(held) = cluster.held.lock().remove(key) else {
            return;
        };
        let mut by_table: BTreeMap<&TableName, Vec<u64>> = BTreeMap::new();
        for (t, id) in &held.regions {
            by_table.entry(t).or_default().push(*id);
        }
        for (name, ids) in by_table {
            let Ok(table) = self.table(name) else {
                continue;
            };
            let mut regions = table.regions.clone();
            for (i, handle) in table.regions.iter().enumerate() {
                if !ids.contains(&handle.id()) {
                    continue;
                }
                if let Some(r) = handle.local() {
                    r.close_without_flush();
                }
                regions[i] = cluster.remote(&table.desc, i, &self.cache, &self.clock);
                let dir = region_dir(&self.dir, handle.id());
                if let Err(e) = crate::fsutil::remove_dir_all(&dir) {
                    tracing::debug!(dir = %dir.display(), error = %e, "removing a released region's cache failed");
                }
            }
            self.tables.write().insert(
                name.clone(),
                Arc::new(Table::new(table.desc.clone(), regions)),
            );
        }
        tracing::info!(
            topic = %key.0,
            partition = key.1,
            epoch = held.owner.epoch(),
            regions = held.regions.len(),
            fenced = held.owner.is_fenced(),
            "released the partition's regions"
        );
        metrics::counter!("halite_cluster_shards_released_total").increment(1);
        metrics::gauge!(
            "halite_cluster_partition_epoch",
            "topic" => key.0.clone(),
            "partition" => key.1.to_string()
        )
        .set(0.0);
        metrics::gauge!("halite_cluster_partitions_held").set(cluster.held.lock().len() as f64);
    }

    /// Releases every shard whose owner was fenced (another node took it
    /// while this one still wrote) and deletes what this owner wrote under
    /// its epoch that no current manifest names. Returns the shards.
    pub fn release_fenced(&self) -> Vec<SourceShard> {
        let Some(cluster) = &self.cluster else {
            return Vec::new();
        };
        let fenced: Vec<(SourceShard, Arc<OwnedShard>, Vec<String>)> = {
            let tables = self.tables.read();
            cluster
                .held
                .lock()
                .iter()
                .filter(|(_, h)| h.owner.is_fenced())
                .map(|(k, h)| {
                    let uploaded = h
                        .regions
                        .iter()
                        .filter_map(|(t, id)| {
                            tables
                                .get(t)?
                                .regions
                                .iter()
                                .find(|r| r.id() == *id)?
                                .local()?
                                .shared_files()
                                .map(|s| s.uploaded())
                        })
                        .flatten()
                        .collect();
                    (k.clone(), h.owner.clone(), uploaded)
                })
                .collect()
        };
        for (key, owner, uploaded) in &fenced {
            tracing::warn!(
                topic = %key.0,
                partition = key.1,
                epoch = owner.epoch(),
                error = %owner.fence_error(),
                "fenced: another node owns the partition now; this node stopped writing it \
                 and drops its MemStores"
            );
            metrics::counter!("halite_cluster_fenced_total").increment(1);
            {
                let _ddl = self.ddl.lock();
                self.release_locked(cluster, key);
            }
            match owner.with_owner(|o| o.clean_up(uploaded, names_in_manifest)) {
                Ok(deleted) => tracing::info!(
                    topic = %key.0,
                    partition = key.1,
                    deleted,
                    "deleted what the fenced owner wrote that no manifest names"
                ),
                Err(e) => tracing::warn!(
                    topic = %key.0,
                    partition = key.1,
                    error = %e,
                    "cleaning up after the fence failed; the next owner's sweep deletes the rest"
                ),
            }
        }
        fenced.into_iter().map(|(k, _, _)| k).collect()
    }

    /// The shards this node owns.
    pub fn held_shards(&self) -> Vec<HeldShardInfo> {
        let Some(cluster) = &self.cluster else {
            return Vec::new();
        };
        let held: Vec<(SourceShard, u64, bool, Vec<u64>, f64)> = cluster
            .held
            .lock()
            .iter()
            .map(|(k, h)| {
                (
                    k.clone(),
                    h.owner.epoch(),
                    h.owner.is_fenced(),
                    h.regions.iter().map(|(_, id)| *id).collect(),
                    h.since.elapsed().as_secs_f64(),
                )
            })
            .collect();
        held.into_iter()
            .map(|(k, epoch, fenced, regions, held_s)| HeldShardInfo {
                published_below: self.published_position(&k.0, k.1),
                topic: k.0,
                partition: k.1,
                epoch,
                regions,
                fenced,
                held_s,
            })
            .collect()
    }

    /// The region `id` when it is open here (owned, in cluster mode).
    pub fn local_region(&self, id: u64) -> Option<Arc<crate::region::Region>> {
        self.tables.read().values().find_map(|t| {
            t.regions
                .iter()
                .find(|r| r.id() == id)
                .and_then(|r| r.local().cloned())
        })
    }

    /// The local regions of a shard this node owns.
    fn held_regions(&self, key: &SourceShard) -> Vec<Arc<crate::region::Region>> {
        let Some(cluster) = &self.cluster else {
            return Vec::new();
        };
        let ids: Vec<(TableName, u64)> = match cluster.held.lock().get(key) {
            Some(h) => h.regions.clone(),
            None => return Vec::new(),
        };
        let tables = self.tables.read();
        ids.iter()
            .filter_map(|(t, id)| {
                tables
                    .get(t)?
                    .regions
                    .iter()
                    .find(|r| r.id() == *id)?
                    .local()
                    .cloned()
            })
            .collect()
    }

    /// Below which position every message of partition `shard` of
    /// `stream` is in the published files of all its regions here; `None`
    /// when this node does not own it or a region has published none.
    pub fn published_position(&self, stream: &str, shard: u32) -> Option<u64> {
        let key = (stream.to_string(), shard);
        let regions = self.held_regions(&key);
        if regions.is_empty() {
            return None;
        }
        regions
            .iter()
            .map(|r| r.manifest().positions.get(&key).copied())
            .try_fold(u64::MAX, |lowest, p| p.map(|p| lowest.min(p)))
    }

    /// In cluster mode, the regions of the owned shard `(stream, shard)`
    /// that a position-only record should reach (every one of them).
    pub(super) fn regions_for_position(
        &self,
        stream: &str,
        shard: u32,
    ) -> Vec<Arc<crate::region::Region>> {
        self.held_regions(&(stream.to_string(), shard))
    }

    /// Takes out of `rows` the rows of regions partition `shard` of
    /// `stream` does not carry, and returns them (`None`: this node does
    /// not own the partition, now). A producer that sent a point to
    /// another partition than its bucket's made those: the ingest sends
    /// them on to their bucket's partition.
    pub fn split_off_foreign_rows(
        &self,
        rows: &mut RoutedRows,
        stream: &str,
        shard: u32,
    ) -> Option<RoutedRows> {
        let cluster = self.cluster.as_ref()?;
        let key = (stream.to_string(), shard);
        let ours: Vec<u64> = match cluster.held.lock().get(&key) {
            Some(h) if !h.owner.is_fenced() => h.regions.iter().map(|(_, id)| *id).collect(),
            _ => return None,
        };
        let mut foreign = RoutedRows {
            region_ids: rows.region_ids.clone(),
            batches: vec![crate::cell::EntryBatch::new(); rows.batches.len()],
            salt_generation: rows.salt_generation,
        };
        for ((id, batch), out) in rows
            .region_ids
            .iter()
            .zip(rows.batches.iter_mut())
            .zip(foreign.batches.iter_mut())
        {
            if !batch.is_empty() && !ours.contains(id) {
                *out = std::mem::take(batch);
            }
        }
        Some(foreign)
    }

    /// Who holds each shard's lease on the object store, by shard name
    /// (`topic/partition`): the owner and epoch.
    pub fn leases(&self) -> Result<Vec<(String, ownership::Lease)>> {
        let Some(cluster) = &self.cluster else {
            return Ok(Vec::new());
        };
        let objects = &cluster.storage.objects;
        let mut out = Vec::new();
        for (name, _) in objects.list("leases")? {
            let Some(shard) = name.strip_prefix("leases/") else {
                continue;
            };
            if let Some(lease) = ownership::read_lease(objects, shard)? {
                out.push((shard.to_string(), lease));
            }
        }
        Ok(out)
    }
}
