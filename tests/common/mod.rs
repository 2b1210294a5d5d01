//! Shared test environment: a region with its WAL in a temp dir, a manual
//! clock, and reopen; for the service, one `scenario` (a temp dir, a port,
//! the broker and its topics, the config, settings and a seeded
//! generator) over `server` (starting `halite serve`), `kafka` (Tansu,
//! producing, the group's commits, the oracle), `http` and `rng`; `s3`
//! starts a real S3 server (s3s-fs); `webdriver` a real browser.
#![allow(dead_code)]

pub mod certs;
pub mod http;
pub mod influx;
pub mod kafka;
pub mod prometheus;
pub mod rng;
pub mod s3;
pub mod scenario;
pub mod server;
pub mod webdriver;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use halite::clock::{Clock, ManualClock};
use halite::region::sst::cache::BlockCache;
use halite::region::wal::io::IoBackendChoice;
use halite::region::wal::{Wal, WalOptions};
use halite::region::{Region, RegionDescriptor, RegionOptions};
use halite::schema::FamilyDescriptor;

pub struct Harness {
    /// Kept to delete the directory at the end, when the harness made it.
    pub _tmp: Option<tempfile::TempDir>,
    pub root: PathBuf,
    pub clock: ManualClock,
    pub cache: Arc<BlockCache>,
    pub families: Vec<FamilyDescriptor>,
    pub options: RegionOptions,
    pub wal_options: WalOptions,
    pub wal: Option<Arc<Wal>>,
    pub region: Option<Region>,
}

/// The sum of a metric's samples (every label set) in a `/metrics` text.
pub fn metric_sum(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub fn small_wal(io: IoBackendChoice) -> WalOptions {
    WalOptions {
        segment_size: 256 * 1024,
        io,
        ..WalOptions::default()
    }
}

pub fn foreground_options() -> RegionOptions {
    RegionOptions {
        background: false,
        ..RegionOptions::default()
    }
}

impl Harness {
    pub fn new(
        families: Vec<FamilyDescriptor>,
        options: RegionOptions,
        wal_options: WalOptions,
    ) -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut h = Harness::new_at(tmp.path(), families, options, wal_options);
        h._tmp = Some(tmp);
        h.open();
        h
    }

    /// A harness over an existing directory; call `open` to start.
    pub fn new_at(
        root: &Path,
        families: Vec<FamilyDescriptor>,
        options: RegionOptions,
        wal_options: WalOptions,
    ) -> Self {
        Harness {
            _tmp: None,
            root: root.to_path_buf(),
            clock: ManualClock::new(1_700_000_000_000),
            cache: BlockCache::new(8 * 1024 * 1024),
            families,
            options,
            wal_options,
            wal: None,
            region: None,
        }
    }

    pub fn wal_dir(&self) -> PathBuf {
        self.root.join("wal")
    }
    pub fn region_dir(&self) -> PathBuf {
        self.root.join("region-1")
    }

    pub fn open(&mut self) {
        let wal = Arc::new(Wal::open(self.wal_dir(), self.wal_options.clone()).expect("open wal"));
        let region = Region::open(
            self.region_dir(),
            RegionDescriptor::new(1, self.families.clone()),
            self.options.clone(),
            wal.clone(),
            Arc::new(self.clock.clone()) as Arc<dyn Clock>,
            self.cache.clone(),
        )
        .expect("open region");
        self.wal = Some(wal);
        self.region = Some(region);
    }

    pub fn region(&self) -> &Region {
        self.region.as_ref().expect("region open")
    }

    /// Closes cleanly (flushing) and opens again.
    pub fn reopen_clean(&mut self) {
        if let Some(r) = self.region.take() {
            r.close().expect("close region");
        }
        if let Some(w) = self.wal.take() {
            w.close();
        }
        self.open();
    }

    /// Drops the region without a flush: the MemStore must come back from
    /// the WAL.
    pub fn reopen_unflushed(&mut self) {
        drop(self.region.take());
        if let Some(w) = self.wal.take() {
            w.close();
        }
        self.open();
    }
}

pub fn files_in(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Bytes the files under `dir` take on disk (allocated blocks).
pub fn du(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                total += e.metadata().map_or(0, |m| m.blocks() * 512);
            }
        }
    }
    total
}
