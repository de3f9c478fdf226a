//! `weir operator` end to end: the real binary against the testkit's in-memory Kubernetes API
//! server (the accepted stand-in for kube-apiserver), driven with the real `kubectl` as a user
//! would. Nothing runs pods here, so the testkit plays the Deployment controller: it reports
//! every Deployment's replicas as updated and available once its spec changes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{Value, json};
use weir_testkit::kube_cluster::{
    CREATED_FOR_PODINFO, Cluster, NAMESPACE, canary_weight, image_of, replicas_of, rollout_status,
    rollout_yaml, text,
};
use weir_testkit::kube_server::KubeServer;
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;

/// A cluster with a rollout of `podinfo` with `plan` applied with kubectl and `weir operator`
/// started; returns once the rollout is initialised (the primary serves with its autoscaler, the
/// Services exist, the target waits at zero).
fn set_up(plan: &str) -> (Cluster, Weir) {
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    cluster.apply(&rollout_yaml(plan));
    let operator = cluster.start_operator(&[]);
    cluster.wait_initialised();
    let server = &cluster.server;
    // Initialisation: the primary copy serves, the Services exist, the target waits at zero.
    wait_until("the primary, its Services and the target at zero", || {
        let primary = server.get("apps/v1", "Deployment", NAMESPACE, "podinfo-primary")?;
        let services: Vec<_> = ["podinfo", "podinfo-primary", "podinfo-canary"]
            .iter()
            .filter_map(|name| server.get("v1", "Service", NAMESPACE, name))
            .collect();
        (services.len() == 3 && replicas_of(server, "podinfo") == 0).then_some(primary)
    });
    assert_eq!(image_of(server, "podinfo-primary"), "podinfo:6.0.0");
    assert_eq!(replicas_of(server, "podinfo-primary"), 2);
    // The primary scales with its own copy of the target's autoscaler.
    let autoscaler = wait_until("the primary's autoscaler", || {
        server.get(
            "autoscaling/v2",
            "HorizontalPodAutoscaler",
            NAMESPACE,
            "podinfo-primary",
        )
    });
    assert_eq!(
        autoscaler["spec"]["scaleTargetRef"]["name"],
        "podinfo-primary"
    );
    assert_eq!(autoscaler["spec"]["maxReplicas"], 4);
    let apex = server.get("v1", "Service", NAMESPACE, "podinfo").unwrap();
    assert_eq!(apex["spec"]["selector"], json!({"app": "podinfo-primary"}));
    let initialized = wait_until("the rollout initialised", || {
        let status = rollout_status(server);
        (status["phase"] == "Initialized" || status["phase"] == "Succeeded").then_some(status)
    });
    assert!(initialized["run"].is_u64(), "{initialized:#}");
    (cluster, operator)
}

#[test]
fn a_new_pod_template_is_rolled_out_step_by_step_and_promoted() {
    let (cluster, operator) = set_up("{canary: {stepWeights: [10, 20, 30, 40, 50]}}");
    let server = &cluster.server;
    let runs_before = rollout_status(server)["run"].as_u64().unwrap_or(0);

    // A replicas-only change is not a new revision; the image change after it is one: the run
    // count goes up by exactly one.
    server
        .merge_patch(
            "apps/v1",
            "Deployment",
            NAMESPACE,
            "podinfo",
            &json!({"spec": {"replicas": 3}}),
            false,
        )
        .unwrap();
    cluster.set_image("podinfo:6.0.1");

    let mut weights = BTreeSet::new();
    let finished = wait_until("the run to promote the new image", || {
        if let Some(weight) = canary_weight(server) {
            weights.insert(weight);
        }
        let status = rollout_status(server);
        (status["phase"] == "Succeeded" && status["run"].as_u64() == Some(runs_before + 1))
            .then_some(status)
    });
    assert_eq!(
        finished["run"].as_u64(),
        Some(runs_before + 1),
        "{finished:#}"
    );
    assert_eq!(image_of(server, "podinfo-primary"), "podinfo:6.0.1");
    // Every committed step of the run, in order, from the history the operator serves...
    let history = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "history", "podinfo", "-n", NAMESPACE, "--output", "json", "--server",
        ])
        .arg(operator.url("api"))
        .output()
        .unwrap();
    let steps: Vec<i64> = text(&history.stdout)
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["run"].as_u64() == Some(runs_before + 1))
        .filter_map(|event| event["canaryWeight"].as_i64())
        .filter(|weight| *weight > 0)
        .collect();
    let mut distinct = steps.clone();
    distinct.dedup();
    assert_eq!(distinct, [10, 20, 30, 40, 50], "{}", text(&history.stdout));
    // ...each applied to the VirtualService (a write per step, plus set-up and the return to
    // the primary).
    let route_writes = server.writes("virtualservices.networking.istio.io");
    assert!(route_writes >= 7, "{route_writes} VirtualService writes");
    wait_until(
        "all traffic back on the primary and the target at zero",
        || (canary_weight(server) == Some(0) && replicas_of(server, "podinfo") == 0).then_some(()),
    );
    let condition = finished["conditions"][0].clone();
    assert_eq!(condition["type"], "Promoted");
    assert_eq!(condition["status"], "True");

    // Each history event is also a Kubernetes Event on the rollout.
    let history_reasons: BTreeSet<String> = text(&history.stdout)
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["reason"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let event_reasons = wait_until("an Event for every history event", || {
        let reasons: BTreeSet<String> = server
            .list("v1", "Event", NAMESPACE)
            .iter()
            .filter(|event| event["involvedObject"]["name"] == "podinfo")
            .filter_map(|event| event["reason"].as_str().map(str::to_string))
            .collect();
        history_reasons.is_subset(&reasons).then_some(reasons)
    });
    let described = cluster.kubectl(&["describe", "rollout.weir.dev/podinfo", "-n", NAMESPACE]);
    let described = text(&described.stdout);
    assert!(described.contains("weir-operator"), "{described}");
    assert!(described.contains("Succeeded"), "{described}");

    // As a user checks it.
    let waited = cluster.kubectl(&[
        "wait",
        "--for=condition=Promoted",
        "-n",
        NAMESPACE,
        "rollout.weir.dev/podinfo",
        "--timeout=60s",
    ]);
    assert!(waited.status.success(), "{}", text(&waited.stderr));
    assert!(
        text(&waited.stdout).contains("condition met"),
        "{}",
        text(&waited.stdout)
    );
    let listed = cluster.kubectl(&["get", "rollouts.weir.dev", "-n", NAMESPACE]);
    let listed = text(&listed.stdout);
    assert!(listed.starts_with("NAME"), "{listed}");
    assert!(
        listed.contains("PHASE") && listed.contains("WEIGHT"),
        "{listed}"
    );
    assert!(
        listed.lines().nth(1).unwrap().contains("Succeeded"),
        "{listed}"
    );
    println!(
        "events: {event_reasons:?}; steps committed: {distinct:?}; canary weights seen on the VirtualService: {weights:?}; \
         VirtualService writes: {route_writes}; all writes: {:?}",
        server.write_counts()
    );
}

#[test]
fn an_aborted_run_returns_all_traffic_to_the_primary_and_scales_the_canary_down() {
    let (cluster, operator) = set_up("{canary: {steps: [{weight: 20, pause: {}}, {weight: 100}]}}");
    let server = &cluster.server;
    cluster.new_revision("2");
    wait_until("the run waiting at 20%", || {
        (canary_weight(server) == Some(20)
            && replicas_of(server, "podinfo") == 2
            && rollout_status(server)["waitingForResume"] == true)
            .then_some(())
    });

    let aborted = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["abort", "podinfo", "-n", NAMESPACE, "--server"])
        .arg(operator.url("api"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(aborted.status.success(), "{}", text(&aborted.stderr));

    let status = wait_until(
        "the rollback: all traffic on the primary, the canary at zero",
        || {
            let status = rollout_status(server);
            (status["phase"] == "Failed"
                && canary_weight(server) == Some(0)
                && replicas_of(server, "podinfo") == 0)
                .then_some(status)
        },
    );
    assert_eq!(status["conditions"][0]["type"], "Promoted");
    assert_eq!(status["conditions"][0]["status"], "False");
    // The primary never ran the aborted revision.
    let primary = server
        .get("apps/v1", "Deployment", NAMESPACE, "podinfo-primary")
        .unwrap();
    assert!(
        primary["spec"]["template"]["metadata"]["annotations"]["release"].is_null(),
        "{primary:#}"
    );
    let listed = text(
        &cluster
            .kubectl(&["get", "rollouts.weir.dev", "-n", NAMESPACE])
            .stdout,
    );
    assert!(
        listed.lines().nth(1).unwrap().contains("Failed"),
        "{listed}"
    );
}

#[test]
fn a_restarted_operator_resumes_the_run_at_its_committed_step() {
    let (cluster, mut operator) =
        set_up("{canary: {steps: [{weight: 20, pause: {}}, {weight: 60}]}}");
    let server = Arc::clone(&cluster.server);
    cluster.new_revision("2");
    let paused = wait_until("the run waiting at 20%", || {
        let status = rollout_status(&server);
        (canary_weight(&server) == Some(20) && status["waitingForResume"] == true).then_some(status)
    });
    let run = paused["run"].as_u64().unwrap();
    let events_before = cluster.history(&operator, "podinfo").len();

    // SIGKILL: the operator cleans up nothing. Its successor has no local state to read: what it
    // knows comes from the rollout's status in the cluster.
    operator.kill();
    operator = cluster.start_operator(&[]);
    let resumed_from = wait_until("the new operator to know the rollout", || {
        let listed = cluster.weir(&operator, &["get", "podinfo", "--output", "json"]);
        let listed: Value = serde_json::from_slice(&listed.stdout).ok()?;
        let rollout = if listed.is_array() {
            listed[0].clone()
        } else {
            listed
        };
        (rollout["status"]["run"].as_u64() == Some(run)).then_some(rollout)
    });
    assert_eq!(
        resumed_from["status"]["canaryWeight"], 20,
        "{resumed_from:#}"
    );
    assert_eq!(
        resumed_from["status"]["waitingForResume"], true,
        "{resumed_from:#}"
    );
    assert_eq!(
        cluster.history(&operator, "podinfo").len(),
        events_before,
        "the history survived the restart"
    );

    let resumed = cluster.weir(&operator, &["resume", "podinfo"]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    let finished = wait_until("the run to finish after the restart", || {
        let status = rollout_status(&server);
        (status["phase"] == "Succeeded" && status["run"].as_u64() == Some(run)).then_some(status)
    });
    assert_eq!(finished["run"].as_u64(), Some(run));
    // Each step of the run was taken once: the restart neither repeated nor skipped one.
    let steps: Vec<(String, i64)> = cluster
        .history(&operator, "podinfo")
        .iter()
        .filter(|event| event["run"].as_u64() == Some(run))
        .filter(|event| matches!(event["reason"].as_str(), Some("RunStarted" | "Advanced")))
        .map(|event| {
            (
                event["reason"].as_str().unwrap().to_string(),
                event["canaryWeight"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    println!("steps of run {run} across the restart: {steps:?}");
    let expected = [("RunStarted", 0), ("Advanced", 20), ("Advanced", 60)]
        .map(|(reason, weight)| (reason.to_string(), weight));
    assert_eq!(steps, expected);
}

#[test]
fn a_config_map_change_starts_a_run() {
    let (cluster, _operator) = set_up("{canary: {stepWeights: [50]}}");
    let server = &cluster.server;
    server
        .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "podinfo-config", "namespace": NAMESPACE},
            "data": {"color": "blue"}}))
        .unwrap();
    let succeeded = |run: u64| {
        move |server: &KubeServer| {
            let status = rollout_status(server);
            (status["phase"] == "Succeeded" && status["run"].as_u64() == Some(run))
                .then_some(status)
        }
    };
    // The pod template starts reading the ConfigMap: a new pod template, a first run.
    let runs_before = rollout_status(server)["run"].as_u64().unwrap_or(0);
    server
        .merge_patch(
            "apps/v1",
            "Deployment",
            NAMESPACE,
            "podinfo",
            &json!({"spec": {"template": {"spec": {"containers": [{"name": "podinfod", "image": "podinfo:6.0.0",
                "ports": [{"name": "http", "containerPort": 9898}],
                "envFrom": [{"configMapRef": {"name": "podinfo-config"}}]}]}}}}),
            false,
        )
        .unwrap();
    let check = succeeded(runs_before + 1);
    wait_until("the run that starts reading the ConfigMap", || {
        check(server)
    });
    let copy = server
        .get("v1", "ConfigMap", NAMESPACE, "podinfo-config-primary")
        .unwrap();
    assert_eq!(copy["data"], json!({"color": "blue"}));
    let primary = server
        .get("apps/v1", "Deployment", NAMESPACE, "podinfo-primary")
        .unwrap();
    assert_eq!(
        primary["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"],
        "podinfo-config-primary"
    );

    // Only the ConfigMap's content changes: a new revision all the same, run and promoted.
    server
        .merge_patch(
            "v1",
            "ConfigMap",
            NAMESPACE,
            "podinfo-config",
            &json!({"data": {"color": "red"}}),
            false,
        )
        .unwrap();
    let check = succeeded(runs_before + 2);
    let finished = wait_until("the run of the ConfigMap change", || check(server));
    assert_eq!(finished["conditions"][0]["status"], "True", "{finished:#}");
    let copy = server
        .get("v1", "ConfigMap", NAMESPACE, "podinfo-config-primary")
        .unwrap();
    assert_eq!(copy["data"], json!({"color": "red"}));
    assert_eq!(image_of(server, "podinfo-primary"), "podinfo:6.0.0");
    wait_until("the target back at zero", || {
        (replicas_of(server, "podinfo") == 0).then_some(())
    });
}

#[test]
fn deleting_a_rollout_with_revert_on_deletion_gives_the_application_back_to_its_deployment() {
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    cluster.apply(
        &rollout_yaml("{canary: {stepWeights: [50]}}")
            .replace("  analysis:", "  revertOnDeletion: true\n  analysis:"),
    );
    let _operator = cluster.start_operator(&[]);
    cluster.wait_initialised();
    let server = &cluster.server;
    wait_until("the operator's finalizer on the rollout", || {
        let rollout = server.get("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo")?;
        (rollout["metadata"]["finalizers"] == json!(["weir.dev/revert-on-deletion"])).then_some(())
    });

    // As a user deletes it: kubectl waits until the finalizer is gone.
    let started = std::time::Instant::now();
    let deleted = cluster.kubectl(&[
        "delete",
        "rollout.weir.dev/podinfo",
        "-n",
        NAMESPACE,
        "--timeout=90s",
    ]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let took = started.elapsed();
    assert!(
        server
            .get("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo")
            .is_none()
    );
    // The application serves from its own Deployment again, through its own Service...
    assert_eq!(replicas_of(server, "podinfo"), 2);
    let apex = server.get("v1", "Service", NAMESPACE, "podinfo").unwrap();
    assert_eq!(
        apex["spec"]["selector"],
        json!({"app": "podinfo"}),
        "{apex:#}"
    );
    assert!(apex["metadata"]["ownerReferences"].is_null(), "{apex:#}");
    // ...and nothing weir created is left.
    let left: Vec<String> = CREATED_FOR_PODINFO
        .iter()
        .filter(|(api_version, kind, name)| {
            server.get(api_version, kind, NAMESPACE, name).is_some()
        })
        .map(|(_, kind, name)| format!("{kind}/{name}"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    println!(
        "kubectl delete returned after {took:?} with the target at 2 replicas and the apex on app=podinfo"
    );
}

#[test]
fn when_the_leader_is_killed_the_other_replica_takes_over_and_no_step_is_taken_twice() {
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    cluster.apply(&rollout_yaml(
        "{canary: {stepWeights: [10, 20, 30, 40, 50, 60, 70, 80, 90]}}",
    ));
    let elect = [
        "--leader-election",
        "--lease-namespace",
        NAMESPACE,
        "--lease-seconds",
        "3",
    ];
    let mut first = cluster.start_operator(&elect);
    cluster.wait_initialised();
    let second = cluster.start_operator(&elect);
    // The second replica waits: alive, and saying that it is not the leader.
    let refused = cluster.weir(&second, &["get", "podinfo"]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("waiting for the leader lease"),
        "{}",
        text(&refused.stderr)
    );
    let server = Arc::clone(&cluster.server);
    cluster.new_revision("2");
    let mut weights = Vec::new();
    let note = |weights: &mut Vec<i64>| {
        if let Some(weight) = canary_weight(&server)
            && weights.last() != Some(&weight)
        {
            weights.push(weight);
        }
    };
    wait_until("the run at 30%", || {
        note(&mut weights);
        (canary_weight(&server) >= Some(30)).then_some(())
    });

    first.kill();
    let killed = std::time::Instant::now();
    let run = rollout_status(&server)["run"].as_u64().unwrap();
    wait_until("the second replica to lead", || {
        note(&mut weights);
        cluster
            .weir(&second, &["get", "podinfo"])
            .status
            .success()
            .then_some(())
    });
    let takeover = killed.elapsed();
    wait_until("the run promoted by the new leader", || {
        note(&mut weights);
        let status = rollout_status(&server);
        (status["phase"] == "Succeeded" && status["run"].as_u64() == Some(run)).then_some(())
    });
    note(&mut weights);
    // Traffic only ever moved forward, then all of it back to the primary after promotion.
    let (last, during) = weights.split_last().unwrap();
    assert_eq!(*last, 0, "{weights:?}");
    assert!(
        during.windows(2).all(|pair| pair[0] < pair[1]),
        "the canary weight went back during the run: {weights:?}"
    );
    // Each step committed once across the failover.
    let steps: Vec<i64> = cluster
        .history(&second, "podinfo")
        .iter()
        .filter(|event| event["run"].as_u64() == Some(run))
        .filter(|event| event["reason"] == "Advanced")
        .filter_map(|event| event["canaryWeight"].as_i64())
        .collect();
    assert_eq!(steps, [10, 20, 30, 40, 50, 60, 70, 80, 90], "{steps:?}");
    assert!(
        takeover < std::time::Duration::from_secs(30),
        "takeover took {takeover:?}"
    );
    let lease = server
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            NAMESPACE,
            "weir-operator",
        )
        .unwrap();
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease:#}");
    println!(
        "takeover {takeover:?} after SIGKILL (lease 3 s); weights on the VirtualService: {weights:?}; \
         Advanced steps: {steps:?}; writes: {:?}",
        server.write_counts()
    );
}

#[test]
fn a_leader_stopped_with_sigterm_hands_the_lease_over_and_exits_cleanly() {
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    cluster.apply(&rollout_yaml("{canary: {stepWeights: [50]}}"));
    let mut leader = cluster.start_operator(&[
        "--leader-election",
        "--lease-namespace",
        NAMESPACE,
        "--lease-seconds",
        "30",
    ]);
    cluster.wait_initialised();
    let sent = Command::new("kill")
        .args(["-TERM", &leader.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = leader.wait();
    assert!(status.success(), "{status:?}");
    // Released: another replica need not wait out the 30 s lease.
    let lease = cluster
        .server
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            NAMESPACE,
            "weir-operator",
        )
        .unwrap();
    assert!(
        lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .is_empty(),
        "{lease:#}"
    );
}
