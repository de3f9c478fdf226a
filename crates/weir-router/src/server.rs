//! Listeners: accepting clients, speaking HTTP/1.1 or HTTP/2 to them, and the handle the engine
//! uses to change routes and read metrics.
//!
//! Robustness against slow or malformed clients comes from bounds, each with a reason:
//! - a connection limit (`max_connections`): when reached, the router stops accepting and the
//!   kernel backlog absorbs the excess, instead of memory growing without bound;
//! - a header-read timeout: a client must deliver each request head (and, on HTTP/1.1 keep-alive,
//!   the next one) within it, so slowloris-style clients are closed; it also bounds how long the
//!   protocol sniff below waits;
//! - a maximum request-head size (HTTP/1.1 answers 431; HTTP/2 bounds the header list);
//! - a cap on concurrent HTTP/2 streams per connection.
//!
//! HTTP/2 is cleartext with prior knowledge (h2c): the router peeks at the first bytes of a
//! connection and serves HTTP/2 if they are the HTTP/2 preface, HTTP/1.1 otherwise. The sniff is
//! done here rather than with hyper-util's auto builder because the latter waits for the preface
//! without a deadline.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{RouteError, RouterError};
use crate::metrics::{ListenerMetrics, MetricsSnapshot};
use crate::proxy::{Shared, proxy};
use crate::table::{RouteSpec, RouteTable, Weight};

/// The HTTP/2 connection preface (RFC 9113 section 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Limits and timeouts of a listener. The defaults suit a router in front of one service.
#[derive(Debug, Clone)]
pub struct RouterConfig {
    /// Time allowed to open a TCP connection to an upstream; past it the request gets a 502.
    pub connect_timeout: Duration,
    /// Time allowed from request head to the upstream's response head; past it the request gets
    /// a 504.
    pub response_timeout: Duration,
    /// Time allowed for a client to send a complete request head (also the idle limit between
    /// keep-alive requests on HTTP/1.1).
    pub header_read_timeout: Duration,
    /// Largest request head accepted, in bytes (request line plus headers).
    pub max_header_bytes: usize,
    /// Most client connections served at once.
    pub max_connections: usize,
    /// Most concurrent streams per HTTP/2 client connection.
    pub max_concurrent_streams: u32,
    /// Most mirror copies in flight; beyond it copies are dropped and counted.
    pub mirror_concurrency: usize,
    /// How long an idle pooled upstream connection is kept.
    pub upstream_idle_timeout: Duration,
    /// Most idle pooled connections kept per upstream address.
    pub max_idle_per_upstream: usize,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 32 * 1024,
            max_connections: 10_000,
            max_concurrent_streams: 256,
            mirror_concurrency: 64,
            upstream_idle_timeout: Duration::from_secs(30),
            max_idle_per_upstream: 1024,
        }
    }
}

/// A bound, not yet serving, listener with its route table.
pub struct Router {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl Router {
    /// Binds `addr` and installs `spec` as the initial route table of listener `name` (`name` is
    /// the `listener` label of its metrics).
    pub async fn bind(
        name: &str,
        addr: SocketAddr,
        spec: RouteSpec,
        config: RouterConfig,
    ) -> Result<Self, RouterError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| RouterError::Bind { addr, source })?;
        Self::from_listener(name, listener, spec, config)
    }

    /// Like [`Router::bind`] with an already bound listener.
    pub fn from_listener(
        name: &str,
        listener: TcpListener,
        spec: RouteSpec,
        config: RouterConfig,
    ) -> Result<Self, RouterError> {
        let metrics = ListenerMetrics::new(name);
        let table = RouteTable::compile(spec, &metrics)?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            // Without a pool timer the legacy pool never evicts idle connections.
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_idle_timeout(config.upstream_idle_timeout)
            .pool_max_idle_per_host(config.max_idle_per_upstream)
            .build(connector);
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            table: ArcSwap::from_pointee(table),
            metrics,
            client,
            mirror_permits: Arc::new(Semaphore::new(config.mirror_concurrency)),
            config,
            update_lock: std::sync::Mutex::new(()),
        });
        Ok(Self { listener, shared })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, RouterError> {
        self.listener.local_addr().map_err(RouterError::LocalAddr)
    }

    /// A handle to change this listener's routes and read its metrics; cheap to clone.
    pub fn handle(&self) -> RouteHandle {
        RouteHandle {
            shared: self.shared.clone(),
        }
    }

    /// Accepts and serves clients until `shutdown` completes. Connections already open keep
    /// being served by their own tasks until they close or the runtime stops.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let connection_permits = Arc::new(Semaphore::new(self.shared.config.max_connections));
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                () = &mut shutdown => return,
                permit = connection_permits.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return, // the semaphore is never closed
                },
            };
            let accepted = tokio::select! {
                () = &mut shutdown => return,
                accepted = self.listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    tokio::spawn(serve_connection(self.shared.clone(), stream, peer, permit));
                }
                // Out of file descriptors and the like: pause rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
}

/// Whether the client opened with the HTTP/2 preface. Waits only while the bytes seen so far are
/// a prefix of the preface (one segment in practice).
async fn sniff_h2(stream: &TcpStream) -> std::io::Result<bool> {
    let mut buf = [0u8; 24];
    loop {
        let n = stream.peek(&mut buf).await?;
        if n == 0 || buf[..n] != H2_PREFACE[..n] {
            return Ok(false);
        }
        if n == H2_PREFACE.len() {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn serve_connection(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    _permit: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let config = &shared.config;
    let is_h2 = match tokio::time::timeout(config.header_read_timeout, sniff_h2(&stream)).await {
        Ok(Ok(is_h2)) => is_h2,
        Ok(Err(_)) | Err(_) => return,
    };
    let io = TokioIo::new(stream);
    let service_shared = shared.clone();
    let service = service_fn(move |request| proxy(service_shared.clone(), peer, request));
    // Connection-level errors (client went away, malformed request) end only this connection.
    if is_h2 {
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .max_concurrent_streams(config.max_concurrent_streams)
            .max_header_list_size(u32::try_from(config.max_header_bytes).unwrap_or(u32::MAX))
            .keep_alive_interval(Some(Duration::from_secs(20)))
            .keep_alive_timeout(config.header_read_timeout)
            .serve_connection(io, service)
            .await;
    } else {
        let _ = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .keep_alive(true)
            .header_read_timeout(config.header_read_timeout)
            .max_header_size(config.max_header_bytes)
            .serve_connection(io, service)
            .await;
    }
}

/// The control handle of one listener: replace its route table atomically, read its metrics.
/// Updates never block requests: they build a new table and swap it in with one atomic store.
#[derive(Clone)]
pub struct RouteHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RouteHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteHandle")
            .field("listener", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl RouteHandle {
    /// The listener's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Replaces the whole route table. On error the table in force is unchanged.
    pub fn replace(&self, spec: RouteSpec) -> Result<(), RouteError> {
        self.update(|current| *current = spec)
    }

    /// Changes the spec in force with `change`, atomically with respect to requests and to other
    /// updates through this handle. On error the table in force is unchanged.
    pub fn update(&self, change: impl FnOnce(&mut RouteSpec)) -> Result<(), RouteError> {
        // Writers are serialised so concurrent read-modify-writes cannot lose each other;
        // readers (requests) never take this lock. Poisoning cannot leave the table half-made.
        let _writer = self
            .shared
            .update_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut spec = self.shared.table.load().spec().clone();
        change(&mut spec);
        let table = RouteTable::compile(spec, &self.shared.metrics)?;
        self.shared.table.store(Arc::new(table));
        Ok(())
    }

    /// Sets the canary weight, keeping everything else.
    pub fn set_canary_weight(&self, weight: Weight) -> Result<(), RouteError> {
        self.update(|spec| spec.canary_weight = weight)
    }

    /// Exchanges the primary and canary versions (e.g. on promotion) and sets the new canary
    /// weight, in one swap.
    pub fn swap_roles(&self, canary_weight: Weight) -> Result<(), RouteError> {
        self.update(|spec| {
            std::mem::swap(&mut spec.primary, &mut spec.canary);
            spec.canary_weight = canary_weight;
        })
    }

    /// The route table in force.
    pub fn table(&self) -> Arc<RouteTable> {
        self.shared.table.load_full()
    }

    /// The spec in force.
    pub fn spec(&self) -> RouteSpec {
        self.shared.table.load().spec().clone()
    }

    /// A snapshot of this listener's metrics.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.metrics.snapshot()
    }

    /// Mirror copies dropped so far.
    pub fn mirror_dropped(&self) -> u64 {
        self.shared.metrics.mirror_dropped.load(Ordering::Relaxed)
    }
}
