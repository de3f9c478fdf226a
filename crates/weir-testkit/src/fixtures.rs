//! Things tests stand up: sample apps on ports the system picks, an address that refuses
//! connections, temporary databases, documents loaded into a catalog.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use weir_core::catalog::Catalog;
use weir_core::document::{Document, load};
use weir_core::model::Rollout;
use weir_tools::sample_app::{SampleApp, SampleAppConfig, SampleAppStats};

/// A multi-threaded runtime for tests that are not `#[tokio::test]` (they drive a `weir`
/// process and serve sample apps meanwhile).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The Flagger corpus (`WEIR_COMPAT_DIR`, set by `.ci/run`, or `../shared/compat/flagger`
/// beside the project), when it is there: a fresh clone has none, and tests that read it say
/// they were skipped.
pub fn compat_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("WEIR_COMPAT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/flagger")
        });
    dir.is_dir().then_some(dir)
}

/// The Argo Rollouts corpus (`WEIR_ARGO_COMPAT_DIR`, set by `.ci/run`, or
/// `../shared/compat/argo` beside the project), when it is there; tests that read it say they
/// were skipped when it is not.
pub fn argo_compat_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("WEIR_ARGO_COMPAT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/compat/argo")
        });
    dir.is_dir().then_some(dir)
}

/// A sample app's configuration on `127.0.0.1:0` reporting `version`.
pub fn sample_config(version: &str) -> SampleAppConfig {
    SampleAppConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), version)
}

/// Starts a sample app with `config` on the current runtime, serving until the runtime ends,
/// and returns the address it bound.
pub async fn start_sample_app(config: SampleAppConfig) -> SocketAddr {
    let app = SampleApp::bind(config).await.unwrap();
    let address = app.local_addr();
    tokio::spawn(app.serve(std::future::pending()));
    address
}

/// Starts a sample app reporting `version` that fails `error_percent`% of its requests (seeded,
/// so the same requests fail run after run) on the current runtime; returns the address it
/// bound.
pub async fn start_faulty_sample_app(version: &str, error_percent: f64) -> SocketAddr {
    let mut config = sample_config(version);
    config.error_percent = error_percent;
    config.seed = 11;
    start_sample_app(config).await
}

/// Healthy sample apps reporting `versions`, in order, on `runtime`.
pub fn sample_apps(runtime: &tokio::runtime::Runtime, versions: &[&str]) -> Vec<SocketAddr> {
    runtime.block_on(async {
        let mut addresses = Vec::new();
        for version in versions {
            addresses.push(start_sample_app(sample_config(version)).await);
        }
        addresses
    })
}

/// A sample app serving on the current runtime until stopped (or until the runtime ends), with
/// its counters.
pub struct RunningApp {
    /// The address it bound.
    pub addr: SocketAddr,
    /// What it served.
    pub stats: SampleAppStats,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl RunningApp {
    /// Starts one reporting `version` on `127.0.0.1:0`, configured further by `configure`.
    pub async fn start(version: &str, configure: impl FnOnce(&mut SampleAppConfig)) -> RunningApp {
        let mut config = sample_config(version);
        configure(&mut config);
        let app = SampleApp::bind(config).await.unwrap();
        let addr = app.local_addr();
        assert_ne!(addr.port(), 0, "the bound port, not the asked one");
        let stats = app.stats();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            app.serve(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        RunningApp {
            addr,
            stats,
            stop,
            task,
        }
    }

    /// `http://ADDRESS` and `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops the app and waits until `serve` has returned (its listener is closed by then).
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}

/// A loopback address where nothing listens and nothing else can start listening while this
/// lives: a socket bound to it that never listens, so every connection is refused. (A port that
/// was merely free a moment ago can be taken by a test running in parallel.)
#[derive(Debug)]
pub struct ClosedPort {
    _socket: tokio::net::TcpSocket,
    address: SocketAddr,
}

impl ClosedPort {
    /// Binds `127.0.0.1:0` without listening.
    pub fn new() -> ClosedPort {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .unwrap();
        let address = socket.local_addr().unwrap();
        ClosedPort {
            _socket: socket,
            address,
        }
    }

    /// The address, which refuses connections.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        ClosedPort::new()
    }
}

/// A temporary directory (removed on drop) with a database path in it.
#[derive(Debug)]
pub struct TempDb {
    /// The directory; other files of the test may go here too.
    pub dir: tempfile::TempDir,
}

impl TempDb {
    /// A new empty directory.
    pub fn new() -> TempDb {
        TempDb {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The SQLite file's path (`weir.db` in the directory; not created yet).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("weir.db")
    }

    /// A file's path in the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Default for TempDb {
    fn default() -> Self {
        TempDb::new()
    }
}

/// Loads YAML documents: the catalog documents (templates, alert providers, Secrets) into a
/// catalog, and the one Rollout among them, whose every reference must resolve.
pub fn catalog_and_rollout(yaml: &str) -> (Arc<Catalog>, Rollout) {
    let mut catalog = Catalog::default();
    let mut rollouts = Vec::new();
    for result in load(yaml.as_bytes()) {
        let loaded = result.unwrap_or_else(|refused| panic!("{refused:?}"));
        if let Some(Document::Rollout(rollout)) = catalog.add(loaded.document) {
            rollouts.push(*rollout);
        }
    }
    assert_eq!(rollouts.len(), 1, "one Rollout among the documents");
    let rollout = rollouts.remove(0);
    let unresolved = catalog.check_rollout(&rollout);
    assert!(unresolved.is_empty(), "{unresolved:?}");
    (Arc::new(catalog), rollout)
}

/// A local rollout `name` between `primary` and `canary` (`host:port`, health at `/healthz`),
/// after `documents` (its MetricTemplate and Secret, each ending in a newline), judged by that
/// template alone: the metric `error-percentage` with `templateRef` and `thresholdRange` given
/// as YAML flow maps, checked every second, `noData: fail`, two steps. No traffic is sent, so no
/// judge sees any: the checks decide (`promoteOn: noHarm`), as in Flagger.
pub fn local_rollout_judged_by_template(
    name: &str,
    documents: &str,
    primary: &str,
    canary: &str,
    template_ref: &str,
    threshold_range: &str,
) -> String {
    format!(
        r#"{documents}---
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}}}
spec:
  target:
    kind: local
    listen: "127.0.0.1:0"
    primary: {{url: "http://{primary}", healthCheck: /healthz}}
    canary: {{url: "http://{canary}", healthCheck: /healthz}}
  plan: {{canary: {{stepWeights: [50, 100]}}}}
  analysis:
    interval: 1s
    threshold: 1
    noData: fail
    progressDeadline: 1m
    evidence: {{promoteOn: noHarm}}
    metrics:
      - name: error-percentage
        interval: 1m
        templateRef: {template_ref}
        thresholdRange: {threshold_range}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_port_refuses_connections_while_it_is_held() {
        let closed = ClosedPort::new();
        assert_ne!(closed.address().port(), 0);
        let refused = std::net::TcpStream::connect(closed.address()).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        // Nobody else can listen there meanwhile.
        assert!(std::net::TcpListener::bind(closed.address()).is_err());
    }
}
