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
