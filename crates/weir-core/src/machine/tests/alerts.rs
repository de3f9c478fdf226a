//! Alerts and event hooks.

use super::*;

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
        Phase::Stopped => 10,
        Phase::Terminated => 11,
    };
    for (index, phase) in Phase::ALL.iter().enumerate() {
        assert_eq!(position(*phase), index, "{phase:?}");
    }
}
