//! Per-version request metrics, cheap enough for every request.
//!
//! Each (listener, version, traffic) triple has a [`VersionMetrics`]: an error counter, a latency
//! sum and a fine log-bucket latency histogram, all relaxed atomics. Recording a request is three
//! or four atomic adds and no allocation; the request count is the histogram's total, so it is
//! not counted twice.
//!
//! **One definition of an error**: a request counts as an error when the client receives a 5xx
//! status for it - whether the upstream sent it or the router made it (502 when the upstream
//! cannot be connected to or fails mid-exchange, 504 when it does not answer in time). 4xx
//! statuses are the client's problem and are not errors. Latency is measured from the moment
//! the router has the request head until the response head is available (time to first byte of
//! the response, including connect time); body streaming time is not included, so large
//! downloads do not look like slow versions.
//!
//! Mirror copies are counted in their own series ([`Traffic::Mirror`]) so they never blur the
//! served traffic the canary is judged on.
//!
//! The histogram has 16 exact buckets for 0-15 us and then 16 buckets per power of two, up to
//! about 12 days: every recorded latency is known to within 1/16 (6.25%) of its value. Readers
//! take a [`MetricsSnapshot`] (about 5 KB per version) and subtract an earlier one with
//! [`MetricsSnapshot::delta`] to get the last interval; Prometheus text is rendered from the same
//! snapshot with coarse, standard buckets.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Exact buckets below this many microseconds.
const LINEAR: u64 = 16;
/// Sub-buckets per power of two (log2 of 16).
const SUB_BITS: u32 = 4;
/// Largest power of two covered: 2^40 us is about 12.7 days; larger values land in the last bucket.
const MAX_EXP: u32 = 40;
/// Number of buckets.
pub const BUCKETS: usize =
    (LINEAR as usize) + ((MAX_EXP - SUB_BITS + 1) as usize) * (1 << SUB_BITS);

/// Which traffic a series counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Traffic {
    /// Requests served to clients.
    Served,
    /// Mirrored copies whose responses were discarded.
    Mirror,
}

impl Traffic {
    /// The label value used in exposition: `served` or `mirror`.
    pub fn as_str(self) -> &'static str {
        match self {
            Traffic::Served => "served",
            Traffic::Mirror => "mirror",
        }
    }
}

/// The bucket index for a latency of `micros` microseconds.
fn bucket_index(micros: u64) -> usize {
    if micros < LINEAR {
        return micros as usize;
    }
    let micros = micros.min((1 << (MAX_EXP + 1)) - 1);
    let exp = 63 - micros.leading_zeros(); // >= SUB_BITS because micros >= 16
    let sub = (micros >> (exp - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    LINEAR as usize + ((exp - SUB_BITS) as usize) * (1 << SUB_BITS) + sub as usize
}

/// The half-open range `[low, high)` of microseconds bucket `index` holds.
fn bucket_bounds(index: usize) -> (u64, u64) {
    if index < LINEAR as usize {
        return (index as u64, index as u64 + 1);
    }
    let offset = index - LINEAR as usize;
    let exp = (offset >> SUB_BITS) as u32 + SUB_BITS;
    let sub = (offset & ((1 << SUB_BITS) - 1)) as u64;
    let width = 1u64 << (exp - SUB_BITS);
    let low = (1u64 << exp) + sub * width;
    (low, low + width)
}

/// Live counters of one series. Shared by route tables and readers through an `Arc`.
#[derive(Debug)]
pub struct VersionMetrics {
    errors: AtomicU64,
    latency_sum_micros: AtomicU64,
    buckets: Box<[AtomicU64]>,
}

impl VersionMetrics {
    fn new() -> Self {
        Self {
            errors: AtomicU64::new(0),
            latency_sum_micros: AtomicU64::new(0),
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records one finished request: its status (5xx is an error) and latency.
    pub fn record(&self, status: http::StatusCode, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.buckets[bucket_index(micros)].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_micros.fetch_add(micros, Ordering::Relaxed);
        if status.is_server_error() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn snapshot(&self) -> (u64, LatencySnapshot) {
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let latency = LatencySnapshot {
            sum_micros: self.latency_sum_micros.load(Ordering::Relaxed),
            buckets,
        };
        (self.errors.load(Ordering::Relaxed), latency)
    }
}

/// A copy of a latency histogram at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencySnapshot {
    /// Sum of all latencies, in microseconds.
    pub sum_micros: u64,
    /// Counts per bucket (see the module docs for the bucket layout).
    pub buckets: Vec<u64>,
}

impl LatencySnapshot {
    /// Number of recorded latencies.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The latency at quantile `q` (0.0..=1.0), or `None` when empty. Reported as the upper
    /// edge of the bucket holding it, so it errs high by at most 1/16.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (_, high) = bucket_bounds(index);
                return Some(Duration::from_micros(high - 1));
            }
        }
        None
    }

    /// Mean latency, or `None` when empty.
    pub fn mean(&self) -> Option<Duration> {
        let count = self.count();
        (count > 0).then(|| Duration::from_micros(self.sum_micros / count))
    }

    /// How many recorded latencies were at most `bound`, to within one bucket: the bucket that
    /// contains `bound` is counted whole, so values up to 1/16 above it may be included.
    pub fn count_at_most(&self, bound: Duration) -> u64 {
        let micros = u64::try_from(bound.as_micros()).unwrap_or(u64::MAX);
        self.buckets
            .iter()
            .enumerate()
            .take_while(|(index, _)| bucket_bounds(*index).0 <= micros)
            .map(|(_, n)| n)
            .sum()
    }

    fn delta(&self, earlier: &LatencySnapshot) -> LatencySnapshot {
        LatencySnapshot {
            sum_micros: self.sum_micros.saturating_sub(earlier.sum_micros),
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .map(|(i, n)| n.saturating_sub(earlier.buckets.get(i).copied().unwrap_or(0)))
                .collect(),
        }
    }
}

/// One series at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionSnapshot {
    /// The version's name.
    pub version: String,
    /// Served or mirrored traffic.
    pub traffic: Traffic,
    /// Requests finished (responded to, or failed by the router).
    pub requests: u64,
    /// Of which errors (see the module docs for the definition).
    pub errors: u64,
    /// Their latencies.
    pub latency: LatencySnapshot,
}

/// All series of one listener at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// The listener's name.
    pub listener: String,
    /// One entry per (version, traffic), sorted by version then traffic.
    pub versions: Vec<VersionSnapshot>,
    /// Mirror copies not sent (concurrency bound reached) or abandoned (the mirror could not
    /// keep up with the request body).
    pub mirror_dropped: u64,
}

impl MetricsSnapshot {
    /// The series for `version` and `traffic`, if it has been seen.
    pub fn get(&self, version: &str, traffic: Traffic) -> Option<&VersionSnapshot> {
        self.versions
            .iter()
            .find(|v| v.version == version && v.traffic == traffic)
    }

    /// What happened between `earlier` and `self`. Series missing from `earlier` count from zero.
    pub fn delta(&self, earlier: &MetricsSnapshot) -> MetricsSnapshot {
        let versions = self
            .versions
            .iter()
            .map(|now| match earlier.get(&now.version, now.traffic) {
                Some(before) => VersionSnapshot {
                    version: now.version.clone(),
                    traffic: now.traffic,
                    requests: now.requests.saturating_sub(before.requests),
                    errors: now.errors.saturating_sub(before.errors),
                    latency: now.latency.delta(&before.latency),
                },
                None => now.clone(),
            })
            .collect();
        MetricsSnapshot {
            listener: self.listener.clone(),
            versions,
            mirror_dropped: self.mirror_dropped.saturating_sub(earlier.mirror_dropped),
        }
    }
}

/// The registry of one listener's series. Series are created when a route table naming a version
/// is installed, and kept afterwards so counters never go backwards.
#[derive(Debug)]
pub(crate) struct ListenerMetrics {
    listener: String,
    series: Mutex<BTreeMap<(String, Traffic), Arc<VersionMetrics>>>,
    pub(crate) mirror_dropped: Arc<AtomicU64>,
}

impl ListenerMetrics {
    pub(crate) fn new(listener: &str) -> Self {
        Self {
            listener: listener.to_owned(),
            series: Mutex::new(BTreeMap::new()),
            mirror_dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The series for `version`/`traffic`, created if new. Only called when a table is compiled.
    pub(crate) fn version(&self, version: &str, traffic: Traffic) -> Arc<VersionMetrics> {
        // A poisoned lock only means another thread panicked mid-insert; the map is still valid.
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        series
            .entry((version.to_owned(), traffic))
            .or_insert_with(|| Arc::new(VersionMetrics::new()))
            .clone()
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        let series: Vec<_> = {
            let map = self.series.lock().unwrap_or_else(PoisonError::into_inner);
            map.iter()
                .map(|(key, metrics)| (key.clone(), metrics.clone()))
                .collect()
        };
        let versions = series
            .into_iter()
            .map(|((version, traffic), metrics)| {
                let (errors, latency) = metrics.snapshot();
                VersionSnapshot {
                    version,
                    traffic,
                    requests: latency.count(),
                    errors,
                    latency,
                }
            })
            .collect();
        MetricsSnapshot {
            listener: self.listener.clone(),
            versions,
            mirror_dropped: self.mirror_dropped.load(Ordering::Relaxed),
        }
    }
}

/// Upper bounds (seconds) of the histogram buckets exported to Prometheus.
const PROMETHEUS_BOUNDS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders snapshots (plus each listener's current canary weight) as Prometheus text
/// exposition format 0.0.4.
pub fn render_prometheus(listeners: &[(MetricsSnapshot, f64)]) -> String {
    let mut out = String::with_capacity(4096);
    let header = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    header(
        &mut out,
        "weir_router_canary_weight_ratio",
        "gauge",
        "Current canary weight of each listener (0 to 1).",
    );
    for (snapshot, weight) in listeners {
        let _ = writeln!(
            out,
            "weir_router_canary_weight_ratio{{listener=\"{}\"}} {weight}",
            escape_label(&snapshot.listener)
        );
    }
    header(
        &mut out,
        "weir_router_requests_total",
        "counter",
        "Requests finished, per listener, version and traffic (served or mirror).",
    );
    for (snapshot, _) in listeners {
        for v in &snapshot.versions {
            let _ = writeln!(
                out,
                "weir_router_requests_total{{{}}} {}",
                labels(snapshot, v),
                v.requests
            );
        }
    }
    header(
        &mut out,
        "weir_router_errors_total",
        "counter",
        "Requests answered with a 5xx status (from the upstream, or 502/504 from the router).",
    );
    for (snapshot, _) in listeners {
        for v in &snapshot.versions {
            let _ = writeln!(
                out,
                "weir_router_errors_total{{{}}} {}",
                labels(snapshot, v),
                v.errors
            );
        }
    }
    header(
        &mut out,
        "weir_router_request_duration_seconds",
        "histogram",
        "Time from request head to response head.",
    );
    for (snapshot, _) in listeners {
        for v in &snapshot.versions {
            let labels = labels(snapshot, v);
            for bound in PROMETHEUS_BOUNDS {
                let count = v.latency.count_at_most(Duration::from_secs_f64(bound));
                let _ = writeln!(
                    out,
                    "weir_router_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "weir_router_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                v.requests
            );
            let _ = writeln!(
                out,
                "weir_router_request_duration_seconds_sum{{{labels}}} {}",
                v.latency.sum_micros as f64 / 1e6
            );
            let _ = writeln!(
                out,
                "weir_router_request_duration_seconds_count{{{labels}}} {}",
                v.requests
            );
        }
    }
    header(
        &mut out,
        "weir_router_mirror_dropped_total",
        "counter",
        "Mirror copies dropped because the mirror was saturated or too slow.",
    );
    for (snapshot, _) in listeners {
        let _ = writeln!(
            out,
            "weir_router_mirror_dropped_total{{listener=\"{}\"}} {}",
            escape_label(&snapshot.listener),
            snapshot.mirror_dropped
        );
    }
    out
}

fn labels(snapshot: &MetricsSnapshot, v: &VersionSnapshot) -> String {
    format!(
        "listener=\"{}\",version=\"{}\",traffic=\"{}\"",
        escape_label(&snapshot.listener),
        escape_label(&v.version),
        v.traffic.as_str()
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn buckets_tile_the_range_without_gaps() {
        let mut expected_low = 0;
        for index in 0..BUCKETS {
            let (low, high) = bucket_bounds(index);
            assert_eq!(low, expected_low, "bucket {index}");
            assert!(high > low);
            // Relative width never exceeds 1/16 past the exact range.
            if low >= LINEAR {
                assert!((high - low) * 16 <= low, "bucket {index}");
            }
            assert_eq!(bucket_index(low), index);
            assert_eq!(bucket_index(high - 1), index);
            expected_low = high;
        }
        assert_eq!(bucket_index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_within_a_bucket() {
        let metrics = VersionMetrics::new();
        for ms in 1..=100 {
            metrics.record(StatusCode::OK, Duration::from_millis(ms));
        }
        metrics.record(StatusCode::BAD_GATEWAY, Duration::from_millis(100));
        let (errors, latency) = metrics.snapshot();
        assert_eq!((errors, latency.count()), (1, 101));
        let p50 = latency.quantile(0.5).unwrap().as_secs_f64();
        assert!((0.051..0.0545).contains(&p50), "{p50}");
        let p99 = latency.quantile(0.99).unwrap().as_secs_f64();
        assert!((0.1..0.107).contains(&p99), "{p99}");
        assert_eq!(latency.count_at_most(Duration::from_millis(10)), 10);
    }

    #[test]
    fn snapshots_subtract_and_render() {
        let registry = ListenerMetrics::new("web");
        let v1 = registry.version("v1", Traffic::Served);
        v1.record(StatusCode::OK, Duration::from_millis(2));
        let before = registry.snapshot();
        v1.record(StatusCode::SERVICE_UNAVAILABLE, Duration::from_millis(3));
        v1.record(StatusCode::NOT_FOUND, Duration::from_millis(3));
        registry
            .version("v2", Traffic::Mirror)
            .record(StatusCode::OK, Duration::from_micros(5));
        let now = registry.snapshot();
        let delta = now.delta(&before);
        let d1 = delta.get("v1", Traffic::Served).unwrap();
        assert_eq!((d1.requests, d1.errors), (2, 1));
        assert_eq!(delta.get("v2", Traffic::Mirror).unwrap().requests, 1);
        let text = render_prometheus(&[(now, 0.1)]);
        assert!(
            text.contains(
                "weir_router_requests_total{listener=\"web\",version=\"v1\",traffic=\"served\"} 3\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "weir_router_errors_total{listener=\"web\",version=\"v1\",traffic=\"served\"} 1\n"
        ));
        assert!(text.contains("weir_router_request_duration_seconds_bucket{listener=\"web\",version=\"v1\",traffic=\"served\",le=\"0.001\"} 0\n"));
        assert!(text.contains("weir_router_request_duration_seconds_bucket{listener=\"web\",version=\"v1\",traffic=\"served\",le=\"0.005\"} 3\n"));
        assert!(text.contains("weir_router_canary_weight_ratio{listener=\"web\"} 0.1\n"));
        assert_eq!(escape_label("a\"b\\"), "a\\\"b\\\\");
    }
}
