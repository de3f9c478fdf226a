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
    assert!(table.contains("| S0 | weir | 9000 / 9000 | 45.0 / 45.0 | - | 100.0% | 0% | 0% | - | 0% [0%, 97.5%] | 300 / 300 | - | - |"), "{table}");
    assert_eq!(markdown_scenarios(&rows).lines().count(), 1);
}

fn run(end: RunEnd, end_s: u32) -> RunResult {
    RunResult {
        end,
        end_s,
        canary_requests: 90,
        canary_errors: 1,
        canary_slow: 1,
        canary_requests_total: 90,
        by_verdict: end == RunEnd::RolledBack,
    }
}

#[test]
fn promoted_rolled_back_and_held_per_row() {
    let s5 = Scenario::select("S5-1").remove(0);
    let specs = controllers(&s5, 0.01);
    let runs = [
        run(RunEnd::Promoted, 900),
        run(RunEnd::RolledBack, 120),
        run(RunEnd::Held, 7200),
        run(RunEnd::Held, 7200),
    ];
    let row = summarize(&s5, &specs[0], &runs);
    let table = markdown_table(&[row]);
    // promoted 25%, rolled back 25%, held 50%, missed (not rolled back) 75%.
    assert!(
        table.contains("| S5-1 | weir | 90.0 / 90.0 | 1.0 / 1.0 | 120 | 25.0% | 25.0% | 50.0% | 75.0% | - | 900 / 900 | 4.2 | - |"),
        "{table}"
    );
}

#[test]
fn the_summary_line_has_each_controllers_rates() {
    let faulty = Scenario::select("S5-1").remove(0);
    let healthy = Scenario::select("S5-1-healthy").remove(0);
    let specs = controllers(&faulty, 0.01);
    let bad_runs = [
        run(RunEnd::Promoted, 900),
        run(RunEnd::RolledBack, 120),
        run(RunEnd::Held, 7200),
        run(RunEnd::RolledBack, 60),
    ];
    let good_runs = [
        run(RunEnd::Promoted, 900),
        run(RunEnd::Promoted, 1200),
        run(RunEnd::Promoted, 1500),
        run(RunEnd::Held, 7200),
    ];
    let flagger_bad = [run(RunEnd::Promoted, 300); 4];
    let flagger_good = [run(RunEnd::Promoted, 300), run(RunEnd::RolledBack, 360)];
    let rows = vec![
        summarize(&faulty, &specs[0], &bad_runs),
        summarize(&faulty, &specs[1], &flagger_bad),
        summarize(&healthy, &specs[0], &good_runs),
        summarize(&healthy, &specs[1], &flagger_good),
    ];
    let line = summary_line(&rows);
    assert_eq!(
        line,
        "**Summary** (2 scenarios): weir: missed detection 50.0% of 4 faulty runs (promoted 25.0%, held 25.0%), \
         promotion 75.0% of 4 healthy runs (held 25.0%, rolled back 0%); \
         flagger-style: missed detection 100.0% of 4 faulty runs (promoted 100.0%, held 0%), \
         promotion 50.0% of 2 healthy runs (held 0%, rolled back 50.0%).\n"
    );
    // A faulty scenario alone: no healthy part.
    let only = summary_line(&rows[..1]);
    assert!(
        only.starts_with("**Summary** (1 scenario): weir: missed detection 50.0%"),
        "{only}"
    );
    assert!(!only.contains("healthy"), "{only}");
}
