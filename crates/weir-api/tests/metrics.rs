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

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use weir_engine::{Engine, EngineOptions};
use weir_local::LocalTargets;
use weir_store::{RolloutKey, SqliteStore};
use weir_testkit::client::{Answer, HttpClient, get, http1_client, request};
use weir_testkit::engine::Background;
use weir_testkit::fixtures::TempDb;
use weir_testkit::metrics::Exposition;
use weir_testkit::wait::wait_for_ok;

// === harness ===

/// A version of the service: answers its name on `/` and `ok` on `/healthz`.
async fn version(name: &'static str) -> SocketAddr {
    let app = axum::Router::new()
        .route("/", axum::routing::get(move || async move { name }))
        .route("/healthz", axum::routing::get(|| async { "ok" }));
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
    _db: TempDb,
    _engine: Background,
}

/// `weir serve` in miniature: a SQLite file, an engine with local targets, the API.
async fn start() -> Server {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.path()).await.unwrap();
    let targets = LocalTargets::default();
    let router = targets
        .reserve_listener(
            &RolloutKey::new("default", "web"),
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        )
        .await
        .unwrap();
    let providers = weir_testkit::engine::local_providers(
        &targets,
        weir_core::catalog::SharedCatalog::default(),
    );
    let (engine, handle) = Engine::new(store.clone(), providers, EngineOptions::default());
    let engine = Background::start(engine);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = weir_api::router(store, handle);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server {
        base: format!("http://{address}"),
        router,
        client: http1_client(),
        _db: db,
        _engine: engine,
    }
}

impl Server {
    /// `PUT` the rollout `default/web` as YAML.
    async fn apply(&self, yaml: String) -> Answer {
        request(
            &self.client,
            Method::PUT,
            &format!("{}/api/v1/rollouts/default/web", self.base),
            &[("content-type", "application/yaml")],
            yaml,
        )
        .await
    }

    async fn json(&self, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
        let answer = request(
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
        (answer.status, answer.json())
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
        wait_for_ok(what, || async {
            let rollout = self.rollout().await;
            if done(&rollout) {
                Ok(rollout)
            } else {
                Err(format!("{:#}", rollout["status"]))
            }
        })
        .await
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
        let answer = request(
            &self.client,
            Method::GET,
            &format!("{}/metrics", self.base),
            &[],
            Bytes::new(),
        )
        .await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(
            answer.header("content-type"),
            Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
        );
        assert!(answer.body.ends_with("# EOF\n"), "{}", answer.body);
        Exposition::parse(answer.body)
    }

    /// Polls `/metrics` until `done` holds, and returns that exposition.
    async fn metrics_until(&self, what: &str, done: impl Fn(&Exposition) -> bool) -> Exposition {
        let what = format!("{what} in /metrics");
        wait_for_ok(&what, || async {
            let exposition = self.metrics().await;
            if done(&exposition) {
                Ok(exposition)
            } else {
                Err(format!("\n{}", exposition.text))
            }
        })
        .await
    }
}

/// Sends `count` requests through the router and counts the answers by version name.
async fn traffic(client: &HttpClient, router: SocketAddr, count: usize) -> BTreeMap<String, u64> {
    let mut answered = BTreeMap::new();
    for _ in 0..count {
        let answer = get(client, router, "/", &[]).await;
        assert_eq!(answer.status, StatusCode::OK);
        *answered.entry(answer.body).or_default() += 1;
    }
    answered
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
    let applied = server.apply(rollout_yaml(v1, v2)).await;
    assert_eq!(applied.status, StatusCode::CREATED, "{}", applied.body);

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
    // The store says Succeeded as soon as the step is durable; the engine counts it once the
    // job that committed it has applied its effects, a moment later.
    let metrics = server
        .metrics_until("the promotion counted", |metrics| {
            metrics.value("weir_rollout_promotions_total", &WEB) == Some(1.0)
        })
        .await;
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
    let applied = server.apply(rollout_yaml(v1, v2)).await;
    assert_eq!(applied.status, StatusCode::CREATED, "{}", applied.body);
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
    // Counted a moment after the store says Failed (see the promotion above).
    let metrics = server
        .metrics_until("the rollback counted", |metrics| {
            metrics.value("weir_rollout_rollbacks_total", &WEB) == Some(1.0)
        })
        .await;
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
