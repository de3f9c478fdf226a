//! Deterministic, stateless draws: draw `n` of stream `seed` is a pure function of both, so a
//! fixed seed gives the same sequence of faults whatever the concurrency.

/// SplitMix64's output function applied to `seed + (n + 1) * golden`.
pub(crate) fn draw(seed: u64, n: u64) -> u64 {
    let mut z = seed.wrapping_add(n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform draw in `[0, 1)` with 53 bits of precision.
pub(crate) fn unit(seed: u64, n: u64) -> f64 {
    (draw(seed, n) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_uniform_enough_and_deterministic() {
        assert_eq!(draw(7, 3), draw(7, 3));
        assert_ne!(draw(7, 3), draw(8, 3));
        let n = 100_000;
        let below = (0..n).filter(|&i| unit(42, i) < 0.25).count() as f64;
        // Binomial(100000, 0.25): sigma is about 137; 5 sigma is about 685.
        assert!((below - 25_000.0).abs() < 685.0, "{below}");
        assert!((0..n).all(|i| (0.0..1.0).contains(&unit(1, i))));
    }
}
