//! The smaller refusals of issue 32 against the real `weir serve` and `weir token`: each asked
//! over loopback, as an attacker or a careless operator would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::process::{Weir, output};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn send(
    server: &Weir,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> http::Response {
    http::request(server.address("api"), method, path, headers, body)
        .unwrap_or_else(|| panic!("no answer to {method} {path}"))
}

fn json(answer: &http::Response) -> Value {
    serde_json::from_str(&answer.body)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {}", answer.body))
}

/// `namespaces: []` is refused with 422 naming the field, on the API and by `weir token
/// create`; nothing is created (it used to make a token of every namespace).
#[test]
fn an_empty_namespace_list_is_refused_not_taken_as_all() {
    let db = TempDb::new();
    let server = Weir::serve(WEIR, &db.path(), &[]);
    let refused = send(
        &server,
        "POST",
        "/api/v1/tokens",
        &[JSON],
        r#"{"name":"x","scope":"read","namespaces":[]}"#,
    );
    println!(
        "POST /api/v1/tokens namespaces: []: {} {}",
        refused.status, refused.body
    );
    assert_eq!(refused.status, 422, "{}", refused.body);
    let body = json(&refused);
    assert_eq!(body["error"]["code"], "unprocessable");
    assert_eq!(body["error"]["errors"][0]["path"], "namespaces");
    let message = body["error"]["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("at least one namespace") && message.contains("left out"),
        "{message}"
    );
    // Nothing was created, so the server is still open and has no token.
    let listed = send(&server, "GET", "/api/v1/tokens", &[], "");
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(json(&listed)["items"], serde_json::json!([]));
    // Left out: every namespace.
    let all = send(
        &server,
        "POST",
        "/api/v1/tokens",
        &[JSON],
        r#"{"name":"everywhere","scope":"read"}"#,
    );
    assert_eq!(all.status, 201, "{}", all.body);
    assert_eq!(json(&all)["namespaces"], Value::Null);
    drop(server);

    // The CLI has no way to send an empty list: no --namespace means every namespace, and an
    // empty one is not a namespace.
    let db = db.path().display().to_string();
    let empty = output(
        WEIR,
        &[
            "token",
            "create",
            "--name",
            "y",
            "--scope",
            "read",
            "--namespace",
            "",
            "--db",
            &db,
        ],
    );
    let stderr = String::from_utf8_lossy(&empty.stderr);
    assert!(!empty.status.success(), "{stderr}");
    assert!(stderr.contains("namespaces[0]"), "{stderr}");
    let created = output(
        WEIR,
        &[
            "token", "create", "--name", "z", "--scope", "read", "--db", &db, "-o", "json",
        ],
    );
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let created: Value = serde_json::from_slice(&created.stdout).unwrap();
    assert_eq!(created["namespaces"], Value::Null);
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `--db` never creates a directory, and a new database file only where asked for: with
/// `--create-db`, or at the default path (created with its directory, private to the user);
/// each creation says so naming the path.
#[test]
fn serve_creates_a_database_only_where_asked_and_never_a_directory() {
    let dir = TempDb::new();
    let missing_dir = dir.file("nonexistent/dir");
    let in_missing_dir = missing_dir.join("x.db").display().to_string();
    let refused = output(
        WEIR,
        &["serve", "--db", &in_missing_dir, "--listen", "127.0.0.1:0"],
    );
    let stderr = text(&refused.stderr);
    println!(
        "weir serve --db {in_missing_dir}: {} {stderr}",
        refused.status
    );
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains(&in_missing_dir), "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(!dir.file("nonexistent").exists(), "a directory was created");
    // Even when asked to create the file: its directory must exist.
    let refused = output(
        WEIR,
        &[
            "serve",
            "--db",
            &in_missing_dir,
            "--create-db",
            "--listen",
            "127.0.0.1:0",
        ],
    );
    let stderr = text(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains(&missing_dir.display().to_string()),
        "{stderr}"
    );
    assert!(!dir.file("nonexistent").exists(), "a directory was created");

    // The directory exists, the file does not: refused without --create-db.
    let new = dir.file("new.db").display().to_string();
    let refused = output(WEIR, &["serve", "--db", &new, "--listen", "127.0.0.1:0"]);
    let stderr = text(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains(&new) && stderr.contains("--create-db"),
        "{stderr}"
    );
    assert!(!dir.file("new.db").exists());
    // With it, created and said.
    let server = Weir::start_capturing_stderr(
        WEIR,
        &[
            "serve",
            "--db",
            &new,
            "--create-db",
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
        ],
        &[],
    );
    assert!(dir.file("new.db").exists());
    let said = server.stderr_lines().join("\n");
    assert!(
        said.contains(&format!(
            "weir serve: created a new database at {new} (--create-db)"
        )),
        "{said}"
    );
    drop(server);
    // An existing file is opened without a word about creating.
    let server = Weir::start_capturing_stderr(
        WEIR,
        &[
            "serve",
            "--db",
            &new,
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
        ],
        &[],
    );
    assert!(!server.stderr_lines().join("\n").contains("created"));
    drop(server);

    // The default path: $XDG_STATE_HOME/weir/weir.db, made with its directory.
    let state = dir.file("state");
    let server = Weir::start_capturing_stderr(
        WEIR,
        &["serve", "--listen", "127.0.0.1:0", "--output", "json"],
        &[("XDG_STATE_HOME", &state.display().to_string())],
    );
    let default = state.join("weir/weir.db");
    assert!(default.exists());
    let said = server.stderr_lines().join("\n");
    assert!(
        said.contains(&format!("created a new database at {}", default.display())),
        "{said}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state.join("weir"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    }
}

/// `weir token create` makes a new database (it then holds the token, so a server on it is
/// never open), never its directory; `list` and `revoke` create nothing; a create that fails
/// leaves no empty database behind.
#[test]
fn weir_token_creates_a_database_only_with_a_token_in_it() {
    let dir = TempDb::new();
    let listed_path = dir.file("listed.db");
    let listed = output(
        WEIR,
        &["token", "list", "--db", &listed_path.display().to_string()],
    );
    let stderr = text(&listed.stderr);
    assert!(!listed.status.success(), "{stderr}");
    assert!(
        stderr.contains(&listed_path.display().to_string()),
        "{stderr}"
    );
    assert!(!listed_path.exists());

    let in_missing_dir = dir.file("missing/t.db").display().to_string();
    let refused = output(
        WEIR,
        &[
            "token",
            "create",
            "--name",
            "a",
            "--scope",
            "admin",
            "--db",
            &in_missing_dir,
        ],
    );
    let stderr = text(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(!dir.file("missing").exists());

    let bad_path = dir.file("bad.db");
    let bad = output(
        WEIR,
        &[
            "token",
            "create",
            "--name",
            "Not A Name",
            "--scope",
            "admin",
            "--db",
            &bad_path.display().to_string(),
        ],
    );
    let stderr = text(&bad.stderr);
    assert!(!bad.status.success(), "{stderr}");
    assert!(
        !bad_path.exists(),
        "an empty database was left behind: {stderr}"
    );

    let path = dir.file("tokens.db").display().to_string();
    let created = output(
        WEIR,
        &[
            "token", "create", "--name", "a", "--scope", "admin", "--db", &path,
        ],
    );
    let stderr = text(&created.stderr);
    assert!(created.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("weir token: created a new database at {path}")),
        "{stderr}"
    );
    // The server on it is not open.
    let server = Weir::serve(WEIR, std::path::Path::new(&path), &[]);
    assert_eq!(
        send(&server, "GET", "/api/v1/rollouts", &[], "").status,
        401
    );
}
