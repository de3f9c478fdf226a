//! Whole rollouts judged by a real Prometheus: `weir serve --prometheus` runs a local rollout,
//! traffic goes through weir's router, Prometheus (the real binary, started by the test on a port
//! it picks) scrapes weir's `/metrics`, and the builtin checks and a MetricTemplate run PromQL
//! against it. A healthy canary is promoted; a slow one is rolled back on a PromQL check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use weir_testkit::fixtures::{TempDb, sample_config, start_sample_app};
use weir_testkit::process::{Weir, apply, output};
use weir_testkit::prometheus::{self, PrometheusOptions, PrometheusServer};
use weir_testkit::wait::wait_until;
use weir_tools::load::{LoadConfig, LoadGenerator};

fn weir(args: &[&str]) -> std::process::Output {
    output(env!("CARGO_BIN_EXE_weir"), args)
}

fn serve(db: &Path, prometheus: &str, catalog: &Path) -> Weir {
    Weir::serve(
        env!("CARGO_BIN_EXE_weir"),
        db,
        &[
            "--prometheus",
            prometheus,
            "--catalog",
            &catalog.display().to_string(),
        ],
    )
}

/// Where a rollout's router listens, from the `Target` event its history records.
fn router_address(server: &str, name: &str) -> SocketAddr {
    wait_until("the router's address in the history", || {
        let history = weir(&["history", name, "--output", "json", "--server", server]);
        String::from_utf8_lossy(&history.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|event| event["reason"] == "Target")
            .find_map(|event| {
                event["message"]
                    .as_str()?
                    .strip_prefix("the router listens on http://")?
                    .parse()
                    .ok()
            })
    })
}

const TEMPLATE: &str = r#"
apiVersion: weir.dev/v1alpha1
kind: MetricTemplate
metadata: {name: canary-p90-ms}
spec:
  provider: {type: prometheus}
  query: |
    1000 * histogram_quantile({{ variables.quantile }}, sum by (le) (rate(
      weir_router_request_duration_seconds_bucket{namespace="{{ namespace }}",rollout="{{ name }}",role="canary",traffic="served"}[{{ interval }}])))
"#;

fn rollout(primary: SocketAddr, canary: SocketAddr, success_min: u32) -> String {
    format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: shop}}
spec:
  target:
    kind: local
    listen: "127.0.0.1:0"
    primary: {{url: "http://{primary}", healthCheck: /healthz}}
    canary: {{url: "http://{canary}", healthCheck: /healthz}}
  plan: {{canary: {{stepWeights: [20, 50, 100]}}}}
  analysis:
    interval: 3s
    threshold: 2
    noData: hold
    progressDeadline: 2m
    metrics:
      - {{name: request-success-rate, interval: 6s, thresholdRange: {{min: {success_min}}}}}
      - {{name: request-duration, interval: 6s, thresholdRange: {{max: 150}}}}
      - name: p90-latency
        templateRef: {{name: canary-p90-ms}}
        templateVariables: {{quantile: "0.9"}}
        interval: 6s
        thresholdRange: {{max: 150}}
"#
    )
}

/// A canary's faults.
#[derive(Clone, Copy)]
struct Canary {
    latency: Duration,
    error_percent: f64,
}

/// Runs one rollout to its end and returns its final phase and its history.
fn run_rollout(canary_faults: Canary, success_min: u32) -> (String, Vec<Value>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (primary, canary) = runtime.block_on(async {
        let mut addresses = Vec::new();
        let healthy = Canary {
            latency: Duration::ZERO,
            error_percent: 0.0,
        };
        for (version, faults) in [("v1", healthy), ("v2", canary_faults)] {
            let mut config = sample_config(version);
            config.latency = faults.latency;
            config.error_percent = faults.error_percent;
            addresses.push(start_sample_app(config).await);
        }
        (addresses[0], addresses[1])
    });
    let dir = TempDb::new();
    // weir serve needs Prometheus's address and Prometheus weir's: Prometheus starts first and
    // is told its target once weir serve says where it listens.
    let prometheus = PrometheusServer::start(&PrometheusOptions::default()).unwrap();
    let catalog = dir.file("catalog.yaml");
    std::fs::write(&catalog, TEMPLATE).unwrap();
    let serve = serve(&dir.path(), &prometheus.url(), &catalog);
    prometheus.set_targets(&[serve.address("api")]);
    let server = serve.url("api");

    let file = dir.file("rollout.yaml");
    std::fs::write(&file, rollout(primary, canary, success_min)).unwrap();
    apply(env!("CARGO_BIN_EXE_weir"), &file, &server);

    // Steady traffic through weir's router while the rollout runs.
    let router = router_address(&server, "shop");
    let (stop_load, load_stopped) = tokio::sync::oneshot::channel::<()>();
    let load = runtime.spawn(async move {
        let generator =
            LoadGenerator::new(LoadConfig::new(format!("http://{router}/"), 80.0, None)).unwrap();
        generator
            .run_until(async {
                let _ = load_stopped.await;
            })
            .await
    });

    let phase = wait_until("the rollout to finish", || {
        let got = weir(&["get", "shop", "--output", "json", "--server", &server]);
        let listed: Value = serde_json::from_slice(&got.stdout).unwrap_or(Value::Null);
        let phase = listed[0]["status"]["phase"].as_str().unwrap_or("");
        (phase == "Succeeded" || phase == "Failed").then(|| phase.to_string())
    });
    let _ = stop_load.send(());
    let summary = runtime.block_on(load).unwrap();
    assert!(summary.ok > 200, "too little traffic: {summary:?}");

    let history = weir(&["history", "shop", "--output", "json", "--server", &server]);
    let events = String::from_utf8_lossy(&history.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (phase, events)
}

/// Every check result in the history whose message says it came from Prometheus.
fn prometheus_checks(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .flat_map(|event| event["evidence"]["checks"].as_array().into_iter().flatten())
        .filter(|check| {
            check["message"]
                .as_str()
                .is_some_and(|message| message.starts_with("prometheus: "))
        })
        .collect()
}

#[test]
fn a_healthy_canary_judged_by_prometheus_is_promoted() {
    if !prometheus::required() {
        return;
    }
    let (phase, events) = run_rollout(
        Canary {
            latency: Duration::ZERO,
            error_percent: 0.0,
        },
        95,
    );
    assert_eq!(phase, "Succeeded", "{events:#?}");
    let steps: Vec<u64> = events
        .iter()
        .filter(|event| event["reason"] == "Advanced")
        .filter_map(|event| event["canaryWeight"].as_f64())
        .map(|weight| weight as u64)
        .collect();
    assert_eq!(steps, [20, 50, 100], "{events:#?}");
    // Every weight step after the first was taken on passing PromQL checks with values.
    let checks = prometheus_checks(&events);
    for name in ["request-success-rate", "request-duration", "p90-latency"] {
        let passed: Vec<&&Value> = checks
            .iter()
            .filter(|check| check["name"] == name && check["outcome"] == "pass")
            .collect();
        assert!(!passed.is_empty(), "no passing {name} check: {events:#?}");
    }
    let success = checks
        .iter()
        .find(|check| check["name"] == "request-success-rate")
        .unwrap();
    assert!(success["value"].as_f64().unwrap() >= 95.0, "{success}");
}

#[test]
fn a_slow_canary_judged_by_prometheus_is_rolled_back() {
    if !prometheus::required() {
        return;
    }
    let (phase, events) = run_rollout(
        Canary {
            latency: Duration::from_millis(300),
            error_percent: 0.0,
        },
        95,
    );
    assert_eq!(phase, "Failed", "{events:#?}");
    let rolled_back = events
        .iter()
        .find(|event| event["reason"] == "RolledBack")
        .unwrap_or_else(|| panic!("no RolledBack event: {events:#?}"));
    // The latency checks failed on PromQL values near the canary's 300 ms.
    let failed: Vec<&Value> = prometheus_checks(&events)
        .into_iter()
        .filter(|check| check["outcome"] == "fail")
        .filter(|check| check["name"] == "request-duration" || check["name"] == "p90-latency")
        .collect();
    assert!(!failed.is_empty(), "no failed latency check: {events:#?}");
    for check in &failed {
        let value = check["value"].as_f64().unwrap();
        assert!((150.0..2_000.0).contains(&value), "{check}");
    }
    // The canary never got past the first step.
    let steps: Vec<u64> = events
        .iter()
        .filter(|event| event["reason"] == "Advanced")
        .filter_map(|event| event["canaryWeight"].as_f64())
        .map(|weight| weight as u64)
        .collect();
    assert_eq!(steps, [20], "{rolled_back}");
}

#[test]
fn a_failing_canary_is_stopped_by_the_sequential_judge_on_counts_from_prometheus() {
    if !prometheus::required() {
        return;
    }
    // The success-rate check accepts anything above 50%, so only the judge, reading both
    // versions' request and error counters from Prometheus, can stop a canary failing 25%.
    let (phase, events) = run_rollout(
        Canary {
            latency: Duration::ZERO,
            error_percent: 25.0,
        },
        50,
    );
    assert_eq!(phase, "Failed", "{events:#?}");
    let rolled_back = events
        .iter()
        .find(|event| event["reason"] == "RolledBack")
        .unwrap_or_else(|| panic!("no RolledBack event: {events:#?}"));
    let verdict = &rolled_back["evidence"]["verdict"];
    assert_eq!(verdict["judge"], "sequential", "{rolled_back:#}");
    let evidence = &verdict["evidence"];
    let count = |field: &str| {
        evidence[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field}: {verdict:#}"))
    };
    assert!(count("canaryErrors") > 0, "{verdict:#}");
    assert_eq!(count("primaryErrors"), 0, "{verdict:#}");
    assert!(
        count("canaryRequests") >= count("canaryErrors"),
        "{verdict:#}"
    );
    assert!(count("primaryRequests") > 0, "{verdict:#}");
    assert!(
        evidence["logEValue"].as_f64().unwrap() >= 100f64.ln(),
        "{verdict:#}"
    );
}
