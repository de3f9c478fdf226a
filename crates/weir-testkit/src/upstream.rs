//! A small HTTP/1.1 server standing in for one version of a service behind weir's router, with
//! paths that stream, hang, echo or fail on demand.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use weir_router::{Backend, Upstream};

/// Any error, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type TestBody = BoxBody<Bytes, BoxError>;

/// How a test upstream behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// Answer every path as described on [`TestUpstream`].
    Normal,
    /// Never answer any request.
    Hang,
}

/// A small HTTP/1.1 server on `127.0.0.1:0` standing in for one version of a service; it serves
/// until the test's runtime ends.
///
/// Paths: `/headers` answers with the request headers, one `name: value` per line; `/echo`
/// streams the request body back; `/status/NNN` answers NNN; `/hang` never answers; `/stream`
/// sends `first|`, then waits for [`TestUpstream::release`] before sending `second`; `/upload`
/// signals [`TestUpstream::first_chunk`] after the first body chunk and answers with the byte
/// count. Anything else reads the body and answers with the version name (also in an
/// `x-version` header).
pub struct TestUpstream {
    /// The address it bound.
    pub addr: SocketAddr,
    /// The version name it answers with.
    pub name: String,
    /// Requests received so far (counted when they arrive).
    pub requests: Arc<AtomicU64>,
    /// Request body bytes read by the default path.
    pub body_bytes: Arc<AtomicU64>,
    /// Lets a `/stream` response send its second chunk.
    pub release: Arc<Notify>,
    /// Notified when an `/upload` body's first chunk arrived.
    pub first_chunk: Arc<Notify>,
}

impl TestUpstream {
    /// Starts one answering as `name`, on the current runtime.
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
        let state = State {
            name: Arc::new(name.to_owned()),
            requests: upstream.requests.clone(),
            body_bytes: upstream.body_bytes.clone(),
            release: upstream.release.clone(),
            first_chunk: upstream.first_chunk.clone(),
        };
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

    /// Its address as a router upstream.
    pub fn upstream(&self) -> Upstream {
        format!("http://{}", self.addr).parse().unwrap()
    }

    /// A router backend named after it, with it as the one address.
    pub fn backend(&self) -> Backend {
        Backend::new(self.name.clone(), vec![self.upstream()])
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

#[derive(Clone)]
struct State {
    name: Arc<String>,
    requests: Arc<AtomicU64>,
    body_bytes: Arc<AtomicU64>,
    release: Arc<Notify>,
    first_chunk: Arc<Notify>,
}

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
    state.requests.fetch_add(1, Ordering::SeqCst);
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
        return Ok(text(status, state.name.to_string()));
    }
    if path == "/echo" {
        // Stream the request body straight back.
        return Ok(Response::new(
            req.into_body().map_err(BoxError::from).boxed(),
        ));
    }
    if path == "/stream" {
        let (tx, rx) = mpsc::channel::<Bytes>(1);
        let release = state.release.clone();
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
                state.first_chunk.notify_one();
                first = false;
            }
        }
    }
    state.body_bytes.fetch_add(total, Ordering::SeqCst);
    if path == "/upload" {
        return Ok(text(StatusCode::OK, total.to_string()));
    }
    let mut response = text(StatusCode::OK, state.name.to_string());
    response
        .headers_mut()
        .insert("x-version", state.name.parse().unwrap());
    Ok(response)
}

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
