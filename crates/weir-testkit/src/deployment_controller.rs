//! Plays the Deployment controller against the in-memory API server, where nothing runs pods:
//! what a real controller would report in `status` once pods of the new spec take a while
//! (or forever) to become available.
//!
//! [`Readiness`] says how long new pods take: [`Readiness::Instant`] (every change is rolled out
//! at once, the default), [`Readiness::After`] a delay, [`Readiness::Never`]. What is reported,
//! per Deployment (tracked by uid, with tokio's clock):
//! - `status.observedGeneration` follows `metadata.generation` at once (the controller sees the
//!   change on its next pass, every 20 ms);
//! - `status.replicas` is `spec.replicas` (default 1);
//! - a new Deployment, or one scaled up, keeps its previous available count (0 for a new one)
//!   until the delay has passed since the change, then `availableReplicas`, `readyReplicas` and
//!   `updatedReplicas` are `spec.replicas`;
//! - a new pod template (a rolling update) keeps the old pods serving: `availableReplicas` stays
//!   at the previous count (capped at `spec.replicas`) and `updatedReplicas` is 0 until the delay
//!   has passed since the change, then everything is updated and available;
//! - scaling down takes effect at once;
//! - `unavailableReplicas` is `spec.replicas` minus the available count; counts of 0 are left
//!   out, as the real server's `omitempty` does. No `conditions`, no pods, no ReplicaSets.
//!
//! A change made while an earlier one is still pending starts the delay again. Changing the
//! readiness ([`DeploymentController::set_readiness`]) applies to changes still pending, counted
//! from when they happened.
//!
//! It plays the DaemonSet controller too, on a cluster of [`NODES`] nodes labelled
//! `kubernetes.io/hostname: node-N`, `kubernetes.io/os: linux` and `kubernetes.io/arch: amd64`:
//! a DaemonSet wants a pod on every node its pod template's `nodeSelector` matches (all 3
//! without one; 0 with Flagger's `flagger.app/scale-to-zero`, which no node has), and its pods
//! become available as a Deployment's do, with the same readiness (by name too). Reported:
//! `observedGeneration`, `desiredNumberScheduled` and `currentNumberScheduled` (the matching
//! nodes), `numberReady` and `numberAvailable` (the serving pods), `updatedNumberScheduled`
//! (those of the current template), `numberMisscheduled` 0 and `numberUnavailable`; the four
//! counts the API requires are always written, the others left out at 0 as the real server
//! does.
//!
//! And it plays the ReplicaSet controller (ReplicaSets written by the test or by a controller
//! under test, such as an Argo Rollouts stand-in): `status.replicas` is `spec.replicas`
//! (default 1; always written, the API requires it), `fullyLabeledReplicas` the same, and
//! `readyReplicas` and `availableReplicas` follow the readiness as a Deployment's pods do (by
//! the ReplicaSet's name too): a new ReplicaSet or one scaled up waits for the delay, scaling
//! down is at once. A new pod template changes nothing, as in Kubernetes (a ReplicaSet does
//! not replace its pods). `observedGeneration` follows `metadata.generation`; counts of 0 are
//! left out. No pods, no `conditions`, no owner of its own: a Deployment here makes none.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::kube_server::KubeServer;

/// How long pods of a new spec take to become available.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Readiness {
    /// At once: whatever the spec asks for is updated and available on the next pass.
    #[default]
    Instant,
    /// Once this long has passed since the change.
    After(Duration),
    /// Never: new pods never become available (old ones keep serving in a rolling update).
    Never,
}

impl Readiness {
    fn due(self, since: Instant, now: Instant) -> bool {
        match self {
            Readiness::Instant => true,
            Readiness::After(delay) => now.saturating_duration_since(since) >= delay,
            Readiness::Never => false,
        }
    }
}

/// The nodes of the cluster the controller plays, by `kubernetes.io/hostname`: `node-1` ...
pub const NODES: usize = 3;

/// The labels of node `index` (from 1).
fn node_labels(index: usize) -> Map<String, Value> {
    let mut labels = Map::new();
    labels.insert(
        "kubernetes.io/hostname".into(),
        json!(format!("node-{index}")),
    );
    labels.insert("kubernetes.io/os".into(), json!("linux"));
    labels.insert("kubernetes.io/arch".into(), json!("amd64"));
    labels
}

/// How many nodes a pod template's `spec.nodeSelector` matches (every pair among the node's
/// labels).
pub fn matching_nodes(template: &Value) -> usize {
    let selector = template
        .pointer("/spec/nodeSelector")
        .and_then(Value::as_object);
    (1..=NODES)
        .filter(|index| {
            let labels = node_labels(*index);
            selector
                .into_iter()
                .flatten()
                .all(|(key, value)| labels.get(key) == Some(value))
        })
        .count()
}

/// What the controller knows of one Deployment's (or DaemonSet's) pods between two passes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Pods {
    /// The pod template last seen.
    template: Value,
    /// `spec.replicas` last seen.
    replicas: i64,
    /// Pods serving (of the old template during a rolling update).
    available: i64,
    /// Pods of the current template that serve.
    updated: i64,
    /// When the last change that needs new pods happened.
    since: Instant,
}

/// The fields of `status` the controller owns.
const OWNED: [&str; 6] = [
    "observedGeneration",
    "replicas",
    "updatedReplicas",
    "readyReplicas",
    "availableReplicas",
    "unavailableReplicas",
];

/// The fields of a DaemonSet's `status` the controller owns.
const OWNED_BY_DAEMON_SETS: [&str; 8] = [
    "observedGeneration",
    "desiredNumberScheduled",
    "currentNumberScheduled",
    "numberReady",
    "numberAvailable",
    "updatedNumberScheduled",
    "numberMisscheduled",
    "numberUnavailable",
];

/// `replicas` pods of `template`, updated from what the controller knew (`None`: a workload
/// it has not seen yet) at `now`.
fn track(
    known: Option<Pods>,
    template: Value,
    replicas: i64,
    readiness: Readiness,
    now: Instant,
) -> Pods {
    let mut pods = match known {
        None => Pods {
            template: template.clone(),
            replicas,
            available: 0,
            updated: 0,
            since: now,
        },
        Some(mut pods) => {
            if pods.template != template {
                // A rolling update: the old pods keep serving, none of the new ones is up yet.
                pods.template = template;
                pods.updated = 0;
                pods.since = now;
            }
            if replicas > pods.replicas {
                pods.since = now;
            }
            pods.replicas = replicas;
            pods
        }
    };
    pods.available = pods.available.min(replicas);
    pods.updated = pods.updated.min(replicas);
    if (pods.available < replicas || pods.updated < replicas) && readiness.due(pods.since, now) {
        pods.available = replicas;
        pods.updated = replicas;
    }
    pods
}

/// One pass over `deployment`: its pods updated from what the controller knew (`None`: a
/// Deployment it has not seen yet) at `now`, and the status to report.
pub(crate) fn observe(
    known: Option<Pods>,
    deployment: &Value,
    readiness: Readiness,
    now: Instant,
) -> (Pods, Map<String, Value>) {
    let template = deployment
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    let replicas = deployment
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0);
    let pods = track(known, template, replicas, readiness, now);
    let generation = deployment
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let count = |n: i64| if n == 0 { Value::Null } else { json!(n) };
    let mut status = Map::new();
    status.insert("observedGeneration".into(), json!(generation));
    status.insert("replicas".into(), count(replicas));
    status.insert("updatedReplicas".into(), count(pods.updated));
    status.insert("readyReplicas".into(), count(pods.available));
    status.insert("availableReplicas".into(), count(pods.available));
    status.insert(
        "unavailableReplicas".into(),
        count(replicas - pods.available),
    );
    (pods, status)
}

/// One pass over `daemon_set`: a pod on each node its template matches, updated from what the
/// controller knew (`None`: a DaemonSet it has not seen yet) at `now`, and the status to report.
pub(crate) fn observe_daemon_set(
    known: Option<Pods>,
    daemon_set: &Value,
    readiness: Readiness,
    now: Instant,
) -> (Pods, Map<String, Value>) {
    let template = daemon_set
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    let desired = i64::try_from(matching_nodes(&template)).unwrap_or(0);
    let pods = track(known, template, desired, readiness, now);
    let generation = daemon_set
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let count = |n: i64| if n == 0 { Value::Null } else { json!(n) };
    let mut status = Map::new();
    status.insert("observedGeneration".into(), json!(generation));
    status.insert("desiredNumberScheduled".into(), json!(desired));
    status.insert("currentNumberScheduled".into(), json!(desired));
    status.insert("numberReady".into(), json!(pods.available));
    status.insert("numberMisscheduled".into(), json!(0));
    status.insert("numberAvailable".into(), count(pods.available));
    status.insert("updatedNumberScheduled".into(), count(pods.updated));
    status.insert("numberUnavailable".into(), count(desired - pods.available));
    (pods, status)
}

/// The fields of a ReplicaSet's `status` the controller owns.
const OWNED_BY_REPLICA_SETS: [&str; 5] = [
    "observedGeneration",
    "replicas",
    "fullyLabeledReplicas",
    "readyReplicas",
    "availableReplicas",
];

/// One pass over `replica_set`: its pods updated from what the controller knew (`None`: a
/// ReplicaSet it has not seen yet) at `now`, and the status to report.
///
/// A ReplicaSet never replaces the pods it has when its template changes (a Deployment or a
/// Rollout makes a new ReplicaSet for that), so only `spec.replicas` counts: the template is
/// not tracked.
pub(crate) fn observe_replica_set(
    known: Option<Pods>,
    replica_set: &Value,
    readiness: Readiness,
    now: Instant,
) -> (Pods, Map<String, Value>) {
    let replicas = replica_set
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(0);
    let pods = track(known, Value::Null, replicas, readiness, now);
    let generation = replica_set
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let count = |n: i64| if n == 0 { Value::Null } else { json!(n) };
    let mut status = Map::new();
    status.insert("observedGeneration".into(), json!(generation));
    // Required by the API: written even at 0.
    status.insert("replicas".into(), json!(replicas));
    // Every pod carries the template's labels, so all of them are fully labelled.
    status.insert("fullyLabeledReplicas".into(), count(replicas));
    status.insert("readyReplicas".into(), count(pods.available));
    status.insert("availableReplicas".into(), count(pods.available));
    (pods, status)
}

/// Whether `object`'s status already says what `status` says of `fields` (a null: absent).
fn reported_fields(object: &Value, status: &Map<String, Value>, fields: &[&str]) -> bool {
    fields.iter().all(|field| {
        let current = object
            .pointer(&format!("/status/{field}"))
            .unwrap_or(&Value::Null);
        current == status.get(*field).unwrap_or(&Value::Null)
    })
}

/// The readiness of everything a played controller makes ready, and of some objects by name,
/// shared by the test (which changes it) and the controller's task (which reads it).
#[derive(Clone, Debug, Default)]
pub(crate) struct Readinesses(Arc<Mutex<ByName>>);

#[derive(Debug, Default)]
struct ByName {
    default: Readiness,
    by_name: HashMap<String, Readiness>,
}

impl Readinesses {
    fn lock(&self) -> std::sync::MutexGuard<'_, ByName> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The readiness of object `name`: its own, else everyone's.
    pub(crate) fn of(&self, name: &str) -> Readiness {
        let by_name = self.lock();
        by_name
            .by_name
            .get(name)
            .copied()
            .unwrap_or(by_name.default)
    }
}

/// A controller played in the background of a test (Kubernetes' Deployment controller, Knative
/// Serving): its task, and the readiness it gives what it makes; stopped when dropped.
pub struct PlayedController {
    readinesses: Readinesses,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PlayedController {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PlayedController {
    /// Starts `run` on the current tokio runtime with the readiness settings, `readiness` for
    /// everything at first.
    pub(crate) fn start<F>(readiness: Readiness, run: impl FnOnce(Readinesses) -> F) -> Self
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let readinesses = Readinesses::default();
        readinesses.lock().default = readiness;
        let task = tokio::spawn(run(readinesses.clone()));
        PlayedController { readinesses, task }
    }

    /// From now on, everything without a readiness of its own takes `readiness` (changes still
    /// pending included, counted from when they happened).
    pub fn set_readiness(&self, readiness: Readiness) {
        self.readinesses.lock().default = readiness;
    }

    /// From now on, object `name` (a Deployment, a DaemonSet, a Knative Service) takes
    /// `readiness` (e.g. a canary that never becomes available while the primary does).
    pub fn set_readiness_of(&self, name: &str, readiness: Readiness) {
        self.readinesses
            .lock()
            .by_name
            .insert(name.to_owned(), readiness);
    }

    /// The readiness object `name` gets.
    pub fn readiness_of(&self, name: &str) -> Readiness {
        self.readinesses.of(name)
    }
}

/// The Deployment controller played over the Deployments, DaemonSets and ReplicaSets of one
/// namespace (or all); its readiness settings through [`PlayedController`].
pub struct DeploymentController(PlayedController);

impl std::ops::Deref for DeploymentController {
    type Target = PlayedController;

    fn deref(&self) -> &PlayedController {
        &self.0
    }
}

impl DeploymentController {
    /// Starts the controller on the current tokio runtime for the Deployments, DaemonSets and
    /// ReplicaSets of `namespace` (`""`: every namespace), new pods taking `readiness` to
    /// become available.
    pub fn spawn(
        server: Arc<KubeServer>,
        namespace: &str,
        readiness: Readiness,
    ) -> DeploymentController {
        let namespace = namespace.to_owned();
        DeploymentController(PlayedController::start(readiness, |readinesses| {
            run(server, namespace, readinesses)
        }))
    }
}

/// One pass over an object: its pods from what the controller knew, and the status to report.
type Observe = fn(Option<Pods>, &Value, Readiness, Instant) -> (Pods, Map<String, Value>);

/// A kind the controller plays: its status from what it knew, and the status fields it owns.
struct Played {
    kind: &'static str,
    observe: Observe,
    owned: &'static [&'static str],
}

const PLAYED: [Played; 3] = [
    Played {
        kind: "Deployment",
        observe,
        owned: &OWNED,
    },
    Played {
        kind: "DaemonSet",
        observe: observe_daemon_set,
        owned: &OWNED_BY_DAEMON_SETS,
    },
    Played {
        kind: "ReplicaSet",
        observe: observe_replica_set,
        owned: &OWNED_BY_REPLICA_SETS,
    },
];

async fn run(server: Arc<KubeServer>, namespace: String, readinesses: Readinesses) {
    let mut known: BTreeMap<String, Pods> = BTreeMap::new();
    loop {
        let now = Instant::now();
        let mut seen = BTreeMap::new();
        for played in &PLAYED {
            for object in server.list("apps/v1", played.kind, &namespace) {
                let Some(uid) = object
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                else {
                    continue;
                };
                let name = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let readiness = readinesses.of(name);
                let (pods, status) = (played.observe)(known.remove(&uid), &object, readiness, now);
                if !reported_fields(&object, &status, played.owned) {
                    let namespace = object
                        .pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    // An object deleted meanwhile has nothing to report.
                    let _ = server.merge_patch(
                        "apps/v1",
                        played.kind,
                        namespace,
                        name,
                        &json!({"status": status}),
                        true,
                    );
                }
                seen.insert(uid, pods);
            }
        }
        // Objects gone are forgotten (a new one with the same name has another uid).
        known = seen;
        // A controller's resync period, not a synchronisation: tests wait on conditions.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(generation: i64, replicas: i64, image: &str) -> Value {
        json!({
            "metadata": {"name": "app", "generation": generation},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"image": image}]}}},
        })
    }

    fn counts(status: &Map<String, Value>) -> (i64, i64, i64) {
        let n = |field: &str| status.get(field).and_then(Value::as_i64).unwrap_or(0);
        (
            n("availableReplicas"),
            n("updatedReplicas"),
            n("observedGeneration"),
        )
    }

    #[test]
    fn a_new_deployment_becomes_available_after_the_delay() {
        let start = Instant::now();
        let delay = Readiness::After(Duration::from_secs(5));
        let d = deployment(1, 3, "a");
        let (pods, status) = observe(None, &d, delay, start);
        assert_eq!(counts(&status), (0, 0, 1));
        assert_eq!(status["unavailableReplicas"], 3);
        assert_eq!(status["replicas"], 3);
        let (pods, status) = observe(Some(pods), &d, delay, start + Duration::from_secs(4));
        assert_eq!(counts(&status), (0, 0, 1));
        let (_, status) = observe(Some(pods), &d, delay, start + Duration::from_secs(5));
        assert_eq!(counts(&status), (3, 3, 1));
        assert_eq!(status["unavailableReplicas"], Value::Null);
    }

    #[test]
    fn instant_reports_everything_at_once() {
        let (_, status) = observe(
            None,
            &deployment(1, 2, "a"),
            Readiness::Instant,
            Instant::now(),
        );
        assert_eq!(counts(&status), (2, 2, 1));
        assert_eq!(status["readyReplicas"], 2);
    }

    #[test]
    fn a_rolling_update_keeps_the_old_pods_serving() {
        let start = Instant::now();
        let delay = Readiness::After(Duration::from_secs(5));
        let (pods, _) = observe(None, &deployment(1, 2, "a"), Readiness::Instant, start);
        let later = start + Duration::from_secs(60);
        let (pods, status) = observe(Some(pods), &deployment(2, 2, "b"), delay, later);
        assert_eq!(counts(&status), (2, 0, 2));
        // Scaled down meanwhile: at once, and the old pods are capped.
        let (pods, status) = observe(
            Some(pods),
            &deployment(3, 1, "b"),
            delay,
            later + Duration::from_secs(1),
        );
        assert_eq!(counts(&status), (1, 0, 3));
        let (_, status) = observe(
            Some(pods),
            &deployment(3, 1, "b"),
            delay,
            later + Duration::from_secs(5),
        );
        assert_eq!(counts(&status), (1, 1, 3));
    }

    #[test]
    fn scaling_up_waits_and_scaling_down_does_not() {
        let start = Instant::now();
        let delay = Readiness::After(Duration::from_secs(5));
        let (pods, _) = observe(None, &deployment(1, 2, "a"), Readiness::Instant, start);
        let (pods, status) = observe(Some(pods), &deployment(2, 4, "a"), delay, start);
        assert_eq!(counts(&status), (2, 2, 2));
        let (pods, status) = observe(
            Some(pods),
            &deployment(2, 4, "a"),
            delay,
            start + Duration::from_secs(5),
        );
        assert_eq!(counts(&status), (4, 4, 2));
        let (_, status) = observe(Some(pods), &deployment(3, 1, "a"), delay, start);
        assert_eq!(counts(&status), (1, 1, 3));
    }

    #[test]
    fn never_keeps_new_pods_unavailable() {
        let start = Instant::now();
        let (pods, _) = observe(None, &deployment(1, 2, "a"), Readiness::Never, start);
        let (pods, status) = observe(
            Some(pods),
            &deployment(1, 2, "a"),
            Readiness::Never,
            start + Duration::from_secs(3600),
        );
        assert_eq!(counts(&status), (0, 0, 1));
        // Made available, then a new template that never comes up.
        let (pods, _) = observe(
            Some(pods),
            &deployment(1, 2, "a"),
            Readiness::Instant,
            start,
        );
        let (_, status) = observe(
            Some(pods),
            &deployment(2, 2, "b"),
            Readiness::Never,
            start + Duration::from_secs(3600),
        );
        assert_eq!(counts(&status), (2, 0, 2));
    }

    fn replica_set(generation: i64, replicas: Option<i64>, image: &str) -> Value {
        let mut rs = json!({
            "metadata": {"name": "app-abc", "generation": generation},
            "spec": {"template": {"spec": {"containers": [{"image": image}]}}},
        });
        if let Some(replicas) = replicas {
            rs["spec"]["replicas"] = json!(replicas);
        }
        rs
    }

    #[test]
    fn a_replica_set_scales_up_after_the_delay_and_down_at_once() {
        let start = Instant::now();
        let delay = Readiness::After(Duration::from_secs(5));
        let (pods, status) = observe_replica_set(None, &replica_set(1, Some(3), "a"), delay, start);
        assert_eq!(status["replicas"], 3);
        assert_eq!(status["fullyLabeledReplicas"], 3);
        assert_eq!(status["availableReplicas"], Value::Null);
        assert_eq!(status["readyReplicas"], Value::Null);
        assert_eq!(status["observedGeneration"], 1);
        let later = start + Duration::from_secs(5);
        let (pods, status) =
            observe_replica_set(Some(pods), &replica_set(1, Some(3), "a"), delay, later);
        assert_eq!(status["availableReplicas"], 3);
        assert_eq!(status["readyReplicas"], 3);
        // A new template replaces no pod.
        let (pods, status) =
            observe_replica_set(Some(pods), &replica_set(2, Some(3), "b"), delay, later);
        assert_eq!(status["availableReplicas"], 3);
        assert_eq!(status["observedGeneration"], 2);
        // Up: the new pods wait; down: at once; to zero: replicas stays, the rest goes.
        let (pods, status) =
            observe_replica_set(Some(pods), &replica_set(3, Some(5), "b"), delay, later);
        assert_eq!(
            (
                status["replicas"].clone(),
                status["availableReplicas"].clone()
            ),
            (json!(5), json!(3))
        );
        let (pods, status) =
            observe_replica_set(Some(pods), &replica_set(4, Some(1), "b"), delay, later);
        assert_eq!(status["availableReplicas"], 1);
        let (_, status) =
            observe_replica_set(Some(pods), &replica_set(5, Some(0), "b"), delay, later);
        assert_eq!(status["replicas"], 0);
        for field in ["fullyLabeledReplicas", "readyReplicas", "availableReplicas"] {
            assert_eq!(status[field], Value::Null, "{field}");
        }
        // Without spec.replicas: one.
        let (_, status) =
            observe_replica_set(None, &replica_set(1, None, "a"), Readiness::Instant, start);
        assert_eq!(status["availableReplicas"], 1);
    }

    fn daemon_set(generation: i64, node_selector: Value, image: &str) -> Value {
        json!({
            "metadata": {"name": "ds", "generation": generation},
            "spec": {"template": {"spec": {"nodeSelector": node_selector,
                "containers": [{"image": image}]}}},
        })
    }

    fn ds_counts(status: &Map<String, Value>) -> (i64, i64, i64) {
        let n = |field: &str| status.get(field).and_then(Value::as_i64).unwrap_or(0);
        (
            n("desiredNumberScheduled"),
            n("updatedNumberScheduled"),
            n("numberAvailable"),
        )
    }

    #[test]
    fn a_daemon_set_runs_on_the_nodes_its_selector_matches() {
        let now = Instant::now();
        for (selector, desired) in [
            (Value::Null, 3),
            (json!({"kubernetes.io/os": "linux"}), 3),
            (json!({"kubernetes.io/hostname": "node-2"}), 1),
            (json!({"flagger.app/scale-to-zero": "true"}), 0),
            (
                json!({"kubernetes.io/os": "linux", "flagger.app/scale-to-zero": "true"}),
                0,
            ),
        ] {
            let (_, status) = observe_daemon_set(
                None,
                &daemon_set(1, selector.clone(), "a"),
                Readiness::Instant,
                now,
            );
            assert_eq!(
                ds_counts(&status),
                (desired, desired, desired),
                "{selector}"
            );
            // The counts the API requires are there even at 0.
            for field in [
                "desiredNumberScheduled",
                "currentNumberScheduled",
                "numberReady",
                "numberMisscheduled",
            ] {
                assert!(status[field].is_number(), "{field}");
            }
        }
    }

    #[test]
    fn a_daemon_set_scaled_to_zero_and_back_waits_for_its_pods() {
        let start = Instant::now();
        let delay = Readiness::After(Duration::from_secs(3));
        let (pods, status) =
            observe_daemon_set(None, &daemon_set(1, Value::Null, "a"), delay, start);
        assert_eq!(ds_counts(&status), (3, 0, 0));
        assert_eq!(status["numberUnavailable"], 3);
        let later = start + Duration::from_secs(3);
        let (pods, status) =
            observe_daemon_set(Some(pods), &daemon_set(1, Value::Null, "a"), delay, later);
        assert_eq!(ds_counts(&status), (3, 3, 3));
        assert_eq!(status["numberUnavailable"], Value::Null);
        // To zero: at once.
        let zero = json!({"flagger.app/scale-to-zero": "true"});
        let (pods, status) =
            observe_daemon_set(Some(pods), &daemon_set(2, zero, "b"), delay, later);
        assert_eq!(ds_counts(&status), (0, 0, 0));
        assert_eq!(status["observedGeneration"], 2);
        // Back up: after the delay.
        let (pods, status) =
            observe_daemon_set(Some(pods), &daemon_set(3, Value::Null, "b"), delay, later);
        assert_eq!(ds_counts(&status), (3, 0, 0));
        let (_, status) = observe_daemon_set(
            Some(pods),
            &daemon_set(3, Value::Null, "b"),
            delay,
            later + Duration::from_secs(3),
        );
        assert_eq!(ds_counts(&status), (3, 3, 3));
    }

    #[test]
    fn a_daemon_sets_rolling_update_keeps_the_old_pods_serving() {
        let start = Instant::now();
        let (pods, _) = observe_daemon_set(
            None,
            &daemon_set(1, Value::Null, "a"),
            Readiness::Instant,
            start,
        );
        let (pods, status) = observe_daemon_set(
            Some(pods),
            &daemon_set(2, Value::Null, "b"),
            Readiness::Never,
            start,
        );
        assert_eq!(ds_counts(&status), (3, 0, 3));
        let (_, status) = observe_daemon_set(
            Some(pods),
            &daemon_set(2, Value::Null, "b"),
            Readiness::Never,
            start + Duration::from_secs(3600),
        );
        assert_eq!(ds_counts(&status), (3, 0, 3));
    }
}
