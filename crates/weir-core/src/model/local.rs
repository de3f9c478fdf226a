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

use crate::model::{Plan, Rollout};
use crate::{FieldError, GoDuration};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A local target's settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalTargetConfig {
    /// Always `local` (the field the core reads).
    pub kind: String,
    /// Where the router listens.
    pub listen: SocketAddr,
    /// The stable version.
    pub primary: VersionSpec,
    /// The new version.
    pub canary: VersionSpec,
    /// The Prometheus that judges this rollout (overrides `weir serve --prometheus`); it must
    /// scrape weir's `/metrics`. Unset: checks read the router's counters directly.
    #[serde(default)]
    pub metrics_server: Option<String>,
}

/// One version: a URL already serving, or a command weir starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

impl LocalTargetConfig {
    /// Reads the settings of a rollout whose target kind is `local`, reporting every problem
    /// with its path under `spec.target`.
    pub fn of(rollout: &Rollout) -> Result<LocalTargetConfig, Vec<FieldError>> {
        let mut fields = serde_json::Map::new();
        fields.insert("kind".into(), Value::String("local".into()));
        for (key, value) in &rollout.spec.target.config {
            fields.insert(key.clone(), value.clone());
        }
        let config: LocalTargetConfig =
            crate::document::deserialize_collecting(&Value::Object(fields))
                .map_err(|errors| prefixed(errors, "spec.target"))?;
        let mut errors = Vec::new();
        for (name, version) in [("primary", &config.primary), ("canary", &config.canary)] {
            version_errors(&format!("spec.target.{name}"), version, &mut errors);
        }
        if let Some(server) = &config.metrics_server
            && !server.starts_with("http://")
            && !server.starts_with("https://")
        {
            errors.push(FieldError::with_value(
                "spec.target.metricsServer",
                format!("{server:?}"),
                "the Prometheus's http:// or https:// URL, e.g. http://127.0.0.1:9090",
            ));
        }
        plan_errors(rollout, &mut errors);
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(errors)
        }
    }
}

fn prefixed(errors: Vec<FieldError>, prefix: &str) -> Vec<FieldError> {
    errors
        .into_iter()
        .map(|mut error| {
            error.path = if error.path == "(document)" {
                prefix.to_string()
            } else {
                format!("{prefix}.{}", error.path)
            };
            error
        })
        .collect()
}

fn version_errors(path: &str, version: &VersionSpec, errors: &mut Vec<FieldError>) {
    match (&version.url, &version.command) {
        // Whether the URL is one the router can forward to is the local target's to say.
        (Some(_), None) => {}
        (None, Some(command)) => {
            if command.first().is_none_or(|program| program.trim().is_empty()) {
                errors.push(FieldError::new(format!("{path}.command"), "needs a program: [\"./app\", \"--port\", \"{port}\"]"));
            }
        }
        _ => errors.push(FieldError::new(
            path,
            "set exactly one of url (a running service, http://HOST:PORT) and command (a program weir starts)",
        )),
    }
    if let Some(health) = &version.health_check
        && !health.starts_with('/')
    {
        errors.push(FieldError::with_value(
            format!("{path}.healthCheck"),
            format!("{health:?}"),
            "a path starting with /",
        ));
    }
    if version.url.is_some() && (version.start_timeout.is_some() || !version.env.is_empty()) {
        errors.push(FieldError::new(
            path,
            "startTimeout and env apply to a command, not to a url",
        ));
    }
}

/// The embedded router matches on headers, cookies and query parameters.
fn plan_errors(rollout: &Rollout, errors: &mut Vec<FieldError>) {
    let Plan::AbTest(ab_test) = &rollout.spec.plan else {
        return;
    };
    for (index, rule) in ab_test.match_rules.iter().enumerate() {
        for (field, present) in [
            ("uri", rule.uri.is_some()),
            ("method", rule.method.is_some()),
        ] {
            if present {
                errors.push(FieldError::new(
                    format!("spec.plan.abTest.match[{index}].{field}"),
                    "the local router matches headers, cookies and queryParams only",
                ));
            }
        }
    }
}
