#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use serde_json::Value;

use super::{document, openapi_json};

fn operations(doc: &Value) -> Vec<(String, String, &Value)> {
    let mut found = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            found.push((method.clone(), path.clone(), operation));
        }
    }
    found
}

#[test]
fn is_openapi_3_1_with_paths_components_and_security_schemes() {
    let doc: Value = serde_json::from_str(openapi_json()).expect("the served text is JSON");
    assert_eq!(&doc, document());
    if let Ok(path) = std::env::var("WEIR_OPENAPI_DUMP") {
        std::fs::write(path, openapi_json()).unwrap();
    }
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["info"]["title"].is_string());
    assert!(doc["components"]["schemas"].is_object());
    assert_eq!(
        doc["components"]["securitySchemes"]["bearerAuth"],
        serde_json::json!({"type": "http", "scheme": "bearer", "description": doc["components"]["securitySchemes"]["bearerAuth"]["description"]})
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["apiKey"]["name"],
        "X-API-Key"
    );
}

/// Every `$ref` in the document points at something that exists, and every schema component
/// is used (nothing generated for nothing).
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
    walk(doc, &mut refs);
    assert!(refs.len() > 50, "{}", refs.len());
    for target in &refs {
        let pointer = target.strip_prefix('#').expect("local reference");
        assert!(doc.pointer(pointer).is_some(), "{target} does not resolve");
    }
    let used: BTreeSet<&str> = refs
        .iter()
        .filter_map(|target| target.strip_prefix("#/components/schemas/"))
        .collect();
    for name in doc["components"]["schemas"].as_object().unwrap().keys() {
        assert!(used.contains(name.as_str()), "schema {name} is not used");
    }
}

/// Every operation has a unique operationId, responses, and a scope: public ones an empty
/// `security`, the others one requirement per scheme naming the scope, and `x-weir-scope`.
#[test]
fn operations_are_complete_and_scoped() {
    let doc = document();
    let mut ids = BTreeSet::new();
    let mut scopes = Vec::new();
    let found = operations(doc);
    for (method, path, operation) in &found {
        let id = operation["operationId"].as_str().expect("operationId");
        assert!(ids.insert(id), "{id} is used twice");
        let responses = operation["responses"].as_object().expect("responses");
        assert!(
            responses.keys().any(|status| status.starts_with('2')),
            "{method} {path}"
        );
        assert!(responses.contains_key("421"), "{method} {path}");
        let security = operation["security"].as_array().expect("security");
        match operation.get("x-weir-scope").and_then(Value::as_str) {
            None => assert!(security.is_empty(), "{method} {path}"),
            Some(scope) => {
                assert_eq!(security.len(), 2, "{method} {path}");
                assert_eq!(security[0]["bearerAuth"][0], scope);
                assert_eq!(security[1]["apiKey"][0], scope);
                for status in ["401", "403", "429"] {
                    assert!(responses.contains_key(status), "{method} {path} {status}");
                }
                scopes.push((id.to_string(), scope.to_string()));
            }
        }
    }
    // 11 for rollouts, watch and meta (with /readyz); 1 for flag rollouts; 7 for flags;
    // 4 for OFREP.
    assert_eq!(found.len(), 24);
    let scope_of = |id: &str| {
        scopes
            .iter()
            .find(|(found, _)| found == id)
            .map(|(_, scope)| scope.as_str())
    };
    assert_eq!(scope_of("listRollouts"), Some("read"));
    assert_eq!(scope_of("commandRollout"), Some("operate"));
    assert_eq!(scope_of("reportFlagOutcomes"), Some("operate"));
    assert_eq!(scope_of("applyRollout"), Some("admin"));
    assert_eq!(scope_of("deleteFlag"), Some("admin"));
    assert_eq!(scope_of("ofrepEvaluate"), Some("evaluate"));
    assert_eq!(scope_of("openapi"), None);
    assert_eq!(scope_of("health"), None);
}

/// Every route `lib.rs` gives the router is a row of the table (the other direction, that
/// every row is answered, is `tests/api.rs::openapi_lists_every_route`).
#[test]
fn every_route_in_lib_rs_is_documented() {
    let source = include_str!("../lib.rs");
    let doc = document();
    let paths = doc["paths"].as_object().unwrap();
    let mut routes = 0;
    for piece in source.split(".route(").skip(1) {
        let path = piece
            .trim_start()
            .strip_prefix('"')
            .and_then(|rest| rest.split('"').next())
            .expect("a route path literal");
        routes += 1;
        assert!(
            paths.contains_key(path),
            "{path} is served but not documented"
        );
    }
    assert_eq!(routes, paths.len(), "as many routes as documented paths");
}

/// The constraints the server enforces are in the schemas.
#[test]
fn constraints_are_declared() {
    let doc = document();
    let parameters = &doc["components"]["parameters"];
    assert_eq!(parameters["limit"]["schema"]["maximum"], 500);
    assert!(parameters["ifMatch"]["schema"]["pattern"].is_string());
    assert_eq!(parameters["name"]["schema"]["maxLength"], 253);
    assert_eq!(parameters["namespace"]["schema"]["maxLength"], 63);
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["RolloutMetadata"]["properties"]["name"]["maxLength"],
        253
    );
    assert_eq!(
        schemas["FlagMetadata"]["properties"]["name"]["pattern"],
        super::FLAG_KEY_PATTERN
    );
    // The documents refuse unknown fields, as the server does.
    assert_eq!(
        schemas["Rollout"]["additionalProperties"], false,
        "{:#}",
        schemas["Rollout"]
    );
    assert_eq!(schemas["Flag"]["additionalProperties"], false);
    let phases = &doc["paths"]["/api/v1/rollouts"]["get"]["parameters"][1]["schema"]["enum"];
    assert_eq!(phases.as_array().map(Vec::len), Some(12), "{phases}");
    let codes = schemas["ErrorCode"].to_string();
    assert!(codes.contains("\"misdirected\""), "{codes}");
}

/// The patterns match exactly what weir-core's validation accepts.
#[test]
fn name_patterns_agree_with_the_validation() {
    let rollout = |name: &str| {
        let document = format!(
            r#"{{"apiVersion": "weir.dev/v1alpha1", "kind": "Rollout", "metadata": {{"name": {name:?}}},
            "spec": {{"target": {{"kind": "local", "listen": "127.0.0.1:0", "primary": {{"url": "http://127.0.0.1:1"}}, "canary": {{"url": "http://127.0.0.1:2"}}}},
                      "plan": {{"canary": {{"stepWeight": 10, "maxWeight": 50}}}}}}}}"#
        );
        let value: Value = serde_json::from_str(&document).unwrap();
        weir_core::document::load_value(&value)
            .map(|_| ())
            .map_err(|refused| {
                refused
                    .errors
                    .iter()
                    .any(|error| error.path == "metadata.name")
            })
    };
    let pattern = regex_lite(super::NAME_PATTERN);
    let long_label = "a".repeat(63);
    let too_long_label = "a".repeat(64);
    let long = format!("{0}.{0}.{0}.{1}", long_label, "a".repeat(61));
    for (name, valid) in [
        ("web", true),
        ("a", true),
        ("a-b.c-d", true),
        ("0a", true),
        (long_label.as_str(), true),
        (long.as_str(), true),
        ("", false),
        ("-a", false),
        ("a-", false),
        ("A", false),
        ("a..b", false),
        ("a_b", false),
        (too_long_label.as_str(), false),
    ] {
        assert_eq!(
            pattern(name) && name.len() <= 253,
            valid,
            "pattern on {name:?}"
        );
        let refused_name = matches!(rollout(name), Err(true));
        assert_eq!(
            !refused_name,
            valid,
            "validation on {name:?}: {:?}",
            rollout(name)
        );
    }
}

/// The pattern, compiled by the `regex` crate (what weir-core already uses).
fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool {
    let compiled = regex::Regex::new(pattern).expect("the pattern compiles");
    move |text| compiled.is_match(text)
}
