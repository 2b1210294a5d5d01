//! Guessing tokens, slowed: the refusals of each address counted, and
//! past a few each one's answer held back its turn (docs/security.md,
//! "Guessing"). [`super::auth::identify`] records them.

/// Refused credentials by the address they came from, to slow guessing.
/// The first `free` failures of an address (`auth.slow_after_failures`)
/// are answered at once; each one after waits its turn, a turn twice as long as the last
/// (from 100 ms up to [`FailedLogins::MAX_TURN`]), so an address guessing
/// over many connections at once gets no more answers than over one. A
/// good token is never held back; [`FailedLogins::FORGET_AFTER`] without
/// a failure forgets an address.
pub struct FailedLogins {
    /// Failures answered at once; 0: none is slowed.
    free: u32,
    by_address: parking_lot::Mutex<std::collections::HashMap<std::net::IpAddr, Failures>>,
}

struct Failures {
    count: u32,
    last: std::time::Instant,
    /// When the next failure's answer may go.
    next_answer: std::time::Instant,
}

impl FailedLogins {
    pub fn new(free: u32) -> FailedLogins {
        FailedLogins {
            free,
            by_address: Default::default(),
        }
    }

    const MAX_TURN: std::time::Duration = std::time::Duration::from_secs(5);
    const FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(600);
    /// Addresses remembered at once: past it the forgotten ones go, then
    /// (a flood from many addresses) all.
    const MAX_ADDRESSES: usize = 10_000;

    /// Records a failure from `ip`: how many in a row, and when its answer
    /// may go (`None`: at once).
    pub(super) fn failed(&self, ip: std::net::IpAddr) -> (u32, Option<std::time::Instant>) {
        let now = std::time::Instant::now();
        let mut map = self.by_address.lock();
        if map.len() >= Self::MAX_ADDRESSES && !map.contains_key(&ip) {
            map.retain(|_, f| now.duration_since(f.last) < Self::FORGET_AFTER);
            if map.len() >= Self::MAX_ADDRESSES {
                map.clear();
            }
        }
        let f = map.entry(ip).or_insert(Failures {
            count: 0,
            last: now,
            next_answer: now,
        });
        if now.duration_since(f.last) >= Self::FORGET_AFTER {
            f.count = 0;
        }
        f.count += 1;
        f.last = now;
        if self.free == 0 || f.count <= self.free {
            return (f.count, None);
        }
        let doublings = (f.count - self.free - 1).min(16);
        let turn = (std::time::Duration::from_millis(100) * (1 << doublings)).min(Self::MAX_TURN);
        f.next_answer = f.next_answer.max(now) + turn;
        (f.count, Some(f.next_answer))
    }
}
