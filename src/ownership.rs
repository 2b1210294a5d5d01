//! Who owns a source shard's regions, proven on the object store: an
//! epoch lease per shard and epoch-stamped region manifests, both written
//! only conditionally (SlateDB's writer epochs, `rfcs/0001-manifest.md`).
//!
//! Kafka's group decides which node *should* own a partition (a source
//! shard); this module makes sure at most one node *does*:
//!
//! 1. **Acquire.** The node reads `leases/<shard>` and writes the next
//!    epoch with `If-Match` on what it read (`If-None-Match: *` when there
//!    is none). Two nodes racing both read epoch `e`; one writes `e + 1`,
//!    the other loses, reads again and writes `e + 2`. No two nodes ever
//!    hold one epoch.
//! 2. **Adopt.** The new owner rewrites each of the shard's region
//!    manifests once with its epoch, conditionally on the version it read.
//!    If the old owner published meanwhile, the write loses, and the new
//!    owner reads again and adopts what the old one published: nothing the
//!    old owner acknowledged is left out. A manifest already at a higher
//!    epoch means a newer owner exists: this node is fenced.
//! 3. **Publish.** Every later manifest change (a flush's new file, a
//!    compaction's swap) is written with `If-Match` on the version this
//!    owner last wrote. Losing means someone adopted the region since: the
//!    owner is fenced: every later write of the shard is refused, and it
//! 4. **cleans up**: it deletes the files it wrote under its epoch that the
//!    current manifest (read afresh) does not name. A file the new owner
//!    adopted is named there and stays.
//!
//! Store file names carry the writer's epoch ([`file_name`]), so files of
//! two owners never collide and a zombie never overwrites a live file.
//!
//! Object layout below the store's prefix: `leases/<shard>` (this file's
//! lease encoding) and `regions/<region>/MANIFEST` (an epoch, the owner and
//! the region's own manifest bytes).

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::kind::ErrorKind;
use crate::objects::{ObjectError, Objects, Version};

const LEASE_MAGIC: &[u8; 8] = b"HALLEASE";
const MANIFEST_MAGIC: &[u8; 8] = b"HALFMAN1";

/// How often an acquire or an adopt reads again after losing a race
/// before it gives up (each loss means another writer made progress).
const ATTEMPTS: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum OwnershipError {
    /// Another node owns the shard at a higher epoch: stop writing it.
    #[error(
        "shard `{shard}`: fenced at epoch {epoch} by `{by}` at epoch {newer}; this node stops writing it"
    )]
    Fenced {
        shard: String,
        epoch: u64,
        by: String,
        newer: u64,
    },
    #[error("object `{name}` is not a valid {what}: {reason}")]
    Corrupt {
        name: String,
        what: &'static str,
        reason: &'static str,
    },
    #[error("shard `{shard}`: lost {attempts} races in a row for `{name}`; try again")]
    Contended {
        shard: String,
        name: String,
        attempts: usize,
    },
    #[error(transparent)]
    Objects(#[from] ObjectError),
}

impl OwnershipError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            OwnershipError::Fenced { .. } => ErrorKind::Conflict,
            OwnershipError::Corrupt { .. } => ErrorKind::Corruption,
            OwnershipError::Contended { .. } => ErrorKind::Unavailable,
            OwnershipError::Objects(e) => e.kind(),
        }
    }
}

/// Both objects open with the same stamp: a magic, the writer's epoch
/// and its name; a manifest's body follows it, a lease has none.
fn encode_stamped(magic: &[u8; 8], epoch: u64, owner: &str, body: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(20 + owner.len() + body.len());
    b.put_slice(magic);
    b.put_u64_le(epoch);
    b.put_u32_le(owner.len() as u32);
    b.put_slice(owner.as_bytes());
    b.put_slice(body);
    b.freeze()
}

/// Reads a stamp: the epoch, the owner and what follows them.
fn decode_stamped(
    name: &str,
    what: &'static str,
    magic: &[u8; 8],
    mut b: Bytes,
) -> Result<(u64, String, Bytes), OwnershipError> {
    let corrupt = |reason| OwnershipError::Corrupt {
        name: name.to_string(),
        what,
        reason,
    };
    if b.len() < 20 || &b[..8] != magic {
        return Err(corrupt("no header"));
    }
    b.advance(8);
    let epoch = b.get_u64_le();
    let len = b.get_u32_le() as usize;
    if b.len() < len {
        return Err(corrupt("owner runs past the end"));
    }
    let owner =
        String::from_utf8(b.split_to(len).to_vec()).map_err(|_| corrupt("owner is not UTF-8"))?;
    Ok((epoch, owner, b))
}

/// What `leases/<shard>` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub epoch: u64,
    pub owner: String,
}

impl Lease {
    fn encode(&self) -> Bytes {
        encode_stamped(LEASE_MAGIC, self.epoch, &self.owner, &[])
    }

    fn decode(name: &str, b: Bytes) -> Result<Lease, OwnershipError> {
        let (epoch, owner, rest) = decode_stamped(name, "lease", LEASE_MAGIC, b)?;
        if !rest.is_empty() {
            return Err(OwnershipError::Corrupt {
                name: name.to_string(),
                what: "lease",
                reason: "owner length does not match",
            });
        }
        Ok(Lease { epoch, owner })
    }
}

/// A region manifest as the object store holds it: the epoch and owner
/// that wrote it, and the region's manifest bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedManifest {
    pub epoch: u64,
    pub owner: String,
    pub body: Bytes,
}

impl FencedManifest {
    fn encode(&self) -> Bytes {
        encode_stamped(MANIFEST_MAGIC, self.epoch, &self.owner, &self.body)
    }

    fn decode(name: &str, b: Bytes) -> Result<FencedManifest, OwnershipError> {
        let (epoch, owner, body) = decode_stamped(name, "region manifest", MANIFEST_MAGIC, b)?;
        Ok(FencedManifest { epoch, owner, body })
    }
}

/// A source shard's lease; `shard` names it as `<stream>/<shard>`
/// (`cpu/3`: partition 3 of topic `cpu`).
pub fn lease_name(shard: &str) -> String {
    format!("leases/{shard}")
}

pub fn manifest_name(region: u64) -> String {
    format!("regions/{region}/MANIFEST")
}

/// A store file's object name: its region, family, the writer's epoch and
/// the region's file id, so two owners' files never share a name.
pub fn file_name(region: u64, family: &str, epoch: u64, file_id: u64) -> String {
    format!("regions/{region}/{family}/{epoch:08}-{file_id:08}.sst")
}

/// The epoch a [`file_name`] was written under.
pub fn epoch_of_file(name: &str) -> Option<u64> {
    let base = name.rsplit('/').next()?;
    base.split_once('-')?.0.parse().ok()
}

/// Reads a shard's lease: `None` when no node ever owned it.
pub fn read_lease(objects: &Objects, shard: &str) -> Result<Option<Lease>, OwnershipError> {
    let name = lease_name(shard);
    match objects.get(&name)? {
        Some((bytes, _)) => Ok(Some(Lease::decode(&name, bytes)?)),
        None => Ok(None),
    }
}

/// Reads a region's manifest from the object store.
pub fn read_manifest(
    objects: &Objects,
    region: u64,
) -> Result<Option<FencedManifest>, OwnershipError> {
    let name = manifest_name(region);
    match objects.get(&name)? {
        Some((bytes, _)) => Ok(Some(FencedManifest::decode(&name, bytes)?)),
        None => Ok(None),
    }
}

/// This node's ownership of one shard at one epoch, and the region
/// manifests it has adopted.
#[derive(Debug)]
pub struct ShardOwner {
    objects: Arc<Objects>,
    shard: String,
    node: String,
    epoch: u64,
    /// Per adopted region: the manifest version this owner last wrote.
    adopted: std::collections::BTreeMap<u64, (Version, FencedManifest)>,
    /// Per region, a manifest body whose write failed without an answer
    /// (a timeout, a dropped connection): it may still land, so the files
    /// it names are never cleaned up.
    unresolved: std::collections::BTreeMap<u64, Vec<Bytes>>,
    /// Set by the first fence: every later write is refused at once.
    fenced_by: Option<(String, u64)>,
}

impl ShardOwner {
    /// Takes the shard's lease at the next epoch (step 1).
    pub fn acquire(
        objects: Arc<Objects>,
        shard: &str,
        node: &str,
    ) -> Result<ShardOwner, OwnershipError> {
        let name = lease_name(shard);
        for _ in 0..ATTEMPTS {
            let current = objects.get(&name)?;
            let (next, written) = match current {
                None => {
                    let lease = Lease {
                        epoch: 1,
                        owner: node.to_string(),
                    };
                    let written = objects.create(&name, lease.encode());
                    (lease, written)
                }
                Some((bytes, version)) => {
                    let held = Lease::decode(&name, bytes)?;
                    let lease = Lease {
                        epoch: held.epoch + 1,
                        owner: node.to_string(),
                    };
                    let written = objects.replace(&name, lease.encode(), &version);
                    (lease, written)
                }
            };
            match written {
                Ok(_) => {
                    tracing::info!(shard, node, epoch = next.epoch, "took the shard's lease");
                    return Ok(ShardOwner {
                        objects,
                        shard: shard.to_string(),
                        node: node.to_string(),
                        epoch: next.epoch,
                        adopted: Default::default(),
                        unresolved: Default::default(),
                        fenced_by: None,
                    });
                }
                // Another node took an epoch first: read it and go past it.
                Err(ObjectError::Lost { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(OwnershipError::Contended {
            shard: shard.to_string(),
            name,
            attempts: ATTEMPTS,
        })
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn shard(&self) -> &str {
        &self.shard
    }

    /// Records the fence (every later write is refused) and says so.
    fn fenced(&mut self, by: &str, newer: u64) -> OwnershipError {
        if self.fenced_by.is_none() {
            tracing::warn!(shard = %self.shard, node = %self.node, epoch = self.epoch, by, newer, "fenced: another node owns the shard now");
            self.fenced_by = Some((by.to_string(), newer));
        }
        self.still_fenced()
    }

    fn still_fenced(&self) -> OwnershipError {
        let (by, newer) = self.fenced_by.clone().unwrap_or_default();
        OwnershipError::Fenced {
            shard: self.shard.clone(),
            epoch: self.epoch,
            by,
            newer,
        }
    }

    /// Whether a fence has stopped this owner.
    pub fn is_fenced(&self) -> bool {
        self.fenced_by.is_some()
    }

    /// Reads the shard's lease: a newer epoch there means another node
    /// took the shard, and this owner is fenced.
    pub fn check_lease(&mut self) -> Result<(), OwnershipError> {
        if self.is_fenced() {
            return Err(self.still_fenced());
        }
        if let Some(lease) = read_lease(&self.objects, &self.shard)?
            && lease.epoch > self.epoch
        {
            return Err(self.fenced(&lease.owner, lease.epoch));
        }
        Ok(())
    }

    /// The error every write gets once this owner is fenced.
    pub fn fence_error(&self) -> OwnershipError {
        self.still_fenced()
    }

    /// The node this owner is.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The regions this owner adopted.
    pub fn regions(&self) -> Vec<u64> {
        self.adopted.keys().copied().collect()
    }

    /// Stamps region `region`'s manifest with this owner's epoch (step 2)
    /// and returns the manifest body it holds (`None`: a new region).
    pub fn adopt(&mut self, region: u64) -> Result<Option<Bytes>, OwnershipError> {
        if self.is_fenced() {
            return Err(self.still_fenced());
        }
        let name = manifest_name(region);
        for _ in 0..ATTEMPTS {
            let (stamped, written, created) = match self.objects.get(&name)? {
                None => {
                    let stamped = FencedManifest {
                        epoch: self.epoch,
                        owner: self.node.clone(),
                        body: Bytes::new(),
                    };
                    let written = self.objects.create(&name, stamped.encode());
                    (stamped, written, true)
                }
                Some((bytes, version)) => {
                    let held = FencedManifest::decode(&name, bytes)?;
                    if held.epoch > self.epoch {
                        return Err(self.fenced(&held.owner, held.epoch));
                    }
                    let stamped = FencedManifest {
                        epoch: self.epoch,
                        owner: self.node.clone(),
                        body: held.body,
                    };
                    let written = self.objects.replace(&name, stamped.encode(), &version);
                    (stamped, written, false)
                }
            };
            match written {
                Ok(version) => {
                    // A region created after a newer owner took the lease
                    // may be one that owner never learns to adopt: the
                    // creator checks the lease after creating, the new
                    // owner lists regions after taking it, so one of the
                    // two always sees the other.
                    if created
                        && let Some(lease) = read_lease(&self.objects, &self.shard)?
                        && lease.epoch > self.epoch
                    {
                        return Err(self.fenced(&lease.owner, lease.epoch));
                    }
                    let body = (!stamped.body.is_empty()).then(|| stamped.body.clone());
                    self.adopted.insert(region, (version, stamped));
                    return Ok(body);
                }
                // The old owner published (or a newer one adopted) since
                // the read: read again.
                Err(ObjectError::Lost { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(OwnershipError::Contended {
            shard: self.shard.clone(),
            name,
            attempts: ATTEMPTS,
        })
    }

    /// The manifest body this owner last wrote for `region`.
    pub fn manifest(&self, region: u64) -> Option<&Bytes> {
        self.adopted.get(&region).map(|(_, m)| &m.body)
    }

    /// Replaces region `region`'s manifest body (step 3); a lost write
    /// means this owner is fenced, and every later write is refused.
    ///
    /// A write of this owner's that landed although its answer said
    /// otherwise (the store retried a request that had been applied, and
    /// the retry's `If-Match` then failed; or a write that timed out landed
    /// late) is this owner's own: the manifest at this epoch is taken as
    /// the version to replace, and the write is tried again.
    pub fn publish(&mut self, region: u64, body: Bytes) -> Result<(), OwnershipError> {
        if self.is_fenced() {
            return Err(self.still_fenced());
        }
        let name = manifest_name(region);
        if !self.adopted.contains_key(&region) {
            return Err(OwnershipError::Corrupt {
                name,
                what: "adopted region",
                reason: "published before it was adopted",
            });
        }
        let next = FencedManifest {
            epoch: self.epoch,
            owner: self.node.clone(),
            body,
        };
        for _ in 0..ATTEMPTS {
            let Some((version, _)) = self.adopted.get(&region) else {
                break;
            };
            match self.objects.replace(&name, next.encode(), version) {
                Ok(version) => {
                    self.adopted.insert(region, (version, next));
                    return Ok(());
                }
                Err(ObjectError::Lost { .. }) => {
                    let Some((bytes, version)) = self.objects.get(&name)? else {
                        return Err(self.fenced("", 0));
                    };
                    let held = FencedManifest::decode(&name, bytes)?;
                    if held.epoch != self.epoch || held.owner != self.node {
                        return Err(self.fenced(&held.owner, held.epoch));
                    }
                    if held.body == next.body {
                        self.adopted.insert(region, (version, next));
                        return Ok(());
                    }
                    // An earlier write of ours landed late: replace it.
                    self.adopted.insert(region, (version, held));
                }
                Err(e) => {
                    self.unresolved
                        .entry(region)
                        .or_default()
                        .push(next.body.clone());
                    return Err(e.into());
                }
            }
        }
        Err(OwnershipError::Contended {
            shard: self.shard.clone(),
            name,
            attempts: ATTEMPTS,
        })
    }

    /// After a fence (step 4): deletes the files of `written` (names this
    /// owner wrote under its epoch) that no current manifest of the
    /// adopted regions names; `files_of` lists the file names a region's
    /// manifest body names (`None`: it cannot read the body, and then
    /// nothing is deleted: what it names is unknown). Returns how many it
    /// deleted.
    pub fn clean_up(
        &self,
        written: &[String],
        files_of: impl Fn(u64, &Bytes) -> Option<Vec<String>>,
    ) -> Result<usize, OwnershipError> {
        let mut named = std::collections::BTreeSet::new();
        let mut bodies: Vec<(u64, Bytes)> = Vec::new();
        for &region in self.adopted.keys() {
            if let Some(m) = read_manifest(&self.objects, region)? {
                bodies.push((region, m.body));
            }
        }
        // A manifest write with no answer may still land: what it names
        // stays (a later owner's sweep of unnamed files takes it if not).
        for (&region, unresolved) in &self.unresolved {
            bodies.extend(unresolved.iter().map(|b| (region, b.clone())));
        }
        for (region, body) in &bodies {
            match files_of(*region, body) {
                Some(files) => named.extend(files),
                None => {
                    return Err(OwnershipError::Corrupt {
                        name: manifest_name(*region),
                        what: "region manifest",
                        reason: "its body cannot be read, so the clean-up deletes nothing",
                    });
                }
            }
        }
        let mut deleted = 0;
        for file in written {
            if epoch_of_file(file) != Some(self.epoch) || named.contains(file) {
                continue;
            }
            self.objects.delete(file)?;
            deleted += 1;
        }
        tracing::info!(shard = %self.shard, node = %self.node, epoch = self.epoch, deleted, "cleaned up after the fence");
        Ok(deleted)
    }
}
