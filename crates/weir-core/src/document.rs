//! Reading documents: YAML or JSON bytes in, typed weir documents (or every error) out.
//!
//! A file may hold several documents (`---`). Each is dispatched on `apiVersion` + `kind`:
//! weir's own `Rollout`, `MetricTemplate`, `AlertProvider` and `Flag`, Flagger's `Canary`,
//! `MetricTemplate` and `AlertProvider`, which are converted (see [`crate::flagger`]), Argo
//! Rollouts' `argoproj.io` objects, read and validated as they are (see [`crate::argo`]), and
//! Kubernetes `v1` `Secret`s (credentials of providers). Then [`crate::validate`] checks the result, so a
//! Flagger manifest is held to exactly the rules of a native one.
//!
//! Serde stops at the first structural error. To report every error at once, the offending field
//! is removed from the document tree and deserialization is retried; errors are collected until
//! the document deserializes or an error cannot be isolated.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{FieldError, Warning};
use crate::model::{
    ALERT_PROVIDER_KIND, API_VERSION, AlertProvider, FLAG_KIND, Flag, METRIC_TEMPLATE_KIND,
    MetricTemplate, ROLLOUT_KIND, Rollout, SECRET_KIND, Secret, Target,
};
use crate::validate;
use crate::{argo, flagger};

/// A document weir understands, after conversion and validation.
#[derive(Debug, Clone, PartialEq)]
pub enum Document {
    /// A rollout.
    Rollout(Box<Rollout>),
    /// A metric template.
    MetricTemplate(Box<MetricTemplate>),
    /// Where notifications go.
    AlertProvider(Box<AlertProvider>),
    /// Credentials of a provider.
    Secret(Box<Secret>),
    /// A feature flag.
    Flag(Box<Flag>),
    /// An Argo Rollouts object (`argoproj.io`), read and validated as it is.
    Argo(Box<argo::ArgoDocument>),
}

impl Document {
    /// `kind/namespace/name`, for messages.
    pub fn describe(&self) -> String {
        match self {
            Document::Rollout(rollout) => format!(
                "Rollout {}/{}",
                rollout.metadata.namespace_or_default(),
                rollout.metadata.name
            ),
            Document::MetricTemplate(template) => format!(
                "MetricTemplate {}/{}",
                template.metadata.namespace_or_default(),
                template.metadata.name
            ),
            Document::AlertProvider(provider) => format!(
                "AlertProvider {}/{}",
                provider.metadata.namespace_or_default(),
                provider.metadata.name
            ),
            Document::Secret(secret) => format!(
                "Secret {}/{}",
                secret.metadata.namespace_or_default(),
                secret.metadata.name
            ),
            Document::Flag(flag) => format!(
                "Flag {}/{}",
                flag.metadata.namespace_or_default(),
                flag.metadata.name
            ),
            Document::Argo(argo) => argo.describe(),
        }
    }
}

/// Where a document came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Written as a weir document.
    Weir,
    /// Converted from Flagger's `flagger.app` group.
    Flagger,
    /// Read from Argo Rollouts' `argoproj.io` group.
    Argo,
}

/// A document that loaded and validated, with the warnings found on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The document.
    pub document: Document,
    /// Where it came from.
    pub origin: Origin,
    /// Accepted, but worth knowing.
    pub warnings: Vec<Warning>,
}

/// Why a document was refused: every error found, and warnings found before them.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    /// `kind name` when it could be read, for messages.
    pub subject: String,
    /// Every problem found.
    pub errors: Vec<FieldError>,
    /// The document is some other API's object (a Deployment, a Service, ...), not one weir
    /// misread: a manifest that mixes them with weir's is fine for `weir validate`, which skips
    /// it, while `weir apply` still refuses it.
    pub foreign: bool,
}

/// The result of loading one document of a file.
pub type LoadResult = Result<Loaded, Refused>;

/// Upper bound on input size; larger inputs are refused before parsing.
pub const MAX_DOCUMENT_BYTES: usize = 4 * 1024 * 1024;

/// Parses every document in `bytes` (YAML, or JSON, which is YAML too), converts Flagger
/// documents, and validates each one.
pub fn load(bytes: &[u8]) -> Vec<LoadResult> {
    match parse_values(bytes) {
        Ok(values) => values.iter().map(load_value).collect(),
        Err(error) => vec![Err(Refused {
            foreign: false,
            subject: "document".into(),
            errors: vec![error],
        })],
    }
}

/// Parses `bytes` into one JSON value per document, refusing oversized or malformed input.
pub fn parse_values(bytes: &[u8]) -> Result<Vec<Value>, FieldError> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(FieldError::new(
            "(document)",
            format!(
                "is {} bytes: documents are limited to {MAX_DOCUMENT_BYTES} bytes",
                bytes.len()
            ),
        ));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|error| FieldError::new("(document)", format!("is not UTF-8 text: {error}")))?;
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        // JSON is parsed by a JSON parser so that its errors speak JSON.
        let value: Value = serde_json::from_str(text).map_err(|error| {
            FieldError::new("(document)", format!("is not valid JSON: {error}"))
        })?;
        return Ok(match value {
            Value::Array(items) => items,
            other => vec![other],
        });
    }
    let values: Vec<Value> = serde_saphyr::from_multiple(text)
        .map_err(|error| FieldError::new("(document)", format!("is not valid YAML: {error}")))?;
    Ok(values
        .into_iter()
        .filter(|value| !value.is_null())
        .collect())
}

/// Loads one parsed document.
pub fn load_value(value: &Value) -> LoadResult {
    let subject = subject_of(value);
    let refuse = |errors: Vec<FieldError>| Refused {
        subject: subject.clone(),
        errors,
        foreign: false,
    };
    let Value::Object(map) = value else {
        return Err(refuse(vec![FieldError::new(
            "(document)",
            format!(
                "is a {}: a document is a mapping with apiVersion, kind, metadata and spec",
                json_type_name(value)
            ),
        )]));
    };
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, _) = api_version.split_once('/').unwrap_or((api_version, ""));

    let (document, origin, warnings) = match (group, kind) {
        ("weir.dev", _) if api_version != API_VERSION => {
            return Err(refuse(vec![FieldError::with_value(
                "apiVersion",
                api_version,
                format!("weir's documents use {API_VERSION}"),
            )]));
        }
        ("weir.dev", ROLLOUT_KIND) => {
            let rollout = parse_rollout(value).map_err(&refuse)?;
            (
                Document::Rollout(Box::new(rollout)),
                Origin::Weir,
                Vec::new(),
            )
        }
        ("weir.dev", METRIC_TEMPLATE_KIND) => {
            let template: MetricTemplate = deserialize_collecting(value).map_err(&refuse)?;
            (
                Document::MetricTemplate(Box::new(template)),
                Origin::Weir,
                Vec::new(),
            )
        }
        ("weir.dev", ALERT_PROVIDER_KIND) => {
            let provider: AlertProvider = deserialize_collecting(value).map_err(&refuse)?;
            (
                Document::AlertProvider(Box::new(provider)),
                Origin::Weir,
                Vec::new(),
            )
        }
        ("weir.dev", FLAG_KIND) => {
            let flag: Flag = deserialize_collecting(value).map_err(&refuse)?;
            (Document::Flag(Box::new(flag)), Origin::Weir, Vec::new())
        }
        ("v1", SECRET_KIND) => {
            let secret: Secret = deserialize_collecting(value).map_err(&refuse)?;
            let secret = decode_secret(secret).map_err(|error| refuse(vec![error]))?;
            (Document::Secret(Box::new(secret)), Origin::Weir, Vec::new())
        }
        (flagger::API_GROUP, ALERT_PROVIDER_KIND) => {
            let converted = flagger::convert_alert_provider(value).map_err(&refuse)?;
            (
                Document::AlertProvider(Box::new(converted.value)),
                Origin::Flagger,
                converted.warnings,
            )
        }
        (flagger::API_GROUP, "Canary") => {
            let converted = flagger::convert_canary(value).map_err(&refuse)?;
            (
                Document::Rollout(Box::new(converted.value)),
                Origin::Flagger,
                converted.warnings,
            )
        }
        (flagger::API_GROUP, METRIC_TEMPLATE_KIND) => {
            let converted = flagger::convert_metric_template(value).map_err(&refuse)?;
            (
                Document::MetricTemplate(Box::new(converted.value)),
                Origin::Flagger,
                converted.warnings,
            )
        }
        (argo::API_GROUP, _) => {
            let read = argo::read(value).map_err(&refuse)?;
            (
                Document::Argo(Box::new(read.value)),
                Origin::Argo,
                read.warnings,
            )
        }
        ("weir.dev" | flagger::API_GROUP, other) => {
            return Err(refuse(vec![FieldError::with_value(
                "kind",
                quote_or_empty(other),
                "weir reads kind Rollout, MetricTemplate, AlertProvider or Flag (weir.dev/v1alpha1), \
                 and Canary, MetricTemplate or AlertProvider (flagger.app/v1beta1)",
            )]));
        }
        (group, _) => {
            // Another API's object: an apiVersion of another group (`apps/v1`,
            // `networking.istio.io/v1`) or a core kind other than Secret.
            // A misspelt weir or Flagger group is not foreign: it is an error.
            let foreign = !group.is_empty()
                && !kind.is_empty()
                && !group.starts_with("weir")
                && !group.starts_with("flagger");
            return Err(Refused {
                foreign,
                ..refuse(vec![FieldError::with_value(
                    "apiVersion",
                    quote_or_empty(api_version),
                    format!(
                        "weir reads {API_VERSION} (Rollout, MetricTemplate, AlertProvider, Flag), \
                     flagger.app/v1beta1 (Canary, MetricTemplate, AlertProvider), {} ({}) and v1 \
                     (Secret)",
                        argo::API_VERSION,
                        argo::KINDS
                    ),
                )])
            });
        }
    };
    let errors = match &document {
        Document::Rollout(rollout) => validate::rollout(rollout),
        Document::MetricTemplate(template) => validate::metric_template(template),
        Document::AlertProvider(provider) => validate::alert_provider(provider),
        Document::Secret(secret) => validate::secret(secret),
        Document::Flag(flag) => validate::flag(flag),
        // Validated as it was read.
        Document::Argo(_) => Vec::new(),
    };
    if errors.is_empty() {
        Ok(Loaded {
            document,
            origin,
            warnings,
        })
    } else {
        Err(refuse(errors))
    }
}

/// Moves a secret's base64 `data` into `stringData`, so readers see one map of plain values.
fn decode_secret(mut secret: Secret) -> Result<Secret, FieldError> {
    use base64::Engine as _;
    for (key, encoded) in std::mem::take(&mut secret.data) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| {
                FieldError::new(
                    format!("data.{key}"),
                    "is not base64-encoded UTF-8 text (use stringData for plain values)",
                )
            })?;
        secret.string_data.entry(key).or_insert(decoded);
    }
    Ok(secret)
}

fn subject_of(value: &Value) -> String {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("document");
    match value
        .get("metadata")
        .and_then(|metadata| metadata.get("name"))
        .and_then(Value::as_str)
    {
        Some(name) => format!("{kind} {name}"),
        None => kind.to_string(),
    }
}

fn quote_or_empty(text: &str) -> String {
    if text.is_empty() {
        "(absent)".into()
    } else {
        format!("{text:?}")
    }
}

/// The JSON type of a value, for messages.
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "mapping",
    }
}

// === structural errors, all at once ===

/// Reads a rollout, with `spec.target` read on its own so that its errors keep their paths.
fn parse_rollout(value: &Value) -> Result<Rollout, Vec<FieldError>> {
    let mut rest = value.clone();
    let target = rest
        .pointer_mut("/spec/target")
        .map(|target| (Target::parse(target), target));
    let target_errors = match target {
        Some((Ok(parsed), slot)) => {
            *slot = serde_json::to_value(&parsed).unwrap_or(Value::Null);
            Vec::new()
        }
        Some((Err(errors), slot)) => {
            // A valid stand-in, so that the rest of the document's errors are still collected.
            *slot = serde_json::json!({"kind": "flag"});
            errors
        }
        None => Vec::new(),
    };
    let parsed = deserialize_collecting::<Rollout>(&rest);
    if target_errors.is_empty() {
        return parsed;
    }
    // The rest is still held to every rule, so that one bad target setting hides nothing else.
    // Reported in document order: the metadata's errors, the target's, then the rest.
    let mut errors = match parsed {
        Ok(rollout) => validate::rollout(&rollout),
        Err(errors) => errors,
    };
    let after_metadata = errors
        .iter()
        .position(|error| {
            !error.path.starts_with("metadata") && !error.path.starts_with("apiVersion")
        })
        .unwrap_or(errors.len());
    errors.splice(after_metadata..after_metadata, target_errors);
    Err(errors)
}

/// The most structural errors reported for one document.
const MAX_STRUCTURAL_ERRORS: usize = 50;

/// Deserializes `value` into `T`, reporting every structural error with its field path.
pub fn deserialize_collecting<T: DeserializeOwned>(value: &Value) -> Result<T, Vec<FieldError>> {
    let mut working = value.clone();
    let mut errors = Vec::new();
    // Array elements removed so far, by array path, as original indices: later errors in the
    // same array are reported with the indices the user wrote.
    let mut removed: BTreeMap<Vec<PathSegment>, Vec<usize>> = BTreeMap::new();
    let mut removed_keys: Vec<(Vec<PathSegment>, String)> = Vec::new();
    loop {
        let error = match serde_path_to_error::deserialize::<_, T>(&working) {
            Ok(parsed) if errors.is_empty() => return Ok(parsed),
            Ok(_) => return Err(errors),
            Err(error) => error,
        };
        let mut segments: Vec<PathSegment> = error
            .path()
            .iter()
            .filter_map(|segment| match segment {
                serde_path_to_error::Segment::Seq { index } => Some(PathSegment::Index(*index)),
                serde_path_to_error::Segment::Map { key } => Some(PathSegment::Key(key.clone())),
                serde_path_to_error::Segment::Enum { variant } => {
                    Some(PathSegment::Key(variant.clone()))
                }
                serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        let inner = error.into_inner().to_string();
        let (message, mut remove_key) = describe_serde_error(&inner);
        // Some paths already end at the unknown field; others stop at its parent.
        if let (Some(key), Some(PathSegment::Key(last))) = (&remove_key, segments.last())
            && key == last
        {
            remove_key = None;
        }
        if let Some(missing) = missing_field_name(&inner) {
            // A field removed earlier as invalid is now missing: its error is already reported.
            let already_reported = removed_keys
                .iter()
                .any(|(parent, key)| parent == &segments && key == missing);
            if !already_reported {
                errors.push(FieldError::new(
                    display_path(&original_indices(&segments, &removed), Some(missing)),
                    "is required but missing",
                ));
            }
            // No value can stand in for a missing one, so collection ends here.
            return Err(errors);
        }
        let shown = display_path(
            &original_indices(&segments, &removed),
            remove_key.as_deref(),
        );
        errors.push(FieldError {
            path: shown,
            value: None,
            message,
        });
        if errors.len() >= MAX_STRUCTURAL_ERRORS {
            return Err(errors);
        }
        // Isolate the error so the next attempt can find the next one.
        if let Some(key) = remove_key {
            segments.push(PathSegment::Key(key));
        }
        let Some(last) = segments.pop() else {
            return Err(errors);
        };
        let Some(parent) = lookup_mut(&mut working, &segments) else {
            return Err(errors);
        };
        let isolated = match (&last, parent) {
            (PathSegment::Key(key), Value::Object(map)) => map.remove(key).is_some(),
            (PathSegment::Index(index), Value::Array(items)) if *index < items.len() => {
                items.remove(*index);
                let original = original_index(&segments, *index, &removed);
                let list = removed.entry(segments.clone()).or_default();
                list.push(original);
                list.sort_unstable();
                true
            }
            _ => false,
        };
        if !isolated {
            return Err(errors);
        }
        if let PathSegment::Key(key) = last {
            removed_keys.push((segments, key));
        }
    }
}

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum PathSegment {
    Key(String),
    Index(usize),
}

fn lookup_mut<'a>(value: &'a mut Value, path: &[PathSegment]) -> Option<&'a mut Value> {
    let mut current = value;
    for segment in path {
        current = match (segment, current) {
            (PathSegment::Key(key), Value::Object(map)) => map.get_mut(key)?,
            (PathSegment::Index(index), Value::Array(items)) => items.get_mut(*index)?,
            _ => return None,
        };
    }
    Some(current)
}

fn original_index(
    array_path: &[PathSegment],
    current: usize,
    removed: &BTreeMap<Vec<PathSegment>, Vec<usize>>,
) -> usize {
    let mut original = current;
    if let Some(list) = removed.get(array_path) {
        for &gone in list {
            if gone <= original {
                original += 1;
            }
        }
    }
    original
}

fn original_indices(
    path: &[PathSegment],
    removed: &BTreeMap<Vec<PathSegment>, Vec<usize>>,
) -> Vec<PathSegment> {
    let mut shown = Vec::with_capacity(path.len());
    for (position, segment) in path.iter().enumerate() {
        shown.push(match segment {
            PathSegment::Index(index) => {
                PathSegment::Index(original_index(&path[..position], *index, removed))
            }
            key => key.clone(),
        });
    }
    shown
}

fn display_path(path: &[PathSegment], extra_key: Option<&str>) -> String {
    let mut shown = String::new();
    let keys = path
        .iter()
        .cloned()
        .chain(extra_key.map(|key| PathSegment::Key(key.to_string())));
    for segment in keys {
        match segment {
            PathSegment::Key(key) => {
                if !shown.is_empty() {
                    shown.push('.');
                }
                shown.push_str(&key);
            }
            PathSegment::Index(index) => shown.push_str(&format!("[{index}]")),
        }
    }
    if shown.is_empty() {
        "(document)".into()
    } else {
        shown
    }
}

/// Turns serde's message into weir's wording; for unknown fields, also names the field so the
/// error points at it.
fn describe_serde_error(message: &str) -> (String, Option<String>) {
    if let Some(rest) = message.strip_prefix("unknown field `")
        && let Some((field, expected)) = rest.split_once('`')
    {
        let expected = expected
            .trim_start_matches(',')
            .trim()
            .replace("expected one of", "the fields allowed here are")
            .replace("expected", "the field allowed here is")
            .replace("there are no fields", "no fields are allowed here");
        let suggestion = expected_names(&expected)
            .into_iter()
            .min_by_key(|candidate| edit_distance(candidate, field))
            .filter(|candidate| edit_distance(candidate, field) <= 2)
            .map(|candidate| format!(" (did you mean `{candidate}`?)"))
            .unwrap_or_default();
        return (
            format!("unknown field{suggestion}; {expected}"),
            Some(field.to_string()),
        );
    }
    if let Some(rest) = message.strip_prefix("unknown variant `")
        && let Some((variant, expected)) = rest.split_once('`')
    {
        let expected = expected
            .trim_start_matches(',')
            .trim()
            .replace("expected one of", "allowed:")
            .replace("expected", "allowed:");
        return (format!("{variant:?} is not allowed; {expected}"), None);
    }
    (message.to_string(), None)
}

fn missing_field_name(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field)
}

fn expected_names(expected: &str) -> Vec<String> {
    expected
        .split('`')
        .enumerate()
        .filter(|(index, _)| index % 2 == 1)
        .map(|(_, name)| name.to_string())
        .collect()
}

/// Levenshtein distance, for "did you mean" suggestions on short field names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b_chars: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b_chars.len()).collect();
    for (i, a_char) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, b_char) in b_chars.iter().enumerate() {
            let substitution = previous[j] + usize::from(a_char != *b_char);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b_chars.len()]
}

#[cfg(test)]
mod tests;
