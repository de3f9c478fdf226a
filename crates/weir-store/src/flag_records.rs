//! What the store keeps about flags beside the flags themselves (issue 33): the change history
//! of each flag, evaluation counts per minute, and triggers (secret URLs that turn a flag on or
//! off; only the secret's SHA-256 is kept). Tables `flag_history`, `flag_evaluations` and
//! `flag_triggers` (SQLite migration 4, PostgreSQL migration 2).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::FlagKey;

/// One field that a change of a flag changed: its path in the document (`spec.enabled`,
/// `spec.variations[1].value`) with the value before and after (absent: the field was not there).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    /// The field's path.
    pub path: String,
    /// Its value before the change (absent when it was added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    /// Its value after the change (absent when it was removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

impl std::fmt::Display for FieldChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |value: &Option<Value>| match value {
            Some(value) => value.to_string(),
            None => "(none)".to_string(),
        };
        write!(
            f,
            "{}: {} -> {}",
            self.path,
            show(&self.before),
            show(&self.after)
        )
    }
}

/// A change of a flag to record.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFlagChange {
    /// Which flag.
    pub key: FlagKey,
    /// When.
    pub at: Timestamp,
    /// Who: a token's name, `rollout NAMESPACE/NAME`, `trigger ID`.
    pub actor: String,
    /// `created`, `updated`, `deleted`, `enabled`, `disabled`, `triggered`, `rollout`.
    pub action: String,
    /// The flag's version after the change (`None`: deleted).
    pub version: Option<u64>,
    /// The caller's address, when known (a trigger's use).
    pub address: Option<String>,
    /// What changed.
    pub changes: Vec<FieldChange>,
}

/// A recorded change of a flag.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredFlagChange {
    /// Increasing with time, per store: newer changes have larger ids (the page cursor).
    pub id: u64,
    /// The change.
    pub change: NewFlagChange,
}

/// How many evaluations served one variation of one flag in one minute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvaluationCount {
    /// Which flag.
    pub key: FlagKey,
    /// Which variation.
    pub variation: String,
    /// The minute: Unix seconds / 60.
    pub minute: i64,
    /// How many.
    pub count: u64,
}

/// A trigger to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFlagTrigger {
    /// Its id (random, in its URL).
    pub id: String,
    /// The flag it turns on or off.
    pub key: FlagKey,
    /// `on` or `off`.
    pub action: String,
    /// What it is for.
    pub description: String,
    /// SHA-256 of its secret, lower-case hex.
    pub secret_hash: String,
    /// Who created it.
    pub created_by: String,
    /// When.
    pub created_at: Timestamp,
}

/// A stored trigger.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredFlagTrigger {
    /// What it was created with.
    pub trigger: NewFlagTrigger,
    /// When it was last used.
    pub last_used_at: Option<Timestamp>,
    /// How often it was used.
    pub uses: u64,
}
