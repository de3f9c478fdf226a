//! `weir operator` judging a canary with a Flagger MetricTemplate of type `externalmetrics`
//! (Flagger 1.43): the External Metrics API (`external.metrics.k8s.io/v1beta1`) served by the
//! in-memory API server as a metrics adapter behind kube-apiserver serves it, with the values
//! the test sets; the template applied with the real kubectl, which also reads the API as a user
//! would (`kubectl get --raw`, `kubectl api-resources`). A value within range promotes the
//! canary; one out of range rolls it back, the value in the history.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use weir_testkit::kube_cluster::{
    Cluster, NAMESPACE, rollout_status, rollout_yaml_with_analysis, text,
};
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;

/// The metric the adapter serves, per workload (label `app`).
const METRIC: &str = "podinfo_error_percent";

/// The cluster with the template, the rollout initialised by an operator, and the metric at
/// `value` for `app=podinfo` (and a decoy series for another app).
fn set_up(value: &str) -> (Cluster, Weir) {
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    println!("with {}", cluster.install_flagger_crd());
    let server = &cluster.server;
    server.set_external_metric(NAMESPACE, METRIC, &[("app", "podinfo")], value);
    server.set_external_metric(NAMESPACE, METRIC, &[("app", "checkout")], "99");
    let template = json!({
        "apiVersion": "flagger.app/v1beta1",
        "kind": "MetricTemplate",
        "metadata": {"name": "error-percent", "namespace": NAMESPACE},
        "spec": {
            "provider": {"type": "externalmetrics"},
            "query": format!("{{{{ namespace }}}}/{METRIC}?labelSelector=app%3D{{{{ target }}}}"),
        }
    });
    cluster.apply(&serde_json::to_string(&template).unwrap());
    cluster.apply(&rollout_yaml_with_analysis(
        "{canary: {stepWeights: [10, 50]}}",
        "{interval: 1s, threshold: 2, evidence: {promoteOn: noHarm}, metrics: [{name: error-percent, templateRef: {name: error-percent}, thresholdRange: {max: 1}}]}",
    ));
    let operator = cluster.start_operator(&[]);
    cluster.wait_initialised();
    wait_until("the rollout initialised", || {
        let status = rollout_status(&cluster.server);
        (status["phase"] == "Initialized").then_some(())
    });
    (cluster, operator)
}

/// The `error-percent` checks in the history of run `run`.
fn checks_of(cluster: &Cluster, operator: &Weir, run: u64) -> Vec<Value> {
    cluster
        .history(operator, "podinfo")
        .iter()
        .filter(|event| event["run"].as_u64() == Some(run))
        .flat_map(|event| {
            event["evidence"]["checks"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|check| check["name"] == "error-percent")
        .collect()
}

#[test]
fn the_external_metrics_api_is_discovered_and_read_as_kubectl_reads_it() {
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    cluster
        .server
        .set_external_metric(NAMESPACE, METRIC, &[("app", "podinfo")], "1500m");
    let listed = cluster.kubectl(&["api-resources", "--api-group", "external.metrics.k8s.io"]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert!(
        text(&listed.stdout).contains("externalmetrics"),
        "{}",
        text(&listed.stdout)
    );
    let path = format!(
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/{METRIC}?labelSelector=app%3Dpodinfo"
    );
    let read = cluster.kubectl(&["get", "--raw", &path]);
    assert!(read.status.success(), "{}", text(&read.stderr));
    let list: Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(list["kind"], "ExternalMetricValueList");
    assert_eq!(list["items"][0]["value"], "1500m");
    assert_eq!(list["items"][0]["metricLabels"]["app"], "podinfo");
    // No series for that app: an empty list; an unknown metric: NotFound.
    let other = cluster.kubectl(&["get", "--raw", &path.replace("app%3Dpodinfo", "app%3Dnone")]);
    let other: Value = serde_json::from_slice(&other.stdout).unwrap();
    assert_eq!(other["items"], json!([]));
    let unknown = cluster.kubectl(&[
        "get",
        "--raw",
        &format!("/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/nothing"),
    ]);
    assert!(!unknown.status.success());
    println!(
        "kubectl api-resources: {}; get --raw: {}; unknown metric: {}",
        text(&listed.stdout).trim(),
        text(&read.stdout).trim(),
        text(&unknown.stderr).trim()
    );
}

#[test]
fn an_external_metric_within_range_promotes_the_canary() {
    let (cluster, operator) = set_up("250m");
    let run = rollout_status(&cluster.server)["run"].as_u64().unwrap_or(0) + 1;
    cluster.new_revision("2");
    let status = wait_until("the canary promoted", || {
        let status = rollout_status(&cluster.server);
        (status["run"].as_u64() == Some(run)
            && (status["phase"] == "Succeeded" || status["phase"] == "Failed"))
            .then_some(status)
    });
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let checks = checks_of(&cluster, &operator, run);
    assert!(!checks.is_empty());
    for check in &checks {
        assert_eq!(check["outcome"], "pass", "{check}");
        assert_eq!(check["value"], 0.25, "{check}");
    }
    let requests = cluster.server.external_metric_requests();
    assert!(requests.iter().all(|request| request
        == &format!(
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/{METRIC}?labelSelector=app%3Dpodinfo"
        )), "{requests:#?}");
    println!(
        "promoted: {}; {} checks, e.g. {}; the API server received {} requests, e.g. GET {}",
        status["message"],
        checks.len(),
        checks[0],
        requests.len(),
        requests[0]
    );
}

#[test]
fn an_external_metric_out_of_range_rolls_the_canary_back_and_a_missing_one_is_no_data() {
    let (cluster, operator) = set_up("5");
    let run = rollout_status(&cluster.server)["run"].as_u64().unwrap_or(0) + 1;
    cluster.new_revision("2");
    let status = wait_until("the canary rolled back", || {
        let status = rollout_status(&cluster.server);
        (status["run"].as_u64() == Some(run)
            && (status["phase"] == "Succeeded" || status["phase"] == "Failed"))
            .then_some(status)
    });
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let checks = checks_of(&cluster, &operator, run);
    let failed: Vec<&Value> = checks
        .iter()
        .filter(|check| check["outcome"] == "fail")
        .collect();
    // The two failed checks (the RolledBack event repeats the last one as its evidence).
    assert!(failed.len() >= 2, "{checks:#?}");
    assert!(
        failed.iter().all(|check| check["value"] == 5.0),
        "{checks:#?}"
    );
    println!("rolled back: {}; checks: {checks:?}", status["message"]);

    // The metric gone: the next run's checks have no data, with the server's answer.
    cluster.server.remove_external_metric(NAMESPACE, METRIC);
    let run = run + 1;
    cluster.new_revision("3");
    let missing = wait_until("a check without data", || {
        checks_of(&cluster, &operator, run)
            .into_iter()
            .find(|check| check["outcome"] == "noData")
    });
    let message = missing["message"].as_str().unwrap();
    assert!(
        message.contains("externalmetrics") && message.contains(METRIC),
        "{missing}"
    );
    println!("the metric gone: {missing}");
}
