//! weir-http: how weir's adapters and its command line talk HTTP to the world.
//!
//! One pooled client ([`HttpClient`]: http, or https against the Mozilla roots with rustls), one
//! retry policy ([`retry`]): which answers are worth another attempt, and how long to wait
//! between attempts (webhooks and notifications both follow it, so a receiver sees the same
//! behaviour from either), and the network policy ([`policy`]): where rollouts may make weir
//! listen and connect, enforced by the client on every connection it opens. [`tls`] holds what
//! weir's TLS client and server share: the one crypto provider, trusted roots, PEM files.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod client;
pub mod policy;
pub mod retry;
pub mod tls;

pub use client::{Answer, HttpClient, HttpError};
