//! Argo Rollouts' own objects run by `weir operator`, driven with the real kubectl against the
//! in-memory API server (whose Deployment controller plays ReplicaSets, and whose Job controller
//! runs a Job's command): Argo's CRDs applied with `kubectl apply`, Rollouts and
//! AnalysisTemplates applied as a user keeps them, the plugin's verbs through `weir argo` (the
//! patches `kubectl argo rollouts` sends, docs/ARGO.md "Verbs"), and what weir wrote read back:
//! ReplicaSet sizes per step, Services' selectors, AnalysisRuns, the Rollout's status in Argo's
//! shape, and `kubectl get rollouts`.
//!
//! Each test prints the replica counts it saw per step (`--no-capture` shows them).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use weir_testkit::argo_cluster::{argo_kube_cluster, rollout_yaml, wait_rollout_status};
use weir_testkit::job_controller::JobController;
use weir_testkit::kube_cluster::{Cluster, NAMESPACE, text};
use weir_testkit::receiver::{Receiver, Reply};
use weir_testkit::wait::wait_until;

const BIN: &str = env!("CARGO_BIN_EXE_weir");

/// A cluster with Argo's CRDs applied by kubectl, and a runtime for the test's own servers.
fn argo_cluster() -> (Cluster, tokio::runtime::Runtime) {
    let cluster = argo_kube_cluster(BIN);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    (cluster, runtime)
}

/// Rollout `web` with `replicas`, running `image`, with `strategy` (YAML, indented for
/// `strategy:`).
fn rollout(replicas: i64, image: &str, strategy: &str) -> String {
    rollout_yaml(NAMESPACE, "web", replicas, image, strategy)
}

fn field<'a>(status: &'a Value, name: &str) -> &'a str {
    status.get(name).and_then(Value::as_str).unwrap_or("")
}

/// Waits until the status of Rollout `web` satisfies `check`; returns it.
fn wait_status(cluster: &Cluster, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_rollout_status(&cluster.server, NAMESPACE, "web", what, check)
}

fn phase_is(phase: &'static str) -> impl Fn(&Value) -> bool {
    move |status| field(status, "phase") == phase
}

/// `spec.replicas` of each ReplicaSet of `web`, by revision.
fn replica_sets(cluster: &Cluster) -> BTreeMap<i64, i64> {
    cluster
        .server
        .list("apps/v1", "ReplicaSet", NAMESPACE)
        .iter()
        .filter_map(|rs| {
            let revision = rs
                .pointer("/metadata/annotations/rollout.argoproj.io~1revision")?
                .as_str()?
                .parse()
                .ok()?;
            let replicas = rs.pointer("/spec/replicas")?.as_i64()?;
            Some((revision, replicas))
        })
        .collect()
}

/// Waits for ReplicaSet sizes `want` (revision -> replicas) and all their pods available.
fn wait_replicas(cluster: &Cluster, want: &[(i64, i64)]) {
    let want: BTreeMap<i64, i64> = want.iter().copied().collect();
    wait_until(&format!("ReplicaSets at {want:?}"), || {
        let ready = cluster
            .server
            .list("apps/v1", "ReplicaSet", NAMESPACE)
            .iter()
            .all(|rs| {
                let spec = rs.pointer("/spec/replicas").and_then(Value::as_i64);
                let available = rs
                    .pointer("/status/availableReplicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                spec == Some(available)
            });
        (ready && replica_sets(cluster) == want).then_some(())
    });
}

/// `weir argo ARGS... -n shop` against the cluster; it must succeed. Its standard output.
fn weir_argo(cluster: &Cluster, args: &[&str]) -> String {
    let output = std::process::Command::new(BIN)
        .arg("argo")
        .args(args)
        .args(
            ["-n", NAMESPACE, "--no-color"]
                .iter()
                .filter(|_| args[0] == "get"),
        )
        .args(["-n", NAMESPACE].iter().filter(|_| args[0] != "get"))
        .env("KUBECONFIG", &cluster.kubeconfig)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "weir argo {args:?}: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

fn selector_of(cluster: &Cluster, service: &str) -> String {
    cluster
        .server
        .get("v1", "Service", NAMESPACE, service)
        .and_then(|service| {
            service
                .pointer("/spec/selector/rollouts-pod-template-hash")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

fn service(name: &str) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: {NAMESPACE}
spec:
  selector:
    app: web
  ports:
    - port: 80
"
    )
}

const STEPS: &str = "    canary:
      steps:
        - setWeight: 20
        - pause: {}
        - setWeight: 60
        - pause: {duration: 2s}
";

#[test]
fn a_canary_with_steps_walks_its_replica_counts_to_promotion() {
    let (cluster, _runtime) = argo_cluster();
    cluster.apply(&rollout(5, "web:1", STEPS));
    let _operator = cluster.start_operator(&[]);
    let first = wait_status(&cluster, "the first deploy healthy", phase_is("Healthy"));
    assert_eq!(field(&first, "stableRS"), field(&first, "currentPodHash"));
    wait_replicas(&cluster, &[(1, 5)]);

    cluster.apply(&rollout(5, "web:2", STEPS));
    // setWeight 20 of 5 pods: one new, four stable; then the pause until promoted.
    let paused = wait_status(&cluster, "paused at step 1", |status| {
        field(status, "phase") == "Paused" && status["currentStepIndex"] == json!(1)
    });
    assert_eq!(field(&paused, "message"), "CanaryPauseStep");
    assert_eq!(
        paused["pauseConditions"][0]["reason"],
        json!("CanaryPauseStep")
    );
    assert_eq!(paused["controllerPause"], json!(true));
    wait_replicas(&cluster, &[(1, 4), (2, 1)]);
    println!(
        "step 1 (setWeight 20, paused): {:?}",
        replica_sets(&cluster)
    );
    let listed = cluster.kubectl(&["get", "rollouts", "-n", NAMESPACE]);
    let listed = text(&listed.stdout);
    assert!(
        listed.contains("DESIRED") && listed.contains("UP-TO-DATE") && listed.contains("AVAILABLE"),
        "{listed}"
    );
    assert!(
        listed
            .lines()
            .any(|line| line.split_whitespace().take(5).collect::<Vec<_>>()
                == ["web", "5", "5", "1", "5"]),
        "{listed}"
    );

    // What `kubectl argo rollouts get rollout` shows, from the cluster.
    let shown = weir_argo(&cluster, &["get", "rollout", "web"]);
    println!("{shown}");
    for line in [
        "Status:          ॥ Paused",
        "Message:         CanaryPauseStep",
        "  Step:          1/4",
        "  SetWeight:     20",
        "  ActualWeight:  20",
        "web:2 (canary)",
    ] {
        assert!(shown.contains(line), "no {line:?} in:\n{shown}");
    }
    // promote: the plugin's verb removes the pause condition.
    assert_eq!(
        weir_argo(&cluster, &["promote", "web"]).trim(),
        "rollout 'web' promoted"
    );
    // setWeight 60 of 5 pods: three new, two stable, during the two-second pause.
    wait_status(&cluster, "at the timed pause", |status| {
        status["currentStepIndex"] == json!(3)
    });
    wait_replicas(&cluster, &[(1, 2), (2, 3)]);
    println!(
        "step 3 (setWeight 60, pause 2s): {:?}",
        replica_sets(&cluster)
    );
    let done = wait_status(&cluster, "promoted", phase_is("Healthy"));
    wait_replicas(&cluster, &[(1, 0), (2, 5)]);
    println!("promoted: {:?}", replica_sets(&cluster));
    assert_eq!(field(&done, "stableRS"), field(&done, "currentPodHash"));
    assert_ne!(field(&done, "stableRS"), field(&first, "stableRS"));
    assert_eq!(done["currentStepIndex"], json!(4));
    let events = cluster.kubectl(&["get", "events", "-n", NAMESPACE]);
    let events = text(&events.stdout);
    for reason in [
        "RolloutStepCompleted",
        "RolloutCompleted",
        "ScalingReplicaSet",
    ] {
        assert!(events.contains(reason), "no {reason} event in:\n{events}");
    }
}

const PAUSED_AT_40: &str = "    canary:
      steps:
        - setWeight: 40
        - pause: {}
";

#[test]
fn weir_argo_abort_retry_and_promote_full_drive_the_rollout_as_the_plugins_patches_do() {
    let (cluster, _runtime) = argo_cluster();
    cluster.apply(&rollout(5, "web:1", PAUSED_AT_40));
    let _operator = cluster.start_operator(&[]);
    wait_status(&cluster, "the first deploy healthy", phase_is("Healthy"));
    cluster.apply(&rollout(5, "web:2", PAUSED_AT_40));
    wait_status(&cluster, "paused at step 1", phase_is("Paused"));
    wait_replicas(&cluster, &[(1, 3), (2, 2)]);
    println!("paused at setWeight 40: {:?}", replica_sets(&cluster));

    assert_eq!(
        weir_argo(&cluster, &["abort", "web"]).trim(),
        "rollout 'web' aborted"
    );
    let aborted = wait_status(&cluster, "aborted", phase_is("Degraded"));
    assert!(
        field(&aborted, "message")
            .starts_with("RolloutAborted: Rollout aborted update to revision 2"),
        "{aborted}"
    );
    assert!(aborted.get("abortedAt").is_some(), "{aborted}");
    wait_replicas(&cluster, &[(1, 5), (2, 0)]);
    println!("aborted: {:?}", replica_sets(&cluster));

    weir_argo(&cluster, &["retry", "web"]);
    wait_status(&cluster, "paused again after retry", |status| {
        field(status, "phase") == "Paused" && status.get("abortedAt").is_none()
    });
    wait_replicas(&cluster, &[(1, 3), (2, 2)]);
    println!("retried: {:?}", replica_sets(&cluster));

    assert_eq!(
        weir_argo(&cluster, &["promote", "web", "--full"]).trim(),
        "rollout 'web' fully promoted"
    );
    let promoted = wait_status(&cluster, "fully promoted", phase_is("Healthy"));
    assert!(promoted.get("promoteFull").is_none(), "{promoted}");
    wait_replicas(&cluster, &[(1, 0), (2, 5)]);
    println!("promoted fully: {:?}", replica_sets(&cluster));
}

const SMOKE_TEMPLATE: &str = "apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata:
  name: smoke
  namespace: shop
spec:
  args:
    - name: url
  metrics:
    - name: smoke
      successCondition: result == true
      provider:
        web:
          url: \"{{args.url}}\"
          jsonPath: \"{$.ok}\"
";

fn blue_green(url: &str) -> String {
    format!(
        "    blueGreen:
      activeService: web-active
      previewService: web-preview
      scaleDownDelaySeconds: 1
      prePromotionAnalysis:
        templates:
          - templateName: smoke
        args:
          - name: url
            value: {url}
"
    )
}

#[test]
fn blue_green_switches_after_a_web_analysis_passes_and_stays_when_it_fails() {
    let (cluster, runtime) = argo_cluster();
    let answers = runtime.block_on(Receiver::start(|_, request| {
        let ok = request.path == "/healthy";
        Reply::new(200, json!({"ok": ok}).to_string()).typed("application/json")
    }));
    cluster.apply(&service("web-active"));
    cluster.apply(&service("web-preview"));
    cluster.apply(SMOKE_TEMPLATE);
    let healthy = answers.url("/healthy");
    cluster.apply(&rollout(2, "web:1", &blue_green(&healthy)));
    let _operator = cluster.start_operator(&[]);
    let first = wait_status(&cluster, "the first deploy healthy", phase_is("Healthy"));
    let first_hash = field(&first, "currentPodHash").to_string();
    assert_eq!(selector_of(&cluster, "web-active"), first_hash);

    cluster.apply(&rollout(2, "web:2", &blue_green(&healthy)));
    let switched = wait_status(&cluster, "switched to revision 2", |status| {
        field(status, "phase") == "Healthy" && field(status, "currentPodHash") != first_hash
    });
    let second_hash = field(&switched, "currentPodHash").to_string();
    assert_eq!(selector_of(&cluster, "web-active"), second_hash);
    assert_eq!(selector_of(&cluster, "web-preview"), second_hash);
    let run_name = format!("web-{second_hash}-2-pre");
    let run = cluster
        .server
        .get("argoproj.io/v1alpha1", "AnalysisRun", NAMESPACE, &run_name)
        .unwrap_or_else(|| panic!("no AnalysisRun {run_name}"));
    assert_eq!(run["status"]["phase"], json!("Successful"), "{run}");
    assert_eq!(
        run["metadata"]["labels"]["rollout-type"],
        json!("PrePromotion")
    );
    assert_eq!(
        switched["blueGreen"]["prePromotionAnalysisRunStatus"]["status"],
        json!("Successful")
    );
    // The old ReplicaSet goes once its scale-down delay (1 s) has passed.
    wait_replicas(&cluster, &[(1, 0), (2, 2)]);
    println!(
        "revision 2 promoted after its analysis: {:?}",
        replica_sets(&cluster)
    );

    let broken = answers.url("/broken");
    cluster.apply(&rollout(2, "web:3", &blue_green(&broken)));
    let failed = wait_status(&cluster, "revision 3 refused", phase_is("Degraded"));
    assert!(
        field(&failed, "message").contains("PrePromotion analysis phase failed"),
        "{failed}"
    );
    assert_eq!(
        selector_of(&cluster, "web-active"),
        second_hash,
        "the active Service stays"
    );
    assert_eq!(field(&failed, "stableRS"), second_hash);
    println!(
        "revision 3 refused by its analysis: {:?}",
        replica_sets(&cluster)
    );
}

const JOB_TEMPLATE: &str = "apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata:
  name: job-check
  namespace: shop
spec:
  args:
    - name: code
  metrics:
    - name: check
      provider:
        job:
          spec:
            backoffLimit: 0
            template:
              spec:
                restartPolicy: Never
                containers:
                  - name: check
                    image: busybox
                    command: [sh, -c, \"exit {{args.code}}\"]
";

fn with_job_step(code: &str) -> String {
    format!(
        "    canary:
      steps:
        - setWeight: 50
        - analysis:
            templates:
              - templateName: job-check
            args:
              - name: code
                value: \"{code}\"
"
    )
}

#[test]
fn a_job_analysis_step_promotes_when_the_job_succeeds_and_aborts_when_it_fails() {
    let (cluster, runtime) = argo_cluster();
    let _jobs = {
        let _entered = runtime.enter();
        JobController::spawn(Arc::clone(&cluster.server), NAMESPACE)
    };
    cluster.apply(JOB_TEMPLATE);
    cluster.apply(&rollout(2, "web:1", &with_job_step("0")));
    let _operator = cluster.start_operator(&[]);
    let first = wait_status(&cluster, "the first deploy healthy", phase_is("Healthy"));
    let first_hash = field(&first, "currentPodHash").to_string();
    cluster.apply(&rollout(2, "web:2", &with_job_step("0")));
    let promoted = wait_status(&cluster, "revision 2 promoted", |status| {
        field(status, "phase") == "Healthy"
            && field(status, "stableRS") != first_hash
            && status["currentStepIndex"] == json!(2)
    });
    wait_replicas(&cluster, &[(1, 0), (2, 2)]);
    let hash = field(&promoted, "currentPodHash");
    let run = cluster
        .server
        .get(
            "argoproj.io/v1alpha1",
            "AnalysisRun",
            NAMESPACE,
            &format!("web-{hash}-2-1"),
        )
        .expect("the step's AnalysisRun");
    assert_eq!(run["status"]["phase"], json!("Successful"), "{run}");
    assert!(
        !cluster.server.list("batch/v1", "Job", NAMESPACE).is_empty(),
        "the job provider made a Job"
    );

    cluster.apply(&rollout(2, "web:3", &with_job_step("1")));
    let aborted = wait_status(&cluster, "revision 3 aborted", phase_is("Degraded"));
    assert!(
        field(&aborted, "message").contains("Step-based analysis phase failed"),
        "{aborted}"
    );
    wait_replicas(&cluster, &[(1, 0), (2, 2), (3, 0)]);
    println!(
        "revision 3 aborted by its job: {:?}",
        replica_sets(&cluster)
    );
}

const ROUTED: &str = "    canary:
      canaryService: web-canary
      stableService: web-stable
      scaleDownDelaySeconds: 1
      trafficRouting:
        plugins:
          argoproj-labs/gatewayAPI:
            httpRoute: web
      steps:
        - setWeight: 30
        - pause: {}
";

const HTTP_ROUTE: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: web
  namespace: shop
spec:
  parentRefs:
    - name: gateway
  rules:
    - backendRefs:
        - name: web-stable
          port: 80
        - name: web-canary
          port: 80
";

/// The weights of HTTPRoute `web`'s backendRefs, by Service.
fn route_weights(cluster: &Cluster) -> BTreeMap<String, i64> {
    let route = cluster
        .server
        .get(
            "gateway.networking.k8s.io/v1",
            "HTTPRoute",
            NAMESPACE,
            "web",
        )
        .expect("HTTPRoute web");
    route["spec"]["rules"][0]["backendRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|backend| {
            (
                backend["name"].as_str().unwrap_or_default().to_string(),
                backend["weight"].as_i64().unwrap_or(1),
            )
        })
        .collect()
}

#[test]
fn a_routed_canary_moves_the_http_routes_weights_and_promotes_full() {
    let (cluster, _runtime) = argo_cluster();
    cluster
        .server
        .create(weir_testkit::kube_cluster::router_crd(
            "gateway.networking.k8s.io",
            "HTTPRoute",
            "httproutes",
        ))
        .unwrap();
    cluster.apply(&service("web-stable"));
    cluster.apply(&service("web-canary"));
    cluster.apply(HTTP_ROUTE);
    cluster.apply(&rollout(4, "web:1", ROUTED));
    let _operator = cluster.start_operator(&[]);
    let first = wait_status(&cluster, "the first deploy healthy", phase_is("Healthy"));
    let first_hash = field(&first, "currentPodHash").to_string();
    wait_until("the route at 100/0", || {
        let weights = route_weights(&cluster);
        (weights.get("web-canary") == Some(&0) && weights.get("web-stable") == Some(&100))
            .then_some(())
    });

    cluster.apply(&rollout(4, "web:2", ROUTED));
    let paused = wait_status(&cluster, "paused at 30%", phase_is("Paused"));
    let second_hash = field(&paused, "currentPodHash").to_string();
    // 30% of 4 pods: ceil(1.2) = 2 canary pods beside all 4 stable ones; 30% of the traffic.
    wait_replicas(&cluster, &[(1, 4), (2, 2)]);
    let weights = route_weights(&cluster);
    assert_eq!(weights["web-canary"], 30, "{weights:?}");
    assert_eq!(weights["web-stable"], 70, "{weights:?}");
    assert_eq!(selector_of(&cluster, "web-canary"), second_hash);
    assert_eq!(selector_of(&cluster, "web-stable"), first_hash);
    assert_eq!(paused["canary"]["weights"]["canary"]["weight"], json!(30));
    println!(
        "setWeight 30: replicas {:?}, route {weights:?}",
        replica_sets(&cluster)
    );

    weir_argo(&cluster, &["promote", "web", "--full"]);
    wait_status(&cluster, "promoted", |status| {
        field(status, "phase") == "Healthy" && field(status, "stableRS") == second_hash
    });
    wait_until("the route back at 100/0 on the new pods", || {
        let weights = route_weights(&cluster);
        (weights.get("web-canary") == Some(&0)
            && selector_of(&cluster, "web-stable") == second_hash)
            .then_some(())
    });
    // The old stable keeps its pods for scaleDownDelaySeconds (1 s), then goes.
    wait_replicas(&cluster, &[(1, 0), (2, 4)]);
    println!(
        "promoted: replicas {:?}, route {:?}",
        replica_sets(&cluster),
        route_weights(&cluster)
    );
}

fn with_experiment_step(url: &str) -> String {
    format!(
        "    canary:
      steps:
        - setWeight: 50
        - experiment:
            duration: 2s
            templates:
              - name: preview
                specRef: canary
                replicas: 1
            analyses:
              - name: smoke
                templateName: smoke
                args:
                  - name: url
                    value: {url}
"
    )
}

#[test]
fn an_experiment_step_runs_its_experiment_to_success_before_the_rollout_goes_on() {
    let (cluster, runtime) = argo_cluster();
    let answers = runtime.block_on(Receiver::start(|_, _| {
        Reply::new(200, json!({"ok": true}).to_string()).typed("application/json")
    }));
    cluster.apply(SMOKE_TEMPLATE);
    let url = answers.url("/healthy");
    cluster.apply(&rollout(2, "web:1", &with_experiment_step(&url)));
    let _operator = cluster.start_operator(&[]);
    let first = wait_status(&cluster, "the first deploy healthy", phase_is("Healthy"));
    let first_hash = field(&first, "currentPodHash").to_string();
    cluster.apply(&rollout(2, "web:2", &with_experiment_step(&url)));
    let running = wait_status(&cluster, "at the experiment step", |status| {
        status["currentStepIndex"] == json!(1) && status["canary"]["currentExperiment"].is_string()
    });
    let experiment_name = running["canary"]["currentExperiment"]
        .as_str()
        .unwrap()
        .to_string();
    let done = wait_status(&cluster, "promoted after the experiment", |status| {
        field(status, "phase") == "Healthy" && field(status, "stableRS") != first_hash
    });
    assert_eq!(done["currentStepIndex"], json!(2));
    let experiment = cluster
        .server
        .get(
            "argoproj.io/v1alpha1",
            "Experiment",
            NAMESPACE,
            &experiment_name,
        )
        .unwrap_or_else(|| panic!("no Experiment {experiment_name}"));
    assert_eq!(
        experiment["status"]["phase"],
        json!("Successful"),
        "{experiment}"
    );
    assert!(
        cluster
            .server
            .get(
                "apps/v1",
                "ReplicaSet",
                NAMESPACE,
                &format!("{experiment_name}-preview")
            )
            .is_some(),
        "the experiment's ReplicaSet"
    );
    let run = cluster
        .server
        .get(
            "argoproj.io/v1alpha1",
            "AnalysisRun",
            NAMESPACE,
            &format!("{experiment_name}-smoke"),
        )
        .expect("the experiment's AnalysisRun");
    assert_eq!(run["status"]["phase"], json!("Successful"), "{run}");
    println!(
        "experiment {experiment_name}: {}; replicas {:?}",
        experiment["status"]["phase"],
        replica_sets(&cluster)
    );
}
