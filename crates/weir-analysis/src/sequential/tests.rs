use super::*;
use crate::VersionCounts;

fn window(weight: f64, canary: (u64, u64), primary: (u64, u64)) -> Window {
    Window {
        canary_weight: weight,
        canary: VersionCounts {
            requests: canary.0,
            errors: canary.1,
            slow: 0,
        },
        primary: VersionCounts {
            requests: primary.0,
            errors: primary.1,
            slow: 0,
        },
        ..Window::default()
    }
}

#[test]
fn fails_fast_on_a_ten_times_regression() {
    // 100 req/s, 10% canary, 5% vs 0.5% errors: in expectation 0.5 canary and 0.45 primary
    // errors per second. Feed the expected counts, rounded, ten seconds at a time.
    let mut judge = SequentialJudge::new(SequentialConfig::default());
    let mut seconds = 0;
    while judge.observe_outcome(&window(0.1, (100, 5), (900, 4))) != VerdictOutcome::Fail {
        seconds += 10;
        assert!(seconds < 300, "no rollback after {seconds} s");
    }
    assert!(seconds <= 60, "{seconds}");
    let verdict = judge.observe(&window(0.1, (100, 5), (900, 4)));
    assert_eq!(verdict.outcome, VerdictOutcome::Fail);
    assert!(
        verdict
            .summary()
            .unwrap()
            .starts_with("canary worse than allowed (errors)")
    );
}

#[test]
fn stays_inconclusive_on_equal_rates() {
    let mut judge = SequentialJudge::new(SequentialConfig::default());
    for _ in 0..600 {
        let verdict = judge.observe(&window(0.2, (20, 1), (80, 4)));
        assert_eq!(verdict.outcome, VerdictOutcome::Inconclusive);
    }
    assert!(judge.log_e_value() < 0.0);
}
