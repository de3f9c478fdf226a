//! The benchmark's random streams: weir-rng's SplitMix64, one generator per (seed, stream).

use weir_rng::{GAMMA, SplitMix64, mix};

/// A SplitMix64 generator for one (seed, stream) pair.
#[derive(Debug, Clone)]
pub(crate) struct Rng(SplitMix64);

impl Rng {
    /// A generator for one (seed, stream) pair; different pairs give unrelated sequences.
    pub(crate) fn new(seed: u64, stream: u64) -> Rng {
        Rng(SplitMix64::new(mix(seed ^ mix(stream.wrapping_add(GAMMA)))))
    }

    /// A uniform draw in [0, 1) with 53 random bits.
    pub(crate) fn uniform(&mut self) -> f64 {
        self.0.uniform()
    }

    /// An exponential draw with the given rate (mean 1 / rate).
    pub(crate) fn exponential(&mut self, rate: f64) -> f64 {
        // 1 - u lies in (0, 1], so the logarithm is finite.
        -(1.0 - self.uniform()).ln() / rate
    }
}

#[cfg(test)]
mod tests;
