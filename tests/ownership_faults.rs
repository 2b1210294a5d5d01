//! The ownership protocol when the network lies: a conditional write that
//! was applied but answered as lost (the S3 client retried a request whose
//! connection dropped after the server applied it, and the retry's
//! `If-Match` failed), and a write that got no answer and landed later.
//! A fault layer over a real S3 server (s3s-fs) makes both happen.

mod common;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use common::s3::{ACCESS_KEY, S3, SECRET_KEY};
use futures_util::stream::BoxStream;
use halite::objects::Objects;
use halite::ownership::{self, OwnershipError, ShardOwner};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use parking_lot::Mutex;

/// Forwards to a real store, but the next `lose_after_landing`
/// conditional updates are applied and then answered as lost, and with
/// `hold_next` set the next conditional update is kept unanswered (an
/// error for the caller) until [`Faulty::land_held`] applies it.
#[derive(Debug)]
struct Faulty {
    inner: Arc<dyn ObjectStore>,
    lose_after_landing: AtomicUsize,
    hold_next: AtomicUsize,
    held: Mutex<Option<(Path, PutPayload, PutOptions)>>,
}

impl fmt::Display for Faulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faulty({})", self.inner)
    }
}

impl Faulty {
    fn take(counter: &AtomicUsize) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    async fn land_held(&self) -> object_store::Result<PutResult> {
        let (location, payload, opts) = self.held.lock().take().expect("a held write");
        self.inner.put_opts(&location, payload, opts).await
    }
}

#[async_trait::async_trait]
impl ObjectStore for Faulty {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let update = matches!(opts.mode, PutMode::Update(_));
        if update && Faulty::take(&self.hold_next) {
            *self.held.lock() = Some((location.clone(), payload, opts));
            return Err(object_store::Error::Generic {
                store: "faulty",
                source: "the request timed out".into(),
            });
        }
        let written = self.inner.put_opts(location, payload, opts).await?;
        if update && Faulty::take(&self.lose_after_landing) {
            return Err(object_store::Error::Precondition {
                path: location.to_string(),
                source: "the retry of an applied write found the new etag".into(),
            });
        }
        Ok(written)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A node's client: the fault layer over s3s-fs, and a plain one.
fn clients(s3: &S3, prefix: &str) -> (Arc<Faulty>, Arc<Objects>, Arc<Objects>) {
    let inner = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(&s3.endpoint)
        .with_allow_http(true)
        .with_bucket_name("halite")
        .with_region("us-east-1")
        .with_access_key_id(ACCESS_KEY)
        .with_secret_access_key(SECRET_KEY)
        .build()
        .expect("s3 client");
    let faulty = Arc::new(Faulty {
        inner: Arc::new(inner),
        lose_after_landing: AtomicUsize::new(0),
        hold_next: AtomicUsize::new(0),
        held: Mutex::new(None),
    });
    let through =
        Arc::new(Objects::with_store(faulty.clone(), prefix, "faulty s3s-fs").expect("objects"));
    let unused = tempfile::tempdir().expect("tmp");
    let plain =
        Arc::new(Objects::open(&s3.config("halite", prefix), unused.path()).expect("objects"));
    (faulty, through, plain)
}

fn body(files: &[&str]) -> Bytes {
    Bytes::from(files.join("\n"))
}

fn files_of(body: &Bytes) -> Vec<String> {
    std::str::from_utf8(body)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_publish_that_landed_but_was_answered_as_lost_is_not_a_fence() {
    let s3 = S3::start(&["halite"]);
    let (faulty, objects, plain) = clients(&s3, "landed");
    let mut owner = ShardOwner::acquire(objects, "cpu/0", "node-a").expect("acquire");
    owner.adopt(1).expect("adopt");
    faulty.lose_after_landing.store(1, Ordering::SeqCst);
    owner
        .publish(1, body(&["a.sst"]))
        .expect("its own landed write is a success, not a fence");
    assert!(!owner.is_fenced());
    let held = ownership::read_manifest(&plain, 1)
        .expect("read")
        .expect("manifest");
    assert_eq!((held.epoch, held.body), (1, body(&["a.sst"])));
    // And the owner goes on from the version that landed.
    owner
        .publish(1, body(&["a.sst", "b.sst"]))
        .expect("the next publish");
    let held = ownership::read_manifest(&plain, 1)
        .expect("read")
        .expect("manifest");
    assert_eq!(held.body, body(&["a.sst", "b.sst"]));
    // A real loss still fences: another node takes the shard over.
    let mut b = ShardOwner::acquire(plain.clone(), "cpu/0", "node-b").expect("acquire");
    b.adopt(1).expect("adopt");
    match owner.publish(1, body(&["c.sst"])) {
        Err(OwnershipError::Fenced { by, newer, .. }) => {
            assert_eq!((by.as_str(), newer), ("node-b", 2))
        }
        other => panic!("a write over a newer owner's manifest must fence: {other:?}"),
    }
    // And once fenced, every write is refused, on any region.
    assert!(matches!(owner.adopt(2), Err(OwnershipError::Fenced { .. })));
}

#[test]
fn files_of_a_publish_without_an_answer_survive_the_clean_up_and_its_late_landing() {
    let s3 = S3::start(&["halite"]);
    let (faulty, objects, plain) = clients(&s3, "late");
    let mut a = ShardOwner::acquire(objects.clone(), "cpu/0", "node-a").expect("acquire");
    a.adopt(1).expect("adopt region 1");
    a.adopt(2).expect("adopt region 2");
    // A flush of region 2: its file is written, its manifest write gets
    // no answer (it will land later).
    let file = ownership::file_name(2, "f", a.epoch(), 1);
    objects
        .create(&file, Bytes::from_static(b"units"))
        .expect("file");
    faulty.hold_next.store(1, Ordering::SeqCst);
    assert!(a.publish(2, body(&[file.as_str()])).is_err());
    // Node B takes the shard and adopts region 1 first; A's next write to
    // region 1 is fenced, and A cleans up.
    let mut b = ShardOwner::acquire(plain.clone(), "cpu/0", "node-b").expect("acquire");
    b.adopt(1).expect("adopt region 1");
    assert!(matches!(
        a.publish(1, body(&["x.sst"])),
        Err(OwnershipError::Fenced { .. })
    ));
    a.clean_up(std::slice::from_ref(&file), |_, b| Some(files_of(b)))
        .expect("clean up");
    // The held write lands now (region 2 is still at A's version).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(faulty.land_held())
        .expect("the late write lands");
    // B adopts region 2 and finds the file its manifest names.
    let adopted = b.adopt(2).expect("adopt region 2").expect("a body");
    assert_eq!(files_of(&adopted), vec![file.clone()]);
    assert!(
        plain.get(&file).expect("get").is_some(),
        "the clean-up deleted {file}, which the manifest names"
    );
}
