//! weir's deterministic traffic simulator and the blast-radius benchmark.
//!
//! Pure: no IO, no clock, no async. A [`RequestStream`] is a pure function of a seed and a
//! rate: Poisson arrivals, each request with a routing, an outcome and a latency draw fixed in
//! advance. [`simulate`] feeds the same stream to several controllers in lock-step, each
//! through the same [`Telemetry`] model (per-second counters, scraped and delayed); a
//! controller is weir-core's real state machine (`weir_core::machine::step`), judged by
//! Flagger-style threshold checks at its ticks and/or weir's sequential judge every second
//! (which starts from the primary's pre-run counts, [`pre_run_baseline`], and whose evidence
//! report the machine's evidence rule reads before promoting), and the weight in force is the
//! one of the last `SetRoute` effect it emitted. [`bench`] runs the
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

pub use bench::{ControllerSummary, Row, SweepPoint};
pub use scenario::{Fault, Harm, LatencyModel, Scenario, VersionModel};
pub use sim::{
    ControllerSpec, DEFAULT_BASELINE_S, DEFAULT_MAX_DURATION_S, RunEnd, RunResult, SimConfig,
    Telemetry, pre_run_baseline, simulate,
};
pub use stream::{Request, RequestStream, Tally};
