//! weir's own metrics, for a Prometheus that scrapes `/metrics` (docs/METRICS.md lists them all).
//!
//! Three groups, one [`Telemetry`] per engine:
//!
//! - **per rollout** (`weir_rollout_*`, labels `namespace` and `rollout`): set by the engine from
//!   every committed status change, so they never show a step that was not made durable; the
//!   judge task adds each judge's current e-value. A deleted rollout's series are removed, so the
//!   number of series follows the number of rollouts, not their history.
//! - **engine health** (`weir_engine_*`): tick lateness, store commit time, ticks, provider errors
//!   and the number of rollouts known.
//! - **the embedded router's traffic** (`weir_router_*`, labels `namespace`, `rollout`, `role`,
//!   `revision`, `traffic`): not copied anywhere, but read at scrape time from each local
//!   rollout's router counters (a [`Collector`]), so a scrape costs nothing between scrapes and is
//!   exactly as fresh as the router itself.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use weir_core::model::{EventReason, Phase, RolloutStatus};
use weir_router::RouteHandle;
use weir_router::metrics::MetricsSnapshot;
use weir_store::RolloutKey;

use crate::handle::StatusChange;

/// Every phase, so `weir_rollout_phase` has one series per phase (0 or 1) and an alert can test
/// `== 1` on the phase it cares about without worrying about absent series.
pub const PHASES: [Phase; 11] = Phase::ALL;

/// Buckets of `weir_rollout_run_duration_seconds`: runs last from seconds (demos) to a day.
const RUN_BUCKETS: [f64; 14] = [
    10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0,
    43200.0, 86400.0,
];

/// Buckets of `weir_engine_tick_lateness_seconds`: a healthy engine starts ticks within a
/// millisecond; seconds mean it is saturated.
const LATENESS_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of `weir_engine_store_commit_seconds`: one fsync is 0.1-10 ms on most disks.
const COMMIT_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Buckets of `weir_router_request_duration_seconds`, as the router's own `/metrics` has them
/// (`weir_router::metrics::render_prometheus`), so dashboards work on both.
pub const ROUTER_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RolloutLabels {
    namespace: String,
    rollout: String,
}

impl RolloutLabels {
    fn of(key: &RolloutKey) -> RolloutLabels {
        RolloutLabels {
            namespace: key.namespace.clone(),
            rollout: key.name.clone(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    namespace: String,
    rollout: String,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    namespace: String,
    rollout: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JudgeLabels {
    namespace: String,
    rollout: String,
    judge: String,
}

fn phase_labels(key: &RolloutKey, phase: Phase) -> PhaseLabels {
    PhaseLabels {
        namespace: key.namespace.clone(),
        rollout: key.name.clone(),
        phase: phase.as_str(),
    }
}

fn run_labels(key: &RolloutKey, result: &'static str) -> RunLabels {
    RunLabels {
        namespace: key.namespace.clone(),
        rollout: key.name.clone(),
        result,
    }
}

fn judge_labels(key: &RolloutKey, judge: &str) -> JudgeLabels {
    JudgeLabels {
        namespace: key.namespace.clone(),
        rollout: key.name.clone(),
        judge: judge.to_owned(),
    }
}

type FloatGauge = Gauge<f64, AtomicU64>;
type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

/// weir's own metrics: a `prometheus_client` registry and handles to its families. Cheap to
/// clone (one `Arc`); every clone updates and encodes the same metrics.
///
/// An engine gets one through `EngineOptions::telemetry` (a fresh one by default) and exposes it
/// with `EngineHandle::telemetry`; the HTTP servers render it with [`Telemetry::encode`].
#[derive(Clone, Default)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field(
                "rollouts",
                &self
                    .inner
                    .known
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len(),
            )
            .finish_non_exhaustive()
    }
}

struct Inner {
    registry: Registry,
    phase: Family<PhaseLabels, Gauge>,
    canary_weight: Family<RolloutLabels, FloatGauge>,
    failed_checks: Family<RolloutLabels, Gauge>,
    run_duration: HistogramFamily<RunLabels>,
    promotions: Family<RolloutLabels, Counter>,
    rollbacks: Family<RolloutLabels, Counter>,
    judge_log_evalue: Family<JudgeLabels, FloatGauge>,
    tick_lateness: Histogram,
    store_commit: Histogram,
    ticks: Counter,
    provider_errors: Counter,
    rollouts: Gauge,
    /// The phase each known rollout's gauge shows, so a change touches two series, not eleven.
    known: Mutex<HashMap<RolloutKey, Phase>>,
    /// Which judges have a series per rollout, to remove them when the run or the rollout ends.
    judges: Mutex<HashMap<RolloutKey, BTreeSet<String>>>,
    /// Where the router collector reads traffic from.
    routers: Arc<Mutex<Vec<LocalRouters>>>,
}

impl Default for Inner {
    fn default() -> Inner {
        let mut registry = Registry::default();
        let phase = Family::<PhaseLabels, Gauge>::default();
        registry.register(
            "weir_rollout_phase",
            "1 for the phase a rollout is in, 0 for every other phase",
            phase.clone(),
        );
        let canary_weight = Family::<RolloutLabels, FloatGauge>::default();
        registry.register(
            "weir_rollout_canary_weight_ratio",
            "The canary's share of traffic (0 to 1), as committed",
            canary_weight.clone(),
        );
        let failed_checks = Family::<RolloutLabels, Gauge>::default();
        registry.register(
            "weir_rollout_failed_checks",
            "Failed checks counted in the current (or last) run",
            failed_checks.clone(),
        );
        let run_duration: HistogramFamily<RunLabels> =
            Family::new_with_constructor(|| Histogram::new(RUN_BUCKETS));
        registry.register_with_unit(
            "weir_rollout_run_duration",
            "Duration of finished runs, from run start to promotion (result=succeeded) or rollback (result=failed)",
            Unit::Seconds,
            run_duration.clone(),
        );
        let promotions = Family::<RolloutLabels, Counter>::default();
        registry.register(
            "weir_rollout_promotions",
            "Runs that promoted their canary",
            promotions.clone(),
        );
        let rollbacks = Family::<RolloutLabels, Counter>::default();
        registry.register(
            "weir_rollout_rollbacks",
            "Runs that rolled back",
            rollbacks.clone(),
        );
        let judge_log_evalue = Family::<JudgeLabels, FloatGauge>::default();
        registry.register(
            "weir_rollout_judge_log_evalue",
            "Natural log of a judge's current e-value in a judged run (rollback at ln(1/alpha), 4.6 for alpha 1%)",
            judge_log_evalue.clone(),
        );
        let tick_lateness = Histogram::new(LATENESS_BUCKETS);
        registry.register_with_unit(
            "weir_engine_tick_lateness",
            "How late ticks start (start minus due time)",
            Unit::Seconds,
            tick_lateness.clone(),
        );
        let store_commit = Histogram::new(COMMIT_BUCKETS);
        registry.register_with_unit(
            "weir_engine_store_commit",
            "Duration of each group-commit store transaction",
            Unit::Seconds,
            store_commit.clone(),
        );
        let ticks = Counter::default();
        registry.register("weir_engine_ticks", "Ticks run", ticks.clone());
        let provider_errors = Counter::default();
        registry.register(
            "weir_engine_provider_errors",
            "Provider failures (observe, apply, reconcile, commit, notify)",
            provider_errors.clone(),
        );
        let rollouts = Gauge::default();
        registry.register(
            "weir_engine_rollouts",
            "Rollouts this engine knows",
            rollouts.clone(),
        );
        let routers = Arc::new(Mutex::new(Vec::new()));
        registry.register_collector(Box::new(RouterCollector {
            sources: Arc::clone(&routers),
        }));
        Inner {
            registry,
            phase,
            canary_weight,
            failed_checks,
            run_duration,
            promotions,
            rollbacks,
            judge_log_evalue,
            tick_lateness,
            store_commit,
            ticks,
            provider_errors,
            rollouts,
            known: Mutex::default(),
            judges: Mutex::default(),
            routers,
        }
    }
}

impl Telemetry {
    /// A fresh registry with every family, and no rollouts yet.
    pub fn new() -> Telemetry {
        Telemetry::default()
    }

    /// Every metric in the OpenMetrics text format (ending with `# EOF`), for
    /// `Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8`.
    pub fn encode(&self) -> String {
        let mut text = String::with_capacity(16 * 1024);
        if let Err(error) =
            prometheus_client::encoding::text::encode(&mut text, &self.inner.registry)
        {
            // Writing to a String cannot fail; this only guards against a future encoder that
            // refuses a value. A partial exposition would be worse than an honest empty one.
            tracing::warn!(%error, "encoding metrics failed");
            text.clear();
            text.push_str("# EOF\n");
        }
        text
    }

    /// Records a committed status change: the status gauges, a finished run (its duration and a
    /// promotion or rollback), or, for a deletion, the removal of the rollout's series.
    pub fn record_change(&self, change: &StatusChange) {
        let Some(status) = &change.status else {
            self.remove_rollout(&change.key);
            return;
        };
        self.record_status(&change.key, status);
        let labels = RolloutLabels::of(&change.key);
        for stored in &change.events {
            let (result, counter) = match stored.event.reason {
                EventReason::Succeeded => ("succeeded", &self.inner.promotions),
                EventReason::RolledBack => ("failed", &self.inner.rollbacks),
                _ => continue,
            };
            counter.get_or_create(&labels).inc();
            if let Some(started) = status.run_started_at {
                let seconds = stored.event.at.duration_since(started).as_secs_f64();
                self.inner
                    .run_duration
                    .get_or_create(&run_labels(&change.key, result))
                    .observe(seconds.max(0.0));
            }
        }
    }

    /// Sets a rollout's status gauges (phase, canary weight, failed checks), creating its series
    /// on first sight (the engine calls this for every stored rollout at start-up).
    pub fn record_status(&self, key: &RolloutKey, status: &RolloutStatus) {
        let inner = &*self.inner;
        let labels = RolloutLabels::of(key);
        {
            let mut known = inner.known.lock().unwrap_or_else(PoisonError::into_inner);
            match known.get_mut(key) {
                Some(shown) if *shown == status.phase => {}
                Some(shown) => {
                    inner.phase.get_or_create(&phase_labels(key, *shown)).set(0);
                    inner
                        .phase
                        .get_or_create(&phase_labels(key, status.phase))
                        .set(1);
                    *shown = status.phase;
                }
                None => {
                    for phase in PHASES {
                        inner
                            .phase
                            .get_or_create(&phase_labels(key, phase))
                            .set(i64::from(phase == status.phase));
                    }
                    // Counters exist from the start at 0, so `increase()` sees the first one.
                    let _ = inner.promotions.get_or_create(&labels);
                    let _ = inner.rollbacks.get_or_create(&labels);
                    known.insert(key.clone(), status.phase);
                    inner.rollouts.set(count(known.len()));
                }
            }
        }
        inner
            .canary_weight
            .get_or_create(&labels)
            .set(f64::from(status.canary_weight.basis_points()) / 10_000.0);
        inner
            .failed_checks
            .get_or_create(&labels)
            .set(i64::from(status.failed_checks));
    }

    /// Removes every series of a deleted rollout.
    pub fn remove_rollout(&self, key: &RolloutKey) {
        let inner = &*self.inner;
        {
            let mut known = inner.known.lock().unwrap_or_else(PoisonError::into_inner);
            known.remove(key);
            inner.rollouts.set(count(known.len()));
        }
        for phase in PHASES {
            inner.phase.remove(&phase_labels(key, phase));
        }
        let labels = RolloutLabels::of(key);
        inner.canary_weight.remove(&labels);
        inner.failed_checks.remove(&labels);
        inner.promotions.remove(&labels);
        inner.rollbacks.remove(&labels);
        for result in ["succeeded", "failed"] {
            inner.run_duration.remove(&run_labels(key, result));
        }
        self.remove_judges(key);
    }

    /// Sets the natural log of a judge's current e-value in a rollout's run.
    pub fn set_judge_log_evalue(&self, key: &RolloutKey, judge: &str, log_e_value: f64) {
        {
            let mut judges = self
                .inner
                .judges
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let names = judges.entry(key.clone()).or_default();
            if !names.contains(judge) {
                names.insert(judge.to_owned());
            }
        }
        self.inner
            .judge_log_evalue
            .get_or_create(&judge_labels(key, judge))
            .set(log_e_value);
    }

    /// Removes a rollout's judge series (its run is no longer judged).
    pub fn remove_judges(&self, key: &RolloutKey) {
        let names = self
            .inner
            .judges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
            .unwrap_or_default();
        for name in names {
            self.inner
                .judge_log_evalue
                .remove(&judge_labels(key, &name));
        }
    }

    /// Counts a tick and records how late it started.
    pub fn record_tick(&self, lateness: Duration) {
        self.inner.ticks.inc();
        self.inner.tick_lateness.observe(lateness.as_secs_f64());
    }

    /// Records the duration of one group-commit store transaction.
    pub fn record_commit(&self, duration: Duration) {
        self.inner.store_commit.observe(duration.as_secs_f64());
    }

    /// Counts a provider failure.
    pub fn record_provider_error(&self) {
        self.inner.provider_errors.inc();
    }

    /// Exposes the traffic of the routers in `routers` as the `weir_router_*` families. Adding the
    /// same map twice (an engine restarted in-process over the same providers) is a no-op, so no
    /// series is ever encoded twice.
    pub fn add_routers(&self, routers: &LocalRouters) {
        let mut sources = self
            .inner
            .routers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !sources
            .iter()
            .any(|known| Arc::ptr_eq(&known.0, &routers.0))
        {
            sources.push(routers.clone());
        }
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What the router collector needs of one local rollout: its router and which revision plays
/// which role.
#[derive(Clone)]
pub struct RouterEntry {
    /// The rollout's router (counters only grow; see weir-router's invariants).
    pub handle: RouteHandle,
    /// The revision the primary runs.
    pub primary: String,
    /// The revision of the canary's definition.
    pub canary: String,
}

/// A synchronous side map of the local rollouts' routers, kept by `LocalTargets` wherever it
/// installs or removes a router and read by the collector at scrape time. The per-rollout state
/// of `LocalTargets` sits behind async mutexes a scrape must not wait on (a reconcile may hold
/// one while a version starts); this map is only ever held for an insert or a copy.
#[derive(Clone, Default)]
pub struct LocalRouters(Arc<Mutex<HashMap<RolloutKey, RouterEntry>>>);

impl LocalRouters {
    /// Records (or updates) a rollout's router and roles.
    pub fn set(&self, key: &RolloutKey, entry: RouterEntry) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), entry);
    }

    /// Forgets a rollout's router (the rollout is gone).
    pub fn remove(&self, key: &RolloutKey) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    fn entries(&self) -> Vec<(RolloutKey, RouterEntry)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(key, entry)| (key.clone(), entry.clone()))
            .collect()
    }
}

/// The role of a version in a rollout's router: `canary` when it is the canary's revision and
/// that differs from the primary's (after a promotion both are one version: the primary).
pub fn role(version: &str, primary: &str, canary: &str) -> &'static str {
    if version == canary && canary != primary {
        "canary"
    } else {
        "primary"
    }
}

/// Reads the routers of local rollouts at scrape time.
struct RouterCollector {
    sources: Arc<Mutex<Vec<LocalRouters>>>,
}

impl fmt::Debug for RouterCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouterCollector").finish_non_exhaustive()
    }
}

/// One rollout's router counters at scrape time.
struct Scraped {
    key: RolloutKey,
    primary: String,
    canary: String,
    snapshot: MetricsSnapshot,
}

impl Scraped {
    /// The label set of each series of the snapshot, in exposition order.
    fn series(
        &self,
    ) -> impl Iterator<Item = ([(&'static str, &str); 5], &weir_router::VersionSnapshot)> {
        self.snapshot.versions.iter().map(move |version| {
            (
                [
                    ("namespace", self.key.namespace.as_str()),
                    ("rollout", self.key.name.as_str()),
                    ("role", role(&version.version, &self.primary, &self.canary)),
                    ("revision", version.version.as_str()),
                    ("traffic", version.traffic.as_str()),
                ],
                version,
            )
        })
    }
}

impl Collector for RouterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let sources: Vec<LocalRouters> = self
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut scraped: Vec<Scraped> = sources
            .iter()
            .flat_map(LocalRouters::entries)
            .map(|(key, entry)| Scraped {
                snapshot: entry.handle.metrics(),
                key,
                primary: entry.primary,
                canary: entry.canary,
            })
            .collect();
        if scraped.is_empty() {
            return Ok(());
        }
        // A stable order makes the exposition diffable.
        scraped.sort_by(|a, b| a.key.cmp(&b.key));

        let mut requests = encoder.encode_descriptor(
            "weir_router_requests",
            "Requests the embedded router finished, per local rollout, role, revision and traffic (served or mirror).",
            None,
            MetricType::Counter,
        )?;
        for rollout in &scraped {
            for (labels, version) in rollout.series() {
                requests
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&version.requests, None)?;
            }
        }
        let mut errors = encoder.encode_descriptor(
            "weir_router_errors",
            "Requests answered with a 5xx status (from the version, or 502/504 from the router).",
            None,
            MetricType::Counter,
        )?;
        for rollout in &scraped {
            for (labels, version) in rollout.series() {
                errors
                    .encode_family(&labels)?
                    .encode_counter::<NoLabelSet, _, u64>(&version.errors, None)?;
            }
        }
        let unit = Unit::Seconds;
        let mut durations = encoder.encode_descriptor(
            "weir_router_request_duration",
            "Time from request head to response head.",
            Some(&unit),
            MetricType::Histogram,
        )?;
        for rollout in &scraped {
            for (labels, version) in rollout.series() {
                let buckets = router_buckets(version);
                durations
                    .encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(
                        version.latency.sum_micros as f64 / 1e6,
                        version.requests,
                        &buckets,
                        None,
                    )?;
            }
        }
        Ok(())
    }
}

/// A version's latencies as (upper bound, count in this bucket alone) pairs - the encoder
/// accumulates them - ending with `+Inf`. The router's histogram is finer (1/16 of a power of
/// two); a bucket straddling a bound is counted under it, as the router's own exposition does.
fn router_buckets(version: &weir_router::VersionSnapshot) -> Vec<(f64, u64)> {
    let mut buckets = Vec::with_capacity(ROUTER_BUCKETS.len() + 1);
    let mut below = 0;
    for bound in ROUTER_BUCKETS {
        let at_most = version
            .latency
            .count_at_most(Duration::from_secs_f64(bound))
            .min(version.requests);
        buckets.push((bound, at_most.saturating_sub(below)));
        below = below.max(at_most);
    }
    buckets.push((f64::INFINITY, version.requests.saturating_sub(below)));
    buckets
}

#[cfg(test)]
mod tests;
