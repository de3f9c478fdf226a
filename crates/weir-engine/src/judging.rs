//! Judges that watch a run continuously, between ticks.
//!
//! About once a second the judge task reads what both versions served (through the target
//! provider's `judge_window`), feeds each run's judges, and on the first failing verdict sends it to
//! the engine, which rolls back at once (`Input::Verdict`) instead of at the next analysis tick.
//! Local rollouts that name no judge get the sequential judge: weir's default.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use weir_analysis::{Judge, SequentialConfig, SequentialJudge};
use weir_core::FieldError;
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

fn build(name: &str, rollout: &Rollout) -> Option<Box<dyn Judge>> {
    match name {
        "sequential" => Some(Box::new(SequentialJudge::new(SequentialConfig {
            latency_threshold_ms: latency_threshold(rollout),
            ..SequentialConfig::default()
        }))),
        _ => None,
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

struct RunJudges {
    run: u64,
    judges: Vec<(String, Box<dyn Judge>)>,
    reported: bool,
}

/// What both versions served since the previous window: from the first metric source that
/// counts requests for this rollout (Prometheus, when it judges it), else from the target.
async fn window_of(
    providers: &Providers,
    key: &RolloutKey,
    rollout: &Rollout,
    run: u64,
) -> Option<weir_analysis::Window> {
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

/// Feeds every watched run's judges once per `period`, publishes each judge's e-value to
/// `telemetry`, and reports the first failing verdict of a run to the engine.
pub(crate) async fn judge_loop(
    watched: Watched,
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
                // A new run: fresh judges (and a fresh baseline for the windows).
                telemetry.remove_judges(&key);
                *state = RunJudges {
                    run,
                    judges: judges_of(&rollout)
                        .iter()
                        .filter_map(|name| build(name, &rollout).map(|judge| (name.clone(), judge)))
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
        }
        if requests.is_closed() {
            return;
        }
    }
}
