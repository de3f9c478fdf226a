//! weir's own metrics, for a Prometheus that scrapes `/metrics` (docs/METRICS.md lists them all).
//!
//! Two groups of its own, one [`Telemetry`] per engine, and what adapters add:
//!
//! - **per rollout** (`weir_rollout_*`, labels `namespace` and `rollout`): set by the engine from
//!   every committed status change, so they never show a step that was not made durable; the
//!   judge task adds each judge's current e-value and health bound. A deleted rollout's series are removed, so the
//!   number of series follows the number of rollouts, not their history.
//! - **engine health** (`weir_engine_*`): tick lateness, store commit time, ticks, provider errors
//!   and the number of rollouts known.
//! - **adapters' families** ([`ScrapedMetrics`]), read at scrape time from the adapter's own
//!   state: weir-local adds the embedded routers' traffic (`weir_router_*`).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use weir_core::model::{EventReason, Phase, RolloutStatus};
use weir_store::RolloutKey;

use crate::handle::StatusChange;

/// Every phase, so `weir_rollout_phase` has one series per phase (0 or 1) and an alert can test
/// `== 1` on the phase it cares about without worrying about absent series.
pub const PHASES: [Phase; 12] = Phase::ALL;

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
    judge_excess_upper: Family<JudgeLabels, FloatGauge>,
    waiting_for_evidence: Family<RolloutLabels, Gauge>,
    tick_lateness: Histogram,
    store_commit: Histogram,
    ticks: Counter,
    provider_errors: Counter,
    rollouts: Gauge,
    cluster: ClusterMetrics,
    /// The phase each known rollout's gauge shows, so a change touches two series, not eleven.
    known: Mutex<HashMap<RolloutKey, Phase>>,
    /// Which judges have a series per rollout, to remove them when the run or the rollout ends.
    judges: Mutex<HashMap<RolloutKey, BTreeSet<String>>>,
    /// The adapters' families read at scrape time, by name.
    scraped: SourceList,
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
        let judge_excess_upper = Family::<JudgeLabels, FloatGauge>::default();
        registry.register(
            "weir_rollout_judge_excess_upper_bound",
            "A judge's anytime-valid upper bound on how much more often the canary fails than the primary (a fraction); the evidence rule promotes once it is below the margin",
            judge_excess_upper.clone(),
        );
        let waiting_for_evidence = Family::<RolloutLabels, Gauge>::default();
        registry.register(
            "weir_rollout_waiting_for_evidence",
            "1 while a run holds for evidence of health (spec.analysis.evidence), 0 while it runs otherwise; absent between runs",
            waiting_for_evidence.clone(),
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
        let cluster = ClusterMetrics::register(&mut registry);
        let scraped = Arc::new(Mutex::new(Vec::new()));
        registry.register_collector(Box::new(ScrapedSources {
            sources: Arc::clone(&scraped),
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
            judge_excess_upper,
            waiting_for_evidence,
            tick_lateness,
            store_commit,
            ticks,
            provider_errors,
            rollouts,
            cluster,
            known: Mutex::default(),
            judges: Mutex::default(),
            scraped,
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
        // A run's series: it means nothing between runs.
        if status.phase.in_run() {
            inner
                .waiting_for_evidence
                .get_or_create(&labels)
                .set(i64::from(status.evidence_wait_since.is_some()));
        } else {
            inner.waiting_for_evidence.remove(&labels);
        }
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
        inner.waiting_for_evidence.remove(&labels);
        inner.promotions.remove(&labels);
        inner.rollbacks.remove(&labels);
        for result in ["succeeded", "failed"] {
            inner.run_duration.remove(&run_labels(key, result));
        }
        self.remove_judges(key);
    }

    /// Sets the natural log of a judge's current e-value in a rollout's run.
    pub fn set_judge_log_evalue(&self, key: &RolloutKey, judge: &str, log_e_value: f64) {
        self.note_judge(key, judge);
        self.inner
            .judge_log_evalue
            .get_or_create(&judge_labels(key, judge))
            .set(log_e_value);
    }

    /// Sets a judge's upper bound on the canary's excess failure rate in a rollout's run (not
    /// finite: nothing is shown yet, and the series waits for a bound).
    pub fn set_judge_excess_upper(&self, key: &RolloutKey, judge: &str, excess_upper: f64) {
        if !excess_upper.is_finite() {
            return;
        }
        self.note_judge(key, judge);
        self.inner
            .judge_excess_upper
            .get_or_create(&judge_labels(key, judge))
            .set(excess_upper);
    }

    /// Remembers that `judge` has series for `key`, so they go when the run ends.
    fn note_judge(&self, key: &RolloutKey, judge: &str) {
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
            let labels = judge_labels(key, &name);
            self.inner.judge_log_evalue.remove(&labels);
            self.inner.judge_excess_upper.remove(&labels);
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

    /// Counts a commit refused because another instance holds the rollout's lease now.
    pub fn record_fenced(&self) {
        self.inner.cluster.fencing_rejections.inc();
    }

    /// The metrics of leases and forwarded requests (several instances on one database).
    pub fn cluster(&self) -> &ClusterMetrics {
        &self.inner.cluster
    }

    /// Adds an adapter's families, read at every scrape. A source added again under the same
    /// name (an engine restarted in-process over the same providers) replaces the first, so no
    /// series is ever encoded twice.
    pub fn add_scraped(&self, name: &'static str, source: Arc<dyn ScrapedMetrics>) {
        let mut sources = self
            .inner
            .scraped
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sources.retain(|(known, _)| *known != name);
        sources.push((name, source));
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Metric families an adapter reads from its own state at scrape time (the embedded routers'
/// traffic, for one): nothing is copied between scrapes, and a scrape is exactly as fresh as the
/// adapter's state.
pub trait ScrapedMetrics: fmt::Debug + Send + Sync + 'static {
    /// Encodes this source's families.
    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), fmt::Error>;
}

/// The adapters' scraped sources, by name.
type SourceList = Arc<Mutex<Vec<(&'static str, Arc<dyn ScrapedMetrics>)>>>;

/// Reads every adapter's [`ScrapedMetrics`] at scrape time.
struct ScrapedSources {
    sources: SourceList,
}

impl fmt::Debug for ScrapedSources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScrapedSources").finish_non_exhaustive()
    }
}

impl Collector for ScrapedSources {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let sources = self
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (_, source) in sources {
            source.encode(&mut encoder)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

/// `weir_cluster_*`: leases and forwarded requests, when several instances share one database
/// (docs/SCALE-OUT.md). All zero on a single instance.
#[derive(Debug, Clone, Default)]
pub struct ClusterMetrics {
    /// 1, labelled with this instance's id and host label (once it joined).
    pub instance: Family<Vec<(String, String)>, Gauge>,
    /// Leases this instance holds now.
    pub leases_held: Gauge,
    /// Leases claimed (unowned or expired ones).
    pub claims: Counter,
    /// Of those, leases taken from another instance after they expired.
    pub takeovers: Counter,
    /// Leases this instance held and lost (expired and taken, or their rollout deleted).
    pub leases_lost: Counter,
    /// Leases given back (balancing, or leaving).
    pub releases: Counter,
    /// Commits refused because another instance held the lease by then.
    pub fencing_rejections: Counter,
    /// Requests handed to another instance (the owner of their rollout).
    pub forwarded: Counter,
    /// Requests this instance executed for another.
    pub executed_for_others: Counter,
}

impl ClusterMetrics {
    /// Records this instance's id and host label (`weir_cluster_instance`).
    pub fn set_instance(&self, id: &str, host: &str) {
        self.instance
            .get_or_create(&vec![
                ("instance".to_owned(), id.to_owned()),
                ("host".to_owned(), host.to_owned()),
            ])
            .set(1);
    }

    fn register(registry: &mut Registry) -> ClusterMetrics {
        let metrics = ClusterMetrics::default();
        registry.register(
            "weir_cluster_instance",
            "1, labelled with this instance's id and host label (several instances on one database)",
            metrics.instance.clone(),
        );
        let gauges: [(&str, &str, &Gauge); 1] = [(
            "weir_cluster_leases_held",
            "Rollout leases this instance holds now",
            &metrics.leases_held,
        )];
        for (name, help, gauge) in gauges {
            registry.register(name, help, gauge.clone());
        }
        let counters: [(&str, &str, &Counter); 7] = [
            (
                "weir_cluster_claims",
                "Leases claimed (unowned or expired)",
                &metrics.claims,
            ),
            (
                "weir_cluster_takeovers",
                "Leases taken over from another instance after they expired",
                &metrics.takeovers,
            ),
            (
                "weir_cluster_leases_lost",
                "Leases this instance held and lost",
                &metrics.leases_lost,
            ),
            (
                "weir_cluster_releases",
                "Leases given back (balancing or leaving)",
                &metrics.releases,
            ),
            (
                "weir_cluster_fencing_rejections",
                "Commits refused because another instance held the lease by then",
                &metrics.fencing_rejections,
            ),
            (
                "weir_cluster_forwarded_requests",
                "Requests handed to the instance that owns their rollout",
                &metrics.forwarded,
            ),
            (
                "weir_cluster_executed_requests",
                "Requests this instance executed for another",
                &metrics.executed_for_others,
            ),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
        metrics
    }
}
