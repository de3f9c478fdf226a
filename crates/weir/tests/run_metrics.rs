//! `weir run --metrics-listen`: the foreground run serves weir's own metrics over HTTP while it
//! runs, with the router's traffic as it was sent. The rollout waits at an untimed step, so the
//! test reads a settled state and then stops the run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir_tools::sample_app::{SampleApp, SampleAppConfig};

/// How long anything may take before the test calls it a hang.
const DEADLINE: Duration = Duration::from_secs(60);

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Stops `weir run` when the test ends, however it ends.
struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 GET with `Connection: close`: the status line, the headers and the body.
fn get(address: SocketAddr, path: &str) -> Option<(String, String)> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    Some((head.to_string(), body.to_string()))
}

/// The sum of the samples named `name` whose lines contain every one of `labels`.
fn sum(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

#[test]
fn weir_run_serves_its_metrics_while_the_rollout_runs() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (v1, v2) = runtime.block_on(async {
        let mut addresses = Vec::new();
        for version in ["v1", "v2"] {
            let config = SampleAppConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), version);
            let app = SampleApp::bind(config).await.unwrap();
            addresses.push(app.local_addr());
            tokio::spawn(app.serve(std::future::pending()));
        }
        (addresses[0], addresses[1])
    });
    let router = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rollout.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: shop}}
spec:
  target:
    kind: local
    listen: \"{router}\"
    primary: {{url: \"http://{v1}\", healthCheck: /healthz}}
    canary: {{url: \"http://{v2}\", healthCheck: /healthz}}
  plan:
    canary:
      steps:
        - weight: 50
          pause: {{}}
        - weight: 100
  analysis: {{interval: 1s, progressDeadline: 60s}}
"
        ),
    )
    .unwrap();
    let _run = Run(Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "run",
            &file.display().to_string(),
            "--db",
            &dir.path().join("run.db").display().to_string(),
            "--output",
            "json",
            "--metrics-listen",
            &metrics.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());

    // Wait for the 50% step (the run waits there for `weir resume`), as /metrics reports it.
    let step = [
        "namespace=\"default\"",
        "rollout=\"shop\"",
        "phase=\"Progressing\"",
    ];
    let weight = ["namespace=\"default\"", "rollout=\"shop\""];
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some((head, body)) = get(metrics, "/metrics") {
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(
                head.to_ascii_lowercase().contains(
                    "content-type: application/openmetrics-text; version=1.0.0; charset=utf-8"
                ),
                "{head}"
            );
            if sum(&body, "weir_rollout_phase", &step) == Some(1.0)
                && sum(&body, "weir_rollout_canary_weight_ratio", &weight) == Some(0.5)
            {
                break;
            }
        }
        assert!(Instant::now() < deadline, "no 50% step in /metrics");
        std::thread::sleep(Duration::from_millis(100));
    }

    for _ in 0..40 {
        let (head, _) = get(router, "/").expect("the router answers");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    let served = ["rollout=\"shop\"", "traffic=\"served\""];
    let canary = ["rollout=\"shop\"", "role=\"canary\"", "traffic=\"served\""];
    let deadline = Instant::now() + DEADLINE;
    loop {
        let body = get(metrics, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default();
        if sum(&body, "weir_router_requests_total", &served) == Some(40.0) {
            assert!(
                sum(&body, "weir_router_requests_total", &canary).is_some(),
                "{body}"
            );
            assert!(body.ends_with("# EOF\n"), "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the 40 requests never showed in /metrics:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
