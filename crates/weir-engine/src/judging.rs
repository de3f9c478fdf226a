//! Judges that watch a run continuously, between ticks.
//!
//! About once a second the judge task reads what both versions served (through the target
//! provider's `judge_window`), feeds each run's judges, and on the first failing verdict sends it to
//! the engine, which rolls back at once (`Input::Verdict`) instead of at the next analysis tick.
//! Local rollouts that name no judge get the sequential judge: weir's default.
//!
//! The task also keeps each run's latest evidence of health ([`EvidenceReports`]), which the
//! engine's ticks hand to the machine for the evidence rule (`spec.analysis.evidence`): a run
//! that a judge watches promotes only once its judges show the canary healthy. At the start of a
//! run the sequential judge is given what the target counted for the primary before the run
//! (`TargetProvider::judge_baseline`), when it can tell.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use weir_analysis::{Baseline, Judge, SequentialConfig, SequentialJudge};
use weir_core::FieldError;
use weir_core::machine::EvidenceReport;
use weir_core::model::{Phase, REQUEST_DURATION, Rollout, TargetKind, VerdictOutcome};
use weir_store::RolloutKey;

use crate::handle::Request;
use crate::providers::Providers;

/// The judges weir knows, by the name a spec uses.
pub const KNOWN_JUDGES: [&str; 1] = ["sequential"];

/// The judges of a rollout: those it names, or the sequential judge for local targets.
pub fn judges_of(rollout: &Rollout) -> Vec<String> {
    if !rollout.spec.analysis.judges.is_empty() {
        return rollout.spec.analysis.judges.clone();
    }
    if rollout.spec.target.kind() == TargetKind::Local && !rollout.spec.skip_analysis {
        return vec!["sequential".into()];
    }
    Vec::new()
}

/// Unknown judge names, with the allowed ones.
pub fn validate(rollout: &Rollout) -> Vec<FieldError> {
    rollout
        .spec
        .analysis
        .judges
        .iter()
        .enumerate()
        .filter(|(_, name)| !KNOWN_JUDGES.contains(&name.as_str()))
        .map(|(index, name)| {
            FieldError::with_value(
                format!("spec.analysis.judges[{index}]"),
                format!("{name:?}"),
                format!("known judges: {}", KNOWN_JUDGES.join(", ")),
            )
        })
        .collect()
}

/// A judge of a run. The sequential judge is the only kind so far; kept concrete (not a
/// `Box<dyn Judge>`) because the evidence rule reads its health bound, which the `Judge` trait
/// does not offer.
fn build(name: &str, rollout: &Rollout, baseline: Option<Baseline>) -> Option<SequentialJudge> {
    match name {
        "sequential" => Some(SequentialJudge::new(SequentialConfig {
            latency_threshold_ms: latency_threshold(rollout),
            // The spec's margin is in percentage points; the judge's is a fraction.
            health_margin: Some(rollout.spec.analysis.evidence.margin_percent / 100.0),
            baseline,
            ..SequentialConfig::default()
        })),
        _ => None,
    }
}

/// What the machine is told before a run's judges have seen their first window.
pub const FIRST_WINDOW: &str = "waiting for the judges' first window";

/// The evidence of health for the evidence rule: `None` when no judge watches the rollout (the
/// rule does not apply), else the latest report of the judges of run `run`, or "waiting" before
/// their first window.
pub(crate) fn evidence_for(
    reports: &EvidenceReports,
    key: &RolloutKey,
    rollout: &Rollout,
    run: u64,
) -> Option<EvidenceReport> {
    if judges_of(rollout).is_empty() {
        return None;
    }
    Some(reports.latest(key, run).unwrap_or_else(|| EvidenceReport {
        healthy: false,
        summary: FIRST_WINDOW.into(),
    }))
}

/// The judges' combined report: healthy when every judge shows health; otherwise the first
/// judge's summary that does not (each says what it waits for).
fn combined(judges: &[(String, SequentialJudge)]) -> Option<EvidenceReport> {
    let reports: Vec<EvidenceReport> = judges
        .iter()
        .map(|(_, judge)| judge.evidence_report())
        .collect();
    if reports.is_empty() {
        return None;
    }
    match reports.iter().find(|report| !report.healthy) {
        Some(waiting) => Some(waiting.clone()),
        None => Some(EvidenceReport {
            healthy: true,
            summary: reports
                .iter()
                .map(|report| report.summary.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        }),
    }
}

/// The latency bound judged by exceedances: the `request-duration` check's maximum, when set.
fn latency_threshold(rollout: &Rollout) -> Option<f64> {
    rollout
        .spec
        .analysis
        .metrics
        .iter()
        .find(|metric| metric.name == REQUEST_DURATION)
        .and_then(|metric| metric.threshold_range)
        .and_then(|range| range.max)
}

/// The runs being watched, kept current by the engine loop.
#[derive(Clone, Default)]
pub(crate) struct Watched(Arc<Mutex<HashMap<RolloutKey, (Rollout, u64)>>>);

impl Watched {
    /// Watches the rollout while its run progresses; forgets it otherwise.
    pub(crate) fn update(&self, key: &RolloutKey, stored: Option<&weir_store::StoredRollout>) {
        let mut watched = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match stored {
            Some(stored)
                if matches!(
                    stored.status.phase,
                    Phase::Progressing | Phase::WaitingPromotion
                ) && !judges_of(&stored.rollout).is_empty() =>
            {
                watched.insert(key.clone(), (stored.rollout.clone(), stored.status.run));
            }
            _ => {
                watched.remove(key);
            }
        }
    }

    fn snapshot(&self) -> Vec<(RolloutKey, Rollout, u64)> {
        let watched = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        watched
            .iter()
            .map(|(key, (rollout, run))| (key.clone(), rollout.clone(), *run))
            .collect()
    }
}

/// The latest evidence report of each watched run's judges, written by the judge task and read
/// by the engine's ticks.
#[derive(Clone, Default)]
pub(crate) struct EvidenceReports(Arc<Mutex<HashMap<RolloutKey, (u64, EvidenceReport)>>>);

impl EvidenceReports {
    fn set(&self, key: &RolloutKey, run: u64, report: EvidenceReport) {
        let mut reports = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        reports.insert(key.clone(), (run, report));
    }

    fn remove(&self, key: &RolloutKey) {
        let mut reports = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        reports.remove(key);
    }

    /// The report of run `run`, if its judges made one (a report of another run is stale).
    fn latest(&self, key: &RolloutKey, run: u64) -> Option<EvidenceReport> {
        let reports = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        reports
            .get(key)
            .filter(|(of_run, _)| *of_run == run)
            .map(|(_, report)| report.clone())
    }
}

struct RunJudges {
    run: u64,
    judges: Vec<(String, SequentialJudge)>,
    reported: bool,
}

/// What the target counted for the primary before run `run` started, for the judges' prior.
/// None when the rollout's judges count from a backend of its own (`judgeCounts`): the target's
/// counts are not mixed with it.
async fn baseline_of(
    providers: &Providers,
    key: &RolloutKey,
    rollout: &Rollout,
) -> Option<Baseline> {
    if rollout.spec.analysis.judge_counts.is_some() {
        return None;
    }
    providers
        .target(rollout)?
        .judge_baseline(key, rollout, latency_threshold(rollout))
        .await
}

/// What both versions served since the previous window: when the rollout names counts for its
/// judges (`judgeCounts`), from the first metric source that reads them and no other (none
/// does: no window); else from the first metric source that counts requests for this rollout
/// (Prometheus, when it judges it), else from the target.
async fn window_of(
    providers: &Providers,
    key: &RolloutKey,
    rollout: &Rollout,
    run: u64,
) -> Option<weir_analysis::Window> {
    if rollout.spec.analysis.judge_counts.is_some() {
        let source = providers
            .metrics
            .iter()
            .find(|source| source.reads_judge_counts(rollout))?;
        return source.judge_window(key, rollout, run).await;
    }
    for source in &providers.metrics {
        if let Some(window) = source.judge_window(key, rollout, run).await {
            return Some(window);
        }
    }
    providers
        .target(rollout)?
        .judge_window(key, rollout, latency_threshold(rollout))
        .await
}

/// Feeds every watched run's judges once per `period`, publishes each judge's e-value and
/// health bound to `telemetry` and the run's evidence of health to `reports`, and reports the
/// first failing verdict of a run to the engine.
pub(crate) async fn judge_loop(
    watched: Watched,
    reports: EvidenceReports,
    providers: Providers,
    requests: mpsc::Sender<Request>,
    period: Duration,
    telemetry: crate::Telemetry,
) {
    let mut runs: HashMap<RolloutKey, RunJudges> = HashMap::new();
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticker.tick().await;
        let current = watched.snapshot();
        runs.retain(|key, _| {
            let judged = current.iter().any(|(watched, _, _)| watched == key);
            if !judged {
                // The run ended (or the rollout is gone): its e-value means nothing any more.
                telemetry.remove_judges(key);
                reports.remove(key);
            }
            judged
        });
        for (key, rollout, run) in current {
            let state = runs.entry(key.clone()).or_insert_with(|| RunJudges {
                run: u64::MAX,
                judges: Vec::new(),
                reported: false,
            });
            if state.run != run {
                // A new run: fresh judges, primed with what the primary served before it (the
                // target's windows start after those counts).
                telemetry.remove_judges(&key);
                reports.remove(&key);
                let baseline = baseline_of(&providers, &key, &rollout).await;
                *state = RunJudges {
                    run,
                    judges: judges_of(&rollout)
                        .iter()
                        .filter_map(|name| {
                            build(name, &rollout, baseline).map(|judge| (name.clone(), judge))
                        })
                        .collect(),
                    reported: false,
                };
            }
            if state.reported {
                continue;
            }
            let Some(window) = window_of(&providers, &key, &rollout, run).await else {
                continue;
            };
            for (name, judge) in &mut state.judges {
                let verdict = judge.observe(&window);
                // Judges report their evidence as JSON; `logEValue` is null when not finite.
                if let Some(log_e_value) = verdict
                    .evidence
                    .get("logEValue")
                    .and_then(serde_json::Value::as_f64)
                {
                    telemetry.set_judge_log_evalue(&key, name, log_e_value);
                }
                telemetry.set_judge_excess_upper(&key, name, judge.health().excess_upper);
                if verdict.outcome == VerdictOutcome::Fail {
                    state.reported = true;
                    let verdict = verdict.into_judge_verdict(name);
                    if requests
                        .send(Request::Verdict {
                            key: key.clone(),
                            run,
                            verdict,
                        })
                        .await
                        .is_err()
                    {
                        return;
                    }
                    break;
                }
            }
            if let Some(report) = combined(&state.judges) {
                reports.set(&key, run, report);
            }
        }
        if requests.is_closed() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn rollout(yaml_target: &str, analysis: &str) -> Rollout {
        serde_saphyr::from_str(&format!(
            "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: shop}}\nspec:\n  target: {yaml_target}\n  plan: {{canary: {{stepWeights: [50]}}}}\n  analysis: {analysis}\n"
        ))
        .unwrap()
    }

    const LOCAL: &str = "{kind: local, listen: \"127.0.0.1:0\", primary: {url: \"http://127.0.0.1:1\"}, canary: {url: \"http://127.0.0.1:2\"}}";

    #[test]
    fn the_machine_hears_of_evidence_only_when_a_judge_watches_the_run() {
        let reports = EvidenceReports::default();
        let key = RolloutKey::new("default", "shop");
        // Nobody judges it: the evidence rule does not apply.
        let local = rollout(LOCAL, "{interval: 1s}");
        let mut skipped = local.clone();
        skipped.spec.skip_analysis = true;
        assert_eq!(evidence_for(&reports, &key, &skipped, 1), None);
        // Local rollouts are judged by default: waiting until the judges' first window.
        assert_eq!(
            evidence_for(&reports, &key, &local, 1),
            Some(EvidenceReport {
                healthy: false,
                summary: FIRST_WINDOW.into(),
            })
        );
        let shown = EvidenceReport {
            healthy: true,
            summary: "evidence of health".into(),
        };
        reports.set(&key, 1, shown.clone());
        assert_eq!(evidence_for(&reports, &key, &local, 1), Some(shown));
        // A report of the previous run says nothing about this one.
        assert_eq!(
            evidence_for(&reports, &key, &local, 2).map(|report| report.healthy),
            Some(false)
        );
        reports.remove(&key);
        assert_eq!(
            evidence_for(&reports, &key, &local, 1).map(|report| report.summary),
            Some(FIRST_WINDOW.to_string())
        );
    }

    #[test]
    fn the_judge_gets_the_specs_margin_as_a_fraction_and_the_baseline() {
        let spec = rollout(LOCAL, "{interval: 1s, evidence: {marginPercent: 5}}");
        let baseline = Baseline {
            requests: 1_000,
            errors: 3,
            slow: None,
        };
        let judge = build("sequential", &spec, Some(baseline)).unwrap();
        assert_eq!(judge.config().health_margin, Some(0.05));
        assert_eq!(judge.config().baseline, Some(baseline));
        assert!(build("unknown", &spec, None).is_none());
        // Before any window nothing is shown.
        let report = combined(&[("sequential".into(), judge)]).unwrap();
        assert!(!report.healthy, "{report:?}");
        assert_eq!(combined(&[]), None);
    }
}
