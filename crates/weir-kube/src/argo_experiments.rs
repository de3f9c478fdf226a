//! Argo Rollouts' `Experiment`s run by weir's operator: the shell around
//! [`weir_core::argo::experiment::reconcile`].
//!
//! Each pass reads an Experiment, the ReplicaSets, Services and AnalysisRuns it owns (by
//! controller owner reference) and the time, asks the core what to do and does it in order:
//! ReplicaSets created from the templates (their pods and selector labelled with the template's
//! hash), scaled, given a scale-down deadline; Services created for the templates that ask for
//! one and deleted once their ReplicaSet is scaled down; AnalysisRuns built from their templates
//! as a Rollout's are ([`crate::argo_rollouts::run_spec`]) or terminated. The status is then
//! written as a merge patch of what changed. The runs themselves are measured by
//! [`crate::argo_analysis`].
//!
//! Like the Rollouts' loop, an Experiment is looked at again when it changes (a watch) and at
//! least every [`crate::argo_shell::LOOK_AGAIN`], since its ReplicaSets' pods, its runs and its duration move on
//! without the Experiment changing. Every pass starts from what the cluster says, so a restarted
//! operator carries on where the last one left off.

use jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use weir_core::argo::analysis::Phase;
use weir_core::argo::experiment::{
    self, EXPERIMENT_NAME_ANNOTATION, ExperimentAction, ExperimentObserved, ExperimentStatus,
    SCALE_DOWN_DEADLINE_ANNOTATION, TEMPLATE_NAME_ANNOTATION, TemplateReplicaSet,
};
use weir_core::argo::sync::{POD_TEMPLATE_HASH_LABEL, RunView};
use weir_core::argo::types::Experiment;

use crate::argo_analysis::{analysis_runs_resource, merge_diff};
use crate::argo_shell::{
    PassError, api_error, create_unless_present, delete_if_present, owned, reconcile_each,
    replica_counts, resource, run_view,
};

/// `experiments.argoproj.io`, version `v1alpha1`.
pub fn experiments_resource() -> ApiResource {
    resource("argoproj.io", "v1alpha1", "Experiment", "experiments")
}

/// Runs the Experiments of `namespaces` (empty: every namespace); never returns by itself.
pub async fn run(client: kube::Client, namespaces: Vec<String>) {
    reconcile_each(
        client,
        namespaces,
        experiments_resource(),
        "Experiment",
        |client, experiment| async move { reconcile(&client, &experiment).await },
    )
    .await;
}

async fn reconcile(client: &kube::Client, object: &DynamicObject) -> Result<(), PassError> {
    let namespace = object.metadata.namespace.clone().unwrap_or_default();
    let name = object.metadata.name.clone().unwrap_or_default();
    let uid = object.metadata.uid.clone().unwrap_or_default();
    let json = serde_json::to_value(object).unwrap_or(Value::Null);
    let stored_status = json.get("status").cloned().unwrap_or(json!({}));
    let status = ExperimentStatus::read(json.get("status"));
    let experiments: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &experiments_resource());

    let new_status = match experiment::read_experiment(&json) {
        Err(reason) => errored(&status, reason),
        Ok(typed) => {
            let context = Context {
                client,
                namespace: &namespace,
                name: &name,
                owner: json!({
                    "apiVersion": "argoproj.io/v1alpha1",
                    "kind": "Experiment",
                    "name": name,
                    "uid": uid,
                    "controller": true,
                    "blockOwnerDeletion": true,
                }),
                experiment: &typed,
                json: &json,
            };
            let replica_sets: Vec<TemplateReplicaSet> = owned(
                client,
                &namespace,
                &uid,
                &resource("apps", "v1", "ReplicaSet", "replicasets"),
            )
            .await?
            .iter()
            .map(replica_set_view)
            .collect();
            let runs: Vec<RunView> = owned(client, &namespace, &uid, &analysis_runs_resource())
                .await?
                .iter()
                .map(run_view)
                .collect();
            let services: Vec<String> = owned(
                client,
                &namespace,
                &uid,
                &resource("", "v1", "Service", "services"),
            )
            .await?
            .into_iter()
            .filter_map(|service| service.metadata.name)
            .collect();
            let created = object
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(|time| time.0.to_string().parse::<Timestamp>().ok());
            let observed = ExperimentObserved {
                experiment: &typed,
                status: status.clone(),
                created,
                replica_sets: &replica_sets,
                runs: &runs,
                services: &services,
                now: Timestamp::now(),
            };
            let result = experiment::reconcile(&observed);
            let mut refused = None;
            for action in &result.actions {
                if let Err(reason) = context.act(action).await? {
                    refused = Some(reason);
                    break;
                }
            }
            match refused {
                Some(reason) => errored(&result.status, reason),
                None => result.status,
            }
        }
    };
    let patch = merge_diff(&stored_status, &new_status.to_json());
    if patch.as_object().is_some_and(|patch| !patch.is_empty()) {
        experiments
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": patch})),
            )
            .await
            .map_err(api_error(format!(
                "writing the status of Argo Experiment {namespace}/{name}"
            )))?;
    }
    Ok(())
}

/// The status of an Experiment that cannot run (unreadable, or an analysis whose template is
/// missing): `Error` with the reason, as Argo's, unless it had already ended.
fn errored(status: &ExperimentStatus, reason: String) -> ExperimentStatus {
    if status.completed() {
        return status.clone();
    }
    ExperimentStatus {
        phase: Phase::Error.as_str().into(),
        message: reason,
        ..status.clone()
    }
}

fn replica_set_view(object: &DynamicObject) -> TemplateReplicaSet {
    let counts = replica_counts(object);
    TemplateReplicaSet {
        name: object.metadata.name.clone().unwrap_or_default(),
        template: object
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(TEMPLATE_NAME_ANNOTATION))
            .cloned()
            .unwrap_or_default(),
        replicas: counts.replicas,
        status_replicas: counts.status_replicas,
        ready: counts.ready,
        available: counts.available,
        scale_down_deadline: counts.scale_down_deadline,
    }
}

/// What carrying out the actions of one pass needs.
struct Context<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
    name: &'a str,
    owner: Value,
    experiment: &'a Experiment,
    json: &'a Value,
}

impl Context<'_> {
    fn api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), self.namespace, resource)
    }

    async fn patch(
        &self,
        resource: &ApiResource,
        name: &str,
        patch: Value,
        doing: String,
    ) -> Result<(), PassError> {
        self.api(resource)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(api_error(doing))
    }

    /// Carries out one action. `Ok(Err(reason))`: the Experiment names something that is not
    /// there (an analysis template): it cannot run.
    async fn act(&self, action: &ExperimentAction) -> Result<Result<(), String>, PassError> {
        let replica_sets = resource("apps", "v1", "ReplicaSet", "replicasets");
        let services = resource("", "v1", "Service", "services");
        match action {
            ExperimentAction::CreateReplicaSet {
                name,
                template,
                hash,
                replicas,
            } => {
                let object = self.replica_set(name, template, hash, *replicas);
                create_unless_present(&self.api(&replica_sets), object).await?;
            }
            ExperimentAction::ScaleReplicaSet { name, to, .. } => {
                self.patch(
                    &replica_sets,
                    name,
                    json!({"spec": {"replicas": to}}),
                    format!("scaling ReplicaSet {name}"),
                )
                .await?;
            }
            ExperimentAction::ScaleDownDeadline { name, deadline } => {
                let value = deadline.map_or(Value::Null, |deadline| json!(deadline.to_string()));
                self.patch(
                    &replica_sets,
                    name,
                    json!({"metadata": {"annotations": {SCALE_DOWN_DEADLINE_ANNOTATION: value}}}),
                    format!("annotating ReplicaSet {name}"),
                )
                .await?;
            }
            ExperimentAction::CreateService {
                name,
                template,
                hash,
            } => {
                let object = self.service(name, template, hash);
                create_unless_present(&self.api(&services), object).await?;
            }
            ExperimentAction::DeleteService { name } => {
                delete_if_present(&self.api(&services), name, "Service").await?;
            }
            ExperimentAction::CreateRun { name, analysis, .. } => {
                let spec = match crate::argo_rollouts::run_spec(
                    self.client,
                    self.namespace,
                    analysis,
                    "",
                    "",
                    self.json,
                )
                .await?
                {
                    Ok(spec) => spec,
                    Err(reason) => return Ok(Err(reason)),
                };
                let metadata = analysis.analysis_run_metadata.as_ref();
                let object = json!({
                    "apiVersion": "argoproj.io/v1alpha1",
                    "kind": "AnalysisRun",
                    "metadata": {
                        "name": name,
                        "namespace": self.namespace,
                        "labels": metadata.and_then(|metadata| metadata.labels.clone()).unwrap_or_default(),
                        "annotations": metadata.and_then(|metadata| metadata.annotations.clone()).unwrap_or_default(),
                        "ownerReferences": [self.owner],
                    },
                    "spec": spec,
                });
                create_unless_present(&self.api(&analysis_runs_resource()), object).await?;
            }
            ExperimentAction::TerminateRun { name } => {
                self.patch(
                    &analysis_runs_resource(),
                    name,
                    json!({"spec": {"terminate": true}}),
                    format!("terminating AnalysisRun {name}"),
                )
                .await?;
            }
        }
        Ok(Ok(()))
    }

    fn template(&self, name: &str) -> Option<&weir_core::argo::types::ExperimentTemplate> {
        self.experiment
            .spec
            .templates
            .iter()
            .find(|template| template.name == name)
    }

    /// A template's ReplicaSet: its pods and selector carry the template's hash, so that two
    /// templates with the same labels (a baseline and a canary) select only their own pods.
    fn replica_set(&self, name: &str, template: &str, hash: &str, replicas: i64) -> Value {
        let spec = self.template(template);
        let mut pod = spec.map_or(json!({}), |spec| spec.template.clone());
        if !pod.is_object() {
            pod = json!({});
        }
        pod["metadata"]["labels"][POD_TEMPLATE_HASH_LABEL] = json!(hash);
        let mut selector = spec.map_or(json!({}), |spec| spec.selector.clone());
        if !selector.is_object() {
            selector = json!({});
        }
        selector["matchLabels"][POD_TEMPLATE_HASH_LABEL] = json!(hash);
        json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": pod["metadata"]["labels"].clone(),
                "annotations": {
                    EXPERIMENT_NAME_ANNOTATION: self.name,
                    TEMPLATE_NAME_ANNOTATION: template,
                },
                "ownerReferences": [self.owner],
            },
            "spec": {
                "replicas": replicas,
                "minReadySeconds": spec.and_then(|spec| spec.min_ready_seconds).unwrap_or(0),
                "selector": selector,
                "template": pod,
            },
        })
    }

    /// A template's Service: it selects the template's pods by their hash and exposes every
    /// port their containers declare.
    fn service(&self, name: &str, template: &str, hash: &str) -> Value {
        let spec = self.template(template);
        let mut selector = spec
            .and_then(|spec| spec.selector.get("matchLabels").cloned())
            .filter(Value::is_object)
            .unwrap_or(json!({}));
        selector[POD_TEMPLATE_HASH_LABEL] = json!(hash);
        let mut ports = Vec::new();
        let containers = spec
            .and_then(|spec| spec.template.pointer("/spec/containers"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for container in &containers {
            for port in container["ports"].as_array().into_iter().flatten() {
                let Some(number) = port["containerPort"].as_i64() else {
                    continue;
                };
                let mut entry = json!({
                    "port": number,
                    "targetPort": number,
                    "protocol": port["protocol"].as_str().unwrap_or("TCP"),
                });
                if let Some(port_name) = port["name"].as_str() {
                    entry["name"] = json!(port_name);
                }
                ports.push(entry);
            }
        }
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "annotations": {
                    EXPERIMENT_NAME_ANNOTATION: self.name,
                    TEMPLATE_NAME_ANNOTATION: template,
                },
                "ownerReferences": [self.owner],
            },
            "spec": {"selector": selector, "ports": ports},
        })
    }
}
