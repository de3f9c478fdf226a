use super::*;

fn conditions(canary_error: f64, primary_error: f64) -> Conditions {
    Conditions {
        primary_error,
        canary_error,
        primary_slow: 0.01,
        canary_slow: 0.05,
        faulty: true,
    }
}

#[test]
fn a_second_is_a_pure_function_of_seed_rate_and_index() {
    let stream = RequestStream::new(42, 100.0);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    stream.second(17, &mut a);
    stream.second(3, &mut b);
    stream.second(17, &mut b);
    assert_eq!(a, b);
    let mut c = Vec::new();
    RequestStream::new(43, 100.0).second(17, &mut c);
    assert_ne!(a, c);
    assert!(a.windows(2).all(|pair| pair[0].route <= pair[1].route));
}

#[test]
fn arrivals_are_poisson_at_the_rate() {
    let stream = RequestStream::new(1, 100.0);
    let mut requests = Vec::new();
    let (mut total, mut squares) = (0.0, 0.0);
    let seconds = 5_000;
    for second in 0..seconds {
        stream.second(second, &mut requests);
        let n = requests.len() as f64;
        total += n;
        squares += n * n;
    }
    let mean = total / f64::from(seconds);
    let variance = squares / f64::from(seconds) - mean * mean;
    assert!((mean - 100.0).abs() < 0.6, "{mean}");
    // Poisson: variance = mean.
    assert!((variance / mean - 1.0).abs() < 0.1, "{variance}");
}

#[test]
fn split_counts_match_a_direct_count() {
    let stream = RequestStream::new(9, 500.0);
    let mut requests = Vec::new();
    let mut tally = Tally::default();
    let conditions = conditions(0.3, 0.1);
    for second in 0..20 {
        stream.second(second, &mut requests);
        tally.fill(&requests, &conditions);
        for weight in [0.0, 0.1, 0.25, 0.5, 1.0] {
            let (canary, primary) = tally.split(weight);
            let mut expected_canary = VersionCounts::default();
            let mut expected_primary = VersionCounts::default();
            for request in &requests {
                let (counts, error, slow) = if request.route < weight {
                    (&mut expected_canary, 0.3, 0.05)
                } else {
                    (&mut expected_primary, 0.1, 0.01)
                };
                counts.requests += 1;
                counts.errors += u64::from(request.outcome < error);
                counts.slow += u64::from(request.latency > 1.0 - slow);
            }
            assert_eq!(canary, expected_canary);
            assert_eq!(primary, expected_primary);
        }
    }
}

#[test]
fn a_higher_weight_serves_a_superset() {
    // The same request goes to the canary under every weight above its routing draw: the
    // controllers differ only by the weight they set.
    let stream = RequestStream::new(5, 100.0);
    let mut requests = Vec::new();
    let mut tally = Tally::default();
    stream.second(0, &mut requests);
    tally.fill(&requests, &conditions(0.05, 0.005));
    let mut last = 0;
    for step in 0..=10 {
        let share = tally.canary_share(f64::from(step) / 10.0);
        assert!(share >= last);
        last = share;
    }
    assert_eq!(last, requests.len());
}
