//! Several instances sharing one database: who owns which rollout (leases with fencing), requests
//! forwarded to a rollout's owner, and notifications between instances. Implemented by
//! [`crate::PostgresStore`]; docs/SCALE-OUT.md explains the design.
//!
//! Every rollout has one lease row, created with the rollout (unowned, epoch 0, or owned at once
//! by the instance that created it) and deleted with it. An instance *claims* unowned or expired
//! leases (each claim bumps the epoch), *renews* the leases it holds well before they expire, and
//! *releases* them when it leaves or holds more than its share. Once a store has joined a cluster,
//! every write to an existing rollout checks, in its own transaction, that this instance still
//! holds the lease at the epoch it claimed; otherwise it fails with
//! [`crate::StoreError::Fenced`] and changes nothing. Lease times come from the database's
//! clock, so instances with skewed clocks agree on expiry.

use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{RolloutKey, Store, StoreError};

/// One rollout's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// The rollout.
    pub key: RolloutKey,
    /// The instance holding it (`None`: unowned).
    pub owner: Option<String>,
    /// Bumped by every claim; commits are fenced on it.
    pub epoch: u64,
    /// The host label a local rollout is bound to (only instances with this label may own it);
    /// `None`: any instance may.
    pub host: Option<String>,
    /// When the current owner claimed it.
    pub acquired_at: Option<Timestamp>,
    /// When the current owner last renewed it.
    pub renewed_at: Option<Timestamp>,
    /// When it lapses unless renewed.
    pub expires_at: Option<Timestamp>,
    /// On a claim: the owner it was taken from (a takeover), `None` when it was unowned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_owner: Option<String>,
}

/// How leases are spread, as the database sees it now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseSummary {
    /// Rollouts this instance may own (not bound to another host).
    pub claimable_total: u64,
    /// Of those, how many nobody holds (unowned or expired).
    pub free: u64,
    /// Live leases per owner (instance id, count).
    pub by_owner: Vec<(String, u64)>,
    /// Instances that sent a heartbeat within the lease time (their ids).
    pub live_instances: Vec<String>,
}

/// A request forwarded to a rollout's owner, not answered yet.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingRequest {
    /// Its id (also the id a commit carries in [`crate::CommitItem::request`]).
    pub id: i64,
    /// The rollout.
    pub key: RolloutKey,
    /// What to do (the engine's JSON).
    pub body: serde_json::Value,
    /// Whether a commit already executed it (its owner died before answering): answer it, do
    /// not execute it again.
    pub executed: bool,
}

/// A notification from another instance (PostgreSQL LISTEN/NOTIFY).
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// A rollout was written (`version` 0: deleted) by instance `by`.
    RolloutChanged {
        /// The rollout.
        key: RolloutKey,
        /// Its version after the write; 0 when deleted.
        version: u64,
        /// Its last event's sequence number after the write.
        last_event_seq: u64,
        /// The instance that wrote it.
        by: String,
    },
    /// A flag was written (`version` 0: deleted) by instance `by`.
    FlagChanged {
        /// Namespace.
        namespace: String,
        /// The flag's key.
        key: String,
        /// Its version after the write; 0 when deleted.
        version: u64,
        /// The instance that wrote it.
        by: String,
    },
    /// A request was submitted for a rollout.
    RequestSubmitted {
        /// The request.
        id: i64,
        /// The rollout.
        key: RolloutKey,
    },
    /// A request was answered.
    RequestAnswered {
        /// The request.
        id: i64,
    },
    /// Leases were released or a rollout was created: claimable work may be waiting.
    LeasesFreed,
    /// A token was created or revoked (by instance `by`, or by `weir token`): a server that
    /// keeps the tokens in memory reads them again.
    TokensChanged {
        /// The instance that wrote it.
        by: String,
    },
    /// The listening connection was lost and re-established: notifications may have been
    /// missed, so a listener should re-read what it caches.
    Reconnected,
}

/// Ownership of rollouts among several instances (see the module documentation).
///
/// The store knows its own instance id and host label from when it was opened.
pub trait Cluster: Store {
    /// This instance's id (unique per process start).
    fn instance_id(&self) -> &str;

    /// This instance's host label (local rollouts it creates are bound to it).
    fn host_label(&self) -> &str;

    /// The leases this instance holds now (key and epoch), as it last claimed, created or
    /// renewed them.
    fn held_leases(&self) -> Vec<(RolloutKey, u64)>;

    /// Joins the cluster: from now on writes to existing rollouts are fenced, and rollouts this
    /// instance creates are leased to it at once. Records (and refreshes, when called again) this
    /// instance's heartbeat row with its API address, e.g. `http://10.0.0.5:7979`.
    fn heartbeat(
        &self,
        api: Option<&str>,
        lease_time: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Claims up to `max` leases nobody holds (unowned, or expired by the database's clock) that
    /// this instance may hold (not bound to another host label), `FOR UPDATE SKIP LOCKED` so
    /// instances claiming at once take different rows. Each claim bumps the epoch and lasts
    /// `lease_time`. Returns the leases won.
    fn claim(
        &self,
        max: usize,
        lease_time: Duration,
    ) -> impl Future<Output = Result<Vec<Lease>, StoreError>> + Send;

    /// Extends every lease this instance holds by `lease_time` from now. Returns the keys it
    /// held but lost (taken over after expiring, or gone with their rollout); those are no
    /// longer written by this instance (fenced).
    fn renew(
        &self,
        lease_time: Duration,
    ) -> impl Future<Output = Result<Vec<RolloutKey>, StoreError>> + Send;

    /// Gives up these leases (unowned at once, epoch kept) and notifies the others.
    fn release(&self, keys: &[RolloutKey]) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Gives up every lease and removes this instance's heartbeat row (a clean leave).
    fn leave(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// One rollout's lease.
    fn lease(
        &self,
        key: &RolloutKey,
    ) -> impl Future<Output = Result<Option<Lease>, StoreError>> + Send;

    /// How leases are spread now.
    fn lease_summary(
        &self,
        lease_time: Duration,
    ) -> impl Future<Output = Result<LeaseSummary, StoreError>> + Send;

    /// Records a request for a rollout's owner and notifies every instance; returns its id.
    fn submit_request(
        &self,
        key: &RolloutKey,
        body: &serde_json::Value,
    ) -> impl Future<Output = Result<i64, StoreError>> + Send;

    /// Unanswered requests for rollouts this instance holds, oldest first.
    fn pending_requests(
        &self,
    ) -> impl Future<Output = Result<Vec<PendingRequest>, StoreError>> + Send;

    /// Records the answer to a request (once; a second answer is ignored) and notifies every
    /// instance. Marks it executed too.
    fn answer_request(
        &self,
        id: i64,
        answer: &serde_json::Value,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// A request's answer, once there is one.
    fn request_answer(
        &self,
        id: i64,
    ) -> impl Future<Output = Result<Option<serde_json::Value>, StoreError>> + Send;

    /// Notifications from every instance (this one's included), on a dedicated connection that
    /// is re-established when lost ([`Notice::Reconnected`] then). Each call opens its own.
    fn notices(
        &self,
    ) -> impl Future<Output = Result<tokio::sync::mpsc::Receiver<Notice>, StoreError>> + Send;
}
