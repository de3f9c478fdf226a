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
