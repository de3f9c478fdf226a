//! The settings of a `local` target (`spec.target` beside `kind: local`).
//!
//! ```yaml
//! target:
//!   kind: local
//!   listen: 127.0.0.1:8080            # where the router accepts client traffic
//!   primary: {url: "http://127.0.0.1:9001"}
//!   canary:
//!     command: ["./app", "--port", "{port}"]   # weir picks the port
//!     healthCheck: /healthz                      # default /
//!     startTimeout: 30s                          # default 30s
//!   metricsServer: http://127.0.0.1:9090  # optional: judge with PromQL over weir's /metrics
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::GoDuration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A local target's settings. Fields are in alphabetical order so that a document's serialized
/// form is stable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalTarget {
    /// The new version.
    pub canary: VersionSpec,
    /// Where the router listens.
    pub listen: SocketAddr,
    /// The Prometheus that judges this rollout (overrides `weir serve --prometheus`); it must
    /// scrape weir's `/metrics`. Unset: checks read the router's counters directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_server: Option<String>,
    /// The stable version.
    pub primary: VersionSpec,
}

/// One version: a URL already serving, or a command weir starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VersionSpec {
    /// `http://HOST:PORT` of a running service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A program and its arguments; `{port}` is replaced by the port weir allocates (also given
    /// as the `PORT` environment variable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Environment variables for the command.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Path answered with 2xx once the version is ready (default `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<String>,
    /// How long a started command may take to become healthy (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timeout: Option<GoDuration>,
}

impl VersionSpec {
    /// The health-check path.
    pub fn health_path(&self) -> &str {
        self.health_check.as_deref().unwrap_or("/")
    }

    /// The start timeout.
    pub fn start_timeout(&self) -> Duration {
        self.start_timeout
            .map_or(Duration::from_secs(30), |timeout| timeout.get())
    }

    /// The version's revision: a hash of its definition.
    pub fn revision(&self) -> String {
        crate::revision::of_definition(&serde_json::to_value(self).unwrap_or(Value::Null))
    }
}
