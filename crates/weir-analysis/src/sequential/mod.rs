//! The sequential judge: anytime-valid tests of "the canary is worse than the primary".

mod health;
#[cfg(test)]
mod tests;

pub use health::{Baseline, Health};

use serde::{Deserialize, Serialize};
use serde_json::json;
use weir_core::model::VerdictOutcome;

use std::collections::VecDeque;

use crate::judge::{Judge, Verdict, Window, num, p99, short};
use crate::rate::RateTest;
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
    /// Evidence of health: the tolerated excess of the canary's error (and slow-request) rate
    /// over the primary's, as a fraction (0.02: two percentage points). Once the judge shows,
    /// at confidence 1 - alpha, that the canary is within it, [`Judge::observe`] answers `Pass`.
    /// `None`: the judge never passes (it only decides "worse").
    pub health_margin: Option<f64>,
    /// What the primary served before the run (its prior); see [`Baseline`].
    pub baseline: Option<Baseline>,
}

impl Default for SequentialConfig {
    fn default() -> Self {
        SequentialConfig {
            alpha: 0.01,
            tolerated_increase: 1.0,
            design_ratios: DEFAULT_DESIGN_RATIOS.to_vec(),
            latency_threshold_ms: None,
            latency_warmup_requests: 0,
            health_margin: Some(DEFAULT_HEALTH_MARGIN),
            baseline: None,
        }
    }
}

/// The default tolerated excess for evidence of health: two percentage points.
pub const DEFAULT_HEALTH_MARGIN: f64 = 0.02;

/// The share of the judge's e-value given to the baseline test when there is a baseline: the
/// comparison with the primary during the run keeps the rest (it must reach 1/(0.75 alpha),
/// 0.29 nats above 1/alpha; the baseline test alone 1/(0.25 alpha)).
const BASELINE_SHARE: f64 = 0.25;

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
    /// The health margin must be in (0, 1).
    #[error("the health margin must be a fraction between 0 and 1 (exclusive), got {0}")]
    HealthMargin(f64),
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
        if let Some(margin) = self.health_margin
            && !(margin > 0.0 && margin < 1.0)
        {
            return Err(ConfigError::HealthMargin(margin));
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
/// With a [`Baseline`] (the primary's counts before the run), one-sample tests of the canary
/// against the primary's pre-run rates join: E = 0.75 E_run + 0.25 E_baseline (still a test
/// supermartingale; the baseline's reference is its upper bound at alpha/4, so the false-rollback
/// bound becomes alpha + alpha/4, assuming the primary's rates hold during the run; the same test
/// on the primary's own requests retires the baseline when they show it changed).
///
/// Health: [`Judge::observe`] answers `Pass` once [`SequentialJudge::health`] shows the canary
/// within the health margin (see the `health` module), `Inconclusive` before, `Fail` once the
/// e-value reaches 1/alpha (final until [`Judge::reset`]). The machine promotes only on `Pass`
/// when the rollout's evidence rule asks for it.
#[derive(Debug, Clone)]
pub struct SequentialJudge {
    config: SequentialConfig,
    errors: RatioTest,
    latency_test: RatioTest,
    latency: Latency,
    canary: Totals,
    primary: Totals,
    windows: u64,
    /// Canary requests of the most recent windows (the observed canary traffic).
    recent_canary: VecDeque<u64>,
    /// [`SequentialJudge::health`] for the windows seen so far (a few bisections: computed at
    /// most once per window however often it is asked).
    health: std::cell::OnceCell<Health>,
    /// The one-sample tests against the primary's pre-run rates, when there is a baseline.
    baseline: Option<BaselineTests>,
    failed: Option<&'static str>,
}

/// How many recent windows the canary's request rate is measured over.
const RECENT_WINDOWS: usize = 60;

/// The tests that compare the canary with the primary's rates before the run (see
/// [`Baseline`]): the canary's errors (and slow requests) against the baseline's upper bound
/// times r0, and the same tests on the primary's own requests during the run, which retire the
/// baseline once they show the primary has changed since.
#[derive(Debug, Clone)]
struct BaselineTests {
    canary_errors: RateTest,
    canary_slow: Option<RateTest>,
    primary_errors: RateTest,
    primary_slow: Option<RateTest>,
    /// Set once the primary's own requests show it worse than its baseline: from then on the
    /// canary's baseline tests are frozen at their values.
    stale: bool,
}

impl BaselineTests {
    fn new(config: &SequentialConfig) -> Option<BaselineTests> {
        let baseline = config.baseline.filter(|b| b.requests > 0)?;
        // The reference is the baseline's one-sided upper bound at alpha/4 (Clopper-Pearson:
        // the baseline is one sample of fixed size), so a baseline that happened to look
        // better than the primary is adds at most alpha/4 to the false-rollback bound.
        let level = config.alpha / 4.0;
        let upper = |events: u64| crate::clopper_pearson(events, baseline.requests, 2.0 * level).1;
        let errors_ref = upper(baseline.errors);
        let slow_ref = baseline
            .slow
            .filter(|_| config.latency_threshold_ms.is_some())
            .map(upper);
        let r0 = config.tolerated_increase;
        let designs: Vec<f64> = config.design_ratios.iter().map(|r| r / r0).collect();
        let scaled = |q: f64| (q * r0).min(0.5);
        Some(BaselineTests {
            canary_errors: RateTest::new(scaled(errors_ref), &designs),
            canary_slow: slow_ref.map(|q| RateTest::new(scaled(q), &designs)),
            primary_errors: RateTest::new(errors_ref, &DEFAULT_DESIGN_RATIOS),
            primary_slow: slow_ref.map(|q| RateTest::new(q, &DEFAULT_DESIGN_RATIOS)),
            stale: false,
        })
    }

    /// ln of the baseline e-value: the errors test, or the average with the slow-request test.
    fn log_e_value(&self) -> f64 {
        match &self.canary_slow {
            None => self.canary_errors.log_e_value(),
            Some(slow) => {
                log_sum_exp([self.canary_errors.log_e_value(), slow.log_e_value()])
                    - std::f64::consts::LN_2
            }
        }
    }
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
            recent_canary: VecDeque::with_capacity(RECENT_WINDOWS),
            health: std::cell::OnceCell::new(),
            baseline: BaselineTests::new(&config),
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
        let during_run = self.log_e_value_during_run();
        match &self.baseline {
            None => during_run,
            Some(baseline) => log_sum_exp([
                during_run + (1.0 - BASELINE_SHARE).ln(),
                baseline.log_e_value() + BASELINE_SHARE.ln(),
            ]),
        }
    }

    /// ln of the e-value of the comparisons with the primary during the run (errors, and
    /// slow requests when latency is judged).
    fn log_e_value_during_run(&self) -> f64 {
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
        self.health = std::cell::OnceCell::new();
        let w = window.canary_weight;
        self.canary.requests += window.canary.requests;
        self.canary.errors += window.canary.errors;
        self.primary.requests += window.primary.requests;
        self.primary.errors += window.primary.errors;
        self.errors
            .observe(w, window.canary.errors, window.primary.errors);
        if self.recent_canary.len() == RECENT_WINDOWS {
            self.recent_canary.pop_front();
        }
        self.recent_canary.push_back(window.canary.requests);
        if let Some(baseline) = &mut self.baseline
            && !baseline.stale
        {
            baseline
                .canary_errors
                .observe(window.canary.requests, window.canary.errors);
            baseline
                .primary_errors
                .observe(window.primary.requests, window.primary.errors);
            // Slow counts from the caller (a fixed threshold), the same as the baseline's.
            if let Some(slow) = &mut baseline.canary_slow {
                slow.observe(window.canary.requests, window.canary.slow);
            }
            if let Some(slow) = &mut baseline.primary_slow {
                slow.observe(window.primary.requests, window.primary.slow);
            }
            let changed = |test: &RateTest| test.log_e_value() >= (1.0 / self.config.alpha).ln();
            if changed(&baseline.primary_errors)
                || baseline.primary_slow.as_ref().is_some_and(changed)
            {
                baseline.stale = true;
            }
        }
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
            let by_baseline = self
                .baseline
                .as_ref()
                .map_or(f64::NEG_INFINITY, |baseline| {
                    baseline.log_e_value() + BASELINE_SHARE.ln()
                });
            let during_run = self.log_e_value_during_run() + (1.0 - BASELINE_SHARE).ln();
            self.failed = Some(if self.baseline.is_some() && by_baseline > during_run {
                "baseline"
            } else if by_errors >= by_latency {
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
    /// `baseline` (the baseline test's reference rates, e-value and whether it was retired; null
    /// without a baseline), `failedOn` (`errors`, `latency`, `baseline` or null) and a one-line
    /// `summary`.
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
            "baseline": self.baseline.as_ref().map(|baseline| json!({
                "errorsReference": num(baseline.canary_errors.reference()),
                "slowReference": baseline.canary_slow.as_ref().map(|t| num(t.reference())),
                "logEValue": num(baseline.log_e_value()),
                "retired": baseline.stale,
            })),
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
        let health = self.health();
        let outcome = match self.outcome() {
            VerdictOutcome::Inconclusive if health.shown => VerdictOutcome::Pass,
            outcome => outcome,
        };
        let mut evidence = self.evidence();
        if let Some(object) = evidence.as_object_mut() {
            object.insert("health".into(), health.to_json());
        }
        Verdict { outcome, evidence }
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
        self.recent_canary.clear();
        self.health = std::cell::OnceCell::new();
        self.baseline = BaselineTests::new(&self.config);
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
    if let Some(margin) = config.health_margin
        && !(margin > 0.0 && margin < 1.0)
    {
        config.health_margin = defaults.health_margin;
    }
    config
}
