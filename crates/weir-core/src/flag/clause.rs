//! Clauses compiled once: attribute paths split, values parsed, regular expressions built.

use std::cmp::Ordering;

use regex::{Regex, RegexBuilder};
use serde_json::{Number, Value};

use super::EvaluationContext;
use super::semver::{self, OwnedVersion};
use crate::model::{Clause, ClauseOp};

/// The attribute name that means the targeting key.
pub(crate) const TARGETING_KEY: &str = "targetingKey";

/// Bounds on a compiled regular expression: flags come from users, and a pattern like
/// `\w{1000}{1000}` would otherwise take a lot of memory. Validation compiles with the same
/// bounds, so a valid flag's patterns always compile here.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Compiles a clause's pattern: unanchored, Rust `regex` syntax, bounded in size.
pub(crate) fn compile_regex(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
}

/// The context's targeting key: `targeting_key`, or a string `targetingKey` attribute (a
/// server that forwards the context as it came gets the same answer either way).
pub(super) fn targeting_key(context: &EvaluationContext) -> Option<&str> {
    context.targeting_key.as_deref().or_else(|| {
        context
            .attributes
            .get(TARGETING_KEY)
            .and_then(Value::as_str)
    })
}

/// Where a clause (or `bucketBy`) reads its value.
#[derive(Debug, Clone)]
pub(super) enum Attribute {
    TargetingKey,
    Named {
        name: String,
        /// The dotted path's segments, when the name has dots.
        path: Option<Vec<String>>,
    },
}

/// An attribute's value as clauses see it; JSON null is a missing attribute.
#[derive(Debug, Clone, Copy)]
pub(super) enum Found<'a> {
    Str(&'a str),
    Num(&'a Number),
    Bool(bool),
    /// An object or an array.
    Other,
}

impl Attribute {
    pub(super) fn new(name: &str) -> Attribute {
        if name == TARGETING_KEY {
            return Attribute::TargetingKey;
        }
        Attribute::Named {
            name: name.to_string(),
            path: name
                .contains('.')
                .then(|| name.split('.').map(str::to_string).collect()),
        }
    }

    pub(super) fn name(&self) -> &str {
        match self {
            Attribute::TargetingKey => TARGETING_KEY,
            Attribute::Named { name, .. } => name,
        }
    }

    pub(super) fn is_targeting_key(&self) -> bool {
        matches!(self, Attribute::TargetingKey)
    }

    pub(super) fn lookup<'a>(&self, context: &'a EvaluationContext) -> Option<Found<'a>> {
        let value = match self {
            Attribute::TargetingKey => return targeting_key(context).map(Found::Str),
            Attribute::Named { name, path } => match (context.attributes.get(name), path) {
                // A top-level key with dots in its name wins over the path.
                (Some(value), _) => value,
                (None, Some(path)) => {
                    let mut segments = path.iter();
                    let first = segments.next()?;
                    let mut value = context.attributes.get(first)?;
                    for segment in segments {
                        value = value.as_object()?.get(segment)?;
                    }
                    value
                }
                (None, None) => return None,
            },
        };
        match value {
            Value::Null => None,
            Value::String(text) => Some(Found::Str(text)),
            Value::Number(number) => Some(Found::Num(number)),
            Value::Bool(flag) => Some(Found::Bool(*flag)),
            Value::Object(_) | Value::Array(_) => Some(Found::Other),
        }
    }
}

/// A number, exact for integers (user ids beyond 2^53 compare right) and f64 otherwise.
#[derive(Debug, Clone, Copy)]
pub(super) enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn of_number(number: &Number) -> Option<Num> {
        if let Some(int) = number.as_i64() {
            Some(Num::Int(i128::from(int)))
        } else if let Some(int) = number.as_u64() {
            Some(Num::Int(i128::from(int)))
        } else {
            number.as_f64().filter(|f| f.is_finite()).map(Num::Float)
        }
    }

    /// A numeric string: an integer, or a finite decimal (`inf` and `NaN` are not numbers).
    pub(super) fn of_text(text: &str) -> Option<Num> {
        if let Ok(int) = text.parse::<i128>() {
            return Some(Num::Int(int));
        }
        text.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(Num::Float)
    }

    fn of_found(found: Found<'_>) -> Option<Num> {
        match found {
            Found::Num(number) => Num::of_number(number),
            Found::Str(text) => Num::of_text(text),
            Found::Bool(_) | Found::Other => None,
        }
    }

    /// A number or a numeric string.
    pub(super) fn of_value(value: &Value) -> Option<Num> {
        match value {
            Value::Number(number) => Num::of_number(number),
            Value::String(text) => Num::of_text(text),
            _ => None,
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::Int(int) => int as f64,
            Num::Float(float) => float,
        }
    }

    fn compare(self, other: Num) -> Option<Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
            (a, b) => a.as_f64().partial_cmp(&b.as_f64()),
        }
    }
}

/// An `equals`/`in` value.
#[derive(Debug, Clone)]
enum Scalar {
    /// A string, and its number when it is a numeric string (it equals that number).
    Str(String, Option<Num>),
    Num(Num),
    Bool(bool),
}

#[derive(Debug, Clone, Copy)]
enum Order {
    Eq,
    Gt,
    Gte,
    Lt,
    Lte,
}

impl Order {
    fn holds(self, ordering: Ordering) -> bool {
        match self {
            Order::Eq => ordering == Ordering::Equal,
            Order::Gt => ordering == Ordering::Greater,
            Order::Gte => ordering != Ordering::Less,
            Order::Lt => ordering == Ordering::Less,
            Order::Lte => ordering != Ordering::Greater,
        }
    }
}

#[derive(Debug, Clone)]
enum Test {
    /// `equals`/`in`; `numeric` says whether any value is a number (then a string attribute is
    /// parsed once as a number).
    Equals {
        values: Vec<Scalar>,
        numeric: bool,
    },
    StartsWith(Vec<String>),
    EndsWith(Vec<String>),
    /// Patterns that did not compile are left out: they never match.
    Matches(Vec<Regex>),
    Compare(Order, Vec<Num>),
    Semver(Order, Vec<OwnedVersion>),
}

/// A clause ready to be tested many times. Values of the wrong type for the operator are left
/// out at compile time (they never hold; validation refuses them).
#[derive(Debug, Clone)]
pub(super) struct CompiledClause {
    attribute: Attribute,
    test: Test,
}

fn strings(values: &[Value]) -> Vec<String> {
    values
        .iter()
        .filter_map(|value| value.as_str().map(str::to_string))
        .collect()
}

impl CompiledClause {
    pub(super) fn new(clause: &Clause) -> CompiledClause {
        let values = &clause.values;
        let compare =
            |order| Test::Compare(order, values.iter().filter_map(Num::of_value).collect());
        let semver = |order| {
            Test::Semver(
                order,
                values
                    .iter()
                    .filter_map(Value::as_str)
                    .filter_map(OwnedVersion::parse)
                    .collect(),
            )
        };
        let test = match clause.op {
            ClauseOp::Equals | ClauseOp::In => {
                let values: Vec<Scalar> = values
                    .iter()
                    .filter_map(|value| match value {
                        Value::String(text) => Some(Scalar::Str(text.clone(), Num::of_text(text))),
                        Value::Number(number) => Num::of_number(number).map(Scalar::Num),
                        Value::Bool(flag) => Some(Scalar::Bool(*flag)),
                        _ => None,
                    })
                    .collect();
                let numeric = values.iter().any(|value| matches!(value, Scalar::Num(_)));
                Test::Equals { values, numeric }
            }
            ClauseOp::StartsWith => Test::StartsWith(strings(values)),
            ClauseOp::EndsWith => Test::EndsWith(strings(values)),
            ClauseOp::Matches => Test::Matches(
                values
                    .iter()
                    .filter_map(Value::as_str)
                    .filter_map(|pattern| compile_regex(pattern).ok())
                    .collect(),
            ),
            ClauseOp::Gt => compare(Order::Gt),
            ClauseOp::Gte => compare(Order::Gte),
            ClauseOp::Lt => compare(Order::Lt),
            ClauseOp::Lte => compare(Order::Lte),
            ClauseOp::SemverEq => semver(Order::Eq),
            ClauseOp::SemverGt => semver(Order::Gt),
            ClauseOp::SemverGte => semver(Order::Gte),
            ClauseOp::SemverLt => semver(Order::Lt),
            ClauseOp::SemverLte => semver(Order::Lte),
        };
        CompiledClause {
            attribute: Attribute::new(&clause.attribute),
            test,
        }
    }

    /// Whether the clause holds for `context`: the attribute is present and the comparison holds
    /// with any value.
    pub(super) fn holds(&self, context: &EvaluationContext) -> bool {
        let Some(found) = self.attribute.lookup(context) else {
            return false;
        };
        match &self.test {
            Test::Equals { values, numeric } => {
                // A string attribute is parsed as a number at most once, and only when needed.
                let number = match found {
                    Found::Num(number) => Num::of_number(number),
                    Found::Str(text) if *numeric => Num::of_text(text),
                    _ => None,
                };
                values.iter().any(|value| equals(found, number, value))
            }
            Test::StartsWith(prefixes) => match found {
                Found::Str(text) => prefixes
                    .iter()
                    .any(|prefix| text.starts_with(prefix.as_str())),
                _ => false,
            },
            Test::EndsWith(suffixes) => match found {
                Found::Str(text) => suffixes
                    .iter()
                    .any(|suffix| text.ends_with(suffix.as_str())),
                _ => false,
            },
            Test::Matches(patterns) => match found {
                Found::Str(text) => patterns.iter().any(|pattern| pattern.is_match(text)),
                _ => false,
            },
            Test::Compare(order, values) => match Num::of_found(found) {
                Some(number) => values.iter().any(|value| {
                    number
                        .compare(*value)
                        .is_some_and(|ordering| order.holds(ordering))
                }),
                None => false,
            },
            Test::Semver(order, versions) => {
                let Found::Str(text) = found else {
                    return false;
                };
                let Some(version) = semver::parse(text) else {
                    return false;
                };
                versions
                    .iter()
                    .any(|value| order.holds(semver::compare(&version, &value.as_version())))
            }
        }
    }
}

/// `equals`: strings as strings, booleans as booleans, and numbers as numbers, a numeric string
/// on either side standing for its number when the other side is a JSON number. `number` is the
/// attribute's number (parsed by the caller once for all values).
fn equals(found: Found<'_>, number: Option<Num>, value: &Scalar) -> bool {
    let same_number =
        |a: Option<Num>, b: Num| a.and_then(|a| a.compare(b)) == Some(Ordering::Equal);
    match (found, value) {
        (Found::Str(text), Scalar::Str(expected, _)) => text == expected,
        (Found::Str(_), Scalar::Num(expected)) => same_number(number, *expected),
        (Found::Num(_), Scalar::Num(expected)) => same_number(number, *expected),
        (Found::Num(_), Scalar::Str(_, Some(expected))) => same_number(number, *expected),
        (Found::Bool(actual), Scalar::Bool(expected)) => actual == *expected,
        _ => false,
    }
}
