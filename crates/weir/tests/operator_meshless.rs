//! A canary without a mesh: `provider: kubernetes` with canary steps, run by the real
//! `weir operator` against the in-memory API server whose Deployment controller makes new pods
//! available 2 s after each change. The apex Service selects both versions' pods and each step
//! sets the two Deployments' replicas, so the canary's share of pods is the step's weight
//! (rounded, with the effective weight in the history); a traffic audit checks after every write
//! that the apex Service always has available pods behind it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use weir_testkit::deployment_controller::Readiness;
use weir_testkit::kube_cluster::{Cluster, NAMESPACE, image_of, replicas_of, rollout_status, text};
use weir_testkit::kube_server::KubeServer;
use weir_testkit::traffic_audit::TrafficAudit;
use weir_testkit::wait::wait_until;

const ROLLOUT: &str = "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: podinfo, namespace: shop}
spec:
  target:
    kind: kubernetes
    targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
    provider: kubernetes
    service: {port: 9898}
  plan: {canary: {stepWeights: [10, 50]}}
  analysis: {interval: 1s, threshold: 2}
";

fn available(server: &KubeServer, name: &str) -> i64 {
    server
        .get("apps/v1", "Deployment", NAMESPACE, name)
        .and_then(|deployment| deployment["status"]["availableReplicas"].as_i64())
        .unwrap_or(0)
}

#[test]
fn without_a_mesh_the_canary_gets_its_share_of_pods_step_by_step_and_is_promoted() {
    let cluster = Cluster::with_readiness(
        env!("CARGO_BIN_EXE_weir"),
        Readiness::After(Duration::from_secs(2)),
    );
    let server = &cluster.server;
    // The user's Deployment at 4 replicas (no autoscaler: the split sets the replicas) and
    // their own Service in front of it.
    server
        .delete(
            "autoscaling/v2",
            "HorizontalPodAutoscaler",
            NAMESPACE,
            "podinfo",
        )
        .unwrap();
    server
        .merge_patch(
            "apps/v1",
            "Deployment",
            NAMESPACE,
            "podinfo",
            &json!({"spec": {"replicas": 4}}),
            false,
        )
        .unwrap();
    server
        .create(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "podinfo", "namespace": NAMESPACE},
            "spec": {"selector": {"app": "podinfo"}, "ports": [{"port": 9898}]}
        }))
        .unwrap();
    wait_until("podinfo's 4 pods available", || {
        (available(server, "podinfo") == 4).then_some(())
    });
    let audit = TrafficAudit::start(server, NAMESPACE, &["podinfo"]);
    cluster.apply(ROLLOUT);
    let operator = cluster.start_operator(&[]);

    wait_until("set-up: the primary serves, the target at zero", || {
        (rollout_status(server)["phase"] == "Initialized" && replicas_of(server, "podinfo") == 0)
            .then_some(())
    });
    let apex = server.get("v1", "Service", NAMESPACE, "podinfo").unwrap();
    assert_eq!(
        apex["spec"]["selector"],
        json!({"weir.dev/apex": "podinfo"})
    );
    assert_eq!(replicas_of(server, "podinfo-primary"), 4);
    let labelled = wait_until("the target's pods labelled for the apex Service", || {
        let target = server.get("apps/v1", "Deployment", NAMESPACE, "podinfo")?;
        (target["spec"]["template"]["metadata"]["labels"]["weir.dev/apex"] == "podinfo")
            .then_some(target)
    });
    assert_eq!(labelled["spec"]["replicas"], 0);
    let runs_before = rollout_status(server)["run"].as_u64().unwrap_or(0);
    assert_eq!(
        runs_before, 0,
        "labelling the target's pods is not a new revision"
    );

    cluster.set_image("podinfo:6.0.1");
    // (canary, primary) replicas seen along the run.
    let mut seen = BTreeSet::new();
    wait_until("the run promoted", || {
        seen.insert((
            replicas_of(server, "podinfo"),
            replicas_of(server, "podinfo-primary"),
        ));
        let status = rollout_status(server);
        (status["phase"] == "Succeeded" && replicas_of(server, "podinfo") == 0).then_some(())
    });
    // 10% of 4 pods: 1 canary beside 4 primary pods (within maxSurge); 50%: 2 and 2.
    assert!(seen.contains(&(1, 4)), "{seen:?}");
    assert!(seen.contains(&(2, 2)), "{seen:?}");
    assert_eq!(image_of(server, "podinfo-primary"), "podinfo:6.0.1");
    assert_eq!(replicas_of(server, "podinfo-primary"), 4);
    let history = cluster.history(&operator, "podinfo");
    let notes: Vec<&str> = history
        .iter()
        .filter_map(|event| event["message"].as_str())
        .filter(|message| message.contains("by pods"))
        .collect();
    assert!(
        notes
            .iter()
            .any(|note| note.contains("1 canary and 4 primary pods, an effective 20%")),
        "the effective weight of the 10% step is in the history: {notes:?}\n{}",
        history
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let listed = cluster.weir(&operator, &["get", "podinfo"]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));

    let summary = audit.summary();
    println!("{summary}");
    audit.assert_clean();
}
