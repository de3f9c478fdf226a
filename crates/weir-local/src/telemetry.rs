//! The embedded routers' traffic as weir's own metrics (`weir_router_*`, labels `namespace`,
//! `rollout`, `role`, `revision`, `traffic`): not copied anywhere, but read at scrape time from
//! each local rollout's router counters, so a scrape costs nothing between scrapes and is exactly
//! as fresh as the router itself.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;
use weir_engine::telemetry::ScrapedMetrics;
use weir_router::RouteHandle;
use weir_router::metrics::MetricsSnapshot;
use weir_store::RolloutKey;

/// Buckets of `weir_router_request_duration_seconds`, as the router's own `/metrics` has them
/// (`weir_router::metrics::render_prometheus`), so dashboards work on both.
const ROUTER_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

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

impl fmt::Debug for LocalRouters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalRouters").finish_non_exhaustive()
    }
}

impl ScrapedMetrics for LocalRouters {
    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let mut scraped: Vec<Scraped> = self
            .entries()
            .into_iter()
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
mod tests {
    use super::role;

    #[test]
    fn roles_follow_the_canary_revision_until_it_is_promoted() {
        assert_eq!(role("r2", "r1", "r2"), "canary");
        assert_eq!(role("r1", "r1", "r2"), "primary");
        // After promotion the primary runs the canary's revision: one version, the primary.
        assert_eq!(role("r2", "r2", "r2"), "primary");
        // The old primary's counters stay, as a primary.
        assert_eq!(role("r1", "r2", "r2"), "primary");
    }
}
