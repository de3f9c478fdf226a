//! The Pareto chart of the knob sweep, as a hand-written SVG document.
//!
//! x: the false-rollback rate on S0 (log scale; runs without a false rollback sit on a "0"
//! line at the left); y: the mean failed canary requests on S1 (log scale). Each knob setting
//! is a marker; each controller's Pareto front (no other setting of it is better on both axes)
//! is a line. A hollow marker missed more than 1% of the faulty canaries on S1.

use std::fmt::Write as _;

use crate::bench::SweepPoint;

const WIDTH: f64 = 840.0;
const HEIGHT: f64 = 520.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 610.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 450.0;
/// Where the "0" column sits, left of the log axis.
const ZERO_X: f64 = LEFT + 18.0;
const LOG_LEFT: f64 = LEFT + 50.0;
const X_MIN_LOG: f64 = -4.0;

fn color(controller: &str) -> &'static str {
    if controller == "weir" {
        "#1f77b4"
    } else {
        "#d95f02"
    }
}

fn x_of(rate: f64) -> f64 {
    if rate <= 0.0 {
        return ZERO_X;
    }
    let log = rate.log10().clamp(X_MIN_LOG, 0.0);
    LOG_LEFT + (log - X_MIN_LOG) / -X_MIN_LOG * (RIGHT - LOG_LEFT)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Indices of the points on the Pareto front (lowest y for their x and more than 1% below
/// every point to their left), sorted by x.
fn front(points: &[&SweepPoint]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|&a, &b| {
        points[a]
            .false_rollback_rate
            .total_cmp(&points[b].false_rollback_rate)
            .then(
                points[a]
                    .failed_requests_mean
                    .total_cmp(&points[b].failed_requests_mean),
            )
    });
    let mut best = f64::INFINITY;
    let mut out = Vec::new();
    for index in order {
        // A setting joins the front only if it cuts failed requests by more than 1%, so ties
        // within noise do not draw a line across the chart.
        if points[index].failed_requests_mean < 0.99 * best {
            best = points[index].failed_requests_mean;
            out.push(index);
        }
    }
    out
}

/// The chart for these sweep points; `subtitle` says how they were made (seeds, settings).
pub fn pareto_svg(points: &[SweepPoint], subtitle: &str) -> String {
    let y_max_value = points
        .iter()
        .map(|point| point.failed_requests_mean)
        .fold(10.0_f64, f64::max);
    let y_top_log = y_max_value.log10().ceil().max(1.0);
    let y_bottom_log = points
        .iter()
        .map(|point| point.failed_requests_mean)
        .filter(|y| *y > 0.0)
        .fold(1.0_f64, f64::min)
        .log10()
        .floor()
        .min(0.0);
    let y_of = |value: f64| -> f64 {
        let log = value.max(10f64.powf(y_bottom_log)).log10();
        BOTTOM - (log - y_bottom_log) / (y_top_log - y_bottom_log) * (BOTTOM - TOP)
    };
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">Blast radius against false rollbacks (lower left is better)</text>"#
    );
    let _ = writeln!(
        svg,
        r##"<text x="{LEFT}" y="44" fill="#555">{}</text>"##,
        escape(subtitle)
    );
    // Grid and axes.
    for decade in (X_MIN_LOG as i32)..=0 {
        let x = x_of(10f64.powi(decade));
        let label = match decade {
            0 => "100%".to_string(),
            -1 => "10%".to_string(),
            -2 => "1%".to_string(),
            -3 => "0.1%".to_string(),
            d => format!("{}%", 10f64.powi(d + 2)),
        };
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{BOTTOM}" stroke="#e4e4e4"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            BOTTOM + 18.0
        );
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{ZERO_X}" y1="{TOP}" x2="{ZERO_X}" y2="{BOTTOM}" stroke="#e4e4e4" stroke-dasharray="3,3"/><text x="{ZERO_X}" y="{:.1}" text-anchor="middle">0</text>"##,
        BOTTOM + 18.0
    );
    let mut decade = y_bottom_log as i32;
    while f64::from(decade) <= y_top_log {
        let value = 10f64.powi(decade);
        let y = y_of(value);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{RIGHT}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT - 6.0,
            y + 4.0,
            value
        );
        decade += 1;
    }
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="#333"/>"##,
        RIGHT - LEFT,
        BOTTOM - TOP
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">false-rollback rate on S0 (healthy canary), log scale</text>"#,
        (LEFT + RIGHT) / 2.0,
        BOTTOM + 42.0
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(24 {:.1}) rotate(-90)" text-anchor="middle">failed canary requests on S1 (0.5% to 5% errors), mean, log scale</text>"#,
        (TOP + BOTTOM) / 2.0
    );
    // Series.
    let mut controllers: Vec<&str> = Vec::new();
    for point in points {
        if !controllers.contains(&point.controller.as_str()) {
            controllers.push(&point.controller);
        }
    }
    for controller in &controllers {
        let mine: Vec<&SweepPoint> = points
            .iter()
            .filter(|point| point.controller == *controller)
            .collect();
        let stroke = color(controller);
        let path: Vec<String> = front(&mine)
            .into_iter()
            .map(|index| {
                format!(
                    "{:.1},{:.1}",
                    x_of(mine[index].false_rollback_rate),
                    y_of(mine[index].failed_requests_mean)
                )
            })
            .collect();
        if path.len() > 1 {
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{stroke}" stroke-width="2" opacity="0.7"/>"#,
                path.join(" ")
            );
        }
        for point in &mine {
            let (x, y) = (
                x_of(point.false_rollback_rate),
                y_of(point.failed_requests_mean),
            );
            let fill = if point.missed_detection_rate > 0.01 {
                "white"
            } else {
                stroke
            };
            let size = if point.headline { 6.0 } else { 4.0 };
            let title = format!(
                "{} {}: S0 false rollbacks {:.2}%, S1 failed {:.1}, S1 missed {:.1}%",
                point.controller,
                point.knob,
                point.false_rollback_rate * 100.0,
                point.failed_requests_mean,
                point.missed_detection_rate * 100.0
            );
            if *controller == "weir" {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="{size}" fill="{fill}" stroke="{stroke}" stroke-width="1.5"><title>{}</title></circle>"#,
                    escape(&title)
                );
            } else {
                let _ = writeln!(
                    svg,
                    r#"<rect x="{:.1}" y="{:.1}" width="{}" height="{}" fill="{fill}" stroke="{stroke}" stroke-width="1.5"><title>{}</title></rect>"#,
                    x - size,
                    y - size,
                    2.0 * size,
                    2.0 * size,
                    escape(&title)
                );
            }
            if point.headline {
                let _ = writeln!(
                    svg,
                    r#"<text x="{:.1}" y="{:.1}" font-weight="bold">{}</text>"#,
                    x + 9.0,
                    y - 8.0,
                    escape(&format!("{} {}", point.controller, point.knob))
                );
            }
        }
    }
    // Legend.
    let legend_x = RIGHT + 20.0;
    let mut y = TOP + 10.0;
    for controller in &controllers {
        let stroke = color(controller);
        let knobs = if *controller == "weir" {
            "alpha 1e-4 - 0.1"
        } else {
            "threshold 1-10, min 95-99.9%"
        };
        if *controller == "weir" {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="5" fill="{stroke}"/>"#,
                legend_x + 5.0,
                y - 4.0
            );
        } else {
            let _ = writeln!(
                svg,
                r#"<rect x="{legend_x:.1}" y="{:.1}" width="10" height="10" fill="{stroke}"/>"#,
                y - 9.0
            );
        }
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{y:.1}">{}</text><text x="{:.1}" y="{:.1}" font-size="10" fill="#555">{}</text>"##,
            legend_x + 16.0,
            escape(controller),
            legend_x + 16.0,
            y + 14.0,
            knobs
        );
        y += 42.0;
    }
    let _ = writeln!(
        svg,
        r##"<text x="{legend_x:.1}" y="{y:.1}" font-size="10" fill="#555">line: Pareto front</text>"##
    );
    let _ = writeln!(
        svg,
        r##"<text x="{legend_x:.1}" y="{:.1}" font-size="10" fill="#555">hollow: missed &gt; 1% on S1</text>"##,
        y + 14.0
    );
    let _ = writeln!(
        svg,
        r##"<text x="{legend_x:.1}" y="{:.1}" font-size="10" fill="#555">bold: the settings of the table</text>"##,
        y + 28.0
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests;
