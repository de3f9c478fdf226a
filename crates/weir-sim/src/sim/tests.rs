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
