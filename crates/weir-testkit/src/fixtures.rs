//! Things tests stand up: sample apps on ports the system picks, temporary databases.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use weir_tools::sample_app::{SampleApp, SampleAppConfig};

/// A multi-threaded runtime for tests that are not `#[tokio::test]` (they drive a `weir`
/// process and serve sample apps meanwhile).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
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

/// A temporary directory (removed on drop) with a database path in it.
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
