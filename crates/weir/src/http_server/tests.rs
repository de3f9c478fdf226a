#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{Limits, serve};
use crate::tls::ApiListener;

/// A server of a few routes on port 0 with `limits`, stopped when the returned sender is
/// dropped or sent to; the task ends when the server has shut down.
async fn start(
    limits: Limits,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let app = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route(
            "/echo",
            axum::routing::post(|body: axum::body::Bytes| async move { body }),
        )
        .route(
            "/big",
            axum::routing::get(|| async { vec![b'x'; 64 * 1024 * 1024] }),
        )
        .route(
            "/peer",
            axum::routing::get(
                |axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>| async move {
                    peer.to_string()
                },
            ),
        );
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = tcp.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(serve(ApiListener::plain(tcp), app, limits, async move {
        let _ = stopped.await;
    }));
    (address, stop, served)
}

fn limits(header: Duration, idle: Duration) -> Limits {
    Limits {
        header_read_timeout: header,
        idle_timeout: idle,
        max_connections: 64,
        shutdown_grace: Duration::from_secs(300),
    }
}

/// Reads until the server closes the connection (end of stream or reset); what was read.
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut read = Vec::new();
    let mut buffer = [0u8; 65536];
    tokio::time::timeout(weir_testkit::wait::DEADLINE, async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await
    .expect("the server never closed the connection");
    read
}

async fn get(address: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    String::from_utf8_lossy(&read_to_close(&mut stream).await).into_owned()
}

#[tokio::test]
async fn half_a_head_is_closed_after_the_header_read_timeout() {
    let header = Duration::from_millis(300);
    let (address, _stop, _served) = start(limits(header, Duration::from_secs(600))).await;
    let started = Instant::now();
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: loc")
        .await
        .unwrap();
    let answer = read_to_close(&mut stream).await;
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    assert!(started.elapsed() >= header, "closed before the timeout");
    assert!(get(address, "/healthz").await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_read_timeout() {
    let header = Duration::from_millis(300);
    let (address, _stop, _served) = start(limits(header, Duration::from_secs(600))).await;
    let started = Instant::now();
    let mut stream = TcpStream::connect(address).await.unwrap();
    assert!(read_to_close(&mut stream).await.is_empty());
    assert!(started.elapsed() >= header);
}

/// Between requests the idle timeout applies, not the (shorter) header-read timeout.
#[tokio::test]
async fn a_kept_alive_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(1500);
    let (address, _stop, _served) = start(limits(Duration::from_millis(200), idle)).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 1024];
    let mut answer = Vec::new();
    while !answer.ends_with(b"ok") {
        let n = stream.read(&mut buffer).await.unwrap();
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&buffer[..n]);
    }
    let answered = Instant::now();
    assert!(read_to_close(&mut stream).await.is_empty());
    assert!(
        answered.elapsed() >= idle,
        "closed {:?} after the answer, before the idle timeout",
        answered.elapsed()
    );
}

#[tokio::test]
async fn a_request_body_that_stops_coming_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(500);
    let (address, _stop, _served) = start(limits(Duration::from_secs(600), idle)).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\nhalf")
        .await
        .unwrap();
    let sent = Instant::now();
    read_to_close(&mut stream).await;
    assert!(sent.elapsed() >= idle);
}

/// A client that asks for a large answer and reads none of it holds its connection only for
/// the idle timeout: with room for one connection, the next client is refused until then.
#[tokio::test]
async fn an_answer_the_client_does_not_read_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(500);
    let mut limits = limits(Duration::from_secs(600), idle);
    limits.max_connections = 1;
    let (address, _stop, _served) = start(limits).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let sent = Instant::now();
    // The answer (64 MiB) fills the socket buffers; until the server gives up on it, its one
    // connection is taken.
    weir_testkit::wait::wait_for("the server to give up the unread answer", || async {
        get(address, "/healthz")
            .await
            .starts_with("HTTP/1.1 200")
            .then_some(())
    })
    .await;
    assert!(sent.elapsed() >= idle);
    let answer = read_to_close(&mut stream).await;
    assert!(
        answer.len() < 64 * 1024 * 1024,
        "the whole answer was written"
    );
}

#[tokio::test]
async fn connections_over_the_limit_are_answered_503_and_the_rest_served() {
    let mut limits = limits(Duration::from_secs(600), Duration::from_secs(600));
    limits.max_connections = 3;
    let (address, _stop, _served) = start(limits).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(b"GET /hea").await.unwrap();
        held.push(stream);
    }
    let refused = get(address, "/healthz").await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("retry-after: 1"), "{refused}");
    assert!(refused.contains("--max-connections"), "{refused}");
    drop(held);
    weir_testkit::wait::wait_for("a connection to be served again", || async {
        get(address, "/healthz")
            .await
            .starts_with("HTTP/1.1 200")
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn handlers_see_the_client_address() {
    let (address, _stop, _served) = start(Limits::default()).await;
    let answer = get(address, "/peer").await;
    assert!(
        answer.ends_with("127.0.0.1") || answer.contains("127.0.0.1:"),
        "{answer}"
    );
}

/// On shutdown the port closes at once, idle and half-sent connections are closed, a request in
/// progress finishes, and one stalled past the grace period is cut.
#[tokio::test]
async fn shutdown_closes_idle_connections_and_cuts_stalled_ones_at_the_grace_deadline() {
    let grace = Duration::from_millis(800);
    let mut limits = limits(Duration::from_secs(600), Duration::from_secs(600));
    limits.shutdown_grace = grace;
    let (address, stop, served) = start(limits).await;
    let mut half = TcpStream::connect(address).await.unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHo")
        .await
        .unwrap();
    let mut stalled = TcpStream::connect(address).await.unwrap();
    stalled
        .write_all(b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\nab")
        .await
        .unwrap();
    // The stalled request is in progress once the server has read its head; a request on a
    // third connection shows the server is past accepting the first two.
    assert!(get(address, "/healthz").await.starts_with("HTTP/1.1 200"));
    let stopping = Instant::now();
    stop.send(()).unwrap();
    assert!(read_to_close(&mut half).await.is_empty());
    tokio::time::timeout(weir_testkit::wait::DEADLINE, served)
        .await
        .expect("the server did not stop")
        .unwrap();
    assert!(
        stopping.elapsed() >= grace,
        "the stalled request was cut before the grace period"
    );
    let answer = read_to_close(&mut stalled).await;
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    assert!(
        TcpStream::connect(address).await.is_err(),
        "the port is still open"
    );
}

#[tokio::test]
async fn a_request_in_progress_at_shutdown_finishes() {
    let (address, stop, served) =
        start(limits(Duration::from_secs(600), Duration::from_secs(600))).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\nab")
        .await
        .unwrap();
    assert!(get(address, "/healthz").await.starts_with("HTTP/1.1 200"));
    stop.send(()).unwrap();
    // The port is closed while the request is still in progress.
    weir_testkit::wait::wait_for("the port to close", || async {
        TcpStream::connect(address).await.is_err().then_some(())
    })
    .await;
    stream.write_all(b"cdefghij").await.unwrap();
    let answer = String::from_utf8_lossy(&read_to_close(&mut stream).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("abcdefghij"), "{answer}");
    tokio::time::timeout(weir_testkit::wait::DEADLINE, served)
        .await
        .expect("the server did not stop")
        .unwrap();
}
