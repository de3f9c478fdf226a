//! An Argo canary Rollout -> a weir Rollout with the same plan.
//!
//! `setWeight: N` becomes a step of weight N (scaled from `maxTrafficWeight` to 100), and a
//! `pause` right after it becomes that step's pause (`{duration}` timed, `{}` until `weir
//! resume`). The pod template becomes a `kubernetes` target in mode `managed`, a `workloadRef`
//! one in mode `copy` (Flagger's way: weir copies the Deployment into a primary), and the router
//! becomes the target's `provider` (`kubernetes`, the basic canary by replica counts, without one).
//! Fields that change nothing about the plan are kept in [`UNMAPPED_ANNOTATION`] with a warning;
//! fields whose behaviour weir's plan cannot express refuse the conversion, named.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::types::{CanaryStep, CanaryStrategy, Rollout};
use super::validate::{GATEWAY_API_PLUGIN, pause_seconds};
use super::{Converted, PROMOTE_ON_ANNOTATION, UNMAPPED_ANNOTATION};
use crate::document::deserialize_collecting;
use crate::error::{FieldError, Warning};
use crate::model::{API_VERSION, ROLLOUT_KIND, Rollout as WeirRollout};
use crate::validate;

/// Collects kept fields and warnings.
#[derive(Default)]
struct Kept {
    entries: BTreeMap<String, Value>,
    warnings: Vec<Warning>,
}

impl Kept {
    fn keep(&mut self, path: &str, value: &Value, reason: &str) {
        self.entries.insert(path.to_string(), value.clone());
        self.warnings.push(Warning::new(
            path,
            format!("kept as an annotation; {reason}"),
        ));
    }
}

/// Keys of `spec` the conversion reads.
const SPEC_READ: [&str; 5] = [
    "replicas",
    "template",
    "workloadRef",
    "strategy",
    "progressDeadlineSeconds",
];

/// Keys of `spec.strategy.canary` the conversion reads (the rest is kept, or refused below).
const CANARY_READ: [&str; 2] = ["steps", "trafficRouting"];

/// Keys of `spec.strategy.canary` whose behaviour a weir plan cannot carry.
const CANARY_REFUSED: [(&str, &str); 1] = [(
    "analysis",
    "background analysis is an Argo AnalysisRun, which a weir Rollout has no place for (a \
     converted Rollout would promote without it); apply the Argo Rollout itself: weir's operator \
     runs it with its AnalysisRuns",
)];

pub(super) fn rollout(
    rollout: &Rollout,
    source: &Value,
) -> Result<Converted<WeirRollout>, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut kept = Kept::default();
    let raw_spec = source.get("spec");
    let field = |value: Option<&Value>, key: &str| value.and_then(|value| value.get(key)).cloned();

    let Some(name) = rollout.metadata.name.clone() else {
        return Err(vec![FieldError::missing(
            "metadata.name",
            "a converted Rollout is named (generateName is not converted)",
        )]);
    };
    let strategy = rollout.spec.strategy.clone().unwrap_or_default();
    if strategy.blue_green.is_some() {
        errors.push(FieldError::new(
            "spec.strategy.blueGreen",
            "not converted: weir's blueGreen plan promotes after analysis iterations; Argo's \
             active and preview Services, promotion gates and pre/post-promotion analysis have \
             no weir plan yet",
        ));
    }
    let Some(canary) = strategy.canary.as_deref() else {
        if errors.is_empty() {
            errors.push(FieldError::missing(
                "spec.strategy.canary",
                "a canary strategy",
            ));
        }
        return Err(errors);
    };
    let raw_canary = raw_spec
        .and_then(|spec| spec.get("strategy"))
        .and_then(|strategy| strategy.get("canary"));

    // --- the plan ---
    let max_weight = canary
        .traffic_routing
        .as_ref()
        .and_then(|routing| routing.max_traffic_weight)
        .unwrap_or(100);
    let steps = plan_steps(canary, max_weight, &mut errors, &mut kept);

    // --- what the plan cannot carry ---
    for (key, reason) in CANARY_REFUSED {
        if raw_canary.is_some_and(|canary| canary.get(key).is_some()) {
            errors.push(FieldError::new(
                format!("spec.strategy.canary.{key}"),
                format!("not converted: {reason}"),
            ));
        }
    }
    if let Some(Value::Object(map)) = raw_canary {
        for (key, value) in map {
            if CANARY_READ.contains(&key.as_str())
                || CANARY_REFUSED.iter().any(|(refused, _)| refused == key)
            {
                continue;
            }
            kept.keep(
                &format!("spec.strategy.canary.{key}"),
                value,
                "weir's kubernetes target does not act on it",
            );
        }
    }

    // Traefik and APISIX: weir's providers of those names route with objects of their own
    // (Flagger's way), not the TraefikService or ApisixRoute this Rollout names.
    if let Some(routing) = &canary.traffic_routing {
        for (used, key, object) in [
            (routing.traefik.is_some(), "traefik", "TraefikService"),
            (routing.apisix.is_some(), "apisix", "ApisixRoute"),
        ] {
            if used {
                errors.push(FieldError::new(
                    format!("spec.strategy.canary.trafficRouting.{key}"),
                    format!(
                        "not converted: a weir Rollout routes {key} with objects of its own, \
                         not the {object} named here; apply the Argo Rollout itself: weir's \
                         operator writes its weights"
                    ),
                ));
            }
        }
    }

    // --- the target ---
    let provider = match &canary.traffic_routing {
        None => "kubernetes",
        Some(routing) if routing.istio.is_some() => "istio",
        Some(routing) if routing.nginx.is_some() => "nginx",
        Some(routing) if routing.smi.is_some() => "smi",
        Some(routing)
            if routing
                .plugins
                .as_ref()
                .is_some_and(|plugins| plugins.contains_key(GATEWAY_API_PLUGIN)) =>
        {
            "gatewayapi:v1"
        }
        // Validation refused every other router.
        Some(_) => "kubernetes",
    };
    if let Some(Value::Object(routing)) = raw_canary.and_then(|canary| canary.get("trafficRouting"))
    {
        for (key, value) in routing {
            kept.keep(
                &format!("spec.strategy.canary.trafficRouting.{key}"),
                value,
                "weir routes with its own objects (Flagger's way) rather than editing the ones \
                 named here",
            );
        }
    }
    let mut target = Map::new();
    target.insert("kind".into(), json!("kubernetes"));
    target.insert("provider".into(), json!(provider));
    match (&rollout.spec.template, &rollout.spec.workload_ref) {
        (Some(template), _) => {
            target.insert("mode".into(), json!("managed"));
            target.insert("template".into(), template.clone());
            if let Some(replicas) = rollout.spec.replicas {
                target.insert("replicas".into(), json!(replicas));
            }
        }
        (None, Some(workload)) => {
            target.insert("mode".into(), json!("copy"));
            target.insert(
                "targetRef".into(),
                json!({
                    "apiVersion": workload.api_version.clone().unwrap_or_else(|| "apps/v1".into()),
                    "kind": workload.kind.clone().unwrap_or_else(|| "Deployment".into()),
                    "name": workload.name.clone().unwrap_or_default(),
                }),
            );
            if let Some(scale_down) = field(
                raw_spec.and_then(|spec| spec.get("workloadRef")),
                "scaleDown",
            ) {
                kept.keep(
                    "spec.workloadRef.scaleDown",
                    &scale_down,
                    "weir's copy mode scales the Deployment to 0 once its primary is ready",
                );
            }
            if let Some(replicas) = field(raw_spec, "replicas") {
                kept.keep(
                    "spec.replicas",
                    &replicas,
                    "in copy mode the Deployment's own replicas are used",
                );
            }
        }
        // Validation refused this case.
        (None, None) => {}
    }

    // --- the rest of spec ---
    // Argo promotes at the end of the steps; the annotation opts into weir's evidence rule, as
    // for a Flagger Canary.
    let mut analysis = Map::new();
    let annotations = rollout.metadata.annotations.clone().unwrap_or_default();
    match annotations.get(PROMOTE_ON_ANNOTATION).map(String::as_str) {
        None | Some("noHarm") => {
            analysis.insert("evidence".into(), json!({"promoteOn": "noHarm"}));
        }
        Some("health") => {
            analysis.insert("evidence".into(), json!({"promoteOn": "health"}));
            analysis.insert("judges".into(), json!(["sequential"]));
        }
        Some(other) => errors.push(FieldError::with_value(
            format!("metadata.annotations[\"{PROMOTE_ON_ANNOTATION}\"]"),
            format!("{other:?}"),
            "`health` (promote only on evidence of health, weir's rule) or `noHarm` (Argo's: \
             promote at the end of the steps)",
        )),
    }
    if let Some(deadline) = rollout.spec.progress_deadline_seconds {
        if deadline >= 60 {
            analysis.insert("progressDeadline".into(), json!(format!("{deadline}s")));
        } else if let Some(value) = field(raw_spec, "progressDeadlineSeconds") {
            kept.keep(
                "spec.progressDeadlineSeconds",
                &value,
                "weir's progress deadline is at least its 60s interval (default 10m)",
            );
        }
    }
    if let Some(Value::Object(map)) = raw_spec {
        for (key, value) in map {
            if !SPEC_READ.contains(&key.as_str()) {
                kept.keep(&format!("spec.{key}"), value, "weir does not act on it");
            }
        }
    }
    if source.get("status").is_some() {
        kept.warnings.push(Warning::new(
            "status",
            "not carried: it is Argo's runtime state; weir keeps its own status",
        ));
    }

    if !errors.is_empty() {
        return Err(super::dedup(errors));
    }

    let metadata = &rollout.metadata;
    let mut annotations = metadata.annotations.clone().unwrap_or_default();
    if !kept.entries.is_empty() {
        let object: Map<String, Value> = kept.entries.clone().into_iter().collect();
        annotations.insert(
            UNMAPPED_ANNOTATION.to_string(),
            serde_json::to_string(&Value::Object(object)).unwrap_or_default(),
        );
    }
    let mut weir_metadata = Map::new();
    weir_metadata.insert("name".into(), json!(name));
    if let Some(namespace) = metadata
        .namespace
        .as_ref()
        .filter(|namespace| !namespace.is_empty())
    {
        weir_metadata.insert("namespace".into(), json!(namespace));
    }
    if let Some(labels) = &metadata.labels {
        weir_metadata.insert("labels".into(), json!(labels));
    }
    if !annotations.is_empty() {
        weir_metadata.insert("annotations".into(), json!(annotations));
    }
    let document = json!({
        "apiVersion": API_VERSION,
        "kind": ROLLOUT_KIND,
        "metadata": Value::Object(weir_metadata),
        "spec": {
            "target": Value::Object(target),
            "plan": {"canary": {"steps": steps}},
            "analysis": Value::Object(analysis),
        },
    });
    let converted: WeirRollout = deserialize_collecting(&document)
        .map_err(|errors| errors.into_iter().map(in_argo_terms).collect::<Vec<_>>())?;
    let invalid = validate::rollout(&converted);
    if !invalid.is_empty() {
        return Err(super::dedup(
            invalid.into_iter().map(in_argo_terms).collect(),
        ));
    }
    Ok(Converted {
        value: converted,
        warnings: kept.warnings,
    })
}

/// The steps of weir's canary plan, as JSON.
fn plan_steps(
    canary: &CanaryStrategy,
    max_weight: i64,
    errors: &mut Vec<FieldError>,
    kept: &mut Kept,
) -> Vec<Value> {
    let steps = canary.steps.as_deref().unwrap_or_default();
    let mut plan: Vec<Map<String, Value>> = Vec::new();
    if steps.is_empty() {
        kept.warnings.push(Warning::new(
            "spec.strategy.canary.steps",
            "none: Argo rolls the pods over to the new version at once; the converted plan is \
             one step at 100%",
        ));
        return vec![json!({"weight": 100})];
    }
    for (index, step) in steps.iter().enumerate() {
        let path = format!("spec.strategy.canary.steps[{index}]");
        let CanaryStep {
            set_weight,
            pause,
            analysis,
            experiment,
            set_canary_scale,
            set_header_route,
            set_mirror_route,
            plugin,
        } = step;
        if let Some(weight) = set_weight {
            if *weight <= 0 {
                errors.push(FieldError::with_value(
                    format!("{path}.setWeight"),
                    weight,
                    "not converted: a weir step sends the canary more than 0% of the traffic",
                ));
                continue;
            }
            // Integer arithmetic in basis points, then back to a percentage.
            let basis_points = weight.saturating_mul(10_000) / max_weight.max(1);
            let percent = basis_points as f64 / 100.0;
            let mut entry = Map::new();
            entry.insert("weight".into(), json!(percent));
            plan.push(entry);
        }
        if let Some(pause) = pause {
            let Some(last) = plan.last_mut() else {
                errors.push(FieldError::new(
                    format!("{path}.pause"),
                    "not converted: a pause before the first setWeight has no weir step to \
                     belong to",
                ));
                continue;
            };
            if last.contains_key("pause") {
                errors.push(FieldError::new(
                    format!("{path}.pause"),
                    "not converted: a second pause after one setWeight; a weir step has one \
                     pause",
                ));
                continue;
            }
            let value = match &pause.duration {
                None => json!({}),
                Some(duration) => match pause_seconds(duration) {
                    Ok(duration) if duration.as_millis_i64() == 0 => {
                        kept.warnings.push(Warning::new(
                            format!("{path}.pause.duration"),
                            "a pause of 0s does not pause: no pause in the converted step",
                        ));
                        continue;
                    }
                    Ok(duration) => json!({"duration": duration.to_string()}),
                    // Validation refused this case.
                    Err(_) => json!({}),
                },
            };
            last.insert("pause".into(), value);
        }
        let refused = [
            (
                analysis.is_some(),
                "analysis",
                "step analysis is an Argo AnalysisRun, which a weir Rollout has no place for; \
                 apply the Argo Rollout itself: weir's operator runs it with its AnalysisRuns",
            ),
            (
                experiment.is_some(),
                "experiment",
                "experiments run extra ReplicaSets a weir Rollout does not create; apply the \
                 Argo Rollout itself: weir's operator runs its Experiments",
            ),
            (
                set_canary_scale.is_some(),
                "setCanaryScale",
                "weir scales the canary with its weight",
            ),
            (
                set_header_route.is_some(),
                "setHeaderRoute",
                "a weir canary plan routes by weight only (header rules are the abTest plan's)",
            ),
            (
                set_mirror_route.is_some(),
                "setMirrorRoute",
                "a weir canary plan mirrors only before its first step (mirrorWeight)",
            ),
            (plugin.is_some(), "plugin", "step plugins are not run"),
        ];
        for (set, key, reason) in refused {
            if set {
                errors.push(FieldError::new(
                    format!("{path}.{key}"),
                    format!("not converted: {reason}"),
                ));
            }
        }
    }
    plan.into_iter().map(Value::Object).collect()
}

/// A path of the converted Rollout, in the terms of the Argo document where there is one.
fn in_argo_terms(mut error: FieldError) -> FieldError {
    const PATHS: [(&str, &str); 4] = [
        ("spec.target.template", "spec.template"),
        ("spec.target.replicas", "spec.replicas"),
        ("spec.target.targetRef", "spec.workloadRef"),
        (
            "spec.analysis.progressDeadline",
            "spec.progressDeadlineSeconds",
        ),
    ];
    for (weir, argo) in PATHS {
        if let Some(rest) = error.path.strip_prefix(weir) {
            error.path = format!("{argo}{rest}");
            return error;
        }
    }
    if error.path.starts_with("spec.plan") {
        error.message = format!("{} (in the converted plan: {})", error.message, error.path);
        error.path = "spec.strategy.canary.steps".into();
    }
    error
}
