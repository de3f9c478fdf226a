//! `trafficRouting.istio`: Argo edits the user's VirtualServices in place (its `istio.go`).
//!
//! Which routes: for each kind of route the VirtualService has (a kind it lacks is skipped even
//! when the Rollout names routes of it, as Argo's e2e "host-only-tls-split" Rollout does):
//! - `http`: the routes named in `routes`, each of which must exist ("HTTP Route 'x' is not found
//!   in the defined Virtual Service."); with none named, the first route without a name, and more
//!   than one route (not counting the header/mirror routes named after `managedRoutes`) is
//!   invalid;
//! - `tls`: the routes whose match blocks have one port, `tlsRoutes[].port`, and together the SNI
//!   hosts `tlsRoutes[].sniHosts` exactly; with none named, the first, and more than one is
//!   invalid;
//! - `tcp`: the routes whose match blocks have one port, `tcpRoutes[].port`; likewise.
//!
//! In each such route the destinations must include the canary and the stable one ("Canary
//! Service 'x' not found in route"): a destination is the canary one when its host, up to the
//! first dot (Argo ignores the rest, so `svc`, `svc.ns`, `svc.ns.svc.cluster.local` all match),
//! is the canary Service, or with `destinationRule` when its `subset` is `canarySubsetName`;
//! likewise the stable one. They get the canary and stable weights; any other destination with a
//! weight is removed from the route, as Argo removes destinations it did not put there (those of
//! finished experiments).
//!
//! With `destinationRule` (subset-level split), first (Argo's `UpdateHash`) the DestinationRule's
//! canary and stable subsets get the label `rollouts-pod-template-hash` of the canary and stable
//! ReplicaSets (removed for an empty hash), so each subset selects one version's pods; subsets
//! that are neither are dropped, as Argo drops them, and the rule is annotated
//! `argo-rollouts.argoproj.io/managed-by-rollouts: <rollout>`.
//!
//! Managed routes (Argo's `SetHeaderRoute`, `SetMirrorRoute`, `RemoveManagedRoutes`): HTTP routes
//! named after `trafficRouting.managedRoutes` entries, which Argo keeps above every other route,
//! in the order of `managedRoutes` (its priority order; Istio takes the first route that
//! matches), re-ordering them whenever it writes the VirtualService. A header route is
//! `{name, match: [{headers: {<header>: {exact|prefix|regex}}}...], route: [canary, weight 100]}`:
//! one match block per condition (Istio ORs blocks, as Argo writes them) and everything to the
//! canary destination, written as the weighted route's canary destination is (its host, port and
//! subset, so a subset-level split sends header traffic to the canary subset). A mirror route is
//! `{name, match: [{method, uri, headers}...], route: <the weighted route's destinations>,
//! mirror: <canary destination>, mirrorPercentage: {value}}` (default 100%): matching requests
//! keep the weights the other traffic has (Argo copies them, and updates a mirror route's
//! weights with the weighted routes' on every later `setWeight`) and a copy goes to the canary.
//! Writing a managed route replaces the one of that name; a step without `match` removes it;
//! at the end of a rollout all managed routes are removed. The weighted route is the one `route`
//! splits first (`routes[0]`, or the first unnamed route).
//!
//! Argo's default Istio API version is `v1alpha3`; weir uses the first of `v1beta1`,
//! `v1alpha3`, `v1` the cluster serves (they are the same schema).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};
use weir_core::argo::types::{
    HeaderRouteMatch, IstioRouting, IstioVirtualService, MirrorRouteMatch, StringMatch,
};

use super::{Ctx, Routed, api, get, not_found, resource, served_version, write_changes};

const GROUP: &str = "networking.istio.io";
const VERSIONS: &[&str] = &["v1beta1", "v1alpha3", "v1"];
const FIELD: &str = "spec.strategy.canary.trafficRouting.istio";
const HASH_LABEL: &str = "rollouts-pod-template-hash";
const MANAGED_BY: &str = "argo-rollouts.argoproj.io/managed-by-rollouts";

/// The DestinationRule's subsets, when the split is subset-level.
struct Subsets<'a> {
    canary: &'a str,
    stable: &'a str,
}

/// Writes the DestinationRule's subset labels, then every VirtualService's weights.
pub(super) async fn route(ctx: &Ctx<'_>, istio: &IstioRouting) -> Routed {
    let services = match virtual_services(istio) {
        Ok(services) => services,
        Err(reason) => return Ok(Err(reason)),
    };
    let subsets = match &istio.destination_rule {
        Some(rule) => {
            let Some((canary_hash, stable_hash)) = ctx.hashes else {
                return Ok(Err(format!(
                    "{FIELD}.destinationRule: subset-level routing needs the ReplicaSets' pod \
                     template hashes, which were not given"
                )));
            };
            let Some(version) =
                served_version(ctx.client, GROUP, "DestinationRule", VERSIONS).await?
            else {
                return Ok(Err(format!(
                    "{FIELD}.destinationRule.name: Invalid value: \"{}\": the cluster serves no \
                     DestinationRule ({GROUP})",
                    rule.name
                )));
            };
            let rules = api(
                ctx.client,
                ctx.namespace,
                &resource(GROUP, version, "DestinationRule", "destinationrules"),
            );
            let Some(before) = get(&rules, &rule.name).await? else {
                return Ok(Err(not_found(
                    &format!("{FIELD}.destinationRule.name"),
                    &rule.name,
                    "destinationrules.networking.istio.io",
                )));
            };
            let mut after = before.clone();
            if let Some(subsets) = after
                .pointer_mut("/spec/subsets")
                .and_then(Value::as_array_mut)
            {
                subsets.retain_mut(|subset| {
                    let name = subset.get("name").and_then(Value::as_str);
                    let hash = if name == Some(rule.canary_subset_name.as_str()) {
                        canary_hash
                    } else if name == Some(rule.stable_subset_name.as_str()) {
                        stable_hash
                    } else {
                        return false;
                    };
                    set_label(subset, hash);
                    true
                });
            }
            if let Some(metadata) = after.get_mut("metadata").and_then(Value::as_object_mut) {
                let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
                if let Some(annotations) = annotations.as_object_mut() {
                    annotations.insert(MANAGED_BY.to_owned(), json!(ctx.rollout));
                }
            }
            write_changes(&rules, &rule.name, &before, &after).await?;
            Some(Subsets {
                canary: &rule.canary_subset_name,
                stable: &rule.stable_subset_name,
            })
        }
        None => None,
    };
    let Some(version) = served_version(ctx.client, GROUP, "VirtualService", VERSIONS).await? else {
        return Ok(Err(format!(
            "{FIELD}: Invalid value: \"\": the cluster serves no VirtualService ({GROUP})"
        )));
    };
    let services_api = api(
        ctx.client,
        ctx.namespace,
        &resource(GROUP, version, "VirtualService", "virtualservices"),
    );
    for (field, service) in services {
        let Some(before) = get(&services_api, &service.name).await? else {
            return Ok(Err(not_found(
                &format!("{field}.name"),
                &service.name,
                "virtualservices.networking.istio.io",
            )));
        };
        let mut after = before.clone();
        if let Err(reason) = set_weights(ctx, subsets.as_ref(), service, &mut after) {
            return Ok(Err(format!(
                "{field}.name: Invalid value: \"{}\": {reason}",
                service.name
            )));
        }
        order(&mut after, &ctx.managed_routes);
        write_changes(&services_api, &service.name, &before, &after).await?;
    }
    Ok(Ok(()))
}

/// The VirtualServices the Rollout names, with their field paths.
fn virtual_services(istio: &IstioRouting) -> Result<Vec<(String, &IstioVirtualService)>, String> {
    match (&istio.virtual_service, &istio.virtual_services) {
        (Some(service), _) => Ok(vec![(format!("{FIELD}.virtualService"), service)]),
        (None, Some(services)) if !services.is_empty() => Ok(services
            .iter()
            .enumerate()
            .map(|(i, service)| (format!("{FIELD}.virtualServices[{i}]"), service))
            .collect()),
        _ => Err(format!(
            "{FIELD}: Invalid value: \"\": Istio needs virtualService or virtualServices"
        )),
    }
}

/// What is done to the managed routes.
pub(super) enum Edit<'a> {
    /// Write header route `name` with these conditions, or (None) remove it.
    Header(&'a str, Option<&'a [HeaderRouteMatch]>),
    /// Write mirror route `name` with these conditions and percentage, or (None) remove it.
    Mirror(&'a str, Option<&'a [MirrorRouteMatch]>, i64),
    /// Remove these managed routes.
    Remove(&'a [&'a str]),
}

/// Writes a header or mirror route into (or removes managed routes from) every VirtualService.
pub(super) async fn managed(ctx: &Ctx<'_>, istio: &IstioRouting, edit: &Edit<'_>) -> Routed {
    let services = match virtual_services(istio) {
        Ok(services) => services,
        Err(reason) => return Ok(Err(reason)),
    };
    let subsets = istio.destination_rule.as_ref().map(|rule| Subsets {
        canary: &rule.canary_subset_name,
        stable: &rule.stable_subset_name,
    });
    let Some(version) = served_version(ctx.client, GROUP, "VirtualService", VERSIONS).await? else {
        return Ok(Err(format!(
            "{FIELD}: Invalid value: \"\": the cluster serves no VirtualService ({GROUP})"
        )));
    };
    let services_api = api(
        ctx.client,
        ctx.namespace,
        &resource(GROUP, version, "VirtualService", "virtualservices"),
    );
    for (field, service) in services {
        let Some(before) = get(&services_api, &service.name).await? else {
            return Ok(Err(not_found(
                &format!("{field}.name"),
                &service.name,
                "virtualservices.networking.istio.io",
            )));
        };
        let mut after = before.clone();
        if let Err(reason) = edit_routes(ctx, subsets.as_ref(), service, edit, &mut after) {
            return Ok(Err(format!(
                "{field}.name: Invalid value: \"{}\": {reason}",
                service.name
            )));
        }
        write_changes(&services_api, &service.name, &before, &after).await?;
    }
    Ok(Ok(()))
}

/// Edits the managed routes of `object` (a VirtualService), then orders them first.
fn edit_routes(
    ctx: &Ctx<'_>,
    subsets: Option<&Subsets<'_>>,
    service: &IstioVirtualService,
    edit: &Edit<'_>,
    object: &mut Value,
) -> Result<(), String> {
    let writes = matches!(edit, Edit::Header(_, Some(_)) | Edit::Mirror(_, Some(_), _));
    let Some(http) = object
        .pointer_mut("/spec/http")
        .and_then(Value::as_array_mut)
    else {
        // Argo's "spec.http not found": a VirtualService of TLS/TCP routes only has no place for
        // a header or mirror route (and nothing to remove).
        return if writes {
            Err("spec.http not found".to_owned())
        } else {
            Ok(())
        };
    };
    let new_route = match edit {
        Edit::Remove(names) => {
            http.retain(|route| route_name(route).is_none_or(|name| !names.contains(&name)));
            None
        }
        Edit::Header(name, None) | Edit::Mirror(name, None, _) => {
            http.retain(|route| route_name(route) != Some(name));
            None
        }
        Edit::Header(name, Some(matches)) => {
            let (_, canary) = weighted_route(ctx, subsets, service, http)?;
            let blocks: Vec<Value> = matches
                .iter()
                .map(|m| {
                    let mut headers = Map::new();
                    headers.insert(m.header_name.clone(), string_match(&m.header_value));
                    json!({"headers": headers})
                })
                .collect();
            Some((
                *name,
                json!({"name": name, "match": blocks,
                    "route": [{"destination": canary, "weight": 100}]}),
            ))
        }
        Edit::Mirror(name, Some(matches), percentage) => {
            let (destinations, canary) = weighted_route(ctx, subsets, service, http)?;
            let blocks: Vec<Value> = matches.iter().map(mirror_match).collect();
            Some((
                *name,
                json!({"name": name, "match": blocks, "route": destinations, "mirror": canary,
                    "mirrorPercentage": {"value": percentage}}),
            ))
        }
    };
    if let Some((name, route)) = new_route {
        http.retain(|route| route_name(route) != Some(name));
        http.push(route);
    }
    order(object, &ctx.managed_routes);
    Ok(())
}

/// The destinations of the route `route` splits first, and its canary destination's
/// `destination` (host, port, subset); Argo's reason when there is none.
fn weighted_route(
    ctx: &Ctx<'_>,
    subsets: Option<&Subsets<'_>>,
    service: &IstioVirtualService,
    http: &[Value],
) -> Result<(Value, Value), String> {
    let index = match service.routes.iter().flatten().next() {
        Some(name) => http
            .iter()
            .position(|route| route_name(route) == Some(name.as_str()))
            .ok_or_else(|| {
                format!("HTTP Route '{name}' is not found in the defined Virtual Service.")
            })?,
        None => http
            .iter()
            .position(|route| route_name(route).is_none_or(str::is_empty))
            .ok_or_else(|| {
                "spec.http[] should be set in VirtualService and it must have exactly one \
                 route when omitting \
                 spec.strategy.canary.trafficRouting.istio.virtualService.routes"
                    .to_owned()
            })?,
    };
    let destinations = http
        .get(index)
        .and_then(|route| route.get("route"))
        .cloned()
        .unwrap_or(Value::Null);
    let canary = destinations
        .as_array()
        .into_iter()
        .flatten()
        .find(|destination| role(ctx, subsets, destination) == Role::Canary)
        .and_then(|destination| destination.get("destination"))
        .cloned()
        .ok_or_else(|| not_in_route(ctx, subsets, true))?;
    Ok((destinations, canary))
}

/// An Istio StringMatch (`{exact|prefix|regex: value}`) for Argo's.
fn string_match(matched: &StringMatch) -> Value {
    let mut out = Map::new();
    for (key, value) in [
        ("exact", &matched.exact),
        ("prefix", &matched.prefix),
        ("regex", &matched.regex),
    ] {
        if let Some(value) = value.as_deref().filter(|value| !value.is_empty()) {
            out.insert(key.to_owned(), json!(value));
        }
    }
    Value::Object(out)
}

/// An Istio HTTPMatchRequest for a `setMirrorRoute` condition: `method`, `uri` (Argo's `path`),
/// `headers`, each only when set.
fn mirror_match(condition: &MirrorRouteMatch) -> Value {
    let mut out = Map::new();
    if let Some(method) = &condition.method {
        out.insert("method".to_owned(), string_match(method));
    }
    if let Some(path) = &condition.path {
        out.insert("uri".to_owned(), string_match(path));
    }
    if let Some(headers) = condition.headers.as_ref().filter(|h| !h.is_empty()) {
        let headers: Map<String, Value> = headers
            .iter()
            .map(|(name, matched)| (name.clone(), string_match(matched)))
            .collect();
        out.insert("headers".to_owned(), Value::Object(headers));
    }
    Value::Object(out)
}

/// Argo's `orderRoutes`: the managed routes first, in the order of `managedRoutes`, then the
/// others in their order.
fn order(object: &mut Value, managed_routes: &[&str]) {
    if managed_routes.is_empty() {
        return;
    }
    let Some(http) = object
        .pointer_mut("/spec/http")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let routes = std::mem::take(http);
    let (managed, others): (Vec<Value>, Vec<Value>) = routes
        .into_iter()
        .partition(|route| route_name(route).is_some_and(|name| managed_routes.contains(&name)));
    for name in managed_routes {
        http.extend(
            managed
                .iter()
                .filter(|route| route_name(route) == Some(name))
                .cloned(),
        );
    }
    http.extend(others);
}

/// Sets (or, for an empty hash, removes) a subset's `rollouts-pod-template-hash` label.
fn set_label(subset: &mut Value, hash: &str) {
    let Some(subset) = subset.as_object_mut() else {
        return;
    };
    let labels = subset.entry("labels").or_insert_with(|| json!({}));
    let Some(labels) = labels.as_object_mut() else {
        return;
    };
    if hash.is_empty() {
        labels.remove(HASH_LABEL);
    } else {
        labels.insert(HASH_LABEL.to_owned(), json!(hash));
    }
}

/// Sets the weights in the routes of `object` (a VirtualService) that `service` selects; the
/// reason (Argo's words) when it cannot.
fn set_weights(
    ctx: &Ctx<'_>,
    subsets: Option<&Subsets<'_>>,
    service: &IstioVirtualService,
    object: &mut Value,
) -> Result<(), String> {
    let mut edits: Vec<(&str, usize)> = Vec::new();
    let http = routes_of(object, "http");
    // Argo's mirror routes get the weights too (they copy the weighted route's destinations);
    // they are not checked for the two Services.
    let mirrors: Vec<usize> = http
        .iter()
        .enumerate()
        .filter(|(_, route)| {
            route.get("mirror").is_some()
                && route_name(route).is_some_and(|name| ctx.managed_routes.contains(&name))
        })
        .map(|(index, _)| index)
        .collect();
    if !http.is_empty() {
        let names: Vec<&String> = service.routes.iter().flatten().collect();
        if names.is_empty() {
            let unmanaged = http
                .iter()
                .filter(|route| {
                    route_name(route).is_none_or(|name| !ctx.managed_routes.contains(&name))
                })
                .count();
            if unmanaged > 1 {
                return Err(
                    "spec.http[] should be set in VirtualService and it must have \
                     exactly one route when omitting \
                     spec.strategy.canary.trafficRouting.istio.virtualService.routes"
                        .to_owned(),
                );
            }
            if let Some(index) = http
                .iter()
                .position(|route| route_name(route).is_none_or(str::is_empty))
            {
                edits.push(("http", index));
            }
        }
        for name in names {
            let Some(index) = http
                .iter()
                .position(|route| route_name(route) == Some(name.as_str()))
            else {
                return Err(format!(
                    "HTTP Route '{name}' is not found in the defined Virtual Service."
                ));
            };
            edits.push(("http", index));
        }
    }
    for (kind, wanted, upper, field) in [
        (
            "tls",
            service.tls_routes.as_ref().map(|routes| {
                routes
                    .iter()
                    .map(|r| (r.port.unwrap_or(0), r.sni_hosts.clone().unwrap_or_default()))
                    .collect::<Vec<_>>()
            }),
            "TLS",
            "tlsRoutes",
        ),
        (
            "tcp",
            service.tcp_routes.as_ref().map(|routes| {
                routes
                    .iter()
                    .map(|r| (r.port.unwrap_or(0), Vec::new()))
                    .collect::<Vec<_>>()
            }),
            "TCP",
            "tcpRoutes",
        ),
    ] {
        let routes = routes_of(object, kind);
        if routes.is_empty() {
            continue;
        }
        let wanted = wanted.unwrap_or_default();
        if wanted.is_empty() {
            if routes.len() > 1 {
                return Err(format!(
                    "spec.{kind}[] should be set in VirtualService and it must have exactly one \
                     route when omitting \
                     spec.strategy.canary.trafficRouting.istio.virtualService.{field}"
                ));
            }
            edits.push((kind, 0));
        }
        for (port, sni_hosts) in wanted {
            let matching: Vec<usize> = routes
                .iter()
                .enumerate()
                .filter(|(_, route)| matches(route, port, &sni_hosts, kind == "tls"))
                .map(|(index, _)| index)
                .collect();
            if matching.is_empty() {
                return Err(format!(
                    "No matching {upper} routes found in the defined Virtual Service."
                ));
            }
            edits.extend(matching.into_iter().map(|index| (kind, index)));
        }
    }
    let checked = edits.into_iter().map(|edit| (edit, true));
    let mirrored = mirrors.into_iter().map(|index| (("http", index), false));
    for ((kind, index), check) in checked.chain(mirrored) {
        let Some(destinations) = object
            .pointer_mut(&format!("/spec/{kind}/{index}/route"))
            .and_then(Value::as_array_mut)
        else {
            if !check {
                continue;
            }
            return Err(not_in_route(ctx, subsets, true));
        };
        let roles: Vec<Role> = destinations
            .iter()
            .map(|destination| role(ctx, subsets, destination))
            .collect();
        if check && !roles.contains(&Role::Canary) {
            return Err(not_in_route(ctx, subsets, true));
        }
        if check && !roles.contains(&Role::Stable) {
            return Err(not_in_route(ctx, subsets, false));
        }
        let mut roles = roles.into_iter();
        destinations.retain_mut(|destination| {
            let weight = match roles.next() {
                Some(Role::Canary) => ctx.weights.canary,
                Some(Role::Stable) => ctx.weights.stable,
                Some(Role::Other) => {
                    return destination
                        .get("weight")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                        == 0;
                }
                Some(Role::Hostless) | None => return true,
            };
            if let Some(destination) = destination.as_object_mut() {
                destination.insert("weight".into(), json!(weight));
            }
            true
        });
    }
    Ok(())
}

/// Argo's reason for a route without the canary (or stable) destination.
fn not_in_route(ctx: &Ctx<'_>, subsets: Option<&Subsets<'_>>, canary: bool) -> String {
    match (subsets, canary) {
        (Some(subsets), true) => format!(
            "Canary DestinationRule subset '{}' not found in route",
            subsets.canary
        ),
        (Some(subsets), false) => format!(
            "Stable DestinationRule subset '{}' not found in route",
            subsets.stable
        ),
        (None, true) => format!("Canary Service '{}' not found in route", ctx.canary),
        (None, false) => format!("Stable Service '{}' not found in route", ctx.stable),
    }
}

/// What a destination of a split route is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Canary,
    Stable,
    /// Another Service: removed when it has a weight.
    Other,
    /// No host (or one starting with a dot): left alone, as Argo leaves it.
    Hostless,
}

/// Argo's `processRoutes`: the canary test comes first.
fn role(ctx: &Ctx<'_>, subsets: Option<&Subsets<'_>>, destination: &Value) -> Role {
    let inner = destination.get("destination");
    let field = |name: &str| {
        inner
            .and_then(|d| d.get(name))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let host = host_name(field("host"));
    if host.is_empty() {
        return Role::Hostless;
    }
    let subset = field("subset");
    let (canary_subset, stable_subset) = subsets.map_or(("", ""), |s| (s.canary, s.stable));
    let subset_is = |wanted: &str| !subset.is_empty() && subset == wanted;
    if host == ctx.canary || subset_is(canary_subset) {
        Role::Canary
    } else if host == ctx.stable || subset_is(stable_subset) {
        Role::Stable
    } else {
        Role::Other
    }
}

/// A route's `name`.
fn route_name(route: &Value) -> Option<&str> {
    route.get("name").and_then(Value::as_str)
}

/// `spec.<kind>` of a VirtualService (cloned: it is read before it is edited).
fn routes_of(object: &Value, kind: &str) -> Vec<Value> {
    object
        .pointer(&format!("/spec/{kind}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Argo's `searchTlsRoute`/`searchTcpRoute`: the route's match blocks name one port (none is
/// port 0), `port`, and (TLS) their SNI hosts together are exactly `sni_hosts`.
fn matches(route: &Value, port: i64, sni_hosts: &[String], tls: bool) -> bool {
    let blocks = route
        .get("match")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let ports: BTreeSet<i64> = blocks
        .iter()
        .map(|block| block.get("port").and_then(Value::as_i64).unwrap_or(0))
        .collect();
    if ports.len() > 1 || ports.first().copied().unwrap_or(0) != port {
        return false;
    }
    if !tls {
        return true;
    }
    let hosts: BTreeSet<&str> = blocks
        .iter()
        .flat_map(|block| {
            block
                .get("sniHosts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
        })
        .collect();
    hosts == sni_hosts.iter().map(String::as_str).collect()
}

/// Argo's `getHost`: a destination host up to its first dot (`svc.ns.svc.cluster.local` is
/// `svc`); empty when it starts with a dot.
pub(super) fn host_name(host: &str) -> &str {
    match host.find('.') {
        Some(index) => &host[..index],
        None => host,
    }
}

#[cfg(test)]
mod tests {
    use super::host_name;

    #[test]
    fn hosts_are_read_up_to_the_first_dot() {
        for host in [
            "web",
            "web.shop",
            "web.shop.svc",
            "web.other.svc.cluster.local",
        ] {
            assert_eq!(host_name(host), "web", "{host}");
        }
        assert_eq!(host_name(".web"), "");
        assert_eq!(host_name("web2.shop"), "web2");
    }
}
