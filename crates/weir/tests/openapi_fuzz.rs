//! weir's OpenAPI document tried as a new user would: schemathesis (from PyPI, installed by
//! `.ci/run` into a virtual environment) reads `/api/v1/openapi.json` from `weir serve` and
//! sends requests generated from it - valid ones, invalid ones, and sequences that follow
//! what one answer gives the next - with every check: no server error, every status,
//! content type, header and body as documented, invalid data refused, valid data accepted
//! (but see `openapi_fuzz/schemathesis.toml`), unsupported methods answered 405.
//!
//! Two operations are left out: the watch streams (`watch`, `watchFlags`) stay open until the
//! client hangs up, by design, so a fuzzer waits on them until its timeout (their own tests are
//! in weir-api's `tests/api.rs`). The server has tokens: schemathesis sends an admin token's
//! secret with every request, and its `ignored_auth` check tries each operation that needs one
//! without it and with a wrong one. Wrong ones count against the client's address, so the
//! server runs with `--bad-token-limit` high enough that the rate limit (tested on its own in
//! `tests/auth.rs`) never answers 429 to the fuzzer's good requests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::process::Weir;

/// The `schemathesis` of the virtual environment `.ci/run` makes (`WEIR_SCHEMATHESIS`
/// overrides), or why there is none.
fn schemathesis() -> Result<PathBuf, String> {
    let path = std::env::var_os("WEIR_SCHEMATHESIS").map_or_else(
        || {
            let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
                || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
                PathBuf::from,
            );
            target.join("schemathesis-venv/bin/schemathesis")
        },
        PathBuf::from,
    );
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: `bash .ci/run` installs schemathesis from PyPI there (or: python3 -m \
             venv target/schemathesis-venv && target/schemathesis-venv/bin/pip install \
             schemathesis==4.32.5), or set WEIR_SCHEMATHESIS to a schemathesis executable",
            path.display()
        ))
    }
}

/// A flag and a rollout of it, so that lists, gets and commands answer with real objects
/// (whose bodies are then checked against the document) and not only 404s.
const SEED: [(&str, &str); 2] = [
    (
        "/api/v1/flags",
        "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: new-checkout, namespace: shop}
spec:
  variations: [{name: 'off', value: false}, {name: 'on', value: true}]
  defaultStrategy: {variation: 'off'}
",
    ),
    (
        "/api/v1/rollouts",
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: checkout, namespace: shop}
spec:
  target: {kind: flag, flag: new-checkout, control: 'off', variation: 'on'}
  plan: {schedule: {template: {start: '2099-01-01T00:00:00Z', interval: hourly, increments: 25}}}
  analysis: {interval: 1s}
",
    ),
];

#[test]
fn schemathesis_finds_no_server_error_and_no_mismatch() {
    let schemathesis = match schemathesis() {
        Ok(path) => path,
        Err(reason) if std::env::var("CI").is_ok_and(|ci| ci == "true") => panic!("{reason}"),
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let db = TempDb::new();
    let db_path = db.path();
    let db_arg = db_path.to_str().unwrap();
    // A name no generated request will revoke by chance (names are drawn from the pattern).
    let created = weir_testkit::process::output(
        env!("CARGO_BIN_EXE_weir"),
        &[
            "token",
            "create",
            "--db",
            db_arg,
            "--name",
            "fuzzer-admin-7f3c9a",
            "--scope",
            "admin",
        ],
    );
    assert!(created.status.success(), "{created:?}");
    let secret = String::from_utf8(created.stdout)
        .unwrap()
        .trim()
        .to_string();
    let bearer = format!("Bearer {secret}");
    let server = Weir::serve(
        env!("CARGO_BIN_EXE_weir"),
        &db_path,
        &["--bad-token-limit", "1000000"],
    );
    for (path, document) in SEED {
        let answer = http::request(
            server.address("api"),
            "POST",
            path,
            &[
                ("Content-Type", "application/yaml"),
                ("Authorization", &bearer),
            ],
            document,
        )
        .expect("weir serve answers");
        assert_eq!(answer.status, 201, "{path}: {}", answer.body);
    }

    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi_fuzz/schemathesis.toml");
    let scratch = tempfile::tempdir().unwrap();
    let output = Command::new(&schemathesis)
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .args(["--checks", "all"])
        .args(["--header", &format!("Authorization: {bearer}")])
        .args([
            "--exclude-operation-id",
            "watch",
            "--exclude-operation-id",
            "watchFlags",
        ])
        // Bounded: about ten thousand requests, two and a half minutes alone on two cores. One
        // worker: with two, a run once stopped on an error inside hypothesis itself (CPython
        // 3.11's `ast.parse`: "AST constructor recursion depth mismatch"), not a finding.
        .args(["--max-examples", "20", "--seed", "14", "--workers", "1"])
        .args(["--request-timeout", "30", "--no-color"])
        // Nothing remembered between runs (each run is its seed's alone), nothing written into
        // the repository: schemathesis keeps its cache in the working directory.
        .args(["--generation-database", "none"])
        .arg("--report-dir")
        .arg(scratch.path().join("reports"))
        .current_dir(scratch.path())
        .arg(format!("{}/api/v1/openapi.json", server.url("api")))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary = stdout
        .find("SUMMARY")
        .map_or(stdout.as_ref(), |at| &stdout[at..]);
    println!("schemathesis summary:\n{summary}");
    assert!(
        output.status.success(),
        "schemathesis found problems (exit {:?}):\n{stdout}\n{stderr}",
        output.status.code()
    );
    assert!(!summary.contains('❌'), "{stdout}");
    // Every operation of the document was tried but the two streams and the document itself
    // (schemathesis leaves out the operation that serves the schema it reads).
    let document = http::get(server.address("api"), "/api/v1/openapi.json").unwrap();
    let document: serde_json::Value = serde_json::from_str(&document.body).unwrap();
    let operations: usize = document["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().map_or(0, serde_json::Map::len))
        .sum();
    let tested = format!("Tested: {}", operations - 3);
    assert!(summary.contains(&tested), "expected {tested:?}:\n{summary}");
}
