//! What the in-memory API server's tests play besides the server: the Deployment controller
//! with a readiness delay, and the traffic audit over the server's change feed. Orders are
//! checked on the feed (every write, in order), times only as lower bounds.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use weir_testkit::deployment_controller::{DeploymentController, Readiness};
use weir_testkit::kube_cluster::router_crd;
use weir_testkit::kube_server::{Change, ChangeFeed, KubeServer};
use weir_testkit::traffic_audit::TrafficAudit;
use weir_testkit::wait::{no_hang, wait_for_ok};

const NS: &str = "default";

fn deployment(name: &str, replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image}]}
            }
        }
    })
}

fn service(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": {"app": app}, "ports": [{"port": 9898}]}
    })
}

fn deployments_feed(server: &KubeServer) -> ChangeFeed {
    server.subscribe(|group, resource, _| group == "apps" && resource == "deployments")
}

fn count(object: &Value, field: &str) -> i64 {
    object
        .pointer(&format!("/status/{field}"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The statuses Deployment `name` went through, in order, from `changes` (one per write).
fn statuses(changes: &[Change], name: &str) -> Vec<(i64, i64, i64)> {
    changes
        .iter()
        .filter(|change| change.object["metadata"]["name"] == name)
        .map(|change| {
            (
                count(&change.object, "observedGeneration"),
                count(&change.object, "updatedReplicas"),
                count(&change.object, "availableReplicas"),
            )
        })
        .collect()
}

/// Waits until Deployment `name` reports `(observedGeneration, updated, available)`.
async fn wait_for_status(server: &KubeServer, name: &str, wanted: (i64, i64, i64)) {
    wait_for_ok(&format!("Deployment {name} at {wanted:?}"), || {
        let seen = server.get("apps/v1", "Deployment", NS, name).map(|d| {
            (
                count(&d, "observedGeneration"),
                count(&d, "updatedReplicas"),
                count(&d, "availableReplicas"),
            )
        });
        async move {
            match seen {
                Some(seen) if seen == wanted => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_deployment_becomes_available_only_after_the_delay() {
    no_hang(async {
        let server = Arc::new(KubeServer::start().await);
        let delay = Duration::from_millis(800);
        let _controller = DeploymentController::spawn(server.clone(), NS, Readiness::After(delay));
        let feed = deployments_feed(&server);
        let created = Instant::now();
        server.create(deployment("app", 2, "app:1")).unwrap();
        wait_for_status(&server, "app", (1, 2, 2)).await;
        // The controller counts the delay from when it saw the Deployment, after its creation.
        assert!(
            created.elapsed() >= delay,
            "available after {:?}",
            created.elapsed()
        );
        let seen = statuses(&feed.take(), "app");
        // Created (no status), seen at once with nothing available, then all available.
        assert_eq!(seen, [(0, 0, 0), (1, 0, 0), (1, 2, 2)], "{seen:?}");
        let status = server.get("apps/v1", "Deployment", NS, "app").unwrap()["status"].clone();
        assert_eq!(
            status,
            json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                   "readyReplicas": 2, "availableReplicas": 2})
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_keeps_the_old_pods_available_until_the_new_ones_are() {
    no_hang(async {
        let server = Arc::new(KubeServer::start().await);
        let controller = DeploymentController::spawn(server.clone(), NS, Readiness::Instant);
        server.create(deployment("app", 3, "app:1")).unwrap();
        wait_for_status(&server, "app", (1, 3, 3)).await;

        let delay = Duration::from_millis(800);
        controller.set_readiness(Readiness::After(delay));
        let feed = deployments_feed(&server);
        let changed = Instant::now();
        server
            .merge_patch(
                "apps/v1",
                "Deployment",
                NS,
                "app",
                &json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}}),
                false,
            )
            .unwrap();
        wait_for_status(&server, "app", (2, 3, 3)).await;
        assert!(changed.elapsed() >= delay, "updated after {:?}", changed.elapsed());
        let seen = statuses(&feed.take(), "app");
        // The new spec (generation 2, status unchanged), seen at once: the 3 old pods serve,
        // none updated; then all updated.
        assert_eq!(seen, [(1, 3, 3), (2, 0, 3), (2, 3, 3)], "{seen:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_up_waits_for_the_delay_and_scaling_down_does_not() {
    no_hang(async {
        let server = Arc::new(KubeServer::start().await);
        let controller = DeploymentController::spawn(server.clone(), NS, Readiness::Instant);
        server.create(deployment("app", 2, "app:1")).unwrap();
        wait_for_status(&server, "app", (1, 2, 2)).await;
        controller.set_readiness(Readiness::After(Duration::from_millis(500)));
        let feed = deployments_feed(&server);
        let scale = |replicas: i64| {
            server
                .merge_patch(
                    "apps/v1",
                    "Deployment",
                    NS,
                    "app",
                    &json!({"spec": {"replicas": replicas}}),
                    false,
                )
                .unwrap();
        };
        scale(4);
        wait_for_status(&server, "app", (2, 4, 4)).await;
        scale(1);
        wait_for_status(&server, "app", (3, 1, 1)).await;
        let seen = statuses(&feed.take(), "app");
        // Scaled up: the 2 serve until the delay; scaled down: 1 in the controller's first
        // write after the change.
        assert_eq!(
            seen,
            [(1, 2, 2), (2, 2, 2), (2, 4, 4), (2, 4, 4), (3, 1, 1)],
            "{seen:?}"
        );
        assert_eq!(
            server.get("apps/v1", "Deployment", NS, "app").unwrap()["status"]["replicas"],
            1
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_keeps_new_pods_unavailable_while_a_delayed_deployment_comes_up() {
    no_hang(async {
        let server = Arc::new(KubeServer::start().await);
        let controller = DeploymentController::spawn(server.clone(), NS, Readiness::Never);
        controller.set_readiness_of("old", Readiness::Instant);
        server.create(deployment("old", 2, "app:1")).unwrap();
        wait_for_status(&server, "old", (1, 2, 2)).await;
        controller.set_readiness_of("old", Readiness::Never);
        server
            .merge_patch(
                "apps/v1",
                "Deployment",
                NS,
                "old",
                &json!({"spec": {"template": {"metadata": {"annotations": {"release": "2"}}}}}),
                false,
            )
            .unwrap();
        server.create(deployment("never", 2, "app:1")).unwrap();
        // A witness created after both, whose pods take a while: once it serves, the
        // controller has looked at the others for longer than that while.
        controller.set_readiness_of("witness", Readiness::After(Duration::from_millis(300)));
        server.create(deployment("witness", 1, "app:1")).unwrap();
        wait_for_status(&server, "witness", (1, 1, 1)).await;
        // The new Deployment has nothing available; the rolling update keeps its old pods.
        let seen = |name: &str| {
            let d = server.get("apps/v1", "Deployment", NS, name).unwrap();
            let fields = [
                "observedGeneration",
                "replicas",
                "updatedReplicas",
                "availableReplicas",
            ];
            fields.map(|field| count(&d, field))
        };
        assert_eq!(seen("never"), [1, 2, 0, 0]);
        assert_eq!(seen("old"), [2, 2, 0, 2]);
    })
    .await;
}

/// The resourceVersions of `violations`, with their Services.
fn flagged(audit: &TrafficAudit) -> Vec<(u64, String)> {
    audit
        .violations()
        .into_iter()
        .map(|v| (v.resource_version, v.service))
        .collect()
}

fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn set_available(server: &KubeServer, name: &str, available: i64) -> u64 {
    rv(&server
        .merge_patch(
            "apps/v1",
            "Deployment",
            NS,
            name,
            &json!({"status": {"availableReplicas": available}}),
            true,
        )
        .unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_flags_a_service_whose_deployment_has_no_available_replica() {
    let server = KubeServer::start().await;
    let audit = TrafficAudit::start(&server, NS, &["podinfo"]);
    // No Service yet: nothing to call.
    server.create(deployment("podinfo", 2, "app:1")).unwrap();
    // The Service arrives before any pod is available: a bad moment.
    let service_created = rv(&server.create(service("podinfo", "podinfo")).unwrap());
    let available = set_available(&server, "podinfo", 2);
    let dropped = set_available(&server, "podinfo", 0);
    let back = set_available(&server, "podinfo", 1);
    // A Service nobody routes to or calls, selecting nothing: not audited.
    server.create(service("unused", "nothing")).unwrap();
    assert!(available < dropped && dropped < back);
    assert_eq!(
        flagged(&audit),
        [
            (service_created, "podinfo".to_owned()),
            (dropped, "podinfo".to_owned())
        ],
        "{}",
        audit.summary()
    );
    let first = &audit.violations()[0];
    assert_eq!(first.why, ["apex Service"]);
    assert_eq!(first.backends, [("podinfo".to_owned(), 0)]);
    assert!(!first.missing);
    // The state it started in, then one per write to a Deployment or Service.
    assert_eq!(audit.moments(), 1 + 6);
    let summary = audit.summary();
    println!("{summary}");
    assert!(summary.contains("7 moments evaluated"), "{summary}");
    assert!(
        summary.contains(&format!(
            "resourceVersion {dropped}: Service podinfo carries traffic (apex Service) but no Deployment or DaemonSet behind it has an available pod: podinfo (0 available)"
        )),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_flags_a_weight_moved_to_a_canary_not_yet_available() {
    let server = KubeServer::start().await;
    server
        .create(router_crd(
            "networking.istio.io",
            "VirtualService",
            "virtualservices",
        ))
        .unwrap();
    for name in ["podinfo-primary", "podinfo-canary"] {
        server.create(deployment(name, 2, "app:1")).unwrap();
        server.create(service(name, name)).unwrap();
    }
    server
        .create(service("podinfo", "podinfo-primary"))
        .unwrap();
    set_available(&server, "podinfo-primary", 2);
    let weights = |primary: i64, canary: i64| {
        json!({"spec": {"hosts": ["podinfo"], "http": [{"route": [
            {"destination": {"host": "podinfo-primary"}, "weight": primary},
            {"destination": {"host": "podinfo-canary.default.svc.cluster.local"}, "weight": canary},
        ]}]}})
    };
    let mut routes = weights(100, 0);
    routes["apiVersion"] = json!("networking.istio.io/v1");
    routes["kind"] = json!("VirtualService");
    routes["metadata"] = json!({"name": "podinfo", "namespace": NS});
    server.create(routes).unwrap();

    // Everything so far is fine: the audit starts here.
    let audit = TrafficAudit::start(&server, NS, &[]);
    let patch = |primary: i64, canary: i64| {
        rv(&server
            .merge_patch(
                "networking.istio.io/v1",
                "VirtualService",
                NS,
                "podinfo",
                &weights(primary, canary),
                false,
            )
            .unwrap())
    };
    let too_early = patch(90, 10);
    set_available(&server, "podinfo-canary", 2);
    patch(50, 50);
    // The primary scaled to 0 while it still has half of the traffic.
    let primary_gone = set_available(&server, "podinfo-primary", 0);
    set_available(&server, "podinfo-primary", 2);
    assert_eq!(
        flagged(&audit),
        [
            (too_early, "podinfo-canary".to_owned()),
            (primary_gone, "podinfo".to_owned()),
            (primary_gone, "podinfo-primary".to_owned()),
        ],
        "{}",
        audit.summary()
    );
    let canary = &audit.violations()[0];
    assert_eq!(
        canary.why,
        ["destination of VirtualService podinfo (http[0], weight 10)"]
    );
    assert_eq!(canary.backends, [("podinfo-canary".to_owned(), 0)]);
    // The apex is the VirtualService's host: it carries traffic to what its selector matches.
    let apex = &audit.violations()[1];
    assert_eq!(apex.why, ["host of VirtualService podinfo"]);
    assert_eq!(audit.moments(), 1 + 5);
    println!("{}", audit.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_sees_every_state_of_a_delayed_rollout_in_order() {
    no_hang(async {
        let server = Arc::new(KubeServer::start().await);
        let _controller = DeploymentController::spawn(
            server.clone(),
            NS,
            Readiness::After(Duration::from_millis(300)),
        );
        let audit = TrafficAudit::start(&server, NS, &["app"]);
        let exposed = rv(&server.create(service("app", "app")).unwrap());
        server.create(deployment("app", 2, "app:1")).unwrap();
        wait_for_status(&server, "app", (1, 2, 2)).await;
        let violations = audit.violations();
        // From the Service's creation (selecting nothing yet) until the pods were available,
        // each state was bad; none after.
        assert!(violations.len() >= 3, "{}", audit.summary());
        assert_eq!(violations[0].resource_version, exposed);
        assert!(violations[0].backends.is_empty());
        assert_eq!(violations[1].backends, [("app".to_owned(), 0)]);
        let available_at = audit.resource_version();
        assert!(
            violations.iter().all(|v| v.resource_version < available_at),
            "{}",
            audit.summary()
        );
        println!("{}", audit.summary());
    })
    .await;
}
