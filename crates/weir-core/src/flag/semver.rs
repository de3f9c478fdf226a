//! Semantic versions (SemVer 2.0.0), parsed and ordered by precedence, by hand: the `semver`
//! crate is one more dependency for forty lines, and flags need nothing but precedence.
//!
//! Accepted: `MAJOR.MINOR.PATCH`, an optional leading `v`, an optional pre-release
//! (`-alpha.1`) and optional build metadata (`+build.5`, ignored by precedence). Numeric
//! identifiers have no leading zeros; every identifier is non-empty `[0-9A-Za-z-]`.

use std::cmp::Ordering;

/// A version borrowing its pre-release from the text it was parsed from (no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Version<'a> {
    major: u64,
    minor: u64,
    patch: u64,
    /// Dot-separated identifiers; empty when there is no pre-release.
    pre: &'a str,
}

/// A version owned by a compiled clause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnedVersion {
    major: u64,
    minor: u64,
    patch: u64,
    pre: String,
}

impl OwnedVersion {
    pub(crate) fn parse(text: &str) -> Option<OwnedVersion> {
        parse(text).map(|version| OwnedVersion {
            major: version.major,
            minor: version.minor,
            patch: version.patch,
            pre: version.pre.to_string(),
        })
    }

    pub(crate) fn as_version(&self) -> Version<'_> {
        Version {
            major: self.major,
            minor: self.minor,
            patch: self.patch,
            pre: &self.pre,
        }
    }
}

fn is_identifier(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
}

fn is_numeric(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit())
}

fn has_leading_zero(text: &str) -> bool {
    text.len() > 1 && text.starts_with('0')
}

fn number(text: &str) -> Option<u64> {
    if !is_numeric(text) || has_leading_zero(text) {
        return None;
    }
    text.parse().ok()
}

/// Parses a version, or `None` when `text` is not one.
pub(crate) fn parse(text: &str) -> Option<Version<'_>> {
    let text = text.strip_prefix('v').unwrap_or(text);
    let (rest, build) = match text.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (text, None),
    };
    if let Some(build) = build
        && !build.split('.').all(is_identifier)
    {
        return None;
    }
    // The core has no '-', so the first one starts the pre-release (which may hold more).
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => {
            let valid = pre
                .split('.')
                .all(|id| is_identifier(id) && !(is_numeric(id) && has_leading_zero(id)));
            if !valid {
                return None;
            }
            (core, pre)
        }
        None => (rest, ""),
    };
    let mut parts = core.split('.');
    let major = number(parts.next()?)?;
    let minor = number(parts.next()?)?;
    let patch = number(parts.next()?)?;
    if parts.next().is_some() {
        return None;
    }
    Some(Version {
        major,
        minor,
        patch,
        pre,
    })
}

/// SemVer precedence: major, minor, patch numerically; then a version without pre-release
/// outranks one with; then pre-release identifiers left to right (numeric ones numerically and
/// below alphanumeric ones, alphanumeric ones in ASCII order), a longer list outranking its
/// prefix. Build metadata plays no part.
pub(crate) fn compare(a: &Version<'_>, b: &Version<'_>) -> Ordering {
    (a.major, a.minor, a.patch)
        .cmp(&(b.major, b.minor, b.patch))
        .then_with(|| compare_pre(a.pre, b.pre))
}

fn compare_pre(a: &str, b: &str) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        (false, false) => {}
    }
    let mut left = a.split('.');
    let mut right = b.split('.');
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let ordering = compare_identifier(x, y);
                if ordering != Ordering::Equal {
                    return ordering;
                }
            }
        }
    }
}

fn compare_identifier(a: &str, b: &str) -> Ordering {
    match (is_numeric(a), is_numeric(b)) {
        // No leading zeros, so the longer number is the larger, and any length works (no
        // overflow on a 30-digit identifier).
        (true, true) => a.len().cmp(&b.len()).then_with(|| a.cmp(b)),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => a.cmp(b),
    }
}
