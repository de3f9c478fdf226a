//! `gloo` (Gloo Edge; Flagger takes any name starting with `gloo`): Upstreams
//! `NS-NAME-primaryupstream-PORT` and `NS-NAME-canaryupstream-PORT` (`gloo.solo.io/v1`) for the
//! primary's and canary's Services, carrying the connection settings of the Upstream named by
//! `spec.target.upstreamRef` when there is one, and a RouteTable `NAME` (`gateway.solo.io/v1`)
//! that the user's VirtualService delegates to.
//!
//! An A/B test is a route of its own, first, whose matchers (alternatives, one per rule: headers,
//! cookies as an expression on the Cookie header, query parameters, the method) send matching
//! requests to the canary; the weighted route after it serves the rest. (Flagger puts the
//! matchers on its only route, so requests that match none find no route in the table.) The path
//! comes from the VirtualService (`inheritablePathMatchers`), so a rule cannot match it.
//! Mirroring is the weighted route's `shadowing`. Session affinity is refused.

use serde_json::{Map, Value, json};
use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesTarget, MatchRule, RolloutSpec};

use super::{
    Access, Condition, InputRef, Names, ObjectRef, RouteContext, RouteObjects, Router,
    apex_metadata, as_regex, check_conditions, cookie_header_regex, metadata,
    refuse_session_affinity, relative_split,
};

/// The `gloo` provider.
pub(super) struct Gloo;

const UPSTREAM_API: &str = "gloo.solo.io/v1";
const ROUTE_TABLE_API: &str = "gateway.solo.io/v1";

/// What Flagger copies from the Upstream named by `upstreamRef`.
const COPIED: [&str; 8] = [
    "sslConfig",
    "circuitBreakers",
    "connectionConfig",
    "loadBalancerConfig",
    "useHttp2",
    "initialStreamWindowSize",
    "initialConnectionWindowSize",
    "httpProxyHostname",
];

/// The Upstream of `service` (`primary` or `canary`).
fn upstream_name(names: &Names, version: &str) -> String {
    format!(
        "{}-{}-{version}upstream-{}",
        names.namespace, names.apex, names.port
    )
}

impl Router for Gloo {
    fn name(&self) -> &'static str {
        "gloo"
    }

    fn validate(&self, spec: &RolloutSpec, _target: &KubernetesTarget) -> Vec<FieldError> {
        let mut errors = check_conditions("gloo", spec, |condition| match condition {
            Condition::Uri(_) => Some(
                "cannot match the path: the RouteTable takes it from your VirtualService \
                 (inheritablePathMatchers)"
                    .into(),
            ),
            Condition::Method(method) if method.exact.is_none() => {
                Some("matches a method exactly only".into())
            }
            _ => None,
        });
        errors.extend(refuse_session_affinity("gloo", spec));
        errors
    }

    fn inputs(&self, target: &KubernetesTarget, names: &Names) -> Vec<InputRef> {
        target
            .upstream_ref
            .iter()
            .map(|reference| InputRef {
                api_version: UPSTREAM_API.into(),
                kind: "Upstream".into(),
                namespace: reference
                    .namespace
                    .clone()
                    .unwrap_or_else(|| names.namespace.clone()),
                name: reference.name.clone(),
                field: "spec.target.upstreamRef",
                required: true,
            })
            .collect()
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        let names = ctx.names;
        let template = match &ctx.target.upstream_ref {
            Some(reference) => Some(super::input(
                ctx,
                "gloo",
                "upstreamRef",
                "Upstream",
                Some(reference),
            )?),
            None => None,
        };
        let mut objects = Vec::new();
        for (version, service) in [("primary", &names.primary), ("canary", &names.canary)] {
            let mut spec = Map::new();
            for field in COPIED {
                if let Some(value) = template.and_then(|template| template["spec"].get(field)) {
                    spec.insert(field.into(), value.clone());
                }
            }
            spec.insert(
                "kube".into(),
                json!({
                    "serviceName": service,
                    "serviceNamespace": names.namespace,
                    "servicePort": names.port,
                }),
            );
            objects.push(json!({
                "apiVersion": UPSTREAM_API,
                "kind": "Upstream",
                "metadata": metadata(&upstream_name(names, version), names, ctx.owner),
                "spec": spec,
            }));
        }
        let (split, adjusted) = relative_split(route, ctx.resolution, "Gloo");
        let upstream = |version: &str| json!({"upstream": {"name": upstream_name(names, version), "namespace": names.namespace}});
        let destinations = |primary: u32, canary: u32| {
            let destination = |version: &str, weight: u32| {
                let mut entry = json!({"destination": upstream(version)});
                // Flagger leaves a weight of 0 out.
                if weight > 0 {
                    entry["weight"] = json!(weight);
                }
                entry
            };
            json!({"multi": {"destinations": [
                destination("primary", primary),
                destination("canary", canary),
            ]}})
        };
        let mut routes = Vec::new();
        if !route.match_rules.is_empty() {
            routes.push(json!({
                "matchers": route.match_rules.iter().map(matcher).collect::<Result<Vec<_>, _>>()?,
                "inheritablePathMatchers": true,
                "routeAction": destinations(0, split.total),
            }));
        }
        let mut weighted = json!({
            "inheritablePathMatchers": true,
            "routeAction": destinations(split.primary, split.canary),
        });
        if let Some(mirror) = route.mirror_weight {
            weighted["options"] = json!({"shadowing": {
                "upstream": upstream("canary")["upstream"],
                "percentage": mirror.percent(),
            }});
        }
        routes.push(weighted);
        objects.push(json!({
            "apiVersion": ROUTE_TABLE_API,
            "kind": "RouteTable",
            "metadata": apex_metadata(&names.apex, ctx),
            "spec": {"routes": routes},
        }));
        Ok(RouteObjects {
            objects,
            edits: Vec::new(),
            adjusted,
        })
    }

    fn owned(&self, ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        let names = ctx.names;
        let object = |api_version: &str, kind: &str, name: String| ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: Some(names.namespace.clone()),
            name,
        };
        vec![
            object(UPSTREAM_API, "Upstream", upstream_name(names, "primary")),
            object(UPSTREAM_API, "Upstream", upstream_name(names, "canary")),
            object(ROUTE_TABLE_API, "RouteTable", names.apex.clone()),
        ]
    }

    fn access(&self) -> Vec<Access> {
        vec![
            Access::owned("gateway.solo.io", "routetables"),
            Access::owned("gloo.solo.io", "upstreams"),
        ]
    }
}

/// An A/B rule as a Gloo matcher: headers, query parameters, the method.
fn matcher(rule: &MatchRule) -> Result<Value, String> {
    let mut headers = Vec::new();
    let mut query = Vec::new();
    let mut matcher = Map::new();
    let entry = |name: &str, condition: &weir_core::model::StringMatch| match &condition.exact {
        Some(exact) => json!({"name": name, "value": exact}),
        None => json!({"name": name, "value": as_regex(condition), "regex": true}),
    };
    for (_, condition) in Condition::of(rule) {
        match condition {
            Condition::Header(name, condition) => headers.push(entry(name, condition)),
            Condition::Cookie(name, condition) => headers.push(json!({
                "name": "cookie",
                "value": cookie_header_regex(name, condition),
                "regex": true,
            })),
            Condition::Query(name, condition) => query.push(entry(name, condition)),
            Condition::Method(method) => match &method.exact {
                Some(exact) => {
                    matcher.insert("methods".into(), json!([exact]));
                }
                None => return Err("provider gloo matches a method exactly only".into()),
            },
            Condition::Uri(_) => {
                return Err("provider gloo cannot match the path of an A/B rule".into());
            }
        }
    }
    if !headers.is_empty() {
        matcher.insert("headers".into(), Value::Array(headers));
    }
    if !query.is_empty() {
        matcher.insert("queryParameters".into(), Value::Array(query));
    }
    Ok(Value::Object(matcher))
}
