//! The controllers on the reference's scenarios: what the semantics of each predict.

use weir_sim::bench::{self, controllers, weir_judge};
use weir_sim::{ControllerSpec, RunEnd, Scenario, SimConfig, simulate};

fn scenario(name: &str) -> Scenario {
    Scenario::select(name).remove(0)
}

/// The reference's worked example (100 req/s, canary at 10%, 5% vs 0.5% errors, interval 1m,
/// threshold 5, success rate >= 99%): every 1-minute check fails, the weight stays at 10%, and
/// the threshold is compared at the start of the tick after the fifth failure, so the rollback
/// comes interval x (threshold + 1) = 360 s after the canary's first request, with ~3,600 canary
/// requests and ~180 failed ones.
#[test]
fn flagger_style_rolls_back_the_worked_example_after_threshold_plus_one_intervals() {
    let s1 = scenario("S1");
    let flagger = ControllerSpec::flagger_style(60, 5, 99.0);
    let (interval, threshold) = (60, 5);
    for seed in 0..20 {
        let result = simulate(
            &s1,
            std::slice::from_ref(&flagger),
            seed,
            &SimConfig::default(),
        )[0];
        assert_eq!(result.end, RunEnd::RolledBack);
        assert!(!result.by_verdict);
        // A check passing by chance would add one interval; none should at 95% success.
        assert!(
            (interval * threshold..=interval * (threshold + 2)).contains(&result.end_s),
            "{result:?}"
        );
        assert_eq!(result.end_s, interval * (threshold + 1));
        // 10 canary requests per second for 360 s, 5% of them failing.
        assert!(
            (3_300..3_900).contains(&result.canary_requests),
            "{result:?}"
        );
        assert!((130..240).contains(&result.canary_errors), "{result:?}");
    }
}

#[test]
fn the_sequential_controller_rolls_back_a_crash_within_seconds() {
    let s2 = scenario("S2");
    let weir = ControllerSpec::weir(60, weir_judge(&s2, 0.01));
    for seed in 0..50 {
        let result = simulate(
            &s2,
            std::slice::from_ref(&weir),
            seed,
            &SimConfig::default(),
        )[0];
        assert_eq!(result.end, RunEnd::RolledBack);
        assert!(result.by_verdict);
        assert!(result.end_s <= 3, "{result:?}");
        // About 10 canary requests per second, all failing.
        assert!(result.canary_errors <= 60, "{result:?}");
    }
}

#[test]
fn the_sequential_controller_rolls_back_the_worked_example_long_before_the_threshold() {
    let s1 = scenario("S1");
    let specs = controllers(&s1, 0.01);
    let runs = bench::run_seeds(&s1, &specs, 0..100, &SimConfig::default(), 2);
    let weir = bench::summarize(&s1, &specs[0], &runs[0]);
    let flagger = bench::summarize(&s1, &specs[1], &runs[1]);
    assert_eq!(weir.missed_detection_rate, Some(0.0));
    assert_eq!(flagger.missed_detection_rate, Some(0.0));
    assert!(
        weir.rollback_time_mean_s.is_some_and(|t| t < 60.0),
        "{weir:?}"
    );
    assert!(weir.failed_requests_mean * 10.0 < flagger.failed_requests_mean);
}

#[test]
fn healthy_canaries_promote_under_both_controllers() {
    let s0 = scenario("S0");
    let specs = controllers(&s0, 0.01);
    let runs = bench::run_seeds(&s0, &specs, 0..100, &SimConfig::default(), 1);
    for (spec, runs) in specs.iter().zip(&runs) {
        let row = bench::summarize(&s0, spec, runs);
        assert!(row.promotion_rate >= 0.97, "{row:?}");
        // The plan's schedule: 10% .. 50% one interval each, promotion at the next tick.
        assert_eq!(row.promotion_time_median_s, Some(300.0), "{row:?}");
    }
}

#[test]
fn results_do_not_depend_on_threads() {
    let s1 = scenario("S1-r5");
    let specs = controllers(&s1, 0.01);
    let one = bench::run_seeds(&s1, &specs, 10..40, &SimConfig::default(), 1);
    let three = bench::run_seeds(&s1, &specs, 10..40, &SimConfig::default(), 3);
    assert_eq!(one, three);
    let direct: Vec<_> = (10..40)
        .map(|seed| simulate(&s1, &specs, seed, &SimConfig::default())[1])
        .collect();
    assert_eq!(one[1], direct);
}

#[test]
fn a_primary_incident_rolls_back_the_threshold_controller_only() {
    let s6 = scenario("S6");
    let specs = controllers(&s6, 0.01);
    let runs = bench::run_seeds(&s6, &specs, 0..50, &SimConfig::default(), 2);
    let weir = bench::summarize(&s6, &specs[0], &runs[0]);
    let flagger = bench::summarize(&s6, &specs[1], &runs[1]);
    assert!(
        weir.false_rollback_rate.is_some_and(|rate| rate <= 0.04),
        "{weir:?}"
    );
    assert!(
        flagger.false_rollback_rate.is_some_and(|rate| rate >= 0.9),
        "{flagger:?}"
    );
}
