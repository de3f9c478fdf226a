//! Listeners: accepting clients, speaking HTTP/1.1 or HTTP/2 to them, and the handle the engine
//! uses to change routes and read metrics.
//!
//! Robustness against slow or malformed clients comes from bounds, each with a reason:
//! - a connection limit (`max_connections`): when reached, the router stops accepting and the
//!   kernel backlog absorbs the excess, instead of memory growing without bound;
//! - a header-read timeout: a client must deliver each request head (and, on HTTP/1.1 keep-alive,
//!   the next one) within it, so slowloris-style clients are closed (on HTTP/1.1 enforced by the
//!   connection's watchdog, see `deadline`); it also bounds how long the protocol sniff below
//!   waits;
//! - a maximum request-head size (HTTP/1.1 answers 431; HTTP/2 bounds the header list);
//! - a cap on concurrent HTTP/2 streams per connection.
//!
//! HTTP/2 is cleartext with prior knowledge (h2c): the router peeks at the first bytes of a
//! connection and serves HTTP/2 if they are the HTTP/2 preface, HTTP/1.1 otherwise. The sniff is
//! done here rather than with hyper-util's auto builder because the latter waits for the preface
//! without a deadline.

use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::task::Poll;
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use crate::deadline::{ConnClock, Watchdog};
use crate::error::{RouteError, RouterError};
use crate::metrics::{ListenerMetrics, MetricsSnapshot};
use crate::proxy::{ClientConn, Shared, Worker, proxy};
use crate::table::{RouteSpec, RouteTable, Weight};
use crate::upstream::{ConnectGuard, sweep_until_dropped};

/// The HTTP/2 connection preface (RFC 9113 section 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Listen backlog of per-core sockets (the same as tokio's `TcpListener::bind`).
const BACKLOG: i32 = 1024;

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
    /// Most client connections served at once (over all threads in per-core mode).
    pub max_connections: usize,
    /// Most concurrent streams per HTTP/2 client connection.
    pub max_concurrent_streams: u32,
    /// Most mirror copies in flight; beyond it copies are dropped and counted.
    pub mirror_concurrency: usize,
    /// How long an idle pooled upstream connection is kept.
    pub upstream_idle_timeout: Duration,
    /// Most idle pooled connections kept per upstream address (per thread in per-core mode).
    pub max_idle_per_upstream: usize,
    /// Asked before each new upstream connection whether its address may be reached (weir's
    /// outbound policy, when the embedding process has one); `None`: any address.
    pub connect_guard: Option<Arc<dyn ConnectGuard>>,
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
            connect_guard: None,
        }
    }
}

/// A bound, not yet serving, listener with its route table.
///
/// Two ways to run it:
/// - [`Router::serve`] inside the caller's tokio runtime (any flavour): the mode for embedding,
///   e.g. in the engine's multi-thread runtime. All of the runtime's workers share one upstream
///   pool.
/// - [`Router::spawn_per_core`]: thread-per-core, for a process that is mostly a router (the
///   `weir router` command). Each thread runs its own single-threaded runtime with its own
///   listening socket on the same address (`SO_REUSEPORT`, so the kernel spreads connections)
///   and its own upstream pool; a client connection and the upstream connections serving it
///   never leave their thread, so there is no work stealing and no cross-thread wake-up on the
///   request path. The threads share only the route table and the atomic metrics.
pub struct Router {
    listener: TcpListener,
    shared: Arc<Shared>,
}

fn new_shared(
    name: &str,
    spec: RouteSpec,
    config: RouterConfig,
) -> Result<Arc<Shared>, RouterError> {
    let metrics = ListenerMetrics::new(name);
    let table = RouteTable::compile(spec, &metrics)?;
    Ok(Arc::new(Shared {
        name: name.to_owned(),
        table: ArcSwap::from_pointee(table),
        metrics,
        mirror_permits: Arc::new(Semaphore::new(config.mirror_concurrency)),
        upstream_connects: Arc::new(AtomicU64::new(0)),
        config,
        update_lock: std::sync::Mutex::new(()),
    }))
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
        let shared = new_shared(name, spec, config)?;
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

    /// Accepts and serves clients in the current tokio runtime until `shutdown` completes.
    /// Connections already open keep being served by their own tasks until they close or the
    /// runtime stops.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let permits = Arc::new(Semaphore::new(self.shared.config.max_connections));
        let worker = Arc::new(Worker::new(self.shared));
        accept_loop(self.listener, worker, permits, shutdown).await;
    }

    /// Binds `threads` listening sockets on `addr` (all on the same port, with `SO_REUSEPORT`)
    /// and serves each from its own thread running a single-threaded tokio runtime; see
    /// [`Router`] for why. Returns once every socket is bound; the threads serve until
    /// [`PerCoreRouter::stop`]. Needs no runtime from the caller. `max_connections` is shared
    /// by all threads; `max_idle_per_upstream` applies per thread.
    ///
    /// With `SO_REUSEPORT` the bind does not fail if another socket with that option (of the
    /// same user) already holds the port; the kernel would then share connections with it. A
    /// port held without the option fails the bind as usual.
    pub fn spawn_per_core(
        name: &str,
        addr: SocketAddr,
        spec: RouteSpec,
        config: RouterConfig,
        threads: usize,
    ) -> Result<PerCoreRouter, RouterError> {
        let threads = threads.max(1);
        let shared = new_shared(name, spec, config)?;
        let first = reuse_port_listener(addr)?;
        let local_addr = first.local_addr().map_err(RouterError::LocalAddr)?;
        let mut sockets = vec![first];
        for _ in 1..threads {
            sockets.push(reuse_port_listener(local_addr)?);
        }
        let permits = Arc::new(Semaphore::new(shared.config.max_connections));
        let (stop, stopped) = watch::channel(false);
        let mut joins = Vec::with_capacity(threads);
        for (index, socket) in sockets.into_iter().enumerate() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(RouterError::Runtime)?;
            // Registering the socket needs the runtime it will be polled on.
            let listener = {
                let _entered = runtime.enter();
                TcpListener::from_std(socket).map_err(RouterError::Runtime)?
            };
            let worker = Arc::new(Worker::new(shared.clone()));
            let permits = permits.clone();
            let mut stopped = stopped.clone();
            let join = std::thread::Builder::new()
                .name(format!("weir-router-{index}"))
                .spawn(move || {
                    runtime.block_on(accept_loop(listener, worker, permits, async move {
                        // An error means the sender is gone, which is a stop too.
                        let _ = stopped.wait_for(|stop| *stop).await;
                    }));
                    // Dropping the runtime here cancels this thread's open connections.
                })
                .map_err(RouterError::Runtime)?;
            joins.push(join);
        }
        Ok(PerCoreRouter {
            handle: RouteHandle { shared },
            local_addr,
            stop,
            threads: joins,
        })
    }
}

/// A listening socket bound with `SO_REUSEPORT` (and `SO_REUSEADDR`), non-blocking.
fn reuse_port_listener(addr: SocketAddr) -> Result<std::net::TcpListener, RouterError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let bind_error = |source| RouterError::Bind { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(bind_error)?;
    socket.set_reuse_address(true).map_err(bind_error)?;
    socket.set_reuse_port(true).map_err(bind_error)?;
    socket.set_nonblocking(true).map_err(bind_error)?;
    socket.bind(&addr.into()).map_err(bind_error)?;
    socket.listen(BACKLOG).map_err(bind_error)?;
    Ok(socket.into())
}

/// A router serving from one thread per core (see [`Router::spawn_per_core`]).
pub struct PerCoreRouter {
    handle: RouteHandle,
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for PerCoreRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerCoreRouter")
            .field("listener", &self.handle.name())
            .field("local_addr", &self.local_addr)
            .field("threads", &self.threads.len())
            .finish_non_exhaustive()
    }
}

impl PerCoreRouter {
    /// The address bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A handle to change the routes and read the metrics; cheap to clone, usable from any
    /// thread or runtime.
    pub fn handle(&self) -> RouteHandle {
        self.handle.clone()
    }

    /// Stops accepting, closes open connections and waits for the threads to end. Blocks the
    /// calling thread (briefly), so call it outside async code or from `spawn_blocking`.
    pub fn stop(self) {
        let _ = self.stop.send(true);
        for thread in self.threads {
            // A panicked thread has stopped too; there is nothing more to clean up.
            let _ = thread.join();
        }
    }
}

/// Accepts clients on `listener` until `shutdown`, serving each in its own task on the current
/// runtime. Also runs the sweeper of `worker`'s idle upstream connections.
async fn accept_loop(
    listener: TcpListener,
    worker: Arc<Worker>,
    permits: Arc<Semaphore>,
    shutdown: impl Future<Output = ()>,
) {
    let sweep_period = (worker.shared.config.upstream_idle_timeout / 4)
        .clamp(Duration::from_millis(100), Duration::from_secs(10));
    tokio::spawn(sweep_until_dropped(
        Arc::downgrade(&worker.pool),
        sweep_period,
    ));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => return,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return, // the semaphore is never closed
            },
        };
        let accepted = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                tokio::spawn(serve_connection(worker.clone(), stream, peer, permit));
            }
            // Out of file descriptors and the like: pause rather than spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
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
    worker: Arc<Worker>,
    stream: TcpStream,
    peer: SocketAddr,
    _permit: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let config = &worker.shared.config;
    let is_h2 = match tokio::time::timeout(config.header_read_timeout, sniff_h2(&stream)).await {
        Ok(Ok(is_h2)) => is_h2,
        Ok(Err(_)) | Err(_) => return,
    };
    let io = TokioIo::new(stream);
    // Connection-level errors (client went away, malformed request) end only this connection.
    if is_h2 {
        let conn = Arc::new(ClientConn::new(peer, None));
        let service_worker = worker.clone();
        let service =
            service_fn(move |request| proxy(service_worker.clone(), conn.clone(), request));
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .max_concurrent_streams(config.max_concurrent_streams)
            .max_header_list_size(u32::try_from(config.max_header_bytes).unwrap_or(u32::MAX))
            .keep_alive_interval(Some(Duration::from_secs(20)))
            .keep_alive_timeout(config.header_read_timeout)
            .serve_connection(io, service)
            .await;
    } else {
        // The header-read and response timeouts are enforced by one watchdog per connection
        // instead of timers per request (see `deadline`).
        let conn = Arc::new(ClientConn::new(peer, Some(ConnClock::new())));
        let (header_read, response) = (config.header_read_timeout, config.response_timeout);
        let service_worker = worker.clone();
        let service_conn = conn.clone();
        let service =
            service_fn(move |request| proxy(service_worker.clone(), service_conn.clone(), request));
        let mut connection = pin!(
            hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                // Head and body copied into one buffer and written with `send`, not `writev`:
                // the kernel's vectored path costs more than copying a small body (a few
                // percent of the router's CPU in the profile; docs/BENCHMARKS.md, "Router").
                .writev(false)
                .header_read_timeout(None)
                .max_header_size(config.max_header_bytes)
                .serve_connection(io, service)
        );
        let Some(clock) = &conn.clock else { return };
        let mut watchdog = Watchdog::new(clock, header_read, response);
        // The watchdog first, so a request whose response timeout just passed sees it when
        // hyper polls the request next. Dropping the connection closes it.
        poll_fn(|cx| {
            if watchdog.poll_expired(cx).is_ready() {
                return Poll::Ready(());
            }
            connection.as_mut().poll(cx).map(|_| ())
        })
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

    /// Upstream connections opened so far (by all threads); with keep-alive upstreams this
    /// stays far below the number of requests.
    pub fn upstream_connections_opened(&self) -> u64 {
        self.shared.upstream_connects.load(Ordering::Relaxed)
    }

    /// Mirror copies dropped so far.
    pub fn mirror_dropped(&self) -> u64 {
        self.shared.metrics.mirror_dropped.load(Ordering::Relaxed)
    }
}
