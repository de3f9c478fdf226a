//! A synthetic target and metric source: no sockets, no processes. For the scale benchmark and
//! for tests of what sits above the engine (the API), where the target's behaviour is not the
//! subject. The canary's revision is a flag target's `revision` (or a hash of the target's
//! settings); both versions are always ready; every check passes unless the canary's revision is
//! one the metric source was told to fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use weir_core::FieldError;
use weir_core::machine::Effect;
use weir_core::model::{CheckOutcome, CheckResult, Metric, Rollout, RolloutStatus};
use weir_store::RolloutKey;

use crate::providers::{BoxFuture, MetricSource, ProviderError, TargetObservation, TargetProvider};

/// Synthetic targets (used for `kind: flag` or `kind: kubernetes` rollouts in tests and
/// benchmarks, where no real provider runs).
#[derive(Clone, Default)]
pub struct SyntheticTargets {
    applied: Arc<AtomicU64>,
}

impl SyntheticTargets {
    /// How many effects were applied so far.
    pub fn effects_applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }
}

fn revision(rollout: &Rollout) -> String {
    let target = &rollout.spec.target;
    match target.flag().and_then(|flag| flag.revision.as_ref()) {
        Some(revision) => revision.clone(),
        None => {
            weir_core::revision::of_definition(&serde_json::to_value(target).unwrap_or(Value::Null))
        }
    }
}

impl TargetProvider for SyntheticTargets {
    fn validate(&self, _rollout: &Rollout) -> Vec<FieldError> {
        Vec::new()
    }

    fn reconcile<'a>(
        &'a self,
        _key: &'a RolloutKey,
        _rollout: &'a Rollout,
        _status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async { Ok(()) })
    }

    fn observe<'a>(
        &'a self,
        _key: &'a RolloutKey,
        rollout: &'a Rollout,
        _status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<TargetObservation, ProviderError>> {
        Box::pin(async move {
            Ok(TargetObservation {
                canary_revision: Some(revision(rollout)),
                primary_revision: Some("primary".into()),
                primary_ready: true,
                canary_ready: true,
            })
        })
    }

    fn apply<'a>(
        &'a self,
        _key: &'a RolloutKey,
        _rollout: &'a Rollout,
        _status: &'a RolloutStatus,
        _effect: &'a Effect,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            self.applied.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }

    fn remove<'a>(&'a self, _key: &'a RolloutKey) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// Synthetic checks: every metric passes, unless the canary's revision is one set to fail.
#[derive(Clone, Default)]
pub struct SyntheticMetrics {
    failing_revision: Option<String>,
}

impl SyntheticMetrics {
    /// Checks that fail for every rollout whose canary revision is `revision`.
    pub fn failing_revision(revision: impl Into<String>) -> Self {
        Self {
            failing_revision: Some(revision.into()),
        }
    }
}

impl MetricSource for SyntheticMetrics {
    fn handles(&self, _rollout: &Rollout, _metric: &Metric) -> bool {
        true
    }

    fn check<'a>(
        &'a self,
        _key: &'a RolloutKey,
        rollout: &'a Rollout,
        metric: &'a Metric,
    ) -> BoxFuture<'a, CheckResult> {
        Box::pin(async move {
            let failing = self.failing_revision.as_deref() == Some(revision(rollout).as_str());
            CheckResult {
                name: metric.name.clone(),
                outcome: if failing {
                    CheckOutcome::Fail
                } else {
                    CheckOutcome::Pass
                },
                value: Some(if failing { 0.0 } else { 100.0 }),
                message: "synthetic".into(),
            }
        })
    }
}
