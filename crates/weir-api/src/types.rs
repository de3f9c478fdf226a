//! The bodies the API writes, shared with its clients: the server encodes these structs and the
//! CLI decodes into the same ones, so the two cannot drift apart.

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use weir_core::FieldError;
use weir_core::Warning;
use weir_core::model::{Rollout, SchedulePlan, ScheduleState};
use weir_core::units::Weight;
use weir_store::{ApplyOutcome, StoredEvent, StoredRollout};

pub use crate::error::ErrorCode;

/// One character of UTF-8 as lowercase hex pairs (the well-formed sequences of RFC 3629).
macro_rules! utf8_hex {
    () => {
        concat!(
            "[0-7][0-9a-f]",
            "|(c[2-9a-f]|d[0-9a-f])[89ab][0-9a-f]",
            "|e0[ab][0-9a-f][89ab][0-9a-f]",
            "|(e[1-9a-cef])[89ab][0-9a-f][89ab][0-9a-f]",
            "|ed[89][0-9a-f][89ab][0-9a-f]",
            "|f0[9ab][0-9a-f]([89ab][0-9a-f]){2}",
            "|f[1-3]([89ab][0-9a-f]){3}",
            "|f48[0-9a-f]([89ab][0-9a-f]){2}"
        )
    };
}

/// The shape of a cursor of `GET /api/v1/rollouts`: the last key of the previous page,
/// `hex(namespace) "." hex(name)` of UTF-8 text (weir-store's `encode_cursor`); any such value
/// is a place to continue from.
pub const ROLLOUT_CURSOR_PATTERN: &str = concat!("^(", utf8_hex!(), ")*\\.(", utf8_hex!(), ")*$");

/// The shape of a cursor of the flags' and flag rollouts' lists: how many items came before.
pub const OFFSET_CURSOR_PATTERN: &str = "^[0-9]{1,18}$";

/// A rollout as the API shows it: the document with its status, and the store's bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutView {
    /// The document as applied, with its status.
    #[serde(flatten)]
    pub document: Rollout,
    /// Bumped by every change; the `ETag`.
    #[schemars(range(min = 1))]
    pub version: u64,
    /// Bumped by every change of the spec.
    #[schemars(range(min = 1))]
    pub generation: u64,
    /// The sequence number of the newest event.
    pub last_event_seq: u64,
    /// When the rollout was first applied.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// Which instance steps it, when several share one database (docs/SCALE-OUT.md); absent
    /// on a single instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<OwnerView>,
}

/// A rollout's lease: who holds it and how fresh the hold is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OwnerView {
    /// The instance holding the lease; `null` while nobody does (between owners).
    pub instance: Option<String>,
    /// Bumped by every claim; a commit under an older epoch is refused (fencing).
    pub epoch: u64,
    /// The host label a local rollout is bound to (`null`: any instance may own it).
    pub host: Option<String>,
    /// When the owner last renewed the lease.
    pub renewed_at: Option<Timestamp>,
    /// When the lease lapses unless renewed.
    pub expires_at: Option<Timestamp>,
    /// Seconds since the last renewal (a dead owner's age grows until another instance takes
    /// the rollout over).
    pub lease_age_seconds: Option<f64>,
    /// Whether the lease has lapsed (its owner stopped renewing; another instance will claim it).
    pub expired: bool,
}

impl OwnerView {
    /// The view of `lease` at `now`.
    pub fn of(lease: weir_store::Lease, now: Timestamp) -> OwnerView {
        OwnerView {
            expired: lease.owner.is_none() || lease.expires_at.is_some_and(|at| at <= now),
            lease_age_seconds: lease
                .renewed_at
                .map(|at| now.duration_since(at).as_secs_f64().max(0.0)),
            instance: lease.owner,
            epoch: lease.epoch,
            host: lease.host,
            renewed_at: lease.renewed_at,
            expires_at: lease.expires_at,
        }
    }
}

impl From<StoredRollout> for RolloutView {
    fn from(stored: StoredRollout) -> RolloutView {
        let mut document = stored.rollout;
        document.status = Some(stored.status);
        // Every answer names the namespace, `default` included: a document that left it out
        // (examples/local-urls.yaml) is stored under `default`, and a client must not have to
        // know that rule to build a link.
        document.metadata.namespace = Some(stored.key.namespace);
        RolloutView {
            document,
            version: stored.version,
            generation: stored.generation,
            last_event_seq: stored.last_event_seq,
            created_at: stored.created_at,
            updated_at: stored.updated_at,
            owner: None,
        }
    }
}

/// `GET /api/v1/rollouts`: a page of rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPage {
    /// The rollouts, by namespace and name.
    pub items: Vec<RolloutView>,
    /// Pass as `cursor` for the next page; `None` on the last one.
    #[schemars(regex(pattern = ROLLOUT_CURSOR_PATTERN))]
    pub next_cursor: Option<String>,
}

/// `GET /api/v1/flag-rollouts`: a page of the rollouts whose target is a flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlagRolloutPage {
    /// The rollouts, in the order asked for.
    pub items: Vec<FlagRolloutView>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = OFFSET_CURSOR_PATTERN))]
    pub next_cursor: Option<String>,
}

/// A flag rollout as the list shows it: the rollout as `/api/v1/rollouts` returns it, and where
/// its schedule stands, worked out by the server so that no client has to expand a template or
/// match `triggered` against the entries itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NextEntry {
    /// When it is due.
    pub at: Timestamp,
    /// The weight it sets.
    pub weight: Weight,
}

/// `POST`/`PUT` of a rollout: what the apply did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// For `promote`: take only the plan's next step (default: promote to the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<bool>,
}

/// The rules the server reads a command by (`rollouts.rs`, `command_of`), as a schema: one
/// branch per kind of command, since which fields a command takes depends on its name (`gate`
/// only with `open-gate` and `close-gate`, `rollback` only with `stop`); unknown fields are
/// refused. Written by hand because a derive cannot say that; the names come from the core.
impl JsonSchema for CommandRequest {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "CommandRequest".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        use weir_core::machine::Command;
        let plain: Vec<&str> = Command::SIMPLE
            .iter()
            .map(Command::as_str)
            .filter(|name| *name != "stop" && *name != "promote")
            .collect();
        let gate = generator.subschema_for::<GateRequest>();
        let actor = serde_json::json!({
            "type": ["string", "null"],
            "maxLength": MAX_ACTOR_CHARS,
            "description": "Recorded in the history (default: the X-Weir-Actor header, else api)"
        });
        schemars::json_schema!({
            "description": "A command for a rollout. promote, abort, pause, resume, retry and skip-analysis act on the current run (or, for skip-analysis, the next); promote with step: true takes only the plan's next step; open-gate and close-gate take a gate; stop ends the run where it stands, or with rollback: true returns everyone to the primary.",
            "oneOf": [
                {
                    "type": "object",
                    "required": ["command"],
                    "additionalProperties": false,
                    "properties": {
                        "command": {"const": "promote"},
                        "actor": actor,
                        "step": {
                            "type": ["boolean", "null"],
                            "description": "Take only the plan's next step (a canary step or schedule entry) now, past its pause, the evidence and any confirm-traffic-increase gate; default false, promote to the end. With no step left it promotes."
                        },
                    }
                },
                {
                    "type": "object",
                    "required": ["command"],
                    "additionalProperties": false,
                    "properties": {
                        "command": {"type": "string", "enum": plain},
                        "actor": actor,
                    }
                },
                {
                    "type": "object",
                    "required": ["command", "gate"],
                    "additionalProperties": false,
                    "properties": {
                        "command": {"type": "string", "enum": ["open-gate", "close-gate"]},
                        "actor": actor,
                        "gate": gate,
                    }
                },
                {
                    "type": "object",
                    "required": ["command"],
                    "additionalProperties": false,
                    "properties": {
                        "command": {"const": "stop"},
                        "actor": actor,
                        "rollback": {
                            "type": ["boolean", "null"],
                            "description": "Return everyone to the primary (a flag's control variation) as well; default false, the weights stay where they are"
                        },
                    }
                }
            ],
            "examples": [
                {"command": "pause", "actor": "ana"},
                {"command": "promote", "step": true, "actor": "ana"},
                {"command": "open-gate", "gate": {"type": "confirm-promotion"}, "actor": "ana"},
                {"command": "close-gate", "gate": {"hook": "load-approval"}},
                {"command": "stop", "rollback": true, "actor": "ana"}
            ]
        })
    }
}

/// The longest actor a command may name, in characters (`input::actor`).
pub(crate) const MAX_ACTOR_CHARS: usize = 200;

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

/// What `gate_of` in `rollouts.rs` reads: at least one of `type` and `hook`, nothing else.
impl JsonSchema for GateRequest {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GateRequest".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let types: Vec<&str> = weir_core::model::HookType::GATES
            .iter()
            .map(|gate| gate.as_str())
            .collect();
        schemars::json_schema!({
            "type": "object",
            "description": "Which gate open-gate or close-gate decides: one hook by name, or every hook of a gate type (and the type itself when it has no hooks). At least one of type and hook; when both, they must agree.",
            "additionalProperties": false,
            "minProperties": 1,
            "properties": {
                "type": {"type": "string", "enum": types},
                "hook": {
                    "type": "string",
                    "pattern": "\\S",
                    "description": "A webhook's name in spec.analysis.webhooks"
                }
            }
        })
    }
}

/// Every refusal's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong, and for an invalid document every field at fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    /// The kind of error.
    pub code: ErrorCode,
    /// A sentence for people.
    pub message: String,
    /// The fields at fault (empty unless `code` is `invalid`).
    #[serde(default)]
    pub errors: Vec<FieldError>,
}
