//! Flagger import: `flagger.app/v1beta1` Canary and MetricTemplate -> weir documents.
//!
//! The conversion follows Flagger's own defaults and strategy selection (see
//! `../shared/reference/flagger.md`), so that a converted Canary behaves as it did under Flagger.
//! Nothing is dropped silently:
//! - the Kubernetes side of a Canary (targetRef, service, provider, ...) is carried verbatim as
//!   the target's data, for the operator that acts on it;
//! - fields weir has no typed place for are kept in the [`UNMAPPED_ANNOTATION`] annotation as
//!   compact JSON (original path -> value), each with a [`Warning`] naming its path;
//! - values adjusted to Flagger's rules (an interval raised to 10s) and deprecated spellings
//!   (`canaryAnalysis`, metric `threshold`) are reported as warnings too.
//!
//! Errors name paths in the Flagger document as the user wrote them (`spec.analysis.stepWeights[2]`),
//! and a converted Canary is validated before it is returned, with the paths of validation errors
//! translated back to the Flagger document.

mod alert;
mod canary;
mod kept;
mod template;
mod types;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::document::json_type_name;
use crate::error::{FieldError, Warning};
use crate::model::{MetricTemplate, ObjectMeta, Rollout};

/// Flagger's API group.
pub const API_GROUP: &str = "flagger.app";

/// The annotation holding the fields weir keeps but has no typed place for: compact JSON mapping
/// each field's path in the Flagger document to its value.
pub const UNMAPPED_ANNOTATION: &str = "weir.dev/flagger-unmapped";

/// A converted document and what the conversion could not carry over as behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted<T> {
    /// The weir document.
    pub value: T,
    /// Fields kept but not acted on, values adjusted to Flagger's rules.
    pub warnings: Vec<Warning>,
}

/// Converts a Flagger Canary into a weir Rollout, or reports every reason it cannot.
pub fn convert_canary(document: &Value) -> Result<Converted<Rollout>, Vec<FieldError>> {
    canary::convert(document)
}

/// Converts a Flagger MetricTemplate into a weir MetricTemplate, or reports every reason it
/// cannot.
pub fn convert_metric_template(
    document: &Value,
) -> Result<Converted<MetricTemplate>, Vec<FieldError>> {
    template::convert(document)
}

/// Converts a Flagger AlertProvider into a weir AlertProvider, or reports every reason it
/// cannot (rocket and gchat are not supported).
pub fn convert_alert_provider(
    document: &Value,
) -> Result<Converted<crate::model::AlertProvider>, Vec<FieldError>> {
    alert::convert(document)
}

// === helpers shared by the conversions ===

/// The root mapping of a document, or an error saying what it is instead.
fn root_object<'a>(document: &'a Value, kind: &str) -> Result<&'a Map<String, Value>, FieldError> {
    match document {
        Value::Object(map) => Ok(map),
        other => Err(FieldError::new(
            "(document)",
            format!(
                "is a {}: a Flagger {kind} is a mapping with apiVersion, kind, metadata and spec",
                json_type_name(other)
            ),
        )),
    }
}

/// Checks `apiVersion` and `kind`. `current` is read silently; `older` versions are read as the
/// current one with a warning, since the fields weir reads kept their meaning.
fn check_version_and_kind(
    root: &Map<String, Value>,
    kind: &str,
    older: &[&str],
    errors: &mut Vec<FieldError>,
    warnings: &mut Vec<Warning>,
) {
    let current = format!("{API_GROUP}/v1beta1");
    match root.get("apiVersion") {
        Some(Value::String(version)) if *version == current => {}
        Some(Value::String(version))
            if older
                .iter()
                .any(|old| *version == format!("{API_GROUP}/{old}")) =>
        {
            warnings.push(Warning::new(
                "apiVersion",
                format!("{version} is read as {current}; update the manifest to {current}"),
            ));
        }
        Some(other) => errors.push(FieldError::with_value(
            "apiVersion",
            other,
            format!("a Flagger {kind} is {current}"),
        )),
        None => errors.push(FieldError::missing(
            "apiVersion",
            format!("{current} for a Flagger {kind}"),
        )),
    }
    match root.get("kind") {
        Some(Value::String(found)) if found == kind => {}
        Some(other) => errors.push(FieldError::with_value(
            "kind",
            other,
            format!("this converts a Flagger {kind}"),
        )),
        None => errors.push(FieldError::missing("kind", kind)),
    }
}

/// Reports a missing or empty `metadata.name`. A name of the wrong type is left to the
/// structural errors.
fn check_name(root: &Map<String, Value>, errors: &mut Vec<FieldError>) {
    let name = root
        .get("metadata")
        .and_then(|metadata| metadata.get("name"));
    let missing = match name {
        None | Some(Value::Null) => true,
        Some(Value::String(text)) => text.is_empty(),
        Some(_) => false,
    };
    if missing {
        errors.push(FieldError::missing(
            "metadata.name",
            "a name of lowercase letters, digits, '-' and '.'",
        ));
    }
}

/// weir metadata from Flagger metadata: name, namespace, labels and annotations are carried;
/// any other metadata (uid, generation, ...) too, untouched.
fn object_meta(parsed: Option<types::Metadata>, raw: Option<&Value>) -> ObjectMeta {
    let parsed = parsed.unwrap_or_default();
    let mut other = BTreeMap::new();
    if let Some(Value::Object(map)) = raw {
        for (key, value) in map {
            if !matches!(
                key.as_str(),
                "name" | "namespace" | "labels" | "annotations"
            ) {
                other.insert(key.clone(), value.clone());
            }
        }
    }
    ObjectMeta {
        name: parsed.name.unwrap_or_default(),
        namespace: parsed.namespace.filter(|namespace| !namespace.is_empty()),
        labels: parsed.labels.unwrap_or_default(),
        annotations: parsed.annotations.unwrap_or_default(),
        other,
    }
}

/// Keeps the first error for each path and message, in order.
fn dedup(errors: Vec<FieldError>) -> Vec<FieldError> {
    let mut seen = Vec::new();
    let mut unique = Vec::new();
    for error in errors {
        let key = (error.path.clone(), error.message.clone());
        if !seen.contains(&key) {
            seen.push(key);
            unique.push(error);
        }
    }
    unique
}

#[cfg(test)]
mod tests;
