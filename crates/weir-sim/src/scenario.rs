//! The benchmark's scenarios (S0-S8 of the reference) and the models of the two versions.
//!
//! A version has an error probability and a latency distribution; a scenario says which model
//! the canary follows when (healthy, faulty from an onset, or faulty in bursts), the request
//! rate, and the latency threshold above which a request counts as slow (fixed for the whole
//! run: the primary's p99).

use serde::Serialize;

/// The standard normal's 99% quantile: the primary's p99 sits this many log-sigmas above its
/// median.
const Z_99: f64 = 2.326_347_874_040_841;

/// The standard normal's distribution function, Phi(x) = erfc(-x / sqrt 2) / 2.
pub(crate) fn normal_cdf(x: f64) -> f64 {
    let z = -x / std::f64::consts::SQRT_2;
    0.5 * erfc(z)
}

/// The complementary error function, from Abramowitz & Stegun 7.1.26 (absolute error below
/// 1.5e-7), extended to negative arguments by erfc(-x) = 2 - erfc(x).
fn erfc(x: f64) -> f64 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let tail = poly * (-a * a).exp();
    if x >= 0.0 { tail } else { 2.0 - tail }
}

/// A version's latency: log-normal around a median, optionally with a share of requests slowed
/// by a factor (a tail-only regression).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencyModel {
    /// The median of the log-normal part, in milliseconds.
    pub median_ms: f64,
    /// The standard deviation of the latency's logarithm.
    pub sigma: f64,
    /// The share of requests that take `tail_factor` times longer.
    pub tail_share: f64,
    /// How much longer the tail requests take.
    pub tail_factor: f64,
}

impl LatencyModel {
    /// The healthy latency of every scenario: median 50 ms, log-sigma 0.5 (p99 about 160 ms).
    pub const BASE: LatencyModel = LatencyModel {
        median_ms: 50.0,
        sigma: 0.5,
        tail_share: 0.0,
        tail_factor: 1.0,
    };

    /// The same distribution with its median multiplied by `factor`.
    pub fn scaled(self, factor: f64) -> LatencyModel {
        LatencyModel {
            median_ms: self.median_ms * factor,
            ..self
        }
    }

    /// P(latency <= ms).
    pub fn cdf(&self, ms: f64) -> f64 {
        if ms <= 0.0 {
            return 0.0;
        }
        let body = normal_cdf((ms / self.median_ms).ln() / self.sigma);
        let tail = normal_cdf((ms / (self.median_ms * self.tail_factor)).ln() / self.sigma);
        (1.0 - self.tail_share) * body + self.tail_share * tail
    }

    /// The latency whose distribution function is `u` (inverse CDF, by bisection on the
    /// logarithm; only used when a judge asks for raw latencies).
    pub fn quantile(&self, u: f64) -> f64 {
        let mut low = (self.median_ms).ln() - 12.0 * self.sigma;
        let mut high = (self.median_ms * self.tail_factor.max(1.0)).ln() + 12.0 * self.sigma;
        for _ in 0..60 {
            let mid = 0.5 * (low + high);
            if self.cdf(mid.exp()) < u {
                low = mid;
            } else {
                high = mid;
            }
        }
        (0.5 * (low + high)).exp()
    }

    /// The p99 of the plain log-normal (no tail share): the slow threshold of the scenarios.
    pub fn p99_ms(&self) -> f64 {
        self.median_ms * (Z_99 * self.sigma).exp()
    }
}

/// How one version behaves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct VersionModel {
    /// The probability that a request fails.
    pub error_rate: f64,
    /// The latency distribution.
    pub latency: LatencyModel,
}

impl VersionModel {
    /// A version with the base latency and this error probability.
    pub fn errors(error_rate: f64) -> VersionModel {
        VersionModel {
            error_rate,
            latency: LatencyModel::BASE,
        }
    }
}

/// When the canary misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Fault {
    /// Never: any rollback is a false one.
    None,
    /// From `onset_s` seconds after the canary first takes traffic, for good.
    From {
        /// Seconds after the canary's first traffic.
        onset_s: u32,
    },
    /// For `duration_s` seconds every `period_s` seconds, the first burst at `first_s`.
    Bursts {
        /// Start of the first burst, in seconds after the canary's first traffic.
        first_s: u32,
        /// Time between burst starts.
        period_s: u32,
        /// Length of a burst.
        duration_s: u32,
    },
}

/// What a fault harms, and so what counts as a failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Harm {
    /// Failed requests are errors.
    Errors,
    /// Failed requests are slow ones (above the scenario's latency threshold).
    Latency,
}

/// One benchmark scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Scenario {
    /// Its name (`S0`, `S1`, `S1-r2`, ...).
    pub name: String,
    /// What it is, in words.
    pub summary: String,
    /// Requests per second (both versions together), Poisson arrivals.
    pub rate: f64,
    /// The primary, for the whole run.
    pub primary: VersionModel,
    /// The canary when it behaves (before the onset, between bursts, or always).
    pub canary: VersionModel,
    /// The canary when the fault is active.
    pub canary_faulty: VersionModel,
    /// When the fault is active.
    pub fault: Fault,
    /// What the fault harms.
    pub harm: Harm,
    /// Requests slower than this count as slow (the primary's p99), fixed for the run.
    pub latency_threshold_ms: f64,
    /// The relative increase weir tolerates (r0) in this scenario, when not weir's default.
    pub tolerated_increase: Option<f64>,
    /// The analysis interval of both controllers (60 s except where a scenario needs a longer
    /// run).
    pub interval_s: u32,
}

/// Per-second conditions derived from a scenario: what each version does during one second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conditions {
    /// The primary's error probability.
    pub primary_error: f64,
    /// The canary's error probability.
    pub canary_error: f64,
    /// The primary's probability of a slow request.
    pub primary_slow: f64,
    /// The canary's probability of a slow request.
    pub canary_slow: f64,
    /// Whether the canary's fault is active.
    pub faulty: bool,
}

/// The r grid's base error rate (S1-r*): 0.1%, so that r = 10 differs from S1's 0.5% -> 5%.
const GRID_BASE: f64 = 0.001;
/// The healthy error rate of most scenarios: 0.5%.
const BASE_ERRORS: f64 = 0.005;

impl Scenario {
    fn new(name: &str, summary: &str, primary: f64, canary: f64, fault: Fault) -> Scenario {
        Scenario {
            name: name.into(),
            summary: summary.into(),
            rate: 100.0,
            primary: VersionModel::errors(primary),
            canary: VersionModel::errors(primary),
            canary_faulty: VersionModel::errors(canary),
            fault,
            harm: Harm::Errors,
            latency_threshold_ms: LatencyModel::BASE.p99_ms(),
            tolerated_increase: None,
            interval_s: 60,
        }
    }

    fn healthy(name: &str, summary: &str, primary: f64, canary: f64) -> Scenario {
        let mut scenario = Scenario::new(name, summary, primary, canary, Fault::None);
        scenario.canary = VersionModel::errors(canary);
        scenario
    }

    fn latency(name: &str, summary: &str, latency: LatencyModel) -> Scenario {
        let mut scenario = Scenario::new(
            name,
            summary,
            BASE_ERRORS,
            BASE_ERRORS,
            Fault::From { onset_s: 0 },
        );
        scenario.canary_faulty.latency = latency;
        scenario.harm = Harm::Latency;
        scenario
    }

    fn at_rate(mut self, rate: f64) -> Scenario {
        self.rate = rate;
        self
    }

    /// Every built-in scenario, in the order of the reference.
    pub fn all() -> Vec<Scenario> {
        let onset = Fault::From { onset_s: 0 };
        let mut list = vec![Scenario::healthy(
            "S0",
            "healthy: both 0.5% errors",
            BASE_ERRORS,
            BASE_ERRORS,
        )];
        list.push(Scenario::new(
            "S1",
            "regression 0.5% -> 5% errors",
            BASE_ERRORS,
            0.05,
            onset,
        ));
        for (label, r) in [("1.5", 1.5), ("2", 2.0), ("5", 5.0), ("10", 10.0)] {
            list.push(Scenario::new(
                &format!("S1-r{label}"),
                &format!(
                    "regression x{label}: 0.1% -> {}% errors",
                    trim(GRID_BASE * r * 100.0)
                ),
                GRID_BASE,
                GRID_BASE * r,
                onset,
            ));
        }
        list.push(Scenario::new(
            "S2",
            "crash: every canary request fails",
            BASE_ERRORS,
            1.0,
            onset,
        ));
        list.push(Scenario::latency(
            "S3-median10",
            "latency: canary median +10%",
            LatencyModel::BASE.scaled(1.1),
        ));
        list.push(Scenario::latency(
            "S3-median50",
            "latency: canary median +50%",
            LatencyModel::BASE.scaled(1.5),
        ));
        list.push(Scenario::latency(
            "S3-tail",
            "latency: 2% of canary requests take twice as long",
            LatencyModel {
                tail_share: 0.02,
                tail_factor: 2.0,
                ..LatencyModel::BASE
            },
        ));
        list.push(Scenario::new(
            "S4",
            "intermittent: 20% errors for 30 s every 5 min (from 60 s)",
            BASE_ERRORS,
            0.2,
            Fault::Bursts {
                first_s: 60,
                period_s: 300,
                duration_s: 30,
            },
        ));
        for (label, rate) in [("1", 1.0), ("0.1", 0.1)] {
            list.push(
                Scenario::new(
                    &format!("S5-{label}"),
                    &format!("low traffic, {label} req/s: 0.5% -> 5% errors"),
                    BASE_ERRORS,
                    0.05,
                    onset,
                )
                .at_rate(rate),
            );
            list.push(
                Scenario::healthy(
                    &format!("S5-{label}-healthy"),
                    &format!("low traffic, {label} req/s: healthy, both 0.5%"),
                    BASE_ERRORS,
                    BASE_ERRORS,
                )
                .at_rate(rate),
            );
        }
        list.push(Scenario::healthy(
            "S6",
            "primary incident: both versions at 2% errors",
            0.02,
            0.02,
        ));
        let mut delayed = Scenario::new(
            "S7",
            "delayed onset: 0.5% -> 5% errors 10 min in (interval 3m so the run lasts)",
            BASE_ERRORS,
            0.05,
            Fault::From { onset_s: 600 },
        );
        delayed.interval_s = 180;
        list.push(delayed);
        let mut below = Scenario::healthy(
            "S8",
            "below tolerance: 0.5% -> 0.55% (r = 1.1) with r0 = 1.2: promotion is correct",
            BASE_ERRORS,
            BASE_ERRORS * 1.1,
        );
        below.tolerated_increase = Some(1.2);
        list.push(below);
        list
    }

    /// The built-in scenario of this name (case-insensitive), or every scenario of a family
    /// (`S1` is the headline alone; `S1*` is S1 and its r grid; `S3`, `S5` are families).
    pub fn select(name: &str) -> Vec<Scenario> {
        let all = Scenario::all();
        let wanted = name.trim().to_ascii_uppercase();
        let exact: Vec<Scenario> = all
            .iter()
            .filter(|scenario| scenario.name.to_ascii_uppercase() == wanted)
            .cloned()
            .collect();
        if !exact.is_empty() {
            return exact;
        }
        let prefix = wanted.trim_end_matches('*').to_string() + "-";
        let family = wanted.trim_end_matches('*').to_string();
        all.into_iter()
            .filter(|scenario| {
                let upper = scenario.name.to_ascii_uppercase();
                upper == family || upper.starts_with(&prefix)
            })
            .collect()
    }

    /// A scenario from the command line: `rate` req/s, the primary and the canary at these
    /// error probabilities (fractions), the canary's fault from `onset_s` (0: from its first
    /// request). A canary no worse than the primary makes a healthy scenario.
    pub fn custom(rate: f64, primary_error: f64, canary_error: f64, onset_s: u32) -> Scenario {
        let summary = format!(
            "custom: {} req/s, primary {}% errors, canary {}%{}",
            trim(rate),
            trim(primary_error * 100.0),
            trim(canary_error * 100.0),
            if onset_s > 0 {
                format!(" from {onset_s} s")
            } else {
                String::new()
            }
        );
        if canary_error <= primary_error {
            Scenario::healthy("custom", &summary, primary_error, canary_error).at_rate(rate)
        } else {
            Scenario::new(
                "custom",
                &summary,
                primary_error,
                canary_error,
                Fault::From { onset_s },
            )
            .at_rate(rate)
        }
    }

    /// Whether the canary is faulty at some point (so a rollback is right and a promotion is a
    /// missed detection); otherwise any rollback is a false one.
    pub fn is_faulty(&self) -> bool {
        !matches!(self.fault, Fault::None)
    }

    /// When the fault starts, in seconds after the canary's first traffic.
    pub fn onset_s(&self) -> Option<u32> {
        match self.fault {
            Fault::None => None,
            Fault::From { onset_s } => Some(onset_s),
            Fault::Bursts { first_s, .. } => Some(first_s),
        }
    }

    /// Whether the fault is active during second `second` (counted from the first traffic).
    pub fn fault_active(&self, second: u32) -> bool {
        match self.fault {
            Fault::None => false,
            Fault::From { onset_s } => second >= onset_s,
            Fault::Bursts {
                first_s,
                period_s,
                duration_s,
            } => second >= first_s && (second - first_s) % period_s.max(1) < duration_s,
        }
    }

    /// The canary's model during second `second`.
    pub fn canary_model(&self, second: u32) -> &VersionModel {
        if self.fault_active(second) {
            &self.canary_faulty
        } else {
            &self.canary
        }
    }

    /// What both versions do during second `second`.
    pub fn conditions(&self, second: u32) -> Conditions {
        let faulty = self.fault_active(second);
        let canary = self.canary_model(second);
        Conditions {
            primary_error: self.primary.error_rate,
            canary_error: canary.error_rate,
            primary_slow: 1.0 - self.primary.latency.cdf(self.latency_threshold_ms),
            canary_slow: 1.0 - canary.latency.cdf(self.latency_threshold_ms),
            faulty,
        }
    }

    /// The canary's and the primary's probability of a failed request (error or slow,
    /// following [`Scenario::harm`]) while the fault is active.
    pub fn harm_probabilities(&self) -> (f64, f64) {
        let primary = self.primary;
        let canary = self.canary_faulty;
        match self.harm {
            Harm::Errors => (canary.error_rate, primary.error_rate),
            Harm::Latency => (
                1.0 - canary.latency.cdf(self.latency_threshold_ms),
                1.0 - primary.latency.cdf(self.latency_threshold_ms),
            ),
        }
    }
}

/// A number without trailing zeros (`0.5`, `5`, `0.15`).
fn trim(value: f64) -> String {
    let text = format!("{value:.4}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests;
