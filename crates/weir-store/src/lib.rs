//! weir-store: where rollouts live between ticks and across crashes.
//!
//! The engine's durability rests on one rule (ARCHITECTURE.md, invariant 4): a step's new status,
//! its events and the one-shot effects it produced (hook calls, notifications) are committed in
//! **one transaction**, before any effect is applied. After a crash, the engine re-applies the
//! desired state of every stored status and delivers the pending one-shot effects again (at least
//! once; each carries a delivery id for de-duplication).
//!
//! [`Store`] is the interface; [`SqliteStore`] the default implementation (a file in WAL mode,
//! migrations embedded), [`PostgresStore`] the one several instances share (leases and fencing
//! through [`Cluster`]). Every write takes the version the writer last read (optimistic
//! concurrency): a writer that lost a race gets [`StoreError::Conflict`] and changes nothing.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fmt;
use std::future::Future;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use weir_core::machine::Effect;
use weir_core::model::{Event, Flag, Phase, Rollout, RolloutStatus};

mod cluster;
mod flag_records;
mod postgres;
mod sqlite;
mod tokens;

pub use cluster::{Cluster, Lease, LeaseSummary, Notice, PendingRequest};
pub use flag_records::{
    EvaluationCount, FieldChange, NewFlagChange, NewFlagTrigger, StoredFlagChange,
    StoredFlagTrigger,
};

pub use postgres::{DEFAULT_ACQUIRE_TIMEOUT, PostgresOptions, PostgresStore};
pub use sqlite::SqliteStore;
pub use tokens::{
    HashedToken, NewToken, StoredToken, TokenScope, TokenStamp, TokenStore, TokenStoreError,
};

/// Namespace and name: a rollout's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RolloutKey {
    /// The namespace (`default` when the document names none).
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl RolloutKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> RolloutKey {
        RolloutKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of a rollout document.
    pub fn of(rollout: &Rollout) -> RolloutKey {
        RolloutKey::new(
            rollout.metadata.namespace_or_default(),
            rollout.metadata.name.clone(),
        )
    }
}

impl fmt::Display for RolloutKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A rollout as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredRollout {
    /// Its identity.
    pub key: RolloutKey,
    /// The document as applied (metadata and spec; its `status` is always `None` here).
    pub rollout: Rollout,
    /// Where it stands.
    pub status: RolloutStatus,
    /// Bumped by every write; the token for optimistic concurrency.
    pub version: u64,
    /// Bumped when the spec changes.
    pub generation: u64,
    /// One-shot effects (hook calls, notifications) committed but not yet delivered.
    pub pending_effects: Vec<Effect>,
    /// The sequence number of its last event (0: none yet).
    pub last_event_seq: u64,
    /// When it was first applied.
    pub created_at: Timestamp,
    /// When it was last written.
    pub updated_at: Timestamp,
}

/// An event with its place in the rollout's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoredEvent {
    /// 1, 2, 3, ... per rollout, without gaps.
    pub seq: u64,
    /// The event.
    #[serde(flatten)]
    pub event: Event,
}

/// What an apply did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ApplyOutcome {
    /// A new rollout.
    Created,
    /// The spec (or metadata) changed.
    Updated,
    /// Identical to what was stored; nothing was written.
    Unchanged,
}

/// One step to commit (see [`Store::commit`]).
#[derive(Debug, Clone)]
pub struct CommitItem {
    /// The rollout.
    pub key: RolloutKey,
    /// The version the step was computed from.
    pub expected_version: u64,
    /// The new status.
    pub status: RolloutStatus,
    /// Its events.
    pub events: Vec<Event>,
    /// One-shot effects still to deliver.
    pub pending: Vec<Effect>,
    /// When.
    pub now: Timestamp,
    /// The forwarded request (see [`Cluster::submit_request`]) this step executes: the commit
    /// marks it executed in the same transaction, and fails with [`StoreError::AlreadyExecuted`]
    /// when it was executed before. Stores without a cluster ignore it.
    pub request: Option<i64>,
}

/// Which rollouts to list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListQuery {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only rollouts in this phase.
    pub phase: Option<Phase>,
    /// Continue after this cursor (from a previous page).
    pub cursor: Option<String>,
    /// At most this many (the store caps it at [`MAX_PAGE`]; 0 means [`DEFAULT_PAGE`]).
    pub limit: usize,
}

/// The largest page a list returns.
pub const MAX_PAGE: usize = 500;

/// The page size when a list or events query asks for 0.
pub const DEFAULT_PAGE: usize = 100;

/// One page of a listing, in (namespace, name) order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Pass this as the cursor to get the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// Why a store operation failed. A failed operation changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No such rollout.
    #[error("rollout {0} not found")]
    NotFound(RolloutKey),
    /// Someone else wrote since the caller read.
    #[error("rollout {key} was changed concurrently (expected version {expected}, found {actual})")]
    Conflict {
        /// The rollout.
        key: RolloutKey,
        /// The version the caller read.
        expected: u64,
        /// The version stored now.
        actual: u64,
    },
    /// A create was asked for (`expected_version: Some(0)`) but the rollout exists.
    #[error("rollout {0} already exists")]
    AlreadyExists(RolloutKey),
    /// The cursor was not produced by this store.
    #[error("invalid cursor {0:?}")]
    InvalidCursor(String),
    /// Stored data could not be read back.
    #[error("stored data for {key} is corrupt: {detail}")]
    Corrupt {
        /// The rollout.
        key: RolloutKey,
        /// What is wrong.
        detail: String,
    },
    /// The database failed.
    #[error("database error: {0}")]
    Database(String),
    /// The database cannot be reached now (no connection within the acquire timeout, a
    /// connection cut, a server shutting down or starting): nothing was done, and the same
    /// request may succeed once it is back. The message names the database (never its
    /// credentials) and what failed.
    #[error("{0}")]
    Unavailable(String),
    /// This instance no longer holds the rollout's lease (another instance took it over, or it
    /// was released): the write was refused and changed nothing (fencing, docs/SCALE-OUT.md).
    #[error(
        "rollout {key} is no longer owned by this instance (lease epoch {epoch} was superseded)"
    )]
    Fenced {
        /// The rollout.
        key: RolloutKey,
        /// The epoch this instance held.
        epoch: u64,
    },
    /// The forwarded request this commit executes was executed already (by an earlier owner):
    /// the commit was refused and changed nothing, so the request runs exactly once.
    #[error("request {0} was executed already")]
    AlreadyExecuted(i64),
}

/// Persistence for rollouts, their status and their events.
///
/// `expected_version` arguments implement optimistic concurrency: `None` writes whatever is
/// stored, `Some(0)` requires that the rollout does not exist, `Some(v)` requires that the stored
/// version is `v`.
pub trait Store: Clone + Send + Sync + 'static {
    /// Creates or updates a rollout's metadata and spec. Its status is kept (a new rollout starts
    /// with `RolloutStatus::default()`); `generation` is bumped when the spec changes.
    fn apply(
        &self,
        rollout: &Rollout,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> impl Future<Output = Result<(StoredRollout, ApplyOutcome), StoreError>> + Send;

    /// One rollout.
    fn get(
        &self,
        key: &RolloutKey,
    ) -> impl Future<Output = Result<Option<StoredRollout>, StoreError>> + Send;

    /// A page of rollouts.
    fn list(
        &self,
        query: &ListQuery,
    ) -> impl Future<Output = Result<Page<StoredRollout>, StoreError>> + Send;

    /// Every rollout (engine start-up).
    fn load_all(&self) -> impl Future<Output = Result<Vec<StoredRollout>, StoreError>> + Send;

    /// Commits one step in one transaction: the new status, its events (numbered after
    /// `last_event_seq`, without gaps), and the one-shot effects still to deliver (appended to
    /// those pending already). Returns the stored rollout after the commit.
    fn commit(
        &self,
        key: &RolloutKey,
        expected_version: u64,
        status: &RolloutStatus,
        events: &[Event],
        pending: &[Effect],
        now: Timestamp,
    ) -> impl Future<Output = Result<StoredRollout, StoreError>> + Send;

    /// Commits several steps (of different rollouts) with one durable write: each item is checked
    /// and applied as [`Store::commit`] would, and fails alone (a conflicting item changes
    /// nothing, the others are committed). Returns one result per item, in order.
    ///
    /// This is how the engine keeps up with thousands of rollouts: an fsync per step would cap it
    /// at the disk's sync rate. The default commits the items one by one.
    fn commit_batch(
        &self,
        items: Vec<CommitItem>,
    ) -> impl Future<Output = Vec<Result<StoredRollout, StoreError>>> + Send {
        async move {
            let mut results = Vec::with_capacity(items.len());
            for item in items {
                results.push(
                    self.commit(
                        &item.key,
                        item.expected_version,
                        &item.status,
                        &item.events,
                        &item.pending,
                        item.now,
                    )
                    .await,
                );
            }
            results
        }
    }

    /// Removes delivered one-shot effects, named by their delivery ids. Does not bump the version
    /// (it changes nothing a reader acts on) and ignores ids that are not pending.
    fn clear_pending(
        &self,
        key: &RolloutKey,
        delivery_ids: &[String],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes a rollout and its events.
    fn delete(
        &self,
        key: &RolloutKey,
        expected_version: Option<u64>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Who owns the rollout, when several instances share the store (docs/SCALE-OUT.md):
    /// its lease. `None` for a store that is not shared (SQLite: the one process owns all).
    fn owner_of(
        &self,
        key: &RolloutKey,
    ) -> impl Future<Output = Result<Option<Lease>, StoreError>> + Send {
        let _ = key;
        async { Ok(None) }
    }

    /// Events after `after_seq`, oldest first, at most `limit` (capped at [`MAX_PAGE`]; 0 means
    /// [`DEFAULT_PAGE`]).
    fn events(
        &self,
        key: &RolloutKey,
        after_seq: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<StoredEvent>, StoreError>> + Send;
}

// === flags ===

/// Namespace and key: a flag's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FlagKey {
    /// The namespace (`default` when the document names none).
    pub namespace: String,
    /// The flag's key (its `metadata.name`).
    pub key: String,
}

impl FlagKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, key: impl Into<String>) -> FlagKey {
        FlagKey {
            namespace: namespace.into(),
            key: key.into(),
        }
    }

    /// The key of a flag document.
    pub fn of(flag: &Flag) -> FlagKey {
        FlagKey::new(
            flag.metadata.namespace_or_default(),
            flag.metadata.name.clone(),
        )
    }
}

impl fmt::Display for FlagKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.key)
    }
}

/// A flag as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredFlag {
    /// Its identity.
    pub key: FlagKey,
    /// The document as applied.
    pub flag: Flag,
    /// Bumped by every change (optimistic concurrency, and the OFREP ETag).
    pub version: u64,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// Why a flag could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagStoreError {
    /// No such flag.
    #[error("flag {0} not found")]
    NotFound(FlagKey),
    /// Someone else wrote since the caller read.
    #[error("flag {key} was changed concurrently (expected version {expected}, found {actual})")]
    Conflict {
        /// The flag.
        key: FlagKey,
        /// The version the caller read.
        expected: u64,
        /// The version stored now.
        actual: u64,
    },
    /// A create was asked for (`expected_version: Some(0)`) but the flag exists.
    #[error("flag {0} already exists")]
    AlreadyExists(FlagKey),
    /// The database failed (or holds what cannot be read back).
    #[error("database error: {0}")]
    Database(String),
    /// The database cannot be reached now (see [`StoreError::Unavailable`]).
    #[error("{0}")]
    Unavailable(String),
}

/// Where flags live. Implemented by [`SqliteStore`] and [`PostgresStore`] (the operator keeps no
/// flags).
pub trait FlagStore: Clone + Send + Sync + 'static {
    /// Creates or replaces a flag. `expected_version`: `None` any, `Some(0)` create only, `Some(v)`
    /// only if the stored version is `v`. An identical document writes nothing (`Unchanged`).
    fn put_flag(
        &self,
        flag: &Flag,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> impl Future<Output = Result<(StoredFlag, ApplyOutcome), FlagStoreError>> + Send;

    /// One flag.
    fn get_flag(
        &self,
        key: &FlagKey,
    ) -> impl Future<Output = Result<Option<StoredFlag>, FlagStoreError>> + Send;

    /// Every flag, ordered by namespace and key (flags are few; callers filter and page).
    fn list_flags(&self) -> impl Future<Output = Result<Vec<StoredFlag>, FlagStoreError>> + Send;

    /// Deletes a flag (`expected_version` as for [`FlagStore::put_flag`]).
    fn delete_flag(
        &self,
        key: &FlagKey,
        expected_version: Option<u64>,
    ) -> impl Future<Output = Result<(), FlagStoreError>> + Send;

    /// Records a change of a flag in its history (kept after the flag is deleted).
    fn record_flag_change(
        &self,
        change: &NewFlagChange,
    ) -> impl Future<Output = Result<u64, FlagStoreError>> + Send;

    /// Flag `key`'s history, newest first: at most `limit` changes with ids below `before`.
    fn flag_history(
        &self,
        key: &FlagKey,
        limit: usize,
        before: Option<u64>,
    ) -> impl Future<Output = Result<Vec<StoredFlagChange>, FlagStoreError>> + Send;

    /// Adds `counts` to the stored counts (per flag, variation and minute), in one transaction.
    fn add_evaluation_counts(
        &self,
        counts: &[EvaluationCount],
    ) -> impl Future<Output = Result<(), FlagStoreError>> + Send;

    /// Drops the counts of minutes before `minute`.
    fn prune_evaluation_counts(
        &self,
        minute: i64,
    ) -> impl Future<Output = Result<(), FlagStoreError>> + Send;

    /// Flag `key`'s counts from minute `since` on, by minute and variation.
    fn evaluation_counts(
        &self,
        key: &FlagKey,
        since: i64,
    ) -> impl Future<Output = Result<Vec<EvaluationCount>, FlagStoreError>> + Send;

    /// Stores a new trigger.
    fn create_trigger(
        &self,
        trigger: &NewFlagTrigger,
    ) -> impl Future<Output = Result<(), FlagStoreError>> + Send;

    /// Flag `key`'s triggers, oldest first.
    fn list_triggers(
        &self,
        key: &FlagKey,
    ) -> impl Future<Output = Result<Vec<StoredFlagTrigger>, FlagStoreError>> + Send;

    /// The trigger `id`.
    fn get_trigger(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<StoredFlagTrigger>, FlagStoreError>> + Send;

    /// Deletes flag `key`'s trigger `id`; false when there is none.
    fn delete_trigger(
        &self,
        key: &FlagKey,
        id: &str,
    ) -> impl Future<Output = Result<bool, FlagStoreError>> + Send;

    /// Counts one use of trigger `id` at `at`.
    fn trigger_used(
        &self,
        id: &str,
        at: Timestamp,
    ) -> impl Future<Output = Result<(), FlagStoreError>> + Send;
}
