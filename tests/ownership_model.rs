//! A model test of the lease and manifest protocol (`src/ownership.rs`)
//! against a real S3 server (s3s-fs): two or three nodes take a shard's
//! lease, adopt its regions, flush and compact them, in random
//! interleavings, each acting on what it last saw (a node that lost the
//! lease keeps acting until a write tells it so, as a paused process
//! would). After every step:
//!
//! - no epoch was ever granted twice, and no two nodes hold one epoch;
//! - every file a region's manifest names exists (no fenced node deleted
//!   a file the owner uses);
//! - every flush that was acknowledged (its manifest write succeeded) is
//!   in a file the region's current manifest names (nothing acknowledged
//!   lost, through takeovers and compactions).
//!
//! `HALITE_MODEL_RUNS` sets the number of interleavings (default 1,000),
//! `HALITE_MODEL_SEED` the seed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use common::rng::Rng;
use common::s3::S3;
use halite::objects::Objects;
use halite::ownership::{self, OwnershipError, ShardOwner};

const STEPS: usize = 24;

/// A manifest body in this model: the file names, one per line.
fn files_of(body: &Bytes) -> Vec<String> {
    std::str::from_utf8(body)
        .expect("utf-8 body")
        .lines()
        .map(str::to_string)
        .collect()
}

fn body_of(files: &[String]) -> Bytes {
    Bytes::from(files.join("\n"))
}

/// A file's content in this model: the flush units it holds.
fn units_of(objects: &Objects, file: &str) -> Option<BTreeSet<u64>> {
    let (bytes, _) = objects.get(file).expect("get file")?;
    Some(
        std::str::from_utf8(&bytes)
            .expect("utf-8 file")
            .split_whitespace()
            .map(|u| u.parse().expect("unit"))
            .collect(),
    )
}

fn file_content(units: &BTreeSet<u64>) -> Bytes {
    let words: Vec<String> = units.iter().map(u64::to_string).collect();
    Bytes::from(words.join(" "))
}

struct Node {
    name: String,
    objects: Arc<Objects>,
    owner: Option<ShardOwner>,
    /// Files written under the current epoch.
    written: Vec<String>,
    next_file: u64,
}

impl Node {
    /// Gives up the shard after a fence: the files it wrote that no
    /// manifest names are deleted, and only those.
    fn fenced(&mut self, e: OwnershipError, regions: &[u64]) {
        match &e {
            OwnershipError::Fenced { by, .. } => {
                assert_ne!(by, &self.name, "{} fenced by itself: {e}", self.name)
            }
            _ => panic!("{}: {e}", self.name),
        }
        let Some(owner) = self.owner.take() else {
            return;
        };
        assert!(owner.is_fenced());
        let written = std::mem::take(&mut self.written);
        owner
            .clean_up(&written, |_, b| Some(files_of(b)))
            .expect("clean up");
        // Complete: every file it wrote that is left is one a manifest
        // names.
        let mut named = BTreeSet::new();
        for &region in regions {
            if let Some(m) = ownership::read_manifest(&self.objects, region).expect("manifest") {
                named.extend(files_of(&m.body));
            }
        }
        for file in written {
            if !named.contains(&file) {
                assert_eq!(
                    self.objects.get(&file).expect("get").map(|_| ()),
                    None,
                    "{}: {file} of a fenced epoch left behind",
                    self.name
                );
            }
        }
    }
}

struct World {
    /// This run's shard and regions (each run has its own names).
    shard: String,
    regions: [u64; 2],
    nodes: Vec<Node>,
    /// What each file was written with (files are never rewritten), so
    /// the checks read manifests and list names but not every file.
    contents: BTreeMap<String, BTreeSet<u64>>,
    granted: BTreeSet<u64>,
    acknowledged: BTreeMap<u64, BTreeSet<u64>>,
    next_unit: u64,
    checker: Arc<Objects>,
}

impl World {
    /// One random action of one node; false when it had nothing to do.
    fn step(&mut self, rng: &mut Rng, log: &mut Vec<String>) -> bool {
        let World {
            shard,
            regions,
            nodes,
            contents,
            granted,
            acknowledged,
            next_unit,
            ..
        } = self;
        let n = rng.below(nodes.len() as u64) as usize;
        let action = rng.below(10);
        let node = &mut nodes[n];
        match action {
            // Kafka assigns the shard to this node: it takes the lease.
            0 | 1 => {
                if let Some(old) = node.owner.take() {
                    old.clean_up(&std::mem::take(&mut node.written), |_, b| Some(files_of(b)))
                        .expect("clean up the old epoch");
                }
                let owner = ShardOwner::acquire(node.objects.clone(), shard.as_str(), &node.name)
                    .expect("acquire");
                assert!(
                    granted.insert(owner.epoch()),
                    "epoch {} granted twice",
                    owner.epoch()
                );
                log.push(format!("{} acquires epoch {}", node.name, owner.epoch()));
                node.owner = Some(owner);
            }
            // It adopts a region it has not adopted yet.
            2 | 3 => {
                let Some(owner) = node.owner.as_mut() else {
                    return false;
                };
                let Some(&region) = regions.iter().find(|r| owner.manifest(**r).is_none()) else {
                    return false;
                };
                log.push(format!(
                    "{} adopts region {region} at epoch {}",
                    node.name,
                    owner.epoch()
                ));
                if let Err(e) = owner.adopt(region) {
                    log.push(format!("  fenced: {e}"));
                    node.fenced(e, &regions[..]);
                }
            }
            // It flushes a region: a new file, then the manifest naming it.
            4..=7 => {
                let Some(owner) = node.owner.as_mut() else {
                    return false;
                };
                let region = regions[rng.below(2) as usize];
                let Some(body) = owner.manifest(region).cloned() else {
                    return false;
                };
                let unit = *next_unit;
                *next_unit += 1;
                node.next_file += 1;
                let file = ownership::file_name(region, "f", owner.epoch(), node.next_file);
                let units = BTreeSet::from([unit]);
                node.objects
                    .create(&file, file_content(&units))
                    .expect("a store file name is never reused");
                contents.insert(file.clone(), units);
                node.written.push(file.clone());
                let mut files = files_of(&body);
                files.push(file);
                log.push(format!(
                    "{} flushes unit {unit} into region {region} at epoch {}",
                    node.name,
                    owner.epoch()
                ));
                match owner.publish(region, body_of(&files)) {
                    Ok(()) => {
                        acknowledged.entry(region).or_default().insert(unit);
                    }
                    Err(e) => {
                        log.push(format!("  fenced: {e}"));
                        node.fenced(e, &regions[..]);
                    }
                }
            }
            // It compacts a region: one file of all, swapped in, the
            // inputs deleted once the swap is published.
            _ => {
                let Some(owner) = node.owner.as_mut() else {
                    return false;
                };
                let region = regions[rng.below(2) as usize];
                let Some(body) = owner.manifest(region).cloned() else {
                    return false;
                };
                let inputs = files_of(&body);
                if inputs.len() < 2 {
                    return false;
                }
                let mut units = BTreeSet::new();
                for f in &inputs {
                    let Some(held) = units_of(&node.objects, f) else {
                        // Only a node that lost the shard can find an
                        // input gone (the new owner compacted it away):
                        // its compaction fails, and it writes nothing.
                        let lease = ownership::read_lease(&node.objects, shard.as_str())
                            .expect("lease")
                            .expect("a lease");
                        assert!(
                            lease.epoch > owner.epoch(),
                            "{} at the current epoch {} found its input {f} gone:\n{}",
                            node.name,
                            owner.epoch(),
                            log.join("\n")
                        );
                        log.push(format!(
                            "{} (epoch {}, stale) finds {f} gone and gives up a compaction",
                            node.name,
                            owner.epoch()
                        ));
                        return true;
                    };
                    units.extend(held);
                }
                node.next_file += 1;
                let merged = ownership::file_name(region, "f", owner.epoch(), node.next_file);
                node.objects
                    .create(&merged, file_content(&units))
                    .expect("a store file name is never reused");
                contents.insert(merged.clone(), units);
                node.written.push(merged.clone());
                log.push(format!(
                    "{} compacts region {region} ({} files) at epoch {}",
                    node.name,
                    inputs.len(),
                    owner.epoch()
                ));
                match owner.publish(region, body_of(std::slice::from_ref(&merged))) {
                    Ok(()) => {
                        for f in inputs {
                            node.objects.delete(&f).expect("delete an input");
                        }
                    }
                    Err(e) => {
                        log.push(format!("  fenced: {e}"));
                        node.fenced(e, &regions[..]);
                    }
                }
            }
        }
        true
    }

    fn check(&self, log: &[String]) {
        let story = || log.join("\n");
        let mut held = BTreeSet::new();
        for node in &self.nodes {
            if let Some(owner) = &node.owner {
                assert!(
                    held.insert(owner.epoch()),
                    "two nodes hold epoch {}:\n{}",
                    owner.epoch(),
                    story()
                );
            }
        }
        if let Some(lease) = ownership::read_lease(&self.checker, &self.shard).expect("lease") {
            assert_eq!(
                Some(&lease.epoch),
                self.granted.last(),
                "the lease is the last epoch granted:\n{}",
                story()
            );
        }
        for region in self.regions {
            let named = match ownership::read_manifest(&self.checker, region).expect("manifest") {
                Some(m) => files_of(&m.body),
                None => Vec::new(),
            };
            let mut present = BTreeSet::new();
            for f in &named {
                let units = units_of(&self.checker, f).unwrap_or_else(|| {
                    panic!(
                        "region {region}'s manifest names {f}, which is gone:\n{}",
                        story()
                    )
                });
                assert_eq!(units, self.contents[f], "{f} changed after it was written");
                present.extend(units);
            }
            if let Some(acked) = self.acknowledged.get(&region) {
                let lost: Vec<_> = acked.difference(&present).collect();
                assert!(
                    lost.is_empty(),
                    "region {region} lost acknowledged flushes {lost:?}:\n{}",
                    story()
                );
            }
        }
    }
}

#[test]
fn no_two_owners_and_no_lost_or_dangling_files_over_random_interleavings() {
    let runs: usize = std::env::var("HALITE_MODEL_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let mut rng = Rng::from_env("HALITE_MODEL_SEED");
    let s3 = S3::start(&["halite"]);
    let unused = tempfile::tempdir().expect("tmp");
    // One client per node, as three processes would have.
    let open =
        || Arc::new(Objects::open(&s3.config("halite", "model"), unused.path()).expect("open"));
    let clients = [open(), open(), open()];
    let checker = open();
    let mut fences = 0;
    let mut takeovers = 0;
    let started = std::time::Instant::now();
    for run in 0..runs {
        let nodes = 2 + rng.below(2) as usize;
        let first_region = 1 + 2 * run as u64;
        let mut world = World {
            shard: format!("run-{run}/cpu/0"),
            regions: [first_region, first_region + 1],
            nodes: (0..nodes)
                .map(|i| Node {
                    name: format!("node-{i}"),
                    objects: clients[i].clone(),
                    owner: None,
                    written: Vec::new(),
                    next_file: 0,
                })
                .collect(),
            contents: BTreeMap::new(),
            granted: BTreeSet::new(),
            acknowledged: BTreeMap::new(),
            next_unit: 0,
            checker: checker.clone(),
        };
        let mut log = vec![format!("run {run}, {nodes} nodes")];
        for _ in 0..STEPS {
            if world.step(&mut rng, &mut log) {
                world.check(&log);
            }
        }
        fences += log.iter().filter(|l| l.contains("fenced")).count();
        takeovers += world.granted.len().saturating_sub(1);
    }
    eprintln!(
        "{runs} interleavings in {:.1} s: {takeovers} takeovers, {fences} fenced writes",
        started.elapsed().as_secs_f64()
    );
    assert!(
        runs < 100 || fences > runs / 10,
        "too few fenced writes to have tested fencing: {fences}"
    );
}
