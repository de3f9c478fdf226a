//! The bodies the API writes, shared with its clients: the server encodes these structs and the
//! CLI decodes into the same ones, so the two cannot drift apart.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use weir_core::FieldError;
use weir_core::Warning;
use weir_core::model::{Rollout, SchedulePlan, ScheduleState};
use weir_core::units::Weight;
use weir_store::{ApplyOutcome, StoredEvent, StoredRollout};

pub use crate::error::ErrorCode;

/// A rollout as the API shows it: the document with its status, and the store's bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutView {
    /// The document as applied, with its status.
    #[serde(flatten)]
    pub document: Rollout,
    /// Bumped by every change; the `ETag`.
    pub version: u64,
    /// Bumped by every change of the spec.
    pub generation: u64,
    /// The sequence number of the newest event.
    pub last_event_seq: u64,
    /// When the rollout was first applied.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl From<StoredRollout> for RolloutView {
    fn from(stored: StoredRollout) -> RolloutView {
        let mut document = stored.rollout;
        document.status = Some(stored.status);
        RolloutView {
            document,
            version: stored.version,
            generation: stored.generation,
            last_event_seq: stored.last_event_seq,
            created_at: stored.created_at,
            updated_at: stored.updated_at,
        }
    }
}

/// `GET /api/v1/rollouts`: a page of rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPage {
    /// The rollouts, by namespace and name.
    pub items: Vec<RolloutView>,
    /// Pass as `cursor` for the next page; `None` on the last one.
    pub next_cursor: Option<String>,
}

/// `GET /api/v1/flag-rollouts`: a page of the rollouts whose target is a flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlagRolloutPage {
    /// The rollouts, in the order asked for.
    pub items: Vec<FlagRolloutView>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A flag rollout as the list shows it: the rollout as `/api/v1/rollouts` returns it, and where
/// its schedule stands, worked out by the server so that no client has to expand a template or
/// match `triggered` against the entries itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlagRolloutView {
    /// The rollout, with its status.
    #[serde(flatten)]
    pub rollout: RolloutView,
    /// Where its schedule stands; absent when the plan is not a schedule (a flag can be rolled
    /// out by canary steps too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleSummary>,
}

/// How a schedule is written (seed 004's manual and template settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleType {
    /// `manual: [{at, weight}]`.
    Manual,
    /// `template: {start, interval, increments}`.
    Template,
}

impl ScheduleType {
    /// Both types, for parsing and messages.
    pub const ALL: [ScheduleType; 2] = [ScheduleType::Manual, ScheduleType::Template];

    /// The name used in documents and query parameters.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleType::Manual => "manual",
            ScheduleType::Template => "template",
        }
    }

    /// The type of a schedule plan (`manual` wins when, against validation, both are set,
    /// as it does when the schedule is expanded).
    pub fn of(plan: &SchedulePlan) -> Option<ScheduleType> {
        if plan.manual.is_some() {
            Some(ScheduleType::Manual)
        } else if plan.template.is_some() {
            Some(ScheduleType::Template)
        } else {
            None
        }
    }
}

/// Where a schedule stands: every entry (a template expanded) with when it took effect, how
/// many are done, the next one, and the weight of the new variation now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSummary {
    /// Manual entries or a template.
    #[serde(rename = "type")]
    pub schedule_type: ScheduleType,
    /// WAITING, RUNNING, FINISHED or STOPPED (seed 004's words).
    pub state: ScheduleState,
    /// Every entry in time order.
    pub entries: Vec<ScheduleEntryView>,
    /// Entries that took effect in the current run.
    pub done: usize,
    /// Entries in all.
    pub total: usize,
    /// The next entry to take effect; absent once the schedule is finished or stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<NextEntry>,
    /// The new variation's share of the audience now (100% once promoted).
    pub weight: Weight,
}

/// One schedule entry and, once it took effect, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleEntryView {
    /// When the entry is due.
    pub at: Timestamp,
    /// The new variation's weight from then on.
    pub weight: Weight,
    /// When it took effect in the current run (after downtime, later than `at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triggered_at: Option<Timestamp>,
}

/// The next schedule entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NextEntry {
    /// When it is due.
    pub at: Timestamp,
    /// The weight it sets.
    pub weight: Weight,
}

/// `POST`/`PUT` of a rollout: what the apply did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    /// The rollout after the apply.
    pub rollout: RolloutView,
    /// Created, updated or unchanged.
    pub outcome: ApplyOutcome,
    /// What was accepted but is worth knowing (e.g. Flagger fields kept but not acted on).
    pub warnings: Vec<Warning>,
}

/// `GET .../events`: a page of a rollout's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventPage {
    /// The events, oldest first.
    pub items: Vec<StoredEvent>,
    /// Pass as `after` for the next page; `None` when this page was not full.
    pub next_after: Option<u64>,
}

/// `POST .../commands`: a command for a rollout. The server reads it field by field so that
/// every mistake is named; this is the shape it reads.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CommandRequest {
    /// The command's name: `promote`, `abort`, `pause`, `resume`, `retry`, `open-gate`, ...
    pub command: String,
    /// Who sent it, for the history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// The gate an `open-gate` or `close-gate` acts on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateRequest>,
    /// For `stop`: return everyone to the primary as well (default: the weights stay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<bool>,
}

/// A gate by its type, its hook's name, or both.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GateRequest {
    /// `confirm-rollout`, `confirm-traffic-increase` or `confirm-promotion`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub gate_type: Option<String>,
    /// The gate webhook's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
}

/// Every refusal's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong, and for an invalid document every field at fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// The kind of error.
    pub code: ErrorCode,
    /// A sentence for people.
    pub message: String,
    /// The fields at fault (empty unless `code` is `invalid`).
    #[serde(default)]
    pub errors: Vec<FieldError>,
}
