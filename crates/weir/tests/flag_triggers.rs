//! Flag triggers against a real `weir serve`: created with `weir flag trigger create`, called with
//! real curl (as an alerting system would), seen in an OFREP evaluation and in the history;
//! wrong secrets answered 404 and rate limited; revoked (docs/FLAGS.md, "Triggers").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::process::Weir;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

const CHECKOUT: &str = "\
apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: checkout, namespace: shop}
spec:
  variations: [{name: \"off\", value: false}, {name: \"on\", value: true}]
  defaultStrategy: {variation: \"on\"}
";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn weir(server: &Weir, token: &str, args: &[&str]) -> Output {
    Command::new(WEIR)
        .args(args)
        .args(["--server", &server.url("api"), "--token", token])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn send(server: &Weir, token: Option<&str>, method: &str, path: &str, body: &str) -> (u16, Value) {
    let bearer = token.map(|token| format!("Bearer {token}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer.as_str()));
    }
    let answer = http::request(server.address("api"), method, path, &headers, body)
        .unwrap_or_else(|| panic!("no answer to {method} {path}"));
    let value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    (answer.status, value)
}

/// `curl -sS -X POST URL`: the status and the body.
fn curl(url: &str) -> (u16, Value) {
    let output = Command::new("curl")
        .args(["-sS", "-X", "POST", "-w", "\n%{http_code}", url])
        .stdin(Stdio::null())
        .output()
        .expect("curl runs");
    assert!(output.status.success(), "curl: {}", text(&output.stderr));
    let printed = text(&output.stdout);
    let (body, status) = printed.rsplit_once('\n').unwrap();
    (
        status.trim().parse().unwrap(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

#[test]
fn a_trigger_called_with_curl_turns_the_flag_off_and_is_in_its_history() {
    let db = TempDb::new();
    let secret_of = |name: &str| {
        let db = db.path().display().to_string();
        let output = Command::new(WEIR)
            .args([
                "token", "create", "--db", &db, "--name", name, "--scope", "admin",
            ])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stdout).trim().to_string()
    };
    let admin = secret_of("oncall");
    let server = Weir::serve(WEIR, &db.path(), &["--bad-token-limit", "5"]);
    let (status, created) = send(
        &server,
        Some(&admin),
        "POST",
        "/api/v1/flags",
        &serde_json::to_string(&serde_saphyr::from_str::<Value>(CHECKOUT).unwrap()).unwrap(),
    );
    assert_eq!(status, 201, "{created:#}");

    let made = weir(
        &server,
        &admin,
        &[
            "flag",
            "trigger",
            "create",
            "checkout",
            "-n",
            "shop",
            "--action",
            "off",
            "--description",
            "error-rate alert",
        ],
    );
    assert!(made.status.success(), "{}", text(&made.stderr));
    let printed = text(&made.stdout);
    let url = printed
        .lines()
        .find(|line| line.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {printed}"))
        .to_string();
    assert!(printed.contains("shown only this once"), "{printed}");
    let id = url.split('/').rev().nth(1).unwrap().to_string();

    // Listed without its secret.
    let (_, listed) = send(
        &server,
        Some(&admin),
        "GET",
        "/api/v1/flags/shop/checkout/triggers",
        "",
    );
    assert_eq!(listed["items"][0]["id"], id.as_str(), "{listed:#}");
    assert_eq!(listed["items"][0]["uses"], 0);
    assert!(
        !listed.to_string().contains(url.rsplit('/').next().unwrap()),
        "{listed:#}"
    );

    let evaluate = || {
        let (status, answer) = send(
            &server,
            Some(&admin),
            "POST",
            "/ns/shop/ofrep/v1/evaluate/flags/checkout",
            r#"{"context": {"targetingKey": "user-1"}}"#,
        );
        assert_eq!(status, 200, "{answer:#}");
        answer
    };
    assert_eq!(evaluate()["value"], true);

    // No token: the secret is the credential.
    let (status, used) = curl(&url);
    assert_eq!(status, 200, "{used:#}");
    assert_eq!(
        (&used["enabled"], &used["action"], &used["key"]),
        (&json!(false), &json!("off"), &json!("checkout"))
    );
    let answer = evaluate();
    assert_eq!(
        (&answer["value"], &answer["reason"]),
        (&json!(false), &json!("DISABLED")),
        "{answer:#}"
    );

    let (_, history) = send(
        &server,
        Some(&admin),
        "GET",
        "/api/v1/flags/shop/checkout/history",
        "",
    );
    let last = &history["items"][0];
    assert_eq!(last["action"], "triggered", "{history:#}");
    assert_eq!(
        last["actor"],
        format!("trigger {id} (error-rate alert)"),
        "{history:#}"
    );
    assert_eq!(last["address"], "127.0.0.1", "{history:#}");
    assert_eq!(
        last["summary"],
        json!(["spec.enabled: true -> false"]),
        "{history:#}"
    );
    let table = weir(
        &server,
        &admin,
        &["flag", "history", "checkout", "-n", "shop"],
    );
    assert!(
        text(&table.stdout).contains("from 127.0.0.1"),
        "{}",
        text(&table.stdout)
    );

    let listed = weir(
        &server,
        &admin,
        &["flag", "trigger", "list", "checkout", "-n", "shop"],
    );
    let listed = text(&listed.stdout);
    assert!(
        listed.starts_with("ID") && listed.contains(&id) && listed.contains("error-rate alert"),
        "{listed}"
    );

    // A wrong secret, or an unknown trigger, is 404 alike; past the limit, 429.
    let wrong = format!("{}/api/v1/triggers/{id}/weir_wrong", server.url("api"));
    let (status, _) = curl(&wrong);
    assert_eq!(status, 404);
    let (status, _) = curl(&format!(
        "{}/api/v1/triggers/0000000000000000/weir_wrong",
        server.url("api")
    ));
    assert_eq!(status, 404);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(curl(&wrong).0);
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    // Even the right secret waits out the window from that address.
    assert_eq!(curl(&url).0, 429);

    // Revoked: gone from the list.
    let revoked = weir(
        &server,
        &admin,
        &["flag", "trigger", "revoke", "checkout", &id, "-n", "shop"],
    );
    assert!(revoked.status.success(), "{}", text(&revoked.stderr));
    let (_, listed) = send(
        &server,
        Some(&admin),
        "GET",
        "/api/v1/flags/shop/checkout/triggers",
        "",
    );
    assert!(listed["items"].as_array().unwrap().is_empty(), "{listed:#}");
    let (status, _) = send(
        &server,
        Some(&admin),
        "DELETE",
        &format!("/api/v1/flags/shop/checkout/triggers/{id}"),
        "",
    );
    assert_eq!(status, 404);
}

#[test]
fn a_revoked_trigger_answers_404_and_a_read_token_cannot_create_one() {
    let db = TempDb::new();
    let token = |name: &str, scope: &str| {
        let db = db.path().display().to_string();
        let output = Command::new(WEIR)
            .args([
                "token", "create", "--db", &db, "--name", name, "--scope", scope,
            ])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stdout).trim().to_string()
    };
    let admin = token("admin", "admin");
    let reader = token("reader", "read");
    let server = Weir::serve(WEIR, &db.path(), &[]);
    let flag = serde_json::to_string(&serde_saphyr::from_str::<Value>(CHECKOUT).unwrap()).unwrap();
    assert_eq!(
        send(&server, Some(&admin), "POST", "/api/v1/flags", &flag).0,
        201
    );
    let path = "/api/v1/flags/shop/checkout/triggers";
    let (status, refused) = send(&server, Some(&reader), "POST", path, r#"{"action": "on"}"#);
    assert_eq!(status, 403, "{refused:#}");
    let (status, bad) = send(
        &server,
        Some(&admin),
        "POST",
        path,
        r#"{"action": "toggle"}"#,
    );
    assert_eq!(status, 400, "{bad:#}");
    let (status, created) = send(
        &server,
        Some(&admin),
        "POST",
        path,
        r#"{"action": "on", "description": "recovered"}"#,
    );
    assert_eq!(status, 201, "{created:#}");
    let trigger_path = created["path"].as_str().unwrap().to_string();
    assert!(trigger_path.ends_with(created["secret"].as_str().unwrap()));
    // The reader sees it, without the secret.
    let (status, listed) = send(&server, Some(&reader), "GET", path, "");
    assert_eq!(status, 200);
    assert_eq!(listed["items"][0]["description"], "recovered");
    assert!(listed["items"][0].get("secret").is_none());
    let id = created["trigger"]["id"].as_str().unwrap();
    assert_eq!(
        send(&server, Some(&admin), "DELETE", &format!("{path}/{id}"), "").0,
        204
    );
    let (status, _) = curl(&format!("{}{trigger_path}", server.url("api")));
    assert_eq!(status, 404);
}

/// Two instances on one PostgreSQL database: a trigger created on one and called on the other
/// turns the flag off for both; both see the history, and the evaluations both counted add up.
#[test]
fn on_postgresql_a_trigger_and_the_counts_are_shared_by_every_instance() {
    use weir_testkit::postgres::PgCluster;
    use weir_testkit::wait::wait_until;

    let postgres = PgCluster::start();
    let url = postgres.database("weir");
    let made = Command::new(WEIR)
        .args([
            "token", "create", "--db", &url, "--name", "ops", "--scope", "admin",
        ])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    let admin = text(&made.stdout).trim().to_string();
    let serve = || {
        Weir::start(
            WEIR,
            &[
                "serve",
                "--db",
                &url,
                "--listen",
                "127.0.0.1:0",
                "--output",
                "json",
            ],
        )
    };
    let (a, b) = (serve(), serve());
    let flag = serde_json::to_string(&serde_saphyr::from_str::<Value>(CHECKOUT).unwrap()).unwrap();
    assert_eq!(
        send(&a, Some(&admin), "POST", "/api/v1/flags", &flag).0,
        201
    );
    let (status, created) = send(
        &a,
        Some(&admin),
        "POST",
        "/api/v1/flags/shop/checkout/triggers",
        r#"{"action": "off", "description": "pager"}"#,
    );
    assert_eq!(status, 201, "{created:#}");
    let evaluate = |server: &Weir| {
        let (status, answer) = send(
            server,
            Some(&admin),
            "POST",
            "/ns/shop/ofrep/v1/evaluate/flags/checkout",
            r#"{"context": {"targetingKey": "user-1"}}"#,
        );
        assert_eq!(status, 200, "{answer:#}");
        answer
    };
    wait_until("b knows the flag", || {
        let (status, answer) = send(
            &b,
            Some(&admin),
            "POST",
            "/ns/shop/ofrep/v1/evaluate/flags/checkout",
            r#"{"context": {"targetingKey": "user-1"}}"#,
        );
        (status == 200 && answer["value"] == true).then_some(())
    });
    for _ in 0..3 {
        evaluate(&a);
    }
    let (status, used) = curl(&format!(
        "{}{}",
        b.url("api"),
        created["path"].as_str().unwrap()
    ));
    assert_eq!(status, 200, "{used:#}");
    wait_until("a serves the flag off", || {
        (evaluate(&a)["value"] == false).then_some(())
    });
    for server in [&a, &b] {
        let (_, history) = send(
            server,
            Some(&admin),
            "GET",
            "/api/v1/flags/shop/checkout/history",
            "",
        );
        assert_eq!(
            (
                &history["items"][0]["action"],
                &history["items"][0]["address"]
            ),
            (&json!("triggered"), &json!("127.0.0.1")),
            "{history:#}"
        );
        assert_eq!(history["items"][1]["actor"], "ops", "{history:#}");
    }
    let (_, listed) = send(
        &a,
        Some(&admin),
        "GET",
        "/api/v1/flags/shop/checkout/triggers",
        "",
    );
    assert_eq!(listed["items"][0]["uses"], 1, "{listed:#}");
    // What a and b evaluated (the "b knows" probes, 3, the "a serves off" probes) adds up to
    // what both count in their exposures; the store has all of it once both flushed.
    wait_until("both instances' counts written", || {
        let exposures = |server: &Weir| {
            let (_, flag) = send(
                server,
                Some(&admin),
                "GET",
                "/api/v1/flags/shop/checkout",
                "",
            );
            flag["exposures"]["on"].as_u64().unwrap() + flag["exposures"]["off"].as_u64().unwrap()
        };
        let served = exposures(&a) + exposures(&b);
        let (_, counts) = send(
            &a,
            Some(&admin),
            "GET",
            "/api/v1/flags/shop/checkout/evaluations",
            "",
        );
        let stored: u64 = counts["totals"]
            .as_object()
            .unwrap()
            .values()
            .map(|count| count.as_u64().unwrap())
            .sum();
        (stored == served && stored >= 5).then_some(())
    });
}
