//! Route tables: what a listener does with each request, and the pure decision function.
//!
//! A [`RouteSpec`] is the desired state the engine hands over (primary and canary upstream sets,
//! the canary weight, match rules, session affinity, mirroring). It is validated and compiled
//! into a [`RouteTable`], which also holds the per-version metric handles and round-robin
//! cursors, so the request path does no lookups, no parsing and takes no locks.
//!
//! The decision ([`RouteTable::decide`]) is a pure function of the request's headers and URI and
//! a random draw, so its statistics are tested directly over many draws, without sockets.
//!
//! Precedence, first that applies wins:
//! 1. a match rule matches -> canary (Flagger's A/B routing);
//! 2. the affinity cookie names a version that still receives weighted traffic -> that version;
//! 3. a weighted draw: canary with probability `canary_weight`.
//!
//! Pins are dropped when their version's weight reaches zero, so a rollback (canary weight 0)
//! takes pinned clients back to the primary at once.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::uri::Authority;
use http::{HeaderMap, Uri};

use crate::error::RouteError;
use crate::metrics::{ListenerMetrics, Traffic, VersionMetrics};
use crate::rng::Rng;
use crate::rules::{MatchBlock, any_block_matches, cookie_values};

/// A traffic weight in basis points: 10000 = 100%, 1 = 0.01%.
///
/// weir-core has a `Weight` of its own (the plan's, with serde and percent parsing). The router
/// keeps this one because it depends on no other weir crate (it also runs alone as `weir
/// router`), and a `u16` bounded at 10000 is what the per-request draw compares against; the
/// local target converts one into the other where it builds a route table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Weight(u16);

impl Weight {
    /// No traffic.
    pub const ZERO: Weight = Weight(0);
    /// All traffic.
    pub const FULL: Weight = Weight(10_000);

    /// A weight from basis points (0..=10000).
    pub fn from_basis_points(basis_points: u32) -> Result<Self, RouteError> {
        u16::try_from(basis_points)
            .ok()
            .filter(|bp| *bp <= 10_000)
            .map(Weight)
            .ok_or(RouteError::WeightBasisPoints(basis_points))
    }

    /// The weight in basis points.
    pub fn basis_points(self) -> u16 {
        self.0
    }

    /// The weight as a fraction in 0.0..=1.0.
    pub fn ratio(self) -> f64 {
        f64::from(self.0) / 10_000.0
    }

    /// The complementary weight (100% minus this one).
    pub fn complement(self) -> Weight {
        Weight(10_000 - self.0)
    }
}

impl FromStr for Weight {
    type Err = RouteError;

    /// Parses a percentage such as `10`, `0.5`, `12.34` or `12.34%`. Exact decimal parsing: no
    /// floating point, at most two decimals (the 0.01% resolution).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = || RouteError::Weight {
            value: text.to_owned(),
        };
        let number = text.trim().trim_end_matches('%').trim();
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty()
            || whole.len() > 3
            || fraction.len() > 2
            || !digits(whole)
            || !digits(fraction)
        {
            return Err(fail());
        }
        let whole: u32 = whole.parse().map_err(|_| fail())?;
        let fraction: u32 = format!("{fraction:0<2}").parse().map_err(|_| fail())?;
        Weight::from_basis_points(whole * 100 + fraction).map_err(|_| fail())
    }
}

impl fmt::Display for Weight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, fraction) = (self.0 / 100, self.0 % 100);
        if fraction == 0 {
            write!(f, "{whole}%")
        } else {
            write!(f, "{whole}.{fraction:02}%")
        }
    }
}

/// One upstream address. Only plain HTTP (`http://HOST:PORT` or `HOST:PORT`); the router talks
/// HTTP/1.1 to upstreams over pooled keep-alive connections.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Upstream(Authority);

impl Upstream {
    /// The `host:port` this upstream is reached at.
    pub fn authority(&self) -> &Authority {
        &self.0
    }
}

impl FromStr for Upstream {
    type Err = RouteError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: &str| RouteError::Upstream {
            value: text.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = text.trim();
        let rest = match trimmed.split_once("://") {
            Some(("http", rest)) => rest,
            Some((_, _)) => return Err(fail("only http:// upstreams are supported")),
            None => trimmed,
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains('/') || rest.contains('?') {
            return Err(fail("an upstream is HOST:PORT without a path"));
        }
        let authority: Authority = rest.parse().map_err(|_| fail("expected HOST:PORT"))?;
        if authority.port_u16().is_none() {
            return Err(fail("a port is required, e.g. 127.0.0.1:8080"));
        }
        if rest.contains('@') {
            return Err(fail("credentials in upstream addresses are not supported"));
        }
        Ok(Upstream(authority))
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.0)
    }
}

/// One version of the service: its name and the addresses serving it (round-robin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// The version's name, e.g. `v1` or a revision hash. Used as the affinity cookie value and
    /// as the `version` label of metrics, so it follows the version when roles swap.
    pub version: String,
    /// Where the version is served; at least one.
    pub upstreams: Vec<Upstream>,
}

impl Backend {
    /// A backend named `version` served at `upstreams`.
    pub fn new(version: impl Into<String>, upstreams: Vec<Upstream>) -> Self {
        Self {
            version: version.into(),
            upstreams,
        }
    }
}

/// Session affinity, as Flagger's `sessionAffinity`: once a client has been given a version by
/// the weighted draw, a cookie pins it there while that version still receives weighted traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionAffinity {
    /// The cookie's name; its value is the version's name.
    pub cookie_name: String,
    /// The cookie's `Max-Age`.
    pub max_age: Duration,
}

/// Mirroring: a copy of (a share of) the requests served by the primary is sent to the canary;
/// the copy's response is discarded and its outcome counted under [`Traffic::Mirror`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mirror {
    /// The share of primary-served requests that are mirrored; [`Weight::FULL`] mirrors all.
    pub weight: Weight,
}

/// The desired routing state of one listener.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteSpec {
    /// The stable version.
    pub primary: Backend,
    /// The new version.
    pub canary: Backend,
    /// The share of (unmatched, unpinned) requests sent to the canary.
    pub canary_weight: Weight,
    /// Requests matching ANY of these blocks go to the canary regardless of weight.
    pub matches: Vec<MatchBlock>,
    /// Optional cookie pinning of clients to versions.
    pub session_affinity: Option<SessionAffinity>,
    /// Optional mirroring of primary traffic to the canary.
    pub mirror: Option<Mirror>,
}

impl RouteSpec {
    /// A plain weighted split between `primary` and `canary`.
    pub fn weighted(primary: Backend, canary: Backend, canary_weight: Weight) -> Self {
        Self {
            primary,
            canary,
            canary_weight,
            matches: Vec::new(),
            session_affinity: None,
            mirror: None,
        }
    }

    /// Checks the spec; on error the message names the field and value.
    pub fn validate(&self) -> Result<(), RouteError> {
        for (field, backend) in [("primary", &self.primary), ("canary", &self.canary)] {
            let name_ok = !backend.version.is_empty()
                && backend.version.len() <= 64
                && backend
                    .version
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !name_ok {
                return Err(RouteError::VersionName {
                    field,
                    value: backend.version.clone(),
                });
            }
            if backend.upstreams.is_empty() {
                return Err(RouteError::NoUpstreams { field });
            }
        }
        // One version in both roles is a route to that version alone (before a first canary, or
        // after a promotion); the same name for two different places would merge their metrics
        // and cookies, so it is refused.
        if self.primary.version == self.canary.version && self.primary != self.canary {
            return Err(RouteError::SameVersion(self.primary.version.clone()));
        }
        if let Some(affinity) = &self.session_affinity {
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if affinity.cookie_name.is_empty() || !affinity.cookie_name.bytes().all(token) {
                return Err(RouteError::CookieName(affinity.cookie_name.clone()));
            }
        }
        Ok(())
    }
}

/// The two roles a version can play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The stable version.
    Primary,
    /// The new version.
    Canary,
}

/// Why a request went where it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// A match rule sent it to the canary.
    Match,
    /// The affinity cookie pinned it.
    Affinity,
    /// The weighted draw.
    Weight,
}

/// The routing decision for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Which version serves the request.
    pub role: Role,
    /// Why.
    pub reason: Reason,
    /// Whether a copy goes to the canary as mirror traffic.
    pub mirror: bool,
    /// Whether the response should set the affinity cookie to the serving version.
    pub set_affinity_cookie: bool,
}

/// A backend compiled for the request path.
#[derive(Debug)]
pub(crate) struct LiveBackend {
    upstreams: Vec<Authority>,
    cursor: AtomicUsize,
    pub(crate) metrics: Arc<VersionMetrics>,
    /// Pre-rendered `Set-Cookie` value pinning a client to this version, if affinity is on.
    pub(crate) affinity_cookie: Option<http::HeaderValue>,
}

impl LiveBackend {
    /// The next upstream, round-robin.
    pub(crate) fn next_upstream(&self) -> &Authority {
        let n = self.cursor.fetch_add(1, Ordering::Relaxed);
        &self.upstreams[n % self.upstreams.len()]
    }
}

/// A validated, compiled route table. Immutable once built; replaced as a whole.
#[derive(Debug)]
pub struct RouteTable {
    spec: RouteSpec,
    primary: LiveBackend,
    canary: LiveBackend,
    /// Mirror copies are counted on the canary version's mirror series.
    pub(crate) mirror_metrics: Arc<VersionMetrics>,
}

impl RouteTable {
    /// Validates and compiles `spec`, taking metric handles from `metrics`.
    pub(crate) fn compile(spec: RouteSpec, metrics: &ListenerMetrics) -> Result<Self, RouteError> {
        spec.validate()?;
        let live = |backend: &Backend| LiveBackend {
            upstreams: backend
                .upstreams
                .iter()
                .map(|u| u.authority().clone())
                .collect(),
            cursor: AtomicUsize::new(0),
            metrics: metrics.version(&backend.version, Traffic::Served),
            affinity_cookie: spec.session_affinity.as_ref().and_then(|affinity| {
                // Cookie name and version were validated as tokens, so this is a valid value;
                // `.ok()` only guards against that validation changing.
                http::HeaderValue::from_str(&format!(
                    "{}={}; Max-Age={}; Path=/; HttpOnly",
                    affinity.cookie_name,
                    backend.version,
                    affinity.max_age.as_secs()
                ))
                .ok()
            }),
        };
        Ok(Self {
            primary: live(&spec.primary),
            canary: live(&spec.canary),
            mirror_metrics: metrics.version(&spec.canary.version, Traffic::Mirror),
            spec,
        })
    }

    /// The spec this table was compiled from.
    pub fn spec(&self) -> &RouteSpec {
        &self.spec
    }

    pub(crate) fn backend(&self, role: Role) -> &LiveBackend {
        match role {
            Role::Primary => &self.primary,
            Role::Canary => &self.canary,
        }
    }

    /// Decides where a request goes. Pure apart from the draws taken from `rng`.
    pub fn decide(&self, headers: &HeaderMap, uri: &Uri, rng: &mut Rng) -> Decision {
        let spec = &self.spec;
        let (role, reason) =
            if !spec.matches.is_empty() && any_block_matches(&spec.matches, headers, uri) {
                (Role::Canary, Reason::Match)
            } else if let Some(role) = self.pinned_role(headers) {
                (role, Reason::Affinity)
            } else if rng.basis_point() < spec.canary_weight.basis_points() {
                (Role::Canary, Reason::Weight)
            } else {
                (Role::Primary, Reason::Weight)
            };
        let mirror = role == Role::Primary
            && spec.mirror.is_some_and(|m| {
                m.weight == Weight::FULL || rng.basis_point() < m.weight.basis_points()
            });
        Decision {
            role,
            reason,
            mirror,
            set_affinity_cookie: spec.session_affinity.is_some() && reason == Reason::Weight,
        }
    }

    /// The role the affinity cookie pins this request to, if the pinned version is in this
    /// table and still receives weighted traffic.
    fn pinned_role(&self, headers: &HeaderMap) -> Option<Role> {
        let affinity = self.spec.session_affinity.as_ref()?;
        let canary_weight = self.spec.canary_weight;
        cookie_values(headers, &affinity.cookie_name).find_map(|value| {
            if value == self.spec.canary.version && canary_weight > Weight::ZERO {
                Some(Role::Canary)
            } else if value == self.spec.primary.version && canary_weight < Weight::FULL {
                Some(Role::Primary)
            } else {
                None
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use http::header::COOKIE;

    fn upstream(text: &str) -> Upstream {
        text.parse().unwrap()
    }

    fn spec(canary_bp: u32) -> RouteSpec {
        RouteSpec::weighted(
            Backend::new(
                "v1",
                vec![
                    upstream("127.0.0.1:1001"),
                    upstream("http://127.0.0.1:1002/"),
                ],
            ),
            Backend::new("v2", vec![upstream("localhost:2001")]),
            Weight::from_basis_points(canary_bp).unwrap(),
        )
    }

    fn table(spec: RouteSpec) -> RouteTable {
        RouteTable::compile(spec, &ListenerMetrics::new("test")).unwrap()
    }

    #[test]
    fn weights_parse_exactly() {
        assert_eq!("10".parse::<Weight>().unwrap().basis_points(), 1000);
        assert_eq!("0.01".parse::<Weight>().unwrap().basis_points(), 1);
        assert_eq!("12.5%".parse::<Weight>().unwrap().basis_points(), 1250);
        assert_eq!("100".parse::<Weight>().unwrap(), Weight::FULL);
        for bad in ["", "-1", "100.01", "0.001", "1e2", "ten", "1.2.3", ".5"] {
            assert!(bad.parse::<Weight>().is_err(), "{bad}");
        }
        assert_eq!(
            Weight::from_basis_points(1250).unwrap().to_string(),
            "12.50%"
        );
        assert_eq!(Weight::from_basis_points(1000).unwrap().to_string(), "10%");
        assert!(Weight::from_basis_points(10_001).is_err());
    }

    #[test]
    fn upstreams_parse() {
        assert_eq!(
            upstream("http://10.0.0.1:80").to_string(),
            "http://10.0.0.1:80"
        );
        for bad in ["https://a:1", "a", "http://a:1/path", "", "u@a:1"] {
            assert!(bad.parse::<Upstream>().is_err(), "{bad}");
        }
    }

    #[test]
    fn validation_names_the_field() {
        let mut s = spec(0);
        s.canary.upstreams.clear();
        assert!(s.validate().unwrap_err().to_string().starts_with("canary:"));
        let mut s = spec(0);
        s.canary.version = "v1".into();
        assert!(matches!(s.validate(), Err(RouteError::SameVersion(_))));
        // The same backend in both roles is one version alone: allowed.
        let mut s = spec(0);
        s.canary = s.primary.clone();
        assert!(s.validate().is_ok());
        let mut s = spec(0);
        s.primary.version = "bad name".into();
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("primary.version")
        );
        let mut s = spec(0);
        s.session_affinity = Some(SessionAffinity {
            cookie_name: "a b".into(),
            max_age: Duration::from_secs(1),
        });
        assert!(matches!(s.validate(), Err(RouteError::CookieName(_))));
    }

    /// The split over 100,000 draws stays within +-0.5 percentage points of the weight, for
    /// several weights including the 0.01% resolution's extremes.
    #[test]
    fn weighted_split_over_100k_draws_is_within_half_a_point() {
        let headers = HeaderMap::new();
        let uri = Uri::from_static("/");
        for (seed, bp) in [
            (1, 1000),
            (2, 1),
            (3, 5000),
            (4, 9999),
            (5, 0),
            (6, 10_000),
            (7, 2525),
        ] {
            let table = table(spec(bp));
            let mut rng = Rng::with_seed(seed);
            let draws = 100_000;
            let canary = (0..draws)
                .filter(|_| table.decide(&headers, &uri, &mut rng).role == Role::Canary)
                .count();
            let observed = canary as f64 / draws as f64;
            let expected = f64::from(bp) / 10_000.0;
            assert!(
                (observed - expected).abs() <= 0.005,
                "weight {bp}bp: observed {observed}"
            );
            if bp == 0 {
                assert_eq!(canary, 0);
            }
            if bp == 10_000 {
                assert_eq!(canary, draws);
            }
        }
    }

    #[test]
    fn match_rules_send_to_canary_at_zero_weight() {
        let mut s = spec(0);
        s.matches = vec![
            "header:x-canary=insider".parse().unwrap(),
            "cookie:beta=1 & query:v=2".parse().unwrap(),
        ];
        let t = table(s);
        let mut rng = Rng::with_seed(9);
        let mut headers = HeaderMap::new();
        headers.insert("x-canary", HeaderValue::from_static("insider"));
        let d = t.decide(&headers, &Uri::from_static("/"), &mut rng);
        assert_eq!((d.role, d.reason), (Role::Canary, Reason::Match));
        let mut headers = HeaderMap::new();
        headers.insert(COOKIE, HeaderValue::from_static("beta=1"));
        assert_eq!(
            t.decide(&headers, &Uri::from_static("/?v=2"), &mut rng)
                .role,
            Role::Canary
        );
        assert_eq!(
            t.decide(&headers, &Uri::from_static("/?v=3"), &mut rng)
                .role,
            Role::Primary
        );
    }

    #[test]
    fn affinity_pins_while_the_version_has_weight() {
        let with_affinity = |bp| {
            let mut s = spec(bp);
            s.session_affinity = Some(SessionAffinity {
                cookie_name: "weir".into(),
                max_age: Duration::from_secs(60),
            });
            table(s)
        };
        let mut rng = Rng::with_seed(3);
        let uri = Uri::from_static("/");
        let mut pinned_canary = HeaderMap::new();
        pinned_canary.insert(COOKIE, HeaderValue::from_static("other=x; weir=v2"));
        // At 1% the pin wins every time.
        let t = with_affinity(100);
        for _ in 0..1000 {
            let d = t.decide(&pinned_canary, &uri, &mut rng);
            assert_eq!(
                (d.role, d.reason, d.set_affinity_cookie),
                (Role::Canary, Reason::Affinity, false)
            );
        }
        // At 0% (rollback) the pin is ignored and the client goes back to the primary.
        let t = with_affinity(0);
        let d = t.decide(&pinned_canary, &uri, &mut rng);
        assert_eq!(
            (d.role, d.reason, d.set_affinity_cookie),
            (Role::Primary, Reason::Weight, true)
        );
        // A fresh client gets a cookie naming the version it was given.
        let d = with_affinity(5000).decide(&HeaderMap::new(), &uri, &mut rng);
        assert!(d.set_affinity_cookie);
        let cookie = t.backend(Role::Primary).affinity_cookie.clone().unwrap();
        assert_eq!(cookie, "weir=v1; Max-Age=60; Path=/; HttpOnly");
    }

    #[test]
    fn mirror_share_applies_to_primary_traffic_only() {
        let mut s = spec(2000);
        s.mirror = Some(Mirror {
            weight: Weight::from_basis_points(5000).unwrap(),
        });
        let t = table(s);
        let mut rng = Rng::with_seed(11);
        let (mut primary, mut mirrored) = (0, 0);
        for _ in 0..100_000 {
            let d = t.decide(&HeaderMap::new(), &Uri::from_static("/"), &mut rng);
            assert!(!(d.mirror && d.role == Role::Canary));
            primary += usize::from(d.role == Role::Primary);
            mirrored += usize::from(d.mirror);
        }
        let share = mirrored as f64 / primary as f64;
        assert!((share - 0.5).abs() < 0.01, "{share}");
    }

    #[test]
    fn round_robin_within_a_set() {
        let t = table(spec(0));
        let seen: Vec<String> = (0..4)
            .map(|_| t.backend(Role::Primary).next_upstream().to_string())
            .collect();
        assert_eq!(
            seen,
            [
                "127.0.0.1:1001",
                "127.0.0.1:1002",
                "127.0.0.1:1001",
                "127.0.0.1:1002"
            ]
        );
    }
}
