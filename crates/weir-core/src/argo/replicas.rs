//! A canary's ReplicaSet sizes, computed and rounded exactly as Argo Rollouts v1.9.1 does
//! (`utils/replicaset/canary.go`, `replicaset.go`).
//!
//! - [`Fenceposts::resolve`]: `maxSurge` and `maxUnavailable` as counts (an integer is absolute,
//!   every string a percentage of `spec.replicas`, with or without `%`; surge rounds up,
//!   unavailable down; both 0 gives unavailable 1; unavailable at most `spec.replicas`).
//! - [`approximate_weighted_counts`]: the (canary, stable) pod split nearest a weight, which may
//!   total `replicas + 1` when surge is allowed and never leaves a side at 0 for 0 < W < M.
//! - [`desired`]: the weight (or explicit canary count) a Rollout wants now: promote-full, abort,
//!   `setCanaryScale`, the current `setWeight`, dynamic stable scale's walk back after an abort.
//! - [`basic_canary`]: the targets of one reconcile without traffic routing, honouring surge and
//!   availability; [`traffic_routed_canary`]: the targets with a router.
//!
//! Arithmetic is in `i64` (Argo's is `int32`, which overflows on inputs no valid Rollout has), and
//! nothing here panics: a `maxWeight` of 0 or less, negative counts and absurd percentages give a
//! defined answer.

use super::types::{CanaryStep, CanaryStrategy, IntOrString};

/// Argo's `maxSurge` when none is written.
pub const DEFAULT_MAX_SURGE: &str = "25%";
/// Argo's `maxUnavailable` when none is written.
pub const DEFAULT_MAX_UNAVAILABLE: &str = "25%";
/// Argo's traffic weight scale when `trafficRouting.maxTrafficWeight` is not written.
pub const DEFAULT_MAX_WEIGHT: i64 = 100;

/// `spec.replicas`, or Argo's default of 1.
pub fn spec_replicas(replicas: Option<i64>) -> i64 {
    replicas.unwrap_or(1)
}

/// The weight scale of a canary: `trafficRouting.maxTrafficWeight`, or 100.
pub fn max_weight(canary: &CanaryStrategy) -> i64 {
    canary
        .traffic_routing
        .as_ref()
        .and_then(|routing| routing.max_traffic_weight)
        .unwrap_or(DEFAULT_MAX_WEIGHT)
}

/// Kubernetes' deprecated `intstr.GetValueFromIntOrPercent`, which Argo uses: an integer is
/// itself; a string is a percentage of `total` whether or not it ends in `%` (every `%` is
/// removed, the rest read as a decimal integer), rounded up or down.
pub fn int_or_percent(value: &IntOrString, total: i64, round_up: bool) -> Result<i64, String> {
    match value {
        IntOrString::Int(number) => Ok(*number),
        IntOrString::String(text) => {
            let digits = text.replace('%', "");
            let percent: i64 = parse_go_atoi(&digits)
                .ok_or_else(|| format!("invalid value {text:?}: not an integer percentage"))?;
            let product = i128::from(percent) * i128::from(total);
            let scaled = if round_up {
                div_ceil(product, 100)
            } else {
                product.div_euclid(100)
            };
            Ok(i64::try_from(scaled).unwrap_or(if scaled > 0 { i64::MAX } else { i64::MIN }))
        }
    }
}

/// Go's `strconv.Atoi` on 64 bits: an optional sign and decimal digits, nothing else.
fn parse_go_atoi(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.strip_prefix('+').unwrap_or(text).parse().ok()
}

fn div_ceil(numerator: i128, denominator: i128) -> i128 {
    -((-numerator).div_euclid(denominator))
}

/// `maxSurge` and `maxUnavailable` resolved to pod counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenceposts {
    /// Pods above `spec.replicas` allowed during an update (Argo's `MaxSurge`).
    pub max_surge: i64,
    /// Pods below `spec.replicas` allowed to be unavailable (Argo's `MaxUnavailable`).
    pub max_unavailable: i64,
}

impl Fenceposts {
    /// Argo's `MaxSurge` and `MaxUnavailable` of a canary: absent values are `25%`; a value that
    /// is not a count or a percentage resolves both to 0, as Argo's ignored error does.
    pub fn resolve(
        max_surge: Option<&IntOrString>,
        max_unavailable: Option<&IntOrString>,
        replicas: i64,
    ) -> Fenceposts {
        let default_surge = IntOrString::String(DEFAULT_MAX_SURGE.to_string());
        let default_unavailable = IntOrString::String(DEFAULT_MAX_UNAVAILABLE.to_string());
        let surge = int_or_percent(max_surge.unwrap_or(&default_surge), replicas, true);
        let unavailable = surge.as_ref().ok().map(|_| {
            int_or_percent(
                max_unavailable.unwrap_or(&default_unavailable),
                replicas,
                false,
            )
        });
        let (surge, unavailable) = match (surge, unavailable) {
            (Ok(surge), Some(Ok(unavailable))) => {
                if surge == 0 && unavailable == 0 {
                    (0, 1)
                } else {
                    (surge, unavailable)
                }
            }
            _ => (0, 0),
        };
        let max_unavailable = if replicas == 0 {
            0
        } else {
            unavailable.min(replicas)
        };
        Fenceposts {
            max_surge: surge,
            max_unavailable,
        }
    }

    /// The fenceposts of a canary strategy with `spec.replicas`.
    pub fn of(canary: &CanaryStrategy, replicas: i64) -> Fenceposts {
        Fenceposts::resolve(
            canary.max_surge.as_ref(),
            canary.max_unavailable.as_ref(),
            replicas,
        )
    }
}

/// A pair of targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaTargets {
    /// The canary (new) ReplicaSet's `spec.replicas`.
    pub canary: i64,
    /// The stable ReplicaSet's `spec.replicas`.
    pub stable: i64,
}

/// Argo's `approximateWeightedCanaryStableReplicaCounts`: the (canary, stable) pod counts whose
/// share is nearest `weight / max_weight` of `replicas`. Candidates, in order: ceil of R, floor of
/// R, and with surge ceil and floor of R + 1; a floor of 0 is only a candidate when 0 is allowed
/// (weight 0 or max, or one replica without surge), a ceil equal to R only then too, a floor that
/// ties with its ceil is skipped (ties round up); the first smallest distance wins.
pub fn approximate_weighted_counts(
    replicas: i64,
    weight: i64,
    max_weight: i64,
    max_surge: i64,
) -> ReplicaTargets {
    if replicas == 0 {
        return ReplicaTargets {
            canary: 0,
            stable: 0,
        };
    }
    if max_weight <= 0 {
        return ReplicaTargets {
            canary: 0,
            stable: replicas,
        };
    }
    let product = replicas.saturating_mul(weight) as f64;
    let ceil = (product / max_weight as f64).ceil() as i64;
    let floor = (product / max_weight as f64).floor() as i64;
    let zero_allowed = weight == max_weight || weight == 0 || (replicas == 1 && max_surge == 0);
    let mut options: Vec<(i64, i64)> = Vec::with_capacity(4);
    if ceil < replicas || zero_allowed {
        options.push((ceil, replicas));
    }
    if !tied(weight, max_weight, replicas) && (floor != 0 || zero_allowed) {
        options.push((floor, replicas));
    }
    if max_surge > 0 {
        let total = replicas.saturating_add(1);
        options.push((ceil, total));
        if !tied(weight, max_weight, total) && (floor != 0 || zero_allowed) {
            options.push((floor, total));
        }
    }
    let mut best: Option<((i64, i64), f64)> = None;
    for option in options {
        let delta = weight_delta(weight, max_weight, option.0, option.1);
        if best.is_none_or(|(_, best_delta)| delta < best_delta) {
            best = Some((option, delta));
        }
    }
    match best {
        Some(((canary, total), _)) => ReplicaTargets {
            canary,
            stable: total.saturating_sub(canary),
        },
        None => ReplicaTargets {
            canary: 0,
            stable: replicas,
        },
    }
}

/// Whether `total · weight / max` is exactly halfway between two counts, in Go's float order.
fn tied(weight: i64, max_weight: i64, total: i64) -> bool {
    let value = total as f64 * (weight as f64 / max_weight as f64);
    value.fract() == 0.5
}

fn weight_delta(weight: i64, max_weight: i64, canary: i64, total: i64) -> f64 {
    if total == 0 {
        return f64::INFINITY;
    }
    let actual = canary.saturating_mul(max_weight) as f64 / total as f64;
    (actual - weight as f64).abs()
}

/// Argo's `trafficWeightToReplicas`: `ceil(weight · replicas / max)`.
pub fn traffic_weight_to_replicas(replicas: i64, weight: i64, max_weight: i64) -> i64 {
    if max_weight <= 0 {
        return 0;
    }
    let value = (weight as f64 * replicas as f64 / max_weight as f64).ceil();
    if value.is_nan() { 0 } else { value as i64 }
}

/// A ReplicaSet's counts: `spec.replicas` and `status.availableReplicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplicaSetCounts {
    /// `spec.replicas`.
    pub replicas: i64,
    /// `status.availableReplicas`.
    pub available: i64,
}

/// The stable ReplicaSet as the canary calculation sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StableReplicaSet {
    /// No stable ReplicaSet (the first deploy).
    Absent,
    /// The stable ReplicaSet is the canary's (fully promoted): the canary goes to 100%.
    SameAsCanary,
    /// A stable ReplicaSet other than the canary's.
    Distinct(ReplicaSetCounts),
}

impl StableReplicaSet {
    fn distinct(self) -> Option<ReplicaSetCounts> {
        match self {
            StableReplicaSet::Distinct(counts) => Some(counts),
            _ => None,
        }
    }
}

/// The Rollout's status fields the calculation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CanaryPosition<'a> {
    /// `status.currentStepIndex` (absent: 0).
    pub current_step_index: Option<i64>,
    /// `status.stableRS` (empty: none yet).
    pub stable_rs: &'a str,
    /// `status.currentPodHash`.
    pub current_pod_hash: &'a str,
    /// `status.promoteFull`.
    pub promote_full: bool,
    /// `status.abort`.
    pub abort: bool,
}

/// What the canary's size follows now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Desired {
    /// An explicit canary count (`setCanaryScale.replicas`), when one is in force.
    pub canary_replicas: Option<i64>,
    /// The weight, on the scale of [`max_weight`].
    pub weight: i64,
}

/// Argo's `GetCanaryReplicasOrWeight`: `max_weight` when promoting fully, when there is no stable
/// ReplicaSet yet or when the current one is stable; else a `setCanaryScale` in force (traffic
/// routing only; ignored after an abort unless `abortScaleDownDelaySeconds: 0`); else the desired
/// weight (0 after an abort, the last `setWeight` at or before the current step, `max_weight`
/// past the last step; with `dynamicStableScale` after an abort, the largest earlier `setWeight`
/// whose pods are fewer than the canary still has).
pub fn desired(
    canary: &CanaryStrategy,
    replicas: i64,
    position: &CanaryPosition<'_>,
    canary_rs: Option<ReplicaSetCounts>,
    stable_rs: Option<ReplicaSetCounts>,
) -> Desired {
    let max = max_weight(canary);
    if position.promote_full
        || position.stable_rs.is_empty()
        || position.current_pod_hash == position.stable_rs
    {
        return Desired {
            canary_replicas: None,
            weight: max,
        };
    }
    if let Some(scale) = set_canary_scale_in_force(canary, position) {
        if let Some(count) = scale.0 {
            return Desired {
                canary_replicas: Some(count),
                weight: 0,
            };
        }
        if let Some(weight) = scale.1 {
            return Desired {
                canary_replicas: None,
                weight,
            };
        }
    }
    let steps = canary.steps.as_deref().unwrap_or(&[]);
    if position.abort
        && canary.dynamic_stable_scale == Some(true)
        && let (Some(new), Some(stable)) = (canary_rs, stable_rs)
    {
        let canary_pods = replicas.saturating_sub(stable.available).max(new.available);
        let weight = steps
            .iter()
            .rev()
            .filter_map(|step| step.set_weight)
            .find(|weight| traffic_weight_to_replicas(replicas, *weight, max) < canary_pods)
            .unwrap_or(0);
        return Desired {
            canary_replicas: None,
            weight,
        };
    }
    Desired {
        canary_replicas: None,
        weight: current_set_weight(steps, position, max),
    }
}

/// Argo's `GetCurrentSetWeight`: 0 when aborted, `max_weight` without steps or past the last, else
/// the nearest `setWeight` at or before the current step (0 if none).
pub fn current_set_weight(steps: &[CanaryStep], position: &CanaryPosition<'_>, max: i64) -> i64 {
    if position.abort {
        return 0;
    }
    let Some(index) = current_step(steps, position) else {
        return max;
    };
    steps[..=index]
        .iter()
        .rev()
        .find_map(|step| step.set_weight)
        .unwrap_or(0)
}

/// The index of the current step, if it is a step (not past the last, not negative).
fn current_step(steps: &[CanaryStep], position: &CanaryPosition<'_>) -> Option<usize> {
    let index = usize::try_from(position.current_step_index.unwrap_or(0)).ok()?;
    (index < steps.len()).then_some(index)
}

/// The `setCanaryScale` in force as (replicas, weight), per Argo's `UseSetCanaryScale`.
fn set_canary_scale_in_force(
    canary: &CanaryStrategy,
    position: &CanaryPosition<'_>,
) -> Option<(Option<i64>, Option<i64>)> {
    canary.traffic_routing.as_ref()?;
    if position.abort && canary.abort_scale_down_delay_seconds != Some(0) {
        return None;
    }
    let steps = canary.steps.as_deref().unwrap_or(&[]);
    let index = current_step(steps, position)?;
    for step in steps[..=index].iter().rev() {
        let Some(scale) = &step.set_canary_scale else {
            continue;
        };
        if scale.match_traffic_weight == Some(true) {
            return None;
        }
        return Some((scale.replicas, scale.weight));
    }
    None
}

/// The inputs of one basic-canary calculation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BasicCanary<'a> {
    /// `spec.replicas` (see [`spec_replicas`]).
    pub replicas: i64,
    /// The weight wanted ([`desired`]).
    pub weight: i64,
    /// The weight scale ([`max_weight`]).
    pub max_weight: i64,
    /// Resolved `maxSurge` and `maxUnavailable`.
    pub fenceposts: Fenceposts,
    /// The canary (new) ReplicaSet, if it exists.
    pub canary: Option<ReplicaSetCounts>,
    /// The stable ReplicaSet.
    pub stable: StableReplicaSet,
    /// Every other old ReplicaSet.
    pub older: &'a [ReplicaSetCounts],
}

/// Argo's `CalculateReplicaCountsForBasicCanary`: the canary and stable targets of this reconcile
/// without traffic routing. Stable is raised before the canary within `replicas + maxSurge`; while
/// another old ReplicaSet has pods nothing is scaled down; otherwise the side leaving (stable when
/// the canary grows, the canary when it shrinks) goes down only as far as `replicas -
/// maxUnavailable` available pods allow, and the other side is kept within surge and availability.
pub fn basic_canary(input: &BasicCanary<'_>) -> ReplicaTargets {
    let replicas = input.replicas;
    let targets = approximate_weighted_counts(
        replicas,
        input.weight,
        input.max_weight,
        input.fenceposts.max_surge,
    );
    let (mut desired_canary, desired_stable) = (targets.canary, targets.stable);
    let stable_distinct = input.stable.distinct();
    // The stable object as Argo passes it on: the canary's own when they are the same.
    let stable_object = match input.stable {
        StableReplicaSet::Absent => None,
        StableReplicaSet::SameAsCanary => input.canary,
        StableReplicaSet::Distinct(counts) => Some(counts),
    };
    let mut canary_count = input.canary.map_or(0, |rs| rs.replicas);
    let mut stable_count = 0;
    let mut desired_stable = desired_stable;
    if let Some(stable) = stable_distinct {
        stable_count = stable.replicas;
    } else {
        desired_canary = replicas;
        desired_stable = 0;
    }
    let max_allowed = replicas.saturating_add(input.fenceposts.max_surge);
    let older_total = sum_replicas(input.older.iter().copied());
    let total = older_total
        .saturating_add(input.canary.map_or(0, |rs| rs.replicas))
        .saturating_add(stable_distinct.map_or(0, |rs| rs.replicas));
    let mut scale_up = max_allowed.saturating_sub(total);
    if let Some(stable) = stable_distinct
        && stable.replicas < desired_stable
        && scale_up > 0
    {
        if stable.replicas.saturating_add(scale_up) < desired_stable {
            stable_count = stable.replicas.saturating_add(scale_up);
            scale_up = 0;
        } else {
            stable_count = desired_stable;
            scale_up = scale_up.saturating_sub(desired_stable.saturating_sub(stable.replicas));
        }
    }
    if let Some(canary) = input.canary
        && canary.replicas < desired_canary
        && scale_up > 0
    {
        canary_count = if canary.replicas.saturating_add(scale_up) < desired_canary {
            canary.replicas.saturating_add(scale_up)
        } else {
            desired_canary
        };
    }
    if older_total > 0 {
        return ReplicaTargets {
            canary: canary_count,
            stable: stable_count,
        };
    }
    let min_available = replicas.saturating_sub(input.fenceposts.max_unavailable);
    let increasing = input
        .canary
        .is_none_or(|canary| desired_canary >= canary.replicas);
    let countable = for_scale_down(input.canary, !increasing)
        .saturating_add(for_scale_down(stable_object, increasing));
    if countable <= min_available {
        return ReplicaTargets {
            canary: canary_count,
            stable: stable_count,
        };
    }
    let scale_down = countable.saturating_sub(min_available);
    if !increasing {
        canary_count = drain_to(input.canary, desired_canary, scale_down, canary_count);
        let (drain, adjust) = within_limits(
            input.canary,
            stable_object,
            canary_count,
            stable_count,
            max_allowed,
            min_available,
        );
        canary_count = drain;
        stable_count = adjust;
    } else if stable_distinct.is_some() {
        stable_count = drain_to(stable_object, desired_stable, scale_down, stable_count);
        let (drain, adjust) = within_limits(
            stable_object,
            input.canary,
            stable_count,
            canary_count,
            max_allowed,
            min_available,
        );
        stable_count = drain;
        canary_count = adjust;
    }
    ReplicaTargets {
        canary: canary_count,
        stable: stable_count,
    }
}

fn sum_replicas(sets: impl Iterator<Item = ReplicaSetCounts>) -> i64 {
    sets.fold(0i64, |total, rs| total.saturating_add(rs.replicas))
}

/// Argo's `GetReplicasForScaleDown`.
fn for_scale_down(rs: Option<ReplicaSetCounts>, ignore_availability: bool) -> i64 {
    match rs {
        None => 0,
        Some(rs) if rs.replicas < rs.available || ignore_availability => rs.replicas,
        Some(rs) => rs.available,
    }
}

/// Argo's `calculateScaleDownReplicaCount`.
fn drain_to(drain: Option<ReplicaSetCounts>, desired: i64, scale_down: i64, count: i64) -> i64 {
    match drain {
        Some(rs) if rs.replicas > desired => desired.max(rs.replicas.saturating_sub(scale_down)),
        _ => count,
    }
}

/// Argo's `adjustReplicaWithinLimits`: returns (drain, adjust).
fn within_limits(
    drain_rs: Option<ReplicaSetCounts>,
    adjust_rs: Option<ReplicaSetCounts>,
    mut drain: i64,
    mut adjust: i64,
    max_allowed: i64,
    min_available: i64,
) -> (i64, i64) {
    let over = 0i64.max(adjust.saturating_add(drain).saturating_sub(max_allowed));
    let mut available = drain_rs.map_or(0, |rs| rs.available.min(drain));
    if let Some(adjust_rs) = adjust_rs {
        adjust = adjust.saturating_sub(over);
        available = available.saturating_add(adjust_rs.available.min(adjust));
        let extra = 0i64.max(adjust_rs.available.saturating_sub(adjust));
        let needed = 0i64.max(min_available.saturating_sub(available));
        adjust = adjust.saturating_add(extra.min(needed));
        let over = 0i64.max(adjust.saturating_add(drain).saturating_sub(max_allowed));
        drain = drain.saturating_sub(over);
    }
    (drain, adjust)
}

/// The inputs of one traffic-routed calculation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrafficRoutedCanary {
    /// `spec.replicas`.
    pub replicas: i64,
    /// What the canary follows ([`desired`]).
    pub desired: Desired,
    /// The weight scale ([`max_weight`]).
    pub max_weight: i64,
    /// `minPodsPerReplicaSet`.
    pub min_pods_per_replica_set: Option<i64>,
    /// `dynamicStableScale`.
    pub dynamic_stable_scale: bool,
    /// `status.abort`.
    pub abort: bool,
    /// The weights the router has now (canary, stable), if known.
    pub current_weights: Option<(i64, i64)>,
}

/// Argo's `CalculateReplicaCountsForTrafficRoutedCanary`: the canary is `setCanaryScale.replicas`
/// or `ceil(replicas · weight / max)` (at least `minPodsPerReplicaSet` when not 0); the stable stays
/// at `replicas`, or with `dynamicStableScale` follows the larger of the desired and the current
/// stable weight (and after an abort the canary keeps the larger of its target and its current
/// weight's pods).
pub fn traffic_routed_canary(input: &TrafficRoutedCanary) -> ReplicaTargets {
    let replicas = input.replicas;
    let max = input.max_weight;
    let min_pods = |count: i64| -> i64 {
        match input.min_pods_per_replica_set {
            Some(min) if count != 0 => count.max(min.min(replicas)),
            _ => count,
        }
    };
    let mut canary = match input.desired.canary_replicas {
        Some(count) => count,
        None => min_pods(traffic_weight_to_replicas(
            replicas,
            input.desired.weight,
            max,
        )),
    };
    if !input.dynamic_stable_scale {
        return ReplicaTargets {
            canary,
            stable: replicas,
        };
    }
    let mut stable =
        traffic_weight_to_replicas(replicas, max.saturating_sub(input.desired.weight), max);
    if let Some((canary_weight, stable_weight)) = input.current_weights {
        stable = stable.max(traffic_weight_to_replicas(replicas, stable_weight, max));
        if input.abort {
            canary = canary.max(traffic_weight_to_replicas(replicas, canary_weight, max));
        }
    }
    ReplicaTargets {
        canary: min_pods(canary),
        stable: min_pods(stable),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]
mod tests {
    use super::*;

    fn int(value: i64) -> IntOrString {
        IntOrString::Int(value)
    }

    fn text(value: &str) -> IntOrString {
        IntOrString::String(value.to_string())
    }

    #[test]
    fn percentages_round_as_kubernetes_does() {
        assert_eq!(int_or_percent(&text("25%"), 10, true), Ok(3));
        assert_eq!(int_or_percent(&text("25%"), 10, false), Ok(2));
        // Every string is a percentage, with or without `%`.
        assert_eq!(int_or_percent(&text("1"), 10, true), Ok(1));
        assert_eq!(int_or_percent(&text("1"), 10, false), Ok(0));
        assert_eq!(int_or_percent(&int(7), 10, false), Ok(7));
        assert!(int_or_percent(&text("x%"), 10, true).is_err());
        assert!(int_or_percent(&text(""), 10, true).is_err());
        assert_eq!(int_or_percent(&text("-15%"), 10, true), Ok(-1));
        assert_eq!(int_or_percent(&text("-15%"), 10, false), Ok(-2));
    }

    #[test]
    fn fenceposts_default_round_and_never_both_zero() {
        assert_eq!(
            Fenceposts::resolve(None, None, 10),
            Fenceposts {
                max_surge: 3,
                max_unavailable: 2
            }
        );
        assert_eq!(
            Fenceposts::resolve(Some(&text("0%")), Some(&text("0%")), 10),
            Fenceposts {
                max_surge: 0,
                max_unavailable: 1
            }
        );
        assert_eq!(
            Fenceposts::resolve(Some(&int(0)), Some(&text("10%")), 5),
            Fenceposts {
                max_surge: 0,
                max_unavailable: 1
            }
        );
        // Capped at replicas; 0 replicas means none unavailable.
        assert_eq!(
            Fenceposts::resolve(Some(&int(0)), Some(&int(9)), 4).max_unavailable,
            4
        );
        assert_eq!(
            Fenceposts::resolve(Some(&int(1)), Some(&int(9)), 0).max_unavailable,
            0
        );
        // An unreadable value resolves both to 0, as Argo's ignored error does.
        assert_eq!(
            Fenceposts::resolve(Some(&text("lots")), Some(&int(1)), 4),
            Fenceposts {
                max_surge: 0,
                max_unavailable: 0
            }
        );
    }

    #[test]
    fn approximation_matches_the_examples_in_argos_comments() {
        let cases = [
            // (R, W, S) -> (canary, stable)
            ((10, 41, 0), (4, 6)),
            ((3, 50, 0), (2, 1)),
            ((1, 5, 1), (1, 1)),
            ((10, 1, 1), (1, 10)),
            ((1, 50, 0), (1, 0)),
            ((2, 1, 0), (1, 1)),
            ((5, 0, 1), (0, 5)),
            ((5, 100, 1), (5, 0)),
        ];
        for ((replicas, weight, surge), (canary, stable)) in cases {
            assert_eq!(
                approximate_weighted_counts(replicas, weight, 100, surge),
                ReplicaTargets { canary, stable },
                "R={replicas} W={weight} S={surge}"
            );
        }
    }

    #[test]
    fn basic_canary_examples_from_argos_comments() {
        // (R, W, S, U) with a fresh canary and a full stable -> (canary, stable).
        let cases = [
            ((10, 10, 1, 1), (1, 9)),
            ((10, 30, 3, 0), (3, 10)),
            ((10, 30, 0, 5), (0, 7)),
            // Argo's comment says 1/9, written before the approximation could surge: 1 of 11
            // pods (9%) is nearer 5% than 1 of 10, so the stable keeps its 10.
            ((10, 5, 1, 1), (1, 10)),
            ((1, 5, 1, 0), (1, 1)),
            ((1, 95, 1, 0), (1, 1)),
        ];
        for ((replicas, weight, surge, unavailable), (canary, stable)) in cases {
            let input = BasicCanary {
                replicas,
                weight,
                max_weight: 100,
                fenceposts: Fenceposts {
                    max_surge: surge,
                    max_unavailable: unavailable,
                },
                canary: Some(ReplicaSetCounts::default()),
                stable: StableReplicaSet::Distinct(ReplicaSetCounts {
                    replicas,
                    available: replicas,
                }),
                older: &[],
            };
            assert_eq!(
                basic_canary(&input),
                ReplicaTargets { canary, stable },
                "R={replicas} W={weight} S={surge} U={unavailable}"
            );
        }
    }

    #[test]
    fn without_a_distinct_stable_the_canary_goes_to_all_replicas() {
        for stable in [StableReplicaSet::Absent, StableReplicaSet::SameAsCanary] {
            let input = BasicCanary {
                replicas: 4,
                weight: 20,
                max_weight: 100,
                fenceposts: Fenceposts {
                    max_surge: 1,
                    max_unavailable: 0,
                },
                canary: Some(ReplicaSetCounts {
                    replicas: 1,
                    available: 1,
                }),
                stable,
                older: &[],
            };
            assert_eq!(
                basic_canary(&input),
                ReplicaTargets {
                    canary: 4,
                    stable: 0
                }
            );
        }
    }

    #[test]
    fn absurd_inputs_do_not_panic() {
        for replicas in [i64::MIN, -3, 0, 1, i64::MAX] {
            for weight in [i64::MIN, -1, 0, 50, 100, i64::MAX] {
                for max in [i64::MIN, 0, 100, i64::MAX] {
                    let _ = approximate_weighted_counts(replicas, weight, max, 1);
                    let _ = traffic_weight_to_replicas(replicas, weight, max);
                    let set = ReplicaSetCounts {
                        replicas,
                        available: weight,
                    };
                    let _ = basic_canary(&BasicCanary {
                        replicas,
                        weight,
                        max_weight: max,
                        fenceposts: Fenceposts {
                            max_surge: replicas,
                            max_unavailable: weight,
                        },
                        canary: Some(set),
                        stable: StableReplicaSet::Distinct(set),
                        older: &[set, set],
                    });
                }
            }
            let _ = Fenceposts::resolve(
                Some(&text("99999999999999999999%")),
                Some(&text("-9223372036854775808%")),
                replicas,
            );
        }
    }

    #[test]
    fn traffic_routed_targets() {
        let desired = Desired {
            canary_replicas: None,
            weight: 5,
        };
        let input = TrafficRoutedCanary {
            replicas: 10,
            desired,
            max_weight: 100,
            min_pods_per_replica_set: Some(2),
            dynamic_stable_scale: false,
            abort: false,
            current_weights: None,
        };
        assert_eq!(
            traffic_routed_canary(&input),
            ReplicaTargets {
                canary: 2,
                stable: 10
            }
        );
        let dynamic = TrafficRoutedCanary {
            dynamic_stable_scale: true,
            min_pods_per_replica_set: None,
            desired: Desired {
                canary_replicas: None,
                weight: 30,
            },
            current_weights: Some((10, 90)),
            ..input
        };
        assert_eq!(
            traffic_routed_canary(&dynamic),
            ReplicaTargets {
                canary: 3,
                stable: 9
            }
        );
    }
}
