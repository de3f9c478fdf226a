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

use std::collections::BTreeMap;

use weir_core::FieldError;
use weir_core::machine::{Effect, Route};
use weir_core::model::{
    FlagTarget, FlagWeight, Phase, Rollout, RolloutStatus, Strategy, TargetKind,
};
use weir_engine::{BoxFuture, ProviderError, Providers, TargetObservation, TargetProvider};
use weir_store::{FlagKey, FlagStore, FlagStoreError, RolloutKey};

use crate::{FlagError, Flags};

/// The `flag` target over the flags of `flags`.
#[derive(Clone)]
pub struct FlagTargets<S: FlagStore> {
    flags: Flags<S>,
}

impl<S: FlagStore> FlagTargets<S> {
    /// Flag rollouts that change the flags of `flags`.
    pub fn new(flags: Flags<S>) -> FlagTargets<S> {
        FlagTargets { flags }
    }

    /// `providers` with these targets serving `kind: flag`.
    pub fn add_to(&self, mut providers: Providers) -> Providers {
        providers
            .targets
            .push((TargetKind::Flag, std::sync::Arc::new(self.clone())));
        providers
    }

    /// Gives the flag the weights `route` says.
    async fn set_route(
        &self,
        rollout: &Rollout,
        status: &RolloutStatus,
        route: &Route,
    ) -> Result<(), ProviderError> {
        let settings = settings(rollout).map_err(ProviderError::unusable)?;
        let key = FlagKey::new(rollout.metadata.namespace_or_default(), settings.flag);
        let missing = || {
            ProviderError::transient(format!(
                "flag {key} does not exist (any more): create it again to go on"
            ))
        };
        let snapshot = self.flags.snapshot();
        let entry = snapshot.get(&key.namespace, &key.key).ok_or_else(missing)?;
        // Until the run's first step the flag stays as its owners left it (Bucketeer's rollout
        // changes nothing before its first schedule entry); a rollback does write control.
        let before_first_step = status.steps_taken == 0
            && matches!(
                status.phase,
                Phase::Initializing | Phase::Initialized | Phase::Waiting | Phase::Progressing
            );
        if before_first_step && route.canary_weight == weir_core::units::Weight::ZERO {
            return Ok(());
        }
        let promoted =
            status.primary_revision.is_some() && status.primary_revision == status.canary_revision;
        let primary = if promoted {
            settings.variation
        } else {
            settings.control
        };
        let strategy = strategy(primary, settings.variation, route);
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

/// Whether `status` is of a rollout moving its flag: from its set-up to the end of its run (a
/// finished run releases the flag; a new revision claims it again).
fn moving(status: &RolloutStatus) -> bool {
    status.phase.in_run() || matches!(status.phase, Phase::Initializing | Phase::Initialized)
}

impl<S: FlagStore> FlagTargets<S> {
    /// Keeps `Flags` told whether `rollout` is moving its flag.
    fn track(&self, key: &RolloutKey, rollout: &Rollout, status: &RolloutStatus, flag: &str) {
        self.flags.mark_rolled_out(
            FlagKey::new(rollout.metadata.namespace_or_default(), flag),
            key,
            moving(status),
        );
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
            if let Ok(settings) = settings(rollout) {
                self.track(key, rollout, status, settings.flag);
            }
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
            self.track(key, rollout, status, settings.flag);
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
            if let Ok(settings) = settings(rollout) {
                self.track(key, rollout, status, settings.flag);
            }
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
                // Nothing runs or scales for a flag.
                Effect::ScaleCanary(_)
                | Effect::Finalize
                | Effect::RunHooks { .. }
                | Effect::Notify(_) => Ok(()),
            }
        })
    }

    fn remove<'a>(&'a self, key: &'a RolloutKey) -> BoxFuture<'a, ()> {
        Box::pin(async move { self.flags.release(key) })
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
