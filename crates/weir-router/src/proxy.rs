//! Forwarding one request: decide, rewrite, send over the worker's upstream pool, count, answer.
//!
//! The request path loads the route table once (a lock-free `arc-swap` load), so a table change
//! affects only requests that start after it. Upstream failures become fast local answers - 502
//! when the upstream cannot be reached or breaks the exchange, 504 when it does not answer
//! within the response timeout - and are counted as errors of the version that was chosen.
//! There are no retries: the router cannot know whether a request is safe to send twice.
//!
//! Header handling follows RFC 9110 section 7.6: hop-by-hop fields (`Connection` and every field
//! it names, `Keep-Alive`, `Proxy-Connection`, `Proxy-Authenticate`, `Proxy-Authorization`, `TE`,
//! `Trailer`, `Transfer-Encoding`, `Upgrade`) are removed in both directions, because they
//! describe one connection, not the message; hyper re-frames the body for the next hop.
//! Protocol upgrades (WebSocket) are therefore not proxied. The client's address is appended to
//! `X-Forwarded-For`; `X-Forwarded-Proto: http` is added when absent. Requests arriving over
//! HTTP/2 are forwarded as HTTP/1.1 with a `Host` header taken from their `:authority`.

use std::convert::Infallible;
use std::future::poll_fn;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Instant;

use arc_swap::ArcSwap;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::Semaphore;

use crate::body::{ProxyBody, ServedBody, tee};
use crate::deadline::ConnClock;
use crate::metrics::ListenerMetrics;
use crate::rng::with_thread_rng;
use crate::server::RouterConfig;
use crate::table::{Role, RouteTable};
use crate::upstream::{self, Pool, UpstreamError};

/// Frames buffered for a mirror before its copy is abandoned.
const MIRROR_BODY_FRAMES: usize = 16;

/// Everything a listener's requests share, on every worker.
pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) table: ArcSwap<RouteTable>,
    pub(crate) metrics: ListenerMetrics,
    pub(crate) config: RouterConfig,
    pub(crate) mirror_permits: Arc<Semaphore>,
    /// Upstream connections opened by all workers' pools.
    pub(crate) upstream_connects: Arc<AtomicU64>,
    /// Serialises read-modify-write updates of the table (control path only).
    pub(crate) update_lock: Mutex<()>,
}

/// What one worker's requests share: the listener's state and the worker's own upstream pool.
pub(crate) struct Worker {
    pub(crate) shared: Arc<Shared>,
    pub(crate) pool: Arc<Pool>,
}

impl Worker {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let config = &shared.config;
        let pool = Arc::new(Pool::new(
            config.connect_timeout,
            config.upstream_idle_timeout,
            config.max_idle_per_upstream,
            shared.upstream_connects.clone(),
            config.connect_guard.clone(),
        ));
        Self { shared, pool }
    }
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// Whether `name` is a hop-by-hop field other than `Connection` (RFC 9110 section 7.6.1).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == header::TE
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name == header::TRAILER
        || name == header::PROXY_AUTHENTICATE
        || name == header::PROXY_AUTHORIZATION
        || name == KEEP_ALIVE
        || name == PROXY_CONNECTION
}

/// Removes hop-by-hop fields, including those the `Connection` field names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the (few) fields present instead of a hash lookup per possible field: most
    // messages carry none of them, or only `Connection`.
    let mut connection = false;
    let mut hop = false;
    for name in headers.keys() {
        if name == header::CONNECTION {
            connection = true;
        } else if is_hop_by_hop(name) {
            hop = true;
        }
    }
    if connection {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
        headers.remove(header::CONNECTION);
    }
    if hop {
        let found: Vec<HeaderName> = headers
            .keys()
            .filter(|n| is_hop_by_hop(n))
            .cloned()
            .collect();
        for name in found {
            headers.remove(name);
        }
    }
}

/// The `X-Forwarded-For` value naming `client` alone.
pub(crate) fn forwarded_for_value(client: IpAddr) -> Option<HeaderValue> {
    HeaderValue::try_from(client.to_canonical().to_string()).ok()
}

/// Appends `client` to `X-Forwarded-For` (joining any values already present). `alone` is
/// [`forwarded_for_value`] of `client`, made once per connection.
pub(crate) fn append_forwarded_for(
    headers: &mut HeaderMap,
    client: IpAddr,
    alone: Option<&HeaderValue>,
) {
    let client = client.to_canonical();
    let value = match headers.get(&X_FORWARDED_FOR) {
        None => match alone {
            Some(value) => Ok(value.clone()),
            None => HeaderValue::try_from(client.to_string()),
        },
        Some(_) => {
            let mut joined = String::new();
            for value in headers.get_all(&X_FORWARDED_FOR) {
                if let Ok(text) = value.to_str() {
                    joined.push_str(text);
                    joined.push_str(", ");
                }
            }
            joined.push_str(&client.to_string());
            HeaderValue::try_from(joined)
        }
    };
    if let Ok(value) = value {
        headers.insert(&X_FORWARDED_FOR, value);
    }
    if !headers.contains_key(&X_FORWARDED_PROTO) {
        headers.insert(&X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    }
}

fn local_response(status: StatusCode, text: &'static str) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The origin form (`/path?query`) of `original`, which is what an HTTP/1.1 request to an
/// origin server carries; the upstream's address travels in the connection, the client's host in
/// the `Host` field.
fn origin_form(original: &Uri) -> Uri {
    Uri::from(
        original
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/")),
    )
}

/// What the requests of one client connection share.
#[derive(Debug)]
pub(crate) struct ClientConn {
    pub(crate) peer: SocketAddr,
    /// `X-Forwarded-For` naming the client, made once per connection rather than per request.
    pub(crate) forwarded_for: Option<HeaderValue>,
    /// On HTTP/1.1, the connection's clock, which then enforces the response timeout (see
    /// [`crate::deadline`]); without one, a timer of the request's own does.
    pub(crate) clock: Option<ConnClock>,
}

impl ClientConn {
    pub(crate) fn new(peer: SocketAddr, clock: Option<ConnClock>) -> Self {
        Self {
            peer,
            forwarded_for: forwarded_for_value(peer.ip()),
            clock,
        }
    }
}

/// Serves one request from the client of `conn`.
pub(crate) async fn proxy(
    worker: Arc<Worker>,
    conn: Arc<ClientConn>,
    request: Request<Incoming>,
) -> Result<Response<ServedBody>, Infallible> {
    let shared = &worker.shared;
    let started = Instant::now();
    let clock = conn.clock.as_ref();
    if let Some(clock) = clock {
        clock.waiting(started);
    }
    let table = shared.table.load_full();
    let decision = with_thread_rng(|rng| table.decide(request.headers(), request.uri(), rng));
    let backend = table.backend(decision.role);

    let upstream = backend.next_upstream();

    let (mut parts, body) = request.into_parts();
    if !parts.headers.contains_key(header::HOST) {
        // HTTP/2 clients name the host in `:authority`; HTTP/1.0 clients may not name it at all.
        let host = parts.uri.authority().unwrap_or(upstream);
        if let Ok(host) = HeaderValue::from_str(host.as_str()) {
            parts.headers.insert(header::HOST, host);
        }
    }
    strip_hop_by_hop(&mut parts.headers);
    append_forwarded_for(
        &mut parts.headers,
        conn.peer.ip(),
        conn.forwarded_for.as_ref(),
    );
    parts.uri = origin_form(&parts.uri);
    parts.version = Version::HTTP_11;

    let body = if decision.mirror {
        start_mirror(&worker, &table, &parts, body)
    } else {
        ProxyBody::Incoming(body)
    };

    let send = upstream::send(&worker.pool, upstream, Request::from_parts(parts, body));
    let outcome = match clock {
        Some(clock) => {
            let mut send = pin!(send);
            poll_fn(|cx| {
                if clock.expired() {
                    Poll::Ready(Err(()))
                } else {
                    send.as_mut().poll(cx).map(Ok)
                }
            })
            .await
        }
        None => tokio::time::timeout(shared.config.response_timeout, send)
            .await
            .map_err(|_| ()),
    };
    if let Some(clock) = clock {
        clock.streaming();
    }
    let mut response = match outcome {
        Ok(Ok(mut response)) => {
            strip_hop_by_hop(response.headers_mut());
            response
        }
        Ok(Err(UpstreamError::Refused(..))) => local_response(
            StatusCode::BAD_GATEWAY,
            "weir-router: upstream refused by weir's outbound policy\n",
        ),
        Ok(Err(_)) => local_response(
            StatusCode::BAD_GATEWAY,
            "weir-router: upstream unavailable\n",
        ),
        Err(_) => local_response(
            StatusCode::GATEWAY_TIMEOUT,
            "weir-router: upstream timed out\n",
        ),
    };
    backend.metrics.record(response.status(), started.elapsed());
    if decision.set_affinity_cookie
        && let Some(cookie) = &backend.affinity_cookie
    {
        response
            .headers_mut()
            .append(header::SET_COOKIE, cookie.clone());
    }
    let (parts, body) = response.into_parts();
    Ok(Response::from_parts(parts, ServedBody::new(body, conn)))
}

/// Starts a mirror copy of the request if the concurrency bound allows; returns the body to
/// forward to the chosen version.
fn start_mirror(
    worker: &Worker,
    table: &RouteTable,
    parts: &http::request::Parts,
    body: Incoming,
) -> ProxyBody {
    let shared = &worker.shared;
    let Ok(permit) = shared.mirror_permits.clone().try_acquire_owned() else {
        shared
            .metrics
            .mirror_dropped
            .fetch_add(1, Ordering::Relaxed);
        return ProxyBody::Incoming(body);
    };
    let canary = table.backend(Role::Canary);
    let mut mirror = Request::new(ProxyBody::empty());
    *mirror.method_mut() = parts.method.clone();
    *mirror.uri_mut() = parts.uri.clone();
    *mirror.headers_mut() = parts.headers.clone();
    let forwarded = if body.is_end_stream() {
        ProxyBody::Incoming(body)
    } else {
        let (original, copy) = tee(
            body,
            MIRROR_BODY_FRAMES,
            shared.metrics.mirror_dropped.clone(),
        );
        *mirror.body_mut() = ProxyBody::Mirror(copy);
        ProxyBody::Tee(original)
    };
    let pool = worker.pool.clone();
    let upstream = canary.next_upstream().clone();
    let metrics = table.mirror_metrics.clone();
    let deadline = tokio::time::Instant::now() + shared.config.response_timeout;
    tokio::spawn(async move {
        let _permit = permit;
        let started = Instant::now();
        let status =
            match tokio::time::timeout_at(deadline, upstream::send(&pool, &upstream, mirror)).await
            {
                Ok(Ok(response)) => {
                    let status = response.status();
                    // Drain (and discard) the body so the pooled connection can be reused.
                    let mut body = response.into_body();
                    let _ = tokio::time::timeout_at(deadline, async {
                        while let Some(Ok(_)) = body.frame().await {}
                    })
                    .await;
                    status
                }
                Ok(Err(_)) => StatusCode::BAD_GATEWAY,
                Err(_) => StatusCode::GATEWAY_TIMEOUT,
            };
        metrics.record(status, started.elapsed());
    });
    forwarded
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_fields_and_connection_named_ones_are_removed() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Secret"),
            ("connection", "x-other"),
            ("x-secret", "1"),
            ("x-other", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic x"),
            ("x-kept", "yes"),
        ] {
            headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        strip_hop_by_hop(&mut headers);
        let left: Vec<_> = headers.keys().map(|k| k.as_str().to_owned()).collect();
        assert_eq!(left, ["x-kept"]);
    }

    #[test]
    fn forwarded_for_appends() {
        let mut headers = HeaderMap::new();
        let client: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        append_forwarded_for(&mut headers, client, forwarded_for_value(client).as_ref());
        assert_eq!(headers[&X_FORWARDED_FOR], "10.0.0.1");
        headers.append(&X_FORWARDED_FOR, HeaderValue::from_static("10.0.0.2"));
        append_forwarded_for(&mut headers, "10.0.0.3".parse().unwrap(), None);
        assert_eq!(headers[&X_FORWARDED_FOR], "10.0.0.1, 10.0.0.2, 10.0.0.3");
        assert_eq!(headers[&X_FORWARDED_PROTO], "http");
    }

    #[test]
    fn origin_form_keeps_path_and_query() {
        let uri = origin_form(&Uri::from_static("http://example.com/a/b?c=d"));
        assert_eq!(uri, "/a/b?c=d");
        assert_eq!(origin_form(&Uri::from_static("/x")), "/x");
        assert_eq!(origin_form(&Uri::from_static("http://example.com")), "/");
    }
}
