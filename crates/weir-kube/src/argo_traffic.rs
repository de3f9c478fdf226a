//! Argo Rollouts' traffic routers, as v1.9.1 drives them: the weights the reconcile decided
//! (`Action::RouteTraffic`) written into the objects `spec.strategy.canary.trafficRouting` names.
//!
//! Argo calls each router's `SetWeight` every reconcile with the desired canary weight (the
//! stable weight is the rest of `maxTrafficWeight`; here the caller passes both, as
//! [`Weights`]), and for Istio subset-level routing `UpdateHash` first with the canary and stable
//! pod template hashes. weir does the same for the routers its operator
//! runs: `istio` (VirtualService weights, DestinationRule subset labels), `nginx` (a canary
//! Ingress beside the stable one), `smi` (a TrafficSplit) and the `argoproj-labs/gatewayAPI`
//! plugin (backendRef weights in Gateway API routes). Every object is read first and written
//! only when it changes, as a merge patch of what changed carrying the resourceVersion that was
//! read (lists are replaced whole by a merge patch, so the version makes sure no other writer's
//! edit in between is lost; a conflict is an API error and the next reconcile reads again).
//!
//! A router whose objects are missing or cannot be split answers `Ok(Err(reason))` with the
//! reason worded as Argo's `InvalidSpec` condition words it (field path first), so the shell can
//! set that condition; an API failure is `Err`. Routers are written in the order istio, nginx,
//! smi, plugins; a failure stops the pass, and the next reconcile writes the rest.

use serde_json::{Map, Value};
use weir_core::argo::types::{CanaryStrategy, TrafficRouting};

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};

mod gatewayapi;
mod istio;
mod nginx;
mod smi;

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
const RUN: &str = "it routes with istio, nginx, smi and the argoproj-labs/gatewayAPI plugin";

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
    let (Some(stable), Some(canary_service)) = (
        canary
            .stable_service
            .as_deref()
            .filter(|name| !name.is_empty()),
        canary
            .canary_service
            .as_deref()
            .filter(|name| !name.is_empty()),
    ) else {
        return Ok(Err(
            "spec.strategy.canary.trafficRouting: Invalid value: \"\": \
             Canary service and Stable service must to be set to use Traffic Routing"
                .to_owned(),
        ));
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
        managed_routes: routing
            .managed_routes
            .iter()
            .flatten()
            .map(|route| route.name.as_str())
            .collect(),
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
    if let Some(config) = routing
        .plugins
        .as_ref()
        .and_then(|plugins| plugins.get(GATEWAY_API_PLUGIN))
        && let Err(reason) = gatewayapi::route(&ctx, config).await?
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
        ("apisix", routing.apisix.is_some()),
        ("appMesh", routing.app_mesh.is_some()),
        ("traefik", routing.traefik.is_some()),
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
