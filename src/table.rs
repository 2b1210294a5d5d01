//! A table as the layers above the regions see it: its regions in key
//! order, each reached through a [`RegionHandle`], the routing of a row to
//! its region, rows already split by region ([`RoutedRows`]), and a scan
//! across the regions ([`TableScanner`]).

use std::sync::Arc;

use crate::catalog::TableDescriptor;
use crate::cell::{EntryBatch, Row};
use crate::error::Result;
use crate::region::read::columns::{ColumnRead, ColumnSink, rows_by_column};
use crate::region::read::{CellSink, ContinuationToken, Get, RowScanner, RowView, Scan};
use crate::region::remote::{ReadReport, RemoteRegion};
use crate::region::{Region, RegionStats};

/// A region as everything above the regions reaches it: the store's
/// writers, table scans, queries, the API and telemetry. A region open in
/// this process is `Local`; in cluster mode a region another node owns is
/// `Remote`, read from what its owner published on the object store.
#[derive(Clone)]
pub enum RegionHandle {
    /// A region open in this process.
    Local(Arc<Region>),
    /// A region another node owns.
    Remote(Arc<RemoteRegion>),
}

impl RegionHandle {
    /// The region itself, when it is open here, for the store that opened
    /// it (writes, splits, recovery, shutdown).
    pub fn local(&self) -> Option<&Arc<Region>> {
        match self {
            RegionHandle::Local(r) => Some(r),
            RegionHandle::Remote(_) => None,
        }
    }

    pub fn id(&self) -> u64 {
        match self {
            RegionHandle::Local(r) => r.id(),
            RegionHandle::Remote(r) => r.id(),
        }
    }

    /// The region's start and end rows (end empty: the table's end).
    pub fn row_range(&self) -> (&[u8], &[u8]) {
        match self {
            RegionHandle::Local(r) => r.row_range(),
            RegionHandle::Remote(r) => r.row_range(),
        }
    }

    /// One row; `report` hears of a region another node owns read
    /// without its owner's MemStore edits.
    pub fn get(&self, get: &Get, report: Option<&ReadReport>) -> Result<Option<Row>> {
        match self {
            RegionHandle::Local(r) => r.get(get),
            RegionHandle::Remote(r) => r.get(get, report),
        }
    }

    /// A scanner over the region's rows in `scan`'s range; `report` as
    /// for [`RegionHandle::get`].
    pub fn scanner(&self, scan: &Scan, report: Option<&ReadReport>) -> Result<RowScanner> {
        match self {
            RegionHandle::Local(r) => r.scanner(scan),
            RegionHandle::Remote(r) => r.scanner(scan, report),
        }
    }

    /// As [`Region::scan_columns`]; `report` as for [`RegionHandle::get`].
    pub fn scan_columns(
        &self,
        scan: &Scan,
        read: ColumnRead,
        report: Option<&ReadReport>,
        sink: &mut dyn ColumnSink,
    ) -> Result<bool> {
        match self {
            RegionHandle::Local(r) => r.scan_columns(scan, read, sink),
            RegionHandle::Remote(r) => {
                rows_by_column(&mut r.scanner(scan, report)?, &scan.columns, sink)
            }
        }
    }

    /// Flushes the MemStores to store files (a region another node owns
    /// is flushed by its owner: nothing to do here).
    pub fn flush(&self) -> Result<()> {
        match self {
            RegionHandle::Local(r) => r.flush(),
            RegionHandle::Remote(_) => Ok(()),
        }
    }

    /// Asks the compaction threads to look at the region (a minor
    /// compaction if its files call for one).
    pub fn request_compaction(&self) {
        if let RegionHandle::Local(r) = self {
            r.request_compaction()
        }
    }

    /// Compacts now, on the caller's thread (the owner compacts a region
    /// another node owns).
    pub fn compact(&self, major: bool) -> Result<()> {
        match self {
            RegionHandle::Local(r) => r.compact(major),
            RegionHandle::Remote(_) => Ok(()),
        }
    }

    /// Store files per family.
    pub fn file_counts(&self) -> std::collections::BTreeMap<Vec<u8>, usize> {
        match self {
            RegionHandle::Local(r) => r.file_counts(),
            RegionHandle::Remote(r) => r.file_counts(),
        }
    }

    pub fn store_bytes(&self) -> u64 {
        match self {
            RegionHandle::Local(r) => r.store_bytes(),
            RegionHandle::Remote(r) => r.store_bytes(),
        }
    }

    pub fn memstore_bytes(&self) -> usize {
        match self {
            RegionHandle::Local(r) => r.memstore_bytes(),
            RegionHandle::Remote(_) => 0,
        }
    }

    pub fn stats(&self) -> &RegionStats {
        match self {
            RegionHandle::Local(r) => r.stats(),
            RegionHandle::Remote(r) => r.stats(),
        }
    }
}

/// An open table: its descriptor and its regions in key order.
pub struct Table {
    pub desc: TableDescriptor,
    pub(crate) regions: Vec<RegionHandle>,
    /// For one request's reads (cluster mode): which regions were read
    /// without their owner's MemStore edits (see [`Table::for_reads`]).
    pub reads: Option<Arc<ReadReport>>,
}

impl Table {
    pub fn new(desc: TableDescriptor, regions: Vec<RegionHandle>) -> Table {
        Table {
            desc,
            regions,
            reads: None,
        }
    }

    /// This table as one request reads it: the same regions, and a report
    /// of those read partially (a region whose owner did not answer).
    pub fn for_reads(&self) -> (Arc<Table>, Arc<ReadReport>) {
        let report = Arc::new(ReadReport::default());
        let table = Table {
            desc: self.desc.clone(),
            regions: self.regions.clone(),
            reads: Some(report.clone()),
        };
        (Arc::new(table), report)
    }

    /// Whether some region is owned by another node (cluster mode).
    pub fn has_remote_regions(&self) -> bool {
        self.regions
            .iter()
            .any(|r| matches!(r, RegionHandle::Remote(_)))
    }

    /// The oldest and newest cell versions (ms) the table holds (see
    /// [`Region::cell_time_range`]). `None` when it holds nothing, or when
    /// a region is another node's (not known here).
    pub fn cell_time_range(&self) -> Option<(u64, u64)> {
        let mut range: Option<(u64, u64)> = None;
        for r in &self.regions {
            if let Some((min, max)) = r.local()?.cell_time_range() {
                range = Some(range.map_or((min, max), |(lo, hi)| (lo.min(min), hi.max(max))));
            }
        }
        range
    }

    pub fn regions(&self) -> &[RegionHandle] {
        &self.regions
    }

    /// The regions whose range meets `scan`'s, in key order.
    fn regions_of(&self, scan: &Scan) -> Result<Vec<usize>> {
        let (start, stop) = scan.bounds()?;
        Ok((0..self.regions.len())
            .filter(|&i| {
                let r = &self.desc.regions[i];
                let before_stop = stop
                    .as_ref()
                    .is_none_or(|s| r.start.as_slice() < s.as_slice());
                let after_start = start
                    .as_ref()
                    .is_none_or(|s| r.end.is_empty() || r.end.as_slice() > s.as_slice());
                before_stop && after_start
            })
            .collect())
    }

    /// `scan` for region `i`: clipped to its range (the region intersects
    /// that with the scan's own bounds and continuation token), without
    /// the table-wide offset and limit.
    fn clip_to_region(&self, scan: &Scan, i: usize) -> Scan {
        let info = &self.desc.regions[i];
        let mut scan = Scan {
            offset: 0,
            limit: None,
            ..scan.clone()
        };
        if scan
            .start
            .as_ref()
            .is_none_or(|s| s.as_slice() < info.start.as_slice())
        {
            scan.start = Some(info.start.clone());
        }
        if !info.end.is_empty()
            && scan
                .stop
                .as_ref()
                .is_none_or(|s| s.as_slice() > info.end.as_slice())
        {
            scan.stop = Some(info.end.clone());
        }
        scan
    }

    /// The rows of a forward scan that names single columns, region after
    /// region, as [`RegionHandle::scan_columns`] gives them, until `sink`
    /// answers false.
    pub fn scan_columns(
        &self,
        scan: &Scan,
        read: ColumnRead,
        sink: &mut dyn ColumnSink,
    ) -> Result<()> {
        if scan.reverse || scan.offset > 0 || scan.limit.is_some() {
            return Err(crate::error::Error::InvalidInput(
                "a column read goes forward over every row: drop reverse, offset and limit".into(),
            ));
        }
        for i in self.regions_of(scan)? {
            let scan = self.clip_to_region(scan, i);
            if !self.regions[i].scan_columns(&scan, read, self.reads.as_deref(), sink)? {
                break;
            }
        }
        Ok(())
    }
}

/// The index of the region of `table` that holds `row`.
pub(crate) fn region_index(table: &Table, row: &[u8]) -> usize {
    table
        .desc
        .regions
        .partition_point(|r| r.start.as_slice() <= row)
        .saturating_sub(1)
}

/// Rows encoded for a table, split by its regions as they were when the
/// encoding started; the store checks the regions are still those (a
/// split since sends the rows through its own routing).
pub struct RoutedRows {
    /// The ids of the table's regions, in key order.
    pub region_ids: Vec<u64>,
    /// One batch per region, in the same order; empty where no row fell.
    pub batches: Vec<EntryBatch>,
    /// The salt generation of the schema that encoded the rows
    /// ([`crate::key::KeySchema::salt_generation`]).
    pub salt_generation: usize,
}

impl RoutedRows {
    pub fn rows(&self) -> usize {
        self.batches.iter().map(EntryBatch::rows).sum()
    }

    /// Cells in all rows.
    pub fn cells(&self) -> usize {
        self.batches.iter().map(EntryBatch::len).sum()
    }

    /// Every row in one batch, region after region (key order of regions).
    pub fn into_batch(self) -> EntryBatch {
        let mut out = EntryBatch::new();
        for b in &self.batches {
            for i in 0..b.rows() {
                out.push_row_from(b, i);
            }
        }
        out
    }
}

/// Streams a scan over a table's regions in key order (or reverse), one
/// region scanner at a time, clipped to each region's range.
pub struct TableScanner {
    table: Arc<Table>,
    scan: Scan,
    /// Regions still to read, in scan order.
    pending: Vec<usize>,
    current: Option<RowScanner>,
    to_skip: usize,
    remaining: Option<usize>,
    /// Key of the last row handed out (the continuation point).
    last_key: Option<Vec<u8>>,
}

impl TableScanner {
    pub fn new(table: Arc<Table>, scan: Scan) -> Result<Self> {
        let mut pending = table.regions_of(&scan)?;
        if !scan.reverse {
            pending.reverse(); // popped from the back
        }
        Ok(TableScanner {
            to_skip: scan.offset,
            remaining: scan.limit,
            table,
            scan,
            pending,
            current: None,
            last_key: None,
        })
    }

    /// After the rows ran out: a token to continue after the last row when
    /// the limit cut the answer short and rows remain.
    pub fn continuation(&mut self) -> Result<Option<ContinuationToken>> {
        if self.remaining != Some(0) {
            return Ok(None);
        }
        let Some(last) = self.last_key.take() else {
            return Ok(None);
        };
        self.remaining = Some(1);
        self.to_skip = 0;
        let more = self.next_view()?.is_some();
        self.remaining = Some(0);
        Ok(more.then_some(ContinuationToken {
            row: last,
            reverse: self.scan.reverse,
        }))
    }

    fn open_next(&mut self) -> Result<bool> {
        let Some(i) = self.pending.pop() else {
            return Ok(false);
        };
        let scan = self.table.clip_to_region(&self.scan, i);
        self.current = Some(self.table.regions[i].scanner(&scan, self.table.reads.as_deref())?);
        Ok(true)
    }

    pub fn next_row(&mut self) -> Result<Option<Row>> {
        Ok(self.next_view()?.map(|v| v.to_row()))
    }

    /// Streams the rest of the scan's cells to `sink` without building
    /// rows (see [`RowScanner::scan_cells`]); false when the sink ended it.
    pub fn scan_cells<S: CellSink>(&mut self, sink: &mut S) -> Result<bool> {
        if self.to_skip > 0 || self.remaining.is_some() {
            while let Some(row) = self.next_view()? {
                if !crate::region::read::feed_row(&row, sink) {
                    self.current = None;
                    self.pending.clear();
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        loop {
            if self.current.is_none() && !self.open_next()? {
                return Ok(true);
            }
            let ran_out = match self.current.as_mut() {
                Some(scanner) => scanner.scan_cells(sink)?,
                None => true,
            };
            self.current = None;
            if !ran_out {
                self.pending.clear();
                return Ok(false);
            }
        }
    }

    /// The next row, borrowed until the next call: no allocation per cell.
    pub fn next_view(&mut self) -> Result<Option<RowView<'_>>> {
        if self.remaining == Some(0) {
            return Ok(None);
        }
        loop {
            if self.current.is_none() && !self.open_next()? {
                return Ok(None);
            }
            let has_row = self
                .current
                .as_mut()
                .expect("opened above")
                .next_view()?
                .is_some();
            if !has_row {
                self.current = None;
                continue;
            }
            if self.to_skip > 0 {
                self.to_skip -= 1;
                continue;
            }
            let view = self.current.as_ref().and_then(|c| c.current_view());
            if let Some(r) = self.remaining.as_mut() {
                *r -= 1;
                // Only a scan the limit cut short continues, from its last
                // row: kept then, not copied for every row.
                if *r == 0
                    && let Some(v) = &view
                {
                    let last = self.last_key.get_or_insert_with(Vec::new);
                    last.clear();
                    last.extend_from_slice(v.key());
                }
            }
            return Ok(view);
        }
    }
}
