//! `weir bench blast-radius` end to end: the JSON report's shape and the S1 comparison.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

fn weir(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .output()
        .expect("weir runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const FIELDS: [&str; 10] = [
    "scenario",
    "controller",
    "canary_requests_mean",
    "failed_requests_mean",
    "failed_requests_p95",
    "rollback_time_mean_s",
    "missed_detection_rate",
    "false_rollback_rate",
    "promotion_time_median_s",
    "wald_ratio",
];

#[test]
fn s1_as_json() {
    let (ok, stdout, stderr) = weir(&[
        "bench",
        "blast-radius",
        "--scenario",
        "S1",
        "--seeds",
        "20",
        "--output",
        "json",
    ]);
    assert!(ok, "{stderr}");
    let rows: Value = serde_json::from_str(&stdout).expect("JSON output");
    let rows = rows.as_array().expect("an array");
    assert_eq!(rows.len(), 2);
    for row in rows {
        for field in FIELDS {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
        assert_eq!(row["scenario"], "S1");
        assert_eq!(row["seeds"], 20);
        assert!(row["failed_requests_mean"].is_number());
        assert!(row["false_rollback_rate"].is_null(), "S1 is faulty: {row}");
    }
    let by = |name: &str| {
        rows.iter()
            .find(|row| row["controller"] == name)
            .unwrap_or_else(|| panic!("no row for {name}"))
    };
    let (weir_row, flagger) = (by("weir"), by("flagger-style"));
    let failed = |row: &Value| row["failed_requests_mean"].as_f64().unwrap_or(f64::NAN);
    assert!(
        failed(weir_row) * 10.0 <= failed(flagger),
        "{weir_row} {flagger}"
    );
    assert_eq!(weir_row["missed_detection_rate"], 0.0);
    assert!(
        weir_row["wald_ratio"]
            .as_f64()
            .is_some_and(|ratio| ratio <= 3.0)
    );
    assert!(
        flagger["rollback_time_mean_s"]
            .as_f64()
            .is_some_and(|t| (300.0..=420.0).contains(&t))
    );
}

#[test]
fn healthy_custom_scenario_and_markdown() {
    let (ok, stdout, stderr) = weir(&[
        "bench",
        "blast-radius",
        "--rate",
        "50",
        "--primary-error-rate",
        "1",
        "--canary-error-rate",
        "1",
        "--seeds",
        "5",
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("| custom | weir |"), "{stdout}");
    assert!(stdout.contains("| custom | flagger-style |"), "{stdout}");
    // The table shows promoted, rolled back and held per row, and the summary line ends the
    // output with each controller's rates.
    assert!(
        stdout.contains("| promoted | rolled back | held | missed |"),
        "{stdout}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("**Summary** (1 scenario): weir: promotion "),
        "{stdout}"
    );
    assert!(last.contains("; flagger-style: promotion "), "{stdout}");
}

#[test]
fn the_summary_line_has_missed_detections_and_promotions() {
    let (ok, stdout, stderr) = weir(&[
        "bench",
        "blast-radius",
        "--scenario",
        "S5-0.1*",
        "--seeds",
        "4",
        "--max-duration",
        "20m",
        "--evidence-deadline",
        "5m",
        "--on-deadline",
        "rollback",
        "--baseline",
        "0",
    ]);
    assert!(ok, "{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("**Summary** (2 scenarios): weir: missed detection "),
        "{stdout}"
    );
    assert!(last.contains("of 4 faulty runs (promoted "), "{last}");
    assert!(last.contains("of 4 healthy runs (held "), "{last}");
    assert!(last.contains("flagger-style: missed detection "), "{last}");
}

#[test]
fn bad_evidence_flags_are_refused() {
    let (ok, _, stderr) = weir(&["bench", "blast-radius", "--on-deadline", "never"]);
    assert!(!ok);
    assert!(
        stderr.contains("--on-deadline") && stderr.contains("rollback"),
        "{stderr}"
    );
    let (ok, _, stderr) = weir(&["bench", "blast-radius", "--baseline", "1.5s"]);
    assert!(!ok);
    assert!(
        stderr.contains("--baseline must be a whole number of seconds"),
        "{stderr}"
    );
    let (ok, _, stderr) = weir(&["bench", "blast-radius", "--max-duration", "0"]);
    assert!(!ok);
    assert!(
        stderr.contains("--max-duration must be at least 1s"),
        "{stderr}"
    );
    let (ok, _, stderr) = weir(&["bench", "blast-radius", "--evidence-deadline", "soon"]);
    assert!(!ok);
    assert!(stderr.contains("--evidence-deadline"), "{stderr}");
}

#[test]
fn bad_flags_are_refused() {
    let (ok, _, stderr) = weir(&["bench", "blast-radius", "--scenario", "S42"]);
    assert!(!ok);
    assert!(stderr.contains("no scenario named"), "{stderr}");
    let (ok, _, stderr) = weir(&["bench", "blast-radius", "--rate", "10"]);
    assert!(!ok);
    assert!(stderr.contains("--canary-error-rate"), "{stderr}");
}

#[test]
fn the_chart_is_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("chart.svg");
    let (ok, stdout, stderr) = weir(&[
        "bench",
        "blast-radius",
        "--scenario",
        "S0",
        "--seeds",
        "3",
        "--chart",
        path.to_str().expect("utf-8 path"),
    ]);
    assert!(ok, "{stderr}");
    let svg = std::fs::read_to_string(&path).expect("chart written");
    assert!(svg.starts_with("<svg") && svg.contains("</svg>"));
    assert!(
        stdout.contains("| flagger-style | threshold=5 min=99% (table) |"),
        "{stdout}"
    );
}
