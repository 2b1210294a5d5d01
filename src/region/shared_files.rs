//! A region whose store files and manifest live on the object store, so
//! that they outlive this node: the owner of the region's source shard (a
//! Kafka partition) uploads each file a flush or a compaction writes, then
//! publishes the manifest naming it, conditionally at its epoch
//! ([`crate::ownership`]). The region's local directory is a cache of
//! those files; the object store's manifest is the region's truth.
//!
//! File ids carry the epoch of the owner that wrote them in their upper
//! 32 bits (`epoch << 32 | n`): a new owner goes on from its own epoch's
//! first id, so two owners never give one id to two files, and a file's
//! object name (`regions/<region>/<family>/<epoch>-<id>.sst`, see
//! [`crate::ownership::file_name`]) follows from the id a manifest names.
//!
//! Objects a compaction replaced stay for a grace period before they are
//! deleted, so a node reading the region through the previous manifest
//! finds them; a new owner deletes what older epochs left unnamed when it
//! adopts the region.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

use super::manifest::{Manifest, ManifestError};
use crate::error::{Error, Result};
use crate::objects::{ObjectError, Objects};
use crate::ownership::{self, OwnershipError, ShardOwner};

/// How long an object a compaction replaced is kept for readers of the
/// previous manifest.
pub const RETIRE_GRACE: Duration = Duration::from_secs(60);

/// The first file id an owner at `epoch` gives.
pub fn first_file_id(epoch: u64) -> u64 {
    (epoch << 32) | 1
}

/// The epoch of the owner that wrote file `file_id`.
pub fn epoch_of_file_id(file_id: u64) -> u64 {
    file_id >> 32
}

/// The object name of a region's store file.
pub fn object_name(region: u64, family: &[u8], file_id: u64) -> String {
    ownership::file_name(
        region,
        &String::from_utf8_lossy(family),
        epoch_of_file_id(file_id),
        file_id,
    )
}

/// Every object name a manifest body names (for the fence's clean-up);
/// `None` when the body cannot be read (it may name anything). An empty
/// body (adopted, never published) names nothing.
pub fn names_in_manifest(region: u64, body: &Bytes) -> Option<Vec<String>> {
    if body.is_empty() {
        return Some(Vec::new());
    }
    let m = Manifest::decode(body).ok()?;
    Some(
        m.families
            .iter()
            .flat_map(|(family, ids)| ids.iter().map(|id| object_name(region, family, *id)))
            .collect(),
    )
}

/// A source shard's owner as the shard's regions share it: every
/// manifest write goes through it, and a fence one region meets stops
/// them all at their next write.
#[derive(Debug)]
pub struct OwnedShard {
    owner: Mutex<ShardOwner>,
    epoch: u64,
    /// Set with the first fence; read on every write without the lock
    /// (which a publish holds for a request's time).
    fenced: AtomicBool,
}

impl OwnedShard {
    pub fn new(owner: ShardOwner) -> OwnedShard {
        OwnedShard {
            epoch: owner.epoch(),
            fenced: AtomicBool::new(owner.is_fenced()),
            owner: Mutex::new(owner),
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// The error a write of a fenced shard gets.
    pub fn fence_error(&self) -> Error {
        Error::Ownership(self.owner.lock().fence_error())
    }

    /// Runs `f` on the owner; a fence it meets is remembered.
    pub fn with_owner<T>(
        &self,
        f: impl FnOnce(&mut ShardOwner) -> std::result::Result<T, OwnershipError>,
    ) -> Result<T> {
        let mut owner = self.owner.lock();
        let outcome = f(&mut owner);
        if owner.is_fenced() {
            self.fenced.store(true, Ordering::Release);
        }
        Ok(outcome?)
    }
}

/// One region's way to the object store, through its shard's owner.
pub struct SharedFiles {
    objects: Arc<Objects>,
    owner: Arc<OwnedShard>,
    region: u64,
    epoch: u64,
    /// Objects this owner uploaded (the fence's clean-up deletes those no
    /// current manifest names).
    uploaded: Mutex<Vec<String>>,
    /// Objects replaced by a compaction, and since when.
    retired: Mutex<Vec<(Instant, String)>>,
    retire_grace: Duration,
    /// When this owner last published the region's manifest (or adopted
    /// it).
    published_at: Mutex<Instant>,
}

impl std::fmt::Debug for SharedFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFiles")
            .field("region", &self.region)
            .field("epoch", &self.epoch)
            .field("store", &self.objects.describe())
            .finish()
    }
}

impl SharedFiles {
    pub fn new(objects: Arc<Objects>, owner: Arc<OwnedShard>, region: u64) -> Self {
        let epoch = owner.epoch();
        SharedFiles {
            objects,
            owner,
            region,
            epoch,
            uploaded: Mutex::new(Vec::new()),
            retired: Mutex::new(Vec::new()),
            retire_grace: RETIRE_GRACE,
            published_at: Mutex::new(Instant::now()),
        }
    }

    /// Deletes replaced objects after `grace` instead of [`RETIRE_GRACE`]
    /// (tests).
    pub fn with_retire_grace(mut self, grace: Duration) -> Self {
        self.retire_grace = grace;
        self
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn region(&self) -> u64 {
        self.region
    }

    /// The shard's owner these files are written through.
    pub fn owner(&self) -> &Arc<OwnedShard> {
        &self.owner
    }

    pub fn objects(&self) -> &Arc<Objects> {
        &self.objects
    }

    /// Objects this owner uploaded for the region.
    pub fn uploaded(&self) -> Vec<String> {
        self.uploaded.lock().clone()
    }

    /// Stamps the region's manifest with this owner's epoch and returns
    /// what it holds (`None`: a new region). Objects of older epochs that
    /// it does not name are deleted: no older owner can publish them any
    /// more (its conditional write would lose to this one), so they are
    /// leftovers of crashes, fences and compactions.
    pub(crate) fn adopt(&self) -> Result<Option<Manifest>> {
        let body = self.owner.with_owner(|o| o.adopt(self.region))?;
        let manifest = match body {
            Some(body) => Some(Manifest::decode(&body).map_err(|e| {
                Error::Manifest(ManifestError::Corrupt {
                    path: PathBuf::from(ownership::manifest_name(self.region)),
                    offset: e.offset as u64,
                    what: e.what,
                })
            })?),
            None => None,
        };
        let named: BTreeSet<String> = manifest
            .iter()
            .flat_map(|m| {
                m.families
                    .iter()
                    .flat_map(|(f, ids)| ids.iter().map(|id| object_name(self.region, f, *id)))
            })
            .collect();
        let dir = format!("regions/{}", self.region);
        let mut swept = 0;
        for (name, _) in self.objects.list(&dir)? {
            let older = ownership::epoch_of_file(&name).is_some_and(|e| e < self.epoch);
            if name.ends_with(".sst") && older && !named.contains(&name) {
                self.objects.delete(&name)?;
                swept += 1;
            }
        }
        if swept > 0 {
            tracing::info!(
                region = self.region,
                epoch = self.epoch,
                swept,
                "deleted store files earlier owners left unnamed"
            );
        }
        Ok(manifest)
    }

    /// Makes sure the cache holds file `file_id` of `family` at `path`,
    /// downloading it when it does not. Returns whether it downloaded.
    pub(crate) fn fetch(&self, family: &[u8], file_id: u64, path: &Path) -> Result<bool> {
        if path.exists() {
            return Ok(false);
        }
        fetch_object(
            &self.objects,
            &object_name(self.region, family, file_id),
            path,
        )?;
        Ok(true)
    }

    /// Uploads a finished store file under its object name.
    pub(crate) fn upload(&self, family: &[u8], file_id: u64, path: &Path) -> Result<()> {
        let name = object_name(self.region, family, file_id);
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read store file", e))?;
        let size = bytes.len() as u64;
        self.uploaded.lock().push(name.clone());
        let started = Instant::now();
        match self.objects.create(&name, Bytes::from(bytes)) {
            Ok(_) => {}
            // Only this owner writes names of its epoch: the object is an
            // earlier attempt of this very request that the client
            // retried after it had landed.
            Err(ObjectError::Lost { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        metrics::counter!("halite_object_store_uploaded_bytes_total").increment(size);
        metrics::histogram!("halite_object_store_upload_seconds")
            .record(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Publishes the region's manifest at this owner's epoch. A fence is
    /// [`Error::is_fenced`]: the shard belongs to another node now.
    pub(crate) fn publish(&self, manifest: &Manifest) -> Result<()> {
        let started = Instant::now();
        let body = Bytes::from(manifest.encode());
        self.owner.with_owner(|o| o.publish(self.region, body))?;
        *self.published_at.lock() = Instant::now();
        metrics::histogram!("halite_manifest_publish_seconds")
            .record(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// How long since this owner last published the manifest.
    pub fn since_published(&self) -> Duration {
        self.published_at.lock().elapsed()
    }

    /// Queues the objects of files a compaction replaced for deletion
    /// once the grace period is over.
    pub(crate) fn retire(&self, family: &[u8], file_ids: &[u64]) {
        let now = Instant::now();
        let mut retired = self.retired.lock();
        for id in file_ids {
            retired.push((now, object_name(self.region, family, *id)));
        }
    }

    /// Deletes the retired objects whose grace period is over; a failure
    /// leaves them for the next call (or the next owner's sweep).
    pub(crate) fn delete_retired(&self) {
        let due: Vec<String> = {
            let mut retired = self.retired.lock();
            let grace = self.retire_grace;
            let (due, kept): (Vec<_>, Vec<_>) = retired
                .drain(..)
                .partition(|(since, _)| since.elapsed() >= grace);
            *retired = kept;
            due.into_iter().map(|(_, name)| name).collect()
        };
        for (i, name) in due.iter().enumerate() {
            if let Err(e) = self.objects.delete(name) {
                tracing::warn!(region = self.region, object = %name, error = %e, "deleting a replaced store file failed; trying again later");
                let now = Instant::now();
                self.retired
                    .lock()
                    .extend(due[i..].iter().map(|n| (now, n.clone())));
                return;
            }
            self.uploaded.lock().retain(|n| n != name);
        }
    }
}

/// Downloads object `name` into the file `path` (written under a
/// temporary name, synced and renamed, so a crash never leaves half a
/// file under the name).
pub fn fetch_object(objects: &Objects, name: &str, path: &Path) -> Result<()> {
    let started = Instant::now();
    let Some((bytes, _)) = objects.get(name)? else {
        return Err(Error::Manifest(ManifestError::Corrupt {
            path: PathBuf::from(name),
            offset: 0,
            what: "a manifest names a store file the object store does not hold",
        }));
    };
    let dir = path
        .parent()
        .ok_or_else(|| Error::InvalidInput(format!("no directory in {}", path.display())))?;
    crate::fsutil::create_dir_all(dir).map_err(|e| Error::io(dir, "create cache directory", e))?;
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::fsutil::replace_atomically(dir, &file, &bytes)
        .map_err(|e| Error::io(path, "write downloaded store file", e))?;
    metrics::counter!("halite_object_store_downloaded_bytes_total").increment(bytes.len() as u64);
    metrics::histogram!("halite_object_store_download_seconds")
        .record(started.elapsed().as_secs_f64());
    Ok(())
}
