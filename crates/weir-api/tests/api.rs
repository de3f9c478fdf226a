//! The API over real HTTP on loopback, against a real SQLite file and a running engine with the
//! synthetic providers (`kind: flag`, and `kind: kubernetes` for converted Flagger Canaries).
//!
//! Nothing here asserts on timing: progress is awaited by polling with a generous deadline that
//! only turns a hang into a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use weir_core::model::TargetKind;
use weir_engine::clock::{Clock, ManualClock, SystemClock};
use weir_engine::synthetic::{SyntheticMetrics, SyntheticTargets};
use weir_engine::{Engine, EngineOptions, Providers};
use weir_store::{PostgresStore, SqliteStore};
use weir_testkit::client::{HttpClient, http1_client, request};
use weir_testkit::engine::Background;
use weir_testkit::postgres::TestDb;
use weir_testkit::wait::{DEADLINE, wait_for_ok};
use weir_webhooks::hooks::{HttpHookRunner, LogNotifier};

// === harness ===

/// The engine runs on a manual clock: time moves only while a test waits for a rollout to change
/// (one analysis interval per poll, see `Server::wait_for`), so these tests of the API's logic
/// never sleep through real intervals and never skip a state they wait for.
struct Server {
    base: String,
    client: HttpClient,
    clock: ManualClock,
    _db: TestDb,
    _engine: Background,
}

struct Reply {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: Value,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    fn error_code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("(none)")
    }

    fn error_paths(&self) -> Vec<&str> {
        self.body["error"]["errors"]
            .as_array()
            .map(|errors| {
                errors
                    .iter()
                    .filter_map(|error| error["path"].as_str())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The canary revision whose checks fail.
const FAILING_REVISION: &str = "r-bad";

async fn start() -> Server {
    start_with(None).await
}

/// A server whose watch streams end when `watch_shutdown` fires (as `weir serve` wires it), on
/// the store `WEIR_TEST_STORE` names (SQLite by default, or PostgreSQL).
async fn start_with(watch_shutdown: Option<oneshot::Receiver<()>>) -> Server {
    let db = TestDb::from_env();
    let clock = ManualClock::new(SystemClock.now());
    let (addr, engine) = match &db {
        TestDb::Sqlite(dir) => {
            let store = SqliteStore::open(&dir.path()).await.unwrap();
            serve_on(store, &clock, watch_shutdown).await
        }
        TestDb::Postgres { url, .. } => {
            let store = PostgresStore::open(url, "test").await.unwrap();
            serve_on(store, &clock, watch_shutdown).await
        }
    };
    Server {
        base: format!("http://{addr}"),
        client: http1_client(),
        clock,
        _db: db,
        _engine: engine,
    }
}

/// The engine and the API over `store`, on a port of its own.
async fn serve_on<S>(
    store: S,
    clock: &ManualClock,
    watch_shutdown: Option<oneshot::Receiver<()>>,
) -> (SocketAddr, Background)
where
    S: weir_store::Store + weir_store::FlagStore + weir_store::TokenStore,
{
    let synthetic = Arc::new(SyntheticTargets::default());
    let providers = Providers {
        targets: vec![
            (TargetKind::Flag, synthetic.clone()),
            (TargetKind::Kubernetes, synthetic),
        ],
        metrics: vec![Arc::new(SyntheticMetrics::failing_revision(
            FAILING_REVISION,
        ))],
        hooks: Arc::new(HttpHookRunner::default()),
        notifier: Arc::new(LogNotifier),
        catalog: Default::default(),
    };
    let options = EngineOptions {
        clock: clock.shared(),
        ..EngineOptions::default()
    };
    let (engine, handle) = Engine::new(store.clone(), providers, options);
    let engine = Background::start(engine);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let flags = weir_api::flags_router(weir_flags::Flags::open(store.clone()).await.unwrap());
    let store_for_auth = store.clone();
    let app = match watch_shutdown {
        None => weir_api::router(store, handle),
        Some(signal) => weir_api::router_with_shutdown(store, handle, async move {
            let _ = signal.await;
        }),
    }
    .merge(flags);
    // Access control as `weir serve` layers it (open: the store has no token), so the session
    // and token routes are served too.
    let auth = weir_api::Auth::open(store_for_auth, weir_api::AuthConfig::default())
        .await
        .unwrap();
    let app = auth.apply(app);
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    (addr, engine)
}

impl Server {
    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        let answer = request(
            &self.client,
            method,
            &format!("{}{path}", self.base),
            headers,
            body,
        )
        .await;
        Reply {
            status: answer.status,
            body: answer.json(),
            headers: answer.headers,
        }
    }

    async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, &[], Bytes::new()).await
    }

    async fn put_yaml(&self, path: &str, yaml: &str, headers: &[(&str, &str)]) -> Reply {
        let mut all = vec![("content-type", "application/yaml")];
        all.extend_from_slice(headers);
        self.send(Method::PUT, path, &all, yaml.to_string()).await
    }

    async fn command(&self, namespace: &str, name: &str, body: Value) -> Reply {
        self.send(
            Method::POST,
            &format!("/api/v1/rollouts/{namespace}/{name}/commands"),
            &[
                ("content-type", "application/json"),
                ("x-weir-actor", "tester"),
            ],
            body.to_string(),
        )
        .await
    }

    /// Polls a rollout until `done` holds, and returns it. Every poll that finds it not done yet
    /// moves the engine's clock by one analysis interval (1s in these tests).
    async fn wait_for(
        &self,
        namespace: &str,
        name: &str,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let path = format!("/api/v1/rollouts/{namespace}/{name}");
        let what = format!("{namespace}/{name} to reach {what}");
        wait_for_ok(&what, || async {
            let reply = self.get(&path).await;
            if reply.status == StatusCode::OK && done(&reply.body) {
                Ok(reply.body)
            } else {
                self.clock.advance(Duration::from_secs(1));
                Err(format!("{} {:#}", reply.status, reply.body))
            }
        })
        .await
    }

    async fn wait_for_phase(&self, namespace: &str, name: &str, phase: &str) -> Value {
        self.wait_for(namespace, name, phase, |rollout| {
            rollout["status"]["phase"] == phase
        })
        .await
    }
}

/// A `kind: flag` rollout with synthetic targets: `revision` is the canary's revision.
fn flag_rollout(namespace: &str, name: &str, revision: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  target: {{kind: flag, flag: {name}, revision: {revision}}}
  plan: {{canary: {{stepWeight: 50}}}}
  analysis:
    interval: 1s
    metrics: [{{name: request-success-rate, thresholdRange: {{min: 99}}}}]
"
    )
}

/// A flag rollout whose runs stop at 50% until someone resumes them.
fn held_at_half(namespace: &str, name: &str, revision: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  target: {{kind: flag, flag: {name}, revision: {revision}}}
  plan:
    canary:
      steps:
        - weight: 50
          pause: {{}}
        - weight: 100
  analysis: {{interval: 1s}}
"
    )
}

fn rollout_path(namespace: &str, name: &str) -> String {
    format!("/api/v1/rollouts/{namespace}/{name}")
}

/// A Flagger Canary (`kind: kubernetes` once converted): test/podinfo.
const PODINFO_CANARY: &str = "apiVersion: flagger.app/v1beta1
kind: Canary
metadata:
  name: podinfo
  namespace: test
spec:
  targetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: podinfo
  service:
    port: 9898
  analysis:
    interval: 10s
    threshold: 5
    maxWeight: 50
    stepWeight: 10
    metrics:
      - name: request-success-rate
        thresholdRange: {min: 99}
        interval: 1m
";

/// A rollout of `flag`'s variation `on` (control `off`) on the schedule `plan`.
fn flag_schedule(namespace: &str, name: &str, flag: &str, plan: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  target: {{kind: flag, flag: {flag}, control: \"off\", variation: \"on\"}}
  plan: {{schedule: {plan}}}
  analysis: {{interval: 1s}}
"
    )
}

/// `{at: ..., weight: ...}` entries at offsets (in seconds) from the engine's clock.
fn manual(server: &Server, entries: &[(i64, u32)]) -> String {
    let now = server.clock.now().as_second();
    let entries: Vec<String> = entries
        .iter()
        .map(|(offset, weight)| {
            let at = jiff::Timestamp::from_second(now + offset).unwrap();
            format!("{{at: \"{at}\", weight: {weight}}}")
        })
        .collect();
    format!("{{manual: [{}]}}", entries.join(", "))
}

/// Names of a page's items, `NAMESPACE/NAME`.
fn names(page: &Reply) -> Vec<String> {
    page.body["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {:#}", page.body))
        .iter()
        .map(|item| {
            format!(
                "{}/{}",
                item["metadata"]["namespace"].as_str().unwrap(),
                item["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// Flag rollouts in every schedule state, created in this order (one second apart on the
/// engine's clock, so `created` orders them so), beside a flag rollout by canary steps and a
/// Kubernetes rollout:
///
/// | rollout | flag | schedule | state |
/// |---|---|---|---|
/// | shop/c-running | search-box | manual, 2 entries, the first 1 min ago | RUNNING 1/2 |
/// | shop/a-waiting | banner | manual, 3 entries from 1 h on | WAITING 0/3 |
/// | other/e-finished | banner | manual, 100% 1 min ago | FINISHED 1/1 |
/// | shop/d-stopped | checkout-v2 | manual, 2 entries from 1 h on, stopped | STOPPED 0/2 |
/// | shop/b-template | checkout | template from 1 h on, hourly +25% | WAITING 0/4 |
/// | shop/f-steps | steps | canary steps (no schedule) | - |
/// | test/podinfo | - | a Flagger Canary (not a flag) | - |
async fn seed_flag_rollouts(server: &Server) -> Vec<&'static str> {
    let start_in_an_hour = {
        let at = jiff::Timestamp::from_second(server.clock.now().as_second() + 3600).unwrap();
        format!("{{template: {{start: \"{at}\", interval: hourly, increments: 25}}}}")
    };
    let documents = [
        (
            "shop",
            "c-running",
            flag_schedule(
                "shop",
                "c-running",
                "search-box",
                &manual(server, &[(-60, 20), (3600, 100)]),
            ),
        ),
        (
            "shop",
            "a-waiting",
            flag_schedule(
                "shop",
                "a-waiting",
                "banner",
                &manual(server, &[(3600, 10), (7200, 50), (10_800, 100)]),
            ),
        ),
        (
            "other",
            "e-finished",
            flag_schedule(
                "other",
                "e-finished",
                "banner",
                &manual(server, &[(-60, 100)]),
            ),
        ),
        (
            "shop",
            "d-stopped",
            flag_schedule(
                "shop",
                "d-stopped",
                "checkout-v2",
                &manual(server, &[(3600, 50), (7200, 100)]),
            ),
        ),
        (
            "shop",
            "b-template",
            flag_schedule("shop", "b-template", "checkout", &start_in_an_hour),
        ),
        ("shop", "f-steps", flag_rollout("shop", "f-steps", "r1")),
        ("test", "podinfo", PODINFO_CANARY.to_string()),
    ];
    for (namespace, name, document) in &documents {
        let reply = server
            .put_yaml(&rollout_path(namespace, name), document, &[])
            .await;
        assert_eq!(
            reply.status,
            StatusCode::CREATED,
            "{name}: {:#}",
            reply.body
        );
        server.clock.advance(Duration::from_secs(1));
    }
    let state = |rollout: &Value| rollout["status"]["scheduleState"].clone();
    server
        .wait_for("shop", "c-running", "RUNNING", |rollout| {
            state(rollout) == "RUNNING"
        })
        .await;
    server
        .wait_for_phase("other", "e-finished", "Succeeded")
        .await;
    for name in ["a-waiting", "b-template", "d-stopped"] {
        server
            .wait_for(
                "shop",
                name,
                "a run waiting for its first entry",
                |rollout| {
                    rollout["status"]["phase"] == "Progressing" && state(rollout) == "WAITING"
                },
            )
            .await;
    }
    let stopped = server
        .command("shop", "d-stopped", json!({"command": "stop"}))
        .await;
    assert_eq!(stopped.status, StatusCode::OK, "{:#}", stopped.body);
    assert_eq!(stopped.body["status"]["phase"], "Stopped");
    server.wait_for_phase("shop", "f-steps", "Succeeded").await;
    vec![
        "shop/c-running",
        "shop/a-waiting",
        "other/e-finished",
        "shop/d-stopped",
        "shop/b-template",
        "shop/f-steps",
    ]
}

// === tests ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_then_get_shows_the_status_moving() {
    let server = start().await;
    let path = rollout_path("team", "checkout");
    let created = server
        .put_yaml(&path, &flag_rollout("team", "checkout", "r1"), &[])
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:#}", created.body);
    assert_eq!(created.body["outcome"], "created");
    assert_eq!(created.body["warnings"], json!([]));
    let rollout = &created.body["rollout"];
    assert_eq!(rollout["apiVersion"], "weir.dev/v1alpha1");
    assert_eq!(rollout["metadata"]["name"], "checkout");
    assert_eq!(rollout["generation"], 1);
    let version = rollout["version"].as_u64().unwrap();
    assert_eq!(
        created.header("etag"),
        Some(format!("\"{version}\"").as_str())
    );
    assert_eq!(created.header("location"), Some(path.as_str()));

    let got = server.get(&path).await;
    assert_eq!(got.status, StatusCode::OK);
    assert!(got.body["status"]["phase"].is_string(), "{:#}", got.body);
    assert!(got.body["version"].as_u64().unwrap() >= version);
    assert!(got.body["createdAt"].is_string());

    let after = server
        .wait_for("team", "checkout", "a phase past Initializing", |rollout| {
            rollout["status"]["phase"] != "Initializing"
        })
        .await;
    assert!(after["version"].as_u64().unwrap() > version);
    // The synthetic primary starts at another revision, so a first run follows and ends.
    server.wait_for_phase("team", "checkout", "Succeeded").await;

    let health = server.get("/healthz").await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.body["status"], "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_honour_if_match_and_expected_version() {
    let server = start().await;
    let path = rollout_path("team", "cart");
    let first = server
        .put_yaml(&path, &flag_rollout("team", "cart", "r1"), &[])
        .await;
    assert_eq!(first.status, StatusCode::CREATED);
    // Settled: the first run is over, so nothing but us writes from here.
    server.wait_for_phase("team", "cart", "Succeeded").await;
    let current = server.get(&path).await;
    let etag = current.header("etag").unwrap().to_string();
    let version = current.body["version"].as_u64().unwrap();

    // The same document again: unchanged.
    let same = server
        .put_yaml(
            &path,
            &flag_rollout("team", "cart", "r1"),
            &[("if-match", &etag)],
        )
        .await;
    assert_eq!(same.status, StatusCode::OK, "{:#}", same.body);
    assert_eq!(same.body["outcome"], "unchanged");

    // A new revision with the current ETag: updated.
    let updated = server
        .put_yaml(
            &path,
            &flag_rollout("team", "cart", "r2"),
            &[("if-match", &etag)],
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{:#}", updated.body);
    assert_eq!(updated.body["outcome"], "updated");
    assert_eq!(updated.body["rollout"]["generation"], 2);
    assert!(updated.body["rollout"]["version"].as_u64().unwrap() > version);
    assert_ne!(updated.header("etag"), Some(etag.as_str()));

    // The old ETag is stale now.
    let stale = server
        .put_yaml(
            &path,
            &flag_rollout("team", "cart", "r3"),
            &[("if-match", &etag)],
        )
        .await;
    assert_eq!(stale.status, StatusCode::CONFLICT, "{:#}", stale.body);
    assert_eq!(stale.error_code(), "conflict");
    let stale_query = server
        .put_yaml(
            &format!("{path}?expectedVersion={version}"),
            &flag_rollout("team", "cart", "r3"),
            &[],
        )
        .await;
    assert_eq!(stale_query.status, StatusCode::CONFLICT);
    assert_eq!(stale_query.error_code(), "conflict");

    // Create-only on an existing rollout.
    let exists = server
        .put_yaml(
            &path,
            &flag_rollout("team", "cart", "r3"),
            &[("if-none-match", "*")],
        )
        .await;
    assert_eq!(exists.status, StatusCode::CONFLICT);

    // A malformed precondition is a 400 naming the header.
    let malformed = server
        .put_yaml(
            &path,
            &flag_rollout("team", "cart", "r3"),
            &[("if-match", "yesterday")],
        )
        .await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
    assert_eq!(malformed.error_paths(), ["If-Match"]);

    // What a GET returns can be sent back as it is (server-written fields are ignored).
    server.wait_for_phase("team", "cart", "Succeeded").await;
    let current = server.get(&path).await;
    let etag = current.header("etag").unwrap().to_string();
    let round_trip = server
        .send(
            Method::PUT,
            &path,
            &[("content-type", "application/json"), ("if-match", &etag)],
            current.body.to_string(),
        )
        .await;
    assert_eq!(round_trip.status, StatusCode::OK, "{:#}", round_trip.body);
    assert_eq!(round_trip.body["outcome"], "unchanged");

    // POST applies too, named by the document.
    let posted = server
        .send(
            Method::POST,
            "/api/v1/rollouts",
            &[("content-type", "application/yaml")],
            flag_rollout("other", "cart", "r1"),
        )
        .await;
    assert_eq!(posted.status, StatusCode::CREATED, "{:#}", posted.body);
    assert_eq!(posted.body["rollout"]["metadata"]["namespace"], "other");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_documents_name_every_field() {
    let server = start().await;
    let broken = "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: Broken_Name, namespace: team}
spec:
  target: {kind: flag}
  plan: {canary: {stepWeight: 150}}
  analysis: {interval: 1s, threshold: 0}
";
    let reply = server
        .send(
            Method::POST,
            "/api/v1/rollouts",
            &[("content-type", "application/yaml")],
            broken,
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:#}", reply.body);
    assert_eq!(reply.error_code(), "invalid");
    let paths = reply.error_paths();
    for expected in [
        "metadata.name",
        "spec.plan.canary.stepWeight",
        "spec.analysis.threshold",
    ] {
        assert!(
            paths.contains(&expected),
            "{expected} missing from {paths:?}"
        );
    }
    for error in reply.body["error"]["errors"].as_array().unwrap() {
        assert!(error["message"].is_string());
    }
    // Nothing was stored.
    let list = server.get("/api/v1/rollouts").await;
    assert_eq!(list.body["items"], json!([]));

    // Structural errors, also all at once, from JSON.
    let json_body = json!({
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": "ok", "namespace": "team"},
        "spec": {
            "target": {"kind": "flag"},
            "plan": {"canary": {"stepWeight": "lots"}},
            "analysis": {"interval": "soon"},
            "typo": true
        }
    });
    let reply = server
        .send(
            Method::PUT,
            &rollout_path("team", "ok"),
            &[("content-type", "application/json")],
            json_body.to_string(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:#}", reply.body);
    assert!(reply.error_paths().len() >= 2, "{:#}", reply.body);

    // Not YAML at all.
    let reply = server
        .put_yaml(&rollout_path("team", "ok"), "spec: [unclosed", &[])
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error_paths(), ["(document)"]);

    // A target kind this server does not run.
    let local = flag_rollout("team", "ok", "r1").replace(
        "{kind: flag, flag: ok, revision: r1}",
        "{kind: local, listen: 127.0.0.1:0, primary: {url: http://127.0.0.1:1}, canary: {url: http://127.0.0.1:2}}",
    );
    let reply = server
        .put_yaml(&rollout_path("team", "ok"), &local, &[])
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:#}", reply.body);
    assert_eq!(reply.error_paths(), ["spec.target.kind"]);

    // Bad query parameters, both named.
    let reply = server
        .get("/api/v1/rollouts?limit=many&phase=Sideways")
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error_paths(), ["phase", "limit"]);
    let reply = server.get("/api/v1/rollouts?namespce=team").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error_paths(), ["namespce"]);
    let reply = server.get("/api/v1/rollouts?cursor=garbage").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:#}", reply.body);
    assert_eq!(reply.error_paths(), ["cursor"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_media_types_and_oversized_bodies() {
    let server = start().await;
    let path = rollout_path("team", "media");
    let document = flag_rollout("team", "media", "r1");
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let reply = server
            .send(
                Method::PUT,
                &path,
                &[("content-type", content_type)],
                document.clone(),
            )
            .await;
        assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(reply.error_code(), "unsupported_media_type");
    }
    let reply = server.send(Method::PUT, &path, &[], document.clone()).await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    // Over 4 MiB: 413, as JSON.
    let mut huge = document.clone();
    huge.push_str("# ");
    huge.push_str(&"x".repeat(4 * 1024 * 1024 + 1));
    let reply = server.put_yaml(&path, &huge, &[]).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.error_code(), "payload_too_large");

    // Unknown routes and methods answer in JSON too.
    let reply = server.get("/api/v1/nothing").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.error_code(), "not_found");
    let reply = server.send(Method::PATCH, &path, &[], Bytes::new()).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.error_code(), "method_not_allowed");

    // Nothing was stored.
    assert_eq!(server.get(&path).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_path_must_name_the_document() {
    let server = start().await;
    let document = flag_rollout("team", "named", "r1");
    let reply = server
        .put_yaml(&rollout_path("team", "other"), &document, &[])
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error_paths(), ["metadata.name"]);
    let reply = server
        .put_yaml(&rollout_path("elsewhere", "named"), &document, &[])
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.error_paths(), ["metadata.namespace"]);
    let reply = server
        .put_yaml(&rollout_path("elsewhere", "other"), &document, &[])
        .await;
    assert_eq!(reply.error_paths(), ["metadata.namespace", "metadata.name"]);

    // A document without a namespace takes the path's.
    let without = document.replace(", namespace: team", "");
    let reply = server
        .put_yaml(&rollout_path("shop", "named"), &without, &[])
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(reply.body["rollout"]["metadata"]["namespace"], "shop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_and_pages() {
    let server = start().await;
    let mut expected = BTreeSet::new();
    for index in 0..30 {
        let namespace = if index % 3 == 0 { "blue" } else { "green" };
        let name = format!("r{index:02}");
        let reply = server
            .put_yaml(
                &rollout_path(namespace, &name),
                &flag_rollout(namespace, &name, "r1"),
                &[],
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED);
        expected.insert(format!("{namespace}/{name}"));
    }

    // Pages of 7: everything exactly once, in order.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(cursor) => format!("/api/v1/rollouts?limit=7&cursor={cursor}"),
            None => "/api/v1/rollouts?limit=7".to_string(),
        };
        let page = server.get(&path).await;
        assert_eq!(page.status, StatusCode::OK, "{:#}", page.body);
        pages += 1;
        let items = page.body["items"].as_array().unwrap();
        assert!(items.len() <= 7);
        for item in items {
            seen.push(format!(
                "{}/{}",
                item["metadata"]["namespace"].as_str().unwrap(),
                item["metadata"]["name"].as_str().unwrap()
            ));
        }
        match page.body["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
        assert!(pages < 20, "pagination does not end");
    }
    assert_eq!(seen.len(), 30);
    assert_eq!(seen.iter().cloned().collect::<BTreeSet<_>>(), expected);
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted);

    // By namespace.
    let blue = server
        .get("/api/v1/rollouts?namespace=blue&limit=500")
        .await;
    let blue = blue.body["items"].as_array().unwrap();
    assert_eq!(blue.len(), 10);
    assert!(
        blue.iter()
            .all(|item| item["metadata"]["namespace"] == "blue")
    );

    // By phase: once everything settled, one rollout's new revision fails its run.
    for key in &expected {
        let (namespace, name) = key.split_once('/').unwrap();
        server.wait_for_phase(namespace, name, "Succeeded").await;
    }
    let failing = flag_rollout("blue", "r03", FAILING_REVISION);
    let reply = server
        .put_yaml(&rollout_path("blue", "r03"), &failing, &[])
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    server.wait_for_phase("blue", "r03", "Failed").await;
    let failed = server.get("/api/v1/rollouts?phase=failed").await;
    let failed = failed.body["items"].as_array().unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["metadata"]["name"], "r03");
    let succeeded = server
        .get("/api/v1/rollouts?phase=Succeeded&namespace=green&limit=100")
        .await;
    assert_eq!(succeeded.body["items"].as_array().unwrap().len(), 20);
    assert_eq!(succeeded.body["nextCursor"], Value::Null);

    // A failed run can be retried.
    let retried = server
        .command("blue", "r03", json!({"command": "retry"}))
        .await;
    assert_eq!(retried.status, StatusCode::OK, "{:#}", retried.body);
    assert_ne!(retried.body["status"]["phase"], "Failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_and_the_history() {
    let server = start().await;
    let path = rollout_path("team", "search");
    let reply = server
        .put_yaml(&path, &held_at_half("team", "search", "r1"), &[])
        .await;
    assert_eq!(reply.status, StatusCode::CREATED);
    // The run goes to 50% and waits there.
    server
        .wait_for("team", "search", "the pause at 50%", |rollout| {
            rollout["status"]["waitingForResume"] == true
        })
        .await;

    // Not failed: retry is refused with the machine's reason.
    let refused = server
        .command("team", "search", json!({"command": "retry"}))
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{:#}", refused.body);
    assert_eq!(refused.error_code(), "rejected");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("only a failed run can be retried"),
        "{message}"
    );

    let paused = server
        .command("team", "search", json!({"command": "pause"}))
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{:#}", paused.body);
    assert_eq!(paused.body["status"]["paused"], true);
    assert!(paused.header("etag").is_some());
    let resumed = server
        .command(
            "team",
            "search",
            json!({"command": "resume", "actor": "ana"}),
        )
        .await;
    assert_eq!(resumed.status, StatusCode::OK, "{:#}", resumed.body);
    assert_eq!(resumed.body["status"]["paused"], false);
    server.wait_for_phase("team", "search", "Succeeded").await;

    // Nothing runs now: pause is refused.
    let refused = server
        .command("team", "search", json!({"command": "pause"}))
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(refused.error_code(), "rejected");

    // Bad commands and unknown rollouts.
    let bad = server
        .command("team", "search", json!({"command": "jump"}))
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.error_paths(), ["command"]);
    let missing = server
        .command("team", "nobody", json!({"command": "pause"}))
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.error_code(), "not_found");

    // The history, two at a time: gap-free from 1, with the actors.
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = server
            .get(&format!("{path}/events?after={after}&limit=2"))
            .await;
        assert_eq!(page.status, StatusCode::OK, "{:#}", page.body);
        let items = page.body["items"].as_array().unwrap().clone();
        assert!(items.len() <= 2);
        events.extend(items);
        match page.body["nextAfter"].as_u64() {
            Some(next) => after = next,
            None => break,
        }
        assert!(events.len() < 200, "paging does not end");
    }
    let seqs: Vec<u64> = events
        .iter()
        .map(|event| event["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    for event in &events {
        for field in ["at", "run", "reason", "phase", "canaryWeight", "message"] {
            assert!(!event[field].is_null(), "{field} missing in {event:#}");
        }
    }
    let actors: Vec<&str> = events
        .iter()
        .filter_map(|event| event["evidence"]["actor"].as_str())
        .collect();
    assert!(actors.contains(&"tester"), "{actors:?}");
    assert!(actors.contains(&"ana"), "{actors:?}");
    let reasons: Vec<&str> = events
        .iter()
        .filter_map(|event| event["reason"].as_str())
        .collect();
    assert!(
        reasons.contains(&"Paused") && reasons.contains(&"Resumed"),
        "{reasons:?}"
    );
    assert_eq!(reasons.last(), Some(&"Succeeded"), "{reasons:?}");
    let latest = server.get(&path).await;
    assert_eq!(latest.body["lastEventSeq"], json!(seqs.len()));

    let bad_after = server.get(&format!("{path}/events?after=-1")).await;
    assert_eq!(bad_after.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad_after.error_paths(), ["after"]);
}

/// A flag rollout whose runs take a hundred steps of 1%: still running after many ticks.
fn many_steps(namespace: &str, name: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  target: {{kind: flag, flag: {name}, revision: r1}}
  plan: {{canary: {{stepWeight: 1, maxWeight: 99}}}}
  analysis: {{interval: 1s}}
"
    )
}

/// The answer to a command that does not apply: a 409 with the machine's reason (a pause of a
/// paused run once answered 500 "could not be committed").
fn assert_refused(reply: &Reply, reason: &str) {
    assert_eq!(reply.status, StatusCode::CONFLICT, "{:#}", reply.body);
    assert_eq!(reply.error_code(), "rejected", "{:#}", reply.body);
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(reason), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_given_twice_answers_200_or_409_never_500() {
    let server = start().await;
    for name in ["twice", "twice-abort"] {
        let reply = server
            .put_yaml(&rollout_path("team", name), &many_steps("team", name), &[])
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
        server.wait_for_phase("team", name, "Progressing").await;
    }
    let send = |name: &'static str, body: Value| server.command("team", name, body);

    let first = send("twice", json!({"command": "pause"})).await;
    assert_eq!(first.status, StatusCode::OK, "{:#}", first.body);
    assert_eq!(first.body["status"]["paused"], true);
    assert_refused(
        &send("twice", json!({"command": "pause"})).await,
        "already paused",
    );

    let first = send("twice", json!({"command": "resume"})).await;
    assert_eq!(first.status, StatusCode::OK, "{:#}", first.body);
    assert_eq!(first.body["status"]["paused"], false);
    assert_refused(
        &send("twice", json!({"command": "resume"})).await,
        "nothing is paused or waiting",
    );

    // A gate decision given twice is recorded twice (who decided, and when, is history).
    for command in ["open-gate", "close-gate"] {
        for attempt in 1..=2 {
            let reply = send(
                "twice",
                json!({"command": command, "gate": {"type": "confirm-promotion"}}),
            )
            .await;
            assert_eq!(
                reply.status,
                StatusCode::OK,
                "{command} #{attempt}: {:#}",
                reply.body
            );
        }
    }

    let first = send("twice", json!({"command": "stop"})).await;
    assert_eq!(first.status, StatusCode::OK, "{:#}", first.body);
    assert_eq!(first.body["status"]["phase"], "Stopped");
    assert_refused(
        &send("twice", json!({"command": "stop"})).await,
        "no run is under way",
    );
    assert_refused(
        &send("twice", json!({"command": "stop", "rollback": true})).await,
        "no run is under way",
    );

    let first = send("twice-abort", json!({"command": "abort"})).await;
    assert_eq!(first.status, StatusCode::OK, "{:#}", first.body);
    assert_eq!(first.body["status"]["phase"], "Failed");
    assert_refused(
        &send("twice-abort", json!({"command": "abort"})).await,
        "no run is under way",
    );

    // What was applied is in the history once per 200; the refusals left nothing.
    let history = server
        .get(&format!(
            "{}/events?limit=500",
            rollout_path("team", "twice")
        ))
        .await;
    let reasons: Vec<&str> = history.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|event| event["reason"].as_str())
        .filter(|reason| {
            matches!(
                *reason,
                "Paused" | "Resumed" | "GateOpened" | "GateShut" | "Stopped"
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            "Paused",
            "Resumed",
            "GateOpened",
            "GateOpened",
            "GateShut",
            "GateShut",
            "Stopped"
        ]
    );
}

/// Two pauses (then two resumes) sent at once while the engine ticks the run: one is applied,
/// the other refused with the reason, round after round, and nothing answers 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_racing_each_other_and_the_ticks_are_applied_once_or_refused() {
    const ROUNDS: usize = 25;
    let server = start().await;
    let path = rollout_path("team", "race");
    let reply = server
        .put_yaml(&path, &many_steps("team", "race"), &[])
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    server.wait_for_phase("team", "race", "Progressing").await;
    let ticks = || async {
        // An advance makes a tick due (one step of 1%: 25 rounds stay short of the 99% end);
        // yielding first lets it land among the commands rather than always before them.
        tokio::task::yield_now().await;
        server.clock.advance(Duration::from_secs(1));
    };
    for round in 0..ROUNDS {
        for (command, paused, reason) in [
            ("pause", true, "already paused"),
            ("resume", false, "nothing is paused or waiting"),
        ] {
            let body = json!({"command": command});
            let (a, b, ()) = tokio::join!(
                server.command("team", "race", body.clone()),
                server.command("team", "race", body.clone()),
                ticks(),
            );
            let mut statuses = [a.status, b.status];
            statuses.sort();
            assert_eq!(
                statuses,
                [StatusCode::OK, StatusCode::CONFLICT],
                "round {round}, {command}: {:#} / {:#}",
                a.body,
                b.body
            );
            let (applied, refused) = if a.status == StatusCode::OK {
                (a, b)
            } else {
                (b, a)
            };
            assert_eq!(applied.body["status"]["paused"], paused, "round {round}");
            assert_refused(&refused, reason);
            let now = server.get(&path).await;
            assert_eq!(now.body["status"]["paused"], paused, "round {round}");
            assert_eq!(now.body["status"]["phase"], "Progressing", "round {round}");
        }
    }
    let history = server.get(&format!("{path}/events?limit=500")).await;
    let count = |reason: &str| {
        history.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|event| event["reason"] == reason)
            .count()
    };
    assert_eq!((count("Paused"), count("Resumed")), (ROUNDS, ROUNDS));
    let last = server.get(&path).await;
    eprintln!(
        "{ROUNDS} rounds: {} steps taken, canary at {}",
        last.body["status"]["stepsTaken"], last.body["status"]["canaryWeight"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gates_are_opened_and_closed_by_people_with_their_names_in_the_history() {
    let server = start().await;
    let path = rollout_path("team", "gated");
    let reply = server
        .put_yaml(&path, &held_at_half("team", "gated", "r1"), &[])
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    server
        .wait_for("team", "gated", "the pause at 50%", |rollout| {
            rollout["status"]["waitingForResume"] == true
        })
        .await;

    // No hook guards promotion, but a person can hold it.
    let closed = server
        .command(
            "team",
            "gated",
            json!({"command": "close-gate", "gate": {"type": "confirm-promotion"}, "actor": "ana"}),
        )
        .await;
    assert_eq!(closed.status, StatusCode::OK, "{:#}", closed.body);
    assert_eq!(closed.body["status"]["gates"][0]["open"], false);
    assert_eq!(closed.body["status"]["gates"][0]["actor"], "ana");
    server
        .command("team", "gated", json!({"command": "resume"}))
        .await;
    server
        .wait_for_phase("team", "gated", "WaitingPromotion")
        .await;

    // Gates are named by type or hook; a hook the rollout lacks is refused with the reason.
    let unknown = server
        .command(
            "team",
            "gated",
            json!({"command": "open-gate", "gate": {"hook": "nobody"}}),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::CONFLICT, "{:#}", unknown.body);
    assert!(
        unknown.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no webhook named \"nobody\""),
        "{:#}",
        unknown.body
    );
    let malformed = server
        .command(
            "team",
            "gated",
            json!({"command": "open-gate", "gate": {"type": "rollout"}}),
        )
        .await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
    assert_eq!(malformed.error_paths(), ["gate.type"]);

    // Opened by another person (from the header): the run promotes at once.
    let opened = server
        .command(
            "team",
            "gated",
            json!({"command": "open-gate", "gate": {"type": "confirm-promotion"}}),
        )
        .await;
    assert_eq!(opened.status, StatusCode::OK, "{:#}", opened.body);
    server.wait_for_phase("team", "gated", "Succeeded").await;

    let history = server.get(&format!("{path}/events?limit=100")).await;
    let decisions: Vec<(&str, &str)> = history.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| matches!(event["reason"].as_str(), Some("GateOpened" | "GateShut")))
        .map(|event| {
            (
                event["reason"].as_str().unwrap(),
                event["evidence"]["actor"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(decisions, [("GateShut", "ana"), ("GateOpened", "tester")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_then_not_found() {
    let server = start().await;
    let path = rollout_path("team", "gone");
    let created = server
        .put_yaml(&path, &flag_rollout("team", "gone", "r1"), &[])
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let deleted = server.send(Method::DELETE, &path, &[], Bytes::new()).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert_eq!(deleted.body, Value::Null);
    let reply = server.get(&path).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.error_code(), "not_found");
    let again = server.send(Method::DELETE, &path, &[], Bytes::new()).await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
    assert_eq!(again.error_code(), "not_found");
    assert_eq!(
        server.get(&format!("{path}/events")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_with_a_stale_if_match_changes_nothing() {
    let server = start().await;
    let path = rollout_path("team", "kept");
    let created = server
        .put_yaml(&path, &flag_rollout("team", "kept", "r1"), &[])
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let read = created.header("etag").unwrap().to_string();
    // Someone else changes it after we read it.
    let updated = server
        .put_yaml(&path, &flag_rollout("team", "kept", "r2"), &[])
        .await;
    assert_eq!(updated.status, StatusCode::OK);
    let stale = server
        .send(Method::DELETE, &path, &[("if-match", &read)], Bytes::new())
        .await;
    assert_eq!(stale.status, StatusCode::CONFLICT, "{:?}", stale.body);
    assert_eq!(
        server.get(&path).await.status,
        StatusCode::OK,
        "still there"
    );
    let bad = server
        .send(
            Method::DELETE,
            &path,
            &[("if-none-match", "*")],
            Bytes::new(),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{:?}", bad.body);
    // The engine's own steps change the version too: read it fresh, and read again if a step
    // landed in between (how a client uses If-Match).
    let deleted = wait_for_ok("a delete with a fresh If-Match", || async {
        let current = server.get(&path).await.header("etag").unwrap().to_string();
        let reply = server
            .send(
                Method::DELETE,
                &path,
                &[("if-match", &current)],
                Bytes::new(),
            )
            .await;
        if reply.status == StatusCode::CONFLICT {
            Err(format!(
                "a step landed between GET and DELETE: {:?}",
                reply.body
            ))
        } else {
            Ok(reply.status)
        }
    })
    .await;
    assert_eq!(deleted, StatusCode::NO_CONTENT);
    assert_eq!(server.get(&path).await.status, StatusCode::NOT_FOUND);
}

/// Reads server-sent events from a streaming body until `wanted` matches one, or the deadline.
async fn next_event(
    body: &mut hyper::body::Incoming,
    buffer: &mut String,
    wanted: impl Fn(&str, &Value) -> bool,
) -> (String, Value) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut event = String::from("message");
            let mut data = String::new();
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event:") {
                    event = name.trim().to_string();
                } else if let Some(text) = line.strip_prefix("data:") {
                    data.push_str(text.trim_start());
                }
            }
            if data.is_empty() {
                continue; // a comment (hello or keep-alive)
            }
            let value: Value = serde_json::from_str(&data).unwrap();
            if wanted(&event, &value) {
                return (event, value);
            }
        }
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("the wanted event did not come before the deadline")
            .expect("the stream ended")
            .unwrap();
        if let Ok(data) = frame.into_data() {
            buffer.push_str(&String::from_utf8_lossy(&data));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_status_changes() {
    let server = start().await;
    let path = rollout_path("team", "watched");
    server
        .put_yaml(&path, &held_at_half("team", "watched", "r1"), &[])
        .await;
    server
        .wait_for("team", "watched", "the pause at 50%", |rollout| {
            rollout["status"]["waitingForResume"] == true
        })
        .await;

    let request = Request::builder()
        .uri(format!(
            "{}/api/v1/watch?namespace=team&name=watched",
            server.base
        ))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = tokio::time::timeout(DEADLINE, server.client.request(request))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut body = response.into_body();
    let mut buffer = String::new();

    // The subscription exists once the headers are here: a command now is seen.
    let paused = server
        .command("team", "watched", json!({"command": "pause"}))
        .await;
    assert_eq!(paused.status, StatusCode::OK);
    let (event, data) = next_event(&mut body, &mut buffer, |event, data| {
        event == "status" && data["status"]["paused"] == true
    })
    .await;
    assert_eq!(event, "status");
    assert_eq!(data["namespace"], "team");
    assert_eq!(data["name"], "watched");
    assert_eq!(data["phase"], "Progressing");
    assert_eq!(data["canaryWeight"], 50);
    assert_eq!(data["version"], paused.body["version"]);
    let reasons: Vec<&str> = data["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|event| event["reason"].as_str())
        .collect();
    assert_eq!(reasons, ["Paused"]);
    assert!(data["events"][0]["seq"].as_u64().unwrap() > 0);

    // Deletion appears as Terminated with no status.
    let deleted = server.send(Method::DELETE, &path, &[], Bytes::new()).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let (_, data) = next_event(&mut body, &mut buffer, |event, data| {
        event == "status" && data["phase"] == "Terminated"
    })
    .await;
    assert_eq!(data["status"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flagger_canaries_are_accepted() {
    let server = start().await;
    let reply = server
        .put_yaml(&rollout_path("test", "podinfo"), PODINFO_CANARY, &[])
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let rollout = &reply.body["rollout"];
    assert_eq!(rollout["apiVersion"], "weir.dev/v1alpha1");
    assert_eq!(rollout["kind"], "Rollout");
    assert_eq!(rollout["spec"]["target"]["kind"], "kubernetes");
    assert!(reply.body["warnings"].is_array());
    let got = server.get(&rollout_path("test", "podinfo")).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body["metadata"]["name"], "podinfo");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_lists_every_route() {
    let server = start().await;
    let reply = server.get("/api/v1/openapi.json").await;
    assert_eq!(reply.status, StatusCode::OK);
    let doc = reply.body;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert!(doc["components"]["schemas"].is_object());
    let paths = doc["paths"].as_object().unwrap();

    // Every route the router serves is documented ...
    let served = [
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/api/v1/openapi.json"),
        ("get", "/metrics"),
        ("get", "/api/v1/rollouts"),
        ("post", "/api/v1/rollouts"),
        ("get", "/api/v1/rollouts/{namespace}/{name}"),
        ("put", "/api/v1/rollouts/{namespace}/{name}"),
        ("delete", "/api/v1/rollouts/{namespace}/{name}"),
        ("post", "/api/v1/rollouts/{namespace}/{name}/commands"),
        ("get", "/api/v1/rollouts/{namespace}/{name}/events"),
        ("get", "/api/v1/watch"),
        ("get", "/api/v1/flag-rollouts"),
        ("get", "/api/v1/flags"),
        ("post", "/api/v1/flags"),
        ("get", "/api/v1/flags/watch"),
        ("get", "/api/v1/flags/{namespace}/{key}"),
        ("put", "/api/v1/flags/{namespace}/{key}"),
        ("delete", "/api/v1/flags/{namespace}/{key}"),
        ("post", "/api/v1/flags/{namespace}/{key}/outcomes"),
        ("get", "/api/v1/flags/{namespace}/{key}/history"),
        ("get", "/api/v1/flags/{namespace}/{key}/evaluations"),
        ("get", "/api/v1/flags/{namespace}/{key}/triggers"),
        ("post", "/api/v1/flags/{namespace}/{key}/triggers"),
        ("delete", "/api/v1/flags/{namespace}/{key}/triggers/{id}"),
        ("post", "/api/v1/triggers/{id}/{secret}"),
        ("post", "/ofrep/v1/evaluate/flags"),
        ("post", "/ofrep/v1/evaluate/flags/{key}"),
        ("post", "/ns/{namespace}/ofrep/v1/evaluate/flags"),
        ("post", "/ns/{namespace}/ofrep/v1/evaluate/flags/{key}"),
        ("post", "/api/v1/session"),
        ("get", "/api/v1/session"),
        ("delete", "/api/v1/session"),
        ("get", "/api/v1/tokens"),
        ("post", "/api/v1/tokens"),
        ("delete", "/api/v1/tokens/{name}"),
    ];
    for (method, path) in served {
        assert!(
            paths.get(path).and_then(|item| item.get(method)).is_some(),
            "{method} {path} is not in openapi.json"
        );
    }
    // ... and every documented operation is served (no 405, no "no route").
    let mut operations = 0;
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            if method == "parameters" {
                continue;
            }
            operations += 1;
            let concrete = path
                .replace("{namespace}", "probe")
                .replace("{name}", "probe")
                .replace("{key}", "probe")
                .replace("{id}", "probe")
                .replace("{secret}", "probe");
            let method: Method = method.to_uppercase().parse().unwrap();
            let request = Request::builder()
                .method(method.clone())
                .uri(format!("{}{concrete}", server.base))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap();
            let response = tokio::time::timeout(DEADLINE, server.client.request(request))
                .await
                .unwrap()
                .unwrap();
            let status = response.status();
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            if status == StatusCode::NOT_FOUND {
                let body = response.into_body().collect().await.unwrap().to_bytes();
                let body: Value = serde_json::from_slice(&body).unwrap();
                // OFREP answers in its own shape: a missing flag, not a missing route.
                if body["errorCode"] == "FLAG_NOT_FOUND" {
                    continue;
                }
                let message = body["error"]["message"].as_str().unwrap();
                assert!(
                    !message.starts_with("no route"),
                    "{method} {path}: {message}"
                );
            }
        }
    }
    assert_eq!(operations, served.len());
    // ... and a documented path answers no method it does not document (405).
    for (path, item) in paths {
        let concrete = path
            .replace("{namespace}", "probe")
            .replace("{name}", "probe")
            .replace("{key}", "probe")
            .replace("{id}", "probe")
            .replace("{secret}", "probe");
        for method in ["get", "post", "put", "delete", "patch"] {
            if item.get(method).is_some() {
                continue;
            }
            let request = Request::builder()
                .method(method.to_uppercase().as_str())
                .uri(format!("{}{concrete}", server.base))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap();
            let response = tokio::time::timeout(DEADLINE, server.client.request(request))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path} is answered but not documented"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_end_on_shutdown() {
    let (shutdown, signal) = oneshot::channel();
    let server = start_with(Some(signal)).await;
    let request = Request::builder()
        .uri(format!("{}/api/v1/watch", server.base))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = tokio::time::timeout(DEADLINE, server.client.request(request))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    shutdown.send(()).unwrap();
    // The stream ends (after at most the hello comment) instead of staying open.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("the watch stream did not end on shutdown");
        match frame {
            None => break,
            Some(frame) => {
                let data = frame.unwrap().into_data().unwrap_or_default();
                assert!(
                    !String::from_utf8_lossy(&data).contains("event:"),
                    "unexpected event"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flag_changes_stream_as_server_sent_events() {
    let server = start().await;
    let request = Request::builder()
        .uri(format!("{}/api/v1/flags/watch?namespace=shop", server.base))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = tokio::time::timeout(DEADLINE, server.client.request(request))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut body = response.into_body();
    let mut buffer = String::new();
    let flag = |namespace: &str| {
        format!(
            "apiVersion: weir.dev/v1alpha1\nkind: Flag\nmetadata: {{name: banner, namespace: {namespace}}}\nspec:\n  variations: [{{name: a, value: true}}, {{name: b, value: false}}]\n  defaultStrategy: {{variation: a}}\n"
        )
    };
    // Another namespace's change is not this watcher's; this namespace's is.
    let other = server
        .put_yaml("/api/v1/flags/team/banner", &flag("team"), &[])
        .await;
    assert_eq!(other.status, StatusCode::CREATED);
    let created = server
        .put_yaml("/api/v1/flags/shop/banner", &flag("shop"), &[])
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let (event, data) = next_event(&mut body, &mut buffer, |event, _| event == "flag").await;
    assert_eq!(event, "flag");
    assert_eq!(
        data,
        json!({"namespace": "shop", "key": "banner", "version": 1})
    );
    let deleted = server
        .send(
            Method::DELETE,
            "/api/v1/flags/shop/banner",
            &[],
            String::new(),
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let (_, data) = next_event(&mut body, &mut buffer, |event, _| event == "flag").await;
    assert_eq!(
        data,
        json!({"namespace": "shop", "key": "banner", "version": null})
    );
}

/// A flag whose document names no namespace lives in `default`, and every answer about it says
/// so (as for rollouts): a client builds links from what it is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flag_without_a_namespace_is_answered_in_default() {
    let server = start().await;
    let created = server
        .send(
            Method::POST,
            "/api/v1/flags",
            &[("content-type", "application/yaml")],
            "apiVersion: weir.dev/v1alpha1\nkind: Flag\nmetadata: {name: banner}\nspec:\n  variations: [{name: a, value: true}, {name: b, value: false}]\n  defaultStrategy: {variation: a}\n".to_string(),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(
        created.body["flag"]["metadata"]["namespace"], "default",
        "{}",
        created.body
    );
    let one = server.get("/api/v1/flags/default/banner").await;
    assert_eq!(one.body["metadata"]["namespace"], "default", "{}", one.body);
    let list = server.get("/api/v1/flags").await;
    assert_eq!(
        list.body["items"][0]["metadata"]["namespace"], "default",
        "{}",
        list.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flag_rollouts_are_listed_with_their_schedules_filtered_and_ordered() {
    let server = start().await;
    let created = seed_flag_rollouts(&server).await;

    // By name (the default): every rollout of a flag, nothing else.
    let all = server.get("/api/v1/flag-rollouts").await;
    assert_eq!(all.status, StatusCode::OK, "{:#}", all.body);
    let mut by_name = created.clone();
    by_name.sort();
    assert_eq!(names(&all), by_name);
    assert_eq!(all.body["nextCursor"], Value::Null);
    let item = |name: &str| {
        all.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["metadata"]["name"] == name)
            .unwrap()
            .clone()
    };
    // Each item is the rollout as /api/v1/rollouts shows it, plus its schedule.
    let running = item("c-running");
    let as_rollout = server.get(&rollout_path("shop", "c-running")).await.body;
    // (Every field of it; the status and version only as fields, since the engine may still
    // commit a tick between the two reads.)
    for field in as_rollout.as_object().unwrap().keys() {
        assert!(
            running.get(field).is_some(),
            "{field} is missing: {running:#}"
        );
    }
    for field in ["apiVersion", "kind", "metadata", "spec", "createdAt"] {
        assert_eq!(running[field], as_rollout[field], "{field}");
    }
    let schedule = &running["schedule"];
    assert_eq!(schedule["type"], "manual");
    assert_eq!(schedule["state"], "RUNNING");
    assert_eq!(
        (schedule["done"].as_u64(), schedule["total"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(schedule["weight"], 20);
    assert!(
        schedule["entries"][0]["triggeredAt"].is_string(),
        "{schedule:#}"
    );
    assert!(
        schedule["entries"][1].get("triggeredAt").is_none(),
        "{schedule:#}"
    );
    assert_eq!(schedule["next"]["weight"], 100);
    assert_eq!(schedule["next"]["at"], schedule["entries"][1]["at"]);
    let template = item("b-template")["schedule"].clone();
    assert_eq!(
        (
            &template["type"],
            &template["state"],
            &template["total"],
            &template["done"]
        ),
        (&json!("template"), &json!("WAITING"), &json!(4), &json!(0))
    );
    assert_eq!(template["next"]["weight"], 25);
    let finished = item("e-finished")["schedule"].clone();
    assert_eq!(
        (&finished["state"], &finished["weight"]),
        (&json!("FINISHED"), &json!(100))
    );
    assert!(finished.get("next").is_none(), "{finished:#}");
    let stopped = item("d-stopped")["schedule"].clone();
    assert_eq!(stopped["state"], "STOPPED");
    assert!(stopped.get("next").is_none(), "{stopped:#}");
    assert!(item("f-steps").get("schedule").is_none());

    // The client's type reads the server's answer.
    let page: weir_api::types::FlagRolloutPage = serde_json::from_value(all.body.clone()).unwrap();
    assert_eq!(page.items.len(), created.len());

    let listed = |query: &'static str| {
        let server = &server;
        async move {
            let reply = server.get(&format!("/api/v1/flag-rollouts?{query}")).await;
            assert_eq!(reply.status, StatusCode::OK, "{query}: {:#}", reply.body);
            names(&reply)
        }
    };
    // Flag keys, repeated or comma-separated.
    assert_eq!(
        listed("flag=banner").await,
        ["other/e-finished", "shop/a-waiting"]
    );
    assert_eq!(
        listed("flag=checkout,search-box").await,
        ["shop/b-template", "shop/c-running"]
    );
    assert_eq!(
        listed("flag=checkout&flag=search-box").await,
        listed("flag=checkout,search-box").await
    );
    // Status, any case, repeated or comma-separated; a rollout without a schedule has none.
    assert_eq!(
        listed("status=waiting").await,
        ["shop/a-waiting", "shop/b-template"]
    );
    assert_eq!(
        listed("status=RUNNING,stopped&status=FINISHED").await,
        ["other/e-finished", "shop/c-running", "shop/d-stopped"]
    );
    // Type.
    assert_eq!(listed("type=template").await, ["shop/b-template"]);
    assert_eq!(listed("type=manual").await.len(), 4);
    // Search: the rollout's name or its flag's key, any case.
    assert_eq!(
        listed("search=CHECKOUT").await,
        ["shop/b-template", "shop/d-stopped"]
    );
    assert_eq!(listed("search=finish").await, ["other/e-finished"]);
    // Namespace, and filters together.
    assert_eq!(listed("namespace=other").await, ["other/e-finished"]);
    assert_eq!(
        listed("namespace=shop&flag=banner&status=waiting&type=manual&search=wait").await,
        ["shop/a-waiting"]
    );
    assert!(
        listed("namespace=shop&flag=banner&status=finished")
            .await
            .is_empty()
    );

    // Order: created either way, updated either way.
    assert_eq!(listed("order=created").await, created);
    let mut newest_first = created.clone();
    newest_first.reverse();
    assert_eq!(listed("order=-created").await, newest_first);
    for (query, ascending) in [("order=updated", true), ("order=-updated", false)] {
        let reply = server.get(&format!("/api/v1/flag-rollouts?{query}")).await;
        let updated: Vec<jiff::Timestamp> = reply.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["updatedAt"].as_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(updated.len(), created.len());
        let mut sorted = updated.clone();
        sorted.sort();
        if !ascending {
            sorted.reverse();
        }
        assert_eq!(updated, sorted, "{query}");
        assert_ne!(updated.first(), updated.last(), "{query}: the times differ");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flag_rollouts_page_with_cursors() {
    let server = start().await;
    let created = seed_flag_rollouts(&server).await;

    let first = server
        .get("/api/v1/flag-rollouts?order=created&limit=4")
        .await;
    assert_eq!(first.status, StatusCode::OK, "{:#}", first.body);
    assert_eq!(names(&first), created[..4]);
    let cursor = first.body["nextCursor"].as_str().unwrap().to_string();
    let second = server
        .get(&format!(
            "/api/v1/flag-rollouts?order=created&limit=4&cursor={cursor}"
        ))
        .await;
    assert_eq!(second.status, StatusCode::OK, "{:#}", second.body);
    assert_eq!(names(&second), created[4..]);
    assert!(
        second.body.get("nextCursor").is_none(),
        "the last page has no cursor: {:#}",
        second.body
    );
    // One rollout left over still gets its own page.
    let five = server
        .get("/api/v1/flag-rollouts?order=created&limit=5")
        .await;
    assert_eq!(names(&five), created[..5]);
    let cursor = five.body["nextCursor"].as_str().unwrap().to_string();
    let last = server
        .get(&format!(
            "/api/v1/flag-rollouts?order=created&limit=5&cursor={cursor}"
        ))
        .await;
    assert_eq!(names(&last), created[5..]);
    // Filters apply before the page is cut: two pages of the four manual schedules.
    let manual = server
        .get("/api/v1/flag-rollouts?type=manual&limit=2")
        .await;
    let cursor = manual.body["nextCursor"].as_str().unwrap().to_string();
    let rest = server
        .get(&format!(
            "/api/v1/flag-rollouts?type=manual&limit=2&cursor={cursor}"
        ))
        .await;
    let mut both = names(&manual);
    both.extend(names(&rest));
    assert_eq!(
        both,
        [
            "other/e-finished",
            "shop/a-waiting",
            "shop/c-running",
            "shop/d-stopped"
        ]
    );
    assert!(rest.body.get("nextCursor").is_none());
    // A cursor past the end is an empty last page.
    let past = server.get("/api/v1/flag-rollouts?cursor=50").await;
    assert_eq!(past.status, StatusCode::OK);
    assert!(names(&past).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flag_rollout_lists_refuse_bad_parameters_by_name() {
    let server = start().await;
    let reply = server.get("/api/v1/flag-rollouts?status=DONE").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:#}", reply.body);
    assert_eq!(reply.error_code(), "invalid");
    assert_eq!(reply.error_paths(), ["status"]);
    let message = reply.body["error"]["errors"][0]["message"]
        .as_str()
        .unwrap();
    assert!(
        message.contains("\"DONE\"")
            && message.contains("one of WAITING, RUNNING, FINISHED, STOPPED"),
        "{message}"
    );

    let reply = server
        .get("/api/v1/flag-rollouts?status=waiting,doing&type=automatic&order=key&limit=x&cursor=next")
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:#}", reply.body);
    assert_eq!(
        reply.error_paths(),
        ["status", "type", "order", "limit", "cursor"]
    );

    let reply = server
        .get("/api/v1/flag-rollouts?flags=banner&namespace=shop")
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:#}", reply.body);
    assert_eq!(reply.error_paths(), ["flags"]);
    let message = reply.body["error"]["errors"][0]["message"]
        .as_str()
        .unwrap();
    assert!(
        message.contains("unknown query parameter")
            && message.contains("namespace, flag, status, type, search, order, limit, cursor"),
        "{message}"
    );

    let reply = server
        .get("/api/v1/flag-rollouts?type=manual&type=template")
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:#}", reply.body);
    assert_eq!(reply.error_paths(), ["type"]);
}

/// What the OpenAPI document declares is what the server enforces (found by schemathesis,
/// `crates/weir/tests/openapi_fuzz.rs`): page sizes at most 500, numbers of digits only, an
/// empty value of a typed parameter refused (free-text filters take it as absent), cursors of
/// their documented shape, preconditions that cannot all hold answered 409, a delete of
/// "version 0" refused, an OFREP namespace that is no namespace's name refused, and counts
/// written as integral floats (2.0, an integer to JSON Schema) accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_constraints_the_openapi_document_declares_are_enforced() {
    let server = start().await;
    for list in [
        "/api/v1/rollouts",
        "/api/v1/flags",
        "/api/v1/flag-rollouts",
        "/api/v1/rollouts/team/web/events",
    ] {
        let reply = server.get(&format!("{list}?limit=501")).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{list}: {:#}",
            reply.body
        );
        assert_eq!(reply.error_paths(), ["limit"], "{list}");
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("at most 500"), "{list}: {message}");
    }
    for list in ["/api/v1/rollouts", "/api/v1/flags", "/api/v1/flag-rollouts"] {
        let reply = server.get(&format!("{list}?limit=500")).await;
        assert_eq!(reply.status, StatusCode::OK, "{list}: {:#}", reply.body);
    }
    for (path, field) in [
        ("/api/v1/rollouts?limit=%2B5", "limit"),
        ("/api/v1/rollouts?phase=", "phase"),
        ("/api/v1/rollouts?cursor=", "cursor"),
        ("/api/v1/rollouts?cursor=4A.61", "cursor"),
        ("/api/v1/flags?cursor=", "cursor"),
        ("/api/v1/flags?cursor=%2B1", "cursor"),
        ("/api/v1/flags?order=", "order"),
        ("/api/v1/flag-rollouts?cursor=%2B1", "cursor"),
        ("/api/v1/flag-rollouts?type=", "type"),
        ("/api/v1/rollouts/team/web/events?after=-1", "after"),
    ] {
        let reply = server.get(path).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{path}: {:#}",
            reply.body
        );
        assert_eq!(reply.error_paths(), [field], "{path}");
    }
    // A free-text filter left empty filters nothing.
    let reply = server.get("/api/v1/rollouts?namespace=&limit=0").await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);

    // Preconditions that no stored version can satisfy: a failed precondition, 409.
    let path = rollout_path("team", "web");
    for headers in [
        vec![("content-type", "application/yaml"), ("if-match", "\"3\"")],
        vec![
            ("content-type", "application/yaml"),
            ("if-match", "*"),
            ("if-none-match", "*"),
        ],
    ] {
        let reply = server
            .send(
                Method::PUT,
                &format!("{path}?expectedVersion=4"),
                &headers,
                "{}",
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::CONFLICT,
            "{headers:?}: {:#}",
            reply.body
        );
        assert_eq!(reply.body["error"]["code"], "conflict");
    }
    for delete in [path.clone(), "/api/v1/flags/team/web".to_string()] {
        let reply = server
            .send(
                Method::DELETE,
                &format!("{delete}?expectedVersion=0"),
                &[],
                Bytes::new(),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{delete}: {:#}",
            reply.body
        );
        assert_eq!(reply.error_paths(), ["expectedVersion"], "{delete}");
    }

    // OFREP: "no flags" for a namespace no namespace can be named would hide the mistake.
    let reply = server
        .send(
            Method::POST,
            "/ns/Not_A_Namespace/ofrep/v1/evaluate/flags",
            &[("content-type", "application/json")],
            "{}",
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:#}", reply.body);
    assert_eq!(reply.body["errorCode"], "GENERAL");

    // Counts as integral floats are counts; fractions are not.
    let flag = "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: checkout, namespace: shop}
spec:
  variations: [{name: 'off', value: false}, {name: 'on', value: true}]
  defaultStrategy: {variation: 'off'}
";
    let created = server
        .send(
            Method::POST,
            "/api/v1/flags",
            &[("content-type", "application/yaml")],
            flag,
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:#}", created.body);
    let outcomes = "/api/v1/flags/shop/checkout/outcomes";
    let json = [("content-type", "application/json")];
    let reply = server
        .send(
            Method::POST,
            outcomes,
            &json,
            r#"{"variants": {"on": {"requests": 2.0, "errors": 1.0}}}"#,
        )
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{:#}", reply.body);
    let reply = server
        .send(
            Method::POST,
            outcomes,
            &json,
            r#"{"variants": {"on": {"requests": 2.5}}}"#,
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:#}", reply.body);
    assert_eq!(reply.error_paths(), ["variants.on.requests"]);
}
