#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;
use weir_core::Weight;
use weir_core::model::{MatchRule, StringMatch};

use super::*;

fn names() -> Names {
    Names {
        namespace: "test".into(),
        apex: "podinfo".into(),
        primary: "podinfo-primary".into(),
        canary: "podinfo-canary".into(),
        port: 9898,
    }
}

fn owner() -> Value {
    json!({"apiVersion": "weir.dev/v1alpha1", "kind": "Rollout", "name": "podinfo", "uid": "r-1", "controller": true})
}

fn route(canary_bp: u32) -> Route {
    Route {
        primary_weight: Weight::from_basis_points(10_000 - canary_bp),
        canary_weight: Weight::from_basis_points(canary_bp),
        mirror_weight: None,
        match_rules: Vec::new(),
        session_affinity: None,
    }
}

fn service() -> KubernetesService {
    serde_json::from_value(json!({
        "port": 9898,
        "hosts": ["app.example.com"],
        "gateways": ["public-gateway.istio-system.svc.cluster.local"],
        "gatewayRefs": [{"name": "public", "namespace": "gateways"}],
        "timeout": "30s",
        "retries": {"attempts": 3, "perTryTimeout": "1s"},
        "trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL"}}
    }))
    .unwrap()
}

fn exact(value: &str) -> StringMatch {
    StringMatch {
        exact: Some(value.into()),
        ..StringMatch::default()
    }
}

#[test]
fn istio_splits_by_whole_percentages_and_says_when_it_rounds() {
    let objects = objects(
        Provider::Istio,
        &names(),
        &service(),
        &route(1_000),
        &owner(),
    )
    .unwrap();
    assert_eq!(objects.adjusted, None);
    insta::assert_yaml_snapshot!("istio_canary", objects.objects);
    let weights: Vec<i64> = objects.objects[0]["spec"]["http"][0]["route"]
        .as_array()
        .unwrap()
        .iter()
        .map(|destination| destination["weight"].as_i64().unwrap())
        .collect();
    assert_eq!(weights, [90, 10]);

    let rounded = objects_for(Provider::Istio, 250);
    assert_eq!(
        rounded.adjusted.as_deref(),
        Some("Istio takes whole percentages: canary weight 2.5% applied as 3%")
    );
    assert_eq!(
        rounded.objects[0]["spec"]["http"][0]["route"][1]["weight"],
        3
    );
    assert_eq!(
        rounded.objects[0]["spec"]["http"][0]["route"][0]["weight"],
        97
    );
}

fn objects_for(provider: Provider, canary_bp: u32) -> RouteObjects {
    objects(provider, &names(), &service(), &route(canary_bp), &owner()).unwrap()
}

#[test]
fn istio_ab_tests_match_first_and_mirror_by_percentage() {
    let mut ab = route(0);
    ab.match_rules = vec![MatchRule {
        headers: [("x-canary".to_string(), exact("insider"))].into(),
        cookies: [("flavour".to_string(), exact("new"))].into(),
        ..MatchRule::default()
    }];
    let ab = objects(Provider::Istio, &names(), &service(), &ab, &owner()).unwrap();
    insta::assert_yaml_snapshot!("istio_ab", ab.objects[0]);
    let http = ab.objects[0]["spec"]["http"].as_array().unwrap();
    assert_eq!(http.len(), 2);
    assert_eq!(http[0]["route"][0]["destination"]["host"], "podinfo-canary");
    assert_eq!(
        http[0]["match"][0]["headers"]["x-canary"]["exact"],
        "insider"
    );
    assert_eq!(
        http[0]["match"][0]["headers"]["cookie"]["regex"],
        "^(.*?;\\s*)?(flavour=new)(;.*)?$"
    );

    let mut mirrored = route(0);
    mirrored.mirror_weight = Some(Weight::from_basis_points(5_050));
    let mirrored = objects(Provider::Istio, &names(), &service(), &mirrored, &owner()).unwrap();
    let default = &mirrored.objects[0]["spec"]["http"][0];
    assert_eq!(default["mirror"]["host"], "podinfo-canary");
    assert_eq!(default["mirrorPercentage"]["value"], 50.5);
}

#[test]
fn gateway_api_and_smi_keep_basis_points() {
    let http_route = objects_for(Provider::parse(Some("gatewayapi:v1")).unwrap(), 250);
    insta::assert_yaml_snapshot!("gateway_api", http_route.objects);
    let backends = &http_route.objects[0]["spec"]["rules"][0]["backendRefs"];
    assert_eq!(backends[0]["weight"], 9_750);
    assert_eq!(backends[1]["weight"], 250);
    assert_eq!(
        http_route.objects[0]["spec"]["parentRefs"],
        json!([{"name": "public", "namespace": "gateways"}])
    );

    let split = objects_for(Provider::parse(Some("smi")).unwrap(), 1);
    assert_eq!(split.objects[0]["apiVersion"], "split.smi-spec.io/v1alpha2");
    assert_eq!(split.objects[0]["spec"]["backends"][0]["weight"], 9_999);
    assert_eq!(split.objects[0]["spec"]["backends"][1]["weight"], 1);
}

#[test]
fn plain_kubernetes_moves_traffic_only_all_at_once() {
    assert!(objects_for(Provider::Kubernetes, 0).objects.is_empty());
    assert!(objects_for(Provider::Kubernetes, 10_000).objects.is_empty());
    let error = objects(
        Provider::Kubernetes,
        &names(),
        &service(),
        &route(1_000),
        &owner(),
    )
    .unwrap_err();
    assert!(
        error.starts_with("provider kubernetes moves traffic only all at once"),
        "{error}"
    );
}

#[test]
fn providers_are_flaggers_names_and_istio_is_the_default() {
    assert_eq!(Provider::parse(None), Ok(Provider::Istio));
    assert_eq!(
        Provider::parse(Some("gatewayapi:v1beta1")),
        Ok(Provider::GatewayApi("gateway.networking.k8s.io/v1beta1"))
    );
    let error = Provider::parse(Some("traefik")).unwrap_err();
    assert!(
        error.contains("\"traefik\" is not a provider weir drives yet; one of istio"),
        "{error}"
    );
}
