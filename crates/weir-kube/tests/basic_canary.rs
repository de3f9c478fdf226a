//! The canary without a mesh: replica counts that split traffic by pod ratio
//! (`weir_kube::basic_canary`).
//!
//! Upstream's own table tests (Argo Rollouts' `utils/replicaset/canary_test.go`, transcribed to
//! `compat/argo/vectors/canary-replica-counts.json`: `WEIR_ARGO_VECTORS`, or
//! `../shared/compat/argo/vectors/` beside the project) must all match; without the file the
//! tests print that the vectors were skipped and pass. The other tests need no file: the
//! upstream examples quoted in `reference/argo-rollouts.md` section 4, parsing and resolving
//! `maxSurge` / `maxUnavailable`, and a property check over a grid of replicas, weights,
//! budgets and starting states (bounds, availability never below `R - U`, convergence).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use serde_json::Value;
use weir_kube::basic_canary::{
    BasicCanary, IntOrPercent, Set, approximate_split, effective_weight, replica_counts,
    resolve_surge_unavailable, targets,
};

/// Both sides by name (the functions return tuples: `approximate_split` `(canary, stable)`,
/// `replica_counts` and `targets` `(stable, canary)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Counts {
    stable: i32,
    canary: i32,
}

impl Counts {
    fn total(self) -> i32 {
        self.stable + self.canary
    }
}

fn split(replicas: i32, weight: u32, max_weight: u32, max_surge: i32) -> Counts {
    let (canary, stable) = approximate_split(replicas, weight, max_weight, max_surge);
    Counts { stable, canary }
}

fn counts(input: &BasicCanary) -> Counts {
    let (stable, canary) = replica_counts(input);
    Counts { stable, canary }
}

fn target(input: &BasicCanary) -> Counts {
    let (stable, canary) = targets(input);
    Counts { stable, canary }
}

/// 100% in weir's unit (basis points).
const M: u32 = 10_000;

fn vectors() -> Option<Value> {
    let path = std::env::var("WEIR_ARGO_VECTORS")
        .map(PathBuf::from)
        .ok()
        .filter(|path| path.is_file())
        .or_else(|| {
            let beside = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/compat/argo/vectors/canary-replica-counts.json");
            beside.is_file().then_some(beside)
        });
    let Some(path) = path else {
        println!(
            "Argo vectors not found (WEIR_ARGO_VECTORS or ../shared/compat/argo/vectors/canary-replica-counts.json): skipped"
        );
        return None;
    };
    let text = std::fs::read_to_string(&path).unwrap();
    Some(serde_json::from_str(&text).unwrap())
}

fn int(case: &Value, key: &str) -> i32 {
    case.get(key)
        .and_then(Value::as_i64)
        .map_or(0, |value| i32::try_from(value).unwrap())
}

fn uint(case: &Value, key: &str) -> u32 {
    case.get(key)
        .and_then(Value::as_u64)
        .map_or(0, |value| u32::try_from(value).unwrap())
}

#[test]
fn upstream_approximate_split_vectors() {
    let Some(vectors) = vectors() else { return };
    let cases = vectors["approximateWeightedCanaryStableReplicaCounts"]["cases"]
        .as_array()
        .unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let replicas = int(case, "replicas");
        let weight = uint(case, "weight");
        let max_weight = uint(case, "maxWeight");
        let max_surge = int(case, "maxSurge");
        let expected = Counts {
            canary: int(case, "expCanary"),
            stable: int(case, "expStable"),
        };
        // As upstream writes it (of 100) and in weir's basis points (of 10000).
        assert_eq!(
            split(replicas, weight, max_weight, max_surge),
            expected,
            "{case}"
        );
        assert_eq!(
            split(replicas, weight * 100, max_weight * 100, max_surge),
            expected,
            "{case} (basis points)"
        );
    }
    println!(
        "approximateWeightedCanaryStableReplicaCounts: {} cases ran, 0 skipped",
        cases.len()
    );
}

/// Argo's `calculateReplicaCounts` case as weir's input (the basic-canary calculation).
fn basic_input(case: &Value) -> BasicCanary {
    let replicas = int(case, "rolloutSpecReplicas");
    let budget = |key: &str| -> IntOrPercent {
        // Absent means int 0 in upstream's test builder.
        case.get(key).map_or(IntOrPercent::Int(0), |value| {
            serde_json::from_value(value.clone()).unwrap()
        })
    };
    let (max_surge, max_unavailable) = resolve_surge_unavailable(
        replicas,
        Some(&budget("maxSurge")),
        Some(&budget("maxUnavailable")),
    );
    let flag = |key: &str| case.get(key).and_then(Value::as_bool).unwrap_or(false);
    // Promote-full goes to 100%, an abort to 0%; otherwise the step's weight (percent).
    let weight = if flag("promoteFull") {
        M
    } else if flag("statusAbort") {
        0
    } else {
        uint(case, "setWeight") * 100
    };
    let set = |spec: &str, available: &str| Set {
        spec: int(case, spec),
        available: int(case, available),
    };
    BasicCanary {
        replicas,
        weight,
        max_weight: M,
        max_surge,
        max_unavailable,
        stable: Some(set("stableSpecReplica", "stableAvailableReplica")),
        canary: Some(set("canarySpecReplica", "canaryAvailableReplica")),
        older: case.get("olderRS").map(|older| Set {
            spec: int(older, "specReplicas"),
            available: int(older, "availableReplicas"),
        }),
    }
}

#[test]
fn upstream_basic_canary_vectors() {
    let Some(vectors) = vectors() else { return };
    let table = &vectors["calculateReplicaCounts"];
    let cases = table["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    let mut ran = 0;
    let mut skipped = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        // The meaning string: with `trafficRouting` (an object; `null` is absent) upstream runs
        // the traffic-routed calculation, which is not this module's. `setCanaryScale` and
        // `minPodsPerReplicaSet` only act with traffic routing: a case with them but without
        // `trafficRouting` is a basic case that checks they are ignored.
        if case
            .get("trafficRouting")
            .is_some_and(|routing| !routing.is_null())
        {
            skipped.push(name);
            continue;
        }
        let input = basic_input(case);
        let expected = Counts {
            stable: int(case, "expectedStableReplicaCount"),
            canary: int(case, "expectedCanaryReplicaCount"),
        };
        assert_eq!(counts(&input), expected, "{name}: {input:?}");
        // The same at upstream's scale (of 100).
        let percent = BasicCanary {
            weight: input.weight / 100,
            max_weight: 100,
            ..input
        };
        assert_eq!(counts(&percent), expected, "{name} (of 100)");
        ran += 1;
    }
    println!(
        "calculateReplicaCounts: {ran} basic-canary cases ran, {} skipped (traffic-routed calculation: `trafficRouting` set):",
        skipped.len()
    );
    for name in &skipped {
        println!("  skipped: {name}");
    }
    assert_eq!(ran + skipped.len(), cases.len());
    assert!(ran > 0);
}

#[test]
fn reference_examples_of_approximate_split() {
    // reference/argo-rollouts.md section 4 step 1 (weights in basis points).
    for (replicas, weight, surge, canary, stable) in [
        (10, 41, 0, 4, 6),
        (3, 50, 0, 2, 1),
        (1, 5, 1, 1, 1),
        (10, 1, 1, 1, 10),
    ] {
        // The raw order: (canary, stable).
        assert_eq!(
            approximate_split(replicas, weight * 100, M, surge),
            (canary, stable),
            "R={replicas} W={weight}% S={surge}"
        );
    }
}

#[test]
fn a_share_just_below_all_pods_keeps_both_sides() {
    // R*W/M = R - 1/2 without surge: no upstream candidate qualifies and upstream returns
    // (0, R), the canary at 0 pods at 95%; weir keeps R - 1 canary pods (no upstream vector
    // has this case).
    for (replicas, percent) in [(2, 75), (5, 90), (10, 95), (25, 98), (50, 99)] {
        assert_eq!(
            approximate_split(replicas, percent * 100, M, 0),
            (replicas - 1, 1),
            "R={replicas} W={percent}%"
        );
    }
    // With surge the usual candidates apply: 19 of 20 pods is exactly 95%.
    assert_eq!(approximate_split(10, 9_500, M, 1), (10, 1));
    // Exactly half of R (a tie) still rounds up.
    assert_eq!(approximate_split(3, 5_000, M, 0), (2, 1));
}

#[test]
fn reference_examples_of_replica_counts() {
    // reference/argo-rollouts.md section 4 (upstream's source comment): the first reconcile
    // of a step from a fully available stable.
    for (replicas, weight, surge, unavailable, canary, stable) in [
        (10, 10, 1, 1, 1, 9),
        (10, 30, 3, 0, 3, 10),
        (10, 30, 0, 5, 0, 7),
        (1, 95, 1, 0, 1, 1),
    ] {
        let input = BasicCanary {
            replicas,
            weight: weight * 100,
            max_weight: M,
            max_surge: surge,
            max_unavailable: unavailable,
            stable: Some(Set {
                spec: replicas,
                available: replicas,
            }),
            canary: Some(Set::default()),
            older: None,
        };
        // The raw order: (stable, canary).
        assert_eq!(
            replica_counts(&input),
            (stable, canary),
            "R={replicas} W={weight}% S={surge} U={unavailable}"
        );
    }
}

#[test]
fn approximate_split_depends_only_on_the_ratio() {
    for replicas in 0..=50 {
        for percent in 0..=100 {
            for surge in 0..=2 {
                let of_100 = split(replicas, percent, 100, surge);
                assert_eq!(split(replicas, percent * 100, M, surge), of_100);
                assert_eq!(split(replicas, percent * 7, 700, surge), of_100);
            }
        }
    }
}

#[test]
fn approximate_split_guarantees_in_basis_points() {
    for replicas in 0..=40 {
        for weight in (0..=M).step_by(7).chain([1, M - 1, M, M + 1]) {
            for surge in 0..=2 {
                let split = split(replicas, weight, M, surge);
                let what = format!("R={replicas} W={weight} S={surge}: {split:?}");
                assert!(split.canary >= 0 && split.stable >= 0, "{what}");
                if replicas == 0 {
                    assert_eq!(split, Counts::default(), "{what}");
                    continue;
                }
                let extra = if surge > 0 { 1 } else { 0 };
                assert!(
                    split.total() == replicas || split.total() == replicas + extra,
                    "{what}"
                );
                if weight == 0 {
                    assert_eq!(
                        split,
                        Counts {
                            canary: 0,
                            stable: replicas
                        },
                        "{what}"
                    );
                } else if weight >= M {
                    assert_eq!(
                        split,
                        Counts {
                            canary: replicas,
                            stable: 0
                        },
                        "{what}"
                    );
                } else if replicas >= 2 {
                    assert!(split.canary >= 1 && split.stable >= 1, "{what}");
                }
            }
        }
    }
    // A zero maximum counts as weight 0.
    assert_eq!(
        split(4, 10, 0, 1),
        Counts {
            canary: 0,
            stable: 4
        }
    );
}

#[test]
fn int_or_percent_parses_and_refuses() {
    assert_eq!("25%".parse(), Ok(IntOrPercent::Percent(25)));
    assert_eq!(" 0% ".parse(), Ok(IntOrPercent::Percent(0)));
    assert_eq!("150%".parse(), Ok(IntOrPercent::Percent(150)));
    // Argo Rollouts reads every string as a percentage, with or without the sign.
    assert_eq!("1".parse(), Ok(IntOrPercent::Percent(1)));
    for bad in [
        "",
        "%",
        "abc",
        "-5%",
        "1.5%",
        "25 %x",
        "+5%",
        "99999999999%",
    ] {
        let error = bad.parse::<IntOrPercent>().unwrap_err().to_string();
        assert!(
            error.contains("neither a number of pods nor a percentage"),
            "{bad:?}: {error}"
        );
    }

    let parse = |json: &str| serde_json::from_str::<IntOrPercent>(json);
    assert_eq!(parse("1").unwrap(), IntOrPercent::Int(1));
    assert_eq!(parse("0").unwrap(), IntOrPercent::Int(0));
    assert_eq!(parse("\"25%\"").unwrap(), IntOrPercent::Percent(25));
    assert_eq!(parse("\"3\"").unwrap(), IntOrPercent::Percent(3));
    for bad in ["-1", "3000000000", "\"x\"", "1.5", "true", "null"] {
        assert!(parse(bad).is_err(), "{bad}");
    }
    assert!(parse("-1").unwrap_err().to_string().contains("\"-1\""));

    assert_eq!(IntOrPercent::Int(3).to_string(), "3");
    assert_eq!(IntOrPercent::Percent(25).to_string(), "25%");
}

#[test]
fn surge_and_unavailable_resolve_as_upstream() {
    let int = IntOrPercent::Int;
    let percent = IntOrPercent::Percent;
    // Defaults 25% / 25%: surge rounds up, unavailable down.
    assert_eq!(resolve_surge_unavailable(10, None, None), (3, 2));
    assert_eq!(resolve_surge_unavailable(1, None, None), (1, 0));
    assert_eq!(resolve_surge_unavailable(4, None, None), (1, 1));
    assert_eq!(
        resolve_surge_unavailable(10, Some(&percent(20)), Some(&percent(20))),
        (2, 2)
    );
    assert_eq!(
        resolve_surge_unavailable(10, Some(&percent(1)), Some(&percent(19))),
        (1, 1)
    );
    assert_eq!(
        resolve_surge_unavailable(10, Some(&int(2)), Some(&int(1))),
        (2, 1)
    );
    // Both 0: one pod may be unavailable.
    assert_eq!(
        resolve_surge_unavailable(10, Some(&percent(0)), Some(&percent(0))),
        (0, 1)
    );
    assert_eq!(
        resolve_surge_unavailable(10, Some(&int(0)), Some(&percent(5))),
        (0, 1)
    );
    // Unavailable is capped at the replicas; nothing with no replicas.
    assert_eq!(
        resolve_surge_unavailable(3, Some(&int(0)), Some(&int(7))),
        (0, 3)
    );
    assert_eq!(
        resolve_surge_unavailable(0, Some(&int(0)), Some(&int(0))),
        (0, 0)
    );
    assert_eq!(resolve_surge_unavailable(-2, None, None), (0, 0));
    assert_eq!(
        resolve_surge_unavailable(5, Some(&int(-3)), Some(&int(-1))),
        (0, 1)
    );
    assert_eq!(IntOrPercent::Percent(25).resolve(10, true), 3);
    assert_eq!(IntOrPercent::Percent(25).resolve(10, false), 2);
    assert_eq!(
        IntOrPercent::Percent(u32::MAX).resolve(i32::MAX, true),
        i32::MAX
    );
}

#[test]
fn effective_weight_of_available_pods() {
    assert_eq!(effective_weight(0, 0, M), 0);
    assert_eq!(effective_weight(9, 1, M), 1_000);
    assert_eq!(effective_weight(2, 1, M), 3_333);
    assert_eq!(effective_weight(1, 2, M), 6_666);
    assert_eq!(effective_weight(0, 3, M), M);
    assert_eq!(effective_weight(3, 0, M), 0);
    assert_eq!(effective_weight(-1, 2, M), M);
    assert_eq!(effective_weight(6, 4, 100), 40);
    assert_eq!(effective_weight(i32::MAX, i32::MAX, u32::MAX), u32::MAX / 2);
    // The split's weight is what its pods give once available.
    assert_eq!(effective_weight(6, 4, M), 4_000);
}

#[test]
fn without_a_stable_the_canary_takes_all_replicas() {
    let input = BasicCanary {
        replicas: 4,
        weight: 2_000,
        max_weight: M,
        max_surge: 1,
        max_unavailable: 0,
        stable: None,
        canary: Some(Set {
            spec: 1,
            available: 1,
        }),
        older: None,
    };
    assert_eq!(
        target(&input),
        Counts {
            stable: 0,
            canary: 4
        }
    );
    assert_eq!(
        counts(&input),
        Counts {
            stable: 0,
            canary: 4
        }
    );
}

/// Availabilities to try for a side with `spec` replicas.
fn availabilities(spec: i32) -> Vec<i32> {
    let mut values = vec![0, 1, spec / 2, spec - 1, spec];
    values.retain(|value| (0..=spec).contains(value));
    values.sort_unstable();
    values.dedup();
    values
}

/// `value` lies between `from` and `to` (inclusive).
fn between(value: i32, from: i32, to: i32) -> bool {
    (from.min(to)..=from.max(to)).contains(&value)
}

/// Pods available once `counts` are applied to a side: scaling down loses pods at once,
/// scaling up gains none until later.
fn apply(set: Set, count: i32) -> Set {
    Set {
        spec: count,
        available: set.available.min(count),
    }
}

#[test]
fn grid_counts_stay_within_budgets() {
    let mut calls = 0_u64;
    for replicas in 0..=12 {
        for percent in (0..=100).step_by(5) {
            for surge in 0..=3 {
                for unavailable in 0..=3 {
                    let (surge, unavailable) = resolve_surge_unavailable(
                        replicas,
                        Some(&IntOrPercent::Int(surge)),
                        Some(&IntOrPercent::Int(unavailable)),
                    );
                    let max_total = replicas + surge;
                    for older in 0..=1 {
                        for stable in 0..=max_total - older {
                            for canary in 0..=max_total - older - stable {
                                for stable_available in availabilities(stable) {
                                    for canary_available in availabilities(canary) {
                                        let stable_set = Set {
                                            spec: stable,
                                            available: stable_available,
                                        };
                                        let canary_set = Set {
                                            spec: canary,
                                            available: canary_available,
                                        };
                                        let input = BasicCanary {
                                            replicas,
                                            weight: percent * 100,
                                            max_weight: M,
                                            max_surge: surge,
                                            max_unavailable: unavailable,
                                            stable: Some(stable_set),
                                            canary: Some(canary_set),
                                            older: Some(Set {
                                                spec: older,
                                                available: older,
                                            }),
                                        };
                                        let counts = counts(&input);
                                        calls += 1;
                                        let what = || format!("{input:?} -> {counts:?}");
                                        assert!(
                                            counts.stable >= 0 && counts.canary >= 0,
                                            "{}",
                                            what()
                                        );
                                        assert!(counts.total() + older <= max_total, "{}", what());
                                        // No side is moved past its target.
                                        let goal = target(&input);
                                        assert!(
                                            between(counts.stable, stable, goal.stable),
                                            "{}",
                                            what()
                                        );
                                        assert!(
                                            between(counts.canary, canary, goal.canary),
                                            "{}",
                                            what()
                                        );
                                        // Scaling down keeps R - U available (or what was).
                                        let before = stable_available + canary_available;
                                        let after = apply(stable_set, counts.stable).available
                                            + apply(canary_set, counts.canary).available;
                                        assert!(
                                            after >= before.min(replicas - unavailable),
                                            "{}: {after} available",
                                            what()
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    println!("{calls} inputs checked");
}

#[test]
fn grid_converges_with_all_pods_available() {
    let mut runs = 0_u64;
    let mut slowest = (0, None);
    for replicas in 0..=12 {
        for percent in (0..=100).step_by(5) {
            for surge in 0..=3 {
                for unavailable in 0..=3 {
                    let (surge, unavailable) = resolve_surge_unavailable(
                        replicas,
                        Some(&IntOrPercent::Int(surge)),
                        Some(&IntOrPercent::Int(unavailable)),
                    );
                    let max_total = replicas + surge;
                    let mut starts = Vec::new();
                    for canary in 0..=max_total {
                        let canary = Set {
                            spec: canary,
                            available: canary,
                        };
                        starts.push((None, canary));
                        for stable in 0..=max_total - canary.spec {
                            let stable = Set {
                                spec: stable,
                                available: stable,
                            };
                            starts.push((Some(stable), canary));
                        }
                    }
                    for (stable, canary) in starts {
                        let mut input = BasicCanary {
                            replicas,
                            weight: percent * 100,
                            max_weight: M,
                            max_surge: surge,
                            max_unavailable: unavailable,
                            stable,
                            canary: Some(canary),
                            older: None,
                        };
                        let start = input;
                        let target = target(&input);
                        // Two calls per (S + U) pods moved (scale one side down, then the
                        // other up once available), plus the call that returns the targets.
                        let per_round = (surge + unavailable).max(1);
                        let bound = 2 * ((replicas.max(1) + per_round - 1) / per_round) + 1;
                        let mut calls = 0;
                        loop {
                            calls += 1;
                            assert!(
                                calls <= bound,
                                "no convergence within {bound} calls from {start:?}"
                            );
                            let counts = counts(&input);
                            let what =
                                || format!("from {start:?}, call {calls}: {input:?} -> {counts:?}");
                            assert!(counts.stable >= 0 && counts.canary >= 0, "{}", what());
                            assert!(counts.total() <= max_total, "{}", what());
                            let (stable_spec, canary_spec) = (
                                input.stable.map_or(0, |set| set.spec),
                                input.canary.map_or(0, |set| set.spec),
                            );
                            assert!(
                                between(counts.stable, stable_spec, target.stable),
                                "{}",
                                what()
                            );
                            assert!(
                                between(counts.canary, canary_spec, target.canary),
                                "{}",
                                what()
                            );
                            let before = input.stable.map_or(0, |set| set.available)
                                + input.canary.map_or(0, |set| set.available);
                            let stable = input.stable.map(|set| apply(set, counts.stable));
                            let canary = input.canary.map(|set| apply(set, counts.canary));
                            let after = stable.map_or(0, |set| set.available)
                                + canary.map_or(0, |set| set.available);
                            assert!(
                                after >= before.min(replicas - unavailable),
                                "{}: {after} available",
                                what()
                            );
                            // Mark all available for the next call.
                            let ready = |set: Set| Set {
                                spec: set.spec,
                                available: set.spec,
                            };
                            input.stable = stable.map(ready);
                            input.canary = canary.map(ready);
                            if counts == target {
                                break;
                            }
                        }
                        // The targets then stay put.
                        assert_eq!(counts(&input), target, "settled from {start:?}");
                        if calls > slowest.0 {
                            slowest = (calls, Some(start));
                        }
                        runs += 1;
                    }
                }
            }
        }
    }
    println!(
        "{runs} runs converged; slowest took {} calls: {:?}",
        slowest.0, slowest.1
    );
}
