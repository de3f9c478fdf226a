//! weir's Argo Rollouts traffic routers (`weir_kube::argo_traffic::route`) against the in-memory
//! API server: Istio VirtualService weights (host- and subset-level, HTTP/TLS/TCP routes), the
//! Gateway API plugin's backendRef weights and in-progress label, SMI TrafficSplits, nginx canary
//! Ingresses; a second pass with the same weights writes nothing; missing objects and routers
//! weir does not run are refused with a reason. Then the Gateway API plugin's own e2e cases
//! (`compat/argo/gatewayapi-plugin/chainsaw`) with plain weights (HTTP, gRPC, TCP and TLS
//! routes), when that corpus is beside the project.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use serde_json::{Value, json};
use weir_core::argo::types::CanaryStrategy;
use weir_kube::argo_traffic::{Weights, route};
use weir_testkit::argo_cluster::install_argo_crds;
use weir_testkit::kube_cluster::router_crd;
use weir_testkit::kube_server::KubeServer;

const NS: &str = "shop";
const VIRTUAL_SERVICES: &str = "virtualservices.networking.istio.io";
const HTTP_ROUTES: &str = "httproutes.gateway.networking.k8s.io";
const INGRESSES: &str = "ingresses.networking.k8s.io";
const SPLITS: &str = "trafficsplits.split.smi-spec.io";

/// The server with namespace `shop` and a client of it.
async fn cluster() -> (KubeServer, kube::Client) {
    let server = KubeServer::start().await;
    for namespace in [NS, "default"] {
        let created = server.create(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        );
        if let Err(error) = created {
            assert_eq!(error.reason, "AlreadyExists", "{error:?}");
        }
    }
    // The Rollout the objects weir creates are owned by (the server collects objects whose
    // owner does not exist, as the garbage collector does).
    install_argo_crds(&server);
    server
        .create(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "web:1"}]}}},
        }))
        .unwrap();
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    (server, client)
}

/// A stand-in CRD for `kind` of `group` served at `versions` (the first is stored).
fn crd(group: &str, kind: &str, plural: &str, versions: &[&str]) -> Value {
    let mut crd = router_crd(group, kind, plural);
    crd["spec"]["versions"] = versions
        .iter()
        .enumerate()
        .map(|(i, version)| {
            json!({"name": version, "served": true, "storage": i == 0,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
        })
        .collect();
    crd
}

/// `spec.strategy.canary` from JSON.
fn strategy(canary: Value) -> CanaryStrategy {
    serde_json::from_value(canary).unwrap()
}

/// Canary `canary` of 100.
fn weights(canary: i64) -> Weights {
    Weights {
        canary,
        stable: 100 - canary,
    }
}

/// The ownerReference of Rollout `web`.
fn owner(server: &KubeServer) -> Value {
    let uid = get(server, "argoproj.io/v1alpha1", "Rollout", "web")["metadata"]["uid"].clone();
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "web",
        "uid": uid, "controller": true, "blockOwnerDeletion": true})
}

/// `route` for Rollout `web` in `shop`, without hashes.
async fn route_web(
    server: &KubeServer,
    client: &kube::Client,
    canary: &CanaryStrategy,
    weights: Weights,
) -> Result<(), String> {
    route(
        client,
        NS,
        "web",
        canary,
        weights,
        None,
        Some(&owner(server)),
    )
    .await
    .expect("the API answers")
}

fn get(server: &KubeServer, api_version: &str, kind: &str, name: &str) -> Value {
    server
        .get(api_version, kind, NS, name)
        .unwrap_or_else(|| panic!("{kind} {name} exists"))
}

/// The `weight`s of `spec.<kind>[index].route[]`, by host (and subset).
fn istio_weights(vs: &Value, kind: &str, index: usize) -> Vec<(String, Option<i64>)> {
    vs["spec"][kind][index]["route"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let mut name = d["destination"]["host"].as_str().unwrap().to_owned();
            if let Some(subset) = d["destination"]["subset"].as_str() {
                name = format!("{name}/{subset}");
            }
            (name, d["weight"].as_i64())
        })
        .collect()
}

fn istio_crds(server: &KubeServer, versions: &[&str]) {
    server
        .create(crd(
            "networking.istio.io",
            "VirtualService",
            "virtualservices",
            versions,
        ))
        .unwrap();
    server
        .create(crd(
            "networking.istio.io",
            "DestinationRule",
            "destinationrules",
            versions,
        ))
        .unwrap();
}

fn destination(host: &str, weight: Option<i64>) -> Value {
    let mut destination = json!({"destination": {"host": host, "port": {"number": 80}}});
    if let Some(weight) = weight {
        destination["weight"] = json!(weight);
    }
    destination
}

#[tokio::test]
async fn istio_weights_go_to_the_named_http_routes_only_when_they_change() {
    let (server, client) = cluster().await;
    istio_crds(&server, &["v1beta1", "v1alpha3"]);
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
            "metadata": {"name": "web-vs", "namespace": NS},
            "spec": {"hosts": ["web.example.com"], "http": [
                {"name": "admin", "match": [{"uri": {"prefix": "/admin"}}],
                 "route": [destination("admin", Some(100))]},
                {"name": "primary", "route": [
                    destination("web-stable", Some(100)),
                    destination("web-canary.shop.svc.cluster.local", Some(0))]},
                {"name": "secondary", "route": [
                    destination("web-stable.shop", None),
                    destination("web-canary.shop.svc", None),
                    destination("retired-experiment", Some(10)),
                    destination("idle", Some(0))]},
            ]},
        }))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"istio": {"virtualService": {"name": "web-vs", "routes": ["primary", "secondary"]}}},
    }));
    for (weight, writes) in [(0, 1), (30, 2), (100, 3)] {
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        let vs = get(
            &server,
            "networking.istio.io/v1beta1",
            "VirtualService",
            "web-vs",
        );
        assert_eq!(
            istio_weights(&vs, "http", 1),
            [
                ("web-stable".to_owned(), Some(100 - weight)),
                ("web-canary.shop.svc.cluster.local".to_owned(), Some(weight))
            ]
        );
        assert_eq!(
            istio_weights(&vs, "http", 2),
            [
                ("web-stable.shop".to_owned(), Some(100 - weight)),
                ("web-canary.shop.svc".to_owned(), Some(weight)),
                ("idle".to_owned(), Some(0))
            ]
        );
        assert_eq!(
            istio_weights(&vs, "http", 0),
            [("admin".to_owned(), Some(100))]
        );
        assert_eq!(vs["spec"]["http"][0]["match"][0]["uri"]["prefix"], "/admin");
        assert_eq!(server.writes(VIRTUAL_SERVICES), writes, "after {weight}");
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        assert_eq!(
            server.writes(VIRTUAL_SERVICES),
            writes,
            "the same weights again"
        );
    }
}

#[tokio::test]
async fn istio_splits_the_only_http_route_and_the_named_tls_and_tcp_routes() {
    let (server, client) = cluster().await;
    istio_crds(&server, &["v1alpha3"]);
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1alpha3", "kind": "VirtualService",
            "metadata": {"name": "only", "namespace": NS},
            "spec": {"hosts": ["web"], "http": [{"route": [
                destination("web-stable", None), destination("web-canary", None)]}]},
        }))
        .unwrap();
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1alpha3", "kind": "VirtualService",
            "metadata": {"name": "wire", "namespace": NS},
            "spec": {"hosts": ["web"],
                "tls": [
                    {"match": [{"port": 3000, "sniHosts": ["other.example.com"]}], "route": [destination("other", Some(100))]},
                    {"match": [{"port": 3000, "sniHosts": ["web.example.com", "www.example.com"]}],
                     "route": [destination("web-stable", Some(100)), destination("web-canary", Some(0))]},
                ],
                "tcp": [
                    {"match": [{"port": 4000}], "route": [destination("web-stable", Some(100)), destination("web-canary", Some(0))]},
                    {"match": [{"port": 5000}], "route": [destination("db", Some(100))]},
                ]},
        }))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"istio": {"virtualServices": [
            {"name": "only"},
            {"name": "wire", "routes": ["primary"], "tlsRoutes": [{"port": 3000, "sniHosts": ["www.example.com", "web.example.com"]}], "tcpRoutes": [{"port": 4000}]},
        ]}},
    }));
    route_web(&server, &client, &canary, weights(40))
        .await
        .unwrap();
    let only = get(
        &server,
        "networking.istio.io/v1alpha3",
        "VirtualService",
        "only",
    );
    assert_eq!(
        istio_weights(&only, "http", 0),
        [
            ("web-stable".to_owned(), Some(60)),
            ("web-canary".to_owned(), Some(40))
        ]
    );
    let wire = get(
        &server,
        "networking.istio.io/v1alpha3",
        "VirtualService",
        "wire",
    );
    let split = [
        ("web-stable".to_owned(), Some(60)),
        ("web-canary".to_owned(), Some(40)),
    ];
    assert_eq!(istio_weights(&wire, "tls", 1), split);
    assert_eq!(istio_weights(&wire, "tcp", 0), split);
    assert_eq!(
        istio_weights(&wire, "tls", 0),
        [("other".to_owned(), Some(100))]
    );
    assert_eq!(
        istio_weights(&wire, "tcp", 1),
        [("db".to_owned(), Some(100))]
    );
    assert_eq!(server.writes(VIRTUAL_SERVICES), 2, "both patched");
    for (routes, expected) in [
        (
            json!({"tlsRoutes": [{"port": 3000, "sniHosts": ["web.example.com"]}]}),
            "No matching TLS routes found in the defined Virtual Service.",
        ),
        (
            json!({"tlsRoutes": [{"port": 3000, "sniHosts": ["web.example.com", "www.example.com"]}], "tcpRoutes": [{"port": 4001}]}),
            "No matching TCP routes found in the defined Virtual Service.",
        ),
        (
            json!({}),
            "spec.tls[] should be set in VirtualService and it must have exactly one route when omitting spec.strategy.canary.trafficRouting.istio.virtualService.tlsRoutes",
        ),
    ] {
        let mut service = json!({"name": "wire"});
        service
            .as_object_mut()
            .unwrap()
            .extend(routes.as_object().unwrap().clone());
        let canary = strategy(json!({
            "stableService": "web-stable", "canaryService": "web-canary",
            "trafficRouting": {"istio": {"virtualService": service}},
        }));
        let refused = route_web(&server, &client, &canary, weights(40))
            .await
            .unwrap_err();
        assert!(
            refused.starts_with("spec.strategy.canary.trafficRouting.istio.virtualService.name: Invalid value: \"wire\": ")
                && refused.ends_with(expected),
            "{refused}\nwanted: {expected}"
        );
    }
    assert_eq!(server.writes(VIRTUAL_SERVICES), 2, "nothing more written");
}

#[tokio::test]
async fn istio_header_routes_argo_added_do_not_count_as_the_only_route() {
    let (server, client) = cluster().await;
    istio_crds(&server, &["v1beta1"]);
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
            "metadata": {"name": "web-vs", "namespace": NS},
            "spec": {"hosts": ["web"], "http": [
                {"name": "beta-testers", "match": [{"headers": {"x-beta": {"exact": "1"}}}],
                 "route": [destination("web-canary", Some(100))]},
                {"route": [destination("web-stable", Some(100)), destination("web-canary", Some(0))]}]},
        }))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"managedRoutes": [{"name": "beta-testers"}],
            "istio": {"virtualService": {"name": "web-vs"}}},
    }));
    route_web(&server, &client, &canary, weights(5))
        .await
        .unwrap();
    let vs = get(
        &server,
        "networking.istio.io/v1beta1",
        "VirtualService",
        "web-vs",
    );
    assert_eq!(
        istio_weights(&vs, "http", 0),
        [("web-canary".to_owned(), Some(100))]
    );
    assert_eq!(
        istio_weights(&vs, "http", 1),
        [
            ("web-stable".to_owned(), Some(95)),
            ("web-canary".to_owned(), Some(5))
        ]
    );
}

#[tokio::test]
async fn istio_subsets_get_the_hashes_and_the_weights() {
    let (server, client) = cluster().await;
    istio_crds(&server, &["v1beta1"]);
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1beta1", "kind": "DestinationRule",
            "metadata": {"name": "web-rule", "namespace": NS},
            "spec": {"host": "web", "subsets": [
                {"name": "canary", "labels": {"app": "web"}},
                {"name": "stable", "labels": {"app": "web", "rollouts-pod-template-hash": "old"}},
                {"name": "legacy", "labels": {"app": "web", "version": "0"}},
            ]},
        }))
        .unwrap();
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
            "metadata": {"name": "web-vs", "namespace": NS},
            "spec": {"hosts": ["web"], "http": [{"name": "primary", "route": [
                {"destination": {"host": "web", "subset": "stable"}, "weight": 100},
                {"destination": {"host": "web", "subset": "canary"}, "weight": 0}]}]},
        }))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"istio": {
            "virtualService": {"name": "web-vs", "routes": ["primary"]},
            "destinationRule": {"name": "web-rule", "canarySubsetName": "canary", "stableSubsetName": "stable"},
        }},
    }));
    let refused = route(&client, NS, "web", &canary, weights(10), None, None)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        refused.contains("trafficRouting.istio.destinationRule"),
        "{refused}"
    );
    let hashes = Some(("6d4f8c9b7".to_owned(), "5b9d7f6c8".to_owned()));
    route(
        &client,
        NS,
        "web",
        &canary,
        weights(10),
        hashes.clone(),
        None,
    )
    .await
    .unwrap()
    .unwrap();
    let rule = get(
        &server,
        "networking.istio.io/v1beta1",
        "DestinationRule",
        "web-rule",
    );
    assert_eq!(
        rule["spec"]["subsets"],
        json!([
            {"name": "canary", "labels": {"app": "web", "rollouts-pod-template-hash": "6d4f8c9b7"}},
            {"name": "stable", "labels": {"app": "web", "rollouts-pod-template-hash": "5b9d7f6c8"}},
        ])
    );
    assert_eq!(
        rule["metadata"]["annotations"]["argo-rollouts.argoproj.io/managed-by-rollouts"],
        "web"
    );
    let vs = get(
        &server,
        "networking.istio.io/v1beta1",
        "VirtualService",
        "web-vs",
    );
    assert_eq!(
        istio_weights(&vs, "http", 0),
        [
            ("web/stable".to_owned(), Some(90)),
            ("web/canary".to_owned(), Some(10))
        ]
    );
    let writes = server.write_counts();
    route(&client, NS, "web", &canary, weights(10), hashes, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        server.write_counts(),
        writes,
        "nothing changed, nothing written"
    );
}

#[tokio::test]
async fn istio_refuses_missing_virtual_services_routes_and_services() {
    let (server, client) = cluster().await;
    istio_crds(&server, &["v1beta1"]);
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
            "metadata": {"name": "web-vs", "namespace": NS},
            "spec": {"hosts": ["web"], "http": [
                {"name": "primary", "route": [destination("web-stable", Some(100))]},
                {"name": "two", "route": [destination("web-stable", Some(100))]}]},
        }))
        .unwrap();
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
            "metadata": {"name": "ok-vs", "namespace": NS},
            "spec": {"hosts": ["web"], "http": [{"route": [
                destination("web-stable", Some(100)), destination("web-canary", Some(0))]}]},
        }))
        .unwrap();
    let cases = [
        (
            json!({"virtualService": {"name": "absent", "routes": ["primary"]}}),
            "spec.strategy.canary.trafficRouting.istio.virtualService.name: Invalid value: \"absent\": virtualservices.networking.istio.io \"absent\" not found",
        ),
        (
            json!({"virtualServices": [{"name": "ok-vs"}, {"name": "gone"}]}),
            "spec.strategy.canary.trafficRouting.istio.virtualServices[1].name: Invalid value: \"gone\"",
        ),
        (
            json!({"virtualService": {"name": "web-vs", "routes": ["nope"]}}),
            "HTTP Route 'nope' is not found in the defined Virtual Service.",
        ),
        (
            json!({"virtualService": {"name": "web-vs"}}),
            "spec.strategy.canary.trafficRouting.istio.virtualService.name: Invalid value: \"web-vs\": spec.http[] should be set in VirtualService and it must have exactly one route when omitting spec.strategy.canary.trafficRouting.istio.virtualService.routes",
        ),
        (
            json!({"virtualService": {"name": "web-vs", "routes": ["primary"]}}),
            "Canary Service 'web-canary' not found in route",
        ),
    ];
    for (istio, expected) in cases {
        let canary = strategy(json!({
            "stableService": "web-stable", "canaryService": "web-canary",
            "trafficRouting": {"istio": istio},
        }));
        let refused = route_web(&server, &client, &canary, weights(20))
            .await
            .unwrap_err();
        assert!(refused.contains(expected), "{refused}\nwanted: {expected}");
    }
    // Only ok-vs, split before the missing one was found; the next pass would not write it again.
    assert_eq!(server.writes(VIRTUAL_SERVICES), 1);
}

/// An HTTPRoute as the plugin's e2e cases write them: both Services' backendRefs in one rule.
fn http_route(name: &str, backends: &[&str]) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "parentRefs": [{"name": "edge", "namespace": "gateways"}],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": backends.iter().map(|name| json!({"name": name, "port": 80})).collect::<Vec<_>>(),
            }],
        },
    })
}

fn backend_weights(route: &Value) -> Vec<(String, Option<i64>)> {
    route["spec"]["rules"][0]["backendRefs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap().to_owned(), b["weight"].as_i64()))
        .collect()
}

#[tokio::test]
async fn gateway_api_backend_weights_and_the_in_progress_label() {
    let (server, client) = cluster().await;
    server
        .create(router_crd(
            "gateway.networking.k8s.io",
            "HTTPRoute",
            "httproutes",
        ))
        .unwrap();
    server
        .create(http_route(
            "web-route",
            &["web-stable", "web-canary", "web-extra"],
        ))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"plugins": {"argoproj-labs/gatewayAPI": {"httpRoutes": [{"name": "web-route"}]}}},
    }));
    let label = |route: &Value| {
        route["metadata"]["labels"]["rollouts.argoproj.io/gatewayapi-canary"]
            .as_str()
            .map(str::to_owned)
    };
    for (weight, writes, in_progress) in
        [(0, 1, false), (30, 2, true), (100, 3, true), (0, 4, false)]
    {
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        let route = get(
            &server,
            "gateway.networking.k8s.io/v1",
            "HTTPRoute",
            "web-route",
        );
        assert_eq!(
            backend_weights(&route),
            [
                ("web-stable".to_owned(), Some(100 - weight)),
                ("web-canary".to_owned(), Some(weight)),
                ("web-extra".to_owned(), None)
            ]
        );
        assert_eq!(label(&route), in_progress.then(|| "in-progress".to_owned()));
        assert_eq!(route["spec"]["parentRefs"][0]["name"], "edge");
        assert_eq!(server.writes(HTTP_ROUTES), writes, "after {weight}");
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        assert_eq!(server.writes(HTTP_ROUTES), writes, "the same weights again");
    }
}

#[tokio::test]
async fn gateway_api_refuses_missing_routes_and_backends() {
    let (server, client) = cluster().await;
    server
        .create(router_crd(
            "gateway.networking.k8s.io",
            "HTTPRoute",
            "httproutes",
        ))
        .unwrap();
    server
        .create(http_route("stable-only", &["web-stable"]))
        .unwrap();
    let cases = [
        (
            json!({"httpRoute": "absent"}),
            "spec.strategy.canary.trafficRouting.plugins.argoproj-labs/gatewayAPI.httpRoute: Invalid value: \"absent\": httproutes.gateway.networking.k8s.io \"absent\" not found",
        ),
        (
            json!({"httpRoute": "stable-only"}),
            "no rule has a backendRef to Service \"web-canary\"",
        ),
        (
            json!({"tcpRoute": "wire"}),
            "the cluster serves no TCPRoute",
        ),
        (json!({"namespace": NS}), "names no httpRoute(s)"),
    ];
    for (config, expected) in cases {
        let canary = strategy(json!({
            "stableService": "web-stable", "canaryService": "web-canary",
            "trafficRouting": {"plugins": {"argoproj-labs/gatewayAPI": config}},
        }));
        let refused = route_web(&server, &client, &canary, weights(20))
            .await
            .unwrap_err();
        assert!(refused.contains(expected), "{refused}\nwanted: {expected}");
    }
    assert_eq!(server.writes(HTTP_ROUTES), 0);
}

#[tokio::test]
async fn smi_traffic_split_is_created_owned_and_updated() {
    let (server, client) = cluster().await;
    server
        .create(crd(
            "split.smi-spec.io",
            "TrafficSplit",
            "trafficsplits",
            &["v1alpha1", "v1alpha2"],
        ))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"smi": {"rootService": "web"}},
    }));
    for (weight, writes) in [(0, 1), (30, 2), (100, 3)] {
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        let split = get(&server, "split.smi-spec.io/v1alpha1", "TrafficSplit", "web");
        assert_eq!(
            split["spec"],
            json!({"service": "web", "backends": [
                {"service": "web-canary", "weight": weight.to_string()},
                {"service": "web-stable", "weight": (100 - weight).to_string()}]})
        );
        assert_eq!(
            split["metadata"]["ownerReferences"],
            json!([owner(&server)])
        );
        assert_eq!(server.writes(SPLITS), writes, "after {weight}");
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        assert_eq!(server.writes(SPLITS), writes, "the same weights again");
    }
    server
        .create(
            json!({"apiVersion": "split.smi-spec.io/v1alpha1", "kind": "TrafficSplit",
            "metadata": {"name": "someone-elses", "namespace": NS},
            "spec": {"service": "web", "backends": [{"service": "web-stable", "weight": "100"}]}}),
        )
        .unwrap();
    let theirs = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"smi": {"trafficSplitName": "someone-elses"}},
    }));
    let refused = route_web(&server, &client, &theirs, weights(10))
        .await
        .unwrap_err();
    assert!(
        refused.contains("Rollout does not own TrafficSplit `someone-elses`"),
        "{refused}"
    );
}

#[tokio::test]
async fn smi_later_versions_take_numbers_and_the_stable_service_as_root() {
    let (server, client) = cluster().await;
    server
        .create(crd(
            "split.smi-spec.io",
            "TrafficSplit",
            "trafficsplits",
            &["v1alpha3"],
        ))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"smi": {"trafficSplitName": "web-split"}},
    }));
    route_web(&server, &client, &canary, weights(25))
        .await
        .unwrap();
    let split = get(
        &server,
        "split.smi-spec.io/v1alpha3",
        "TrafficSplit",
        "web-split",
    );
    assert_eq!(
        split["spec"],
        json!({"service": "web-stable", "backends": [
            {"service": "web-canary", "weight": 25}, {"service": "web-stable", "weight": 75}]})
    );
}

fn stable_ingress() -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "web-ingress", "namespace": NS,
            "annotations": {"kubernetes.io/ingress.class": "nginx", "nginx.ingress.kubernetes.io/rewrite-target": "/"}},
        "spec": {
            "ingressClassName": "nginx",
            "tls": [{"hosts": ["web.example.com"], "secretName": "web-tls"}],
            "rules": [
                {"host": "web.example.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web-stable", "port": {"number": 80}}}},
                    {"path": "/static", "pathType": "Prefix", "backend": {"service": {"name": "assets", "port": {"number": 80}}}}]}},
                {"host": "admin.example.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "admin", "port": {"number": 80}}}}]}},
            ],
        },
    })
}

#[tokio::test]
async fn nginx_canary_ingress_is_created_then_its_weight_updated() {
    let (server, client) = cluster().await;
    server.create(stable_ingress()).unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"nginx": {
            "stableIngress": "web-ingress",
            "additionalIngressAnnotations": {"canary-by-header": "X-Canary", "nginx.ingress.kubernetes.io/canary-by-cookie": "beta"},
            "canaryIngressAnnotations": {"team": "shop"},
        }},
    }));
    for (weight, writes) in [(0, 1), (30, 2), (100, 3)] {
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        let ingress = get(
            &server,
            "networking.k8s.io/v1",
            "Ingress",
            "web-web-ingress-canary",
        );
        assert_eq!(
            ingress["metadata"]["annotations"],
            json!({
                "kubernetes.io/ingress.class": "nginx",
                "nginx.ingress.kubernetes.io/canary": "true",
                "nginx.ingress.kubernetes.io/canary-weight": weight.to_string(),
                "nginx.ingress.kubernetes.io/canary-by-header": "X-Canary",
                "nginx.ingress.kubernetes.io/canary-by-cookie": "beta",
                "team": "shop",
            })
        );
        assert_eq!(
            ingress["spec"],
            json!({"ingressClassName": "nginx",
                "tls": [{"hosts": ["web.example.com"], "secretName": "web-tls"}],
                "rules": [{"host": "web.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web-canary", "port": {"number": 80}}}},
                {"path": "/static", "pathType": "Prefix", "backend": {"service": {"name": "assets", "port": {"number": 80}}}}]}}]})
        );
        assert_eq!(
            ingress["metadata"]["ownerReferences"],
            json!([owner(&server)])
        );
        assert_eq!(server.writes(INGRESSES), writes, "after {weight}");
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        assert_eq!(server.writes(INGRESSES), writes, "the same weights again");
    }
    let stable = get(&server, "networking.k8s.io/v1", "Ingress", "web-ingress");
    assert_eq!(stable, {
        let mut expected = stable_ingress();
        expected["metadata"] = stable["metadata"].clone();
        expected
    });
    assert_eq!(
        stable["metadata"]["annotations"],
        stable_ingress()["metadata"]["annotations"]
    );
}

#[tokio::test]
async fn nginx_prefix_total_weight_and_refusals() {
    let (server, client) = cluster().await;
    server.create(stable_ingress()).unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"maxTrafficWeight": 1000, "nginx": {
            "stableIngresses": ["web-ingress"], "annotationPrefix": "custom.nginx.org"}},
    }));
    route_web(
        &server,
        &client,
        &canary,
        Weights {
            canary: 250,
            stable: 750,
        },
    )
    .await
    .unwrap();
    let ingress = get(
        &server,
        "networking.k8s.io/v1",
        "Ingress",
        "web-web-ingress-canary",
    );
    assert_eq!(
        ingress["metadata"]["annotations"],
        json!({"kubernetes.io/ingress.class": "nginx", "custom.nginx.org/canary": "true",
            "custom.nginx.org/canary-weight": "250", "custom.nginx.org/canary-weight-total": "1000"})
    );
    let writes = server.writes(INGRESSES);
    let cases = [
        (
            json!({"stableIngress": "absent"}),
            "spec.strategy.canary.trafficRouting.nginx.stableIngress: Invalid value: \"absent\": ingresses.networking.k8s.io \"absent\" not found",
        ),
        (
            json!({"stableIngresses": ["web-ingress", "gone"]}),
            "spec.strategy.canary.trafficRouting.nginx.stableIngresses[1]: Invalid value: \"gone\"",
        ),
    ];
    for (nginx, expected) in cases {
        let canary = strategy(json!({
            "stableService": "web-stable", "canaryService": "web-canary",
            "trafficRouting": {"nginx": nginx},
        }));
        let refused = route_web(&server, &client, &canary, weights(20))
            .await
            .unwrap_err();
        assert!(refused.contains(expected), "{refused}\nwanted: {expected}");
    }
    let not_stable = strategy(json!({
        "stableService": "nothing-routes-here", "canaryService": "web-canary",
        "trafficRouting": {"nginx": {"stableIngress": "web-ingress"}},
    }));
    let refused = route_web(&server, &client, &not_stable, weights(20))
        .await
        .unwrap_err();
    assert!(
        refused.contains(
            "ingress `web-ingress` has no rules using service nothing-routes-here backend"
        ),
        "{refused}"
    );
    let refused = route(&client, NS, "web", &canary, weights(20), None, Some(&json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "name": "web", "uid": "another-uid"})))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        refused.contains("canary ingress `web-web-ingress-canary` controlled by different object"),
        "{refused}"
    );
    // The first case wrote the canary Ingress of web-ingress (the second stable Ingress is missing).
    assert_eq!(server.writes(INGRESSES), writes + 1);
}

#[tokio::test]
async fn routers_weir_does_not_run_are_refused_by_field() {
    let (server, client) = cluster().await;
    let cases = [
        (
            json!({"alb": {"ingress": "web"}}),
            "spec.strategy.canary.trafficRouting.alb: not run by weir's operator (it routes with istio, nginx, smi and the argoproj-labs/gatewayAPI plugin)",
        ),
        (
            json!({"traefik": {"weightedTraefikServiceName": "web"}}),
            "spec.strategy.canary.trafficRouting.traefik: not run",
        ),
        (
            json!({"ambassador": {"mappings": ["web"]}}),
            "spec.strategy.canary.trafficRouting.ambassador: not run",
        ),
        (
            json!({"apisix": {"route": {"name": "web"}}}),
            "spec.strategy.canary.trafficRouting.apisix: not run",
        ),
        (
            json!({"appMesh": {"virtualService": {"name": "web"}}}),
            "spec.strategy.canary.trafficRouting.appMesh: not run",
        ),
        (
            json!({"plugins": {"argoproj-labs/contour": {"httpProxy": "web"}}}),
            "spec.strategy.canary.trafficRouting.plugins.argoproj-labs/contour: not run",
        ),
    ];
    for (routing, expected) in cases {
        let canary = strategy(json!({
            "stableService": "web-stable", "canaryService": "web-canary", "trafficRouting": routing,
        }));
        let refused = route_web(&server, &client, &canary, weights(20))
            .await
            .unwrap_err();
        assert!(refused.contains(expected), "{refused}\nwanted: {expected}");
    }
    let no_services = strategy(json!({"trafficRouting": {"smi": {}}}));
    let refused = route_web(&server, &client, &no_services, weights(20))
        .await
        .unwrap_err();
    assert!(
        refused.contains("Canary service and Stable service must to be set"),
        "{refused}"
    );
    let no_routing = strategy(json!({"stableService": "a", "canaryService": "b"}));
    route_web(&server, &client, &no_routing, weights(20))
        .await
        .unwrap();
    assert!(
        server
            .write_counts()
            .keys()
            .all(|resource| resource == "namespaces"),
        "{:?}",
        server.write_counts()
    );
}

// The Gateway API plugin's e2e cases.

fn yaml_documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|document| !document.is_null())
        .collect()
}

/// Whether `actual` matches chainsaw assertion `expected` (partial: only the fields it names),
/// for the forms the plugin's cases use on routes: plain fields and lists (element by
/// element), `(field): value`, `(length(field)): n` and
/// ``(contains(keys(labels || `{}`), 'KEY')): bool``. The first mismatch, by path.
fn check(expected: &Value, actual: &Value, path: &str) -> Result<(), String> {
    match expected {
        Value::Object(fields) => {
            for (key, want) in fields {
                let here = format!("{path}.{key}");
                if let Some(expression) = key.strip_prefix('(').and_then(|k| k.strip_suffix(')')) {
                    let got = evaluate(expression, actual).map_err(|e| format!("{here}: {e}"))?;
                    if !same(want, &got) {
                        return Err(format!("{here}: wanted {want}, found {got}"));
                    }
                } else {
                    let got = actual.get(key).unwrap_or(&Value::Null);
                    check(want, got, &here)?;
                }
            }
            Ok(())
        }
        Value::Array(items) => {
            let got = actual
                .as_array()
                .ok_or_else(|| format!("{path}: wanted a list, found {actual}"))?;
            if got.len() < items.len() {
                return Err(format!(
                    "{path}: wanted {} items, found {}",
                    items.len(),
                    got.len()
                ));
            }
            for (i, (want, got)) in items.iter().zip(got).enumerate() {
                check(want, got, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        scalar if same(scalar, actual) => Ok(()),
        scalar => Err(format!("{path}: wanted {scalar}, found {actual}")),
    }
}

fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}

/// The JMESPath forms `check` knows.
fn evaluate(expression: &str, actual: &Value) -> Result<Value, String> {
    if let Some(field) = expression
        .strip_prefix("length(")
        .and_then(|e| e.strip_suffix(')'))
    {
        return Ok(json!(
            actual
                .get(field)
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        ));
    }
    if let Some(key) = expression
        .strip_prefix("contains(keys(labels || `{}`), '")
        .and_then(|e| e.strip_suffix("')"))
    {
        return Ok(json!(
            actual
                .get("labels")
                .and_then(|labels| labels.get(key))
                .is_some()
        ));
    }
    if expression
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Ok(actual.get(expression).cloned().unwrap_or(Value::Null));
    }
    Err(format!(
        "the expression ({expression}) is not one this checker knows"
    ))
}

/// Every parenthesised key of an assertion, to find cases using forms `check` does not know.
fn expressions(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (key, value) in fields {
                if let Some(expression) = key.strip_prefix('(').and_then(|k| k.strip_suffix(')')) {
                    out.push(expression.to_owned());
                }
                expressions(value, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| expressions(item, out)),
        _ => {}
    }
}

/// The route kinds the plugin edits, their plurals and the versions its cases use.
const ROUTE_KINDS: [(&str, &str, &str); 4] = [
    ("HTTPRoute", "httproutes", "v1"),
    ("GRPCRoute", "grpcroutes", "v1"),
    ("TCPRoute", "tcproutes", "v1alpha2"),
    ("TLSRoute", "tlsroutes", "v1alpha2"),
];

/// One step of a case, as this test plays it.
enum Step {
    Apply(Value),
    Patch,
    AssertRollout,
    AssertRoute(String, Value),
}

/// Why a case is not played (only plain weights are: no header or mirror routes), or its
/// Rollout and steps.
fn plan(dir: &Path) -> Result<(Value, Vec<Step>), String> {
    let test = yaml_documents(&dir.join("chainsaw-test.yaml")).remove(0);
    let mut rollout = None;
    let mut steps = Vec::new();
    for step in test["spec"]["steps"].as_array().into_iter().flatten() {
        for operation in step["try"].as_array().into_iter().flatten() {
            if let Some(file) = operation["apply"]["file"].as_str() {
                for document in yaml_documents(&dir.join(file)) {
                    match document["kind"].as_str() {
                        Some("Rollout") => rollout = Some(document),
                        Some("Service") => steps.push(Step::Apply(document)),
                        Some(kind) if ROUTE_KINDS.iter().any(|(k, ..)| *k == kind) => {
                            steps.push(Step::Apply(document))
                        }
                        other => return Err(format!("{file} applies a {}", other.unwrap_or("?"))),
                    }
                }
            } else if let Some(file) = operation["assert"]["file"].as_str() {
                for document in yaml_documents(&dir.join(file)) {
                    match document["kind"].as_str() {
                        Some("Rollout") => steps.push(Step::AssertRollout),
                        Some(kind) if ROUTE_KINDS.iter().any(|(k, ..)| *k == kind) => {
                            let mut found = Vec::new();
                            expressions(&document, &mut found);
                            if let Some(unknown) =
                                found.iter().find(|e| evaluate(e, &json!({})).is_err())
                            {
                                return Err(format!("{file} asserts ({unknown})"));
                            }
                            steps.push(Step::AssertRoute(file.to_owned(), document));
                        }
                        other => return Err(format!("{file} asserts a {}", other.unwrap_or("?"))),
                    }
                }
            } else if operation.get("patch").is_some() {
                steps.push(Step::Patch);
            } else {
                return Err(format!(
                    "a step does {}",
                    operation
                        .as_object()
                        .map(|o| o.keys().cloned().collect::<Vec<_>>().join(","))
                        .unwrap_or_default()
                ));
            }
        }
    }
    let rollout = rollout.ok_or("no Rollout")?;
    let canary = &rollout["spec"]["strategy"]["canary"];
    for step in canary["steps"].as_array().into_iter().flatten() {
        for field in ["setHeaderRoute", "setMirrorRoute"] {
            if step.get(field).is_some() {
                return Err(format!("a step uses {field}"));
            }
        }
    }
    Ok((rollout, steps))
}

/// Plays one case: its Services and routes applied, then `route` with the weights the
/// Rollout would be at for each route assertion (canary 0 before the update, each
/// `setWeight` in turn during it, 0 once it is healthy again), and the assertion checked.
async fn play(rollout: &Value, steps: Vec<Step>) -> Result<usize, String> {
    let (server, client) = cluster().await;
    for (kind, plural, version) in ROUTE_KINDS {
        server
            .create(crd("gateway.networking.k8s.io", kind, plural, &[version]))
            .unwrap();
    }
    let namespace = rollout["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let name = rollout["metadata"]["name"].as_str().unwrap();
    let canary: CanaryStrategy =
        serde_json::from_value(rollout["spec"]["strategy"]["canary"].clone())
            .map_err(|e| e.to_string())?;
    let max = canary
        .traffic_routing
        .as_ref()
        .and_then(|routing| routing.max_traffic_weight)
        .unwrap_or(100);
    let mut set_weights = canary
        .steps
        .iter()
        .flatten()
        .filter_map(|step| step.set_weight);
    let (mut patched, mut done) = (false, false);
    let mut checked = 0;
    for step in steps {
        match step {
            Step::Apply(mut object) => {
                if object["metadata"]["namespace"].is_null() {
                    object["metadata"]["namespace"] = json!(namespace);
                }
                server.create(object).map_err(|e| format!("{e:?}"))?;
            }
            Step::Patch => patched = true,
            Step::AssertRollout => done = patched,
            Step::AssertRoute(file, expected) => {
                let weight = if !patched || done {
                    0
                } else {
                    set_weights.next().ok_or_else(|| {
                        format!("{file}: more canary assertions than setWeight steps")
                    })?
                };
                let weights = Weights {
                    canary: weight,
                    stable: max - weight,
                };
                route(&client, namespace, name, &canary, weights, None, None)
                    .await
                    .map_err(|e| format!("{file}: {e}"))?
                    .map_err(|e| format!("{file}: refused: {e}"))?;
                let route_name = expected["metadata"]["name"].as_str().unwrap();
                let (api_version, kind) = (
                    expected["apiVersion"].as_str().unwrap(),
                    expected["kind"].as_str().unwrap(),
                );
                let actual = server
                    .get(api_version, kind, namespace, route_name)
                    .ok_or_else(|| format!("{file}: {kind} {route_name} is gone"))?;
                ["metadata", "spec"]
                    .iter()
                    .filter(|part| expected.get(part).is_some())
                    .try_for_each(|part| check(&expected[part], &actual[part], part))
                    .map_err(|e| format!("{file} at canary weight {weight}: {e}"))?;
                checked += 1;
            }
        }
    }
    Ok(checked)
}

#[tokio::test]
async fn gateway_api_plugin_e2e_cases_with_plain_weights() {
    let Some(argo) = weir_testkit::fixtures::argo_compat_dir() else {
        println!("skipped: no Argo Rollouts corpus (compat/argo) beside the project");
        return;
    };
    let cases_dir = argo.join("gatewayapi-plugin/chainsaw");
    if !cases_dir.is_dir() {
        println!("skipped: {} is absent", cases_dir.display());
        return;
    }
    let mut cases: Vec<_> = std::fs::read_dir(&cases_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("chainsaw-test.yaml").is_file())
        .collect();
    cases.sort();
    let (mut ran, mut failures) = (0, Vec::new());
    for dir in cases {
        let case = dir.file_name().unwrap().to_string_lossy().into_owned();
        match plan(&dir) {
            Err(reason) => println!("skipped {case}: {reason}"),
            Ok((rollout, steps)) => match play(&rollout, steps).await {
                Ok(checked) => {
                    println!("ran {case}: {checked} route assertions hold");
                    assert!(checked > 0, "{case} checked nothing");
                    ran += 1;
                }
                Err(error) => {
                    println!("FAILED {case}: {error}");
                    failures.push(format!("{case}: {error}"));
                }
            },
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(ran >= 7, "only {ran} cases ran");
}

#[test]
fn the_assertion_checker_can_fail() {
    let expected =
        json!({"(length(rules))": 1, "rules": [{"backendRefs": [{"name": "a", "(weight)": 70}]}]});
    let good = json!({"rules": [{"backendRefs": [{"name": "a", "weight": 70, "port": 80}]}]});
    assert_eq!(check(&expected, &good, "spec"), Ok(()));
    let wrong_weight = json!({"rules": [{"backendRefs": [{"name": "a", "weight": 30}]}]});
    assert!(
        check(&expected, &wrong_weight, "spec")
            .unwrap_err()
            .contains("(weight)")
    );
    let two_rules = json!({"rules": [{"backendRefs": [{"name": "a", "weight": 70}]}, {}]});
    assert!(check(&expected, &two_rules, "spec").is_err());
    let label = json!({"(contains(keys(labels || `{}`), 'k'))": false});
    assert_eq!(check(&label, &json!({"name": "r"}), "metadata"), Ok(()));
    assert!(check(&label, &json!({"labels": {"k": "v"}}), "metadata").is_err());
    assert!(evaluate("phase == 'Healthy'", &json!({})).is_err());
}
