//! OpenFeature Remote Evaluation Protocol (OFREP): any OpenFeature SDK with an OFREP provider
//! reads weir's flags.
//!
//! | route | what |
//! |---|---|
//! | `POST /ofrep/v1/evaluate/flags/{key}` | one flag of namespace `default` |
//! | `POST /ofrep/v1/evaluate/flags` | every flag of namespace `default` (`ETag`, 304 on an `If-None-Match` that matches it, weakly compared, or is `*`) |
//! | `POST /ns/{namespace}/ofrep/v1/evaluate/flags[/{key}]` | the same for another namespace: give an SDK the base URL `http://HOST/ns/NAMESPACE` |
//!
//! The body is `{"context": {"targetingKey": ..., ATTRIBUTE: ...}}` (the whole body, or the
//! context, may be absent). A success is `{key, reason, variant, value, metadata}`; a failure
//! `{key, errorCode, errorDetails}`: 404 `FLAG_NOT_FOUND`, 400 `PARSE_ERROR`,
//! `TARGETING_KEY_MISSING` or `INVALID_CONTEXT`, 413 `GENERAL` for a body over the limit. An
//! empty `targetingKey` is no key: a flag that splits by it answers `TARGETING_KEY_MISSING`. Evaluations read the in-memory snapshot of
//! [`weir_flags::Flags`], never the store, and count each result as an exposure of its variant
//! (a relaxed atomic add on the snapshot's entry; the bulk answer counts every flag it
//! evaluates, a 304 nothing).

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use weir_core::flag::{EvaluationContext, EvaluationError};
use weir_flags::{Flags, Snapshot};
use weir_store::FlagStore;

use crate::auth::Caller;

/// The namespace of the routes without `/ns/{namespace}`.
pub const DEFAULT_NAMESPACE: &str = "default";

/// `POST /ofrep/v1/evaluate/flags/{key}`
pub(crate) async fn evaluate_default<F: FlagStore>(
    State(flags): State<Flags<F>>,
    caller: Caller,
    Path(key): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match read(body, Some(&key)) {
        Ok(body) => body,
        Err(refused) => return *refused,
    };
    evaluate_one(
        &visible(&flags, &caller, DEFAULT_NAMESPACE),
        DEFAULT_NAMESPACE,
        &key,
        &body,
    )
}

/// `POST /ns/{namespace}/ofrep/v1/evaluate/flags/{key}`
pub(crate) async fn evaluate_in<F: FlagStore>(
    State(flags): State<Flags<F>>,
    caller: Caller,
    Path((namespace, key)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match read(body, Some(&key)) {
        Ok(body) => body,
        Err(refused) => return *refused,
    };
    evaluate_one(
        &visible(&flags, &caller, &namespace),
        &namespace,
        &key,
        &body,
    )
}

/// `POST /ofrep/v1/evaluate/flags`
pub(crate) async fn bulk_default<F: FlagStore>(
    State(flags): State<Flags<F>>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match read(body, None) {
        Ok(body) => body,
        Err(refused) => return *refused,
    };
    evaluate_all(
        &visible(&flags, &caller, DEFAULT_NAMESPACE),
        DEFAULT_NAMESPACE,
        &headers,
        &body,
    )
}

/// `POST /ns/{namespace}/ofrep/v1/evaluate/flags`
pub(crate) async fn bulk_in<F: FlagStore>(
    State(flags): State<Flags<F>>,
    caller: Caller,
    Path(namespace): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match read(body, None) {
        Ok(body) => body,
        Err(refused) => return *refused,
    };
    evaluate_all(
        &visible(&flags, &caller, &namespace),
        &namespace,
        &headers,
        &body,
    )
}

/// The request's body, or OFREP's error answer when it cannot be read: 413 (`GENERAL`, naming
/// the limit) when it is larger than the server reads, 400 `PARSE_ERROR` otherwise. `key`: the
/// flag of a single evaluation (its answers name it).
fn read(body: Result<Bytes, BytesRejection>, key: Option<&str>) -> Result<Bytes, Box<Response>> {
    body.map_err(|rejection| {
        let (status, code, details) = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                "GENERAL",
                format!(
                    "the body is larger than {}, the most an evaluation reads",
                    crate::error::bytes_in_words(crate::MAX_BODY_BYTES)
                ),
            )
        } else {
            (
                StatusCode::BAD_REQUEST,
                "PARSE_ERROR",
                format!("the body cannot be read: {}", rejection.body_text()),
            )
        };
        Box::new(match key {
            Some(key) => failure(status, key, code, &details),
            None => (
                status,
                Json(json!({"errorCode": code, "errorDetails": details})),
            )
                .into_response(),
        })
    })
}

/// The flags `caller` may evaluate in `namespace`: none outside its namespaces (as if the
/// namespace were empty, so an OFREP client learns nothing of it).
fn visible<F: FlagStore>(
    flags: &Flags<F>,
    caller: &Caller,
    namespace: &str,
) -> std::sync::Arc<Snapshot> {
    if caller.sees(namespace) {
        flags.snapshot()
    } else {
        std::sync::Arc::new(Snapshot::default())
    }
}

fn evaluate_one(snapshot: &Snapshot, namespace: &str, key: &str, body: &[u8]) -> Response {
    let context = match context_of(body) {
        Ok(context) => context,
        Err((code, details)) => return failure(StatusCode::BAD_REQUEST, key, code, &details),
    };
    let Some(entry) = snapshot.get(namespace, key) else {
        return failure(
            StatusCode::NOT_FOUND,
            key,
            "FLAG_NOT_FOUND",
            &format!("no flag {key:?} in namespace {namespace:?}"),
        );
    };
    match entry.compiled.evaluate(&context) {
        Ok(evaluation) => {
            entry.count_exposure(&evaluation.variant);
            Json(success(key, &evaluation, &entry.stored.flag.spec.metadata)).into_response()
        }
        Err(error) => {
            let (code, details) = error_code(&error);
            failure(StatusCode::BAD_REQUEST, key, code, &details)
        }
    }
}

fn evaluate_all(
    snapshot: &Snapshot,
    namespace: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    if !is_namespace(namespace) {
        // Not a name any namespace can have: an answer of "no flags" would hide the mistake.
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({
                "errorCode": "GENERAL",
                "errorDetails": format!(
                    "{namespace:?} is not a namespace: at most 63 lowercase letters, digits and \
                     '-', starting and ending with a letter or digit"
                ),
            })),
        )
            .into_response();
    }
    let context = match context_of(body) {
        Ok(context) => context,
        Err((code, details)) => {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"errorCode": code, "errorDetails": details})),
            )
                .into_response();
        }
    };
    // The results depend on the flags and on the context: the tag covers both.
    let mut context_text = String::from_utf8_lossy(body).into_owned();
    context_text.push_str(&snapshot.etag(namespace));
    let tag = format!(
        "\"{}\"",
        weir_core::revision::of_definition(&Value::String(context_text))
    );
    let unchanged = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|given| none_match_fails(given, &tag));
    let tag_header = HeaderValue::from_str(&tag).ok();
    if unchanged {
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        if let Some(tag) = tag_header {
            response.headers_mut().insert(header::ETAG, tag);
        }
        return response;
    }
    let flags: Vec<Value> = snapshot
        .namespace(namespace)
        .map(|entry| {
            let key = entry.stored.key.key.as_str();
            match entry.compiled.evaluate(&context) {
                Ok(evaluation) => {
                    entry.count_exposure(&evaluation.variant);
                    success(key, &evaluation, &entry.stored.flag.spec.metadata)
                }
                Err(error) => {
                    let (code, details) = error_code(&error);
                    json!({"key": key, "errorCode": code, "errorDetails": details})
                }
            }
        })
        .collect();
    let mut response = Json(json!({"flags": flags})).into_response();
    if let Some(tag) = tag_header {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

/// Whether an `If-None-Match` value matches the current entity tag `tag`, so the answer is 304
/// (RFC 9110, 13.1.2): `*` matches any; otherwise each listed tag is compared weakly, a `W/`
/// prefix ignored on either side.
fn none_match_fails(given: &str, tag: &str) -> bool {
    let opaque = |text: &str| {
        let text = text.trim();
        text.strip_prefix("W/").unwrap_or(text).to_string()
    };
    let tag = opaque(tag);
    given.split(',').any(|one| {
        let one = one.trim();
        one == "*" || opaque(one) == tag
    })
}

/// A namespace's name: a DNS label, as weir-core's validation requires of every document's
/// namespace (and as the OpenAPI document's `namespace` parameter says).
fn is_namespace(text: &str) -> bool {
    (1..=63).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// A successful evaluation; `metadata` is the flag's `spec.metadata` (OFREP's flag metadata).
fn success(
    key: &str,
    evaluation: &weir_core::flag::Evaluation,
    metadata: &std::collections::BTreeMap<String, Value>,
) -> Value {
    json!({
        "key": key,
        "reason": evaluation.reason.as_str(),
        "variant": evaluation.variant,
        "value": evaluation.value,
        "metadata": metadata,
    })
}

fn failure(status: StatusCode, key: &str, code: &str, details: &str) -> Response {
    (
        status,
        Json(json!({"key": key, "errorCode": code, "errorDetails": details})),
    )
        .into_response()
}

fn error_code(error: &EvaluationError) -> (&'static str, String) {
    match error {
        EvaluationError::TargetingKeyMissing(details) => ("TARGETING_KEY_MISSING", details.clone()),
        EvaluationError::InvalidContext(details) => ("INVALID_CONTEXT", details.clone()),
    }
}

/// The evaluation context of a request body: `{"context": {...}}`, or nothing at all. A body
/// that is not JSON is a `PARSE_ERROR`; a context of the wrong shape `INVALID_CONTEXT`.
fn context_of(body: &[u8]) -> Result<EvaluationContext, (&'static str, String)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(EvaluationContext::default());
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|error| ("PARSE_ERROR", format!("the body is not JSON: {error}")))?;
    let invalid = |details: String| ("INVALID_CONTEXT", details);
    let Value::Object(mut body) = value else {
        return Err(invalid(
            "the body must be a JSON object, {\"context\": {...}}".into(),
        ));
    };
    let mut attributes = match body.remove("context") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(context)) => context,
        Some(_) => return Err(invalid("context must be a JSON object".into())),
    };
    let targeting_key = match attributes.remove("targetingKey") {
        None | Some(Value::Null) => None,
        // An empty key identifies no one: where a flag needs a key (a split by targetingKey),
        // the answer is TARGETING_KEY_MISSING, never a bucket shared by every such client.
        Some(Value::String(key)) if key.trim().is_empty() => None,
        Some(Value::String(key)) => Some(key),
        Some(other) => {
            return Err(invalid(format!(
                "context.targetingKey must be a string, found {other}"
            )));
        }
    };
    Ok(EvaluationContext {
        targeting_key,
        attributes,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{context_of, none_match_fails};

    #[test]
    fn if_none_match_compares_weakly_and_star_matches_anything() {
        let tag = "\"abc\"";
        for given in [
            "\"abc\"",
            "W/\"abc\"",
            "*",
            "\"x\", W/\"abc\"",
            " \"x\" ,\"abc\" ",
        ] {
            assert!(none_match_fails(given, tag), "{given}");
        }
        for given in ["\"abd\"", "W/\"x\"", "abc", "", "\"abc"] {
            assert!(!none_match_fails(given, tag), "{given}");
        }
    }

    #[test]
    fn an_empty_targeting_key_is_no_key() {
        for body in [
            r#"{"context":{"targetingKey":""}}"#,
            r#"{"context":{"targetingKey":" "}}"#,
        ] {
            let context = context_of(body.as_bytes()).unwrap();
            assert_eq!(context.targeting_key, None, "{body}");
            assert!(!context.attributes.contains_key("targetingKey"), "{body}");
        }
        let keyed = context_of(br#"{"context":{"targetingKey":"a"}}"#).unwrap();
        assert_eq!(keyed.targeting_key.as_deref(), Some("a"));
    }
}
