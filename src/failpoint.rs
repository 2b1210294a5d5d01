//! Crash points for the crash tests: `HALITE_FAILPOINT=<name>[@<n>]` makes
//! the process SIGKILL itself the `n`th time (default: the first) it
//! reaches the point of that name — no unwinding, no flushing, exactly
//! what `kill -9` does, but at a moment chosen to the instruction. Unset,
//! a point costs one load of a cached value.
//!
//! The points: `wal-group-commit` (a synced WAL batch submitted, not yet
//! complete), `flush-before-manifest` (store files written, the manifest
//! not yet naming them), `compaction-before-manifest` (likewise for the
//! merged file), `manifest-before-rename` / `catalog-before-rename` (the new
//! version written to its temporary name), and the split steps
//! `split-after-intent`, `split-after-parent-flush`, `split-after-daughters`,
//! `split-after-commit`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

struct Armed {
    name: String,
    nth: u64,
    hits: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let v = std::env::var("HALITE_FAILPOINT").ok()?;
            let (name, nth) = match v.split_once('@') {
                Some((name, n)) => (name.to_string(), n.parse().ok()?),
                None => (v, 1),
            };
            (!name.is_empty()).then_some(Armed {
                name,
                nth,
                hits: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Kills the process here when `HALITE_FAILPOINT` names this point and
/// this is the chosen hit.
pub fn hit(name: &str) {
    if let Some(a) = armed()
        && a.name == name
        && a.hits.fetch_add(1, Ordering::SeqCst) + 1 == a.nth
    {
        eprintln!("halite: failpoint `{name}` reached; killing the process");
        // SAFETY: signalling our own process; SIGKILL cannot be caught, so
        // nothing after this runs.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        std::process::abort();
    }
}
