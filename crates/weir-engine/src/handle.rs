//! The engine's front door: every change to a rollout goes through an [`EngineHandle`], so the
//! engine is the only writer of the store and never races itself.

use tokio::sync::{broadcast, mpsc, oneshot};
use weir_core::machine::{Command, CommandRejected};
use weir_core::model::{Phase, Rollout, RolloutStatus};
use weir_core::{FieldError, Weight};
use weir_store::{ApplyOutcome, RolloutKey, StoreError, StoredEvent, StoredRollout};

/// Why the engine refused or failed a request. A refused request changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The document is invalid for this engine (e.g. a target kind it does not serve).
    #[error("invalid rollout: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    /// The document is valid, but this server's policy refuses it (a command version on a
    /// server started without `--allow-commands`): each refusal names its field and the
    /// setting that would allow it.
    #[error("refused by the server's policy: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused(Vec<FieldError>),
    /// No such rollout.
    #[error("rollout {0} not found")]
    NotFound(RolloutKey),
    /// The command does not apply now.
    #[error(transparent)]
    Rejected(#[from] CommandRejected),
    /// The store failed or refused (e.g. a version conflict).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine has stopped.
    #[error("the engine is shutting down")]
    ShuttingDown,
}

/// A rollout after an apply.
#[derive(Debug, Clone)]
pub struct Applied {
    /// As stored.
    pub rollout: StoredRollout,
    /// Created, updated or unchanged.
    pub outcome: ApplyOutcome,
}

/// A change of one rollout's status, as it was committed.
#[derive(Debug, Clone)]
pub struct StatusChange {
    /// Which rollout.
    pub key: RolloutKey,
    /// Its version after the change.
    pub version: u64,
    /// Its status after the change (`None`: it was deleted).
    pub status: Option<RolloutStatus>,
    /// The events committed with it.
    pub events: Vec<StoredEvent>,
}

impl StatusChange {
    /// The phase after the change (`Terminated` once deleted).
    pub fn phase(&self) -> Phase {
        self.status
            .as_ref()
            .map_or(Phase::Terminated, |status| status.phase)
    }

    /// The canary weight after the change.
    pub fn canary_weight(&self) -> Weight {
        self.status
            .as_ref()
            .map_or(Weight::ZERO, |status| status.canary_weight)
    }
}

pub(crate) enum Request {
    Apply {
        rollout: Box<Rollout>,
        expected_version: Option<u64>,
        actor: Option<String>,
        reply: oneshot::Sender<Result<Applied, EngineError>>,
    },
    Command {
        key: RolloutKey,
        command: Command,
        actor: String,
        reply: oneshot::Sender<Result<StoredRollout, EngineError>>,
    },
    Delete {
        key: RolloutKey,
        expected_version: Option<u64>,
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    /// A judge's failing verdict about a run (from the judge task).
    Verdict {
        key: RolloutKey,
        run: u64,
        verdict: weir_core::model::JudgeVerdict,
    },
}

/// A cheap, cloneable handle for talking to a running engine.
#[derive(Clone)]
pub struct EngineHandle {
    pub(crate) requests: mpsc::Sender<Request>,
    pub(crate) changes: broadcast::Sender<StatusChange>,
    pub(crate) telemetry: crate::Telemetry,
}

impl EngineHandle {
    /// Creates or updates a rollout (validated by the caller with `weir_core::validate`; the
    /// engine adds its target provider's checks). `expected_version`: see `weir_store::Store`.
    pub async fn apply(
        &self,
        rollout: Rollout,
        expected_version: Option<u64>,
    ) -> Result<Applied, EngineError> {
        self.apply_by(rollout, expected_version, None).await
    }

    /// Like [`EngineHandle::apply`], and when `actor` is given and the document changed, an
    /// `Applied` event naming the actor is recorded in the rollout's history.
    pub async fn apply_by(
        &self,
        rollout: Rollout,
        expected_version: Option<u64>,
        actor: Option<String>,
    ) -> Result<Applied, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.send(Request::Apply {
            rollout: Box::new(rollout),
            expected_version,
            actor,
            reply,
        })
        .await?;
        answer.await.map_err(|_| EngineError::ShuttingDown)?
    }

    /// Gives a command to a rollout; `actor` is recorded in its history.
    pub async fn command(
        &self,
        key: RolloutKey,
        command: Command,
        actor: impl Into<String>,
    ) -> Result<StoredRollout, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.send(Request::Command {
            key,
            command,
            actor: actor.into(),
            reply,
        })
        .await?;
        answer.await.map_err(|_| EngineError::ShuttingDown)?
    }

    /// Deletes a rollout (reverting routes first when its spec says `revertOnDeletion`).
    ///
    /// With `expected_version`, only that version is deleted: a rollout changed since the caller
    /// read it is left alone, routes and processes included (`StoreError::Conflict`).
    pub async fn delete(
        &self,
        key: RolloutKey,
        expected_version: Option<u64>,
    ) -> Result<(), EngineError> {
        let (reply, answer) = oneshot::channel();
        self.send(Request::Delete {
            key,
            expected_version,
            reply,
        })
        .await?;
        answer.await.map_err(|_| EngineError::ShuttingDown)?
    }

    /// Every committed status change from now on. A receiver that falls behind misses changes
    /// (and is told so by `RecvError::Lagged`); the store has the full history.
    pub fn subscribe(&self) -> broadcast::Receiver<StatusChange> {
        self.changes.subscribe()
    }

    /// The engine's own metrics (what `/metrics` serves).
    pub fn telemetry(&self) -> &crate::Telemetry {
        &self.telemetry
    }

    async fn send(&self, request: Request) -> Result<(), EngineError> {
        self.requests
            .send(request)
            .await
            .map_err(|_| EngineError::ShuttingDown)
    }
}
