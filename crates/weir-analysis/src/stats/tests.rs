use super::*;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn theta_of_weight_and_ratio() {
    assert!(close(theta(0.1, 1.0), 0.1, 1e-15));
    assert!(close(theta(0.5, 1.0), 0.5, 1e-15));
    // w = 0.1, r = 10: 1 / (1 + 0.9)
    assert!(close(theta(0.1, 10.0), 1.0 / 1.9, 1e-15));
    // w = 0.2, r = 2: 0.4 / 1.2
    assert!(close(theta(0.2, 2.0), 1.0 / 3.0, 1e-15));
    assert_eq!(theta(0.3, f64::INFINITY), 1.0);
    assert_eq!(theta(0.0, 5.0), 0.0);
    assert_eq!(theta(1.0, 5.0), 1.0);
    for &w in &[0.05, 0.1, 0.37, 0.5, 0.9] {
        for &r in &[0.2, 1.0, 1.2, 3.0, 30.0] {
            assert!(close(ratio_from_theta(w, theta(w, r)), r, 1e-9 * r));
        }
    }
}

#[test]
fn clopper_pearson_known_values() {
    let (lo, hi) = clopper_pearson(0, 10, 0.05);
    assert_eq!(lo, 0.0);
    assert!(close(hi, 0.308_497_1, 1e-6), "{hi}");
    // 5 of 10 at 95%: (0.187086, 0.812914)
    let (lo, hi) = clopper_pearson(5, 10, 0.05);
    assert!(close(lo, 0.187_086_0, 1e-6), "{lo}");
    assert!(close(hi, 0.812_914_0, 1e-6), "{hi}");
    // 10 of 10: (0.6915, 1)
    let (lo, hi) = clopper_pearson(10, 10, 0.05);
    assert!(close(lo, 0.691_502_9, 1e-6), "{lo}");
    assert_eq!(hi, 1.0);
    // 1 of 100 at 99%: lower = 1 - 0.995^(1/100); upper solves
    // (1 - p)^100 + 100 p (1 - p)^99 = 0.005.
    let (lo, hi) = clopper_pearson(1, 100, 0.01);
    assert!(close(lo, 5.012_416_2e-5, 1e-11), "{lo}");
    assert!(close(hi, 0.071_957_68, 1e-7), "{hi}");
    assert_eq!(clopper_pearson(0, 0, 0.05), (0.0, 1.0));
}

#[test]
fn wald_numerator_matches_reference() {
    let a = wald_numerator(0.01, 0.01);
    assert!(close(a, 4.50, 0.005), "{a}");
    assert!(close(a, 0.98 * 99.0_f64.ln(), 1e-12));
}

#[test]
fn wald_bound_matches_reference_worked_example() {
    // 0.5% -> 5% at 10% weight, r0 = 1, alpha = beta = 0.01: ~8 error events, ~83 canary
    // requests, ~4 failed canary requests.
    let events = wald_expected_events(0.01, 0.01, 0.05, 0.005, 0.1, 1.0);
    assert!((7.5..8.3).contains(&events), "{events}");
    let kl = kl_bernoulli(theta(0.1, 10.0), 0.1);
    assert!(close(kl, 0.570, 0.001), "{kl}");
    let canary = wald_expected_samples(0.01, 0.01, 0.05, 0.005, 0.1, 1.0);
    assert!((80.0..86.0).contains(&canary), "{canary}");
    assert!(close(canary, 0.1 * events / 0.0095, 1e-9));
    assert!((3.9..4.3).contains(&(0.05 * canary)));
    // Nothing to detect.
    assert_eq!(
        wald_expected_samples(0.01, 0.01, 0.005, 0.005, 0.1, 1.0),
        f64::INFINITY
    );
    assert_eq!(
        wald_expected_samples(0.01, 0.01, 0.011, 0.01, 0.1, 1.2),
        f64::INFINITY
    );
    // A crash against a clean primary: every error is the canary's, KL = ln(1/theta0).
    let crash = wald_expected_events(0.01, 0.01, 1.0, 0.0, 0.1, 1.0);
    assert!(close(
        crash,
        wald_numerator(0.01, 0.01) / 10.0_f64.ln(),
        1e-12
    ));
}
