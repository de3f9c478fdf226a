//! The rules of each target kind beyond the shape of its settings.

use crate::error::Errors;
use crate::model::local::VersionSpec;
use crate::model::{Plan, Target};

/// Every problem with `spec.target` and with what the target cannot do with the plan.
pub(super) fn target(target: &Target, plan: &Plan, errors: &mut Errors) {
    if let Target::Local(local) = target {
        for (name, version) in [("primary", &local.primary), ("canary", &local.canary)] {
            self::version(&format!("spec.target.{name}"), version, errors);
        }
    }
    if let Some(server) = target.metrics_server()
        && !server.starts_with("http://")
        && !server.starts_with("https://")
    {
        errors.value(
            "spec.target.metricsServer",
            format!("{server:?}"),
            "the Prometheus's http:// or https:// URL, e.g. http://127.0.0.1:9090",
        );
    }
    // The embedded router matches on headers, cookies and query parameters.
    if let (Target::Local(_), Plan::AbTest(ab_test)) = (target, plan) {
        for (index, rule) in ab_test.match_rules.iter().enumerate() {
            for (field, present) in [
                ("uri", rule.uri.is_some()),
                ("method", rule.method.is_some()),
            ] {
                if present {
                    errors.field(
                        &format!("spec.plan.abTest.match[{index}].{field}"),
                        "the local router matches headers, cookies and queryParams only",
                    );
                }
            }
        }
    }
}

fn version(path: &str, version: &VersionSpec, errors: &mut Errors) {
    match (&version.url, &version.command) {
        // Whether the URL is one the router can forward to is the local target's to say.
        (Some(_), None) => {}
        (None, Some(command)) => {
            if command.first().is_none_or(|program| program.trim().is_empty()) {
                errors.field(
                    &format!("{path}.command"),
                    "needs a program: [\"./app\", \"--port\", \"{port}\"]",
                );
            }
        }
        _ => errors.field(
            path,
            "set exactly one of url (a running service, http://HOST:PORT) and command (a program weir starts)",
        ),
    }
    if let Some(health) = &version.health_check
        && !health.starts_with('/')
    {
        errors.value(
            &format!("{path}.healthCheck"),
            format!("{health:?}"),
            "a path starting with /",
        );
    }
    if version.url.is_some() && (version.start_timeout.is_some() || !version.env.is_empty()) {
        errors.field(
            path,
            "startTimeout and env apply to a command, not to a url",
        );
    }
}
