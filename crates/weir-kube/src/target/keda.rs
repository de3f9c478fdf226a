//! KEDA ScaledObjects named by `spec.target.autoscalerRef` (kind `ScaledObject`), Flagger's way:
//! the primary gets a copy scaling `TARGET-primary` ([`workload::primary_scaled_object`]), and
//! the target's own ScaledObject is paused at zero replicas
//! ([`workload::KEDA_PAUSED_REPLICAS`]) whenever the target waits at zero - set up, after a
//! promotion, after a rollback - and resumed while a run needs the target's pods. Reverting
//! deletes the copy and resumes the target's.

use super::*;
use crate::workload::KEDA_PAUSED_REPLICAS;

/// The ScaledObject kind `autoscalerRef` names for KEDA.
pub(super) const SCALED_OBJECT: &str = "ScaledObject";

fn scaled_objects(
    client: &kube::Client,
    namespace: &str,
    reference: &weir_core::model::AutoscalerReference,
) -> Api<DynamicObject> {
    let api_version = reference
        .api_version
        .as_deref()
        .unwrap_or("keda.sh/v1alpha1");
    let (group, version) = api_version
        .split_once('/')
        .unwrap_or(("keda.sh", api_version));
    let gvk = GroupVersionKind::gvk(group, version, SCALED_OBJECT);
    let resource = ApiResource::from_gvk_with_plural(&gvk, "scaledobjects");
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// The `autoscalerRef` when it names a KEDA ScaledObject.
fn scaled_object_ref<'a>(
    settings: &Settings<'a>,
) -> Option<&'a weir_core::model::AutoscalerReference> {
    settings
        .kubernetes
        .autoscaler_ref
        .as_ref()
        .filter(|reference| reference.kind.as_deref() == Some(SCALED_OBJECT))
}

impl KubernetesTargets {
    /// Applies the primary's copy of the target's ScaledObject (waiting while it does not
    /// exist, as for a HorizontalPodAutoscaler).
    pub(super) async fn apply_primary_scaled_object(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        owner: &OwnerReference,
    ) -> Result<(), ProviderError> {
        let Some(reference) = scaled_object_ref(settings) else {
            return Ok(());
        };
        let api = scaled_objects(&self.client, &key.namespace, reference);
        let scaled_object = api
            .get_opt(&reference.name)
            .await
            .map_err(|error| api_error("reading the target's ScaledObject", error))?
            .ok_or_else(|| {
                ProviderError::transient(format!(
                    "the ScaledObject {}/{} named by spec.target.autoscalerRef does not exist (yet)",
                    key.namespace, reference.name
                ))
            })?;
        let scaled_object = serde_json::to_value(&scaled_object).unwrap_or(Value::Null);
        let primary = workload::primary_scaled_object(
            &scaled_object,
            settings.target_name,
            owner,
            reference.primary_scaler_queries.as_ref(),
            reference.primary_scaler_replicas.as_ref(),
        );
        let name = format!("{}{PRIMARY_SUFFIX}", reference.name);
        api.patch(&name, &apply_params(), &Patch::Apply(&primary))
            .await
            .map_err(|error| api_error("applying the primary's ScaledObject", error))?;
        Ok(())
    }

    /// Pauses the target's ScaledObject at zero replicas (`paused`), or resumes it, so that KEDA
    /// does not scale the target while it should wait at zero. Without a ScaledObject: nothing.
    pub(super) async fn pause_target_scaler(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        paused: bool,
    ) -> Result<(), ProviderError> {
        let Some(reference) = scaled_object_ref(settings) else {
            return Ok(());
        };
        let api = scaled_objects(&self.client, &key.namespace, reference);
        let Some(live) = api
            .get_opt(&reference.name)
            .await
            .map_err(|error| api_error("reading the target's ScaledObject", error))?
        else {
            return Ok(());
        };
        let current = live
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(KEDA_PAUSED_REPLICAS));
        let wanted = paused.then_some("0");
        if current.map(String::as_str) == wanted {
            return Ok(());
        }
        let value = wanted.map_or(Value::Null, |zero| Value::String(zero.into()));
        api.patch(
            &reference.name,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"metadata": {"annotations": {KEDA_PAUSED_REPLICAS: value}}})),
        )
        .await
        .map_err(|error| api_error("pausing or resuming the target's ScaledObject", error))?;
        Ok(())
    }

    /// Reverting: the primary's copy deleted, the target's ScaledObject resumed.
    pub(super) async fn revert_scaled_object(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<(), ProviderError> {
        let Some(reference) = scaled_object_ref(settings) else {
            return Ok(());
        };
        let api = scaled_objects(&self.client, &key.namespace, reference);
        let name = format!("{}{PRIMARY_SUFFIX}", reference.name);
        delete_if_present(&api, &name, &format!("the ScaledObject {name}")).await?;
        self.pause_target_scaler(key, settings, false).await
    }
}
