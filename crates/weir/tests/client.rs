//! The client verbs against a real `weir serve`: what they print is decoded from the API's own
//! types (weir_api::types), so a drift between server and CLI shows here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use weir_testkit::fixtures::{TempDb, runtime, sample_apps};
use weir_testkit::process::{Weir, output};
use weir_testkit::wait::wait_until;

fn weir(args: &[&str]) -> (Option<i32>, String, String) {
    let out = output(env!("CARGO_BIN_EXE_weir"), args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn client_verbs_print_what_the_server_answers() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let dir = TempDb::new();
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &dir.path(), &[]);
    let url = server.url("api");

    // A refused document: every field error is decoded and printed with its path.
    let bad = dir.file("bad.yaml");
    std::fs::write(
        &bad,
        format!(
            "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: web}}\nspec:\n  target: {{kind: local, lisen: x, listen: \"127.0.0.1:0\", primary: {{url: \"http://{}\"}}, canary: {{url: \"http://{}\"}}}}\n  plan: {{canary: {{stepWeight: 150}}}}\n",
            versions[0], versions[1]
        ),
    )
    .unwrap();
    let (code, _, stderr) = weir(&["apply", "-f", &bad.display().to_string(), "--server", &url]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("error (400): "), "{stderr}");
    assert!(stderr.contains("  - spec.target.lisen: "), "{stderr}");
    assert!(
        stderr.contains("  - spec.plan.canary.stepWeight: "),
        "{stderr}"
    );

    // A rollout that stops at a pause until resumed, so every verb sees it mid-run.
    let good = dir.file("good.yaml");
    std::fs::write(
        &good,
        format!(
            "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: web}}\nspec:\n  target: {{kind: local, listen: \"127.0.0.1:0\", primary: {{url: \"http://{}\", healthCheck: /healthz}}, canary: {{url: \"http://{}\", healthCheck: /healthz}}}}\n  plan: {{canary: {{steps: [{{weight: 20, pause: {{}}}}, {{weight: 100}}]}}}}\n  analysis: {{interval: 1s}}\n",
            versions[0], versions[1]
        ),
    )
    .unwrap();
    let (code, stdout, stderr) =
        weir(&["apply", "-f", &good.display().to_string(), "--server", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.trim(), "rollout web created");

    let status = wait_until("the rollout paused at 20%", || {
        let (code, stdout, _) = weir(&["status", "web", "--server", &url]);
        (code == Some(0) && stdout.contains("canary 20%") && stdout.contains(", paused"))
            .then_some(stdout)
    });
    assert!(
        status.starts_with("default/web: Progressing, canary 20%, run 1"),
        "{status}"
    );
    assert!(status.contains("canary revision "), "{status}");
    assert!(status.contains("last events:\n  #1"), "{status}");

    let (code, table, _) = weir(&["get", "--server", &url]);
    assert_eq!(code, Some(0));
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("NAMESPACE  NAME  PHASE"), "{table}");
    assert!(
        lines[1].starts_with("default    web   Progressing  20%"),
        "{table}"
    );

    let (code, history, _) = weir(&["history", "web", "--server", &url]);
    assert_eq!(code, Some(0));
    assert!(
        history.lines().next().unwrap().starts_with("#1 "),
        "{history}"
    );

    let (code, resumed, stderr) = weir(&["resume", "web", "--server", &url]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(resumed.starts_with("default/web: "), "{resumed}");

    let (code, _, stderr) = weir(&["status", "nothing", "--server", &url]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("error (404): rollout default/nothing not found"),
        "{stderr}"
    );

    let (code, deleted, _) = weir(&["delete", "web", "--server", &url]);
    assert_eq!(code, Some(0));
    assert_eq!(deleted.trim(), "rollout web deleted");
}
