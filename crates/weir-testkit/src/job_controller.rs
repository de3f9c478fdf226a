//! Plays Kubernetes' Job controller against the in-memory API server, where no pods run: each
//! new `batch/v1` Job runs its first container's `command` followed by its `args` as a local
//! process, and its `status` says what became of it as the real controller (1.31+) would.
//!
//! What a Job gets (tracked by uid; the controller looks every 20 ms):
//! - on start: `status.startTime`, `active: 1`, `ready: 1` (a pod without a readiness probe is
//!   ready once it runs);
//! - exit code 0: `succeeded: 1`, `completionTime`, `active` gone, `ready: 0`, and the
//!   conditions `SuccessCriteriaMet` then `Complete` (`True`, reason `CompletionsReached`);
//! - a non-zero exit (or a command that cannot be started): the attempt counts in `failed` and
//!   the command runs again, up to `spec.backoffLimit` (default 6) retries; one failure more
//!   and the Job fails: conditions `FailureTarget` then `Failed` (reason `BackoffLimitExceeded`,
//!   "Job has reached the specified backoff limit"). Retries start at once (the real
//!   controller waits 10 s, 20 s, ... between them);
//! - `spec.activeDeadlineSeconds` (counted from `startTime`, across retries) passed: the
//!   process is killed, the attempt counts in `failed`, and the Job fails with reason
//!   `DeadlineExceeded` ("Job was active longer than specified deadline");
//! - no `command` in the first container: the Job fails at once (reason `NoCommand`) with a
//!   message saying that this stand-in needs one, since it cannot run the image's entrypoint;
//! - deleted (or being deleted) while its command runs: the process is killed;
//! - `spec.suspend: true`: not started until unsuspended.
//!
//! **Limits.** The container image is ignored: the command runs on the test machine, with the
//! test process's environment (so `PATH` finds `sh`) plus the container's `env[].value`
//! entries (`valueFrom` is not resolved), in the test's working directory. One pod at a time:
//! `completions` and `parallelism` are read as 1, there is no `podFailurePolicy`,
//! `successPolicy`, `backoffLimitPerIndex`, TTL or pod objects. A kill stops the process the
//! command started, not processes it forked (`sh -c "a; b"` leaves `a` running if killed).
//! What the last attempt wrote to stdout and stderr is kept ([`JobController::logs`]), as
//! `kubectl logs job/NAME` would show it (nothing for an attempt killed at the deadline). Status is written with a merge patch on the status
//! subresource, as manager `weir-testkit`. Stopped when dropped, killing what still runs.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use crate::kube_server::{KubeServer, now};

/// The Job API's version.
const BATCH: &str = "batch/v1";

/// The retries a Job gets when `spec.backoffLimit` says nothing (the API's default).
const DEFAULT_BACKOFF_LIMIT: i64 = 6;

/// What the last attempt of each Job wrote, by namespace and name.
type Logs = Arc<Mutex<HashMap<(String, String), String>>>;

/// The Job controller played over the Jobs of one namespace (or all); stopped when dropped,
/// killing the commands still running.
pub struct JobController {
    logs: Logs,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for JobController {
    fn drop(&mut self) {
        // Aborting the task drops its JoinSet, which aborts every Job's task; their child
        // processes are killed on drop.
        self.task.abort();
    }
}

impl JobController {
    /// Starts the controller on the current tokio runtime for the Jobs of `namespace` (`""`:
    /// every namespace).
    pub fn spawn(server: Arc<KubeServer>, namespace: &str) -> JobController {
        let logs = Logs::default();
        let task = tokio::spawn(run(server, namespace.to_owned(), logs.clone()));
        JobController { logs, task }
    }

    /// What the last attempt of Job `name` in `namespace` wrote to stdout then stderr, once it
    /// ended (`None` before).
    pub fn logs(&self, namespace: &str, name: &str) -> Option<String> {
        self.logs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }
}

/// Whether the Job has a condition of type `wanted` that is `True`.
fn has_condition(job: &Value, wanted: &str) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|condition| {
            condition.get("type").and_then(Value::as_str) == Some(wanted)
                && condition.get("status").and_then(Value::as_str) == Some("True")
        })
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

async fn run(server: Arc<KubeServer>, namespace: String, logs: Logs) {
    let mut tasks = JoinSet::new();
    let mut running: HashMap<String, AbortHandle> = HashMap::new();
    loop {
        while tasks.try_join_next().is_some() {}
        let mut listed = HashMap::new();
        for job in server.list(BATCH, "Job", &namespace) {
            let uid = text(&job, "/metadata/uid").to_owned();
            if uid.is_empty() || job.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            if let Some(handle) = running.remove(&uid) {
                listed.insert(uid, handle);
                continue;
            }
            let finished = has_condition(&job, "Complete") || has_condition(&job, "Failed");
            let suspended = job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
            if finished || suspended {
                continue;
            }
            let handle = tasks.spawn(run_job(server.clone(), job, logs.clone()));
            listed.insert(uid, handle);
        }
        // A Job gone or being deleted: its command is killed (the task's child is killed when
        // the task is dropped).
        for handle in running.values() {
            handle.abort();
        }
        running = listed;
        // A controller's resync period, not a synchronisation: tests wait on conditions.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The condition pair the real controller (1.31+) writes when a Job ends: the interim one
/// (`SuccessCriteriaMet` or `FailureTarget`), then the final one (`Complete` or `Failed`).
fn conditions(interim: &str, last: &str, reason: &str, message: &str) -> Value {
    let at = now();
    let condition = |kind: &str| {
        json!({
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastProbeTime": at,
            "lastTransitionTime": at,
        })
    };
    json!([condition(interim), condition(last)])
}

/// The command line of the Job's first container: `command` then `args`.
fn command_line(container: &Value) -> Vec<String> {
    let strings = |key: &str| -> Vec<String> {
        container
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let command = strings("command");
    if command.is_empty() {
        return command;
    }
    command.into_iter().chain(strings("args")).collect()
}

/// How one attempt ended.
enum Attempt {
    Succeeded,
    Failed,
    DeadlineExceeded,
}

/// Runs one Job to its end, writing its status as it goes; returns early if the Job is gone
/// (a status write fails).
async fn run_job(server: Arc<KubeServer>, job: Value, logs: Logs) {
    let namespace = text(&job, "/metadata/namespace").to_owned();
    let name = text(&job, "/metadata/name").to_owned();
    let write = |status: Value| {
        server
            .merge_patch(
                BATCH,
                "Job",
                &namespace,
                &name,
                &json!({ "status": status }),
                true,
            )
            .is_ok()
    };
    let container = job
        .pointer("/spec/template/spec/containers/0")
        .cloned()
        .unwrap_or(Value::Null);
    let line = command_line(&container);
    let Some((program, arguments)) = line.split_first() else {
        let message = format!(
            "the testkit's Job stand-in needs a command: it runs the first container's \
             command and args as a local process and cannot run the entrypoint of image \
             \"{}\"; container \"{}\" has no command",
            text(&container, "/image"),
            text(&container, "/name")
        );
        write(json!({
            "startTime": now(),
            "conditions": conditions("FailureTarget", "Failed", "NoCommand", &message),
        }));
        return;
    };
    let env: Vec<(String, String)> = container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|var| {
            Some((
                var.get("name")?.as_str()?.to_owned(),
                var.get("value")?.as_str()?.to_owned(),
            ))
        })
        .collect();
    let backoff_limit = job
        .pointer("/spec/backoffLimit")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_BACKOFF_LIMIT)
        .max(0);
    let deadline = job
        .pointer("/spec/activeDeadlineSeconds")
        .and_then(Value::as_u64)
        .map(|seconds| Instant::now() + Duration::from_secs(seconds));
    if !write(json!({"startTime": now(), "active": 1, "ready": 1})) {
        return;
    }
    let mut failed = 0;
    loop {
        let (outcome, output) = attempt(program, arguments, &env, deadline).await;
        logs.lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert((namespace.clone(), name.clone()), output);
        let status = match outcome {
            Attempt::Succeeded => {
                let message = "Reached expected number of succeeded pods";
                write(json!({
                    "active": null,
                    "ready": 0,
                    "succeeded": 1,
                    "completionTime": now(),
                    "conditions": conditions(
                        "SuccessCriteriaMet", "Complete", "CompletionsReached", message),
                }));
                return;
            }
            Attempt::DeadlineExceeded => {
                failed += 1;
                let message = "Job was active longer than specified deadline";
                json!({
                    "active": null,
                    "ready": 0,
                    "failed": failed,
                    "conditions": conditions(
                        "FailureTarget", "Failed", "DeadlineExceeded", message),
                })
            }
            Attempt::Failed if failed + 1 > backoff_limit => {
                failed += 1;
                let message = "Job has reached the specified backoff limit";
                json!({
                    "active": null,
                    "ready": 0,
                    "failed": failed,
                    "conditions": conditions(
                        "FailureTarget", "Failed", "BackoffLimitExceeded", message),
                })
            }
            Attempt::Failed => {
                failed += 1;
                // Retried: a new pod is active again.
                if !write(json!({"failed": failed, "active": 1, "ready": 1})) {
                    return;
                }
                continue;
            }
        };
        write(status);
        return;
    }
}

/// Runs the command once, until it exits or `deadline` passes (then it is killed); returns how
/// it ended and what it wrote (stdout then stderr).
async fn attempt(
    program: &str,
    arguments: &[String],
    env: &[(String, String)],
    deadline: Option<Instant>,
) -> (Attempt, String) {
    let child = tokio::process::Command::new(program)
        .args(arguments)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Dropped (the Job deleted, the controller stopped, the deadline passed): killed.
        .kill_on_drop(true)
        .spawn();
    let child = match child {
        Ok(child) => child,
        // As a container whose command is not found: the pod fails.
        Err(error) => return (Attempt::Failed, format!("starting {program}: {error}\n")),
    };
    let output = child.wait_with_output();
    let output = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline, output).await {
            Ok(output) => output,
            Err(_) => return (Attempt::DeadlineExceeded, String::new()),
        },
        None => output.await,
    };
    match output {
        Ok(output) => {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            let outcome = if output.status.success() {
                Attempt::Succeeded
            } else {
                Attempt::Failed
            };
            (outcome, text)
        }
        Err(error) => (Attempt::Failed, format!("waiting for {program}: {error}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_the_command_then_the_args() {
        let container = json!({"command": ["sh", "-c"], "args": ["exit 0"]});
        assert_eq!(command_line(&container), ["sh", "-c", "exit 0"]);
        // Args alone would run the image's entrypoint: not something the stand-in can do.
        assert!(command_line(&json!({"args": ["x"]})).is_empty());
    }

    #[tokio::test]
    async fn an_attempt_reports_exit_codes_output_and_deadlines() {
        let sh = |script: &str| ["-c".to_owned(), script.to_owned()];
        let (outcome, output) = attempt(
            "sh",
            &sh("echo $GREETING"),
            &[("GREETING".into(), "hi".into())],
            None,
        )
        .await;
        assert!(matches!(outcome, Attempt::Succeeded));
        assert_eq!(output, "hi\n");
        let (outcome, _) = attempt("sh", &sh("exit 3"), &[], None).await;
        assert!(matches!(outcome, Attempt::Failed));
        let (outcome, _) = attempt("no-such-command-weir", &[], &[], None).await;
        assert!(matches!(outcome, Attempt::Failed));
        let soon = Instant::now() + Duration::from_millis(100);
        let (outcome, _) = attempt("sleep", &["600".to_owned()], &[], Some(soon)).await;
        assert!(matches!(outcome, Attempt::DeadlineExceeded));
    }
}
