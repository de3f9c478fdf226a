//! Reading samples out of an OpenMetrics (or Prometheus text) exposition.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's name (`weir_router_requests_total`, `..._bucket`).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// An exposition, parsed enough to look samples up by name and labels.
#[derive(Debug, Clone)]
pub struct Exposition {
    /// The text as received, for failure messages.
    pub text: String,
    /// Every sample, in order.
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// Parses `text`; panics on a line that is not a comment or a sample (a broken exposition
    /// is a failed test).
    pub fn parse(text: impl Into<String>) -> Exposition {
        let text = text.into();
        let samples = text
            .lines()
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| parse_sample(line).unwrap_or_else(|| panic!("not a sample: {line}")))
            .collect();
        Exposition { text, samples }
    }

    /// Every sample named `name` whose labels include `labels` (exact values).
    pub fn all(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|sample| sample.name == name && has_labels(sample, labels))
            .collect()
    }

    /// The value of the one sample named `name` with `labels`, if there is one; panics when
    /// several match (the labels do not name one series).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found = self.all(name, labels);
        assert!(
            found.len() <= 1,
            "{name} {labels:?} matches {} samples:\n{}",
            found.len(),
            self.text
        );
        found.first().map(|sample| sample.value)
    }

    /// The sum of the samples named `name` with `labels`; `None` when none matches.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found = self.all(name, labels);
        (!found.is_empty()).then(|| found.iter().map(|sample| sample.value).sum())
    }
}

/// The sum of the samples of metric `name` whose label sets contain every one of `labels`
/// (written as they appear, e.g. `rollout="shop"`); `None` when no sample matches.
pub fn sample_sum(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let labels: Vec<(&str, &str)> = labels
        .iter()
        .map(|label| {
            label
                .split_once("=\"")
                .and_then(|(key, value)| Some((key, value.strip_suffix('"')?)))
                .unwrap_or_else(|| panic!("a label is written name=\"value\", not {label}"))
        })
        .collect();
    let samples: Vec<Sample> = text
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(parse_sample)
        .filter(|sample| sample.name == name && has_labels(sample, &labels))
        .collect();
    (!samples.is_empty()).then(|| samples.iter().map(|sample| sample.value).sum())
}

fn has_labels(sample: &Sample, labels: &[(&str, &str)]) -> bool {
    labels
        .iter()
        .all(|(label, value)| sample.labels.get(*label).map(String::as_str) == Some(*value))
}

/// `name{label="value",...} value [timestamp]`, or `name value [timestamp]`.
fn parse_sample(line: &str) -> Option<Sample> {
    let (name, labels, rest) = match line.find('{') {
        Some(open) if open < line.find(' ').unwrap_or(line.len()) => {
            let (labels, rest) = parse_labels(&line[open + 1..])?;
            (&line[..open], labels, rest)
        }
        _ => {
            let (name, rest) = line.split_once(' ')?;
            (name, BTreeMap::new(), rest)
        }
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Labels up to the closing brace, and what follows it.
fn parse_labels(mut text: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        text = text.trim_start_matches([',', ' ']);
        if let Some(rest) = text.strip_prefix('}') {
            return Some((labels, rest));
        }
        let (label, after) = text.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (at, '"') => break at,
                (_, other) => value.push(other),
            }
        };
        labels.insert(label.trim().to_string(), value);
        text = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE x counter\nx_total{a=\"1\",b=\"2\"} 3\nx_total{a=\"1\",b=\"3\"} 4\nx_total{a=\"2\",xa=\"1\"} 10\nxy_total{a=\"1\"} 100\nplain 7 1700000000\nq{msg=\"say \\\"hi\\\", ok\",le=\"+Inf\"} +Inf\n# EOF\n";

    #[test]
    fn sums_matching_samples_only() {
        assert_eq!(sample_sum(TEXT, "x_total", &["a=\"1\""]), Some(7.0));
        assert_eq!(sample_sum(TEXT, "x_total", &["b=\"3\""]), Some(4.0));
        assert_eq!(sample_sum(TEXT, "x_total", &["a=\"9\""]), None);
        // A label is matched by name, not as a substring of another one.
        assert_eq!(sample_sum(TEXT, "x_total", &["a=\"2\""]), Some(10.0));
        assert_eq!(sample_sum(TEXT, "plain", &[]), Some(7.0));
    }

    #[test]
    fn parses_labels_values_and_escapes() {
        let exposition = Exposition::parse(TEXT);
        assert_eq!(exposition.samples.len(), 6);
        assert_eq!(
            exposition.value("x_total", &[("a", "1"), ("b", "2")]),
            Some(3.0)
        );
        assert_eq!(exposition.sum("x_total", &[("a", "1")]), Some(7.0));
        assert_eq!(exposition.value("plain", &[]), Some(7.0));
        let quoted = &exposition.all("q", &[])[0];
        assert_eq!(quoted.labels["msg"], "say \"hi\", ok");
        assert_eq!(quoted.value, f64::INFINITY);
    }

    #[test]
    #[should_panic(expected = "matches 2 samples")]
    fn a_value_must_name_one_series() {
        Exposition::parse(TEXT).value("x_total", &[("a", "1")]);
    }
}
