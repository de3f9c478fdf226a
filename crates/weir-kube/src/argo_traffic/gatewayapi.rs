//! The `argoproj-labs/gatewayAPI` router plugin (v0.15.0), which Argo runs as a separate binary:
//! weir does its weight part in-process. For each route the config names (`httpRoute` or
//! `httpRoutes[].name`, and likewise `grpcRoute(s)`, `tcpRoute(s)`, `tlsRoute(s)`; in
//! `namespace`, default the Rollout's), every backendRef named after the canary Service gets
//! the canary weight and every one named after the stable Service the stable weight, in every
//! rule but the header routes the plugin adds (rules named after a `managedRoutes` entry); other
//! backendRefs (extra backends) are left alone. A route without a backendRef of each Service
//! cannot be split (the plugin's "backendRef was not found"). While the canary has traffic the
//! plugin labels each route `rollouts.argoproj.io/gatewayapi-canary: in-progress` (for GitOps
//! tools to ignore the route; `inProgressLabelKey`/`inProgressLabelValue` rename it,
//! `disableInProgressLabel` turns it off) and removes the label once the stable Service has all
//! the traffic again. Header-based and mirror routes (`setHeaderRoute`, `setMirrorRoute`) are not
//! written here.

use serde_json::{Value, json};

use super::{
    Ctx, GATEWAY_API_PLUGIN, Routed, api, get, not_found, resource, served_version, write_changes,
};

const GROUP: &str = "gateway.networking.k8s.io";
const LABEL_KEY: &str = "rollouts.argoproj.io/gatewayapi-canary";
const LABEL_VALUE: &str = "in-progress";

/// A route kind the plugin edits: its config fields (one, several), kind, plural, the versions
/// to try in order, and the resource name errors use.
struct Kind {
    one: &'static str,
    many: &'static str,
    kind: &'static str,
    plural: &'static str,
    versions: &'static [&'static str],
}

const KINDS: &[Kind] = &[
    Kind {
        one: "httpRoute",
        many: "httpRoutes",
        kind: "HTTPRoute",
        plural: "httproutes",
        versions: &["v1", "v1beta1"],
    },
    Kind {
        one: "grpcRoute",
        many: "grpcRoutes",
        kind: "GRPCRoute",
        plural: "grpcroutes",
        versions: &["v1", "v1alpha2"],
    },
    Kind {
        one: "tcpRoute",
        many: "tcpRoutes",
        kind: "TCPRoute",
        plural: "tcproutes",
        versions: &["v1alpha2", "v1alpha3"],
    },
    Kind {
        one: "tlsRoute",
        many: "tlsRoutes",
        kind: "TLSRoute",
        plural: "tlsroutes",
        versions: &["v1alpha2", "v1alpha3", "v1"],
    },
];

/// Sets the weights in every route the plugin's config names.
pub(super) async fn route(ctx: &Ctx<'_>, config: &Value) -> Routed {
    let field = format!("spec.strategy.canary.trafficRouting.plugins.{GATEWAY_API_PLUGIN}");
    let namespace = config
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|namespace| !namespace.is_empty())
        .unwrap_or(ctx.namespace);
    let label = in_progress_label(config);
    let mut any = false;
    for kind in KINDS {
        let mut names: Vec<(String, String)> = Vec::new();
        if let Some(name) = config.get(kind.one).and_then(Value::as_str) {
            names.push((format!("{field}.{}", kind.one), name.to_owned()));
        }
        for (i, entry) in config
            .get(kind.many)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(name) = entry.get("name").and_then(Value::as_str) {
                names.push((format!("{field}.{}[{i}].name", kind.many), name.to_owned()));
            }
        }
        if names.is_empty() {
            continue;
        }
        any = true;
        let Some(version) = served_version(ctx.client, GROUP, kind.kind, kind.versions).await?
        else {
            return Ok(Err(format!(
                "{field}.{}: Invalid value: \"{}\": the cluster serves no {} ({GROUP})",
                kind.one, names[0].1, kind.kind
            )));
        };
        let routes = api(
            ctx.client,
            namespace,
            &resource(GROUP, version, kind.kind, kind.plural),
        );
        for (path, name) in names {
            let Some(before) = get(&routes, &name).await? else {
                return Ok(Err(not_found(
                    &path,
                    &name,
                    &format!("{}.{GROUP}", kind.plural),
                )));
            };
            let mut after = before.clone();
            if let Err(reason) = set_weights(ctx, &mut after) {
                return Ok(Err(format!(
                    "{path}: Invalid value: \"{name}\": {} \"{name}\": {reason}",
                    kind.kind
                )));
            }
            if let Some((key, value)) = &label {
                set_label(&mut after, key, value, ctx.weights.canary != 0);
            }
            write_changes(&routes, &name, &before, &after).await?;
        }
    }
    if !any {
        return Ok(Err(format!(
            "{field}: Invalid value: \"\": names no httpRoute(s), grpcRoute(s), tcpRoute(s) or \
             tlsRoute(s)"
        )));
    }
    Ok(Ok(()))
}

/// The in-progress label's key and value, unless `disableInProgressLabel`.
fn in_progress_label(config: &Value) -> Option<(String, String)> {
    if config
        .get("disableInProgressLabel")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        return None;
    }
    let text = |field: &str, default: &str| {
        config
            .get(field)
            .and_then(Value::as_str)
            .filter(|text| !text.is_empty())
            .unwrap_or(default)
            .to_owned()
    };
    Some((
        text("inProgressLabelKey", LABEL_KEY),
        text("inProgressLabelValue", LABEL_VALUE),
    ))
}

/// Sets the backendRef weights in `route`'s rules; the reason when a Service has no backendRef.
fn set_weights(ctx: &Ctx<'_>, route: &mut Value) -> Result<(), String> {
    let (mut stable_found, mut canary_found) = (false, false);
    let rules = route
        .pointer_mut("/spec/rules")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten();
    for rule in rules {
        let header_route = rule
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|name| ctx.managed_routes.contains(&name));
        if header_route {
            continue;
        }
        let refs = rule
            .get_mut("backendRefs")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten();
        for backend in refs {
            let name = backend.get("name").and_then(Value::as_str);
            let weight = if name == Some(ctx.stable) {
                stable_found = true;
                ctx.weights.stable
            } else if name == Some(ctx.canary) {
                canary_found = true;
                ctx.weights.canary
            } else {
                continue;
            };
            if let Some(backend) = backend.as_object_mut() {
                backend.insert("weight".into(), json!(weight));
            }
        }
    }
    for (found, service) in [(stable_found, ctx.stable), (canary_found, ctx.canary)] {
        if !found {
            return Err(format!(
                "backendRef was not found: no rule has a backendRef to Service \"{service}\""
            ));
        }
    }
    Ok(())
}

/// Sets (`on`) or removes the in-progress label.
fn set_label(route: &mut Value, key: &str, value: &str, on: bool) {
    let Some(metadata) = route.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if on {
        let labels = metadata.entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(key.to_owned(), json!(value));
        }
    } else if let Some(labels) = metadata.get_mut("labels").and_then(Value::as_object_mut) {
        labels.remove(key);
    }
}
