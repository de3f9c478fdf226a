//! weir's Argo Experiment controller (`weir_kube::argo_experiments::run`) against the in-memory
//! API server, with the testkit's ReplicaSet controller making pods available and weir's
//! AnalysisRun controller measuring the runs (web metrics over real HTTP on loopback): an
//! Experiment that runs its duration, one whose analysis fails, one terminated by the user.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weir_testkit::argo_cluster::install_argo_crds;
use weir_testkit::deployment_controller::{DeploymentController, Readiness};
use weir_testkit::kube_server::KubeServer;
use weir_testkit::wait::{no_hang, wait_for_ok};

const NAMESPACE: &str = "experiments";
const ARGO: &str = "argoproj.io/v1alpha1";

/// The API server with Argo's CRDs, the played ReplicaSet controller, and weir's Experiment and
/// AnalysisRun controllers running on it.
struct Cluster {
    server: Arc<KubeServer>,
    _pods: DeploymentController,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Cluster {
    async fn up(readiness: Readiness) -> Cluster {
        let server = Arc::new(KubeServer::start().await);
        server
            .create(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
            )
            .unwrap();
        install_argo_crds(&server);
        let client =
            kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        let pods = DeploymentController::spawn(server.clone(), "", readiness);
        let namespaces = vec![NAMESPACE.to_string()];
        let tasks = vec![
            tokio::spawn(weir_kube::argo_experiments::run(
                client.clone(),
                namespaces.clone(),
            )),
            tokio::spawn(weir_kube::argo_analysis::run(client, namespaces)),
        ];
        Cluster {
            server,
            _pods: pods,
            tasks,
        }
    }

    fn create(&self, object: Value) {
        self.server.create(object).unwrap();
    }

    fn experiment(&self, name: &str) -> Value {
        self.server
            .get(ARGO, "Experiment", NAMESPACE, name)
            .unwrap_or(Value::Null)
    }

    fn replica_set(&self, name: &str) -> Value {
        self.server
            .get("apps/v1", "ReplicaSet", NAMESPACE, name)
            .unwrap_or(Value::Null)
    }

    /// The Experiment's status once `check` holds for it.
    async fn status_until(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        wait_for_ok(what, || async {
            let status = self.experiment(name)["status"].clone();
            if check(&status) {
                Ok(status)
            } else {
                Err(status.to_string())
            }
        })
        .await
    }

    /// The ReplicaSet once `check` holds for it.
    async fn replica_set_until(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_for_ok(what, || async {
            let rs = self.replica_set(name);
            if check(&rs) {
                Ok(rs)
            } else {
                Err(rs.to_string())
            }
        })
        .await
    }
}

fn template(name: &str, replicas: Option<i64>) -> Value {
    let mut template = json!({
        "name": name,
        "selector": {"matchLabels": {"app": "demo"}},
        "template": {"metadata": {"labels": {"app": "demo"}},
            "spec": {"containers": [{"name": "demo", "image": format!("demo:{name}"),
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]}},
    });
    if let Some(replicas) = replicas {
        template["replicas"] = json!(replicas);
    }
    template
}

fn experiment(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": ARGO, "kind": "Experiment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    })
}

/// An AnalysisTemplate whose one web metric reads `{$.value}` from `{{args.url}}` every
/// `interval` and passes when it is above 5 (`count` measurements; none: until terminated).
fn web_template(name: &str, interval: &str, count: Option<i64>) -> Value {
    let mut metric = json!({
        "name": "web", "interval": interval, "successCondition": "result > 5",
        "failureLimit": 0,
        "provider": {"web": {"url": "{{args.url}}", "jsonPath": "{$.value}"}},
    });
    if let Some(count) = count {
        metric["count"] = json!(count);
    }
    json!({
        "apiVersion": ARGO, "kind": "AnalysisTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"args": [{"name": "url"}], "metrics": [metric]},
    })
}

/// An HTTP/1.1 server on `127.0.0.1:0` answering every request with `200` and `body`.
async fn web_double(body: Value) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let body = body.to_string();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let body = body.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => request.extend_from_slice(&buffer[..read]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

fn phase_is(phase: &'static str) -> impl Fn(&Value) -> bool {
    move |status| status["phase"] == json!(phase)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_templates_run_pending_then_running_for_their_duration_then_successful_and_scaled_to_0()
{
    no_hang(async {
        // Pods take a while, so that Pending is seen.
        let cluster = Cluster::up(Readiness::After(Duration::from_millis(1500))).await;
        let mut canary = template("canary", Some(2));
        canary["service"] = json!({});
        cluster.create(experiment(
            "pair",
            json!({
                "duration": "2s",
                "scaleDownDelaySeconds": 1,
                "templates": [template("baseline", None), canary],
            }),
        ));

        let pending = cluster
            .status_until("pair", "the Experiment Pending", phase_is("Pending"))
            .await;
        assert!(pending.get("availableAt").is_none(), "{pending}");
        let baseline = cluster
            .replica_set_until("pair-baseline", "ReplicaSet pair-baseline", |rs| {
                rs["spec"]["replicas"] == json!(1)
            })
            .await;
        let canary_rs = cluster
            .replica_set_until("pair-canary", "ReplicaSet pair-canary", |rs| {
                rs["spec"]["replicas"] == json!(2)
            })
            .await;
        // Each template's pods carry its own hash: the two ReplicaSets select apart.
        let hash_of = |rs: &Value| {
            rs["spec"]["template"]["metadata"]["labels"]["rollouts-pod-template-hash"].clone()
        };
        assert_ne!(hash_of(&baseline), hash_of(&canary_rs));
        assert_eq!(
            baseline["spec"]["selector"]["matchLabels"]["rollouts-pod-template-hash"],
            hash_of(&baseline)
        );
        assert_eq!(
            baseline["metadata"]["ownerReferences"][0]["kind"],
            json!("Experiment")
        );
        assert_eq!(
            baseline["metadata"]["ownerReferences"][0]["controller"],
            json!(true)
        );

        let running = cluster
            .status_until("pair", "the Experiment Running", phase_is("Running"))
            .await;
        let available_at: Timestamp = running["availableAt"].as_str().unwrap().parse().unwrap();
        let statuses = running["templateStatuses"].as_array().unwrap();
        assert_eq!(statuses.len(), 2);
        assert_eq!(statuses[1]["name"], json!("canary"));
        assert_eq!(statuses[1]["availableReplicas"], json!(2));
        assert_eq!(statuses[1]["status"], json!("Running"));
        assert_eq!(statuses[1]["podTemplateHash"], hash_of(&canary_rs));
        assert_eq!(statuses[1]["serviceName"], json!("pair-canary"));
        // The canary's Service, while it runs: its pods by their hash, their port.
        let service = wait_for_ok("the canary's Service", || async {
            cluster
                .server
                .get("v1", "Service", NAMESPACE, "pair-canary")
                .ok_or_else(|| "absent".to_string())
        })
        .await;
        assert_eq!(
            service["spec"]["selector"]["rollouts-pod-template-hash"],
            hash_of(&canary_rs)
        );
        assert_eq!(service["spec"]["ports"][0]["port"], json!(8080));

        let done = cluster
            .status_until("pair", "the Experiment Successful", phase_is("Successful"))
            .await;
        let ended = Timestamp::now();
        assert!(
            ended.duration_since(available_at) >= jiff::SignedDuration::from_secs(2),
            "ended {ended}, available at {available_at}"
        );
        assert!(
            done["message"].as_str().unwrap().contains("duration"),
            "{done}"
        );
        for name in ["pair-baseline", "pair-canary"] {
            cluster
                .replica_set_until(name, "the ReplicaSet scaled to 0", |rs| {
                    rs["spec"]["replicas"] == json!(0)
                })
                .await;
        }
        cluster
            .status_until("pair", "the templates Successful", |status| {
                status["templateStatuses"]
                    .as_array()
                    .is_some_and(|all| all.iter().all(|t| t["status"] == json!("Successful")))
            })
            .await;
        wait_for_ok("the canary's Service deleted", || async {
            match cluster
                .server
                .get("v1", "Service", NAMESPACE, "pair-canary")
            {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            }
        })
        .await;
        assert_eq!(
            cluster.experiment("pair")["status"]["phase"],
            json!("Successful")
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_analysis_that_fails_ends_the_experiment_failed_early_with_the_runs_message() {
    no_hang(async {
        let cluster = Cluster::up(Readiness::Instant).await;
        let web = web_double(json!({"value": 1})).await;
        cluster.create(web_template("low", "1s", Some(3)));
        cluster.create(experiment(
            "failing",
            json!({
                "duration": "10m",
                "scaleDownDelaySeconds": 0,
                "templates": [template("baseline", None)],
                "analyses": [{"name": "check", "templateName": "low",
                    "args": [{"name": "url", "value": format!("http://{web}/value")}]}],
            }),
        ));
        let failed = cluster
            .status_until("failing", "the Experiment Failed", phase_is("Failed"))
            .await;
        let run = cluster
            .server
            .get(ARGO, "AnalysisRun", NAMESPACE, "failing-check")
            .unwrap();
        assert_eq!(run["status"]["phase"], json!("Failed"));
        let message = run["status"]["message"].as_str().unwrap();
        assert!(!message.is_empty());
        assert_eq!(failed["message"], json!(message));
        assert_eq!(
            failed["analysisRuns"][0],
            json!({"name": "check", "analysisRun": "failing-check", "phase": "Failed",
                "message": message})
        );
        assert_eq!(
            run["metadata"]["ownerReferences"][0]["name"],
            json!("failing")
        );
        assert_eq!(
            run["spec"]["args"][0],
            json!({"name": "url", "value": format!("http://{web}/value")})
        );
        cluster
            .replica_set_until("failing-baseline", "the ReplicaSet scaled to 0", |rs| {
                rs["spec"]["replicas"] == json!(0)
            })
            .await;
        let last = cluster
            .status_until("failing", "the template Failed", |status| {
                status["templateStatuses"][0]["status"] == json!("Failed")
            })
            .await;
        assert_eq!(last["phase"], json!("Failed"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn terminate_ends_a_running_experiment_successful_and_terminates_its_run() {
    no_hang(async {
        let cluster = Cluster::up(Readiness::Instant).await;
        let web = web_double(json!({"value": 9})).await;
        // Measured every second without a count: it runs until terminated.
        cluster.create(web_template("forever", "1s", None));
        cluster.create(experiment(
            "open",
            json!({
                "scaleDownDelaySeconds": 0,
                "templates": [template("baseline", None)],
                "analyses": [{"name": "watch", "templateName": "forever",
                    "args": [{"name": "url", "value": format!("http://{web}/value")}]}],
            }),
        ));
        cluster
            .status_until("open", "the run Running", |status| {
                status["phase"] == json!("Running")
                    && status["analysisRuns"][0]["phase"] == json!("Running")
            })
            .await;
        // Nothing ends it by itself: still Running a while later (a run measured twice more).
        wait_for_ok("two more measurements", || async {
            let run = cluster
                .server
                .get(ARGO, "AnalysisRun", NAMESPACE, "open-watch")
                .unwrap_or(Value::Null);
            match run["status"]["metricResults"][0]["count"].as_i64() {
                Some(count) if count >= 3 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        assert_eq!(
            cluster.experiment("open")["status"]["phase"],
            json!("Running")
        );

        cluster
            .server
            .merge_patch(
                ARGO,
                "Experiment",
                NAMESPACE,
                "open",
                &json!({"spec": {"terminate": true}}),
                false,
            )
            .unwrap();
        let done = cluster
            .status_until("open", "the Experiment Successful", phase_is("Successful"))
            .await;
        assert!(
            done["message"].as_str().unwrap().contains("terminated"),
            "{done}"
        );
        let run = wait_for_ok("the run terminated", || async {
            let run = cluster
                .server
                .get(ARGO, "AnalysisRun", NAMESPACE, "open-watch")
                .unwrap_or(Value::Null);
            if run["spec"]["terminate"] == json!(true) {
                Ok(run)
            } else {
                Err(run.to_string())
            }
        })
        .await;
        assert_eq!(
            run["metadata"]["ownerReferences"][0]["kind"],
            json!("Experiment")
        );
        cluster
            .replica_set_until("open-baseline", "the ReplicaSet scaled to 0", |rs| {
                rs["spec"]["replicas"] == json!(0)
            })
            .await;
    })
    .await;
}
