//! Tokens and scopes (issue 14) on the real `weir` binary over real HTTP: every route by every
//! scope, in and out of a token's namespaces (one table, printed as it runs); expired and
//! revoked tokens; the rate limit of bad tokens; the session cookie's flags and CSRF; secrets
//! absent from the server's log and the history; `weir token create` then `weir get --token`;
//! and `weir serve` refusing a non-loopback address without tokens.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

// === helpers ===

/// `weir token create` on `db`; returns the secret (the only line on stdout).
fn create_token(db: &Path, name: &str, scope: &str, namespaces: &[&str], extra: &[&str]) -> String {
    let db = db.display().to_string();
    let mut args = vec![
        "token", "create", "--db", &db, "--name", name, "--scope", scope,
    ];
    for namespace in namespaces {
        args.extend(["--namespace", namespace]);
    }
    args.extend_from_slice(extra);
    let output = Command::new(WEIR).args(&args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "weir {args:?}: {stderr}");
    assert!(
        stderr.contains("will not be shown again"),
        "the secret is announced as shown once: {stderr}"
    );
    let secret = stdout.trim().to_string();
    assert!(
        secret.starts_with("weir_") && !secret.contains('\n'),
        "{stdout}"
    );
    secret
}

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

fn bearer(secret: &str) -> String {
    format!("Bearer {secret}")
}

fn json(answer: &http::Response) -> Value {
    serde_json::from_str(&answer.body).unwrap_or(Value::Null)
}

fn code(answer: &http::Response) -> String {
    json(answer)["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn flag(namespace: &str, name: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  variations: [{{name: blue, value: blue}}, {{name: green, value: green}}]
  defaultStrategy: {{weights: {{blue: 100}}}}
"
    )
}

/// A rollout of flag `banner`, held at its first step by an indefinite pause.
fn flag_rollout(namespace: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: fr, namespace: {namespace}}}
spec:
  target: {{kind: flag, flag: banner, control: blue, variation: green}}
  plan: {{canary: {{steps: [{{weight: 20, pause: {{}}}}, {{weight: 100}}]}}}}
  analysis: {{interval: 1s}}
"
    )
}

/// A local rollout between two URLs (nothing needs to answer there for these tests).
fn local_rollout(namespace: &str, name: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  target: {{kind: local, listen: \"127.0.0.1:0\", primary: {{url: \"http://127.0.0.1:9\"}}, canary: {{url: \"http://127.0.0.1:9\"}}}}
  plan: {{canary: {{steps: [{{weight: 20, pause: {{}}}}]}}}}
"
    )
}

const YAML: (&str, &str) = ("Content-Type", "application/yaml");
const JSON: (&str, &str) = ("Content-Type", "application/json");

fn post_yaml(server: &Weir, admin: &str, path: &str, yaml: &str) {
    let authorization = bearer(admin);
    let answer = send(
        server,
        "POST",
        path,
        &[YAML, ("Authorization", &authorization)],
        yaml,
    );
    assert!(
        answer.status == 201 || answer.status == 200,
        "seeding {path}: {} {}",
        answer.status,
        answer.body
    );
}

/// Waits until rollout `fr` of `namespace` runs (commands like pause apply only then): pauses
/// it once accepted, and resumes it.
fn wait_running(server: &Weir, admin: &str, namespace: &str) {
    let authorization = bearer(admin);
    let path = format!("/api/v1/rollouts/{namespace}/fr/commands");
    for command in ["pause", "resume"] {
        wait_until(&format!("{command} to be accepted"), || {
            let answer = send(
                server,
                "POST",
                &path,
                &[JSON, ("Authorization", &authorization)],
                &format!("{{\"command\": \"{command}\"}}"),
            );
            (answer.status == 200).then_some(())
        });
    }
}

// === every route x every scope x in/out of namespace ===

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Public,
    Any,
    Read,
    Operate,
    Admin,
    Evaluate,
    Tokens,
}

/// Where a route's namespace is, and what a token limited to other namespaces gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// No namespace.
    Nowhere,
    /// In the path: 404, as if the object did not exist.
    Path,
    /// In the document: 403 (the client named it).
    Body,
    /// A list or stream: 200, other namespaces left out.
    List,
    /// OFREP: 404 FLAG_NOT_FOUND, as for an empty namespace.
    Ofrep,
}

struct Route {
    method: &'static str,
    /// `{ns}` and `{n}` (a row number, for objects made per row) are filled in.
    path: &'static str,
    need: Need,
    place: Place,
    /// Statuses of an allowed request.
    ok: &'static [u16],
}

const fn r(
    method: &'static str,
    path: &'static str,
    need: Need,
    place: Place,
    ok: &'static [u16],
) -> Route {
    Route {
        method,
        path,
        need,
        place,
        ok,
    }
}

const ROUTES: &[Route] = &[
    r("GET", "/healthz", Need::Public, Place::Nowhere, &[200]),
    r("GET", "/readyz", Need::Public, Place::Nowhere, &[200]),
    r("GET", "/metrics", Need::Public, Place::Nowhere, &[200]),
    r(
        "GET",
        "/api/v1/openapi.json",
        Need::Public,
        Place::Nowhere,
        &[200],
    ),
    r("GET", "/api/v1/session", Need::Any, Place::Nowhere, &[200]),
    r(
        "GET",
        "/api/v1/tokens",
        Need::Tokens,
        Place::Nowhere,
        &[200],
    ),
    r(
        "POST",
        "/api/v1/tokens",
        Need::Tokens,
        Place::Nowhere,
        &[201],
    ),
    r(
        "DELETE",
        "/api/v1/tokens/victim-{n}",
        Need::Tokens,
        Place::Nowhere,
        &[200],
    ),
    r("GET", "/api/v1/rollouts", Need::Read, Place::List, &[200]),
    r("POST", "/api/v1/rollouts", Need::Admin, Place::Body, &[201]),
    r(
        "GET",
        "/api/v1/rollouts/{ns}/fr",
        Need::Read,
        Place::Path,
        &[200],
    ),
    r(
        "PUT",
        "/api/v1/rollouts/{ns}/fr",
        Need::Admin,
        Place::Path,
        &[200],
    ),
    r(
        "DELETE",
        "/api/v1/rollouts/{ns}/del-{n}",
        Need::Admin,
        Place::Path,
        &[204],
    ),
    r(
        "POST",
        "/api/v1/rollouts/{ns}/fr/commands",
        Need::Operate,
        Place::Path,
        &[200],
    ),
    r(
        "GET",
        "/api/v1/rollouts/{ns}/fr/events",
        Need::Read,
        Place::Path,
        &[200],
    ),
    r("GET", "/api/v1/watch", Need::Read, Place::List, &[200]),
    r(
        "GET",
        "/api/v1/flag-rollouts",
        Need::Read,
        Place::List,
        &[200],
    ),
    r("GET", "/api/v1/flags", Need::Read, Place::List, &[200]),
    r("POST", "/api/v1/flags", Need::Admin, Place::Body, &[201]),
    r(
        "GET",
        "/api/v1/flags/watch",
        Need::Read,
        Place::List,
        &[200],
    ),
    r(
        "GET",
        "/api/v1/flags/{ns}/plain",
        Need::Read,
        Place::Path,
        &[200],
    ),
    r(
        "PUT",
        "/api/v1/flags/{ns}/plain",
        Need::Admin,
        Place::Path,
        &[200],
    ),
    r(
        "DELETE",
        "/api/v1/flags/{ns}/del-{n}",
        Need::Admin,
        Place::Path,
        &[204],
    ),
    r(
        "POST",
        "/api/v1/flags/{ns}/banner/outcomes",
        Need::Operate,
        Place::Path,
        &[204],
    ),
    r(
        "POST",
        "/ofrep/v1/evaluate/flags",
        Need::Evaluate,
        Place::Nowhere,
        &[200],
    ),
    r(
        "POST",
        "/ns/{ns}/ofrep/v1/evaluate/flags",
        Need::Evaluate,
        Place::List,
        &[200],
    ),
    r(
        "POST",
        "/ns/{ns}/ofrep/v1/evaluate/flags/banner",
        Need::Evaluate,
        Place::Ofrep,
        &[200],
    ),
];

struct Token {
    label: &'static str,
    scope: &'static str,
    limited: bool,
    secret: String,
}

/// What the contract says a request gets: the status, and the error code when refused.
fn expected(route: &Route, token: Option<&Token>, namespace: &str) -> (Vec<u16>, &'static str) {
    let allowed = |codes: &[u16]| (codes.to_vec(), "");
    if route.need == Need::Public {
        return allowed(route.ok);
    }
    let Some(token) = token else {
        return (vec![401], "unauthorized");
    };
    let scope_allows = match route.need {
        Need::Public | Need::Any => true,
        Need::Evaluate => true,
        Need::Read => token.scope != "evaluate",
        Need::Operate => matches!(token.scope, "operate" | "admin"),
        Need::Admin => token.scope == "admin",
        Need::Tokens => token.scope == "admin" && !token.limited,
    };
    if !scope_allows {
        return (vec![403], "forbidden");
    }
    let outside = token.limited && namespace == "team-b";
    match route.place {
        Place::Path if outside => (vec![404], "not_found"),
        Place::Body if outside => (vec![403], "forbidden"),
        Place::Ofrep if outside => (vec![404], "FLAG_NOT_FOUND"),
        _ => allowed(route.ok),
    }
}

#[test]
fn every_route_by_every_scope_in_and_out_of_namespace() {
    let db = TempDb::new();
    let mut tokens = Vec::new();
    for (label, scope, limited) in [
        ("read", "read", false),
        ("operate", "operate", false),
        ("admin", "admin", false),
        ("evaluate", "evaluate", false),
        ("read-a", "read", true),
        ("operate-a", "operate", true),
        ("admin-a", "admin", true),
        ("evaluate-a", "evaluate", true),
    ] {
        let namespaces: &[&str] = if limited { &["team-a"] } else { &[] };
        let secret = create_token(&db.path(), label, scope, namespaces, &[]);
        tokens.push(Token {
            label,
            scope,
            limited,
            secret,
        });
    }
    let admin = tokens[2].secret.clone();
    let server = Weir::serve(WEIR, &db.path(), &[]);
    for namespace in ["team-a", "team-b"] {
        post_yaml(&server, &admin, "/api/v1/flags", &flag(namespace, "banner"));
        post_yaml(&server, &admin, "/api/v1/flags", &flag(namespace, "plain"));
        post_yaml(
            &server,
            &admin,
            "/api/v1/rollouts",
            &flag_rollout(namespace),
        );
        wait_running(&server, &admin, namespace);
    }

    let mut row = 0;
    let mut failures = Vec::new();
    let callers: Vec<Option<&Token>> = std::iter::once(None)
        .chain(tokens.iter().map(Some))
        .collect();
    for route in ROUTES {
        let namespaces: &[&str] =
            if route.path.contains("{ns}") || matches!(route.place, Place::Body | Place::List) {
                &["team-a", "team-b"]
            } else {
                &["team-a"]
            };
        for namespace in namespaces {
            for caller in &callers {
                row += 1;
                let n = row.to_string();
                let path = route.path.replace("{ns}", namespace).replace("{n}", &n);
                // Objects this row may delete, made first with the unlimited admin token.
                if route.path.contains("del-{n}") {
                    let (list, document) = if route.path.starts_with("/api/v1/flags") {
                        ("/api/v1/flags", flag(namespace, &format!("del-{n}")))
                    } else {
                        (
                            "/api/v1/rollouts",
                            local_rollout(namespace, &format!("del-{n}")),
                        )
                    };
                    post_yaml(&server, &admin, list, &document);
                }
                if route.path.contains("victim-{n}") {
                    let authorization = bearer(&admin);
                    let made = send(
                        &server,
                        "POST",
                        "/api/v1/tokens",
                        &[JSON, ("Authorization", &authorization)],
                        &format!("{{\"name\": \"victim-{n}\", \"scope\": \"read\"}}"),
                    );
                    assert_eq!(made.status, 201, "{}", made.body);
                }
                let body = match (route.method, route.path) {
                    ("POST", "/api/v1/tokens") => {
                        format!("{{\"name\": \"made-{n}\", \"scope\": \"read\"}}")
                    }
                    ("POST", "/api/v1/rollouts") => local_rollout(namespace, &format!("made-{n}")),
                    ("POST", "/api/v1/flags") => flag(namespace, &format!("made-{n}")),
                    ("PUT", path) if path.starts_with("/api/v1/rollouts") => {
                        flag_rollout(namespace)
                    }
                    ("PUT", _) => flag(namespace, "plain"),
                    (_, path) if path.ends_with("/commands") => "{\"command\": \"pause\"}".into(),
                    (_, path) if path.ends_with("/outcomes") => {
                        "{\"variants\": {\"blue\": {\"requests\": 1}}}".into()
                    }
                    (_, path) if path.contains("/ofrep/") => {
                        "{\"context\": {\"targetingKey\": \"u1\"}}".into()
                    }
                    _ => String::new(),
                };
                let content_type = if body.starts_with('{') { JSON } else { YAML };
                let authorization = caller.map(|token| bearer(&token.secret));
                let mut headers = vec![content_type];
                if let Some(authorization) = &authorization {
                    headers.push(("Authorization", authorization));
                }
                let (status, answer_body, answer_code) = if path.ends_with("/watch") {
                    let stream = http::open_stream(server.address("api"), &path, &headers).unwrap();
                    (stream.status, stream.received.clone(), String::new())
                } else {
                    let answer = send(&server, route.method, &path, &headers, &body);
                    let answer_code = if path.contains("/ofrep/") && answer.status == 404 {
                        json(&answer)["errorCode"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string()
                    } else {
                        code(&answer)
                    };
                    // Paused: resume, so the next row's pause applies again (pausing a paused
                    // rollout is refused with 409 "already paused").
                    if path.ends_with("/commands") && answer.status == 200 {
                        let authorization = bearer(&admin);
                        let resumed = send(
                            &server,
                            "POST",
                            &path,
                            &[JSON, ("Authorization", &authorization)],
                            "{\"command\": \"resume\"}",
                        );
                        assert_eq!(resumed.status, 200, "{}", resumed.body);
                    }
                    (answer.status, answer.body, answer_code)
                };
                let (want, want_code) = expected(route, *caller, namespace);
                let label = caller.map_or("(none)", |token| token.label);
                println!("{:<6} {:<45} {:<11} {status}", route.method, path, label);
                let mut wrong = !want.contains(&status)
                    || (!want_code.is_empty()
                        && (answer_code != want_code && !path.ends_with("/watch")));
                // Lists show the token's namespaces only.
                if !wrong
                    && route.place == Place::List
                    && status == 200
                    && !path.contains("/ofrep/")
                    && !path.ends_with("/watch")
                {
                    let shows_b = answer_body.contains("\"team-b\"");
                    let shows_a = answer_body.contains("\"team-a\"");
                    let limited = caller.is_some_and(|token| token.limited);
                    wrong = !shows_a || shows_b == limited;
                }
                if wrong {
                    failures.push(format!(
                        "{} {path} as {label}: got {status} {answer_code:?}, want {want:?} {want_code:?}: {answer_body}",
                        route.method
                    ));
                }
            }
        }
    }
    println!("{row} requests");
    assert!(
        failures.is_empty(),
        "{} wrong answers:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn refusals_say_why_and_watch_streams_carry_only_the_tokens_namespaces() {
    let db = TempDb::new();
    let admin = create_token(&db.path(), "admin", "admin", &[], &[]);
    let reader = create_token(&db.path(), "reader-a", "read", &["team-a"], &[]);
    let server = Weir::serve(WEIR, &db.path(), &[]);

    let none = send(&server, "GET", "/api/v1/rollouts", &[], "");
    assert_eq!(none.status, 401);
    assert_eq!(none.header("www-authenticate"), Some("Bearer"));
    assert!(
        json(&none)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WEIR_TOKEN"),
        "{}",
        none.body
    );
    let authorization = bearer(&reader);
    let forbidden = send(
        &server,
        "POST",
        "/api/v1/rollouts/team-a/x/commands",
        &[JSON, ("Authorization", &authorization)],
        "{\"command\": \"pause\"}",
    );
    assert_eq!(forbidden.status, 403);
    let message = json(&forbidden)["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("needs scope operate") && message.contains("reader-a"),
        "{message}"
    );

    let headers = [("Authorization", authorization.as_str())];
    let mut rollouts = http::open_stream(server.address("api"), "/api/v1/watch", &headers).unwrap();
    let mut flags =
        http::open_stream(server.address("api"), "/api/v1/flags/watch", &headers).unwrap();
    assert_eq!((rollouts.status, flags.status), (200, 200));
    // team-b's changes come first; team-a's after them: when team-a's arrive, team-b's would have.
    for namespace in ["team-b", "team-a"] {
        post_yaml(&server, &admin, "/api/v1/flags", &flag(namespace, "banner"));
        post_yaml(
            &server,
            &admin,
            "/api/v1/rollouts",
            &flag_rollout(namespace),
        );
    }
    assert!(
        rollouts.read_until("\"namespace\":\"team-a\""),
        "{}",
        rollouts.received
    );
    assert!(
        flags.read_until("\"namespace\":\"team-a\""),
        "{}",
        flags.received
    );
    assert!(
        !rollouts.received.contains("team-b"),
        "{}",
        rollouts.received
    );
    assert!(!flags.received.contains("team-b"), "{}", flags.received);

    // OFREP clients send X-API-Key; a namespace the token does not see is an empty one.
    let evaluator = create_token(&db.path(), "app-a", "evaluate", &["team-a"], &[]);
    let context = "{\"context\": {\"targetingKey\": \"u1\"}}";
    let mine = send(
        &server,
        "POST",
        "/ns/team-a/ofrep/v1/evaluate/flags",
        &[JSON, ("X-API-Key", &evaluator)],
        context,
    );
    assert_eq!(mine.status, 200, "{}", mine.body);
    assert_eq!(json(&mine)["flags"][0]["key"], "banner", "{}", mine.body);
    let theirs = send(
        &server,
        "POST",
        "/ns/team-b/ofrep/v1/evaluate/flags",
        &[JSON, ("X-API-Key", &evaluator)],
        context,
    );
    assert_eq!(theirs.status, 200, "{}", theirs.body);
    assert_eq!(
        json(&theirs)["flags"],
        serde_json::json!([]),
        "{}",
        theirs.body
    );
    let read = send(
        &server,
        "GET",
        "/api/v1/flags",
        &[("X-API-Key", &evaluator)],
        "",
    );
    assert_eq!(
        (read.status, code(&read).as_str()),
        (403, "forbidden"),
        "{}",
        read.body
    );
}

// === expired and revoked ===

#[test]
fn expired_and_revoked_tokens_are_refused() {
    let db = TempDb::new();
    let soon = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(6)).to_string();
    let brief = create_token(&db.path(), "brief", "read", &[], &["--expires", &soon]);
    let doomed = create_token(&db.path(), "doomed", "read", &[], &[]);
    let server = Weir::serve(WEIR, &db.path(), &[]);

    let as_doomed = bearer(&doomed);
    assert_eq!(
        send(
            &server,
            "GET",
            "/api/v1/rollouts",
            &[("Authorization", &as_doomed)],
            ""
        )
        .status,
        200
    );
    let login = send(
        &server,
        "POST",
        "/api/v1/session",
        &[JSON],
        &format!("{{\"token\": \"{doomed}\"}}"),
    );
    assert_eq!(login.status, 200, "{}", login.body);
    let cookie = login
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        send(
            &server,
            "GET",
            "/api/v1/session",
            &[("Cookie", &cookie)],
            ""
        )
        .status,
        200
    );

    let revoked = Command::new(WEIR)
        .args([
            "token",
            "revoke",
            "doomed",
            "--db",
            &db.path().display().to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        revoked.status.success(),
        "{}",
        String::from_utf8_lossy(&revoked.stderr)
    );
    for headers in [
        [("Authorization", as_doomed.as_str())],
        [("Cookie", cookie.as_str())],
    ] {
        let answer = send(&server, "GET", "/api/v1/rollouts", &headers, "");
        assert_eq!(answer.status, 401, "{}", answer.body);
        let message = json(&answer)["error"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(message.contains("revoked"), "{message}");
        assert!(!message.contains(&doomed));
    }

    let as_brief = bearer(&brief);
    let expired = wait_until("the brief token to expire", || {
        let answer = send(
            &server,
            "GET",
            "/api/v1/rollouts",
            &[("Authorization", &as_brief)],
            "",
        );
        (answer.status != 200).then_some(answer)
    });
    assert_eq!(expired.status, 401, "{}", expired.body);
    assert!(
        json(&expired)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{}",
        expired.body
    );
}

// === rate limit ===

#[test]
fn bad_tokens_are_rate_limited_per_client_address() {
    let db = TempDb::new();
    let good = create_token(&db.path(), "good", "read", &[], &[]);
    let server = Weir::serve(WEIR, &db.path(), &[]);
    for attempt in 1..=10 {
        let answer = send(
            &server,
            "GET",
            "/api/v1/rollouts",
            &[("X-API-Key", &format!("weir_guess{attempt}"))],
            "",
        );
        assert_eq!(answer.status, 401, "attempt {attempt}: {}", answer.body);
    }
    let limited = send(
        &server,
        "GET",
        "/api/v1/rollouts",
        &[("X-API-Key", "weir_guess11")],
        "",
    );
    assert_eq!(limited.status, 429, "{}", limited.body);
    assert_eq!(code(&limited), "too_many_requests");
    let retry: u64 = limited.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // While blocked, the address's bad credentials get 429; a good token still works, on the
    // API and for logging in (issue 32; crates/weir/tests/hardening.rs). Public routes answer.
    let as_good = bearer(&good);
    assert_eq!(
        send(
            &server,
            "GET",
            "/api/v1/rollouts",
            &[("Authorization", &as_good)],
            ""
        )
        .status,
        200
    );
    let login = send(
        &server,
        "POST",
        "/api/v1/session",
        &[JSON],
        &format!("{{\"token\": \"{good}\"}}"),
    );
    assert_eq!(login.status, 200);
    assert_eq!(send(&server, "GET", "/healthz", &[], "").status, 200);
}

// === cookie and CSRF ===

#[test]
fn the_session_cookie_is_signed_http_only_strict_and_changes_need_csrf() {
    let db = TempDb::new();
    let operator = create_token(&db.path(), "op", "operate", &[], &[]);
    let admin = create_token(&db.path(), "admin", "admin", &[], &[]);
    let server = Weir::serve(WEIR, &db.path(), &[]);
    post_yaml(&server, &admin, "/api/v1/flags", &flag("team-a", "banner"));
    post_yaml(&server, &admin, "/api/v1/rollouts", &flag_rollout("team-a"));
    wait_running(&server, &admin, "team-a");

    let login = send(
        &server,
        "POST",
        "/api/v1/session",
        &[JSON],
        &format!("{{\"token\": \"{operator}\"}}"),
    );
    assert_eq!(login.status, 200, "{}", login.body);
    let session = json(&login);
    assert_eq!(session["name"], "op");
    assert_eq!(session["scope"], "operate");
    assert_eq!(session["auth"], true);
    assert_eq!(session["namespaces"], Value::Null);
    assert!(session["expires"].is_string(), "{session}");
    let csrf = session["csrf"].as_str().unwrap().to_string();
    let set_cookie = login.header("set-cookie").unwrap().to_string();
    println!(
        "Set-Cookie: {}",
        set_cookie.replace(set_cookie.split(';').next().unwrap(), "weir_session=...")
    );
    let attributes: Vec<&str> = set_cookie.split(';').map(str::trim).collect();
    assert!(attributes[0].starts_with("weir_session="));
    assert!(
        !attributes[0].contains(&operator),
        "the cookie does not hold the secret"
    );
    for wanted in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(attributes.contains(&wanted), "{wanted} in {set_cookie}");
    }
    assert!(
        !attributes.contains(&"Secure"),
        "no Secure over plain HTTP: {set_cookie}"
    );
    let cookie = attributes[0].to_string();

    let again = send(
        &server,
        "GET",
        "/api/v1/session",
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(json(&again)["csrf"], csrf.as_str());

    let command = "{\"command\": \"pause\"}";
    let path = "/api/v1/rollouts/team-a/fr/commands";
    let without = send(&server, "POST", path, &[JSON, ("Cookie", &cookie)], command);
    assert_eq!(
        (without.status, code(&without).as_str()),
        (403, "csrf"),
        "{}",
        without.body
    );
    let wrong = send(
        &server,
        "POST",
        path,
        &[JSON, ("Cookie", &cookie), ("X-CSRF-Token", "forged")],
        command,
    );
    assert_eq!((wrong.status, code(&wrong).as_str()), (403, "csrf"));
    let with = send(
        &server,
        "POST",
        path,
        &[JSON, ("Cookie", &cookie), ("X-CSRF-Token", &csrf)],
        command,
    );
    assert_eq!(with.status, 200, "{}", with.body);
    // Bearer requests need no CSRF value.
    let as_operator = bearer(&operator);
    let resume = send(
        &server,
        "POST",
        path,
        &[JSON, ("Authorization", &as_operator)],
        "{\"command\": \"resume\"}",
    );
    assert_eq!(resume.status, 200, "{}", resume.body);

    // A cookie whose signature does not match is refused.
    let (payload, _) = cookie.rsplit_once('.').unwrap();
    let forged = format!("{payload}.AAAA");
    assert_eq!(
        send(
            &server,
            "GET",
            "/api/v1/session",
            &[("Cookie", &forged)],
            ""
        )
        .status,
        401
    );
    let other_token = cookie.replacen("v1:", "v1:9", 1);
    assert_eq!(
        send(
            &server,
            "GET",
            "/api/v1/session",
            &[("Cookie", &other_token)],
            ""
        )
        .status,
        401
    );

    let logout = send(
        &server,
        "DELETE",
        "/api/v1/session",
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(logout.status, 204);
    let cleared = logout.header("set-cookie").unwrap();
    assert!(
        cleared.starts_with("weir_session=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );

    let bad = send(
        &server,
        "POST",
        "/api/v1/session",
        &[JSON],
        "{\"token\": \"weir_wrong\"}",
    );
    assert_eq!(bad.status, 401);
    assert!(bad.header("set-cookie").is_none());
}

// === secrets never logged nor recorded ===

#[test]
fn secrets_appear_in_neither_the_log_nor_the_history() {
    let db = TempDb::new();
    let admin = create_token(&db.path(), "deployer", "admin", &[], &[]);
    let db_path = db.path().display().to_string();
    let server = Weir::start_capturing_stderr(
        WEIR,
        &[
            "serve",
            "--db",
            &db_path,
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
        ],
        &[("RUST_LOG", "debug")],
    );
    let as_admin = bearer(&admin);
    post_yaml(&server, &admin, "/api/v1/flags", &flag("team-a", "banner"));
    post_yaml(&server, &admin, "/api/v1/rollouts", &flag_rollout("team-a"));
    wait_running(&server, &admin, "team-a");
    let paused = send(
        &server,
        "POST",
        "/api/v1/rollouts/team-a/fr/commands",
        &[
            JSON,
            ("Authorization", &as_admin),
            ("X-Weir-Actor", "alice"),
        ],
        "{\"command\": \"pause\"}",
    );
    assert_eq!(paused.status, 200, "{}", paused.body);
    send(
        &server,
        "GET",
        "/api/v1/rollouts",
        &[("X-API-Key", &admin)],
        "",
    );
    let login = send(
        &server,
        "POST",
        "/api/v1/session",
        &[JSON],
        &format!("{{\"token\": \"{admin}\"}}"),
    );
    let cookie = login
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    send(
        &server,
        "GET",
        "/api/v1/session",
        &[("Cookie", &cookie)],
        "",
    );
    let wrong = format!("{admin}x");
    send(
        &server,
        "GET",
        "/api/v1/rollouts",
        &[("Authorization", &bearer(&wrong))],
        "",
    );
    let created = send(
        &server,
        "POST",
        "/api/v1/tokens",
        &[JSON, ("Authorization", &as_admin)],
        "{\"name\": \"ci\", \"scope\": \"read\"}",
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let minted = json(&created)["secret"].as_str().unwrap().to_string();
    send(
        &server,
        "GET",
        "/api/v1/rollouts",
        &[("Authorization", &bearer(&minted))],
        "",
    );

    let history = send(
        &server,
        "GET",
        "/api/v1/rollouts/team-a/fr/events",
        &[("Authorization", &as_admin)],
        "",
    );
    assert!(
        history.body.contains("paused by deployer (as alice)"),
        "{}",
        history.body
    );
    // The change itself is attributed too: the apply made with the admin token.
    assert!(
        history.body.contains("\"Applied\"")
            && history.body.contains("applied by deployer: created"),
        "{}",
        history.body
    );
    let log = wait_until("the audit line of the command", || {
        let lines = server.stderr_lines().join("\n");
        lines.contains("change made with a token").then_some(lines)
    });
    assert!(log.contains("deployer"), "{log}");
    let value = cookie.split_once('=').unwrap().1;
    for (what, secret) in [
        ("admin", admin.as_str()),
        ("minted", minted.as_str()),
        ("cookie", value),
        ("random part", &admin[5..]),
    ] {
        assert!(
            !log.contains(secret),
            "the {what} secret is in the log:\n{log}"
        );
        assert!(
            !history.body.contains(secret),
            "the {what} secret is in the history"
        );
    }
    let tokens = send(
        &server,
        "GET",
        "/api/v1/tokens",
        &[("Authorization", &as_admin)],
        "",
    );
    assert!(!tokens.body.contains(&admin[5..]) && !tokens.body.contains(&minted[5..]));
}

// === the command line ===

#[test]
fn a_token_made_with_the_cli_lets_weir_get_in() {
    let db = TempDb::new();
    let secret = create_token(&db.path(), "me", "read", &[], &["--expires", "30d"]);
    let server = Weir::serve(WEIR, &db.path(), &[]);
    let url = server.url("api");
    let get = |extra: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new(WEIR);
        command
            .args(["get", "--server", &url])
            .args(extra)
            .env_remove("WEIR_TOKEN");
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().unwrap()
    };
    let refused = get(&[], &[]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("401") && stderr.contains("WEIR_TOKEN"),
        "{stderr}"
    );
    for (extra, env) in [
        (vec!["--token", secret.as_str()], vec![]),
        (vec![], vec![("WEIR_TOKEN", secret.as_str())]),
    ] {
        let output = get(&extra, &env);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let listed = Command::new(WEIR)
        .args([
            "token",
            "list",
            "--db",
            &db.path().display().to_string(),
            "-o",
            "json",
        ])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["items"][0]["name"], "me");
    assert_eq!(listed["items"][0]["scope"], "read");
    assert!(listed["items"][0]["expiresAt"].is_string());
    assert!(listed["items"][0]["lastUsedAt"].is_string(), "{listed}");
    assert!(!listed.to_string().contains(&secret[5..]));

    let bad = Command::new(WEIR)
        .args([
            "token",
            "create",
            "--db",
            &db.path().display().to_string(),
            "--name",
            "Bad Name",
            "--scope",
            "read",
            "--namespace",
            "NO",
            "--expires",
            "0d",
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    for field in ["name", "namespaces[0]", "expires"] {
        assert!(stderr.contains(field), "{field} in {stderr}");
    }
    assert!(bad.stdout.is_empty());
}

#[test]
fn serve_refuses_a_non_loopback_address_without_tokens() {
    let db = TempDb::new();
    let db_path = db.path().display().to_string();
    let refused = Command::new(WEIR)
        .args([
            "serve",
            "--db",
            &db_path,
            "--create-db",
            "--listen",
            "0.0.0.0:0",
            "--output",
            "json",
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    println!("{stderr}");
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0")
            && stderr.contains("weir token create")
            && stderr.contains("--insecure-no-auth"),
        "{stderr}"
    );
    assert!(refused.stdout.is_empty(), "nothing was bound");

    // Open on loopback: no token needed, the session says so.
    let open = Weir::serve(WEIR, &db.path(), &[]);
    let session = send(&open, "GET", "/api/v1/session", &[], "");
    assert_eq!(json(&session)["auth"], false, "{}", session.body);
    assert_eq!(json(&session)["name"], "anonymous");
    drop(open);

    let insecure = Weir::start(
        WEIR,
        &[
            "serve",
            "--db",
            &db_path,
            "--listen",
            "0.0.0.0:0",
            "--output",
            "json",
            "--insecure-no-auth",
        ],
    );
    drop(insecure);
    create_token(&db.path(), "admin", "admin", &[], &[]);
    let guarded = Weir::start(
        WEIR,
        &[
            "serve",
            "--db",
            &db_path,
            "--listen",
            "0.0.0.0:0",
            "--output",
            "json",
        ],
    );
    let port = guarded.address("api").port();
    let answer = http::request(
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        "GET",
        "/api/v1/rollouts",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(answer.status, 401, "{}", answer.body);
}
