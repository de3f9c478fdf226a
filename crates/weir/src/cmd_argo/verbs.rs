//! The verbs of `kubectl argo rollouts` that change a Rollout, as the plugin (v1.9.1) makes
//! them: each reads the Rollout, sends the plugin's patch, and prints the plugin's line. The
//! Argo controller (Argo's own, or weir's operator) does the work from what was patched.
//!
//! Status patches go to the `status` subresource, and to the main resource when the server
//! answers 404 there (a CRD without the subresource, as the plugin allows). The patches are
//! built by pure functions ([`promote_patches`], [`undo_target`], ...) so what is sent is
//! what the plugin sends, field for field.

use std::process::ExitCode;

use anyhow::{Result, bail};
use serde_json::{Value, json};
use weir_core::GoDuration;

use super::cluster::{Cluster, Kind};
use crate::stdout::println;

/// The pod-template-hash label the controller adds to a ReplicaSet's template: stripped before
/// a template goes back into a Rollout, or the Rollout would select only that ReplicaSet's pods.
const POD_TEMPLATE_HASH_LABEL: &str = "rollouts-pod-template-hash";
/// The revision the controller writes on each ReplicaSet it creates.
const REVISION_ANNOTATION: &str = "rollout.argoproj.io/revision";

/// What the plugin prints when the Rollout is missing, with the namespace looked in (the
/// plugin's `rollouts.argoproj.io "web" not found` leaves the user guessing which one).
pub fn not_found(cluster: &Cluster, name: &str) -> ExitCode {
    eprintln!(
        "error: {} {name:?} not found in namespace {:?}",
        Kind::Rollout.resource_name(),
        cluster.namespace
    );
    ExitCode::from(1)
}

/// The three patches of a promotion, as the plugin computes them: `spec` goes to the Rollout,
/// `status` to its status subresource, and `unified` replaces `spec` when the status
/// subresource is missing.
#[derive(Debug, Default, PartialEq)]
pub struct Patches {
    pub spec: Option<Value>,
    pub status: Option<Value>,
    pub unified: Option<Value>,
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The canary step after the current one (`status.currentStepIndex`, 0 when unset), never
/// beyond the number of steps; `None` for blue-green or a canary without steps.
fn next_step_index(rollout: &Value) -> Option<i64> {
    let steps = rollout
        .pointer("/spec/strategy/canary/steps")
        .and_then(Value::as_array)
        .filter(|steps| !steps.is_empty())?
        .len();
    let steps = i64::try_from(steps).unwrap_or(i64::MAX);
    let current = rollout
        .pointer("/status/currentStepIndex")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    Some(if current < steps {
        current + 1
    } else {
        current
    })
}

/// `promote` (with `--full` when `full`), as the plugin's `getPatches`.
pub fn promote_patches(rollout: &Value, full: bool) -> Patches {
    let paused = rollout
        .pointer("/spec/paused")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let unpause = json!({"spec": {"paused": false}});
    let spec = paused.then(|| unpause.clone());
    if full {
        // Nothing to promote when the new pods are already the stable ones.
        let promote = text(rollout, "/status/currentPodHash") != text(rollout, "/status/stableRS");
        return Patches {
            spec,
            status: promote.then(|| json!({"status": {"promoteFull": true}})),
            unified: Some(json!({"spec": {"paused": false}, "status": {"promoteFull": true}})),
        };
    }
    let pause_conditions = rollout
        .pointer("/status/pauseConditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| !conditions.is_empty());
    let canary = rollout
        .pointer("/spec/strategy/canary")
        .is_some_and(|canary| !canary.is_null());
    let controller_pause = rollout
        .pointer("/status/controllerPause")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let inconclusive = canary
        && text(
            rollout,
            "/status/canary/currentStepAnalysisRunStatus/status",
        ) == "Inconclusive";
    let mut patches = Patches {
        spec,
        status: None,
        unified: Some(json!({"spec": {"paused": false}, "status": {"pauseConditions": null}})),
    };
    if inconclusive && pause_conditions && controller_pause {
        // An inconclusive analysis step paused the Rollout: clearing the condition alone would
        // leave it on that step (and stuck if the next one is a pause), so the step is passed.
        if let Some(index) = next_step_index(rollout) {
            patches.status = Some(json!({"status": {
                "pauseConditions": null, "controllerPause": false, "currentStepIndex": index}}));
        }
    } else if pause_conditions {
        // The controller reads "controllerPause with no condition" as a resume and completes
        // the pause step itself.
        patches.status = Some(json!({"status": {"pauseConditions": null}}));
    } else if canary {
        // Not paused by a condition (an analysis or experiment step under way): skip the step.
        if let Some(index) = next_step_index(rollout) {
            patches.status = Some(json!({"status": {
                "pauseConditions": null, "currentStepIndex": index}}));
            patches.unified = Some(json!({"spec": {"paused": false}, "status": {
                "pauseConditions": null, "currentStepIndex": index}}));
        }
    }
    patches
}

/// Sends `patches` as the plugin does: the status patch first; its 404 means no status
/// subresource, and then the unified patch goes to the main resource instead of the spec one.
async fn send(cluster: &Cluster, name: &str, patches: Patches) -> Result<Option<()>> {
    let mut spec = patches.spec;
    if let Some(status) = &patches.status
        && cluster
            .merge_patch(Kind::Rollout, name, status, true)
            .await?
            .is_err()
    {
        spec = patches.unified;
    }
    if let Some(spec) = &spec
        && cluster
            .merge_patch(Kind::Rollout, name, spec, false)
            .await?
            .is_err()
    {
        return Ok(None);
    }
    Ok(Some(()))
}

/// `weir argo promote NAME [--full]`.
pub async fn promote(cluster: &Cluster, name: &str, full: bool) -> Result<ExitCode> {
    let Some(rollout) = cluster.get(Kind::Rollout, name).await? else {
        return Ok(not_found(cluster, name));
    };
    if send(cluster, name, promote_patches(&rollout, full))
        .await?
        .is_none()
    {
        return Ok(not_found(cluster, name));
    }
    if full {
        println!("rollout '{name}' fully promoted");
    } else {
        println!("rollout '{name}' promoted");
    }
    Ok(ExitCode::SUCCESS)
}

/// A status patch (`abort`, `retry`) on each Rollout named, in order; the first missing one
/// ends the command, as with the plugin.
pub async fn patch_status(
    cluster: &Cluster,
    names: &[String],
    status: Value,
    done: &str,
) -> Result<ExitCode> {
    let patch = json!({ "status": status });
    for name in names {
        if cluster.get(Kind::Rollout, name).await?.is_none() {
            return Ok(not_found(cluster, name));
        }
        let patches = Patches {
            spec: None,
            status: Some(patch.clone()),
            unified: Some(patch.clone()),
        };
        if send(cluster, name, patches).await?.is_none() {
            return Ok(not_found(cluster, name));
        }
        println!("rollout '{name}' {done}");
    }
    Ok(ExitCode::SUCCESS)
}

/// A spec patch (`pause`, `resume`, `restart`) on each Rollout named, in order.
pub async fn patch_spec(
    cluster: &Cluster,
    names: &[String],
    spec: Value,
    done: &str,
) -> Result<ExitCode> {
    let patch = json!({ "spec": spec });
    for name in names {
        if cluster.get(Kind::Rollout, name).await?.is_none() {
            return Ok(not_found(cluster, name));
        }
        if cluster
            .merge_patch(Kind::Rollout, name, &patch, false)
            .await?
            .is_err()
        {
            return Ok(not_found(cluster, name));
        }
        println!("rollout '{name}' {done}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `--in` of `restart`: Argo's duration strings, a whole number of seconds (`30`) or Go's
/// syntax (`30s`, `5m`, `1h`).
pub fn parse_in(text: &str) -> Result<std::time::Duration, String> {
    if let Ok(seconds) = text.trim().parse::<u64>() {
        return Ok(std::time::Duration::from_secs(seconds));
    }
    GoDuration::parse(text).map(GoDuration::get)
}

/// `--in` checked when the flags are read, kept as written (the plugin echoes it).
pub fn check_in(text: &str) -> Result<String, String> {
    parse_in(text).map(|_| text.to_string())
}

/// `spec.restartAt` for a restart in `delay`: RFC 3339 in UTC to the second, as the plugin
/// writes it (`2026-11-28T16:41:59Z`).
pub fn restart_at(now: jiff::Timestamp, delay: std::time::Duration) -> Result<String> {
    let delay = jiff::SignedDuration::try_from(delay)?;
    let at = now.checked_add(delay)?;
    let at = jiff::Timestamp::from_second(at.as_second())?;
    Ok(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// A label selector's text (`app=web,tier in (a,b)`) for listing what a Rollout selects.
fn selector_text(selector: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (key, value) in labels {
            parts.push(format!("{key}={}", value.as_str().unwrap_or("")));
        }
    }
    if let Some(expressions) = selector.get("matchExpressions").and_then(Value::as_array) {
        for expression in expressions {
            let key = text(expression, "/key");
            let values: Vec<&str> = expression
                .get("values")
                .and_then(Value::as_array)
                .map(|values| values.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match text(expression, "/operator") {
                "In" => parts.push(format!("{key} in ({})", values.join(","))),
                "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
                "Exists" => parts.push(key.to_string()),
                "DoesNotExist" => parts.push(format!("!{key}")),
                _ => {}
            }
        }
    }
    parts.join(",")
}

/// Whether `object` has `owner` as its controller (the ownerReference with `controller: true`
/// and the owner's uid), as the plugin keeps only the ReplicaSets the Rollout controls.
fn controlled_by(object: &Value, owner: &Value) -> bool {
    let uid = text(owner, "/metadata/uid");
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|reference| {
            reference.get("controller").and_then(Value::as_bool) == Some(true)
                && text(reference, "/uid") == uid
        })
}

/// A ReplicaSet's revision: its annotation as a number, 0 when absent, `None` when not a
/// number (skipped, as the plugin skips it).
fn revision(replica_set: &Value) -> Option<i64> {
    match replica_set
        .pointer("/metadata/annotations")
        .and_then(|annotations| annotations.get(REVISION_ANNOTATION))
    {
        None => Some(0),
        Some(value) => value.as_str().and_then(|text| text.parse().ok()),
    }
}

/// The ReplicaSet `undo` restores, among the Rollout's: revision `to_revision`, or with 0 the
/// one before the newest (the plugin's `rolloutRevision`).
pub fn undo_target(replica_sets: &[Value], to_revision: i64) -> Result<&Value, String> {
    let mut latest: Option<(i64, &Value)> = None;
    let mut previous: Option<(i64, &Value)> = None;
    for replica_set in replica_sets {
        let Some(number) = revision(replica_set) else {
            continue;
        };
        if to_revision != 0 {
            if number == to_revision {
                return Ok(replica_set);
            }
            continue;
        }
        if latest.is_none_or(|(latest, _)| latest < number) {
            previous = latest;
            latest = Some((number, replica_set));
        } else if previous.is_none_or(|(previous, _)| previous < number) {
            previous = Some((number, replica_set));
        }
    }
    if to_revision > 0 {
        return Err(format!(
            "unable to find specified revision {to_revision} in history"
        ));
    }
    previous
        .map(|(_, replica_set)| replica_set)
        .ok_or_else(|| "no revision found".to_string())
}

/// Go's `DeepDerivative(a, b)` over JSON: `b` equals `a` where `a` sets something (an absent,
/// null, empty string or empty map in `a` matches anything), as the plugin compares templates
/// to skip an undo that would change nothing.
fn derivative(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, _) => true,
        (Value::String(a), _) if a.is_empty() => true,
        (Value::Object(a), _) if a.is_empty() => true,
        (Value::Object(a), Value::Object(b)) => a
            .iter()
            .all(|(key, value)| derivative(value, b.get(key).unwrap_or(&Value::Null))),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| derivative(a, b))
        }
        (a, b) => a == b,
    }
}

/// A pod template without the pod-template-hash label.
fn without_hash_label(template: &Value) -> Value {
    let mut template = template.clone();
    if let Some(labels) = template
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(POD_TEMPLATE_HASH_LABEL);
    }
    template
}

/// `weir argo undo NAME [--to-revision N]`.
pub async fn undo(cluster: &Cluster, name: &str, to_revision: i64) -> Result<ExitCode> {
    let Some(rollout) = cluster.get(Kind::Rollout, name).await? else {
        return Ok(not_found(cluster, name));
    };
    let selector = rollout
        .pointer("/spec/selector")
        .map(selector_text)
        .unwrap_or_default();
    let owned: Vec<Value> = cluster
        .list(Kind::ReplicaSet, Some(&selector))
        .await?
        .into_iter()
        .filter(|replica_set| controlled_by(replica_set, &rollout))
        .collect();
    let target = match undo_target(&owned, to_revision) {
        Ok(target) => target,
        Err(problem) if problem == "no revision found" => {
            bail!("no revision found for rollout {name:?}")
        }
        Err(problem) => bail!("{problem}"),
    };
    let template = without_hash_label(
        target
            .pointer("/spec/template")
            .unwrap_or(&Value::Object(Default::default())),
    );
    if let Some(current) = rollout.pointer("/spec/template")
        && derivative(&without_hash_label(current), &template)
    {
        println!(
            "skipped rollback (current template already matches revision {})",
            revision(target).unwrap_or(to_revision)
        );
        return Ok(ExitCode::SUCCESS);
    }
    let patch = json!([{"op": "replace", "path": "/spec/template", "value": template}]);
    match rollout.pointer("/spec/workloadRef") {
        Some(reference) if !reference.is_null() => {
            // The template lives in the workload the Rollout refers to: that is what changes.
            let kind = match text(reference, "/kind") {
                "Deployment" => Kind::Deployment,
                "ReplicaSet" => Kind::ReplicaSet,
                "PodTemplate" => Kind::PodTemplate,
                other => bail!("workload of type {other} is not supported"),
            };
            cluster
                .json_patch(kind, text(reference, "/name"), &patch)
                .await?;
        }
        _ => {
            cluster.json_patch(Kind::Rollout, name, &patch).await?;
        }
    }
    println!("rollout '{name}' undo");
    Ok(ExitCode::SUCCESS)
}
