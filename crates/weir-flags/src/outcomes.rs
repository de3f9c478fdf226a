//! What a flag's variations served, counted per flag and variation since the server started:
//! **exposures** (every OFREP evaluation result) and **outcomes** applications report (requests,
//! errors, slow requests, latencies). They feed the judges of a guarded flag rollout
//! ([`crate::FlagTargets`]'s `judge_window`), its builtin checks, `GET /api/v1/flags/...` and
//! weir's `/metrics`.
//!
//! The counters live in memory beside the snapshot, never in the store: they are evidence for
//! the run in progress, not state to recover (a restarted server starts counting again, and a
//! judge's window only ever looks at what changed since its previous look). Each flag's counters
//! hang off its snapshot entry and are handed on to the entry that replaces it, so an
//! evaluation counts its exposure with one relaxed atomic add on the entry it already holds: no
//! lock and no allocation on the hot path. A report takes a per-flag mutex for its additions
//! only, so that a reader of the two variations a judge compares sees every report either whole
//! or not at all (a window never holds the `on` half of a report without its `off` half).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use weir_core::FieldError;
use weir_core::model::Flag;

/// Buckets per doubling of the latency histogram: bucket edges are 2^(1/8), about 9%, apart.
const PER_DOUBLING: f64 = 8.0;
/// log2 of the lowest bucket edge in milliseconds (62.5 µs); faster requests share bucket 0.
const LOWEST_LOG2: f64 = -4.0;
/// log2 of the highest bucket edge in milliseconds (about 17.5 minutes); slower requests share
/// the last bucket.
const HIGHEST_LOG2: f64 = 20.0;
/// The number of latency buckets: one below the lowest edge, 8 per doubling, one above.
pub const LATENCY_BUCKETS: usize = 2 + ((HIGHEST_LOG2 - LOWEST_LOG2) * PER_DOUBLING) as usize;

/// The most requests one report may count for one variation: far beyond any real interval,
/// and low enough that the counters of a server cannot wrap around within its lifetime.
pub const MAX_REQUESTS_PER_REPORT: u64 = 1_000_000_000_000;

/// What an application observed for one variation since its previous report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Requests (or operations) served with this variation.
    pub requests: u64,
    /// How many of them failed (as the application defines a failure, the same way for every
    /// variation).
    pub errors: u64,
    /// How many were slower than the rollout's latency bound (counted by the application), for
    /// reporters that do not send [`Outcome::latencies_ms`].
    pub slow: u64,
    /// The duration of every one of these requests, in milliseconds (empty: not reported).
    /// weir counts the slow ones against the bound of the rollout that judges the flag.
    pub latencies_ms: Vec<f64>,
}

impl Outcome {
    /// What is wrong with this outcome on its own, with paths under `path` (e.g.
    /// `variants.on`): counts within bounds, errors and slow requests at most the requests, one
    /// latency per request, each a finite number of milliseconds >= 0.
    pub fn check(&self, path: &str) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if self.requests > MAX_REQUESTS_PER_REPORT {
            errors.push(FieldError::with_value(
                format!("{path}.requests"),
                self.requests,
                format!("at most {MAX_REQUESTS_PER_REPORT} requests per report"),
            ));
        }
        for (field, count, what) in [
            ("errors", self.errors, "errors"),
            ("slow", self.slow, "slow requests"),
        ] {
            if count > self.requests {
                errors.push(FieldError::with_value(
                    format!("{path}.{field}"),
                    count,
                    format!(
                        "at most the requests ({}): {what} are counted among the requests",
                        self.requests
                    ),
                ));
            }
        }
        if !self.latencies_ms.is_empty() {
            if self.slow > 0 {
                errors.push(FieldError::new(
                    format!("{path}.slow"),
                    "give either slow or latencyMs, not both: weir counts the slow requests from the latencies itself",
                ));
            }
            if self.latencies_ms.len() as u64 != self.requests {
                errors.push(FieldError::with_value(
                    format!("{path}.latencyMs"),
                    format!("{} latencies", self.latencies_ms.len()),
                    format!(
                        "one latency per request ({}): a sample would compare the variations on different shares of their traffic",
                        self.requests
                    ),
                ));
            }
            if let Some((index, value)) = self
                .latencies_ms
                .iter()
                .enumerate()
                .find(|(_, value)| !(value.is_finite() && **value >= 0.0))
            {
                errors.push(FieldError::with_value(
                    format!("{path}.latencyMs[{index}]"),
                    value,
                    "a duration in milliseconds: a finite number >= 0",
                ));
            }
        }
        errors
    }
}

/// A report for one flag: what each variation (by name) served since the previous report.
pub type Report = BTreeMap<String, Outcome>;

/// A variation's counters at one moment, since the server started (or the flag was created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariationCounts {
    /// OFREP evaluations that served this variation.
    pub exposures: u64,
    /// Reported requests.
    pub requests: u64,
    /// Reported errors.
    pub errors: u64,
    /// Reported slow requests (reports with `slow`).
    pub slow: u64,
    /// Reported latencies (reports with `latencyMs`), per histogram bucket.
    pub latency: Vec<u64>,
}

impl Default for VariationCounts {
    fn default() -> Self {
        VariationCounts {
            exposures: 0,
            requests: 0,
            errors: 0,
            slow: 0,
            latency: vec![0; LATENCY_BUCKETS],
        }
    }
}

impl VariationCounts {
    /// The requests slower than `bound_ms`: those reported as `slow`, and the reported
    /// latencies above the bound, to within one bucket (the bucket holding the bound is not
    /// counted, so the bound in effect is the next bucket edge, at most 9% above it: the same
    /// edge for every variation, so a comparison stays like with like). Without a bound, the
    /// reported `slow` counts alone.
    pub fn slow_above(&self, bound_ms: Option<f64>) -> u64 {
        let Some(bound) = bound_ms else {
            return self.slow;
        };
        let above: u64 = self
            .latency
            .iter()
            .enumerate()
            .filter(|(index, _)| lower_edge(*index) > bound)
            .map(|(_, count)| count)
            .sum();
        self.slow.saturating_add(above)
    }

    /// How many latencies were reported.
    pub fn latencies(&self) -> u64 {
        self.latency.iter().sum()
    }

    /// The `q` quantile (0..=1) of the reported latencies in milliseconds, by nearest rank, as
    /// the upper edge of its bucket; `None` when no latency was reported.
    pub fn latency_quantile(&self, q: f64) -> Option<f64> {
        let count = self.latencies();
        if count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, n) in self.latency.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let upper = upper_edge(index);
                // The last bucket has no upper edge: its lower one is what is known.
                return Some(if upper.is_finite() {
                    upper
                } else {
                    lower_edge(index)
                });
            }
        }
        None
    }

    /// What was counted after `earlier` (a reading of the same variation).
    pub fn since(&self, earlier: &VariationCounts) -> VariationCounts {
        VariationCounts {
            exposures: self.exposures.saturating_sub(earlier.exposures),
            requests: self.requests.saturating_sub(earlier.requests),
            errors: self.errors.saturating_sub(earlier.errors),
            slow: self.slow.saturating_sub(earlier.slow),
            latency: self
                .latency
                .iter()
                .enumerate()
                .map(|(index, n)| {
                    n.saturating_sub(earlier.latency.get(index).copied().unwrap_or(0))
                })
                .collect(),
        }
    }
}

/// The bucket of a latency in milliseconds.
fn bucket_of(ms: f64) -> usize {
    let lowest = LOWEST_LOG2.exp2();
    // NaN goes to bucket 0 too (reports refuse NaN before it gets here).
    if ms.is_nan() || ms < lowest {
        return 0;
    }
    let steps = ((ms.log2() - LOWEST_LOG2) * PER_DOUBLING).floor();
    // `as` saturates: an infinite latency lands in the last bucket.
    (steps as usize).saturating_add(1).min(LATENCY_BUCKETS - 1)
}

/// The lowest latency (ms) of bucket `index`.
fn lower_edge(index: usize) -> f64 {
    if index == 0 {
        0.0
    } else {
        (LOWEST_LOG2 + (index - 1) as f64 / PER_DOUBLING).exp2()
    }
}

/// The latency (ms) where bucket `index` ends (infinite for the last).
fn upper_edge(index: usize) -> f64 {
    if index + 1 >= LATENCY_BUCKETS {
        f64::INFINITY
    } else {
        lower_edge(index + 1)
    }
}

/// One variation's counters: atomics, added to without a lock.
#[derive(Debug)]
pub(crate) struct VariationCounters {
    exposures: AtomicU64,
    requests: AtomicU64,
    errors: AtomicU64,
    slow: AtomicU64,
    latency: [AtomicU64; LATENCY_BUCKETS],
}

impl Default for VariationCounters {
    fn default() -> Self {
        VariationCounters {
            exposures: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            slow: AtomicU64::new(0),
            latency: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl VariationCounters {
    fn add(&self, outcome: &Outcome) {
        // Counters only grow; a report is whole for readers through the flag's report lock,
        // so relaxed adds are enough.
        self.requests.fetch_add(outcome.requests, Ordering::Relaxed);
        self.errors.fetch_add(outcome.errors, Ordering::Relaxed);
        self.slow.fetch_add(outcome.slow, Ordering::Relaxed);
        for latency in &outcome.latencies_ms {
            self.latency[bucket_of(*latency)].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn read(&self) -> VariationCounts {
        VariationCounts {
            exposures: self.exposures.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            slow: self.slow.load(Ordering::Relaxed),
            latency: self
                .latency
                .iter()
                .map(|bucket| bucket.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

/// The counters of one flag, by variation name.
#[derive(Debug, Default)]
pub(crate) struct FlagCounters {
    variations: BTreeMap<String, Arc<VariationCounters>>,
    /// Held by a report while it adds, and by readers that want every report whole. Shared by
    /// every generation of a flag's counters, so a change of variations does not split it.
    reports: Arc<Mutex<()>>,
}

impl FlagCounters {
    /// The counters for `flag`: `previous` (the counters of the entry it replaces) when its
    /// variations are the same, else new ones that keep the counts of every variation still
    /// there.
    pub(crate) fn for_flag(flag: &Flag, previous: Option<&Arc<FlagCounters>>) -> Arc<FlagCounters> {
        let names = || flag.spec.variations.iter().map(|variation| &variation.name);
        if let Some(previous) = previous
            && previous.variations.keys().eq(names())
        {
            return Arc::clone(previous);
        }
        Arc::new(FlagCounters {
            variations: names()
                .map(|name| {
                    let kept = previous.and_then(|previous| previous.variations.get(name));
                    (name.clone(), kept.cloned().unwrap_or_default())
                })
                .collect(),
            reports: previous.map_or_else(Arc::default, |previous| Arc::clone(&previous.reports)),
        })
    }

    /// Each variation's exposures so far, with the identity of its counter (a new counter,
    /// after the flag was deleted and created again, starts from zero): lock-free reads.
    pub(crate) fn exposures(&self) -> impl Iterator<Item = (&String, usize, u64)> {
        self.variations.iter().map(|(name, counters)| {
            (
                name,
                Arc::as_ptr(counters) as usize,
                counters.exposures.load(Ordering::Relaxed),
            )
        })
    }

    /// Counts one evaluation that served `variation`.
    pub(crate) fn expose(&self, variation: &str) {
        if let Some(counters) = self.variations.get(variation) {
            counters.exposures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The variation names, sorted.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.variations.keys().map(String::as_str)
    }

    /// Adds `report`, whole, after checking it: every problem of every outcome, then every
    /// variation the flag does not have (nothing is added unless everything is right).
    pub(crate) fn add(&self, report: &Report) -> Result<(), Refused> {
        let invalid: Vec<FieldError> = report
            .iter()
            .flat_map(|(name, outcome)| outcome.check(&format!("variants.{name}")))
            .collect();
        if !invalid.is_empty() {
            return Err(Refused::Invalid(invalid));
        }
        let known: Vec<&str> = self.names().collect();
        let unknown: Vec<FieldError> = report
            .keys()
            .filter(|name| !self.variations.contains_key(*name))
            .map(|name| {
                FieldError::with_value(
                    format!("variants.{name}"),
                    format!("{name:?}"),
                    format!("a variation of the flag: one of {}", known.join(", ")),
                )
            })
            .collect();
        if !unknown.is_empty() {
            return Err(Refused::UnknownVariations(unknown));
        }
        let _whole = self.lock();
        for (name, outcome) in report {
            if let Some(counters) = self.variations.get(name) {
                counters.add(outcome);
            }
        }
        Ok(())
    }

    /// Every variation's counters, read with no report half-added.
    pub(crate) fn read(&self) -> BTreeMap<String, VariationCounts> {
        let _whole = self.lock();
        self.variations
            .iter()
            .map(|(name, counters)| (name.clone(), counters.read()))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.reports.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Why [`FlagCounters::add`] refused a report.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refused {
    /// Counts that contradict themselves or exceed the bounds.
    Invalid(Vec<FieldError>),
    /// Variations the flag does not have.
    UnknownVariations(Vec<FieldError>),
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests;
