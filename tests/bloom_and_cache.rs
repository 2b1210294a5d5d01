//! Gets skip store files by bloom filter; the block cache serves repeated
//! reads, respects BLOCKCACHE => false, and stays within its budget.

mod common;

use std::sync::atomic::Ordering;

use common::{Harness, foreground_options, small_wal};
use halite::cell::RowMutation;
use halite::region::read::{Columns, Get, Scan};
use halite::region::wal::io::IoBackendChoice;
use halite::schema::{BloomType, Durability, FamilyDescriptor};

fn write_file(h: &Harness, from: u32, to: u32) {
    let rows: Vec<RowMutation> = (from..to)
        .map(|i| RowMutation::new(format!("row{i:06}")).put("cf", "q", 1, vec![1u8; 64]))
        .collect();
    h.region()
        .mutate(&rows, Durability::SyncWal)
        .expect("write");
    h.region().flush().expect("flush");
}

#[test]
fn row_bloom_lets_gets_skip_files_without_the_row() {
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf").bloom(BloomType::Row)],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    // Interleaved key ranges so key-range pruning cannot skip the files.
    for f in 0..4u32 {
        let rows: Vec<RowMutation> = (0..500u32)
            .map(|i| {
                RowMutation::new(format!("row{:06}", i * 4 + f)).put("cf", "q", 1, vec![f as u8])
            })
            .collect();
        h.region()
            .mutate(&rows, Durability::SyncWal)
            .expect("write");
        h.region().flush().expect("flush");
    }
    assert_eq!(h.region().file_counts()[&b"cf".to_vec()], 4);
    for i in 0..2000u32 {
        let row = h
            .region()
            .get(&Get::new(format!("row{i:06}")))
            .expect("get")
            .expect("row exists");
        assert_eq!(row.cells[0].value, vec![(i % 4) as u8]);
    }
    let skipped = h
        .region()
        .stats()
        .files_skipped_by_bloom
        .load(Ordering::Relaxed);
    // Each Get can skip 3 of 4 files; a 1 % false-positive rate costs few.
    assert!(
        skipped > 2000 * 3 * 9 / 10,
        "bloom skipped only {skipped} file probes"
    );
}

#[test]
fn rowcol_bloom_still_finds_family_deletes_for_column_gets() {
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf").bloom(BloomType::RowCol)],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    h.region()
        .mutate(
            &[RowMutation::new("r").put("cf", "q", 5, "v")],
            Durability::SyncWal,
        )
        .expect("put");
    h.region().flush().expect("flush");
    h.region()
        .mutate(
            &[RowMutation::new("r").delete_family("cf", Some(10))],
            Durability::SyncWal,
        )
        .expect("delete");
    h.region().flush().expect("flush");
    let get = Get {
        columns: Columns {
            families: vec![],
            columns: vec![(b"cf".to_vec(), b"q".to_vec())],
        },
        ..Get::new("r")
    };
    assert_eq!(
        h.region().get(&get).expect("get"),
        None,
        "the family delete was skipped by the bloom"
    );
}

#[test]
fn repeated_reads_hit_the_cache_and_blockcache_false_bypasses_it() {
    let h = Harness::new(
        vec![
            FamilyDescriptor::new("cf").block_size(4096),
            FamilyDescriptor::new("nocache")
                .block_cache(false)
                .block_size(4096),
        ],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    write_file(&h, 0, 2000);
    let stats = h.cache.stats();
    let scan = Scan::new();
    h.region().scan(&scan).expect("scan");
    let misses = stats.misses.load(Ordering::Relaxed);
    let hits = stats.hits.load(Ordering::Relaxed);
    h.region().scan(&scan).expect("scan");
    assert_eq!(
        stats.misses.load(Ordering::Relaxed),
        misses,
        "second scan missed the cache"
    );
    assert!(stats.hits.load(Ordering::Relaxed) > hits);

    let rows: Vec<RowMutation> = (0..2000u32)
        .map(|i| RowMutation::new(format!("x{i:06}")).put("nocache", "q", 1, vec![2u8; 64]))
        .collect();
    h.region()
        .mutate(&rows, Durability::SyncWal)
        .expect("write");
    h.region().flush().expect("flush");
    let before = (
        stats.hits.load(Ordering::Relaxed),
        stats.misses.load(Ordering::Relaxed),
        stats.inserts.load(Ordering::Relaxed),
    );
    let only_nocache = Scan {
        columns: Columns {
            families: vec![b"nocache".to_vec()],
            columns: vec![],
        },
        ..Scan::new()
    };
    assert_eq!(
        h.region().scan(&only_nocache).expect("scan").rows.len(),
        2000
    );
    let after = (
        stats.hits.load(Ordering::Relaxed),
        stats.misses.load(Ordering::Relaxed),
        stats.inserts.load(Ordering::Relaxed),
    );
    assert_eq!(
        before, after,
        "a BLOCKCACHE => false family touched the cache"
    );
}

#[test]
fn the_cache_stays_within_its_budget() {
    let mut h = Harness::new(
        vec![FamilyDescriptor::new("cf").block_size(4096)],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    h.cache = halite::region::sst::cache::BlockCache::new(256 * 1024);
    h.reopen_clean();
    write_file(&h, 0, 20_000);
    h.region().scan(&Scan::new()).expect("scan");
    assert!(
        h.cache.bytes() <= 256 * 1024,
        "cache holds {} bytes",
        h.cache.bytes()
    );
    assert!(h.cache.stats().evictions.load(Ordering::Relaxed) > 0);
}

#[test]
fn compactions_do_not_fill_the_cache() {
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf").block_size(4096)],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    for f in 0..3u32 {
        write_file(&h, f * 2000, (f + 1) * 2000);
    }
    let inserts = || h.cache.stats().inserts.load(Ordering::Relaxed);
    let before = inserts();
    h.region().compact(true).expect("major compaction");
    assert_eq!(h.region().file_counts()[&b"cf".to_vec()], 1);
    assert_eq!(
        inserts(),
        before,
        "a compaction put the blocks it read into the cache"
    );
    // Reads after the compaction still fill it.
    h.region().scan(&Scan::new()).expect("scan");
    assert!(inserts() > before);
}

#[test]
fn rowprefix_bloom_lets_scans_within_a_prefix_skip_files() {
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf").bloom_prefix(4)],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    );
    // Eight files, each holding series (4-byte prefixes) of its own, with
    // key ranges that interleave so key-range pruning cannot skip them.
    for f in 0..8u32 {
        let rows: Vec<RowMutation> = (0..50u32)
            .flat_map(|s| {
                let series = format!("s{:03}", s * 8 + f);
                (0..20u32).map(move |t| {
                    RowMutation::new(format!("{series}-{t:04}")).put("cf", "q", 1, vec![f as u8])
                })
            })
            .collect();
        h.region()
            .mutate(&rows, Durability::SyncWal)
            .expect("write");
        h.region().flush().expect("flush");
    }
    assert_eq!(h.region().file_counts()[&b"cf".to_vec()], 8);
    let skipped = || {
        h.region()
            .stats()
            .files_skipped_by_bloom
            .load(Ordering::Relaxed)
    };
    // Series 8..392 fall inside every file's key range.
    let before_all = skipped();
    for s in 8..392u32 {
        let prefix = format!("s{s:03}");
        let page = h
            .region()
            .scan(&Scan {
                prefix: Some(prefix.clone().into_bytes()),
                ..Scan::new()
            })
            .expect("scan");
        assert_eq!(page.rows.len(), 20, "series {prefix}");
        assert!(page.rows.iter().all(
            |r| r.key.starts_with(prefix.as_bytes()) && r.cells[0].value == vec![(s % 8) as u8]
        ));
    }
    // 7 of 8 files lack each series; false positives keep a few.
    let total = skipped() - before_all;
    assert!(
        total >= 384 * 7 * 95 / 100,
        "bloom skipped only {total} of {} files",
        384 * 7
    );
    // A scan that spans prefixes cannot use the bloom; it reads every file.
    let before = skipped();
    let page = h
        .region()
        .scan(&Scan {
            start: Some(b"s000".to_vec()),
            stop: Some(b"s002".to_vec()),
            ..Scan::new()
        })
        .expect("scan");
    assert_eq!(page.rows.len(), 40);
    assert_eq!(skipped(), before);
    // Gets probe the row's prefix.
    let row = h
        .region()
        .get(&Get::new("s123-0007"))
        .expect("get")
        .expect("row");
    assert_eq!(row.cells[0].value, vec![(123 % 8) as u8]);
    assert_eq!(h.region().get(&Get::new("s999-0000")).expect("get"), None);
}
