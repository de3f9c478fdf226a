//! The rules of each target kind beyond the shape of its settings.

use crate::error::Errors;
use crate::model::local::VersionSpec;
use crate::model::{KubernetesMode, KubernetesTarget, Plan, Target};

/// Every problem with `spec.target` and with what the target cannot do with the plan.
pub(super) fn target(target: &Target, plan: &Plan, errors: &mut Errors) {
    if let Target::Local(local) = target {
        for (name, version) in [("primary", &local.primary), ("canary", &local.canary)] {
            self::version(&format!("spec.target.{name}"), version, errors);
        }
    }
    if let Target::Kubernetes(kubernetes) = target {
        self::kubernetes(kubernetes, errors);
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

/// The settings each mode of a Kubernetes target reads; any other mode refuses them, so a
/// setting that would be ignored is named instead.
fn kubernetes(kubernetes: &KubernetesTarget, errors: &mut Errors) {
    use KubernetesMode::{Copy, Managed, Revisions};
    let mode = kubernetes.mode();
    let settings: [(&str, bool, &[KubernetesMode]); 10] = [
        ("targetRef", kubernetes.target_ref.is_some(), &[Copy]),
        (
            "autoscalerRef",
            kubernetes.autoscaler_ref.is_some(),
            &[Copy, Revisions],
        ),
        ("component", kubernetes.component.is_some(), &[Revisions]),
        ("selector", kubernetes.selector.is_some(), &[Revisions]),
        ("revision", kubernetes.revision.is_some(), &[Revisions]),
        (
            "revisionLabel",
            kubernetes.revision_label.is_some(),
            &[Revisions],
        ),
        ("statusTo", kubernetes.status_to.is_some(), &[Revisions]),
        ("template", kubernetes.template.is_some(), &[Managed]),
        ("replicas", kubernetes.replicas.is_some(), &[Managed]),
        ("skipCanary", kubernetes.skip_canary.is_some(), &[Managed]),
    ];
    for (name, set, modes) in settings {
        if set && !modes.contains(&mode) {
            let modes: Vec<&str> = modes.iter().map(|mode| mode.as_str()).collect();
            errors.field(
                &format!("spec.target.{name}"),
                format!(
                    "is a setting of mode {} only; this rollout's mode is {} (spec.target.mode: {})",
                    modes.join(" or "),
                    mode.as_str(),
                    KubernetesMode::NAMES
                ),
            );
        }
    }
    match mode {
        Copy => {
            if kubernetes.target_ref.is_none() {
                errors.field(
                    "spec.target.targetRef",
                    "is required but missing: the Deployment to roll out, {apiVersion: apps/v1, kind: Deployment, name: NAME} (or set spec.target.mode: revisions or managed)",
                );
            }
        }
        Revisions => {
            if kubernetes.component.is_none() && kubernetes.selector.is_none() {
                errors.field(
                    "spec.target.component",
                    "is required but missing: mode revisions needs the component whose revisions are rolled out, `component: NAME` (its Deployments labelled app.oam.dev/component=NAME) or `selector: {LABEL: VALUE}`",
                );
            }
            for (name, value) in [
                ("component", &kubernetes.component),
                ("revision", &kubernetes.revision),
                ("revisionLabel", &kubernetes.revision_label),
            ] {
                if value.as_deref().is_some_and(str::is_empty) {
                    errors.field(&format!("spec.target.{name}"), "must not be empty");
                }
            }
            if kubernetes
                .selector
                .as_ref()
                .is_some_and(|selector| selector.is_empty())
            {
                errors.field(
                    "spec.target.selector",
                    "must name at least one label, e.g. {app.oam.dev/component: frontend}",
                );
            }
            if let Some(owner) = &kubernetes.status_to {
                for (name, value) in [
                    ("apiVersion", &owner.api_version),
                    ("kind", &owner.kind),
                ] {
                    if value.is_none() {
                        errors.field(
                            &format!("spec.target.statusTo.{name}"),
                            "is required but missing: statusTo names an object by apiVersion, kind and name, e.g. {apiVersion: core.oam.dev/v1beta1, kind: Application, name: shop}",
                        );
                    }
                }
            }
        }
        Managed => match &kubernetes.template {
            None => errors.field(
                "spec.target.template",
                "is required but missing: mode managed needs the pod template of the workload, {metadata: {labels: ...}, spec: {containers: [{name: ..., image: ...}]}}",
            ),
            Some(template) => pod_template(template, errors),
        },
    }
}

/// The shape of a managed rollout's pod template, as far as weir relies on it.
fn pod_template(template: &serde_json::Value, errors: &mut Errors) {
    const PATH: &str = "spec.target.template";
    if !template.is_object() {
        errors.field(PATH, "must be a pod template (a map with spec.containers)");
        return;
    }
    let containers = template
        .get("spec")
        .and_then(|spec| spec.get("containers"))
        .and_then(serde_json::Value::as_array);
    match containers {
        Some(containers) if !containers.is_empty() => {
            for (index, container) in containers.iter().enumerate() {
                for field in ["name", "image"] {
                    let given = container
                        .get(field)
                        .and_then(serde_json::Value::as_str)
                        .is_some_and(|text| !text.is_empty());
                    if !given {
                        errors.field(
                            &format!("{PATH}.spec.containers[{index}].{field}"),
                            "is required but missing",
                        );
                    }
                }
            }
        }
        _ => errors.field(
            &format!("{PATH}.spec.containers"),
            "is required but missing: at least one container, {name: app, image: IMAGE}",
        ),
    }
    if let Some(labels) = template
        .get("metadata")
        .and_then(|metadata| metadata.get("labels"))
        .and_then(serde_json::Value::as_object)
        && labels.keys().any(|label| label.starts_with("weir.dev/"))
    {
        errors.field(
            &format!("{PATH}.metadata.labels"),
            "labels weir.dev/* are weir's own (it selects the primary's and the canary's pods with them)",
        );
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
