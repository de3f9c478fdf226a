//! One reconcile of an Argo Rollout, as a pure function: what weir's operator does with a
//! Rollout's ReplicaSets, Services and AnalysisRuns, and the status it writes, following Argo
//! Rollouts v1.9.1 (`rollout/canary.go`, `rollout/bluegreen.go`, `rollout/sync.go`,
//! `utils/rollout/rolloututil.go`).
//!
//! The shell reads the Rollout, the ReplicaSets and AnalysisRuns it owns and the time, calls
//! [`reconcile`], and carries out the [`Action`]s in order, then writes [`Sync::status`]. Every
//! decision is level-based (it depends on what is observed, not on what was done last), so a
//! reconcile repeated after a crash does the same thing again or nothing.
//!
//! What runs: the canary strategy (`setWeight`, `pause` with and without a duration,
//! `analysis` steps, background analysis, the canary and stable Services pointed at their
//! ReplicaSets), without traffic routing (ReplicaSets sized by weight with
//! [`super::replicas::basic_canary`]) or with it ([`Action::RouteTraffic`] for istio, nginx,
//! smi and the Gateway API plugin, ReplicaSets sized by
//! [`super::replicas::traffic_routed_canary`], `setCanaryScale`, the old stable kept for
//! `scaleDownDelaySeconds` and an aborted canary for `abortScaleDownDelaySeconds`); and
//! blue-green (preview and active Services, `previewReplicaCount`, `autoPromotionEnabled`,
//! `autoPromotionSeconds`, pre- and post-promotion analysis, `scaleDownDelaySeconds`,
//! `abortScaleDownDelaySeconds`). The user's verbs arrive as the fields `kubectl argo rollouts`
//! patches: `spec.paused`, `status.pauseConditions`, `status.abort`, `status.promoteFull`,
//! `status.currentStepIndex`. `experiment` steps create an Experiment (run by its own controller)
//! and wait for its phase; `setHeaderRoute` and `setMirrorRoute` write managed routes (Istio, the
//! Gateway API plugin), removed again once the Rollout is promoted or aborted. What does not run
//! yet (other routers, experiments' traffic weights, step plugins) is refused by [`unsupported`] with the field named, and the
//! Rollout is Degraded with `InvalidSpec`. The annotation `weir.dev/promote-on: health` opts a
//! Rollout into weir's evidence rule: it is promoted only once an analysis of the new revision has
//! succeeded (Argo promotes at the end of the steps without one).
//!
//! One difference from Argo: the pod template hash. Argo hashes Go's JSON encoding of the
//! template; weir hashes its canonical JSON (keys sorted) the same way (FNV-32a, Kubernetes'
//! safe encoding), so names look alike but differ from Argo's for the same template.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::analysis::Phase;
use super::replicas::{
    self, BasicCanary, CanaryPosition, Desired, Fenceposts, ReplicaSetCounts, StableReplicaSet,
    TrafficRoutedCanary,
};
use super::types::{BlueGreenStrategy, CanaryStrategy, IntOrString, Rollout, RolloutAnalysis};
use crate::units::GoDuration;

/// The label that ties a ReplicaSet, its pods and the Services to one pod template.
pub const POD_TEMPLATE_HASH_LABEL: &str = "rollouts-pod-template-hash";
/// The annotation of a ReplicaSet (and a Rollout) with its revision.
pub const REVISION_ANNOTATION: &str = "rollout.argoproj.io/revision";
/// The annotation of an old ReplicaSet whose scale-down waits: when it may go (RFC 3339).
pub const SCALE_DOWN_DEADLINE_ANNOTATION: &str = "scale-down-deadline";
/// The annotation a Service edited by a Rollout carries: the Rollout's name.
pub const MANAGED_BY_ANNOTATION: &str = "argo-rollouts.argoproj.io/managed-by-rollouts";
/// The router plugin weir's operator runs (Argo's Gateway API plugin).
pub const GATEWAY_API_PLUGIN: &str = "argoproj-labs/gatewayAPI";
/// Argo's default `scaleDownDelaySeconds` and `abortScaleDownDelaySeconds` for blue-green.
pub const DEFAULT_SCALE_DOWN_DELAY_SECONDS: i64 = 30;
/// Argo's default `progressDeadlineSeconds`.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i64 = 600;
/// Argo's default `revisionHistoryLimit`: old ReplicaSets kept.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i64 = 10;
/// Argo's default `successfulRunHistoryLimit` and `unsuccessfulRunHistoryLimit`.
pub const DEFAULT_RUN_HISTORY_LIMIT: i64 = 5;
/// How soon a Rollout waiting on something that changes by itself is looked at again.
pub const POLL: SignedDuration = SignedDuration::from_secs(1);

/// A ReplicaSet the Rollout owns, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSetView {
    /// `metadata.name`.
    pub name: String,
    /// Its `rollouts-pod-template-hash` label.
    pub hash: String,
    /// Its `rollout.argoproj.io/revision` annotation (0 when absent).
    pub revision: i64,
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

impl ReplicaSetView {
    fn counts(&self) -> ReplicaSetCounts {
        ReplicaSetCounts {
            replicas: self.replicas,
            available: self.available,
        }
    }

    fn saturated(&self, want: i64) -> bool {
        self.replicas == want && self.available >= want
    }
}

/// An AnalysisRun the Rollout owns, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunView {
    /// `metadata.name`.
    pub name: String,
    /// `status.phase` (absent: not started).
    pub phase: Option<Phase>,
    /// `status.message`.
    pub message: String,
    /// `spec.terminate`.
    pub terminating: bool,
    /// `metadata.creationTimestamp`, for keeping the newest when old runs are deleted.
    pub created: Option<Timestamp>,
}

/// What a reconcile sees.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The Rollout (its `status` is read through [`Observed::status`]).
    pub rollout: &'a Rollout,
    /// `metadata.generation`.
    pub generation: i64,
    /// The status as stored.
    pub status: Status,
    /// The pod template to run (`spec.template`, or the `workloadRef` Deployment's).
    pub template: &'a Value,
    /// The ReplicaSets it owns.
    pub replica_sets: &'a [ReplicaSetView],
    /// The AnalysisRuns it owns.
    pub runs: &'a [RunView],
    /// The Experiments it owns (their phases read as a run's).
    pub experiments: &'a [RunView],
    /// Now.
    pub now: Timestamp,
}

/// A run's role, as its `rollout-type` label says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// An `analysis` step (its index).
    Step(usize),
    /// `strategy.canary.analysis`.
    Background,
    /// `prePromotionAnalysis`.
    PrePromotion,
    /// `postPromotionAnalysis`.
    PostPromotion,
}

impl RunKind {
    /// The `rollout-type` label's value.
    pub fn label(self) -> &'static str {
        match self {
            RunKind::Step(_) => "Step",
            RunKind::Background => "Background",
            RunKind::PrePromotion => "PrePromotion",
            RunKind::PostPromotion => "PostPromotion",
        }
    }
}

/// What the shell does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create ReplicaSet `name` for the current template, labelled with `hash`.
    CreateReplicaSet {
        /// `<rollout>-<hash>`.
        name: String,
        /// The pod template hash.
        hash: String,
        /// Its revision.
        revision: i64,
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
    /// Create an AnalysisRun from `analysis` (the shell resolves templates and arguments).
    CreateRun {
        /// Its name.
        name: String,
        /// Its role.
        kind: RunKind,
        /// The analysis it runs.
        analysis: RolloutAnalysis,
        /// The pod template hash of the ReplicaSet it judges.
        hash: String,
        /// The Rollout's revision.
        revision: i64,
    },
    /// Scale the `workloadRef` Deployment (`scaleDown: onsuccess | progressively`).
    ScaleWorkload {
        /// Its new `spec.replicas`.
        replicas: i64,
    },
    /// Create the Experiment of step `step_index` (the shell builds it with
    /// [`super::experiment::experiment_for_step`], which names it as `name` is).
    CreateExperiment {
        /// `<rollout>-<hash>-<revision>-<step>`.
        name: String,
        /// The experiment step.
        step_index: usize,
    },
    /// Set `spec.terminate` on an Experiment no longer needed.
    TerminateExperiment {
        /// The Experiment.
        name: String,
    },
    /// Delete an old ReplicaSet beyond `revisionHistoryLimit`.
    DeleteReplicaSet {
        /// The ReplicaSet.
        name: String,
    },
    /// Delete a finished run beyond `spec.analysis.(un)successfulRunHistoryLimit`.
    DeleteRun {
        /// The run.
        name: String,
    },
    /// Set `spec.terminate` on a run no longer needed.
    TerminateRun {
        /// The run.
        name: String,
    },
    /// Set the routers' weights (`trafficRouting`): `canary` + `stable` is the weight scale.
    RouteTraffic {
        /// To the canary Service.
        canary: i64,
        /// To the stable Service.
        stable: i64,
    },
    /// Write (or, without `match`, remove) a managed header route (`setHeaderRoute`).
    SetHeaderRoute(super::types::SetHeaderRoute),
    /// Write (or, without `match`, remove) a managed mirror route (`setMirrorRoute`).
    SetMirrorRoute(super::types::SetMirrorRoute),
    /// Remove every managed route: the Rollout is promoted, aborted, promoted fully, or its
    /// canary has no pods.
    RemoveManagedRoutes,
    /// Point a Service's selector at the pods of `hash`.
    PointService {
        /// The Service.
        service: String,
        /// The pod template hash.
        hash: String,
    },
}

/// A Kubernetes Event to record on the Rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `Normal` or `Warning`.
    pub warning: bool,
    /// Argo's reason (`RolloutStepCompleted`, ...).
    pub reason: &'static str,
    /// The message.
    pub message: String,
}

/// The result of one reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct Sync {
    /// What to do, in order.
    pub actions: Vec<Action>,
    /// The status to write.
    pub status: Status,
    /// Events to record.
    pub events: Vec<Event>,
    /// When to look again even if nothing changes (a timed pause, a delay, pods to wait for).
    pub requeue_after: Option<SignedDuration>,
}

/// `status.pauseConditions[]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseCondition {
    /// `CanaryPauseStep`, `BlueGreenPause`, `InconclusiveAnalysisRun`.
    pub reason: String,
    /// RFC 3339.
    pub start_time: String,
}

/// A run's summary in the Rollout's status.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RunStatus {
    /// The run's name.
    pub name: String,
    /// Its phase.
    pub status: String,
    /// Its message.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// One side of `status.canary.weights`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WeightDestination {
    /// The weight written.
    pub weight: i64,
    /// The Service it goes to.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_name: String,
    /// The pods behind it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pod_template_hash: String,
}

/// `status.canary.weights`: what the routers were last told.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TrafficWeights {
    /// The canary side.
    pub canary: WeightDestination,
    /// The stable side.
    pub stable: WeightDestination,
}

/// `status.canary`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CanaryStatus {
    /// The weights written to the routers (traffic routing only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights: Option<TrafficWeights>,
    /// The current step's run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_step_analysis_run_status: Option<RunStatus>,
    /// The background run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_background_analysis_run_status: Option<RunStatus>,
    /// The current step's Experiment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_experiment: Option<String>,
}

/// `status.blueGreen`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BlueGreenStatus {
    /// The hash the active Service selects.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub active_selector: String,
    /// The hash the preview Service selects.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub preview_selector: String,
    /// The pre-promotion run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_promotion_analysis_run_status: Option<RunStatus>,
    /// The post-promotion run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_promotion_analysis_run_status: Option<RunStatus>,
    /// The preview was scaled up to `spec.replicas` after its pause.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub scale_up_preview_check_point: bool,
}

/// A condition in `status.conditions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Progressing`, `Available`, `Completed`, `Healthy`, `Paused`, `InvalidSpec`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Why.
    pub reason: String,
    /// What.
    pub message: String,
    /// When it last changed status.
    #[serde(default)]
    pub last_transition_time: String,
    /// When it was last written.
    #[serde(default)]
    pub last_update_time: String,
}

/// The part of a Rollout's `status` weir keeps, in Argo's shape.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Status {
    /// `metadata.generation` seen, as a string (as Argo writes it).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub observed_generation: String,
    /// `Progressing`, `Paused`, `Healthy`, `Degraded`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Why the phase.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The hash of the template to run.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub current_pod_hash: String,
    /// The hash of the stable ReplicaSet ("" before the first deploy completes).
    #[serde(rename = "stableRS", skip_serializing_if = "String::is_empty")]
    pub stable_rs: String,
    /// The step being run (canary with steps).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_step_index: Option<i64>,
    /// The hash of the steps.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub current_step_hash: String,
    /// Pods of every ReplicaSet.
    #[serde(skip_serializing_if = "is_zero")]
    pub replicas: i64,
    /// Pods of the current template.
    #[serde(skip_serializing_if = "is_zero")]
    pub updated_replicas: i64,
    /// Ready pods.
    #[serde(skip_serializing_if = "is_zero")]
    pub ready_replicas: i64,
    /// Available pods (blue-green: of the active ReplicaSet).
    #[serde(skip_serializing_if = "is_zero")]
    pub available_replicas: i64,
    /// What an autoscaler reads.
    #[serde(rename = "HPAReplicas", skip_serializing_if = "is_zero")]
    pub hpa_replicas: i64,
    /// The pods' label selector, as text.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub selector: String,
    /// Why the controller paused.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pause_conditions: Vec<PauseCondition>,
    /// The controller owns a pause (a user's promote removes the condition, not this).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub controller_pause: bool,
    /// Aborted (by a user or a failed analysis).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub abort: bool,
    /// When it was aborted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aborted_at: Option<String>,
    /// A user asked to promote fully.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub promote_full: bool,
    /// The `spec.restartAt` whose restart is done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restarted_at: Option<String>,
    /// The canary's runs.
    #[serde(skip_serializing_if = "is_default")]
    pub canary: CanaryStatus,
    /// Blue-green's Services and runs.
    #[serde(skip_serializing_if = "is_default")]
    pub blue_green: BlueGreenStatus,
    /// Conditions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

impl Status {
    /// Reads a stored `status` (absent or unreadable fields take their defaults: a status is
    /// recomputed from what is observed every time).
    pub fn read(status: Option<&Value>) -> Status {
        status
            .and_then(|status| serde_json::from_value(status.clone()).ok())
            .unwrap_or_default()
    }

    /// The status as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    fn paused_for(&self, reason: &str) -> Option<&PauseCondition> {
        self.pause_conditions
            .iter()
            .find(|condition| condition.reason == reason)
    }

    fn add_pause(&mut self, reason: &str, now: Timestamp) {
        if self.paused_for(reason).is_none() {
            self.pause_conditions.push(PauseCondition {
                reason: reason.to_string(),
                start_time: now.to_string(),
            });
        }
        self.controller_pause = true;
    }

    fn clear_pauses(&mut self) {
        self.pause_conditions.clear();
        self.controller_pause = false;
    }
}

/// The first field of `rollout` weir's operator does not run yet, with why; `None`: it runs.
pub fn unsupported(rollout: &Rollout) -> Option<String> {
    let strategy = rollout.spec.strategy.as_ref();
    if let Some(canary) = strategy.and_then(|strategy| strategy.canary.as_deref()) {
        if let Some(routing) = &canary.traffic_routing {
            let others = [
                ("alb", routing.alb.is_some()),
                ("ambassador", routing.ambassador.is_some()),
                ("apisix", routing.apisix.is_some()),
                ("appMesh", routing.app_mesh.is_some()),
                ("traefik", routing.traefik.is_some()),
            ];
            if let Some((field, _)) = others.iter().find(|(_, used)| *used) {
                return Some(format!(
                    "spec.strategy.canary.trafficRouting.{field}: not run by weir's operator \
                     (it routes with istio, nginx, smi and the argoproj-labs/gatewayAPI plugin)"
                ));
            }
            if let Some(name) = routing
                .plugins
                .iter()
                .flat_map(|plugins| plugins.keys())
                .find(|name| name.as_str() != GATEWAY_API_PLUGIN)
            {
                return Some(format!(
                    "spec.strategy.canary.trafficRouting.plugins.{name}: not run by weir's \
                     operator (of the router plugins it runs {GATEWAY_API_PLUGIN})"
                ));
            }
            if canary.canary_service.is_none() || canary.stable_service.is_none() {
                return Some(
                    "spec.strategy.canary: Canary service and Stable service must to be set to \
                     use Traffic Routing"
                        .into(),
                );
            }
        }
        for (index, step) in canary.steps.iter().flatten().enumerate() {
            let weighted = step.experiment.as_ref().is_some_and(|experiment| {
                experiment
                    .templates
                    .iter()
                    .any(|template| template.weight.is_some())
            });
            let field = if weighted {
                "experiment.templates[].weight"
            } else if step.set_canary_scale.is_some() && canary.traffic_routing.is_none() {
                "setCanaryScale"
            } else if step.set_header_route.is_some() && canary.traffic_routing.is_none() {
                "setHeaderRoute"
            } else if step.set_mirror_route.is_some() && canary.traffic_routing.is_none() {
                "setMirrorRoute"
            } else if step.plugin.is_some() {
                "plugin"
            } else {
                continue;
            };
            return Some(format!(
                "spec.strategy.canary.steps[{index}].{field}: not run by weir's operator yet \
                 (it runs setWeight, pause, analysis, experiment without weights and, with \
                 trafficRouting, setCanaryScale, setHeaderRoute and setMirrorRoute steps)"
            ));
        }
    }
    if rollout.spec.template.is_none() && rollout.spec.workload_ref.is_none() {
        return Some("spec.template: Required value".into());
    }
    None
}

/// The hash of a pod template: FNV-32a over its canonical JSON (and the collision count), as
/// decimal text through Kubernetes' `SafeEncodeString`.
pub fn pod_template_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut bytes = Vec::new();
    canonical_json(template, &mut bytes);
    if let Some(count) = collision_count {
        let count = u32::try_from(count).unwrap_or(0);
        bytes.extend_from_slice(&count.to_le_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 0]);
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// The hash of a canary's steps (`status.currentStepHash`): a change of steps restarts the
/// update. Taken over the steps' typed form, so formatting and key order do not count.
pub fn steps_hash(steps: Option<&[super::types::CanaryStep]>) -> String {
    match steps {
        Some(steps) => safe_encode(&fnv32a(format!("{steps:?}").as_bytes()).to_string()),
        None => String::new(),
    }
}

fn fnv32a(bytes: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in bytes {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// Kubernetes' `rand.SafeEncodeString`: each byte mapped into an alphabet without vowels (so no
/// words) and without easily confused characters.
fn safe_encode(text: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    text.bytes()
        .map(|byte| char::from(ALPHABET[usize::from(byte) % ALPHABET.len()]))
        .collect()
}

/// JSON with object keys sorted at every level, whatever order the map keeps.
fn canonical_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            out.push(b'{');
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Value::String(key.clone()).to_string().as_bytes());
                out.push(b':');
                if let Some(item) = map.get(key) {
                    canonical_json(item, out);
                }
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                canonical_json(item, out);
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

/// A Rollout that cannot run: Degraded with `InvalidSpec`, nothing changed.
pub fn invalid(observed: &Observed<'_>, message: &str) -> Sync {
    let mut status = observed.status.clone();
    status.observed_generation = observed.generation.to_string();
    let name = observed.rollout.metadata.name.as_deref().unwrap_or("");
    let text = format!("The Rollout \"{name}\" is invalid: {message}");
    set_condition(
        &mut status,
        "InvalidSpec",
        "True",
        "InvalidSpec",
        &text,
        observed.now,
    );
    status.phase = "Degraded".into();
    status.message = format!("InvalidSpec: {text}");
    Sync {
        actions: Vec::new(),
        status,
        events: Vec::new(),
        requeue_after: None,
    }
}

/// The working state of one reconcile.
struct Pass<'a> {
    observed: &'a Observed<'a>,
    name: &'a str,
    replicas: i64,
    hash: String,
    status: Status,
    actions: Vec<Action>,
    events: Vec<Event>,
    requeue: Option<SignedDuration>,
    /// Why this reconcile aborted, for the condition's message.
    abort_reason: Option<String>,
    /// Promotion waits for evidence (`weir.dev/promote-on: health`).
    awaiting_evidence: bool,
}

impl Pass<'_> {
    fn event(&mut self, warning: bool, reason: &'static str, message: String) {
        self.events.push(Event {
            warning,
            reason,
            message,
        });
    }

    fn requeue(&mut self, after: SignedDuration) {
        let after = after.max(SignedDuration::from_millis(100));
        self.requeue = Some(self.requeue.map_or(after, |current| current.min(after)));
    }

    fn rs(&self, hash: &str) -> Option<&ReplicaSetView> {
        self.observed
            .replica_sets
            .iter()
            .find(|rs| rs.hash == hash && !hash.is_empty())
    }

    fn run(&self, name: &str) -> Option<&RunView> {
        self.observed.runs.iter().find(|run| run.name == name)
    }

    fn revision(&self) -> i64 {
        self.rs(&self.hash).map_or(0, |rs| rs.revision)
    }

    fn scale(&mut self, rs: &ReplicaSetView, to: i64) -> bool {
        if rs.replicas == to {
            return false;
        }
        let direction = if to > rs.replicas { "up" } else { "down" };
        self.event(
            false,
            "ScalingReplicaSet",
            format!(
                "Scaled {direction} ReplicaSet {} (revision {}) from {} to {to}",
                rs.name, rs.revision, rs.replicas
            ),
        );
        self.actions.push(Action::ScaleReplicaSet {
            name: rs.name.clone(),
            from: rs.replicas,
            to,
        });
        if to > rs.replicas && rs.scale_down_deadline.is_some() {
            // Wanted again: an old deadline must not take it down later.
            self.actions.push(Action::ScaleDownDeadline {
                name: rs.name.clone(),
                deadline: None,
            });
        }
        true
    }

    /// The run for `kind` named with `prefix`: the one the status names if it still exists,
    /// else a new one (with `.1`, `.2` ... when an older run holds the name, as after a retry).
    /// Returns its name and phase (None: just created).
    fn ensure_run(
        &mut self,
        current: Option<&RunStatus>,
        prefix: &str,
        kind: RunKind,
        analysis: &RolloutAnalysis,
    ) -> (String, Option<Phase>, String) {
        if let Some(current) = current
            && (current.name == prefix || current.name.starts_with(&format!("{prefix}.")))
            && let Some(run) = self.run(&current.name)
        {
            return (run.name.clone(), run.phase, run.message.clone());
        }
        let mut name = prefix.to_string();
        let mut suffix = 0;
        while self.run(&name).is_some() {
            suffix += 1;
            name = format!("{prefix}.{suffix}");
        }
        self.actions.push(Action::CreateRun {
            name: name.clone(),
            kind,
            analysis: analysis.clone(),
            hash: self.hash.clone(),
            revision: self.revision(),
        });
        (name, None, String::new())
    }

    fn abort(&mut self, reason: String) {
        if !self.status.abort {
            self.event(true, "RolloutAborted", reason.clone());
        }
        self.status.abort = true;
        self.abort_reason = Some(reason);
    }
}

/// One reconcile of a Rollout that [`unsupported`] accepts.
pub fn reconcile(observed: &Observed<'_>) -> Sync {
    let rollout = observed.rollout;
    let name = rollout.metadata.name.as_deref().unwrap_or("");
    let mut pass = Pass {
        observed,
        name,
        replicas: replicas::spec_replicas(rollout.spec.replicas).max(0),
        hash: pod_template_hash(observed.template, None),
        status: observed.status.clone(),
        actions: Vec::new(),
        events: Vec::new(),
        requeue: None,
        abort_reason: None,
        awaiting_evidence: false,
    };
    pass.status.observed_generation = observed.generation.to_string();
    pass.status.conditions.retain(|c| c.kind != "InvalidSpec");
    let strategy = rollout.spec.strategy.clone().unwrap_or_default();
    let step_count = strategy
        .canary
        .as_ref()
        .map_or(0, |canary| canary.steps.as_ref().map_or(0, Vec::len));
    let steps_hash = strategy
        .canary
        .as_ref()
        .map_or_else(String::new, |canary| steps_hash(canary.steps.as_deref()));
    // A new template or new steps: a new update starts from the first step.
    if pass.status.current_pod_hash != pass.hash || pass.status.current_step_hash != steps_hash {
        let back_to_stable = pass.hash == pass.status.stable_rs;
        pass.status.current_pod_hash = pass.hash.clone();
        pass.status.current_step_hash = steps_hash;
        pass.status.clear_pauses();
        pass.status.abort = false;
        pass.status.aborted_at = None;
        pass.status.promote_full = false;
        pass.status.canary = CanaryStatus::default();
        pass.status.blue_green.pre_promotion_analysis_run_status = None;
        pass.status.blue_green.post_promotion_analysis_run_status = None;
        pass.status.blue_green.scale_up_preview_check_point = false;
        pass.status.current_step_index = (step_count > 0).then_some(0);
        if back_to_stable && step_count > 0 {
            pass.status.current_step_index = Some(step_count as i64);
            pass.event(
                false,
                "SkipSteps",
                "Rollback to stable ReplicaSets".to_string(),
            );
        }
    }
    // The ReplicaSet of the template comes first; everything else waits for it.
    if pass.rs(&pass.hash).is_none() {
        let revision = observed
            .replica_sets
            .iter()
            .map(|rs| rs.revision)
            .max()
            .unwrap_or(0)
            + 1;
        let rs_name = format!("{name}-{}", pass.hash);
        pass.event(
            false,
            "NewReplicaSetCreated",
            format!("Created ReplicaSet {rs_name} (revision {revision})"),
        );
        pass.actions.push(Action::CreateReplicaSet {
            name: rs_name,
            hash: pass.hash.clone(),
            revision,
        });
        pass.requeue(SignedDuration::from_millis(200));
        return pass.finish(&strategy);
    }
    // A retry: the user cleared `abort`.
    if !pass.status.abort && pass.status.aborted_at.is_some() {
        pass.status.aborted_at = None;
        pass.status.canary = CanaryStatus::default();
        pass.status.blue_green.pre_promotion_analysis_run_status = None;
        pass.status.blue_green.post_promotion_analysis_run_status = None;
        pass.status.current_step_index = (step_count > 0).then_some(0);
        set_condition(
            &mut pass.status,
            "Progressing",
            "Unknown",
            "RolloutRetry",
            "Retrying Rollout after abort",
            observed.now,
        );
    }
    if let Some(canary) = strategy.canary.as_deref() {
        canary_pass(&mut pass, canary, step_count);
    } else if let Some(blue_green) = strategy.blue_green.as_deref() {
        blue_green_pass(&mut pass, blue_green);
    }
    pass.finish(&strategy)
}

impl Pass<'_> {
    /// weir's evidence rule, which the annotation `weir.dev/promote-on: health` opts into (as
    /// for a Flagger Canary): the end of the steps, or a blue-green switch, promotes only once an
    /// analysis of this revision (a step's or a pre-promotion one) has ended Successful. Argo
    /// promotes without one. A user's full promotion is not held back.
    fn lacks_evidence(&mut self) -> bool {
        let wanted = self
            .observed
            .rollout
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(super::PROMOTE_ON_ANNOTATION))
            .is_some_and(|value| value == "health");
        if !wanted || self.status.promote_full {
            return false;
        }
        let prefix = format!("{}-{}-", self.name, self.hash);
        let evidence = self
            .observed
            .runs
            .iter()
            .any(|run| run.name.starts_with(&prefix) && run.phase == Some(Phase::Successful));
        if !evidence {
            self.awaiting_evidence = true;
            self.requeue(POLL);
        }
        !evidence
    }

    fn paused_by_user(&self) -> bool {
        self.observed.rollout.spec.paused == Some(true)
    }

    /// Aborted now (it may have been before): the time, the condition and the first step.
    fn settle_abort(&mut self, step_count: usize) {
        if !self.status.abort {
            return;
        }
        if self.status.aborted_at.is_none() {
            self.status.aborted_at = Some(self.observed.now.to_string());
        }
        self.status.clear_pauses();
        self.status.promote_full = false;
        let at_stable = self.hash == self.status.stable_rs;
        if step_count > 0 {
            self.status.current_step_index = Some(if at_stable { step_count as i64 } else { 0 });
        }
        let revision = self.revision();
        let message = match &self.abort_reason {
            Some(reason) => format!("Rollout aborted update to revision {revision}: {reason}"),
            None => previous_abort_message(&self.status)
                .unwrap_or_else(|| format!("Rollout aborted update to revision {revision}")),
        };
        set_condition(
            &mut self.status,
            "Progressing",
            "False",
            "RolloutAborted",
            &message,
            self.observed.now,
        );
    }

    fn promote(&mut self, why: &str, step_count: usize) {
        self.status.stable_rs = self.hash.clone();
        self.status.clear_pauses();
        self.status.abort = false;
        self.status.promote_full = false;
        if step_count > 0 {
            self.status.current_step_index = Some(step_count as i64);
        }
        let revision = self.revision();
        self.event(
            false,
            "RolloutCompleted",
            format!(
                "Rollout completed update to revision {revision} ({}): {why}",
                self.hash
            ),
        );
    }
}

fn previous_abort_message(status: &Status) -> Option<String> {
    status
        .conditions
        .iter()
        .find(|c| c.kind == "Progressing" && c.reason == "RolloutAborted")
        .map(|c| c.message.clone())
}

fn canary_pass(pass: &mut Pass<'_>, canary: &CanaryStrategy, step_count: usize) {
    let replicas = pass.replicas;
    let steps = canary.steps.clone().unwrap_or_default();
    let Some(new_rs) = pass.rs(&pass.hash).cloned() else {
        return;
    };
    let stable_hash = pass.status.stable_rs.clone();
    let stable_rs = pass
        .rs(&stable_hash)
        .filter(|rs| rs.hash != new_rs.hash)
        .cloned();
    // The first deploy, or a stable ReplicaSet that is gone: the template is the stable one.
    if stable_hash.is_empty() || (stable_rs.is_none() && stable_hash != pass.hash) {
        if new_rs.replicas != replicas && !pass.paused_by_user() {
            pass.scale(&new_rs, replicas);
        }
        if new_rs.saturated(replicas) {
            pass.promote("Initial deploy", step_count);
        } else {
            pass.requeue(POLL);
        }
        point_services(pass, canary, &pass.hash.clone(), &pass.hash.clone());
        if canary.traffic_routing.is_some() {
            let hash = pass.hash.clone();
            route(pass, canary, 0, replicas::max_weight(canary), hash);
        }
        return;
    }
    let stable_hash_now = stable_rs
        .as_ref()
        .map_or(pass.hash.clone(), |rs| rs.hash.clone());
    point_services(pass, canary, &stable_hash_now, &pass.hash.clone());

    let at_stable = pass.hash == pass.status.stable_rs;
    let analyses_allowed = !at_stable && !pass.status.abort && !pass.status.promote_full;
    // Background analysis, from `startingStep`.
    let mut wanted_runs: Vec<String> = Vec::new();
    if let Some(background) = &canary.analysis
        && analyses_allowed
        && pass.status.current_step_index.unwrap_or(0) >= background.starting_step.unwrap_or(0)
    {
        let prefix = format!("{}-{}-{}", pass.name, pass.hash, pass.revision());
        let current = pass
            .status
            .canary
            .current_background_analysis_run_status
            .clone();
        let (run, phase, message) =
            pass.ensure_run(current.as_ref(), &prefix, RunKind::Background, background);
        wanted_runs.push(run.clone());
        pass.status.canary.current_background_analysis_run_status = Some(RunStatus {
            name: run.clone(),
            status: phase.map_or("Pending", Phase::as_str).into(),
            message: message.clone(),
        });
        match phase {
            Some(Phase::Failed | Phase::Error) => {
                let what = phase.map_or("", |phase| phase.as_str()).to_lowercase();
                pass.abort(format!("Background analysis phase {what}: {message}"));
            }
            Some(Phase::Inconclusive) => pass
                .status
                .add_pause("InconclusiveAnalysisRun", pass.observed.now),
            _ => {}
        }
    }
    // The current step's analysis.
    let index = pass.status.current_step_index.unwrap_or(0);
    let step = usize::try_from(index)
        .ok()
        .and_then(|index| steps.get(index));
    let mut step_done = false;
    let mut wanted_experiment = None;
    if let Some(step) = step
        && !pass.paused_by_user()
    {
        if let Some(analysis) = &step.analysis {
            if analyses_allowed {
                let prefix = format!("{}-{}-{}-{index}", pass.name, pass.hash, pass.revision());
                let current = pass.status.canary.current_step_analysis_run_status.clone();
                let step_index = usize::try_from(index).unwrap_or(0);
                let (run, phase, message) = pass.ensure_run(
                    current.as_ref(),
                    &prefix,
                    RunKind::Step(step_index),
                    analysis,
                );
                wanted_runs.push(run.clone());
                pass.status.canary.current_step_analysis_run_status = Some(RunStatus {
                    name: run,
                    status: phase.map_or("Pending", Phase::as_str).into(),
                    message: message.clone(),
                });
                match phase {
                    Some(Phase::Successful) => step_done = true,
                    Some(Phase::Failed | Phase::Error) => {
                        let what = phase.map_or("", |phase| phase.as_str()).to_lowercase();
                        pass.abort(format!("Step-based analysis phase {what}: {message}"));
                    }
                    Some(Phase::Inconclusive) => {
                        pass.status
                            .add_pause("InconclusiveAnalysisRun", pass.observed.now);
                    }
                    _ => pass.requeue(POLL),
                }
            }
        } else if step.experiment.is_some() {
            if analyses_allowed {
                let step_index = usize::try_from(index).unwrap_or(0);
                let (name, phase, message) = experiment_step(pass, index, step_index);
                wanted_experiment = Some(name);
                match phase {
                    Some(Phase::Successful) => step_done = true,
                    Some(Phase::Failed | Phase::Error) => {
                        let what = phase.map_or("", |phase| phase.as_str()).to_lowercase();
                        pass.abort(format!("Experiment analysis phase is {what}: {message}"));
                    }
                    Some(Phase::Inconclusive) => {
                        pass.status
                            .add_pause("InconclusiveExperiment", pass.observed.now);
                    }
                    _ => pass.requeue(POLL),
                }
            }
        } else if let Some(route) = &step.set_header_route {
            if analyses_allowed {
                pass.actions.push(Action::SetHeaderRoute(route.clone()));
                step_done = true;
            }
        } else if let Some(route) = &step.set_mirror_route {
            if analyses_allowed {
                pass.actions.push(Action::SetMirrorRoute(route.clone()));
                step_done = true;
            }
        } else if let Some(pause) = &step.pause
            && !pass.status.abort
            && !pass.status.promote_full
        {
            step_done = pause_step(pass, pause.duration.as_ref());
        }
    } else if pass.paused_by_user() {
        wanted_experiment = pass.status.canary.current_experiment.clone();
        // A user's pause holds everything, analysis included.
        if let Some(run) = &pass.status.canary.current_step_analysis_run_status {
            wanted_runs.push(run.name.clone());
        }
    }
    // Experiments no longer needed (another step, an abort, a full promotion) are terminated.
    for experiment in pass.observed.experiments {
        if wanted_experiment.as_ref() != Some(&experiment.name)
            && !experiment.terminating
            && !run_completed(experiment)
        {
            pass.actions.push(Action::TerminateExperiment {
                name: experiment.name.clone(),
            });
        }
    }
    if wanted_experiment.is_none() {
        pass.status.canary.current_experiment = None;
    }
    // Runs no longer needed are terminated.
    for run in pass.observed.runs {
        if !wanted_runs.contains(&run.name) && !run.terminating && !run_completed(run) {
            pass.actions.push(Action::TerminateRun {
                name: run.name.clone(),
            });
        }
    }
    pass.settle_abort(step_count);

    // Full promotion.
    let steps_over = pass.status.current_step_index.unwrap_or(0) >= step_count as i64;
    let promote_why = if pass.status.abort || at_stable {
        None
    } else if pass.status.promote_full {
        Some("Full promotion requested")
    } else if steps_over {
        Some("Completed all canary steps")
    } else {
        None
    };
    // The ReplicaSets, sized for the weight wanted now.
    let (stable_now, hash_now) = (pass.status.stable_rs.clone(), pass.hash.clone());
    let position = CanaryPosition {
        current_step_index: pass.status.current_step_index,
        stable_rs: &stable_now,
        current_pod_hash: &hash_now,
        promote_full: pass.status.promote_full,
        abort: pass.status.abort,
    };
    let max = replicas::max_weight(canary);
    let desired = replicas::desired(
        canary,
        replicas,
        &position,
        Some(new_rs.counts()),
        stable_rs.as_ref().map(ReplicaSetView::counts),
    );
    let weight = if promote_why.is_some() {
        max
    } else {
        desired.weight
    };
    let routed = canary.traffic_routing.is_some();
    let fenceposts = Fenceposts::of(canary, replicas);
    let older: Vec<ReplicaSetView> = pass
        .observed
        .replica_sets
        .iter()
        .filter(|rs| {
            rs.hash != new_rs.hash && Some(&rs.hash) != stable_rs.as_ref().map(|rs| &rs.hash)
        })
        .cloned()
        .collect();
    let older_counts: Vec<ReplicaSetCounts> = older.iter().map(ReplicaSetView::counts).collect();
    let stable_view = match &stable_rs {
        Some(rs) => StableReplicaSet::Distinct(rs.counts()),
        None => StableReplicaSet::SameAsCanary,
    };
    let written = pass
        .status
        .canary
        .weights
        .as_ref()
        .map(|weights| (weights.canary.weight, weights.stable.weight));
    let targets = if routed {
        replicas::traffic_routed_canary(&TrafficRoutedCanary {
            replicas,
            desired: Desired {
                canary_replicas: if promote_why.is_some() {
                    None
                } else {
                    desired.canary_replicas
                },
                weight,
            },
            max_weight: max,
            min_pods_per_replica_set: canary.min_pods_per_replica_set,
            dynamic_stable_scale: canary.dynamic_stable_scale == Some(true),
            abort: pass.status.abort,
            current_weights: written,
        })
    } else {
        replicas::basic_canary(&BasicCanary {
            replicas,
            weight,
            max_weight: max,
            fenceposts,
            canary: Some(new_rs.counts()),
            stable: stable_view,
            older: &older_counts,
        })
    };
    let mut scaled = false;
    if !pass.paused_by_user() {
        if let Some(stable) = &stable_rs
            && stable.replicas != targets.stable
        {
            scaled = pass.scale(stable, targets.stable);
        }
        if !scaled && new_rs.replicas != targets.canary {
            if routed && pass.status.abort && targets.canary < new_rs.replicas {
                // After an abort a routed canary keeps its pods for abortScaleDownDelaySeconds
                // (0: for good), so it can be looked at.
                let delay = canary
                    .abort_scale_down_delay_seconds
                    .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS);
                if delay > 0 {
                    delayed_scale_down(pass, &new_rs, delay, pass.observed.now);
                }
            } else {
                scaled = pass.scale(&new_rs, targets.canary);
            }
        }
        if !scaled && routed {
            // An old stable waits for its scale-down delay; any other old set goes at once.
            for rs in &older {
                if rs.replicas > 0 {
                    if rs.scale_down_deadline.is_some() {
                        delayed_scale_down(pass, rs, 0, pass.observed.now);
                    } else {
                        scaled |= pass.scale(rs, 0);
                    }
                }
            }
        } else if !scaled {
            // Older ReplicaSets drain to 0, no faster than availability allows.
            let available: i64 = pass
                .observed
                .replica_sets
                .iter()
                .map(|rs| rs.available)
                .sum();
            let mut room = (available - (replicas - fenceposts.max_unavailable)).max(0);
            for rs in &older {
                if rs.replicas > 0 && room > 0 {
                    let down = rs.replicas.min(room);
                    room -= down;
                    scaled |= pass.scale(rs, rs.replicas - down);
                }
            }
        }
    }
    let canary_ready = new_rs.replicas == targets.canary && new_rs.available >= targets.canary;
    let settled = !scaled
        && canary_ready
        && stable_rs.as_ref().is_none_or(|rs| {
            rs.replicas == targets.stable && rs.available >= targets.stable.min(rs.replicas)
        })
        && (routed || older.iter().all(|rs| rs.available == 0 && rs.replicas == 0));
    if !settled {
        pass.requeue(POLL);
    }
    // The router's weight: the one wanted once the canary's pods are there to take it, the
    // last one written until then, none to a canary without pods or after an abort.
    let mut weight_in_force = weight;
    if routed {
        // Promoted: both Services select the same pods, and the canary's share goes back to 0.
        let wanted = if at_stable { 0 } else { weight };
        let routed_weight = if pass.status.abort || new_rs.available == 0 {
            0
        } else if canary_ready {
            wanted
        } else {
            written.map_or(0, |(canary, _)| canary)
        };
        weight_in_force = routed_weight + weight - wanted;
        let managed = canary
            .traffic_routing
            .as_ref()
            .and_then(|routing| routing.managed_routes.as_ref())
            .is_some_and(|routes| !routes.is_empty());
        if managed
            && (at_stable || pass.status.abort || pass.status.promote_full || new_rs.available == 0)
        {
            pass.actions.push(Action::RemoveManagedRoutes);
        }
        route(
            pass,
            canary,
            routed_weight,
            max,
            stable_rs
                .as_ref()
                .map_or(&new_rs.hash, |rs| &rs.hash)
                .clone(),
        );
    }
    let settled = settled && weight_in_force == weight;
    if let Some(why) = promote_why {
        if settled && new_rs.available >= replicas && !pass.lacks_evidence() {
            let why = if why == "Completed all canary steps" {
                format!("Completed all {step_count} canary steps")
            } else {
                why.to_string()
            };
            pass.promote(&why, step_count);
            if routed && let Some(old) = &stable_rs {
                // The old stable keeps its pods for scaleDownDelaySeconds after traffic left.
                let delay = canary
                    .scale_down_delay_seconds
                    .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS);
                delayed_scale_down(pass, old, delay, pass.observed.now);
            }
        }
        return;
    }
    // One step per reconcile, once the ReplicaSets are where the step wants them.
    if pass.status.abort || pass.paused_by_user() {
        return;
    }
    let Some(step) = step else {
        return;
    };
    if step.set_weight.is_some() || step.set_canary_scale.is_some() {
        step_done = settled;
    }
    if step_done {
        let next = index + 1;
        pass.status.current_step_index = Some(next);
        pass.status.canary.current_step_analysis_run_status = None;
        pass.status
            .pause_conditions
            .retain(|c| c.reason != "CanaryPauseStep");
        if pass.status.pause_conditions.is_empty() {
            pass.status.controller_pause = false;
        }
        pass.event(
            false,
            "RolloutStepCompleted",
            format!(
                "Rollout step {next}/{step_count} completed ({})",
                step_text(step)
            ),
        );
        pass.requeue(SignedDuration::from_millis(100));
    }
}

/// An `experiment` step: its Experiment (created when missing), with its phase and message.
fn experiment_step(
    pass: &mut Pass<'_>,
    index: i64,
    step_index: usize,
) -> (String, Option<Phase>, String) {
    let name = format!("{}-{}-{}-{index}", pass.name, pass.hash, pass.revision());
    pass.status.canary.current_experiment = Some(name.clone());
    match pass
        .observed
        .experiments
        .iter()
        .find(|experiment| experiment.name == name)
    {
        Some(experiment) => (name, experiment.phase, experiment.message.clone()),
        None => {
            pass.event(
                false,
                "ExperimentCreated",
                format!("Created Experiment '{name}'"),
            );
            pass.actions.push(Action::CreateExperiment {
                name: name.clone(),
                step_index,
            });
            (name, None, String::new())
        }
    }
}

/// A `pause` step: true once it is over (its duration passed, or a user promoted).
fn pause_step(pass: &mut Pass<'_>, duration: Option<&IntOrString>) -> bool {
    let now = pass.observed.now;
    match pass.status.paused_for("CanaryPauseStep").cloned() {
        None if pass.status.controller_pause => true, // a user removed the condition: promote
        None => {
            pass.status.add_pause("CanaryPauseStep", now);
            if let Some(duration) = duration.and_then(duration_of) {
                pass.requeue(duration);
            }
            false
        }
        Some(condition) => {
            let Some(duration) = duration.and_then(duration_of) else {
                return false;
            };
            let started = condition.start_time.parse::<Timestamp>().unwrap_or(now);
            let ends = started.checked_add(duration).unwrap_or(started);
            if now >= ends {
                true
            } else {
                pass.requeue(ends.duration_since(now));
                false
            }
        }
    }
}

fn duration_of(value: &IntOrString) -> Option<SignedDuration> {
    match value {
        IntOrString::Int(seconds) => Some(SignedDuration::from_secs(*seconds)),
        IntOrString::String(text) => {
            let text = if text.chars().all(|c| c.is_ascii_digit()) {
                format!("{text}s")
            } else {
                text.clone()
            };
            GoDuration::parse(&text)
                .ok()
                .and_then(|duration| SignedDuration::try_from(duration.get()).ok())
        }
    }
}

fn step_text(step: &super::types::CanaryStep) -> String {
    if let Some(weight) = step.set_weight {
        format!("setWeight: {weight}")
    } else if let Some(pause) = &step.pause {
        match &pause.duration {
            Some(IntOrString::Int(seconds)) => format!("pause: {seconds}s"),
            Some(IntOrString::String(text)) => format!("pause: {text}"),
            None => "pause".into(),
        }
    } else if step.analysis.is_some() {
        "analysis".into()
    } else if step.experiment.is_some() {
        "experiment".into()
    } else if let Some(route) = &step.set_header_route {
        format!("setHeaderRoute: {}", route.name.as_deref().unwrap_or(""))
    } else if let Some(route) = &step.set_mirror_route {
        format!("setMirrorRoute: {}", route.name)
    } else {
        "step".into()
    }
}

fn run_completed(run: &RunView) -> bool {
    run.phase.is_some_and(Phase::completed)
}

/// Tells the routers `weight` to the canary (the rest to the stable) and records it.
fn route(pass: &mut Pass<'_>, canary: &CanaryStrategy, weight: i64, max: i64, stable_hash: String) {
    let weight = weight.clamp(0, max);
    pass.actions.push(Action::RouteTraffic {
        canary: weight,
        stable: max - weight,
    });
    let canary_hash = if pass.status.abort || weight == 0 {
        stable_hash.clone()
    } else {
        pass.hash.clone()
    };
    pass.status.canary.weights = Some(TrafficWeights {
        canary: WeightDestination {
            weight,
            service_name: canary.canary_service.clone().unwrap_or_default(),
            pod_template_hash: canary_hash,
        },
        stable: WeightDestination {
            weight: max - weight,
            service_name: canary.stable_service.clone().unwrap_or_default(),
            pod_template_hash: stable_hash,
        },
    });
}

fn point_services(pass: &mut Pass<'_>, canary: &CanaryStrategy, stable: &str, new: &str) {
    if let Some(service) = &canary.stable_service {
        pass.actions.push(Action::PointService {
            service: service.clone(),
            hash: stable.to_string(),
        });
    }
    let canary_hash = if pass.status.abort { stable } else { new };
    if let Some(service) = &canary.canary_service {
        pass.actions.push(Action::PointService {
            service: service.clone(),
            hash: canary_hash.to_string(),
        });
    }
}

fn blue_green_pass(pass: &mut Pass<'_>, blue_green: &BlueGreenStrategy) {
    let replicas = pass.replicas;
    let now = pass.observed.now;
    let Some(new_rs) = pass.rs(&pass.hash).cloned() else {
        return;
    };
    let active_service = blue_green.active_service.clone().unwrap_or_default();
    let preview_service = blue_green.preview_service.clone();
    let stable_hash = pass.status.stable_rs.clone();
    let stable_rs = pass
        .rs(&stable_hash)
        .filter(|rs| rs.hash != new_rs.hash)
        .cloned();
    let first_deploy = stable_hash.is_empty() || (stable_rs.is_none() && stable_hash != pass.hash);
    let user_paused = pass.paused_by_user();

    // The preview always selects the newest ReplicaSet.
    if let Some(preview) = &preview_service
        && !pass.status.abort
    {
        pass.actions.push(Action::PointService {
            service: preview.clone(),
            hash: pass.hash.clone(),
        });
        pass.status.blue_green.preview_selector = pass.hash.clone();
    }
    if first_deploy {
        if !user_paused {
            pass.scale(&new_rs, replicas);
        }
        pass.actions.push(Action::PointService {
            service: active_service.clone(),
            hash: pass.hash.clone(),
        });
        pass.status.blue_green.active_selector = pass.hash.clone();
        if pass.status.blue_green.preview_selector.is_empty() {
            pass.status.blue_green.preview_selector = pass.hash.clone();
        }
        if new_rs.saturated(replicas) {
            pass.promote("Initial deploy", 0);
        } else {
            pass.requeue(POLL);
        }
        return;
    }
    let Some(stable) = stable_rs else {
        // The template is the stable one: nothing to switch; old ReplicaSets go after their delay.
        pass.actions.push(Action::PointService {
            service: active_service,
            hash: pass.hash.clone(),
        });
        pass.status.blue_green.active_selector = pass.hash.clone();
        if !user_paused {
            if new_rs.replicas != replicas {
                pass.scale(&new_rs, replicas);
            }
            scale_down_old(pass, &new_rs.hash, "", blue_green, now);
        }
        return;
    };
    let mut wanted_runs = Vec::new();
    let revision = pass.revision();
    if pass.status.abort {
        // Back to the stable ReplicaSet; the preview goes after its delay.
        pass.actions.push(Action::PointService {
            service: active_service,
            hash: stable.hash.clone(),
        });
        pass.status.blue_green.active_selector = stable.hash.clone();
        if stable.replicas != replicas && !user_paused {
            pass.scale(&stable, replicas);
        }
        let delay = blue_green
            .abort_scale_down_delay_seconds
            .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS);
        if delay > 0 && new_rs.replicas > 0 && !user_paused {
            delayed_scale_down(pass, &new_rs, delay, now);
        }
        for run in pass.observed.runs {
            if !run.terminating && !run_completed(run) {
                pass.actions.push(Action::TerminateRun {
                    name: run.name.clone(),
                });
            }
        }
        pass.settle_abort(0);
        return;
    }
    let active_is_new = pass.status.blue_green.active_selector == pass.hash;
    let preview_count =
        if pass.status.promote_full || pass.status.blue_green.scale_up_preview_check_point {
            replicas
        } else {
            blue_green
                .preview_replica_count
                .unwrap_or(replicas)
                .min(replicas)
        };
    if !user_paused && !active_is_new && new_rs.replicas != preview_count {
        pass.scale(&new_rs, preview_count);
    }
    let saturated = new_rs.saturated(preview_count);
    if !active_is_new {
        if !saturated || user_paused {
            pass.requeue(POLL);
            terminate_unwanted(pass, &wanted_runs);
            return;
        }
        // Pre-promotion analysis.
        if let Some(analysis) = &blue_green.pre_promotion_analysis
            && !pass.status.promote_full
        {
            let prefix = format!("{}-{}-{revision}-pre", pass.name, pass.hash);
            let current = pass
                .status
                .blue_green
                .pre_promotion_analysis_run_status
                .clone();
            let (run, phase, message) =
                pass.ensure_run(current.as_ref(), &prefix, RunKind::PrePromotion, analysis);
            wanted_runs.push(run.clone());
            pass.status.blue_green.pre_promotion_analysis_run_status = Some(RunStatus {
                name: run,
                status: phase.map_or("Pending", Phase::as_str).into(),
                message: message.clone(),
            });
            match phase {
                Some(Phase::Successful) => {}
                Some(Phase::Failed | Phase::Error) => {
                    let what = phase.map_or("", |phase| phase.as_str()).to_lowercase();
                    pass.abort(format!("PrePromotion analysis phase {what}: {message}"));
                    pass.settle_abort(0);
                    terminate_unwanted(pass, &wanted_runs);
                    return;
                }
                Some(Phase::Inconclusive) => {
                    pass.status.add_pause("InconclusiveAnalysisRun", now);
                    terminate_unwanted(pass, &wanted_runs);
                    return;
                }
                _ => {
                    pass.requeue(POLL);
                    terminate_unwanted(pass, &wanted_runs);
                    return;
                }
            }
        }
        // The pause before the switch.
        let auto = blue_green.auto_promotion_enabled != Some(false);
        let seconds = blue_green.auto_promotion_seconds.unwrap_or(0);
        if !pass.status.promote_full && (!auto || seconds > 0) {
            match pass.status.paused_for("BlueGreenPause").cloned() {
                None if pass.status.controller_pause => {} // promoted by a user
                None => {
                    pass.status.add_pause("BlueGreenPause", now);
                    if auto {
                        pass.requeue(SignedDuration::from_secs(seconds));
                    }
                    terminate_unwanted(pass, &wanted_runs);
                    return;
                }
                Some(condition) => {
                    let started = condition.start_time.parse::<Timestamp>().unwrap_or(now);
                    let ends = started
                        .checked_add(SignedDuration::from_secs(seconds))
                        .unwrap_or(started);
                    if !auto || now < ends {
                        if auto {
                            pass.requeue(ends.duration_since(now));
                        }
                        terminate_unwanted(pass, &wanted_runs);
                        return;
                    }
                }
            }
        }
        pass.status.clear_pauses();
        if preview_count < replicas {
            pass.status.blue_green.scale_up_preview_check_point = true;
            pass.scale(&new_rs, replicas);
            pass.requeue(POLL);
            terminate_unwanted(pass, &wanted_runs);
            return;
        }
        if pass.lacks_evidence() {
            terminate_unwanted(pass, &wanted_runs);
            return;
        }
        // The switch.
        let from = pass.status.blue_green.active_selector.clone();
        pass.event(
            false,
            "SwitchService",
            format!(
                "Switched selector for service '{active_service}' from '{from}' to '{}'",
                pass.hash
            ),
        );
        pass.status.blue_green.active_selector = pass.hash.clone();
        pass.status.promote_full = false;
    }
    pass.actions.push(Action::PointService {
        service: active_service,
        hash: pass.status.blue_green.active_selector.clone(),
    });
    // Post-promotion analysis, then the new ReplicaSet is stable.
    if let Some(analysis) = &blue_green.post_promotion_analysis {
        let prefix = format!("{}-{}-{revision}-post", pass.name, pass.hash);
        let current = pass
            .status
            .blue_green
            .post_promotion_analysis_run_status
            .clone();
        let (run, phase, message) =
            pass.ensure_run(current.as_ref(), &prefix, RunKind::PostPromotion, analysis);
        wanted_runs.push(run.clone());
        pass.status.blue_green.post_promotion_analysis_run_status = Some(RunStatus {
            name: run,
            status: phase.map_or("Pending", Phase::as_str).into(),
            message: message.clone(),
        });
        match phase {
            Some(Phase::Successful) => {}
            Some(Phase::Failed | Phase::Error) => {
                let what = phase.map_or("", |phase| phase.as_str()).to_lowercase();
                pass.abort(format!("PostPromotion analysis phase {what}: {message}"));
                pass.actions.push(Action::PointService {
                    service: blue_green.active_service.clone().unwrap_or_default(),
                    hash: stable.hash.clone(),
                });
                pass.status.blue_green.active_selector = stable.hash.clone();
                pass.settle_abort(0);
                terminate_unwanted(pass, &wanted_runs);
                return;
            }
            _ => {
                pass.requeue(POLL);
                terminate_unwanted(pass, &wanted_runs);
                return;
            }
        }
    }
    terminate_unwanted(pass, &wanted_runs);
    pass.promote("Completed blue-green update", 0);
    if !user_paused {
        scale_down_old(pass, &new_rs.hash.clone(), &stable.hash, blue_green, now);
    }
}

fn terminate_unwanted(pass: &mut Pass<'_>, wanted: &[String]) {
    for run in pass.observed.runs {
        if !wanted.contains(&run.name) && !run.terminating && !run_completed(run) {
            pass.actions.push(Action::TerminateRun {
                name: run.name.clone(),
            });
        }
    }
}

/// Old ReplicaSets of a blue-green Rollout: the one just replaced waits `scaleDownDelaySeconds`
/// (its deadline annotated), the rest go at once.
fn scale_down_old(
    pass: &mut Pass<'_>,
    new_hash: &str,
    replaced_hash: &str,
    blue_green: &BlueGreenStrategy,
    now: Timestamp,
) {
    let delay = blue_green
        .scale_down_delay_seconds
        .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS);
    let old: Vec<ReplicaSetView> = pass
        .observed
        .replica_sets
        .iter()
        .filter(|rs| rs.hash != new_hash && rs.replicas > 0)
        .cloned()
        .collect();
    for rs in old {
        // The one just replaced waits for its delay, and so does any whose deadline is set.
        if (rs.hash == replaced_hash && delay > 0) || rs.scale_down_deadline.is_some() {
            delayed_scale_down(pass, &rs, delay, now);
        } else {
            pass.scale(&rs, 0);
        }
    }
}

/// Scales `rs` to 0 once its deadline (set now + `delay` seconds if absent) has passed.
fn delayed_scale_down(pass: &mut Pass<'_>, rs: &ReplicaSetView, delay: i64, now: Timestamp) {
    match rs.scale_down_deadline {
        None => {
            let deadline = now
                .checked_add(SignedDuration::from_secs(delay))
                .unwrap_or(now);
            pass.actions.push(Action::ScaleDownDeadline {
                name: rs.name.clone(),
                deadline: Some(deadline),
            });
            pass.requeue(SignedDuration::from_secs(delay));
        }
        Some(deadline) if now >= deadline => {
            pass.scale(rs, 0);
        }
        Some(deadline) => pass.requeue(deadline.duration_since(now)),
    }
}

impl Pass<'_> {
    /// The `workloadRef` Deployment's size: `onsuccess` takes it to 0 once the Rollout is
    /// Healthy, `progressively` by as many pods as the Rollout has available; `never` (the
    /// default) leaves it.
    fn scale_workload(&mut self, phase: &str) {
        let Some(reference) = &self.observed.rollout.spec.workload_ref else {
            return;
        };
        let replicas = match reference.scale_down.as_deref() {
            Some("onsuccess") if phase == "Healthy" => 0,
            Some("progressively") => (self.replicas - self.status.available_replicas).max(0),
            _ => return,
        };
        self.actions.push(Action::ScaleWorkload { replicas });
    }

    /// Old ReplicaSets beyond `revisionHistoryLimit` (scaled down, no deadline pending) and
    /// finished runs beyond the history limits go, oldest first, as Argo collects them.
    fn collect_garbage(&mut self) {
        let spec = &self.observed.rollout.spec;
        let keep = spec
            .revision_history_limit
            .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT)
            .max(0);
        let mut old: Vec<&ReplicaSetView> = self
            .observed
            .replica_sets
            .iter()
            .filter(|rs| {
                rs.hash != self.hash
                    && rs.hash != self.status.stable_rs
                    && rs.replicas == 0
                    && rs.status_replicas == 0
                    && rs.scale_down_deadline.is_none()
            })
            .collect();
        old.sort_by_key(|rs| std::cmp::Reverse(rs.revision));
        let doomed: Vec<String> = old
            .iter()
            .skip(usize::try_from(keep).unwrap_or(usize::MAX))
            .map(|rs| rs.name.clone())
            .collect();
        for name in doomed {
            self.actions.push(Action::DeleteReplicaSet { name });
        }
        let limits = spec.analysis.as_ref();
        let successful = limits
            .and_then(|limits| limits.successful_run_history_limit)
            .unwrap_or(DEFAULT_RUN_HISTORY_LIMIT);
        let unsuccessful = limits
            .and_then(|limits| limits.unsuccessful_run_history_limit)
            .unwrap_or(DEFAULT_RUN_HISTORY_LIMIT);
        for (wanted_success, keep) in [(true, successful), (false, unsuccessful)] {
            let mut finished: Vec<&RunView> = self
                .observed
                .runs
                .iter()
                .filter(|run| {
                    run_completed(run) && (run.phase == Some(Phase::Successful)) == wanted_success
                })
                .collect();
            finished.sort_by_key(|run| std::cmp::Reverse(run.created));
            let doomed: Vec<String> = finished
                .iter()
                .skip(usize::try_from(keep.max(0)).unwrap_or(usize::MAX))
                .map(|run| run.name.clone())
                .collect();
            for name in doomed {
                self.actions.push(Action::DeleteRun { name });
            }
        }
    }

    /// Counts, phase, message and conditions, from what was observed and decided.
    fn finish(mut self, strategy: &super::types::Strategy) -> Sync {
        self.collect_garbage();
        let now = self.observed.now;
        let new_rs = self.rs(&self.hash).cloned();
        let all = self.observed.replica_sets;
        self.status.replicas = all.iter().map(|rs| rs.status_replicas).sum();
        self.status.updated_replicas = new_rs.as_ref().map_or(0, |rs| rs.status_replicas);
        self.status.ready_replicas = all.iter().map(|rs| rs.ready).sum();
        let blue_green = strategy.blue_green.is_some();
        if blue_green {
            let active = self
                .rs(&self.status.blue_green.active_selector.clone())
                .cloned();
            self.status.available_replicas = active.as_ref().map_or(0, |rs| rs.available);
            self.status.hpa_replicas = active.as_ref().map_or(0, |rs| rs.status_replicas);
        } else {
            self.status.available_replicas = all.iter().map(|rs| rs.available).sum();
            self.status.hpa_replicas = self.status.replicas;
        }
        self.status.selector = selector_text(self.observed.rollout.spec.selector.as_ref());
        if blue_green && !self.status.blue_green.active_selector.is_empty() {
            let hash = format!(
                "{POD_TEMPLATE_HASH_LABEL}={}",
                self.status.blue_green.active_selector
            );
            self.status.selector = if self.status.selector.is_empty() {
                hash
            } else {
                format!("{},{hash}", self.status.selector)
            };
        }
        let updated_available = new_rs.as_ref().map_or(0, |rs| rs.available);
        // Progress: a ReplicaSet created or scaled, or pods that became available or ready.
        let before = &self.observed.status;
        let moved = self.actions.iter().any(|action| {
            matches!(
                action,
                Action::CreateReplicaSet { .. } | Action::ScaleReplicaSet { .. }
            )
        }) || (
            before.updated_replicas,
            before.available_replicas,
            before.ready_replicas,
        ) != (
            self.status.updated_replicas,
            self.status.available_replicas,
            self.status.ready_replicas,
        );
        if moved {
            self.status
                .conditions
                .retain(|c| c.reason != "ProgressDeadlineExceeded");
        }
        let (phase, message) = self.phase(strategy, updated_available);
        let rs_name = new_rs.as_ref().map_or(String::new(), |rs| rs.name.clone());
        let (phase, message) = self.progress_deadline(phase, message, moved, &rs_name);
        if phase != "Degraded" {
            let (status, reason, message) = if phase == "Healthy" {
                (
                    "True",
                    "NewReplicaSetAvailable",
                    format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
                )
            } else if phase == "Paused" {
                ("Unknown", "RolloutPaused", "Rollout is paused".to_string())
            } else {
                (
                    "True",
                    "ReplicaSetUpdated",
                    format!("ReplicaSet \"{rs_name}\" is progressing."),
                )
            };
            set_condition(
                &mut self.status,
                "Progressing",
                status,
                reason,
                &message,
                now,
            );
        }
        let available = self.status.available_replicas >= self.replicas;
        let (status, text) = if available {
            ("True", "Rollout has minimum availability")
        } else {
            ("False", "Rollout does not have minimum availability")
        };
        set_condition(
            &mut self.status,
            "Available",
            status,
            "AvailableReason",
            text,
            now,
        );
        let completed = self.status.stable_rs == self.hash;
        set_condition(
            &mut self.status,
            "Completed",
            if completed { "True" } else { "False" },
            "RolloutCompleted",
            if completed {
                "Rollout completed update to revision"
            } else {
                "Rollout not completed"
            },
            now,
        );
        let healthy = phase == "Healthy";
        set_condition(
            &mut self.status,
            "Healthy",
            if healthy { "True" } else { "False" },
            "RolloutHealthy",
            if healthy {
                "Rollout is healthy"
            } else {
                "Rollout is not healthy"
            },
            now,
        );
        let paused = !self.status.pause_conditions.is_empty()
            || self.observed.rollout.spec.paused == Some(true);
        set_condition(
            &mut self.status,
            "Paused",
            if paused { "True" } else { "False" },
            if paused {
                "RolloutPaused"
            } else {
                "RolloutResumed"
            },
            if paused {
                "Rollout is paused"
            } else {
                "Rollout is resumed"
            },
            now,
        );
        if self.observed.status.phase != phase {
            match phase.as_str() {
                "Paused" if !self.status.pause_conditions.is_empty() => {
                    let reason = self.status.pause_conditions[0].reason.clone();
                    self.event(
                        false,
                        "RolloutPaused",
                        format!("Rollout is paused ({reason})"),
                    );
                }
                _ => {}
            }
        }
        let message = if self.awaiting_evidence && phase == "Progressing" {
            format!(
                "waiting for evidence: {}: health promotes only after an analysis of this \
                 revision succeeded",
                super::PROMOTE_ON_ANNOTATION
            )
        } else {
            message
        };
        self.scale_workload(&phase);
        self.status.phase = phase;
        self.status.message = message;
        Sync {
            actions: self.actions,
            status: self.status,
            events: self.events,
            requeue_after: self.requeue,
        }
    }
}

impl Pass<'_> {
    /// Argo's progress deadline: a Rollout whose ReplicaSets make no progress (no pods created,
    /// scaled or becoming available) for `progressDeadlineSeconds` (600) while it waits for them
    /// is Degraded with `ProgressDeadlineExceeded`, and aborted with `progressDeadlineAbort`.
    /// Pauses and analyses are not waits for pods and never time out here. The last progress
    /// is the Progressing condition's `lastUpdateTime`, refreshed on every move.
    fn progress_deadline(
        &mut self,
        phase: String,
        message: String,
        moved: bool,
        rs_name: &str,
    ) -> (String, String) {
        const WAITING_FOR_PODS: [&str; 3] = [
            "more replicas need to be updated",
            "updated replicas are still becoming available",
            "old replicas are pending termination",
        ];
        let now = self.observed.now;
        let progressing = self
            .status
            .conditions
            .iter_mut()
            .find(|c| c.kind == "Progressing" && c.reason == "ReplicaSetUpdated");
        if let Some(condition) = progressing
            && moved
        {
            condition.last_update_time = now.to_string();
        }
        if phase != "Progressing" || !WAITING_FOR_PODS.contains(&message.as_str()) {
            return (phase, message);
        }
        let Some(last) = self
            .status
            .conditions
            .iter()
            .find(|c| c.kind == "Progressing" && c.reason == "ReplicaSetUpdated")
            .and_then(|c| c.last_update_time.parse::<Timestamp>().ok())
        else {
            return (phase, message);
        };
        let seconds = self
            .observed
            .rollout
            .spec
            .progress_deadline_seconds
            .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
        let deadline = last
            .checked_add(SignedDuration::from_secs(seconds))
            .unwrap_or(last);
        if now < deadline {
            self.requeue(deadline.duration_since(now));
            return (phase, message);
        }
        let text = format!("ReplicaSet \"{rs_name}\" has timed out progressing.");
        set_condition(
            &mut self.status,
            "Progressing",
            "False",
            "ProgressDeadlineExceeded",
            &text,
            now,
        );
        if self.observed.rollout.spec.progress_deadline_abort == Some(true)
            && !self.status.abort
            && self.hash != self.status.stable_rs
        {
            self.event(true, "RolloutAborted", text.clone());
            self.status.abort = true;
        }
        (
            "Degraded".into(),
            format!("ProgressDeadlineExceeded: {text}"),
        )
    }
}

impl Pass<'_> {
    /// Argo's `CalculateRolloutPhase` for the status decided: the first that holds of Degraded,
    /// Paused, Progressing, Healthy, with its message.
    fn phase(&self, strategy: &super::types::Strategy, updated_available: i64) -> (String, String) {
        let spec = &self.observed.rollout.spec;
        phase_of(
            &self.status,
            &PhaseInputs {
                user_paused: spec.paused == Some(true),
                restarting: spec
                    .restart_at
                    .as_ref()
                    .is_some_and(|at| self.status.restarted_at.as_ref() != Some(at)),
                replicas: self.replicas,
                updated_available,
                blue_green: strategy.blue_green.is_some(),
                routed: strategy
                    .canary
                    .as_ref()
                    .is_some_and(|canary| canary.traffic_routing.is_some()),
                post_analysis: strategy
                    .blue_green
                    .as_ref()
                    .is_some_and(|bg| bg.post_promotion_analysis.is_some()),
            },
        )
    }
}

/// What the phase depends on besides the status.
struct PhaseInputs {
    user_paused: bool,
    restarting: bool,
    replicas: i64,
    updated_available: i64,
    blue_green: bool,
    routed: bool,
    post_analysis: bool,
}

/// Argo's `CalculateRolloutPhase`: the first that holds of Degraded, Paused, Progressing, Healthy.
fn phase_of(status: &Status, inputs: &PhaseInputs) -> (String, String) {
    let PhaseInputs {
        user_paused,
        restarting,
        replicas,
        updated_available,
        blue_green,
        routed,
        post_analysis,
    } = *inputs;
    for condition in &status.conditions {
        if condition.kind == "InvalidSpec" {
            return (
                "Degraded".into(),
                format!("InvalidSpec: {}", condition.message),
            );
        }
        if condition.reason == "RolloutAborted" || condition.reason == "ProgressDeadlineExceeded" {
            return (
                "Degraded".into(),
                format!("{}: {}", condition.reason, condition.message),
            );
        }
    }
    if user_paused {
        return ("Paused".into(), "manually paused".into());
    }
    if let Some(pause) = status.pause_conditions.first() {
        return ("Paused".into(), pause.reason.clone());
    }
    if restarting {
        return ("Progressing".into(), "rollout is restarting".into());
    }
    let progressing = |message: &str| ("Progressing".to_string(), message.to_string());
    if status.updated_replicas < replicas {
        return progressing("more replicas need to be updated");
    }
    if updated_available < status.updated_replicas {
        return progressing("updated replicas are still becoming available");
    }
    if blue_green {
        if status.blue_green.active_selector.is_empty()
            || status.blue_green.active_selector != status.current_pod_hash
        {
            return progressing("active service cutover pending");
        }
        if status.stable_rs != status.current_pod_hash {
            return progressing(if post_analysis {
                "waiting for analysis to complete"
            } else {
                "waiting for post-promotion verification to complete"
            });
        }
    } else {
        // With a router, old pods may stay for their scale-down delay without traffic.
        if !routed && status.replicas > status.updated_replicas {
            return progressing("old replicas are pending termination");
        }
        if status.stable_rs != status.current_pod_hash {
            return progressing("waiting for all steps to complete");
        }
    }
    ("Healthy".into(), String::new())
}

/// Sets a condition; its times change only when what it says changes.
fn set_condition(
    status: &mut Status,
    kind: &str,
    value: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let now = now.to_string();
    if let Some(existing) = status.conditions.iter_mut().find(|c| c.kind == kind) {
        if existing.status == value && existing.reason == reason && existing.message == message {
            return;
        }
        if existing.status != value {
            existing.last_transition_time = now.clone();
        }
        existing.status = value.into();
        existing.reason = reason.into();
        existing.message = message.into();
        existing.last_update_time = now;
        return;
    }
    status.conditions.push(Condition {
        kind: kind.into(),
        status: value.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: now.clone(),
        last_update_time: now,
    });
}

/// `matchLabels` as `key=value,...` (sorted), as a status selector is written.
fn selector_text(selector: Option<&Value>) -> String {
    let Some(labels) = selector
        .and_then(|selector| selector.get("matchLabels"))
        .and_then(Value::as_object)
    else {
        return String::new();
    };
    let mut pairs: Vec<String> = labels
        .iter()
        .map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or_default()))
        .collect();
    pairs.sort();
    pairs.join(",")
}

#[cfg(test)]
mod tests;
