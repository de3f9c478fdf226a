//! `istio`: a VirtualService `NAME` and DestinationRules `NAME-primary`, `NAME-canary`
//! (`networking.istio.io/v1`). Istio matches anything an A/B rule says, mirrors, and carries
//! session affinity; its weights are integers summing to 100.

use serde_json::{Map, Value, json};
use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesService, KubernetesTarget, MatchRule, RolloutSpec, StringMatch};

use super::session::SessionCookies;
use super::{
    Access, Names, ObjectRef, RouteContext, RouteObjects, Router, array_items, cookie_header_regex,
    metadata, percent_split, regex_escape, session_cookies,
};

/// The `istio` provider.
pub(super) struct Istio;

const API_VERSION: &str = "networking.istio.io/v1";

impl Router for Istio {
    fn name(&self) -> &'static str {
        "istio"
    }

    fn validate(&self, spec: &RolloutSpec, _target: &KubernetesTarget) -> Vec<FieldError> {
        super::gatewayapi::one_cookie_per_rule("istio", spec)
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        let cookies = route
            .session_affinity
            .as_ref()
            .map(|affinity| session_cookies(affinity, route, ctx.run, ctx.owner));
        Ok(istio(
            ctx.names,
            ctx.service,
            route,
            cookies.as_ref(),
            ctx.owner,
        ))
    }

    fn owned(&self, ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        let names = ctx.names;
        [
            ("VirtualService", &names.apex),
            ("DestinationRule", &names.primary),
            ("DestinationRule", &names.canary),
        ]
        .into_iter()
        .map(|(kind, name)| ObjectRef {
            api_version: API_VERSION.into(),
            kind: kind.into(),
            namespace: Some(names.namespace.clone()),
            name: name.clone(),
        })
        .collect()
    }

    fn access(&self) -> Vec<Access> {
        vec![
            Access::owned("networking.istio.io", "virtualservices"),
            Access::owned("networking.istio.io", "destinationrules"),
        ]
    }
}

fn istio(
    names: &Names,
    service: &KubernetesService,
    route: &Route,
    cookies: Option<&SessionCookies>,
    owner: &Value,
) -> RouteObjects {
    // Istio's weights are integers that sum to 100.
    let (split, adjusted) = percent_split(route, "Istio");
    let canary = i64::from(split.canary);
    let primary = i64::from(split.primary);
    let mut hosts = vec![Value::String(names.apex.clone())];
    hosts.extend(service.hosts.iter().flat_map(array_items));
    let decorate = |mut http: Map<String, Value>| {
        for (field, value) in [
            ("retries", &service.retries),
            ("timeout", &service.timeout.clone().map(Value::String)),
            ("headers", &service.headers),
            ("corsPolicy", &service.cors_policy),
            ("rewrite", &service.rewrite),
        ] {
            if let Some(value) = value {
                http.insert(field.into(), value.clone());
            }
        }
        Value::Object(http)
    };
    let destination = |host: &str, weight: i64| json!({"destination": {"host": host, "port": {"number": names.port}}, "weight": weight});
    // A destination whose responses set a cookie (added: the application's own stay).
    let setting_cookie = |host: &str, weight: i64, cookie: Option<String>| {
        let mut destination = destination(host, weight);
        if let Some(cookie) = cookie {
            destination["headers"] = json!({"response": {"add": {"Set-Cookie": cookie}}});
        }
        destination
    };
    let mut http = Vec::new();
    for (cookie, to_canary) in cookies.map(SessionCookies::routes).unwrap_or_default() {
        let mut sticky = Map::new();
        sticky.insert(
            "match".into(),
            json!([{"headers": {"cookie": {"regex": cookie.request_regex()}}}]),
        );
        let host = if to_canary {
            &names.canary
        } else {
            &names.primary
        };
        sticky.insert("route".into(), json!([destination(host, 100)]));
        http.push(decorate(sticky));
    }
    if !route.match_rules.is_empty() {
        let mut ab = Map::new();
        ab.insert(
            "match".into(),
            Value::Array(route.match_rules.iter().map(istio_match).collect()),
        );
        ab.insert("route".into(), json!([destination(&names.canary, 100)]));
        http.push(decorate(ab));
    }
    let mut default = Map::new();
    default.insert(
        "route".into(),
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
            "mirror".into(),
            json!({"host": names.canary, "port": {"number": names.port}}),
        );
        default.insert(
            "mirrorPercentage".into(),
            json!({"value": mirror.percent()}),
        );
    }
    http.push(decorate(default));
    let mut spec = Map::new();
    spec.insert("hosts".into(), Value::Array(hosts));
    if let Some(gateways) = &service.gateways {
        spec.insert("gateways".into(), gateways.clone());
    }
    spec.insert("http".into(), Value::Array(http));
    let virtual_service = json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": metadata(&names.apex, names, owner),
        "spec": spec,
    });
    let mut objects = vec![virtual_service];
    for host in [&names.primary, &names.canary] {
        let mut spec = Map::new();
        spec.insert("host".into(), Value::String(host.clone()));
        if let Some(policy) = &service.traffic_policy {
            spec.insert("trafficPolicy".into(), policy.clone());
        }
        objects.push(json!({
            "apiVersion": "networking.istio.io/v1",
            "kind": "DestinationRule",
            "metadata": metadata(host, names, owner),
            "spec": spec,
        }));
    }
    RouteObjects {
        objects,
        edits: Vec::new(),
        adjusted,
    }
}

/// An Istio HTTPMatchRequest: headers, cookies (as a regex on the Cookie header), query
/// parameters, uri and method.
fn istio_match(rule: &MatchRule) -> Value {
    let mut request = Map::new();
    let mut headers: Map<String, Value> = rule
        .headers
        .iter()
        .map(|(name, condition)| (name.clone(), istio_string(condition)))
        .collect();
    for (name, condition) in &rule.cookies {
        headers.insert(
            "cookie".into(),
            json!({"regex": cookie_header_regex(name, condition)}),
        );
    }
    if !headers.is_empty() {
        request.insert("headers".into(), Value::Object(headers));
    }
    if !rule.query_params.is_empty() {
        request.insert(
            "queryParams".into(),
            Value::Object(
                rule.query_params
                    .iter()
                    .map(|(name, condition)| (name.clone(), istio_string(condition)))
                    .collect(),
            ),
        );
    }
    if let Some(uri) = &rule.uri {
        request.insert("uri".into(), istio_string(uri));
    }
    if let Some(method) = &rule.method {
        request.insert("method".into(), istio_string(method));
    }
    Value::Object(request)
}

/// Istio's StringMatch has exact, prefix and regex: a suffix becomes a regex.
fn istio_string(condition: &StringMatch) -> Value {
    if let Some(exact) = &condition.exact {
        json!({"exact": exact})
    } else if let Some(prefix) = &condition.prefix {
        json!({"prefix": prefix})
    } else if let Some(suffix) = &condition.suffix {
        json!({"regex": format!(".*{}$", regex_escape(suffix))})
    } else {
        json!({"regex": condition.regex.clone().unwrap_or_default()})
    }
}
