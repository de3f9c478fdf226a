//! weir-api: the HTTP API of a weir server (axum).
//!
//! A front end, nothing more: reads go to the [`Store`], every write goes through the engine's
//! [`EngineHandle`] (the engine is the only writer, so it never races the API), and status
//! changes come from the engine's broadcast.
//!
//! | route | what |
//! |---|---|
//! | `GET /healthz` | liveness |
//! | `GET /readyz` | readiness (an operator replica that is not the leader answers 503; `weir serve` on PostgreSQL: 503 while the database cannot be reached or this instance's leases are not live, [`Readiness`]) |
//! | `GET /metrics` | weir's own metrics, OpenMetrics text (docs/METRICS.md) |
//! | `GET /api/v1/openapi.json` | the OpenAPI 3.1 document, generated from the route table and the types (`openapi.rs`) |
//! | `GET /api/v1/rollouts?namespace=&phase=&limit=&cursor=` | a page of rollouts |
//! | `POST /api/v1/rollouts` | apply (create or update) a Rollout or a Flagger Canary |
//! | `GET /api/v1/rollouts/{namespace}/{name}` | one rollout (`ETag`: its version) |
//! | `PUT /api/v1/rollouts/{namespace}/{name}` | apply, with the path naming the document |
//! | `DELETE /api/v1/rollouts/{namespace}/{name}` | delete |
//! | `POST /api/v1/rollouts/{namespace}/{name}/commands` | promote, abort, pause, resume, ... |
//! | `GET /api/v1/rollouts/{namespace}/{name}/events?after=&limit=` | the history |
//! | `GET /api/v1/watch?namespace=&name=` | Server-Sent Events of status changes |
//! | `GET /api/v1/flag-rollouts?namespace=&flag=&status=&type=&search=&order=&limit=&cursor=` | a page of the rollouts of flags, each with where its schedule stands |
//! | `/api/v1/flags...`, `/ofrep/v1/...` | feature flags and their evaluation ([`flags_router`]; `weir serve` only) |
//! | `GET /`, `/ui/{file}`, `/rollouts/...`, `/flags/...`, `/tokens`, `/login` | the web dashboard (`dashboard.rs`, docs/DASHBOARD.md) |
//!
//! Every error is JSON, `{"error": {"code", "message", "errors": [{"path", "value", "message"}]}}`
//! (see [`ApiError`]); no input makes a handler panic.
//!
//! A server puts [`HostPolicy`] in front of all of it (`weir serve`, `weir run --listen`): a
//! request whose `Host` is not a name the server answers to, or a change sent by a web page of
//! another origin, is refused before any handler runs (DNS rebinding and CSRF; `host.rs`).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod auth;
mod dashboard;
mod error;
mod flag_history;
mod flag_rollouts;
mod flags;
mod host;
mod input;
mod metrics;
mod ofrep;
mod openapi;
mod outcomes;
mod readiness;
mod rollouts;
mod triggers;
pub mod types;
mod watch;

use std::future::Future;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use tokio::sync::watch as signal;
use weir_engine::EngineHandle;
use weir_flags::Flags;
use weir_store::{FlagStore, Store};

pub use auth::{Auth, AuthConfig};
pub use error::{ApiError, ErrorCode};
pub use host::HostPolicy;
pub use metrics::{OPENMETRICS_CONTENT_TYPE, metrics_router};
pub use ofrep::DEFAULT_NAMESPACE as OFREP_DEFAULT_NAMESPACE;
pub use openapi::{document as openapi_document, openapi_json};
pub use readiness::Readiness;

/// The largest request body accepted (the size limit of a document); larger bodies get 413.
pub const MAX_BODY_BYTES: usize = weir_core::document::MAX_DOCUMENT_BYTES;

/// What every handler shares.
#[derive(Clone)]
struct ApiState<S: Store> {
    store: S,
    engine: EngineHandle,
    /// Becomes `true` when open watch streams should end.
    shutdown: signal::Receiver<bool>,
}

/// The API over `store` (for reads) and a running engine (for every write).
///
/// Watch streams stay open until their client hangs up or the engine stops; a server that shuts
/// down gracefully while watchers are connected should use [`router_with_shutdown`].
pub fn router<S: Store>(store: S, engine: EngineHandle) -> Router {
    // The sender is dropped at once: a closed channel never signals, so watches run on.
    let (_never, shutdown) = signal::channel(false);
    build(ApiState {
        store,
        engine,
        shutdown,
    })
}

/// Like [`router`], and every open watch stream ends when `shutdown` completes, so that
/// `axum::serve(..).with_graceful_shutdown(..)` does not wait for watchers that never hang up.
/// Must be called within a Tokio runtime (it spawns the task that waits for `shutdown`).
pub fn router_with_shutdown<S, F>(store: S, engine: EngineHandle, shutdown: F) -> Router
where
    S: Store,
    F: Future<Output = ()> + Send + 'static,
{
    let (trigger, receiver) = signal::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        // Nobody watching is fine.
        let _ = trigger.send(true);
        // Keep the sender alive until every watcher has seen the signal.
        trigger.closed().await;
    });
    build(ApiState {
        store,
        engine,
        shutdown: receiver,
    })
}

fn build<S: Store>(state: ApiState<S>) -> Router {
    Router::new()
        .route("/healthz", get(health))
        // Ready to answer: a weir operator replica that is not the leader answers 503 here.
        .route("/readyz", get(health))
        .route("/metrics", get(serve_metrics::<S>))
        .route("/api/v1/openapi.json", get(openapi::serve))
        .route(
            "/api/v1/rollouts",
            get(rollouts::list::<S>).post(rollouts::create::<S>),
        )
        .route(
            "/api/v1/rollouts/{namespace}/{name}",
            get(rollouts::get_one::<S>)
                .put(rollouts::put::<S>)
                .delete(rollouts::delete::<S>),
        )
        .route(
            "/api/v1/rollouts/{namespace}/{name}/commands",
            post(rollouts::command::<S>),
        )
        .route(
            "/api/v1/rollouts/{namespace}/{name}/events",
            get(rollouts::events::<S>),
        )
        .route("/api/v1/watch", get(watch::watch::<S>))
        .route("/api/v1/flag-rollouts", get(flag_rollouts::list::<S>))
        // The dashboard: its page, its assets, and its own routes in the fallback (which keeps
        // the JSON 404 for everything else).
        .route("/", get(dashboard::index))
        .route("/ui/{file}", get(dashboard::asset))
        .fallback(dashboard::fallback)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// The routes of feature flags over `flags`: the REST API (`/api/v1/flags`, see `flags.rs`, with
/// Server-Sent Events of flag changes at `/api/v1/flags/watch` and reports of outcomes per
/// variant at `/api/v1/flags/{namespace}/{key}/outcomes`, see `outcomes.rs`) and OFREP (`/ofrep/v1/...`,
/// `/ns/{namespace}/ofrep/v1/...`, see `ofrep.rs`). Merged into [`router`]'s by a server that
/// keeps flags (`weir serve`; the operator keeps none). Watch streams run until their client
/// hangs up; a server that shuts down gracefully uses [`flags_router_with_shutdown`].
pub fn flags_router<F: FlagStore>(flags: Flags<F>) -> Router {
    let (_never, shutdown) = signal::channel(false);
    build_flags(flags::FlagsState { flags, shutdown })
}

/// Like [`flags_router`], and every open flag watch ends when `shutdown` completes. Must be
/// called within a Tokio runtime.
pub fn flags_router_with_shutdown<F, S>(flags: Flags<F>, shutdown: S) -> Router
where
    F: FlagStore,
    S: Future<Output = ()> + Send + 'static,
{
    let (trigger, receiver) = signal::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = trigger.send(true);
        trigger.closed().await;
    });
    build_flags(flags::FlagsState {
        flags,
        shutdown: receiver,
    })
}

/// How often the evaluation counts per minute are written to the store (and at shutdown).
const EVALUATIONS_FLUSH: std::time::Duration = std::time::Duration::from_secs(5);

/// Writes the flags' evaluation counts to the store every [`EVALUATIONS_FLUSH`] and once more
/// when `shutdown` says so (`weir_flags::Flags::flush_evaluations`).
fn spawn_evaluation_flusher<F: FlagStore>(
    flags: Flags<F>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut ticks = tokio::time::interval(EVALUATIONS_FLUSH);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stopping = tokio::select! {
                _ = ticks.tick() => false,
                stopped = shutdown.wait_for(|stop| *stop) => stopped.is_ok(),
            };
            if let Err(error) = flags.flush_evaluations(jiff::Timestamp::now()).await {
                tracing::warn!(%error, "flag evaluation counts were not written (tried again later)");
            }
            if stopping {
                return;
            }
            if shutdown.has_changed().is_err() && !*shutdown.borrow() {
                // No shutdown signal can come any more: keep flushing on the ticks alone.
                loop {
                    ticks.tick().await;
                    if let Err(error) = flags.flush_evaluations(jiff::Timestamp::now()).await {
                        tracing::warn!(%error, "flag evaluation counts were not written (tried again later)");
                    }
                }
            }
        }
    });
}

fn build_flags<F: FlagStore>(state: flags::FlagsState<F>) -> Router {
    spawn_evaluation_flusher(state.flags.clone(), state.shutdown.clone());
    Router::new()
        .route(
            "/api/v1/flags",
            get(flags::list::<F>).post(flags::create::<F>),
        )
        .route("/api/v1/flags/watch", get(flags::watch::<F>))
        .route(
            "/api/v1/flags/{namespace}/{key}",
            get(flags::get_one::<F>)
                .put(flags::put::<F>)
                .delete(flags::delete::<F>),
        )
        .route(
            "/api/v1/flags/{namespace}/{key}/outcomes",
            post(outcomes::report::<F>),
        )
        .route(
            "/api/v1/flags/{namespace}/{key}/history",
            get(flag_history::history::<F>),
        )
        .route(
            "/api/v1/flags/{namespace}/{key}/evaluations",
            get(flag_history::evaluations::<F>),
        )
        .route(
            "/api/v1/flags/{namespace}/{key}/triggers",
            get(triggers::list::<F>).post(triggers::create::<F>),
        )
        .route(
            "/api/v1/flags/{namespace}/{key}/triggers/{id}",
            axum::routing::delete(triggers::revoke::<F>),
        )
        .route(triggers::TRIGGER_ROUTE, post(triggers::fire::<F>))
        .route("/ofrep/v1/evaluate/flags", post(ofrep::bulk_default::<F>))
        .route(
            "/ofrep/v1/evaluate/flags/{key}",
            post(ofrep::evaluate_default::<F>),
        )
        .route(
            "/ns/{namespace}/ofrep/v1/evaluate/flags",
            post(ofrep::bulk_in::<F>),
        )
        .route(
            "/ns/{namespace}/ofrep/v1/evaluate/flags/{key}",
            post(ofrep::evaluate_in::<F>),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// `GET /metrics`: every series, or only those of its namespaces for a caller whose token is
/// limited to some (`weir serve --metrics-auth read`; `metrics.rs`).
async fn serve_metrics<S: Store>(
    axum::extract::State(state): axum::extract::State<ApiState<S>>,
    caller: auth::Caller,
) -> axum::response::Response {
    metrics::answer(state.engine.telemetry(), caller.namespaces())
}

async fn health() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"status": "ok"}))
}
