use weir_flags::Outcome;

use super::report_of;
use crate::error::{ApiError, ErrorCode};

fn problems(body: &str) -> Vec<(String, String)> {
    match report_of(body.as_bytes()) {
        Ok(report) => panic!("accepted: {report:?}"),
        Err(ApiError::Invalid { errors, .. }) => errors
            .into_iter()
            .map(|error| (error.path, error.message))
            .collect(),
        Err(other) => panic!("{other:?}"),
    }
}

fn paths(body: &str) -> Vec<String> {
    problems(body).into_iter().map(|(path, _)| path).collect()
}

#[test]
fn a_report_per_variant() {
    let report = report_of(
        br#"{"variants": {
            "on": {"requests": 120, "errors": 3, "latencyMs": [12.5, 40, 0]},
            "off": {"requests": 480, "errors": 5, "slow": 2}
        }}"#,
    )
    .unwrap();
    assert_eq!(
        report["on"],
        Outcome {
            requests: 120,
            errors: 3,
            slow: 0,
            latencies_ms: vec![12.5, 40.0, 0.0],
        }
    );
    assert_eq!(
        report["off"],
        Outcome {
            requests: 480,
            errors: 5,
            slow: 2,
            latencies_ms: Vec::new(),
        }
    );
    // errors and slow default to 0.
    let report = report_of(br#"{"variants": {"on": {"requests": 7}}}"#).unwrap();
    assert_eq!((report["on"].requests, report["on"].errors), (7, 0));
}

#[test]
fn a_body_that_is_not_a_report_names_what_is_wrong() {
    assert_eq!(paths("{"), ["(body)"]);
    assert!(problems("{")[0].1.contains("is not valid JSON"));
    assert_eq!(paths("[1]"), ["(body)"]);
    assert_eq!(paths("{}"), ["variants"]);
    assert_eq!(paths(r#"{"variants": {}}"#), ["variants"]);
    assert_eq!(paths(r#"{"variants": [1]}"#), ["variants"]);
    assert_eq!(
        paths(r#"{"variant": {"on": {"requests": 1}}}"#),
        ["variant", "variants"]
    );
    assert_eq!(paths(r#"{"variants": {"on": 5}}"#), ["variants.on"]);
}

#[test]
fn every_bad_field_of_every_variant_is_named() {
    let found = problems(
        r#"{"variants": {
            "on": {"requests": -1, "errors": 1.5, "slow": "2", "latency": [1]},
            "off": {"errors": 1, "latencyMs": [1, "x", null]},
            "red": {"requests": 3, "latencyMs": 4}
        }}"#,
    );
    let paths: Vec<&str> = found.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "variants.off.latencyMs[1]",
            "variants.off.latencyMs[2]",
            "variants.off.requests",
            "variants.on.errors",
            "variants.on.latency",
            "variants.on.requests",
            "variants.on.slow",
            "variants.red.latencyMs",
        ],
        "{found:?}"
    );
    let message = |path: &str| {
        found
            .iter()
            .find(|(at, _)| at == path)
            .map(|(_, message)| message.clone())
            .unwrap()
    };
    assert!(message("variants.on.requests").contains("-1 is not allowed: a whole number >= 0"));
    assert!(message("variants.on.latency").contains("unknown field"));
    assert!(message("variants.off.requests").contains("is required"));
}

#[test]
fn huge_counts_are_not_whole_numbers_of_u64() {
    // Beyond u64: not a count (the bound per report is weir-flags' rule).
    assert_eq!(
        paths(r#"{"variants": {"on": {"requests": 18446744073709551616}}}"#),
        ["variants.on.requests"]
    );
}

#[test]
fn unknown_variants_answer_422_with_their_paths() {
    let error: ApiError =
        weir_flags::ReportError::UnknownVariations(vec![weir_core::FieldError::with_value(
            "variants.purple",
            "\"purple\"",
            "one of off, on",
        )])
        .into();
    assert_eq!(error.code(), ErrorCode::Unprocessable);
    assert_eq!(error.status().as_u16(), 422);
}
