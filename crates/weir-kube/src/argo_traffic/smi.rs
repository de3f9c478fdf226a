//! `trafficRouting.smi`: Argo owns a TrafficSplit `trafficSplitName` (default the Rollout's
//! name) with `spec.service` the `rootService` (default the stable Service) and two backends,
//! the canary Service then the stable one, with their weights. It creates the split owned by
//! the Rollout (controller ownerReference), updates its spec when it differs, and refuses a split
//! of that name the Rollout does not own ("Rollout does not own TrafficSplit"). Argo's default
//! SMI API version is `v1alpha1`, whose weights are Kubernetes Quantities (written as strings,
//! `"30"`); `v1alpha2`/`v1alpha3` take numbers. weir uses the first of `v1alpha1`, `v1alpha2`,
//! `v1alpha3` the cluster serves.

use serde_json::json;
use weir_core::argo::types::SmiRouting;

use super::{Ctx, Routed, api, create, get, owned_by, resource, served_version, write_changes};

const GROUP: &str = "split.smi-spec.io";
const VERSIONS: &[&str] = &["v1alpha1", "v1alpha2", "v1alpha3"];
const FIELD: &str = "spec.strategy.canary.trafficRouting.smi";

/// Creates or updates the TrafficSplit.
pub(super) async fn route(ctx: &Ctx<'_>, smi: &SmiRouting) -> Routed {
    let Some(version) = served_version(ctx.client, GROUP, "TrafficSplit", VERSIONS).await? else {
        return Ok(Err(format!(
            "{FIELD}: Invalid value: \"\": the cluster serves no TrafficSplit ({GROUP})"
        )));
    };
    let name = smi
        .traffic_split_name
        .as_deref()
        .filter(|name| !name.is_empty())
        .unwrap_or(ctx.rollout);
    let root = smi
        .root_service
        .as_deref()
        .filter(|name| !name.is_empty())
        .unwrap_or(ctx.stable);
    let weight = |weight: i64| {
        if version == "v1alpha1" {
            json!(weight.to_string())
        } else {
            json!(weight)
        }
    };
    let spec = json!({
        "service": root,
        "backends": [
            {"service": ctx.canary, "weight": weight(ctx.weights.canary)},
            {"service": ctx.stable, "weight": weight(ctx.weights.stable)},
        ],
    });
    let splits = api(
        ctx.client,
        ctx.namespace,
        &resource(GROUP, version, "TrafficSplit", "trafficsplits"),
    );
    let Some(before) = get(&splits, name).await? else {
        let mut metadata = json!({"name": name, "namespace": ctx.namespace});
        if let Some(owner) = ctx.owner {
            metadata["ownerReferences"] = json!([owner]);
        }
        create(
            &splits,
            json!({
                "apiVersion": format!("{GROUP}/{version}"),
                "kind": "TrafficSplit",
                "metadata": metadata,
                "spec": spec,
            }),
        )
        .await?;
        return Ok(Ok(()));
    };
    if !owned_by(&before, ctx.owner) {
        return Ok(Err(format!(
            "{FIELD}.trafficSplitName: Invalid value: \"{name}\": Rollout does not own \
             TrafficSplit `{name}`"
        )));
    }
    let mut after = before.clone();
    after["spec"] = spec;
    write_changes(&splits, name, &before, &after).await?;
    Ok(Ok(()))
}
