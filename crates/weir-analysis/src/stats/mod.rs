//! Small statistics: the event-conditioned canary share, Clopper-Pearson intervals, Wald's bound.

#[cfg(test)]
mod tests;

use crate::special::inverse_regularized_incomplete_beta;

/// The probability that an event (an error, a slow request) comes from the canary, when the
/// canary gets the share `weight` of the traffic and its event rate is `ratio` times the
/// primary's: theta = w r / (w r + 1 - w).
///
/// Derivation: a request goes to the canary with probability w and then fails with probability
/// p_c = r p_p; it goes to the primary with probability 1 - w and fails with probability p_p.
/// Given that a request failed, it came from the canary with probability
/// w r p_p / (w r p_p + (1 - w) p_p); the traffic volume and the primary's base rate cancel.
/// `ratio = inf` gives 1 (when w > 0).
pub fn theta(weight: f64, ratio: f64) -> f64 {
    if ratio.is_infinite() && weight > 0.0 {
        return 1.0;
    }
    let num = weight * ratio;
    let den = num + (1.0 - weight);
    if den <= 0.0 { 0.0 } else { num / den }
}

/// The inverse of [`theta`] at a given weight: r = theta (1 - w) / ((1 - theta) w).
/// `inf` for theta = 1, NaN when w is 0 or 1 (every event then has a known origin).
pub fn ratio_from_theta(weight: f64, theta: f64) -> f64 {
    if weight <= 0.0 || weight >= 1.0 {
        return f64::NAN;
    }
    if theta >= 1.0 {
        return f64::INFINITY;
    }
    theta * (1.0 - weight) / ((1.0 - theta) * weight)
}

/// The Clopper-Pearson ("exact") interval for a binomial proportion: `k` successes in `n`
/// trials, confidence 1 - alpha (alpha/2 in each tail). Returns (0, 1) when n = 0.
///
/// lower = the alpha/2 quantile of Beta(k, n - k + 1) (0 when k = 0);
/// upper = the 1 - alpha/2 quantile of Beta(k + 1, n - k) (1 when k = n).
pub fn clopper_pearson(k: u64, n: u64, alpha: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let k = k.min(n);
    let (kf, nf) = (k as f64, n as f64);
    let lower = if k == 0 {
        0.0
    } else {
        inverse_regularized_incomplete_beta(alpha / 2.0, kf, nf - kf + 1.0)
    };
    let upper = if k == n {
        1.0
    } else {
        inverse_regularized_incomplete_beta(1.0 - alpha / 2.0, kf + 1.0, nf - kf)
    };
    (lower, upper)
}

/// The Kullback-Leibler divergence KL(Bernoulli(p1) || Bernoulli(p0)) in nats.
pub fn kl_bernoulli(p1: f64, p0: f64) -> f64 {
    fn term(p: f64, q: f64) -> f64 {
        if p <= 0.0 {
            0.0
        } else if q <= 0.0 {
            f64::INFINITY
        } else {
            p * (p / q).ln()
        }
    }
    term(p1, p0) + term(1.0 - p1, 1.0 - p0)
}

/// The numerator of Wald's average-sample-number bound for error probabilities alpha (false
/// rollback) and beta (missed detection):
/// (1 - beta) ln((1 - beta) / alpha) + beta ln(beta / (1 - alpha)). It is 4.50 at
/// alpha = beta = 0.01.
pub fn wald_numerator(alpha: f64, beta: f64) -> f64 {
    let first = (1.0 - beta) * ((1.0 - beta) / alpha).ln();
    let second = if beta > 0.0 {
        beta * (beta / (1.0 - alpha)).ln()
    } else {
        0.0
    };
    first + second
}

/// Wald's lower bound on the expected number of EVENTS (errors of either version) a test that
/// conditions on error events needs before it rolls back a canary whose error rate is
/// `p_canary` against the primary's `p_primary`, at canary weight `weight`, with tolerated ratio
/// `r0`: E(N) >= [`wald_numerator`] / KL(Bernoulli(theta1) || Bernoulli(theta0)), where
/// theta1 = theta(w, p_canary / p_primary) and theta0 = theta(w, r0) (Wald & Wolfowitz: no
/// test with the same error probabilities has a smaller expected sample size; the SPRT designed
/// for the true theta1 attains it up to overshoot). `inf` when the canary is not worse than
/// tolerated (there is nothing to detect).
pub fn wald_expected_events(
    alpha: f64,
    beta: f64,
    p_canary: f64,
    p_primary: f64,
    weight: f64,
    r0: f64,
) -> f64 {
    if !(weight > 0.0 && weight < 1.0) || p_canary <= 0.0 {
        return f64::INFINITY;
    }
    let ratio = if p_primary > 0.0 {
        p_canary / p_primary
    } else {
        f64::INFINITY
    };
    if ratio <= r0 {
        return f64::INFINITY;
    }
    let kl = kl_bernoulli(theta(weight, ratio), theta(weight, r0));
    wald_numerator(alpha, beta) / kl
}

/// Wald's lower bound on the expected number of CANARY REQUESTS served before a decision, for
/// a test that conditions on error events (it does not know the primary's base rate), with a
/// constant canary weight.
///
/// Derivation: [`wald_expected_events`] gives E(N) >= A / KL(theta1 || theta0) events, with
/// A = (1 - beta) ln((1 - beta)/alpha) + beta ln(beta/(1 - alpha)). Every request is an event
/// with probability q = w p_canary + (1 - w) p_primary, so by Wald's identity the test sees
/// E(N) / q requests in expectation, of which the share w went to the canary:
/// E[canary requests] >= w E(N) / q. The expected failed canary requests are
/// p_canary times that. Worked example (reference): w = 0.1, p_canary = 5%, p_primary = 0.5%,
/// r0 = 1, alpha = beta = 0.01: theta0 = 0.1, theta1 = 0.526, KL = 0.570, E(N) = 7.9 errors,
/// q = 0.0095, about 83 canary requests and 4 failed ones. Returns `inf` when the canary is
/// not worse than tolerated, or the weight is outside (0, 1).
pub fn wald_expected_samples(
    alpha: f64,
    beta: f64,
    p_canary: f64,
    p_primary: f64,
    weight: f64,
    r0: f64,
) -> f64 {
    let events = wald_expected_events(alpha, beta, p_canary, p_primary, weight, r0);
    if !events.is_finite() {
        return f64::INFINITY;
    }
    let q = weight * p_canary + (1.0 - weight) * p_primary;
    weight * events / q
}
