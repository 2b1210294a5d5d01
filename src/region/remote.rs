//! A region another node owns (cluster mode). A read asks the owner (named
//! by the region's manifest; its address from [`Nodes`]) for the region's
//! tail: the store files it reads now and its MemStores' edits in the
//! read's rows ([`super::tail`]). The files come from the object store
//! through this node's file cache, and the edits and files merge as a read
//! on the owner would. When the owner does not answer (it died, or the
//! partition is moving), the read takes the files the published manifest
//! names and reports the region as read partially ([`ReadReport`]): the
//! edits not yet flushed are missing.
//!
//! Files stay open between reads while they are named.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

use super::RegionDescriptor;
use super::file_cache::FileCache;
use super::inner::{RegionStats, add_file_sources};
use super::manifest::{Manifest, ManifestError};
use super::memstore::MemStore;
use super::memstore::cursor::MemCursor;
use super::read::merge::{Merge, Source};
use super::read::{Get, RowScanner, Scan};
use super::shared_files::object_name;
use super::sst::SstReader;
use super::sst::cache::BlockCache;
use super::tail::decode_tail;
use crate::cell::Row;
use crate::client::{ClientError, HttpClient, Response, Tls};
use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::objects::Objects;
use crate::ownership::read_manifest;
use crate::schema::FamilyDescriptor;

/// How often a read takes the manifest again when a file it names was
/// replaced before it could be fetched.
const ATTEMPTS: usize = 4;

/// How long a read waits for an owner's tail before it reads without it.
const TAIL_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a region's owner, as its manifest named it, is asked before
/// the manifest is read again.
const OWNER_TTL: Duration = Duration::from_secs(5);

/// How long a node's address is trusted before it is read again.
const ADDRESS_TTL: Duration = Duration::from_secs(10);

/// The object naming where node `node` listens.
pub fn node_object(node: &str) -> String {
    format!("nodes/{node}")
}

/// Where each node of a cluster listens: `nodes/<name>` on the object
/// store holds its address, written by the node at start.
pub struct Nodes {
    objects: Arc<Objects>,
    known: Mutex<HashMap<String, (String, Instant)>>,
    /// Kept-alive connections to the nodes, for the tails reads ask for:
    /// a connect and an accept per request cost as much as the answer of
    /// a small read.
    connections: HttpClient,
}

impl Nodes {
    /// `token`: what this node presents to the others (their API may
    /// check tokens); `tls`: the certificates it trusts when they serve
    /// HTTPS (their addresses then say `https://`).
    pub fn new(objects: Arc<Objects>, token: Option<String>, tls: &Tls) -> Result<Nodes> {
        let connections = HttpClient::new(tls, token, true)
            .map_err(|e| crate::error::Error::InvalidInput(e.to_string()))?;
        Ok(Nodes {
            objects,
            known: Mutex::new(HashMap::new()),
            connections,
        })
    }

    /// `GET path` on the node at `address`. A kept connection the node
    /// closed meanwhile fails at once, so a failure is tried once more
    /// (a GET changes nothing); a node too slow to answer is not asked
    /// twice.
    fn get(
        &self,
        address: &str,
        path: &str,
        within: Duration,
    ) -> std::result::Result<Response, ClientError> {
        match self
            .connections
            .request(address, "GET", path, &[], b"", within)
        {
            Err(ClientError::Unreachable { .. }) => {
                self.connections
                    .request(address, "GET", path, &[], b"", within)
            }
            answered => answered,
        }
    }

    /// Says where `node` listens (`host:port`).
    pub fn register(&self, node: &str, address: &str) -> Result<()> {
        self.objects
            .put(&node_object(node), Bytes::from(address.to_string()))?;
        Ok(())
    }

    /// Where `node` listens, as it last said.
    pub fn address_of(&self, node: &str) -> Result<Option<String>> {
        if let Some((address, since)) = self.known.lock().get(node)
            && since.elapsed() < ADDRESS_TTL
        {
            return Ok(Some(address.clone()));
        }
        let Some((bytes, _)) = self.objects.get(&node_object(node))? else {
            return Ok(None);
        };
        let address = String::from_utf8_lossy(&bytes).into_owned();
        self.known
            .lock()
            .insert(node.to_string(), (address.clone(), Instant::now()));
        Ok(Some(address))
    }

    /// Forgets a node's address after it did not answer (it may have
    /// restarted elsewhere).
    pub fn forget(&self, node: &str) {
        self.known.lock().remove(node);
    }
}

/// The regions a read could not reach completely: their owner did not
/// answer, so their MemStores' edits are missing from the answer.
#[derive(Debug, Default)]
pub struct ReadReport {
    missing: Mutex<BTreeSet<u64>>,
}

impl ReadReport {
    pub fn note(&self, region: u64) {
        self.missing.lock().insert(region);
    }

    /// The regions read partially, by id.
    pub fn missing(&self) -> Vec<u64> {
        self.missing.lock().iter().copied().collect()
    }
}

/// Open store files per family, oldest first, as reads merge them.
type FamilyFiles = BTreeMap<Vec<u8>, Vec<Arc<SstReader>>>;

/// A store file by family and id.
type FileKey = (Vec<u8>, u64);

/// A region's manifest as published.
#[derive(Clone)]
struct Published {
    /// When it was read.
    read_at: Instant,
    /// The manifest's bytes as read (unchanged bytes: the same files).
    body: Bytes,
    epoch: u64,
    owner: String,
    manifest: Manifest,
}

/// A region read from its owner and the object store.
pub struct RemoteRegion {
    descriptor: RegionDescriptor,
    families: Arc<HashMap<Vec<u8>, FamilyDescriptor>>,
    objects: Arc<Objects>,
    files: Arc<FileCache>,
    nodes: Arc<Nodes>,
    cache: Arc<BlockCache>,
    clock: Arc<dyn Clock>,
    /// The manifest last read.
    current: Mutex<Option<Arc<Published>>>,
    /// Store files open, by family and id (kept while they are named).
    open: Mutex<HashMap<FileKey, Arc<SstReader>>>,
    stats: RegionStats,
}

impl std::fmt::Debug for RemoteRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRegion")
            .field("id", &self.descriptor.id)
            .finish()
    }
}

impl RemoteRegion {
    pub fn new(
        descriptor: RegionDescriptor,
        objects: Arc<Objects>,
        files: Arc<FileCache>,
        nodes: Arc<Nodes>,
        cache: Arc<BlockCache>,
        clock: Arc<dyn Clock>,
    ) -> RemoteRegion {
        let families = descriptor
            .families
            .iter()
            .map(|f| (f.name.clone(), f.clone()))
            .collect();
        RemoteRegion {
            descriptor,
            families: Arc::new(families),
            objects,
            files,
            nodes,
            cache,
            clock,
            current: Mutex::new(None),
            open: Mutex::new(HashMap::new()),
            stats: RegionStats::default(),
        }
    }

    pub fn id(&self) -> u64 {
        self.descriptor.id
    }

    pub fn row_range(&self) -> (&[u8], &[u8]) {
        (&self.descriptor.start, &self.descriptor.end)
    }

    pub fn stats(&self) -> &RegionStats {
        &self.stats
    }

    /// The owner and epoch of the manifest last read.
    pub fn published_by(&self) -> Option<(String, u64)> {
        self.current
            .lock()
            .as_ref()
            .map(|p| (p.owner.clone(), p.epoch))
    }

    /// Store files per family, as the manifest last read names them.
    pub fn file_counts(&self) -> BTreeMap<Vec<u8>, usize> {
        self.current
            .lock()
            .as_ref()
            .map_or_else(BTreeMap::new, |p| {
                p.manifest
                    .families
                    .iter()
                    .map(|(f, v)| (f.clone(), v.len()))
                    .collect()
            })
    }

    /// Bytes of the store files open for reads.
    pub fn store_bytes(&self) -> u64 {
        self.open.lock().values().map(|r| r.size()).sum()
    }

    /// The manifest as published now, or (`fresh` false) as read less
    /// than [`OWNER_TTL`] ago: a read that reaches the owner takes the
    /// files from its answer and needs the manifest only to find it.
    fn published(&self, fresh: bool) -> Result<Arc<Published>> {
        if !fresh
            && let Some(p) = self.current.lock().as_ref()
            && p.read_at.elapsed() < OWNER_TTL
        {
            return Ok(p.clone());
        }
        let Some(stamped) = read_manifest(&self.objects, self.id())? else {
            // Never published: no rows yet.
            return Ok(Arc::new(Published {
                read_at: Instant::now(),
                body: Bytes::new(),
                epoch: 0,
                owner: String::new(),
                manifest: Manifest::default(),
            }));
        };
        if let Some(p) = self.current.lock().as_mut()
            && p.body == stamped.body
            && p.epoch == stamped.epoch
            && p.owner == stamped.owner
        {
            let mut same = Published::clone(p);
            same.read_at = Instant::now();
            *p = Arc::new(same);
            return Ok(p.clone());
        }
        // Adopted and not yet published: an empty body, no files.
        let manifest = if stamped.body.is_empty() {
            Manifest::default()
        } else {
            Manifest::decode(&stamped.body).map_err(|e| {
                Error::Manifest(ManifestError::Corrupt {
                    path: crate::ownership::manifest_name(self.id()).into(),
                    offset: e.offset as u64,
                    what: e.what,
                })
            })?
        };
        let p = Arc::new(Published {
            read_at: Instant::now(),
            body: stamped.body,
            epoch: stamped.epoch,
            owner: stamped.owner,
            manifest,
        });
        *self.current.lock() = Some(p.clone());
        Ok(p)
    }

    /// The open files of `files` (ids per family), opening those not open
    /// yet; files no longer named are let go.
    fn readers(&self, files: &BTreeMap<Vec<u8>, Vec<u64>>) -> Result<FamilyFiles> {
        let mut out = BTreeMap::new();
        let mut named = BTreeSet::new();
        for family in &self.descriptor.families {
            let ids = files.get(&family.name).cloned().unwrap_or_default();
            let mut readers = Vec::with_capacity(ids.len());
            for id in ids {
                let key = (family.name.clone(), id);
                named.insert(key.clone());
                if let Some(r) = self.open.lock().get(&key) {
                    // Open already: a read the cache served.
                    metrics::counter!("halite_file_cache_hits_total").increment(1);
                    readers.push(r.clone());
                    continue;
                }
                let name = object_name(self.id(), &family.name, id);
                let reader = self.files.open_file(&self.objects, &name, |path| {
                    Ok(SstReader::open(
                        path,
                        id,
                        self.cache.clone(),
                        family.block_cache,
                        family.in_memory,
                    )?)
                })?;
                self.open.lock().insert(key, reader.clone());
                readers.push(reader);
            }
            out.insert(family.name.clone(), readers);
        }
        self.open.lock().retain(|k, _| named.contains(k));
        Ok(out)
    }

    /// The owner's tail of the rows `scan` reads: its files (opened) and
    /// its MemStores' edits; `None` when the owner cannot say.
    fn owner_tail(
        &self,
        published: &Published,
        scan: &Scan,
    ) -> Option<(FamilyFiles, Arc<MemStore>)> {
        if published.owner.is_empty() {
            return None;
        }
        let address = self.nodes.address_of(&published.owner).ok()??;
        let (start, stop) = scan.bounds().ok()?;
        let mut path = format!("/internal/v1/regions/{}/tail?", self.id());
        if let Some(s) = &start {
            path.push_str(&format!("start={}&", crate::codec::to_hex(s)));
        }
        if let Some(s) = &stop {
            path.push_str(&format!("stop={}", crate::codec::to_hex(s)));
        }
        let answer = self.nodes.get(&address, &path, TAIL_TIMEOUT);
        let answer = match answer {
            Ok(a) if a.status == 200 => a,
            Ok(a) => {
                tracing::debug!(region = self.id(), owner = %published.owner, status = a.status, "the owner did not give the region's tail");
                return None;
            }
            Err(e) => {
                tracing::debug!(region = self.id(), owner = %published.owner, error = %e, "the owner did not answer for the region's tail");
                self.nodes.forget(&published.owner);
                return None;
            }
        };
        let tail = decode_tail(&answer.body)
            .map_err(|e| tracing::warn!(region = self.id(), error = %e, "an owner sent an unreadable tail"))
            .ok()?;
        let files = self
            .readers(&tail.files)
            .map_err(|e| tracing::debug!(region = self.id(), error = %e, "opening the owner's files failed"))
            .ok()?;
        let memstore = Arc::new(MemStore::new());
        memstore.insert_batch(&tail.rows, 1, self.clock.now_ms());
        Some((files, memstore))
    }

    fn scanner_for(
        &self,
        scan: &Scan,
        get: Option<&Get>,
        report: Option<&ReadReport>,
    ) -> Result<RowScanner> {
        let mut last_error = None;
        for attempt in 0..ATTEMPTS {
            // The owner as last read first; when it does not answer, the
            // manifest read again may name another.
            let mut published = self.published(attempt > 0)?;
            let mut tail = self.owner_tail(&published, scan);
            if tail.is_none() && attempt == 0 {
                published = self.published(true)?;
                tail = self.owner_tail(&published, scan);
            }
            let mut sources = Vec::new();
            let files = match tail {
                Some((files, memstore)) => {
                    sources.push(Source::Mem(MemCursor::new(memstore, u64::MAX)));
                    files
                }
                None => {
                    if let Some(r) = report {
                        r.note(self.id());
                    }
                    match self.readers(&published.manifest.families) {
                        Ok(files) => files,
                        // A compaction replaced a file since the manifest
                        // was read: the next manifest names its output.
                        Err(e) if e.kind() == ErrorKind::NotFound => {
                            last_error = Some(e);
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            add_file_sources(&files, scan, get, &self.stats, &mut sources)?;
            return RowScanner::new(
                Merge::new(sources),
                self.families.clone(),
                self.clock.now_ms(),
                scan,
            );
        }
        Err(last_error.unwrap_or(Error::Closed))
    }

    /// A scanner over the region's rows; `report` hears of a read without
    /// the owner's MemStore edits.
    pub fn scanner(&self, scan: &Scan, report: Option<&ReadReport>) -> Result<RowScanner> {
        self.scanner_for(scan, None, report)
    }

    pub fn get(&self, get: &Get, report: Option<&ReadReport>) -> Result<Option<Row>> {
        self.scanner_for(&get.to_scan(), Some(get), report)?
            .next_row()
    }
}
