//! `weir operator` with `spec.target.mode: managed` (seed 001): the rollout carries the pod
//! template and weir owns the Deployment, Service and VirtualService. The real binary and the
//! real kubectl against the testkit's in-memory API server, driven as a user would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use serde_json::Value;
use weir_testkit::kube_cluster::{
    Cluster, NAMESPACE, image_of, replicas_of, rollout_status, route_weights, text,
};
use weir_testkit::kube_server::KubeServer;
use weir_testkit::wait::wait_until;

/// Rollout `podinfo` in mode managed: `image`, `replicas`, and `extra` target settings (YAML
/// flow-style entries, e.g. `skipCanary: true, `).
fn rollout(image: &str, replicas: u32, extra: &str) -> String {
    rollout_with_plan(
        image,
        replicas,
        extra,
        "{canary: {stepWeights: [20, 40, 60]}}",
    )
}

/// [`rollout`] with `plan` (YAML flow style).
fn rollout_with_plan(image: &str, replicas: u32, extra: &str, plan: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: podinfo, namespace: {NAMESPACE}}}
spec:
  target:
    kind: kubernetes
    mode: managed
    provider: istio
    replicas: {replicas}
    service: {{port: 9898}}
    {extra}
    template:
      metadata: {{labels: {{app: podinfo}}}}
      spec:
        containers:
          - name: podinfod
            image: {image}
            ports: [{{name: http, containerPort: 9898}}]
  plan: {plan}
  analysis: {{interval: 1s, threshold: 2}}
"
    )
}

/// Every object of the kinds weir could create, as `Kind/name`.
fn objects(server: &KubeServer) -> BTreeSet<String> {
    [
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("networking.istio.io/v1", "VirtualService"),
        ("networking.istio.io/v1", "DestinationRule"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("v1", "ConfigMap"),
    ]
    .iter()
    .flat_map(|(api_version, kind)| {
        server
            .list(api_version, kind, NAMESPACE)
            .into_iter()
            .map(move |object| format!("{kind}/{}", object["metadata"]["name"].as_str().unwrap()))
    })
    .collect()
}

fn run_of(server: &KubeServer) -> u64 {
    rollout_status(server)["run"].as_u64().unwrap_or(0)
}

#[test]
fn a_managed_rollout_owns_its_objects_runs_only_for_new_templates_and_reverts_hand_edits() {
    let cluster = Cluster::empty(env!("CARGO_BIN_EXE_weir"));
    let server = &cluster.server;
    cluster.apply(&rollout("podinfo:6.0.0", 2, ""));
    let operator = cluster.start_operator(&[]);

    // 1. Exactly a Deployment, a Service and a VirtualService, each owned by the rollout.
    let expected: BTreeSet<String> = [
        "Deployment/podinfo",
        "Service/podinfo",
        "VirtualService/podinfo",
    ]
    .map(str::to_string)
    .into();
    let created = wait_until("the managed objects and an initialised rollout", || {
        let phase = rollout_status(server)["phase"].clone();
        (objects(server) == expected && phase == "Initialized").then(|| objects(server))
    });
    let uid = server
        .get("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo")
        .unwrap()["metadata"]["uid"]
        .clone();
    for (api_version, kind) in [
        ("apps/v1", "Deployment"),
        ("v1", "Service"),
        ("networking.istio.io/v1", "VirtualService"),
    ] {
        let object = server.get(api_version, kind, NAMESPACE, "podinfo").unwrap();
        let owner = &object["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "Rollout", "{kind}: {object:#}");
        assert_eq!(owner["uid"], uid, "{kind}");
        assert_eq!(owner["controller"], true, "{kind}");
    }
    assert_eq!(replicas_of(server, "podinfo"), 2);
    assert_eq!(image_of(server, "podinfo"), "podinfo:6.0.0");
    assert_eq!(route_weights(server), [("podinfo".to_string(), 100)].into());
    let runs_at_start = run_of(server);

    // 2. Replicas only: scaled in place, no run.
    cluster.apply(&rollout("podinfo:6.0.0", 3, ""));
    wait_until("3 replicas", || {
        (replicas_of(server, "podinfo") == 3).then_some(())
    });
    assert!(
        server
            .get("apps/v1", "Deployment", NAMESPACE, "podinfo-canary")
            .is_none()
    );

    // 3. A new image: a run through a canary Deployment, then promoted in place.
    cluster.apply(&rollout("podinfo:6.0.1", 3, ""));
    let mut canary_weights = BTreeSet::new();
    let mut canary_objects = BTreeSet::new();
    wait_until("the new image promoted", || {
        if let Some(weight) = route_weights(server).get("podinfo-canary") {
            canary_weights.insert(*weight);
            canary_objects = objects(server);
        }
        let status = rollout_status(server);
        (status["phase"] == "Succeeded" && status["run"].as_u64() == Some(runs_at_start + 1))
            .then_some(())
    });
    assert!(
        canary_weights.is_superset(&[20, 40, 60].into()),
        "{canary_weights:?}"
    );
    assert!(
        canary_objects.contains("Deployment/podinfo-canary")
            && canary_objects.contains("Service/podinfo-canary"),
        "{canary_objects:?}"
    );
    let after_run = wait_until("the canary's objects gone after the run", || {
        (objects(server) == expected).then(|| objects(server))
    });
    assert_eq!(image_of(server, "podinfo"), "podinfo:6.0.1");
    assert_eq!(replicas_of(server, "podinfo"), 3);
    assert_eq!(
        run_of(server),
        runs_at_start + 1,
        "the replicas change started no run"
    );

    // 4. skipCanary: the next template goes live with no analysis, and the flag is cleared.
    cluster.apply(&rollout("podinfo:6.0.2", 3, "skipCanary: true"));
    wait_until("6.0.2 live and skipCanary cleared", || {
        let rollout = server.get("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo")?;
        let status = &rollout["status"];
        (status["phase"] == "Succeeded"
            && status["run"].as_u64() == Some(runs_at_start + 2)
            && rollout["spec"]["target"].get("skipCanary").is_none())
        .then_some(())
    });
    assert_eq!(image_of(server, "podinfo"), "podinfo:6.0.2");
    let history = cluster.history(&operator, "podinfo");
    let skipped_run: Vec<&Value> = history
        .iter()
        .filter(|event| event["run"].as_u64() == Some(runs_at_start + 2))
        .collect();
    assert!(
        skipped_run
            .iter()
            .all(|event| event["canaryWeight"].as_i64().unwrap_or(0) == 0),
        "no traffic step in a skipped run: {skipped_run:?}"
    );
    let cleared = history
        .iter()
        .filter_map(|event| event["message"].as_str())
        .find(|message| message.contains("skipCanary cleared"))
        .unwrap_or_else(|| panic!("{history:?}"))
        .to_string();
    assert!(cleared.contains("kubectl"), "who set it: {cleared}");

    // 5. A hand edit of the VirtualService is reverted and reported (history and Event).
    let patched = cluster.kubectl(&[
        "patch",
        "virtualservice.networking.istio.io/podinfo",
        "-n",
        NAMESPACE,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"http":[{"route":[{"destination":{"host":"podinfo","port":{"number":9898}},"weight":50},{"destination":{"host":"elsewhere"},"weight":50}]}]}}"#,
    ]);
    assert!(patched.status.success(), "{}", text(&patched.stderr));
    wait_until("the VirtualService reverted", || {
        (route_weights(server) == [("podinfo".to_string(), 100)].into()).then_some(())
    });
    let reverted = wait_until("the revert reported as a Kubernetes Event", || {
        server
            .list("v1", "Event", NAMESPACE)
            .into_iter()
            .filter_map(|event| event["message"].as_str().map(str::to_string))
            .find(|message| message.contains("reverted a change made by hand to VirtualService"))
    });
    assert!(reverted.contains("spec.http[0].route"), "{reverted}");

    // 6. Deleting the rollout collects everything it owns.
    let deleted = cluster.kubectl(&["delete", "rollout.weir.dev/podinfo", "-n", NAMESPACE]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    wait_until("every owned object gone", || {
        objects(server).is_empty().then_some(())
    });
    println!(
        "created: {created:?}; during the run: {canary_objects:?} with canary weights {canary_weights:?}; \
         after it: {after_run:?}; skipped run events: {}; {cleared}; {reverted}; after delete: {:?}",
        skipped_run.len(),
        objects(server),
    );
}

#[test]
fn a_config_map_the_template_reads_is_part_of_the_revision_and_copied_for_the_primary() {
    let cluster = Cluster::empty(env!("CARGO_BIN_EXE_weir"));
    let server = &cluster.server;
    server
        .create(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "podinfo-config", "namespace": NAMESPACE},
            "data": {"color": "blue"},
        }))
        .unwrap();
    // The run waits at 20% for `weir resume`, so what the primary reads during it is seen.
    let reading_config = rollout_with_plan(
        "podinfo:6.0.0",
        2,
        "",
        "{canary: {steps: [{weight: 20, pause: {}}, {weight: 100}]}}",
    )
    .replace(
        "ports: [",
        "envFrom: [{configMapRef: {name: podinfo-config}}]\n            ports: [",
    );
    cluster.apply(&reading_config);
    let operator = cluster.start_operator(&[]);
    let copy = |server: &KubeServer| {
        server
            .get("v1", "ConfigMap", NAMESPACE, "podinfo-config-primary")
            .map(|config| config["data"]["color"].clone())
    };
    wait_until("initialised, the primary reading its copy", || {
        (rollout_status(server)["phase"] == "Initialized"
            && copy(server) == Some(Value::from("blue")))
        .then_some(())
    });
    let primary = server
        .get("apps/v1", "Deployment", NAMESPACE, "podinfo")
        .unwrap();
    assert_eq!(
        primary["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"],
        "podinfo-config-primary"
    );
    let runs = run_of(server);

    // Only the ConfigMap changes: a new revision, judged on the canary (which reads the
    // ConfigMap itself) while the primary keeps its copy of the old data.
    server
        .merge_patch(
            "v1",
            "ConfigMap",
            NAMESPACE,
            "podinfo-config",
            &serde_json::json!({"data": {"color": "green"}}),
            false,
        )
        .unwrap();
    let canary_reads = wait_until("the run waiting at 20%", || {
        let canary = server.get("apps/v1", "Deployment", NAMESPACE, "podinfo-canary")?;
        (rollout_status(server)["waitingForResume"] == true
            && route_weights(server).get("podinfo-canary") == Some(&20))
        .then(|| {
            canary["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"]
                ["name"]
                .clone()
        })
    });
    assert_eq!(canary_reads, "podinfo-config");
    let primary_during_run = copy(server);
    assert_eq!(primary_during_run, Some(Value::from("blue")));
    let resumed = cluster.weir(&operator, &["resume", "podinfo"]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    wait_until("the new config promoted", || {
        let status = rollout_status(server);
        (status["phase"] == "Succeeded" && status["run"].as_u64() == Some(runs + 1)).then_some(())
    });
    wait_until("the primary's copy updated at promotion", || {
        (copy(server) == Some(Value::from("green"))).then_some(())
    });
    println!(
        "run {} for a ConfigMap change; the canary read {canary_reads}; the primary's copy during the run: {primary_during_run:?}, after: green",
        runs + 1
    );
}
