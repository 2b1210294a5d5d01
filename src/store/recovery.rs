//! Opening a store after a stop or a crash: WAL replay into the regions,
//! and what dropped tables left behind.

use std::collections::HashMap;

use super::Store;
use super::region_dir;
use crate::error::{Error, Result};
use crate::region::{RecoveringRegion, RegionDescriptor};

impl Store {
    /// Replays each shard's WAL once, into all of its regions; the shards
    /// in parallel, as they were written.
    pub(super) fn replay_wals(
        &self,
        recovering: &mut HashMap<u64, RecoveringRegion>,
    ) -> Result<()> {
        let now = self.clock.now_ms();
        let shard_count = self.shards.len() as u64;
        let mut per_shard: Vec<HashMap<u64, RecoveringRegion>> =
            (0..self.shards.len()).map(|_| HashMap::new()).collect();
        for (id, region) in recovering.drain() {
            per_shard[(id % shard_count) as usize].insert(id, region);
        }
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let handles: Vec<_> = per_shard
                .iter_mut()
                .zip(&self.shards)
                .filter(|(regions, _)| !regions.is_empty())
                .map(|(regions, shard)| {
                    scope.spawn(move || -> Result<()> {
                        let after: HashMap<u64, u64> = regions
                            .values()
                            .map(|r| (r.id(), r.flushed_seq()))
                            .collect();
                        let started = std::time::Instant::now();
                        let (mut records, mut rows) = (0u64, 0u64);
                        shard.wal.replay_regions(&after, |edits| {
                            if let Some(region) = regions.get_mut(&edits.region_id) {
                                records += 1;
                                rows += edits.rows.len() as u64;
                                region.replay(edits, now);
                            }
                        })?;
                        if records > 0 {
                            tracing::info!(
                                wal = %shard.wal.dir().display(),
                                regions = after.len(),
                                records,
                                rows,
                                seconds = started.elapsed().as_secs_f64(),
                                "replayed unflushed edits from the WAL"
                            );
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a WAL replay thread panicked"))
                .collect()
        });
        for regions in per_shard {
            recovering.extend(regions);
        }
        results.into_iter().collect()
    }

    pub(super) fn load_region(
        &self,
        info: &crate::catalog::RegionInfo,
        families: &[crate::schema::FamilyDescriptor],
    ) -> Result<RecoveringRegion> {
        RecoveringRegion::load(
            region_dir(&self.dir, info.id),
            RegionDescriptor {
                id: info.id,
                families: families.to_vec(),
                start: info.start.clone(),
                end: info.end.clone(),
            },
            self.options.region.clone(),
            self.cache.clone(),
        )
    }

    /// Region directories and WAL edits of regions the catalog no longer
    /// names (a drop that a crash interrupted).
    pub(super) fn remove_leftovers(&self) -> Result<()> {
        let live = self.catalog.region_ids();
        let regions = self.dir.join("regions");
        if let Ok(entries) = std::fs::read_dir(&regions) {
            for e in entries.flatten() {
                let id = e.file_name().to_string_lossy().parse::<u64>().ok();
                if id.is_some_and(|id| !live.contains(&id)) {
                    crate::fsutil::remove_dir_all(&e.path())
                        .map_err(|err| Error::io(e.path(), "remove dropped region", err))?;
                }
            }
        }
        for s in &self.shards {
            s.wal.forget_regions_except(&live);
        }
        Ok(())
    }
}
