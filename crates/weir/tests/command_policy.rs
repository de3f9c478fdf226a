//! `weir serve` starts no program a client sends it (issue 20): a rollout whose versions are
//! commands is refused unless the server was started with `--allow-commands`, and one stored
//! earlier is not started by a server without it. The command's own side effect - a file it
//! creates - is what shows whether it ran.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use serde_json::Value;
use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;

/// A local rollout whose primary is a command that creates `marker`, then serves HTTP.
fn command_rollout(marker: &Path) -> String {
    let dir = marker.parent().unwrap().display();
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: shell}}
spec:
  target:
    kind: local
    listen: \"127.0.0.1:0\"
    primary:
      command: [sh, -c, \"touch {marker} && exec python3 -m http.server {{port}} --bind 127.0.0.1 --directory {dir}\"]
      healthCheck: /
      startTimeout: 20s
    canary: {{command: [python3, -m, http.server, \"{{port}}\", --bind, 127.0.0.1, --directory, \"{dir}\"], healthCheck: /, startTimeout: 20s}}
  plan: {{canary: {{stepWeight: 10, maxWeight: 50}}}}
",
        marker = marker.display()
    )
}

fn post_rollout(server: &Weir, yaml: &str) -> http::Response {
    http::request(
        server.address("api"),
        "POST",
        "/api/v1/rollouts",
        &[("Content-Type", "application/yaml")],
        yaml,
    )
    .unwrap()
}

fn history(server: &Weir) -> String {
    http::get(
        server.address("api"),
        "/api/v1/rollouts/default/shell/events",
    )
    .map(|answer| answer.body)
    .unwrap_or_default()
}

#[test]
fn a_command_sent_to_the_api_is_refused_without_the_policy_and_runs_with_it() {
    let dir = TempDb::new();
    let marker = dir.file("the-command-ran");
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &dir.path(), &[]);
    let refused = post_rollout(&server, &command_rollout(&marker));
    println!(
        "without --allow-commands: {} {}",
        refused.status, refused.body
    );
    assert_eq!(refused.status, 422, "{}", refused.body);
    let body: Value = serde_json::from_str(&refused.body).unwrap();
    let paths: Vec<&str> = body["error"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|error| error["path"].as_str())
        .collect();
    assert_eq!(
        paths,
        ["spec.target.primary.command", "spec.target.canary.command"]
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--allow-commands"),
        "{body}"
    );
    // Nothing stored, nothing started.
    let stored = http::get(server.address("api"), "/api/v1/rollouts/default/shell").unwrap();
    assert_eq!(stored.status, 404, "{}", stored.body);
    assert!(!marker.exists(), "the refused command ran");
    drop(server);

    let server = Weir::serve(
        env!("CARGO_BIN_EXE_weir"),
        &dir.path(),
        &["--allow-commands"],
    );
    let accepted = post_rollout(&server, &command_rollout(&marker));
    assert_eq!(accepted.status, 201, "{}", accepted.body);
    wait_until("the command started", || marker.exists().then_some(()));
}

#[test]
fn a_command_stored_before_the_policy_is_not_started_and_the_history_says_why() {
    let dir = TempDb::new();
    let marker = dir.file("the-command-ran");
    let server = Weir::serve(
        env!("CARGO_BIN_EXE_weir"),
        &dir.path(),
        &["--allow-commands"],
    );
    let accepted = post_rollout(&server, &command_rollout(&marker));
    assert_eq!(accepted.status, 201, "{}", accepted.body);
    wait_until("the command started", || marker.exists().then_some(()));
    drop(server); // SIGKILL; the version's guard stops its command
    std::fs::remove_file(&marker).unwrap();

    // The same database under a server without the policy (an upgrade that adds it).
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &dir.path(), &[]);
    let said = wait_until("the history says why the command is not started", || {
        let history = history(&server);
        history.contains("--allow-commands").then_some(history)
    });
    println!("history: {said}");
    assert!(said.contains("not starting command"), "{said}");
    assert!(
        !marker.exists(),
        "the stored command ran without the policy"
    );
}
