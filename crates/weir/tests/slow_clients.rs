//! Slow and idle clients against the real `weir serve` (issue 32): connections that send half a
//! request head are closed after `--header-read-timeout` while `/healthz` keeps answering, a
//! listener keeps at most `--max-connections`, and SIGTERM stops the server within
//! `--shutdown-grace` however many such clients are connected. Bounded counts over loopback;
//! the timeouts are shortened, and every wait has the testkit's generous deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::process::{Weir, output};
use weir_testkit::wait::{DEADLINE, wait_until};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// `count` connections that each send the first half of a request head and stop.
fn half_heads(address: SocketAddr, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|_| {
            let mut stream = TcpStream::connect(address).unwrap();
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .unwrap();
            stream
        })
        .collect()
}

/// Waits until the server closes `stream` (end of stream or reset) and returns what it sent
/// before.
fn closed_by_server(stream: &mut TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut read = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return read,
            Ok(n) => read.extend_from_slice(&buffer[..n]),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("the server left a connection open for {DEADLINE:?}")
            }
            Err(_) => return read,
        }
    }
}

fn healthz(server: &Weir) -> u16 {
    http::get(server.address("api"), "/healthz").map_or(0, |answer| answer.status)
}

#[test]
fn half_sent_request_heads_are_closed_after_the_header_read_timeout() {
    const SLOW: usize = 50;
    let timeout = Duration::from_secs(2);
    let db = TempDb::new();
    let server = Weir::serve(
        WEIR,
        &db.path(),
        &["--header-read-timeout", "2s", "--idle-timeout", "10m"],
    );
    let started = Instant::now();
    let mut slow = half_heads(server.address("api"), SLOW);
    // While they hang, the server answers others.
    assert_eq!(healthz(&server), 200);
    for stream in &mut slow {
        let sent = closed_by_server(stream);
        assert!(sent.is_empty(), "{}", String::from_utf8_lossy(&sent));
    }
    let elapsed = started.elapsed();
    println!("{SLOW} half-sent request heads closed after {elapsed:?} (--header-read-timeout 2s)");
    assert!(elapsed >= timeout, "closed before the timeout: {elapsed:?}");
    assert_eq!(healthz(&server), 200);
}

#[test]
fn a_listener_keeps_at_most_max_connections_and_answers_503_beyond() {
    let db = TempDb::new();
    let server = Weir::serve(
        WEIR,
        &db.path(),
        &["--max-connections", "20", "--header-read-timeout", "10m"],
    );
    let slow = half_heads(server.address("api"), 20);
    // The 21st connection is refused at once, saying why. (The slow ones stay open as long as
    // the test needs: the header-read timeout is tested above.)
    let refused = wait_until("the connection limit to be reached", || {
        http::get(server.address("api"), "/healthz").filter(|answer| answer.status == 503)
    });
    assert_eq!(refused.header("retry-after"), Some("1"), "{}", refused.head);
    assert!(
        refused.body.contains("--max-connections"),
        "{}",
        refused.body
    );
    assert!(refused.body.contains("\"unavailable\""), "{}", refused.body);
    // Once the slow ones are gone, others are served again.
    drop(slow);
    wait_until("the server to answer again", || {
        (healthz(&server) == 200).then_some(())
    });
}

/// Half-sent heads (no request to finish) and requests whose bodies never come (requests in
/// progress, which get the grace period) do not keep a stopping server alive.
#[test]
fn sigterm_stops_the_server_within_the_grace_period_with_slow_clients_connected() {
    let db = TempDb::new();
    let mut server = Weir::serve(
        WEIR,
        &db.path(),
        &[
            "--header-read-timeout",
            "10m",
            "--idle-timeout",
            "10m",
            "--shutdown-grace",
            "2s",
        ],
    );
    let address = server.address("api");
    let _heads = half_heads(address, 50);
    let _bodies: Vec<TcpStream> = (0..5)
        .map(|_| {
            let mut stream = TcpStream::connect(address).unwrap();
            stream
                .write_all(
                    b"POST /api/v1/rollouts HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/yaml\r\nContent-Length: 1000\r\n\r\napiVersion: weir.dev/v1alpha1\n",
                )
                .unwrap();
            stream
        })
        .collect();
    assert_eq!(healthz(&server), 200);
    let signalled = Instant::now();
    server.signal("TERM");
    let status = server.wait();
    let elapsed = signalled.elapsed();
    println!(
        "SIGTERM with 50 half-sent heads and 5 stalled bodies: exited {status} after {elapsed:?} (--shutdown-grace 2s)"
    );
    assert!(status.success(), "{status}");
    assert!(
        elapsed >= Duration::from_secs(2),
        "the requests in progress did not get their grace period: {elapsed:?}"
    );
}

#[test]
fn the_settings_are_in_help_and_bad_values_are_refused_naming_the_flag() {
    let help = output(WEIR, &["serve", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--header-read-timeout <DURATION>",
        "--idle-timeout <DURATION>",
        "--max-connections <N>",
        "--shutdown-grace <DURATION>",
    ] {
        assert!(
            help.contains(flag),
            "{flag} is not in weir serve --help:\n{help}"
        );
    }
    for (flag, value, says) in [
        ("--header-read-timeout", "0s", "above zero"),
        ("--idle-timeout", "soon", "invalid duration"),
        ("--max-connections", "0", "from 1 to"),
        ("--shutdown-grace", "1y", "invalid duration unit"),
    ] {
        let refused = output(WEIR, &["serve", "--listen", "127.0.0.1:0", flag, value]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
        assert!(stderr.contains(says), "{flag} {value}: {stderr}");
    }
}

/// `weir run --listen` and `--metrics-listen` serve with the same limits: half-sent heads on
/// both are closed after `--header-read-timeout` while both keep answering.
#[test]
fn weir_run_listeners_close_half_sent_heads_too() {
    let runtime = weir_testkit::fixtures::runtime();
    let versions = weir_testkit::fixtures::sample_apps(&runtime, &["v1", "v2"]);
    // A confirm-promotion gate whose hook refuses connections: the run waits there, serving.
    let gate = weir_testkit::fixtures::ClosedPort::new();
    let dir = TempDb::new();
    let file = dir.file("rollout.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: slow}}\nspec:\n  target:\n    kind: local\n    listen: \"127.0.0.1:0\"\n    primary: {{url: \"http://{}\"}}\n    canary: {{url: \"http://{}\"}}\n  plan: {{canary: {{stepWeights: [50]}}}}\n  analysis:\n    interval: 1s\n    progressDeadline: 1h\n    evidence: {{promoteOn: noHarm}}\n    webhooks:\n      - {{name: release, type: confirm-promotion, url: \"http://{}/\", timeout: 1s}}\n",
            versions[0],
            versions[1],
            gate.address()
        ),
    )
    .unwrap();
    let file = file.display().to_string();
    let db = dir.path().display().to_string();
    let run = Weir::start(
        WEIR,
        &[
            "run",
            &file,
            "--db",
            &db,
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--header-read-timeout",
            "1s",
            "--output",
            "json",
        ],
    );
    for name in ["api", "metrics"] {
        let address = run.address(name);
        let mut slow = half_heads(address, 10);
        let path = if name == "api" {
            "/healthz"
        } else {
            "/metrics"
        };
        assert_eq!(
            http::get(address, path).map(|answer| answer.status),
            Some(200)
        );
        for stream in &mut slow {
            assert!(closed_by_server(stream).is_empty());
        }
        assert_eq!(
            http::get(address, path).map(|answer| answer.status),
            Some(200)
        );
    }
}
