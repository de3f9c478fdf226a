//! Istio's telemetry for the cluster of [`crate::kube_cluster`], where no pod runs: a steady
//! stream of requests to `podinfo` split as VirtualService `podinfo` says, counted into
//! `istio_requests_total` as Istio's sidecars report it (`reporter="destination"`,
//! `destination_workload` the Deployment whose pods answered), served at `/metrics` for a real
//! Prometheus to scrape.
//!
//! Requests are counted when Prometheus scrapes: the time since the previous scrape, at
//! [`REQUESTS_PER_SECOND`], split by the canary's weight on the VirtualService at that moment.
//! The primary's pods always answer 200; a set share of the canary's answer 500.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::kube_cluster::{NAMESPACE, canary_weight};
use crate::kube_server::KubeServer;
use crate::receiver::{Receiver, Reply};

/// The requests the mesh sees each second, all versions together.
pub const REQUESTS_PER_SECOND: f64 = 100.0;

/// The primary's workload (Deployment `podinfo-primary`).
pub const PRIMARY: &str = "podinfo-primary";

/// The canary's workload: the target Deployment `podinfo` itself.
pub const CANARY: &str = "podinfo";

#[derive(Default)]
struct Counters {
    last_scrape: Option<Instant>,
    /// Requests by (workload, response code).
    requests: BTreeMap<(&'static str, u16), f64>,
}

/// The metrics endpoint, serving until dropped.
pub struct IstioTelemetry {
    receiver: Receiver,
    counters: Arc<Mutex<Counters>>,
    // Last: the endpoint's tasks run on it.
    _runtime: tokio::runtime::Runtime,
}

impl IstioTelemetry {
    /// Serves on `127.0.0.1:0`; `canary_error_percent` of the canary's requests answer 500.
    pub fn start(server: &Arc<KubeServer>, canary_error_percent: f64) -> IstioTelemetry {
        let runtime = crate::fixtures::runtime();
        let counters: Arc<Mutex<Counters>> = Arc::default();
        let shared = Arc::clone(&counters);
        let server = Arc::clone(server);
        let receiver = runtime.block_on(Receiver::start(move |_, request| {
            if request.path != "/metrics" {
                return Reply::new(404, "not found");
            }
            let weight = canary_weight(&server).unwrap_or(0).clamp(0, 100) as f64 / 100.0;
            let mut counters = shared.lock().unwrap();
            let now = Instant::now();
            let elapsed = counters
                .last_scrape
                .map_or(0.0, |last| now.duration_since(last).as_secs_f64());
            counters.last_scrape = Some(now);
            let requests = REQUESTS_PER_SECOND * elapsed;
            let canary = requests * weight;
            let errors = canary * canary_error_percent / 100.0;
            for (workload, code, count) in [
                (PRIMARY, 200, requests - canary),
                (CANARY, 200, canary - errors),
                (CANARY, 500, errors),
            ] {
                if count > 0.0 {
                    *counters.requests.entry((workload, code)).or_default() += count;
                }
            }
            Reply::new(200, exposition(&counters.requests))
                .typed("text/plain; version=0.0.4; charset=utf-8")
        }));
        IstioTelemetry {
            receiver,
            counters,
            _runtime: runtime,
        }
    }

    /// The address Prometheus scrapes (`/metrics`).
    pub fn address(&self) -> SocketAddr {
        self.receiver.address()
    }

    /// How many times `/metrics` was read.
    pub fn scrapes(&self) -> usize {
        self.receiver
            .received()
            .iter()
            .filter(|request| request.path == "/metrics")
            .count()
    }

    /// The requests `workload` answered with `code` so far (as of the last scrape).
    pub fn requests(&self, workload: &str, code: u16) -> f64 {
        self.counters
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|((name, answered), _)| *name == workload && *answered == code)
            .fold(0.0, |sum, (_, count)| sum + count)
    }
}

/// The counters in Prometheus's text format, with the labels Istio's standard metrics carry.
fn exposition(requests: &BTreeMap<(&'static str, u16), f64>) -> String {
    let mut text = String::from(
        "# HELP istio_requests_total Total requests.\n# TYPE istio_requests_total counter\n",
    );
    for ((workload, code), count) in requests {
        let service = if *workload == PRIMARY {
            "podinfo-primary"
        } else {
            "podinfo-canary"
        };
        text.push_str(&format!(
            "istio_requests_total{{reporter=\"destination\",source_workload=\"istio-ingressgateway\",source_workload_namespace=\"istio-system\",destination_workload=\"{workload}\",destination_workload_namespace=\"{NAMESPACE}\",destination_service=\"{service}.{NAMESPACE}.svc.cluster.local\",destination_service_name=\"{service}\",request_protocol=\"http\",response_code=\"{code}\",response_flags=\"-\"}} {count}\n"
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Exposition;

    #[test]
    fn the_exposition_carries_the_labels_of_the_builtin_queries() {
        let requests = BTreeMap::from([((PRIMARY, 200), 90.0), ((CANARY, 500), 7.5)]);
        let exposition = Exposition::parse(exposition(&requests));
        let canary = [
            ("reporter", "destination"),
            ("destination_workload", "podinfo"),
            ("destination_workload_namespace", "shop"),
        ];
        assert_eq!(
            exposition.value(
                "istio_requests_total",
                &[canary.as_slice(), &[("response_code", "500")]].concat()
            ),
            Some(7.5)
        );
        assert_eq!(
            exposition.sum(
                "istio_requests_total",
                &[("destination_workload", "podinfo-primary")]
            ),
            Some(90.0)
        );
    }
}
