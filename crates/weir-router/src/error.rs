//! Errors of the router library. Bad route input is rejected before it can reach the data path,
//! with a message naming the field and the value.

use std::io;
use std::net::SocketAddr;

/// A route specification (or one of its parts) was rejected; the table in force is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// A weight was not a percentage between 0 and 100 with at most two decimals.
    #[error(
        "invalid weight {value:?}: expected a percentage from 0 to 100 with at most two decimals (0.01% resolution)"
    )]
    Weight {
        /// The rejected text.
        value: String,
    },
    /// A weight in basis points was above 10000.
    #[error("invalid weight {0} basis points: the maximum is 10000 (100%)")]
    WeightBasisPoints(u32),
    /// An upstream address was not `http://HOST:PORT` or `HOST:PORT`.
    #[error("invalid upstream {value:?}: {reason}")]
    Upstream {
        /// The rejected text.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A version had no upstream address.
    #[error("{field}: at least one upstream address is required")]
    NoUpstreams {
        /// `primary` or `canary`.
        field: &'static str,
    },
    /// A version name was empty or not usable as a cookie value and metric label.
    #[error("{field}.version {value:?}: expected 1 to 64 characters from A-Z a-z 0-9 . _ -")]
    VersionName {
        /// `primary` or `canary`.
        field: &'static str,
        /// The rejected name.
        value: String,
    },
    /// Primary and canary had the same version name but different upstreams, so their metrics
    /// and cookies would merge.
    #[error(
        "primary.version and canary.version are both {0:?} but name different upstreams: two places need two names"
    )]
    SameVersion(String),
    /// A session-affinity cookie name was not a valid cookie name.
    #[error(
        "sessionAffinity.cookieName {0:?}: expected a non-empty token (letters, digits, ! # $ % & ' * + - . ^ _ ` | ~)"
    )]
    CookieName(String),
    /// A match rule could not be parsed.
    #[error("invalid match rule {rule:?}: {reason}")]
    Match {
        /// The rejected rule text.
        rule: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The router could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// Binding the listening socket failed.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// Reading the bound address back failed.
    #[error("cannot read the listening address: {0}")]
    LocalAddr(io::Error),
    /// A thread or runtime of a per-core router could not be started.
    #[error("cannot start a router thread: {0}")]
    Runtime(io::Error),
    /// The initial route table was invalid.
    #[error(transparent)]
    Route(#[from] RouteError),
}
