//! The library's HTTP client, with a test-friendly free port.
#![allow(dead_code)]

#[allow(unused_imports)]
pub use halite::client::{Response, request, request_with};

pub fn free_port() -> u16 {
    halite::client::free_port().expect("free port")
}
