//! How weir serves its HTTP listeners (`weir serve`: the API, OFREP, the dashboard and
//! `/metrics` on one listener; `weir run --listen` and `--metrics-listen`; `weir operator`'s
//! API): HTTP/1.1 by hyper, one task per
//! connection, with the limits a server reachable by others needs (docs/SECURITY.md, "Slow and
//! idle clients"):
//!
//! - **header-read timeout**: from the first byte of a request head to its end, or from the
//!   connection's start for its first request (a client that sends half a head and stops, or
//!   nothing, is closed);
//! - **idle timeout**: a connection between requests (keep-alive), a request waiting for the
//!   client to send its body, or an answer waiting for the client to read it, with no byte
//!   moving;
//! - **a bound on the connections of a listener** (TLS handshakes included): beyond it a new
//!   connection gets `503` with `Retry-After` (plain HTTP) or is closed (HTTPS) at once;
//! - **graceful shutdown with a deadline**: the port closes, connections without a request in
//!   progress are closed, requests in progress may finish within the grace period, and whatever
//!   is still open then is closed.
//!
//! `axum::serve` runs hyper without a timer, so none of these exist there; this replaces it and
//! gives handlers the client's address as axum's `ConnectInfo<SocketAddr>` (the limit on bad
//! tokens reads it).
//!
//! Each connection's timeouts are kept by one small state machine ([`Activity`]) fed by the
//! socket (bytes read and written, writes blocked), the request (its head parsed, its body
//! waited for) and the answer (its body ended), and one watchdog per connection that sleeps until
//! the earliest deadline the state allows and closes the connection when it passes.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use bytes::Bytes;
use clap::Args;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;

use crate::tls::{ApiListener, ApiStream};

/// The limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// From the first byte of a request head to its end.
    pub header_read_timeout: Duration,
    /// With no request in progress, or a request or answer stalled on the client, and no byte
    /// moving.
    pub idle_timeout: Duration,
    /// Connections open at once (TLS handshakes included).
    pub max_connections: usize,
    /// After the shutdown signal: how long requests in progress may take to finish.
    pub shutdown_grace: Duration,
}

/// The default `--header-read-timeout`.
pub const DEFAULT_HEADER_READ_TIMEOUT: &str = "10s";
/// The default `--idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: &str = "60s";
/// The default `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// The default `--shutdown-grace`.
pub const DEFAULT_SHUTDOWN_GRACE: &str = "10s";

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// The limits as flags (`weir serve`; `weir run --listen` can flatten them too).
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// How long a client has to send a request's head (request line and headers), from its
    /// first byte (a new connection's first request: from connecting); a connection that
    /// takes longer is closed. Protects against clients that
    /// open connections and send a request slowly (slowloris). E.g. `10s`, `500ms`.
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_HEADER_READ_TIMEOUT, value_parser = positive_duration, env = "WEIR_HEADER_READ_TIMEOUT")]
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with nothing moving: waiting for the client's next
    /// request (keep-alive), for the rest of a request's body, or for the client to read an
    /// answer. Server-Sent Events streams send a comment every 15 s, so a reading client keeps
    /// them open. E.g. `60s`, `5m`.
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_IDLE_TIMEOUT, value_parser = positive_duration, env = "WEIR_IDLE_TIMEOUT")]
    pub idle_timeout: Duration,
    /// The most connections the listener keeps open at once (TLS handshakes and event streams
    /// included). Beyond it, a new connection is answered 503 with `Retry-After: 1` (HTTPS: is
    /// closed) at once. Keep it below the process's open-file limit (`ulimit -n`).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = max_connections, env = "WEIR_MAX_CONNECTIONS")]
    pub max_connections: usize,
    /// On Ctrl-C or SIGTERM: how long requests in progress may take to finish. The port closes
    /// and idle connections are closed at once; whatever is still open after this is closed.
    /// E.g. `10s`, `0s` (close everything at once).
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_SHUTDOWN_GRACE, value_parser = crate::cmd_router::parse_duration, env = "WEIR_SHUTDOWN_GRACE")]
    pub shutdown_grace: Duration,
}

impl LimitArgs {
    /// The limits these flags give.
    pub fn limits(&self) -> Limits {
        Limits {
            header_read_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
            shutdown_grace: self.shutdown_grace,
        }
    }
}

/// A duration above zero (a timeout of zero would close every connection at once).
fn positive_duration(text: &str) -> Result<Duration, String> {
    let duration = crate::cmd_router::parse_duration(text)?;
    if duration.is_zero() {
        return Err(format!(
            "{text:?} is zero: give a duration above zero, e.g. 10s or 500ms"
        ));
    }
    Ok(duration)
}

/// The largest `--max-connections`.
const MAX_CONNECTIONS_CEILING: usize = 1_000_000;

fn max_connections(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(count) if (1..=MAX_CONNECTIONS_CEILING).contains(&count) => Ok(count),
        _ => Err(format!(
            "{text:?} is not a number of connections: give a whole number from 1 to {MAX_CONNECTIONS_CEILING}, e.g. 512"
        )),
    }
}

/// The answer to a plain-HTTP connection over the limit, in the API's error shape.
fn refusal(limit: usize) -> Vec<u8> {
    let body = serde_json::to_string(&weir_api::types::ErrorBody {
        error: weir_api::types::ErrorDetail {
            code: weir_api::ErrorCode::Unavailable,
            message: format!(
                "this server has {limit} connections open, the most it keeps (--max-connections); try again in a moment"
            ),
            errors: Vec::new(),
        },
    })
    .unwrap_or_default();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// How often, at most, the refusals of connections over the limit are logged.
const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// How long connections closed at the end of the grace period get to go (they go at once:
/// this only bounds a bug).
const CLOSING: Duration = Duration::from_secs(5);

/// The stages of a shutdown, as the connections see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Running,
    /// Finish the request in progress, then close; close at once without one.
    Draining,
    /// Close now.
    Closing,
}

/// Serves `app` on `listener` with `limits` until `shutdown` completes, then shuts down
/// gracefully within `limits.shutdown_grace` (the port is closed at once). Returns when every
/// connection is closed.
pub async fn serve(
    listener: ApiListener,
    app: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopping) = watch::channel(Stop::Running);
    let mut shutdown = pin!(shutdown);
    let mut refusals = Refusals {
        answer: Arc::from(refusal(limits.max_connections)),
        lingering: Arc::new(Semaphore::new(LINGERING_REFUSALS)),
        since_logged: 0,
        logged: None,
    };
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.tcp().accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    if accept_error_is_lasting(&error) {
                        tracing::warn!("accepting a connection failed: {error}");
                        // Too many open files, or the like: wait for some to close rather
                        // than spin.
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_secs(1)) => {}
                            () = &mut shutdown => break,
                        }
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            refusals.refuse(tcp, listener.is_tls(), limits.max_connections);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let tls = listener.acceptor();
        let app = app.clone();
        let stopping = stopping.clone();
        tokio::spawn(async move {
            let stream = match tls {
                None => ApiStream::Plain(tcp),
                Some(acceptor) => {
                    let mut stopping = stopping.clone();
                    let handshake = tokio::time::timeout(
                        crate::tls::HANDSHAKE_TIMEOUT,
                        crate::tls::handshake(acceptor, tcp),
                    );
                    tokio::select! {
                        done = handshake => match done {
                            Ok(Some(stream)) => ApiStream::Tls(Box::new(stream)),
                            // Failed, answered as plain HTTP, or too slow: dropped, closed.
                            _ => return,
                        },
                        // No request was made yet: nothing to finish.
                        _ = stopping.wait_for(|stop| *stop != Stop::Running) => return,
                    }
                }
            };
            serve_connection(stream, peer, app, limits, stopping).await;
            drop(permit);
        });
    }
    // The port closes now: new clients are refused by the system, not left waiting.
    drop(listener);
    let _ = stop.send(Stop::Draining);
    let every = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let drained = tokio::time::timeout(limits.shutdown_grace, slots.acquire_many(every)).await;
    if drained.is_err() {
        let open = limits.max_connections - slots.available_permits();
        tracing::warn!(
            "closing {open} connection(s) still open after the shutdown grace period of {:?} (--shutdown-grace)",
            limits.shutdown_grace
        );
        let _ = stop.send(Stop::Closing);
        let _ = tokio::time::timeout(CLOSING, slots.acquire_many(every)).await;
    }
}

/// Whether an error of `accept` is about more than the one connection (e.g. too many open
/// files), so that trying again at once would spin.
fn accept_error_is_lasting(error: &io::Error) -> bool {
    !matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// How many refused connections at most are closed gracefully at once; beyond that (a flood)
/// they are dropped without their answer.
const LINGERING_REFUSALS: usize = 64;

/// How long a refused connection is read from, at most, before it is closed.
const LINGER: Duration = Duration::from_secs(2);

/// Connections refused over the limit, and when that was last logged.
struct Refusals {
    /// What a plain-HTTP connection over the limit is sent.
    answer: Arc<[u8]>,
    /// Slots for refused connections being closed gracefully.
    lingering: Arc<Semaphore>,
    since_logged: u64,
    logged: Option<Instant>,
}

impl Refusals {
    /// Answers 503 (plain HTTP) and closes the connection.
    ///
    /// The close lingers: closing a socket with unread bytes (the client's request, which may
    /// arrive after the answer was written) makes the system reset the connection, and a reset
    /// can discard the answer before the client reads it. So the answer is written, the sending
    /// side shut, and what the client sends is read and thrown away until it closes or
    /// [`LINGER`] passes. A bounded number linger at once; the rest are dropped.
    fn refuse(&mut self, tcp: TcpStream, tls: bool, limit: usize) {
        if let (false, Ok(slot)) = (tls, Arc::clone(&self.lingering).try_acquire_owned()) {
            let answer = Arc::clone(&self.answer);
            tokio::spawn(async move {
                let _ = tokio::time::timeout(LINGER, answer_and_linger(tcp, &answer)).await;
                drop(slot);
            });
        }
        self.since_logged += 1;
        let now = Instant::now();
        if self
            .logged
            .is_none_or(|logged| now.duration_since(logged) >= REFUSALS_LOGGED_EVERY)
        {
            tracing::warn!(
                "refused {} connection(s): {limit} are open, the most this listener keeps (--max-connections)",
                self.since_logged
            );
            self.since_logged = 0;
            self.logged = Some(now);
        }
    }
}

/// Writes `answer`, shuts the sending side and reads until the client closes.
async fn answer_and_linger(mut tcp: TcpStream, answer: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if tcp.write_all(answer).await.is_err() || tcp.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 1024];
    while matches!(tcp.read(&mut sink).await, Ok(read) if read > 0) {}
}

/// Serves one connection until it ends, times out or is closed by the shutdown.
async fn serve_connection(
    stream: ApiStream,
    peer: SocketAddr,
    app: axum::Router,
    limits: Limits,
    mut stopping: watch::Receiver<Stop>,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: Arc::clone(&activity),
    });
    let service = {
        let activity = Arc::clone(&activity);
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            activity.request_started();
            let hosts = request.headers().get_all(http::header::HOST).iter().count();
            let mut request = request.map(|body| RequestBody {
                inner: body,
                activity: Arc::clone(&activity),
                waiting: false,
            });
            request.extensions_mut().insert(ConnectInfo(peer));
            // RFC 9112, 3.2: a request with more than one Host is answered 400 (which one a
            // check read and which one a handler reads could differ).
            let answer =
                (hosts <= 1).then(|| tower_service::Service::call(&mut app.clone(), request));
            let activity = Arc::clone(&activity);
            async move {
                let response = match answer {
                    Some(answer) => answer.await?,
                    None => two_hosts(hosts),
                };
                Ok::<_, Infallible>(response.map(|body| ResponseBody {
                    inner: body,
                    activity,
                    ended: false,
                }))
            }
        })
    };
    let mut connection =
        pin!(hyper::server::conn::http1::Builder::new().serve_connection(io, service));
    let mut draining = false;
    loop {
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(error) = served {
                    tracing::debug!("a connection from {peer} ended: {error}");
                }
                return;
            }
            expired = activity.watchdog(&limits) => {
                tracing::debug!("closing the connection from {peer}: {expired}");
                return;
            }
            changed = stopping.changed() => {
                let stop = if changed.is_ok() { *stopping.borrow_and_update() } else { Stop::Closing };
                match stop {
                    Stop::Running => {}
                    Stop::Draining if !draining => {
                        draining = true;
                        if !activity.in_request() {
                            // Idle, or half a head: no request to finish.
                            return;
                        }
                        // hyper closes it once the answer is sent.
                        connection.as_mut().graceful_shutdown();
                    }
                    Stop::Draining => {}
                    Stop::Closing => return,
                }
            }
        }
    }
}

/// The answer to a request with `count` Host headers, in the API's error shape.
fn two_hosts(count: usize) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = weir_api::types::ErrorBody {
        error: weir_api::types::ErrorDetail {
            code: weir_api::ErrorCode::Invalid,
            message: format!(
                "the request has {count} Host headers; HTTP/1.1 allows exactly one (RFC 9112, section 3.2)"
            ),
            errors: Vec::new(),
        },
    };
    (http::StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// Why a connection's watchdog closed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expired {
    HeaderRead(Duration),
    Idle(Duration),
    Stalled(Duration),
}

impl std::fmt::Display for Expired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expired::HeaderRead(after) => write!(
                f,
                "the request head was not complete after {after:?} (--header-read-timeout)"
            ),
            Expired::Idle(after) => write!(f, "no request came for {after:?} (--idle-timeout)"),
            Expired::Stalled(after) => write!(
                f,
                "the client sent nothing of the request's body, or read nothing of the answer, for {after:?} (--idle-timeout)"
            ),
        }
    }
}

/// Where a connection stands, for its timeouts.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Waiting for a request, since then.
    Idle(Instant),
    /// A request head has begun arriving (or the connection was opened), then.
    Head(Instant),
    /// A request is in progress: from its head to the end of its answer's body.
    Busy,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    /// When a byte last moved, either way.
    progress: Instant,
    /// The handler waits for the request's body.
    waiting_for_body: bool,
    /// The socket refused a write (the client does not read).
    write_blocked: bool,
}

/// One connection's state for its timeouts, shared by the socket, the request's and answer's
/// bodies and the watchdog.
#[derive(Debug)]
struct Activity {
    state: Mutex<State>,
    /// Told whenever a deadline may have come nearer.
    nearer: Notify,
}

impl Activity {
    fn new() -> Activity {
        let now = Instant::now();
        Activity {
            // A new connection's first request is due within the header-read timeout.
            state: Mutex::new(State {
                phase: Phase::Head(now),
                progress: now,
                waiting_for_body: false,
                write_blocked: false,
            }),
            nearer: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind, still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn read(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let now = Instant::now();
        let mut state = self.lock();
        state.progress = now;
        if let Phase::Idle(_) = state.phase {
            state.phase = Phase::Head(now);
            drop(state);
            self.nearer.notify_one();
        }
    }

    fn wrote(&self) {
        let mut state = self.lock();
        state.progress = Instant::now();
        state.write_blocked = false;
    }

    fn write_blocked(&self) {
        let mut state = self.lock();
        if !state.write_blocked {
            state.write_blocked = true;
            drop(state);
            self.nearer.notify_one();
        }
    }

    fn request_started(&self) {
        let mut state = self.lock();
        state.phase = Phase::Busy;
        state.waiting_for_body = false;
    }

    fn waiting_for_body(&self, waiting: bool) {
        let mut state = self.lock();
        if state.waiting_for_body != waiting {
            state.waiting_for_body = waiting;
            drop(state);
            if waiting {
                self.nearer.notify_one();
            }
        }
    }

    fn answer_ended(&self) {
        let now = Instant::now();
        let mut state = self.lock();
        state.phase = Phase::Idle(now);
        state.waiting_for_body = false;
    }

    fn in_request(&self) -> bool {
        matches!(self.lock().phase, Phase::Busy)
    }

    /// The next deadline and what passing it means; none while a request is in progress and
    /// not stalled on the client.
    fn deadline(&self, limits: &Limits) -> Option<(Instant, Expired)> {
        let state = self.lock();
        match state.phase {
            Phase::Idle(since) => Some((
                since + limits.idle_timeout,
                Expired::Idle(limits.idle_timeout),
            )),
            Phase::Head(since) => Some((
                since + limits.header_read_timeout,
                Expired::HeaderRead(limits.header_read_timeout),
            )),
            Phase::Busy if state.waiting_for_body || state.write_blocked => Some((
                state.progress + limits.idle_timeout,
                Expired::Stalled(limits.idle_timeout),
            )),
            Phase::Busy => None,
        }
    }

    /// Completes when a deadline has passed.
    async fn watchdog(&self, limits: &Limits) -> Expired {
        loop {
            match self.deadline(limits) {
                Some((at, expired)) if at <= Instant::now() => return expired,
                Some((at, _)) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = self.nearer.notified() => {}
                    }
                }
                None => self.nearer.notified().await,
            }
        }
    }
}

/// A connection's socket, telling its [`Activity`] what moves.
struct Watched {
    inner: ApiStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.activity.read(buf.filled().len() - before);
        }
        polled
    }
}

impl Watched {
    fn written<T>(&self, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match &polled {
            Poll::Ready(Ok(_)) => self.activity.wrote(),
            Poll::Pending => self.activity.write_blocked(),
            Poll::Ready(Err(_)) => {}
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.written(polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.written(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.written(polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A request's body, telling its connection's [`Activity`] while the handler waits for it.
struct RequestBody {
    inner: Incoming,
    activity: Arc<Activity>,
    waiting: bool,
}

impl RequestBody {
    fn waiting(&mut self, waiting: bool) {
        if self.waiting != waiting {
            self.waiting = waiting;
            self.activity.waiting_for_body(waiting);
        }
    }
}

impl HttpBody for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        this.waiting(polled.is_pending());
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        self.waiting(false);
    }
}

/// An answer's body, telling its connection's [`Activity`] when it has ended (or was dropped:
/// an empty body may never be polled).
struct ResponseBody {
    inner: axum::body::Body,
    activity: Arc<Activity>,
    ended: bool,
}

impl ResponseBody {
    fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            self.activity.answer_ended();
        }
    }
}

impl HttpBody for ResponseBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            this.end();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests;
