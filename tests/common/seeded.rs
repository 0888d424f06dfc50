//! Seeded randomness for the crash suites: the run's seed (`AGENT_SESSION_SEED`, or else
//! the clock; each test prints it, so a failing run can be replayed) and a small
//! xorshift generator, split into independent streams.
//!
//! Included with `#[path = "common/seeded.rs"] mod seeded;`.
#![allow(dead_code)] // each test binary uses part of it

/// The variable that replays a run: its value is the seed the run printed.
pub const SEED_ENV: &str = "AGENT_SESSION_SEED";

/// The seed of this run: `AGENT_SESSION_SEED` if set (a number), else from the clock.
pub fn run_seed() -> u64 {
    std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            u64::try_from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() & 0xffff_ffff_ffff),
            )
            .unwrap_or(1)
                | 1
        })
}

/// A xorshift generator: enough to pick delays, cut points and operations, and the same
/// sequence for the same seed on every machine.
pub struct Rng(u64);

impl Rng {
    /// The generator of `stream` (one per use: a child's operations, the cuts, ...) of
    /// the run `seed`.
    pub fn new(seed: u64, stream: u64) -> Rng {
        Rng((seed ^ stream).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// A number below `n` (0 for `n` = 0).
    pub fn below_u64(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }

    /// An index below `n` (0 for `n` = 0).
    pub fn below(&mut self, n: usize) -> usize {
        // The remainder is below `n`, a usize.
        usize::try_from(self.below_u64(n as u64)).unwrap_or(0)
    }
}
