//! `spec.target.statusTo` (seed 003: "translate the status back to the application"): a
//! rollout's status, also written onto an object the user names - typically the KubeVela
//! Application whose component it rolls out - so that whoever watches that object sees the
//! rollout without knowing weir:
//!
//! - annotations `weir.dev/rollout` (the rollout's name), `weir.dev/rollout-phase`,
//!   `weir.dev/rollout-run`, `weir.dev/rollout-canary-weight` (percent),
//!   `weir.dev/rollout-canary-revision` and `weir.dev/rollout-primary-revision`, merged into
//!   the object's own;
//! - a condition of type `WeirRollout` in `status.conditions` (status `True` once a run
//!   succeeded, `False` after a rollback, `Unknown` while running or waiting; reason the phase),
//!   written through the status subresource when the kind has one, replacing only weir's
//!   condition: the object's other conditions stay as they are.

use std::collections::BTreeMap;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use weir_core::model::{ObjectReference, Phase, RolloutStatus};
use weir_store::RolloutKey;

use crate::target::FIELD_MANAGER;

/// The type of weir's condition on the object.
pub const CONDITION_TYPE: &str = "WeirRollout";

/// The annotations that carry `status` of rollout `key`.
pub fn annotations(key: &RolloutKey, status: &RolloutStatus) -> BTreeMap<String, String> {
    let phase = serde_json::to_value(status.phase)
        .ok()
        .and_then(|phase| phase.as_str().map(str::to_string))
        .unwrap_or_default();
    BTreeMap::from([
        ("weir.dev/rollout".to_string(), key.name.clone()),
        ("weir.dev/rollout-phase".to_string(), phase),
        ("weir.dev/rollout-run".to_string(), status.run.to_string()),
        (
            "weir.dev/rollout-canary-weight".to_string(),
            status.canary_weight.to_string(),
        ),
        (
            "weir.dev/rollout-canary-revision".to_string(),
            status.canary_revision.clone().unwrap_or_default(),
        ),
        (
            "weir.dev/rollout-primary-revision".to_string(),
            status.primary_revision.clone().unwrap_or_default(),
        ),
    ])
}

/// The `WeirRollout` condition for `status` of rollout `key`.
pub fn condition(key: &RolloutKey, status: &RolloutStatus) -> Value {
    let state = match status.phase {
        Phase::Succeeded => "True",
        Phase::Failed | Phase::Stopped => "False",
        _ => "Unknown",
    };
    let phase = serde_json::to_value(status.phase).unwrap_or(Value::Null);
    let reason = phase.as_str().unwrap_or("Unknown");
    let revision = status.canary_revision.as_deref().unwrap_or("none yet");
    let mut condition = json!({
        "type": CONDITION_TYPE,
        "status": state,
        "reason": reason,
        "message": format!(
            "weir rollout {}: {reason}, run {}, canary weight {}, canary revision {revision}",
            key.name, status.run, status.canary_weight
        ),
    });
    if let Some(at) = status.last_transition_at {
        condition["lastTransitionTime"] = json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    }
    condition
}

/// Writes the status of rollout `key` onto `reference` (in the rollout's namespace): the
/// annotations, then the condition. An object that does not exist (yet) is not an error:
/// the next status change writes again.
pub async fn write(
    client: &kube::Client,
    key: &RolloutKey,
    reference: &ObjectReference,
    status: &RolloutStatus,
) -> Result<(), kube::Error> {
    let api_version = reference.api_version.as_deref().unwrap_or_default();
    let kind = reference.kind.as_deref().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let resource = match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((resource, _)) => resource,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        // Not served (yet): guess the plural as Kubernetes does for most kinds.
        Err(_) => ApiResource::from_gvk(&gvk),
    };
    let namespace = reference.namespace.as_deref().unwrap_or(&key.namespace);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    if api.get_opt(&reference.name).await?.is_none() {
        return Ok(());
    }
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    let annotated = api
        .patch(
            &reference.name,
            &params,
            &Patch::Merge(json!({"metadata": {"annotations": annotations(key, status)}})),
        )
        .await?;
    // The whole list, with weir's condition replaced, guarded by the resourceVersion read: a
    // merge patch replaces lists, so a concurrent writer's conditions must not be overwritten.
    let mut conditions: Vec<Value> = annotated.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|existing| existing["type"] != CONDITION_TYPE)
        .collect();
    conditions.push(condition(key, status));
    let patch = Patch::Merge(json!({
        "metadata": {"resourceVersion": annotated.metadata.resource_version},
        "status": {"conditions": conditions},
    }));
    match api.patch_status(&reference.name, &params, &patch).await {
        Ok(_) => Ok(()),
        // A kind without the status subresource keeps its status in the main resource.
        Err(kube::Error::Api(status)) if status.code == 404 => api
            .patch(&reference.name, &params, &patch)
            .await
            .map(|_| ()),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use weir_core::units::Weight;

    #[test]
    fn the_condition_and_annotations_say_the_phase_run_and_weight() {
        let key = RolloutKey::new("shop", "frontend");
        let status = RolloutStatus {
            phase: Phase::Progressing,
            run: 2,
            canary_weight: Weight::from_percent_f64(20.0).unwrap(),
            canary_revision: Some("abc".into()),
            ..RolloutStatus::default()
        };
        let annotations = annotations(&key, &status);
        assert_eq!(annotations["weir.dev/rollout-phase"], "Progressing");
        assert_eq!(annotations["weir.dev/rollout-canary-weight"], "20%");
        assert_eq!(annotations["weir.dev/rollout-run"], "2");
        let condition = condition(&key, &status);
        assert_eq!(condition["type"], "WeirRollout");
        assert_eq!(condition["status"], "Unknown");
        assert_eq!(condition["reason"], "Progressing");
    }
}
