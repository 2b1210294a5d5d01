//! A small deterministic generator for tests that pick random moments or
//! sizes; its seed comes from an environment variable when set and is
//! printed, so a failing run can be repeated.

pub struct Rng(u64);

impl Rng {
    /// Seeded from `var` (say `HALITE_KAFKA_SEED`) when set, else from the
    /// clock; prints `var=seed` either way.
    pub fn from_env(var: &str) -> Rng {
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Rng::from_env_or(var, clock)
    }

    /// Seeded from `var` when set, else from `default` (for a test that
    /// picks the same moments every run unless asked otherwise).
    pub fn from_env_or(var: &str, default: u64) -> Rng {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default);
        eprintln!("{var}={seed}");
        Rng(seed | 1)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}
