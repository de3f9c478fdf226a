//! `weir run` ended by a signal, with versions it starts itself whose commands start programs of
//! their own (`sh -c "sleep ... & sleep ... & exec weir sample-app ..."`): nothing they started
//! outlives weir, whether it is asked to stop (SIGTERM, Ctrl-C) or killed (SIGKILL); asked to
//! stop, it says why in the rollout's history and exits with 128 + the signal's number. And a
//! local rollout whose listen address another program holds says so, with the address: `weir
//! run` before it starts, `weir serve` in the rollout's history. Every process of a
//! test carries a marker of its own (`sleep 1001.MARKER`, and the guards' command lines), found
//! by scanning /proc.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::Value;
use weir_core::model::EventReason;
use weir_store::{RolloutKey, SqliteStore, Store};
use weir_testkit::fixtures::{TempDb, runtime};
use weir_testkit::process::{Marked, Weir, apply, output};
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

/// Ends `weir run` with `signal` and checks it ends like a run does: its exit code, why in its
/// output and in the history stored in its database, and none of its versions' processes left.
fn stopped_by(signal: &str, code: i32) {
    let dir = TempDb::new();
    let marked = Marked::new();
    let mut run = start_forking_run(&dir, &marked);
    run.signal(signal);
    let status = run.wait();
    assert_eq!(
        status.code(),
        Some(code),
        "weir run ends with 128 + the signal's number, not by the signal: {status}"
    );
    let why = format!("stopped by SIG{signal}");
    let printed = events(&run);
    assert!(
        printed.iter().any(|event| event["reason"] == "Target"
            && event["message"].as_str().unwrap().starts_with(&why)),
        "{why} is not in the output: {printed:#?}"
    );
    marked.wait_until_gone(
        Duration::from_secs(30),
        &format!("after SIG{signal} of weir run"),
    );
    // The history in the database says so too, once weir is gone.
    let stored = runtime().block_on(async {
        let store = SqliteStore::open(&dir.path()).await.unwrap();
        store
            .events(
                &RolloutKey::new("default", "forking"),
                0,
                weir_store::MAX_PAGE,
            )
            .await
            .unwrap()
    });
    let last = stored.last().unwrap();
    assert_eq!(last.event.reason, EventReason::Target, "{last:?}");
    assert!(last.event.message.starts_with(&why), "{last:?}");
    assert_eq!(
        last.event.run, 1,
        "recorded in the run it interrupted: {last:?}"
    );
}

#[test]
fn weir_run_stopped_by_sigterm_stops_everything_its_versions_started_and_says_why() {
    stopped_by("TERM", 143);
}

#[test]
fn weir_run_stopped_by_ctrl_c_stops_everything_its_versions_started_and_says_why() {
    stopped_by("INT", 130);
}

#[test]
fn nothing_a_command_version_started_outlives_weir_run_killed_by_sigkill() {
    let dir = TempDb::new();
    let marked = Marked::new();
    let mut run = start_forking_run(&dir, &marked);
    run.kill(); // SIGKILL: weir cleans up nothing itself
    marked.wait_until_gone(Duration::from_secs(30), "after SIGKILL of weir run");
}

/// A local rollout listening on `listen`, its versions at a port where nothing answers.
fn rollout_listening_on(listen: std::net::SocketAddr) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: taken}}\nspec:\n  target:\n    kind: local\n    listen: \"{listen}\"\n    primary: {{url: \"http://127.0.0.1:9\"}}\n    canary: {{url: \"http://127.0.0.1:9\"}}\n  plan: {{canary: {{steps: [{{weight: 10}}]}}}}\n  analysis: {{interval: 1s, progressDeadline: 5m}}\n"
    )
}

#[test]
fn weir_run_on_an_address_another_program_holds_says_which_and_exits_2() {
    let dir = TempDb::new();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = held.local_addr().unwrap();
    let file = dir.file("rollout.yaml");
    std::fs::write(&file, rollout_listening_on(address)).unwrap();
    let ran = output(
        WEIR,
        &[
            "run",
            &file.display().to_string(),
            "--db",
            &dir.path().display().to_string(),
        ],
    );
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot listen on {address} (spec.target.listen): the address is in use by another program"
        )),
        "{stderr}"
    );
    drop(held);
}

#[test]
fn a_served_rollout_whose_address_another_program_holds_says_so_in_its_history() {
    let dir = TempDb::new();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = held.local_addr().unwrap();
    let file = dir.file("rollout.yaml");
    std::fs::write(&file, rollout_listening_on(address)).unwrap();
    let server = Weir::serve(WEIR, &dir.path(), &[]);
    let api = server.url("api");
    apply(WEIR, &file, &api);
    let said = format!(
        "the router cannot listen on {address} (spec.target.listen): the address is in use by another program"
    );
    let history = wait_until("the history to say the address is taken", || {
        let shown = output(WEIR, &["history", "taken", "--server", &api]);
        let text = String::from_utf8_lossy(&shown.stdout).into_owned();
        text.contains(&said).then_some(text)
    });
    assert_eq!(history.matches(&said).count(), 1, "said once: {history}");
    drop(held);
}
