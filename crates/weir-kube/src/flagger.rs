//! Flagger's `Canary` on a cluster weir runs: each Canary becomes a weir Rollout of the same name
//! (converted with weir-core's Flagger import, owned by the Canary, labelled
//! [`CANARY_LABEL`]), which the operator runs like any other; the Rollout's status is written
//! back onto the Canary in Flagger's status shape, so `kubectl get canaries`, `kubectl wait
//! --for=condition=Promoted canary/NAME` and dashboards that read Flagger's status keep working.
//!
//! The Rollout is visible (`kubectl get rollouts.weir.dev`): it shows exactly what weir made of
//! the Canary, and its own status keeps weir's state and history.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Map, Value, json};
use weir_core::document::{self, Document};
use weir_core::flagger::API_GROUP;
use weir_core::model::{Phase, RolloutStatus, Target};

use crate::crd::{GROUP, VERSION, promoted_condition};

/// The label on a Rollout made from a Canary; its value is the Canary's name.
pub const CANARY_LABEL: &str = "weir.dev/canary";

/// The version of Flagger's resources weir reads.
pub const FLAGGER_VERSION: &str = "v1beta1";

/// `canaries.flagger.app`.
pub fn canaries_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(API_GROUP, FLAGGER_VERSION, "Canary"),
        "canaries",
    )
}

/// `metrictemplates.flagger.app`.
pub fn metric_templates_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(API_GROUP, FLAGGER_VERSION, "MetricTemplate"),
        "metrictemplates",
    )
}

/// `alertproviders.flagger.app`.
pub fn alert_providers_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(API_GROUP, FLAGGER_VERSION, "AlertProvider"),
        "alertproviders",
    )
}

/// A Flagger object as the document weir-core's import reads: what its author wrote, without
/// the server's bookkeeping.
pub fn authored(object: &DynamicObject, kind: &str) -> Value {
    let mut metadata = json!({
        "name": object.metadata.name,
        "namespace": object.metadata.namespace,
    });
    if let Some(labels) = &object.metadata.labels {
        metadata["labels"] = json!(labels);
    }
    if let Some(annotations) = &object.metadata.annotations {
        // kubectl's copy of the last applied manifest is no part of the document.
        let kept: Map<String, Value> = annotations
            .iter()
            .filter(|(key, _)| key.as_str() != "kubectl.kubernetes.io/last-applied-configuration")
            .map(|(key, value)| (key.clone(), json!(value)))
            .collect();
        if !kept.is_empty() {
            metadata["annotations"] = Value::Object(kept);
        }
    }
    json!({
        "apiVersion": format!("{API_GROUP}/{FLAGGER_VERSION}"),
        "kind": kind,
        "metadata": metadata,
        "spec": object.data.get("spec").cloned().unwrap_or(Value::Null),
    })
}

/// The Rollout object weir runs for `canary`, and the import's warnings (Flagger fields weir
/// keeps but does not act on). A Canary that names no provider gets `default_provider` (the
/// operator's `--provider`, as Flagger's `-mesh-provider`), else istio as with Flagger. An error
/// lists why the Canary cannot be run.
pub fn rollout_for(
    canary: &DynamicObject,
    default_provider: Option<&str>,
) -> Result<(Value, Vec<String>), String> {
    let loaded = document::load_value(&authored(canary, "Canary")).map_err(|refused| {
        refused
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    let Document::Rollout(mut rollout) = loaded.document else {
        return Err("a Canary did not convert to a Rollout".into());
    };
    if let (Target::Kubernetes(kubernetes), Some(provider)) =
        (&mut rollout.spec.target, default_provider)
        && kubernetes.provider.is_none()
    {
        kubernetes.provider = Some(provider.to_string());
    }
    let name = canary.metadata.name.clone().unwrap_or_default();
    let mut labels = rollout.metadata.labels.clone();
    labels.insert(CANARY_LABEL.into(), name.clone());
    let object = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "Rollout",
        "metadata": {
            "name": name,
            "namespace": canary.metadata.namespace,
            "labels": labels,
            "annotations": rollout.metadata.annotations,
            "ownerReferences": [{
                "apiVersion": format!("{API_GROUP}/{FLAGGER_VERSION}"),
                "kind": "Canary",
                "name": name,
                "uid": canary.metadata.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": serde_json::to_value(&rollout.spec).map_err(|error| error.to_string())?,
    });
    Ok((
        object,
        loaded.warnings.iter().map(ToString::to_string).collect(),
    ))
}

/// A Rollout's status in Flagger's Canary status shape (`phase`, `canaryWeight`,
/// `failedChecks`, `iterations`, `lastAppliedSpec`, `lastPromotedSpec`, `lastTransitionTime`,
/// `conditions[Promoted]`). Fields without a value are left out: Flagger's schema has no nulls.
pub fn canary_status(status: &RolloutStatus) -> Value {
    let phase = match status.phase {
        // Flagger has no "held": a held run is still progressing, waiting for its gate.
        Phase::Held => Phase::Progressing,
        phase => phase,
    };
    let mut written = json!({
        "phase": phase.as_str(),
        "canaryWeight": status.canary_weight,
        "failedChecks": status.failed_checks,
        "iterations": status.iterations,
        "lastAppliedSpec": status.canary_revision.as_ref().or(status.primary_revision.as_ref()),
        "lastPromotedSpec": status.primary_revision,
        "lastTransitionTime": status.last_transition_at.map(|at| at.to_string()),
        "conditions": [promoted_condition(status)],
    });
    drop_nulls(&mut written);
    written
}

fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, value| !value.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn canary(spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "flagger.app/v1beta1",
            "kind": "Canary",
            "metadata": {"name": "podinfo", "namespace": "shop", "uid": "u-1",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn a_canary_becomes_a_rollout_it_owns() {
        let (rollout, _) = rollout_for(
            &canary(json!({
                "provider": "istio",
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
                "service": {"port": 9898},
                "analysis": {"interval": "1m", "threshold": 5, "maxWeight": 50, "stepWeight": 10},
            })),
            Some("nginx"),
        )
        .unwrap();
        assert_eq!(rollout["kind"], "Rollout");
        assert_eq!(rollout["metadata"]["labels"][CANARY_LABEL], "podinfo");
        assert_eq!(rollout["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(rollout["metadata"]["ownerReferences"][0]["kind"], "Canary");
        assert_eq!(rollout["spec"]["target"]["kind"], "kubernetes");
        assert_eq!(rollout["spec"]["target"]["provider"], "istio");
    }

    #[test]
    fn a_canary_without_a_provider_gets_the_operators_default() {
        let spec = json!({
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
            "service": {"port": 9898},
            "analysis": {"interval": "1m", "threshold": 5, "maxWeight": 50, "stepWeight": 10},
        });
        let (rollout, _) = rollout_for(&canary(spec.clone()), Some("gatewayapi:v1")).unwrap();
        assert_eq!(rollout["spec"]["target"]["provider"], "gatewayapi:v1");
        let (rollout, _) = rollout_for(&canary(spec), None).unwrap();
        assert!(rollout["spec"]["target"]["provider"].is_null(), "{rollout}");
    }

    #[test]
    fn an_invalid_canary_says_which_field() {
        let error = rollout_for(&canary(json!({"service": {"port": 9898}})), None).unwrap_err();
        assert!(error.contains("targetRef"), "{error}");
    }

    #[test]
    fn the_status_has_flaggers_shape() {
        let status = RolloutStatus {
            phase: Phase::Held,
            failed_checks: 1,
            iterations: 3,
            canary_revision: Some("abc".into()),
            ..RolloutStatus::default()
        };
        let written = canary_status(&status);
        assert_eq!(written["phase"], "Progressing");
        assert_eq!(written["failedChecks"], 1);
        assert_eq!(written["lastAppliedSpec"], "abc");
        assert!(written.get("lastPromotedSpec").is_none(), "{written}");
        assert_eq!(written["conditions"][0]["type"], "Promoted");
        assert!(written["conditions"][0].get("lastUpdateTime").is_none());
    }
}
