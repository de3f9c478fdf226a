//! What weir's tests share, so that no test file carries its own copy (a dev-dependency only).
//!
//! The rules it serves (docs/TESTING.md): no test picks a free port and hopes - every server binds
//! port 0 and the test reads back the address it got ([`process::Weir`] reads the first line a
//! `weir` command prints with `--output json`); no fixed sleep as synchronisation - tests wait on
//! the condition itself with a generous deadline ([`wait`]).
//!
//! - [`wait`]: `wait_until` and its async twins, polling a condition until a deadline; `no_hang`,
//!   which fails a test that deadlocks instead of letting it hang.
//! - [`engine`]: an engine running in the background of a test until stopped.
//! - [`http`]: one-shot HTTP/1.1 requests over loopback, blocking, for tests without a runtime.
//! - [`client`]: HTTP from async tests through hyper's pooled client (HTTP/1.1 or h2c).
//! - [`upstream`]: a test server standing in for a version behind weir's router.
//! - [`router`]: weir's router started on port 0 in the test's runtime.
//! - [`receiver`]: a webhook receiver that records what it gets and answers as told.
//! - [`metrics`]: samples of an OpenMetrics / Prometheus text body.
//! - [`process`]: children killed when the test ends however it ends; `weir` commands started
//!   with their bound addresses read back.
//! - [`flags`]: boolean flags, rollouts of them on a manual schedule, and an engine with the
//!   real `flag` target over a real SQLite store (the schedule replay and its benchmark).
//! - [`fixtures`]: sample apps on port 0, an address that refuses connections, temporary
//!   databases, documents loaded into a catalog.
//! - [`kube_server`]: a strict in-memory Kubernetes API server on port 0 for kubectl and kube-rs.
//! - [`deployment_controller`]: the Deployment, DaemonSet and ReplicaSet controllers played on it
//!   (3 nodes for DaemonSets), new pods available at once, after a delay or never.
//! - [`job_controller`]: the Job controller played on it: each Job's command runs as a local
//!   process (the image is ignored), its status written as the real controller's.
//! - [`argo_cluster`]: Argo Rollouts' CRDs (`argoproj.io/v1alpha1`), written for the server.
//! - [`traffic_audit`]: every state the server went through, checked for a Service or route
//!   sending traffic to Deployments or DaemonSets with no available pod.
//! - [`kube_cluster`]: the operator tests' cluster on it.
//! - [`prometheus`]: the real `prometheus` binary, on a port it picks, scraping given targets.
//! - [`graphite`]: a real Graphite render API (graphite-api under gunicorn, from a Python
//!   virtual environment) on a port it picks, over whisper files the test writes points into.
//! - [`istio`]: Istio's request counters for the kube_cluster's `podinfo`, split as its
//!   VirtualService says, at `/metrics` for Prometheus to scrape.
//! - [`tls`]: a private CA and server certificates made with `openssl` (as docs/SECURITY.md
//!   shows), and a TLS client over loopback that trusts only that CA.
//! - [`webdriver`]: a headless Chromium driven over WebDriver (`chromedriver`), for the
//!   dashboard's end-to-end test.
//! - [`postgres`]: a throwaway PostgreSQL cluster per test (unix socket only), its databases
//!   as sqlx URLs, stopped and removed when dropped.
//! - [`operator_scale`]: the operator scale benchmark's harness (N rollouts in one `weir
//!   operator` against the in-memory API server), shared by its example and its smoke test.

#![forbid(unsafe_code)]
// Test support: a failed set-up is a failed test, and a panic says where.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod argo_cluster;
pub mod client;
pub mod deployment_controller;
pub mod engine;
pub mod fixtures;
pub mod flagger_corpus;
pub mod flags;
pub mod graphite;
pub mod http;
pub mod istio;
pub mod job_controller;
pub mod knative_controller;
pub mod kube_cluster;
pub mod kube_server;
pub mod metric_doubles;
pub mod metric_doubles_cloud;
pub mod metric_doubles_identity;
pub mod metrics;
pub mod operator_scale;
pub mod postgres;
pub mod process;
pub mod prometheus;
pub mod proxy;
pub mod receiver;
pub mod router;
pub mod tls;
pub mod traffic_audit;
pub mod upstream;
pub mod wait;
pub mod webdriver;
