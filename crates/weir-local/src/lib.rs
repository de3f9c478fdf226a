//! The `local` target: weir's embedded router in front of two versions of a service, each a URL
//! already serving or a command weir starts. Also the metric source of the builtin checks
//! (`request-success-rate`, `request-duration`), read from the router's per-version counters.
//!
//! Which definition the primary runs follows the committed status: once a canary is promoted
//! (`status.primaryRevision` equals the canary definition's revision), the canary's process
//! becomes the primary and the old primary is stopped; after a restart the same rule brings the
//! same processes back.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod process;
mod telemetry;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, oneshot};
use weir_core::machine::{Effect, Route, Scale};
use weir_core::model::local::{LocalTarget, VersionSpec};
use weir_core::model::{
    CheckOutcome, CheckResult, Metric, REQUEST_DURATION, REQUEST_SUCCESS_RATE, Rollout,
    RolloutStatus, StringMatch, TargetKind,
};
use weir_core::{FieldError, Weight};
use weir_engine::{
    BoxFuture, MetricSource, ProviderError, Providers, TargetObservation, TargetProvider,
};
use weir_http::HttpClient;
use weir_http::policy::{ListenPolicy, OutboundPolicy};
use weir_router::metrics::{MetricsSnapshot, Traffic};
use weir_router::{Backend, ConnectGuard, RouteHandle, RouteSpec, Router, RouterConfig, Upstream};
use weir_router::{Condition, MatchBlock, Matcher, Subject};
use weir_store::RolloutKey;

use self::process::VersionProcess;
use crate::telemetry::{LocalRouters, RouterEntry};

/// Local targets for every local rollout of this process.
#[derive(Clone, Default)]
pub struct LocalTargets {
    rollouts: Arc<Mutex<HashMap<RolloutKey, Arc<AsyncMutex<LocalRollout>>>>>,
    /// Health checks; under the outbound policy when there is one.
    client: HttpClient,
    router_config: RouterConfig,
    /// Where routers may listen (`spec.target.listen`); any address by default.
    listen_policy: ListenPolicy,
    /// Each rollout's router and roles, readable without the async locks (for `/metrics`).
    routers: LocalRouters,
    /// Whether versions given as a `command` may be started. Off unless the process's owner
    /// said so (`weir run`, `weir serve --allow-commands`): a rollout sent to an API must not
    /// be able to run programs on the server's host (docs/SECURITY.md).
    commands_allowed: bool,
}

/// What a refusal to start a command says: the setting that allows it, and where to read why.
const COMMANDS_REFUSED: &str = "a version this server starts itself: `weir serve` runs commands only when started with --allow-commands (docs/SECURITY.md); give the version a `url` instead, or run the file with `weir run`";

/// One running version.
struct Running {
    revision: String,
    upstream: Upstream,
    /// `None` for a URL version (weir does not own it).
    process: Option<VersionProcess>,
    /// Whether the history already says the outbound policy refuses this version's address
    /// (said once, not at every health check).
    refusal_noted: bool,
}

/// weir's outbound policy as the router's guard of new upstream connections.
#[derive(Debug)]
struct OutboundGuard(Arc<OutboundPolicy>);

impl ConnectGuard for OutboundGuard {
    fn check(&self, host: &str, address: SocketAddr) -> Result<(), String> {
        self.0
            .check(Some(host), address)
            .map_err(|refusal| refusal.to_string())
    }
}

#[derive(Default)]
struct LocalRollout {
    /// The address the router is bound to (or reserved on), once it is.
    listen: Option<SocketAddr>,
    /// A socket bound ahead of the router ([`LocalTargets::reserve_listener`]).
    reserved: Option<tokio::net::TcpListener>,
    /// Why the router could not bind its address, as last noted in the history (said again only
    /// when the reason changes, not at every tick).
    listen_failure: Option<String>,
    /// What to record in the history at the end of the current job.
    notes: Vec<String>,
    router: Option<RouteHandle>,
    stop_router: Option<oneshot::Sender<()>>,
    primary: Option<Running>,
    canary: Option<Running>,
    /// The last route applied, re-applied when versions change underneath it.
    route: Option<Route>,
    /// Counters at the previous observation, and what happened since.
    last_snapshot: Option<MetricsSnapshot>,
    window: Option<MetricsSnapshot>,
    /// Counters at the previous judge window (the judges read on their own clock).
    judge_snapshot: Option<MetricsSnapshot>,
}

/// A local rollout's target settings (weir-core checked them when the document was read), with
/// every version URL one the router can forward to; each problem names its path.
pub fn settings(rollout: &Rollout) -> Result<&LocalTarget, Vec<FieldError>> {
    let Some(config) = rollout.spec.target.local() else {
        return Err(vec![FieldError::with_value(
            "spec.target.kind",
            format!("{:?}", rollout.spec.target.kind()).to_lowercase(),
            "this provider runs local targets (kind: local)",
        )]);
    };
    let errors: Vec<FieldError> = [("primary", &config.primary), ("canary", &config.canary)]
        .into_iter()
        .filter_map(|(name, version)| {
            let url = version.url.as_ref()?;
            let reason = url.parse::<Upstream>().err()?;
            Some(FieldError::with_value(
                format!("spec.target.{name}.url"),
                format!("{url:?}"),
                reason,
            ))
        })
        .collect();
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(errors)
    }
}

fn error(text: impl Into<String>) -> ProviderError {
    ProviderError::transient(text)
}

impl LocalTargets {
    /// Local targets using the router settings given. They start no `command` versions until
    /// [`LocalTargets::allowing_commands`] says they may.
    pub fn new(router_config: RouterConfig) -> LocalTargets {
        LocalTargets {
            router_config,
            ..LocalTargets::default()
        }
    }

    /// The same targets, allowed to start `command` versions: for a person running their own
    /// file (`weir run`, `weir demo`) or a server whose operator chose so (`--allow-commands`).
    pub fn allowing_commands(mut self) -> LocalTargets {
        self.commands_allowed = true;
        self
    }

    /// The same targets connecting only where `policy` allows: the routers' upstreams (checked
    /// once per new connection, on the addresses their names resolve to), the versions' health
    /// checks, and, when a rollout is applied, version URLs written as literal addresses.
    pub fn with_outbound(mut self, policy: Arc<OutboundPolicy>) -> LocalTargets {
        self.client = HttpClient::with_policy(Arc::clone(&policy));
        self.router_config.connect_guard = Some(Arc::new(OutboundGuard(policy)));
        self
    }

    /// The same targets letting routers listen only where `policy` allows (checked when a
    /// rollout is applied, and again before a router binds, for rollouts stored earlier).
    /// Versions weir starts itself are always given a loopback port.
    pub fn with_listen_policy(mut self, policy: ListenPolicy) -> LocalTargets {
        self.listen_policy = policy;
        self
    }

    /// What this process's network policies refuse in a rollout's addresses (its listen address,
    /// its versions' URLs written as literal addresses), each naming its field and the setting
    /// that would allow it.
    fn policy_errors(&self, config: &LocalTarget) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if let Err(refusal) = self.listen_policy.check(config.listen) {
            errors.push(FieldError::with_value(
                "spec.target.listen",
                format!("{:?}", config.listen.to_string()),
                refusal.to_string(),
            ));
        }
        let Some(policy) = self.client.policy() else {
            return errors;
        };
        for (name, version) in [("primary", &config.primary), ("canary", &config.canary)] {
            let Some(url) = &version.url else { continue };
            let Ok(upstream) = url.parse::<Upstream>() else {
                continue; // reported by `settings`
            };
            let authority = upstream.authority();
            let port = authority.port_u16().unwrap_or(80);
            if let Err(refusal) = policy.check_host(authority.host(), port) {
                errors.push(FieldError::with_value(
                    format!("spec.target.{name}.url"),
                    format!("{url:?}"),
                    refusal.to_string(),
                ));
            }
        }
        errors
    }

    /// `providers` with these targets added: the target of `kind: local` rollouts, and the
    /// metric source of their builtin checks (the router's own counters). The source is asked
    /// after the ones already there, so a Prometheus added first takes the builtins over when a
    /// metrics server is set.
    pub fn add_to(&self, mut providers: Providers) -> Providers {
        providers
            .targets
            .push((TargetKind::Local, Arc::new(self.clone())));
        providers.metrics.push(Arc::new(self.clone()));
        providers
    }

    fn slot(&self, key: &RolloutKey) -> Arc<AsyncMutex<LocalRollout>> {
        let mut rollouts = self.rollouts.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(rollouts.entry(key.clone()).or_default())
    }

    /// Binds a rollout's router socket now, before the rollout is applied, and returns the
    /// address actually bound: with port 0 the caller learns the router's address before any
    /// traffic is routed (`weir run` prints it first; `weir demo` starts its load at it). The
    /// router serves on this socket once the rollout routes. Binding again replaces the reserve.
    pub async fn reserve_listener(
        &self,
        key: &RolloutKey,
        listen: SocketAddr,
    ) -> std::io::Result<SocketAddr> {
        let slot = self.slot(key);
        let mut local = slot.lock().await;
        if local.router.is_some() {
            return local
                .listen
                .ok_or_else(|| std::io::Error::other("no router address"));
        }
        self.listen_policy.check(listen).map_err(|refusal| {
            std::io::Error::new(std::io::ErrorKind::PermissionDenied, refusal)
        })?;
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let bound = listener.local_addr()?;
        local.reserved = Some(listener);
        local.listen = Some(bound);
        Ok(bound)
    }

    /// The address a rollout's router listens on (the one actually bound, with port 0), once
    /// it does or once it is reserved.
    pub async fn router_address(&self, key: &RolloutKey) -> Option<SocketAddr> {
        let slot = self.slot(key);
        let local = slot.lock().await;
        local.listen
    }

    /// Leaves a note for a rollout's history, from the process that owns these targets (e.g. why
    /// it stops the rollout's versions): the engine commits it as a `Target` event after its
    /// next job on the rollout, like the target's own notes.
    pub async fn note(&self, key: &RolloutKey, text: impl Into<String>) {
        let slot = self.slot(key);
        slot.lock().await.notes.push(text.into());
    }

    /// The router's counters of a rollout, once it runs.
    pub async fn metrics(&self, key: &RolloutKey) -> Option<MetricsSnapshot> {
        let slot = self.slot(key);
        let local = slot.lock().await;
        local.router.as_ref().map(RouteHandle::metrics)
    }

    async fn start(
        &self,
        notes: &mut Vec<String>,
        spec: &VersionSpec,
    ) -> Result<Running, ProviderError> {
        let revision = spec.revision();
        match (&spec.url, &spec.command) {
            (Some(url), _) => Ok(Running {
                revision,
                upstream: url
                    .parse()
                    .map_err(|reason| error(format!("{url}: {reason}")))?,
                process: None,
                refusal_noted: false,
            }),
            _ if !self.commands_allowed => Err(ProviderError::permanent(format!(
                "not starting command {:?}: {COMMANDS_REFUSED}",
                spec.command.as_deref().unwrap_or_default().join(" ")
            ))),
            _ => {
                let process = VersionProcess::start(spec, &self.client, notes).await?;
                Ok(Running {
                    revision,
                    upstream: process
                        .address
                        .to_string()
                        .parse()
                        .map_err(|reason| error(format!("{reason}")))?,
                    process: Some(process),
                    refusal_noted: false,
                })
            }
        }
    }

    /// Makes sure the primary runs the definition the status says it runs.
    async fn ensure_primary(
        &self,
        local: &mut LocalRollout,
        config: &LocalTarget,
        status: &RolloutStatus,
    ) -> Result<(), ProviderError> {
        let wanted = primary_spec(config, status);
        let revision = wanted.revision();
        if local
            .primary
            .as_ref()
            .is_some_and(|running| running.revision == revision)
        {
            return Ok(());
        }
        // The canary of this revision may already run (it was just promoted).
        let running = match local.canary.take() {
            Some(canary) if canary.revision == revision => canary,
            other => {
                local.canary = other;
                self.start(&mut local.notes, wanted).await?
            }
        };
        if let Some(old) = local.primary.replace(running) {
            stop(old);
        }
        Ok(())
    }

    async fn ensure_canary(
        &self,
        local: &mut LocalRollout,
        config: &LocalTarget,
    ) -> Result<(), ProviderError> {
        let revision = config.canary.revision();
        if local
            .canary
            .as_ref()
            .is_some_and(|running| running.revision == revision)
        {
            return Ok(());
        }
        let running = if local
            .primary
            .as_ref()
            .is_some_and(|primary| primary.revision == revision)
        {
            // Same definition as the primary: share its address, never start it twice.
            let primary = local.primary.as_ref().map(|p| p.upstream.clone());
            Running {
                revision,
                upstream: primary.ok_or_else(|| error("no primary"))?,
                process: None,
                refusal_noted: false,
            }
        } else {
            self.start(&mut local.notes, &config.canary).await?
        };
        if let Some(old) = local.canary.replace(running) {
            stop(old);
        }
        Ok(())
    }

    /// Binds the router on first use and installs the route.
    async fn route(
        &self,
        key: &RolloutKey,
        local: &mut LocalRollout,
        config: &LocalTarget,
        route: Route,
    ) -> Result<(), ProviderError> {
        let Some(primary) = local.primary.as_ref() else {
            return Err(error("the primary is not running"));
        };
        // Roles follow the rollout's versions - the primary that runs, the canary's definition -
        // and are recorded before the table is installed: a promoted revision is the primary
        // even if the router keeps its previous table, and a rolled-back canary's counters stay
        // `canary` after its process is stopped.
        let roles = |handle: &RouteHandle| RouterEntry {
            handle: handle.clone(),
            primary: primary.revision.clone(),
            canary: config.canary.revision(),
        };
        if let Some(router) = &local.router {
            self.routers.set(key, roles(router));
        }
        let primary_backend =
            Backend::new(primary.revision.clone(), vec![primary.upstream.clone()]);
        let canary_backend = match &local.canary {
            Some(canary) => Backend::new(canary.revision.clone(), vec![canary.upstream.clone()]),
            None => primary_backend.clone(),
        };
        let spec = route_spec(primary_backend, canary_backend, &route)?;
        match &local.router {
            Some(router) => router
                .replace(spec)
                .map_err(|reason| error(reason.to_string()))?,
            None => {
                let name = key.to_string();
                let router = match local.reserved.take() {
                    Some(listener) => {
                        Router::from_listener(&name, listener, spec, self.router_config.clone())
                    }
                    None => {
                        // Checked again here, not only when applied: a rollout stored before
                        // the policy was set must not open the port either.
                        self.listen_policy
                            .check(config.listen)
                            .map_err(|refusal| ProviderError::permanent(refusal.to_string()))?;
                        match Router::bind(&name, config.listen, spec, self.router_config.clone())
                            .await
                        {
                            Ok(router) => Ok(router),
                            Err(reason) => {
                                // Said in the history, with the address, not only in the log:
                                // the rollout waits for its port and tries again at every tick.
                                let message = cannot_listen(config.listen, &reason);
                                if local.listen_failure.as_deref() != Some(message.as_str()) {
                                    local.notes.push(message.clone());
                                    local.listen_failure = Some(message.clone());
                                }
                                return Err(error(message));
                            }
                        }
                    }
                }
                .map_err(|reason| error(reason.to_string()))?;
                local.listen_failure = None;
                let bound = router
                    .local_addr()
                    .map_err(|reason| error(reason.to_string()))?;
                local
                    .notes
                    .push(format!("the router listens on http://{bound}"));
                let handle = router.handle();
                self.routers.set(key, roles(&handle));
                let (stop_router, stopped) = oneshot::channel::<()>();
                tokio::spawn(router.serve(async move {
                    let _ = stopped.await;
                }));
                local.listen = Some(bound);
                local.last_snapshot = Some(handle.metrics());
                local.router = Some(handle);
                local.stop_router = Some(stop_router);
            }
        }
        local.route = Some(route);
        Ok(())
    }
}

/// Why a router cannot listen on `listen`, for the history and the log.
fn cannot_listen(listen: SocketAddr, reason: &weir_router::RouterError) -> String {
    let why = match reason {
        weir_router::RouterError::Bind { source, .. }
            if source.kind() == std::io::ErrorKind::AddrInUse =>
        {
            format!("the address is in use by another program ({source})")
        }
        weir_router::RouterError::Bind { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    format!(
        "the router cannot listen on {listen} (spec.target.listen): {why}; trying again at every tick until it can"
    )
}

fn stop(running: Running) {
    if let Some(process) = running.process {
        // Requests already sent to it finish; the router sends it nothing new.
        process.stop_after(Duration::from_secs(2));
    }
}

fn primary_spec<'a>(config: &'a LocalTarget, status: &RolloutStatus) -> &'a VersionSpec {
    let canary_revision = config.canary.revision();
    if status.primary_revision.as_deref() == Some(canary_revision.as_str()) {
        &config.canary
    } else {
        &config.primary
    }
}

fn router_weight(weight: Weight) -> Result<weir_router::Weight, ProviderError> {
    weir_router::Weight::from_basis_points(weight.basis_points())
        .map_err(|reason| error(reason.to_string()))
}

fn matcher(condition: &StringMatch) -> Result<Matcher, ProviderError> {
    if let Some(exact) = &condition.exact {
        return Ok(Matcher::Exact(exact.clone()));
    }
    if let Some(prefix) = &condition.prefix {
        return Ok(Matcher::Prefix(prefix.clone()));
    }
    let pattern = match (&condition.regex, &condition.suffix) {
        (Some(regex), _) => regex.clone(),
        (None, Some(suffix)) => format!(".*{}", regex_syntax::escape(suffix)),
        (None, None) => return Err(error("an empty match condition")),
    };
    Matcher::regex(&pattern).map_err(|reason| error(reason.to_string()))
}

fn route_spec(
    primary: Backend,
    canary: Backend,
    route: &Route,
) -> Result<RouteSpec, ProviderError> {
    let mut spec = RouteSpec::weighted(primary, canary, router_weight(route.canary_weight)?);
    for rule in &route.match_rules {
        let mut conditions = Vec::new();
        for (name, condition) in &rule.headers {
            let header = name
                .parse()
                .map_err(|_| error(format!("invalid header name {name:?}")))?;
            conditions.push(Condition {
                subject: Subject::Header(header),
                matcher: matcher(condition)?,
            });
        }
        for (name, condition) in &rule.cookies {
            conditions.push(Condition {
                subject: Subject::Cookie(name.clone()),
                matcher: matcher(condition)?,
            });
        }
        for (name, condition) in &rule.query_params {
            conditions.push(Condition {
                subject: Subject::Query(name.clone()),
                matcher: matcher(condition)?,
            });
        }
        spec.matches.push(MatchBlock { conditions });
    }
    if let Some(affinity) = &route.session_affinity {
        spec.session_affinity = Some(weir_router::SessionAffinity {
            cookie_name: affinity.cookie_name.clone(),
            max_age: Duration::from_secs(affinity.max_age.unwrap_or(86_400)),
        });
    }
    if let Some(mirror) = route.mirror_weight {
        spec.mirror = Some(weir_router::Mirror {
            weight: router_weight(mirror)?,
        });
    }
    Ok(spec)
}

impl TargetProvider for LocalTargets {
    fn validate(&self, rollout: &Rollout) -> Vec<FieldError> {
        settings(rollout).err().unwrap_or_default()
    }

    fn refuse(&self, rollout: &Rollout) -> Vec<FieldError> {
        let Some(config) = rollout.spec.target.local() else {
            return Vec::new();
        };
        let commands = [("primary", &config.primary), ("canary", &config.canary)]
            .into_iter()
            .filter(|_| !self.commands_allowed)
            .filter(|(_, version)| version.url.is_none() && version.command.is_some())
            .map(|(name, version)| {
                FieldError::with_value(
                    format!("spec.target.{name}.command"),
                    format!("{:?}", version.command.as_deref().unwrap_or_default()),
                    COMMANDS_REFUSED,
                )
            });
        let mut refusals: Vec<FieldError> = commands.collect();
        refusals.extend(self.policy_errors(config));
        refusals
    }

    fn reconcile<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            let config = settings(rollout).map_err(ProviderError::unusable)?;
            let slot = self.slot(key);
            let mut local = slot.lock().await;
            self.ensure_primary(&mut local, config, status).await?;
            let canary_needed = status.phase.in_run() && status.canary_revision.is_some();
            if canary_needed {
                self.ensure_canary(&mut local, config).await?;
            } else if let Some(canary) = local.canary.take() {
                stop(canary);
            }
            self.route(key, &mut local, config, Route::of(&rollout.spec, status))
                .await
        })
    }

    fn observe<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<TargetObservation, ProviderError>> {
        Box::pin(async move {
            let config = settings(rollout).map_err(ProviderError::unusable)?;
            let slot = self.slot(key);
            let mut guard = slot.lock().await;
            let local = &mut *guard;
            if local.primary.is_none() && status.phase != weir_core::model::Phase::Initializing {
                // After a restart before reconcile succeeded: bring the primary back first.
                self.ensure_primary(local, config, status).await?;
            }
            let canary_revision = config.canary.revision();
            let primary_ready = match local.primary.as_mut() {
                Some(primary) => {
                    self.healthy(primary, primary_spec(config, status), &mut local.notes)
                        .await
                }
                // At set-up the primary has not been started yet: it starts with the route.
                None => status.phase == weir_core::model::Phase::Initializing,
            };
            let canary_ready = match local.canary.as_mut() {
                Some(canary) if canary.revision == canary_revision => {
                    self.healthy(canary, &config.canary, &mut local.notes).await
                }
                _ => false,
            };
            if let Some(router) = &local.router {
                let now = router.metrics();
                local.window = Some(match &local.last_snapshot {
                    Some(before) => now.delta(before),
                    None => now.clone(),
                });
                local.last_snapshot = Some(now);
            }
            Ok(TargetObservation {
                canary_revision: Some(canary_revision),
                primary_revision: Some(config.primary.revision()),
                primary_ready,
                canary_ready,
            })
        })
    }

    fn apply<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
        effect: &'a Effect,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            let config = settings(rollout).map_err(ProviderError::unusable)?;
            let slot = self.slot(key);
            let mut local = slot.lock().await;
            match effect {
                Effect::Prepare => self.ensure_primary(&mut local, config, status).await,
                Effect::SetRoute(route) => {
                    self.ensure_primary(&mut local, config, status).await?;
                    self.route(key, &mut local, config, route.clone()).await
                }
                Effect::ScaleCanary(Scale::Up) => {
                    self.ensure_primary(&mut local, config, status).await?;
                    self.ensure_canary(&mut local, config).await?;
                    let route = local
                        .route
                        .clone()
                        .unwrap_or_else(|| Route::of(&rollout.spec, status));
                    self.route(key, &mut local, config, route).await
                }
                Effect::ScaleCanary(Scale::Down) | Effect::Finalize => {
                    self.ensure_primary(&mut local, config, status).await?;
                    let route = Route::of(&rollout.spec, status);
                    if let Some(canary) = local.canary.take() {
                        let shared = local
                            .primary
                            .as_ref()
                            .is_some_and(|primary| primary.revision == canary.revision);
                        if !shared {
                            // Route away from it first, then stop it.
                            self.route(key, &mut local, config, route).await?;
                            stop(canary);
                            return Ok(());
                        }
                    }
                    self.route(key, &mut local, config, route).await
                }
                Effect::Promote { .. } => {
                    // The canary's process becomes the primary; the old primary is stopped once
                    // the router no longer sends it anything.
                    self.ensure_canary(&mut local, config).await?;
                    self.ensure_primary(&mut local, config, status).await?;
                    let route = local
                        .route
                        .clone()
                        .unwrap_or_else(|| Route::of(&rollout.spec, status));
                    self.route(key, &mut local, config, route).await
                }
                Effect::RunHooks { .. } | Effect::Notify(_) => Ok(()),
            }
        })
    }

    fn judge_window<'a>(
        &'a self,
        key: &'a RolloutKey,
        _rollout: &'a Rollout,
        slow_above_ms: Option<f64>,
    ) -> BoxFuture<'a, Option<weir_analysis::Window>> {
        Box::pin(async move {
            let slot = self.slot(key);
            let mut local = slot.lock().await;
            let router = local.router.as_ref()?;
            let now = router.metrics();
            let before = local.judge_snapshot.replace(now.clone());
            let window = now.delta(&before?);
            let primary = local.primary.as_ref()?.revision.clone();
            let canary = local.canary.as_ref()?.revision.clone();
            if primary == canary {
                // After promotion both roles are one version: nothing to compare.
                return None;
            }
            // The weight in force now; a window that straddles a weight change is judged at the
            // new weight (steps are far apart compared with a one-second window).
            let weight = local.route.as_ref().map_or(0.0, |route| {
                f64::from(route.canary_weight.basis_points()) / 10_000.0
            });
            Some(weir_analysis::Window {
                canary_weight: weight,
                canary: version_counts(&window, &canary, slow_above_ms),
                primary: version_counts(&window, &primary, slow_above_ms),
                canary_latencies_ms: Vec::new(),
                primary_latencies_ms: Vec::new(),
            })
        })
    }

    /// Everything the router counted for the primary's revision since it started listening in
    /// this process (as primary, and as canary in the run that promoted it): the primary's
    /// record before the run. The judge windows count from now on, so nothing counts twice.
    /// `None` before the router serves, after a restart of weir until the primary serves again
    /// (the counters live in the process), or when the primary served nothing yet.
    fn judge_baseline<'a>(
        &'a self,
        key: &'a RolloutKey,
        _rollout: &'a Rollout,
        slow_above_ms: Option<f64>,
    ) -> BoxFuture<'a, Option<weir_analysis::Baseline>> {
        Box::pin(async move {
            let slot = self.slot(key);
            let mut local = slot.lock().await;
            let now = local.router.as_ref()?.metrics();
            local.judge_snapshot = Some(now.clone());
            let primary = local.primary.as_ref()?.revision.clone();
            let counts = version_counts(&now, &primary, slow_above_ms);
            (counts.requests > 0).then_some(weir_analysis::Baseline {
                requests: counts.requests,
                errors: counts.errors,
                slow: slow_above_ms.map(|_| counts.slow),
            })
        })
    }

    fn take_notes<'a>(&'a self, key: &'a RolloutKey) -> BoxFuture<'a, Vec<String>> {
        Box::pin(async move {
            // Looked up, not created: a rollout removed meanwhile has nothing left to say.
            let slot = self
                .rollouts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(key)
                .cloned();
            match slot {
                Some(slot) => std::mem::take(&mut slot.lock().await.notes),
                None => Vec::new(),
            }
        })
    }

    fn register_metrics(&self, telemetry: &weir_engine::Telemetry) {
        telemetry.add_scraped("weir_router", Arc::new(self.routers.clone()));
    }

    fn remove<'a>(&'a self, key: &'a RolloutKey) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let slot = {
                let mut rollouts = self.rollouts.lock().unwrap_or_else(PoisonError::into_inner);
                rollouts.remove(key)
            };
            if let Some(slot) = slot {
                let mut local = slot.lock().await;
                if let Some(stop_router) = local.stop_router.take() {
                    let _ = stop_router.send(());
                }
                for running in [local.canary.take(), local.primary.take()]
                    .into_iter()
                    .flatten()
                {
                    if let Some(mut process) = running.process {
                        process.stop_now().await;
                    }
                }
            }
            // After the slot's lock: a route installed meanwhile cannot bring the entry back.
            self.routers.remove(key);
        })
    }
}

/// One version's counts in a window, `slow` meaning slower than `slow_above_ms`.
fn version_counts(
    window: &MetricsSnapshot,
    version: &str,
    slow_above_ms: Option<f64>,
) -> weir_analysis::VersionCounts {
    let Some(series) = window.get(version, Traffic::Served) else {
        return weir_analysis::VersionCounts::default();
    };
    let slow = slow_above_ms.map_or(0, |threshold| {
        let bound = Duration::from_secs_f64((threshold / 1000.0).max(0.0));
        series
            .requests
            .saturating_sub(series.latency.count_at_most(bound))
    });
    weir_analysis::VersionCounts {
        requests: series.requests,
        errors: series.errors,
        slow,
    }
}

impl LocalTargets {
    /// Whether a version answers its health check with 2xx. When the outbound policy refuses
    /// its address (a name that resolves to a forbidden address), the history says so once:
    /// the version then stays unready, so the run cannot start, or ends at its deadline.
    async fn healthy(
        &self,
        running: &mut Running,
        spec: &VersionSpec,
        notes: &mut Vec<String>,
    ) -> bool {
        if let Some(process) = running.process.as_mut()
            && !process.is_running()
        {
            return false;
        }
        let url = format!(
            "http://{}{}",
            running.upstream.authority(),
            spec.health_path()
        );
        match self.client.get(&url, Duration::from_secs(2)).await {
            Ok(answer) => answer.status.is_success(),
            Err(refused) if refused.is_refused() => {
                if !running.refusal_noted {
                    running.refusal_noted = true;
                    notes.push(format!(
                        "version {} is not reachable: {refused}",
                        running.upstream
                    ));
                }
                false
            }
            Err(_) => false,
        }
    }
}

impl MetricSource for LocalTargets {
    fn handles(&self, rollout: &Rollout, metric: &Metric) -> bool {
        rollout.spec.target.kind() == TargetKind::Local && metric.is_builtin()
    }

    fn check<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        metric: &'a Metric,
    ) -> BoxFuture<'a, CheckResult> {
        Box::pin(async move {
            let slot = self.slot(key);
            let local = slot.lock().await;
            let canary_revision = rollout
                .spec
                .target
                .local()
                .map(|config| config.canary.revision())
                .unwrap_or_default();
            let series = local
                .window
                .as_ref()
                .and_then(|window| window.get(&canary_revision, Traffic::Served).cloned());
            builtin_check(metric, series.as_ref())
        })
    }
}

/// Evaluates a builtin check over the canary's traffic since the previous tick.
fn builtin_check(metric: &Metric, series: Option<&weir_router::VersionSnapshot>) -> CheckResult {
    let no_data = |message: String| CheckResult {
        name: metric.name.clone(),
        outcome: CheckOutcome::NoData,
        value: None,
        message,
    };
    let Some(series) = series.filter(|series| series.requests > 0) else {
        return no_data("the canary served no requests since the last tick".into());
    };
    let (value, message) = match metric.name.as_str() {
        REQUEST_SUCCESS_RATE => {
            let rate = 100.0 * (series.requests - series.errors) as f64 / series.requests as f64;
            (
                rate,
                format!(
                    "canary: {} requests, {} errors: {rate:.2}% success",
                    series.requests, series.errors
                ),
            )
        }
        REQUEST_DURATION => match series.latency.quantile(0.99) {
            Some(p99) => {
                let millis = p99.as_secs_f64() * 1000.0;
                (
                    millis,
                    format!(
                        "canary: p99 {millis:.1} ms over {} requests",
                        series.requests
                    ),
                )
            }
            None => return no_data("no latency samples".into()),
        },
        other => return no_data(format!("{other} is not a builtin check")),
    };
    let passed = metric
        .threshold_range
        .is_none_or(|range| range.contains(value));
    CheckResult {
        name: metric.name.clone(),
        outcome: if passed {
            CheckOutcome::Pass
        } else {
            CheckOutcome::Fail
        },
        value: Some((value * 100.0).round() / 100.0),
        message,
    }
}
