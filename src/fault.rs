//! Injected I/O faults below the file layer, for tests of what the store
//! does when the disk fails: `ENOSPC`, `EIO` on a write, `EIO` on an fsync,
//! and short writes. Every write and sync of the WAL, of store files
//! (flushes and compactions), of WAL segment preparation and of manifests
//! and the catalog asks [`check`] first, naming its [`Site`] and its file.
//!
//! A fault is armed for files under one directory, so tests running side by
//! side in one process do not see each other's faults. A server reads
//! `HALITE_FAULTS` at start (see [`arm_from_env`]). When nothing is armed a
//! check is one relaxed atomic load.

pub mod power;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// Where an I/O happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Site {
    /// A group commit's write into a WAL segment.
    WalWrite,
    /// A WAL data sync.
    WalSync,
    /// Creating and zero-filling a WAL segment before it goes live.
    WalPrepare,
    /// Writing a store file (a flush or a compaction output).
    StoreWrite,
    /// Syncing a store file before it is renamed into place.
    StoreSync,
    /// Replacing a manifest or the catalog (write and sync).
    MetaWrite,
}

impl Site {
    fn parse(s: &str) -> Option<Site> {
        Some(match s {
            "wal_write" => Site::WalWrite,
            "wal_sync" => Site::WalSync,
            "wal_prepare" => Site::WalPrepare,
            "store_write" => Site::StoreWrite,
            "store_sync" => Site::StoreSync,
            "meta_write" => Site::MetaWrite,
            _ => return None,
        })
    }
}

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The disk is full.
    NoSpace,
    /// The device reports an error.
    Io,
    /// A write stores only part of its bytes and says so (not an error:
    /// the writer must write the rest).
    Short,
}

impl Fault {
    /// The error a failing operation returns.
    pub fn error(self) -> std::io::Error {
        match self {
            Fault::NoSpace => std::io::Error::from_raw_os_error(libc::ENOSPC),
            Fault::Io | Fault::Short => std::io::Error::from_raw_os_error(libc::EIO),
        }
    }
}

struct Armed {
    under: PathBuf,
    site: Site,
    fault: Fault,
    /// Operations to let through first.
    skip: u64,
    /// Operations to fail after those; `u64::MAX` until disarmed.
    times: u64,
    /// Operations that failed so far.
    hits: u64,
}

static ANY: AtomicBool = AtomicBool::new(false);
static ARMED: Mutex<Vec<Armed>> = Mutex::new(Vec::new());

/// Arms `fault` at `site` for files under `under`: the first `skip`
/// operations pass, the next `times` fail (`u64::MAX`: until disarmed).
pub fn arm(under: &Path, site: Site, fault: Fault, skip: u64, times: u64) {
    let mut armed = ARMED.lock();
    armed.push(Armed {
        under: under.to_path_buf(),
        site,
        fault,
        skip,
        times,
        hits: 0,
    });
    ANY.store(true, Ordering::Release);
}

/// Disarms every fault for files under `under` (the disk has room again).
pub fn disarm(under: &Path) {
    let mut armed = ARMED.lock();
    armed.retain(|a| !a.under.starts_with(under));
    ANY.store(!armed.is_empty(), Ordering::Release);
}

/// How many operations under `under` the armed faults failed so far.
pub fn hits(under: &Path) -> u64 {
    ARMED
        .lock()
        .iter()
        .filter(|a| a.under.starts_with(under))
        .map(|a| a.hits)
        .sum()
}

/// The fault an operation at `site` on `path` must suffer now, if any.
#[inline]
pub fn check(site: Site, path: &Path) -> Option<Fault> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let mut armed = ARMED.lock();
    for a in armed.iter_mut() {
        if a.site != site || !path.starts_with(&a.under) {
            continue;
        }
        if a.skip > 0 {
            a.skip -= 1;
            return None;
        }
        if a.times == 0 {
            return None;
        }
        if a.times != u64::MAX {
            a.times -= 1;
        }
        a.hits += 1;
        return Some(a.fault);
    }
    None
}

/// `Err` when a fault that fails the operation is armed.
pub fn fail_if_armed(site: Site, path: &Path) -> std::io::Result<()> {
    match check(site, path) {
        Some(f @ (Fault::NoSpace | Fault::Io)) => Err(f.error()),
        _ => Ok(()),
    }
}

/// Arms faults from `HALITE_FAULTS`, for a server under test:
/// `site=fault[:skip[:times]];…` with sites `wal_write`, `wal_sync`,
/// `wal_prepare`, `store_write`, `store_sync`, `meta_write` and faults
/// `enospc`, `eio`, `short`, for files under `under` (the data directory).
pub fn arm_from_env(under: &Path) -> Result<(), String> {
    let Ok(spec) = std::env::var("HALITE_FAULTS") else {
        return Ok(());
    };
    for part in spec.split(';').filter(|p| !p.trim().is_empty()) {
        let bad = || format!("HALITE_FAULTS: cannot read `{part}` (site=fault[:skip[:times]])");
        let (site, rest) = part.trim().split_once('=').ok_or_else(bad)?;
        let mut fields = rest.split(':');
        let site = Site::parse(site).ok_or_else(bad)?;
        let fault = match fields.next() {
            Some("enospc") => Fault::NoSpace,
            Some("eio") => Fault::Io,
            Some("short") => Fault::Short,
            _ => return Err(bad()),
        };
        let number = |f: Option<&str>, default: u64| -> Result<u64, String> {
            f.map_or(Ok(default), |v| v.parse().map_err(|_| bad()))
        };
        let skip = number(fields.next(), 0)?;
        let times = number(fields.next(), u64::MAX)?;
        arm(under, site, fault, skip, times);
    }
    Ok(())
}

/// Whether an I/O error is the disk being full.
pub fn is_no_space(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC)
}
