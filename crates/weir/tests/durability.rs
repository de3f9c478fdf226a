//! Durability: `weir serve` with rollouts in progress is killed with SIGKILL at random moments and
//! restarted, several times. Every run must resume at the step it had committed: no weight step
//! skipped or applied twice, event sequence numbers without gaps, and every run finishing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
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

fn serve(db: &Path, listen: SocketAddr) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "serve",
            "--db",
            &db.display().to_string(),
            "--listen",
            &listen.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(listen).is_err() {
        assert!(Instant::now() < deadline, "weir serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// A small deterministic generator, so a failure can be replayed.
struct Lcg(u64);

impl Lcg {
    fn next_millis(&mut self, low: u64, high: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        low + (self.0 >> 33) % (high - low)
    }
}

const STEPS: [u32; 10] = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100];

#[test]
fn serve_killed_at_random_points_resumes_every_run_exactly() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // The versions are URLs served by this test, so they outlive every kill of the server.
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
    let db = dir.path().join("weir.db");
    let api = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let server = format!("http://{api}");
    let names = ["alpha", "beta", "gamma"];
    let mut file = String::new();
    for name in names {
        file.push_str(&format!(
            "---\napiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: {name}}}\nspec:\n  target:\n    kind: local\n    listen: \"127.0.0.1:{port}\"\n    primary: {{url: \"http://{v1}\", healthCheck: /healthz}}\n    canary: {{url: \"http://{v2}\", healthCheck: /healthz}}\n  plan: {{canary: {{stepWeights: {STEPS:?}}}}}\n  analysis: {{interval: 1s, progressDeadline: 1m}}\n",
            port = free_port()
        ));
    }
    let rollouts = dir.path().join("rollouts.yaml");
    std::fs::write(&rollouts, file).unwrap();

    let mut child = serve(&db, api);
    let applied = weir(&[
        "apply",
        "-f",
        &rollouts.display().to_string(),
        "--server",
        &server,
    ]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );

    let mut random = Lcg(0x5eed_u64);
    let mut kills = 0;
    let mut kills_mid_run = 0;
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(random.next_millis(300, 2500)));
        let listed = weir(&["get", "--output", "json", "--server", &server]);
        let before: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
        let progressing = before
            .as_array()
            .is_some_and(|items| items.iter().any(|r| r["status"]["phase"] == "Progressing"));
        kills_mid_run += usize::from(progressing);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        child = serve(&db, api);
    }

    assert!(
        kills_mid_run >= 3,
        "only {kills_mid_run} of {kills} kills hit a run in progress"
    );

    // Every run finishes.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let listed = weir(&["get", "--output", "json", "--server", &server]);
        let rollouts: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
        let phases: Vec<&str> = rollouts
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|r| r["status"]["phase"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        if phases.len() == names.len() && phases.iter().all(|phase| *phase == "Succeeded") {
            break;
        }
        assert!(!phases.contains(&"Failed"), "a run failed: {rollouts}");
        assert!(Instant::now() < deadline, "runs did not finish: {phases:?}");
        std::thread::sleep(Duration::from_millis(200));
    }

    for name in names {
        let history = weir(&["history", name, "--output", "json", "--server", &server]);
        let events: Vec<Value> = String::from_utf8_lossy(&history.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let seqs: Vec<u64> = events
            .iter()
            .map(|event| event["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "{name}: event sequence has gaps"
        );
        let steps: Vec<u32> = events
            .iter()
            .filter(|event| event["reason"] == "Advanced")
            .map(|event| event["canaryWeight"].as_f64().unwrap() as u32)
            .collect();
        assert_eq!(
            steps,
            STEPS.to_vec(),
            "{name}: a weight step was skipped or applied twice across {kills} kills"
        );
        let runs_started = events
            .iter()
            .filter(|event| event["reason"] == "RunStarted")
            .count();
        assert_eq!(
            runs_started, 1,
            "{name}: the run restarted instead of resuming"
        );
        assert!(
            events
                .iter()
                .all(|event| event["run"].as_u64().unwrap() <= 1)
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The processes whose command line contains `marker` (read from /proc).
fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
        })
        .collect()
}

/// Versions weir starts itself do not outlive it, even when it is killed with SIGKILL and
/// cannot stop them: each runs under a guard that stops it when weir's end of a pipe closes.
#[test]
fn versions_weir_started_stop_when_it_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    // A directory only these versions name, to find their processes by.
    let marker = dir.path().join("versions-of-this-test");
    std::fs::create_dir(&marker).unwrap();
    let marker = marker.display().to_string();
    let version = |name: &str| {
        std::fs::create_dir(format!("{marker}/{name}")).unwrap();
        format!(
            "{{command: [python3, -m, http.server, \"{{port}}\", --bind, 127.0.0.1, --directory, \"{marker}/{name}\"], healthCheck: /, startTimeout: 20s}}"
        )
    };
    let file = dir.path().join("rollout.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: started}}\nspec:\n  target:\n    kind: local\n    listen: \"127.0.0.1:{router}\"\n    primary: {primary}\n    canary: {canary}\n  plan: {{canary: {{steps: [{{weight: 10, pause: {{}}}}]}}}}\n  analysis: {{interval: 1s, progressDeadline: 1m}}\n",
            router = free_port(),
            primary = version("v1"),
            canary = version("v2"),
        ),
    )
    .unwrap();
    let api = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let server = format!("http://{api}");
    let mut child = serve(&dir.path().join("weir.db"), api);
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
    // Both versions run once the canary has its first step (it then waits at the pause).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = weir(&["get", "started", "--output", "json", "--server", &server]);
        let rollouts: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
        if rollouts[0]["status"]["canaryWeight"] == 10 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the canary never started: {rollouts}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let running = processes_with(&marker);
    assert!(
        running.len() >= 2,
        "expected the two versions (and their guards), found {running:?}"
    );
    child.kill().unwrap(); // SIGKILL: weir cleans nothing up itself
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = processes_with(&marker);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "versions outlived weir: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
