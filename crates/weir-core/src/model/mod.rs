//! The documents weir reads and writes: the `Rollout` resource (spec + status), its events,
//! `MetricTemplate`s and feature `Flag`s. Kubernetes-shaped (`apiVersion`, `kind`, `metadata`, `spec`, `status`) so
//! the same document can later be served as a CRD.

mod event;
mod flag;
pub mod local;
mod provider;
mod spec;
mod status;
mod target;

pub use event::*;
pub use flag::*;
pub use provider::*;
pub use spec::*;
pub use status::*;
pub use target::*;

/// The API group and version of weir's own resources.
pub const API_VERSION: &str = "weir.dev/v1alpha1";
/// The kind of a rollout document.
pub const ROLLOUT_KIND: &str = "Rollout";
/// The kind of a metric template document.
pub const METRIC_TEMPLATE_KIND: &str = "MetricTemplate";
