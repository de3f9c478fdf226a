//! Routing features over real loopback sockets: match rules, session affinity, mirroring.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use weir_router::{Mirror, RouteSpec, RouterConfig, SessionAffinity, Traffic, Weight};
use weir_testkit::client::{get, http1_client, send};
use weir_testkit::router::start_router;
use weir_testkit::upstream::{Behavior, TestUpstream};
use weir_testkit::wait::{no_hang, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_rules_route_to_the_canary_with_flagger_semantics() {
    no_hang(async {
        let v1 = TestUpstream::start("v1", Behavior::Normal).await;
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let mut spec = RouteSpec::weighted(v1.backend(), v2.backend(), Weight::ZERO);
        spec.matches = vec![
            "header:x-canary=insider".parse().unwrap(),
            "header:user-agent~=.*Firefox.* & cookie:beta^=y"
                .parse()
                .unwrap(),
            "query:variant=b".parse().unwrap(),
        ];
        let (addr, _handle) = start_router(spec, RouterConfig::default()).await;
        let client = http1_client();
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
        let cases: [Case<'_>; 7] = [
            ("/", &[("x-canary", "insider")], "v2"),
            ("/", &[("x-canary", "outsider")], "v1"),
            (
                "/",
                &[
                    ("user-agent", "Mozilla Firefox/120"),
                    ("cookie", "a=1; beta=yes"),
                ],
                "v2",
            ),
            // One condition of the block fails: the block does not match.
            (
                "/",
                &[("user-agent", "Mozilla Firefox/120"), ("cookie", "beta=no")],
                "v1",
            ),
            (
                "/",
                &[("user-agent", "curl/8"), ("cookie", "beta=yes")],
                "v1",
            ),
            ("/page?x=1&variant=b", &[], "v2"),
            ("/page?variant=a", &[], "v1"),
        ];
        for (path, headers, expected) in cases {
            assert_eq!(
                get(&client, addr, path, headers).await.body,
                expected,
                "{path} {headers:?}"
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_affinity_pins_clients_until_rollback() {
    no_hang(async {
        let v1 = TestUpstream::start("v1", Behavior::Normal).await;
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let mut spec = RouteSpec::weighted(v1.backend(), v2.backend(), "50".parse().unwrap());
        spec.session_affinity = Some(SessionAffinity {
            cookie_name: "weir-version".into(),
            max_age: Duration::from_secs(3600),
        });
        let (addr, handle) = start_router(spec, RouterConfig::default()).await;
        let client = http1_client();
        // Collect a client pinned to each version.
        let mut cookies = std::collections::HashMap::new();
        while cookies.len() < 2 {
            let answer = get(&client, addr, "/", &[]).await;
            let cookie = answer.headers["set-cookie"].to_str().unwrap().to_owned();
            assert_eq!(
                cookie,
                format!(
                    "weir-version={}; Max-Age=3600; Path=/; HttpOnly",
                    answer.body
                )
            );
            cookies.insert(answer.body, cookie.split(';').next().unwrap().to_owned());
        }
        for (version, cookie) in &cookies {
            for _ in 0..20 {
                let answer = get(&client, addr, "/", &[("cookie", cookie)]).await;
                assert_eq!(&answer.body, version);
                assert!(!answer.headers.contains_key("set-cookie"));
            }
        }
        // The pin survives weight changes...
        handle.set_canary_weight("1".parse().unwrap()).unwrap();
        for _ in 0..20 {
            assert_eq!(
                get(&client, addr, "/", &[("cookie", &cookies["v2"])])
                    .await
                    .body,
                "v2"
            );
        }
        // ...but not a rollback: at 0% the canary-pinned client goes back to the primary.
        handle.set_canary_weight(Weight::ZERO).unwrap();
        let answer = get(&client, addr, "/", &[("cookie", &cookies["v2"])]).await;
        assert_eq!(answer.body, "v1");
        assert!(
            answer.headers["set-cookie"]
                .to_str()
                .unwrap()
                .starts_with("weir-version=v1;")
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_copies_requests_and_counts_them_separately() {
    no_hang(async {
        let v1 = TestUpstream::start("v1", Behavior::Normal).await;
        let v2 = TestUpstream::start("v2", Behavior::Normal).await;
        let mut spec = RouteSpec::weighted(v1.backend(), v2.backend(), Weight::ZERO);
        spec.mirror = Some(Mirror {
            weight: Weight::FULL,
        });
        let (addr, handle) = start_router(spec, RouterConfig::default()).await;
        let client = http1_client();
        for i in 0..20 {
            let body = Bytes::from(vec![b'x'; 1000 + i]);
            let request = Request::post(format!("http://{addr}/"))
                .body(Full::new(body))
                .unwrap();
            let answer = send(&client, request).await.unwrap();
            assert_eq!(
                (answer.status, answer.body.as_str()),
                (StatusCode::OK, "v1")
            );
        }
        // Mirror copies finish asynchronously; wait until all 20 are counted.
        let mirrored = wait_for("the 20 mirror copies counted", || async {
            let snapshot = handle.metrics();
            snapshot
                .get("v2", Traffic::Mirror)
                .filter(|series| series.requests >= 20)
                .cloned()
        })
        .await;
        assert_eq!(mirrored.requests, 20);
        assert_eq!(mirrored.errors, 0);
        assert_eq!(v2.requests(), 20);
        let expected_bytes: u64 = (0..20).map(|i| 1000 + i).sum();
        assert_eq!(
            v2.body_bytes.load(std::sync::atomic::Ordering::SeqCst),
            expected_bytes
        );
        assert_eq!(
            v1.body_bytes.load(std::sync::atomic::Ordering::SeqCst),
            expected_bytes
        );
        let snapshot = handle.metrics();
        assert_eq!(snapshot.get("v1", Traffic::Served).unwrap().requests, 20);
        // Mirror traffic is not counted as served canary traffic.
        assert_eq!(
            snapshot
                .get("v2", Traffic::Served)
                .map_or(0, |s| s.requests),
            0
        );
        assert_eq!(snapshot.mirror_dropped, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_mirror_never_slows_the_primary() {
    no_hang(async {
        let v1 = TestUpstream::start("v1", Behavior::Normal).await;
        let stuck = TestUpstream::start("v2", Behavior::Hang).await;
        let mut spec = RouteSpec::weighted(v1.backend(), stuck.backend(), Weight::ZERO);
        spec.mirror = Some(Mirror {
            weight: Weight::FULL,
        });
        let config = RouterConfig {
            mirror_concurrency: 2,
            ..RouterConfig::default()
        };
        let (addr, handle) = start_router(spec, config).await;
        let client = http1_client();
        // Every request is answered by the primary although no mirror copy ever completes: the
        // first two copies occupy the mirror slots and the rest are dropped, not queued.
        for _ in 0..50 {
            let request = Request::post(format!("http://{addr}/"))
                .body(Full::new(Bytes::from("payload")))
                .unwrap();
            let answer = send(&client, request).await.unwrap();
            assert_eq!(answer.body, "v1");
        }
        assert_eq!(handle.mirror_dropped(), 48);
        assert_eq!(
            handle
                .metrics()
                .get("v1", Traffic::Served)
                .unwrap()
                .requests,
            50
        );
    })
    .await;
}
