//! weir-core's Argo semantics against upstream's own expectations.
//!
//! - `vectors/canary-replica-counts.json`: Argo's table tests of canary ReplicaSet sizing
//!   (`approximateWeightedCanaryStableReplicaCounts`, 57 cases; the calculation of one reconcile's
//!   targets, basic and traffic-routed, 39 cases). Every case must match.
//! - `cli-golden/testdata/*/`: AnalysisRuns with real status; their measurements are replayed
//!   through `argo::analysis` and the counts and phase compared.
//!
//! The corpus is read from `WEIR_ARGO_COMPAT_DIR` (set by `.ci/run`), or `../shared/compat/argo`
//! beside the repository. Without it these tests print SKIPPED and pass.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use weir_core::argo::replicas::{
    self, BasicCanary, CanaryPosition, Fenceposts, ReplicaSetCounts, ReplicaTargets,
    StableReplicaSet, TrafficRoutedCanary,
};
use weir_core::argo::types::{CanaryStrategy, IntOrString};

/// Cases of each table.
const APPROXIMATE_CASES: usize = 57;
const CALCULATE_CASES: usize = 39;

fn corpus_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("WEIR_ARGO_COMPAT_DIR") {
        let dir = PathBuf::from(dir);
        if dir.is_dir() {
            return Some(dir);
        }
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/argo");
    beside.is_dir().then_some(beside)
}

/// The corpus directory, or `None` after printing why the test is skipped.
fn corpus() -> Option<PathBuf> {
    let dir = corpus_dir();
    if dir.is_none() {
        println!(
            "SKIPPED: the Argo Rollouts corpus (WEIR_ARGO_COMPAT_DIR or ../shared/compat/argo) is not there"
        );
    }
    dir
}

fn vectors(dir: &Path) -> Value {
    let path = dir.join("vectors/canary-replica-counts.json");
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn cases<'a>(vectors: &'a Value, table: &str) -> &'a [Value] {
    vectors[table]["cases"]
        .as_array()
        .unwrap_or_else(|| panic!("{table}.cases is not a list"))
}

fn int(case: &Value, field: &str) -> i64 {
    case[field].as_i64().unwrap_or(0)
}

#[test]
fn approximate_weighted_canary_stable_replica_counts() {
    let Some(dir) = corpus() else { return };
    let vectors = vectors(&dir);
    let mut checked = 0;
    let mut failures = Vec::new();
    for case in cases(&vectors, "approximateWeightedCanaryStableReplicaCounts") {
        let got = replicas::approximate_weighted_counts(
            int(case, "replicas"),
            int(case, "weight"),
            int(case, "maxWeight"),
            int(case, "maxSurge"),
        );
        let expected = ReplicaTargets {
            canary: int(case, "expCanary"),
            stable: int(case, "expStable"),
        };
        if got != expected {
            failures.push(format!("{case}: got {got:?}"));
        }
        checked += 1;
    }
    println!(
        "approximateWeightedCanaryStableReplicaCounts: {} of {checked} cases match",
        checked - failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(checked, APPROXIMATE_CASES);
}

/// A surge or unavailability as upstream's test writes it: absent is the integer 0.
fn int_or_string(value: &Value) -> IntOrString {
    match value {
        Value::String(text) => IntOrString::String(text.clone()),
        other => IntOrString::Int(other.as_i64().unwrap_or(0)),
    }
}

/// The canary strategy upstream's test builds: one step, the fields the case gives.
fn strategy(case: &Value) -> CanaryStrategy {
    let mut step = serde_json::Map::new();
    if let Some(weight) = case.get("setWeight").filter(|value| !value.is_null()) {
        step.insert("setWeight".into(), weight.clone());
    }
    if let Some(scale) = case.get("setCanaryScale").filter(|value| !value.is_null()) {
        step.insert("setCanaryScale".into(), scale.clone());
    }
    let mut canary = json!({ "steps": [Value::Object(step)] });
    for field in [
        "trafficRouting",
        "abortScaleDownDelaySeconds",
        "minPodsPerReplicaSet",
    ] {
        if let Some(value) = case.get(field).filter(|value| !value.is_null()) {
            canary[field] = value.clone();
        }
    }
    serde_json::from_value(canary).unwrap_or_else(|error| panic!("{case}: {error}"))
}

fn compute(case: &Value) -> ReplicaTargets {
    let canary = strategy(case);
    let spec_replicas = int(case, "rolloutSpecReplicas");
    let position = CanaryPosition {
        current_step_index: None,
        stable_rs: "stable",
        current_pod_hash: "canary",
        promote_full: case["promoteFull"].as_bool().unwrap_or(false),
        abort: case["statusAbort"].as_bool().unwrap_or(false),
    };
    let canary_rs = ReplicaSetCounts {
        replicas: int(case, "canarySpecReplica"),
        available: int(case, "canaryAvailableReplica"),
    };
    let stable_rs = ReplicaSetCounts {
        replicas: int(case, "stableSpecReplica"),
        available: int(case, "stableAvailableReplica"),
    };
    let max_weight = replicas::max_weight(&canary);
    if canary.traffic_routing.is_some() {
        // Upstream calls the traffic-routed calculation with no ReplicaSets and no weights.
        let desired = replicas::desired(&canary, spec_replicas, &position, None, None);
        return replicas::traffic_routed_canary(&TrafficRoutedCanary {
            replicas: spec_replicas,
            desired,
            max_weight,
            min_pods_per_replica_set: canary.min_pods_per_replica_set,
            dynamic_stable_scale: canary.dynamic_stable_scale == Some(true),
            abort: position.abort,
            current_weights: None,
        });
    }
    let older: Vec<ReplicaSetCounts> = case
        .get("olderRS")
        .filter(|value| !value.is_null())
        .map(|older| ReplicaSetCounts {
            replicas: int(older, "specReplicas"),
            available: int(older, "availableReplicas"),
        })
        .into_iter()
        .collect();
    let desired = replicas::desired(
        &canary,
        spec_replicas,
        &position,
        Some(canary_rs),
        Some(stable_rs),
    );
    let fenceposts = Fenceposts::resolve(
        Some(&int_or_string(&case["maxSurge"])),
        Some(&int_or_string(&case["maxUnavailable"])),
        spec_replicas,
    );
    replicas::basic_canary(&BasicCanary {
        replicas: spec_replicas,
        weight: desired.weight,
        max_weight,
        fenceposts,
        canary: Some(canary_rs),
        stable: StableReplicaSet::Distinct(stable_rs),
        older: &older,
    })
}

#[test]
fn calculate_replica_counts() {
    let Some(dir) = corpus() else { return };
    let vectors = vectors(&dir);
    let mut checked = 0;
    let mut failures = Vec::new();
    for case in cases(&vectors, "calculateReplicaCounts") {
        let got = compute(case);
        let expected = ReplicaTargets {
            canary: int(case, "expectedCanaryReplicaCount"),
            stable: int(case, "expectedStableReplicaCount"),
        };
        if got != expected {
            failures.push(format!(
                "{}: got {got:?}, expected {expected:?}",
                case["name"]
            ));
        }
        checked += 1;
    }
    println!(
        "calculateReplicaCounts: {} of {checked} cases match",
        checked - failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(checked, CALCULATE_CASES);
}
