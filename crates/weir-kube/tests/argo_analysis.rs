//! weir's Argo AnalysisRun controller (`weir_kube::argo_analysis::run`) against the in-memory API
//! server: web metrics over real HTTP on loopback, job metrics run by the testkit's Job
//! controller, `spec.terminate`, secret arguments, unsupported providers, and a controller stopped
//! mid-run and started again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use weir_testkit::argo_cluster::install_argo_crds;
use weir_testkit::job_controller::JobController;
use weir_testkit::kube_server::KubeServer;
use weir_testkit::wait::{no_hang, wait_for_ok};

const NAMESPACE: &str = "analysis";
const RUNS: &str = "argoproj.io/v1alpha1";

/// The API server with Argo's CRDs, and weir's analysis controller running on it.
struct Cluster {
    server: Arc<KubeServer>,
    client: kube::Client,
    controller: Option<JoinHandle<()>>,
}

impl Cluster {
    async fn up() -> Cluster {
        let server = Arc::new(KubeServer::start().await);
        server
            .create(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
            )
            .unwrap();
        install_argo_crds(&server);
        let client =
            kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        let mut cluster = Cluster {
            server,
            client,
            controller: None,
        };
        cluster.start_controller();
        cluster
    }

    fn start_controller(&mut self) {
        self.controller = Some(tokio::spawn(weir_kube::argo_analysis::run(
            self.client.clone(),
            vec![NAMESPACE.to_string()],
        )));
    }

    /// Stops the controller as a killed process would stop: its task (and every run's task
    /// with it) is gone.
    async fn stop_controller(&mut self) {
        if let Some(controller) = self.controller.take() {
            controller.abort();
            let ended = controller.await;
            assert!(ended.is_err_and(|error| error.is_cancelled()));
        }
    }

    fn create_run(&self, name: &str, spec: Value) -> Value {
        self.server
            .create(json!({
                "apiVersion": RUNS, "kind": "AnalysisRun",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": spec,
            }))
            .unwrap()
    }

    fn run(&self, name: &str) -> Value {
        self.server
            .get(RUNS, "AnalysisRun", NAMESPACE, name)
            .unwrap_or(Value::Null)
    }

    /// The run's status once its phase is `phase`.
    async fn status_when(&self, name: &str, phase: &str) -> Value {
        wait_for_ok(&format!("AnalysisRun {name} to be {phase}"), || async {
            let status = self.run(name)["status"].clone();
            if status["phase"] == json!(phase) {
                Ok(status)
            } else {
                Err(status.to_string())
            }
        })
        .await
    }

    /// The run's status once `check` holds for it.
    async fn status_until(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        wait_for_ok(what, || async {
            let status = self.run(name)["status"].clone();
            if check(&status) {
                Ok(status)
            } else {
                Err(status.to_string())
            }
        })
        .await
    }
}

/// An HTTP/1.1 server on `127.0.0.1:0` answering every request with `200` and the JSON body it
/// is given, counting requests and keeping their paths.
struct WebDouble {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    paths: Arc<Mutex<Vec<String>>>,
}

impl WebDouble {
    async fn start(body: Value) -> WebDouble {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let body = body.to_string();
        let (counted, seen) = (hits.clone(), paths.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                let (counted, seen, body) = (counted.clone(), seen.clone(), body.clone());
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0u8; 4096];
                    while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => request.extend_from_slice(&buffer[..read]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let path = text.split(' ').nth(1).unwrap_or("").to_string();
                    seen.lock().unwrap().push(path);
                    counted.fetch_add(1, Ordering::SeqCst);
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        WebDouble { addr, hits, paths }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn job_metric(name: &str, script: &str) -> Value {
    json!({"name": name, "provider": {"job": {
        "metadata": {"labels": {"team": "checks"}},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "check", "image": "busybox", "command": ["sh", "-c", script]}]}}}
    }}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_web_metric_passing_three_times_ends_successful_with_three_measurements() {
    no_hang(async {
        let cluster = Cluster::up().await;
        let web = WebDouble::start(json!({"data": {"ok": true, "value": 7}})).await;
        cluster.create_run(
            "passes",
            json!({"metrics": [{
                "name": "web", "interval": "1s", "count": 3, "successCondition": "result > 5",
                "provider": {"web": {"url": web.url("/metrics"), "jsonPath": "{$.data.value}"}}
            }]}),
        );
        let status = cluster.status_when("passes", "Successful").await;
        let result = &status["metricResults"][0];
        assert_eq!(result["name"], json!("web"));
        assert_eq!(result["phase"], json!("Successful"));
        assert_eq!(
            (&result["count"], &result["successful"]),
            (&json!(3), &json!(3))
        );
        let measurements = result["measurements"].as_array().unwrap();
        assert_eq!(measurements.len(), 3);
        for measurement in measurements {
            assert_eq!(measurement["phase"], json!("Successful"));
            assert_eq!(measurement["value"], json!("7"));
            assert!(measurement["finishedAt"].is_string());
        }
        assert_eq!(status["runSummary"], json!({"count": 1, "successful": 1}));
        assert!(status["startedAt"].is_string() && status["completedAt"].is_string());
        assert!(status.get("message").is_none());
        assert_eq!(web.hits(), 3);
        assert_eq!(*web.paths.lock().unwrap(), vec!["/metrics"; 3]);
        // The status is written when it changes, never more: the start, then each measurement.
        let writes = cluster.server.request_counts();
        assert_eq!(
            writes.get("patch analysisruns.argoproj.io/status"),
            Some(&4),
            "{writes:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_web_metric_failing_with_failure_limit_0_fails_the_run_with_argos_message() {
    no_hang(async {
        let cluster = Cluster::up().await;
        let web = WebDouble::start(json!({"ok": false})).await;
        cluster.create_run(
            "fails",
            json!({"metrics": [{
                "name": "web", "interval": "1s", "count": 3, "failureLimit": 0,
                "successCondition": "result == true",
                "provider": {"web": {"url": web.url("/"), "jsonPath": "{$.ok}"}}
            }]}),
        );
        let status = cluster.status_when("fails", "Failed").await;
        assert_eq!(
            status["message"],
            json!("Metric \"web\" assessed Failed due to failed (1) > failureLimit (0)")
        );
        let result = &status["metricResults"][0];
        assert_eq!(
            (&result["count"], &result["failed"]),
            (&json!(1), &json!(1))
        );
        assert_eq!(result["measurements"][0]["value"], json!("false"));
        assert_eq!(result["measurements"][0]["phase"], json!("Failed"));
        assert_eq!(status["runSummary"], json!({"count": 1, "failed": 1}));
        assert_eq!(web.hits(), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_metric_whose_job_completes_is_successful() {
    no_hang(async {
        let cluster = Cluster::up().await;
        let _jobs = JobController::spawn(cluster.server.clone(), NAMESPACE);
        let run = cluster.create_run(
            "job-ok",
            json!({"metrics": [job_metric("check", "exit 0")]}),
        );
        let uid = run["metadata"]["uid"].as_str().unwrap().to_string();
        let status = cluster.status_when("job-ok", "Successful").await;
        let result = &status["metricResults"][0];
        assert_eq!(
            (&result["phase"], &result["count"], &result["successful"]),
            (&json!("Successful"), &json!(1), &json!(1))
        );
        assert_eq!(result["measurements"][0]["phase"], json!("Successful"));
        let name = format!("{uid}.check.1");
        let job = cluster
            .server
            .get("batch/v1", "Job", NAMESPACE, &name)
            .unwrap_or_else(|| panic!("Job {name} was not created"));
        assert_eq!(
            job["metadata"]["labels"],
            json!({"team": "checks", "analysisrun.argoproj.io/uid": uid})
        );
        assert_eq!(
            job["metadata"]["annotations"]["analysisrun.argoproj.io/name"],
            json!("job-ok")
        );
        assert_eq!(
            job["metadata"]["annotations"]["analysisrun.argoproj.io/metric-name"],
            json!("check")
        );
        let owner = &job["metadata"]["ownerReferences"][0];
        assert_eq!(
            (
                &owner["kind"],
                &owner["name"],
                &owner["uid"],
                &owner["controller"]
            ),
            (
                &json!("AnalysisRun"),
                &json!("job-ok"),
                &json!(uid),
                &json!(true)
            )
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_metric_whose_job_fails_fails_the_run() {
    no_hang(async {
        let cluster = Cluster::up().await;
        let _jobs = JobController::spawn(cluster.server.clone(), NAMESPACE);
        cluster.create_run(
            "job-fails",
            json!({"metrics": [job_metric("check", "exit 3")]}),
        );
        let status = cluster.status_when("job-fails", "Failed").await;
        assert_eq!(
            status["message"],
            json!("Metric \"check\" assessed Failed due to failed (1) > failureLimit (0)")
        );
        let result = &status["metricResults"][0];
        assert_eq!(
            (&result["count"], &result["failed"]),
            (&json!(1), &json!(1))
        );
        assert_eq!(result["measurements"][0]["phase"], json!("Failed"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn terminate_ends_a_run_successfully_and_deletes_the_job_in_flight() {
    no_hang(async {
        let cluster = Cluster::up().await;
        let _jobs = JobController::spawn(cluster.server.clone(), NAMESPACE);
        let web = WebDouble::start(json!(1)).await;
        let run = cluster.create_run(
            "ended",
            json!({"metrics": [
                {"name": "web", "interval": "1s", "successCondition": "result == 1",
                    "provider": {"web": {"url": web.url("/")}}},
                job_metric("slow", "sleep 60")
            ]}),
        );
        let uid = run["metadata"]["uid"].as_str().unwrap().to_string();
        let job = format!("{uid}.slow.1");
        cluster
            .status_until(
                "ended",
                "a web measurement and the Job in flight",
                |status| {
                    status["metricResults"][0]["count"].as_i64() >= Some(1)
                        && status["metricResults"][1]["measurements"][0]["phase"]
                            == json!("Running")
                },
            )
            .await;
        assert!(
            cluster
                .server
                .get("batch/v1", "Job", NAMESPACE, &job)
                .is_some()
        );
        cluster
            .server
            .merge_patch(
                RUNS,
                "AnalysisRun",
                NAMESPACE,
                "ended",
                &json!({"spec": {"terminate": true}}),
                false,
            )
            .unwrap();
        let status = cluster.status_when("ended", "Successful").await;
        assert_eq!(status["message"], json!("Run Terminated"));
        let slow = &status["metricResults"][1];
        assert_eq!(slow["phase"], json!("Successful"));
        assert_eq!(
            slow["measurements"][0]["message"],
            json!("Metric Terminated")
        );
        wait_for_ok("the Job in flight to be deleted", || async {
            match cluster.server.get("batch/v1", "Job", NAMESPACE, &job) {
                None => Ok(()),
                Some(job) => Err(job["metadata"].to_string()),
            }
        })
        .await;
        // Nothing is measured after the run ended: an absence, so it is watched for a while (a
        // metric of interval 1s would have measured twice) rather than waited for.
        let hits = web.hits();
        let count = status["metricResults"][0]["count"].clone();
        tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
        assert_eq!(web.hits(), hits);
        assert_eq!(
            cluster.run("ended")["status"]["metricResults"][0]["count"],
            count
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_controller_neither_loses_nor_repeats_measurements() {
    no_hang(async {
        let mut cluster = Cluster::up().await;
        let web = WebDouble::start(json!({"value": 9})).await;
        cluster.create_run(
            "restarted",
            json!({"metrics": [{
                "name": "web", "interval": "3s", "count": 3, "successCondition": "result > 5",
                "provider": {"web": {"url": web.url("/"), "jsonPath": "{$.value}"}}
            }]}),
        );
        cluster
            .status_until("restarted", "the first measurement", |status| {
                status["metricResults"][0]["count"] == json!(1)
            })
            .await;
        cluster.stop_controller().await;
        let recorded = cluster.run("restarted")["status"]["metricResults"][0]["count"].clone();
        assert_eq!(recorded, json!(1));
        assert_eq!(web.hits(), 1);
        cluster.start_controller();
        let status = cluster.status_when("restarted", "Successful").await;
        let result = &status["metricResults"][0];
        assert_eq!(
            (&result["count"], &result["successful"]),
            (&json!(3), &json!(3))
        );
        assert_eq!(result["measurements"].as_array().unwrap().len(), 3);
        assert_eq!(web.hits(), 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_argument_is_used_and_never_shown() {
    no_hang(async {
        let cluster = Cluster::up().await;
        cluster
            .server
            .create(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "api", "namespace": NAMESPACE},
                // "s3cret-token"
                "data": {"token": "czNjcmV0LXRva2Vu"}}))
            .unwrap();
        let web = WebDouble::start(json!(true)).await;
        // A port nothing listens on: the error message names the URL, with the secret in it.
        let closed = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let secret_arg = json!({"name": "token", "valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}}});
        cluster.create_run(
            "used",
            json!({"args": [secret_arg.clone()], "metrics": [{"name": "web",
                "provider": {"web": {"url": web.url("/check/{{args.token}}")}}}]}),
        );
        cluster.status_when("used", "Successful").await;
        assert_eq!(*web.paths.lock().unwrap(), vec!["/check/s3cret-token"]);

        cluster.create_run(
            "refused",
            json!({"args": [secret_arg], "metrics": [{"name": "web", "consecutiveErrorLimit": 0,
                "provider": {"web": {"url": format!("http://{closed}/check/{{{{args.token}}}}")}}}]}),
        );
        let status = cluster.status_when("refused", "Error").await;
        let text = status.to_string();
        assert!(!text.contains("s3cret"), "{text}");
        let message = status["metricResults"][0]["measurements"][0]["message"]
            .as_str()
            .unwrap();
        assert!(
            message.contains(&format!("http://{closed}/check/*****")),
            "{message}"
        );
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .starts_with("Metric \"web\" assessed Error due to consecutiveErrors (1) > consecutiveErrorLimit (0)"),
            "{status}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_metric_of_another_provider_is_an_error_naming_it() {
    no_hang(async {
        let cluster = Cluster::up().await;
        cluster.create_run(
            "wavefront",
            json!({"metrics": [{"name": "dd", "consecutiveErrorLimit": 0,
                "provider": {"wavefront": {"query": "avg:errors{*}"}}}]}),
        );
        let status = cluster.status_when("wavefront", "Error").await;
        assert_eq!(
            status["message"],
            json!("Metric \"dd\" assessed Error due to consecutiveErrors (1) > consecutiveErrorLimit (0): \"Error Message: metric provider wavefront is not supported: weir's Argo analysis runs web, prometheus, job, graphite, datadog, newRelic and influxdb metrics\"")
        );
    })
    .await;
}

/// The Prometheus API's answer to an instant query, played by the double: a vector is an array
/// of numbers to the conditions, and the query is sent encoded.
#[tokio::test(flavor = "multi_thread")]
async fn a_prometheus_vector_is_an_array_of_numbers() {
    no_hang(async {
        let cluster = Cluster::up().await;
        let prometheus = WebDouble::start(json!({"status": "success", "data": {
            "resultType": "vector",
            "result": [{"metric": {"service": "web"}, "value": [1_700_000_000.0, "0.97"]}]
        }}))
        .await;
        cluster.create_run(
            "prom",
            json!({"args": [{"name": "service", "value": "web"}], "metrics": [{
                "name": "success-rate", "successCondition": "len(result) == 1 && result[0] >= 0.95",
                "provider": {"prometheus": {"address": prometheus.url(""),
                    "query": "sum(rate(ok{service=\"{{args.service}}\"}[5m]))"}}
            }]}),
        );
        let status = cluster.status_when("prom", "Successful").await;
        assert_eq!(
            status["metricResults"][0]["measurements"][0]["value"],
            json!("[0.97]")
        );
        assert_eq!(
            *prometheus.paths.lock().unwrap(),
            vec!["/api/v1/query?query=sum%28rate%28ok%7Bservice%3D%22web%22%7D%5B5m%5D%29%29"]
        );
    })
    .await;
}

/// A Job in flight when the controller stops is found again by its name when it starts: no
/// second Job, and its end is recorded once.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_in_flight_is_found_again_after_a_restart() {
    no_hang(async {
        let mut cluster = Cluster::up().await;
        let _jobs = JobController::spawn(cluster.server.clone(), NAMESPACE);
        let release = std::env::temp_dir().join(format!(
            "weir-argo-analysis-release-{}-{}",
            std::process::id(),
            cluster.server.addr().port()
        ));
        let _ = std::fs::remove_file(&release);
        let script = format!(
            "while [ ! -e '{}' ]; do sleep 0.05; done",
            release.display()
        );
        let run = cluster.create_run(
            "job-restart",
            json!({"metrics": [job_metric("check", &script)]}),
        );
        let uid = run["metadata"]["uid"].as_str().unwrap().to_string();
        cluster
            .status_until("job-restart", "the Job's measurement in flight", |status| {
                status["metricResults"][0]["measurements"][0]["phase"] == json!("Running")
            })
            .await;
        cluster.stop_controller().await;
        cluster.start_controller();
        std::fs::write(&release, b"go").unwrap();
        let status = cluster.status_when("job-restart", "Successful").await;
        let _ = std::fs::remove_file(&release);
        let result = &status["metricResults"][0];
        assert_eq!(
            (&result["count"], &result["successful"]),
            (&json!(1), &json!(1))
        );
        assert_eq!(result["measurements"].as_array().unwrap().len(), 1);
        let jobs: Vec<String> = cluster
            .server
            .list("batch/v1", "Job", NAMESPACE)
            .iter()
            .map(|job| job["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(jobs, vec![format!("{uid}.check.1")]);
    })
    .await;
}

/// A real Prometheus (the test is skipped outside CI when it is not installed): a vector, an
/// empty vector and a scalar, as Argo hands them to the conditions.
#[tokio::test(flavor = "multi_thread")]
async fn a_real_prometheus_answers_vectors_and_scalars() {
    use weir_testkit::prometheus::{self, PrometheusOptions, PrometheusServer};
    if !prometheus::required() {
        return;
    }
    no_hang(async {
        let server = tokio::task::spawn_blocking(|| {
            PrometheusServer::start(&PrometheusOptions::default()).unwrap()
        })
        .await
        .unwrap();
        let cluster = Cluster::up().await;
        let metric = |name: &str, query: &str, condition: &str| {
            json!({"name": name, "successCondition": condition,
                "provider": {"prometheus": {"address": server.url(), "query": query, "timeout": 20}}})
        };
        cluster.create_run(
            "real-prom",
            json!({"metrics": [
                metric("vector", "vector(0.97)", "result[0] >= 0.95"),
                metric("empty", "up{job=\"nobody\"}", "len(result) == 0"),
                metric("scalar", "2 * 3", "result == 6"),
            ]}),
        );
        let status = cluster.status_when("real-prom", "Successful").await;
        let values: Vec<&Value> = status["metricResults"]
            .as_array()
            .unwrap()
            .iter()
            .map(|result| &result["measurements"][0]["value"])
            .collect();
        assert_eq!(values, [&json!("[0.97]"), &json!("[]"), &json!("6")]);
        assert_eq!(status["runSummary"], json!({"count": 3, "successful": 3}));
    })
    .await;
}

/// A graphite metric against the testkit's graphite-web double: `result` is the array of the
/// first series' values, shown with six decimals; a passing value ends the run Successful, a
/// failing one Failed.
#[tokio::test(flavor = "multi_thread")]
async fn a_graphite_metric_is_an_array_of_values_judged_by_its_conditions() {
    no_hang(async {
        let cluster = Cluster::up().await;
        let graphite = weir_testkit::metric_doubles::MetricDouble::graphite(None);
        graphite.serve_for("good.rate", Some(97.5));
        graphite.serve_for("bad.rate", Some(50.0));
        let metric = |target: &str| {
            json!({"metrics": [{"name": "success-rate", "successCondition": "result[0] >= 90",
                "provider": {"graphite": {"address": graphite.url(),
                    "query": format!("target=summarize(\n  {target},\n  '5min', 'avg')&from=-5min")}}}]})
        };
        cluster.create_run("graphite-good", metric("good.rate"));
        let status = cluster.status_when("graphite-good", "Successful").await;
        assert_eq!(
            status["metricResults"][0]["measurements"][0]["value"],
            json!("[97.500000,97.500000,97.500000,97.500000]")
        );
        cluster.create_run("graphite-bad", metric("bad.rate"));
        let status = cluster.status_when("graphite-bad", "Failed").await;
        assert_eq!(
            status["metricResults"][0]["measurements"][0]["value"],
            json!("[50.000000,50.000000,50.000000,50.000000]")
        );
        let seen = graphite.seen();
        assert!(
            seen.iter().all(|request| request.query.get("format").map(String::as_str) == Some("json")),
            "{seen:?}"
        );
    })
    .await;
}

/// A datadog (v1) metric with the Secret `datadog` of the run's namespace (no `POD_NAMESPACE`
/// in tests): the last point of the first series is `result`; the keys never reach the status;
/// a Secret that does not exist is an Error naming it.
#[tokio::test(flavor = "multi_thread")]
async fn a_datadog_metric_reads_its_secret_and_judges_the_last_point() {
    no_hang(async {
        let cluster = Cluster::up().await;
        let datadog =
            weir_testkit::metric_doubles::MetricDouble::datadog("dd-api-key-1", "dd-app-key-1");
        // The double's newest bucket is still filling: it holds half the value.
        datadog.serve_for("errors.good", Some(0.01));
        datadog.serve_for("errors.bad", Some(1.0));
        cluster
            .server
            .create(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "datadog", "namespace": NAMESPACE},
                "data": {
                    "api-key": b64("dd-api-key-1"), "app-key": b64("dd-app-key-1"),
                    "address": b64(&datadog.url())}}))
            .unwrap();
        let metric = |query: &str, secret: Option<&str>| {
            let mut provider = json!({"interval": "10m", "query": query});
            if let Some(secret) = secret {
                provider["secretRef"] = json!({"name": secret});
            }
            json!({"metrics": [{"name": "error-rate", "consecutiveErrorLimit": 0,
                "successCondition": "default(result, 1) <= 0.01",
                "provider": {"datadog": provider}}]})
        };
        cluster.create_run("dd-good", metric("sum:errors.good{*}", None));
        let status = cluster.status_when("dd-good", "Successful").await;
        assert_eq!(
            status["metricResults"][0]["measurements"][0]["value"],
            json!("0.005")
        );
        cluster.create_run("dd-bad", metric("sum:errors.bad{*}", None));
        let status = cluster.status_when("dd-bad", "Failed").await;
        assert_eq!(
            status["metricResults"][0]["measurements"][0]["value"],
            json!("0.5")
        );
        let seen = datadog.seen();
        let window: Vec<i64> = ["to", "from"]
            .iter()
            .map(|name| seen[0].query[*name].parse().unwrap())
            .collect();
        assert_eq!(window[0] - window[1], 600, "{seen:?}");

        cluster.create_run(
            "dd-nosecret",
            metric("sum:errors.good{*}", Some("dd-missing")),
        );
        let status = cluster.status_when("dd-nosecret", "Error").await;
        let message = status["metricResults"][0]["measurements"][0]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            message.contains("Secret \"dd-missing\" not found"),
            "{message}"
        );
        let text = status.to_string();
        assert!(
            !text.contains("dd-api-key-1") && !text.contains("dd-app-key-1"),
            "{text}"
        );
    })
    .await;
}

/// A datadog `apiVersion: v2` metric: the scalar query API (played by a web double answering
/// its shape) gives the first value of the first column as `result`.
#[tokio::test(flavor = "multi_thread")]
async fn a_datadog_v2_metric_judges_the_scalar() {
    no_hang(async {
        let cluster = Cluster::up().await;
        let answer = |value: f64| {
            json!({"data": {"type": "scalar_response", "attributes": {"columns": [
                {"name": "a", "type": "number", "values": [value]}]}}})
        };
        let good = WebDouble::start(answer(0.005)).await;
        let bad = WebDouble::start(answer(0.5)).await;
        for (name, double) in [("dd-v2-good", &good), ("dd-v2-bad", &bad)] {
            cluster
                .server
                .create(json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "data": {"api-key": b64("dd-api-key-2"), "app-key": b64("dd-app-key-2"),
                        "address": b64(&double.url(""))}}))
                .unwrap();
        }
        let metric = |secret: &str| {
            json!({"metrics": [{"name": "error-rate",
                "successCondition": "default(result, 1) <= 0.01",
                "provider": {"datadog": {"apiVersion": "v2", "interval": "5m",
                    "queries": {"a": "sum:errors{*}.as_count()", "b": "sum:requests{*}.as_count()"},
                    "formula": "a / b", "secretRef": {"name": secret}}}}]})
        };
        cluster.create_run("dd-v2-good", metric("dd-v2-good"));
        let status = cluster.status_when("dd-v2-good", "Successful").await;
        assert_eq!(
            status["metricResults"][0]["measurements"][0]["value"],
            json!("0.005")
        );
        assert_eq!(*good.paths.lock().unwrap(), vec!["/api/v2/query/scalar"]);
        cluster.create_run("dd-v2-bad", metric("dd-v2-bad"));
        cluster.status_when("dd-v2-bad", "Failed").await;
    })
    .await;
}

/// A newRelic metric: the NRQL goes to NerdGraph (played by a web double answering NerdGraph's
/// shape) with the Secret `newrelic` (or `profile`); one result row is `result`; a missing
/// Secret is an Error naming it.
#[tokio::test(flavor = "multi_thread")]
async fn a_newrelic_metric_judges_its_result_row() {
    no_hang(async {
        let cluster = Cluster::up().await;
        let answer = |rate: f64| {
            json!({"data": {"actor": {"account": {"nrql": {"results": [{"successRate": rate}]}}}}})
        };
        let good = WebDouble::start(answer(0.99)).await;
        let bad = WebDouble::start(answer(0.5)).await;
        for (name, double) in [("newrelic", &good), ("nr-bad", &bad)] {
            cluster
                .server
                .create(json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "data": {"personal-api-key": b64("NRAK-secret-1"), "account-id": b64("12345"),
                        "base-url-nerdgraph": b64(&double.url("/graphql"))}}))
                .unwrap();
        }
        let metric = |profile: Option<&str>| {
            let mut provider = json!({"query": "FROM Transaction SELECT percentage(count(*), WHERE httpResponseCode != 500) as successRate"});
            if let Some(profile) = profile {
                provider["profile"] = json!(profile);
            }
            json!({"metrics": [{"name": "success-rate", "consecutiveErrorLimit": 0,
                "successCondition": "result.successRate >= 0.95",
                "provider": {"newRelic": provider}}]})
        };
        cluster.create_run("nr-good", metric(None));
        let status = cluster.status_when("nr-good", "Successful").await;
        assert_eq!(
            status["metricResults"][0]["measurements"][0]["value"],
            json!("{\"successRate\":0.99}")
        );
        assert_eq!(*good.paths.lock().unwrap(), vec!["/graphql"]);
        cluster.create_run("nr-bad", metric(Some("nr-bad")));
        cluster.status_when("nr-bad", "Failed").await;
        cluster.create_run("nr-nosecret", metric(Some("nr-missing")));
        let status = cluster.status_when("nr-nosecret", "Error").await;
        let message = status["metricResults"][0]["measurements"][0]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(message.contains("Secret \"nr-missing\" not found"), "{message}");
    })
    .await;
}

/// An influxdb metric against the testkit's InfluxDB v2 double, with the Secret `influxdb`
/// (or `profile`): every record's `_value` is in `result`; a missing Secret is an Error naming
/// it; the token never reaches the status.
#[tokio::test(flavor = "multi_thread")]
async fn an_influxdb_metric_is_an_array_of_values() {
    no_hang(async {
        let cluster = Cluster::up().await;
        let good = weir_testkit::metric_doubles_cloud::CloudDouble::influxdb("acme", "influx-token-1");
        good.serve(Some(0.002));
        let bad = weir_testkit::metric_doubles_cloud::CloudDouble::influxdb("acme", "influx-token-1");
        bad.serve(Some(0.5));
        for (name, double) in [("influxdb", &good), ("influx-bad", &bad)] {
            cluster
                .server
                .create(json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "data": {"address": b64(&double.url()), "authToken": b64("influx-token-1"),
                        "org": b64("acme")}}))
                .unwrap();
        }
        let metric = |profile: Option<&str>| {
            let mut provider = json!({"query": "from(bucket: \"app\")\n  |> range(start: -15m)\n  |> filter(fn: (r) => r[\"_measurement\"] == \"errors\")"});
            if let Some(profile) = profile {
                provider["profile"] = json!(profile);
            }
            json!({"metrics": [{"name": "error-rate", "consecutiveErrorLimit": 0,
                "successCondition": "result[0] <= 0.01",
                "provider": {"influxdb": provider}}]})
        };
        cluster.create_run("influx-good", metric(None));
        let status = cluster.status_when("influx-good", "Successful").await;
        assert_eq!(
            status["metricResults"][0]["measurements"][0]["value"],
            json!("[0.002 0.006]")
        );
        cluster.create_run("influx-bad", metric(Some("influx-bad")));
        cluster.status_when("influx-bad", "Failed").await;
        cluster.create_run("influx-nosecret", metric(Some("influx-missing")));
        let status = cluster.status_when("influx-nosecret", "Error").await;
        let text = status.to_string();
        assert!(text.contains("Secret \\\"influx-missing\\\" not found"), "{text}");
        assert!(!text.contains("influx-token-1"), "{text}");
    })
    .await;
}

/// A Secret's `data` value.
fn b64(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, byte)| n | u32::from(*byte) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
