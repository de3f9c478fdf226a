//! A PostgreSQL outage as clients see it (issue 32, item 6), on two real `weir serve`
//! instances sharing a throwaway cluster, over real HTTP: while the database does not answer
//! (frozen: connections accepted and never answered, as in a partition) or is down (stopped
//! the hard way), every request that needs it is answered 503 with `Retry-After` and a message
//! naming the database within a few seconds, on every instance; `/readyz` answers 503 saying
//! why while `/healthz` stays 200; what is served from memory (the token check, OFREP,
//! `/metrics`) keeps answering; and once the database is back everything answers again. And a
//! token revoked on one instance is refused by the other at once, with no database read per
//! request on either.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use serde_json::Value;
use weir_testkit::http;
use weir_testkit::postgres::PgCluster;
use weir_testkit::process::{Weir, output};
use weir_testkit::wait::wait_until;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// How long an answer may take while the database is out: generous (the acquire timeout is
/// 2 s here), only a hang - the 30 s of sqlx's default - fails it.
const ANSWER_BOUND: Duration = Duration::from_secs(15);

/// `weir serve` on `url` with a 2 s lease and a 2 s acquire timeout.
fn serve(url: &str) -> Weir {
    Weir::start(
        WEIR,
        &[
            "serve",
            "--db",
            url,
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
            "--lease-time",
            "2s",
            "--db-timeout",
            "2s",
        ],
    )
}

/// `weir token create` (or `revoke`) on the database at `url`; the secret when created.
fn token(url: &str, verb: &str, name: &str, scope: &str) -> String {
    let mut args = vec!["token", verb, "--db", url];
    if verb == "create" {
        args.extend(["--name", name, "--scope", scope]);
    } else {
        args.push(name);
    }
    let done = output(WEIR, &args);
    assert!(
        done.status.success(),
        "weir {args:?}: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    String::from_utf8_lossy(&done.stdout).trim().to_string()
}

/// One request with `secret`, and how long its answer took.
fn send(
    server: &Weir,
    method: &str,
    path: &str,
    secret: &str,
    body: &str,
) -> (http::Response, Duration) {
    let authorization = format!("Bearer {secret}");
    let mut headers = vec![("Authorization", authorization.as_str())];
    if !body.is_empty() {
        headers.push(("Content-Type", "application/yaml"));
    }
    let started = Instant::now();
    let answer = http::request(server.address("api"), method, path, &headers, body)
        .unwrap_or_else(|| panic!("no answer to {method} {path} within 30 s"));
    (answer, started.elapsed())
}

fn json(answer: &http::Response) -> Value {
    serde_json::from_str(&answer.body).unwrap_or(Value::Null)
}

fn flag_and_rollout(name: &str) -> (String, String) {
    let flag = format!(
        "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {{name: {name}, namespace: shop}}
spec:
  variations: [{{name: blue, value: blue}}, {{name: green, value: green}}]
  defaultStrategy: {{weights: {{blue: 100}}}}
"
    );
    let rollout = format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}, namespace: shop}}
spec:
  target: {{kind: flag, flag: {name}, control: blue, variation: green}}
  plan: {{canary: {{steps: [{{weight: 20, pause: {{}}}}, {{weight: 100}}]}}}}
  analysis: {{interval: 1s}}
"
    );
    (flag, rollout)
}

/// Asserts that `answer` is the outage's 503: `Retry-After`, code `unavailable`, a message
/// naming the database and no credentials, within [`ANSWER_BOUND`].
fn assert_unavailable(answer: &http::Response, took: Duration, what: &str) {
    assert_eq!(
        answer.status, 503,
        "{what}: {} {}",
        answer.head, answer.body
    );
    assert_eq!(
        answer.header("retry-after"),
        Some("5"),
        "{what}: {}",
        answer.head
    );
    let body = json(answer);
    assert_eq!(
        body["error"]["code"], "unavailable",
        "{what}: {}",
        answer.body
    );
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("PostgreSQL database \"weir\" at ")
            && message.contains("cannot be reached"),
        "{what}: the message names the database: {message}"
    );
    assert!(
        !message.contains("postgres://") && !message.contains("postgres@"),
        "{what}: no URL or user in the message: {message}"
    );
    assert!(took < ANSWER_BOUND, "{what}: answered after {took:?}");
}

/// `/readyz` of `server`: its status and the checks' JSON.
fn readyz(server: &Weir) -> (u16, Value) {
    let answer = http::get(server.address("api"), "/readyz").expect("/readyz answers");
    (answer.status, json(&answer)["checks"].clone())
}

#[test]
fn a_database_outage_is_answered_503_at_once_and_readyz_says_so_until_it_is_back() {
    let postgres = PgCluster::start();
    let url = postgres.database("weir");
    let admin = token(&url, "create", "admin", "admin");
    let servers = [serve(&url), serve(&url)];
    let (flag, rollout) = flag_and_rollout("banner");
    assert!(
        send(&servers[0], "POST", "/api/v1/flags", &admin, &flag)
            .0
            .status
            < 300
    );
    assert!(
        send(&servers[0], "POST", "/api/v1/rollouts", &admin, &rollout)
            .0
            .status
            < 300
    );
    for server in &servers {
        wait_until("both instances ready", || {
            let (status, checks) = readyz(server);
            (status == 200).then_some(checks)
        });
        let (answer, _) = send(server, "GET", "/api/v1/rollouts/shop/banner", &admin, "");
        assert_eq!(answer.status, 200, "{}", answer.body);
    }

    // Frozen: connections are accepted and never answered. Without an acquire timeout every
    // request would wait 30 s (sqlx's default) and then fail with 500.
    postgres.freeze();
    for (index, server) in servers.iter().enumerate() {
        let (answer, took) = send(server, "GET", "/api/v1/rollouts", &admin, "");
        assert_unavailable(&answer, took, "GET /api/v1/rollouts, database frozen");
        eprintln!(
            "database frozen: instance {index}: GET /api/v1/rollouts answered {} after {:.1} s: {}",
            answer.status,
            took.as_secs_f64(),
            json(&answer)["error"]["message"]
        );
        let (status, checks) = wait_until("/readyz to say the database does not answer", || {
            let (status, checks) = readyz(server);
            (status == 503 && checks["database"]["ok"] == false).then_some((status, checks))
        });
        eprintln!("database frozen: instance {index}: /readyz {status} {checks}");
        wait_until("/readyz to say the leases lapsed", || {
            let (status, checks) = readyz(server);
            (status == 503 && checks["leases"]["ok"] == false).then_some(())
        });
        assert_eq!(
            http::get(server.address("api"), "/healthz").unwrap().status,
            200
        );
        // The token check reads no database: a valid token still identifies its caller...
        let (session, took) = send(server, "GET", "/api/v1/session", &admin, "");
        assert_eq!(session.status, 200, "{}", session.body);
        assert_eq!(json(&session)["name"], "admin");
        assert!(took < ANSWER_BOUND);
        // ...and an unknown one is refused as unknown, not as unavailable.
        let (unknown, _) = send(server, "GET", "/api/v1/rollouts", "weir_not-a-token", "");
        assert_eq!(unknown.status, 401, "{}", unknown.body);
    }
    postgres.thaw();
    for server in &servers {
        wait_until("answers again after the freeze", || {
            let (answer, _) = send(server, "GET", "/api/v1/rollouts", &admin, "");
            (answer.status == 200).then_some(())
        });
        wait_until("ready again after the freeze", || {
            (readyz(server).0 == 200).then_some(())
        });
    }

    // Down: stopped the hard way, as a crash would.
    postgres.stop_immediately();
    for (index, server) in servers.iter().enumerate() {
        let (answer, took) = send(server, "GET", "/api/v1/rollouts/shop/banner", &admin, "");
        assert_unavailable(&answer, took, "GET a rollout, database down");
        eprintln!(
            "database down: instance {index}: GET /api/v1/rollouts/shop/banner answered {} after {:.2} s (Retry-After: {})",
            answer.status,
            took.as_secs_f64(),
            answer.header("retry-after").unwrap_or("-")
        );
        // A change goes through the engine: refused the same way, nothing done.
        let other = format!(
            "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: late-{index}, namespace: shop}}
spec:
  target: {{kind: local, listen: \"127.0.0.1:0\", primary: {{url: \"http://127.0.0.1:9\"}}, canary: {{url: \"http://127.0.0.1:9\"}}}}
  plan: {{canary: {{steps: [{{weight: 20, pause: {{}}}}]}}}}
"
        );
        let (answer, took) = send(server, "POST", "/api/v1/rollouts", &admin, &other);
        assert_unavailable(&answer, took, "POST /api/v1/rollouts, database down");
        let path = "/api/v1/rollouts/shop/banner/events";
        let (answer, took) = send(server, "GET", path, &admin, "");
        assert_unavailable(&answer, took, "GET a rollout's history, database down");
        // Served from memory: the flags (their list and OFREP) and /metrics.
        let (flags, _) = send(server, "GET", "/api/v1/flags", &admin, "");
        assert_eq!(flags.status, 200, "{}", flags.body);
        let (evaluated, _) = http::request(
            server.address("api"),
            "POST",
            "/ns/shop/ofrep/v1/evaluate/flags/banner",
            &[
                ("Authorization", &format!("Bearer {admin}")),
                ("Content-Type", "application/json"),
            ],
            "{\"context\": {\"targetingKey\": \"u1\"}}",
        )
        .map(|answer| (answer, ()))
        .unwrap();
        assert_eq!(evaluated.status, 200, "{}", evaluated.body);
        let (metrics, _) = send(server, "GET", "/metrics", &admin, "");
        assert_eq!(metrics.status, 200);
        let (status, checks) = wait_until("/readyz to say the database is down", || {
            let (status, checks) = readyz(server);
            let message = checks["database"]["message"].as_str().unwrap_or_default();
            (status == 503 && message.contains("cannot be reached")).then_some((status, checks))
        });
        eprintln!("database down: instance {index}: /readyz {status} {checks}");
        assert_eq!(
            http::get(server.address("api"), "/healthz").unwrap().status,
            200
        );
    }
    // The client says what the server said, at once.
    let started = Instant::now();
    let get = output(
        WEIR,
        &["get", "--server", &servers[1].url("api"), "--token", &admin],
    );
    let stderr = String::from_utf8_lossy(&get.stderr);
    assert!(!get.status.success());
    assert!(
        stderr.contains("error (503)") && stderr.contains("cannot be reached"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < ANSWER_BOUND,
        "weir get took {:?}",
        started.elapsed()
    );
    eprintln!(
        "database down: weir get exited {} after {:.2} s: {}",
        get.status,
        started.elapsed().as_secs_f64(),
        stderr.trim()
    );

    postgres.restart();
    for server in &servers {
        wait_until("answers again after the restart", || {
            let (answer, _) = send(server, "GET", "/api/v1/rollouts/shop/banner", &admin, "");
            (answer.status == 200).then_some(())
        });
        wait_until("ready again after the restart", || {
            (readyz(server).0 == 200).then_some(())
        });
    }
    let (flag, rollout) = flag_and_rollout("after");
    assert!(
        send(&servers[1], "POST", "/api/v1/flags", &admin, &flag)
            .0
            .status
            < 300
    );
    let (applied, _) = send(&servers[1], "POST", "/api/v1/rollouts", &admin, &rollout);
    assert_eq!(applied.status, 201, "{}", applied.body);
}

#[test]
fn a_token_revoked_on_one_instance_is_refused_by_the_other_at_once() {
    let postgres = PgCluster::start();
    let url = postgres.database("weir");
    let admin = token(&url, "create", "admin", "admin");
    let doomed = token(&url, "create", "doomed", "read");
    let (a, b) = (serve(&url), serve(&url));
    for server in [&a, &b] {
        assert_eq!(
            send(server, "GET", "/api/v1/rollouts", &doomed, "")
                .0
                .status,
            200
        );
    }

    // Revoked through A's API: A refuses it from its next request, B once the notice arrives.
    let (revoked, _) = send(&a, "DELETE", "/api/v1/tokens/doomed", &admin, "");
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let started = Instant::now();
    let (refused, _) = send(&a, "GET", "/api/v1/rollouts", &doomed, "");
    assert_eq!(refused.status, 401, "{}", refused.body);
    let message = wait_until("instance B to refuse the revoked token", || {
        let (answer, _) = send(&b, "GET", "/api/v1/rollouts", &doomed, "");
        (answer.status == 401).then(|| json(&answer)["error"]["message"].clone())
    });
    eprintln!(
        "revoked on A: refused by B after {:.3} s: {message}",
        started.elapsed().as_secs_f64()
    );
    assert!(message.as_str().unwrap().contains("revoked"), "{message}");

    // Created and revoked by `weir token` on the database itself: both instances follow.
    let late = token(&url, "create", "late", "read");
    for server in [&a, &b] {
        wait_until("a token created by weir token to work", || {
            let (answer, _) = send(server, "GET", "/api/v1/rollouts", &late, "");
            (answer.status == 200).then_some(())
        });
    }
    token(&url, "revoke", "late", "");
    for server in [&a, &b] {
        wait_until("a token revoked by weir token to be refused", || {
            let (answer, _) = send(server, "GET", "/api/v1/rollouts", &late, "");
            (answer.status == 401).then_some(())
        });
    }

    // No read per request: with the database frozen, the revoked token is still refused and
    // the good one still identifies its caller, at once.
    postgres.freeze();
    for server in [&a, &b] {
        let (answer, took) = send(server, "GET", "/api/v1/session", &doomed, "");
        assert_eq!(answer.status, 401, "{}", answer.body);
        assert!(took < ANSWER_BOUND);
        let (answer, _) = send(server, "GET", "/api/v1/session", &admin, "");
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    postgres.thaw();
}
