//! A traffic audit over the in-memory API server: every state the server went through (after
//! every write, in resourceVersion order, from its change feed, never by polling snapshots) is
//! checked for a Service that carries traffic while no Deployment or DaemonSet behind it has an
//! available pod - the moments a real cluster would answer 503.
//!
//! A Service **carries traffic** when
//! - clients call it directly: it is one of the apex Services the audit is told about
//!   ([`TrafficAudit::start`]), or the root/host of a route object (a VirtualService's
//!   `spec.hosts`, a TrafficSplit's `spec.service`); a root that does not exist as a Service
//!   carries nothing (no name to call);
//! - a route object names it as a destination with a weight above 0 (one function per route
//!   kind, listed in [`ROUTE_KINDS`]):
//!   - Istio `VirtualService` (`networking.istio.io`): `spec.http[]`, `spec.tcp[]`,
//!     `spec.tls[]` `.route[].destination.host` with `weight` (a rule's only destination gets
//!     all its traffic, as Istio does, whatever its weight; with several, an absent weight is
//!     0), and `spec.http[].mirror.host` when `mirrorPercentage.value` is above 0 or absent
//!     (`mirrors[]` likewise with `percentage`); a host is `name`, `name.namespace`,
//!     `name.namespace.svc` or `name.namespace.svc.cluster.local` (other namespaces and
//!     outside hosts are not audited); subsets are not looked at;
//!   - Gateway API `HTTPRoute` (`gateway.networking.k8s.io`): `spec.rules[].backendRefs[]` of
//!     kind Service (the default) with `weight` (default 1);
//!   - SMI `TrafficSplit` (`split.smi-spec.io`): `spec.backends[].service` with `weight` (a
//!     number or a quantity such as `500m`), and `spec.service` as its root.
//!
//! A traffic-carrying Service's **backends** are the Deployments and DaemonSets of the namespace
//! whose `spec.template.metadata.labels` match its `spec.selector`. A moment is a **violation**
//! for it when the sum of their available pods (a Deployment's `status.availableReplicas`, a
//! DaemonSet's `status.numberAvailable`) is 0 - which includes a selector that matches no
//! workload, and a destination with a weight that names no Service at all. A Service without a
//! selector (ExternalName, endpoints managed by hand) is not judged.
//!
//! The audit reads the Services, Deployments, DaemonSets and route objects of one namespace.
//! Each write to one of them is one moment (writes to anything else cannot change the verdict);
//! the state when the audit starts is the first.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Mutex;

use serde_json::Value;

use crate::kube_server::{Change, ChangeFeed, ChangeKind, KubeServer};

/// One Service sending traffic to nothing at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The resourceVersion of the state (the write after which it was so).
    pub resource_version: u64,
    /// Which state it was: 1 for the one the audit started in, then one more per write.
    pub moment: u64,
    /// The Service.
    pub service: String,
    /// Why it carries traffic: `apex Service`, `host of VirtualService podinfo`,
    /// `destination of VirtualService podinfo (http[0], weight 10)`, ...
    pub why: Vec<String>,
    /// The Deployments and DaemonSets its selector matches, with their available pods (all 0).
    pub backends: Vec<(String, i64)>,
    /// The Service does not exist (a route sends traffic to a name nothing answers).
    pub missing: bool,
}

impl Violation {
    /// The same problem, at another moment maybe.
    fn same_as(&self, other: &Violation) -> bool {
        self.service == other.service
            && self.why == other.why
            && self.backends == other.backends
            && self.missing == other.missing
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "resourceVersion {}: Service {} carries traffic ({})",
            self.resource_version,
            self.service,
            self.why.join("; ")
        )?;
        if self.missing {
            return write!(f, " but does not exist");
        }
        if self.backends.is_empty() {
            return write!(f, " but its selector matches no Deployment or DaemonSet");
        }
        let backends: Vec<String> = self
            .backends
            .iter()
            .map(|(name, available)| format!("{name} ({available} available)"))
            .collect();
        write!(
            f,
            " but no Deployment or DaemonSet behind it has an available pod: {}",
            backends.join(", ")
        )
    }
}

/// Why a route object makes a Service carry traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routed {
    /// The Service, by name in the audited namespace.
    pub service: String,
    /// Readable: `destination of VirtualService podinfo (http[0], weight 10)`.
    pub why: String,
    /// A destination with a weight (a missing Service is a violation), rather than a root
    /// that clients call by name (a missing one carries nothing).
    pub destination: bool,
}

/// A kind of route object the audit reads.
pub struct RouteKind {
    /// The API group.
    pub group: &'static str,
    /// The resource (plural).
    pub resource: &'static str,
    /// The kind, for messages.
    pub kind: &'static str,
    /// The Services one object of the kind makes carry traffic (only those: weight above 0,
    /// or a root), given the audited namespace.
    pub read: fn(&Value, &str) -> Vec<Routed>,
}

/// The route kinds the audit knows. To audit another, add a function reading one object and a
/// line here.
pub const ROUTE_KINDS: &[RouteKind] = &[
    RouteKind {
        group: "networking.istio.io",
        resource: "virtualservices",
        kind: "VirtualService",
        read: virtual_service,
    },
    RouteKind {
        group: "gateway.networking.k8s.io",
        resource: "httproutes",
        kind: "HTTPRoute",
        read: http_route,
    },
    RouteKind {
        group: "split.smi-spec.io",
        resource: "trafficsplits",
        kind: "TrafficSplit",
        read: traffic_split,
    },
];

fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn array<'a>(value: &'a Value, pointer: &str) -> &'a [Value] {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The Service an Istio host names in `namespace`: `name`, `name.ns`, `name.ns.svc`,
/// `name.ns.svc.cluster.local`; `None` for another namespace or a host outside.
pub fn service_of_host(host: &str, namespace: &str) -> Option<String> {
    let parts: Vec<&str> = host.split('.').collect();
    let local = match parts.as_slice() {
        [name] => Some(*name),
        [name, ns] | [name, ns, "svc"] | [name, ns, "svc", "cluster", "local"] => {
            (*ns == namespace).then_some(*name)
        }
        _ => None,
    };
    local
        .filter(|name| !name.is_empty() && !name.contains('*'))
        .map(str::to_owned)
}

/// A percentage such as Istio's `{value: 12.5}` (absent: 100).
fn percentage(value: Option<&Value>) -> f64 {
    match value {
        None | Some(Value::Null) => 100.0,
        Some(value) => value
            .get("value")
            .and_then(Value::as_f64)
            .or_else(|| value.as_f64())
            .unwrap_or(100.0),
    }
}

/// Istio `VirtualService`: hosts as roots, weighted destinations and mirrors.
pub fn virtual_service(object: &Value, namespace: &str) -> Vec<Routed> {
    let name = name_of(object);
    let mut routed = Vec::new();
    for host in array(object, "/spec/hosts")
        .iter()
        .filter_map(Value::as_str)
    {
        if let Some(service) = service_of_host(host, namespace) {
            routed.push(Routed {
                service,
                why: format!("host of VirtualService {name}"),
                destination: false,
            });
        }
    }
    for section in ["http", "tcp", "tls"] {
        for (index, rule) in array(object, &format!("/spec/{section}"))
            .iter()
            .enumerate()
        {
            let routes = array(rule, "/route");
            for route in routes {
                // A rule's only destination gets all of its traffic, whatever its weight.
                let weight = if routes.len() == 1 {
                    100
                } else {
                    route.get("weight").and_then(Value::as_i64).unwrap_or(0)
                };
                let Some(host) = route.pointer("/destination/host").and_then(Value::as_str) else {
                    continue;
                };
                if let Some(service) = service_of_host(host, namespace)
                    && weight > 0
                {
                    routed.push(Routed {
                        service,
                        why: format!(
                            "destination of VirtualService {name} ({section}[{index}], weight {weight})"
                        ),
                        destination: true,
                    });
                }
            }
            let mut mirrors: Vec<(&Value, f64)> = Vec::new();
            if let Some(mirror) = rule.get("mirror") {
                let share = match rule.get("mirrorPercent").and_then(Value::as_f64) {
                    Some(percent) => percent,
                    None => percentage(rule.get("mirrorPercentage")),
                };
                mirrors.push((mirror, share));
            }
            for mirror in array(rule, "/mirrors") {
                if let Some(destination) = mirror.get("destination") {
                    mirrors.push((destination, percentage(mirror.get("percentage"))));
                }
            }
            for (mirror, share) in mirrors {
                let Some(host) = mirror.get("host").and_then(Value::as_str) else {
                    continue;
                };
                if let Some(service) = service_of_host(host, namespace)
                    && share > 0.0
                {
                    routed.push(Routed {
                        service,
                        why: format!(
                            "mirror of VirtualService {name} ({section}[{index}], {share}%)"
                        ),
                        destination: true,
                    });
                }
            }
        }
    }
    routed
}

/// Gateway API `HTTPRoute`: backendRefs of kind Service with a weight (default 1).
pub fn http_route(object: &Value, namespace: &str) -> Vec<Routed> {
    let name = name_of(object);
    let mut routed = Vec::new();
    for (index, rule) in array(object, "/spec/rules").iter().enumerate() {
        for backend in array(rule, "/backendRefs") {
            let kind = backend
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("Service");
            let group = backend.get("group").and_then(Value::as_str).unwrap_or("");
            let in_namespace = backend
                .get("namespace")
                .and_then(Value::as_str)
                .is_none_or(|ns| ns == namespace);
            let weight = backend.get("weight").and_then(Value::as_i64).unwrap_or(1);
            let Some(service) = backend.get("name").and_then(Value::as_str) else {
                continue;
            };
            if kind == "Service" && group.is_empty() && in_namespace && weight > 0 {
                routed.push(Routed {
                    service: service.to_owned(),
                    why: format!(
                        "backendRef of HTTPRoute {name} (rules[{index}], weight {weight})"
                    ),
                    destination: true,
                });
            }
        }
    }
    routed
}

/// A TrafficSplit weight: a number, or a quantity (`500m`, `1`); whether it is above 0.
fn positive_quantity(weight: Option<&Value>) -> bool {
    match weight {
        Some(Value::Number(n)) => n.as_f64().is_some_and(|n| n > 0.0),
        Some(Value::String(text)) => text
            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .parse::<f64>()
            .is_ok_and(|n| n > 0.0),
        _ => false,
    }
}

/// SMI `TrafficSplit`: `spec.service` as the root, weighted `spec.backends`.
pub fn traffic_split(object: &Value, _namespace: &str) -> Vec<Routed> {
    let name = name_of(object);
    let mut routed = Vec::new();
    if let Some(root) = object.pointer("/spec/service").and_then(Value::as_str) {
        routed.push(Routed {
            service: root.to_owned(),
            why: format!("root Service of TrafficSplit {name}"),
            destination: false,
        });
    }
    for backend in array(object, "/spec/backends") {
        let Some(service) = backend.get("service").and_then(Value::as_str) else {
            continue;
        };
        if positive_quantity(backend.get("weight")) {
            routed.push(Routed {
                service: service.to_owned(),
                why: format!(
                    "backend of TrafficSplit {name} (weight {})",
                    backend
                        .get("weight")
                        .map(Value::to_string)
                        .unwrap_or_default()
                ),
                destination: true,
            });
        }
    }
    routed
}

/// What the audit mirrors of the namespace: objects by `(group, resource)` and name.
type Objects = BTreeMap<(String, String), BTreeMap<String, Value>>;

fn audited(group: &str, resource: &str) -> bool {
    matches!(
        (group, resource),
        ("", "services") | ("apps", "deployments") | ("apps", "daemonsets")
    ) || ROUTE_KINDS
        .iter()
        .any(|kind| kind.group == group && kind.resource == resource)
}

fn of_kind<'a>(
    objects: &'a Objects,
    group: &str,
    resource: &str,
) -> impl Iterator<Item = &'a Value> {
    objects
        .get(&(group.to_owned(), resource.to_owned()))
        .into_iter()
        .flat_map(BTreeMap::values)
}

/// Whether `labels` has every pair of `selector`.
fn matches(selector: &serde_json::Map<String, Value>, labels: Option<&Value>) -> bool {
    selector
        .iter()
        .all(|(key, value)| labels.and_then(|labels| labels.get(key)) == Some(value))
}

/// The violations of one state.
fn evaluate(
    objects: &Objects,
    namespace: &str,
    apex: &BTreeSet<String>,
    (rv, moment): (u64, u64),
) -> Vec<Violation> {
    // Service -> (why, whether a weighted destination).
    let mut carriers: BTreeMap<String, Vec<(String, bool)>> = BTreeMap::new();
    for service in apex {
        carriers
            .entry(service.clone())
            .or_default()
            .push(("apex Service".to_owned(), false));
    }
    for kind in ROUTE_KINDS {
        for object in of_kind(objects, kind.group, kind.resource) {
            for routed in (kind.read)(object, namespace) {
                carriers
                    .entry(routed.service)
                    .or_default()
                    .push((routed.why, routed.destination));
            }
        }
    }
    let services = objects.get(&(String::new(), "services".to_owned()));
    let mut violations = Vec::new();
    for (name, reasons) in carriers {
        let why: Vec<String> = reasons.iter().map(|(why, _)| why.clone()).collect();
        let Some(service) = services.and_then(|services| services.get(&name)) else {
            if reasons.iter().any(|(_, destination)| *destination) {
                violations.push(Violation {
                    resource_version: rv,
                    moment,
                    service: name,
                    why,
                    backends: Vec::new(),
                    missing: true,
                });
            }
            continue;
        };
        let Some(selector) = service
            .pointer("/spec/selector")
            .and_then(Value::as_object)
            .filter(|selector| !selector.is_empty())
        else {
            continue;
        };
        let backends: Vec<(String, i64)> = [
            ("deployments", "/status/availableReplicas"),
            ("daemonsets", "/status/numberAvailable"),
        ]
        .into_iter()
        .flat_map(|(resource, available)| {
            of_kind(objects, "apps", resource)
                .filter(|workload| {
                    matches(selector, workload.pointer("/spec/template/metadata/labels"))
                })
                .map(move |workload| {
                    let available = workload
                        .pointer(available)
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    (name_of(workload).to_owned(), available)
                })
        })
        .collect();
        if backends.iter().map(|(_, available)| available).sum::<i64>() <= 0 {
            violations.push(Violation {
                resource_version: rv,
                moment,
                service: name,
                why,
                backends,
                missing: false,
            });
        }
    }
    violations
}

struct Inner {
    feed: ChangeFeed,
    objects: Objects,
    moments: u64,
    last: u64,
    violations: Vec<Violation>,
}

/// The audit of one namespace, from the moment it starts; reading it evaluates every state
/// the server went through since the last read, in order.
pub struct TrafficAudit {
    namespace: String,
    apex: BTreeSet<String>,
    inner: Mutex<Inner>,
}

impl TrafficAudit {
    /// Starts auditing `namespace` of `server` now (the current state is the first moment),
    /// `apex_services` being the Services clients call by name (besides the roots of route
    /// objects). Works with or without a runtime; holds no reference to the server.
    pub fn start(server: &KubeServer, namespace: &str, apex_services: &[&str]) -> TrafficAudit {
        let wanted = namespace.to_owned();
        let feed = server.subscribe(move |group, resource, object| {
            audited(group, resource)
                && object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    == Some(wanted.as_str())
        });
        let mut objects = Objects::new();
        for change in &feed.initial {
            apply(&mut objects, change);
        }
        let apex: BTreeSet<String> = apex_services.iter().map(|s| (*s).to_owned()).collect();
        let first = evaluate(&objects, namespace, &apex, (feed.resource_version, 1));
        let last = feed.resource_version;
        TrafficAudit {
            namespace: namespace.to_owned(),
            apex,
            inner: Mutex::new(Inner {
                feed,
                objects,
                moments: 1,
                last,
                violations: first,
            }),
        }
    }

    /// Evaluates every state since the last look; the audit's record, up to date.
    fn caught_up(&self) -> std::sync::MutexGuard<'_, Inner> {
        let mut inner = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let inner_ref = &mut *inner;
        for change in inner_ref.feed.take() {
            apply(&mut inner_ref.objects, &change);
            inner_ref.moments += 1;
            let found = evaluate(
                &inner_ref.objects,
                &self.namespace,
                &self.apex,
                (change.resource_version, inner_ref.moments),
            );
            inner_ref.violations.extend(found);
            inner_ref.last = change.resource_version;
        }
        inner
    }

    /// Every violation so far, in order (one per Service per bad moment).
    pub fn violations(&self) -> Vec<Violation> {
        self.caught_up().violations.clone()
    }

    /// How many states were evaluated so far (the starting one and one per write to a
    /// Service, Deployment, DaemonSet or route object of the namespace).
    pub fn moments(&self) -> u64 {
        self.caught_up().moments
    }

    /// The resourceVersion of the last state evaluated.
    pub fn resource_version(&self) -> u64 {
        self.caught_up().last
    }

    /// A readable account: the moments evaluated, then each violation, a run of the same
    /// problem at consecutive moments on one line.
    pub fn summary(&self) -> String {
        let inner = self.caught_up();
        let mut text = format!(
            "traffic audit of namespace {}: {} moments evaluated (up to resourceVersion {}), {} violations",
            self.namespace,
            inner.moments,
            inner.last,
            inner.violations.len()
        );
        // (first violation of the run, the last one).
        let mut runs: Vec<(&Violation, &Violation)> = Vec::new();
        for violation in &inner.violations {
            match runs
                .iter_mut()
                .rev()
                .find(|(first, _)| first.service == violation.service)
            {
                Some((first, last))
                    if first.same_as(violation) && last.moment + 1 == violation.moment =>
                {
                    *last = violation;
                }
                _ => runs.push((violation, violation)),
            }
        }
        for (first, last) in runs {
            text.push_str(&format!("\n- {first}"));
            match last.moment - first.moment {
                0 => {}
                1 => text.push_str(&format!(
                    " (and at the next moment, resourceVersion {})",
                    last.resource_version
                )),
                more => text.push_str(&format!(
                    " (and at the {more} moments after it, up to resourceVersion {})",
                    last.resource_version
                )),
            }
        }
        text
    }

    /// Panics with the summary unless no moment so far was a violation.
    pub fn assert_clean(&self) {
        let summary = self.summary();
        assert!(self.caught_up().violations.is_empty(), "{summary}");
    }
}

fn apply(objects: &mut Objects, change: &Change) {
    let key = (change.group.clone(), change.resource.clone());
    let name = name_of(&change.object).to_owned();
    match change.kind {
        ChangeKind::Deleted => {
            if let Some(of_kind) = objects.get_mut(&key) {
                of_kind.remove(&name);
            }
        }
        ChangeKind::Added | ChangeKind::Modified => {
            objects
                .entry(key)
                .or_default()
                .insert(name, change.object.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hosts_resolve_in_the_namespace_only() {
        assert_eq!(service_of_host("podinfo", "shop"), Some("podinfo".into()));
        assert_eq!(
            service_of_host("podinfo.shop", "shop"),
            Some("podinfo".into())
        );
        assert_eq!(
            service_of_host("podinfo.shop.svc", "shop"),
            Some("podinfo".into())
        );
        assert_eq!(
            service_of_host("podinfo.shop.svc.cluster.local", "shop"),
            Some("podinfo".into())
        );
        assert_eq!(service_of_host("podinfo.other", "shop"), None);
        assert_eq!(service_of_host("app.example.com", "shop"), None);
        assert_eq!(service_of_host("*", "shop"), None);
    }

    #[test]
    fn virtual_service_weights_and_mirrors() {
        let vs = json!({"metadata": {"name": "podinfo"}, "spec": {
        "hosts": ["podinfo", "app.example.com"],
        "http": [
            {"route": [{"destination": {"host": "only"}, "weight": 0}]},
            {"route": [
                {"destination": {"host": "podinfo-primary"}, "weight": 90},
                {"destination": {"host": "podinfo-canary.shop.svc.cluster.local"}, "weight": 10},
                {"destination": {"host": "unweighted"}},
            ],
             "mirror": {"host": "shadow"}, "mirrorPercentage": {"value": 0.0}},
            {"route": [{"destination": {"host": "x"}}], "mirror": {"host": "mirrored"}},
        ]}});
        let routed: Vec<(String, bool)> = virtual_service(&vs, "shop")
            .into_iter()
            .map(|r| (r.service, r.destination))
            .collect();
        let expected: Vec<(String, bool)> = [
            ("podinfo", false),
            ("only", true),
            ("podinfo-primary", true),
            ("podinfo-canary", true),
            ("x", true),
            ("mirrored", true),
        ]
        .iter()
        .map(|(s, d)| ((*s).to_owned(), *d))
        .collect();
        assert_eq!(routed, expected);
    }

    #[test]
    fn http_route_and_traffic_split() {
        let route = json!({"metadata": {"name": "r"}, "spec": {"rules": [{"backendRefs": [
            {"name": "a"}, {"name": "b", "weight": 0}, {"name": "c", "namespace": "other"},
            {"name": "d", "kind": "ServiceImport", "group": "multicluster.x-k8s.io"}]}]}});
        let services: Vec<String> = http_route(&route, "shop")
            .into_iter()
            .map(|r| r.service)
            .collect();
        assert_eq!(services, ["a"]);
        let split = json!({"metadata": {"name": "s"}, "spec": {"service": "root", "backends": [
            {"service": "p", "weight": "500m"}, {"service": "q", "weight": 0}, {"service": "r", "weight": 1}]}});
        let services: Vec<(String, bool)> = traffic_split(&split, "shop")
            .into_iter()
            .map(|r| (r.service, r.destination))
            .collect();
        assert_eq!(
            services,
            [
                ("root".to_owned(), false),
                ("p".to_owned(), true),
                ("r".to_owned(), true)
            ]
        );
    }
}
