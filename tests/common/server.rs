//! Starting and stopping `halite serve` as a separate process (tests
//! start it through `scenario`, which assembles its data, port and
//! settings).
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::http::request;

pub struct Server {
    pub child: Child,
    pub addr: String,
}

/// A test that fails half way must not leave its server running.
impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `halite serve` over `data` on `port` with small MemStores, then `extra`
/// arguments (a later `--set` wins), not started; its output is dropped
/// and its log goes to the test's.
pub fn command<S: AsRef<std::ffi::OsStr>>(
    data: &std::path::Path,
    port: u16,
    extra: &[S],
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_halite"));
    cmd.args(["serve", "--set"])
        .arg(format!("data_dir=\"{}\"", data.display()))
        .args([
            "--set",
            &format!("server.listen=\"{}\"", address(port)),
            "--set",
            "region.flush_size=\"4MiB\"",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    cmd
}

pub fn address(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// Starts `cmd` (a [`command`] on `port`) without waiting for it.
pub fn spawn(mut cmd: Command, port: u16) -> Server {
    let child = cmd.spawn().expect("spawn halite serve");
    Server {
        child,
        addr: address(port),
    }
}

/// Starts `cmd` (a [`command`] on `port`) and waits until it is ready.
pub fn spawn_ready(cmd: Command, port: u16) -> Server {
    let mut server = spawn(cmd, port);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = request(&server.addr, "GET", "/readyz", None, b"")
            && r.status == 200
        {
            return server;
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("the server exited before it was ready: {status:?}");
        }
        assert!(Instant::now() < deadline, "server did not become ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM, and the server must exit 0.
pub fn stop(mut s: Server) {
    // SAFETY: sending a signal to our own child process by its pid.
    let rc = unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = s.child.wait().expect("wait");
    assert!(status.success(), "server exited with {status:?}");
}
