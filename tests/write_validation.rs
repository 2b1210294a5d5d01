//! Bad writes are refused with a clear, typed error and change nothing.

mod common;

use common::{Harness, foreground_options, small_wal};
use halite::ErrorKind;
use halite::cell::{CellKind, EntryBatch, Mutation, RowMutation};
use halite::region::read::Scan;
use halite::region::wal::io::IoBackendChoice;
use halite::schema::{Durability, FamilyDescriptor};

fn harness() -> Harness {
    Harness::new(
        vec![FamilyDescriptor::new("cf")],
        foreground_options(),
        small_wal(IoBackendChoice::Auto),
    )
}

#[test]
fn bad_writes_are_refused_and_change_nothing() {
    let h = harness();
    let good = RowMutation::new("ok").put("cf", "q", 1, "v");
    let cases: Vec<(RowMutation, ErrorKind, &str)> = vec![
        (
            RowMutation::new("r").put("nope", "q", 1, "v"),
            ErrorKind::NotFound,
            "nope",
        ),
        (
            RowMutation::new(vec![b'k'; 70_000]).put("cf", "q", 1, "v"),
            ErrorKind::InvalidInput,
            "row key",
        ),
        (
            RowMutation::new("").put("cf", "q", 1, "v"),
            ErrorKind::InvalidInput,
            "row key",
        ),
        (
            RowMutation::new("r").put("cf", "q", 1, vec![0u8; 11 * 1024 * 1024]),
            ErrorKind::InvalidInput,
            "exceeds the limit",
        ),
        (
            RowMutation::new("r").put("cf", vec![b'q'; 70_000], 1, "v"),
            ErrorKind::InvalidInput,
            "qualifier",
        ),
        (
            RowMutation::new("r").put_with_ttl("cf", "q", 1, "v", 0),
            ErrorKind::InvalidInput,
            "TTL",
        ),
    ];
    for (bad, kind, needle) in cases {
        let err = h
            .region()
            .mutate(&[good.clone(), bad], Durability::SyncWal)
            .expect_err("bad write accepted");
        assert_eq!(err.kind(), kind, "{err}");
        assert!(
            err.to_string().contains(needle),
            "`{err}` does not mention `{needle}`"
        );
    }
    assert!(
        h.region().scan(&Scan::new()).expect("scan").rows.is_empty(),
        "a refused batch left data behind"
    );
    h.region()
        .mutate(&[good], Durability::SyncWal)
        .expect("good write after bad ones");
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 1);
}

/// Entries encoded by the ingest path are checked like mutations: a batch
/// with one bad entry is refused whole, before anything is logged.
#[test]
fn bad_encoded_entries_are_refused_and_change_nothing() {
    let h = harness();
    let batch = |family: &str, qualifier: &[u8], value: &[u8]| {
        let mut b = EntryBatch::new();
        b.push(b"ok", b"cf", b"q", 1, CellKind::Put, None, b"v");
        b.end_row();
        b.push(
            b"r",
            family.as_bytes(),
            qualifier,
            1,
            CellKind::Put,
            None,
            value,
        );
        b.end_row();
        b
    };
    // A batch keeps a row's key once: an entry naming another row than
    // its row's first is refused, not written under the first's.
    let mut mixed = EntryBatch::new();
    mixed.push(b"r", b"cf", b"a", 1, CellKind::Put, None, b"v");
    mixed.push(b"s", b"cf", b"b", 1, CellKind::Put, None, b"v");
    mixed.end_row();
    let cases = [
        (mixed, ErrorKind::InvalidInput, "different rows"),
        (batch("nope", b"q", b"v"), ErrorKind::NotFound, "nope"),
        (
            batch("cf", b"q", &vec![0u8; 11 * 1024 * 1024]),
            ErrorKind::InvalidInput,
            "exceeds the limit",
        ),
        (
            batch("cf", &vec![b'q'; 70_000], b"v"),
            ErrorKind::InvalidInput,
            "qualifier",
        ),
    ];
    for (bad, kind, needle) in cases {
        let err = h
            .region()
            .submit_batch(&bad, Durability::SyncWal, None)
            .and_then(|p| p.wait())
            .expect_err("bad batch accepted");
        assert_eq!(err.kind(), kind, "{err}");
        assert!(err.to_string().contains(needle), "`{err}` lacks `{needle}`");
    }
    assert!(
        h.region().scan(&Scan::new()).expect("scan").rows.is_empty(),
        "a refused batch left data behind"
    );
    let mut good = EntryBatch::new();
    good.push(b"ok", b"cf", b"q", 1, CellKind::Put, None, b"v");
    good.end_row();
    h.region()
        .submit_batch(&good, Durability::SyncWal, None)
        .and_then(|p| p.wait())
        .expect("good batch after bad ones");
    assert_eq!(h.region().scan(&Scan::new()).expect("scan").rows.len(), 1);
}

#[test]
fn bad_family_descriptors_are_refused() {
    for (fam, needle) in [
        (FamilyDescriptor::new(""), "1..=255"),
        (FamilyDescriptor::new("a b"), "letters"),
        (FamilyDescriptor::new("cf").versions(0), "VERSIONS"),
        (
            FamilyDescriptor::new("cf").versions(1).min_versions(2),
            "MIN_VERSIONS",
        ),
        (FamilyDescriptor::new("cf").block_size(10), "BLOCKSIZE"),
    ] {
        let err = fam.validate().expect_err("bad descriptor accepted");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.to_string().contains(needle), "{err}");
    }
}

#[test]
fn bad_scans_are_refused() {
    let h = harness();
    let err = h
        .region()
        .scan(&Scan {
            max_versions: 0,
            ..Scan::new()
        })
        .expect_err("max_versions 0");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let token = halite::region::read::ContinuationToken {
        row: b"x".to_vec(),
        reverse: true,
    };
    let err = h
        .region()
        .scan(&Scan {
            continuation: Some(token),
            ..Scan::new()
        })
        .expect_err("reverse token on a forward scan");
    assert!(err.to_string().contains("other direction"), "{err}");
    let _ = Mutation::DeleteRow { timestamp: None };
}
