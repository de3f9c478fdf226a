//! Argo Rollouts' AnalysisRuns, run by weir: the analysis controller of Argo Rollouts v1.9.1
//! (`analysis/controller.go`, `analysis/analysis.go`), with the run's bookkeeping left to the pure
//! state machine in [`weir_core::argo::analysis`].
//!
//! Whoever creates an AnalysisRun (the Rollout controller, or a user) writes a resolved `spec`;
//! this module measures it and writes `status` in Argo's shape, which the creator reads back
//! (`status.phase`), and stops when `spec.terminate` is set.
//!
//! - **Watch.** One watch of `analysisruns.argoproj.io` per namespace (or one for all); each run
//!   not completed gets a task of its own ([`drive`]), so a slow provider of one run never holds
//!   up another, and the metrics of one run measure in parallel (one task per measurement).
//! - **Restart.** The task restores the run from its `status` ([`AnalysisRunState::from_status`])
//!   when it starts, so an operator killed mid-run loses nothing and measures nothing twice: what
//!   was recorded is in the status, a Job in flight is found again by its name.
//! - **Time.** A run wakes at its earliest next measurement, and at least every second while a
//!   Job is in flight or a measurement may be due; a web call has its own timeout.
//! - **Arguments.** `spec.args` are `value`s, or `valueFrom.secretKeyRef`s read from a Secret of
//!   the run's namespace at each measurement (so a rotated Secret is used at once). A secret value
//!   never reaches the status, a log or a message: the state machine strikes it out as `*****`.
//! - **Status.** Written as a merge patch of the `status` subresource holding only what changed,
//!   and only when something did.
//! - **Providers**: [`web`], [`prometheus`], [`job`], [`graphite`], [`datadog`], [`newrelic`]
//!   (`newRelic`), [`influxdb`]. Any other is a measurement Error naming it, never a silent skip.
//! - **Provider Secrets** (datadog's `datadog`, newRelic's `newrelic`, influxdb's `influxdb`, or
//!   the names the metric gives): Argo reads them from the controller's own
//!   namespace. weir reads them from the namespace in the environment variable `POD_NAMESPACE`
//!   when it is set (the operator's Deployment sets it from the downward API), else from the
//!   AnalysisRun's namespace; datadog's `secretRef.namespaced: true` always means the run's
//!   namespace. Their credentials (API keys, tokens) are struck out (`*****`) of every message
//!   and value recorded.

mod datadog;
mod graphite;
mod influxdb;
mod job;
mod newrelic;
mod prometheus;
mod web;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::TryStreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinSet};
use weir_core::argo::analysis::{
    AnalysisRunState, ArgValues, METRIC_TERMINATED, Outcome, RunSpec, arg_values, substitute_json,
};
use weir_core::argo::types::{AnalysisArg, SecretKeyRef};

/// The longest a run sleeps while something may change with time (a Job in flight, a clock
/// reaching the next measurement): a deadline for looking again, not a synchronisation.
const TICK: Duration = Duration::from_secs(1);

/// What weir's Argo analysis measures with; any other provider is refused by name.
pub const SUPPORTED_PROVIDERS: &str =
    "web, prometheus, job, graphite, datadog, newRelic and influxdb";

/// `analysisruns.argoproj.io`, version `v1alpha1`.
pub fn analysis_runs_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "AnalysisRun"),
        "analysisruns",
    )
}

/// Runs the AnalysisRuns of `namespaces` (empty: all namespaces) until the task is dropped or
/// aborted; it never returns by itself. Dropping it stops every run's task with it (they live
/// in its [`JoinSet`]), which is what an operator restart looks like to the runs.
pub async fn run(client: kube::Client, namespaces: Vec<String>) {
    let http = weir_http::HttpClient::default();
    let resource = analysis_runs_resource();
    let apis: Vec<Api<DynamicObject>> = if namespaces.is_empty() {
        vec![Api::all_with(client.clone(), &resource)]
    } else {
        namespaces
            .iter()
            .map(|namespace| Api::namespaced_with(client.clone(), namespace, &resource))
            .collect()
    };
    let mut tasks = JoinSet::new();
    let (events, mut received) = mpsc::unbounded_channel();
    for api in apis {
        tasks.spawn(watch_runs(api, events.clone()));
    }
    drop(events);
    let mut runs: HashMap<String, Running> = HashMap::new();
    loop {
        tokio::select! {
            event = received.recv() => match event {
                Some(Change::Applied(object)) => {
                    let Some(uid) = object.metadata.uid.clone() else { continue };
                    if let Some(running) = runs.get(&uid) {
                        // A completed run stays completed; an event still queued from before
                        // its last write must not start it again from an older status.
                        if running.completed.load(Ordering::SeqCst) {
                            continue;
                        }
                        if !running.abort.is_finished() {
                            running.objects.send_replace(object);
                            continue;
                        }
                    }
                    let (objects, receiver) = watch::channel(object);
                    let completed = Arc::new(AtomicBool::new(false));
                    let abort = tasks.spawn(drive(
                        client.clone(),
                        http.clone(),
                        receiver,
                        completed.clone(),
                    ));
                    runs.insert(uid, Running { objects, abort, completed });
                }
                Some(Change::Deleted(object)) => {
                    if let Some(running) = object.metadata.uid.and_then(|uid| runs.remove(&uid)) {
                        running.abort.abort();
                    }
                }
                // The watches never end; if they did, there is nothing left to run.
                None => std::future::pending::<()>().await,
            },
            // Finished run tasks are reaped here so the set does not grow; a completed run is
            // remembered (until it is deleted) so that it is never run again.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {
                runs.retain(|_, running| {
                    !running.abort.is_finished() || running.completed.load(Ordering::SeqCst)
                });
            }
        }
    }
}

/// A run's task and the channel that hands it the object's latest version.
struct Running {
    objects: watch::Sender<DynamicObject>,
    abort: AbortHandle,
    /// Set by the task when the run completed and its final status was written.
    completed: Arc<AtomicBool>,
}

enum Change {
    Applied(DynamicObject),
    Deleted(DynamicObject),
}

/// Forwards every AnalysisRun event of `api`; the watch restarts by itself after an error (with
/// backoff), listing again what it missed.
async fn watch_runs(api: Api<DynamicObject>, events: mpsc::UnboundedSender<Change>) {
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures_util::pin_mut!(stream);
    loop {
        let change = match stream.try_next().await {
            Ok(Some(watcher::Event::Apply(object) | watcher::Event::InitApply(object))) => {
                Change::Applied(object)
            }
            Ok(Some(watcher::Event::Delete(object))) => Change::Deleted(object),
            Ok(Some(watcher::Event::Init | watcher::Event::InitDone)) => continue,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!("weir operator: watching AnalysisRuns: {error}");
                continue;
            }
        };
        if events.send(change).is_err() {
            return;
        }
    }
}

/// What one run's measurements need: the API, the HTTP client, the run's identity.
#[derive(Clone)]
pub(crate) struct RunContext {
    pub(crate) client: kube::Client,
    pub(crate) http: weir_http::HttpClient,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: String,
}

/// What a measurement task hands back to its run.
pub(crate) enum Done {
    /// A measurement ended with this outcome.
    Measured {
        metric: String,
        outcome: Outcome,
        started_at: Timestamp,
    },
    /// A Job was created (or found, after a restart): the measurement is in flight.
    Started {
        metric: String,
        at: Timestamp,
        /// The Job's name.
        job: String,
    },
    /// The Job in flight has not finished yet.
    StillRunning { metric: String },
}

impl Done {
    fn metric(&self) -> &str {
        match self {
            Done::Measured { metric, .. }
            | Done::Started { metric, .. }
            | Done::StillRunning { metric } => metric,
        }
    }
}

/// The arguments resolved for this measurement, or why not.
struct Resolved {
    spec: RunSpec,
    values: ArgValues,
    /// A Secret could not be read: the measurements now are Errors with this message.
    secret_error: Option<String>,
}

/// Builds the run's spec with the arguments' values, reading `secretKeyRef`s now. A spec that
/// cannot be built is the run's Error (`Err`, Argo's message); a Secret that cannot be read is
/// kept in [`Resolved::secret_error`] (the spec then holds empty values for bookkeeping).
async fn resolve(
    secrets: &Api<Secret>,
    spec: &Value,
) -> Result<Resolved, weir_core::argo::analysis::SpecError> {
    let args: Vec<AnalysisArg> = spec
        .get("args")
        .cloned()
        .map(serde_json::from_value)
        .transpose()
        .map_err(|error| {
            weir_core::argo::analysis::SpecError(format!("Analysis spec invalid: args: {error}"))
        })?
        .unwrap_or_default();
    let mut read: HashMap<(String, String), Option<String>> = HashMap::new();
    let mut failure = None;
    for arg in &args {
        let Some(key) = arg
            .value_from
            .as_ref()
            .and_then(|from| from.secret_key_ref.as_ref())
        else {
            continue;
        };
        if arg.value.is_some() || read.contains_key(&(key.name.clone(), key.key.clone())) {
            continue;
        }
        let value = match secrets.get_opt(&key.name).await {
            Ok(secret) => secret
                .and_then(|secret| secret.data)
                .and_then(|data| data.get(&key.key).cloned())
                .map(|bytes| String::from_utf8_lossy(&bytes.0).into_owned()),
            Err(error) => {
                failure.get_or_insert(format!(
                    "args.{}: reading Secret {:?}: {error}",
                    arg.name, key.name
                ));
                None
            }
        };
        read.insert((key.name.clone(), key.key.clone()), value);
    }
    let lookup = |key: &SecretKeyRef| {
        read.get(&(key.name.clone(), key.key.clone()))
            .cloned()
            .flatten()
    };
    let values = match arg_values(&args, &lookup) {
        Ok(values) => values,
        Err(error) => {
            failure.get_or_insert(error);
            // Empty values stand in, so the run's bookkeeping goes on while the Secret is fixed.
            arg_values(&args, &|_| Some(String::new()))
                .map_err(weir_core::argo::analysis::SpecError)?
        }
    };
    let spec = RunSpec::build(spec, &values)?;
    Ok(Resolved {
        spec,
        values,
        secret_error: failure,
    })
}

/// Runs one AnalysisRun until it completes or the task is aborted: restores its state from its
/// status, measures what is due, records the results, honours `spec.terminate` and writes the
/// status when it changed. Sets `completed` when it returns because the run completed.
async fn drive(
    client: kube::Client,
    http: weir_http::HttpClient,
    mut objects: watch::Receiver<DynamicObject>,
    completed: Arc<AtomicBool>,
) {
    let first = objects.borrow_and_update().clone();
    let (Some(namespace), Some(name), Some(uid)) = (
        first.metadata.namespace.clone(),
        first.metadata.name.clone(),
        first.metadata.uid.clone(),
    ) else {
        return;
    };
    let context = RunContext {
        client: client.clone(),
        http,
        namespace: namespace.clone(),
        name: name.clone(),
        uid,
    };
    let runs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &analysis_runs_resource());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let mut written = first.data.get("status").cloned().unwrap_or(Value::Null);
    if is_completed(&written) {
        completed.store(true, Ordering::SeqCst);
        return;
    }
    let spec_json = first.data.get("spec").cloned().unwrap_or(Value::Null);
    let now = Timestamp::now();
    let mut state = match resolve(&secrets, &spec_json).await {
        Ok(resolved) => AnalysisRunState::from_status(resolved.spec, &written, now),
        Err(error) => AnalysisRunState::failed_to_start(&error, now),
    };
    let mut measuring: JoinSet<Done> = JoinSet::new();
    let mut busy: BTreeSet<String> = BTreeSet::new();
    loop {
        let object = objects.borrow_and_update().clone();
        let spec_json = object.data.get("spec").cloned().unwrap_or(Value::Null);
        let now = Timestamp::now();
        if spec_json.get("terminate").and_then(Value::as_bool) == Some(true) && !state.completed() {
            let before = jobs_in_flight(&state, &context);
            state.terminate(now);
            delete_terminated_jobs(&context, &state, before).await;
        }
        if !state.completed() {
            start_measurements(
                &context,
                &secrets,
                &spec_json,
                &mut state,
                &mut measuring,
                &mut busy,
            )
            .await;
        }
        let status = state.status();
        if status != written {
            let patch = json!({ "status": merge_diff(&written, &status) });
            match runs
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => written = status.clone(),
                Err(kube::Error::Api(response)) if response.code == 404 => return,
                Err(error) => {
                    tracing::warn!(
                        "weir operator: writing the status of AnalysisRun {namespace}/{name}: \
                         {error}; trying again"
                    );
                }
            }
        }
        if state.completed() && status == written {
            completed.store(true, Ordering::SeqCst);
            return;
        }
        let wake = state
            .next_measurement_at()
            .and_then(|at| Duration::try_from(at.duration_since(Timestamp::now())).ok())
            .unwrap_or(TICK)
            .min(TICK);
        tokio::select! {
            Some(done) = measuring.join_next(), if !measuring.is_empty() => {
                let mut finished = vec![done];
                while let Some(done) = measuring.try_join_next() {
                    finished.push(done);
                }
                for done in finished {
                    match done {
                        Ok(done) => {
                            busy.remove(done.metric());
                            apply(&context, &mut state, done).await;
                        }
                        // A measurement task that panicked: its metric is measured again when due.
                        Err(error) => tracing::warn!(
                            "weir operator: a measurement of AnalysisRun {namespace}/{name} \
                             ended abnormally: {error}"
                        ),
                    }
                }
                if measuring.is_empty() {
                    busy.clear();
                }
            }
            changed = objects.changed() => if changed.is_err() {
                // The run was deleted (or the controller stopped).
                return;
            },
            () = tokio::time::sleep(wake) => {}
        }
    }
}

/// Starts the measurements due now, and looks at the Jobs in flight, each in a task of its own.
async fn start_measurements(
    context: &RunContext,
    secrets: &Api<Secret>,
    spec_json: &Value,
    state: &mut AnalysisRunState,
    measuring: &mut JoinSet<Done>,
    busy: &mut BTreeSet<String>,
) {
    let now = Timestamp::now();
    let in_flight: Vec<(String, i64)> = state
        .in_flight()
        .into_iter()
        .filter(|(metric, _)| !busy.contains(*metric))
        .map(|(metric, taken)| (metric.to_string(), taken))
        .collect();
    let due: Vec<String> = state
        .due(now)
        .into_iter()
        .filter(|metric| !busy.contains(*metric))
        .map(str::to_string)
        .collect();
    if in_flight.is_empty() && due.is_empty() {
        return;
    }
    let resolved = match resolve(secrets, spec_json).await {
        Ok(resolved) => resolved,
        Err(error) => {
            // The spec changed into one that cannot run: Argo's run Error.
            *state = AnalysisRunState::failed_to_start(&error, now);
            return;
        }
    };
    // The current secret values are struck out of what is recorded from now on.
    for secret in &resolved.spec.secrets {
        if !state.spec.secrets.contains(secret) {
            state.spec.secrets.push(secret.clone());
        }
    }
    for (metric, taken) in in_flight {
        let Some(metric_json) = metric_json(spec_json, &metric, &resolved.values) else {
            continue;
        };
        busy.insert(metric.clone());
        let context = context.clone();
        measuring.spawn(async move { job::poll(&context, &metric, &metric_json, taken).await });
    }
    for metric in due {
        busy.insert(metric.clone());
        let started_at = Timestamp::now();
        if let Some(error) = &resolved.secret_error {
            let error = error.clone();
            measuring.spawn(async move {
                Done::Measured {
                    metric,
                    outcome: Outcome::Error(error),
                    started_at,
                }
            });
            continue;
        }
        let Some(metric_json) = metric_json(spec_json, &metric, &resolved.values) else {
            busy.remove(&metric);
            continue;
        };
        let taken = state
            .results
            .iter()
            .flatten()
            .find(|result| result.name == metric)
            .map_or(0, |result| result.count + result.error);
        let context = context.clone();
        measuring
            .spawn(async move { measure(&context, metric, &metric_json, taken, started_at).await });
    }
}

/// The metric's JSON with the arguments substituted (what the provider reads).
fn metric_json(spec: &Value, metric: &str, values: &ArgValues) -> Option<Value> {
    let raw = spec
        .get("metrics")
        .and_then(Value::as_array)?
        .iter()
        .find(|item| item.get("name").and_then(Value::as_str) == Some(metric))?;
    substitute_json(raw, &values.values).ok()
}

/// One measurement by the metric's provider.
async fn measure(
    context: &RunContext,
    metric: String,
    metric_json: &Value,
    taken: i64,
    started_at: Timestamp,
) -> Done {
    let provider = metric_json
        .get("provider")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let outcome = if let Some(web) = provider.get("web") {
        web::measure(&context.http, web).await
    } else if let Some(prometheus) = provider.get("prometheus") {
        prometheus::measure(&context.http, prometheus).await
    } else if let Some(job) = provider.get("job") {
        return job::start(context, &metric, job, taken).await;
    } else if let Some(graphite) = provider.get("graphite") {
        graphite::measure(&context.http, graphite).await
    } else if let Some(datadog) = provider.get("datadog") {
        datadog::measure(context, datadog).await
    } else if let Some(newrelic) = provider.get("newRelic") {
        newrelic::measure(context, newrelic).await
    } else if let Some(influxdb) = provider.get("influxdb") {
        influxdb::measure(context, influxdb).await
    } else {
        unsupported(&provider)
    };
    Done::Measured {
        metric,
        outcome,
        started_at,
    }
}

/// The Error of a metric whose provider weir does not run.
fn unsupported(provider: &Map<String, Value>) -> Outcome {
    let name = provider
        .iter()
        .map(|(key, value)| match (key.as_str(), value.as_object()) {
            ("plugin", Some(plugins)) => plugins
                .keys()
                .next()
                .map_or_else(|| "plugin".to_string(), |name| format!("plugin {name}")),
            _ => key.clone(),
        })
        .next()
        .unwrap_or_else(|| "(none)".to_string());
    Outcome::Error(format!(
        "metric provider {name} is not supported: weir's Argo analysis runs {SUPPORTED_PROVIDERS} metrics"
    ))
}

/// Records what a measurement task found.
async fn apply(context: &RunContext, state: &mut AnalysisRunState, done: Done) {
    if state.completed() || state.terminating() {
        // A Job created while the run ended (or began to) measures nothing any longer.
        if let Done::Started { job, .. } = &done {
            job::delete(context, job).await;
        }
        if state.completed() {
            return;
        }
    }
    let now = Timestamp::now();
    let before = jobs_in_flight(state, context);
    let recorded = match done {
        Done::Measured {
            metric,
            outcome,
            started_at,
        } => {
            let outcome = redact_value(outcome, &state.spec.secrets);
            state.record(&metric, outcome, started_at, now).map(|_| ())
        }
        Done::Started { metric, at, .. } => {
            // A Job found again after a restart is already in flight in the restored status.
            if state.terminating() || state.in_flight().iter().any(|(name, _)| *name == metric) {
                Ok(())
            } else {
                state.start(&metric, at)
            }
        }
        Done::StillRunning { .. } => Ok(()),
    };
    if let Err(error) = recorded {
        tracing::warn!(
            "weir operator: AnalysisRun {}/{}: {error}",
            context.namespace,
            context.name
        );
    }
    delete_terminated_jobs(context, state, before).await;
}

/// A measured value with the secret arguments' values struck out (`*****`), as the state
/// machine strikes them out of messages: an endpoint that echoes a token back must not put it
/// in the status.
fn redact_value(outcome: Outcome, secrets: &[String]) -> Outcome {
    match outcome {
        Outcome::Value { result, mut shown } => {
            for secret in secrets.iter().filter(|secret| !secret.is_empty()) {
                shown = shown.replace(secret.as_str(), "*****");
            }
            Outcome::Value { result, shown }
        }
        other => other,
    }
}

/// The Jobs of the measurements in flight, by metric.
fn jobs_in_flight(state: &AnalysisRunState, context: &RunContext) -> Vec<(String, String)> {
    state
        .in_flight()
        .into_iter()
        .map(|(metric, taken)| {
            (
                metric.to_string(),
                job::job_name(&context.uid, metric, taken),
            )
        })
        .collect()
}

/// Deletes the Jobs whose measurement the run ended ("Metric Terminated"): Argo's job provider
/// stops them when the run terminates.
async fn delete_terminated_jobs(
    context: &RunContext,
    state: &AnalysisRunState,
    before: Vec<(String, String)>,
) {
    let still: Vec<String> = state
        .in_flight()
        .into_iter()
        .map(|(metric, _)| metric.to_string())
        .collect();
    for (metric, job) in before {
        if still.contains(&metric) {
            continue;
        }
        let terminated = state
            .results
            .iter()
            .flatten()
            .find(|result| result.name == metric)
            .and_then(|result| result.measurements.last())
            .is_some_and(|last| last.message.as_deref() == Some(METRIC_TERMINATED));
        if terminated {
            job::delete(context, &job).await;
        }
    }
}

fn is_completed(status: &Value) -> bool {
    status
        .get("phase")
        .and_then(Value::as_str)
        .and_then(weir_core::argo::analysis::Phase::parse)
        .is_some_and(weir_core::argo::analysis::Phase::completed)
}

/// A JSON merge patch turning `old` into `new`: changed and new keys, removed keys as `null`
/// (arrays and scalars replace as a whole).
pub fn merge_diff(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for (key, value) in new {
                match old.get(key) {
                    Some(before) if before == value => {}
                    Some(before) => {
                        patch.insert(key.clone(), merge_diff(before, value));
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in old.keys() {
                if !new.contains_key(key) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

/// Timeouts and similar settings of providers: seconds from a JSON number or numeric string.
pub(crate) fn seconds(value: Option<&Value>, default: u64) -> Duration {
    let seconds = match value {
        Some(Value::Number(number)) => number.as_u64(),
        Some(Value::String(text)) => text.trim().parse().ok(),
        _ => None,
    };
    Duration::from_secs(seconds.filter(|seconds| *seconds > 0).unwrap_or(default))
}

/// The string values of the provider Secret `name`, read from `POD_NAMESPACE` (if set and not
/// `in_run_namespace`) or the run's namespace. A Secret that does not exist is an error naming
/// it and the namespace looked in.
pub(crate) async fn provider_secret(
    context: &RunContext,
    name: &str,
    in_run_namespace: bool,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|namespace| !namespace.is_empty() && !in_run_namespace)
        .unwrap_or_else(|| context.namespace.clone());
    let secrets: Api<Secret> = Api::namespaced(context.client.clone(), &namespace);
    match secrets.get_opt(name).await {
        Ok(Some(secret)) => Ok(secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(key, bytes)| (key, String::from_utf8_lossy(&bytes.0).into_owned()))
            .collect()),
        Ok(None) => Err(format!(
            "Secret {name:?} not found in namespace {namespace:?}"
        )),
        Err(error) => Err(format!(
            "reading Secret {name:?} of namespace {namespace:?}: {error}"
        )),
    }
}

/// `text` with the values of a provider Secret's `keys` (its credentials, not its address or
/// organization) struck out (`*****`); values shorter than 4 characters would strike out
/// ordinary text and are left.
pub(crate) fn scrub(
    text: &str,
    secret: &std::collections::BTreeMap<String, String>,
    keys: &[&str],
) -> String {
    let mut text = text.to_string();
    for value in keys
        .iter()
        .filter_map(|key| secret.get(*key))
        .filter(|value| value.len() >= 4)
    {
        text = text.replace(value.as_str(), "*****");
    }
    text
}

/// An outcome with a provider Secret's credentials ([`scrub`]) struck out of its message or
/// shown value.
pub(crate) fn scrub_outcome(
    outcome: Outcome,
    secret: &std::collections::BTreeMap<String, String>,
    keys: &[&str],
) -> Outcome {
    match outcome {
        Outcome::Error(message) => Outcome::Error(scrub(&message, secret, keys)),
        Outcome::Value { result, shown } => Outcome::Value {
            result,
            shown: scrub(&shown, secret, keys),
        },
        other => other,
    }
}

/// `headers: [{key, value}]`.
pub(crate) fn headers(provider: &Value) -> Vec<(String, String)> {
    provider
        .get("headers")
        .and_then(Value::as_array)
        .map(|headers| {
            headers
                .iter()
                .filter_map(|header| {
                    Some((
                        header.get("key")?.as_str()?.to_string(),
                        header
                            .get("value")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_diff_holds_only_what_changed() {
        let old = json!({"phase": "Running", "message": "x", "metricResults": [{"count": 1}]});
        let new = json!({"phase": "Running", "metricResults": [{"count": 2}], "startedAt": "t"});
        assert_eq!(
            merge_diff(&old, &new),
            json!({"message": null, "metricResults": [{"count": 2}], "startedAt": "t"})
        );
        assert_eq!(merge_diff(&Value::Null, &new), new);
    }

    #[test]
    fn a_secret_echoed_in_a_value_is_struck_out() {
        let outcome = Outcome::json(&json!({"token": "s3cret"}));
        let Outcome::Value { shown, .. } = redact_value(outcome, &["s3cret".into(), String::new()])
        else {
            panic!("not a value");
        };
        assert_eq!(shown, r#"{"token":"*****"}"#);
    }

    #[test]
    fn an_unsupported_provider_is_named() {
        let provider = json!({"wavefront": {"query": "q"}});
        let Outcome::Error(message) = unsupported(provider.as_object().unwrap()) else {
            panic!("not an error");
        };
        assert_eq!(
            message,
            "metric provider wavefront is not supported: weir's Argo analysis runs web, prometheus, job, graphite, datadog, newRelic and influxdb metrics"
        );
        let provider = json!({"plugin": {"argoproj-labs/sample": {}}});
        let Outcome::Error(message) = unsupported(provider.as_object().unwrap()) else {
            panic!("not an error");
        };
        assert!(message.starts_with("metric provider plugin argoproj-labs/sample is not"));
    }
}
