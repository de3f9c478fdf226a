//! The router's HTTP/1.1 client side against upstreams that answer byte by byte as written here
//! (raw sockets on loopback): interim responses, bodies delimited by the close, chunked bodies
//! with trailers, and connections closed without an answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_router::{Backend, RouteSpec, RouterConfig, Traffic, Weight};
use weir_testkit::client::{get, http1_client, send};
use weir_testkit::router::start_router;
use weir_testkit::upstream::{Behavior, TestUpstream};
use weir_testkit::wait::no_hang;

/// Reads one request head (and a `Content-Length` body) from `stream`; `None` at the close.
async fn read_request(stream: &mut TcpStream) -> Option<String> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |value| value.trim().parse().unwrap());
            if data.len() >= end + 4 + length {
                return Some(head);
            }
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    }
}

/// What a raw upstream does with a request.
enum Reply {
    /// Writes these bytes and waits for the next request.
    Answer(&'static [u8]),
    /// Writes these bytes and closes the connection.
    AnswerAndClose(&'static [u8]),
    /// Closes the connection without a byte.
    Close,
}

/// An upstream that answers each connection's requests with `answer(index on the connection,
/// head)`. Returns its address and the number of request heads it has read.
async fn raw_upstream(
    answer: fn(usize, &str) -> Reply,
) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let heads = Arc::new(AtomicUsize::new(0));
    let counted = heads.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let heads = counted.clone();
            tokio::spawn(async move {
                let mut index = 0;
                while let Some(head) = read_request(&mut stream).await {
                    heads.fetch_add(1, Ordering::SeqCst);
                    let (bytes, close) = match answer(index, &head) {
                        Reply::Answer(bytes) => (bytes, false),
                        Reply::AnswerAndClose(bytes) => (bytes, true),
                        Reply::Close => return,
                    };
                    if stream.write_all(bytes).await.is_err() || close {
                        return;
                    }
                    index += 1;
                }
            });
        }
    });
    (address, heads)
}

fn backend(address: std::net::SocketAddr) -> Backend {
    Backend::new("v1", vec![address.to_string().parse().unwrap()])
}

/// Interim 1xx responses are skipped; a body without length runs to the close (and that
/// connection is not reused); a chunked body with trailers arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interim_close_delimited_and_chunked_responses_are_forwarded() {
    no_hang(async {
        let (upstream, _) = raw_upstream(|_, head| {
            if head.starts_with("get /interim") {
                Reply::Answer(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfinal")
            } else if head.starts_with("get /until-close") {
                Reply::AnswerAndClose(b"HTTP/1.1 200 OK\r\nx-kind: close\r\n\r\nthe body runs to the close")
            } else {
                Reply::Answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4;x=y\r\nchun\r\n3\r\nked\r\n0\r\nx-trailer: t\r\n\r\n")
            }
        })
        .await;
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let spec = RouteSpec::weighted(backend(upstream), v2.backend(), Weight::ZERO);
        let (addr, handle) = start_router(spec, RouterConfig::default()).await;
        let client = http1_client();

        let interim = get(&client, addr, "/interim", &[]).await;
        assert_eq!((interim.status, interim.body.as_str()), (StatusCode::OK, "final"));
        let chunked = get(&client, addr, "/chunked", &[]).await;
        assert_eq!((chunked.status, chunked.body.as_str()), (StatusCode::OK, "chunked"));
        assert_eq!(handle.upstream_connections_opened(), 1, "both exchanges on one connection");

        // A body delimited by the close of its connection ends that connection: the next
        // request needs a new one.
        let close = get(&client, addr, "/until-close", &[]).await;
        assert_eq!(close.body, "the body runs to the close");
        assert_eq!(close.headers["x-kind"], "close");
        assert_eq!(get(&client, addr, "/chunked", &[]).await.body, "chunked");
        assert_eq!(handle.upstream_connections_opened(), 2);
        let served = handle.metrics();
        let served = served.get("v1", Traffic::Served).unwrap();
        assert_eq!((served.requests, served.errors), (4, 0));
    })
    .await;
}

/// An upstream that closes a reused connection on reading a request, without a byte of answer:
/// a bodiless GET (idempotent) goes again on a new connection and succeeds; a POST with a body
/// is never sent twice and gets a 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_sent_again_after_a_silent_close_only_when_that_is_safe() {
    no_hang(async {
        // Each connection answers its first request and closes on its second.
        let (upstream, heads) = raw_upstream(|index, _| match index {
            0 => Reply::Answer(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
            _ => Reply::Close,
        })
        .await;
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let spec = RouteSpec::weighted(backend(upstream), v2.backend(), Weight::ZERO);
        let (addr, handle) = start_router(spec, RouterConfig::default()).await;
        let client = http1_client();

        assert_eq!(get(&client, addr, "/", &[]).await.body, "ok");
        // Reuses the pooled connection, which the upstream closes on reading this request: sent
        // again on a new connection.
        let again = get(&client, addr, "/", &[]).await;
        assert_eq!((again.status, again.body.as_str()), (StatusCode::OK, "ok"));
        assert_eq!(
            heads.load(Ordering::SeqCst),
            3,
            "the GET reached the upstream twice"
        );
        assert_eq!(handle.upstream_connections_opened(), 2);

        // The same for a POST: one attempt only.
        let post = Request::post(format!("http://{addr}/"))
            .body(Full::new(Bytes::from_static(b"pay once")))
            .unwrap();
        let answer = send(&client, post).await.unwrap();
        assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
        assert_eq!(
            heads.load(Ordering::SeqCst),
            4,
            "the POST reached the upstream once"
        );
        assert_eq!(handle.upstream_connections_opened(), 2);
        let served = handle.metrics();
        let served = served.get("v1", Traffic::Served).unwrap();
        assert_eq!((served.requests, served.errors), (3, 1));
    })
    .await;
}

/// Response heads an upstream gets wrong are 502s, counted as that version's errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_response_is_a_502() {
    no_hang(async {
        let (upstream, _) = raw_upstream(|_, head| {
            Reply::Answer(if head.starts_with("get /garbage") {
                b"SSH-2.0-not-http\r\n\r\n"
            } else if head.starts_with("get /conflict") {
                b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd"
            } else {
                b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n"
            })
        })
        .await;
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let spec = RouteSpec::weighted(backend(upstream), v2.backend(), Weight::ZERO);
        let (addr, handle) = start_router(spec, RouterConfig::default()).await;
        let client = http1_client();
        for path in ["/garbage", "/conflict", "/switch"] {
            let answer = get(&client, addr, path, &[]).await;
            assert_eq!(answer.status, StatusCode::BAD_GATEWAY, "{path}");
        }
        let served = handle.metrics();
        let served = served.get("v1", Traffic::Served).unwrap();
        assert_eq!((served.requests, served.errors), (3, 3));
    })
    .await;
}
