//! Argo Rollouts' traffic routers, as v1.9.1 drives them: the weights the reconcile decided
//! (`Action::RouteTraffic`) written into the objects `spec.strategy.canary.trafficRouting` names.
//!
//! Argo calls each router's `SetWeight` every reconcile with the desired canary weight (the
//! stable weight is the rest of `maxTrafficWeight`; here the caller passes both, as
//! [`Weights`]), and for Istio subset-level routing `UpdateHash` first with the canary and stable
//! pod template hashes. weir does the same for the routers its operator
//! runs: `istio` (VirtualService weights, DestinationRule subset labels), `nginx` (a canary
//! Ingress beside the stable one), `smi` (a TrafficSplit), `traefik` (the weighted services of
//! the user's TraefikService), `apisix` (backend weights in the user's ApisixRoute rules) and the
//! `argoproj-labs/gatewayAPI` plugin (backendRef weights in Gateway API routes). Every object is
//! read first and written only when it changes, as a merge patch of what changed carrying the
//! resourceVersion that was read (lists are replaced whole by a merge patch, so the version makes
//! sure no other writer's edit in between is lost; a conflict is an API error and the next
//! reconcile reads again).
//!
//! A router whose objects are missing or cannot be split answers `Ok(Err(reason))` with the
//! reason worded as Argo's `InvalidSpec` condition words it (field path first), so the shell can
//! set that condition; an API failure is `Err`. Routers are written in the order istio, nginx,
//! smi, traefik, apisix, plugins; a failure stops the pass, and the next reconcile writes the
//! rest.
//!
//! Managed routes (`trafficRouting.managedRoutes`, in priority order) are what Argo's
//! `setHeaderRoute` and `setMirrorRoute` steps write: [`set_header_route`] sends requests with
//! given headers to the canary whatever the weights, [`set_mirror_route`] copies matching
//! requests to it, and [`remove_managed_routes`] takes them all out again (Argo does so when the
//! Rollout is fully promoted, aborted, promoted-full, or its canary has no available pod). Of the
//! routers weir runs, Istio takes both kinds and the Gateway API plugin header routes; nginx,
//! SMI and Traefik have none (Argo's reconcilers for them do nothing), so a Rollout routed only
//! by those is refused as Argo's validation refuses it; APISIX header routes (which Argo writes
//! as ApisixRoutes of their own) are not written by weir, and refused the same way.

use serde_json::{Map, Value};
use weir_core::argo::types::{
    CanaryStrategy, HeaderRouteMatch, SetHeaderRoute, SetMirrorRoute, StringMatch, TrafficRouting,
};

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};

mod apisix;
mod gatewayapi;
mod istio;
mod nginx;
mod smi;
mod traefik;

/// The weights to write: canary + stable = maxTrafficWeight (default 100).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weights {
    /// To the canary Service (or subset).
    pub canary: i64,
    /// To the stable Service (or subset).
    pub stable: i64,
}

/// What a router answers: `Ok(Err(reason))` when the Rollout's routing is invalid (InvalidSpec),
/// `Err` when the API failed.
pub type Routed = Result<Result<(), String>, kube::Error>;

/// The routers weir's operator runs, for the refusal of the others.
const RUN: &str =
    "it routes with istio, nginx, smi, traefik, apisix and the argoproj-labs/gatewayAPI plugin";

/// The Gateway API plugin's name in `trafficRouting.plugins`.
pub const GATEWAY_API_PLUGIN: &str = "argoproj-labs/gatewayAPI";

/// Writes `weights` into every router `canary.traffic_routing` names, for Rollout `rollout` in
/// `namespace`. Ok(Err(reason)): an object the Rollout names does not exist or cannot be split
/// (reason names it as Argo's InvalidSpec would); Err: the API failed.
///
/// `hashes` are the canary and stable pod template hashes, which Istio subset-level routing
/// (`istio.destinationRule`) writes into the DestinationRule's subsets (without them such a
/// Rollout is refused). `owner` is the ownerReference to the Rollout (`apiVersion`, `kind`,
/// `name`, `uid`, `controller`...) that the objects weir creates carry (the nginx canary
/// Ingress, the SMI TrafficSplit), as Argo's do, and by which an existing one is known to be the
/// Rollout's.
pub async fn route(
    client: &kube::Client,
    namespace: &str,
    rollout: &str,
    canary: &CanaryStrategy,
    weights: Weights,
    hashes: Option<(String, String)>,
    owner: Option<&Value>,
) -> Routed {
    let Some(routing) = canary.traffic_routing.as_ref() else {
        return Ok(Ok(()));
    };
    if let Some(refusal) = unsupported(routing) {
        return Ok(Err(refusal));
    }
    let Some((stable, canary_service)) = services(canary) else {
        return Ok(Err(NO_SERVICES.to_owned()));
    };
    let ctx = Ctx {
        client,
        namespace,
        rollout,
        stable,
        canary: canary_service,
        weights,
        max_traffic_weight: routing.max_traffic_weight,
        hashes: hashes.as_ref().map(|(c, s)| (c.as_str(), s.as_str())),
        owner,
        managed_routes: managed_routes(routing),
    };
    if let Some(istio) = &routing.istio
        && let Err(reason) = istio::route(&ctx, istio).await?
    {
        return Ok(Err(reason));
    }
    if let Some(nginx) = &routing.nginx
        && let Err(reason) = nginx::route(&ctx, nginx).await?
    {
        return Ok(Err(reason));
    }
    if let Some(smi) = &routing.smi
        && let Err(reason) = smi::route(&ctx, smi).await?
    {
        return Ok(Err(reason));
    }
    if let Some(traefik) = &routing.traefik
        && let Err(reason) = traefik::route(&ctx, traefik).await?
    {
        return Ok(Err(reason));
    }
    if let Some(apisix) = &routing.apisix
        && let Err(reason) = apisix::route(&ctx, apisix).await?
    {
        return Ok(Err(reason));
    }
    if let Some(config) = plugin(routing)
        && let Err(reason) = gatewayapi::route(&ctx, config).await?
    {
        return Ok(Err(reason));
    }
    Ok(Ok(()))
}

/// Argo's reason for traffic routing without both Services.
const NO_SERVICES: &str = "spec.strategy.canary.trafficRouting: Invalid value: \"\": \
     Canary service and Stable service must to be set to use Traffic Routing";

/// The stable and canary Services, when both are named.
fn services(canary: &CanaryStrategy) -> Option<(&str, &str)> {
    fn named(name: &Option<String>) -> Option<&str> {
        name.as_deref().filter(|name| !name.is_empty())
    }
    Some((
        named(&canary.stable_service)?,
        named(&canary.canary_service)?,
    ))
}

/// `trafficRouting.managedRoutes[].name`, in their order.
fn managed_routes(routing: &TrafficRouting) -> Vec<&str> {
    routing
        .managed_routes
        .iter()
        .flatten()
        .map(|route| route.name.as_str())
        .collect()
}

/// The Gateway API plugin's config, when the Rollout is routed by it.
fn plugin(routing: &TrafficRouting) -> Option<&Value> {
    routing
        .plugins
        .as_ref()
        .and_then(|plugins| plugins.get(GATEWAY_API_PLUGIN))
}

/// The context for writing managed routes (no weights: those routes carry none of the split).
fn managed_ctx<'a>(
    client: &'a kube::Client,
    namespace: &'a str,
    rollout: &'a str,
    canary: &'a CanaryStrategy,
    routing: &'a TrafficRouting,
) -> Result<Ctx<'a>, String> {
    let (stable, canary_service) = services(canary).ok_or_else(|| NO_SERVICES.to_owned())?;
    Ok(Ctx {
        client,
        namespace,
        rollout,
        stable,
        canary: canary_service,
        weights: Weights {
            canary: 0,
            stable: 0,
        },
        max_traffic_weight: routing.max_traffic_weight,
        hashes: None,
        owner: None,
        managed_routes: managed_routes(routing),
    })
}

/// Argo's check that a step names a managed route.
fn check_managed(routing: &TrafficRouting, step: &str, name: &str) -> Result<(), String> {
    if managed_routes(routing).contains(&name) {
        return Ok(());
    }
    Err(format!(
        "spec.strategy.canary.steps[].{step}: Invalid value: \"{name}\": Steps define a route \
         that does not exist in spec.strategy.canary.trafficRouting.managedRoutes"
    ))
}

/// Argo's check that a StringMatch sets exactly one of `exact`, `regex`, `prefix`.
fn check_string_match(field: &str, matched: &StringMatch) -> Result<(), String> {
    let set = [&matched.exact, &matched.prefix, &matched.regex]
        .into_iter()
        .filter(|value| value.as_deref().is_some_and(|value| !value.is_empty()))
        .count();
    match set {
        1 => Ok(()),
        0 => Err(format!(
            "{field}: Invalid value: \"\": StringMatch value missed, match value must have one \
             of the following: exact, regex, prefix"
        )),
        _ => Err(format!(
            "{field}: Invalid value: \"\": StringMatch match value must have exactly one of the \
             following: exact, regex, prefix"
        )),
    }
}

/// Writes (or, with no `match`, removes) managed header route `route.name` in every router
/// that supports one, for Rollout `rollout` in `namespace`: Argo's `setHeaderRoute` step, which
/// sends the requests carrying the headers to the canary while the weights stay as they are.
/// Istio gets an HTTP route of that name above the others and the Gateway API plugin a rule of
/// that name in each route that takes header routes (see the modules); nginx and SMI have no
/// header routes and are left alone, as Argo leaves them. Ok(Err(reason)): the step or the
/// Rollout is invalid, or its routers cannot take the route (a Rollout routed by none of Istio
/// and the plugin, a name not in `managedRoutes`, a header value without exactly one of
/// `exact`/`prefix`/`regex`, a missing object); Err: the API failed. Writes only what changes.
pub async fn set_header_route(
    client: &kube::Client,
    namespace: &str,
    rollout: &str,
    canary: &CanaryStrategy,
    route: &SetHeaderRoute,
) -> Routed {
    const STEP: &str = "setHeaderRoute";
    let Some(routing) = canary.traffic_routing.as_ref() else {
        return Ok(Err(no_header_routes()));
    };
    if let Some(refusal) = unsupported(routing) {
        return Ok(Err(refusal));
    }
    let plugin = plugin(routing);
    if routing.istio.is_none() && plugin.is_none() {
        return Ok(Err(no_header_routes()));
    }
    let name = route.name.as_deref().unwrap_or_default();
    if let Err(reason) = check_managed(routing, STEP, name) {
        return Ok(Err(reason));
    }
    let matches: Option<&[HeaderRouteMatch]> = route.match_rules.as_deref();
    for (i, condition) in matches.into_iter().flatten().enumerate() {
        let field = format!("spec.strategy.canary.steps[].{STEP}.match[{i}]");
        if let Err(reason) = check_string_match(&field, &condition.header_value) {
            return Ok(Err(reason));
        }
    }
    let ctx = match managed_ctx(client, namespace, rollout, canary, routing) {
        Ok(ctx) => ctx,
        Err(reason) => return Ok(Err(reason)),
    };
    if let Some(istio) = &routing.istio
        && let Err(reason) =
            istio::managed(&ctx, istio, &istio::Edit::Header(name, matches)).await?
    {
        return Ok(Err(reason));
    }
    if let Some(config) = plugin
        && let Err(reason) =
            gatewayapi::header_route(&ctx, config, &gatewayapi::Edit::Header(name, matches)).await?
    {
        return Ok(Err(reason));
    }
    Ok(Ok(()))
}

/// Argo's refusal of a header route for a Rollout none of whose routers takes one, adapted.
fn no_header_routes() -> String {
    "spec.strategy.canary.steps[].setHeaderRoute: Invalid value: \"\": SetHeaderRoute requires \
     TrafficRouting, supports Istio and the argoproj-labs/gatewayAPI plugin (of the routers \
     weir's operator runs)"
        .to_owned()
}

/// The same for a mirror route: Argo's `setMirrorRoute` step, which copies the requests
/// matching method/path/headers to the canary (`percentage` of them, default 100) while they are
/// answered as before. Only Istio takes one (an HTTP route of that name above the others, see
/// the module); a Rollout routed by the Gateway API plugin is refused, since weir does not
/// write mirror rules into Gateway API routes, and one without Istio as Argo refuses it
/// ("SetMirrorRoute requires TrafficRouting, supports Istio only"). Nothing is written when
/// refused.
pub async fn set_mirror_route(
    client: &kube::Client,
    namespace: &str,
    rollout: &str,
    canary: &CanaryStrategy,
    route: &SetMirrorRoute,
) -> Routed {
    const STEP: &str = "setMirrorRoute";
    let refusal = |text: &str| {
        format!(
            "spec.strategy.canary.steps[].{STEP}: Invalid value: \"{}\": {text}",
            route.name
        )
    };
    let Some(routing) = canary.traffic_routing.as_ref() else {
        return Ok(Err(refusal(
            "SetMirrorRoute requires TrafficRouting, supports Istio only",
        )));
    };
    if let Some(refusal) = unsupported(routing) {
        return Ok(Err(refusal));
    }
    let Some(istio) = &routing.istio else {
        return Ok(Err(refusal(
            "SetMirrorRoute requires TrafficRouting, supports Istio only",
        )));
    };
    if plugin(routing).is_some() {
        return Ok(Err(format!(
            "spec.strategy.canary.trafficRouting.plugins.{GATEWAY_API_PLUGIN}: Invalid value: \
             \"{}\": weir does not write mirror routes (setMirrorRoute) into Gateway API routes",
            route.name
        )));
    }
    if let Err(reason) = check_managed(routing, STEP, &route.name) {
        return Ok(Err(reason));
    }
    let matches = route.match_rules.as_deref();
    for (i, condition) in matches.into_iter().flatten().enumerate() {
        let field = format!("spec.strategy.canary.steps[].{STEP}.match[{i}]");
        let values = [&condition.method, &condition.path]
            .into_iter()
            .flatten()
            .chain(
                condition
                    .headers
                    .iter()
                    .flat_map(|headers| headers.values()),
            );
        for value in values {
            if let Err(reason) = check_string_match(&field, value) {
                return Ok(Err(reason));
            }
        }
    }
    let ctx = match managed_ctx(client, namespace, rollout, canary, routing) {
        Ok(ctx) => ctx,
        Err(reason) => return Ok(Err(reason)),
    };
    let percentage = route.percentage.unwrap_or(100);
    istio::managed(
        &ctx,
        istio,
        &istio::Edit::Mirror(&route.name, matches, percentage),
    )
    .await
}

/// Removes every managed route (`trafficRouting.managedRoutes`) from every router: what Argo
/// does once the Rollout is fully promoted, aborted, promoted-full, or its canary has no
/// available pod, so no request is sent or copied to a canary that is going away. Istio's
/// VirtualServices lose the HTTP routes of those names, the Gateway API plugin's HTTP and gRPC
/// routes the rules of those names; nothing is written where there are none (nor with no
/// `managedRoutes`). Ok(Err(reason)): an object is missing or a router is not run by weir; Err:
/// the API failed.
pub async fn remove_managed_routes(
    client: &kube::Client,
    namespace: &str,
    rollout: &str,
    canary: &CanaryStrategy,
) -> Routed {
    let Some(routing) = canary.traffic_routing.as_ref() else {
        return Ok(Ok(()));
    };
    let names = managed_routes(routing);
    if names.is_empty() {
        return Ok(Ok(()));
    }
    if let Some(refusal) = unsupported(routing) {
        return Ok(Err(refusal));
    }
    let plugin = plugin(routing);
    if routing.istio.is_none() && plugin.is_none() {
        return Ok(Ok(()));
    }
    let ctx = match managed_ctx(client, namespace, rollout, canary, routing) {
        Ok(ctx) => ctx,
        Err(reason) => return Ok(Err(reason)),
    };
    if let Some(istio) = &routing.istio
        && let Err(reason) = istio::managed(&ctx, istio, &istio::Edit::Remove(&names)).await?
    {
        return Ok(Err(reason));
    }
    if let Some(config) = plugin
        && let Err(reason) =
            gatewayapi::header_route(&ctx, config, &gatewayapi::Edit::Remove(&names)).await?
    {
        return Ok(Err(reason));
    }
    Ok(Ok(()))
}

/// The first router weir's operator does not run, as the reason the Rollout is refused.
fn unsupported(routing: &TrafficRouting) -> Option<String> {
    let fields = [
        ("alb", routing.alb.is_some()),
        ("ambassador", routing.ambassador.is_some()),
        ("appMesh", routing.app_mesh.is_some()),
    ];
    if let Some((field, _)) = fields.iter().find(|(_, set)| *set) {
        return Some(format!(
            "spec.strategy.canary.trafficRouting.{field}: not run by weir's operator ({RUN})"
        ));
    }
    routing
        .plugins
        .iter()
        .flatten()
        .map(|(name, _)| name)
        .find(|name| *name != GATEWAY_API_PLUGIN)
        .map(|name| {
            format!(
                "spec.strategy.canary.trafficRouting.plugins.{name}: not run by weir's operator ({RUN})"
            )
        })
}

/// What every router needs.
pub(crate) struct Ctx<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
    rollout: &'a str,
    stable: &'a str,
    canary: &'a str,
    weights: Weights,
    max_traffic_weight: Option<i64>,
    hashes: Option<(&'a str, &'a str)>,
    owner: Option<&'a Value>,
    managed_routes: Vec<&'a str>,
}

/// An `ApiResource` for `group/version` `kind` (`plural`).
fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The first of `versions` of `group` the cluster serves `kind` at (API discovery), if any:
/// routers' CRDs come at several versions (Istio's v1alpha3/v1beta1/v1, SMI's v1alpha1..3) and
/// a cluster may serve only some.
async fn served_version(
    client: &kube::Client,
    group: &str,
    kind: &str,
    versions: &[&'static str],
) -> Result<Option<&'static str>, kube::Error> {
    for version in versions {
        match client
            .list_api_group_resources(&format!("{group}/{version}"))
            .await
        {
            Ok(list) => {
                if list.resources.iter().any(|resource| resource.kind == kind) {
                    return Ok(Some(version));
                }
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error),
        }
    }
    Ok(None)
}

/// A namespaced API over `resource`.
fn api(client: &kube::Client, namespace: &str, resource: &ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, resource)
}

/// The object `name`, as JSON, or None when it does not exist.
async fn get(api: &Api<DynamicObject>, name: &str) -> Result<Option<Value>, kube::Error> {
    match api.get_opt(name).await? {
        Some(object) => Ok(Some(
            serde_json::to_value(object).map_err(kube::Error::SerdeError)?,
        )),
        None => Ok(None),
    }
}

/// Creates `object`.
async fn create(api: &Api<DynamicObject>, object: Value) -> Result<(), kube::Error> {
    let object: DynamicObject = serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
    api.create(&PostParams::default(), &object).await?;
    Ok(())
}

/// Writes what changed from `before` to `after` (the same object, edited) as a merge patch
/// carrying `before`'s resourceVersion; nothing when nothing changed. Whether it wrote.
async fn write_changes(
    api: &Api<DynamicObject>,
    name: &str,
    before: &Value,
    after: &Value,
) -> Result<bool, kube::Error> {
    let mut patch = crate::argo_analysis::merge_diff(before, after);
    if patch.as_object().is_none_or(Map::is_empty) {
        return Ok(false);
    }
    if let (Some(patch), Some(version)) = (
        patch.as_object_mut(),
        before.pointer("/metadata/resourceVersion").cloned(),
    ) {
        let metadata = patch
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(metadata) = metadata.as_object_mut() {
            metadata.insert("resourceVersion".to_owned(), version);
        }
    }
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(true)
}

/// Argo's InvalidSpec wording for a referenced object that does not exist.
fn not_found(field: &str, name: &str, resource: &str) -> String {
    format!("{field}: Invalid value: \"{name}\": {resource} \"{name}\" not found")
}

/// Whether `reference` (an ownerReference list's item) is a controller reference to the same
/// object as `owner`.
fn same_owner(reference: &Value, owner: &Value) -> bool {
    if reference.get("controller").and_then(Value::as_bool) != Some(true) {
        return false;
    }
    match (reference.get("uid"), owner.get("uid")) {
        (Some(a), Some(b)) => a == b,
        _ => {
            reference.get("kind") == owner.get("kind") && reference.get("name") == owner.get("name")
        }
    }
}

/// Whether `object` is controlled by `owner` (Kubernetes' `IsControlledBy`); true when there is
/// no owner to check against.
fn owned_by(object: &Value, owner: Option<&Value>) -> bool {
    let Some(owner) = owner else {
        return true;
    };
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|references| references.iter().any(|r| same_owner(r, owner)))
}
