#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;
use weir_core::Weight;
use weir_core::model::{MatchRule, SessionAffinity, StringMatch};

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
        1,
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
    objects(
        provider,
        &names(),
        &service(),
        &route(canary_bp),
        1,
        &owner(),
    )
    .unwrap()
}

#[test]
fn istio_ab_tests_match_first_and_mirror_by_percentage() {
    let mut ab = route(0);
    ab.match_rules = vec![MatchRule {
        headers: [("x-canary".to_string(), exact("insider"))].into(),
        cookies: [("flavour".to_string(), exact("new"))].into(),
        ..MatchRule::default()
    }];
    let ab = objects(Provider::Istio, &names(), &service(), &ab, 1, &owner()).unwrap();
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
    let mirrored = objects(
        Provider::Istio,
        &names(),
        &service(),
        &mirrored,
        1,
        &owner(),
    )
    .unwrap();
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
        1,
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

// === session affinity ===

fn sticky(canary_bp: u32, primary_cookie: bool) -> Route {
    let mut route = route(canary_bp);
    route.session_affinity = Some(SessionAffinity {
        cookie_name: "flagger-cookie".into(),
        primary_cookie_name: primary_cookie.then(|| "primary-cookie".into()),
        max_age: Some(21_600),
    });
    route
}

fn sticky_objects(provider: &str, route: &Route, run: u64) -> Value {
    let provider = Provider::parse(Some(provider)).unwrap();
    objects(provider, &names(), &service(), route, run, &owner())
        .unwrap()
        .objects
        .swap_remove(0)
}

fn cookie_value(set_cookie: &Value) -> String {
    let set_cookie = set_cookie.as_str().unwrap();
    let (pair, _) = set_cookie.split_once(';').unwrap();
    pair.split_once('=').unwrap().1.to_string()
}

#[test]
fn istio_session_affinity_pins_canary_clients_while_the_canary_has_traffic() {
    let virtual_service = sticky_objects("istio", &sticky(1_000, false), 3);
    insta::assert_yaml_snapshot!("istio_session_affinity", virtual_service);
    let http = virtual_service["spec"]["http"].as_array().unwrap();
    assert_eq!(http.len(), 2, "the cookie route, then the weighted one");
    let set_cookie = &http[1]["route"][1]["headers"]["response"]["add"]["Set-Cookie"];
    let value = cookie_value(set_cookie);
    assert_eq!(value.len(), 16);
    assert_eq!(
        set_cookie,
        &json!(format!("flagger-cookie={value}; Max-Age=21600"))
    );
    assert_eq!(
        http[0]["match"],
        json!([{"headers": {"cookie": {"regex": format!("^(.*?;\\s*)?(flagger-cookie={value})(;.*)?$")}}}])
    );
    assert_eq!(
        http[0]["route"],
        json!([{"destination": {"host": "podinfo-canary", "port": {"number": 9898}}, "weight": 100}])
    );
    // The route's own settings apply to the cookie route too.
    assert_eq!(http[0]["timeout"], "30s");
    assert_eq!(
        http[1]["route"][0].get("headers"),
        None,
        "without primaryCookieName the primary sets no cookie"
    );

    // The same value for every step of the run, a new one in the next run.
    let later = sticky_objects("istio", &sticky(3_000, false), 3);
    assert_eq!(
        later["spec"]["http"][0]["match"], http[0]["match"],
        "steps of a run share the cookie"
    );
    let next_run = sticky_objects("istio", &sticky(1_000, false), 4);
    let next_value = cookie_value(
        &next_run["spec"]["http"][1]["route"][1]["headers"]["response"]["add"]["Set-Cookie"],
    );
    assert_ne!(next_value, value, "a new run, a new cookie");

    // At 100% the canary still pins (and sets) its cookie.
    let full = sticky_objects("istio", &sticky(10_000, true), 3);
    let http = full["spec"]["http"].as_array().unwrap();
    assert_eq!(http.len(), 2, "no primary cookie route without a split");
    assert_eq!(http[0]["route"][0]["destination"]["host"], "podinfo-canary");
}

#[test]
fn istio_primary_cookie_keeps_primary_clients_until_the_next_step() {
    let virtual_service = sticky_objects("istio", &sticky(1_000, true), 3);
    insta::assert_yaml_snapshot!("istio_session_affinity_primary_cookie", virtual_service);
    let http = virtual_service["spec"]["http"].as_array().unwrap();
    assert_eq!(http.len(), 3);
    assert_eq!(http[0]["route"][0]["destination"]["host"], "podinfo-canary");
    assert_eq!(
        http[1]["route"][0]["destination"]["host"],
        "podinfo-primary"
    );
    let primary_set = &http[2]["route"][0]["headers"]["response"]["add"]["Set-Cookie"];
    let primary_value = cookie_value(primary_set);
    assert_eq!(
        primary_set,
        &json!(format!("primary-cookie={primary_value}; Max-Age=21600"))
    );
    assert_eq!(
        http[1]["match"][0]["headers"]["cookie"]["regex"],
        json!(format!(
            "^(.*?;\\s*)?(primary-cookie={primary_value})(;.*)?$"
        ))
    );
    let next_step = sticky_objects("istio", &sticky(2_000, true), 3);
    let next_step = &next_step["spec"]["http"];
    assert_eq!(
        next_step[0]["match"], http[0]["match"],
        "the canary's stays"
    );
    assert_ne!(
        next_step[1]["match"], http[1]["match"],
        "the primary's changes with the step: clients are dealt again"
    );
}

#[test]
fn session_affinity_ends_with_the_canary_traffic_and_expires_the_cookie() {
    for provider in ["istio", "gatewayapi:v1"] {
        let during = sticky_objects(provider, &sticky(1_000, true), 3);
        let after = sticky_objects(provider, &sticky(0, true), 3);
        let (routes, default) = match provider {
            "istio" => (
                after["spec"]["http"].clone(),
                after["spec"]["http"][0]["route"].clone(),
            ),
            _ => (
                after["spec"]["rules"].clone(),
                after["spec"]["rules"][0]["backendRefs"].clone(),
            ),
        };
        assert_eq!(
            routes.as_array().unwrap().len(),
            1,
            "{provider}: no cookie route"
        );
        let expire = match provider {
            "istio" => default[0]["headers"]["response"]["add"]["Set-Cookie"].clone(),
            _ => default[0]["filters"][0]["responseHeaderModifier"]["add"][0]["value"].clone(),
        };
        let canary_set = match provider {
            "istio" => {
                during["spec"]["http"][2]["route"][1]["headers"]["response"]["add"]["Set-Cookie"]
                    .clone()
            }
            _ => {
                during["spec"]["rules"][2]["backendRefs"][1]["filters"][0]["responseHeaderModifier"]
                    ["add"][0]["value"]
                    .clone()
            }
        };
        let value = cookie_value(&canary_set);
        assert_eq!(
            expire,
            json!(format!("flagger-cookie={value}; Max-Age=-1")),
            "{provider}: the primary's responses expire the run's canary cookie"
        );
        assert_eq!(default[1].get("headers"), None, "{provider}");
        assert_eq!(default[1].get("filters"), None, "{provider}");

        // Before any run there is no cookie to expire.
        let before = sticky_objects(provider, &sticky(0, true), 0);
        let before = match provider {
            "istio" => before["spec"]["http"][0]["route"][0].clone(),
            _ => before["spec"]["rules"][0]["backendRefs"][0].clone(),
        };
        assert_eq!(before.get("headers"), None, "{provider}");
        assert_eq!(before.get("filters"), None, "{provider}");
    }
}

#[test]
fn gateway_api_session_affinity_matches_the_cookie_header_first() {
    let http_route = sticky_objects("gatewayapi:v1", &sticky(1_000, true), 3);
    insta::assert_yaml_snapshot!("gateway_api_session_affinity", http_route);
    let rules = http_route["spec"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 3);
    let canary_set = &rules[2]["backendRefs"][1]["filters"][0];
    assert_eq!(canary_set["type"], "ResponseHeaderModifier");
    let value = cookie_value(&canary_set["responseHeaderModifier"]["add"][0]["value"]);
    assert_eq!(
        canary_set["responseHeaderModifier"]["add"],
        json!([{"name": "Set-Cookie", "value": format!("flagger-cookie={value}; Max-Age=21600")}])
    );
    assert_eq!(
        rules[0],
        json!({
            "matches": [{"headers": [{"type": "RegularExpression", "name": "cookie",
                "value": format!("^(.*?;\\s*)?(flagger-cookie={value})(;.*)?$")}]}],
            "backendRefs": [{"name": "podinfo-canary", "port": 9898, "weight": 1}],
        })
    );
    assert_eq!(rules[1]["backendRefs"][0]["name"], "podinfo-primary");
    let primary_set = &rules[2]["backendRefs"][0]["filters"][0]["responseHeaderModifier"]["add"][0];
    assert_eq!(primary_set["name"], "Set-Cookie");
    assert!(
        primary_set["value"]
            .as_str()
            .unwrap()
            .starts_with("primary-cookie="),
        "{primary_set}"
    );
    // The weights stay in basis points.
    assert_eq!(rules[2]["backendRefs"][0]["weight"], 9_000);
    assert_eq!(rules[2]["backendRefs"][1]["weight"], 1_000);
}

#[test]
fn providers_without_header_manipulation_ignore_session_affinity() {
    let split = sticky_objects("smi", &sticky(1_000, true), 3);
    assert_eq!(split, sticky_objects("smi", &route(1_000), 3));
    let default_cookie_age = objects(
        Provider::Istio,
        &names(),
        &service(),
        &Route {
            session_affinity: Some(SessionAffinity {
                cookie_name: "c".into(),
                primary_cookie_name: None,
                max_age: None,
            }),
            ..route(500)
        },
        1,
        &owner(),
    )
    .unwrap();
    let set_cookie =
        default_cookie_age.objects[0]["spec"]["http"][1]["route"][1]["headers"]["response"]["add"]
            ["Set-Cookie"]
            .as_str()
            .unwrap()
            .to_string();
    assert!(set_cookie.ends_with("; Max-Age=86400"), "{set_cookie}");
}
