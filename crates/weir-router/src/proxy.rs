//! Forwarding one request: decide, rewrite, send over the pool, count, answer.
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
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use arc_swap::ArcSwap;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{PathAndQuery, Scheme};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use std::sync::Mutex;

use tokio::sync::Semaphore;

use crate::body::{ProxyBody, tee};
use crate::metrics::ListenerMetrics;
use crate::rng::with_thread_rng;
use crate::server::RouterConfig;
use crate::table::{Role, RouteTable};

/// Frames buffered for a mirror before its copy is abandoned.
const MIRROR_BODY_FRAMES: usize = 16;

/// Everything a listener's requests share.
pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) table: ArcSwap<RouteTable>,
    pub(crate) metrics: ListenerMetrics,
    pub(crate) client: Client<HttpConnector, ProxyBody>,
    pub(crate) config: RouterConfig,
    pub(crate) mirror_permits: Arc<Semaphore>,
    /// Serialises read-modify-write updates of the table (control path only).
    pub(crate) update_lock: Mutex<()>,
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// Removes hop-by-hop fields, including those the `Connection` field names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(header::CONNECTION) {
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
    for name in [
        &KEEP_ALIVE,
        &PROXY_CONNECTION,
        &header::PROXY_AUTHENTICATE,
        &header::PROXY_AUTHORIZATION,
        &header::TE,
        &header::TRAILER,
        &header::TRANSFER_ENCODING,
        &header::UPGRADE,
    ] {
        headers.remove(name);
    }
}

/// Appends `client` to `X-Forwarded-For` (joining any values already present).
pub(crate) fn append_forwarded_for(headers: &mut HeaderMap, client: IpAddr) {
    let client = client.to_canonical();
    let value = match headers.get(&X_FORWARDED_FOR) {
        None => HeaderValue::try_from(client.to_string()),
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

fn upstream_uri(authority: &http::uri::Authority, original: &Uri) -> Uri {
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(Scheme::HTTP);
    parts.authority = Some(authority.clone());
    parts.path_and_query = Some(
        original
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/")),
    );
    // Scheme, authority and path all come from already-valid parts, so this cannot fail; the
    // fallback keeps the request path panic-free regardless.
    Uri::from_parts(parts).unwrap_or_else(|_| original.clone())
}

/// Serves one request from a client at `peer`.
pub(crate) async fn proxy(
    shared: Arc<Shared>,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let started = Instant::now();
    let table = shared.table.load_full();
    let decision = with_thread_rng(|rng| table.decide(request.headers(), request.uri(), rng));
    let backend = table.backend(decision.role);

    let (mut parts, body) = request.into_parts();
    if !parts.headers.contains_key(header::HOST)
        && let Some(authority) = parts.uri.authority()
        && let Ok(host) = HeaderValue::from_str(authority.as_str())
    {
        parts.headers.insert(header::HOST, host);
    }
    strip_hop_by_hop(&mut parts.headers);
    append_forwarded_for(&mut parts.headers, peer.ip());
    let original_uri = std::mem::take(&mut parts.uri);
    parts.uri = upstream_uri(backend.next_upstream(), &original_uri);
    parts.version = Version::HTTP_11;

    let body = if decision.mirror {
        start_mirror(&shared, &table, &parts, body)
    } else {
        ProxyBody::Incoming(body)
    };

    let outcome = tokio::time::timeout(
        shared.config.response_timeout,
        shared.client.request(Request::from_parts(parts, body)),
    )
    .await;
    let mut response = match outcome {
        Ok(Ok(response)) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, ProxyBody::Incoming(body))
        }
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
    Ok(response)
}

/// Starts a mirror copy of the request if the concurrency bound allows; returns the body to
/// forward to the chosen version.
fn start_mirror(
    shared: &Arc<Shared>,
    table: &RouteTable,
    parts: &http::request::Parts,
    body: Incoming,
) -> ProxyBody {
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
    *mirror.uri_mut() = upstream_uri(canary.next_upstream(), &parts.uri);
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
    let client = shared.client.clone();
    let metrics = table.mirror_metrics.clone();
    let deadline = tokio::time::Instant::now() + shared.config.response_timeout;
    tokio::spawn(async move {
        let _permit = permit;
        let started = Instant::now();
        let status = match tokio::time::timeout_at(deadline, client.request(mirror)).await {
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
        append_forwarded_for(&mut headers, "::ffff:10.0.0.1".parse().unwrap());
        assert_eq!(headers[&X_FORWARDED_FOR], "10.0.0.1");
        headers.append(&X_FORWARDED_FOR, HeaderValue::from_static("10.0.0.2"));
        append_forwarded_for(&mut headers, "10.0.0.3".parse().unwrap());
        assert_eq!(headers[&X_FORWARDED_FOR], "10.0.0.1, 10.0.0.2, 10.0.0.3");
        assert_eq!(headers[&X_FORWARDED_PROTO], "http");
    }

    #[test]
    fn upstream_uri_keeps_path_and_query() {
        let authority: http::uri::Authority = "127.0.0.1:9".parse().unwrap();
        let uri = upstream_uri(&authority, &Uri::from_static("http://example.com/a/b?c=d"));
        assert_eq!(uri, "http://127.0.0.1:9/a/b?c=d");
        assert_eq!(
            upstream_uri(&authority, &Uri::from_static("http://example.com")).path(),
            "/"
        );
    }
}
