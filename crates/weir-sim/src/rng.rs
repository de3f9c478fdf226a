//! A small, fast, seedable pseudo-random generator (SplitMix64, Steele, Lea & Flood 2014).
//!
//! Written here rather than taken from a crate so that a stream is a pure function of its seed
//! forever: a dependency upgrade can never change the benchmark's figures.

/// The golden-ratio increment of SplitMix64.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a bijective mix of 64 bits.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A SplitMix64 generator.
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    /// A generator for one (seed, stream) pair; different pairs give unrelated sequences.
    pub(crate) fn new(seed: u64, stream: u64) -> Rng {
        Rng {
            state: mix(seed ^ mix(stream.wrapping_add(GAMMA))),
        }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// A uniform draw in [0, 1) with 53 random bits.
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// An exponential draw with the given rate (mean 1 / rate).
    pub(crate) fn exponential(&mut self, rate: f64) -> f64 {
        // 1 - u lies in (0, 1], so the logarithm is finite.
        -(1.0 - self.uniform()).ln() / rate
    }
}

#[cfg(test)]
mod tests;
