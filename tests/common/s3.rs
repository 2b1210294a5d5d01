//! A real S3 server for tests: `s3s-fs` (an S3 API over a local
//! directory) that `make tools` builds into `.tools/`. One server per
//! test, on a free loopback port, killed when the handle drops.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use halite::objects::ObjectsConfig;

pub const ACCESS_KEY: &str = "halite-test";
pub const SECRET_KEY: &str = "halite-test-secret";

pub struct S3 {
    child: Child,
    port: u16,
    pub endpoint: String,
    /// The served directory: a bucket is a subdirectory of it.
    pub dir: tempfile::TempDir,
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The s3s-fs binary: `HALITE_S3S_FS`, else the one `make tools` built.
pub fn s3s_fs_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("HALITE_S3S_FS") {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".tools/bin/s3s-fs");
    assert!(
        built.exists(),
        "no s3s-fs at {}: run `make tools` (it builds s3s-fs 0.14.1)",
        built.display()
    );
    built
}

/// s3s-fs over `dir` on `port`, listening when this returns.
fn serve(dir: &tempfile::TempDir, port: u16) -> Child {
    let child = Command::new(s3s_fs_binary())
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start s3s-fs");
    super::http::wait_until_listening(&format!("127.0.0.1:{port}"), "s3s-fs");
    child
}

impl S3 {
    /// Starts s3s-fs over a fresh directory with `buckets` in it.
    pub fn start(buckets: &[&str]) -> S3 {
        let dir = tempfile::tempdir().expect("s3 dir");
        for b in buckets {
            std::fs::create_dir(dir.path().join(b)).expect("bucket dir");
        }
        let port = super::http::free_port();
        let child = serve(&dir, port);
        S3 {
            child,
            port,
            endpoint: format!("http://127.0.0.1:{port}"),
            dir,
        }
    }

    /// Stops the server (SIGKILL): the store is unreachable until
    /// [`S3::restart`].
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again over the same directory and port.
    pub fn restart(&mut self) {
        self.child = serve(&self.dir, self.port);
    }

    /// The `[objects]` settings for `bucket` under `prefix`.
    pub fn config(&self, bucket: &str, prefix: &str) -> ObjectsConfig {
        ObjectsConfig {
            url: format!("s3://{bucket}/{prefix}"),
            endpoint: self.endpoint.clone(),
            region: "us-east-1".into(),
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: SECRET_KEY.into(),
            allow_http: true,
        }
    }
}
