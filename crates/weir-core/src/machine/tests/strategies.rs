//! Blue/green, A/B testing, mirroring, step pauses and schedules.

use super::*;

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
