//! Set-up, the start of a run and its analysis ticks.

use super::*;

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

/// A harness whose primary is not ready at set-up (the first tick sees it unavailable).
fn setting_up(body: &str) -> Harness {
    let mut harness = Harness {
        spec: spec(body),
        status: RolloutStatus::default(),
        now: at(0),
        last: None,
        events: Vec::new(),
    };
    harness.input(Input::Tick(unready_primary()));
    harness
}

fn unready_primary() -> Observations {
    let mut observations = Observations::ready(Some("v1".into()));
    observations.primary_revision = Some("v1".into());
    observations.primary_ready = false;
    observations
}

#[test]
fn set_up_prepares_the_primary_and_routes_nothing_until_it_is_ready() {
    let mut harness = setting_up(CANARY);
    assert_eq!(harness.status.phase, Phase::Initializing);
    assert_eq!(harness.effects(), &[Effect::Prepare]);
    assert_eq!(harness.last_reason(), Some(EventReason::WaitingForPrimary));
    // While it is not ready: nothing routed, nothing scaled down, nothing recorded again.
    for _ in 0..3 {
        harness.now = harness
            .now
            .checked_add(SignedDuration::from_secs(60))
            .unwrap_or(harness.now);
        let transition = harness.input(Input::Tick(unready_primary()));
        assert!(transition.effects.is_empty(), "{:?}", transition.effects);
        assert!(transition.events.is_empty());
        assert_eq!(transition.status.phase, Phase::Initializing);
    }
    harness.now = harness
        .now
        .checked_add(SignedDuration::from_secs(60))
        .unwrap_or(harness.now);
    let mut ready = unready_primary();
    ready.primary_ready = true;
    harness.input(Input::Tick(ready));
    assert_eq!(harness.status.phase, Phase::Initialized);
    assert_eq!(harness.routes().len(), 1);
    assert_eq!(harness.routes()[0].primary_weight, Weight::FULL);
    let position = |wanted: &Effect| harness.effects().iter().position(|effect| effect == wanted);
    assert!(
        position(&Effect::SetRoute(harness.routes()[0].clone()))
            < position(&Effect::ScaleCanary(Scale::Down)),
        "the route moves before the target is scaled down: {:?}",
        harness.effects()
    );
}

#[test]
fn set_up_fails_at_the_progress_deadline_and_completes_once_the_primary_is_ready() {
    let body = "  plan: {canary: {stepWeight: 20}}
  analysis: {interval: 1m, progressDeadline: 5m}
";
    let mut harness = setting_up(body);
    harness.now = at(5 * 60);
    harness.input(Input::Tick(unready_primary()));
    assert_eq!(
        harness.status.phase,
        Phase::Initializing,
        "at the deadline, still waiting"
    );
    harness.now = at(5 * 60 + 1);
    let transition = harness.input(Input::Tick(unready_primary())).clone();
    assert_eq!(transition.status.phase, Phase::Failed);
    assert_eq!(transition.status.run, 0);
    assert_eq!(transition.status.stopped_by, Some(StoppedBy::Deadline));
    assert!(transition.status.setup_failed() && !transition.status.is_set_up());
    assert_eq!(harness.last_reason(), Some(EventReason::SetupFailed));
    assert!(
        harness.status.message.contains("progress deadline (5m)"),
        "{}",
        harness.status.message
    );
    assert!(
        transition
            .effects
            .iter()
            .all(|effect| matches!(effect, Effect::Notify(_)))
    );
    assert_eq!(notifications(&transition).len(), 1);
    // A new revision starts no run while set-up has failed.
    harness.input(Input::NewRevision("v2".into()));
    harness.now = at(6 * 60);
    let mut v2 = unready_primary();
    v2.canary_revision = Some("v2".into());
    let transition = harness.input(Input::Tick(v2.clone()));
    assert_eq!(transition.status.phase, Phase::Failed);
    assert!(transition.effects.is_empty() && transition.events.is_empty());
    // The primary became ready after all: set-up completes, and the next tick starts the run.
    v2.primary_ready = true;
    harness.now = at(7 * 60);
    harness.input(Input::Tick(v2.clone()));
    assert_eq!(harness.status.phase, Phase::Initialized);
    assert_eq!(harness.status.stopped_by, None);
    assert_eq!(harness.last_reason(), Some(EventReason::Initialized));
    harness.now = at(8 * 60);
    harness.input(Input::Tick(v2));
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert_eq!(harness.status.run, 1);
}

#[test]
fn retry_after_a_failed_set_up_prepares_the_primary_and_waits_again() {
    let body = "  plan: {canary: {stepWeight: 20}}
  analysis: {interval: 1m, progressDeadline: 2m}
";
    let mut harness = setting_up(body);
    harness.now = at(3 * 60);
    harness.input(Input::Tick(unready_primary()));
    assert!(harness.status.setup_failed());
    let transition = harness
        .command(Command::Retry)
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    assert_eq!(transition.status.phase, Phase::Initializing);
    assert_eq!(transition.effects, vec![Effect::Prepare]);
    assert_eq!(transition.status.last_progress_at, Some(at(3 * 60)));
    // The deadline counts again from the retry.
    harness.now = at(4 * 60);
    harness.input(Input::Tick(unready_primary()));
    assert_eq!(harness.status.phase, Phase::Initializing);
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
