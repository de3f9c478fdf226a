//! Tools weir uses for trials, its demo and its tests.
//!
//! - [`sample_app`]: a small HTTP service (HTTP/1.1 with keep-alive, and HTTP/2 cleartext with
//!   prior knowledge) that answers with its version, and can be told to fail a share of its
//!   requests and to answer slowly. Two of them, with different versions, are the primary and
//!   the canary of `weir demo`; a faulty one is what a rollback looks like.
//! - [`load`]: an open-loop, constant-rate load generator that counts outcomes per status class
//!   and per version (from the `x-weir-version` response header) and measures latency without
//!   coordinated omission. It feeds the router the traffic weir judges.
//!
//! Both are plain libraries over tokio and hyper; `weir sample-app` and `weir load` are thin
//! command-line wrappers around them.

#![forbid(unsafe_code)]

mod histogram;
pub mod load;
pub mod sample_app;

/// The response header in which the sample app names its version, and from which the load
/// generator counts requests per version.
pub const VERSION_HEADER: &str = "x-weir-version";
