//! The canary without a mesh (`provider: kubernetes` with canary steps): traffic is split by
//! replica ratio, the way Argo Rollouts' basic canary does it. One Service selects the pods of
//! both the primary (stable) and the canary Deployment, so the canary's share of traffic is its
//! share of available pods, and each step sets the two Deployments' replicas so that this share
//! approximates the step's weight.
//!
//! Pure arithmetic, no IO and no clock:
//!
//! - [`resolve_surge_unavailable`]: `maxSurge` / `maxUnavailable` as written ([`IntOrPercent`])
//!   to pod counts;
//! - [`approximate_split`]: the (canary, stable) pod counts that best approximate a weight
//!   (Argo's `approximateWeightedCanaryStableReplicaCounts`);
//! - [`replica_counts`]: the counts to set in one reconcile on the way there, within the surge
//!   and availability budgets (Argo's `CalculateReplicaCountsForBasicCanary`);
//! - [`effective_weight`]: the weight that available pods actually give.
//!
//! Weights are in weir's unit, basis points (`10_000` = 100%), with the maximum weight passed
//! explicitly; the arithmetic depends only on the ratio `weight / max_weight` and is exact
//! (integers, no floating point), so `5` of `100` and `500` of `10_000` give the same counts.
//! Argo's table tests (`compat/argo/vectors/canary-replica-counts.json`) pin the behaviour:
//! `tests/basic_canary.rs`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

// === impl IntOrPercent ===

/// `maxSurge` / `maxUnavailable` as written: an absolute count of pods or a percentage of the
/// replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntOrPercent {
    /// An absolute number of pods (`1`).
    Int(i32),
    /// A percentage of the replicas (`"25%"`).
    Percent(u32),
}

/// A `maxSurge` / `maxUnavailable` that is neither a count nor a percentage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} is neither a number of pods nor a percentage of the replicas (expected e.g. 1 or \"25%\")"
)]
pub struct IntOrPercentError {
    text: String,
}

impl IntOrPercent {
    /// The number of pods this stands for out of `replicas`: an `Int` as is, a `Percent` of
    /// `replicas` rounded up when `round_up` (surge) or down (unavailable). Never negative
    /// (a negative `Int` or `replicas` counts as 0).
    pub fn resolve(self, replicas: i32, round_up: bool) -> i32 {
        match self {
            IntOrPercent::Int(count) => count.max(0),
            IntOrPercent::Percent(percent) => {
                let product = i64::from(percent) * i64::from(replicas.max(0));
                let count = if round_up {
                    (product + 99) / 100
                } else {
                    product / 100
                };
                clamp_i32(count)
            }
        }
    }
}

impl FromStr for IntOrPercent {
    type Err = IntOrPercentError;

    /// Parses the string form, which is always a percentage: `"25%"`, and, as in Argo Rollouts
    /// (whose strings go through Kubernetes' `GetValueFromIntOrPercent`), `"25"` without the
    /// sign too. An absolute count is written as a number ([`IntOrPercent::Int`], or an integer
    /// when deserialized). Negative and fractional percentages are refused.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        let number = trimmed.strip_suffix('%').unwrap_or(trimmed).trim();
        let valid = !number.is_empty() && number.bytes().all(|byte| byte.is_ascii_digit());
        let percent = valid.then(|| number.parse::<u32>().ok()).flatten();
        percent
            .map(IntOrPercent::Percent)
            .ok_or_else(|| IntOrPercentError {
                text: text.to_string(),
            })
    }
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Int(count) => write!(f, "{count}"),
            IntOrPercent::Percent(percent) => write!(f, "{percent}%"),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrPercent {
    /// From an integer (a count, not negative) or a string (a percentage, see
    /// [`IntOrPercent::from_str`]).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Int(count) => i32::try_from(count)
                .ok()
                .filter(|count| *count >= 0)
                .map(IntOrPercent::Int)
                .ok_or_else(|| {
                    serde::de::Error::custom(IntOrPercentError {
                        text: count.to_string(),
                    })
                }),
            Raw::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// The default of both `maxSurge` and `maxUnavailable` (Argo Rollouts' and Kubernetes').
pub const DEFAULT_SURGE_UNAVAILABLE: IntOrPercent = IntOrPercent::Percent(25);

/// `(max_surge, max_unavailable)` in pods for `replicas` replicas, as Argo Rollouts resolves
/// them: absent means [`DEFAULT_SURGE_UNAVAILABLE`] (25%); percentages round up for the surge
/// and down for the unavailable pods; if both come to 0 the unavailable count is 1 (so a
/// rollout can always make progress); the unavailable count is capped at `replicas`.
///
/// Guarantees: both are `>= 0`; `max_unavailable <= max(replicas, 0)`; when `replicas >= 1`,
/// `max_surge + max_unavailable >= 1`.
pub fn resolve_surge_unavailable(
    replicas: i32,
    max_surge: Option<&IntOrPercent>,
    max_unavailable: Option<&IntOrPercent>,
) -> (i32, i32) {
    let replicas = replicas.max(0);
    let surge = max_surge
        .copied()
        .unwrap_or(DEFAULT_SURGE_UNAVAILABLE)
        .resolve(replicas, true);
    let mut unavailable = max_unavailable
        .copied()
        .unwrap_or(DEFAULT_SURGE_UNAVAILABLE)
        .resolve(replicas, false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable.min(replicas))
}

/// Step 1: the target pod counts **`(canary, stable)`** (this order, as upstream's function
/// returns them) whose ratio best approximates `weight` of `max_weight` for `replicas`
/// replicas, allowed to use one extra pod when `max_surge > 0`.
///
/// Candidates are `ceil(R*W/M)` and `floor(R*W/M)` canary pods out of `R` pods, then (with surge)
/// out of `R + 1`; the closest ratio wins, the earlier candidate on a tie (so exact halves round
/// up). A side is left at 0 pods only when `weight` is 0 or `max_weight` (or `R = 1` without
/// surge, where there is no other choice). One deliberate difference from upstream: when no
/// candidate qualifies (`R*W/M` is exactly `R - 1/2` and there is no surge, e.g. 95% of 10 or
/// 75% of 2), upstream returns `(0, R)`, whereas this returns `(R - 1, 1)`. Upstream's table tests
/// have no such case.
///
/// Guarantees: `R <= 0` gives `(0, 0)`; otherwise both counts are `>= 0` and the total is `R`
/// or `R + 1` (the latter only when `max_surge > 0`); `weight = 0` gives `(0, R)` and
/// `weight >= max_weight` gives `(R, 0)`; for `0 < W < M` and `R >= 2` both sides keep at least
/// one pod. `weight` above `max_weight` counts as `max_weight`; `max_weight = 0` as weight 0.
/// Depends only on the ratio `weight / max_weight` (exact arithmetic).
pub fn approximate_split(
    replicas: i32,
    weight: u32,
    max_weight: u32,
    max_surge: i32,
) -> (i32, i32) {
    if replicas <= 0 {
        return (0, 0);
    }
    let (weight, max_weight) = if max_weight == 0 {
        (0, 1)
    } else {
        (weight.min(max_weight), max_weight)
    };
    let (r, w, m) = (
        i128::from(replicas),
        i128::from(weight),
        i128::from(max_weight),
    );
    let floor = r * w / m;
    let ceil = (r * w + m - 1) / m;
    // The share of T pods at W is exactly halfway between two counts.
    let tie = |total: i128| (total * w % m) * 2 == m;
    let zero_ok = w == 0 || w == m || (r == 1 && max_surge <= 0);

    let mut candidates: Vec<(i128, i128)> = Vec::with_capacity(4);
    if ceil < r || zero_ok {
        candidates.push((ceil, r));
    }
    if !tie(r) && (floor != 0 || zero_ok) {
        candidates.push((floor, r));
    }
    if max_surge > 0 {
        candidates.push((ceil, r + 1));
        if !tie(r + 1) && (floor != 0 || zero_ok) {
            candidates.push((floor, r + 1));
        }
    }
    // |c*M/T - W| = |c*M - W*T| / T, compared by cross-multiplying (T > 0).
    let distance = |(canary, total): (i128, i128)| (canary * m - w * total).abs();
    let mut best: Option<(i128, i128)> = None;
    for candidate in candidates {
        let better = best.is_none_or(|current| {
            distance(candidate) * current.1 < distance(current) * candidate.1
        });
        if better {
            best = Some(candidate);
        }
    }
    match best {
        Some((canary, total)) => (clamp_i32_wide(canary), clamp_i32_wide(total - canary)),
        // Only when the share of R pods is exactly halfway below R (R*W/M = R - 1/2) without
        // surge: upstream returns (0, R) here ("should not get here"), taking the canary to 0
        // pods at e.g. 95% of 10 replicas; weir keeps the closer R - 1.
        None => (clamp_i32_wide(floor), clamp_i32_wide(r - floor)),
    }
}

// === impl BasicCanary ===

/// The replicas of one side (a Deployment or ReplicaSet): `spec.replicas` and
/// `status.availableReplicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Set {
    /// `spec.replicas`.
    pub spec: i32,
    /// `status.availableReplicas`.
    pub available: i32,
}

/// What [`replica_counts`] decides from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BasicCanary {
    /// The desired replicas `R` (the primary's when no canary runs).
    pub replicas: i32,
    /// The desired canary weight `W` of `max_weight`: the step's weight, `max_weight` to
    /// promote fully, 0 after an abort.
    pub weight: u32,
    /// The weight that stands for 100% (`10_000` in weir's basis points).
    pub max_weight: u32,
    /// The resolved surge `S` (from [`resolve_surge_unavailable`]).
    pub max_surge: i32,
    /// The resolved unavailable budget `U` (from [`resolve_surge_unavailable`]).
    pub max_unavailable: i32,
    /// The stable side; `None` when there is no distinct stable (the first deployment, or the
    /// canary already promoted): the canary then simply goes to `R` replicas.
    pub stable: Option<Set>,
    /// The canary side; `None` when it does not exist yet (the same as 0 replicas).
    pub canary: Option<Set>,
    /// All other, older sides together (still being drained); `None` or 0 replicas when none.
    pub older: Option<Set>,
}

/// The targets **`(stable, canary)`** (the order of [`replica_counts`]) that [`replica_counts`]
/// moves towards: [`approximate_split`] of the weight, or `(0, R)` when there is no distinct
/// stable.
pub fn targets(input: &BasicCanary) -> (i32, i32) {
    let replicas = input.replicas.max(0);
    if input.stable.is_none() {
        return (0, replicas);
    }
    let (canary, stable) = approximate_split(
        replicas,
        input.weight,
        input.max_weight,
        input.max_surge.max(0),
    );
    (stable, canary)
}

/// Steps 2-5: the replica counts **`(stable, canary)`** to set now: one reconcile's worth of
/// progress towards [`targets`]. Call again once pods have become available, until it returns
/// the targets (with all pods available it then keeps returning them). Older sides are not
/// scaled here; while any has replicas, only scale-ups within the surge happen.
///
/// How: first scale up within the surge (`R + S` minus all sides' replicas), the stable before
/// the canary, neither beyond its target; then, if no older side remains, scale down the side
/// that shrinks (the stable while the canary grows, the canary while it shrinks) by what is
/// available beyond `R - U`, never below its target, and re-balance the other side within
/// `R + S`.
///
/// Guarantees, for consistent input (`0 <= available <= spec` on every side, the sides' replicas
/// together at most `R + S`, `S` and `U` as [`resolve_surge_unavailable`] gives them): both
/// counts are `>= 0` and, with the older sides' replicas, total at most `R + S`; no side is
/// moved past its target; scaling down never takes the available pods (counted as
/// `min(available, new count)` per side) below `R - U`, nor below what was available if that
/// was already less; with every pod available each call makes progress, so the targets are
/// reached: each round of two calls (one side down, the other up once available) moves up to
/// `S + U` pods, so at most `2 * ceil(max(R, 1) / (S + U)) + 1` calls (`2R + 1` when
/// `S + U = 1`; checked exhaustively for `R <= 12`, `S, U <= 3`). Negative inputs count as 0;
/// `S = U = 0` is treated as `U = 1`, as in [`resolve_surge_unavailable`].
pub fn replica_counts(input: &BasicCanary) -> (i32, i32) {
    let replicas = input.replicas.max(0);
    let surge = input.max_surge.max(0);
    let mut unavailable = input.max_unavailable.clamp(0, replicas);
    if surge == 0 && unavailable == 0 {
        unavailable = 1.min(replicas);
    }
    let clean = |set: Option<Set>| {
        set.map(|set| Set {
            spec: set.spec.max(0),
            available: set.available.max(0),
        })
    };
    let stable = clean(input.stable);
    let canary = clean(input.canary);
    let older_spec = clean(input.older).map_or(0, |set| set.spec);
    let (target_stable, target_canary) = targets(input);
    let max_total = replicas.saturating_add(surge);

    // Step 3: scale up within the surge, the stable first.
    let mut stable_count = stable.map_or(0, |set| set.spec);
    let mut canary_count = canary.map_or(0, |set| set.spec);
    let mut budget = max_total
        .saturating_sub(stable_count)
        .saturating_sub(canary_count)
        .saturating_sub(older_spec);
    if budget > 0 && stable.is_some() && stable_count < target_stable {
        let up = (target_stable - stable_count).min(budget);
        stable_count += up;
        budget -= up;
    }
    if budget > 0 && canary_count < target_canary {
        canary_count = canary_count.saturating_add(budget).min(target_canary);
    }

    // Step 4: older sides are drained (elsewhere) before stable or canary scale down.
    if older_spec > 0 {
        return (stable_count, canary_count);
    }

    // Step 5: scale down what is available beyond R - U.
    let min_available = replicas - unavailable;
    let increasing = canary.is_none_or(|set| target_canary >= set.spec);
    let countable = countable(canary, !increasing).saturating_add(countable(stable, increasing));
    if countable <= min_available {
        return (stable_count, canary_count);
    }
    let excess = countable - min_available;
    let limits = Limits {
        max_total,
        min_available,
    };
    if !increasing {
        canary_count = scale_down(canary, target_canary, excess, canary_count);
        (canary_count, stable_count) = limits.adjust(canary, stable, canary_count, stable_count);
    } else if stable.is_some() {
        stable_count = scale_down(stable, target_stable, excess, stable_count);
        (stable_count, canary_count) = limits.adjust(stable, canary, stable_count, canary_count);
    }
    (stable_count.max(0), canary_count.max(0))
}

/// The pods of `set` that count as available when deciding how far to scale down: its replicas
/// when `ignore_availability`, otherwise its available pods (but no more than its replicas).
fn countable(set: Option<Set>, ignore_availability: bool) -> i32 {
    match set {
        None => 0,
        Some(set) if ignore_availability || set.spec < set.available => set.spec,
        Some(set) => set.available,
    }
}

/// The count of the side being drained: `excess` fewer replicas, but not below `target`; `count`
/// unchanged if the side is not above its target.
fn scale_down(set: Option<Set>, target: i32, excess: i32, count: i32) -> i32 {
    match set {
        Some(set) if set.spec > target => target.max(set.spec - excess),
        _ => count,
    }
}

struct Limits {
    max_total: i32,
    min_available: i32,
}

impl Limits {
    /// Re-balances the other side after the `drain` side was scaled down: keeps the total within
    /// `R + S`, then lets the other side keep (up to its available pods) what is needed for
    /// `R - U` available, taking the room from the drain side. Returns `(drain, adjust)`.
    fn adjust(
        &self,
        drain_set: Option<Set>,
        adjust_set: Option<Set>,
        drain: i32,
        adjust: i32,
    ) -> (i32, i32) {
        let drain_available = drain_set.map_or(0, |set| set.available);
        let adjust_available = adjust_set.map_or(0, |set| set.available);
        let mut drain = drain;
        let mut adjust = adjust;
        adjust -= (adjust + drain - self.max_total).max(0);
        let available = drain_available.min(drain) + adjust_available.min(adjust);
        adjust += (adjust_available - adjust)
            .max(0)
            .min((self.min_available - available).max(0));
        drain -= (adjust + drain - self.max_total).max(0);
        (drain, adjust)
    }
}

/// The canary weight (of `max_weight`) that the available pods give when one Service selects
/// both sides: `canary_available * max_weight / (canary_available + stable_available)`, rounded
/// down; 0 when no pod is available. Negative counts count as 0. Guarantees: `<= max_weight`;
/// `max_weight` exactly when only canary pods are available, 0 when only stable ones are.
pub fn effective_weight(stable_available: i32, canary_available: i32, max_weight: u32) -> u32 {
    let stable = u64::from(stable_available.max(0).unsigned_abs());
    let canary = u64::from(canary_available.max(0).unsigned_abs());
    let total = stable + canary;
    if total == 0 {
        return 0;
    }
    u32::try_from(canary * u64::from(max_weight) / total).unwrap_or(max_weight)
}

fn clamp_i32(value: i64) -> i32 {
    i32::try_from(value).unwrap_or(if value < 0 { i32::MIN } else { i32::MAX })
}

fn clamp_i32_wide(value: i128) -> i32 {
    i32::try_from(value).unwrap_or(if value < 0 { i32::MIN } else { i32::MAX })
}
