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
