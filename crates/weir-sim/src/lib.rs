//! weir's deterministic traffic simulator and the blast-radius benchmark.
//!
//! Pure: no IO, no clock, no async. A [`RequestStream`] is a pure function of a seed and a
//! rate: Poisson arrivals, each request with a routing, an outcome and a latency draw fixed in
//! advance. [`simulate`] feeds the same stream to several controllers in lock-step, each
//! through the same [`Telemetry`] model (per-second counters, scraped and delayed); a
//! controller is weir-core's real state machine (`weir_core::machine::step`), judged by
//! Flagger-style threshold checks at its ticks and/or weir's sequential judge every second, and
//! the weight in force is the one of the last `SetRoute` effect it emitted. [`bench`] runs the
//! scenarios of the reference (S0-S8, [`Scenario::all`]) over many seeds and summarises them
//! ([`Row`]); [`report`] and [`chart`] render the results.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bench;
pub mod chart;
pub mod report;
mod rng;
pub mod scenario;
mod sim;
mod stream;

pub use bench::{Row, SweepPoint};
pub use scenario::{Fault, Harm, LatencyModel, Scenario, VersionModel};
pub use sim::{ControllerSpec, RunEnd, RunResult, SimConfig, Telemetry, simulate};
pub use stream::{Request, RequestStream, Tally};
