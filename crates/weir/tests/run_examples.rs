//! The `examples/` rollouts for local targets run with `weir run`, as their comments say: the URL
//! form against two sample apps, the command form with weir starting the versions itself; and
//! `weir demo`, the README's first command, both ways. Every port is swapped for port 0, and the
//! addresses bound are read back from the run's first line, so the test can run anywhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::Value;
use weir_testkit::fixtures::{TempDb, runtime, sample_apps};
use weir_testkit::process::{Weir, output};
use weir_testkit::wait::wait_until;
use weir_tools::load::{LoadConfig, LoadGenerator};

fn weir(args: &[&str]) -> std::process::Output {
    output(env!("CARGO_BIN_EXE_weir"), args)
}

fn example(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples")
            .join(name),
    )
    .unwrap()
}

/// Runs `weir run --output json` on `yaml` with load through the router it reports, and
/// returns its exit code and its events.
fn run_with_load(yaml: &str) -> (Option<i32>, Vec<Value>) {
    let dir = TempDb::new();
    let file = dir.file("rollout.yaml");
    std::fs::write(&file, yaml).unwrap();
    let mut run = Weir::start(
        env!("CARGO_BIN_EXE_weir"),
        &[
            "run",
            &file.display().to_string(),
            "--db",
            &dir.path().display().to_string(),
            "--output",
            "json",
        ],
    );
    // The router's socket is bound before the first line is printed: load can start at once.
    let router = run.url("router");
    let runtime = runtime();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let load = runtime.spawn(async move {
        let generator =
            LoadGenerator::new(LoadConfig::new(format!("{router}/"), 100.0, None)).unwrap();
        generator
            .run_until(async move {
                let _ = stopped.await;
            })
            .await
    });
    let status = run.wait();
    let _ = stop.send(());
    let _ = runtime.block_on(load);
    let events = run
        .lines()
        .iter()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["event"].clone())
        .collect();
    (status.code(), events)
}

/// Whether an event of `reason` was recorded (with `message` in its message, when given).
fn has_event(events: &[Value], reason: &str, message: &str) -> bool {
    events.iter().any(|event| {
        event["reason"] == reason
            && event["message"]
                .as_str()
                .is_some_and(|text| text.contains(message))
    })
}

#[test]
fn the_url_example_promotes_its_canary() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let yaml = example("local-urls.yaml")
        .replace("127.0.0.1:9001", &versions[0].to_string())
        .replace("127.0.0.1:9002", &versions[1].to_string())
        .replace("127.0.0.1:8080", "127.0.0.1:0");
    let (code, events) = run_with_load(&yaml);
    assert_eq!(code, Some(0), "{events:#?}");
    assert!(has_event(&events, "Succeeded", ""), "{events:#?}");
    assert!(
        has_event(&events, "Advanced", "canary weight 50% (step 2 of 3)"),
        "{events:#?}"
    );
}

#[test]
fn the_command_example_starts_the_versions_and_promotes() {
    let yaml = example("local-commands.yaml")
        .replace("./target/release/weir", env!("CARGO_BIN_EXE_weir"))
        .replace("127.0.0.1:8081", "127.0.0.1:0");
    let (code, events) = run_with_load(&yaml);
    assert_eq!(code, Some(0), "{events:#?}");
    assert!(has_event(&events, "Succeeded", ""), "{events:#?}");
}

/// The README's first command: a healthy canary is promoted and the summary says so; a faulty
/// one is rolled back (exit 1) with the judge's evidence.
#[test]
fn the_demo_promotes_a_healthy_canary_and_rolls_back_a_faulty_one() {
    let healthy = weir(&["demo", "--interval", "1"]);
    let text = String::from_utf8_lossy(&healthy.stdout);
    assert_eq!(healthy.status.code(), Some(0), "{text}");
    assert!(text.contains("default/demo: PROMOTED"), "{text}");
    assert!(text.contains("v2 now serves all traffic"), "{text}");

    let faulty = weir(&["demo", "--interval", "1", "--faulty"]);
    let text = String::from_utf8_lossy(&faulty.stdout);
    assert_eq!(faulty.status.code(), Some(1), "{text}");
    assert!(text.contains("default/demo: ROLLED BACK"), "{text}");
    assert!(text.contains("v1 serves all traffic again"), "{text}");
}

#[test]
fn an_invalid_local_target_exits_2_naming_the_field() {
    let yaml = example("local-urls.yaml").replace(
        "primary: {url: \"http://127.0.0.1:9001\", healthCheck: /healthz}",
        "primary: {url: \"ftp://x\"}",
    );
    let dir = TempDb::new();
    let file = dir.file("rollout.yaml");
    std::fs::write(&file, yaml).unwrap();
    let output = weir(&[
        "run",
        &file.display().to_string(),
        "--db",
        &dir.path().display().to_string(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("spec.target.primary.url"));
}

/// `weir run --listen` serves the API while the rollout runs: a person opens the
/// confirm-promotion gate from another process with `weir gate open`, the run promotes, and
/// the history names them.
#[test]
fn a_foreground_run_can_be_steered_through_its_api() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    // The gate's hook always answers 403: it never says yes by itself. No traffic: the run
    // reaches the gate on Flagger's semantics (`noHarm`); the evidence rule would hold it before.
    let refusing = refusing_hook();
    let dir = TempDb::new();
    let file = dir.file("rollout.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: gated}}\nspec:\n  target:\n    kind: local\n    listen: \"127.0.0.1:0\"\n    primary: {{url: \"http://{v1}\"}}\n    canary: {{url: \"http://{v2}\"}}\n  plan: {{canary: {{stepWeights: [50]}}}}\n  analysis:\n    interval: 1s\n    progressDeadline: 2m\n    evidence: {{promoteOn: noHarm}}\n    webhooks:\n      - {{name: release, type: confirm-promotion, url: \"http://{refusing}/\", timeout: 1s}}\n",
            v1 = versions[0],
            v2 = versions[1],
        ),
    )
    .unwrap();
    let mut run = Weir::start(
        env!("CARGO_BIN_EXE_weir"),
        &[
            "run",
            &file.display().to_string(),
            "--db",
            &dir.path().display().to_string(),
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
        ],
    );
    let server = run.url("api");
    wait_until("the run to wait at the gate", || {
        let got = weir(&["get", "gated", "--output", "json", "--server", &server]);
        let listed: Value = serde_json::from_slice(&got.stdout).unwrap_or_default();
        (listed[0]["status"]["phase"] == "WaitingPromotion").then_some(())
    });
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
    let status = run.wait();
    assert_eq!(
        status.code(),
        Some(0),
        "the run promotes once the gate opens"
    );
    // The run's state file keeps the history: read it back through a server on the same file.
    let serve = Weir::serve(env!("CARGO_BIN_EXE_weir"), &dir.path(), &[]);
    let history = weir(&[
        "history",
        "gated",
        "--output",
        "json",
        "--server",
        &serve.url("api"),
    ]);
    drop(serve);
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

/// A webhook receiver on port 0 that refuses everything (403), for as long as the test runs.
fn refusing_hook() -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            let _ = stream.write_all(
                b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    address
}
