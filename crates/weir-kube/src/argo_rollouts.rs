//! Argo Rollouts' `Rollout`s run by weir's operator: the shell around
//! [`weir_core::argo::sync::reconcile`].
//!
//! Each pass reads a Rollout, the ReplicaSets and AnalysisRuns it owns (by owner reference) and
//! the time, asks the core what to do, and does it in order: ReplicaSets created and scaled,
//! scale-down deadlines annotated, AnalysisRuns created from their templates (arguments resolved
//! as Argo does) or terminated, Services pointed at a pod template hash; then the status is
//! written as a merge patch of what changed, and Kubernetes Events are recorded with Argo's
//! reasons. The AnalysisRuns themselves are measured by [`crate::argo_analysis`].
//!
//! A Rollout is looked at again when it changes (a watch) and at least every
//! [`LOOK_AGAIN`] while its ReplicaSets' pods, its runs or a timed pause may have moved on, which
//! the Rollout's own watch does not see. Every pass starts from what the cluster says, so a
//! restarted operator (or a second one after a leader change) carries on where the last left off.

use std::collections::{BTreeMap, HashSet};

use jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use weir_core::argo::analysis::{flatten_template_args, merge_args, rollout_args};
use weir_core::argo::experiment::{StepSource, experiment_for_step};
use weir_core::argo::sync::{
    self, Action, MANAGED_BY_ANNOTATION, Observed, POD_TEMPLATE_HASH_LABEL, REVISION_ANNOTATION,
    ReplicaSetView, RunKind, RunView, SCALE_DOWN_DEADLINE_ANNOTATION, Status,
};
use weir_core::argo::types::{AnalysisArg, Rollout, RolloutAnalysis};

use crate::argo_analysis::{analysis_runs_resource, merge_diff};
use crate::argo_experiments::experiments_resource;
use crate::argo_shell::{
    PassError, api_error, apis, create_unless_present, delete_if_present, owned, reconcile_each,
    replica_counts, resource, run_view,
};
use crate::argo_traffic::Weights;

/// Who writes, for Events.
const COMPONENT: &str = "weir-operator";

/// `rollouts.argoproj.io`, version `v1alpha1`.
pub fn argo_rollouts_resource() -> ApiResource {
    resource("argoproj.io", "v1alpha1", "Rollout", "rollouts")
}

/// Whether Argo Rollouts' Rollout CRD is installed (the operator then runs Argo Rollouts),
/// asked where the operator may look: the first of `namespaces`, else every namespace.
pub async fn installed(client: &kube::Client, namespaces: &[String]) -> bool {
    let api = apis(
        client,
        &namespaces[..namespaces.len().min(1)],
        &argo_rollouts_resource(),
    );
    match api.first() {
        Some(api) => api.list(&ListParams::default().limit(1)).await.is_ok(),
        None => false,
    }
}

/// Runs the Argo Rollouts of `namespaces` (empty: every namespace); never returns by itself.
pub async fn run(client: kube::Client, namespaces: Vec<String>) {
    reconcile_each(
        client,
        namespaces,
        argo_rollouts_resource(),
        "Rollout",
        |client, rollout| async move { reconcile(&client, &rollout).await },
    )
    .await;
}

/// The Rollout as weir reads it: metadata cut to what the typed model keeps, no status.
fn typed(object: &Value) -> Result<Rollout, String> {
    let mut document = object.clone();
    if let Some(map) = document.as_object_mut() {
        map.remove("status");
        if let Some(metadata) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.retain(|key, _| {
                matches!(
                    key.as_str(),
                    "name" | "namespace" | "labels" | "annotations"
                )
            });
        }
    }
    match weir_core::argo::read(&document) {
        Ok(read) => match read.value.object {
            weir_core::argo::ArgoObject::Rollout(rollout) => Ok(*rollout),
            _ => Err("kind: not a Rollout".into()),
        },
        Err(errors) => Err(errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")),
    }
}

async fn reconcile(client: &kube::Client, object: &DynamicObject) -> Result<(), PassError> {
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    let name = object.metadata.name.clone().unwrap_or_default();
    let uid = object.metadata.uid.clone().unwrap_or_default();
    let json = serde_json::to_value(object).unwrap_or(Value::Null);
    let stored_status = json.get("status").cloned().unwrap_or(json!({}));
    let status = Status::read(json.get("status"));
    let now = Timestamp::now();
    let generation = object.metadata.generation.unwrap_or(1);
    let rollouts: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &argo_rollouts_resource());

    let rollout = typed(&json);
    let template = match &rollout {
        Ok(rollout) => template_of(client, &namespace, rollout, &json).await,
        Err(_) => Ok(Value::Null),
    };
    let replica_sets = owned(
        client,
        &namespace,
        &uid,
        &resource("apps", "v1", "ReplicaSet", "replicasets"),
    )
    .await?;
    let runs = owned(client, &namespace, &uid, &analysis_runs_resource()).await?;
    let experiments = owned(client, &namespace, &uid, &experiments_resource()).await?;
    let rs_views: Vec<ReplicaSetView> = replica_sets.iter().filter_map(rs_view).collect();
    let run_views: Vec<RunView> = runs.iter().map(run_view).collect();
    let experiment_views: Vec<RunView> = experiments.iter().map(run_view).collect();

    let placeholder: Rollout;
    let (rollout, template, invalid) = match (rollout, template) {
        (Ok(rollout), Ok(template)) => {
            let invalid = sync::unsupported(&rollout);
            (rollout, template, invalid)
        }
        (Err(reason), _) | (Ok(_), Err(reason)) => {
            placeholder = minimal(&name);
            (placeholder, Value::Null, Some(reason))
        }
    };
    let observed = Observed {
        rollout: &rollout,
        generation,
        status,
        template: &template,
        replica_sets: &rs_views,
        runs: &run_views,
        experiments: &experiment_views,
        now,
    };
    let mut result = match &invalid {
        Some(reason) => sync::invalid(&observed, reason),
        None => sync::reconcile(&observed),
    };
    let owner = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "name": name,
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let context = Context {
        client,
        namespace: &namespace,
        name: &name,
        owner: &owner,
        rollout: &rollout,
        rollout_json: &json,
        template: &template,
        status: &result.status,
        uid: &uid,
        replica_sets: &replica_sets,
    };
    let mut refused = None;
    for action in &result.actions {
        if let Err(reason) = context.act(action).await? {
            refused = Some(reason);
            break;
        }
    }
    if let Some(reason) = refused {
        result = sync::invalid(&observed, &reason);
    } else if let Some(at) = &rollout.spec.restart_at
        && result.status.restarted_at.as_ref() != Some(at)
        && restart(client, &namespace, &rollout, at, &rs_views).await?
    {
        result.status.restarted_at = Some(at.clone());
    }
    let new_status = result.status.to_json();
    let patch = merge_diff(&stored_status, &new_status);
    if patch.as_object().is_some_and(|patch| !patch.is_empty()) {
        rollouts
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": patch})),
            )
            .await
            .map_err(api_error(format!(
                "writing the status of Argo Rollout {namespace}/{name}"
            )))?;
    }
    if object
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(REVISION_ANNOTATION))
        .map(String::as_str)
        != current_revision(&rs_views, &result.status.current_pod_hash).as_deref()
        && let Some(revision) = current_revision(&rs_views, &result.status.current_pod_hash)
    {
        let patch = json!({"metadata": {"annotations": {REVISION_ANNOTATION: revision}}});
        rollouts
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(api_error(format!(
                "annotating Argo Rollout {namespace}/{name}"
            )))?;
    }
    record(client, &namespace, &name, &uid, &result.events).await;
    Ok(())
}

fn current_revision(replica_sets: &[ReplicaSetView], hash: &str) -> Option<String> {
    replica_sets
        .iter()
        .find(|rs| rs.hash == hash)
        .map(|rs| rs.revision.to_string())
}

/// A Rollout with nothing but its name, to write the status of one that cannot be read.
fn minimal(name: &str) -> Rollout {
    Rollout {
        api_version: weir_core::argo::API_VERSION.into(),
        kind: "Rollout".into(),
        metadata: weir_core::argo::types::Metadata {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: Default::default(),
        status: None,
    }
}

/// `kubectl argo rollouts restart`: the pods of the Rollout's ReplicaSets created before
/// `restartAt` are evicted (the Eviction API, so PodDisruptionBudgets hold), at most
/// `maxUnavailable` at a time (at least one); true once none is left, when the restart is done.
async fn restart(
    client: &kube::Client,
    namespace: &str,
    rollout: &Rollout,
    at: &str,
    replica_sets: &[ReplicaSetView],
) -> Result<bool, PassError> {
    let Ok(at) = at.parse::<Timestamp>() else {
        // Not a time: nothing can be older than it; the restart is over before it began.
        return Ok(true);
    };
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods
        .list(&ListParams::default())
        .await
        .map_err(api_error(format!(
            "listing the pods of {namespace} to restart"
        )))?;
    let owned: HashSet<&str> = replica_sets.iter().map(|rs| rs.name.as_str()).collect();
    let old: Vec<String> =
        listed
            .items
            .iter()
            .filter(|pod| {
                pod.metadata.deletion_timestamp.is_none()
                    && pod.metadata.owner_references.iter().flatten().any(|owner| {
                        owner.kind == "ReplicaSet" && owned.contains(owner.name.as_str())
                    })
                    && pod
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .and_then(|created| created.0.to_string().parse::<Timestamp>().ok())
                        .is_some_and(|created| created < at)
            })
            .filter_map(|pod| pod.metadata.name.clone())
            .collect();
    if old.is_empty() {
        return Ok(true);
    }
    let replicas = weir_core::argo::replicas::spec_replicas(rollout.spec.replicas);
    let at_once = rollout
        .spec
        .strategy
        .as_ref()
        .and_then(|strategy| strategy.canary.as_deref())
        .map_or(1, |canary| {
            weir_core::argo::replicas::Fenceposts::of(canary, replicas).max_unavailable
        })
        .max(1);
    for name in old.iter().take(usize::try_from(at_once).unwrap_or(1)) {
        if let Err(error) = pods.evict(name, &Default::default()).await {
            // A disruption budget may refuse it now; it is asked again on the next pass.
            eprintln!("weir operator: evicting pod {namespace}/{name} to restart: {error}");
        }
    }
    Ok(false)
}

/// `spec.template`, or the pod template of the `workloadRef` Deployment.
async fn template_of(
    client: &kube::Client,
    namespace: &str,
    rollout: &Rollout,
    json: &Value,
) -> Result<Value, String> {
    if let Some(template) = json.pointer("/spec/template") {
        return Ok(template.clone());
    }
    let Some(reference) = &rollout.spec.workload_ref else {
        return Err("spec.template: Required value".into());
    };
    let name = reference.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &resource("apps", "v1", "Deployment", "deployments"),
    );
    match api.get_opt(&name).await {
        Ok(Some(deployment)) => serde_json::to_value(&deployment)
            .ok()
            .and_then(|deployment| deployment.pointer("/spec/template").cloned())
            .ok_or_else(|| format!("spec.workloadRef: Deployment {name:?} has no pod template")),
        Ok(None) => Err(format!(
            "spec.workloadRef.name: Invalid value: {name:?}: the Deployment does not exist"
        )),
        Err(error) => Err(format!(
            "spec.workloadRef: reading Deployment {name:?}: {error}"
        )),
    }
}

fn rs_view(object: &DynamicObject) -> Option<ReplicaSetView> {
    let hash = object
        .metadata
        .labels
        .as_ref()?
        .get(POD_TEMPLATE_HASH_LABEL)?
        .clone();
    let counts = replica_counts(object);
    Some(ReplicaSetView {
        name: object.metadata.name.clone().unwrap_or_default(),
        hash,
        revision: object
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(REVISION_ANNOTATION))
            .and_then(|revision| revision.parse().ok())
            .unwrap_or(0),
        replicas: counts.replicas,
        status_replicas: counts.status_replicas,
        ready: counts.ready,
        available: counts.available,
        scale_down_deadline: counts.scale_down_deadline,
    })
}

/// What carrying out the actions of one pass needs.
struct Context<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
    name: &'a str,
    owner: &'a Value,
    rollout: &'a Rollout,
    rollout_json: &'a Value,
    template: &'a Value,
    status: &'a Status,
    uid: &'a str,
    replica_sets: &'a [DynamicObject],
}

impl Context<'_> {
    fn canary_strategy(&self) -> Option<&weir_core::argo::types::CanaryStrategy> {
        self.rollout
            .spec
            .strategy
            .as_ref()
            .and_then(|strategy| strategy.canary.as_deref())
    }

    fn api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), self.namespace, resource)
    }

    /// Carries out one action. `Ok(Err(reason))`: the Rollout names something that is not
    /// there (a template, a Service): it is invalid, as Argo says.
    async fn act(&self, action: &Action) -> Result<Result<(), String>, PassError> {
        let replica_sets = self.api(&resource("apps", "v1", "ReplicaSet", "replicasets"));
        match action {
            Action::CreateReplicaSet {
                name,
                hash,
                revision,
            } => {
                create_unless_present(&replica_sets, self.replica_set(name, hash, *revision))
                    .await?;
            }
            Action::ScaleReplicaSet { name, to, .. } => {
                let patch = json!({
                    "metadata": {"annotations": {"rollout.argoproj.io/desired-replicas": self.rollout.spec.replicas.unwrap_or(1).to_string()}},
                    "spec": {"replicas": to},
                });
                replica_sets
                    .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map_err(api_error(format!("scaling ReplicaSet {name}")))?;
            }
            Action::ScaleDownDeadline { name, deadline } => {
                let value = deadline.map_or(Value::Null, |deadline| json!(deadline.to_string()));
                let patch =
                    json!({"metadata": {"annotations": {SCALE_DOWN_DEADLINE_ANNOTATION: value}}});
                replica_sets
                    .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map_err(api_error(format!("annotating ReplicaSet {name}")))?;
            }
            Action::CreateRun {
                name,
                kind,
                analysis,
                hash,
                revision,
            } => {
                let spec = match self.run_spec(analysis, hash).await? {
                    Ok(spec) => spec,
                    Err(reason) => return Ok(Err(reason)),
                };
                let mut labels = BTreeMap::new();
                labels.insert(POD_TEMPLATE_HASH_LABEL.to_string(), json!(hash));
                labels.insert("rollout-type".to_string(), json!(kind.label()));
                if let RunKind::Step(index) = kind {
                    labels.insert("step-index".to_string(), json!(index.to_string()));
                }
                if let Some(extra) = analysis
                    .analysis_run_metadata
                    .as_ref()
                    .and_then(|metadata| metadata.labels.as_ref())
                {
                    for (key, value) in extra {
                        labels.insert(key.clone(), json!(value));
                    }
                }
                let object = json!({
                    "apiVersion": "argoproj.io/v1alpha1",
                    "kind": "AnalysisRun",
                    "metadata": {
                        "name": name,
                        "namespace": self.namespace,
                        "labels": labels,
                        "annotations": {REVISION_ANNOTATION: revision.to_string()},
                        "ownerReferences": [self.owner],
                    },
                    "spec": spec,
                });
                create_unless_present(&self.api(&analysis_runs_resource()), object).await?;
            }
            Action::ScaleWorkload { replicas } => {
                let Some(name) = self
                    .rollout
                    .spec
                    .workload_ref
                    .as_ref()
                    .and_then(|reference| reference.name.clone())
                else {
                    return Ok(Ok(()));
                };
                let deployments = self.api(&resource("apps", "v1", "Deployment", "deployments"));
                let current = deployments
                    .get_opt(&name)
                    .await
                    .map_err(api_error(format!("reading Deployment {name}")))?;
                let size = current
                    .as_ref()
                    .and_then(|deployment| deployment.data.pointer("/spec/replicas"))
                    .and_then(Value::as_i64);
                if current.is_some() && size != Some(*replicas) {
                    deployments
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                        )
                        .await
                        .map_err(api_error(format!(
                            "scaling the workloadRef Deployment {name}"
                        )))?;
                }
            }
            Action::CreateExperiment { name, step_index } => {
                let Some(step) = self
                    .rollout
                    .spec
                    .strategy
                    .as_ref()
                    .and_then(|strategy| strategy.canary.as_deref())
                    .and_then(|canary| canary.steps.as_ref())
                    .and_then(|steps| steps.get(*step_index))
                    .and_then(|step| step.experiment.as_ref())
                else {
                    return Ok(Ok(()));
                };
                let stable_template = self
                    .replica_sets
                    .iter()
                    .find(|rs| {
                        rs.metadata
                            .labels
                            .as_ref()
                            .and_then(|labels| labels.get(POD_TEMPLATE_HASH_LABEL))
                            == Some(&self.status.stable_rs)
                    })
                    .and_then(|rs| rs.data.pointer("/spec/template").cloned())
                    .unwrap_or_else(|| self.template.clone());
                let selector = self
                    .rollout_json
                    .pointer("/spec/selector")
                    .cloned()
                    .unwrap_or(json!({}));
                let revision = self
                    .replica_sets
                    .iter()
                    .filter_map(rs_view)
                    .find(|rs| rs.hash == self.status.current_pod_hash)
                    .map_or(1, |rs| rs.revision);
                let source = StepSource {
                    rollout: self.name,
                    namespace: self.namespace,
                    rollout_uid: self.uid,
                    step_index: *step_index,
                    revision,
                    pod_hash: &self.status.current_pod_hash,
                    stable_template: &stable_template,
                    canary_template: self.template,
                    selector: &selector,
                    progress_deadline_seconds: self.rollout.spec.progress_deadline_seconds,
                };
                let mut object = experiment_for_step(step, &source);
                object["metadata"]["name"] = json!(name);
                create_unless_present(&self.api(&experiments_resource()), object).await?;
            }
            Action::TerminateExperiment { name } => {
                self.api(&experiments_resource())
                    .patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"terminate": true}})),
                    )
                    .await
                    .map_err(api_error(format!("terminating Experiment {name}")))?;
            }
            Action::DeleteReplicaSet { name } => {
                delete_if_present(&replica_sets, name, "old ReplicaSet").await?;
            }
            Action::DeleteRun { name } => {
                delete_if_present(
                    &self.api(&analysis_runs_resource()),
                    name,
                    "old AnalysisRun",
                )
                .await?;
            }
            Action::TerminateRun { name } => {
                self.api(&analysis_runs_resource())
                    .patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"terminate": true}})),
                    )
                    .await
                    .map_err(api_error(format!("terminating AnalysisRun {name}")))?;
            }
            Action::RouteTraffic { canary, stable } => {
                let Some(strategy) = self.canary_strategy() else {
                    return Ok(Ok(()));
                };
                let stable_hash = if self.status.stable_rs.is_empty() {
                    self.status.current_pod_hash.clone()
                } else {
                    self.status.stable_rs.clone()
                };
                let hashes = Some((self.status.current_pod_hash.clone(), stable_hash));
                let weights = Weights {
                    canary: *canary,
                    stable: *stable,
                };
                return crate::argo_traffic::route(
                    self.client,
                    self.namespace,
                    self.name,
                    strategy,
                    weights,
                    hashes,
                    Some(self.owner),
                )
                .await
                .map_err(api_error(format!(
                    "writing the traffic weights of Argo Rollout {}/{}",
                    self.namespace, self.name
                )));
            }
            Action::SetHeaderRoute(route) => {
                let Some(strategy) = self.canary_strategy() else {
                    return Ok(Ok(()));
                };
                return crate::argo_traffic::set_header_route(
                    self.client,
                    self.namespace,
                    self.name,
                    strategy,
                    route,
                )
                .await
                .map_err(api_error(format!(
                    "writing a header route of {}",
                    self.name
                )));
            }
            Action::SetMirrorRoute(route) => {
                let Some(strategy) = self.canary_strategy() else {
                    return Ok(Ok(()));
                };
                return crate::argo_traffic::set_mirror_route(
                    self.client,
                    self.namespace,
                    self.name,
                    strategy,
                    route,
                )
                .await
                .map_err(api_error(format!(
                    "writing a mirror route of {}",
                    self.name
                )));
            }
            Action::RemoveManagedRoutes => {
                let Some(strategy) = self.canary_strategy() else {
                    return Ok(Ok(()));
                };
                return crate::argo_traffic::remove_managed_routes(
                    self.client,
                    self.namespace,
                    self.name,
                    strategy,
                )
                .await
                .map_err(api_error(format!(
                    "removing the managed routes of {}",
                    self.name
                )));
            }
            Action::PointService { service, hash } => {
                let services = self.api(&resource("", "v1", "Service", "services"));
                let current = services
                    .get_opt(service)
                    .await
                    .map_err(api_error(format!("reading Service {service}")))?;
                let Some(current) = current else {
                    return Ok(Err(format!(
                        "Service \"{service}\" (named by spec.strategy) does not exist"
                    )));
                };
                let managed_by = current
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|annotations| annotations.get(MANAGED_BY_ANNOTATION));
                if let Some(other) = managed_by
                    && other != self.name
                {
                    return Ok(Err(format!(
                        "Service \"{service}\" is managed by another Rollout ({other})"
                    )));
                }
                let selected = current
                    .data
                    .pointer(&format!("/spec/selector/{POD_TEMPLATE_HASH_LABEL}"))
                    .and_then(Value::as_str);
                if selected != Some(hash.as_str()) || managed_by.is_none() {
                    let patch = json!({
                        "metadata": {"annotations": {MANAGED_BY_ANNOTATION: self.name}},
                        "spec": {"selector": {POD_TEMPLATE_HASH_LABEL: hash}},
                    });
                    services
                        .patch(service, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .map_err(api_error(format!("pointing Service {service} at {hash}")))?;
                }
            }
        }
        Ok(Ok(()))
    }

    /// The ReplicaSet of the current template: its pods and selector carry the hash label.
    fn replica_set(&self, name: &str, hash: &str, revision: i64) -> Value {
        let mut template = self.template.clone();
        template["metadata"]["labels"][POD_TEMPLATE_HASH_LABEL] = json!(hash);
        let mut selector = self
            .rollout_json
            .pointer("/spec/selector")
            .cloned()
            .unwrap_or(json!({}));
        selector["matchLabels"][POD_TEMPLATE_HASH_LABEL] = json!(hash);
        let mut labels = template["metadata"]["labels"].clone();
        labels[POD_TEMPLATE_HASH_LABEL] = json!(hash);
        json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": labels,
                "annotations": {
                    REVISION_ANNOTATION: revision.to_string(),
                    "rollout.argoproj.io/desired-replicas": self.rollout.spec.replicas.unwrap_or(1).to_string(),
                },
                "ownerReferences": [self.owner],
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": self.rollout.spec.min_ready_seconds.unwrap_or(0),
                "selector": selector,
                "template": template,
            },
        })
    }

    /// An AnalysisRun's spec from the templates `analysis` names: metrics joined, arguments
    /// resolved (the Rollout's over the templates'), dry-run and retention settings carried.
    async fn run_spec(
        &self,
        analysis: &RolloutAnalysis,
        hash: &str,
    ) -> Result<Result<Value, String>, PassError> {
        run_spec(
            self.client,
            self.namespace,
            analysis,
            &self.status.stable_rs,
            hash,
            self.rollout_json,
        )
        .await
    }
}

/// [`Context::run_spec`] for any owner: `stable_hash` and `latest_hash` answer
/// `podTemplateHashValue`, `object` is what `fieldRef` paths read (the Rollout, or the
/// Experiment for [`crate::argo_experiments`], whose runs are built the same way).
pub(crate) async fn run_spec(
    client: &kube::Client,
    namespace: &str,
    analysis: &RolloutAnalysis,
    stable_hash: &str,
    latest_hash: &str,
    object: &Value,
) -> Result<Result<Value, String>, PassError> {
    let mut metrics = Vec::new();
    let mut template_args: Vec<Vec<AnalysisArg>> = Vec::new();
    let mut dry_run = Vec::new();
    let mut retention = Vec::new();
    let mut seen = HashSet::new();
    for (index, reference) in analysis.templates.iter().flatten().enumerate() {
        let name = reference.template_name.clone().unwrap_or_default();
        let cluster = reference.cluster_scope == Some(true);
        if !seen.insert((name.clone(), cluster)) {
            continue;
        }
        let template = if cluster {
            Api::<DynamicObject>::all_with(
                client.clone(),
                &resource(
                    "argoproj.io",
                    "v1alpha1",
                    "ClusterAnalysisTemplate",
                    "clusteranalysistemplates",
                ),
            )
            .get_opt(&name)
            .await
        } else {
            Api::<DynamicObject>::namespaced_with(
                client.clone(),
                namespace,
                &resource(
                    "argoproj.io",
                    "v1alpha1",
                    "AnalysisTemplate",
                    "analysistemplates",
                ),
            )
            .get_opt(&name)
            .await
        }
        .map_err(api_error(format!("reading analysis template {name}")))?;
        let Some(template) = template else {
            let kind = if cluster {
                "ClusterAnalysisTemplate"
            } else {
                "AnalysisTemplate"
            };
            return Ok(Err(format!(
                "templates[{index}].templateName: Invalid value: {name:?}: {kind} not found"
            )));
        };
        let spec = template.data.get("spec").cloned().unwrap_or(json!({}));
        metrics.extend(
            spec.get("metrics")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        );
        dry_run.extend(
            spec.get("dryRun")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        );
        retention.extend(
            spec.get("measurementRetention")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        );
        let args: Vec<AnalysisArg> = spec
            .get("args")
            .cloned()
            .and_then(|args| serde_json::from_value(args).ok())
            .unwrap_or_default();
        template_args.push(args);
    }
    let flattened = match flatten_template_args(template_args.iter().map(Vec::as_slice)) {
        Ok(args) => args,
        Err(reason) => return Ok(Err(reason)),
    };
    let supplied = match rollout_args(
        analysis.args.as_deref().unwrap_or(&[]),
        stable_hash,
        latest_hash,
        object,
    ) {
        Ok(args) => args,
        Err(reason) => return Ok(Err(reason)),
    };
    let args = match merge_args(&supplied, &flattened) {
        Ok(args) => args,
        Err(reason) => return Ok(Err(reason)),
    };
    let args: Vec<Value> = args.iter().map(arg_json).collect();
    for dry in analysis.dry_run.iter().flatten() {
        dry_run.push(json!({"metricName": dry.metric_name}));
    }
    for kept in analysis.measurement_retention.iter().flatten() {
        retention.push(json!({"metricName": kept.metric_name, "limit": kept.limit}));
    }
    let mut spec = json!({"metrics": metrics, "args": args});
    if !dry_run.is_empty() {
        spec["dryRun"] = json!(dry_run);
    }
    if !retention.is_empty() {
        spec["measurementRetention"] = json!(retention);
    }
    Ok(Ok(spec))
}

/// An argument as an AnalysisRun's spec writes it: a value, or where a secret one comes from.
fn arg_json(arg: &AnalysisArg) -> Value {
    let mut value = json!({"name": arg.name});
    if let Some(text) = &arg.value {
        value["value"] = json!(text);
    } else if let Some(secret) = arg
        .value_from
        .as_ref()
        .and_then(|from| from.secret_key_ref.as_ref())
    {
        value["valueFrom"] = json!({"secretKeyRef": {"name": secret.name, "key": secret.key}});
    }
    value
}

/// Records each event on the Rollout as a Kubernetes Event, with Argo's reason.
async fn record(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    uid: &str,
    events: &[sync::Event],
) {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), namespace);
    for event in events {
        let at = Timestamp::now().to_string();
        let object = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": format!("{name}."), "namespace": namespace},
            "involvedObject": {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Rollout",
                "name": name,
                "namespace": namespace,
                "uid": uid,
            },
            "reason": event.reason,
            "message": event.message,
            "type": if event.warning { "Warning" } else { "Normal" },
            "source": {"component": COMPONENT},
            "firstTimestamp": at,
            "lastTimestamp": at,
            "count": 1,
        });
        let Ok(event) = serde_json::from_value::<k8s_openapi::api::core::v1::Event>(object) else {
            continue;
        };
        if let Err(error) = api.create(&PostParams::default(), &event).await {
            eprintln!(
                "weir operator: recording an event of Argo Rollout {namespace}/{name}: {error}"
            );
        }
    }
}
