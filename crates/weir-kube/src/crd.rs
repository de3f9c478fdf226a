//! The `rollouts.weir.dev` CustomResourceDefinition, generated from weir-core's own `RolloutSpec`
//! and `RolloutStatus` (schemars), so the CRD can never describe a different document than the
//! one `weir validate` reads.
//!
//! A Kubernetes CRD schema must be *structural*: every node typed, no `$ref`, no types inside
//! `anyOf`/`oneOf`. [`structural`] rewrites the generated JSON schema into that form: objects of
//! an enum's variants are merged into one object, values that may be a number or a string (a
//! weight) or anything (evidence) keep their values unchecked by the API server
//! (`x-kubernetes-preserve-unknown-fields`). The API server then checks the shape it can
//! express, and weir checks every rule when it reads the rollout.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};
use weir_core::model::{RolloutSpec, RolloutStatus};

/// The API group of weir's resources.
pub const GROUP: &str = "weir.dev";
/// The version of weir's resources.
pub const VERSION: &str = "v1alpha1";

/// Every CustomResourceDefinition weir installs.
pub fn crds() -> Result<Vec<CustomResourceDefinition>, serde_json::Error> {
    Ok(vec![rollout_crd()?])
}

/// `rollouts.weir.dev`: the Rollout with its status subresource and printer columns.
pub fn rollout_crd() -> Result<CustomResourceDefinition, serde_json::Error> {
    let schema = json!({
        "type": "object",
        "description": "A progressive rollout: where it acts (target), how exposure grows (plan) and how the canary is judged (analysis).",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": schema_of::<RolloutSpec>(),
            "status": status_schema(),
        }
    });
    let schema: JSONSchemaProps = serde_json::from_value(schema)?;
    let column = |name: &str, kind: &str, path: &str, description: &str, priority: i32| {
        CustomResourceColumnDefinition {
            name: name.into(),
            type_: kind.into(),
            json_path: path.into(),
            description: (!description.is_empty()).then(|| description.into()),
            priority: (priority > 0).then_some(priority),
            format: None,
        }
    };
    Ok(CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("rollouts.{GROUP}")),
            ..ObjectMeta::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.into(),
            names: CustomResourceDefinitionNames {
                kind: "Rollout".into(),
                list_kind: Some("RolloutList".into()),
                plural: "rollouts".into(),
                singular: Some("rollout".into()),
                // `ro` is Argo Rollouts' short name; weir's must not clash with it.
                short_names: Some(vec!["wro".into()]),
                categories: Some(vec!["weir".into()]),
            },
            scope: "Namespaced".into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: VERSION.into(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                subresources: Some(CustomResourceSubresources {
                    status: Some(CustomResourceSubresourceStatus(json!({}))),
                    scale: None,
                }),
                additional_printer_columns: Some(vec![
                    column(
                        "Phase",
                        "string",
                        ".status.phase",
                        "Where the rollout stands",
                        0,
                    ),
                    column(
                        "Weight",
                        "number",
                        ".status.canaryWeight",
                        "Canary weight, percent",
                        0,
                    ),
                    column(
                        "FailedChecks",
                        "integer",
                        ".status.failedChecks",
                        "Failed checks in this run",
                        0,
                    ),
                    column("Run", "integer", ".status.run", "Runs so far", 0),
                    column("Age", "date", ".metadata.creationTimestamp", "", 0),
                    column(
                        "Message",
                        "string",
                        ".status.message",
                        "The latest step's reason",
                        1,
                    ),
                ]),
                ..CustomResourceDefinitionVersion::default()
            }],
            ..CustomResourceDefinitionSpec::default()
        },
        status: None,
    })
}

/// The status: weir's own, plus Kubernetes conditions (`Promoted`, as Flagger's) so that
/// `kubectl wait --for=condition=Promoted` works.
fn status_schema() -> Value {
    let mut schema = schema_of::<RolloutStatus>();
    let text = json!({"type": "string"});
    schema["properties"]["conditions"] = json!({
        "type": "array",
        "description": "Kubernetes conditions: Promoted is True once a run promoted its canary, False when it failed, Unknown meanwhile.",
        "items": {
            "type": "object",
            "required": ["type", "status"],
            "properties": {
                "type": text, "status": text, "reason": text, "message": text,
                "lastUpdateTime": text, "lastTransitionTime": text,
            }
        }
    });
    schema["properties"]["store"] = json!({
        "type": "object",
        "description": "weir's own state, read by weir only: the store version, the spec generation, one-shot effects still to deliver, and the history of the rollout's last events with their evidence.",
        "x-kubernetes-preserve-unknown-fields": true,
    });
    schema
}

/// The `Promoted` condition of a status.
pub fn promoted_condition(status: &RolloutStatus) -> Value {
    use weir_core::model::Phase;
    let value = match status.phase {
        Phase::Succeeded => "True",
        Phase::Failed | Phase::Stopped => "False",
        _ => "Unknown",
    };
    let at = status
        .last_transition_at
        .map(|at| Value::String(at.to_string()))
        .unwrap_or(Value::Null);
    json!({
        "type": "Promoted",
        "status": value,
        "reason": format!("{:?}", status.phase),
        "message": status.message,
        "lastUpdateTime": at,
        "lastTransitionTime": at,
    })
}

/// The structural schema of `T`.
fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::openapi3()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let schema = generator.into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Value::Object(map) = &mut value {
        for key in ["$schema", "title", "definitions", "$defs", "components"] {
            map.remove(key);
        }
    }
    structural(value)
}

/// Rewrites a JSON schema into a Kubernetes structural schema (see the module's comment).
pub fn structural(schema: Value) -> Value {
    let mut map = match schema {
        // `true` (anything) and `false` have no structural form: keep the value unchecked.
        Value::Bool(_) => return preserve(None),
        Value::Object(map) => map,
        other => return other,
    };
    let description = map
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_string);
    for key in [
        "title",
        "default",
        "examples",
        "$schema",
        "readOnly",
        "writeOnly",
    ] {
        map.remove(key);
    }
    if let Some(constant) = map.remove("const") {
        map.insert("enum".into(), Value::Array(vec![constant]));
    }
    // schemars writes `nullable` for an Option in OpenAPI 3 mode; the API server accepts it.
    let alternatives: Vec<Value> = ["anyOf", "oneOf"]
        .iter()
        .filter_map(|key| map.remove(*key))
        .filter_map(|list| match list {
            Value::Array(items) => Some(items),
            _ => None,
        })
        .flatten()
        .collect();
    if !alternatives.is_empty() {
        return merge_alternatives(map, alternatives, description);
    }
    if let Some(format) = map.get("format").and_then(Value::as_str) {
        match kubernetes_format(format) {
            Some(known) => {
                map.insert("format".into(), Value::String(known.into()));
            }
            None => {
                map.remove("format");
            }
        }
    }
    // Unknown fields are refused by weir itself (and by the API server's strict field
    // validation through the pruning of unknown fields); `additionalProperties: false` is not
    // structural.
    if map.get("additionalProperties") == Some(&Value::Bool(false)) {
        map.remove("additionalProperties");
    }
    if let Some(additional) = map.remove("additionalProperties") {
        map.insert("additionalProperties".into(), structural(additional));
    }
    if let Some(Value::Object(properties)) = map.remove("properties") {
        let properties: Map<String, Value> = properties
            .into_iter()
            .map(|(name, schema)| (name, structural(schema)))
            .collect();
        map.insert("properties".into(), Value::Object(properties));
    }
    if let Some(items) = map.remove("items") {
        map.insert("items".into(), structural(items));
    }
    if !map.contains_key("type")
        && !map.contains_key("x-kubernetes-preserve-unknown-fields")
        && !map.contains_key("x-kubernetes-int-or-string")
    {
        return preserve(description);
    }
    Value::Object(map)
}

/// One schema for the alternatives of an enum or a value of several types.
fn merge_alternatives(
    mut base: Map<String, Value>,
    alternatives: Vec<Value>,
    description: Option<String>,
) -> Value {
    let alternatives: Vec<Value> = alternatives.into_iter().map(structural).collect();
    let all_objects = alternatives
        .iter()
        .all(|alternative| alternative.get("type") == Some(&json!("object")));
    if all_objects {
        // An enum's variants: one object with every variant's fields; weir says which
        // combinations are allowed.
        let mut properties = Map::new();
        for alternative in &alternatives {
            if let Some(Value::Object(fields)) = alternative.get("properties") {
                for (name, schema) in fields {
                    match properties.get_mut(name) {
                        None => {
                            properties.insert(name.clone(), schema.clone());
                        }
                        Some(known) => merge_enums(known, schema),
                    }
                }
            }
        }
        base.insert("type".into(), json!("object"));
        base.remove("required");
        if !properties.is_empty() {
            base.insert("properties".into(), Value::Object(properties));
        }
        return Value::Object(base);
    }
    let strings_only = alternatives
        .iter()
        .all(|alternative| alternative.get("type") == Some(&json!("string")));
    if strings_only {
        // Unit variants written as strings: one string enum.
        let mut merged = json!({"type": "string"});
        let values: Vec<Value> = alternatives
            .iter()
            .flat_map(|alternative| {
                alternative
                    .get("enum")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        if values.len() == alternatives.len() {
            merged["enum"] = Value::Array(values);
        }
        if let Some(description) = description {
            merged["description"] = Value::String(description);
        }
        return merged;
    }
    preserve(description)
}

/// Two variants' schemas of one field: string enums are joined, anything else keeps the first.
fn merge_enums(known: &mut Value, other: &Value) {
    let (Some(Value::Array(values)), Some(Value::Array(more))) =
        (known.get_mut("enum"), other.get("enum"))
    else {
        return;
    };
    for value in more {
        if !values.contains(value) {
            values.push(value.clone());
        }
    }
}

/// A node whose value the API server keeps as it is.
fn preserve(description: Option<String>) -> Value {
    let mut node = json!({"x-kubernetes-preserve-unknown-fields": true});
    if let Some(description) = description {
        node["description"] = Value::String(description);
    }
    node
}

/// The OpenAPI format the API server knows for a schemars format, if any.
fn kubernetes_format(format: &str) -> Option<&'static str> {
    match format {
        "int32" | "uint8" | "uint16" | "int8" | "int16" => Some("int32"),
        "int64" | "uint32" | "uint64" | "uint" | "int" => Some("int64"),
        "double" => Some("double"),
        "float" => Some("float"),
        "date-time" => Some("date-time"),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
