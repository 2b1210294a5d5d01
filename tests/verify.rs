//! `halite verify <data-dir>`: a data directory written by the store checks
//! clean; each kind of damage done on purpose afterwards — to a store
//! file's block, a manifest, the catalog, a closed WAL segment, a missing
//! live file — is reported as a problem naming the file (and the offset
//! where there is one); what a crash leaves (a torn WAL tail, a store file
//! no manifest names) is a note. The command exits 1 on problems.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use halite::catalog::{CreateTable, TableName};
use halite::cell::RowMutation;
use halite::clock::{Clock, ManualClock};
use halite::region::RegionOptions;
use halite::region::wal::WalOptions;
use halite::store::{Store, StoreOptions};
use halite::verify::{Report, verify, verify_with_progress};

fn options() -> StoreOptions {
    StoreOptions {
        shards: 2,
        queue_depth: 8,
        wal: WalOptions {
            segment_size: 64 * 1024,
            ..WalOptions::default()
        },
        region: RegionOptions {
            flush_size: 256 * 1024,
            flush_on_close: false,
            ..RegionOptions::default()
        },
        block_cache_bytes: 8 << 20,
        flush_threads: 1,
        compaction_threads: 1,
        max_region_size: 10 << 30,
        global_memstore_bytes: 1 << 30,
    }
}

/// A data directory with store files in every region and edits still only
/// in the WAL (several segments per shard), closed without a flush.
fn data_dir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tmp");
    let store = Store::open(
        tmp.path(),
        options(),
        Arc::new(ManualClock::new(1_700_000_000_000)) as Arc<dyn Clock>,
    )
    .expect("open store");
    let table: CreateTable = serde_json::from_str(
        r#"{"name": "cpu", "families": [{"name": "f", "data_block_encoding": "TIME_SERIES"}],
            "key": {"fields": [{"name": "host", "type": "string", "width": 8},
                               {"name": "ts", "type": "reversed_timestamp"}],
                    "salt": {"buckets": 4}}}"#,
    )
    .expect("spec");
    store.create_table(&table).expect("create");
    let name = TableName::parse("cpu").expect("name");
    let desc = store.catalog().table(&name).expect("table");
    let rows = |from: u64, to: u64| -> Vec<RowMutation> {
        (from..to)
            .map(|i| {
                let key = desc
                    .key
                    .encode_ordered(&[
                        halite::key::FieldValue::Str(format!("h{}", i % 7)),
                        halite::key::FieldValue::Uint(1_700_000_000_000 + i),
                    ])
                    .expect("key");
                RowMutation::new(key).put(
                    "f",
                    "v",
                    1_700_000_000_000 + i,
                    halite::value::Value::Float(i as f64 / 4.0).encode(),
                )
            })
            .collect()
    };
    for chunk in 0..10 {
        store
            .write(&name, rows(chunk * 500, chunk * 500 + 500), None)
            .expect("write");
    }
    store.flush_table(&name).expect("flush");
    for chunk in 10..20 {
        store
            .write(&name, rows(chunk * 500, chunk * 500 + 500), None)
            .expect("write");
    }
    store.close().expect("close");
    tmp
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("list") {
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

fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).expect("read");
    b[at as usize] ^= 0x5a;
    std::fs::write(path, b).expect("write");
}

fn copy_tree(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).expect("dir");
    for e in std::fs::read_dir(from).expect("list") {
        let p = e.expect("entry").path();
        let dest = to.join(p.file_name().expect("name"));
        if p.is_dir() {
            copy_tree(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).expect("copy");
        }
    }
}

/// The problems of `report`, as (file, offset).
fn problems(report: &Report) -> Vec<(PathBuf, Option<u64>)> {
    report
        .findings
        .iter()
        .filter(|f| f.problem)
        .map(|f| (f.path.clone(), f.offset))
        .collect()
}

#[test]
fn a_clean_data_directory_checks_clean() {
    let dir = data_dir();
    let r = verify(dir.path()).expect("a data directory");
    assert_eq!(problems(&r), vec![], "{r:?}");
    assert_eq!(r.tables, 1);
    assert_eq!(r.regions, 4);
    assert!(r.store_files >= 4, "{r:?}");
    assert_eq!(r.cells, 5_000, "the flushed half");
    assert!(r.wal_segments >= 4, "{r:?}");
    assert!(r.wal_records > 0, "the unflushed half is in the WAL");
    assert!(verify(&dir.path().join("nowhere")).is_err());

    // Progress (what `halite verify` draws): the bytes of every store
    // file and WAL segment, told after each, never going back, ending full.
    let size = |p: &PathBuf| std::fs::metadata(p).expect("size").len();
    let want: u64 = files(dir.path(), "sst").iter().map(size).sum::<u64>()
        + files(dir.path(), "log").iter().map(size).sum::<u64>();
    let mut told: Vec<(u64, u64)> = Vec::new();
    verify_with_progress(dir.path(), &mut |done, total| told.push((done, total)))
        .expect("a data directory");
    assert_eq!(told.first(), Some(&(0, want)));
    assert_eq!(told.last(), Some(&(want, want)));
    assert!(
        told.windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[1].0 <= w[1].1)
    );
    assert!(
        told.len() > r.store_files + r.wal_segments,
        "told {} times for {} files",
        told.len(),
        r.store_files + r.wal_segments
    );
}

#[test]
fn every_kind_of_damage_is_reported_by_file_and_offset() {
    let dir = data_dir();
    let tmp = tempfile::tempdir().expect("tmp");
    let work = tmp.path().join("work");

    // A byte of a store file's first data block.
    copy_tree(dir.path(), &work);
    let sst = files(&work, "sst").remove(0);
    flip(&sst, 20);
    let r = verify(&work).expect("verify");
    assert_eq!(problems(&r), vec![(sst.clone(), Some(0))], "{r:?}");

    // Every byte of another store file, one at a time: never missed.
    let size = std::fs::metadata(files(dir.path(), "sst")[1].clone())
        .expect("stat")
        .len();
    for at in (0..size).step_by(7) {
        copy_tree(dir.path(), &work);
        let sst = files(&work, "sst").remove(1);
        flip(&sst, at);
        let r = verify(&work).expect("verify");
        let p = problems(&r);
        assert_eq!(p.len(), 1, "flip at {at}: {r:?}");
        assert_eq!(p[0].0, sst, "flip at {at}");
    }

    // A live store file gone.
    copy_tree(dir.path(), &work);
    let sst = files(&work, "sst").remove(2);
    std::fs::remove_file(&sst).expect("remove");
    assert_eq!(problems(&verify(&work).expect("verify")), vec![(sst, None)]);

    // A manifest.
    copy_tree(dir.path(), &work);
    let manifest = work.join("regions").join("0000000001").join("MANIFEST");
    flip(&manifest, 12);
    let p = problems(&verify(&work).expect("verify"));
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0, manifest);

    // The catalog.
    copy_tree(dir.path(), &work);
    let catalog = work.join("catalog").join("CATALOG");
    flip(&catalog, 30);
    let p = problems(&verify(&work).expect("verify"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, catalog);

    // A closed WAL segment, in a record's middle.
    copy_tree(dir.path(), &work);
    let closed = files(&work.join("wal").join("shard-0"), "log").remove(0);
    flip(&closed, 100);
    let p = problems(&verify(&work).expect("verify"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].0, closed);
    assert!(p[0].1.is_some_and(|o| o <= 100), "{p:?}");
}

#[test]
fn what_a_crash_leaves_is_a_note_and_the_command_exits_by_what_it_found() {
    let dir = data_dir();
    let tmp = tempfile::tempdir().expect("tmp");
    let work = tmp.path().join("work");
    copy_tree(dir.path(), &work);
    // A store file written by a flush that never reached the manifest.
    let sst = files(&work, "sst").remove(0);
    std::fs::copy(&sst, sst.with_file_name("00000000000000000099.sst")).expect("copy");
    // The live segment's end record cut: what a crash leaves.
    let live = files(&work.join("wal").join("shard-1"), "log")
        .pop()
        .expect("segment");
    let len = std::fs::metadata(&live).expect("stat").len();
    let bytes = std::fs::read(&live).expect("read");
    // The first end record: a recycled segment still holds stale records
    // of its earlier life past its own end, stale end records among them.
    let end = bytes
        .windows(9)
        .position(|w| w[8] == 2 && w[..4] == [0, 0, 0, 0])
        .expect("an end record");
    let mut cut = bytes.clone();
    cut[end..].fill(0);
    assert_eq!(cut.len() as u64, len);
    std::fs::write(&live, cut).expect("write");
    let r = verify(&work).expect("verify");
    assert_eq!(problems(&r), vec![], "{r:?}");
    assert_eq!(r.findings.len(), 2, "{r:?}");

    let bin = env!("CARGO_BIN_EXE_halite");
    let out = Command::new(bin)
        .arg("verify")
        .arg(&work)
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("0 problems, 2 notes"), "{text}");

    flip(&sst, 40);
    let out = Command::new(bin)
        .arg("verify")
        .arg(&work)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("PROBLEM {}", sst.display())),
        "{text}"
    );
    let out = Command::new(bin)
        .args(["verify", "--json"])
        .arg(&work)
        .output()
        .expect("run");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["findings"].as_array().map(Vec::len), Some(3));
    let out = Command::new(bin)
        .args(["verify"])
        .arg(tmp.path().join("nothing-here"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}
