//! DaemonSet targets (`targetRef.kind: DaemonSet`, mode `copy`), Flagger's way and blue/green
//! only: the user's DaemonSet is the canary, weir keeps a `NAME-primary` copy
//! ([`workload::daemon_set::primary`]) and the same three Services as for a Deployment, and the
//! provider's route objects switch all traffic at once.
//!
//! A DaemonSet has no replica count: the target waits at zero between runs with Flagger's node
//! selector entry `flagger.app/scale-to-zero: "true"` on its pod template, which no node matches,
//! and a run scales it up by removing that entry ([`workload::daemon_set::scale_patch`], a JSON
//! merge patch under the field manager `weir` that leaves the rest of the node selector alone).
//! The entry is not part of the revision, so neither starts a run. Readiness is Flagger's rule
//! for DaemonSets ([`workload::daemon_set::ready`]). As for Deployments, set-up creates the
//! primary and its Services and points the apex Service at the primary only once it is
//! available, and the target goes to zero only while the primary is ready; a promotion copies
//! the target's template into the primary; reverting gives the application back to its own
//! DaemonSet ([`KubernetesTargets::daemon_set_revert`]).
//!
//! Refused at validation ([`refusals`]): any plan but blue/green (a DaemonSet's pod count is set
//! by its nodes, so weir does not split its traffic by weight), and an `autoscalerRef` (nothing
//! scales a DaemonSet's replicas).

use k8s_openapi::api::apps::v1::DaemonSet;
use weir_core::model::Plan;

use super::*;
use crate::workload::daemon_set;

/// What a DaemonSet target cannot have: any plan but blue/green, an autoscaler.
pub(super) fn refusals(rollout: &Rollout, kubernetes: &KubernetesTarget) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let plan_field = match &rollout.spec.plan {
        Plan::BlueGreen(_) => None,
        Plan::Canary(_) => Some("spec.plan.canary"),
        Plan::AbTest(_) => Some("spec.plan.abTest"),
        Plan::Mirror(_) => Some("spec.plan.mirror"),
        Plan::Schedule(_) => Some("spec.plan.schedule"),
    };
    if let Some(field) = plan_field {
        errors.push(FieldError::with_value(
            field,
            rollout.spec.plan.strategy_name(),
            "spec.target.targetRef.kind is DaemonSet, which weir rolls out blue/green only: a \
             DaemonSet runs one pod per node, its pod count is set by the nodes, not by \
             replicas, so no weight between 0 and 100% is given to its canary. Use \
             spec.plan.blueGreen {iterations: N} (a Flagger Canary: analysis.iterations \
             without stepWeight, stepWeights or match), or roll out a Deployment",
        ));
    }
    if kubernetes.autoscaler_ref.is_some() {
        errors.push(FieldError::new(
            "spec.target.autoscalerRef",
            "spec.target.targetRef.kind is DaemonSet: a DaemonSet runs one pod per node and no \
             autoscaler scales it; remove autoscalerRef",
        ));
    }
    errors
}

impl KubernetesTargets {
    fn daemon_sets(&self, namespace: &str) -> Api<DaemonSet> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The target DaemonSet, or a transient error while it does not exist (Flagger waits too).
    async fn target_daemon_set(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<DaemonSet, ProviderError> {
        self.daemon_sets(&key.namespace)
            .get_opt(settings.target_name)
            .await
            .map_err(|error| api_error("reading the target DaemonSet", error))?
            .ok_or_else(|| {
                ProviderError::transient(format!(
                    "the target DaemonSet {}/{} does not exist (yet)",
                    key.namespace, settings.target_name
                ))
            })
    }

    async fn primary_daemon_set(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<Option<DaemonSet>, ProviderError> {
        self.daemon_sets(&key.namespace)
            .get_opt(&format!("{}{PRIMARY_SUFFIX}", settings.target_name))
            .await
            .map_err(|error| api_error("reading the primary DaemonSet", error))
    }

    async fn apply_daemon_set(
        &self,
        namespace: &str,
        daemon_set: &DaemonSet,
    ) -> Result<(), ProviderError> {
        let name = daemon_set.metadata.name.clone().unwrap_or_default();
        self.daemon_sets(namespace)
            .patch(&name, &apply_params(), &Patch::Apply(daemon_set))
            .await
            .map_err(|error| api_error("applying a DaemonSet", error))?;
        Ok(())
    }

    /// The primary DaemonSet as the target's template and tracked configs make it now, with
    /// its revision annotation; the copies of the tracked configs are applied first, so that
    /// its pods find them.
    async fn primary_daemon_set_from(
        &self,
        namespace: &str,
        target: &DaemonSet,
        owner: &OwnerReference,
    ) -> Result<DaemonSet, ProviderError> {
        let configs = self.tracked_configs(namespace, target).await?;
        self.apply_primary_configs(namespace, &configs, owner)
            .await?;
        let mut primary = daemon_set::primary(target, &configs, owner)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        primary
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                REVISION_ANNOTATION.into(),
                daemon_set::revision(target, &configs),
            );
        Ok(primary)
    }

    /// Creates the primary from the target when it does not exist, and returns it.
    async fn ensure_primary_daemon_set(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        target: &DaemonSet,
        owner: &OwnerReference,
    ) -> Result<DaemonSet, ProviderError> {
        if let Some(primary) = self.primary_daemon_set(key, settings).await? {
            return Ok(primary);
        }
        let primary = self
            .primary_daemon_set_from(&key.namespace, target, owner)
            .await?;
        self.apply_daemon_set(&key.namespace, &primary).await?;
        Ok(primary)
    }

    /// Set-up before the primary takes traffic ([`Effect::Prepare`]): the primary and the
    /// Services `NAME-primary` and `NAME-canary`; the apex Service and the route objects wait
    /// until the primary is available.
    async fn daemon_set_prepare(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
    ) -> Result<(), ProviderError> {
        let target = self.target_daemon_set(key, settings).await?;
        let owner = owner_of(rollout);
        self.ensure_primary_daemon_set(key, settings, &target, &owner)
            .await?;
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        let [_apex, primary, canary] = workload::services(&target, &service, &owner)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        self.apply_services(&key.namespace, [primary, canary]).await
    }

    /// The primary (created when it does not exist) and the three Services, applied when the
    /// apex is not the rollout's yet or `refresh_services` (a reconcile) asks for it.
    async fn ensure_daemon_set_primary_and_services(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        target: &DaemonSet,
        refresh_services: bool,
    ) -> Result<DaemonSet, ProviderError> {
        let owner = owner_of(rollout);
        let primary = self
            .ensure_primary_daemon_set(key, settings, target, &owner)
            .await?;
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
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        let services = workload::services(target, &service, &owner)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        self.apply_services(&key.namespace, services).await?;
        Ok(primary)
    }

    /// The provider's objects for `route`, once the primary and the Services are there.
    async fn daemon_set_route(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        route: &Route,
        run: u64,
    ) -> Result<(), ProviderError> {
        let target = self.target_daemon_set(key, settings).await?;
        self.ensure_daemon_set_primary_and_services(key, rollout, settings, &target, false)
            .await?;
        let owner = serde_json::to_value(owner_of(rollout)).unwrap_or(Value::Null);
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        let mut names = settings.names(&key.namespace);
        names.port = workload::service_port(&target, &service)
            .map_err(|error| ProviderError::permanent(error.to_string()))?;
        self.apply_route_objects(key, settings, &names, route, run, &owner)
            .await
    }

    /// Scales the target DaemonSet to zero (`to_zero`: the scale-to-zero node selector entry
    /// added) or up (removed); nothing is written when it already is so.
    async fn scale_daemon_set(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        to_zero: bool,
    ) -> Result<(), ProviderError> {
        let target = self.target_daemon_set(key, settings).await?;
        if daemon_set::scaled_to_zero(&target) == to_zero {
            return Ok(());
        }
        self.daemon_sets(&key.namespace)
            .patch(
                settings.target_name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(daemon_set::scale_patch(to_zero)),
            )
            .await
            .map_err(|error| {
                api_error(
                    if to_zero {
                        "scaling the target DaemonSet to zero (node selector flagger.app/scale-to-zero)"
                    } else {
                        "scaling the target DaemonSet up (removing the node selector flagger.app/scale-to-zero)"
                    },
                    error,
                )
            })?;
        Ok(())
    }

    /// The target to zero, once the primary serves (never leave nothing serving; until then a
    /// transient error, and the engine asks again at the next tick).
    async fn daemon_set_scale_down(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        primary: Option<&DaemonSet>,
    ) -> Result<(), ProviderError> {
        match primary {
            Some(primary) if daemon_set::ready(primary) => {
                self.scale_daemon_set(key, settings, true).await
            }
            Some(primary) => Err(ProviderError::transient(format!(
                "the target DaemonSet stays up until {}{PRIMARY_SUFFIX} is ready ({})",
                settings.target_name,
                daemon_set::progress(primary)
            ))),
            None => Err(ProviderError::transient(format!(
                "the target DaemonSet stays up until {}{PRIMARY_SUFFIX} exists and is ready",
                settings.target_name
            ))),
        }
    }

    /// [`TargetProvider::reconcile`] for a DaemonSet target (`full`: apply every Service again).
    pub(super) async fn daemon_set_reconcile(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        status: &RolloutStatus,
        full: bool,
    ) -> Result<(), ProviderError> {
        if !status.is_set_up() {
            // Until the primary is available nothing routes to it (the machine waits).
            return self.daemon_set_prepare(key, rollout, settings).await;
        }
        let target = self.target_daemon_set(key, settings).await?;
        let primary = self
            .ensure_daemon_set_primary_and_services(key, rollout, settings, &target, full)
            .await?;
        let route = Route::of(&rollout.spec, status);
        self.daemon_set_route(key, rollout, settings, &route, status.run)
            .await?;
        // Outside a run only the primary serves: the target waits at zero for its next revision.
        if !status.phase.in_run() && !daemon_set::scaled_to_zero(&target) {
            self.daemon_set_scale_down(key, settings, Some(&primary))
                .await?;
        }
        Ok(())
    }

    /// [`TargetProvider::observe`] for a DaemonSet target.
    pub(super) async fn daemon_set_observe(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<TargetObservation, ProviderError> {
        let target = self.target_daemon_set(key, settings).await?;
        let configs = self.tracked_configs(&key.namespace, &target).await?;
        let primary = self.primary_daemon_set(key, settings).await?;
        Ok(TargetObservation {
            canary_revision: Some(daemon_set::revision(&target, &configs)),
            primary_revision: primary.as_ref().and_then(|primary| {
                primary
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|annotations| annotations.get(REVISION_ANNOTATION).cloned())
            }),
            primary_ready: primary.as_ref().is_some_and(daemon_set::ready),
            canary_ready: daemon_set::ready(&target),
        })
    }

    /// [`TargetProvider::apply`] for a DaemonSet target.
    pub(super) async fn daemon_set_apply(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        status: &RolloutStatus,
        effect: &Effect,
    ) -> Result<(), ProviderError> {
        match effect {
            Effect::Prepare => self.daemon_set_prepare(key, rollout, settings).await,
            Effect::SetRoute(route) => {
                self.daemon_set_route(key, rollout, settings, route, status.run)
                    .await
            }
            Effect::ScaleCanary(Scale::Up) => self.scale_daemon_set(key, settings, false).await,
            Effect::ScaleCanary(Scale::Down) => {
                let primary = self.primary_daemon_set(key, settings).await?;
                self.daemon_set_scale_down(key, settings, primary.as_ref())
                    .await
            }
            Effect::Promote { .. } => self.daemon_set_promote(key, rollout, settings).await,
            Effect::Finalize => self.daemon_set_revert(key, rollout, settings).await,
            // Hooks and notifications are not the target's.
            Effect::RunHooks { .. } | Effect::Notify(_) => Ok(()),
        }
    }

    /// Promotion: the primary takes the target's pod template (without the scale-to-zero
    /// entry) and the tracked configs as they are now; its rolling update keeps serving.
    async fn daemon_set_promote(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
    ) -> Result<(), ProviderError> {
        let target = self.target_daemon_set(key, settings).await?;
        let primary = self
            .primary_daemon_set_from(&key.namespace, &target, &owner_of(rollout))
            .await?;
        self.apply_daemon_set(&key.namespace, &primary).await
    }

    /// Undoes what weir set up for a DaemonSet target (`revertOnDeletion`, the `Finalize`
    /// effect), leaving the application serving from its own DaemonSet, as
    /// [`KubernetesTargets::revert`] does for a Deployment:
    ///
    /// 1. the target, if it waits at zero, is scaled up (the node selector entry removed);
    /// 2. once it is ready, the apex Service selects its pods and is no longer the rollout's;
    /// 3. the provider's route objects, the Services `NAME-primary` and `NAME-canary`, the
    ///    DaemonSet `NAME-primary` and the copies `CONFIG-primary` the rollout owns are deleted.
    ///
    /// Until the target is ready this answers a transient error and changes nothing else. A
    /// target that no longer exists is not restored; the rest is still deleted.
    pub(super) async fn daemon_set_revert(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
    ) -> Result<(), ProviderError> {
        self.applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        let namespace = key.namespace.as_str();
        let owner = owner_of(rollout);
        let names = settings.names(namespace);
        let service = settings.kubernetes.service.clone().unwrap_or_default();
        let primary = self.primary_daemon_set(key, settings).await?;
        let target = self
            .daemon_sets(namespace)
            .get_opt(settings.target_name)
            .await
            .map_err(|error| api_error("reading the target DaemonSet", error))?;
        if let Some(target) = &target {
            let scaled = daemon_set::scaled_to_zero(target);
            if scaled {
                self.scale_daemon_set(key, settings, false).await?;
            }
            if scaled || !daemon_set::ready(target) {
                return Err(ProviderError::transient(format!(
                    "reverting: waiting for the target DaemonSet {namespace}/{} to be ready before the apex Service selects it ({})",
                    settings.target_name,
                    daemon_set::progress(target)
                )));
            }
            self.give_apex_back(namespace, &names, target, &service, &owner)
                .await?;
        }
        self.delete_routing(namespace, settings, &names, &service, &owner)
            .await?;
        let primary_name = format!("{}{PRIMARY_SUFFIX}", settings.target_name);
        delete_if_present(
            &self.daemon_sets(namespace),
            &primary_name,
            &format!("the DaemonSet {primary_name}"),
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
}
