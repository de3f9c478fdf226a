//! `weir run` ended by a signal, with versions it starts itself whose commands start programs of
//! their own (`sh -c "sleep ... & sleep ... & exec weir sample-app ..."`): nothing they started
//! outlives weir, whether it is asked to stop (SIGTERM) or killed (SIGKILL). Every process of a
//! test carries a marker of its own (`sleep 1001.MARKER`, and the guards' command lines), found
//! by scanning /proc.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use weir_testkit::fixtures::TempDb;
use weir_testkit::process::{Marked, Weir};
use weir_testkit::wait::wait_until;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// A rollout of two command versions, each starting two marked background sleeps before it
/// execs the sample app; one step to 10% that pauses, so the run waits with both versions up.
fn forking_rollout(marked: &Marked) -> String {
    let version = |name: &str| {
        format!(
            "{{command: [sh, -c, \"sleep 1001.{m} & sleep 1001.{m} & exec {WEIR} sample-app --listen 127.0.0.1:$PORT --version {name}\"], healthCheck: /healthz, startTimeout: 60s}}",
            m = marked.0
        )
    };
    format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: forking}}\nspec:\n  target:\n    kind: local\n    listen: \"127.0.0.1:0\"\n    primary: {primary}\n    canary: {canary}\n  plan: {{canary: {{steps: [{{weight: 10, pause: {{}}}}]}}}}\n  analysis: {{interval: 1s, progressDeadline: 5m}}\n",
        primary = version("v1"),
        canary = version("v2"),
    )
}

/// The events `weir run --output json` printed so far.
fn events(run: &Weir) -> Vec<Value> {
    run.lines()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|line| line["event"].clone())
        .collect()
}

/// Starts `weir run` on the forking rollout and waits until both versions run (the canary's
/// first step, where the run pauses) and all four sleeps are up.
fn start_forking_run(dir: &TempDb, marked: &Marked) -> Weir {
    let file = dir.file("rollout.yaml");
    std::fs::write(&file, forking_rollout(marked)).unwrap();
    let run = Weir::start(
        WEIR,
        &[
            "run",
            &file.display().to_string(),
            "--db",
            &dir.path().display().to_string(),
            "--output",
            "json",
        ],
    );
    wait_until("the canary's first step", || {
        events(&run)
            .iter()
            .any(|event| event["reason"] == "Advanced" && event["canaryWeight"] == 10)
            .then_some(())
    });
    let sleeps = || {
        marked
            .processes()
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmdline| cmdline.starts_with(b"sleep\0"))
            })
            .count()
    };
    wait_until("the four background sleeps", || {
        (sleeps() == 4).then_some(())
    });
    run
}

#[test]
fn nothing_a_command_version_started_outlives_weir_run_stopped_by_sigterm() {
    let dir = TempDb::new();
    let marked = Marked::new();
    let mut run = start_forking_run(&dir, &marked);
    run.signal("TERM");
    run.wait();
    marked.wait_until_gone(Duration::from_secs(30), "after SIGTERM of weir run");
}

#[test]
fn nothing_a_command_version_started_outlives_weir_run_killed_by_sigkill() {
    let dir = TempDb::new();
    let marked = Marked::new();
    let mut run = start_forking_run(&dir, &marked);
    run.kill(); // SIGKILL: weir cleans up nothing itself
    marked.wait_until_gone(Duration::from_secs(30), "after SIGKILL of weir run");
}
