//! `weir operator` judging a Kubernetes canary with the builtin `request-success-rate` check for
//! Istio, run as PromQL against a real Prometheus (the binary, as in `prometheus.rs`), the
//! operator started with `--prometheus URL` against the testkit's in-memory API server (as in
//! `operator.rs`). No pod runs, so the testkit's Istio telemetry stands in for the sidecars: a
//! steady stream of requests split as the VirtualService says, counted into
//! `istio_requests_total` per destination workload, scraped by Prometheus every second. The
//! primary always answers 200; the canary as each test says.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Instant;

use serde_json::Value;
use weir_testkit::istio::{CANARY, IstioTelemetry, PRIMARY};
use weir_testkit::kube_cluster::{
    Cluster, NAMESPACE, canary_weight, replicas_of, rollout_status, rollout_yaml_with_analysis,
};
use weir_testkit::kube_server::KubeServer;
use weir_testkit::process::Weir;
use weir_testkit::prometheus::{self, PrometheusOptions, PrometheusServer};
use weir_testkit::wait::wait_until;

/// The plan of both tests.
const PLAN: &str = "{canary: {stepWeights: [10, 20, 30]}}";

/// The builtin success-rate check over 5 s windows (five scrapes), at least 99%, judged every
/// second; two failed checks roll back. No data (before Prometheus has two scrapes of canary
/// traffic) holds the weight, so a verdict is always on a value.
const ANALYSIS: &str = "{interval: 1s, threshold: 2, noData: hold, metrics: [{name: request-success-rate, interval: 5s, thresholdRange: {min: 99}}]}";

/// Everything one test runs; the operator is dropped (killed) first.
struct Judged {
    operator: Weir,
    cluster: Cluster,
    telemetry: IstioTelemetry,
    prometheus: PrometheusServer,
}

/// The cluster with `podinfo`'s rollout initialised by an operator judging with Prometheus,
/// which scrapes the mesh's telemetry (`canary_error_percent` of the canary's requests fail).
fn set_up(canary_error_percent: f64) -> Judged {
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    let telemetry = IstioTelemetry::start(&cluster.server, canary_error_percent);
    let prometheus = PrometheusServer::start(&PrometheusOptions {
        targets: vec![telemetry.address()],
        ..PrometheusOptions::default()
    })
    .unwrap();
    // Prometheus has the primary's traffic before anything is judged.
    wait_until("prometheus to scrape the mesh twice", || {
        (telemetry.scrapes() >= 2).then_some(())
    });
    cluster.apply(&rollout_yaml_with_analysis(PLAN, ANALYSIS));
    let operator = cluster.start_operator(&["--prometheus", &prometheus.url()]);
    cluster.wait_initialised();
    wait_until("the rollout initialised", || {
        let status = rollout_status(&cluster.server);
        (status["phase"] == "Initialized" || status["phase"] == "Succeeded").then_some(())
    });
    Judged {
        operator,
        cluster,
        telemetry,
        prometheus,
    }
}

/// The `release` annotation of the primary's pod template (the revision it runs).
fn primary_release(server: &KubeServer) -> Value {
    server
        .get("apps/v1", "Deployment", NAMESPACE, "podinfo-primary")
        .unwrap()["spec"]["template"]["metadata"]["annotations"]["release"]
        .clone()
}

/// The `request-success-rate` results in `events` that came from Prometheus.
fn success_rate_checks(events: &[&Value]) -> Vec<Value> {
    events
        .iter()
        .flat_map(|event| event["evidence"]["checks"].as_array().into_iter().flatten())
        .filter(|check| check["name"] == "request-success-rate")
        .filter(|check| {
            check["message"]
                .as_str()
                .is_some_and(|message| message.starts_with("prometheus: "))
        })
        .cloned()
        .collect()
}

#[test]
fn a_failing_canary_judged_by_prometheus_rolls_back_to_the_primary() {
    if !prometheus::required() {
        return;
    }
    // 80% of the canary's requests fail: its success rate is 20%.
    let judged = set_up(80.0);
    let (cluster, server) = (&judged.cluster, &judged.cluster.server);
    let run = rollout_status(server)["run"].as_u64().unwrap_or(0) + 1;

    let started = Instant::now();
    cluster.new_revision("2");
    let mut weights = BTreeSet::new();
    let mut primary_releases = BTreeSet::new();
    let (status, took) = wait_until(
        "the run rolled back: all traffic on the primary, the canary at zero",
        || {
            weights.extend(canary_weight(server));
            primary_releases.insert(primary_release(server).to_string());
            let status = rollout_status(server);
            let rolled_back = status["phase"] == "Failed"
                && canary_weight(server) == Some(0)
                && replicas_of(server, "podinfo") == 0;
            // A promotion ends the wait too, and fails the test below at once.
            ((rolled_back || status["phase"] == "Succeeded") && status["run"].as_u64() == Some(run))
                .then(|| (status, started.elapsed()))
        },
    );
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert_eq!(status["conditions"][0]["type"], "Promoted", "{status:#}");
    assert_eq!(status["conditions"][0]["status"], "False", "{status:#}");
    // The run went no further than its first step (the VirtualService's weights as polled: a
    // loaded machine may poll too late to see the 10, so the step itself is read from the
    // history below).
    assert!(
        weights.is_subset(&BTreeSet::from([0, 10])),
        "canary weights on the VirtualService: {weights:?}"
    );
    // The primary never ran the failed revision.
    assert_eq!(primary_releases, BTreeSet::from(["null".to_string()]));
    assert!(primary_release(server).is_null());
    // The canary did get traffic, and failed it.
    assert!(judged.telemetry.requests(CANARY, 500) > 0.0);
    assert!(judged.telemetry.requests(PRIMARY, 200) > 0.0);

    let history = cluster.history(&judged.operator, "podinfo");
    let events: Vec<&Value> = history
        .iter()
        .filter(|event| event["run"].as_u64() == Some(run))
        .collect();
    let steps: Vec<i64> = events
        .iter()
        .filter(|event| event["reason"] == "Advanced")
        .filter_map(|event| event["canaryWeight"].as_i64())
        .collect();
    assert_eq!(steps, [10], "the run reached its first step: {history:#?}");
    let rolled_back = events
        .iter()
        .find(|event| event["reason"] == "RolledBack")
        .unwrap_or_else(|| panic!("no RolledBack event: {history:#?}"));
    let message = rolled_back["message"].as_str().unwrap();
    assert!(
        message.contains("2 failed checks reached the threshold of 2"),
        "{rolled_back:#}"
    );
    // Its evidence names the failed check with the success rate Prometheus computed: the
    // canary's own 20%, not a mix with the primary's traffic (which would be above 90%).
    let evidence = success_rate_checks(&[rolled_back]);
    let failed = evidence
        .iter()
        .find(|check| check["outcome"] == "fail")
        .unwrap_or_else(|| panic!("no failed request-success-rate check: {rolled_back:#}"));
    let rate = failed["value"].as_f64().unwrap();
    assert!((15.0..=25.0).contains(&rate), "{failed}");
    // Exactly the threshold's two failed checks, every one on a value from Prometheus.
    let failed_ticks: Vec<&&Value> = events
        .iter()
        .filter(|event| event["reason"] == "ChecksFailed")
        .collect();
    assert_eq!(failed_ticks.len(), 2, "{history:#?}");
    for tick in &failed_ticks {
        let checks = success_rate_checks(&[tick]);
        assert_eq!(checks.len(), 1, "{tick:#}");
        assert_eq!(checks[0]["outcome"], "fail", "{tick:#}");
        assert!(checks[0]["value"].as_f64().unwrap() < 99.0, "{tick:#}");
    }
    assert!(
        !events.iter().any(|event| event["reason"] == "Succeeded"),
        "{history:#?}"
    );
    let reasons: Vec<&str> = events
        .iter()
        .filter_map(|event| event["reason"].as_str())
        .collect();
    println!(
        "events of run {run}: {reasons:?}; canary weights seen: {weights:?}; success rate in the RolledBack evidence: {rate:.2}% ({}); \
         new revision to rollback: {took:.1?}; requests counted: canary 500 {:.0}, canary 200 {:.0}, primary 200 {:.0}; scrapes: {}; prometheus {}",
        failed["message"].as_str().unwrap_or_default(),
        judged.telemetry.requests(CANARY, 500),
        judged.telemetry.requests(CANARY, 200),
        judged.telemetry.requests(PRIMARY, 200),
        judged.telemetry.scrapes(),
        judged.prometheus.url(),
    );
}

#[test]
fn a_healthy_canary_judged_by_prometheus_is_promoted() {
    if !prometheus::required() {
        return;
    }
    let judged = set_up(0.0);
    let (cluster, server) = (&judged.cluster, &judged.cluster.server);
    let run = rollout_status(server)["run"].as_u64().unwrap_or(0) + 1;

    let started = Instant::now();
    cluster.new_revision("2");
    let mut weights = BTreeSet::new();
    let (status, took) = wait_until("the run promoted", || {
        weights.extend(canary_weight(server));
        let status = rollout_status(server);
        // A rollback ends the wait too, and fails the test below at once.
        (matches!(status["phase"].as_str(), Some("Succeeded" | "Failed"))
            && status["run"].as_u64() == Some(run))
        .then(|| (status, started.elapsed()))
    });
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(status["conditions"][0]["type"], "Promoted", "{status:#}");
    assert_eq!(status["conditions"][0]["status"], "True", "{status:#}");
    assert_eq!(primary_release(server), "2");
    wait_until(
        "all traffic back on the new primary, the target at zero",
        || (canary_weight(server) == Some(0) && replicas_of(server, "podinfo") == 0).then_some(()),
    );

    let history = cluster.history(&judged.operator, "podinfo");
    let events: Vec<&Value> = history
        .iter()
        .filter(|event| event["run"].as_u64() == Some(run))
        .collect();
    let steps: Vec<i64> = events
        .iter()
        .filter(|event| event["reason"] == "Advanced")
        .filter_map(|event| event["canaryWeight"].as_i64())
        .collect();
    assert_eq!(steps, [10, 20, 30], "{history:#?}");
    assert!(
        !events.iter().any(|event| event["reason"] == "ChecksFailed"),
        "{history:#?}"
    );
    // Each step after the first was taken on a passing check with a value from Prometheus: the
    // canary's 100%, so the check in the failing test failed on data, not for want of it.
    let checks = success_rate_checks(&events);
    let passed: Vec<f64> = checks
        .iter()
        .filter(|check| check["outcome"] == "pass")
        .filter_map(|check| check["value"].as_f64())
        .collect();
    assert!(passed.len() >= 2, "{history:#?}");
    for rate in &passed {
        assert!((99.0..=100.0).contains(rate), "{history:#?}");
    }
    println!(
        "canary weights seen: {weights:?}; steps: {steps:?}; passing success rates: {passed:?}; \
         new revision to promotion: {took:.1?}; canary 200 {:.0}, canary 500 {:.0}",
        judged.telemetry.requests(CANARY, 200),
        judged.telemetry.requests(CANARY, 500),
    );
}
