//! The operator scale benchmark's smoke run (`bash bench/operator/run.sh` runs it at 1,000
//! rollouts): 20 rollouts with a 1 s interval in one real `weir operator` against the in-memory
//! API server, so the harness keeps working. Asserts what the run did, never how fast.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::Duration;

use weir_testkit::operator_scale::{ScaleConfig, run};

#[test]
fn twenty_rollouts_are_promoted_and_their_requests_counted() {
    let config = ScaleConfig {
        binary: PathBuf::from(env!("CARGO_BIN_EXE_weir")),
        rollouts: 20,
        interval: Duration::from_secs(1),
        steps: vec![10, 30, 50],
        progress: false,
    };
    let report = run(&config);
    let table = report.markdown();
    assert_eq!(report.promoted, 20, "{table}");
    // Every rollout commits at least one step per weight, each a status write.
    assert!(report.steps_committed >= 20 * 3, "{table}");
    // Each step moves the traffic: the VirtualServices were written in the window.
    let routes = report
        .requests_window
        .get("patch virtualservices.networking.istio.io")
        .copied()
        .unwrap_or(0);
    assert!(routes >= 20 * 3, "{table}");
    assert!(
        report.writes_window() > 0 && report.reads_window() > 0,
        "{table}"
    );
    assert!(report.lateness_window.ticks > 0, "{table}");
    assert!(report.lateness_window.p99.is_some(), "{table}");
    assert!(report.peak_rss_kib > 0, "{table}");
    assert!(table.contains("API writes per step and rollout"), "{table}");
}
