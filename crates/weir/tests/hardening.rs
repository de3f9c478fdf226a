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

/// A request with two `Host` headers is answered 400 (RFC 9112, 3.2), on every route.
#[test]
fn a_request_with_two_host_headers_is_refused() {
    let db = TempDb::new();
    let server = Weir::serve(WEIR, &db.path(), &[]);
    for path in ["/healthz", "/api/v1/rollouts"] {
        let answer = http::raw(
            server.address("api"),
            &format!(
                "GET {path} HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
            ),
        )
        .unwrap();
        println!(
            "two Host headers on {path}: {} {}",
            answer.status, answer.body
        );
        assert_eq!(answer.status, 400, "{}", answer.body);
        let body = json(&answer);
        assert_eq!(body["error"]["code"], "invalid");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("2 Host headers"),
            "{body}"
        );
    }
    assert_eq!(send(&server, "GET", "/healthz", &[], "").status, 200);
}

/// Each route's 413 names the limit it applies: 64 KiB on the session and token routes, 4 MiB
/// on documents; OFREP answers in its own error shape.
#[test]
fn bodies_over_the_limit_are_refused_naming_the_route_s_limit() {
    let db = TempDb::new();
    let server = Weir::serve(WEIR, &db.path(), &[]);
    let big = format!(
        r#"{{"name":"x","scope":"read","pad":"{}"}}"#,
        "x".repeat(70 * 1024)
    );
    for path in ["/api/v1/tokens", "/api/v1/session"] {
        let answer = send(&server, "POST", path, &[JSON], &big);
        println!("70 KiB to {path}: {} {}", answer.status, answer.body);
        assert_eq!(answer.status, 413, "{}", answer.body);
        let body = json(&answer);
        assert_eq!(body["error"]["code"], "payload_too_large");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("65536 bytes (64 KiB)"), "{message}");
    }
    let huge = format!(
        r#"{{"context":{{"pad":"{}"}}}}"#,
        "x".repeat(5 * 1024 * 1024)
    );
    for (path, key) in [
        ("/ofrep/v1/evaluate/flags/banner", Some("banner")),
        ("/ofrep/v1/evaluate/flags", None),
    ] {
        let answer = send(&server, "POST", path, &[JSON], &huge);
        println!("5 MiB to {path}: {} {}", answer.status, answer.body);
        assert_eq!(answer.status, 413, "{}", answer.body);
        let body = json(&answer);
        assert_eq!(body["errorCode"], "GENERAL", "{body}");
        assert!(
            body["errorDetails"]
                .as_str()
                .unwrap()
                .contains("4194304 bytes (4 MiB)"),
            "{body}"
        );
        match key {
            Some(key) => assert_eq!(body["key"], key),
            None => assert!(body.get("key").is_none(), "{body}"),
        }
    }
}

/// A flag split 50/50 by targetingKey, in namespace default.
const SPLIT_FLAG: &str = "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: banner, namespace: default}
spec:
  variations: [{name: blue, value: blue}, {name: green, value: green}]
  defaultStrategy: {weights: {blue: 50, green: 50}}
";

/// OFREP bulk answers 304 to its ETag sent back weak (`W/"..."`) or to `*`, and a different
/// tag gets the evaluation; an empty targetingKey is no key, so a split answers
/// TARGETING_KEY_MISSING (it used to be bucketed like any other key).
#[test]
fn ofrep_honours_weak_and_star_if_none_match_and_an_empty_key_is_missing() {
    let db = TempDb::new();
    let server = Weir::serve(WEIR, &db.path(), &[]);
    let created = send(
        &server,
        "POST",
        "/api/v1/flags",
        &[("Content-Type", "application/yaml")],
        SPLIT_FLAG,
    );
    assert!(
        created.status == 201 || created.status == 200,
        "{}",
        created.body
    );
    let context = r#"{"context":{"targetingKey":"alice"}}"#;
    let first = send(
        &server,
        "POST",
        "/ofrep/v1/evaluate/flags",
        &[JSON],
        context,
    );
    assert_eq!(first.status, 200, "{}", first.body);
    let tag = first.header("etag").unwrap().to_string();
    assert!(tag.starts_with('"'), "{tag}");
    let weak = format!("W/{tag}");
    for given in [
        tag.as_str(),
        weak.as_str(),
        "*",
        &format!("\"other\", {weak}"),
    ] {
        let again = send(
            &server,
            "POST",
            "/ofrep/v1/evaluate/flags",
            &[JSON, ("If-None-Match", given)],
            context,
        );
        println!("If-None-Match: {given} -> {}", again.status);
        assert_eq!(again.status, 304, "If-None-Match: {given}: {}", again.body);
        assert_eq!(again.header("etag"), Some(tag.as_str()));
    }
    let other = send(
        &server,
        "POST",
        "/ofrep/v1/evaluate/flags",
        &[JSON, ("If-None-Match", "W/\"other\"")],
        context,
    );
    assert_eq!(other.status, 200, "{}", other.body);

    for body in [
        r#"{"context":{"targetingKey":""}}"#,
        r#"{"context":{"targetingKey":"  "}}"#,
        r#"{"context":{}}"#,
    ] {
        let one = send(
            &server,
            "POST",
            "/ofrep/v1/evaluate/flags/banner",
            &[JSON],
            body,
        );
        println!("{body} -> {} {}", one.status, one.body);
        assert_eq!(one.status, 400, "{body}: {}", one.body);
        assert_eq!(json(&one)["errorCode"], "TARGETING_KEY_MISSING", "{body}");
        let bulk = send(&server, "POST", "/ofrep/v1/evaluate/flags", &[JSON], body);
        assert_eq!(bulk.status, 200, "{}", bulk.body);
        assert_eq!(
            json(&bulk)["flags"][0]["errorCode"],
            "TARGETING_KEY_MISSING",
            "{body}: {}",
            bulk.body
        );
    }
    let keyed = send(
        &server,
        "POST",
        "/ofrep/v1/evaluate/flags/banner",
        &[JSON],
        context,
    );
    assert_eq!(keyed.status, 200, "{}", keyed.body);
}

/// After more bad tokens than the limit from one address, its bad tokens get 429 and its good
/// token still works, on the API and for logging in (many users behind one proxy are not locked
/// out by one of them).
#[test]
fn bad_tokens_from_an_address_do_not_lock_out_its_valid_token() {
    let db = TempDb::new();
    let path = db.path().display().to_string();
    let created = output(
        WEIR,
        &[
            "token", "create", "--name", "good", "--scope", "read", "--db", &path,
        ],
    );
    assert!(created.status.success(), "{}", text(&created.stderr));
    let good = text(&created.stdout).trim().to_string();
    let server = Weir::serve(WEIR, &db.path(), &[]);
    for attempt in 1..=15 {
        let bad = send(
            &server,
            "GET",
            "/api/v1/rollouts",
            &[("X-API-Key", &format!("weir_guess{attempt}"))],
            "",
        );
        let expected = if attempt <= 10 { 401 } else { 429 };
        assert_eq!(bad.status, expected, "attempt {attempt}: {}", bad.body);
    }
    let limited = send(&server, "GET", "/api/v1/rollouts", &[], "");
    assert_eq!(
        limited.status, 429,
        "no token from a limited address: {}",
        limited.body
    );
    assert!(limited.header("retry-after").is_some());
    let bearer = format!("Bearer {good}");
    let with_good = send(
        &server,
        "GET",
        "/api/v1/rollouts",
        &[("Authorization", &bearer)],
        "",
    );
    println!("after 15 bad tokens, the good one: {}", with_good.status);
    assert_eq!(with_good.status, 200, "{}", with_good.body);
    let login = send(
        &server,
        "POST",
        "/api/v1/session",
        &[JSON],
        &format!(r#"{{"token":"{good}"}}"#),
    );
    assert_eq!(login.status, 200, "{}", login.body);
    let bad_login = send(
        &server,
        "POST",
        "/api/v1/session",
        &[JSON],
        r#"{"token":"weir_guess16"}"#,
    );
    assert_eq!(bad_login.status, 429, "{}", bad_login.body);
}

/// A local rollout held at its first step (nothing needs to answer at its URLs), with `pad`
/// bytes of annotation to make its listing large.
fn held_rollout(name: &str, pad: usize) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}, annotations: {{pad: \"{}\"}}}}
spec:
  target: {{kind: local, listen: \"127.0.0.1:0\", primary: {{url: \"http://127.0.0.1:9\"}}, canary: {{url: \"http://127.0.0.1:9\"}}}}
  plan: {{canary: {{steps: [{{weight: 20, pause: {{}}}}]}}}}
",
        "x".repeat(pad)
    )
}

/// Client verbs whose reader goes away (`weir status NAME | head -1`) end quietly with status
/// 0: no panic (it used to be exit 101, "failed printing to stdout: Broken pipe").
#[test]
fn client_verbs_exit_quietly_on_a_closed_pipe() {
    let db = TempDb::new();
    let server = Weir::serve(WEIR, &db.path(), &[]);
    let applied = send(
        &server,
        "POST",
        "/api/v1/rollouts",
        &[("Content-Type", "application/yaml")],
        &held_rollout("piped", 10),
    );
    assert!(
        applied.status == 201 || applied.status == 200,
        "{}",
        applied.body
    );
    let url = server.url("api");
    let db_path = db.path().display().to_string();
    for args in [
        vec!["status", "piped", "--server", &url],
        vec!["get", "--server", &url],
        vec!["get", "-o", "json", "--server", &url],
        vec!["history", "piped", "--server", &url],
        vec!["flag", "list", "--server", &url],
        vec!["token", "list", "--db", &db_path],
    ] {
        if args[0] == "token" {
            // Something to list (the server's verbs ran first: it is open until now).
            let created = output(
                WEIR,
                &[
                    "token", "create", "--name", "t", "--scope", "read", "--db", &db_path,
                ],
            );
            assert!(created.status.success(), "{}", text(&created.stderr));
        }
        let mut child = std::process::Command::new(WEIR)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader is gone before weir writes a byte: its first write meets a closed pipe.
        drop(child.stdout.take());
        let ended = child.wait_with_output().unwrap();
        let stderr = text(&ended.stderr);
        println!(
            "weir {} with its stdout closed: {}",
            args.join(" "),
            ended.status
        );
        assert!(!stderr.contains("panicked"), "weir {args:?}: {stderr}");
        assert_eq!(ended.status.code(), Some(0), "weir {args:?}: {stderr}");
    }
}

/// `weir get` reads lists whose pages are larger than 64 KiB and follows the list's cursors to
/// its end (it used to fail past 64 KiB: "answered with a body this weir cannot read").
#[test]
fn weir_get_reads_large_lists_page_by_page() {
    const ROLLOUTS: usize = 110;
    let db = TempDb::new();
    let server = Weir::serve(WEIR, &db.path(), &[]);
    for index in 0..ROLLOUTS {
        let applied = send(
            &server,
            "POST",
            "/api/v1/rollouts",
            &[("Content-Type", "application/yaml")],
            &held_rollout(&format!("r{index:03}"), 2048),
        );
        assert!(
            applied.status == 201 || applied.status == 200,
            "{}",
            applied.body
        );
    }
    // The API pages: a first page of 100 is over 64 KiB and has a cursor to the rest.
    let page = send(&server, "GET", "/api/v1/rollouts?limit=100", &[], "");
    assert_eq!(page.status, 200);
    println!("a page of 100 rollouts: {} bytes", page.body.len());
    assert!(page.body.len() > 64 * 1024, "{} bytes", page.body.len());
    assert!(json(&page)["nextCursor"].is_string(), "no cursor");

    let url = server.url("api");
    let listed = output(WEIR, &["get", "--server", &url]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let table = text(&listed.stdout);
    assert_eq!(table.lines().count(), ROLLOUTS + 1, "{table}");
    assert!(table.lines().any(|line| line.contains("r109")), "{table}");
    let as_json = output(WEIR, &["get", "-o", "json", "--server", &url]);
    assert!(as_json.status.success(), "{}", text(&as_json.stderr));
    let items: Value = serde_json::from_slice(&as_json.stdout).unwrap();
    assert_eq!(items.as_array().unwrap().len(), ROLLOUTS);
    let one = output(WEIR, &["get", "r042", "--server", &url]);
    assert!(one.status.success(), "{}", text(&one.stderr));
}
