//! `weir operator` on a cluster where pods take time: the testkit's Deployment controller makes
//! new pods available 3 s after each change (a rolling update keeps the old ones serving), and a
//! traffic audit evaluates the cluster after every write to a Service, a Deployment or a route
//! object. Through set-up, a run, promotion and a rollback, no moment may have a Service or a
//! route sending traffic to Deployments with no available replica. A primary that never becomes
//! available fails set-up at the progress deadline and leaves the user's Service and Deployment
//! as they were.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::{Value, json};
use weir_testkit::deployment_controller::Readiness;
use weir_testkit::kube_cluster::{
    Cluster, NAMESPACE, canary_weight, image_of, replicas_of, rollout_status,
    rollout_yaml_with_analysis, text,
};
use weir_testkit::kube_server::KubeServer;
use weir_testkit::traffic_audit::TrafficAudit;
use weir_testkit::wait::wait_until;

/// How long new pods take to become available in these tests.
const POD_START: Duration = Duration::from_secs(3);

/// The user's own Service `podinfo`, selecting the Deployment's pods, as they had it before weir.
fn users_service() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "podinfo", "namespace": NAMESPACE},
        "spec": {"selector": {"app": "podinfo"}, "ports": [{"name": "http", "port": 9898, "targetPort": 9898}]}
    })
}

fn available(server: &KubeServer, name: &str) -> i64 {
    server
        .get("apps/v1", "Deployment", NAMESPACE, name)
        .and_then(|deployment| deployment["status"]["availableReplicas"].as_i64())
        .unwrap_or(0)
}

/// A cluster whose new pods take [`POD_START`], with `podinfo` serving through the user's own
/// Service, audited from then on.
fn slow_cluster() -> (Cluster, TrafficAudit) {
    let cluster = Cluster::with_readiness(env!("CARGO_BIN_EXE_weir"), Readiness::After(POD_START));
    let server = &cluster.server;
    server.create(users_service()).unwrap();
    wait_until("podinfo's own pods available", || {
        (available(server, "podinfo") == 2).then_some(())
    });
    let audit = TrafficAudit::start(server, NAMESPACE, &["podinfo"]);
    (cluster, audit)
}

fn reasons(history: &[Value]) -> Vec<String> {
    history
        .iter()
        .map(|event| event["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn no_traffic_reaches_an_unavailable_deployment_through_set_up_a_run_promotion_and_rollback() {
    let (cluster, audit) = slow_cluster();
    let server = &cluster.server;
    cluster.apply(&rollout_yaml_with_analysis(
        "{canary: {steps: [{weight: 20}, {weight: 50, pause: {}}, {weight: 100}]}}",
        "{interval: 1s, threshold: 2, progressDeadline: 2m}",
    ));
    let operator = cluster.start_operator(&[]);

    let initialized = wait_until("set-up done", || {
        let status = rollout_status(server);
        (status["phase"] == "Initialized").then_some(status)
    });
    assert_eq!(available(server, "podinfo-primary"), 2, "{initialized:#}");
    wait_until(
        "the apex Service on the primary, the target at zero",
        || {
            let apex = server.get("v1", "Service", NAMESPACE, "podinfo")?;
            (apex["spec"]["selector"] == json!({"app": "podinfo-primary"})
                && replicas_of(server, "podinfo") == 0)
                .then_some(())
        },
    );
    let history = reasons(&cluster.history(&operator, "podinfo"));
    let waited = history
        .iter()
        .position(|reason| reason == "WaitingForPrimary");
    let done = history.iter().position(|reason| reason == "Initialized");
    assert!(
        waited.is_some() && waited < done,
        "set-up waits for the primary, then reports Initialized: {history:?}"
    );

    // A run to promotion: the canary gets traffic only once its pods are available; the
    // promoted primary's rolling update keeps its old pods serving.
    cluster.set_image("podinfo:6.0.1");
    wait_until("the run at 50%, waiting to be resumed", || {
        (canary_weight(server) == Some(50) && rollout_status(server)["waitingForResume"] == true)
            .then_some(())
    });
    let resumed = cluster.weir(&operator, &["resume", "podinfo"]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    wait_until("promotion done, the target at zero", || {
        (rollout_status(server)["phase"] == "Succeeded"
            && canary_weight(server) == Some(0)
            && replicas_of(server, "podinfo") == 0)
            .then_some(())
    });
    assert_eq!(image_of(server, "podinfo-primary"), "podinfo:6.0.1");

    // A rollback: abort mid-run; all traffic back on the primary, then the canary down.
    cluster.set_image("podinfo:6.0.2");
    wait_until("the next run at 50%", || {
        (canary_weight(server) == Some(50) && rollout_status(server)["waitingForResume"] == true)
            .then_some(())
    });
    let aborted = cluster.weir(&operator, &["abort", "podinfo"]);
    assert!(aborted.status.success(), "{}", text(&aborted.stderr));
    wait_until("the rollback done", || {
        (rollout_status(server)["phase"] == "Failed"
            && canary_weight(server) == Some(0)
            && replicas_of(server, "podinfo") == 0)
            .then_some(())
    });
    assert_eq!(image_of(server, "podinfo-primary"), "podinfo:6.0.1");

    let summary = audit.summary();
    println!("{summary}");
    assert!(
        audit.moments() > 20,
        "the audit saw the whole story: {summary}"
    );
    audit.assert_clean();
}

#[test]
fn a_primary_never_available_fails_set_up_leaving_the_users_service_and_deployment_as_they_were() {
    let (cluster, audit) = slow_cluster();
    let server = &cluster.server;
    cluster
        .deployment_controller()
        .set_readiness_of("podinfo-primary", Readiness::Never);
    let service_before = server.get("v1", "Service", NAMESPACE, "podinfo").unwrap();
    cluster.apply(&rollout_yaml_with_analysis(
        "{canary: {stepWeight: 50}}",
        "{interval: 1s, threshold: 2, progressDeadline: 5s}",
    ));
    let operator = cluster.start_operator(&[]);

    let failed = wait_until("set-up failed at the progress deadline", || {
        let status = rollout_status(server);
        (status["phase"] == "Failed").then_some(status)
    });
    assert_eq!(failed["run"].as_u64().unwrap_or(0), 0, "{failed:#}");
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("set-up failed") && message.contains("progress deadline (5s)"),
        "{message}"
    );
    let condition = &failed["conditions"][0];
    assert_eq!(condition["type"], "Promoted");
    assert_eq!(condition["status"], "False");
    assert!(reasons(&cluster.history(&operator, "podinfo")).contains(&"SetupFailed".to_string()));
    // The user's Service and Deployment are as they were; nothing routes to the primary.
    let service_after = server.get("v1", "Service", NAMESPACE, "podinfo").unwrap();
    assert_eq!(service_after["spec"], service_before["spec"]);
    assert_eq!(
        service_after["metadata"]["resourceVersion"],
        service_before["metadata"]["resourceVersion"]
    );
    assert_eq!(replicas_of(server, "podinfo"), 2);
    assert_eq!(available(server, "podinfo"), 2);
    assert!(
        server
            .get(
                "networking.istio.io/v1",
                "VirtualService",
                NAMESPACE,
                "podinfo"
            )
            .is_none()
    );
    let events = cluster.kubectl(&[
        "get",
        "events",
        "-n",
        NAMESPACE,
        "--field-selector",
        "reason=SetupFailed",
        "-o",
        "json",
    ]);
    assert!(events.status.success(), "{}", text(&events.stderr));
    assert!(
        text(&events.stdout).contains("set-up failed"),
        "a Kubernetes Event says so: {}",
        text(&events.stdout)
    );

    // Fixed (its pods start after all): set-up completes on its own.
    cluster
        .deployment_controller()
        .set_readiness_of("podinfo-primary", Readiness::After(POD_START));
    wait_until("set-up completed once the primary is available", || {
        (rollout_status(server)["phase"] == "Initialized" && replicas_of(server, "podinfo") == 0)
            .then_some(())
    });
    let summary = audit.summary();
    println!("{summary}");
    audit.assert_clean();
}
