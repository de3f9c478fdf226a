//! `/api/v1/rollouts`: list, get, apply, delete, commands, events.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;
use weir_core::document::{Document, load_value};
use weir_core::machine::{Command, GateRef};
use weir_core::model::{HookType, Rollout};
use weir_core::{FieldError, Warning};
use weir_store::{ApplyOutcome, ListQuery, RolloutKey, Store, StoredRollout};

use crate::ApiState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::input::{self, Format, Params, Precondition, RolloutPath};
use crate::types::{Applied, EventPage, RolloutPage, RolloutView};

type QueryPairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

// === views ===

/// Fields the server writes; ignored in applied documents so that what a GET returns can be
/// edited and PUT back.
pub(crate) const SERVER_FIELDS: [&str; 7] = [
    "status",
    "version",
    "generation",
    "lastEventSeq",
    "createdAt",
    "updatedAt",
    "owner",
];

fn etag(version: u64) -> Option<HeaderValue> {
    // Digits and quotes are always a valid header value; `ok()` keeps this panic-free anyway.
    HeaderValue::from_str(&format!("\"{version}\"")).ok()
}

fn with_etag(status: StatusCode, version: u64, body: impl Serialize) -> Response {
    let mut response = (status, Json(body)).into_response();
    if let Some(tag) = etag(version) {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

fn not_found(key: &RolloutKey) -> ApiError {
    ApiError::NotFound(format!("rollout {key} not found"))
}

// === list ===

/// `GET /api/v1/rollouts?namespace=&phase=&limit=&cursor=`
pub(crate) async fn list<S: Store>(
    State(state): State<ApiState<S>>,
    caller: Caller,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let params = Params::parse(query, &["namespace", "phase", "limit", "cursor"])?;
    let (phase, limit) = match (params.phase("phase"), params.limit("limit")) {
        (Ok(phase), Ok(limit)) => (phase, limit),
        (phase, limit) => {
            let errors = [phase.err(), limit.err()].into_iter().flatten().collect();
            return Err(ApiError::invalid(errors));
        }
    };
    let query = ListQuery {
        namespace: params.text("namespace"),
        phase,
        cursor: params.typed("cursor"),
        limit,
    };
    let page = match caller.namespaces() {
        None => state.store.list(&query).await?,
        Some(_) => visible_page(&state.store, &caller, query).await?,
    };
    let mut items = Vec::with_capacity(page.items.len());
    for stored in page.items {
        items.push(with_owner(&state.store, stored).await?);
    }
    Ok(Json(RolloutPage {
        items,
        next_cursor: page.next_cursor,
    })
    .into_response())
}

/// A page of the rollouts a caller limited to namespaces sees: the store's pages, filtered,
/// until one holds something (or the list ends), so a page may be shorter than the limit but is
/// empty only at the end; the cursor stays the store's.
async fn visible_page<S: Store>(
    store: &S,
    caller: &Caller,
    mut query: ListQuery,
) -> Result<weir_store::Page<weir_store::StoredRollout>, ApiError> {
    if let Some(namespace) = &query.namespace
        && !caller.sees(namespace)
    {
        return Ok(weir_store::Page {
            items: Vec::new(),
            next_cursor: None,
        });
    }
    if let Some([only]) = caller.namespaces() {
        query.namespace = Some(only.clone());
        return Ok(store.list(&query).await?);
    }
    loop {
        let mut page = store.list(&query).await?;
        page.items
            .retain(|stored| caller.sees(&stored.key.namespace));
        match &page.next_cursor {
            Some(next) if page.items.is_empty() && query.cursor.as_ref() != Some(next) => {
                query.cursor = Some(next.clone());
            }
            _ => return Ok(page),
        }
    }
}

// === get ===

/// `GET /api/v1/rollouts/{namespace}/{name}`
pub(crate) async fn get_one<S: Store>(
    State(state): State<ApiState<S>>,
    RolloutPath(key): RolloutPath,
) -> Result<Response, ApiError> {
    let stored = state
        .store
        .get(&key)
        .await?
        .ok_or_else(|| not_found(&key))?;
    let version = stored.version;
    Ok(with_etag(
        StatusCode::OK,
        version,
        with_owner(&state.store, stored).await?,
    ))
}

/// The view of a rollout with its owner, when the store is shared by several instances.
async fn with_owner<S: Store>(store: &S, stored: StoredRollout) -> Result<RolloutView, ApiError> {
    let owner = owner_view(store, &stored.key).await?;
    let mut view = RolloutView::from(stored);
    view.owner = owner;
    Ok(view)
}

/// Who owns rollout `key` now (`None` for a store no other instance shares).
pub(crate) async fn owner_view<S: Store>(
    store: &S,
    key: &RolloutKey,
) -> Result<Option<crate::types::OwnerView>, ApiError> {
    let owner = store.owner_of(key).await?;
    Ok(owner.map(|lease| crate::types::OwnerView::of(lease, Timestamp::now())))
}

// === apply ===

/// `POST /api/v1/rollouts`
pub(crate) async fn create<S: Store>(
    State(state): State<ApiState<S>>,
    caller: Caller,
    query: QueryPairs,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    apply(state, &caller, None, query, headers, body).await
}

/// `PUT /api/v1/rollouts/{namespace}/{name}`
pub(crate) async fn put<S: Store>(
    State(state): State<ApiState<S>>,
    caller: Caller,
    RolloutPath(key): RolloutPath,
    query: QueryPairs,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    apply(state, &caller, Some(key), query, headers, body).await
}

async fn apply<S: Store>(
    state: ApiState<S>,
    caller: &Caller,
    path: Option<RolloutKey>,
    query: QueryPairs,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let params = Params::parse(query, &["expectedVersion"])?;
    let expected_version = params.number("expectedVersion").map_err(ApiError::field)?;
    let format = input::format(&headers, true, None)?;
    let bytes = input::body(body)?;
    let precondition = input::precondition(&headers, expected_version)?;
    let (mut rollout, warnings) = rollout_of(&bytes, format)?;

    if let Some(key) = &path {
        input::match_path(&mut rollout.metadata, &key.namespace, &key.name, "rollout")?;
    }

    let key = RolloutKey::of(&rollout);
    caller.may_write(&key.namespace)?;
    let expected_version = match precondition {
        Precondition::None => None,
        Precondition::Version(version) => Some(version),
        Precondition::Exists => match state.store.get(&key).await? {
            Some(stored) => Some(stored.version),
            None => {
                return Err(ApiError::Conflict(format!(
                    "rollout {key} does not exist (If-Match: * requires that it does)"
                )));
            }
        },
    };
    // With a token, the history names who applied the change (an open server knows no one).
    let actor = caller.0.as_ref().map(|principal| principal.name.clone());
    let applied = state
        .engine
        .apply_by(rollout, expected_version, actor)
        .await?;
    let status = match applied.outcome {
        ApplyOutcome::Created => StatusCode::CREATED,
        ApplyOutcome::Updated | ApplyOutcome::Unchanged => StatusCode::OK,
    };
    let mut response = with_etag(
        status,
        applied.rollout.version,
        Applied {
            rollout: RolloutView::from(applied.rollout),
            outcome: applied.outcome,
            warnings,
        },
    );
    if status == StatusCode::CREATED
        && let Ok(location) =
            HeaderValue::from_str(&format!("/api/v1/rollouts/{}/{}", key.namespace, key.name))
    {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// One Rollout (or a Flagger Canary, converted) from a body, validated.
fn rollout_of(bytes: &[u8], format: Format) -> Result<(Rollout, Vec<Warning>), ApiError> {
    let mut values = input::documents(bytes, format)?;
    let mut value = match values.len() {
        1 => values.remove(0),
        0 => {
            return Err(ApiError::field(FieldError::new(
                "(document)",
                "is empty: send one Rollout (or a Flagger Canary)",
            )));
        }
        count => {
            return Err(ApiError::field(FieldError::new(
                "(document)",
                format!(
                    "holds {count} documents: send one Rollout (or a Flagger Canary) per request"
                ),
            )));
        }
    };
    let is_weir = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_some_and(|api_version| api_version.starts_with("weir.dev/"));
    if is_weir && let Value::Object(map) = &mut value {
        for field in SERVER_FIELDS {
            map.remove(field);
        }
    }
    let loaded = load_value(&value).map_err(|refused| {
        let mut error = ApiError::invalid(refused.errors);
        if let ApiError::Invalid { message, .. } = &mut error {
            *message = format!("{} is invalid: {message}", refused.subject);
        }
        error
    })?;
    match loaded.document {
        Document::Rollout(rollout) => Ok((*rollout, loaded.warnings)),
        flag @ Document::Flag(_) => Err(ApiError::field(FieldError::with_value(
            "kind",
            format!("{:?}", flag.describe()),
            "this endpoint applies a Rollout; flags are applied with `weir flag` / POST \
             /api/v1/flags",
        ))),
        other => Err(ApiError::field(FieldError::with_value(
            "kind",
            format!("{:?}", other.describe()),
            "this endpoint applies a Rollout (or a Flagger Canary); metric templates, alert \
             providers and secrets are given to `weir serve --catalog`",
        ))),
    }
}

// === delete ===

/// `DELETE /api/v1/rollouts/{namespace}/{name}`, with an optional `If-Match` (or
/// `?expectedVersion=`): only the version the client read is deleted.
pub(crate) async fn delete<S: Store>(
    State(state): State<ApiState<S>>,
    RolloutPath(key): RolloutPath,
    query: QueryPairs,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let params = Params::parse(query, &["expectedVersion"])?;
    let expected_version = params.number("expectedVersion").map_err(ApiError::field)?;
    let expected_version = match input::precondition(&headers, expected_version)? {
        Precondition::None | Precondition::Exists => None,
        Precondition::Version(0) => return Err(delete_of_nothing("rollout")),
        Precondition::Version(version) => Some(version),
    };
    state.engine.delete(key, expected_version).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `expectedVersion=0` (or `If-None-Match: *`) on a delete: "only if it does not exist" cannot be
/// honoured by a delete; versions start at 1.
pub(crate) fn delete_of_nothing(what: &str) -> ApiError {
    ApiError::field(FieldError::with_value(
        "expectedVersion",
        "0",
        format!(
            "asks that the {what} not exist, which a delete cannot honour: give the version to \
             delete (1 or more, the ETag of a GET)"
        ),
    ))
}

// === commands ===

/// `POST /api/v1/rollouts/{namespace}/{name}/commands` with `{"command": "pause", "actor": "..."}`
/// (or `{"command": "open-gate", "gate": {"type": "confirm-promotion", "hook": "approval"}}`,
/// `{"command": "stop", "rollback": true}`, or `{"command": "promote", "step": true}`).
pub(crate) async fn command<S: Store>(
    State(state): State<ApiState<S>>,
    caller: Caller,
    RolloutPath(key): RolloutPath,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    input::format(&headers, false, Some(Format::Json))?;
    let bytes = input::body(body)?;
    let (command, actor) = command_of(&bytes)?;
    let actor = caller.actor(input::actor(&headers, actor)?);
    let after = state.engine.command(key, command, actor).await?;
    Ok(with_etag(
        StatusCode::OK,
        after.version,
        RolloutView::from(after),
    ))
}

/// The commands that take a `gate`.
const GATE_COMMANDS: [&str; 2] = ["open-gate", "close-gate"];

/// Every command name, for messages.
fn command_names() -> Vec<&'static str> {
    Command::SIMPLE
        .iter()
        .map(Command::as_str)
        .chain(GATE_COMMANDS)
        .collect()
}

/// Reads `{"command": ..., "actor"?: ..., "gate"?: {"type"?, "hook"?}, "rollback"?: bool,
/// "step"?: bool}`,
/// naming every problem.
fn command_of(bytes: &[u8]) -> Result<(Command, Option<String>), ApiError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|error| {
        ApiError::field(FieldError::new(
            "(body)",
            format!("is not valid JSON: {error}"),
        ))
    })?;
    let Value::Object(map) = value else {
        return Err(ApiError::field(FieldError::new(
            "(body)",
            format!(
                "is a {}: send {{\"command\": \"pause\", \"actor\": \"...\"}}",
                weir_core::document::json_type_name(&value)
            ),
        )));
    };
    let names = command_names().join(", ");
    let mut errors = Vec::new();
    let name = match map.get("command") {
        None => {
            errors.push(FieldError::missing("command", format!("one of {names}")));
            None
        }
        Some(Value::String(name)) => {
            if command_names().contains(&name.as_str()) {
                Some(name.as_str())
            } else {
                errors.push(FieldError::with_value(
                    "command",
                    format!("{name:?}"),
                    format!("one of {names}"),
                ));
                None
            }
        }
        Some(other) => {
            errors.push(FieldError::with_value(
                "command",
                other,
                format!("a string, one of {names}"),
            ));
            None
        }
    };
    let actor = match map.get("actor") {
        None | Some(Value::Null) => None,
        Some(Value::String(actor)) => Some(actor.clone()),
        Some(other) => {
            errors.push(FieldError::with_value("actor", other, "must be a string"));
            None
        }
    };
    let takes_gate = name.is_some_and(|name| GATE_COMMANDS.contains(&name));
    let gate = match map.get("gate") {
        None | Some(Value::Null) if takes_gate => {
            errors.push(FieldError::missing(
                "gate",
                "{\"type\": a gate type, \"hook\": a hook's name} (either or both)",
            ));
            None
        }
        None | Some(Value::Null) => None,
        Some(_) if name.is_some() && !takes_gate => {
            errors.push(FieldError::new(
                "gate",
                format!("only {} take a gate", GATE_COMMANDS.join(" and ")),
            ));
            None
        }
        Some(gate) => gate_of(gate, &mut errors),
    };
    let rollback = match map.get("rollback") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(rollback)) if name.is_none_or(|name| name == "stop") => *rollback,
        Some(Value::Bool(_)) => {
            errors.push(FieldError::new("rollback", "only stop takes rollback"));
            false
        }
        Some(other) => {
            errors.push(FieldError::with_value(
                "rollback",
                other,
                "true (everyone back to the primary) or false (the weights stay)",
            ));
            false
        }
    };
    let step = match map.get("step") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(step)) if name.is_none_or(|name| name == "promote") => *step,
        Some(Value::Bool(_)) => {
            errors.push(FieldError::new("step", "only promote takes step"));
            false
        }
        Some(other) => {
            errors.push(FieldError::with_value(
                "step",
                other,
                "true (the plan's next step only) or false (promote to the end)",
            ));
            false
        }
    };
    for field in map.keys() {
        if !["command", "actor", "gate", "rollback", "step"].contains(&field.as_str()) {
            errors.push(FieldError::new(
                field.clone(),
                "unknown field; a command has command, actor, (for open-gate and close-gate) gate, (for stop) rollback and (for promote) step",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid(errors));
    }
    let command = match (name, gate) {
        (Some("open-gate"), Some(gate)) => Command::OpenGate(gate),
        (Some("close-gate"), Some(gate)) => Command::CloseGate(gate),
        (Some("stop"), _) => Command::Stop { rollback },
        (Some("promote"), _) if step => Command::PromoteStep,
        (Some(name), _) => match Command::SIMPLE
            .iter()
            .find(|command| command.as_str() == name)
        {
            Some(command) => command.clone(),
            None => {
                return Err(ApiError::field(FieldError::with_value(
                    "command",
                    format!("{name:?}"),
                    format!("one of {names}"),
                )));
            }
        },
        (None, _) => {
            return Err(ApiError::field(FieldError::missing(
                "command",
                format!("one of {names}"),
            )));
        }
    };
    Ok((command, actor))
}

/// Reads a command's `gate`: `{"type"?: a gate type, "hook"?: a hook's name}`, at least one.
fn gate_of(value: &Value, errors: &mut Vec<FieldError>) -> Option<GateRef> {
    let types = HookType::GATES.map(HookType::as_str).join(", ");
    let Value::Object(map) = value else {
        errors.push(FieldError::with_value(
            "gate",
            value,
            "an object: {\"type\": a gate type, \"hook\": a hook's name}",
        ));
        return None;
    };
    let before = errors.len();
    let hook_type = match map.get("type") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => {
            let found = HookType::GATES
                .into_iter()
                .find(|hook_type| hook_type.as_str() == name);
            if found.is_none() {
                errors.push(FieldError::with_value(
                    "gate.type",
                    format!("{name:?}"),
                    format!("one of {types}"),
                ));
            }
            found
        }
        Some(other) => {
            errors.push(FieldError::with_value(
                "gate.type",
                other,
                format!("a string, one of {types}"),
            ));
            None
        }
    };
    let hook = match map.get("hook") {
        None | Some(Value::Null) => None,
        Some(Value::String(hook)) if !hook.trim().is_empty() => Some(hook.clone()),
        Some(other) => {
            errors.push(FieldError::with_value(
                "gate.hook",
                other,
                "a webhook's name (a non-empty string)",
            ));
            None
        }
    };
    for field in map.keys() {
        if field != "type" && field != "hook" {
            errors.push(FieldError::new(
                format!("gate.{field}"),
                "unknown field; a gate has type and hook",
            ));
        }
    }
    if errors.len() > before {
        return None;
    }
    if hook_type.is_none() && hook.is_none() {
        errors.push(FieldError::missing(
            "gate",
            format!("a type ({types}), a hook's name, or both"),
        ));
        return None;
    }
    Some(GateRef { hook_type, hook })
}

// === events ===

/// `GET /api/v1/rollouts/{namespace}/{name}/events?after=&limit=`
pub(crate) async fn events<S: Store>(
    State(state): State<ApiState<S>>,
    RolloutPath(key): RolloutPath,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let params = Params::parse(query, &["after", "limit"])?;
    let (after, limit) = match (params.number("after"), params.limit("limit")) {
        (Ok(after), Ok(limit)) => (after.unwrap_or(0), limit),
        (after, limit) => {
            let errors = [after.err(), limit.err()].into_iter().flatten().collect();
            return Err(ApiError::invalid(errors));
        }
    };
    if state.store.get(&key).await?.is_none() {
        return Err(not_found(&key));
    }
    let items = state.store.events(&key, after, limit).await?;
    let next_after = if items.len() >= limit {
        items.last().map(|event| event.seq)
    } else {
        None
    };
    Ok(Json(EventPage { items, next_after }).into_response())
}

#[cfg(test)]
mod tests;
