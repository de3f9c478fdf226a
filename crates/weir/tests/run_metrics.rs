//! `weir run --metrics-listen`: the foreground run serves weir's own metrics over HTTP while it
//! runs, with the router's traffic as it was sent. The rollout waits at an untimed step, so the
//! test reads a settled state and then stops the run. Every address is port 0, read back from
//! the run's first line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use weir_testkit::fixtures::{TempDb, runtime, sample_apps};
use weir_testkit::http::get;
use weir_testkit::metrics::sample_sum;
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;

#[test]
fn weir_run_serves_its_metrics_while_the_rollout_runs() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let dir = TempDb::new();
    let file = dir.file("rollout.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: shop}}
spec:
  target:
    kind: local
    listen: \"127.0.0.1:0\"
    primary: {{url: \"http://{v1}\", healthCheck: /healthz}}
    canary: {{url: \"http://{v2}\", healthCheck: /healthz}}
  plan:
    canary:
      steps:
        - weight: 50
          pause: {{}}
        - weight: 100
  analysis: {{interval: 1s, progressDeadline: 60s}}
",
            v1 = versions[0],
            v2 = versions[1],
        ),
    )
    .unwrap();
    let run = Weir::start(
        env!("CARGO_BIN_EXE_weir"),
        &[
            "run",
            &file.display().to_string(),
            "--db",
            &dir.path().display().to_string(),
            "--output",
            "json",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let (router, metrics) = (run.address("router"), run.address("metrics"));

    // Wait for the 50% step (the run waits there for `weir resume`), as /metrics reports it.
    let step = [
        "namespace=\"default\"",
        "rollout=\"shop\"",
        "phase=\"Progressing\"",
    ];
    let weight = ["namespace=\"default\"", "rollout=\"shop\""];
    wait_until("the 50% step in /metrics", || {
        let answer = get(metrics, "/metrics")?;
        assert_eq!(answer.status, 200, "{}", answer.head);
        assert_eq!(
            answer.header("content-type"),
            Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
            "{}",
            answer.head
        );
        (sample_sum(&answer.body, "weir_rollout_phase", &step) == Some(1.0)
            && sample_sum(&answer.body, "weir_rollout_canary_weight_ratio", &weight) == Some(0.5))
        .then_some(())
    });

    for _ in 0..40 {
        let answer = get(router, "/").expect("the router answers");
        assert_eq!(answer.status, 200, "{}", answer.head);
    }
    let served = ["rollout=\"shop\"", "traffic=\"served\""];
    let canary = ["rollout=\"shop\"", "role=\"canary\"", "traffic=\"served\""];
    let body = wait_until("the 40 requests in /metrics", || {
        let body = get(metrics, "/metrics")?.body;
        (sample_sum(&body, "weir_router_requests_total", &served) == Some(40.0)).then_some(body)
    });
    assert!(
        sample_sum(&body, "weir_router_requests_total", &canary).is_some(),
        "{body}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");

    // The history says where the router listens, as the first line did.
    let target_event = wait_until("the router's address in the history", || {
        run.lines()
            .into_iter()
            .find(|line| line.contains("\"reason\":\"Target\""))
    });
    assert!(
        target_event.contains(&format!("the router listens on http://{router}")),
        "{target_event}"
    );
}
