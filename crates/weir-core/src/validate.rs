//! The rules a well-formed document must follow beyond its shape. Every rule that fails adds an
//! error naming the field path, the value and what is allowed; nothing stops at the first.

use std::collections::BTreeSet;

use crate::error::{Errors, FieldError};
use crate::model::{
    AlertProvider, Analysis, CanaryPlan, Flag, JudgeCounts, MAX_WEBHOOK_RETRIES,
    METRIC_PROVIDER_TYPES, MatchRule, MetricTemplate, ObjectMeta, Plan, REQUEST_DURATION,
    REQUEST_SUCCESS_RATE, Rollout, SchedulePlan, Secret, SessionAffinity, StringMatch,
};
use crate::units::{GoDuration, Weight};

mod flags;
pub use flags::is_flag_key;
mod target;

/// Schedule entries must be at least this far apart (seed 004).
pub const MIN_SCHEDULE_GAP_SECONDS: i64 = 300;
/// The shortest analysis interval weir accepts (Flagger's floor is 10s).
pub const MIN_INTERVAL: GoDuration = GoDuration::from_secs(1);
/// The most iterations or steps a plan may have.
pub const MAX_STEPS: usize = 10_000;

/// Every problem with a rollout.
pub fn rollout(rollout: &Rollout) -> Vec<FieldError> {
    let mut errors = Errors::default();
    metadata(&rollout.metadata, &mut errors);
    target::target(&rollout.spec.target, &rollout.spec.plan, &mut errors);
    plan(&rollout.spec.plan, &mut errors);
    analysis(&rollout.spec.analysis, &mut errors);
    if let Some(counts) = &rollout.spec.analysis.judge_counts {
        judge_counts(rollout, counts, &mut errors);
    }
    if let Some(affinity) = &rollout.spec.session_affinity {
        session_affinity(affinity, &rollout.spec.plan, &mut errors);
    }
    errors.into_vec()
}

/// Every problem with a feature flag: its key (see [`flags`]), variations (at least 2, names
/// unique, values of one type), the variations that `offVariation`, targets, rules and
/// strategies name, weights (summing to exactly 100%), clauses (values of the operator's type,
/// regular expressions that compile, versions that parse) and targeting keys (one variation
/// each).
pub fn flag(flag: &Flag) -> Vec<FieldError> {
    let mut errors = Errors::default();
    flags::flag(flag, &mut errors);
    errors.into_vec()
}

/// Every problem with an alert provider.
pub fn alert_provider(provider: &AlertProvider) -> Vec<FieldError> {
    let mut errors = Errors::default();
    metadata(&provider.metadata, &mut errors);
    match &provider.spec.address {
        Some(address) if !address.starts_with("http://") && !address.starts_with("https://") => {
            errors.value(
                "spec.address",
                format!("{address:?}"),
                "an address is the service's http:// or https:// webhook URL",
            );
        }
        None if provider.spec.secret_ref.is_none() => errors.field(
            "spec.address",
            "is required unless spec.secretRef names a Secret with an `address` key",
        ),
        _ => {}
    }
    errors.into_vec()
}

/// Every problem with a secret.
pub fn secret(secret: &Secret) -> Vec<FieldError> {
    let mut errors = Errors::default();
    metadata(&secret.metadata, &mut errors);
    errors.into_vec()
}

/// Every problem with a metric template.
pub fn metric_template(template: &MetricTemplate) -> Vec<FieldError> {
    let mut errors = Errors::default();
    metadata(&template.metadata, &mut errors);
    let provider = &template.spec.provider;
    if !METRIC_PROVIDER_TYPES.contains(&provider.provider_type.as_str()) {
        errors.value(
            "spec.provider.type",
            format!("{:?}", provider.provider_type),
            format!("allowed: {}", METRIC_PROVIDER_TYPES.join(", ")),
        );
    }
    if let Some(address) = &provider.address
        && !address.starts_with("http://")
        && !address.starts_with("https://")
    {
        errors.value(
            "spec.provider.address",
            format!("{address:?}"),
            "an address is an http:// or https:// URL",
        );
    }
    errors.into_vec()
}

fn metadata(metadata: &ObjectMeta, errors: &mut Errors) {
    if metadata.name.is_empty() {
        errors.field(
            "metadata.name",
            "is required: a name of lowercase letters, digits, '-' and '.'",
        );
    } else if !is_dns_subdomain(&metadata.name) {
        errors.value(
            "metadata.name",
            format!("{:?}", metadata.name),
            "a name is at most 253 lowercase letters, digits, '-' and '.', starting and ending \
             with a letter or digit",
        );
    }
    if let Some(namespace) = &metadata.namespace
        && !is_dns_label(namespace)
    {
        errors.value(
            "metadata.namespace",
            format!("{namespace:?}"),
            "a namespace is at most 63 lowercase letters, digits and '-', starting and \
                 ending with a letter or digit",
        );
    }
}

/// Whether `text` is a DNS label (a namespace): at most 63 lowercase letters, digits and '-',
/// starting and ending with a letter or digit.
pub fn is_dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// Whether `text` is a DNS subdomain (a name): dot-separated DNS labels, at most 253 bytes.
pub fn is_dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(is_dns_label)
}

// === plans ===

const WEIGHT_RULE: &str = "a weight is a percentage more than 0 and at most 100, in steps of 0.01";

fn check_weight(path: &str, weight: Weight, errors: &mut Errors) -> bool {
    let ok = weight > Weight::ZERO && weight <= Weight::FULL;
    if !ok {
        errors.value(path, weight, WEIGHT_RULE);
    }
    ok
}

fn plan(plan: &Plan, errors: &mut Errors) {
    match plan {
        Plan::Canary(canary) => canary_plan(canary, errors),
        Plan::BlueGreen(blue_green) => {
            iterations(
                "spec.plan.blueGreen.iterations",
                blue_green.iterations,
                errors,
            );
        }
        Plan::AbTest(ab_test) => {
            iterations("spec.plan.abTest.iterations", ab_test.iterations, errors);
            if ab_test.match_rules.is_empty() {
                errors.field(
                    "spec.plan.abTest.match",
                    "needs at least one rule: requests matching any rule go to the canary",
                );
            }
            for (index, rule) in ab_test.match_rules.iter().enumerate() {
                match_rule(&format!("spec.plan.abTest.match[{index}]"), rule, errors);
            }
        }
        Plan::Mirror(mirror) => {
            iterations("spec.plan.mirror.iterations", mirror.iterations, errors);
            if let Some(weight) = mirror.mirror_weight {
                check_weight("spec.plan.mirror.mirrorWeight", weight, errors);
            }
        }
        Plan::Schedule(schedule) => schedule_plan(schedule, errors),
    }
}

fn iterations(path: &str, count: u32, errors: &mut Errors) {
    if count == 0 || count as usize > MAX_STEPS {
        errors.value(path, count, format!("iterations are from 1 to {MAX_STEPS}"));
    }
}

fn canary_plan(canary: &CanaryPlan, errors: &mut Errors) {
    const BASE: &str = "spec.plan.canary";
    let given = [
        canary.step_weight.is_some(),
        canary.step_weights.is_some(),
        canary.steps.is_some(),
    ]
    .iter()
    .filter(|given| **given)
    .count();
    if given != 1 {
        errors.field(
            BASE,
            format!(
                "sets {given} of stepWeight, stepWeights and steps: set exactly one (stepWeight: \
                 10 adds 10% per interval; stepWeights: [1, 5, 25, 50] lists the weights; steps \
                 lists weights with pauses)"
            ),
        );
    }
    let max_weight = canary.max_weight.unwrap_or(Weight::FULL);
    if let Some(max) = canary.max_weight {
        check_weight(&format!("{BASE}.maxWeight"), max, errors);
    }
    if let Some(step) = canary.step_weight
        && check_weight(&format!("{BASE}.stepWeight"), step, errors)
        && step > max_weight
    {
        errors.value(
            format!("{BASE}.stepWeight").as_str(),
            step,
            format!("the step is larger than maxWeight ({max_weight})"),
        );
    }
    if let Some(weights) = &canary.step_weights {
        if weights.is_empty() {
            errors.field(&format!("{BASE}.stepWeights"), "needs at least one weight");
        }
        if weights.len() > MAX_STEPS {
            errors.field(
                &format!("{BASE}.stepWeights"),
                format!("has more than {MAX_STEPS} weights"),
            );
        }
        let mut previous: Option<Weight> = None;
        for (index, weight) in weights.iter().enumerate() {
            let path = format!("{BASE}.stepWeights[{index}]");
            if !check_weight(&path, *weight, errors) {
                continue;
            }
            if let Some(previous) = previous.filter(|previous| *weight <= *previous) {
                errors.value(
                    &path,
                    weight,
                    format!(
                        "stepWeights must be strictly ascending (the previous one is {previous})"
                    ),
                );
            }
            if canary.max_weight.is_some() && *weight > max_weight {
                errors.value(&path, weight, format!("above maxWeight ({max_weight})"));
            }
            previous = Some(*weight);
        }
    }
    if let Some(steps) = &canary.steps {
        if steps.is_empty() {
            errors.field(&format!("{BASE}.steps"), "needs at least one step");
        }
        if steps.len() > MAX_STEPS {
            errors.field(
                &format!("{BASE}.steps"),
                format!("has more than {MAX_STEPS} steps"),
            );
        }
        for (index, step) in steps.iter().enumerate() {
            let path = format!("{BASE}.steps[{index}].weight");
            if check_weight(&path, step.weight, errors) && step.weight > max_weight {
                errors.value(
                    &path,
                    step.weight,
                    format!("above maxWeight ({max_weight})"),
                );
            }
            if let Some(duration) = step.pause.as_ref().and_then(|pause| pause.duration)
                && duration.get().is_zero()
            {
                errors.value(
                    &format!("{BASE}.steps[{index}].pause.duration"),
                    duration,
                    "a pause lasts more than 0s; write `pause: {}` to wait for `weir resume`",
                );
            }
        }
    }
    if let Some(promotion) = canary.step_weight_promotion {
        check_weight(&format!("{BASE}.stepWeightPromotion"), promotion, errors);
    }
    if let Some(mirror) = canary.mirror_weight {
        check_weight(&format!("{BASE}.mirrorWeight"), mirror, errors);
    }
}

fn match_rule(path: &str, rule: &MatchRule, errors: &mut Errors) {
    let conditions = rule.headers.len()
        + rule.cookies.len()
        + rule.query_params.len()
        + usize::from(rule.uri.is_some())
        + usize::from(rule.method.is_some());
    if conditions == 0 {
        errors.field(
            path,
            "is empty: a rule needs at least one of headers, cookies, queryParams, uri, method",
        );
    }
    for (name, condition) in &rule.headers {
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            errors.value(
                &format!("{path}.headers"),
                format!("{name:?}"),
                "a header name is an HTTP token (letters, digits and !#$%&'*+-.^_`|~)",
            );
        }
        string_match(&format!("{path}.headers.{name}"), condition, errors);
    }
    for (name, condition) in &rule.cookies {
        string_match(&format!("{path}.cookies.{name}"), condition, errors);
    }
    for (name, condition) in &rule.query_params {
        string_match(&format!("{path}.queryParams.{name}"), condition, errors);
    }
    if let Some(condition) = &rule.uri {
        string_match(&format!("{path}.uri"), condition, errors);
    }
    if let Some(condition) = &rule.method {
        string_match(&format!("{path}.method"), condition, errors);
    }
}

fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

fn string_match(path: &str, condition: &StringMatch, errors: &mut Errors) {
    let given = [
        condition.exact.is_some(),
        condition.prefix.is_some(),
        condition.suffix.is_some(),
        condition.regex.is_some(),
    ]
    .iter()
    .filter(|given| **given)
    .count();
    if given != 1 {
        errors.field(
            path,
            format!("sets {given} of exact, prefix, suffix and regex: set exactly one"),
        );
    }
    if let Some(pattern) = &condition.regex
        && let Err(error) = regex_syntax::Parser::new().parse(pattern)
    {
        let detail = error.to_string();
        let reason = detail.lines().last().unwrap_or("invalid syntax").trim();
        errors.value(
            &format!("{path}.regex"),
            format!("{pattern:?}"),
            format!("not a valid regular expression ({reason})"),
        );
    }
}

fn schedule_plan(schedule: &SchedulePlan, errors: &mut Errors) {
    const BASE: &str = "spec.plan.schedule";
    match (&schedule.manual, &schedule.template) {
        (Some(_), Some(_)) | (None, None) => errors.field(
            BASE,
            "set exactly one of manual (a list of {at, weight}) and template ({start, interval, \
             increments})",
        ),
        _ => {}
    }
    if let Some(entries) = &schedule.manual {
        if entries.is_empty() {
            errors.field(
                &format!("{BASE}.manual"),
                "needs at least one {at, weight} entry",
            );
        }
        if entries.len() > MAX_STEPS {
            errors.field(
                &format!("{BASE}.manual"),
                format!("has more than {MAX_STEPS} entries"),
            );
        }
        for (index, entry) in entries.iter().enumerate() {
            check_weight(
                &format!("{BASE}.manual[{index}].weight"),
                entry.weight,
                errors,
            );
            if index == 0 {
                continue;
            }
            let previous = &entries[index - 1];
            let gap = entry.at.as_second() - previous.at.as_second();
            let path = format!("{BASE}.manual[{index}].at");
            if gap <= 0 {
                errors.value(
                    &path,
                    entry.at,
                    format!(
                        "entries must be strictly ascending in time (the previous one is at {})",
                        previous.at
                    ),
                );
            } else if gap < MIN_SCHEDULE_GAP_SECONDS {
                errors.value(
                    &path,
                    entry.at,
                    format!(
                        "entries must be at least 5 minutes apart (this one is {gap}s after the \
                         previous one, at {})",
                        previous.at
                    ),
                );
            }
        }
    }
    if let Some(template) = &schedule.template {
        check_weight(
            &format!("{BASE}.template.increments"),
            template.increments,
            errors,
        );
    }
}

// === analysis ===

fn analysis(analysis: &Analysis, errors: &mut Errors) {
    const BASE: &str = "spec.analysis";
    if analysis.interval < MIN_INTERVAL {
        errors.value(
            &format!("{BASE}.interval"),
            analysis.interval,
            "the interval is at least 1s",
        );
    }
    if analysis.threshold == 0 {
        errors.value(
            &format!("{BASE}.threshold"),
            analysis.threshold,
            "the threshold is the number of failed checks that ends a run: at least 1",
        );
    }
    if analysis.progress_deadline < analysis.interval {
        errors.value(
            &format!("{BASE}.progressDeadline"),
            analysis.progress_deadline,
            format!(
                "the progress deadline must be at least the interval ({})",
                analysis.interval
            ),
        );
    }
    let mut metric_names = BTreeSet::new();
    for (index, metric) in analysis.metrics.iter().enumerate() {
        let path = format!("{BASE}.metrics[{index}]");
        if metric.name.is_empty() {
            errors.field(&format!("{path}.name"), "is required");
        } else if !metric_names.insert(metric.name.as_str()) {
            errors.value(
                &format!("{path}.name"),
                format!("{:?}", metric.name),
                "metric names must be unique",
            );
        }
        let sources =
            usize::from(metric.template_ref.is_some()) + usize::from(metric.query.is_some());
        if metric.is_builtin() {
            if sources > 0 {
                errors.field(
                    &path,
                    format!(
                        "{} is a builtin check: it takes no templateRef or query",
                        metric.name
                    ),
                );
            }
        } else if sources != 1 {
            errors.field(
                &path,
                format!(
                    "needs exactly one of templateRef and query (or a builtin name: {REQUEST_SUCCESS_RATE}, {REQUEST_DURATION})"
                ),
            );
        }
        match metric.threshold_range {
            None => errors.field(
                &format!("{path}.thresholdRange"),
                "is required: give min, max or both (e.g. {min: 99} for a success rate)",
            ),
            Some(range) => {
                if range.min.is_none() && range.max.is_none() {
                    errors.field(&format!("{path}.thresholdRange"), "needs min, max or both");
                }
                if let (Some(min), Some(max)) = (range.min, range.max)
                    && min > max
                {
                    errors.value(
                        &format!("{path}.thresholdRange.min"),
                        min,
                        format!("min must not exceed max ({max})"),
                    );
                }
                for (bound, value) in [("min", range.min), ("max", range.max)] {
                    if value.is_some_and(|value| !value.is_finite()) {
                        errors.value(
                            &format!("{path}.thresholdRange.{bound}"),
                            value.unwrap_or_default(),
                            "a finite number",
                        );
                    }
                }
            }
        }
        if let Some(window) = metric.interval
            && window < MIN_INTERVAL
        {
            errors.value(
                &format!("{path}.interval"),
                window,
                "a metric's window is at least 1s",
            );
        }
        if let Some(template) = &metric.template_ref
            && template.name.is_empty()
        {
            errors.field(&format!("{path}.templateRef.name"), "is required");
        }
        if metric
            .query
            .as_deref()
            .is_some_and(|query| query.trim().is_empty())
        {
            errors.field(&format!("{path}.query"), "is empty");
        }
    }
    let mut hook_names = BTreeSet::new();
    for (index, hook) in analysis.webhooks.iter().enumerate() {
        let path = format!("{BASE}.webhooks[{index}]");
        if hook.name.is_empty() {
            errors.field(&format!("{path}.name"), "is required");
        } else if !hook_names.insert(hook.name.as_str()) {
            errors.value(
                &format!("{path}.name"),
                format!("{:?}", hook.name),
                "webhook names must be unique",
            );
        }
        if !hook.url.starts_with("http://") && !hook.url.starts_with("https://") {
            errors.value(
                &format!("{path}.url"),
                format!("{:?}", hook.url),
                "a webhook URL starts with http:// or https://",
            );
        }
        if let Some(timeout) = hook.timeout
            && timeout.get().is_zero()
        {
            errors.value(
                &format!("{path}.timeout"),
                timeout,
                "a timeout is more than 0s",
            );
        }
        if let Some(retries) = hook.retries
            && retries > MAX_WEBHOOK_RETRIES
        {
            errors.value(
                &format!("{path}.retries"),
                retries,
                format!(
                    "a webhook is retried at most {MAX_WEBHOOK_RETRIES} times (each attempt may take its whole timeout)"
                ),
            );
        }
        if let Some(secret) = &hook.secret_ref
            && secret.name.is_empty()
        {
            errors.field(
                &format!("{path}.secretRef.name"),
                "is required: the Secret whose `hmacSecret` key signs the calls",
            );
        }
    }
    let evidence = &analysis.evidence;
    let margin = evidence.margin_percent;
    if !(margin.is_finite() && margin > 0.0 && margin < 100.0) {
        errors.value(
            &format!("{BASE}.evidence.marginPercent"),
            margin,
            "the tolerated excess of the canary's error rate over the primary's, in percentage \
             points: a number above 0 and below 100 (default 2)",
        );
    }
    if evidence.deadline < analysis.interval {
        errors.value(
            &format!("{BASE}.evidence.deadline"),
            evidence.deadline,
            format!(
                "how long a run may hold for evidence: at least the interval ({}; default 1h)",
                analysis.interval
            ),
        );
    }
    if let Some(from) = evidence.from_weight
        && from >= Weight::FULL
    {
        errors.value(
            &format!("{BASE}.evidence.fromWeight"),
            from,
            "a weight below 100% above which every increase needs evidence of health (omit it to \
             ask only before the promotion)",
        );
    }
    let mut judge_names = BTreeSet::new();
    for (index, judge) in analysis.judges.iter().enumerate() {
        let path = format!("{BASE}.judges[{index}]");
        if !is_dns_label(judge) {
            errors.value(
                &path,
                format!("{judge:?}"),
                "a judge is named with lowercase letters, digits and '-'",
            );
        } else if !judge_names.insert(judge.as_str()) {
            errors.value(&path, format!("{judge:?}"), "judges are listed once each");
        }
    }
    for (index, alert) in analysis.alerts.iter().enumerate() {
        if alert.name.is_empty() {
            errors.field(&format!("{BASE}.alerts[{index}].name"), "is required");
        }
        if alert.provider_ref.name.is_empty() {
            errors.field(
                &format!("{BASE}.alerts[{index}].providerRef.name"),
                "is required",
            );
        }
    }
}

/// `spec.analysis.judgeCounts`: a template named, the four queries given and renderable (an
/// unknown placeholder is named), and reads at least 1s apart. That the template is loaded and
/// of a provider that can answer is checked by the metric source that reads it.
fn judge_counts(rollout: &Rollout, counts: &JudgeCounts, errors: &mut Errors) {
    const BASE: &str = "spec.analysis.judgeCounts";
    if rollout.spec.analysis.judges.is_empty()
        && rollout.spec.target.kind() != crate::model::TargetKind::Local
    {
        errors.field(
            BASE,
            "no judge reads these counts: name one in spec.analysis.judges (known: sequential); \
             only local rollouts get the sequential judge without naming it",
        );
    }
    if counts.template_ref.name.is_empty() {
        errors.field(
            &format!("{BASE}.templateRef.name"),
            "is required: the MetricTemplate whose provider answers the count queries",
        );
    }
    let interval = counts.interval();
    if interval < MIN_INTERVAL {
        errors.value(
            &format!("{BASE}.interval"),
            interval,
            "the least time between two reads of the counts: at least 1s (default 30s)",
        );
    }
    let mut variables = crate::query::variables(rollout, &counts.as_metric(interval));
    variables.insert(
        "intervalSeconds".into(),
        interval.get().as_secs().to_string(),
    );
    for (field, query) in counts.queries() {
        let path = format!("{BASE}.{field}");
        if query.trim().is_empty() {
            let (version, what) = field.split_once('.').unwrap_or((field, field));
            errors.field(
                &path,
                format!(
                    "is required: a query answering the number of {what} the {version} served in \
                     the last {{{{ interval }}}} (all four of canary.requests, canary.errors, \
                     primary.requests and primary.errors are needed)"
                ),
            );
        } else if let Err(error) = crate::query::render(query, &variables) {
            errors.value(&path, format!("{query:?}"), error.to_string());
        }
    }
}

fn session_affinity(affinity: &SessionAffinity, plan: &Plan, errors: &mut Errors) {
    const BASE: &str = "spec.sessionAffinity";
    if !matches!(plan, Plan::Canary(_)) {
        errors.field(
            BASE,
            format!(
                "applies to canary plans only; this plan is {}",
                plan.strategy_name()
            ),
        );
    }
    for (field, name) in [
        ("cookieName", Some(&affinity.cookie_name)),
        ("primaryCookieName", affinity.primary_cookie_name.as_ref()),
    ] {
        if let Some(name) = name
            && (name.is_empty() || !name.bytes().all(is_token_byte))
        {
            errors.value(
                &format!("{BASE}.{field}"),
                format!("{name:?}"),
                "a cookie name is an HTTP token (letters, digits and !#$%&'*+-.^_`|~)",
            );
        }
    }
    if affinity.max_age == Some(0) {
        errors.value(
            &format!("{BASE}.maxAge"),
            0,
            "maxAge is a number of seconds, at least 1",
        );
    }
}

#[cfg(test)]
mod tests;
