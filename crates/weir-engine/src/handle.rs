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
    /// The rollout's owner (another instance) answered with this error.
    #[error(transparent)]
    Remote(#[from] crate::forward::RemoteError),
}

/// A rollout after an apply.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Applied {
    /// As stored.
    pub rollout: StoredRollout,
    /// Created, updated or unchanged.
    pub outcome: ApplyOutcome,
}

/// What became of a forwarded request ([`EngineHandle::execute`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Executed {
    /// The answer to record (`crate::forward::Answer` as JSON).
    Answer(serde_json::Value),
    /// This instance lost the rollout meanwhile: leave the request to the next owner.
    Moved,
    /// A commit executed it before (an owner that died before answering).
    Before,
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
        /// The forwarded request it executes (its commit marks it executed).
        request: Option<i64>,
        reply: oneshot::Sender<Result<StoredRollout, EngineError>>,
    },
    /// This instance now holds the rollout's lease: load it and take over its schedule
    /// (answered once it is loaded, or could not be).
    Adopt {
        key: RolloutKey,
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    /// This instance no longer holds the rollout's lease: stop stepping it (after the job under
    /// way, if any) and answer once it is dropped.
    Release {
        key: RolloutKey,
        reply: oneshot::Sender<()>,
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
        self.command_for(key, command, actor.into(), None).await
    }

    async fn command_for(
        &self,
        key: RolloutKey,
        command: Command,
        actor: String,
        request: Option<i64>,
    ) -> Result<StoredRollout, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.send(Request::Command {
            key,
            command,
            actor,
            request,
            reply,
        })
        .await?;
        answer.await.map_err(|_| EngineError::ShuttingDown)?
    }

    /// Takes over a rollout whose lease this instance has just claimed (several instances,
    /// docs/SCALE-OUT.md): the engine loads it, re-applies its desired state, delivers what is
    /// pending and resumes its schedule.
    /// Fails when the rollout could not be read; the caller should then give the lease back.
    pub async fn adopt(&self, key: RolloutKey) -> Result<(), EngineError> {
        let (reply, answer) = oneshot::channel();
        self.send(Request::Adopt { key, reply }).await?;
        answer.await.map_err(|_| EngineError::ShuttingDown)?
    }

    /// Stops stepping a rollout whose lease this instance gave up or lost; returns once the
    /// engine has dropped it (after the job under way, if any) and its target let go of it.
    pub async fn release(&self, key: RolloutKey) -> Result<(), EngineError> {
        let (reply, answer) = oneshot::channel();
        self.send(Request::Release { key, reply }).await?;
        answer.await.map_err(|_| EngineError::ShuttingDown)
    }

    /// Executes a request another instance forwarded to this one, the owner of `key`
    /// (request `id`; a command's commit marks it executed, so it runs once).
    pub async fn execute(
        &self,
        id: i64,
        key: RolloutKey,
        request: crate::forward::Forwarded,
    ) -> Executed {
        use crate::forward::{Forwarded, answer_of};
        fn settle<T: serde::Serialize>(result: Result<T, EngineError>) -> Executed {
            match result {
                Err(EngineError::Store(StoreError::Fenced { .. })) => Executed::Moved,
                Err(EngineError::Store(StoreError::AlreadyExecuted(_))) => Executed::Before,
                result => Executed::Answer(answer_of(&result)),
            }
        }
        match request {
            Forwarded::Apply {
                rollout,
                expected_version,
                actor,
            } => settle(self.apply_by(*rollout, expected_version, actor).await),
            Forwarded::Command { command, actor } => {
                settle(self.command_for(key, command, actor, Some(id)).await)
            }
            Forwarded::Delete { expected_version } => {
                settle(self.delete(key, expected_version).await)
            }
        }
    }

    /// Tells this instance's subscribers of a change another instance committed.
    pub fn announce(&self, change: StatusChange) {
        // Nobody listening is fine.
        let _ = self.changes.send(change);
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
