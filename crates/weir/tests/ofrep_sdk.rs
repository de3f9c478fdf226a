//! weir's flags read through a real OpenFeature SDK: the Python SDK (`openfeature-sdk`) with its
//! OFREP provider (`openfeature-provider-ofrep`), installed from PyPI into a virtual environment
//! by `.ci/run`, against `weir serve` over loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;

/// The Python of the virtual environment `.ci/run` makes (`WEIR_OFREP_PYTHON` overrides).
fn sdk_python() -> PathBuf {
    let python = std::env::var_os("WEIR_OFREP_PYTHON").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ofrep-venv/bin/python"),
        PathBuf::from,
    );
    assert!(
        python.exists(),
        "{} is missing: `bash .ci/run` installs the OpenFeature SDK (openfeature-sdk, \
         openfeature-provider-ofrep) there, or set WEIR_OFREP_PYTHON to a Python that has them",
        python.display()
    );
    python
}

const FLAGS: [&str; 4] = [
    "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: new-checkout, namespace: shop}
spec:
  variations: [{name: 'off', value: false}, {name: 'on', value: true}]
  rules:
    - clauses: [{attribute: country, op: in, values: [DE, FR]}]
      variation: 'on'
  defaultStrategy: {variation: 'off'}
",
    "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: greeting, namespace: shop}
spec:
  variations: [{name: formal, value: hello}, {name: casual, value: hi}]
  defaultStrategy: {variation: formal}
",
    "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: limits, namespace: shop}
spec:
  variations: [{name: small, value: {max: 10}}, {name: large, value: {max: 100}}]
  defaultStrategy: {variation: small}
",
    "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: banner, namespace: shop}
spec:
  variations: [{name: control, value: blue}, {name: target, value: green}]
  defaultStrategy: {weights: {control: 80, target: 20}}
",
];

fn apply(server: &Weir, yaml: &str) {
    let answer = http::request(
        server.address("api"),
        "POST",
        "/api/v1/flags",
        &[("Content-Type", "application/yaml")],
        yaml,
    )
    .expect("weir serve answers");
    assert!(
        answer.status == 200 || answer.status == 201,
        "{}: {}",
        answer.status,
        answer.body
    );
}

/// What the SDK saw, from `sdk_check.py`.
fn sdk(server: &Weir, split_keys: u32) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ofrep/sdk_check.py");
    let output = Command::new(sdk_python())
        .arg(script)
        .arg(format!("{}/ns/shop", server.url("api")))
        .arg(split_keys.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn share(seen: &Value, value: &str, keys: u32) -> f64 {
    seen["split"]["shares"][value].as_f64().unwrap_or(0.0) * 100.0 / f64::from(keys)
}

#[test]
fn the_openfeature_python_sdk_reads_flags_over_ofrep() {
    let db = TempDb::new();
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &db.path(), &[]);
    for flag in FLAGS {
        apply(&server, flag);
    }

    let keys = 10_000;
    let seen = sdk(&server, keys);
    let expect = |name: &str, value: Value, variant: &str, reason: &str| {
        let got = &seen[name];
        assert_eq!(got["value"], value, "{name}: {got}");
        assert_eq!(got["variant"], variant, "{name}: {got}");
        assert_eq!(got["reason"], reason, "{name}: {got}");
        assert!(got["error"].is_null(), "{name}: {got}");
    };
    expect("boolean", Value::Bool(false), "off", "DEFAULT");
    expect("targeted", Value::Bool(true), "on", "TARGETING_MATCH");
    expect("string", Value::from("hello"), "formal", "STATIC");
    expect("object", serde_json::json!({"max": 10}), "small", "STATIC");
    // A flag that does not exist: the SDK's default, with the code.
    assert_eq!(seen["missing"]["value"], true, "{}", seen["missing"]);
    assert_eq!(seen["missing"]["error"], "FLAG_NOT_FOUND");
    // A split needs a targeting key.
    assert_eq!(seen["no_key"]["value"], "none", "{}", seen["no_key"]);
    assert_eq!(seen["no_key"]["error"], "TARGETING_KEY_MISSING");
    // 20% of 10,000 keys, within one point, every one of them a SPLIT.
    let green = share(&seen, "green", keys);
    assert!(
        (green - 20.0).abs() <= 1.0,
        "{green}% green: {}",
        seen["split"]
    );
    assert_eq!(seen["split"]["reasons"]["SPLIT"], keys, "{}", seen["split"]);

    // A flag rollout's schedule entry, due two seconds from now, raises the target to 50%:
    // once it has fired, the SDK sees the new split.
    let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(2);
    let rollout = format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: banner-target, namespace: shop}}
spec:
  target: {{kind: flag, flag: banner, control: control, variation: target}}
  plan: {{schedule: {{manual: [{{at: \"{at}\", weight: 50}}]}}}}
  analysis: {{interval: 1s}}
"
    );
    let applied = http::request(
        server.address("api"),
        "POST",
        "/api/v1/rollouts",
        &[("Content-Type", "application/yaml")],
        &rollout,
    )
    .expect("weir serve answers");
    assert_eq!(applied.status, 201, "{}", applied.body);
    let fired = wait_until("the schedule entry fired", || {
        let answer = http::get(server.address("api"), "/api/v1/rollouts/shop/banner-target")?;
        let rollout: Value = serde_json::from_str(&answer.body).ok()?;
        let triggered = rollout["status"]["triggered"][0]["triggeredAt"].as_str()?;
        Some(triggered.to_string())
    });
    println!("the entry due at {at} fired at {fired}");
    let after = sdk(&server, keys);
    let green_after = share(&after, "green", keys);
    // Buckets are a hash of each key, so a share of 10,000 keys is a sample: its standard
    // deviation at 50% is 0.5 points (the same keys always give the same share: no flakiness).
    assert!(
        (green_after - 50.0).abs() <= 2.0,
        "{green_after}% green: {}",
        after["split"]
    );
    assert!(
        green_after > green,
        "raising the weight only adds users to green"
    );
    println!(
        "SDK saw: boolean {}, targeted {}, string {}, object {}, missing {}, no key {}; \
         split of {keys} keys at 20%: {} ({green:.2}% green); at 50%: {} ({green_after:.2}% green)",
        seen["boolean"],
        seen["targeted"],
        seen["string"],
        seen["object"],
        seen["missing"],
        seen["no_key"],
        seen["split"],
        after["split"]
    );
}

#[test]
fn bulk_evaluation_answers_304_until_a_flag_changes() {
    let db = TempDb::new();
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &db.path(), &[]);
    for flag in FLAGS {
        apply(&server, flag);
    }
    let address = server.address("api");
    let bulk = |headers: &[(&str, &str)]| {
        http::request(
            address,
            "POST",
            "/ns/shop/ofrep/v1/evaluate/flags",
            &[&[("Content-Type", "application/json")], headers].concat(),
            r#"{"context": {"targetingKey": "user-7", "country": "FR"}}"#,
        )
        .unwrap()
    };
    let first = bulk(&[]);
    assert_eq!(first.status, 200, "{}", first.body);
    let body: Value = serde_json::from_str(&first.body).unwrap();
    let keys: Vec<&str> = body["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|flag| flag["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["banner", "greeting", "limits", "new-checkout"]);
    assert_eq!(body["flags"][3]["reason"], "TARGETING_MATCH");
    let tag = first.header("ETag").unwrap().to_string();
    let again = bulk(&[("If-None-Match", &tag)]);
    assert_eq!(again.status, 304);

    apply(
        &server,
        &FLAGS[1].replace("{variation: formal}", "{variation: casual}"),
    );
    let changed = bulk(&[("If-None-Match", &tag)]);
    assert_eq!(changed.status, 200, "a changed flag changes the tag");
    assert_ne!(changed.header("ETag").unwrap(), tag);
    // Namespace `default` has none of these flags; its routes have no /ns prefix.
    let other = http::request(
        address,
        "POST",
        "/ofrep/v1/evaluate/flags/banner",
        &[("Content-Type", "application/json")],
        r#"{"context": {"targetingKey": "user-7"}}"#,
    )
    .unwrap();
    assert_eq!(other.status, 404, "{}", other.body);
    let other: Value = serde_json::from_str(&other.body).unwrap();
    assert_eq!(other["errorCode"], "FLAG_NOT_FOUND");
    assert!(other["errorDetails"].is_string());
    let unparsable = http::request(
        address,
        "POST",
        "/ns/shop/ofrep/v1/evaluate/flags/banner",
        &[("Content-Type", "application/json")],
        "{not json",
    )
    .unwrap();
    assert_eq!(unparsable.status, 400);
    assert!(
        unparsable.body.contains("PARSE_ERROR"),
        "{}",
        unparsable.body
    );
}
