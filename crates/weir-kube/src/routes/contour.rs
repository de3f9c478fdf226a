//! `contour`: an HTTPProxy `NAME` (`projectcontour.io/v1`) with no virtual host, which the
//! user's root HTTPProxy includes. Its routes start at `service.match[0].uri.prefix` (else `/`);
//! each Service sets the `l5d-dst-override` header, as Flagger's does; `service.timeout` and
//! `service.retries` become the routes' timeout and retry policies.
//!
//! An A/B rule is a route of its own, first, sending every matching request to the canary:
//! headers (exact or regular expression; a prefix or suffix as an expression, where Flagger
//! writes a looser `contains`), cookies (as an expression on the Cookie header), query
//! parameters and the path; not the method. Mirroring is a canary Service with `mirror: true`
//! whose weight is the mirrored percentage. Contour cannot add a `Set-Cookie` without replacing
//! the application's, so session affinity is refused.

use serde_json::{Map, Value, json};
use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesTarget, MatchRule, RolloutSpec, StringMatch};

use super::{
    Access, Condition, ObjectRef, RouteContext, RouteObjects, Router, apex_metadata, as_regex,
    check_conditions, cookie_header_regex, refuse_session_affinity, relative_split,
};

/// The `contour` provider.
pub(super) struct Contour;

const API_VERSION: &str = "projectcontour.io/v1";

impl Router for Contour {
    fn name(&self) -> &'static str {
        "contour"
    }

    fn validate(&self, spec: &RolloutSpec, _target: &KubernetesTarget) -> Vec<FieldError> {
        let mut errors = check_conditions("contour", spec, |condition| match condition {
            Condition::Method(_) => Some(
                "cannot match the method (an HTTPProxy route matches the path, headers and \
                 query parameters)"
                    .into(),
            ),
            _ => None,
        });
        errors.extend(refuse_session_affinity("contour", spec));
        errors
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        let names = ctx.names;
        let (split, mut adjusted) = relative_split(route, ctx.resolution, "Contour");
        let prefix = ctx
            .service
            .match_rules
            .as_ref()
            .and_then(|rules| rules.pointer("/0/uri/prefix"))
            .and_then(Value::as_str)
            .unwrap_or("/")
            .to_string();
        let service = |name: &str, weight: u32| {
            let mut entry = json!({
                "name": name,
                "port": names.port,
                "requestHeadersPolicy": {"set": [{
                    "name": "l5d-dst-override",
                    "value": format!("{name}.{}.svc.cluster.local:{}", names.namespace, names.port),
                }]},
            });
            // Flagger leaves a weight of 0 out; Contour reads it as 0.
            if weight > 0 {
                entry["weight"] = json!(weight);
            }
            entry
        };
        let policies = policies(ctx)?;
        let route_with = |conditions: Vec<Value>, services: Vec<Value>| {
            let mut entry = Map::new();
            entry.insert("conditions".into(), Value::Array(conditions));
            for (key, value) in &policies {
                entry.insert(key.clone(), value.clone());
            }
            entry.insert("services".into(), Value::Array(services));
            Value::Object(entry)
        };
        let mut routes = Vec::new();
        for rule in &route.match_rules {
            routes.push(route_with(
                conditions(rule, &prefix)?,
                vec![
                    service(&names.primary, 0),
                    service(&names.canary, split.total),
                ],
            ));
        }
        let mut services = vec![service(&names.primary, split.primary)];
        match route.mirror_weight {
            Some(mirror) if split.canary == 0 => {
                // Contour reads a mirror weight of 0 as 100%: at least 1.
                let percent = ((mirror.basis_points() + 50) / 100).clamp(1, 100);
                if !mirror.basis_points().is_multiple_of(100) {
                    adjusted = Some(format!(
                        "Contour mirrors whole percentages: mirror weight {mirror} applied as {percent}%"
                    ));
                }
                let mut mirrored = service(&names.canary, 0);
                mirrored["mirror"] = json!(true);
                mirrored["weight"] = json!(percent);
                services.push(mirrored);
            }
            Some(_) => {
                return Err("provider contour mirrors to a canary without traffic only".to_string());
            }
            None => services.push(service(&names.canary, split.canary)),
        }
        routes.push(route_with(vec![json!({"prefix": prefix})], services));
        Ok(RouteObjects {
            objects: vec![json!({
                "apiVersion": API_VERSION,
                "kind": "HTTPProxy",
                "metadata": apex_metadata(&names.apex, ctx),
                "spec": {"routes": routes},
            })],
            edits: Vec::new(),
            adjusted,
        })
    }

    fn owned(&self, ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        vec![ObjectRef {
            api_version: API_VERSION.into(),
            kind: "HTTPProxy".into(),
            namespace: Some(ctx.names.namespace.clone()),
            name: ctx.names.apex.clone(),
        }]
    }

    fn access(&self) -> Vec<Access> {
        vec![Access::owned("projectcontour.io", "httpproxies")]
    }
}

/// The routes' timeout and retry policies, from `service.timeout` and `service.retries`
/// (Istio's shape: `attempts`, `perTryTimeout`, `retryOn` as a comma-separated list).
fn policies(ctx: &RouteContext<'_>) -> Result<Vec<(String, Value)>, String> {
    let mut policies = Vec::new();
    if let Some(timeout) = &ctx.service.timeout {
        policies.push((
            "timeoutPolicy".into(),
            json!({"response": timeout, "idle": "5m"}),
        ));
    }
    if let Some(retries) = &ctx.service.retries {
        let mut policy = Map::new();
        if let Some(attempts) = retries.get("attempts") {
            policy.insert("count".into(), attempts.clone());
        }
        if let Some(timeout) = retries.get("perTryTimeout") {
            policy.insert("perTryTimeout".into(), timeout.clone());
        }
        if let Some(retry_on) = retries.get("retryOn") {
            let Some(retry_on) = retry_on.as_str() else {
                return Err(format!(
                    "provider contour: spec.target.service.retries.retryOn is a comma-separated \
                     list of conditions, not {retry_on}"
                ));
            };
            policy.insert(
                "retryOn".into(),
                retry_on
                    .split(',')
                    .map(|condition| json!(condition.trim()))
                    .collect(),
            );
        }
        policies.push(("retryPolicy".into(), Value::Object(policy)));
    }
    Ok(policies)
}

/// An A/B rule as HTTPProxy conditions: the path (the rule's, else the routes' prefix), then
/// one condition per header, cookie and query parameter.
fn conditions(rule: &MatchRule, prefix: &str) -> Result<Vec<Value>, String> {
    let path = match &rule.uri {
        Some(StringMatch {
            exact: Some(exact), ..
        }) => json!({"exact": exact}),
        Some(StringMatch {
            prefix: Some(prefix),
            ..
        }) => json!({"prefix": prefix}),
        Some(uri) => json!({"regex": as_regex(uri)}),
        None => json!({"prefix": prefix}),
    };
    let mut conditions = vec![path];
    for (_, condition) in Condition::of(rule) {
        conditions.push(match condition {
            Condition::Header(name, condition) => json!({"header": header(name, condition)}),
            Condition::Cookie(name, condition) => json!({"header": {
                "name": "cookie",
                "regex": cookie_header_regex(name, condition),
            }}),
            Condition::Query(name, condition) => {
                let mut query = json!({"name": name});
                for (key, value) in [
                    ("exact", &condition.exact),
                    ("prefix", &condition.prefix),
                    ("suffix", &condition.suffix),
                    ("regex", &condition.regex),
                ] {
                    if let Some(value) = value {
                        query[key] = json!(value);
                    }
                }
                json!({"queryParameter": query})
            }
            Condition::Uri(_) => continue,
            Condition::Method(_) => {
                return Err("provider contour cannot match the method".to_string());
            }
        });
    }
    Ok(conditions)
}

/// A header condition: exact, or a regular expression.
fn header(name: &str, condition: &StringMatch) -> Value {
    match &condition.exact {
        Some(exact) => json!({"name": name, "exact": exact}),
        None => json!({"name": name, "regex": as_regex(condition)}),
    }
}
