//! The evidence rule (`spec.analysis.evidence`) through a real `weir serve`: a local rollout
//! whose canary sees almost no traffic holds at its last step and says what it waits for (in
//! its status, its history, `weir status` and /metrics), then promotes once traffic arrives; with
//! `onDeadline: rollback` it rolls back when the deadline passes; and a rule with a bad field is
//! refused by `weir apply`, naming the field and what it allows, with nothing stored.
//!
//! Load goes through the rollout's own router (its address read from the history), from an
//! open-loop generator in the test; every wait is on a condition.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::process::Output;

use serde_json::Value;
use weir_testkit::engine::Load;
use weir_testkit::fixtures::{TempDb, runtime, sample_apps};
use weir_testkit::http::get;
use weir_testkit::metrics::Exposition;
use weir_testkit::process::{Weir, apply, output};
use weir_testkit::wait::wait_until;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn weir(args: &[&str]) -> Output {
    output(WEIR, args)
}

/// A local rollout of two sample apps, one canary step at 50%, then the promotion, with
/// `evidence` as its `spec.analysis.evidence` (YAML flow mapping).
fn rollout(name: &str, versions: &[SocketAddr], evidence: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}}}
spec:
  target:
    kind: local
    listen: \"127.0.0.1:0\"
    primary: {{url: \"http://{v1}\", healthCheck: /healthz}}
    canary: {{url: \"http://{v2}\", healthCheck: /healthz}}
  plan: {{canary: {{stepWeights: [50]}}}}
  analysis: {{interval: 1s, progressDeadline: 1m, evidence: {evidence}}}
",
        v1 = versions[0],
        v2 = versions[1],
    )
}

/// The rollout as `weir get NAME -o json` shows it (a list of one; `Null` until it answers).
fn rollout_view(server: &str, name: &str) -> Value {
    let shown = weir(&["get", name, "--output", "json", "--server", server]);
    let listed: Value = serde_json::from_slice(&shown.stdout).unwrap_or(Value::Null);
    listed[0].clone()
}

/// The rollout's history, oldest first (`weir history NAME -o json`, one event a line).
fn history(server: &str, name: &str) -> Vec<Value> {
    let shown = weir(&["history", name, "--output", "json", "--server", server]);
    String::from_utf8_lossy(&shown.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn reasons(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| event["reason"].as_str().map(String::from))
        .collect()
}

/// Where the rollout's router listens, as its history says.
fn router_address(server: &str, name: &str) -> SocketAddr {
    wait_until("the router's address in the history", || {
        history(server, name).iter().find_map(|event| {
            let message = event["message"].as_str()?;
            let address = message.strip_prefix("the router listens on http://")?;
            address.parse().ok()
        })
    })
}

/// The value of `weir_rollout_waiting_for_evidence` for rollout `name` (`None`: no series).
fn waiting_gauge(api: SocketAddr, name: &str) -> Option<f64> {
    let answer = get(api, "/metrics").expect("weir serve answers /metrics");
    assert_eq!(answer.status, 200, "{}", answer.head);
    Exposition::parse(answer.body).value(
        "weir_rollout_waiting_for_evidence",
        &[("namespace", "default"), ("rollout", name)],
    )
}

#[test]
fn a_quiet_canary_holds_for_evidence_then_promotes_once_traffic_arrives() {
    let runtime = runtime();
    let _context = runtime.enter();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let dir = TempDb::new();
    let server = Weir::serve(WEIR, &dir.path(), &[]);
    let (api, url) = (server.address("api"), server.url("api"));
    let file = dir.file("quiet.yaml");
    // A 5-point margin: a few hundred canary requests show health, which the slow load takes
    // many minutes to send and the fast one seconds.
    std::fs::write(&file, rollout("quiet", &versions, "{marginPercent: 5}")).unwrap();
    apply(WEIR, &file, &url);
    let router = router_address(&url, "quiet");

    // A few requests a second: the run reaches its last step and holds there.
    let slow = Load::at(router, 1.0);
    let held = wait_until("the run to hold for evidence at 50%", || {
        let view = rollout_view(&url, "quiet");
        let message = view["status"]["message"].as_str().unwrap_or_default();
        message
            .starts_with("holding at 50% before promoting: waiting for evidence")
            .then_some(view)
    });
    let status = &held["status"];
    assert_eq!(status["phase"], "Progressing", "{held}");
    assert!(status["evidenceWaitSince"].is_string(), "{held}");
    let events = history(&url, "quiet");
    let waiting: Vec<&Value> = events
        .iter()
        .filter(|event| event["reason"] == "WaitingForEvidence")
        .collect();
    assert_eq!(
        waiting.len(),
        1,
        "one event when the wait starts: {events:?}"
    );
    let waiting_message = waiting[0]["message"].as_str().unwrap();
    assert!(
        waiting_message.starts_with("holding at 50% before promoting: "),
        "{waiting_message}"
    );
    wait_until("weir_rollout_waiting_for_evidence = 1", || {
        (waiting_gauge(api, "quiet") == Some(1.0)).then_some(())
    });
    let shown = weir(&["status", "quiet", "--server", &url]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{text}");
    assert!(text.contains("waiting for evidence since "), "{text}");
    assert!(
        text.contains("holding at 50% before promoting: waiting for evidence"),
        "{text}"
    );
    println!("held: {}", status["message"]);

    // Traffic arrives: the judges show health and the run promotes.
    let before = runtime.block_on(slow.stop());
    let fast = Load::at(router, 100.0);
    let done = wait_until("the promotion", || {
        let view = rollout_view(&url, "quiet");
        let phase = view["status"]["phase"].as_str().unwrap_or_default();
        assert_ne!(phase, "Failed", "{view}");
        (phase == "Succeeded").then_some(view)
    });
    let after = runtime.block_on(fast.stop());
    assert!(
        done["status"].get("evidenceWaitSince").is_none(),
        "the wait ended: {done}"
    );
    let events = history(&url, "quiet");
    let order = reasons(&events);
    let position = |reason: &str| {
        order
            .iter()
            .position(|seen| seen == reason)
            .unwrap_or_else(|| panic!("no {reason} event: {order:?}"))
    };
    assert!(
        position("WaitingForEvidence") < position("EvidenceShown")
            && position("EvidenceShown") < position("Promoting")
            && position("Promoting") < position("Succeeded"),
        "{order:?}"
    );
    let shown_event = &events[position("EvidenceShown")];
    let shown_message = shown_event["message"].as_str().unwrap();
    assert!(
        shown_message.starts_with("evidence of health after waiting "),
        "{shown_message}"
    );
    assert!(!shown_message.contains("WITHOUT"), "{shown_message}");
    // The run is over: its evidence series are gone.
    wait_until("the waiting series removed", || {
        waiting_gauge(api, "quiet").is_none().then_some(())
    });
    println!(
        "promoted: {shown_message} (the slow load sent {} requests, the fast one {})",
        before.sent, after.sent
    );
}

#[test]
fn without_evidence_by_the_deadline_on_deadline_rollback_rolls_back() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let dir = TempDb::new();
    let server = Weir::serve(WEIR, &dir.path(), &[]);
    let url = server.url("api");
    let file = dir.file("lonely.yaml");
    // No load at all: nothing can show health, and the deadline is short.
    std::fs::write(
        &file,
        rollout("lonely", &versions, "{deadline: 3s, onDeadline: rollback}"),
    )
    .unwrap();
    apply(WEIR, &file, &url);

    let failed = wait_until("the rollback", || {
        let view = rollout_view(&url, "lonely");
        let phase = view["status"]["phase"].as_str().unwrap_or_default();
        assert_ne!(phase, "Succeeded", "promoted without evidence: {view}");
        (phase == "Failed").then_some(view)
    });
    assert_eq!(failed["status"]["canaryWeight"], 0, "{failed}");
    let events = history(&url, "lonely");
    let order = reasons(&events);
    let waited = order
        .iter()
        .position(|reason| reason == "WaitingForEvidence")
        .unwrap_or_else(|| panic!("no WaitingForEvidence event: {order:?}"));
    let rolled_back = events
        .iter()
        .skip(waited)
        .find(|event| event["reason"] == "RolledBack")
        .unwrap_or_else(|| panic!("no RolledBack event after the wait: {order:?}"));
    let deadline = rolled_back["message"].as_str().unwrap();
    assert!(
        deadline.contains(
            "no evidence of health within spec.analysis.evidence.deadline (3s): rolling back as \
             onDeadline says"
        ),
        "{deadline}"
    );
    assert_eq!(rolled_back["phase"], "Failed", "{rolled_back}");
    assert!(
        !order.iter().any(|reason| reason == "Promoting"),
        "{order:?}"
    );
    println!("rolled back: {deadline}");
}

#[test]
fn a_bad_evidence_rule_is_refused_naming_the_field_and_nothing_is_stored() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let dir = TempDb::new();
    let server = Weir::serve(WEIR, &dir.path(), &[]);
    let url = server.url("api");
    let cases = [
        (
            "{marginPercent: 0}",
            "spec.analysis.evidence.marginPercent",
            "above 0 and below 100",
        ),
        (
            "{deadline: 500ms}",
            "spec.analysis.evidence.deadline",
            "at least the interval",
        ),
        (
            "{fromWeight: 100}",
            "spec.analysis.evidence.fromWeight",
            "below 100%",
        ),
        (
            "{onDeadline: maybe}",
            "spec.analysis.evidence.onDeadline",
            "`hold`, `rollback`, `promote`",
        ),
    ];
    for (index, (evidence, field, allowed)) in cases.iter().enumerate() {
        let file = dir.file(&format!("bad-{index}.yaml"));
        std::fs::write(&file, rollout("picky", &versions, evidence)).unwrap();
        let applied = weir(&["apply", "-f", &file.display().to_string(), "--server", &url]);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&applied.stdout),
            String::from_utf8_lossy(&applied.stderr)
        );
        assert!(!applied.status.success(), "{evidence} was accepted: {said}");
        assert!(said.contains(field), "{evidence}: names {field}: {said}");
        assert!(said.contains(allowed), "{evidence}: says {allowed}: {said}");
        println!("{evidence}: {}", said.trim());
    }
    let listed = weir(&["get", "--output", "json", "--server", &url]);
    let rollouts: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(rollouts, Value::Array(Vec::new()), "nothing is stored");
}
