//! The judge interface and its inputs.

use serde::{Deserialize, Serialize};
use weir_core::model::{JudgeVerdict, VerdictOutcome};

/// Traffic of one version during one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct VersionCounts {
    /// Requests finished during the window.
    pub requests: u64,
    /// Requests that failed (5xx, connection failure, timeout: whatever the caller defines as an
    /// error, the same way for both versions).
    pub errors: u64,
    /// Requests slower than the latency threshold (the same threshold for both versions).
    pub slow: u64,
}

/// What happened during one observation window (e.g. one second of router counters).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Share of traffic routed to the canary during the window, 0.0..=1.0 (the weight in force).
    pub canary_weight: f64,
    /// The canary's counts.
    pub canary: VersionCounts,
    /// The primary's counts.
    pub primary: VersionCounts,
    /// Optional raw latencies (ms) for tests that need them (Mann-Whitney, the latency warm-up,
    /// the threshold judge's p99); may be empty.
    pub canary_latencies_ms: Vec<f64>,
    /// Optional raw latencies (ms) of the primary; may be empty.
    pub primary_latencies_ms: Vec<f64>,
}

/// A judge's conclusion with evidence (goes into [`JudgeVerdict::evidence`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// Pass, fail or inconclusive.
    pub outcome: VerdictOutcome,
    /// The evidence, as JSON (counts, e-values, intervals, a `summary` string).
    pub evidence: serde_json::Value,
}

impl Verdict {
    /// The core's form of this verdict, under the judge's name.
    pub fn into_judge_verdict(self, judge: &str) -> JudgeVerdict {
        JudgeVerdict {
            judge: judge.to_owned(),
            outcome: self.outcome,
            evidence: self.evidence,
        }
    }

    /// The evidence's `summary` string, when it has one.
    pub fn summary(&self) -> Option<&str> {
        self.evidence
            .get("summary")
            .and_then(serde_json::Value::as_str)
    }
}

/// Judges consume windows in time order and may conclude at any window.
pub trait Judge: Send {
    /// The judge's name (`sequential`, `threshold`, ...).
    fn name(&self) -> &str;
    /// Takes one more window into account and says what the evidence so far shows.
    fn observe(&mut self, window: &Window) -> Verdict;
    /// Forget everything (a new run starts).
    fn reset(&mut self);
}

/// Replaces non-finite numbers by JSON null.
pub(crate) fn num(x: f64) -> serde_json::Value {
    if x.is_finite() {
        serde_json::Value::from(x)
    } else {
        serde_json::Value::Null
    }
}

/// Formats a number for summaries: few significant digits, `inf` spelled out.
pub(crate) fn short(x: f64) -> String {
    if !x.is_finite() {
        return if x > 0.0 { "inf".into() } else { "n/a".into() };
    }
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e6 {
        format!("{x:.2e}")
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 0.01 {
        format!("{x:.2}")
    } else {
        format!("{x:.2e}")
    }
}

/// The 99th percentile by nearest rank (sorts in place); `None` for no data.
pub(crate) fn p99(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = (0.99 * values.len() as f64).ceil() as usize;
    Some(values[rank.clamp(1, values.len()) - 1])
}
