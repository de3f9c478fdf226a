//! The proxying path over real loopback sockets: protocols, headers, streaming, failures,
//! limits and the admin endpoint.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_router::{Backend, RouteSpec, RouterConfig, Traffic, Weight};
use weir_testkit::client::{get, http1_client, http2_client};
use weir_testkit::fixtures::ClosedPort;
use weir_testkit::router::{start_router, weight};
use weir_testkit::upstream::{Behavior, ChannelBody, TestUpstream};
use weir_testkit::wait::{DEADLINE, no_hang};

async fn two_versions(canary_percent: &str) -> (TestUpstream, TestUpstream, RouteSpec) {
    let v1 = TestUpstream::start("v1", Behavior::Normal).await;
    let v2 = TestUpstream::start("v2", Behavior::Normal).await;
    let spec = RouteSpec::weighted(v1.backend(), v2.backend(), weight(canary_percent));
    (v1, v2, spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_keep_alive_and_h2c_reach_the_primary() {
    no_hang(async {
        let (v1, _v2, spec) = two_versions("0").await;
        let (addr, handle) = start_router(spec, RouterConfig::default()).await;
        for client in [http1_client(), http2_client()] {
            for _ in 0..5 {
                let answer = get(&client, addr, "/", &[]).await;
                assert_eq!(answer.status, StatusCode::OK);
                assert_eq!(answer.body, "v1");
                assert_eq!(answer.headers["x-version"], "v1");
            }
        }
        assert_eq!(v1.requests(), 10);
        let served = handle.metrics();
        let v1_series = served.get("v1", Traffic::Served).unwrap();
        assert_eq!((v1_series.requests, v1_series.errors), (10, 0));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_headers_are_dropped_and_forwarded_for_is_appended() {
    no_hang(async {
        let (_v1, _v2, spec) = two_versions("0").await;
        let (addr, _handle) = start_router(spec, RouterConfig::default()).await;
        let answer = get(
            &http1_client(),
            addr,
            "/headers",
            &[
                ("connection", "x-secret"),
                ("x-secret", "1"),
                ("keep-alive", "timeout=5"),
                ("proxy-authorization", "Basic eDp5"),
                ("te", "trailers"),
                ("x-forwarded-for", "203.0.113.9"),
                ("x-end-to-end", "kept"),
            ],
        )
        .await;
        let seen = answer.body.to_lowercase();
        for dropped in ["x-secret", "keep-alive", "proxy-authorization", "\nte:"] {
            assert!(
                !seen.contains(dropped),
                "{dropped} reached the upstream:\n{seen}"
            );
        }
        assert!(seen.contains("x-end-to-end: kept"), "{seen}");
        assert!(
            seen.contains("x-forwarded-for: 203.0.113.9, 127.0.0.1"),
            "{seen}"
        );
        assert!(seen.contains("x-forwarded-proto: http"), "{seen}");
        assert!(seen.contains(&format!("host: {addr}")), "{seen}");

        // HTTP/2 requests carry :authority instead of Host; the upstream still gets a Host.
        let answer = get(&http2_client(), addr, "/headers", &[]).await;
        assert!(
            answer.body.contains(&format!("host: {addr}")),
            "{}",
            answer.body
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_stream_in_both_directions() {
    no_hang(async {
        let (v1, _v2, spec) = two_versions("0").await;
        let (addr, _handle) = start_router(spec, RouterConfig::default()).await;

        // Response: the client sees the first chunk while the upstream still holds the second.
        // A buffering proxy would deadlock here (and the guard would fail the test).
        let client = http1_client();
        let response = client
            .request(
                Request::get(format!("http://{addr}/stream"))
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
            .await
            .unwrap();
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "first|");
        v1.release.notify_one();
        let rest = body.collect().await.unwrap().to_bytes();
        assert_eq!(rest, "second");

        // Request: the upstream sees the first chunk while the client still holds the second.
        let upload_client: Client<_, ChannelBody> =
            Client::builder(TokioExecutor::new()).build_http();
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let request = Request::post(format!("http://{addr}/upload"))
            .body(ChannelBody(rx))
            .unwrap();
        let pending = tokio::spawn(async move { upload_client.request(request).await });
        tx.send(Bytes::from(vec![b'a'; 1000])).await.unwrap();
        v1.first_chunk.notified().await;
        tx.send(Bytes::from(vec![b'b'; 500])).await.unwrap();
        drop(tx);
        let response = pending.await.unwrap().unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "1500");

        // A large body is echoed intact through the router (over HTTP/2 as well).
        let payload: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        for client in [http1_client(), http2_client()] {
            let request = Request::post(format!("http://{addr}/echo"))
                .body(Full::new(Bytes::from(payload.clone())))
                .unwrap();
            let response = client.request(request).await.unwrap();
            let echoed = response.into_body().collect().await.unwrap().to_bytes();
            assert!(echoed == payload[..], "echoed body differs");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_upstream_gets_a_502_counted_as_that_versions_error() {
    no_hang(async {
        let v1 = TestUpstream::start("v1", Behavior::Normal).await;
        // Nothing listens there, and nothing can start to while the test holds it.
        let closed = ClosedPort::new();
        let dead = Backend::new("v2", vec![closed.address().to_string().parse().unwrap()]);
        let spec = RouteSpec::weighted(v1.backend(), dead, Weight::FULL);
        let (addr, handle) = start_router(spec, RouterConfig::default()).await;
        let client = http1_client();
        for _ in 0..3 {
            let answer = get(&client, addr, "/", &[]).await;
            assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
        }
        // Upstream 5xx are errors too; 4xx are not.
        handle.set_canary_weight(Weight::ZERO).unwrap();
        assert_eq!(
            get(&client, addr, "/status/503", &[]).await.status,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            get(&client, addr, "/status/404", &[]).await.status,
            StatusCode::NOT_FOUND
        );
        let metrics = handle.metrics();
        let v2 = metrics.get("v2", Traffic::Served).unwrap();
        assert_eq!((v2.requests, v2.errors), (3, 3));
        let v1_series = metrics.get("v1", Traffic::Served).unwrap();
        assert_eq!((v1_series.requests, v1_series.errors), (2, 1));
        assert_eq!(v1.requests(), 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upstream_gets_a_504_after_the_response_timeout() {
    no_hang(async {
        let (_v1, _v2, spec) = two_versions("0").await;
        let config = RouterConfig {
            response_timeout: Duration::from_millis(300),
            ..RouterConfig::default()
        };
        let (addr, handle) = start_router(spec, config).await;
        let answer = get(&http1_client(), addr, "/hang", &[]).await;
        assert_eq!(answer.status, StatusCode::GATEWAY_TIMEOUT);
        let v1 = handle.metrics();
        assert_eq!(v1.get("v1", Traffic::Served).unwrap().errors, 1);
    })
    .await;
}

/// The header-read timeout applies only while a request head is awaited: a response streaming
/// for longer than it is not cut off, a slow upstream still gets its 504 at the response
/// timeout, and the client connection stays usable after both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_apply_to_their_own_phase_only() {
    no_hang(async {
        let (v1, _v2, spec) = two_versions("0").await;
        // Bounds long enough that a stalled test process cannot trip them where the test
        // expects an answer (a request head sent at once, an upstream answering at once).
        let config = RouterConfig {
            header_read_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(2),
            ..RouterConfig::default()
        };
        let (addr, handle) = start_router(spec, config).await;
        let client = http1_client();
        let response = client
            .request(
                Request::get(format!("http://{addr}/stream"))
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
            .await
            .unwrap();
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "first|");
        // Well past both timeouts, in the middle of the body. Not synchronisation: the time
        // itself is under test, and a slow machine only makes it longer.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        v1.release.notify_one();
        assert_eq!(body.collect().await.unwrap().to_bytes(), "second");
        // The same keep-alive connection: a hanging upstream gets a 504, the next request works.
        assert_eq!(
            get(&client, addr, "/hang", &[]).await.status,
            StatusCode::GATEWAY_TIMEOUT
        );
        assert_eq!(get(&client, addr, "/", &[]).await.body, "v1");
        let v1_series = handle.metrics();
        let v1_series = v1_series.get("v1", Traffic::Served).unwrap();
        assert_eq!((v1_series.requests, v1_series.errors), (3, 1));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_oversized_clients_are_cut_off() {
    no_hang(async {
        let (_v1, _v2, spec) = two_versions("0").await;
        // Long enough that a stalled test process still sends its well-formed heads in time.
        let config = RouterConfig {
            header_read_timeout: Duration::from_secs(1),
            max_header_bytes: 16 * 1024,
            ..RouterConfig::default()
        };
        let (addr, _handle) = start_router(spec, config).await;

        // Slowloris: half a request head, then silence. The router closes the connection
        // (reading returns EOF or a reset) instead of waiting forever.
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            .await
            .unwrap();
        let mut buf = Vec::new();
        let _ = slow.read_to_end(&mut buf).await;
        let text = String::from_utf8_lossy(&buf);
        assert!(!text.contains("200 OK"), "{text}");

        // A silent connection is closed too.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut buf = Vec::new();
        let _ = silent.read_to_end(&mut buf).await;
        assert!(buf.is_empty());

        // An oversized head is refused with 431.
        let mut big = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        );
        let _ = big.write_all(head.as_bytes()).await;
        let mut buf = Vec::new();
        let _ = big.read_to_end(&mut buf).await;
        let text = String::from_utf8_lossy(&buf);
        assert!(text.starts_with("HTTP/1.1 431"), "{text}");

        // Malformed garbage gets a 400 and the router keeps serving others.
        let mut garbage = TcpStream::connect(addr).await.unwrap();
        garbage
            .write_all(b"\x00\x01NOT HTTP\r\n\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        let _ = garbage.read_to_end(&mut buf).await;
        assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 400"));
        assert_eq!(
            get(&http1_client(), addr, "/", &[]).await.status,
            StatusCode::OK
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limit_holds_excess_clients_without_failing_served_ones() {
    no_hang(async {
        let (_v1, _v2, spec) = two_versions("0").await;
        let config = RouterConfig {
            max_connections: 2,
            // The idle connections below must hold their slots for as long as the test runs,
            // however slowly: they are never closed for not sending a request.
            header_read_timeout: DEADLINE,
            ..RouterConfig::default()
        };
        let (addr, _handle) = start_router(spec, config).await;
        // Two idle connections take both slots...
        let idle_a = TcpStream::connect(addr).await.unwrap();
        let idle_b = TcpStream::connect(addr).await.unwrap();
        // ...a third client waits in the backlog and is served as soon as one slot frees.
        let waiting =
            tokio::spawn(async move { get(&http1_client(), addr, "/", &[]).await.status });
        // While both slots are held the third request is not served. (If the limit were broken it
        // would be answered within milliseconds; a slow machine can only make this pass, never
        // fail wrongly.)
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "served past the connection limit");
        drop(idle_a);
        assert_eq!(waiting.await.unwrap(), StatusCode::OK);
        drop(idle_b);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_spreads_over_a_versions_addresses() {
    no_hang(async {
        let a = TestUpstream::start("v1", Behavior::Normal).await;
        let b = TestUpstream::start("v1", Behavior::Normal).await;
        let canary = TestUpstream::start("v2", Behavior::Normal).await;
        let primary = Backend::new("v1", vec![a.upstream(), b.upstream()]);
        let (addr, _handle) = start_router(
            RouteSpec::weighted(primary, canary.backend(), Weight::ZERO),
            RouterConfig::default(),
        )
        .await;
        let client = http1_client();
        for _ in 0..10 {
            assert_eq!(get(&client, addr, "/", &[]).await.body, "v1");
        }
        assert_eq!((a.requests(), b.requests(), canary.requests()), (5, 5, 0));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoint_exposes_prometheus_text() {
    no_hang(async {
        let (_v1, _v2, spec) = two_versions("100").await;
        let (addr, handle) = start_router(spec, RouterConfig::default()).await;
        let client = http1_client();
        get(&client, addr, "/", &[]).await;
        get(&client, addr, "/status/500", &[]).await;
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin_addr = admin.local_addr().unwrap();
        tokio::spawn(weir_router::serve_admin(
            admin,
            vec![handle],
            std::future::pending(),
        ));
        let answer = get(&client, admin_addr, "/metrics", &[]).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(
            answer.headers["content-type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let labels = "listener=\"test\",version=\"v2\",traffic=\"served\"";
        assert!(
            answer
                .body
                .contains(&format!("weir_router_requests_total{{{labels}}} 2\n")),
            "{}",
            answer.body
        );
        assert!(
            answer
                .body
                .contains(&format!("weir_router_errors_total{{{labels}}} 1\n"))
        );
        assert!(answer.body.contains(&format!(
            "weir_router_request_duration_seconds_count{{{labels}}} 2\n"
        )));
        assert!(
            answer
                .body
                .contains("weir_router_canary_weight_ratio{listener=\"test\"} 1\n")
        );
        assert_eq!(get(&client, admin_addr, "/healthz", &[]).await.body, "ok\n");
        assert_eq!(
            get(&client, admin_addr, "/nope", &[]).await.status,
            StatusCode::NOT_FOUND
        );
    })
    .await;
}
