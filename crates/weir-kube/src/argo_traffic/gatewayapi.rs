//! The `argoproj-labs/gatewayAPI` router plugin (v0.15.0), which Argo runs as a separate binary:
//! weir does its weight part in-process. For each route the config names (`httpRoute` or
//! `httpRoutes[].name`, and likewise `grpcRoute(s)`, `tcpRoute(s)`, `tlsRoute(s)`; in
//! `namespace`, default the Rollout's), every backendRef named after the canary Service gets
//! the canary weight and every one named after the stable Service the stable weight, in every
//! rule but the header routes the plugin adds (rules named after a `managedRoutes` entry, or
//! that name with `-1`, `-2`...); other backendRefs (extra backends) are left alone. A route without a backendRef of each Service
//! cannot be split (the plugin's "backendRef was not found"). While the canary has traffic the
//! plugin labels each route `rollouts.argoproj.io/gatewayapi-canary: in-progress` (for GitOps
//! tools to ignore the route; `inProgressLabelKey`/`inProgressLabelValue` rename it,
//! `disableInProgressLabel` turns it off) and removes the label once the stable Service has all
//! the traffic again.
//!
//! Header routes (`setHeaderRoute`, [`header_route`]): in each HTTP or gRPC route that takes them
//! (`httpRoute`/`grpcRoute`, or the `httpRoutes[]`/`grpcRoutes[]` entries with
//! `useHeaderRoutes: true`), the plugin adds, for every rule that splits between the stable and
//! the canary Service (a "source" rule), a rule named after the managed route (the first;
//! the others `<name>-1`, `<name>-2`... since Gateway API wants rule names unique) that sends
//! only to the canary Service: the source rule's backendRef to it (weight 1, Gateway API's
//! default, which later weights leave alone), its filters, and its match blocks each with the
//! step's headers added after their own (`exact` as `Exact`; `regex` as `RegularExpression`;
//! `prefix` as `RegularExpression` `<prefix>.*`, the plugin's form), or one block of the
//! headers alone when the source rule has none. So the header route narrows the source rule, and
//! a request carrying the headers goes to the canary whatever the weights. A rule is the managed
//! route's by its name, which is also how the weights skip it; the plugin's e2e cases check no
//! ConfigMap, and weir keeps none (older plugin versions kept rule indexes in one). Setting a
//! managed route again replaces its rules where they are; a new one goes before the rules of the
//! managed routes after it in `managedRoutes`, else last. A step without `match`, and the removal
//! of all managed routes at the end of a rollout, take the rules out. Mirror routes are not
//! written into Gateway API routes (the plugin's e2e cases have none): `setMirrorRoute` is
//! refused for a Rollout routed by the plugin.

use serde_json::{Value, json};
use weir_core::argo::types::{HeaderRouteMatch, StringMatch};

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
    let field = plugin_field();
    let namespace = routes_namespace(ctx, config);
    let label = in_progress_label(config);
    let mut any = false;
    for kind in KINDS {
        let names: Vec<(String, String)> = configured(config, kind, &field)
            .into_iter()
            .map(|(path, name, _)| (path, name))
            .collect();
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
        if managed_rule(rule, &ctx.managed_routes) {
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

/// `spec.strategy.canary.trafficRouting.plugins.argoproj-labs/gatewayAPI`.
fn plugin_field() -> String {
    format!("spec.strategy.canary.trafficRouting.plugins.{GATEWAY_API_PLUGIN}")
}

/// The namespace of the routes: the config's `namespace`, default the Rollout's.
fn routes_namespace<'a>(ctx: &Ctx<'a>, config: &'a Value) -> &'a str {
    config
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|namespace| !namespace.is_empty())
        .unwrap_or(ctx.namespace)
}

/// The routes of `kind` the config names: field path, name, and whether header routes go into
/// it (`kind.one` always; `kind.many` entries with `useHeaderRoutes: true`).
fn configured(config: &Value, kind: &Kind, field: &str) -> Vec<(String, String, bool)> {
    let mut names = Vec::new();
    if let Some(name) = config.get(kind.one).and_then(Value::as_str) {
        names.push((format!("{field}.{}", kind.one), name.to_owned(), true));
    }
    for (i, entry) in config
        .get(kind.many)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if let Some(name) = entry.get("name").and_then(Value::as_str) {
            let headers = entry
                .get("useHeaderRoutes")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            names.push((
                format!("{field}.{}[{i}].name", kind.many),
                name.to_owned(),
                headers,
            ));
        }
    }
    names
}

/// Whether rule `name` is one of managed route `route`'s rules: `route`, `route-1`, `route-2`...
fn rule_of(name: &str, route: &str) -> bool {
    name == route
        || name.strip_prefix(route).is_some_and(|rest| {
            rest.strip_prefix('-')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// Whether `rule` is a header route of one of the managed routes (by its name).
fn managed_rule(rule: &Value, managed_routes: &[&str]) -> bool {
    rule.get("name")
        .and_then(Value::as_str)
        .is_some_and(|name| managed_routes.iter().any(|route| rule_of(name, route)))
}

/// Which of the managed routes `rule` belongs to (a name that is itself a managed route wins
/// over a `-N` suffix reading).
fn owner_of<'a>(rule: &Value, managed_routes: &[&'a str]) -> Option<&'a str> {
    let name = rule.get("name").and_then(Value::as_str)?;
    managed_routes
        .iter()
        .find(|route| **route == name)
        .or_else(|| managed_routes.iter().find(|route| rule_of(name, route)))
        .copied()
}

/// What is done to the managed routes.
pub(super) enum Edit<'a> {
    /// Write managed route `name` with these header conditions, or (None) take it out.
    Header(&'a str, Option<&'a [HeaderRouteMatch]>),
    /// Take these managed routes out.
    Remove(&'a [&'a str]),
}

/// Writes a header route into (or takes managed routes out of) every HTTP and gRPC route the
/// config names (TCP and TLS routes have no headers).
pub(super) async fn header_route(ctx: &Ctx<'_>, config: &Value, edit: &Edit<'_>) -> Routed {
    let field = plugin_field();
    let namespace = routes_namespace(ctx, config);
    for kind in KINDS
        .iter()
        .filter(|kind| kind.one == "httpRoute" || kind.one == "grpcRoute")
    {
        let names: Vec<(String, String)> = configured(config, kind, &field)
            .into_iter()
            .filter(|(_, _, headers)| *headers || !matches!(edit, Edit::Header(_, Some(_))))
            .map(|(path, name, _)| (path, name))
            .collect();
        if names.is_empty() {
            continue;
        }
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
            if let Err(reason) = edit_rules(ctx, edit, &mut after) {
                return Ok(Err(format!(
                    "{path}: Invalid value: \"{name}\": {} \"{name}\": {reason}",
                    kind.kind
                )));
            }
            write_changes(&routes, &name, &before, &after).await?;
        }
    }
    Ok(Ok(()))
}

/// Edits `route`'s rules; the reason when a header route has no rule to copy.
fn edit_rules(ctx: &Ctx<'_>, edit: &Edit<'_>, route: &mut Value) -> Result<(), String> {
    let Some(rules) = route
        .pointer_mut("/spec/rules")
        .and_then(Value::as_array_mut)
    else {
        return match edit {
            Edit::Header(_, Some(_)) => Err(no_source(ctx)),
            _ => Ok(()),
        };
    };
    let (name, matches) = match edit {
        Edit::Remove(names) => {
            rules.retain(|rule| !managed_rule(rule, names));
            return Ok(());
        }
        Edit::Header(name, matches) => (*name, *matches),
    };
    let at = rules
        .iter()
        .position(|rule| owner_of(rule, &ctx.managed_routes) == Some(name));
    rules.retain(|rule| owner_of(rule, &ctx.managed_routes) != Some(name));
    let Some(matches) = matches else {
        return Ok(());
    };
    let headers: Vec<Value> = matches.iter().map(header_match).collect();
    let mut added = Vec::new();
    for rule in rules.iter() {
        if managed_rule(rule, &ctx.managed_routes) {
            continue;
        }
        let refs = rule
            .get("backendRefs")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let named = |service: &str| {
            refs.iter()
                .find(|r| r.get("name").and_then(Value::as_str) == Some(service))
        };
        let (Some(canary), Some(_)) = (named(ctx.canary), named(ctx.stable)) else {
            continue;
        };
        let mut canary = canary.clone();
        if let Some(canary) = canary.as_object_mut() {
            canary.insert("weight".to_owned(), json!(1));
        }
        let blocks: Vec<Value> = match rule.get("matches").and_then(Value::as_array) {
            Some(blocks) if !blocks.is_empty() => blocks
                .iter()
                .map(|block| {
                    let mut block = block.clone();
                    let mut all: Vec<Value> = block
                        .get("headers")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    all.extend(headers.iter().cloned());
                    if let Some(block) = block.as_object_mut() {
                        block.insert("headers".to_owned(), Value::Array(all));
                    }
                    block
                })
                .collect(),
            _ => vec![json!({"headers": headers})],
        };
        let rule_name = if added.is_empty() {
            name.to_owned()
        } else {
            format!("{name}-{}", added.len())
        };
        let mut header_rule =
            json!({"name": rule_name, "matches": blocks, "backendRefs": [canary]});
        if let Some(filters) = rule.get("filters").filter(|f| !f.is_null()) {
            header_rule["filters"] = filters.clone();
        }
        added.push(header_rule);
    }
    if added.is_empty() {
        return Err(no_source(ctx));
    }
    let later: Vec<&str> = ctx
        .managed_routes
        .iter()
        .skip_while(|route| **route != name)
        .skip(1)
        .copied()
        .collect();
    let at = at.unwrap_or_else(|| {
        rules
            .iter()
            .position(|rule| {
                owner_of(rule, &ctx.managed_routes).is_some_and(|o| later.contains(&o))
            })
            .unwrap_or(rules.len())
    });
    let at = at.min(rules.len());
    rules.splice(at..at, added);
    Ok(())
}

/// The plugin's reason when no rule splits between the two Services.
fn no_source(ctx: &Ctx<'_>) -> String {
    format!(
        "backendRef was not found: no rule has backendRefs to both Service \"{}\" and Service \
         \"{}\" to copy a header route from",
        ctx.stable, ctx.canary
    )
}

/// A Gateway API header match for a `setHeaderRoute` condition (checked to set one value).
fn header_match(condition: &HeaderRouteMatch) -> Value {
    let (kind, value) = match string_match(&condition.header_value) {
        Some(("exact", value)) => ("Exact", value.to_owned()),
        Some(("prefix", value)) => ("RegularExpression", format!("{value}.*")),
        Some((_, value)) => ("RegularExpression", value.to_owned()),
        None => ("Exact", String::new()),
    };
    json!({"name": condition.header_name, "type": kind, "value": value})
}

/// The one value a StringMatch sets, as (`exact`|`prefix`|`regex`, value).
pub(super) fn string_match(matched: &StringMatch) -> Option<(&'static str, &str)> {
    [
        ("exact", &matched.exact),
        ("prefix", &matched.prefix),
        ("regex", &matched.regex),
    ]
    .into_iter()
    .find_map(|(kind, value)| {
        value
            .as_deref()
            .filter(|value| !value.is_empty())
            .map(|value| (kind, value))
    })
}

#[cfg(test)]
mod tests {
    use super::rule_of;

    #[test]
    fn rules_of_a_managed_route_are_its_name_and_numbered_names() {
        assert!(rule_of("canary-route1", "canary-route1"));
        assert!(rule_of("canary-route1-1", "canary-route1"));
        assert!(rule_of("canary-route1-12", "canary-route1"));
        assert!(!rule_of("canary-route1-", "canary-route1"));
        assert!(!rule_of("canary-route1-x", "canary-route1"));
        assert!(!rule_of("canary-route10", "canary-route1"));
    }
}
