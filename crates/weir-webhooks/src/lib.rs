//! weir-webhooks: what weir sends out over HTTP about a rollout.
//!
//! [`hooks`] calls Flagger's webhook types (confirm gates, pre- and post-rollout checks, load
//! tests, events), signed with the catalog's secrets; [`notify`] delivers notifications to the
//! rollouts' alert providers (Slack, Microsoft Teams, Discord, generic webhooks). Both go through
//! weir-http's client and its one retry policy.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod hooks;
pub mod notify;
mod text;

pub use hooks::{HttpHookRunner, LogNotifier};
pub use notify::AlertNotifier;
