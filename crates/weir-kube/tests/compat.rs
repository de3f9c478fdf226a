//! Every Canary of the Flagger corpus (when it sits beside the project: `WEIR_COMPAT_DIR`, or
//! `../shared/compat/flagger`) gets its primary Deployment and Services the way Flagger names and
//! wires them (a Knative Service none: its revisions are the versions). Without the corpus the
//! test prints a note and passes.
//!
//! Every object the kubernetes target would write for each Canary - the primary Deployment, the
//! three Services, the primary's autoscaler, the provider's route objects at the moments of a
//! healthy run (first canary step, A/B match, mirror, or the blue/green switch) - is compared
//! with `tests/snapshots/<manifest stem>.snap` (weir's own output; update with
//! `INSTA_UPDATE=always cargo test -p weir-kube --test integration compat::` and review the diff), and checked
//! per provider without the snapshots too. A DaemonSet target gets the primary DaemonSet instead
//! of a Deployment. A Knative Service target gets no object at all: its snapshot holds the edits
//! of the user's Knative Service (the `flagger.app/primary-revision` annotation and
//! `spec.traffic`) at set-up and at the moments of the run, with `podinfo-00001` as the primary
//! revision. Canaries the target refuses would snapshot only the refusal (none in the corpus
//! today).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Value, json};
use weir_core::Weight;
use weir_core::document::{self, Document};
use weir_core::machine::{self, Effect, Input, Observations, Route};
use weir_core::model::{KubernetesService, KubernetesTarget, Phase, RolloutSpec, RolloutStatus};
use weir_kube::routes::{self, Names, Provider, RouteContext};
use weir_kube::target::REVISION_ANNOTATION;
use weir_kube::workload;
use weir_testkit::flagger_corpus;

fn corpus() -> Option<PathBuf> {
    let dir = std::env::var("WEIR_COMPAT_DIR")
        .map(PathBuf::from)
        .ok()
        .filter(|dir| dir.is_dir())
        .or_else(|| {
            let beside =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/flagger");
            beside.is_dir().then_some(beside)
        });
    if dir.is_none() {
        println!("compat corpus not found: skipped");
    }
    dir
}

/// A Deployment as a Flagger user would have it for the Canary's targetRef.
fn target_for(name: &str, namespace: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "app:1", "ports": [{"name": "http", "containerPort": 9898}]}]}
            }
        }
    }))
    .unwrap()
}

/// A DaemonSet as a Flagger user would have it for the Canary's targetRef.
fn daemon_set_for(name: &str, namespace: &str) -> DaemonSet {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "app:1", "ports": [{"name": "http", "containerPort": 9898}]}]}
            }
        }
    }))
    .unwrap()
}

/// Whether the Canary runs a Knative Service (`provider: knative`): nothing is created for it.
fn targets_a_knative_service(kubernetes: &KubernetesTarget) -> bool {
    kubernetes.provider.as_deref() == Some("knative")
}

/// Whether the Canary's targetRef is a DaemonSet.
fn targets_a_daemon_set(kubernetes: &KubernetesTarget) -> bool {
    kubernetes
        .target_ref
        .as_ref()
        .is_some_and(|reference| reference.kind.as_deref() == Some("DaemonSet"))
}

#[test]
fn every_corpus_canary_gets_flaggers_primary_and_services() {
    let Some(dir) = corpus() else { return };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("canaries"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let mut checked = 0;
    let mut knative = 0;
    for file in &files {
        for loaded in document::load(&std::fs::read(file).unwrap()) {
            let loaded = loaded.unwrap_or_else(|refused| panic!("{}: {refused:?}", file.display()));
            let Document::Rollout(rollout) = loaded.document else {
                continue;
            };
            let kubernetes = rollout
                .spec
                .target
                .kubernetes()
                .expect("a kubernetes target");
            if targets_a_knative_service(kubernetes) {
                // No primary copy and no Services: the snapshots show its traffic edits.
                knative += 1;
                continue;
            }
            let target_name = kubernetes.target_ref.as_ref().unwrap().name.clone();
            let namespace = rollout.metadata.namespace_or_default().to_string();
            let target = target_for(&target_name, &namespace);
            let owner = OwnerReference {
                api_version: "flagger.app/v1beta1".into(),
                kind: "Canary".into(),
                name: rollout.metadata.name.clone(),
                uid: "u".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            };
            let service = kubernetes.service.clone().unwrap_or_default();
            let configs = workload::TrackedConfigs::new();
            let (primary_name, services) = if targets_a_daemon_set(kubernetes) {
                let target = daemon_set_for(&target_name, &namespace);
                let primary = workload::daemon_set::primary(&target, &configs, &owner)
                    .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
                (
                    primary.metadata.name,
                    workload::services(&target, &service, &owner),
                )
            } else {
                let primary = workload::primary_deployment(&target, &configs, &owner)
                    .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
                (
                    primary.metadata.name,
                    workload::services(&target, &service, &owner),
                )
            };
            assert_eq!(primary_name, Some(format!("{target_name}-primary")));
            let [apex, primary_service, canary] =
                services.unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            let apex_name = service.name.clone().unwrap_or(target_name.clone());
            assert_eq!(apex.metadata.name.as_deref(), Some(apex_name.as_str()));
            assert_eq!(
                primary_service.metadata.name,
                Some(format!("{apex_name}-primary"))
            );
            assert_eq!(canary.metadata.name, Some(format!("{apex_name}-canary")));
            let port = &apex.spec.unwrap().ports.unwrap()[0];
            if let Some(expected) = service.port {
                assert_eq!(
                    i64::from(port.port),
                    i64::from(expected),
                    "{}",
                    file.display()
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 62, "canaries checked");
    assert_eq!(knative, 3, "Knative canaries (nothing created)");
    println!(
        "{checked} corpus canaries: primary Deployment (or DaemonSet) and three Services each; \
         {knative} Knative Services: none"
    );
}

// === snapshots of everything the kubernetes target writes ===

/// Flagger's Canary becomes a rollout owned like this (`owner_of` in the target).
fn owner_of(rollout: &weir_core::model::Rollout) -> OwnerReference {
    OwnerReference {
        api_version: rollout.api_version.clone(),
        kind: rollout.kind.clone(),
        name: rollout.metadata.name.clone(),
        uid: "uid-of-the-rollout".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// What the kubernetes target refuses before writing anything (its `settings`): a target that is
/// neither a Deployment nor a DaemonSet (nor, with `provider: knative`, a Knative Service, which
/// the provider's router checks), a DaemonSet with a plan other than blue/green, an autoscaler
/// that is neither an HPA nor a KEDA ScaledObject (any autoscaler for a Knative Service), a
/// provider weir does not drive, what the provider cannot express of the rollout (its router's
/// validation).
fn refusals(spec: &RolloutSpec, kubernetes: &KubernetesTarget) -> (Vec<String>, Option<Provider>) {
    let mut refused = Vec::new();
    let knative = targets_a_knative_service(kubernetes);
    if knative && kubernetes.autoscaler_ref.is_some() {
        refused.push("spec.target.autoscalerRef: Knative scales its revisions itself".into());
    }
    if let Some(kind) = kubernetes
        .target_ref
        .as_ref()
        .and_then(|reference| reference.kind.as_deref())
        .filter(|kind| !knative && *kind != "Deployment" && *kind != "DaemonSet")
    {
        refused.push(format!(
            "spec.target.targetRef.kind: {kind} is not rolled out yet"
        ));
    }
    if targets_a_daemon_set(kubernetes) && spec.plan.strategy_name() != "blueGreen" {
        refused.push(format!(
            "spec.plan.{}: a DaemonSet is rolled out blue/green only",
            spec.plan.strategy_name()
        ));
    }
    if let Some(kind) = kubernetes
        .autoscaler_ref
        .as_ref()
        .and_then(|reference| reference.kind.as_deref())
        .filter(|kind| !knative && *kind != "HorizontalPodAutoscaler" && *kind != "ScaledObject")
    {
        refused.push(format!(
            "spec.target.autoscalerRef.kind: {kind} is not copied yet"
        ));
    }
    let provider = match Provider::parse(kubernetes.provider.as_deref()) {
        Ok(provider) => {
            refused.extend(
                provider
                    .router()
                    .validate(spec, kubernetes)
                    .iter()
                    .map(ToString::to_string),
            );
            Some(provider)
        }
        Err(message) => {
            refused.push(message);
            None
        }
    };
    (refused, provider)
}

/// The user's objects the providers read, as a Flagger user has them for the Canary
/// (`weir_testkit::flagger_corpus`, as the operator's corpus run applies them): an Ingress
/// (`ingressRef`) and an ApisixRoute (`routeRef`) sending `app.example.com` to the apex Service,
/// an Upstream (`upstreamRef`) with connection settings.
fn user_objects(kubernetes: &KubernetesTarget, names: &Names) -> routes::Inputs {
    let mut inputs = routes::Inputs::new();
    let port = i64::from(names.port);
    if let Some(reference) = &kubernetes.ingress_ref {
        inputs.insert(flagger_corpus::ingress(
            &reference.name,
            &names.namespace,
            &names.apex,
            port,
        ));
    }
    if let Some(reference) = &kubernetes.route_ref {
        inputs.insert(flagger_corpus::apisix_route(
            &reference.name,
            &names.namespace,
            &names.apex,
            port,
        ));
    }
    if let Some(reference) = &kubernetes.upstream_ref {
        inputs.insert(flagger_corpus::upstream(&reference.name, &names.namespace));
    }
    inputs
}

/// The Services' names and port as the target derives them for a route (`Settings::names`,
/// with the Services' own port).
fn names_of(
    kubernetes: &KubernetesTarget,
    target: &impl workload::Workload,
    namespace: &str,
    target_name: &str,
) -> Names {
    let service = kubernetes.service.clone().unwrap_or_default();
    let apex = service
        .name
        .clone()
        .unwrap_or_else(|| target_name.to_string());
    Names {
        namespace: namespace.to_string(),
        primary: format!("{apex}-primary"),
        canary: format!("{apex}-canary"),
        apex,
        port: workload::service_port(target, &service).unwrap(),
    }
}

/// The target's HorizontalPodAutoscaler as a Flagger user would have it.
fn autoscaler_for(name: &str, namespace: &str, target_name: &str) -> HorizontalPodAutoscaler {
    serde_json::from_value(flagger_corpus::horizontal_pod_autoscaler(
        name,
        namespace,
        "Deployment",
        target_name,
    ))
    .unwrap()
}

/// Every route the machine sets in a healthy run of a new revision, from set-up to the end.
fn routes_of_a_healthy_run(spec: &RolloutSpec) -> Vec<Route> {
    let mut status = RolloutStatus::default();
    let mut now = Timestamp::from_second(1_800_000_000).unwrap();
    let mut setup = Observations::ready(Some("v1".into()));
    setup.primary_revision = Some("v1".into());
    let mut input = Input::Tick(setup);
    let mut routes = Vec::new();
    for _ in 0..500 {
        let transition = machine::step(spec, &status, &input, now).unwrap();
        status = transition.status;
        routes.extend(
            transition
                .effects
                .into_iter()
                .filter_map(|effect| match effect {
                    Effect::SetRoute(route) => Some(route),
                    _ => None,
                }),
        );
        if matches!(status.phase, Phase::Succeeded | Phase::Failed) {
            break;
        }
        let interval = SignedDuration::try_from(spec.analysis.interval.get()).unwrap();
        now = now.checked_add(interval).unwrap();
        input = Input::Tick(Observations::healthy(spec, Some("v2".into())));
    }
    assert_eq!(status.phase, Phase::Succeeded, "a healthy run succeeds");
    routes
}

/// The moments of a run worth a snapshot: the first mirrored route, the first A/B route, the
/// first canary weight between 0 and 100% (the first step), and for plans that never split
/// (blue/green, mirror, A/B) the switch to the canary; without any of these, the set-up route.
fn moments(routes: &[Route]) -> Vec<(String, Route)> {
    let mut moments = Vec::new();
    if let Some(route) = routes.iter().find(|route| route.mirror_weight.is_some()) {
        moments.push((
            format!("mirror {}", route.mirror_weight.unwrap()),
            route.clone(),
        ));
    }
    if let Some(route) = routes.iter().find(|route| !route.match_rules.is_empty()) {
        moments.push(("A/B match".to_string(), route.clone()));
    }
    let split = |route: &&Route| {
        let canary = route.canary_weight.basis_points();
        canary > 0 && canary < 10_000
    };
    if let Some(route) = routes.iter().find(split) {
        moments.push((format!("canary {}", route.canary_weight), route.clone()));
    } else if let Some(route) = routes
        .iter()
        .find(|route| route.canary_weight == Weight::FULL)
    {
        moments.push(("switch: canary 100%".to_string(), route.clone()));
    }
    // A run that skips its analysis goes straight to promotion: the set-up route is all.
    if moments.is_empty()
        && let Some(route) = routes.first()
    {
        moments.push((
            format!("set-up: canary {}", route.canary_weight),
            route.clone(),
        ));
    }
    moments
}

fn provider_label(provider: Provider) -> &'static str {
    provider.name()
}

fn weights(routes: &[Value], field: &str) -> Vec<i64> {
    routes
        .iter()
        .map(|route| {
            route[field]
                .as_i64()
                .unwrap_or_else(|| panic!("an integer {field}: {route}"))
        })
        .collect()
}

/// The cookie routes session affinity puts first: the canary's while it has traffic, the
/// primary's (with `primaryCookieName`) while traffic is split.
fn sticky_routes(route: &Route) -> usize {
    let Some(affinity) = &route.session_affinity else {
        return 0;
    };
    let canary = route.canary_weight.basis_points();
    usize::from(canary > 0)
        + usize::from(affinity.primary_cookie_name.is_some() && canary > 0 && canary < 10_000)
}

/// The run the routes of `routes_of_a_healthy_run` belong to: the rollout's first.
const RUN: u64 = 1;

/// What holds for a provider's objects whatever the snapshots say.
fn check_route_objects(
    provider: Provider,
    names: &Names,
    service: &KubernetesService,
    route: &Route,
    objects: &[Value],
    context: &str,
) {
    let kinds: Vec<&str> = objects
        .iter()
        .map(|object| object["kind"].as_str().unwrap())
        .collect();
    for object in objects {
        // Kuma's TrafficRoute is cluster-scoped: no namespace, no owner.
        if provider == Provider::Kuma {
            assert_eq!(object["metadata"].get("namespace"), None, "{context}");
            continue;
        }
        assert_eq!(
            object["metadata"]["namespace"],
            json!(names.namespace),
            "{context}"
        );
        assert_eq!(
            object["metadata"]["ownerReferences"][0]["controller"],
            json!(true),
            "{context}"
        );
    }
    match provider {
        Provider::Istio => {
            assert_eq!(
                kinds,
                ["VirtualService", "DestinationRule", "DestinationRule"],
                "{context}"
            );
            let virtual_service = &objects[0];
            assert_eq!(
                virtual_service["metadata"]["name"],
                json!(names.apex),
                "{context}"
            );
            let hosts = virtual_service["spec"]["hosts"].as_array().unwrap();
            assert!(
                hosts.contains(&json!(names.apex)),
                "{context}: hosts {hosts:?}"
            );
            let http = virtual_service["spec"]["http"].as_array().unwrap();
            let sticky = sticky_routes(route);
            assert_eq!(
                http.len(),
                sticky + 1 + usize::from(!route.match_rules.is_empty()),
                "{context}"
            );
            if sticky > 0 {
                let cookie = &route.session_affinity.as_ref().unwrap().cookie_name;
                let regex = http[0]["match"][0]["headers"]["cookie"]["regex"]
                    .as_str()
                    .unwrap();
                assert!(regex.contains(&format!("({cookie}=")), "{context}: {regex}");
                assert_eq!(
                    http[0]["route"][0]["destination"]["host"],
                    json!(names.canary),
                    "{context}"
                );
                let set_cookie =
                    http[http.len() - 1]["route"][1]["headers"]["response"]["add"]["Set-Cookie"]
                        .as_str()
                        .unwrap();
                assert!(
                    set_cookie.starts_with(&format!("{cookie}=")),
                    "{context}: {set_cookie}"
                );
            }
            for rule in http {
                let destinations = rule["route"].as_array().unwrap();
                assert_eq!(
                    weights(destinations, "weight").iter().sum::<i64>(),
                    100,
                    "{context}: {rule}"
                );
            }
            let default = &http[http.len() - 1]["route"];
            assert_eq!(
                default[0]["destination"]["host"],
                json!(names.primary),
                "{context}"
            );
            assert_eq!(
                default[1]["destination"]["host"],
                json!(names.canary),
                "{context}"
            );
            if !route.match_rules.is_empty() {
                assert_eq!(
                    http[0]["match"].as_array().unwrap().len(),
                    route.match_rules.len(),
                    "{context}"
                );
                assert_eq!(
                    http[0]["route"][0]["destination"]["host"],
                    json!(names.canary),
                    "{context}"
                );
            }
            if route.mirror_weight.is_some() {
                assert_eq!(
                    http[http.len() - 1]["mirror"]["host"],
                    json!(names.canary),
                    "{context}"
                );
            }
            assert_eq!(
                objects[1]["metadata"]["name"],
                json!(names.primary),
                "{context}"
            );
            assert_eq!(
                objects[1]["spec"]["host"],
                json!(names.primary),
                "{context}"
            );
            assert_eq!(
                objects[2]["metadata"]["name"],
                json!(names.canary),
                "{context}"
            );
            assert_eq!(objects[2]["spec"]["host"], json!(names.canary), "{context}");
        }
        Provider::GatewayApi(api_version) => {
            assert_eq!(kinds, ["HTTPRoute"], "{context}");
            let http_route = &objects[0];
            assert_eq!(http_route["apiVersion"], json!(api_version), "{context}");
            assert_eq!(
                http_route["metadata"]["name"],
                json!(names.apex),
                "{context}"
            );
            assert_eq!(
                http_route["spec"].get("parentRefs"),
                service.gateway_refs.as_ref(),
                "{context}"
            );
            let rules = http_route["spec"]["rules"].as_array().unwrap();
            let sticky = sticky_routes(route);
            assert_eq!(
                rules.len(),
                sticky + 1 + usize::from(!route.match_rules.is_empty()),
                "{context}"
            );
            if sticky > 0 {
                let cookie = &route.session_affinity.as_ref().unwrap().cookie_name;
                let header = &rules[0]["matches"][0]["headers"][0];
                assert_eq!(header["type"], json!("RegularExpression"), "{context}");
                assert!(
                    header["value"]
                        .as_str()
                        .unwrap()
                        .contains(&format!("({cookie}=")),
                    "{context}: {header}"
                );
                assert_eq!(
                    rules[0]["backendRefs"][0]["name"],
                    json!(names.canary),
                    "{context}"
                );
                let filter = &rules[rules.len() - 1]["backendRefs"][1]["filters"][0];
                assert_eq!(filter["type"], json!("ResponseHeaderModifier"), "{context}");
                assert_eq!(
                    filter["responseHeaderModifier"]["add"][0]["name"],
                    json!("Set-Cookie"),
                    "{context}"
                );
            }
            let default = rules[rules.len() - 1]["backendRefs"].as_array().unwrap();
            assert_eq!(default[0]["name"], json!(names.primary), "{context}");
            assert_eq!(default[1]["name"], json!(names.canary), "{context}");
            // Whole percent, as Flagger writes them (these plans have no finer steps).
            assert_eq!(
                weights(default, "weight").iter().sum::<i64>(),
                100,
                "{context}"
            );
            assert_eq!(
                weights(default, "weight")[1],
                i64::from(route.canary_weight.basis_points() / 100),
                "{context}"
            );
            if !route.match_rules.is_empty() {
                assert_eq!(
                    rules[0]["backendRefs"][0]["name"],
                    json!(names.canary),
                    "{context}"
                );
            }
        }
        Provider::Smi(_) => {
            assert_eq!(kinds, ["TrafficSplit"], "{context}");
            let split = &objects[0]["spec"];
            assert_eq!(split["service"], json!(names.apex), "{context}");
            let backends = split["backends"].as_array().unwrap();
            assert_eq!(backends[0]["service"], json!(names.primary), "{context}");
            assert_eq!(backends[1]["service"], json!(names.canary), "{context}");
            assert_eq!(
                weights(backends, "weight").iter().sum::<i64>(),
                100,
                "{context}"
            );
        }
        Provider::Kubernetes | Provider::Knative => {
            assert!(objects.is_empty(), "{context}: no route object")
        }
        // The other providers' objects are checked per step by the table in
        // src/routes/table.rs and against their CRDs by tests/route_crds.rs.
        _ => {
            let owned: Vec<routes::ObjectRef> = objects.iter().map(routes::ObjectRef::of).collect();
            assert!(!owned.is_empty(), "{context}: objects");
        }
    }
}

/// The routes of `moments` with `provider`, checked, as snapshot entries.
fn rendered_routes(
    provider: Provider,
    ctx: &RouteContext<'_>,
    moments: &[(String, Route)],
    context: &str,
) -> Vec<Value> {
    let (names, service) = (ctx.names, ctx.service);
    moments
        .iter()
        .map(|(moment, route)| {
            let context = format!("{context}, {} at {moment}", provider_label(provider));
            match provider.router().objects(ctx, route) {
                Ok(rendered) => {
                    check_route_objects(
                        provider,
                        names,
                        service,
                        route,
                        &rendered.objects,
                        &context,
                    );
                    let mut entry = json!({"at": moment, "objects": rendered.objects});
                    if let Some(adjusted) = rendered.adjusted {
                        entry["adjusted"] = json!(adjusted);
                    }
                    entry
                }
                Err(refused) => {
                    assert_eq!(provider, Provider::Kubernetes, "{context}: {refused}");
                    json!({"at": moment, "refused": refused})
                }
            }
        })
        .collect()
}

/// The primary revision the Knative snapshots are rendered with.
const KNATIVE_PRIMARY: &str = "podinfo-00001";

/// What the target writes to a Knative Service, as snapshot entries: its set-up (all traffic on
/// the first revision) and the route at each of the run's moments, all edits of the user's
/// Service (no object of weir's), checked.
fn knative_edits(
    rollout: &weir_core::model::Rollout,
    kubernetes: &KubernetesTarget,
    context: &str,
) -> Vec<Value> {
    let namespace = rollout.metadata.namespace_or_default().to_string();
    let name = kubernetes.target_ref.as_ref().unwrap().name.clone();
    let names = Names {
        namespace: namespace.clone(),
        primary: format!("{name}-primary"),
        canary: format!("{name}-canary"),
        apex: name.clone(),
        port: 80,
    };
    let service = KubernetesService::default();
    // The user's Service gets no owner reference.
    let owner = Value::Null;
    let ctx = RouteContext {
        target: kubernetes,
        annotations: &rollout.metadata.annotations,
        resolution: routes::resolution(&rollout.spec),
        primary_revision: Some(KNATIVE_PRIMARY),
        ..RouteContext::new(&names, &service, RUN, &owner)
    };
    let set_up = Route {
        primary_weight: Weight::FULL,
        canary_weight: Weight::ZERO,
        mirror_weight: None,
        match_rules: Vec::new(),
        session_affinity: None,
    };
    let mut moments = vec![("set-up".to_string(), set_up)];
    moments.extend(self::moments(&routes_of_a_healthy_run(&rollout.spec)));
    moments
        .iter()
        .map(|(moment, route)| {
            let context = format!("{context}, knative at {moment}");
            let rendered = Provider::Knative
                .router()
                .objects(&ctx, route)
                .unwrap_or_else(|refused| panic!("{context}: {refused}"));
            assert!(
                rendered.objects.is_empty(),
                "{context}: no object of weir's"
            );
            assert_eq!(rendered.edits.len(), 1, "{context}");
            let edit = &rendered.edits[0];
            assert_eq!(edit["metadata"]["name"], json!(name), "{context}");
            assert_eq!(edit["metadata"]["namespace"], json!(namespace), "{context}");
            assert!(
                edit["metadata"].get("ownerReferences").is_none(),
                "{context}"
            );
            assert_eq!(
                edit["metadata"]["annotations"]["flagger.app/primary-revision"],
                json!(KNATIVE_PRIMARY),
                "{context}"
            );
            let traffic = edit["spec"]["traffic"].as_array().unwrap();
            assert_eq!(
                weights(traffic, "percent").iter().sum::<i64>(),
                100,
                "{context}"
            );
            assert_eq!(traffic[0]["latestRevision"], json!(true), "{context}");
            assert_eq!(
                traffic[0]["percent"],
                json!((route.canary_weight.basis_points() + 50) / 100),
                "{context}"
            );
            assert_eq!(
                traffic[1]["revisionName"],
                json!(KNATIVE_PRIMARY),
                "{context}"
            );
            let mut entry = json!({"at": moment, "edits": rendered.edits});
            if let Some(adjusted) = rendered.adjusted {
                entry["adjusted"] = json!(adjusted);
            }
            entry
        })
        .collect()
}

#[test]
fn every_corpus_canary_gets_its_objects_as_in_the_snapshots() {
    let Some(dir) = corpus() else { return };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("canaries"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    let _bound = settings.bind_to_scope();
    let mut per_provider: BTreeMap<String, usize> = BTreeMap::new();
    let mut snapshots = 0;
    for file in &files {
        let stem = file.file_stem().unwrap().to_string_lossy().to_string();
        let mut canaries = Vec::new();
        for loaded in document::load(&std::fs::read(file).unwrap()) {
            let Document::Rollout(rollout) = loaded.unwrap().document else {
                continue;
            };
            let context = format!("{stem}: {}", rollout.metadata.name);
            let kubernetes = rollout.spec.target.kubernetes().unwrap();
            let target_name = kubernetes.target_ref.as_ref().unwrap().name.clone();
            let namespace = rollout.metadata.namespace_or_default().to_string();
            let target = target_for(&target_name, &namespace);
            let owner = owner_of(&rollout);
            let owner_value = serde_json::to_value(&owner).unwrap();
            let service = kubernetes.service.clone().unwrap_or_default();
            let (refused, provider) = refusals(&rollout.spec, kubernetes);

            let mut canary = json!({
                "rollout": rollout.metadata.name,
                "plan": rollout.spec.plan.strategy_name(),
                "provider": kubernetes.provider.clone().unwrap_or_else(|| "istio (unset)".into()),
            });
            let provider = match provider {
                Some(provider) if refused.is_empty() => provider,
                _ => {
                    // The target refuses the rollout before it writes anything.
                    let label = match provider {
                        Some(provider) => format!("{} (refused)", provider_label(provider)),
                        None => format!(
                            "{} (not driven)",
                            kubernetes.provider.clone().unwrap_or_default()
                        ),
                    };
                    *per_provider.entry(label).or_default() += 1;
                    canary["refused"] = json!(refused);
                    canaries.push(canary);
                    continue;
                }
            };
            *per_provider
                .entry(provider_label(provider).into())
                .or_default() += 1;

            if provider == Provider::Knative {
                canary["routes"] = json!(knative_edits(&rollout, kubernetes, &context));
                canaries.push(canary);
                continue;
            }
            let configs = workload::TrackedConfigs::new();
            let daemon_set =
                targets_a_daemon_set(kubernetes).then(|| daemon_set_for(&target_name, &namespace));
            let (primary, services, names) = match &daemon_set {
                Some(daemon_set) => {
                    let mut primary =
                        workload::daemon_set::primary(daemon_set, &configs, &owner).unwrap();
                    primary
                        .metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(
                            REVISION_ANNOTATION.into(),
                            workload::daemon_set::revision(daemon_set, &configs),
                        );
                    (
                        serde_json::to_value(&primary).unwrap(),
                        workload::services(daemon_set, &service, &owner).unwrap(),
                        names_of(kubernetes, daemon_set, &namespace, &target_name),
                    )
                }
                None => {
                    let mut primary =
                        workload::primary_deployment(&target, &configs, &owner).unwrap();
                    primary
                        .metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(
                            REVISION_ANNOTATION.into(),
                            workload::revision(&target, &configs),
                        );
                    (
                        serde_json::to_value(&primary).unwrap(),
                        workload::services(&target, &service, &owner).unwrap(),
                        names_of(kubernetes, &target, &namespace, &target_name),
                    )
                }
            };
            let mut workload_objects = vec![primary];
            for service in services {
                workload_objects.push(serde_json::to_value(&service).unwrap());
            }
            if let Some(reference) = &kubernetes.autoscaler_ref
                && reference
                    .kind
                    .as_deref()
                    .is_none_or(|kind| kind == "HorizontalPodAutoscaler")
            {
                let autoscaler = autoscaler_for(&reference.name, &namespace, &target_name);
                let copy = workload::primary_autoscaler(&autoscaler, &target_name, &owner);
                assert_eq!(
                    copy.spec.scale_target_ref.name,
                    format!("{target_name}-primary"),
                    "{context}"
                );
                assert_eq!(
                    copy.spec.min_replicas, autoscaler.spec.min_replicas,
                    "{context}"
                );
                workload_objects.push(serde_json::to_value(&copy).unwrap());
            }
            if let Some(reference) = &kubernetes.autoscaler_ref
                && reference.kind.as_deref() == Some("ScaledObject")
            {
                let scaled_object =
                    flagger_corpus::scaled_object(&reference.name, &namespace, &target_name);
                let copy = workload::primary_scaled_object(
                    &scaled_object,
                    &target_name,
                    &owner,
                    reference.primary_scaler_queries.as_ref(),
                    reference.primary_scaler_replicas.as_ref(),
                );
                assert_eq!(
                    copy["spec"]["scaleTargetRef"]["name"],
                    json!(format!("{target_name}-primary")),
                    "{context}"
                );
                workload_objects.push(copy);
            }

            canary["workload"] = json!(workload_objects);
            assert_eq!(
                workload_objects[1]["spec"]["ports"][0]["port"],
                json!(names.port),
                "{context}: the routes name the Services' port"
            );
            if let Some(port) = service.port {
                assert_eq!(i64::from(names.port), i64::from(port), "{context}");
            }
            let moments = moments(&routes_of_a_healthy_run(&rollout.spec));
            assert!(!moments.is_empty(), "{context}: a run routes traffic");
            let inputs = user_objects(kubernetes, &names);
            let ctx = RouteContext {
                target: kubernetes,
                annotations: &rollout.metadata.annotations,
                resolution: routes::resolution(&rollout.spec),
                inputs: &inputs,
                ..RouteContext::new(&names, &service, RUN, &owner_value)
            };
            canary["routes"] = json!(rendered_routes(provider, &ctx, &moments, &context));
            // Flagger's tutorials and end-to-end tests for the Gateway API (and Linkerd's) leave
            // the provider to the install (`-mesh-provider=gatewayapi:v1`): render them that way
            // too.
            if kubernetes.provider.is_none() && service.gateway_refs.is_some() {
                let gateway = Provider::GatewayApi("gateway.networking.k8s.io/v1");
                *per_provider
                    .entry("gatewayapi:v1 (install default)".into())
                    .or_default() += 1;
                canary["routesAsInstalledWithGatewayApi"] =
                    json!(rendered_routes(gateway, &ctx, &moments, &context));
            }
            // Flagger's NGINX end-to-end tests leave it to the install too
            // (`-mesh-provider=nginx`).
            if kubernetes.provider.is_none() && kubernetes.ingress_ref.is_some() {
                *per_provider
                    .entry("nginx (install default)".into())
                    .or_default() += 1;
                canary["routesAsInstalledWithNginx"] =
                    json!(rendered_routes(Provider::Nginx, &ctx, &moments, &context));
            }
            canaries.push(canary);
        }
        assert_eq!(canaries.len(), 1, "{stem}: one Canary per manifest");
        let mut snapshot = canaries.pop().unwrap();
        snapshot["source"] = json!(format!(
            "canaries/{}",
            file.file_name().unwrap().to_string_lossy()
        ));
        insta::assert_yaml_snapshot!(stem.as_str(), snapshot);
        snapshots += 1;
    }
    assert_eq!(snapshots, 65, "manifests snapshotted");
    let summary: Vec<String> = per_provider
        .iter()
        .map(|(provider, count)| format!("{provider} {count}"))
        .collect();
    println!(
        "{snapshots} corpus manifests snapshotted; routes by provider: {}",
        summary.join(", ")
    );
}
