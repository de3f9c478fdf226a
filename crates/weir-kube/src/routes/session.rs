//! Session affinity (`spec.sessionAffinity`, Flagger's `analysis.sessionAffinity`), written for
//! `istio` and the Gateway API the way Flagger's docs describe it: while the canary has traffic,
//! its responses set the cookie `COOKIE=VALUE; Max-Age=MAX_AGE` and a first route sends requests
//! carrying that cookie to the canary, so a client once given the canary keeps it. With
//! `primaryCookieName`, the primary's responses set a cookie of their own during the split, and a
//! second route keeps those clients on the primary until the next step (its value changes with the
//! weight, so every step rebalances). Once the canary has no traffic (promotion, rollback) the
//! sticky routes are gone and the primary's responses expire the canary cookie (`Max-Age=-1`).
//! VALUE is the same for every route of a run and differs between runs and rollouts (see
//! [`session_cookies`]): a client pinned in one run is not pinned to the next run's canary. The
//! other providers cannot set a response header and route on it: their validation refuses it.

use serde_json::{Value, json};
use weir_core::machine::Route;
use weir_core::model::SessionAffinity;

use super::regex_escape;

/// Flagger's default lifetime of the session-affinity cookies: a day.
pub const DEFAULT_COOKIE_MAX_AGE: u64 = 86_400;

/// A cookie a route sets on responses and matches on requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickyCookie {
    /// The cookie's name.
    pub name: String,
    /// Its value: the same for every route of a run (a step, for the primary's).
    pub value: String,
}

impl StickyCookie {
    /// The `Set-Cookie` header value that gives a client this cookie for `max_age` seconds.
    pub(super) fn set(&self, max_age: u64) -> String {
        format!("{}={}; Max-Age={max_age}", self.name, self.value)
    }

    /// The `Set-Cookie` header value that makes a client drop this cookie.
    pub(super) fn expire(&self) -> String {
        format!("{}={}; Max-Age=-1", self.name, self.value)
    }

    /// A regular expression on the whole `Cookie` header: this cookie, with this value, is there.
    pub(super) fn request_regex(&self) -> String {
        format!(
            "^(.*?;\\s*)?({}={})(;.*)?$",
            regex_escape(&self.name),
            regex_escape(&self.value)
        )
    }
}

/// What session affinity writes into a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCookies {
    /// Set on the canary's responses while it has traffic; sends its holders to the canary.
    /// Expired on the primary's responses once the canary has none.
    pub canary: StickyCookie,
    /// With `primaryCookieName`: set on the primary's responses while traffic is split; keeps its
    /// holders on the primary until the next step.
    pub primary: Option<StickyCookie>,
    /// The cookies' lifetime in seconds.
    pub max_age: u64,
    /// The canary has traffic: set the cookies and route on them.
    pub sticky: bool,
    /// Traffic is split (the canary has some but not all): the primary's cookie too.
    pub split: bool,
    /// A run has happened, so clients may hold a canary cookie: expire it while the canary has
    /// no traffic.
    pub expire: bool,
}

/// The session-affinity cookies of `route` in the rollout's `run`. Their values are digests of the
/// rollout (its owner reference's uid and name) and the run (the primary's, also the canary
/// weight): the same on every apply of the same step, whichever operator replica computes them,
/// and new for every run, so a cookie from an earlier run pins nobody to a later canary.
pub fn session_cookies(
    affinity: &SessionAffinity,
    route: &Route,
    run: u64,
    owner: &Value,
) -> SessionCookies {
    let rollout = json!({"uid": owner["uid"], "name": owner["name"], "run": run});
    let canary_bp = route.canary_weight.basis_points();
    SessionCookies {
        canary: StickyCookie {
            name: affinity.cookie_name.clone(),
            value: weir_core::revision::of_definition(&rollout),
        },
        primary: affinity
            .primary_cookie_name
            .as_ref()
            .map(|name| StickyCookie {
                name: name.clone(),
                value: weir_core::revision::of_definition(
                    &json!({"rollout": rollout, "canaryWeight": canary_bp}),
                ),
            }),
        max_age: affinity.max_age.unwrap_or(DEFAULT_COOKIE_MAX_AGE),
        sticky: canary_bp > 0,
        split: canary_bp > 0 && canary_bp < 10_000,
        expire: canary_bp == 0 && run > 0,
    }
}

impl SessionCookies {
    /// The cookie routes, first in the route table: (cookie, to the canary?).
    pub(super) fn routes(&self) -> Vec<(&StickyCookie, bool)> {
        let mut routes = Vec::new();
        if self.sticky {
            routes.push((&self.canary, true));
        }
        if let (true, Some(primary)) = (self.split, &self.primary) {
            routes.push((primary, false));
        }
        routes
    }

    /// The `Set-Cookie` the canary's responses get.
    pub(super) fn on_canary(&self) -> Option<String> {
        self.sticky.then(|| self.canary.set(self.max_age))
    }

    /// The `Set-Cookie` the primary's responses get.
    pub(super) fn on_primary(&self) -> Option<String> {
        if self.expire {
            return Some(self.canary.expire());
        }
        self.primary
            .as_ref()
            .filter(|_| self.split)
            .map(|primary| primary.set(self.max_age))
    }
}
