//! History entries. Every transition records one, with the evidence behind it.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{HookType, Phase, RolloutStatus};
use crate::units::Weight;

/// An append-only history entry. The store gives it a gap-free sequence number per rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// When it happened.
    pub at: Timestamp,
    /// The run it belongs to.
    pub run: u64,
    /// What happened.
    pub reason: EventReason,
    /// The phase after it happened.
    pub phase: Phase,
    /// The canary weight after it happened.
    pub canary_weight: Weight,
    /// In words.
    pub message: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Evidence::is_empty")]
    pub evidence: Evidence,
}

/// What an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "PascalCase")]
pub enum EventReason {
    /// The rollout was set up.
    Initialized,
    /// Set-up created the primary and waits until it is available before it takes traffic.
    WaitingForPrimary,
    /// The primary did not become available within the progress deadline: set-up stopped,
    /// with the user's Service and Deployment as they were.
    SetupFailed,
    /// A new revision waits for the confirm-rollout gate.
    WaitingForApproval,
    /// A run started.
    RunStarted,
    /// The canary revision changed mid-run; the run restarted.
    RunRestarted,
    /// The canary weight (or iteration) advanced.
    Advanced,
    /// A gate held the weight.
    GateClosed,
    /// A person opened a gate for the run (`weir gate open`).
    GateOpened,
    /// A person closed a gate for the run (`weir gate close`): it holds whatever its hooks
    /// answer.
    GateShut,
    /// Checks failed this tick.
    ChecksFailed,
    /// Checks returned no data and the policy held the weight.
    NoData,
    /// The canary is not ready.
    CanaryNotReady,
    /// At the end of the plan, waiting for confirm-promotion.
    WaitingPromotion,
    /// The run holds until its judges show the canary healthy (`spec.analysis.evidence`), or
    /// the evidence deadline passed and it holds for a person.
    WaitingForEvidence,
    /// The evidence a held run waited for arrived (or the deadline policy promoted without it).
    EvidenceShown,
    /// Promotion started.
    Promoting,
    /// Traffic is moving back to the new primary.
    Finalising,
    /// The run promoted its canary.
    Succeeded,
    /// The run rolled back.
    RolledBack,
    /// A person stopped the run with the weights where they were.
    Stopped,
    /// The analysis failed and the weight is held for a person.
    Held,
    /// A person paused the run.
    Paused,
    /// A person resumed the run.
    Resumed,
    /// A judge's verdict.
    Verdict,
    /// A command was applied.
    Command,
    /// The rollout was deleted.
    Deleted,
    /// The rollout's document was applied (created or changed) by a token's holder, named in
    /// the message (recorded only when the server has tokens: an open server knows no one).
    Applied,
    /// Something the target did on its own that a person may need to know: where the router
    /// listens, a version started again on another port because its first one was taken.
    Target,
}

impl Event {
    /// An event of the target's, in the rollout's current phase and weight.
    pub fn of_target(status: &RolloutStatus, at: Timestamp, message: String) -> Event {
        Event {
            at,
            run: status.run,
            reason: EventReason::Target,
            phase: status.phase,
            canary_weight: status.canary_weight,
            message,
            evidence: Evidence::default(),
        }
    }
}

impl EventReason {
    /// Whether it is a warning (Flagger's `Warning` event type) rather than progress.
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            EventReason::WaitingForApproval
                | EventReason::WaitingForPrimary
                | EventReason::SetupFailed
                | EventReason::GateClosed
                | EventReason::GateShut
                | EventReason::ChecksFailed
                | EventReason::NoData
                | EventReason::CanaryNotReady
                | EventReason::WaitingPromotion
                | EventReason::RolledBack
                | EventReason::Stopped
                | EventReason::Held
        )
    }
}

/// The evidence behind an event.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Evidence {
    /// Check results considered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckResult>,
    /// Webhook results considered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookResult>,
    /// A judge's verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<JudgeVerdict>,
    /// Who issued the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
}

impl Evidence {
    /// Whether there is nothing in it.
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
            && self.hooks.is_empty()
            && self.verdict.is_none()
            && self.actor.is_none()
    }
}

/// The outcome of one metric check in one tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckResult {
    /// The metric's name.
    pub name: String,
    /// Pass, fail or no data.
    pub outcome: CheckOutcome,
    /// The measured value, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Details.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Check outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CheckOutcome {
    /// Within range.
    Pass,
    /// Out of range.
    Fail,
    /// The query returned nothing.
    NoData,
}

/// The outcome of one webhook call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookResult {
    /// The webhook's name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub hook_type: HookType,
    /// Whether it answered with success (status <= 202), or a person opened the gate.
    pub success: bool,
    /// Details.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A judge's conclusion with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JudgeVerdict {
    /// The judge's name.
    pub judge: String,
    /// What it concluded.
    pub outcome: VerdictOutcome,
    /// Its evidence (counts, e-values, intervals), as the judge reports it.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub evidence: serde_json::Value,
}

/// Verdict outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum VerdictOutcome {
    /// The canary is no worse than allowed.
    Pass,
    /// The canary is worse than allowed: roll back now.
    Fail,
    /// Not enough evidence yet.
    Inconclusive,
}
