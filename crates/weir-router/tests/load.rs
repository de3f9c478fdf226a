//! Load over real loopback sockets: zero failures while the route table changes, and the
//! observed split over real requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::StatusCode;
use weir_router::{RouteSpec, RouterConfig, Traffic, Weight};
use weir_testkit::client::{http1_client, http2_client, send};
use weir_testkit::router::{start_router, weight};
use weir_testkit::upstream::{Behavior, TestUpstream};
use weir_testkit::wait::{no_hang, no_hang_within, wait_for};

/// Runs `total` GET requests from `clients` concurrent tasks (half HTTP/1.1 keep-alive, half
/// HTTP/2), counting answers per body. Returns (v1 answers, v2 answers, failures).
async fn drive(
    addr: SocketAddr,
    total: u64,
    clients: usize,
    completed: Arc<AtomicU64>,
) -> (u64, u64, Vec<String>) {
    let issued = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..clients {
        let client = if i % 2 == 0 {
            http1_client()
        } else {
            http2_client()
        };
        let (issued, completed) = (issued.clone(), completed.clone());
        tasks.push(tokio::spawn(async move {
            let (mut v1, mut v2, mut failures) = (0u64, 0u64, Vec::new());
            while issued.fetch_add(1, Ordering::Relaxed) < total {
                let request = http::Request::get(format!("http://{addr}/"))
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .unwrap();
                match send(&client, request).await {
                    Ok(answer) if answer.status == StatusCode::OK && answer.body == "v1" => v1 += 1,
                    Ok(answer) if answer.status == StatusCode::OK && answer.body == "v2" => v2 += 1,
                    Ok(answer) => failures.push(format!("{} {}", answer.status, answer.body)),
                    Err(error) => failures.push(error),
                }
                completed.fetch_add(1, Ordering::Relaxed);
            }
            (v1, v2, failures)
        }));
    }
    let (mut v1, mut v2, mut failures) = (0, 0, Vec::new());
    for task in tasks {
        let (a, b, f) = task.await.unwrap();
        v1 += a;
        v2 += b;
        failures.extend(f);
    }
    (v1, v2, failures)
}

/// Sends `count` `GET /` requests over one raw HTTP/1.1 connection, pipelined in batches of
/// `batch`, and returns how many answers had each body (`v1`, `v2`) and the other answers. A
/// deliberately minimal client: enough for responses with a `Content-Length`, cheap enough that
/// the router, not the client, is what a load test exercises.
async fn pipelined_gets(addr: SocketAddr, count: u64, batch: u64) -> (u64, u64, Vec<String>) {
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

/// 20,000 requests while the table changes 100 times (weights, role swaps, rule changes,
/// whole-table replacements): not one request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_changes_under_load_fail_zero_requests() {
    no_hang(async {
        let v1 = TestUpstream::start("v1", Behavior::Normal).await;
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let spec = RouteSpec::weighted(v1.backend(), v2.backend(), weight("10"));
        let (addr, handle) = start_router(spec.clone(), RouterConfig::default()).await;
        const TOTAL: u64 = 20_000;
        const CHANGES: u64 = 100;
        let completed = Arc::new(AtomicU64::new(0));

        let changer = {
            let (handle, completed, spec) = (handle.clone(), completed.clone(), spec.clone());
            tokio::spawn(async move {
                let mut changes = 0;
                for i in 0..CHANGES {
                    // Spread the changes over the first three quarters of the load, so every
                    // one of them happens while requests are in flight.
                    let due = (i + 1) * (TOTAL * 3 / 4) / CHANGES;
                    wait_for("the load to reach the next change", || async {
                        (completed.load(Ordering::Relaxed) >= due).then_some(())
                    })
                    .await;
                    let result = match i % 4 {
                        0 => handle.set_canary_weight(
                            Weight::from_basis_points(((i * 997) % 10_001) as u32).unwrap(),
                        ),
                        1 => handle.swap_roles(weight("5")),
                        2 => {
                            handle.update(|s| s.matches = vec!["header:x-never=1".parse().unwrap()])
                        }
                        _ => {
                            let mut fresh = spec.clone();
                            fresh.canary_weight =
                                Weight::from_basis_points((i * 50) as u32).unwrap();
                            handle.replace(fresh)
                        }
                    };
                    result.unwrap();
                    changes += 1;
                }
                changes
            })
        };
        let (served_v1, served_v2, failures) = drive(addr, TOTAL, 32, completed).await;
        let changes = changer.await.unwrap();
        assert_eq!(changes, CHANGES);
        assert!(
            failures.is_empty(),
            "{} failures, first: {:?}",
            failures.len(),
            failures.first()
        );
        assert_eq!(served_v1 + served_v2, TOTAL);
        assert!(served_v1 > 0 && served_v2 > 0);
        let metrics = handle.metrics();
        let counted: u64 = metrics
            .versions
            .iter()
            .filter(|v| v.traffic == Traffic::Served)
            .map(|v| v.requests)
            .sum();
        let errors: u64 = metrics.versions.iter().map(|v| v.errors).sum();
        assert_eq!((counted, errors), (TOTAL, 0));
    })
    .await;
}

/// 100,000 real requests at a 10% canary weight: the observed split is within +-0.5 percentage
/// points (about 5.3 standard deviations at this sample size). The requests come from 16
/// keep-alive connections of a minimal pipelining client, so the time goes to the router. (About
/// 25 s in a debug build on a busy 2-core machine; the hang guard is set far above that.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observed_split_over_100k_real_requests_is_within_half_a_point() {
    no_hang_within(Duration::from_secs(600), async {
        let v1 = TestUpstream::start("v1", Behavior::Normal).await;
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let spec = RouteSpec::weighted(v1.backend(), v2.backend(), weight("10"));
        let (addr, handle) = start_router(spec, RouterConfig::default()).await;
        const TOTAL: u64 = 100_000;
        const CONNECTIONS: u64 = 16;
        let clients: Vec<_> = (0..CONNECTIONS)
            .map(|_| tokio::spawn(pipelined_gets(addr, TOTAL / CONNECTIONS, 32)))
            .collect();
        let (mut served_v1, mut served_v2, mut failures) = (0, 0, Vec::new());
        for client in clients {
            let (a, b, f) = client.await.unwrap();
            served_v1 += a;
            served_v2 += b;
            failures.extend(f);
        }
        assert!(
            failures.is_empty(),
            "{} failures, first: {:?}",
            failures.len(),
            failures.first()
        );
        assert_eq!(served_v1 + served_v2, TOTAL);
        let canary_share = served_v2 as f64 / TOTAL as f64;
        assert!(
            (canary_share - 0.10).abs() <= 0.005,
            "canary share {canary_share}"
        );
        // The router's own counters agree with what the clients saw.
        let metrics = handle.metrics();
        assert_eq!(
            metrics.get("v2", Traffic::Served).unwrap().requests,
            served_v2
        );
        assert_eq!(
            metrics.get("v1", Traffic::Served).unwrap().requests,
            served_v1
        );
        assert_eq!((v1.requests(), v2.requests()), (served_v1, served_v2));
    })
    .await;
}
