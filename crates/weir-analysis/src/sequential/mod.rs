//! The sequential judge: anytime-valid tests of "the canary is worse than the primary".

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use serde_json::json;
use weir_core::model::VerdictOutcome;

use crate::judge::{Judge, Verdict, Window, num, p99, short};
use crate::ratio::{DEFAULT_DESIGN_RATIOS, Mixture, RatioTest};
use crate::special::log_sum_exp;

/// The sequential judge's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SequentialConfig {
    /// The bound on the probability of ever rolling back a canary that is no worse than
    /// tolerated, over the whole run, however long (e.g. 0.01).
    pub alpha: f64,
    /// r0: the tolerated ratio of the canary's event rate to the primary's (1.0: no increase
    /// tolerated; 1.2: 20% more errors tolerated). Applies to errors and slow requests.
    pub tolerated_increase: f64,
    /// The grid of design ratios r1 > r0 averaged by the SPRT mixture; points <= r0 are ignored.
    pub design_ratios: Vec<f64>,
    /// The latency threshold (ms) fixed at run start: the caller counts, per version, the
    /// requests slower than it in [`crate::VersionCounts::slow`]. `None`: no latency test,
    /// unless `latency_warmup_requests` > 0.
    pub latency_threshold_ms: Option<f64>,
    /// When `latency_threshold_ms` is `None` and this is > 0: the threshold is the primary's
    /// p99 (nearest rank) over its first `latency_warmup_requests` raw latencies
    /// ([`Window::primary_latencies_ms`]); from the next window on, the judge counts the slow
    /// requests itself from the raw latencies of both versions (which must then list every
    /// request, or the same sampled share of each version's), and ignores `slow`. The windows
    /// of the warm-up are not used by the latency test.
    pub latency_warmup_requests: u64,
}

impl Default for SequentialConfig {
    fn default() -> Self {
        SequentialConfig {
            alpha: 0.01,
            tolerated_increase: 1.0,
            design_ratios: DEFAULT_DESIGN_RATIOS.to_vec(),
            latency_threshold_ms: None,
            latency_warmup_requests: 0,
        }
    }
}

/// A setting the sequential judge cannot use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// alpha must be in (0, 1).
    #[error("alpha must be between 0 and 1 (exclusive), got {0}")]
    Alpha(f64),
    /// r0 must be a positive number.
    #[error("the tolerated increase must be a positive number, got {0}")]
    ToleratedIncrease(f64),
    /// At least one design ratio must exceed r0.
    #[error("at least one design ratio must be a number above the tolerated increase {0}")]
    DesignRatios(f64),
    /// The latency threshold must be a positive number.
    #[error("the latency threshold must be a positive number of milliseconds, got {0}")]
    LatencyThreshold(f64),
}

impl SequentialConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(ConfigError::Alpha(self.alpha));
        }
        let r0 = self.tolerated_increase;
        if !(r0.is_finite() && r0 > 0.0) {
            return Err(ConfigError::ToleratedIncrease(r0));
        }
        if !self.design_ratios.iter().any(|r| r.is_finite() && *r > r0) {
            return Err(ConfigError::DesignRatios(r0));
        }
        if let Some(t) = self.latency_threshold_ms
            && !(t.is_finite() && t > 0.0)
        {
            return Err(ConfigError::LatencyThreshold(t));
        }
        Ok(())
    }
}

/// Where the latency test is.
#[derive(Debug, Clone, PartialEq)]
enum Latency {
    /// No threshold: no latency test.
    Off,
    /// Collecting the primary's latencies to fix the threshold.
    WarmingUp(Vec<f64>),
    /// Testing, with this threshold; `counted` when the judge counts exceedances itself from
    /// raw latencies (threshold from the warm-up).
    On { threshold_ms: f64, counted: bool },
}

/// Running totals of one version.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Totals {
    requests: u64,
    errors: u64,
    /// Requests the latency test has looked at, and the slow ones among them.
    latency_requests: u64,
    slow: u64,
}

/// Anytime-valid sequential tests of the canary against the primary (see the crate docs and
/// [`RatioTest`]). Errors: the event-conditioned test of "error ratio <= r0" with a mixture of
/// SPRTs over the design grid (or, with [`SequentialJudge::with_mixture`], the one-sided beta
/// mixture). Latency: the same test on exceedances of a threshold fixed at run start.
///
/// Decision: the judge's e-value is E = E_errors when the latency test is off, else
/// E = (E_errors + E_latency) / 2, and it fails (roll back) once E >= 1/alpha. The average of
/// two test supermartingales is one, so P(ever failing a canary that is no worse than
/// tolerated on both counts) <= alpha. This rule fails whenever either e-value reaches 2/alpha
/// (the Bonferroni split alpha/2 + alpha/2), and sometimes earlier, when both grow.
///
/// It never passes: these tests only decide "worse"; it answers `Inconclusive` until it fails,
/// and the run's plan (steps, intervals) decides promotion. A failure is final until
/// [`Judge::reset`].
#[derive(Debug, Clone)]
pub struct SequentialJudge {
    config: SequentialConfig,
    errors: RatioTest,
    latency_test: RatioTest,
    latency: Latency,
    canary: Totals,
    primary: Totals,
    windows: u64,
    failed: Option<&'static str>,
}

impl SequentialJudge {
    /// A judge with these settings (SPRT grid mixture). Invalid settings are replaced by the
    /// defaults' values (alpha 0.01, r0 1, the default grid, no latency threshold); use
    /// [`SequentialJudge::try_new`] to be told instead.
    pub fn new(config: SequentialConfig) -> SequentialJudge {
        SequentialJudge::with_mixture(config, None)
    }

    /// A judge with these settings, or why they are unusable.
    pub fn try_new(config: SequentialConfig) -> Result<SequentialJudge, ConfigError> {
        config.validate()?;
        Ok(SequentialJudge::new(config))
    }

    /// A judge whose tests use this mixture (`None`: the grid of `config.design_ratios`).
    /// With [`Mixture::Beta`], the e-value restarts (multiplicatively) at every weight change;
    /// the grid keeps all evidence across steps and is the better choice for stepped weights.
    pub fn with_mixture(config: SequentialConfig, mixture: Option<Mixture>) -> SequentialJudge {
        let config = sanitize(config);
        let mixture = mixture.unwrap_or_else(|| Mixture::Grid(config.design_ratios.clone()));
        let latency = match (config.latency_threshold_ms, config.latency_warmup_requests) {
            (Some(threshold_ms), _) => Latency::On {
                threshold_ms,
                counted: false,
            },
            (None, 0) => Latency::Off,
            (None, _) => Latency::WarmingUp(Vec::new()),
        };
        SequentialJudge {
            errors: RatioTest::new(config.tolerated_increase, mixture.clone()),
            latency_test: RatioTest::new(config.tolerated_increase, mixture),
            latency,
            canary: Totals::default(),
            primary: Totals::default(),
            windows: 0,
            failed: None,
            config,
        }
    }

    /// The settings in use.
    pub fn config(&self) -> &SequentialConfig {
        &self.config
    }

    /// ln of the judge's e-value (see the type's docs); it fails once this is >= ln(1/alpha).
    pub fn log_e_value(&self) -> f64 {
        if matches!(self.latency, Latency::Off) {
            self.errors.log_e_value()
        } else {
            log_sum_exp([self.errors.log_e_value(), self.latency_test.log_e_value()])
                - std::f64::consts::LN_2
        }
    }

    /// The error-rate test.
    pub fn error_test(&self) -> &RatioTest {
        &self.errors
    }

    /// The latency (exceedance) test.
    pub fn latency_test(&self) -> &RatioTest {
        &self.latency_test
    }

    /// The latency threshold in force, once known.
    pub fn latency_threshold_ms(&self) -> Option<f64> {
        match self.latency {
            Latency::On { threshold_ms, .. } => Some(threshold_ms),
            _ => None,
        }
    }

    /// Whether the judge has failed (final until reset).
    pub fn has_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// [`Judge::observe`] without building the evidence (for simulations): takes the window
    /// into account and returns the outcome.
    pub fn observe_outcome(&mut self, window: &Window) -> VerdictOutcome {
        self.update(window);
        self.outcome()
    }

    /// The current outcome: `Fail` once the e-value has reached 1/alpha, else `Inconclusive`.
    pub fn outcome(&self) -> VerdictOutcome {
        if self.failed.is_some() {
            VerdictOutcome::Fail
        } else {
            VerdictOutcome::Inconclusive
        }
    }

    fn update(&mut self, window: &Window) {
        self.windows += 1;
        let w = window.canary_weight;
        self.canary.requests += window.canary.requests;
        self.canary.errors += window.canary.errors;
        self.primary.requests += window.primary.requests;
        self.primary.errors += window.primary.errors;
        self.errors
            .observe(w, window.canary.errors, window.primary.errors);
        match &mut self.latency {
            Latency::Off => {}
            Latency::WarmingUp(seen) => {
                seen.extend(
                    window
                        .primary_latencies_ms
                        .iter()
                        .copied()
                        .filter(|x| x.is_finite()),
                );
                if seen.len() as u64 >= self.config.latency_warmup_requests {
                    let threshold_ms = p99(seen).unwrap_or(f64::INFINITY);
                    self.latency = Latency::On {
                        threshold_ms,
                        counted: true,
                    };
                }
            }
            Latency::On {
                threshold_ms,
                counted,
            } => {
                let (canary_n, canary_slow, primary_n, primary_slow) = if *counted {
                    let slow =
                        |xs: &[f64]| xs.iter().filter(|x| **x > *threshold_ms).count() as u64;
                    (
                        window.canary_latencies_ms.len() as u64,
                        slow(&window.canary_latencies_ms),
                        window.primary_latencies_ms.len() as u64,
                        slow(&window.primary_latencies_ms),
                    )
                } else {
                    (
                        window.canary.requests,
                        window.canary.slow,
                        window.primary.requests,
                        window.primary.slow,
                    )
                };
                self.canary.latency_requests += canary_n;
                self.canary.slow += canary_slow;
                self.primary.latency_requests += primary_n;
                self.primary.slow += primary_slow;
                self.latency_test.observe(w, canary_slow, primary_slow);
            }
        }
        if self.failed.is_none() && self.log_e_value() >= (1.0 / self.config.alpha).ln() {
            let by_errors = self.errors.log_e_value();
            let by_latency = self.latency_test.log_e_value();
            self.failed = Some(if by_errors >= by_latency {
                "errors"
            } else {
                "latency"
            });
        }
    }

    /// The evidence so far, as JSON: counts per version (`canaryRequests`, `canaryErrors`,
    /// `primaryRequests`, `primaryErrors`), the judge's `eValue`/`logEValue` and `threshold`
    /// (1/alpha), the error ratio's maximum-likelihood `estimatedRatio` and `ratioInterval`
    /// (an anytime-valid confidence sequence at level 1 - alpha, see
    /// [`RatioTest::confidence_sequence`]; null for infinity), `errors` and `latency` (each test's
    /// own e-value; the latency state, threshold, slow counts, ratio and interval),
    /// `failedOn` (`errors`, `latency` or null) and a one-line `summary`.
    pub fn evidence(&self) -> serde_json::Value {
        let alpha = self.config.alpha;
        let log_e = self.log_e_value();
        let threshold = 1.0 / alpha;
        let (err_lo, err_hi) = self.errors.confidence_sequence(alpha);
        let err_ratio = self.errors.estimated_ratio();
        let rate = |k: u64, n: u64| {
            if n == 0 {
                f64::NAN
            } else {
                k as f64 / n as f64
            }
        };
        let (lat_state, lat_threshold) = match &self.latency {
            Latency::Off => ("off", None),
            Latency::WarmingUp(_) => ("warmingUp", None),
            Latency::On { threshold_ms, .. } => ("on", Some(*threshold_ms)),
        };
        let (lat_lo, lat_hi) = self.latency_test.confidence_sequence(alpha);
        let lat_ratio = self.latency_test.estimated_ratio();
        let latency = json!({
            "state": lat_state,
            "thresholdMs": lat_threshold.map_or(serde_json::Value::Null, num),
            "canaryRequests": self.canary.latency_requests,
            "canarySlow": self.canary.slow,
            "primaryRequests": self.primary.latency_requests,
            "primarySlow": self.primary.slow,
            "eValue": num(self.latency_test.log_e_value().exp()),
            "logEValue": num(self.latency_test.log_e_value()),
            "estimatedRatio": num(lat_ratio),
            "ratioInterval": [num(lat_lo), num(lat_hi)],
        });
        let mut summary = match self.failed {
            Some(by) => format!(
                "canary worse than allowed ({by}): e-value {} >= {}",
                short(log_e.exp()),
                short(threshold)
            ),
            None => format!(
                "no proof the canary is worse: e-value {} (rolls back at {})",
                short(log_e.exp()),
                short(threshold)
            ),
        };
        summary.push_str(&format!(
            "; errors {}/{} ({}%) vs {}/{} ({}%), ratio {} [{}, {}]",
            self.canary.errors,
            self.canary.requests,
            short(100.0 * rate(self.canary.errors, self.canary.requests)),
            self.primary.errors,
            self.primary.requests,
            short(100.0 * rate(self.primary.errors, self.primary.requests)),
            short(err_ratio),
            short(err_lo),
            short(err_hi),
        ));
        match lat_threshold {
            Some(t) => summary.push_str(&format!(
                "; slow (> {} ms) {}/{} vs {}/{}, ratio {} [{}, {}]",
                short(t),
                self.canary.slow,
                self.canary.latency_requests,
                self.primary.slow,
                self.primary.latency_requests,
                short(lat_ratio),
                short(lat_lo),
                short(lat_hi),
            )),
            None if lat_state == "warmingUp" => summary.push_str("; latency: warming up"),
            None => summary.push_str("; latency: off"),
        }
        json!({
            "canaryRequests": self.canary.requests,
            "canaryErrors": self.canary.errors,
            "primaryRequests": self.primary.requests,
            "primaryErrors": self.primary.errors,
            "eValue": num(log_e.exp()),
            "logEValue": num(log_e),
            "threshold": threshold,
            "alpha": alpha,
            "toleratedIncrease": self.config.tolerated_increase,
            "estimatedRatio": num(err_ratio),
            "ratioInterval": [num(err_lo), num(err_hi)],
            "errors": {
                "eValue": num(self.errors.log_e_value().exp()),
                "logEValue": num(self.errors.log_e_value()),
                "skippedEvents": self.errors.skipped_events(),
            },
            "latency": latency,
            "mixture": if self.errors.is_beta_mixture() { "beta" } else { "grid" },
            "designRatios": self.errors.design_ratios(),
            "windows": self.windows,
            "failedOn": self.failed,
            "summary": summary,
        })
    }
}

impl Judge for SequentialJudge {
    fn name(&self) -> &str {
        "sequential"
    }

    fn observe(&mut self, window: &Window) -> Verdict {
        self.update(window);
        Verdict {
            outcome: self.outcome(),
            evidence: self.evidence(),
        }
    }

    fn reset(&mut self) {
        self.errors.reset();
        self.latency_test.reset();
        self.latency = match (
            self.config.latency_threshold_ms,
            self.config.latency_warmup_requests,
        ) {
            (Some(threshold_ms), _) => Latency::On {
                threshold_ms,
                counted: false,
            },
            (None, 0) => Latency::Off,
            (None, _) => Latency::WarmingUp(Vec::new()),
        };
        self.canary = Totals::default();
        self.primary = Totals::default();
        self.windows = 0;
        self.failed = None;
    }
}

/// Replaces unusable settings by the defaults' values.
fn sanitize(mut config: SequentialConfig) -> SequentialConfig {
    let defaults = SequentialConfig::default();
    if !(config.alpha > 0.0 && config.alpha < 1.0) {
        config.alpha = defaults.alpha;
    }
    if !(config.tolerated_increase.is_finite() && config.tolerated_increase > 0.0) {
        config.tolerated_increase = defaults.tolerated_increase;
    }
    let r0 = config.tolerated_increase;
    config.design_ratios.retain(|r| r.is_finite() && *r > r0);
    if config.design_ratios.is_empty() {
        config.design_ratios = DEFAULT_DESIGN_RATIOS.iter().map(|r| r * r0).collect();
    }
    if let Some(t) = config.latency_threshold_ms
        && !(t.is_finite() && t > 0.0)
    {
        config.latency_threshold_ms = None;
    }
    config
}
