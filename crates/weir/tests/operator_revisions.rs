//! `weir operator` with `spec.target.mode: revisions` (seeds 000/003, OAM): the real binary and
//! the real kubectl against the testkit's in-memory API server. An application controller (here
//! the test) keeps one Deployment per revision of component `podinfo`; weir moves traffic
//! between two of them and only ever changes their replica counts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use serde_json::{Value, json};
use weir_testkit::kube_cluster::{
    Cluster, NAMESPACE, replicas_of, rollout_status, route_weights, router_crd, text,
};
use weir_testkit::kube_server::KubeServer;
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;

/// Deployment `podinfo-REVISION` of component `podinfo` as KubeVela would write it: the
/// component and revision labels on the workload and its pods.
fn revision(revision: &str, image: &str, replicas: i64) -> Value {
    let labels = json!({
        "app.oam.dev/component": "podinfo",
        "app.oam.dev/revision": format!("podinfo-{revision}"),
    });
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": format!("podinfo-{revision}"), "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "podinfod", "image": image,
                    "ports": [{"name": "http", "containerPort": 9898}]}]}
            }
        }
    })
}

/// The rollout of component `podinfo` through Istio with `plan`, its status also written onto
/// Application `shop`.
fn rollout(plan: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: podinfo, namespace: {NAMESPACE}}}
spec:
  target:
    kind: kubernetes
    mode: revisions
    component: podinfo
    provider: istio
    service: {{port: 9898}}
    statusTo: {{apiVersion: core.oam.dev/v1beta1, kind: Application, name: shop}}
  plan: {plan}
  analysis: {{interval: 1s, threshold: 2}}
"
    )
}

/// Every Deployment in the namespace: (name, uid), so a rename or a re-creation shows.
fn deployments(server: &KubeServer) -> BTreeSet<(String, String)> {
    server
        .list("apps/v1", "Deployment", NAMESPACE)
        .iter()
        .map(|deployment| {
            (
                deployment["metadata"]["name"].as_str().unwrap().to_string(),
                deployment["metadata"]["uid"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A cluster with revisions v1 (3 replicas) and v2 (1 replica) of component `podinfo`, the OAM
/// Application CRD and Application `shop`, the rollout applied with kubectl, and the operator.
fn set_up(plan: &str) -> (Cluster, Weir) {
    let cluster = Cluster::empty(env!("CARGO_BIN_EXE_weir"));
    let server = &cluster.server;
    let mut application_crd = router_crd("core.oam.dev", "Application", "applications");
    application_crd["spec"]["versions"][0]["name"] = json!("v1beta1");
    application_crd["spec"]["versions"][0]["subresources"] = json!({"status": {}});
    server.create(application_crd).unwrap();
    server
        .create(json!({
            "apiVersion": "core.oam.dev/v1beta1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": NAMESPACE},
            "spec": {"components": [{"name": "podinfo", "type": "webservice"}]},
        }))
        .unwrap();
    // KubeVela's own condition, which weir's must not replace.
    server
        .merge_patch(
            "core.oam.dev/v1beta1",
            "Application",
            NAMESPACE,
            "shop",
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            true,
        )
        .unwrap();
    server.create(revision("v1", "podinfo:6.0.0", 3)).unwrap();
    server.create(revision("v2", "podinfo:6.0.1", 1)).unwrap();
    cluster.apply(&rollout(plan));
    let operator = cluster.start_operator(&[]);
    (cluster, operator)
}

/// Application `shop` once both the annotations and weir's condition say `phase` (they are two
/// writes).
fn shows(server: &KubeServer, phase: &str) -> Option<Value> {
    let application = server.get("core.oam.dev/v1beta1", "Application", NAMESPACE, "shop")?;
    let condition = application["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|condition| condition["type"] == "WeirRollout")?
        .clone();
    (application["metadata"]["annotations"]["weir.dev/rollout-phase"] == phase
        && condition["reason"] == phase)
        .then_some(application)
}

#[test]
fn the_newest_revision_is_judged_against_the_previous_one_and_promoted_in_place() {
    let (cluster, _operator) = set_up("{canary: {stepWeights: [10, 20, 30, 40, 50]}}");
    let server = &cluster.server;
    let before = deployments(server);

    let mut weights = BTreeSet::new();
    let finished = wait_until("the run to promote revision v2", || {
        let route = route_weights(server);
        if let Some(weight) = route.get("podinfo-v2") {
            weights.insert((route.get("podinfo-v1").copied().unwrap_or(0), *weight));
        }
        let status = rollout_status(server);
        (status["phase"] == "Succeeded" && status["run"] == 1).then_some(status)
    });
    let after_promotion = wait_until("v1 at zero once all traffic is on v2", || {
        (replicas_of(server, "podinfo-v1") == 0).then(|| route_weights(server))
    });

    // Nothing created, renamed or re-created: the same Deployments, the same uids.
    assert_eq!(deployments(server), before);
    assert_eq!(replicas_of(server, "podinfo-v2"), 3, "v1's former count");
    assert_eq!(
        after_promotion,
        [("podinfo-v2".to_string(), 100)].into(),
        "{after_promotion:?}"
    );
    let canary_steps: BTreeSet<i64> = weights.iter().map(|(_, canary)| *canary).collect();
    for step in [10, 20, 30, 40, 50] {
        assert!(canary_steps.contains(&step), "{weights:?}");
    }
    for (primary, canary) in &weights {
        assert_eq!(primary + canary, 100, "{weights:?}");
    }
    // The Services weir added: the apex and one per revision, selecting by revision.
    let apex = server.get("v1", "Service", NAMESPACE, "podinfo").unwrap();
    assert_eq!(
        apex["spec"]["selector"]["app.oam.dev/revision"], "podinfo-v2",
        "{apex:#}"
    );
    let v1 = server
        .get("v1", "Service", NAMESPACE, "podinfo-v1")
        .unwrap();
    assert_eq!(v1["spec"]["selector"]["app.oam.dev/revision"], "podinfo-v1");
    assert!(
        server
            .list("networking.istio.io/v1", "DestinationRule", NAMESPACE)
            .is_empty(),
        "no DestinationRule without a traffic policy"
    );

    // The status, translated back to the Application, next to KubeVela's own condition.
    let application = wait_until("the Application to show the promotion", || {
        shows(server, "Succeeded")
    });
    let annotations = &application["metadata"]["annotations"];
    assert_eq!(annotations["weir.dev/rollout"], "podinfo");
    assert_eq!(annotations["weir.dev/rollout-run"], "1");
    assert_eq!(
        annotations["weir.dev/rollout-canary-revision"],
        finished["canaryRevision"]
    );
    let conditions = application["status"]["conditions"].as_array().unwrap();
    let types: Vec<&str> = conditions
        .iter()
        .map(|condition| condition["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Ready", "WeirRollout"], "{conditions:?}");
    assert_eq!(conditions[1]["status"], "True");
    assert_eq!(conditions[1]["reason"], "Succeeded");
    println!(
        "Deployments before and after: {before:?}; (v1, v2) weights seen: {weights:?}; after promotion: {after_promotion:?}; \
         replicas v1 {} v2 {}; Application annotations {annotations}; conditions {conditions:?}",
        replicas_of(server, "podinfo-v1"),
        replicas_of(server, "podinfo-v2"),
    );
}

#[test]
fn a_newer_revision_mid_run_restarts_the_run_and_a_rollback_leaves_the_primary_untouched() {
    let (cluster, operator) =
        set_up("{canary: {steps: [{weight: 10}, {weight: 20, pause: {}}, {weight: 100}]}}");
    let server = &cluster.server;
    // 10%, or already 20% waiting for resume: either way v2 is being judged.
    wait_until("v2 with traffic", || {
        route_weights(server)
            .get("podinfo-v2")
            .is_some_and(|weight| *weight > 0)
            .then_some(())
    });
    let v1_before = server
        .get("apps/v1", "Deployment", NAMESPACE, "podinfo-v1")
        .unwrap();
    let first = rollout_status(server);

    // The application controller writes revision v3 while v2 is being judged.
    server.create(revision("v3", "podinfo:6.0.2", 1)).unwrap();
    let restarted = wait_until(
        "the run restarted with v3 against v1, and v2 scaled to zero",
        || {
            let status = rollout_status(server);
            let route = route_weights(server);
            // The route is applied after the status is committed: wait for both.
            (status["run"].as_u64() > first["run"].as_u64()
                && status["waitingForResume"] == true
                && route
                    == [
                        ("podinfo-v1".to_string(), 80),
                        ("podinfo-v3".to_string(), 20),
                    ]
                    .into()
                && replicas_of(server, "podinfo-v2") == 0)
                .then_some((status, route))
        },
    );
    assert_eq!(
        restarted.0["primaryRevision"], first["primaryRevision"],
        "v1 is still the primary"
    );
    assert_ne!(restarted.0["canaryRevision"], first["canaryRevision"]);

    let aborted = cluster.weir(&operator, &["abort", "podinfo"]);
    assert!(aborted.status.success(), "{}", text(&aborted.stderr));
    let rolled_back = wait_until("the rollback: v1 takes everything, v3 at zero", || {
        let route = route_weights(server);
        (rollout_status(server)["phase"] == "Failed"
            && route == [("podinfo-v1".to_string(), 100)].into()
            && replicas_of(server, "podinfo-v3") == 0)
            .then_some(route)
    });
    let v1_after = server
        .get("apps/v1", "Deployment", NAMESPACE, "podinfo-v1")
        .unwrap();
    assert_eq!(v1_after["spec"], v1_before["spec"], "v1 untouched");
    assert_eq!(
        v1_after["metadata"]["resourceVersion"], v1_before["metadata"]["resourceVersion"],
        "v1 not written at all"
    );
    // A target's notes are committed after the job that scaled: wait for both.
    let scaled: Vec<String> = wait_until("both scale-downs in the history", || {
        let scaled: Vec<String> = cluster
            .history(&operator, "podinfo")
            .iter()
            .filter_map(|event| event["message"].as_str())
            .filter(|message| message.contains("scaled to 0"))
            .map(str::to_string)
            .collect();
        (scaled.len() >= 2).then_some(scaled)
    });
    assert_eq!(scaled.len(), 2, "v2 then v3: {scaled:?}");
    assert!(
        scaled[0].contains("podinfo-v2") && scaled[1].contains("podinfo-v3"),
        "{scaled:?}"
    );
    let application = wait_until("the Application to show the rollback", || {
        shows(server, "Failed")
    });
    println!(
        "restarted run: {} with route {:?}; after the rollback: {rolled_back:?}, v1 replicas {}, v3 replicas {}; \
         scaled: {scaled:?}; Application conditions {}",
        restarted.0["run"],
        restarted.1,
        replicas_of(server, "podinfo-v1"),
        replicas_of(server, "podinfo-v3"),
        application["status"]["conditions"]
    );
}
