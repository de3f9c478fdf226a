#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};

use super::*;

/// Every problem that keeps `node` (at `path`) from being a structural schema node.
fn structural_problems(node: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(map) = node.as_object() else {
        problems.push(format!("{path}: not an object schema"));
        return;
    };
    for key in [
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "const",
        "definitions",
        "$defs",
    ] {
        if map.contains_key(key) {
            problems.push(format!("{path}: has {key}"));
        }
    }
    if map.get("additionalProperties") == Some(&Value::Bool(false)) {
        problems.push(format!("{path}: additionalProperties: false"));
    }
    let preserved = map.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if !map.contains_key("type") && !preserved {
        problems.push(format!("{path}: no type"));
    }
    if let Some(Value::Object(properties)) = map.get("properties") {
        if map.contains_key("additionalProperties") {
            problems.push(format!("{path}: properties and additionalProperties"));
        }
        for (name, schema) in properties {
            structural_problems(schema, &format!("{path}.{name}"), problems);
        }
    }
    if let Some(additional @ Value::Object(_)) = map.get("additionalProperties") {
        structural_problems(additional, &format!("{path}.*"), problems);
    }
    if let Some(items) = map.get("items") {
        structural_problems(items, &format!("{path}[]"), problems);
    }
}

fn rollout_schema() -> Value {
    let crd = rollout_crd().unwrap();
    let version = &crd.spec.versions[0];
    serde_json::to_value(
        version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn the_rollout_schema_is_structural() {
    let schema = rollout_schema();
    let mut problems = Vec::new();
    structural_problems(&schema, "", &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_schema_names_the_fields_weir_reads() {
    let schema = rollout_schema();
    let spec = &schema["properties"]["spec"]["properties"];
    // The plan's strategies are merged into one object with every strategy's field.
    for strategy in ["canary", "blueGreen", "abTest", "mirror", "schedule"] {
        assert_eq!(
            spec["plan"]["properties"][strategy]["type"], "object",
            "{strategy}"
        );
    }
    // The target's kinds and every kind's settings.
    let target = &spec["target"]["properties"];
    assert_eq!(
        target["kind"]["enum"],
        json!(["local", "kubernetes", "flag"])
    );
    for setting in [
        "listen",
        "primary",
        "targetRef",
        "service",
        "flag",
        "variation",
    ] {
        assert!(target.get(setting).is_some(), "{setting} missing");
    }
    // A weight is a number or a string: kept as written, checked by weir.
    assert_eq!(
        spec["plan"]["properties"]["canary"]["properties"]["stepWeight"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
    assert_eq!(
        schema["properties"]["status"]["properties"]["phase"]["type"],
        "string"
    );
}

#[test]
fn the_crd_has_a_status_subresource_and_printer_columns() {
    let crd = rollout_crd().unwrap();
    assert_eq!(crd.metadata.name.as_deref(), Some("rollouts.weir.dev"));
    let version = &crd.spec.versions[0];
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<&str> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|column| column.name.as_str())
        .collect();
    assert_eq!(
        columns,
        ["Phase", "Weight", "FailedChecks", "Run", "Age", "Message"]
    );
}

#[test]
fn scalars_of_several_types_and_any_value_are_kept_unchecked() {
    assert_eq!(
        structural(json!({"anyOf": [{"type": "number"}, {"type": "string"}]})),
        json!({"x-kubernetes-preserve-unknown-fields": true})
    );
    assert_eq!(
        structural(json!(true)),
        json!({"x-kubernetes-preserve-unknown-fields": true})
    );
    assert_eq!(
        structural(
            json!({"oneOf": [{"type": "string", "enum": ["a"]}, {"type": "string", "enum": ["b"]}]})
        ),
        json!({"type": "string", "enum": ["a", "b"]})
    );
    assert_eq!(
        structural(json!({"type": "integer", "format": "uint32", "const": 3})),
        json!({"type": "integer", "format": "int64", "enum": [3]})
    );
}
