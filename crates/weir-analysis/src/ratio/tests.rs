use super::*;
use crate::stats::ratio_from_theta;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn sprt_increments_match_hand_computed_values() {
    // w = 0.1, r0 = 1, r1 = 2: theta0 = 0.1, theta1 = 0.2 / 1.1.
    // A canary error adds ln(theta1 / theta0) = ln(2 / 1.1) = 0.5978370;
    // a primary error adds ln((1 - theta1) / (1 - theta0)) = ln(1 / 1.1) = -0.0953102.
    let mut test = RatioTest::new(1.0, Mixture::Grid(vec![2.0]));
    test.observe(0.1, 1, 0);
    assert!(close(test.log_e_value(), 0.597_837_000_8, 1e-9));
    test.observe(0.1, 0, 1);
    assert!(close(test.log_e_value(), 0.502_526_821_0, 1e-9));
    // At w = 0.5 (a step): theta0 = 0.5, theta1 = 2/3: +ln(4/3) per canary error,
    // +ln(2/3) per primary error.
    test.observe(0.5, 2, 1);
    let expected = 0.502_526_821_0 + 2.0 * 0.287_682_072_5 - 0.405_465_108_1;
    assert!(close(test.log_e_value(), expected, 1e-9));
    assert_eq!((test.canary_events(), test.primary_events()), (3, 2));
}

#[test]
fn grid_mixture_is_the_average_of_the_sprts() {
    // r1 = 3 at w = 0.1: theta1 = 0.25: ln(2.5) per canary error, ln(0.75 / 0.9) per primary.
    let mut test = RatioTest::new(1.0, Mixture::Grid(vec![2.0, 3.0]));
    test.observe(0.1, 1, 1);
    let l2 = (2.0_f64 / 1.1).ln() + (1.0_f64 / 1.1).ln();
    let l3 = 2.5_f64.ln() + (0.75_f64 / 0.9).ln();
    let expected = ((l2.exp() + l3.exp()) / 2.0).ln();
    assert!(close(test.log_e_value(), expected, 1e-12));
    assert!(close(test.log_e_value(), 0.624_928_802_5, 1e-9));
}

#[test]
fn batches_equal_single_events() {
    let mut batch = RatioTest::new(1.2, Mixture::default());
    let mut single = RatioTest::new(1.2, Mixture::default());
    batch.observe(0.3, 4, 7);
    for _ in 0..4 {
        single.observe(0.3, 1, 0);
    }
    for _ in 0..7 {
        single.observe(0.3, 0, 1);
    }
    assert!(close(batch.log_e_value(), single.log_e_value(), 1e-12));
}

#[test]
fn designs_at_or_below_r0_are_dropped() {
    let test = RatioTest::new(2.0, Mixture::Grid(vec![1.5, 2.0, 3.0, 10.0]));
    assert_eq!(test.design_ratios(), vec![3.0, 10.0]);
    let test = RatioTest::new(2.0, Mixture::Grid(vec![1.5]));
    assert_eq!(test.design_ratios(), vec![4.0]);
}

#[test]
fn uninformative_weights_are_skipped() {
    let mut test = RatioTest::new(1.0, Mixture::default());
    test.observe(0.0, 3, 5);
    test.observe(1.0, 3, 0);
    test.observe(f64::NAN, 1, 1);
    assert_eq!(test.log_e_value(), 0.0);
    assert_eq!(test.skipped_events(), 13);
    assert_eq!(test.canary_events(), 0);
}

/// Simpson's rule for the integral of f over [a, b] with n (even) intervals.
fn simpson(f: impl Fn(f64) -> f64, a: f64, b: f64, n: usize) -> f64 {
    let h = (b - a) / n as f64;
    let mut sum = f(a) + f(b);
    for i in 1..n {
        let x = a + i as f64 * h;
        sum += if i % 2 == 1 { 4.0 } else { 2.0 } * f(x);
    }
    sum * h / 3.0
}

#[test]
fn beta_mixture_matches_direct_integration() {
    let (theta0, k, nc, np) = (0.1_f64, 2.0_f64, 3_u64, 10_u64);
    let (a, b) = (k * theta0, k * (1.0 - theta0));
    // With theta = u^(1/a), theta^(a-1) d theta = du / a, which removes the singularity at 0.
    let integrand = |u: f64| {
        let t = u.powf(1.0 / a);
        t.powi(nc as i32) * (1.0 - t).powf(np as f64 + b - 1.0) / a
    };
    let prior = |u: f64| (1.0 - u.powf(1.0 / a)).powf(b - 1.0) / a;
    let null = theta0.powi(nc as i32) * (1.0 - theta0).powi(np as i32);
    let two_sided =
        simpson(integrand, 0.0, 1.0, 200_000) / simpson(prior, 0.0, 1.0, 200_000) / null;
    assert!(close(
        beta_mixture_log_e(theta0, k, nc, np, false),
        two_sided.ln(),
        1e-6
    ));
    let from = theta0.powf(a);
    let one_sided =
        simpson(integrand, from, 1.0, 200_000) / simpson(prior, from, 1.0, 200_000) / null;
    assert!(close(
        beta_mixture_log_e(theta0, k, nc, np, true),
        one_sided.ln(),
        1e-6
    ));
    // Nothing observed: E = 1.
    assert!(close(beta_mixture_log_e(0.2, 1.0, 0, 0, true), 0.0, 1e-12));
    // The one-sided mixture does not grow when the canary looks better.
    assert!(beta_mixture_log_e(0.1, 1.0, 0, 200, true) < 0.0);
    assert!(beta_mixture_log_e(0.1, 1.0, 0, 200, false) > 0.0);
}

#[test]
fn beta_mode_restarts_at_weight_changes() {
    let mut test = RatioTest::new(1.0, Mixture::Beta { k: 1.0 });
    test.observe(0.1, 2, 5);
    test.observe(0.1, 1, 3);
    let first = beta_mixture_log_e(0.1, 1.0, 3, 8, true);
    assert!(close(test.log_e_value(), first, 1e-12));
    test.observe(0.2, 4, 4);
    let second = beta_mixture_log_e(0.2, 1.0, 4, 4, true);
    assert!(close(test.log_e_value(), first + second, 1e-12));
    assert!(test.is_beta_mixture());
}

#[test]
fn estimated_ratio_and_confidence_sequence() {
    let mut test = RatioTest::new(1.0, Mixture::default());
    assert!(test.estimated_ratio().is_nan());
    assert_eq!(test.confidence_sequence(0.01), (0.0, f64::INFINITY));
    test.observe(0.2, 30, 40);
    // One weight: the MLE inverts the observed share.
    let mle = ratio_from_theta(0.2, 30.0 / 70.0);
    assert!(close(test.estimated_ratio(), mle, 1e-9 * mle));
    let (lo, hi) = test.confidence_sequence(0.01);
    assert!(lo < mle && mle < hi, "{lo} {mle} {hi}");
    // Coherence with the test at r0: the lower end is above r0 exactly when the e-value at r0
    // reached 2/alpha.
    assert_eq!(lo > 1.0, test.log_e_value() >= (2.0_f64 / 0.01).ln());
    assert!(lo > 1.0, "{lo}");
    // Tighter with more data.
    test.observe(0.4, 300, 150);
    let (lo2, hi2) = test.confidence_sequence(0.01);
    assert!(hi2 / lo2 < hi / lo);
    // No canary events: estimate 0, lower end 0, a finite upper end with enough primary events.
    let mut clean = RatioTest::new(1.0, Mixture::default());
    clean.observe(0.1, 0, 200);
    assert_eq!(clean.estimated_ratio(), 0.0);
    let (lo, hi) = clean.confidence_sequence(0.05);
    assert_eq!(lo, 0.0);
    assert!(hi.is_finite() && hi < 1.0, "{hi}");
    clean.reset();
    assert_eq!(clean.canary_events() + clean.primary_events(), 0);
    assert_eq!(clean.log_e_value(), 0.0);
}
