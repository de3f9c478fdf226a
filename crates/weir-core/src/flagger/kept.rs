//! Fields with no place in weir's typed model: kept in an annotation, each with a warning.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::UNMAPPED_ANNOTATION;
use crate::error::Warning;

/// The default reason for a kept field.
pub(super) const NOT_ACTED_ON: &str = "kept as an annotation; weir does not act on it yet";

/// Collects kept fields (path -> value) and the warnings of the conversion.
#[derive(Debug, Default)]
pub(super) struct Kept {
    entries: BTreeMap<String, Value>,
    pub warnings: Vec<Warning>,
}

impl Kept {
    /// A warning that keeps nothing.
    pub fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Warning::new(path, message));
    }

    /// Keeps `value` under `path` with the default reason.
    pub fn keep(&mut self, path: &str, value: &Value) {
        self.keep_because(path, value, NOT_ACTED_ON);
    }

    /// Keeps `value` under `path`, saying why weir does not use it.
    pub fn keep_because(&mut self, path: &str, value: &Value, reason: &str) {
        self.entries.insert(path.to_string(), value.clone());
        self.warnings.push(Warning::new(path, reason));
    }

    /// Keeps every key of `object` (when it is a mapping) that is not in `known`.
    pub fn keep_unknown_keys(&mut self, object: Option<&Value>, base: &str, known: &[&str]) {
        let Some(Value::Object(map)) = object else {
            return;
        };
        for (key, value) in map {
            if !known.contains(&key.as_str()) {
                self.keep(&join(base, key), value);
            }
        }
    }

    /// Writes the kept fields into `annotations` as compact JSON, if there are any.
    pub fn write_annotation(&self, annotations: &mut BTreeMap<String, String>) {
        if self.entries.is_empty() {
            return;
        }
        let object: Map<String, Value> = self
            .entries
            .iter()
            .map(|(path, value)| (path.clone(), value.clone()))
            .collect();
        // Serializing a JSON value cannot fail; the fallback only avoids a panic path.
        let text = serde_json::to_string(&Value::Object(object)).unwrap_or_default();
        annotations.insert(UNMAPPED_ANNOTATION.to_string(), text);
    }
}

/// `base.key`, or `key` at the top.
pub(super) fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

/// Whether a raw value says nothing Go would read as set: absent, null, false, 0, "" or [].
pub(super) fn is_unset(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(Value::Bool(flag)) => !flag,
        Some(Value::Number(number)) => number.as_f64() == Some(0.0),
        Some(Value::String(text)) => text.is_empty(),
        Some(Value::Array(items)) => items.is_empty(),
        Some(Value::Object(map)) => map.is_empty(),
    }
}

/// A non-null field of a raw mapping.
pub(super) fn field<'a>(object: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    object
        .and_then(|value| value.get(key))
        .filter(|value| !value.is_null())
}

/// A raw value as a string, for maps that Flagger types as string -> string. Returns whether
/// the value was already a string.
pub(super) fn as_string(value: &Value) -> (String, bool) {
    match value {
        Value::String(text) => (text.clone(), true),
        Value::Null => (String::new(), false),
        other => (other.to_string(), false),
    }
}
