//! `GET /metrics` over real HTTP on loopback: a real engine over a SQLite file drives a local
//! rollout whose router sits in front of two real HTTP versions; the test sends traffic through
//! the router, counts what each version answered, and checks the exposition against those counts
//! and against the rollout's status as the API reports it.
//!
//! Nothing here asserts on timing: the router counts a request as it finishes, so the test polls
//! `/metrics` until the counts appear, with a deadline that only turns a hang into a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::net::TcpListener;
use weir_engine::local::LocalTargets;
use weir_engine::{Engine, EngineOptions, Integrations};
use weir_store::{RolloutKey, SqliteStore};
use weir_testkit::engine::Background;

/// How long anything may take before the test calls it a hang.
const DEADLINE: Duration = Duration::from_secs(60);

type HttpClient = Client<HttpConnector, Full<Bytes>>;

// === harness ===

/// A version of the service: answers its name on `/` and `ok` on `/healthz`.
async fn version(name: &'static str) -> SocketAddr {
    let app = axum::Router::new()
        .route("/", get(move || async move { name }))
        .route("/healthz", get(|| async { "ok" }));
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

struct Server {
    base: String,
    /// Where the router of rollout `default/web` listens (bound before the engine starts, on a
    /// port the system picked).
    router: SocketAddr,
    client: HttpClient,
    _dir: TempDir,
    _engine: Background,
}

/// `weir serve` in miniature: a SQLite file, an engine with local targets, the API.
async fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("weir.db"))
        .await
        .unwrap();
    let targets = LocalTargets::default();
    let router = targets
        .reserve_listener(
            &RolloutKey::new("default", "web"),
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        )
        .await
        .unwrap();
    let providers = targets.providers(&Integrations::default());
    let (engine, handle) = Engine::new(store.clone(), providers, EngineOptions::default());
    let engine = Background::start(engine);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = weir_api::router(store, handle);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server {
        base: format!("http://{address}"),
        router,
        client: Client::builder(TokioExecutor::new()).build_http(),
        _dir: dir,
        _engine: engine,
    }
}

async fn send(
    client: &HttpClient,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> (StatusCode, hyper::HeaderMap, Bytes) {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(body.into())).unwrap();
    let response = tokio::time::timeout(DEADLINE, client.request(request))
        .await
        .expect("no answer before the deadline")
        .unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, bytes)
}

impl Server {
    async fn json(&self, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
        let (status, _, bytes) = send(
            &self.client,
            method,
            &format!("{}{path}", self.base),
            &[
                ("content-type", "application/json"),
                ("x-weir-actor", "tester"),
            ],
            if body.is_null() {
                Bytes::new()
            } else {
                Bytes::from(body.to_string())
            },
        )
        .await;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (status, value)
    }

    async fn rollout(&self) -> Value {
        let (status, body) = self
            .json(Method::GET, "/api/v1/rollouts/default/web", Value::Null)
            .await;
        assert_eq!(status, StatusCode::OK, "{body:#}");
        body
    }

    /// Polls the rollout until `done` holds, and returns it.
    async fn wait_for(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let rollout = self.rollout().await;
            if done(&rollout) {
                return rollout;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never reached {what}; last: {:#}",
                rollout["status"]
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn command(&self, command: &str) {
        let (status, body) = self
            .json(
                Method::POST,
                "/api/v1/rollouts/default/web/commands",
                json!({"command": command}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{command}: {body:#}");
    }

    /// `GET /metrics`, checked for its content type and its OpenMetrics ending.
    async fn metrics(&self) -> Exposition {
        let (status, headers, body) = send(
            &self.client,
            Method::GET,
            &format!("{}/metrics", self.base),
            &[],
            Bytes::new(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            headers
                .get("content-type")
                .and_then(|value| value.to_str().ok()),
            Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
        );
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.ends_with("# EOF\n"), "{text}");
        Exposition::parse(text)
    }

    /// Polls `/metrics` until `done` holds, and returns that exposition.
    async fn metrics_until(&self, what: &str, done: impl Fn(&Exposition) -> bool) -> Exposition {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let exposition = self.metrics().await;
            if done(&exposition) {
                return exposition;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "/metrics never showed {what}:\n{}",
                exposition.text
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Sends `count` requests through the router and counts the answers by version name.
async fn traffic(client: &HttpClient, router: SocketAddr, count: usize) -> BTreeMap<String, u64> {
    let mut answered = BTreeMap::new();
    for _ in 0..count {
        let (status, _, body) = send(
            client,
            Method::GET,
            &format!("http://{router}/"),
            &[],
            Bytes::new(),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        *answered
            .entry(String::from_utf8(body.to_vec()).unwrap())
            .or_default() += 1;
    }
    answered
}

/// One parsed sample line.
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// An OpenMetrics text exposition, parsed enough to look samples up by name and labels.
struct Exposition {
    text: String,
    samples: Vec<Sample>,
}

impl Exposition {
    fn parse(text: String) -> Exposition {
        let mut samples = Vec::new();
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.strip_suffix('}').expect("labels close")),
                None => (series, ""),
            };
            let mut parsed = BTreeMap::new();
            let mut rest = labels;
            while !rest.is_empty() {
                let (label, after) = rest.split_once("=\"").expect("label=\"value\"");
                // Label values here are names and hashes: no escaped quotes to worry about.
                let (value, after) = after.split_once('"').expect("closing quote");
                parsed.insert(label.to_string(), value.to_string());
                rest = after.strip_prefix(',').unwrap_or(after);
            }
            samples.push(Sample {
                name: name.to_string(),
                labels: parsed,
                value: value.parse().expect("a numeric value"),
            });
        }
        Exposition { text, samples }
    }

    /// Every sample named `name` whose labels include `labels`.
    fn all(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|sample| {
                sample.name == name
                    && labels.iter().all(|(label, value)| {
                        sample.labels.get(*label).map(String::as_str) == Some(*value)
                    })
            })
            .collect()
    }

    /// The value of the one sample named `name` with `labels`, if there is one.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found = self.all(name, labels);
        assert!(
            found.len() <= 1,
            "{name} {labels:?} matches {} samples:\n{}",
            found.len(),
            self.text
        );
        found.first().map(|sample| sample.value)
    }
}

fn rollout_yaml(v1: SocketAddr, v2: SocketAddr) -> String {
    // One step at 50% that waits for a person: traffic is sent while nothing moves.
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: web, namespace: default}}
spec:
  target:
    kind: local
    listen: \"127.0.0.1:0\"
    primary: {{url: \"http://{v1}\", healthCheck: /healthz}}
    canary: {{url: \"http://{v2}\", healthCheck: /healthz}}
  plan:
    canary:
      steps:
        - weight: 50
          pause: {{}}
        - weight: 100
  analysis: {{interval: 1s, progressDeadline: 60s}}
"
    )
}

const WEB: [(&str, &str); 2] = [("namespace", "default"), ("rollout", "web")];

fn with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut labels = WEB.to_vec();
    labels.extend_from_slice(extra);
    labels
}

/// The labels of a local rollout's served traffic of one revision in one role.
fn served<'a>(role: &'a str, revision: &'a str) -> Vec<(&'a str, &'a str)> {
    with(&[
        ("role", role),
        ("revision", revision),
        ("traffic", "served"),
    ])
}

// === tests ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_a_local_rollout_and_its_router_traffic() {
    let server = start().await;
    let (v1, v2) = (version("v1").await, version("v2").await);
    let router = server.router;
    let (status, _, body) = send(
        &server.client,
        Method::PUT,
        &format!("{}/api/v1/rollouts/default/web", server.base),
        &[("content-type", "application/yaml")],
        rollout_yaml(v1, v2),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&body)
    );

    // --- at the 50% step, waiting for a person ---
    let rollout = server
        .wait_for("Progressing at 50%, waiting to be resumed", |rollout| {
            let status = &rollout["status"];
            status["phase"] == "Progressing"
                && status["canaryWeight"] == 50
                && status["waitingForResume"] == true
        })
        .await;
    let status = &rollout["status"];
    let canary_revision = status["canaryRevision"].as_str().unwrap().to_string();
    let primary_revision = status["primaryRevision"].as_str().unwrap().to_string();
    assert_ne!(canary_revision, primary_revision);

    let answered = traffic(&server.client, router, 400).await;
    let (to_v1, to_v2) = (answered["v1"], answered["v2"]);
    assert_eq!(to_v1 + to_v2, 400, "{answered:?}");
    assert!(to_v1 > 0 && to_v2 > 0, "both versions served: {answered:?}");

    let canary = served("canary", &canary_revision);
    let primary = served("primary", &primary_revision);
    let metrics = server
        .metrics_until("the router's counts of the traffic sent", |metrics| {
            metrics.value("weir_router_requests_total", &canary) == Some(to_v2 as f64)
                && metrics.value("weir_router_requests_total", &primary) == Some(to_v1 as f64)
        })
        .await;
    // Nothing else was served: one served series per version (the canary also has an idle
    // mirror series, which the router creates with every table naming it).
    assert_eq!(
        metrics
            .all(
                "weir_router_requests_total",
                &with(&[("traffic", "served")])
            )
            .len(),
        2,
        "{}",
        metrics.text
    );
    for mirrored in metrics.all(
        "weir_router_requests_total",
        &with(&[("traffic", "mirror")]),
    ) {
        assert_eq!(mirrored.value, 0.0, "{}", metrics.text);
    }
    for (labels, sent) in [(&canary, to_v2), (&primary, to_v1)] {
        assert_eq!(metrics.value("weir_router_errors_total", labels), Some(0.0));
        assert_eq!(
            metrics.value("weir_router_request_duration_seconds_count", labels),
            Some(sent as f64)
        );
        let mut infinity = labels.clone();
        infinity.push(("le", "+Inf"));
        assert_eq!(
            metrics.value("weir_router_request_duration_seconds_bucket", &infinity),
            Some(sent as f64)
        );
        // Buckets are cumulative: never more below a bound than below a larger one.
        let buckets: Vec<f64> = metrics
            .all("weir_router_request_duration_seconds_bucket", labels)
            .iter()
            .map(|sample| sample.value)
            .collect();
        assert_eq!(buckets.len(), 15, "14 bounds and +Inf");
        assert!(
            buckets.windows(2).all(|pair| pair[0] <= pair[1]),
            "{buckets:?}"
        );
    }

    // The rollout's own families say what its status says.
    let rollout = server.rollout().await;
    let status = &rollout["status"];
    assert_eq!(status["phase"], "Progressing");
    for phase in [
        "Initializing",
        "Initialized",
        "Waiting",
        "Progressing",
        "WaitingPromotion",
        "Promoting",
        "Finalising",
        "Succeeded",
        "Failed",
        "Held",
        "Terminated",
    ] {
        let expected = if phase == "Progressing" { 1.0 } else { 0.0 };
        assert_eq!(
            metrics.value("weir_rollout_phase", &with(&[("phase", phase)])),
            Some(expected),
            "phase {phase}"
        );
    }
    assert_eq!(
        metrics.value("weir_rollout_canary_weight_ratio", &WEB),
        Some(status["canaryWeight"].as_f64().unwrap() / 100.0)
    );
    assert_eq!(
        metrics.value("weir_rollout_failed_checks", &WEB),
        Some(status["failedChecks"].as_f64().unwrap_or(0.0))
    );
    assert_eq!(
        metrics.value("weir_rollout_promotions_total", &WEB),
        Some(0.0)
    );
    assert_eq!(metrics.value("weir_engine_rollouts", &[]), Some(1.0));
    // The sequential judge watches the run and publishes its evidence every second.
    let judged = with(&[("judge", "sequential")]);
    let metrics = server
        .metrics_until("the sequential judge's e-value", |metrics| {
            metrics
                .value("weir_rollout_judge_log_evalue", &judged)
                .is_some()
        })
        .await;
    let log_e_value = metrics
        .value("weir_rollout_judge_log_evalue", &judged)
        .unwrap();
    assert!(
        log_e_value < (1.0f64 / 0.01).ln(),
        "a healthy canary is far from a rollback: {log_e_value}"
    );

    // --- promoted ---
    server.command("promote").await;
    server
        .wait_for("Succeeded", |rollout| {
            rollout["status"]["phase"] == "Succeeded"
        })
        .await;
    let metrics = server.metrics().await;
    assert_eq!(
        metrics.value("weir_rollout_promotions_total", &WEB),
        Some(1.0),
        "{}",
        metrics.text
    );
    assert_eq!(
        metrics.value("weir_rollout_rollbacks_total", &WEB),
        Some(0.0)
    );
    assert_eq!(
        metrics.value("weir_rollout_phase", &with(&[("phase", "Succeeded")])),
        Some(1.0)
    );
    assert_eq!(
        metrics.value("weir_rollout_phase", &with(&[("phase", "Progressing")])),
        Some(0.0)
    );
    assert_eq!(
        metrics.value("weir_rollout_canary_weight_ratio", &WEB),
        Some(0.0)
    );
    assert_eq!(
        metrics.value(
            "weir_rollout_run_duration_seconds_count",
            &with(&[("result", "succeeded")])
        ),
        Some(1.0)
    );
    assert!(metrics.value("weir_engine_ticks_total", &[]).unwrap() > 0.0);
    assert!(
        metrics
            .value("weir_engine_tick_lateness_seconds_count", &[])
            .unwrap()
            > 0.0
    );
    assert!(
        metrics
            .value("weir_engine_store_commit_seconds_count", &[])
            .unwrap()
            > 0.0
    );

    // After the promotion the canary's revision is the primary: its counters continue under
    // role="primary" (a new series, from the count so far), and no series is a canary any more.
    let promoted = served("primary", &canary_revision);
    let metrics = server
        .metrics_until("the promoted revision counted as the primary", |metrics| {
            metrics
                .value("weir_router_requests_total", &promoted)
                .is_some_and(|count| count >= to_v2 as f64)
        })
        .await;
    assert!(
        metrics
            .all("weir_router_requests_total", &with(&[("role", "canary")]))
            .is_empty(),
        "{}",
        metrics.text
    );
    // The run is no longer judged: its e-value is gone.
    server
        .metrics_until("no judge series once the run ended", |metrics| {
            metrics
                .all("weir_rollout_judge_log_evalue", &WEB)
                .is_empty()
        })
        .await;

    // --- deleted: every series of the rollout goes ---
    let (status, body) = server
        .json(Method::DELETE, "/api/v1/rollouts/default/web", Value::Null)
        .await;
    assert!(status.is_success(), "{status} {body:#}");
    let metrics = server
        .metrics_until("no series of the deleted rollout", |metrics| {
            !metrics.text.contains("rollout=\"web\"")
        })
        .await;
    assert_eq!(metrics.value("weir_engine_rollouts", &[]), Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_run_counts_a_rollback_and_the_openapi_document_mentions_metrics() {
    let server = start().await;
    let (v1, v2) = (version("v1").await, version("v2").await);
    let router = server.router;
    let (status, _, _) = send(
        &server.client,
        Method::PUT,
        &format!("{}/api/v1/rollouts/default/web", server.base),
        &[("content-type", "application/yaml")],
        rollout_yaml(v1, v2),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    server
        .wait_for("Progressing at 50%", |rollout| {
            rollout["status"]["phase"] == "Progressing" && rollout["status"]["canaryWeight"] == 50
        })
        .await;
    server.command("abort").await;
    let rollout = server
        .wait_for("Failed", |rollout| rollout["status"]["phase"] == "Failed")
        .await;
    let canary_revision = rollout["status"]["canaryRevision"].as_str().unwrap();
    let metrics = server.metrics().await;
    assert_eq!(
        metrics.value("weir_rollout_rollbacks_total", &WEB),
        Some(1.0),
        "{}",
        metrics.text
    );
    assert_eq!(
        metrics.value("weir_rollout_promotions_total", &WEB),
        Some(0.0)
    );
    assert_eq!(
        metrics.value("weir_rollout_phase", &with(&[("phase", "Failed")])),
        Some(1.0)
    );
    assert_eq!(
        metrics.value(
            "weir_rollout_run_duration_seconds_count",
            &with(&[("result", "failed")])
        ),
        Some(1.0)
    );
    // The rolled-back canary is stopped; the router keeps its series, still as the canary.
    let primary_revision = rollout["status"]["primaryRevision"].as_str().unwrap();
    let sent = traffic(&server.client, router, 20).await;
    assert_eq!(
        sent.get("v1"),
        Some(&20),
        "everything on the primary: {sent:?}"
    );
    let primary = served("primary", primary_revision);
    let metrics = server
        .metrics_until("the primary's 20 requests", |metrics| {
            metrics.value("weir_router_requests_total", &primary) == Some(20.0)
        })
        .await;
    for sample in metrics.all("weir_router_requests_total", &WEB) {
        let expected = if sample.labels["revision"] == canary_revision {
            "canary"
        } else {
            "primary"
        };
        assert_eq!(sample.labels["role"], expected, "{}", metrics.text);
    }

    let (status, document) = server
        .json(Method::GET, "/api/v1/openapi.json", Value::Null)
        .await;
    assert_eq!(status, StatusCode::OK);
    let content = &document["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
    assert!(
        content.get(weir_api::OPENMETRICS_CONTENT_TYPE).is_some(),
        "{content}"
    );
}
