//! weir-flags: feature flags in a running server.
//!
//! [`Flags`] is the only writer of flags (the REST API and, later, flag rollouts write through
//! it, one write at a time), and keeps an in-memory [`Snapshot`] of every flag, compiled for
//! evaluation, that it replaces as a whole after each committed write (`arc-swap`, as the
//! router's table): OFREP evaluations read the snapshot and never touch the store. Every change
//! is also announced on a broadcast channel (for SSE notifications). [`FlagTargets`] is the
//! engine's `flag` target: flag rollouts change a flag's weights through [`Flags`].
//!
//! While a rollout runs, the weights in force are part of the rollout's status, committed in
//! the same transaction as the step (and the schedule entry's `triggeredAt`) that set them;
//! the snapshot lays them over the stored flag's default strategy (its *rollout strategy*),
//! so a step costs no write of its own. When the run ends (promoted, rolled back, stopped,
//! deleted) the final strategy is written to the flag and the overlay dropped.
//!
//! Beside each flag, in memory only, [`Flags`] counts what its variations served: exposures
//! (OFREP evaluations, [`Entry::count_exposure`]) and the outcomes applications report
//! ([`Flags::report`]); a guarded flag rollout's judges read them (`outcomes.rs`).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;

mod chunked;
mod evaluations;
pub mod history;
mod metrics;
mod mirror;
mod outcomes;
mod target;

use arc_swap::ArcSwap;
use jiff::Timestamp;
use tokio::sync::{Mutex, broadcast};
use weir_core::FieldError;
use weir_core::flag::CompiledFlag;
use weir_core::model::{Flag, Strategy};
use weir_store::{
    ApplyOutcome, FlagKey, FlagStore, FlagStoreError, NewFlagChange, RolloutKey, StoredFlag,
    StoredFlagChange,
};

pub use evaluations::{EVALUATIONS_KEPT_MINUTES, MinuteCounts, minute_of};
pub use mirror::FlagMirror;
pub use outcomes::{LATENCY_BUCKETS, MAX_REQUESTS_PER_REPORT, Outcome, Report, VariationCounts};
pub use target::FlagTargets;

use chunked::ChunkedMap;
use outcomes::{FlagCounters, Refused};

/// A flag as evaluations see it.
#[derive(Debug)]
pub struct Entry {
    /// The flag as stored (its version is part of the bulk ETag).
    pub stored: StoredFlag,
    /// The default strategy a running rollout has in force in place of the stored one.
    pub rollout_strategy: Option<Strategy>,
    /// Ready for evaluation (with the rollout strategy, when there is one).
    pub compiled: CompiledFlag,
    /// What the bulk ETag takes from this flag: its key, version and rollout strategy.
    tag: String,
    /// What its variations served (handed on to the entry that replaces this one).
    counters: Arc<FlagCounters>,
}

impl Entry {
    /// The flag as evaluations see it: the stored one with the rollout strategy in force.
    pub fn effective(&self) -> Flag {
        let mut flag = self.stored.flag.clone();
        if let Some(strategy) = &self.rollout_strategy {
            flag.spec.default_strategy = strategy.clone();
        }
        flag
    }

    /// Counts one evaluation that served `variant` (an OFREP answer): one relaxed atomic add,
    /// no lock, so evaluations never wait on reports or judges. An unknown name is ignored.
    pub fn count_exposure(&self, variant: &str) {
        self.counters.expose(variant);
    }
}

/// Every flag at one moment, by namespace and key. A change makes a new snapshot that shares
/// every flag it does not change with this one (`chunked.rs`), so a step of a flag rollout
/// costs the same with 10 flags or 10,000.
#[derive(Debug, Default)]
pub struct Snapshot {
    flags: ChunkedMap<Arc<Entry>>,
    /// Bumped by every change: with the namespace, the bulk evaluation's ETag.
    generation: u64,
}

impl Snapshot {
    /// The flag `key` in `namespace`.
    pub fn get(&self, namespace: &str, key: &str) -> Option<&Arc<Entry>> {
        self.flags.get(&FlagKey::new(namespace, key))
    }

    /// The flags of `namespace`, by key.
    pub fn namespace<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Arc<Entry>> {
        self.flags
            .range_from(&FlagKey::new(namespace, ""))
            .take_while(move |(key, _)| key.namespace == namespace)
            .map(|(_, entry)| entry)
    }

    /// Every flag, by namespace and key.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.flags.iter().map(|(_, entry)| entry)
    }

    /// An ETag for what [`Snapshot::namespace`] returns: the versions of its flags.
    pub fn etag(&self, namespace: &str) -> String {
        let versions: Vec<String> = self
            .namespace(namespace)
            .map(|entry| entry.tag.clone())
            .collect();
        let digest = weir_core::revision::of_definition(&serde_json::Value::from(versions));
        format!("\"{digest}\"")
    }

    /// Bumped by every change.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// A committed change of a flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagChange {
    /// Which flag.
    pub key: FlagKey,
    /// Its version after the change (`None`: deleted).
    pub version: Option<u64>,
}

/// Why a flag write was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FlagError {
    /// The document breaks rules: every problem with its path.
    #[error("invalid flag: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] FlagStoreError),
    /// The change would pull the variations from under a running rollout.
    #[error("{0}")]
    RolledOut(String),
}

/// Why a report of outcomes was refused (nothing of it was counted).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReportError {
    /// No such flag.
    #[error("flag {0} not found")]
    NotFound(FlagKey),
    /// Counts that contradict themselves (more errors than requests, ...) or exceed the
    /// bounds: every problem with its path (`variants.NAME.FIELD`).
    #[error("invalid report: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    /// Variations the flag does not have, each with the flag's variations.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    UnknownVariations(Vec<FieldError>),
}

/// The flags of a server: the store, the snapshot, the changes.
#[derive(Clone)]
pub struct Flags<S: FlagStore> {
    store: S,
    snapshot: Arc<ArcSwap<Snapshot>>,
    /// One write at a time, so the snapshot is always built from the latest committed state.
    writing: Arc<Mutex<()>>,
    changes: broadcast::Sender<FlagChange>,
    /// The flags a rollout is moving, and which rollout (one at a time per flag).
    rolled_out: Arc<std::sync::Mutex<BTreeMap<FlagKey, RolloutKey>>>,
    /// The strategies running rollouts have in force; changed only under `writing`.
    rollout_strategies: Arc<std::sync::Mutex<BTreeMap<FlagKey, Strategy>>>,
    /// What the evaluation counts last written to the store had read (`evaluations.rs`).
    flushed: Arc<Mutex<evaluations::Flushed>>,
}

impl<S: FlagStore> Flags<S> {
    /// The flags stored in `store`, loaded into a snapshot.
    pub async fn open(store: S) -> Result<Flags<S>, FlagError> {
        let flags = Flags {
            store,
            snapshot: Arc::new(ArcSwap::from_pointee(Snapshot::default())),
            writing: Arc::new(Mutex::new(())),
            changes: broadcast::channel(1024).0,
            rolled_out: Arc::default(),
            rollout_strategies: Arc::default(),
            flushed: Arc::default(),
        };
        let all = flags.store.list_flags().await?;
        flags.snapshot.store(Arc::new(Snapshot {
            flags: ChunkedMap::from_entries(
                all.into_iter()
                    .map(|stored| (stored.key.clone(), Arc::new(entry(stored, None, None))))
                    .collect(),
            ),
            generation: 1,
        }));
        Ok(flags)
    }

    /// Every flag now (cheap: a pointer copy).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// Changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<FlagChange> {
        self.changes.subscribe()
    }

    /// The store (for reads that want creation times and versions).
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Validates and stores `flag` (`expected_version` as in [`FlagStore::put_flag`]), then
    /// makes it visible to evaluations. Recorded in the flag's history with actor `weir`.
    pub async fn apply(
        &self,
        flag: Flag,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> Result<(StoredFlag, ApplyOutcome), FlagError> {
        self.apply_as(flag, expected_version, now, "weir").await
    }

    /// [`Flags::apply`], recording `actor` (a token's name) in the flag's history.
    pub async fn apply_as(
        &self,
        flag: Flag,
        expected_version: Option<u64>,
        now: Timestamp,
        actor: &str,
    ) -> Result<(StoredFlag, ApplyOutcome), FlagError> {
        let errors = weir_core::validate::flag(&flag);
        if !errors.is_empty() {
            return Err(FlagError::Invalid(errors));
        }
        let _writing = self.writing.lock().await;
        let key = FlagKey::of(&flag);
        if let Some(rollout) = self.rollout_of(&key)
            && let Some(current) = self.snapshot().get(&key.namespace, &key.key)
            && current.stored.flag.spec.variations != flag.spec.variations
        {
            return Err(FlagError::RolledOut(format!(
                "flag {key} is being rolled out by {rollout}: its variations cannot change until that rollout ends (or is deleted)"
            )));
        }
        let mut flag = flag;
        if let Some(rollout) = self.rollout_of(&key)
            && let Some(current) = self.snapshot().get(&key.namespace, &key.key)
        {
            // What a GET shows (and so a GET, edited and PUT, sends back) is the strategy the
            // rollout has in force: that is no change of the stored one.
            if current.rollout_strategy.as_ref() == Some(&flag.spec.default_strategy) {
                flag.spec.default_strategy = current.stored.flag.spec.default_strategy.clone();
            }
            if current.stored.flag.spec.default_strategy != flag.spec.default_strategy {
                return Err(FlagError::RolledOut(format!(
                    "flag {key} is being rolled out by {rollout}: its default strategy is what that \
                 rollout moves and cannot change until it ends (or is deleted)"
                )));
            }
        }
        let before = self
            .snapshot()
            .get(&key.namespace, &key.key)
            .map(|entry| entry.stored.flag.clone());
        let (stored, outcome) = self.store.put_flag(&flag, expected_version, now).await?;
        if outcome != ApplyOutcome::Unchanged {
            self.publish(stored.key.clone(), Some(stored.clone()));
            let before = before.filter(|_| outcome == ApplyOutcome::Updated);
            self.record(&key, before.as_ref(), Some(&stored), now, actor, None, None)
                .await;
        }
        Ok((stored, outcome))
    }

    /// Records a change of flag `key` from `before` into `after` in its history. A failure is
    /// logged, never the change's: the flag is written by then.
    #[allow(clippy::too_many_arguments)]
    async fn record(
        &self,
        key: &FlagKey,
        before: Option<&Flag>,
        after: Option<&StoredFlag>,
        at: Timestamp,
        actor: &str,
        action: Option<&str>,
        address: Option<String>,
    ) {
        let changes = history::diff(before, after.map(|stored| &stored.flag));
        let action = action.map_or_else(
            || history::action(before, after.map(|stored| &stored.flag), &changes),
            str::to_string,
        );
        let change = NewFlagChange {
            key: key.clone(),
            at,
            actor: actor.to_string(),
            action,
            version: after.map(|stored| stored.version),
            address,
            changes,
        };
        if let Err(error) = self.store.record_flag_change(&change).await {
            tracing::warn!(flag = %key, %error, "the change of a flag was not recorded in its history");
        }
    }

    /// Flag `key`'s history, newest first: at most `limit` changes older than the change
    /// `before` (a page's last id).
    pub async fn history(
        &self,
        key: &FlagKey,
        limit: usize,
        before: Option<u64>,
    ) -> Result<Vec<StoredFlagChange>, FlagError> {
        Ok(self.store.flag_history(key, limit, before).await?)
    }

    /// Turns flag `key` on or off (a trigger's use: `actor` names it, `address` the caller),
    /// recorded in its history with `action` even when the flag already was so.
    pub async fn set_enabled(
        &self,
        key: &FlagKey,
        enabled: bool,
        now: Timestamp,
        actor: &str,
        action: &str,
        address: Option<String>,
    ) -> Result<StoredFlag, FlagError> {
        let _writing = self.writing.lock().await;
        let Some(current) = self.snapshot().get(&key.namespace, &key.key).cloned() else {
            return Err(FlagError::Store(FlagStoreError::NotFound(key.clone())));
        };
        let mut flag = current.stored.flag.clone();
        flag.spec.enabled = enabled;
        let (stored, outcome) = self
            .store
            .put_flag(&flag, Some(current.stored.version), now)
            .await?;
        if outcome != ApplyOutcome::Unchanged {
            self.publish(key.clone(), Some(stored.clone()));
        }
        self.record(
            key,
            Some(&current.stored.flag),
            Some(&stored),
            now,
            actor,
            Some(action),
            address,
        )
        .await;
        Ok(stored)
    }

    /// Counts what an application reports about flag `key`'s variations since its previous
    /// report: all of it, or nothing when a count is wrong or a variation unknown. Takes the
    /// flag's short report lock, never the store or the write lock: reports do not wait on
    /// flag changes.
    pub fn report(&self, key: &FlagKey, report: &Report) -> Result<(), ReportError> {
        let snapshot = self.snapshot();
        let entry = snapshot
            .get(&key.namespace, &key.key)
            .ok_or_else(|| ReportError::NotFound(key.clone()))?;
        entry.counters.add(report).map_err(|refused| match refused {
            Refused::Invalid(errors) => ReportError::Invalid(errors),
            Refused::UnknownVariations(errors) => ReportError::UnknownVariations(errors),
        })
    }

    /// What flag `key`'s variations served since the server started, by variation name (every
    /// report whole); `None` when there is no such flag.
    pub fn counts(&self, key: &FlagKey) -> Option<BTreeMap<String, VariationCounts>> {
        self.snapshot()
            .get(&key.namespace, &key.key)
            .map(|entry| entry.counters.read())
    }

    /// The rollout moving flag `key`, if one is.
    pub fn rollout_of(&self, key: &FlagKey) -> Option<RolloutKey> {
        self.rolled_out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    /// Records that `rollout` moves flag `key` (or, with `moving: false`, no longer does).
    pub(crate) fn mark_rolled_out(&self, key: FlagKey, rollout: &RolloutKey, moving: bool) {
        let mut held = self
            .rolled_out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if moving {
            held.insert(key, rollout.clone());
        } else if held.get(&key) == Some(rollout) {
            held.remove(&key);
        }
    }

    /// Forgets every flag `rollout` held (it is deleted).
    pub(crate) fn release(&self, rollout: &RolloutKey) {
        self.rolled_out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, holder| holder != rollout);
    }

    /// Puts `strategy` in force for flag `key` in place of its stored default strategy, in
    /// memory only: the rollout's committed status is what makes it durable (a restart
    /// reconciles it back). Returns false when the flag does not exist.
    pub(crate) async fn set_rollout_strategy(&self, key: &FlagKey, strategy: Strategy) -> bool {
        let _writing = self.writing.lock().await;
        let Some(current) = self.snapshot().get(&key.namespace, &key.key).cloned() else {
            return false;
        };
        if current.rollout_strategy.as_ref() == Some(&strategy) {
            return true;
        }
        self.strategies().insert(key.clone(), strategy);
        self.publish(key.clone(), Some(current.stored.clone()));
        true
    }

    /// Ends a rollout's hold on flag `key`: writes `strategy` as its default strategy (when it
    /// differs from the stored one) and drops the rollout strategy, in one snapshot change.
    pub(crate) async fn settle(&self, key: &FlagKey, strategy: Strategy) -> Result<(), FlagError> {
        let _writing = self.writing.lock().await;
        let Some(current) = self.snapshot().get(&key.namespace, &key.key).cloned() else {
            self.strategies().remove(key);
            return Err(FlagError::Store(FlagStoreError::NotFound(key.clone())));
        };
        let stored = if current.stored.flag.spec.default_strategy == strategy {
            if current.rollout_strategy.is_none() {
                return Ok(());
            }
            current.stored.clone()
        } else {
            let mut flag = current.stored.flag.clone();
            flag.spec.default_strategy = strategy;
            let now = Timestamp::now();
            let stored = self
                .store
                .put_flag(&flag, Some(current.stored.version), now)
                .await?
                .0;
            let actor = match self.rollout_of(key) {
                Some(rollout) => format!("rollout {rollout}"),
                None => "rollout".to_string(),
            };
            self.record(
                key,
                Some(&current.stored.flag),
                Some(&stored),
                now,
                &actor,
                Some("rollout"),
                None,
            )
            .await;
            stored
        };
        self.strategies().remove(key);
        self.publish(key.clone(), Some(stored));
        Ok(())
    }

    /// Drops the strategy a rollout had in force for flag `key` (its run ended on another
    /// instance, which writes the final strategy to the flag).
    pub(crate) async fn drop_rollout_strategy(&self, key: &FlagKey) {
        let _writing = self.writing.lock().await;
        if self.strategies().remove(key).is_none() {
            return;
        }
        if let Some(current) = self.snapshot().get(&key.namespace, &key.key).cloned() {
            self.publish(key.clone(), Some(current.stored.clone()));
        }
    }

    /// The flags `rollout` moves.
    pub(crate) fn flags_of(&self, rollout: &RolloutKey) -> Vec<FlagKey> {
        self.rolled_out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, holder)| *holder == rollout)
            .map(|(flag, _)| flag.clone())
            .collect()
    }

    /// Reads flag `key` again from the store (another instance changed it).
    pub async fn reload(&self, key: &FlagKey) -> Result<(), FlagError> {
        let _writing = self.writing.lock().await;
        let stored = self.store.get_flag(key).await?;
        let current = self.snapshot();
        let known = current
            .get(&key.namespace, &key.key)
            .map(|entry| entry.stored.version);
        if known == stored.as_ref().map(|stored| stored.version) {
            return Ok(());
        }
        self.publish(key.clone(), stored);
        Ok(())
    }

    /// Reads every flag again from the store (notifications from other instances were missed).
    pub async fn reload_all(&self) -> Result<(), FlagError> {
        let all = self.store.list_flags().await?;
        let current = self.snapshot();
        let stored: BTreeMap<FlagKey, u64> = all
            .iter()
            .map(|flag| (flag.key.clone(), flag.version))
            .collect();
        for entry in current.all() {
            if !stored.contains_key(&entry.stored.key) {
                self.reload(&entry.stored.key).await?;
            }
        }
        for flag in all {
            let known = current
                .get(&flag.key.namespace, &flag.key.key)
                .map(|entry| entry.stored.version);
            if known != Some(flag.version) {
                self.reload(&flag.key).await?;
            }
        }
        Ok(())
    }

    fn strategies(&self) -> std::sync::MutexGuard<'_, BTreeMap<FlagKey, Strategy>> {
        self.rollout_strategies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Deletes the flag `key` (not while a rollout moves it); recorded with actor `weir`.
    pub async fn delete(
        &self,
        key: &FlagKey,
        expected_version: Option<u64>,
    ) -> Result<(), FlagError> {
        self.delete_as(key, expected_version, "weir").await
    }

    /// [`Flags::delete`], recording `actor` in the flag's history.
    pub async fn delete_as(
        &self,
        key: &FlagKey,
        expected_version: Option<u64>,
        actor: &str,
    ) -> Result<(), FlagError> {
        let _writing = self.writing.lock().await;
        if let Some(rollout) = self.rollout_of(key) {
            return Err(FlagError::RolledOut(format!(
                "flag {key} is being rolled out by {rollout}: delete or finish that rollout first"
            )));
        }
        let before = self
            .snapshot()
            .get(&key.namespace, &key.key)
            .map(|entry| entry.stored.flag.clone());
        self.store.delete_flag(key, expected_version).await?;
        self.publish(key.clone(), None);
        self.record(
            key,
            before.as_ref(),
            None,
            Timestamp::now(),
            actor,
            Some("deleted"),
            None,
        )
        .await;
        Ok(())
    }

    /// Replaces the snapshot with `key` changed to `stored` (or removed) and announces it.
    fn publish(&self, key: FlagKey, stored: Option<StoredFlag>) {
        let current = self.snapshot.load();
        let version = stored.as_ref().map(|stored| stored.version);
        let flags = match stored {
            Some(stored) => {
                // The counters go on with the flag: a change of weights mid-run keeps them.
                let previous = current
                    .flags
                    .get(&key)
                    .map(|entry| Arc::clone(&entry.counters));
                let strategy = self.strategies().get(&key).cloned();
                let entry = Arc::new(entry(stored, strategy, previous.as_ref()));
                current.flags.with(key.clone(), Some(entry))
            }
            None => current.flags.with(key.clone(), None),
        };
        self.snapshot.store(Arc::new(Snapshot {
            flags,
            generation: current.generation + 1,
        }));
        // Nobody listening is fine.
        let _ = self.changes.send(FlagChange { key, version });
    }
}

fn entry(
    stored: StoredFlag,
    rollout_strategy: Option<Strategy>,
    counters: Option<&Arc<FlagCounters>>,
) -> Entry {
    let mut tag = format!("{}.{}", stored.key.key, stored.version);
    let mut flag = stored.flag.clone();
    if let Some(strategy) = &rollout_strategy {
        tag.push('.');
        tag.push_str(&weir_core::revision::of_definition(
            &serde_json::to_value(strategy).unwrap_or_default(),
        ));
        flag.spec.default_strategy = strategy.clone();
    }
    Entry {
        counters: FlagCounters::for_flag(&stored.flag, counters),
        compiled: CompiledFlag::new(flag),
        stored,
        rollout_strategy,
        tag,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;
