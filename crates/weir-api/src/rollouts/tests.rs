#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::http::{HeaderMap, HeaderValue, header};
use weir_core::machine::Command;

use super::{command_of, rollout_of};
use crate::error::{ApiError, ErrorCode};
use crate::input::{self, Format, Precondition};

const ROLLOUT: &str = "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: demo, namespace: team}
spec:
  target: {kind: flag, revision: r1}
  plan: {canary: {stepWeight: 50}}
  analysis: {interval: 1s}
";

fn paths(error: &ApiError) -> Vec<String> {
    match error {
        ApiError::Invalid { errors, .. } => errors.iter().map(|error| error.path.clone()).collect(),
        other => panic!("not invalid: {other:?}"),
    }
}

#[test]
fn commands_parse_with_their_actor() {
    let (command, actor) = command_of(br#"{"command": "skip-analysis", "actor": "ana"}"#).unwrap();
    assert_eq!(command, Command::SkipAnalysis);
    assert_eq!(actor.as_deref(), Some("ana"));
    let (command, actor) = command_of(br#"{"command": "pause"}"#).unwrap();
    assert_eq!((command, actor), (Command::Pause, None));
}

#[test]
fn bad_commands_name_every_field() {
    let error = command_of(br#"{"command": "jump", "actor": 3, "extra": true}"#).unwrap_err();
    assert_eq!(paths(&error), ["command", "actor", "extra"]);
    assert_eq!(paths(&command_of(b"{}").unwrap_err()), ["command"]);
    assert_eq!(paths(&command_of(b"[1]").unwrap_err()), ["(body)"]);
    assert_eq!(paths(&command_of(b"\xff").unwrap_err()), ["(body)"]);
}

#[test]
fn gate_commands_carry_their_gate() {
    use weir_core::machine::GateRef;
    use weir_core::model::HookType;
    let (command, actor) = command_of(
        br#"{"command": "open-gate", "gate": {"type": "confirm-promotion", "hook": "approval"}, "actor": "ana"}"#,
    )
    .unwrap();
    assert_eq!(
        command,
        Command::OpenGate(GateRef {
            hook_type: Some(HookType::ConfirmPromotion),
            hook: Some("approval".into()),
        })
    );
    assert_eq!(actor.as_deref(), Some("ana"));
    let (command, _) =
        command_of(br#"{"command": "close-gate", "gate": {"hook": "more"}}"#).unwrap();
    assert_eq!(
        command,
        Command::CloseGate(GateRef {
            hook_type: None,
            hook: Some("more".into()),
        })
    );
}

#[test]
fn bad_gate_commands_name_every_field() {
    assert_eq!(
        paths(&command_of(br#"{"command": "open-gate"}"#).unwrap_err()),
        ["gate"]
    );
    assert_eq!(
        paths(&command_of(br#"{"command": "open-gate", "gate": {}}"#).unwrap_err()),
        ["gate"]
    );
    assert_eq!(
        paths(&command_of(br#"{"command": "pause", "gate": {"hook": "x"}}"#).unwrap_err()),
        ["gate"]
    );
    let error = command_of(
        br#"{"command": "close-gate", "gate": {"type": "rollout", "hook": 3, "why": "x"}}"#,
    )
    .unwrap_err();
    assert_eq!(paths(&error), ["gate.type", "gate.hook", "gate.why"]);
    let text = format!("{error:?}");
    assert!(
        text.contains("confirm-rollout, confirm-traffic-increase, confirm-promotion"),
        "{text}"
    );
}

#[test]
fn server_fields_are_ignored_on_apply() {
    let with_extras = format!("{ROLLOUT}version: 9\ngeneration: 2\nstatus: {{phase: Failed}}\n");
    let (rollout, warnings) = rollout_of(with_extras.as_bytes(), Format::Yaml).unwrap();
    assert_eq!(rollout.metadata.name, "demo");
    assert!(rollout.status.is_none());
    assert!(warnings.is_empty());
}

#[test]
fn documents_are_one_rollout() {
    let two = format!("{ROLLOUT}---\n{ROLLOUT}");
    assert_eq!(
        paths(&rollout_of(two.as_bytes(), Format::Yaml).unwrap_err()),
        ["(document)"]
    );
    assert_eq!(
        paths(&rollout_of(b"", Format::Yaml).unwrap_err()),
        ["(document)"]
    );
    assert_eq!(
        paths(&rollout_of(b"{", Format::Json).unwrap_err()),
        ["(document)"]
    );
    // YAML is not JSON.
    assert_eq!(
        paths(&rollout_of(ROLLOUT.as_bytes(), Format::Json).unwrap_err()),
        ["(document)"]
    );
}

#[test]
fn content_types() {
    let mut headers = HeaderMap::new();
    assert_eq!(
        input::format(&headers, true, None).unwrap_err().code(),
        ErrorCode::UnsupportedMediaType
    );
    assert_eq!(
        input::format(&headers, false, Some(Format::Json)).unwrap(),
        Format::Json
    );
    for (value, expected) in [
        ("application/json; charset=utf-8", Some(Format::Json)),
        ("Application/YAML", Some(Format::Yaml)),
        ("application/x-yaml", Some(Format::Yaml)),
        ("application/merge-patch+json", Some(Format::Json)),
        ("text/plain", None),
        ("", None),
    ] {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
        assert_eq!(
            input::format(&headers, true, None).ok(),
            expected,
            "{value}"
        );
    }
}

#[test]
fn preconditions() {
    let version = |headers: &HeaderMap, query| match input::precondition(headers, query) {
        Ok(Precondition::Version(version)) => Some(version),
        Ok(_) => None,
        Err(error) => panic!("{error}"),
    };
    let mut headers = HeaderMap::new();
    assert_eq!(version(&headers, None), None);
    assert_eq!(version(&headers, Some(4)), Some(4));
    headers.insert(header::IF_MATCH, HeaderValue::from_static("\"7\""));
    assert_eq!(version(&headers, None), Some(7));
    assert_eq!(version(&headers, Some(7)), Some(7));
    assert!(input::precondition(&headers, Some(6)).is_err());
    headers.insert(header::IF_MATCH, HeaderValue::from_static("7"));
    assert_eq!(version(&headers, None), Some(7));
    for bad in ["W/\"7\"", "\"x\"", "\"0\"", "\"1\", \"2\""] {
        headers.insert(header::IF_MATCH, HeaderValue::from_static(bad));
        assert_eq!(
            paths(&input::precondition(&headers, None).unwrap_err()),
            ["If-Match"],
            "{bad}"
        );
    }
    headers.insert(header::IF_MATCH, HeaderValue::from_static("*"));
    assert!(matches!(
        input::precondition(&headers, None),
        Ok(Precondition::Exists)
    ));
    assert_eq!(version(&headers, Some(3)), Some(3));
    assert!(input::precondition(&headers, Some(0)).is_err());
    let mut create_only = HeaderMap::new();
    create_only.insert(header::IF_NONE_MATCH, HeaderValue::from_static("*"));
    assert_eq!(version(&create_only, None), Some(0));
}

#[test]
fn the_shared_command_request_is_what_the_server_reads() {
    use crate::types::{CommandRequest, GateRequest};
    let request = CommandRequest {
        command: "open-gate".into(),
        actor: Some("ana".into()),
        gate: Some(GateRequest {
            gate_type: Some("confirm-promotion".into()),
            hook: None,
        }),
        rollback: None,
        step: None,
    };
    let bytes = serde_json::to_vec(&request).unwrap();
    let (command, actor) = command_of(&bytes).unwrap();
    assert_eq!(actor.as_deref(), Some("ana"));
    assert_eq!(command.as_str(), "open-gate");
    let pause = CommandRequest {
        command: "pause".into(),
        ..CommandRequest::default()
    };
    let (command, actor) = command_of(&serde_json::to_vec(&pause).unwrap()).unwrap();
    assert_eq!((command, actor), (Command::Pause, None));
    let stop = CommandRequest {
        command: "stop".into(),
        rollback: Some(true),
        ..CommandRequest::default()
    };
    let (command, _) = command_of(&serde_json::to_vec(&stop).unwrap()).unwrap();
    assert_eq!(command, Command::Stop { rollback: true });
}

#[test]
fn rollback_belongs_to_stop_and_is_a_boolean() {
    let error = command_of(br#"{"command": "pause", "rollback": true}"#).unwrap_err();
    assert!(
        format!("{error:?}").contains("only stop takes rollback"),
        "{error:?}"
    );
    let error = command_of(br#"{"command": "stop", "rollback": "yes"}"#).unwrap_err();
    assert!(format!("{error:?}").contains("rollback"), "{error:?}");
    let (command, _) = command_of(br#"{"command": "stop"}"#).unwrap();
    assert_eq!(command, Command::Stop { rollback: false });
}

/// A rollout whose document names no namespace (examples/local-urls.yaml) is stored under
/// `default`, and every answer says so: a client never meets a rollout without a namespace.
#[test]
fn a_rollout_without_a_namespace_is_shown_in_default() {
    let document = "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: search}
spec:
  target: {kind: flag, revision: r1}
  plan: {canary: {stepWeight: 50}}
  analysis: {interval: 1s}
";
    let (rollout, _) = rollout_of(document.as_bytes(), Format::Yaml).unwrap();
    assert_eq!(rollout.metadata.namespace, None);
    let now = jiff::Timestamp::now();
    let stored = weir_store::StoredRollout {
        key: weir_store::RolloutKey::of(&rollout),
        rollout,
        status: weir_core::model::RolloutStatus::default(),
        version: 1,
        generation: 1,
        pending_effects: Vec::new(),
        last_event_seq: 0,
        created_at: now,
        updated_at: now,
    };
    let view = serde_json::to_value(crate::types::RolloutView::from(stored)).unwrap();
    assert_eq!(view["metadata"]["namespace"], "default", "{view}");
    assert_eq!(view["metadata"]["name"], "search", "{view}");
}

#[test]
fn step_belongs_to_promote_and_is_a_boolean() {
    let (command, actor) =
        command_of(br#"{"command": "promote", "step": true, "actor": "ana"}"#).unwrap();
    assert_eq!(
        (command, actor.as_deref()),
        (Command::PromoteStep, Some("ana"))
    );
    let (command, _) = command_of(br#"{"command": "promote", "step": false}"#).unwrap();
    assert_eq!(command, Command::Promote);
    let (command, _) = command_of(br#"{"command": "promote"}"#).unwrap();
    assert_eq!(command, Command::Promote);
    let error = command_of(br#"{"command": "pause", "step": true}"#).unwrap_err();
    assert_eq!(paths(&error), ["step"]);
    assert!(
        format!("{error:?}").contains("only promote takes step"),
        "{error:?}"
    );
    let error = command_of(br#"{"command": "promote", "step": "yes"}"#).unwrap_err();
    assert_eq!(paths(&error), ["step"]);
    // The shared request the command line sends is what the server reads.
    let request = crate::types::CommandRequest {
        command: "promote".into(),
        step: Some(true),
        ..crate::types::CommandRequest::default()
    };
    let (command, _) = command_of(&serde_json::to_vec(&request).unwrap()).unwrap();
    assert_eq!(command, Command::PromoteStep);
}
