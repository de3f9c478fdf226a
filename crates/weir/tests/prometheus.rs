//! Whole rollouts judged by a real Prometheus: `weir serve --prometheus` runs a local rollout,
//! traffic goes through weir's router, Prometheus (the real binary, started by the test on a
//! free port) scrapes weir's `/metrics`, and the builtin checks and a MetricTemplate run PromQL
//! against it. A healthy canary is promoted; a slow one is rolled back on a PromQL check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_tools::load::{LoadConfig, LoadGenerator};
use weir_tools::prometheus_server::{self, PrometheusOptions, PrometheusServer};
use weir_tools::sample_app::{SampleApp, SampleAppConfig};

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn weir(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .output()
        .unwrap()
}

/// Kills `weir serve` when the test ends, however it ends.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(db: &Path, listen: SocketAddr, prometheus: &str, catalog: &Path) -> Serve {
    let child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "serve",
            "--db",
            &db.display().to_string(),
            "--listen",
            &listen.to_string(),
            "--prometheus",
            prometheus,
            "--catalog",
            &catalog.display().to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(listen).is_err() {
        assert!(Instant::now() < deadline, "weir serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Serve(child)
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

fn rollout(router: u16, primary: SocketAddr, canary: SocketAddr, success_min: u32) -> String {
    format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: shop}}
spec:
  target:
    kind: local
    listen: "127.0.0.1:{router}"
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
            let mut config =
                SampleAppConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), version);
            config.latency = faults.latency;
            config.error_percent = faults.error_percent;
            let app = SampleApp::bind(config).await.unwrap();
            addresses.push(app.local_addr());
            tokio::spawn(app.serve(std::future::pending()));
        }
        (addresses[0], addresses[1])
    });
    let dir = tempfile::tempdir().unwrap();
    let api = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let server = format!("http://{api}");
    let prometheus = PrometheusServer::start(&PrometheusOptions {
        targets: vec![api],
        basic_auth_users: Vec::new(),
    })
    .unwrap();
    let catalog = dir.path().join("catalog.yaml");
    std::fs::write(&catalog, TEMPLATE).unwrap();
    let _serve = serve(
        &dir.path().join("weir.db"),
        api,
        &prometheus.url(),
        &catalog,
    );

    let router = free_port();
    let file = dir.path().join("rollout.yaml");
    std::fs::write(&file, rollout(router, primary, canary, success_min)).unwrap();
    let applied = weir(&[
        "apply",
        "-f",
        &file.display().to_string(),
        "--server",
        &server,
    ]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );

    // Steady traffic through weir's router while the rollout runs.
    let (stop_load, load_stopped) = tokio::sync::oneshot::channel::<()>();
    let load = runtime.spawn(async move {
        // The router binds when the rollout is set up; requests before that fail and are
        // simply not counted by the router.
        let generator = LoadGenerator::new(LoadConfig::new(
            format!("http://127.0.0.1:{router}/"),
            80.0,
            None,
        ))
        .unwrap();
        generator
            .run_until(async {
                let _ = load_stopped.await;
            })
            .await
    });

    let deadline = Instant::now() + Duration::from_secs(150);
    let phase = loop {
        let got = weir(&["get", "shop", "--output", "json", "--server", &server]);
        let listed: Value = serde_json::from_slice(&got.stdout).unwrap_or(Value::Null);
        let rollout = &listed[0];
        let phase = rollout["status"]["phase"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if phase == "Succeeded" || phase == "Failed" {
            break phase;
        }
        assert!(
            Instant::now() < deadline,
            "the rollout did not finish: {rollout}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
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

fn require_prometheus() -> bool {
    if prometheus_server::available() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "prometheus is not installed; .ci/run installs it (apt-get install prometheus)"
    );
    eprintln!("SKIPPED: prometheus is not installed (apt-get install prometheus); CI runs this");
    false
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
    if !require_prometheus() {
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
    if !require_prometheus() {
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
    if !require_prometheus() {
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
