//! Traffic providers, as pure functions: the objects that make a mesh or a gateway split traffic
//! the way the core's [`Route`] says (`spec.target.provider`, Flagger's names). The operator
//! applies them with server-side apply under the field manager `weir`.
//!
//! Each provider is one module behind the [`Router`] trait: what it cannot express of a rollout
//! ([`Router::validate`], refused before anything is written, naming the provider and the
//! field), the user's objects it reads ([`Router::inputs`]: the target GETs them and hands them
//! over in [`RouteContext::inputs`]), the objects of a route ([`Router::objects`]), and the
//! objects it owns by name ([`Router::owned`], deleted when reverting, computed without inputs).
//!
//! | provider | objects | weights |
//! |---|---|---|
//! | `istio` | VirtualService `NAME`, DestinationRules `NAME-primary`, `NAME-canary` | integers summing to 100 (Istio's schema): rounded, and the rounding is reported |
//! | `gatewayapi:v1` (`:v1beta1`) | HTTPRoute `NAME` | relative: whole percent, basis points when the plan needs them |
//! | `smi` (`:v1alpha1`, `:v1alpha2`, `:v1alpha3`) | TrafficSplit `NAME` | relative: whole percent, basis points when the plan needs them |
//! | `linkerd` | TrafficSplit `NAME` (`split.smi-spec.io/v1alpha1`, Quantity strings) | relative, as above |
//! | `nginx` | Ingress `INGRESS-canary`, a copy of `spec.target.ingressRef` | `canary-weight` of 100 (of 10000 with `canary-weight-total` when the plan needs it) |
//! | `contour` | HTTPProxy `NAME` | relative, as above |
//! | `gloo` | RouteTable `NAME`, Upstreams `NS-NAME-primaryupstream-PORT`, `NS-NAME-canaryupstream-PORT` | relative, as above |
//! | `traefik` | TraefikService `NAME` | relative, as above |
//! | `skipper` | Ingress `INGRESS-canary` | relative, as above |
//! | `apisix` | ApisixRoute `ROUTE-NAME-canary` | relative, as above |
//! | `kuma` | TrafficRoute `NAME.NAMESPACE` (cluster-scoped) | relative, as above |
//! | `knative` | none owned: the Knative Service's `spec.traffic` | integers summing to 100 |
//! | `kubernetes` | none: blue/green only, the apex Service always selects the primary | a canary weight between 0 and 100% is refused |
//!
//! Weights are written in whole percent, as Flagger writes them (tools that read Flagger's objects
//! expect them), unless the plan itself needs a finer step ([`resolution`]); a weight rounded to
//! fit is reported in [`RouteObjects::adjusted`].
//!
//! The router objects are written as JSON here rather than with a third-party crate's types, so
//! that no crate can hold back a kube upgrade.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde_json::{Map, Value, json};
use weir_core::FieldError;
use weir_core::machine::{self, Route};
use weir_core::model::{
    KubernetesService, KubernetesTarget, MatchRule, Plan, RolloutSpec, StringMatch,
};

mod apisix;
mod contour;
mod gatewayapi;
mod gloo;
mod inputs;
mod istio;
mod knative;
mod kubernetes;
mod kuma;
mod linkerd;
mod nginx;
mod session;
mod skipper;
mod smi;
mod traefik;

pub use inputs::{InputRef, Inputs, fetch_inputs};
pub use knative::PRIMARY_REVISION_ANNOTATION;
pub use kuma::MESH_ANNOTATION;
pub use session::{DEFAULT_COOKIE_MAX_AGE, SessionCookies, StickyCookie, session_cookies};

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
    /// ingress-nginx: a canary Ingress with the `canary-*` annotations.
    Nginx,
    /// Contour: an HTTPProxy the user's root proxy includes.
    Contour,
    /// Gloo Edge: a RouteTable and two Upstreams.
    Gloo,
    /// Traefik: a weighted TraefikService.
    Traefik,
    /// Skipper: a canary Ingress with backend weights.
    Skipper,
    /// Apache APISIX: a canary ApisixRoute.
    Apisix,
    /// Kuma: a TrafficRoute.
    Kuma,
    /// Linkerd: an SMI TrafficSplit `v1alpha1`, as Flagger writes it.
    Linkerd,
    /// Knative: the traffic between a Knative Service's revisions.
    Knative,
}

/// The provider names weir accepts, for error messages.
pub const PROVIDERS: &str = "istio, gatewayapi:v1, gatewayapi:v1beta1, smi, smi:v1alpha1, smi:v1alpha2, smi:v1alpha3, kubernetes, nginx, contour, gloo, traefik, skipper, apisix, kuma, linkerd, knative";

/// Why `appmesh` and `osm` are refused, with the alternatives.
pub const RETIRED: &str = "AWS shut App Mesh down on 2026-09-30 and Open Service Mesh is archived (2023): \
     neither is driven; move the mesh to Istio (`istio`), Linkerd (`gatewayapi:v1beta1`, as \
     Flagger's Linkerd guide does, or `linkerd`) or any Gateway API implementation \
     (`gatewayapi:v1`)";

impl Provider {
    /// The provider named `spec.target.provider` (Istio when unset, as in Flagger). Unlike
    /// Flagger, an unknown name is refused rather than read as Istio (the message names the
    /// value, not the field: callers say where it came from).
    pub fn parse(name: Option<&str>) -> Result<Provider, String> {
        let name = name.unwrap_or("istio");
        if name.starts_with("appmesh") || name == "osm" {
            return Err(format!("{name:?} is not driven: {RETIRED}"));
        }
        // Flagger's `smi:VERSION:MESH` names the mesh too; the objects are the same.
        let smi_version = name.strip_prefix("smi:").map(|rest| {
            rest.split_once(':')
                .map_or(rest, |(version, _mesh)| version)
        });
        Ok(match (name, smi_version) {
            ("istio", _) => Provider::Istio,
            ("gatewayapi" | "gatewayapi:v1", _) => {
                Provider::GatewayApi("gateway.networking.k8s.io/v1")
            }
            ("gatewayapi:v1beta1", _) => Provider::GatewayApi("gateway.networking.k8s.io/v1beta1"),
            ("smi", _) | (_, Some("v1alpha2")) => Provider::Smi("split.smi-spec.io/v1alpha2"),
            (_, Some("v1alpha1")) => Provider::Smi("split.smi-spec.io/v1alpha1"),
            (_, Some("v1alpha3")) => Provider::Smi("split.smi-spec.io/v1alpha3"),
            ("kubernetes", _) => Provider::Kubernetes,
            ("nginx", _) => Provider::Nginx,
            ("contour", _) => Provider::Contour,
            ("traefik", _) => Provider::Traefik,
            ("skipper", _) => Provider::Skipper,
            ("apisix", _) => Provider::Apisix,
            ("kuma", _) => Provider::Kuma,
            ("linkerd", _) => Provider::Linkerd,
            ("knative", _) => Provider::Knative,
            // Flagger takes any name starting with `gloo`.
            (gloo, _) if gloo == "gloo" || gloo.starts_with("gloo:") => Provider::Gloo,
            (other, _) => {
                return Err(format!(
                    "{other:?} is not a provider weir drives; one of \
                     {PROVIDERS} (appmesh and osm are refused: their meshes are gone). Flagger \
                     would silently use Istio for it; weir does not guess"
                ));
            }
        })
    }

    /// The provider's name as written in documents (Flagger's).
    pub fn name(self) -> &'static str {
        self.router().name()
    }

    /// The provider's router.
    pub fn router(self) -> &'static dyn Router {
        match self {
            Provider::Istio => &istio::Istio,
            Provider::GatewayApi("gateway.networking.k8s.io/v1beta1") => {
                &gatewayapi::GATEWAY_API_V1BETA1
            }
            Provider::GatewayApi(_) => &gatewayapi::GATEWAY_API_V1,
            Provider::Smi("split.smi-spec.io/v1alpha1") => &smi::SMI_V1ALPHA1,
            Provider::Smi("split.smi-spec.io/v1alpha3") => &smi::SMI_V1ALPHA3,
            Provider::Smi(_) => &smi::SMI_V1ALPHA2,
            Provider::Kubernetes => &kubernetes::Kubernetes,
            Provider::Nginx => &nginx::Nginx,
            Provider::Contour => &contour::Contour,
            Provider::Gloo => &gloo::Gloo,
            Provider::Traefik => &traefik::Traefik,
            Provider::Skipper => &skipper::Skipper,
            Provider::Apisix => &apisix::Apisix,
            Provider::Kuma => &kuma::Kuma,
            Provider::Linkerd => &linkerd::Linkerd,
            Provider::Knative => &knative::Knative,
        }
    }

    /// Every provider weir drives, in the order of [`PROVIDERS`].
    pub fn all() -> Vec<Provider> {
        PROVIDERS
            .split(", ")
            .filter_map(|name| Provider::parse(Some(name)).ok())
            .collect()
    }
}

/// What a provider does with a rollout: one module per provider implements it.
pub trait Router: Sync {
    /// The provider's name as written in `spec.target.provider`.
    fn name(&self) -> &'static str;

    /// What this provider cannot express of `spec` (A/B conditions, mirroring, session
    /// affinity) or needs from `target` (an `ingressRef`, a `routeRef`): each error names the
    /// provider and the field. Checked before anything is written.
    fn validate(&self, spec: &RolloutSpec, target: &KubernetesTarget) -> Vec<FieldError>;

    /// The user's objects this provider reads to write its own (nginx and skipper: the Ingress
    /// `spec.target.ingressRef` names; apisix: the ApisixRoute of `routeRef`; gloo: the
    /// Upstream of `upstreamRef`; knative: the Knative Service). The target GETs them and
    /// passes them in [`RouteContext::inputs`].
    fn inputs(&self, target: &KubernetesTarget, names: &Names) -> Vec<InputRef> {
        let _ = (target, names);
        Vec::new()
    }

    /// The objects that route traffic as `route` says.
    fn objects(&self, ctx: &RouteContext<'_>, route: &Route) -> Result<RouteObjects, String>;

    /// The objects this provider creates and owns (not the user's), by name: what reverting
    /// deletes. Needs no inputs.
    fn owned(&self, ctx: &RouteContext<'_>) -> Vec<ObjectRef>;

    /// The API resources this provider touches and how, for RBAC.
    fn access(&self) -> Vec<Access>;
}

/// An API resource and the verbs a provider needs on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The API group (`""` for the core group).
    pub group: &'static str,
    /// The resource's plural.
    pub resource: &'static str,
    /// `get`, `create`, `patch`, `delete`.
    pub verbs: &'static [&'static str],
}

/// What a provider that owns its objects needs: read them back, apply them, delete them.
const OWNED_VERBS: &[&str] = &["get", "create", "patch", "delete"];

impl Access {
    /// Objects the provider owns.
    const fn owned(group: &'static str, resource: &'static str) -> Access {
        Access {
            group,
            resource,
            verbs: OWNED_VERBS,
        }
    }
}

/// An object by kind and name (no namespace: cluster-scoped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The namespace; `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectRef {
    /// A stub object (apiVersion, kind, metadata name and namespace): enough to address it.
    pub fn stub(&self) -> Value {
        let mut metadata = json!({"name": self.name});
        if let Some(namespace) = &self.namespace {
            metadata["namespace"] = json!(namespace);
        }
        json!({"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata})
    }

    /// The reference to `object` (a full object as [`Router::objects`] writes it).
    pub fn of(object: &Value) -> ObjectRef {
        let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        ObjectRef {
            api_version: text("/apiVersion").unwrap_or_default().to_string(),
            kind: text("/kind").unwrap_or_default().to_string(),
            namespace: text("/metadata/namespace").map(str::to_string),
            name: text("/metadata/name").unwrap_or_default().to_string(),
        }
    }
}

/// The REST plural of a kind the providers write or read (Kubernetes' own rule for these kinds:
/// lowercase, `es` after a final `s` or `x`, `ies` for a final consonant + `y`).
pub fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    if lower.ends_with('s') || lower.ends_with('x') {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
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

/// How finely a relative weight is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Resolution {
    /// Whole percent summing to 100, as Flagger writes them.
    #[default]
    Percent,
    /// Basis points summing to 10000: the plan has steps finer than a percent.
    BasisPoints,
}

/// The resolution a rollout's weights need: basis points when a weight of its plan (a step,
/// the maximum, the promotion step, a schedule entry) is not a whole percent, else percent.
pub fn resolution(spec: &RolloutSpec) -> Resolution {
    let whole = |weight: weir_core::Weight| weight.basis_points().is_multiple_of(100);
    let fine = match &spec.plan {
        Plan::Canary(canary) => {
            !machine::canary_steps(canary)
                .iter()
                .all(|step| whole(step.weight))
                || !canary.step_weight_promotion.is_none_or(whole)
                || !whole(machine::max_weight(canary))
        }
        Plan::Schedule(_) => !machine::schedule_entries(spec)
            .iter()
            .all(|(_, weight)| whole(*weight)),
        Plan::BlueGreen(_) | Plan::AbTest(_) | Plan::Mirror(_) => false,
    };
    if fine {
        Resolution::BasisPoints
    } else {
        Resolution::Percent
    }
}

/// The user's objects a provider read, by kind and name.
static NO_INPUTS: LazyLock<Inputs> = LazyLock::new(Inputs::default);
static NO_TARGET: LazyLock<KubernetesTarget> = LazyLock::new(KubernetesTarget::default);
static NO_ANNOTATIONS: BTreeMap<String, String> = BTreeMap::new();

/// Everything a provider needs besides the route.
#[derive(Debug, Clone, Copy)]
pub struct RouteContext<'a> {
    /// The Services' names and port.
    pub names: &'a Names,
    /// The rollout's `spec.target` (`ingressRef`, `routeRef`, `upstreamRef`, ...).
    pub target: &'a KubernetesTarget,
    /// `spec.target.service` (empty when unset).
    pub service: &'a KubernetesService,
    /// The rollout's annotations (Flagger's `kuma.io/mesh` is one).
    pub annotations: &'a BTreeMap<String, String>,
    /// The rollout's run (the status's): session-affinity cookies take a value per run.
    pub run: u64,
    /// The owner reference the objects get.
    pub owner: &'a Value,
    /// How finely relative weights are written.
    pub resolution: Resolution,
    /// The user's objects named by [`Router::inputs`].
    pub inputs: &'a Inputs,
    /// The primary's revision (`knative`: the Knative Revision that serves as primary).
    pub primary_revision: Option<&'a str>,
}

impl<'a> RouteContext<'a> {
    /// A context with no target settings, annotations, inputs or revision, in whole percent.
    pub fn new(
        names: &'a Names,
        service: &'a KubernetesService,
        run: u64,
        owner: &'a Value,
    ) -> RouteContext<'a> {
        RouteContext {
            names,
            target: &NO_TARGET,
            service,
            annotations: &NO_ANNOTATIONS,
            run,
            owner,
            resolution: Resolution::Percent,
            inputs: &NO_INPUTS,
            primary_revision: None,
        }
    }
}

/// The objects of a route, and what was adjusted to fit the provider.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RouteObjects {
    /// Full objects (apiVersion, kind, metadata, spec) to apply; weir owns them.
    pub objects: Vec<Value>,
    /// Partial objects of the user's to apply with server-side apply (only the fields given
    /// are weir's): never deleted, no owner reference (`knative`'s Service `spec.traffic`).
    pub edits: Vec<Value>,
    /// Set when the provider could not take the weights as they are (e.g. whole percent).
    pub adjusted: Option<String>,
}

/// The objects that route traffic as `route` says, in the rollout's `run`, in whole percent and
/// without the user's objects: providers that read one (nginx, skipper, apisix, knative) answer
/// an error naming it. [`Router::objects`] with a full [`RouteContext`] is the general form.
pub fn objects(
    provider: Provider,
    names: &Names,
    service: &KubernetesService,
    route: &Route,
    run: u64,
    owner: &Value,
) -> Result<RouteObjects, String> {
    provider
        .router()
        .objects(&RouteContext::new(names, service, run, owner), route)
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
        let zero = entry["weight"].as_i64() == Some(0) || entry["weight"].as_str() == Some("0");
        host == Some(names.canary.as_str()) && zero
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

// === shared by the providers ===

/// `name` in the rollout's namespace, owned by the rollout.
fn metadata(name: &str, names: &Names, owner: &Value) -> Value {
    json!({"name": name, "namespace": names.namespace, "ownerReferences": [owner]})
}

/// Annotations Flagger puts on the objects it owns so that Flux leaves them alone.
const TOOLKIT_ANNOTATIONS: [(&str, &str); 2] = [
    ("kustomize.toolkit.fluxcd.io/reconcile", "disabled"),
    ("helm.toolkit.fluxcd.io/driftDetection", "disabled"),
];

/// `name` owned by the rollout, with `spec.target.service.apex`'s labels and annotations and the
/// toolkit annotations (Flagger's apex objects: contour, gloo, traefik, kuma).
fn apex_metadata(name: &str, ctx: &RouteContext<'_>) -> Value {
    let mut metadata = metadata(name, ctx.names, ctx.owner);
    let apex = ctx.service.apex.clone().unwrap_or_default();
    let mut annotations: Map<String, Value> = apex
        .annotations
        .into_iter()
        .map(|(key, value)| (key, Value::String(value)))
        .collect();
    for (key, value) in TOOLKIT_ANNOTATIONS {
        annotations.insert(key.into(), json!(value));
    }
    metadata["annotations"] = Value::Object(annotations);
    if !apex.labels.is_empty() {
        metadata["labels"] = json!(apex.labels);
    }
    metadata
}

/// A route's weights as a provider writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Split {
    primary: u32,
    canary: u32,
    /// What they sum to: 100 or 10000.
    total: u32,
}

/// Whole percent summing to 100 whatever the plan (Istio, Knative, NGINX without a total):
/// the weight rounded half up, and a note when it was.
fn percent_split(route: &Route, provider: &str) -> (Split, Option<String>) {
    let canary_bp = route.canary_weight.basis_points().min(10_000);
    let canary = (canary_bp + 50) / 100;
    let note = (!canary_bp.is_multiple_of(100)).then(|| {
        format!(
            "{provider} takes whole percentages: canary weight {} applied as {canary}%",
            route.canary_weight
        )
    });
    (
        Split {
            primary: 100 - canary,
            canary,
            total: 100,
        },
        note,
    )
}

/// Relative weights at `resolution`: whole percent (rounded, with a note) or basis points.
fn relative_split(
    route: &Route,
    resolution: Resolution,
    provider: &str,
) -> (Split, Option<String>) {
    match resolution {
        Resolution::BasisPoints => {
            let canary = route.canary_weight.basis_points().min(10_000);
            (
                Split {
                    primary: 10_000 - canary,
                    canary,
                    total: 10_000,
                },
                None,
            )
        }
        Resolution::Percent => {
            let (split, note) = percent_split(route, provider);
            let note = note.map(|_| {
                format!(
                    "{provider} weights are written in whole percent, as Flagger writes them \
                     (the plan's steps are whole percentages): canary weight {} applied as {}%",
                    route.canary_weight, split.canary
                )
            });
            (split, note)
        }
    }
}

/// One condition of an A/B rule, with its path under the rule.
#[derive(Debug, Clone, Copy)]
enum Condition<'a> {
    /// A request header (`cookie` is the whole Cookie header).
    Header(&'a str, &'a StringMatch),
    /// One cookie's value.
    Cookie(&'a str, &'a StringMatch),
    /// A query parameter.
    Query(&'a str, &'a StringMatch),
    /// The path.
    Uri(&'a StringMatch),
    /// The method.
    Method(&'a StringMatch),
}

impl<'a> Condition<'a> {
    /// A rule's conditions with their paths under the rule (`headers.x-canary`, `uri`, ...).
    fn of(rule: &'a MatchRule) -> Vec<(String, Condition<'a>)> {
        let mut conditions = Vec::new();
        for (name, condition) in &rule.headers {
            conditions.push((
                format!("headers.{name}"),
                Condition::Header(name, condition),
            ));
        }
        for (name, condition) in &rule.cookies {
            conditions.push((
                format!("cookies.{name}"),
                Condition::Cookie(name, condition),
            ));
        }
        for (name, condition) in &rule.query_params {
            conditions.push((
                format!("queryParams.{name}"),
                Condition::Query(name, condition),
            ));
        }
        if let Some(uri) = &rule.uri {
            conditions.push(("uri".into(), Condition::Uri(uri)));
        }
        if let Some(method) = &rule.method {
            conditions.push(("method".into(), Condition::Method(method)));
        }
        conditions
    }
}

/// The A/B rules of a rollout's plan, if it is an A/B test.
fn ab_rules(spec: &RolloutSpec) -> Option<&[MatchRule]> {
    match &spec.plan {
        Plan::AbTest(ab_test) => Some(&ab_test.match_rules),
        _ => None,
    }
}

/// The providers that can send matching requests to the canary, for messages.
const MATCHING_PROVIDERS: &str = "istio, gatewayapi, nginx, contour, gloo, skipper, apisix";

/// Refuses an A/B test on a provider that cannot match requests. Flagger ignores the rules there
/// and so sends every request to the canary at each iteration.
fn refuse_ab_test(provider: &str, spec: &RolloutSpec, why: &str) -> Option<FieldError> {
    ab_rules(spec)?;
    Some(FieldError::new(
        "spec.plan.abTest.match",
        format!(
            "provider {provider} cannot send matching requests to the canary ({why}); Flagger \
             would ignore the rules and send every request to the canary. Use a canary plan, or \
             a provider that matches requests: {MATCHING_PROVIDERS}"
        ),
    ))
}

/// Checks every condition of an A/B plan with `check`, which says why the provider cannot
/// express one (or `None`).
fn check_conditions(
    provider: &str,
    spec: &RolloutSpec,
    mut check: impl FnMut(&Condition<'_>) -> Option<String>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (index, rule) in ab_rules(spec).unwrap_or_default().iter().enumerate() {
        for (path, condition) in Condition::of(rule) {
            if let Some(why) = check(&condition) {
                errors.push(FieldError::new(
                    format!("spec.plan.abTest.match[{index}].{path}"),
                    format!("provider {provider} {why}"),
                ));
            }
        }
    }
    errors
}

/// The providers that can mirror traffic, for messages.
const MIRRORING_PROVIDERS: &str = "istio, gatewayapi, contour, gloo, traefik";

/// Refuses mirroring (a mirror plan, or a canary plan's `mirrorWeight`) on a provider without.
fn refuse_mirroring(provider: &str, spec: &RolloutSpec) -> Option<FieldError> {
    let path = match &spec.plan {
        Plan::Mirror(_) => "spec.plan.mirror",
        Plan::Canary(canary) if canary.mirror_weight.is_some() => "spec.plan.canary.mirrorWeight",
        _ => return None,
    };
    Some(FieldError::new(
        path,
        format!(
            "provider {provider} cannot mirror traffic; Flagger would run the iterations \
             without any copy reaching the canary. Use blue/green, or a provider that mirrors: \
             {MIRRORING_PROVIDERS}"
        ),
    ))
}

/// Refuses session affinity on a provider that cannot set a cookie and route on it.
fn refuse_session_affinity(provider: &str, spec: &RolloutSpec) -> Option<FieldError> {
    spec.session_affinity.as_ref()?;
    Some(FieldError::new(
        "spec.sessionAffinity",
        format!(
            "provider {provider} cannot pin clients to a version (it cannot add a Set-Cookie \
             to the canary's responses and route on the cookie); only istio and gatewayapi \
             can"
        ),
    ))
}

/// A required reference of `spec.target` (`ingressRef`, `routeRef`): missing, or of the wrong
/// kind.
fn require_reference(
    provider: &str,
    target: &KubernetesTarget,
    field: &str,
    kind: &str,
    example: &str,
) -> Vec<FieldError> {
    let reference = match field {
        "ingressRef" => target.ingress_ref.as_ref(),
        "routeRef" => target.route_ref.as_ref(),
        _ => target.upstream_ref.as_ref(),
    };
    let path = format!("spec.target.{field}");
    match reference {
        None => vec![FieldError::missing(
            path,
            format!("provider {provider} works from your {kind}: {example}"),
        )],
        Some(reference) => reference
            .kind
            .as_deref()
            .filter(|written| *written != kind)
            .map(|written| {
                FieldError::with_value(
                    format!("{path}.kind"),
                    written,
                    format!("provider {provider} reads a {kind}"),
                )
            })
            .into_iter()
            .collect(),
    }
}

/// A regular expression matching `text` literally.
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

/// A regular expression for a value that meets `condition`, the same whether the provider
/// matches it against the whole value (Envoy's) or searches the value for it.
fn as_regex(condition: &StringMatch) -> String {
    if let Some(exact) = &condition.exact {
        format!("^{}$", regex_escape(exact))
    } else if let Some(prefix) = &condition.prefix {
        format!("^{}.*", regex_escape(prefix))
    } else if let Some(suffix) = &condition.suffix {
        format!(".*{}$", regex_escape(suffix))
    } else {
        condition.regex.clone().unwrap_or_default()
    }
}

/// A regular expression for a cookie's value inside the Cookie header.
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

/// A regular expression on the whole Cookie header: cookie `name` meets `condition`.
fn cookie_header_regex(name: &str, condition: &StringMatch) -> String {
    format!(
        "^(.*?;\\s*)?({}={})(;.*)?$",
        regex_escape(name),
        cookie_value_regex(condition)
    )
}

fn array_items(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

/// `reference`'s object among the inputs, or an error naming the field.
fn input<'a>(
    ctx: &RouteContext<'a>,
    provider: &str,
    field: &str,
    kind: &str,
    reference: Option<&weir_core::model::ObjectReference>,
) -> Result<&'a Value, String> {
    let Some(reference) = reference else {
        return Err(format!(
            "provider {provider} needs spec.target.{field}: the {kind} it works from"
        ));
    };
    ctx.inputs.get(kind, &reference.name).ok_or_else(|| {
        format!(
            "provider {provider} works from the {kind} {}/{} named by spec.target.{field}, which was not read (it may not exist yet)",
            ctx.names.namespace, reference.name
        )
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod table;
