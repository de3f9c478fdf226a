//! Requests for rollouts another instance owns: what travels to the owner and back.
//!
//! With several instances on one database (docs/SCALE-OUT.md), each rollout is stepped by the one
//! instance holding its lease. A change asked of any other instance (an apply of an existing
//! rollout, a command, a delete) is handed to a [`Forwarder`], which records it for the owner and
//! waits for the answer; the owner executes it through its engine ([`crate::EngineHandle::execute`])
//! exactly once and records the answer. Both sides use the JSON shapes of this module.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use weir_core::FieldError;
use weir_core::machine::Command;
use weir_core::model::Rollout;
use weir_store::{RolloutKey, StoreError};

use crate::handle::EngineError;
use crate::providers::BoxFuture;

/// A change handed to a rollout's owner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Forwarded {
    /// [`crate::EngineHandle::apply_by`].
    #[serde(rename_all = "camelCase")]
    Apply {
        /// The document.
        rollout: Box<Rollout>,
        /// The version the caller read.
        expected_version: Option<u64>,
        /// Who applied it.
        actor: Option<String>,
    },
    /// [`crate::EngineHandle::command`].
    Command {
        /// The command.
        command: Command,
        /// Who gave it.
        actor: String,
    },
    /// [`crate::EngineHandle::delete`].
    #[serde(rename_all = "camelCase")]
    Delete {
        /// The version the caller read.
        expected_version: Option<u64>,
    },
}

/// Hands requests to the owners of rollouts this instance does not own.
pub trait Forwarder: Send + Sync + fmt::Debug + 'static {
    /// Records `request` for the owner of `key`, waits for its answer (an [`Answer`] as JSON) and
    /// returns it. Fails with [`EngineError::Remote`] (kind `unavailable`) when no owner answers in
    /// time.
    fn forward(
        &self,
        key: RolloutKey,
        request: Forwarded,
    ) -> BoxFuture<'static, Result<serde_json::Value, EngineError>>;
}

/// What the owner answers: the result's JSON or the error.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Answer {
    /// It succeeded: the result ([`crate::Applied`], a stored rollout, or null for a delete).
    Ok(serde_json::Value),
    /// It failed.
    Error(RemoteError),
}

/// An engine error as it travels between instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("{message}")]
pub struct RemoteError {
    /// What kind of failure (the API's status follows it).
    pub kind: RemoteErrorKind,
    /// The owner's message.
    pub message: String,
    /// For `invalid` and `refused`: the fields.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldError>,
}

/// The kinds of [`RemoteError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RemoteErrorKind {
    /// The document is invalid.
    Invalid,
    /// The server's policy refuses it.
    Refused,
    /// No such rollout.
    NotFound,
    /// The command does not apply now.
    Rejected,
    /// A version conflict.
    Conflict,
    /// No instance could take it now (no owner answered in time, or it was executed already
    /// and its answer is lost).
    Unavailable,
    /// Anything else.
    Internal,
}

impl RemoteError {
    /// An error of `kind`.
    pub fn new(kind: RemoteErrorKind, message: impl Into<String>) -> RemoteError {
        RemoteError {
            kind,
            message: message.into(),
            fields: Vec::new(),
        }
    }
}

impl From<&EngineError> for RemoteError {
    fn from(error: &EngineError) -> RemoteError {
        let message = error.to_string();
        match error {
            EngineError::Invalid(fields) => RemoteError {
                kind: RemoteErrorKind::Invalid,
                message,
                fields: fields.clone(),
            },
            EngineError::Refused(fields) => RemoteError {
                kind: RemoteErrorKind::Refused,
                message,
                fields: fields.clone(),
            },
            EngineError::NotFound(_) | EngineError::Store(StoreError::NotFound(_)) => {
                RemoteError::new(RemoteErrorKind::NotFound, message)
            }
            EngineError::Rejected(_) => RemoteError::new(RemoteErrorKind::Rejected, message),
            EngineError::Store(StoreError::Conflict { .. } | StoreError::AlreadyExists(_)) => {
                RemoteError::new(RemoteErrorKind::Conflict, message)
            }
            EngineError::Store(StoreError::Fenced { .. } | StoreError::AlreadyExecuted(_))
            | EngineError::ShuttingDown => RemoteError::new(RemoteErrorKind::Unavailable, message),
            EngineError::Remote(remote) => remote.clone(),
            EngineError::Store(_) => RemoteError::new(RemoteErrorKind::Internal, message),
        }
    }
}

/// The answer to record for `result`.
pub fn answer_of<T: Serialize>(result: &Result<T, EngineError>) -> serde_json::Value {
    let answer = match result {
        Ok(value) => match serde_json::to_value(value) {
            Ok(value) => Answer::Ok(value),
            Err(error) => Answer::Error(RemoteError::new(
                RemoteErrorKind::Internal,
                format!("the owner could not encode its answer: {error}"),
            )),
        },
        Err(error) => Answer::Error(RemoteError::from(error)),
    };
    serde_json::to_value(answer).unwrap_or(serde_json::Value::Null)
}

/// Reads an answer back as the result the caller expects.
pub fn result_of<T: DeserializeOwned>(answer: serde_json::Value) -> Result<T, EngineError> {
    let unreadable = |error: serde_json::Error| {
        EngineError::Remote(RemoteError::new(
            RemoteErrorKind::Internal,
            format!("the owner's answer cannot be read: {error}"),
        ))
    };
    match serde_json::from_value::<Answer>(answer).map_err(unreadable)? {
        Answer::Ok(value) => serde_json::from_value(value).map_err(unreadable),
        Answer::Error(error) => Err(EngineError::Remote(error)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_their_kind_and_fields_across_the_trip() {
        let invalid = EngineError::Invalid(vec![FieldError::new("spec.target.kind", "bad")]);
        let back = result_of::<()>(answer_of::<()>(&Err(invalid))).unwrap_err();
        let EngineError::Remote(remote) = back else {
            panic!("expected a remote error, got {back:?}");
        };
        assert_eq!(remote.kind, RemoteErrorKind::Invalid);
        assert_eq!(remote.fields[0].path, "spec.target.kind");

        let rejected = EngineError::Rejected(weir_core::machine::CommandRejected {
            command: "pause",
            phase: weir_core::model::Phase::Progressing,
            reason: "already paused".into(),
        });
        let EngineError::Remote(remote) =
            result_of::<()>(answer_of::<()>(&Err(rejected))).unwrap_err()
        else {
            panic!("expected a remote error");
        };
        assert_eq!(remote.kind, RemoteErrorKind::Rejected);
        assert!(
            remote.message.contains("already paused"),
            "{}",
            remote.message
        );

        let ok: Result<u64, EngineError> = Ok(7);
        assert_eq!(result_of::<u64>(answer_of(&ok)).unwrap(), 7);
    }
}
