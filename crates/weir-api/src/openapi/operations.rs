//! The route table of the OpenAPI document: one row per operation the server answers, with the
//! parameters and their constraints, the bodies, every status its handler can answer and the
//! scope a caller needs. `openapi/tests.rs` checks it against the router both ways.

use serde_json::{Map, Value, json};

use super::{
    FLAG_KEY_MAX, FLAG_KEY_PATTERN, IF_MATCH_PATTERN, NAME_MAX, NAME_PATTERN, NAMESPACE_MAX,
    NAMESPACE_PATTERN, Schemas,
};
use crate::types::{
    Applied, CommandRequest, ErrorBody, EventPage, FlagRolloutPage, MAX_ACTOR_CHARS,
    OFFSET_CURSOR_PATTERN, ROLLOUT_CURSOR_PATTERN, RolloutPage, RolloutView, ScheduleType,
};
use weir_core::model::{Phase, ScheduleState};
use weir_store::{DEFAULT_PAGE, MAX_PAGE, TokenScope};

use crate::auth::{Access, access_of};

/// The scope an operation's security requirement names: what `auth::ROUTES` says the route
/// needs (that table is the one the server enforces, so the document cannot disagree with it).
fn scope_of(method: &str, path: &str) -> Option<&'static str> {
    let method = axum::http::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
        .unwrap_or(axum::http::Method::GET);
    match access_of(&method, path) {
        // `/metrics` is open unless `weir serve --metrics-auth read`; documented as open.
        Access::Public | Access::Metrics => None,
        Access::Scope(scope) => Some(scope.as_str()),
        // Token management: admin, and not limited to namespaces (the description says so).
        Access::ManageTokens => Some(TokenScope::Admin.as_str()),
        // Any token at all (the session of whoever calls).
        Access::Authenticated => Some(""),
    }
}

/// One row of the table.
pub(crate) struct Operation {
    /// Lowercase, as OpenAPI writes it.
    pub(crate) method: &'static str,
    /// With `{namespace}`, `{name}` and `{key}` as the router's.
    pub(crate) path: &'static str,
    pub(crate) id: &'static str,
    tags: &'static [&'static str],
    summary: &'static str,
    description: Option<&'static str>,
    /// From `auth::ROUTES`: `None` public, `Some("")` any token, else the scope's name.
    pub(crate) scope: Option<&'static str>,
    parameters: Vec<Value>,
    body: Option<Value>,
    responses: Vec<(String, Value)>,
}

fn op(
    method: &'static str,
    path: &'static str,
    id: &'static str,
    tags: &'static [&'static str],
    summary: &'static str,
) -> Operation {
    Operation {
        method,
        path,
        id,
        tags,
        summary,
        description: None,
        scope: scope_of(method, path),
        parameters: Vec::new(),
        body: None,
        responses: Vec::new(),
    }
}

impl Operation {
    fn describe(mut self, description: &'static str) -> Operation {
        self.description = Some(description);
        self
    }

    fn params(mut self, parameters: Vec<Value>) -> Operation {
        self.parameters.extend(parameters);
        self
    }

    fn body(mut self, body: Value) -> Operation {
        self.body = Some(body);
        self
    }

    fn answer(mut self, status: u16, response: Value) -> Operation {
        self.responses.push((status.to_string(), response));
        self
    }

    /// The JSON errors a handler answers, by status (`components.responses`). A route that
    /// can fail on the store (500) can also meet a database that cannot be reached (503).
    fn errors(mut self, statuses: &[u16]) -> Operation {
        let mut statuses = statuses.to_vec();
        if statuses.contains(&500) && !statuses.contains(&503) {
            statuses.push(503);
        }
        for status in &statuses {
            let name = match status {
                400 => "Invalid",
                404 => "NotFound",
                409 => "Conflict",
                413 => "PayloadTooLarge",
                415 => "UnsupportedMediaType",
                422 => "Unprocessable",
                500 => "Internal",
                503 => "Unavailable",
                _ => continue,
            };
            self.responses
                .push((status.to_string(), reference("responses", name)));
        }
        self
    }

    /// The operation as OpenAPI writes it: path parameters from the path, then the
    /// operation's own, the answers every route can give (421 for a Host the server does not
    /// answer to; for routes that need a token 401, 403 and 429), and the scope.
    pub(crate) fn to_json(&self) -> Value {
        let mut parameters: Vec<Value> = path_parameters(self.path)
            .into_iter()
            .map(|name| reference("parameters", name))
            .collect();
        parameters.extend(self.parameters.iter().cloned());
        let mut responses = Map::new();
        for (status, response) in &self.responses {
            responses.insert(status.clone(), response.clone());
        }
        responses.insert("421".into(), reference("responses", "Misdirected"));
        let mut description = self.description.unwrap_or_default().to_string();
        let (security, scope) = match self.scope {
            None => {
                if !description.is_empty() {
                    description.push_str("\n\n");
                }
                description.push_str("Public: no token needed.");
                (json!([]), Value::Null)
            }
            Some(scope) => {
                responses.insert("401".into(), reference("responses", "Unauthorized"));
                responses
                    .entry("403")
                    .or_insert_with(|| reference("responses", "Forbidden"));
                responses.insert("429".into(), reference("responses", "TooManyRequests"));
                if !description.is_empty() {
                    description.push_str("\n\n");
                }
                description.push_str(&format!(
                    "{}, when the server has tokens.",
                    match scope {
                        "" => "Needs a token of any scope".to_string(),
                        "read" => "Needs a token with scope read (or operate, admin)".to_string(),
                        "operate" => "Needs a token with scope operate (or admin)".to_string(),
                        "evaluate" => "Needs a token with scope evaluate (or read, operate, admin)"
                            .to_string(),
                        other => format!("Needs a token with scope {other}"),
                    }
                ));
                let scopes: Vec<&str> = Some(scope)
                    .filter(|scope| !scope.is_empty())
                    .into_iter()
                    .collect();
                (
                    json!([{"bearerAuth": scopes}, {"apiKey": scopes}]),
                    Value::String(if scope.is_empty() { "any" } else { scope }.into()),
                )
            }
        };
        let mut operation = json!({
            "tags": self.tags,
            "operationId": self.id,
            "summary": self.summary,
            "description": description,
            "security": security,
            "responses": responses,
        });
        if let Value::Object(map) = &mut operation {
            if !scope.is_null() {
                map.insert("x-weir-scope".into(), scope);
            }
            if !parameters.is_empty() {
                map.insert("parameters".into(), Value::Array(parameters));
            }
            if let Some(body) = &self.body {
                map.insert("requestBody".into(), body.clone());
            }
        }
        operation
    }
}

/// The `{...}` segments of a path, in order.
fn path_parameters(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .collect()
}

fn reference(kind: &str, name: &str) -> Value {
    json!({"$ref": format!("#/components/{kind}/{name}")})
}

fn json_body(schema: Value, required: bool) -> Value {
    json!({"required": required, "content": {"application/json": {"schema": schema}}})
}

fn json_answer(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

fn with_etag(mut response: Value) -> Value {
    response["headers"] = json!({"ETag": {"$ref": "#/components/headers/ETag"}});
    response
}

fn query(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

/// The shapes `since` takes: a Go duration or an RFC 3339 time (whether the time is a real date
/// is checked by the server).
const SINCE_PATTERN: &str = "^(([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2}))$";

/// The largest whole number a query parameter may hold (a u64).
const MAX_WHOLE: u64 = u64::MAX;

/// Every operation the server answers (`weir serve`: the API and the flags' routes).
pub(crate) fn table(schemas: &mut Schemas) -> Vec<Operation> {
    const META: &[&str] = &["meta"];
    const ROLLOUTS: &[&str] = &["rollouts"];
    const FLAGS: &[&str] = &["flags"];
    const OFREP: &[&str] = &["ofrep"];
    const SESSION: &[&str] = &["access"];
    const TOKENS: &[&str] = &["access"];
    // Registered first: every error response refers to it.
    schemas.response::<ErrorBody>();
    let rollout = schemas.response::<RolloutView>();
    let applied = schemas.response::<Applied>();
    let flag = schemas.response::<crate::flags::FlagView>();
    let applied_flag = schemas.response::<crate::flags::AppliedFlag>();
    let rollout_body = {
        let rollout = schemas.request::<weir_core::model::Rollout>();
        json!({
            "required": true,
            "description": format!("One Rollout (weir.dev/v1alpha1) or one Flagger Canary (flagger.app/v1beta1, converted), in JSON or YAML; at most {} bytes", crate::MAX_BODY_BYTES),
            "content": {
                "application/json": {"schema": {"oneOf": [rollout.clone(), reference("schemas", "FlaggerCanary")]}},
                "application/yaml": {"schema": {"oneOf": [rollout, reference("schemas", "FlaggerCanary")]}}
            }
        })
    };
    let flag_body = {
        let flag = schemas.request::<weir_core::model::Flag>();
        json!({
            "required": true,
            "description": format!("One Flag document (docs/FLAGS.md), in JSON or YAML; at most {} bytes", crate::MAX_BODY_BYTES),
            "content": {
                "application/json": {"schema": flag.clone()},
                "application/yaml": {"schema": flag}
            }
        })
    };
    let phases: Vec<&str> = Phase::ALL.iter().map(|phase| phase.as_str()).collect();
    let states: Vec<&str> = ScheduleState::ALL
        .iter()
        .map(|state| state.as_str())
        .collect();
    let types: Vec<&str> = ScheduleType::ALL.iter().map(|kind| kind.as_str()).collect();
    let preconditions = || {
        vec![
            reference("parameters", "expectedVersion"),
            reference("parameters", "ifMatch"),
            reference("parameters", "ifNoneMatch"),
        ]
    };
    let ofrep_one = |operation: Operation| {
        operation
            .body(json_body(reference("schemas", "OfrepRequest"), false))
            .answer(
                200,
                json_answer("The evaluation", reference("schemas", "OfrepEvaluation")),
            )
            .answer(
                400,
                json_answer(
                    "PARSE_ERROR, TARGETING_KEY_MISSING or INVALID_CONTEXT",
                    reference("schemas", "OfrepError"),
                ),
            )
            .answer(
                404,
                json_answer("FLAG_NOT_FOUND", reference("schemas", "OfrepError")),
            )
            .answer(413, ofrep_too_large())
    };
    let ofrep_all = |operation: Operation| {
        operation
            .params(vec![reference("parameters", "ifNoneMatchTag")])
            .body(json_body(reference("schemas", "OfrepRequest"), false))
            .answer(200, {
                let mut answer = json_answer("Every flag's evaluation; ETag covers the flags and the context", reference("schemas", "OfrepBulk"));
                answer["headers"] = json!({"ETag": {"description": "A tag of the flags and the context; send it back in If-None-Match", "schema": {"type": "string"}}});
                answer
            })
            .answer(304, json!({"description": "Nothing changed since an If-None-Match tag (compared weakly: W/\"...\" matches too), or If-None-Match: *", "headers": {"ETag": {"schema": {"type": "string"}}}}))
            .answer(400, json_answer("PARSE_ERROR or INVALID_CONTEXT; GENERAL for a namespace that is not a namespace's name", reference("schemas", "OfrepError")))
            .answer(413, ofrep_too_large())
    };
    vec![
        op("get", "/healthz", "health", META, "Liveness")
            .answer(200, json_answer("The server is up", reference("schemas", "Health"))),
        op("get", "/readyz", "ready", META, "Readiness: a weir operator replica that is not the leader answers 503; weir serve on PostgreSQL answers 503 while the database cannot be reached or this instance's leases are not live")
            .answer(200, json_answer("Ready", reference("schemas", "Health")))
            .answer(503, json!({"description": "Not ready: not the leader (operator); the database cannot be reached or the leases are not live (weir serve on PostgreSQL: status unavailable, checks says which and why)"})),
        op("get", "/api/v1/openapi.json", "openapi", META, "This document")
            .answer(200, json_answer("The OpenAPI document", json!({"type": "object"}))),
        op("get", "/metrics", "metrics", META, "weir's own metrics for Prometheus: each rollout's phase, canary weight, failed checks, run durations, promotions, rollbacks and judges' e-values; the engine's tick lateness and store commit time; the embedded routers' traffic per local rollout (also served by weir run --metrics-listen ADDR)")
            .describe("Every metric, its labels and example PromQL: docs/METRICS.md. Open by default; `weir serve --metrics-auth read` asks for a read token.")
            .answer(200, json!({
                "description": "OpenMetrics text",
                "content": {crate::OPENMETRICS_CONTENT_TYPE: {"schema": {"type": "string"}}}
            })),
        op("get", "/api/v1/rollouts", "listRollouts", ROLLOUTS, "A page of rollouts, in (namespace, name) order")
            .params(vec![
                query("namespace", "Only this namespace", json!({"type": "string"})),
                query("phase", "Only rollouts in this phase (any case)", json!({"type": "string", "enum": phases})),
                reference("parameters", "limit"),
                query("cursor", "The nextCursor of the previous page", json!({"type": "string", "pattern": ROLLOUT_CURSOR_PATTERN})),
            ])
            .answer(200, json_answer("One page; nextCursor is null on the last", schemas.response::<RolloutPage>()))
            .errors(&[400, 500]),
        op("post", "/api/v1/rollouts", "applyRollout", ROLLOUTS, "Apply (create or update) a rollout named by its document")
            .describe("The body is one Rollout (weir.dev/v1alpha1) or one Flagger Canary (flagger.app/v1beta1, converted; the conversion's warnings are returned). Fields the server writes (status, version, generation, lastEventSeq, createdAt, updatedAt) are ignored, so what a GET returns can be sent back. The spec's rules beyond its shape (docs/ROLLOUT.md) are checked all at once: 400 names every field at fault; 422 names what this server's policy refuses (commands, listen and connect addresses; docs/SECURITY.md).")
            .params(preconditions())
            .body(rollout_body.clone())
            .answer(200, with_etag(json_answer("Updated, or unchanged", applied.clone())))
            .answer(201, created(applied.clone(), "The rollout's URL"))
            .errors(&[400, 409, 413, 415, 422, 500, 503]),
        op("get", "/api/v1/rollouts/{namespace}/{name}", "getRollout", ROLLOUTS, "One rollout with its status")
            .answer(200, with_etag(json_answer("The rollout; ETag is its version", rollout.clone())))
            .errors(&[400, 404, 500]),
        op("put", "/api/v1/rollouts/{namespace}/{name}", "putRollout", ROLLOUTS, "Apply (create or update) the rollout the path names")
            .describe("As POST /api/v1/rollouts; the document's metadata.name (and metadata.namespace, when given; otherwise the path's is used) must match the path.")
            .params(preconditions())
            .body(rollout_body)
            .answer(200, with_etag(json_answer("Updated, or unchanged", applied.clone())))
            .answer(201, created(applied, "The rollout's URL"))
            .errors(&[400, 409, 413, 415, 422, 500, 503]),
        op("delete", "/api/v1/rollouts/{namespace}/{name}", "deleteRollout", ROLLOUTS, "Delete a rollout and its history")
            .describe("With If-Match (an ETag of a GET) or expectedVersion, only that version is deleted; a rollout changed since is left as it is (409).")
            .params(vec![reference("parameters", "deleteVersion"), reference("parameters", "ifMatch")])
            .answer(204, json!({"description": "Deleted"}))
            .errors(&[400, 404, 409, 500, 503]),
        op("post", "/api/v1/rollouts/{namespace}/{name}/commands", "commandRollout", ROLLOUTS, "Give a rollout a command")
            .describe("promote, abort, pause, resume, retry and skip-analysis act on the current run (or, for skip-analysis, the next); promote with step: true takes only the plan's next canary step or schedule entry now (its own pause then applies; the history says promoted one step ... to W%, against promoted ... to the end); open-gate and close-gate take a gate (a type, a hook's name, or both) and decide it for the current run: an opened gate passes whatever its hooks answer, a closed one holds (docs/WEBHOOKS.md). stop ends the run where it stands: the weights stay (phase Stopped), or with rollback: true everyone returns to the primary (phase Failed); stoppedBy is user. The actor is recorded in the history. 409 (code rejected) when the command does not apply in the rollout's phase.")
            .params(vec![json!({
                "name": "X-Weir-Actor",
                "in": "header",
                "required": false,
                "description": "Who gives the command, when the body does not say (default: api)",
                "schema": {"type": "string", "maxLength": MAX_ACTOR_CHARS, "pattern": "^[\\x20-\\x7e]*$"}
            })])
            .body(json_body(schemas.request::<CommandRequest>(), true))
            .answer(200, with_etag(json_answer("The rollout after the command", rollout)))
            .errors(&[400, 404, 409, 413, 415, 500, 503]),
        op("get", "/api/v1/rollouts/{namespace}/{name}/events", "rolloutEvents", ROLLOUTS, "A rollout's history, oldest first")
            .params(vec![
                query("after", "Only events with a larger seq (default 0)", json!({"type": "integer", "minimum": 0, "maximum": MAX_WHOLE})),
                reference("parameters", "limit"),
            ])
            .answer(200, json_answer("One page of events; nextAfter is null when the page was not full", schemas.response::<EventPage>()))
            .errors(&[400, 404, 500]),
        op("get", "/api/v1/watch", "watch", &["watch"], "Status changes as Server-Sent Events")
            .describe("Each committed change is an `event: status` whose data is a StatusChange (a deleted rollout has phase Terminated and status null). A watcher that falls behind gets `event: lagged` (data: Lagged) and should list again. Idle streams carry a comment every 15 s. The stream stays open until the client hangs up.")
            .params(vec![
                query("namespace", "Only this namespace", json!({"type": "string"})),
                query("name", "Only rollouts of this name", json!({"type": "string"})),
            ])
            .answer(200, json!({
                "description": "An event stream: `event: status` with StatusChange data, `event: lagged` with Lagged data",
                "content": {"text/event-stream": {
                    "schema": {"type": "string"},
                    "x-events": {
                        "status": schemas.response::<crate::watch::StatusData<'static>>(),
                        "lagged": reference("schemas", "Lagged")
                    }
                }}
            }))
            .errors(&[400]),
        op("get", "/api/v1/flag-rollouts", "listFlagRollouts", &["rollouts", "flags"], "A page of the rollouts of flags, each with where its schedule stands")
            .describe("Seed 004's ListProgressiveRollout: the rollouts whose spec.target.kind is flag, filtered by flag keys, schedule state, schedule type and a search keyword, ordered by name, created or updated, paged with an offset cursor. Every bad parameter is named in one 400 with the values allowed; unknown parameters are refused.")
            .params(vec![
                query("namespace", "Only this namespace", json!({"type": "string"})),
                json!({"name": "flag", "in": "query", "required": false, "style": "form", "explode": true,
                       "description": "Only rollouts of these flag keys: repeat the parameter or separate keys with commas",
                       "schema": {"type": "array", "items": {"type": "string"}}}),
                json!({"name": "status", "in": "query", "required": false, "style": "form", "explode": true,
                       "description": "Only schedules in these states (any case): repeat the parameter or separate states with commas. A rollout whose plan is not a schedule has no state and is left out",
                       "schema": {"type": "array", "items": {"type": "string", "enum": states}}}),
                query("type", "Only schedules of this type (any case)", json!({"type": "string", "enum": types})),
                query("search", "Only rollouts whose name or flag key contains this (case-insensitive)", json!({"type": "string"})),
                query("order", "name (default: by namespace, then name), created, -created, updated, -updated", json!({"type": "string", "enum": ["name", "created", "-created", "updated", "-updated"]})),
                reference("parameters", "limit"),
                reference("parameters", "offsetCursor"),
            ])
            .answer(200, json_answer("One page; nextCursor is absent on the last", schemas.response::<FlagRolloutPage>()))
            .errors(&[400, 500]),
        op("get", "/api/v1/flags", "listFlags", FLAGS, "A page of flags")
            .params(vec![
                query("namespace", "Only this namespace", json!({"type": "string"})),
                query("search", "Only flags whose key, a tag or a variation's description contains this (case-insensitive)", json!({"type": "string"})),
                json!({"name": "tag", "in": "query", "required": false, "description": "Only flags with this tag (repeat, or separate by commas, for flags with every one)", "schema": {"type": "string"}}),
                query("order", "key (default), created, -created, updated, -updated", json!({"type": "string", "enum": ["key", "created", "-created", "updated", "-updated"]})),
                reference("parameters", "limit"),
                reference("parameters", "offsetCursor"),
            ])
            .answer(200, json_answer("One page; nextCursor is absent on the last", schemas.response::<crate::flags::FlagPage>()))
            .errors(&[400]),
        op("post", "/api/v1/flags", "applyFlag", FLAGS, "Apply (create or update) a Flag")
            .describe("Fields the server writes (version, createdAt, updatedAt, rolledOutBy, exposures, outcomes) are ignored, so what a GET returns can be sent back. The rules beyond the document's shape (docs/FLAGS.md: at least two variations, names unique, values of one type, references to variations) are checked all at once: 400 names every field at fault. A flag that a rollout is moving refuses a change of its variations or of its default strategy (409, naming the rollout); the strategy that rollout has in force, as a GET shows it, counts as no change.")
            .params(preconditions())
            .body(flag_body.clone())
            .answer(200, with_etag(json_answer("Updated, or unchanged", applied_flag.clone())))
            .answer(201, created(applied_flag.clone(), "The flag's URL"))
            .errors(&[400, 409, 413, 415, 500]),
        op("get", "/api/v1/flags/watch", "watchFlags", FLAGS, "Flag changes as Server-Sent Events")
            .describe("event: flag, data FlagChange, for every committed change, so clients re-fetch; event: lagged when the watcher fell behind. The stream stays open until the client hangs up.")
            .params(vec![query("namespace", "Only this namespace", json!({"type": "string"}))])
            .answer(200, json!({
                "description": "An event stream",
                "content": {"text/event-stream": {
                    "schema": {"type": "string"},
                    "x-events": {"flag": reference("schemas", "FlagChange"), "lagged": reference("schemas", "Lagged")}
                }}
            }))
            .errors(&[400]),
        op("get", "/api/v1/flags/{namespace}/{key}", "getFlag", FLAGS, "One flag; ETag is its version")
            .answer(200, with_etag(json_answer("The flag", flag)))
            .errors(&[404, 500]),
        op("put", "/api/v1/flags/{namespace}/{key}", "putFlag", FLAGS, "Apply the flag the path names")
            .describe("As POST /api/v1/flags; the document's metadata.name (and metadata.namespace, when given) must match the path.")
            .params(preconditions())
            .body(flag_body)
            .answer(200, with_etag(json_answer("Updated, or unchanged", applied_flag.clone())))
            .answer(201, created(applied_flag, "The flag's URL"))
            .errors(&[400, 409, 413, 415, 500]),
        op("delete", "/api/v1/flags/{namespace}/{key}", "deleteFlag", FLAGS, "Delete a flag")
            .params(vec![reference("parameters", "deleteVersion"), reference("parameters", "ifMatch")])
            .answer(204, json!({"description": "Deleted"}))
            .errors(&[400, 404, 409, 500]),
        op("post", "/api/v1/flags/{namespace}/{key}/outcomes", "reportFlagOutcomes", FLAGS, "Report what each variant of a flag served (requests, errors, slow requests or latencies) for the judges of a guarded flag rollout")
            .describe("Nothing is counted unless everything is right: 400 for the body on its own (not JSON, a field of the wrong type, an unknown field, more errors than requests, latencyMs not one per request, slow with latencyMs), 404 for no such flag, 422 for a variant the flag does not have.")
            .body(json_body(reference("schemas", "OutcomeReport"), true))
            .answer(204, json!({"description": "Counted, all of it"}))
            .errors(&[400, 404, 413, 415, 422]),
        op("get", "/api/v1/flags/{namespace}/{key}/history", "flagHistory", FLAGS, "A flag's changes, newest first: who, when, and every field that changed with its value before and after")
            .describe("Every change is recorded: applies (actor: the token's name, or X-Weir-Actor on a server without tokens), deletes, a flag rollout's final strategy, a trigger's use (with the caller's address). Kept after the flag is deleted; 404 only for a namespace or key no flag can have.")
            .params(vec![
                reference("parameters", "limit"),
                query("cursor", "The nextCursor of the previous page: changes older than it", json!({"type": "string", "pattern": "^[0-9]{1,19}$"})),
            ])
            .answer(200, json_answer("One page; nextCursor is absent on the last", schemas.response::<crate::flag_history::FlagHistoryPage>()))
            .errors(&[400, 404, 500]),
        op("get", "/api/v1/flags/{namespace}/{key}/evaluations", "flagEvaluations", FLAGS, "A flag's OFREP evaluations per minute and variation (the store keeps a day)")
            .describe("Counted in memory and written every 5 seconds (and at shutdown), so the last seconds may not be in the answer yet.")
            .params(vec![query("since", "A time (RFC 3339) or a duration back from now (90m, 24h); default 1h, at most a day back", json!({"type": "string", "pattern": SINCE_PATTERN}))])
            .answer(200, json_answer("Minutes with evaluations, oldest first", schemas.response::<crate::flag_history::FlagEvaluations>()))
            .errors(&[400, 404, 500]),
        op("get", "/api/v1/flags/{namespace}/{key}/triggers", "listFlagTriggers", FLAGS, "A flag's triggers, without their secrets")
            .answer(200, json_answer("The triggers, oldest first", schemas.response::<crate::triggers::TriggerList>()))
            .errors(&[404, 500]),
        op("post", "/api/v1/flags/{namespace}/{key}/triggers", "createFlagTrigger", FLAGS, "Create a trigger: a secret URL that turns the flag on or off when POSTed to")
            .describe("The answer holds the secret (and the path with it) once; only its SHA-256 is stored.")
            .body(json_body(schemas.request::<crate::triggers::TriggerRequest>(), true))
            .answer(201, json_answer("The trigger, with its secret path (shown once)", schemas.response::<crate::triggers::CreatedTrigger>()))
            .errors(&[400, 404, 413, 500]),
        op("delete", "/api/v1/flags/{namespace}/{key}/triggers/{id}", "revokeFlagTrigger", FLAGS, "Revoke a trigger: its URL answers 404 from now on")
            .answer(204, json!({"description": "Revoked"}))
            .errors(&[404, 500]),
        op("post", "/api/v1/triggers/{id}/{secret}", "useFlagTrigger", FLAGS, "Use a trigger: turn its flag on or off")
            .describe("No token: the secret in the path is the credential. An unknown trigger and a wrong secret are both 404 (compared in constant time) and count towards the client address's limit (429 past it). The use is recorded in the flag's history with the caller's address.")
            .answer(200, json_answer("What the use did", schemas.response::<crate::triggers::TriggerUsed>()))
            .answer(429, reference("responses", "TooManyRequests"))
            .errors(&[404, 409, 500]),
        op("post", "/api/v1/session", "login", SESSION, "Log in with a token: a signed session cookie for the dashboard")
            .describe("Answers the session and sets the weir_session cookie (HttpOnly, SameSite=Strict, Path=/, Secure under TLS). A bad token is 401 and counts towards the client address's rate limit (429).")
            .body(json_body(reference("schemas", "LoginRequest"), true))
            .answer(200, json_answer("The session", reference("schemas", "Session")))
            .answer(401, reference("responses", "Unauthorized"))
            .answer(429, reference("responses", "TooManyRequests"))
            .answer(413, reference("responses", "TokenPayloadTooLarge"))
            .errors(&[400, 415, 500]),
        op("get", "/api/v1/session", "session", SESSION, "Who is calling: the session's (or bearer token's) name, scope and namespaces")
            .answer(200, json_answer("The session", reference("schemas", "Session")))
            .errors(&[500]),
        op("delete", "/api/v1/session", "logout", SESSION, "Log out: clears the session cookie")
            .answer(204, json!({"description": "Logged out"})),
        op("get", "/api/v1/tokens", "listTokens", TOKENS, "Every token, without secrets")
            .describe("Needs an admin token that is not limited to namespaces.")
            .answer(200, json_answer("The tokens", reference("schemas", "TokenPage")))
            .errors(&[500]),
        op("post", "/api/v1/tokens", "createToken", TOKENS, "Create a token; its secret is in this answer only")
            .describe("Needs an admin token that is not limited to namespaces.")
            .body(json_body(reference("schemas", "TokenRequest"), true))
            .answer(201, json_answer("Created", reference("schemas", "IssuedToken")))
            .answer(413, reference("responses", "TokenPayloadTooLarge"))
            .errors(&[400, 409, 415, 422, 500]),
        op("delete", "/api/v1/tokens/{name}", "revokeToken", TOKENS, "Revoke a token: it and its sessions are refused at once")
            .describe("Needs an admin token that is not limited to namespaces.")
            .answer(200, json_answer("The revoked token", reference("schemas", "Token")))
            .errors(&[404, 500]),
        ofrep_one(op("post", "/ofrep/v1/evaluate/flags/{key}", "ofrepEvaluate", OFREP, "Evaluate one flag of namespace default")),
        ofrep_all(op("post", "/ofrep/v1/evaluate/flags", "ofrepEvaluateAll", OFREP, "Evaluate every flag of namespace default")),
        ofrep_one(op("post", "/ns/{namespace}/ofrep/v1/evaluate/flags/{key}", "ofrepEvaluateIn", OFREP, "Evaluate one flag")),
        ofrep_all(op("post", "/ns/{namespace}/ofrep/v1/evaluate/flags", "ofrepEvaluateAllIn", OFREP, "Evaluate every flag")),
    ]
}

fn created(schema: Value, location: &str) -> Value {
    json!({
        "description": "Created",
        "headers": {
            "ETag": {"$ref": "#/components/headers/ETag"},
            "Location": {"description": location, "schema": {"type": "string"}}
        },
        "content": {"application/json": {"schema": schema}}
    })
}

/// `components.parameters`.
pub(crate) fn parameters() -> Value {
    json!({
        "namespace": {
            "name": "namespace", "in": "path", "required": true,
            "description": "The namespace: a DNS label, at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit",
            "schema": {"type": "string", "pattern": NAMESPACE_PATTERN, "minLength": 1, "maxLength": NAMESPACE_MAX}
        },
        "name": {
            "name": "name", "in": "path", "required": true,
            "description": "The rollout's name: at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
            "schema": {"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": NAME_MAX}
        },
        "key": {
            "name": "key", "in": "path", "required": true,
            "description": "The flag's key (its metadata.name): 1 to 253 lowercase letters, digits, '-', '.' and '_', starting and ending with a letter or digit",
            "schema": {"type": "string", "pattern": FLAG_KEY_PATTERN, "minLength": 1, "maxLength": FLAG_KEY_MAX}
        },
        "id": {
            "name": "id", "in": "path", "required": true,
            "description": "The trigger's id",
            "schema": {"type": "string", "minLength": 1, "maxLength": 64}
        },
        "secret": {
            "name": "secret", "in": "path", "required": true,
            "description": "The trigger's secret, as its creation answered it",
            "schema": {"type": "string", "minLength": 1, "maxLength": 256}
        },
        "limit": {
            "name": "limit", "in": "query", "required": false,
            "description": format!("Page size (0 or absent: {DEFAULT_PAGE}; at most {MAX_PAGE}, more is refused)"),
            "schema": {"type": "integer", "minimum": 0, "maximum": MAX_PAGE}
        },
        "offsetCursor": {
            "name": "cursor", "in": "query", "required": false,
            "description": "The nextCursor of the previous page (how many items came before it)",
            "schema": {"type": "string", "pattern": OFFSET_CURSOR_PATTERN}
        },
        "expectedVersion": {
            "name": "expectedVersion", "in": "query", "required": false,
            "description": "Apply only if the stored version is this one (0: only if it does not exist); 409 otherwise. Must agree with If-Match and If-None-Match when those are given (409 when they cannot all hold)",
            "schema": {"type": "integer", "minimum": 0, "maximum": MAX_WHOLE}
        },
        "deleteVersion": {
            "name": "expectedVersion", "in": "query", "required": false,
            "description": "Delete only if the stored version is this one; 409 otherwise. Must agree with If-Match when both are given",
            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_WHOLE}
        },
        "ifMatch": {
            "name": "If-Match", "in": "header", "required": false,
            "description": "The ETag of a GET (\"7\"; the bare 7 is accepted too): only if the stored version is still that one; * requires that the object exists. 409 otherwise",
            "schema": {"type": "string", "pattern": IF_MATCH_PATTERN}
        },
        "ifNoneMatch": {
            "name": "If-None-Match", "in": "header", "required": false,
            "description": "* : create only, 409 if the object exists",
            "schema": {"type": "string", "enum": ["*"]}
        },
        "ifNoneMatchTag": {
            "name": "If-None-Match", "in": "header", "required": false,
            "description": "The ETag of an earlier bulk evaluation: 304 while nothing changed",
            "schema": {"type": "string"}
        }
    })
}

/// OFREP's 413: its own error shape, code `GENERAL`.
fn ofrep_too_large() -> Value {
    json_answer(
        &format!(
            "GENERAL: the body is larger than {}",
            crate::error::bytes_in_words(crate::MAX_BODY_BYTES)
        ),
        reference("schemas", "OfrepError"),
    )
}

/// `components.responses`: every JSON error, by what it means.
pub(crate) fn responses() -> Value {
    let error = |description: &str| {
        json!({
            "description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        })
    };
    let mut responses = json!({
        "Invalid": error("Invalid request or document (code invalid); errors names every field and what is allowed"),
        "NotFound": error("No such object (code not_found)"),
        "Conflict": error("The stored version is not the one expected, the object already exists, or (code rejected) the command does not apply in the rollout's phase; code conflict or rejected"),
        "Unprocessable": error("Well formed but refused: a variant the flag does not have, or what this server's policy does not allow (code unprocessable); errors names every field"),
        "PayloadTooLarge": error(&format!("The body is larger than {} (code payload_too_large)", crate::error::bytes_in_words(crate::MAX_BODY_BYTES))),
        "TokenPayloadTooLarge": error(&format!("The body is larger than {} (code payload_too_large)", crate::error::bytes_in_words(crate::auth::TOKEN_BODY_LIMIT))),
        "UnsupportedMediaType": error("The body is neither JSON nor (where accepted) YAML (code unsupported_media_type)"),
        "Internal": error("The server failed (code internal)"),
        "Unavailable": error("The engine is shutting down, the rollout is between owners, or the database cannot be reached (code unavailable; with Retry-After when the database cannot be reached; nothing was done)"),
        "Misdirected": error("The Host is not a name this server answers to (code misdirected; docs/SECURITY.md)"),
        "Unauthorized": error("No token, or one that is unknown, expired or revoked (code unauthorized); WWW-Authenticate: Bearer"),
        "Forbidden": error("The token's scope does not allow this (code forbidden; the message names the scope needed), or a change sent from another site's page"),
        "TooManyRequests": error("Too many bad tokens from this address; try again after Retry-After seconds"),
    });
    responses["Unauthorized"]["headers"] =
        json!({"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}});
    responses["TooManyRequests"]["headers"] = json!({"Retry-After": {"schema": {"type": "integer", "minimum": 0}, "description": "Seconds"}});
    responses
}
