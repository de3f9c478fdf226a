//! DaemonSet targets run by the real `weir operator` against the in-memory API server, whose
//! DaemonSet controller (the testkit's, 3 nodes) makes new pods available 2 s after each change:
//! a weir Rollout with `provider: kubernetes` and a blue/green plan is set up (the apex Service
//! on the primary DaemonSet only once its pods are available, the target waiting at zero with
//! Flagger's `flagger.app/scale-to-zero` node selector), run and promoted, while a traffic audit
//! checks after every write that the apex Service always has available pods behind it. Then
//! Flagger's own DaemonSet Canary from the compatibility corpus (when it sits beside the
//! project) runs to promotion and, deleted, gives the application back to its DaemonSet.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::{Value, json};
use weir_testkit::deployment_controller::Readiness;
use weir_testkit::fixtures::compat_dir;
use weir_testkit::kube_cluster::{Cluster, NAMESPACE, text};
use weir_testkit::kube_server::KubeServer;
use weir_testkit::traffic_audit::TrafficAudit;
use weir_testkit::wait::wait_until;

/// How long new pods take to become available in these tests.
const POD_START: Duration = Duration::from_secs(2);

const SCALE_TO_ZERO: &str = "flagger.app/scale-to-zero";

const ROLLOUT: &str = "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: podinfo-ds, namespace: shop}
spec:
  target:
    kind: kubernetes
    targetRef: {apiVersion: apps/v1, kind: DaemonSet, name: podinfo-ds}
    provider: kubernetes
    service: {port: 80, targetPort: 9898}
  plan: {blueGreen: {iterations: 3}}
  analysis: {interval: 1s, threshold: 2, progressDeadline: 2m}
";

/// DaemonSet `podinfo-ds` running `image` on Linux nodes (all 3 of the testkit's).
fn daemon_set_yaml(image: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: podinfo-ds, namespace: {NAMESPACE}, labels: {{app: podinfo-ds}}}}
spec:
  selector:
    matchLabels: {{app: podinfo-ds}}
  template:
    metadata:
      labels: {{app: podinfo-ds}}
    spec:
      nodeSelector: {{kubernetes.io/os: linux}}
      containers:
      - name: podinfod
        image: {image}
        ports:
        - {{name: http, containerPort: 9898}}
"
    )
}

/// The user's own Service `podinfo-ds`, selecting the DaemonSet's pods, as they had it before.
fn users_service() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "podinfo-ds", "namespace": NAMESPACE},
        "spec": {"selector": {"app": "podinfo-ds"}, "ports": [{"name": "http", "port": 80, "targetPort": 9898}]}
    })
}

fn daemon_set(server: &KubeServer, name: &str) -> Value {
    server
        .get("apps/v1", "DaemonSet", NAMESPACE, name)
        .unwrap_or(Value::Null)
}

fn available(server: &KubeServer, name: &str) -> i64 {
    daemon_set(server, name)["status"]["numberAvailable"]
        .as_i64()
        .unwrap_or(0)
}

fn scaled_to_zero(server: &KubeServer) -> bool {
    daemon_set(server, "podinfo-ds")["spec"]["template"]["spec"]["nodeSelector"]
        .get(SCALE_TO_ZERO)
        .is_some()
}

fn image_of(server: &KubeServer, name: &str) -> String {
    daemon_set(server, name)["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn set_image(server: &KubeServer, image: &str) {
    server
        .merge_patch(
            "apps/v1",
            "DaemonSet",
            NAMESPACE,
            "podinfo-ds",
            &json!({"spec": {"template": {"spec": {"containers": [{"name": "podinfod", "image": image,
                "ports": [{"name": "http", "containerPort": 9898}]}]}}}}),
            false,
        )
        .unwrap();
}

fn rollout_status(server: &KubeServer) -> Value {
    server
        .get("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo-ds")
        .map(|rollout| rollout["status"].clone())
        .unwrap_or(Value::Null)
}

fn apex_selector(server: &KubeServer) -> Value {
    server
        .get("v1", "Service", NAMESPACE, "podinfo-ds")
        .map(|apex| apex["spec"]["selector"].clone())
        .unwrap_or(Value::Null)
}

/// A cluster whose new pods take [`POD_START`], with DaemonSet `podinfo-ds` applied by kubectl
/// and serving on all 3 nodes through the user's own Service.
fn cluster_with_daemon_set() -> Cluster {
    let cluster =
        Cluster::empty_with_readiness(env!("CARGO_BIN_EXE_weir"), Readiness::After(POD_START));
    cluster.apply(&daemon_set_yaml("podinfo:6.0.0"));
    cluster.server.create(users_service()).unwrap();
    wait_until("podinfo-ds's own pods available on the 3 nodes", || {
        (available(&cluster.server, "podinfo-ds") == 3).then_some(())
    });
    cluster
}

#[test]
fn a_daemon_set_is_set_up_run_blue_green_and_promoted_with_traffic_always_on_available_pods() {
    let cluster = cluster_with_daemon_set();
    let server = &cluster.server;
    let audit = TrafficAudit::start(server, NAMESPACE, &["podinfo-ds"]);
    cluster.apply(ROLLOUT);
    let operator = cluster.start_operator(&[]);

    let initialized = wait_until("set-up done", || {
        let status = rollout_status(server);
        (status["phase"] == "Initialized").then_some(status)
    });
    assert_eq!(
        available(server, "podinfo-ds-primary"),
        3,
        "{initialized:#}"
    );
    wait_until(
        "the apex Service on the primary, the target at zero",
        || {
            (apex_selector(server) == json!({"app": "podinfo-ds-primary"})
                && scaled_to_zero(server)
                && daemon_set(server, "podinfo-ds")["status"]["desiredNumberScheduled"] == 0)
                .then_some(())
        },
    );
    let primary = daemon_set(server, "podinfo-ds-primary");
    assert_eq!(
        primary["spec"]["template"]["spec"]["nodeSelector"],
        json!({"kubernetes.io/os": "linux"})
    );
    assert_eq!(primary["metadata"]["ownerReferences"][0]["kind"], "Rollout");
    let history = cluster.history(&operator, "podinfo-ds");
    let reasons: Vec<&str> = history
        .iter()
        .map(|event| event["reason"].as_str().unwrap_or_default())
        .collect();
    let waited = reasons
        .iter()
        .position(|reason| *reason == "WaitingForPrimary");
    let done = reasons.iter().position(|reason| *reason == "Initialized");
    assert!(
        waited.is_some() && waited < done,
        "set-up waits for the primary's pods, then reports Initialized: {reasons:?}"
    );
    assert_eq!(
        rollout_status(server)["run"].as_u64().unwrap_or(0),
        0,
        "scaling the target to zero is not a new revision"
    );
    // As a user sees it.
    let listed = cluster.kubectl(&["get", "daemonsets", "-n", NAMESPACE]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listed = text(&listed.stdout);
    assert!(
        listed.contains("podinfo-ds-primary") && listed.contains("flagger.app/scale-to-zero=true"),
        "{listed}"
    );

    // A new image: the target back on its nodes for the run, the primary promoted, the target
    // at zero again.
    set_image(server, "podinfo:6.0.1");
    let mut phases: Vec<String> = Vec::new();
    let mut target_up = false;
    wait_until("the run promoted, the target at zero again", || {
        let status = rollout_status(server);
        if let Some(phase) = status["phase"].as_str()
            && phases.last().map(String::as_str) != Some(phase)
        {
            phases.push(phase.to_string());
        }
        target_up |= available(server, "podinfo-ds") == 3 && !scaled_to_zero(server);
        (status["phase"] == "Succeeded" && scaled_to_zero(server)).then_some(())
    });
    assert!(target_up, "the run scaled the target up: {phases:?}");
    assert!(phases.contains(&"Progressing".to_string()), "{phases:?}");
    assert_eq!(image_of(server, "podinfo-ds-primary"), "podinfo:6.0.1");
    assert_eq!(rollout_status(server)["run"], 1);
    wait_until("the promoted primary available", || {
        (available(server, "podinfo-ds-primary") == 3).then_some(())
    });
    assert_eq!(apex_selector(server), json!({"app": "podinfo-ds-primary"}));

    let summary = audit.summary();
    println!("phases: {phases:?}\n{summary}");
    assert!(
        audit.moments() > 15,
        "the audit saw the whole story: {summary}"
    );
    audit.assert_clean();
}

#[test]
fn a_canary_plan_on_a_daemon_set_is_refused_naming_the_kind_and_the_plan() {
    let cluster = cluster_with_daemon_set();
    let server = &cluster.server;
    cluster.apply(&ROLLOUT.replace(
        "plan: {blueGreen: {iterations: 3}}",
        "plan: {canary: {stepWeight: 20}}",
    ));
    let _operator = cluster.start_operator(&[]);
    let message = wait_until("the rollout refused, in its status", || {
        rollout_status(server)["message"]
            .as_str()
            .filter(|message| message.starts_with("refused"))
            .map(str::to_string)
    });
    assert!(
        message.contains("spec.plan.canary")
            && message.contains("spec.target.targetRef.kind is DaemonSet")
            && message.contains("blue/green only"),
        "{message}"
    );
    println!("{message}");
    // Nothing was set up, and the user's Service still selects their DaemonSet.
    assert!(server_has_no_primary(server));
    assert!(!scaled_to_zero(server));
    assert_eq!(apex_selector(server), json!({"app": "podinfo-ds"}));
}

fn server_has_no_primary(server: &KubeServer) -> bool {
    server
        .get("apps/v1", "DaemonSet", NAMESPACE, "podinfo-ds-primary")
        .is_none()
}

fn canary_status(cluster: &Cluster) -> Value {
    cluster
        .server
        .get("flagger.app/v1beta1", "Canary", NAMESPACE, "podinfo-ds")
        .map(|canary| canary["status"].clone())
        .unwrap_or(Value::Null)
}

#[test]
fn flaggers_daemon_set_canary_from_the_corpus_runs_to_promotion_and_reverts_on_deletion() {
    let Some(dir) = compat_dir() else {
        println!("compat corpus not found: skipped");
        return;
    };
    let file = dir.join("canaries/test-kubernetes-test-daemonset-7ad04c7f.yaml");
    let mut canary: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    // As Flagger's e2e test has it, but in this test's namespace, two iterations (of Flagger's
    // shortest interval, 10 s) instead of 5, and without what needs Prometheus and Flagger's
    // load tester.
    canary["metadata"]["namespace"] = json!(NAMESPACE);
    assert_eq!(canary["spec"]["targetRef"]["kind"], "DaemonSet");
    assert_eq!(canary["spec"]["revertOnDeletion"], true);
    let analysis = &mut canary["spec"]["analysis"];
    assert_eq!(analysis["iterations"], 5);
    analysis["iterations"] = json!(2);
    analysis["interval"] = json!("10s");
    let analysis = analysis.as_object_mut().unwrap();
    analysis.remove("metrics");
    analysis.remove("webhooks");

    let started = std::time::Instant::now();
    let cluster = cluster_with_daemon_set();
    let server = &cluster.server;
    println!("with {}", cluster.install_flagger_crd());
    let audit = TrafficAudit::start(server, NAMESPACE, &["podinfo-ds"]);
    cluster.apply(&serde_json::to_string(&canary).unwrap());
    let _operator = cluster.start_operator(&[]);
    wait_until("the Canary initialised, in Flagger's words", || {
        (canary_status(&cluster)["phase"] == "Initialized"
            && apex_selector(server) == json!({"app": "podinfo-ds-primary"})
            && scaled_to_zero(server))
        .then_some(())
    });

    println!("initialised after {:?}", started.elapsed());
    set_image(server, "podinfo:6.0.1");
    let mut phases: Vec<String> = Vec::new();
    let status = wait_until("the Canary promoted", || {
        let status = canary_status(&cluster);
        if let Some(phase) = status["phase"].as_str()
            && phases.last().map(String::as_str) != Some(phase)
        {
            phases.push(phase.to_string());
        }
        (status["phase"] == "Succeeded" && scaled_to_zero(server)).then_some(status)
    });
    assert_eq!(image_of(server, "podinfo-ds-primary"), "podinfo:6.0.1");
    assert_eq!(status["conditions"][0]["type"], "Promoted");
    assert_eq!(status["conditions"][0]["status"], "True");
    assert!(phases.contains(&"Progressing".to_string()), "{phases:?}");
    // The Services as Flagger makes them for this Canary: port 80 to 9898.
    let canary_service = server
        .get("v1", "Service", NAMESPACE, "podinfo-ds-canary")
        .unwrap();
    assert_eq!(
        canary_service["spec"]["selector"],
        json!({"app": "podinfo-ds"})
    );
    assert_eq!(canary_service["spec"]["ports"][0]["port"], 80);
    assert_eq!(canary_service["spec"]["ports"][0]["targetPort"], 9898);

    println!("promoted after {:?}", started.elapsed());
    // revertOnDeletion: deleting the Canary gives the application back to its DaemonSet.
    let deleted = cluster.kubectl(&[
        "delete",
        "canary/podinfo-ds",
        "-n",
        NAMESPACE,
        "--timeout=90s",
    ]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    println!("Canary deleted after {:?}", started.elapsed());
    wait_until("the application back on its own DaemonSet", || {
        (server_has_no_primary(server)
            && server
                .get("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo-ds")
                .is_none())
        .then_some(())
    });
    println!("reverted after {:?}", started.elapsed());
    assert!(!scaled_to_zero(server));
    assert_eq!(available(server, "podinfo-ds"), 3);
    assert_eq!(image_of(server, "podinfo-ds"), "podinfo:6.0.1");
    let apex = server
        .get("v1", "Service", NAMESPACE, "podinfo-ds")
        .unwrap();
    assert_eq!(apex["spec"]["selector"], json!({"app": "podinfo-ds"}));
    assert!(apex["metadata"]["ownerReferences"].is_null(), "{apex:#}");
    for name in ["podinfo-ds-primary", "podinfo-ds-canary"] {
        assert!(
            server.get("v1", "Service", NAMESPACE, name).is_none(),
            "Service {name}"
        );
    }
    let summary = audit.summary();
    println!("phases: {phases:?}\n{summary}");
    audit.assert_clean();
}
