//! Scans read a consistent snapshot while writers, flushes and compactions
//! run: every row is whole (row atomicity) and nothing written after a
//! scanner opened shows up in it.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::{Harness, small_wal};
use halite::cell::RowMutation;
use halite::region::RegionOptions;
use halite::region::read::Scan;
use halite::region::wal::io::IoBackendChoice;
use halite::schema::{Durability, FamilyDescriptor};

const FIELDS: usize = 10;

#[test]
fn concurrent_scans_see_whole_rows_and_a_fixed_snapshot() {
    let h = Arc::new(Harness::new(
        vec![FamilyDescriptor::new("cf").versions(1)],
        RegionOptions {
            flush_size: 64 * 1024,
            ..RegionOptions::default()
        },
        small_wal(IoBackendChoice::Auto),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let generation = Arc::new(AtomicU64::new(0));
    let writer = {
        let (h, stop, generation) = (h.clone(), stop.clone(), generation.clone());
        std::thread::spawn(move || {
            let mut g = 1u64;
            while !stop.load(Ordering::Relaxed) {
                // Every row of generation g carries g in all its cells.
                let rows: Vec<RowMutation> = (0..20)
                    .map(|r| {
                        let mut m = RowMutation::new(format!("row{r:03}"));
                        for f in 0..FIELDS {
                            m = m.put("cf", format!("f{f}"), 1, g.to_be_bytes().to_vec());
                        }
                        m
                    })
                    .collect();
                h.region()
                    .mutate(&rows, Durability::SyncWal)
                    .expect("write");
                generation.store(g, Ordering::SeqCst);
                if g % 25 == 0 {
                    h.region().compact(g % 50 == 0).expect("compact");
                }
                g += 1;
            }
        })
    };
    let mut scans = 0;
    while generation.load(Ordering::SeqCst) < 150 {
        let before = generation.load(Ordering::SeqCst);
        let scanner = h.region().scanner(&Scan::new()).expect("scanner");
        // Let the writer move on while the scanner is open.
        std::thread::sleep(std::time::Duration::from_millis(2));
        let mut seen_max = 0;
        for row in scanner {
            let row = row.expect("row");
            assert_eq!(row.cells.len(), FIELDS, "partial row {:?}", row.key);
            let g0 = row.cells[0].value.clone();
            assert!(
                row.cells.iter().all(|c| c.value == g0),
                "row {:?} mixes generations",
                row.key
            );
            let g = u64::from_be_bytes(g0.as_ref().try_into().expect("8 bytes"));
            assert!(
                g >= before,
                "scan saw generation {g}, older than acknowledged {before}"
            );
            seen_max = seen_max.max(g);
        }
        // Generations acknowledged after the scanner opened may be missing,
        // but a row can never be ahead of another by more than one write.
        assert!(seen_max >= before);
        scans += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    assert!(scans > 5);
}

#[test]
fn a_scanner_does_not_see_writes_made_after_it_opened() {
    let h = Harness::new(
        vec![FamilyDescriptor::new("cf")],
        RegionOptions::default(),
        small_wal(IoBackendChoice::Auto),
    );
    let put = |row: &str| {
        h.region()
            .mutate(
                &[RowMutation::new(row).put("cf", "q", 1, "v")],
                Durability::SyncWal,
            )
            .expect("write")
    };
    put("a");
    put("c");
    let scanner = h.region().scanner(&Scan::new()).expect("scanner");
    put("b");
    h.region().flush().expect("flush");
    put("d");
    let keys: Vec<Vec<u8>> = scanner.map(|r| r.expect("row").key).collect();
    assert_eq!(keys, vec![b"a".to_vec(), b"c".to_vec()]);
}
