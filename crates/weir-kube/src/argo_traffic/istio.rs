//! `trafficRouting.istio`: Argo edits the user's VirtualServices in place. For each kind of
//! route the VirtualService has (`http`, `tls`, `tcp`; a kind it lacks is skipped even when the
//! Rollout names routes of it, as Argo's e2e "host-only-tls-split" Rollout does), the routes the
//! Rollout names (`routes` by name, `tlsRoutes` by port and SNI hosts, `tcpRoutes` by port), or
//! the only route of that kind when it names none (more than one is invalid), have the
//! destination of the stable Service set to the stable weight and the canary Service's to the
//! canary weight; other destinations are left alone
//! (host-level split; a host may be written `svc`, `svc.ns`, `svc.ns.svc.cluster.local`). With
//! `destinationRule` the split is subset-level: the destinations are picked by `subset`
//! (`stableSubsetName`/`canarySubsetName`), and first (Argo's `UpdateHash`) the DestinationRule's
//! two subsets get the label `rollouts-pod-template-hash` of the stable and canary ReplicaSets,
//! so each subset selects one version's pods; Argo then marks the rule
//! `argo-rollouts.argoproj.io/managed-by-rollouts: <rollout>`.
//!
//! Argo's default Istio API version is `v1alpha3`; weir uses the first of `v1beta1`,
//! `v1alpha3`, `v1` the cluster serves (they are the same schema).

use serde_json::{Value, json};
use weir_core::argo::types::{IstioRouting, IstioVirtualService};

use super::{Ctx, Routed, api, get, not_found, resource, served_version, write_changes};

const GROUP: &str = "networking.istio.io";
const VERSIONS: &[&str] = &["v1beta1", "v1alpha3", "v1"];
const FIELD: &str = "spec.strategy.canary.trafficRouting.istio";
const HASH_LABEL: &str = "rollouts-pod-template-hash";
const MANAGED_BY: &str = "argo-rollouts.argoproj.io/managed-by-rollouts";

/// Which destinations are the stable and canary ones.
enum Split<'a> {
    /// By Service host.
    Host { stable: &'a str, canary: &'a str },
    /// By DestinationRule subset.
    Subset { stable: &'a str, canary: &'a str },
}

/// Writes the DestinationRule's subset labels, then every VirtualService's weights.
pub(super) async fn route(ctx: &Ctx<'_>, istio: &IstioRouting) -> Routed {
    let services: Vec<(String, &IstioVirtualService)> =
        match (&istio.virtual_service, &istio.virtual_services) {
            (Some(service), _) => vec![(format!("{FIELD}.virtualService"), service)],
            (None, Some(services)) if !services.is_empty() => services
                .iter()
                .enumerate()
                .map(|(i, service)| (format!("{FIELD}.virtualServices[{i}]"), service))
                .collect(),
            _ => {
                return Ok(Err(format!(
                    "{FIELD}: Invalid value: \"\": Istio needs virtualService or virtualServices"
                )));
            }
        };
    let split = match &istio.destination_rule {
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
            for (subset, hash, field) in [
                (&rule.canary_subset_name, canary_hash, "canarySubsetName"),
                (&rule.stable_subset_name, stable_hash, "stableSubsetName"),
            ] {
                let found = after
                    .pointer_mut("/spec/subsets")
                    .and_then(Value::as_array_mut)
                    .and_then(|subsets| {
                        subsets
                            .iter_mut()
                            .find(|s| s.get("name").and_then(Value::as_str) == Some(subset))
                    });
                let Some(found) = found else {
                    return Ok(Err(format!(
                        "{FIELD}.destinationRule.{field}: Invalid value: \"{subset}\": \
                         DestinationRule \"{}\" has no subset \"{subset}\"",
                        rule.name
                    )));
                };
                set_label(found, hash);
            }
            if after != before {
                if let Some(metadata) = after.get_mut("metadata").and_then(Value::as_object_mut) {
                    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
                    if let Some(annotations) = annotations.as_object_mut() {
                        annotations.insert(MANAGED_BY.to_owned(), json!(ctx.rollout));
                    }
                }
                write_changes(&rules, &rule.name, &before, &after).await?;
            }
            Split::Subset {
                stable: &rule.stable_subset_name,
                canary: &rule.canary_subset_name,
            }
        }
        None => Split::Host {
            stable: ctx.stable,
            canary: ctx.canary,
        },
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
        if let Err(reason) = set_weights(ctx, &split, &field, service, &mut after) {
            return Ok(Err(reason));
        }
        write_changes(&services_api, &service.name, &before, &after).await?;
    }
    Ok(Ok(()))
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

/// Sets the weights in the routes of `object` (a VirtualService) that `service` names.
fn set_weights(
    ctx: &Ctx<'_>,
    split: &Split<'_>,
    field: &str,
    service: &IstioVirtualService,
    object: &mut Value,
) -> Result<(), String> {
    let name = &service.name;
    let named: Vec<&String> = service.routes.iter().flatten().collect();
    let tls = service.tls_routes.as_deref().unwrap_or_default();
    let tcp = service.tcp_routes.as_deref().unwrap_or_default();
    let mut edits: Vec<(&str, usize, String)> = Vec::new();
    // Argo edits a kind of route only when the VirtualService has routes of that kind; then the
    // named (or matched) ones, or the only one when none are named.
    let http = routes_of(object, "http");
    if !http.is_empty() {
        for route in &named {
            let index = http
                .iter()
                .position(|r| r.get("name").and_then(Value::as_str) == Some(route.as_str()));
            let Some(index) = index else {
                return Err(format!(
                    "{field}.routes: Invalid value: \"{route}\": HTTP Route '{route}' is not \
                     found in the defined Virtual Service."
                ));
            };
            edits.push(("http", index, format!("HTTP route '{route}'")));
        }
        if named.is_empty() {
            edits.push((
                "http",
                only(ctx, &http, "http", "routes", field, name)?,
                "its HTTP route".into(),
            ));
        }
    }
    let tls_routes = routes_of(object, "tls");
    if !tls_routes.is_empty() {
        for (i, wanted) in tls.iter().enumerate() {
            let indexes: Vec<usize> = tls_routes
                .iter()
                .enumerate()
                .filter(|(_, route)| matches_tls(route, wanted.port, wanted.sni_hosts.as_deref()))
                .map(|(index, _)| index)
                .collect();
            if indexes.is_empty() {
                return Err(format!(
                    "{field}.tlsRoutes[{i}]: Invalid value: \"\": no TLS route in VirtualService \
                     \"{name}\" matches its port and SNI hosts"
                ));
            }
            edits.extend(
                indexes
                    .into_iter()
                    .map(|index| ("tls", index, format!("TLS route {index}"))),
            );
        }
        if tls.is_empty() {
            edits.push((
                "tls",
                only(ctx, &tls_routes, "tls", "tlsRoutes", field, name)?,
                "its TLS route".into(),
            ));
        }
    }
    let tcp_routes = routes_of(object, "tcp");
    if !tcp_routes.is_empty() {
        for (i, wanted) in tcp.iter().enumerate() {
            let indexes: Vec<usize> = tcp_routes
                .iter()
                .enumerate()
                .filter(|(_, route)| matches_port(route, wanted.port))
                .map(|(index, _)| index)
                .collect();
            if indexes.is_empty() {
                return Err(format!(
                    "{field}.tcpRoutes[{i}]: Invalid value: \"\": no TCP route in VirtualService \
                     \"{name}\" matches its port"
                ));
            }
            edits.extend(
                indexes
                    .into_iter()
                    .map(|index| ("tcp", index, format!("TCP route {index}"))),
            );
        }
        if tcp.is_empty() {
            edits.push((
                "tcp",
                only(ctx, &tcp_routes, "tcp", "tcpRoutes", field, name)?,
                "its TCP route".into(),
            ));
        }
    }
    if edits.is_empty() {
        return Err(format!(
            "{field}.name: Invalid value: \"{name}\": VirtualService \"{name}\" has no HTTP, TLS \
             or TCP routes"
        ));
    }
    for (kind, index, what) in edits {
        let Some(destinations) = object
            .pointer_mut(&format!("/spec/{kind}/{index}/route"))
            .and_then(Value::as_array_mut)
        else {
            return Err(format!(
                "{field}: Invalid value: \"{name}\": {what} of VirtualService \"{name}\" has no \
                 destinations"
            ));
        };
        let (mut stable_found, mut canary_found) = (false, false);
        for destination in destinations.iter_mut() {
            let (is_stable, is_canary) = which(ctx, split, destination);
            let weight = if is_stable {
                stable_found = true;
                ctx.weights.stable
            } else if is_canary {
                canary_found = true;
                ctx.weights.canary
            } else {
                continue;
            };
            if let Some(destination) = destination.as_object_mut() {
                destination.insert("weight".into(), json!(weight));
            }
        }
        let (stable, canary, noun) = match split {
            Split::Host { stable, canary } => (*stable, *canary, "Service"),
            Split::Subset { stable, canary } => (*stable, *canary, "subset"),
        };
        for (found, role, wanted) in [
            (stable_found, "Stable", stable),
            (canary_found, "Canary", canary),
        ] {
            if !found {
                return Err(format!(
                    "{field}: Invalid value: \"{name}\": Istio VirtualService has invalid {what}. \
                     Error: {role} {noun} '{wanted}' not found in route"
                ));
            }
        }
    }
    Ok(())
}

/// The index of the only route of `kind` when the Rollout names none (Argo's rule: "If
/// omitted, VirtualService must have a single route of this type").
/// The header and mirror routes Argo adds for `managedRoutes` (named after them) do not count.
fn only(
    ctx: &Ctx<'_>,
    routes: &[Value],
    kind: &str,
    names: &str,
    field: &str,
    name: &str,
) -> Result<usize, String> {
    let candidates: Vec<usize> = routes
        .iter()
        .enumerate()
        .filter(|(_, route)| {
            route
                .get("name")
                .and_then(Value::as_str)
                .is_none_or(|route| !ctx.managed_routes.contains(&route))
        })
        .map(|(index, _)| index)
        .collect();
    if let [index] = candidates[..] {
        return Ok(index);
    }
    Err(format!(
        "{field}.{names}: Invalid value: \"\": spec.{kind}[] of VirtualService \"{name}\" must \
         have exactly one route when {names} are not named, and it has {}",
        candidates.len()
    ))
}

/// `spec.<kind>` of a VirtualService (cloned: it is read before it is edited).
fn routes_of(object: &Value, kind: &str) -> Vec<Value> {
    object
        .pointer(&format!("/spec/{kind}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Whether a TLS route has a match with `port` (when given) and every one of `sni_hosts`.
fn matches_tls(route: &Value, port: Option<i64>, sni_hosts: Option<&[String]>) -> bool {
    route
        .get("match")
        .and_then(Value::as_array)
        .is_some_and(|matches| {
            matches.iter().any(|m| {
                let port_ok =
                    port.is_none_or(|port| m.get("port").and_then(Value::as_i64) == Some(port));
                let hosts: Vec<&str> = m
                    .get("sniHosts")
                    .and_then(Value::as_array)
                    .map(|hosts| hosts.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let hosts_ok = sni_hosts
                    .unwrap_or_default()
                    .iter()
                    .all(|host| hosts.contains(&host.as_str()));
                port_ok && hosts_ok
            })
        })
}

/// Whether a TCP route has a match with `port` (any route when no port is given).
fn matches_port(route: &Value, port: Option<i64>) -> bool {
    let Some(port) = port else {
        return true;
    };
    route
        .get("match")
        .and_then(Value::as_array)
        .is_some_and(|matches| {
            matches
                .iter()
                .any(|m| m.get("port").and_then(Value::as_i64) == Some(port))
        })
}

/// Whether a destination (`{destination: {host, subset, port}, weight}`) is the stable one, the
/// canary one.
fn which(ctx: &Ctx<'_>, split: &Split<'_>, destination: &Value) -> (bool, bool) {
    let inner = destination.get("destination");
    let field = |name: &str| inner.and_then(|d| d.get(name)).and_then(Value::as_str);
    match split {
        Split::Host { stable, canary } => {
            let host = field("host").unwrap_or_default();
            (
                is_host(host, stable, ctx.namespace),
                is_host(host, canary, ctx.namespace),
            )
        }
        Split::Subset { stable, canary } => {
            let subset = field("subset");
            (subset == Some(stable), subset == Some(canary))
        }
    }
}

/// Whether `host` names Service `service` of `namespace`: `svc`, `svc.ns`, `svc.ns.svc` or
/// `svc.ns.svc.<cluster domain>`.
pub(super) fn is_host(host: &str, service: &str, namespace: &str) -> bool {
    let Some(rest) = host.strip_prefix(service) else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    let Some(rest) = rest
        .strip_prefix('.')
        .and_then(|rest| rest.strip_prefix(namespace))
    else {
        return false;
    };
    rest.is_empty() || rest == ".svc" || rest.starts_with(".svc.")
}

#[cfg(test)]
mod tests {
    use super::is_host;

    #[test]
    fn hosts_of_a_service() {
        for host in [
            "web",
            "web.shop",
            "web.shop.svc",
            "web.shop.svc.cluster.local",
        ] {
            assert!(is_host(host, "web", "shop"), "{host}");
        }
        for host in [
            "web2",
            "web.other",
            "web.shopping",
            "web.shop.cluster",
            "api",
        ] {
            assert!(!is_host(host, "web", "shop"), "{host}");
        }
    }
}
