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
        // Equal rates: never worse; once enough requests show it, healthy (Pass).
        let verdict = judge.observe(&window(0.2, (20, 1), (80, 4)));
        assert_ne!(verdict.outcome, VerdictOutcome::Fail);
    }
    assert!(judge.health().shown);
    assert!(judge.log_e_value() < 0.0);
}

fn slow_window(weight: f64, canary: (u64, u64), primary: (u64, u64)) -> Window {
    let mut w = window(weight, (canary.0, 0), (primary.0, 0));
    w.canary.slow = canary.1;
    w.primary.slow = primary.1;
    w
}

#[test]
fn evidence_has_every_field() {
    let mut judge = SequentialJudge::new(SequentialConfig {
        latency_threshold_ms: Some(300.0),
        ..SequentialConfig::default()
    });
    let verdict = judge.observe(&window(0.1, (100, 2), (900, 5)));
    let e = &verdict.evidence;
    for field in [
        "canaryRequests",
        "canaryErrors",
        "primaryRequests",
        "primaryErrors",
        "eValue",
        "logEValue",
        "threshold",
        "estimatedRatio",
        "ratioInterval",
        "latency",
        "summary",
    ] {
        assert!(e.get(field).is_some(), "missing {field} in {e}");
    }
    assert_eq!(e["canaryRequests"], 100);
    assert_eq!(e["canaryErrors"], 2);
    assert_eq!(e["primaryRequests"], 900);
    assert_eq!(e["primaryErrors"], 5);
    assert_eq!(e["threshold"], 100.0);
    assert_eq!(e["ratioInterval"].as_array().unwrap().len(), 2);
    assert_eq!(e["latency"]["state"], "on");
    assert_eq!(e["latency"]["thresholdMs"], 300.0);
    // 2 of 7 errors at w = 0.1: r = (2/7)(0.9) / ((5/7)(0.1)) = 3.6
    let ratio = e["estimatedRatio"].as_f64().unwrap();
    assert!((ratio - 3.6).abs() < 1e-6, "{ratio}");
    assert!((e["logEValue"].as_f64().unwrap() - judge.log_e_value()).abs() < 1e-12);
    let summary = verdict.summary().unwrap();
    assert!(summary.contains("errors 2/100"), "{summary}");
    assert!(summary.contains("slow (> 300 ms)"), "{summary}");
    // Into the core's verdict.
    let core = verdict.clone().into_judge_verdict("sequential");
    assert_eq!(core.judge, "sequential");
    assert_eq!(core.outcome, VerdictOutcome::Inconclusive);
    assert_eq!(core.evidence, verdict.evidence);
    // Serializable as is (no NaN or infinity left in it).
    assert!(serde_json::to_string(&core).is_ok());
}

#[test]
fn reset_forgets_everything() {
    let mut judge = SequentialJudge::new(SequentialConfig::default());
    while judge.observe_outcome(&window(0.1, (100, 20), (900, 4))) != VerdictOutcome::Fail {}
    assert!(judge.has_failed());
    // A failure is final until reset, even if later windows look fine.
    for _ in 0..100 {
        assert_eq!(
            judge.observe_outcome(&window(0.1, (100, 0), (900, 9))),
            VerdictOutcome::Fail
        );
    }
    judge.reset();
    assert!(!judge.has_failed());
    assert_eq!(judge.log_e_value(), 0.0);
    let verdict = judge.observe(&window(0.1, (0, 0), (0, 0)));
    assert_eq!(verdict.outcome, VerdictOutcome::Inconclusive);
    assert_eq!(verdict.evidence["canaryRequests"], 0);
    assert_eq!(verdict.evidence["windows"], 1);
    assert_eq!(verdict.evidence["eValue"], 1.0);
}

#[test]
fn latency_exceedances_fail_on_their_own() {
    let mut judge = SequentialJudge::new(SequentialConfig {
        latency_threshold_ms: Some(250.0),
        ..SequentialConfig::default()
    });
    // Slow requests: 10% of the canary's vs 1% of the primary's; errors equal.
    let mut seconds = 0;
    loop {
        let mut w = slow_window(0.1, (100, 10), (900, 9));
        w.canary.errors = 1;
        w.primary.errors = 9;
        if judge.observe_outcome(&w) == VerdictOutcome::Fail {
            break;
        }
        seconds += 1;
        assert!(seconds < 60);
    }
    let evidence = judge.evidence();
    assert_eq!(evidence["failedOn"], "latency");
    assert!(evidence["latency"]["eValue"].as_f64().unwrap() > 100.0);
    // The combined e-value is the average of the two.
    let (le, ll) = (
        judge.error_test().log_e_value(),
        judge.latency_test().log_e_value(),
    );
    let avg = ((le.exp() + ll.exp()) / 2.0).ln();
    assert!((judge.log_e_value() - avg).abs() < 1e-9);
}

#[test]
fn warm_up_fixes_the_threshold_from_the_primary_p99() {
    let mut judge = SequentialJudge::new(SequentialConfig {
        latency_warmup_requests: 200,
        ..SequentialConfig::default()
    });
    let latencies =
        |n: usize, offset: f64| -> Vec<f64> { (0..n).map(|i| offset + (i % 100) as f64).collect() };
    let mut w = window(0.1, (10, 0), (90, 0));
    w.primary_latencies_ms = latencies(100, 0.0);
    w.canary_latencies_ms = latencies(10, 0.0);
    assert_eq!(judge.observe(&w).evidence["latency"]["state"], "warmingUp");
    assert_eq!(judge.latency_threshold_ms(), None);
    judge.observe(&w);
    // 200 latencies, 0..99 twice: the nearest-rank p99 is the 198th, 98.
    assert_eq!(judge.latency_threshold_ms(), Some(98.0));
    // From now on the judge counts exceedances itself from the raw latencies (1% of the
    // primary's); a canary with 60% of its requests above the threshold fails.
    let mut slow = w.clone();
    slow.canary_latencies_ms = latencies(10, 95.0);
    let mut windows = 0;
    while judge.observe_outcome(&slow) != VerdictOutcome::Fail {
        windows += 1;
        assert!(windows < 200);
    }
    let evidence = judge.evidence();
    assert_eq!(evidence["latency"]["thresholdMs"], 98.0);
    assert!(evidence["latency"]["canarySlow"].as_u64().unwrap() > 0);
}

#[test]
fn beta_mixture_mode_fails_on_a_regression() {
    let mut judge =
        SequentialJudge::with_mixture(SequentialConfig::default(), Some(Mixture::Beta { k: 1.0 }));
    let mut seconds = 0;
    while judge.observe_outcome(&window(0.1, (100, 5), (900, 4))) != VerdictOutcome::Fail {
        seconds += 1;
        assert!(seconds < 300);
    }
    assert_eq!(judge.evidence()["mixture"], "beta");
}

#[test]
fn settings_are_checked() {
    let bad = |config: SequentialConfig| SequentialJudge::try_new(config).err();
    assert_eq!(
        bad(SequentialConfig {
            alpha: 0.0,
            ..SequentialConfig::default()
        }),
        Some(ConfigError::Alpha(0.0))
    );
    assert_eq!(
        bad(SequentialConfig {
            tolerated_increase: 5.0,
            design_ratios: vec![2.0, 3.0],
            ..SequentialConfig::default()
        }),
        Some(ConfigError::DesignRatios(5.0))
    );
    assert_eq!(
        bad(SequentialConfig {
            latency_threshold_ms: Some(-1.0),
            ..SequentialConfig::default()
        }),
        Some(ConfigError::LatencyThreshold(-1.0))
    );
    assert!(SequentialJudge::try_new(SequentialConfig::default()).is_ok());
    // new() falls back to usable values.
    let judge = SequentialJudge::new(SequentialConfig {
        alpha: 2.0,
        tolerated_increase: 5.0,
        design_ratios: vec![2.0],
        ..SequentialConfig::default()
    });
    assert_eq!(judge.config().alpha, 0.01);
    assert_eq!(
        judge.config().design_ratios,
        vec![7.5, 10.0, 15.0, 25.0, 50.0, 150.0]
    );
    // Serde form.
    let json = serde_json::to_value(SequentialConfig::default()).unwrap();
    assert_eq!(json["toleratedIncrease"], 1.0);
    let back: SequentialConfig =
        serde_json::from_value(serde_json::json!({"alpha": 0.05})).unwrap();
    assert_eq!(back.alpha, 0.05);
    assert_eq!(back.design_ratios, DEFAULT_DESIGN_RATIOS.to_vec());
}

#[test]
fn windows_at_full_or_zero_weight_are_ignored() {
    let mut judge = SequentialJudge::new(SequentialConfig::default());
    // A canary at 0% that still reports errors (telemetry lag) or at 100% proves nothing.
    judge.observe(&window(0.0, (5, 5), (995, 0)));
    judge.observe(&window(1.0, (1000, 50), (0, 0)));
    assert_eq!(judge.log_e_value(), 0.0);
    assert_eq!(judge.evidence()["errors"]["skippedEvents"], 55);
}

#[test]
fn a_better_canary_is_never_rolled_back() {
    let mut judge = SequentialJudge::new(SequentialConfig::default());
    for _ in 0..600 {
        assert_eq!(
            judge.observe_outcome(&window(0.3, (30, 0), (70, 5))),
            VerdictOutcome::Inconclusive
        );
    }
    let evidence = judge.evidence();
    assert_eq!(evidence["estimatedRatio"], 0.0);
    assert!(evidence["ratioInterval"][1].as_f64().unwrap() < 0.05);
}

mod evidence_of_health {
    use super::*;
    use crate::Baseline;

    /// One second at `rate` requests, canary share `w`, error rates `pc`, `pp` (expected
    /// counts, rounded down, with the remainders carried so the totals stay exact).
    struct Feed {
        carry: [f64; 4],
    }

    impl Feed {
        fn second(&mut self, rate: f64, w: f64, pc: f64, pp: f64) -> Window {
            let wants = [
                rate * w,
                rate * w * pc,
                rate * (1.0 - w),
                rate * (1.0 - w) * pp,
            ];
            let mut counts = [0u64; 4];
            for i in 0..4 {
                self.carry[i] += wants[i];
                counts[i] = self.carry[i].floor() as u64;
                self.carry[i] -= counts[i] as f64;
            }
            window(w, (counts[0], counts[1]), (counts[2], counts[3]))
        }
    }

    #[test]
    fn a_healthy_canary_at_high_traffic_is_shown_healthy_within_two_minutes() {
        let mut judge = SequentialJudge::new(SequentialConfig::default());
        let mut feed = Feed { carry: [0.0; 4] };
        let mut verdict = None;
        for _ in 0..120 {
            verdict = Some(judge.observe(&feed.second(100.0, 0.1, 0.005, 0.005)));
        }
        let verdict = verdict.unwrap();
        assert_eq!(
            verdict.outcome,
            VerdictOutcome::Pass,
            "{:?}",
            verdict.evidence
        );
        let health = judge.health();
        assert!(health.shown);
        assert!(
            health
                .summary
                .starts_with("evidence of health after 1200 canary requests"),
            "{}",
            health.summary
        );
        assert_eq!(verdict.evidence["health"]["shown"], true);
    }

    #[test]
    fn at_one_request_per_second_it_waits_and_says_for_how_many_requests() {
        let mut judge = SequentialJudge::new(SequentialConfig::default());
        let mut feed = Feed { carry: [0.0; 4] };
        for _ in 0..300 {
            let verdict = judge.observe(&feed.second(1.0, 0.3, 0.005, 0.005));
            assert_eq!(verdict.outcome, VerdictOutcome::Inconclusive);
        }
        let health = judge.health();
        assert!(!health.shown);
        let needed = health.needed_canary_requests.unwrap();
        assert!(
            needed > health.canary_requests && needed < 5_000,
            "{needed}"
        );
        assert!(
            health.summary.starts_with(&format!(
                "waiting for evidence: {} of ~{needed} canary requests; about ",
                health.canary_requests
            )),
            "{}",
            health.summary
        );
        assert!(
            health.summary.contains("at 0.3 req/s"),
            "{}",
            health.summary
        );
        // Then the traffic the estimate asked for arrives: shown by then (the estimate is for
        // the rates seen, which these are).
        let mut seconds = 0;
        while !judge.health().shown {
            judge.observe(&feed.second(1.0, 0.3, 0.005, 0.005));
            seconds += 1;
            assert!(
                f64::from(seconds) * 0.3 < 2.0 * needed as f64,
                "{}",
                judge.health().summary
            );
        }
        assert!(!judge.has_failed());
    }

    #[test]
    fn a_ten_times_worse_canary_is_never_shown_healthy() {
        let mut judge = SequentialJudge::new(SequentialConfig {
            alpha: 1e-9, // never rolls back here: only the health side is under test
            ..SequentialConfig::default()
        });
        let mut feed = Feed { carry: [0.0; 4] };
        for _ in 0..20_000 {
            judge.observe_outcome(&feed.second(1.0, 0.5, 0.05, 0.005));
        }
        let health = judge.health();
        assert!(!health.shown, "{}", health.summary);
        assert_eq!(health.needed_canary_requests, None, "{}", health.summary);
        assert!(
            health.summary.contains("cannot be shown"),
            "{}",
            health.summary
        );
    }

    #[test]
    fn a_baseline_rolls_back_a_bad_low_traffic_canary_sooner_than_the_run_alone() {
        // 0.2 req/s, half to the canary at 5% errors; the primary at 0.5% served 36,000
        // requests before the run (two days at this rate).
        let baseline = Baseline {
            requests: 36_000,
            errors: 180,
            slow: None,
        };
        let seconds_to_fail = |baseline: Option<Baseline>| {
            let mut judge = SequentialJudge::new(SequentialConfig {
                baseline,
                ..SequentialConfig::default()
            });
            let mut feed = Feed { carry: [0.0; 4] };
            (1..=20_000).find(|_| {
                judge.observe_outcome(&feed.second(0.2, 0.5, 0.05, 0.005)) == VerdictOutcome::Fail
            })
        };
        let with = seconds_to_fail(Some(baseline)).expect("the baseline test rolls back");
        let without = seconds_to_fail(None).unwrap_or(u32::MAX);
        assert!(
            f64::from(with) < 0.75 * f64::from(without),
            "with a baseline {with} s, without {without} s"
        );
    }

    #[test]
    fn a_baseline_does_not_roll_back_a_canary_as_good_as_the_primary_even_if_the_primary_got_worse()
    {
        // The primary was at 0.5% before the run and is at 2% during it, like the canary (a
        // primary incident): the primary's own requests retire the baseline before the
        // canary's errors can count against it.
        let mut judge = SequentialJudge::new(SequentialConfig {
            baseline: Some(Baseline {
                requests: 360_000,
                errors: 1_800,
                slow: None,
            }),
            ..SequentialConfig::default()
        });
        let mut feed = Feed { carry: [0.0; 4] };
        for second in 0..600 {
            let outcome = judge.observe_outcome(&feed.second(100.0, 0.1, 0.02, 0.02));
            assert_ne!(
                outcome,
                VerdictOutcome::Fail,
                "second {second}: {}",
                judge.evidence()
            );
        }
    }

    #[test]
    fn a_health_margin_outside_zero_to_one_is_refused() {
        for margin in [0.0, 1.0, -0.1, f64::NAN] {
            let config = SequentialConfig {
                health_margin: Some(margin),
                ..SequentialConfig::default()
            };
            assert!(
                matches!(config.validate(), Err(ConfigError::HealthMargin(_))),
                "{margin}"
            );
        }
        let never = SequentialJudge::new(SequentialConfig {
            health_margin: None,
            ..SequentialConfig::default()
        });
        assert!(!never.health().shown);
    }
}
