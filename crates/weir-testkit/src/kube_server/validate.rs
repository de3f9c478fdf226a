//! Unknown fields: found against a kind's known fields (built-in kinds: top level and
//! `metadata`; custom resources: the structural `openAPIV3Schema`, honouring
//! `x-kubernetes-preserve-unknown-fields`), then rejected (`Strict`) or pruned (`Warn`,
//! `Ignore`), as the real server decodes.

use serde_json::Value;

use super::types::{Fields, ResourceType};

const METADATA: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Removes the fields `rt` does not know from `object` and returns their paths
/// (`spec.foo`, `spec.items[0].bar`), as the real server's strict decoding names them.
pub(crate) fn prune_unknown(rt: &ResourceType, object: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    let Some(map) = object.as_object_mut() else {
        return unknown;
    };
    if let Some(metadata) = map.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.retain(|key, _| {
            let known = METADATA.contains(&key.as_str());
            if !known {
                unknown.push(format!("metadata.{key}"));
            }
            known
        });
    }
    match &rt.fields {
        Fields::TopLevel(fields) => {
            map.retain(|key, _| {
                let known = matches!(key.as_str(), "apiVersion" | "kind" | "metadata")
                    || fields.contains(&key.as_str());
                if !known {
                    unknown.push(key.clone());
                }
                known
            });
        }
        Fields::Schema(schema) => {
            let mut root = std::mem::take(map);
            let metadata = root.remove("metadata");
            let api_version = root.remove("apiVersion");
            let kind = root.remove("kind");
            let mut rest = Value::Object(root);
            walk(&mut rest, schema, "", &mut unknown);
            let mut root = match rest {
                Value::Object(root) => root,
                _ => serde_json::Map::new(),
            };
            for (key, value) in [
                ("apiVersion", api_version),
                ("kind", kind),
                ("metadata", metadata),
            ] {
                if let Some(value) = value {
                    root.insert(key.to_owned(), value);
                }
            }
            *map = root;
        }
    }
    unknown.sort();
    unknown
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(value: &mut Value, schema: &Value, path: &str, unknown: &mut Vec<String>) {
    let preserve = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    let embedded = schema
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        == Some(true);
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let child_path = join(path, &key);
                if let Some(child) = properties.and_then(|p| p.get(&key)) {
                    if let Some(value) = map.get_mut(&key) {
                        walk(value, child, &child_path, unknown);
                    }
                } else if let Some(child) = additional.filter(|a| a.is_object()) {
                    if let Some(value) = map.get_mut(&key) {
                        walk(value, child, &child_path, unknown);
                    }
                } else if preserve
                    || additional.and_then(Value::as_bool) == Some(true)
                    || (embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata"))
                {
                    continue;
                } else {
                    map.remove(&key);
                    unknown.push(child_path);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    walk(item, item_schema, &format!("{path}[{index}]"), unknown);
                }
            }
        }
        _ => {}
    }
}
