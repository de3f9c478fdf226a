#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;

use super::OPENAPI_JSON;

fn document() -> Value {
    serde_json::from_str(OPENAPI_JSON).expect("openapi.json is JSON")
}

#[test]
fn is_openapi_3_with_paths_and_components() {
    let doc = document();
    let version = doc["openapi"].as_str().expect("openapi is a string");
    assert!(version.starts_with("3."), "openapi {version}");
    assert!(doc["info"]["title"].is_string());
    assert!(doc["info"]["version"].is_string());
    assert!(
        doc["paths"]
            .as_object()
            .is_some_and(|paths| !paths.is_empty())
    );
    assert!(doc["components"]["schemas"].is_object());
}

/// Every `$ref` in the document points at something that exists.
#[test]
fn every_reference_resolves() {
    fn walk(node: &Value, refs: &mut Vec<String>) {
        match node {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref") {
                    refs.push(target.clone());
                }
                map.values().for_each(|child| walk(child, refs));
            }
            Value::Array(items) => items.iter().for_each(|child| walk(child, refs)),
            _ => {}
        }
    }
    let doc = document();
    let mut refs = Vec::new();
    walk(&doc, &mut refs);
    assert!(refs.len() > 20);
    for target in refs {
        let pointer = target.strip_prefix('#').expect("local reference");
        assert!(doc.pointer(pointer).is_some(), "{target} does not resolve");
    }
}

/// Every operation has an operationId, unique, and responses.
#[test]
fn operations_are_complete() {
    let doc = document();
    let mut ids = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            if method == "parameters" {
                continue;
            }
            let id = operation["operationId"].as_str();
            assert!(id.is_some(), "{method} {path} has no operationId");
            ids.push(id.unwrap_or_default().to_string());
            assert!(operation["responses"].is_object(), "{method} {path}");
        }
    }
    let count = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), count, "operationIds are unique");
    // 11 for rollouts, watch and meta; 1 for flag rollouts; 7 for flags; 4 for OFREP.
    assert_eq!(count, 23);
}
