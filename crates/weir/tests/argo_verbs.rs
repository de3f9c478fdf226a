//! `weir argo VERB`: the plugin's verbs (`kubectl argo rollouts promote|abort|retry|restart|undo|
//! pause`, and weir's `resume`) and `get rollout`/`list rollouts`, run as the real binary
//! against the testkit's in-memory API server with Argo's CRDs installed. Each verb's effect on
//! the stored Rollout is compared with what the plugin's patch does to it; nothing runs the
//! Argo controller, so what the tests read is exactly what the verb wrote.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use weir_testkit::argo_cluster::{API_VERSION, argo_crds};
use weir_testkit::fixtures::{TempDb, runtime};
use weir_testkit::kube_server::KubeServer;

const NAMESPACE: &str = "shop";

/// The API server with Argo's CRDs and namespace `shop`, and a kubeconfig that reaches it (its
/// context's namespace is `default`).
struct Argo {
    server: KubeServer,
    kubeconfig: PathBuf,
    _dir: TempDb,
    // Last: the server's tasks run on it.
    _runtime: tokio::runtime::Runtime,
}

impl Argo {
    fn new() -> Argo {
        Argo::with_crds(argo_crds())
    }

    /// The server with `crds` (Argo's, or some of them changed) instead.
    fn with_crds(crds: Vec<Value>) -> Argo {
        let runtime = runtime();
        let server = runtime.block_on(KubeServer::start());
        let dir = TempDb::new();
        let kubeconfig = server.kubeconfig(dir.dir.path());
        server
            .create(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
            )
            .unwrap();
        for crd in crds {
            server.create(crd).unwrap();
        }
        Argo {
            server,
            kubeconfig,
            _dir: dir,
            _runtime: runtime,
        }
    }

    /// `weir argo ARGS...` with the kubeconfig.
    fn weir(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("argo")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `weir argo ARGS... -n shop`, which must succeed; its standard output.
    fn ok(&self, args: &[&str]) -> String {
        let mut all = args.to_vec();
        all.extend(["-n", NAMESPACE]);
        let output = self.weir(&all);
        assert!(
            output.status.success(),
            "weir argo {args:?}: {}\n{}",
            text(&output.stderr),
            text(&output.stdout)
        );
        text(&output.stdout)
    }

    /// Creates `object` in `shop`, then writes its `status` through the status subresource
    /// (a create drops it, as the real server does); returns the stored object.
    fn create(&self, mut object: Value) -> Value {
        object["metadata"]["namespace"] = json!(NAMESPACE);
        let status = object.as_object_mut().unwrap().remove("status");
        let created = self.server.create(object).unwrap();
        let Some(status) = status else {
            return created;
        };
        let api_version = created["apiVersion"].as_str().unwrap();
        let kind = created["kind"].as_str().unwrap();
        let name = created["metadata"]["name"].as_str().unwrap();
        let patch = json!({ "status": status });
        self.server
            .merge_patch(api_version, kind, NAMESPACE, name, &patch, true)
            .or_else(|_| {
                self.server
                    .merge_patch(api_version, kind, NAMESPACE, name, &patch, false)
            })
            .unwrap()
    }

    /// Rollout `name` as stored.
    fn rollout(&self, name: &str) -> Value {
        self.server
            .get(API_VERSION, "Rollout", NAMESPACE, name)
            .unwrap()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Pod template of `image`, with the labels a Rollout's template has (and `hash`'s label when
/// given, as the controller adds it to a ReplicaSet's template).
fn template(image: &str, hash: Option<&str>) -> Value {
    let mut labels = json!({"app": "web"});
    if let Some(hash) = hash {
        labels["rollouts-pod-template-hash"] = json!(hash);
    }
    json!({
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "web", "image": image}]}
    })
}

/// Canary Rollout `web` at `shop/web:3` with steps setWeight 20, pause, analysis, setWeight 50,
/// and `status`.
fn canary(paused: bool, status: Value) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "Rollout",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 4,
            "paused": paused,
            "selector": {"matchLabels": {"app": "web"}},
            "template": template("shop/web:3", None),
            "strategy": {"canary": {"steps": [
                {"setWeight": 20},
                {"pause": {}},
                {"analysis": {"templates": [{"templateName": "smoke"}]}},
                {"setWeight": 50}
            ]}}
        },
        "status": status
    })
}

/// A status paused at step `index` by the controller (the CanaryPauseStep of step 1), the new
/// pods `bbb` not yet stable.
fn paused_at_pause_step() -> Value {
    json!({
        "currentStepIndex": 1,
        "currentPodHash": "bbb",
        "stableRS": "aaa",
        "controllerPause": true,
        "pauseConditions": [{"reason": "CanaryPauseStep", "startTime": "2026-11-28T10:00:00Z"}],
        "phase": "Paused",
        "message": "CanaryPauseStep"
    })
}

/// `status` with the top-level fields of `changes` set (null: removed), as a merge patch does.
fn patched(status: &Value, changes: Value) -> Value {
    let mut status = status.clone();
    for (key, value) in changes.as_object().unwrap() {
        if value.is_null() {
            status.as_object_mut().unwrap().remove(key);
        } else {
            status[key] = value.clone();
        }
    }
    status
}

#[test]
fn promote_at_a_pause_step_clears_its_pause_conditions_only() {
    let argo = Argo::new();
    let before = argo.create(canary(false, paused_at_pause_step()));

    let out = argo.ok(&["promote", "web"]);

    assert_eq!(out, "rollout 'web' promoted\n");
    let after = argo.rollout("web");
    // `{"status":{"pauseConditions":null}}` and nothing else: the controller sees
    // controllerPause without a condition and completes the step itself.
    assert_eq!(
        after["status"],
        patched(&before["status"], json!({"pauseConditions": null}))
    );
    assert_eq!(after["spec"], before["spec"]);
}

#[test]
fn promote_during_an_analysis_step_skips_it_and_unpauses() {
    let argo = Argo::new();
    let status = json!({"currentStepIndex": 2, "currentPodHash": "bbb", "stableRS": "aaa"});
    let before = argo.create(canary(true, status));

    let out = argo.ok(&["promote", "web"]);

    assert_eq!(out, "rollout 'web' promoted\n");
    let after = argo.rollout("web");
    assert_eq!(
        after["status"],
        patched(&before["status"], json!({"currentStepIndex": 3}))
    );
    assert_eq!(after["spec"]["paused"], json!(false));
}

#[test]
fn promote_after_an_inconclusive_analysis_passes_the_step() {
    let argo = Argo::new();
    let status = json!({
        "currentStepIndex": 2, "currentPodHash": "bbb", "stableRS": "aaa",
        "controllerPause": true,
        "pauseConditions": [{"reason": "InconclusiveAnalysisRun", "startTime": "2026-11-28T10:00:00Z"}],
        "canary": {"currentStepAnalysisRunStatus": {"name": "web-bbb-2-2", "status": "Inconclusive"}}
    });
    let before = argo.create(canary(false, status));

    argo.ok(&["promote", "web"]);

    assert_eq!(
        argo.rollout("web")["status"],
        patched(
            &before["status"],
            json!({"pauseConditions": null, "controllerPause": false, "currentStepIndex": 3})
        )
    );
}

#[test]
fn promote_full_sets_promote_full_and_unpauses() {
    let argo = Argo::new();
    let before = argo.create(canary(true, paused_at_pause_step()));

    let out = argo.ok(&["promote", "web", "--full"]);

    assert_eq!(out, "rollout 'web' fully promoted\n");
    let after = argo.rollout("web");
    assert_eq!(
        after["status"],
        patched(&before["status"], json!({"promoteFull": true}))
    );
    assert_eq!(after["spec"]["paused"], json!(false));

    // Already promoted (the current pods are the stable ones): nothing to set.
    let argo = Argo::new();
    let status = json!({"currentStepIndex": 4, "currentPodHash": "aaa", "stableRS": "aaa"});
    let before = argo.create(canary(false, status));
    argo.ok(&["promote", "web", "--full"]);
    assert_eq!(argo.rollout("web")["status"], before["status"]);
}

#[test]
fn abort_sets_status_abort_and_retry_clears_it() {
    let argo = Argo::new();
    let before = argo.create(canary(false, paused_at_pause_step()));

    assert_eq!(argo.ok(&["abort", "web"]), "rollout 'web' aborted\n");
    let aborted = argo.rollout("web");
    assert_eq!(
        aborted["status"],
        patched(&before["status"], json!({"abort": true}))
    );
    assert_eq!(aborted["spec"], before["spec"]);
    let counts = argo.server.request_counts();
    assert_eq!(
        counts.get("patch rollouts.argoproj.io/status"),
        Some(&1),
        "{counts:?}"
    );

    // The plugin's own form, `retry rollout NAME`.
    assert_eq!(
        argo.ok(&["retry", "rollout", "web"]),
        "rollout 'web' retried\n"
    );
    assert_eq!(
        argo.rollout("web")["status"],
        patched(&before["status"], json!({"abort": false}))
    );
    argo.ok(&["abort", "web"]);
    assert_eq!(argo.ok(&["retry", "web"]), "rollout 'web' retried\n");
    assert_eq!(argo.rollout("web")["status"]["abort"], json!(false));
}

#[test]
fn without_a_status_subresource_status_patches_go_to_the_rollout() {
    // A Rollout CRD of before Argo 0.10, without the status subresource: the server answers
    // 404 on `/status` and the plugin sends its combined patch to the Rollout instead.
    let crds = argo_crds()
        .into_iter()
        .map(|mut crd| {
            if crd["metadata"]["name"] == "rollouts.argoproj.io" {
                crd["spec"]["versions"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("subresources");
            }
            crd
        })
        .collect();
    let argo = Argo::with_crds(crds);
    let before = argo.create(canary(true, paused_at_pause_step()));
    assert_eq!(before["status"], paused_at_pause_step());

    assert_eq!(argo.ok(&["abort", "web"]), "rollout 'web' aborted\n");
    assert_eq!(
        argo.rollout("web")["status"],
        patched(&before["status"], json!({"abort": true}))
    );

    assert_eq!(argo.ok(&["promote", "web"]), "rollout 'web' promoted\n");
    let promoted = argo.rollout("web");
    assert_eq!(
        promoted["status"],
        patched(
            &before["status"],
            json!({"abort": true, "pauseConditions": null})
        )
    );
    assert_eq!(promoted["spec"]["paused"], json!(false));
    let counts = argo.server.request_counts();
    assert!(
        counts
            .get("patch rollouts.argoproj.io")
            .copied()
            .unwrap_or(0)
            >= 2,
        "{counts:?}"
    );
}

/// `spec.restartAt` as a timestamp, checked to be RFC 3339 UTC to the second as the plugin
/// writes it.
fn restart_at(rollout: &Value) -> jiff::Timestamp {
    let at = rollout["spec"]["restartAt"].as_str().unwrap();
    assert!(
        at.len() == 20 && at.ends_with('Z'),
        "restartAt {at:?} is not RFC 3339 UTC to the second"
    );
    at.parse().unwrap()
}

#[test]
fn restart_sets_restart_at_to_now_or_later() {
    let argo = Argo::new();
    let before = argo.create(canary(false, paused_at_pause_step()));

    let started = jiff::Timestamp::now();
    assert_eq!(
        argo.ok(&["restart", "web"]),
        "rollout 'web' restarts in 0s\n"
    );
    let ended = jiff::Timestamp::now();
    let after = argo.rollout("web");
    let at = restart_at(&after);
    // Truncated to the second: within the minute, not before the second the command started.
    assert!(
        at >= started - jiff::SignedDuration::from_secs(1) && at <= ended,
        "restartAt {at} is not between {started} and {ended}"
    );
    assert!(ended - jiff::SignedDuration::from_secs(60) < at);
    assert_eq!(after["status"], before["status"]);

    let started = jiff::Timestamp::now();
    assert_eq!(
        argo.ok(&["restart", "web", "--in", "30s"]),
        "rollout 'web' restarts in 30s\n"
    );
    let ended = jiff::Timestamp::now();
    let at = restart_at(&argo.rollout("web"));
    let delay = jiff::SignedDuration::from_secs(30);
    assert!(
        at >= started + delay - jiff::SignedDuration::from_secs(1) && at <= ended + delay,
        "restartAt {at} is not 30s after the command ({started}..{ended})"
    );

    let refused = argo.weir(&["restart", "web", "--in", "soon", "-n", NAMESPACE]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
}

/// ReplicaSet `web-HASH` of revision `revision` running `image`, controlled by `owner`.
fn replica_set(owner: &Value, hash: &str, revision: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": format!("web-{hash}"),
            "labels": {"app": "web", "rollouts-pod-template-hash": hash},
            "annotations": {"rollout.argoproj.io/revision": revision},
            "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": "Rollout",
                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web", "rollouts-pod-template-hash": hash}},
            "template": template(image, Some(hash))
        },
        "status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1,
                   "availableReplicas": 1}
    })
}

#[test]
fn undo_puts_back_an_earlier_revisions_template_without_its_hash_label() {
    let argo = Argo::new();
    let rollout = argo.create(canary(false, paused_at_pause_step()));
    argo.create(replica_set(&rollout, "aaa", "1", "shop/web:1"));
    argo.create(replica_set(&rollout, "bbb", "2", "shop/web:2"));
    argo.create(replica_set(&rollout, "ccc", "3", "shop/web:3"));
    // Another Rollout's ReplicaSet with the same labels and a newer revision: not this one's.
    let other = argo.create(json!({
        "apiVersion": API_VERSION, "kind": "Rollout", "metadata": {"name": "other"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template("x", None),
                 "strategy": {"canary": {}}}
    }));
    let mut foreign = replica_set(&other, "zzz", "9", "shop/other:9");
    foreign["metadata"]["name"] = json!("other-zzz");
    argo.create(foreign);

    assert_eq!(argo.ok(&["undo", "web"]), "rollout 'web' undo\n");
    let after = argo.rollout("web");
    assert_eq!(after["spec"]["template"], template("shop/web:2", None));
    assert_eq!(after["status"], rollout["status"]);

    assert_eq!(
        argo.ok(&["undo", "web", "--to-revision", "1"]),
        "rollout 'web' undo\n"
    );
    assert_eq!(
        argo.rollout("web")["spec"]["template"],
        template("shop/web:1", None)
    );

    // Already at revision 1's template: nothing is patched.
    let patches = argo
        .server
        .request_counts()
        .get("patch rollouts.argoproj.io")
        .copied();
    let out = argo.ok(&["undo", "web", "--to-revision", "1"]);
    assert!(out.starts_with("skipped rollback"), "{out}");
    assert_eq!(
        argo.server
            .request_counts()
            .get("patch rollouts.argoproj.io")
            .copied(),
        patches
    );

    let missing = argo.weir(&["undo", "web", "--to-revision", "7", "-n", NAMESPACE]);
    assert!(!missing.status.success());
    assert!(
        text(&missing.stderr).contains("unable to find specified revision 7"),
        "{}",
        text(&missing.stderr)
    );
}

#[test]
fn pause_sets_spec_paused_and_resume_clears_it_only() {
    let argo = Argo::new();
    let before = argo.create(canary(false, paused_at_pause_step()));

    assert_eq!(argo.ok(&["pause", "web"]), "rollout 'web' paused\n");
    let paused = argo.rollout("web");
    assert_eq!(paused["spec"]["paused"], json!(true));
    assert_eq!(paused["status"], before["status"]);

    assert_eq!(argo.ok(&["resume", "web"]), "rollout 'web' resumed\n");
    let resumed = argo.rollout("web");
    assert_eq!(resumed["spec"], before["spec"]);
    // Unlike promote, the pause step's condition stays.
    assert_eq!(resumed["status"], before["status"]);
}

#[test]
fn an_unknown_rollout_fails_naming_it_and_its_namespace() {
    let argo = Argo::new();
    argo.create(canary(false, paused_at_pause_step()));
    let verbs: [(&str, &[&str]); 10] = [
        ("ghost", &["promote", "ghost"]),
        ("ghost", &["promote", "ghost", "--full"]),
        ("ghost", &["abort", "ghost"]),
        ("ghost", &["retry", "ghost"]),
        ("ghost", &["restart", "ghost", "--in", "5m"]),
        ("ghost", &["undo", "ghost"]),
        ("ghost", &["pause", "ghost"]),
        ("ghost", &["resume", "ghost"]),
        ("ghost", &["get", "rollout", "ghost"]),
        ("web", &["get", "rollout", "web"]),
    ];
    for (name, args) in verbs {
        // No -n: the kubeconfig context's namespace, `default`, where `web` is not either.
        let output = argo.weir(args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("\"{name}\"")) && stderr.contains("\"default\""),
            "{args:?}: {stderr}"
        );
        assert_eq!(text(&output.stdout), "", "{args:?}");
    }
    let output = argo.weir(&["abort", "ghost", "-n", NAMESPACE]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("\"shop\""),
        "{}",
        text(&output.stderr)
    );
    // Nothing was written to the Rollout that exists.
    assert_eq!(argo.server.writes("rollouts.argoproj.io"), 0);
}

#[test]
fn get_rollout_prints_the_tree_from_the_cluster() {
    let argo = Argo::new();
    let status = json!({
        "observedGeneration": "1", "phase": "Progressing",
        "message": "more replicas need to be updated",
        "currentStepIndex": 2, "stableRS": "aaa", "currentPodHash": "bbb",
        "replicas": 4, "updatedReplicas": 1, "readyReplicas": 4, "availableReplicas": 4
    });
    let rollout = argo.create(canary(false, status));
    let mut stable = replica_set(&rollout, "aaa", "1", "shop/web:1");
    stable["spec"]["replicas"] = json!(3);
    stable["status"] =
        json!({"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "availableReplicas": 3});
    let stable = argo.create(stable);
    argo.create(replica_set(&rollout, "bbb", "2", "shop/web:3"));
    argo.create(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-aaa-x1", "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-aaa",
            "uid": stable["metadata"]["uid"], "controller": true}]},
        "spec": {"containers": [{"name": "web", "image": "shop/web:1"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "web", "ready": true, "restartCount": 0, "state": {"running": {}}}]}
    }));
    argo.create(json!({
        "apiVersion": API_VERSION, "kind": "AnalysisRun",
        "metadata": {
            "name": "web-bbb-2-2",
            "annotations": {"rollout.argoproj.io/revision": "2"},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "Rollout", "name": "web",
                "uid": rollout["metadata"]["uid"], "controller": true}]
        },
        "spec": {"metrics": [{"name": "smoke", "provider": {"web": {"url": "http://x"}}}]},
        "status": {"phase": "Running", "metricResults": [{
            "name": "smoke", "successful": 1,
            "measurements": [{"phase": "Successful", "startedAt": "2026-11-28T10:00:00Z"}]
        }]}
    }));

    let out = argo.ok(&["get", "rollout", "web", "--no-color"]);
    let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
    for expected in [
        "Name:            web",
        "Namespace:       shop",
        "Status:          ◌ Progressing",
        "Message:         more replicas need to be updated",
        "Strategy:        Canary",
        "  Step:          2/4",
        "Images:          shop/web:1 (stable)",
        "                 shop/web:3 (canary)",
    ] {
        assert!(lines.contains(&expected), "no line {expected:?} in\n{out}");
    }
    // The tree: the Rollout, each revision with its ReplicaSet, the pod under the stable one,
    // the analysis run under revision 2 with its counts.
    let tree: Vec<String> = lines
        .iter()
        .skip_while(|line| !line.starts_with("NAME"))
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let find = |start: &str| {
        tree.iter()
            .position(|line| line.starts_with(start))
            .unwrap_or_else(|| panic!("no tree line starting {start:?} in\n{out}"))
    };
    assert!(
        tree[find("⟳ web Rollout")].contains("◌ Progressing"),
        "{out}"
    );
    let revision_2 = find("├──# revision:2");
    let canary_rs = find("│ ├──⧉ web-bbb ReplicaSet");
    let analysis = find("│ └──α web-bbb-2-2 AnalysisRun ◌ Running");
    let revision_1 = find("└──# revision:1");
    let stable_rs = find("└──⧉ web-aaa ReplicaSet ✔ Healthy");
    let pod = find("└──□ web-aaa-x1 Pod ✔ Running");
    assert!(tree[canary_rs].ends_with("canary"), "{out}");
    assert!(tree[analysis].ends_with("✔ 1"), "{out}");
    assert!(tree[stable_rs].ends_with("stable"), "{out}");
    assert!(tree[pod].ends_with("ready:1/1"), "{out}");
    assert!(revision_2 < canary_rs && canary_rs < analysis && analysis < revision_1);
    assert!(revision_1 < stable_rs && stable_rs < pod);

    let listed = argo.ok(&["list", "rollouts"]);
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "NAME",
            "STRATEGY",
            "STATUS",
            "STEP",
            "SET-WEIGHT",
            "READY",
            "DESIRED",
            "UP-TO-DATE",
            "AVAILABLE"
        ]
    );
    assert_eq!(rows.len(), 2, "{listed}");
    assert_eq!(rows[1][..3], ["web", "Canary", "Progressing"], "{listed}");

    // An empty namespace lists nothing, and says so on stderr.
    let empty = argo.weir(&["list", "rollouts"]);
    assert!(empty.status.success());
    assert_eq!(text(&empty.stdout), "");
    assert_eq!(text(&empty.stderr), "No resources found.\n");
}

#[test]
fn kubeconfig_and_context_flags_pick_the_cluster() {
    let argo = Argo::new();
    argo.create(canary(false, paused_at_pause_step()));
    let home = TempDb::new();
    // No KUBECONFIG and an empty home: only the flags say where the cluster is.
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("argo")
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", home.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let kubeconfig = argo.kubeconfig.display().to_string();
    let listed = run(&[
        "--kubeconfig",
        &kubeconfig,
        "--context",
        "weir-test",
        "list",
        "rollouts",
        "-n",
        NAMESPACE,
    ]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert!(
        text(&listed.stdout)
            .lines()
            .nth(1)
            .unwrap_or("")
            .starts_with("web ")
    );

    let unknown = run(&[
        "--kubeconfig",
        &kubeconfig,
        "--context",
        "nope",
        "pause",
        "web",
    ]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        text(&unknown.stderr).contains("\"nope\""),
        "{}",
        text(&unknown.stderr)
    );
    assert_eq!(argo.server.writes("rollouts.argoproj.io"), 0);
}
