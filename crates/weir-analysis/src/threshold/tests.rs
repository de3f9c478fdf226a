use super::*;
use crate::VersionCounts;

fn window(requests: u64, errors: u64, slow: u64) -> Window {
    Window {
        canary_weight: 0.1,
        canary: VersionCounts {
            requests,
            errors,
            slow,
        },
        ..Window::default()
    }
}

fn judge(no_data: NoDataPolicy) -> ThresholdJudge {
    ThresholdJudge::new(ThresholdConfig {
        min_success_rate: Some(99.0),
        max_latency_ms: Some(500.0),
        no_data,
    })
}

#[test]
fn success_rate_of_the_canary_alone() {
    let judge = judge(NoDataPolicy::Fail);
    let checks = judge.check(&window(600, 6, 0));
    assert_eq!(checks.len(), 2);
    assert_eq!(checks[0].name, REQUEST_SUCCESS_RATE);
    assert_eq!(checks[0].outcome, CheckOutcome::Pass);
    assert_eq!(checks[0].value, Some(99.0));
    let checks = judge.check(&window(600, 7, 0));
    assert_eq!(checks[0].outcome, CheckOutcome::Fail);
    assert!(checks[0].message.contains("7 errors in 600 requests"));
}

#[test]
fn latency_from_raw_latencies_or_slow_counts() {
    let judge = judge(NoDataPolicy::Fail);
    let mut w = window(100, 0, 0);
    w.canary_latencies_ms = (1..=100).map(|i| i as f64 * 5.0).collect();
    // p99 by nearest rank of 5, 10, ..., 500 is 495.
    let checks = judge.check(&w);
    assert_eq!(checks[1].name, REQUEST_DURATION);
    assert_eq!(checks[1].value, Some(495.0));
    assert_eq!(checks[1].outcome, CheckOutcome::Pass);
    w.canary_latencies_ms.push(900.0);
    w.canary_latencies_ms.push(900.0);
    assert_eq!(judge.check(&w)[1].outcome, CheckOutcome::Fail);
    // Without raw latencies: more than 1% slower than the limit means the p99 is above it.
    assert_eq!(
        judge.check(&window(200, 0, 2))[1].outcome,
        CheckOutcome::Pass
    );
    assert_eq!(
        judge.check(&window(200, 0, 3))[1].outcome,
        CheckOutcome::Fail
    );
}

#[test]
fn no_data_is_reported_and_the_judge_applies_the_policy() {
    let empty = window(0, 0, 0);
    for policy in [NoDataPolicy::Fail, NoDataPolicy::Hold, NoDataPolicy::Ignore] {
        let mut judge = judge(policy);
        let checks = judge.check(&empty);
        assert!(checks.iter().all(|c| c.outcome == CheckOutcome::NoData));
        let expected = match policy {
            NoDataPolicy::Fail => VerdictOutcome::Fail,
            NoDataPolicy::Hold => VerdictOutcome::Inconclusive,
            NoDataPolicy::Ignore => VerdictOutcome::Pass,
        };
        assert_eq!(judge.observe(&empty).outcome, expected);
    }
}

#[test]
fn judge_verdicts() {
    let mut judge = judge(NoDataPolicy::Hold);
    assert_eq!(judge.name(), "threshold");
    let pass = judge.observe(&window(1000, 1, 0));
    assert_eq!(pass.outcome, VerdictOutcome::Pass);
    assert_eq!(pass.evidence["checks"].as_array().unwrap().len(), 2);
    assert!(pass.summary().unwrap().contains("request-success-rate"));
    assert_eq!(
        judge.observe(&window(1000, 50, 0)).outcome,
        VerdictOutcome::Fail
    );
    let mut none = ThresholdJudge::new(ThresholdConfig::default());
    assert_eq!(none.observe(&window(0, 0, 0)).outcome, VerdictOutcome::Pass);
    assert!(none.check(&window(10, 10, 10)).is_empty());
}
