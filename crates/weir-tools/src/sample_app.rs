//! A small HTTP service for trials: it answers with its version, and fails or slows down on
//! demand.
//!
//! Endpoints (any method):
//! - `/healthz`: always `200` with `{"status":"ok","version":"..."}`, never delayed nor failed,
//!   so a faulty version still starts and passes its health check.
//! - `/version`: always `200` with the version as plain text (and a newline).
//! - any other path: after the configured latency (plus jitter), `200` with
//!   `{"version":"...","path":"..."}`, or - with probability [`SampleAppConfig::error_percent`]
//!   - `500` with `{"version":"...","path":"...","error":"injected fault"}`.
//!
//! Every response carries the [`x-weir-version`](crate::VERSION_HEADER) header.
//!
//! Faults are drawn deterministically: the n-th application request (counted from 0 in arrival
//! order) fails when draw `n` of [`SampleAppConfig::seed`] falls below the error rate. With
//! one client sending requests one at a time, the same seed gives the same faults every run.
//!
//! ```no_run
//! # async fn example() -> Result<(), weir_tools::sample_app::SampleAppError> {
//! use weir_tools::sample_app::{SampleApp, SampleAppConfig};
//!
//! let mut config = SampleAppConfig::new("127.0.0.1:0".parse().unwrap(), "v2");
//! config.error_percent = 5.0;
//! let app = SampleApp::bind(config).await?;
//! println!("listening on {}", app.local_addr());
//! app.serve(async { tokio::signal::ctrl_c().await.ok(); }).await?;
//! # Ok(())
//! # }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::VERSION_HEADER;

/// Largest request body the app reads (and discards); larger bodies are left unread and the
/// connection is closed after the response.
const MAX_BODY_BYTES: usize = 1 << 20;

/// How long [`SampleApp::serve`] waits for in-flight requests after `shutdown` completes.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Stream offset separating latency-jitter draws from fault draws under the same seed.
const JITTER_STREAM: u64 = 0x5DEE_CE66_D1CE_4E5B;

/// How a sample app behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleAppConfig {
    /// Address to listen on. Port 0 picks a free port: read it from
    /// [`SampleApp::local_addr`].
    pub listen: SocketAddr,
    /// The version this app reports (in bodies and the `x-weir-version` header). Must be a
    /// valid header value: visible ASCII, not empty.
    pub version: String,
    /// Share of application requests answered with `500`, **in percent**: `0.0..=100.0`
    /// (e.g. `5.0` = 5%). `/healthz` and `/version` never fail.
    pub error_percent: f64,
    /// Fixed delay added before answering each application request.
    pub latency: Duration,
    /// Extra random delay, uniform in `0..=jitter`, added on top of [`Self::latency`].
    pub jitter: Duration,
    /// Seed of the fault and jitter draws.
    pub seed: u64,
}

impl SampleAppConfig {
    /// A healthy, fast app: no faults, no added latency, seed 0.
    pub fn new(listen: SocketAddr, version: impl Into<String>) -> SampleAppConfig {
        SampleAppConfig {
            listen,
            version: version.into(),
            error_percent: 0.0,
            latency: Duration::ZERO,
            jitter: Duration::ZERO,
            seed: 0,
        }
    }

    /// Checks the error rate and the version.
    pub fn validate(&self) -> Result<(), SampleAppError> {
        if !(0.0..=100.0).contains(&self.error_percent) {
            return Err(SampleAppError::ErrorRate(self.error_percent));
        }
        if self.version.is_empty() || HeaderValue::from_str(&self.version).is_err() {
            return Err(SampleAppError::Version(self.version.clone()));
        }
        Ok(())
    }
}

/// Why a sample app cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SampleAppError {
    /// The error rate is outside `0..=100` percent (or not a number).
    #[error("the error rate must be a percentage from 0 to 100, got {0}")]
    ErrorRate(f64),
    /// The version is empty or not a valid header value.
    #[error("the version must be non-empty visible ASCII (it is sent as a header), got {0:?}")]
    Version(String),
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's reason.
        source: io::Error,
    },
}

/// Counters of a running sample app, readable while it serves.
#[derive(Debug, Clone, Default)]
pub struct SampleAppStats(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    injected_errors: AtomicU64,
}

impl SampleAppStats {
    /// Application requests answered so far (not counting `/healthz` and `/version`).
    pub fn requests(&self) -> u64 {
        self.0.requests.load(Ordering::Relaxed)
    }

    /// Of those, how many were answered with an injected `500`.
    pub fn injected_errors(&self) -> u64 {
        self.0.injected_errors.load(Ordering::Relaxed)
    }
}

/// A bound, not yet serving, sample app.
#[derive(Debug)]
pub struct SampleApp {
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    version: String,
    header: HeaderValue,
    error_fraction: f64,
    latency: Duration,
    jitter: Duration,
    seed: u64,
    next: AtomicU64,
    stats: SampleAppStats,
}

impl SampleApp {
    /// Validates `config` and binds its address. Serving starts with [`SampleApp::serve`].
    pub async fn bind(config: SampleAppConfig) -> Result<SampleApp, SampleAppError> {
        config.validate()?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| SampleAppError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener
            .local_addr()
            .map_err(|source| SampleAppError::Bind {
                addr: config.listen,
                source,
            })?;
        let header = HeaderValue::from_str(&config.version)
            .map_err(|_| SampleAppError::Version(config.version.clone()))?;
        Ok(SampleApp {
            listener,
            addr,
            state: Arc::new(State {
                version: config.version,
                header,
                error_fraction: config.error_percent / 100.0,
                latency: config.latency,
                jitter: config.jitter,
                seed: config.seed,
                next: AtomicU64::new(0),
                stats: SampleAppStats::default(),
            }),
        })
    }

    /// The bound address (with the real port when the configured port was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle on the request counters, usable while (and after) the app serves.
    pub fn stats(&self) -> SampleAppStats {
        self.state.stats.clone()
    }

    /// Serves until `shutdown` completes, then stops accepting connections and lets in-flight
    /// requests finish (for at most 5 seconds).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), SampleAppError> {
        let graceful = GracefulShutdown::new();
        let builder = auto::Builder::new(TokioExecutor::new());
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => {
                    let stream = match accepted {
                        Ok((stream, _peer)) => stream,
                        Err(_) => {
                            // Accept errors are transient (a reset connection, too many open
                            // files): back off a little and keep serving.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let state = self.state.clone();
                    let service = service_fn(move |request| handle(state.clone(), request));
                    let connection = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .into_owned();
                    let connection = graceful.watch(connection);
                    tokio::spawn(async move {
                        // A client going away mid-request is not the app's problem.
                        let _ = connection.await;
                    });
                }
            }
        }
        drop(self.listener);
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown()).await;
        Ok(())
    }
}

/// Binds `config.listen` and serves until `shutdown` completes. Use [`SampleApp::bind`] to
/// learn the port first when listening on port 0.
pub async fn serve(
    config: SampleAppConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SampleAppError> {
    SampleApp::bind(config).await?.serve(shutdown).await
}

async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    // Read (and discard) the body so the connection can be reused.
    let _ = Limited::new(request.into_body(), MAX_BODY_BYTES)
        .collect()
        .await;
    let response = match path.as_str() {
        "/healthz" => json(
            &state,
            StatusCode::OK,
            serde_json::json!({"status": "ok", "version": state.version}),
        ),
        "/version" => respond(
            &state,
            StatusCode::OK,
            "text/plain; charset=utf-8",
            format!("{}\n", state.version),
        ),
        _ => {
            let n = state.next.fetch_add(1, Ordering::Relaxed);
            let delay = state.latency
                + state.jitter.mul_f64(weir_rng::unit(weir_rng::draw(
                    state.seed ^ JITTER_STREAM,
                    n,
                )));
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let fail = weir_rng::unit(weir_rng::draw(state.seed, n)) < state.error_fraction;
            state.stats.0.requests.fetch_add(1, Ordering::Relaxed);
            if fail {
                state
                    .stats
                    .0
                    .injected_errors
                    .fetch_add(1, Ordering::Relaxed);
                json(
                    &state,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    serde_json::json!({"version": state.version, "path": path, "error": "injected fault"}),
                )
            } else {
                json(
                    &state,
                    StatusCode::OK,
                    serde_json::json!({"version": state.version, "path": path}),
                )
            }
        }
    };
    Ok(response)
}

fn json(state: &State, status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    respond(state, status, "application/json", format!("{body}\n"))
}

fn respond(
    state: &State,
    status: StatusCode,
    content_type: &'static str,
    body: String,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(VERSION_HEADER, state.header.clone());
    response
}
