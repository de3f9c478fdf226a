//! The OpenAPI 3.1 document, served at `/api/v1/openapi.json`, generated so that it cannot drift
//! from the server:
//!
//! - **Operations** come from one table in code, [`operations::table`]: per route its method,
//!   path, operationId, summary, parameters with the constraints the handlers enforce, request
//!   and response bodies, every status the handler can answer, and the scope a caller needs.
//!   A test (`openapi/tests.rs`) sends a request for every row to the router and every route
//!   the router answers is a row.
//! - **Schemas** are generated with schemars from the Rust types the handlers read and write
//!   (`types.rs`, the flag views, weir-core's `Rollout`, `Flag`, status and events, weir-store's
//!   `StoredEvent`): responses with the serialize contract, request bodies with the deserialize
//!   one (a type whose two schemas differ gets a second component named `...Input`). What serde
//!   cannot know - names' patterns and lengths (weir-core's validation), `apiVersion` and
//!   `kind`, the fields the server ignores on apply - is added here, once, in [`patches`]; the
//!   bounds validation enforces on single fields (iterations from 1 to 10,000, at least two
//!   variations, exactly one of `url` and `command`, the router's socket address, ...) in
//!   [`bound_table`], so that a request the document calls valid is not refused for them.
//!   Bodies that no type describes (OFREP's, which follow the OpenFeature protocol, and the
//!   outcome report, which the handler reads field by field) are written here as schemas.
//!
//! Built once per process on first use. The schema-driven fuzzer (`crates/weir/tests/
//! openapi_fuzz.rs`, schemathesis) checks the document against a running server.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

pub(crate) mod operations;

/// A rollout's name: a DNS subdomain (weir-core `validate::is_dns_subdomain`): labels of
/// lowercase letters, digits and '-' (1 to 63 characters, starting and ending with a letter
/// or digit) joined by '.', at most 253 characters in all.
pub const NAME_PATTERN: &str =
    "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$";
/// The longest rollout name.
pub const NAME_MAX: u32 = 253;
/// A namespace: one DNS label (weir-core `validate::is_dns_label`).
pub const NAMESPACE_PATTERN: &str = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";
/// The longest namespace.
pub const NAMESPACE_MAX: u32 = 63;
/// A flag's key (weir-core `validate::flags::is_flag_key`): lowercase letters, digits, '-', '.'
/// and '_', starting and ending with a letter or digit.
pub const FLAG_KEY_PATTERN: &str = "^[a-z0-9]([-._a-z0-9]*[a-z0-9])?$";
/// The longest flag key.
pub const FLAG_KEY_MAX: u32 = 253;
/// `If-Match`: the ETag of a GET (`"7"`), the bare version, or `*` (`input::precondition`).
/// Versions start at 1; at most 19 digits so that every match fits a u64.
pub const IF_MATCH_PATTERN: &str = "^(\\*|\"[1-9][0-9]{0,18}\"|[1-9][0-9]{0,18})$";

/// The OpenAPI document, as served (pretty-printed JSON).
pub fn openapi_json() -> &'static str {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        // A `Value` always serializes; the fallback keeps this panic-free anyway.
        serde_json::to_string_pretty(document()).unwrap_or_else(|_| "{}".to_string())
    })
}

/// The OpenAPI document.
pub fn document() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(build)
}

/// `GET /api/v1/openapi.json`
pub(crate) async fn serve() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], openapi_json())
}

/// The two generators: responses are described as serde writes them, request bodies as serde
/// reads them (defaults make fields optional, `deny_unknown_fields` closes objects).
pub(crate) struct Schemas {
    out: SchemaGenerator,
    input: SchemaGenerator,
}

impl Schemas {
    fn new() -> Schemas {
        let settings = || {
            SchemaSettings::draft2020_12().with(|settings| {
                settings.definitions_path = "/components/schemas".into();
                settings.meta_schema = None;
            })
        };
        Schemas {
            out: settings().for_serialize().into_generator(),
            input: settings().for_deserialize().into_generator(),
        }
    }

    /// A reference to `T` as the server writes it.
    pub(crate) fn response<T: schemars::JsonSchema>(&mut self) -> Value {
        self.out.subschema_for::<T>().to_value()
    }

    /// A reference to `T` as the server reads it (renamed when merged, see [`merge`]).
    pub(crate) fn request<T: schemars::JsonSchema>(&mut self) -> Value {
        self.input.subschema_for::<T>().to_value()
    }
}

fn build() -> Value {
    let mut schemas = Schemas::new();
    let operations = operations::table(&mut schemas);
    let mut paths = Map::new();
    for operation in &operations {
        let item = paths
            .entry(operation.path.to_string())
            .or_insert_with(|| json!({}));
        if let Value::Object(item) = item {
            item.insert(operation.method.to_string(), operation.to_json());
        }
    }
    let out = schemas.out.take_definitions(true);
    let input = schemas.input.take_definitions(true);
    let mut components = merge(out, input, &mut paths);
    patches(&mut components);
    bounds(&mut components);
    for (name, schema) in hand_written() {
        components.insert(name.to_string(), schema);
    }
    let responses = operations::responses();
    prune(
        &mut components,
        &[&Value::Object(paths.clone()), &responses],
    );
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "weir API",
            "version": "v1",
            "description": "Progressive delivery with weir: apply rollouts, give them commands, read their history and watch their status; feature flags and their evaluation (OFREP). Every write goes through the engine; every error is JSON with a stable code. Every route refuses a request whose Host is not a name the server answers to (421, code misdirected) and a POST, PUT, PATCH or DELETE sent from a web page of another origin (403, code forbidden; OFREP evaluations excepted): see docs/SECURITY.md. Each operation names the scope a token needs (x-weir-scope, and as the scopes of its security requirement): read < operate < admin; evaluate for OFREP (read, operate and admin tokens may evaluate too). Generated from the server's types and route table.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"}
        },
        "externalDocs": {
            "description": "The Rollout resource",
            "url": "https://github.com/weir-dev/weir/blob/main/docs/ROLLOUT.md"
        },
        "tags": [
            {"name": "rollouts", "description": "Rollouts: list, get, apply, delete, commands, history"},
            {"name": "watch", "description": "Status changes as Server-Sent Events"},
            {"name": "meta", "description": "Health, this document, and weir's own metrics for Prometheus (GET /metrics, outside /api/v1)"},
            {"name": "flags", "description": "Feature flags: list, get, apply, delete (weir serve only; docs/FLAGS.md)"},
            {"name": "ofrep", "description": "OpenFeature Remote Evaluation Protocol: evaluate flags as an OpenFeature SDK does (weir serve only)"}
        ],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Authorization: Bearer <token secret> (weir token create; docs/SECURITY.md)"
                },
                "apiKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-API-Key",
                    "description": "The token's secret in X-API-Key, as OpenFeature OFREP providers send it"
                }
            },
            "parameters": operations::parameters(),
            "headers": {
                "ETag": {
                    "description": "The object's version, quoted (\"7\"); send it back in If-Match",
                    "schema": {"type": "string", "pattern": "^\"[1-9][0-9]*\"$"}
                }
            },
            "responses": responses,
            "schemas": components,
        }
    })
}

/// Joins the two generators' definitions. A request type whose schema equals its response
/// schema is one component; one that differs (defaults, closed objects) is added as
/// `NAMEInput`, and every reference to it from request bodies (in `paths`) and from other
/// input schemas is rewritten.
fn merge(
    out: Map<String, Value>,
    input: Map<String, Value>,
    paths: &mut Map<String, Value>,
) -> Map<String, Value> {
    let mut renamed = Vec::new();
    for (name, schema) in &input {
        if out.get(name) != Some(schema) && out.contains_key(name) {
            renamed.push((
                format!("#/components/schemas/{name}"),
                format!("#/components/schemas/{name}Input"),
            ));
        }
    }
    let mut components = out;
    for (name, mut schema) in input {
        rewrite_refs(&mut schema, &renamed);
        let target = if renamed
            .iter()
            .any(|(from, _)| from == &format!("#/components/schemas/{name}"))
        {
            format!("{name}Input")
        } else {
            name
        };
        components.entry(target).or_insert(schema);
    }
    for item in paths.values_mut() {
        if let Value::Object(item) = item {
            for operation in item.values_mut() {
                if let Some(body) = operation.get_mut("requestBody") {
                    rewrite_refs(body, &renamed);
                }
            }
        }
    }
    components
}

fn rewrite_refs(node: &mut Value, renamed: &[(String, String)]) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get_mut("$ref")
                && let Some((_, to)) = renamed.iter().find(|(from, _)| from == target)
            {
                *target = to.clone();
            }
            map.values_mut()
                .for_each(|child| rewrite_refs(child, renamed));
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|child| rewrite_refs(child, renamed)),
        _ => {}
    }
}

/// What the types do not say but the server enforces or does.
fn patches(components: &mut Map<String, Value>) {
    let metadata = |pattern: &str, max: u32, what: &str| {
        json!({
            "type": "object",
            "description": format!("Kubernetes-style metadata; other fields (uid, resourceVersion, ...) are kept as they are. {what}"),
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": pattern, "minLength": 1, "maxLength": max},
                "namespace": {
                    "type": "string",
                    "pattern": NAMESPACE_PATTERN,
                    "maxLength": NAMESPACE_MAX,
                    "description": "default when absent"
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}}
            },
            "additionalProperties": true
        })
    };
    components.insert(
        "RolloutMetadata".into(),
        metadata(NAME_PATTERN, NAME_MAX, "A rollout's name is a DNS subdomain: at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit."),
    );
    components.insert(
        "FlagMetadata".into(),
        metadata(FLAG_KEY_PATTERN, FLAG_KEY_MAX, "A flag's key is 1 to 253 lowercase letters, digits, '-', '.' and '_', starting and ending with a letter or digit."),
    );
    // The documents: apiVersion and kind are fixed, metadata has the names' rules; what a GET
    // returns can be sent back, the server's fields are ignored on apply.
    let rollout_fields: &[&str] = &crate::rollouts::SERVER_FIELDS;
    let flag_fields: &[&str] = &[
        "version",
        "createdAt",
        "updatedAt",
        "rolledOutBy",
        "exposures",
        "outcomes",
    ];
    // Request bodies (flattened into the views, so the plain names are the input schemas) and
    // the views the server writes.
    let documents = [
        ("Rollout", "Rollout", "RolloutMetadata", rollout_fields),
        ("RolloutInput", "Rollout", "RolloutMetadata", rollout_fields),
        ("Flag", "Flag", "FlagMetadata", flag_fields),
        ("FlagInput", "Flag", "FlagMetadata", flag_fields),
        ("RolloutView", "Rollout", "RolloutMetadata", &[][..]),
        ("FlagRolloutView", "Rollout", "RolloutMetadata", &[][..]),
        ("FlagView", "Flag", "FlagMetadata", &[][..]),
    ];
    for (name, kind, metadata, ignored) in documents {
        let Some(Value::Object(schema)) = components.get_mut(name) else {
            continue;
        };
        if let Some(Value::Object(properties)) = schema.get_mut("properties") {
            properties.insert(
                "apiVersion".into(),
                json!({"type": "string", "const": weir_core::model::API_VERSION}),
            );
            properties.insert("kind".into(), json!({"type": "string", "const": kind}));
            properties.insert(
                "metadata".into(),
                json!({"$ref": format!("#/components/schemas/{metadata}")}),
            );
            for field in ignored {
                properties.insert(
                    (*field).into(),
                    json!({"description": "Written by the server; ignored on apply, so that what a GET returns can be sent back"}),
                );
            }
        }
    }
}

/// The bounds weir-core's validation puts on fields whose types do not carry them (a `u32` of
/// iterations is from 1 to 10,000, a flag has at least two variations, ...), so that a request
/// the document calls valid is not refused for breaking one (the fuzzer's positive-data check).
/// Each entry: the component (its `...Input` twin gets the same when there is one), the
/// property's path, and the keywords to add. Rules across fields (the sum of weights,
/// references between fields) are beyond JSON Schema; those stay 400s naming the field.
pub(crate) fn bound_table() -> Vec<(&'static str, &'static [&'static str], Value)> {
    // Exactly one of `fields` is given and not null.
    let exactly_one = |fields: &[&str]| {
        let branches: Vec<Value> = fields
            .iter()
            .map(|field| json!({"required": [field], "properties": {*field: {"not": {"type": "null"}}}}))
            .collect();
        json!({"oneOf": branches})
    };
    let steps = weir_core::validate::MAX_STEPS;
    let iterations = json!({"minimum": 1, "maximum": steps});
    vec![
        ("AbTestPlan", &["iterations"], iterations.clone()),
        ("AbTestPlan", &["match"], json!({"minItems": 1})),
        ("IterationsPlan", &["iterations"], iterations.clone()),
        ("MirrorPlan", &["iterations"], iterations),
        (
            "CanaryPlan",
            &["stepWeights"],
            json!({"minItems": 1, "maxItems": steps}),
        ),
        (
            "CanaryPlan",
            &["steps"],
            json!({"minItems": 1, "maxItems": steps}),
        ),
        ("FlagSpec", &["variations"], json!({"minItems": 2})),
        (
            "CanaryPlan",
            &[],
            exactly_one(&["stepWeight", "stepWeights", "steps"]),
        ),
        (
            "StringMatch",
            &[],
            exactly_one(&["exact", "prefix", "suffix", "regex"]),
        ),
        // A local version is a running service or a program weir starts, never both.
        ("VersionSpec", &[], exactly_one(&["url", "command"])),
        (
            "VersionSpec",
            &["command"],
            json!({"minItems": 1, "prefixItems": [{"type": "string", "pattern": "\\S"}]}),
        ),
        ("Variation", &["name"], json!({"minLength": 1})),
        ("Variation", &["value"], json!({"not": {"type": "null"}})),
        // A rule needs at least one condition (an empty map or a null is none).
        (
            "MatchRule",
            &[],
            json!({"anyOf": [
                {"required": ["headers"], "properties": {"headers": {"minProperties": 1}}},
                {"required": ["cookies"], "properties": {"cookies": {"minProperties": 1}}},
                {"required": ["queryParams"], "properties": {"queryParams": {"minProperties": 1}}},
                {"required": ["uri"], "properties": {"uri": {"not": {"type": "null"}}}},
                {"required": ["method"], "properties": {"method": {"not": {"type": "null"}}}}
            ]}),
        ),
    ]
}

/// A socket address as Rust's `SocketAddr` parses it (the router's `listen`): an IPv4 address
/// (no leading zeros) or an IPv6 address in brackets (RFC 3986's grammar, with an optional
/// numeric scope), a colon and a port from 0 to 65535 (leading zeros allowed).
pub(crate) fn socket_address_pattern() -> String {
    let octet = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    let ipv4 = format!("{octet}(\\.{octet}){{3}}");
    let h16 = "[0-9A-Fa-f]{1,4}";
    let ls32 = format!("({h16}:{h16}|{ipv4})");
    // `[ *n( h16 ":" ) h16 ]`: up to n + 1 groups before "::".
    let before = |n: usize| format!("(({h16}:){{0,{n}}}{h16})?");
    let ipv6 = [
        format!("({h16}:){{6}}{ls32}"),
        format!("::({h16}:){{5}}{ls32}"),
        format!("({h16})?::({h16}:){{4}}{ls32}"),
        format!("{}::({h16}:){{3}}{ls32}", before(1)),
        format!("{}::({h16}:){{2}}{ls32}", before(2)),
        format!("{}::{h16}:{ls32}", before(3)),
        format!("{}::{ls32}", before(4)),
        format!("{}::{h16}", before(5)),
        format!("{}::", before(6)),
    ]
    .join("|");
    let port =
        "0*([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])";
    format!("^({ipv4}|\\[({ipv6})(%[0-9]{{1,9}})?\\]):{port}$")
}

/// Adds [`bound_table`]'s keywords; an entry whose property is not there is left out (a test
/// checks that every entry is in the document). And the router's `listen` of a local target
/// (inside `Target`'s `oneOf`), a socket address.
fn bounds(components: &mut Map<String, Value>) {
    for name in ["Target", "TargetInput"] {
        let Some(Value::Array(kinds)) = components
            .get_mut(name)
            .and_then(|target| target.get_mut("oneOf"))
        else {
            continue;
        };
        for kind in kinds {
            if kind["properties"]["kind"]["const"] == "local"
                && let Some(Value::Object(listen)) = kind
                    .get_mut("properties")
                    .and_then(|properties| properties.get_mut("listen"))
            {
                listen.insert("pattern".into(), socket_address_pattern().into());
            }
        }
    }
    for (component, path, keywords) in bound_table() {
        for name in [component.to_string(), format!("{component}Input")] {
            let mut node = components.get_mut(&name);
            for field in path {
                node = node
                    .and_then(|node| node.get_mut("properties"))
                    .and_then(|properties| properties.get_mut(*field));
            }
            if let (Some(Value::Object(node)), Value::Object(keywords)) = (node, &keywords) {
                for (keyword, value) in keywords {
                    node.insert(keyword.clone(), value.clone());
                }
            }
        }
    }
}

/// Drops the components nothing refers to any more (`ObjectMeta`, replaced by the metadata
/// with the names' rules).
fn prune(components: &mut Map<String, Value>, roots: &[&Value]) {
    fn walk(node: &Value, found: &mut std::collections::BTreeSet<String>) {
        match node {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref")
                    && let Some(name) = target.strip_prefix("#/components/schemas/")
                {
                    found.insert(name.to_string());
                }
                map.values().for_each(|child| walk(child, found));
            }
            Value::Array(items) => items.iter().for_each(|child| walk(child, found)),
            _ => {}
        }
    }
    loop {
        let mut used = std::collections::BTreeSet::new();
        roots.iter().for_each(|root| walk(root, &mut used));
        components
            .values()
            .for_each(|schema| walk(schema, &mut used));
        let before = components.len();
        components.retain(|name, _| used.contains(name));
        if components.len() == before {
            break;
        }
    }
}

/// The schemas no Rust type describes.
fn hand_written() -> Vec<(&'static str, Value)> {
    let scope = json!({"type": "string", "enum": ["read", "operate", "admin", "evaluate"]});
    let time = json!({"type": ["string", "null"], "format": "date-time"});
    let namespaces = json!({
        "type": ["array", "null"],
        "items": {"type": "string", "pattern": NAMESPACE_PATTERN, "maxLength": NAMESPACE_MAX},
        "description": "The namespaces the token sees and touches; null: all"
    });
    let token = json!({
        "type": "object",
        "description": "An API token as the API shows it: never its secret or hash (docs/SECURITY.md)",
        "required": ["name", "scope", "namespaces", "createdAt", "expiresAt", "revokedAt", "lastUsedAt"],
        "properties": {
            "name": {"type": "string"},
            "scope": scope,
            "namespaces": namespaces,
            "createdAt": {"type": "string", "format": "date-time"},
            "expiresAt": time,
            "revokedAt": time,
            "lastUsedAt": time
        }
    });
    // A request's list names at least one namespace: an empty one is refused (422), never
    // taken as "all".
    let mut requested_namespaces = namespaces.clone();
    requested_namespaces["minItems"] = 1.into();
    requested_namespaces["description"] =
        "The only namespaces the token sees and touches (at least one); left out or null: all"
            .into();
    let mut issued = token.clone();
    issued["description"] =
        "A token just created, with its secret: shown once, never stored".into();
    issued["properties"]["secret"] = json!({"type": "string", "description": "Give it to clients as Authorization: Bearer SECRET or X-API-Key: SECRET"});
    if let Some(required) = issued["required"].as_array_mut() {
        required.push("secret".into());
    }
    let mut table = vec![
        ("Token", token),
        ("IssuedToken", issued),
        (
            "TokenPage",
            json!({
                "type": "object",
                "required": ["items"],
                "properties": {"items": {"type": "array", "items": {"$ref": "#/components/schemas/Token"}}}
            }),
        ),
        (
            "TokenRequest",
            json!({
                "type": "object",
                "description": "A token to create; every problem is named at once (400; 422 when namespaces is an empty list), a name in use is 409",
                "required": ["name", "scope"],
                "additionalProperties": false,
                "properties": {
                    "name": {"type": "string", "pattern": NAME_PATTERN, "maxLength": NAME_MAX},
                    "scope": scope,
                    "namespaces": requested_namespaces,
                    "expires": {
                        "type": ["string", "null"],
                        "description": "A duration from now (30d, 12h, 90m, 2w) or an RFC 3339 time; null: never"
                    }
                },
                "examples": [{"name": "deployer", "scope": "operate", "namespaces": ["shop"], "expires": "30d"}]
            }),
        ),
        (
            "LoginRequest",
            json!({
                "type": "object",
                "required": ["token"],
                "additionalProperties": false,
                "properties": {"token": {"type": "string", "minLength": 1, "pattern": "\\S", "description": "A token's secret (blank is none)"}}
            }),
        ),
        (
            "Session",
            json!({
                "type": "object",
                "description": "Who is calling. On a server without tokens: name anonymous, scope admin, auth false.",
                "required": ["name", "scope", "namespaces", "expires", "csrf", "auth"],
                "properties": {
                    "name": {"type": "string"},
                    "scope": scope,
                    "namespaces": namespaces,
                    "expires": time,
                    "csrf": {
                        "type": ["string", "null"],
                        "description": "For a cookie session: send it as X-CSRF-Token with every POST, PUT and DELETE"
                    },
                    "auth": {"type": "boolean", "description": "false: the server has no tokens (open, loopback only)"}
                }
            }),
        ),
    ];
    table.extend(vec![
        (
            "Health",
            json!({
                "type": "object",
                "required": ["status"],
                "properties": {
                    "status": {"type": "string", "const": "ok"},
                    "checks": {
                        "type": "object",
                        "description": "/readyz of weir serve on PostgreSQL: each check (database, leases) and, when it fails, why",
                        "additionalProperties": {
                            "type": "object",
                            "required": ["ok"],
                            "properties": {"ok": {"type": "boolean"}, "message": {"type": "string"}}
                        }
                    }
                }
            }),
        ),
        (
            "FlaggerCanary",
            json!({
                "type": "object",
                "description": "A Flagger Canary (flagger.app/v1beta1), converted to a Rollout on apply with Flagger's defaults; fields weir does not map are kept in an annotation and returned as warnings (docs/ROLLOUT.md, Flagger import).",
                "required": ["apiVersion", "kind", "metadata", "spec"],
                "properties": {
                    "apiVersion": {"type": "string", "const": "flagger.app/v1beta1"},
                    "kind": {"type": "string", "const": "Canary"},
                    "metadata": {"$ref": "#/components/schemas/RolloutMetadata"},
                    "spec": {
                        "type": "object",
                        "required": ["targetRef"],
                        "description": "targetRef, service, analysis, ... as Flagger reads them"
                    }
                }
            }),
        ),
        (
            "Lagged",
            json!({
                "type": "object",
                "description": "The data of an `event: lagged`: the watcher fell behind; list again",
                "required": ["missed", "message"],
                "properties": {
                    "missed": {"type": "integer", "minimum": 0},
                    "message": {"type": "string"}
                }
            }),
        ),
        (
            "FlagChange",
            json!({
                "type": "object",
                "description": "The data of an `event: flag`",
                "required": ["namespace", "key", "version"],
                "properties": {
                    "namespace": {"type": "string"},
                    "key": {"type": "string"},
                    "version": {"type": ["integer", "null"], "description": "null: deleted"}
                }
            }),
        ),
        (
            "OutcomeReport",
            json!({
                "type": "object",
                "description": "What each variant of a flag served since the reporter's previous report (docs/FLAGS.md, Guarded flags). Nothing is counted unless everything is right.",
                "required": ["variants"],
                "additionalProperties": false,
                "properties": {
                    "variants": {
                        "type": "object",
                        "minProperties": 1,
                        "description": "Variant name -> its outcome; every name must be a variation of the flag (else 422)",
                        "additionalProperties": {"$ref": "#/components/schemas/Outcome"}
                    }
                },
                "examples": [{
                    "variants": {
                        "on": {"requests": 3, "errors": 1, "latencyMs": [12.5, 40, 8]},
                        "off": {"requests": 480, "errors": 5, "slow": 2}
                    }
                }]
            }),
        ),
        (
            "Outcome",
            json!({
                "type": "object",
                "required": ["requests"],
                "additionalProperties": false,
                "properties": {
                    "requests": {"type": "integer", "minimum": 0, "maximum": weir_flags::MAX_REQUESTS_PER_REPORT, "description": "Requests (or operations) served with this variant"},
                    "errors": {"type": "integer", "minimum": 0, "maximum": weir_flags::MAX_REQUESTS_PER_REPORT, "default": 0, "description": "How many of them failed; at most requests"},
                    "slow": {"type": "integer", "minimum": 0, "maximum": weir_flags::MAX_REQUESTS_PER_REPORT, "default": 0, "description": "How many were slower than the rollout's latency bound (its request-duration max); at most requests; not with latencyMs"},
                    "latencyMs": {
                        "type": "array",
                        "items": {"type": "number", "minimum": 0},
                        "description": "Every one of these requests' durations in milliseconds (exactly requests entries); weir counts the slow ones against the judging rollout's bound. Not with slow"
                    }
                }
            }),
        ),
        (
            "OfrepRequest",
            json!({
                "type": "object",
                "description": "The whole body may be absent, and so may the context",
                "properties": {
                    "context": {
                        "type": ["object", "null"],
                        "description": "targetingKey and any attributes",
                        "properties": {
                            "targetingKey": {"type": ["string", "null"], "description": "null counts as absent"}
                        },
                        "additionalProperties": true
                    }
                },
                "additionalProperties": true
            }),
        ),
        (
            "OfrepEvaluation",
            json!({
                "type": "object",
                "required": ["key", "reason", "variant", "value", "metadata"],
                "properties": {
                    "key": {"type": "string"},
                    "reason": {"type": "string", "enum": ["STATIC", "TARGETING_MATCH", "SPLIT", "DISABLED", "DEFAULT"]},
                    "variant": {"type": "string"},
                    "value": {},
                    "metadata": {"type": "object"}
                }
            }),
        ),
        (
            "OfrepError",
            json!({
                "type": "object",
                "required": ["errorCode", "errorDetails"],
                "properties": {
                    "key": {"type": "string"},
                    "errorCode": {"type": "string", "enum": ["FLAG_NOT_FOUND", "PARSE_ERROR", "TARGETING_KEY_MISSING", "INVALID_CONTEXT", "GENERAL"]},
                    "errorDetails": {"type": "string"}
                }
            }),
        ),
        (
            "OfrepBulk",
            json!({
                "type": "object",
                "required": ["flags"],
                "properties": {
                    "flags": {
                        "type": "array",
                        "items": {"anyOf": [
                            {"$ref": "#/components/schemas/OfrepEvaluation"},
                            {"$ref": "#/components/schemas/OfrepError"}
                        ]}
                    }
                }
            }),
        ),
    ]);
    table
}

#[cfg(test)]
mod tests;
