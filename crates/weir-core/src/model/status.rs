//! Where a rollout stands. Everything the state machine needs to continue is here, so a status
//! serialized mid-run and read back continues exactly as the original.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::HookType;
use crate::units::Weight;

/// The observed state of a rollout.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The lifecycle phase.
    pub phase: Phase,
    /// The number of the current (or last) run; 0 before the first.
    #[serde(default)]
    pub run: u64,
    /// The revision under test in the current (or last) run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_revision: Option<String>,
    /// The revision the primary runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_revision: Option<String>,
    /// The canary's share of traffic.
    #[serde(default)]
    pub canary_weight: Weight,
    /// The share of traffic copied to the canary, when mirroring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_weight: Option<Weight>,
    /// Whether requests matching the A/B rules go to the canary.
    #[serde(default)]
    pub match_active: bool,
    /// Plan steps taken in this run (weight steps, schedule entries).
    #[serde(default)]
    pub steps_taken: u32,
    /// Passing iterations in this run (blue/green, A/B, mirror).
    #[serde(default)]
    pub iterations: u32,
    /// Failed checks counted in this run.
    #[serde(default)]
    pub failed_checks: u32,
    /// The evidence of the last failed check in this run: what a rollback at the threshold
    /// (counted at the start of the next tick) reports as its reason.
    #[serde(default, skip_serializing_if = "super::Evidence::is_empty")]
    pub last_failure: super::Evidence,
    /// Whether pre-rollout hooks have passed in this run.
    #[serde(default)]
    pub pre_rollout_passed: bool,
    /// Whether the one mirrored interval before a canary's first step is done.
    #[serde(default)]
    pub mirror_done: bool,
    /// Whether a blue/green or mirror run has switched all traffic to the canary.
    #[serde(default)]
    pub switched: bool,
    /// Paused by a person: the weight does not move until resumed.
    #[serde(default)]
    pub paused: bool,
    /// Waiting at a step's untimed pause for a person to resume.
    #[serde(default)]
    pub waiting_for_resume: bool,
    /// Skip the analysis of this run (set by the skip-analysis command).
    #[serde(default)]
    pub skip_analysis: bool,
    /// When the current run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_started_at: Option<Timestamp>,
    /// When the run last made progress; the progress deadline counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_progress_at: Option<Timestamp>,
    /// When the current step's timed pause ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_until: Option<Timestamp>,
    /// Since when the run has held for evidence of health (`spec.analysis.evidence`); cleared
    /// when the evidence arrives, the deadline policy lets it move on, or a new run starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_wait_since: Option<Timestamp>,
    /// When the phase last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_at: Option<Timestamp>,
    /// Gates a person opened or closed in this run (`weir gate`); they override the hooks'
    /// answers until changed again or the next run starts. The latest decision about a hook
    /// wins; a decision about a whole type replaces earlier ones about its hooks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateDecision>,
    /// Hooks whose failure (or closed gate) has been alerted in this run, so each alerts once
    /// per run, not every tick.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerted_hooks: Vec<String>,
    /// Who or what ended the current (or last) run before its plan did: set by a rollback, a
    /// stop and deletion, cleared when a run starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<StoppedBy>,
    /// The schedule entries this run has applied, in entry order (seed 004's `triggeredAt`):
    /// committed with the step that applied them, so none fires twice or is skipped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggered: Vec<TriggeredEntry>,
    /// Where a schedule stands in the seed's words (absent for other plans).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_state: Option<ScheduleState>,
    /// Why the rollout is where it is, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl RolloutStatus {
    /// Whether set-up never completed because the primary was not available within the
    /// progress deadline (phase `Failed` before any run).
    pub fn setup_failed(&self) -> bool {
        self.phase == Phase::Failed && self.run == 0
    }

    /// Whether set-up completed: the primary was available and took the traffic. Until then
    /// nothing may route to the primary or scale the target down.
    pub fn is_set_up(&self) -> bool {
        self.phase != Phase::Initializing && !self.setup_failed()
    }
}

/// Who or what ended a run before its plan did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum StoppedBy {
    /// A person: `weir stop`, `weir abort`.
    User,
    /// The analysis: failed checks or a judge's failing verdict.
    Judge,
    /// The progress deadline passed without progress.
    Deadline,
    /// The rollout was deleted.
    Deletion,
    /// A rollback webhook asked for it.
    Hook,
    /// The target failed in a way retrying cannot fix.
    Target,
}

impl StoppedBy {
    /// The name used in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            StoppedBy::User => "user",
            StoppedBy::Judge => "judge",
            StoppedBy::Deadline => "deadline",
            StoppedBy::Deletion => "deletion",
            StoppedBy::Hook => "hook",
            StoppedBy::Target => "target",
        }
    }
}

/// One schedule entry as applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggeredEntry {
    /// When the entry was due.
    pub at: Timestamp,
    /// The weight it set.
    pub weight: Weight,
    /// When it was applied (after downtime, later than `at`; overdue entries are applied
    /// together, at the latest weight due).
    pub triggered_at: Timestamp,
}

impl TriggeredEntry {
    /// How long after its time the entry was applied.
    pub fn lateness(&self) -> jiff::SignedDuration {
        self.triggered_at.duration_since(self.at)
    }
}

/// A schedule's state in seed 004's vocabulary, beside weir's phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ScheduleState {
    /// No entry has fired yet in this run.
    Waiting,
    /// At least one entry fired and more are due.
    Running,
    /// Every entry fired (or the run promoted).
    Finished,
    /// A person, the judge, the deadline or deletion stopped it (`stoppedBy` says which).
    Stopped,
}

impl ScheduleState {
    /// Every state, in lifecycle order.
    pub const ALL: [ScheduleState; 4] = [
        ScheduleState::Waiting,
        ScheduleState::Running,
        ScheduleState::Finished,
        ScheduleState::Stopped,
    ];

    /// The name used in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleState::Waiting => "WAITING",
            ScheduleState::Running => "RUNNING",
            ScheduleState::Finished => "FINISHED",
            ScheduleState::Stopped => "STOPPED",
        }
    }
}

/// A person's decision about a gate for the current run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateDecision {
    /// The gate type (confirm-rollout, confirm-traffic-increase or confirm-promotion).
    #[serde(rename = "type")]
    pub hook_type: HookType,
    /// The hook it is about; `None`: every hook of the type (and the type itself when it has no
    /// hooks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    /// Opened (the gate passes whatever its hook answers) or closed (it holds whatever its hook
    /// answers).
    pub open: bool,
    /// Who decided.
    pub actor: String,
    /// When.
    pub at: Timestamp,
}

impl GateDecision {
    /// What the decision answers in place of `hook`, for the evidence.
    pub fn as_result(&self, hook: &str) -> super::HookResult {
        super::HookResult {
            name: hook.to_string(),
            hook_type: self.hook_type,
            success: self.open,
            message: format!(
                "{} by {}",
                if self.open { "opened" } else { "closed" },
                self.actor
            ),
        }
    }
}

/// Lifecycle phases; Flagger's names, plus `Held` and `Terminated`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    /// Not yet set up.
    #[default]
    Initializing,
    /// Set up; the primary serves everything and no run is under way.
    Initialized,
    /// A new revision waits for the confirm-rollout gate.
    Waiting,
    /// A run is moving traffic and judging the canary.
    Progressing,
    /// At the end of the plan, waiting for the confirm-promotion gate.
    WaitingPromotion,
    /// The canary's definition is being copied to the primary.
    Promoting,
    /// Traffic returns to the (new) primary; the canary is scaled down next.
    Finalising,
    /// The last run promoted its canary.
    Succeeded,
    /// The last run rolled back.
    Failed,
    /// The analysis failed and `onFailure: hold` keeps the weight until a person decides.
    Held,
    /// A person stopped the run (`weir stop`): the weights stay where they were, and the
    /// rollout waits for a new revision like after a success or a failure.
    Stopped,
    /// Deleted.
    Terminated,
}

impl Phase {
    /// Every phase, in lifecycle order.
    pub const ALL: [Phase; 12] = [
        Phase::Initializing,
        Phase::Initialized,
        Phase::Waiting,
        Phase::Progressing,
        Phase::WaitingPromotion,
        Phase::Promoting,
        Phase::Finalising,
        Phase::Succeeded,
        Phase::Failed,
        Phase::Held,
        Phase::Stopped,
        Phase::Terminated,
    ];

    /// Phases in which a run is under way.
    pub fn in_run(self) -> bool {
        matches!(
            self,
            Phase::Waiting
                | Phase::Progressing
                | Phase::WaitingPromotion
                | Phase::Promoting
                | Phase::Finalising
                | Phase::Held
        )
    }

    /// Phases in which a run has ended (or never started) and the rollout waits for a revision.
    pub fn is_idle(self) -> bool {
        matches!(
            self,
            Phase::Initialized | Phase::Succeeded | Phase::Failed | Phase::Stopped
        )
    }

    /// The name used in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Initializing => "Initializing",
            Phase::Initialized => "Initialized",
            Phase::Waiting => "Waiting",
            Phase::Progressing => "Progressing",
            Phase::WaitingPromotion => "WaitingPromotion",
            Phase::Promoting => "Promoting",
            Phase::Finalising => "Finalising",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Held => "Held",
            Phase::Stopped => "Stopped",
            Phase::Terminated => "Terminated",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
