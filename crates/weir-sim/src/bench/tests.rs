use super::*;
use crate::sim::{RunEnd, RunResult};

fn run(end: RunEnd, end_s: u32, requests: u64, errors: u64) -> RunResult {
    RunResult {
        end,
        end_s,
        canary_requests: requests,
        canary_errors: errors,
        canary_slow: 0,
        canary_requests_total: requests,
        by_verdict: end == RunEnd::RolledBack,
    }
}

#[test]
fn quantiles_by_nearest_rank() {
    let values: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(quantile(&values, 0.5), Some(50.0));
    assert_eq!(quantile(&values, 0.95), Some(95.0));
    assert_eq!(quantile(&[3.0], 0.95), Some(3.0));
    assert_eq!(quantile(&[], 0.5), None);
}

#[test]
fn the_wald_bound_of_the_worked_example() {
    // Reference: ~83 canary requests and ~4 failed for the oracle SPRT at alpha = beta = 1%.
    let s1 = Scenario::select("S1").remove(0);
    let weir = &controllers(&s1, 0.01)[0];
    let bound = wald_failed_bound(&s1, weir).unwrap_or(f64::NAN);
    assert!((bound - 4.2).abs() < 0.2, "{bound}");
    assert_eq!(
        wald_failed_bound(&Scenario::select("S0").remove(0), weir),
        None
    );
}

#[test]
fn summaries_of_a_faulty_scenario() {
    let s1 = Scenario::select("S1").remove(0);
    let spec = &controllers(&s1, 0.01)[0];
    let runs = [
        run(RunEnd::RolledBack, 10, 100, 5),
        run(RunEnd::RolledBack, 20, 200, 10),
        run(RunEnd::Promoted, 300, 9_000, 450),
        run(RunEnd::RolledBack, 30, 300, 15),
    ];
    let row = summarize(&s1, spec, &runs);
    assert_eq!(row.missed_detection_rate, Some(0.25));
    assert_eq!(row.false_rollback_rate, None);
    assert_eq!(row.rollback_time_mean_s, Some(20.0));
    assert_eq!(row.promotion_time_median_s, Some(300.0));
    assert_eq!(row.failed_requests_mean, 120.0);
    // Missed more than beta: no ratio to the bound.
    assert_eq!(row.wald_ratio, None);
    let detected = summarize(&s1, spec, &runs[..2]);
    let bound = detected.wald_bound_failed.unwrap_or(f64::NAN);
    assert!((detected.wald_ratio.unwrap_or(f64::NAN) - 7.5 / bound).abs() < 1e-9);
}

#[test]
fn summaries_of_a_healthy_scenario() {
    let s0 = Scenario::select("S0").remove(0);
    let spec = &controllers(&s0, 0.01)[1];
    let mut runs = vec![run(RunEnd::Promoted, 300, 9_000, 45); 99];
    runs.push(run(RunEnd::RolledBack, 360, 3_000, 20));
    let row = summarize(&s0, spec, &runs);
    assert_eq!(row.false_rollback_rate, Some(0.01));
    let (low, high) = (
        row.false_rollback_ci_low.unwrap_or(f64::NAN),
        row.false_rollback_ci_high.unwrap_or(f64::NAN),
    );
    // Clopper-Pearson 95% for 1 in 100: [0.00025, 0.0545].
    assert!(
        (low - 0.000_253).abs() < 1e-5 && (high - 0.054_5).abs() < 1e-3,
        "{low} {high}"
    );
    assert_eq!(row.missed_detection_rate, None);
    assert_eq!(row.rollback_time_mean_s, None);
    assert_eq!(row.wald_ratio, None);
}

#[test]
fn the_sweep_covers_both_controllers_knobs() {
    let s0 = Scenario::select("S0").remove(0);
    let settings = sweep_controllers(&s0);
    assert_eq!(
        settings.len(),
        SWEEP_ALPHAS.len() + SWEEP_THRESHOLDS.len() * SWEEP_MIN_SUCCESS.len()
    );
    assert_eq!(
        settings.iter().filter(|(_, headline, _)| *headline).count(),
        2
    );
}

#[test]
fn held_runs_are_counted_as_held_and_missed() {
    let s5 = Scenario::select("S5-0.1").remove(0);
    let spec = &controllers(&s5, 0.01)[0];
    let runs = [
        run(RunEnd::Held, 7_200, 360, 18),
        run(RunEnd::Held, 7_200, 360, 18),
        run(RunEnd::RolledBack, 1_000, 50, 4),
        run(RunEnd::Promoted, 2_000, 100, 5),
    ];
    let row = summarize(&s5, spec, &runs);
    assert_eq!(row.held_rate, 0.5);
    assert_eq!(row.rollback_rate, 0.25);
    assert_eq!(row.promotion_rate, 0.25);
    // Missed: not rolled back, held or promoted.
    assert_eq!(row.missed_detection_rate, Some(0.75));
    assert_eq!(row.promotion_time_median_s, Some(2_000.0));
    let healthy = Scenario::select("S5-0.1-healthy").remove(0);
    let row = summarize(&healthy, spec, &runs);
    assert_eq!(row.held_rate, 0.5);
    assert_eq!(row.false_rollback_rate, Some(0.25));
}

#[test]
fn controllers_are_pooled_per_kind_of_scenario() {
    let faulty = Scenario::select("S1").remove(0);
    let healthy = Scenario::select("S0").remove(0);
    let specs = controllers(&faulty, 0.01);
    let rows = vec![
        summarize(
            &faulty,
            &specs[0],
            &[
                run(RunEnd::RolledBack, 10, 100, 5),
                run(RunEnd::Held, 7_200, 9_000, 450),
            ],
        ),
        summarize(
            &healthy,
            &specs[0],
            &[run(RunEnd::Promoted, 300, 9_000, 45); 3],
        ),
        summarize(
            &healthy,
            &specs[1],
            &[run(RunEnd::RolledBack, 360, 3_000, 20)],
        ),
    ];
    let summaries = summarize_controllers(&rows);
    assert_eq!(summaries.len(), 2);
    let weir = &summaries[0];
    assert_eq!(weir.controller, "weir");
    assert_eq!((weir.faulty_runs, weir.healthy_runs), (2, 3));
    assert_eq!(weir.missed_detection_rate, 0.5);
    assert_eq!(weir.faulty_held_rate, 0.5);
    assert_eq!(weir.faulty_promotion_rate, 0.0);
    assert_eq!(weir.promotion_rate, 1.0);
    let flagger = &summaries[1];
    assert_eq!((flagger.faulty_runs, flagger.healthy_runs), (0, 1));
    assert_eq!(flagger.false_rollback_rate, 1.0);
    assert_eq!(flagger.missed_detection_rate, 0.0);
}
