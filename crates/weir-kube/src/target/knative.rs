//! `provider: knative` (Flagger's Knative support): the target is a Knative Service
//! (`serving.knative.dev/v1`, `targetRef.kind: Service`) and its Revisions are the versions.
//! weir creates and copies nothing - no primary Deployment, no Kubernetes Service, no owner
//! reference on the user's Service - and Knative runs and scales every revision itself.
//!
//! | | where it is |
//! |---|---|
//! | the canary's revision | the Service's `status.latestCreatedRevisionName` |
//! | the primary's revision | the Service's annotation `flagger.app/primary-revision` (Flagger's) |
//! | the route | the Service's `spec.traffic`: `latestRevision: true` takes the canary's share, `revisionName: PRIMARY` the rest ([`routes`]' `knative`) |
//!
//! **Readiness.** A revision is ready when Knative says so: the Service's
//! `status.latestReadyRevisionName` names it, or (an older revision: the primary during a run)
//! its Revision object's `Ready` condition is `True`, Flagger's rule. The canary is ready only as
//! the latest ready revision: Knative resolves `latestRevision: true` to the latest *ready*
//! revision, so only then does the canary's share reach the canary.
//!
//! **Writes.** Every write is one server-side apply of the Service (field manager `weir`,
//! forced) holding only the annotation and `spec.traffic`, so the user's `spec.template` and
//! everything else stay theirs; each write carries both fields, and checks first that the
//! revision it names as primary is ready (a transient error until then: nothing ever routes to
//! a revision that is not ready).
//!
//! - **Set-up** ([`Effect::Prepare`], and a reconcile until the rollout is set up): the primary
//!   is the revision the annotation already names if it is ready (an operator restarted, or a
//!   Service Flagger ran before: an untested latest revision is not made the primary), else the
//!   latest created revision once it is ready; then the annotation names it and `spec.traffic`
//!   is `[{latestRevision: true, percent: 0}, {revisionName: REV, percent: 100}]`. Until then the
//!   Service is left as it is and set-up waits (a transient error). The primary is reported
//!   ready only once the annotation names it, so the rollout is set up only once this is
//!   written.
//! - **A run** moves `spec.traffic` as the route says. Scaling the canary up or down does
//!   nothing: Knative scales revisions itself (to zero when they get no traffic).
//! - **Promotion** ([`Effect::Promote`]) makes the promoted revision - the one the run judged,
//!   not a newer one Knative may have created since - the primary: the annotation names it and
//!   it takes 100% at once (primary and canary are then the same revision). From then on, and
//!   until the next run, every route sends everything to the primary, so a newer revision gets
//!   no share through `latestRevision` before its own run.
//! - **Rollback** is the route all to the primary.
//! - **Reverting** (`revertOnDeletion`, [`Effect::Finalize`]): the annotation is removed and
//!   `spec.traffic` is Knative's default again, `[{latestRevision: true, percent: 100}]` - the
//!   latest ready revision serves, as it did before weir.
//!
//! The primary weir routes to is the rollout's status (`status.primaryRevision`, set at set-up
//! and promotion), else the annotation; observe reports the primary ready only while the
//! annotation names that revision, so a promotion whose write failed waits (and is written again
//! by the next reconcile) instead of passing for done.
//!
//! Refused at validation ([`refusals`], besides what `routes/knative.rs` refuses: A/B, mirroring,
//! session affinity, a `targetRef` that is not a Knative Service): `spec.target.autoscalerRef`
//! (Knative autoscales revisions itself and there is no copy for an autoscaler to scale; Flagger
//! ignores it, weir says so instead) and any `spec.target.mode` but `copy`.

use super::*;
use crate::routes::PRIMARY_REVISION_ANNOTATION;

/// Knative Serving's API group.
const GROUP: &str = "serving.knative.dev";

/// What a Knative target cannot have (the provider's own refusals are the router's).
pub(super) fn refusals(kubernetes: &KubernetesTarget) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(mode) = kubernetes.mode.filter(|mode| *mode != KubernetesMode::Copy) {
        errors.push(FieldError::with_value(
            "spec.target.mode",
            mode.as_str(),
            "provider knative rolls out a Knative Service's own revisions: leave spec.target.mode \
             unset (copy)",
        ));
    }
    if kubernetes.autoscaler_ref.is_some() {
        errors.push(FieldError::new(
            "spec.target.autoscalerRef",
            "provider knative: Knative scales each revision itself (configure it on the \
             Service's template, e.g. the autoscaling.knative.dev annotations) and weir makes no \
             primary copy for an autoscaler to scale; Flagger ignores autoscalerRef here, weir \
             refuses it: remove it",
        ));
    }
    errors
}

/// What weir reads of a Knative Service.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct KnativeService {
    /// `status.latestCreatedRevisionName`: the canary's revision.
    latest_created: Option<String>,
    /// `status.latestReadyRevisionName`.
    latest_ready: Option<String>,
    /// The annotation `flagger.app/primary-revision`.
    annotated: Option<String>,
}

impl KnativeService {
    fn of(service: &DynamicObject) -> KnativeService {
        let text = |pointer: &str| {
            service
                .data
                .pointer(pointer)
                .and_then(Value::as_str)
                .filter(|text| !text.is_empty())
                .map(str::to_string)
        };
        KnativeService {
            latest_created: text("/status/latestCreatedRevisionName"),
            latest_ready: text("/status/latestReadyRevisionName"),
            annotated: service
                .metadata
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(PRIMARY_REVISION_ANNOTATION))
                .filter(|revision| !revision.is_empty())
                .cloned(),
        }
    }

    /// Whether the latest created revision is the latest ready one: the canary serves what
    /// `latestRevision: true` sends it.
    fn canary_ready(&self) -> bool {
        self.latest_created.is_some() && self.latest_ready == self.latest_created
    }
}

/// Whether `object`'s `status.conditions` has `kind` with status `True`.
fn condition_true(object: &Value, kind: &str) -> bool {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|condition| condition["type"] == kind && condition["status"] == "True")
}

/// The route that sends everything to the primary.
fn all_to_primary() -> Route {
    Route {
        primary_weight: Weight::FULL,
        canary_weight: Weight::ZERO,
        mirror_weight: None,
        match_rules: Vec::new(),
        session_affinity: None,
    }
}

/// Whether the run's canary is the primary already (promoted: in promotion, finalising, or
/// succeeded): then every route sends everything to the primary.
fn promoted(status: &RolloutStatus) -> bool {
    status.canary_revision.is_some() && status.canary_revision == status.primary_revision
}

/// The route to write for `route` in `status` ([`promoted`]: all to the primary).
fn knative_route(route: &Route, status: &RolloutStatus) -> Route {
    if promoted(status) {
        all_to_primary()
    } else {
        route.clone()
    }
}

impl KubernetesTargets {
    /// The API of Knative Serving's `kind` (`Service`, `Revision`) in `namespace`.
    fn knative_api(&self, namespace: &str, kind: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(GROUP, "v1", kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, &routes::plural(kind));
        Api::namespaced_with(self.client.clone(), namespace, &resource)
    }

    /// The target Knative Service, or a transient error while it does not exist.
    async fn knative_service(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<KnativeService, ProviderError> {
        self.knative_api(&key.namespace, "Service")
            .get_opt(settings.target_name)
            .await
            .map_err(|error| api_error("reading the Knative Service", error))?
            .map(|service| KnativeService::of(&service))
            .ok_or_else(|| {
                ProviderError::transient(format!(
                    "the Knative Service {}/{} does not exist (yet)",
                    key.namespace, settings.target_name
                ))
            })
    }

    /// Whether `revision` of `service` is ready: the latest ready revision, or a Revision whose
    /// Ready condition is True (one GET; a Revision that does not exist is not ready).
    async fn knative_revision_ready(
        &self,
        namespace: &str,
        service: &KnativeService,
        revision: &str,
    ) -> Result<bool, ProviderError> {
        if service.latest_ready.as_deref() == Some(revision) {
            return Ok(true);
        }
        let found = self
            .knative_api(namespace, "Revision")
            .get_opt(revision)
            .await
            .map_err(|error| api_error(&format!("reading the Revision {revision}"), error))?;
        Ok(found.is_some_and(|found| condition_true(&found.data, "Ready")))
    }

    /// The revision weir routes to as the primary once set up: the rollout's, else the
    /// annotation's.
    fn knative_primary(status: &RolloutStatus, service: &KnativeService) -> Option<String> {
        if status.is_set_up() {
            status
                .primary_revision
                .clone()
                .or_else(|| service.annotated.clone())
        } else {
            service.annotated.clone()
        }
    }

    /// Writes the annotation naming `primary` and `spec.traffic` for `route`, once `primary` is
    /// ready (when it takes any traffic); a transient error naming the revision until then.
    async fn knative_write(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        service: &KnativeService,
        route: &Route,
        primary: &str,
        run: u64,
    ) -> Result<(), ProviderError> {
        if route.primary_weight > Weight::ZERO
            && !self
                .knative_revision_ready(&key.namespace, service, primary)
                .await?
        {
            return Err(ProviderError::transient(format!(
                "revision {primary} of the Knative Service {}/{} is not ready: no traffic is sent \
                 to it until it is",
                key.namespace, settings.target_name
            )));
        }
        let names = settings.names(&key.namespace);
        let kubernetes_service = settings.kubernetes.service.clone().unwrap_or_default();
        // The user's Service gets no owner reference.
        let owner = Value::Null;
        let ctx = routes::RouteContext {
            target: settings.kubernetes,
            annotations: settings.annotations,
            resolution: settings.resolution,
            inputs: &settings.inputs,
            primary_revision: Some(primary),
            ..routes::RouteContext::new(&names, &kubernetes_service, run, &owner)
        };
        let objects = settings
            .provider
            .router()
            .objects(&ctx, route)
            .map_err(ProviderError::permanent)?;
        if let Some(adjusted) = objects.adjusted {
            self.note(key, adjusted);
        }
        for edit in objects.edits {
            self.apply_owned(key, edit).await?;
        }
        Ok(())
    }

    /// Set-up: the primary revision named by the annotation and given all traffic, once ready.
    async fn knative_prepare(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        run: u64,
    ) -> Result<(), ProviderError> {
        let service = self.knative_service(key, settings).await?;
        let kept = match &service.annotated {
            Some(annotated)
                if self
                    .knative_revision_ready(&key.namespace, &service, annotated)
                    .await? =>
            {
                Some(annotated.clone())
            }
            _ => None,
        };
        let primary = match (kept, &service.latest_created) {
            (Some(kept), _) => kept,
            (None, Some(latest)) if service.canary_ready() => latest.clone(),
            (None, Some(latest)) => {
                return Err(ProviderError::transient(format!(
                    "set-up waits for revision {latest} of the Knative Service {}/{} to be ready \
                     before it takes all traffic",
                    key.namespace, settings.target_name
                )));
            }
            (None, None) => {
                return Err(ProviderError::transient(format!(
                    "the Knative Service {}/{} has no revision yet",
                    key.namespace, settings.target_name
                )));
            }
        };
        self.knative_write(key, settings, &service, &all_to_primary(), &primary, run)
            .await
    }

    /// `route` between the primary and the latest revision, in `status`.
    async fn knative_route_to(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        status: &RolloutStatus,
        route: &Route,
    ) -> Result<(), ProviderError> {
        let service = self.knative_service(key, settings).await?;
        let primary = Self::knative_primary(status, &service).ok_or_else(|| {
            ProviderError::transient(format!(
                "the primary revision of the Knative Service {}/{} is not known yet",
                key.namespace, settings.target_name
            ))
        })?;
        self.knative_write(
            key,
            settings,
            &service,
            &knative_route(route, status),
            &primary,
            status.run,
        )
        .await
    }

    /// [`TargetProvider::reconcile`] for a Knative Service: set-up until the rollout is set up,
    /// then the route of the status.
    pub(super) async fn knative_reconcile(
        &self,
        key: &RolloutKey,
        rollout: &Rollout,
        settings: &Settings<'_>,
        status: &RolloutStatus,
    ) -> Result<(), ProviderError> {
        if !status.is_set_up() {
            return self.knative_prepare(key, settings, status.run).await;
        }
        let route = Route::of(&rollout.spec, status);
        self.knative_route_to(key, settings, status, &route).await
    }

    /// [`TargetProvider::observe`] for a Knative Service.
    pub(super) async fn knative_observe(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        status: &RolloutStatus,
    ) -> Result<TargetObservation, ProviderError> {
        let service = self.knative_service(key, settings).await?;
        // The primary serves once the annotation names the revision weir routes to as primary
        // and that revision is ready.
        let primary_ready = match (&service.annotated, Self::knative_primary(status, &service)) {
            (Some(annotated), Some(primary)) if *annotated == primary => {
                self.knative_revision_ready(&key.namespace, &service, annotated)
                    .await?
            }
            _ => false,
        };
        Ok(TargetObservation {
            canary_revision: service.latest_created.clone(),
            primary_revision: service.annotated.clone(),
            primary_ready,
            canary_ready: service.canary_ready(),
        })
    }

    /// [`TargetProvider::apply`] for a Knative Service.
    pub(super) async fn knative_apply(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
        status: &RolloutStatus,
        effect: &Effect,
    ) -> Result<(), ProviderError> {
        match effect {
            Effect::Prepare => self.knative_prepare(key, settings, status.run).await,
            Effect::SetRoute(route) => self.knative_route_to(key, settings, status, route).await,
            // Knative scales revisions itself.
            Effect::ScaleCanary(_) => Ok(()),
            Effect::Promote { revision } => {
                let service = self.knative_service(key, settings).await?;
                self.knative_write(
                    key,
                    settings,
                    &service,
                    &all_to_primary(),
                    revision,
                    status.run,
                )
                .await
            }
            Effect::Finalize => self.knative_revert(key, settings).await,
            // Hooks and notifications are not the target's.
            Effect::RunHooks { .. } | Effect::Notify(_) => Ok(()),
        }
    }

    /// Undoes what weir set on the Knative Service (`revertOnDeletion`, the `Finalize`
    /// effect): the annotation removed and `spec.traffic` back to Knative's default, all to the
    /// latest ready revision. A Service that no longer exists is fine.
    pub(super) async fn knative_revert(
        &self,
        key: &RolloutKey,
        settings: &Settings<'_>,
    ) -> Result<(), ProviderError> {
        self.applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        let api = self.knative_api(&key.namespace, "Service");
        let name = settings.target_name;
        if api
            .get_opt(name)
            .await
            .map_err(|error| api_error("reading the Knative Service", error))?
            .is_none()
        {
            return Ok(());
        }
        // The annotation omitted: server-side apply removes what weir applied before.
        let released = json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": "Service",
            "metadata": {"name": name, "namespace": key.namespace},
            "spec": {"traffic": [{"latestRevision": true, "percent": 100}]},
        });
        let applied = api
            .patch(name, &apply_params(), &Patch::Apply(&released))
            .await
            .map_err(|error| api_error("giving the Knative Service its traffic back", error))?;
        // Another manager may share the annotation (the same value applied by both): remove it
        // outright.
        if KnativeService::of(&applied).annotated.is_some() {
            api.patch(
                name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(json!({
                    "metadata": {"annotations": {PRIMARY_REVISION_ANNOTATION: null}}
                })),
            )
            .await
            .map_err(|error| {
                api_error(
                    "removing the primary-revision annotation from the Knative Service",
                    error,
                )
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
