//! One reconcile of an Argo Rollout, as a pure function: what weir's operator does with a
//! Rollout's ReplicaSets, Services and AnalysisRuns, and the status it writes, following Argo
//! Rollouts v1.9.1 (`rollout/canary.go`, `rollout/bluegreen.go`, `rollout/sync.go`,
//! `utils/rollout/rolloututil.go`).
//!
//! The strategies are in `canary` and `blue_green`; `status` turns what a pass decided into
//! the status it writes (counts, phase, conditions, the progress deadline) and collects old
//! ReplicaSets and runs.
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
//! smi, traefik, apisix and the Gateway API plugin, ReplicaSets sized by
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
                ("appMesh", routing.app_mesh.is_some()),
            ];
            if let Some((field, _)) = others.iter().find(|(_, used)| *used) {
                return Some(format!(
                    "spec.strategy.canary.trafficRouting.{field}: not run by weir's operator \
                     (it routes with istio, nginx, smi, traefik, apisix and the \
                     argoproj-labs/gatewayAPI plugin)"
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

fn run_completed(run: &RunView) -> bool {
    run.phase.is_some_and(Phase::completed)
}

mod blue_green;
mod canary;
mod status;

use blue_green::blue_green_pass;
use canary::canary_pass;
use status::set_condition;

#[cfg(test)]
mod tests;
