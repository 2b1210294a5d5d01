//! The local disk's cache of store files downloaded from the object store
//! for regions other nodes own (cluster mode): queries on this node read
//! them. A size budget bounds it; past it, the least recently read files
//! go first. A file in use by a reader stays readable after it leaves
//! the cache (the reader holds it open), so eviction never fails a read.
//!
//! The cache starts empty at every start of the service: what it held is
//! on the object store, and downloading again is cheaper than trusting a
//! file a crash may have left half written.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::objects::Objects;

#[derive(Debug)]
struct Entry {
    path: PathBuf,
    size: u64,
    last_used: u64,
}

#[derive(Debug, Default)]
struct CacheState {
    used: u64,
    /// Counts reads: the smallest `last_used` is the least recently read.
    tick: u64,
    files: HashMap<String, Entry>,
}

/// Downloaded store files under a size budget.
#[derive(Debug)]
pub struct FileCache {
    dir: PathBuf,
    budget: u64,
    state: Mutex<CacheState>,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
}

impl FileCache {
    /// A cache in `dir` (emptied) of at most `budget` bytes.
    pub fn open(dir: &Path, budget: u64) -> Result<FileCache> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, "empty the file cache", e))?;
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create the file cache", e))?;
        Ok(FileCache {
            dir: dir.to_path_buf(),
            budget,
            state: Mutex::new(CacheState::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        })
    }

    /// Bytes the cached files take.
    pub fn used(&self) -> u64 {
        self.state.lock().used
    }

    /// Opens object `name` from the cache with `open`, downloading it
    /// first when the cache does not hold it. The open runs under the
    /// cache's lock, which eviction takes too: a file is never deleted
    /// between being found and being opened (an open file stays readable
    /// after). An object the store does not hold (a compaction replaced it
    /// since its manifest was read) is [`Error::NotFound`].
    pub fn open_file<T>(
        &self,
        objects: &Objects,
        name: &str,
        open: impl Fn(&Path) -> Result<T>,
    ) -> Result<T> {
        {
            let mut st = self.state.lock();
            st.tick += 1;
            let tick = st.tick;
            if let Some(e) = st.files.get_mut(name) {
                e.last_used = tick;
                self.hits.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("halite_file_cache_hits_total").increment(1);
                return open(&e.path);
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("halite_file_cache_misses_total").increment(1);
        let started = Instant::now();
        let Some((bytes, _)) = objects.get(name)? else {
            return Err(Error::NotFound(format!(
                "store file `{name}` is not on the object store (replaced since its manifest was read)"
            )));
        };
        let path = self.dir.join(name);
        let parent = path.parent().unwrap_or(&self.dir).to_path_buf();
        std::fs::create_dir_all(&parent)
            .map_err(|e| Error::io(&parent, "create a file cache directory", e))?;
        // A name of its own per download: two reads may fetch one file at
        // once, and each renames a whole file over the name.
        let mut tmp = tempfile::NamedTempFile::new_in(&parent)
            .map_err(|e| Error::io(&parent, "create a downloaded file", e))?;
        tmp.write_all(&bytes)
            .map_err(|e| Error::io(tmp.path(), "write a downloaded file", e))?;
        tmp.persist(&path)
            .map_err(|e| Error::io(&path, "name a downloaded file", e.error))?;
        metrics::counter!("halite_object_store_downloaded_bytes_total")
            .increment(bytes.len() as u64);
        metrics::histogram!("halite_object_store_download_seconds")
            .record(started.elapsed().as_secs_f64());
        let mut st = self.state.lock();
        st.tick += 1;
        let tick = st.tick;
        let size = bytes.len() as u64;
        if let Some(old) = st.files.insert(
            name.to_string(),
            Entry {
                path: path.clone(),
                size,
                last_used: tick,
            },
        ) {
            st.used -= old.size;
        }
        st.used += size;
        let opened = open(&path);
        self.evict(&mut st, name);
        metrics::gauge!("halite_file_cache_bytes").set(st.used as f64);
        opened
    }

    /// Deletes the least recently read files until the cache fits its
    /// budget; `keep` (just downloaded) stays even when it alone is over.
    fn evict(&self, st: &mut CacheState, keep: &str) {
        while st.used > self.budget {
            let Some(oldest) = st
                .files
                .iter()
                .filter(|(name, _)| name.as_str() != keep)
                .min_by_key(|(_, e)| e.last_used)
                .map(|(name, _)| name.clone())
            else {
                return;
            };
            if let Some(e) = st.files.remove(&oldest) {
                st.used -= e.size;
                let _ = std::fs::remove_file(&e.path);
                self.evictions.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("halite_file_cache_evictions_total").increment(1);
            }
        }
    }
}
