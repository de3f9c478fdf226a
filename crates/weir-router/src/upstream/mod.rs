//! Upstream HTTP/1.1 connections: a small idle pool per worker, and exchanges driven inside the
//! task of the request using them.
//!
//! A request is written and its response read by the request's own task, over a socket taken
//! from the pool, with weir's own HTTP/1.1 codec ([`codec`], sans I/O): no connection task, no
//! channel between the request and the connection, no per-request oneshot, and the response body
//! is handed on as slices of the connection's read buffer. While the response head is awaited
//! ([`send`]) and, through [`UpstreamBody`], while the response body streams to the client, the
//! same polls keep writing whatever is left of the request body, so an upstream that answers
//! while still reading (an echo) is served in both directions at once.
//!
//! When the response has been read to its end, the whole request was written and the upstream
//! keeps the connection alive, the connection goes back to the pool; if the exchange ends any
//! other way (client gone, timeout, error, `Connection: close`, a body delimited by the close) it
//! is dropped, which closes it - HTTP/1.1 cannot abandon one exchange and keep the connection.
//!
//! Idle connections are kept most-recently-used first, at most `max_idle_per_upstream` per
//! address and for at most `upstream_idle_timeout`; a sweeper task drops expired ones and ones the
//! upstream has closed, and a checkout skips connections the upstream has closed since. A
//! connection can still close in the instant between checkout and use; a request that then gets
//! no byte of answer is sent again on another connection only if that is safe: an idempotent
//! method (RFC 9110 section 9.2.2) without a body, over a reused connection. Anything else that
//! may have reached the upstream is never re-sent.
//!
//! Upstreams are spoken to in HTTP/1.1 only.

mod codec;

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use http::uri::Authority;
use http::{HeaderMap, Method, Request, Response, header};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncWrite, Interest};
use tokio::net::TcpStream;

use crate::body::{BoxError, ProxyBody};
use codec::{BodyDecoder, Decoded, ProtocolError, RequestFraming};

/// Largest response head accepted from an upstream.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// Bytes the read buffer grows by when it runs low, and the least free room a read gets.
const READ_BUFFER: usize = 16 * 1024;
const MIN_READ_ROOM: usize = 2 * 1024;
/// Request buffers written with one `writev`.
const MAX_IOVECS: usize = 8;

/// Why an upstream exchange failed (answered with 502).
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    #[error("connect to {0} timed out")]
    ConnectTimeout(Authority),
    #[error("connect to {0}: {1}")]
    Connect(Authority, io::Error),
    #[error("connect to {0}: {1}")]
    Refused(Authority, String),
    #[error("upstream connection: {0}")]
    Io(#[from] io::Error),
    #[error("the upstream closed the connection without answering")]
    Closed,
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("reading the client's request body: {0}")]
    RequestBody(BoxError),
}

/// Decides which addresses the router may open upstream connections to (weir's outbound policy,
/// given by the process that embeds the router). Asked once per new connection, never per
/// request: pooled connections are reused without asking again.
pub trait ConnectGuard: Send + Sync + std::fmt::Debug + 'static {
    /// `Ok` when a connection to `address`, which `host` (the upstream's host as configured)
    /// resolved to, may be opened; otherwise why not.
    fn check(&self, host: &str, address: SocketAddr) -> Result<(), String>;
}

/// One upstream connection and what has been read from it but not yet consumed.
///
/// The state of the exchange in progress lives here too, so that it is allocated once per
/// connection rather than once per request, and a response body carries one pointer to it.
struct Link {
    stream: TcpStream,
    read: BytesMut,
    /// Where it leads (its pool list).
    authority: Authority,
    /// The request being written.
    outgoing: Outgoing,
    /// The whole request has been written.
    sent: bool,
    /// Writing failed; the upstream may still have answered, and this is reported if not.
    write_error: Option<io::Error>,
    /// The client's request body failed: the exchange cannot complete.
    body_error: Option<BoxError>,
    /// Some response bytes (an interim response, say) have arrived.
    answered: bool,
}

impl Link {
    fn new(stream: TcpStream, authority: Authority) -> Self {
        Self {
            stream,
            read: BytesMut::with_capacity(READ_BUFFER),
            authority,
            outgoing: Outgoing::default(),
            sent: false,
            write_error: None,
            body_error: None,
            answered: false,
        }
    }

    /// Reads what the socket has into the buffer; `Ok(0)` is the upstream's close.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.read.capacity() - self.read.len() < MIN_READ_ROOM {
            self.read.reserve(READ_BUFFER);
        }
        loop {
            let room = self.read.capacity() - self.read.len();
            let mut filled = 0;
            // A read that leaves room in the buffer has drained the socket. Saying WouldBlock to
            // `try_io` then clears the socket's readiness, so the next read waits for epoll
            // instead of costing a syscall that returns EAGAIN (tokio's `poll_read` does the
            // same; `try_read_buf` alone does not).
            let read = self.stream.try_io(Interest::READABLE, || {
                filled = self.stream.try_read_buf(&mut self.read)?;
                if filled > 0 && filled < room {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(filled)
                }
            });
            match read {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if filled > 0 {
                        return Poll::Ready(Ok(filled));
                    }
                    ready!(self.stream.poll_read_ready(cx))?;
                }
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }

    /// Whether an idle connection can carry a request: nothing unread, not closed by the
    /// upstream. Costs no syscall unless the socket has become readable since its last read.
    fn usable(&self) -> bool {
        if !self.read.is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(self.stream.try_read(&mut probe), Err(error) if error.kind() == io::ErrorKind::WouldBlock)
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

    /// The most recently used idle connection to `authority` that is fresh enough and still
    /// open.
    fn checkout(&self, authority: &Authority) -> Option<Box<Link>> {
        let mut idle = self.lock();
        let list = Self::list(&mut idle, authority)?;
        let mut closed = Vec::new();
        let found = loop {
            let Some(newest) = list.pop() else { break None };
            if newest.since.elapsed() >= self.idle_timeout {
                // The newest is expired, so all older ones are too.
                closed.push(newest);
                closed.append(list);
                break None;
            }
            if newest.link.usable() {
                break Some(newest.link);
            }
            closed.push(newest);
        };
        drop(idle);
        drop(closed); // closing sockets outside the lock
        found
    }

    /// Keeps a connection whose exchange is complete, if there is room; closes it otherwise.
    fn checkin(&self, link: Box<Link>) {
        let authority = &link.authority;
        let mut idle = self.lock();
        if Self::list(&mut idle, authority).is_none() {
            idle.push((authority.clone(), Vec::new()));
        }
        let Some(list) = Self::list(&mut idle, authority) else {
            return; // just added
        };
        if list.len() < self.max_idle {
            debug_assert!(
                link.outgoing.is_idle(),
                "only finished exchanges are pooled"
            );
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
                let entry = &list[index];
                if entry.since.elapsed() >= self.idle_timeout || !entry.link.usable() {
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
        // Boxed once per connection, so moving it in and out of the pool and into response
        // bodies copies a pointer, not the buffer's bookkeeping.
        Ok(Box::new(Link::new(stream, authority.clone())))
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
            io::Error::other("the name resolved to no address"),
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

/// How `body` goes on the wire, given the request's fields. A `Content-Length` the request
/// carries stays (the server side has checked the body against it); a body of unknown length
/// goes chunked.
fn request_framing(headers: &mut HeaderMap, body: &ProxyBody) -> RequestFraming {
    if headers.contains_key(header::CONTENT_LENGTH) {
        return RequestFraming::Length;
    }
    if body.is_end_stream() {
        return RequestFraming::Empty;
    }
    match body.size_hint().exact() {
        Some(0) => RequestFraming::Empty,
        Some(length) => {
            headers.insert(header::CONTENT_LENGTH, length.into());
            RequestFraming::Length
        }
        None => RequestFraming::Chunked,
    }
}

/// The request on its way out: bytes queued for the socket, and the body still to read.
#[derive(Default)]
struct Outgoing {
    /// The request head (then empty).
    head: Bytes,
    /// Body bytes and framing queued behind the head.
    queue: VecDeque<Bytes>,
    /// The client's body, until it has ended; boxed because a body can hold a response body
    /// that holds an exchange.
    body: Option<Box<ProxyBody>>,
    chunked: bool,
}

/// Why writing a request stopped.
enum WriteFailure {
    Socket(io::Error),
    Body(BoxError),
}

impl Outgoing {
    /// Starts writing a new request (the queue keeps its allocation).
    fn start(&mut self, head: Bytes, body: ProxyBody, framing: RequestFraming) {
        self.head = head;
        self.queue.clear();
        self.body = match framing {
            RequestFraming::Empty => None,
            RequestFraming::Length | RequestFraming::Chunked => Some(Box::new(body)),
        };
        self.chunked = framing == RequestFraming::Chunked;
    }

    /// Nothing is left to write.
    fn is_idle(&self) -> bool {
        self.head.is_empty() && self.queue.is_empty() && self.body.is_none()
    }

    /// Writes the request as far as the socket and the client's body allow; `Ready(Ok)` once all
    /// of it is written.
    fn poll_write(
        &mut self,
        stream: &mut TcpStream,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), WriteFailure>> {
        loop {
            ready!(self.poll_flush(stream, cx)).map_err(WriteFailure::Socket)?;
            let Some(body) = &mut self.body else {
                return Poll::Ready(Ok(()));
            };
            match ready!(Pin::new(&mut **body).poll_frame(cx)) {
                None => self.end_body(),
                Some(Err(error)) => {
                    self.body = None;
                    return Poll::Ready(Err(WriteFailure::Body(error)));
                }
                Some(Ok(frame)) => {
                    // Trailers of a request body are not forwarded (they are rare, and the
                    // upstream must not depend on them: RFC 9110 section 6.5).
                    if let Ok(data) = frame.into_data()
                        && !data.is_empty()
                    {
                        if self.chunked {
                            let mut size = BytesMut::new();
                            codec::encode_chunk_start(data.len(), &mut size);
                            self.queue.push_back(size.freeze());
                            self.queue.push_back(data);
                            self.queue.push_back(Bytes::from_static(codec::CHUNK_END));
                        } else {
                            self.queue.push_back(data);
                        }
                    }
                    if self.body.as_ref().is_some_and(|body| body.is_end_stream()) {
                        self.end_body();
                    }
                }
            }
        }
    }

    fn end_body(&mut self) {
        self.body = None;
        if self.chunked {
            self.queue.push_back(Bytes::from_static(codec::LAST_CHUNK));
        }
    }

    /// Writes everything queued (several buffers per `writev`).
    fn poll_flush(&mut self, stream: &mut TcpStream, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
            let mut count = 0;
            for part in std::iter::once(&self.head)
                .chain(self.queue.iter())
                .filter(|part| !part.is_empty())
                .take(MAX_IOVECS)
            {
                slices[count] = IoSlice::new(part);
                count += 1;
            }
            // One buffer (a bodiless request's head) goes with `send`, which the kernel serves
            // faster than `writev`.
            let written = match count {
                0 => return Poll::Ready(Ok(())),
                1 => ready!(Pin::new(&mut *stream).poll_write(cx, &slices[0]))?,
                _ => ready!(Pin::new(&mut *stream).poll_write_vectored(cx, &slices[..count]))?,
            };
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.consume(written);
        }
    }

    fn consume(&mut self, mut written: usize) {
        let take = self.head.len().min(written);
        self.head.advance(take);
        written -= take;
        while written > 0 {
            let Some(front) = self.queue.front_mut() else {
                return;
            };
            if written < front.len() {
                front.advance(written);
                return;
            }
            written -= front.len();
            self.queue.pop_front();
        }
    }
}

impl Link {
    /// Starts an exchange: `head` and then `body` are written by the polls that follow.
    fn begin(&mut self, head: Bytes, body: ProxyBody, framing: RequestFraming) {
        self.outgoing.start(head, body, framing);
        self.sent = false;
        self.write_error = None;
        self.body_error = None;
        self.answered = false;
    }

    /// Writes what can be written of the request now; never waits.
    fn push_request(&mut self, cx: &mut Context<'_>) {
        if self.sent || self.write_error.is_some() || self.body_error.is_some() {
            return;
        }
        match self.outgoing.poll_write(&mut self.stream, cx) {
            Poll::Ready(Ok(())) => self.sent = true,
            Poll::Ready(Err(WriteFailure::Socket(error))) => self.write_error = Some(error),
            Poll::Ready(Err(WriteFailure::Body(error))) => self.body_error = Some(error),
            Poll::Pending => {}
        }
    }

    /// Sends the request and waits for the final response head (interim 1xx ones are skipped).
    fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        method: &Method,
    ) -> Poll<Result<codec::ResponseHead, UpstreamError>> {
        self.push_request(cx);
        if let Some(error) = self.body_error.take() {
            return Poll::Ready(Err(UpstreamError::RequestBody(error)));
        }
        loop {
            if let Some(head) =
                codec::parse_response_head(&mut self.read, method, MAX_RESPONSE_HEAD)?
            {
                self.answered = true;
                let status = head.response.status();
                if status == http::StatusCode::SWITCHING_PROTOCOLS {
                    return Poll::Ready(Err(
                        ProtocolError("a protocol switch nobody asked for").into()
                    ));
                }
                if status.is_informational() {
                    continue;
                }
                return Poll::Ready(Ok(head));
            }
            if !self.read.is_empty() {
                self.answered = true;
            }
            match ready!(self.poll_fill(cx)) {
                Ok(0) => {
                    return Poll::Ready(Err(self
                        .write_error
                        .take()
                        .map_or(UpstreamError::Closed, UpstreamError::Io)));
                }
                Ok(_) => {}
                Err(error) => return Poll::Ready(Err(error.into())),
            }
        }
    }
}

/// Sends `request` (origin-form URI, `Host` set) to `authority` over a pooled or new connection
/// and returns the response head; its body keeps driving the exchange.
pub(crate) async fn send(
    pool: &Arc<Pool>,
    authority: &Authority,
    request: Request<ProxyBody>,
) -> Result<Response<ProxyBody>, UpstreamError> {
    // The head is encoded before the first await, so the request's parts are not kept in this
    // future (which hyper moves into place once per request).
    let (head, method, framing, body) = encode(request);
    // Sent again after a reused connection's silent close only when that cannot do harm.
    let replayable = framing == RequestFraming::Empty && method.is_idempotent();
    let mut body = Some(body);
    loop {
        let (mut link, reused) = match pool.checkout(authority) {
            Some(link) => (link, true),
            None => (pool.connect(authority).await?, false),
        };
        let request_body = body.take().unwrap_or_else(ProxyBody::empty);
        link.begin(head.clone(), request_body, framing);
        match poll_fn(|cx| link.poll_head(cx, &method)).await {
            Ok(codec::ResponseHead {
                response,
                body: decoder,
                keep_alive,
            }) => {
                let (parts, ()) = response.into_parts();
                let body = UpstreamBody {
                    link: Some(link),
                    decoder,
                    keep_alive,
                    eof: false,
                    pool: pool.clone(),
                };
                return Ok(Response::from_parts(parts, ProxyBody::Upstream(body)));
            }
            Err(UpstreamError::Closed | UpstreamError::Io(_))
                if reused && replayable && !link.answered => {}
            Err(error) => return Err(error),
        }
    }
}

/// The encoded request head, the method, and how the body goes on the wire.
fn encode(request: Request<ProxyBody>) -> (Bytes, Method, RequestFraming, ProxyBody) {
    let (mut parts, body) = request.into_parts();
    let framing = request_framing(&mut parts.headers, &body);
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |target| target.as_str());
    let mut head = BytesMut::new();
    codec::encode_request_head(&parts.method, target, &parts.headers, framing, &mut head);
    (head.freeze(), parts.method, framing, body)
}

/// An upstream response body. Reading it reads the connection (and writes what is left of the
/// request); once it has been read to the end the connection goes back to the pool.
pub struct UpstreamBody {
    /// The connection, until the response has ended.
    link: Option<Box<Link>>,
    decoder: BodyDecoder,
    keep_alive: bool,
    /// The upstream has closed the connection.
    eof: bool,
    pool: Arc<Pool>,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("decoder", &self.decoder)
            .finish_non_exhaustive()
    }
}

impl UpstreamBody {
    /// The response is complete: the connection goes back to the pool if it can carry another
    /// exchange, and is closed otherwise.
    fn finish(&mut self) {
        if let Some(link) = self.link.take()
            && self.keep_alive
            && link.sent
            && link.read.is_empty()
        {
            self.pool.checkin(link);
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
        let Some(link) = &mut this.link else {
            return Poll::Ready(None);
        };
        match ready!(poll_body(link, &mut this.decoder, &mut this.eof, cx)) {
            Ok(frame) => {
                if this.decoder.is_done() {
                    this.finish();
                }
                Poll::Ready(frame.map(Ok))
            }
            Err(error) => {
                this.link = None;
                Poll::Ready(Some(Err(error)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoder.remaining() {
            Some(remaining) => SizeHint::with_exact(remaining),
            None => SizeHint::default(),
        }
    }
}

/// The next frame of a response body (`None` at its end), reading the connection as needed and
/// writing what is left of the request: an upstream may answer before it has read the whole
/// request (an echo does).
fn poll_body(
    link: &mut Link,
    decoder: &mut BodyDecoder,
    eof: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<Result<Option<Frame<Bytes>>, BoxError>> {
    link.push_request(cx);
    if let Some(error) = link.body_error.take() {
        return Poll::Ready(Err(UpstreamError::RequestBody(error).into()));
    }
    loop {
        match decoder.decode(&mut link.read, *eof)? {
            Decoded::Data(data) => return Poll::Ready(Ok(Some(Frame::data(data)))),
            Decoded::Trailers(trailers) => return Poll::Ready(Ok(Some(Frame::trailers(trailers)))),
            Decoded::End => return Poll::Ready(Ok(None)),
            Decoded::NeedMore => {}
        }
        if ready!(link.poll_fill(cx))? == 0 {
            *eof = true;
        }
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // Bodies that were empty from the start (204, HEAD, Content-Length: 0) or whose end was
        // read are complete: the connection can be reused.
        if self.decoder.is_done() {
            self.finish();
        }
    }
}
