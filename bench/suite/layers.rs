//! What each storage layer saves: the same TSBS rows flushed into store
//! files under each family setting, from whole keys and raw values up to
//! TIME_SERIES blocks, measured in bytes per field value.

use std::path::Path;
use std::sync::Arc;

use halite::cell::RowMutation;
use halite::clock::SystemClock;
use halite::region::sst::cache::BlockCache;
use halite::region::wal::{Wal, WalOptions};
use halite::region::{Region, RegionDescriptor, RegionOptions};
use halite::schema::{Compression, DataBlockEncoding, Durability, FamilyDescriptor};
use halite::tsbs::{self, CPU_FIELDS};

pub struct Layer {
    pub setting: &'static str,
    pub bytes_per_value: f64,
}

const SETTINGS: [(&str, DataBlockEncoding, Compression); 5] = [
    (
        "NONE (whole keys, raw values)",
        DataBlockEncoding::None,
        Compression::None,
    ),
    ("PREFIX", DataBlockEncoding::Prefix, Compression::None),
    (
        "PREFIX + SNAPPY",
        DataBlockEncoding::Prefix,
        Compression::Snappy,
    ),
    (
        "TIME_SERIES",
        DataBlockEncoding::TimeSeries,
        Compression::None,
    ),
    (
        "TIME_SERIES + SNAPPY",
        DataBlockEncoding::TimeSeries,
        Compression::Snappy,
    ),
];

pub fn run(dir: &Path, hosts: u64, steps: u64) -> Vec<Layer> {
    let rows: Vec<RowMutation> = (0..hosts)
        .flat_map(|h| {
            (0..steps).map(move |s| tsbs::cpu_row("cpu", h, s, tsbs::T0_MS + s * tsbs::INTERVAL_MS))
        })
        .collect();
    let values = rows.len() * CPU_FIELDS.len();
    SETTINGS
        .iter()
        .map(|&(setting, encoding, compression)| {
            let d = dir.join("layers");
            let _ = std::fs::remove_dir_all(&d);
            let wal = Arc::new(Wal::open(d.join("wal"), WalOptions::default()).expect("wal"));
            let family = FamilyDescriptor::new("cpu")
                .data_block_encoding(encoding)
                .compression(compression);
            let region = Region::open(
                d.join("region"),
                RegionDescriptor::new(1, vec![family]),
                RegionOptions {
                    background: false,
                    ..RegionOptions::default()
                },
                wal.clone(),
                Arc::new(SystemClock),
                BlockCache::new(16 << 20),
            )
            .expect("region");
            for chunk in rows.chunks(1000) {
                region.mutate(chunk, Durability::AsyncWal).expect("write");
            }
            region.flush().expect("flush");
            region.compact(true).expect("compact");
            let bytes: u64 = region
                .file_paths()
                .iter()
                .map(|p| std::fs::metadata(p).expect("stat").len())
                .sum();
            region.close().expect("close");
            wal.close();
            let _ = std::fs::remove_dir_all(&d);
            let layer = Layer {
                setting,
                bytes_per_value: bytes as f64 / values as f64,
            };
            println!(
                "layers {setting}: {:.2} bytes per value",
                layer.bytes_per_value
            );
            layer
        })
        .collect()
}
