//! A tiny per-thread pseudo-random generator for routing draws.
//!
//! Routing needs a uniform draw per request, not cryptographic randomness; a shared generator
//! would be a contended cache line. weir-rng's SplitMix64, seeded per thread from the standard
//! library's random hasher keys.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher, RandomState};

use weir_rng::SplitMix64;

/// A SplitMix64 generator. Seedable so tests of the routing decision are reproducible.
#[derive(Debug, Clone)]
pub struct Rng(SplitMix64);

impl Rng {
    /// A generator starting from `seed`.
    pub fn with_seed(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }

    /// A generator seeded from the process's random hasher keys.
    pub fn from_entropy() -> Self {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(0x5745_4952);
        Self::with_seed(hasher.finish())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A uniform draw in `0..10000` (basis points). The multiply-shift maps 32 random bits onto
    /// the range with a bias below 10000 / 2^32, far under the 0.01% resolution of weights.
    pub fn basis_point(&mut self) -> u16 {
        let bits = self.next_u64() >> 32;
        // The product of a 32-bit value and 10000 shifted right by 32 is always below 10000.
        ((bits * 10_000) >> 32) as u16
    }
}

thread_local! {
    static THREAD_RNG: Cell<Option<Rng>> = const { Cell::new(None) };
}

/// Runs `f` with this thread's generator.
pub(crate) fn with_thread_rng<T>(f: impl FnOnce(&mut Rng) -> T) -> T {
    THREAD_RNG.with(|cell| {
        let mut rng = cell.take().unwrap_or_else(Rng::from_entropy);
        let out = f(&mut rng);
        cell.set(Some(rng));
        out
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn basis_points_stay_in_range_and_cover_it() {
        let mut rng = Rng::with_seed(7);
        let mut seen_low = false;
        let mut seen_high = false;
        for _ in 0..200_000 {
            let bp = rng.basis_point();
            assert!(bp < 10_000);
            seen_low |= bp < 10;
            seen_high |= bp >= 9_990;
        }
        assert!(seen_low && seen_high);
    }

    #[test]
    fn thread_rng_advances() {
        let a = with_thread_rng(|r| r.next_u64());
        let b = with_thread_rng(|r| r.next_u64());
        assert_ne!(a, b);
    }
}
