//! The benchmark's report as Markdown.

use std::fmt::Write as _;

use crate::bench::{ControllerSummary, Row, SweepPoint, summarize_controllers};

/// A count or a time: one decimal below 100, none above.
fn number(value: f64) -> String {
    if !value.is_finite() {
        "-".into()
    } else if value.abs() < 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

fn optional(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), number)
}

/// A rate in percent with enough digits for small values.
fn percent(value: f64) -> String {
    let p = value * 100.0;
    if p == 0.0 {
        "0%".into()
    } else if p < 1.0 {
        format!("{p:.2}%")
    } else {
        format!("{p:.1}%")
    }
}

fn optional_percent(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), percent)
}

/// The table of the benchmark, one line per scenario and controller.
pub fn markdown_table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| scenario | controller | canary requests mean / p95 | failed mean / p95 | rollback after onset, mean s | promoted | rolled back | held | missed | false rollbacks [95% CI] | promotion median / p95 s | Wald bound | x Wald |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for row in rows {
        let false_rollbacks = match (
            row.false_rollback_rate,
            row.false_rollback_ci_low,
            row.false_rollback_ci_high,
        ) {
            (Some(rate), Some(low), Some(high)) => {
                format!("{} [{}, {}]", percent(rate), percent(low), percent(high))
            }
            _ => "-".into(),
        };
        let promotion = match (row.promotion_time_median_s, row.promotion_time_p95_s) {
            (Some(median), Some(p95)) => format!("{} / {}", number(median), number(p95)),
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} / {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.scenario,
            row.controller,
            number(row.canary_requests_mean),
            number(row.canary_requests_p95),
            number(row.failed_requests_mean),
            number(row.failed_requests_p95),
            optional(row.rollback_time_mean_s),
            percent(row.promotion_rate),
            percent(row.rollback_rate),
            percent(row.held_rate),
            optional_percent(row.missed_detection_rate),
            false_rollbacks,
            promotion,
            optional(row.wald_bound_failed),
            row.wald_ratio
                .map_or_else(|| "-".into(), |ratio| format!("{ratio:.2}")),
        );
    }
    out
}

/// The summary line: per controller, over every scenario of the rows, the missed detections
/// (bad canaries promoted or held) and the promotions of healthy canaries, so the trade-off
/// shows at a glance.
pub fn summary_line(rows: &[Row]) -> String {
    let parts: Vec<String> = summarize_controllers(rows)
        .iter()
        .map(controller_summary)
        .collect();
    let scenarios = {
        let mut seen: Vec<&str> = Vec::new();
        for row in rows {
            if !seen.contains(&row.scenario.as_str()) {
                seen.push(&row.scenario);
            }
        }
        seen.len()
    };
    format!(
        "**Summary** ({scenarios} scenario{}): {}.\n",
        if scenarios == 1 { "" } else { "s" },
        parts.join("; ")
    )
}

fn controller_summary(summary: &ControllerSummary) -> String {
    let mut parts = Vec::new();
    if summary.faulty_runs > 0 {
        parts.push(format!(
            "missed detection {} of {} faulty runs (promoted {}, held {})",
            percent(summary.missed_detection_rate),
            summary.faulty_runs,
            percent(summary.faulty_promotion_rate),
            percent(summary.faulty_held_rate),
        ));
    }
    if summary.healthy_runs > 0 {
        parts.push(format!(
            "promotion {} of {} healthy runs (held {}, rolled back {})",
            percent(summary.promotion_rate),
            summary.healthy_runs,
            percent(summary.healthy_held_rate),
            percent(summary.false_rollback_rate),
        ));
    }
    format!("{}: {}", summary.controller, parts.join(", "))
}

/// The scenarios of a set of rows, with their descriptions.
pub fn markdown_scenarios(rows: &[Row]) -> String {
    let mut out = String::new();
    let mut seen: Vec<&str> = Vec::new();
    for row in rows {
        if !seen.contains(&row.scenario.as_str()) {
            seen.push(&row.scenario);
            let _ = writeln!(out, "- **{}**: {}", row.scenario, row.summary);
        }
    }
    out
}

/// The knob sweep as a table.
pub fn markdown_sweep(points: &[SweepPoint]) -> String {
    let mut out = String::from(
        "| controller | knobs | S0 false rollbacks [95% CI] | S1 failed requests, mean | S1 missed |\n|---|---|---|---|---|\n",
    );
    for point in points {
        let _ = writeln!(
            out,
            "| {} | {}{} | {} [{}, {}] | {} | {} |",
            point.controller,
            point.knob,
            if point.headline { " (table)" } else { "" },
            percent(point.false_rollback_rate),
            percent(point.false_rollback_ci_low),
            percent(point.false_rollback_ci_high),
            number(point.failed_requests_mean),
            percent(point.missed_detection_rate),
        );
    }
    out
}

#[cfg(test)]
mod tests;
