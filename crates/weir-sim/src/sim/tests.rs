use super::*;
use crate::bench::{controllers, weir_judge};

fn scenario(name: &str) -> Scenario {
    Scenario::select(name).remove(0)
}

#[test]
fn telemetry_horizon() {
    assert_eq!(Telemetry::EMBEDDED.horizon(0), 0);
    assert_eq!(Telemetry::EMBEDDED.horizon(7), 7);
    let scraped = Telemetry {
        scrape_interval_s: 15,
        delay_s: 5,
    };
    assert_eq!(scraped.horizon(19), 0);
    assert_eq!(scraped.horizon(20), 15);
    assert_eq!(scraped.horizon(34), 15);
    assert_eq!(scraped.horizon(35), 30);
}

#[test]
fn the_plan_schedule() {
    let flagger = ControllerSpec::flagger_style(60, 5, 99.0);
    assert_eq!(flagger.planned_weight(0), 0.1);
    assert_eq!(flagger.planned_weight(59), 0.1);
    assert_eq!(flagger.planned_weight(60), 0.2);
    assert_eq!(flagger.planned_weight(250), 0.5);
    assert_eq!(flagger.planned_weight(10_000), 0.5);
}

#[test]
fn same_seed_same_results() {
    let s1 = scenario("S1");
    let specs = controllers(&s1, 0.01);
    let config = SimConfig::default();
    let a = simulate(&s1, &specs, 11, &config);
    let b = simulate(&s1, &specs, 11, &config);
    assert_eq!(a, b);
    let differ = (12..20).any(|seed| simulate(&s1, &specs, seed, &config) != a);
    assert!(differ);
}

#[test]
fn a_controller_sees_the_same_stream_alone_or_with_others() {
    // Running controllers together (lock-step over one stream) or one by one gives the same
    // results: each sees exactly the requests of the seed, whatever the others do.
    let s1 = scenario("S1");
    let specs = controllers(&s1, 0.01);
    let config = SimConfig::default();
    for seed in 0..5 {
        let together = simulate(&s1, &specs, seed, &config);
        let weir = simulate(&s1, &specs[..1], seed, &config);
        let flagger = simulate(&s1, &specs[1..], seed, &config);
        assert_eq!(together, [weir[0], flagger[0]]);
    }
}

#[test]
fn identical_controllers_get_identical_results() {
    let s0 = scenario("S0");
    let flagger = ControllerSpec::flagger_style(60, 5, 99.0);
    let results = simulate(
        &s0,
        &[flagger.clone(), flagger.named("twin")],
        3,
        &SimConfig::default(),
    );
    assert_eq!(results[0], results[1]);
}

#[test]
fn healthy_canary_promotes_on_the_plans_schedule() {
    // stepWeight 10, maxWeight 50, interval 1m: 10% at 0 s, 20% at 60 s, ..., 50% at 240 s,
    // promotion at the next passing tick, 300 s.
    let s0 = scenario("S0");
    let specs = controllers(&s0, 0.01);
    let results = simulate(&s0, &specs, 1, &SimConfig::default());
    for result in results {
        assert_eq!(result.end, RunEnd::Promoted);
        assert_eq!(result.end_s, 300);
        // ~ (10 + 20 + 30 + 40 + 50)% of 100 req/s for 60 s each = 9,000 canary requests.
        assert!((8_500..9_500).contains(&result.canary_requests));
    }
}

#[test]
fn a_verdict_rolls_back_between_ticks() {
    let s2 = scenario("S2");
    let weir = ControllerSpec::weir(60, weir_judge(&s2, 0.01));
    let result = simulate(&s2, &[weir], 4, &SimConfig::default())[0];
    assert_eq!(result.end, RunEnd::RolledBack);
    assert!(result.by_verdict);
    assert!(result.end_s < 60, "{}", result.end_s);
}

#[test]
fn telemetry_delay_delays_the_verdict() {
    let s2 = scenario("S2");
    let weir = ControllerSpec::weir(60, weir_judge(&s2, 0.01));
    let fast = simulate(&s2, std::slice::from_ref(&weir), 4, &SimConfig::default())[0];
    let slow_config = SimConfig {
        telemetry: Telemetry {
            scrape_interval_s: 15,
            delay_s: 10,
        },
        ..SimConfig::default()
    };
    let slow = simulate(&s2, &[weir], 4, &slow_config)[0];
    assert_eq!(slow.end, RunEnd::RolledBack);
    assert!(
        slow.end_s >= 25 && slow.end_s > fast.end_s,
        "{fast:?} {slow:?}"
    );
    assert!(slow.canary_errors > fast.canary_errors);
}

#[test]
fn raw_latencies_do_not_change_counts() {
    let s3 = scenario("S3-median50");
    let specs = controllers(&s3, 0.01);
    let plain = simulate(&s3, &specs, 2, &SimConfig::default());
    let raw = simulate(
        &s3,
        &specs,
        2,
        &SimConfig {
            latencies: true,
            max_duration_s: 400,
            ..SimConfig::default()
        },
    );
    assert_eq!(plain, raw);
}

#[test]
fn the_pre_run_baseline_is_deterministic_and_follows_the_primary() {
    let s1 = scenario("S1");
    assert_eq!(pre_run_baseline(&s1, 5, 0), None);
    let a = pre_run_baseline(&s1, 5, 3600);
    assert_eq!(a, pre_run_baseline(&s1, 5, 3600));
    assert!(a.is_some());
    assert!((6..30).any(|seed| pre_run_baseline(&s1, seed, 3600) != a));
    // An hour at 100 req/s: ~360,000 requests (sd 600), 0.5% errors (~1,800), 1% slow (the
    // primary's p99 is the threshold: ~3,600).
    let seeds = 200u64;
    let (mut requests, mut errors, mut slow) = (0.0, 0.0, 0.0);
    for seed in 0..seeds {
        let baseline = pre_run_baseline(&s1, seed, 3600).unwrap_or_default();
        assert!(
            (357_000..363_000).contains(&baseline.requests),
            "{baseline:?}"
        );
        requests += baseline.requests as f64;
        errors += baseline.errors as f64;
        slow += baseline.slow.unwrap_or(0) as f64;
    }
    let n = seeds as f64;
    assert!((requests / n - 360_000.0).abs() < 200.0, "{}", requests / n);
    assert!(
        (errors / requests - 0.005).abs() < 0.000_1,
        "{}",
        errors / requests
    );
    assert!(
        (slow / requests - 0.01).abs() < 0.000_2,
        "{}",
        slow / requests
    );
    // At 0.1 req/s an hour is ~360 requests.
    let low = scenario("S5-0.1");
    let mean = (0..seeds)
        .map(|seed| pre_run_baseline(&low, seed, 3600).map_or(0, |b| b.requests) as f64)
        .sum::<f64>()
        / n;
    assert!((mean - 360.0).abs() < 10.0, "{mean}");
}

#[test]
fn the_baseline_leaves_the_in_run_stream_unchanged() {
    // The baseline has a generator of its own: the requests of every second, and so every
    // controller without a judge, are the same with or without it.
    let s5 = scenario("S5-1");
    let flagger = ControllerSpec::flagger_style(60, 5, 99.0);
    let without = SimConfig {
        baseline_s: 0,
        ..SimConfig::default()
    };
    for seed in 0..20 {
        let plain = simulate(&s5, std::slice::from_ref(&flagger), seed, &without);
        let with = simulate(
            &s5,
            std::slice::from_ref(&flagger),
            seed,
            &SimConfig::default(),
        );
        assert_eq!(plain, with, "seed {seed}");
    }
    // And its generator is none of the per-second ones.
    let mut baseline = Rng::new(9, BASELINE_STREAM);
    let first = baseline.uniform();
    assert!((0..100_000u64).all(|second| Rng::new(9, second).uniform() != first));
}

#[test]
fn the_baseline_reaches_the_judge() {
    // S5-1 at 1 req/s: the canary's few requests are compared with an hour of the primary's.
    // With the baseline weir rolls back more bad canaries within the plan's 5 minutes than
    // without, on the same streams.
    let s5 = scenario("S5-1");
    let weir = ControllerSpec::weir(60, weir_judge(&s5, 0.01));
    let rolled_back = |baseline_s: u32| {
        let config = SimConfig {
            baseline_s,
            max_duration_s: 300,
            ..SimConfig::default()
        };
        (0..40)
            .filter(|seed| {
                simulate(&s5, std::slice::from_ref(&weir), *seed, &config)[0].end
                    == RunEnd::RolledBack
            })
            .count()
    };
    let (without, with) = (rolled_back(0), rolled_back(3600));
    eprintln!(
        "S5-1, 40 seeds, rolled back within 300 s: {without} without a baseline, {with} with"
    );
    assert!(with > without, "with {with}, without {without}");
}

#[test]
fn a_run_without_evidence_is_held_at_the_limit() {
    // 0.1 req/s, healthy, no baseline, a 10-minute limit: the plan ends at 300 s with a few
    // dozen canary requests, far too few to show health within 2 points; weir holds at 50%
    // until the limit, the Flagger-style controller promotes at the plan's end.
    let s5 = scenario("S5-0.1-healthy");
    let specs = controllers(&s5, 0.01);
    let config = SimConfig {
        max_duration_s: 600,
        baseline_s: 0,
        ..SimConfig::default()
    };
    let runs = crate::bench::run_seeds(&s5, &specs, 0..20, &config, 1);
    for run in &runs[0] {
        assert_eq!(run.end, RunEnd::Held, "{run:?}");
        assert_eq!(run.end_s, 600);
    }
    let weir = crate::bench::summarize(&s5, &specs[0], &runs[0]);
    assert_eq!(weir.held_rate, 1.0);
    assert_eq!(weir.promotion_rate, 0.0);
    assert_eq!(weir.false_rollback_rate, Some(0.0));
    let flagger = crate::bench::summarize(&s5, &specs[1], &runs[1]);
    assert_eq!(flagger.held_rate, 0.0);
    assert!(flagger.promotion_rate > 0.5, "{flagger:?}");
}

#[test]
fn the_evidence_deadline_policy_applies() {
    // The same starved runs with a 10-minute deadline: `rollback` rolls back once the wait
    // (from the plan's end at 300 s) passes 10 minutes; `promote` promotes then.
    let s5 = scenario("S5-0.1-healthy");
    let config = SimConfig {
        max_duration_s: 1800,
        baseline_s: 0,
        ..SimConfig::default()
    };
    let weir = ControllerSpec::weir(60, weir_judge(&s5, 0.01));
    let deadline = GoDuration::from_secs(600);
    for (action, end) in [
        (EvidenceDeadlineAction::Rollback, RunEnd::RolledBack),
        (EvidenceDeadlineAction::Promote, RunEnd::Promoted),
        (EvidenceDeadlineAction::Hold, RunEnd::Held),
    ] {
        let spec = weir.clone().evidence_deadline(deadline, action);
        assert_eq!(spec.rollout_spec().analysis.evidence.on_deadline, action);
        for seed in 0..5 {
            let run = simulate(&s5, std::slice::from_ref(&spec), seed, &config)[0];
            assert_eq!(run.end, end, "{action:?} seed {seed}: {run:?}");
            assert!(!run.by_verdict);
            if end != RunEnd::Held {
                // The wait starts at the plan's end (300 s) and passes the deadline at the
                // first tick after 900 s.
                assert!((900..=1000).contains(&run.end_s), "{action:?}: {run:?}");
            }
        }
    }
}

#[test]
fn the_controllers_evidence_rules() {
    let flagger = ControllerSpec::flagger_style(60, 5, 99.0);
    assert_eq!(
        flagger.rollout_spec().analysis.evidence,
        EvidenceRule::no_harm()
    );
    let s0 = scenario("S0");
    let weir = ControllerSpec::weir(60, weir_judge(&s0, 0.01));
    assert_eq!(
        weir.rollout_spec().analysis.evidence,
        EvidenceRule::default()
    );
}
