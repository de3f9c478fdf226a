//! Anytime-valid tests and confidence sequences for one version's event rate (errors, slow
//! requests): what evidence of health and the baseline test are built from.
//!
//! Each request is a Bernoulli draw: an event with probability p. To test "p <= q" against an
//! alternative whose odds are m times q's (p1 = q m / (1 - q + q m), m > 1), the likelihood
//! ratio of k events in n requests is
//!
//! ```text
//! LR_m = (p1/q)^k ((1 - p1)/(1 - q))^(n - k) = m^k / (1 + q (m - 1))^n
//! ```
//!
//! (since p1/q = m / (1 + q (m - 1)) and (1 - p1)/(1 - q) = 1 / (1 + q (m - 1))). Under any
//! p <= q each factor has expectation p m/(1 + q(m-1)) + (1 - p)/(1 + q(m-1)) <= 1, so LR_m is a
//! test supermartingale; so is the average over a grid of m fixed in advance (Ville's inequality:
//! P(ever >= 1/a) <= a). With m < 1 the same formula tests "p >= q". Expressing the alternatives
//! as odds multipliers keeps every p1 inside (0, 1) whatever q is.
//!
//! A confidence sequence is the set of q that the test has not rejected: the upper bound is the
//! largest q whose "p >= q" test stays below 1/a, the lower bound the smallest q whose "p <= q"
//! test does. The e-values are monotone in q, so each bound is one bisection. Counts may be
//! fractional (used to project how many requests a bound needs).

#[cfg(test)]
mod tests;

use crate::special::log_sum_exp;

/// Odds multipliers of the alternatives mixed by the confidence sequences (and their inverses
/// for upper bounds): dense near 1 for rates close to the reference, wide for rare events.
const BOUND_GRID: [f64; 9] = [1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0, 20.0, 50.0];

/// ln of the likelihood ratio of `k` events in `n` requests for the alternative with `m` times
/// the odds of `q`, against `q`.
fn log_lr(k: f64, n: f64, q: f64, m: f64) -> f64 {
    k * m.ln() - n * (q * (m - 1.0)).ln_1p()
}

/// ln of the grid mixture of [`log_lr`] over `multipliers`.
fn log_mixture(k: f64, n: f64, q: f64, multipliers: impl Iterator<Item = f64> + Clone) -> f64 {
    let count = multipliers.clone().count() as f64;
    log_sum_exp(multipliers.map(|m| log_lr(k, n, q, m))) - count.ln()
}

/// ln of the e-value of "rate <= q" after `k` events in `n` requests (decreasing in q).
pub fn log_e_rate_at_most(k: f64, n: f64, q: f64) -> f64 {
    log_mixture(k, n, q, BOUND_GRID.iter().copied())
}

/// ln of the e-value of "rate >= q" after `k` events in `n` requests (increasing in q).
pub fn log_e_rate_at_least(k: f64, n: f64, q: f64) -> f64 {
    log_mixture(k, n, q, BOUND_GRID.iter().map(|m| 1.0 / m))
}

/// An anytime-valid upper confidence bound on an event rate at level `alpha` (one-sided):
/// with probability >= 1 - alpha, the true rate is below the bound at every n at once.
/// 1 without requests.
pub fn rate_upper_bound(k: f64, n: f64, alpha: f64) -> f64 {
    if n <= 0.0 {
        return 1.0;
    }
    let log_k = (1.0 / alpha).ln();
    // Rejected ("rate >= q" has reached 1/alpha) from the bound up to 1.
    let rejected = |q: f64| log_e_rate_at_least(k, n, q) >= log_k;
    let (mut lo, mut hi) = ((k / n).clamp(0.0, 1.0), 1.0 - 1e-12);
    if !rejected(hi) {
        return 1.0;
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if rejected(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// An anytime-valid lower confidence bound on an event rate at level `alpha` (one-sided).
/// 0 without events.
pub fn rate_lower_bound(k: f64, n: f64, alpha: f64) -> f64 {
    if n <= 0.0 || k <= 0.0 {
        return 0.0;
    }
    let log_k = (1.0 / alpha).ln();
    // Rejected ("rate <= q" has reached 1/alpha) from 0 up to the bound.
    let rejected = |q: f64| log_e_rate_at_most(k, n, q) >= log_k;
    let (mut lo, mut hi) = (1e-12, (k / n).clamp(0.0, 1.0));
    if !rejected(lo) {
        return 0.0;
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if rejected(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// A sequential test of "rate <= q" for a reference q fixed in advance, fed batch by batch: the
/// average of the likelihood ratios over the design odds multipliers (the judge's design
/// ratios), so a rate several times the reference is rejected quickly.
#[derive(Debug, Clone, PartialEq)]
pub struct RateTest {
    reference: f64,
    multipliers: Vec<f64>,
    log_m: Vec<f64>,
}

impl RateTest {
    /// A test of "rate <= `reference`" with these alternatives (odds multipliers > 1).
    pub fn new(reference: f64, multipliers: &[f64]) -> RateTest {
        let multipliers: Vec<f64> = multipliers
            .iter()
            .copied()
            .filter(|m| m.is_finite() && *m > 1.0)
            .collect();
        let multipliers = if multipliers.is_empty() {
            vec![2.0]
        } else {
            multipliers
        };
        RateTest {
            reference: reference.clamp(1e-9, 1.0 - 1e-9),
            log_m: vec![0.0; multipliers.len()],
            multipliers,
        }
    }

    /// The reference rate q.
    pub fn reference(&self) -> f64 {
        self.reference
    }

    /// Takes `events` among `requests` into account.
    pub fn observe(&mut self, requests: u64, events: u64) {
        let (k, n) = (events as f64, requests as f64);
        for (log_m, m) in self.log_m.iter_mut().zip(&self.multipliers) {
            *log_m += log_lr(k, n, self.reference, *m);
        }
    }

    /// ln of the current e-value.
    pub fn log_e_value(&self) -> f64 {
        log_sum_exp(self.log_m.iter().copied()) - (self.log_m.len() as f64).ln()
    }
}
