//! A sequential Mann-Whitney test by betting (after Waudby-Smith & Ramdas, JRSS-B 2024) on raw
//! latencies: is the canary stochastically slower than the primary?
//!
//! Each canary latency X_i is paired with `m` fresh primary latencies Y_i1..Y_im from nearby
//! time (never reused; pairing follows arrival order only, never the values), and scored
//! S_i = mean_j [1{X_i > Y_ij} + 1/2 1{X_i = Y_ij}], in [0, 1]. Under H0 "P(X > Y) + P(X = Y)/2
//! <= c0" (c0 = 1/2: the canary is not slower; a tolerance like 0.55 allows a little), every
//! S_i has conditional mean <= c0. The wealth K_n = prod_i (1 + lambda_i (S_i - c0)) with a bet
//! lambda_i in [0, 1/c0) chosen from past scores only is then a nonnegative supermartingale
//! with K_0 = 1 (each factor is >= 1 - lambda_i c0 > 0 and has conditional mean <= 1), so by
//! Ville's inequality P(sup K_n >= 1/alpha) <= alpha: the judge fails once K_n >= 1/alpha.
//!
//! Bets: aGRAPA-style, lambda_i = clip(mean(Z) / mean(Z^2), 0, max_bet / c0) over the past
//! Z = S - c0, with one pseudo-observation (Z^2 = 1/4) so the first bets are small.

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::json;
use weir_core::model::VerdictOutcome;

use crate::judge::{Judge, Verdict, Window, num, short};

/// Settings of the Mann-Whitney judge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MannWhitneyConfig {
    /// The bound on the probability of ever failing a canary that is not slower (e.g. 0.01).
    pub alpha: f64,
    /// c0: the tolerated P(canary slower than primary) + P(tie)/2; 0.5 tolerates nothing.
    pub tolerance: f64,
    /// Fresh primary latencies compared with each canary latency (>= 1).
    pub primaries_per_canary: usize,
    /// The largest bet as a share of 1/c0 (in (0, 1); e.g. 0.5).
    pub max_bet: f64,
    /// Unpaired latencies kept for later windows, per version (the oldest are dropped first,
    /// so pairs stay close in time).
    pub max_pending: usize,
}

impl Default for MannWhitneyConfig {
    fn default() -> Self {
        MannWhitneyConfig {
            alpha: 0.01,
            tolerance: 0.5,
            primaries_per_canary: 4,
            max_bet: 0.5,
            max_pending: 1_000,
        }
    }
}

/// The sequential Mann-Whitney judge; reads [`Window::canary_latencies_ms`] and
/// [`Window::primary_latencies_ms`] (every request, or the same sampled share of each version,
/// in arrival order). Like the sequential judge it never passes: `Inconclusive` until it fails,
/// and a failure is final until [`Judge::reset`].
#[derive(Debug, Clone)]
pub struct MannWhitneyJudge {
    config: MannWhitneyConfig,
    canary: VecDeque<f64>,
    primary: VecDeque<f64>,
    log_wealth: f64,
    pairs: u64,
    sum_z: f64,
    sum_z2: f64,
    sum_s: f64,
    failed: bool,
}

impl MannWhitneyJudge {
    /// A judge with these settings (unusable values are replaced by the defaults').
    pub fn new(config: MannWhitneyConfig) -> MannWhitneyJudge {
        let defaults = MannWhitneyConfig::default();
        let mut config = config;
        if !(config.alpha > 0.0 && config.alpha < 1.0) {
            config.alpha = defaults.alpha;
        }
        if !(config.tolerance > 0.0 && config.tolerance < 1.0) {
            config.tolerance = defaults.tolerance;
        }
        if !(config.max_bet > 0.0 && config.max_bet < 1.0) {
            config.max_bet = defaults.max_bet;
        }
        config.primaries_per_canary = config.primaries_per_canary.max(1);
        config.max_pending = config.max_pending.max(config.primaries_per_canary);
        MannWhitneyJudge {
            config,
            canary: VecDeque::new(),
            primary: VecDeque::new(),
            log_wealth: 0.0,
            pairs: 0,
            sum_z: 0.0,
            sum_z2: 0.0,
            sum_s: 0.0,
            failed: false,
        }
    }

    /// ln of the wealth K_n (the e-value).
    pub fn log_e_value(&self) -> f64 {
        self.log_wealth
    }

    /// Canary latencies scored so far.
    pub fn pairs(&self) -> u64 {
        self.pairs
    }

    /// Takes the window into account and returns the outcome (no evidence built).
    pub fn observe_outcome(&mut self, window: &Window) -> VerdictOutcome {
        self.update(window);
        if self.failed {
            VerdictOutcome::Fail
        } else {
            VerdictOutcome::Inconclusive
        }
    }

    fn update(&mut self, window: &Window) {
        let cap = self.config.max_pending;
        let push = |queue: &mut VecDeque<f64>, xs: &[f64]| {
            for &x in xs.iter().filter(|x| !x.is_nan()) {
                if queue.len() == cap {
                    queue.pop_front();
                }
                queue.push_back(x);
            }
        };
        push(&mut self.canary, &window.canary_latencies_ms);
        push(&mut self.primary, &window.primary_latencies_ms);
        let m = self.config.primaries_per_canary;
        let c0 = self.config.tolerance;
        let max_lambda = self.config.max_bet / c0;
        while !self.canary.is_empty() && self.primary.len() >= m {
            let Some(x) = self.canary.pop_front() else {
                break;
            };
            let mut score = 0.0;
            for y in self.primary.drain(..m) {
                score += if x > y {
                    1.0
                } else if x == y {
                    0.5
                } else {
                    0.0
                };
            }
            let s = score / m as f64;
            // The bet uses past scores only (predictable).
            let n = self.pairs as f64;
            let mean_z = self.sum_z / (n + 1.0);
            let mean_z2 = (self.sum_z2 + 0.25) / (n + 1.0);
            let lambda = (mean_z / mean_z2).clamp(0.0, max_lambda);
            let z = s - c0;
            self.log_wealth += (lambda * z).ln_1p();
            self.pairs += 1;
            self.sum_z += z;
            self.sum_z2 += z * z;
            self.sum_s += s;
        }
        if self.log_wealth >= (1.0 / self.config.alpha).ln() {
            self.failed = true;
        }
    }

    /// The evidence so far.
    pub fn evidence(&self) -> serde_json::Value {
        let threshold = 1.0 / self.config.alpha;
        let mean_s = if self.pairs == 0 {
            f64::NAN
        } else {
            self.sum_s / self.pairs as f64
        };
        let summary = format!(
            "{}: P(canary slower) ~ {} over {} canary latencies (tolerated {}), wealth {} (fails at {})",
            if self.failed {
                "canary slower than allowed"
            } else {
                "no proof the canary is slower"
            },
            short(mean_s),
            self.pairs,
            short(self.config.tolerance),
            short(self.log_wealth.exp()),
            short(threshold),
        );
        json!({
            "pairs": self.pairs,
            "primariesPerCanary": self.config.primaries_per_canary,
            "meanScore": num(mean_s),
            "tolerance": self.config.tolerance,
            "eValue": num(self.log_wealth.exp()),
            "logEValue": num(self.log_wealth),
            "threshold": threshold,
            "summary": summary,
        })
    }
}

impl Judge for MannWhitneyJudge {
    fn name(&self) -> &str {
        "mann-whitney"
    }

    fn observe(&mut self, window: &Window) -> Verdict {
        let outcome = self.observe_outcome(window);
        Verdict {
            outcome,
            evidence: self.evidence(),
        }
    }

    fn reset(&mut self) {
        *self = MannWhitneyJudge::new(self.config.clone());
    }
}
