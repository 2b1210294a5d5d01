//! A region's shared state: what its writers, readers, flushes and
//! compactions all hold (`Arc<Inner>`), its counters, and the small
//! decisions made on it (is a flush due, is the region open). The write
//! path (`write.rs`), flushes and compactions add to it; it imports none of
//! them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex, RwLock};

use super::maintenance::{Maintained, Maintenance};
use super::manifest::Manifest;
use super::memstore::cursor::MemCursor;
use super::memstore::{MemStore, Mvcc};
use super::options::RegionOptions;
use super::read::columns::{
    ColumnRead, ColumnRules, ColumnSink, ColumnSource, read_columns, rows_by_column,
};
use super::read::merge::{Merge, Source};
use super::read::{Get, RowScanner, Scan};
use super::shared_files::SharedFiles;
use super::sst::cache::BlockCache;
use super::sst::columns::ColumnSelect;
use super::sst::{Projection, SstReader};
use super::wal::Wal;
use super::wal::record::{SourcePosition, SourceShard};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::schema::FamilyDescriptor;

/// Counters for metrics, benchmarks and tests.
#[derive(Debug, Default)]
pub struct RegionStats {
    /// Key and value bytes of the cells written (not those replayed from
    /// the WAL): the denominator of write amplification.
    pub ingested_bytes: AtomicU64,
    pub flushes: AtomicU64,
    pub flushed_bytes: AtomicU64,
    pub flush_micros: AtomicU64,
    pub compactions: AtomicU64,
    pub compacted_bytes_in: AtomicU64,
    pub compacted_bytes_out: AtomicU64,
    /// Data blocks minor compactions wrote as their files held them
    /// (no other input's key fell inside), and data blocks they decoded
    /// and merged entry by entry.
    pub compaction_blocks_copied: AtomicU64,
    pub compaction_blocks_merged: AtomicU64,
    pub expired_files_dropped: AtomicU64,
    pub writer_stalls: AtomicU64,
    pub writer_stall_micros: AtomicU64,
    pub files_skipped_by_bloom: AtomicU64,
    /// Files a read left out because their time range cannot match.
    pub files_skipped_by_time: AtomicU64,
    /// Scans the column reader made (not a row scanner).
    pub column_reads: AtomicU64,
    /// Flushes that failed (the data stays in the MemStore and the WAL,
    /// and the next flush tries again).
    pub flush_failures: AtomicU64,
}

/// The last flush failed, and keeps failing until one succeeds.
#[derive(Debug, Clone)]
pub struct FlushTrouble {
    pub error: String,
    /// The disk is full (`ENOSPC`).
    pub no_space: bool,
    pub since: Instant,
    pub(crate) last_logged: Instant,
}

/// What readers snapshot: MemStores newest first, files per family oldest
/// first.
#[derive(Debug, Clone)]
pub(crate) struct State {
    pub(crate) active: Arc<MemStore>,
    pub(crate) flushing: Vec<Arc<MemStore>>,
    pub(crate) files: BTreeMap<Vec<u8>, Vec<Arc<SstReader>>>,
}

pub(crate) enum Work {
    Flush,
    Compact,
    Stop,
}

pub(crate) struct Inner {
    pub(crate) id: u64,
    /// Rows this region serves (see [`crate::region::RegionDescriptor`]).
    pub(crate) rows: (Vec<u8>, Vec<u8>),
    pub(crate) dir: PathBuf,
    pub(crate) options: RegionOptions,
    pub(crate) families: Arc<HashMap<Vec<u8>, FamilyDescriptor>>,
    pub(crate) family_order: Vec<Vec<u8>>,
    pub(crate) wal: Arc<Wal>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) cache: Arc<BlockCache>,
    pub(crate) write_lock: Mutex<()>,
    pub(crate) mvcc: Mvcc,
    pub(crate) state: RwLock<State>,
    pub(crate) manifest: Mutex<Manifest>,
    /// Held by a flush or compaction from reading the manifest to making
    /// its change current, so changes never overlap.
    pub(crate) manifest_change: Mutex<()>,
    pub(crate) next_file_id: AtomicU64,
    pub(crate) flush_lock: Mutex<()>,
    pub(crate) compaction_lock: Mutex<()>,
    /// Writers blocked on memory wait here; flushes notify.
    pub(crate) room: (Mutex<()>, Condvar),
    pub(crate) poisoned: Mutex<Option<String>>,
    /// Set while flushes fail, cleared by the next that succeeds.
    pub(crate) flush_trouble: Mutex<Option<FlushTrouble>>,
    pub(crate) closed: AtomicBool,
    pub(crate) stats: RegionStats,
    pub(crate) work_tx: Sender<Work>,
    pub(crate) compact_tx: Sender<Work>,
    /// Shared flush and compaction threads, when the region has no threads
    /// of its own. Weak: the store owns them, and a pool thread must never
    /// end up holding the last reference to its own pool.
    pub(crate) maintenance: Option<std::sync::Weak<Maintenance>>,
    /// A flush request is queued: later writes need not queue another.
    pub(crate) flush_requested: AtomicBool,
    /// A compaction request is queued on the shared threads (see
    /// `Maintenance::request_compaction`).
    pub(crate) compaction_requested: AtomicBool,
    /// Clock time before which no periodic major compaction is tried
    /// again, after one failed (a full disk, say): the minor compactions
    /// go on meanwhile instead of a failing rewrite every time.
    pub(crate) periodic_major_retry_ms: AtomicU64,
    /// A flush was asked for from outside (the store's memory limit): due
    /// whatever the MemStore's size.
    pub(crate) flush_forced: AtomicBool,
    /// Source positions (Kafka's, say) carried by the writes this region
    /// took (and recovered from its manifest and WAL); the manifest keeps
    /// them.
    pub(crate) positions: Mutex<BTreeMap<SourceShard, u64>>,
    /// Set when the region's files and manifest live on the object store
    /// (cluster mode): flushes and compactions upload and publish there,
    /// and writes skip the WAL (the source topic is the log).
    pub(crate) shared: Option<Arc<SharedFiles>>,
}

pub(crate) fn family_dir(dir: &Path, family: &[u8]) -> PathBuf {
    dir.join(String::from_utf8_lossy(family).as_ref())
}

pub(crate) fn note_position(positions: &mut BTreeMap<SourceShard, u64>, o: &SourcePosition) {
    let at = positions
        .entry((o.stream.clone(), o.shard))
        .or_insert(o.durable_below);
    *at = (*at).max(o.durable_below);
}

impl Inner {
    pub(crate) fn memstore_bytes(&self) -> usize {
        let s = self.state.read();
        s.active.bytes() + s.flushing.iter().map(|m| m.bytes()).sum::<usize>()
    }

    pub(crate) fn needs_flush(&self) -> bool {
        self.state.read().active.bytes() >= self.options.flush_size
    }

    /// Notes how a flush went: a failure is logged (the first, then at most
    /// every 30 s while they go on) and counted; a success after failures
    /// is logged once.
    pub(crate) fn note_flush(&self, outcome: &Result<()>) {
        let mut trouble = self.flush_trouble.lock();
        match outcome {
            Ok(()) => {
                if let Some(t) = trouble.take() {
                    tracing::info!(
                        region = self.id,
                        failing_s = t.since.elapsed().as_secs_f64(),
                        "flushes succeed again"
                    );
                }
            }
            Err(e) => {
                self.stats.flush_failures.fetch_add(1, Ordering::Relaxed);
                let no_space = e.is_no_space();
                let now = Instant::now();
                let log = trouble
                    .as_ref()
                    .is_none_or(|t| now.duration_since(t.last_logged) >= Duration::from_secs(30));
                if log {
                    tracing::error!(
                        region = self.id,
                        error = %e,
                        no_space,
                        "flushing the MemStore failed; its data is safe in {} and \
                         the flush is retried, but writes wait once MemStores fill up{}",
                        if self.shared.is_some() { "the source topic" } else { "the WAL" },
                        if no_space { " (the disk is full: free space on it)" } else { "" }
                    );
                }
                let since = trouble.as_ref().map_or(now, |t| t.since);
                *trouble = Some(FlushTrouble {
                    error: e.to_string(),
                    no_space,
                    since,
                    last_logged: if log {
                        now
                    } else {
                        trouble.as_ref().map_or(now, |t| t.last_logged)
                    },
                });
            }
        }
    }

    pub(crate) fn poison(&self, cause: String) {
        self.poisoned.lock().get_or_insert(cause);
        self.mvcc.poison();
        self.room.1.notify_all();
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        self.check_not_fenced()?;
        if let Some(cause) = self.poisoned.lock().clone() {
            return Err(Error::Poisoned(cause));
        }
        Ok(())
    }

    /// Refuses work once another node took the region's shard over.
    pub(crate) fn check_not_fenced(&self) -> Result<()> {
        match &self.shared {
            Some(s) if s.owner().is_fenced() => Err(s.owner().fence_error()),
            _ => Ok(()),
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Whether the MemStores should be flushed now: the active one is full
    /// or old, or together they are over the blocking limit.
    pub(crate) fn flush_due(&self) -> bool {
        let first = self.state.read().active.first_write_ms();
        let aged = first != 0
            && self.clock.now_ms().saturating_sub(first)
                >= self.options.flush_age.as_millis() as u64;
        aged || self.flush_forced.load(Ordering::SeqCst)
            || self.needs_flush()
            || self.memstore_bytes() >= self.blocking_limit()
            || self.positions_to_publish()
    }

    /// A region on the object store whose MemStore is empty while its
    /// source positions moved (messages without rows for it) publishes
    /// them as often as it would flush by age.
    fn positions_to_publish(&self) -> bool {
        let Some(shared) = &self.shared else {
            return false;
        };
        shared.since_published() >= self.options.flush_age
            && self.state.read().active.is_empty()
            && *self.positions.lock() != self.manifest.lock().positions
    }

    pub(crate) fn blocking_limit(&self) -> usize {
        self.options
            .flush_size
            .saturating_mul(self.options.blocking_multiplier.max(1))
    }

    pub(crate) fn clear_flush_request(&self) {
        self.flush_requested.store(false, Ordering::SeqCst);
    }

    /// Queues one flush request; more writes before it is served add none.
    pub(crate) fn request_flush(self: &Arc<Self>) {
        if self.flush_requested.swap(true, Ordering::SeqCst) {
            return;
        }
        let queued = match &self.maintenance {
            Some(m) => m
                .upgrade()
                .is_some_and(|m| m.request_flush(&(self.clone() as Arc<dyn Maintained>))),
            None => self.work_tx.try_send(Work::Flush).is_ok(),
        };
        if !queued {
            // Nothing will be served for this request: let the next write
            // ask again instead of waiting for the timer.
            self.clear_flush_request();
        }
    }

    pub(crate) fn request_compaction(self: &Arc<Self>) {
        match &self.maintenance {
            Some(m) => {
                if let Some(m) = m.upgrade() {
                    m.request_compaction(&(self.clone() as Arc<dyn Maintained>));
                }
            }
            None => {
                // A pending request already covers this one.
                let _ = self.compact_tx.try_send(Work::Compact);
            }
        }
    }

    /// One of a write's two conditions (in the MemStore, durable) is met;
    /// the second completes it.
    pub(crate) fn pass_gate(self: &Arc<Self>, gate: &AtomicU8, last_seq: u64) {
        if gate.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.mvcc.complete(last_seq);
            self.after_write();
        }
    }

    pub(crate) fn after_write(self: &Arc<Self>) {
        if self.needs_flush() {
            self.request_flush();
        }
    }

    /// Reads work on a closed region too (it holds its last state): a reader
    /// that started before a split or an alter finishes on the old region.
    pub(crate) fn scanner(&self, scan: &Scan, get: Option<&Get>) -> Result<RowScanner> {
        let state = self.state.read().clone();
        let read_point = self.mvcc.read_point();
        self.scanner_on(&state, read_point, scan, get)
    }

    fn scanner_on(
        &self,
        state: &State,
        read_point: u64,
        scan: &Scan,
        get: Option<&Get>,
    ) -> Result<RowScanner> {
        let mut sources = Vec::new();
        for m in std::iter::once(&state.active).chain(&state.flushing) {
            sources.push(Source::Mem(MemCursor::new(m.clone(), read_point)));
        }
        add_file_sources(&state.files, scan, get, &self.stats, &mut sources)?;
        RowScanner::new(
            Merge::new(sources),
            self.families.clone(),
            self.clock.now_ms(),
            scan,
        )
    }

    /// The rows of a scan that names single columns
    /// (`scan.columns.columns`), each given to `sink` with its cells'
    /// values by their column's index there, until it answers false (then
    /// false). The column reader ([`super::read::columns`]) reads them,
    /// as `read` says, when the scan and the sources allow it; otherwise a
    /// [`RowScanner`] on the same snapshot does, with the same answer.
    pub(crate) fn scan_columns(
        &self,
        scan: &Scan,
        read: ColumnRead,
        sink: &mut dyn ColumnSink,
    ) -> Result<bool> {
        scan.validate()?;
        let columns = &scan.columns;
        if columns.columns.is_empty() || !columns.families.is_empty() {
            return Err(Error::InvalidInput(
                "a column read names single columns: add them to the scan's columns".into(),
            ));
        }
        let state = self.state.read().clone();
        let read_point = self.mvcc.read_point();
        let mut scanner = match self.column_read_family(scan) {
            None => self.scanner_on(&state, read_point, scan, None)?,
            Some(family) => {
                let mut files = Vec::new();
                for_each_file_to_read(&state.files, scan, None, &self.stats, |_, reader| {
                    files.push(reader.clone());
                })?;
                let memstores = || std::iter::once(&state.active).chain(&state.flushing);
                let markers = memstores().any(|m| m.delete_markers() > 0)
                    || files.iter().any(|f| f.meta().delete_markers > 0);
                if !markers {
                    let (start, stop) = scan.bounds()?;
                    let qualifiers: Vec<Vec<u8>> =
                        columns.columns.iter().map(|(_, q)| q.clone()).collect();
                    let select = ColumnSelect {
                        family: &family.name,
                        qualifiers: &qualifiers,
                        start: start.as_deref().unwrap_or_default(),
                        stop: stop.as_deref(),
                    };
                    let sources = memstores()
                        .map(|m| ColumnSource::Mem(MemCursor::new(m.clone(), read_point)))
                        .chain(files.into_iter().map(ColumnSource::File))
                        .collect();
                    let rules = ColumnRules {
                        family: &family,
                        now_ms: self.clock.now_ms(),
                        time_range: scan.time_range,
                        max_rows: match read {
                            ColumnRead::Fold => None,
                            ColumnRead::FirstRows(n) => Some(n.max(1)),
                        },
                    };
                    self.stats.column_reads.fetch_add(1, Ordering::Relaxed);
                    return read_columns(sources, &select, &rules, sink);
                }
                let projection = columns.projection_for(&family.name).map(Arc::new);
                let sources = memstores()
                    .map(|m| Source::Mem(MemCursor::new(m.clone(), read_point)))
                    .chain(
                        files
                            .iter()
                            .map(|f| Source::File(f.iter_projected(projection.clone()))),
                    )
                    .collect();
                RowScanner::new(
                    Merge::new(sources),
                    self.families.clone(),
                    self.clock.now_ms(),
                    scan,
                )?
            }
        };
        rows_by_column(&mut scanner, columns, sink)
    }

    /// The family a column reader may read `scan` of: a forward scan of
    /// single columns of one family, without paging, filters, a key time
    /// window, a limit per series or more than one version. (Its sources must also hold no delete marker.) `None`:
    /// a [`RowScanner`] must read it.
    fn column_read_family(&self, scan: &Scan) -> Option<FamilyDescriptor> {
        let (family, _) = scan.columns.columns.first()?;
        let shaped = !scan.reverse
            && scan.offset == 0
            && scan.limit.is_none()
            && scan.filters.is_empty()
            && scan.key_window.is_none()
            && scan.rows_per_series.is_none()
            && scan.max_versions == 1
            && scan.columns.families.is_empty()
            && scan.columns.columns.iter().all(|(f, _)| f == family);
        shaped.then(|| self.families.get(family).cloned()).flatten()
    }
}

/// Adds a scan's sources from store files (per family, newest first),
/// leaving out the files that cannot hold an answer.
pub(crate) fn add_file_sources(
    files: &BTreeMap<Vec<u8>, Vec<Arc<SstReader>>>,
    scan: &Scan,
    get: Option<&Get>,
    stats: &RegionStats,
    sources: &mut Vec<Source>,
) -> Result<()> {
    let mut projection: Option<(&[u8], Option<Arc<Projection>>)> = None;
    for_each_file_to_read(files, scan, get, stats, |family, reader| {
        if projection.as_ref().is_none_or(|(f, _)| *f != family) {
            projection = Some((family, scan.columns.projection_for(family).map(Arc::new)));
        }
        let p = projection.as_ref().and_then(|(_, p)| p.clone());
        sources.push(Source::File(reader.iter_projected(p)));
    })
}

/// Each store file a scan reads (per family, newest first), leaving out
/// the files that cannot hold an answer.
fn for_each_file_to_read<'f>(
    files: &'f BTreeMap<Vec<u8>, Vec<Arc<SstReader>>>,
    scan: &Scan,
    get: Option<&Get>,
    stats: &RegionStats,
    mut read: impl FnMut(&'f [u8], &'f Arc<SstReader>),
) -> Result<()> {
    let (start, stop) = scan.bounds()?;
    for (family, files) in files {
        if !scan.columns.wants_family(family) {
            continue;
        }
        for reader in files.iter().rev() {
            if !reader.overlaps_rows(start.as_deref(), stop.as_deref()) {
                continue;
            }
            // Nothing in a file entirely older than the range can change
            // the answer: its puts are out of range and older than any
            // in range, and its markers only mask older puts.
            if reader.meta().max_ts < scan.time_range.min {
                stats.files_skipped_by_time.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // A file entirely newer than the range is still read: its
            // versions count against VERSIONS before the range applies,
            // and its markers may mask puts in range. Unless versions are
            // key times: then a newer put is of another row.
            if scan.versions_are_key_times
                && reader.meta().min_ts >= scan.time_range.max
                && reader.meta().delete_markers == 0
            {
                stats.files_skipped_by_time.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if get.is_none() && !reader.may_contain_rows(start.as_deref(), stop.as_deref()) {
                stats.files_skipped_by_bloom.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if let Some(get) = get
                && !bloom_may_match(reader, get, family)
            {
                stats.files_skipped_by_bloom.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            read(family, reader);
        }
    }
    Ok(())
}

fn bloom_may_match(reader: &SstReader, get: &Get, family: &[u8]) -> bool {
    let qualifiers: Vec<&[u8]> = get
        .columns
        .columns
        .iter()
        .filter(|(f, _)| f == family)
        .map(|(_, q)| q.as_slice())
        .collect();
    let whole_family = get.columns.is_all() || get.columns.families.iter().any(|f| f == family);
    if whole_family || qualifiers.is_empty() {
        return reader.may_contain_row(&get.row);
    }
    // Family delete markers live at the empty qualifier: probe it too.
    qualifiers
        .iter()
        .chain(std::iter::once(&&b""[..]))
        .any(|q| reader.may_contain_column(&get.row, q))
}
