//! The rules of a `Flag` beyond its shape.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::error::Errors;
use crate::flag::compile_regex;
use crate::flag::semver;
use crate::model::{API_VERSION, ClauseOp, FLAG_KIND, Flag, FlagWeight, ObjectMeta, Rule};

/// The rule for a flag's key, which SDKs pass around: 1 to 253 characters of lowercase letters,
/// digits, '-', '.' and '_', starting and ending with a letter or a digit. A Kubernetes name
/// plus '_' (common in flag keys such as `new_checkout`); no uppercase, so that keys that differ
/// only in case cannot both exist.
const KEY_RULE: &str = "a flag's key is 1 to 253 lowercase letters, digits, '-', '.' and '_', \
                        starting and ending with a letter or digit";

/// Whether `text` can be a flag's key (the rule above).
pub fn is_flag_key(text: &str) -> bool {
    let edge =
        |byte: Option<u8>| byte.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b))
        && edge(text.bytes().next())
        && edge(text.bytes().last())
}

/// The JSON type of a variation's value, for "all of one type": objects and arrays are one type,
/// JSON (OpenFeature's object flags).
fn value_type(value: &Value) -> Option<&'static str> {
    match value {
        Value::Bool(_) => Some("boolean"),
        Value::String(_) => Some("string"),
        Value::Number(_) => Some("number"),
        Value::Object(_) | Value::Array(_) => Some("JSON (object or list)"),
        Value::Null => None,
    }
}

/// Every problem with a flag.
pub(super) fn flag(flag: &Flag, errors: &mut Errors) {
    if flag.api_version != API_VERSION {
        errors.value(
            "apiVersion",
            format!("{:?}", flag.api_version),
            format!("a Flag's apiVersion is {API_VERSION}"),
        );
    }
    if flag.kind != FLAG_KIND {
        errors.value("kind", format!("{:?}", flag.kind), "this is kind Flag");
    }
    metadata(&flag.metadata, errors);
    let spec = &flag.spec;

    // Variations.
    if spec.variations.len() < 2 {
        errors.field(
            "spec.variations",
            format!(
                "has {} variation(s): a flag needs at least 2 (e.g. off and on)",
                spec.variations.len()
            ),
        );
    }
    let mut names = BTreeSet::new();
    let mut first_type: Option<(usize, &'static str)> = None;
    for (index, variation) in spec.variations.iter().enumerate() {
        let path = format!("spec.variations[{index}]");
        if variation.name.is_empty() {
            errors.field(&format!("{path}.name"), "is required: a non-empty name");
        } else if !names.insert(variation.name.as_str()) {
            errors.value(
                &format!("{path}.name"),
                format!("{:?}", variation.name),
                "variation names must be unique",
            );
        }
        match (value_type(&variation.value), first_type) {
            (None, _) => errors.field(
                &format!("{path}.value"),
                "is null: a value is a boolean, a string, a number or JSON (object or list)",
            ),
            (Some(kind), None) => first_type = Some((index, kind)),
            (Some(kind), Some((first, expected))) if kind != expected => errors.field(
                &format!("{path}.value"),
                format!(
                    "is a {kind}, but spec.variations[{first}] is a {expected}: every variation \
                     of a flag has a value of one type"
                ),
            ),
            _ => {}
        }
    }
    let known = |name: &str| names.contains(name);
    let allowed = || {
        let list: Vec<String> = names.iter().map(|name| format!("{name:?}")).collect();
        if list.is_empty() {
            "(none)".to_string()
        } else {
            list.join(", ")
        }
    };

    if let Some(off) = &spec.off_variation
        && !known(off)
    {
        errors.value(
            "spec.offVariation",
            format!("{off:?}"),
            format!(
                "not a variation of this flag; the variations are {}",
                allowed()
            ),
        );
    }

    // Individual targets.
    let mut listed: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, keys) in &spec.targets {
        let path = format!("spec.targets.{name}");
        if !known(name) {
            errors.field(
                &path,
                format!(
                    "targets the variation {name:?}, which is not a variation of this flag; the \
                     variations are {}",
                    allowed()
                ),
            );
        }
        for (index, key) in keys.iter().enumerate() {
            if key.is_empty() {
                errors.field(&format!("{path}[{index}]"), "is empty: a targeting key");
                continue;
            }
            match listed.get(key.as_str()) {
                Some(other) if *other != name.as_str() => errors.value(
                    &format!("{path}[{index}]"),
                    format!("{key:?}"),
                    format!(
                        "the targeting key is also listed under the variation {other:?}: a key \
                         gets one variation"
                    ),
                ),
                Some(_) => {}
                None => {
                    listed.insert(key, name);
                }
            }
        }
    }

    // Rules.
    for (index, rule) in spec.rules.iter().enumerate() {
        self::rule(index, rule, &known, &allowed, errors);
    }

    // The default strategy.
    strategy(
        "spec.defaultStrategy",
        "the default strategy",
        spec.default_strategy.variation.as_deref(),
        spec.default_strategy.weights.as_ref(),
        &known,
        &allowed,
        errors,
    );

    if spec.bucket_by.as_deref() == Some("") {
        errors.field(
            "spec.bucketBy",
            "is empty: name the attribute users are bucketed by, or leave it out for \
             targetingKey",
        );
    }
    tags(&spec.tags, errors);
    flag_metadata(&spec.metadata, errors);
}

/// At most this many tags on a flag, and metadata entries.
pub(crate) const MAX_TAGS: usize = 20;
const MAX_METADATA: usize = 32;

/// A tag: 1 to 63 lowercase letters, digits, '-', '_', '.', ':' and '/', starting with a letter or
/// a digit (`team:checkout`, `release/2026-11`).
fn is_tag(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.:/".contains(&b))
}

fn tags(tags: &[String], errors: &mut Errors) {
    if tags.len() > MAX_TAGS {
        errors.field(
            "spec.tags",
            format!("has {} tags: at most {MAX_TAGS}", tags.len()),
        );
    }
    let mut seen = BTreeSet::new();
    for (index, tag) in tags.iter().enumerate() {
        let path = format!("spec.tags[{index}]");
        if !is_tag(tag) {
            errors.value(
                &path,
                format!("{tag:?}"),
                "a tag is 1 to 63 lowercase letters, digits, '-', '_', '.', ':' and '/', \
                 starting with a letter or digit",
            );
        } else if !seen.insert(tag) {
            errors.value(&path, format!("{tag:?}"), "is listed twice");
        }
    }
}

/// `spec.metadata`, served as OFREP's `metadata`: strings, numbers and booleans by name.
fn flag_metadata(metadata: &BTreeMap<String, Value>, errors: &mut Errors) {
    if metadata.len() > MAX_METADATA {
        errors.field(
            "spec.metadata",
            format!("has {} entries: at most {MAX_METADATA}", metadata.len()),
        );
    }
    for (name, value) in metadata {
        let path = format!("spec.metadata.{name}");
        if name.is_empty() || name.len() > 63 {
            errors.value(&path, format!("{name:?}"), "a name is 1 to 63 characters");
        }
        match value {
            Value::String(text) if text.len() > 1024 => {
                errors.field(&path, "is longer than 1024 characters")
            }
            Value::String(_) | Value::Number(_) | Value::Bool(_) => {}
            _ => errors.field(
                &path,
                "is not a string, a number or a boolean (OFREP's flag metadata)",
            ),
        }
    }
}

fn metadata(metadata: &ObjectMeta, errors: &mut Errors) {
    if metadata.name.is_empty() {
        errors.field("metadata.name", format!("is required: {KEY_RULE}"));
    } else if !is_flag_key(&metadata.name) {
        errors.value("metadata.name", format!("{:?}", metadata.name), KEY_RULE);
    }
    if let Some(namespace) = &metadata.namespace
        && !super::is_dns_label(namespace)
    {
        errors.value(
            "metadata.namespace",
            format!("{namespace:?}"),
            "a namespace is at most 63 lowercase letters, digits and '-', starting and ending \
             with a letter or digit",
        );
    }
}

fn rule(
    index: usize,
    rule: &Rule,
    known: &dyn Fn(&str) -> bool,
    allowed: &dyn Fn() -> String,
    errors: &mut Errors,
) {
    let path = format!("spec.rules[{index}]");
    let subject = match &rule.name {
        Some(name) => format!("rule {index} ({name:?})"),
        None => format!("rule {index}"),
    };
    if rule.clauses.is_empty() {
        errors.field(
            &format!("{path}.clauses"),
            format!(
                "{subject} has no clauses: a rule needs at least one (to serve everyone, use \
                 defaultStrategy)"
            ),
        );
    }
    for (number, clause) in rule.clauses.iter().enumerate() {
        let clause_path = format!("{path}.clauses[{number}]");
        if clause.attribute.is_empty() {
            errors.field(
                &format!("{clause_path}.attribute"),
                format!("is empty in {subject}: name a context attribute (or targetingKey)"),
            );
        }
        if clause.values.is_empty() {
            errors.field(
                &format!("{clause_path}.values"),
                format!(
                    "is empty in {subject}: a clause holds when the attribute compares with any \
                     value, so it needs at least one"
                ),
            );
        }
        for (position, value) in clause.values.iter().enumerate() {
            let value_path = format!("{clause_path}.values[{position}]");
            if let Some(problem) = clause_value_problem(clause.op, value) {
                errors.value(&value_path, value, format!("in {subject}: {problem}"));
            }
        }
    }
    strategy(
        &path,
        &subject,
        rule.variation.as_deref(),
        rule.weights.as_ref(),
        known,
        allowed,
        errors,
    );
}

/// What is wrong with `value` as a value of an `op` clause.
fn clause_value_problem(op: ClauseOp, value: &Value) -> Option<String> {
    match op {
        ClauseOp::Equals | ClauseOp::In => {
            (!matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_)))
                .then(|| "equals and in compare with strings, numbers and booleans".to_string())
        }
        ClauseOp::StartsWith | ClauseOp::EndsWith => {
            (!value.is_string()).then(|| "startsWith and endsWith compare with strings".to_string())
        }
        ClauseOp::Matches => match value.as_str() {
            None => Some("matches takes regular expressions, as strings".to_string()),
            Some(pattern) => compile_regex(pattern).err().map(|error| {
                let detail = error.to_string();
                let reason = detail.lines().last().unwrap_or("invalid syntax").trim();
                format!("not a valid regular expression ({reason})")
            }),
        },
        ClauseOp::Gt | ClauseOp::Gte | ClauseOp::Lt | ClauseOp::Lte => {
            (!value.is_number()).then(|| "gt, gte, lt and lte compare with numbers".to_string())
        }
        ClauseOp::SemverEq
        | ClauseOp::SemverGt
        | ClauseOp::SemverGte
        | ClauseOp::SemverLt
        | ClauseOp::SemverLte => match value.as_str() {
            Some(text) if semver::parse(text).is_some() => None,
            _ => Some(
                "semver operators compare with versions, as strings: MAJOR.MINOR.PATCH with an \
                 optional leading v, -pre.release and +build (e.g. \"1.4.0\", \"v2.0.0-rc.1\")"
                    .to_string(),
            ),
        },
    }
}

/// A rule's or the default's strategy: exactly one of a known variation and weights over known
/// variations summing to 100%.
fn strategy(
    path: &str,
    subject: &str,
    variation: Option<&str>,
    weights: Option<&BTreeMap<String, FlagWeight>>,
    known: &dyn Fn(&str) -> bool,
    allowed: &dyn Fn() -> String,
    errors: &mut Errors,
) {
    match (variation, weights) {
        (Some(_), Some(_)) => errors.field(
            path,
            format!("{subject} sets both variation and weights: set exactly one"),
        ),
        (None, None) => errors.field(
            path,
            format!(
                "{subject} sets neither variation nor weights: set exactly one (variation: on, \
                 or weights: {{on: 20, off: 80}})"
            ),
        ),
        _ => {}
    }
    if let Some(name) = variation
        && !known(name)
    {
        errors.value(
            &format!("{path}.variation"),
            format!("{name:?}"),
            format!(
                "{subject} names no variation of this flag; the variations are {}",
                allowed()
            ),
        );
    }
    if let Some(weights) = weights {
        let mut sum: u64 = 0;
        for (name, weight) in weights {
            sum += u64::from(weight.units());
            if !known(name) {
                errors.field(
                    &format!("{path}.weights.{name}"),
                    format!(
                        "{subject} weighs {name:?}, which is not a variation of this flag; the \
                         variations are {}",
                        allowed()
                    ),
                );
            }
        }
        if sum != u64::from(FlagWeight::FULL.units()) {
            // Shown as a percentage like the weights (a sum may exceed 100%, so not a FlagWeight).
            let shown = format!("{}.{:03}", sum / 1000, sum % 1000);
            let shown = shown.trim_end_matches('0').trim_end_matches('.');
            errors.field(
                &format!("{path}.weights"),
                format!("{subject}'s weights sum to {shown}%: they must sum to exactly 100%"),
            );
        }
    }
}
