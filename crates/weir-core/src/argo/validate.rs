//! Argo's validation rules (`pkg/apis/rollouts/validation`, the analysis controller's spec
//! checks) and what weir runs, with every error named by its path in the Argo document.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::ArgoObject;
use super::expr::Expr;
use super::types::{
    AnalysisArg, AnalysisRun, AnalysisTemplate, AntiAffinity, BlueGreenStrategy, CanaryStep,
    CanaryStrategy, Experiment, IntOrString, Metadata, Metric, MetricProvider, Rollout,
    RolloutAnalysis, StepExperiment, StringMatch, TrafficRouting,
};
use crate::error::{FieldError, Warning};
use crate::units::GoDuration;
use crate::validate::is_dns_subdomain;

/// The routers weir drives for an Argo Rollout, for messages.
pub(super) const ROUTERS: &str = "istio, nginx, smi, traefik, apisix and the Gateway API plugin \
     (plugins: argoproj-labs/gatewayAPI); without trafficRouting, the basic canary";

/// The metric providers weir queries, for messages.
const PROVIDERS: &str = "prometheus, web, job, datadog, newRelic, cloudWatch, graphite, influxdb";

/// The Gateway API router plugin.
pub(super) const GATEWAY_API_PLUGIN: &str = "argoproj-labs/gatewayAPI";

/// Checks a read object.
pub(super) fn object(
    object: &ArgoObject,
    source: &Value,
    warnings: &mut Vec<Warning>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match object {
        ArgoObject::Rollout(rollout) => self::rollout(rollout, &mut errors),
        ArgoObject::AnalysisTemplate(template) => {
            analysis_template(template, source, true, &mut errors);
        }
        ArgoObject::ClusterAnalysisTemplate(template) => {
            analysis_template(template, source, false, &mut errors);
        }
        ArgoObject::AnalysisRun(run) => analysis_run(run, source, &mut errors),
        ArgoObject::Experiment(experiment) => self::experiment(experiment, &mut errors),
    }
    if source.get("status").is_some() {
        warnings.push(Warning::new(
            "status",
            "read and not acted on: it is Argo's runtime state",
        ));
    }
    errors
}

fn metadata(metadata: &Metadata, errors: &mut Vec<FieldError>) {
    match (&metadata.name, &metadata.generate_name) {
        (Some(name), _) if !is_dns_subdomain(name) => errors.push(FieldError::with_value(
            "metadata.name",
            format!("{name:?}"),
            "up to 253 lowercase letters, digits, '-' and '.'",
        )),
        (Some(_), _) | (None, Some(_)) => {}
        (None, None) => errors.push(FieldError::missing(
            "metadata.name",
            "a name of lowercase letters, digits, '-' and '.' (or metadata.generateName)",
        )),
    }
}

// === Rollout ===

fn rollout(rollout: &Rollout, errors: &mut Vec<FieldError>) {
    metadata(&rollout.metadata, errors);
    let spec = &rollout.spec;
    match (&spec.template, &spec.workload_ref) {
        (Some(_), Some(_)) => errors.push(FieldError::new(
            "spec.workloadRef",
            "template and workloadRef cannot both be set: one says what is rolled out",
        )),
        (None, None) => errors.push(FieldError::missing(
            "spec.template",
            "the pod template (or spec.workloadRef naming a Deployment)",
        )),
        (Some(template), None) => pod_template(template, "spec.template", errors),
        (None, Some(workload)) => {
            if workload.name.as_deref().is_none_or(str::is_empty) {
                errors.push(FieldError::missing(
                    "spec.workloadRef.name",
                    "the Deployment whose pod template is rolled out",
                ));
            }
            if let Some(scale_down) = &workload.scale_down
                && !matches!(scale_down.as_str(), "never" | "onsuccess" | "progressively")
            {
                errors.push(FieldError::with_value(
                    "spec.workloadRef.scaleDown",
                    format!("{scale_down:?}"),
                    "one of never, onsuccess, progressively",
                ));
            }
        }
    }
    match &spec.selector {
        None => {
            if spec.template.is_some() {
                errors.push(FieldError::missing(
                    "spec.selector",
                    "the labels of the rollout's pods ({matchLabels: ...})",
                ));
            }
        }
        Some(Value::Object(selector)) if spec.workload_ref.is_none() => {
            let empty = |key: &str| {
                selector.get(key).is_none_or(|value| match value {
                    Value::Object(map) => map.is_empty(),
                    Value::Array(items) => items.is_empty(),
                    _ => false,
                })
            };
            if empty("matchLabels") && empty("matchExpressions") {
                errors.push(FieldError::new(
                    "spec.selector",
                    "is empty: this rollout would select all pods",
                ));
            }
        }
        Some(Value::Object(_)) => {}
        Some(other) => errors.push(FieldError::with_value(
            "spec.selector",
            other,
            "a label selector {matchLabels, matchExpressions}",
        )),
    }
    non_negative(spec.replicas, "spec.replicas", errors);
    non_negative(spec.min_ready_seconds, "spec.minReadySeconds", errors);
    non_negative(
        spec.revision_history_limit,
        "spec.revisionHistoryLimit",
        errors,
    );
    if let Some(deadline) = spec.progress_deadline_seconds
        && deadline <= spec.min_ready_seconds.unwrap_or(0)
    {
        errors.push(FieldError::with_value(
            "spec.progressDeadlineSeconds",
            deadline,
            "must be greater than spec.minReadySeconds",
        ));
    }
    let strategy = spec.strategy.clone().unwrap_or_default();
    match (&strategy.canary, &strategy.blue_green) {
        (Some(_), Some(_)) => errors.push(FieldError::new(
            "spec.strategy",
            "canary and blueGreen are both set: a rollout has one strategy",
        )),
        (None, None) => errors.push(FieldError::missing("spec.strategy", "canary or blueGreen")),
        (Some(canary), None) => self::canary(canary, spec.replicas, errors),
        (None, Some(blue_green)) => self::blue_green(blue_green, errors),
    }
}

fn non_negative(value: Option<i64>, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(value) = value
        && value < 0
    {
        errors.push(FieldError::with_value(path, value, "must be 0 or more"));
    }
}

fn canary(canary: &CanaryStrategy, replicas: Option<i64>, errors: &mut Vec<FieldError>) {
    let base = "spec.strategy.canary";
    let _ = replicas;
    let zero = |value: &Option<IntOrString>| match value {
        Some(IntOrString::Int(0)) => true,
        Some(IntOrString::String(text)) => {
            let digits = text.trim_end_matches('%');
            digits.parse::<i64>() == Ok(0)
        }
        _ => false,
    };
    if zero(&canary.max_surge) && zero(&canary.max_unavailable) {
        errors.push(FieldError::new(
            format!("{base}.maxUnavailable"),
            "maxSurge and maxUnavailable cannot both be 0: no pod could ever be replaced",
        ));
    }
    for (value, field) in [
        (&canary.max_surge, "maxSurge"),
        (&canary.max_unavailable, "maxUnavailable"),
    ] {
        match value {
            Some(IntOrString::Int(number)) if *number < 0 => errors.push(FieldError::with_value(
                format!("{base}.{field}"),
                number,
                "a count of pods (0 or more) or a percentage",
            )),
            Some(IntOrString::String(text))
                if text.trim_end_matches('%').parse::<u32>().is_err() =>
            {
                errors.push(FieldError::with_value(
                    format!("{base}.{field}"),
                    format!("{text:?}"),
                    "a count of pods or a percentage such as \"25%\"",
                ));
            }
            _ => {}
        }
    }
    let routing = canary.traffic_routing.as_ref();
    let managed_routes: Vec<&str> = routing
        .and_then(|routing| routing.managed_routes.as_ref())
        .map(|routes| routes.iter().map(|route| route.name.as_str()).collect())
        .unwrap_or_default();
    let max_weight = routing
        .and_then(|routing| routing.max_traffic_weight)
        .unwrap_or(100);
    if let Some(routing) = routing {
        traffic_routing(routing, base, errors);
        // Argo names the Services for every router but Istio's subset-level split and plugins.
        let services_required = routing.smi.is_some()
            || routing.nginx.is_some()
            || routing
                .istio
                .as_ref()
                .is_some_and(|istio| istio.destination_rule.is_none());
        for (value, field) in [
            (&canary.canary_service, "canaryService"),
            (&canary.stable_service, "stableService"),
        ] {
            if services_required && value.as_deref().is_none_or(str::is_empty) {
                errors.push(FieldError::missing(
                    format!("{base}.{field}"),
                    "with trafficRouting, the canary and the stable Service are named",
                ));
            }
        }
        if let (Some(canary_service), Some(stable_service)) =
            (&canary.canary_service, &canary.stable_service)
            && canary_service == stable_service
        {
            errors.push(FieldError::with_value(
                format!("{base}.stableService"),
                format!("{stable_service:?}"),
                "the stable Service must differ from the canary Service",
            ));
        }
    } else {
        for (value, field) in [
            (&canary.scale_down_delay_seconds, "scaleDownDelaySeconds"),
            (&canary.min_pods_per_replica_set, "minPodsPerReplicaSet"),
        ] {
            if value.is_some() {
                errors.push(FieldError::new(
                    format!("{base}.{field}"),
                    "only applies with trafficRouting",
                ));
            }
        }
        if canary.dynamic_stable_scale == Some(true) {
            errors.push(FieldError::new(
                format!("{base}.dynamicStableScale"),
                "only applies with trafficRouting",
            ));
        }
    }
    if canary.dynamic_stable_scale == Some(true) && canary.scale_down_delay_seconds.is_some() {
        errors.push(FieldError::new(
            format!("{base}.scaleDownDelaySeconds"),
            "cannot be set with dynamicStableScale",
        ));
    }
    anti_affinity(
        canary.anti_affinity.as_ref(),
        &format!("{base}.antiAffinity"),
        errors,
    );
    if let Some(threshold) = &canary.replica_progress_threshold {
        let path = format!("{base}.replicaProgressThreshold");
        match threshold.kind.as_str() {
            "Percent" if !(0..=100).contains(&threshold.value) => {
                errors.push(FieldError::with_value(
                    format!("{path}.value"),
                    threshold.value,
                    "a percentage from 0 to 100",
                ));
            }
            "Pods" if threshold.value < 0 => errors.push(FieldError::with_value(
                format!("{path}.value"),
                threshold.value,
                "a count of pods, 0 or more",
            )),
            "Percent" | "Pods" => {}
            other => errors.push(FieldError::with_value(
                format!("{path}.type"),
                format!("{other:?}"),
                "Percent or Pods",
            )),
        }
    }
    if canary.ping_pong.is_some() {
        errors.push(FieldError::new(
            format!("{base}.pingPong"),
            "not supported: weir keeps one stable and one canary Service; name them in \
             canaryService and stableService",
        ));
    }
    non_negative(
        canary.scale_down_delay_seconds,
        &format!("{base}.scaleDownDelaySeconds"),
        errors,
    );
    non_negative(
        canary.abort_scale_down_delay_seconds,
        &format!("{base}.abortScaleDownDelaySeconds"),
        errors,
    );
    let istio = routing.is_some_and(|routing| routing.istio.is_some());
    let plugins = routing.is_some_and(|routing| {
        routing
            .plugins
            .as_ref()
            .is_some_and(|plugins| !plugins.is_empty())
    });
    let routers = Routers {
        routed: routing.is_some(),
        header: (istio || plugins, "istio or a router plugin"),
        mirror: (istio, "istio"),
    };
    let uses_routes = canary
        .steps
        .iter()
        .flatten()
        .any(|step| step.set_header_route.is_some() || step.set_mirror_route.is_some());
    if uses_routes && routing.is_some_and(|routing| routing.managed_routes.is_none()) {
        errors.push(FieldError::missing(
            format!("{base}.trafficRouting.managedRoutes"),
            "the routes that setHeaderRoute and setMirrorRoute steps name",
        ));
    }
    let steps = canary.steps.as_deref().unwrap_or_default();
    for (index, step) in steps.iter().enumerate() {
        let path = format!("{base}.steps[{index}]");
        self::step(step, &path, &routers, max_weight, &managed_routes, errors);
    }
    if let Some(analysis) = &canary.analysis {
        let path = format!("{base}.analysis");
        rollout_analysis(analysis, &path, errors);
        if let Some(starting) = analysis.starting_step
            && (starting < 0 || starting as usize > steps.len())
        {
            errors.push(FieldError::with_value(
                format!("{path}.startingStep"),
                starting,
                format!(
                    "a step index from 0 to {} (the number of steps)",
                    steps.len()
                ),
            ));
        }
    }
}

fn traffic_routing(routing: &TrafficRouting, base: &str, errors: &mut Vec<FieldError>) {
    let base = format!("{base}.trafficRouting");
    let mut routers = Vec::new();
    if let Some(istio) = &routing.istio {
        routers.push("istio".to_string());
        match (&istio.virtual_service, &istio.virtual_services) {
            (Some(_), Some(_)) => errors.push(FieldError::new(
                format!("{base}.istio.virtualServices"),
                "virtualService and virtualServices cannot both be set",
            )),
            (None, None) if istio.destination_rule.is_none() => {
                errors.push(FieldError::missing(
                    format!("{base}.istio.virtualService"),
                    "the VirtualService whose routes are split (or virtualServices)",
                ));
            }
            _ => {}
        }
    }
    if let Some(nginx) = &routing.nginx {
        routers.push("nginx".to_string());
        if nginx.stable_ingress.is_none()
            && nginx.stable_ingresses.as_ref().is_none_or(Vec::is_empty)
        {
            errors.push(FieldError::missing(
                format!("{base}.nginx.stableIngress"),
                "the stable Ingress (or stableIngresses)",
            ));
        }
    }
    if routing.smi.is_some() {
        routers.push("smi".to_string());
    }
    if routing.traefik.is_some() {
        routers.push("traefik".to_string());
    }
    if routing.apisix.is_some() {
        routers.push("apisix".to_string());
    }
    let refused = [
        (
            &routing.alb,
            "alb",
            "AWS Application Load Balancer target groups are not a router weir drives",
        ),
        (
            &routing.ambassador,
            "ambassador",
            "Ambassador/Emissary Mappings are not a router weir drives",
        ),
        (
            &routing.app_mesh,
            "appMesh",
            "AWS shut App Mesh down on 2026-09-30; weir does not drive it",
        ),
    ];
    for (value, name, reason) in refused {
        if value.is_some() {
            errors.push(FieldError::new(
                format!("{base}.{name}"),
                format!("not supported: {reason}; weir drives {ROUTERS}"),
            ));
        }
    }
    if let Some(plugins) = &routing.plugins {
        for (name, config) in plugins {
            if name == GATEWAY_API_PLUGIN {
                routers.push("gatewayAPI".to_string());
                if !config.is_object() {
                    errors.push(FieldError::new(
                        format!("{base}.plugins.{name}"),
                        "is not a mapping: the plugin's configuration (httpRoute, httpRoutes, \
                         grpcRoute, ..., namespace)",
                    ));
                }
            } else {
                errors.push(FieldError::new(
                    format!("{base}.plugins.{name}"),
                    format!(
                        "not supported: {name:?} is a router plugin weir does not load; weir \
                         drives {ROUTERS}"
                    ),
                ));
            }
        }
    }
    if routers.len() > 1 {
        errors.push(FieldError::new(
            base.clone(),
            format!(
                "not supported: {} routers ({}) split the traffic together; weir drives one \
                 router per rollout",
                routers.len(),
                routers.join(", ")
            ),
        ));
    }
    if routing.max_traffic_weight.is_some()
        && routing.nginx.is_none()
        && routing.plugins.as_ref().is_none_or(BTreeMap::is_empty)
    {
        errors.push(FieldError::new(
            format!("{base}.maxTrafficWeight"),
            "only applies with nginx or a router plugin",
        ));
    }
    if let Some(weight) = routing.max_traffic_weight
        && weight <= 0
    {
        errors.push(FieldError::with_value(
            format!("{base}.maxTrafficWeight"),
            weight,
            "above 0 (default 100)",
        ));
    }
    let mut seen = BTreeSet::new();
    for (index, route) in routing.managed_routes.iter().flatten().enumerate() {
        if !seen.insert(route.name.as_str()) {
            errors.push(FieldError::with_value(
                format!("{base}.managedRoutes[{index}].name"),
                format!("{:?}", route.name),
                "each managed route is named once",
            ));
        }
    }
}

/// What the rollout's router allows of a step.
struct Routers {
    /// Any router.
    routed: bool,
    /// Header routes (Istio, plugins).
    header: (bool, &'static str),
    /// Mirror routes (Istio).
    mirror: (bool, &'static str),
}

fn step(
    step: &CanaryStep,
    path: &str,
    routers: &Routers,
    max_weight: i64,
    managed_routes: &[&str],
    errors: &mut Vec<FieldError>,
) {
    let routed = routers.routed;
    let exclusive = [
        step.set_weight.is_some(),
        step.pause.is_some(),
        step.analysis.is_some(),
        step.experiment.is_some(),
    ]
    .into_iter()
    .filter(|set| *set)
    .count();
    let others = [
        step.set_canary_scale.is_some(),
        step.set_header_route.is_some(),
        step.set_mirror_route.is_some(),
        step.plugin.is_some(),
    ]
    .into_iter()
    .filter(|set| *set)
    .count();
    if exclusive > 1 {
        errors.push(FieldError::new(
            path,
            "a step has at most one of setWeight, pause, analysis and experiment",
        ));
    } else if exclusive + others == 0 {
        errors.push(FieldError::new(
            path,
            "a step needs one of setWeight, pause, analysis, experiment, setCanaryScale, \
             setHeaderRoute or setMirrorRoute",
        ));
    }
    if let Some(weight) = step.set_weight
        && !(0..=max_weight).contains(&weight)
    {
        errors.push(FieldError::with_value(
            format!("{path}.setWeight"),
            weight,
            format!("a weight from 0 to {max_weight}"),
        ));
    }
    if let Some(pause) = &step.pause
        && let Some(duration) = &pause.duration
        && let Err(message) = pause_seconds(duration)
    {
        errors.push(FieldError::with_value(
            format!("{path}.pause.duration"),
            duration.text(),
            message,
        ));
    }
    if let Some(analysis) = &step.analysis {
        rollout_analysis(analysis, &format!("{path}.analysis"), errors);
    }
    if let Some(experiment) = &step.experiment {
        step_experiment(experiment, &format!("{path}.experiment"), routed, errors);
    }
    if let Some(scale) = &step.set_canary_scale {
        let path = format!("{path}.setCanaryScale");
        if !routed {
            errors.push(FieldError::new(
                path.clone(),
                "requires trafficRouting: without it the canary's share is its share of pods",
            ));
        }
        let set = [
            scale.replicas.is_some(),
            scale.weight.is_some(),
            scale.match_traffic_weight == Some(true),
        ]
        .into_iter()
        .filter(|set| *set)
        .count();
        if set != 1 {
            errors.push(FieldError::new(
                path.clone(),
                "exactly one of replicas, weight or matchTrafficWeight: true",
            ));
        }
        non_negative(scale.replicas, &format!("{path}.replicas"), errors);
        if let Some(weight) = scale.weight
            && !(0..=100).contains(&weight)
        {
            errors.push(FieldError::with_value(
                format!("{path}.weight"),
                weight,
                "a percentage from 0 to 100",
            ));
        }
    }
    if let Some(route) = &step.set_header_route {
        let path = format!("{path}.setHeaderRoute");
        managed_route(
            route.name.as_deref(),
            &path,
            routers.header,
            managed_routes,
            errors,
        );
        for (index, rule) in route.match_rules.iter().flatten().enumerate() {
            string_match(
                &rule.header_value,
                &format!("{path}.match[{index}].headerValue"),
                errors,
            );
        }
    }
    if let Some(route) = &step.set_mirror_route {
        let path = format!("{path}.setMirrorRoute");
        managed_route(
            Some(&route.name),
            &path,
            routers.mirror,
            managed_routes,
            errors,
        );
        if let Some(percentage) = route.percentage
            && !(0..=100).contains(&percentage)
        {
            errors.push(FieldError::with_value(
                format!("{path}.percentage"),
                percentage,
                "a percentage from 0 to 100",
            ));
        }
        for (index, rule) in route.match_rules.iter().flatten().enumerate() {
            let base = format!("{path}.match[{index}]");
            if let Some(method) = &rule.method {
                string_match(method, &format!("{base}.method"), errors);
            }
            if let Some(uri) = &rule.path {
                string_match(uri, &format!("{base}.path"), errors);
            }
            for (name, header) in rule.headers.iter().flatten() {
                string_match(header, &format!("{base}.headers.{name}"), errors);
            }
        }
    }
    if let Some(plugin) = &step.plugin {
        errors.push(FieldError::new(
            format!("{path}.plugin"),
            format!(
                "not supported: step plugins ({:?}) run code weir does not load",
                plugin.name
            ),
        ));
    }
}

fn managed_route(
    name: Option<&str>,
    path: &str,
    supported: (bool, &str),
    managed_routes: &[&str],
    errors: &mut Vec<FieldError>,
) {
    let (supported, routers) = supported;
    if !supported {
        errors.push(FieldError::new(
            path,
            format!("requires trafficRouting with {routers}"),
        ));
        return;
    }
    match name {
        None | Some("") => errors.push(FieldError::missing(
            format!("{path}.name"),
            "a route of trafficRouting.managedRoutes",
        )),
        Some(name) if !managed_routes.contains(&name) => errors.push(FieldError::with_value(
            format!("{path}.name"),
            format!("{name:?}"),
            "not a route of spec.strategy.canary.trafficRouting.managedRoutes",
        )),
        Some(_) => {}
    }
}

fn string_match(value: &StringMatch, path: &str, errors: &mut Vec<FieldError>) {
    let set = [&value.exact, &value.prefix, &value.regex]
        .into_iter()
        .filter(|value| value.is_some())
        .count();
    if set != 1 {
        errors.push(FieldError::new(
            path,
            "exactly one of exact, prefix or regex",
        ));
    }
    if let Some(pattern) = &value.regex
        && let Err(error) = regex_syntax::Parser::new().parse(pattern)
    {
        errors.push(FieldError::with_value(
            format!("{path}.regex"),
            format!("{pattern:?}"),
            format!("not a regular expression: {error}"),
        ));
    }
}

/// A pause's seconds: a number, digits, or a duration with a unit; above 0.
pub(super) fn pause_seconds(duration: &IntOrString) -> Result<GoDuration, String> {
    let parsed = match duration {
        IntOrString::Int(seconds) => GoDuration::parse(&format!("{seconds}s")),
        IntOrString::String(text)
            if text.chars().all(|c| c.is_ascii_digit()) && !text.is_empty() =>
        {
            GoDuration::parse(&format!("{text}s"))
        }
        IntOrString::String(text) => GoDuration::parse(text),
    }
    .map_err(|error| format!("seconds, or a duration such as 30s, 10m, 1h: {error}"))?;
    if parsed.as_millis_i64() < 0 {
        return Err("the duration cannot be negative".into());
    }
    Ok(parsed)
}

fn rollout_analysis(analysis: &RolloutAnalysis, path: &str, errors: &mut Vec<FieldError>) {
    let templates = analysis.templates.as_deref().unwrap_or_default();
    if templates.is_empty() {
        errors.push(FieldError::missing(
            format!("{path}.templates"),
            "at least one {templateName} of an AnalysisTemplate",
        ));
    }
    for (index, template) in templates.iter().enumerate() {
        if template.template_name.as_deref().is_none_or(str::is_empty) {
            errors.push(FieldError::missing(
                format!("{path}.templates[{index}].templateName"),
                "the AnalysisTemplate's name",
            ));
        }
    }
    args(
        analysis.args.as_deref().unwrap_or_default(),
        &format!("{path}.args"),
        ArgsOf::Rollout,
        errors,
    );
}

fn step_experiment(
    experiment: &StepExperiment,
    path: &str,
    routed: bool,
    errors: &mut Vec<FieldError>,
) {
    if let Some(duration) = &experiment.duration {
        duration_field(duration, &format!("{path}.duration"), errors);
    }
    if experiment.templates.is_empty() {
        errors.push(FieldError::missing(
            format!("{path}.templates"),
            "at least one {name, specRef}",
        ));
    }
    let mut names = BTreeSet::new();
    for (index, template) in experiment.templates.iter().enumerate() {
        let base = format!("{path}.templates[{index}]");
        if !names.insert(template.name.as_str()) {
            errors.push(FieldError::with_value(
                format!("{base}.name"),
                format!("{:?}", template.name),
                "each template is named once",
            ));
        }
        if !matches!(template.spec_ref.as_str(), "stable" | "canary") {
            errors.push(FieldError::with_value(
                format!("{base}.specRef"),
                format!("{:?}", template.spec_ref),
                "stable or canary",
            ));
        }
        if template.weight.is_some() && !routed {
            errors.push(FieldError::new(
                format!("{base}.weight"),
                "cannot be set unless trafficRouting is enabled",
            ));
        }
        non_negative(template.replicas, &format!("{base}.replicas"), errors);
    }
    for (index, analysis) in experiment.analyses.iter().flatten().enumerate() {
        args(
            analysis.args.as_deref().unwrap_or_default(),
            &format!("{path}.analyses[{index}].args"),
            ArgsOf::Experiment,
            errors,
        );
    }
}

fn blue_green(blue_green: &BlueGreenStrategy, errors: &mut Vec<FieldError>) {
    let base = "spec.strategy.blueGreen";
    match &blue_green.active_service {
        None => errors.push(FieldError::missing(
            format!("{base}.activeService"),
            "the Service that serves users",
        )),
        Some(active) if active.is_empty() => errors.push(FieldError::missing(
            format!("{base}.activeService"),
            "the Service that serves users",
        )),
        Some(active) => {
            if blue_green.preview_service.as_deref() == Some(active.as_str()) {
                errors.push(FieldError::with_value(
                    format!("{base}.previewService"),
                    format!("{active:?}"),
                    "the preview Service must differ from the active Service",
                ));
            }
        }
    }
    anti_affinity(
        blue_green.anti_affinity.as_ref(),
        &format!("{base}.antiAffinity"),
        errors,
    );
    non_negative(
        blue_green.auto_promotion_seconds,
        &format!("{base}.autoPromotionSeconds"),
        errors,
    );
    non_negative(
        blue_green.preview_replica_count,
        &format!("{base}.previewReplicaCount"),
        errors,
    );
    non_negative(
        blue_green.scale_down_delay_seconds,
        &format!("{base}.scaleDownDelaySeconds"),
        errors,
    );
    for (analysis, field) in [
        (&blue_green.pre_promotion_analysis, "prePromotionAnalysis"),
        (&blue_green.post_promotion_analysis, "postPromotionAnalysis"),
    ] {
        if let Some(analysis) = analysis {
            rollout_analysis(analysis, &format!("{base}.{field}"), errors);
        }
    }
}

fn anti_affinity(value: Option<&AntiAffinity>, path: &str, errors: &mut Vec<FieldError>) {
    let Some(value) = value else {
        return;
    };
    let preferred = &value.preferred_during_scheduling_ignored_during_execution;
    let required = &value.required_during_scheduling_ignored_during_execution;
    if preferred.is_some() == required.is_some() {
        errors.push(FieldError::new(
            path,
            "exactly one of preferredDuringSchedulingIgnoredDuringExecution and \
             requiredDuringSchedulingIgnoredDuringExecution",
        ));
    }
    if let Some(preferred) = preferred
        && !(1..=100).contains(&preferred.weight)
    {
        errors.push(FieldError::with_value(
            format!("{path}.preferredDuringSchedulingIgnoredDuringExecution.weight"),
            preferred.weight,
            "from 1 to 100",
        ));
    }
}

// === arguments ===

#[derive(Clone, Copy, PartialEq, Eq)]
enum ArgsOf {
    /// A template's: a value, a Secret's key, or none (the Rollout gives it).
    Template,
    /// A Rollout's: a value, the pod-template hash or a field of the Rollout.
    Rollout,
    /// An Experiment's: a value, or the fields a Rollout's experiment step offers.
    Experiment,
}

fn args(args: &[AnalysisArg], path: &str, of: ArgsOf, errors: &mut Vec<FieldError>) {
    let mut names = BTreeSet::new();
    for (index, arg) in args.iter().enumerate() {
        let base = format!("{path}[{index}]");
        if arg.name.is_empty() {
            errors.push(FieldError::missing(
                format!("{base}.name"),
                "the argument's name",
            ));
        } else if !names.insert(arg.name.as_str()) {
            errors.push(FieldError::with_value(
                format!("{base}.name"),
                format!("{:?}", arg.name),
                "each argument is named once",
            ));
        }
        let Some(from) = &arg.value_from else {
            if arg.value.is_none() && of != ArgsOf::Template {
                errors.push(FieldError::missing(
                    format!("{base}.value"),
                    "a value or valueFrom",
                ));
            }
            continue;
        };
        if arg.value.is_some() {
            errors.push(FieldError::new(
                format!("{base}.valueFrom"),
                "value and valueFrom cannot both be set",
            ));
        }
        let set = [
            from.secret_key_ref.is_some(),
            from.pod_template_hash_value.is_some(),
            from.field_ref.is_some(),
        ]
        .into_iter()
        .filter(|set| *set)
        .count();
        if set != 1 {
            errors.push(FieldError::new(
                format!("{base}.valueFrom"),
                "exactly one of secretKeyRef, podTemplateHashValue or fieldRef",
            ));
        }
        if from.secret_key_ref.is_some() && of == ArgsOf::Rollout {
            errors.push(FieldError::new(
                format!("{base}.valueFrom.secretKeyRef"),
                "unknown field; a Rollout's argument comes from podTemplateHashValue or \
                 fieldRef (secretKeyRef belongs in the AnalysisTemplate)",
            ));
        }
        if of == ArgsOf::Template
            && (from.pod_template_hash_value.is_some() || from.field_ref.is_some())
        {
            errors.push(FieldError::new(
                format!("{base}.valueFrom"),
                "a template's argument comes from a value or secretKeyRef; \
                 podTemplateHashValue and fieldRef are given by the Rollout",
            ));
        }
        if let Some(hash) = &from.pod_template_hash_value
            && !matches!(hash.as_str(), "Stable" | "Latest")
        {
            errors.push(FieldError::with_value(
                format!("{base}.valueFrom.podTemplateHashValue"),
                format!("{hash:?}"),
                "Stable or Latest",
            ));
        }
        if let Some(field) = &from.field_ref
            && field.field_path.trim().is_empty()
        {
            errors.push(FieldError::missing(
                format!("{base}.valueFrom.fieldRef.fieldPath"),
                "a path into the Rollout, e.g. metadata.labels['env']",
            ));
        }
        if let Some(secret) = &from.secret_key_ref
            && (secret.name.is_empty() || secret.key.is_empty())
        {
            errors.push(FieldError::missing(
                format!("{base}.valueFrom.secretKeyRef"),
                "the Secret's name and key",
            ));
        }
    }
}

// === AnalysisTemplate, AnalysisRun ===

fn analysis_template(
    template: &AnalysisTemplate,
    source: &Value,
    namespaced: bool,
    errors: &mut Vec<FieldError>,
) {
    metadata(&template.metadata, errors);
    if !namespaced && template.metadata.namespace.is_some() {
        // Kubernetes drops a cluster-scoped object's namespace; it is harmless, not an error.
    }
    let spec = &template.spec;
    let declared = args_declared(spec.args.as_deref().unwrap_or_default());
    args(
        spec.args.as_deref().unwrap_or_default(),
        "spec.args",
        ArgsOf::Template,
        errors,
    );
    let metrics = spec.metrics.as_deref().unwrap_or_default();
    if metrics.is_empty() && spec.templates.as_ref().is_none_or(Vec::is_empty) {
        errors.push(FieldError::missing(
            "spec.metrics",
            "at least one metric (or spec.templates)",
        ));
    }
    self::metrics(metrics, source, &declared, errors);
    for (index, nested) in spec.templates.iter().flatten().enumerate() {
        if nested.template_name.as_deref().is_none_or(str::is_empty) {
            errors.push(FieldError::missing(
                format!("spec.templates[{index}].templateName"),
                "the nested template's name",
            ));
        }
    }
}

fn analysis_run(run: &AnalysisRun, source: &Value, errors: &mut Vec<FieldError>) {
    metadata(&run.metadata, errors);
    let spec = &run.spec;
    args(
        spec.args.as_deref().unwrap_or_default(),
        "spec.args",
        ArgsOf::Template,
        errors,
    );
    let declared = args_declared(spec.args.as_deref().unwrap_or_default());
    if spec.metrics.is_empty() {
        errors.push(FieldError::missing("spec.metrics", "at least one metric"));
    }
    self::metrics(&spec.metrics, source, &declared, errors);
}

fn args_declared(args: &[AnalysisArg]) -> BTreeSet<String> {
    args.iter().map(|arg| arg.name.clone()).collect()
}

fn metrics(
    metrics: &[Metric],
    source: &Value,
    declared: &BTreeSet<String>,
    errors: &mut Vec<FieldError>,
) {
    let mut names = BTreeSet::new();
    for (index, metric) in metrics.iter().enumerate() {
        let base = format!("spec.metrics[{index}]");
        if metric.name.is_empty() {
            errors.push(FieldError::missing(
                format!("{base}.name"),
                "the metric's name",
            ));
        } else if !names.insert(metric.name.as_str()) {
            errors.push(FieldError::with_value(
                format!("{base}.name"),
                format!("{:?}", metric.name),
                "each metric is named once",
            ));
        }
        self::metric(metric, &base, errors);
        if let Some(raw) = source.pointer(&format!("/spec/metrics/{index}")) {
            placeholders(raw, &base, declared, errors);
        }
    }
}

fn metric(metric: &Metric, base: &str, errors: &mut Vec<FieldError>) {
    if let Some(interval) = &metric.interval {
        duration_field(interval, &format!("{base}.interval"), errors);
    }
    if let Some(delay) = &metric.initial_delay {
        duration_field(delay, &format!("{base}.initialDelay"), errors);
    }
    let count = limit(&metric.count, &format!("{base}.count"), 0, errors);
    let failure_limit = limit(
        &metric.failure_limit,
        &format!("{base}.failureLimit"),
        -1,
        errors,
    );
    let inconclusive_limit = limit(
        &metric.inconclusive_limit,
        &format!("{base}.inconclusiveLimit"),
        0,
        errors,
    );
    let _ = limit(
        &metric.consecutive_error_limit,
        &format!("{base}.consecutiveErrorLimit"),
        0,
        errors,
    );
    let success_limit = limit(
        &metric.consecutive_success_limit,
        &format!("{base}.consecutiveSuccessLimit"),
        0,
        errors,
    );
    if let Some(count) = count {
        if count > 1 && metric.interval.is_none() {
            errors.push(FieldError::missing(
                format!("{base}.interval"),
                format!("count is {count}: measurements more than one need an interval"),
            ));
        }
        if count > 0 {
            let needed = failure_limit.unwrap_or(0).max(0) + success_limit.unwrap_or(0);
            if count < needed {
                errors.push(FieldError::with_value(
                    format!("{base}.count"),
                    count,
                    format!("must be at least failureLimit + consecutiveSuccessLimit ({needed})"),
                ));
            }
            if let Some(inconclusive) = inconclusive_limit
                && count < inconclusive
            {
                errors.push(FieldError::with_value(
                    format!("{base}.count"),
                    count,
                    format!("must be at least inconclusiveLimit ({inconclusive})"),
                ));
            }
        }
    }
    if failure_limit == Some(-1) && success_limit.is_none_or(|limit| limit == 0) {
        // Argo: failureLimit and consecutiveSuccessLimit cannot both be disabled.
        if metric.consecutive_success_limit.is_some() {
            errors.push(FieldError::new(
                format!("{base}.failureLimit"),
                "failureLimit and consecutiveSuccessLimit cannot both be disabled",
            ));
        }
    }
    for (condition, field) in [
        (&metric.success_condition, "successCondition"),
        (&metric.failure_condition, "failureCondition"),
    ] {
        if let Some(text) = condition
            && let Err(error) = Expr::parse(text)
        {
            errors.push(FieldError::with_value(
                format!("{base}.{field}"),
                format!("{text:?}"),
                format!(
                    "not supported: {error}; weir evaluates the subset of Argo's expression \
                     language that reads result with comparisons, &&, ||, !, arithmetic and \
                     {}",
                    super::expr::FUNCTIONS
                ),
            ));
        }
    }
    provider(&metric.provider, &format!("{base}.provider"), errors);
}

/// An int-or-string limit: a number at least `least`, or a `{{args.x}}` placeholder (known
/// only when the run is made). Returns the number when there is one.
fn limit(
    value: &Option<IntOrString>,
    path: &str,
    least: i64,
    errors: &mut Vec<FieldError>,
) -> Option<i64> {
    match value {
        None => None,
        Some(IntOrString::Int(number)) if *number >= least => Some(*number),
        Some(IntOrString::Int(number)) => {
            errors.push(FieldError::with_value(
                path,
                number,
                format!("must be {least} or more"),
            ));
            None
        }
        Some(IntOrString::String(text)) if text.contains("{{") => None,
        Some(IntOrString::String(text)) => match text.trim().parse::<i64>() {
            Ok(number) if number >= least => Some(number),
            _ => {
                errors.push(FieldError::with_value(
                    path,
                    format!("{text:?}"),
                    format!("a whole number, {least} or more, or an {{{{args.NAME}}}} placeholder"),
                ));
                None
            }
        },
    }
}

fn duration_field(text: &str, path: &str, errors: &mut Vec<FieldError>) {
    if text.contains("{{") {
        return;
    }
    if let Err(error) = GoDuration::parse(text) {
        errors.push(FieldError::with_value(
            path,
            format!("{text:?}"),
            format!("a duration such as 30s, 5m, 1h: {error}"),
        ));
    }
}

fn provider(provider: &MetricProvider, base: &str, errors: &mut Vec<FieldError>) {
    let MetricProvider {
        prometheus,
        web,
        job,
        datadog,
        new_relic,
        cloud_watch,
        graphite,
        influxdb,
        kayenta,
        wavefront,
        skywalking,
        plugin,
    } = provider;
    let set: Vec<&str> = [
        (prometheus.is_some(), "prometheus"),
        (web.is_some(), "web"),
        (job.is_some(), "job"),
        (datadog.is_some(), "datadog"),
        (new_relic.is_some(), "newRelic"),
        (cloud_watch.is_some(), "cloudWatch"),
        (graphite.is_some(), "graphite"),
        (influxdb.is_some(), "influxdb"),
        (kayenta.is_some(), "kayenta"),
        (wavefront.is_some(), "wavefront"),
        (skywalking.is_some(), "skywalking"),
        (plugin.is_some(), "plugin"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    match set.len() {
        0 => errors.push(FieldError::missing(
            base,
            format!("exactly one provider: {PROVIDERS}"),
        )),
        1 => {}
        _ => errors.push(FieldError::new(
            base,
            format!(
                "has {} providers ({}): a metric has exactly one",
                set.len(),
                set.join(", ")
            ),
        )),
    }
    let refused = [
        (
            kayenta.is_some(),
            "kayenta",
            "weir judges the canary itself (the sequential judge) and does not call a Kayenta \
             server",
        ),
        (
            wavefront.is_some(),
            "wavefront",
            "weir has no Wavefront (Aria Operations for Applications) provider",
        ),
        (
            skywalking.is_some(),
            "skywalking",
            "weir has no Apache SkyWalking provider",
        ),
        (
            plugin.is_some(),
            "plugin",
            "metric plugins run code weir does not load",
        ),
    ];
    for (set, name, reason) in refused {
        if set {
            errors.push(FieldError::new(
                format!("{base}.{name}"),
                format!("not supported: {reason}; weir queries {PROVIDERS}"),
            ));
        }
    }
    if let Some(prometheus) = prometheus {
        if prometheus
            .query
            .as_deref()
            .is_none_or(|query| query.trim().is_empty())
        {
            errors.push(FieldError::missing(
                format!("{base}.prometheus.query"),
                "the PromQL query",
            ));
        }
        if let Some(timeout) = prometheus.timeout
            && timeout <= 0
        {
            errors.push(FieldError::with_value(
                format!("{base}.prometheus.timeout"),
                timeout,
                "seconds, above 0",
            ));
        }
    }
    if let Some(web) = web {
        if web.url.trim().is_empty() {
            errors.push(FieldError::missing(
                format!("{base}.web.url"),
                "the URL called",
            ));
        }
        if let Some(method) = &web.method
            && !matches!(method.as_str(), "GET" | "POST" | "PUT")
        {
            errors.push(FieldError::with_value(
                format!("{base}.web.method"),
                format!("{method:?}"),
                "GET, POST or PUT",
            ));
        }
        if web.body.is_some() && web.json_body.is_some() {
            errors.push(FieldError::new(
                format!("{base}.web.jsonBody"),
                "body and jsonBody cannot both be set",
            ));
        }
        if let Some(timeout) = web.timeout_seconds
            && timeout <= 0
        {
            errors.push(FieldError::with_value(
                format!("{base}.web.timeoutSeconds"),
                timeout,
                "seconds, above 0",
            ));
        }
    }
    if let Some(job) = job {
        match job.spec.get("template") {
            _ if !job.spec.is_object() => errors.push(FieldError::new(
                format!("{base}.job.spec"),
                "is not a mapping: a batch/v1 Job spec",
            )),
            Some(template) => pod_template(template, &format!("{base}.job.spec.template"), errors),
            None => errors.push(FieldError::missing(
                format!("{base}.job.spec.template"),
                "the Job's pod template",
            )),
        }
    }
    if let Some(datadog) = datadog {
        if datadog.query.is_none() && datadog.queries.as_ref().is_none_or(BTreeMap::is_empty) {
            errors.push(FieldError::missing(
                format!("{base}.datadog.query"),
                "the Datadog query (or queries with a formula)",
            ));
        }
        if let Some(version) = &datadog.api_version
            && !matches!(version.as_str(), "v1" | "v2")
        {
            errors.push(FieldError::with_value(
                format!("{base}.datadog.apiVersion"),
                format!("{version:?}"),
                "v1 or v2",
            ));
        }
        if let Some(aggregator) = &datadog.aggregator
            && !matches!(
                aggregator.as_str(),
                "avg" | "min" | "max" | "sum" | "last" | "percentile" | "mean" | "l2norm" | "area"
            )
        {
            errors.push(FieldError::with_value(
                format!("{base}.datadog.aggregator"),
                format!("{aggregator:?}"),
                "avg, min, max, sum, last, percentile, mean, l2norm or area",
            ));
        }
        for (value, field) in [
            (&datadog.interval, "interval"),
            (&datadog.request_timeout, "requestTimeout"),
        ] {
            if let Some(value) = value {
                duration_field(value, &format!("{base}.datadog.{field}"), errors);
            }
        }
    }
    if let Some(new_relic) = new_relic
        && new_relic.query.trim().is_empty()
    {
        errors.push(FieldError::missing(
            format!("{base}.newRelic.query"),
            "the NRQL query",
        ));
    }
    if let Some(cloud_watch) = cloud_watch
        && cloud_watch.metric_data_queries.is_empty()
    {
        errors.push(FieldError::missing(
            format!("{base}.cloudWatch.metricDataQueries"),
            "at least one query",
        ));
    }
    for (set, query, name) in [
        (
            graphite.is_some(),
            graphite
                .as_ref()
                .and_then(|graphite| graphite.query.as_deref()),
            "graphite",
        ),
        (
            influxdb.is_some(),
            influxdb
                .as_ref()
                .and_then(|influxdb| influxdb.query.as_deref()),
            "influxdb",
        ),
    ] {
        if set && query.is_none_or(|query| query.trim().is_empty()) {
            errors.push(FieldError::missing(
                format!("{base}.{name}.query"),
                format!("the {name} query"),
            ));
        }
    }
}

/// Every `{{ ... }}` in a metric must be `args.NAME` of a declared argument: Argo fails the run
/// on any other.
fn placeholders(
    raw: &Value,
    base: &str,
    declared: &BTreeSet<String>,
    errors: &mut Vec<FieldError>,
) {
    fn walk(value: &Value, path: String, found: &mut Vec<(String, String)>) {
        match value {
            Value::String(text) => {
                let mut rest = text.as_str();
                while let Some(start) = rest.find("{{") {
                    let after = &rest[start + 2..];
                    let Some(end) = after.find("}}") else {
                        break;
                    };
                    found.push((path.clone(), after[..end].trim().to_string()));
                    rest = &after[end + 2..];
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    walk(item, format!("{path}[{index}]"), found);
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    walk(item, format!("{path}.{key}"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(raw, base.to_string(), &mut found);
    for (path, placeholder) in found {
        match placeholder.strip_prefix("args.") {
            Some(name) if declared.contains(name) => {}
            Some(name) => errors.push(FieldError::new(
                path,
                format!("{{{{{placeholder}}}}}: argument {name:?} is not declared in spec.args"),
            )),
            None => errors.push(FieldError::new(
                path,
                format!(
                    "{{{{{placeholder}}}}} cannot be resolved: a metric's placeholders are \
                     {{{{args.NAME}}}}"
                ),
            )),
        }
    }
}

// === pod templates ===

/// The part of a pod template the API server would refuse: no containers, a container without
/// a name or an image, a name used twice, a resource quantity that is not one.
fn pod_template(template: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if !template.is_object() {
        errors.push(FieldError::new(
            path,
            "is not a mapping: a pod template {metadata, spec}",
        ));
        return;
    }
    let spec = template.get("spec");
    match spec.and_then(|spec| spec.get("containers")) {
        Some(Value::Array(containers)) if !containers.is_empty() => {}
        _ => {
            errors.push(FieldError::missing(
                format!("{path}.spec.containers"),
                "at least one container {name, image}",
            ));
        }
    }
    let mut names = BTreeSet::new();
    for list in ["containers", "initContainers"] {
        let Some(Value::Array(containers)) = spec.and_then(|spec| spec.get(list)) else {
            continue;
        };
        for (index, container) in containers.iter().enumerate() {
            let base = format!("{path}.spec.{list}[{index}]");
            for field in ["name", "image"] {
                let given = container
                    .get(field)
                    .and_then(Value::as_str)
                    .is_some_and(|text| !text.is_empty());
                if !given {
                    errors.push(FieldError::missing(
                        format!("{base}.{field}"),
                        format!("the container's {field}"),
                    ));
                }
            }
            if let Some(name) = container.get("name").and_then(Value::as_str)
                && !names.insert(name.to_string())
            {
                errors.push(FieldError::with_value(
                    format!("{base}.name"),
                    format!("{name:?}"),
                    "each container of a pod is named once",
                ));
            }
            for kind in ["requests", "limits"] {
                let Some(Value::Object(resources)) = container
                    .get("resources")
                    .and_then(|resources| resources.get(kind))
                else {
                    continue;
                };
                for (resource, quantity) in resources {
                    let valid = match quantity {
                        Value::Number(_) => true,
                        Value::String(text) => text.contains("{{") || is_quantity(text),
                        _ => false,
                    };
                    if !valid {
                        errors.push(FieldError::with_value(
                            format!("{base}.resources.{kind}.{resource}"),
                            quantity,
                            "a Kubernetes quantity such as 128Mi, 0.5 or 500m",
                        ));
                    }
                }
            }
        }
    }
}

/// Kubernetes' quantity syntax: a signed decimal number and an optional binary-SI (`Ki` ...
/// `Ei`), decimal-SI (`n`, `u`, `m`, `k`, `M`, ... `E`) or exponent (`e3`) suffix.
pub(super) fn is_quantity(text: &str) -> bool {
    fn number(text: &str) -> Option<&str> {
        let digits = text.chars().take_while(char::is_ascii_digit).count();
        let mut rest = &text[digits..];
        let mut fraction = 0;
        if let Some(after) = rest.strip_prefix('.') {
            fraction = after.chars().take_while(char::is_ascii_digit).count();
            rest = &after[fraction..];
        }
        (digits + fraction > 0).then_some(rest)
    }
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let Some(suffix) = number(unsigned) else {
        return false;
    };
    match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        exponent => exponent
            .strip_prefix(['e', 'E'])
            .map(|rest| rest.strip_prefix(['+', '-']).unwrap_or(rest))
            .and_then(number)
            .is_some_and(str::is_empty),
    }
}

// === Experiment ===

fn experiment(experiment: &Experiment, errors: &mut Vec<FieldError>) {
    metadata(&experiment.metadata, errors);
    let spec = &experiment.spec;
    if let Some(duration) = &spec.duration {
        duration_field(duration, "spec.duration", errors);
    }
    if spec.templates.is_empty() {
        errors.push(FieldError::missing(
            "spec.templates",
            "at least one {name, selector, template}",
        ));
    }
    let mut names = BTreeSet::new();
    for (index, template) in spec.templates.iter().enumerate() {
        let base = format!("spec.templates[{index}]");
        if !names.insert(template.name.as_str()) {
            errors.push(FieldError::with_value(
                format!("{base}.name"),
                format!("{:?}", template.name),
                "each template is named once",
            ));
        }
        non_negative(template.replicas, &format!("{base}.replicas"), errors);
        pod_template(&template.template, &format!("{base}.template"), errors);
    }
    let mut analyses = BTreeSet::new();
    for (index, analysis) in spec.analyses.iter().flatten().enumerate() {
        let base = format!("spec.analyses[{index}]");
        if !analyses.insert(analysis.name.as_str()) {
            errors.push(FieldError::with_value(
                format!("{base}.name"),
                format!("{:?}", analysis.name),
                "each analysis is named once",
            ));
        }
        args(
            analysis.args.as_deref().unwrap_or_default(),
            &format!("{base}.args"),
            ArgsOf::Experiment,
            errors,
        );
    }
    non_negative(
        spec.progress_deadline_seconds,
        "spec.progressDeadlineSeconds",
        errors,
    );
    non_negative(
        spec.scale_down_delay_seconds,
        "spec.scaleDownDelaySeconds",
        errors,
    );
}
