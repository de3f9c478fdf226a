//! Validity of the sequential judge, by simulation: over many healthy runs (the canary no worse
//! than tolerated), the share of runs rolled back is at most alpha, judged by the Clopper-Pearson
//! interval of the observed rate (its lower end must not exceed alpha). Deterministic: fixed
//! seeds, a SplitMix64 generator and binomial draws per window and version.
//!
//! Power for regressions is printed (`cargo test -p weir-analysis --test validity --
//! --nocapture`); only the easy case the reference works out (0.5% -> 5% at 100 req/s and 10%
//! weight) is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use weir_analysis::{
    Judge, SequentialConfig, SequentialJudge, VersionCounts, Window, clopper_pearson,
    wald_expected_samples,
};
use weir_core::model::VerdictOutcome;

/// SplitMix64 (Steele, Lea, Flood 2014).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Binomial(n, p) by inversion (sequential search of the CDF from 0); expected cost
    /// O(n min(p, 1 - p)), fine for the small counts of one window.
    fn binomial(&mut self, n: u64, p: f64) -> u64 {
        if n == 0 || p <= 0.0 {
            return 0;
        }
        if p >= 1.0 {
            return n;
        }
        if p > 0.5 {
            return n - self.binomial(n, 1.0 - p);
        }
        let q = 1.0 - p;
        let s = p / q;
        let a = (n as f64 + 1.0) * s;
        let mut r = q.powf(n as f64);
        let mut u = self.uniform();
        let mut x = 0;
        while u > r {
            u -= r;
            x += 1;
            if x > n {
                // Rounding left a sliver of probability: start again.
                return self.binomial(n, p);
            }
            r *= a / x as f64 - s;
        }
        x
    }
}

/// One simulated run: per second, traffic, error and slow rates of both versions.
#[derive(Clone, Copy)]
struct Scenario {
    name: &'static str,
    /// Requests per second (both versions together).
    rate: u64,
    seconds: u64,
    /// Canary weight in force at second t.
    weight: fn(u64) -> f64,
    /// (canary, primary) error probabilities at second t.
    errors: fn(u64) -> (f64, f64),
    /// (canary, primary) probabilities of a request slower than the threshold at second t.
    slow: fn(u64) -> (f64, f64),
}

/// What one run of the judge came to.
struct RunResult {
    /// The second at which it failed, if it did.
    failed_at: Option<u64>,
    canary_requests: u64,
    canary_errors: u64,
}

fn run(scenario: &Scenario, config: &SequentialConfig, seed: u64) -> RunResult {
    let mut rng = Rng::new(seed);
    let mut judge = SequentialJudge::new(config.clone());
    let mut window = Window::default();
    let (mut canary_requests, mut canary_errors) = (0, 0);
    for t in 0..scenario.seconds {
        let w = (scenario.weight)(t);
        let (pc, pp) = (scenario.errors)(t);
        let (sc, sp) = (scenario.slow)(t);
        let nc = rng.binomial(scenario.rate, w);
        let np = scenario.rate - nc;
        window.canary_weight = w;
        window.canary = VersionCounts {
            requests: nc,
            errors: rng.binomial(nc, pc),
            slow: rng.binomial(nc, sc),
        };
        window.primary = VersionCounts {
            requests: np,
            errors: rng.binomial(np, pp),
            slow: rng.binomial(np, sp),
        };
        canary_requests += nc;
        canary_errors += window.canary.errors;
        if judge.observe_outcome(&window) == VerdictOutcome::Fail {
            return RunResult {
                failed_at: Some(t),
                canary_requests,
                canary_errors,
            };
        }
    }
    RunResult {
        failed_at: None,
        canary_requests,
        canary_errors,
    }
}

/// Runs `runs` seeds (derived from `seed`) and returns the results.
fn many(scenario: &Scenario, config: &SequentialConfig, runs: u64, seed: u64) -> Vec<RunResult> {
    (0..runs)
        .map(|i| {
            run(
                scenario,
                config,
                seed.wrapping_mul(1_000_003).wrapping_add(i),
            )
        })
        .collect()
}

/// Asserts that the false-rollback rate over healthy runs is at most alpha (inside its 95%
/// Clopper-Pearson interval), and prints it.
fn assert_valid(scenario: &Scenario, config: &SequentialConfig, runs: u64, seed: u64) {
    let results = many(scenario, config, runs, seed);
    let failed = results.iter().filter(|r| r.failed_at.is_some()).count() as u64;
    let (lo, hi) = clopper_pearson(failed, runs, 0.05);
    println!(
        "validity {}: alpha {}, r0 {}: {failed} false rollbacks in {runs} runs = {:.4} \
         (95% CP [{lo:.4}, {hi:.4}])",
        scenario.name,
        config.alpha,
        config.tolerated_increase,
        failed as f64 / runs as f64,
    );
    assert!(
        lo <= config.alpha,
        "{}: false-rollback rate {failed}/{runs}, CP lower bound {lo} > alpha {}",
        scenario.name,
        config.alpha
    );
}

/// Prints power and harm for a regression scenario, and returns the detection rate.
fn report_power(scenario: &Scenario, config: &SequentialConfig, runs: u64, seed: u64) -> f64 {
    let results = many(scenario, config, runs, seed);
    let detected: Vec<&RunResult> = results.iter().filter(|r| r.failed_at.is_some()).collect();
    let power = detected.len() as f64 / runs as f64;
    let mean = |f: &dyn Fn(&RunResult) -> f64| {
        detected.iter().map(|r| f(r)).sum::<f64>() / detected.len().max(1) as f64
    };
    let (lo, hi) = clopper_pearson(detected.len() as u64, runs, 0.05);
    println!(
        "power {}: alpha {}: detected {}/{runs} = {power:.3} (95% CP [{lo:.3}, {hi:.3}]); \
         when detected, mean {:.1} s, {:.0} canary requests, {:.1} failed canary requests",
        scenario.name,
        config.alpha,
        detected.len(),
        mean(&|r| r.failed_at.unwrap_or(0) as f64 + 1.0),
        mean(&|r| r.canary_requests as f64),
        mean(&|r| r.canary_errors as f64),
    );
    power
}

const RATE: u64 = 100;
const TEN_MINUTES: u64 = 600;

fn constant_10(_: u64) -> f64 {
    0.1
}

/// 10% -> 20% -> ... -> 50%, one step a minute, then 50%.
fn stepping(t: u64) -> f64 {
    (0.1 * (1 + t / 60).min(5) as f64).min(0.5)
}

fn healthy_errors(_: u64) -> (f64, f64) {
    (0.005, 0.005)
}

fn healthy_slow(_: u64) -> (f64, f64) {
    (0.01, 0.01)
}

/// S6: both versions at 0.5%, then at 2% from minute 3 on (an incident behind both).
fn primary_incident(t: u64) -> (f64, f64) {
    if t < 180 {
        (0.005, 0.005)
    } else {
        (0.02, 0.02)
    }
}

fn with_latency(alpha: f64) -> SequentialConfig {
    SequentialConfig {
        alpha,
        latency_threshold_ms: Some(250.0),
        ..SequentialConfig::default()
    }
}

const S0_CONSTANT: Scenario = Scenario {
    name: "S0 healthy, constant 10% weight",
    rate: RATE,
    seconds: TEN_MINUTES,
    weight: constant_10,
    errors: healthy_errors,
    slow: healthy_slow,
};

const S0_STEPPING: Scenario = Scenario {
    name: "S0 healthy, weight 10% -> 50% by 10% a minute",
    weight: stepping,
    ..S0_CONSTANT
};

const S6_STEPPING: Scenario = Scenario {
    name: "S6 primary incident (both 0.5% -> 2% at 3 min), stepping weight",
    weight: stepping,
    errors: primary_incident,
    ..S0_CONSTANT
};

#[test]
fn healthy_constant_weight_alpha_005() {
    assert_valid(&S0_CONSTANT, &with_latency(0.05), 10_000, 1);
}

#[test]
fn healthy_stepping_weight_alpha_005() {
    assert_valid(&S0_STEPPING, &with_latency(0.05), 10_000, 2);
}

#[test]
fn primary_incident_stepping_weight_alpha_005() {
    assert_valid(&S6_STEPPING, &with_latency(0.05), 10_000, 3);
}

#[test]
fn healthy_stepping_weight_alpha_001() {
    assert_valid(&S0_STEPPING, &with_latency(0.01), 10_000, 4);
}

fn s8_errors(_: u64) -> (f64, f64) {
    // r = 1.2 exactly: the boundary of the null when r0 = 1.2 (the hardest healthy case).
    (0.006, 0.005)
}

#[test]
fn tolerated_increase_at_the_boundary_alpha_005() {
    let scenario = Scenario {
        name: "S8 boundary: r = r0 = 1.2, stepping weight",
        weight: stepping,
        errors: s8_errors,
        ..S0_CONSTANT
    };
    let config = SequentialConfig {
        tolerated_increase: 1.2,
        ..with_latency(0.05)
    };
    assert_valid(&scenario, &config, 5_000, 5);
}

fn s1_errors(_: u64) -> (f64, f64) {
    (0.05, 0.005)
}

#[test]
fn power_for_a_tenfold_regression_at_ten_percent_weight() {
    let scenario = Scenario {
        name: "S1 0.5% -> 5%, 10% weight",
        errors: s1_errors,
        ..S0_CONSTANT
    };
    let config = SequentialConfig::default();
    let power = report_power(&scenario, &config, 1_000, 6);
    let wald = wald_expected_samples(0.01, 0.01, 0.05, 0.005, 0.1, 1.0);
    println!(
        "  Wald's bound (alpha = beta = 0.01): {wald:.0} canary requests, {:.1} failed",
        0.05 * wald
    );
    assert!(power > 0.9, "power {power}");
}

#[test]
fn power_report_for_regressions() {
    fn r(ratio: f64) -> fn(u64) -> (f64, f64) {
        // fn pointers cannot capture: one per ratio.
        match ratio {
            1.5 => |_| (0.0075, 0.005),
            2.0 => |_| (0.01, 0.005),
            5.0 => |_| (0.025, 0.005),
            _ => |_| (0.05, 0.005),
        }
    }
    let config = SequentialConfig::default();
    for ratio in [1.5, 2.0, 5.0, 10.0] {
        let scenario = Scenario {
            name: match ratio {
                1.5 => "S1 r = 1.5 (0.5% -> 0.75%), stepping",
                2.0 => "S1 r = 2 (0.5% -> 1%), stepping",
                5.0 => "S1 r = 5 (0.5% -> 2.5%), stepping",
                _ => "S1 r = 10 (0.5% -> 5%), stepping",
            },
            weight: stepping,
            errors: r(ratio),
            ..S0_CONSTANT
        };
        report_power(&scenario, &config, 300, 7);
    }
    let crash = Scenario {
        name: "S2 crash (100% errors), 10% weight",
        errors: |_| (1.0, 0.005),
        ..S0_CONSTANT
    };
    report_power(&crash, &config, 300, 8);
    let latency = Scenario {
        name: "S3 latency: 1% -> 3% of requests over the threshold, stepping",
        weight: stepping,
        slow: |_| (0.03, 0.01),
        ..S0_CONSTANT
    };
    report_power(&latency, &with_latency(0.01), 300, 9);
}

#[test]
fn observe_and_observe_outcome_agree() {
    let scenario = Scenario {
        errors: |_| (0.02, 0.005),
        ..S0_STEPPING
    };
    let config = with_latency(0.01);
    let mut rng = Rng::new(11);
    let mut fast = SequentialJudge::new(config.clone());
    let mut full = SequentialJudge::new(config);
    for t in 0..scenario.seconds {
        let w = (scenario.weight)(t);
        let nc = rng.binomial(RATE, w);
        let window = Window {
            canary_weight: w,
            canary: VersionCounts {
                requests: nc,
                errors: rng.binomial(nc, 0.02),
                slow: rng.binomial(nc, 0.01),
            },
            primary: VersionCounts {
                requests: RATE - nc,
                errors: rng.binomial(RATE - nc, 0.005),
                slow: rng.binomial(RATE - nc, 0.01),
            },
            ..Window::default()
        };
        let verdict = full.observe(&window);
        assert_eq!(fast.observe_outcome(&window), verdict.outcome);
        assert_eq!(fast.log_e_value(), full.log_e_value());
    }
}

#[test]
fn binomial_sampler_has_the_right_mean_and_variance() {
    let mut rng = Rng::new(12);
    for &(n, p) in &[(100_u64, 0.005), (100, 0.3), (40, 0.8), (10, 0.5)] {
        let draws: Vec<f64> = (0..200_000).map(|_| rng.binomial(n, p) as f64).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let var = draws.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / draws.len() as f64;
        let (m, v) = (n as f64 * p, n as f64 * p * (1.0 - p));
        assert!(
            (mean - m).abs() < 5.0 * (v / 200_000.0).sqrt() + 1e-9,
            "{n} {p}: {mean}"
        );
        assert!((var / v - 1.0).abs() < 0.03, "{n} {p}: {var} vs {v}");
    }
}
