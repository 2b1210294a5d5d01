//! The object store: where store files, manifests and ownership leases
//! live when they must outlive one machine's disk.
//!
//! One API over a local directory (the default: a single node, nothing to
//! run) and an S3-compatible service (`[objects] url = "s3://bucket/prefix"`),
//! through the `object_store` crate. Region threads are synchronous, so
//! every call here blocks: the request runs on this module's own small
//! runtime and the calling thread waits for its answer (a dedicated thread
//! or a blocking task; an async task would stall its runtime worker).
//!
//! Conditional writes are what fence an owner that lost its lease:
//! [`Objects::create`] succeeds only when nothing is at the name (S3's
//! `If-None-Match: *`), [`Objects::replace`] only when the object is still
//! the version the caller read (`If-Match: <etag>`). Losing either race is
//! [`ObjectError::Lost`], never a silent overwrite. A local directory
//! supports `create` but not `replace` (`object_store`'s local store has no
//! compare-and-swap), which one node never needs.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::Deserialize;

use crate::error::kind::ErrorKind;

/// How long one request to an S3 store is retried before its caller
/// hears it failed.
pub const RETRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `[objects]`: where a cluster's store files, manifests, leases and
/// catalog live (read in cluster mode only; docs/cluster.md).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct ObjectsConfig {
    /// `s3://bucket/prefix` (a cluster needs S3's conditional writes), or
    /// `file:///abs/dir` for one process's tools; empty: a directory under
    /// `data_dir`.
    pub url: String,
    /// An S3-compatible endpoint (`http://127.0.0.1:9000`); empty: AWS, or
    /// `AWS_ENDPOINT` from the environment.
    pub endpoint: String,
    /// Empty: `AWS_DEFAULT_REGION`, else `us-east-1`.
    pub region: String,
    /// Empty: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`.
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Allows a plain-HTTP endpoint (tests, a store on the same host).
    pub allow_http: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// A conditional write lost: the object exists (`create`) or changed
    /// since it was read (`replace`). The caller no longer owns what it
    /// meant to write.
    #[error("object `{name}` was written by someone else first (a conditional write lost)")]
    Lost { name: String },
    #[error(
        "object store url `{url}`: {reason}; use file:///absolute/dir or s3://bucket/prefix under [objects] url"
    )]
    Url { url: String, reason: String },
    #[error(
        "object store `{store}`: {op} `{name}` failed: {source}; check that the store is reachable and the credentials are right"
    )]
    Request {
        store: String,
        op: &'static str,
        name: String,
        #[source]
        source: Box<object_store::Error>,
    },
    #[error(
        "object name `{name}`: only letters, digits and `/ . _ - = :` may name an object (parts not `.` or `..`)"
    )]
    BadName { name: String },
    #[error("object store `{store}`: {op} `{name}` is not supported by this kind of store")]
    Unsupported {
        store: String,
        op: &'static str,
        name: String,
    },
}

impl ObjectError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ObjectError::Lost { .. } => ErrorKind::Conflict,
            ObjectError::Url { .. } | ObjectError::BadName { .. } => ErrorKind::InvalidInput,
            ObjectError::Request { .. } => ErrorKind::Unavailable,
            ObjectError::Unsupported { .. } => ErrorKind::Internal,
        }
    }
}

/// The version of an object as read or written: what a [`Objects::replace`]
/// must still find for it to succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version(UpdateVersion);

impl Version {
    /// The store's entity tag, when it gives one.
    pub fn e_tag(&self) -> Option<&str> {
        self.0.e_tag.as_deref()
    }
}

/// An object store with a name prefix, called from synchronous code.
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    /// For messages: the url it was opened from.
    described: String,
    /// Taken only on drop.
    runtime: Option<tokio::runtime::Runtime>,
}

/// A runtime dropped inside another runtime's thread would panic; its
/// threads are told to stop and left to finish on their own.
impl Drop for Objects {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects")
            .field("store", &self.described)
            .finish()
    }
}

impl Objects {
    /// Opens the store `config` names; an empty url is the local directory
    /// `default_dir` (created when missing).
    pub fn open(
        config: &ObjectsConfig,
        default_dir: &std::path::Path,
    ) -> Result<Objects, ObjectError> {
        let url = if config.url.is_empty() {
            std::fs::create_dir_all(default_dir).map_err(|e| ObjectError::Url {
                url: default_dir.display().to_string(),
                reason: format!("cannot create the directory: {e}"),
            })?;
            let dir = default_dir.canonicalize().map_err(|e| ObjectError::Url {
                url: default_dir.display().to_string(),
                reason: e.to_string(),
            })?;
            format!("file://{}", dir.display())
        } else {
            config.url.clone()
        };
        let bad = |reason: String| ObjectError::Url {
            url: url.clone(),
            reason,
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("no scheme".into()))?;
        let (store, prefix): (Arc<dyn ObjectStore>, &str) = match scheme {
            "file" => {
                if !rest.starts_with('/') {
                    return Err(bad("a file url names an absolute directory".into()));
                }
                std::fs::create_dir_all(rest)
                    .map_err(|e| bad(format!("cannot create the directory: {e}")))?;
                let local = object_store::local::LocalFileSystem::new_with_prefix(rest)
                    .map_err(|e| bad(e.to_string()))?;
                (Arc::new(local), "")
            }
            "s3" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("an s3 url names a bucket: s3://bucket/prefix".into()));
                }
                // A request is retried for at most RETRY_TIMEOUT: callers
                // (a flush, a rebalance) retry on their own terms, and
                // must hear of an outage before a consumer group's
                // session runs out (the client's default is 3 minutes).
                let retry = object_store::RetryConfig {
                    retry_timeout: RETRY_TIMEOUT,
                    ..Default::default()
                };
                let mut builder = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry);
                if !config.endpoint.is_empty() {
                    builder = builder.with_endpoint(&config.endpoint);
                }
                if !config.region.is_empty() {
                    builder = builder.with_region(&config.region);
                }
                if !config.access_key_id.is_empty() {
                    builder = builder.with_access_key_id(&config.access_key_id);
                }
                if !config.secret_access_key.is_empty() {
                    builder = builder.with_secret_access_key(&config.secret_access_key);
                }
                if config.allow_http {
                    // A plain-HTTP endpoint is a store on this host or
                    // network, where a new connection costs one round trip,
                    // while a kept-alive one stalls each response with a
                    // body on a server that leaves Nagle on (s3s-fs 0.14.1:
                    // a GET took 24 ms kept alive, 0.5 ms on a fresh
                    // connection, here).
                    builder = builder
                        .with_client_options(
                            object_store::ClientOptions::new().with_pool_max_idle_per_host(0),
                        )
                        .with_allow_http(true);
                }
                let s3 = builder.build().map_err(|e| bad(e.to_string()))?;
                (Arc::new(s3), prefix)
            }
            other => return Err(bad(format!("unknown scheme `{other}`"))),
        };
        Objects::with_store(store, prefix, &url)
    }

    /// An object store built elsewhere (a fault layer over a real store,
    /// in tests), with names below `prefix`; `described` names it in
    /// messages.
    pub fn with_store(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        described: &str,
    ) -> Result<Objects, ObjectError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("halite-objects")
            .enable_all()
            .build()
            .map_err(|e| ObjectError::Url {
                url: described.to_string(),
                reason: format!("cannot start its client threads: {e}"),
            })?;
        Ok(Objects {
            store,
            prefix: ObjectPath::from(prefix.trim_matches('/')),
            described: described.to_string(),
            runtime: Some(runtime),
        })
    }

    /// The object path of `name` below the prefix. Names keep to
    /// characters that object paths carry as they are: the store would
    /// percent-encode others, and a listed name would then not be the name
    /// a caller gets or deletes.
    fn path(&self, name: &str) -> Result<ObjectPath, ObjectError> {
        let plain = |c: char| c.is_ascii_alphanumeric() || "/._-=:".contains(c);
        let bad = name.chars().any(|c| !plain(c))
            || name.split('/').any(|part| part == "." || part == "..");
        if bad {
            return Err(ObjectError::BadName {
                name: name.to_string(),
            });
        }
        let mut path = self.prefix.clone();
        for part in name.split('/').filter(|p| !p.is_empty()) {
            path = path.join(part);
        }
        Ok(path)
    }

    /// Runs `request` (an `op`: get, put, delete or list) on the store's
    /// runtime and waits for its answer, counting it and its time. The
    /// caller's thread blocks for as long as the store takes (its retries
    /// included): call from a dedicated thread or a blocking task, never
    /// from an async task.
    fn wait<T: Send + 'static>(
        &self,
        op: &'static str,
        request: impl Future<Output = Result<T, object_store::Error>> + Send + 'static,
    ) -> Result<T, object_store::Error> {
        let started = std::time::Instant::now();
        let answer = self.wait_untimed(request);
        let outcome = match &answer {
            Ok(_) => "ok",
            Err(object_store::Error::NotFound { .. }) => "not_found",
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => "lost",
            Err(_) => "error",
        };
        metrics::counter!("halite_object_store_requests_total", "op" => op, "outcome" => outcome)
            .increment(1);
        metrics::histogram!("halite_object_store_request_seconds", "op" => op)
            .record(started.elapsed().as_secs_f64());
        answer
    }

    fn wait_untimed<T: Send + 'static>(
        &self,
        request: impl Future<Output = Result<T, object_store::Error>> + Send + 'static,
    ) -> Result<T, object_store::Error> {
        let stopped = || object_store::Error::Generic {
            store: "halite",
            source: "the object store's client threads stopped".into(),
        };
        let Some(runtime) = &self.runtime else {
            return Err(stopped());
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(request.await);
        });
        rx.recv().unwrap_or_else(|_| Err(stopped()))
    }

    fn failed(&self, op: &'static str, name: &str, source: object_store::Error) -> ObjectError {
        match source {
            object_store::Error::NotImplemented { .. } => ObjectError::Unsupported {
                store: self.described.clone(),
                op,
                name: name.to_string(),
            },
            source => ObjectError::Request {
                store: self.described.clone(),
                op,
                name: name.to_string(),
                source: Box::new(source),
            },
        }
    }

    /// The object at `name` and its version; `None` when there is none.
    pub fn get(&self, name: &str) -> Result<Option<(Bytes, Version)>, ObjectError> {
        let store = self.store.clone();
        let path = self.path(name)?;
        let answer = self.wait("get", async move {
            let got = store.get(&path).await?;
            let version = UpdateVersion {
                e_tag: got.meta.e_tag.clone(),
                version: got.meta.version.clone(),
            };
            Ok((got.bytes().await?, Version(version)))
        });
        match answer {
            Ok(found) => Ok(Some(found)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.failed("get", name, e)),
        }
    }

    /// Writes `bytes` at `name`, replacing whatever is there.
    pub fn put(&self, name: &str, bytes: Bytes) -> Result<Version, ObjectError> {
        self.put_with(name, bytes, PutMode::Overwrite)
    }

    /// Writes `bytes` at `name` only when nothing is there yet.
    pub fn create(&self, name: &str, bytes: Bytes) -> Result<Version, ObjectError> {
        self.put_with(name, bytes, PutMode::Create)
    }

    /// Writes `bytes` at `name` only when the object there is still
    /// `expected` (as [`Objects::get`] or a write returned it).
    pub fn replace(
        &self,
        name: &str,
        bytes: Bytes,
        expected: &Version,
    ) -> Result<Version, ObjectError> {
        self.put_with(name, bytes, PutMode::Update(expected.0.clone()))
    }

    fn put_with(&self, name: &str, bytes: Bytes, mode: PutMode) -> Result<Version, ObjectError> {
        let store = self.store.clone();
        let path = self.path(name)?;
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        let answer = self.wait("put", async move {
            store
                .put_opts(&path, PutPayload::from_bytes(bytes), options)
                .await
        });
        match answer {
            Ok(written) => Ok(Version(UpdateVersion::from(written))),
            // S3 answers a lost `If-None-Match: *` as AlreadyExists and a
            // lost `If-Match` as Precondition (a 409 after retries, too).
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Err(ObjectError::Lost {
                name: name.to_string(),
            }),
            Err(e) => Err(self.failed("put", name, e)),
        }
    }

    /// Deletes the object at `name`; deleting nothing is not an error.
    pub fn delete(&self, name: &str) -> Result<(), ObjectError> {
        let store = self.store.clone();
        let path = self.path(name)?;
        match self.wait("delete", async move { store.delete(&path).await }) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.failed("delete", name, e)),
        }
    }

    /// The names (below the store's prefix) and sizes of the objects under
    /// `dir`, in name order.
    pub fn list(&self, dir: &str) -> Result<Vec<(String, u64)>, ObjectError> {
        let store = self.store.clone();
        let path = self.path(dir)?;
        let listed = self.wait("list", async move {
            store
                .list(Some(&path))
                .map_ok(|meta| (meta.location, meta.size))
                .try_collect::<Vec<_>>()
                .await
        });
        let listed = listed.map_err(|e| self.failed("list", dir, e))?;
        let mut names: Vec<(String, u64)> = listed
            .into_iter()
            .map(|(location, size)| {
                let full = location.as_ref();
                let below = full
                    .strip_prefix(self.prefix.as_ref())
                    .map_or(full, |rest| rest.trim_start_matches('/'));
                (below.to_string(), size)
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// What the store is, for logs and answers (`file:///…`, `s3://…`).
    pub fn describe(&self) -> &str {
        &self.described
    }
}
