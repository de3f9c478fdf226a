//! `weir flag` against a real `weir serve`, as a user types it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use weir_testkit::fixtures::TempDb;
use weir_testkit::process::{Weir, apply};

fn weir(server: &Weir, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .args(["--server", &server.url("api")])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `examples/flags/banner-split.yaml` (flag `banner` in namespace `shop`, variations blue and
/// green), as a path.
fn banner_example() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/flags/banner-split.yaml")
        .display()
        .to_string()
}

#[test]
fn a_flag_is_created_listed_changed_evaluated_and_deleted_from_the_command_line() {
    let db = TempDb::new();
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &db.path(), &[]);
    let example = banner_example();

    let created = weir(&server, &["flag", "create", "-f", &example]);
    assert!(created.status.success(), "{}", text(&created.stderr));
    assert_eq!(
        text(&created.stdout).trim(),
        "flag banner created (version 1)"
    );
    // Create is create: the same key again is refused and changes nothing.
    let again = weir(&server, &["flag", "create", "-f", &example]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("already exists"),
        "{}",
        text(&again.stderr)
    );

    let listed = weir(&server, &["flag", "list", "-n", "shop"]);
    let listed = text(&listed.stdout);
    let lines: Vec<&str> = listed.lines().collect();
    assert!(lines[0].starts_with("NAMESPACE  KEY"), "{listed}");
    assert!(lines[0].contains("ROLLOUT"), "{listed}");
    assert!(
        lines[1].contains("banner") && lines[1].contains("blue=80% green=20%"),
        "{listed}"
    );

    let set = weir(
        &server,
        &[
            "flag",
            "set",
            "banner",
            "-n",
            "shop",
            "--weights",
            "blue=50,green=50",
        ],
    );
    assert!(set.status.success(), "{}", text(&set.stderr));
    assert!(
        text(&set.stdout).contains("(version 2)"),
        "{}",
        text(&set.stdout)
    );
    let bad = weir(
        &server,
        &[
            "flag",
            "set",
            "banner",
            "-n",
            "shop",
            "--weights",
            "blue=50,green=40",
        ],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad.stderr).contains("spec.defaultStrategy.weights"),
        "{}",
        text(&bad.stderr)
    );

    let evaluated = weir(&server, &["flag", "eval", "shop/banner", "--key", "user-1"]);
    assert!(evaluated.status.success(), "{}", text(&evaluated.stderr));
    let line = text(&evaluated.stdout);
    assert!(
        line.starts_with("banner: variant ") && line.contains("reason SPLIT"),
        "{line}"
    );
    let keyless = weir(&server, &["flag", "eval", "shop/banner"]);
    assert_eq!(keyless.status.code(), Some(1));
    assert!(
        text(&keyless.stdout).contains("TARGETING_KEY_MISSING"),
        "{}",
        text(&keyless.stdout)
    );

    let off = weir(
        &server,
        &["flag", "set", "banner", "-n", "shop", "--disable"],
    );
    assert!(off.status.success(), "{}", text(&off.stderr));
    let disabled = weir(
        &server,
        &[
            "flag",
            "eval",
            "shop/banner",
            "--key",
            "user-1",
            "-o",
            "json",
        ],
    );
    let disabled: serde_json::Value = serde_json::from_slice(&disabled.stdout).unwrap();
    assert_eq!(disabled["reason"], "DISABLED");
    assert_eq!(disabled["variant"], "blue");

    let shown = weir(
        &server,
        &["flag", "get", "banner", "-n", "shop", "-o", "json"],
    );
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["version"], 3);
    assert_eq!(shown["spec"]["enabled"], false);

    let deleted = weir(&server, &["flag", "delete", "banner", "-n", "shop"]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let gone = weir(&server, &["flag", "get", "banner", "-n", "shop"]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(text(&gone.stderr).contains("404"), "{}", text(&gone.stderr));
}

#[test]
fn flag_rollouts_are_listed_with_where_their_schedules_stand() {
    let db = TempDb::new();
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &db.path(), &[]);
    let created = weir(&server, &["flag", "create", "-f", &banner_example()]);
    assert!(created.status.success(), "{}", text(&created.stderr));
    // Three entries from an hour on: the schedule waits for its first.
    let hours = |count: i64| {
        let now = jiff::Timestamp::now().as_second();
        jiff::Timestamp::from_second(now + count * 3600).unwrap()
    };
    let rollout = db.file("banner-green.yaml");
    std::fs::write(
        &rollout,
        format!(
            "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: banner-green, namespace: shop}}
spec:
  target: {{kind: flag, flag: banner, control: blue, variation: green}}
  plan:
    schedule:
      manual:
        - {{at: \"{}\", weight: 10}}
        - {{at: \"{}\", weight: 50}}
        - {{at: \"{}\", weight: 100}}
  analysis: {{interval: 1s}}
",
            hours(1),
            hours(2),
            hours(3)
        ),
    )
    .unwrap();
    apply(env!("CARGO_BIN_EXE_weir"), &rollout, &server.url("api"));

    let listed = weir(&server, &["flag", "rollouts", "-n", "shop"]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listed = text(&listed.stdout);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAMESPACE/NAME",
            "FLAG",
            "CONTROL->VARIATION",
            "TYPE",
            "STATE",
            "PROGRESS",
            "WEIGHT",
            "NEXT"
        ],
        "{listed}"
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        row[..8],
        [
            "shop/banner-green",
            "banner",
            "blue->green",
            "manual",
            "WAITING",
            "[----------]",
            "0/3",
            "0%"
        ],
        "{listed}"
    );
    // The next entry and when, relative: 10% in 59m 59s (or so).
    assert_eq!(row[8..10], ["10%", "in"], "{listed}");
    assert!(row[10].ends_with('m'), "{listed}");

    // Filters reach the server; a state nothing is in lists nothing.
    let running = weir(
        &server,
        &[
            "flag",
            "rollouts",
            "--status",
            "running,stopped",
            "--flag",
            "banner",
        ],
    );
    assert!(running.status.success(), "{}", text(&running.stderr));
    assert_eq!(text(&running.stdout).lines().count(), 1, "only the header");
    let found = weir(
        &server,
        &[
            "flag", "rollouts", "--search", "GREEN", "--type", "manual", "--order", "-created",
        ],
    );
    assert!(
        text(&found.stdout).contains("shop/banner-green"),
        "{}{}",
        text(&found.stdout),
        text(&found.stderr)
    );
    // A bad state is named with the states there are.
    let bad = weir(&server, &["flag", "rollouts", "--status", "doing"]);
    assert_eq!(bad.status.code(), Some(1));
    let refusal = text(&bad.stderr);
    assert!(
        refusal.contains("status")
            && refusal.contains("one of WAITING, RUNNING, FINISHED, STOPPED"),
        "{refusal}"
    );
}
