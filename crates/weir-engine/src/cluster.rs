//! One instance among several on one database: holding leases, adopting and releasing rollouts,
//! executing requests forwarded by other instances, and relaying their changes to this
//! instance's subscribers (docs/SCALE-OUT.md).
//!
//! A [`ClusterMember`] runs beside an [`crate::Engine`] built with
//! `EngineOptions::forwarder` set to [`ClusterMember::forwarder`]:
//!
//! - every `lease_time / 3` it sends a heartbeat and renews its leases (telling the engine to
//!   drop those it lost); every second, and at once when leases were freed (an instance left, a
//!   rollout was created), it balances: it claims free leases up to its fair share (the claimable
//!   rollouts divided by the live instances, rounded up) and gives back what it holds beyond that
//!   share plus one, so a joining instance gets work and a dead or leaving one's work is spread.
//! - requests for rollouts it holds are executed through the engine as soon as their
//!   notification arrives (and at every round, in case one was missed), and answered.
//! - a task of its own follows the notifications: changes other instances commit are read back
//!   (when a watch stream or a mirror here needs them) and announced on the engine's broadcast,
//!   so watch streams on this instance see every rollout; mirrors (the flags OFREP serves) are
//!   kept in step.
//!
//! Fencing is the store's: a commit for a lease this instance no longer holds is refused, so an
//! instance that was paused past its lease cannot step a rollout another one took over.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};
use weir_store::{Cluster, Notice, RolloutKey, StoreError, StoredEvent, StoredRollout};

use crate::forward::{Answer, Forwarded, Forwarder, RemoteError, RemoteErrorKind};
use crate::handle::{EngineError, EngineHandle, Executed, StatusChange};
use crate::providers::BoxFuture;
use crate::telemetry::ClusterMetrics;

/// The longest wait between two looks for free leases.
const CLAIM_CHECK: Duration = Duration::from_secs(1);

/// Settings of a cluster member.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// How long a lease lasts unless renewed (renewed every third of it). An instance that
    /// stops answering loses its rollouts to the others after at most this long.
    pub lease_time: Duration,
    /// Most leases claimed in one statement (a round claims batch after batch up to its share).
    pub claim_batch: usize,
    /// How long a forwarded request waits for the owner's answer. Longer than the lease time,
    /// so a request to a rollout whose owner just died is executed by the next owner.
    pub forward_timeout: Duration,
    /// This instance's API address, recorded with its heartbeat (for people reading the
    /// instances table).
    pub api: Option<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            lease_time: Duration::from_secs(10),
            claim_batch: 100,
            forward_timeout: Duration::from_secs(30),
            api: None,
        }
    }
}

/// What keeps this instance's in-memory state of other instances' rollouts in step (the flags
/// a flag rollout moves, which OFREP serves on every instance).
pub trait Mirror: Send + Sync + 'static {
    /// Another instance committed a change of this rollout (`None`: deleted it).
    fn rollout_changed<'a>(
        &'a self,
        key: &'a RolloutKey,
        stored: Option<&'a StoredRollout>,
    ) -> BoxFuture<'a, ()>;

    /// Another instance wrote (or deleted) this flag.
    fn flag_changed<'a>(&'a self, namespace: &'a str, key: &'a str) -> BoxFuture<'a, ()>;

    /// Notifications may have been missed (at start, after a lost connection): read everything
    /// again; `rollouts` are those this instance does not hold.
    fn resync<'a>(&'a self, rollouts: &'a [StoredRollout]) -> BoxFuture<'a, ()>;
}

/// The state the member and its forwarder share.
#[derive(Debug, Default)]
struct Shared {
    /// Forwarded requests waiting for their answer, by request id.
    waiters: Mutex<HashMap<i64, Vec<oneshot::Sender<serde_json::Value>>>>,
    /// Woken when requests may be waiting for this instance.
    requests: Notify,
    /// Woken when leases were freed (claim now rather than at the next round).
    freed: Notify,
}

/// This instance's part in a cluster (see the module documentation).
pub struct ClusterMember<S: Cluster> {
    store: S,
    options: ClusterOptions,
    shared: Arc<Shared>,
    metrics: ClusterMetrics,
    mirrors: Vec<Arc<dyn Mirror>>,
    liveness: Liveness,
}

/// Whether this instance's leases are live: when its heartbeat and renewal last succeeded
/// ([`ClusterMember::liveness`]; what `weir serve`'s `/readyz` asks). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Liveness {
    /// When the last heartbeat and renewal both succeeded (`None`: not joined yet).
    renewed: Arc<Mutex<Option<std::time::Instant>>>,
    lease_time: Duration,
}

impl Liveness {
    fn new(lease_time: Duration) -> Liveness {
        Liveness {
            renewed: Arc::default(),
            lease_time,
        }
    }

    /// Records a heartbeat and renewal that succeeded, started at `at` (the leases run from
    /// their statement's time, not from when it answered).
    fn renewed(&self, at: std::time::Instant) {
        *self.renewed.lock().unwrap_or_else(PoisonError::into_inner) = Some(at);
    }

    /// `Ok` while the last successful heartbeat and renewal is within the lease time: every
    /// lease this instance holds is live, and the other instances count it. `Err` says why
    /// not (not joined yet, or nothing renewed for longer than the lease time, so its
    /// rollouts may be taken over and its writes are refused).
    pub fn check(&self) -> Result<(), String> {
        let renewed = *self.renewed.lock().unwrap_or_else(PoisonError::into_inner);
        match renewed {
            None => Err("this instance has not joined the other instances yet".to_owned()),
            Some(at) if at.elapsed() > self.lease_time => Err(format!(
                "this instance's leases are not live: its last heartbeat and renewal succeeded \
                 {:.1} s ago, more than the lease time ({:.1} s); other instances may take its \
                 rollouts over",
                at.elapsed().as_secs_f64(),
                self.lease_time.as_secs_f64()
            )),
            Some(_) => Ok(()),
        }
    }
}

/// Hands requests to owners through the store (see [`Forwarder`]).
struct StoreForwarder<S: Cluster> {
    store: S,
    shared: Arc<Shared>,
    timeout: Duration,
    metrics: ClusterMetrics,
}

impl<S: Cluster> std::fmt::Debug for StoreForwarder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreForwarder")
            .field("instance", &self.store.instance_id())
            .finish_non_exhaustive()
    }
}

impl<S: Cluster> Forwarder for StoreForwarder<S> {
    fn forward(
        &self,
        key: RolloutKey,
        request: Forwarded,
    ) -> BoxFuture<'static, Result<serde_json::Value, EngineError>> {
        let store = self.store.clone();
        let shared = Arc::clone(&self.shared);
        let timeout = self.timeout;
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let body = serde_json::to_value(&request).map_err(|error| {
                EngineError::Remote(RemoteError::new(
                    RemoteErrorKind::Internal,
                    format!("cannot encode the request: {error}"),
                ))
            })?;
            let id = store.submit_request(&key, &body).await?;
            metrics.forwarded.inc();
            let (tell, mut answered) = oneshot::channel();
            shared
                .waiters
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(id)
                .or_default()
                .push(tell);
            let deadline = tokio::time::Instant::now() + timeout;
            let mut listening = true;
            let result = loop {
                // The notification is the fast path; reading the row covers an answer that
                // came before the waiter was registered, or a notification that was missed.
                if let Some(answer) = store.request_answer(id).await? {
                    break Ok(answer);
                }
                let poll = tokio::time::sleep(Duration::from_millis(500));
                tokio::select! {
                    answer = &mut answered, if listening => match answer {
                        Ok(answer) => break Ok(answer),
                        // The notice came but its answer could not be read: poll instead.
                        Err(_) => listening = false,
                    },
                    () = poll => {}
                    () = tokio::time::sleep_until(deadline) => {
                        break Err(EngineError::Remote(RemoteError::new(
                            RemoteErrorKind::Unavailable,
                            format!(
                                "no instance holding rollout {key} answered within {}s; it may be between owners: try again",
                                timeout.as_secs()
                            ),
                        )));
                    }
                }
            };
            shared
                .waiters
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            result
        })
    }
}

impl<S: Cluster> ClusterMember<S> {
    /// A member over `store` (opened with this instance's host label), counting into `metrics`
    /// (the engine's telemetry: `Telemetry::cluster`).
    pub fn new(store: S, options: ClusterOptions, metrics: ClusterMetrics) -> ClusterMember<S> {
        let liveness = Liveness::new(options.lease_time);
        ClusterMember {
            store,
            options,
            shared: Arc::default(),
            metrics,
            mirrors: Vec::new(),
            liveness,
        }
    }

    /// Whether this instance's leases are live (see [`Liveness`]), for a readiness probe.
    pub fn liveness(&self) -> Liveness {
        self.liveness.clone()
    }

    /// Keeps `mirror` in step with other instances' changes.
    pub fn with_mirror(mut self, mirror: Arc<dyn Mirror>) -> ClusterMember<S> {
        self.mirrors.push(mirror);
        self
    }

    /// What the engine hands requests for rollouts it does not hold to
    /// (`EngineOptions::forwarder`).
    pub fn forwarder(&self) -> Arc<dyn Forwarder> {
        Arc::new(StoreForwarder {
            store: self.store.clone(),
            shared: Arc::clone(&self.shared),
            timeout: self.options.forward_timeout,
            metrics: self.metrics.clone(),
        })
    }

    /// Joins the cluster (the first heartbeat: from then on the store fences writes) and
    /// starts listening. Call before the engine runs, so that rollouts created through it are
    /// leased to this instance at once.
    pub async fn join(&self) -> Result<mpsc::Receiver<Notice>, StoreError> {
        let notices = self.store.notices().await?;
        let started = std::time::Instant::now();
        self.store
            .heartbeat(self.options.api.as_deref(), self.options.lease_time)
            .await?;
        // It holds no lease yet: the heartbeat is all there is to renew.
        self.liveness.renewed(started);
        self.metrics
            .set_instance(self.store.instance_id(), self.store.host_label());
        Ok(notices)
    }

    /// Holds leases and serves requests for `handle`'s engine until `shutdown` completes, then
    /// gives every lease back so the other instances take over at once.
    pub async fn run(
        self,
        handle: EngineHandle,
        notices: mpsc::Receiver<Notice>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let round = self.options.lease_time / 3;
        let mut rounds = tokio::time::interval(round.max(Duration::from_millis(100)));
        rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Free leases (an instance died, its leases lapsed) are looked for more often than
        // leases are renewed, so a takeover follows the expiry within about a second.
        let mut claim_checks =
            tokio::time::interval(round.clamp(Duration::from_millis(100), CLAIM_CHECK));
        claim_checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (answered, mut executed) = mpsc::unbounded_channel::<i64>();
        let mut in_flight: HashSet<i64> = HashSet::new();
        // Other instances' changes are followed in a task of their own: however many arrive,
        // renewals never wait behind them.
        let follower = tokio::spawn(follow(
            self.store.clone(),
            handle.clone(),
            self.mirrors.clone(),
            Arc::clone(&self.shared),
            notices,
        ));
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = rounds.tick() => {
                    if let Err(error) = self.keep_leases(&handle).await {
                        tracing::warn!("cluster: keeping leases failed: {error}");
                    }
                    self.serve_requests(&handle, &mut in_flight, &answered).await;
                }
                () = self.shared.requests.notified() => {
                    self.serve_requests(&handle, &mut in_flight, &answered).await;
                }
                _ = claim_checks.tick() => {
                    if let Err(error) = self.balance(&handle).await {
                        tracing::warn!("cluster: balancing failed: {error}");
                    }
                }
                () = self.shared.freed.notified() => {
                    if let Err(error) = self.balance(&handle).await {
                        tracing::warn!("cluster: balancing failed: {error}");
                    }
                }
                Some(id) = executed.recv() => {
                    in_flight.remove(&id);
                }
            }
        }
        follower.abort();
        match self.store.leave().await {
            Ok(()) => tracing::info!("cluster: left, leases given back"),
            Err(error) => tracing::warn!("cluster: leaving failed (leases lapse instead): {error}"),
        }
        self.metrics.leases_held.set(0);
    }

    /// Heartbeat, renewal, and balancing.
    async fn keep_leases(&self, handle: &EngineHandle) -> Result<(), StoreError> {
        let lease_time = self.options.lease_time;
        let started = std::time::Instant::now();
        self.store
            .heartbeat(self.options.api.as_deref(), lease_time)
            .await?;
        for key in self.store.renew(lease_time).await? {
            tracing::info!(rollout = %key, "cluster: lease lost");
            self.metrics.leases_lost.inc();
            // Not awaited: the job under way may take a while, and the next renewal must not.
            let handle = handle.clone();
            tokio::spawn(async move { handle.release(key).await });
        }
        self.liveness.renewed(started);
        self.balance(handle).await
    }

    /// Claims up to the fair share, gives back beyond it.
    async fn balance(&self, handle: &EngineHandle) -> Result<(), StoreError> {
        let lease_time = self.options.lease_time;
        let summary = self.store.lease_summary(lease_time).await?;
        let me = self.store.instance_id();
        let live = summary.live_instances.len().max(1) as u64;
        let share = summary.claimable_total.div_ceil(live);
        let held = self.store.held_leases();
        let holding = held.len() as u64;
        if holding < share && summary.free > 0 {
            // Batch after batch up to the share, so a dead instance's rollouts are all taken
            // over in one round, not one batch per round.
            let mut holding = holding;
            while holding < share {
                let want = usize::try_from(share - holding)
                    .unwrap_or(usize::MAX)
                    .min(self.options.claim_batch.max(1));
                let claimed = self.claim_batch(handle, want).await?;
                if claimed == 0 {
                    break;
                }
                holding += claimed as u64;
            }
        } else if holding > share + 1 && summary.live_instances.len() > 1 {
            let excess = usize::try_from(holding - share).unwrap_or(usize::MAX);
            let mut give: Vec<RolloutKey> = held.into_iter().map(|(key, _)| key).collect();
            give.sort();
            give.truncate(excess);
            tracing::info!(
                count = give.len(),
                share,
                me,
                "cluster: giving back leases beyond the share"
            );
            self.metrics.releases.inc_by(give.len() as u64);
            // The engine lets go first (a local router stops), then the lease is freed; in the
            // background, so that renewals never wait for a job under way.
            let (store, handle) = (self.store.clone(), handle.clone());
            tokio::spawn(async move {
                for key in &give {
                    let _ = handle.release(key.clone()).await;
                }
                if let Err(error) = store.release(&give).await {
                    tracing::warn!(
                        "cluster: giving leases back failed (they lapse instead): {error}"
                    );
                }
            });
        }
        self.metrics
            .leases_held
            .set(i64::try_from(self.store.held_leases().len()).unwrap_or(i64::MAX));
        Ok(())
    }

    /// Claims up to `want` free leases and adopts their rollouts; returns how many were won.
    async fn claim_batch(&self, handle: &EngineHandle, want: usize) -> Result<usize, StoreError> {
        let claimed = self.store.claim(want, self.options.lease_time).await?;
        let count = claimed.len();
        let mut adopting = tokio::task::JoinSet::new();
        for lease in claimed {
            self.metrics.claims.inc();
            if lease.previous_owner.is_some() {
                self.metrics.takeovers.inc();
                tracing::info!(rollout = %lease.key, from = ?lease.previous_owner, epoch = lease.epoch, "cluster: took over");
            }
            let handle = handle.clone();
            adopting.spawn(async move {
                let adopted = handle.adopt(lease.key.clone()).await;
                (lease.key, adopted)
            });
        }
        let mut unread = Vec::new();
        while let Some(Ok((key, adopted))) = adopting.join_next().await {
            if let Err(error) = adopted {
                tracing::warn!(rollout = %key, "cluster: cannot take the rollout over now: {error}");
                unread.push(key);
            }
        }
        // Given back, so that this instance or another claims it again later.
        if !unread.is_empty() {
            self.store.release(&unread).await?;
        }
        Ok(count)
    }

    /// Executes the requests waiting for rollouts this instance holds (each once at a time).
    async fn serve_requests(
        &self,
        handle: &EngineHandle,
        in_flight: &mut HashSet<i64>,
        answered: &mpsc::UnboundedSender<i64>,
    ) {
        let pending = match self.store.pending_requests().await {
            Ok(pending) => pending,
            Err(error) => {
                tracing::warn!("cluster: reading requests failed: {error}");
                return;
            }
        };
        for request in pending {
            if !in_flight.insert(request.id) {
                continue;
            }
            let store = self.store.clone();
            let handle = handle.clone();
            let answered = answered.clone();
            let metrics = self.metrics.clone();
            tokio::spawn(async move {
                let id = request.id;
                if let Some(answer) = execute(&store, &handle, request).await {
                    metrics.executed_for_others.inc();
                    if let Err(error) = store.answer_request(id, &answer).await {
                        tracing::warn!("cluster: answering request {id} failed: {error}");
                    }
                }
                let _ = answered.send(id);
            });
        }
    }
}

/// Follows the notifications: wakes up request handling and claims, completes forwarded
/// requests' waits, and relays other instances' changes (to subscribers and mirrors).
async fn follow<S: Cluster>(
    store: S,
    handle: EngineHandle,
    mirrors: Vec<Arc<dyn Mirror>>,
    shared: Arc<Shared>,
    mut notices: mpsc::Receiver<Notice>,
) {
    let mut relay = Relay::default();
    resync(&store, &mirrors).await;
    while let Some(notice) = notices.recv().await {
        match notice {
            Notice::RequestSubmitted { key, .. } => {
                if store.held_leases().iter().any(|(held, _)| *held == key) {
                    shared.requests.notify_one();
                }
            }
            Notice::RequestAnswered { id } => {
                let waiters = shared
                    .waiters
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
                if let Some(waiters) = waiters
                    && let Ok(Some(answer)) = store.request_answer(id).await
                {
                    for waiter in waiters {
                        let _ = waiter.send(answer.clone());
                    }
                }
            }
            Notice::RolloutChanged {
                key,
                version,
                last_event_seq,
                by,
            } => {
                // Read back only when someone here looks: a watcher, or a mirror.
                if by != store.instance_id()
                    && (handle.changes.receiver_count() > 0 || !mirrors.is_empty())
                {
                    let stored = relay
                        .announce(&store, &handle, key.clone(), version, last_event_seq)
                        .await;
                    for mirror in &mirrors {
                        mirror.rollout_changed(&key, stored.as_ref()).await;
                    }
                }
            }
            Notice::LeasesFreed => shared.freed.notify_one(),
            Notice::Reconnected => {
                shared.freed.notify_one();
                shared.requests.notify_one();
                resync(&store, &mirrors).await;
            }
            Notice::FlagChanged {
                namespace, key, by, ..
            } => {
                if by != store.instance_id() {
                    for mirror in &mirrors {
                        mirror.flag_changed(&namespace, &key).await;
                    }
                }
            }
            // The server's access control follows these on a listener of its own.
            Notice::TokensChanged { .. } => {}
        }
    }
    // The listener gave up; rounds still renew, claim and serve requests by polling.
    tracing::warn!("cluster: notifications stopped; polling only");
}

/// Reads every rollout this instance does not hold into the mirrors.
async fn resync<S: Cluster>(store: &S, mirrors: &[Arc<dyn Mirror>]) {
    if mirrors.is_empty() {
        return;
    }
    let all = match store.load_all().await {
        Ok(all) => all,
        Err(error) => {
            tracing::warn!("cluster: reading the rollouts again failed: {error}");
            return;
        }
    };
    let held: HashSet<RolloutKey> = store
        .held_leases()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    let others: Vec<StoredRollout> = all
        .into_iter()
        .filter(|stored| !held.contains(&stored.key))
        .collect();
    for mirror in mirrors {
        mirror.resync(&others).await;
    }
}

/// Runs one forwarded request through the engine; `None` when this instance must not answer it
/// (it lost the rollout meanwhile: the next owner will).
async fn execute<S: Cluster>(
    store: &S,
    handle: &EngineHandle,
    request: weir_store::PendingRequest,
) -> Option<serde_json::Value> {
    let executed_already = || async {
        // Executed by an owner that died before answering: the answer is the rollout now.
        let now = store.get(&request.key).await;
        crate::forward::answer_of(&now.map_err(EngineError::from))
    };
    if request.executed {
        return Some(executed_already().await);
    }
    let forwarded: Forwarded = match serde_json::from_value(request.body.clone()) {
        Ok(forwarded) => forwarded,
        Err(error) => {
            let refusal = RemoteError::new(
                RemoteErrorKind::Internal,
                format!("the request cannot be read by this instance: {error}"),
            );
            return serde_json::to_value(Answer::Error(refusal)).ok();
        }
    };
    match handle
        .execute(request.id, request.key.clone(), forwarded)
        .await
    {
        Executed::Answer(answer) => Some(answer),
        Executed::Moved => None,
        Executed::Before => Some(executed_already().await),
    }
}

/// Turns other instances' change notifications into [`StatusChange`]s on this instance.
#[derive(Default)]
struct Relay {
    /// The last event announced per rollout.
    last_seq: HashMap<RolloutKey, u64>,
}

impl Relay {
    async fn announce<S: Cluster>(
        &mut self,
        store: &S,
        handle: &EngineHandle,
        key: RolloutKey,
        version: u64,
        last_event_seq: u64,
    ) -> Option<StoredRollout> {
        if version == 0 {
            self.last_seq.remove(&key);
            handle.announce(StatusChange {
                key,
                version,
                status: None,
                events: Vec::new(),
            });
            return None;
        }
        let stored = store.get(&key).await.ok()??;
        // The events of this write: those after the last one announced; for a rollout not
        // seen before, those written with this version (they carry its time).
        let (after, first_sight) = match self.last_seq.get(&key) {
            Some(seen) => (*seen, false),
            None => (last_event_seq.saturating_sub(20), true),
        };
        let mut events: Vec<StoredEvent> = if last_event_seq > after {
            store
                .events(&key, after, weir_store::MAX_PAGE)
                .await
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        if first_sight {
            events.retain(|event| event.event.at == stored.updated_at);
        }
        self.last_seq.insert(key.clone(), stored.last_event_seq);
        handle.announce(StatusChange {
            key,
            version: stored.version,
            status: Some(stored.status.clone()),
            events,
        });
        Some(stored)
    }
}
