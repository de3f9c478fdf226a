//! `mode: revisions` (seeds 000 and 003: OAM / KubeVela): an application controller keeps one
//! Deployment per revision of a component, labelled with the component and the revision. weir
//! copies and renames nothing: the newest revision's Deployment is the canary (or the one
//! `spec.target.revision` pins) and the revision users are on is the primary (before the first
//! run: the revision before the canary).
//!
//! | object | who writes it |
//! |---|---|
//! | Deployments of the component | the application controller; weir only sets `replicas` |
//! | Service `COMPONENT` (apex, selects the primary's pods) | weir, unless one not owned by the rollout exists |
//! | Service per revision in play, named as its Deployment | weir, unless one not owned by the rollout exists |
//! | VirtualService / HTTPRoute / TrafficSplit `COMPONENT` | weir |
//!
//! A run moves traffic between the two revisions' Services. Promotion gives the canary the
//! primary's replica count (or, with `autoscalerRef`, points the autoscaler at it); once all
//! traffic is on it, the former primary is scaled to 0. A rollback scales the canary to 0 and
//! leaves the primary as it was. A revision that is neither (a canary overtaken by a newer one)
//! is scaled to 0 once traffic has left it.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::ListParams;
use weir_core::model::Phase;

use super::*;

/// OAM's label naming a workload's component.
pub const COMPONENT_LABEL: &str = "app.oam.dev/component";
/// OAM's label naming a workload's revision: the default `spec.target.revisionLabel`.
pub const DEFAULT_REVISION_LABEL: &str = "app.oam.dev/revision";

/// A component's revisions as weir sees them in one call.
struct Pair {
    /// The component's Deployments that carry the revision label, oldest first.
    deployments: Vec<Deployment>,
    primary: usize,
    canary: usize,
    /// The revision label.
    label: String,
}

impl Pair {
    fn primary(&self) -> &Deployment {
        &self.deployments[self.primary]
    }

    fn canary(&self) -> &Deployment {
        &self.deployments[self.canary]
    }

    /// The revisions that are neither the primary nor the canary.
    fn others(&self) -> impl Iterator<Item = &Deployment> {
        self.deployments
            .iter()
            .enumerate()
            .filter(|(index, _)| *index != self.primary && *index != self.canary)
            .map(|(_, deployment)| deployment)
    }

    fn revision_value<'d>(&self, deployment: &'d Deployment) -> &'d str {
        label_of(deployment, &self.label).unwrap_or_default()
    }
}

impl KubernetesTargets {
    /// The component's revisions, the primary and the canary among them.
    async fn pair(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        status: &RolloutStatus,
    ) -> Result<Pair, ProviderError> {
        let label = settings
            .kubernetes
            .revision_label
            .clone()
            .unwrap_or_else(|| DEFAULT_REVISION_LABEL.to_string());
        let selector = component_selector(settings);
        let listed = self
            .deployments(&key.namespace)
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|error| api_error("listing the component's Deployments", error))?;
        let mut deployments: Vec<Deployment> = listed
            .items
            .into_iter()
            .filter(|deployment| label_of(deployment, &label).is_some())
            .collect();
        if deployments.is_empty() {
            return Err(ProviderError::transient(format!(
                "no Deployment in {} is labelled {selector} with a revision label {label} (yet)",
                key.namespace
            )));
        }
        deployments.sort_by(|a, b| {
            let created = |deployment: &Deployment| {
                deployment
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|time| time.0)
            };
            created(a)
                .cmp(&created(b))
                .then_with(|| {
                    natural_order(
                        label_of(a, &label).unwrap_or_default(),
                        label_of(b, &label).unwrap_or_default(),
                    )
                })
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        });
        let canary = match &settings.kubernetes.revision {
            Some(pinned) => deployments
                .iter()
                .position(|deployment| label_of(deployment, &label) == Some(pinned.as_str()))
                .ok_or_else(|| {
                    ProviderError::transient(format!(
                        "spec.target.revision {pinned:?}: no Deployment labelled {selector} has {label}={pinned} (yet)"
                    ))
                })?,
            None => deployments.len() - 1,
        };
        // The revision users are on; before the first run, the one before the canary.
        let primary = status
            .primary_revision
            .as_deref()
            .and_then(|revision| {
                deployments
                    .iter()
                    .position(|deployment| revision_of(deployment) == revision)
            })
            .unwrap_or_else(|| canary.saturating_sub(1));
        Ok(Pair {
            deployments,
            primary,
            canary,
            label,
        })
    }

    pub(super) async fn revisions_observe(
        &self,
        key: &RolloutKey,
        _rollout: &Rollout,
        settings: &Settings<'_>,
        status: &RolloutStatus,
    ) -> Result<TargetObservation, ProviderError> {
        let pair = self.pair(key, settings, status).await?;
        Ok(TargetObservation {
            canary_revision: Some(revision_of(pair.canary())),
            primary_revision: Some(revision_of(pair.primary())),
            primary_ready: ready(pair.primary()),
            canary_ready: ready(pair.canary()),
        })
    }

    pub(super) async fn revisions_reconcile(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        status: &RolloutStatus,
    ) -> Result<(), ProviderError> {
        if !status.is_set_up() {
            // Nothing routes to a revision before set-up saw it available.
            return Ok(());
        }
        let pair = self.pair(key, settings, status).await?;
        let route = Route::of(&rollout.spec, status);
        self.revisions_route(key, rollout, settings, &pair, &route, status.run)
            .await?;
        self.settle(key, settings, &pair, status).await
    }

    pub(super) async fn revisions_apply(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        status: &RolloutStatus,
        effect: &Effect,
    ) -> Result<(), ProviderError> {
        let pair = self.pair(key, settings, status).await?;
        match effect {
            // The application controller runs the revisions: set-up only waits for them.
            Effect::Prepare => Ok(()),
            Effect::SetRoute(route) => {
                self.revisions_route(key, rollout, settings, &pair, route, status.run)
                    .await?;
                self.settle(key, settings, &pair, status).await
            }
            Effect::ScaleCanary(Scale::Up) => {
                if pair.canary == pair.primary || pair.canary().spec.replicas != Some(0) {
                    return Ok(());
                }
                let replicas = pair.primary().spec.replicas.unwrap_or(1).max(1);
                self.scale(key, pair.canary(), replicas, "to judge it")
                    .await
            }
            Effect::ScaleCanary(Scale::Down) => self.settle(key, settings, &pair, status).await,
            Effect::Promote { .. } => self.promote_revision(key, settings, &pair).await,
            Effect::Finalize => self.revisions_revert(key, rollout, settings).await,
            Effect::RunHooks { .. } | Effect::Notify(_) => Ok(()),
        }
    }

    /// The promoted revision (now the pair's primary and canary) takes the former primary's
    /// replica count - the revision with the most replicas among the others - or, with
    /// `autoscalerRef`, the autoscaler.
    async fn promote_revision(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        pair: &Pair,
    ) -> Result<(), ProviderError> {
        let promoted = pair.canary();
        let promoted_name = promoted.metadata.name.clone().unwrap_or_default();
        if let Some(reference) = &settings.kubernetes.autoscaler_ref {
            let api: Api<HorizontalPodAutoscaler> =
                Api::namespaced(self.client.clone(), &key.namespace);
            api.patch(
                &reference.name,
                &weir_params(),
                &Patch::Merge(json!({"spec": {"scaleTargetRef": {
                    "apiVersion": "apps/v1", "kind": "Deployment", "name": promoted_name}}})),
            )
            .await
            .map_err(|error| {
                api_error("pointing the autoscaler at the promoted revision", error)
            })?;
            self.note(
                key,
                format!(
                    "HorizontalPodAutoscaler {} now scales Deployment {promoted_name}",
                    reference.name
                ),
            );
            return Ok(());
        }
        let former = pair
            .others()
            .filter_map(|deployment| deployment.spec.replicas)
            .max()
            .unwrap_or(1);
        if promoted.spec.replicas.unwrap_or(1) < former {
            self.scale(key, promoted, former, "the former primary's count")
                .await?;
        }
        Ok(())
    }

    /// Applies the Services and the route objects for `route` between the pair's revisions.
    async fn revisions_route(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        pair: &Pair,
        route: &Route,
        run: u64,
    ) -> Result<(), ProviderError> {
        let owner = owner_of(rollout);
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        let ports = workload::ports(pair.primary(), &service)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        let mut services = vec![workload::service_object(
            settings.target_name.to_string(),
            Some(&key.namespace),
            pods_of(pair, pair.primary())?,
            ports.clone(),
            service.apex.as_ref(),
            &owner,
        )];
        for deployment in [pair.primary(), pair.canary()] {
            services.push(workload::service_object(
                deployment.metadata.name.clone().unwrap_or_default(),
                Some(&key.namespace),
                pods_of(pair, deployment)?,
                ports.clone(),
                None,
                &owner,
            ));
        }
        for mut object in services {
            object
                .metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(managed::ROLLOUT_LABEL.into(), key.name.clone());
            self.apply_unless_users(key, &owner, managed::to_json(&object)?)
                .await?;
        }
        let names = Names {
            namespace: key.namespace.clone(),
            apex: settings.target_name.to_string(),
            primary: pair.primary().metadata.name.clone().unwrap_or_default(),
            canary: pair.canary().metadata.name.clone().unwrap_or_default(),
            port: ports[0].port,
        };
        let owner = serde_json::to_value(&owner).unwrap_or(Value::Null);
        self.apply_route_objects(key, settings, &names, route, run, &owner)
            .await
    }

    /// Applies a Service unless one of that name exists that the rollout does not own (the
    /// application's own, e.g. KubeVela's Service for the component): that one is used as it is.
    async fn apply_unless_users(
        &self,
        key: &RolloutKey,
        owner: &OwnerReference,
        object: Value,
    ) -> Result<(), ProviderError> {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let known = self
            .applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .is_some_and(|applied| applied.contains_key(&format!("Service/{name}")));
        if !known
            && let Some(existing) = self
                .services(&key.namespace)
                .get_opt(name)
                .await
                .map_err(|error| api_error("reading a Service", error))?
            && !owned_by(&existing.metadata, owner)
        {
            return Ok(());
        }
        self.apply_owned(key, object).await
    }

    /// Scales to 0 what should no longer run, once the primary serves: the revisions that are
    /// neither primary nor canary, and a canary this rollout rolled back.
    async fn settle(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        pair: &Pair,
        status: &RolloutStatus,
    ) -> Result<(), ProviderError> {
        let rolled_back = status.phase == Phase::Failed
            && pair.canary != pair.primary
            && status.canary_revision.as_deref() == Some(revision_of(pair.canary()).as_str());
        let mut idle: Vec<&Deployment> = pair.others().collect();
        if rolled_back {
            idle.push(pair.canary());
        }
        idle.retain(|deployment| deployment.spec.replicas != Some(0));
        if idle.is_empty() {
            return Ok(());
        }
        if !ready(pair.primary()) {
            return Err(ProviderError::transient(format!(
                "revisions of {} stay up until {} is ready",
                settings.target_name,
                pair.primary().metadata.name.as_deref().unwrap_or_default()
            )));
        }
        for deployment in idle {
            let why = if rolled_back && std::ptr::eq(deployment, pair.canary()) {
                "rolled back"
            } else {
                "no longer the primary nor the canary"
            };
            let revision = pair.revision_value(deployment).to_string();
            self.scale(key, deployment, 0, &format!("revision {revision}, {why}"))
                .await?;
        }
        Ok(())
    }

    /// Sets a revision's replicas (only that field, under the field manager `weir`) and notes it.
    async fn scale(
        &self,
        key: &RolloutKey,
        deployment: &Deployment,
        replicas: i32,
        why: &str,
    ) -> Result<(), ProviderError> {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        self.deployments(&key.namespace)
            .patch(
                &name,
                &weir_params(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .map_err(|error| api_error(&format!("scaling Deployment {name}"), error))?;
        self.note(
            key,
            format!("Deployment {name} scaled to {replicas} ({why})"),
        );
        Ok(())
    }

    /// Undoes what weir set up for a `revisions` rollout: the route objects and the Services it
    /// owns are deleted; the Deployments stay as they are.
    pub(super) async fn revisions_revert(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
    ) -> Result<(), ProviderError> {
        let owner = owner_of(rollout);
        let names = Names {
            namespace: key.namespace.clone(),
            apex: settings.target_name.to_string(),
            primary: String::new(),
            canary: String::new(),
            port: 80,
        };
        // What the provider owns, by name (reading none of the user's objects); the
        // DestinationRules are named after revisions that may be gone: the rollout owns them,
        // so deleting it collects them.
        let owner_value = serde_json::to_value(&owner).unwrap_or(Value::Null);
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        let ctx = routes::RouteContext {
            target: settings.kubernetes,
            annotations: settings.annotations,
            ..routes::RouteContext::new(&names, &service, 0, &owner_value)
        };
        for owned in settings.provider.router().owned(&ctx) {
            let object = owned.stub();
            let (resource, name) = resource_of(&object)?;
            if resource.kind == "DestinationRule" {
                continue;
            }
            let api = route_api(&self.client, &key.namespace, &object, &resource);
            delete_if_present(&api, &name, &format!("the {} {name}", resource.kind)).await?;
        }
        let labelled = self
            .services(&key.namespace)
            .list(&ListParams::default().labels(&format!(
                "{}={}",
                managed::ROLLOUT_LABEL,
                key.name
            )))
            .await
            .map_err(|error| api_error("listing the rollout's Services", error))?;
        for service in labelled.items {
            if owned_by(&service.metadata, &owner) {
                let name = service.metadata.name.unwrap_or_default();
                delete_if_present(
                    &self.services(&key.namespace),
                    &name,
                    &format!("the Service {name}"),
                )
                .await?;
            }
        }
        self.applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        Ok(())
    }
}

/// The label selector of the component's Deployments: `spec.target.selector`, else
/// `app.oam.dev/component=COMPONENT`.
fn component_selector(settings: &Settings<'_>) -> String {
    match &settings.kubernetes.selector {
        Some(selector) => selector
            .iter()
            .map(|(label, value)| format!("{label}={value}"))
            .collect::<Vec<_>>()
            .join(","),
        None => format!("{COMPONENT_LABEL}={}", settings.target_name),
    }
}

/// The labels that select exactly one revision's pods: its Deployment's selector and the
/// revision label, which its pods must carry.
fn pods_of(
    pair: &Pair,
    deployment: &Deployment,
) -> Result<BTreeMap<String, String>, ProviderError> {
    let name = deployment.metadata.name.as_deref().unwrap_or_default();
    let mut selector = deployment
        .spec
        .selector
        .match_labels
        .clone()
        .unwrap_or_default();
    let on_pods = deployment
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|metadata| metadata.labels.as_ref())
        .and_then(|labels| labels.get(&pair.label));
    match on_pods {
        Some(value) => {
            selector.insert(pair.label.clone(), value.clone());
        }
        None if selector.contains_key(&pair.label) => {}
        None => {
            return Err(ProviderError::permanent(format!(
                "the pods of Deployment {name} carry no label {}: weir tells a revision's pods apart by it (label the pod template, or name another label in spec.target.revisionLabel)",
                pair.label
            )));
        }
    }
    Ok(selector)
}

/// A revision's identity for the core: its pod template's hash (replicas never count).
fn revision_of(deployment: &Deployment) -> String {
    workload::template_revision(&deployment.spec.template, &TrackedConfigs::new())
}

fn label_of<'d>(deployment: &'d Deployment, label: &str) -> Option<&'d str> {
    deployment
        .metadata
        .labels
        .as_ref()?
        .get(label)
        .map(String::as_str)
}

fn weir_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// Orders revision names so that `v2` comes before `v10`: runs of digits compare as numbers.
fn natural_order(a: &str, b: &str) -> Ordering {
    fn chunks(text: &str) -> Vec<(String, u128)> {
        let mut chunks = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            if digits > 0 {
                chunks.push((String::new(), rest[..digits].parse().unwrap_or(u128::MAX)));
                rest = &rest[digits..];
            } else {
                let letters =
                    rest.len() - rest.trim_start_matches(|c: char| !c.is_ascii_digit()).len();
                chunks.push((rest[..letters].to_string(), 0));
                rest = &rest[letters..];
            }
        }
        chunks
    }
    chunks(a).cmp(&chunks(b))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::natural_order;
    use std::cmp::Ordering;

    #[test]
    fn revisions_are_ordered_by_their_numbers() {
        assert_eq!(natural_order("shop-v2", "shop-v10"), Ordering::Less);
        assert_eq!(natural_order("v10", "v9"), Ordering::Greater);
        assert_eq!(natural_order("v3", "v3"), Ordering::Equal);
        let mut names = vec!["a-v10", "a-v1", "a-v2"];
        names.sort_by(|a, b| natural_order(a, b));
        assert_eq!(names, ["a-v1", "a-v2", "a-v10"]);
    }
}
