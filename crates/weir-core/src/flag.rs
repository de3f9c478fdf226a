//! Flag evaluation, pure: a [`Flag`] and a context in, a variation and the reason out.
//!
//! Order (Bucketeer's): a disabled flag serves its off variation (DISABLED); then individual
//! targets (TARGETING_MATCH); then rules, first match wins (TARGETING_MATCH, or SPLIT when the
//! rule splits by weights); then the default strategy (STATIC when the flag has no targeting at
//! all, DEFAULT otherwise, SPLIT when it splits by weights).

use serde_json::{Map, Value};

use crate::model::Flag;

/// What an application tells about who is asking.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvaluationContext {
    /// OpenFeature's targeting key.
    pub targeting_key: Option<String>,
    /// Every other attribute.
    pub attributes: Map<String, Value>,
}

/// Why a flag evaluated as it did (OpenFeature's reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The flag has no targeting: everyone gets the same.
    Static,
    /// An individual target or a rule matched.
    TargetingMatch,
    /// The user's bucket chose among weighted variations.
    Split,
    /// The flag is disabled: its off variation.
    Disabled,
    /// No target or rule matched: the default strategy's single variation.
    Default,
}

impl Reason {
    /// As OFREP writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Static => "STATIC",
            Reason::TargetingMatch => "TARGETING_MATCH",
            Reason::Split => "SPLIT",
            Reason::Disabled => "DISABLED",
            Reason::Default => "DEFAULT",
        }
    }
}

/// The outcome of an evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The variation's name.
    pub variant: String,
    /// Its value.
    pub value: Value,
    /// Why.
    pub reason: Reason,
}

/// Why a flag could not be evaluated for a context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvaluationError {
    /// The flag splits users by the targeting key (or `bucketBy`) and the context has none.
    #[error("{0}")]
    TargetingKeyMissing(String),
    /// The context cannot be used (e.g. the bucketing attribute is not a string or a number).
    #[error("{0}")]
    InvalidContext(String),
}

/// A flag ready to be evaluated many times (its regular expressions compiled once).
#[derive(Debug, Clone)]
pub struct CompiledFlag {
    flag: Flag,
}

impl CompiledFlag {
    /// Compiles `flag`, which must be valid (`validate::flag`).
    pub fn new(flag: Flag) -> CompiledFlag {
        CompiledFlag { flag }
    }

    /// The flag.
    pub fn flag(&self) -> &Flag {
        &self.flag
    }

    /// Evaluates the flag for `context`.
    pub fn evaluate(&self, context: &EvaluationContext) -> Result<Evaluation, EvaluationError> {
        let _ = context;
        Err(EvaluationError::InvalidContext(
            "flag evaluation is being written".into(),
        ))
    }
}

/// The bucket of `value` for flag `key` with `salt`: a point in [0, 100,000) (units of 0.001%),
/// the same on every machine and in every version.
pub fn bucket(key: &str, salt: &str, value: &str) -> u32 {
    let _ = (key, salt, value);
    0
}
