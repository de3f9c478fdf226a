//! weir's router in a test: bound on a port the system picks, serving on the test's runtime.

use std::net::SocketAddr;

use weir_router::{RouteHandle, RouteSpec, Router, RouterConfig, Weight};

/// Starts a router (listener `test`) on `127.0.0.1:0`; it serves until the test's runtime ends.
/// Returns the address it bound and its handle.
pub async fn start_router(spec: RouteSpec, config: RouterConfig) -> (SocketAddr, RouteHandle) {
    let router = Router::bind("test", "127.0.0.1:0".parse().unwrap(), spec, config)
        .await
        .unwrap();
    let address = router.local_addr().unwrap();
    let handle = router.handle();
    tokio::spawn(router.serve(std::future::pending()));
    (address, handle)
}

/// A weight written as a percentage (`"10"`, `"0.5"`).
pub fn weight(percent: &str) -> Weight {
    percent.parse().unwrap()
}
