//! Starting and stopping `halite serve` as a separate process.
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

/// Starts the real binary on `port` with data in `data`; waits until ready.
pub fn start(data: &std::path::Path, port: u16, extra: &[&str]) -> Server {
    start_with_env(data, port, extra, &[])
}

/// Like [`start`], with environment variables (`HALITE_FAILPOINT`, say).
pub fn start_with_env(
    data: &std::path::Path,
    port: u16,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Server {
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_halite"));
    cmd.envs(env.iter().copied());
    cmd.args(["serve", "--set"])
        .arg(format!("data_dir=\"{}\"", data.display()))
        .args([
            "--set",
            &format!("server.listen=\"{addr}\""),
            "--set",
            "region.flush_size=\"4MiB\"",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let child = cmd.spawn().expect("spawn halite serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = request(&addr, "GET", "/readyz", None, b"")
            && r.status == 200
        {
            break;
        }
        assert!(Instant::now() < deadline, "server did not become ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    Server { child, addr }
}

/// SIGTERM, and the server must exit 0.
pub fn stop(mut s: Server) {
    // SAFETY: sending a signal to our own child process by its pid.
    let rc = unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = s.child.wait().expect("wait");
    assert!(status.success(), "server exited with {status:?}");
}
