//! `mode: managed` (seed 001, the IstioCanaryDeployment operator): the rollout carries the pod
//! template (`spec.target.template`), the replica count and the Service's port, and weir owns
//! every object that serves them, each with an owner reference to the rollout (deleting the
//! rollout garbage-collects them; weir does nothing else on delete).
//!
//! | object | between runs | during a run |
//! |---|---|---|
//! | Deployment `NAME` | the promoted template, `replicas` | the same |
//! | Service `NAME` | selects `NAME`'s pods | the same |
//! | VirtualService / HTTPRoute / TrafficSplit `NAME` | all traffic to `NAME` | split between `NAME` and `NAME-canary` |
//! | Deployment and Service `NAME-canary` | absent | the new template |
//!
//! A run starts only when the pod template (or a ConfigMap or Secret it reads) changes: the
//! replica count is applied in place. Promotion gives Deployment `NAME` the canary's template;
//! `NAME-canary` is deleted once all traffic is back on `NAME`. Every tick compares the objects
//! with what weir last applied to them: a change made by hand is reverted and reported in the
//! history (and so as a Kubernetes Event).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use weir_core::model::Phase;

use super::*;

/// The label with the rollout's name on the Deployments weir creates in this mode and their pods.
pub const ROLLOUT_LABEL: &str = "weir.dev/rollout";
/// The label that tells the primary's pods (`primary`) from the canary's (`canary`).
pub const TRACK_LABEL: &str = "weir.dev/track";
/// The annotation on Deployment `NAME` with the pod template it was promoted with, so that a
/// change made by hand can be undone even by an operator that did not apply it.
pub const TEMPLATE_ANNOTATION: &str = "weir.dev/template";

/// Who a managed Deployment serves as.
#[derive(Clone, Copy)]
enum Track {
    Primary,
    Canary,
}

impl Track {
    fn label(self) -> &'static str {
        match self {
            Track::Primary => "primary",
            Track::Canary => "canary",
        }
    }
}

/// What a managed rollout's spec says, read once per call.
struct Wanted {
    /// The template as written in the rollout.
    template: PodTemplateSpec,
    /// Its revision (with the ConfigMaps and Secrets its pods read).
    revision: String,
    configs: TrackedConfigs,
    replicas: i32,
}

impl KubernetesTargets {
    async fn wanted(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<Wanted, ProviderError> {
        let template: PodTemplateSpec = settings
            .kubernetes
            .template
            .clone()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|error| {
                ProviderError::permanent(format!(
                    "spec.target.template is not a pod template: {error}"
                ))
            })?
            .ok_or_else(|| {
                ProviderError::permanent("spec.target.template is required in mode managed")
            })?;
        let replicas = settings
            .kubernetes
            .replicas
            .map_or(1, |replicas| i32::try_from(replicas).unwrap_or(i32::MAX));
        // The configs as the canary's pods would read them.
        let reader = managed_deployment(
            settings,
            &key.namespace,
            Track::Canary,
            &template,
            replicas,
            "",
            &OwnerReference::default(),
        );
        let configs = self.tracked_configs(&key.namespace, &reader).await?;
        Ok(Wanted {
            revision: workload::template_revision(&template, &configs),
            template,
            configs,
            replicas,
        })
    }

    pub(super) async fn managed_observe(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        status: &RolloutStatus,
    ) -> Result<TargetObservation, ProviderError> {
        let wanted = self.wanted(key, settings).await?;
        let primary = self.managed_get(key, settings, Track::Primary).await?;
        let canary = self.managed_get(key, settings, Track::Canary).await?;
        let observation = TargetObservation {
            canary_revision: Some(wanted.revision.clone()),
            primary_revision: primary.as_ref().and_then(revision_of),
            primary_ready: primary.as_ref().is_some_and(ready),
            // A canary still running an older template is not the one under test.
            canary_ready: canary.as_ref().is_some_and(|canary| {
                ready(canary) && revision_of(canary).as_deref() == Some(wanted.revision.as_str())
            }),
        };
        // Every tick: what weir owns is as weir left it (or set again, and reported).
        if self.check_fence().is_ok() {
            self.managed_sync(key, rollout, settings, status, &wanted, primary)
                .await?;
        }
        Ok(observation)
    }

    pub(super) async fn managed_reconcile(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        status: &RolloutStatus,
    ) -> Result<(), ProviderError> {
        let wanted = self.wanted(key, settings).await?;
        let primary = self.managed_get(key, settings, Track::Primary).await?;
        self.managed_sync(key, rollout, settings, status, &wanted, primary)
            .await?;
        if !status.phase.in_run() {
            self.remove_managed_canary(key, settings).await?;
        }
        Ok(())
    }

    pub(super) async fn managed_apply(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        status: &RolloutStatus,
        effect: &Effect,
    ) -> Result<(), ProviderError> {
        match effect {
            Effect::Prepare => {
                let wanted = self.wanted(key, settings).await?;
                let primary = self.managed_get(key, settings, Track::Primary).await?;
                self.managed_sync(key, rollout, settings, status, &wanted, primary)
                    .await
            }
            Effect::SetRoute(route) => {
                // The Services first: a route never names a Service that does not exist.
                let wanted = self.wanted(key, settings).await?;
                let primary = self.managed_get(key, settings, Track::Primary).await?;
                self.managed_sync(key, rollout, settings, status, &wanted, primary)
                    .await?;
                let owner = serde_json::to_value(owner_of(rollout)).unwrap_or(Value::Null);
                let names = self.managed_names(key, settings).await?;
                self.apply_route_objects(key, settings, &names, route, status.run, &owner)
                    .await
            }
            // The canary's objects come and go with the run; the promoted template goes to
            // the primary: both are what `managed_sync` makes of the new status.
            Effect::ScaleCanary(Scale::Up) | Effect::Promote { .. } => {
                let wanted = self.wanted(key, settings).await?;
                let primary = self.managed_get(key, settings, Track::Primary).await?;
                self.managed_sync(key, rollout, settings, status, &wanted, primary)
                    .await?;
                if matches!(effect, Effect::Promote { .. })
                    && settings.kubernetes.skip_canary == Some(true)
                {
                    self.clear_skip_canary(key, &wanted.revision).await?;
                }
                Ok(())
            }
            Effect::ScaleCanary(Scale::Down) => self.remove_managed_canary(key, settings).await,
            // Deleting the rollout collects what it owns: nothing to undo.
            Effect::Finalize | Effect::RunHooks { .. } | Effect::Notify(_) => Ok(()),
        }
    }

    async fn managed_get(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        track: Track,
    ) -> Result<Option<Deployment>, ProviderError> {
        self.deployments(&key.namespace)
            .get_opt(&managed_name(settings, track))
            .await
            .map_err(|error| api_error("reading a managed Deployment", error))
    }

    /// The Services of a managed rollout: `NAME` is the apex and the primary's.
    async fn managed_names(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<Names, ProviderError> {
        let wanted = self.wanted(key, settings).await?;
        let reader = managed_deployment(
            settings,
            &key.namespace,
            Track::Primary,
            &wanted.template,
            1,
            "",
            &OwnerReference::default(),
        );
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        Ok(Names {
            namespace: key.namespace.clone(),
            apex: settings.target_name.to_string(),
            primary: settings.target_name.to_string(),
            canary: managed_name(settings, Track::Canary),
            port: workload::service_port(&reader, &service)
                .map_err(|error| ProviderError::permanent(error.to_string()))?,
        })
    }

    /// Brings every object the rollout owns to what its spec and `status` say: Deployment and
    /// Service `NAME` always, `NAME-canary`'s during a run, the route. An object that differs
    /// from what this process last applied to it was changed by hand: it is applied again and
    /// the change reported.
    async fn managed_sync(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        status: &RolloutStatus,
        wanted: &Wanted,
        live_primary: Option<Deployment>,
    ) -> Result<(), ProviderError> {
        let owner = owner_of(rollout);
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        let namespace = key.namespace.as_str();
        // The primary runs the spec's template once that revision is promoted (or at set-up);
        // until then the template it was promoted with, kept on it.
        let promoted = live_primary.is_none()
            || status.primary_revision.is_none()
            || status.primary_revision.as_deref() == Some(wanted.revision.as_str());
        let mut objects = Vec::new();
        let primary = if promoted {
            for config in wanted.configs.values() {
                objects.push(match workload::primary_config(config, &owner) {
                    TrackedConfig::ConfigMap(config_map) => to_json(&config_map)?,
                    TrackedConfig::Secret(secret) => to_json(&secret)?,
                });
            }
            let mut template = wanted.template.clone();
            if let Some(pod) = template.spec.as_mut() {
                workload::point_at_primary_configs(pod, &wanted.configs);
            }
            managed_deployment(
                settings,
                namespace,
                Track::Primary,
                &template,
                wanted.replicas,
                &wanted.revision,
                &owner,
            )
        } else {
            let live = live_primary.unwrap_or_default();
            let template = live
                .metadata
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(TEMPLATE_ANNOTATION))
                .and_then(|text| serde_json::from_str::<PodTemplateSpec>(text).ok())
                .unwrap_or_else(|| live.spec.template.clone());
            managed_deployment(
                settings,
                namespace,
                Track::Primary,
                &template,
                wanted.replicas,
                revision_of(&live).as_deref().unwrap_or_default(),
                &owner,
            )
        };
        let ports = workload::ports(&primary, &service)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        objects.push(to_json(&primary)?);
        if !status.is_set_up() {
            // Set-up: nothing routes to the primary, not even its Service, before it is
            // available.
            return self.apply_synced(key, objects).await;
        }
        objects.push(to_json(&workload::service_object(
            settings.target_name.to_string(),
            Some(namespace),
            pod_selector(settings, Track::Primary),
            ports.clone(),
            service.apex.as_ref(),
            &owner,
        ))?);
        if status.phase.in_run() && status.phase != Phase::Waiting {
            objects.push(to_json(&managed_deployment(
                settings,
                namespace,
                Track::Canary,
                &wanted.template,
                wanted.replicas,
                &wanted.revision,
                &owner,
            ))?);
            objects.push(to_json(&workload::service_object(
                managed_name(settings, Track::Canary),
                Some(namespace),
                pod_selector(settings, Track::Canary),
                ports,
                service.canary.as_ref(),
                &owner,
            ))?);
        }
        let names = Names {
            namespace: namespace.to_string(),
            apex: settings.target_name.to_string(),
            primary: settings.target_name.to_string(),
            canary: managed_name(settings, Track::Canary),
            port: workload::service_port(&primary, &service)
                .map_err(|error| ProviderError::permanent(error.to_string()))?,
        };
        let route = Route::of(&rollout.spec, status);
        let owner_value = serde_json::to_value(&owner).unwrap_or(Value::Null);
        // What the provider adjusted is noted when the route changes (SetRoute), not every tick.
        objects.extend(route_objects(settings, &names, &route, status.run, &owner_value)?.objects);
        self.apply_synced(key, objects).await
    }

    /// Applies `objects` in order, each reverted (and reported) first if changed by hand.
    async fn apply_synced(
        &self,
        key: &RolloutKey,
        objects: Vec<Value>,
    ) -> Result<(), ProviderError> {
        for object in objects {
            self.revert_hand_edit(key, &object).await?;
            self.apply_owned(key, object).await?;
        }
        Ok(())
    }

    /// If this process applied an object with `object`'s name before and it has changed since
    /// (or is gone), forgets it so that it is applied again, and reports the change.
    async fn revert_hand_edit(
        &self,
        key: &RolloutKey,
        object: &Value,
    ) -> Result<(), ProviderError> {
        let (resource, name) = resource_of(object)?;
        let id = format!("{}/{name}", resource.kind);
        let Some(applied) = self
            .applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .and_then(|applied| applied.get(&id).cloned())
        else {
            return Ok(());
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &key.namespace, &resource);
        let live = api
            .get_opt(&name)
            .await
            .map_err(|error| api_error(&format!("reading {id}"), error))?;
        let change = match live {
            None => Some("it was deleted".to_string()),
            Some(live) => {
                let live = serde_json::to_value(&live).unwrap_or(Value::Null);
                differs(&live, &applied, "").map(|path| format!("{path} was changed"))
            }
        };
        if let Some(change) = change {
            if let Some(applied) = self
                .applied
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_mut(key)
            {
                applied.remove(&id);
            }
            self.note(
                key,
                format!(
                    "reverted a change made by hand to {} {}/{name} ({change}): weir owns it (spec.target.mode: managed) and applied it again",
                    resource.kind, key.namespace
                ),
            );
        }
        Ok(())
    }

    /// Deletes Deployment and Service `NAME-canary` once the primary serves (never leaving
    /// nothing to serve); until then a transient error, so the engine tries again.
    async fn remove_managed_canary(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<(), ProviderError> {
        let name = managed_name(settings, Track::Canary);
        let canary = self.managed_get(key, settings, Track::Canary).await?;
        let service = self
            .services(&key.namespace)
            .get_opt(&name)
            .await
            .map_err(|error| api_error("reading the canary's Service", error))?;
        if canary.is_none() && service.is_none() {
            return Ok(());
        }
        let primary = self.managed_get(key, settings, Track::Primary).await?;
        if !primary.as_ref().is_some_and(ready) {
            return Err(ProviderError::transient(format!(
                "the canary {name} stays until {} is ready",
                settings.target_name
            )));
        }
        if let Some(applied) = self
            .applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(key)
        {
            applied.remove(&format!("Deployment/{name}"));
            applied.remove(&format!("Service/{name}"));
        }
        if canary.is_some() {
            delete_if_present(
                &self.deployments(&key.namespace),
                &name,
                "the canary's Deployment",
            )
            .await?;
        }
        if service.is_some() {
            delete_if_present(
                &self.services(&key.namespace),
                &name,
                "the canary's Service",
            )
            .await?;
        }
        Ok(())
    }

    /// `spec.target.skipCanary` did its work: weir clears it, so that the next template gets a
    /// canary again, and records which field manager had set it.
    async fn clear_skip_canary(
        &self,
        key: &RolloutKey,
        revision: &str,
    ) -> Result<(), ProviderError> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &key.namespace,
            &crate::store::rollouts_resource(),
        );
        let rollout = api
            .get_opt(&key.name)
            .await
            .map_err(|error| api_error("reading the rollout", error))?;
        let set_by = rollout
            .iter()
            .flat_map(|rollout| rollout.metadata.managed_fields.iter().flatten())
            .find(|entry| {
                entry.fields_v1.as_ref().is_some_and(|fields| {
                    fields.0["f:spec"]["f:target"].get("f:skipCanary").is_some()
                })
            })
            .map(|entry| {
                format!(
                    "{} ({}{})",
                    entry
                        .manager
                        .as_deref()
                        .unwrap_or("an unnamed field manager"),
                    entry.operation.as_deref().unwrap_or("a write"),
                    entry
                        .time
                        .as_ref()
                        .map(|time| format!(" at {}", time.0))
                        .unwrap_or_default()
                )
            })
            .unwrap_or_else(|| "an unknown field manager".into());
        api.patch(
            &key.name,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {"target": {"skipCanary": null}}})),
        )
        .await
        .map_err(|error| api_error("clearing spec.target.skipCanary", error))?;
        self.note(
            key,
            format!(
                "spec.target.skipCanary cleared: revision {revision} went live without a canary; the flag had been set by {set_by}"
            ),
        );
        Ok(())
    }
}

/// `NAME` or `NAME-canary`.
fn managed_name(settings: &Settings<'_>, track: Track) -> String {
    match track {
        Track::Primary => settings.target_name.to_string(),
        Track::Canary => format!("{}{CANARY_SUFFIX}", settings.target_name),
    }
}

/// The labels that select one track's pods.
fn pod_selector(settings: &Settings<'_>, track: Track) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ROLLOUT_LABEL.to_string(), settings.target_name.to_string()),
        (TRACK_LABEL.to_string(), track.label().to_string()),
    ])
}

/// Deployment `NAME` (primary) or `NAME-canary` running `template`, its pods labelled for their
/// track, annotated with `revision` (and, for the primary, the template itself).
fn managed_deployment(
    settings: &Settings<'_>,
    namespace: &str,
    track: Track,
    template: &PodTemplateSpec,
    replicas: i32,
    revision: &str,
    owner: &OwnerReference,
) -> Deployment {
    let selector = pod_selector(settings, track);
    let mut annotations = BTreeMap::from([(REVISION_ANNOTATION.to_string(), revision.to_string())]);
    if matches!(track, Track::Primary) {
        annotations.insert(
            TEMPLATE_ANNOTATION.to_string(),
            serde_json::to_string(template).unwrap_or_default(),
        );
    }
    let mut template = template.clone();
    let metadata = template.metadata.get_or_insert_with(Default::default);
    metadata
        .labels
        .get_or_insert_with(Default::default)
        .extend(selector.clone());
    Deployment {
        metadata: ObjectMeta {
            name: Some(managed_name(settings, track)),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([(
                ROLLOUT_LABEL.to_string(),
                settings.target_name.to_string(),
            )])),
            annotations: Some(annotations),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            },
            template,
            ..DeploymentSpec::default()
        },
        status: None,
    }
}

/// The revision a Deployment weir wrote is annotated with.
fn revision_of(deployment: &Deployment) -> Option<String> {
    deployment
        .metadata
        .annotations
        .as_ref()?
        .get(REVISION_ANNOTATION)
        .filter(|revision| !revision.is_empty())
        .cloned()
}

/// The first place where `live` lacks or changed something of `applied` (what the server
/// adds - defaults, status, bookkeeping - is not a change), as a path.
fn differs(live: &Value, applied: &Value, path: &str) -> Option<String> {
    match (live, applied) {
        (Value::Object(live), Value::Object(applied)) => applied.iter().find_map(|(key, value)| {
            let path = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match live.get(key) {
                Some(live) => differs(live, value, &path),
                None => Some(path),
            }
        }),
        (Value::Array(live), Value::Array(applied)) if live.len() == applied.len() => live
            .iter()
            .zip(applied)
            .enumerate()
            .find_map(|(index, (live, applied))| {
                differs(live, applied, &format!("{path}[{index}]"))
            }),
        (Value::Number(live), Value::Number(applied)) => {
            (live.as_f64() != applied.as_f64()).then(|| path.to_string())
        }
        (live, applied) => (live != applied).then(|| path.to_string()),
    }
}

pub(super) fn to_json(object: &impl serde::Serialize) -> Result<Value, ProviderError> {
    serde_json::to_value(object).map_err(|error| {
        ProviderError::permanent(format!("an object weir builds cannot be written: {error}"))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::differs;
    use serde_json::json;

    #[test]
    fn what_the_server_adds_is_no_change_and_an_edit_is_named_by_its_path() {
        let applied = json!({"spec": {"http": [{"route": [{"weight": 100}, {"weight": 0}]}]}});
        let defaulted = json!({"spec": {"http": [{"route": [{"weight": 100, "x": 1}, {"weight": 0}]}], "extra": true}, "status": {}});
        assert_eq!(differs(&defaulted, &applied, ""), None);
        let edited = json!({"spec": {"http": [{"route": [{"weight": 50}, {"weight": 50}]}]}});
        assert_eq!(
            differs(&edited, &applied, "").as_deref(),
            Some("spec.http[0].route[0].weight")
        );
        let shortened = json!({"spec": {"http": [{"route": [{"weight": 100}]}]}});
        assert_eq!(
            differs(&shortened, &applied, "").as_deref(),
            Some("spec.http[0].route")
        );
    }
}
