//! Value types shared by the spec and the status: weights and durations.
//!
//! Weights are integers in basis points (1 = 0.01%) so that arithmetic on them is exact and
//! 0.01% steps are possible (users of other tools are stuck at 1%). In documents they are written
//! as percentages (`2.5`, `"2.5%"`). Durations follow Go's `time.ParseDuration` syntax (`1m30s`,
//! `500ms`, `1.5h`) because Flagger manifests use it.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

// === impl Weight ===

/// A share of traffic (or of a flag's audience), in basis points: `Weight(10_000)` is 100%.
///
/// weir-router has its own `Weight` (a `u16` its per-request draw compares against), since the
/// router depends on no other weir crate; weir-local converts this one into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Weight(u32);

impl Weight {
    /// 0%.
    pub const ZERO: Weight = Weight(0);
    /// 100%.
    pub const FULL: Weight = Weight(10_000);

    /// A weight from basis points (1 = 0.01%). Values above 100% are representable so that
    /// validation can report them with their field path.
    pub const fn from_basis_points(basis_points: u32) -> Weight {
        Weight(basis_points)
    }

    /// A weight from a whole percentage.
    pub const fn from_percent(percent: u32) -> Weight {
        Weight(percent.saturating_mul(100))
    }

    /// The weight in basis points.
    pub const fn basis_points(self) -> u32 {
        self.0
    }

    /// The weight as a percentage.
    pub fn percent(self) -> f64 {
        f64::from(self.0) / 100.0
    }

    /// What is left of 100% (the primary's share when `self` is the canary's).
    pub fn complement(self) -> Weight {
        Weight(Self::FULL.0.saturating_sub(self.0))
    }

    /// `self + other`, capped at `cap`.
    pub fn add_capped(self, other: Weight, cap: Weight) -> Weight {
        Weight(self.0.saturating_add(other.0).min(cap.0))
    }

    /// `self - other`, floored at 0%.
    pub fn saturating_sub(self, other: Weight) -> Weight {
        Weight(self.0.saturating_sub(other.0))
    }

    /// Parses a percentage such as `2.5`, `2.5%` or `100`, resolving to 0.01%.
    pub fn parse_percent(text: &str) -> Result<Weight, String> {
        let trimmed = text.trim();
        let number = trimmed.strip_suffix('%').unwrap_or(trimmed).trim();
        let value: f64 = number.parse().map_err(|_| {
            format!("{text:?} is not a percentage (expected e.g. 5, 2.5 or \"0.25%\")")
        })?;
        Self::from_percent_f64(value)
    }

    /// Converts a percentage to a weight; at most two decimals are allowed.
    pub fn from_percent_f64(value: f64) -> Result<Weight, String> {
        if !value.is_finite() || value < 0.0 {
            return Err(format!(
                "{value} is not allowed: a weight is a percentage from 0 to 100"
            ));
        }
        if value > 1_000_000.0 {
            return Err(format!(
                "{value} is not allowed: a weight is a percentage from 0 to 100"
            ));
        }
        let scaled = value * 100.0;
        let rounded = scaled.round();
        if (scaled - rounded).abs() > 1e-6 {
            return Err(format!(
                "{value} is not allowed: weights resolve to 0.01% (at most two decimals)"
            ));
        }
        // The range check above keeps `rounded` within u32.
        Ok(Weight(rounded as u32))
    }
}

impl fmt::Display for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(100) {
            write!(f, "{}%", self.0 / 100)
        } else if self.0.is_multiple_of(10) {
            write!(f, "{}.{}%", self.0 / 100, (self.0 % 100) / 10)
        } else {
            write!(f, "{}.{:02}%", self.0 / 100, self.0 % 100)
        }
    }
}

impl Serialize for Weight {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.is_multiple_of(100) {
            serializer.serialize_u32(self.0 / 100)
        } else {
            serializer.serialize_f64(self.percent())
        }
    }
}

impl schemars::JsonSchema for Weight {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Weight".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A percentage resolved to 0.01%: a number (10, 2.5) or a string (\"0.25%\").",
            "anyOf": [
                {"type": "number", "minimum": 0, "maximum": 100},
                {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?%?$"}
            ]
        })
    }
}

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct WeightVisitor;
        impl Visitor<'_> for WeightVisitor {
            type Value = Weight;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a percentage such as 10, 2.5 or \"0.25%\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Weight, E> {
                Weight::from_percent_f64(v as f64).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Weight, E> {
                Weight::from_percent_f64(v as f64).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Weight, E> {
                Weight::from_percent_f64(v).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Weight, E> {
                Weight::parse_percent(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(WeightVisitor)
    }
}

// === impl GoDuration ===

/// A duration written the way Go (and so Kubernetes and Flagger) writes them: `30s`, `1m30s`,
/// `1.5h`, `250ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration(Duration);

impl GoDuration {
    /// Wraps a std duration.
    pub const fn new(duration: Duration) -> GoDuration {
        GoDuration(duration)
    }

    /// A whole number of seconds.
    pub const fn from_secs(secs: u64) -> GoDuration {
        GoDuration(Duration::from_secs(secs))
    }

    /// The std duration.
    pub const fn get(self) -> Duration {
        self.0
    }

    /// The duration in whole milliseconds (saturating).
    pub fn as_millis_i64(self) -> i64 {
        i64::try_from(self.0.as_millis()).unwrap_or(i64::MAX)
    }

    /// Parses Go's duration syntax: a sequence of decimal numbers with units `ns`, `us` (`µs`),
    /// `ms`, `s`, `m`, `h`, such as `1h15m30.5s`. Negative durations are refused.
    pub fn parse(text: &str) -> Result<GoDuration, String> {
        let expected = "expected a duration such as 30s, 1m, 1m30s or 1.5h";
        let input = text.trim();
        if input == "0" {
            return Ok(GoDuration(Duration::ZERO));
        }
        if input.is_empty() || input.starts_with('-') {
            return Err(format!("{text:?} is not a valid duration: {expected}"));
        }
        let input = input.strip_prefix('+').unwrap_or(input);
        let mut total_nanos: u128 = 0;
        let mut rest = input;
        while !rest.is_empty() {
            let number_len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            let number = &rest[..number_len];
            rest = &rest[number_len..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(rest.len());
            let unit = &rest[..unit_len];
            rest = &rest[unit_len..];
            let unit_nanos: u128 = match unit {
                "ns" => 1,
                "us" | "µs" | "μs" => 1_000,
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                "m" => 60_000_000_000,
                "h" => 3_600_000_000_000,
                "" => return Err(format!("{text:?} is missing a unit: {expected}")),
                other => {
                    return Err(format!(
                        "{text:?} has an unknown unit {other:?}: units are ns, us, ms, s, m, h"
                    ));
                }
            };
            let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
            if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
                return Err(format!("{text:?} is not a valid duration: {expected}"));
            }
            let whole: u128 = if whole.is_empty() {
                0
            } else {
                whole
                    .parse()
                    .map_err(|_| format!("{text:?} is too large a duration"))?
            };
            let mut nanos = whole
                .checked_mul(unit_nanos)
                .ok_or_else(|| format!("{text:?} is too large a duration"))?;
            // Fractions beyond nanosecond precision are truncated, as Go does.
            let mut scale = unit_nanos;
            for digit in fraction.chars().take(18) {
                scale /= 10;
                let digit = u128::from(digit.to_digit(10).unwrap_or(0));
                nanos += digit * scale;
            }
            total_nanos = total_nanos
                .checked_add(nanos)
                .ok_or_else(|| format!("{text:?} is too large a duration"))?;
        }
        // A ten-year cap keeps every later timestamp computation far from overflow.
        const MAX_NANOS: u128 = 10 * 366 * 24 * 3_600_000_000_000;
        if total_nanos > MAX_NANOS {
            return Err(format!(
                "{text:?} is too long: durations are limited to 10 years"
            ));
        }
        let secs = (total_nanos / 1_000_000_000) as u64;
        let nanos = (total_nanos % 1_000_000_000) as u32;
        Ok(GoDuration(Duration::new(secs, nanos)))
    }
}

impl fmt::Display for GoDuration {
    /// Formats canonically: `1h30m`, `45s`, `1m0.5s`, `250ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.0;
        if total.is_zero() {
            return f.write_str("0s");
        }
        if total < Duration::from_secs(1) {
            let nanos = total.subsec_nanos();
            return if nanos.is_multiple_of(1_000_000) {
                write!(f, "{}ms", nanos / 1_000_000)
            } else if nanos.is_multiple_of(1_000) {
                write!(f, "{}us", nanos / 1_000)
            } else {
                write!(f, "{nanos}ns")
            };
        }
        let secs = total.as_secs();
        let (hours, minutes, seconds) = (secs / 3600, (secs % 3600) / 60, secs % 60);
        if hours > 0 {
            write!(f, "{hours}h")?;
        }
        if minutes > 0 {
            write!(f, "{minutes}m")?;
        }
        let nanos = total.subsec_nanos();
        if nanos > 0 {
            let fraction = format!("{nanos:09}");
            write!(f, "{seconds}.{}s", fraction.trim_end_matches('0'))
        } else if seconds > 0 {
            write!(f, "{seconds}s")
        } else {
            Ok(())
        }
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl schemars::JsonSchema for GoDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GoDuration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A duration in Go's syntax: 30s, 1m30s, 1.5h, 250ms.",
            "type": "string"
        })
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = GoDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 30s, 1m, 1m30s or 1.5h")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<GoDuration, E> {
                GoDuration::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<GoDuration, E> {
                if v == 0 {
                    Ok(GoDuration::default())
                } else {
                    Err(E::custom(format!(
                        "{v} has no unit: write a duration such as {v}s or {v}m"
                    )))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<GoDuration, E> {
                Err(E::custom(format!(
                    "{v} has no unit: write a duration such as 30s or 1m"
                )))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<GoDuration, E> {
                Err(E::custom(format!(
                    "{v} has no unit: write a duration such as 30s or 1m"
                )))
            }
        }
        deserializer.deserialize_any(DurationVisitor)
    }
}

#[cfg(test)]
mod tests;
