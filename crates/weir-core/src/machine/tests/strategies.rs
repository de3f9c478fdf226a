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

const THREE_ENTRIES: &str = "  plan: {schedule: {manual: [{at: '2027-01-15T08:10:00Z', weight: 10}, {at: '2027-01-15T08:20:00Z', weight: 50}, {at: '2027-01-15T08:30:00Z', weight: 100}]}}\n  analysis: {interval: 1h, progressDeadline: 2h}\n";

/// A schedule harness at `time` with its run started and no entry due yet.
fn schedule_at(time: &str) -> (Harness, Observations) {
    let mut harness = Harness::new(spec(THREE_ENTRIES));
    harness.now = time.parse().unwrap_or(harness.now);
    let mut observations = Observations::healthy(&harness.spec, Some("v2".into()));
    observations.hooks.clear();
    harness.input(Input::Tick(observations.clone()));
    (harness, observations)
}

fn set_now(harness: &mut Harness, time: &str) {
    harness.now = time.parse().unwrap_or(harness.now);
}

#[test]
fn each_entry_records_when_it_fired_and_late_entries_say_by_how_much() {
    let (mut harness, observations) = schedule_at("2027-01-15T08:00:00Z");
    assert_eq!(harness.status.schedule_state, Some(ScheduleState::Waiting));
    assert!(harness.status.triggered.is_empty());
    set_now(&mut harness, "2027-01-15T08:10:00Z");
    harness.input(Input::Tick(observations.clone()));
    assert_eq!(harness.status.schedule_state, Some(ScheduleState::Running));
    assert_eq!(harness.status.triggered.len(), 1);
    assert_eq!(harness.status.triggered[0].lateness().as_secs(), 0);
    let on_time = harness
        .events
        .last()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    assert!(!on_time.contains("late"), "{on_time}");
    // Down from 08:15 to 08:35: entries 2 and 3 fire together at the latest weight.
    set_now(&mut harness, "2027-01-15T08:35:00Z");
    harness.input(Input::Tick(observations.clone()));
    assert_eq!(harness.weight(), 100);
    let fired: Vec<(u32, i64)> = harness
        .status
        .triggered
        .iter()
        .map(|entry| {
            (
                entry.weight.basis_points() / 100,
                entry.lateness().as_secs(),
            )
        })
        .collect();
    assert_eq!(fired, vec![(10, 0), (50, 15 * 60), (100, 5 * 60)]);
    let message = harness
        .events
        .last()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("overdue entries applied at once"),
        "{message}"
    );
    assert!(
        message.contains("15m late") && message.contains("5m late"),
        "{message}"
    );
    assert_eq!(harness.status.schedule_state, Some(ScheduleState::Finished));
}

#[test]
fn stop_leaves_the_weights_and_stop_with_rollback_returns_everyone() {
    let (mut harness, observations) = schedule_at("2027-01-15T08:10:00Z");
    harness.input(Input::Tick(observations.clone()));
    assert_eq!(harness.weight(), 10);
    let stopped = match harness.command(Command::Stop { rollback: false }) {
        Ok(transition) => transition,
        Err(rejected) => panic!("stop refused: {rejected}"),
    };
    let routes: Vec<u32> = stopped
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::SetRoute(route) => Some(route.canary_weight.basis_points() / 100),
            _ => None,
        })
        .collect();
    assert_eq!(routes, vec![10], "a stop keeps the route as it was");
    assert_eq!(
        (
            harness.status.phase,
            harness.weight(),
            harness.status.stopped_by
        ),
        (Phase::Stopped, 10, Some(StoppedBy::User))
    );
    assert_eq!(harness.status.schedule_state, Some(ScheduleState::Stopped));
    assert_eq!(harness.last_reason(), Some(EventReason::Stopped));
    // Later entries do not fire for a stopped run, and the same revision does not restart.
    set_now(&mut harness, "2027-01-15T08:40:00Z");
    harness.input(Input::Tick(observations.clone()));
    assert_eq!(
        (harness.status.phase, harness.weight()),
        (Phase::Stopped, 10)
    );
    assert!(harness.command(Command::Stop { rollback: false }).is_err());

    let (mut harness, observations) = schedule_at("2027-01-15T08:20:00Z");
    harness.input(Input::Tick(observations));
    assert_eq!(harness.weight(), 50);
    assert!(harness.command(Command::Stop { rollback: true }).is_ok());
    assert_eq!(
        (
            harness.status.phase,
            harness.weight(),
            harness.status.stopped_by
        ),
        (Phase::Failed, 0, Some(StoppedBy::User))
    );
    assert_eq!(harness.status.schedule_state, Some(ScheduleState::Stopped));
}

#[test]
fn stopped_by_names_the_judge_the_deadline_and_deletion() {
    let (mut harness, observations) = schedule_at("2027-01-15T08:10:00Z");
    harness.input(Input::Tick(observations));
    harness.input(Input::Verdict(JudgeVerdict {
        judge: "sequential".into(),
        outcome: VerdictOutcome::Fail,
        evidence: serde_json::json!({"summary": "canary errors 20% vs 1%"}),
    }));
    assert_eq!(
        (harness.status.phase, harness.status.stopped_by),
        (Phase::Failed, Some(StoppedBy::Judge))
    );
    assert_eq!(harness.status.schedule_state, Some(ScheduleState::Stopped));

    let (mut harness, _) = schedule_at("2027-01-15T08:00:00Z");
    harness.input(Input::Deleted);
    assert_eq!(harness.status.stopped_by, Some(StoppedBy::Deletion));

    // A canary that never becomes ready past the deadline (2h).
    let (mut harness, mut observations) = schedule_at("2027-01-15T08:10:00Z");
    observations.canary_ready = false;
    set_now(&mut harness, "2027-01-15T10:30:00Z");
    harness.input(Input::Tick(observations));
    assert_eq!(harness.status.stopped_by, Some(StoppedBy::Deadline));
}

#[test]
fn other_plans_have_no_schedule_state() {
    let mut harness = Harness::running(CANARY);
    harness.healthy();
    assert_eq!(harness.status.schedule_state, None);
}

#[test]
fn a_restored_schedule_resumes_at_its_next_entry_not_an_interval_after_its_last_step() {
    // The first entry fired at 08:10; the interval is an hour.
    let (mut harness, observations) = schedule_at("2027-01-15T08:00:00Z");
    set_now(&mut harness, "2027-01-15T08:10:00Z");
    harness.input(Input::Tick(observations));
    let (spec, status) = (&harness.spec, &harness.status);
    let time = |text: &str| text.parse::<Timestamp>().unwrap_or(Timestamp::UNIX_EPOCH);
    // Restarted before the next entry: resume at its time, not at 09:10.
    assert_eq!(
        resume_at(spec, status, time("2027-01-15T08:12:00Z")),
        time("2027-01-15T08:20:00Z")
    );
    // Restarted after two entries passed: at once (both apply in that tick).
    assert_eq!(
        resume_at(spec, status, time("2027-01-15T08:33:00Z")),
        time("2027-01-15T08:33:00Z")
    );
    // Other plans: one interval after the last progress, never before now.
    let mut canary = Harness::running(CANARY);
    canary.healthy();
    let last = canary.status.last_progress_at.unwrap_or(canary.now);
    assert_eq!(
        resume_at(&canary.spec, &canary.status, last),
        last + SignedDuration::from_mins(1)
    );
    let later = last + SignedDuration::from_mins(5);
    assert_eq!(resume_at(&canary.spec, &canary.status, later), later);
}
