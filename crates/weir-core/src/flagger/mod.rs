//! Flagger import: `flagger.app/v1beta1` Canary and MetricTemplate -> weir documents.

use serde_json::Value;

use crate::error::{FieldError, Warning};
use crate::model::{MetricTemplate, Rollout};

/// Flagger's API group.
pub const API_GROUP: &str = "flagger.app";

/// A converted document and what the conversion could not carry over as behaviour.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted<T> {
    /// The weir document.
    pub value: T,
    /// Fields kept but not acted on, values adjusted to Flagger's rules.
    pub warnings: Vec<Warning>,
}

/// Converts a Flagger Canary.
pub fn convert_canary(_document: &Value) -> Result<Converted<Rollout>, Vec<FieldError>> {
    Err(vec![FieldError::new(
        "(document)",
        "Flagger import is not built yet",
    )])
}

/// Converts a Flagger MetricTemplate.
pub fn convert_metric_template(
    _document: &Value,
) -> Result<Converted<MetricTemplate>, Vec<FieldError>> {
    Err(vec![FieldError::new(
        "(document)",
        "Flagger import is not built yet",
    )])
}
