//! One table for every provider: the objects it writes, the weights as written at canary 0, 10,
//! 50 and 100%, what an A/B test, mirroring and session affinity become (written, or refused at
//! validation with the field named), and that what it owns and what RBAC grants cover what it
//! writes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use weir_core::Weight;
use weir_core::machine::Route;
use weir_core::model::{
    AbTestPlan, Analysis, CanaryPlan, KubernetesService, KubernetesTarget, MatchRule, MirrorPlan,
    ObjectReference, Plan, RolloutSpec, SessionAffinity, StringMatch, Target,
};

use super::*;

/// What a column expects.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Validation passes and each `(object, JSON pointer, value)` holds in what is written
    /// (`object` indexes the owned objects, then the edits).
    Writes(&'static [(usize, &'static str, &'static str)]),
    /// Validation refuses it at this path (and says the provider's name).
    Refused(&'static str),
}
use Expect::{Refused, Writes};

/// One provider's row.
struct Row {
    provider: &'static str,
    /// `Kind/name` of the objects written (owned objects, then edits).
    objects: &'static [&'static str],
    /// Where the written weights are: (object, pointer of the primary's, pointer of the
    /// canary's); `""`: the provider writes none.
    weights: (usize, &'static str, &'static str),
    /// The weights as written at canary 0, 10, 50 and 100% (JSON, `null` for absent); `refused`
    /// for a weight the provider refuses to apply.
    at: [&'static str; 4],
    /// An A/B test on the header `x-canary: insider` (the route at canary 0 with the rule).
    ab: Expect,
    /// A mirror plan (the route mirrors 100% at canary 0).
    mirror: Expect,
    /// Session affinity (the route at canary 10%).
    affinity: Expect,
}

fn table() -> Vec<Row> {
    vec![
        Row {
            provider: "istio",
            objects: &[
                "VirtualService/podinfo",
                "DestinationRule/podinfo-primary",
                "DestinationRule/podinfo-canary",
            ],
            weights: (
                0,
                "/spec/http/0/route/0/weight",
                "/spec/http/0/route/1/weight",
            ),
            at: ["[100, 0]", "[90, 10]", "[50, 50]", "[0, 100]"],
            ab: Writes(&[
                (
                    0,
                    "/spec/http/0/match/0/headers/x-canary/exact",
                    "\"insider\"",
                ),
                (
                    0,
                    "/spec/http/0/route/0/destination/host",
                    "\"podinfo-canary\"",
                ),
            ]),
            mirror: Writes(&[(0, "/spec/http/0/mirrorPercentage/value", "100.0")]),
            affinity: Writes(&[(
                0,
                "/spec/http/0/route/0/destination/host",
                "\"podinfo-canary\"",
            )]),
        },
        Row {
            provider: "gatewayapi:v1",
            objects: &["HTTPRoute/podinfo"],
            weights: (
                0,
                "/spec/rules/0/backendRefs/0/weight",
                "/spec/rules/0/backendRefs/1/weight",
            ),
            at: ["[100, 0]", "[90, 10]", "[50, 50]", "[0, 100]"],
            ab: Writes(&[
                (0, "/spec/rules/0/matches/0/headers/0/value", "\"insider\""),
                (0, "/spec/rules/0/backendRefs/0/name", "\"podinfo-canary\""),
            ]),
            mirror: Writes(&[(0, "/spec/rules/0/filters/0/type", "\"RequestMirror\"")]),
            affinity: Writes(&[(0, "/spec/rules/0/backendRefs/0/name", "\"podinfo-canary\"")]),
        },
        Row {
            provider: "smi",
            objects: &["TrafficSplit/podinfo"],
            weights: (0, "/spec/backends/0/weight", "/spec/backends/1/weight"),
            at: ["[100, 0]", "[90, 10]", "[50, 50]", "[0, 100]"],
            ab: Refused("spec.plan.abTest.match"),
            mirror: Refused("spec.plan.mirror"),
            affinity: Refused("spec.sessionAffinity"),
        },
        Row {
            provider: "linkerd",
            objects: &["TrafficSplit/podinfo"],
            weights: (0, "/spec/backends/1/weight", "/spec/backends/0/weight"),
            at: [
                r#"["100", "0"]"#,
                r#"["90", "10"]"#,
                r#"["50", "50"]"#,
                r#"["0", "100"]"#,
            ],
            ab: Refused("spec.plan.abTest.match"),
            mirror: Refused("spec.plan.mirror"),
            affinity: Refused("spec.sessionAffinity"),
        },
        Row {
            provider: "nginx",
            objects: &["Ingress/podinfo-canary"],
            weights: (
                0,
                "",
                "/metadata/annotations/nginx.ingress.kubernetes.io~1canary-weight",
            ),
            at: [
                r#"[null, "0"]"#,
                r#"[null, "10"]"#,
                r#"[null, "50"]"#,
                r#"[null, "100"]"#,
            ],
            ab: Writes(&[
                (
                    0,
                    "/metadata/annotations/nginx.ingress.kubernetes.io~1canary-by-header",
                    "\"x-canary\"",
                ),
                (
                    0,
                    "/metadata/annotations/nginx.ingress.kubernetes.io~1canary-by-header-value",
                    "\"insider\"",
                ),
                (
                    0,
                    "/metadata/annotations/nginx.ingress.kubernetes.io~1canary-weight",
                    "\"0\"",
                ),
            ]),
            mirror: Refused("spec.plan.mirror"),
            affinity: Refused("spec.sessionAffinity"),
        },
        Row {
            provider: "contour",
            objects: &["HTTPProxy/podinfo"],
            weights: (
                0,
                "/spec/routes/0/services/0/weight",
                "/spec/routes/0/services/1/weight",
            ),
            at: ["[100, null]", "[90, 10]", "[50, 50]", "[null, 100]"],
            ab: Writes(&[
                (0, "/spec/routes/0/conditions/1/header/exact", "\"insider\""),
                (0, "/spec/routes/0/services/1/weight", "100"),
                (0, "/spec/routes/1/services/0/weight", "100"),
            ]),
            mirror: Writes(&[
                (0, "/spec/routes/0/services/1/mirror", "true"),
                (0, "/spec/routes/0/services/1/weight", "100"),
            ]),
            affinity: Refused("spec.sessionAffinity"),
        },
        Row {
            provider: "gloo",
            objects: &[
                "Upstream/test-podinfo-primaryupstream-9898",
                "Upstream/test-podinfo-canaryupstream-9898",
                "RouteTable/podinfo",
            ],
            weights: (
                2,
                "/spec/routes/0/routeAction/multi/destinations/0/weight",
                "/spec/routes/0/routeAction/multi/destinations/1/weight",
            ),
            at: ["[100, null]", "[90, 10]", "[50, 50]", "[null, 100]"],
            ab: Writes(&[
                (
                    2,
                    "/spec/routes/0/matchers/0/headers/0/value",
                    "\"insider\"",
                ),
                (
                    2,
                    "/spec/routes/0/routeAction/multi/destinations/1/weight",
                    "100",
                ),
                (
                    2,
                    "/spec/routes/1/routeAction/multi/destinations/0/weight",
                    "100",
                ),
            ]),
            mirror: Writes(&[(2, "/spec/routes/0/options/shadowing/percentage", "100.0")]),
            affinity: Refused("spec.sessionAffinity"),
        },
        Row {
            provider: "traefik",
            objects: &["TraefikService/podinfo"],
            weights: (
                0,
                "/spec/weighted/services/0/weight",
                "/spec/weighted/services/1/weight",
            ),
            at: ["[100, null]", "[90, 10]", "[50, 50]", "[0, 100]"],
            ab: Refused("spec.plan.abTest.match"),
            mirror: Writes(&[
                (0, "/spec/mirroring/name", "\"podinfo-primary\""),
                (0, "/spec/mirroring/mirrors/0/percent", "100"),
            ]),
            affinity: Refused("spec.sessionAffinity"),
        },
        Row {
            provider: "skipper",
            objects: &["Ingress/podinfo-canary"],
            weights: (0, "", "/metadata/annotations/zalando.org~1backend-weights"),
            at: [
                r#"[null, "{\"podinfo-canary\":0,\"podinfo-primary\":100}"]"#,
                r#"[null, "{\"podinfo-canary\":10,\"podinfo-primary\":90}"]"#,
                r#"[null, "{\"podinfo-canary\":50,\"podinfo-primary\":50}"]"#,
                r#"[null, "{\"podinfo-canary\":100,\"podinfo-primary\":0}"]"#,
            ],
            ab: Writes(&[(
                0,
                "/metadata/annotations/zalando.org~1skipper-predicate",
                r#""Weight(100) && Header(\"x-canary\", \"insider\")""#,
            )]),
            mirror: Refused("spec.plan.mirror"),
            affinity: Refused("spec.sessionAffinity"),
        },
        Row {
            provider: "apisix",
            objects: &["ApisixRoute/podinfo-podinfo-canary"],
            weights: (
                0,
                "/spec/http/0/backends/0/weight",
                "/spec/http/0/backends/1/weight",
            ),
            at: ["[100, 0]", "[90, 10]", "[50, 50]", "[0, 100]"],
            ab: Writes(&[
                (0, "/spec/http/0/match/exprs/0/subject/name", "\"x-canary\""),
                (
                    0,
                    "/spec/http/0/backends/0/serviceName",
                    "\"podinfo-canary\"",
                ),
                (0, "/spec/http/1/backends/0/weight", "100"),
            ]),
            mirror: Refused("spec.plan.mirror"),
            affinity: Refused("spec.sessionAffinity"),
        },
        Row {
            provider: "kuma",
            objects: &["TrafficRoute/podinfo.test"],
            weights: (0, "/spec/conf/split/0/weight", "/spec/conf/split/1/weight"),
            at: ["[100, 0]", "[90, 10]", "[50, 50]", "[0, 100]"],
            ab: Refused("spec.plan.abTest.match"),
            mirror: Refused("spec.plan.mirror"),
            affinity: Refused("spec.sessionAffinity"),
        },
        Row {
            provider: "knative",
            objects: &["Service/podinfo"],
            weights: (0, "/spec/traffic/1/percent", "/spec/traffic/0/percent"),
            at: ["[100, 0]", "[90, 10]", "[50, 50]", "[0, 100]"],
            ab: Refused("spec.plan.abTest.match"),
            mirror: Refused("spec.plan.mirror"),
            affinity: Refused("spec.sessionAffinity"),
        },
        Row {
            provider: "kubernetes",
            objects: &[],
            weights: (0, "", ""),
            at: ["[null, null]", "refused", "refused", "[null, null]"],
            ab: Refused("spec.plan.abTest.match"),
            mirror: Refused("spec.plan.mirror"),
            affinity: Refused("spec.sessionAffinity"),
        },
    ]
}

pub(super) fn names() -> Names {
    Names {
        namespace: "test".into(),
        apex: "podinfo".into(),
        primary: "podinfo-primary".into(),
        canary: "podinfo-canary".into(),
        port: 9898,
    }
}

pub(super) fn owner() -> Value {
    json!({"apiVersion": "weir.dev/v1alpha1", "kind": "Rollout", "name": "podinfo", "uid": "r-1", "controller": true})
}

fn reference(api_version: &str, kind: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: name.into(),
        namespace: None,
    }
}

/// The target settings of a Flagger user of `provider`.
pub(super) fn target(provider: &str) -> KubernetesTarget {
    KubernetesTarget {
        provider: Some(provider.into()),
        target_ref: Some(if provider == "knative" {
            reference("serving.knative.dev/v1", "Service", "podinfo")
        } else {
            reference("apps/v1", "Deployment", "podinfo")
        }),
        ingress_ref: Some(reference("networking.k8s.io/v1", "Ingress", "podinfo")),
        route_ref: Some(reference("apisix.apache.org/v2", "ApisixRoute", "podinfo")),
        upstream_ref: Some(reference("gloo.solo.io/v1", "Upstream", "config-upstream")),
        ..KubernetesTarget::default()
    }
}

/// The user's objects the providers read: an Ingress to `podinfo:80`, an ApisixRoute to it,
/// and an Upstream with connection settings.
pub(super) fn user_objects() -> Inputs {
    Inputs::new()
        .with(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "podinfo", "namespace": "test", "labels": {"app": "podinfo"},
                "annotations": {
                    "kubernetes.io/ingress.class": "nginx",
                    "nginx.ingress.kubernetes.io/canary-weight": "33",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"
                }},
            "spec": {"rules": [{"host": "app.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "podinfo", "port": {"number": 80}}}}
            ]}}]}
        }))
        .with(json!({
            "apiVersion": "apisix.apache.org/v2", "kind": "ApisixRoute",
            "metadata": {"name": "podinfo", "namespace": "test"},
            "spec": {"http": [{
                "name": "method",
                "match": {"hosts": ["app.example.com"], "methods": ["GET"], "paths": ["/*"]},
                "backends": [{"serviceName": "podinfo", "servicePort": 80}],
                "plugins": [{"name": "prometheus", "enable": true, "config": {"prefer_name": true}}]
            }]}
        }))
        .with(json!({
            "apiVersion": "gloo.solo.io/v1", "kind": "Upstream",
            "metadata": {"name": "config-upstream", "namespace": "test"},
            "spec": {
                "connectionConfig": {"maxRequestsPerConnection": 51},
                "loadBalancerConfig": {"roundRobin": {"slowStartConfig": {"slowStartWindow": "60s", "minWeightPercent": 10}}},
                "static": {"hosts": [{"addr": "example.com", "port": 80}]}
            }
        }))
}

pub(super) fn route_at(canary_percent: u32) -> Route {
    Route {
        primary_weight: Weight::from_percent(100 - canary_percent),
        canary_weight: Weight::from_percent(canary_percent),
        mirror_weight: None,
        match_rules: Vec::new(),
        session_affinity: None,
    }
}

pub(super) fn insider() -> Vec<MatchRule> {
    vec![MatchRule {
        headers: [(
            "x-canary".to_string(),
            StringMatch {
                exact: Some("insider".into()),
                ..StringMatch::default()
            },
        )]
        .into(),
        ..MatchRule::default()
    }]
}

pub(super) fn affinity() -> SessionAffinity {
    SessionAffinity {
        cookie_name: "flagger-cookie".into(),
        primary_cookie_name: None,
        max_age: None,
    }
}

pub(super) fn spec(target: &KubernetesTarget, plan: Plan) -> RolloutSpec {
    RolloutSpec {
        target: Target::Kubernetes(Box::new(target.clone())),
        plan,
        analysis: Analysis::default(),
        skip_analysis: false,
        suspend: false,
        revert_on_deletion: false,
        session_affinity: None,
    }
}

pub(super) fn canary_plan() -> Plan {
    Plan::Canary(CanaryPlan {
        step_weight: Some(Weight::from_percent(10)),
        max_weight: Some(Weight::from_percent(50)),
        ..CanaryPlan::default()
    })
}

/// Everything a provider writes for `route`: owned objects, then edits.
fn written(
    row: &Row,
    target: &KubernetesTarget,
    inputs: &Inputs,
    route: &Route,
) -> Result<(Vec<Value>, RouteObjects), String> {
    let provider = Provider::parse(Some(row.provider)).unwrap();
    let names = names();
    let owner = owner();
    let service = KubernetesService::default();
    let ctx = RouteContext {
        target,
        inputs,
        primary_revision: Some("podinfo-00001"),
        ..RouteContext::new(&names, &service, 1, &owner)
    };
    let objects = provider.router().objects(&ctx, route)?;
    let mut all = objects.objects.clone();
    all.extend(objects.edits.iter().cloned());
    Ok((all, objects))
}

fn at(objects: &[Value], index: usize, pointer: &str) -> Value {
    if pointer.is_empty() {
        return Value::Null;
    }
    objects
        .get(index)
        .and_then(|object| object.pointer(pointer))
        .cloned()
        .unwrap_or(Value::Null)
}

fn check(row: &Row, column: &str, expect: Expect, spec: &RolloutSpec, route: &Route) {
    let context = format!("{} / {column}", row.provider);
    let provider = Provider::parse(Some(row.provider)).unwrap();
    let target = spec.target.kubernetes().unwrap();
    let errors = provider.router().validate(spec, target);
    match expect {
        Refused(path) => {
            assert!(
                errors.iter().any(|error| error.path == path
                    && error
                        .message
                        .contains(&format!("provider {}", provider.name()))),
                "{context}: refused at {path} naming the provider, got {errors:?}"
            );
        }
        Writes(checks) => {
            assert_eq!(errors, [], "{context}: accepted");
            let (objects, _) = written(row, target, &user_objects(), route)
                .unwrap_or_else(|error| panic!("{context}: {error}"));
            for (index, pointer, value) in checks {
                let expected: Value = serde_json::from_str(value).unwrap();
                assert_eq!(
                    at(&objects, *index, pointer),
                    expected,
                    "{context}: object {index} at {pointer}: {}",
                    serde_json::to_string_pretty(&objects).unwrap()
                );
            }
        }
    }
}

#[test]
fn every_provider_writes_its_objects_and_weights_at_each_step() {
    let rows = table();
    let all: Vec<&str> = rows.iter().map(|row| row.provider).collect();
    for provider in Provider::all() {
        assert!(
            all.contains(&provider.name())
                || matches!(provider, Provider::GatewayApi(_) | Provider::Smi(_)),
            "{} has a row",
            provider.name()
        );
    }
    for row in &rows {
        let target = target(row.provider);
        let router = Provider::parse(Some(row.provider)).unwrap().router();
        let canary = spec(&target, canary_plan());
        assert_eq!(
            router.validate(&canary, &target),
            [],
            "{}: a canary plan is accepted",
            row.provider
        );
        for (percent, expected) in [0, 10, 50, 100].into_iter().zip(row.at) {
            let context = format!("{} at {percent}%", row.provider);
            match written(row, &target, &user_objects(), &route_at(percent)) {
                Err(error) => assert_eq!(expected, "refused", "{context}: {error}"),
                Ok((objects, written)) => {
                    assert_ne!(expected, "refused", "{context}");
                    let kinds: Vec<String> = objects
                        .iter()
                        .map(|object| {
                            format!(
                                "{}/{}",
                                object["kind"].as_str().unwrap(),
                                object["metadata"]["name"].as_str().unwrap()
                            )
                        })
                        .collect();
                    assert_eq!(kinds, row.objects, "{context}");
                    let (index, primary, canary) = row.weights;
                    let weights =
                        json!([at(&objects, index, primary), at(&objects, index, canary)]);
                    let expected: Value = serde_json::from_str(expected).unwrap();
                    assert_eq!(weights, expected, "{context}");
                    assert_eq!(
                        written.adjusted, None,
                        "{context}: whole percent, nothing rounded"
                    );
                    // What reverting deletes is what was written (edits of the user's objects
                    // are never deleted), and RBAC covers it.
                    let owned: Vec<ObjectRef> = written.objects.iter().map(ObjectRef::of).collect();
                    let names = names();
                    let owner = owner();
                    let service = KubernetesService::default();
                    let ctx = RouteContext {
                        target: &target,
                        ..RouteContext::new(&names, &service, 1, &owner)
                    };
                    assert_eq!(router.owned(&ctx), owned, "{context}: owned");
                    for object in &objects {
                        let group = object["apiVersion"]
                            .as_str()
                            .unwrap()
                            .rsplit_once('/')
                            .map_or("", |(group, _)| group);
                        let resource = plural(object["kind"].as_str().unwrap());
                        assert!(
                            router.access().iter().any(|access| access.group == group
                                && access.resource == resource
                                && access.verbs.contains(&"patch")),
                            "{context}: access to {group}/{resource}"
                        );
                    }
                    for object in &written.objects {
                        if object["metadata"].get("namespace").is_some() {
                            assert_eq!(
                                object["metadata"]["ownerReferences"],
                                json!([owner]),
                                "{context}: owned by the rollout"
                            );
                        }
                    }
                }
            }
        }

        let mut ab = route_at(0);
        ab.match_rules = insider();
        let ab_spec = spec(
            &target,
            Plan::AbTest(AbTestPlan {
                iterations: 3,
                match_rules: insider(),
            }),
        );
        check(row, "A/B", row.ab, &ab_spec, &ab);

        let mut mirror = route_at(0);
        mirror.mirror_weight = Some(Weight::FULL);
        let mirror_spec = spec(
            &target,
            Plan::Mirror(MirrorPlan {
                iterations: 3,
                mirror_weight: None,
            }),
        );
        check(row, "mirror", row.mirror, &mirror_spec, &mirror);

        let mut sticky = route_at(10);
        sticky.session_affinity = Some(affinity());
        let mut sticky_spec = spec(&target, canary_plan());
        sticky_spec.session_affinity = Some(affinity());
        check(row, "session affinity", row.affinity, &sticky_spec, &sticky);
    }
}

#[test]
fn weights_finer_than_a_percent_are_basis_points_when_the_plan_needs_them() {
    let fine = spec(
        &target("gatewayapi:v1"),
        Plan::Canary(CanaryPlan {
            step_weights: Some(vec![
                Weight::from_basis_points(250),
                Weight::from_percent(50),
            ]),
            ..CanaryPlan::default()
        }),
    );
    assert_eq!(resolution(&fine), Resolution::BasisPoints);
    assert_eq!(
        resolution(&spec(&target("istio"), canary_plan())),
        Resolution::Percent
    );

    let route = Route {
        primary_weight: Weight::from_basis_points(9_750),
        canary_weight: Weight::from_basis_points(250),
        ..route_at(0)
    };
    let names = names();
    let owner = owner();
    let service = KubernetesService::default();
    let inputs = user_objects();
    // (provider, pointer of the canary's weight, in percent, in basis points)
    let cases = [
        (
            "gatewayapi:v1",
            0,
            "/spec/rules/0/backendRefs/1/weight",
            json!(3),
            json!(250),
        ),
        ("smi", 0, "/spec/backends/1/weight", json!(3), json!(250)),
        (
            "linkerd",
            0,
            "/spec/backends/0/weight",
            json!("3"),
            json!("250"),
        ),
        (
            "contour",
            0,
            "/spec/routes/0/services/1/weight",
            json!(3),
            json!(250),
        ),
        (
            "gloo",
            2,
            "/spec/routes/0/routeAction/multi/destinations/1/weight",
            json!(3),
            json!(250),
        ),
        (
            "traefik",
            0,
            "/spec/weighted/services/1/weight",
            json!(3),
            json!(250),
        ),
        (
            "apisix",
            0,
            "/spec/http/0/backends/1/weight",
            json!(3),
            json!(250),
        ),
        ("kuma", 0, "/spec/conf/split/1/weight", json!(3), json!(250)),
        (
            "nginx",
            0,
            "/metadata/annotations/nginx.ingress.kubernetes.io~1canary-weight",
            json!("3"),
            json!("250"),
        ),
        // Istio and Knative take whole percent whatever the plan.
        (
            "istio",
            0,
            "/spec/http/0/route/1/weight",
            json!(3),
            json!(3),
        ),
        ("knative", 0, "/spec/traffic/0/percent", json!(3), json!(3)),
    ];
    for (provider, index, pointer, percent, basis_points) in cases {
        let target = target(provider);
        let router = Provider::parse(Some(provider)).unwrap().router();
        for (resolution, expected) in [
            (Resolution::Percent, percent),
            (Resolution::BasisPoints, basis_points),
        ] {
            let ctx = RouteContext {
                target: &target,
                inputs: &inputs,
                resolution,
                primary_revision: Some("podinfo-00001"),
                ..RouteContext::new(&names, &service, 1, &owner)
            };
            let written = router.objects(&ctx, &route).unwrap();
            let mut objects = written.objects.clone();
            objects.extend(written.edits.clone());
            assert_eq!(
                at(&objects, index, pointer),
                expected,
                "{provider} at {resolution:?}"
            );
            let rounded =
                resolution == Resolution::Percent || matches!(provider, "istio" | "knative");
            if rounded {
                let note = written
                    .adjusted
                    .unwrap_or_else(|| panic!("{provider}: a note"));
                assert!(
                    note.contains("canary weight 2.5% applied as 3%"),
                    "{provider}: {note}"
                );
            } else {
                assert_eq!(written.adjusted, None, "{provider} at {resolution:?}");
            }
        }
    }
    // NGINX says its total when it is not 100.
    let nginx = Provider::Nginx.router();
    let target = target("nginx");
    let ctx = RouteContext {
        target: &target,
        inputs: &inputs,
        resolution: Resolution::BasisPoints,
        ..RouteContext::new(&names, &service, 1, &owner)
    };
    let written = nginx.objects(&ctx, &route).unwrap();
    assert_eq!(
        written.objects[0]["metadata"]["annotations"]["nginx.ingress.kubernetes.io/canary-weight-total"],
        "10000"
    );
}
