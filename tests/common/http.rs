//! The library's HTTP client, with a test-friendly free port.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use halite::client::{Response, request, request_with};

pub fn free_port() -> u16 {
    halite::client::free_port().expect("free port")
}

/// Waits up to 20 s for a server just started (`what`) to accept
/// connections on `addr`.
pub fn wait_until_listening(addr: &str, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(std::time::Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Creates a table through the API; it must answer 201.
pub fn create_table(addr: &str, spec: &serde_json::Value) {
    let r = request(
        addr,
        "POST",
        "/api/v1/tables",
        Some("application/json"),
        spec.to_string().as_bytes(),
    )
    .expect("create table");
    assert_eq!(r.status, 201, "{}", r.text());
}
