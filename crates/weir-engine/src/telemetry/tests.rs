#![allow(clippy::unwrap_used, clippy::expect_used)]

use jiff::Timestamp;
use weir_core::Weight;
use weir_core::model::{Event, EventReason, Evidence, Phase, RolloutStatus};
use weir_store::{RolloutKey, StoredEvent};

use super::*;

fn key(namespace: &str, name: &str) -> RolloutKey {
    RolloutKey {
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn status(phase: Phase, weight_bp: u32) -> RolloutStatus {
    RolloutStatus {
        phase,
        canary_weight: Weight::from_basis_points(weight_bp),
        ..RolloutStatus::default()
    }
}

fn change(key: &RolloutKey, status: Option<RolloutStatus>, events: Vec<Event>) -> StatusChange {
    StatusChange {
        key: key.clone(),
        version: 1,
        status,
        events: events
            .into_iter()
            .enumerate()
            .map(|(seq, event)| StoredEvent {
                seq: seq as u64 + 1,
                event,
            })
            .collect(),
    }
}

fn event(reason: EventReason, phase: Phase, at: Timestamp) -> Event {
    Event {
        at,
        run: 1,
        reason,
        phase,
        canary_weight: Weight::ZERO,
        message: String::new(),
        evidence: Evidence::default(),
    }
}

/// The value of the one sample named `name` whose labels include all of `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, rest) = series.split_once('{').unwrap_or((series, "}"));
            if series_name != name {
                return None;
            }
            let all = labels
                .iter()
                .all(|(label, value)| rest.contains(&format!("{label}=\"{value}\"")));
            all.then(|| value.parse().unwrap())
        })
        .collect();
    assert!(
        matching.len() <= 1,
        "{name} {labels:?} is ambiguous in:\n{text}"
    );
    matching.first().copied()
}

fn phase_values(text: &str, key: &RolloutKey) -> Vec<(Phase, Option<f64>)> {
    PHASES
        .iter()
        .map(|phase| {
            (
                *phase,
                sample(
                    text,
                    "weir_rollout_phase",
                    &[
                        ("namespace", &key.namespace),
                        ("rollout", &key.name),
                        ("phase", phase.as_str()),
                    ],
                ),
            )
        })
        .collect()
}

#[test]
fn the_phase_gauge_is_one_for_the_current_phase_only_and_follows_changes() {
    let telemetry = Telemetry::new();
    let web = key("shop", "web");
    telemetry.record_change(&change(
        &web,
        Some(status(Phase::Progressing, 2500)),
        vec![],
    ));
    let text = telemetry.encode();
    for (phase, value) in phase_values(&text, &web) {
        let expected = if phase == Phase::Progressing {
            1.0
        } else {
            0.0
        };
        assert_eq!(value, Some(expected), "{phase}:\n{text}");
    }
    let labels = [("namespace", "shop"), ("rollout", "web")];
    assert_eq!(
        sample(&text, "weir_rollout_canary_weight_ratio", &labels),
        Some(0.25)
    );
    assert_eq!(sample(&text, "weir_engine_rollouts", &[]), Some(1.0));

    telemetry.record_change(&change(&web, Some(status(Phase::Failed, 0)), vec![]));
    let text = telemetry.encode();
    for (phase, value) in phase_values(&text, &web) {
        let expected = if phase == Phase::Failed { 1.0 } else { 0.0 };
        assert_eq!(value, Some(expected), "{phase}:\n{text}");
    }
    assert_eq!(
        sample(&text, "weir_rollout_canary_weight_ratio", &labels),
        Some(0.0)
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
}

#[test]
fn a_finished_run_counts_once_with_its_duration() {
    let telemetry = Telemetry::new();
    let web = key("shop", "web");
    let started = Timestamp::from_second(1_000).unwrap();
    let mut done = status(Phase::Succeeded, 0);
    done.run_started_at = Some(started);
    telemetry.record_change(&change(
        &web,
        Some(done.clone()),
        vec![event(
            EventReason::Succeeded,
            Phase::Succeeded,
            Timestamp::from_second(1_090).unwrap(),
        )],
    ));
    // A later change without a run-ending event counts nothing more.
    telemetry.record_change(&change(&web, Some(done), vec![]));
    let text = telemetry.encode();
    let labels = [("namespace", "shop"), ("rollout", "web")];
    assert_eq!(
        sample(&text, "weir_rollout_promotions_total", &labels),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "weir_rollout_rollbacks_total", &labels),
        Some(0.0)
    );
    let succeeded = [
        ("namespace", "shop"),
        ("rollout", "web"),
        ("result", "succeeded"),
    ];
    assert_eq!(
        sample(&text, "weir_rollout_run_duration_seconds_count", &succeeded),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "weir_rollout_run_duration_seconds_sum", &succeeded),
        Some(90.0)
    );
    let mut le_60 = succeeded.to_vec();
    le_60.push(("le", "60.0"));
    assert_eq!(
        sample(&text, "weir_rollout_run_duration_seconds_bucket", &le_60),
        Some(0.0)
    );
}

#[test]
fn deleting_a_rollout_removes_all_its_series_and_only_its() {
    let telemetry = Telemetry::new();
    let web = key("shop", "web");
    let api = key("shop", "api");
    let mut failed = status(Phase::Failed, 0);
    failed.run_started_at = Some(Timestamp::from_second(0).unwrap());
    for rollout in [&web, &api] {
        telemetry.record_change(&change(
            rollout,
            Some(failed.clone()),
            vec![event(
                EventReason::RolledBack,
                Phase::Failed,
                Timestamp::from_second(30).unwrap(),
            )],
        ));
        telemetry.set_judge_log_evalue(rollout, "sequential", 2.5);
    }
    let text = telemetry.encode();
    assert!(text.contains("rollout=\"web\""), "{text}");
    assert_eq!(sample(&text, "weir_engine_rollouts", &[]), Some(2.0));

    telemetry.record_change(&change(&web, None, vec![]));
    let text = telemetry.encode();
    assert!(
        !text.contains("rollout=\"web\""),
        "every series of the deleted rollout is gone:\n{text}"
    );
    let api_labels = [("namespace", "shop"), ("rollout", "api")];
    assert_eq!(
        sample(&text, "weir_rollout_rollbacks_total", &api_labels),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "weir_rollout_judge_log_evalue",
            &[("rollout", "api"), ("judge", "sequential")]
        ),
        Some(2.5)
    );
    assert_eq!(
        phase_values(&text, &api)
            .iter()
            .filter(|(_, value)| value.is_some())
            .count(),
        PHASES.len()
    );
    assert_eq!(sample(&text, "weir_engine_rollouts", &[]), Some(1.0));

    // A judged run that ends drops its e-value series; the rollout's other series stay.
    telemetry.remove_judges(&api);
    let text = telemetry.encode();
    assert!(!text.contains("weir_rollout_judge_log_evalue{"), "{text}");
    assert!(text.contains("rollout=\"api\""));
}

#[test]
fn engine_health_families_count_what_they_are_given() {
    let telemetry = Telemetry::new();
    telemetry.record_tick(Duration::from_millis(3));
    telemetry.record_tick(Duration::from_secs(20));
    telemetry.record_commit(Duration::from_micros(700));
    telemetry.record_provider_error();
    let text = telemetry.encode();
    assert_eq!(sample(&text, "weir_engine_ticks_total", &[]), Some(2.0));
    assert_eq!(
        sample(&text, "weir_engine_tick_lateness_seconds_count", &[]),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "weir_engine_tick_lateness_seconds_bucket",
            &[("le", "0.005")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "weir_engine_tick_lateness_seconds_bucket",
            &[("le", "+Inf")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "weir_engine_store_commit_seconds_count", &[]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "weir_engine_provider_errors_total", &[]),
        Some(1.0)
    );
    assert!(text.contains("# TYPE weir_engine_store_commit_seconds histogram"));
    assert!(text.contains("# UNIT weir_engine_store_commit_seconds seconds"));
}

#[test]
fn the_evidence_series_follow_the_wait_and_end_with_the_run() {
    let telemetry = Telemetry::new();
    let web = key("shop", "web");
    let labels = [("namespace", "shop"), ("rollout", "web")];
    let mut holding = status(Phase::Progressing, 5_000);
    telemetry.record_change(&change(&web, Some(holding.clone()), vec![]));
    let text = telemetry.encode();
    assert_eq!(
        sample(&text, "weir_rollout_waiting_for_evidence", &labels),
        Some(0.0),
        "{text}"
    );
    holding.evidence_wait_since = Some(Timestamp::from_second(10).unwrap());
    telemetry.record_change(&change(&web, Some(holding), vec![]));
    telemetry.set_judge_excess_upper(&web, "sequential", 0.031);
    // Nothing shown yet is no bound at all, not a value.
    telemetry.set_judge_excess_upper(&web, "other", f64::INFINITY);
    let text = telemetry.encode();
    assert_eq!(
        sample(&text, "weir_rollout_waiting_for_evidence", &labels),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "weir_rollout_judge_excess_upper_bound",
            &[("rollout", "web"), ("judge", "sequential")]
        ),
        Some(0.031)
    );
    assert!(!text.contains("judge=\"other\""), "{text}");

    // The run ends: the judge task drops the judges' series, the commit the waiting one.
    telemetry.remove_judges(&web);
    telemetry.record_change(&change(&web, Some(status(Phase::Succeeded, 0)), vec![]));
    let text = telemetry.encode();
    assert!(
        !text.contains("weir_rollout_judge_excess_upper_bound{"),
        "{text}"
    );
    assert!(
        !text.contains("weir_rollout_waiting_for_evidence{"),
        "{text}"
    );
    assert!(text.contains("rollout=\"web\""), "{text}");
}
