//! One test per transition of the reference (Flagger's semantics) and per addition of weir's.

use super::*;
use crate::model::{HookResult, Rollout};

// === harness ===

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// A spec from the YAML of `plan:` and `analysis:` (indented under `spec:`).
fn spec(body: &str) -> RolloutSpec {
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: app}}\nspec:\n  target: {{kind: local}}\n{body}"
    );
    let rollout: Rollout = match serde_saphyr::from_str(&yaml) {
        Ok(rollout) => rollout,
        Err(error) => panic!("test spec does not parse: {error}\n{yaml}"),
    };
    let errors = crate::validate::rollout(&rollout);
    assert!(errors.is_empty(), "test spec is invalid: {errors:?}");
    rollout.spec
}

const CANARY: &str = "  plan: {canary: {stepWeight: 20, maxWeight: 60}}\n  analysis: {interval: 1m, threshold: 2, metrics: [{name: request-success-rate, thresholdRange: {min: 99}}]}\n";

/// A rollout driven through the machine, keeping everything it produced.
struct Harness {
    spec: RolloutSpec,
    status: RolloutStatus,
    now: Timestamp,
    last: Option<Transition>,
    events: Vec<Event>,
}

impl Harness {
    fn new(spec: RolloutSpec) -> Harness {
        let mut harness = Harness {
            spec,
            status: RolloutStatus::default(),
            now: at(0),
            last: None,
            events: Vec::new(),
        };
        let mut setup = Observations::ready(Some("v1".into()));
        setup.primary_revision = Some("v1".into());
        harness.input(Input::Tick(setup));
        assert_eq!(harness.status.phase, Phase::Initialized);
        harness
    }

    /// A harness with a run of revision v2 started (phase Progressing, no step taken yet).
    fn running(body: &str) -> Harness {
        let mut harness = Harness::new(spec(body));
        harness.tick(|_| {});
        assert_eq!(
            harness.status.phase,
            Phase::Progressing,
            "{:?}",
            harness.events
        );
        harness
    }

    fn input(&mut self, input: Input) -> &Transition {
        let transition = match step(&self.spec, &self.status, &input, self.now) {
            Ok(transition) => transition,
            Err(rejected) => panic!("unexpected rejection: {rejected}"),
        };
        self.status = transition.status.clone();
        self.events.extend(transition.events.iter().cloned());
        self.last.insert(transition)
    }

    /// One interval later, a tick with healthy observations of revision v2, adjusted by `edit`.
    fn tick(&mut self, edit: impl FnOnce(&mut Observations)) -> &Transition {
        self.now = self
            .now
            .checked_add(self.spec.analysis.interval.get())
            .unwrap_or(self.now);
        let mut observations = Observations::healthy(&self.spec, Some("v2".into()));
        edit(&mut observations);
        self.input(Input::Tick(observations))
    }

    fn healthy(&mut self) -> &Transition {
        self.tick(|_| {})
    }

    fn command(&mut self, command: Command) -> Result<Transition, CommandRejected> {
        let input = Input::Command(CommandInput {
            command,
            actor: "alice".into(),
        });
        let result = step(&self.spec, &self.status, &input, self.now);
        if let Ok(transition) = &result {
            self.status = transition.status.clone();
            self.events.extend(transition.events.iter().cloned());
        }
        result
    }

    fn effects(&self) -> &[Effect] {
        self.last
            .as_ref()
            .map(|t| t.effects.as_slice())
            .unwrap_or_default()
    }

    fn routes(&self) -> Vec<&Route> {
        self.effects()
            .iter()
            .filter_map(|effect| match effect {
                Effect::SetRoute(route) => Some(route),
                _ => None,
            })
            .collect()
    }

    fn weight(&self) -> u32 {
        self.status.canary_weight.basis_points() / 100
    }

    fn last_reason(&self) -> Option<EventReason> {
        self.events.last().map(|event| event.reason)
    }
}

fn failing_metric(observations: &mut Observations) {
    for check in &mut observations.checks {
        check.outcome = CheckOutcome::Fail;
        check.value = Some(90.0);
    }
}

fn hook(observations: &mut Observations, name: &str, success: bool) {
    for result in &mut observations.hooks {
        if result.name == name {
            result.success = success;
        }
    }
}

// === set-up and run start ===

#[test]
fn initializing_routes_everything_to_the_primary_and_records_its_revision() {
    let harness = Harness::new(spec(CANARY));
    assert_eq!(harness.status.primary_revision.as_deref(), Some("v1"));
    let routes = harness.routes();
    assert_eq!(routes.len(), 1);
    assert_eq!(routes[0].primary_weight, Weight::FULL);
    assert!(
        harness
            .effects()
            .contains(&Effect::ScaleCanary(Scale::Down))
    );
    assert_eq!(harness.last_reason(), Some(EventReason::Initialized));
}

#[test]
fn the_primary_revision_starts_no_run() {
    let mut harness = Harness::new(spec(CANARY));
    let transition = harness.tick(|obs| obs.canary_revision = Some("v1".into()));
    assert_eq!(transition.status.phase, Phase::Initialized);
    assert!(transition.effects.is_empty() && transition.events.is_empty());
}

#[test]
fn a_new_revision_starts_a_run_and_scales_the_canary_up() {
    let mut harness = Harness::new(spec(CANARY));
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert_eq!(harness.status.run, 1);
    assert_eq!(harness.status.canary_revision.as_deref(), Some("v2"));
    assert!(harness.effects().contains(&Effect::ScaleCanary(Scale::Up)));
    assert_eq!(harness.weight(), 0);
}

#[test]
fn a_closed_confirm_rollout_gate_waits_and_an_open_one_starts_progressing() {
    let body = "  plan: {canary: {stepWeight: 50}}\n  analysis: {webhooks: [{name: approve, type: confirm-rollout, url: 'http://gate/'}]}\n";
    let mut harness = Harness::new(spec(body));
    harness.tick(|obs| hook(obs, "approve", false));
    assert_eq!(harness.status.phase, Phase::Waiting);
    assert_eq!(harness.last_reason(), Some(EventReason::WaitingForApproval));
    assert!(!harness.effects().contains(&Effect::ScaleCanary(Scale::Up)));
    harness.tick(|obs| hook(obs, "approve", false));
    assert_eq!(harness.status.phase, Phase::Waiting);
    harness.tick(|obs| hook(obs, "approve", true));
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert!(harness.effects().contains(&Effect::ScaleCanary(Scale::Up)));
}

#[test]
fn a_person_can_open_the_confirm_rollout_gate_with_resume() {
    let body = "  plan: {canary: {stepWeight: 50}}\n  analysis: {webhooks: [{name: approve, type: confirm-rollout, url: 'http://gate/'}]}\n";
    let mut harness = Harness::new(spec(body));
    harness.tick(|obs| hook(obs, "approve", false));
    let transition = harness.command(Command::Resume);
    assert!(transition.is_ok());
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert_eq!(
        harness
            .events
            .last()
            .and_then(|e| e.evidence.actor.clone())
            .as_deref(),
        Some("alice")
    );
}

// === analysis ticks ===

#[test]
fn the_first_progressing_tick_takes_the_first_step_without_evaluating_metrics() {
    let mut harness = Harness::running(CANARY);
    // Metrics are first evaluated on the second tick, as in Flagger.
    harness.tick(failing_metric);
    assert_eq!(harness.weight(), 20);
    assert_eq!(harness.status.failed_checks, 0);
    assert!(harness.status.pre_rollout_passed);
}

#[test]
fn a_failing_pre_rollout_hook_counts_a_failed_check_and_holds_the_weight() {
    let body = "  plan: {canary: {stepWeight: 50}}\n  analysis: {threshold: 3, webhooks: [{name: smoke, type: pre-rollout, url: 'http://t/'}]}\n";
    let mut harness = Harness::running(body);
    harness.tick(|obs| hook(obs, "smoke", false));
    assert_eq!(harness.weight(), 0);
    assert_eq!(harness.status.failed_checks, 1);
    harness.healthy();
    assert_eq!(harness.weight(), 50);
}

#[test]
fn a_failing_rollout_hook_counts_a_failed_check() {
    let body = "  plan: {canary: {stepWeight: 10}}\n  analysis: {threshold: 3, webhooks: [{name: load, url: 'http://t/'}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.tick(|obs| hook(obs, "load", false));
    assert_eq!(harness.weight(), 10);
    assert_eq!(harness.status.failed_checks, 1);
    // A rollout hook that did not answer at all is a failure too.
    harness.tick(|obs| obs.hooks.clear());
    assert_eq!(harness.status.failed_checks, 2);
}

#[test]
fn a_failed_check_holds_the_weight_and_a_pass_does_not_reset_the_total() {
    let mut harness = Harness::running(CANARY);
    harness.healthy();
    assert_eq!(harness.weight(), 20);
    harness.tick(failing_metric);
    assert_eq!(harness.weight(), 20);
    assert_eq!(harness.status.failed_checks, 1);
    assert_eq!(harness.last_reason(), Some(EventReason::ChecksFailed));
    assert_eq!(
        harness.events.last().map(|e| e.evidence.checks.len()),
        Some(1)
    );
    harness.healthy();
    assert_eq!(harness.weight(), 40);
    assert_eq!(
        harness.status.failed_checks, 1,
        "cumulative: a pass does not reset"
    );
}

#[test]
fn consecutive_counting_resets_on_a_pass() {
    let body = "  plan: {canary: {stepWeight: 20}}\n  analysis: {threshold: 2, failureCounting: consecutive, metrics: [{name: request-success-rate, thresholdRange: {min: 99}}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.tick(failing_metric);
    assert_eq!(harness.status.failed_checks, 1);
    harness.healthy();
    assert_eq!(harness.status.failed_checks, 0);
    harness.tick(failing_metric);
    harness.healthy();
    harness.tick(failing_metric);
    assert_eq!(harness.status.phase, Phase::Progressing);
}

#[test]
fn reaching_the_threshold_rolls_back_at_the_start_of_the_next_tick() {
    let mut harness = Harness::running(CANARY);
    harness.healthy();
    harness.tick(failing_metric);
    harness.tick(failing_metric);
    assert_eq!(harness.status.failed_checks, 2);
    assert_eq!(
        harness.status.phase,
        Phase::Progressing,
        "compared at the next tick"
    );
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Failed);
    assert_eq!(harness.weight(), 0);
    assert_eq!(harness.routes()[0].primary_weight, Weight::FULL);
    assert!(
        harness
            .effects()
            .contains(&Effect::ScaleCanary(Scale::Down))
    );
    assert!(harness.effects().iter().any(
        |e| matches!(e, Effect::Notify(n) if n.severity == Severity::Error
                && n.evidence.checks.iter().any(|check| check.outcome == CheckOutcome::Fail))
    ));
    assert_eq!(harness.last_reason(), Some(EventReason::RolledBack));
    // The rollback says why: the checks of the last failed tick.
    let Some(rolled_back) = harness.events.last() else {
        panic!("no event");
    };
    assert_eq!(
        rolled_back.evidence.checks[0].outcome,
        CheckOutcome::Fail,
        "{rolled_back:?}"
    );
    assert!(harness.status.last_failure.is_empty());
}

#[test]
fn no_data_fails_by_default() {
    let mut harness = Harness::running(CANARY);
    harness.healthy();
    harness.tick(|obs| obs.checks.clear());
    assert_eq!(harness.status.failed_checks, 1);
    assert_eq!(harness.weight(), 20);
}

#[test]
fn no_data_with_hold_holds_the_weight_without_counting() {
    let body = "  plan: {canary: {stepWeight: 20}}\n  analysis: {noData: hold, metrics: [{name: request-success-rate, thresholdRange: {min: 99}}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.tick(|obs| obs.checks[0].outcome = CheckOutcome::NoData);
    assert_eq!(harness.status.failed_checks, 0);
    assert_eq!(harness.weight(), 20);
    assert_eq!(harness.last_reason(), Some(EventReason::NoData));
}

#[test]
fn no_data_with_ignore_advances() {
    let body = "  plan: {canary: {stepWeight: 20}}\n  analysis: {noData: ignore, metrics: [{name: request-success-rate, thresholdRange: {min: 99}}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.tick(|obs| obs.checks.clear());
    assert_eq!(harness.weight(), 40);
}

#[test]
fn confirm_traffic_increase_holds_the_weight_without_a_failure() {
    let body = "  plan: {canary: {stepWeight: 25}}\n  analysis: {webhooks: [{name: more, type: confirm-traffic-increase, url: 'http://g/'}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    assert_eq!(harness.weight(), 25);
    harness.tick(|obs| hook(obs, "more", false));
    assert_eq!(harness.weight(), 25);
    assert_eq!(harness.status.failed_checks, 0);
    assert_eq!(harness.last_reason(), Some(EventReason::GateClosed));
    harness.healthy();
    assert_eq!(harness.weight(), 50);
}

#[test]
fn confirm_promotion_waits_in_waiting_promotion_while_analysis_continues() {
    let body = "  plan: {canary: {stepWeight: 50}}\n  analysis: {threshold: 5, metrics: [{name: request-success-rate, thresholdRange: {min: 99}}], webhooks: [{name: ship, type: confirm-promotion, url: 'http://g/'}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.healthy();
    assert_eq!(harness.weight(), 100);
    harness.tick(|obs| hook(obs, "ship", false));
    assert_eq!(harness.status.phase, Phase::WaitingPromotion);
    harness.tick(|obs| {
        hook(obs, "ship", false);
        failing_metric(obs);
    });
    assert_eq!(
        harness.status.failed_checks, 1,
        "analysis continues while waiting"
    );
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Promoting);
    assert!(harness.effects().contains(&Effect::Promote {
        revision: "v2".into()
    }));
}

#[test]
fn promotion_finalises_then_succeeds() {
    let mut harness = Harness::running(CANARY);
    for expected in [20, 40, 60] {
        harness.healthy();
        assert_eq!(harness.weight(), expected);
    }
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Promoting);
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Finalising);
    assert_eq!(harness.routes()[0].canary_weight, Weight::ZERO);
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Succeeded);
    assert_eq!(harness.status.primary_revision.as_deref(), Some("v2"));
    assert!(
        harness
            .effects()
            .contains(&Effect::ScaleCanary(Scale::Down))
    );
    assert_eq!(harness.last_reason(), Some(EventReason::Succeeded));
}

#[test]
fn step_weight_promotion_moves_traffic_back_gradually() {
    let body = "  plan: {canary: {stepWeight: 50, stepWeightPromotion: 30}}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.healthy();
    harness.healthy();
    assert_eq!(
        (harness.status.phase, harness.weight()),
        (Phase::Promoting, 100)
    );
    harness.healthy();
    assert_eq!(
        (harness.status.phase, harness.weight()),
        (Phase::Promoting, 70)
    );
    harness.healthy();
    harness.healthy();
    assert_eq!(harness.weight(), 10);
    harness.healthy();
    assert_eq!(
        (harness.status.phase, harness.weight()),
        (Phase::Finalising, 0)
    );
}

#[test]
fn a_rollback_hook_that_answers_yes_rolls_back_at_once() {
    let body = "  plan: {canary: {stepWeight: 10}}\n  analysis: {threshold: 9, webhooks: [{name: stop, type: rollback, url: 'http://g/'}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.tick(|obs| hook(obs, "stop", true));
    assert_eq!(harness.status.phase, Phase::Failed);
    assert_eq!(
        harness.events.last().map(|e| e.evidence.hooks.len()),
        Some(1)
    );
}

#[test]
fn an_unready_canary_halts_and_fails_after_the_progress_deadline() {
    let body =
        "  plan: {canary: {stepWeight: 10}}\n  analysis: {interval: 1m, progressDeadline: 3m}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    for _ in 0..3 {
        harness.tick(|obs| obs.canary_ready = false);
        assert_eq!(
            (harness.status.phase, harness.weight()),
            (Phase::Progressing, 10)
        );
    }
    harness.tick(|obs| obs.canary_ready = false);
    assert_eq!(harness.status.phase, Phase::Failed);
}

#[test]
fn a_revision_change_mid_run_restarts_the_run() {
    let mut harness = Harness::running(CANARY);
    harness.healthy();
    harness.tick(failing_metric);
    harness.tick(|obs| obs.canary_revision = Some("v3".into()));
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert_eq!(harness.status.run, 2);
    assert_eq!(harness.status.canary_revision.as_deref(), Some("v3"));
    assert_eq!((harness.weight(), harness.status.failed_checks), (0, 0));
    assert_eq!(harness.routes()[0].primary_weight, Weight::FULL);
    assert_eq!(harness.last_reason(), Some(EventReason::RunRestarted));
}

#[test]
fn skip_analysis_promotes_at_once() {
    let body = "  plan: {canary: {stepWeight: 10}}\n  skipAnalysis: true\n";
    let mut harness = Harness::running(body);
    harness.tick(failing_metric);
    assert_eq!(harness.status.phase, Phase::Promoting);
}

#[test]
fn a_suspended_rollout_does_nothing() {
    let mut suspended = spec(CANARY);
    suspended.suspend = true;
    let mut harness = Harness::new(spec(CANARY));
    harness.spec = suspended;
    let transition = harness.healthy();
    assert_eq!(transition.status.phase, Phase::Initialized);
    assert!(transition.effects.is_empty() && transition.events.is_empty());
    assert!(
        transition.wake_at.is_some(),
        "a suspended rollout keeps its timer"
    );
}

#[test]
fn after_success_only_a_new_revision_starts_a_run() {
    let body = "  plan: {canary: {stepWeight: 100}}\n";
    let mut harness = Harness::running(body);
    for _ in 0..4 {
        harness.healthy();
    }
    assert_eq!(harness.status.phase, Phase::Succeeded);
    harness.healthy();
    assert_eq!(
        harness.status.phase,
        Phase::Succeeded,
        "v2 is promoted: no run"
    );
    harness.tick(|obs| obs.canary_revision = Some("v3".into()));
    assert_eq!(
        (harness.status.phase, harness.status.run),
        (Phase::Progressing, 2)
    );
}

#[test]
fn after_failure_the_failed_revision_does_not_rerun_but_a_new_one_does() {
    let mut harness = Harness::running(CANARY);
    let _ = harness.command(Command::Abort);
    assert_eq!(harness.status.phase, Phase::Failed);
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Failed);
    harness.tick(|obs| obs.canary_revision = Some("v3".into()));
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert_eq!(harness.status.canary_revision.as_deref(), Some("v3"));
}

// === other strategies ===

#[test]
fn blue_green_runs_iterations_then_switches_then_promotes() {
    let body = "  plan: {blueGreen: {iterations: 2}}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.healthy();
    assert_eq!((harness.status.iterations, harness.weight()), (2, 0));
    harness.healthy();
    assert_eq!(
        (harness.status.phase, harness.weight()),
        (Phase::Progressing, 100)
    );
    assert!(harness.status.switched);
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Promoting);
}

#[test]
fn ab_testing_routes_matching_requests_for_its_iterations_then_promotes() {
    let body =
        "  plan: {abTest: {iterations: 2, match: [{headers: {x-canary: {exact: insider}}}]}}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    assert!(harness.status.match_active);
    let route = harness.routes()[0].clone();
    assert_eq!(
        (route.canary_weight, route.match_rules.len()),
        (Weight::ZERO, 1)
    );
    harness.healthy();
    assert_eq!(harness.status.iterations, 2);
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Promoting);
    harness.healthy();
    assert!(
        harness.routes()[0].match_rules.is_empty(),
        "promotion removes the match"
    );
}

#[test]
fn mirror_plans_shadow_traffic_for_their_iterations_then_switch() {
    let body = "  plan: {mirror: {iterations: 2, mirrorWeight: 50}}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    assert_eq!(
        harness.routes()[0].mirror_weight,
        Some(Weight::from_percent(50))
    );
    assert_eq!(harness.weight(), 0);
    harness.healthy();
    harness.healthy();
    assert_eq!(harness.weight(), 100);
    assert_eq!(harness.routes()[0].mirror_weight, None);
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Promoting);
}

#[test]
fn a_canary_with_mirror_weight_mirrors_one_interval_before_the_first_step() {
    let body = "  plan: {canary: {stepWeight: 50, mirrorWeight: 100}}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    assert_eq!(
        (harness.weight(), harness.status.mirror_weight),
        (0, Some(Weight::FULL))
    );
    harness.healthy();
    assert_eq!((harness.weight(), harness.status.mirror_weight), (50, None));
}

#[test]
fn a_timed_step_pause_holds_the_weight_and_wakes_at_its_end() {
    let body = "  plan: {canary: {steps: [{weight: 10, pause: {duration: 5m}}, {weight: 30}]}}\n  analysis: {interval: 1m}\n";
    let mut harness = Harness::running(body);
    let paused_at = harness
        .now
        .checked_add(std::time::Duration::from_secs(60))
        .unwrap_or(harness.now);
    let wake = harness.healthy().wake_at;
    assert_eq!(harness.weight(), 10);
    assert_eq!(
        wake,
        paused_at
            .checked_add(std::time::Duration::from_secs(60))
            .ok()
    );
    for _ in 0..4 {
        harness.healthy();
        assert_eq!(harness.weight(), 10);
    }
    harness.healthy();
    assert_eq!(harness.weight(), 30, "the pause ended after 5m");
}

#[test]
fn an_untimed_step_pause_waits_for_resume() {
    let body = "  plan: {canary: {steps: [{weight: 10, pause: {}}, {weight: 30}]}}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    for _ in 0..20 {
        harness.healthy();
    }
    assert_eq!(
        (harness.status.phase, harness.weight()),
        (Phase::Progressing, 10)
    );
    assert!(harness.command(Command::Resume).is_ok());
    harness.healthy();
    assert_eq!(harness.weight(), 30);
}

#[test]
fn a_schedule_applies_weights_at_their_times_and_wakes_for_them() {
    let body = "  plan: {schedule: {manual: [{at: '2027-01-15T08:10:00Z', weight: 10}, {at: '2027-01-15T08:20:00Z', weight: 50}, {at: '2027-01-15T08:30:00Z', weight: 100}]}}\n  analysis: {interval: 1h, progressDeadline: 2h}\n";
    let mut harness = Harness::new(spec(body));
    harness.now = "2027-01-15T08:00:00Z".parse().unwrap_or(harness.now);
    let mut observations = Observations::healthy(&harness.spec, Some("v2".into()));
    observations.hooks.clear();
    harness.input(Input::Tick(observations.clone()));
    harness.input(Input::Tick(observations.clone()));
    let wake = harness.last.as_ref().and_then(|t| t.wake_at);
    assert_eq!(
        wake,
        "2027-01-15T08:10:00Z".parse().ok(),
        "wakes at the entry, not after 1h"
    );
    assert_eq!(harness.weight(), 0);
    // Late by 15 minutes: the overdue entries catch up to the latest due one.
    harness.now = "2027-01-15T08:25:00Z".parse().unwrap_or(harness.now);
    harness.input(Input::Tick(observations.clone()));
    assert_eq!(harness.weight(), 50);
    harness.now = "2027-01-15T08:30:00Z".parse().unwrap_or(harness.now);
    harness.input(Input::Tick(observations.clone()));
    assert_eq!(harness.weight(), 100);
    harness.input(Input::Tick(observations));
    assert_eq!(harness.status.phase, Phase::Promoting);
}

#[test]
fn a_schedule_that_stops_short_of_100_waits_for_a_person() {
    let body = "  plan: {schedule: {manual: [{at: '2027-01-15T08:00:00Z', weight: 30}]}}\n";
    let mut harness = Harness::new(spec(body));
    harness.now = "2027-01-15T07:59:00Z".parse().unwrap_or(harness.now);
    harness.healthy();
    harness.healthy();
    assert_eq!(harness.weight(), 30);
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::WaitingPromotion);
    assert!(harness.command(Command::Promote).is_ok());
    assert_eq!(harness.status.phase, Phase::Promoting);
}

// === commands, verdicts, holding ===

#[test]
fn promote_command_promotes_now_and_records_who() {
    let mut harness = Harness::running(CANARY);
    harness.healthy();
    assert!(harness.command(Command::Promote).is_ok());
    assert_eq!(harness.status.phase, Phase::Promoting);
    assert_eq!(
        harness
            .events
            .last()
            .and_then(|e| e.evidence.actor.as_deref()),
        Some("alice")
    );
}

#[test]
fn abort_rolls_back_even_when_failures_would_hold() {
    let body = "  plan: {canary: {stepWeight: 20}}\n  analysis: {onFailure: hold}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    assert!(harness.command(Command::Abort).is_ok());
    assert_eq!((harness.status.phase, harness.weight()), (Phase::Failed, 0));
}

#[test]
fn pause_holds_the_weight_but_failures_still_count() {
    let mut harness = Harness::running(CANARY);
    harness.healthy();
    assert!(harness.command(Command::Pause).is_ok());
    harness.healthy();
    harness.healthy();
    assert_eq!(harness.weight(), 20);
    harness.tick(failing_metric);
    assert_eq!(harness.status.failed_checks, 1);
    assert!(harness.command(Command::Resume).is_ok());
    harness.healthy();
    assert_eq!(harness.weight(), 40);
}

#[test]
fn retry_reruns_a_failed_revision_without_editing_anything() {
    let mut harness = Harness::running(CANARY);
    let _ = harness.command(Command::Abort);
    assert!(harness.command(Command::Retry).is_ok());
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert_eq!(
        (
            harness.status.run,
            harness.status.canary_revision.as_deref()
        ),
        (2, Some("v2"))
    );
    harness.healthy();
    assert_eq!(harness.weight(), 20);
}

#[test]
fn skip_analysis_command_promotes_at_the_next_tick() {
    let mut harness = Harness::running(CANARY);
    harness.healthy();
    assert!(harness.command(Command::SkipAnalysis).is_ok());
    harness.tick(failing_metric);
    assert_eq!(harness.status.phase, Phase::Promoting);
}

#[test]
fn commands_that_do_not_apply_are_rejected_and_change_nothing() {
    let mut harness = Harness::new(spec(CANARY));
    let before = harness.status.clone();
    for command in [
        Command::Promote,
        Command::Abort,
        Command::Pause,
        Command::Resume,
        Command::Retry,
    ] {
        let rejected = harness.command(command.clone());
        assert!(
            rejected.is_err(),
            "{command:?} should be rejected in Initialized"
        );
    }
    assert_eq!(harness.status, before);
}

#[test]
fn a_failing_verdict_rolls_back_between_ticks() {
    let mut harness = Harness::running(CANARY);
    harness.healthy();
    let verdict = JudgeVerdict {
        judge: "sequential".into(),
        outcome: VerdictOutcome::Fail,
        evidence: serde_json::json!({"eValue": 25.0}),
    };
    harness.now = harness
        .now
        .checked_add(std::time::Duration::from_secs(7))
        .unwrap_or(harness.now);
    harness.input(Input::Verdict(verdict));
    assert_eq!((harness.status.phase, harness.weight()), (Phase::Failed, 0));
    assert!(
        harness
            .events
            .last()
            .is_some_and(|e| e.evidence.verdict.is_some())
    );
}

#[test]
fn hold_instead_of_rollback_keeps_the_weight_until_a_person_decides() {
    let body = "  plan: {canary: {stepWeight: 20}}\n  analysis: {onFailure: hold, metrics: [{name: request-success-rate, thresholdRange: {min: 99}}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.tick(failing_metric);
    harness.healthy();
    assert_eq!((harness.status.phase, harness.weight()), (Phase::Held, 20));
    assert!(harness.routes().is_empty(), "holding changes no route");
    for _ in 0..5 {
        harness.healthy();
    }
    assert_eq!(harness.status.phase, Phase::Held);
    assert!(harness.command(Command::Resume).is_ok());
    assert_eq!(
        (harness.status.phase, harness.status.failed_checks),
        (Phase::Progressing, 0)
    );
    harness.healthy();
    assert_eq!(harness.weight(), 40);
}

#[test]
fn a_run_without_progress_fails_at_the_progress_deadline() {
    let body = "  plan: {canary: {stepWeight: 20}}\n  analysis: {noData: hold, progressDeadline: 5m, metrics: [{name: request-success-rate, thresholdRange: {min: 99}}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    for _ in 0..5 {
        harness.tick(|obs| obs.checks.clear());
        assert_eq!(harness.status.phase, Phase::Progressing);
    }
    harness.tick(|obs| obs.checks.clear());
    assert_eq!(harness.status.phase, Phase::Failed);
}

#[test]
fn an_unready_primary_after_promotion_fails_with_traffic_on_the_canary() {
    let body = "  plan: {canary: {stepWeight: 100}}\n  analysis: {progressDeadline: 2m}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Promoting);
    for _ in 0..3 {
        harness.tick(|obs| obs.primary_ready = false);
    }
    assert_eq!(
        (harness.status.phase, harness.weight()),
        (Phase::Failed, 100)
    );
}

#[test]
fn deletion_with_revert_routes_back_and_finalizes() {
    let mut reverting = spec(CANARY);
    reverting.revert_on_deletion = true;
    let mut harness = Harness::new(reverting);
    harness.healthy();
    harness.healthy();
    let transition = harness.input(Input::Deleted).clone();
    assert_eq!(transition.status.phase, Phase::Terminated);
    assert!(transition.effects.contains(&Effect::Finalize));
    assert_eq!(harness.routes()[0].primary_weight, Weight::FULL);
    assert_eq!(transition.wake_at, None);
}

#[test]
fn deletion_without_revert_leaves_routes_alone() {
    let mut harness = Harness::running(CANARY);
    let transition = harness.input(Input::Deleted).clone();
    assert_eq!(transition.status.phase, Phase::Terminated);
    assert!(transition.effects.is_empty());
}

#[test]
fn a_new_revision_input_starts_or_restarts_a_run() {
    let mut harness = Harness::new(spec(CANARY));
    harness.input(Input::NewRevision("v2".into()));
    assert_eq!(harness.status.phase, Phase::Progressing);
    harness.input(Input::NewRevision("v3".into()));
    assert_eq!(
        (harness.status.run, harness.last_reason()),
        (2, Some(EventReason::RunRestarted))
    );
}

// === needs ===

#[test]
fn needs_asks_for_the_hooks_of_the_moment() {
    let body = "  plan: {canary: {stepWeight: 50}}\n  analysis: {webhooks: [{name: a, type: confirm-rollout, url: 'http://g/'}, {name: b, type: pre-rollout, url: 'http://g/'}, {name: c, url: 'http://g/'}, {name: d, type: confirm-traffic-increase, url: 'http://g/'}, {name: e, type: confirm-promotion, url: 'http://g/'}, {name: f, type: rollback, url: 'http://g/'}]}\n";
    let mut harness = Harness::new(spec(body));
    assert_eq!(
        needs(&harness.spec, &harness.status, Some("v1")).hooks,
        vec![]
    );
    assert_eq!(
        needs(&harness.spec, &harness.status, Some("v2")).hooks,
        vec![HookType::ConfirmRollout]
    );
    harness.healthy();
    let first = needs(&harness.spec, &harness.status, Some("v2"));
    assert_eq!(
        first.hooks,
        vec![
            HookType::Rollback,
            HookType::PreRollout,
            HookType::ConfirmTrafficIncrease
        ]
    );
    assert!(!first.metrics);
    harness.healthy();
    harness.healthy();
    let at_max = needs(&harness.spec, &harness.status, Some("v2"));
    assert_eq!(
        at_max.hooks,
        vec![
            HookType::Rollback,
            HookType::Rollout,
            HookType::ConfirmPromotion
        ]
    );
    assert!(at_max.metrics);
}

#[test]
fn post_rollout_hooks_and_notifications_carry_delivery_ids() {
    let body = "  plan: {canary: {stepWeight: 100}}\n  analysis: {webhooks: [{name: done, type: post-rollout, url: 'http://g/'}]}\n";
    let mut harness = Harness::running(body);
    for _ in 0..4 {
        harness.healthy();
    }
    assert_eq!(harness.status.phase, Phase::Succeeded);
    let ids: Vec<&str> = harness
        .effects()
        .iter()
        .filter_map(|effect| match effect {
            Effect::RunHooks {
                hook_type: HookType::PostRollout,
                delivery_id,
                ..
            } => Some(delivery_id.as_str()),
            Effect::Notify(notification) => Some(notification.delivery_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.iter().all(|id| id.starts_with("run-1/")));
    assert_ne!(ids[0], ids[1]);
}

#[test]
fn step_is_deterministic() {
    let spec = spec(CANARY);
    let status = RolloutStatus {
        phase: Phase::Progressing,
        run: 1,
        canary_revision: Some("v2".into()),
        primary_revision: Some("v1".into()),
        pre_rollout_passed: true,
        last_progress_at: Some(at(0)),
        ..RolloutStatus::default()
    };
    let input = Input::Tick(Observations::healthy(&spec, Some("v2".into())));
    let first = step(&spec, &status, &input, at(60));
    let second = step(&spec, &status, &input, at(60));
    assert_eq!(first, second);
    assert!(first.is_ok_and(|t| t.status.canary_weight == Weight::from_percent(20)));
}

#[test]
fn hook_results_for_unknown_hooks_are_ignored() {
    let body = "  plan: {canary: {stepWeight: 50}}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.tick(|obs| {
        obs.hooks.push(HookResult {
            name: "stranger".into(),
            hook_type: HookType::Rollback,
            success: true,
            message: String::new(),
        });
    });
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert_eq!(harness.weight(), 100);
}

#[test]
fn a_finished_schedule_with_an_unready_canary_fails_at_the_deadline() {
    // Found by the property test: with every entry applied, nothing exempted the run from the
    // progress deadline any more, but the stall check still treated it as waiting for an entry.
    let body = "  plan: {schedule: {manual: [{at: '2027-01-15T08:00:00Z', weight: 100}]}}\n  analysis: {interval: 1m, progressDeadline: 3m}\n";
    let mut harness = Harness::new(spec(body));
    harness.now = "2027-01-15T07:59:00Z".parse().unwrap_or(harness.now);
    harness.healthy();
    harness.healthy();
    assert_eq!(harness.weight(), 100);
    for _ in 0..4 {
        harness.tick(|obs| obs.canary_ready = false);
    }
    assert_eq!(harness.status.phase, Phase::Failed);
}

// === gates opened or closed by a person ===

fn open_gate(hook_type: Option<HookType>, hook: Option<&str>) -> Command {
    Command::OpenGate(GateRef {
        hook_type,
        hook: hook.map(String::from),
    })
}

fn close_gate(hook_type: Option<HookType>, hook: Option<&str>) -> Command {
    Command::CloseGate(GateRef {
        hook_type,
        hook: hook.map(String::from),
    })
}

fn notifications(transition: &Transition) -> Vec<&Notification> {
    transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Notify(notification) => Some(notification),
            _ => None,
        })
        .collect()
}

const GATED: &str = "  plan: {canary: {stepWeight: 50}}\n  analysis: {webhooks: [{name: approve, type: confirm-rollout, url: 'http://gate/'}, {name: more, type: confirm-traffic-increase, url: 'http://gate/'}, {name: ship, type: confirm-promotion, url: 'http://gate/'}]}\n";

#[test]
fn a_person_opening_the_confirm_rollout_gate_starts_the_run() {
    let mut harness = Harness::new(spec(GATED));
    harness.tick(|obs| hook(obs, "approve", false));
    assert_eq!(harness.status.phase, Phase::Waiting);
    let opened = harness
        .command(open_gate(Some(HookType::ConfirmRollout), None))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    assert_eq!(harness.last_reason(), Some(EventReason::GateOpened));
    // The run waits at exactly this gate: the engine is asked for a tick at once.
    assert_eq!(opened.wake_at, Some(harness.now));
    // The hook still says no; the person's yes wins.
    harness.input(Input::Tick({
        let mut observations = Observations::healthy(&harness.spec, Some("v2".into()));
        hook(&mut observations, "approve", false);
        observations
    }));
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert!(harness.effects().contains(&Effect::ScaleCanary(Scale::Up)));
    let started = harness.events.last().map(|event| event.evidence.clone());
    assert_eq!(
        started
            .as_ref()
            .and_then(|evidence| evidence.actor.as_deref()),
        Some("alice")
    );
    assert_eq!(
        started.map(|evidence| evidence.hooks[0].message.clone()),
        Some("opened by alice".into())
    );
}

#[test]
fn a_person_opening_the_confirm_traffic_increase_gate_lets_the_weight_move() {
    let mut harness = Harness::running(GATED);
    harness.healthy();
    assert_eq!(harness.weight(), 50);
    harness.tick(|obs| hook(obs, "more", false));
    assert_eq!(harness.weight(), 50);
    assert_eq!(harness.last_reason(), Some(EventReason::GateClosed));
    // By name; the type follows from the hook.
    let opened = harness
        .command(open_gate(None, Some("more")))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    // Mid-plan, the weight moves at the next regular tick (a step keeps its whole interval).
    assert_eq!(
        opened.wake_at,
        harness.now.checked_add(SignedDuration::from_mins(1)).ok()
    );
    assert_eq!(harness.status.gates.len(), 1);
    harness.tick(|obs| hook(obs, "more", false));
    assert_eq!(harness.weight(), 100);
    let Some(advanced) = harness.events.last() else {
        panic!("no event");
    };
    assert_eq!(advanced.reason, EventReason::Advanced);
    assert_eq!(
        advanced.evidence.actor.as_deref(),
        Some("alice"),
        "{advanced:?}"
    );
}

#[test]
fn a_gate_closed_by_a_person_stays_closed_despite_a_yes() {
    let mut harness = Harness::running(GATED);
    harness
        .command(close_gate(Some(HookType::ConfirmPromotion), Some("ship")))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    assert_eq!(harness.last_reason(), Some(EventReason::GateShut));
    for _ in 0..4 {
        // Every hook answers yes.
        harness.healthy();
    }
    assert_eq!(
        (harness.status.phase, harness.weight()),
        (Phase::WaitingPromotion, 100)
    );
    // The person's no needs no call to the hook.
    assert!(
        !needs(&harness.spec, &harness.status, Some("v2"))
            .hooks
            .contains(&HookType::ConfirmPromotion)
    );
    // No alert: the person knows why it is closed.
    assert!(
        !harness
            .effects()
            .iter()
            .any(|effect| matches!(effect, Effect::Notify(_)))
    );
    let opened = harness
        .command(open_gate(Some(HookType::ConfirmPromotion), None))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    assert_eq!(opened.wake_at, Some(harness.now));
    harness.tick(|obs| hook(obs, "ship", false));
    assert_eq!(harness.status.phase, Phase::Promoting);
    assert_eq!(
        harness
            .events
            .last()
            .and_then(|event| event.evidence.actor.clone())
            .as_deref(),
        Some("alice"),
        "the promotion records who opened the gate"
    );
}

#[test]
fn a_person_can_hold_a_gate_no_hook_guards_without_the_run_counting_as_stalled() {
    let body =
        "  plan: {canary: {stepWeight: 25}}\n  analysis: {interval: 1m, progressDeadline: 2m}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    assert_eq!(harness.weight(), 25);
    harness
        .command(close_gate(Some(HookType::ConfirmTrafficIncrease), None))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    for _ in 0..6 {
        harness.healthy();
        assert_eq!(
            (harness.status.phase, harness.weight()),
            (Phase::Progressing, 25),
            "a person holding the weight is not a stall"
        );
    }
    harness
        .command(open_gate(Some(HookType::ConfirmTrafficIncrease), None))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    harness.healthy();
    assert_eq!(
        (harness.status.phase, harness.weight()),
        (Phase::Progressing, 50),
        "opening the gate counts as progress"
    );
}

#[test]
fn gate_decisions_reset_when_a_new_run_starts() {
    let mut harness = Harness::running(GATED);
    harness
        .command(open_gate(Some(HookType::ConfirmPromotion), None))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    assert_eq!(harness.status.gates.len(), 1);
    harness.tick(|obs| obs.canary_revision = Some("v3".into()));
    assert_eq!(harness.status.run, 2);
    assert!(harness.status.gates.is_empty());
    let v3 = |obs: &mut Observations| {
        obs.canary_revision = Some("v3".into());
        hook(obs, "ship", false);
    };
    harness.tick(v3);
    harness.tick(v3);
    harness.tick(v3);
    assert_eq!(harness.status.phase, Phase::WaitingPromotion);
}

#[test]
fn who_opened_or_closed_a_gate_is_recorded_in_the_history() {
    let mut harness = Harness::running(GATED);
    harness
        .command(close_gate(None, Some("more")))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    let input = Input::Command(CommandInput {
        command: open_gate(None, Some("more")),
        actor: "bob".into(),
    });
    harness.input(input);
    let decisions: Vec<(EventReason, Option<String>, String)> = harness
        .events
        .iter()
        .filter(|event| {
            matches!(
                event.reason,
                EventReason::GateOpened | EventReason::GateShut
            )
        })
        .map(|event| {
            (
                event.reason,
                event.evidence.actor.clone(),
                event.message.clone(),
            )
        })
        .collect();
    assert_eq!(decisions.len(), 2);
    assert_eq!(
        (decisions[0].0, decisions[0].1.as_deref()),
        (EventReason::GateShut, Some("alice"))
    );
    assert_eq!(
        (decisions[1].0, decisions[1].1.as_deref()),
        (EventReason::GateOpened, Some("bob"))
    );
    assert!(
        decisions[1]
            .2
            .contains("bob opened the confirm-traffic-increase gate more for run 1"),
        "{}",
        decisions[1].2
    );
    // The latest decision about a hook replaces the earlier one.
    assert_eq!(harness.status.gates.len(), 1);
    assert!(harness.status.gates[0].open);
}

#[test]
fn gate_commands_that_name_no_gate_or_come_at_the_wrong_time_are_rejected() {
    let mut harness = Harness::new(spec(GATED));
    let idle = harness.command(open_gate(Some(HookType::ConfirmPromotion), None));
    assert!(
        idle.as_ref()
            .is_err_and(|rejected| rejected.reason.contains("no run is under way")),
        "{idle:?}"
    );
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Progressing);
    let before = harness.status.clone();
    for (command, expected) in [
        (open_gate(None, Some("nope")), "no webhook named \"nope\""),
        (
            open_gate(Some(HookType::Rollout), None),
            "rollout is not a gate",
        ),
        (
            open_gate(Some(HookType::ConfirmPromotion), Some("more")),
            "is a confirm-traffic-increase gate, not confirm-promotion",
        ),
        (open_gate(None, None), "name the gate"),
        (
            open_gate(Some(HookType::ConfirmRollout), None),
            "this run has started",
        ),
    ] {
        let result = harness.command(command);
        assert!(
            result
                .as_ref()
                .is_err_and(|rejected| rejected.reason.contains(expected)),
            "{expected}: {result:?}"
        );
        assert_eq!(harness.status, before, "a rejected command changes nothing");
    }
    let rejected = harness
        .command(open_gate(None, Some("nope")))
        .err()
        .map(|rejected| rejected.to_string())
        .unwrap_or_default();
    assert!(
        rejected.contains(
            "approve (confirm-rollout), more (confirm-traffic-increase), ship (confirm-promotion)"
        ),
        "the refusal lists the gates: {rejected}"
    );
}

// === alerts ===

#[test]
fn a_failing_rollout_hook_alerts_once_per_run_with_its_result() {
    let body = "  plan: {canary: {stepWeight: 10}}\n  analysis: {threshold: 9, webhooks: [{name: load, url: 'http://t/'}, {name: quiet, url: 'http://t/', muteAlert: true}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    let first = harness
        .tick(|obs| {
            hook(obs, "load", false);
            hook(obs, "quiet", false);
            for result in &mut obs.hooks {
                result.message = "500 Internal Server Error boom".into();
            }
        })
        .clone();
    let alerts = notifications(&first);
    assert_eq!(alerts.len(), 1, "muteAlert silences quiet: {alerts:?}");
    assert_eq!(alerts[0].severity, Severity::Warn);
    assert!(
        alerts[0]
            .message
            .contains("rollout webhook load failed: 500 Internal Server Error boom"),
        "{}",
        alerts[0].message
    );
    assert_eq!(alerts[0].evidence.hooks.len(), 1);
    assert_eq!(alerts[0].evidence.hooks[0].name, "load");
    assert!(!alerts[0].evidence.hooks[0].success);
    assert!(alerts[0].delivery_id.ends_with("/alert/load"));
    // The same failure next tick is not alerted again.
    let second = harness.tick(|obs| hook(obs, "load", false)).clone();
    assert!(notifications(&second).is_empty());
    assert_eq!(harness.status.failed_checks, 2);
    // A new run alerts again.
    harness.tick(|obs| obs.canary_revision = Some("v3".into()));
    assert!(harness.status.alerted_hooks.is_empty());
}

#[test]
fn a_failing_pre_rollout_hook_alerts() {
    let body = "  plan: {canary: {stepWeight: 50}}\n  analysis: {threshold: 3, webhooks: [{name: smoke, type: pre-rollout, url: 'http://t/'}]}\n";
    let mut harness = Harness::running(body);
    let transition = harness.tick(|obs| obs.hooks.clear()).clone();
    let alerts = notifications(&transition);
    assert_eq!(alerts.len(), 1);
    assert!(
        alerts[0]
            .message
            .contains("pre-rollout webhook smoke failed: no result"),
        "{}",
        alerts[0].message
    );
    assert_eq!(alerts[0].evidence.hooks[0].hook_type, HookType::PreRollout);
}

#[test]
fn a_closed_gate_alerts_the_first_time_in_a_run_unless_muted() {
    let body = "  plan: {canary: {stepWeight: 50}}\n  analysis: {webhooks: [{name: more, type: confirm-traffic-increase, url: 'http://g/'}, {name: ship, type: confirm-promotion, url: 'http://g/', muteAlert: true}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    let closed = harness.tick(|obs| hook(obs, "more", false)).clone();
    let alerts = notifications(&closed);
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].severity, Severity::Warn);
    assert!(
        alerts[0]
            .message
            .contains("confirm-traffic-increase gate more answered no"),
        "{}",
        alerts[0].message
    );
    assert_eq!(alerts[0].evidence.hooks[0].name, "more");
    let still = harness.tick(|obs| hook(obs, "more", false)).clone();
    assert!(notifications(&still).is_empty(), "once per run");
    harness.healthy();
    assert_eq!(harness.weight(), 100);
    let waiting = harness.tick(|obs| hook(obs, "ship", false)).clone();
    assert_eq!(harness.status.phase, Phase::WaitingPromotion);
    assert!(notifications(&waiting).is_empty(), "muteAlert: true");
}

#[test]
fn a_closed_confirm_rollout_gate_alerts_once() {
    let body = "  plan: {canary: {stepWeight: 50}}\n  analysis: {webhooks: [{name: approve, type: confirm-rollout, url: 'http://gate/'}]}\n";
    let mut harness = Harness::new(spec(body));
    let waiting = harness.tick(|obs| hook(obs, "approve", false)).clone();
    let alerts = notifications(&waiting);
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].phase, Phase::Waiting);
    assert!(alerts[0].message.contains("revision v2 waits for approval"));
    let again = harness.tick(|obs| hook(obs, "approve", false)).clone();
    assert!(notifications(&again).is_empty());
}

#[test]
fn progress_deadline_failures_notify_at_error_naming_the_deadline() {
    // No progress (no data held).
    let body = "  plan: {canary: {stepWeight: 20}}\n  analysis: {noData: hold, progressDeadline: 5m, metrics: [{name: request-success-rate, thresholdRange: {min: 99}}]}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    let mut last = None;
    for _ in 0..6 {
        last = Some(harness.tick(|obs| obs.checks.clear()).clone());
    }
    assert_eq!(harness.status.phase, Phase::Failed);
    let failed = last.unwrap_or_else(|| panic!("no transition"));
    let alerts = notifications(&failed);
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].severity, Severity::Error);
    assert!(
        alerts[0]
            .message
            .contains("no progress for longer than the progress deadline (5m)"),
        "{}",
        alerts[0].message
    );

    // A canary that never becomes ready.
    let body =
        "  plan: {canary: {stepWeight: 10}}\n  analysis: {interval: 1m, progressDeadline: 3m}\n";
    let mut harness = Harness::running(body);
    let mut last = None;
    for _ in 0..4 {
        last = Some(harness.tick(|obs| obs.canary_ready = false).clone());
    }
    assert_eq!(harness.status.phase, Phase::Failed);
    let failed = last.unwrap_or_else(|| panic!("no transition"));
    let alerts = notifications(&failed);
    assert_eq!(alerts[0].severity, Severity::Error);
    assert!(
        alerts[0]
            .message
            .contains("did not become ready within the progress deadline (3m)"),
        "{}",
        alerts[0].message
    );

    // A promoted primary that never becomes ready.
    let body = "  plan: {canary: {stepWeight: 100}}\n  analysis: {progressDeadline: 2m}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    harness.healthy();
    let mut last = None;
    for _ in 0..3 {
        last = Some(harness.tick(|obs| obs.primary_ready = false).clone());
    }
    assert_eq!(harness.status.phase, Phase::Failed);
    let failed = last.unwrap_or_else(|| panic!("no transition"));
    let alerts = notifications(&failed);
    assert_eq!(alerts[0].severity, Severity::Error);
    assert!(
        alerts[0]
            .message
            .contains("promoted primary did not become ready within the progress deadline (2m)"),
        "{}",
        alerts[0].message
    );
}

// === event hooks ===

#[test]
fn event_hooks_hear_of_every_event_with_its_message_and_type() {
    let body = "  plan: {canary: {stepWeight: 50}}\n  analysis: {threshold: 5, metrics: [{name: request-success-rate, thresholdRange: {min: 99}}], webhooks: [{name: feed, type: event, url: 'http://e/'}]}\n";
    let mut harness = Harness::running(body);
    let event_hooks = |transition: &Transition| -> Vec<(String, Event)> {
        transition
            .effects
            .iter()
            .filter_map(|effect| match effect {
                Effect::RunHooks {
                    hook_type: HookType::Event,
                    delivery_id,
                    event: Some(event),
                } => Some((delivery_id.clone(), (**event).clone())),
                _ => None,
            })
            .collect()
    };
    let advanced = harness.healthy().clone();
    let calls = event_hooks(&advanced);
    // One call per event, each with that event and its own delivery id.
    assert_eq!(calls.len(), advanced.events.len());
    for ((_, heard), recorded) in calls.iter().zip(&advanced.events) {
        assert_eq!(heard, recorded);
    }
    assert!(!calls[0].1.reason.is_warning());
    let failed = harness.tick(failing_metric).clone();
    let calls = event_hooks(&failed);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1.reason, EventReason::ChecksFailed);
    assert!(calls[0].1.reason.is_warning());
    let mut ids: Vec<String> = event_hooks(&advanced)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    ids.extend(calls.iter().map(|(id, _)| id.clone()));
    let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "delivery ids are unique: {ids:?}");
    // A tick that records nothing calls nothing.
    harness.tick(|obs| obs.canary_ready = false);
    let quiet = harness.tick(|obs| obs.canary_ready = false).clone();
    assert!(quiet.events.is_empty());
    assert!(event_hooks(&quiet).is_empty());
}

#[test]
fn old_statuses_without_gate_fields_still_load() {
    let json = r#"{"phase":"Progressing","run":1,"canaryWeight":2000,"preRolloutPassed":true}"#;
    let status: RolloutStatus =
        serde_json::from_str(json).unwrap_or_else(|error| panic!("{error}"));
    assert!(status.gates.is_empty() && status.alerted_hooks.is_empty());
    let written = serde_json::to_string(&status).unwrap_or_default();
    assert!(!written.contains("gates") && !written.contains("alertedHooks"));
}

#[test]
fn a_step_taken_on_passing_checks_records_them_as_its_evidence() {
    let mut harness = Harness::running(CANARY);
    harness.healthy(); // the first step: no metrics evaluated yet
    harness.tick(|observations| {
        observations.checks[0].value = Some(99.7);
        observations.checks[0].message = "prometheus: 99.7".into();
    });
    assert_eq!(harness.last_reason(), Some(EventReason::Advanced));
    let Some(event) = harness.events.last() else {
        panic!("no event");
    };
    assert_eq!(event.evidence.checks.len(), 1, "{event:?}");
    assert_eq!(event.evidence.checks[0].value, Some(99.7));
    assert_eq!(event.evidence.checks[0].outcome, CheckOutcome::Pass);
}

#[test]
fn phase_all_lists_every_phase_once_in_order() {
    // Exhaustive on purpose: a new phase does not compile here until it is placed in the list.
    let position = |phase: Phase| match phase {
        Phase::Initializing => 0,
        Phase::Initialized => 1,
        Phase::Waiting => 2,
        Phase::Progressing => 3,
        Phase::WaitingPromotion => 4,
        Phase::Promoting => 5,
        Phase::Finalising => 6,
        Phase::Succeeded => 7,
        Phase::Failed => 8,
        Phase::Held => 9,
        Phase::Terminated => 10,
    };
    for (index, phase) in Phase::ALL.iter().enumerate() {
        assert_eq!(position(*phase), index, "{phase:?}");
    }
}
