//! weir-engine: the shell around weir-core.
//!
//! One [`Engine`] drives any number of rollouts from one timer queue. For each tick it gathers
//! observations through providers ([`providers`]), calls `weir_core::machine::step`, commits the
//! status with its events in one store transaction, and then applies the effects. At start-up it
//! re-applies every stored rollout's desired state. The adapters (the local target, Prometheus,
//! webhooks) are crates of their own that implement [`providers`]' traits.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod clock;
pub mod cluster;
mod engine;
pub mod forward;
mod handle;
pub mod judging;
pub mod providers;
pub mod synthetic;
pub mod telemetry;

pub use engine::{Activity, Engine, EngineOptions, EngineStats, LatenessSink};
pub use forward::{Forwarded, Forwarder, RemoteError, RemoteErrorKind};
pub use handle::{Applied, EngineError, EngineHandle, Executed, StatusChange};
pub use providers::{
    BoxFuture, ErrorKind, HookRunner, MetricSource, Notifier, ProviderError, Providers,
    TargetObservation, TargetProvider,
};
pub use telemetry::Telemetry;
