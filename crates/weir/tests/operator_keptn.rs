//! `weir operator` judging canaries with Flagger MetricTemplates of type `keptn`: Keptn's own
//! CRDs (`metrics.keptn.sh`, metrics-operator v2.1.0, from the compatibility corpus) installed
//! with the real kubectl in the in-memory API server. A KeptnMetric's `status.value` is read (as
//! Keptn's metrics operator would have written it); for an Analysis query weir creates an
//! Analysis, which the test's stand-in for Keptn's metrics operator completes (`pass` as the test
//! says), reads 1 or 0 and deletes it. No kept CRDs here (no corpus): the tests say so and pass.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use weir_testkit::kube_cluster::{Cluster, NAMESPACE, rollout_status, rollout_yaml_with_analysis};
use weir_testkit::kube_server::{ChangeKind, KubeServer};
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;

/// The cluster with Flagger's and Keptn's CRDs, or `None` without the corpus.
fn cluster() -> Option<Cluster> {
    let Some(flagger) = weir_testkit::fixtures::compat_dir() else {
        println!("no compatibility corpus: Keptn's CRDs are not here; nothing run");
        return None;
    };
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    println!("with {}", cluster.install_flagger_crd());
    for crd in ["keptnmetrics", "analyses", "analysisdefinitions"] {
        let file = flagger.join(format!("../crds/keptn/{crd}.metrics.keptn.sh.yaml"));
        let applied = cluster.kubectl(&["apply", "-f", &file.display().to_string()]);
        assert!(
            applied.status.success(),
            "{}",
            String::from_utf8_lossy(&applied.stderr)
        );
    }
    Some(cluster)
}

/// Applies template `error-check` of type keptn with `query` and a rollout judged by it
/// (`range`: a thresholdRange in YAML flow style), starts the operator and waits for the
/// rollout's initialisation.
fn start(cluster: &Cluster, query: &str, range: &str) -> Weir {
    let template = json!({
        "apiVersion": "flagger.app/v1beta1",
        "kind": "MetricTemplate",
        "metadata": {"name": "error-check", "namespace": NAMESPACE},
        "spec": {"provider": {"type": "keptn"}, "query": query},
    });
    cluster.apply(&serde_json::to_string(&template).unwrap());
    cluster.apply(&rollout_yaml_with_analysis(
        "{canary: {stepWeights: [10, 50]}}",
        &format!("{{interval: 1s, threshold: 2, evidence: {{promoteOn: noHarm}}, metrics: [{{name: error-check, templateRef: {{name: error-check}}, thresholdRange: {range}}}]}}"),
    ));
    let operator = cluster.start_operator(&[]);
    cluster.wait_initialised();
    wait_until("the rollout initialised", || {
        (rollout_status(&cluster.server)["phase"] == "Initialized").then_some(())
    });
    operator
}

/// Starts a new revision and waits for the run to end; its status and its error-check checks.
fn run_to_the_end(cluster: &Cluster, operator: &Weir) -> (Value, Vec<Value>) {
    let run = rollout_status(&cluster.server)["run"].as_u64().unwrap_or(0) + 1;
    cluster.new_revision(&run.to_string());
    let status = wait_until("the run ended", || {
        let status = rollout_status(&cluster.server);
        (status["run"].as_u64() == Some(run)
            && (status["phase"] == "Succeeded" || status["phase"] == "Failed"))
            .then_some(status)
    });
    let checks = cluster
        .history(operator, "podinfo")
        .iter()
        .filter(|event| event["run"].as_u64() == Some(run))
        .flat_map(|event| {
            event["evidence"]["checks"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|check| check["name"] == "error-check")
        .collect();
    (status, checks)
}

#[test]
fn a_keptn_metrics_value_promotes_a_healthy_canary_and_rolls_back_a_bad_one() {
    let Some(cluster) = cluster() else {
        return;
    };
    let server = &cluster.server;
    server
        .create(json!({
            "apiVersion": "metrics.keptn.sh/v1beta1",
            "kind": "KeptnMetric",
            "metadata": {"name": "podinfo-errors", "namespace": NAMESPACE},
            "spec": {"provider": {"name": "prometheus"}, "query": "sum(rate(errors[1m]))", "fetchIntervalSeconds": 10},
        }))
        .unwrap();
    let set_value = |value: &str| {
        server
            .merge_patch(
                "metrics.keptn.sh/v1beta1",
                "KeptnMetric",
                NAMESPACE,
                "podinfo-errors",
                &json!({"status": {"value": value, "rawValue": "MC4y", "lastUpdated": "2026-01-01T00:00:00Z"}}),
                true,
            )
            .unwrap();
    };
    set_value("0.2");
    // Upper case, as a user may write it: Flagger lowercases the query.
    let operator = start(
        &cluster,
        "KeptnMetric/{{ namespace }}/{{ target }}-errors",
        "{max: 1}",
    );

    let (status, checks) = run_to_the_end(&cluster, &operator);
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert!(!checks.is_empty());
    assert!(
        checks
            .iter()
            .all(|check| check["outcome"] == "pass" && check["value"] == 0.2),
        "{checks:#?}"
    );
    println!("healthy: {}; e.g. {}", status["message"], checks[0]);

    set_value("7.5");
    let (status, checks) = run_to_the_end(&cluster, &operator);
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert!(
        checks
            .iter()
            .filter(|check| check["outcome"] == "fail" && check["value"] == 7.5)
            .count()
            >= 2,
        "{checks:#?}"
    );
    println!("bad: {}; e.g. {}", status["message"], checks[0]);
}

/// A stand-in for Keptn's metrics operator: completes every Analysis created, passing it when
/// `pass` is set; records what it saw.
struct PlayedKeptn {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(ChangeKind, Value)>>>,
}

impl PlayedKeptn {
    fn start(server: Arc<KubeServer>, pass: Arc<AtomicBool>) -> PlayedKeptn {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let feed = server
            .subscribe(|group, resource, _| group == "metrics.keptn.sh" && resource == "analyses");
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stopping.load(Ordering::SeqCst) {
                let Some(change) = feed.next_within(Duration::from_millis(100)) else {
                    continue;
                };
                seen.push((change.kind, change.object.clone()));
                if change.kind == ChangeKind::Added {
                    let name = change.object["metadata"]["name"].as_str().unwrap();
                    // Deleted meanwhile: nothing to complete.
                    let _ = server.merge_patch(
                        "metrics.keptn.sh/v1beta1",
                        "Analysis",
                        NAMESPACE,
                        name,
                        &json!({"status": {"state": "Completed", "pass": pass.load(Ordering::SeqCst)}}),
                        true,
                    );
                }
            }
            // What arrived after the last look (the stop comes once every write is done).
            seen.extend(
                feed.take()
                    .into_iter()
                    .map(|change| (change.kind, change.object)),
            );
            seen
        });
        PlayedKeptn {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> Vec<(ChangeKind, Value)> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

#[test]
fn a_keptn_analysis_is_created_read_and_deleted_for_each_check() {
    let Some(cluster) = cluster() else {
        return;
    };
    let pass = Arc::new(AtomicBool::new(true));
    let keptn = PlayedKeptn::start(cluster.server.clone(), pass.clone());
    // A passed Analysis reads 1, a failed one 0: at least 1 passes.
    let operator = start(
        &cluster,
        "analysis/{{ namespace }}/podinfo-slo/2m/service={{ target }};stage=Canary",
        "{min: 1}",
    );

    let (status, checks) = run_to_the_end(&cluster, &operator);
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert!(
        checks
            .iter()
            .all(|check| check["outcome"] == "pass" && check["value"] == 1.0),
        "{checks:#?}"
    );
    println!("passed: {}; e.g. {}", status["message"], checks[0]);

    pass.store(false, Ordering::SeqCst);
    let (status, checks) = run_to_the_end(&cluster, &operator);
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert!(
        checks
            .iter()
            .filter(|check| check["outcome"] == "fail" && check["value"] == 0.0)
            .count()
            >= 2,
        "{checks:#?}"
    );
    println!("failed: {}; e.g. {}", status["message"], checks[0]);

    // Every Analysis weir created was deleted, and asked what the query said.
    wait_until("every Analysis deleted", || {
        cluster
            .server
            .list("metrics.keptn.sh/v1beta1", "Analysis", NAMESPACE)
            .is_empty()
            .then_some(())
    });
    let seen = keptn.stop();
    let created: Vec<&Value> = seen
        .iter()
        .filter(|(kind, _)| *kind == ChangeKind::Added)
        .map(|(_, object)| object)
        .collect();
    let deleted = seen
        .iter()
        .filter(|(kind, _)| *kind == ChangeKind::Deleted)
        .count();
    assert!(!created.is_empty());
    assert_eq!(created.len(), deleted, "{seen:#?}");
    for analysis in &created {
        let name = analysis["metadata"]["name"].as_str().unwrap();
        assert!(
            name.starts_with("podinfo-slo-") && name.len() == "podinfo-slo-".len() + 6,
            "{name}"
        );
        assert_eq!(
            analysis["spec"],
            json!({
                "analysisDefinition": {"name": "podinfo-slo"},
                "timeframe": {"recent": "2m"},
                // Lowercased, as Flagger does.
                "args": {"service": "podinfo", "stage": "canary"},
            }),
            "{analysis:#}"
        );
    }
    println!(
        "{} Analyses created and deleted, e.g. {}",
        created.len(),
        created[0]
    );
}
