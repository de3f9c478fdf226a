//! `weir operator` instead of Flagger: Flagger Canaries, applied with kubectl, are run to
//! promotion and their status is written in Flagger's shape (against Flagger's own CRD when the
//! corpus is beside the project, so its strict status schema checks what weir writes).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use serde_json::{Value, json};
use weir_testkit::fixtures::compat_dir;
use weir_testkit::kube_cluster::{Cluster, NAMESPACE, canary_weight, image_of, replicas_of, text};
use weir_testkit::wait::wait_until;

fn canary_status(cluster: &Cluster) -> Value {
    cluster
        .server
        .get("flagger.app/v1beta1", "Canary", NAMESPACE, "podinfo")
        .map(|canary| canary["status"].clone())
        .unwrap_or(Value::Null)
}

/// Applies `canary` (a Canary of Deployment `podinfo`) with kubectl, starts the operator, rolls
/// a new image out, and returns the canary weights seen on the VirtualService on the way to
/// promotion.
fn promote(canary: &Value) -> BTreeSet<i64> {
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    println!("with {}", cluster.install_flagger_crd());
    cluster.apply(&serde_json::to_string(canary).unwrap());
    let _operator = cluster.start_operator(&[]);
    cluster.wait_initialised();
    let server = &cluster.server;

    // The Canary's Rollout: what weir made of it, owned by it.
    let rollout = server
        .get("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo")
        .unwrap();
    assert_eq!(rollout["metadata"]["labels"]["weir.dev/canary"], "podinfo");
    assert_eq!(rollout["metadata"]["ownerReferences"][0]["kind"], "Canary");
    wait_until("the Canary initialised, in Flagger's words", || {
        (canary_status(&cluster)["phase"] == "Initialized").then_some(())
    });

    cluster.set_image("podinfo:6.0.1");
    let mut weights = BTreeSet::new();
    let mut phases = Vec::new();
    let status = wait_until("the Canary promoted", || {
        if let Some(weight) = canary_weight(server) {
            weights.insert(weight);
        }
        let status = canary_status(&cluster);
        if let Some(phase) = status["phase"].as_str()
            && phases.last().map(String::as_str) != Some(phase)
        {
            phases.push(phase.to_string());
        }
        (status["phase"] == "Succeeded").then_some(status)
    });
    assert_eq!(image_of(server, "podinfo-primary"), "podinfo:6.0.1");
    wait_until("the target back at zero", || {
        (replicas_of(server, "podinfo") == 0).then_some(())
    });
    assert_eq!(status["conditions"][0]["type"], "Promoted");
    assert_eq!(status["conditions"][0]["status"], "True");
    assert!(status["lastAppliedSpec"].is_string(), "{status:#}");
    assert!(status["lastTransitionTime"].is_string(), "{status:#}");
    assert!(phases.contains(&"Progressing".to_string()), "{phases:?}");

    // As a Flagger user checks it.
    let waited = cluster.kubectl(&[
        "wait",
        "--for=condition=Promoted",
        "-n",
        NAMESPACE,
        "canary/podinfo",
        "--timeout=60s",
    ]);
    assert!(waited.status.success(), "{}", text(&waited.stderr));
    let listed = text(
        &cluster
            .kubectl(&["get", "canaries", "-n", NAMESPACE])
            .stdout,
    );
    assert!(
        listed.lines().nth(1).unwrap().contains("Succeeded"),
        "{listed}"
    );
    let described = text(
        &cluster
            .kubectl(&["describe", "canary/podinfo", "-n", NAMESPACE])
            .stdout,
    );
    assert!(described.contains("weir-operator"), "{described}");
    println!("phases: {phases:?}; weights seen: {weights:?}");
    weights
}

#[test]
fn a_flagger_canary_runs_to_promotion_with_its_status_in_flaggers_shape() {
    let canary = json!({
        "apiVersion": "flagger.app/v1beta1",
        "kind": "Canary",
        "metadata": {"name": "podinfo", "namespace": NAMESPACE},
        "spec": {
            "provider": "istio",
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
            "autoscalerRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "podinfo"},
            "service": {"port": 9898},
            "analysis": {"interval": "1s", "threshold": 2, "maxWeight": 50, "stepWeight": 10},
        }
    });
    let weights = promote(&canary);
    for weight in [10, 20, 30, 40, 50] {
        assert!(weights.contains(&weight), "{weights:?}");
    }
}

#[test]
fn the_corpus_istio_tutorial_canary_runs_to_promotion() {
    let Some(dir) = compat_dir() else {
        println!("compat corpus not found: skipped");
        return;
    };
    let file = dir.join("canaries/docs-gitbook-tutorials-istio-progressive-delivery-59df31f2.yaml");
    let mut canary: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    // As the tutorial has it, but in this test's namespace, a step a second, and without what
    // needs a mesh's telemetry and Flagger's load tester (the Prometheus path has its own test).
    canary["metadata"]["namespace"] = json!(NAMESPACE);
    let analysis = &mut canary["spec"]["analysis"];
    analysis["interval"] = json!("1s");
    let analysis = analysis.as_object_mut().unwrap();
    analysis.remove("metrics");
    analysis.remove("webhooks");
    let weights = promote(&canary);
    // The tutorial's stepWeight 10 up to maxWeight 50.
    for weight in [10, 20, 30, 40, 50] {
        assert!(weights.contains(&weight), "{weights:?}");
    }
}

/// The `Promoted` condition's message on Canary `podinfo` when weir refused it.
fn refusal(cluster: &Cluster) -> Option<String> {
    let condition = &canary_status(cluster)["conditions"][0];
    (condition["reason"] == "Refused").then(|| {
        condition["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    })
}

#[test]
fn a_canary_naming_a_metric_template_runs_once_the_template_is_applied_and_not_after_it_is_deleted()
{
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    println!("with {}", cluster.install_flagger_crd());
    let mut canary = json!({
        "apiVersion": "flagger.app/v1beta1",
        "kind": "Canary",
        "metadata": {"name": "podinfo", "namespace": NAMESPACE},
        "spec": {
            "provider": "istio",
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
            "autoscalerRef": {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "name": "podinfo"},
            "service": {"port": 9898},
            "analysis": {
                "interval": "1s", "threshold": 2, "maxWeight": 50, "stepWeight": 10,
                "metrics": [{"name": "errors", "templateRef": {"name": "error-rate"},
                    "thresholdRange": {"max": 1}, "interval": "1m"}],
            },
        }
    });
    cluster.apply(&serde_json::to_string(&canary).unwrap());
    let operator = cluster.start_operator(&[]);

    // Before the template exists: refused, naming it.
    let message = wait_until("the Canary refused for its missing template", || {
        refusal(&cluster)
    });
    assert!(
        message.contains("MetricTemplate") && message.contains("shop/error-rate"),
        "{message}"
    );
    assert_ne!(canary_status(&cluster)["phase"], "Initialized");

    // The template arrives: the refused rollout is applied again, and runs.
    let template = json!({
        "apiVersion": "flagger.app/v1beta1",
        "kind": "MetricTemplate",
        "metadata": {"name": "error-rate", "namespace": NAMESPACE},
        "spec": {
            "provider": {"type": "prometheus", "address": "http://prometheus.monitoring:9090"},
            "query": "sum(rate(http_requests_total{namespace=\"{{ namespace }}\", status=~\"5.*\"}[{{ interval }}]))",
        }
    });
    cluster.apply(&serde_json::to_string(&template).unwrap());
    wait_until("the Canary initialised once its template is there", || {
        (canary_status(&cluster)["phase"] == "Initialized").then_some(())
    });
    cluster.wait_initialised();

    // Deleted: the catalog forgets it, so a changed Canary naming it is refused again.
    cluster
        .server
        .delete(
            "flagger.app/v1beta1",
            "MetricTemplate",
            NAMESPACE,
            "error-rate",
        )
        .unwrap();
    canary["spec"]["analysis"]["stepWeight"] = json!(20);
    cluster.apply(&serde_json::to_string(&canary).unwrap());
    let message = wait_until(
        "the changed Canary refused for its deleted template",
        || refusal(&cluster),
    );
    assert!(message.contains("shop/error-rate"), "{message}");
    println!("refused after the deletion: {message}");
    drop(operator);
}
