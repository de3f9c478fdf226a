//! Reading requests: path, query parameters, preconditions, bodies. Every problem becomes an
//! [`ApiError`] naming what was wrong, never a rejection in plain text.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde_json::Value;
use weir_core::FieldError;
use weir_core::model::Phase;
use weir_store::{DEFAULT_PAGE, MAX_PAGE, RolloutKey};

use crate::error::ApiError;

// === path ===

/// `{namespace}/{name}` from the path.
pub(crate) struct RolloutPath(pub(crate) RolloutKey);

impl<S: Send + Sync> FromRequestParts<S> for RolloutPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<(String, String)>::from_request_parts(parts, state).await {
            Ok(Path((namespace, name))) => Ok(RolloutPath(RolloutKey::new(namespace, name))),
            Err(rejection) => Err(ApiError::field(FieldError::new(
                "(path)",
                rejection.body_text(),
            ))),
        }
    }
}

// === query ===

/// Query parameters, each at most once (unless the route reads it as a list), only those a
/// route knows.
pub(crate) struct Params(BTreeMap<String, Vec<String>>);

impl Params {
    /// Reads the query string, refusing unknown and repeated parameters (a misspelt filter
    /// must not silently list everything).
    pub(crate) fn parse(
        query: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
        known: &[&str],
    ) -> Result<Params, ApiError> {
        Params::parse_with_lists(query, known, &[])
    }

    /// Like [`Params::parse`], and the parameters in `lists` may be given more than once
    /// (`?flag=a&flag=b`, read with [`Params::list`]).
    pub(crate) fn parse_with_lists(
        query: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
        known: &[&str],
        lists: &[&str],
    ) -> Result<Params, ApiError> {
        let Query(pairs) = query.map_err(|rejection| {
            ApiError::field(FieldError::new("(query)", rejection.body_text()))
        })?;
        let mut errors = Vec::new();
        let mut params: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in pairs {
            if !known.contains(&name.as_str()) {
                errors.push(FieldError::with_value(
                    name,
                    format!("{value:?}"),
                    format!(
                        "unknown query parameter; this route reads: {}",
                        known.join(", ")
                    ),
                ));
            } else {
                match params.entry(name) {
                    Entry::Occupied(mut entry) if lists.contains(&entry.key().as_str()) => {
                        entry.get_mut().push(value);
                    }
                    Entry::Occupied(entry) => errors.push(FieldError::new(
                        entry.key().clone(),
                        "is given more than once",
                    )),
                    Entry::Vacant(entry) => {
                        entry.insert(vec![value]);
                    }
                }
            }
        }
        if errors.is_empty() {
            Ok(Params(params))
        } else {
            Err(ApiError::invalid(errors))
        }
    }

    /// A parameter of a type, as given: an empty value is a value (and an error for a number,
    /// a name from a list or a cursor), so that what the OpenAPI document says is exactly what
    /// is accepted.
    pub(crate) fn typed(&self, name: &str) -> Option<String> {
        self.0.get(name).and_then(|values| values.first()).cloned()
    }

    /// A text parameter (a filter); empty counts as absent.
    pub(crate) fn text(&self, name: &str) -> Option<String> {
        self.0
            .get(name)
            .and_then(|values| values.first())
            .filter(|value| !value.is_empty())
            .cloned()
    }

    /// A list parameter: every value given, each split at commas, trimmed, empty items dropped
    /// (`?flag=a,b&flag=c` is `[a, b, c]`).
    pub(crate) fn list(&self, name: &str) -> Vec<String> {
        self.0
            .get(name)
            .into_iter()
            .flatten()
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// A non-negative whole number: digits only (`u64::from_str` alone would take "+5").
    pub(crate) fn number(&self, name: &str) -> Result<Option<u64>, FieldError> {
        match self.typed(name) {
            None => Ok(None),
            Some(value) => value
                .bytes()
                .all(|byte| byte.is_ascii_digit())
                .then(|| value.parse::<u64>().ok())
                .flatten()
                .map(Some)
                .ok_or_else(|| {
                    FieldError::with_value(
                        name,
                        format!("{value:?}"),
                        format!("must be a whole number from 0 to {}", u64::MAX),
                    )
                }),
        }
    }

    /// A page size: absent or 0 is [`DEFAULT_PAGE`], more than [`MAX_PAGE`] is refused (as the
    /// OpenAPI document says), so that a client never silently gets fewer than it asked for.
    pub(crate) fn limit(&self, name: &str) -> Result<usize, FieldError> {
        match self.number(name)? {
            None | Some(0) => Ok(DEFAULT_PAGE),
            Some(limit) => usize::try_from(limit)
                .ok()
                .filter(|limit| *limit <= MAX_PAGE)
                .ok_or_else(|| {
                    FieldError::with_value(
                        name,
                        limit.to_string(),
                        format!("at most {MAX_PAGE} (0 or absent: {DEFAULT_PAGE})"),
                    )
                }),
        }
    }

    /// An offset cursor (the flags' and flag rollouts' lists): the digits of a `nextCursor`.
    pub(crate) fn offset(&self, name: &str) -> Result<usize, FieldError> {
        match self.typed(name) {
            None => Ok(0),
            Some(cursor) => cursor
                .bytes()
                .all(|byte| byte.is_ascii_digit())
                .then(|| cursor.parse::<usize>().ok())
                .flatten()
                .ok_or_else(|| {
                    FieldError::with_value(
                        name,
                        format!("{cursor:?}"),
                        "the nextCursor of a previous page",
                    )
                }),
        }
    }

    /// A phase, by name (any case).
    pub(crate) fn phase(&self, name: &str) -> Result<Option<Phase>, FieldError> {
        let Some(value) = self.typed(name) else {
            return Ok(None);
        };
        PHASES
            .iter()
            .copied()
            .find(|phase| phase_name(*phase).eq_ignore_ascii_case(&value))
            .map(Some)
            .ok_or_else(|| {
                let names: Vec<String> = PHASES.iter().map(|phase| phase_name(*phase)).collect();
                FieldError::with_value(
                    name,
                    format!("{value:?}"),
                    format!("one of {}", names.join(", ")),
                )
            })
    }
}

/// Every phase, for parsing and messages.
const PHASES: [Phase; 12] = Phase::ALL;

/// A phase's name as serialized.
fn phase_name(phase: Phase) -> String {
    match serde_json::to_value(phase) {
        Ok(Value::String(name)) => name,
        _ => format!("{phase:?}"),
    }
}

// === preconditions ===

/// What the client expects to be stored, as `weir_store::Store` takes it.
#[derive(Debug)]
pub(crate) enum Precondition {
    /// Whatever is stored.
    None,
    /// Exactly this version (`Some(0)`: must not exist yet).
    Version(u64),
    /// `If-Match: *`: must exist, any version.
    Exists,
}

/// Reads `If-Match` (an ETag from a GET: `"7"`; a bare `7` and `*` are accepted too),
/// `If-None-Match: *` (create only) and `?expectedVersion=`; they must agree.
pub(crate) fn precondition(
    headers: &HeaderMap,
    expected_version: Option<u64>,
) -> Result<Precondition, ApiError> {
    let mut found: Vec<(&str, Precondition)> = Vec::new();
    if let Some(value) = single_header(headers, header::IF_MATCH)? {
        let tag = value.trim();
        let precondition = if tag == "*" {
            Precondition::Exists
        } else {
            let digits = tag
                .strip_prefix('"')
                .and_then(|tag| tag.strip_suffix('"'))
                .unwrap_or(tag);
            match digits.parse::<u64>() {
                Ok(version) if version > 0 => Precondition::Version(version),
                _ => {
                    return Err(ApiError::field(FieldError::with_value(
                        "If-Match",
                        format!("{tag:?}"),
                        "must be the ETag of a GET (a version such as \"7\") or *",
                    )));
                }
            }
        };
        found.push(("If-Match", precondition));
    }
    if let Some(value) = single_header(headers, header::IF_NONE_MATCH)? {
        if value.trim() != "*" {
            return Err(ApiError::field(FieldError::with_value(
                "If-None-Match",
                format!("{value:?}"),
                "only * (create, never update) is supported on writes",
            )));
        }
        found.push(("If-None-Match", Precondition::Version(0)));
    }
    if let Some(version) = expected_version {
        found.push(("expectedVersion", Precondition::Version(version)));
    }
    let mut chosen = Precondition::None;
    let mut chosen_from = "";
    for (from, precondition) in found {
        let agrees = match (&chosen, &precondition) {
            (Precondition::None, _) => true,
            (Precondition::Version(a), Precondition::Version(b)) => a == b,
            (Precondition::Exists, Precondition::Exists) => true,
            (Precondition::Exists, Precondition::Version(version))
            | (Precondition::Version(version), Precondition::Exists) => *version > 0,
            (_, Precondition::None) => true,
        };
        if !agrees {
            // Well formed, but no stored version can satisfy both: a failed precondition,
            // which this API answers with 409 like any other.
            return Err(ApiError::Conflict(format!(
                "{from} contradicts {chosen_from}: no stored version can satisfy both"
            )));
        }
        // A specific version is stronger than "exists".
        if matches!(chosen, Precondition::None | Precondition::Exists) {
            chosen = precondition;
            chosen_from = from;
        }
    }
    Ok(chosen)
}

fn single_header(
    headers: &HeaderMap,
    name: header::HeaderName,
) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(&name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::field(FieldError::new(
            name.as_str(),
            "is given more than once",
        )));
    }
    value
        .to_str()
        .map(|value| Some(value.to_string()))
        .map_err(|_| ApiError::field(FieldError::new(name.as_str(), "is not visible ASCII")))
}

/// The actor recorded with a command: the body's, else `X-Weir-Actor`, else `api`.
pub(crate) fn actor(headers: &HeaderMap, from_body: Option<String>) -> Result<String, ApiError> {
    let actor = match from_body.filter(|actor| !actor.trim().is_empty()) {
        Some(actor) => actor,
        None => single_header(headers, header::HeaderName::from_static("x-weir-actor"))?
            .filter(|actor| !actor.trim().is_empty())
            .unwrap_or_else(|| "api".into()),
    };
    if actor.chars().count() > MAX_ACTOR_CHARS {
        return Err(ApiError::field(FieldError::new(
            "actor",
            format!("is longer than {MAX_ACTOR_CHARS} characters"),
        )));
    }
    Ok(actor.trim().to_string())
}

use crate::types::MAX_ACTOR_CHARS;

// === bodies ===

/// The body formats the API reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    Yaml,
}

/// The body's format from `Content-Type`; `absent_is` when there is none.
pub(crate) fn format(
    headers: &HeaderMap,
    accepts_yaml: bool,
    absent_is: Option<Format>,
) -> Result<Format, ApiError> {
    let accepted = if accepts_yaml {
        "application/json or application/yaml"
    } else {
        "application/json"
    };
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return absent_is.ok_or_else(|| {
            ApiError::UnsupportedMediaType(format!("no Content-Type: send {accepted}"))
        });
    };
    let text = value.to_str().unwrap_or("(not text)");
    let essence = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let format = match essence.as_str() {
        "application/json" => Some(Format::Json),
        json if json.starts_with("application/") && json.ends_with("+json") => Some(Format::Json),
        "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml" if accepts_yaml => {
            Some(Format::Yaml)
        }
        _ => None,
    };
    format.ok_or_else(|| {
        ApiError::UnsupportedMediaType(format!(
            "Content-Type {text:?} is not supported: send {accepted}"
        ))
    })
}

/// The body, or 413 when it is over the limit of documents ([`crate::MAX_BODY_BYTES`]).
pub(crate) fn body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body_within(body, crate::MAX_BODY_BYTES)
}

/// The body, or 413 naming `limit` (the route's `DefaultBodyLimit`) when it is over it.
pub(crate) fn body_within(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(limit)
        } else {
            ApiError::field(FieldError::new("(body)", rejection.body_text()))
        }
    })
}

/// Parses a document body into one JSON value per document.
pub(crate) fn documents(bytes: &[u8], format: Format) -> Result<Vec<Value>, ApiError> {
    match format {
        Format::Json => match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Array(items)) => Ok(items),
            Ok(value) => Ok(vec![value]),
            Err(error) => Err(ApiError::field(FieldError::new(
                "(document)",
                format!("is not valid JSON: {error}"),
            ))),
        },
        Format::Yaml => weir_core::document::parse_values(bytes).map_err(ApiError::field),
    }
}

// === paths ===

/// Checks a document applied with PUT against the path that names it: the path's namespace
/// fills in a document that names none (as kubectl does), and a different namespace or name is
/// an error naming both. `what` is the kind in words (`rollout`, `flag`).
pub(crate) fn match_path(
    metadata: &mut weir_core::model::ObjectMeta,
    namespace: &str,
    name: &str,
    what: &str,
) -> Result<(), ApiError> {
    let mut errors = Vec::new();
    match metadata.namespace.as_deref() {
        None | Some("") => metadata.namespace = Some(namespace.to_string()),
        Some(given) if given != namespace => {
            errors.push(FieldError::with_value(
                "metadata.namespace",
                format!("{given:?}"),
                format!("the path names namespace {namespace:?}"),
            ));
        }
        Some(_) => {}
    }
    if metadata.name != name {
        errors.push(FieldError::with_value(
            "metadata.name",
            format!("{:?}", metadata.name),
            format!("the path names {what} {name:?}"),
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(errors))
    }
}
