//! `kubectl argo rollouts get|list` outputs, against upstream's golden strings.
//!
//! Each golden file of the corpus's `cli-golden/` names an upstream CLI test: its fixture folder
//! is loaded as upstream loads it (every object's `creationTimestamp`, and the start and finish
//! of the first metric's measurements of AnalysisRuns, set to "now minus 7 days" truncated to
//! the second), the command is rendered with `--no-color`, and the text is compared with the
//! golden's (what follows its first, `# Source`, line).
//!
//! The `get` goldens are compared as upstream's own test compares them: trailing spaces of each
//! line stripped on both sides (the plugin pads the last tab-aligned columns and the `%-17s`
//! labels, and the goldens are stored stripped). The `list` goldens keep their trailing spaces
//! and are compared byte for byte; upstream builds their Rollouts in Go, so this test builds the
//! same objects as JSON. `get-TestGetInvalidRollout` is one expected text stored as two files
//! around a part upstream splices in with Go string concatenation: the output must start with the
//! first, end with the second, and hold no line break between them.
//!
//! The corpus is third-party material beside the project: `WEIR_ARGO_COMPAT_DIR`, or
//! `../shared/compat/argo`. Without it the corpus test prints SKIPPED; the small fixture test
//! below always runs.

use std::fs;
use std::path::{Path, PathBuf};

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use weir_core::argo::printer::{self, Objects, Options};

/// Golden files matched, of [`GOLDEN_FILES`]; all of them.
const MATCHED: usize = 14;
const GOLDEN_FILES: usize = 14;

fn corpus_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("WEIR_ARGO_COMPAT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/argo")
        });
    dir.is_dir().then_some(dir)
}

/// The instant the test renders at: a fixed time with a fraction of a second, as a real clock
/// has, so a deadline set "in four hours" (truncated to the second) is 3h59m59.5s away.
fn now() -> Timestamp {
    "2026-03-01T12:00:00.5Z"
        .parse()
        .unwrap_or_else(|e| panic!("a valid timestamp: {e}"))
}

fn truncate_to_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or_else(|e| panic!("in range: {e}"))
}

/// A fixture folder's objects, in file-name order, with upstream's timestamp overrides.
fn load_folder(dir: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("fixture folder: {e}"))
        .map(|e| e.unwrap_or_else(|e| panic!("dir entry: {e}")).path())
        .collect();
    files.sort();
    let week_ago = truncate_to_second(now() - SignedDuration::from_hours(7 * 24)).to_string();
    files
        .iter()
        .map(|f| {
            let text = fs::read_to_string(f).unwrap_or_else(|e| panic!("fixture file: {e}"));
            let mut doc: Value =
                serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("fixture YAML: {e}"));
            doc["metadata"]["creationTimestamp"] = json!(week_ago);
            let is_run = doc["kind"] == "AnalysisRun";
            if is_run
                && let Some(ms) = doc["status"]["metricResults"][0]["measurements"].as_array_mut()
            {
                for m in ms {
                    m["startedAt"] = json!(week_ago);
                    m["finishedAt"] = json!(week_ago);
                }
            }
            doc
        })
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn strip_trailing_spaces(s: &str) -> String {
    s.split('\n')
        .map(|l| l.trim_end_matches(' '))
        .collect::<Vec<_>>()
        .join("\n")
}

enum Command {
    /// `get rollout` of the folder's n-th Rollout (file order).
    GetRollout(usize),
    /// `get experiment` of the folder's first Experiment.
    GetExperiment,
}

/// What a test does to the objects before rendering: upstream's scale-down-delay tests set a
/// deadline (now + this many seconds, truncated) on the third ReplicaSet and drop its hash label.
struct Case {
    golden: &'static str,
    folder: &'static str,
    command: Command,
    deadline_in: Option<i64>,
}

fn cases() -> Vec<Case> {
    let case = |golden, folder, command, deadline_in| Case {
        golden,
        folder,
        command,
        deadline_in,
    };
    vec![
        case(
            "get-TestGetBlueGreenRollout-L130.txt",
            "blue-green",
            Command::GetRollout(0),
            None,
        ),
        case(
            "get-TestGetBlueGreenRolloutScaleDownDelay-L178.txt",
            "blue-green",
            Command::GetRollout(0),
            Some(4 * 3600),
        ),
        case(
            "get-TestGetBlueGreenRolloutScaleDownDelayPassed-L226.txt",
            "blue-green",
            Command::GetRollout(0),
            Some(-3600),
        ),
        case(
            "get-TestGetCanaryRollout-L271.txt",
            "canary",
            Command::GetRollout(0),
            None,
        ),
        case(
            "get-TestGetCanaryPingPongRollout-L319.txt",
            "canary",
            Command::GetRollout(3),
            None,
        ),
        case(
            "get-TestExperimentRollout-L367.txt",
            "experiment-analysis",
            Command::GetRollout(0),
            None,
        ),
        case(
            "get-TestGetExperiment-L425.txt",
            "experiment-analysis",
            Command::GetExperiment,
            None,
        ),
        case(
            "get-TestGetRolloutWithExperimentJob-L454.txt",
            "experiment-step",
            Command::GetRollout(0),
            None,
        ),
        case(
            "get-TestGetAbortedRollout-L536.txt",
            "rollout-aborted",
            Command::GetRollout(0),
            None,
        ),
    ]
}

fn render(case: &Case, testdata: &Path) -> String {
    let mut docs = load_folder(&testdata.join(case.folder));
    if let Some(secs) = case.deadline_in {
        let deadline = truncate_to_second(now() + SignedDuration::from_secs(secs)).to_string();
        let rs = docs
            .iter_mut()
            .filter(|d| d["kind"] == "ReplicaSet")
            .nth(2)
            .unwrap_or_else(|| panic!("a third ReplicaSet"));
        rs["metadata"]["annotations"]["scale-down-deadline"] = json!(deadline);
        if let Some(labels) = rs["metadata"]["labels"].as_object_mut() {
            labels.remove("rollouts-pod-template-hash");
        }
    }
    let objects = Objects::from_documents(&docs);
    let options = Options {
        now: now(),
        color: false,
    };
    match case.command {
        Command::GetRollout(n) => {
            printer::get_rollout(of_kind(&docs, "Rollout")[n], &objects, &options)
        }
        Command::GetExperiment => {
            printer::get_experiment(of_kind(&docs, "Experiment")[0], &objects, &options)
        }
    }
}

fn golden_body(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("golden file: {e}"));
    match text.split_once('\n') {
        Some((_, body)) => body.to_owned(),
        None => String::new(),
    }
}

/// The Rollouts upstream's list tests build in Go, as JSON.
fn list_canary() -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "can-guestbook", "namespace": "test"},
        "spec": {"replicas": 5, "strategy": {"canary": {"steps": [
            {"setWeight": 10}, {"pause": {"duration": 60}}, {"setWeight": 20}
        ]}}},
        "status": {"currentStepIndex": 1, "replicas": 4, "readyReplicas": 1,
                   "updatedReplicas": 3, "availableReplicas": 2}
    })
}

fn list_blue_green() -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "bg-guestbook", "namespace": "test"},
        "spec": {"replicas": 5, "strategy": {"blueGreen": {}}},
        "status": {"currentStepIndex": 1, "replicas": 4, "readyReplicas": 1,
                   "updatedReplicas": 3, "availableReplicas": 2}
    })
}

fn render_list(golden: &str) -> Option<String> {
    match golden {
        "list-TestListCanaryRollout-L142.txt" => Some(printer::list_rollouts(&[list_canary()])),
        "list-TestListBlueGreenResource-L162.txt" => {
            Some(printer::list_rollouts(&[list_blue_green()]))
        }
        "list-TestListWithWatch-L227.txt" => {
            // Listed (the API server's order: by name), then watched: the same two, an
            // unchanged copy, and a version with one more available replica.
            let initial = [list_blue_green(), list_canary()];
            let mut can2 = list_canary();
            can2["status"]["availableReplicas"] = json!(3);
            let updates = [list_canary(), list_blue_green(), list_canary(), can2];
            Some(
                printer::list_rollouts(&initial)
                    + &printer::list_rollout_updates(&initial, &updates),
            )
        }
        _ => None,
    }
}

#[test]
fn argo_cli_goldens() {
    let Some(corpus) = corpus_dir() else {
        println!("SKIPPED: the Argo Rollouts corpus is absent (set WEIR_ARGO_COMPAT_DIR)");
        return;
    };
    let dir = corpus.join("cli-golden");
    let testdata = dir.join("testdata");
    let mut golden_files: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cli-golden: {e}"))
        .map(|e| {
            e.unwrap_or_else(|e| panic!("dir entry: {e}"))
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".txt"))
        .collect();
    golden_files.sort();

    let mut matched = Vec::new();
    let mut failed = Vec::new();
    let mut check = |name: &str, ok: bool, detail: String| {
        if ok {
            matched.push(name.to_owned());
        } else {
            failed.push(format!("{name}:\n{detail}"));
        }
    };

    for case in cases() {
        let expected = strip_trailing_spaces(&golden_body(&dir.join(case.golden)));
        let actual = strip_trailing_spaces(&render(&case, &testdata));
        check(
            case.golden,
            actual == expected,
            format!("--- expected\n{expected}--- actual\n{actual}"),
        );
    }

    // One expected text stored in two parts.
    let (first, second) = (
        "get-TestGetInvalidRollout-L503.txt",
        "get-TestGetInvalidRollout-L507.txt",
    );
    let invalid = Case {
        golden: first,
        folder: "rollout-invalid",
        command: Command::GetRollout(0),
        deadline_in: None,
    };
    let actual = strip_trailing_spaces(&render(&invalid, &testdata));
    let head = golden_body(&dir.join(first));
    let tail = strip_trailing_spaces(&golden_body(&dir.join(second)));
    let middle = actual
        .strip_prefix(head.as_str())
        .and_then(|rest| rest.strip_suffix(tail.as_str()));
    let detail = format!("--- actual\n{actual}");
    check(first, actual.starts_with(head.as_str()), detail.clone());
    check(
        second,
        middle.is_some_and(|m| m.ends_with('\n') && !m[..m.len() - 1].contains('\n')),
        detail,
    );

    for golden in golden_files.iter().filter(|g| g.starts_with("list-")) {
        let expected = golden_body(&dir.join(golden));
        let Some(actual) = render_list(golden) else {
            check(golden, false, "no rendering for this golden".into());
            continue;
        };
        check(
            golden,
            actual == expected,
            format!("--- expected\n{expected:?}\n--- actual\n{actual:?}"),
        );
    }

    // Every golden file is accounted for.
    for golden in &golden_files {
        let seen =
            matched.contains(golden) || failed.iter().any(|f| f.starts_with(golden.as_str()));
        assert!(seen, "golden file {golden} has no case");
    }
    println!(
        "argo cli goldens: {} matching / {} total",
        matched.len(),
        golden_files.len()
    );
    for f in &failed {
        println!("MISMATCH {f}");
    }
    assert_eq!(
        golden_files.len(),
        GOLDEN_FILES,
        "golden files in the corpus"
    );
    assert_eq!(matched.len(), MATCHED, "golden files matched");
}

/// weir's own small fixture, compared byte for byte (trailing spaces included): a basic canary at
/// its second step with a stable and a canary ReplicaSet, a crash-looping canary pod, an old
/// scaled-down revision and a step analysis run with a Job measurement.
fn own_fixture() -> Vec<Value> {
    let created = "2026-02-27T12:00:00Z";
    let owner = |kind: &str, name: &str, uid: &str| json!([{"apiVersion": "argoproj.io/v1alpha1", "kind": kind, "name": name, "uid": uid}]);
    let rs = |hash: &str, revision: &str, replicas: i64, available: i64, image: &str| {
        json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {
                "name": format!("web-{hash}"), "namespace": "shop", "uid": format!("rs-{hash}"),
                "creationTimestamp": created, "generation": 1,
                "labels": {"rollouts-pod-template-hash": hash},
                "annotations": {"rollout.argoproj.io/revision": revision},
                "ownerReferences": owner("Rollout", "web", "ro-1"),
            },
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "web", "image": image}
            ]}}},
            "status": {"observedGeneration": 1, "replicas": replicas,
                       "availableReplicas": available, "readyReplicas": available}
        })
    };
    let pod = |name: &str, hash: &str, state: Value, ready: bool, restarts: i64| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": "shop", "uid": format!("pod-{name}"),
                "creationTimestamp": "2026-03-01T11:58:00Z",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                     "name": format!("web-{hash}"), "uid": format!("rs-{hash}")}],
            },
            "spec": {"containers": [{"name": "web", "image": "x"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "web", "ready": ready, "restartCount": restarts, "state": state}
            ]}
        })
    };
    vec![
        json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": "web", "namespace": "shop", "uid": "ro-1",
                         "creationTimestamp": created, "generation": 3},
            "spec": {"replicas": 4, "strategy": {"canary": {"steps": [
                {"setWeight": 25}, {"analysis": {"templates": [{"templateName": "smoke"}]}},
                {"setWeight": 50}
            ]}}},
            "status": {
                "observedGeneration": "3", "phase": "Progressing",
                "message": "more replicas need to be updated",
                "currentStepIndex": 1, "stableRS": "aaa", "currentPodHash": "bbb",
                "replicas": 4, "updatedReplicas": 1, "readyReplicas": 3, "availableReplicas": 3
            }
        }),
        rs("aaa", "2", 3, 3, "shop/web:1.0"),
        rs("bbb", "3", 1, 0, "shop/web:1.1"),
        rs("old", "1", 0, 0, "shop/web:0.9"),
        pod("web-aaa-x1", "aaa", json!({"running": {}}), true, 0),
        pod("web-aaa-x2", "aaa", json!({"running": {}}), true, 2),
        pod(
            "web-bbb-y1",
            "bbb",
            json!({"waiting": {"reason": "CrashLoopBackOff"}}),
            false,
            5,
        ),
        json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisRun",
            "metadata": {
                "name": "web-bbb-3-1", "namespace": "shop", "uid": "ar-1",
                "creationTimestamp": "2026-03-01T11:59:00Z",
                "annotations": {"rollout.argoproj.io/revision": "3"},
                "ownerReferences": owner("Rollout", "web", "ro-1"),
            },
            "status": {"phase": "Running", "metricResults": [{
                "name": "smoke", "successful": 1, "error": 1,
                "measurements": [
                    {"phase": "Successful", "startedAt": "2026-03-01T11:59:00Z",
                     "metadata": {"job-name": "web-bbb-3-1.smoke.1"}},
                    {"phase": "Running", "startedAt": "2026-03-01T11:59:50Z",
                     "metadata": {"job-name": "web-bbb-3-1.smoke.2"}}
                ]
            }]}
        }),
    ]
}

#[test]
fn own_fixture_renders_as_the_plugin_does() {
    let docs = own_fixture();
    let objects = Objects::from_documents(&docs);
    let options = Options {
        now: now(),
        color: false,
    };
    let out = printer::get_rollout(&docs[0], &objects, &options);
    let expected = concat!(
        "Name:            web\n",
        "Namespace:       shop\n",
        "Status:          ◌ Progressing\n",
        "Message:         more replicas need to be updated\n",
        "Strategy:        Canary\n",
        "  Step:          1/3\n",
        "  SetWeight:     25\n",
        "  ActualWeight:  0\n",
        "Images:          shop/web:1.0 (stable)\n",
        "                 shop/web:1.1 (canary)\n",
        "Replicas:\n",
        "  Desired:       4\n",
        "  Current:       4\n",
        "  Updated:       1\n",
        "  Ready:         3\n",
        "  Available:     3\n",
        "\n",
        "NAME                            KIND         STATUS              AGE  INFO\n",
        "⟳ web                           Rollout      ◌ Progressing       2d   \n",
        "├──# revision:3                                                       \n",
        "│  ├──⧉ web-bbb                 ReplicaSet   ◌ Progressing       2d   canary\n",
        "│  │  └──□ web-bbb-y1           Pod          ✖ CrashLoopBackOff  2m   ready:0/1,restarts:5\n",
        "│  └──α web-bbb-3-1             AnalysisRun  ◌ Running           60s  ✔ 1,⚠ 1\n",
        "│     ├──⊞ web-bbb-3-1.smoke.1  Job          ✔ Successful        60s  \n",
        "│     └──⊞ web-bbb-3-1.smoke.2  Job          ◌ Running           10s  \n",
        "├──# revision:2                                                       \n",
        "│  └──⧉ web-aaa                 ReplicaSet   ✔ Healthy           2d   stable\n",
        "│     ├──□ web-aaa-x1           Pod          ✔ Running           2m   ready:1/1\n",
        "│     └──□ web-aaa-x2           Pod          ✔ Running           2m   ready:1/1,restarts:2\n",
        "└──# revision:1                                                       \n",
        "   └──⧉ web-old                 ReplicaSet   • ScaledDown        2d   \n",
    );
    assert_eq!(out, expected);
}

/// With colours on, the text is the same once the colour codes are removed: they take no width
/// in the tree's columns.
#[test]
fn colours_change_no_alignment() {
    let docs = own_fixture();
    let objects = Objects::from_documents(&docs);
    let plain = printer::get_rollout(
        &docs[0],
        &objects,
        &Options {
            now: now(),
            color: false,
        },
    );
    let colored = printer::get_rollout(
        &docs[0],
        &objects,
        &Options {
            now: now(),
            color: true,
        },
    );
    assert!(colored.contains("\x1b[32m✔\x1b[0m Healthy"));
    assert!(colored.contains("\x1b[33mweb-bbb\x1b[0m"));
    let mut stripped = String::new();
    let mut rest = colored.as_str();
    while let Some(start) = rest.find("\x1b[") {
        stripped.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('m')
            .unwrap_or_else(|| panic!("an unterminated colour code"));
        rest = &after[end + 1..];
    }
    stripped.push_str(rest);
    assert_eq!(stripped, plain);
}
