//! Regions whose store files and manifests live on the object store (the
//! storage of cluster mode), against a real S3 server (s3s-fs): the owner
//! of a shard uploads every file a flush or compaction writes and
//! publishes the manifest at its epoch; a new owner with an empty disk
//! opens the region from the object store alone and reads every flushed
//! row; the old owner is fenced at its next publish, stops writing every
//! region of the shard, and its clean-up removes only what it wrote that
//! no manifest names.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::s3::S3;
use halite::cell::{Row, RowMutation};
use halite::clock::{Clock, ManualClock};
use halite::objects::Objects;
use halite::ownership::{ShardOwner, read_manifest};
use halite::region::manifest::Manifest;
use halite::region::read::Scan;
use halite::region::shared_files::{OwnedShard, SharedFiles, epoch_of_file_id, names_in_manifest};
use halite::region::sst::cache::BlockCache;
use halite::region::wal::record::SourcePosition;
use halite::region::wal::{Wal, WalOptions};
use halite::region::{RecoveringRegion, Region, RegionDescriptor, RegionOptions};
use halite::schema::{Durability, FamilyDescriptor};

const SHARD: &str = "cpu/0";

/// One node: its own object-store client, WAL, cache and clock.
struct Node {
    objects: Arc<Objects>,
    wal: Arc<Wal>,
    cache: Arc<BlockCache>,
    clock: ManualClock,
    dir: tempfile::TempDir,
}

impl Node {
    fn new(s3: &S3) -> Node {
        let dir = tempfile::tempdir().expect("node dir");
        let objects = Arc::new(
            Objects::open(&s3.config("halite", "cluster"), &dir.path().join("unused"))
                .expect("open the object store"),
        );
        let wal = Arc::new(
            Wal::open(dir.path().join("wal"), WalOptions::default()).expect("open the WAL"),
        );
        Node {
            objects,
            wal,
            cache: BlockCache::new(8 << 20),
            clock: ManualClock::new(1_700_000_000_000),
            dir,
        }
    }

    fn acquire(&self, name: &str) -> Arc<OwnedShard> {
        Arc::new(OwnedShard::new(
            ShardOwner::acquire(self.objects.clone(), SHARD, name).expect("take the lease"),
        ))
    }

    fn adopt(&self, owner: &Arc<OwnedShard>, id: u64) -> Region {
        let shared = Arc::new(
            SharedFiles::new(self.objects.clone(), owner.clone(), id)
                .with_retire_grace(Duration::ZERO),
        );
        let options = RegionOptions {
            background: false,
            ..RegionOptions::default()
        };
        RecoveringRegion::adopt(
            self.region_dir(id),
            RegionDescriptor::new(id, vec![FamilyDescriptor::new("cf")]),
            options,
            self.cache.clone(),
            shared,
        )
        .expect("adopt the region")
        .open(
            self.wal.clone(),
            Arc::new(self.clock.clone()) as Arc<dyn Clock>,
            None,
        )
        .expect("open the region")
    }

    fn region_dir(&self, id: u64) -> std::path::PathBuf {
        self.dir.path().join(format!("regions/{id}"))
    }
}

/// Rows `range` of the test, written as a batch from Kafka offsets of the
/// same numbers: the region's position moves past the last.
fn write(region: &Region, range: std::ops::Range<u64>) -> halite::error::Result<()> {
    let rows: Vec<RowMutation> = range
        .clone()
        .map(|i| RowMutation::new(format!("row-{i:05}")).put("cf", "v", 1_000 + i, i.to_string()))
        .collect();
    let origin = SourcePosition {
        stream: "cpu".into(),
        shard: 0,
        durable_below: range.end,
    };
    region
        .submit(&rows, Durability::SyncWal, Some(&origin))?
        .wait()
}

fn all_rows(region: &Region) -> Vec<Row> {
    let page = region.scan(&Scan::default()).expect("scan");
    page.rows
}

fn expected(range: std::ops::Range<u64>) -> Vec<(Vec<u8>, Vec<u8>)> {
    range
        .map(|i| {
            (
                format!("row-{i:05}").into_bytes(),
                i.to_string().into_bytes(),
            )
        })
        .collect()
}

fn seen(rows: &[Row]) -> Vec<(Vec<u8>, Vec<u8>)> {
    rows.iter()
        .map(|r| (r.key.clone(), r.cells[0].value.to_vec()))
        .collect()
}

/// The store files under a region's prefix on the object store.
fn stored_files(objects: &Objects, region: u64) -> Vec<String> {
    objects
        .list(&format!("regions/{region}"))
        .expect("list")
        .into_iter()
        .map(|(name, _)| name)
        .filter(|n| n.ends_with(".sst"))
        .collect()
}

fn published(objects: &Objects, region: u64) -> (u64, Manifest) {
    let m = read_manifest(objects, region)
        .expect("read the manifest")
        .expect("a manifest");
    (m.epoch, Manifest::decode(&m.body).expect("decode the body"))
}

fn files_on_disk(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("cf"))
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".sst"))
            })
            .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_new_owner_opens_regions_from_the_object_store_and_the_old_one_is_fenced() {
    let s3 = S3::start(&["halite"]);
    let a = Node::new(&s3);
    let owner_a = a.acquire("node-a");
    assert_eq!(owner_a.epoch(), 1);
    let r7 = a.adopt(&owner_a, 7);
    let r8 = a.adopt(&owner_a, 8);

    // Three flushes and a major compaction, then one more flush: every
    // file on the object store under the epoch, the manifest naming the
    // live ones, the compacted ones deleted (no grace period here).
    for chunk in [0..100, 100..200, 200..300] {
        write(&r7, chunk).expect("write");
        r7.flush().expect("flush");
    }
    assert_eq!(stored_files(&a.objects, 7).len(), 3);
    r7.compact(true).expect("compact");
    write(&r7, 300..400).expect("write");
    r7.flush().expect("flush");
    write(&r8, 0..10).expect("write region 8");
    r8.flush().expect("flush region 8");
    let (epoch, manifest) = published(&a.objects, 7);
    assert_eq!(epoch, 1);
    let named: Vec<String> =
        names_in_manifest(7, &bytes::Bytes::from(manifest.encode())).expect("readable");
    assert_eq!(named.len(), 2, "the compaction's output and the last flush");
    assert_eq!(
        stored_files(&a.objects, 7),
        named,
        "only named files remain"
    );
    assert!(named.iter().all(|n| n.contains("/00000001-")), "{named:?}");
    assert_eq!(
        manifest.positions,
        BTreeMap::from([(("cpu".to_string(), 0), 400)]),
        "the manifest covers the flushed writes"
    );
    // Written but not flushed: only the source topic holds these.
    write(&r7, 400..450).expect("write");
    assert_eq!(seen(&all_rows(&r7)), expected(0..450));

    // Node B takes the shard with an empty disk and adopts region 7.
    let b = Node::new(&s3);
    let owner_b = b.acquire("node-b");
    assert_eq!(owner_b.epoch(), 2);
    let b7 = b.adopt(&owner_b, 7);
    assert_eq!(
        seen(&all_rows(&b7)),
        expected(0..400),
        "every flushed row, from files downloaded from the object store"
    );
    assert_eq!(files_on_disk(&b.region_dir(7)), 2);
    assert_eq!(
        b7.manifest().positions[&("cpu".to_string(), 0)],
        400,
        "the new owner replays the topic from here"
    );

    // Node A does not know yet. Its next publish loses: fenced. Every
    // region of the shard then refuses writes, region 8 included, which
    // B has not adopted.
    let err = r7.flush().expect_err("a fenced owner cannot publish");
    assert!(err.is_fenced(), "{err}");
    assert!(err.to_string().contains("node-b"), "{err}");
    let err = write(&r7, 450..460).expect_err("a fenced region refuses writes");
    assert!(err.is_fenced(), "{err}");
    let err = write(&r8, 10..20).expect_err("so does every region of the shard");
    assert!(err.is_fenced(), "{err}");
    assert!(r8.flush().expect_err("and flushes").is_fenced());

    // Its clean-up deletes what it uploaded for the lost publish, and
    // nothing the new owner's manifest names.
    let uploaded = r7.shared_files().expect("shared").uploaded();
    let deleted = owner_a
        .with_owner(|o| o.clean_up(&uploaded, names_in_manifest))
        .expect("clean up");
    assert_eq!(deleted, 1, "the fenced flush's file");
    assert_eq!(stored_files(&a.objects, 7), named);

    // The new owner replays what the topic holds past the position and
    // goes on under its own epoch.
    write(&b7, 400..450).expect("replay");
    b7.flush().expect("flush");
    assert_eq!(seen(&all_rows(&b7)), expected(0..450));
    let (epoch, manifest) = published(&b.objects, 7);
    assert_eq!(epoch, 2);
    let newest = manifest.families[b"cf".as_slice()]
        .last()
        .copied()
        .expect("a file");
    assert_eq!(epoch_of_file_id(newest), 2, "its files carry its epoch");
    assert_eq!(manifest.positions[&("cpu".to_string(), 0)], 450);

    // Reopened by a third node, what B flushed is there too; files of
    // older epochs no manifest names would have been swept on adoption.
    let c = Node::new(&s3);
    let owner_c = c.acquire("node-c");
    let c7 = c.adopt(&owner_c, 7);
    assert_eq!(seen(&all_rows(&c7)), expected(0..450));
    let c8 = c.adopt(&owner_c, 8);
    assert_eq!(seen(&all_rows(&c8)), expected(0..10));
}

#[test]
fn an_adopting_owner_sweeps_files_older_epochs_left_unnamed() {
    let s3 = S3::start(&["halite"]);
    let a = Node::new(&s3);
    let owner_a = a.acquire("node-a");
    let r = a.adopt(&owner_a, 3);
    write(&r, 0..50).expect("write");
    r.flush().expect("flush");
    // A file uploaded by an owner that died before publishing it: under
    // its epoch, named by no manifest.
    a.objects
        .put(
            "regions/3/cf/00000001-00000000004294967999.sst",
            bytes::Bytes::from_static(b"never published"),
        )
        .expect("put");
    assert_eq!(stored_files(&a.objects, 3).len(), 2);
    drop(r);

    let b = Node::new(&s3);
    let owner_b = b.acquire("node-b");
    let r = b.adopt(&owner_b, 3);
    assert_eq!(seen(&all_rows(&r)), expected(0..50));
    let left = stored_files(&b.objects, 3);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(!left[0].ends_with("4294967999.sst"), "{left:?}");
}

#[test]
fn an_idle_region_publishes_how_far_its_source_moved() {
    let s3 = S3::start(&["halite"]);
    let a = Node::new(&s3);
    let owner = a.acquire("node-a");
    let r = a.adopt(&owner, 5);
    write(&r, 0..10).expect("write");
    r.flush().expect("flush");
    assert_eq!(
        published(&a.objects, 5).1.positions[&("cpu".to_string(), 0)],
        10
    );
    // Messages up to 500 held no row for this region: the consumer says
    // so with a record of its position alone. With nothing to flush, a
    // flush publishes the position, and a new owner replays from there.
    let origin = SourcePosition {
        stream: "cpu".into(),
        shard: 0,
        durable_below: 500,
    };
    r.submit(&[], Durability::SyncWal, Some(&origin))
        .expect("submit")
        .wait()
        .expect("position");
    r.flush().expect("flush");
    let (_, manifest) = published(&a.objects, 5);
    assert_eq!(manifest.positions[&("cpu".to_string(), 0)], 500);
    assert_eq!(manifest.families[b"cf".as_slice()].len(), 1, "no new file");
}
