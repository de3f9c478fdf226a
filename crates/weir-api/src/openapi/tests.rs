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
                // "any": any token (the caller's own session); no scope named.
                let named = if scope == "any" {
                    Value::Null
                } else {
                    scope.into()
                };
                assert_eq!(security[0]["bearerAuth"][0], named);
                assert_eq!(security[1]["apiKey"][0], named);
                for status in ["401", "403", "429"] {
                    assert!(responses.contains_key(status), "{method} {path} {status}");
                }
                scopes.push((id.to_string(), scope.to_string()));
            }
        }
    }
    // 11 for rollouts, watch and meta (with /readyz); 1 for flag rollouts; 7 for flags, 2 for
    // their history and evaluations, 4 for triggers; 4 for OFREP; 3 for the session, 3 for
    // tokens.
    assert_eq!(found.len(), 36);
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
    assert_eq!(scope_of("login"), None);
    assert_eq!(scope_of("session"), Some("any"));
    assert_eq!(scope_of("createToken"), Some("admin"));
}

/// The document and `auth::ROUTES` (the access the server enforces) list the same operations
/// with the same scopes, and every route the router is given is in `auth::ROUTES` (the other
/// direction, that every row is answered, is `tests/api.rs::openapi_lists_every_route`).
#[test]
fn every_route_is_documented_with_the_access_the_server_enforces() {
    // The dashboard's page and assets are not API operations.
    let page = |path: &str| {
        path == "/"
            || ["/ui/", "/rollouts/", "/flags/{*", "/tokens", "/login"]
                .iter()
                .any(|prefix| path.starts_with(prefix))
    };
    let doc = document();
    let paths = doc["paths"].as_object().unwrap();
    let mut documented = std::collections::BTreeSet::new();
    for (path, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            if method == "parameters" {
                continue;
            }
            documented.insert((method.to_uppercase(), path.clone()));
            // The scope the document names is the one the access table enforces.
            let method = axum::http::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let declared = operation.get("x-weir-scope").and_then(Value::as_str);
            let enforced = match crate::auth::access_of(&method, path) {
                crate::auth::Access::Public | crate::auth::Access::Metrics => None,
                crate::auth::Access::Scope(scope) => Some(scope.as_str()),
                crate::auth::Access::ManageTokens => Some("admin"),
                crate::auth::Access::Authenticated => Some("any"),
            };
            assert_eq!(declared, enforced, "{method} {path}");
        }
    }
    // Every route the access table knows (the server's whole surface) is documented.
    let mut served = std::collections::BTreeSet::new();
    for route in crate::auth::ROUTES.iter().filter(|route| !page(route.path)) {
        served.insert((route.method.to_string(), route.path.to_string()));
    }
    assert_eq!(
        served, documented,
        "served (left) and documented (right) differ"
    );
    // And every route lib.rs serves is in the access table (so none escapes the checks).
    for source in [include_str!("../lib.rs"), include_str!("../auth.rs")] {
        for piece in source.split(".route(").skip(1) {
            let Some(path) = piece
                .trim_start()
                .strip_prefix('"')
                .and_then(|rest| rest.split('"').next())
            else {
                continue;
            };
            let path = path.replace("{file}", "{*rest}");
            assert!(
                crate::auth::ROUTES.iter().any(|route| route.path == path),
                "{path} is served but not in auth::ROUTES"
            );
        }
    }
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

/// Every bound of `bound_table` is in the document, on the component and on its `...Input`
/// twin where there is one: an entry whose property was renamed would otherwise drop out
/// silently.
#[test]
fn the_validation_bounds_are_in_the_document() {
    let doc = super::document();
    let schemas = &doc["components"]["schemas"];
    for (component, path, keywords) in super::bound_table() {
        let twin = format!("{component}Input");
        let names: Vec<&str> = std::iter::once(component)
            .chain(schemas.get(&twin).map(|_| twin.as_str()))
            .collect();
        for name in names {
            let mut node = &schemas[name];
            for field in path {
                node = &node["properties"][*field];
            }
            for (keyword, value) in keywords.as_object().unwrap() {
                assert_eq!(&node[keyword], value, "{name}.{} {keyword}", path.join("."));
            }
        }
    }
    assert_eq!(
        schemas["LoginRequest"]["properties"]["token"]["minLength"],
        1
    );
    assert_eq!(
        schemas["TokenRequest"]["properties"]["namespaces"]["minItems"],
        1
    );
}

/// The pattern of a local target's `listen` agrees with Rust's `SocketAddr` (what the router
/// parses), on addresses either side of every rule.
#[test]
fn the_listen_pattern_is_what_socket_addr_parses() {
    let text = super::socket_address_pattern();
    let pattern = regex_lite(&text);
    for address in [
        "127.0.0.1:0",
        "0.0.0.0:8080",
        "255.255.255.255:65535",
        "1.2.3.4:080",
        "1.2.3.4:00",
        "01.2.3.4:80",
        "256.1.1.1:80",
        "1.2.3:80",
        "1.2.3.4:65536",
        "1.2.3.4:+80",
        "1.2.3.4",
        "localhost:80",
        "",
        "[::]:0",
        "[::1]:65535",
        "[fe80::1%2]:80",
        "[::ffff:0:1.2.3.4]:1",
        "[1:2:3:4:5:6:1.2.3.4]:1",
        "[::1.2.3.4]:1",
        "[1:2:3:4:5:6:7::]:1",
        "[::2:3:4:5:6:7:8]:1",
        "[1:2:3:4:5:6:7:8]:1",
        "[FFFF::]:1",
        "[1::2::3]:1",
        "[1:2:3:4:5:6:7:8:9]:1",
        "[12345::]:1",
        "[::1]",
        "::1:80",
    ] {
        assert_eq!(
            pattern(address),
            address.parse::<std::net::SocketAddr>().is_ok(),
            "{address:?}"
        );
    }
    let doc = super::document();
    let local = doc["components"]["schemas"]["Target"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .find(|kind| kind["properties"]["kind"]["const"] == "local")
        .unwrap();
    assert_eq!(local["properties"]["listen"]["pattern"], text);
}
