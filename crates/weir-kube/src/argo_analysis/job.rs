//! Argo's `job` metric provider (`metricproviders/job`): a `batch/v1` Job from the metric's
//! `job.metadata` and `job.spec`; the measurement is in flight until the Job has the condition
//! `Complete` (Successful) or `Failed` (Failed).
//!
//! The Job is named `<run uid>.<metric>.<n>`, n the measurement's number (measurements taken
//! before it, errors included, plus one: a name is never reused within a run, and the Job in
//! flight is found again by it after a restart). It carries the label
//! `analysisrun.argoproj.io/uid`, the annotations `analysisrun.argoproj.io/name` and
//! `analysisrun.argoproj.io/metric-name`, and a controller ownerReference to the AnalysisRun
//! (deleting the run deletes its Jobs). A Job that already exists with that name (created just
//! before an operator restart) is taken as the one in flight. When the run terminates, the Job in
//! flight is deleted.

use jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams, PropagationPolicy,
};
use serde_json::{Value, json};
use weir_core::argo::analysis::{Outcome, Phase};

use super::{Done, RunContext};

/// The label naming the run's uid.
pub const UID_LABEL: &str = "analysisrun.argoproj.io/uid";
/// The annotation naming the run.
pub const NAME_ANNOTATION: &str = "analysisrun.argoproj.io/name";
/// The annotation naming the metric.
pub const METRIC_ANNOTATION: &str = "analysisrun.argoproj.io/metric-name";

fn jobs(context: &RunContext) -> Api<DynamicObject> {
    Api::namespaced_with(
        context.client.clone(),
        &context.namespace,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs"),
    )
}

/// The Job of a metric's measurement that follows `taken` measurements.
pub fn job_name(uid: &str, metric: &str, taken: i64) -> String {
    format!("{uid}.{metric}.{}", taken + 1)
}

/// The Job for the measurement after `taken` measurements of `metric`.
fn job_object(context: &RunContext, metric: &str, job: &Value, taken: i64) -> Value {
    let metadata = job.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut labels = metadata
        .get("labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(UID_LABEL.into(), json!(context.uid));
    let mut annotations = metadata
        .get("annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    annotations.insert(NAME_ANNOTATION.into(), json!(context.name));
    annotations.insert(METRIC_ANNOTATION.into(), json!(metric));
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(&context.uid, metric, taken),
            "namespace": context.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "AnalysisRun",
                "name": context.name,
                "uid": context.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": job.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Creates the measurement's Job: the measurement is then in flight ([`Done::Started`]).
pub(super) async fn start(context: &RunContext, metric: &str, job: &Value, taken: i64) -> Done {
    let started_at = Timestamp::now();
    let object = job_object(context, metric, job, taken);
    let error = match serde_json::from_value::<DynamicObject>(object) {
        Ok(object) => match jobs(context).create(&PostParams::default(), &object).await {
            Ok(_) => None,
            // Created before a restart: it is the one in flight.
            Err(kube::Error::Api(response)) if response.code == 409 => None,
            Err(error) => Some(format!("job: creating Job: {error}")),
        },
        Err(error) => Some(format!("job: invalid Job: {error}")),
    };
    match error {
        None => Done::Started {
            metric: metric.to_string(),
            at: started_at,
            job: job_name(&context.uid, metric, taken),
        },
        Some(message) => Done::Measured {
            metric: metric.to_string(),
            outcome: Outcome::Error(message),
            started_at,
        },
    }
}

/// Looks at the Job in flight: Complete is Successful, Failed is Failed, otherwise it is still
/// running. A Job gone is an Error.
pub(super) async fn poll(
    context: &RunContext,
    metric: &str,
    _metric_json: &Value,
    taken: i64,
) -> Done {
    let name = job_name(&context.uid, metric, taken);
    let started_at = Timestamp::now();
    let measured = |outcome| Done::Measured {
        metric: metric.to_string(),
        outcome,
        started_at,
    };
    let job = match jobs(context).get_opt(&name).await {
        Ok(Some(job)) => job,
        Ok(None) => return measured(Outcome::Error(format!("job: Job {name} was not found"))),
        Err(error) => return measured(Outcome::Error(format!("job: reading Job {name}: {error}"))),
    };
    let conditions = job
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for condition in conditions {
        if condition.get("status").and_then(Value::as_str) != Some("True") {
            continue;
        }
        let phase = match condition.get("type").and_then(Value::as_str) {
            Some("Complete") => Phase::Successful,
            Some("Failed") => Phase::Failed,
            _ => continue,
        };
        return measured(Outcome::Decided {
            phase,
            message: None,
        });
    }
    Done::StillRunning {
        metric: metric.to_string(),
    }
}

/// Deletes a Job whose measurement the run ended (its Pods with it).
pub(super) async fn delete(context: &RunContext, name: &str) {
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match jobs(context).delete(name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(response)) if response.code == 404 => {}
        Err(error) => tracing::warn!(
            "weir operator: deleting Job {}/{name} of a terminated AnalysisRun: {error}",
            context.namespace
        ),
    }
}
