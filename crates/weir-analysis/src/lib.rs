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
//! - [`ThresholdJudge`]: Flagger-compatible per-interval checks of the canary alone against
//!   absolute limits (success rate, latency), with the spec's no-data policy.
//! - Helpers: [`clopper_pearson`], [`wald_expected_samples`], [`theta`].
//!
//! The mathematics is summarised in `shared/reference/sequential-analysis.md`; every formula used
//! here is derived in the doc comments next to its code.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod judge;
mod ratio;
mod sequential;
mod special;
mod stats;
mod threshold;

pub use judge::{Judge, Verdict, VersionCounts, Window};
pub use ratio::{DEFAULT_DESIGN_RATIOS, Mixture, RatioTest, beta_mixture_log_e};
pub use sequential::{ConfigError, SequentialConfig, SequentialJudge};
pub use special::{ln_beta, ln_gamma, regularized_incomplete_beta};
pub use stats::{
    clopper_pearson, kl_bernoulli, ratio_from_theta, theta, wald_expected_events,
    wald_expected_samples, wald_numerator,
};
pub use threshold::{ThresholdConfig, ThresholdJudge};
