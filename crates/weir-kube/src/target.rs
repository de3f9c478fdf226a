//! The `kubernetes` target, Flagger's way: the rollout's Deployment is the canary, weir keeps a
//! `-primary` copy that serves, three Services in front, and the traffic provider's objects
//! that split traffic between them. Every object weir owns is written with server-side apply
//! under the field manager `weir`, so applying the same state again changes nothing.
//!
//! The ConfigMaps and Secrets the target's pods read are part of its revision (read with one
//! GET each when the revision is observed) and copied as `NAME-primary` for the primary at
//! initialisation and promotion ([`workload`]'s tracked configs). [`KubernetesTargets::revert`]
//! undoes it all for `revertOnDeletion`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use serde_json::{Value, json};
use weir_core::FieldError;
use weir_core::machine::{Effect, Route, Scale};
use weir_core::model::{KubernetesMode, KubernetesTarget, Rollout, RolloutStatus, TargetKind};
use weir_core::units::Weight;
use weir_engine::{BoxFuture, ProviderError, Providers, TargetObservation, TargetProvider};
use weir_store::RolloutKey;

mod daemonset;
mod keda;
mod knative;
mod managed;
mod replica_split;
mod revisions;

use crate::routes::{self, Names, Provider};
use crate::store::Fence;
use crate::workload::{
    self, CANARY_SUFFIX, ConfigKind, PRIMARY_SUFFIX, TrackedConfig, TrackedConfigs,
};

/// The field manager of everything weir applies.
pub const FIELD_MANAGER: &str = "weir";
/// The annotation on the primary Deployment naming the revision it runs.
pub const REVISION_ANNOTATION: &str = "weir.dev/revision";

/// Kubernetes targets for every `kind: kubernetes` rollout of this operator.
#[derive(Clone)]
pub struct KubernetesTargets {
    client: kube::Client,
    /// What the providers adjusted (Istio's rounding), per rollout, for the history.
    notes: Arc<Mutex<HashMap<RolloutKey, Vec<String>>>>,
    /// The routing objects this process last applied, per rollout and `Kind/name`: an object
    /// that would be applied unchanged is not sent again (server-side apply would make it a
    /// no-op, but it would still cost a request per step). A reconcile forgets them.
    applied: Arc<Mutex<HashMap<RolloutKey, HashMap<String, Value>>>>,
    /// The rollouts whose objects this process keeps current: applied all again by a reconcile
    /// (the first after a start or a takeover: someone may have changed them meanwhile), or
    /// written by a route change of this process. Later reconciles - the retries after a step's
    /// effect failed, e.g. a scale-down waiting for the primary - only apply what changed, which
    /// keeps a step at 3 writes or fewer.
    refreshed: Arc<Mutex<HashSet<RolloutKey>>>,
    /// The canary weight (basis points) whose split by replicas was last noted in the history,
    /// per rollout: each step's effective weight is noted once, when the step is taken.
    split_noted: Arc<Mutex<HashMap<RolloutKey, u32>>>,
    /// Whether this process may still write (it holds the leader lease); `None`: always.
    fence: Option<Fence>,
}

impl KubernetesTargets {
    /// Targets that talk to the cluster through `client`.
    pub fn new(client: kube::Client) -> KubernetesTargets {
        KubernetesTargets {
            client,
            notes: Arc::default(),
            applied: Arc::default(),
            refreshed: Arc::default(),
            split_noted: Arc::default(),
            fence: None,
        }
    }

    /// The same targets, changing nothing in the cluster once `fence` says this replica may no
    /// longer write (it lost the leader lease): each change then fails as transient.
    pub fn with_fence(mut self, fence: Fence) -> KubernetesTargets {
        self.fence = Some(fence);
        self
    }

    fn mark_refreshed(&self, key: &RolloutKey) {
        self.refreshed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone());
    }

    fn check_fence(&self) -> Result<(), ProviderError> {
        match &self.fence {
            Some(fence) if !fence() => Err(ProviderError::transient(
                "not applied: this replica no longer holds the leader lease",
            )),
            _ => Ok(()),
        }
    }

    /// `providers` with these targets serving `kind: kubernetes`.
    pub fn add_to(&self, mut providers: Providers) -> Providers {
        providers
            .targets
            .push((TargetKind::Kubernetes, Arc::new(self.clone())));
        providers
    }

    fn deployments(&self, namespace: &str) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn services(&self, namespace: &str) -> Api<Service> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn note(&self, key: &RolloutKey, note: String) {
        self.notes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .push(note);
    }

    /// The target Deployment, or a transient error while it does not exist (Flagger waits too).
    async fn target(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<Deployment, ProviderError> {
        self.deployments(&key.namespace)
            .get_opt(settings.target_name)
            .await
            .map_err(|error| api_error("reading the target Deployment", error))?
            .ok_or_else(|| {
                ProviderError::transient(format!(
                    "the target Deployment {}/{} does not exist (yet)",
                    key.namespace, settings.target_name
                ))
            })
    }

    async fn primary(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<Option<Deployment>, ProviderError> {
        self.deployments(&key.namespace)
            .get_opt(&format!("{}{PRIMARY_SUFFIX}", settings.target_name))
            .await
            .map_err(|error| api_error("reading the primary Deployment", error))
    }

    /// Creates the primary from the target when it does not exist (with the copies of the
    /// tracked configs and of the autoscaler), and returns it.
    async fn ensure_primary(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        target: &Deployment,
        owner: &OwnerReference,
    ) -> Result<Deployment, ProviderError> {
        if let Some(primary) = self.primary(key, settings).await? {
            return Ok(primary);
        }
        // Initialisation: the copies of the tracked configs first, so that the primary's pods
        // find them.
        let configs = self.tracked_configs(&key.namespace, target).await?;
        self.apply_primary_configs(&key.namespace, &configs, owner)
            .await?;
        let mut primary = workload::primary_deployment(target, &configs, owner)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        primary
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                REVISION_ANNOTATION.into(),
                workload::revision(target, &configs),
            );
        if settings.replica_split {
            let total = target.spec.replicas.unwrap_or(1).max(1);
            replica_split::mark_primary(&mut primary, &settings.names(&key.namespace).apex, total);
        }
        self.apply_deployment(&key.namespace, &primary).await?;
        self.apply_primary_autoscaler(key, settings, owner).await?;
        Ok(primary)
    }

    /// Set-up before the primary takes traffic ([`Effect::Prepare`]): the primary and the
    /// Services `NAME-primary` and `NAME-canary`, which no route uses yet. The apex Service
    /// (which may be the user's own, selecting the target's pods) and the route objects are
    /// left as they are until the primary is available.
    async fn prepare(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
    ) -> Result<(), ProviderError> {
        let target = self.target(key, settings).await?;
        let owner = owner_of(rollout);
        self.ensure_primary(key, settings, &target, &owner).await?;
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        let [_apex, primary, canary] = workload::services(&target, &service, &owner)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        self.apply_services(&key.namespace, [primary, canary]).await
    }

    /// Creates the primary when it does not exist, and applies the Services when the apex
    /// does not exist or `refresh_services` (a reconcile) asks for it. Only once the primary
    /// is available: the apex Service selects its pods.
    async fn ensure_primary_and_services(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        target: &Deployment,
        refresh_services: bool,
    ) -> Result<Deployment, ProviderError> {
        let owner = owner_of(rollout);
        let primary = self.ensure_primary(key, settings, target, &owner).await?;
        if refresh_services {
            self.apply_primary_autoscaler(key, settings, &owner).await?;
        }
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        let apex = settings.names(&key.namespace).apex;
        if !refresh_services
            && self
                .services(&key.namespace)
                .get_opt(&apex)
                .await
                .map_err(|error| api_error("reading the apex Service", error))?
                .is_some_and(|apex| owned_by(&apex.metadata, &owner))
        {
            return Ok(primary);
        }
        let mut services = workload::services(target, &service, &owner)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        if settings.replica_split {
            replica_split::select_both(&mut services[0], &apex);
            self.select_only_both(key, &apex).await?;
        }
        self.apply_services(&key.namespace, services).await?;
        Ok(primary)
    }

    async fn apply_services(
        &self,
        namespace: &str,
        services: impl IntoIterator<Item = Service>,
    ) -> Result<(), ProviderError> {
        for service in services {
            let name = service.metadata.name.clone().unwrap_or_default();
            self.services(namespace)
                .patch(&name, &apply_params(), &Patch::Apply(&service))
                .await
                .map_err(|error| api_error("applying a Service", error))?;
        }
        Ok(())
    }

    /// With `spec.target.autoscalerRef`, the primary gets a copy of the target's autoscaler.
    async fn apply_primary_autoscaler(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        owner: &OwnerReference,
    ) -> Result<(), ProviderError> {
        let Some(reference) = &settings.kubernetes.autoscaler_ref else {
            return Ok(());
        };
        if reference.kind.as_deref() == Some(keda::SCALED_OBJECT) {
            return self.apply_primary_scaled_object(key, settings, owner).await;
        }
        let api: Api<HorizontalPodAutoscaler> =
            Api::namespaced(self.client.clone(), &key.namespace);
        let autoscaler = api
            .get_opt(&reference.name)
            .await
            .map_err(|error| api_error("reading the target's autoscaler", error))?
            .ok_or_else(|| {
                ProviderError::transient(format!(
                    "the HorizontalPodAutoscaler {}/{} named by spec.target.autoscalerRef does not exist (yet)",
                    key.namespace, reference.name
                ))
            })?;
        let primary = workload::primary_autoscaler(&autoscaler, settings.target_name, owner);
        let name = primary.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &apply_params(), &Patch::Apply(&primary))
            .await
            .map_err(|error| api_error("applying the primary's autoscaler", error))?;
        Ok(())
    }

    /// The ConfigMaps and Secrets the target's pods read whose content is tracked (none when
    /// the target is annotated `config-tracking: disabled`): one GET per referenced object, only
    /// for targets that reference some. An optional reference to an absent object is skipped; a
    /// required one is waited for, as the target's pods wait for it.
    async fn tracked_configs(
        &self,
        namespace: &str,
        target: &impl workload::Workload,
    ) -> Result<TrackedConfigs, ProviderError> {
        let mut configs = TrackedConfigs::new();
        if !workload::config_tracking_enabled(target) {
            return Ok(configs);
        }
        for reference in workload::config_references(workload::Workload::template(target)) {
            let found = match reference.kind {
                ConfigKind::ConfigMap => {
                    Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
                        .get_opt(&reference.name)
                        .await
                        .map(|found| found.map(TrackedConfig::ConfigMap))
                }
                ConfigKind::Secret => Api::<Secret>::namespaced(self.client.clone(), namespace)
                    .get_opt(&reference.name)
                    .await
                    .map(|found| found.map(TrackedConfig::Secret)),
            }
            .map_err(|error| {
                api_error(
                    &format!("reading the {} {}", reference.kind.as_str(), reference.name),
                    error,
                )
            })?;
            match found {
                Some(config) if config.trackable() => {
                    configs.insert((reference.kind, reference.name), config);
                }
                Some(_) => {}
                None if reference.optional => {}
                None => {
                    return Err(ProviderError::transient(format!(
                        "the {} {namespace}/{} the target's pods read does not exist (yet)",
                        reference.kind.as_str(),
                        reference.name
                    )));
                }
            }
        }
        Ok(configs)
    }

    /// Applies the primary's copies `NAME-primary` of the tracked configs.
    async fn apply_primary_configs(
        &self,
        namespace: &str,
        configs: &TrackedConfigs,
        owner: &OwnerReference,
    ) -> Result<(), ProviderError> {
        for config in configs.values() {
            let copy = workload::primary_config(config, owner);
            let name = copy.name().to_string();
            let applied = match &copy {
                TrackedConfig::ConfigMap(config_map) => {
                    Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
                        .patch(&name, &apply_params(), &Patch::Apply(config_map))
                        .await
                        .map(|_| ())
                }
                TrackedConfig::Secret(secret) => {
                    Api::<Secret>::namespaced(self.client.clone(), namespace)
                        .patch(&name, &apply_params(), &Patch::Apply(secret))
                        .await
                        .map(|_| ())
                }
            };
            applied.map_err(|error| {
                api_error(
                    &format!("applying the {} {name}", copy.kind().as_str()),
                    error,
                )
            })?;
        }
        Ok(())
    }

    async fn apply_deployment(
        &self,
        namespace: &str,
        deployment: &Deployment,
    ) -> Result<(), ProviderError> {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        self.deployments(namespace)
            .patch(&name, &apply_params(), &Patch::Apply(deployment))
            .await
            .map_err(|error| api_error("applying a Deployment", error))?;
        Ok(())
    }

    async fn scale_target(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        replicas: i32,
    ) -> Result<(), ProviderError> {
        self.deployments(&key.namespace)
            .patch(
                settings.target_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .map_err(|error| api_error("scaling the target Deployment", error))?;
        Ok(())
    }

    async fn apply_route(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        route: &Route,
        run: u64,
    ) -> Result<(), ProviderError> {
        // The first route of a rollout (its set-up) finds no primary yet.
        let target = self.target(key, settings).await?;
        self.ensure_primary_and_services(key, rollout, settings, &target, false)
            .await?;
        if settings.replica_split {
            // No route objects: the pods are the route.
            return self
                .split_replicas(key, settings, route.canary_weight)
                .await;
        }
        let owner = serde_json::to_value(owner_of(rollout)).unwrap_or(Value::Null);
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        let mut names = settings.names(&key.namespace);
        // The Services' port, which falls back to the target's container port.
        names.port = workload::service_port(&target, &service)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        self.apply_route_objects(key, settings, &names, route, run, &owner)
            .await
    }

    /// `settings` with the user's objects its provider works from (nginx and skipper: the
    /// Ingress of `ingressRef`; apisix: the ApisixRoute of `routeRef`; gloo: the Upstream of
    /// `upstreamRef`): one GET each, none for the other providers. A missing one is a transient
    /// error naming it.
    async fn read_inputs<'s>(
        &self,
        key: &RolloutKey,
        mut settings: Settings<'s>,
    ) -> Result<Settings<'s>, ProviderError> {
        let names = settings.names(&key.namespace);
        let references = settings
            .provider
            .router()
            .inputs(settings.kubernetes, &names);
        if !references.is_empty() {
            settings.inputs = routes::fetch_inputs(&self.client, &references).await?;
        }
        Ok(settings)
    }

    /// Applies the provider's objects for `route` between the Services `names`
    /// ([`route_objects`]), noting what the provider adjusted.
    async fn apply_route_objects(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        names: &Names,
        route: &Route,
        run: u64,
        owner: &Value,
    ) -> Result<(), ProviderError> {
        let objects = route_objects(settings, names, route, run, owner)?;
        if let Some(adjusted) = objects.adjusted {
            self.note(key, adjusted);
        }
        // Then the edits of the user's objects (knative's Service traffic), same way.
        for object in objects.objects.into_iter().chain(objects.edits) {
            self.apply_owned(key, object).await?;
        }
        Ok(())
    }

    /// Applies `object` (server-side apply, forced) unless this process applied exactly it
    /// last, and remembers it as applied.
    async fn apply_owned(&self, key: &RolloutKey, object: Value) -> Result<(), ProviderError> {
        let (resource, name) = resource_of(&object)?;
        let id = format!("{}/{name}", resource.kind);
        let unchanged = self
            .applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .and_then(|applied| applied.get(&id))
            == Some(&object);
        if unchanged {
            return Ok(());
        }
        let api = route_api(&self.client, &key.namespace, &object, &resource);
        api.patch(&name, &apply_params(), &Patch::Apply(&object))
            .await
            .map_err(|error| api_error(&format!("applying {} {name}", resource.kind), error))?;
        self.applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .insert(id, object);
        Ok(())
    }

    async fn promote(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
    ) -> Result<(), ProviderError> {
        let target = self.target(key, settings).await?;
        let owner = owner_of(rollout);
        // The tracked configs as they are now go with the pod template: copies first, so that
        // the primary's new pods find them.
        let configs = self.tracked_configs(&key.namespace, &target).await?;
        self.apply_primary_configs(&key.namespace, &configs, &owner)
            .await?;
        let mut primary = workload::primary_deployment(&target, &configs, &owner)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        // The primary keeps its own scale (an autoscaler may own it); split by replicas, it
        // takes all the pods the rollout should run (the canary serves until it is available).
        if let Some(current) = self.primary(key, settings).await? {
            primary.spec.replicas = current.spec.replicas;
            if settings.replica_split {
                let total = replica_split::total_replicas(&current);
                primary.spec.replicas = Some(total);
                replica_split::mark_primary(
                    &mut primary,
                    &settings.names(&key.namespace).apex,
                    total,
                );
            }
        }
        primary
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                REVISION_ANNOTATION.into(),
                workload::revision(&target, &configs),
            );
        self.apply_deployment(&key.namespace, &primary).await
    }

    /// Undoes what weir set up for `rollout` (Flagger's `revertOnDeletion`, also the engine's
    /// `Finalize` effect), leaving the application serving from its own Deployment:
    ///
    /// 1. the target Deployment, if weir left it at zero, is scaled back to the primary's
    ///    replica count (without a primary: 1); any other count is left as it is;
    /// 2. once it is ready, the apex Service selects the target's pods and is no longer owned by
    ///    the rollout (so deleting the rollout does not collect it);
    /// 3. the provider's route objects (what its router owns: VirtualService and
    ///    DestinationRules, HTTPRoute, TrafficSplit, a canary Ingress, ...) are deleted, then the Services `NAME-primary` and `NAME-canary`, the
    ///    primary's HorizontalPodAutoscaler, the Deployment `NAME-primary`, and the copies
    ///    `CONFIG-primary` of tracked ConfigMaps and Secrets that the rollout owns.
    ///
    /// Until the target is ready this answers a transient error and changes nothing else, so
    /// nothing is left without pods: call it again (a finalizer's requeue) until it answers
    /// `Ok`. Idempotent: what is already gone (404) is fine. A target Deployment that no longer
    /// exists is not restored; the rest is still deleted.
    ///
    /// In mode `managed` nothing is undone (deleting the rollout collects what it owns); in mode
    /// `revisions` see [`KubernetesTargets::revisions_revert`]; for a Knative Service,
    /// [`KubernetesTargets::knative_revert`].
    pub async fn revert(&self, key: &RolloutKey, rollout: &Rollout) -> Result<(), ProviderError> {
        let settings = settings(rollout).map_err(ProviderError::unusable)?;
        match settings.mode {
            KubernetesMode::Copy if settings.knative => {
                return self.knative_revert(key, &settings).await;
            }
            KubernetesMode::Copy if settings.daemon_set => {
                return self.daemon_set_revert(key, rollout, &settings).await;
            }
            KubernetesMode::Copy => {}
            KubernetesMode::Managed => return Ok(()),
            KubernetesMode::Revisions => {
                return self.revisions_revert(key, rollout, &settings).await;
            }
        }
        self.applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        let namespace = key.namespace.as_str();
        let owner = owner_of(rollout);
        let names = settings.names(namespace);
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        let primary = self.primary(key, &settings).await?;
        let target = self
            .deployments(namespace)
            .get_opt(settings.target_name)
            .await
            .map_err(|error| api_error("reading the target Deployment", error))?;
        if let Some(target) = &target {
            // Only a target weir left at zero is scaled: any other count is someone's choice
            // (an autoscaler's), and scaling again would fight it.
            let wanted = primary
                .as_ref()
                .and_then(|primary| primary.spec.replicas)
                .unwrap_or(1)
                .max(1);
            let scaled = target.spec.replicas == Some(0);
            if scaled {
                // A paused ScaledObject would hold the target at zero.
                self.pause_target_scaler(key, &settings, false).await?;
                self.scale_target(key, &settings, wanted).await?;
            }
            if scaled || !ready(target) {
                return Err(ProviderError::transient(format!(
                    "reverting: waiting for the target Deployment {namespace}/{} to be ready before the apex Service selects it",
                    settings.target_name
                )));
            }
            self.give_apex_back(namespace, &names, target, &service, &owner)
                .await?;
        }
        self.delete_routing(namespace, &settings, &names, &service, &owner)
            .await?;
        self.revert_scaled_object(key, &settings).await?;
        if let Some(reference) = settings
            .kubernetes
            .autoscaler_ref
            .as_ref()
            .filter(|reference| reference.kind.as_deref() != Some(keda::SCALED_OBJECT))
        {
            let name = format!("{}{PRIMARY_SUFFIX}", reference.name);
            let api: Api<HorizontalPodAutoscaler> = Api::namespaced(self.client.clone(), namespace);
            delete_if_present(&api, &name, &format!("the HorizontalPodAutoscaler {name}")).await?;
        }
        let primary_name = format!("{}{PRIMARY_SUFFIX}", settings.target_name);
        delete_if_present(
            &self.deployments(namespace),
            &primary_name,
            &format!("the Deployment {primary_name}"),
        )
        .await?;

        self.delete_config_copies(
            namespace,
            target.as_ref().map(|target| &target.spec.template),
            primary.as_ref().map(|primary| &primary.spec.template),
            &owner,
        )
        .await
    }

    /// Reverting, once the target serves: the apex Service selects the target's own pods and
    /// loses the owner reference weir gave it (server-side apply drops it), so it outlives the
    /// rollout.
    async fn give_apex_back(
        &self,
        namespace: &str,
        names: &Names,
        target: &impl workload::Workload,
        service: &weir_core::model::KubernetesService,
        owner: &OwnerReference,
    ) -> Result<(), ProviderError> {
        let [mut apex, _, _] = workload::services(target, service, owner)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        let (label, value) = workload::selector_label(target)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        if let Some(spec) = apex.spec.as_mut() {
            spec.selector = Some([(label, value)].into());
        }
        apex.metadata.owner_references = None;
        self.services(namespace)
            .patch(&names.apex, &apply_params(), &Patch::Apply(&apex))
            .await
            .map_err(|error| api_error("pointing the apex Service at the target", error))?;
        Ok(())
    }

    /// Reverting: deletes what the provider owns, by name (needing none of the user's objects),
    /// and the Services `NAME-primary` and `NAME-canary`.
    async fn delete_routing(
        &self,
        namespace: &str,
        settings: &Settings<'_>,
        names: &Names,
        service: &weir_core::model::KubernetesService,
        owner: &OwnerReference,
    ) -> Result<(), ProviderError> {
        let owner_value = serde_json::to_value(owner).unwrap_or(Value::Null);
        let ctx = routes::RouteContext {
            target: settings.kubernetes,
            annotations: settings.annotations,
            ..routes::RouteContext::new(names, service, 0, &owner_value)
        };
        for owned in settings.provider.router().owned(&ctx) {
            let object = owned.stub();
            let (resource, name) = resource_of(&object)?;
            let api = route_api(&self.client, namespace, &object, &resource);
            delete_if_present(&api, &name, &format!("the {} {name}", resource.kind)).await?;
        }
        for name in [&names.primary, &names.canary] {
            delete_if_present(
                &self.services(namespace),
                name,
                &format!("the Service {name}"),
            )
            .await?;
        }
        Ok(())
    }

    /// Reverting: deletes the `-primary` copies of the tracked configs - of what the target's
    /// pods read now, and of what the primary's read (a promotion may have dropped a reference
    /// since). Only those this rollout owns: a ConfigMap that merely ends in `-primary` is the
    /// user's.
    async fn delete_config_copies(
        &self,
        namespace: &str,
        target: Option<&PodTemplateSpec>,
        primary: Option<&PodTemplateSpec>,
        owner: &OwnerReference,
    ) -> Result<(), ProviderError> {
        let mut copies: BTreeSet<(ConfigKind, String)> = BTreeSet::new();
        for reference in target.into_iter().flat_map(workload::config_references) {
            copies.insert((
                reference.kind,
                format!("{}{PRIMARY_SUFFIX}", reference.name),
            ));
        }
        for reference in primary
            .into_iter()
            .flat_map(workload::config_references)
            .filter(|reference| reference.name.ends_with(PRIMARY_SUFFIX))
        {
            copies.insert((reference.kind, reference.name));
        }
        for (kind, name) in copies {
            self.delete_owned_copy(namespace, kind, &name, owner)
                .await?;
        }
        Ok(())
    }

    /// Deletes the ConfigMap or Secret `name` if `owner` owns it (gone already is fine).
    async fn delete_owned_copy(
        &self,
        namespace: &str,
        kind: ConfigKind,
        name: &str,
        owner: &OwnerReference,
    ) -> Result<(), ProviderError> {
        let what = format!("the {} {name}", kind.as_str());
        let found = match kind {
            ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
                .get_opt(name)
                .await
                .map(|found| found.map(|config| config.metadata)),
            ConfigKind::Secret => Api::<Secret>::namespaced(self.client.clone(), namespace)
                .get_opt(name)
                .await
                .map(|found| found.map(|secret| secret.metadata)),
        }
        .map_err(|error| api_error(&format!("reading {what}"), error))?;
        let Some(metadata) = found else {
            return Ok(());
        };
        if !owned_by(&metadata, owner) {
            return Ok(());
        }
        // Only the object read above: a copy re-created since is left for the next call.
        let params = DeleteParams {
            preconditions: metadata.uid.map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let deleted = match kind {
            ConfigKind::ConfigMap => Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
                .delete(name, &params)
                .await
                .map(|_| ()),
            ConfigKind::Secret => Api::<Secret>::namespaced(self.client.clone(), namespace)
                .delete(name, &params)
                .await
                .map(|_| ()),
        };
        match deleted {
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Ok(()) => Ok(()),
            Err(error) => Err(api_error(&format!("deleting {what}"), error)),
        }
    }
}

/// A rollout's Kubernetes settings, read once per call.
struct Settings<'a> {
    kubernetes: &'a KubernetesTarget,
    /// The workload's name: `targetRef`'s (copy), the component's (revisions), the rollout's
    /// (managed). It names the apex Service and the route objects.
    target_name: &'a str,
    provider: Provider,
    mode: KubernetesMode,
    /// The canary without a mesh: traffic split by replica ratio ([`replica_split`]).
    replica_split: bool,
    /// How finely relative weights are written: basis points when the plan has steps finer
    /// than a percent ([`routes::resolution`]).
    resolution: routes::Resolution,
    /// The rollout's annotations (Flagger's `kuma.io/mesh`).
    annotations: &'a std::collections::BTreeMap<String, String>,
    /// The user's objects the provider works from ([`routes::Router::inputs`]), read by
    /// [`KubernetesTargets::read_inputs`]; empty until then.
    inputs: routes::Inputs,
    /// `targetRef.kind: DaemonSet` in mode `copy` ([`daemonset`]).
    daemon_set: bool,
    /// `provider: knative`: the target is a Knative Service ([`knative`]).
    knative: bool,
}

impl Settings<'_> {
    /// The Services' names. The port is `spec.target.service.port` (80 when unset): a route
    /// takes the Services' own port instead (`workload::service_port`), which falls back to the
    /// target's container port.
    fn names(&self, namespace: &str) -> Names {
        let service = self.kubernetes.service.as_ref();
        let apex = service
            .and_then(|service| service.name.clone())
            .unwrap_or_else(|| self.target_name.to_string());
        Names {
            namespace: namespace.to_string(),
            primary: format!("{apex}{PRIMARY_SUFFIX}"),
            canary: format!("{apex}{CANARY_SUFFIX}"),
            apex,
            port: service
                .and_then(|service| service.port)
                .and_then(|port| i32::try_from(port).ok())
                .unwrap_or(80),
        }
    }
}

/// The settings of a `kind: kubernetes` rollout, or every problem with them.
fn settings(rollout: &Rollout) -> Result<Settings<'_>, Vec<FieldError>> {
    let Some(kubernetes) = rollout.spec.target.kubernetes() else {
        return Err(vec![FieldError::with_value(
            "spec.target.kind",
            format!("{:?}", rollout.spec.target.kind()).to_lowercase(),
            "this provider runs Kubernetes targets (kind: kubernetes)",
        )]);
    };
    let mut errors = Vec::new();
    let mode = kubernetes.mode();
    let parsed = Provider::parse(kubernetes.provider.as_deref());
    // A Knative Service: its router checks the targetRef, and `knative` what else it refuses.
    let knative = matches!(parsed, Ok(Provider::Knative));
    let target_name = match (mode, &kubernetes.target_ref) {
        (_, Some(reference)) if knative => reference.name.as_str(),
        (_, None) if knative => "",
        (KubernetesMode::Revisions, _) => kubernetes
            .component
            .as_deref()
            .unwrap_or(rollout.metadata.name.as_str()),
        (KubernetesMode::Managed, _) => rollout.metadata.name.as_str(),
        (KubernetesMode::Copy, Some(reference)) => {
            if reference
                .kind
                .as_deref()
                .is_some_and(|kind| kind != "Deployment" && kind != "DaemonSet")
            {
                errors.push(FieldError::with_value(
                    "spec.target.targetRef.kind",
                    reference.kind.clone().unwrap_or_default(),
                    "Deployment or DaemonSet (blue/green only), or a Knative Service with \
                     provider knative",
                ));
            }
            reference.name.as_str()
        }
        (KubernetesMode::Copy, None) => {
            errors.push(FieldError::missing(
                "spec.target.targetRef",
                "the workload to roll out: {apiVersion: apps/v1, kind: Deployment (or DaemonSet), name: NAME}",
            ));
            ""
        }
    };
    let daemon_set = mode == KubernetesMode::Copy
        && !knative
        && kubernetes
            .target_ref
            .as_ref()
            .is_some_and(|reference| reference.kind.as_deref() == Some("DaemonSet"));
    if daemon_set {
        errors.extend(daemonset::refusals(rollout, kubernetes));
    }
    if knative {
        errors.extend(knative::refusals(kubernetes));
    }
    if !knative
        && let Some(kind) = kubernetes
            .autoscaler_ref
            .as_ref()
            .and_then(|reference| reference.kind.as_deref())
        && kind != "HorizontalPodAutoscaler"
        && kind != keda::SCALED_OBJECT
    {
        errors.push(FieldError::with_value(
            "spec.target.autoscalerRef.kind",
            kind,
            "HorizontalPodAutoscaler or ScaledObject (KEDA)",
        ));
    }
    let provider = match parsed {
        Ok(provider) => {
            // What the provider cannot express of the rollout, refused before anything is
            // written.
            errors.extend(provider.router().validate(&rollout.spec, kubernetes));
            provider
        }
        Err(message) => {
            // Nothing below means anything without a provider.
            errors.push(FieldError::new("spec.target.provider", message));
            return Err(errors);
        }
    };
    let replica_split = !daemon_set && replica_split::splits_replicas(rollout, provider, mode);
    if replica_split && kubernetes.autoscaler_ref.is_some() {
        errors.push(FieldError::new(
            "spec.target.autoscalerRef",
            "provider kubernetes with canary steps splits traffic by setting both Deployments' replicas, which an autoscaler would fight: remove autoscalerRef, or use a provider that routes by weight (a mesh or a gateway), or blue/green (iterations)",
        ));
    }
    if errors.is_empty() {
        Ok(Settings {
            kubernetes,
            target_name,
            provider,
            mode,
            replica_split,
            resolution: routes::resolution(&rollout.spec),
            annotations: &rollout.metadata.annotations,
            inputs: routes::Inputs::new(),
            daemon_set,
            knative,
        })
    } else {
        Err(errors)
    }
}

/// The provider's objects for `route` between the Services `names`. In the modes other than
/// `copy` they are trimmed to what the route needs ([`routes::trim`]): no destination for a
/// canary without traffic (between runs it has no Service), no DestinationRule without a
/// traffic policy.
fn route_objects(
    settings: &Settings<'_>,
    names: &Names,
    route: &Route,
    run: u64,
    owner: &Value,
) -> Result<routes::RouteObjects, ProviderError> {
    let service = settings.kubernetes.service.clone().unwrap_or_default();
    let ctx = routes::RouteContext {
        target: settings.kubernetes,
        annotations: settings.annotations,
        resolution: settings.resolution,
        inputs: &settings.inputs,
        ..routes::RouteContext::new(names, &service, run, owner)
    };
    let mut objects = settings
        .provider
        .router()
        .objects(&ctx, route)
        .map_err(ProviderError::permanent)?;
    if settings.mode != KubernetesMode::Copy {
        routes::trim(&mut objects.objects, names, &service);
    }
    Ok(objects)
}

/// The owner reference that makes the rollout own what weir creates (deleting it collects them).
fn owner_of(rollout: &Rollout) -> OwnerReference {
    OwnerReference {
        api_version: rollout.api_version.clone(),
        kind: rollout.kind.clone(),
        name: rollout.metadata.name.clone(),
        uid: rollout
            .metadata
            .other
            .get("uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether `owner` owns the object with `metadata` (by uid, when the owner's is known).
fn owned_by(metadata: &ObjectMeta, owner: &OwnerReference) -> bool {
    metadata.owner_references.iter().flatten().any(|reference| {
        reference.kind == owner.kind
            && reference.name == owner.name
            && (owner.uid.is_empty() || reference.uid == owner.uid)
    })
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// The API resource and name of an object written as JSON.
fn resource_of(object: &Value) -> Result<(ApiResource, String), ProviderError> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let plural = routes::plural(kind);
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if name.is_empty() {
        return Err(ProviderError::permanent(format!("a {kind} without a name")));
    }
    Ok((ApiResource::from_gvk_with_plural(&gvk, &plural), name))
}

/// The API of a route object: in `namespace`, or cluster-wide for an object without a namespace
/// (Kuma's TrafficRoute).
fn route_api(
    client: &kube::Client,
    namespace: &str,
    object: &Value,
    resource: &ApiResource,
) -> Api<DynamicObject> {
    if object["metadata"].get("namespace").is_some() {
        Api::namespaced_with(client.clone(), namespace, resource)
    } else {
        Api::all_with(client.clone(), resource)
    }
}

/// Deletes `name` through `api` (`what` names it in errors); one already gone is fine.
async fn delete_if_present<K>(api: &Api<K>, name: &str, what: &str) -> Result<(), ProviderError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(api_error(&format!("deleting {what}"), error)),
    }
}

/// Whether a Deployment serves: its controller has seen the newest spec and every replica is
/// updated and available. A Deployment scaled to 0 does not serve.
fn ready(deployment: &Deployment) -> bool {
    ready_at(deployment, None)
}

/// Whether `deployment` is rolled out (its generation observed, every pod updated) and at least
/// `threshold` percent of its pods are available, rounded up and never fewer than one (Flagger's
/// `primaryReadyThreshold` / `canaryReadyThreshold`; unset: 100).
fn ready_at(deployment: &Deployment, threshold: Option<u32>) -> bool {
    let wanted = deployment.spec.replicas.unwrap_or(1);
    let Some(status) = &deployment.status else {
        return false;
    };
    let pods = |count: Option<i32>| u64::try_from(count.unwrap_or(0)).unwrap_or(0);
    let percent = u64::from(threshold.unwrap_or(100).min(100));
    let needed = (pods(Some(wanted)) * percent).div_ceil(100).max(1);
    wanted > 0
        && status.observed_generation.unwrap_or(0) >= deployment.metadata.generation.unwrap_or(0)
        && status.updated_replicas.unwrap_or(0) >= wanted
        && pods(status.available_replicas) >= needed
}

/// A Kubernetes API failure: transient unless the server refused the request itself (4xx but
/// 404, 408, 409 and 429, which can pass).
fn api_error(what: &str, error: kube::Error) -> ProviderError {
    let permanent = matches!(&error, kube::Error::Api(status)
        if (400..500).contains(&status.code) && ![404, 408, 409, 429].contains(&status.code));
    let message = format!("{what}: {error}");
    if permanent {
        ProviderError::permanent(message).with_source(error)
    } else {
        ProviderError::transient(message).with_source(error)
    }
}

impl TargetProvider for KubernetesTargets {
    fn validate(&self, rollout: &Rollout) -> Vec<FieldError> {
        settings(rollout).err().unwrap_or_default()
    }

    fn reconcile<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            self.check_fence()?;
            let settings = settings(rollout).map_err(ProviderError::unusable)?;
            let settings = self.read_inputs(key, settings).await?;
            let full = !self
                .refreshed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(key);
            if full {
                // Someone may have changed the objects since: apply them all again.
                self.applied
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(key);
            }
            match settings.mode {
                KubernetesMode::Copy if settings.knative => {
                    self.knative_reconcile(key, rollout, &settings, status)
                        .await?;
                    self.mark_refreshed(key);
                    return Ok(());
                }
                KubernetesMode::Copy if settings.daemon_set => {
                    self.daemon_set_reconcile(key, rollout, &settings, status, full)
                        .await?;
                    self.mark_refreshed(key);
                    return Ok(());
                }
                KubernetesMode::Copy => {}
                KubernetesMode::Managed => {
                    self.managed_reconcile(key, rollout, &settings, status)
                        .await?;
                    self.mark_refreshed(key);
                    return Ok(());
                }
                KubernetesMode::Revisions => {
                    self.revisions_reconcile(key, rollout, &settings, status)
                        .await?;
                    self.mark_refreshed(key);
                    return Ok(());
                }
            }
            if !status.is_set_up() {
                // Until the primary is available nothing routes to it (the machine waits).
                self.prepare(key, rollout, &settings).await?;
                self.mark_refreshed(key);
                return Ok(());
            }
            let target = self.target(key, &settings).await?;
            let primary = self
                .ensure_primary_and_services(key, rollout, &settings, &target, full)
                .await?;
            let route = Route::of(&rollout.spec, status);
            self.apply_route(key, rollout, &settings, &route, status.run)
                .await?;
            // Outside a run only the primary serves: the target waits at zero for its next
            // revision (Flagger's initialisation), once the primary is ready; until then this
            // reconcile is not done and the engine asks again at the next tick.
            if !status.phase.in_run() && target.spec.replicas != Some(0) {
                if !ready_at(&primary, settings.kubernetes.primary_ready_threshold) {
                    return Err(ProviderError::transient(format!(
                        "the target stays up until {}{PRIMARY_SUFFIX} is ready",
                        settings.target_name
                    )));
                }
                self.pause_target_scaler(key, &settings, true).await?;
                self.scale_target(key, &settings, 0).await?;
            }
            if settings.replica_split && !status.phase.in_run() {
                self.label_target_pods(key, &settings).await?;
            }
            self.mark_refreshed(key);
            Ok(())
        })
    }

    fn observe<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<TargetObservation, ProviderError>> {
        Box::pin(async move {
            let settings = settings(rollout).map_err(ProviderError::unusable)?;
            match settings.mode {
                KubernetesMode::Copy if settings.knative => {
                    return self.knative_observe(key, &settings, status).await;
                }
                KubernetesMode::Copy if settings.daemon_set => {
                    return self.daemon_set_observe(key, &settings).await;
                }
                KubernetesMode::Copy => {}
                KubernetesMode::Managed => {
                    return self.managed_observe(key, rollout, &settings, status).await;
                }
                KubernetesMode::Revisions => {
                    return self
                        .revisions_observe(key, rollout, &settings, status)
                        .await;
                }
            }
            let target = self.target(key, &settings).await?;
            let configs = self.tracked_configs(&key.namespace, &target).await?;
            let primary = self.primary(key, &settings).await?;
            Ok(TargetObservation {
                canary_revision: Some(workload::revision(&target, &configs)),
                primary_revision: primary.as_ref().and_then(|primary| {
                    primary
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|annotations| annotations.get(REVISION_ANNOTATION).cloned())
                }),
                primary_ready: primary.as_ref().is_some_and(|primary| {
                    ready_at(primary, settings.kubernetes.primary_ready_threshold)
                }),
                canary_ready: if settings.replica_split && status.phase.in_run() {
                    Self::canary_split_ready(primary.as_ref(), &target, status.canary_weight)
                } else {
                    ready_at(&target, settings.kubernetes.canary_ready_threshold)
                },
            })
        })
    }

    fn apply<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
        effect: &'a Effect,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            self.check_fence()?;
            let mut settings = settings(rollout).map_err(ProviderError::unusable)?;
            if matches!(effect, Effect::SetRoute(_)) || settings.mode != KubernetesMode::Copy {
                settings = self.read_inputs(key, settings).await?;
            }
            match settings.mode {
                KubernetesMode::Copy if settings.knative => {
                    self.knative_apply(key, &settings, status, effect).await?;
                    if matches!(effect, Effect::SetRoute(_)) {
                        self.mark_refreshed(key);
                    }
                    return Ok(());
                }
                KubernetesMode::Copy if settings.daemon_set => {
                    self.daemon_set_apply(key, rollout, &settings, status, effect)
                        .await?;
                    if matches!(effect, Effect::SetRoute(_)) {
                        self.mark_refreshed(key);
                    }
                    return Ok(());
                }
                KubernetesMode::Copy => {}
                KubernetesMode::Managed => {
                    self.managed_apply(key, rollout, &settings, status, effect)
                        .await?;
                    if matches!(effect, Effect::SetRoute(_)) {
                        self.mark_refreshed(key);
                    }
                    return Ok(());
                }
                KubernetesMode::Revisions => {
                    self.revisions_apply(key, rollout, &settings, status, effect)
                        .await?;
                    if matches!(effect, Effect::SetRoute(_)) {
                        self.mark_refreshed(key);
                    }
                    return Ok(());
                }
            }
            match effect {
                Effect::Prepare => self.prepare(key, rollout, &settings).await,
                Effect::SetRoute(route) => {
                    self.apply_route(key, rollout, &settings, route, status.run)
                        .await?;
                    // This process now writes this rollout's objects: its cache is current, and
                    // a later reconcile need not apply them all again.
                    self.mark_refreshed(key);
                    Ok(())
                }
                // Split by replicas, the run's routes scale both Deployments; the target's pods
                // get the label the apex Service selects before it has any.
                Effect::ScaleCanary(Scale::Up) if settings.replica_split => {
                    self.label_target_pods(key, &settings).await
                }
                Effect::ScaleCanary(Scale::Up) => {
                    let replicas = match self.primary(key, &settings).await? {
                        Some(primary) => primary.spec.replicas.unwrap_or(1).max(1),
                        None => 1,
                    };
                    self.pause_target_scaler(key, &settings, false).await?;
                    self.scale_target(key, &settings, replicas).await
                }
                Effect::ScaleCanary(Scale::Down) => {
                    // Never leave nothing serving: the target goes to zero only once the
                    // primary is ready (at set-up it may still be starting). Until then this
                    // fails as transient and the engine delivers it again at the next tick.
                    if settings.replica_split {
                        // The primary back to all its pods first.
                        self.split_replicas(key, &settings, Weight::ZERO).await?;
                    }
                    let primary = self.primary(key, &settings).await?;
                    if !primary.as_ref().is_some_and(|primary| {
                        ready_at(primary, settings.kubernetes.primary_ready_threshold)
                    }) {
                        return Err(ProviderError::transient(format!(
                            "the target stays up until {}{PRIMARY_SUFFIX} is ready",
                            settings.target_name
                        )));
                    }
                    self.pause_target_scaler(key, &settings, true).await?;
                    self.scale_target(key, &settings, 0).await
                }
                Effect::Promote { .. } => self.promote(key, rollout, &settings).await,
                Effect::Finalize => self.revert(key, rollout).await,
                // Hooks and notifications are not the target's.
                Effect::RunHooks { .. } | Effect::Notify(_) => Ok(()),
            }
        })
    }

    fn remove<'a>(&'a self, key: &'a RolloutKey) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.notes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(key);
            self.applied
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(key);
            self.refreshed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(key);
            self.split_noted
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(key);
        })
    }

    fn take_notes<'a>(&'a self, key: &'a RolloutKey) -> BoxFuture<'a, Vec<String>> {
        Box::pin(async move {
            self.notes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(key)
                .unwrap_or_default()
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn deployment(replicas: i32, updated: i32, available: i32) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "podinfo-primary", "generation": 2},
            "spec": {"replicas": replicas, "selector": {}, "template": {}},
            "status": {"observedGeneration": 2, "updatedReplicas": updated,
                "availableReplicas": available}
        }))
        .unwrap()
    }

    #[test]
    fn a_ready_threshold_counts_available_pods_rounded_up_and_never_none() {
        // Flagger's default: every pod.
        assert!(ready_at(&deployment(4, 4, 4), None));
        assert!(!ready_at(&deployment(4, 4, 3), None));
        // 50% of 3 pods is 2 (rounded up).
        assert!(ready_at(&deployment(3, 3, 2), Some(50)));
        assert!(!ready_at(&deployment(3, 3, 1), Some(50)));
        // Never ready with no pod available, whatever the threshold says.
        assert!(!ready_at(&deployment(3, 3, 0), Some(0)));
        assert!(ready_at(&deployment(3, 3, 1), Some(0)));
        // Still rolling out: not ready, whatever is available.
        assert!(!ready_at(&deployment(3, 2, 3), Some(50)));
    }
}
