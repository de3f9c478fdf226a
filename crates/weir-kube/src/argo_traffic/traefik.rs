//! `trafficRouting.traefik`: Argo splits by the user's TraefikService named
//! `weightedTraefikServiceName`, a weighted round robin over `spec.weighted.services[]`. Every
//! reconcile it reads that TraefikService, sets `weight` on the entry whose `name` is the canary
//! Service to the canary weight and on the one named the stable Service to the rest, and writes
//! the object back; the other entries, and everything else in it, are left as they are (Argo
//! writes 100 - canary as the stable weight whatever `maxTrafficWeight`; weir writes the stable
//! weight it is given, the rest of `maxTrafficWeight`, the same with the default 100). A
//! TraefikService without `spec.weighted.services` ("spec.weighted.services was not found in
//! traefik service manifest") or without an entry for either Service ("traefik canary service
//! was not found", "traefik stable service was not found") is an error. Argo does not create the
//! TraefikService, and has no header or mirror routes for Traefik (its reconciler does nothing for
//! them).
//!
//! Argo reads the TraefikService at `traefik.containo.us/v1alpha1` unless its controller is told
//! another group (`--traefik-api-group`); Traefik v3 serves it at `traefik.io/v1alpha1` only
//! (v2.10 at both). weir looks the object up in each of `traefik.io` and `traefik.containo.us`
//! the cluster serves, in that order, and writes it where it is found.

use serde_json::{Value, json};

use super::{Ctx, Routed, api, get, not_found, resource, served_version, write_changes};

const GROUPS: &[&str] = &["traefik.io", "traefik.containo.us"];
const VERSIONS: &[&str] = &["v1alpha1"];
const KIND: &str = "TraefikService";
const PLURAL: &str = "traefikservices";
const FIELD: &str = "spec.strategy.canary.trafficRouting.traefik.weightedTraefikServiceName";

/// Writes the weights into the TraefikService's weighted services.
pub(super) async fn route(ctx: &Ctx<'_>, traefik: &Value) -> Routed {
    let Some(name) = traefik
        .get("weightedTraefikServiceName")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
    else {
        return Ok(Err(format!(
            "{FIELD}: Invalid value: \"\": traefik needs the name of a weighted TraefikService"
        )));
    };
    let mut first_served = None;
    for group in GROUPS {
        let Some(version) = served_version(ctx.client, group, KIND, VERSIONS).await? else {
            continue;
        };
        first_served.get_or_insert(*group);
        let services = api(
            ctx.client,
            ctx.namespace,
            &resource(group, version, KIND, PLURAL),
        );
        let Some(before) = get(&services, name).await? else {
            continue;
        };
        let mut after = before.clone();
        if let Err(reason) = set_weights(ctx, &mut after) {
            return Ok(Err(format!("{FIELD}: Invalid value: \"{name}\": {reason}")));
        }
        write_changes(&services, name, &before, &after).await?;
        return Ok(Ok(()));
    }
    Ok(Err(match first_served {
        Some(group) => not_found(FIELD, name, &format!("{PLURAL}.{group}")),
        None => format!(
            "{FIELD}: Invalid value: \"{name}\": the cluster serves no {KIND} ({})",
            GROUPS.join(" or ")
        ),
    }))
}

/// Sets the canary and stable entries' weights in `service` (a TraefikService), or the reason
/// it cannot be split.
fn set_weights(ctx: &Ctx<'_>, service: &mut Value) -> Result<(), String> {
    let Some(entries) = service
        .pointer_mut("/spec/weighted/services")
        .and_then(Value::as_array_mut)
    else {
        return Err("spec.weighted.services was not found in traefik service manifest".to_owned());
    };
    for (role, backend, weight) in [
        ("canary", ctx.canary, ctx.weights.canary),
        ("stable", ctx.stable, ctx.weights.stable),
    ] {
        let Some(entry) = entries
            .iter_mut()
            .find(|entry| entry.get("name").and_then(Value::as_str) == Some(backend))
        else {
            return Err(format!(
                "traefik {role} service was not found: no spec.weighted.services[] entry is \
                 named \"{backend}\" (the {role}Service)"
            ));
        };
        entry["weight"] = json!(weight);
    }
    Ok(())
}
