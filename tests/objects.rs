//! The object store that store files, manifests and ownership leases go
//! to beyond one disk. First, that the S3 server the tests run (s3s-fs)
//! refuses a lost conditional write: an S3 that ignored the conditions
//! would let two owners both win, and every fencing test built on it would
//! prove nothing. Then the same calls over a local directory, the default.

mod common;

use std::sync::{Arc, Barrier};

use bytes::Bytes;
use common::s3::S3;
use halite::objects::{ObjectError, Objects, ObjectsConfig};

fn text(objects: &Objects, name: &str) -> String {
    let (bytes, _) = objects
        .get(name)
        .expect("get")
        .unwrap_or_else(|| panic!("no object {name}"));
    String::from_utf8(bytes.to_vec()).expect("utf-8")
}

fn lost<T: std::fmt::Debug>(answer: Result<T, ObjectError>) -> bool {
    match answer {
        Err(ObjectError::Lost { .. }) => true,
        Ok(_) => false,
        Err(e) => panic!("neither written nor lost: {e}"),
    }
}

#[test]
fn s3s_fs_answers_412_to_a_lost_conditional_write() {
    let s3 = S3::start(&["halite"]);
    let unused = tempfile::tempdir().expect("tmp");
    let objects = Objects::open(&s3.config("halite", "cluster"), unused.path()).expect("open");

    // `If-None-Match: *` on a name that exists.
    let first = objects
        .create("leases/0", Bytes::from_static(b"epoch 1, node a"))
        .expect("the first create");
    assert!(lost(
        objects.create("leases/0", Bytes::from_static(b"epoch 1, node b"))
    ));
    assert_eq!(text(&objects, "leases/0"), "epoch 1, node a");

    // `If-Match` with the version read before someone else wrote.
    let second = objects
        .replace("leases/0", Bytes::from_static(b"epoch 2, node a"), &first)
        .expect("a replace of the current version");
    assert_ne!(first, second, "a write must change the version");
    assert!(lost(objects.replace(
        "leases/0",
        Bytes::from_static(b"epoch 2, node b"),
        &first
    )));
    assert_eq!(text(&objects, "leases/0"), "epoch 2, node a");
    let (_, read) = objects.get("leases/0").expect("get").expect("found");
    assert_eq!(read, second, "a read gives the version a write returned");

    // The object is in the served directory, under the prefix: the server
    // stored it, nothing in between kept it.
    let on_disk = std::fs::read(s3.dir.path().join("halite/cluster/leases/0")).expect("on disk");
    assert_eq!(on_disk, b"epoch 2, node a");

    // Listing is below the prefix; a delete is gone, and deleting nothing
    // is no error.
    objects
        .put("files/a.sst", Bytes::from_static(b"aaaa"))
        .expect("put");
    assert_eq!(
        objects.list("").expect("list"),
        vec![("files/a.sst".to_string(), 4), ("leases/0".to_string(), 15)]
    );
    objects.delete("files/a.sst").expect("delete");
    objects.delete("files/a.sst").expect("delete nothing");
    assert_eq!(objects.get("files/a.sst").expect("get"), None);
}

/// Several writers race to create one name at once in a local directory
/// (a hard link of a staged file): each time exactly one wins, and the
/// object holds the winner's bytes.
///
/// Not run against s3s-fs: its `PutObject` checks `If-None-Match` and
/// `If-Match` and only then writes (s3s-fs 0.14.1, `src/s3.rs`), so of six
/// concurrent creates of one name four succeeded here. Requests in
/// sequence it refuses with 412 (the test above); a race inside that
/// window it does not. AWS S3 makes the check and the write one step.
#[test]
fn of_racing_creates_in_a_local_directory_exactly_one_wins() {
    const RACERS: usize = 6;
    const ROUNDS: usize = 20;
    let dir = tempfile::tempdir().expect("tmp");
    let objects = Arc::new(Objects::open(&ObjectsConfig::default(), dir.path()).expect("open"));
    for round in 0..ROUNDS {
        let name = format!("race/{round}");
        let (_, winner) = race(&objects, RACERS, |o, node| {
            o.create(&name, Bytes::from(format!("created by {node}")))
        });
        assert_eq!(text(&objects, &name), format!("created by {winner}"));
    }
}

/// Runs `write` from `racers` threads released at once; requires exactly
/// one to succeed and returns its version and number.
fn race(
    objects: &Arc<Objects>,
    racers: usize,
    write: impl Fn(&Objects, usize) -> Result<halite::objects::Version, ObjectError> + Sync,
) -> (halite::objects::Version, usize) {
    let start = Barrier::new(racers);
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..racers)
            .map(|node| {
                let (start, write) = (&start, &write);
                scope.spawn(move || {
                    start.wait();
                    (node, write(objects, node))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("racer"))
            .collect()
    });
    let mut winners = Vec::new();
    for (node, outcome) in outcomes {
        match outcome {
            Ok(version) => winners.push((version, node)),
            Err(ObjectError::Lost { .. }) => {}
            Err(e) => panic!("racer {node}: {e}"),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one of {racers} racers must win: {:?}",
        winners.iter().map(|w| w.1).collect::<Vec<_>>()
    );
    winners.remove(0)
}

#[test]
fn a_local_directory_is_the_default_store_and_creates_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let objects = Objects::open(&ObjectsConfig::default(), &dir.path().join("objects"))
        .expect("open the default");
    assert!(objects.describe().starts_with("file:///"), "{objects:?}");
    objects
        .create("regions/1/MANIFEST", Bytes::from_static(b"one"))
        .expect("create");
    assert!(lost(
        objects.create("regions/1/MANIFEST", Bytes::from_static(b"two"))
    ));
    assert_eq!(text(&objects, "regions/1/MANIFEST"), "one");
    assert_eq!(
        std::fs::read(dir.path().join("objects/regions/1/MANIFEST")).expect("on disk"),
        b"one"
    );
    objects
        .put("regions/1/f/000001.sst", Bytes::from_static(b"12345"))
        .expect("put");
    assert_eq!(
        objects.list("regions/1").expect("list"),
        vec![
            ("regions/1/MANIFEST".to_string(), 3),
            ("regions/1/f/000001.sst".to_string(), 5)
        ]
    );
    // A local directory has no compare-and-swap: a replace says so rather
    // than overwriting unconditionally.
    let (_, version) = objects
        .get("regions/1/MANIFEST")
        .expect("get")
        .expect("found");
    match objects.replace("regions/1/MANIFEST", Bytes::from_static(b"three"), &version) {
        Err(ObjectError::Unsupported { .. }) => {}
        other => panic!("a local replace must be refused: {other:?}"),
    }
    assert_eq!(text(&objects, "regions/1/MANIFEST"), "one");
}

#[test]
fn a_bad_object_store_url_says_what_to_write() {
    let dir = tempfile::tempdir().expect("tmp");
    for (url, says) in [
        ("bucket/prefix", "no scheme"),
        ("gs://bucket", "unknown scheme `gs`"),
        ("s3:///prefix", "names a bucket"),
        ("file://relative/dir", "absolute directory"),
    ] {
        let config = ObjectsConfig {
            url: url.into(),
            ..ObjectsConfig::default()
        };
        let e = Objects::open(&config, dir.path()).expect_err(url);
        let text = e.to_string();
        assert!(text.contains(says), "{url}: {text}");
        assert!(text.contains("s3://bucket/prefix"), "{url}: {text}");
    }
}

#[test]
fn names_an_object_path_would_encode_are_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let objects = Objects::open(&ObjectsConfig::default(), dir.path()).expect("open");
    for name in [
        "a b",
        "100%",
        "x/../y",
        "./x",
        "tab\there",
        "ümlaut",
        "q?x",
        "star*",
    ] {
        match objects.put(name, Bytes::from_static(b"x")) {
            Err(ObjectError::BadName { .. }) => {}
            other => panic!("{name:?}: {other:?}"),
        }
    }
    // What listing gives back is the name to get and delete.
    let name = "leases/cpu-1.metrics/3=x:y";
    objects.put(name, Bytes::from_static(b"x")).expect("put");
    let listed = objects.list("leases").expect("list");
    assert_eq!(listed, vec![(name.to_string(), 1)]);
    objects.delete(&listed[0].0).expect("delete");
    assert_eq!(objects.list("leases").expect("list"), vec![]);
}
