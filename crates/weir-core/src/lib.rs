//! weir-core: the sans-IO heart of weir.
//!
//! It knows what a rollout is ([`model`]), whether a document is valid ([`validate`]), how a
//! Flagger `Canary` maps onto a weir `Rollout` ([`flagger`]), what a healthy run looks like
//! ([`plan`]) and how a rollout moves from one status to the next ([`machine::step`]). It never
//! reads a clock, a socket or a file: time and observations are inputs, effects are outputs.
//! That keeps it deterministic, which is what makes the rest of weir testable and durable.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod argo;
pub mod catalog;
pub mod document;
pub mod error;
pub mod flag;
pub mod flagger;
pub mod machine;
pub mod model;
pub mod plan;
pub mod query;
pub mod revision;
pub mod units;
pub mod validate;

pub use error::{FieldError, Warning};
pub use units::{GoDuration, Weight};
