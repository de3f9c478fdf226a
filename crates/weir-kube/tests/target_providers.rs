//! The `kubernetes` target with the providers that read the user's objects or write
//! cluster-scoped ones, driven directly against the in-memory API server: the user's Ingress
//! (nginx), ApisixRoute (apisix) and Upstream (gloo) are read before each route, a missing one
//! is a transient error naming the field that names it, Kuma's TrafficRoute is written and
//! deleted cluster-wide, and reverting deletes what the provider owns and nothing of the user's.
//! The routers' CRDs here are permissive stand-ins (any spec); tests/route_crds.rs checks the
//! objects against the real ones. The in-memory server has no built-in Ingress, so a stand-in
//! CRD serves `networking.k8s.io/v1` ingresses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use weir_core::Weight;
use weir_core::document::{self, Document};
use weir_core::machine::{Effect, Route};
use weir_core::model::{Phase, Rollout, RolloutStatus};
use weir_engine::TargetProvider;
use weir_kube::target::KubernetesTargets;
use weir_store::RolloutKey;
use weir_testkit::kube_cluster::{self, NAMESPACE};
use weir_testkit::kube_server::KubeServer;

/// A CRD that takes any spec.
fn crd(group: &str, version: &str, kind: &str, plural: &str, scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "scope": scope,
            "versions": [{"name": version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

struct Setup {
    server: KubeServer,
    targets: KubernetesTargets,
    key: RolloutKey,
    rollout: Rollout,
}

/// Deployment `podinfo`, the providers' CRDs, `user` objects, and rollout `podinfo` whose
/// `spec.target` is `podinfo` with `target` merged in (the provider and its references).
async fn set_up(target: Value, annotations: Value, user: &[Value]) -> Setup {
    let server = KubeServer::start().await;
    server
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}))
        .unwrap();
    for crd in [
        crd(
            "networking.k8s.io",
            "v1",
            "Ingress",
            "ingresses",
            "Namespaced",
        ),
        crd(
            "apisix.apache.org",
            "v2",
            "ApisixRoute",
            "apisixroutes",
            "Namespaced",
        ),
        crd("gloo.solo.io", "v1", "Upstream", "upstreams", "Namespaced"),
        crd(
            "gateway.solo.io",
            "v1",
            "RouteTable",
            "routetables",
            "Namespaced",
        ),
        crd(
            "projectcontour.io",
            "v1",
            "HTTPProxy",
            "httpproxies",
            "Namespaced",
        ),
        crd(
            "kuma.io",
            "v1alpha1",
            "TrafficRoute",
            "trafficroutes",
            "Cluster",
        ),
    ] {
        server.create(crd).unwrap();
    }
    server
        .create(serde_json::to_value(weir_kube::crd::rollout_crd().unwrap()).unwrap())
        .unwrap();
    server
        .create(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "podinfo", "namespace": NAMESPACE},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "podinfo"}},
                "template": {
                    "metadata": {"labels": {"app": "podinfo"}},
                    "spec": {"containers": [{"name": "podinfod", "image": "podinfo:6.0.0",
                        "ports": [{"name": "http", "containerPort": 9898}]}]}
                }
            }
        }))
        .unwrap();
    roll_out(&server, "podinfo");
    for object in user {
        server.create(object.clone()).unwrap();
    }
    let mut spec_target = json!({
        "kind": "kubernetes",
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
        "service": {"port": 80}
    });
    for (key, value) in target.as_object().unwrap() {
        spec_target[key] = value.clone();
    }
    let created = server
        .create(json!({
            "apiVersion": "weir.dev/v1alpha1",
            "kind": "Rollout",
            "metadata": {"name": "podinfo", "namespace": NAMESPACE, "annotations": annotations},
            "spec": {
                "target": spec_target,
                "plan": {"canary": {"stepWeights": [10, 50]}},
                "analysis": {"interval": "1s", "threshold": 2},
                "revertOnDeletion": true
            }
        }))
        .unwrap();
    let loaded = document::load_value(&json!({
        "apiVersion": created["apiVersion"],
        "kind": created["kind"],
        "metadata": {"name": "podinfo", "namespace": NAMESPACE, "uid": created["metadata"]["uid"],
            "annotations": annotations},
        "spec": created["spec"],
    }))
    .unwrap();
    let Document::Rollout(rollout) = loaded.document else {
        panic!("a Rollout loads as a rollout");
    };
    let config = kube::Config::new(server.url().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    Setup {
        server,
        targets: KubernetesTargets::new(client),
        key: RolloutKey::new(NAMESPACE, "podinfo"),
        rollout: *rollout,
    }
}

/// Plays the Deployment controller once: `name`'s spec is rolled out and available.
fn roll_out(server: &KubeServer, name: &str) {
    kube_cluster::roll_out(server, NAMESPACE, name);
}

impl Setup {
    /// Set-up as the operator's reconcile does it, to phase Initialized (the route at 0).
    async fn initialise(&self) {
        self.targets
            .reconcile(&self.key, &self.rollout, &RolloutStatus::default())
            .await
            .unwrap();
        roll_out(&self.server, "podinfo-primary");
        let initialized = RolloutStatus {
            phase: Phase::Initialized,
            ..RolloutStatus::default()
        };
        self.targets
            .reconcile(&self.key, &self.rollout, &initialized)
            .await
            .unwrap();
    }

    /// The route at `percent`, as the engine applies it.
    async fn route(&self, percent: u32) -> Result<(), weir_engine::ProviderError> {
        let status = RolloutStatus {
            run: 1,
            phase: Phase::Progressing,
            canary_weight: Weight::from_percent(percent),
            ..RolloutStatus::default()
        };
        let route = Route::of(&self.rollout.spec, &status);
        self.targets
            .apply(&self.key, &self.rollout, &status, &Effect::SetRoute(route))
            .await
    }

    /// Reverts until done (the target first comes back and must be ready).
    async fn revert(&self) {
        let _ = self.targets.revert(&self.key, &self.rollout).await;
        roll_out(&self.server, "podinfo");
        self.targets.revert(&self.key, &self.rollout).await.unwrap();
    }

    fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        self.server.get(api_version, kind, NAMESPACE, name)
    }
}

fn ingress() -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "podinfo", "namespace": NAMESPACE,
            "annotations": {"kubernetes.io/ingress.class": "nginx"}},
        "spec": {"rules": [{"host": "app.example.com", "http": {"paths": [{
            "path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "podinfo", "port": {"number": 80}}}}]}}]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_reads_the_users_ingress_before_each_route_and_reverts_only_its_copy() {
    let setup = set_up(
        json!({"provider": "nginx",
            "ingressRef": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "podinfo"}}),
        json!({}),
        &[ingress()],
    )
    .await;
    setup.initialise().await;
    let canary = |setup: &Setup| setup.get("networking.k8s.io/v1", "Ingress", "podinfo-canary");
    let weight = |setup: &Setup| {
        canary(setup).unwrap()["metadata"]["annotations"]["nginx.ingress.kubernetes.io/canary-weight"]
            .clone()
    };
    assert_eq!(weight(&setup), "0", "set up with no traffic on the canary");
    setup.route(10).await.unwrap();
    assert_eq!(weight(&setup), "10");
    assert_eq!(
        canary(&setup).unwrap()["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"],
        "podinfo-canary"
    );

    // The user's Ingress gone: the next route waits for it, naming it.
    setup
        .server
        .delete("networking.k8s.io/v1", "Ingress", NAMESPACE, "podinfo")
        .unwrap();
    let error = setup.route(50).await.unwrap_err();
    assert!(
        error.to_string().contains(
            "the Ingress shop/podinfo named by spec.target.ingressRef does not exist (yet)"
        ),
        "{error}"
    );
    assert!(!error.is_permanent(), "{error}");
    setup.server.create(ingress()).unwrap();
    setup.route(50).await.unwrap();
    assert_eq!(weight(&setup), "50");

    setup.revert().await;
    assert!(canary(&setup).is_none(), "the canary Ingress is deleted");
    assert!(
        setup
            .get("networking.k8s.io/v1", "Ingress", "podinfo")
            .is_some(),
        "the user's stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apisix_and_gloo_work_from_the_users_objects() {
    let route = json!({
        "apiVersion": "apisix.apache.org/v2", "kind": "ApisixRoute",
        "metadata": {"name": "podinfo", "namespace": NAMESPACE},
        "spec": {"http": [{"name": "method", "match": {"paths": ["/*"]},
            "backends": [{"serviceName": "podinfo", "servicePort": 80}]}]}
    });
    let setup = set_up(
        json!({"provider": "apisix",
            "routeRef": {"apiVersion": "apisix.apache.org/v2", "kind": "ApisixRoute", "name": "podinfo"}}),
        json!({}),
        &[route],
    )
    .await;
    setup.initialise().await;
    setup.route(10).await.unwrap();
    let canary = setup
        .get(
            "apisix.apache.org/v2",
            "ApisixRoute",
            "podinfo-podinfo-canary",
        )
        .unwrap();
    assert_eq!(canary["spec"]["http"][0]["priority"], 10_000);
    assert_eq!(
        canary["spec"]["http"][0]["backends"],
        json!([
            {"serviceName": "podinfo-primary", "servicePort": 80, "weight": 90},
            {"serviceName": "podinfo-canary", "servicePort": 80, "weight": 10},
        ])
    );
    setup.revert().await;
    assert!(
        setup
            .get(
                "apisix.apache.org/v2",
                "ApisixRoute",
                "podinfo-podinfo-canary"
            )
            .is_none()
    );
    assert!(
        setup
            .get("apisix.apache.org/v2", "ApisixRoute", "podinfo")
            .is_some()
    );

    let upstream = json!({
        "apiVersion": "gloo.solo.io/v1", "kind": "Upstream",
        "metadata": {"name": "config-upstream", "namespace": NAMESPACE},
        "spec": {"connectionConfig": {"maxRequestsPerConnection": 51}}
    });
    let setup = set_up(
        json!({"provider": "gloo",
            "upstreamRef": {"apiVersion": "gloo.solo.io/v1", "kind": "Upstream", "name": "config-upstream"}}),
        json!({}),
        &[upstream],
    )
    .await;
    setup.initialise().await;
    setup.route(10).await.unwrap();
    let primary = setup
        .get(
            "gloo.solo.io/v1",
            "Upstream",
            "shop-podinfo-primaryupstream-80",
        )
        .unwrap();
    assert_eq!(
        primary["spec"]["connectionConfig"]["maxRequestsPerConnection"],
        51
    );
    let table = setup
        .get("gateway.solo.io/v1", "RouteTable", "podinfo")
        .unwrap();
    assert_eq!(
        table["spec"]["routes"][0]["routeAction"]["multi"]["destinations"][1]["weight"],
        10
    );
    // A change to the user's Upstream follows at the next step.
    setup
        .server
        .merge_patch(
            "gloo.solo.io/v1",
            "Upstream",
            NAMESPACE,
            "config-upstream",
            &json!({"spec": {"connectionConfig": {"maxRequestsPerConnection": 20}}}),
            false,
        )
        .unwrap();
    setup.route(50).await.unwrap();
    let primary = setup
        .get(
            "gloo.solo.io/v1",
            "Upstream",
            "shop-podinfo-primaryupstream-80",
        )
        .unwrap();
    assert_eq!(
        primary["spec"]["connectionConfig"]["maxRequestsPerConnection"],
        20
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kuma_writes_and_deletes_its_route_cluster_wide_and_contour_its_httpproxy() {
    let setup = set_up(
        json!({"provider": "kuma"}),
        json!({"kuma.io/mesh": "payments"}),
        &[],
    )
    .await;
    setup.initialise().await;
    setup.route(10).await.unwrap();
    let route = setup
        .server
        .get("kuma.io/v1alpha1", "TrafficRoute", "", "podinfo.shop")
        .unwrap();
    assert_eq!(route["mesh"], "payments");
    assert_eq!(route["spec"]["conf"]["split"][1]["weight"], 10);
    setup.revert().await;
    assert!(
        setup
            .server
            .get("kuma.io/v1alpha1", "TrafficRoute", "", "podinfo.shop")
            .is_none()
    );

    let setup = set_up(json!({"provider": "contour"}), json!({}), &[]).await;
    setup.initialise().await;
    setup.route(10).await.unwrap();
    let proxy = setup
        .get("projectcontour.io/v1", "HTTPProxy", "podinfo")
        .unwrap();
    assert_eq!(proxy["spec"]["routes"][0]["services"][1]["weight"], 10);
    setup.revert().await;
    assert!(
        setup
            .get("projectcontour.io/v1", "HTTPProxy", "podinfo")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_target_refuses_what_the_provider_cannot_express() {
    let setup = set_up(json!({"provider": "traefik"}), json!({}), &[]).await;
    let mut rollout = setup.rollout.clone();
    rollout.spec.plan = serde_json::from_value(json!({"abTest": {"iterations": 3,
        "match": [{"headers": {"x-canary": {"exact": "insider"}}}]}}))
    .unwrap();
    let errors = setup.targets.validate(&rollout);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "spec.plan.abTest.match");
    assert!(
        errors[0]
            .message
            .contains("provider traefik cannot send matching requests to the canary"),
        "{errors:?}"
    );

    for (provider, expected) in [
        ("appmesh", "AWS shut App Mesh down on 2026-09-30"),
        ("osm", "Open Service Mesh is archived"),
        ("istoi", "is not a provider weir drives; one of istio"),
    ] {
        let mut rollout = setup.rollout.clone();
        if let weir_core::model::Target::Kubernetes(target) = &mut rollout.spec.target {
            target.provider = Some(provider.into());
        }
        let errors = setup.targets.validate(&rollout);
        assert!(
            errors
                .iter()
                .any(|error| error.path == "spec.target.provider"
                    && error.message.contains(expected)),
            "{provider}: {errors:?}"
        );
    }

    // Knative rolls out a Knative Service, not this Deployment.
    let mut rollout = setup.rollout.clone();
    if let weir_core::model::Target::Kubernetes(target) = &mut rollout.spec.target {
        target.provider = Some("knative".into());
    }
    let errors = setup.targets.validate(&rollout);
    assert!(
        errors
            .iter()
            .any(|error| error.path == "spec.target.targetRef.kind"
                && error
                    .message
                    .contains("provider knative rolls out a Knative Service")),
        "{errors:?}"
    );

    let mut rollout = setup.rollout.clone();
    if let weir_core::model::Target::Kubernetes(target) = &mut rollout.spec.target {
        target.provider = Some("nginx".into());
    }
    let errors = setup.targets.validate(&rollout);
    assert_eq!(errors[0].path, "spec.target.ingressRef", "{errors:?}");
}
