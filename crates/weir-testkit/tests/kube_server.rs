//! The in-memory API server driven by the real `kubectl` on this machine, over real HTTP.
//! Every test starts its own server on port 0 and waits on conditions, never on the clock.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use http::Method;
use serde_json::{Value, json};
use tempfile::TempDir;
use weir_testkit::client::{http1_client, request};
use weir_testkit::kube_server::KubeServer;
use weir_testkit::process::Guard;
use weir_testkit::wait::{no_hang, wait_for_ok};

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: canaries.flagger.app
spec:
  group: flagger.app
  names:
    kind: Canary
    listKind: CanaryList
    plural: canaries
    singular: canary
    shortNames: [canary]
    categories: [all]
  scope: Namespaced
  versions:
  - name: v1beta1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Status
      type: string
      jsonPath: .status.phase
    - name: Weight
      type: string
      jsonPath: .status.canaryWeight
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
"#;

fn canary_yaml(name: &str, threshold: i64) -> String {
    format!(
        r#"apiVersion: flagger.app/v1beta1
kind: Canary
metadata:
  name: {name}
  namespace: default
spec:
  targetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {name}
  analysis:
    interval: 1m
    threshold: {threshold}
"#
    )
}

const DEPLOYMENT_AND_SERVICE: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
  labels:
    app: podinfo
spec:
  replicas: REPLICAS
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
        ports:
        - containerPort: 9898
---
apiVersion: v1
kind: Service
metadata:
  name: podinfo
spec:
  selector:
    app: podinfo
  ports:
  - port: 9898
    targetPort: 9898
"#;

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
    server: KubeServer,
    dir: TempDir,
    kubeconfig: PathBuf,
}

impl Cluster {
    async fn start() -> Cluster {
        let server = KubeServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = server.kubeconfig(dir.path());
        Cluster {
            server,
            dir,
            kubeconfig,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(kubectl_binary());
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null());
        command
    }

    /// Runs kubectl to its end (on a blocking thread).
    async fn kubectl(&self, args: &[&str]) -> Output {
        let mut command = self.command(args);
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

    /// Runs kubectl, asserts it failed, returns its stderr.
    async fn fails(&self, args: &[&str]) -> String {
        let output = self.kubectl(args).await;
        assert!(
            !output.status.success(),
            "kubectl {args:?} should have failed; stdout: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// The CRD applied with client-side apply, then a Canary applied server-side.
    async fn with_canary(&self, name: &str) {
        let crd = self.file("crd.yaml", CRD);
        let out = self.ok(&["apply", "-f", &crd]).await;
        assert!(
            out.contains(
                "customresourcedefinition.apiextensions.k8s.io/canaries.flagger.app created"
            ),
            "{out}"
        );
        let file = self.file(&format!("{name}.yaml"), &canary_yaml(name, 5));
        let out = self.ok(&["apply", "--server-side", "-f", &file]).await;
        assert!(
            out.contains(&format!("canary.flagger.app/{name} serverside-applied")),
            "{out}"
        );
    }

    fn canary(&self, name: &str) -> Option<Value> {
        self.server
            .get("flagger.app/v1beta1", "Canary", "default", name)
    }

    /// Starts a long-running kubectl whose stdout lines are collected.
    fn spawn(&self, args: &[&str]) -> (Guard, Arc<Mutex<Vec<String>>>) {
        let mut command = self.command(args);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut guard = Guard::spawn(&mut command);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = guard.0.stdout.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        (guard, lines)
    }
}

/// Waits until one collected line satisfies `check`.
async fn wait_for_line(what: &str, lines: &Arc<Mutex<Vec<String>>>, check: impl Fn(&str) -> bool) {
    wait_for_ok(what, || {
        let lines = lines.lock().unwrap().clone();
        let check = &check;
        async move {
            if lines.iter().any(|line| check(line)) {
                Ok(())
            } else {
                Err(format!("{lines:?}"))
            }
        }
    })
    .await;
}

async fn exits(guard: &mut Guard) -> std::process::ExitStatus {
    wait_for_ok("the kubectl process to end", || {
        let status = guard.0.try_wait().unwrap();
        async move { status.ok_or_else(|| "still running".to_owned()) }
    })
    .await
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_apply_ssa_and_get_shows_printer_columns() {
    no_hang(async {
        let cluster = Cluster::start().await;
        cluster.with_canary("podinfo").await;
        let crd = cluster.file("crd.yaml", CRD);
        let again = cluster.ok(&["apply", "-f", &crd]).await;
        assert!(again.contains("unchanged"), "{again}");

        cluster
            .server
            .merge_patch(
                "flagger.app/v1beta1",
                "canaries",
                "default",
                "podinfo",
                &json!({"status": {"phase": "Progressing", "canaryWeight": 10}}),
                true,
            )
            .unwrap();
        let table = cluster.ok(&["get", "canaries"]).await;
        println!("kubectl get canaries:\n{table}");
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            words(lines[0]),
            ["NAME", "STATUS", "WEIGHT", "AGE"],
            "{table}"
        );
        assert_eq!(
            words(lines[1])[..3],
            ["podinfo", "Progressing", "10"],
            "{table}"
        );

        let yaml = cluster
            .ok(&["get", "canary", "podinfo", "-o", "json"])
            .await;
        let object: Value = serde_json::from_str(&yaml).unwrap();
        assert_eq!(object["spec"]["analysis"]["threshold"], 5);
        assert_eq!(object["metadata"]["generation"], 1);
        let applied = cluster
            .ok(&[
                "apply",
                "--server-side",
                "-f",
                &cluster.file("again.yaml", &canary_yaml("podinfo", 5)),
            ])
            .await;
        assert!(applied.contains("serverside-applied"), "{applied}");
        let after: Value = serde_json::from_str(
            &cluster
                .ok(&["get", "canary", "podinfo", "-o", "json"])
                .await,
        )
        .unwrap();
        assert_eq!(
            after["metadata"]["resourceVersion"], object["metadata"]["resourceVersion"],
            "re-applying the same body is a no-op"
        );
        let all = cluster.ok(&["get", "all"]).await;
        assert!(all.contains("canary.flagger.app/podinfo"), "{all}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_prints_a_row_after_status_changes() {
    no_hang(async {
        let cluster = Cluster::start().await;
        cluster.with_canary("podinfo").await;
        let watches = cluster.server.watch_requests();
        let (mut watcher, lines) = cluster.spawn(&["get", "canaries", "-w"]);
        wait_for_line("the initial row", &lines, |line| {
            line.starts_with("podinfo")
        })
        .await;
        wait_for_ok("kubectl to start watching", || {
            let started = cluster.server.watch_requests() > watches;
            async move {
                if started {
                    Ok(())
                } else {
                    Err("no watch yet".into())
                }
            }
        })
        .await;

        cluster
            .ok(&[
                "patch",
                "canary",
                "podinfo",
                "--subresource=status",
                "--type",
                "merge",
                "-p",
                r#"{"status":{"phase":"Progressing","canaryWeight":20}}"#,
            ])
            .await;
        wait_for_line("a row with the patched status", &lines, |line| {
            words(line).get(1..3) == Some(&["Progressing", "20"])
        })
        .await;

        cluster
            .server
            .merge_patch(
                "flagger.app/v1beta1",
                "Canary",
                "default",
                "podinfo",
                &json!({"status": {"phase": "Succeeded", "canaryWeight": 0}}),
                true,
            )
            .unwrap();
        wait_for_line(
            "a row after a status change through the Rust API",
            &lines,
            |line| words(line).get(1..3) == Some(&["Succeeded", "0"]),
        )
        .await;
        println!(
            "kubectl get canaries -w:\n{}",
            lines.lock().unwrap().join("\n")
        );
        assert!(
            watcher.0.try_wait().unwrap().is_none(),
            "get -w ended early"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_condition_succeeds_after_a_status_patch() {
    no_hang(async {
        let cluster = Cluster::start().await;
        cluster.with_canary("podinfo").await;
        let watches = cluster.server.watch_requests();
        let mut command = cluster.command(&["wait", "--for=condition=Promoted", "canary/podinfo", "--timeout=60s"]);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut waiter = Guard::spawn(&mut command);
        wait_for_ok("kubectl wait to start watching", || {
            let started = cluster.server.watch_requests() > watches;
            async move { if started { Ok(()) } else { Err("no watch yet".into()) } }
        })
        .await;
        assert!(waiter.0.try_wait().unwrap().is_none(), "kubectl wait ended before the condition");

        cluster
            .server
            .merge_patch(
                "flagger.app/v1beta1",
                "Canary",
                "default",
                "podinfo",
                &json!({"status": {"phase": "Succeeded", "observedGeneration": 1,
                    "conditions": [{"type": "Promoted", "status": "True", "reason": "Succeeded",
                                    "message": "Canary analysis completed successfully, promotion finished."}]}}),
                true,
            )
            .unwrap();
        let status = exits(&mut waiter).await;
        let mut stdout = String::new();
        std::io::Read::read_to_string(waiter.0.stdout.as_mut().unwrap(), &mut stdout).unwrap();
        println!("kubectl wait: {stdout}");
        assert!(status.success(), "kubectl wait failed: {stdout}");
        assert!(stdout.contains("canary.flagger.app/podinfo condition met"), "{stdout}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_and_service_apply_and_get() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let file = cluster.file("app.yaml", &DEPLOYMENT_AND_SERVICE.replace("REPLICAS", "2"));
        let out = cluster.ok(&["apply", "-f", &file]).await;
        assert!(
            out.contains("deployment.apps/podinfo created")
                && out.contains("service/podinfo created"),
            "{out}"
        );
        let table = cluster.ok(&["get", "deploy,svc"]).await;
        println!("kubectl get deploy,svc:\n{table}");
        assert!(
            table
                .lines()
                .any(|l| words(l) == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]),
            "{table}"
        );
        assert!(
            table
                .lines()
                .any(|l| words(l).get(..2) == Some(&["deployment.apps/podinfo", "0/2"])),
            "{table}"
        );
        assert!(
            table
                .lines()
                .any(|l| words(l).first() == Some(&"service/podinfo") && l.contains("9898/TCP")),
            "{table}"
        );

        let file = cluster.file("app.yaml", &DEPLOYMENT_AND_SERVICE.replace("REPLICAS", "3"));
        let out = cluster.ok(&["apply", "-f", &file]).await;
        assert!(
            out.contains("deployment.apps/podinfo configured")
                && out.contains("service/podinfo unchanged"),
            "{out}"
        );
        let deployment = cluster
            .server
            .get("apps/v1", "deployments", "default", "podinfo")
            .unwrap();
        assert_eq!(deployment["spec"]["replicas"], 3);
        assert_eq!(deployment["metadata"]["generation"], 2);
        assert!(cluster.server.writes("deployments.apps") >= 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_waits_until_the_last_finalizer_is_removed() {
    no_hang(async {
        let cluster = Cluster::start().await;
        cluster.with_canary("podinfo").await;
        cluster
            .server
            .merge_patch(
                "flagger.app/v1beta1",
                "Canary",
                "default",
                "podinfo",
                &json!({"metadata": {"finalizers": ["flagger.app/finalizer"]}}),
                false,
            )
            .unwrap();
        let mut command = cluster.command(&["delete", "canary", "podinfo"]);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut deleter = Guard::spawn(&mut command);
        wait_for_ok("the canary to be terminating", || {
            let canary = cluster.canary("podinfo");
            async move {
                match canary {
                    Some(c) if c["metadata"]["deletionTimestamp"].is_string() => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;
        wait_for_ok("kubectl delete to watch for the deletion", || {
            // Nothing else watches in this test.
            let started = cluster.server.watch_requests() > 0;
            async move {
                if started {
                    Ok(())
                } else {
                    Err("no watch yet".into())
                }
            }
        })
        .await;
        assert!(
            deleter.0.try_wait().unwrap().is_none(),
            "kubectl delete ended while the finalizer remained"
        );

        cluster
            .ok(&[
                "patch",
                "canary",
                "podinfo",
                "--type",
                "json",
                "-p",
                r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
            ])
            .await;
        let status = exits(&mut deleter).await;
        let mut stdout = String::new();
        std::io::Read::read_to_string(deleter.0.stdout.as_mut().unwrap(), &mut stdout).unwrap();
        println!("kubectl delete: {stdout}");
        assert!(status.success(), "{stdout}");
        assert!(
            stdout.contains("canary.flagger.app \"podinfo\" deleted"),
            "{stdout}"
        );
        assert!(cluster.canary("podinfo").is_none());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_put_conflicts_and_errors_are_status_bodies() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let client = http1_client();
        let url = format!("{}/api/v1/namespaces/default/configmaps", cluster.server.url());
        let json_header = [("content-type", "application/json")];
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "1"}});
        let created = request(&client, Method::POST, &format!("{url}?&limit=500"), &json_header, body.to_string()).await;
        assert_eq!(created.status, 201, "{}", created.body);
        let duplicate = request(&client, Method::POST, &url, &json_header, body.to_string()).await;
        assert_eq!(duplicate.status, 409);
        assert_eq!(duplicate.json()["reason"], "AlreadyExists");

        let mut first = created.json();
        first["data"]["a"] = json!("2");
        let updated = request(&client, Method::PUT, &format!("{url}/settings"), &json_header, first.to_string()).await;
        assert_eq!(updated.status, 200, "{}", updated.body);
        first["data"]["a"] = json!("3");
        let stale = request(&client, Method::PUT, &format!("{url}/settings"), &json_header, first.to_string()).await;
        println!("stale PUT: {} {}", stale.status, stale.body);
        assert_eq!(stale.status, 409);
        assert_eq!(stale.json()["reason"], "Conflict");
        assert_eq!(cluster.server.get("v1", "cm", "default", "settings").unwrap()["data"]["a"], "2");

        let missing = request(&client, Method::GET, &format!("{url}/nothing"), &[], "").await;
        assert_eq!(missing.status, 404);
        assert_eq!(
            missing.json(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "configmaps \"nothing\" not found", "reason": "NotFound",
                   "details": {"name": "nothing", "kind": "configmaps"}, "code": 404})
        );
        assert_eq!(cluster.server.writes("configmaps"), 4);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_owner_collects_its_dependents() {
    no_hang(async {
        let cluster = Cluster::start().await;
        cluster.with_canary("podinfo").await;
        let uid = cluster.canary("podinfo").unwrap()["metadata"]["uid"].as_str().unwrap().to_owned();
        let owner = json!([{"apiVersion": "flagger.app/v1beta1", "kind": "Canary", "name": "podinfo",
                            "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
        for (api_version, kind, name) in [("apps/v1", "Deployment", "podinfo-primary"), ("v1", "Service", "podinfo-primary"), ("v1", "ConfigMap", "podinfo-config")] {
            cluster
                .server
                .create(json!({"apiVersion": api_version, "kind": kind,
                               "metadata": {"name": name, "namespace": "default", "ownerReferences": owner}}))
                .unwrap();
        }
        cluster
            .server
            .create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unrelated"}}))
            .unwrap();
        let out = cluster.ok(&["delete", "canary", "podinfo"]).await;
        assert!(out.contains("deleted"), "{out}");
        wait_for_ok("the dependents to be collected", || {
            let left: Vec<String> = [("apps/v1", "deployments", "podinfo-primary"), ("v1", "services", "podinfo-primary"), ("v1", "configmaps", "podinfo-config")]
                .iter()
                .filter(|(v, k, n)| cluster.server.get(v, k, "default", n).is_some())
                .map(|(_, k, n)| format!("{k}/{n}"))
                .collect();
            async move { if left.is_empty() { Ok(()) } else { Err(format!("still there: {left:?}")) } }
        })
        .await;
        assert!(cluster.server.get("v1", "configmaps", "default", "unrelated").is_some());
        let listed = cluster.ok(&["get", "deploy,svc,cm", "-o", "name"]).await;
        println!("after deleting the owner: {listed:?}");
        assert!(!listed.contains("podinfo-primary"), "{listed}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_conflict_between_managers_and_force() {
    no_hang(async {
        let cluster = Cluster::start().await;
        cluster.with_canary("podinfo").await;
        let ours = cluster.file("ours.yaml", &canary_yaml("podinfo", 10));
        let stderr = cluster
            .fails(&["apply", "--server-side", "--field-manager=bob", "-f", &ours])
            .await;
        println!("conflict: {stderr}");
        assert!(stderr.contains("conflict with \"kubectl\""), "{stderr}");
        assert!(stderr.contains(".spec.analysis.threshold"), "{stderr}");
        assert_eq!(
            cluster.canary("podinfo").unwrap()["spec"]["analysis"]["threshold"],
            5
        );

        let out = cluster
            .ok(&[
                "apply",
                "--server-side",
                "--field-manager=bob",
                "--force-conflicts",
                "-f",
                &ours,
            ])
            .await;
        assert!(out.contains("serverside-applied"), "{out}");
        let canary = cluster.canary("podinfo").unwrap();
        assert_eq!(canary["spec"]["analysis"]["threshold"], 10);
        let managers = canary["metadata"]["managedFields"].as_array().unwrap();
        let owns_threshold = |manager: &str| {
            managers.iter().any(|entry| {
                entry["manager"] == manager
                    && entry["fieldsV1"]
                        .pointer("/f:spec/f:analysis/f:threshold")
                        .is_some()
            })
        };
        assert!(
            owns_threshold("bob") && !owns_threshold("kubectl"),
            "{managers:?}"
        );

        let fewer = cluster.file(
            "fewer.yaml",
            &canary_yaml("podinfo", 10).replace("    interval: 1m\n", ""),
        );
        cluster
            .ok(&[
                "apply",
                "--server-side",
                "--field-manager=bob",
                "-f",
                &fewer,
            ])
            .await;
        assert!(
            cluster.canary("podinfo").unwrap()["spec"]["analysis"]["interval"].is_string(),
            "still owned by kubectl"
        );
        let fewer = cluster.file(
            "fewer.yaml",
            &canary_yaml("podinfo", 5).replace("    interval: 1m\n", ""),
        );
        cluster
            .ok(&["apply", "--server-side", "--force-conflicts", "-f", &fewer])
            .await;
        let canary = cluster.canary("podinfo").unwrap();
        assert!(
            canary["spec"]["analysis"]["interval"].is_null(),
            "a field the only owner stopped applying is removed: {canary}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_validation_names_the_unknown_field() {
    no_hang(async {
        let cluster = Cluster::start().await;
        cluster.with_canary("podinfo").await;
        let bad = cluster.file(
            "bad.yaml",
            &format!("{}replicas: 3\n", canary_yaml("other", 5)),
        );
        let stderr = cluster.fails(&["apply", "-f", &bad]).await;
        println!("client-side apply: {stderr}");
        assert!(stderr.contains("unknown field \"replicas\""), "{stderr}");
        let stderr = cluster.fails(&["apply", "--server-side", "-f", &bad]).await;
        println!("server-side apply: {stderr}");
        assert!(stderr.contains("unknown field \"replicas\""), "{stderr}");
        assert!(cluster.canary("other").is_none());

        let deployment = DEPLOYMENT_AND_SERVICE
            .split("---")
            .next()
            .unwrap()
            .replace("REPLICAS", "1");
        let bad = cluster.file("deploy.yaml", &format!("{deployment}replicas: 3\n"));
        let stderr = cluster.fails(&["create", "-f", &bad]).await;
        assert!(stderr.contains("unknown field \"replicas\""), "{stderr}");

        let out = cluster
            .ok(&[
                "apply",
                "--validate=false",
                "-f",
                &cluster.file(
                    "lenient.yaml",
                    &format!("{}replicas: 3\n", canary_yaml("other", 5)),
                ),
            ])
            .await;
        assert!(out.contains("created"), "{out}");
        assert!(
            cluster.canary("other").unwrap().get("replicas").is_none(),
            "pruned without Strict"
        );

        let stderr = cluster
            .fails(&["patch", "canary", "podinfo", "-p", r#"{"spec":{"x":1}}"#])
            .await;
        assert!(
            stderr.contains("application/strategic-merge-patch+json is not supported"),
            "{stderr}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_protocol_over_http() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let client = http1_client();
        let base = cluster.server.url();
        let aggregated = request(&client, Method::GET, &format!("{base}/apis"), &[("accept", "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json")], "").await;
        assert_eq!(aggregated.header("content-type"), Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"));
        let legacy = request(&client, Method::GET, &format!("{base}/api/v1"), &[], "").await.json();
        assert_eq!(legacy["groupVersion"], "v1");
        assert!(legacy["resources"].as_array().unwrap().iter().any(|r| r["name"] == "services/status" && r.get("shortNames").is_none()));
        assert_eq!(request(&client, Method::GET, &format!("{base}/openapi/v2"), &[], "").await.status, 404);

        for n in 0..3 {
            cluster.server.create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{n}"), "labels": {"tier": if n == 0 { "a" } else { "b" }}}})).unwrap();
        }
        let list = request(&client, Method::GET, &format!("{base}/api/v1/namespaces/default/configmaps?&limit=500&labelSelector=tier%20in%20(b)"), &[], "").await.json();
        assert_eq!(list["kind"], "ConfigMapList");
        assert_eq!(list["items"].as_array().unwrap().len(), 2);
        let rv = list["metadata"]["resourceVersion"].as_str().unwrap().to_owned();

        cluster.server.merge_patch("v1", "configmaps", "default", "cm-1", &json!({"data": {"k": "v"}}), false).unwrap();
        cluster.server.delete("v1", "configmaps", "default", "cm-2").unwrap();
        let watch = request(&client, Method::GET, &format!("{base}/api/v1/configmaps?&watch=true&timeoutSeconds=1&allowWatchBookmarks=true&resourceVersion={rv}&fieldSelector=metadata.name%3Dcm-1"), &[], "").await;
        let events: Vec<Value> = watch.body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        println!("watch events: {events:?}");
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["type"], "MODIFIED");
        assert!(events[0]["object"]["metadata"]["resourceVersion"].is_string());

        for n in 0..10_001 {
            cluster.server.merge_patch("v1", "configmaps", "default", "cm-0", &json!({"data": {"n": n.to_string()}}), false).unwrap();
        }
        let expired = request(&client, Method::GET, &format!("{base}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"), &[], "").await;
        let event: Value = serde_json::from_str(expired.body.lines().next().unwrap()).unwrap();
        println!("too old: {event}");
        assert_eq!(event["type"], "ERROR");
        assert_eq!(event["object"]["code"], 410);
        assert_eq!(event["object"]["reason"], "Expired");
    })
    .await;
}

#[test]
fn kubectl_is_installed() {
    let path = kubectl_binary();
    assert!(Path::new(&path).is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_lists_events_by_involved_object_and_get_all_namespaces() {
    no_hang(async {
        let cluster = Cluster::start().await;
        cluster.with_canary("podinfo").await;
        let uid = cluster.canary("podinfo").unwrap()["metadata"]["uid"].clone();
        for (name, object_name, message) in [
            ("podinfo.1", "podinfo", "Advance podinfo.default canary weight 10"),
            ("other.1", "other", "not about podinfo"),
        ] {
            cluster
                .server
                .create(json!({"apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": name, "namespace": "default"},
                    "involvedObject": {"apiVersion": "flagger.app/v1beta1", "kind": "Canary",
                                       "name": object_name, "namespace": "default", "uid": uid},
                    "reason": "Synced", "message": message, "type": "Normal",
                    "source": {"component": "flagger"},
                    "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"}))
                .unwrap();
        }
        let described = cluster.ok(&["describe", "canary", "podinfo"]).await;
        println!("kubectl describe canary podinfo:\n{described}");
        assert!(described.contains("Advance podinfo.default canary weight 10"), "{described}");
        assert!(!described.contains("not about podinfo"), "{described}");

        let events = cluster.ok(&["get", "events"]).await;
        println!("kubectl get events:\n{events}");
        assert!(
            events.lines().any(|l| words(l) == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]),
            "{events}"
        );
        assert!(events.contains("canary/podinfo"), "{events}");

        // A second namespace, from a manifest.
        let namespace = cluster.file("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: test\n");
        let out = cluster.ok(&["apply", "-f", &namespace]).await;
        assert!(out.contains("namespace/test created"), "{out}");
        let file = cluster.file("test.yaml", &canary_yaml("podinfo", 5).replace("namespace: default", "namespace: test"));
        cluster.ok(&["apply", "--server-side", "-f", &file]).await;
        let all = cluster.ok(&["get", "canaries", "-A", "--show-labels"]).await;
        println!("kubectl get canaries -A:\n{all}");
        assert!(all.lines().any(|l| words(l).get(..2) == Some(&["test", "podinfo"])), "{all}");
        assert!(all.lines().any(|l| words(l).get(..2) == Some(&["default", "podinfo"])), "{all}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_writes_the_scale_subresource() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let file = cluster.file("app.yaml", &DEPLOYMENT_AND_SERVICE.replace("REPLICAS", "2"));
        cluster.ok(&["apply", "-f", &file]).await;
        let deployment = || {
            cluster
                .server
                .get("apps/v1", "deployments", "default", "podinfo")
                .unwrap()
        };

        let out = cluster
            .ok(&["scale", "deployment", "podinfo", "--replicas=5"])
            .await;
        assert!(out.contains("deployment.apps/podinfo scaled"), "{out}");
        assert_eq!(deployment()["spec"]["replicas"], 5);
        assert_eq!(deployment()["metadata"]["generation"], 2);
        let counts = cluster.server.request_counts();
        assert_eq!(
            counts.get("patch deployments.apps/scale"),
            Some(&1),
            "{counts:?}"
        );
        let entry = deployment()["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["subresource"] == "scale")
            .cloned()
            .unwrap();
        assert_eq!(entry["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));

        // With a precondition kubectl reads the Scale and replaces it.
        let out = cluster
            .ok(&[
                "scale",
                "deployment/podinfo",
                "--current-replicas=5",
                "--replicas=3",
            ])
            .await;
        assert!(out.contains("deployment.apps/podinfo scaled"), "{out}");
        assert_eq!(deployment()["spec"]["replicas"], 3);
        assert_eq!(deployment()["metadata"]["generation"], 3);
        let counts = cluster.server.request_counts();
        assert_eq!(
            counts.get("get deployments.apps/scale"),
            Some(&1),
            "{counts:?}"
        );
        assert_eq!(
            counts.get("update deployments.apps/scale"),
            Some(&1),
            "{counts:?}"
        );
        let refused = cluster
            .fails(&[
                "scale",
                "deployment/podinfo",
                "--current-replicas=7",
                "--replicas=1",
            ])
            .await;
        println!("kubectl scale with a wrong precondition: {refused}");
        assert!(
            refused.contains("Expected replicas to be 7, was 3"),
            "{refused}"
        );
        assert_eq!(deployment()["spec"]["replicas"], 3);

        let raw = cluster
            .ok(&[
                "get",
                "--raw",
                "/apis/apps/v1/namespaces/default/deployments/podinfo/scale",
            ])
            .await;
        let scale: Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(scale["kind"], "Scale");
        assert_eq!(scale["apiVersion"], "autoscaling/v1");
        assert_eq!(scale["spec"], json!({"replicas": 3}));
        assert_eq!(
            scale["status"],
            json!({"replicas": 0, "selector": "app=podinfo"})
        );
        assert_eq!(
            scale["metadata"]["resourceVersion"],
            deployment()["metadata"]["resourceVersion"]
        );

        // kubectl patch on the subresource, JSON patch and merge patch.
        let out = cluster
            .ok(&[
                "patch",
                "deployment",
                "podinfo",
                "--subresource=scale",
                "--type=json",
                "-p",
                r#"[{"op": "replace", "path": "/spec/replicas", "value": 4}]"#,
            ])
            .await;
        // As from the real server: the answer is a Scale.
        assert!(out.contains("scale.autoscaling/podinfo patched"), "{out}");
        assert_eq!(deployment()["spec"]["replicas"], 4);
        cluster
            .ok(&[
                "patch",
                "deployment",
                "podinfo",
                "--subresource=scale",
                "--type=merge",
                "-p",
                r#"{"spec": {"replicas": 1}}"#,
            ])
            .await;
        assert_eq!(deployment()["spec"]["replicas"], 1);
        let refused = cluster
            .fails(&[
                "patch",
                "deployment",
                "podinfo",
                "--subresource=scale",
                "--type=merge",
                "-p",
                r#"{"spec": {"replicas": -1}}"#,
            ])
            .await;
        assert!(
            refused.contains("must be greater than or equal to 0"),
            "{refused}"
        );
        assert_eq!(deployment()["metadata"]["generation"], 5);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_namespace_and_configmap_send_protobuf() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let out = cluster.ok(&["create", "namespace", "team-a"]).await;
        assert!(out.contains("namespace/team-a created"), "{out}");
        let namespace = cluster
            .server
            .get("v1", "namespaces", "", "team-a")
            .unwrap();
        assert_eq!(namespace["status"]["phase"], "Active");

        let out = cluster
            .ok(&[
                "create",
                "configmap",
                "settings",
                "-n",
                "team-a",
                "--from-literal=mode=fast",
                "--from-literal=level=3",
            ])
            .await;
        assert!(out.contains("configmap/settings created"), "{out}");
        let settings = cluster
            .server
            .get("v1", "configmaps", "team-a", "settings")
            .unwrap();
        assert_eq!(settings["data"], json!({"mode": "fast", "level": "3"}));
        let mode = cluster
            .ok(&[
                "get",
                "configmap",
                "settings",
                "-n",
                "team-a",
                "-o",
                "jsonpath={.data.mode}",
            ])
            .await;
        assert_eq!(mode, "fast");
        let counts = cluster.server.request_counts();
        assert_eq!(counts.get("create namespaces"), Some(&1), "{counts:?}");
        assert_eq!(counts.get("create configmaps"), Some(&1), "{counts:?}");

        // Refusals read as from the real server.
        let again = cluster.fails(&["create", "namespace", "team-a"]).await;
        assert!(
            again.contains(
                "Error from server (AlreadyExists): namespaces \"team-a\" already exists"
            ),
            "{again}"
        );
        let elsewhere = cluster
            .fails(&[
                "create",
                "configmap",
                "settings",
                "-n",
                "nowhere",
                "--from-literal=a=b",
            ])
            .await;
        assert!(
            elsewhere.contains("failed to create configmap: namespaces \"nowhere\" not found"),
            "{elsewhere}"
        );
        // Other kinds kubectl sends as protobuf are refused with a message saying what works.
        let secret = cluster
            .fails(&["create", "secret", "generic", "token", "--from-literal=a=b"])
            .await;
        println!("kubectl create secret generic: {secret}");
        assert!(
            secret.contains("failed to create secret this test server decodes protobuf bodies only for v1 Namespace and v1 ConfigMap"),
            "{secret}"
        );
        let counts = cluster.server.request_counts();
        assert_eq!(counts.get("create secrets"), Some(&1), "{counts:?}");
        assert!(
            cluster
                .server
                .get("v1", "secrets", "default", "token")
                .is_none()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_eviction_deletes_the_pod_and_answers_a_status_of_201() {
    no_hang(async {
        let cluster = Cluster::start().await;
        let client = http1_client();
        let base = format!("{}/api/v1/namespaces/default/pods", cluster.server.url());
        let json_header = [("content-type", "application/json")];
        let pod = |name: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]}})
        };
        let created = cluster.server.create(pod("web-1")).unwrap();
        // A dependent of the pod: garbage collection takes it once the pod is gone.
        cluster
            .server
            .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "web-1-state", "namespace": "default",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web-1",
                        "uid": created["metadata"]["uid"], "controller": true}]},
                "data": {"a": "b"}}))
            .unwrap();
        let feed = cluster
            .server
            .subscribe(|group, plural, _| group.is_empty() && plural == "pods");

        // Discovery lists the subresource as the real server does.
        let resources: Value =
            serde_json::from_str(&cluster.ok(&["get", "--raw", "/api/v1"]).await).unwrap();
        let entry = resources["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["name"] == "pods/eviction")
            .cloned();
        assert_eq!(
            entry,
            Some(
                json!({"name": "pods/eviction", "singularName": "", "namespaced": true,
                "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]})
            ),
            "{resources}"
        );
        let aggregated = request(
            &client,
            Method::GET,
            &format!("{}/api", cluster.server.url()),
            &[(
                "accept",
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            )],
            "",
        )
        .await
        .json();
        let pods = aggregated["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|resource| resource["resource"] == "pods")
            .cloned()
            .unwrap();
        assert_eq!(
            pods["subresources"][0],
            json!({"subresource": "eviction",
                "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                "verbs": ["create"]}),
            "{pods}"
        );

        // A name that is not the URL's: 400, and the pod stays.
        let wrong = request(
            &client,
            Method::POST,
            &format!("{base}/web-1/eviction"),
            &json_header,
            json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-2"}})
                .to_string(),
        )
        .await;
        assert_eq!(wrong.status.as_u16(), 400, "{}", wrong.body);
        assert_eq!(wrong.json()["reason"], "BadRequest");
        assert_eq!(
            wrong.json()["message"],
            "name in URL does not match name in Eviction object"
        );
        let read = request(
            &client,
            Method::GET,
            &format!("{base}/web-1/eviction"),
            &[],
            "",
        )
        .await;
        assert_eq!(read.status.as_u16(), 405, "{}", read.body);
        assert!(
            cluster
                .server
                .get("v1", "Pod", "default", "web-1")
                .is_some()
        );

        // The request kube-rs 5 (`Api::<Pod>::evict`) sends: no apiVersion or kind, and its
        // options under `delete_options`, a field the server does not know (a warning).
        let evicted = request(
            &client,
            Method::POST,
            &format!("{base}/web-1/eviction?"),
            &json_header,
            r#"{"delete_options":null,"metadata":{"name":"web-1"}}"#,
        )
        .await;
        assert_eq!(evicted.status.as_u16(), 201, "{}", evicted.body);
        assert_eq!(
            evicted.json(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Success", "code": 201})
        );
        assert!(
            evicted
                .header("warning")
                .is_some_and(|warning| warning.contains("unknown field \\\"delete_options\\\"")),
            "{:?}",
            evicted.headers
        );
        assert!(
            cluster
                .server
                .get("v1", "Pod", "default", "web-1")
                .is_none()
        );
        let deleted = feed
            .next_within(weir_testkit::wait::DEADLINE)
            .expect("a change for the evicted pod");
        assert_eq!(
            (deleted.kind, deleted.object["metadata"]["name"].clone()),
            (
                weir_testkit::kube_server::ChangeKind::Deleted,
                json!("web-1")
            )
        );
        assert!(
            cluster
                .server
                .get("v1", "ConfigMap", "default", "web-1-state")
                .is_none(),
            "the pod's dependent is collected"
        );

        // A policy/v1 Eviction as a client-go client writes it, through kubectl's raw POST;
        // its deleteOptions hold (a precondition that fails is a 409 and the pod stays).
        cluster.server.create(pod("web-2")).unwrap();
        let stale = cluster.file(
            "stale.json",
            &json!({"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "web-2", "namespace": "default"},
                "deleteOptions": {"preconditions": {"uid": "not-its-uid"}}})
            .to_string(),
        );
        let refused = cluster
            .fails(&[
                "create",
                "--raw",
                "/api/v1/namespaces/default/pods/web-2/eviction",
                "-f",
                &stale,
            ])
            .await;
        assert!(refused.contains("Precondition failed"), "{refused}");
        assert!(
            cluster
                .server
                .get("v1", "Pod", "default", "web-2")
                .is_some()
        );
        let eviction = cluster.file(
            "eviction.json",
            &json!({"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "web-2", "namespace": "default"}})
            .to_string(),
        );
        let out = cluster
            .ok(&[
                "create",
                "--raw",
                "/api/v1/namespaces/default/pods/web-2/eviction",
                "-f",
                &eviction,
            ])
            .await;
        let status: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (status["status"].clone(), status["code"].clone()),
            (json!("Success"), json!(201))
        );
        assert!(
            cluster
                .server
                .get("v1", "Pod", "default", "web-2")
                .is_none()
        );

        // A pod that is not there: 404 NotFound, as kubectl reports it.
        let missing = request(
            &client,
            Method::POST,
            &format!("{base}/web-1/eviction"),
            &json_header,
            json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1"}})
                .to_string(),
        )
        .await;
        assert_eq!(missing.status.as_u16(), 404, "{}", missing.body);
        assert_eq!(missing.json()["reason"], "NotFound");
        assert_eq!(missing.json()["message"], "pods \"web-1\" not found");
        let gone = cluster
            .fails(&[
                "create",
                "--raw",
                "/api/v1/namespaces/default/pods/web-2/eviction",
                "-f",
                &eviction,
            ])
            .await;
        assert!(
            gone.contains("Error from server (NotFound): pods \"web-2\" not found"),
            "{gone}"
        );
        let counts = cluster.server.request_counts();
        assert_eq!(counts.get("create pods/eviction"), Some(&6), "{counts:?}");
        assert_eq!(counts.get("get pods/eviction"), Some(&1), "{counts:?}");
    })
    .await;
}
