//! `weir serve --tls-cert --tls-key` and the client verbs' `--ca`, on the real binary over real
//! TLS on loopback, with a private CA made by `openssl` as docs/SECURITY.md ("TLS") shows.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_testkit::fixtures::{TempDb, runtime};
use weir_testkit::http;
use weir_testkit::process::{Guard, Weir};
use weir_testkit::tls::{TlsFiles, connect};
use weir_testkit::wait::{no_hang, wait_until};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `weir ARGS` to its end (a client verb), with no WEIR_* setting from the environment.
fn weir(args: &[&str]) -> Output {
    Command::new(WEIR)
        .args(args)
        .env_remove("WEIR_CA")
        .env_remove("WEIR_SERVER")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn path(path: &Path) -> String {
    path.display().to_string()
}

/// `weir serve` over HTTPS with `cert` and `key`.
fn serve_tls(db: &TempDb, cert: &Path, key: &Path) -> Weir {
    Weir::serve(
        WEIR,
        &db.path(),
        &["--tls-cert", &path(cert), "--tls-key", &path(key)],
    )
}

/// The flag `banner` in namespace `shop`.
fn banner() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/flags/banner-split.yaml")
        .display()
        .to_string()
}

#[test]
fn https_serves_clients_that_trust_its_ca_and_refuses_those_that_do_not() {
    let tls = TlsFiles::generate();
    let db = TempDb::new();
    let server = serve_tls(&db, &tls.cert, &tls.key);
    let port = server.address("api").port();
    let by_ip = format!("https://127.0.0.1:{port}");
    let by_name = format!("https://localhost:{port}");
    let ca = path(&tls.ca);

    let created = weir(&[
        "flag",
        "create",
        "-f",
        &banner(),
        "--server",
        &by_ip,
        "--ca",
        &ca,
    ]);
    println!(
        "weir flag create --server {by_ip} --ca ca.pem: {}",
        text(&created.stdout).trim()
    );
    assert!(created.status.success(), "{}", text(&created.stderr));
    let got = weir(&[
        "flag", "get", "banner", "-n", "shop", "--server", &by_name, "--ca", &ca, "-o", "json",
    ]);
    assert!(got.status.success(), "{}", text(&got.stderr));
    assert!(
        text(&got.stdout).contains("\"banner\""),
        "{}",
        text(&got.stdout)
    );
    // WEIR_CA does what --ca does.
    let listed = Command::new(WEIR)
        .args(["get", "--server", &by_ip])
        .env("WEIR_CA", &ca)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert_eq!(text(&listed.stdout).trim(), "no rollouts");

    // Without --ca the host's trust store is used, which does not know the test's CA.
    let untrusted = weir(&["get", "--server", &by_ip]);
    let stderr = text(&untrusted.stderr);
    println!("weir get --server {by_ip} (no --ca): {}", stderr.trim());
    assert_eq!(untrusted.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("certificate was not accepted")
            && stderr.contains("UnknownIssuer")
            && stderr.contains("--ca PEM"),
        "{stderr}"
    );
    // Another CA: refused, and the message names the file given.
    let stranger = path(&tls.other_ca);
    let wrong_ca = weir(&["get", "--server", &by_ip, "--ca", &stranger]);
    let stderr = text(&wrong_ca.stderr);
    println!("weir get --ca another-ca.pem: {}", stderr.trim());
    assert!(!wrong_ca.status.success());
    assert!(
        stderr.contains("UnknownIssuer") && stderr.contains(&format!("--ca {stranger}")),
        "{stderr}"
    );
    // --ca with a file holding no certificate (a key) is refused before any request.
    let not_a_ca = weir(&["get", "--server", &by_ip, "--ca", &path(&tls.key)]);
    let stderr = text(&not_a_ca.stderr);
    println!("weir get --ca key.pem: {}", stderr.trim());
    assert!(!not_a_ca.status.success());
    assert!(
        stderr.contains("--ca") && stderr.contains("no certificate in it"),
        "{stderr}"
    );
}

#[test]
fn the_server_name_is_verified() {
    let tls = TlsFiles::generate();
    let db = TempDb::new();
    // A certificate of the right CA, for other.test only: 127.0.0.1 is not its name.
    let server = serve_tls(&db, &tls.other_name_cert, &tls.other_key);
    let url = format!("https://127.0.0.1:{}", server.address("api").port());
    let refused = weir(&["get", "--server", &url, "--ca", &path(&tls.ca)]);
    let stderr = text(&refused.stderr);
    println!(
        "weir get --server {url} (certificate for other.test): {}",
        stderr.trim()
    );
    assert!(!refused.status.success());
    assert!(
        stderr.contains("certificate not valid for name \"127.0.0.1\"")
            && stderr.contains("other.test"),
        "{stderr}"
    );
}

#[test]
fn a_self_signed_certificate_is_its_own_ca() {
    let tls = TlsFiles::generate();
    let db = TempDb::new();
    let server = serve_tls(&db, &tls.self_signed, &tls.self_signed_key);
    let url = format!("https://localhost:{}", server.address("api").port());
    let got = weir(&["get", "--server", &url, "--ca", &path(&tls.self_signed)]);
    assert!(got.status.success(), "{}", text(&got.stderr));
    assert_eq!(text(&got.stdout).trim(), "no rollouts");
}

#[test]
fn plain_http_to_the_https_port_is_answered_400_and_slow_handshakes_block_no_one() {
    let tls = TlsFiles::generate();
    let db = TempDb::new();
    let server = serve_tls(&db, &tls.cert, &tls.key);
    let address = server.address("api");
    let https = format!("https://127.0.0.1:{}", address.port());
    let ca = path(&tls.ca);

    let answer = http::request(address, "GET", "/api/v1/rollouts", &[], "")
        .expect("an answer to plain HTTP");
    println!(
        "plain GET to the HTTPS port: {} {}",
        answer.status, answer.body
    );
    assert_eq!(answer.status, 400);
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["error"]["code"], "invalid");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("https://127.0.0.1:{}", address.port())),
        "{body}"
    );
    let plain = weir(&[
        "get",
        "--server",
        &format!("http://127.0.0.1:{}", address.port()),
    ]);
    let stderr = text(&plain.stderr);
    println!("weir get --server http://...: {}", stderr.trim());
    assert_eq!(plain.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("speaks HTTPS only"), "{stderr}");

    // Clients that connect and never finish a handshake (one silent, one stopping half-way
    // through a TLS record) do not hold up others.
    let silent = std::net::TcpStream::connect(address).unwrap();
    let mut half = std::net::TcpStream::connect(address).unwrap();
    std::io::Write::write_all(&mut half, &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).unwrap();
    let served = weir(&["get", "--server", &https, "--ca", &ca]);
    assert!(served.status.success(), "{}", text(&served.stderr));
    assert_eq!(text(&served.stdout).trim(), "no rollouts");
    drop((silent, half));
}

/// Reads `stream` into `seen` until it holds `needle`.
async fn read_until(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    needle: &str,
    seen: &mut String,
) {
    let mut buffer = [0u8; 4096];
    while !seen.contains(needle) {
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(read > 0, "the stream ended before {needle:?}: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }
}

#[test]
fn server_sent_events_arrive_over_tls_and_sigterm_stops_the_server() {
    let tls = TlsFiles::generate();
    let db = TempDb::new();
    let mut server = serve_tls(&db, &tls.cert, &tls.key);
    let address = server.address("api");
    let https = format!("https://127.0.0.1:{}", address.port());
    let ca = path(&tls.ca);
    let id = server.id().to_string();
    runtime().block_on(no_hang(async {
        let mut stream = connect(address, &tls.ca, "127.0.0.1").await;
        let request = "GET /api/v1/flags/watch HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                       Accept: text/event-stream\r\n\r\n";
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut seen = String::new();
        read_until(&mut stream, "watching flags", &mut seen).await;
        assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
        let banner = banner();
        let created = tokio::task::spawn_blocking(move || {
            weir(&[
                "flag", "create", "-f", &banner, "--server", &https, "--ca", &ca,
            ])
        })
        .await
        .unwrap();
        assert!(created.status.success(), "{}", text(&created.stderr));
        read_until(&mut stream, "event: flag", &mut seen).await;
        read_until(&mut stream, "banner", &mut seen).await;
        let events: Vec<&str> = seen
            .lines()
            .filter(|line| line.starts_with("event:"))
            .collect();
        println!("over TLS: {}", events.join(", "));

        // Graceful shutdown works as over plain HTTP: SIGTERM ends the open stream, then the
        // server exits.
        let sent = Command::new("kill").args(["-TERM", &id]).status().unwrap();
        assert!(sent.success());
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) => break,
                Ok(_) => continue,
                // A connection closed without TLS's close_notify also ends the stream.
                Err(error) => {
                    println!("the stream ended with {error}");
                    break;
                }
            }
        }
    }));
    let status = server.wait();
    assert!(
        status.success(),
        "weir serve exited with {status:?} after SIGTERM"
    );
}

#[test]
fn the_start_up_line_says_https() {
    let tls = TlsFiles::generate();
    let db = TempDb::new();
    let mut child = Guard::spawn(
        Command::new(WEIR)
            .args([
                "serve",
                "--db",
                &path(&db.path()),
                "--create-db",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(["--tls-cert", &path(&tls.cert), "--tls-key", &path(&tls.key)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let stderr = child.0.stderr.take().unwrap();
    let (sender, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let line = wait_until("the start-up line", || {
        lines.try_recv().ok().filter(|line| line.contains("API at"))
    });
    println!("{line}");
    assert!(line.contains("API at https://127.0.0.1:"), "{line}");
    assert!(line.contains("OFREP at https://"), "{line}");
    assert!(line.contains("dashboard at https://127.0.0.1:"), "{line}");
}

/// `weir serve` with `tls` arguments and environment, which must exit at once with an error;
/// returns what it printed.
fn refused_start(args: &[&str], env: &[(&str, &str)]) -> String {
    let db = TempDb::new();
    let mut child = Guard::spawn(
        Command::new(WEIR)
            .args([
                "serve",
                "--db",
                &path(&db.path()),
                "--listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .env_remove("WEIR_TLS_CERT")
            .env_remove("WEIR_TLS_KEY")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let status = wait_until("weir serve to refuse to start", || {
        child.0.try_wait().unwrap()
    });
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "weir serve {args:?} started: {stderr}");
    println!("weir serve {}: {}", args.join(" "), stderr.trim());
    stderr
}

#[test]
fn a_missing_or_mismatched_tls_file_refuses_to_start_naming_the_flag() {
    let tls = TlsFiles::generate();
    let (cert, key) = (path(&tls.cert), path(&tls.key));

    let only_cert = refused_start(&["--tls-cert", &cert], &[]);
    assert!(only_cert.contains("--tls-key is not"), "{only_cert}");
    let only_key_env = refused_start(&[], &[("WEIR_TLS_KEY", &key)]);
    assert!(only_key_env.contains("--tls-cert is not"), "{only_key_env}");

    let missing = path(&tls.dir.path().join("nowhere.pem"));
    let no_file = refused_start(&["--tls-cert", &missing, "--tls-key", &key], &[]);
    assert!(
        no_file.contains("--tls-cert")
            && no_file.contains(&missing)
            && no_file.contains("cannot read it"),
        "{no_file}"
    );
    let swapped = refused_start(&["--tls-cert", &key, "--tls-key", &cert], &[]);
    assert!(
        swapped.contains(&format!("{key}: no certificate in it")),
        "{swapped}"
    );
    let no_key = refused_start(&["--tls-cert", &cert, "--tls-key", &cert], &[]);
    assert!(
        no_key.contains(&format!("{cert}: no private key in it")),
        "{no_key}"
    );

    let other_key = path(&tls.other_key);
    let mismatched = refused_start(&["--tls-cert", &cert, "--tls-key", &other_key], &[]);
    assert!(
        mismatched.contains(&format!(
            "{other_key}: this key does not belong to the certificate in {cert}"
        )),
        "{mismatched}"
    );
}
