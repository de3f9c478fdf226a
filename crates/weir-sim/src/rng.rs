//! The benchmark's random streams: weir-rng's SplitMix64, one generator per (seed, stream),
//! and the exact Poisson and binomial draws the pre-run baseline is made of.

use weir_analysis::ln_gamma;
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

    /// A Poisson draw with this mean (0 for a mean that is not a positive number). Exact:
    /// inversion by sequential search below a mean of 10, Hormann's transformed rejection with
    /// squeeze (PTRS, 1993) above, so the cost does not grow with the mean (an hour at 100 req/s
    /// is a mean of 360,000).
    pub(crate) fn poisson(&mut self, mean: f64) -> u64 {
        if mean.is_nan() || mean <= 0.0 {
            return 0;
        }
        if mean < 10.0 {
            // Inversion: walk the distribution function until it passes the draw.
            let u = self.uniform();
            let mut k = 0u64;
            let mut p = (-mean).exp();
            let mut cdf = p;
            while u >= cdf && p > 0.0 {
                k += 1;
                p *= mean / k as f64;
                cdf += p;
            }
            return k;
        }
        let root = mean.sqrt();
        let ln_mean = mean.ln();
        let b = 0.931 + 2.53 * root;
        let a = -0.059 + 0.024_83 * b;
        let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
        let v_r = 0.9277 - 3.6224 / (b - 2.0);
        loop {
            let u = self.uniform() - 0.5;
            let v = self.uniform();
            let us = 0.5 - u.abs();
            let k = ((2.0 * a / us + b) * u + mean + 0.43).floor();
            if us >= 0.07 && v <= v_r {
                // The squeeze: accepted without evaluating the density.
                return k as u64;
            }
            if k < 0.0 || (us < 0.013 && v > us) {
                continue;
            }
            let lhs = v.ln() + inv_alpha.ln() - (a / (us * us) + b).ln();
            let rhs = -mean + k * ln_mean - ln_gamma(k + 1.0);
            if lhs <= rhs {
                return k as u64;
            }
        }
    }

    /// A binomial draw: successes in `n` trials of probability `p`. Exact: the gaps between
    /// successes are geometric, so the cost is about `n * min(p, 1 - p)` draws.
    pub(crate) fn binomial(&mut self, n: u64, p: f64) -> u64 {
        if n == 0 || p.is_nan() || p <= 0.0 {
            return 0;
        }
        if p >= 1.0 {
            return n;
        }
        if p > 0.5 {
            return n - self.binomial(n, 1.0 - p);
        }
        let ln_q = (-p).ln_1p();
        let mut successes = 0u64;
        // The trial of the next success, counted from 1: a geometric gap after the last one.
        let mut trial = 0.0_f64;
        loop {
            // 1 - u lies in (0, 1], so the logarithm is finite and <= 0.
            let gap = ((1.0 - self.uniform()).ln() / ln_q).floor() + 1.0;
            trial += gap;
            if trial > n as f64 {
                return successes;
            }
            successes += 1;
        }
    }
}

#[cfg(test)]
mod tests;
