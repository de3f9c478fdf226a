//! weir-engine: the shell around weir-core.
//!
//! One [`Engine`] drives any number of rollouts from one timer queue. For each tick it gathers
//! observations through providers ([`providers`]), calls `weir_core::machine::step`, commits the
//! status with its events in one store transaction, and then applies the effects. At start-up it
//! re-applies every stored rollout's desired state. [`local`] is the provider of `local` targets:
//! the embedded router and versions that are URLs or commands weir starts.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod engine;
mod handle;
pub mod hooks;
pub mod http;
pub mod judging;
pub mod local;
pub mod notify;
pub mod prometheus;
pub mod providers;
pub mod synthetic;
pub mod telemetry;
mod text;

pub use engine::{Engine, EngineOptions, EngineStats, LatenessSink};
pub use handle::{Applied, EngineError, EngineHandle, StatusChange};
pub use providers::{
    BoxFuture, HookRunner, Integrations, MetricSource, Notifier, ProviderError, Providers,
    TargetObservation, TargetProvider,
};
pub use telemetry::Telemetry;
