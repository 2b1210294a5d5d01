//! Region splits: an oversized region becomes two daughters, crash-safely
//! (see `docs/durability.md`), while writes to it are routed again.

use std::sync::Arc;

use super::Store;
use super::region_dir;
use crate::catalog::{TableDescriptor, TableName};
use crate::error::{Error, Result};
use crate::region::Region;
use crate::schema::FamilySpec;
use crate::table::{RegionHandle, Table};

impl Store {
    /// Splits every region whose store files pass `max_region_size` (one
    /// split per region per call); returns how many split. Daughters are
    /// major-compacted right away, which drops the rows each holds of the
    /// other and lets them split again later.
    pub fn split_oversized(&self) -> Result<usize> {
        let tables: Vec<Arc<Table>> = self.tables.read().values().cloned().collect();
        let mut splits = 0;
        for t in tables {
            // Daughters of a split that a crash cut off before their
            // compaction still hold foreign rows; rewrite them first.
            for r in t
                .regions
                .iter()
                .filter(|r| r.local().is_some_and(|r| r.has_foreign_rows()))
            {
                r.compact(true)?;
            }
            let big: Vec<u64> = t
                .regions
                .iter()
                .filter(|r| r.store_bytes() > self.options.max_region_size)
                .map(|r| r.id())
                .collect();
            for id in big {
                if let Some(daughters) = self.split_region(&t.desc.name, id)? {
                    splits += 1;
                    for d in daughters {
                        d.compact(true)?;
                    }
                }
            }
        }
        Ok(splits)
    }

    /// Splits region `id` of `name` at its middle row; `None` when it has
    /// no row to split at (or is gone). Crash-safe: the catalog records the
    /// intent first, the daughters are made of hard links to the parent's
    /// flushed files and synced, and one catalog update replaces the parent
    /// by the daughters; a crash before that update leaves the parent as it
    /// was (restart removes the daughters), a crash after it leaves the
    /// daughters (restart removes the parent's directory). Writes that meet
    /// the closed parent are routed again to the daughters.
    pub fn split_region(&self, name: &TableName, id: u64) -> Result<Option<[Arc<Region>; 2]>> {
        let _ddl = self.ddl.lock();
        let Ok(table) = self.table(name) else {
            return Ok(None);
        };
        let Some(i) = table.regions.iter().position(|r| r.id() == id) else {
            return Ok(None);
        };
        // A region another node owns is split by its owner.
        let Some(parent) = table.regions[i].local().cloned() else {
            return Ok(None);
        };
        let Some(at) = parent.split_row() else {
            return Ok(None);
        };
        let intent = self.catalog.begin_split(name, id, &at)?;
        crate::failpoint::hit("split-after-intent");
        let outcome = (|| -> Result<TableDescriptor> {
            parent.close_for_split()?;
            crate::failpoint::hit("split-after-parent-flush");
            for d in intent.daughters {
                parent.link_files_into(&region_dir(&self.dir, d))?;
            }
            crate::failpoint::hit("split-after-daughters");
            self.catalog.finish_split(&intent)
        })();
        let desc = match outcome {
            Ok(desc) => desc,
            Err(e) => {
                // Not committed: back to the parent as it is on disk.
                let _ = self.catalog.abandon_split(&intent);
                for d in intent.daughters {
                    let _ = crate::fsutil::remove_dir_all(&region_dir(&self.dir, d));
                }
                let families: Vec<_> = table
                    .desc
                    .families
                    .iter()
                    .map(FamilySpec::descriptor)
                    .collect();
                let mut regions = table.regions.clone();
                regions[i] = RegionHandle::Local(Arc::new(
                    self.open_region(&table.desc.regions[i], &families)?,
                ));
                self.tables.write().insert(
                    name.clone(),
                    Arc::new(Table::new(table.desc.clone(), regions)),
                );
                return Err(e);
            }
        };
        crate::failpoint::hit("split-after-commit");
        let families: Vec<_> = desc.families.iter().map(FamilySpec::descriptor).collect();
        let mut regions = table.regions.clone();
        let mut daughters = Vec::with_capacity(2);
        for info in &desc.regions[i..i + 2] {
            daughters.push(Arc::new(self.open_region(info, &families)?));
        }
        regions.splice(
            i..i + 1,
            daughters.iter().map(|d| RegionHandle::Local(d.clone())),
        );
        self.tables
            .write()
            .insert(name.clone(), Arc::new(Table::new(desc, regions)));
        // Everything of the parent is in the daughters' files now.
        self.shard_of(id).wal.mark_flushed(id, u64::MAX);
        let d = region_dir(&self.dir, id);
        crate::fsutil::remove_dir_all(&d).map_err(|e| Error::io(&d, "remove split parent", e))?;
        let [a, b]: [Arc<Region>; 2] = daughters
            .try_into()
            .map_err(|_| Error::Internal("a split makes two daughters".into()))?;
        metrics::counter!("halite_region_splits_total", "table" => name.to_string()).increment(1);
        tracing::info!(
            table = %name,
            parent = id,
            daughters = %format!("{} {}", a.id(), b.id()),
            at = %crate::codec::to_hex(&at),
            "region split"
        );
        Ok(Some([a, b]))
    }
}
