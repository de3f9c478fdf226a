//! Durability: `weir serve` with rollouts in progress is killed with SIGKILL at random moments and
//! restarted, several times. Every run must resume at the step it had committed: no weight step
//! skipped or applied twice, event sequence numbers without gaps, and every run finishing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use weir_testkit::fixtures::{TempDb, runtime, sample_apps};
use weir_testkit::process::{Weir, apply, output};
use weir_testkit::wait::{wait_until, wait_until_within};

fn weir(args: &[&str]) -> std::process::Output {
    output(env!("CARGO_BIN_EXE_weir"), args)
}

/// `weir serve` on a port it picks (a restart gets a new one: the test reads it back each time).
fn serve(db: &Path) -> (Weir, String) {
    // Some rollouts here start their versions as commands, which `weir serve` needs allowed.
    let mut extra = vec!["--allow-commands"];
    if db.to_string_lossy().starts_with("postgres://") {
        // A restarted instance is a new one: it takes the killed one's rollouts over once their
        // leases lapse, so short leases keep the test short.
        extra.extend(["--lease-time", "2s"]);
    }
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), db, &extra);
    let url = server.url("api");
    (server, url)
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
    let dir = TempDb::new();
    killed_at_random_points_resumes_every_run_exactly(&dir.path(), &dir);
}

#[test]
fn serve_on_postgres_killed_at_random_points_resumes_every_run_exactly() {
    let postgres = weir_testkit::postgres::PgCluster::start();
    let url = postgres.database("durability");
    let dir = TempDb::new();
    killed_at_random_points_resumes_every_run_exactly(Path::new(&url), &dir);
}

/// Kills `weir serve` on database `db` six times at random moments (files go to `dir`).
fn killed_at_random_points_resumes_every_run_exactly(db: &Path, dir: &TempDb) {
    let runtime = runtime();
    // The versions are URLs served by this test, so they outlive every kill of the server.
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let (v1, v2) = (versions[0], versions[1]);
    let names = ["alpha", "beta", "gamma"];
    // No traffic: the runs promote on Flagger's semantics (`noHarm`); the evidence rule would
    // hold them at their last step.
    let mut file = String::new();
    for name in names {
        file.push_str(&format!(
            "---\napiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: {name}}}\nspec:\n  target:\n    kind: local\n    listen: \"127.0.0.1:0\"\n    primary: {{url: \"http://{v1}\", healthCheck: /healthz}}\n    canary: {{url: \"http://{v2}\", healthCheck: /healthz}}\n  plan: {{canary: {{stepWeights: {STEPS:?}}}}}\n  analysis: {{interval: 1s, progressDeadline: 1m, evidence: {{promoteOn: noHarm}}}}\n"
        ));
    }
    let rollouts = dir.file("rollouts.yaml");
    std::fs::write(&rollouts, file).unwrap();

    let (mut child, mut server) = serve(db);
    apply(env!("CARGO_BIN_EXE_weir"), &rollouts, &server);

    let mut random = Lcg(0x5eed_u64);
    let mut kills = 0;
    let mut kills_mid_run = 0;
    for _ in 0..6 {
        // Not synchronisation: the kill lands at a random moment on purpose.
        std::thread::sleep(Duration::from_millis(random.next_millis(300, 2500)));
        let listed = weir(&["get", "--output", "json", "--server", &server]);
        let before: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
        let progressing = before
            .as_array()
            .is_some_and(|items| items.iter().any(|r| r["status"]["phase"] == "Progressing"));
        kills_mid_run += usize::from(progressing);
        child.kill(); // SIGKILL
        kills += 1;
        (child, server) = serve(db);
    }

    assert!(
        kills_mid_run >= 3,
        "only {kills_mid_run} of {kills} kills hit a run in progress"
    );

    // Every run finishes.
    wait_until("every run to succeed", || {
        let listed = weir(&["get", "--output", "json", "--server", &server]);
        let rollouts: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
        let phases: Vec<String> = rollouts
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|r| r["status"]["phase"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            !phases.iter().any(|phase| phase == "Failed"),
            "a run failed: {rollouts}"
        );
        (phases.len() == names.len() && phases.iter().all(|phase| phase == "Succeeded"))
            .then_some(())
    });

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
    drop(child);
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
    let dir = TempDb::new();
    // A directory only these versions name, to find their processes by.
    let marker = dir.file("versions-of-this-test");
    std::fs::create_dir(&marker).unwrap();
    let marker = marker.display().to_string();
    let version = |name: &str| {
        std::fs::create_dir(format!("{marker}/{name}")).unwrap();
        format!(
            "{{command: [python3, -m, http.server, \"{{port}}\", --bind, 127.0.0.1, --directory, \"{marker}/{name}\"], healthCheck: /, startTimeout: 20s}}"
        )
    };
    let file = dir.file("rollout.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: started}}\nspec:\n  target:\n    kind: local\n    listen: \"127.0.0.1:0\"\n    primary: {primary}\n    canary: {canary}\n  plan: {{canary: {{steps: [{{weight: 10, pause: {{}}}}]}}}}\n  analysis: {{interval: 1s, progressDeadline: 1m}}\n",
            primary = version("v1"),
            canary = version("v2"),
        ),
    )
    .unwrap();
    let (mut child, server) = serve(&dir.path());
    apply(env!("CARGO_BIN_EXE_weir"), &file, &server);
    // Both versions run once the canary has its first step (it then waits at the pause).
    wait_until("the canary's first step", || {
        let listed = weir(&["get", "started", "--output", "json", "--server", &server]);
        let rollouts: Value = serde_json::from_slice(&listed.stdout).unwrap_or(Value::Null);
        (rollouts[0]["status"]["canaryWeight"] == 10).then_some(())
    });
    let running = processes_with(&marker);
    assert!(
        running.len() >= 2,
        "expected the two versions (and their guards), found {running:?}"
    );
    child.kill(); // SIGKILL: weir cleans nothing up itself
    // The guards stop their commands within seconds (TERM, then KILL after 5 s).
    wait_until_within(
        Duration::from_secs(30),
        "the versions weir started to stop after it was killed",
        || processes_with(&marker).is_empty().then_some(()),
    );
}
