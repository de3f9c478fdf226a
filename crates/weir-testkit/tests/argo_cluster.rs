//! Argo Rollouts' CRDs, ReplicaSets and Jobs on the in-memory API server, driven by the real
//! `kubectl` on this machine: what weir's Argo Rollouts support is tested against. Every test
//! starts its own server on port 0 and waits on conditions, never on the clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;
use weir_testkit::argo_cluster::{API_VERSION, argo_crds_yaml, install_argo_crds};
use weir_testkit::deployment_controller::{DeploymentController, Readiness};
use weir_testkit::job_controller::JobController;
use weir_testkit::kube_server::{ChangeKind, KubeServer};
use weir_testkit::wait::{no_hang, wait_for_ok};

const ROLLOUT: &str = r#"apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: podinfo
  namespace: default
spec:
  replicas: 3
  selector:
    matchLabels:
      app: podinfo
  template:
    metadata:
      labels:
        app: podinfo
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:6.5.0
  strategy:
    canary:
      steps:
      - setWeight: 20
      - pause: {}
"#;

const CLUSTER_TEMPLATE: &str = r#"apiVersion: argoproj.io/v1alpha1
kind: ClusterAnalysisTemplate
metadata:
  name: success-rate
spec:
  args:
  - name: service-name
  metrics:
  - name: success-rate
    interval: 1m
    successCondition: result[0] >= 0.95
    provider:
      prometheus:
        address: http://prometheus:9090
        query: sum(rate(requests{service="{{args.service-name}}"}[1m]))
"#;

const ANALYSIS_RUN: &str = r#"apiVersion: argoproj.io/v1alpha1
kind: AnalysisRun
metadata:
  name: podinfo-6b8f-2
  namespace: default
spec:
  metrics:
  - name: web
    provider:
      web:
        url: http://podinfo/healthz
"#;

const REPLICA_SET: &str = r#"apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: podinfo-6b8f
  namespace: default
  labels:
    app: podinfo
spec:
  replicas: 3
  selector:
    matchLabels:
      app: podinfo
      rollouts-pod-template-hash: 6b8f
  template:
    metadata:
      labels:
        app: podinfo
        rollouts-pod-template-hash: 6b8f
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:6.5.0
"#;

/// A Job whose only container runs `sh -c SCRIPT`, with `extra` lines added to its spec.
fn job_yaml(name: &str, script: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: default
spec:
{extra}  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:1.36
        command: ["sh", "-c"]
        args: [{script:?}]
        env:
        - name: GREETING
          value: hello
"#
    )
}

/// The kubectl on PATH; a missing kubectl fails the test (it is always installed here).
fn kubectl_binary() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("kubectl"))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "kubectl is not installed (expected /usr/bin/kubectl on PATH): these tests drive the real kubectl against the in-memory API server"
        )
    })
}

/// A server, a kubeconfig for it and a cache directory of its own.
struct Cluster {
    server: Arc<KubeServer>,
    dir: TempDir,
    kubeconfig: PathBuf,
}

impl Cluster {
    async fn start() -> Cluster {
        let server = Arc::new(KubeServer::start().await);
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = server.kubeconfig(dir.path());
        Cluster {
            server,
            dir,
            kubeconfig,
        }
    }

    /// Runs kubectl to its end (on a blocking thread).
    async fn kubectl(&self, args: &[&str]) -> Output {
        let mut command = Command::new(kubectl_binary());
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null());
        tokio::task::spawn_blocking(move || command.output().expect("running kubectl"))
            .await
            .unwrap()
    }

    /// Runs kubectl, asserts it succeeded, returns its stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let output = self.kubectl(args).await;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "kubectl {args:?} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
            output.status
        );
        stdout
    }

    /// Writes `text` to `name` in the cluster's directory and returns the path.
    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// `kubectl apply -f` of `text`, returning kubectl's output.
    async fn apply(&self, name: &str, text: &str) -> String {
        let file = self.file(name, text);
        self.ok(&["apply", "-f", &file]).await
    }

    /// Waits until `check` finds what it wants in object `name` of `kind`, and returns it.
    async fn wait_object<T>(
        &self,
        what: &str,
        (api_version, kind, name): (&str, &str, &str),
        check: impl Fn(&Value) -> Option<T>,
    ) -> T {
        wait_for_ok(what, || {
            let object = self.server.get(api_version, kind, "default", name);
            let found = object.as_ref().and_then(&check);
            async move { found.ok_or_else(|| format!("{object:#?}")) }
        })
        .await
    }
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// The table's header and the row of `name`, as words.
fn header_and_row<'a>(table: &'a str, name: &str) -> (Vec<&'a str>, Vec<&'a str>) {
    let mut lines = table.lines();
    let header = words(lines.next().unwrap_or_default());
    let row = lines
        .map(words)
        .find(|row| row.first() == Some(&name))
        .unwrap_or_else(|| panic!("no row {name} in\n{table}"));
    (header, row)
}

fn int_at(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

fn condition_types(job: &Value) -> Vec<String> {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|condition| condition["type"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argo_crds_apply_with_kubectl_and_rollouts_print_their_columns() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let out = cluster.apply("argo-crds.yaml", &argo_crds_yaml()).await;
        for plural in [
            "rollouts",
            "analysistemplates",
            "clusteranalysistemplates",
            "analysisruns",
            "experiments",
        ] {
            let line = format!(
                "customresourcedefinition.apiextensions.k8s.io/{plural}.argoproj.io created"
            );
            assert!(out.contains(&line), "{out}");
        }
        let again = cluster.apply("argo-crds.yaml", &argo_crds_yaml()).await;
        assert_eq!(again.matches("unchanged").count(), 5, "{again}");
        // Installing them in-process after kubectl did is harmless.
        install_argo_crds(&cluster.server);

        let resources = cluster
            .ok(&["api-resources", "--api-group=argoproj.io", "--no-headers"])
            .await;
        for (plural, short, namespaced) in [
            ("rollouts", "ro", "true"),
            ("analysistemplates", "at", "true"),
            ("clusteranalysistemplates", "cat", "false"),
            ("analysisruns", "ar", "true"),
            ("experiments", "exp", "true"),
        ] {
            let row = resources
                .lines()
                .map(words)
                .find(|row| row.first() == Some(&plural))
                .unwrap_or_else(|| panic!("no {plural} in\n{resources}"));
            assert_eq!(row[1..4], [short, API_VERSION, namespaced], "{resources}");
        }

        let out = cluster.apply("rollout.yaml", ROLLOUT).await;
        assert!(out.contains("rollout.argoproj.io/podinfo created"), "{out}");
        // The controller's status, written to the status subresource.
        cluster
            .server
            .merge_patch(
                API_VERSION,
                "Rollout",
                "default",
                "podinfo",
                &json!({"status": {"replicas": 3, "updatedReplicas": 1, "availableReplicas": 2}}),
                true,
            )
            .unwrap();
        let table = cluster.ok(&["get", "rollouts"]).await;
        println!("kubectl get rollouts:\n{table}");
        let (header, row) = header_and_row(&table, "podinfo");
        assert_eq!(
            header,
            [
                "NAME",
                "DESIRED",
                "CURRENT",
                "UP-TO-DATE",
                "AVAILABLE",
                "AGE"
            ],
            "{table}"
        );
        assert_eq!(row[1..5], ["3", "3", "1", "2"], "{table}");
        // By short name too, and the fields weir reads come back as written.
        let json = cluster.ok(&["get", "ro", "podinfo", "-o", "json"]).await;
        let rollout: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            rollout["spec"]["strategy"]["canary"]["steps"][0]["setWeight"],
            20
        );
        assert_eq!(rollout["status"]["updatedReplicas"], 1);

        // A cluster-scoped template: no namespace in its name or its table.
        let out = cluster.apply("template.yaml", CLUSTER_TEMPLATE).await;
        assert!(
            out.contains("clusteranalysistemplate.argoproj.io/success-rate created"),
            "{out}"
        );
        assert!(
            cluster
                .server
                .get(API_VERSION, "ClusterAnalysisTemplate", "", "success-rate")
                .is_some_and(|template| template["metadata"].get("namespace").is_none())
        );
        let table = cluster.ok(&["get", "cat", "-A"]).await;
        let (header, _) = header_and_row(&table, "success-rate");
        assert_eq!(header, ["NAME", "AGE"], "{table}");

        cluster.apply("run.yaml", ANALYSIS_RUN).await;
        cluster
            .server
            .merge_patch(
                API_VERSION,
                "AnalysisRun",
                "default",
                "podinfo-6b8f-2",
                &json!({"status": {"phase": "Successful"}}),
                true,
            )
            .unwrap();
        let table = cluster.ok(&["get", "ar"]).await;
        let (header, row) = header_and_row(&table, "podinfo-6b8f-2");
        assert_eq!(header, ["NAME", "STATUS", "AGE"], "{table}");
        assert_eq!(row[1], "Successful", "{table}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_set_becomes_available_after_the_readiness_delay() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let delay = Duration::from_millis(1500);
        let _controller =
            DeploymentController::spawn(cluster.server.clone(), "default", Readiness::After(delay));
        let feed = cluster
            .server
            .subscribe(|group, resource, _| group == "apps" && resource == "replicasets");
        let started = tokio::time::Instant::now();
        let out = cluster.apply("rs.yaml", REPLICA_SET).await;
        assert!(
            out.contains("replicaset.apps/podinfo-6b8f created"),
            "{out}"
        );
        let rs = ("apps/v1", "ReplicaSet", "podinfo-6b8f");
        cluster
            .wait_object("3 available replicas", rs, |rs| {
                (int_at(rs, "/status/availableReplicas") == Some(3)).then_some(())
            })
            .await;
        assert!(
            started.elapsed() >= delay,
            "available after {:?}",
            started.elapsed()
        );
        // Before that, the controller said 3 replicas, none of them ready or available (left
        // out at 0, as the real server's omitempty does).
        let statuses: Vec<Value> = feed
            .take()
            .into_iter()
            .filter(|change| change.kind == ChangeKind::Modified)
            .map(|change| change.object["status"].clone())
            .collect();
        let first = statuses.first().expect("a status before availability");
        assert_eq!(
            first,
            &json!({"observedGeneration": 1, "replicas": 3, "fullyLabeledReplicas": 3}),
            "{statuses:#?}"
        );

        let table = cluster.ok(&["get", "rs"]).await;
        println!("kubectl get rs:\n{table}");
        let (header, row) = header_and_row(&table, "podinfo-6b8f");
        assert_eq!(
            header,
            ["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
            "{table}"
        );
        assert_eq!(row[1..4], ["3", "3", "3"], "{table}");
        let yaml = cluster
            .ok(&["get", "rs", "podinfo-6b8f", "-o", "yaml"])
            .await;
        assert!(yaml.contains("kind: ReplicaSet"), "{yaml}");
        assert!(yaml.contains("availableReplicas: 3"), "{yaml}");
        assert!(yaml.contains("readyReplicas: 3"), "{yaml}");

        // Scaled down: at once, and the new generation observed.
        cluster
            .ok(&[
                "patch",
                "rs",
                "podinfo-6b8f",
                "--type=merge",
                "-p",
                r#"{"spec":{"replicas":1}}"#,
            ])
            .await;
        let status = cluster
            .wait_object("1 replica, generation 2 observed", rs, |rs| {
                (int_at(rs, "/status/observedGeneration") == Some(2)
                    && int_at(rs, "/status/replicas") == Some(1))
                .then(|| rs["status"].clone())
            })
            .await;
        assert_eq!(status["availableReplicas"], 1, "{status}");
        // To zero: `replicas` stays (the API requires it), the zero counts go.
        cluster
            .ok(&[
                "patch",
                "rs",
                "podinfo-6b8f",
                "--type=merge",
                "-p",
                r#"{"spec":{"replicas":0}}"#,
            ])
            .await;
        let status = cluster
            .wait_object("0 replicas", rs, |rs| {
                (int_at(rs, "/status/observedGeneration") == Some(3)).then(|| rs["status"].clone())
            })
            .await;
        assert_eq!(status, json!({"observedGeneration": 3, "replicas": 0}));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_their_command_and_complete_or_fail_after_their_retries() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let controller = JobController::spawn(cluster.server.clone(), "default");

        let ok = job_yaml(
            "ok",
            r#"test "$GREETING" = hello && echo done && exit 0"#,
            "",
        );
        let out = cluster.apply("ok.yaml", &ok).await;
        assert!(out.contains("job.batch/ok created"), "{out}");
        let out = cluster
            .ok(&[
                "wait",
                "--for=condition=Complete",
                "job/ok",
                "--timeout=120s",
            ])
            .await;
        assert!(out.contains("job.batch/ok condition met"), "{out}");
        let job = cluster
            .server
            .get("batch/v1", "Job", "default", "ok")
            .unwrap();
        let status = &job["status"];
        assert_eq!(status["succeeded"], 1, "{status}");
        assert!(status.get("active").is_none(), "{status}");
        assert!(status["startTime"].is_string(), "{status}");
        assert!(status["completionTime"].is_string(), "{status}");
        assert_eq!(condition_types(&job), ["SuccessCriteriaMet", "Complete"]);
        assert_eq!(status["conditions"][1]["status"], "True", "{status}");
        assert_eq!(controller.logs("default", "ok").as_deref(), Some("done\n"));

        let fails = job_yaml("fails", "exit 3", "  backoffLimit: 1\n");
        cluster.apply("fails.yaml", &fails).await;
        let out = cluster
            .ok(&[
                "wait",
                "--for=condition=Failed",
                "job/fails",
                "--timeout=120s",
            ])
            .await;
        assert!(out.contains("job.batch/fails condition met"), "{out}");
        let job = cluster
            .server
            .get("batch/v1", "Job", "default", "fails")
            .unwrap();
        let status = &job["status"];
        // The first attempt and one retry.
        assert_eq!(status["failed"], 2, "{status}");
        assert!(status.get("succeeded").is_none(), "{status}");
        assert!(status.get("completionTime").is_none(), "{status}");
        assert_eq!(condition_types(&job), ["FailureTarget", "Failed"]);
        assert_eq!(status["conditions"][1]["reason"], "BackoffLimitExceeded");

        let table = cluster.ok(&["get", "jobs"]).await;
        println!("kubectl get jobs:\n{table}");
        let (header, row) = header_and_row(&table, "ok");
        assert_eq!(header, ["NAME", "STATUS", "COMPLETIONS", "AGE"], "{table}");
        assert_eq!(row[1..3], ["Complete", "1/1"], "{table}");
        let (_, row) = header_and_row(&table, "fails");
        assert_eq!(row[1..3], ["Failed", "0/1"], "{table}");
    })
    .await;
}

/// Whether process `pid` is gone (or a zombie: killed, not yet reaped).
fn process_ended(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_past_their_deadline_deleted_or_without_command_are_stopped() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let _controller = JobController::spawn(cluster.server.clone(), "default");

        let slow = job_yaml("slow", "exec sleep 600", "  activeDeadlineSeconds: 1\n");
        cluster.apply("slow.yaml", &slow).await;
        let status = cluster
            .wait_object(
                "the deadline to fail the Job",
                ("batch/v1", "Job", "slow"),
                |job| {
                    (condition_types(job).last().map(String::as_str) == Some("Failed"))
                        .then(|| job["status"].clone())
                },
            )
            .await;
        assert_eq!(
            status["conditions"][1]["reason"], "DeadlineExceeded",
            "{status}"
        );
        assert_eq!(status["failed"], 1, "{status}");
        assert!(status.get("active").is_none(), "{status}");

        // A running Job deleted: its process is killed.
        let pid_file = cluster.dir.path().join("pid");
        let script = format!("echo $$ > {} && exec sleep 600", pid_file.display());
        cluster
            .apply("running.yaml", &job_yaml("running", &script, ""))
            .await;
        let pid = wait_for_ok("the Job's process to start", || {
            let pid = std::fs::read_to_string(&pid_file).unwrap_or_default();
            async move {
                let pid = pid.trim().to_owned();
                if pid.is_empty() {
                    Err("no pid yet".to_owned())
                } else {
                    Ok(pid)
                }
            }
        })
        .await;
        let job = cluster
            .server
            .get("batch/v1", "Job", "default", "running")
            .unwrap();
        assert_eq!(job["status"]["active"], 1, "{job}");
        assert!(
            !process_ended(&pid),
            "the Job's process {pid} ended on its own"
        );
        cluster.ok(&["delete", "job", "running"]).await;
        wait_for_ok("the deleted Job's process to be killed", || {
            let ended = process_ended(&pid);
            let pid = pid.clone();
            async move {
                if ended {
                    Ok(())
                } else {
                    Err(format!("{pid} still runs"))
                }
            }
        })
        .await;

        // No command: nothing the stand-in can run.
        let no_command = r#"apiVersion: batch/v1
kind: Job
metadata:
  name: entrypoint
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:1.36
"#;
        cluster.apply("entrypoint.yaml", no_command).await;
        let out = cluster
            .ok(&[
                "wait",
                "--for=condition=Failed",
                "job/entrypoint",
                "--timeout=120s",
            ])
            .await;
        assert!(out.contains("condition met"), "{out}");
        let job = cluster
            .server
            .get("batch/v1", "Job", "default", "entrypoint")
            .unwrap();
        let message = job["status"]["conditions"][1]["message"].as_str().unwrap();
        assert!(message.contains("needs a command"), "{message}");
    })
    .await;
}
