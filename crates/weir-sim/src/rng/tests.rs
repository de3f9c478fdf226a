use super::*;

#[test]
fn same_seed_same_sequence_and_streams_differ() {
    let mut a = Rng::new(7, 3);
    let mut b = Rng::new(7, 3);
    let mut c = Rng::new(7, 4);
    let xs: Vec<u64> = (0..100).map(|_| a.0.next_u64()).collect();
    let ys: Vec<u64> = (0..100).map(|_| b.0.next_u64()).collect();
    let zs: Vec<u64> = (0..100).map(|_| c.0.next_u64()).collect();
    assert_eq!(xs, ys);
    assert_ne!(xs, zs);
}

#[test]
fn uniforms_look_uniform() {
    let mut rng = Rng::new(1, 1);
    let n = 200_000;
    let mut buckets = [0u32; 10];
    let mut sum = 0.0;
    for _ in 0..n {
        let u = rng.uniform();
        assert!((0.0..1.0).contains(&u));
        sum += u;
        buckets[(u * 10.0) as usize] += 1;
    }
    assert!((sum / n as f64 - 0.5).abs() < 0.005);
    for count in buckets {
        // 20,000 expected per bucket, sd ~134.
        assert!((19_300..20_700).contains(&count), "{count}");
    }
}

#[test]
fn exponential_mean() {
    let mut rng = Rng::new(2, 9);
    let n = 100_000;
    let mean: f64 = (0..n).map(|_| rng.exponential(4.0)).sum::<f64>() / n as f64;
    assert!((mean - 0.25).abs() < 0.005, "{mean}");
}

/// The mean and variance of `n` draws.
fn moments(draws: impl Iterator<Item = u64>) -> (f64, f64) {
    let values: Vec<f64> = draws.map(|k| k as f64).collect();
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, variance)
}

#[test]
fn poisson_mean_and_variance_small_and_large() {
    let mut rng = Rng::new(3, 5);
    // Below 10: inversion; the mean and the variance are both the mean.
    for mean in [0.1, 3.6, 9.5] {
        let (m, v) = moments((0..50_000).map(|_| rng.poisson(mean)));
        // Standard error of the mean: sqrt(mean / 50,000).
        let se = (mean / 50_000.0_f64).sqrt();
        assert!((m - mean).abs() < 5.0 * se, "mean {mean}: {m}");
        assert!((v / mean - 1.0).abs() < 0.05, "mean {mean}: variance {v}");
    }
    // Above: PTRS, from just above the switch to an hour at 100 req/s.
    for mean in [10.0, 360.0, 360_000.0] {
        let (m, v) = moments((0..50_000).map(|_| rng.poisson(mean)));
        let se = (mean / 50_000.0_f64).sqrt();
        assert!((m - mean).abs() < 5.0 * se, "mean {mean}: {m}");
        assert!((v / mean - 1.0).abs() < 0.05, "mean {mean}: variance {v}");
    }
    assert_eq!(rng.poisson(0.0), 0);
    assert_eq!(rng.poisson(f64::NAN), 0);
}

#[test]
fn poisson_probabilities_at_a_mean_of_twelve() {
    // P(K = k) for the PTRS branch against the exact mass function.
    let mut rng = Rng::new(8, 1);
    let n = 200_000;
    let mut counts = [0u32; 40];
    for _ in 0..n {
        let k = rng.poisson(12.0) as usize;
        if k < counts.len() {
            counts[k] += 1;
        }
    }
    let mean: f64 = 12.0;
    for (k, count) in counts.iter().enumerate().take(25).skip(4) {
        let p = (-mean + k as f64 * mean.ln() - ln_gamma(k as f64 + 1.0)).exp();
        let expected = p * f64::from(n);
        let sd = (expected * (1.0 - p)).sqrt();
        assert!(
            (f64::from(*count) - expected).abs() < 5.0 * sd,
            "k = {k}: {count} vs {expected:.0}"
        );
    }
}

#[test]
fn binomial_mean_and_variance() {
    let mut rng = Rng::new(4, 2);
    for (n, p) in [(360_000u64, 0.005), (360, 0.01), (1_000, 0.3), (1_000, 0.9)] {
        let (m, v) = moments((0..20_000).map(|_| rng.binomial(n, p)));
        let expected = n as f64 * p;
        let variance = expected * (1.0 - p);
        let se = (variance / 20_000.0).sqrt();
        assert!((m - expected).abs() < 5.0 * se, "{n} x {p}: {m}");
        assert!((v / variance - 1.0).abs() < 0.06, "{n} x {p}: variance {v}");
    }
    assert_eq!(rng.binomial(0, 0.5), 0);
    assert_eq!(rng.binomial(10, 0.0), 0);
    assert_eq!(rng.binomial(10, 1.0), 10);
    assert!((0..1_000).all(|_| rng.binomial(7, 0.5) <= 7));
}
