//! The `Flag` document: a feature flag's variations and who gets which (seed 004, Bucketeer's
//! model). Evaluation lives in [`crate::flag`].
//!
//! ```yaml
//! apiVersion: weir.dev/v1alpha1
//! kind: Flag
//! metadata: {name: new-checkout, namespace: shop}
//! spec:
//!   variations:
//!     - {name: "off", value: false}
//!     - {name: "on", value: true}
//!   offVariation: "off"
//!   targets: {"on": [alice, bob]}
//!   rules:
//!     - clauses: [{attribute: country, op: in, values: [DE, FR]}]
//!       variation: "on"
//!   defaultStrategy: {weights: {"on": 20, "off": 80}}
//! ```

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::model::ObjectMeta;

/// The kind of a flag document.
pub const FLAG_KIND: &str = "Flag";

/// A feature flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Flag {
    /// Always `weir.dev/v1alpha1`.
    pub api_version: String,
    /// Always `Flag`.
    pub kind: String,
    /// The flag's key is `metadata.name`; its namespace scopes it like a rollout's.
    pub metadata: ObjectMeta,
    /// The variations and who gets which.
    pub spec: FlagSpec,
}

/// What a flag serves, to whom. Fields are in the order evaluation reads them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlagSpec {
    /// Whether the flag is on; off, every evaluation gets `offVariation` (reason DISABLED).
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    /// At least two, names unique, values all of one type (boolean, string, number or JSON
    /// object/array). Their order is the order of the buckets in a split.
    pub variations: Vec<Variation>,
    /// What a disabled flag serves (default: the first variation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_variation: Option<String>,
    /// Individual targeting: variation name -> targeting keys that get it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub targets: BTreeMap<String, Vec<String>>,
    /// Rules, first match wins; the clauses of a rule are ANDed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    /// What everyone else gets: one variation, or weights over variations.
    pub default_strategy: Strategy,
    /// The context attribute users are bucketed by (default `targetingKey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_by: Option<String>,
    /// Mixed into the bucketing hash: a new salt reshuffles who is in which bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salt: Option<String>,
    /// Labels to find flags by (`GET /api/v1/flags?tag=`): at most 20, each 1 to 63 lowercase
    /// letters, digits, '-', '_', '.', ':' and '/', no one twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Served as `metadata` in every OFREP answer for the flag: strings, numbers and booleans by
    /// name (at most 32).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, Value>,
}

fn enabled_by_default() -> bool {
    true
}

/// One value a flag can take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Variation {
    /// The variation's name (OFREP's `variant`).
    pub name: String,
    /// Its value.
    pub value: Value,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A targeting rule: when every clause holds, the rule's strategy decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    /// A name for the rule, shown in evaluation metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Conditions on context attributes, all of which must hold.
    pub clauses: Vec<Clause>,
    /// One variation for everyone the rule matches...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variation: Option<String>,
    /// ...or weights over variations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<BTreeMap<String, FlagWeight>>,
}

/// A condition on one context attribute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Clause {
    /// The context attribute (`targetingKey` for the targeting key).
    pub attribute: String,
    /// How the attribute is compared with `values`.
    pub op: ClauseOp,
    /// The values; the clause holds if the comparison holds for any of them.
    pub values: Vec<Value>,
}

/// The comparisons a clause can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ClauseOp {
    /// The attribute equals a value (strings, numbers, booleans).
    Equals,
    /// The attribute equals one of the values (the same as `equals` with several values).
    In,
    /// The attribute (a string) starts with a value.
    StartsWith,
    /// The attribute (a string) ends with a value.
    EndsWith,
    /// The attribute (a string) matches a regular expression (Rust `regex` syntax, unanchored).
    Matches,
    /// The attribute (a number) is greater than a value.
    Gt,
    /// ... greater than or equal.
    Gte,
    /// ... less than.
    Lt,
    /// ... less than or equal.
    Lte,
    /// The attribute (a semantic version) equals a value.
    SemverEq,
    /// ... is greater than.
    SemverGt,
    /// ... greater than or equal.
    SemverGte,
    /// ... less than.
    SemverLt,
    /// ... less than or equal.
    SemverLte,
}

/// One variation, or weights over variations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Strategy {
    /// Everyone gets this variation...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variation: Option<String>,
    /// ...or users are split by these weights (percentages summing to 100, to 0.001%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<BTreeMap<String, FlagWeight>>,
}

/// A share of users in units of 0.001% (100,000 = 100%, Bucketeer's scale, so a Bucketeer
/// weight round-trips exactly). Written as a percentage: `20`, `12.5`, `0.001`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, JsonSchema)]
#[schemars(transparent)]
pub struct FlagWeight(#[schemars(with = "f64")] u32);

impl FlagWeight {
    /// 100%.
    pub const FULL: FlagWeight = FlagWeight(100_000);
    /// 0%.
    pub const ZERO: FlagWeight = FlagWeight(0);

    /// From units of 0.001% (Bucketeer's scale), at most 100,000.
    pub fn from_units(units: u32) -> Option<FlagWeight> {
        (units <= 100_000).then_some(FlagWeight(units))
    }

    /// In units of 0.001%.
    pub fn units(self) -> u32 {
        self.0
    }

    /// From a percentage with at most three decimals.
    pub fn from_percent(percent: f64) -> Result<FlagWeight, String> {
        if !percent.is_finite() || !(0.0..=100.0).contains(&percent) {
            return Err(format!("{percent} is not a percentage from 0 to 100"));
        }
        let units = (percent * 1000.0).round();
        if (units / 1000.0 - percent).abs() > 1e-9 {
            return Err(format!(
                "{percent}% is finer than 0.001%, the smallest share of users a flag can give"
            ));
        }
        // In range by the check above.
        Ok(FlagWeight(units as u32))
    }
}

impl fmt::Display for FlagWeight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / 1000;
        let fraction = self.0 % 1000;
        if fraction == 0 {
            write!(f, "{whole}%")
        } else {
            let digits = format!("{fraction:03}");
            write!(f, "{whole}.{}%", digits.trim_end_matches('0'))
        }
    }
}

impl Serialize for FlagWeight {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.is_multiple_of(1000) {
            serializer.serialize_u32(self.0 / 1000)
        } else {
            serializer.serialize_f64(f64::from(self.0) / 1000.0)
        }
    }
}

impl<'de> Deserialize<'de> for FlagWeight {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let percent = f64::deserialize(deserializer)?;
        FlagWeight::from_percent(percent).map_err(serde::de::Error::custom)
    }
}

impl Flag {
    /// The flag's key.
    pub fn key(&self) -> &str {
        &self.metadata.name
    }

    /// The variation named `name`.
    pub fn variation(&self, name: &str) -> Option<&Variation> {
        self.spec
            .variations
            .iter()
            .find(|variation| variation.name == name)
    }
}
