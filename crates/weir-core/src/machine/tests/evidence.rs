//! The evidence rule (`spec.analysis.evidence`): promotion waits for evidence of health.

use super::*;

/// Two steps of 50%, 1-minute interval, a 10-minute evidence deadline with the given policy.
fn plan(on_deadline: &str) -> String {
    format!(
        "  plan: {{canary: {{stepWeight: 50, maxWeight: 50}}}}\n  analysis: {{interval: 1m, progressDeadline: 2m, evidence: {{deadline: 10m, onDeadline: {on_deadline}}}}}\n"
    )
}

fn waiting(observations: &mut Observations) {
    observations.evidence = Some(EvidenceReport {
        healthy: false,
        summary: "waiting for evidence: 86 of ~400 canary requests; about 5m at 1.1 req/s".into(),
    });
}

fn shown(observations: &mut Observations) {
    observations.evidence = Some(EvidenceReport {
        healthy: true,
        summary: "evidence of health after 410 canary requests".into(),
    });
}

fn promoted(harness: &Harness) -> bool {
    harness
        .effects()
        .iter()
        .any(|effect| matches!(effect, Effect::Promote { .. }))
}

#[test]
fn the_run_holds_at_its_last_step_until_the_judges_show_health_then_promotes() {
    let mut harness = Harness::running(&plan("hold"));
    harness.tick(waiting); // 50%
    assert_eq!(harness.weight(), 50);
    harness.tick(waiting); // end of the plan: holds
    assert_eq!(harness.weight(), 50);
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert_eq!(harness.last_reason(), Some(EventReason::WaitingForEvidence));
    assert_eq!(
        harness.status.message,
        "holding at 50% before promoting: waiting for evidence: 86 of ~400 canary requests; about 5m at 1.1 req/s"
    );
    assert_eq!(harness.status.evidence_wait_since, Some(harness.now));
    let events = harness.events.len();
    // Longer than the progress deadline (2m): holding for evidence is not a stall; the wait is
    // recorded once, not every tick.
    for _ in 0..5 {
        harness.tick(|observations| {
            waiting(observations);
            if let Some(report) = &mut observations.evidence {
                report.summary = "waiting for evidence: 300 of ~400 canary requests".into();
            }
        });
        assert_eq!(harness.status.phase, Phase::Progressing);
    }
    assert_eq!(harness.events.len(), events);
    assert!(
        harness
            .status
            .message
            .ends_with("300 of ~400 canary requests"),
        "{}",
        harness.status.message
    );
    harness.tick(shown);
    assert!(promoted(&harness));
    let reasons: Vec<EventReason> = harness.events[events..].iter().map(|e| e.reason).collect();
    assert_eq!(
        reasons,
        [EventReason::EvidenceShown, EventReason::Promoting],
        "{:?}",
        harness.events
    );
    assert!(
        harness.events[events]
            .message
            .starts_with("evidence of health after waiting 6m: ")
    );
    assert_eq!(harness.status.evidence_wait_since, None);
}

#[test]
fn without_a_judge_or_with_no_harm_the_plan_promotes_as_flagger_does() {
    // No judge watches the run (no report): the rule does not apply.
    let mut harness = Harness::running(&plan("hold"));
    harness.healthy();
    harness.healthy();
    assert!(promoted(&harness));
    // noHarm: a report that shows nothing is not waited for.
    let mut harness = Harness::running(
        "  plan: {canary: {stepWeight: 50, maxWeight: 50}}\n  analysis: {evidence: {promoteOn: noHarm}}\n",
    );
    harness.tick(waiting);
    harness.tick(waiting);
    assert!(promoted(&harness));
}

#[test]
fn past_the_deadline_hold_tells_a_person_and_keeps_holding() {
    let mut harness = Harness::running(&plan("hold"));
    for _ in 0..13 {
        harness.tick(waiting);
    }
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert!(!promoted(&harness));
    assert!(
        harness.status.message.starts_with(
            "no evidence of health within spec.analysis.evidence.deadline (10m): holding at 50% for a person (`weir promote` or `weir abort`)"
        ),
        "{}",
        harness.status.message
    );
    let told = harness
        .events
        .iter()
        .filter(|event| event.message.starts_with("no evidence of health within"))
        .count();
    assert_eq!(told, 1);
    // Evidence that arrives later still promotes.
    harness.tick(shown);
    assert!(promoted(&harness));
}

#[test]
fn past_the_deadline_rollback_rolls_back() {
    let mut harness = Harness::running(&plan("rollback"));
    let mut ticks = 0;
    while harness.status.phase == Phase::Progressing {
        harness.tick(waiting);
        ticks += 1;
        assert!(ticks < 20, "{:?}", harness.events);
    }
    assert_eq!(harness.status.phase, Phase::Failed);
    assert_eq!(harness.status.stopped_by, Some(StoppedBy::Deadline));
    assert!(
        harness.status.message.contains(
            "no evidence of health within spec.analysis.evidence.deadline (10m): rolling back"
        ),
        "{}",
        harness.status.message
    );
    assert_eq!(harness.status.evidence_wait_since, None);
}

#[test]
fn past_the_deadline_promote_promotes_and_says_it_was_without_evidence() {
    let mut harness = Harness::running(&plan("promote"));
    let mut ticks = 0;
    while !promoted(&harness) {
        harness.tick(waiting);
        ticks += 1;
        assert!(ticks < 20, "{:?}", harness.events);
    }
    let reasons: Vec<EventReason> = harness
        .events
        .iter()
        .rev()
        .take(2)
        .map(|e| e.reason)
        .collect();
    assert_eq!(
        reasons,
        [EventReason::Promoting, EventReason::EvidenceShown]
    );
    let why = &harness.events[harness.events.len() - 2].message;
    assert!(
        why.contains("promoting anyway as onDeadline says, WITHOUT evidence of health"),
        "{why}"
    );
}

#[test]
fn from_weight_asks_for_evidence_before_each_increase_above_it() {
    let mut harness = Harness::running(
        "  plan: {canary: {stepWeight: 25, maxWeight: 75}}\n  analysis: {evidence: {fromWeight: 25%}}\n",
    );
    harness.tick(waiting);
    assert_eq!(harness.weight(), 25);
    harness.tick(waiting);
    assert_eq!(harness.weight(), 25);
    assert_eq!(
        harness.status.message,
        "holding at 25% before going to 50%: waiting for evidence: 86 of ~400 canary requests; about 5m at 1.1 req/s"
    );
    harness.tick(shown);
    assert_eq!(harness.weight(), 50);
}

/// The evidence of health that let the run promote is in the history, on the events the rule
/// decided: the wait, the evidence shown, and the promotion (docs/DASHBOARD.md, "Judge").
#[test]
fn the_history_keeps_the_evidence_of_health_that_gated_the_promotion() {
    let judged = |event: &Event| {
        event
            .evidence
            .verdict
            .as_ref()
            .filter(|verdict| verdict.judge == crate::machine::EVIDENCE_RULE_JUDGE)
            .map(|verdict| (verdict.outcome, verdict.evidence["summary"].clone()))
    };
    // Health shown at once: the promotion carries it.
    let mut harness = Harness::running(&plan("hold"));
    harness.tick(shown);
    harness.tick(shown);
    assert!(promoted(&harness));
    let promotion = harness.events.last().cloned();
    assert_eq!(
        promotion.as_ref().and_then(judged),
        Some((
            VerdictOutcome::Pass,
            serde_json::json!("evidence of health after 410 canary requests")
        )),
        "{promotion:?}"
    );
    // Waited for: the wait and the evidence shown carry the judges' report too.
    let mut harness = Harness::running(&plan("hold"));
    harness.tick(waiting);
    harness.tick(waiting);
    let wait = harness.events.last().and_then(judged);
    assert_eq!(
        wait.map(|(outcome, _)| outcome),
        Some(VerdictOutcome::Inconclusive)
    );
    harness.tick(shown);
    let outcomes: Vec<Option<VerdictOutcome>> = harness
        .events
        .iter()
        .rev()
        .take(2)
        .map(|event| judged(event).map(|(outcome, _)| outcome))
        .collect();
    assert_eq!(
        outcomes,
        [Some(VerdictOutcome::Pass), Some(VerdictOutcome::Pass)]
    );
    // No judge watches the run: nothing is added.
    let mut harness = Harness::running(&plan("hold"));
    harness.healthy();
    harness.healthy();
    assert!(promoted(&harness));
    assert!(harness.events.iter().all(|event| judged(event).is_none()));
}
