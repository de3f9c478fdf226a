//! SplitMix64 (Steele, Lea & Flood 2014): a small, fast, seedable generator that passes BigCrush.
//!
//! weir needs uniform draws, never cryptographic randomness: the router's weighted choice per
//! request, the sample app's seeded faults, the blast-radius benchmark's streams. Written here
//! rather than taken from a crate so that a stream is a pure function of its seed forever: a
//! dependency upgrade can never change a benchmark's figures or a seeded test's faults.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![no_std]

/// The golden-ratio increment of SplitMix64.
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a bijective mix of 64 bits.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 64 random bits as a uniform draw in `[0, 1)` with 53 bits of precision.
pub fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// Draw `n` of stream `seed`, statelessly: a pure function of both (the `n + 1`-th output of a
/// generator started at `seed`), so a fixed seed gives the same draws whatever the order or the
/// concurrency in which they are asked for.
pub fn draw(seed: u64, n: u64) -> u64 {
    mix(seed.wrapping_add(n.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// A SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose first output is `mix(state + GAMMA)`.
    pub fn new(state: u64) -> SplitMix64 {
        SplitMix64 { state }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// A uniform draw in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        unit(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_uniform_enough_and_deterministic() {
        assert_eq!(draw(7, 3), draw(7, 3));
        assert_ne!(draw(7, 3), draw(8, 3));
        let n = 100_000;
        let below = (0..n).filter(|&i| unit(draw(42, i)) < 0.25).count() as f64;
        // Binomial(100000, 0.25): sigma is about 137; 5 sigma is about 685.
        assert!((below - 25_000.0).abs() < 685.0, "{below}");
        assert!((0..n).all(|i| (0.0..1.0).contains(&unit(draw(1, i)))));
    }

    #[test]
    fn stateless_draws_are_the_generators_outputs() {
        let mut generator = SplitMix64::new(99);
        for n in 0..1000 {
            assert_eq!(generator.next_u64(), draw(99, n));
        }
    }

    #[test]
    fn the_sequence_is_splitmix64s() {
        // The first outputs of the reference C implementation (Vigna) for state 1234567.
        let mut generator = SplitMix64::new(1_234_567);
        assert_eq!(generator.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(generator.next_u64(), 3_203_168_211_198_807_973);
    }
}
