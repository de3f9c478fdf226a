//! While a flag rollout runs, a change of what it drives (the flag's variations and default
//! strategy) is refused naming the rollout; other changes (on/off, rules) go through, also when
//! the document sent back is the one a GET showed (with the rollout's strategy in force).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;

const BANNER: &str = "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: banner, namespace: shop}
spec:
  variations: [{name: blue, value: blue}, {name: green, value: green}]
  defaultStrategy: {variation: blue}
";

fn send(server: &Weir, method: &str, path: &str, content_type: &str, body: &str) -> (u16, Value) {
    let answer = http::request(
        server.address("api"),
        method,
        path,
        &[("Content-Type", content_type)],
        body,
    )
    .unwrap();
    (
        answer.status,
        serde_json::from_str(&answer.body).unwrap_or(Value::Null),
    )
}

#[test]
fn a_change_of_what_a_running_flag_rollout_drives_is_refused_naming_it() {
    let db = TempDb::new();
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &db.path(), &[]);
    let (status, _) = send(&server, "POST", "/api/v1/flags", "application/yaml", BANNER);
    assert_eq!(status, 201);
    let at = jiff::Timestamp::now();
    let rollout = format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: banner-green, namespace: shop}}
spec:
  target: {{kind: flag, flag: banner, control: blue, variation: green}}
  plan:
    schedule:
      manual: [{{at: \"{at}\", weight: 30}}]
  analysis: {{interval: 1s}}
"
    );
    let (status, applied) = send(
        &server,
        "POST",
        "/api/v1/rollouts",
        "application/yaml",
        &rollout,
    );
    assert!(status == 201 || status == 200, "{applied:#}");
    let shown = wait_until("the rollout's 30% in force", || {
        let (_, flag) = send(&server, "GET", "/api/v1/flags/shop/banner", "", "");
        (flag["spec"]["defaultStrategy"]["weights"]["green"] == 30
            && flag["rolledOutBy"] == "shop/banner-green")
            .then_some(flag)
    });

    // Another default strategy: refused, naming the rollout.
    let mut changed = shown.clone();
    changed["spec"]["defaultStrategy"] = json!({"variation": "green"});
    let (status, refused) = send(
        &server,
        "PUT",
        "/api/v1/flags/shop/banner",
        "application/json",
        &changed.to_string(),
    );
    assert_eq!(status, 409, "{refused:#}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("shop/banner-green") && message.contains("default strategy"),
        "{message}"
    );
    // Other variations: refused too.
    let mut changed = shown.clone();
    changed["spec"]["variations"][1]["value"] = json!("teal");
    let (status, refused) = send(
        &server,
        "PUT",
        "/api/v1/flags/shop/banner",
        "application/json",
        &changed.to_string(),
    );
    assert_eq!(status, 409, "{refused:#}");

    // Turning it off, the rest as the GET showed it: accepted, the rollout's split untouched.
    let mut off = shown.clone();
    off["spec"]["enabled"] = json!(false);
    let (status, written) = send(
        &server,
        "PUT",
        "/api/v1/flags/shop/banner",
        "application/json",
        &off.to_string(),
    );
    assert_eq!(status, 200, "{written:#}");
    assert_eq!(written["flag"]["spec"]["enabled"], false, "{written:#}");
    assert_eq!(
        written["flag"]["spec"]["defaultStrategy"]["weights"]["green"], 30,
        "{written:#}"
    );
    let (_, history) = send(&server, "GET", "/api/v1/flags/shop/banner/history", "", "");
    assert_eq!(
        history["items"][0]["summary"],
        json!(["spec.enabled: true -> false"]),
        "{history:#}"
    );
}
