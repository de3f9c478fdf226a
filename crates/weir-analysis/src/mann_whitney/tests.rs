use super::*;

/// SplitMix64, for reproducible latencies.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Log-normal latencies around `median` ms.
    fn latency(&mut self, median: f64) -> f64 {
        // Box-Muller.
        let (u1, u2) = (self.uniform().max(1e-300), self.uniform());
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        median * (0.5 * z).exp()
    }
}

fn window(rng: &mut Rng, canary_median: f64) -> Window {
    Window {
        canary_weight: 0.1,
        canary_latencies_ms: (0..10).map(|_| rng.latency(canary_median)).collect(),
        primary_latencies_ms: (0..90).map(|_| rng.latency(100.0)).collect(),
        ..Window::default()
    }
}

#[test]
fn scores_ties_and_pairs_by_arrival() {
    let mut judge = MannWhitneyJudge::new(MannWhitneyConfig {
        primaries_per_canary: 2,
        ..MannWhitneyConfig::default()
    });
    let w = Window {
        canary_latencies_ms: vec![10.0, 10.0, 10.0],
        primary_latencies_ms: vec![5.0, 10.0, 20.0, 20.0, 1.0],
        ..Window::default()
    };
    let verdict = judge.observe(&w);
    // Pairs: 10 vs (5, 10) -> 0.75; 10 vs (20, 20) -> 0; the third canary waits for a second
    // primary latency.
    assert_eq!(judge.pairs(), 2);
    assert_eq!(verdict.evidence["meanScore"], 0.375);
    // The first bet is 0 (no past), the second bets on the first score.
    let lambda: f64 = (0.25_f64 / 2.0) / ((0.0625 + 0.25) / 2.0);
    let expected = (lambda.min(1.0) * -0.5).ln_1p();
    assert!((judge.log_e_value() - expected).abs() < 1e-12);
}

#[test]
fn fails_on_a_slower_canary_and_not_on_an_equal_one() {
    let mut rng = Rng(1);
    let mut slow = MannWhitneyJudge::new(MannWhitneyConfig::default());
    let mut seconds = 0;
    while slow.observe_outcome(&window(&mut rng, 150.0)) != VerdictOutcome::Fail {
        seconds += 1;
        assert!(seconds < 120, "no failure");
    }
    assert!(
        slow.evidence()["summary"]
            .as_str()
            .unwrap()
            .starts_with("canary slower")
    );
    // Equal latency distributions: false failures at most alpha (checked over 200 runs of
    // 5 minutes at alpha = 0.05: at most 10 expected, 20 would be far out).
    let mut false_failures = 0;
    for seed in 0..200 {
        let mut rng = Rng(1000 + seed);
        let mut judge = MannWhitneyJudge::new(MannWhitneyConfig {
            alpha: 0.05,
            ..MannWhitneyConfig::default()
        });
        for _ in 0..300 {
            if judge.observe_outcome(&window(&mut rng, 100.0)) == VerdictOutcome::Fail {
                false_failures += 1;
                break;
            }
        }
    }
    assert!(false_failures <= 20, "{false_failures}");
    slow.reset();
    assert_eq!((slow.pairs(), slow.log_e_value()), (0, 0.0));
    assert_eq!(slow.name(), "mann-whitney");
}
