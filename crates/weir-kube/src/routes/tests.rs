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
fn gateway_api_and_smi_write_whole_percent_unless_the_plan_needs_basis_points() {
    let http_route = objects_for(Provider::parse(Some("gatewayapi:v1")).unwrap(), 250);
    insta::assert_yaml_snapshot!("gateway_api", http_route.objects);
    let backends = &http_route.objects[0]["spec"]["rules"][0]["backendRefs"];
    assert_eq!(backends[0]["weight"], 97);
    assert_eq!(backends[1]["weight"], 3);
    assert_eq!(
        http_route.adjusted.as_deref(),
        Some(
            "Gateway API weights are written in whole percent, as Flagger writes them (the plan's \
             steps are whole percentages): canary weight 2.5% applied as 3%"
        )
    );
    assert_eq!(
        http_route.objects[0]["spec"]["parentRefs"],
        json!([{"name": "public", "namespace": "gateways"}])
    );

    // A plan with steps finer than a percent keeps weir's 0.01%.
    let fine = |provider: &str, canary_bp: u32| {
        let names = names();
        let service = service();
        let owner = owner();
        let ctx = RouteContext {
            resolution: Resolution::BasisPoints,
            ..RouteContext::new(&names, &service, 1, &owner)
        };
        Provider::parse(Some(provider))
            .unwrap()
            .router()
            .objects(&ctx, &route(canary_bp))
            .unwrap()
    };
    let http_route = fine("gatewayapi:v1", 250);
    let backends = &http_route.objects[0]["spec"]["rules"][0]["backendRefs"];
    assert_eq!(backends[0]["weight"], 9_750);
    assert_eq!(backends[1]["weight"], 250);
    assert_eq!(http_route.adjusted, None);

    let split = fine("smi", 1);
    assert_eq!(split.objects[0]["apiVersion"], "split.smi-spec.io/v1alpha2");
    assert_eq!(split.objects[0]["spec"]["backends"][0]["weight"], 9_999);
    assert_eq!(split.objects[0]["spec"]["backends"][1]["weight"], 1);
    let split = objects_for(Provider::parse(Some("smi")).unwrap(), 1_000);
    assert_eq!(split.objects[0]["spec"]["backends"][0]["weight"], 90);
    assert_eq!(split.objects[0]["spec"]["backends"][1]["weight"], 10);
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
    for (name, provider) in [
        ("nginx", Provider::Nginx),
        ("contour", Provider::Contour),
        ("gloo", Provider::Gloo),
        ("gloo:v1", Provider::Gloo),
        ("traefik", Provider::Traefik),
        ("skipper", Provider::Skipper),
        ("apisix", Provider::Apisix),
        ("kuma", Provider::Kuma),
        ("linkerd", Provider::Linkerd),
        ("knative", Provider::Knative),
        (
            "smi:v1alpha3:istio",
            Provider::Smi("split.smi-spec.io/v1alpha3"),
        ),
        (
            "smi:v1alpha1:linkerd",
            Provider::Smi("split.smi-spec.io/v1alpha1"),
        ),
    ] {
        assert_eq!(Provider::parse(Some(name)), Ok(provider), "{name}");
    }
    // Every name of the list parses back to a provider of that name.
    for name in PROVIDERS.split(", ") {
        let provider = Provider::parse(Some(name)).unwrap();
        assert!(
            name == provider.name() || name == "smi:v1alpha2",
            "{name} is {}",
            provider.name()
        );
    }
    // Flagger reads an unknown name as Istio; weir refuses it and lists every provider.
    let error = Provider::parse(Some("istoi")).unwrap_err();
    assert!(
        error.starts_with("\"istoi\" is not a provider weir drives; one of istio, "),
        "{error}"
    );
    for name in PROVIDERS.split(", ").chain(["appmesh", "osm"]) {
        assert!(error.contains(name), "{name} in {error}");
    }
    // App Mesh and OSM are gone: the refusal says so and names the alternatives.
    for name in ["appmesh", "appmesh:v1beta2", "osm"] {
        let error = Provider::parse(Some(name)).unwrap_err();
        assert!(
            error.contains("AWS shut App Mesh down on 2026-09-30"),
            "{error}"
        );
        assert!(error.contains("Open Service Mesh is archived"), "{error}");
        assert!(
            error.contains("`istio`") && error.contains("gatewayapi:v1"),
            "{error}"
        );
    }
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
    // The weights are whole percent, as Flagger writes them.
    assert_eq!(rules[2]["backendRefs"][0]["weight"], 90);
    assert_eq!(rules[2]["backendRefs"][1]["weight"], 10);
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

// === the providers that read the user's objects ===

use super::table::{affinity, canary_plan, insider, route_at, spec, target, user_objects};
use weir_core::model::{AbTestPlan, KubernetesTarget, Plan};

/// `provider`'s objects for `route` with Flagger's user objects and settings.
fn written(
    provider: &str,
    target: &KubernetesTarget,
    route: &Route,
) -> Result<RouteObjects, String> {
    let names = names();
    let owner = owner();
    let service = KubernetesService::default();
    let inputs = user_objects();
    let ctx = RouteContext {
        target,
        inputs: &inputs,
        primary_revision: Some("podinfo-00001"),
        ..RouteContext::new(&names, &service, 1, &owner)
    };
    Provider::parse(Some(provider))
        .unwrap()
        .router()
        .objects(&ctx, route)
}

fn ab_spec(
    provider: &str,
    rules: Vec<MatchRule>,
) -> (KubernetesTarget, weir_core::model::RolloutSpec) {
    let target = target(provider);
    let spec = spec(
        &target,
        Plan::AbTest(AbTestPlan {
            iterations: 3,
            match_rules: rules,
        }),
    );
    (target, spec)
}

fn rule(headers: &[(&str, StringMatch)], cookies: &[(&str, StringMatch)]) -> MatchRule {
    MatchRule {
        headers: headers
            .iter()
            .map(|(name, condition)| (name.to_string(), condition.clone()))
            .collect(),
        cookies: cookies
            .iter()
            .map(|(name, condition)| (name.to_string(), condition.clone()))
            .collect(),
        ..MatchRule::default()
    }
}

fn regex(value: &str) -> StringMatch {
    StringMatch {
        regex: Some(value.into()),
        ..StringMatch::default()
    }
}

fn paths(errors: &[weir_core::FieldError]) -> Vec<&str> {
    errors.iter().map(|error| error.path.as_str()).collect()
}

#[test]
fn providers_read_the_users_objects_they_name() {
    let names = names();
    let inputs = |provider: &str| {
        Provider::parse(Some(provider))
            .unwrap()
            .router()
            .inputs(&target(provider), &names)
    };
    let nginx = inputs("nginx");
    assert_eq!(nginx.len(), 1);
    assert_eq!(
        (
            nginx[0].api_version.as_str(),
            nginx[0].kind.as_str(),
            nginx[0].namespace.as_str(),
            nginx[0].name.as_str(),
            nginx[0].field,
            nginx[0].required
        ),
        (
            "networking.k8s.io/v1",
            "Ingress",
            "test",
            "podinfo",
            "spec.target.ingressRef",
            true
        )
    );
    assert_eq!(nginx[0].api_resource().plural, "ingresses");
    assert_eq!(inputs("skipper"), nginx);
    assert_eq!(inputs("apisix")[0].kind, "ApisixRoute");
    assert_eq!(inputs("apisix")[0].field, "spec.target.routeRef");
    assert_eq!(inputs("gloo")[0].kind, "Upstream");
    assert_eq!(inputs("gloo")[0].name, "config-upstream");
    for provider in [
        "istio",
        "gatewayapi:v1",
        "smi",
        "contour",
        "traefik",
        "kuma",
        "linkerd",
        "knative",
    ] {
        assert_eq!(
            inputs(provider),
            [],
            "{provider} reads nothing of the user's"
        );
    }
    let mut without = target("gloo");
    without.upstream_ref = None;
    assert_eq!(
        Provider::Gloo.router().inputs(&without, &names),
        [],
        "gloo's upstreamRef is optional"
    );

    // Without the object, the provider says which and where it comes from.
    let owner = owner();
    let service = KubernetesService::default();
    let nginx_target = target("nginx");
    let ctx = RouteContext {
        target: &nginx_target,
        ..RouteContext::new(&names, &service, 1, &owner)
    };
    let error = Provider::Nginx
        .router()
        .objects(&ctx, &route_at(10))
        .unwrap_err();
    assert_eq!(
        error,
        "provider nginx works from the Ingress test/podinfo named by spec.target.ingressRef, which was not read (it may not exist yet)"
    );
    assert_eq!(plural("HTTPProxy"), "httpproxies");
    assert_eq!(plural("Ingress"), "ingresses");
    assert_eq!(plural("RouteTable"), "routetables");
    assert_eq!(plural("Gateway"), "gateways");
}

#[test]
fn nginx_copies_the_ingress_to_the_canary_with_flaggers_annotations() {
    let target = target("nginx");
    let objects = written("nginx", &target, &route_at(10)).unwrap();
    insta::assert_yaml_snapshot!("nginx_canary", objects.objects);
    let ingress = &objects.objects[0];
    assert_eq!(ingress["metadata"]["name"], "podinfo-canary");
    assert_eq!(ingress["metadata"]["labels"], json!({"app": "podinfo"}));
    let annotations = &ingress["metadata"]["annotations"];
    assert_eq!(
        annotations["kubernetes.io/ingress.class"], "nginx",
        "the user's stay"
    );
    assert_eq!(
        annotations.get("kubectl.kubernetes.io/last-applied-configuration"),
        None
    );
    assert_eq!(annotations["nginx.ingress.kubernetes.io/canary"], "true");
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/canary-weight"],
        "10"
    );
    assert_eq!(
        annotations["kustomize.toolkit.fluxcd.io/reconcile"],
        "disabled"
    );
    assert_eq!(
        ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"],
        json!({"name": "podinfo-canary", "port": {"number": 80}})
    );
    assert_eq!(ingress["spec"]["rules"][0]["host"], "app.example.com");

    // Flagger's tutorial: a header, or the cookie `canary` set to `always` (a `cookie` header
    // condition read as Flagger reads it for nginx).
    let rules = vec![
        rule(&[("x-canary", exact("always"))], &[]),
        rule(&[("cookie", exact("canary"))], &[]),
    ];
    let (target, spec) = ab_spec("nginx", rules.clone());
    assert_eq!(Provider::Nginx.router().validate(&spec, &target), []);
    let mut ab = route_at(0);
    ab.match_rules = rules;
    let ab = written("nginx", &target, &ab).unwrap();
    let annotations = &ab.objects[0]["metadata"]["annotations"];
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/canary-by-header"],
        "x-canary"
    );
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/canary-by-header-value"],
        "always"
    );
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/canary-by-cookie"],
        "canary"
    );
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/canary-weight"],
        "0"
    );
    // A pattern, and weir's own cookie condition.
    let mut ab = route_at(0);
    ab.match_rules = vec![
        rule(&[("x-user", regex("^insider-.*"))], &[]),
        rule(&[], &[("beta", exact("always"))]),
    ];
    let annotations =
        written("nginx", &target, &ab).unwrap().objects[0]["metadata"]["annotations"].clone();
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/canary-by-header-pattern"],
        "^insider-.*"
    );
    assert_eq!(
        annotations.get("nginx.ingress.kubernetes.io/canary-by-header-value"),
        None
    );
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/canary-by-cookie"],
        "beta"
    );

    // What ingress-nginx cannot express is refused, each at its field.
    let (target, spec) = ab_spec(
        "nginx",
        vec![
            rule(&[("x-a", exact("1")), ("x-b", exact("2"))], &[]),
            rule(&[("x-c", exact("3"))], &[]),
            rule(&[("x-d", exact("4"))], &[]),
            rule(&[], &[("beta", exact("yes"))]),
            MatchRule {
                query_params: [("canary".to_string(), exact("1"))].into(),
                ..MatchRule::default()
            },
        ],
    );
    let errors = Provider::Nginx.router().validate(&spec, &target);
    assert_eq!(
        paths(&errors),
        [
            "spec.plan.abTest.match[0]",
            "spec.plan.abTest.match[2].headers.x-d",
            "spec.plan.abTest.match[3].cookies.beta",
            "spec.plan.abTest.match[4].queryParams.canary",
        ],
        "{errors:?}"
    );
    for error in &errors {
        assert!(error.message.starts_with("provider nginx "), "{error}");
    }
    let mut no_ref = target.clone();
    no_ref.ingress_ref = None;
    let errors = Provider::Nginx
        .router()
        .validate(&spec_of(&no_ref), &no_ref);
    assert_eq!(paths(&errors), ["spec.target.ingressRef"]);
    assert!(
        errors[0]
            .message
            .contains("provider nginx works from your Ingress"),
        "{errors:?}"
    );
}

fn spec_of(target: &KubernetesTarget) -> weir_core::model::RolloutSpec {
    spec(target, canary_plan())
}

#[test]
fn nginx_and_skipper_refuse_an_ingress_without_the_apex_backend() {
    let target = target("nginx");
    let names = names();
    let owner = owner();
    let service = KubernetesService::default();
    let inputs = Inputs::new().with(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "podinfo", "namespace": "test"},
        "spec": {"rules": [{"http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "other", "port": {"number": 80}}}}]}}]}
    }));
    let ctx = RouteContext {
        target: &target,
        inputs: &inputs,
        ..RouteContext::new(&names, &service, 1, &owner)
    };
    for provider in [Provider::Nginx, Provider::Skipper] {
        let error = provider.router().objects(&ctx, &route_at(10)).unwrap_err();
        assert!(
            error.contains("the Ingress test/podinfo named by spec.target.ingressRef has no backend Service podinfo"),
            "{error}"
        );
    }
}

#[test]
fn skipper_weights_a_copy_and_disables_it_without_canary_traffic() {
    let target = target("skipper");
    let objects = written("skipper", &target, &route_at(10)).unwrap();
    insta::assert_yaml_snapshot!("skipper_canary", objects.objects);
    let ingress = &objects.objects[0];
    let http_paths = &ingress["spec"]["rules"][0]["http"]["paths"];
    assert_eq!(
        http_paths[0]["backend"]["service"]["name"],
        "podinfo-primary"
    );
    assert_eq!(
        http_paths[1]["backend"]["service"]["name"],
        "podinfo-canary"
    );
    assert_eq!(http_paths[1]["path"], "/");
    let annotations = &ingress["metadata"]["annotations"];
    assert_eq!(annotations["zalando.org/skipper-predicate"], "Weight(100)");
    assert_eq!(
        annotations["zalando.org/backend-weights"],
        r#"{"podinfo-canary":10,"podinfo-primary":90}"#
    );
    let idle = written("skipper", &target, &route_at(0)).unwrap();
    assert_eq!(
        idle.objects[0]["metadata"]["annotations"]["zalando.org/skipper-predicate"],
        "False()"
    );

    // The user's predicate stays, after weir's.
    let names = names();
    let owner = owner();
    let service = KubernetesService::default();
    let mut user = user_objects().get("Ingress", "podinfo").unwrap().clone();
    user["metadata"]["annotations"]["zalando.org/skipper-predicate"] = json!("Host(\"^app\")");
    let inputs = Inputs::new().with(user);
    let ctx = RouteContext {
        target: &target,
        inputs: &inputs,
        ..RouteContext::new(&names, &service, 1, &owner)
    };
    let mut ab = route_at(0);
    ab.match_rules = vec![MatchRule {
        headers: [("x-canary".to_string(), regex("^in\"sider$"))].into(),
        cookies: [("beta".to_string(), exact("1"))].into(),
        method: Some(exact("GET")),
        ..MatchRule::default()
    }];
    let ab = Provider::Skipper.router().objects(&ctx, &ab).unwrap();
    let annotations = &ab.objects[0]["metadata"]["annotations"];
    assert_eq!(
        annotations["zalando.org/skipper-predicate"],
        r#"Weight(100) && HeaderRegexp("x-canary", "^in\"sider$") && Cookie("beta", "^1$") && Method("GET") && Host("^app")"#
    );
    assert_eq!(
        annotations["zalando.org/backend-weights"],
        r#"{"podinfo-canary":100,"podinfo-primary":0}"#
    );

    // Alternatives need an Ingress each: refused.
    let (target, spec) = ab_spec("skipper", [insider(), insider()].concat());
    let errors = Provider::Skipper.router().validate(&spec, &target);
    assert_eq!(paths(&errors), ["spec.plan.abTest.match"], "{errors:?}");
}

#[test]
fn contour_writes_flaggers_httpproxy_with_ab_routes_first() {
    let target = target("contour");
    let names = names();
    let owner = owner();
    let service: KubernetesService = serde_json::from_value(json!({
        "port": 9898,
        "timeout": "15s",
        "retries": {"attempts": 3, "perTryTimeout": "5s", "retryOn": "5xx,gateway-error"},
        "match": [{"uri": {"prefix": "/api"}}],
        "apex": {"labels": {"team": "shop"}, "annotations": {"note": "apex"}}
    }))
    .unwrap();
    let ctx = RouteContext {
        target: &target,
        ..RouteContext::new(&names, &service, 1, &owner)
    };
    let mut ab = route_at(0);
    ab.match_rules = vec![MatchRule {
        headers: [(
            "x-canary".to_string(),
            StringMatch {
                prefix: Some("in".into()),
                ..StringMatch::default()
            },
        )]
        .into(),
        cookies: [("beta".to_string(), exact("1"))].into(),
        query_params: [(
            "q".to_string(),
            StringMatch {
                suffix: Some("x".into()),
                ..StringMatch::default()
            },
        )]
        .into(),
        ..MatchRule::default()
    }];
    let proxy = Provider::Contour
        .router()
        .objects(&ctx, &ab)
        .unwrap()
        .objects
        .remove(0);
    insta::assert_yaml_snapshot!("contour_ab", proxy);
    assert_eq!(proxy["metadata"]["labels"], json!({"team": "shop"}));
    assert_eq!(proxy["metadata"]["annotations"]["note"], "apex");
    assert_eq!(
        proxy["metadata"]["annotations"]["helm.toolkit.fluxcd.io/driftDetection"],
        "disabled"
    );
    let routes = proxy["spec"]["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 2);
    assert_eq!(
        routes[0]["conditions"],
        json!([
            {"prefix": "/api"},
            {"header": {"name": "x-canary", "regex": "^in.*"}},
            {"header": {"name": "cookie", "regex": "^(.*?;\\s*)?(beta=1)(;.*)?$"}},
            {"queryParameter": {"name": "q", "suffix": "x"}},
        ])
    );
    assert_eq!(routes[1]["conditions"], json!([{"prefix": "/api"}]));
    for route in routes {
        assert_eq!(
            route["timeoutPolicy"],
            json!({"response": "15s", "idle": "5m"})
        );
        assert_eq!(
            route["retryPolicy"],
            json!({"count": 3, "perTryTimeout": "5s", "retryOn": ["5xx", "gateway-error"]})
        );
    }
    assert_eq!(
        routes[1]["services"][0]["requestHeadersPolicy"]["set"][0],
        json!({"name": "l5d-dst-override", "value": "podinfo-primary.test.svc.cluster.local:9898"})
    );
    let (target, spec) = ab_spec(
        "contour",
        vec![MatchRule {
            method: Some(exact("POST")),
            ..MatchRule::default()
        }],
    );
    let errors = Provider::Contour.router().validate(&spec, &target);
    assert_eq!(paths(&errors), ["spec.plan.abTest.match[0].method"]);
}

#[test]
fn gloo_upstreams_carry_the_upstream_refs_settings() {
    let target = target("gloo");
    let objects = written("gloo", &target, &route_at(10)).unwrap().objects;
    insta::assert_yaml_snapshot!("gloo_canary", objects);
    let primary = &objects[0];
    assert_eq!(
        primary["metadata"]["name"],
        "test-podinfo-primaryupstream-9898"
    );
    assert_eq!(primary["metadata"].get("labels"), None);
    assert_eq!(
        primary["spec"]["kube"],
        json!({"serviceName": "podinfo-primary", "serviceNamespace": "test", "servicePort": 9898})
    );
    assert_eq!(
        primary["spec"]["connectionConfig"]["maxRequestsPerConnection"],
        51
    );
    assert_eq!(
        primary["spec"]["loadBalancerConfig"]["roundRobin"]["slowStartConfig"]["minWeightPercent"],
        10
    );
    assert_eq!(
        primary["spec"].get("static"),
        None,
        "only Flagger's fields are copied"
    );
    assert_eq!(objects[1]["spec"]["kube"]["serviceName"], "podinfo-canary");
    let destinations = &objects[2]["spec"]["routes"][0]["routeAction"]["multi"]["destinations"];
    assert_eq!(
        destinations[1],
        json!({"destination": {"upstream": {"name": "test-podinfo-canaryupstream-9898", "namespace": "test"}}, "weight": 10})
    );
    let (target, spec) = ab_spec(
        "gloo",
        vec![MatchRule {
            uri: Some(exact("/api")),
            ..MatchRule::default()
        }],
    );
    let errors = Provider::Gloo.router().validate(&spec, &target);
    assert_eq!(paths(&errors), ["spec.plan.abTest.match[0].uri"]);
}

#[test]
fn apisix_copies_the_users_entry_at_a_higher_priority() {
    let target = target("apisix");
    let objects = written("apisix", &target, &route_at(10)).unwrap().objects;
    insta::assert_yaml_snapshot!("apisix_canary", objects);
    let entry = &objects[0]["spec"]["http"][0];
    assert_eq!(entry["priority"], 10_000);
    assert_eq!(entry["name"], "method");
    assert_eq!(entry["plugins"][0]["name"], "prometheus");
    assert_eq!(
        entry["backends"],
        json!([
            {"serviceName": "podinfo-primary", "servicePort": 80, "weight": 90},
            {"serviceName": "podinfo-canary", "servicePort": 80, "weight": 10},
        ])
    );
    let mut ab = route_at(0);
    ab.match_rules = vec![MatchRule {
        cookies: [("beta".to_string(), exact("1"))].into(),
        uri: Some(StringMatch {
            prefix: Some("/api".into()),
            ..StringMatch::default()
        }),
        method: Some(exact("GET")),
        ..MatchRule::default()
    }];
    let http = &written("apisix", &target, &ab).unwrap().objects[0]["spec"]["http"];
    assert_eq!(http[0]["name"], "method-match-0");
    assert_eq!(http[0]["priority"], 10_001);
    assert_eq!(
        http[0]["match"]["exprs"],
        json!([
            {"subject": {"scope": "Cookie", "name": "beta"}, "op": "Equal", "value": "1"},
            {"subject": {"scope": "Path"}, "op": "RegexMatch", "value": "^/api.*"},
        ])
    );
    assert_eq!(http[0]["match"]["methods"], json!(["GET"]));
    ab.match_rules[0].method = Some(exact("POST"));
    let error = written("apisix", &target, &ab).unwrap_err();
    assert!(
        error.contains("method POST is not among the methods"),
        "{error}"
    );
}

#[test]
fn kuma_names_its_cluster_wide_route_per_namespace_and_takes_the_mesh_annotation() {
    let names = names();
    let owner = owner();
    let service = KubernetesService::default();
    let annotations = [("kuma.io/mesh".to_string(), "payments".to_string())].into();
    let ctx = RouteContext {
        annotations: &annotations,
        ..RouteContext::new(&names, &service, 1, &owner)
    };
    let route = Provider::Kuma
        .router()
        .objects(&ctx, &route_at(10))
        .unwrap()
        .objects
        .remove(0);
    insta::assert_yaml_snapshot!("kuma_canary", route);
    assert_eq!(route["metadata"]["name"], "podinfo.test");
    assert_eq!(route["metadata"].get("namespace"), None);
    assert_eq!(route["metadata"].get("ownerReferences"), None);
    assert_eq!(route["mesh"], "payments");
    assert_eq!(
        route["spec"]["conf"]["split"][1],
        json!({"weight": 10, "destination": {"kuma.io/service": "podinfo-canary_test_svc_9898"}})
    );
    let other = Names {
        namespace: "other".into(),
        ..names.clone()
    };
    let ctx = RouteContext::new(&other, &service, 1, &owner);
    let elsewhere = Provider::Kuma
        .router()
        .objects(&ctx, &route_at(10))
        .unwrap()
        .objects
        .remove(0);
    assert_eq!(
        elsewhere["metadata"]["name"], "podinfo.other",
        "no collision"
    );
    assert_eq!(elsewhere["mesh"], "default");
}

#[test]
fn linkerd_writes_quantity_strings_canary_first() {
    let names = names();
    let owner = owner();
    let service: KubernetesService =
        serde_json::from_value(json!({"hosts": ["podinfo.test.svc.cluster.local"]})).unwrap();
    let ctx = RouteContext::new(&names, &service, 1, &owner);
    let split = Provider::Linkerd
        .router()
        .objects(&ctx, &route_at(10))
        .unwrap()
        .objects
        .remove(0);
    assert_eq!(
        split,
        json!({
            "apiVersion": "split.smi-spec.io/v1alpha1",
            "kind": "TrafficSplit",
            "metadata": {"name": "podinfo", "namespace": "test", "ownerReferences": [owner]},
            "spec": {
                "service": "podinfo.test.svc.cluster.local",
                "backends": [
                    {"service": "podinfo-canary", "weight": "10"},
                    {"service": "podinfo-primary", "weight": "90"},
                ],
            },
        })
    );
}

#[test]
fn traefik_mirrors_while_the_canary_has_no_traffic() {
    let target = target("traefik");
    let mut mirror = route_at(0);
    mirror.mirror_weight = Some(Weight::from_basis_points(2_550));
    let written = written("traefik", &target, &mirror).unwrap();
    assert_eq!(
        written.objects[0]["spec"],
        json!({"mirroring": {
            "name": "podinfo-primary", "namespace": "test", "port": 9898,
            "mirrors": [{"name": "podinfo-canary", "namespace": "test", "port": 9898, "percent": 26}],
        }})
    );
    assert_eq!(
        written.adjusted.as_deref(),
        Some("Traefik mirrors whole percentages: mirror weight 25.5% applied as 26%")
    );
}

#[test]
fn knative_edits_the_users_service_and_owns_nothing() {
    let target = target("knative");
    let written = written("knative", &target, &route_at(10)).unwrap();
    assert!(written.objects.is_empty());
    assert_eq!(
        written.edits,
        [json!({
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {"name": "podinfo", "namespace": "test",
                "annotations": {"flagger.app/primary-revision": "podinfo-00001"}},
            "spec": {"traffic": [
                {"latestRevision": true, "percent": 10},
                {"revisionName": "podinfo-00001", "percent": 90},
            ]},
        })]
    );
    let mut deployment = target.clone();
    deployment.target_ref = target_of_kind("Deployment");
    let errors = Provider::Knative
        .router()
        .validate(&spec_of(&deployment), &deployment);
    assert_eq!(
        paths(&errors),
        [
            "spec.target.targetRef.kind",
            "spec.target.targetRef.apiVersion"
        ]
    );
}

fn target_of_kind(kind: &str) -> Option<weir_core::model::ObjectReference> {
    Some(weir_core::model::ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some(kind.into()),
        name: "podinfo".into(),
        namespace: None,
    })
}

#[test]
fn ab_tests_on_providers_without_request_matching_are_refused_not_sent_to_everyone() {
    for provider in ["smi", "linkerd", "traefik", "kuma", "knative", "kubernetes"] {
        let (target, spec) = ab_spec(provider, insider());
        let errors = Provider::parse(Some(provider))
            .unwrap()
            .router()
            .validate(&spec, &target);
        assert_eq!(paths(&errors), ["spec.plan.abTest.match"], "{provider}");
        let message = &errors[0].message;
        assert!(
            message.contains(&format!(
                "provider {provider} cannot send matching requests to the canary"
            )),
            "{message}"
        );
        assert!(
            message.contains("Flagger would ignore the rules and send every request to the canary"),
            "{message}"
        );
    }
    // Session affinity is written where it can be, refused elsewhere.
    for provider in Provider::all() {
        let name = provider.name();
        let target = target(name);
        let mut spec = spec(&target, canary_plan());
        spec.session_affinity = Some(affinity());
        let refused = provider
            .router()
            .validate(&spec, &target)
            .iter()
            .any(|error| error.path == "spec.sessionAffinity");
        assert_eq!(
            refused,
            !matches!(provider, Provider::Istio | Provider::GatewayApi(_)),
            "{name}"
        );
    }
}

#[test]
fn istio_and_the_gateway_api_test_one_cookie_per_rule() {
    for provider in ["istio", "gatewayapi:v1"] {
        let (target, spec) = ab_spec(
            provider,
            vec![rule(&[("cookie", regex(".*a=1.*"))], &[("b", exact("2"))])],
        );
        let errors = Provider::parse(Some(provider))
            .unwrap()
            .router()
            .validate(&spec, &target);
        assert_eq!(
            paths(&errors),
            ["spec.plan.abTest.match[0].cookies"],
            "{provider}"
        );
    }
    let (target, spec) = ab_spec(
        "gatewayapi:v1",
        vec![MatchRule {
            method: Some(regex("GET|HEAD")),
            ..MatchRule::default()
        }],
    );
    let errors = Provider::parse(Some("gatewayapi:v1"))
        .unwrap()
        .router()
        .validate(&spec, &target);
    assert_eq!(paths(&errors), ["spec.plan.abTest.match[0].method"]);
}
