//! The load generator against real sample apps (and weir's router) over loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use weir_router::{Backend, RouteSpec, Router, RouterConfig, Upstream, Weight};
use weir_testkit::fixtures::{ClosedPort, RunningApp};
use weir_testkit::wait::{no_hang, wait_for};
use weir_tools::load::{LoadConfig, LoadError, LoadGenerator, LoadSummary, parse_header, run};

fn assert_counts_add_up(summary: &LoadSummary) {
    assert!(summary.finished, "{summary}");
    assert_eq!(summary.in_flight, 0, "{summary}");
    assert_eq!(
        summary.scheduled,
        summary.sent + summary.dropped,
        "{summary}"
    );
    assert_eq!(
        summary.sent,
        summary.ok + summary.status.total() + summary.connection_errors + summary.timeouts,
        "{summary}"
    );
    assert_eq!(
        summary.failed,
        summary.status.total() + summary.connection_errors + summary.timeouts,
        "{summary}"
    );
    let responses: u64 = summary
        .by_version
        .values()
        .map(|counts| counts.requests)
        .sum();
    assert_eq!(
        responses + summary.unversioned,
        summary.latency.count,
        "{summary}"
    );
    assert_eq!(summary.latency.count, summary.ok + summary.status.total());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_add_up_against_a_flaky_app() {
    no_hang(async {
        let app = RunningApp::start("v7", |config| {
            config.error_percent = 30.0;
            config.seed = 5;
        })
        .await;
        let mut config = LoadConfig::new(app.url("/load"), 400.0, Some(Duration::from_millis(500)));
        config.concurrency = 64;
        config.headers = vec![(
            HeaderName::from_static("x-test"),
            HeaderValue::from_static("yes"),
        )];
        let summary = run(config).await.unwrap();
        assert_counts_add_up(&summary);
        // 400 req/s for 0.5 s: requests due at 0, 2.5 ms, ..., 497.5 ms.
        assert_eq!(summary.scheduled, 200, "{summary}");
        assert_eq!(summary.connection_errors, 0, "{summary}");
        assert_eq!(summary.timeouts, 0, "{summary}");
        // The app saw exactly the requests that got a response, and failed the 5xx ones.
        assert_eq!(app.stats.requests(), summary.ok + summary.status.total());
        assert_eq!(app.stats.injected_errors(), summary.status.server_error);
        assert!(summary.status.server_error > 0, "{summary}");
        assert!(summary.ok > 0, "{summary}");
        let v7 = summary.by_version["v7"];
        assert_eq!(summary.by_version.len(), 1, "{summary}");
        assert_eq!(v7.requests, summary.ok + summary.status.total());
        assert_eq!(v7.ok, summary.ok);
        assert_eq!(v7.failed, summary.status.server_error);
        assert!(summary.latency.p50_ms <= summary.latency.p90_ms);
        assert!(summary.latency.p90_ms <= summary.latency.p99_ms);
        assert!(summary.latency.p99_ms <= summary.latency.max_ms);
        assert!(summary.latency.max_ms > 0.0);
        app.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_version_counts_through_the_router() {
    no_hang(async {
        let v1 = RunningApp::start("v1", |_| {}).await;
        let v2 = RunningApp::start("v2", |_| {}).await;
        let upstream = |app: &RunningApp| -> Upstream { app.addr.to_string().parse().unwrap() };
        let spec = RouteSpec::weighted(
            Backend::new("primary", vec![upstream(&v1)]),
            Backend::new("canary", vec![upstream(&v2)]),
            Weight::from_basis_points(5_000).unwrap(),
        );
        let router = Router::bind(
            "test",
            "127.0.0.1:0".parse().unwrap(),
            spec,
            RouterConfig::default(),
        )
        .await
        .unwrap();
        let addr = router.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(router.serve(async {
            let _ = stopped.await;
        }));

        let config = LoadConfig::new(
            format!("http://{addr}/"),
            1_000.0,
            Some(Duration::from_millis(400)),
        );
        let summary = run(config).await.unwrap();
        assert_counts_add_up(&summary);
        assert_eq!(summary.scheduled, 400, "{summary}");
        assert_eq!(summary.ok + summary.dropped, 400, "{summary}");
        let (c1, c2) = (summary.by_version["v1"], summary.by_version["v2"]);
        assert_eq!(c1.requests, v1.stats.requests(), "{summary}");
        assert_eq!(c2.requests, v2.stats.requests(), "{summary}");
        assert_eq!(c1.requests + c2.requests, summary.ok, "{summary}");
        // A 50% split of ~400 requests: both versions served some (5 sigma is about 50).
        assert!(c1.requests > 0 && c2.requests > 0, "{summary}");

        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(json["by_version"]["v1"]["requests"], c1.requests);
        assert_eq!(json["by_version"]["v2"]["ok"], c2.ok);

        let _ = stop.send(());
        serving.await.unwrap();
        v1.stop().await;
        v2.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_json_shape() {
    no_hang(async {
        let app = RunningApp::start("json", |_| {}).await;
        let summary = run(LoadConfig::new(
            app.url("/"),
            100.0,
            Some(Duration::from_millis(100)),
        ))
        .await
        .unwrap();
        let json = serde_json::to_value(&summary).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = vec![
            "target",
            "rate",
            "duration_secs",
            "concurrency",
            "finished",
            "elapsed_secs",
            "achieved_rate",
            "scheduled",
            "sent",
            "dropped",
            "in_flight",
            "ok",
            "failed",
            "status",
            "connection_errors",
            "timeouts",
            "latency",
            "by_version",
            "unversioned",
            "error_messages",
        ];
        let mut keys_sorted = keys.clone();
        keys_sorted.sort_unstable();
        expected.sort_unstable();
        assert_eq!(keys_sorted, expected);
        assert_eq!(json["scheduled"], 10);
        assert_eq!(json["finished"], true);
        assert_eq!(json["duration_secs"], 0.1);
        assert_eq!(json["target"], app.url("/"));
        let status: Vec<&String> = json["status"].as_object().unwrap().keys().collect();
        assert_eq!(status, ["1xx", "3xx", "4xx", "5xx"]);
        for key in ["count", "mean_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms"] {
            assert!(json["latency"][key].is_number(), "{key}: {json}");
        }
        assert_eq!(json["by_version"]["json"]["requests"], json["ok"]);
        let text = summary.to_string();
        assert!(text.contains("version json:"), "{text}");
        assert!(text.contains("latency: p50"), "{text}");
        app.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_drops_instead_of_delaying_the_schedule() {
    no_hang(async {
        // Every request takes at least 100 ms and only one may be in flight, so at most a
        // handful of the 50 requests due in 0.5 s can be sent; the rest must be dropped, and
        // the schedule must still count all 50.
        let app = RunningApp::start("slow", |config| {
            config.latency = Duration::from_millis(100);
        })
        .await;
        let mut config = LoadConfig::new(app.url("/"), 100.0, Some(Duration::from_millis(500)));
        config.concurrency = 1;
        let summary = run(config).await.unwrap();
        assert_counts_add_up(&summary);
        assert_eq!(summary.scheduled, 50, "{summary}");
        assert!(summary.dropped > 0, "{summary}");
        assert!(summary.sent < 50, "{summary}");
        assert!(summary.latency.p50_ms >= 100.0, "{summary}");
        app.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_responses_count_as_timeouts() {
    no_hang(async {
        let app = RunningApp::start("slow", |config| {
            config.latency = Duration::from_millis(400);
        })
        .await;
        let mut config = LoadConfig::new(app.url("/"), 50.0, Some(Duration::from_millis(100)));
        config.timeout = Duration::from_millis(50);
        let summary = run(config).await.unwrap();
        assert_counts_add_up(&summary);
        assert_eq!(summary.scheduled, 5, "{summary}");
        assert_eq!(summary.timeouts, summary.sent, "{summary}");
        assert_eq!(summary.ok, 0, "{summary}");
        assert!(summary.to_string().contains("timeouts"));
        app.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_target_gives_connection_errors() {
    no_hang(async {
        // Nothing listens there, and nothing can start to while the test holds it.
        let closed = ClosedPort::new();
        let config = LoadConfig::new(
            format!("http://{}/", closed.address()),
            100.0,
            Some(Duration::from_millis(100)),
        );
        let summary = run(config).await.unwrap();
        assert_counts_add_up(&summary);
        assert_eq!(summary.scheduled, 10);
        assert_eq!(summary.connection_errors, summary.sent, "{summary}");
        assert!(summary.sent > 0);
        assert_eq!(summary.ok, 0);
        assert_eq!(summary.latency.count, 0);
        let messages: u64 = summary.error_messages.values().sum();
        assert_eq!(messages, summary.connection_errors);
        assert!(
            summary
                .error_messages
                .keys()
                .any(|message| message.to_lowercase().contains("connect")),
            "{summary}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_snapshot_and_early_stop() {
    no_hang(async {
        let app = RunningApp::start("live", |_| {}).await;
        // No duration: runs until stopped.
        let generator = LoadGenerator::new(LoadConfig::new(app.url("/"), 200.0, None)).unwrap();
        let stats = generator.stats();
        assert_eq!(stats.snapshot().scheduled, 0);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(generator.run_until(async {
            let _ = stopped.await;
        }));
        // Some responses become visible while it runs; every snapshot on the way adds up.
        wait_for("20 responses in a live snapshot", || async {
            let snapshot = stats.snapshot();
            assert!(!snapshot.finished);
            assert_eq!(snapshot.scheduled, snapshot.sent + snapshot.dropped);
            assert!(snapshot.ok + snapshot.failed <= snapshot.sent);
            (snapshot.ok >= 20).then_some(())
        })
        .await;
        let _ = stop.send(());
        let summary = running.await.unwrap();
        assert_counts_add_up(&summary);
        assert!(summary.ok >= 20);
        assert_eq!(summary.duration_secs, None);
        assert_eq!(stats.snapshot(), {
            let mut later = stats.snapshot();
            // Elapsed time is frozen once finished, so two snapshots are equal.
            later.elapsed_secs = summary.elapsed_secs;
            later
        });
        app.stop().await;
    })
    .await;
}

#[test]
fn https_and_bad_configs_are_refused_clearly() {
    let make = |target: &str| LoadGenerator::new(LoadConfig::new(target, 10.0, None));
    let error = make("https://example.com/").unwrap_err();
    assert_eq!(error, LoadError::Https("https://example.com/".to_owned()));
    let message = error.to_string();
    assert!(message.contains("https is not supported"), "{message}");
    assert!(message.contains("http://"), "{message}");
    for bad in ["", "127.0.0.1:8080", "ftp://host/", "http://", "not a url"] {
        let error = make(bad).unwrap_err();
        assert!(
            matches!(error, LoadError::Target { .. }),
            "{bad:?}: {error}"
        );
        assert!(error.to_string().contains("http://127.0.0.1:8080/"));
    }
    for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let error =
            LoadGenerator::new(LoadConfig::new("http://127.0.0.1:1/", rate, None)).unwrap_err();
        assert!(matches!(error, LoadError::Rate(_)), "{error}");
    }
    let mut config = LoadConfig::new("http://127.0.0.1:1/", 1.0, None);
    config.concurrency = 0;
    assert_eq!(
        LoadGenerator::new(config).unwrap_err(),
        LoadError::Concurrency
    );
    assert!(make("http://127.0.0.1:1/path?q=1").is_ok());

    let (name, value) = parse_header("X-Canary:  insider ").unwrap();
    assert_eq!(
        (name.as_str(), value.to_str().unwrap()),
        ("x-canary", "insider")
    );
    for bad in ["no-colon", "bad name:1", ":empty-name", "x:bad\nvalue"] {
        assert!(parse_header(bad).is_err(), "{bad:?}");
    }
}
