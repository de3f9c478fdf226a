//! One reconcile of an Argo `Experiment`, as a pure function: the ReplicaSets, Services and
//! AnalysisRuns weir's operator keeps for it, and the status it writes in Argo's shape
//! (`experiments/experiment.go` of Argo Rollouts v1.9.1, for the forms its examples use).
//!
//! The shell reads the Experiment, the ReplicaSets, Services and AnalysisRuns it owns and the
//! time, calls [`reconcile`], carries out the [`ExperimentAction`]s in order and writes
//! [`ExperimentSync::status`]. As with [`super::sync`], every decision is level-based: it
//! depends on what is observed (and on the status the last pass wrote), never on what the last
//! pass did, so a pass repeated after a crash does the same again or nothing.
//!
//! The lifecycle: one ReplicaSet per template (`<experiment>-<template>`, its pods and selector
//! labelled with the template's hash), `Pending` until every ReplicaSet has its pods available
//! (`Failed` when that takes longer than `progressDeadlineSeconds` from the Experiment's
//! creation), then `Running` (`availableAt` set): a Service per template that asks for one and
//! an AnalysisRun `<experiment>-<analysis>` per analysis. It ends after `duration` from
//! `availableAt`, when every `requiredForCompletion` run has finished, or on `spec.terminate`;
//! an analysis that fails or errs ends it at once with that phase. Without a duration nor a
//! required analysis it runs until terminated. Once it has ended, unfinished runs are
//! terminated and each ReplicaSet is given a scale-down deadline (`scaleDownDelaySeconds`,
//! default 30, as Argo's `scale-down-deadline` annotation) after which it is scaled to 0 and
//! its Service deleted.
//!
//! Differences from Argo kept on purpose: the pod template hash is weir's
//! ([`super::sync::pod_template_hash`]); the end of the Pending phase is measured from the
//! Experiment's creation rather than from each template's last progress; no `conditions` are
//! written; the experiment's final phase is written when the rule that ends it holds, before
//! the ReplicaSets are scaled down (a Rollout's experiment step moves on without waiting for
//! the scale-down delay).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::analysis::Phase;
use super::sync::{POD_TEMPLATE_HASH_LABEL, REVISION_ANNOTATION, RunView, pod_template_hash};
use super::types::{
    AnalysisArg, Experiment, ExperimentAnalysis, PodMetadata, RolloutAnalysis, StepExperiment,
    TemplateRef,
};
use crate::units::GoDuration;

/// The annotation of an Experiment's ReplicaSet naming its Experiment.
pub const EXPERIMENT_NAME_ANNOTATION: &str = "experiment.argoproj.io/name";
/// The annotation of an Experiment's ReplicaSet naming its template.
pub const TEMPLATE_NAME_ANNOTATION: &str = "experiment.argoproj.io/template-name";
/// The annotation of a ReplicaSet whose scale-down waits: when it may go (RFC 3339).
pub const SCALE_DOWN_DEADLINE_ANNOTATION: &str = super::sync::SCALE_DOWN_DEADLINE_ANNOTATION;
/// Argo's default `progressDeadlineSeconds`.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i64 = 600;
/// Argo's default `scaleDownDelaySeconds` for an Experiment.
pub const DEFAULT_SCALE_DOWN_DELAY_SECONDS: i64 = 30;

/// A ReplicaSet the Experiment owns, as observed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TemplateReplicaSet {
    /// `metadata.name`.
    pub name: String,
    /// The template it runs (its `experiment.argoproj.io/template-name` annotation).
    pub template: String,
    /// `spec.replicas`.
    pub replicas: i64,
    /// `status.replicas`.
    pub status_replicas: i64,
    /// `status.readyReplicas`.
    pub ready: i64,
    /// `status.availableReplicas`.
    pub available: i64,
    /// Its scale-down deadline, if one is set.
    pub scale_down_deadline: Option<Timestamp>,
}

/// What a reconcile sees.
#[derive(Debug, Clone)]
pub struct ExperimentObserved<'a> {
    /// The Experiment.
    pub experiment: &'a Experiment,
    /// The status as stored (read with [`ExperimentStatus::read`]).
    pub status: ExperimentStatus,
    /// `metadata.creationTimestamp` (absent: the progress deadline is not enforced).
    pub created: Option<Timestamp>,
    /// The ReplicaSets it owns.
    pub replica_sets: &'a [TemplateReplicaSet],
    /// The AnalysisRuns it owns.
    pub runs: &'a [RunView],
    /// The names of the Services it owns.
    pub services: &'a [String],
    /// Now.
    pub now: Timestamp,
}

/// What the shell does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum ExperimentAction {
    /// Create ReplicaSet `name` from template `template`, its pods labelled with `hash`.
    CreateReplicaSet {
        /// `<experiment>-<template>`.
        name: String,
        /// The template's name.
        template: String,
        /// The template's hash ([`POD_TEMPLATE_HASH_LABEL`]).
        hash: String,
        /// `spec.replicas`.
        replicas: i64,
    },
    /// Set `spec.replicas`.
    ScaleReplicaSet {
        /// The ReplicaSet.
        name: String,
        /// From.
        from: i64,
        /// To.
        to: i64,
    },
    /// Set (or remove, with `None`) the scale-down deadline annotation.
    ScaleDownDeadline {
        /// The ReplicaSet.
        name: String,
        /// The deadline.
        deadline: Option<Timestamp>,
    },
    /// Create Service `name` selecting the pods of the template's ReplicaSet.
    CreateService {
        /// `service.name`, else the ReplicaSet's name.
        name: String,
        /// The template's name (its ports are the template's containers').
        template: String,
        /// The template's hash, the Service's selector.
        hash: String,
    },
    /// Delete a Service whose ReplicaSet has been scaled down.
    DeleteService {
        /// The Service.
        name: String,
    },
    /// Create an AnalysisRun from `analysis` (the shell resolves templates and arguments).
    CreateRun {
        /// `<experiment>-<analysis name>`.
        name: String,
        /// The analysis's name in the Experiment.
        analysis_name: String,
        /// The analysis as a Rollout's: its template, arguments (the `{{templates.*}}`
        /// placeholders of their values resolved), dry-run and retention settings.
        analysis: RolloutAnalysis,
    },
    /// Set `spec.terminate` on a run no longer needed.
    TerminateRun {
        /// The run.
        name: String,
    },
}

/// `status.templateStatuses[]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TemplateStatus {
    /// The template's name.
    pub name: String,
    /// Pods of its ReplicaSet.
    pub replicas: i64,
    /// Pods of its current template (all of them: an Experiment's ReplicaSet never changes).
    pub updated_replicas: i64,
    /// Ready pods.
    pub ready_replicas: i64,
    /// Available pods.
    pub available_replicas: i64,
    /// `Progressing`, `Running`, `Successful`, `Failed` or `Error`.
    pub status: String,
    /// Why, when it failed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When `status` last changed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub last_transition_time: String,
    /// The hash its pods are labelled with.
    pub pod_template_hash: String,
    /// Its Service, if it has one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_name: String,
}

/// `status.analysisRuns[]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AnalysisRunStatus {
    /// The analysis's name in the Experiment.
    pub name: String,
    /// The AnalysisRun's name.
    pub analysis_run: String,
    /// The run's phase (`Pending` until it has one).
    pub phase: String,
    /// The run's message.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// An Experiment's `status`, in Argo's shape.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ExperimentStatus {
    /// `Pending`, `Running`, `Successful`, `Failed`, `Error` or `Inconclusive` (empty: never
    /// reconciled).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Why it is in that phase.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// One per template.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub template_statuses: Vec<TemplateStatus>,
    /// One per analysis started.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub analysis_runs: Vec<AnalysisRunStatus>,
    /// When every ReplicaSet was first available (RFC 3339): the duration counts from here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_at: Option<String>,
}

impl ExperimentStatus {
    /// The status as stored (anything unreadable counts as never reconciled).
    pub fn read(status: Option<&Value>) -> ExperimentStatus {
        status
            .and_then(|status| serde_json::from_value(status.clone()).ok())
            .unwrap_or_default()
    }

    /// The status as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| json!({}))
    }

    /// The phase, if it has one.
    pub fn phase(&self) -> Option<Phase> {
        Phase::parse(&self.phase)
    }

    /// Whether the experiment has ended (its phase will not change again).
    pub fn completed(&self) -> bool {
        self.phase().is_some_and(completed)
    }
}

/// The result of one reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentSync {
    /// What to do, in order.
    pub actions: Vec<ExperimentAction>,
    /// The status to write.
    pub status: ExperimentStatus,
}

fn completed(phase: Phase) -> bool {
    !matches!(phase, Phase::Pending | Phase::Running)
}

/// Reads an Experiment from its JSON as stored by the API server: the metadata cut to what the
/// typed model keeps and the status left out (it is read with [`ExperimentStatus::read`]).
pub fn read_experiment(object: &Value) -> Result<Experiment, String> {
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
    match super::read(&document) {
        Ok(read) => match read.value.object {
            super::ArgoObject::Experiment(experiment) => Ok(*experiment),
            _ => Err("kind: not an Experiment".into()),
        },
        Err(errors) => Err(errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")),
    }
}

/// The name of the ReplicaSet of `template`.
pub fn replica_set_name(experiment: &str, template: &str) -> String {
    format!("{experiment}-{template}")
}

/// The name of the AnalysisRun of `analysis`.
pub fn run_name(experiment: &str, analysis: &str) -> String {
    format!("{experiment}-{analysis}")
}

/// The hash of a template's pod template: what its ReplicaSet, selector and pods are labelled
/// with, so that templates with the same labels (a baseline and a canary) select only their own
/// pods.
pub fn template_hash(template: &Value) -> String {
    pod_template_hash(template, None)
}

/// A duration as Argo's `DurationString` reads it: Go's syntax, or a bare number of seconds.
pub fn parse_duration(text: &str) -> Option<SignedDuration> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<i64>() {
        return (seconds >= 0).then(|| SignedDuration::from_secs(seconds));
    }
    let duration = GoDuration::parse(text).ok()?;
    SignedDuration::try_from(duration.get()).ok()
}

/// One reconcile of an Experiment.
pub fn reconcile(observed: &ExperimentObserved<'_>) -> ExperimentSync {
    let experiment = observed.experiment;
    let spec = &experiment.spec;
    let name = experiment.metadata.name.clone().unwrap_or_default();
    let now = observed.now;
    let previous = &observed.status;
    let analyses: &[ExperimentAnalysis] = spec.analyses.as_deref().unwrap_or(&[]);

    let replica_set_of = |template: &str| {
        observed
            .replica_sets
            .iter()
            .find(|rs| rs.template == template)
            .or_else(|| {
                let wanted = replica_set_name(&name, template);
                observed.replica_sets.iter().find(|rs| rs.name == wanted)
            })
    };
    let run_of = |analysis: &ExperimentAnalysis| {
        let wanted = run_name(&name, &analysis.name);
        observed.runs.iter().find(|run| run.name == wanted)
    };

    // The phase: kept once final; else from the ReplicaSets' availability and the runs.
    let mut status = ExperimentStatus {
        available_at: previous.available_at.clone(),
        ..ExperimentStatus::default()
    };
    let all_available = spec.templates.iter().all(|template| {
        let want = template.replicas.unwrap_or(1).max(0);
        replica_set_of(&template.name).is_some_and(|rs| rs.replicas == want && rs.available >= want)
    });
    let mut timed_out: Option<String> = None;
    if let Some(phase) = previous.phase().filter(|phase| completed(*phase)) {
        status.phase = phase.as_str().into();
        status.message = previous.message.clone();
    } else {
        if status.available_at.is_none() && all_available {
            status.available_at = Some(now.to_string());
        }
        let available_at = status
            .available_at
            .as_deref()
            .and_then(|at| at.parse::<Timestamp>().ok());
        let (phase, message) = match available_at {
            None => pending(observed, &name, &mut timed_out),
            Some(since) => running(observed, &name, since, analyses),
        };
        status.phase = phase.as_str().into();
        status.message = message;
    }
    let ended = status.completed();

    // The ReplicaSets and Services.
    let mut actions = Vec::new();
    for template in &spec.templates {
        let want = template.replicas.unwrap_or(1).max(0);
        let hash = template_hash(&template.template);
        let rs_name = replica_set_name(&name, &template.name);
        let service_name = template.service.as_ref().map(|service| {
            service
                .name
                .clone()
                .filter(|name| !name.is_empty())
                .unwrap_or_else(|| rs_name.clone())
        });
        let rs = replica_set_of(&template.name);
        let mut scaled_down = false;
        match (rs, ended) {
            (None, false) => actions.push(ExperimentAction::CreateReplicaSet {
                name: rs_name.clone(),
                template: template.name.clone(),
                hash: hash.clone(),
                replicas: want,
            }),
            (None, true) => scaled_down = true,
            (Some(rs), false) => {
                if rs.replicas != want {
                    actions.push(ExperimentAction::ScaleReplicaSet {
                        name: rs.name.clone(),
                        from: rs.replicas,
                        to: want,
                    });
                }
                if rs.scale_down_deadline.is_some() {
                    actions.push(ExperimentAction::ScaleDownDeadline {
                        name: rs.name.clone(),
                        deadline: None,
                    });
                }
            }
            (Some(rs), true) => {
                if rs.replicas == 0 {
                    scaled_down = true;
                } else {
                    let delay = spec
                        .scale_down_delay_seconds
                        .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS);
                    let due = match rs.scale_down_deadline {
                        _ if delay <= 0 => true,
                        Some(deadline) => now >= deadline,
                        None => {
                            let deadline = now
                                .checked_add(SignedDuration::from_secs(delay))
                                .unwrap_or(now);
                            actions.push(ExperimentAction::ScaleDownDeadline {
                                name: rs.name.clone(),
                                deadline: Some(deadline),
                            });
                            false
                        }
                    };
                    if due {
                        actions.push(ExperimentAction::ScaleReplicaSet {
                            name: rs.name.clone(),
                            from: rs.replicas,
                            to: 0,
                        });
                        scaled_down = true;
                    }
                }
            }
        }
        if let Some(service) = &service_name {
            let exists = observed.services.iter().any(|name| name == service);
            if ended && scaled_down && exists {
                actions.push(ExperimentAction::DeleteService {
                    name: service.clone(),
                });
            } else if !ended && status.available_at.is_some() && !exists {
                actions.push(ExperimentAction::CreateService {
                    name: service.clone(),
                    template: template.name.clone(),
                    hash: hash.clone(),
                });
            }
        }

        let template_state = if timed_out.as_deref() == Some(template.name.as_str()) {
            "Failed"
        } else if ended {
            if scaled_down {
                match status.phase() {
                    Some(Phase::Failed) => "Failed",
                    Some(Phase::Error) => "Error",
                    _ => "Successful",
                }
            } else {
                "Running"
            }
        } else if rs.is_some_and(|rs| rs.replicas == want && rs.available >= want) {
            "Running"
        } else {
            "Progressing"
        };
        let before = previous
            .template_statuses
            .iter()
            .find(|before| before.name == template.name);
        let last_transition_time = match before {
            Some(before) if before.status == template_state => before.last_transition_time.clone(),
            _ => now.to_string(),
        };
        let message = match before {
            _ if timed_out.as_deref() == Some(template.name.as_str()) => {
                format!("ReplicaSet {rs_name:?} has timed out progressing.")
            }
            Some(before) if before.status == template_state => before.message.clone(),
            _ => String::new(),
        };
        status.template_statuses.push(TemplateStatus {
            name: template.name.clone(),
            replicas: rs.map_or(0, |rs| rs.status_replicas),
            updated_replicas: rs.map_or(0, |rs| rs.status_replicas),
            ready_replicas: rs.map_or(0, |rs| rs.ready),
            available_replicas: rs.map_or(0, |rs| rs.available),
            status: template_state.into(),
            message,
            last_transition_time,
            pod_template_hash: hash,
            service_name: service_name.unwrap_or_default(),
        });
    }

    // The AnalysisRuns: started once Running, terminated once ended.
    for analysis in analyses {
        let run_name = run_name(&name, &analysis.name);
        let run = run_of(analysis);
        match run {
            None if !ended && status.available_at.is_some() => {
                actions.push(ExperimentAction::CreateRun {
                    name: run_name.clone(),
                    analysis_name: analysis.name.clone(),
                    analysis: rollout_analysis(observed, &name, analysis),
                });
            }
            Some(run) if ended && !run_completed(run) && !run.terminating => {
                actions.push(ExperimentAction::TerminateRun {
                    name: run.name.clone(),
                });
            }
            _ => {}
        }
        if run.is_some() || (!ended && status.available_at.is_some()) {
            status.analysis_runs.push(AnalysisRunStatus {
                name: analysis.name.clone(),
                analysis_run: run_name,
                phase: run
                    .and_then(|run| run.phase)
                    .unwrap_or(Phase::Pending)
                    .as_str()
                    .into(),
                message: run.map(|run| run.message.clone()).unwrap_or_default(),
            });
        }
    }

    ExperimentSync { actions, status }
}

fn run_completed(run: &RunView) -> bool {
    run.phase.is_some_and(completed)
}

/// The phase before every ReplicaSet is available: Pending, or Failed past the deadline (the
/// first template not available named in `timed_out`), or Successful when terminated.
fn pending(
    observed: &ExperimentObserved<'_>,
    name: &str,
    timed_out: &mut Option<String>,
) -> (Phase, String) {
    let spec = &observed.experiment.spec;
    if spec.terminate == Some(true) {
        return (Phase::Successful, format!("Experiment {name:?} terminated"));
    }
    let deadline = spec
        .progress_deadline_seconds
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    let passed = observed.created.is_some_and(|created| {
        created
            .checked_add(SignedDuration::from_secs(deadline))
            .is_ok_and(|end| observed.now >= end)
    });
    if passed {
        let late = spec.templates.iter().find(|template| {
            let want = template.replicas.unwrap_or(1).max(0);
            !observed.replica_sets.iter().any(|rs| {
                rs.template == template.name && rs.replicas == want && rs.available >= want
            })
        });
        if let Some(template) = late {
            *timed_out = Some(template.name.clone());
            let rs = replica_set_name(name, &template.name);
            return (
                Phase::Failed,
                format!(
                    "Template {:?}: ReplicaSet {rs:?} has timed out progressing.",
                    template.name
                ),
            );
        }
    }
    (Phase::Pending, String::new())
}

/// The phase once Running: the end rules of Argo's experiments, in order (a failed or erred
/// analysis, termination, the duration, the required analyses).
fn running(
    observed: &ExperimentObserved<'_>,
    name: &str,
    since: Timestamp,
    analyses: &[ExperimentAnalysis],
) -> (Phase, String) {
    let spec = &observed.experiment.spec;
    let run_of = |analysis: &ExperimentAnalysis| {
        let wanted = run_name(name, &analysis.name);
        observed.runs.iter().find(|run| run.name == wanted)
    };
    for analysis in analyses {
        if let Some(run) = run_of(analysis)
            && let Some(phase @ (Phase::Failed | Phase::Error)) = run.phase
        {
            let message = if run.message.is_empty() {
                format!("AnalysisRun {:?} is {}", run.name, phase.as_str())
            } else {
                run.message.clone()
            };
            return (phase, message);
        }
    }
    // The worst of the finished runs decides a successful end: Inconclusive over Successful.
    let end = |reason: String| {
        let inconclusive = analyses
            .iter()
            .filter_map(run_of)
            .find(|run| run.phase == Some(Phase::Inconclusive));
        match inconclusive {
            Some(run) => (
                Phase::Inconclusive,
                if run.message.is_empty() {
                    format!("AnalysisRun {:?} is Inconclusive", run.name)
                } else {
                    run.message.clone()
                },
            ),
            None => (Phase::Successful, reason),
        }
    };
    if spec.terminate == Some(true) {
        return end(format!("Experiment {name:?} terminated"));
    }
    if let Some(duration) = spec.duration.as_deref().and_then(parse_duration) {
        let ends = since.checked_add(duration).unwrap_or(since);
        if observed.now >= ends {
            return end(format!("Experiment {name:?} has completed its duration"));
        }
    }
    let required: Vec<&ExperimentAnalysis> = analyses
        .iter()
        .filter(|analysis| analysis.required_for_completion == Some(true))
        .collect();
    if !required.is_empty()
        && required
            .iter()
            .all(|analysis| run_of(analysis).is_some_and(run_completed))
    {
        return end(format!(
            "Experiment {name:?}'s required analyses have completed"
        ));
    }
    (Phase::Running, String::new())
}

/// An Experiment's analysis as a Rollout's, for the shell's run builder: the values of its
/// arguments with `{{templates.<name>.podTemplateHash}}`, `{{templates.<name>.replicaset.name}}`
/// and `{{experiment.availableAt}}` resolved (Argo's placeholders for experiment runs).
fn rollout_analysis(
    observed: &ExperimentObserved<'_>,
    name: &str,
    analysis: &ExperimentAnalysis,
) -> RolloutAnalysis {
    let spec = &observed.experiment.spec;
    let mut placeholders = BTreeMap::new();
    for template in &spec.templates {
        placeholders.insert(
            format!("templates.{}.podTemplateHash", template.name),
            template_hash(&template.template),
        );
        placeholders.insert(
            format!("templates.{}.replicaset.name", template.name),
            replica_set_name(name, &template.name),
        );
    }
    if let Some(at) = &observed.status.available_at {
        placeholders.insert("experiment.availableAt".into(), at.clone());
    }
    let args = analysis.args.as_ref().map(|args| {
        args.iter()
            .map(|arg| AnalysisArg {
                value: arg
                    .value
                    .as_deref()
                    .map(|value| substitute(value, &placeholders)),
                ..arg.clone()
            })
            .collect()
    });
    RolloutAnalysis {
        templates: Some(vec![TemplateRef {
            template_name: Some(analysis.template_name.clone()),
            cluster_scope: analysis.cluster_scope,
        }]),
        args,
        dry_run: spec.dry_run.clone(),
        measurement_retention: spec.measurement_retention.clone(),
        analysis_run_metadata: spec.analysis_run_metadata.clone(),
        starting_step: None,
    }
}

/// Replaces every `{{ key }}` of `placeholders` in `text`; others are left for the run to
/// refuse.
fn substitute(text: &str, placeholders: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let Some(length) = rest[start..].find("}}") else {
            break;
        };
        let key = rest[start + 2..start + length].trim();
        out.push_str(&rest[..start]);
        match placeholders.get(key) {
            Some(value) => out.push_str(value),
            None => out.push_str(&rest[start..start + length + 2]),
        }
        rest = &rest[start + length + 2..];
    }
    out.push_str(rest);
    out
}

/// Where a Rollout's experiment step comes from: the Rollout and its two pod templates.
#[derive(Debug, Clone, Copy)]
pub struct StepSource<'a> {
    /// The Rollout's name.
    pub rollout: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its uid: the Experiment's controller owner reference (none when empty).
    pub rollout_uid: &'a str,
    /// The index of the experiment step.
    pub step_index: usize,
    /// The Rollout's revision.
    pub revision: i64,
    /// The pod template hash of the new (canary) ReplicaSet.
    pub pod_hash: &'a str,
    /// The stable ReplicaSet's pod template (`specRef: stable`).
    pub stable_template: &'a Value,
    /// The canary ReplicaSet's pod template (`specRef: canary`).
    pub canary_template: &'a Value,
    /// The Rollout's `spec.selector`, each template's unless the step gives one.
    pub selector: &'a Value,
    /// The Rollout's `spec.progressDeadlineSeconds`.
    pub progress_deadline_seconds: Option<i64>,
}

/// The name of the Experiment a Rollout creates for its step: `<rollout>-<hash>-<rev>-<step>`.
pub fn step_experiment_name(source: &StepSource<'_>) -> String {
    format!(
        "{}-{}-{}-{}",
        source.rollout, source.pod_hash, source.revision, source.step_index
    )
}

/// The Experiment a Rollout creates for its `experiment` step, as Argo's
/// `GetExperimentFromTemplate` builds it: each template runs the stable or the canary
/// ReplicaSet's pod template (the step's pod metadata merged in) with the step's replicas,
/// selector and Service (a `weight` asks for a Service too); the analyses, duration, dry-run,
/// retention and run metadata are the step's; it is labelled with the canary's hash, annotated
/// with the revision and owned by the Rollout.
pub fn experiment_for_step(step: &StepExperiment, source: &StepSource<'_>) -> Value {
    let templates: Vec<Value> = step
        .templates
        .iter()
        .map(|template| {
            let mut pod = if template.spec_ref == "stable" {
                source.stable_template.clone()
            } else {
                source.canary_template.clone()
            };
            if let Some(metadata) = &template.metadata {
                merge_pod_metadata(&mut pod, metadata);
            }
            let mut out = json!({
                "name": template.name,
                "selector": template.selector.clone().unwrap_or_else(|| source.selector.clone()),
                "template": pod,
            });
            if let Some(replicas) = template.replicas {
                out["replicas"] = json!(replicas);
            }
            if let Some(service) = &template.service {
                out["service"] = match &service.name {
                    Some(name) => json!({"name": name}),
                    None => json!({}),
                };
            } else if template.weight.is_some() {
                out["service"] = json!({});
            }
            out
        })
        .collect();
    let mut spec = json!({"templates": templates});
    if let Some(analyses) = &step.analyses {
        spec["analyses"] = Value::Array(analyses.iter().map(analysis_json).collect());
    }
    if let Some(duration) = &step.duration {
        spec["duration"] = json!(duration);
    }
    if let Some(seconds) = source.progress_deadline_seconds {
        spec["progressDeadlineSeconds"] = json!(seconds);
    }
    if let Some(seconds) = step.scale_down_delay_seconds {
        spec["scaleDownDelaySeconds"] = json!(seconds);
    }
    if let Some(dry_run) = &step.dry_run {
        spec["dryRun"] = Value::Array(
            dry_run
                .iter()
                .map(|dry| json!({"metricName": dry.metric_name}))
                .collect(),
        );
    }
    if let Some(retention) = &step.measurement_retention {
        spec["measurementRetention"] = Value::Array(
            retention
                .iter()
                .map(|kept| json!({"metricName": kept.metric_name, "limit": kept.limit}))
                .collect(),
        );
    }
    if let Some(metadata) = &step.analysis_run_metadata {
        spec["analysisRunMetadata"] = pod_metadata_json(metadata);
    }
    let mut metadata = json!({
        "name": step_experiment_name(source),
        "namespace": source.namespace,
        "labels": {POD_TEMPLATE_HASH_LABEL: source.pod_hash},
        "annotations": {REVISION_ANNOTATION: source.revision.to_string()},
    });
    if !source.rollout_uid.is_empty() {
        metadata["ownerReferences"] = json!([{
            "apiVersion": super::API_VERSION,
            "kind": "Rollout",
            "name": source.rollout,
            "uid": source.rollout_uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }]);
    }
    json!({
        "apiVersion": super::API_VERSION,
        "kind": "Experiment",
        "metadata": metadata,
        "spec": spec,
    })
}

fn merge_pod_metadata(pod: &mut Value, metadata: &PodMetadata) {
    if !pod.is_object() {
        *pod = json!({});
    }
    for (field, entries) in [
        ("labels", &metadata.labels),
        ("annotations", &metadata.annotations),
    ] {
        let Some(entries) = entries else { continue };
        if !pod["metadata"].is_object() {
            pod["metadata"] = json!({});
        }
        if !pod["metadata"][field].is_object() {
            pod["metadata"][field] = json!({});
        }
        for (key, value) in entries {
            pod["metadata"][field][key] = json!(value);
        }
    }
}

fn pod_metadata_json(metadata: &PodMetadata) -> Value {
    let mut out = Map::new();
    if let Some(labels) = &metadata.labels {
        out.insert("labels".into(), json!(labels));
    }
    if let Some(annotations) = &metadata.annotations {
        out.insert("annotations".into(), json!(annotations));
    }
    Value::Object(out)
}

fn analysis_json(analysis: &ExperimentAnalysis) -> Value {
    let mut out = json!({"name": analysis.name, "templateName": analysis.template_name});
    if let Some(cluster) = analysis.cluster_scope {
        out["clusterScope"] = json!(cluster);
    }
    if let Some(required) = analysis.required_for_completion {
        out["requiredForCompletion"] = json!(required);
    }
    if let Some(args) = &analysis.args {
        out["args"] = Value::Array(args.iter().map(arg_json).collect());
    }
    out
}

fn arg_json(arg: &AnalysisArg) -> Value {
    let mut out = json!({"name": arg.name});
    if let Some(value) = &arg.value {
        out["value"] = json!(value);
    }
    if let Some(from) = &arg.value_from {
        let mut value_from = Map::new();
        if let Some(secret) = &from.secret_key_ref {
            value_from.insert(
                "secretKeyRef".into(),
                json!({"name": secret.name, "key": secret.key}),
            );
        }
        if let Some(which) = &from.pod_template_hash_value {
            value_from.insert("podTemplateHashValue".into(), json!(which));
        }
        if let Some(field) = &from.field_ref {
            value_from.insert("fieldRef".into(), json!({"fieldPath": field.field_path}));
        }
        out["valueFrom"] = Value::Object(value_from);
    }
    out
}

#[cfg(test)]
mod tests;
