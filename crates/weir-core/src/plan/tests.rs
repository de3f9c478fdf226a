use super::*;
use crate::model::Rollout;

fn spec(body: &str) -> RolloutSpec {
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: app}}\nspec:\n  target: {{kind: flag}}\n{body}"
    );
    let rollout: Result<Rollout, _> = serde_saphyr::from_str(&yaml);
    match rollout {
        Ok(rollout) => rollout.spec,
        Err(error) => panic!("does not parse: {error}"),
    }
}

fn weights(timeline: &Timeline) -> Vec<String> {
    timeline
        .steps
        .iter()
        .map(|step| step.canary_weight.to_string())
        .collect()
}

#[test]
fn a_flagger_style_canary_takes_one_interval_per_step_plus_promotion() {
    // Flagger: start tick, 5 steps to 50%, one more tick to promote, one to finalise, one to
    // succeed: 8 intervals after the run starts.
    let timeline = dry_run(
        &spec("  plan: {canary: {stepWeight: 10, maxWeight: 50}}\n  analysis: {interval: 1m}\n"),
        Timestamp::UNIX_EPOCH,
    );
    assert_eq!(
        weights(&timeline),
        vec!["0%", "10%", "20%", "30%", "40%", "50%", "50%", "0%", "0%"]
    );
    assert_eq!(
        timeline.minimum_duration,
        Some(GoDuration::from_secs(8 * 60))
    );
    assert_eq!(timeline.final_phase, Phase::Succeeded);
}

#[test]
fn gates_are_shown_where_they_apply() {
    let body = "  plan: {canary: {stepWeights: [10, 50]}}\n  analysis: {webhooks: [{name: a, type: confirm-rollout, url: 'http://g/'}, {name: b, type: confirm-traffic-increase, url: 'http://g/'}, {name: c, type: confirm-promotion, url: 'http://g/'}]}\n";
    let timeline = dry_run(&spec(body), Timestamp::UNIX_EPOCH);
    let gates: Vec<Option<&str>> = timeline
        .steps
        .iter()
        .map(|step| step.gate.as_deref())
        .collect();
    assert_eq!(
        gates,
        vec![
            Some("confirm-rollout"),
            Some("confirm-traffic-increase"),
            Some("confirm-traffic-increase"),
            Some("confirm-promotion"),
            None,
            None
        ]
    );
}

#[test]
fn blue_green_switches_before_promoting() {
    let timeline = dry_run(
        &spec("  plan: {blueGreen: {iterations: 3}}\n  analysis: {interval: 30s}\n"),
        Timestamp::UNIX_EPOCH,
    );
    assert_eq!(
        weights(&timeline),
        vec!["0%", "0%", "0%", "0%", "100%", "100%", "0%", "0%"]
    );
    assert_eq!(
        timeline.minimum_duration,
        Some(GoDuration::from_secs(7 * 30))
    );
}

#[test]
fn untimed_pauses_are_listed_as_manual_steps() {
    let timeline = dry_run(
        &spec(
            "  plan: {canary: {steps: [{weight: 10, pause: {}}, {weight: 50, pause: {duration: 2m}}]}}\n",
        ),
        Timestamp::UNIX_EPOCH,
    );
    assert_eq!(timeline.manual_steps.len(), 1);
    assert!(
        timeline
            .steps
            .iter()
            .any(|step| step.gate.as_deref() == Some("manual resume"))
    );
    assert_eq!(timeline.final_phase, Phase::Succeeded);
}

#[test]
fn a_schedule_short_of_100_percent_ends_waiting_for_a_person() {
    let start: Timestamp = "2027-03-01T00:00:00Z"
        .parse()
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let timeline = dry_run(
        &spec(
            "  plan: {schedule: {manual: [{at: '2027-03-01T00:00:00Z', weight: 5}, {at: '2027-03-01T06:00:00Z', weight: 25}]}}\n",
        ),
        start,
    );
    assert_eq!(timeline.final_phase, Phase::WaitingPromotion);
    assert_eq!(timeline.minimum_duration, None);
    assert!(timeline.steps.iter().all(|step| step.at.is_some()));
    assert_eq!(
        timeline.steps.last().map(|step| step.canary_weight),
        Some(Weight::from_percent(25))
    );
}
