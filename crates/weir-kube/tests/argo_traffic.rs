//! weir's Argo Rollouts traffic routers (`weir_kube::argo_traffic::route`) against the in-memory
//! API server: Istio VirtualService weights (host- and subset-level, HTTP/TLS/TCP routes), the
//! Gateway API plugin's backendRef weights and in-progress label, SMI TrafficSplits, nginx canary
//! Ingresses, Traefik's weighted TraefikService entries, APISIX's ApisixRoute rule backends; a
//! second pass with the same weights writes nothing; missing objects and routers
//! weir does not run are refused with a reason. Then the Gateway API plugin's own e2e cases
//! (`compat/argo/gatewayapi-plugin/chainsaw`): weights (HTTP, gRPC, TCP and TLS routes) and
//! header routes (`setHeaderRoute`, removed at the end), when that corpus is beside the project.
//! And Istio's managed routes: header and mirror routes added, updated, removed, refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use serde_json::{Value, json};
use weir_core::argo::types::CanaryStrategy;
use weir_kube::argo_traffic::{
    Weights, remove_managed_routes, route, set_header_route, set_mirror_route,
};
use weir_testkit::argo_cluster::install_argo_crds;
use weir_testkit::kube_cluster::router_crd;
use weir_testkit::kube_server::KubeServer;

const NS: &str = "shop";
const VIRTUAL_SERVICES: &str = "virtualservices.networking.istio.io";
const HTTP_ROUTES: &str = "httproutes.gateway.networking.k8s.io";
const INGRESSES: &str = "ingresses.networking.k8s.io";
const SPLITS: &str = "trafficsplits.split.smi-spec.io";
const TRAEFIK_SERVICES: &str = "traefikservices.traefik.io";
const OLD_TRAEFIK_SERVICES: &str = "traefikservices.traefik.containo.us";
const APISIX_ROUTES: &str = "apisixroutes.apisix.apache.org";

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

// Traefik: the user's TraefikService's weighted services.

/// A TraefikService at `api_version` splitting over `entries` (name, weight).
fn traefik_service(api_version: &str, name: &str, entries: &[(&str, i64)]) -> Value {
    json!({
        "apiVersion": api_version, "kind": "TraefikService",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"weighted": {
            "services": entries.iter().map(|(name, weight)|
                json!({"name": name, "port": 80, "weight": weight})).collect::<Vec<_>>(),
            "sticky": {"cookie": {"name": "lb"}},
        }},
    })
}

/// The weighted services' (name, weight).
fn traefik_weights(service: &Value) -> Vec<(String, Option<i64>)> {
    service["spec"]["weighted"]["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_owned(), s["weight"].as_i64()))
        .collect()
}

#[tokio::test]
async fn traefik_weighted_services_get_the_weights_only_when_they_change() {
    let (server, client) = cluster().await;
    server
        .create(crd(
            "traefik.io",
            "TraefikService",
            "traefikservices",
            &["v1alpha1"],
        ))
        .unwrap();
    server
        .create(traefik_service(
            "traefik.io/v1alpha1",
            "web-wrr",
            &[("web-stable", 100), ("web-canary", 0), ("web-mirror", 5)],
        ))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"traefik": {"weightedTraefikServiceName": "web-wrr"}},
    }));
    // 0 is what the object already says: nothing to write.
    for (weight, writes) in [(0, 0), (30, 1), (100, 2), (0, 3)] {
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        let service = get(&server, "traefik.io/v1alpha1", "TraefikService", "web-wrr");
        assert_eq!(
            traefik_weights(&service),
            [
                ("web-stable".to_owned(), Some(100 - weight)),
                ("web-canary".to_owned(), Some(weight)),
                ("web-mirror".to_owned(), Some(5)),
            ]
        );
        assert_eq!(service["spec"]["weighted"]["services"][0]["port"], 80);
        assert_eq!(
            service["spec"]["weighted"]["sticky"]["cookie"]["name"],
            "lb"
        );
        assert_eq!(server.writes(TRAEFIK_SERVICES), writes, "after {weight}");
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        assert_eq!(
            server.writes(TRAEFIK_SERVICES),
            writes,
            "the same weights again"
        );
    }
}

#[tokio::test]
async fn traefik_older_group_is_used_where_the_service_is() {
    let (server, client) = cluster().await;
    server
        .create(crd(
            "traefik.containo.us",
            "TraefikService",
            "traefikservices",
            &["v1alpha1"],
        ))
        .unwrap();
    server
        .create(traefik_service(
            "traefik.containo.us/v1alpha1",
            "web-wrr",
            &[("web-canary", 0), ("web-stable", 100)],
        ))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"traefik": {"weightedTraefikServiceName": "web-wrr"}},
    }));
    route_web(&server, &client, &canary, weights(30))
        .await
        .unwrap();
    let service = get(
        &server,
        "traefik.containo.us/v1alpha1",
        "TraefikService",
        "web-wrr",
    );
    assert_eq!(
        traefik_weights(&service),
        [
            ("web-canary".to_owned(), Some(30)),
            ("web-stable".to_owned(), Some(70))
        ]
    );
    assert_eq!(server.writes(OLD_TRAEFIK_SERVICES), 1);
}

#[tokio::test]
async fn traefik_refuses_missing_services_and_entries_by_field() {
    let (server, client) = cluster().await;
    let field = "spec.strategy.canary.trafficRouting.traefik.weightedTraefikServiceName";
    let canary = |name: &str| {
        strategy(json!({
            "stableService": "web-stable", "canaryService": "web-canary",
            "trafficRouting": {"traefik": {"weightedTraefikServiceName": name}},
        }))
    };
    let refused = route_web(&server, &client, &canary("web-wrr"), weights(20))
        .await
        .unwrap_err();
    assert!(
        refused.starts_with(&format!(
            "{field}: Invalid value: \"web-wrr\": the cluster serves no TraefikService"
        )),
        "{refused}"
    );
    server
        .create(crd(
            "traefik.io",
            "TraefikService",
            "traefikservices",
            &["v1alpha1"],
        ))
        .unwrap();
    server
        .create(traefik_service(
            "traefik.io/v1alpha1",
            "stable-only",
            &[("web-stable", 100)],
        ))
        .unwrap();
    server
        .create(traefik_service(
            "traefik.io/v1alpha1",
            "canary-only",
            &[("web-canary", 0)],
        ))
        .unwrap();
    server
        .create(json!({
            "apiVersion": "traefik.io/v1alpha1", "kind": "TraefikService",
            "metadata": {"name": "mirroring", "namespace": NS},
            "spec": {"mirroring": {"name": "web-stable", "port": 80}},
        }))
        .unwrap();
    let cases = [
        (
            "absent",
            format!(
                "{field}: Invalid value: \"absent\": traefikservices.traefik.io \"absent\" not found"
            ),
        ),
        (
            "stable-only",
            format!(
                "{field}: Invalid value: \"stable-only\": traefik canary service was not found: no spec.weighted.services[] entry is named \"web-canary\" (the canaryService)"
            ),
        ),
        (
            "canary-only",
            format!(
                "{field}: Invalid value: \"canary-only\": traefik stable service was not found: no spec.weighted.services[] entry is named \"web-stable\" (the stableService)"
            ),
        ),
        (
            "mirroring",
            format!(
                "{field}: Invalid value: \"mirroring\": spec.weighted.services was not found in traefik service manifest"
            ),
        ),
        ("", format!("{field}: Invalid value: \"\"")),
    ];
    for (name, expected) in cases {
        let refused = route_web(&server, &client, &canary(name), weights(20))
            .await
            .unwrap_err();
        assert!(
            refused.starts_with(&expected),
            "{refused}\nwanted: {expected}"
        );
    }
    assert_eq!(server.writes(TRAEFIK_SERVICES), 0);
}

// APISIX: the backends of the user's ApisixRoute's rules.

/// An ApisixRoute with `rules` (name, backend Services with weights).
fn apisix_route(name: &str, rules: &[(&str, &[(&str, i64)])]) -> Value {
    json!({
        "apiVersion": "apisix.apache.org/v2", "kind": "ApisixRoute",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"ingressClassName": "apisix", "http": rules.iter().map(|(rule, backends)| json!({
            "name": rule,
            "match": {"hosts": ["web.example.com"], "paths": ["/*"]},
            "backends": backends.iter().map(|(service, weight)|
                json!({"serviceName": service, "servicePort": 80, "weight": weight})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>()},
    })
}

/// The backends' (serviceName, weight) of `spec.http[index]`.
fn apisix_weights(route: &Value, index: usize) -> Vec<(String, Option<i64>)> {
    route["spec"]["http"][index]["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["serviceName"].as_str().unwrap().to_owned(),
                b["weight"].as_i64(),
            )
        })
        .collect()
}

#[tokio::test]
async fn apisix_named_rules_backends_get_the_weights_only_when_they_change() {
    let (server, client) = cluster().await;
    server
        .create(crd(
            "apisix.apache.org",
            "ApisixRoute",
            "apisixroutes",
            &["v2"],
        ))
        .unwrap();
    let split: &[(&str, i64)] = &[("web-stable", 100), ("web-canary", 0), ("web-extra", 1)];
    server
        .create(apisix_route(
            "web-route",
            &[
                ("api", split),
                ("static", &[("web-stable", 100)]),
                ("admin", split),
            ],
        ))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"apisix": {"route": {"name": "web-route", "rules": ["api", "admin"]}}},
    }));
    for (weight, writes) in [(0, 0), (30, 1), (100, 2), (0, 3)] {
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        let route = get(&server, "apisix.apache.org/v2", "ApisixRoute", "web-route");
        for index in [0, 2] {
            assert_eq!(
                apisix_weights(&route, index),
                [
                    ("web-stable".to_owned(), Some(100 - weight)),
                    ("web-canary".to_owned(), Some(weight)),
                    ("web-extra".to_owned(), Some(1)),
                ],
                "rule {index} after {weight}"
            );
        }
        assert_eq!(
            apisix_weights(&route, 1),
            [("web-stable".to_owned(), Some(100))],
            "a rule not named is left alone"
        );
        assert_eq!(route["spec"]["http"][0]["match"]["paths"][0], "/*");
        assert_eq!(route["spec"]["http"][0]["backends"][0]["servicePort"], 80);
        assert_eq!(server.writes(APISIX_ROUTES), writes, "after {weight}");
        route_web(&server, &client, &canary, weights(weight))
            .await
            .unwrap();
        assert_eq!(
            server.writes(APISIX_ROUTES),
            writes,
            "the same weights again"
        );
    }
}

#[tokio::test]
async fn apisix_without_rules_splits_the_rule_named_like_the_route() {
    let (server, client) = cluster().await;
    server
        .create(crd(
            "apisix.apache.org",
            "ApisixRoute",
            "apisixroutes",
            &["v2"],
        ))
        .unwrap();
    let split: &[(&str, i64)] = &[("web-canary", 0), ("web-stable", 100)];
    server
        .create(apisix_route(
            "web-route",
            &[("other", split), ("web-route", split)],
        ))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"apisix": {"route": {"name": "web-route"}}},
    }));
    route_web(&server, &client, &canary, weights(30))
        .await
        .unwrap();
    let route = get(&server, "apisix.apache.org/v2", "ApisixRoute", "web-route");
    assert_eq!(
        apisix_weights(&route, 1),
        [
            ("web-canary".to_owned(), Some(30)),
            ("web-stable".to_owned(), Some(70))
        ]
    );
    assert_eq!(
        apisix_weights(&route, 0),
        [
            ("web-canary".to_owned(), Some(0)),
            ("web-stable".to_owned(), Some(100))
        ]
    );
    assert_eq!(server.writes(APISIX_ROUTES), 1);
}

#[tokio::test]
async fn apisix_refuses_missing_routes_rules_and_backends_by_field() {
    let (server, client) = cluster().await;
    let field = "spec.strategy.canary.trafficRouting.apisix.route";
    let canary = |route: Value| {
        strategy(json!({
            "stableService": "web-stable", "canaryService": "web-canary",
            "trafficRouting": {"apisix": {"route": route}},
        }))
    };
    let refused = route_web(
        &server,
        &client,
        &canary(json!({"name": "web-route", "rules": ["api"]})),
        weights(20),
    )
    .await
    .unwrap_err();
    assert!(
        refused.starts_with(&format!(
            "{field}.name: Invalid value: \"web-route\": the cluster serves no ApisixRoute"
        )),
        "{refused}"
    );
    server
        .create(crd(
            "apisix.apache.org",
            "ApisixRoute",
            "apisixroutes",
            &["v2"],
        ))
        .unwrap();
    server
        .create(apisix_route(
            "web-route",
            &[
                ("api", &[("web-stable", 100), ("web-canary", 0)]),
                ("stable-only", &[("web-stable", 100)]),
                ("canary-only", &[("web-canary", 100)]),
            ],
        ))
        .unwrap();
    let cases = [
        (
            json!({"name": "absent", "rules": ["api"]}),
            format!(
                "{field}.name: Invalid value: \"absent\": apisixroutes.apisix.apache.org \"absent\" not found"
            ),
        ),
        (
            json!({"name": "web-route", "rules": ["api", "missing"]}),
            format!(
                "{field}.rules[1]: Invalid value: \"missing\": Apisix http route rule missing not found (ApisixRoute `web-route`)"
            ),
        ),
        (
            json!({"name": "web-route"}),
            format!(
                "{field}.name: Invalid value: \"web-route\": Apisix http route rule web-route not found"
            ),
        ),
        (
            json!({"name": "web-route", "rules": ["api", "stable-only"]}),
            format!(
                "{field}.rules[1]: Invalid value: \"stable-only\": apisix route web-canary backend was not found"
            ),
        ),
        (
            json!({"name": "web-route", "rules": ["canary-only"]}),
            format!(
                "{field}.rules[0]: Invalid value: \"canary-only\": apisix route web-stable backend was not found"
            ),
        ),
        (
            json!({"rules": ["api"]}),
            format!("{field}.name: Invalid value: \"\""),
        ),
    ];
    for (route, expected) in cases {
        let refused = route_web(&server, &client, &canary(route), weights(20))
            .await
            .unwrap_err();
        assert!(
            refused.starts_with(&expected),
            "{refused}\nwanted: {expected}"
        );
    }
    assert_eq!(
        server.writes(APISIX_ROUTES),
        0,
        "nothing written when a rule is refused"
    );
    let route = get(&server, "apisix.apache.org/v2", "ApisixRoute", "web-route");
    assert_eq!(
        apisix_weights(&route, 0),
        [
            ("web-stable".to_owned(), Some(100)),
            ("web-canary".to_owned(), Some(0))
        ]
    );
}

#[tokio::test]
async fn routers_weir_does_not_run_are_refused_by_field() {
    let (server, client) = cluster().await;
    let cases = [
        (
            json!({"alb": {"ingress": "web"}}),
            "spec.strategy.canary.trafficRouting.alb: not run by weir's operator (it routes with istio, nginx, smi, traefik, apisix and the argoproj-labs/gatewayAPI plugin)",
        ),
        (
            json!({"ambassador": {"mappings": ["web"]}}),
            "spec.strategy.canary.trafficRouting.ambassador: not run",
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

// Managed routes: setHeaderRoute, setMirrorRoute, their removal.

/// A `setHeaderRoute` (or `setMirrorRoute`) from JSON.
fn step<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

/// `spec.http[].name` of VirtualService `web-vs`.
fn http_names(server: &KubeServer) -> Vec<String> {
    let vs = get(
        server,
        "networking.istio.io/v1beta1",
        "VirtualService",
        "web-vs",
    );
    vs["spec"]["http"]
        .as_array()
        .unwrap()
        .iter()
        .map(|route| route["name"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// Route `name` of VirtualService `web-vs`.
fn vs_route(server: &KubeServer, name: &str) -> Value {
    let vs = get(
        server,
        "networking.istio.io/v1beta1",
        "VirtualService",
        "web-vs",
    );
    vs["spec"]["http"]
        .as_array()
        .unwrap()
        .iter()
        .find(|route| route["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("route {name} in {vs}"))
}

#[tokio::test]
async fn istio_header_routes_are_added_above_in_priority_order_updated_and_removed() {
    let (server, client) = cluster().await;
    istio_crds(&server, &["v1beta1"]);
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
            "metadata": {"name": "web-vs", "namespace": NS},
            "spec": {"hosts": ["web"], "http": [
                {"name": "primary", "route": [
                    destination("web-stable", Some(100)),
                    destination("web-canary.shop.svc.cluster.local", Some(0))]},
                {"name": "admin", "route": [destination("admin", Some(100))]}]},
        }))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"managedRoutes": [{"name": "hr-a"}, {"name": "hr-b"}],
            "istio": {"virtualService": {"name": "web-vs", "routes": ["primary"]}}},
    }));
    route_web(&server, &client, &canary, weights(20))
        .await
        .unwrap();
    assert_eq!(server.writes(VIRTUAL_SERVICES), 1);
    let header = |name: &str, matches: Value| -> weir_core::argo::types::SetHeaderRoute {
        step(json!({"name": name, "match": matches}))
    };
    let set = |route: weir_core::argo::types::SetHeaderRoute| {
        let client = client.clone();
        let canary = canary.clone();
        async move {
            set_header_route(&client, NS, "web", &canary, &route)
                .await
                .expect("the API answers")
        }
    };
    // hr-b first: above the other routes.
    set(header(
        "hr-b",
        json!([{"headerName": "X-B", "headerValue": {"exact": "1"}}]),
    ))
    .await
    .unwrap();
    assert_eq!(http_names(&server), ["hr-b", "primary", "admin"]);
    assert_eq!(
        vs_route(&server, "hr-b"),
        json!({"name": "hr-b", "match": [{"headers": {"X-B": {"exact": "1"}}}],
            "route": [{"destination": {"host": "web-canary.shop.svc.cluster.local",
                "port": {"number": 80}}, "weight": 100}]})
    );
    assert_eq!(server.writes(VIRTUAL_SERVICES), 2);
    // hr-a comes before hr-b (managedRoutes order); one match block per condition.
    let hr_a = header(
        "hr-a",
        json!([{"headerName": "X-A", "headerValue": {"prefix": "beta"}},
            {"headerName": "X-C", "headerValue": {"regex": "^c+$"}}]),
    );
    set(hr_a.clone()).await.unwrap();
    assert_eq!(http_names(&server), ["hr-a", "hr-b", "primary", "admin"]);
    assert_eq!(
        vs_route(&server, "hr-a")["match"],
        json!([{"headers": {"X-A": {"prefix": "beta"}}}, {"headers": {"X-C": {"regex": "^c+$"}}}])
    );
    assert_eq!(server.writes(VIRTUAL_SERVICES), 3);
    // The same again, and the same weights: nothing written; the header routes are not the
    // weighted route's, and new weights leave them alone.
    set(hr_a).await.unwrap();
    route_web(&server, &client, &canary, weights(20))
        .await
        .unwrap();
    assert_eq!(server.writes(VIRTUAL_SERVICES), 3, "unchanged");
    route_web(&server, &client, &canary, weights(60))
        .await
        .unwrap();
    assert_eq!(server.writes(VIRTUAL_SERVICES), 4);
    let vs = get(
        &server,
        "networking.istio.io/v1beta1",
        "VirtualService",
        "web-vs",
    );
    assert_eq!(
        istio_weights(&vs, "http", 2),
        [
            ("web-stable".to_owned(), Some(40)),
            ("web-canary.shop.svc.cluster.local".to_owned(), Some(60))
        ]
    );
    assert_eq!(
        istio_weights(&vs, "http", 0),
        [("web-canary.shop.svc.cluster.local".to_owned(), Some(100))]
    );
    // Updated in place.
    set(header(
        "hr-a",
        json!([{"headerName": "X-A", "headerValue": {"exact": "on"}}]),
    ))
    .await
    .unwrap();
    assert_eq!(http_names(&server), ["hr-a", "hr-b", "primary", "admin"]);
    assert_eq!(
        vs_route(&server, "hr-a")["match"],
        json!([{"headers": {"X-A": {"exact": "on"}}}])
    );
    assert_eq!(server.writes(VIRTUAL_SERVICES), 5);
    // No match: removed.
    set(step(json!({"name": "hr-b"}))).await.unwrap();
    assert_eq!(http_names(&server), ["hr-a", "primary", "admin"]);
    assert_eq!(server.writes(VIRTUAL_SERVICES), 6);
    // All managed routes removed; once only.
    for _ in 0..2 {
        remove_managed_routes(&client, NS, "web", &canary)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(http_names(&server), ["primary", "admin"]);
        assert_eq!(server.writes(VIRTUAL_SERVICES), 7);
    }
}

#[tokio::test]
async fn istio_header_routes_go_to_the_canary_subset() {
    let (server, client) = cluster().await;
    istio_crds(&server, &["v1beta1"]);
    let subset = |name: &str, weight: i64| json!({"destination": {"host": "web", "subset": name}, "weight": weight});
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
            "metadata": {"name": "web-vs", "namespace": NS},
            "spec": {"hosts": ["web"], "http": [{"route": [subset("stable", 100), subset("canary", 0)]}]},
        }))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"managedRoutes": [{"name": "hr"}],
            "istio": {"virtualService": {"name": "web-vs"},
                "destinationRule": {"name": "web-dr", "canarySubsetName": "canary", "stableSubsetName": "stable"}}},
    }));
    let route: weir_core::argo::types::SetHeaderRoute =
        step(json!({"name": "hr", "match": [{"headerName": "x", "headerValue": {"exact": "y"}}]}));
    set_header_route(&client, NS, "web", &canary, &route)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(http_names(&server), ["hr", ""]);
    assert_eq!(
        vs_route(&server, "hr")["route"],
        json!([{"destination": {"host": "web", "subset": "canary"}, "weight": 100}])
    );
}

#[tokio::test]
async fn istio_mirror_routes_keep_the_weights_and_mirror_to_the_canary() {
    let (server, client) = cluster().await;
    istio_crds(&server, &["v1beta1"]);
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
            "metadata": {"name": "web-vs", "namespace": NS},
            "spec": {"hosts": ["web"], "http": [{"route": [
                destination("web-stable", Some(100)), destination("web-canary", Some(0))]}]},
        }))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"managedRoutes": [{"name": "hr"}, {"name": "mirror-1"}],
            "istio": {"virtualService": {"name": "web-vs"}}},
    }));
    route_web(&server, &client, &canary, weights(10))
        .await
        .unwrap();
    let mirror: weir_core::argo::types::SetMirrorRoute = step(json!({
        "name": "mirror-1", "percentage": 30,
        "match": [{"method": {"exact": "GET"}, "path": {"prefix": "/api"},
            "headers": {"x-m": {"regex": "a.*"}}}],
    }));
    for _ in 0..2 {
        set_mirror_route(&client, NS, "web", &canary, &mirror)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(server.writes(VIRTUAL_SERVICES), 2, "written once");
    }
    assert_eq!(http_names(&server), ["mirror-1", ""]);
    assert_eq!(
        vs_route(&server, "mirror-1"),
        json!({"name": "mirror-1",
            "match": [{"method": {"exact": "GET"}, "uri": {"prefix": "/api"},
                "headers": {"x-m": {"regex": "a.*"}}}],
            "route": [destination("web-stable", Some(90)), destination("web-canary", Some(10))],
            "mirror": {"host": "web-canary", "port": {"number": 80}},
            "mirrorPercentage": {"value": 30}})
    );
    // The mirror route is managed: still "the only route" is the unnamed one, and it follows
    // the weights, as Argo's SetWeight updates mirror routes.
    route_web(&server, &client, &canary, weights(50))
        .await
        .unwrap();
    let vs = get(
        &server,
        "networking.istio.io/v1beta1",
        "VirtualService",
        "web-vs",
    );
    for index in [0, 1] {
        assert_eq!(
            istio_weights(&vs, "http", index),
            [
                ("web-stable".to_owned(), Some(50)),
                ("web-canary".to_owned(), Some(50))
            ],
            "route {index}"
        );
    }
    // A header route goes above it (managedRoutes order), then the mirror route is removed.
    let header: weir_core::argo::types::SetHeaderRoute =
        step(json!({"name": "hr", "match": [{"headerName": "x", "headerValue": {"exact": "y"}}]}));
    set_header_route(&client, NS, "web", &canary, &header)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(http_names(&server), ["hr", "mirror-1", ""]);
    set_mirror_route(
        &client,
        NS,
        "web",
        &canary,
        &step(json!({"name": "mirror-1"})),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(http_names(&server), ["hr", ""]);
}

#[tokio::test]
async fn managed_routes_are_refused_where_weir_cannot_write_them() {
    let (server, client) = cluster().await;
    istio_crds(&server, &["v1beta1"]);
    server
        .create(json!({
            "apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
            "metadata": {"name": "tcp-vs", "namespace": NS},
            "spec": {"hosts": ["web"], "tcp": [{"route": [
                destination("web-stable", Some(100)), destination("web-canary", Some(0))]}]},
        }))
        .unwrap();
    let header: weir_core::argo::types::SetHeaderRoute =
        step(json!({"name": "hr", "match": [{"headerName": "x", "headerValue": {"exact": "y"}}]}));
    let mirror: weir_core::argo::types::SetMirrorRoute =
        step(json!({"name": "hr", "match": [{"path": {"prefix": "/"}}]}));
    let routing = |routing: Value| {
        strategy(
            json!({"stableService": "web-stable", "canaryService": "web-canary",
            "trafficRouting": routing}),
        )
    };
    let istio = |vs: &str| {
        routing(
            json!({"managedRoutes": [{"name": "hr"}], "istio": {"virtualService": {"name": vs}}}),
        )
    };
    let nginx = routing(
        json!({"managedRoutes": [{"name": "hr"}], "nginx": {"stableIngress": "web-ingress"}}),
    );
    let plugin = routing(json!({"managedRoutes": [{"name": "hr"}],
        "istio": {"virtualService": {"name": "tcp-vs"}},
        "plugins": {"argoproj-labs/gatewayAPI": {"httpRoute": "web"}}}));
    let none = strategy(json!({"stableService": "web-stable", "canaryService": "web-canary"}));
    let bad_value: weir_core::argo::types::SetHeaderRoute =
        step(json!({"name": "hr", "match": [{"headerName": "x", "headerValue": {}}]}));
    let two_values: weir_core::argo::types::SetHeaderRoute = step(
        json!({"name": "hr", "match": [{"headerName": "x", "headerValue": {"exact": "a", "regex": "b"}}]}),
    );
    let unmanaged: weir_core::argo::types::SetHeaderRoute = step(
        json!({"name": "other", "match": [{"headerName": "x", "headerValue": {"exact": "y"}}]}),
    );
    let cases: Vec<(&str, Result<(), String>, &str)> = vec![
        (
            "nginx",
            set_header_route(&client, NS, "web", &nginx, &header)
                .await
                .unwrap(),
            "SetHeaderRoute requires TrafficRouting, supports Istio and the argoproj-labs/gatewayAPI plugin",
        ),
        (
            "no routing",
            set_header_route(&client, NS, "web", &none, &header)
                .await
                .unwrap(),
            "SetHeaderRoute requires TrafficRouting",
        ),
        (
            "unmanaged name",
            set_header_route(&client, NS, "web", &istio("tcp-vs"), &unmanaged)
                .await
                .unwrap(),
            "spec.strategy.canary.steps[].setHeaderRoute: Invalid value: \"other\": Steps define a route that does not exist in spec.strategy.canary.trafficRouting.managedRoutes",
        ),
        (
            "no value",
            set_header_route(&client, NS, "web", &istio("tcp-vs"), &bad_value)
                .await
                .unwrap(),
            "setHeaderRoute.match[0]: Invalid value: \"\": StringMatch value missed",
        ),
        (
            "two values",
            set_header_route(&client, NS, "web", &istio("tcp-vs"), &two_values)
                .await
                .unwrap(),
            "StringMatch match value must have exactly one of the following: exact, regex, prefix",
        ),
        (
            "no http routes",
            set_header_route(&client, NS, "web", &istio("tcp-vs"), &header)
                .await
                .unwrap(),
            "spec.strategy.canary.trafficRouting.istio.virtualService.name: Invalid value: \"tcp-vs\": spec.http not found",
        ),
        (
            "missing VirtualService",
            set_header_route(&client, NS, "web", &istio("gone"), &header)
                .await
                .unwrap(),
            "virtualservices.networking.istio.io \"gone\" not found",
        ),
        (
            "mirror with nginx",
            set_mirror_route(&client, NS, "web", &nginx, &mirror)
                .await
                .unwrap(),
            "SetMirrorRoute requires TrafficRouting, supports Istio only",
        ),
        (
            "mirror with the plugin",
            set_mirror_route(&client, NS, "web", &plugin, &mirror)
                .await
                .unwrap(),
            "plugins.argoproj-labs/gatewayAPI: Invalid value: \"hr\": weir does not write mirror routes",
        ),
        (
            "mirror without http routes",
            set_mirror_route(&client, NS, "web", &istio("tcp-vs"), &mirror)
                .await
                .unwrap(),
            "spec.http not found",
        ),
    ];
    for (case, answer, expected) in cases {
        let refused = answer.expect_err(case);
        assert!(
            refused.contains(expected),
            "{case}: {refused}\nwanted: {expected}"
        );
    }
    // Removal where there is nothing to remove, or no router with managed routes: nothing.
    for canary in [&nginx, &istio("tcp-vs"), &none] {
        remove_managed_routes(&client, NS, "web", canary)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(server.writes(VIRTUAL_SERVICES), 0, "nothing written");
}

#[tokio::test]
async fn gateway_api_header_rules_are_written_once_and_taken_out() {
    let (server, client) = cluster().await;
    server
        .create(crd(
            "gateway.networking.k8s.io",
            "HTTPRoute",
            "httproutes",
            &["v1"],
        ))
        .unwrap();
    server
        .create(http_route("web", &["web-stable", "web-canary"]))
        .unwrap();
    let canary = strategy(json!({
        "stableService": "web-stable", "canaryService": "web-canary",
        "trafficRouting": {"managedRoutes": [{"name": "hr"}],
            "plugins": {"argoproj-labs/gatewayAPI": {"httpRoute": "web"}}},
    }));
    route_web(&server, &client, &canary, weights(30))
        .await
        .unwrap();
    let header: weir_core::argo::types::SetHeaderRoute = step(json!({"name": "hr", "match": [
        {"headerName": "x-p", "headerValue": {"prefix": "be"}},
        {"headerName": "x-r", "headerValue": {"regex": "^v[0-9]$"}}]}));
    for _ in 0..2 {
        set_header_route(&client, NS, "web", &canary, &header)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(server.writes(HTTP_ROUTES), 2, "written once");
    }
    let written = get(&server, "gateway.networking.k8s.io/v1", "HTTPRoute", "web");
    assert_eq!(
        written["spec"]["rules"][1],
        json!({"name": "hr",
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}, "headers": [
                {"name": "x-p", "type": "RegularExpression", "value": "be.*"},
                {"name": "x-r", "type": "RegularExpression", "value": "^v[0-9]$"}]}],
            "backendRefs": [{"name": "web-canary", "port": 80, "weight": 1}]})
    );
    route_web(&server, &client, &canary, weights(60))
        .await
        .unwrap();
    let written = get(&server, "gateway.networking.k8s.io/v1", "HTTPRoute", "web");
    assert_eq!(written["spec"]["rules"][1]["backendRefs"][0]["weight"], 1);
    assert_eq!(written["spec"]["rules"][0]["backendRefs"][1]["weight"], 60);
    for _ in 0..2 {
        remove_managed_routes(&client, NS, "web", &canary)
            .await
            .unwrap()
            .unwrap();
        let written = get(&server, "gateway.networking.k8s.io/v1", "HTTPRoute", "web");
        assert_eq!(written["spec"]["rules"].as_array().unwrap().len(), 1);
        assert_eq!(server.writes(HTTP_ROUTES), 4, "removed once");
    }
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

/// Why a case is not played (one with mirror routes, which weir does not write for the plugin), or its
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
        if step.get("setMirrorRoute").is_some() {
            return Err("a step uses setMirrorRoute".to_owned());
        }
    }
    Ok((rollout, steps))
}

/// Plays one case: its Services and routes applied, then for each route assertion the Rollout's
/// steps as far as it would be (canary 0 before the update; during it, the steps up to the
/// next `setWeight` and the `setHeaderRoute`s right after it, through `route` and
/// `set_header_route`; once it is healthy again `remove_managed_routes` and canary 0), `route`
/// with the weight it is at, and the assertion checked. The assertions checked and the header
/// routes written.
async fn play(rollout: &Value, steps: Vec<Step>) -> Result<(usize, usize), String> {
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
    let rollout_steps = canary.steps.clone().unwrap_or_default();
    let (mut cursor, mut weight, mut headers) = (0, 0, 0);
    let (mut patched, mut done, mut cleaned) = (false, false, false);
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
                let weights = |weight: i64| Weights {
                    canary: weight,
                    stable: max - weight,
                };
                if !patched || done {
                    if done && !cleaned {
                        remove_managed_routes(&client, namespace, name, &canary)
                            .await
                            .map_err(|e| format!("{file}: {e}"))?
                            .map_err(|e| format!("{file}: removal refused: {e}"))?;
                        cleaned = true;
                    }
                    weight = 0;
                } else {
                    let mut advanced = false;
                    while let Some(step) = rollout_steps.get(cursor) {
                        if let Some(next) = step.set_weight {
                            if advanced {
                                break;
                            }
                            weight = next;
                            advanced = true;
                            route(
                                &client,
                                namespace,
                                name,
                                &canary,
                                weights(weight),
                                None,
                                None,
                            )
                            .await
                            .map_err(|e| format!("{file}: {e}"))?
                            .map_err(|e| format!("{file}: refused: {e}"))?;
                        } else if let Some(header_route) = &step.set_header_route {
                            set_header_route(&client, namespace, name, &canary, header_route)
                                .await
                                .map_err(|e| format!("{file}: {e}"))?
                                .map_err(|e| format!("{file}: header route refused: {e}"))?;
                            headers += 1;
                        } else if advanced {
                            break;
                        }
                        cursor += 1;
                    }
                    if !advanced {
                        return Err(format!(
                            "{file}: more canary assertions than setWeight steps"
                        ));
                    }
                }
                route(
                    &client,
                    namespace,
                    name,
                    &canary,
                    weights(weight),
                    None,
                    None,
                )
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
    Ok((checked, headers))
}

#[tokio::test]
async fn gateway_api_plugin_e2e_cases_with_weights_and_header_routes() {
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
                Ok((checked, headers)) => {
                    println!(
                        "ran {case}: {checked} route assertions hold ({headers} header routes set)"
                    );
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
    assert!(ran >= 15, "only {ran} cases ran");
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
