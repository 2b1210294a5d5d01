//! The query engine: the store's tables read through the query pool. The
//! store only holds and writes data; everything that plans and runs a
//! logical query over it starts here.

use std::sync::Arc;

use super::aggregate::aggregate;
use super::pool::QueryPool;
use super::rows::{QueryRows, delete, run};
use super::series_list::{SeriesListing, list_series};
use super::{AggregatePage, Query, QueryPage};
use crate::catalog::TableName;
use crate::error::Result;
use crate::region::remote::ReadReport;
use crate::store::Store;
use crate::table::Table;

/// Runs logical queries over one store's tables with a bounded pool of
/// bucket-scan threads.
pub struct QueryEngine {
    store: Arc<Store>,
    pool: Arc<QueryPool>,
}

impl QueryEngine {
    /// `threads` run bucket scans for every query together (the
    /// `server.query_threads` setting; two per core by default).
    pub fn new(store: Arc<Store>, threads: usize) -> Self {
        QueryEngine {
            store,
            pool: Arc::new(QueryPool::new(threads)),
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// A logical query's rows one at a time, for answers that stream.
    pub fn query_rows(&self, name: &TableName, q: &Query) -> Result<QueryRows> {
        QueryRows::new(self.store.table(name)?, self.pool.clone(), q)
    }

    /// Deletes the points a query selects (see [`delete`]), durably
    /// as the table's writes are; returns the rows reached.
    pub fn delete_points(&self, name: &TableName, q: &Query) -> Result<u64> {
        delete(self.store.table(name)?, self.pool.clone(), q, |rows| {
            self.store.write(name, rows, None)
        })
    }

    /// A logical series query (see [`run`]): one page of rows.
    pub fn query(&self, name: &TableName, q: &Query) -> Result<QueryPage> {
        let (table, report) = self.table_for_read(name)?;
        let mut page = run(table, self.pool.clone(), q)?;
        page.partial = report.map(|r| r.missing()).unwrap_or_default();
        Ok(page)
    }

    /// A logical series query with aggregation pushed into the bucket scans.
    pub fn aggregate(&self, name: &TableName, q: &Query) -> Result<AggregatePage> {
        let (table, report) = self.table_for_read(name)?;
        let mut page = aggregate(table, &self.pool, q)?;
        page.partial = report.map(|r| r.missing()).unwrap_or_default();
        Ok(page)
    }

    /// Up to `limit` series of a table of declared key fields, one seek
    /// each (see [`list_series`]).
    pub fn series(&self, name: &TableName, limit: usize) -> Result<SeriesListing> {
        let (table, _) = self.table_for_read(name)?;
        list_series(&table, limit)
    }

    /// The table as one request reads it: in cluster mode with a report of
    /// the regions another node owns that it read without their MemStore
    /// edits (their owner did not answer).
    fn table_for_read(&self, name: &TableName) -> Result<(Arc<Table>, Option<Arc<ReadReport>>)> {
        let table = self.store.table(name)?;
        if !table.has_remote_regions() {
            return Ok((table, None));
        }
        let (table, report) = table.for_reads();
        Ok((table, Some(report)))
    }
}
