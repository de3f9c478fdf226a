//! Traffic providers, as pure functions: the objects that make a mesh or a gateway split traffic
//! the way the core's [`Route`] says (`spec.target.provider`, Flagger's names). The operator
//! applies them with server-side apply under the field manager `weir`.
//!
//! | provider | objects | weights |
//! |---|---|---|
//! | `istio` | VirtualService `NAME`, DestinationRules `NAME-primary`, `NAME-canary` | integers (Istio's schema): rounded, and the rounding is reported |
//! | `gatewayapi:v1` (`:v1beta1`) | HTTPRoute `NAME` | relative integers: basis points, so 0.01% is kept |
//! | `smi` (`:v1alpha2`, `:v1alpha3`) | TrafficSplit `NAME` | relative integers: basis points |
//! | `kubernetes` | none: blue/green only, the apex Service always selects the primary | a canary weight between 0 and 100% is refused |
//!
//! Session affinity (`spec.sessionAffinity`, Flagger's `analysis.sessionAffinity`) is written for
//! `istio` and the Gateway API, the way Flagger's docs describe it: while the canary has traffic,
//! its responses set the cookie `COOKIE=VALUE; Max-Age=MAX_AGE` and a first route sends requests
//! carrying that cookie to the canary, so a client once given the canary keeps it. With
//! `primaryCookieName`, the primary's responses set a cookie of their own during the split, and a
//! second route keeps those clients on the primary until the next step (its value changes with the
//! weight, so every step rebalances). Once the canary has no traffic (promotion, rollback) the
//! sticky routes are gone and the primary's responses expire the canary cookie (`Max-Age=-1`).
//! VALUE is the same for every route of a run and differs between runs and rollouts (see
//! [`session_cookies`]): a client pinned in one run is not pinned to the next run's canary. SMI and
//! `kubernetes` have no header manipulation: they ignore it.
//!
//! The router objects are written as JSON here rather than with a third-party crate's types, so
//! that no crate can hold back a kube upgrade.

use serde_json::{Map, Value, json};
use weir_core::machine::Route;
use weir_core::model::{KubernetesService, MatchRule, SessionAffinity, StringMatch};

/// The traffic providers weir drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Istio VirtualService and DestinationRules.
    Istio,
    /// Gateway API HTTPRoute, at this API version.
    GatewayApi(&'static str),
    /// SMI TrafficSplit, at this API version.
    Smi(&'static str),
    /// No mesh: blue/green by the apex Service.
    Kubernetes,
}

/// The provider names weir accepts, for error messages.
pub const PROVIDERS: &str =
    "istio, gatewayapi:v1, gatewayapi:v1beta1, smi, smi:v1alpha2, smi:v1alpha3, kubernetes";

impl Provider {
    /// The provider named `spec.target.provider` (Istio when unset, as in Flagger).
    pub fn parse(name: Option<&str>) -> Result<Provider, String> {
        Ok(match name.unwrap_or("istio") {
            "istio" => Provider::Istio,
            "gatewayapi" | "gatewayapi:v1" => Provider::GatewayApi("gateway.networking.k8s.io/v1"),
            "gatewayapi:v1beta1" => Provider::GatewayApi("gateway.networking.k8s.io/v1beta1"),
            "smi" | "smi:v1alpha2" => Provider::Smi("split.smi-spec.io/v1alpha2"),
            "smi:v1alpha3" => Provider::Smi("split.smi-spec.io/v1alpha3"),
            "kubernetes" => Provider::Kubernetes,
            other => {
                return Err(format!(
                    "spec.target.provider: {other:?} is not a provider weir drives yet; one of {PROVIDERS}"
                ));
            }
        })
    }
}

/// The Services traffic goes through: the apex and the two versions behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// The namespace of the rollout and its objects.
    pub namespace: String,
    /// The apex Service (`NAME`), also the name of the route objects.
    pub apex: String,
    /// The primary's Service.
    pub primary: String,
    /// The canary's Service.
    pub canary: String,
    /// The port the Services expose.
    pub port: i32,
}

/// The objects of a route, and what was adjusted to fit the provider.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteObjects {
    /// Full objects (apiVersion, kind, metadata, spec) to apply.
    pub objects: Vec<Value>,
    /// Set when the provider could not take the weights as they are (e.g. Istio's integers).
    pub adjusted: Option<String>,
}

/// The objects that route traffic as `route` says, in the rollout's `run` (the status's `run`:
/// the session-affinity cookies take a value of their own per run).
pub fn objects(
    provider: Provider,
    names: &Names,
    service: &KubernetesService,
    route: &Route,
    run: u64,
    owner: &Value,
) -> Result<RouteObjects, String> {
    let cookies = route
        .session_affinity
        .as_ref()
        .map(|affinity| session_cookies(affinity, route, run, owner));
    match provider {
        Provider::Istio => Ok(istio(names, service, route, cookies.as_ref(), owner)),
        Provider::GatewayApi(api_version) => Ok(RouteObjects {
            objects: vec![http_route(
                api_version,
                names,
                service,
                route,
                cookies.as_ref(),
                owner,
            )],
            adjusted: None,
        }),
        Provider::Smi(api_version) => Ok(RouteObjects {
            objects: vec![traffic_split(api_version, names, route, owner)],
            adjusted: None,
        }),
        Provider::Kubernetes => {
            let canary = route.canary_weight.basis_points();
            if canary > 0 && canary < 10_000 {
                return Err(format!(
                    "provider kubernetes moves traffic only all at once (blue/green): a canary weight of {} needs a mesh or a gateway ({PROVIDERS})",
                    route.canary_weight
                ));
            }
            Ok(RouteObjects {
                objects: Vec::new(),
                adjusted: None,
            })
        }
    }
}

/// Trims a route's objects for the modes whose canary has no Service between runs (`managed`)
/// or may be the primary's own Service (`revisions` after a promotion): a destination of the
/// canary with weight 0 is dropped (Istio `route`, Gateway API `backendRefs`, SMI `backends`),
/// and so are DestinationRules when there is no traffic policy for them to carry.
pub fn trim(objects: &mut Vec<Value>, names: &Names, service: &KubernetesService) {
    if service.traffic_policy.is_none() {
        objects.retain(|object| object["kind"] != "DestinationRule");
    }
    let idle_canary = |entry: &Value| {
        let host = entry["destination"]["host"]
            .as_str()
            .or_else(|| entry["name"].as_str())
            .or_else(|| entry["service"].as_str());
        host == Some(names.canary.as_str()) && entry["weight"].as_i64() == Some(0)
    };
    let keep_busy = |list: Option<&mut Value>| {
        if let Some(entries) = list.and_then(Value::as_array_mut) {
            entries.retain(|entry| !idle_canary(entry));
        }
    };
    for object in objects.iter_mut() {
        let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
            continue;
        };
        keep_busy(spec.get_mut("backends"));
        for rules in ["http", "rules"] {
            for rule in spec
                .get_mut(rules)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                keep_busy(rule.get_mut("route"));
                keep_busy(rule.get_mut("backendRefs"));
            }
        }
    }
}

fn metadata(name: &str, names: &Names, owner: &Value) -> Value {
    json!({"name": name, "namespace": names.namespace, "ownerReferences": [owner]})
}

// === session affinity ===

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
    fn set(&self, max_age: u64) -> String {
        format!("{}={}; Max-Age={max_age}", self.name, self.value)
    }

    /// The `Set-Cookie` header value that makes a client drop this cookie.
    fn expire(&self) -> String {
        format!("{}={}; Max-Age=-1", self.name, self.value)
    }

    /// A regular expression on the whole `Cookie` header: this cookie, with this value, is there.
    fn request_regex(&self) -> String {
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
    fn routes(&self) -> Vec<(&StickyCookie, bool)> {
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
    fn on_canary(&self) -> Option<String> {
        self.sticky.then(|| self.canary.set(self.max_age))
    }

    /// The `Set-Cookie` the primary's responses get.
    fn on_primary(&self) -> Option<String> {
        if self.expire {
            return Some(self.canary.expire());
        }
        self.primary
            .as_ref()
            .filter(|_| self.split)
            .map(|primary| primary.set(self.max_age))
    }
}

// === istio ===

fn istio(
    names: &Names,
    service: &KubernetesService,
    route: &Route,
    cookies: Option<&SessionCookies>,
    owner: &Value,
) -> RouteObjects {
    // Istio's weights are integers that sum to 100.
    let canary_bp = route.canary_weight.basis_points();
    let canary = i64::from((canary_bp + 50) / 100);
    let primary = 100 - canary;
    let adjusted = (!canary_bp.is_multiple_of(100)).then(|| {
        format!(
            "Istio takes whole percentages: canary weight {} applied as {canary}%",
            route.canary_weight
        )
    });
    let mut hosts = vec![Value::String(names.apex.clone())];
    hosts.extend(service.hosts.iter().flat_map(array_items));
    let decorate = |mut http: Map<String, Value>| {
        for (field, value) in [
            ("retries", &service.retries),
            ("timeout", &service.timeout.clone().map(Value::String)),
            ("headers", &service.headers),
            ("corsPolicy", &service.cors_policy),
            ("rewrite", &service.rewrite),
        ] {
            if let Some(value) = value {
                http.insert(field.into(), value.clone());
            }
        }
        Value::Object(http)
    };
    let destination = |host: &str, weight: i64| json!({"destination": {"host": host, "port": {"number": names.port}}, "weight": weight});
    // A destination whose responses set a cookie (added: the application's own stay).
    let setting_cookie = |host: &str, weight: i64, cookie: Option<String>| {
        let mut destination = destination(host, weight);
        if let Some(cookie) = cookie {
            destination["headers"] = json!({"response": {"add": {"Set-Cookie": cookie}}});
        }
        destination
    };
    let mut http = Vec::new();
    for (cookie, to_canary) in cookies.map(SessionCookies::routes).unwrap_or_default() {
        let mut sticky = Map::new();
        sticky.insert(
            "match".into(),
            json!([{"headers": {"cookie": {"regex": cookie.request_regex()}}}]),
        );
        let host = if to_canary {
            &names.canary
        } else {
            &names.primary
        };
        sticky.insert("route".into(), json!([destination(host, 100)]));
        http.push(decorate(sticky));
    }
    if !route.match_rules.is_empty() {
        let mut ab = Map::new();
        ab.insert(
            "match".into(),
            Value::Array(route.match_rules.iter().map(istio_match).collect()),
        );
        ab.insert("route".into(), json!([destination(&names.canary, 100)]));
        http.push(decorate(ab));
    }
    let mut default = Map::new();
    default.insert(
        "route".into(),
        json!([
            setting_cookie(
                &names.primary,
                primary,
                cookies.and_then(SessionCookies::on_primary)
            ),
            setting_cookie(
                &names.canary,
                canary,
                cookies.and_then(SessionCookies::on_canary)
            )
        ]),
    );
    if let Some(mirror) = route.mirror_weight {
        default.insert(
            "mirror".into(),
            json!({"host": names.canary, "port": {"number": names.port}}),
        );
        default.insert(
            "mirrorPercentage".into(),
            json!({"value": mirror.percent()}),
        );
    }
    http.push(decorate(default));
    let mut spec = Map::new();
    spec.insert("hosts".into(), Value::Array(hosts));
    if let Some(gateways) = &service.gateways {
        spec.insert("gateways".into(), gateways.clone());
    }
    spec.insert("http".into(), Value::Array(http));
    let virtual_service = json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": metadata(&names.apex, names, owner),
        "spec": spec,
    });
    let mut objects = vec![virtual_service];
    for host in [&names.primary, &names.canary] {
        let mut spec = Map::new();
        spec.insert("host".into(), Value::String(host.clone()));
        if let Some(policy) = &service.traffic_policy {
            spec.insert("trafficPolicy".into(), policy.clone());
        }
        objects.push(json!({
            "apiVersion": "networking.istio.io/v1",
            "kind": "DestinationRule",
            "metadata": metadata(host, names, owner),
            "spec": spec,
        }));
    }
    RouteObjects { objects, adjusted }
}

/// An Istio HTTPMatchRequest: headers, cookies (as a regex on the Cookie header), query
/// parameters, uri and method.
fn istio_match(rule: &MatchRule) -> Value {
    let mut request = Map::new();
    let mut headers: Map<String, Value> = rule
        .headers
        .iter()
        .map(|(name, condition)| (name.clone(), istio_string(condition)))
        .collect();
    for (name, condition) in &rule.cookies {
        headers.insert(
            "cookie".into(),
            json!({"regex": format!("^(.*?;\\s*)?({}={})(;.*)?$", regex_escape(name), cookie_value_regex(condition))}),
        );
    }
    if !headers.is_empty() {
        request.insert("headers".into(), Value::Object(headers));
    }
    if !rule.query_params.is_empty() {
        request.insert(
            "queryParams".into(),
            Value::Object(
                rule.query_params
                    .iter()
                    .map(|(name, condition)| (name.clone(), istio_string(condition)))
                    .collect(),
            ),
        );
    }
    if let Some(uri) = &rule.uri {
        request.insert("uri".into(), istio_string(uri));
    }
    if let Some(method) = &rule.method {
        request.insert("method".into(), istio_string(method));
    }
    Value::Object(request)
}

/// Istio's StringMatch has exact, prefix and regex: a suffix becomes a regex.
fn istio_string(condition: &StringMatch) -> Value {
    if let Some(exact) = &condition.exact {
        json!({"exact": exact})
    } else if let Some(prefix) = &condition.prefix {
        json!({"prefix": prefix})
    } else if let Some(suffix) = &condition.suffix {
        json!({"regex": format!(".*{}$", regex_escape(suffix))})
    } else {
        json!({"regex": condition.regex.clone().unwrap_or_default()})
    }
}

fn cookie_value_regex(condition: &StringMatch) -> String {
    if let Some(exact) = &condition.exact {
        regex_escape(exact)
    } else if let Some(prefix) = &condition.prefix {
        format!("{}[^;]*", regex_escape(prefix))
    } else if let Some(suffix) = &condition.suffix {
        format!("[^;]*{}", regex_escape(suffix))
    } else {
        condition.regex.clone().unwrap_or_default()
    }
}

fn regex_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        if "\\.+*?()|[]{}^$".contains(character) {
            escaped.push('\\');
        }
        escaped.push(character);
    }
    escaped
}

fn array_items(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

// === Gateway API ===

fn http_route(
    api_version: &str,
    names: &Names,
    service: &KubernetesService,
    route: &Route,
    cookies: Option<&SessionCookies>,
    owner: &Value,
) -> Value {
    // Gateway API weights are relative: basis points keep weir's 0.01%.
    let canary = route.canary_weight.basis_points();
    let primary = 10_000 - canary;
    let backend =
        |name: &str, weight: u32| json!({"name": name, "port": names.port, "weight": weight});
    // A backend whose responses set a cookie (added: the application's own stay).
    let setting_cookie = |name: &str, weight: u32, cookie: Option<String>| {
        let mut backend = backend(name, weight);
        if let Some(cookie) = cookie {
            backend["filters"] = json!([{"type": "ResponseHeaderModifier",
                "responseHeaderModifier": {"add": [{"name": "Set-Cookie", "value": cookie}]}}]);
        }
        backend
    };
    let mut rules = Vec::new();
    for (cookie, to_canary) in cookies.map(SessionCookies::routes).unwrap_or_default() {
        let name = if to_canary {
            &names.canary
        } else {
            &names.primary
        };
        rules.push(json!({
            "matches": [{"headers": [{"type": "RegularExpression", "name": "cookie", "value": cookie.request_regex()}]}],
            "backendRefs": [backend(name, 1)],
        }));
    }
    if !route.match_rules.is_empty() {
        rules.push(json!({
            "matches": route.match_rules.iter().map(gateway_match).collect::<Vec<_>>(),
            "backendRefs": [backend(&names.canary, 1)],
        }));
    }
    let mut default = Map::new();
    default.insert(
        "backendRefs".into(),
        json!([
            setting_cookie(
                &names.primary,
                primary,
                cookies.and_then(SessionCookies::on_primary)
            ),
            setting_cookie(
                &names.canary,
                canary,
                cookies.and_then(SessionCookies::on_canary)
            )
        ]),
    );
    if let Some(mirror) = route.mirror_weight {
        default.insert(
            "filters".into(),
            json!([{"type": "RequestMirror", "requestMirror": {
                "backendRef": {"name": names.canary, "port": names.port},
                "fraction": {"numerator": mirror.basis_points(), "denominator": 10_000}
            }}]),
        );
    }
    rules.push(Value::Object(default));
    let mut spec = Map::new();
    if let Some(parents) = &service.gateway_refs {
        spec.insert("parentRefs".into(), parents.clone());
    }
    if let Some(hosts) = &service.hosts {
        spec.insert("hostnames".into(), hosts.clone());
    }
    spec.insert("rules".into(), Value::Array(rules));
    json!({
        "apiVersion": api_version,
        "kind": "HTTPRoute",
        "metadata": metadata(&names.apex, names, owner),
        "spec": spec,
    })
}

/// A Gateway API HTTPRouteMatch: headers and query parameters (exact or regular expression;
/// prefixes and suffixes as expressions), the path, the method.
fn gateway_match(rule: &MatchRule) -> Value {
    let condition = |name: &str, value: &StringMatch| match &value.exact {
        Some(exact) => json!({"type": "Exact", "name": name, "value": exact}),
        None => json!({"type": "RegularExpression", "name": name, "value": as_regex(value)}),
    };
    let mut matched = Map::new();
    let mut headers: Vec<Value> = rule
        .headers
        .iter()
        .map(|(name, value)| condition(name, value))
        .collect();
    for (name, value) in &rule.cookies {
        headers.push(json!({"type": "RegularExpression", "name": "cookie",
            "value": format!("^(.*?;\\s*)?({}={})(;.*)?$", regex_escape(name), cookie_value_regex(value))}));
    }
    if !headers.is_empty() {
        matched.insert("headers".into(), Value::Array(headers));
    }
    if !rule.query_params.is_empty() {
        matched.insert(
            "queryParams".into(),
            Value::Array(
                rule.query_params
                    .iter()
                    .map(|(name, value)| condition(name, value))
                    .collect(),
            ),
        );
    }
    if let Some(uri) = &rule.uri {
        matched.insert(
            "path".into(),
            match (&uri.exact, &uri.prefix) {
                (Some(exact), _) => json!({"type": "Exact", "value": exact}),
                (None, Some(prefix)) => json!({"type": "PathPrefix", "value": prefix}),
                _ => json!({"type": "RegularExpression", "value": as_regex(uri)}),
            },
        );
    }
    if let Some(method) = rule.method.as_ref().and_then(|method| method.exact.clone()) {
        matched.insert("method".into(), Value::String(method));
    }
    Value::Object(matched)
}

fn as_regex(condition: &StringMatch) -> String {
    if let Some(exact) = &condition.exact {
        format!("^{}$", regex_escape(exact))
    } else if let Some(prefix) = &condition.prefix {
        format!("^{}", regex_escape(prefix))
    } else if let Some(suffix) = &condition.suffix {
        format!("{}$", regex_escape(suffix))
    } else {
        condition.regex.clone().unwrap_or_default()
    }
}

// === SMI ===

fn traffic_split(api_version: &str, names: &Names, route: &Route, owner: &Value) -> Value {
    let canary = route.canary_weight.basis_points();
    json!({
        "apiVersion": api_version,
        "kind": "TrafficSplit",
        "metadata": metadata(&names.apex, names, owner),
        "spec": {
            "service": names.apex,
            "backends": [
                {"service": names.primary, "weight": 10_000 - canary},
                {"service": names.canary, "weight": canary},
            ],
        },
    })
}

#[cfg(test)]
mod tests;
