//! A region another node owns (cluster mode), read from the object store:
//! its published manifest names its store files, which this node reads
//! through its file cache. What the owner holds only in its MemStores is
//! not here: the owner's flushes publish it.
//!
//! Each read takes the manifest afresh (one small GET) and keeps the files
//! it opened while the manifest stays the same, so a query sees what the
//! owner last published.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::RegionDescriptor;
use super::file_cache::FileCache;
use super::inner::{RegionStats, add_file_sources};
use super::manifest::{Manifest, ManifestError};
use super::read::merge::Merge;
use super::read::{Get, RowScanner, Scan};
use super::shared_files::object_name;
use super::sst::SstReader;
use super::sst::cache::BlockCache;
use crate::cell::Row;
use crate::clock::Clock;
use crate::error::{Error, ErrorKind, Result};
use crate::objects::Objects;
use crate::ownership::read_manifest;
use crate::schema::FamilyDescriptor;

/// How often a read takes the manifest again when a file it names was
/// replaced before it could be fetched.
const ATTEMPTS: usize = 4;

/// What a published manifest holds, opened.
struct Published {
    /// The manifest's bytes as read (unchanged bytes: the same files).
    body: Bytes,
    epoch: u64,
    owner: String,
    manifest: Manifest,
    files: BTreeMap<Vec<u8>, Vec<Arc<SstReader>>>,
}

/// A region read from the object store.
pub struct RemoteRegion {
    descriptor: RegionDescriptor,
    families: Arc<HashMap<Vec<u8>, FamilyDescriptor>>,
    objects: Arc<Objects>,
    files: Arc<FileCache>,
    cache: Arc<BlockCache>,
    clock: Arc<dyn Clock>,
    current: Mutex<Option<Arc<Published>>>,
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
            cache,
            clock,
            current: Mutex::new(None),
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
                p.files.iter().map(|(f, v)| (f.clone(), v.len())).collect()
            })
    }

    /// Bytes of the store files the manifest last read names.
    pub fn store_bytes(&self) -> u64 {
        self.current
            .lock()
            .as_ref()
            .map_or(0, |p| p.files.values().flatten().map(|r| r.size()).sum())
    }

    /// The source positions the published manifest covers.
    pub fn published_positions(&self) -> Result<BTreeMap<(String, u32), u64>> {
        Ok(self.published()?.manifest.positions.clone())
    }

    /// The manifest as published now, with its files opened.
    fn published(&self) -> Result<Arc<Published>> {
        let mut last_error = None;
        for _ in 0..ATTEMPTS {
            let Some(stamped) = read_manifest(&self.objects, self.id())? else {
                // Never published: no rows yet.
                return Ok(Arc::new(Published {
                    body: Bytes::new(),
                    epoch: 0,
                    owner: String::new(),
                    manifest: Manifest::default(),
                    files: BTreeMap::new(),
                }));
            };
            if let Some(p) = self.current.lock().as_ref()
                && p.body == stamped.body
                && p.epoch == stamped.epoch
            {
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
            match self.open_files(&manifest) {
                Ok(files) => {
                    let p = Arc::new(Published {
                        body: stamped.body,
                        epoch: stamped.epoch,
                        owner: stamped.owner,
                        manifest,
                        files,
                    });
                    *self.current.lock() = Some(p.clone());
                    return Ok(p);
                }
                // A compaction replaced a file since the manifest was
                // read: the next manifest names its output.
                Err(e) if e.kind() == ErrorKind::NotFound => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or(Error::Closed))
    }

    fn open_files(&self, manifest: &Manifest) -> Result<BTreeMap<Vec<u8>, Vec<Arc<SstReader>>>> {
        let mut files = BTreeMap::new();
        for family in &self.descriptor.families {
            let ids = manifest
                .families
                .get(&family.name)
                .cloned()
                .unwrap_or_default();
            let mut readers = Vec::with_capacity(ids.len());
            for id in ids {
                let name = object_name(self.id(), &family.name, id);
                readers.push(self.files.open_file(&self.objects, &name, |path| {
                    Ok(SstReader::open(
                        path,
                        id,
                        self.cache.clone(),
                        family.block_cache,
                        family.in_memory,
                    )?)
                })?);
            }
            files.insert(family.name.clone(), readers);
        }
        Ok(files)
    }

    fn scanner_for(&self, scan: &Scan, get: Option<&Get>) -> Result<RowScanner> {
        let published = self.published()?;
        let mut sources = Vec::new();
        add_file_sources(&published.files, scan, get, &self.stats, &mut sources)?;
        RowScanner::new(
            Merge::new(sources),
            self.families.clone(),
            self.clock.now_ms(),
            scan,
        )
    }

    pub fn scanner(&self, scan: &Scan) -> Result<RowScanner> {
        self.scanner_for(scan, None)
    }

    pub fn get(&self, get: &Get) -> Result<Option<Row>> {
        self.scanner_for(&get.to_scan(), Some(get))?.next_row()
    }
}
