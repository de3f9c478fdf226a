//! Flag evaluation, pure: a [`Flag`] and a context in, a variation and the reason out.
//!
//! # Order
//!
//! Bucketeer's order (seed 004), without prerequisites:
//!
//! 1. `enabled: false`: the `offVariation` (default: the first variation), reason DISABLED.
//! 2. Individual `targets`: the context's targeting key listed under a variation gets it,
//!    reason TARGETING_MATCH.
//! 3. `rules`, first match wins. A rule matches when ALL its clauses hold; a clause holds when
//!    the attribute compared with ANY of its `values` holds; a missing attribute never holds. A
//!    matching rule's `variation` gives TARGETING_MATCH, its `weights` give SPLIT.
//! 4. `defaultStrategy`: a `variation` gives STATIC when the flag has no targeting at all (no
//!    targeting keys listed, no rules), DEFAULT otherwise; `weights` give SPLIT.
//!
//! Attributes: `targetingKey` is the context's targeting key (`targeting_key`, or a string
//! `targetingKey` attribute when that is absent); any other name is read from the
//! context's attributes, first as a top-level key, then (if the name has dots) as a path `a.b`
//! into nested objects.
//!
//! # Bucketing
//!
//! A split hashes the bucketing value (the targeting key, or the attribute named by `bucketBy`:
//! a string as it is, a number as serde_json writes it, e.g. `42`, `1.5`) into a bucket in
//! [0, 100,000) with [`bucket`] (SHA-256, salted with the flag's key and `salt`), then walks the
//! variations in their declared order (`spec.variations`), each taking `weights[name]` units of
//! 0.001% (missing = 0): the first whose cumulative upper bound exceeds the bucket wins. The
//! bucketing value is needed only when a split is reached: a static flag, a disabled flag or a
//! target match evaluates without it.
//!
//! # Monotonicity
//!
//! The bucket of a user never changes while the flag's key, `salt` and `bucketBy` stay, and the
//! walk order is the declared order of the variations, so a variation `i` owns the interval
//! `[C(i-1), C(i))` of buckets, `C(i)` being the sum of the weights of the variations declared up
//! to `i`. The exact guarantee: when the weight of one variation `a` rises by `d` units and the
//! weight of one other variation `c` falls by `d`, every other weight unchanged, and every
//! variation declared between `a` and `c` has weight 0, then only the boundary between `a` and
//! `c` moves, and the only users who change variation are the `d/100,000` of users who move from
//! `c` to `a`; nobody leaves `a`. In particular, in a two-variation flag (a progressive rollout's
//! control and target), raising the target's weight only ever moves users from control to
//! target, and lowering it moves them back in the reverse order. When a variation with a
//! non-zero weight lies between `a` and `c`, its interval shifts by `d`: it keeps its share, but
//! some of its users move to `a` while some of `c`'s move to it. (Tested in
//! `flag::tests::monotonicity_*`.)

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

use crate::error::FieldError;
use crate::model::{Flag, FlagWeight, Strategy, Variation};

mod clause;
pub(crate) mod semver;
#[cfg(test)]
mod tests;

pub(crate) use clause::compile_regex;
use clause::{Attribute, CompiledClause, Found};

/// What an application tells about who is asking.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvaluationContext {
    /// OpenFeature's targeting key.
    pub targeting_key: Option<String>,
    /// Every other attribute.
    pub attributes: Map<String, Value>,
}

/// Why a flag evaluated as it did (OpenFeature's reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The flag has no targeting: everyone gets the same.
    Static,
    /// An individual target or a rule matched.
    TargetingMatch,
    /// The user's bucket chose among weighted variations.
    Split,
    /// The flag is disabled: its off variation.
    Disabled,
    /// No target or rule matched: the default strategy's single variation.
    Default,
}

impl Reason {
    /// As OFREP writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Static => "STATIC",
            Reason::TargetingMatch => "TARGETING_MATCH",
            Reason::Split => "SPLIT",
            Reason::Disabled => "DISABLED",
            Reason::Default => "DEFAULT",
        }
    }
}

/// The outcome of an evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The variation's name.
    pub variant: String,
    /// Its value.
    pub value: Value,
    /// Why.
    pub reason: Reason,
}

/// Why a flag could not be evaluated for a context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvaluationError {
    /// The flag splits users by the targeting key (or `bucketBy`) and the context has none.
    #[error("{0}")]
    TargetingKeyMissing(String),
    /// The context cannot be used (e.g. the bucketing attribute is not a string or a number).
    #[error("{0}")]
    InvalidContext(String),
}

/// A flag ready to be evaluated many times: variation names resolved to indices, targeting
/// keys in a hash map, clause values parsed and regular expressions compiled once, so an
/// evaluation only reads.
#[derive(Debug, Clone)]
pub struct CompiledFlag {
    flag: Flag,
    /// Index of the off variation.
    off: usize,
    /// Targeting key -> variation index.
    targets: HashMap<String, usize>,
    rules: Vec<CompiledRule>,
    /// `None` only for an invalid flag whose default strategy names nothing usable.
    default: Option<Outcome>,
    /// No targeting keys and no rules: a single-variation default is STATIC.
    untargeted: bool,
    bucket_by: Attribute,
}

#[derive(Debug, Clone)]
struct CompiledRule {
    clauses: Vec<CompiledClause>,
    outcome: Outcome,
}

#[derive(Debug, Clone)]
enum Outcome {
    /// A variation index.
    One(usize),
    Split(Split),
}

/// Weights as a walk: (cumulative upper bound, variation index), in declared order, zero weights
/// left out (they own no bucket).
#[derive(Debug, Clone)]
struct Split {
    bounds: Vec<(u32, usize)>,
}

impl Split {
    fn new(variations: &[Variation], weights: &BTreeMap<String, FlagWeight>) -> Option<Split> {
        let mut upper = 0u32;
        let mut bounds = Vec::new();
        for (index, variation) in variations.iter().enumerate() {
            let units = weights
                .get(&variation.name)
                .map_or(0, |weight| weight.units());
            if units == 0 {
                continue;
            }
            upper = upper.saturating_add(units);
            bounds.push((upper, index));
        }
        (!bounds.is_empty()).then_some(Split { bounds })
    }

    /// The variation owning `bucket`. Weights of a valid flag sum to 100%, so some bound exceeds
    /// every bucket; for an invalid flag summing to less, the last variation takes the rest.
    fn pick(&self, bucket: u32) -> Option<usize> {
        self.bounds
            .iter()
            .find(|(upper, _)| *upper > bucket)
            .or(self.bounds.last())
            .map(|(_, index)| *index)
    }
}

impl CompiledFlag {
    /// Compiles `flag`, which should be valid (`validate::flag`; see [`CompiledFlag::try_new`]).
    ///
    /// An invalid flag still compiles and evaluates without panicking, degraded (servers are
    /// expected to refuse invalid flags; this only keeps a bug or a bypassed check harmless):
    /// an unknown `offVariation` is the first variation; targets naming an unknown variation,
    /// and rules whose strategy names nothing usable (an unknown variation, no weighted
    /// variation, neither `variation` nor `weights`), are skipped; a strategy with both serves its
    /// variation; weights of unknown variations are ignored, and weights summing to less than
    /// 100% give the rest to the last weighted variation; a default strategy that names nothing
    /// usable serves the off variation (DEFAULT); a value of the wrong type for its operator, an
    /// invalid regular expression or version never matches. A flag without variations evaluates
    /// to [`EvaluationError::InvalidContext`] (OFREP has no better code for it than GENERAL, and
    /// the error type is shared with the OFREP server).
    pub fn new(flag: Flag) -> CompiledFlag {
        let spec = &flag.spec;
        let index_of = |name: &str| spec.variations.iter().position(|v| v.name == name);
        let off = spec
            .off_variation
            .as_deref()
            .and_then(index_of)
            .unwrap_or(0);
        let mut targets = HashMap::new();
        for (name, keys) in &spec.targets {
            if let Some(index) = index_of(name) {
                for key in keys {
                    // A key under two variations is invalid; the first by name wins.
                    targets.entry(key.clone()).or_insert(index);
                }
            }
        }
        let strategy = |variation: Option<&String>, weights: Option<&BTreeMap<_, _>>| match (
            variation, weights,
        ) {
            (Some(name), _) => index_of(name).map(Outcome::One),
            (None, Some(weights)) => Split::new(&spec.variations, weights).map(Outcome::Split),
            (None, None) => None,
        };
        let rules = spec
            .rules
            .iter()
            .filter_map(|rule| {
                let outcome = strategy(rule.variation.as_ref(), rule.weights.as_ref())?;
                Some(CompiledRule {
                    clauses: rule.clauses.iter().map(CompiledClause::new).collect(),
                    outcome,
                })
            })
            .collect();
        let Strategy { variation, weights } = &spec.default_strategy;
        let default = strategy(variation.as_ref(), weights.as_ref());
        let untargeted = spec.rules.is_empty() && spec.targets.values().all(Vec::is_empty);
        let bucket_by = Attribute::new(spec.bucket_by.as_deref().unwrap_or(clause::TARGETING_KEY));
        CompiledFlag {
            off,
            targets,
            rules,
            default,
            untargeted,
            bucket_by,
            flag,
        }
    }

    /// Validates `flag` (`validate::flag`), then compiles it.
    pub fn try_new(flag: Flag) -> Result<CompiledFlag, Vec<FieldError>> {
        let errors = crate::validate::flag(&flag);
        if errors.is_empty() {
            Ok(CompiledFlag::new(flag))
        } else {
            Err(errors)
        }
    }

    /// The flag.
    pub fn flag(&self) -> &Flag {
        &self.flag
    }

    /// Evaluates the flag for `context`.
    pub fn evaluate(&self, context: &EvaluationContext) -> Result<Evaluation, EvaluationError> {
        if self.flag.spec.variations.is_empty() {
            return Err(EvaluationError::InvalidContext(format!(
                "flag {} has no variations: it is not a valid flag",
                self.flag.key()
            )));
        }
        if !self.flag.spec.enabled {
            return self.serve(self.off, Reason::Disabled);
        }
        if let Some(key) = clause::targeting_key(context)
            && let Some(&index) = self.targets.get(key)
        {
            return self.serve(index, Reason::TargetingMatch);
        }
        for rule in &self.rules {
            if rule.clauses.iter().all(|clause| clause.holds(context)) {
                return self.outcome(&rule.outcome, Reason::TargetingMatch, context);
            }
        }
        let single = if self.untargeted {
            Reason::Static
        } else {
            Reason::Default
        };
        match &self.default {
            Some(outcome) => self.outcome(outcome, single, context),
            None => self.serve(self.off, Reason::Default),
        }
    }

    fn outcome(
        &self,
        outcome: &Outcome,
        single: Reason,
        context: &EvaluationContext,
    ) -> Result<Evaluation, EvaluationError> {
        match outcome {
            Outcome::One(index) => self.serve(*index, single),
            Outcome::Split(split) => {
                let bucket = self.bucket_of(context)?;
                match split.pick(bucket) {
                    Some(index) => self.serve(index, Reason::Split),
                    None => self.serve(self.off, Reason::Default),
                }
            }
        }
    }

    /// The context's bucket for this flag.
    fn bucket_of(&self, context: &EvaluationContext) -> Result<u32, EvaluationError> {
        let key = self.flag.key();
        let salt = self.flag.spec.salt.as_deref().unwrap_or("");
        match self.bucket_by.lookup(context) {
            Some(Found::Str(text)) => Ok(bucket(key, salt, text)),
            Some(Found::Num(number)) => Ok(bucket_number(key, salt, number)),
            Some(Found::Bool(_) | Found::Other) => Err(EvaluationError::InvalidContext(format!(
                "flag {key} splits users by the attribute `{}`, which must be a string or a \
                     number",
                self.bucket_by.name()
            ))),
            None if self.bucket_by.is_targeting_key() => Err(EvaluationError::TargetingKeyMissing(
                format!("flag {key} splits users by `targetingKey` and the context has none"),
            )),
            None => Err(EvaluationError::TargetingKeyMissing(format!(
                "flag {key} splits users by the attribute `{}` (bucketBy) and the context has \
                 none",
                self.bucket_by.name()
            ))),
        }
    }

    fn serve(&self, index: usize, reason: Reason) -> Result<Evaluation, EvaluationError> {
        // Indices come from this flag's variations; `get` keeps even a bug from panicking.
        let variation = self.flag.spec.variations.get(index).ok_or_else(|| {
            EvaluationError::InvalidContext(format!(
                "flag {} has no variation {index}",
                self.flag.key()
            ))
        })?;
        Ok(Evaluation {
            variant: variation.name.clone(),
            value: variation.value.clone(),
            reason,
        })
    }
}

/// The bucket of `value` for flag `key` with `salt`: a point in [0, 100,000) (units of 0.001%),
/// the same on every machine and in every version.
///
/// SHA-256 of `salt`, a zero byte, `key`, a zero byte and `value` (the zero bytes keep
/// `("ab", "c")` and `("a", "bc")` apart); the first 8 bytes of the digest, big-endian, are a
/// uniform `h` in [0, 2^64), scaled to `h * 100,000 / 2^64` by a multiply and a shift, which has
/// no modulo bias worth the name (buckets differ in size by at most one part in 2^47).
/// SHA-256 rather than a faster hash: it is already a dependency, it is the same everywhere, and
/// no one can pick keys that crowd a bucket.
pub fn bucket(key: &str, salt: &str, value: &str) -> u32 {
    bucket_fed(key, salt, |hasher| hasher.update(value.as_bytes()))
}

/// [`bucket`] of a number's JSON text, written into the hash without an allocation.
fn bucket_number(key: &str, salt: &str, number: &Number) -> u32 {
    struct Feed<'a>(&'a mut Sha256);
    impl fmt::Write for Feed<'_> {
        fn write_str(&mut self, text: &str) -> fmt::Result {
            self.0.update(text.as_bytes());
            Ok(())
        }
    }
    bucket_fed(key, salt, |hasher| {
        // Writing into a hasher cannot fail.
        let _ = fmt::write(&mut Feed(hasher), format_args!("{number}"));
    })
}

fn bucket_fed(key: &str, salt: &str, feed: impl FnOnce(&mut Sha256)) -> u32 {
    let mut hasher = Sha256::new();
    hasher.update(salt.as_bytes());
    hasher.update([0u8]);
    hasher.update(key.as_bytes());
    hasher.update([0u8]);
    feed(&mut hasher);
    let digest = hasher.finalize();
    let h = digest
        .iter()
        .take(8)
        .fold(0u64, |h, byte| (h << 8) | u64::from(*byte));
    // < 100,000 since h < 2^64.
    ((u128::from(h) * 100_000) >> 64) as u32
}
