use super::*;
use crate::bench::{controllers, summarize};
use crate::scenario::Scenario;
use crate::sim::{RunEnd, RunResult};

#[test]
fn formats() {
    assert_eq!(number(4.25), "4.2");
    assert_eq!(number(1234.5), "1234");
    assert_eq!(percent(0.0), "0%");
    assert_eq!(percent(0.0012), "0.12%");
    assert_eq!(percent(0.5), "50.0%");
}

#[test]
fn one_line_per_row() {
    let s0 = Scenario::select("S0").remove(0);
    let specs = controllers(&s0, 0.01);
    let run = RunResult {
        end: RunEnd::Promoted,
        end_s: 300,
        canary_requests: 9_000,
        canary_errors: 45,
        canary_slow: 90,
        canary_requests_total: 9_000,
        by_verdict: false,
    };
    let rows: Vec<_> = specs
        .iter()
        .map(|spec| summarize(&s0, spec, &[run]))
        .collect();
    let table = markdown_table(&rows);
    assert_eq!(table.lines().count(), 4);
    assert!(table.contains("| S0 | weir | 9000 / 9000 | 45.0 / 45.0 | - | - | 0% [0%, 97.5%] | 100.0% | 300 / 300 | - | - |"), "{table}");
    assert_eq!(markdown_scenarios(&rows).lines().count(), 1);
}
