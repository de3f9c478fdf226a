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
