//! `apisix`: an ApisixRoute `ROUTE-NAME-canary` (`apisix.apache.org/v2`) made from the user's
//! ApisixRoute named by `spec.target.routeRef` (read, never written): its http entry whose one
//! backend is the apex Service `NAME`, at priority 10000 so that it wins over the user's, with
//! the backends `NAME-primary` and `NAME-canary` weighted. Labels, annotations and the ingress
//! class are the user's route's.
//!
//! An A/B rule (Flagger has none on apisix) is an http entry of its own at priority 10001 with
//! the rule's conditions added to the entry's `match.exprs` (headers, cookies, query parameters
//! and the path: `Equal`, else `RegexMatch`; the method in `match.methods`), sending matching
//! requests to the canary. No mirroring, no session affinity.

use serde_json::{Map, Value, json};
use weir_core::FieldError;
use weir_core::machine::Route;
use weir_core::model::{KubernetesTarget, MatchRule, RolloutSpec, StringMatch};

use super::nginx::copied_annotations;
use super::{
    Access, Condition, InputRef, Names, ObjectRef, RouteContext, RouteObjects, Router, as_regex,
    check_conditions, input, refuse_mirroring, refuse_session_affinity, relative_split,
    require_reference,
};

/// The `apisix` provider.
pub(super) struct Apisix;

const API_VERSION: &str = "apisix.apache.org/v2";

/// The canary route's name.
fn canary_name(route_ref: &str, names: &Names) -> String {
    format!("{route_ref}-{}-canary", names.apex)
}

impl Router for Apisix {
    fn name(&self) -> &'static str {
        "apisix"
    }

    fn validate(&self, spec: &RolloutSpec, target: &KubernetesTarget) -> Vec<FieldError> {
        let mut errors = require_reference(
            "apisix",
            target,
            "routeRef",
            "ApisixRoute",
            "{apiVersion: apisix.apache.org/v2, kind: ApisixRoute, name: NAME}",
        );
        errors.extend(refuse_mirroring("apisix", spec));
        errors.extend(refuse_session_affinity("apisix", spec));
        errors.extend(check_conditions(
            "apisix",
            spec,
            |condition| match condition {
                Condition::Method(method) if method.exact.is_none() => {
                    Some("matches a method exactly only (match.methods)".into())
                }
                _ => None,
            },
        ));
        errors
    }

    fn inputs(&self, target: &KubernetesTarget, names: &Names) -> Vec<InputRef> {
        target
            .route_ref
            .iter()
            .map(|reference| InputRef {
                api_version: API_VERSION.into(),
                kind: "ApisixRoute".into(),
                namespace: names.namespace.clone(),
                name: reference.name.clone(),
                field: "spec.target.routeRef",
                required: true,
            })
            .collect()
    }

    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String> {
        let user = input(
            ctx,
            "apisix",
            "routeRef",
            "ApisixRoute",
            ctx.target.route_ref.as_ref(),
        )?;
        let names = ctx.names;
        let user_name = user["metadata"]["name"].as_str().unwrap_or_default();
        let serves_apex = |entry: &&Value| {
            entry["backends"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|backend| backend["serviceName"].as_str() == Some(names.apex.as_str()))
        };
        let Some(entry) = user["spec"]["http"]
            .as_array()
            .into_iter()
            .flatten()
            .find(serves_apex)
        else {
            return Err(format!(
                "provider apisix: the ApisixRoute {}/{user_name} named by spec.target.routeRef \
                 has no http entry with the backend {}: one must route to the apex Service",
                names.namespace, names.apex
            ));
        };
        let backends = entry["backends"].as_array().cloned().unwrap_or_default();
        let [backend] = backends.as_slice() else {
            return Err(format!(
                "provider apisix: the http entry {} of the ApisixRoute {}/{user_name} has {} \
                 backends: it must have exactly one, the apex Service {}",
                entry["name"],
                names.namespace,
                backends.len(),
                names.apex
            ));
        };
        let to = |service: &str, weight: u32| {
            let mut copy = backend.clone();
            copy["serviceName"] = json!(service);
            copy["weight"] = json!(weight);
            copy
        };
        let (split, adjusted) = relative_split(route, ctx.resolution, "APISIX");
        let mut http = Vec::new();
        for (index, rule) in route.match_rules.iter().enumerate() {
            let mut matching = entry.clone();
            let name = entry["name"].as_str().unwrap_or("route");
            matching["name"] = json!(format!("{name}-match-{index}"));
            matching["priority"] = json!(10_001);
            matching["backends"] = json!([to(&names.canary, split.total)]);
            add_conditions(&mut matching, rule)?;
            http.push(matching);
        }
        let mut weighted = entry.clone();
        weighted["priority"] = json!(10_000);
        weighted["backends"] = json!([
            to(&names.primary, split.primary),
            to(&names.canary, split.canary)
        ]);
        http.push(weighted);
        let name = canary_name(user_name, names);
        let mut metadata = super::metadata(&name, names, ctx.owner);
        if let Some(labels) = user["metadata"]["labels"].as_object() {
            metadata["labels"] = Value::Object(labels.clone());
        }
        let annotations = copied_annotations(user, |_| false);
        metadata["annotations"] = Value::Object(annotations);
        let mut spec = json!({"http": http});
        if let Some(class) = user["spec"].get("ingressClassName") {
            spec["ingressClassName"] = class.clone();
        }
        Ok(RouteObjects {
            objects: vec![json!({
                "apiVersion": API_VERSION,
                "kind": "ApisixRoute",
                "metadata": metadata,
                "spec": spec,
            })],
            edits: Vec::new(),
            adjusted,
        })
    }

    fn owned(&self, ctx: &RouteContext<'_>) -> Vec<ObjectRef> {
        ctx.target
            .route_ref
            .iter()
            .map(|reference| ObjectRef {
                api_version: API_VERSION.into(),
                kind: "ApisixRoute".into(),
                namespace: Some(ctx.names.namespace.clone()),
                name: canary_name(&reference.name, ctx.names),
            })
            .collect()
    }

    fn access(&self) -> Vec<Access> {
        vec![Access::owned("apisix.apache.org", "apisixroutes")]
    }
}

/// Adds a rule's conditions to an http entry's `match`: expressions for headers, cookies, query
/// parameters and the path, the method in `methods`.
fn add_conditions(entry: &mut Value, rule: &MatchRule) -> Result<(), String> {
    let matched = entry
        .as_object_mut()
        .map(|entry| {
            entry
                .entry("match")
                .or_insert_with(|| json!({"paths": ["/*"]}))
        })
        .ok_or("provider apisix: an http entry is not an object")?;
    let mut exprs = matched["exprs"].as_array().cloned().unwrap_or_default();
    let expr = |scope: &str, name: Option<&str>, condition: &StringMatch| {
        let mut subject = Map::new();
        subject.insert("scope".into(), json!(scope));
        if let Some(name) = name {
            subject.insert("name".into(), json!(name));
        }
        match &condition.exact {
            Some(exact) => json!({"subject": subject, "op": "Equal", "value": exact}),
            None => json!({"subject": subject, "op": "RegexMatch", "value": as_regex(condition)}),
        }
    };
    for (_, condition) in Condition::of(rule) {
        match condition {
            Condition::Header(name, condition) => exprs.push(expr("Header", Some(name), condition)),
            Condition::Cookie(name, condition) => exprs.push(expr("Cookie", Some(name), condition)),
            Condition::Query(name, condition) => exprs.push(expr("Query", Some(name), condition)),
            Condition::Uri(condition) => exprs.push(expr("Path", None, condition)),
            Condition::Method(method) => {
                let Some(method) = &method.exact else {
                    return Err("provider apisix matches a method exactly only".into());
                };
                let methods = matched["methods"].as_array();
                if methods.is_some_and(|methods| {
                    !methods.is_empty() && !methods.iter().any(|known| known == method.as_str())
                }) {
                    return Err(format!(
                        "provider apisix: the A/B rule's method {method} is not among the methods \
                         of your ApisixRoute's http entry, so no request could match"
                    ));
                }
                matched["methods"] = json!([method]);
            }
        }
    }
    matched["exprs"] = Value::Array(exprs);
    Ok(())
}
