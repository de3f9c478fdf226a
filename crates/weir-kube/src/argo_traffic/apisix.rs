//! `trafficRouting.apisix`: Argo splits by the user's ApisixRoute `route.name`
//! (`apisix.apache.org/v2`). Every reconcile it reads it and, in each `spec.http[]` rule whose
//! `name` is one of `route.rules` (when `rules` is not set, the one rule named like the
//! ApisixRoute itself; an empty list names none), sets `weight` on the `backends[]` entry whose
//! `serviceName` is the canary Service to the canary weight and on the one of the stable Service
//! to the rest (Argo: 100 - canary; weir: the stable weight it is given, the rest of
//! `maxTrafficWeight`), then writes the object back; other rules, backends and fields are left
//! as they are. An ApisixRoute without `spec.http`, a rule that is not there ("Apisix http route
//! rule <rule> not found"), a rule without `backends`, or without a backend for either Service
//! ("apisix route <service> backend was not found") is an error, and nothing is written.
//!
//! Argo's header routes for APISIX (an ApisixRoute per managed route, copied from this one) are
//! not written by weir: `set_header_route` refuses a Rollout routed only by APISIX.

use serde_json::{Value, json};

use super::{Ctx, Routed, api, get, not_found, resource, served_version, write_changes};

const GROUP: &str = "apisix.apache.org";
const VERSIONS: &[&str] = &["v2"];
const KIND: &str = "ApisixRoute";
const PLURAL: &str = "apisixroutes";
const FIELD: &str = "spec.strategy.canary.trafficRouting.apisix.route";

/// Writes the weights into the named rules' backends.
pub(super) async fn route(ctx: &Ctx<'_>, apisix: &Value) -> Routed {
    let Some(name) = apisix
        .pointer("/route/name")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
    else {
        return Ok(Err(format!(
            "{FIELD}.name: Invalid value: \"\": apisix needs the name of an ApisixRoute"
        )));
    };
    // (field naming the rule, rule name)
    let rules: Vec<(String, &str)> = match apisix.pointer("/route/rules") {
        None | Some(Value::Null) => vec![(format!("{FIELD}.name"), name)],
        Some(Value::Array(rules)) => {
            let mut named = Vec::with_capacity(rules.len());
            for (i, rule) in rules.iter().enumerate() {
                let field = format!("{FIELD}.rules[{i}]");
                let Some(rule) = rule.as_str() else {
                    return Ok(Err(format!(
                        "{field}: Invalid value: {rule}: a rule is the name of an http rule"
                    )));
                };
                named.push((field, rule));
            }
            named
        }
        Some(other) => {
            return Ok(Err(format!(
                "{FIELD}.rules: Invalid value: {other}: rules is a list of http rule names"
            )));
        }
    };
    let Some(version) = served_version(ctx.client, GROUP, KIND, VERSIONS).await? else {
        return Ok(Err(format!(
            "{FIELD}.name: Invalid value: \"{name}\": the cluster serves no {KIND} \
             ({GROUP}/{})",
            VERSIONS.join(", ")
        )));
    };
    let routes = api(
        ctx.client,
        ctx.namespace,
        &resource(GROUP, version, KIND, PLURAL),
    );
    let Some(before) = get(&routes, name).await? else {
        return Ok(Err(not_found(
            &format!("{FIELD}.name"),
            name,
            &format!("{PLURAL}.{GROUP}"),
        )));
    };
    let mut after = before.clone();
    let Some(http) = after
        .pointer_mut("/spec/http")
        .and_then(Value::as_array_mut)
    else {
        return Ok(Err(format!(
            "{FIELD}.name: Invalid value: \"{name}\": spec.http was not found in Apisix Route \
             manifest"
        )));
    };
    for (field, rule) in rules {
        if let Err(reason) = set_weights(ctx, http, rule) {
            return Ok(Err(format!(
                "{field}: Invalid value: \"{rule}\": {reason} (ApisixRoute `{name}`)"
            )));
        }
    }
    write_changes(&routes, name, &before, &after).await?;
    Ok(Ok(()))
}

/// Sets the canary and stable backends' weights in `http` rule `rule`, or the reason it cannot
/// be split.
fn set_weights(ctx: &Ctx<'_>, http: &mut [Value], rule: &str) -> Result<(), String> {
    let Some(found) = http
        .iter_mut()
        .find(|entry| entry.get("name").and_then(Value::as_str) == Some(rule))
    else {
        return Err(format!("Apisix http route rule {rule} not found"));
    };
    let Some(backends) = found.get_mut("backends").and_then(Value::as_array_mut) else {
        return Err(format!(
            "Apisix http route backends not found in rule {rule}"
        ));
    };
    for (backend, weight) in [
        (ctx.canary, ctx.weights.canary),
        (ctx.stable, ctx.weights.stable),
    ] {
        let Some(entry) = backends
            .iter_mut()
            .find(|entry| entry.get("serviceName").and_then(Value::as_str) == Some(backend))
        else {
            return Err(format!("apisix route {backend} backend was not found"));
        };
        entry["weight"] = json!(weight);
    }
    Ok(())
}
