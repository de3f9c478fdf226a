//! `gatewayapi:v1`, `gatewayapi:v1beta1`: an HTTPRoute `NAME` with `parentRefs` from
//! `service.gatewayRefs` and `hostnames` from `service.hosts`. Relative weights: whole percent
//! as Flagger writes them, basis points when the plan needs them.

use serde_json::{Map, Value, json};
use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesService, KubernetesTarget, MatchRule, RolloutSpec, StringMatch};

use super::session::SessionCookies;
use super::{
    Access, Condition, Names, ObjectRef, Resolution, RouteContext, RouteObjects, Router, as_regex,
    check_conditions, cookie_header_regex, metadata, relative_split, session_cookies,
};

/// The Gateway API provider at one API version.
pub(super) struct GatewayApi {
    name: &'static str,
    api_version: &'static str,
}

/// `gatewayapi:v1`.
pub(super) static GATEWAY_API_V1: GatewayApi = GatewayApi {
    name: "gatewayapi:v1",
    api_version: "gateway.networking.k8s.io/v1",
};

/// `gatewayapi:v1beta1`.
pub(super) static GATEWAY_API_V1BETA1: GatewayApi = GatewayApi {
    name: "gatewayapi:v1beta1",
    api_version: "gateway.networking.k8s.io/v1beta1",
};

impl Router for GatewayApi {
    fn name(&self) -> &'static str {
        self.name
    }

    fn validate(&self, spec: &RolloutSpec, _target: &KubernetesTarget) -> Vec<FieldError> {
        let mut errors = check_conditions(self.name, spec, |condition| match condition {
            Condition::Method(method) if method.exact.is_none() => Some(
                "matches a method exactly only (an HTTPRouteMatch's method is one verb)".into(),
            ),
            _ => None,
        });
        errors.extend(one_cookie_per_rule(self.name, spec));
        errors
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        let cookies = route
            .session_affinity
            .as_ref()
            .map(|affinity| session_cookies(affinity, route, ctx.run, ctx.owner));
        let (object, adjusted) = http_route(
            self.api_version,
            ctx.names,
            ctx.service,
            route,
            ctx.resolution,
            cookies.as_ref(),
            ctx.owner,
        );
        Ok(RouteObjects {
            objects: vec![object],
            edits: Vec::new(),
            adjusted,
        })
    }

    fn owned(&self, ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        vec![ObjectRef {
            api_version: self.api_version.into(),
            kind: "HTTPRoute".into(),
            namespace: Some(ctx.names.namespace.clone()),
            name: ctx.names.apex.clone(),
        }]
    }

    fn access(&self) -> Vec<Access> {
        vec![Access::owned("gateway.networking.k8s.io", "httproutes")]
    }
}

/// A route matches one header of a name (Istio: one regular expression per header; the Gateway
/// API: the first entry of a name only), so a rule can test one cookie: the `cookie` header or
/// one entry of `cookies`.
pub(super) fn one_cookie_per_rule(provider: &str, spec: &RolloutSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (index, rule) in super::ab_rules(spec).unwrap_or_default().iter().enumerate() {
        let cookies = rule.cookies.len()
            + rule
                .headers
                .keys()
                .filter(|name| name.eq_ignore_ascii_case("cookie"))
                .count();
        if cookies > 1 {
            errors.push(FieldError::new(
                format!("spec.plan.abTest.match[{index}].cookies"),
                format!(
                    "provider {provider} tests one cookie per rule (one expression on the Cookie \
                     header): write one rule per cookie (rules are alternatives)"
                ),
            ));
        }
    }
    errors
}

fn http_route(
    api_version: &str,
    names: &Names,
    service: &KubernetesService,
    route: &Route,
    resolution: Resolution,
    cookies: Option<&SessionCookies>,
    owner: &Value,
) -> (Value, Option<String>) {
    // Gateway API weights are relative: whole percent, or basis points for weir's 0.01%.
    let (split, adjusted) = relative_split(route, resolution, "Gateway API");
    let (primary, canary) = (split.primary, split.canary);
    let backend =
        |name: &str, weight: u32| json!({"name": name, "port": names.port, "weight": weight});
    // A backend whose responses set a cookie (added: the application's own stay).
    let setting_cookie = |name: &str, weight: u32, cookie: Option<String>| {
        let mut backend = backend(name, weight);
        if let Some(cookie) = cookie {
            backend["filters"] = json!([{"type": "ResponseHeaderModifier",
                "responseHeaderModifier": {"add": [{"name": "Set-Cookie", "value": cookie}]}}]);
        }
        backend
    };
    let mut rules = Vec::new();
    for (cookie, to_canary) in cookies.map(SessionCookies::routes).unwrap_or_default() {
        let name = if to_canary {
            &names.canary
        } else {
            &names.primary
        };
        rules.push(json!({
            "matches": [{"headers": [{"type": "RegularExpression", "name": "cookie", "value": cookie.request_regex()}]}],
            "backendRefs": [backend(name, 1)],
        }));
    }
    if !route.match_rules.is_empty() {
        rules.push(json!({
            "matches": route.match_rules.iter().map(gateway_match).collect::<Vec<_>>(),
            "backendRefs": [backend(&names.canary, 1)],
        }));
    }
    let mut default = Map::new();
    default.insert(
        "backendRefs".into(),
        json!([
            setting_cookie(
                &names.primary,
                primary,
                cookies.and_then(SessionCookies::on_primary)
            ),
            setting_cookie(
                &names.canary,
                canary,
                cookies.and_then(SessionCookies::on_canary)
            )
        ]),
    );
    if let Some(mirror) = route.mirror_weight {
        default.insert(
            "filters".into(),
            json!([{"type": "RequestMirror", "requestMirror": {
                "backendRef": {"name": names.canary, "port": names.port},
                "fraction": {"numerator": mirror.basis_points(), "denominator": 10_000}
            }}]),
        );
    }
    rules.push(Value::Object(default));
    let mut spec = Map::new();
    if let Some(parents) = &service.gateway_refs {
        spec.insert("parentRefs".into(), parents.clone());
    }
    if let Some(hosts) = &service.hosts {
        spec.insert("hostnames".into(), hosts.clone());
    }
    spec.insert("rules".into(), Value::Array(rules));
    let object = json!({
        "apiVersion": api_version,
        "kind": "HTTPRoute",
        "metadata": metadata(&names.apex, names, owner),
        "spec": spec,
    });
    (object, adjusted)
}

/// A Gateway API HTTPRouteMatch: headers and query parameters (exact or regular expression;
/// prefixes and suffixes as expressions), the path, the method.
fn gateway_match(rule: &MatchRule) -> Value {
    let condition = |name: &str, value: &StringMatch| match &value.exact {
        Some(exact) => json!({"type": "Exact", "name": name, "value": exact}),
        None => json!({"type": "RegularExpression", "name": name, "value": as_regex(value)}),
    };
    let mut matched = Map::new();
    let mut headers: Vec<Value> = rule
        .headers
        .iter()
        .map(|(name, value)| condition(name, value))
        .collect();
    for (name, value) in &rule.cookies {
        headers.push(json!({"type": "RegularExpression", "name": "cookie",
            "value": cookie_header_regex(name, value)}));
    }
    if !headers.is_empty() {
        matched.insert("headers".into(), Value::Array(headers));
    }
    if !rule.query_params.is_empty() {
        matched.insert(
            "queryParams".into(),
            Value::Array(
                rule.query_params
                    .iter()
                    .map(|(name, value)| condition(name, value))
                    .collect(),
            ),
        );
    }
    if let Some(uri) = &rule.uri {
        matched.insert(
            "path".into(),
            match (&uri.exact, &uri.prefix) {
                (Some(exact), _) => json!({"type": "Exact", "value": exact}),
                (None, Some(prefix)) => json!({"type": "PathPrefix", "value": prefix}),
                _ => json!({"type": "RegularExpression", "value": as_regex(uri)}),
            },
        );
    }
    if let Some(method) = rule.method.as_ref().and_then(|method| method.exact.clone()) {
        matched.insert("method".into(), Value::String(method));
    }
    Value::Object(matched)
}
