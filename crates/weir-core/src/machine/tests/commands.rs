//! Commands, verdicts, holding, deletion, and which hooks a tick needs.

use super::*;

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
    let message = &harness.events.last().map(|e| e.message.clone());
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("promoted by alice to the end")),
        "{message:?}"
    );
}

// === promote one step ===

fn promote_step(harness: &mut Harness) -> Transition {
    match harness.command(Command::PromoteStep) {
        Ok(transition) => transition,
        Err(rejected) => panic!("one step refused: {rejected}"),
    }
}

fn refused_step(harness: &mut Harness) -> CommandRejected {
    match harness.command(Command::PromoteStep) {
        Ok(transition) => panic!("one step accepted: {transition:?}"),
        Err(rejected) => rejected,
    }
}

fn last_message(harness: &Harness) -> String {
    harness
        .events
        .last()
        .map(|event| event.message.clone())
        .unwrap_or_default()
}

#[test]
fn promote_step_takes_the_next_step_now_and_the_history_says_so() {
    let mut harness = Harness::running(CANARY);
    harness.healthy();
    assert_eq!(harness.weight(), 20);
    let transition = promote_step(&mut harness);
    assert_eq!(
        (
            harness.status.phase,
            harness.weight(),
            harness.status.steps_taken
        ),
        (Phase::Progressing, 40, 2)
    );
    // The route moves in the same transition.
    assert!(transition.effects.iter().any(|effect| matches!(
        effect,
        Effect::SetRoute(route) if route.canary_weight.basis_points() == 4000
    )));
    let message = last_message(&harness);
    assert!(
        message.contains("promoted one step by alice to 40%: step 2 of 3"),
        "{message}"
    );
    assert_eq!(harness.last_reason(), Some(EventReason::Advanced));
    assert_eq!(
        harness
            .events
            .last()
            .and_then(|e| e.evidence.actor.as_deref()),
        Some("alice")
    );
    // The plan goes on from there by itself.
    harness.healthy();
    assert_eq!(harness.weight(), 60);
}

#[test]
fn promote_step_passes_a_pause_and_keeps_the_next_steps_own() {
    let body = "  plan: {canary: {steps: [{weight: 10, pause: {}}, {weight: 30}, {weight: 50, pause: {}}]}}
  analysis: {interval: 1m}
";
    let mut harness = Harness::running(body);
    harness.healthy();
    assert_eq!(harness.weight(), 10);
    assert!(harness.status.waiting_for_resume);
    promote_step(&mut harness);
    assert_eq!(harness.weight(), 30);
    assert!(!harness.status.waiting_for_resume);
    promote_step(&mut harness);
    assert_eq!(harness.weight(), 50);
    // The step taken has a pause of its own: it applies.
    assert!(harness.status.waiting_for_resume);
    assert!(
        last_message(&harness).contains("paused until"),
        "{}",
        last_message(&harness)
    );
    // No step left: one more step promotes, and says it went to the end.
    promote_step(&mut harness);
    assert_eq!(harness.status.phase, Phase::Promoting);
    let message = last_message(&harness);
    assert!(
        message.contains("promoted by alice to the end"),
        "{message}"
    );
}

#[test]
fn promote_step_takes_the_next_schedule_entry_ahead_of_its_time() {
    let body = "  plan: {schedule: {manual: [{at: '2027-01-15T08:10:00Z', weight: 10}, {at: '2027-01-15T08:20:00Z', weight: 50}, {at: '2027-01-15T08:30:00Z', weight: 100}]}}\n  analysis: {interval: 1m, progressDeadline: 2h}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    assert_eq!(harness.weight(), 0);
    promote_step(&mut harness);
    assert_eq!((harness.weight(), harness.status.steps_taken), (10, 1));
    assert_eq!(harness.status.triggered.len(), 1);
    assert_eq!(harness.status.triggered[0].triggered_at, harness.now);
    let message = last_message(&harness);
    assert!(
        message.contains("promoted one step by alice to 10%: entry 1 of 3"),
        "{message}"
    );
    // The entry is not taken twice when its time comes.
    harness.healthy();
    assert_eq!((harness.weight(), harness.status.triggered.len()), (10, 1));
}

#[test]
fn promote_step_is_refused_where_no_run_moves_along_steps() {
    let mut harness = Harness::new(spec(CANARY));
    let rejected = refused_step(&mut harness);
    assert_eq!(rejected.command, "promote one step");
    assert_eq!(rejected.phase, Phase::Initialized);
    let mut harness = Harness::running("  plan: {blueGreen: {iterations: 2}}\n");
    let before = harness.status.clone();
    let rejected = refused_step(&mut harness);
    assert!(
        rejected.reason.contains("iterations"),
        "{}",
        rejected.reason
    );
    assert_eq!(harness.status, before);
    // The API and the command line name it `promote` (with `step`).
    assert_eq!(Command::PromoteStep.as_str(), "promote");
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
fn a_second_pause_is_refused_and_changes_nothing() {
    let mut harness = Harness::running(CANARY);
    harness.healthy();
    assert!(harness.command(Command::Pause).is_ok());
    let before = harness.status.clone();
    let events = harness.events.len();
    let rejected = harness.command(Command::Pause);
    match rejected {
        Err(rejected) => assert!(
            rejected.reason.contains("already paused"),
            "{}",
            rejected.reason
        ),
        Ok(transition) => panic!("a second pause was accepted: {transition:?}"),
    }
    assert_eq!((&harness.status, harness.events.len()), (&before, events));
    assert!(harness.command(Command::Resume).is_ok());
}

/// The engine answers an accepted command with the version it committed: every command the
/// machine accepts must change the status or record something, also when given twice.
#[test]
fn every_command_given_twice_is_refused_or_changes_something() {
    for command in [
        Command::Pause,
        Command::Resume,
        Command::Promote,
        Command::PromoteStep,
        Command::Abort,
        Command::Retry,
        Command::SkipAnalysis,
        Command::Stop { rollback: true },
        Command::Stop { rollback: false },
        open_gate(Some(HookType::ConfirmPromotion), None),
        close_gate(Some(HookType::ConfirmPromotion), None),
    ] {
        let mut harness = Harness::running(CANARY);
        harness.healthy();
        for attempt in 1..=2 {
            let before = harness.status.clone();
            if let Ok(transition) = harness.command(command.clone()) {
                assert!(
                    transition.status != before
                        || !transition.events.is_empty()
                        || !transition.effects.is_empty(),
                    "{command:?} (attempt {attempt}) was accepted and changed nothing"
                );
            }
        }
    }
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
fn a_permanent_target_failure_rolls_a_run_back_even_with_hold_and_is_only_noted_otherwise() {
    let body = "  plan: {canary: {stepWeight: 20}}\n  analysis: {onFailure: hold}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    assert_eq!(harness.weight(), 20);
    harness.input(Input::TargetFailed("no such program: ./app".into()));
    assert_eq!((harness.status.phase, harness.weight()), (Phase::Failed, 0));
    assert_eq!(harness.last_reason(), Some(EventReason::RolledBack));
    assert!(
        harness
            .status
            .message
            .contains("retrying cannot help: no such program: ./app"),
        "{}",
        harness.status.message
    );
    // After the run: recorded, nothing moves.
    let before = harness.status.clone();
    harness.input(Input::TargetFailed("still missing".into()));
    assert_eq!(harness.status.phase, before.phase);
    assert_eq!(harness.last_reason(), Some(EventReason::Target));
    assert!(harness.routes().is_empty());
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
