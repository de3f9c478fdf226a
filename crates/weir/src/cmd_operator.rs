//! `weir operator`: rollouts on Kubernetes. Parses the flags and wires the parts: the engine
//! with the `kubernetes` target, its state in each rollout's status (weir-kube's `KubeStore`,
//! written through the status subresource when a step commits), leader election
//! (`leading.rs`), the API, and weir-kube's `Controller`, which watches `rollouts.weir.dev`
//! objects (and Flagger's) and reconciles them through the engine.

mod leading;

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use weir_engine::{Engine, EngineOptions};
use weir_kube::controller::Controller;
use weir_kube::crd::GROUP;
use weir_kube::store::KubeStore;
use weir_kube::target::KubernetesTargets;

/// Arguments of `weir operator`.
#[derive(Debug, Args)]
pub struct OperatorArgs {
    /// Watch rollouts in this namespace only, e.g. `--namespace shop`; repeat it for several
    /// (`-n shop -n payments`). Default: every namespace.
    #[arg(long, short = 'n', value_name = "NS")]
    namespace: Vec<String>,
    /// Watch rollouts in every namespace: the default, said explicitly, e.g. `weir operator -A`
    /// in a manifest.
    #[arg(long, short = 'A', conflicts_with = "namespace")]
    all_namespaces: bool,
    /// The traffic provider of Flagger Canaries that name none (`spec.provider` unset), as
    /// Flagger's `-mesh-provider`, e.g. `--provider nginx` or `--provider gatewayapi:v1`.
    /// Default: istio, as with Flagger. A Canary's own `spec.provider` always wins.
    #[arg(long, value_name = "PROVIDER", env = "WEIR_PROVIDER", value_parser = parse_provider)]
    provider: Option<String>,
    /// Address of weir's HTTP API, for the client verbs (`weir status NAME --server URL`,
    /// `weir promote`, ...), e.g. `--listen 0.0.0.0:7979` in a pod. Port 0 picks a free port;
    /// the bound address is printed on start.
    #[arg(long, value_name = "ADDR", default_value = crate::cmd_serve::DEFAULT_LISTEN, env = "WEIR_LISTEN")]
    listen: SocketAddr,
    /// `text`: start-up lines on stderr; `json` (e.g. `-o json` for a script that starts it):
    /// also the addresses bound, as the first line on stdout: {"listening": {"api": "HOST:PORT"}}.
    #[arg(long, short, value_enum, default_value_t = crate::cmd_core::OutputFormat::Text)]
    output: crate::cmd_core::OutputFormat,
    #[command(flatten)]
    leader: leading::LeaderArgs,
    #[command(flatten)]
    integrations: crate::integrations::IntegrationArgs,
}

/// `weir operator`.
pub fn operator(args: &OperatorArgs) -> Result<ExitCode> {
    // A controller runs unattended: what the engine could not do (a provider's error, a refused
    // write) goes to its log, one line each.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = kube::Client::try_default().await.context(
            "cannot reach the Kubernetes API: set KUBECONFIG (or run in a pod with a service account)",
        )?;
        let integrations = args.integrations.integrations(Vec::new())?;
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let bound = listener.local_addr().unwrap_or(args.listen);
        integrations.outbound.add_own(bound);
        crate::listening::announce(args.output, &[("api", bound)]);
        let Some(leading) = leading::Leading::acquire(&args.leader, &client, &listener).await?
        else {
            return Ok(ExitCode::SUCCESS);
        };
        let fence = leading.fence();
        let store = KubeStore::new(client.clone(), args.namespace.clone(), fence.clone());
        let mut targets = KubernetesTargets::new(client.clone());
        if let Some(fence) = fence {
            targets = targets.with_fence(fence);
        }
        // Templates of the Kubernetes-backed providers (externalmetrics, keptn) through the cluster.
        let providers = weir_kube::metrics::KubeMetrics::new(client.clone(), integrations.catalog.clone())
            .add_to(targets.add_to(integrations.shared_providers()));
        let (engine, handle) = Engine::new(store.clone(), providers, EngineOptions::default());
        let controller = Controller::new(client, handle.clone(), targets, store.clone())
            .namespaces(args.namespace.clone())
            .catalog(integrations.catalog.clone())
            .default_provider(args.provider.clone())
            .start()
            .await;
        eprintln!(
            "weir operator: watching rollouts.{GROUP}{}{} in {}; API at http://{bound}; state in each rollout's status; Ctrl-C stops",
            if controller.runs_canaries() { " and Flagger's canaries.flagger.app" } else { " (Flagger's Canary CRD is not installed)" },
            if controller.runs_argo_rollouts() { ", Argo's rollouts.argoproj.io and analysisruns.argoproj.io" } else { "" },
            if args.namespace.is_empty() {
                "every namespace".to_string()
            } else {
                args.namespace.join(", ")
            },
        );
        // In a cluster the API is reached by Service and pod names: no Host checks here
        // (docs/SECURITY.md); access is the cluster's network policy's to limit.
        let stopped =
            crate::cmd_serve::run_until_stopped(listener.into(), store, handle, engine, Default::default())
                .await;
        leading.release().await;
        drop(controller);
        stopped
    })
}

/// `--provider`: a provider weir drives, by Flagger's name (the refusal names the others).
fn parse_provider(name: &str) -> Result<String, String> {
    weir_kube::routes::Provider::parse(Some(name)).map(|_| name.to_string())
}
