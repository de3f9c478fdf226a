//! Upstream connection reuse and the thread-per-core mode, over real loopback sockets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weir_router::{Backend, RouteSpec, Router, RouterConfig, Traffic, Weight};
use weir_testkit::client::{get, http1_client, http2_client, send};
use weir_testkit::router::start_router;
use weir_testkit::upstream::{Behavior, TestUpstream};
use weir_testkit::wait::no_hang;

/// Sequential exchanges of every body shape (sized, empty, 204, HEAD, streamed echo) reuse one
/// upstream connection: each goes back to the pool once its response has been read to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upstream_connection_serves_sequential_requests() {
    no_hang(async {
        let v1 = TestUpstream::start("v1", Behavior::Normal).await;
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let spec = RouteSpec::weighted(v1.backend(), v2.backend(), Weight::ZERO);
        let (addr, handle) = start_router(spec, RouterConfig::default()).await;
        let client = http1_client();
        for round in 0..5 {
            assert_eq!(get(&client, addr, "/", &[]).await.body, "v1");
            let no_content = get(&client, addr, "/status/204", &[]).await;
            assert_eq!(no_content.status, StatusCode::NO_CONTENT);
            assert_eq!(get(&client, addr, "/status/404", &[]).await.body, "v1");
            let head = Request::builder()
                .method(Method::HEAD)
                .uri(format!("http://{addr}/"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            assert_eq!(send(&client, head).await.unwrap().status, StatusCode::OK);
            let payload = format!("round {round} ").repeat(1000);
            let echo = Request::post(format!("http://{addr}/echo"))
                .body(Full::new(Bytes::from(payload.clone())))
                .unwrap();
            assert_eq!(send(&client, echo).await.unwrap().body, payload);
        }
        assert_eq!(v1.requests(), 25);
        assert_eq!(handle.upstream_connections_opened(), 1);
    })
    .await;
}

/// An idle upstream connection older than the idle timeout is not reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_upstream_connections_expire() {
    no_hang(async {
        let v1 = TestUpstream::start("v1", Behavior::Normal).await;
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let spec = RouteSpec::weighted(v1.backend(), v2.backend(), Weight::ZERO);
        // Long enough that two requests sent back to back always fall within it, however
        // loaded the machine.
        let config = RouterConfig {
            upstream_idle_timeout: Duration::from_secs(5),
            ..RouterConfig::default()
        };
        let (addr, handle) = start_router(spec, config).await;
        let client = http1_client();
        assert_eq!(get(&client, addr, "/", &[]).await.body, "v1");
        assert_eq!(get(&client, addr, "/", &[]).await.body, "v1");
        assert_eq!(handle.upstream_connections_opened(), 1);
        // Not synchronisation: the connection must sit idle past its timeout; a slow machine
        // only makes it sit longer.
        tokio::time::sleep(Duration::from_millis(6_000)).await;
        assert_eq!(get(&client, addr, "/", &[]).await.body, "v1");
        assert_eq!(handle.upstream_connections_opened(), 2);
    })
    .await;
}

/// An upstream that answers one request per connection and then closes it, although it
/// announced keep-alive: the router notices the pooled connection is gone and sends the next
/// request on a new one; no client sees an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_closing_idle_connections_causes_no_errors() {
    no_hang(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = listener.local_addr().unwrap();
        // Each connection the upstream has closed, once it has.
        let (closed_tx, mut closed) = tokio::sync::mpsc::unbounded_channel::<()>();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let closed_tx = closed_tx.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nonce";
                    let _ = stream.write_all(answer).await;
                    // Dropping the stream closes the connection the router pooled.
                    drop(stream);
                    let _ = closed_tx.send(());
                });
            }
        });
        let once = Backend::new("v1", vec![format!("{upstream}").parse().unwrap()]);
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let spec = RouteSpec::weighted(once, v2.backend(), Weight::ZERO);
        let (addr, handle) = start_router(spec, RouterConfig::default()).await;
        let client = http1_client();
        for _ in 0..5 {
            let answer = get(&client, addr, "/", &[]).await;
            assert_eq!(
                (answer.status, answer.body.as_str()),
                (StatusCode::OK, "once")
            );
            // The next request goes out once the upstream has closed this connection (a close
            // racing the next request is another case: a request that may have been sent is
            // never re-sent, by design).
            closed.recv().await.unwrap();
        }
        let v1 = handle.metrics();
        let v1 = v1.get("v1", Traffic::Served).unwrap();
        assert_eq!((v1.requests, v1.errors), (5, 0));
        assert_eq!(handle.upstream_connections_opened(), 5);
    })
    .await;
}

/// Thread-per-core mode: several threads, one port, one route table and one set of metrics;
/// route changes reach every thread; `stop` ends the threads.
#[test]
fn per_core_router_serves_from_several_threads_and_stops() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (v1, v2) = runtime.block_on(async {
        (
            TestUpstream::start("v1", Behavior::Normal).await,
            TestUpstream::start("v2", Behavior::Normal).await,
        )
    });
    let spec = RouteSpec::weighted(v1.backend(), v2.backend(), Weight::ZERO);
    let router = Router::spawn_per_core(
        "cores",
        "127.0.0.1:0".parse().unwrap(),
        spec,
        RouterConfig::default(),
        3,
    )
    .unwrap();
    let addr = router.local_addr();
    let handle = router.handle();
    runtime.block_on(no_hang(async {
        // Separate clients mean separate connections, spread over the threads by the kernel.
        for _ in 0..20 {
            assert_eq!(get(&http1_client(), addr, "/", &[]).await.body, "v1");
        }
        handle.set_canary_weight(Weight::FULL).unwrap();
        for _ in 0..20 {
            assert_eq!(get(&http1_client(), addr, "/", &[]).await.body, "v2");
        }
        let h2 = http2_client();
        assert_eq!(get(&h2, addr, "/", &[]).await.body, "v2");
    }));
    let metrics = handle.metrics();
    assert_eq!(metrics.get("v1", Traffic::Served).unwrap().requests, 20);
    assert_eq!(metrics.get("v2", Traffic::Served).unwrap().requests, 21);
    router.stop();
    // Nothing accepts on the port any more.
    let refused = runtime.block_on(tokio::net::TcpStream::connect(addr));
    assert!(refused.is_err());
}

/// Refuses connections to one address and counts every question it is asked.
#[derive(Debug)]
struct RefuseOne {
    refused: std::net::SocketAddr,
    asked: std::sync::atomic::AtomicUsize,
}

impl weir_router::ConnectGuard for RefuseOne {
    fn check(&self, host: &str, address: std::net::SocketAddr) -> Result<(), String> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(host, "127.0.0.1");
        if address == self.refused {
            Err(format!("{address} is refused"))
        } else {
            Ok(())
        }
    }
}

/// The connect guard is asked once per new upstream connection, not per request, and an
/// upstream it refuses is never connected to: its requests get a 502 saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_guard_is_asked_per_new_connection_and_refused_upstreams_are_never_reached() {
    no_hang(async {
        let v1 = TestUpstream::start("v1", Behavior::Normal).await;
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let refused: std::net::SocketAddr = v2.upstream().authority().as_str().parse().unwrap();
        let guard = std::sync::Arc::new(RefuseOne {
            refused,
            asked: std::sync::atomic::AtomicUsize::new(0),
        });
        let config = RouterConfig {
            connect_guard: Some(guard.clone()),
            ..RouterConfig::default()
        };
        let spec = RouteSpec::weighted(v1.backend(), v2.backend(), Weight::ZERO);
        let (addr, handle) = start_router(spec, config).await;
        let client = http1_client();
        for _ in 0..25 {
            assert_eq!(get(&client, addr, "/", &[]).await.body, "v1");
        }
        assert_eq!(handle.upstream_connections_opened(), 1);
        assert_eq!(guard.asked.load(std::sync::atomic::Ordering::SeqCst), 1);

        let all_to_v2 = RouteSpec::weighted(v1.backend(), v2.backend(), Weight::FULL);
        handle.replace(all_to_v2).unwrap();
        let answer = get(&client, addr, "/", &[]).await;
        assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
        assert_eq!(
            answer.body,
            "weir-router: upstream refused by weir's outbound policy\n"
        );
        assert_eq!(v2.requests(), 0);
    })
    .await;
}
