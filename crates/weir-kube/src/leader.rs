//! Leader election for `weir operator` through a `coordination.k8s.io/v1` Lease, with fencing.
//!
//! Every replica runs a [`Leadership`]: it reads the Lease, takes it when it is free (no holder)
//! or expired (`renewTime + leaseDurationSeconds` in the past by the wall clock), renews it every
//! renew period while it holds it, and clears the holder on [`Leadership::release`]. Every write
//! carries the resourceVersion it was based on, so of two replicas racing for an expired Lease
//! the server lets one win (409 Conflict for the other).
//!
//! **Fencing.** [`Leadership::is_leader`] is not a flag the renewal loop sets: it is computed
//! when asked, from a monotonic [`Instant`] taken before the first request of the last
//! successful acquisition or renewal. It turns false `lease_duration - safety_margin` after that
//! instant, whether or not the renewal loop is running or any answer ever comes back. Another
//! replica may take the Lease only `lease_duration` after the `renewTime` written with that
//! renewal (stamped at the same moment), so a replica that was paused or cut off has stopped
//! acting as the leader before another can start, as long as the clocks of the two replicas
//! differ by less than the safety margin. The operator asks `is_leader()` right before each
//! write it makes as the leader.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The Lease `weir operator` replicas compete for unless told otherwise.
pub const DEFAULT_LEASE_NAME: &str = "weir-operator";

/// Where the Lease is, who we are, and the timing of the election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This replica's `holderIdentity`: unique among the replicas ([`default_identity`]).
    pub identity: String,
    /// `leaseDurationSeconds`: how long after its last renewal a Lease may be taken by another
    /// replica. Whole seconds. Default 15 s.
    pub lease_duration: Duration,
    /// How often the leader renews. Default 5 s.
    pub renew_period: Duration,
    /// How often a replica that is not the leader (or whose renewal failed) tries again.
    /// Default 2 s.
    pub retry_period: Duration,
    /// How much sooner than `lease_duration` after its last successful renewal the leader stops
    /// acting as one: covers the clock difference between replicas. Default 2 s.
    pub safety_margin: Duration,
}

impl LeaseConfig {
    /// The defaults: lease 15 s, renew every 5 s, retry every 2 s, safety margin 2 s.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> LeaseConfig {
        LeaseConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_period: Duration::from_secs(5),
            retry_period: Duration::from_secs(2),
            safety_margin: Duration::from_secs(2),
        }
    }

    /// How long after the start of a successful renewal this replica may act as the leader.
    pub fn fence_after(&self) -> Duration {
        self.lease_duration.saturating_sub(self.safety_margin)
    }

    fn lease_seconds(&self) -> Result<i32, LeaderError> {
        let invalid = |why: &str| Err(LeaderError::Config(why.to_owned()));
        if self.lease_duration.subsec_nanos() != 0 || self.lease_duration.is_zero() {
            return invalid("the lease duration must be a whole number of seconds, at least 1");
        }
        i32::try_from(self.lease_duration.as_secs())
            .or_else(|_| invalid("the lease duration is too long"))
    }

    fn check(&self) -> Result<i32, LeaderError> {
        let invalid = |why: String| Err(LeaderError::Config(why));
        let seconds = self.lease_seconds()?;
        if self.identity.is_empty() || self.namespace.is_empty() || self.name.is_empty() {
            return invalid("the identity, namespace and lease name must not be empty".into());
        }
        if self.renew_period.is_zero() || self.retry_period.is_zero() {
            return invalid("the renew and retry periods must be longer than zero".into());
        }
        if self.renew_period >= self.fence_after() {
            return invalid(format!(
                "the renew period ({:?}) must be shorter than the lease duration minus the safety margin ({:?})",
                self.renew_period,
                self.fence_after()
            ));
        }
        Ok(seconds)
    }
}

/// `$POD_NAME`, else `$HOSTNAME`, else the kernel's hostname, then `_` and the process id.
pub fn default_identity() -> String {
    let from_env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let host = from_env("POD_NAME")
        .or_else(|| from_env("HOSTNAME"))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty())
        })
        .unwrap_or_else(|| "weir".to_owned());
    format!("{host}_{}", std::process::id())
}

/// Why leader election could not start or a release failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The settings cannot work.
    #[error("invalid leader-election settings: {0}")]
    Config(String),
    /// [`Leadership::start`] was called outside a tokio runtime.
    #[error("leader election must be started inside a tokio runtime")]
    NoRuntime,
    /// The API server refused or could not be reached.
    #[error("lease request failed: {0}")]
    Kube(#[from] kube::Error),
}

/// What the renewal loop and the handle share.
struct Shared {
    config: LeaseConfig,
    lease_seconds: i32,
    api: Api<Lease>,
    /// While we hold the Lease: when the last successful acquisition or renewal started.
    renewed: Mutex<Option<Instant>>,
    /// Whether we announced leadership (what [`Leadership::subscribe`] receivers see).
    leading: watch::Sender<bool>,
}

/// What one look at the Lease concluded.
enum Outcome {
    /// We hold it now; `taken`: it was someone else's (or nobody's) before.
    Holding { transitions: i32, taken: bool },
    /// Someone else holds it and it has not expired.
    HeldBy(String),
    /// A write met a 409: someone else wrote first; read again.
    Reread,
}

impl Shared {
    fn renewed(&self) -> MutexGuard<'_, Option<Instant>> {
        // Nothing panics while holding this lock; a poisoned Option<Instant> is still whole.
        self.renewed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn valid_until(&self) -> Option<Instant> {
        self.renewed().map(|at| at + self.config.fence_after())
    }

    fn lease(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.name)
    }

    /// Stops acting as the leader, saying why when we had announced leadership.
    fn step_down(&self, why: &str) {
        *self.renewed() = None;
        if self.leading.send_replace(false) {
            eprintln!("weir operator: {why}");
        }
    }

    fn post_params() -> PostParams {
        PostParams {
            field_manager: Some("weir-operator".to_owned()),
            ..PostParams::default()
        }
    }

    /// Reads the Lease and creates, takes or renews it if we may; `now` is the wall-clock time
    /// the attempt started at, written as `renewTime`.
    async fn attempt(&self, now: Timestamp) -> Result<Outcome, kube::Error> {
        let config = &self.config;
        let stamp = Some(MicroTime(now));
        let Some(mut lease) = self.api.get_opt(&config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    namespace: Some(config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(config.identity.clone()),
                    lease_duration_seconds: Some(self.lease_seconds),
                    acquire_time: stamp.clone(),
                    renew_time: stamp,
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&Self::post_params(), &lease).await {
                Ok(_) => Ok(Outcome::Holding {
                    transitions: 0,
                    taken: true,
                }),
                Err(error) if is_conflict(&error) => Ok(Outcome::Reread),
                Err(error) => Err(error),
            };
        };
        let spec = lease.spec.take().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(config.identity.as_str());
        if let Some(holder) = holder.filter(|_| !ours)
            && !expired(&spec, now, self.lease_seconds)
        {
            return Ok(Outcome::HeldBy(holder));
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(config.identity.clone()),
            lease_duration_seconds: Some(self.lease_seconds),
            acquire_time: if ours {
                spec.acquire_time.or_else(|| stamp.clone())
            } else {
                stamp.clone()
            },
            renew_time: stamp,
            lease_transitions: Some(transitions),
            ..spec
        });
        // `lease.metadata.resourceVersion` is still the one we read: a 409 means someone wrote
        // the Lease since, and our decision was made on a stale copy.
        match self
            .api
            .replace(&config.name, &Self::post_params(), &lease)
            .await
        {
            Ok(_) => Ok(Outcome::Holding {
                transitions,
                taken: !ours,
            }),
            Err(error) if is_conflict(&error) => Ok(Outcome::Reread),
            Err(error) => Err(error),
        }
    }

    /// The election loop: runs until aborted.
    async fn run(self: Arc<Self>) {
        let config = &self.config;
        let mut failing = false;
        let mut reread = false;
        loop {
            if let Some(until) = self.valid_until()
                && Instant::now() >= until
            {
                self.step_down(&format!(
                    "stopped acting as the leader: lease {} not renewed for {:?} (fenced)",
                    self.lease(),
                    config.fence_after()
                ));
            }
            let started = Instant::now();
            let now = Timestamp::now();
            // A leader gives up waiting for an answer when it would be fenced anyway.
            let limit = match self.valid_until() {
                Some(until) => until
                    .saturating_duration_since(started)
                    .min(config.renew_period),
                None => config.lease_duration,
            };
            let outcome = tokio::time::timeout(limit, self.attempt(now)).await;
            let mut next = started + config.retry_period;
            match outcome {
                Ok(Ok(Outcome::Holding { transitions, taken })) => {
                    failing = false;
                    reread = false;
                    *self.renewed() = Some(started);
                    let announced = self.leading.send_replace(true);
                    if !announced || taken {
                        eprintln!(
                            "weir operator: became the leader (lease {}, transition {transitions})",
                            self.lease()
                        );
                    }
                    next = started + config.renew_period;
                }
                Ok(Ok(Outcome::HeldBy(holder))) => {
                    failing = false;
                    reread = false;
                    self.step_down(&format!("lost the lease {} to {holder}", self.lease()));
                }
                Ok(Ok(Outcome::Reread)) if !reread => {
                    // Someone wrote between our read and our write: look again at once, once.
                    reread = true;
                    continue;
                }
                Ok(Ok(Outcome::Reread)) => reread = false,
                Ok(Err(error)) => {
                    reread = false;
                    if !failing {
                        eprintln!(
                            "weir operator: cannot acquire or renew lease {}: {error}",
                            self.lease()
                        );
                    }
                    failing = true;
                }
                Err(_) => {
                    reread = false;
                    if !failing {
                        eprintln!(
                            "weir operator: cannot acquire or renew lease {}: no answer within {limit:?}",
                            self.lease()
                        );
                    }
                    failing = true;
                }
            }
            // Wake up in time to step down if the renewals keep failing.
            if let Some(until) = self.valid_until() {
                next = next.min(until);
            }
            tokio::time::sleep_until(next.into()).await;
        }
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Whether a Lease held by someone else may be taken at `now`: its last renewal (or
/// acquisition) plus its duration is in the past. A Lease without either time is expired.
fn expired(spec: &LeaseSpec, now: Timestamp, default_seconds: i32) -> bool {
    let Some(MicroTime(renewed)) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let seconds = spec.lease_duration_seconds.unwrap_or(default_seconds);
    renewed
        .checked_add(SignedDuration::from_secs(i64::from(seconds)))
        .is_ok_and(|expiry| expiry < now)
}

/// One replica's part in the election: campaigns and renews in the background from
/// [`Leadership::start`] until [`Leadership::release`] or until dropped. Dropping it without
/// `release` stops the renewals but leaves the Lease held until it expires (as a crash would).
pub struct Leadership {
    shared: Arc<Shared>,
    receiver: watch::Receiver<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(task) = self.task_slot().take() {
            task.abort();
        }
    }
}

impl Leadership {
    /// Starts campaigning for the Lease `config` names, on the current tokio runtime.
    pub fn start(client: Client, config: LeaseConfig) -> Result<Leadership, LeaderError> {
        let lease_seconds = config.check()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| LeaderError::NoRuntime)?;
        let api = Api::namespaced(client, &config.namespace);
        let (leading, receiver) = watch::channel(false);
        let shared = Arc::new(Shared {
            config,
            lease_seconds,
            api,
            renewed: Mutex::new(None),
            leading,
        });
        let task = runtime.spawn(shared.clone().run());
        Ok(Leadership {
            shared,
            receiver,
            task: Mutex::new(Some(task)),
        })
    }

    fn task_slot(&self) -> MutexGuard<'_, Option<JoinHandle<()>>> {
        // Only take() and abort() run under this lock: nothing can poison it half-way.
        self.task
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The fence: true only while the last successful acquisition or renewal started less than
    /// `lease_duration - safety_margin` ago (monotonic clock). Ask it right before every write
    /// made as the leader.
    pub fn is_leader(&self) -> bool {
        self.valid_until()
            .is_some_and(|until| Instant::now() < until)
    }

    /// When [`Leadership::is_leader`] turns false unless a renewal succeeds first; `None` when
    /// this replica does not hold the Lease. A leader can bound a write's timeout by it.
    pub fn valid_until(&self) -> Option<Instant> {
        self.shared.valid_until()
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.shared.config.identity
    }

    /// The settings it runs with.
    pub fn config(&self) -> &LeaseConfig {
        &self.shared.config
    }

    /// Leadership as announced by the renewal loop: `true` when this replica became the leader,
    /// `false` when it lost the Lease, stepped down at the fence or released. It follows
    /// [`Leadership::is_leader`] within one scheduling delay; for fencing ask `is_leader`.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.receiver.clone()
    }

    /// Returns once this replica has become the leader (at once if it is).
    pub async fn wait_until_leader(&mut self) {
        self.wait_for(true).await;
    }

    /// Returns once this replica is no longer the leader (at once if it is not).
    pub async fn wait_until_lost(&mut self) {
        self.wait_for(false).await;
    }

    async fn wait_for(&mut self, leading: bool) {
        if self
            .receiver
            .wait_for(|announced| *announced == leading)
            .await
            .is_err()
        {
            // The sender lives in `self.shared`, which `self` keeps alive: it cannot be gone.
            // Were it ever, the state would never change again, so never return.
            std::future::pending::<()>().await;
        }
    }

    /// Stops campaigning and, if the Lease is still ours on the server, clears its holder so that
    /// another replica takes it at once instead of waiting for it to expire. `is_leader` is false
    /// from the first moment of the call. Call it on graceful shutdown, after the last write.
    pub async fn release(&self) -> Result<(), LeaderError> {
        let task = self.task_slot().take();
        if let Some(task) = task {
            task.abort();
            // A cancelled task answers Err(cancelled): that is what we asked for.
            let _ = task.await;
        }
        let shared = &self.shared;
        *shared.renewed() = None;
        shared.leading.send_replace(false);
        for _ in 0..2 {
            let Some(mut lease) = shared.api.get_opt(&shared.config.name).await? else {
                return Ok(());
            };
            let Some(spec) = lease.spec.as_mut() else {
                return Ok(());
            };
            if spec.holder_identity.as_deref() != Some(shared.config.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            match shared
                .api
                .replace(&shared.config.name, &Shared::post_params(), &lease)
                .await
            {
                Ok(_) => {
                    eprintln!("weir operator: released the lease {}", shared.lease());
                    return Ok(());
                }
                // Written in between (a late renewal of ours cannot be: the loop is stopped).
                Err(error) if is_conflict(&error) => continue,
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn spec(renewed: Option<&str>, seconds: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some("other".into()),
            renew_time: renewed.map(|t| MicroTime(t.parse().expect("a timestamp"))),
            lease_duration_seconds: seconds,
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_lease_expires_its_duration_after_its_renewal() {
        let now: Timestamp = "2026-01-01T00:00:10Z".parse().expect("a timestamp");
        assert!(!expired(
            &spec(Some("2026-01-01T00:00:00Z"), Some(15)),
            now,
            15
        ));
        assert!(expired(
            &spec(Some("2026-01-01T00:00:00Z"), Some(5)),
            now,
            15
        ));
        assert!(!expired(
            &spec(Some("2026-01-01T00:00:00Z"), Some(10)),
            now,
            15
        ));
        assert!(expired(&spec(Some("2026-01-01T00:00:00Z"), None), now, 9));
        assert!(expired(&spec(None, Some(15)), now, 15));
    }

    #[test]
    fn settings_that_cannot_fence_are_refused() {
        let mut config = LeaseConfig::new("weir-system", DEFAULT_LEASE_NAME, "me");
        assert_eq!(config.check().ok(), Some(15));
        config.renew_period = Duration::from_secs(13);
        assert!(config.check().is_err());
        config.renew_period = Duration::from_secs(5);
        config.lease_duration = Duration::from_millis(15_500);
        assert!(config.check().is_err());
    }
}
