//! The sample app over real loopback sockets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use http::StatusCode;
use weir_testkit::client::{get, http1_client};
use weir_testkit::fixtures::RunningApp;
use weir_testkit::wait::no_hang;
use weir_tools::sample_app::{SampleApp, SampleAppConfig, SampleAppError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_with_its_version_body_and_header() {
    no_hang(async {
        let app = RunningApp::start("v1.2.3", |_| {}).await;
        let client = http1_client();

        let answer = get(&client, app.addr, "/some/path?q=1", &[]).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.header("x-weir-version"), Some("v1.2.3"));
        assert_eq!(answer.header("content-type"), Some("application/json"));
        let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"version": "v1.2.3", "path": "/some/path"})
        );

        let version = get(&client, app.addr, "/version", &[]).await;
        assert_eq!(version.status, StatusCode::OK);
        assert_eq!(version.body, "v1.2.3\n");
        assert_eq!(version.header("x-weir-version"), Some("v1.2.3"));

        let health = get(&client, app.addr, "/healthz", &[]).await;
        assert_eq!(health.status, StatusCode::OK);
        assert_eq!(health.header("x-weir-version"), Some("v1.2.3"));

        // Only the application request counts.
        assert_eq!(app.stats.requests(), 1);
        assert_eq!(app.stats.injected_errors(), 0);
        app.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_rate_100_fails_everything_but_healthz_and_version() {
    no_hang(async {
        let app = RunningApp::start("bad", |config| config.error_percent = 100.0).await;
        let client = http1_client();
        for _ in 0..50 {
            let answer = get(&client, app.addr, "/", &[]).await;
            assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
            assert_eq!(answer.header("x-weir-version"), Some("bad"));
            let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
            assert_eq!(body["error"], "injected fault");
            assert_eq!(body["version"], "bad");
        }
        for _ in 0..10 {
            assert_eq!(
                get(&client, app.addr, "/healthz", &[]).await.status,
                StatusCode::OK
            );
            assert_eq!(
                get(&client, app.addr, "/version", &[]).await.status,
                StatusCode::OK
            );
        }
        assert_eq!(app.stats.requests(), 50);
        assert_eq!(app.stats.injected_errors(), 50);
        app.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_rate_0_fails_nothing() {
    no_hang(async {
        let app = RunningApp::start("good", |config| config.seed = 99).await;
        let client = http1_client();
        for i in 0..300 {
            let answer = get(&client, app.addr, &format!("/item/{i}"), &[]).await;
            assert_eq!(answer.status, StatusCode::OK, "request {i}");
        }
        assert_eq!(app.stats.injected_errors(), 0);
        app.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_rate_20_percent_is_binomial_and_seeded() {
    no_hang(async {
        let n = 2_000u32;
        let mut runs = Vec::new();
        for _ in 0..2 {
            let app = RunningApp::start("flaky", |config| {
                config.error_percent = 20.0;
                config.seed = 2024;
            })
            .await;
            let client = http1_client();
            let mut failures = Vec::new();
            for i in 0..n {
                let status = get(&client, app.addr, "/", &[]).await.status;
                match status {
                    StatusCode::OK => {}
                    StatusCode::INTERNAL_SERVER_ERROR => failures.push(i),
                    other => panic!("unexpected status {other}"),
                }
            }
            assert_eq!(app.stats.injected_errors(), failures.len() as u64);
            app.stop().await;
            runs.push(failures);
        }
        // Binomial(2000, 0.2): mean 400, sigma = sqrt(2000 * 0.2 * 0.8) ~= 17.9; 5 sigma ~= 89.
        let failed = runs[0].len() as f64;
        let sigma = (f64::from(n) * 0.2 * 0.8).sqrt();
        assert!(
            (failed - 400.0).abs() <= 5.0 * sigma,
            "{failed} failures out of {n}"
        );
        // Sequential requests with the same seed fail at the same positions.
        assert_eq!(runs[0], runs[1]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_adds_at_least_the_configured_delay() {
    no_hang(async {
        let app = RunningApp::start("slow", |config| {
            config.latency = Duration::from_millis(150);
            config.jitter = Duration::from_millis(20);
        })
        .await;
        let client = http1_client();
        // Warm the connection so only the request itself is measured (a lower bound anyway).
        assert_eq!(
            get(&client, app.addr, "/healthz", &[]).await.status,
            StatusCode::OK
        );
        for _ in 0..3 {
            let started = Instant::now();
            assert_eq!(
                get(&client, app.addr, "/", &[]).await.status,
                StatusCode::OK
            );
            let took = started.elapsed();
            assert!(took >= Duration::from_millis(150), "{took:?}");
        }
        app.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_configs_are_refused_and_busy_ports_reported() {
    let addr = "127.0.0.1:0".parse().unwrap();
    for percent in [-1.0, 100.5, f64::NAN] {
        let mut config = SampleAppConfig::new(addr, "v1");
        config.error_percent = percent;
        let error = SampleApp::bind(config).await.unwrap_err();
        assert!(matches!(error, SampleAppError::ErrorRate(_)), "{error}");
        assert!(error.to_string().contains("from 0 to 100"), "{error}");
    }
    for version in ["", "bad\nversion"] {
        let error = SampleApp::bind(SampleAppConfig::new(addr, version))
            .await
            .unwrap_err();
        assert!(matches!(error, SampleAppError::Version(_)), "{error}");
    }
    let first = SampleApp::bind(SampleAppConfig::new(addr, "v1"))
        .await
        .unwrap();
    let busy = SampleApp::bind(SampleAppConfig::new(first.local_addr(), "v2"))
        .await
        .unwrap_err();
    assert!(matches!(busy, SampleAppError::Bind { .. }), "{busy}");
    assert!(busy.to_string().contains(&first.local_addr().to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_returns_after_shutdown() {
    no_hang(async {
        let app = RunningApp::start("v1", |_| {}).await;
        let client = http1_client();
        assert_eq!(
            get(&client, app.addr, "/", &[]).await.status,
            StatusCode::OK
        );
        let addr = app.addr;
        app.stop().await;
        drop(client);
        // The port no longer accepts connections.
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    })
    .await;
}
