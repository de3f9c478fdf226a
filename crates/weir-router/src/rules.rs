//! Match rules that send a request to the canary, with Flagger's A/B semantics: a route has a
//! list of [`MatchBlock`]s; a request matches if ANY block matches, and a block matches if ALL of
//! its [`Condition`]s match. Conditions look at a header, a cookie or a query parameter, and
//! compare its value exactly, by prefix, or against a regular expression.
//!
//! Regular expressions match the WHOLE value (they are anchored), as Istio's and Envoy's `regex`
//! matches do, so Flagger manifests such as `^(.*?;)?(canary=always)(;.*)?$` on the `cookie`
//! header mean the same thing here. They are compiled once, when the rule is parsed, never on the
//! request path.
//!
//! The text form, used by `weir router --match`, is one block per rule:
//! `KIND:NAME OP VALUE [& KIND:NAME OP VALUE ...]`, where KIND is `header`, `cookie` or `query`
//! and OP is `=` (exact), `^=` (prefix) or `~=` (regex). Example:
//! `header:x-canary=insider & cookie:beta~=yes|true`.

use std::fmt;
use std::str::FromStr;

use http::Uri;
use http::header::{COOKIE, HeaderMap, HeaderName};
use regex::Regex;

use crate::error::RouteError;

/// Where a condition reads its value from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A request header (names are case-insensitive). With several values, any may match.
    Header(HeaderName),
    /// A cookie of the `Cookie` header, by exact name.
    Cookie(String),
    /// A query-string parameter, by exact name after percent-decoding. With several values, any
    /// may match.
    Query(String),
}

/// How a value is compared.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// The value equals this string.
    Exact(String),
    /// The value starts with this string.
    Prefix(String),
    /// The whole value matches this regular expression (anchored at both ends).
    Regex(Regex),
}

impl Matcher {
    /// A regex matcher; the pattern is anchored so it must match the whole value.
    pub fn regex(pattern: &str) -> Result<Self, RouteError> {
        Regex::new(&format!("^(?:{pattern})$"))
            .map(Matcher::Regex)
            .map_err(|err| RouteError::Match {
                rule: pattern.to_owned(),
                reason: format!("bad regular expression: {err}"),
            })
    }

    /// Whether `value` satisfies this matcher.
    pub fn is_match(&self, value: &str) -> bool {
        match self {
            Matcher::Exact(expected) => value == expected,
            Matcher::Prefix(prefix) => value.starts_with(prefix.as_str()),
            Matcher::Regex(regex) => regex.is_match(value),
        }
    }
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Matcher::Exact(a), Matcher::Exact(b)) | (Matcher::Prefix(a), Matcher::Prefix(b)) => {
                a == b
            }
            (Matcher::Regex(a), Matcher::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

/// One condition of a match block.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    /// What to look at.
    pub subject: Subject,
    /// How to compare it.
    pub matcher: Matcher,
}

impl Condition {
    /// Whether the request described by `headers` and `uri` satisfies this condition. A missing
    /// header, cookie or parameter never matches.
    pub fn is_match(&self, headers: &HeaderMap, uri: &Uri) -> bool {
        match &self.subject {
            Subject::Header(name) => headers
                .get_all(name)
                .iter()
                .any(|value| value.to_str().is_ok_and(|v| self.matcher.is_match(v))),
            Subject::Cookie(name) => {
                cookie_values(headers, name).any(|value| self.matcher.is_match(value))
            }
            Subject::Query(name) => uri.query().is_some_and(|query| {
                query.split('&').any(|pair| {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    percent_decode(key) == *name && self.matcher.is_match(&percent_decode(value))
                })
            }),
        }
    }
}

/// A conjunction of conditions: it matches when every condition matches. An empty block matches
/// nothing (an empty rule sending everything to the canary would be a dangerous typo).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MatchBlock {
    /// The conditions, all of which must hold.
    pub conditions: Vec<Condition>,
}

impl MatchBlock {
    /// Whether the request satisfies every condition of this block.
    pub fn is_match(&self, headers: &HeaderMap, uri: &Uri) -> bool {
        !self.conditions.is_empty() && self.conditions.iter().all(|c| c.is_match(headers, uri))
    }
}

/// Whether ANY block matches: Flagger's semantics for a list of match blocks.
pub(crate) fn any_block_matches(blocks: &[MatchBlock], headers: &HeaderMap, uri: &Uri) -> bool {
    blocks.iter().any(|block| block.is_match(headers, uri))
}

/// The values of cookie `name` across all `Cookie` headers (HTTP/2 may split them).
pub(crate) fn cookie_values<'a>(
    headers: &'a HeaderMap,
    name: &'a str,
) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(move |pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key.trim() == name).then(|| value.trim().trim_matches('"'))
        })
}

/// Decodes `%XX` escapes and `+` (form encoding's space); malformed escapes are kept as is.
fn percent_decode(text: &str) -> String {
    if !text.contains(['%', '+']) {
        return text.to_owned();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl FromStr for Condition {
    type Err = RouteError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: &str| RouteError::Match {
            rule: text.to_owned(),
            reason: reason.to_owned(),
        };
        let text_trimmed = text.trim();
        let (kind, rest) = text_trimmed.split_once(':').ok_or_else(|| {
            fail("expected KIND:NAME OP VALUE, where KIND is header, cookie or query")
        })?;
        let eq = rest
            .find('=')
            .ok_or_else(|| fail("expected an operator: = (exact), ^= (prefix) or ~= (regex)"))?;
        let value = &rest[eq + 1..];
        let (name, op) = match rest[..eq].strip_suffix('^') {
            Some(name) => (name, '^'),
            None => match rest[..eq].strip_suffix('~') {
                Some(name) => (name, '~'),
                None => (&rest[..eq], '='),
            },
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(fail("the name before the operator is empty"));
        }
        let subject = match kind.trim().to_ascii_lowercase().as_str() {
            "header" => Subject::Header(
                HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| fail("not a valid header name"))?,
            ),
            "cookie" => Subject::Cookie(name.to_owned()),
            "query" => Subject::Query(name.to_owned()),
            _ => return Err(fail("KIND must be header, cookie or query")),
        };
        let matcher = match op {
            '^' => Matcher::Prefix(value.to_owned()),
            '~' => Matcher::regex(value).map_err(|err| match err {
                RouteError::Match { reason, .. } => fail(&reason),
                other => other,
            })?,
            _ => Matcher::Exact(value.to_owned()),
        };
        Ok(Condition { subject, matcher })
    }
}

impl FromStr for MatchBlock {
    type Err = RouteError;

    /// Parses `COND [& COND ...]`; all conditions must hold.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim().is_empty() {
            return Err(RouteError::Match {
                rule: text.to_owned(),
                reason: "empty rule".to_owned(),
            });
        }
        let conditions = text
            .split(" & ")
            .map(str::parse)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MatchBlock { conditions })
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.subject {
            Subject::Header(name) => write!(f, "header:{name}")?,
            Subject::Cookie(name) => write!(f, "cookie:{name}")?,
            Subject::Query(name) => write!(f, "query:{name}")?,
        }
        match &self.matcher {
            Matcher::Exact(v) => write!(f, "={v}"),
            Matcher::Prefix(v) => write!(f, "^={v}"),
            Matcher::Regex(r) => {
                let pattern = r.as_str();
                let inner = pattern
                    .strip_prefix("^(?:")
                    .and_then(|p| p.strip_suffix(")$"))
                    .unwrap_or(pattern);
                write!(f, "~={inner}")
            }
        }
    }
}

impl fmt::Display for MatchBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, condition) in self.conditions.iter().enumerate() {
            if i > 0 {
                f.write_str(" & ")?;
            }
            write!(f, "{condition}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn request(headers: &[(&str, &str)], uri: &str) -> (HeaderMap, Uri) {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        (map, uri.parse().unwrap())
    }

    fn block(text: &str) -> MatchBlock {
        text.parse().unwrap()
    }

    #[test]
    fn header_exact_prefix_and_anchored_regex() {
        let (h, u) = request(
            &[("X-Canary", "insider"), ("user-agent", "Mozilla Firefox/1")],
            "/",
        );
        assert!(block("header:x-canary=insider").is_match(&h, &u));
        assert!(!block("header:x-canary=insid").is_match(&h, &u));
        assert!(block("header:x-canary^=insid").is_match(&h, &u));
        assert!(block("header:user-agent~=.*Firefox.*").is_match(&h, &u));
        // Anchored: a partial match is not a match.
        assert!(!block("header:user-agent~=Firefox").is_match(&h, &u));
        assert!(!block("header:x-missing^=").is_match(&h, &u));
    }

    #[test]
    fn cookie_and_flagger_cookie_regex() {
        let (h, u) = request(&[("cookie", "canary=always; b=2")], "/");
        assert!(block("cookie:canary=always").is_match(&h, &u));
        assert!(!block("cookie:canary=never").is_match(&h, &u));
        assert!(block("header:cookie~=^(.*?;)?(canary=always)(;.*)?$").is_match(&h, &u));
    }

    #[test]
    fn query_parameters_are_decoded() {
        let (h, u) = request(&[], "/p?x=1&user=j%C3%B6rg&flag");
        assert!(block("query:user=jörg").is_match(&h, &u));
        assert!(block("query:flag=").is_match(&h, &u));
        assert!(!block("query:x=2").is_match(&h, &u));
        assert_eq!(percent_decode("a%2Fb+c%zz%"), "a/b c%zz%");
    }

    #[test]
    fn block_needs_all_and_list_needs_any() {
        let (h, u) = request(&[("x-a", "1")], "/?b=2");
        let both = block("header:x-a=1 & query:b=2");
        let one_fails = block("header:x-a=1 & query:b=3");
        assert!(both.is_match(&h, &u));
        assert!(!one_fails.is_match(&h, &u));
        assert!(any_block_matches(&[one_fails.clone(), both], &h, &u));
        assert!(!any_block_matches(&[one_fails], &h, &u));
        assert!(!MatchBlock::default().is_match(&h, &u));
    }

    #[test]
    fn parse_errors_name_the_rule() {
        for bad in [
            "",
            "x-canary=1",
            "body:x=1",
            "header:=1",
            "header:x",
            "header:bad name=1",
            "query:q~=(",
        ] {
            let err = bad.parse::<MatchBlock>().unwrap_err().to_string();
            assert!(err.contains("invalid match rule"), "{bad}: {err}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in ["header:x-canary=insider & cookie:beta^=y", "query:q~=a|b"] {
            assert_eq!(block(text).to_string(), text);
            assert_eq!(block(&block(text).to_string()), block(text));
        }
    }
}
