//! weir's judges: pure statistics that decide whether a canary is worse than its primary.
//!
//! No IO, no clock, no async: a judge is fed [`Window`]s (what the router counted during one
//! observation window, e.g. one second) in time order and answers with a [`Verdict`] carrying
//! its evidence.
//!
//! - [`SequentialJudge`]: anytime-valid tests of the canary against the primary that may stop
//!   at any window without inflating false rollbacks, and stay valid while the canary weight
//!   changes during the run. Error rate: conditioning on error events (Lindon & Malek), a
//!   mixture of SPRTs over a grid of design ratios (default) or a one-sided beta-mixture e-value.
//!   Latency: the same test on exceedances of a threshold fixed at run start.
//! - [`MannWhitneyJudge`]: a sequential Mann-Whitney test by betting on raw latencies
//!   (optional; needs the raw latencies of both versions).
//! - [`ThresholdJudge`]: Flagger-compatible per-interval checks of the canary alone against
//!   absolute limits (success rate, latency), with the spec's no-data policy.
//! - Helpers: [`clopper_pearson`], [`wald_expected_samples`], [`theta`].
//!
//! # Feeding a judge (the engine, every second)
//!
//! - One [`Window`] per second from the router's metric deltas, both versions over the same
//!   interval, in time order. Cut windows at weight changes: take the delta just before applying
//!   a new weight, so every window has one weight in force (the event-conditioned test is exact
//!   then; a window that straddles a change is a small approximation, better passed with the
//!   realized share canary requests / all requests).
//! - `canary_weight`: the weight the router applied during the window (basis points / 10,000),
//!   not the realized share, when routing is random by weight. Windows at 0 or 1 are ignored by
//!   the tests (they say nothing about the ratio). With match rules or session affinity the
//!   routing is not a per-request coin flip: pass the realized share and read the test as
//!   approximate.
//! - `errors`: the router's definition, once for both versions: any 5xx the client received,
//!   including the router's own 502/504 (connection failures, timeouts).
//! - `slow`: requests whose latency exceeds the run's fixed threshold (the spec's
//!   `latency_threshold_ms`), from the latency histogram: requests - count_at_most(threshold),
//!   the same histogram bucketing for both versions (bucketing moves the effective threshold,
//!   identically for both, which keeps the test valid). Errors count as slow when they were.
//! - Raw latencies only when a test needs them (the warm-up threshold, Mann-Whitney): every
//!   request, or the same sampled share of each version.
//! - Roll back at the first `Fail`; `Inconclusive` means "keep going with the plan".
//!
//! The mathematics is summarised in `shared/reference/sequential-analysis.md`; every formula used
//! here is derived in the doc comments next to its code.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod judge;
mod mann_whitney;
mod rate;
mod ratio;
mod sequential;
mod special;
mod stats;
mod threshold;

pub use judge::{Judge, Verdict, VersionCounts, Window};
pub use mann_whitney::{MannWhitneyConfig, MannWhitneyJudge};
pub use rate::{
    RateTest, log_e_rate_at_least, log_e_rate_at_most, rate_lower_bound, rate_upper_bound,
};
pub use ratio::{DEFAULT_DESIGN_RATIOS, Mixture, RatioTest, beta_mixture_log_e};
pub use sequential::{
    Baseline, ConfigError, DEFAULT_HEALTH_MARGIN, Health, SequentialConfig, SequentialJudge,
};
pub use special::{ln_beta, ln_gamma, regularized_incomplete_beta};
pub use stats::{
    clopper_pearson, kl_bernoulli, ratio_from_theta, theta, wald_expected_events,
    wald_expected_samples, wald_numerator,
};
pub use threshold::{ThresholdConfig, ThresholdJudge};
