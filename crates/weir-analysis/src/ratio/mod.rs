//! The event-conditioned test of "the canary's event rate is more than r0 times the primary's".
//!
//! Condition on events (errors, or slow requests): at canary weight w, an event comes from the
//! canary with probability theta(w, r) = w r / (w r + 1 - w), where r = p_canary / p_primary
//! ([`crate::theta`]). Given the events, which version each came from is a sequence of
//! independent Bernoulli(theta_t) draws whatever the traffic volume and the primary's base rate
//! (which may change over time, as in a primary incident). Null H0: r <= r0.
//!
//! Likelihood ratio of one window with weight w, `nc` canary and `np` primary events, for the
//! alternative r1 against r0 (theta1 = theta(w, r1), theta0 = theta(w, r0)):
//!
//! ```text
//! ln LR = nc ln(theta1/theta0) + np ln((1-theta1)/(1-theta0))
//!       = nc ln(r1/r0) - (nc + np) [ln(1 + w (r1 - 1)) - ln(1 + w (r0 - 1))]
//! ```
//!
//! (since theta = w r / (1 + w (r - 1)) and 1 - theta = (1 - w) / (1 + w (r - 1))). Within a
//! window of constant weight this is exactly the product of the per-event SPRT factors, so batch
//! updates lose nothing but the chance to stop between two events. For r1 > r0 and any true
//! r <= r0, each factor has expectation <= 1: the product is a nonnegative supermartingale with
//! initial value 1 under H0 (a "test supermartingale"), whatever the weights were, as long as
//! each window's weight was fixed before its events were seen.
//!
//! Mixtures:
//! - [`Mixture::Grid`] (default): the average of the SPRT martingales over a grid of design
//!   ratios r1 > r0. An average of test supermartingales is one, so Ville's inequality gives
//!   P(sup_n E_n >= 1/alpha) <= alpha under H0, also under stepped weights.
//! - [`Mixture::Beta`]: the beta-mixture e-value over theta, with prior Beta(k theta0,
//!   k (1 - theta0)) TRUNCATED to theta > theta0 so that it is one-sided (the untruncated
//!   mixture of the reference also grows when the canary is *better*, which must not roll
//!   back). Exact for a constant weight; when the weight changes a new mixture starts and the
//!   e-value is the product of the finished segments' final values and the current one (still
//!   a test supermartingale, because segment ends are set by the weight, which is decided before
//!   the events). The grid is used by the judge by default because it keeps all evidence across
//!   weight steps.
//!
//! The per-weight totals (weight, nc, np) are kept, since every quantity depends on the events
//! only through them: they give the maximum-likelihood ratio and an anytime-valid confidence
//! sequence for r.

#[cfg(test)]
mod tests;

use crate::special::{ln_beta, ln_regularized_incomplete_beta, log_sum_exp};
use crate::stats::theta;

/// The default grid of design ratios r1 (for r0 = 1; generally the grid's points above r0).
pub const DEFAULT_DESIGN_RATIOS: [f64; 6] = [1.5, 2.0, 3.0, 5.0, 10.0, 30.0];

/// How the test mixes alternatives.
#[derive(Debug, Clone, PartialEq)]
pub enum Mixture {
    /// The average of SPRTs over these design ratios r1 (points <= r0 are dropped; when none
    /// is left, r1 = 2 r0 alone).
    Grid(Vec<f64>),
    /// The one-sided beta-mixture e-value with prior strength k (a = k theta0,
    /// b = k (1 - theta0)); k = 1 or 2 is a good default.
    Beta {
        /// Prior strength.
        k: f64,
    },
}

impl Default for Mixture {
    fn default() -> Self {
        Mixture::Grid(DEFAULT_DESIGN_RATIOS.to_vec())
    }
}

/// Events of both versions at one weight.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cell {
    weight: f64,
    canary: u64,
    primary: u64,
}

/// A sequential test of H0: p_canary / p_primary <= r0 on event counts, valid under changing
/// canary weights. Feed it one window at a time with [`RatioTest::observe`]; reject H0 (roll
/// back) when [`RatioTest::log_e_value`] >= ln(1/alpha).
#[derive(Debug, Clone)]
pub struct RatioTest {
    r0: f64,
    beta_k: Option<f64>,
    /// Design multipliers m_j = r1_j / r0 (> 1); for the beta mixture, the default grid's (used
    /// only by the confidence sequence).
    multipliers: Vec<f64>,
    ln_multipliers: Vec<f64>,
    /// Running ln of each design's SPRT martingale (grid mode).
    log_m: Vec<f64>,
    /// The weight the cached increments are for, and ln(1 + w (r1_j - 1)) - ln(1 + w (r0 - 1)).
    cached_weight: f64,
    cached_d: Vec<f64>,
    /// Beta mode: ln of the finished segments' product, and the current segment.
    beta_carry: f64,
    segment: Option<Cell>,
    cells: Vec<Cell>,
    canary_events: u64,
    primary_events: u64,
    skipped_events: u64,
}

impl RatioTest {
    /// A test of "ratio <= r0" (r0 > 0; non-finite or non-positive values mean 1).
    pub fn new(r0: f64, mixture: Mixture) -> RatioTest {
        let r0 = if r0.is_finite() && r0 > 0.0 { r0 } else { 1.0 };
        let (beta_k, designs) = match mixture {
            Mixture::Grid(designs) => (None, designs),
            Mixture::Beta { k } => {
                let k = if k.is_finite() && k > 0.0 { k } else { 1.0 };
                (Some(k), DEFAULT_DESIGN_RATIOS.to_vec())
            }
        };
        let mut multipliers: Vec<f64> = designs
            .iter()
            .filter(|r1| r1.is_finite() && **r1 > r0)
            .map(|r1| r1 / r0)
            .collect();
        if multipliers.is_empty() {
            multipliers.push(2.0);
        }
        let ln_multipliers = multipliers.iter().map(|m| m.ln()).collect();
        let n = multipliers.len();
        RatioTest {
            r0,
            beta_k,
            multipliers,
            ln_multipliers,
            log_m: vec![0.0; n],
            cached_weight: f64::NAN,
            cached_d: vec![0.0; n],
            beta_carry: 0.0,
            segment: None,
            cells: Vec::new(),
            canary_events: 0,
            primary_events: 0,
            skipped_events: 0,
        }
    }

    /// The tolerated ratio r0.
    pub fn r0(&self) -> f64 {
        self.r0
    }

    /// The design ratios r1 in use (grid mode; for the beta mixture, the grid used by the
    /// confidence sequence).
    pub fn design_ratios(&self) -> Vec<f64> {
        self.multipliers.iter().map(|m| m * self.r0).collect()
    }

    /// Whether this is the beta mixture.
    pub fn is_beta_mixture(&self) -> bool {
        self.beta_k.is_some()
    }

    /// Forget everything.
    pub fn reset(&mut self) {
        self.log_m.iter_mut().for_each(|v| *v = 0.0);
        self.beta_carry = 0.0;
        self.segment = None;
        self.cells.clear();
        self.canary_events = 0;
        self.primary_events = 0;
        self.skipped_events = 0;
    }

    /// Takes one window into account: `canary` and `primary` events observed while the canary
    /// had the share `weight` of the traffic. Windows with a weight outside (0, 1) carry no
    /// information about the ratio (every event's origin is known in advance) and are counted
    /// as skipped.
    pub fn observe(&mut self, weight: f64, canary: u64, primary: u64) {
        if canary == 0 && primary == 0 {
            return;
        }
        if !(weight > 0.0 && weight < 1.0) {
            self.skipped_events += canary + primary;
            return;
        }
        self.canary_events += canary;
        self.primary_events += primary;
        match self.cells.iter_mut().rev().find(|c| c.weight == weight) {
            Some(cell) => {
                cell.canary += canary;
                cell.primary += primary;
            }
            None => self.cells.push(Cell {
                weight,
                canary,
                primary,
            }),
        }
        let (nc, n) = (canary as f64, (canary + primary) as f64);
        match self.beta_k {
            None => {
                if weight != self.cached_weight {
                    self.cached_weight = weight;
                    let base = (weight * (self.r0 - 1.0)).ln_1p();
                    for (d, m) in self.cached_d.iter_mut().zip(&self.multipliers) {
                        *d = (weight * (self.r0 * m - 1.0)).ln_1p() - base;
                    }
                }
                for ((log_m, ln_m), d) in self
                    .log_m
                    .iter_mut()
                    .zip(&self.ln_multipliers)
                    .zip(&self.cached_d)
                {
                    *log_m += nc * ln_m - n * d;
                }
            }
            Some(k) => match &mut self.segment {
                Some(seg) if seg.weight == weight => {
                    seg.canary += canary;
                    seg.primary += primary;
                }
                segment => {
                    if let Some(done) = segment {
                        self.beta_carry += beta_mixture_log_e(
                            theta(done.weight, self.r0),
                            k,
                            done.canary,
                            done.primary,
                            true,
                        );
                    }
                    *segment = Some(Cell {
                        weight,
                        canary,
                        primary,
                    });
                }
            },
        }
    }

    /// ln of the current e-value (0 at the start; >= ln(1/alpha) rejects H0 at level alpha).
    pub fn log_e_value(&self) -> f64 {
        match self.beta_k {
            None => log_sum_exp(self.log_m.iter().copied()) - (self.log_m.len() as f64).ln(),
            Some(k) => {
                self.beta_carry
                    + self.segment.map_or(0.0, |seg| {
                        beta_mixture_log_e(
                            theta(seg.weight, self.r0),
                            k,
                            seg.canary,
                            seg.primary,
                            true,
                        )
                    })
            }
        }
    }

    /// Canary events counted (at weights strictly between 0 and 1).
    pub fn canary_events(&self) -> u64 {
        self.canary_events
    }

    /// Primary events counted (at weights strictly between 0 and 1).
    pub fn primary_events(&self) -> u64 {
        self.primary_events
    }

    /// Events ignored because the weight was 0 or 1 (or not a number).
    pub fn skipped_events(&self) -> u64 {
        self.skipped_events
    }

    /// The maximum-likelihood estimate of r over all windows (the weights may differ):
    /// the root in s = ln r of sum_cells [nc - (nc + np) theta(w, e^s)] = 0 (the score of a
    /// logistic regression with offset logit(w); decreasing in s). 0 when the canary had no
    /// events, `inf` when the primary had none, NaN when there were no events.
    pub fn estimated_ratio(&self) -> f64 {
        if self.canary_events + self.primary_events == 0 {
            return f64::NAN;
        }
        if self.canary_events == 0 {
            return 0.0;
        }
        if self.primary_events == 0 {
            return f64::INFINITY;
        }
        let score = |s: f64| {
            let r = s.exp();
            self.cells
                .iter()
                .map(|c| c.canary as f64 - (c.canary + c.primary) as f64 * theta(c.weight, r))
                .sum::<f64>()
        };
        bisect_decreasing(score, -50.0, 50.0).exp()
    }

    /// ln of the grid e-value for H0: ratio <= `r` (alternatives r m_j), from the totals.
    /// Decreasing in `r`.
    fn log_e_above(&self, r: f64) -> f64 {
        self.log_e_grid(r, |m| r * m)
    }

    /// ln of the grid e-value for H0: ratio >= `r` (alternatives r / m_j), from the totals.
    /// Increasing in `r`.
    fn log_e_below(&self, r: f64) -> f64 {
        self.log_e_grid(r, |m| r / m)
    }

    fn log_e_grid(&self, r: f64, alternative: impl Fn(f64) -> f64) -> f64 {
        let sums = self.multipliers.iter().map(|&m| {
            let r1 = alternative(m);
            self.cells
                .iter()
                .map(|c| log_likelihood_ratio(c.weight, r, r1, c.canary, c.primary))
                .sum::<f64>()
        });
        log_sum_exp(sums.collect::<Vec<_>>()) - (self.multipliers.len() as f64).ln()
    }

    /// An anytime-valid confidence sequence for r at level 1 - alpha: each end is a one-sided
    /// bound at level alpha/2. The lower end is the smallest r whose "ratio <= r" grid test has
    /// not reached 2/alpha (the tests are decreasing in r, so the rejected set is an interval
    /// (0, lower)); the upper end likewise from the "ratio >= r" tests. By Ville's inequality
    /// the true ratio lies in every interval of the sequence with probability >= 1 - alpha. The
    /// upper end is `inf` while the primary has had too few events.
    pub fn confidence_sequence(&self, alpha: f64) -> (f64, f64) {
        let log_k = (2.0 / alpha).ln();
        let lower = if self.canary_events == 0 || self.log_e_above((-40.0_f64).exp()) < log_k {
            0.0
        } else {
            bisect_decreasing(|s| self.log_e_above(s.exp()) - log_k, -40.0, 40.0).exp()
        };
        let upper = if self.primary_events == 0 || self.log_e_below(40.0_f64.exp()) < log_k {
            f64::INFINITY
        } else {
            bisect_decreasing(|s| log_k - self.log_e_below(s.exp()), -40.0, 40.0).exp()
        };
        (lower, upper)
    }
}

/// ln of the likelihood ratio of one batch of events at weight `weight`: `canary` and `primary`
/// events under ratio `r1` against ratio `r0`:
/// nc ln(r1/r0) - (nc + np) [ln(1 + w (r1 - 1)) - ln(1 + w (r0 - 1))].
pub(crate) fn log_likelihood_ratio(
    weight: f64,
    r0: f64,
    r1: f64,
    canary: u64,
    primary: u64,
) -> f64 {
    let (nc, n) = (canary as f64, (canary + primary) as f64);
    nc * (r1 / r0).ln() - n * ((weight * (r1 - 1.0)).ln_1p() - (weight * (r0 - 1.0)).ln_1p())
}

/// ln of the beta-mixture e-value for `nc` canary and `np` primary events at null share
/// `theta0`, prior Beta(a, b) with a = k theta0, b = k (1 - theta0):
///
/// ```text
/// E = [B(a + nc, b + np) / B(a, b)] / [theta0^nc (1 - theta0)^np]            (two-sided)
/// E = that * P(theta > theta0 | Beta(a + nc, b + np)) / P(theta > theta0 | Beta(a, b))
///                                                     (one-sided: prior truncated to theta > theta0)
/// ```
///
/// P(theta > theta0 | Beta(a, b)) = 1 - I_theta0(a, b) = I_{1-theta0}(b, a).
pub fn beta_mixture_log_e(theta0: f64, k: f64, nc: u64, np: u64, one_sided: bool) -> f64 {
    let (a, b) = (k * theta0, k * (1.0 - theta0));
    let (ncf, npf) = (nc as f64, np as f64);
    let mut log_e =
        ln_beta(a + ncf, b + npf) - ln_beta(a, b) - ncf * theta0.ln() - npf * (-theta0).ln_1p();
    if one_sided {
        log_e += ln_regularized_incomplete_beta(1.0 - theta0, b + npf, a + ncf)
            - ln_regularized_incomplete_beta(1.0 - theta0, b, a);
    }
    log_e
}

/// The root of a decreasing function on [lo, hi] (bisection; the nearest end when there is no
/// sign change).
fn bisect_decreasing(f: impl Fn(f64) -> f64, mut lo: f64, mut hi: f64) -> f64 {
    if f(lo) <= 0.0 {
        return lo;
    }
    if f(hi) >= 0.0 {
        return hi;
    }
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if f(mid) > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-12 {
            break;
        }
    }
    0.5 * (lo + hi)
}
