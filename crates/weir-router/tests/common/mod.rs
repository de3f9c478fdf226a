//! Shared pieces of the integration tests: small hyper upstreams and clients over loopback.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use weir_router::{Backend, RouteHandle, RouteSpec, Router, RouterConfig, Upstream, Weight};

/// Fails the test instead of hanging it forever if something deadlocks. Not a timing
/// assertion: the bound is far above any plausible run time.
pub async fn guard<F: std::future::Future>(f: F) -> F::Output {
    guard_for(Duration::from_secs(120), f).await
}

/// [`guard`] with a custom bound, for tests that do a lot of work on purpose.
pub async fn guard_for<F: std::future::Future>(limit: Duration, f: F) -> F::Output {
    tokio::time::timeout(limit, f).await.expect("test hung")
}

type TestBody = BoxBody<Bytes, BoxError>;

/// How a test upstream behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// Answer every path as described on [`TestUpstream`].
    Normal,
    /// Never answer any request.
    Hang,
}

/// A small HTTP/1.1 server standing in for one version of a service.
///
/// Paths: `/headers` answers with the request headers, one `name: value` per line; `/echo`
/// streams the request body back; `/status/NNN` answers NNN; `/hang` never answers; `/stream`
/// sends `first|`, then waits for [`TestUpstream::release`] before sending `second`; `/upload`
/// signals [`TestUpstream::first_chunk`] after the first body chunk and answers with the byte
/// count. Anything else reads the body and answers with the version name.
pub struct TestUpstream {
    pub addr: SocketAddr,
    pub name: String,
    pub requests: Arc<AtomicU64>,
    pub body_bytes: Arc<AtomicU64>,
    pub release: Arc<Notify>,
    pub first_chunk: Arc<Notify>,
}

impl TestUpstream {
    pub async fn start(name: &str, behavior: Behavior) -> TestUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = TestUpstream {
            addr: listener.local_addr().unwrap(),
            name: name.to_owned(),
            requests: Arc::default(),
            body_bytes: Arc::default(),
            release: Arc::default(),
            first_chunk: Arc::default(),
        };
        let state = (
            Arc::new(name.to_owned()),
            upstream.requests.clone(),
            upstream.body_bytes.clone(),
            upstream.release.clone(),
            upstream.first_chunk.clone(),
        );
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(state.clone(), behavior, req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        upstream
    }

    pub fn upstream(&self) -> Upstream {
        format!("http://{}", self.addr).parse().unwrap()
    }

    pub fn backend(&self) -> Backend {
        Backend::new(self.name.clone(), vec![self.upstream()])
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

type State = (
    Arc<String>,
    Arc<AtomicU64>,
    Arc<AtomicU64>,
    Arc<Notify>,
    Arc<Notify>,
);

fn text(status: StatusCode, body: String) -> Response<TestBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
}

async fn handle(
    state: State,
    behavior: Behavior,
    req: Request<Incoming>,
) -> Result<Response<TestBody>, Infallible> {
    let (name, requests, body_bytes, release, first_chunk) = state;
    requests.fetch_add(1, Ordering::SeqCst);
    if behavior == Behavior::Hang || req.uri().path() == "/hang" {
        std::future::pending::<()>().await;
    }
    let path = req.uri().path().to_owned();
    if path == "/headers" {
        let mut out = String::new();
        for (key, value) in req.headers() {
            out.push_str(&format!("{}: {}\n", key, value.to_str().unwrap_or("?")));
        }
        return Ok(text(StatusCode::OK, out));
    }
    if let Some(code) = path.strip_prefix("/status/") {
        let status = StatusCode::from_u16(code.parse().unwrap()).unwrap();
        return Ok(text(status, name.to_string()));
    }
    if path == "/echo" {
        // Stream the request body straight back.
        return Ok(Response::new(
            req.into_body().map_err(BoxError::from).boxed(),
        ));
    }
    if path == "/stream" {
        let (tx, rx) = mpsc::channel::<Bytes>(1);
        tokio::spawn(async move {
            tx.send(Bytes::from_static(b"first|")).await.ok();
            release.notified().await;
            tx.send(Bytes::from_static(b"second")).await.ok();
        });
        return Ok(Response::new(ChannelBody(rx).boxed()));
    }
    let mut body = req.into_body();
    let mut total = 0u64;
    let mut first = true;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Ok(text(StatusCode::BAD_REQUEST, "body failed".into()));
        };
        if let Some(data) = frame.data_ref() {
            total += data.len() as u64;
            if first && path == "/upload" {
                first_chunk.notify_one();
                first = false;
            }
        }
    }
    body_bytes.fetch_add(total, Ordering::SeqCst);
    if path == "/upload" {
        return Ok(text(StatusCode::OK, total.to_string()));
    }
    let mut response = text(StatusCode::OK, name.to_string());
    response
        .headers_mut()
        .insert("x-version", name.parse().unwrap());
    Ok(response)
}

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A body fed frame by frame through a channel, so tests control when each chunk is sent.
pub struct ChannelBody(pub mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// Starts a router on an ephemeral loopback port; it serves until the test ends.
pub async fn start_router(spec: RouteSpec, config: RouterConfig) -> (SocketAddr, RouteHandle) {
    let router = Router::bind("test", "127.0.0.1:0".parse().unwrap(), spec, config)
        .await
        .unwrap();
    let addr = router.local_addr().unwrap();
    let handle = router.handle();
    tokio::spawn(router.serve(std::future::pending()));
    (addr, handle)
}

pub fn weight(percent: &str) -> Weight {
    percent.parse().unwrap()
}

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// An HTTP/1.1 client with a keep-alive pool.
pub fn http1_client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .build_http()
}

/// An HTTP/2 client speaking h2c with prior knowledge.
pub fn http2_client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

/// Sends a request and collects the answer.
pub async fn send(client: &HttpClient, request: Request<Full<Bytes>>) -> Result<Answer, String> {
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| format!("{e:?}"))?
        .to_bytes();
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// `GET http://addr{path}` with extra headers.
pub async fn get(
    client: &HttpClient,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let mut builder = Request::get(format!("http://{addr}{path}"));
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    send(client, builder.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap()
}

/// Sends `count` `GET /` requests over one raw HTTP/1.1 connection, pipelined in batches of
/// `batch`, and returns how many answers had each body (`v1`, `v2`) and the other answers. A
/// deliberately minimal client: enough for responses with a `Content-Length`, cheap enough that
/// the router, not the client, is what a load test exercises.
pub async fn pipelined_gets(addr: SocketAddr, count: u64, batch: u64) -> (u64, u64, Vec<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let request = b"GET / HTTP/1.1\r\nhost: router.test\r\n\r\n";
    let (mut v1, mut v2, mut other) = (0u64, 0u64, Vec::new());
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut sent = 0u64;
    while sent < count {
        let n = batch.min(count - sent);
        stream.write_all(&request.repeat(n as usize)).await.unwrap();
        sent += n;
        let mut answered = 0;
        while answered < n {
            // Parse as many complete responses as the buffer holds.
            let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                let mut chunk = [0u8; 16 * 1024];
                let read = stream.read(&mut chunk).await.unwrap();
                assert!(read > 0, "router closed the connection");
                buf.extend_from_slice(&chunk[..read]);
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |value| value.trim().parse().unwrap());
            let total = head_end + 4 + length;
            if buf.len() < total {
                let mut chunk = [0u8; 16 * 1024];
                let read = stream.read(&mut chunk).await.unwrap();
                assert!(read > 0, "router closed the connection");
                buf.extend_from_slice(&chunk[..read]);
                continue;
            }
            let body = &buf[head_end + 4..total];
            match (head.starts_with("http/1.1 200"), body) {
                (true, b"v1") => v1 += 1,
                (true, b"v2") => v2 += 1,
                _ => other.push(format!("{head} {}", String::from_utf8_lossy(body))),
            }
            buf.drain(..total);
            answered += 1;
        }
    }
    (v1, v2, other)
}
