//! Every object a traffic provider writes is accepted by that provider's real CRD: the CRDs of
//! the compatibility corpus (`$WEIR_COMPAT_CRDS`, or `../shared/compat/crds` beside the project)
//! are created in the strict in-memory API server, and each object of each provider at canary 0,
//! 10, 50 and 100% (in whole percent and in basis points), for an A/B test and for mirroring
//! where the provider writes them, is created with strict field validation (unknown fields are
//! refused). The server checks field names only, so the test also checks each object against
//! the CRD's schema itself: types, `int-or-string`, required fields, enums, minimum and maximum,
//! array sizes. Ingresses (built in, no CRD) must survive a round trip through the Kubernetes
//! `Ingress` type unchanged. Without the CRDs (a fresh clone has no `../shared`) the test says
//! that it skipped and passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::networking::v1::Ingress;
use serde_json::{Value, json};
use weir_core::Weight;
use weir_core::machine::Route;
use weir_core::model::{
    KubernetesService, KubernetesTarget, MatchRule, ObjectReference, StringMatch,
};
use weir_kube::routes::{Inputs, Names, Provider, Resolution, RouteContext};
use weir_testkit::kube_server::KubeServer;

fn crds() -> Option<PathBuf> {
    let dir = std::env::var("WEIR_COMPAT_CRDS")
        .map(PathBuf::from)
        .ok()
        .filter(|dir| dir.is_dir())
        .or_else(|| {
            let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/crds");
            beside.is_dir().then_some(beside)
        });
    if dir.is_none() {
        println!(
            "the providers' CRDs were not found ($WEIR_COMPAT_CRDS or ../shared/compat/crds): the check against them was skipped"
        );
    }
    dir
}

/// The CRD files, by the `apiVersion` group and kind of the objects they serve.
const CRD_FILES: [(&str, &str, &str); 10] = [
    (
        "networking.istio.io",
        "VirtualService",
        "istio/virtualservices.networking.istio.io.yaml",
    ),
    (
        "networking.istio.io",
        "DestinationRule",
        "istio/destinationrules.networking.istio.io.yaml",
    ),
    (
        "split.smi-spec.io",
        "TrafficSplit",
        "linkerd/trafficsplits.split.smi-spec.io.yaml",
    ),
    (
        "projectcontour.io",
        "HTTPProxy",
        "contour/httpproxies.projectcontour.io.yaml",
    ),
    (
        "gateway.solo.io",
        "RouteTable",
        "gloo/routetables.gateway.solo.io.yaml",
    ),
    (
        "gloo.solo.io",
        "Upstream",
        "gloo/upstreams.gloo.solo.io.yaml",
    ),
    (
        "traefik.io",
        "TraefikService",
        "traefik/traefikservices.traefik.io.yaml",
    ),
    (
        "apisix.apache.org",
        "ApisixRoute",
        "apisix/apisixroutes.apisix.apache.org.yaml",
    ),
    ("kuma.io", "TrafficRoute", "kuma/trafficroutes.kuma.io.yaml"),
    (
        "serving.knative.dev",
        "Service",
        "knative/services.serving.knative.dev.yaml",
    ),
];

fn load_crd(dir: &Path, file: &str) -> Value {
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|error| panic!("{file}: {error}"))
}

/// The schema of `api_version` in `crd`, if that version is served.
fn schema<'a>(crd: &'a Value, api_version: &str) -> Option<&'a Value> {
    let version = api_version
        .rsplit_once('/')
        .map_or(api_version, |(_, version)| version);
    crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|served| served["name"] == version && served["served"] == true)
        .map(|served| &served["schema"]["openAPIV3Schema"])
}

/// What in `value` breaks `schema` (structural OpenAPI v3 as CRDs use it), with paths.
fn check(schema: &Value, value: &Value, path: &str, problems: &mut Vec<String>) {
    if schema["x-kubernetes-int-or-string"] == true {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            problems.push(format!(
                "{path}: {value} is neither an integer nor a string"
            ));
        }
        return;
    }
    if value.is_null() && schema["nullable"] == true {
        return;
    }
    let kind = schema["type"].as_str();
    let fits = match kind {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !fits {
        problems.push(format!(
            "{path}: {value} is not of type {}",
            kind.unwrap_or("?")
        ));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        problems.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    if let Some(number) = value.as_f64() {
        if let Some(minimum) = schema["minimum"].as_f64()
            && number < minimum
        {
            problems.push(format!("{path}: {number} is below the minimum {minimum}"));
        }
        if let Some(maximum) = schema["maximum"].as_f64()
            && number > maximum
        {
            problems.push(format!("{path}: {number} is above the maximum {maximum}"));
        }
        if schema["format"] == "int32" && i32::try_from(value.as_i64().unwrap_or(i64::MAX)).is_err()
        {
            problems.push(format!("{path}: {number} is not an int32"));
        }
    }
    if let Some(items) = value.as_array() {
        if let Some(max) = schema["maxItems"].as_u64()
            && items.len() as u64 > max
        {
            problems.push(format!("{path}: more than {max} items"));
        }
        if let Some(min) = schema["minItems"].as_u64()
            && (items.len() as u64) < min
        {
            problems.push(format!("{path}: fewer than {min} items"));
        }
        for (index, item) in items.iter().enumerate() {
            check(
                &schema["items"],
                item,
                &format!("{path}[{index}]"),
                problems,
            );
        }
    }
    if let Some(fields) = value.as_object() {
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap();
            if !fields.contains_key(name) {
                problems.push(format!("{path}: the required field {name} is missing"));
            }
        }
        let properties = schema["properties"].as_object();
        for (name, field) in fields {
            let field_path = format!("{path}.{name}");
            // The type and metadata are the API server's own (TypeMeta, ObjectMeta).
            if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&name.as_str()) {
                continue;
            }
            match properties.and_then(|properties| properties.get(name)) {
                Some(field_schema) => check(field_schema, field, &field_path, problems),
                None if schema["additionalProperties"].is_object() => {
                    check(
                        &schema["additionalProperties"],
                        field,
                        &field_path,
                        problems,
                    );
                }
                None if schema["x-kubernetes-preserve-unknown-fields"] == true
                    || schema["additionalProperties"] == true => {}
                None => problems.push(format!("{field_path}: unknown field")),
            }
        }
    }
}

fn reference(api_version: &str, kind: &str, name: &str) -> Option<ObjectReference> {
    Some(ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: name.into(),
        namespace: None,
    })
}

/// The settings and objects of a Flagger user of every provider.
fn user_target(provider: &str) -> KubernetesTarget {
    KubernetesTarget {
        provider: Some(provider.into()),
        target_ref: if provider == "knative" {
            reference("serving.knative.dev/v1", "Service", "podinfo")
        } else {
            reference("apps/v1", "Deployment", "podinfo")
        },
        ingress_ref: reference("networking.k8s.io/v1", "Ingress", "podinfo"),
        route_ref: reference("apisix.apache.org/v2", "ApisixRoute", "podinfo"),
        upstream_ref: reference("gloo.solo.io/v1", "Upstream", "config-upstream"),
        ..KubernetesTarget::default()
    }
}

fn user_objects() -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "podinfo", "namespace": "test",
                "annotations": {"kubernetes.io/ingress.class": "nginx",
                    "zalando.org/skipper-predicate": "Host(\"^app[.]example[.]com$\")"}},
            "spec": {
                "ingressClassName": "nginx",
                "tls": [{"hosts": ["app.example.com"], "secretName": "app-tls"}],
                "rules": [{"host": "app.example.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "podinfo", "port": {"number": 80}}}},
                    {"path": "/static", "pathType": "Prefix",
                     "backend": {"service": {"name": "assets", "port": {"name": "http"}}}}
                ]}}]
            }
        }),
        json!({
            "apiVersion": "apisix.apache.org/v2", "kind": "ApisixRoute",
            "metadata": {"name": "podinfo", "namespace": "test"},
            "spec": {"ingressClassName": "apisix", "http": [{
                "name": "method",
                "match": {"hosts": ["app.example.com"], "methods": ["GET"], "paths": ["/*"]},
                "backends": [{"serviceName": "podinfo", "servicePort": 80}],
                "plugins": [{"name": "prometheus", "enable": true, "config": {"prefer_name": true}}]
            }]}
        }),
        json!({
            "apiVersion": "gloo.solo.io/v1", "kind": "Upstream",
            "metadata": {"name": "config-upstream", "namespace": "test"},
            "spec": {
                "connectionConfig": {"maxRequestsPerConnection": 51},
                "loadBalancerConfig": {"roundRobin": {"slowStartConfig": {"slowStartWindow": "60s", "minWeightPercent": 10}}},
                "static": {"hosts": [{"addr": "example.com", "port": 80}]}
            }
        }),
    ]
}

fn exact(value: &str) -> StringMatch {
    StringMatch {
        exact: Some(value.into()),
        ..StringMatch::default()
    }
}

/// The routes of a run, and of the plans that need them, with a label each.
fn routes() -> Vec<(String, Route)> {
    let at = |basis_points: u32| Route {
        primary_weight: Weight::from_basis_points(10_000 - basis_points),
        canary_weight: Weight::from_basis_points(basis_points),
        mirror_weight: None,
        match_rules: Vec::new(),
        session_affinity: None,
    };
    let mut routes: Vec<(String, Route)> = [0, 1_000, 5_000, 10_000, 250]
        .into_iter()
        .map(|basis_points| {
            (
                format!("canary {}", Weight::from_basis_points(basis_points)),
                at(basis_points),
            )
        })
        .collect();
    let mut ab = at(0);
    ab.match_rules = vec![MatchRule {
        headers: [("x-canary".to_string(), exact("insider"))].into(),
        ..MatchRule::default()
    }];
    routes.push(("A/B".into(), ab.clone()));
    ab.match_rules = vec![MatchRule {
        cookies: [(
            "beta".to_string(),
            StringMatch {
                prefix: Some("on".into()),
                ..StringMatch::default()
            },
        )]
        .into(),
        query_params: [("canary".to_string(), exact("1"))].into(),
        ..MatchRule::default()
    }];
    routes.push(("A/B on a cookie and a query parameter".into(), ab));
    let mut mirror = at(0);
    mirror.mirror_weight = Some(Weight::from_basis_points(5_050));
    routes.push(("mirror 50.5%".into(), mirror));
    routes
}

/// Which routes a provider writes (the others it refuses at validation).
fn writes(provider: Provider, label: &str) -> bool {
    let ab = matches!(
        provider,
        Provider::Istio
            | Provider::GatewayApi(_)
            | Provider::Nginx
            | Provider::Contour
            | Provider::Gloo
            | Provider::Skipper
            | Provider::Apisix
    );
    let mirror = matches!(
        provider,
        Provider::Istio
            | Provider::GatewayApi(_)
            | Provider::Contour
            | Provider::Gloo
            | Provider::Traefik
    );
    match label {
        "A/B" => ab,
        "A/B on a cookie and a query parameter" => ab && provider != Provider::Nginx,
        "mirror 50.5%" => mirror,
        _ => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_providers_objects_are_accepted_by_its_real_crd() {
    let Some(dir) = crds() else { return };
    let server = KubeServer::start().await;
    server
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "test"}}))
        .unwrap();
    let mut crds: BTreeMap<(String, String), Value> = BTreeMap::new();
    for (group, kind, file) in CRD_FILES {
        let crd = load_crd(&dir, file);
        server
            .create(crd.clone())
            .unwrap_or_else(|error| panic!("creating the CRD {file}: {error:?}"));
        crds.insert((group.to_string(), kind.to_string()), crd);
    }
    // The checks bite: the server refuses an unknown field, the schema check a wrong type, a
    // missing required field and a value out of range.
    let wrong = json!({"apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
        "metadata": {"name": "wrong", "namespace": "test"},
        "spec": {"routes": [{"services": [{"name": "a", "port": 80, "weight": -1, "wieght": 1}]},
                            {"services": [{"name": "b", "port": "80"}]},
                            {"services": [{"port": 80}]}]}});
    let refused = server.create(wrong.clone()).unwrap_err();
    assert!(refused.message.contains("unknown field"), "{refused:?}");
    let httpproxy = &crds[&("projectcontour.io".to_string(), "HTTPProxy".to_string())];
    let mut found = Vec::new();
    check(
        schema(httpproxy, "projectcontour.io/v1").unwrap(),
        &wrong,
        "",
        &mut found,
    );
    assert_eq!(
        found,
        [
            ".spec.routes[0].services[0].weight: -1 is below the minimum 0",
            ".spec.routes[0].services[0].wieght: unknown field",
            ".spec.routes[1].services[0].port: \"80\" is not of type integer",
            ".spec.routes[2].services[0]: the required field name is missing",
        ]
    );

    let names = Names {
        namespace: "test".into(),
        apex: "podinfo".into(),
        primary: "podinfo-primary".into(),
        canary: "podinfo-canary".into(),
        port: 9898,
    };
    let owner = json!({"apiVersion": "weir.dev/v1alpha1", "kind": "Rollout", "name": "podinfo",
        "uid": "0b5e4b53-4b5e-4a42-9b8b-6f1b2c3d4e5f", "controller": true, "blockOwnerDeletion": true});
    let service: KubernetesService = serde_json::from_value(json!({
        "port": 9898,
        "hosts": ["app.example.com"],
        "gatewayRefs": [{"name": "public", "namespace": "gateways"}],
        "timeout": "30s",
        "retries": {"attempts": 3, "perTryTimeout": "1s", "retryOn": "5xx,gateway-error"},
        "trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL"}},
        "apex": {"labels": {"team": "shop"}, "annotations": {"test": "annotation"}}
    }))
    .unwrap();
    let annotations = [("kuma.io/mesh".to_string(), "default".to_string())].into();
    let mut inputs = Inputs::new();
    let mut to_check: Vec<(String, Value)> = Vec::new();
    for object in user_objects() {
        inputs.insert(object.clone());
        to_check.push(("the user's".into(), object));
    }
    let mut skipped = BTreeMap::new();
    let mut per_provider: BTreeMap<&str, usize> = BTreeMap::new();
    for provider in Provider::all() {
        let target = user_target(provider.name());
        for resolution in [Resolution::Percent, Resolution::BasisPoints] {
            let ctx = RouteContext {
                target: &target,
                annotations: &annotations,
                resolution,
                inputs: &inputs,
                primary_revision: Some("podinfo-00001"),
                ..RouteContext::new(&names, &service, 1, &owner)
            };
            for (label, route) in routes() {
                if !writes(provider, &label) {
                    continue;
                }
                let context = format!("{} at {label} ({resolution:?})", provider.name());
                let written = match provider.router().objects(&ctx, &route) {
                    Ok(written) => written,
                    Err(error) if provider == Provider::Kubernetes => {
                        assert!(error.contains("all at once"), "{context}: {error}");
                        continue;
                    }
                    Err(error) => panic!("{context}: {error}"),
                };
                for object in written.objects.into_iter().chain(written.edits) {
                    *per_provider.entry(provider.name()).or_default() += 1;
                    to_check.push((context.clone(), object));
                }
            }
        }
    }
    let mut problems = Vec::new();
    let mut accepted = 0;
    for (context, object) in &to_check {
        let api_version = object["apiVersion"].as_str().unwrap();
        let kind = object["kind"].as_str().unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let what = format!("{context}: {kind} {name} ({api_version})");
        if kind == "Ingress" {
            let typed: Ingress = serde_json::from_value(object.clone())
                .unwrap_or_else(|error| panic!("{what}: not an Ingress: {error}"));
            assert_eq!(
                &serde_json::to_value(&typed).unwrap(),
                object,
                "{what}: fields an Ingress does not have"
            );
            accepted += 1;
            continue;
        }
        let Some(crd) = crds.get(&(group.to_string(), kind.to_string())) else {
            *skipped
                .entry(format!("{kind} ({api_version}): no CRD in the corpus"))
                .or_insert(0) += 1;
            continue;
        };
        let Some(schema) = schema(crd, api_version) else {
            *skipped
                .entry(format!(
                    "{kind} ({api_version}): a version its CRD does not serve"
                ))
                .or_insert(0) += 1;
            continue;
        };
        let mut found = Vec::new();
        check(schema, object, "", &mut found);
        problems.extend(
            found
                .into_iter()
                .map(|problem| format!("{what}: {problem}")),
        );
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or("");
        match server.create(object.clone()) {
            Ok(_) => {
                accepted += 1;
                // The next step writes the same name; the owner does not exist, so the collector
                // may have taken it already.
                let _ = server.delete(api_version, kind, namespace, name);
            }
            Err(error) => problems.push(format!("{what}: refused by the server: {error:?}")),
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    println!(
        "{accepted} route objects accepted by their providers' CRDs (strict field validation and the schema); per provider: {per_provider:?}"
    );
    for (what, count) in skipped {
        println!("not checked against a CRD: {count} x {what}");
    }
    assert!(accepted > 100, "{accepted}");
}

/// APISIX's older controller (1.8) has a CRD of its own for `apisix.apache.org/v2`: the canary
/// route fits it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apisix_canary_routes_fit_the_older_controllers_crd_too() {
    let Some(dir) = crds() else { return };
    let crd = load_crd(&dir, "apisix/apisixroutes.apisix.apache.org-v1.8.yaml");
    let server = KubeServer::start().await;
    server
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "test"}}))
        .unwrap();
    server.create(crd.clone()).unwrap();
    let names = Names {
        namespace: "test".into(),
        apex: "podinfo".into(),
        primary: "podinfo-primary".into(),
        canary: "podinfo-canary".into(),
        port: 80,
    };
    let owner = json!({"apiVersion": "weir.dev/v1alpha1", "kind": "Rollout", "name": "podinfo", "uid": "u", "controller": true});
    let service = KubernetesService::default();
    let target = user_target("apisix");
    let mut inputs = Inputs::new();
    for object in user_objects() {
        inputs.insert(object);
    }
    let ctx = RouteContext {
        target: &target,
        inputs: &inputs,
        ..RouteContext::new(&names, &service, 1, &owner)
    };
    for (label, route) in routes() {
        if label.starts_with("mirror") {
            continue;
        }
        let object = Provider::Apisix
            .router()
            .objects(&ctx, &route)
            .unwrap()
            .objects
            .remove(0);
        let mut problems = Vec::new();
        check(
            schema(&crd, "apisix.apache.org/v2").unwrap(),
            &object,
            "",
            &mut problems,
        );
        // The 1.8 CRD knows no ingressClassName on the route (2.x added it).
        problems.retain(|problem| !problem.starts_with(".spec.ingressClassName"));
        assert_eq!(problems, Vec::<String>::new(), "{label}");
        let mut object = object;
        object["spec"]
            .as_object_mut()
            .unwrap()
            .remove("ingressClassName");
        server
            .create(object)
            .unwrap_or_else(|error| panic!("{label}: {error:?}"));
        let _ = server.delete(
            "apisix.apache.org/v2",
            "ApisixRoute",
            "test",
            "podinfo-podinfo-canary",
        );
    }
}
