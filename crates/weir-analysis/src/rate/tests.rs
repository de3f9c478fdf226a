use super::*;

/// SplitMix64: a small deterministic generator for coverage checks.
struct SplitMix(u64);

impl SplitMix {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn bounds_bracket_the_observed_rate_and_narrow_with_more_requests() {
    let alpha = 0.0025;
    let mut previous_width = f64::INFINITY;
    for n in [100.0, 1_000.0, 10_000.0, 100_000.0] {
        let k = 0.005 * n;
        let (lo, hi) = (rate_lower_bound(k, n, alpha), rate_upper_bound(k, n, alpha));
        assert!(lo < 0.005 && 0.005 < hi, "n {n}: [{lo}, {hi}]");
        assert!(hi - lo < previous_width, "n {n}: width {}", hi - lo);
        previous_width = hi - lo;
    }
    // 100,000 requests at 0.5%: within a fifth of the rate.
    assert!(previous_width < 0.002, "{previous_width}");
}

#[test]
fn no_requests_bound_nothing_and_no_events_bound_below_at_zero() {
    assert_eq!(rate_upper_bound(0.0, 0.0, 0.01), 1.0);
    assert_eq!(rate_lower_bound(0.0, 0.0, 0.01), 0.0);
    assert_eq!(rate_lower_bound(0.0, 500.0, 0.01), 0.0);
    let upper = rate_upper_bound(0.0, 500.0, 0.01);
    // Zero events in 500: a fixed-sample 99% bound is 0.92%; the anytime-valid one is wider.
    assert!(upper > 0.0092 && upper < 0.03, "{upper}");
}

#[test]
fn the_upper_bound_holds_at_every_moment_at_its_level() {
    // 2,000 runs of 3,000 requests at 1%: the share of runs in which the bound EVER fell below
    // the true rate must stay near or below alpha (checked at every 10th request: peeking).
    let (alpha, p, runs) = (0.05, 0.01, 2_000);
    let mut rng = SplitMix(7);
    let mut crossed = 0;
    for _ in 0..runs {
        let mut k = 0.0;
        for n in 1..=3_000 {
            if rng.uniform() < p {
                k += 1.0;
            }
            if n % 10 == 0 && rate_upper_bound(k, f64::from(n), alpha) < p {
                crossed += 1;
                break;
            }
        }
    }
    let share = f64::from(crossed) / f64::from(runs);
    assert!(share <= alpha, "{share}");
}

#[test]
fn a_rate_test_rejects_a_rate_five_times_its_reference_and_not_the_reference() {
    let mut bad = RateTest::new(0.005, &[1.5, 2.0, 3.0, 5.0, 10.0, 30.0]);
    let mut good = bad.clone();
    let mut requests = 0;
    while bad.log_e_value() < (100.0_f64).ln() {
        bad.observe(20, 1); // 5%
        good.observe(200, 1); // 0.5%
        requests += 20;
        assert!(requests < 2_000, "not rejected after {requests} requests");
    }
    assert!(good.log_e_value() < 0.0, "{}", good.log_e_value());
    assert_eq!(good.reference(), 0.005);
}
