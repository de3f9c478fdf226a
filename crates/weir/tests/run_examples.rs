//! The `examples/` rollouts for local targets run with `weir run`, as their comments say: the URL
//! form against two sample apps, the command form with weir starting the versions itself. Ports
//! are swapped for free ones so the test can run anywhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use weir_tools::load::{LoadConfig, LoadGenerator};
use weir_tools::sample_app::{SampleApp, SampleAppConfig};

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn example(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples")
            .join(name),
    )
    .unwrap()
}

/// Runs `weir run` on `yaml` with load on `listen`, and returns its exit code and output.
fn run_with_load(yaml: &str, listen: SocketAddr) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rollout.yaml");
    std::fs::write(&file, yaml).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let load = runtime.spawn(async move {
        while tokio::net::TcpStream::connect(listen).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let generator =
            LoadGenerator::new(LoadConfig::new(format!("http://{listen}/"), 100.0, None)).unwrap();
        generator
            .run_until(async move {
                let _ = stopped.await;
            })
            .await
    });
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "run",
            &file.display().to_string(),
            "--db",
            &dir.path().join("run.db").display().to_string(),
        ])
        .output()
        .unwrap();
    let _ = stop.send(());
    let _ = runtime.block_on(load);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), text)
}

#[test]
fn the_url_example_promotes_its_canary() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (v1, v2) = runtime.block_on(async {
        let mut addresses = Vec::new();
        for version in ["v1", "v2"] {
            let app = SampleApp::bind(SampleAppConfig::new(
                SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                version,
            ))
            .await
            .unwrap();
            addresses.push(app.local_addr());
            tokio::spawn(app.serve(std::future::pending()));
        }
        (addresses[0], addresses[1])
    });
    let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let yaml = example("local-urls.yaml")
        .replace("127.0.0.1:9001", &v1.to_string())
        .replace("127.0.0.1:9002", &v2.to_string())
        .replace("127.0.0.1:8080", &listen.to_string());
    let (code, output) = run_with_load(&yaml, listen);
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains("PROMOTED"), "{output}");
    assert!(
        output.contains("canary weight 50% (step 2 of 3)"),
        "{output}"
    );
}

#[test]
fn the_command_example_starts_the_versions_and_promotes() {
    let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let yaml = example("local-commands.yaml")
        .replace("./target/release/weir", env!("CARGO_BIN_EXE_weir"))
        .replace("127.0.0.1:8081", &listen.to_string());
    let (code, output) = run_with_load(&yaml, listen);
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains("PROMOTED"), "{output}");
}

#[test]
fn an_invalid_local_target_exits_2_naming_the_field() {
    let yaml = example("local-urls.yaml").replace(
        "primary: {url: \"http://127.0.0.1:9001\", healthCheck: /healthz}",
        "primary: {url: \"ftp://x\"}",
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rollout.yaml");
    std::fs::write(&file, yaml).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "run",
            &file.display().to_string(),
            "--db",
            &dir.path().join("x.db").display().to_string(),
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("spec.target.primary.url"));
}

/// `weir run --listen` serves the API while the rollout runs: a person opens the
/// confirm-promotion gate from another process with `weir gate open`, the run promotes, and
/// the history names them.
#[test]
fn a_foreground_run_can_be_steered_through_its_api() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (v1, v2) = runtime.block_on(async {
        let mut addresses = Vec::new();
        for version in ["v1", "v2"] {
            let app = SampleApp::bind(SampleAppConfig::new(
                SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
                version,
            ))
            .await
            .unwrap();
            addresses.push(app.local_addr());
            tokio::spawn(app.serve(std::future::pending()));
        }
        (addresses[0], addresses[1])
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rollout.yaml");
    let router = free_port();
    // The gate's hook points at a port nothing listens on: it never says yes by itself.
    let closed = free_port();
    std::fs::write(
        &file,
        format!(
            "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: gated}}\nspec:\n  target:\n    kind: local\n    listen: \"127.0.0.1:{router}\"\n    primary: {{url: \"http://{v1}\"}}\n    canary: {{url: \"http://{v2}\"}}\n  plan: {{canary: {{stepWeights: [50]}}}}\n  analysis:\n    interval: 1s\n    progressDeadline: 2m\n    webhooks:\n      - {{name: release, type: confirm-promotion, url: \"http://127.0.0.1:{closed}/\", timeout: 1s}}\n"
        ),
    )
    .unwrap();
    let api = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let server = format!("http://{api}");
    let mut run = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "run",
            &file.display().to_string(),
            "--db",
            &dir.path().join("run.db").display().to_string(),
            "--listen",
            &api.to_string(),
            "--output",
            "json",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let weir = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .output()
            .unwrap()
    };
    // Wait until the run waits at the gate.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = weir(&["get", "gated", "--output", "json", "--server", &server]);
        let listed: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap_or_default();
        if listed[0]["status"]["phase"] == "WaitingPromotion" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never waited at the gate: {listed}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let opened = weir(&[
        "gate",
        "open",
        "gated",
        "--type",
        "confirm-promotion",
        "--as",
        "ana",
        "--server",
        &server,
    ]);
    assert!(
        opened.status.success(),
        "{}",
        String::from_utf8_lossy(&opened.stderr)
    );
    let status = run.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "the run promotes once the gate opens"
    );
    // The run's state file keeps the history: read it back through a server on the same file.
    let api = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let server = format!("http://{api}");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "serve",
            "--db",
            &dir.path().join("run.db").display().to_string(),
            "--listen",
            &api.to_string(),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while std::net::TcpStream::connect(api).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let history = weir(&["history", "gated", "--output", "json", "--server", &server]);
    let _ = serve.kill();
    let _ = serve.wait();
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&history.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let opened = events
        .iter()
        .find(|event| event["reason"] == "GateOpened")
        .unwrap_or_else(|| panic!("no GateOpened: {events:#?}"));
    assert_eq!(opened["evidence"]["actor"], "ana", "{opened:#}");
    assert!(
        events.iter().any(|event| event["reason"] == "Succeeded"),
        "{events:#?}"
    );
    drop(runtime);
}
