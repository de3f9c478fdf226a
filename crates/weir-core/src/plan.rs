//! Dry runs: what a healthy run of a rollout looks like, step by step.
//!
//! The timeline is produced by driving the real state machine with observations in which every
//! check and gate passes, so it can never disagree with what [`crate::machine::step`] does.

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use crate::machine::{self, Command, CommandInput, Input, Observations};
use crate::model::{EventReason, HookType, Phase, Plan, RolloutSpec, RolloutStatus};
use crate::units::{GoDuration, Weight};

/// The most ticks a dry run simulates before giving up (a plan has at most 10,000 steps).
const MAX_TICKS: usize = 50_000;

/// A healthy run, step by step.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    /// The plan's strategy.
    pub strategy: &'static str,
    /// The analysis interval.
    pub interval: GoDuration,
    /// Failed checks that end a run.
    pub threshold: u32,
    /// Each step.
    pub steps: Vec<TimelineStep>,
    /// How long a healthy run takes from its start to Succeeded, if it gets there on its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minimum_duration: Option<GoDuration>,
    /// The phase the dry run ended in.
    pub final_phase: Phase,
    /// What a person must do along the way, if anything.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub manual_steps: Vec<String>,
}

/// One step of a dry run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineStep {
    /// Time since the run started.
    pub offset: GoDuration,
    /// The wall-clock time, for schedules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
    /// The phase after the step.
    pub phase: Phase,
    /// The canary weight after the step.
    pub canary_weight: Weight,
    /// The mirrored share, when mirroring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror_weight: Option<Weight>,
    /// Whether A/B match rules route to the canary.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub match_active: bool,
    /// What must open before the step happens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    /// What happens.
    pub description: String,
}

/// Simulates a healthy run of `spec` that starts at `start` (for schedules, pass the time the
/// run would start; the timeline shows wall-clock times for them).
pub fn dry_run(spec: &RolloutSpec, start: Timestamp) -> Timeline {
    let canary = Some("canary".to_string());
    let mut status = RolloutStatus {
        phase: Phase::Initialized,
        primary_revision: Some("primary".into()),
        ..RolloutStatus::default()
    };
    let mut now = start;
    let mut steps = Vec::new();
    let mut manual_steps = Vec::new();
    let mut started_at = None;
    let show_clock = matches!(spec.plan, Plan::Schedule(_));
    for _ in 0..MAX_TICKS {
        let input = if status.waiting_for_resume || status.phase == Phase::Held {
            manual_steps.push(format!(
                "at {} a person runs `weir resume`",
                offset(started_at, now)
            ));
            Input::Command(CommandInput {
                command: Command::Resume,
                actor: "dry-run".into(),
            })
        } else {
            Input::Tick(Observations::healthy(spec, canary.clone()))
        };
        let Ok(transition) = machine::step(spec, &status, &input, now) else {
            break;
        };
        for event in &transition.events {
            if event.reason == EventReason::RunStarted && started_at.is_none() {
                started_at = Some(event.at);
            }
            let Some(gate) = gate_for(spec, &status, event.reason) else {
                continue;
            };
            steps.push(TimelineStep {
                offset: offset(started_at, event.at),
                at: show_clock.then_some(event.at),
                phase: event.phase,
                canary_weight: event.canary_weight,
                mirror_weight: transition.status.mirror_weight,
                match_active: transition.status.match_active,
                gate: gate.map(str::to_string),
                description: event.message.clone(),
            });
        }
        status = transition.status;
        if matches!(status.phase, Phase::Succeeded | Phase::Failed) {
            break;
        }
        if status.phase == Phase::WaitingPromotion
            && !spec.analysis.has_hooks(HookType::ConfirmPromotion)
        {
            // Only a person can finish this run (a schedule that stops short of 100%).
            manual_steps.push("a person runs `weir promote` to finish".into());
            break;
        }
        if status.waiting_for_resume || status.phase == Phase::Held {
            // The person resumes at once: the minimum duration leaves out human delay.
            continue;
        }
        match transition.wake_at {
            Some(next) if next > now => now = next,
            Some(_) => {}
            None => break,
        }
    }
    let minimum_duration = (status.phase == Phase::Succeeded).then(|| offset(started_at, now));
    Timeline {
        strategy: spec.plan.strategy_name(),
        interval: spec.analysis.interval,
        threshold: spec.analysis.threshold,
        steps,
        minimum_duration,
        final_phase: status.phase,
        manual_steps,
    }
}

fn offset(started_at: Option<Timestamp>, at: Timestamp) -> GoDuration {
    let Some(started_at) = started_at else {
        return GoDuration::default();
    };
    let elapsed = at.duration_since(started_at);
    GoDuration::new(
        std::time::Duration::try_from(elapsed.max(SignedDuration::ZERO)).unwrap_or_default(),
    )
}

/// Which events a timeline shows (outer `None`: not shown), and the gate guarding each (inner).
fn gate_for(
    spec: &RolloutSpec,
    before: &RolloutStatus,
    reason: EventReason,
) -> Option<Option<&'static str>> {
    let has = |hook_type| spec.analysis.has_hooks(hook_type);
    let gate = match reason {
        EventReason::RunStarted => has(HookType::ConfirmRollout).then_some("confirm-rollout"),
        EventReason::Advanced => {
            if before.waiting_for_resume {
                Some("manual resume")
            } else if has(HookType::ConfirmTrafficIncrease)
                && matches!(spec.plan, Plan::Canary(_) | Plan::Schedule(_))
                && before.phase == Phase::Progressing
            {
                Some("confirm-traffic-increase")
            } else {
                None
            }
        }
        EventReason::Resumed => Some("manual resume"),
        EventReason::Promoting => has(HookType::ConfirmPromotion).then_some("confirm-promotion"),
        EventReason::Finalising | EventReason::Succeeded | EventReason::WaitingPromotion => None,
        _ => return None,
    };
    Some(gate)
}

#[cfg(test)]
mod tests;
