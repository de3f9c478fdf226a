//! An Argo AnalysisRun as a pure state machine, following Argo Rollouts v1.9.1
//! (`analysis/analysis.go`, `utils/analysis/`, `utils/evaluate/`).
//!
//! - Arguments: [`flatten_template_args`] joins the templates' declarations, [`rollout_args`]
//!   resolves what a Rollout supplies (`podTemplateHashValue`, `fieldRef`), [`merge_args`] lays
//!   them over the templates' defaults (a missing one is `args.NAME was not resolved`), and
//!   [`substitute`] fills `{{args.NAME}}` (any other `{{...}}` is `failed to resolve {{...}}`).
//! - [`RunSpec::build`] reads an AnalysisRun's (or a template's) `spec` JSON with the argument
//!   values into [`MetricSpec`]s, conditions parsed with [`super::expr`].
//! - [`measurement_phase`]: one result judged by the success and failure conditions.
//! - [`AnalysisRunState`]: measurements arrive ([`AnalysisRunState::record`]) with their times;
//!   it keeps Argo's counters, assesses each metric's phase and the run's, says which metrics
//!   are due ([`AnalysisRunState::due`]) and when the next one is
//!   ([`AnalysisRunState::next_measurement_at`]), and writes `status` in Argo's shape
//!   ([`AnalysisRunState::status`]).
//!
//! Time is passed in; nothing here reads a clock, does IO or panics.

use std::collections::BTreeMap;
use std::fmt;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Map, Value, json};

use super::expr::{Expr, Val};
use super::types::{AnalysisArg, IntOrString, Metric, SecretKeyRef};
use crate::units::GoDuration;

/// Argo's `consecutiveErrorLimit` when none is written.
pub const DEFAULT_CONSECUTIVE_ERROR_LIMIT: i64 = 4;
/// Measurements kept per metric unless `measurementRetention` says otherwise.
pub const DEFAULT_MEASUREMENT_HISTORY_LIMIT: usize = 10;
/// The wait before measuring again after an Error measurement.
pub const ERROR_RETRY_INTERVAL: SignedDuration = SignedDuration::from_secs(10);
/// The message of a measurement ended because the run terminated.
pub const METRIC_TERMINATED: &str = "Metric Terminated";
/// The run's message when `spec.terminate` ended it.
pub const RUN_TERMINATED: &str = "Run Terminated";

/// The phase of a measurement, a metric or a run (`AnalysisPhase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not started.
    Pending,
    /// In progress.
    Running,
    /// Passed.
    Successful,
    /// Failed.
    Failed,
    /// Could not be measured.
    Error,
    /// Neither passed nor failed.
    Inconclusive,
}

impl Phase {
    /// Argo's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Successful => "Successful",
            Phase::Failed => "Failed",
            Phase::Error => "Error",
            Phase::Inconclusive => "Inconclusive",
        }
    }

    /// Reads Argo's spelling.
    pub fn parse(text: &str) -> Option<Phase> {
        [
            Phase::Pending,
            Phase::Running,
            Phase::Successful,
            Phase::Failed,
            Phase::Error,
            Phase::Inconclusive,
        ]
        .into_iter()
        .find(|phase| phase.as_str() == text)
    }

    /// Successful, Failed, Error or Inconclusive.
    pub fn completed(self) -> bool {
        matches!(
            self,
            Phase::Successful | Phase::Failed | Phase::Error | Phase::Inconclusive
        )
    }

    /// Argo's order of badness: Successful < Running < Pending < Inconclusive < Error < Failed.
    fn badness(self) -> u8 {
        match self {
            Phase::Successful => 0,
            Phase::Running => 1,
            Phase::Pending => 2,
            Phase::Inconclusive => 3,
            Phase::Error => 4,
            Phase::Failed => 5,
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === Arguments ===

/// Joins the arguments of several templates, as Argo's `flattenArgs`: the same name twice is
/// one argument, an unset value takes a later set one, and two different values are an error.
pub fn flatten_template_args<'a>(
    templates: impl IntoIterator<Item = &'a [AnalysisArg]>,
) -> Result<Vec<AnalysisArg>, String> {
    let mut combined: Vec<AnalysisArg> = Vec::new();
    for args in templates {
        for arg in args {
            match combined.iter_mut().find(|seen| seen.name == arg.name) {
                Some(seen) => {
                    if let (Some(before), Some(after)) = (&seen.value, &arg.value)
                        && before != after
                    {
                        return Err(format!(
                            "Argument `{}` specified multiple times with different values: '{before}', '{after}'",
                            arg.name
                        ));
                    }
                    if seen.value.is_none() {
                        *seen = arg.clone();
                    }
                }
                None => combined.push(arg.clone()),
            }
        }
    }
    Ok(combined)
}

/// Lays the arguments a Rollout (or an AnalysisRun's creator) supplies over the templates' own,
/// as Argo's `MergeArgs`: only declared arguments are taken; a value replaces, else a
/// `valueFrom` does. An argument left with neither is an error naming it.
pub fn merge_args(
    incoming: &[AnalysisArg],
    template_args: &[AnalysisArg],
) -> Result<Vec<AnalysisArg>, String> {
    let mut merged = template_args.to_vec();
    for arg in incoming {
        if let Some(target) = merged.iter_mut().find(|target| target.name == arg.name) {
            if arg.value.is_some() {
                target.value.clone_from(&arg.value);
            } else if arg.value_from.is_some() {
                target.value_from.clone_from(&arg.value_from);
            }
        }
    }
    if let Some(missing) = merged
        .iter()
        .find(|arg| arg.value.is_none() && arg.value_from.is_none())
    {
        return Err(format!("args.{} was not resolved", missing.name));
    }
    Ok(merged)
}

/// Resolves what only the Rollout knows in its analysis arguments, as Argo's
/// `BuildArgumentsForRolloutAnalysisRun`: `podTemplateHashValue: Stable | Latest` becomes the
/// hash of that ReplicaSet, and `fieldRef.fieldPath` the value at that path of the Rollout
/// (`metadata.name`, `metadata.labels['app']`, `spec.replicas`, ...). `secretKeyRef` is left for
/// the run to read. A path that does not end at a value is an error naming it.
pub fn rollout_args(
    args: &[AnalysisArg],
    stable_hash: &str,
    latest_hash: &str,
    rollout: &Value,
) -> Result<Vec<AnalysisArg>, String> {
    let mut resolved = Vec::with_capacity(args.len());
    for arg in args {
        let mut arg = arg.clone();
        if let Some(from) = &arg.value_from {
            if let Some(which) = &from.pod_template_hash_value {
                let hash = match which.as_str() {
                    "Latest" => latest_hash,
                    "Stable" => stable_hash,
                    _ => "",
                };
                arg.value = Some(hash.to_string());
                arg.value_from = None;
            } else if let Some(field) = &from.field_ref {
                let value = field_path(rollout, &field.field_path).ok_or_else(|| {
                    format!(
                        "args.{}: fieldPath {:?} does not name a value of the Rollout",
                        arg.name, field.field_path
                    )
                })?;
                arg.value = Some(value);
                arg.value_from = None;
            }
        }
        resolved.push(arg);
    }
    Ok(resolved)
}

/// The scalar at a field path such as `metadata.labels['app']` or `spec.strategy.canary.x`.
fn field_path(object: &Value, path: &str) -> Option<String> {
    let mut current = object;
    let mut rest = path;
    while !rest.is_empty() {
        rest = rest.strip_prefix('.').unwrap_or(rest);
        let (key, after) = if let Some(bracketed) = rest.strip_prefix("['") {
            let end = bracketed.find("']")?;
            (&bracketed[..end], &bracketed[end + 2..])
        } else if let Some(bracketed) = rest.strip_prefix("[\"") {
            let end = bracketed.find("\"]")?;
            (&bracketed[..end], &bracketed[end + 2..])
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            (&rest[..end], &rest[end..])
        };
        if key.is_empty() {
            return None;
        }
        current = match current {
            Value::Object(map) => map.get(key)?,
            Value::Array(items) => items.get(key.parse::<usize>().ok()?)?,
            _ => return None,
        };
        rest = after;
    }
    match current {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// The arguments' values a run substitutes, and those read from Secrets (redacted from
/// measurement messages).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ArgValues {
    /// Name and value of every argument.
    pub values: Vec<(String, String)>,
    /// The values that came from Secrets.
    pub secrets: Vec<String>,
}

/// The arguments' values: a `value`, or a Secret's key read by `secret` (the operator's lookup).
/// An argument with neither is `argument "NAME" was not supplied`.
pub fn arg_values(
    args: &[AnalysisArg],
    secret: &dyn Fn(&SecretKeyRef) -> Option<String>,
) -> Result<ArgValues, String> {
    let mut values = ArgValues::default();
    for arg in args {
        let value = match (&arg.value, &arg.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(from)) => match from.secret_key_ref.as_ref() {
                Some(key) => {
                    let value = secret(key).ok_or_else(|| {
                        format!(
                            "args.{}: key {:?} of Secret {:?} was not found",
                            arg.name, key.key, key.name
                        )
                    })?;
                    values.secrets.push(value.clone());
                    value
                }
                None => return Err(format!("argument \"{}\" was not supplied", arg.name)),
            },
            (None, None) => return Err(format!("argument \"{}\" was not supplied", arg.name)),
        };
        values.values.push((arg.name.clone(), value));
    }
    Ok(values)
}

/// Fills every `{{args.NAME}}` (spaces inside the braces ignored) of `text`, as Argo's
/// `ResolveArgs`; any other placeholder is `failed to resolve {{...}}`.
pub fn substitute(text: &str, args: &[(String, String)]) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(format!(
                "cannot find end tag=\"}}}}\" in the template={text:?} starting from {:?}",
                &rest[start..]
            ));
        };
        let tag = &after[..end];
        let value = tag
            .trim()
            .strip_prefix("args.")
            .and_then(|name| args.iter().find(|(arg, _)| arg == name));
        match value {
            Some((_, value)) => out.push_str(value),
            None => return Err(format!("failed to resolve {{{{{tag}}}}}")),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// [`substitute`] in every string of a JSON value.
pub fn substitute_json(value: &Value, args: &[(String, String)]) -> Result<Value, String> {
    Ok(match value {
        Value::String(text) => Value::String(substitute(text, args)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| substitute_json(item, args))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, item) in map {
                out.insert(key.clone(), substitute_json(item, args)?);
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

// === Specs ===

/// A condition as written and as parsed (a parse error is a measurement Error, as Argo's
/// compile error is when it evaluates).
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// The expression as written.
    pub text: String,
    /// The parsed expression, or why it does not parse.
    pub parsed: Result<Expr, String>,
}

impl Condition {
    /// Parses a condition.
    pub fn new(text: &str) -> Condition {
        Condition {
            text: text.to_string(),
            parsed: Expr::parse(text).map_err(|error| error.to_string()),
        }
    }

    fn evaluate(&self, result: &Val) -> Result<bool, String> {
        match &self.parsed {
            Ok(expr) => expr
                .evaluate_bool(result)
                .map_err(|error| error.to_string()),
            Err(error) => Err(error.clone()),
        }
    }
}

/// One metric, its arguments substituted, with Argo's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSpec {
    /// The name.
    pub name: String,
    /// Time between measurements.
    pub interval: Option<SignedDuration>,
    /// Time from the run's start to the first measurement.
    pub initial_delay: Option<SignedDuration>,
    /// `count` as written (0: see [`MetricSpec::effective_count`]).
    pub count: i64,
    /// Failed measurements tolerated (default 0; negative: no limit).
    pub failure_limit: i64,
    /// Inconclusive measurements tolerated (default 0).
    pub inconclusive_limit: i64,
    /// Errors in a row tolerated (default 4).
    pub consecutive_error_limit: i64,
    /// Successes in a row that end the metric (0: not used).
    pub consecutive_success_limit: i64,
    /// `successCondition`.
    pub success_condition: Option<Condition>,
    /// `failureCondition`.
    pub failure_condition: Option<Condition>,
    /// Its results never decide the run.
    pub dry_run: bool,
    /// Measurements kept in the status.
    pub measurement_limit: usize,
}

/// `intstr.IntValue`: an integer, or a string read as one (0 when it is not).
fn int_value(value: Option<&IntOrString>, default: i64) -> i64 {
    match value {
        None => default,
        Some(IntOrString::Int(number)) => *number,
        Some(IntOrString::String(text)) => text.trim().parse().unwrap_or(0),
    }
}

fn duration(field: &str, text: Option<&String>) -> Result<Option<SignedDuration>, String> {
    match text.filter(|text| !text.is_empty()) {
        None => Ok(None),
        Some(text) => {
            let parsed = GoDuration::parse(text).map_err(|error| format!("{field}: {error}"))?;
            SignedDuration::try_from(parsed.get())
                .map(Some)
                .map_err(|_| format!("{field}: {text:?} is too long"))
        }
    }
}

impl MetricSpec {
    /// A metric read from its typed model.
    pub fn from_metric(metric: &Metric, dry_run: bool) -> Result<MetricSpec, String> {
        let name = &metric.name;
        Ok(MetricSpec {
            name: name.clone(),
            interval: duration(
                &format!("metric {name:?} interval"),
                metric.interval.as_ref(),
            )?,
            initial_delay: duration(
                &format!("metric {name:?} initialDelay"),
                metric.initial_delay.as_ref(),
            )?,
            count: int_value(metric.count.as_ref(), 0),
            failure_limit: int_value(metric.failure_limit.as_ref(), 0),
            inconclusive_limit: int_value(metric.inconclusive_limit.as_ref(), 0),
            consecutive_error_limit: int_value(
                metric.consecutive_error_limit.as_ref(),
                DEFAULT_CONSECUTIVE_ERROR_LIMIT,
            ),
            consecutive_success_limit: int_value(metric.consecutive_success_limit.as_ref(), 0),
            success_condition: metric
                .success_condition
                .as_deref()
                .filter(|text| !text.is_empty())
                .map(Condition::new),
            failure_condition: metric
                .failure_condition
                .as_deref()
                .filter(|text| !text.is_empty())
                .map(Condition::new),
            dry_run,
            measurement_limit: DEFAULT_MEASUREMENT_HISTORY_LIMIT,
        })
    }

    /// Argo's `EffectiveCount`: `count` if above 0; else 1 without an interval; else none (the
    /// metric runs until the run is terminated).
    pub fn effective_count(&self) -> Option<i64> {
        if self.count == 0 {
            if self.interval.is_none() {
                Some(1)
            } else {
                None
            }
        } else {
            Some(self.count)
        }
    }
}

/// What a run measures: its metrics, arguments substituted.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    /// The metrics, in order.
    pub metrics: Vec<MetricSpec>,
    /// `spec.terminate`.
    pub terminate: bool,
    /// Secret argument values, redacted from measurement messages.
    pub secrets: Vec<String>,
}

/// A run that cannot start, with Argo's message (the run's phase is Error at once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A regex of `dryRun` or `measurementRetention` matched as Go's `regexp.MatchString` (anywhere in
/// the name; an invalid one matches nothing).
fn name_matches(pattern: &str, name: &str) -> bool {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .is_ok_and(|regex| regex.is_match(name))
}

impl RunSpec {
    /// Reads an AnalysisRun's `spec` (or an AnalysisTemplate's, with `metrics`, `dryRun`,
    /// `measurementRetention`), substituting the argument values. Errors are Argo's run messages:
    /// `Unable to resolve metric arguments: ...`, `Analysis spec invalid: ...`.
    pub fn build(spec: &Value, args: &ArgValues) -> Result<RunSpec, SpecError> {
        let metrics = spec
            .get("metrics")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let mut typed = Vec::with_capacity(metrics.len());
        for (index, metric) in metrics.iter().enumerate() {
            let metric = substitute_json(metric, &args.values).map_err(|error| {
                SpecError(format!("Unable to resolve metric arguments: {error}"))
            })?;
            let metric: Metric = serde_json::from_value(metric).map_err(|error| {
                SpecError(format!("Analysis spec invalid: metrics[{index}]: {error}"))
            })?;
            typed.push(metric);
        }
        let names: Vec<&str> = typed.iter().map(|metric| metric.name.as_str()).collect();
        let rules = |field: &str| -> Vec<(String, Option<i64>)> {
            spec.get(field)
                .and_then(Value::as_array)
                .map(|rules| {
                    rules
                        .iter()
                        .map(|rule| {
                            (
                                rule.get("metricName")
                                    .and_then(Value::as_str)
                                    .unwrap_or("")
                                    .to_string(),
                                rule.get("limit").and_then(Value::as_i64),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let dry_run_rules = rules("dryRun");
        let retention_rules = rules("measurementRetention");
        for (field, rules) in [
            ("dryRun", &dry_run_rules),
            ("measurementRetention", &retention_rules),
        ] {
            for (index, (pattern, _)) in rules.iter().enumerate() {
                if !names.iter().any(|name| name_matches(pattern, name)) {
                    return Err(SpecError(format!(
                        "Analysis spec invalid: {field}[{index}]: Rule didn't match any metric name(s)"
                    )));
                }
            }
        }
        let mut seen: Vec<&str> = Vec::new();
        let mut metrics = Vec::with_capacity(typed.len());
        for (index, metric) in typed.iter().enumerate() {
            if seen.contains(&metric.name.as_str()) {
                return Err(SpecError(format!(
                    "Analysis spec invalid: metrics[{index}]: duplicate name '{}'",
                    metric.name
                )));
            }
            seen.push(&metric.name);
            let dry_run = dry_run_rules
                .iter()
                .any(|(pattern, _)| name_matches(pattern, &metric.name));
            let mut spec = MetricSpec::from_metric(metric, dry_run).map_err(|error| {
                SpecError(format!("Analysis spec invalid: metrics[{index}]: {error}"))
            })?;
            if let Some(limit) = retention_rules
                .iter()
                .rev()
                .find(|(pattern, _)| name_matches(pattern, &metric.name))
                .and_then(|(_, limit)| *limit)
                .filter(|limit| *limit > 0)
            {
                spec.measurement_limit = usize::try_from(limit).unwrap_or(usize::MAX);
            }
            metrics.push(spec);
        }
        Ok(RunSpec {
            metrics,
            terminate: spec
                .get("terminate")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            secrets: args.secrets.clone(),
        })
    }
}

// === Measurements ===

/// Judges one result as Argo's `EvaluateResult`: no conditions → Successful; only a success
/// condition → Failed when it is false; only a failure condition → Successful when it is false;
/// both → Failed if the failure condition holds, Successful if the success condition does,
/// Inconclusive if neither. An evaluation error (or a condition that does not parse) is `Err`,
/// which is a measurement Error.
pub fn measurement_phase(
    success: Option<&Condition>,
    failure: Option<&Condition>,
    result: &Val,
) -> Result<Phase, String> {
    let succeeded = success.map(|c| c.evaluate(result)).transpose()?;
    let failed = failure.map(|c| c.evaluate(result)).transpose()?;
    Ok(match (succeeded, failed) {
        (None, None) => Phase::Successful,
        (Some(true), None) | (None, Some(false)) => Phase::Successful,
        (Some(false), None) | (None, Some(true)) => Phase::Failed,
        (Some(_), Some(true)) => Phase::Failed,
        (Some(true), Some(false)) => Phase::Successful,
        (Some(false), Some(false)) => Phase::Inconclusive,
    })
}

/// What a provider returned for one measurement.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A value, judged by the metric's conditions; `shown` is the measurement's `value`.
    Value {
        /// The value `result` is bound to.
        result: Val,
        /// The text stored as the measurement's value.
        shown: String,
    },
    /// A phase the provider decides itself (a Job completing or failing), with a message.
    Decided {
        /// Successful, Failed, Inconclusive or Error.
        phase: Phase,
        /// The measurement's message, if any.
        message: Option<String>,
    },
    /// The measurement could not be taken: a measurement Error with this message.
    Error(String),
}

impl Outcome {
    /// A JSON result (a web provider's value, a Prometheus scalar or vector): the value shown is
    /// the string itself or the compact JSON.
    pub fn json(value: &Value) -> Outcome {
        let shown = match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        Outcome::Value {
            result: Val::from_json(value),
            shown,
        }
    }
}

/// One measurement, as Argo records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// Its phase (Running while in flight).
    pub phase: Phase,
    /// The value, as text.
    pub value: Option<String>,
    /// A message (an error's).
    pub message: Option<String>,
    /// When it started.
    pub started_at: Timestamp,
    /// When it finished (none while in flight).
    pub finished_at: Option<Timestamp>,
}

/// A metric's results (`status.metricResults[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct MetricResult {
    /// The metric's name.
    pub name: String,
    /// The metric's phase.
    pub phase: Phase,
    /// The last measurements (at most the metric's limit).
    pub measurements: Vec<Measurement>,
    /// The message of the metric (its last measurement's, or a dry run's assessment).
    pub message: Option<String>,
    /// Completed measurements other than errors.
    pub count: i64,
    /// Successful measurements.
    pub successful: i64,
    /// Failed measurements.
    pub failed: i64,
    /// Inconclusive measurements.
    pub inconclusive: i64,
    /// Error measurements.
    pub error: i64,
    /// Errors in a row.
    pub consecutive_error: i64,
    /// Successes in a row.
    pub consecutive_success: i64,
    /// A dry-run metric.
    pub dry_run: bool,
}

impl MetricResult {
    fn new(spec: &MetricSpec) -> MetricResult {
        MetricResult {
            name: spec.name.clone(),
            phase: Phase::Running,
            measurements: Vec::new(),
            message: None,
            count: 0,
            successful: 0,
            failed: 0,
            inconclusive: 0,
            error: 0,
            consecutive_error: 0,
            consecutive_success: 0,
            dry_run: spec.dry_run,
        }
    }

    /// Counts a completed measurement as Argo does (errors do not count towards `count`).
    fn count_measurement(&mut self, phase: Phase) {
        match phase {
            Phase::Successful => {
                self.successful += 1;
                self.count += 1;
                self.consecutive_error = 0;
                self.consecutive_success += 1;
            }
            Phase::Failed => {
                self.failed += 1;
                self.count += 1;
                self.consecutive_error = 0;
                self.consecutive_success = 0;
            }
            Phase::Inconclusive => {
                self.inconclusive += 1;
                self.count += 1;
                self.consecutive_error = 0;
                self.consecutive_success = 0;
            }
            Phase::Error => {
                self.error += 1;
                self.consecutive_error += 1;
                self.consecutive_success = 0;
            }
            Phase::Pending | Phase::Running => {}
        }
    }

    fn last(&self) -> Option<&Measurement> {
        self.measurements.last()
    }
}

/// Argo's `assessMetricFailureInconclusiveOrError`: the limit a metric's counters broke, later
/// checks winning (Error over Inconclusive over Failed), with Argo's reason.
pub fn limit_broken(spec: &MetricSpec, result: &MetricResult) -> Option<(Phase, String)> {
    let mut broken = None;
    if spec.failure_limit >= 0 && result.failed > spec.failure_limit {
        broken = Some((
            Phase::Failed,
            format!(
                "failed ({}) > failureLimit ({})",
                result.failed, spec.failure_limit
            ),
        ));
    }
    if result.inconclusive > spec.inconclusive_limit {
        broken = Some((
            Phase::Inconclusive,
            format!(
                "inconclusive ({}) > inconclusiveLimit ({})",
                result.inconclusive, spec.inconclusive_limit
            ),
        ));
    }
    if result.consecutive_error > spec.consecutive_error_limit {
        broken = Some((
            Phase::Error,
            format!(
                "consecutiveErrors ({}) > consecutiveErrorLimit ({})",
                result.consecutive_error, spec.consecutive_error_limit
            ),
        ));
    }
    broken
}

/// Argo's `assessMetricStatus`: a metric's phase from its counters and last measurement.
pub fn metric_phase(spec: &MetricSpec, result: &MetricResult, terminating: bool) -> Phase {
    if result.phase.completed() {
        return result.phase;
    }
    let Some(last) = result.last() else {
        return if terminating {
            Phase::Successful
        } else {
            Phase::Pending
        };
    };
    if !last.phase.completed() {
        return Phase::Running;
    }
    if let Some((phase, _)) = limit_broken(spec, result) {
        return phase;
    }
    let success_applies = spec.consecutive_success_limit > 0;
    if success_applies && result.consecutive_success >= spec.consecutive_success_limit {
        return Phase::Successful;
    }
    if let Some(count) = spec.effective_count()
        && result.count >= count
    {
        let failure_applies = spec.failure_limit >= 0;
        return match (failure_applies, success_applies) {
            (true, true) => Phase::Inconclusive,
            (false, true) => Phase::Failed,
            _ => Phase::Successful,
        };
    }
    if terminating {
        Phase::Successful
    } else {
        Phase::Running
    }
}

/// `status.runSummary` / `status.dryRunSummary`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunSummary {
    /// Metrics.
    pub count: i64,
    /// Completed Successful.
    pub successful: i64,
    /// Completed Failed.
    pub failed: i64,
    /// Completed Inconclusive.
    pub inconclusive: i64,
    /// Completed Error.
    pub error: i64,
}

impl RunSummary {
    fn from_json(value: Option<&Value>) -> RunSummary {
        let field = |key: &str| {
            value
                .and_then(|value| value.get(key))
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        RunSummary {
            count: field("count"),
            successful: field("successful"),
            failed: field("failed"),
            inconclusive: field("inconclusive"),
            error: field("error"),
        }
    }

    fn to_json(self) -> Value {
        let mut map = Map::new();
        for (key, value) in [
            ("count", self.count),
            ("successful", self.successful),
            ("failed", self.failed),
            ("inconclusive", self.inconclusive),
            ("error", self.error),
        ] {
            if value != 0 {
                map.insert(key.into(), json!(value));
            }
        }
        Value::Object(map)
    }
}

/// A running AnalysisRun: its spec, its results, its phase.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalysisRunState {
    /// What is measured.
    pub spec: RunSpec,
    /// One result per metric, once it has been measured.
    pub results: Vec<Option<MetricResult>>,
    /// `status.startedAt`.
    pub started_at: Timestamp,
    /// `status.completedAt`.
    pub completed_at: Option<Timestamp>,
    /// `status.phase`.
    pub phase: Phase,
    /// `status.message`.
    pub message: String,
    /// `status.runSummary`.
    pub run_summary: RunSummary,
    /// `status.dryRunSummary`.
    pub dry_run_summary: RunSummary,
}

/// Why a measurement was not recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// No metric of that name.
    UnknownMetric(String),
    /// The run has completed; its status no longer changes.
    Completed,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::UnknownMetric(name) => write!(f, "the run has no metric {name:?}"),
            RecordError::Completed => f.write_str("the run has completed"),
        }
    }
}

impl AnalysisRunState {
    /// A run started at `started_at`.
    pub fn new(spec: RunSpec, started_at: Timestamp) -> AnalysisRunState {
        let results = vec![None; spec.metrics.len()];
        let mut state = AnalysisRunState {
            spec,
            results,
            started_at,
            completed_at: None,
            phase: Phase::Running,
            message: String::new(),
            run_summary: RunSummary::default(),
            dry_run_summary: RunSummary::default(),
        };
        state.reconcile(started_at);
        state
    }

    /// A run that could not start ([`RunSpec::build`]'s error): Error with Argo's message.
    pub fn failed_to_start(error: &SpecError, at: Timestamp) -> AnalysisRunState {
        AnalysisRunState {
            spec: RunSpec {
                metrics: Vec::new(),
                terminate: false,
                secrets: Vec::new(),
            },
            results: Vec::new(),
            started_at: at,
            completed_at: Some(at),
            phase: Phase::Error,
            message: error.0.clone(),
            run_summary: RunSummary::default(),
            dry_run_summary: RunSummary::default(),
        }
    }

    /// A run restored from the `status` it wrote before ([`AnalysisRunState::status`]), so an
    /// operator that restarts (even killed mid-run) goes on where the last write left it: the
    /// counters, the kept measurements (an in-flight one stays in flight), `startedAt`, the phase,
    /// the message and the summaries. A status without a phase or `startedAt` is a run not yet
    /// started: it starts at `now_if_unstarted`. Results of metrics the spec no longer has are
    /// dropped; what cannot be read is taken as absent (a counter as 0), since the status is
    /// the controller's own writing and a partial restore beats refusing the run.
    pub fn from_status(
        spec: RunSpec,
        status: &Value,
        now_if_unstarted: Timestamp,
    ) -> AnalysisRunState {
        let text = |key: &str| status.get(key).and_then(Value::as_str);
        let started_at = text("startedAt").and_then(parse_time);
        let phase = text("phase").and_then(Phase::parse);
        let (Some(started_at), Some(phase)) = (started_at, phase) else {
            return AnalysisRunState::new(spec, started_at.unwrap_or(now_if_unstarted));
        };
        let stored: Vec<&Value> = status
            .get("metricResults")
            .and_then(Value::as_array)
            .map(|results| results.iter().collect())
            .unwrap_or_default();
        let results = spec
            .metrics
            .iter()
            .map(|metric| {
                stored
                    .iter()
                    .find(|result| {
                        result.get("name").and_then(Value::as_str) == Some(metric.name.as_str())
                    })
                    .map(|result| metric_result_from_json(metric, result))
            })
            .collect();
        AnalysisRunState {
            spec,
            results,
            started_at,
            completed_at: text("completedAt").and_then(parse_time),
            phase,
            message: text("message").unwrap_or("").to_string(),
            run_summary: RunSummary::from_json(status.get("runSummary")),
            dry_run_summary: RunSummary::from_json(status.get("dryRunSummary")),
        }
    }

    /// The metrics whose last measurement is still in flight (a Job running), with the number
    /// of measurements taken before it (completed and errors), which names its Job.
    pub fn in_flight(&self) -> Vec<(&str, i64)> {
        self.spec
            .metrics
            .iter()
            .zip(&self.results)
            .filter_map(|(spec, result)| {
                let result = result.as_ref()?;
                let last = result.last()?;
                (last.finished_at.is_none() && !result.phase.completed())
                    .then_some((spec.name.as_str(), result.count + result.error))
            })
            .collect()
    }

    /// Whether the run has ended.
    pub fn completed(&self) -> bool {
        self.phase.completed()
    }

    /// Argo's `IsTerminating`: terminate requested, or a non-dry-run metric ended Failed, Error or
    /// Inconclusive.
    pub fn terminating(&self) -> bool {
        self.spec.terminate
            || self.results.iter().flatten().any(|result| {
                !result.dry_run
                    && matches!(
                        result.phase,
                        Phase::Failed | Phase::Error | Phase::Inconclusive
                    )
            })
    }

    fn index(&self, metric: &str) -> Result<usize, RecordError> {
        self.spec
            .metrics
            .iter()
            .position(|spec| spec.name == metric)
            .ok_or_else(|| RecordError::UnknownMetric(metric.to_string()))
    }

    /// The metrics to measure at `now`, as Argo's `generateMetricTasks` (in-flight measurements
    /// are resumed by their provider and are not listed).
    pub fn due(&self, now: Timestamp) -> Vec<&str> {
        if self.completed() || self.terminating() {
            return Vec::new();
        }
        self.spec
            .metrics
            .iter()
            .zip(&self.results)
            .filter(|(spec, result)| {
                self.metric_due_at(spec, result.as_ref())
                    .is_some_and(|at| at <= now)
            })
            .map(|(spec, _)| spec.name.as_str())
            .collect()
    }

    /// When the metric's next measurement may start (None: never, or in flight). Argo measures
    /// when `now > last.finishedAt + interval`; this is the first whole instant after, taken as
    /// one nanosecond later. The first measurement is due at `startedAt + initialDelay`.
    fn metric_due_at(&self, spec: &MetricSpec, result: Option<&MetricResult>) -> Option<Timestamp> {
        if result.is_some_and(|result| result.phase.completed()) {
            return None;
        }
        let Some(last) = result.and_then(MetricResult::last) else {
            return Some(match spec.initial_delay {
                Some(delay) => self.started_at.checked_add(delay).ok()?,
                None => self.started_at,
            });
        };
        let finished = last.finished_at?;
        let result = result?;
        if spec
            .effective_count()
            .is_some_and(|count| result.count >= count)
        {
            return None;
        }
        let interval = if last.phase == Phase::Error {
            ERROR_RETRY_INTERVAL
        } else {
            spec.interval.unwrap_or(ERROR_RETRY_INTERVAL)
        };
        finished
            .checked_add(interval)
            .ok()?
            .checked_add(SignedDuration::from_nanos(1))
            .ok()
    }

    /// When the run wants to be looked at again, as Argo's `calculateNextReconcileTime`: the
    /// earliest next measurement of the metrics not completed (initial delays included).
    pub fn next_measurement_at(&self) -> Option<Timestamp> {
        if self.completed() {
            return None;
        }
        self.spec
            .metrics
            .iter()
            .zip(&self.results)
            .filter_map(|(spec, result)| {
                let last = result.as_ref().and_then(MetricResult::last);
                if last.is_some_and(|last| last.phase != Phase::Error) && spec.interval.is_none() {
                    return None;
                }
                if last.is_none() && spec.initial_delay.is_none() {
                    return None;
                }
                self.metric_due_at(spec, result.as_ref())
            })
            .min()
    }

    /// A measurement started and still in flight (a Job running): the metric is Running.
    pub fn start(&mut self, metric: &str, at: Timestamp) -> Result<(), RecordError> {
        if self.completed() {
            return Err(RecordError::Completed);
        }
        let index = self.index(metric)?;
        let measurement = Measurement {
            phase: Phase::Running,
            value: None,
            message: None,
            started_at: at,
            finished_at: None,
        };
        self.push(index, measurement);
        self.reconcile(at);
        Ok(())
    }

    /// A measurement finished with `outcome` (it completes the one in flight, if any), then the
    /// run is assessed at `finished_at`.
    pub fn record(
        &mut self,
        metric: &str,
        outcome: Outcome,
        started_at: Timestamp,
        finished_at: Timestamp,
    ) -> Result<Phase, RecordError> {
        if self.completed() {
            return Err(RecordError::Completed);
        }
        let index = self.index(metric)?;
        let Some(spec) = self.spec.metrics.get(index) else {
            return Err(RecordError::UnknownMetric(metric.to_string()));
        };
        let (phase, value, message) = match outcome {
            Outcome::Value { result, shown } => match measurement_phase(
                spec.success_condition.as_ref(),
                spec.failure_condition.as_ref(),
                &result,
            ) {
                Ok(phase) => (phase, Some(shown), None),
                Err(error) => (Phase::Error, Some(shown), Some(error)),
            },
            Outcome::Decided { phase, message } => {
                let phase = if phase.completed() {
                    phase
                } else {
                    Phase::Error
                };
                (phase, None, message)
            }
            Outcome::Error(message) => (Phase::Error, None, Some(message)),
        };
        let message = message.map(|message| self.redact(message));
        let in_flight = self
            .results
            .get(index)
            .and_then(Option::as_ref)
            .and_then(MetricResult::last)
            .filter(|last| last.finished_at.is_none())
            .map(|last| last.started_at);
        let measurement = Measurement {
            phase,
            value,
            message,
            started_at: in_flight.unwrap_or(started_at),
            finished_at: Some(finished_at),
        };
        if in_flight.is_some()
            && let Some(Some(result)) = self.results.get_mut(index)
        {
            result.measurements.pop();
        }
        self.push(index, measurement);
        if let Some(Some(result)) = self.results.get_mut(index) {
            result.count_measurement(phase);
        }
        self.reconcile(finished_at);
        Ok(phase)
    }

    /// `spec.terminate: true`: no new measurements; metrics not completed end Successful.
    pub fn terminate(&mut self, now: Timestamp) {
        if self.completed() {
            return;
        }
        self.spec.terminate = true;
        self.reconcile(now);
    }

    fn redact(&self, mut message: String) -> String {
        for secret in self.spec.secrets.iter().filter(|secret| !secret.is_empty()) {
            message = message.replace(secret.as_str(), "*****");
        }
        message
    }

    fn push(&mut self, index: usize, measurement: Measurement) {
        let Some(spec) = self.spec.metrics.get(index) else {
            return;
        };
        let limit = spec.measurement_limit.max(1);
        let Some(slot) = self.results.get_mut(index) else {
            return;
        };
        let result = slot.get_or_insert_with(|| MetricResult::new(spec));
        result.measurements.push(measurement);
        let excess = result.measurements.len().saturating_sub(limit);
        if excess > 0 {
            result.measurements.drain(..excess);
        }
    }

    /// Assesses the run until nothing changes: Argo reconciles again after each status update, so
    /// a metric that fails makes the run terminating, and the next pass ends the other metrics
    /// (in-flight measurements terminated as Successful "Metric Terminated").
    fn reconcile(&mut self, now: Timestamp) {
        for _ in 0..=self.spec.metrics.len() + 1 {
            if self.completed() {
                return;
            }
            let before = (self.terminating(), self.phases());
            if self.terminating() {
                self.terminate_in_flight(now);
            }
            self.assess(now);
            if before == (self.terminating(), self.phases()) {
                return;
            }
        }
    }

    fn phases(&self) -> Vec<Option<Phase>> {
        self.results
            .iter()
            .map(|result| result.as_ref().map(|result| result.phase))
            .collect()
    }

    fn terminate_in_flight(&mut self, now: Timestamp) {
        for result in self.results.iter_mut().flatten() {
            if result.phase.completed() {
                continue;
            }
            if let Some(last) = result.measurements.last_mut()
                && last.finished_at.is_none()
            {
                last.phase = Phase::Successful;
                last.message = Some(METRIC_TERMINATED.to_string());
                last.finished_at = Some(now);
                result.count_measurement(Phase::Successful);
            }
        }
    }

    /// Argo's `assessRunStatus`, then the phase and message stored when the phase changes.
    fn assess(&mut self, now: Timestamp) {
        let terminating = self.terminating();
        let mut worst: Option<Phase> = None;
        let mut worst_message = if self.spec.terminate {
            RUN_TERMINATED.to_string()
        } else {
            String::new()
        };
        let mut everything_completed = true;
        let mut run_summary = RunSummary::default();
        let mut dry_run_summary = RunSummary::default();
        for (spec, result) in self.spec.metrics.iter().zip(self.results.iter_mut()) {
            let summary = if spec.dry_run {
                &mut dry_run_summary
            } else {
                &mut run_summary
            };
            summary.count += 1;
            let Some(result) = result else {
                everything_completed = false;
                continue;
            };
            let phase = metric_phase(spec, result, terminating);
            if result.phase != phase {
                if let Some(last) = result.last() {
                    result.message = last.message.clone();
                }
                result.phase = phase;
            }
            if !phase.completed() {
                everything_completed = false;
                continue;
            }
            let broken = limit_broken(spec, result);
            if spec.dry_run {
                if worst.is_none() {
                    worst = Some(Phase::Successful);
                }
                if let Some((_, reason)) = &broken {
                    result.message = Some(format!("Metric assessed {phase} due to {reason}"));
                }
            } else if worst.is_none_or(|worst| phase.badness() > worst.badness()) {
                worst = Some(phase);
                if let Some((_, reason)) = &broken {
                    worst_message =
                        format!("Metric \"{}\" assessed {phase} due to {reason}", spec.name);
                    if let Some(message) = result.message.as_deref().filter(|m| !m.is_empty()) {
                        worst_message.push_str(&format!(": \"Error Message: {message}\""));
                    }
                }
            }
            match broken.map(|(phase, _)| phase) {
                Some(Phase::Error) => summary.error += 1,
                Some(Phase::Failed) => summary.failed += 1,
                Some(Phase::Inconclusive) => summary.inconclusive += 1,
                _ => summary.successful += 1,
            }
        }
        self.run_summary = run_summary;
        self.dry_run_summary = dry_run_summary;
        let worst_message = worst_message.trim().to_string();
        let (phase, message) = if terminating {
            (worst.unwrap_or(Phase::Successful), worst_message)
        } else if !everything_completed || worst.is_none() {
            (Phase::Running, String::new())
        } else {
            (worst.unwrap_or(Phase::Running), worst_message)
        };
        if phase != self.phase {
            self.phase = phase;
            self.message = message;
            if phase.completed() && self.completed_at.is_none() {
                self.completed_at = Some(now);
            }
        }
    }

    /// `status` in Argo's shape, for the operator to write as it is.
    pub fn status(&self) -> Value {
        let mut status = Map::new();
        status.insert("phase".into(), json!(self.phase.as_str()));
        if !self.message.is_empty() {
            status.insert("message".into(), json!(self.message));
        }
        let results: Vec<Value> = self
            .results
            .iter()
            .flatten()
            .map(metric_result_json)
            .collect();
        status.insert("metricResults".into(), Value::Array(results));
        status.insert("startedAt".into(), json!(time_text(self.started_at)));
        if let Some(completed) = self.completed_at {
            status.insert("completedAt".into(), json!(time_text(completed)));
        }
        status.insert("runSummary".into(), self.run_summary.to_json());
        if self.spec.metrics.iter().any(|metric| metric.dry_run) {
            status.insert("dryRunSummary".into(), self.dry_run_summary.to_json());
        }
        Value::Object(status)
    }
}

/// A time as Kubernetes writes it (RFC 3339, whole seconds, UTC).
pub fn time_text(at: Timestamp) -> String {
    Timestamp::from_second(at.as_second())
        .unwrap_or(at)
        .to_string()
}

/// A time as Kubernetes writes it, read back.
fn parse_time(text: &str) -> Option<Timestamp> {
    text.parse().ok()
}

/// A `status.metricResults[]` entry read back ([`metric_result_json`]'s inverse); the dry-run
/// mark comes from the spec, which decides it.
fn metric_result_from_json(spec: &MetricSpec, value: &Value) -> MetricResult {
    let counter = |key: &str| value.get(key).and_then(Value::as_i64).unwrap_or(0);
    let text =
        |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
    let measurements = value
        .get("measurements")
        .and_then(Value::as_array)
        .map(|measurements| {
            measurements
                .iter()
                .filter_map(|measurement| {
                    Some(Measurement {
                        phase: measurement
                            .get("phase")
                            .and_then(Value::as_str)
                            .and_then(Phase::parse)?,
                        value: text(measurement, "value"),
                        message: text(measurement, "message"),
                        started_at: measurement
                            .get("startedAt")
                            .and_then(Value::as_str)
                            .and_then(parse_time)?,
                        finished_at: measurement
                            .get("finishedAt")
                            .and_then(Value::as_str)
                            .and_then(parse_time),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    MetricResult {
        name: spec.name.clone(),
        phase: value
            .get("phase")
            .and_then(Value::as_str)
            .and_then(Phase::parse)
            .unwrap_or(Phase::Running),
        measurements,
        message: text(value, "message"),
        count: counter("count"),
        successful: counter("successful"),
        failed: counter("failed"),
        inconclusive: counter("inconclusive"),
        error: counter("error"),
        consecutive_error: counter("consecutiveError"),
        consecutive_success: counter("consecutiveSuccess"),
        dry_run: spec.dry_run,
    }
}

fn metric_result_json(result: &MetricResult) -> Value {
    let mut map = Map::new();
    map.insert("name".into(), json!(result.name));
    map.insert("phase".into(), json!(result.phase.as_str()));
    let measurements: Vec<Value> = result
        .measurements
        .iter()
        .map(|measurement| {
            let mut map = Map::new();
            map.insert("phase".into(), json!(measurement.phase.as_str()));
            if let Some(value) = &measurement.value {
                map.insert("value".into(), json!(value));
            }
            if let Some(message) = measurement.message.as_deref().filter(|m| !m.is_empty()) {
                map.insert("message".into(), json!(message));
            }
            map.insert("startedAt".into(), json!(time_text(measurement.started_at)));
            if let Some(finished) = measurement.finished_at {
                map.insert("finishedAt".into(), json!(time_text(finished)));
            }
            Value::Object(map)
        })
        .collect();
    if !measurements.is_empty() {
        map.insert("measurements".into(), Value::Array(measurements));
    }
    if let Some(message) = result.message.as_deref().filter(|m| !m.is_empty()) {
        map.insert("message".into(), json!(message));
    }
    let counters: BTreeMap<&str, i64> = [
        ("count", result.count),
        ("successful", result.successful),
        ("failed", result.failed),
        ("inconclusive", result.inconclusive),
        ("error", result.error),
        ("consecutiveError", result.consecutive_error),
        ("consecutiveSuccess", result.consecutive_success),
    ]
    .into_iter()
    .collect();
    for (key, value) in counters {
        if value != 0 {
            map.insert(key.into(), json!(value));
        }
    }
    if result.dry_run {
        map.insert("dryRun".into(), json!(true));
    }
    Value::Object(map)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::argo::types::ValueFrom;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_600_000_000 + second).unwrap()
    }

    fn run(spec: Value) -> AnalysisRunState {
        let spec = RunSpec::build(&spec, &ArgValues::default()).unwrap();
        AnalysisRunState::new(spec, at(0))
    }

    fn value(text: &str) -> Outcome {
        Outcome::json(&serde_json::from_str(text).unwrap())
    }

    #[test]
    fn a_measurement_is_judged_by_both_conditions() {
        // (success, failure, result) -> phase; None: an Error.
        let cases: &[(Option<&str>, Option<&str>, &str, Option<Phase>)] = &[
            (None, None, "1", Some(Phase::Successful)),
            (Some("result > 0.9"), None, "0.95", Some(Phase::Successful)),
            (Some("result > 0.9"), None, "0.5", Some(Phase::Failed)),
            (None, Some("result > 0.9"), "0.95", Some(Phase::Failed)),
            (None, Some("result > 0.9"), "0.5", Some(Phase::Successful)),
            (
                Some("result > 5"),
                Some("result < 2"),
                "7",
                Some(Phase::Successful),
            ),
            (
                Some("result > 5"),
                Some("result < 2"),
                "1",
                Some(Phase::Failed),
            ),
            (
                Some("result > 5"),
                Some("result < 2"),
                "3",
                Some(Phase::Inconclusive),
            ),
            // Both true: failure wins.
            (
                Some("result > 0"),
                Some("result > 0"),
                "3",
                Some(Phase::Failed),
            ),
            (
                Some("result[0] >= 0.9"),
                None,
                "[0.95, 0.2]",
                Some(Phase::Successful),
            ),
            (
                Some("len(result) == 0 || result[0] >= 0.9"),
                None,
                "[]",
                Some(Phase::Successful),
            ),
            (
                Some("result == \"true\""),
                None,
                "\"false\"",
                Some(Phase::Failed),
            ),
            // Errors: an index out of range, a condition that is not a boolean.
            (Some("result[3] > 1"), None, "[1]", None),
            (Some("result + 1"), None, "1", None),
        ];
        for (success, failure, result, expected) in cases {
            let success = success.map(Condition::new);
            let failure = failure.map(Condition::new);
            let result = Val::from_json(&serde_json::from_str(result).unwrap());
            let got = measurement_phase(success.as_ref(), failure.as_ref(), &result).ok();
            assert_eq!(got, *expected, "{success:?} {failure:?} {result:?}");
        }
        // A condition weir's subset refuses is a measurement Error, as Argo's compile error is.
        let unknown = Condition::new("results[0] >= 90");
        assert!(measurement_phase(Some(&unknown), None, &Val::Num(1.0)).is_err());
    }

    #[test]
    fn the_failed_web_metric_of_the_aborted_rollout() {
        let mut state = run(json!({"metrics": [{
            "name": "web", "interval": "5s", "successCondition": "result == \"true\"",
            "provider": {"web": {"url": "http://example/"}}
        }]}));
        assert_eq!(state.due(at(0)), vec!["web"]);
        let phase = state
            .record("web", value("\"false\""), at(0), at(0))
            .unwrap();
        assert_eq!(phase, Phase::Failed);
        assert_eq!(state.phase, Phase::Failed);
        assert_eq!(
            state.message,
            "Metric \"web\" assessed Failed due to failed (1) > failureLimit (0)"
        );
        assert!(state.due(at(100)).is_empty());
        assert_eq!(state.next_measurement_at(), None);
        let status = state.status();
        assert_eq!(
            status,
            json!({
                "phase": "Failed",
                "message": "Metric \"web\" assessed Failed due to failed (1) > failureLimit (0)",
                "metricResults": [{
                    "name": "web", "phase": "Failed", "count": 1, "failed": 1,
                    "measurements": [{"phase": "Failed", "value": "false",
                        "startedAt": "2020-09-13T12:26:40Z", "finishedAt": "2020-09-13T12:26:40Z"}]
                }],
                "startedAt": "2020-09-13T12:26:40Z",
                "completedAt": "2020-09-13T12:26:40Z",
                "runSummary": {"count": 1, "failed": 1}
            })
        );
        assert_eq!(
            state.record("web", value("\"true\""), at(6), at(6)),
            Err(RecordError::Completed)
        );
    }

    /// One metric, a sequence of outcomes (`s`, `f`, `i` values judged by `result > 5` /
    /// `result < 2`, `e` an error): the metric's phase after each, and the run's message at the
    /// end.
    #[test]
    fn limits_and_counts_decide_the_metric() {
        struct Case {
            name: &'static str,
            metric: Value,
            outcomes: &'static str,
            phases: &'static [Phase],
            message: &'static str,
        }
        use Phase::{Error, Failed, Inconclusive, Running, Successful};
        let base = |extra: Value| {
            let mut metric = json!({
                "name": "m", "successCondition": "result > 5", "failureCondition": "result < 2",
                "provider": {"prometheus": {"query": "q"}}
            });
            if let (Value::Object(metric), Value::Object(extra)) = (&mut metric, extra) {
                metric.extend(extra);
            }
            metric
        };
        let cases = [
            Case {
                name: "no count and no interval: one measurement",
                metric: base(json!({})),
                outcomes: "s",
                phases: &[Successful],
                message: "",
            },
            Case {
                name: "count reached",
                metric: base(json!({"interval": "1m", "count": 3})),
                outcomes: "sss",
                phases: &[Running, Running, Successful],
                message: "",
            },
            Case {
                name: "failures within the limit, then count reached",
                metric: base(json!({"interval": "1m", "count": 3, "failureLimit": 1})),
                outcomes: "sfs",
                phases: &[Running, Running, Successful],
                message: "",
            },
            Case {
                name: "failed > failureLimit",
                metric: base(json!({"interval": "1m", "count": 5, "failureLimit": 1})),
                outcomes: "ff",
                phases: &[Running, Failed],
                message: "Metric \"m\" assessed Failed due to failed (2) > failureLimit (1)",
            },
            Case {
                name: "failureLimit -1: no limit",
                metric: base(
                    json!({"interval": "1m", "count": 3, "failureLimit": -1, "consecutiveSuccessLimit": 0}),
                ),
                outcomes: "fff",
                phases: &[Running, Running, Successful],
                message: "",
            },
            Case {
                name: "inconclusive > inconclusiveLimit",
                metric: base(json!({"interval": "1m", "count": 3})),
                outcomes: "i",
                phases: &[Inconclusive],
                message: "Metric \"m\" assessed Inconclusive due to inconclusive (1) > inconclusiveLimit (0)",
            },
            Case {
                name: "errors do not count; the fifth in a row is an Error",
                metric: base(json!({"interval": "1m", "count": 1})),
                outcomes: "eeeee",
                phases: &[Running, Running, Running, Running, Error],
                message: "Metric \"m\" assessed Error due to consecutiveErrors (5) > consecutiveErrorLimit (4): \"Error Message: no data\"",
            },
            Case {
                name: "a success resets the errors in a row",
                metric: base(json!({"interval": "1m", "count": 3, "consecutiveErrorLimit": 1})),
                outcomes: "esess",
                phases: &[Running, Running, Running, Running, Successful],
                message: "",
            },
            Case {
                name: "consecutiveSuccessLimit reached",
                metric: base(
                    json!({"interval": "1m", "count": 5, "failureLimit": 3, "consecutiveSuccessLimit": 2}),
                ),
                outcomes: "fss",
                phases: &[Running, Running, Successful],
                message: "",
            },
            Case {
                name: "count reached without the successes in a row: Inconclusive",
                metric: base(
                    json!({"interval": "1m", "count": 3, "failureLimit": 2, "consecutiveSuccessLimit": 2}),
                ),
                outcomes: "sfs",
                phases: &[Running, Running, Inconclusive],
                message: "",
            },
            Case {
                name: "only the success limit applies: Failed",
                metric: base(
                    json!({"interval": "1m", "count": 2, "failureLimit": -1, "consecutiveSuccessLimit": 2}),
                ),
                outcomes: "sf",
                phases: &[Running, Failed],
                message: "",
            },
        ];
        for case in cases {
            let mut state = run(json!({"metrics": [case.metric]}));
            let mut phases = Vec::new();
            for (n, outcome) in case.outcomes.chars().enumerate() {
                let outcome = match outcome {
                    's' => value("7"),
                    'f' => value("1"),
                    'i' => value("3"),
                    _ => Outcome::Error("no data".into()),
                };
                let time = at(60 * n as i64);
                state.record("m", outcome, time, time).unwrap();
                phases.push(state.results[0].as_ref().unwrap().phase);
            }
            assert_eq!(phases, case.phases, "{}", case.name);
            let last = *case.phases.last().unwrap();
            let run_phase = if last.completed() { last } else { Running };
            assert_eq!(state.phase, run_phase, "{}", case.name);
            assert_eq!(state.message, case.message, "{}", case.name);
        }
    }

    #[test]
    fn counters_follow_argos_bookkeeping() {
        let mut state = run(json!({"metrics": [{
            "name": "m", "interval": "1m", "count": 10, "failureLimit": 5, "inconclusiveLimit": 5,
            "successCondition": "result > 5", "failureCondition": "result < 2",
            "provider": {"prometheus": {"query": "q"}}
        }]}));
        for (n, outcome) in ["7", "1", "3", "x", "7", "7"].iter().enumerate() {
            let outcome = if *outcome == "x" {
                Outcome::Error("timeout".into())
            } else {
                value(outcome)
            };
            state
                .record("m", outcome, at(n as i64), at(n as i64))
                .unwrap();
        }
        let result = state.results[0].as_ref().unwrap();
        assert_eq!(
            (
                result.count,
                result.successful,
                result.failed,
                result.inconclusive,
                result.error,
                result.consecutive_error,
                result.consecutive_success
            ),
            (5, 3, 1, 1, 1, 0, 2)
        );
        assert_eq!(result.phase, Phase::Running);
    }

    #[test]
    fn dry_run_metrics_never_fail_the_run() {
        let mut state = run(json!({
            "metrics": [
                {"name": "real", "successCondition": "result > 5", "provider": {"prometheus": {"query": "q"}}},
                {"name": "trial", "successCondition": "result > 5", "provider": {"prometheus": {"query": "q"}}}
            ],
            "dryRun": [{"metricName": "tri.*"}]
        }));
        state.record("trial", value("1"), at(0), at(0)).unwrap();
        assert_eq!(state.phase, Phase::Running);
        state.record("real", value("9"), at(1), at(1)).unwrap();
        assert_eq!(state.phase, Phase::Successful);
        assert_eq!(state.message, "");
        let status = state.status();
        assert_eq!(status["runSummary"], json!({"count": 1, "successful": 1}));
        assert_eq!(status["dryRunSummary"], json!({"count": 1, "failed": 1}));
        assert_eq!(status["metricResults"][1]["dryRun"], json!(true));
        assert_eq!(
            status["metricResults"][1]["message"],
            json!("Metric assessed Failed due to failed (1) > failureLimit (0)")
        );
    }

    #[test]
    fn a_failing_metric_ends_the_others_successfully() {
        let mut state = run(json!({"metrics": [
            {"name": "errors", "interval": "1m", "successCondition": "result < 1", "provider": {"prometheus": {"query": "q"}}},
            {"name": "job", "provider": {"job": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}}
        ]}));
        state.start("job", at(0)).unwrap();
        state.record("errors", value("0"), at(0), at(0)).unwrap();
        assert_eq!(state.phase, Phase::Running);
        assert_eq!(state.due(at(61)), vec!["errors"]);
        state.record("errors", value("3"), at(61), at(61)).unwrap();
        assert_eq!(state.phase, Phase::Failed);
        let job = state.results[1].as_ref().unwrap();
        assert_eq!(job.phase, Phase::Successful);
        assert_eq!(
            job.measurements[0].message.as_deref(),
            Some(METRIC_TERMINATED)
        );
        assert_eq!(
            state.message,
            "Metric \"errors\" assessed Failed due to failed (1) > failureLimit (0)"
        );
    }

    #[test]
    fn terminate_ends_the_run_successfully() {
        let mut state = run(json!({"metrics": [
            {"name": "m", "interval": "1m", "successCondition": "result > 5", "provider": {"prometheus": {"query": "q"}}}
        ]}));
        state.record("m", value("9"), at(0), at(0)).unwrap();
        assert_eq!(state.phase, Phase::Running);
        state.terminate(at(30));
        assert_eq!(state.phase, Phase::Successful);
        assert_eq!(state.message, RUN_TERMINATED);
        assert_eq!(state.completed_at, Some(at(30)));
    }

    #[test]
    fn the_next_measurement_is_due_after_the_interval_or_the_error_retry() {
        let mut state = run(json!({"metrics": [
            {"name": "slow", "interval": "1m", "initialDelay": "30s", "count": 3, "successCondition": "result > 5", "provider": {"prometheus": {"query": "q"}}},
            {"name": "fast", "interval": "20s", "count": 3, "successCondition": "result > 5", "provider": {"prometheus": {"query": "q"}}}
        ]}));
        assert_eq!(state.due(at(0)), vec!["fast"]);
        assert_eq!(state.next_measurement_at(), Some(at(30)));
        assert_eq!(state.due(at(30)), vec!["slow", "fast"]);
        state
            .record("fast", Outcome::Error("down".into()), at(0), at(1))
            .unwrap();
        // After an Error, 10s; Argo measures once now > finishedAt + interval.
        assert!(state.due(at(11)).is_empty() || !state.due(at(11)).contains(&"fast"));
        assert!(state.due(at(12)).contains(&"fast"));
        state.record("fast", value("9"), at(12), at(12)).unwrap();
        state.record("slow", value("9"), at(30), at(30)).unwrap();
        let next = state.next_measurement_at().unwrap();
        assert!(next > at(32) && next <= at(33), "{next}");
        assert!(!state.due(at(32)).contains(&"fast"));
        assert!(state.due(at(33)).contains(&"fast"));
        assert!(!state.due(at(90)).contains(&"slow"));
        assert!(state.due(at(91)).contains(&"slow"));
    }

    #[test]
    fn retention_keeps_the_last_measurements_and_secrets_are_redacted() {
        let args = ArgValues {
            values: vec![("token".into(), "s3cret".into())],
            secrets: vec!["s3cret".into()],
        };
        let spec = RunSpec::build(
            &json!({"metrics": [{"name": "m", "interval": "1s",
                "provider": {"web": {"url": "http://x/?t={{ args.token }}"}}}],
                "measurementRetention": [{"metricName": "m", "limit": 2}]}),
            &args,
        )
        .unwrap();
        let mut state = AnalysisRunState::new(spec, at(0));
        for n in 0..4 {
            state
                .record(
                    "m",
                    Outcome::Error("GET http://x/?t=s3cret: refused".into()),
                    at(n),
                    at(n),
                )
                .unwrap();
        }
        let result = state.results[0].as_ref().unwrap();
        assert_eq!(result.measurements.len(), 2);
        assert_eq!(result.error, 4);
        assert_eq!(
            result.measurements[1].message.as_deref(),
            Some("GET http://x/?t=*****: refused")
        );
    }

    fn arg(name: &str, value: Option<&str>) -> AnalysisArg {
        AnalysisArg {
            name: name.into(),
            value: value.map(Into::into),
            value_from: None,
        }
    }

    #[test]
    fn arguments_merge_over_the_templates_defaults() {
        let template = [arg("service", None), arg("threshold", Some("0.95"))];
        let incoming = [arg("service", Some("web")), arg("unknown", Some("x"))];
        let merged = merge_args(&incoming, &template).unwrap();
        assert_eq!(
            merged,
            vec![arg("service", Some("web")), arg("threshold", Some("0.95"))]
        );
        assert_eq!(
            merge_args(&[], &template),
            Err("args.service was not resolved".to_string())
        );
        let flattened =
            flatten_template_args([&template[..], &[arg("service", Some("api"))][..]]).unwrap();
        assert_eq!(flattened[0], arg("service", Some("api")));
        assert_eq!(
            flatten_template_args([&[arg("a", Some("1"))][..], &[arg("a", Some("2"))][..]]),
            Err("Argument `a` specified multiple times with different values: '1', '2'".into())
        );
        let values = arg_values(&merged, &|_| None).unwrap();
        assert_eq!(
            substitute(
                "rate{service=\"{{args.service}}\"} > {{ args.threshold }}",
                &values.values
            ),
            Ok("rate{service=\"web\"} > 0.95".to_string())
        );
        assert_eq!(
            substitute("{{ args.missing }}", &values.values),
            Err("failed to resolve {{ args.missing }}".to_string())
        );
        assert_eq!(
            substitute("{{workflow.name}}", &values.values),
            Err("failed to resolve {{workflow.name}}".to_string())
        );
        assert!(substitute("{{args.service", &values.values).is_err());
        assert_eq!(
            arg_values(&[arg("x", None)], &|_| None),
            Err("argument \"x\" was not supplied".to_string())
        );
        let error = RunSpec::build(
            &json!({"metrics": [{"name": "m", "provider": {"prometheus": {"query": "{{args.nope}}"}}}]}),
            &values,
        )
        .unwrap_err();
        assert_eq!(
            error.0,
            "Unable to resolve metric arguments: failed to resolve {{args.nope}}"
        );
        let failed = AnalysisRunState::failed_to_start(&error, at(0));
        assert_eq!(failed.status()["phase"], json!("Error"));
    }

    #[test]
    fn a_rollout_supplies_hashes_and_fields() {
        let from = |value_from: ValueFrom| AnalysisArg {
            name: "x".into(),
            value: None,
            value_from: Some(value_from),
        };
        let rollout = json!({"metadata": {"name": "web", "labels": {"app.kubernetes.io/name": "shop"}},
            "spec": {"replicas": 3}});
        let args = [
            from(ValueFrom {
                pod_template_hash_value: Some("Latest".into()),
                ..ValueFrom::default()
            }),
            from(ValueFrom {
                field_ref: Some(crate::argo::types::FieldRef {
                    field_path: "metadata.labels['app.kubernetes.io/name']".into(),
                }),
                ..ValueFrom::default()
            }),
            from(ValueFrom {
                field_ref: Some(crate::argo::types::FieldRef {
                    field_path: "spec.replicas".into(),
                }),
                ..ValueFrom::default()
            }),
        ];
        let resolved = rollout_args(&args, "stable1", "latest2", &rollout).unwrap();
        let values: Vec<_> = resolved.iter().map(|arg| arg.value.as_deref()).collect();
        assert_eq!(values, vec![Some("latest2"), Some("shop"), Some("3")]);
        let missing = from(ValueFrom {
            field_ref: Some(crate::argo::types::FieldRef {
                field_path: "status.alb.name".into(),
            }),
            ..ValueFrom::default()
        });
        assert!(rollout_args(&[missing], "", "", &rollout).is_err());
    }

    #[test]
    fn arguments_fill_counts_and_limits() {
        let values = ArgValues {
            values: vec![("count".into(), "2".into()), ("limit".into(), "1".into())],
            secrets: Vec::new(),
        };
        let spec = RunSpec::build(
            &json!({"metrics": [{"name": "m", "interval": "1m", "count": "{{args.count}}",
                "failureLimit": "{{args.limit}}", "provider": {"prometheus": {"query": "q"}}}]}),
            &values,
        )
        .unwrap();
        assert_eq!(spec.metrics[0].count, 2);
        assert_eq!(spec.metrics[0].failure_limit, 1);
        assert_eq!(spec.metrics[0].consecutive_error_limit, 4);
    }

    /// status() -> from_status() -> status() is the identity, and the restored run goes on as
    /// the original would: same due metrics, same next time, same phases after the same
    /// measurements.
    #[test]
    fn a_run_restored_from_its_status_goes_on_where_it_was() {
        let spec = json!({"metrics": [
            {"name": "web", "interval": "1m", "count": 3, "failureLimit": 1,
                "successCondition": "result > 5", "provider": {"web": {"url": "http://x/"}}},
            {"name": "job", "provider": {"job": {"spec": {}}}},
            {"name": "trial", "interval": "1m", "count": 2, "successCondition": "result > 5",
                "provider": {"prometheus": {"query": "q"}}},
            {"name": "later", "initialDelay": "10m", "provider": {"prometheus": {"query": "q"}}}
        ], "dryRun": [{"metricName": "trial"}]});
        let build = || RunSpec::build(&spec, &ArgValues::default()).unwrap();
        let mut state = AnalysisRunState::new(build(), at(0));
        state.record("web", value("9"), at(0), at(1)).unwrap();
        state
            .record("web", Outcome::Error("refused".into()), at(62), at(62))
            .unwrap();
        state.record("web", value("1"), at(73), at(73)).unwrap();
        state.start("job", at(0)).unwrap();
        state.record("trial", value("1"), at(0), at(0)).unwrap();
        assert_eq!(state.phase, Phase::Running);

        let status = state.status();
        let restored = AnalysisRunState::from_status(build(), &status, at(5000));
        assert_eq!(restored.status(), status);
        assert_eq!(restored, state);
        assert_eq!(restored.in_flight(), vec![("job", 0)]);
        for now in [74, 133, 134, 600, 601] {
            assert_eq!(restored.due(at(now)), state.due(at(now)), "at {now}");
        }
        assert_eq!(restored.next_measurement_at(), state.next_measurement_at());

        // Both finish the same way.
        let mut restored = restored;
        for run in [&mut state, &mut restored] {
            run.record(
                "job",
                Outcome::Decided {
                    phase: Phase::Successful,
                    message: None,
                },
                at(0),
                at(140),
            )
            .unwrap();
            run.record("trial", value("9"), at(140), at(140)).unwrap();
            run.record("web", value("9"), at(140), at(140)).unwrap();
            run.record("later", value("9"), at(600), at(600)).unwrap();
        }
        assert_eq!(restored, state);
        assert_eq!(restored.phase, Phase::Successful);
        let status = restored.status();
        assert_eq!(status["metricResults"][0]["count"], json!(3));
        assert_eq!(status["metricResults"][0]["error"], json!(1));
        let again = AnalysisRunState::from_status(build(), &status, at(5000));
        assert_eq!(again.status(), status);
        assert!(again.completed());
        assert!(again.due(at(9999)).is_empty());
    }

    #[test]
    fn a_run_restored_from_a_terminated_or_failed_status_stays_ended() {
        let spec = json!({"metrics": [{"name": "m", "interval": "1m",
            "successCondition": "result > 5", "provider": {"prometheus": {"query": "q"}}}]});
        let build = || RunSpec::build(&spec, &ArgValues::default()).unwrap();
        let mut state = AnalysisRunState::new(build(), at(0));
        state.record("m", value("9"), at(0), at(0)).unwrap();
        state.terminate(at(30));
        let status = state.status();
        assert_eq!(status["message"], json!(RUN_TERMINATED));
        let restored = AnalysisRunState::from_status(build(), &status, at(99));
        assert_eq!(restored.status(), status);
        assert_eq!(restored.completed_at, Some(at(30)));

        let failed =
            AnalysisRunState::failed_to_start(&SpecError("Analysis spec invalid".into()), at(3));
        let restored = AnalysisRunState::from_status(build(), &failed.status(), at(99));
        assert_eq!(restored.phase, Phase::Error);
        assert_eq!(restored.message, "Analysis spec invalid");
    }

    #[test]
    fn a_status_never_written_is_a_run_starting_now() {
        let spec = json!({"metrics": [{"name": "m", "initialDelay": "30s",
            "provider": {"prometheus": {"query": "q"}}}]});
        let build = || RunSpec::build(&spec, &ArgValues::default()).unwrap();
        for status in [json!(null), json!({}), json!({"phase": ""})] {
            let restored = AnalysisRunState::from_status(build(), &status, at(7));
            assert_eq!(restored, AnalysisRunState::new(build(), at(7)), "{status}");
            assert_eq!(restored.next_measurement_at(), Some(at(37)));
        }
    }
}
