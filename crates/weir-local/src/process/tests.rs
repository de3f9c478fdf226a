#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, TcpListener};

use super::*;

fn command(argv: &[&str]) -> VersionSpec {
    VersionSpec {
        url: None,
        command: Some(argv.iter().map(|arg| arg.to_string()).collect()),
        env: Default::default(),
        health_check: None,
        start_timeout: Some(weir_core::GoDuration::parse("30s").unwrap()),
    }
}

fn python_server() -> VersionSpec {
    command(&[
        "python3",
        "-m",
        "http.server",
        "{port}",
        "--bind",
        "127.0.0.1",
    ])
}

#[test]
fn picked_ports_are_free_and_below_the_ephemeral_range() {
    let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for _ in 0..20 {
        let port = pick_port().unwrap();
        assert!(
            (10_000..low).contains(&port),
            "{port} (ephemeral from {low})"
        );
    }
}

#[tokio::test]
async fn a_command_whose_port_is_taken_is_told_apart_from_one_that_fails() {
    let client = HttpClient::default();
    // Hold a port so the command cannot bind it.
    let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = held.local_addr().unwrap().port();
    match VersionProcess::start_on(&python_server(), &client, port).await {
        Err(StartFailure::PortTaken(reason)) => assert!(reason.contains("exited"), "{reason}"),
        Err(StartFailure::Failed(reason) | StartFailure::Unrunnable(reason)) => {
            panic!("not seen as a taken port: {reason}")
        }
        Ok(_) => panic!("started on a port someone else holds"),
    }
    drop(held);

    let failing = command(&["sh", "-c", "exit 3"]);
    let free = pick_port().unwrap();
    match VersionProcess::start_on(&failing, &client, free).await {
        Err(StartFailure::Failed(reason)) => assert!(reason.contains("exited"), "{reason}"),
        Err(StartFailure::PortTaken(reason) | StartFailure::Unrunnable(reason)) => {
            panic!("a failing command taken for a clash or an unrunnable one: {reason}")
        }
        Ok(_) => panic!("a command that exits became healthy"),
    }
}

#[tokio::test]
async fn a_program_that_does_not_exist_is_a_permanent_failure() {
    let client = HttpClient::default();
    let missing = command(&["./no-such-program-weir-test", "--port", "{port}"]);
    let Err(error) = VersionProcess::start(&missing, &client, &mut Vec::new()).await else {
        panic!("a missing program started");
    };
    assert!(error.is_permanent(), "{error}");
    assert!(error.message.contains("cannot be run"), "{error}");

    let failing = command(&["sh", "-c", "exit 3"]);
    let Err(error) = VersionProcess::start(&failing, &client, &mut Vec::new()).await else {
        panic!("a failing command started");
    };
    assert!(!error.is_permanent(), "{error}");
}

#[tokio::test]
async fn start_serves_on_the_port_it_reports_and_notes_nothing_without_a_clash() {
    let client = HttpClient::default();
    let mut notes = Vec::new();
    let mut process = VersionProcess::start(&python_server(), &client, &mut notes)
        .await
        .unwrap();
    let answer = client
        .get(
            &format!("http://{}/", process.address),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert!(answer.status.is_success());
    assert!(notes.is_empty(), "{notes:?}");
    process.stop_now().await;
}

/// A version whose command starts two background `sleep`s (marked) before it serves: the shape
/// `sh -c "worker & exec server"`. Its server's directory carries the marker too.
fn forking_server(marked: &weir_testkit::process::Marked, dir: &std::path::Path) -> VersionSpec {
    let served = dir.join(format!("served-{}", marked.0));
    std::fs::create_dir_all(&served).unwrap();
    let script = format!(
        "sleep 1001.{m} & sleep 1001.{m} & exec python3 -m http.server \"$PORT\" --bind 127.0.0.1 --directory {dir}",
        m = marked.0,
        dir = served.display(),
    );
    command(&["sh", "-c", &script])
}

/// Waits (generously) until no process carries the marker, and says what is left otherwise.
async fn wait_until_none_left(marked: &weir_testkit::process::Marked, after: &str) {
    weir_testkit::wait::wait_for_within(
        Duration::from_secs(30),
        &format!("every process of the version to end {after}"),
        || {
            let none = marked.processes().is_empty();
            async move { none.then_some(()) }
        },
    )
    .await;
}

#[tokio::test]
async fn stopping_a_version_stops_everything_its_command_started() {
    let client = HttpClient::default();
    let dir = tempfile::tempdir().unwrap();
    let marked = weir_testkit::process::Marked::new();
    let mut process = VersionProcess::start(
        &forking_server(&marked, dir.path()),
        &client,
        &mut Vec::new(),
    )
    .await
    .unwrap();
    // The guard (and its watcher), both sleeps and the server carry the marker.
    let running = marked.processes();
    assert!(running.len() >= 4, "{}", marked.describe());
    process.stop_now().await;
    wait_until_none_left(&marked, "after stop_now").await;
}

#[tokio::test]
async fn a_version_dropped_without_stopping_leaves_nothing_behind() {
    // What happens when weir's task holding it is cancelled, or weir itself dies: the pipe's
    // end closes with no one waiting, and the guard stops the group on its own.
    let client = HttpClient::default();
    let dir = tempfile::tempdir().unwrap();
    let marked = weir_testkit::process::Marked::new();
    let process = VersionProcess::start(
        &forking_server(&marked, dir.path()),
        &client,
        &mut Vec::new(),
    )
    .await
    .unwrap();
    assert!(marked.processes().len() >= 4, "{}", marked.describe());
    drop(process);
    wait_until_none_left(&marked, "after the version was dropped").await;
}

#[tokio::test]
async fn what_a_command_that_exits_on_its_own_started_ends_with_it() {
    let client = HttpClient::default();
    let dir = tempfile::tempdir().unwrap();
    let marked = weir_testkit::process::Marked::new();
    let served = dir.path().join(format!("served-{}", marked.0));
    std::fs::create_dir_all(&served).unwrap();
    let exit_now = dir.path().join("exit-now");
    // It serves from a background server, and exits with 4 once told to (a file appears).
    let script = format!(
        "sleep 1001.{m} & python3 -m http.server \"$PORT\" --bind 127.0.0.1 --directory {dir} & while [ ! -e {flag} ]; do sleep 0.05; done; exit 4",
        m = marked.0,
        dir = served.display(),
        flag = exit_now.display(),
    );
    let mut process =
        VersionProcess::start(&command(&["sh", "-c", &script]), &client, &mut Vec::new())
            .await
            .unwrap();
    assert!(process.is_running());
    std::fs::write(&exit_now, b"").unwrap();
    let status = weir_testkit::wait::wait_for("the command to exit", || {
        let exited = process.child.try_wait().unwrap();
        async move { exited }
    })
    .await;
    assert_eq!(
        status.code(),
        Some(4),
        "the guard exits with the command's status"
    );
    // Its sleep and its server got the guard's TERM; the guard's watcher (whose command line
    // carries the script, hence the marker) stays until weir lets go of the version.
    let not_the_watcher = |pid: &u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| !String::from_utf8_lossy(&cmdline).contains("weir-version"))
    };
    weir_testkit::wait::wait_for_within(
        Duration::from_secs(30),
        "what the command started to end after it exited",
        || {
            let left = marked.processes().iter().any(not_the_watcher);
            async move { (!left).then_some(()) }
        },
    )
    .await;
    drop(process);
    wait_until_none_left(&marked, "after the version was dropped").await;
}
