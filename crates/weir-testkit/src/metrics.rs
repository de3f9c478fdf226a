//! Reading samples out of an OpenMetrics (or Prometheus text) body.

/// The sum of the samples of metric `name` whose label sets contain every one of `labels`
/// (written as they appear, e.g. `rollout="shop"`); `None` when no sample matches.
pub fn sample_sum(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let prefix = format!("{name}{{");
    let values: Vec<f64> = text
        .lines()
        .filter(|line| line.starts_with(&prefix))
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_matching_samples_only() {
        let text = "# TYPE x counter\nx_total{a=\"1\",b=\"2\"} 3\nx_total{a=\"1\",b=\"3\"} 4\nx_total{a=\"2\"} 10\nxy_total{a=\"1\"} 100\n";
        assert_eq!(sample_sum(text, "x_total", &["a=\"1\""]), Some(7.0));
        assert_eq!(sample_sum(text, "x_total", &["b=\"3\""]), Some(4.0));
        assert_eq!(sample_sum(text, "x_total", &["a=\"9\""]), None);
    }
}
