//! Evidence of health: whether the judge can show that the canary fails no more often than the
//! primary plus a margin, and, until it can, how much more canary traffic that should take.
//!
//! The statement is about the excess of the canary's event rate over the primary's,
//! p_canary - p_primary <= margin, for errors and (when latency is judged) slow requests. Its
//! upper bound is the canary's anytime-valid upper bound minus the primary's anytime-valid lower
//! bound ([`crate::rate`]), each at alpha / (number of bounds): with probability >= 1 - alpha
//! every bound holds at every moment at once, so "shown" is wrong with probability <= alpha
//! however often it is asked. The primary's side pools its pre-run [`Baseline`] with its requests
//! during the run (the baseline assumes the primary's rates did not change since; the judge's
//! baseline test retires it when the primary's own requests show otherwise, and then only the
//! requests during the run count here too).

use serde::{Deserialize, Serialize};
use serde_json::json;
use weir_core::machine::EvidenceReport;

use super::{Latency, SequentialJudge};
use crate::judge::num;
use crate::rate::{rate_lower_bound, rate_upper_bound};

/// What the primary served before the run, from the router's counters or a metric source's
/// history: its prior. The judge uses it twice: a one-sample test of the canary against the
/// primary's pre-run rates joins the harm test (at low traffic, a canary is compared with a
/// well-known primary rather than with the primary's few requests during the run), and the
/// primary's side of the health bound counts these requests too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Baseline {
    /// Requests the primary finished before the run.
    pub requests: u64,
    /// Of which failed.
    pub errors: u64,
    /// Of which were slower than the judge's latency threshold, when counted against it.
    pub slow: Option<u64>,
}

/// The judge's evidence of health so far.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// Whether the canary is shown no worse than the primary by more than the margin.
    pub shown: bool,
    /// The tolerated excess (a fraction); `None` when the judge has no health margin.
    pub margin: Option<f64>,
    /// Upper bound of p_canary - p_primary for errors (a fraction; may be negative).
    pub excess_upper: f64,
    /// The same for slow requests, when latency is judged.
    pub slow_excess_upper: Option<f64>,
    /// Canary requests so far.
    pub canary_requests: u64,
    /// Canary requests the bound should need in all at the rates observed so far; `None` when
    /// it cannot get within the margin at those rates (the canary may be worse than allowed).
    pub needed_canary_requests: Option<u64>,
    /// Canary requests per window over the recent windows (per second when windows are).
    pub canary_rate_per_window: Option<f64>,
    /// In words.
    pub summary: String,
}

impl Health {
    /// The evidence's JSON form (`health` in the judge's evidence).
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "shown": self.shown,
            "margin": self.margin.map(num),
            "excessUpper": num(self.excess_upper),
            "slowExcessUpper": self.slow_excess_upper.map(num),
            "canaryRequests": self.canary_requests,
            "neededCanaryRequests": self.needed_canary_requests,
            "canaryRatePerWindow": self.canary_rate_per_window.map(num),
            "summary": self.summary,
        })
    }
}

/// One rate comparison (errors or slow requests): counts of both versions.
struct Rates {
    what: &'static str,
    canary: (f64, f64),
    primary: (f64, f64),
}

impl Rates {
    /// Upper bound of the excess at `level` per bound.
    fn excess_upper(&self, level: f64) -> f64 {
        rate_upper_bound(self.canary.0, self.canary.1, level)
            - rate_lower_bound(self.primary.0, self.primary.1, level)
    }

    /// Canary requests the bound should need in all if the canary keeps failing at the larger
    /// of its own and the primary's observed rate; `None` when no number of requests does.
    fn needed(&self, margin: f64, level: f64) -> Option<u64> {
        let rate = |(k, n): (f64, f64)| if n > 0.0 { k / n } else { 0.0 };
        let expected = rate(self.canary).max(rate(self.primary));
        let primary_lower = rate_lower_bound(self.primary.0, self.primary.1, level);
        let within = |n: f64| rate_upper_bound(expected * n, n, level) - primary_lower <= margin;
        let (mut lo, mut hi) = (self.canary.1.max(1.0), self.canary.1.max(1.0));
        while !within(hi) {
            lo = hi;
            hi *= 2.0;
            if hi > 1e9 {
                return None;
            }
        }
        if hi == lo {
            return Some(hi.ceil() as u64);
        }
        while hi - lo > 1.0 {
            let mid = 0.5 * (lo + hi);
            if within(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi.ceil() as u64)
    }
}

impl SequentialJudge {
    /// The evidence of health so far (see the module docs).
    pub fn health(&self) -> Health {
        self.health.get_or_init(|| self.compute_health()).clone()
    }

    fn compute_health(&self) -> Health {
        let baseline = self
            .config
            .baseline
            .filter(|_| self.baseline.as_ref().is_some_and(|tests| !tests.stale));
        let (base_n, base_errors) =
            baseline.map_or((0.0, 0.0), |b| (b.requests as f64, b.errors as f64));
        let mut comparisons = vec![Rates {
            what: "errors",
            canary: (self.canary.errors as f64, self.canary.requests as f64),
            primary: (
                self.primary.errors as f64 + base_errors,
                self.primary.requests as f64 + base_n,
            ),
        }];
        if let Latency::On {
            threshold_ms: _,
            counted,
        } = self.latency
        {
            // A baseline's slow count is against the configured threshold only.
            let (base_n, base_slow) = match baseline.and_then(|b| b.slow.map(|s| (b.requests, s))) {
                Some((n, slow)) if !counted => (n as f64, slow as f64),
                _ => (0.0, 0.0),
            };
            comparisons.push(Rates {
                what: "slow requests",
                canary: (self.canary.slow as f64, self.canary.latency_requests as f64),
                primary: (
                    self.primary.slow as f64 + base_slow,
                    self.primary.latency_requests as f64 + base_n,
                ),
            });
        }
        let level = self.config.alpha / (2 * comparisons.len()) as f64;
        let excess: Vec<f64> = comparisons.iter().map(|c| c.excess_upper(level)).collect();
        let canary_rate_per_window = (!self.recent_canary.is_empty()).then(|| {
            self.recent_canary.iter().sum::<u64>() as f64 / self.recent_canary.len() as f64
        });
        let canary_requests = self.canary.requests;
        let margin = self.config.health_margin;
        let Some(margin) = margin else {
            return Health {
                shown: false,
                margin,
                excess_upper: excess[0],
                slow_excess_upper: excess.get(1).copied(),
                canary_requests,
                needed_canary_requests: None,
                canary_rate_per_window,
                summary: "no health margin: the judge only decides whether the canary is worse"
                    .into(),
            };
        };
        let shown =
            !self.has_failed() && canary_requests > 0 && excess.iter().all(|x| *x <= margin);
        let bounds: Vec<String> = comparisons
            .iter()
            .zip(&excess)
            .map(|(c, x)| format!("{} <= {}", c.what, points(*x)))
            .collect();
        let margin_text = format!("the primary's + {}", points(margin));
        let mut needed_canary_requests = Some(canary_requests);
        let summary = if shown {
            format!(
                "evidence of health after {canary_requests} canary requests: excess over the primary {} (margin {})",
                bounds.join(", "),
                points(margin)
            )
        } else {
            needed_canary_requests = comparisons
                .iter()
                .zip(&excess)
                .filter(|(_, x)| **x > margin)
                .map(|(c, _)| c.needed(margin, level))
                .try_fold(canary_requests, |most, needed| needed.map(|n| n.max(most)));
            match needed_canary_requests {
                Some(needed) => format!(
                    "waiting for evidence: {canary_requests} of ~{needed} canary requests{}; excess over the primary {} so far (allowed: {margin_text})",
                    eta(
                        needed.saturating_sub(canary_requests),
                        canary_rate_per_window
                    ),
                    bounds.join(", ")
                ),
                None => format!(
                    "waiting for evidence: at the rates seen so far the canary cannot be shown within {margin_text} (it may be worse); {canary_requests} canary requests, excess {}",
                    bounds.join(", ")
                ),
            }
        };
        Health {
            shown,
            margin: Some(margin),
            excess_upper: excess[0],
            slow_excess_upper: excess.get(1).copied(),
            canary_requests,
            needed_canary_requests,
            canary_rate_per_window,
            summary,
        }
    }

    /// The machine's form of [`SequentialJudge::health`]: healthy once shown (never after a
    /// failure).
    pub fn evidence_report(&self) -> EvidenceReport {
        let health = self.health();
        EvidenceReport {
            healthy: health.shown,
            summary: health.summary,
        }
    }
}

/// A fraction as percentage points (`2%`, `0.35%`, `-0.1%`).
fn points(fraction: f64) -> String {
    let percent = fraction * 100.0;
    let text = if percent.abs() >= 10.0 {
        format!("{percent:.0}")
    } else if percent.abs() >= 1.0 {
        format!("{percent:.1}")
    } else {
        format!("{percent:.2}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{text}%")
}

/// "; about 12m at 0.5 req/s" for `remaining` requests at `rate` per window (a second).
fn eta(remaining: u64, rate: Option<f64>) -> String {
    match rate {
        _ if remaining == 0 => String::new(),
        Some(rate) if rate > 0.0 => {
            let seconds = (remaining as f64 / rate).ceil() as u64;
            let time = match seconds {
                0..120 => format!("{seconds}s"),
                120..7200 => format!("{}m", seconds.div_ceil(60)),
                _ => format!("{:.1}h", seconds as f64 / 3600.0),
            };
            let rate = if rate >= 10.0 {
                format!("{rate:.0}")
            } else if rate >= 0.1 {
                format!("{rate:.1}")
            } else {
                format!("{rate:.2}")
            };
            format!("; about {time} at {rate} req/s")
        }
        _ => "; no canary traffic in the last minute".into(),
    }
}
