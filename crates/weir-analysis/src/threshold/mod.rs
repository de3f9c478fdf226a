//! Flagger-compatible threshold checks of the canary alone.

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use serde_json::json;
use weir_core::model::{
    CheckOutcome, CheckResult, NoDataPolicy, REQUEST_DURATION, REQUEST_SUCCESS_RATE, VerdictOutcome,
};

use crate::judge::{Judge, Verdict, Window, p99, short};

/// Limits for the canary, checked per interval (a [`Window`] is one interval here).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ThresholdConfig {
    /// Minimum success rate of the canary, in percent (e.g. 99.0); `None`: not checked.
    pub min_success_rate: Option<f64>,
    /// Maximum p99 latency of the canary in ms; `None`: not checked. Compared with the p99 of
    /// [`Window::canary_latencies_ms`] when the window has raw latencies; otherwise the caller
    /// must have counted in `canary.slow` the requests slower than this limit, and the p99 is
    /// above the limit exactly when more than 1% of the requests are slow.
    pub max_latency_ms: Option<f64>,
    /// What an interval in which the canary served no request means. [`ThresholdJudge::check`]
    /// reports such checks as [`CheckOutcome::NoData`] and leaves the policy to the caller (the
    /// core's machine applies the spec's policy); as a [`Judge`], the threshold judge applies it.
    pub no_data: NoDataPolicy,
}

/// Flagger's per-interval checks: the canary's success rate and p99 latency against absolute
/// limits, no baseline. Flagger counts failed checks over the run and rolls back after
/// `threshold` of them; that counting belongs to the caller (the core's machine), so as a
/// [`Judge`] this fails on the first failed interval.
#[derive(Debug, Clone)]
pub struct ThresholdJudge {
    config: ThresholdConfig,
}

impl ThresholdJudge {
    /// A judge with these limits.
    pub fn new(config: ThresholdConfig) -> Self {
        ThresholdJudge { config }
    }

    /// The limits.
    pub fn config(&self) -> &ThresholdConfig {
        &self.config
    }

    /// The checks of one interval, named like Flagger's builtin metrics
    /// (`request-success-rate`, `request-duration`). A check is [`CheckOutcome::NoData`] when
    /// the canary served no requests in the interval (the policy is not applied here).
    pub fn check(&self, window: &Window) -> Vec<CheckResult> {
        let mut checks = Vec::new();
        let canary = window.canary;
        if let Some(min) = self.config.min_success_rate {
            checks.push(if canary.requests == 0 {
                no_data(REQUEST_SUCCESS_RATE)
            } else {
                let errors = canary.errors.min(canary.requests);
                let rate = 100.0 * (canary.requests - errors) as f64 / canary.requests as f64;
                CheckResult {
                    name: REQUEST_SUCCESS_RATE.to_owned(),
                    outcome: if rate >= min {
                        CheckOutcome::Pass
                    } else {
                        CheckOutcome::Fail
                    },
                    value: Some(rate),
                    message: format!(
                        "success rate {}% ({} errors in {} requests), minimum {}%",
                        short(rate),
                        errors,
                        canary.requests,
                        short(min)
                    ),
                }
            });
        }
        if let Some(max) = self.config.max_latency_ms {
            let mut latencies: Vec<f64> = window
                .canary_latencies_ms
                .iter()
                .copied()
                .filter(|x| !x.is_nan())
                .collect();
            checks.push(match p99(&mut latencies) {
                Some(p99) => CheckResult {
                    name: REQUEST_DURATION.to_owned(),
                    outcome: if p99 <= max {
                        CheckOutcome::Pass
                    } else {
                        CheckOutcome::Fail
                    },
                    value: Some(p99),
                    message: format!("p99 {} ms, maximum {} ms", short(p99), short(max)),
                },
                None if canary.requests == 0 => no_data(REQUEST_DURATION),
                None => {
                    let slow = canary.slow.min(canary.requests);
                    let share = 100.0 * slow as f64 / canary.requests as f64;
                    CheckResult {
                        name: REQUEST_DURATION.to_owned(),
                        outcome: if slow * 100 <= canary.requests {
                            CheckOutcome::Pass
                        } else {
                            CheckOutcome::Fail
                        },
                        value: None,
                        message: format!(
                            "{}% of {} requests slower than {} ms (the p99 is above the limit when over 1%)",
                            short(share),
                            canary.requests,
                            short(max)
                        ),
                    }
                }
            });
        }
        checks
    }
}

fn no_data(name: &str) -> CheckResult {
    CheckResult {
        name: name.to_owned(),
        outcome: CheckOutcome::NoData,
        value: None,
        message: "the canary served no requests".to_owned(),
    }
}

impl Judge for ThresholdJudge {
    fn name(&self) -> &str {
        "threshold"
    }

    /// Fail when a check fails, or has no data under the `fail` policy; Inconclusive when a
    /// check has no data under the `hold` policy; Pass otherwise (also without checks).
    fn observe(&mut self, window: &Window) -> Verdict {
        let checks = self.check(window);
        let mut outcome = VerdictOutcome::Pass;
        for check in &checks {
            let this = match (check.outcome, self.config.no_data) {
                (CheckOutcome::Fail, _) | (CheckOutcome::NoData, NoDataPolicy::Fail) => {
                    VerdictOutcome::Fail
                }
                (CheckOutcome::NoData, NoDataPolicy::Hold) => VerdictOutcome::Inconclusive,
                (CheckOutcome::Pass, _) | (CheckOutcome::NoData, NoDataPolicy::Ignore) => {
                    VerdictOutcome::Pass
                }
            };
            outcome = match (outcome, this) {
                (VerdictOutcome::Fail, _) | (_, VerdictOutcome::Fail) => VerdictOutcome::Fail,
                (VerdictOutcome::Inconclusive, _) | (_, VerdictOutcome::Inconclusive) => {
                    VerdictOutcome::Inconclusive
                }
                _ => VerdictOutcome::Pass,
            };
        }
        let summary = if checks.is_empty() {
            "no checks configured".to_owned()
        } else {
            checks
                .iter()
                .map(|c| format!("{}: {}", c.name, c.message))
                .collect::<Vec<_>>()
                .join("; ")
        };
        Verdict {
            outcome,
            evidence: json!({
                "canaryRequests": window.canary.requests,
                "canaryErrors": window.canary.errors,
                "checks": checks,
                "summary": summary,
            }),
        }
    }

    fn reset(&mut self) {}
}
