//! `weir operator --leader-election`: of several replicas exactly one acts. Each replica
//! competes for a coordination.k8s.io Lease (weir-kube's `leader` module); until it holds it, a
//! replica answers only `/healthz` (every other request gets 503, so a readiness probe keeps the
//! Service on the leader); once it leads it loads every rollout's state from the cluster and
//! runs. A leader that loses its lease stops writing at once (the fence its store and targets
//! check) and exits, so its pod restarts as a follower.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use clap::Args;
use serde_json::json;
use weir_kube::leader::{DEFAULT_LEASE_NAME, Leadership, LeaseConfig, default_identity};
use weir_kube::store::Fence;

/// How replicas elect the one that acts.
#[derive(Debug, Clone, Args)]
pub struct LeaderArgs {
    /// Run as one of several replicas: only the holder of the Lease `--lease-name` acts; the
    /// others wait to take over (within the lease duration after the leader stops renewing),
    /// e.g. `--leader-election` with 2 replicas in the Deployment.
    #[arg(long, env = "WEIR_LEADER_ELECTION")]
    leader_election: bool,
    /// The namespace of the Lease, e.g. `--lease-namespace weir-system`. Default: $POD_NAMESPACE
    /// (the operator's own, from the downward API), else `default`.
    #[arg(
        long,
        value_name = "NS",
        env = "POD_NAMESPACE",
        default_value = "default"
    )]
    lease_namespace: String,
    /// The name of the Lease the replicas compete for, e.g. `--lease-name weir-team-a` for a
    /// second operator watching other namespaces.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_LEASE_NAME)]
    lease_name: String,
    /// Seconds after the leader's last renewal before another replica may take over; the leader
    /// renews every third of it and stops acting a safety margin (2/15 of it) before it ends,
    /// e.g. `--lease-seconds 30` on a slow API server.
    #[arg(long, value_name = "SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=3600))]
    lease_seconds: u64,
}

impl LeaderArgs {
    fn config(&self) -> LeaseConfig {
        let lease = Duration::from_secs(self.lease_seconds);
        let mut config =
            LeaseConfig::new(&self.lease_namespace, &self.lease_name, default_identity());
        config.lease_duration = lease;
        config.renew_period = lease / 3;
        config.retry_period = (lease * 2 / 15).max(Duration::from_millis(200));
        config.safety_margin = lease * 2 / 15;
        config
    }
}

/// The Lease this replica holds (`None` without `--leader-election`).
pub(super) struct Leading {
    leadership: Option<Arc<Leadership>>,
    /// Exits the process when the lease is lost; stopped before a graceful release.
    on_loss: Option<tokio::task::JoinHandle<()>>,
}

impl Leading {
    /// Without `--leader-election`: at once. With it: serves the follower's answers on
    /// `listener` until this replica holds the Lease; `None` when asked to stop meanwhile.
    pub(super) async fn acquire(
        args: &LeaderArgs,
        client: &kube::Client,
        listener: &tokio::net::TcpListener,
    ) -> Result<Option<Leading>> {
        if !args.leader_election {
            return Ok(Some(Leading {
                leadership: None,
                on_loss: None,
            }));
        }
        let config = args.config();
        let leadership = Leadership::start(client.clone(), config.clone())
            .context("cannot start the leader election")?;
        eprintln!(
            "weir operator: {} waits for the lease {}/{} (held {}s after each renewal)",
            config.identity,
            config.namespace,
            config.name,
            config.lease_duration.as_secs()
        );
        let mut leader = leadership.subscribe();
        let follower = listener.local_addr()?;
        // The same socket, served by the follower's answers meanwhile: no connection is refused
        // while the replica changes role.
        let socket = second_handle(listener)?;
        let mut stop = std::pin::pin!(crate::cmd_serve::shutdown_requested());
        let leads = tokio::select! {
            result = leader.wait_for(|leads| *leads) => result.is_ok(),
            served = axum::serve(socket, follower_router(config.identity.clone())) => {
                served.with_context(|| format!("serving the follower's answers on {follower}"))?;
                false
            }
            () = &mut stop => false,
        };
        if !leads {
            return Ok(None);
        }
        let leadership = Arc::new(leadership);
        let mut lost = leadership.subscribe();
        let on_loss = tokio::spawn(async move {
            if lost.wait_for(|leads| !*leads).await.is_ok() {
                eprintln!(
                    "weir operator: no longer the leader: exiting so that this replica restarts as a follower"
                );
                std::process::exit(1);
            }
        });
        Ok(Some(Leading {
            leadership: Some(leadership),
            on_loss: Some(on_loss),
        }))
    }

    /// What the store and the targets check before each write.
    pub(super) fn fence(&self) -> Option<Fence> {
        self.leadership.as_ref().map(|leadership| {
            let leadership = Arc::clone(leadership);
            Arc::new(move || leadership.is_leader()) as Fence
        })
    }

    /// Hands the Lease over at once (after a graceful stop, which then exits with 0).
    pub(super) async fn release(&self) {
        if let Some(on_loss) = &self.on_loss {
            on_loss.abort();
        }
        if let Some(leadership) = &self.leadership
            && let Err(error) = leadership.release().await
        {
            eprintln!("weir operator: releasing the lease: {error}");
        }
    }
}

/// A second handle on `listener`'s socket (a duplicated descriptor: dropping it leaves the
/// original open).
fn second_handle(listener: &tokio::net::TcpListener) -> Result<tokio::net::TcpListener> {
    use std::os::fd::AsFd;
    let socket = std::net::TcpListener::from(listener.as_fd().try_clone_to_owned()?);
    socket.set_nonblocking(true)?;
    Ok(tokio::net::TcpListener::from_std(socket)?)
}

/// A follower's API: alive, not ready, and saying why.
fn follower_router(identity: String) -> Router {
    let message = format!(
        "this weir operator replica ({identity}) is waiting for the leader lease; the leader answers (the replica that is ready)"
    );
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .fallback(move || {
            let message = message.clone();
            async move {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(
                        json!({"error": {"code": "unavailable", "message": message, "errors": []}}),
                    ),
                )
            }
        })
}
