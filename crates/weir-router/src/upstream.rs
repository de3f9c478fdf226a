//! Upstream HTTP/1.1 connections: a small idle pool per worker, each connection driven inside the
//! task of the request using it.
//!
//! hyper's low-level client splits a connection into a `SendRequest` handle and a `Connection`
//! future that does the I/O. Instead of spawning that future as its own task (what hyper-util's
//! pooled client does, costing a task wake-up and a channel hop per request, often across
//! threads), the request's own task polls it: while waiting for the response head
//! ([`send`]) and, through [`UpstreamBody`], while the response body is streamed to the client.
//! When the body has been read to its end and the connection is idle again, it goes back to the
//! pool; if the exchange ends any other way (client gone, timeout, error) it is dropped, which
//! closes it - HTTP/1.1 cannot abandon one exchange and keep the connection.
//!
//! Idle connections are kept most-recently-used first, at most `max_idle_per_upstream` per
//! address and for at most `upstream_idle_timeout`; a sweeper task drops expired ones and ones the
//! upstream has closed. A pooled connection the upstream closed just before reuse is detected
//! when the request is handed to it (hyper gives the unsent request back), and the request moves
//! to the next connection; a request that may have reached the upstream is never re-sent.
//!
//! Upstreams are spoken to in HTTP/1.1 only (as before this module existed).

use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::Authority;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::body::{BoxError, ProxyBody};

type Connection = http1::Connection<TokioIo<TcpStream>, ProxyBody>;

/// Why an upstream exchange failed (all answered with 502).
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    #[error("connect to {0} timed out")]
    ConnectTimeout(Authority),
    #[error("connect to {0}: {1}")]
    Connect(Authority, std::io::Error),
    #[error("HTTP exchange: {0}")]
    Http(#[from] hyper::Error),
    #[error("connect to {0}: {1}")]
    Refused(Authority, String),
}

/// Decides which addresses the router may open upstream connections to (weir's outbound policy,
/// given by the process that embeds the router). Asked once per new connection, never per
/// request: pooled connections are reused without asking again.
pub trait ConnectGuard: Send + Sync + std::fmt::Debug + 'static {
    /// `Ok` when a connection to `address`, which `host` (the upstream's host as configured)
    /// resolved to, may be opened; otherwise why not.
    fn check(&self, host: &str, address: SocketAddr) -> Result<(), String>;
}

/// One upstream connection: the handle to send on and the future doing its I/O.
struct Link {
    sender: http1::SendRequest<ProxyBody>,
    /// `None` once the connection future has completed (the connection is closed). It is
    /// dropped then, not kept: its end of the request channel must go with it, so a request
    /// handed to the sender afterwards comes back unsent at once instead of waiting, unserved,
    /// for the response timeout.
    connection: Option<Connection>,
}

impl Link {
    /// Polls the connection future once (unless it has already completed).
    fn poll_connection(connection: &mut Option<Connection>, cx: &mut Context<'_>) {
        if let Some(open) = connection
            && Pin::new(open).poll(cx).is_ready()
        {
            *connection = None;
        }
    }

    /// Lets the connection settle (finish the exchange it just completed) without registering any
    /// task for wake-ups, and says whether it can take another request now.
    fn settle(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        Self::poll_connection(&mut self.connection, &mut cx);
        self.connection.is_some() && self.sender.is_ready()
    }

    /// Runs `work` to completion while driving the connection's I/O in the same task.
    async fn drive<F: Future>(connection: &mut Option<Connection>, work: F) -> F::Output {
        let mut work = pin!(work);
        poll_fn(|cx| {
            // The connection first: it writes what `work` queued and reads what it waits for.
            Self::poll_connection(connection, cx);
            work.as_mut().poll(cx)
        })
        .await
    }
}

/// An idle connection and when it became idle.
struct Idle {
    link: Box<Link>,
    since: Instant,
}

/// Upstream connections of one worker (one runtime thread in per-core mode, the whole runtime
/// otherwise).
pub(crate) struct Pool {
    /// Idle connections per upstream address. A list, not a hash map: a route has a handful of
    /// upstreams, and comparing a few short strings is cheaper than hashing one.
    idle: Mutex<Vec<(Authority, Vec<Idle>)>>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_idle: usize,
    /// Connections opened so far (tests check reuse with it).
    connects: Arc<AtomicU64>,
    /// Checks each new connection's address, when the embedding process has a policy.
    guard: Option<Arc<dyn ConnectGuard>>,
}

impl Pool {
    pub(crate) fn new(
        connect_timeout: Duration,
        idle_timeout: Duration,
        max_idle: usize,
        connects: Arc<AtomicU64>,
        guard: Option<Arc<dyn ConnectGuard>>,
    ) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            connect_timeout,
            idle_timeout,
            max_idle,
            connects,
            guard,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Authority, Vec<Idle>)>> {
        // The lists are consistent after every statement, so a panic elsewhere cannot corrupt
        // them.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn list<'a>(
        idle: &'a mut [(Authority, Vec<Idle>)],
        authority: &Authority,
    ) -> Option<&'a mut Vec<Idle>> {
        idle.iter_mut()
            .find(|(key, _)| key.as_str() == authority.as_str())
            .map(|(_, list)| list)
    }

    /// The most recently used idle connection to `authority`, if one is fresh enough.
    fn checkout(&self, authority: &Authority) -> Option<Box<Link>> {
        let mut idle = self.lock();
        let list = Self::list(&mut idle, authority)?;
        let newest = list.pop()?;
        if newest.since.elapsed() < self.idle_timeout {
            return Some(newest.link);
        }
        // The newest is expired, so all older ones are too.
        let expired = std::mem::take(list);
        drop(idle);
        drop((newest, expired)); // closing sockets outside the lock
        None
    }

    /// Returns a connection whose exchange is complete; keeps it if it is reusable and there is
    /// room, closes it otherwise.
    fn checkin(&self, authority: &Authority, mut link: Box<Link>) {
        if !link.settle() {
            return;
        }
        let mut idle = self.lock();
        if Self::list(&mut idle, authority).is_none() {
            idle.push((authority.clone(), Vec::new()));
        }
        let Some(list) = Self::list(&mut idle, authority) else {
            return; // just added
        };
        if list.len() < self.max_idle {
            list.push(Idle {
                link,
                since: Instant::now(),
            });
        } else {
            drop(idle);
            drop(link);
        }
    }

    /// Drops expired idle connections and ones the upstream has closed.
    fn sweep(&self) {
        let mut idle = self.lock();
        let mut dropped = Vec::new();
        for (_, list) in idle.iter_mut() {
            let mut index = 0;
            while index < list.len() {
                let entry = &mut list[index];
                if entry.since.elapsed() >= self.idle_timeout || !entry.link.settle() {
                    dropped.push(list.remove(index));
                } else {
                    index += 1;
                }
            }
        }
        idle.retain(|(_, list)| !list.is_empty());
        drop(idle);
        drop(dropped);
    }

    /// Opens a new connection to `authority`.
    async fn connect(&self, authority: &Authority) -> Result<Box<Link>, UpstreamError> {
        self.connects.fetch_add(1, Ordering::Relaxed);
        let connecting = async {
            match &self.guard {
                None => TcpStream::connect(authority.as_str())
                    .await
                    .map_err(|error| UpstreamError::Connect(authority.clone(), error)),
                Some(guard) => guarded_connect(guard.as_ref(), authority).await,
            }
        };
        let stream = tokio::time::timeout(self.connect_timeout, connecting)
            .await
            .map_err(|_| UpstreamError::ConnectTimeout(authority.clone()))??;
        // Small request and response heads must not wait for Nagle's algorithm.
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        // Boxed once per connection, so moving it in and out of the pool and into response
        // bodies copies a pointer, not the connection's state.
        Ok(Box::new(Link {
            sender,
            connection: Some(connection),
        }))
    }
}

/// Resolves `authority`, keeps the addresses `guard` allows and connects to the first of them
/// that accepts: the address checked is the address reached.
async fn guarded_connect(
    guard: &dyn ConnectGuard,
    authority: &Authority,
) -> Result<TcpStream, UpstreamError> {
    let host = authority.host();
    let addresses = tokio::net::lookup_host(authority.as_str())
        .await
        .map_err(|error| UpstreamError::Connect(authority.clone(), error))?;
    let mut refused = None;
    let mut failed = None;
    for address in addresses {
        if let Err(reason) = guard.check(host, address) {
            refused.get_or_insert(reason);
            continue;
        }
        match TcpStream::connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(error) => failed = Some(error),
        }
    }
    Err(match (failed, refused) {
        (Some(error), _) => UpstreamError::Connect(authority.clone(), error),
        (None, Some(reason)) => UpstreamError::Refused(authority.clone(), reason),
        (None, None) => UpstreamError::Connect(
            authority.clone(),
            std::io::Error::other("the name resolved to no address"),
        ),
    })
}

/// Drops expired and closed idle connections every `period` until the pool is gone.
pub(crate) async fn sweep_until_dropped(pool: Weak<Pool>, period: Duration) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // the first tick is immediate
    loop {
        ticks.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        pool.sweep();
    }
}

/// Sends `request` (origin-form URI, `Host` set) to `authority` over a pooled or new connection
/// and returns the response head; its body keeps driving the connection.
pub(crate) async fn send(
    pool: &Arc<Pool>,
    authority: &Authority,
    mut request: Request<ProxyBody>,
) -> Result<Response<ProxyBody>, UpstreamError> {
    loop {
        let (mut link, reused) = match pool.checkout(authority) {
            Some(link) => (link, true),
            None => (pool.connect(authority).await?, false),
        };
        let Link { sender, connection } = &mut *link;
        if let Err(error) = Link::drive(connection, sender.ready()).await {
            if reused {
                continue; // closed while idle: try the next one (or a new connection)
            }
            return Err(error.into());
        }
        match Link::drive(connection, sender.try_send_request(request)).await {
            Ok(response) => {
                let (parts, body) = response.into_parts();
                let body = UpstreamBody {
                    body,
                    link: Some(link),
                    pool: pool.clone(),
                    authority: authority.clone(),
                };
                return Ok(Response::from_parts(parts, ProxyBody::Upstream(body)));
            }
            Err(mut error) => match error.take_message() {
                // Not a byte of it was written: safe to send on another connection. A fresh
                // connection failing this way is not retried, so the loop ends.
                Some(unsent) if reused => request = unsent,
                _ => return Err(error.into_error().into()),
            },
        }
    }
}

/// An upstream response body that drives its connection while it is read, and returns the
/// connection to the pool once it has been read to the end.
pub struct UpstreamBody {
    body: Incoming,
    link: Option<Box<Link>>,
    pool: Arc<Pool>,
    authority: Authority,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("authority", &self.authority)
            .finish_non_exhaustive()
    }
}

impl UpstreamBody {
    fn release(&mut self) {
        if let Some(link) = self.link.take() {
            self.pool.checkin(&self.authority, link);
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let mut polled = Pin::new(&mut this.body).poll_frame(cx);
        if polled.is_pending()
            && let Some(link) = &mut this.link
        {
            // The body is fed by the connection: let it read, then look again.
            Link::poll_connection(&mut link.connection, cx);
            polled = Pin::new(&mut this.body).poll_frame(cx);
        }
        match &polled {
            Poll::Ready(None) => this.release(),
            Poll::Ready(Some(Ok(_))) if this.body.is_end_stream() => this.release(),
            Poll::Ready(Some(Err(_))) => this.link = None,
            _ => {}
        }
        polled.map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // Bodies that were empty from the start (204, HEAD, Content-Length: 0) or whose end the
        // reader knew without polling again are complete: the connection can be reused.
        if self.body.is_end_stream() {
            self.release();
        }
    }
}
