//! The library's HTTP client, with a test-friendly free port.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use halite::client::{Response, request, request_with};

pub fn free_port() -> u16 {
    halite::client::free_port().expect("free port")
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
