//! weir's embedded HTTP router: the data path of local rollouts.
//!
//! In local mode there is no service mesh to shift traffic, so weir stands in front of the two
//! versions of a service itself. This crate is that front: one [`Router`] per listening address,
//! each with its own [`RouteTable`](RouteSpec) saying where requests go (primary or canary, by
//! weight, match rules or a session cookie, optionally mirrored), and per-version metrics the
//! engine reads to judge the canary.
//!
//! Why it is shaped this way:
//! - **The data path never blocks on the control path.** The route table lives behind an
//!   [`arc_swap::ArcSwap`]: every request loads the current table without a lock, and the engine
//!   replaces it in one atomic store ([`RouteHandle::replace`]). A request keeps the table it
//!   started with, so a change never fails or splits an in-flight request.
//! - **Streaming, not buffering.** Request and response bodies flow frame by frame between the
//!   client and the upstream; the router's memory does not grow with body size.
//! - **Metrics are counters, not logs.** Each version has atomic counters and a fine log-bucket
//!   latency histogram ([`metrics`]); recording is a few relaxed atomic adds. The engine reads
//!   snapshots and subtracts them ([`MetricsSnapshot::delta`]); Prometheus reads text
//!   ([`serve_admin`]).
//! - **A slow canary cannot slow the primary.** Mirrored copies run in detached tasks bounded by
//!   a semaphore; when the bound is reached, or the mirror falls behind reading a body, the copy
//!   is dropped and counted, never waited for.
//! - **No hand-offs on the request path.** A request is served start to finish in one task (its
//!   client connection's on HTTP/1.1, its stream's on HTTP/2): the upstream HTTP/1.1 connection
//!   is taken from a small idle pool and spoken to by that same task with weir's own codec, while
//!   waiting for the response head and while the response body streams (`upstream`) - no
//!   connection task, no channel, no per-request oneshot. HTTP/1.1 timeouts cost one timer per
//!   connection, not per request (`deadline`).
//! - **Two ways to run.** [`Router::serve`] runs inside the caller's tokio runtime, whatever its
//!   flavour - the mode for embedding (the engine). [`Router::spawn_per_core`] runs one thread
//!   per core, each a single-threaded runtime with its own `SO_REUSEPORT` listening socket and
//!   its own upstream pool, sharing only the route table and the atomic metrics - the mode of
//!   the `weir router` command, where there is no work stealing and no cross-thread wake-up.
//!
//! It does not depend on `weir-core`: it knows nothing about rollouts, only about routes.

#![forbid(unsafe_code)]

mod admin;
mod body;
mod deadline;
mod error;
pub mod metrics;
mod proxy;
mod rng;
mod rules;
mod server;
mod table;
mod upstream;

pub use admin::serve_admin;
pub use error::{RouteError, RouterError};
pub use metrics::{LatencySnapshot, MetricsSnapshot, Traffic, VersionSnapshot, render_prometheus};
pub use rules::{Condition, MatchBlock, Matcher, Subject};
pub use server::{PerCoreRouter, RouteHandle, Router, RouterConfig};
pub use table::{
    Backend, Decision, Mirror, Reason, Role, RouteSpec, RouteTable, SessionAffinity, Upstream,
    Weight,
};
pub use upstream::ConnectGuard;

#[doc(hidden)]
pub use rng::Rng;
