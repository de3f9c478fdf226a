#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use axum::extract::Query;
use jiff::Timestamp;
use serde_json::json;
use weir_core::document::{Document, load};
use weir_core::model::{
    Phase, RolloutSpec, RolloutStatus, ScheduleState, StoppedBy, TriggeredEntry,
};
use weir_core::units::Weight;

use super::{ListRequest, Order, summary};
use crate::error::ApiError;
use crate::input::Params;
use crate::types::{NextEntry, ScheduleType};

fn spec(plan: &str) -> RolloutSpec {
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: banner-green, namespace: shop}}
spec:
  target: {{kind: flag, flag: banner, control: blue, variation: green}}
  plan: {plan}
"
    );
    match load(yaml.as_bytes()).remove(0) {
        Ok(loaded) => match loaded.document {
            Document::Rollout(rollout) => rollout.spec,
            other => panic!("not a rollout: {other:?}"),
        },
        Err(refused) => panic!("{refused:?}"),
    }
}

const MANUAL: &str = "{schedule: {manual: [\
    {at: \"2026-12-01T09:00:00Z\", weight: 5}, \
    {at: \"2026-12-02T09:00:00Z\", weight: 25}, \
    {at: \"2026-12-03T09:00:00Z\", weight: 100}]}}";

const TEMPLATE: &str =
    "{schedule: {template: {start: \"2026-12-01T09:00:00Z\", interval: hourly, increments: 40}}}";

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn status(phase: Phase, triggered: &[(&str, u32, &str)]) -> RolloutStatus {
    let triggered: Vec<TriggeredEntry> = triggered
        .iter()
        .map(|(due, weight, fired)| TriggeredEntry {
            at: at(due),
            weight: Weight::from_percent(*weight),
            triggered_at: at(fired),
        })
        .collect();
    RolloutStatus {
        phase,
        run: 1,
        canary_weight: triggered.last().map_or(Weight::ZERO, |entry| entry.weight),
        steps_taken: triggered.len() as u32,
        triggered,
        ..RolloutStatus::default()
    }
}

#[test]
fn a_waiting_manual_schedule_shows_every_entry_and_the_first_as_next() {
    let summary = summary(&spec(MANUAL), &status(Phase::Progressing, &[])).unwrap();
    assert_eq!(summary.schedule_type, ScheduleType::Manual);
    assert_eq!(summary.state, ScheduleState::Waiting);
    assert_eq!((summary.done, summary.total), (0, 3));
    assert_eq!(
        summary.next,
        Some(NextEntry {
            at: at("2026-12-01T09:00:00Z"),
            weight: Weight::from_percent(5),
        })
    );
    assert_eq!(summary.weight, Weight::ZERO);
    assert!(
        summary
            .entries
            .iter()
            .all(|entry| entry.triggered_at.is_none())
    );
    // Before the engine's first step the status is the default one: still waiting.
    let fresh = summary_of_default(MANUAL);
    assert_eq!(fresh, ScheduleState::Waiting);
}

fn summary_of_default(plan: &str) -> ScheduleState {
    summary(&spec(plan), &RolloutStatus::default())
        .unwrap()
        .state
}

#[test]
fn a_running_template_is_expanded_and_each_entry_matched_with_when_it_took_effect() {
    let running = status(
        Phase::Progressing,
        &[("2026-12-01T09:00:00Z", 40, "2026-12-01T09:00:00.004Z")],
    );
    let summary = summary(&spec(TEMPLATE), &running).unwrap();
    assert_eq!(summary.schedule_type, ScheduleType::Template);
    assert_eq!(summary.state, ScheduleState::Running);
    let weights: Vec<Weight> = summary.entries.iter().map(|entry| entry.weight).collect();
    assert_eq!(
        weights,
        [40, 80, 100].map(Weight::from_percent),
        "40% an hour until 100%"
    );
    assert_eq!(
        summary.entries[0].triggered_at,
        Some(at("2026-12-01T09:00:00.004Z"))
    );
    assert_eq!(summary.entries[1].triggered_at, None);
    assert_eq!((summary.done, summary.total), (1, 3));
    assert_eq!(
        summary.next,
        Some(NextEntry {
            at: at("2026-12-01T10:00:00Z"),
            weight: Weight::from_percent(80),
        })
    );
    assert_eq!(summary.weight, Weight::from_percent(40));
}

#[test]
fn entries_missed_during_downtime_are_done_at_the_time_they_were_applied_together() {
    let late = status(
        Phase::Progressing,
        &[
            ("2026-12-01T09:00:00Z", 5, "2026-12-02T10:00:00Z"),
            ("2026-12-02T09:00:00Z", 25, "2026-12-02T10:00:00Z"),
        ],
    );
    let summary = summary(&spec(MANUAL), &late).unwrap();
    assert_eq!(summary.state, ScheduleState::Running);
    assert_eq!(summary.done, 2);
    assert_eq!(
        summary.entries[0].triggered_at,
        summary.entries[1].triggered_at
    );
    assert_eq!(summary.next.map(|next| next.weight), Some(Weight::FULL));
}

#[test]
fn a_finished_schedule_has_no_next_and_the_whole_audience_on_the_variation() {
    let mut done = status(
        Phase::Succeeded,
        &[
            ("2026-12-01T09:00:00Z", 5, "2026-12-01T09:00:00Z"),
            ("2026-12-02T09:00:00Z", 25, "2026-12-02T09:00:00Z"),
            ("2026-12-03T09:00:00Z", 100, "2026-12-03T09:00:00Z"),
        ],
    );
    // Promotion routes everything to the (new) primary: the canary weight is back to 0.
    done.canary_weight = Weight::ZERO;
    let summary = summary(&spec(MANUAL), &done).unwrap();
    assert_eq!(summary.state, ScheduleState::Finished);
    assert_eq!((summary.done, summary.total), (3, 3));
    assert_eq!(summary.next, None);
    assert_eq!(summary.weight, Weight::FULL);
}

#[test]
fn a_stopped_schedule_keeps_its_weight_and_has_no_next() {
    let mut stopped = status(
        Phase::Stopped,
        &[("2026-12-01T09:00:00Z", 5, "2026-12-01T09:00:01Z")],
    );
    stopped.stopped_by = Some(StoppedBy::User);
    let summary = summary(&spec(MANUAL), &stopped).unwrap();
    assert_eq!(summary.state, ScheduleState::Stopped);
    assert_eq!((summary.done, summary.total), (1, 3));
    assert_eq!(summary.next, None);
    assert_eq!(summary.weight, Weight::from_percent(5));
}

#[test]
fn a_plan_that_is_not_a_schedule_has_no_summary() {
    let canary = spec("{canary: {stepWeight: 50}}");
    assert_eq!(summary(&canary, &RolloutStatus::default()), None);
}

#[test]
fn the_summary_is_written_in_the_apis_words() {
    let running = status(
        Phase::Progressing,
        &[("2026-12-01T09:00:00Z", 5, "2026-12-01T09:00:00Z")],
    );
    let written = serde_json::to_value(summary(&spec(MANUAL), &running).unwrap()).unwrap();
    assert_eq!(
        written,
        json!({
            "type": "manual",
            "state": "RUNNING",
            "entries": [
                {"at": "2026-12-01T09:00:00Z", "weight": 5, "triggeredAt": "2026-12-01T09:00:00Z"},
                {"at": "2026-12-02T09:00:00Z", "weight": 25},
                {"at": "2026-12-03T09:00:00Z", "weight": 100},
            ],
            "done": 1,
            "total": 3,
            "next": {"at": "2026-12-02T09:00:00Z", "weight": 25},
            "weight": 5,
        })
    );
    let read: crate::types::ScheduleSummary = serde_json::from_value(written).unwrap();
    assert_eq!(read.done, 1);
}

// === parameters ===

fn params(pairs: &[(&str, &str)]) -> Result<Params, ApiError> {
    let pairs = pairs
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    Params::parse_with_lists(Ok(Query(pairs)), &super::KNOWN, &super::LISTS)
}

fn request(pairs: &[(&str, &str)]) -> Result<ListRequest, ApiError> {
    ListRequest::read(&params(pairs)?)
}

fn errors(error: ApiError) -> Vec<(String, String)> {
    match error {
        ApiError::Invalid { errors, .. } => errors
            .into_iter()
            .map(|error| (error.path.clone(), error.to_string()))
            .collect(),
        other => panic!("not invalid: {other:?}"),
    }
}

#[test]
fn lists_are_repeated_or_comma_separated_and_names_any_case() {
    let request = request(&[
        ("flag", "banner, checkout"),
        ("flag", "search-box"),
        ("status", "waiting,Running"),
        ("status", "STOPPED"),
        ("type", "Template"),
        ("search", "GREEN"),
        ("order", "-updated"),
        ("limit", "7"),
        ("cursor", "14"),
    ])
    .unwrap();
    assert_eq!(request.flags, ["banner", "checkout", "search-box"]);
    assert_eq!(
        request.states,
        [
            ScheduleState::Waiting,
            ScheduleState::Running,
            ScheduleState::Stopped
        ]
    );
    assert_eq!(request.schedule_type, Some(ScheduleType::Template));
    assert_eq!(request.search.as_deref(), Some("green"));
    assert_eq!(request.order, Order::UpdatedDesc);
    assert_eq!((request.limit, request.start), (7, 14));
}

#[test]
fn defaults_list_everything_by_name_from_the_start() {
    let request = request(&[]).unwrap();
    assert!(request.flags.is_empty() && request.states.is_empty());
    assert_eq!(request.schedule_type, None);
    assert_eq!(request.order, Order::Name);
    assert_eq!(
        (request.limit, request.start),
        (weir_store::DEFAULT_PAGE, 0)
    );
}

#[test]
fn every_bad_parameter_is_named_with_what_is_allowed() {
    let found = errors(
        request(&[
            ("status", "WAITING,DONE"),
            ("type", "automatic"),
            ("order", "key"),
            ("limit", "-1"),
            ("cursor", "page-2"),
        ])
        .unwrap_err(),
    );
    let paths: Vec<&str> = found.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(paths, ["status", "type", "order", "limit", "cursor"]);
    let messages: Vec<&str> = found.iter().map(|(_, message)| message.as_str()).collect();
    assert!(
        messages[0].contains("\"DONE\"")
            && messages[0].contains("one of WAITING, RUNNING, FINISHED, STOPPED"),
        "{}",
        messages[0]
    );
    assert!(
        messages[1].contains("one of manual, template"),
        "{}",
        messages[1]
    );
    assert!(
        messages[2].contains("one of name, created, -created, updated, -updated"),
        "{}",
        messages[2]
    );
}

#[test]
fn unknown_and_repeated_single_parameters_are_refused() {
    let Err(refused) = params(&[("sort", "name"), ("type", "manual"), ("type", "template")]) else {
        panic!("accepted an unknown parameter");
    };
    let found = errors(refused);
    assert_eq!(found[0].0, "sort");
    assert!(
        found[0].1.contains("unknown query parameter")
            && found[0].1.contains("namespace, flag, status, type"),
        "{}",
        found[0].1
    );
    assert_eq!(found[1].0, "type");
    assert!(found[1].1.contains("more than once"), "{}", found[1].1);
}
