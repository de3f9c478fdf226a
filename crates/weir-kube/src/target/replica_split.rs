//! The canary without a mesh: `provider: kubernetes` with canary steps splits traffic by
//! replica ratio, as Argo Rollouts' basic canary does ([`crate::basic_canary`] has the
//! arithmetic). The apex Service selects the pods of both the primary and the target by a label
//! both pod templates carry ([`APEX_LABEL`]), so each version's share of ready pods is its share
//! of requests. Each canary weight sets the two Deployments' replicas - the primary first, then
//! the target - one reconcile's worth at a time within `maxSurge`/`maxUnavailable` of the
//! target's rolling-update strategy, so the available pods never drop below the desired count
//! minus `maxUnavailable`; until the split is reached and available the effect answers a
//! transient error and the engine reconciles again at the next tick. The history notes the
//! effective weight (the canary's share of the pods the step asks for) once, when the step is
//! taken.
//!
//! The target's pod template gets [`APEX_LABEL`] while it is at zero replicas (before a run
//! scales it up), under the field manager `weir`; the label is left out of the revision, so
//! adding it starts no run. The desired count is kept on the primary ([`REPLICAS_ANNOTATION`]),
//! since the run scales the primary down.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::basic_canary::{self, BasicCanary, IntOrPercent, Set};
use crate::workload::APEX_LABEL;
/// The annotation on the primary with the desired total of pods (the target's replicas when
/// the primary was created): the run moves pods between the two Deployments, never adds any
/// beyond `maxSurge`.
pub const REPLICAS_ANNOTATION: &str = "weir.dev/replicas";

/// Whether a rollout's settings ask for the replica split (copy mode, provider `kubernetes`,
/// canary steps).
pub(super) fn splits_replicas(rollout: &Rollout, provider: Provider, mode: KubernetesMode) -> bool {
    mode == KubernetesMode::Copy
        && provider == Provider::Kubernetes
        && matches!(rollout.spec.plan, weir_core::model::Plan::Canary(_))
}

/// The pods the rollout should run in all: the primary's annotation, else its replicas.
pub(super) fn total_replicas(primary: &Deployment) -> i32 {
    primary
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(REPLICAS_ANNOTATION))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| replicas(primary))
}

fn replicas(deployment: &Deployment) -> i32 {
    deployment.spec.replicas.unwrap_or(1)
}

/// Available pods of the Deployment's newest spec: none until its controller has seen it.
fn available(deployment: &Deployment) -> i32 {
    let Some(status) = &deployment.status else {
        return 0;
    };
    let generation = deployment.metadata.generation.unwrap_or(0);
    if status.observed_generation.unwrap_or(0) < generation {
        return 0;
    }
    status.available_replicas.unwrap_or(0)
}

/// The target's `maxSurge` and `maxUnavailable` (Kubernetes' defaults: 25% each), resolved
/// against `total`.
fn surge_and_unavailable(target: &Deployment, total: i32) -> (i32, i32) {
    let rolling = target
        .spec
        .strategy
        .as_ref()
        .and_then(|strategy| strategy.rolling_update.as_ref());
    let read = |value: Option<&IntOrString>| -> IntOrPercent {
        match value {
            Some(IntOrString::Int(count)) => IntOrPercent::Int(*count),
            Some(IntOrString::String(text)) => text
                .trim_end_matches('%')
                .parse()
                .map(IntOrPercent::Percent)
                .unwrap_or(IntOrPercent::Percent(25)),
            None => IntOrPercent::Percent(25),
        }
    };
    let surge = read(rolling.and_then(|rolling| rolling.max_surge.as_ref()));
    let unavailable = read(rolling.and_then(|rolling| rolling.max_unavailable.as_ref()));
    basic_canary::resolve_surge_unavailable(total, Some(&surge), Some(&unavailable))
}

impl KubernetesTargets {
    /// Moves the pods towards `weight` on the canary: one reconcile's worth of scaling, then
    /// `Ok` once the split is reached with every pod available, else a transient error that
    /// says where it stands (the engine reconciles again at the next tick).
    pub(super) async fn split_replicas(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        weight: Weight,
    ) -> Result<(), ProviderError> {
        let target = self.target(key, settings).await?;
        let Some(primary) = self.primary(key, settings).await? else {
            return Err(ProviderError::transient(format!(
                "the primary {}{PRIMARY_SUFFIX} does not exist (yet)",
                settings.target_name
            )));
        };
        let total = total_replicas(&primary);
        let (max_surge, max_unavailable) = surge_and_unavailable(&target, total);
        let weight_points = weight.basis_points();
        let (stable, canary) = basic_canary::replica_counts(&BasicCanary {
            replicas: total,
            weight: weight_points,
            max_weight: Weight::FULL.basis_points(),
            max_surge,
            max_unavailable,
            stable: Some(Set {
                spec: replicas(&primary),
                available: available(&primary),
            }),
            canary: Some(Set {
                spec: replicas(&target),
                available: available(&target),
            }),
            older: None,
        });
        // The primary first (Argo's order): raising it never lowers capacity.
        if stable != replicas(&primary) {
            self.scale_deployment(key, &primary, stable).await?;
        }
        if canary != replicas(&target) {
            self.scale_target(key, settings, canary).await?;
        }
        let (want_canary, want_stable) = basic_canary::approximate_split(
            total,
            weight_points,
            Weight::FULL.basis_points(),
            max_surge,
        );
        // The effective weight is known when the step is taken (the targets, not the pods'
        // progress), so the history says it then, once per step.
        let first = self
            .split_noted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), weight_points)
            != Some(weight_points);
        let effective =
            basic_canary::effective_weight(want_stable, want_canary, Weight::FULL.basis_points());
        if first && effective != weight_points {
            self.note(
                key,
                format!(
                    "canary weight {weight} by pods: {want_canary} canary and {want_stable} primary pods, an effective {}",
                    Weight::from_basis_points(effective)
                ),
            );
        }
        let reached = stable == want_stable
            && canary == want_canary
            && available(&primary) >= want_stable
            && available(&target) >= want_canary
            && replicas(&primary) == want_stable
            && replicas(&target) == want_canary;
        if !reached {
            return Err(ProviderError::transient(format!(
                "moving to a canary weight of {weight} by pods: canary {} of {want_canary} available, primary {} of {want_stable}",
                available(&target).min(want_canary),
                available(&primary).min(want_stable),
            )));
        }
        Ok(())
    }

    /// Sets one Deployment's replicas (only that field).
    async fn scale_deployment(
        &self,
        key: &RolloutKey,
        deployment: &Deployment,
        replicas: i32,
    ) -> Result<(), ProviderError> {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        self.deployments(&key.namespace)
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .map_err(|error| api_error(&format!("scaling Deployment {name}"), error))?;
        Ok(())
    }

    /// Gives the target's pod template [`APEX_LABEL`], so that the apex Service selects its
    /// pods. Only while it is at zero replicas: the label changes the pod template, which would
    /// otherwise restart its pods.
    pub(super) async fn label_target_pods(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<(), ProviderError> {
        let target = self.target(key, settings).await?;
        let apex = settings.names(&key.namespace).apex;
        let labelled = target
            .spec
            .template
            .metadata
            .as_ref()
            .and_then(|metadata| metadata.labels.as_ref())
            .and_then(|labels| labels.get(APEX_LABEL))
            == Some(&apex);
        if labelled || replicas(&target) != 0 {
            return Ok(());
        }
        self.deployments(&key.namespace)
            .patch(
                settings.target_name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(
                    json!({"spec": {"template": {"metadata": {"labels": {APEX_LABEL: apex}}}}}),
                ),
            )
            .await
            .map_err(|error| {
                api_error("labelling the target's pods for the apex Service", error)
            })?;
        Ok(())
    }

    /// Makes an existing apex Service select by [`APEX_LABEL`] alone, in one write. Server-side
    /// apply merges a selector key by key, so the keys of a Service weir takes over (`app: NAME`,
    /// written by its owner) would stay beside the label and match no pod at all.
    pub(super) async fn select_only_both(
        &self,
        key: &RolloutKey,
        apex: &str,
    ) -> Result<(), ProviderError> {
        let live = self
            .services(&key.namespace)
            .get_opt(apex)
            .await
            .map_err(|error| api_error("reading the apex Service", error))?;
        let Some(selector) = live
            .and_then(|service| service.spec)
            .and_then(|spec| spec.selector)
        else {
            return Ok(());
        };
        let wanted = [(APEX_LABEL.to_string(), apex.to_string())].into();
        if selector == wanted {
            return Ok(());
        }
        let mut others: serde_json::Map<String, Value> = selector
            .into_keys()
            .map(|label| (label, Value::Null))
            .collect();
        others.insert(APEX_LABEL.into(), Value::String(apex.to_string()));
        self.services(&key.namespace)
            .patch(
                apex,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(json!({"spec": {"selector": others}})),
            )
            .await
            .map_err(|error| api_error("narrowing the apex Service's selector", error))?;
        Ok(())
    }

    /// Whether the target runs the pods the current weight asks for, all available (none
    /// asked: ready).
    pub(super) fn canary_split_ready(
        primary: Option<&Deployment>,
        target: &Deployment,
        weight: Weight,
    ) -> bool {
        let Some(primary) = primary else {
            return false;
        };
        let total = total_replicas(primary);
        let (max_surge, _) = surge_and_unavailable(target, total);
        let (want_canary, _) = basic_canary::approximate_split(
            total,
            weight.basis_points(),
            Weight::FULL.basis_points(),
            max_surge,
        );
        replicas(target) == want_canary && available(target) >= want_canary
    }
}

/// The primary as the replica split wants it: its pods carry [`APEX_LABEL`] and it remembers
/// the total in [`REPLICAS_ANNOTATION`].
pub(super) fn mark_primary(primary: &mut Deployment, apex: &str, total: i32) {
    primary
        .spec
        .template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default)
        .insert(APEX_LABEL.into(), apex.to_string());
    primary
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(REPLICAS_ANNOTATION.into(), total.to_string());
}

/// The apex Service selecting both versions' pods.
pub(super) fn select_both(apex: &mut Service, name: &str) {
    if let Some(spec) = apex.spec.as_mut() {
        spec.selector = Some([(APEX_LABEL.to_string(), name.to_string())].into());
    }
}
