//! The `flag` target: a rollout `{kind: flag, flag, control, variation}` moves a flag's audience
//! from the `control` variation to `variation` by rewriting the flag's default strategy, step by
//! step (a `schedule` plan, seed 004; or any other plan).
//!
//! The route's primary weight goes to the variation users are on - `control`, or `variation`
//! once the run promoted it - and its canary weight to `variation`; every other variation gets
//! 0. A weight of 100% is written as `defaultStrategy: {variation: NAME}`, anything else as
//! `weights`. During the run the strategy is only laid over the stored flag in memory (the
//! rollout's committed status holds it durably); when the run ends it is written to the flag,
//! unless someone edited the flag after the run ended. Since the control and the target are the only variations with weight, raising the
//! target's weight only moves users from control to target (docs/FLAGS.md, bucketing). Targets
//! and rules of the flag keep deciding first: a rollout moves the audience the rules leave.
//!
//! Until the run's first step the flag is left as it is. A rollback routes everything to the
//! primary: the audience returns to `control`.
//!
//! **Guarded rollouts.** The target also judges: `judge_window` gives the engine's continuous
//! judges (`spec.analysis.judges: [sequential]`) what the two variations served since their
//! previous look, from the outcomes applications report ([`Flags::report`]), and the builtin
//! checks `request-success-rate` and `request-duration` of a flag rollout are computed from the
//! same counts, per analysis interval (this type is also a `MetricSource`). A failing verdict or
//! check rolls the run back like any other, and the rollback routes the audience to control.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use weir_analysis::Window;
use weir_core::FieldError;
use weir_core::machine::{Effect, Route};
use weir_core::model::{
    CheckOutcome, CheckResult, FlagTarget, FlagWeight, Metric, Phase, REQUEST_DURATION,
    REQUEST_SUCCESS_RATE, Rollout, RolloutStatus, Strategy, TargetKind,
};
use weir_engine::{
    BoxFuture, MetricSource, ProviderError, Providers, TargetObservation, TargetProvider,
};
use weir_store::{FlagKey, FlagStore, FlagStoreError, RolloutKey};

use crate::{FlagError, Flags, VariationCounts};

/// The `flag` target over the flags of `flags`.
#[derive(Clone)]
pub struct FlagTargets<S: FlagStore> {
    flags: Flags<S>,
    /// What each rollout's run compares, as the target last saw it, with the counts its judges
    /// and checks read last. A short mutex, never held across an await.
    judged: Arc<Mutex<HashMap<RolloutKey, Judged>>>,
}

/// One rollout's run as its judges and checks see it.
#[derive(Debug)]
struct Judged {
    /// The run these roles and baselines belong to.
    run: u64,
    flag: FlagKey,
    /// The variation users are on: `control`, or the target once promoted.
    primary: String,
    /// The variation users move to.
    canary: String,
    /// Both variations' counts at the judges' previous window (`None`: not read in this run
    /// yet, so the next read only sets the baseline).
    judge_baseline: Option<(VariationCounts, VariationCounts)>,
    /// The target variation's counts at the previous tick, and what it served since then (what
    /// the builtin checks of this tick judge).
    tick_baseline: Option<VariationCounts>,
    tick_window: Option<VariationCounts>,
}

impl<S: FlagStore> FlagTargets<S> {
    /// Flag rollouts that change the flags of `flags`.
    pub fn new(flags: Flags<S>) -> FlagTargets<S> {
        FlagTargets {
            flags,
            judged: Arc::default(),
        }
    }

    /// `providers` with these targets serving `kind: flag`, and evaluating the builtin checks
    /// of flag rollouts from reported outcomes. The checks are asked first: they claim only
    /// flag rollouts' builtins, for which a metrics server's builtin queries (written for a
    /// mesh's or the router's request metrics) would measure nothing.
    pub fn add_to(&self, mut providers: Providers) -> Providers {
        providers
            .targets
            .push((TargetKind::Flag, Arc::new(self.clone())));
        providers.metrics.insert(0, Arc::new(self.clone()));
        providers
    }

    fn judged(&self) -> std::sync::MutexGuard<'_, HashMap<RolloutKey, Judged>> {
        self.judged.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Gives the flag the weights `route` says.
    async fn set_route(
        &self,
        rollout: &Rollout,
        status: &RolloutStatus,
        route: &Route,
    ) -> Result<(), ProviderError> {
        let Overlay { key, strategy } =
            overlay(rollout, status, route).map_err(ProviderError::unusable)?;
        let missing = || {
            ProviderError::transient(format!(
                "flag {key} does not exist (any more): create it again to go on"
            ))
        };
        let snapshot = self.flags.snapshot();
        let entry = snapshot.get(&key.namespace, &key.key).ok_or_else(missing)?;
        let Some(strategy) = strategy else {
            return Ok(());
        };
        if moving(status) {
            return match self.flags.set_rollout_strategy(&key, strategy).await {
                true => Ok(()),
                false => Err(missing()),
            };
        }
        // The run is over. Its final strategy goes into the flag - again after a restart, until
        // written - but a flag someone edited after the run ended keeps their edit.
        let edited_since = status
            .last_transition_at
            .is_some_and(|ended| entry.stored.updated_at > ended);
        if edited_since && entry.rollout_strategy.is_none() {
            return Ok(());
        }
        match self.flags.settle(&key, strategy).await {
            Ok(()) => Ok(()),
            // Someone changed or deleted the flag meanwhile: the next tick reads it again.
            Err(FlagError::Store(
                error @ (FlagStoreError::Conflict { .. } | FlagStoreError::NotFound(_)),
            )) => Err(ProviderError::transient(error.to_string())),
            Err(error) => Err(ProviderError::permanent(format!(
                "setting the weights of flag {key}: {error}"
            ))),
        }
    }
}

/// What a flag rollout's route means for its flag.
pub(crate) struct Overlay {
    /// The flag.
    pub(crate) key: FlagKey,
    /// The default strategy the route gives it; `None` until the run's first step.
    pub(crate) strategy: Option<Strategy>,
}

/// The strategy `route` gives the flag of a flag rollout (`rollout`, in `status`).
pub(crate) fn overlay(
    rollout: &Rollout,
    status: &RolloutStatus,
    route: &Route,
) -> Result<Overlay, Vec<FieldError>> {
    let settings = settings(rollout)?;
    let key = FlagKey::new(rollout.metadata.namespace_or_default(), settings.flag);
    // Until the run's first step the flag stays as its owners left it (Bucketeer's rollout
    // changes nothing before its first schedule entry); a rollback does write control.
    let before_first_step = status.steps_taken == 0
        && matches!(
            status.phase,
            Phase::Initializing | Phase::Initialized | Phase::Waiting | Phase::Progressing
        );
    if before_first_step && route.canary_weight == weir_core::units::Weight::ZERO {
        return Ok(Overlay {
            key,
            strategy: None,
        });
    }
    let primary = primary_of(&settings, status);
    Ok(Overlay {
        key,
        strategy: Some(strategy(primary, settings.variation, route)),
    })
}

/// Whether `status` is of a rollout moving its flag: from its set-up to the end of its run (a
/// finished run releases the flag; a new revision claims it again).
pub(crate) fn moving(status: &RolloutStatus) -> bool {
    status.phase.in_run() || matches!(status.phase, Phase::Initializing | Phase::Initialized)
}

impl<S: FlagStore> FlagTargets<S> {
    /// Keeps `Flags` told whether `rollout` is moving its flag. Also keeps
    /// what the run's judges and checks compare: a new run, or other roles, start their
    /// counting afresh.
    fn track(&self, key: &RolloutKey, rollout: &Rollout, status: &RolloutStatus) {
        let Ok(settings) = settings(rollout) else {
            return;
        };
        let flag = FlagKey::new(rollout.metadata.namespace_or_default(), settings.flag);
        self.flags
            .mark_rolled_out(flag.clone(), key, moving(status));
        let primary = primary_of(&settings, status);
        let mut judged = self.judged();
        let same = judged.get(key).is_some_and(|judged| {
            judged.run == status.run
                && judged.flag == flag
                && judged.primary == primary
                && judged.canary == settings.variation
        });
        if !same {
            judged.insert(
                key.clone(),
                Judged {
                    run: status.run,
                    flag,
                    primary: primary.to_string(),
                    canary: settings.variation.to_string(),
                    judge_baseline: None,
                    tick_baseline: None,
                    tick_window: None,
                },
            );
        }
    }

    /// At a tick: what the target variation served since the previous tick, for this tick's
    /// builtin checks.
    fn close_tick(&self, key: &RolloutKey) {
        let mut judged = self.judged();
        let Some(run) = judged.get_mut(key) else {
            return;
        };
        let now = self
            .flags
            .counts(&run.flag)
            .and_then(|mut counts| counts.remove(&run.canary));
        run.tick_window = match (&now, &run.tick_baseline) {
            (Some(now), Some(before)) => Some(now.since(before)),
            _ => None,
        };
        run.tick_baseline = now;
    }

    /// What both variations served since the judges' previous look (see `judge_window`).
    fn next_window(&self, key: &RolloutKey, slow_above_ms: Option<f64>) -> Option<Window> {
        let mut judged = self.judged();
        let run = judged.get_mut(key)?;
        if run.primary == run.canary {
            // Promoted: both roles are one variation, nothing to compare.
            run.judge_baseline = None;
            return None;
        }
        let mut counts = self.flags.counts(&run.flag)?;
        let now = (counts.remove(&run.canary)?, counts.remove(&run.primary)?);
        let (canary_before, primary_before) = run.judge_baseline.replace(now.clone())?;
        let (canary, primary) = (now.0.since(&canary_before), now.1.since(&primary_before));
        let judged_counts = |counts: &VariationCounts| weir_analysis::VersionCounts {
            requests: counts.requests,
            errors: counts.errors,
            slow: counts.slow_above(slow_above_ms),
        };
        Some(Window {
            canary_weight: share(canary.requests, primary.requests),
            canary: judged_counts(&canary),
            primary: judged_counts(&primary),
            canary_latencies_ms: Vec::new(),
            primary_latencies_ms: Vec::new(),
        })
    }
}

/// The target variation's share of a window's reported requests, rounded up to 0.01%.
///
/// The judge conditions on events: at share `w`, an error comes from the target variation with
/// probability `w r / (w r + 1 - w)`. For a flag that share is what the counts reflect, not
/// the default strategy's weight: targets and rules serve a variation whatever the weights
/// say, and an application may report only part of its traffic. Given the requests, the errors
/// are independent of how they split, so the share can be read from the same window. Rounding
/// up keeps the test conservative (a larger assumed share makes errors of the target variation
/// less surprising), and bounds the judge's per-share bookkeeping to 10,000 values.
fn share(canary: u64, primary: u64) -> f64 {
    let total = u128::from(canary) + u128::from(primary);
    if total == 0 {
        return 0.0;
    }
    let basis_points = (u128::from(canary) * 10_000).div_ceil(total);
    basis_points as f64 / 10_000.0
}

/// The variation users are on in the run `status` describes: `control`, or the target once
/// the run promoted it.
fn primary_of<'a>(settings: &Settings<'a>, status: &RolloutStatus) -> &'a str {
    let promoted =
        status.primary_revision.is_some() && status.primary_revision == status.canary_revision;
    if promoted {
        settings.variation
    } else {
        settings.control
    }
}

/// The default strategy for `route` between the variation users are on and the target.
fn strategy(primary: &str, target: &str, route: &Route) -> Strategy {
    // Basis points (0.01%) to units of 0.001%.
    let units = |weight: weir_core::units::Weight| {
        FlagWeight::from_units(weight.basis_points().saturating_mul(10)).unwrap_or(FlagWeight::FULL)
    };
    let target_weight = units(route.canary_weight);
    if primary == target || target_weight == FlagWeight::FULL {
        return Strategy {
            variation: Some(target.to_string()),
            weights: None,
        };
    }
    if target_weight == FlagWeight::ZERO {
        return Strategy {
            variation: Some(primary.to_string()),
            weights: None,
        };
    }
    let primary_weight = FlagWeight::from_units(FlagWeight::FULL.units() - target_weight.units())
        .unwrap_or(FlagWeight::ZERO);
    Strategy {
        variation: None,
        weights: Some(BTreeMap::from([
            (primary.to_string(), primary_weight),
            (target.to_string(), target_weight),
        ])),
    }
}

struct Settings<'a> {
    flag: &'a str,
    control: &'a str,
    variation: &'a str,
}

fn settings(rollout: &Rollout) -> Result<Settings<'_>, Vec<FieldError>> {
    let Some(target) = rollout.spec.target.flag() else {
        return Err(vec![FieldError::with_value(
            "spec.target.kind",
            format!("{:?}", rollout.spec.target.kind()).to_lowercase(),
            "this provider runs flag targets (kind: flag)",
        )]);
    };
    let FlagTarget {
        flag,
        control,
        variation,
        ..
    } = target;
    let mut errors = Vec::new();
    for (name, value, what) in [
        ("flag", flag, "the flag's key"),
        ("control", control, "the variation users have today"),
        ("variation", variation, "the variation users move to"),
    ] {
        if value.as_deref().is_none_or(str::is_empty) {
            errors.push(FieldError::missing(format!("spec.target.{name}"), what));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let (flag, control, variation) = (
        flag.as_deref().unwrap_or_default(),
        control.as_deref().unwrap_or_default(),
        variation.as_deref().unwrap_or_default(),
    );
    if control == variation {
        return Err(vec![FieldError::with_value(
            "spec.target.variation",
            format!("{variation:?}"),
            "a variation other than spec.target.control: the rollout moves users from one to the other",
        )]);
    }
    Ok(Settings {
        flag,
        control,
        variation,
    })
}

/// A variation's identity for the core: the flag, the variation and the target's `revision`.
fn revision_of(flag: &str, variation: &str, revision: Option<&str>) -> String {
    weir_core::revision::of_definition(&serde_json::json!({
        "flag": flag,
        "variation": variation,
        "revision": revision,
    }))
}

impl<S: FlagStore> TargetProvider for FlagTargets<S> {
    fn validate(&self, rollout: &Rollout) -> Vec<FieldError> {
        let settings = match settings(rollout) {
            Ok(settings) => settings,
            Err(errors) => return errors,
        };
        let namespace = rollout.metadata.namespace_or_default();
        let snapshot = self.flags.snapshot();
        let Some(entry) = snapshot.get(namespace, settings.flag) else {
            return vec![FieldError::with_value(
                "spec.target.flag",
                format!("{:?}", settings.flag),
                format!(
                    "a flag of namespace {namespace}: create it first (`weir flag create`, POST /api/v1/flags)"
                ),
            )];
        };
        let flag_key = FlagKey::new(namespace, settings.flag);
        let this = RolloutKey::new(namespace, rollout.metadata.name.clone());
        if let Some(holder) = self.flags.rollout_of(&flag_key)
            && holder != this
        {
            return vec![FieldError::with_value(
                "spec.target.flag",
                format!("{:?}", settings.flag),
                format!(
                    "a flag no other rollout is moving: {holder} is rolling out flag {flag_key} (one rollout per flag; let it finish, or delete it)"
                ),
            )];
        }
        let names: Vec<&str> = entry
            .stored
            .flag
            .spec
            .variations
            .iter()
            .map(|variation| variation.name.as_str())
            .collect();
        [
            ("control", settings.control),
            ("variation", settings.variation),
        ]
        .into_iter()
        .filter(|(_, name)| !names.contains(name))
        .map(|(field, name)| {
            FieldError::with_value(
                format!("spec.target.{field}"),
                format!("{name:?}"),
                format!(
                    "a variation of flag {}: one of {}",
                    settings.flag,
                    names.join(", ")
                ),
            )
        })
        .collect()
    }

    fn reconcile<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            self.track(key, rollout, status);
            self.set_route(rollout, status, &Route::of(&rollout.spec, status))
                .await
        })
    }

    fn observe<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<TargetObservation, ProviderError>> {
        Box::pin(async move {
            let settings = settings(rollout).map_err(ProviderError::unusable)?;
            self.track(key, rollout, status);
            self.close_tick(key);
            if !moving(status) {
                // A run that ended without a route of its own (a promotion's last step)
                // still gets its final strategy written.
                self.set_route(rollout, status, &Route::of(&rollout.spec, status))
                    .await?;
            }
            let revision = rollout
                .spec
                .target
                .flag()
                .and_then(|target| target.revision.as_deref());
            let exists = self
                .flags
                .snapshot()
                .get(rollout.metadata.namespace_or_default(), settings.flag)
                .is_some();
            Ok(TargetObservation {
                canary_revision: Some(revision_of(settings.flag, settings.variation, revision)),
                primary_revision: Some(revision_of(settings.flag, settings.control, None)),
                primary_ready: exists,
                canary_ready: exists,
            })
        })
    }

    fn apply<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
        effect: &'a Effect,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            self.track(key, rollout, status);
            match effect {
                Effect::SetRoute(route) => self.set_route(rollout, status, route).await,
                // Promotion: the variation serves everyone the rules leave.
                Effect::Promote { .. } => {
                    let everyone = Route {
                        primary_weight: weir_core::units::Weight::ZERO,
                        canary_weight: weir_core::units::Weight::FULL,
                        mirror_weight: None,
                        match_rules: Vec::new(),
                        session_affinity: None,
                    };
                    self.set_route(rollout, status, &everyone).await
                }
                // The step that ends a promoted run carries no route of its own, only the
                // canary's scale-down: the run's final strategy is written now, not at the
                // next tick (an interval later, with the overlay still over any edit made
                // meanwhile).
                Effect::ScaleCanary(_) if !moving(status) => {
                    self.set_route(rollout, status, &Route::of(&rollout.spec, status))
                        .await
                }
                // Nothing runs or scales for a flag.
                Effect::Prepare
                | Effect::ScaleCanary(_)
                | Effect::Finalize
                | Effect::RunHooks { .. }
                | Effect::Notify(_) => Ok(()),
            }
        })
    }

    fn remove<'a>(&'a self, key: &'a RolloutKey) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.judged().remove(key);
            self.flags.release(key)
        })
    }

    /// What the target variation (canary) and the variation users are on (primary) served
    /// since the previous call, from the outcomes applications report: requests, errors, and
    /// slow requests (reported as slow, or reported latencies above `slow_above_ms`). The
    /// first call of a run only starts counting; `None` once both roles are one variation.
    fn judge_window<'a>(
        &'a self,
        key: &'a RolloutKey,
        _rollout: &'a Rollout,
        slow_above_ms: Option<f64>,
    ) -> BoxFuture<'a, Option<Window>> {
        Box::pin(async move { self.next_window(key, slow_above_ms) })
    }

    fn register_metrics(&self, telemetry: &weir_engine::Telemetry) {
        telemetry.add_scraped(
            "weir_flag",
            Arc::new(crate::metrics::FlagMetrics::new(
                self.flags.snapshot.clone(),
            )),
        );
    }
}

impl<S: FlagStore> MetricSource for FlagTargets<S> {
    fn handles(&self, rollout: &Rollout, metric: &Metric) -> bool {
        rollout.spec.target.kind() == TargetKind::Flag && metric.is_builtin()
    }

    /// A builtin check over what the target variation served since the previous tick:
    /// `request-success-rate` is the share of its reported requests without an error (%),
    /// `request-duration` the p99 of its reported latencies (ms). No reports since the
    /// previous tick is no data.
    fn check<'a>(
        &'a self,
        key: &'a RolloutKey,
        _rollout: &'a Rollout,
        metric: &'a Metric,
    ) -> BoxFuture<'a, CheckResult> {
        Box::pin(async move {
            let window = self
                .judged()
                .get(key)
                .and_then(|run| run.tick_window.clone());
            builtin_check(metric, window.as_ref())
        })
    }
}

/// A builtin check of a flag rollout over `window`, the target variation's counts of a tick.
fn builtin_check(metric: &Metric, window: Option<&VariationCounts>) -> CheckResult {
    let no_data = |message: &str| CheckResult {
        name: metric.name.clone(),
        outcome: CheckOutcome::NoData,
        value: None,
        message: message.to_string(),
    };
    let Some(window) = window.filter(|window| window.requests > 0) else {
        return no_data(
            "no outcomes of the target variation reported since the last tick (POST /api/v1/flags/NAMESPACE/KEY/outcomes)",
        );
    };
    let (value, message) = match metric.name.as_str() {
        REQUEST_SUCCESS_RATE => {
            let rate = 100.0 * (window.requests - window.errors.min(window.requests)) as f64
                / window.requests as f64;
            (
                rate,
                format!(
                    "target variation: {} requests, {} errors reported: {rate:.2}% success",
                    window.requests, window.errors
                ),
            )
        }
        REQUEST_DURATION => match window.latency_quantile(0.99) {
            Some(p99) => (
                p99,
                format!(
                    "target variation: p99 {p99:.1} ms over {} reported latencies",
                    window.latencies()
                ),
            ),
            None => {
                return no_data(
                    "no latencies of the target variation reported since the last tick (report latencyMs)",
                );
            }
        },
        other => return no_data(&format!("{other} is not a builtin check")),
    };
    let passed = metric
        .threshold_range
        .is_none_or(|range| range.contains(value));
    CheckResult {
        name: metric.name.clone(),
        outcome: if passed {
            CheckOutcome::Pass
        } else {
            CheckOutcome::Fail
        },
        value: Some((value * 100.0).round() / 100.0),
        message,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use weir_core::units::Weight;

    fn route(canary_bp: u32) -> Route {
        let canary = Weight::from_basis_points(canary_bp);
        Route {
            primary_weight: canary.complement(),
            canary_weight: canary,
            mirror_weight: None,
            match_rules: Vec::new(),
            session_affinity: None,
        }
    }

    #[test]
    fn a_route_becomes_the_default_strategy() {
        let none = strategy("off", "on", &route(0));
        assert_eq!(none.variation.as_deref(), Some("off"));
        let part = strategy("off", "on", &route(1234));
        let weights = part.weights.unwrap();
        assert_eq!(weights["on"].units(), 12_340);
        assert_eq!(weights["off"].units(), 87_660);
        let all = strategy("off", "on", &route(10_000));
        assert_eq!(all.variation.as_deref(), Some("on"));
        // Promoted: the variation is the primary too.
        let promoted = strategy("on", "on", &route(0));
        assert_eq!(promoted.variation.as_deref(), Some("on"));
    }
}
