//! Canary -> Rollout.

use std::collections::BTreeMap;

use serde_json::Value;

use super::kept::{Kept, as_string, field, is_unset, join};
use super::types::{
    AlertSpec, AnalysisSpec, CanaryDocument, MatchRuleSpec, MetricSpec, SessionAffinitySpec,
    StringMatchSpec, WebhookSpec,
};
use super::{Converted, check_name, check_version_and_kind, dedup, object_meta, root_object};
use crate::document::{deserialize_collecting, json_type_name};
use crate::error::FieldError;
use crate::model::{
    API_VERSION, AbTestPlan, Alert, Analysis, CanaryPlan, EvidenceRule, FailureAction,
    FailureCounting, HookType, IterationsPlan, KubernetesTarget, MatchRule, Metric, MirrorPlan,
    NoDataPolicy, Plan, PromotionEvidence, REQUEST_SUCCESS_RATE, ROLLOUT_KIND, Rollout,
    RolloutSpec, SessionAffinity, Severity, StringMatch, Target, TemplateRef, ThresholdRange,
    Webhook,
};
use crate::units::{GoDuration, Weight};
use crate::validate;

/// Spec fields that describe the Kubernetes side: the target's settings.
const TARGET_FIELDS: [&str; 8] = [
    "targetRef",
    "autoscalerRef",
    "ingressRef",
    "routeRef",
    "upstreamRef",
    "service",
    "provider",
    "metricsServer",
];

/// Analysis fields that describe the Kubernetes side (pod readiness); carried as target data.
const TARGET_ANALYSIS_FIELDS: [&str; 2] = ["primaryReadyThreshold", "canaryReadyThreshold"];

/// Spec fields read into weir's typed model.
const TYPED_SPEC_FIELDS: [&str; 6] = [
    "analysis",
    "canaryAnalysis",
    "progressDeadlineSeconds",
    "skipAnalysis",
    "suspend",
    "revertOnDeletion",
];

/// Analysis fields read into weir's typed model (besides the target's).
const TYPED_ANALYSIS_FIELDS: [&str; 14] = [
    "interval",
    "threshold",
    "maxWeight",
    "stepWeight",
    "stepWeights",
    "stepWeightPromotion",
    "iterations",
    "match",
    "mirror",
    "mirrorWeight",
    "sessionAffinity",
    "metrics",
    "webhooks",
    "alerts",
];

/// Flagger never runs an analysis more often than this.
const MIN_FLAGGER_INTERVAL: GoDuration = GoDuration::from_secs(10);
/// Flagger's default analysis interval.
const DEFAULT_INTERVAL: GoDuration = GoDuration::from_secs(60);
/// Flagger's default progress deadline, in seconds.
const DEFAULT_PROGRESS_DEADLINE_SECONDS: i64 = 600;
/// The longest progress deadline accepted (ten years, the limit of weir's durations).
const MAX_PROGRESS_DEADLINE_SECONDS: i64 = 10 * 365 * 24 * 3600;
/// Flagger's default metric window.
const DEFAULT_METRIC_INTERVAL: GoDuration = GoDuration::from_secs(60);

/// Where items of a converted list came from: `origin[weir index] = Flagger index`, so that
/// validation errors point at what the user wrote.
#[derive(Debug, Default)]
struct Origins {
    metrics: Vec<usize>,
}

/// The annotation of a Flagger Canary that chooses what promotion needs: `health` opts into
/// weir's evidence rule (and the sequential judge), `noHarm` keeps Flagger's semantics.
pub const PROMOTE_ON_ANNOTATION: &str = "weir.dev/promote-on";

/// The judge an opted-in Flagger canary gets.
const SEQUENTIAL_JUDGE: &str = "sequential";

/// The `weir.dev/promote-on` annotation's choice, if present.
fn promote_on_annotation(
    metadata: Option<&Value>,
) -> Result<Option<PromotionEvidence>, FieldError> {
    let Some(value) = metadata
        .and_then(|metadata| metadata.get("annotations"))
        .and_then(|annotations| annotations.get(PROMOTE_ON_ANNOTATION))
    else {
        return Ok(None);
    };
    match value.as_str() {
        Some("health") => Ok(Some(PromotionEvidence::Health)),
        Some("noHarm") => Ok(Some(PromotionEvidence::NoHarm)),
        _ => Err(FieldError::with_value(
            format!("metadata.annotations[\"{PROMOTE_ON_ANNOTATION}\"]"),
            value,
            "`health` (promote only on evidence of health, weir's rule) or `noHarm` (Flagger's: \
             promote at the end of the plan unless a check failed)",
        )),
    }
}

pub(super) fn convert(document: &Value) -> Result<Converted<Rollout>, Vec<FieldError>> {
    let root = root_object(document, "Canary").map_err(|error| vec![error])?;
    let mut errors = Vec::new();
    let mut kept = Kept::default();
    check_version_and_kind(
        root,
        "Canary",
        &["v1alpha3"],
        &mut errors,
        &mut kept.warnings,
    );
    check_name(root, &mut errors);
    check_required_spec(root.get("spec"), &mut errors);

    let parsed: CanaryDocument = match deserialize_collecting(document) {
        Ok(parsed) => parsed,
        Err(structural) => {
            errors.extend(structural);
            CanaryDocument::default()
        }
    };
    if !errors.is_empty() {
        return Err(dedup(errors));
    }

    let raw_spec = field(Some(document), "spec");
    let spec = parsed.spec.unwrap_or_default();
    let (analysis_key, analysis) = match (spec.analysis, spec.canary_analysis) {
        (Some(analysis), _) => {
            if let Some(ignored) = field(raw_spec, "canaryAnalysis") {
                // Flagger reads spec.analysis when both are set.
                kept.keep_because(
                    "spec.canaryAnalysis",
                    ignored,
                    "kept as an annotation; Flagger ignores the deprecated canaryAnalysis when \
                     analysis is set",
                );
            }
            ("analysis", analysis)
        }
        (None, Some(alias)) => {
            kept.warn(
                "spec.canaryAnalysis",
                "deprecated alias of spec.analysis, read as spec.analysis; rename it",
            );
            ("canaryAnalysis", alias)
        }
        // check_required_spec refused this case already.
        (None, None) => ("analysis", AnalysisSpec::default()),
    };
    let base = format!("spec.{analysis_key}");
    let raw_analysis = field(raw_spec, analysis_key);

    let mut converter = Converter {
        base,
        raw_analysis,
        kept,
        errors: Vec::new(),
        origins: Origins::default(),
    };

    // --- the Kubernetes side, as data ---
    let mut config = BTreeMap::new();
    for key in TARGET_FIELDS {
        if let Some(value) = field(raw_spec, key) {
            config.insert(key.to_string(), value.clone());
        }
    }
    for key in TARGET_ANALYSIS_FIELDS {
        if let Some(value) = field(raw_analysis, key) {
            config.insert(key.to_string(), value.clone());
        }
    }
    let kubernetes = match deserialize_collecting::<KubernetesTarget>(&Value::Object(
        config.into_iter().collect(),
    )) {
        Ok(kubernetes) => kubernetes,
        Err(errors) => {
            for error in errors {
                let in_analysis = TARGET_ANALYSIS_FIELDS
                    .iter()
                    .any(|key| error.path.split(['.', '[']).next() == Some(*key));
                let under = if in_analysis { &converter.base } else { "spec" };
                converter.errors.push(error.under(under));
            }
            KubernetesTarget::default()
        }
    };
    let mut known_spec: Vec<&str> = TARGET_FIELDS.to_vec();
    known_spec.extend(TYPED_SPEC_FIELDS);
    converter
        .kept
        .keep_unknown_keys(raw_spec, "spec", &known_spec);
    let mut known_analysis: Vec<&str> = TYPED_ANALYSIS_FIELDS.to_vec();
    known_analysis.extend(TARGET_ANALYSIS_FIELDS);
    let analysis_base = converter.base.clone();
    converter
        .kept
        .keep_unknown_keys(raw_analysis, &analysis_base, &known_analysis);
    if field(Some(document), "status").is_some() {
        converter.kept.warn(
            "status",
            "not carried: it is Flagger's runtime state; weir keeps its own status",
        );
    }
    let known_root = ["apiVersion", "kind", "metadata", "spec", "status"];
    converter
        .kept
        .keep_unknown_keys(Some(document), "", &known_root);

    // --- the plan and the analysis ---
    let plan = converter.plan(&analysis);
    let mut rollout_analysis = converter.analysis(&analysis, spec.progress_deadline_seconds);
    match promote_on_annotation(field(Some(document), "metadata")) {
        Ok(None) => {}
        Ok(Some(promote_on)) => {
            rollout_analysis.evidence.promote_on = promote_on;
            if promote_on == PromotionEvidence::Health {
                // Evidence of health comes from a judge: the sequential judge watches the run.
                rollout_analysis.judges = vec![SEQUENTIAL_JUDGE.to_string()];
            }
        }
        Err(error) => converter.errors.push(error),
    }
    let session_affinity = converter.session_affinity(analysis.session_affinity, &plan);

    let Converter {
        base,
        kept,
        errors,
        origins,
        ..
    } = converter;
    if !errors.is_empty() {
        return Err(dedup(errors));
    }

    let mut metadata = object_meta(parsed.metadata, field(Some(document), "metadata"));
    kept.write_annotation(&mut metadata.annotations);
    let rollout = Rollout {
        api_version: API_VERSION.to_string(),
        kind: ROLLOUT_KIND.to_string(),
        metadata,
        spec: RolloutSpec {
            target: Target::Kubernetes(Box::new(kubernetes)),
            plan,
            analysis: rollout_analysis,
            skip_analysis: spec.skip_analysis.unwrap_or(false),
            suspend: spec.suspend.unwrap_or(false),
            revert_on_deletion: spec.revert_on_deletion.unwrap_or(false),
            session_affinity,
        },
        status: None,
    };

    // Held to weir's rules here too, so `weir convert` never prints a Rollout that `weir
    // validate` would refuse, and the errors point into the Flagger document.
    let invalid = validate::rollout(&rollout);
    if !invalid.is_empty() {
        return Err(dedup(
            invalid
                .into_iter()
                .map(|error| in_flagger_terms(error, &base, &origins))
                .collect(),
        ));
    }
    Ok(Converted {
        value: rollout,
        warnings: kept.warnings,
    })
}

/// Reports a missing `spec`, `spec.targetRef` (with kind and name) and `spec.analysis`, all at
/// once. Values of the wrong type are left to the structural errors.
fn check_required_spec(spec: Option<&Value>, errors: &mut Vec<FieldError>) {
    let spec = match spec {
        None | Some(Value::Null) => {
            errors.push(FieldError::missing(
                "spec",
                "the Canary's spec, with targetRef and analysis",
            ));
            return;
        }
        Some(Value::Object(spec)) => spec,
        Some(other) => {
            errors.push(FieldError::new(
                "spec",
                format!(
                    "is a {}: the spec is a mapping with targetRef and analysis",
                    json_type_name(other)
                ),
            ));
            return;
        }
    };
    match spec.get("targetRef") {
        None | Some(Value::Null) => errors.push(FieldError::missing(
            "spec.targetRef",
            "the workload to roll out ({apiVersion, kind, name})",
        )),
        Some(Value::Object(target)) => {
            for (key, what) in [
                (
                    "kind",
                    "the workload's kind: Deployment, DaemonSet or Service",
                ),
                ("name", "the workload's name"),
            ] {
                let missing = match target.get(key) {
                    None | Some(Value::Null) => true,
                    Some(Value::String(text)) => text.is_empty(),
                    Some(_) => false,
                };
                if missing {
                    errors.push(FieldError::missing(format!("spec.targetRef.{key}"), what));
                }
            }
        }
        Some(other) => errors.push(FieldError::new(
            "spec.targetRef",
            format!(
                "is a {}: the workload to roll out is a mapping {{apiVersion, kind, name}}",
                json_type_name(other)
            ),
        )),
    }
    let present = |key: &str| spec.get(key).is_some_and(|value| !value.is_null());
    if !present("analysis") && !present("canaryAnalysis") {
        errors.push(FieldError::missing(
            "spec.analysis",
            "how the canary is judged and how traffic moves ({interval, threshold, stepWeight \
             | stepWeights | iterations, metrics, webhooks}); the deprecated \
             spec.canaryAnalysis is read too",
        ));
    }
}

struct Converter<'a> {
    /// `spec.analysis` or `spec.canaryAnalysis`, as the user wrote it.
    base: String,
    raw_analysis: Option<&'a Value>,
    kept: Kept,
    errors: Vec<FieldError>,
    origins: Origins,
}

impl Converter<'_> {
    fn path(&self, key: &str) -> String {
        join(&self.base, key)
    }

    /// Keeps each of `keys` that is set in the analysis, because Flagger ignores it in the
    /// chosen strategy.
    fn keep_ignored(&mut self, keys: &[&str], reason: &str) {
        for key in keys {
            let value = field(self.raw_analysis, key);
            if !is_unset(value)
                && let Some(value) = value
            {
                let path = self.path(key);
                self.kept.keep_because(&path, value, reason);
            }
        }
    }

    // --- strategy ---

    /// Flagger's strategy selection: match + iterations is A/B testing, iterations alone is
    /// blue/green (mirrored when `mirror` is set), otherwise a weighted canary.
    fn plan(&mut self, analysis: &AnalysisSpec) -> Plan {
        let iterations = match analysis.iterations {
            Some(count) if count > 0 => match u32::try_from(count) {
                Ok(count) => Some(count),
                Err(_) => {
                    let path = self.path("iterations");
                    self.errors.push(FieldError::with_value(
                        path,
                        count,
                        format!("iterations are from 1 to {}", validate::MAX_STEPS),
                    ));
                    Some(1)
                }
            },
            // Go's zero value: unset.
            _ => None,
        };
        let has_match = analysis
            .match_rules
            .as_ref()
            .is_some_and(|rules| !rules.is_empty());
        let mirror = analysis.mirror.unwrap_or(false);
        let mirror_weight = analysis
            .mirror_weight
            .filter(|weight| *weight > Weight::ZERO)
            .unwrap_or(Weight::FULL);

        match iterations {
            Some(iterations) if has_match => {
                self.keep_ignored(
                    &[
                        "stepWeight",
                        "stepWeights",
                        "maxWeight",
                        "stepWeightPromotion",
                        "mirror",
                        "mirrorWeight",
                    ],
                    "kept as an annotation; Flagger ignores it in A/B testing (match + \
                     iterations)",
                );
                let match_rules = self.match_rules(analysis.match_rules.as_deref().unwrap_or(&[]));
                Plan::AbTest(AbTestPlan {
                    iterations,
                    match_rules,
                })
            }
            Some(iterations) if mirror => {
                self.keep_ignored(
                    &[
                        "stepWeight",
                        "stepWeights",
                        "maxWeight",
                        "stepWeightPromotion",
                    ],
                    "kept as an annotation; Flagger ignores it in blue/green with mirroring \
                     (iterations + mirror)",
                );
                Plan::Mirror(MirrorPlan {
                    iterations,
                    mirror_weight: Some(mirror_weight),
                })
            }
            Some(iterations) => {
                self.keep_ignored(
                    &[
                        "stepWeight",
                        "stepWeights",
                        "maxWeight",
                        "stepWeightPromotion",
                        "mirrorWeight",
                    ],
                    "kept as an annotation; Flagger ignores it in blue/green (iterations \
                     without match)",
                );
                Plan::BlueGreen(IterationsPlan { iterations })
            }
            None => {
                if has_match {
                    self.keep_ignored(
                        &["match"],
                        "kept as an annotation; Flagger uses match only for A/B testing \
                         (match + iterations)",
                    );
                }
                if !mirror {
                    self.keep_ignored(
                        &["mirrorWeight"],
                        "kept as an annotation; Flagger ignores it unless mirror is true",
                    );
                }
                self.canary_plan(analysis, mirror.then_some(mirror_weight))
            }
        }
    }

    fn canary_plan(&mut self, analysis: &AnalysisSpec, mirror_weight: Option<Weight>) -> Plan {
        let step_weight = analysis.step_weight.filter(|weight| *weight > Weight::ZERO);
        let step_weights = analysis
            .step_weights
            .clone()
            .filter(|weights| !weights.is_empty());
        if step_weight.is_none() && step_weights.is_none() {
            // Flagger's CRD refuses such a Canary (its analysis is `oneOf` iterations,
            // stepWeight or stepWeights), and were one to reach the controller, the canary
            // would sit at 0% forever: no step is ever taken and it is never promoted. weir has
            // no faithful equivalent, and guessing a strategy would promote what Flagger never
            // would, so it is refused with the choices spelled out.
            self.errors.push(FieldError::new(
                self.base.clone(),
                "sets none of stepWeight, stepWeights and iterations: set one (stepWeight: 10 \
                 adds 10% per interval; stepWeights: [5, 10, 50] lists the weights; \
                 iterations: 10 tests the canary for 10 intervals, then switches all traffic \
                 (blue/green), or routes requests that match `match` to it (A/B testing))",
            ));
        }
        let max_weight = match &step_weights {
            // Flagger: with stepWeights the highest weight is the last step, capped at 100%;
            // maxWeight is not read.
            Some(weights) => {
                let last = weights
                    .last()
                    .copied()
                    .unwrap_or(Weight::FULL)
                    .min(Weight::FULL);
                if let Some(written) = analysis.max_weight.filter(|weight| *weight != last)
                    && written > Weight::ZERO
                    && let Some(value) = field(self.raw_analysis, "maxWeight")
                {
                    let path = self.path("maxWeight");
                    self.kept.keep_because(
                        &path,
                        value,
                        &format!(
                            "kept as an annotation; with stepWeights, Flagger's maxWeight is the \
                             last step ({last}), so {written} is not used"
                        ),
                    );
                }
                last
            }
            None => analysis
                .max_weight
                .filter(|weight| *weight > Weight::ZERO)
                .unwrap_or(Weight::FULL),
        };
        Plan::Canary(CanaryPlan {
            step_weight,
            step_weights,
            steps: None,
            max_weight: Some(max_weight),
            // Flagger's 0 means all traffic back to the primary at once, weir's absent.
            step_weight_promotion: analysis
                .step_weight_promotion
                .filter(|weight| *weight > Weight::ZERO),
            mirror_weight,
        })
    }

    fn match_rules(&mut self, rules: &[MatchRuleSpec]) -> Vec<MatchRule> {
        let raw_rules = field(self.raw_analysis, "match");
        let mut converted = Vec::with_capacity(rules.len());
        for (index, rule) in rules.iter().enumerate() {
            let path = format!("{}[{index}]", self.path("match"));
            let raw = raw_rules.and_then(|rules| rules.get(index));
            self.kept.keep_unknown_keys_because(
                raw,
                &path,
                &["headers", "queryParams", "uri", "method"],
                "kept as an annotation; weir's match rules have no equivalent (they match \
                 headers, cookies, queryParams, uri and method), so this condition is not \
                 applied",
            );
            let headers = self.string_matches(rule.headers.as_ref(), raw, &path, "headers");
            let query_params =
                self.string_matches(rule.query_params.as_ref(), raw, &path, "queryParams");
            let uri = rule.uri.as_ref().map(|condition| {
                self.string_match(condition, field(raw, "uri"), &join(&path, "uri"))
            });
            let method = rule.method.as_ref().map(|condition| {
                self.string_match(condition, field(raw, "method"), &join(&path, "method"))
            });
            let converted_rule = MatchRule {
                headers,
                cookies: BTreeMap::new(),
                query_params,
                uri,
                method,
            };
            let conditions = converted_rule.headers.len()
                + converted_rule.query_params.len()
                + usize::from(converted_rule.uri.is_some())
                + usize::from(converted_rule.method.is_some());
            if conditions == 0 {
                self.errors.push(FieldError::new(
                    path,
                    "has no condition weir can evaluate: a rule needs at least one of headers, \
                     queryParams, uri or method (a rule with none would send every request to \
                     the canary)",
                ));
            }
            converted.push(converted_rule);
        }
        converted
    }

    fn string_matches(
        &mut self,
        conditions: Option<&BTreeMap<String, StringMatchSpec>>,
        raw_rule: Option<&Value>,
        rule_path: &str,
        key: &str,
    ) -> BTreeMap<String, StringMatch> {
        let raw_conditions = field(raw_rule, key);
        let base = join(rule_path, key);
        conditions
            .into_iter()
            .flatten()
            .map(|(name, condition)| {
                let converted =
                    self.string_match(condition, field(raw_conditions, name), &join(&base, name));
                (name.clone(), converted)
            })
            .collect()
    }

    fn string_match(
        &mut self,
        condition: &StringMatchSpec,
        raw: Option<&Value>,
        path: &str,
    ) -> StringMatch {
        self.kept.keep_unknown_keys_because(
            raw,
            path,
            &["exact", "prefix", "suffix", "regex"],
            "kept as an annotation; weir's string conditions are exact, prefix, suffix or \
             regex, so this option is not applied",
        );
        StringMatch {
            exact: condition.exact.clone(),
            prefix: condition.prefix.clone(),
            suffix: condition.suffix.clone(),
            regex: condition.regex.clone(),
        }
    }

    fn session_affinity(
        &mut self,
        affinity: Option<SessionAffinitySpec>,
        plan: &Plan,
    ) -> Option<SessionAffinity> {
        let affinity = affinity?;
        let path = self.path("sessionAffinity");
        let raw = field(self.raw_analysis, "sessionAffinity");
        if !matches!(plan, Plan::Canary(_)) {
            if let Some(raw) = raw {
                self.kept.keep_because(
                    &path,
                    raw,
                    "kept as an annotation; Flagger applies session affinity to weighted canary \
                     releases only",
                );
            }
            return None;
        }
        self.kept
            .keep_unknown_keys(raw, &path, &["cookieName", "primaryCookieName", "maxAge"]);
        let max_age = match affinity.max_age {
            // Flagger's zero value means its default, 86400s, which is weir's default too.
            None | Some(0) => None,
            Some(seconds) => match u64::try_from(seconds) {
                Ok(seconds) => Some(seconds),
                Err(_) => {
                    self.errors.push(FieldError::with_value(
                        join(&path, "maxAge"),
                        seconds,
                        "maxAge is a number of seconds, at least 1",
                    ));
                    None
                }
            },
        };
        Some(SessionAffinity {
            cookie_name: affinity.cookie_name,
            primary_cookie_name: affinity.primary_cookie_name.filter(|name| !name.is_empty()),
            max_age,
        })
    }

    // --- analysis ---

    fn analysis(&mut self, analysis: &AnalysisSpec, deadline_seconds: Option<i64>) -> Analysis {
        let interval = match analysis.interval.0 {
            None => DEFAULT_INTERVAL,
            Some(interval) if interval < MIN_FLAGGER_INTERVAL => {
                let path = self.path("interval");
                self.kept.warn(
                    path,
                    format!(
                        "{interval} raised to {MIN_FLAGGER_INTERVAL}, Flagger's shortest \
                         interval (weir itself accepts intervals down to 1s)"
                    ),
                );
                MIN_FLAGGER_INTERVAL
            }
            Some(interval) => interval,
        };
        let threshold = match analysis.threshold {
            None => 1,
            Some(count) if count <= 0 => {
                let path = self.path("threshold");
                self.kept.warn(
                    path,
                    format!("{count} read as 1, as Flagger does: one failed check ends the run"),
                );
                1
            }
            Some(count) => u32::try_from(count).unwrap_or_else(|_| {
                let path = self.path("threshold");
                self.errors.push(FieldError::with_value(
                    path,
                    count,
                    format!("the threshold is at most {}", u32::MAX),
                ));
                1
            }),
        };
        let progress_deadline = match deadline_seconds {
            None => GoDuration::from_secs(DEFAULT_PROGRESS_DEADLINE_SECONDS.unsigned_abs()),
            Some(seconds) if (1..=MAX_PROGRESS_DEADLINE_SECONDS).contains(&seconds) => {
                GoDuration::from_secs(seconds.unsigned_abs())
            }
            Some(seconds) => {
                self.errors.push(FieldError::with_value(
                    "spec.progressDeadlineSeconds",
                    seconds,
                    format!(
                        "the progress deadline is a number of seconds from 1 to \
                         {MAX_PROGRESS_DEADLINE_SECONDS} (default {DEFAULT_PROGRESS_DEADLINE_SECONDS})"
                    ),
                ));
                GoDuration::from_secs(DEFAULT_PROGRESS_DEADLINE_SECONDS.unsigned_abs())
            }
        };
        let metrics = self.metrics(analysis.metrics.as_deref().unwrap_or(&[]));
        let webhooks = self.webhooks(analysis.webhooks.as_deref().unwrap_or(&[]));
        let alerts = self.alerts(analysis.alerts.as_deref().unwrap_or(&[]));
        Analysis {
            interval,
            threshold,
            // Flagger counts failed checks over the whole run, treats a query without data
            // as a failed check and rolls back on failure.
            failure_counting: FailureCounting::Total,
            progress_deadline,
            no_data: NoDataPolicy::Fail,
            on_failure: FailureAction::Rollback,
            metrics,
            webhooks,
            judges: Vec::new(),
            alerts,
            // Flagger promotes at the end of the plan unless a check failed; the
            // `weir.dev/promote-on` annotation opts into weir's evidence rule.
            evidence: EvidenceRule::no_harm(),
            judge_counts: None,
        }
    }

    fn metrics(&mut self, metrics: &[MetricSpec]) -> Vec<Metric> {
        let raw_metrics = field(self.raw_analysis, "metrics");
        let mut converted = Vec::with_capacity(metrics.len());
        for (index, metric) in metrics.iter().enumerate() {
            let path = format!("{}[{index}]", self.path("metrics"));
            let raw = raw_metrics.and_then(|metrics| metrics.get(index));
            let template_ref = metric.template_ref.as_ref().map(|reference| TemplateRef {
                name: reference.name.clone().unwrap_or_default(),
                namespace: reference.namespace.clone().filter(|ns| !ns.is_empty()),
            });
            let query = metric
                .query
                .clone()
                .filter(|query| !query.trim().is_empty());
            let builtin = metric.name == REQUEST_SUCCESS_RATE
                || metric.name == crate::model::REQUEST_DURATION;
            if template_ref.is_none() && query.is_none() && !builtin {
                // Flagger runs no check for a metric without a template, a query or a builtin
                // name, so it is kept rather than turned into a check that would fail.
                if let Some(raw) = raw {
                    self.kept.keep_because(
                        &path,
                        raw,
                        "kept as an annotation; Flagger runs no check for a metric without \
                         templateRef, query or a builtin name (request-success-rate, \
                         request-duration)",
                    );
                }
                continue;
            }
            self.kept.keep_unknown_keys(
                raw,
                &path,
                &[
                    "name",
                    "interval",
                    "threshold",
                    "thresholdRange",
                    "query",
                    "templateRef",
                    "templateVariables",
                ],
            );
            if let Some(raw_ref) = field(raw, "templateRef") {
                self.kept.keep_unknown_keys(
                    Some(raw_ref),
                    &join(&path, "templateRef"),
                    &["name", "namespace"],
                );
            }
            if query.is_some() && template_ref.is_none() {
                self.kept.warn(
                    join(&path, "query"),
                    "Flagger's inline query is deprecated; weir runs it against the default \
                     metrics server (spec.metricsServer). A MetricTemplate says where it runs",
                );
            }
            let threshold_range = self.threshold_range(metric, raw, &path);
            let mut template_variables = BTreeMap::new();
            for (name, value) in metric.template_variables.iter().flatten() {
                let (text, was_string) = as_string(value);
                if !was_string {
                    self.kept.warn(
                        format!("{path}.templateVariables.{name}"),
                        format!("{value} is not a string; read as {text:?}"),
                    );
                }
                template_variables.insert(name.clone(), text);
            }
            converted.push(Metric {
                name: metric.name.clone(),
                threshold_range,
                template_ref,
                template_variables,
                query,
                interval: Some(metric.interval.0.unwrap_or(DEFAULT_METRIC_INTERVAL)),
            });
            self.origins.metrics.push(index);
        }
        converted
    }

    /// `thresholdRange`, or the deprecated `threshold`: a lower bound for the success rate and
    /// an upper bound for everything else (latency, error rates), as Flagger reads it.
    fn threshold_range(
        &mut self,
        metric: &MetricSpec,
        raw: Option<&Value>,
        path: &str,
    ) -> Option<ThresholdRange> {
        let range = metric.threshold_range.as_ref().map(|range| ThresholdRange {
            min: range.min,
            max: range.max,
        });
        if let Some(raw_range) = field(raw, "thresholdRange") {
            self.kept.keep_unknown_keys(
                Some(raw_range),
                &join(path, "thresholdRange"),
                &["min", "max"],
            );
        }
        let threshold_path = join(path, "threshold");
        match (range, metric.threshold) {
            (Some(range), Some(_)) => {
                if let Some(value) = field(raw, "threshold") {
                    self.kept.keep_because(
                        &threshold_path,
                        value,
                        "kept as an annotation; the deprecated threshold is not used because \
                         thresholdRange is set",
                    );
                }
                Some(range)
            }
            (Some(range), None) => Some(range),
            (None, Some(threshold)) => {
                let (range, bound) = if metric.name == REQUEST_SUCCESS_RATE {
                    (
                        ThresholdRange {
                            min: Some(threshold),
                            max: None,
                        },
                        "min",
                    )
                } else {
                    (
                        ThresholdRange {
                            min: None,
                            max: Some(threshold),
                        },
                        "max",
                    )
                };
                self.kept.warn(
                    threshold_path,
                    format!(
                        "deprecated; read as thresholdRange: {{{bound}: {threshold}}}; write \
                         thresholdRange instead"
                    ),
                );
                Some(range)
            }
            (None, None) => None,
        }
    }

    fn webhooks(&mut self, webhooks: &[WebhookSpec]) -> Vec<Webhook> {
        let raw_hooks = field(self.raw_analysis, "webhooks");
        let mut converted = Vec::with_capacity(webhooks.len());
        for (index, hook) in webhooks.iter().enumerate() {
            let path = format!("{}[{index}]", self.path("webhooks"));
            let raw = raw_hooks.and_then(|hooks| hooks.get(index));
            self.kept.keep_unknown_keys(
                raw,
                &path,
                &[
                    "name",
                    "type",
                    "url",
                    "timeout",
                    "retries",
                    "metadata",
                    "muteAlert",
                ],
            );
            let hook_type = match hook.hook_type.as_deref().unwrap_or("") {
                // Flagger's empty type is a rollout hook.
                "" => HookType::Rollout,
                written => match HookType::ALL.iter().find(|known| known.as_str() == written) {
                    Some(known) => *known,
                    None => {
                        self.errors.push(FieldError::with_value(
                            join(&path, "type"),
                            format!("{written:?}"),
                            format!(
                                "allowed: {} (empty means rollout)",
                                HookType::ALL.map(HookType::as_str).join(", ")
                            ),
                        ));
                        HookType::Rollout
                    }
                },
            };
            let retries = hook.retries.and_then(|count| match u32::try_from(count) {
                Ok(count) => Some(count),
                Err(_) => {
                    self.errors.push(FieldError::with_value(
                        join(&path, "retries"),
                        count,
                        "retries are a count, 0 or more",
                    ));
                    None
                }
            });
            let mut metadata = BTreeMap::new();
            for (key, value) in hook.metadata.iter().flatten() {
                let (text, was_string) = as_string(value);
                if !was_string {
                    self.kept.warn(
                        format!("{path}.metadata.{key}"),
                        format!(
                            "{value} is not a string (Flagger's webhook metadata maps strings to \
                             strings); sent as {text:?}"
                        ),
                    );
                }
                metadata.insert(key.clone(), text);
            }
            converted.push(Webhook {
                name: hook.name.clone(),
                hook_type,
                url: hook.url.clone(),
                timeout: hook.timeout.0,
                retries,
                metadata,
                mute_alert: hook.mute_alert.unwrap_or(false),
                // Flagger has no signing secret.
                secret_ref: None,
            });
        }
        converted
    }

    fn alerts(&mut self, alerts: &[AlertSpec]) -> Vec<Alert> {
        if alerts.is_empty() {
            return Vec::new();
        }
        let raw_alerts = field(self.raw_analysis, "alerts");
        let alerts_path = self.path("alerts");
        let mut converted = Vec::with_capacity(alerts.len());
        for (index, alert) in alerts.iter().enumerate() {
            let path = format!("{alerts_path}[{index}]");
            let raw = raw_alerts.and_then(|alerts| alerts.get(index));
            self.kept
                .keep_unknown_keys(raw, &path, &["name", "severity", "providerRef"]);
            let severity = match alert.severity.as_deref().unwrap_or("") {
                "" | "info" => Severity::Info,
                "warn" => Severity::Warn,
                "error" => Severity::Error,
                other => {
                    self.errors.push(FieldError::with_value(
                        join(&path, "severity"),
                        format!("{other:?}"),
                        "allowed: info, warn, error",
                    ));
                    Severity::Info
                }
            };
            converted.push(Alert {
                name: alert.name.clone(),
                severity,
                provider_ref: TemplateRef {
                    name: alert.provider_ref.name.clone().unwrap_or_default(),
                    namespace: alert
                        .provider_ref
                        .namespace
                        .clone()
                        .filter(|namespace| !namespace.is_empty()),
                },
            });
        }
        converted
    }
}

impl Kept {
    /// Keeps every key of `object` not in `known`, saying why.
    fn keep_unknown_keys_because(
        &mut self,
        object: Option<&Value>,
        base: &str,
        known: &[&str],
        reason: &str,
    ) {
        let Some(Value::Object(map)) = object else {
            return;
        };
        for (key, value) in map {
            if !known.contains(&key.as_str()) {
                self.keep_because(&join(base, key), value, reason);
            }
        }
    }
}

/// A validation error on the converted Rollout, restated for the Flagger Canary: its path, and
/// the progress deadline in seconds as `progressDeadlineSeconds` is written.
fn in_flagger_terms(error: FieldError, analysis_base: &str, origins: &Origins) -> FieldError {
    let path = flagger_path(&error.path, analysis_base, origins);
    if path == "spec.progressDeadlineSeconds"
        && let Some(written) = error.value.as_deref()
        && let Ok(deadline) = GoDuration::parse(written)
    {
        let seconds = deadline.get().as_secs().to_string();
        return FieldError {
            path,
            message: error.message.replacen(written, &seconds, 1),
            value: Some(seconds),
        };
    }
    FieldError { path, ..error }
}

/// Translates the path of a validation error on the converted Rollout into the path of the
/// field the user wrote in the Flagger Canary.
fn flagger_path(path: &str, analysis_base: &str, origins: &Origins) -> String {
    let analysis_field = |rest: &str| format!("{analysis_base}{rest}");
    for (weir_prefix, flagger_field) in [
        ("spec.plan.abTest.iterations", "iterations"),
        ("spec.plan.blueGreen.iterations", "iterations"),
        ("spec.plan.mirror.iterations", "iterations"),
        ("spec.plan.mirror.mirrorWeight", "mirrorWeight"),
        ("spec.plan.abTest.match", "match"),
    ] {
        if let Some(rest) = path.strip_prefix(weir_prefix) {
            return analysis_field(&format!(".{flagger_field}{rest}"));
        }
    }
    if let Some(rest) = path.strip_prefix("spec.plan.canary") {
        return analysis_field(rest);
    }
    if path.starts_with("spec.plan") {
        return analysis_base.to_string();
    }
    if let Some(rest) = path.strip_prefix("spec.sessionAffinity") {
        return analysis_field(&format!(".sessionAffinity{rest}"));
    }
    if path.starts_with("spec.analysis.progressDeadline") {
        return "spec.progressDeadlineSeconds".to_string();
    }
    if let Some(rest) = path.strip_prefix("spec.analysis.metrics[")
        && let Some((index, tail)) = rest.split_once(']')
        && let Ok(index) = index.parse::<usize>()
    {
        let original = origins.metrics.get(index).copied().unwrap_or(index);
        return analysis_field(&format!(".metrics[{original}]{tail}"));
    }
    if let Some(rest) = path.strip_prefix("spec.analysis") {
        return analysis_field(rest);
    }
    path.to_string()
}
