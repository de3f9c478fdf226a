use super::*;

fn point(controller: &str, knob: &str, x: f64, y: f64) -> SweepPoint {
    SweepPoint {
        controller: controller.into(),
        knob: knob.into(),
        headline: knob == "a",
        false_rollback_rate: x,
        false_rollback_ci_low: 0.0,
        false_rollback_ci_high: 1.0,
        failed_requests_mean: y,
        missed_detection_rate: 0.0,
    }
}

#[test]
fn the_front_keeps_undominated_points() {
    let points = [
        point("weir", "a", 0.0, 10.0),
        point("weir", "b", 0.01, 5.0),
        point("weir", "c", 0.02, 8.0),
        point("weir", "d", 0.05, 2.0),
    ];
    let refs: Vec<&SweepPoint> = points.iter().collect();
    assert_eq!(front(&refs), [0, 1, 3]);
}

#[test]
fn the_chart_is_a_complete_svg_with_every_point() {
    let points = [
        point("weir", "a", 0.0, 5.0),
        point("weir", "b", 0.003, 3.0),
        point("flagger-style", "a", 0.0, 180.0),
        point("flagger-style", "b<&>", 0.4, 30.0),
    ];
    let svg = pareto_svg(&points, "test & check");
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<circle cx").count(), 2 + 1);
    assert_eq!(svg.matches("<title>").count(), 4);
    assert!(svg.contains("test &amp; check"));
    assert!(svg.contains("b&lt;&amp;&gt;"));
    assert!(!svg.contains("NaN"));
    // Zero false rollbacks sit on the "0" line.
    assert!(svg.contains(&format!("cx=\"{ZERO_X:.1}\"")));
}
