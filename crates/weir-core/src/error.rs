//! Errors and warnings that point at a field.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A problem with one field of a document: where, what was there, and what is allowed.
#[derive(
    Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema, thiserror::Error,
)]
#[error("{path}: {message}")]
pub struct FieldError {
    /// The field's path, e.g. `spec.plan.canary.stepWeights[2]`.
    pub path: String,
    /// The offending value as written, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl FieldError {
    /// An error about the value at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            path: path.into(),
            value: None,
            message: message.into(),
        }
    }

    /// An error about the value at `path`, naming the value.
    pub fn with_value(
        path: impl Into<String>,
        value: impl fmt::Display,
        message: impl fmt::Display,
    ) -> FieldError {
        let value = value.to_string();
        FieldError {
            path: path.into(),
            message: format!("{value} is not allowed: {message}"),
            value: Some(value),
        }
    }

    /// An error about a required field that is absent.
    pub fn missing(path: impl Into<String>, what: impl fmt::Display) -> FieldError {
        FieldError::new(path, format!("is required: {what}"))
    }

    /// The same error for a document read as part of a larger one at `prefix` (a path of
    /// `(document)` is the part itself).
    pub fn under(mut self, prefix: &str) -> FieldError {
        self.path = if self.path == "(document)" {
            prefix.to_string()
        } else {
            format!("{prefix}.{}", self.path)
        };
        self
    }
}

/// Something accepted but worth knowing: a field kept but not acted on yet, a value adjusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Warning {
    /// The field's path in the input document.
    pub path: String,
    /// What weir does with it.
    pub message: String,
}

impl Warning {
    /// A warning about the field at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Warning {
        Warning {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Collects errors under a growing path, so validation code reads like the schema.
#[derive(Debug, Default)]
pub(crate) struct Errors {
    errors: Vec<FieldError>,
}

impl Errors {
    pub(crate) fn value(
        &mut self,
        path: &str,
        value: impl fmt::Display,
        allowed: impl fmt::Display,
    ) {
        self.errors
            .push(FieldError::with_value(path, value, allowed));
    }

    pub(crate) fn field(&mut self, path: &str, message: impl Into<String>) {
        self.errors.push(FieldError::new(path, message));
    }

    pub(crate) fn into_vec(self) -> Vec<FieldError> {
        self.errors
    }
}
