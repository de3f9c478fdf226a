//! The plan as a list: weight steps of a canary, entries of a schedule.

use jiff::{SignedDuration, Timestamp};

use crate::model::{CanaryPlan, Plan, RolloutSpec, RolloutStatus, SchedulePlan};
use crate::units::{GoDuration, Weight};
use crate::validate::MAX_STEPS;

/// One weight step of a canary plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedStep {
    /// The canary weight at this step.
    pub weight: Weight,
    /// `None`: no pause; `Some(Some(d))`: stay `d`; `Some(None)`: stay until resumed.
    pub pause: Option<Option<GoDuration>>,
}

/// The highest canary weight before promotion: `maxWeight`, or the last of `stepWeights` (capped
/// at 100%), or 100%.
pub fn max_weight(plan: &CanaryPlan) -> Weight {
    if let Some(max) = plan.max_weight {
        return max.min(Weight::FULL);
    }
    if let Some(last) = plan
        .step_weights
        .as_ref()
        .and_then(|weights| weights.last())
    {
        return (*last).min(Weight::FULL);
    }
    Weight::FULL
}

/// The weights a canary plan goes through, each capped at the maximum weight; the list ends at
/// the first step that reaches it.
pub fn canary_steps(plan: &CanaryPlan) -> Vec<PlannedStep> {
    let max = max_weight(plan);
    let mut planned = Vec::new();
    let mut push = |weight: Weight, pause: Option<Option<GoDuration>>| -> bool {
        let weight = weight.min(max);
        planned.push(PlannedStep { weight, pause });
        weight < max && planned.len() < MAX_STEPS
    };
    if let Some(step) = plan.step_weight.filter(|step| *step > Weight::ZERO) {
        let mut weight = step;
        while push(weight, None) {
            weight = weight.add_capped(step, max);
        }
    } else if let Some(weights) = &plan.step_weights {
        for weight in weights {
            if !push(*weight, None) {
                break;
            }
        }
    } else if let Some(steps) = &plan.steps {
        // Explicit steps are taken as written (validation keeps them within maxWeight); a later
        // step may lower the weight.
        for step in steps.iter().take(MAX_STEPS) {
            let pause = step.pause.as_ref().map(|pause| pause.duration);
            planned.push(PlannedStep {
                weight: step.weight.min(max),
                pause,
            });
        }
    }
    planned
}

/// The weight steps of the spec's plan (empty unless it is a canary).
pub(crate) fn weight_steps(spec: &RolloutSpec) -> Vec<PlannedStep> {
    match &spec.plan {
        Plan::Canary(canary) => canary_steps(canary),
        _ => Vec::new(),
    }
}

/// The schedule's entries in time order, a template expanded until it reaches 100%.
pub fn schedule_entries(spec: &RolloutSpec) -> Vec<(Timestamp, Weight)> {
    match &spec.plan {
        Plan::Schedule(schedule) => expand_schedule(schedule),
        _ => Vec::new(),
    }
}

fn expand_schedule(schedule: &SchedulePlan) -> Vec<(Timestamp, Weight)> {
    if let Some(entries) = &schedule.manual {
        return entries
            .iter()
            .take(MAX_STEPS)
            .map(|entry| (entry.at, entry.weight))
            .collect();
    }
    let Some(template) = &schedule.template else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    if template.increments == Weight::ZERO {
        return entries;
    }
    let mut weight = Weight::ZERO;
    let mut at = template.start;
    let interval = SignedDuration::from_secs(template.interval.seconds());
    while weight < Weight::FULL && entries.len() < MAX_STEPS {
        weight = weight.add_capped(template.increments, Weight::FULL);
        entries.push((at, weight));
        match at.checked_add(interval) {
            Ok(next) => at = next,
            Err(_) => break,
        }
    }
    entries
}

/// Whether every step (or iteration) of the plan has been taken.
pub(crate) fn plan_exhausted(spec: &RolloutSpec, status: &RolloutStatus) -> bool {
    match &spec.plan {
        Plan::Canary(_) => status.steps_taken as usize >= weight_steps(spec).len(),
        Plan::Schedule(_) => status.steps_taken as usize >= schedule_entries(spec).len(),
        Plan::BlueGreen(plan) => status.iterations >= plan.iterations,
        Plan::Mirror(plan) => status.iterations >= plan.iterations,
        Plan::AbTest(plan) => status.iterations >= plan.iterations,
    }
}

/// Whether the next move of the plan raises the canary weight (so confirm-traffic-increase
/// applies).
pub(crate) fn next_move_raises_weight(spec: &RolloutSpec, status: &RolloutStatus) -> bool {
    match &spec.plan {
        Plan::Canary(_) => weight_steps(spec)
            .get(status.steps_taken as usize)
            .is_some_and(|step| step.weight > status.canary_weight),
        Plan::Schedule(_) => true,
        _ => false,
    }
}

/// When the first schedule entry not yet applied is due.
pub(crate) fn next_unapplied_entry_time(
    spec: &RolloutSpec,
    status: &RolloutStatus,
) -> Option<Timestamp> {
    schedule_entries(spec)
        .get(status.steps_taken as usize)
        .map(|entry| entry.0)
}
