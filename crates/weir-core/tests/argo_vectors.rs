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

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde_json::{Value, json};
use weir_core::argo::analysis::{AnalysisRunState, ArgValues, Outcome, Phase, RunSpec};
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

// === AnalysisRuns of the CLI's golden testdata ===

/// AnalysisRuns with metric results in `cli-golden/testdata/*/`.
const GOLDEN_RUNS: usize = 3;
/// Of those, runs whose listed measurements account for their counters, so that replaying them
/// must give the same counts and phases.
const GOLDEN_RUNS_COMPARABLE: usize = 2;

fn timestamp(value: &Value) -> Option<Timestamp> {
    value.as_str().and_then(|text| text.parse().ok())
}

fn counters(result: &Value) -> [i64; 5] {
    ["count", "successful", "failed", "inconclusive", "error"].map(|key| int(result, key))
}

fn listed(result: &Value) -> [i64; 5] {
    let mut counts = [0; 5];
    for measurement in result["measurements"].as_array().into_iter().flatten() {
        match measurement["phase"].as_str() {
            Some("Successful") => {
                counts[0] += 1;
                counts[1] += 1;
            }
            Some("Failed") => {
                counts[0] += 1;
                counts[2] += 1;
            }
            Some("Inconclusive") => {
                counts[0] += 1;
                counts[3] += 1;
            }
            Some("Error") => counts[4] += 1,
            _ => {}
        }
    }
    counts
}

/// Replays a run's listed measurements through `argo::analysis`.
fn replay(run: &Value) -> AnalysisRunState {
    let args: Vec<(String, String)> = run["spec"]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|arg| {
            (
                arg["name"].as_str().unwrap_or("").to_string(),
                arg["value"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let values = ArgValues {
        values: args,
        secrets: Vec::new(),
    };
    let spec = RunSpec::build(&run["spec"], &values).unwrap_or_else(|error| panic!("{error}"));
    let results = run["status"]["metricResults"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let first = results
        .iter()
        .flat_map(|result| {
            result["measurements"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|measurement| timestamp(&measurement["startedAt"]))
        .min();
    let started = timestamp(&run["status"]["startedAt"])
        .or(first)
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let mut state = AnalysisRunState::new(spec, started);
    for result in &results {
        let name = result["name"].as_str().unwrap_or("");
        let conditions = run["spec"]["metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|metric| {
                metric["name"] == result["name"]
                    && (metric.get("successCondition").is_some()
                        || metric.get("failureCondition").is_some())
            });
        for measurement in result["measurements"].as_array().into_iter().flatten() {
            let started_at = timestamp(&measurement["startedAt"]).unwrap_or(started);
            let Some(finished_at) = timestamp(&measurement["finishedAt"]) else {
                state
                    .start(name, started_at)
                    .expect("an in-flight measurement");
                continue;
            };
            let phase = measurement["phase"]
                .as_str()
                .and_then(Phase::parse)
                .expect("a measurement's phase");
            let outcome = match measurement.get("value") {
                Some(value) if conditions => Outcome::json(value),
                _ => Outcome::Decided {
                    phase,
                    message: measurement["message"].as_str().map(str::to_string),
                },
            };
            let judged = state
                .record(name, outcome, started_at, finished_at)
                .expect("the run takes the measurement");
            assert_eq!(judged, phase, "{name}: a measurement judged again");
        }
    }
    state
}

#[test]
fn cli_golden_analysis_runs() {
    let Some(dir) = corpus() else { return };
    let testdata = dir.join("cli-golden/testdata");
    if !testdata.is_dir() {
        println!("SKIPPED: {} is not there", testdata.display());
        return;
    }
    let mut files: Vec<PathBuf> = fs::read_dir(&testdata)
        .expect("reading testdata")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.is_dir())
        .flat_map(|dir| {
            fs::read_dir(dir)
                .expect("reading a testdata folder")
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .collect::<Vec<_>>()
        })
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    let (mut runs, mut comparable) = (0, 0);
    for file in files {
        let text = fs::read_to_string(&file).expect("reading a testdata file");
        let Ok(documents) = serde_saphyr::from_multiple::<Value>(&text) else {
            continue;
        };
        for run in documents {
            if run["kind"] != "AnalysisRun" || run["status"]["metricResults"].is_null() {
                continue;
            }
            runs += 1;
            let name = format!("{} {}", file.display(), run["metadata"]["name"]);
            let state = replay(&run);
            let status = state.status();
            let results = run["status"]["metricResults"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let accounted = results
                .iter()
                .all(|result| counters(result) == listed(result));
            for (index, result) in results.iter().enumerate() {
                let ours = &status["metricResults"][index];
                assert_eq!(
                    counters(ours),
                    listed(result),
                    "{name}: counters of the listed measurements"
                );
                if accounted {
                    assert_eq!(ours["phase"], result["phase"], "{name}: metric phase");
                }
            }
            if accounted {
                assert_eq!(status["phase"], run["status"]["phase"], "{name}: run phase");
                comparable += 1;
                println!(
                    "{name}: counts and phase {} match ({})",
                    status["phase"], state.message
                );
            } else {
                println!(
                    "{name}: its status counts {:?} (count, successful, failed, inconclusive, \
                     error) but lists measurements for {:?}; the listed ones replay to the same \
                     counters, the phase {} is not derivable from them",
                    results.iter().map(counters).collect::<Vec<_>>(),
                    results.iter().map(listed).collect::<Vec<_>>(),
                    run["status"]["phase"]
                );
            }
        }
    }
    println!(
        "cli-golden AnalysisRuns: {runs} replayed, {comparable} with every count and phase matching"
    );
    assert_eq!(runs, GOLDEN_RUNS);
    assert_eq!(comparable, GOLDEN_RUNS_COMPARABLE);
}
