//! The scheduler: one timer queue and one loop for every rollout.
//!
//! Flagger and Argo Rollouts run a goroutine and a ticker per resource, which is how they run out
//! of breath at a few thousand. Here one task owns every rollout's schedule; the work of a tick
//! (observe, call hooks, read metrics, commit, apply effects) runs as a job on the runtime, at most
//! one job per rollout at a time (later requests for the same rollout queue behind it), and at most
//! `max_concurrent_jobs` jobs overall.
//!
//! Every job follows the same order: compute the transition with `weir_core::machine::step`,
//! commit the status, its events and its one-shot effects in one store transaction, and only then
//! apply the effects. A crash between the commit and the effects loses nothing: at start-up every
//! stored status is reconciled (its desired state re-applied) and pending one-shot effects are
//! delivered again.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use weir_core::FieldError;
use weir_core::machine::{self, Command, CommandInput, Effect, Input, Observations, Transition};
use weir_core::model::{CheckOutcome, CheckResult, Event, HookType, Rollout};
use weir_store::{CommitItem, RolloutKey, Store, StoreError, StoredEvent, StoredRollout};

use crate::clock::{SharedClock, SystemClock};
use crate::forward::Forwarded;
use crate::handle::{Applied, EngineError, EngineHandle, Request, StatusChange};
use crate::providers::{Providers, TargetObservation};
use crate::telemetry::Telemetry;

/// Tuning knobs.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// At most this many jobs (ticks, commands, applies) run at once.
    pub max_concurrent_jobs: usize,
    /// Capacity of the request queue from handles.
    pub request_queue: usize,
    /// Capacity of the status-change broadcast; slower subscribers miss changes.
    pub change_buffer: usize,
    /// Most steps written in one store transaction (group commit).
    pub max_commit_batch: usize,
    /// How often the judges that watch runs continuously are fed.
    pub judge_period: Duration,
    /// How long a notification that could not be delivered waits before a tick of its rollout
    /// tries it again (it stays pending in the store meanwhile, and across restarts).
    pub redelivery_pause: Duration,
    /// Where the engine's own metrics go (`None`: a fresh [`Telemetry`]); the engine handle
    /// exposes it either way. Give one to share a registry with other parts of a process.
    pub telemetry: Option<Telemetry>,
    /// Where every time the engine uses comes from: the system clock by default; tests give a
    /// [`crate::clock::ManualClock`] to move time instead of waiting for it.
    pub clock: SharedClock,
    /// Several instances on one database (docs/SCALE-OUT.md): `Some` makes this engine step
    /// only the rollouts it is given ([`crate::EngineHandle::adopt`]) instead of every stored
    /// one, and hand changes to rollouts it does not hold to their owners through this.
    pub forwarder: Option<Arc<dyn crate::forward::Forwarder>>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            max_concurrent_jobs: 512,
            request_queue: 1024,
            change_buffer: 4096,
            max_commit_batch: 256,
            judge_period: Duration::from_secs(1),
            redelivery_pause: Duration::from_secs(60),
            telemetry: None,
            clock: SystemClock::shared(),
            forwarder: None,
        }
    }
}

/// Counters about the engine itself (for benchmarks and, later, weir's own metrics).
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Ticks run.
    pub ticks: AtomicU64,
    /// Commits written.
    pub commits: AtomicU64,
    /// Sum of tick lateness (start minus due time), in microseconds.
    pub lateness_micros_total: AtomicU64,
    /// Largest tick lateness seen, in microseconds.
    pub lateness_micros_max: AtomicU64,
    /// Provider failures (observe, apply, reconcile).
    pub provider_errors: AtomicU64,
    /// Store transactions that carried those commits (group commit).
    pub commit_batches: AtomicU64,
    /// Commits refused because this instance no longer held the rollout's lease (fencing).
    pub fenced: AtomicU64,
}

/// What the engine is doing, as its loop last saw it (see [`Engine::activity`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// Jobs are running or requests are waiting, or a timer is due.
    Busy,
    /// Nothing runs and nothing is due: the engine waits for a request or for its clock to
    /// reach `next_wake` (`None`: no rollout wants a tick).
    Idle {
        /// The earliest wake-up in the timer queue.
        next_wake: Option<Timestamp>,
    },
}

impl Activity {
    /// Whether the engine has done everything due at `now`: idle, with its next wake-up
    /// later than `now`. A report from before the clock moved past its `next_wake` is not
    /// idle at the new time, so a test that moves a manual clock and waits for this waits for
    /// the work the move made due.
    pub fn is_idle_at(&self, now: Timestamp) -> bool {
        match self {
            Activity::Busy => false,
            Activity::Idle { next_wake } => next_wake.is_none_or(|at| at > now),
        }
    }
}

/// A sink for tick lateness samples (the scale benchmark collects them).
pub type LatenessSink = Arc<dyn Fn(Duration) + Send + Sync>;

/// The engine. Build it with [`Engine::new`], then drive it with [`Engine::run`].
pub struct Engine<S: Store> {
    store: S,
    providers: Providers,
    options: EngineOptions,
    entries: HashMap<RolloutKey, Entry>,
    timers: BinaryHeap<Reverse<(Timestamp, RolloutKey)>>,
    ready: VecDeque<RolloutKey>,
    jobs: JoinSet<JobDone>,
    requests: mpsc::Receiver<Request>,
    changes: broadcast::Sender<StatusChange>,
    stats: Arc<EngineStats>,
    lateness: Option<LatenessSink>,
    commits: mpsc::Sender<CommitRequest>,
    commit_queue: Option<mpsc::Receiver<CommitRequest>>,
    /// For the judge task, which sends its verdicts like any other request.
    verdicts: mpsc::Sender<Request>,
    watched: crate::judging::Watched,
    /// The judges' latest evidence of health per run, for the evidence rule.
    evidence: crate::judging::EvidenceReports,
    telemetry: Telemetry,
    failed_deliveries: FailedDeliveries,
    /// Reports of what the engine is doing, once someone asked for them.
    activity: Option<watch::Sender<Activity>>,
}

/// When each one-shot effect that could not be delivered last failed (by rollout and delivery
/// id), so a tick retries it once `EngineOptions::redelivery_pause` has passed instead of on
/// every tick: a notification provider that is down must not slow every analysis step.
type FailedDeliveries = Arc<std::sync::Mutex<HashMap<(RolloutKey, String), Timestamp>>>;

/// A step waiting for the group commit.
struct CommitRequest {
    item: CommitItem,
    reply: oneshot::Sender<Result<StoredRollout, StoreError>>,
}

/// Writes queued steps in batches: while one batch is being made durable, the next one gathers,
/// so under load many steps share one fsync and at low load a step waits for nothing.
async fn group_commit<S: Store>(
    store: S,
    mut queue: mpsc::Receiver<CommitRequest>,
    max_batch: usize,
    stats: Arc<EngineStats>,
    telemetry: Telemetry,
) {
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match queue.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        let (items, replies): (Vec<CommitItem>, Vec<_>) = batch
            .into_iter()
            .map(|request| (request.item, request.reply))
            .unzip();
        stats.commit_batches.fetch_add(1, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let results = store.commit_batch(items).await;
        telemetry.record_commit(started.elapsed());
        for (reply, result) in replies.into_iter().zip(results) {
            // The job may have gone away; nothing to tell then.
            let _ = reply.send(result);
        }
    }
}

#[derive(Default)]
struct Entry {
    stored: Option<StoredRollout>,
    wake_at: Option<Timestamp>,
    busy: bool,
    queued: VecDeque<Job>,
    tick_due: Option<Timestamp>,
    /// The last effect application failed: reconcile before the next tick.
    needs_reconcile: bool,
    /// Who waits for the entry to be dropped (its lease was given up): it is, once the job
    /// under way ends.
    releasing: Vec<oneshot::Sender<()>>,
}

enum Job {
    Restore,
    /// Load the rollout from the store, then as `Restore` (its lease was just claimed).
    Adopt {
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    Tick {
        due: Timestamp,
    },
    Apply {
        rollout: Box<Rollout>,
        expected_version: Option<u64>,
        actor: Option<String>,
        reply: oneshot::Sender<Result<Applied, EngineError>>,
    },
    Command {
        command: Command,
        actor: String,
        request: Option<i64>,
        reply: oneshot::Sender<Result<StoredRollout, EngineError>>,
    },
    Delete {
        expected_version: Option<u64>,
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    Verdict {
        run: u64,
        verdict: weir_core::model::JudgeVerdict,
    },
    /// The target failed permanently during run `run`.
    TargetFailed {
        run: u64,
        reason: String,
    },
}

struct JobDone {
    key: RolloutKey,
    /// The rollout after the job (`None`: deleted, or never created).
    stored: Option<StoredRollout>,
    /// When it next wants a tick.
    wake_at: Option<Timestamp>,
    /// What to broadcast.
    change: Option<StatusChange>,
    /// Whether an effect failed to apply.
    needs_reconcile: bool,
    /// The run and the reason, when the target failed in a way retrying cannot fix: a job of
    /// its own then tells the machine (after this job's commit, which already happened).
    target_failed: Option<(u64, String)>,
    /// The store refused the commit because another instance holds the lease now: the entry
    /// is dropped.
    lost: bool,
    /// Why the step's commit failed, when it did.
    commit_failure: Option<StoreError>,
}

impl<S: Store> Engine<S> {
    /// An engine over `store` with `providers`, and a handle to it.
    pub fn new(
        store: S,
        providers: Providers,
        options: EngineOptions,
    ) -> (Engine<S>, EngineHandle) {
        let (request_tx, requests) = mpsc::channel(options.request_queue.max(1));
        let (changes, _) = broadcast::channel(options.change_buffer.max(1));
        let (commits, commit_queue) = mpsc::channel(options.max_commit_batch.max(1) * 4);
        let request_tx_for_judges = request_tx.clone();
        let telemetry = options.telemetry.clone().unwrap_or_default();
        for (_, target) in &providers.targets {
            target.register_metrics(&telemetry);
        }
        let handle = EngineHandle {
            requests: request_tx,
            changes: changes.clone(),
            telemetry: telemetry.clone(),
        };
        let engine = Engine {
            store,
            providers,
            options,
            entries: HashMap::new(),
            timers: BinaryHeap::new(),
            ready: VecDeque::new(),
            jobs: JoinSet::new(),
            requests,
            changes,
            stats: Arc::new(EngineStats::default()),
            lateness: None,
            commits,
            commit_queue: Some(commit_queue),
            verdicts: request_tx_for_judges,
            watched: crate::judging::Watched::default(),
            evidence: crate::judging::EvidenceReports::default(),
            telemetry,
            failed_deliveries: FailedDeliveries::default(),
            activity: None,
        };
        (engine, handle)
    }

    /// The engine's counters.
    pub fn stats(&self) -> Arc<EngineStats> {
        Arc::clone(&self.stats)
    }

    /// The engine's own metrics.
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Reports of what the engine is doing, updated every time its loop goes round: for tests
    /// that move a [`crate::clock::ManualClock`] and must know when the engine has done
    /// everything the move made due ([`Activity::is_idle_at`]). Nothing is reported (and
    /// nothing spent on it) unless this is called before [`Engine::run`].
    pub fn activity(&mut self) -> watch::Receiver<Activity> {
        self.activity
            .get_or_insert_with(|| watch::Sender::new(Activity::Busy))
            .subscribe()
    }

    /// Reports every tick's lateness to `sink`.
    pub fn with_lateness_sink(mut self, sink: LatenessSink) -> Self {
        self.lateness = Some(sink);
        self
    }

    /// Loads every stored rollout, re-applies its desired state, and runs until `shutdown`
    /// completes. Jobs under way at shutdown are finished first.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), EngineError> {
        if let Some(queue) = self.commit_queue.take() {
            tokio::spawn(group_commit(
                self.store.clone(),
                queue,
                self.options.max_commit_batch.max(1),
                Arc::clone(&self.stats),
                self.telemetry.clone(),
            ));
        }
        let judges = tokio::spawn(crate::judging::judge_loop(
            self.watched.clone(),
            self.evidence.clone(),
            self.providers.clone(),
            self.verdicts.clone(),
            self.options.judge_period,
            self.telemetry.clone(),
        ));
        // With several instances, the cluster member adopts the rollouts this one holds.
        let stored_rollouts = if self.options.forwarder.is_some() {
            Vec::new()
        } else {
            self.store.load_all().await?
        };
        for stored in stored_rollouts {
            let key = stored.key.clone();
            // Restored rollouts change nothing until their next step; show them from the start.
            self.telemetry.record_status(&key, &stored.status);
            let entry = self.entries.entry(key.clone()).or_default();
            entry.stored = Some(stored);
            entry.queued.push_back(Job::Restore);
            self.ready.push_back(key);
        }
        tokio::pin!(shutdown);
        loop {
            self.start_ready_jobs();
            let next_wake = self.timers.peek().map(|Reverse((at, _))| *at);
            self.report_activity(next_wake);
            let sleep = sleep_until(&self.options.clock, next_wake);
            tokio::select! {
                _ = &mut shutdown => break,
                // The engine holds a sender itself (for the judge task), so this never closes.
                Some(request) = self.requests.recv() => self.accept(request),
                Some(done) = self.jobs.join_next() => match done {
                    Ok(done) => self.finish(done),
                    Err(error) => tracing::error!(%error, "an engine job panicked"),
                },
                () = sleep => self.fire_timers(),
            }
        }
        judges.abort();
        while let Some(done) = self.jobs.join_next().await {
            if let Ok(done) = done {
                self.finish(done);
            }
        }
        Ok(())
    }

    fn accept(&mut self, request: Request) {
        let (key, job) = match request {
            Request::Apply {
                rollout,
                expected_version,
                actor,
                reply,
            } => (
                RolloutKey::of(&rollout),
                Job::Apply {
                    rollout,
                    expected_version,
                    actor,
                    reply,
                },
            ),
            Request::Command {
                key,
                command,
                actor,
                request,
                reply,
            } => {
                if !self.entries.contains_key(&key) {
                    self.forward(key, Forwarded::Command { command, actor }, reply);
                    return;
                }
                (
                    key,
                    Job::Command {
                        command,
                        actor,
                        request,
                        reply,
                    },
                )
            }
            Request::Adopt { key, reply } => {
                if self.entries.contains_key(&key) {
                    // Created here (and leased at once), or adopted already.
                    let _ = reply.send(Ok(()));
                    return;
                }
                (key, Job::Adopt { reply })
            }
            Request::Release { key, reply } => {
                self.release(key, reply);
                return;
            }
            Request::Delete {
                key,
                expected_version,
                reply,
            } => {
                if !self.entries.contains_key(&key) {
                    self.forward(key, Forwarded::Delete { expected_version }, reply);
                    return;
                }
                (
                    key,
                    Job::Delete {
                        expected_version,
                        reply,
                    },
                )
            }
            Request::Verdict { key, run, verdict } => {
                if !self.entries.contains_key(&key) {
                    return;
                }
                (key, Job::Verdict { run, verdict })
            }
        };
        let entry = self.entries.entry(key.clone()).or_default();
        entry.queued.push_back(job);
        if !entry.busy {
            self.ready.push_back(key);
        }
    }

    /// Hands a request for a rollout this engine does not hold to its owner (several instances),
    /// or answers "not found" (one instance: every rollout is held).
    fn forward<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        key: RolloutKey,
        request: Forwarded,
        reply: oneshot::Sender<Result<T, EngineError>>,
    ) {
        let Some(forwarder) = self.options.forwarder.clone() else {
            let _ = reply.send(Err(EngineError::NotFound(key)));
            return;
        };
        tokio::spawn(async move {
            let answer = forwarder.forward(key, request).await;
            let _ = reply.send(answer.and_then(crate::forward::result_of));
        });
    }

    /// Drops a rollout whose lease is gone, now or once its job ends.
    fn release(&mut self, key: RolloutKey, reply: oneshot::Sender<()>) {
        let Some(entry) = self.entries.get_mut(&key) else {
            let _ = reply.send(());
            return;
        };
        entry.releasing.push(reply);
        if !entry.busy {
            self.drop_entry(&key);
        }
    }

    /// Forgets a rollout this instance no longer holds: no more ticks, no judging, and its
    /// target lets go of it (a local router stops, so a peer on the same host can take it).
    /// Requests queued for it are answered as refused by fencing (the caller may retry: they
    /// then go to the new owner).
    fn drop_entry(&mut self, key: &RolloutKey) {
        let Some(entry) = self.entries.remove(key) else {
            return;
        };
        self.watched.update(key, None);
        // Its owner reports it now.
        self.telemetry.remove_rollout(key);
        for job in entry.queued {
            let fenced = || {
                EngineError::Store(StoreError::Fenced {
                    key: key.clone(),
                    epoch: 0,
                })
            };
            match job {
                Job::Apply { reply, .. } => drop(reply.send(Err(fenced()))),
                Job::Command { reply, .. } => drop(reply.send(Err(fenced()))),
                Job::Delete { reply, .. } => drop(reply.send(Err(fenced()))),
                _ => {}
            }
        }
        let target = entry
            .stored
            .as_ref()
            .and_then(|stored| self.providers.target(&stored.rollout))
            .cloned();
        let key = key.clone();
        let releasing = entry.releasing;
        tokio::spawn(async move {
            if let Some(target) = target {
                target.remove(&key).await;
            }
            for reply in releasing {
                let _ = reply.send(());
            }
        });
    }

    /// Tells whoever watches the activity whether anything runs or is due. `next_wake` is the
    /// wake-up the loop is about to sleep until, so a report of `Idle` stays true until a
    /// request comes or the clock reaches it - and then the loop goes round and reports again.
    fn report_activity(&self, next_wake: Option<Timestamp>) {
        let Some(activity) = &self.activity else {
            return;
        };
        let idle = self.jobs.is_empty()
            && self.ready.is_empty()
            && self.requests.is_empty()
            && next_wake.is_none_or(|at| at > self.options.clock.now());
        let now = if idle {
            Activity::Idle { next_wake }
        } else {
            Activity::Busy
        };
        activity.send_if_modified(|seen| std::mem::replace(seen, now) != now);
    }

    fn fire_timers(&mut self) {
        let now = self.options.clock.now();
        while let Some(Reverse((at, _))) = self.timers.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((at, key))) = self.timers.pop() else {
                break;
            };
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            // Timers are never removed from the heap; a stale one no longer matches.
            if entry.wake_at != Some(at) {
                continue;
            }
            entry.wake_at = None;
            if entry.tick_due.is_none() {
                entry.tick_due = Some(at);
                if !entry.busy {
                    self.ready.push_back(key);
                }
            }
        }
    }

    fn start_ready_jobs(&mut self) {
        while self.jobs.len() < self.options.max_concurrent_jobs {
            let Some(key) = self.ready.pop_front() else {
                return;
            };
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            if entry.busy {
                continue;
            }
            // Requests first (a person waits for them), then the tick.
            let job = match entry.queued.pop_front() {
                Some(job) => job,
                None => match entry.tick_due.take() {
                    Some(due) => Job::Tick { due },
                    None => continue,
                },
            };
            entry.busy = true;
            // Only a tick reconciles; a request job between a failed apply and the next tick
            // must leave the flag for that tick, or the reconcile is lost.
            let needs_reconcile =
                matches!(job, Job::Tick { .. }) && std::mem::take(&mut entry.needs_reconcile);
            let context = JobContext {
                store: self.store.clone(),
                commits: self.commits.clone(),
                providers: self.providers.clone(),
                stats: Arc::clone(&self.stats),
                lateness: self.lateness.clone(),
                telemetry: self.telemetry.clone(),
                evidence: self.evidence.clone(),
                failed_deliveries: Arc::clone(&self.failed_deliveries),
                redelivery_pause: self.options.redelivery_pause,
                clock: self.options.clock.clone(),
                key: key.clone(),
                stored: entry.stored.clone(),
                needs_reconcile,
                request: None,
                forwarder: self.options.forwarder.clone(),
            };
            // Before the job can answer anyone: whoever it answers sees the engine busy.
            if let Some(activity) = &self.activity {
                activity.send_if_modified(|seen| {
                    std::mem::replace(seen, Activity::Busy) != Activity::Busy
                });
            }
            self.jobs.spawn(context.run(job));
        }
    }

    fn finish(&mut self, done: JobDone) {
        if let Some(change) = done.change {
            // Every committed change passes here, in commit order per rollout.
            self.telemetry.record_change(&change);
            // Nobody listening is fine.
            let _ = self.changes.send(change);
        }
        let key = done.key;
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        if let Some((run, reason)) = done.target_failed {
            entry.queued.push_back(Job::TargetFailed { run, reason });
        }
        entry.busy = false;
        entry.needs_reconcile |= done.needs_reconcile;
        if done.lost {
            self.stats.fenced.fetch_add(1, Ordering::Relaxed);
            self.telemetry.record_fenced();
        }
        if done.lost || !entry.releasing.is_empty() {
            if done.stored.is_some() {
                entry.stored = done.stored;
            }
            self.drop_entry(&key);
            return;
        }
        self.watched.update(&key, done.stored.as_ref());
        let gone = done.stored.is_none();
        entry.stored = done.stored;
        if gone && entry.queued.is_empty() {
            self.entries.remove(&key);
            return;
        }
        if let Some(at) = done.wake_at
            && entry.wake_at.is_none_or(|current| at < current)
        {
            entry.wake_at = Some(at);
            self.timers.push(Reverse((at, key.clone())));
        }
        if !entry.queued.is_empty() || entry.tick_due.is_some() {
            self.ready.push_back(key);
        }
    }
}

async fn sleep_until(clock: &SharedClock, at: Option<Timestamp>) {
    match at {
        None => std::future::pending().await,
        Some(at) => clock.sleep_until(at).await,
    }
}

// === jobs ===

/// Commits what the target noted during a job (see [`crate::TargetProvider::take_notes`]) as events of
/// their own, after the job's own commit: the status is unchanged, so nothing else moves.
async fn record_target_notes(
    commits: &mpsc::Sender<CommitRequest>,
    providers: &Providers,
    clock: &SharedClock,
    mut done: JobDone,
) -> JobDone {
    let Some(stored) = done.stored.as_ref() else {
        return done;
    };
    let Some(target) = providers.target(&stored.rollout) else {
        return done;
    };
    let notes = target.take_notes(&done.key).await;
    if notes.is_empty() {
        return done;
    }
    let now = clock.now();
    let events: Vec<Event> = notes
        .into_iter()
        .map(|note| Event::of_target(&stored.status, now, note))
        .collect();
    let (reply, answer) = oneshot::channel();
    let item = CommitItem {
        key: done.key.clone(),
        expected_version: stored.version,
        status: stored.status.clone(),
        events: events.clone(),
        pending: Vec::new(),
        now,
        request: None,
    };
    let committed = match commits.send(CommitRequest { item, reply }).await {
        Ok(()) => answer.await.ok().and_then(Result::ok),
        Err(_) => None,
    };
    let Some(committed) = committed else {
        tracing::warn!(rollout = %done.key, "could not record the target's notes: {events:?}");
        return done;
    };
    let first_seq = committed.last_event_seq + 1 - events.len() as u64;
    let stored_events = events
        .into_iter()
        .enumerate()
        .map(|(offset, event)| StoredEvent {
            seq: first_seq + offset as u64,
            event,
        });
    let change = done.change.get_or_insert_with(|| StatusChange {
        key: done.key.clone(),
        version: committed.version,
        status: Some(committed.status.clone()),
        events: Vec::new(),
    });
    change.version = committed.version;
    change.events.extend(stored_events);
    done.stored = Some(committed);
    done
}

struct JobContext<S: Store> {
    store: S,
    commits: mpsc::Sender<CommitRequest>,
    providers: Providers,
    stats: Arc<EngineStats>,
    lateness: Option<LatenessSink>,
    telemetry: Telemetry,
    evidence: crate::judging::EvidenceReports,
    failed_deliveries: FailedDeliveries,
    redelivery_pause: Duration,
    clock: SharedClock,
    key: RolloutKey,
    stored: Option<StoredRollout>,
    needs_reconcile: bool,
    /// The forwarded request this job executes (its commit marks it executed).
    request: Option<i64>,
    forwarder: Option<Arc<dyn crate::forward::Forwarder>>,
}

impl<S: Store> JobContext<S> {
    async fn run(self, job: Job) -> JobDone {
        let commits = self.commits.clone();
        let providers = self.providers.clone();
        let clock = self.clock.clone();
        let done = match job {
            Job::Restore => self.restore().await,
            Job::Adopt { reply } => self.adopt(reply).await,
            Job::Tick { due } => self.tick(due).await,
            Job::Apply {
                rollout,
                expected_version,
                actor,
                reply,
            } => {
                let (done, result) = self.apply(*rollout, expected_version, actor).await;
                let _ = reply.send(result);
                done
            }
            Job::Command {
                command,
                actor,
                request,
                reply,
            } => {
                let mut context = self;
                context.request = request;
                let (done, result) = context.command(command, actor).await;
                let _ = reply.send(result);
                done
            }
            Job::Delete {
                expected_version,
                reply,
            } => {
                let (done, result) = self.delete(expected_version).await;
                let _ = reply.send(result);
                done
            }
            Job::Verdict { run, verdict } => self.verdict(run, verdict).await,
            Job::TargetFailed { run, reason } => self.target_failed(run, reason).await,
        };
        record_target_notes(&commits, &providers, &clock, done).await
    }

    /// A judge's verdict between ticks: acted on at once, if its run is still the current one.
    async fn verdict(self, run: u64, verdict: weir_core::model::JudgeVerdict) -> JobDone {
        self.between_ticks(run, Input::Verdict(verdict)).await
    }

    /// A permanent target failure: acted on at once, if its run is still the current one.
    async fn target_failed(self, run: u64, reason: String) -> JobDone {
        self.between_ticks(run, Input::TargetFailed(reason)).await
    }

    async fn between_ticks(self, run: u64, input: Input) -> JobDone {
        let Some(stored) = self.stored.clone() else {
            return self.unchanged(None);
        };
        if stored.status.run != run {
            return self.unchanged(None);
        }
        let now = self.clock.now();
        match machine::step(&stored.rollout.spec, &stored.status, &input, now) {
            Ok(transition) => self.commit_and_apply(&stored, transition, now).await,
            Err(_) => self.unchanged(None),
        }
    }

    fn unchanged(&self, wake_at: Option<Timestamp>) -> JobDone {
        JobDone {
            key: self.key.clone(),
            stored: self.stored.clone(),
            wake_at,
            change: None,
            needs_reconcile: false,
            target_failed: None,
            lost: false,
            commit_failure: None,
        }
    }

    fn provider_error(&self, what: &str, error: impl std::fmt::Display) {
        self.stats.provider_errors.fetch_add(1, Ordering::Relaxed);
        self.telemetry.record_provider_error();
        tracing::warn!(rollout = %self.key, "{what}: {error}");
    }

    /// A rollout whose lease was just claimed: read it as the previous owner left it, then
    /// restore it.
    /// Answers `reply` once the rollout is read (not after the restore, which may wait on
    /// targets and notifications: the cluster member must not wait that long between renewals).
    async fn adopt(mut self, reply: oneshot::Sender<Result<(), EngineError>>) -> JobDone {
        match self.store.get(&self.key).await {
            Ok(Some(stored)) => {
                let _ = reply.send(Ok(()));
                self.telemetry.record_status(&self.key, &stored.status);
                self.stored = Some(stored);
                self.restore().await
            }
            // Deleted meanwhile: the entry goes.
            Ok(None) => {
                let _ = reply.send(Ok(()));
                self.unchanged(None)
            }
            Err(error) => {
                // The entry goes; the caller gives the lease back, so it is claimed again.
                self.provider_error("read an adopted rollout", &error);
                let _ = reply.send(Err(error.into()));
                self.unchanged(None)
            }
        }
    }

    /// After a restart: make the world match the stored status, deliver what is pending, and
    /// resume the schedule where it was.
    async fn restore(mut self) -> JobDone {
        let Some(stored) = self.stored.clone() else {
            return self.unchanged(None);
        };
        if let Some(target) = self.providers.target(&stored.rollout)
            && let Err(error) = target
                .reconcile(&self.key, &stored.rollout, &stored.status)
                .await
        {
            self.provider_error("reconcile after restart", error);
            self.needs_reconcile = true;
        }
        self.deliver(&stored, &stored.pending_effects).await;
        // Resume one interval after the last progress (a step is never taken early, nor
        // twice) or at the next schedule entry if that comes first (overdue ones at once),
        // never earlier than now.
        let wake = machine::resume_at(&stored.rollout.spec, &stored.status, self.clock.now());
        JobDone {
            key: self.key.clone(),
            stored: Some(stored),
            wake_at: Some(wake),
            change: None,
            needs_reconcile: self.needs_reconcile,
            target_failed: None,
            lost: false,
            commit_failure: None,
        }
    }

    async fn tick(mut self, due: Timestamp) -> JobDone {
        if self
            .stored
            .as_ref()
            .is_some_and(|stored| !stored.pending_effects.is_empty())
        {
            self.redeliver().await;
        }
        let Some(stored) = self.stored.clone() else {
            return self.unchanged(None);
        };
        let started = self.clock.now();
        self.stats.ticks.fetch_add(1, Ordering::Relaxed);
        let late = Duration::try_from(started.duration_since(due)).unwrap_or_default();
        record_lateness(&self.stats, self.lateness.as_ref(), late);
        self.telemetry.record_tick(late);

        let rollout = &stored.rollout;
        let Some(target) = self.providers.target(rollout).cloned() else {
            self.provider_error("tick", "no provider for this target kind");
            return self.unchanged(None);
        };
        let mut needs_reconcile = false;
        if self.needs_reconcile
            && let Err(error) = target.reconcile(&self.key, rollout, &stored.status).await
        {
            self.provider_error("reconcile", error);
            needs_reconcile = true;
        }
        let observed = match target.observe(&self.key, rollout, &stored.status).await {
            Ok(observed) => observed,
            Err(error) if error.is_permanent() => {
                self.provider_error("observe", &error);
                // Ticks go on (the machine may note the failure without ending anything).
                let interval = SignedDuration::try_from(rollout.spec.analysis.interval.get())
                    .unwrap_or(SignedDuration::MAX);
                let now = self.clock.now();
                let mut done = self.unchanged(Some(now.checked_add(interval).unwrap_or(now)));
                done.target_failed = Some((stored.status.run, error.message));
                done.needs_reconcile = needs_reconcile;
                return done;
            }
            Err(error) => {
                // Unobservable counts as not ready: the run halts and the progress deadline
                // bounds how long.
                self.provider_error("observe", error);
                TargetObservation::default()
            }
        };
        let observations = self.gather(&stored, observed).await;
        let now = self.clock.now();
        let transition = match machine::step(
            &rollout.spec,
            &stored.status,
            &Input::Tick(observations),
            now,
        ) {
            Ok(transition) => transition,
            Err(rejected) => {
                // A tick is never rejected; treat it as a bug, not a crash.
                self.provider_error("step", rejected);
                return self.unchanged(Some(now));
            }
        };
        let mut done = self.commit_and_apply(&stored, transition, now).await;
        done.needs_reconcile |= needs_reconcile;
        done
    }

    /// Calls the hooks and evaluates the checks the machine needs for this tick, and adds the
    /// judges' latest evidence of health (`None` when no judge watches the rollout).
    async fn gather(&self, stored: &StoredRollout, observed: TargetObservation) -> Observations {
        let rollout = &stored.rollout;
        let status = &stored.status;
        let needs = machine::needs(&rollout.spec, status, observed.canary_revision.as_deref());
        let now_ms = self.clock.now().as_millisecond();
        let mut hooks = Vec::new();
        for hook_type in &needs.hooks {
            for hook in rollout.spec.analysis.hooks_of(*hook_type) {
                let delivery_id = format!("{}/run-{}/{}/{now_ms}", self.key, status.run, hook.name);
                hooks.push(
                    self.providers
                        .hooks
                        .call(&self.key, status, hook, &delivery_id)
                        .await,
                );
            }
        }
        let mut checks = Vec::new();
        if needs.metrics {
            for metric in &rollout.spec.analysis.metrics {
                let source = self
                    .providers
                    .metrics
                    .iter()
                    .find(|source| source.handles(rollout, metric));
                checks.push(match source {
                    Some(source) => source.check(&self.key, rollout, metric).await,
                    None => CheckResult {
                        name: metric.name.clone(),
                        outcome: CheckOutcome::NoData,
                        value: None,
                        message: "no metric source in this process evaluates this metric".into(),
                    },
                });
            }
        }
        Observations {
            canary_revision: observed.canary_revision,
            primary_revision: observed.primary_revision,
            primary_ready: observed.primary_ready,
            canary_ready: observed.canary_ready,
            checks,
            hooks,
            evidence: crate::judging::evidence_for(&self.evidence, &self.key, rollout, status.run),
        }
    }

    /// Commits a transition (status, events, one-shot effects in one transaction), then applies
    /// its desired-state effects and delivers its one-shot effects.
    async fn commit_and_apply(
        &self,
        stored: &StoredRollout,
        transition: Transition,
        now: Timestamp,
    ) -> JobDone {
        let Transition {
            status,
            effects,
            events,
            wake_at,
        } = transition;
        if status == stored.status && effects.is_empty() && events.is_empty() {
            // Nothing changed: no write, no broadcast.
            return self.unchanged(wake_at);
        }
        let one_shots: Vec<Effect> = effects
            .iter()
            .filter(|effect| effect.delivery_id().is_some())
            .cloned()
            .collect();
        let committed = match self
            .commit(CommitItem {
                key: self.key.clone(),
                expected_version: stored.version,
                status: status.clone(),
                events: events.clone(),
                pending: one_shots.clone(),
                now,
                request: self.request,
            })
            .await
        {
            Ok(committed) => committed,
            Err(error) => {
                // Nothing was written: try again at the next tick from the stored state - or,
                // when another instance holds the lease now, not at all here.
                let mut done = self.unchanged(None);
                if matches!(error, StoreError::Fenced { .. }) {
                    tracing::info!(rollout = %self.key, "{error}");
                    done.lost = true;
                } else {
                    if !matches!(error, StoreError::AlreadyExecuted(_)) {
                        self.provider_error("commit", &error);
                    }
                    done.wake_at =
                        Some(now.checked_add(SignedDuration::from_secs(1)).unwrap_or(now));
                }
                done.commit_failure = Some(error);
                return done;
            }
        };
        self.stats.commits.fetch_add(1, Ordering::Relaxed);
        let mut needs_reconcile = false;
        let mut target_failed = None;
        if let Some(target) = self.providers.target(&committed.rollout) {
            for effect in effects
                .iter()
                .filter(|effect| effect.delivery_id().is_none())
            {
                if let Err(error) = target
                    .apply(&self.key, &committed.rollout, &committed.status, effect)
                    .await
                {
                    self.provider_error("apply effect", &error);
                    needs_reconcile = true;
                    if error.is_permanent() {
                        target_failed = Some((committed.status.run, error.message));
                    }
                }
            }
        }
        self.deliver(&committed, &one_shots).await;
        let first_seq = committed.last_event_seq + 1 - events.len() as u64;
        let change = StatusChange {
            key: self.key.clone(),
            version: committed.version,
            status: Some(committed.status.clone()),
            events: events
                .into_iter()
                .enumerate()
                .map(|(offset, event)| StoredEvent {
                    seq: first_seq + offset as u64,
                    event,
                })
                .collect(),
        };
        JobDone {
            key: self.key.clone(),
            stored: Some(committed),
            wake_at,
            change: Some(change),
            needs_reconcile,
            target_failed,
            lost: false,
            commit_failure: None,
        }
    }

    /// Queues a step for the group commit and waits until it is durable (or refused).
    async fn commit(&self, item: CommitItem) -> Result<StoredRollout, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.commits
            .send(CommitRequest { item, reply })
            .await
            .map_err(|_| StoreError::Database("the engine is shutting down".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Database("the commit was abandoned".into()))?
    }

    /// Tries again the pending one-shot effects whose last failure is older than the redelivery
    /// pause (or unknown to this process), and forgets those delivered.
    async fn redeliver(&mut self) {
        let Some(stored) = self.stored.as_ref() else {
            return;
        };
        let due: Vec<Effect> = {
            let failed = self
                .failed_deliveries
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            stored
                .pending_effects
                .iter()
                .filter(|effect| {
                    effect.delivery_id().is_some_and(|id| {
                        failed
                            .get(&(self.key.clone(), id.to_string()))
                            .is_none_or(|at| {
                                self.clock.now().duration_since(*at)
                                    >= SignedDuration::try_from(self.redelivery_pause)
                                        .unwrap_or(SignedDuration::MAX)
                            })
                    })
                })
                .cloned()
                .collect()
        };
        if due.is_empty() {
            return;
        }
        let delivered = self.deliver(stored, &due).await;
        if let Some(stored) = self.stored.as_mut() {
            stored.pending_effects.retain(|effect| {
                effect
                    .delivery_id()
                    .is_none_or(|id| !delivered.iter().any(|done| done == id))
            });
        }
    }

    /// Delivers one-shot effects (at least once), clears those delivered in the store, and
    /// returns their ids; a failure is remembered so ticks retry it after a pause.
    async fn deliver(&self, stored: &StoredRollout, effects: &[Effect]) -> Vec<String> {
        let mut delivered = Vec::new();
        for effect in effects {
            let Some(id) = effect.delivery_id() else {
                continue;
            };
            match effect {
                Effect::RunHooks {
                    hook_type,
                    delivery_id,
                    event,
                } => {
                    for hook in stored.rollout.spec.analysis.hooks_of(*hook_type) {
                        let hooks = &self.providers.hooks;
                        let result = match event {
                            Some(event) => {
                                hooks
                                    .call_for_event(
                                        &self.key,
                                        &stored.status,
                                        hook,
                                        delivery_id,
                                        event,
                                    )
                                    .await
                            }
                            None => {
                                hooks
                                    .call(&self.key, &stored.status, hook, delivery_id)
                                    .await
                            }
                        };
                        if !result.success && *hook_type != HookType::Event {
                            tracing::info!(rollout = %self.key, hook = %hook.name, "{hook_type} hook failed: {}", result.message);
                        }
                    }
                    delivered.push(id.to_string());
                }
                Effect::Notify(notification) => match self
                    .providers
                    .notifier
                    .notify(&self.key, &stored.rollout, notification)
                    .await
                {
                    Ok(()) => delivered.push(id.to_string()),
                    // Sending it again would fail the same way: it is dropped, not kept pending.
                    Err(error) if error.is_permanent() => {
                        self.provider_error("notify", error);
                        delivered.push(id.to_string());
                    }
                    Err(error) => {
                        self.failed_deliveries
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert((self.key.clone(), id.to_string()), self.clock.now());
                        self.provider_error("notify", error);
                    }
                },
                _ => {}
            }
        }
        if delivered.is_empty() {
            return delivered;
        }
        {
            let mut failed = self
                .failed_deliveries
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for id in &delivered {
                failed.remove(&(self.key.clone(), id.clone()));
            }
        }
        if let Err(error) = self.store.clear_pending(&self.key, &delivered).await {
            self.provider_error("clear delivered effects", error);
        }
        delivered
    }

    /// Records who applied a changed document: an `Applied` event, committed with the status
    /// as it is (the engine is this rollout's only writer, so nothing comes between the two
    /// commits; a crash between them loses the event, never the document).
    async fn record_applied(
        &self,
        stored: StoredRollout,
        outcome: weir_store::ApplyOutcome,
        actor: &str,
        now: Timestamp,
    ) -> Result<(StoredRollout, weir_store::ApplyOutcome), EngineError> {
        let what = match outcome {
            weir_store::ApplyOutcome::Created => "created",
            _ => "changed",
        };
        let event = weir_core::model::Event {
            at: now,
            run: stored.status.run,
            reason: weir_core::model::EventReason::Applied,
            phase: stored.status.phase,
            canary_weight: stored.status.canary_weight,
            message: format!(
                "applied by {actor}: {what} (generation {})",
                stored.generation
            ),
            evidence: Default::default(),
        };
        let committed = self
            .store
            .commit(
                &self.key,
                stored.version,
                &stored.status,
                &[event],
                &[],
                now,
            )
            .await?;
        Ok((committed, outcome))
    }

    async fn apply(
        self,
        rollout: Rollout,
        expected_version: Option<u64>,
        actor: Option<String>,
    ) -> (JobDone, Result<Applied, EngineError>) {
        let mut errors: Vec<FieldError> = weir_core::validate::rollout(&rollout);
        errors.extend(crate::judging::validate(&rollout));
        errors.extend(self.providers.catalog.snapshot().check_rollout(&rollout));
        for source in &self.providers.metrics {
            errors.extend(source.validate(&rollout));
        }
        match self.providers.target(&rollout) {
            Some(target) => errors.extend(target.validate(&rollout)),
            None => {
                let served: Vec<String> = self
                    .providers
                    .targets
                    .iter()
                    .map(|(kind, _)| format!("{kind:?}").to_lowercase())
                    .collect();
                errors.push(FieldError::with_value(
                    "spec.target.kind",
                    format!("{:?}", rollout.spec.target.kind()).to_lowercase(),
                    format!("this server runs targets of kind: {}", served.join(", ")),
                ));
            }
        }
        if !errors.is_empty() {
            return (self.unchanged(None), Err(EngineError::Invalid(errors)));
        }
        let mut refusals = self
            .providers
            .target(&rollout)
            .map(|target| target.refuse(&rollout))
            .unwrap_or_default();
        refusals.extend(self.providers.hooks.refuse(&rollout));
        refusals.extend(self.providers.notifier.refuse(&rollout));
        for source in &self.providers.metrics {
            refusals.extend(source.refuse(&rollout));
        }
        if !refusals.is_empty() {
            return (self.unchanged(None), Err(EngineError::Refused(refusals)));
        }
        let now = self.clock.now();
        let actor_for_forward = actor.clone();
        let applied = match self.store.apply(&rollout, expected_version, now).await {
            Ok((stored, outcome)) => match actor {
                Some(actor) if outcome != weir_store::ApplyOutcome::Unchanged => {
                    self.record_applied(stored, outcome, &actor, now).await
                }
                _ => Ok((stored, outcome)),
            },
            Err(error) => Err(EngineError::from(error)),
        };
        match applied {
            Ok((stored, outcome)) => {
                let changed = outcome != weir_store::ApplyOutcome::Unchanged;
                let done = JobDone {
                    key: self.key.clone(),
                    stored: Some(stored.clone()),
                    // A new or changed rollout is looked at now, not an interval later.
                    wake_at: changed.then_some(now),
                    change: changed.then(|| StatusChange {
                        key: self.key.clone(),
                        version: stored.version,
                        status: Some(stored.status.clone()),
                        events: Vec::new(),
                    }),
                    needs_reconcile: false,
                    target_failed: None,
                    lost: false,
                    commit_failure: None,
                };
                (
                    done,
                    Ok(Applied {
                        rollout: stored,
                        outcome,
                    }),
                )
            }
            // It exists and another instance holds it: the owner applies it.
            Err(EngineError::Store(StoreError::Fenced { .. }))
                if self.stored.is_none() && self.forwarder.is_some() =>
            {
                let result = match &self.forwarder {
                    Some(forwarder) => forwarder
                        .forward(
                            self.key.clone(),
                            Forwarded::Apply {
                                rollout: Box::new(rollout),
                                expected_version,
                                actor: actor_for_forward,
                            },
                        )
                        .await
                        .and_then(crate::forward::result_of),
                    None => Err(EngineError::NotFound(self.key.clone())),
                };
                (self.unchanged(None), result)
            }
            Err(error) => (self.unchanged(None), Err(error)),
        }
    }

    async fn command(
        self,
        command: Command,
        actor: String,
    ) -> (JobDone, Result<StoredRollout, EngineError>) {
        let Some(stored) = self.stored.clone() else {
            let key = self.key.clone();
            return (self.unchanged(None), Err(EngineError::NotFound(key)));
        };
        let now = self.clock.now();
        let input = Input::Command(CommandInput { command, actor });
        match machine::step(&stored.rollout.spec, &stored.status, &input, now) {
            Err(rejected) => (self.unchanged(None), Err(rejected.into())),
            Ok(transition) => {
                // `commit_and_apply` writes nothing for a step that changes nothing, so an
                // unchanged version after it means "nothing to commit" here, not a failed
                // commit: such a command is answered with the rollout as it stands. (The
                // machine refuses the commands that would change nothing, a second pause
                // among them; this keeps any it accepts from reading as a store failure.)
                let no_change = transition.status == stored.status
                    && transition.effects.is_empty()
                    && transition.events.is_empty();
                let mut done = self.commit_and_apply(&stored, transition, now).await;
                let result = match (&done.stored, done.commit_failure.take()) {
                    (_, Some(failure)) => Err(EngineError::Store(failure)),
                    (Some(after), None) if after.version != stored.version => Ok(after.clone()),
                    _ if no_change => Ok(stored),
                    _ => Err(EngineError::Store(weir_store::StoreError::Database(
                        "the command could not be committed; try again".into(),
                    ))),
                };
                (done, result)
            }
        }
    }

    async fn delete(self, expected_version: Option<u64>) -> (JobDone, Result<(), EngineError>) {
        let Some(stored) = self.stored.clone() else {
            let key = self.key.clone();
            return (self.unchanged(None), Err(EngineError::NotFound(key)));
        };
        // Checked before anything is undone: a stale delete leaves routes and processes alone.
        if let Some(expected) = expected_version
            && expected != stored.version
        {
            let conflict = StoreError::Conflict {
                key: self.key.clone(),
                expected,
                actual: stored.version,
            };
            return (self.unchanged(None), Err(conflict.into()));
        }
        let now = self.clock.now();
        if let Ok(transition) =
            machine::step(&stored.rollout.spec, &stored.status, &Input::Deleted, now)
            && let Some(target) = self.providers.target(&stored.rollout)
        {
            for effect in transition
                .effects
                .iter()
                .filter(|effect| effect.delivery_id().is_none())
            {
                if let Err(error) = target
                    .apply(&self.key, &stored.rollout, &transition.status, effect)
                    .await
                {
                    self.provider_error("apply effect on deletion", error);
                }
            }
        }
        if let Some(target) = self.providers.target(&stored.rollout) {
            target.remove(&self.key).await;
        }
        match self.store.delete(&self.key, expected_version).await {
            Ok(()) => {
                // Its undelivered notifications went with it.
                self.failed_deliveries
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain(|(key, _), _| *key != self.key);
                (
                    JobDone {
                        key: self.key.clone(),
                        stored: None,
                        wake_at: None,
                        change: Some(StatusChange {
                            key: self.key.clone(),
                            version: stored.version + 1,
                            status: None,
                            events: Vec::new(),
                        }),
                        needs_reconcile: false,
                        target_failed: None,
                        lost: false,
                        commit_failure: None,
                    },
                    Ok(()),
                )
            }
            Err(error) => (self.unchanged(None), Err(error.into())),
        }
    }
}

fn record_lateness(stats: &EngineStats, sink: Option<&LatenessSink>, late: Duration) {
    let micros = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
    stats
        .lateness_micros_total
        .fetch_add(micros, Ordering::Relaxed);
    stats
        .lateness_micros_max
        .fetch_max(micros, Ordering::Relaxed);
    if let Some(sink) = sink {
        sink(late);
    }
}
