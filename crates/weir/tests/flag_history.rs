//! A flag's change history, evaluation counts over time, tags and metadata, against a real
//! `weir serve` over HTTP and the `weir flag` command line (docs/FLAGS.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

const BANNER: &str = "\
apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: banner, namespace: shop}
spec:
  tags: [team:web, checkout]
  metadata: {owner: web-team, tier: 2}
  variations: [{name: blue, value: blue}, {name: green, value: green}]
  defaultStrategy: {variation: blue}
";

fn weir(server: &Weir, token: &str, args: &[&str]) -> Output {
    Command::new(WEIR)
        .args(args)
        .args(["--server", &server.url("api"), "--token", token])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn create_token(db: &std::path::Path, name: &str) -> String {
    let db = db.display().to_string();
    let args = [
        "token", "create", "--db", &db, "--name", name, "--scope", "admin",
    ];
    let output = Command::new(WEIR).args(args).output().unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout).trim().to_string()
}

fn send(server: &Weir, token: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let bearer = format!("Bearer {token}");
    let answer = http::request(
        server.address("api"),
        method,
        path,
        &[
            ("Authorization", bearer.as_str()),
            ("Content-Type", "application/yaml"),
        ],
        body,
    )
    .unwrap_or_else(|| panic!("no answer to {method} {path}"));
    let value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    (answer.status, value)
}

fn evaluate(server: &Weir, token: &str, user: &str) -> Value {
    let (status, answer) = send(
        server,
        token,
        "POST",
        "/ns/shop/ofrep/v1/evaluate/flags/banner",
        &json!({"context": {"targetingKey": user}}).to_string(),
    );
    assert_eq!(status, 200, "{answer:#}");
    answer
}

#[test]
fn every_change_is_recorded_with_its_actor_and_a_diff_and_counts_survive_a_restart() {
    let db = TempDb::new();
    let alice = create_token(&db.path(), "alice");
    let bob = create_token(&db.path(), "bob");
    let mut server = Weir::serve(WEIR, &db.path(), &[]);

    let (status, created) = send(&server, &alice, "POST", "/api/v1/flags", BANNER);
    assert_eq!(status, 201, "{created:#}");
    let changed = BANNER
        .replace("{name: green, value: green}", "{name: green, value: teal}")
        .replace("spec:\n", "spec:\n  enabled: false\n");
    let (status, updated) = send(&server, &bob, "PUT", "/api/v1/flags/shop/banner", &changed);
    assert_eq!(status, 200, "{updated:#}");

    let (status, page) = send(
        &server,
        &alice,
        "GET",
        "/api/v1/flags/shop/banner/history",
        "",
    );
    assert_eq!(status, 200, "{page:#}");
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{page:#}");
    assert_eq!(
        (
            &items[0]["actor"],
            &items[0]["action"],
            &items[0]["version"]
        ),
        (&json!("bob"), &json!("updated"), &json!(2)),
        "{page:#}"
    );
    assert_eq!(
        items[0]["summary"],
        json!([
            "spec.enabled: true -> false",
            "spec.variations[1].value: \"green\" -> \"teal\""
        ]),
        "{page:#}"
    );
    assert_eq!(
        items[0]["changes"][0],
        json!({"path": "spec.enabled", "before": true, "after": false})
    );
    assert_eq!(
        (&items[1]["actor"], &items[1]["action"]),
        (&json!("alice"), &json!("created"))
    );
    assert_eq!(items[1]["namespace"], "shop");
    assert!(page.get("nextCursor").is_none(), "{page:#}");

    // Paged: one at a time, newest first.
    let (_, first) = send(
        &server,
        &alice,
        "GET",
        "/api/v1/flags/shop/banner/history?limit=1",
        "",
    );
    let cursor = first["nextCursor"].as_str().unwrap().to_string();
    let (_, second) = send(
        &server,
        &alice,
        "GET",
        &format!("/api/v1/flags/shop/banner/history?limit=1&cursor={cursor}"),
        "",
    );
    assert_eq!(second["items"][0]["action"], "created", "{second:#}");
    assert!(second.get("nextCursor").is_none(), "{second:#}");

    // The command line: a table, and JSON lines.
    let table = weir(
        &server,
        &alice,
        &["flag", "history", "banner", "-n", "shop"],
    );
    assert!(table.status.success(), "{}", text(&table.stderr));
    let table = text(&table.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("WHEN") && lines[0].contains("CHANGES"),
        "{table}"
    );
    assert!(
        lines[1].contains("bob") && lines[1].contains("spec.enabled: true -> false"),
        "{table}"
    );
    assert!(
        lines[2].contains("spec.variations[1].value: \"green\" -> \"teal\""),
        "{table}"
    );
    assert!(
        table.contains("alice") && table.contains("created"),
        "{table}"
    );
    let json_lines = weir(
        &server,
        &alice,
        &["flag", "history", "shop/banner", "-o", "json"],
    );
    let first: Value =
        serde_json::from_str(text(&json_lines.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["actor"], "bob");

    // Tags and search.
    let (_, tagged) = send(
        &server,
        &alice,
        "GET",
        "/api/v1/flags?tag=team:web&tag=checkout",
        "",
    );
    assert_eq!(tagged["items"].as_array().unwrap().len(), 1, "{tagged:#}");
    let (_, other) = send(&server, &alice, "GET", "/api/v1/flags?tag=mobile", "");
    assert!(other["items"].as_array().unwrap().is_empty(), "{other:#}");
    let listed = weir(
        &server,
        &alice,
        &["flag", "list", "--tag", "checkout", "--search", "ban"],
    );
    assert!(
        text(&listed.stdout).contains("banner"),
        "{}",
        text(&listed.stdout)
    );
    let (status, refused) = send(
        &server,
        &alice,
        "PUT",
        "/api/v1/flags/shop/banner",
        &BANNER.replace("[team:web, checkout]", "[Team]"),
    );
    assert_eq!(status, 400, "{refused:#}");
    assert_eq!(
        refused["error"]["errors"][0]["path"], "spec.tags[0]",
        "{refused:#}"
    );

    // Metadata in OFREP answers, single and bulk; evaluations counted per minute.
    let (status, _) = send(&server, &alice, "PUT", "/api/v1/flags/shop/banner", BANNER);
    assert_eq!(status, 200);
    for user in 0..7 {
        let answer = evaluate(&server, &alice, &format!("user-{user}"));
        assert_eq!(
            answer["metadata"],
            json!({"owner": "web-team", "tier": 2}),
            "{answer:#}"
        );
    }
    let (status, bulk) = send(
        &server,
        &alice,
        "POST",
        "/ns/shop/ofrep/v1/evaluate/flags",
        "{}",
    );
    assert_eq!(status, 200, "{bulk:#}");
    assert_eq!(
        bulk["flags"][0]["metadata"]["owner"], "web-team",
        "{bulk:#}"
    );
    let counted = |server: &Weir| {
        let (status, counts) = send(
            server,
            &alice,
            "GET",
            "/api/v1/flags/shop/banner/evaluations?since=24h",
            "",
        );
        assert_eq!(status, 200, "{counts:#}");
        counts
    };
    let counts = wait_until("the evaluations are written", || {
        let counts = counted(&server);
        (counts["totals"]["blue"] == 8).then_some(counts)
    });
    let minute = &counts["minutes"][0];
    assert!(
        minute["minute"].as_str().unwrap().ends_with(":00Z"),
        "{counts:#}"
    );
    assert_eq!(counts["namespace"], "shop");

    // Two more, then a graceful stop: written at shutdown, there after the restart.
    evaluate(&server, &alice, "late-1");
    evaluate(&server, &alice, "late-2");
    server.signal("TERM");
    assert!(server.wait().success());
    let server = Weir::serve(WEIR, &db.path(), &[]);
    assert_eq!(
        counted(&server)["totals"]["blue"],
        10,
        "{:#}",
        counted(&server)
    );
    let (_, page) = send(
        &server,
        &alice,
        "GET",
        "/api/v1/flags/shop/banner/history",
        "",
    );
    assert_eq!(page["items"].as_array().unwrap().len(), 3, "{page:#}");

    // A bad `since` names the parameter; an unknown flag is 404.
    let (status, bad) = send(
        &server,
        &alice,
        "GET",
        "/api/v1/flags/shop/banner/evaluations?since=yesterday",
        "",
    );
    assert_eq!(
        (status, &bad["error"]["errors"][0]["path"]),
        (400, &json!("since")),
        "{bad:#}"
    );
    let (status, _) = send(
        &server,
        &alice,
        "GET",
        "/api/v1/flags/shop/nope/evaluations",
        "",
    );
    assert_eq!(status, 404);

    // Deleting is recorded too, and the history stays.
    let deleted = weir(&server, &bob, &["flag", "delete", "banner", "-n", "shop"]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let (_, page) = send(
        &server,
        &alice,
        "GET",
        "/api/v1/flags/shop/banner/history?limit=1",
        "",
    );
    assert_eq!(
        (&page["items"][0]["action"], &page["items"][0]["actor"]),
        (&json!("deleted"), &json!("bob")),
        "{page:#}"
    );
    assert!(page["items"][0].get("version").is_none(), "{page:#}");
}
