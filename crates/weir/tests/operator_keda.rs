//! A rollout whose `autoscalerRef` names a KEDA ScaledObject, run by the real `weir operator`:
//! the primary gets its own ScaledObject (scaling `podinfo-primary`, trigger queries renamed),
//! and the target's ScaledObject is paused at zero while the target waits at zero and resumed
//! during a run, as Flagger does. KEDA's own CRD is served when the compatibility corpus sits
//! beside the project (strict schema); otherwise a stand-in that keeps any fields.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use weir_testkit::fixtures::compat_dir;
use weir_testkit::kube_cluster::{
    Cluster, NAMESPACE, image_of, replicas_of, rollout_status, router_crd, text,
};
use weir_testkit::wait::wait_until;

const ROLLOUT: &str = "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: podinfo, namespace: shop}
spec:
  target:
    kind: kubernetes
    targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
    provider: kubernetes
    autoscalerRef: {apiVersion: keda.sh/v1alpha1, kind: ScaledObject, name: podinfo-so}
    service: {port: 9898}
  plan: {blueGreen: {iterations: 2}}
  analysis: {interval: 1s, threshold: 2}
";

fn scaled_object(cluster: &Cluster, name: &str) -> Option<Value> {
    cluster
        .server
        .get("keda.sh/v1alpha1", "ScaledObject", NAMESPACE, name)
}

fn paused(cluster: &Cluster) -> Value {
    scaled_object(cluster, "podinfo-so").unwrap()["metadata"]["annotations"]
        ["autoscaling.keda.sh/paused-replicas"]
        .clone()
}

#[test]
fn a_scaled_object_is_copied_for_the_primary_and_the_targets_is_paused_between_runs() {
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    let crd = compat_dir().map(|dir| dir.join("../crds/keda/scaledobjects.keda.sh.yaml"));
    match crd.filter(|path| path.is_file()) {
        Some(path) => {
            let applied = cluster.kubectl(&["apply", "-f", &path.display().to_string()]);
            assert!(applied.status.success(), "{}", text(&applied.stderr));
            println!("KEDA's own ScaledObject CRD");
        }
        None => {
            let mut crd = router_crd("keda.sh", "ScaledObject", "scaledobjects");
            crd["spec"]["versions"][0]["name"] = json!("v1alpha1");
            cluster.server.create(crd).unwrap();
            println!("a stand-in ScaledObject CRD (no compatibility corpus)");
        }
    }
    cluster.apply(
        "apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: podinfo-so, namespace: shop}
spec:
  scaleTargetRef: {name: podinfo}
  minReplicaCount: 2
  maxReplicaCount: 4
  triggers:
  - type: prometheus
    metadata:
      serverAddress: http://prometheus.monitoring:9090
      query: sum(rate(http_requests_total{app=\"podinfo\"}[30s]))
      threshold: '10'
",
    );
    cluster.apply(ROLLOUT);
    let operator = cluster.start_operator(&[]);

    wait_until(
        "set-up: the target at zero, its ScaledObject paused",
        || {
            (rollout_status(&cluster.server)["phase"] == "Initialized"
                && replicas_of(&cluster.server, "podinfo") == 0
                && paused(&cluster) == "0")
                .then_some(())
        },
    );
    let copy = scaled_object(&cluster, "podinfo-so-primary").unwrap();
    assert_eq!(copy["spec"]["scaleTargetRef"]["name"], "podinfo-primary");
    assert_eq!(
        copy["spec"]["triggers"][0]["metadata"]["query"],
        "sum(rate(http_requests_total{app=\"podinfo-primary\"}[30s]))"
    );
    assert_eq!(copy["spec"]["maxReplicaCount"], 4);
    assert!(
        copy["metadata"]["annotations"]["autoscaling.keda.sh/paused-replicas"].is_null(),
        "the primary's scaler is never paused: {copy:#}"
    );
    assert_eq!(copy["metadata"]["ownerReferences"][0]["kind"], "Rollout");

    cluster.set_image("podinfo:6.0.1");
    wait_until("the run: the target's ScaledObject resumed", || {
        let status = rollout_status(&cluster.server);
        (status["run"] == 1 && paused(&cluster).is_null()).then_some(())
    });
    wait_until("promoted: the target's ScaledObject paused again", || {
        (rollout_status(&cluster.server)["phase"] == "Succeeded"
            && replicas_of(&cluster.server, "podinfo") == 0
            && paused(&cluster) == "0")
            .then_some(())
    });
    assert_eq!(
        image_of(&cluster.server, "podinfo-primary"),
        "podinfo:6.0.1"
    );

    // Deleting the rollout with revertOnDeletion is covered for HPAs elsewhere; here the
    // history names every step of the run.
    let reasons: Vec<String> = cluster
        .history(&operator, "podinfo")
        .iter()
        .map(|event| event["reason"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(reasons.contains(&"Succeeded".to_string()), "{reasons:?}");
}
