//! Crash points for the crash tests: `HALITE_FAILPOINT=<name>` makes the
//! process abort (no unwinding, no flushing: as abrupt as kill -9) when it
//! reaches the point of that name. Unset, a point costs one load of a
//! cached value.

use std::sync::OnceLock;

fn armed() -> Option<&'static str> {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            std::env::var("HALITE_FAILPOINT")
                .ok()
                .filter(|v| !v.is_empty())
        })
        .as_deref()
}

/// Aborts the process here when `HALITE_FAILPOINT` names this point.
pub fn hit(name: &str) {
    if armed() == Some(name) {
        eprintln!("halite: failpoint `{name}` reached; aborting");
        std::process::abort();
    }
}
