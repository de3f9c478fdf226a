//! The operator at scale (docs/BENCHMARKS.md, "Operator scale"): N Deployments and N weir
//! Rollouts in the in-memory API server, the real `weir operator` binary against it, every
//! rollout initialised, then a new revision of every Deployment at once, measured until all N
//! are promoted and settled. Reports the tick lateness the operator's own `/metrics` recorded,
//! its memory (`/proc/PID/status`), and every API request it made, by verb and resource.
//!
//! The harness plays the Deployment controller (every Deployment's spec is up to date and
//! available at once) and writes to the server directly, so only the operator's requests are
//! counted. It measures; it asserts nothing about speed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fixtures::TempDb;
use crate::kube_cluster::{kubectl, report_rolled_out, router_crd, text};
use crate::kube_server::KubeServer;
use crate::metrics::Exposition;
use crate::process::Weir;

/// The namespace of the benchmark's objects.
pub const NAMESPACE: &str = "bench";

/// What to run.
#[derive(Debug, Clone)]
pub struct ScaleConfig {
    /// The `weir` binary under test (a release build for figures).
    pub binary: PathBuf,
    /// Rollouts (and Deployments) in the one operator.
    pub rollouts: usize,
    /// Every rollout's analysis interval: one step per interval.
    pub interval: Duration,
    /// The canary's step weights (percent).
    pub steps: Vec<u32>,
    /// Progress lines on standard error while it runs.
    pub progress: bool,
}

/// A quantile read from a histogram: the bucket it falls in and the linear estimate inside it
/// (as Prometheus' `histogram_quantile` computes it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantile {
    /// Lower bound of its bucket, seconds.
    pub above: f64,
    /// Upper bound of its bucket, seconds (infinite for the overflow bucket).
    pub at_most: f64,
    /// Linear interpolation inside the bucket (the lower bound for the overflow bucket).
    pub estimate: f64,
}

impl std::fmt::Display for Quantile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.at_most.is_infinite() {
            write!(f, "> {} s", seconds(self.above))
        } else {
            write!(
                f,
                "{} s (bucket {}-{} s)",
                seconds(self.estimate),
                seconds(self.above),
                seconds(self.at_most)
            )
        }
    }
}

fn seconds(value: f64) -> String {
    if value == 0.0 {
        "0".into()
    } else if value < 0.01 {
        format!("{value:.4}")
    } else if value < 1.0 {
        format!("{value:.3}")
    } else {
        format!("{value:.2}")
    }
}

/// Tick lateness over a window, from the difference of two scrapes of
/// `weir_engine_tick_lateness_seconds`.
#[derive(Debug, Clone, PartialEq)]
pub struct Lateness {
    /// Ticks in the window.
    pub ticks: u64,
    /// Mean lateness, seconds.
    pub mean: f64,
    /// Median.
    pub p50: Option<Quantile>,
    /// 99th percentile.
    pub p99: Option<Quantile>,
    /// The bucket of the latest tick (lower and upper bound, seconds).
    pub max_bucket: Option<(f64, f64)>,
}

/// A scrape of the operator's metrics, reduced to what the benchmark reads.
#[derive(Debug, Clone, Default)]
struct Scrape {
    /// Cumulative lateness buckets (`le`, count), `+Inf` last.
    buckets: Vec<(f64, f64)>,
    count: f64,
    sum: f64,
    ticks: f64,
    provider_errors: f64,
}

impl Scrape {
    fn of(operator: &Weir) -> Scrape {
        let response = crate::http::get(operator.address("api"), "/metrics")
            .expect("the operator serves /metrics");
        assert_eq!(response.status, 200, "{}", response.body);
        let exposition = Exposition::parse(response.body);
        let name = "weir_engine_tick_lateness_seconds";
        let mut buckets: Vec<(f64, f64)> = exposition
            .all(&format!("{name}_bucket"), &[])
            .iter()
            .map(|sample| {
                let le = sample.labels.get("le").map_or("+Inf", String::as_str);
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                };
                (le, sample.value)
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Scrape {
            buckets,
            count: exposition
                .value(&format!("{name}_count"), &[])
                .unwrap_or(0.0),
            sum: exposition.value(&format!("{name}_sum"), &[]).unwrap_or(0.0),
            ticks: exposition
                .value("weir_engine_ticks_total", &[])
                .unwrap_or(0.0),
            provider_errors: exposition
                .value("weir_engine_provider_errors_total", &[])
                .unwrap_or(0.0),
        }
    }

    /// Lateness between `self` (earlier) and `later`.
    fn lateness_until(&self, later: &Scrape) -> Lateness {
        let buckets: Vec<(f64, f64)> = later
            .buckets
            .iter()
            .map(|(le, count)| {
                let before = self
                    .buckets
                    .iter()
                    .find(|(b, _)| b == le)
                    .map_or(0.0, |(_, c)| *c);
                (*le, count - before)
            })
            .collect();
        let ticks = later.count - self.count;
        let quantile = |q: f64| -> Option<Quantile> {
            if ticks <= 0.0 {
                return None;
            }
            let rank = q * ticks;
            let mut lower = 0.0;
            let mut below = 0.0;
            for (le, cumulative) in &buckets {
                if *cumulative >= rank {
                    if le.is_infinite() {
                        return Some(Quantile {
                            above: lower,
                            at_most: *le,
                            estimate: lower,
                        });
                    }
                    let inside = cumulative - below;
                    let fraction = if inside > 0.0 {
                        (rank - below) / inside
                    } else {
                        1.0
                    };
                    return Some(Quantile {
                        above: lower,
                        at_most: *le,
                        estimate: lower + (le - lower) * fraction,
                    });
                }
                lower = *le;
                below = *cumulative;
            }
            None
        };
        let mut max_bucket = None;
        let mut lower = 0.0;
        let mut below = 0.0;
        for (le, cumulative) in &buckets {
            if *cumulative > below {
                max_bucket = Some((lower, *le));
            }
            lower = *le;
            below = *cumulative;
        }
        Lateness {
            ticks: ticks as u64,
            mean: if ticks > 0.0 {
                (later.sum - self.sum) / ticks
            } else {
                0.0
            },
            p50: quantile(0.50),
            p99: quantile(0.99),
            max_bucket,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct ScaleReport {
    /// The configuration run.
    pub rollouts: usize,
    /// The interval, seconds.
    pub interval_secs: f64,
    /// The step weights.
    pub steps: Vec<u32>,
    /// Start of the operator until every rollout was initialised, seconds.
    pub initialisation_secs: f64,
    /// New revision until every rollout was promoted and settled, seconds.
    pub run_secs: f64,
    /// Time from the new revision to each rollout's promotion as seen by the harness's polls
    /// (which run every `poll_secs`): median and maximum, seconds.
    pub promotion_p50_secs: f64,
    /// See `promotion_p50_secs`.
    pub promotion_max_secs: f64,
    /// How often the harness looked.
    pub poll_secs: f64,
    /// Rollouts promoted by the end of the window (all of them, or the run panicked).
    pub promoted: usize,
    /// Tick lateness in the measured window (new revision until settled).
    pub lateness_window: Lateness,
    /// Tick lateness over the operator's whole life (start-up burst included).
    pub lateness_all: Lateness,
    /// Provider errors the operator counted over its life.
    pub provider_errors: u64,
    /// VmRSS at the end, KiB.
    pub rss_kib: u64,
    /// VmHWM (peak RSS) at the end, KiB.
    pub peak_rss_kib: u64,
    /// Requests from start-up until every rollout was initialised, by `VERB RESOURCE`.
    pub requests_initialisation: BTreeMap<String, u64>,
    /// Requests in the measured window, by `VERB RESOURCE`.
    pub requests_window: BTreeMap<String, u64>,
    /// Committed steps in the window: status writes of rollouts (`update
    /// rollouts.weir.dev/status`), one per step the engine commits.
    pub steps_committed: u64,
    /// Ticks in the window (weir_engine_ticks_total).
    pub ticks_window: u64,
    /// The Kubernetes Events the operator recorded in the window (one per history event), by
    /// reason: what the committed steps were.
    pub events_window: BTreeMap<String, u64>,
}

/// Whether `key` (`VERB RESOURCE`) is a write.
pub fn is_write(key: &str) -> bool {
    let verb = key.split(' ').next().unwrap_or("");
    matches!(
        verb,
        "create" | "update" | "patch" | "delete" | "POST" | "PUT" | "PATCH" | "DELETE"
    )
}

impl ScaleReport {
    /// Writes in the window.
    pub fn writes_window(&self) -> u64 {
        self.requests_window
            .iter()
            .filter(|(key, _)| is_write(key))
            .map(|(_, n)| n)
            .sum()
    }

    /// Reads (get, list, watch, discovery) in the window.
    pub fn reads_window(&self) -> u64 {
        self.requests_window
            .iter()
            .filter(|(key, _)| !is_write(key))
            .map(|(_, n)| n)
            .sum()
    }

    /// The report as Markdown: a summary table and the requests by verb and resource.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let n = self.rollouts as f64;
        let steps = self.steps_committed.max(1) as f64;
        let w = &self.lateness_window;
        let show = |q: Option<Quantile>| q.map_or("-".to_string(), |q| q.to_string());
        let max = |m: Option<(f64, f64)>| {
            m.map_or("-".to_string(), |(lo, hi)| {
                if hi.is_infinite() {
                    format!("> {} s", seconds(lo))
                } else {
                    format!("{}-{} s", seconds(lo), seconds(hi))
                }
            })
        };
        let _ = writeln!(
            out,
            "rollouts {}, interval {} s, steps {:?}: initialised in {:.1} s; new revision to all promoted and settled in {:.1} s (promotion seen after p50 {:.0} s, max {:.0} s; polls every {:.2} s); promoted {}/{}",
            self.rollouts,
            self.interval_secs,
            self.steps,
            self.initialisation_secs,
            self.run_secs,
            self.promotion_p50_secs,
            self.promotion_max_secs,
            self.poll_secs,
            self.promoted,
            self.rollouts
        );
        let _ = writeln!(out);
        let _ = writeln!(out, "| figure | value |");
        let _ = writeln!(out, "|---|---:|");
        let mut row = |name: &str, value: String| {
            let _ = writeln!(out, "| {name} | {value} |");
        };
        row(
            "ticks in the window",
            format!("{} ({:.2} per rollout)", w.ticks, w.ticks as f64 / n),
        );
        row("tick lateness p50", show(w.p50));
        row("tick lateness p99", show(w.p99));
        row("tick lateness max (bucket)", max(w.max_bucket));
        row("tick lateness mean", format!("{} s", seconds(w.mean)));
        row(
            "tick lateness p99, whole life (start-up burst included)",
            show(self.lateness_all.p99),
        );
        row(
            "tick lateness max, whole life (bucket)",
            max(self.lateness_all.max_bucket),
        );
        row(
            "RSS at the end / peak (VmHWM)",
            format!(
                "{:.1} MiB / {:.1} MiB",
                self.rss_kib as f64 / 1024.0,
                self.peak_rss_kib as f64 / 1024.0
            ),
        );
        row("provider errors", self.provider_errors.to_string());
        row(
            "committed steps in the window (status writes)",
            format!("{} ({:.2} per rollout)", self.steps_committed, steps / n),
        );
        row(
            "API writes per step and rollout",
            format!("{:.2}", self.writes_window() as f64 / steps),
        );
        row(
            "API reads per step and rollout",
            format!("{:.2}", self.reads_window() as f64 / steps),
        );
        row(
            "API requests in the window (writes + reads)",
            format!(
                "{} ({} + {})",
                self.writes_window() + self.reads_window(),
                self.writes_window(),
                self.reads_window()
            ),
        );
        let init_total: u64 = self.requests_initialisation.values().sum();
        row(
            "API requests to initialise, per rollout",
            format!("{:.2}", init_total as f64 / n),
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| request in the window | count | per step | per rollout |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|");
        let mut keys: Vec<(&String, &u64)> = self.requests_window.iter().collect();
        keys.sort_by_key(|(key, count)| (!is_write(key), std::cmp::Reverse(**count)));
        for (key, count) in keys {
            let _ = writeln!(
                out,
                "| {}{key} | {count} | {:.3} | {:.2} |",
                if is_write(key) { "write: " } else { "read: " },
                *count as f64 / steps,
                *count as f64 / n
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "| history event in the window | count | per rollout |");
        let _ = writeln!(out, "|---|---:|---:|");
        for (reason, count) in &self.events_window {
            let _ = writeln!(out, "| {reason} | {count} | {:.2} |", *count as f64 / n);
        }
        out
    }
}

fn deployment(index: usize) -> Value {
    let name = name(index);
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "podinfo:6.0.0",
                    "ports": [{"name": "http", "containerPort": 9898}]}]}
            }
        }
    })
}

fn rollout(index: usize, interval: Duration, steps: &[u32]) -> Value {
    let name = name(index);
    json!({
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "target": {
                "kind": "kubernetes",
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "provider": "istio",
                "service": {"port": 9898},
            },
            "plan": {"canary": {"stepWeights": steps}},
            "analysis": {"interval": format!("{}s", interval.as_secs()), "threshold": 2},
        }
    })
}

fn name(index: usize) -> String {
    format!("app-{index:05}")
}

/// Plays the Deployment controller for every Deployment of the namespace until `stop`: each
/// pass takes only what changed since the last one.
fn deployment_controller(server: Arc<KubeServer>, stop: Arc<AtomicBool>) {
    let mut seen = 0;
    while !stop.load(Ordering::Relaxed) {
        let now = server.resource_version();
        if now != seen {
            for deployment in server.list_changed_since("apps/v1", "Deployment", NAMESPACE, seen) {
                report_rolled_out(&server, &deployment);
            }
            seen = now;
        }
        // A controller's resync period, not a synchronisation: the harness waits on conditions.
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn events_by_reason(server: &KubeServer) -> BTreeMap<String, u64> {
    let mut reasons = BTreeMap::new();
    for event in server.list("v1", "Event", NAMESPACE) {
        let reason = event["reason"].as_str().unwrap_or("-").to_string();
        *reasons.entry(reason).or_default() += 1;
    }
    reasons
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn difference(
    after: &BTreeMap<String, u64>,
    before: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(key, n)| (key.clone(), n - before.get(key).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Polls `check` every `every` until it returns `Some`; panics naming `what` after `deadline`
/// (a hang guard scaled to the run, not a speed assertion).
fn poll<T>(
    what: &str,
    every: Duration,
    deadline: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let until = Instant::now() + deadline;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < until,
            "gave up after {deadline:?} waiting for {what}"
        );
        std::thread::sleep(every);
    }
}

/// Runs the benchmark and returns what it measured; panics if the operator does not bring
/// every rollout to its promotion (within generous deadlines scaled to the run).
pub fn run(config: &ScaleConfig) -> ScaleReport {
    let progress = |message: String| {
        if config.progress {
            eprintln!("[operator-scale] {message}");
        }
    };
    let n = config.rollouts;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime for the API server");
    let server = Arc::new(runtime.block_on(KubeServer::start()));
    let dir = TempDb::new();
    std::fs::create_dir_all(dir.file("kube")).expect("a kubeconfig directory");
    let kubeconfig = server.kubeconfig(&dir.file("kube"));
    let cache = dir.file("kube-cache");
    server
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}))
        .expect("the namespace");
    for (group, kind, plural) in [
        ("networking.istio.io", "VirtualService", "virtualservices"),
        ("networking.istio.io", "DestinationRule", "destinationrules"),
    ] {
        server
            .create(router_crd(group, kind, plural))
            .expect("a router CRD");
    }
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds.yaml");
    let applied = kubectl(
        &kubeconfig,
        &cache,
        &["apply", "-f", &crds.display().to_string()],
    );
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let stop = Arc::new(AtomicBool::new(false));
    let controller = {
        let (server, stop) = (Arc::clone(&server), Arc::clone(&stop));
        std::thread::spawn(move || deployment_controller(server, stop))
    };
    for index in 0..n {
        server.create(deployment(index)).expect("a Deployment");
        server
            .create(rollout(index, config.interval, &config.steps))
            .expect("a Rollout");
    }
    progress(format!("{n} Deployments and Rollouts created"));

    let started = Instant::now();
    let operator = Weir::start_with_env(
        &config.binary.display().to_string(),
        &[
            "operator",
            "--namespace",
            NAMESPACE,
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
        ],
        &[("KUBECONFIG", kubeconfig.display().to_string().as_str())],
    );
    let scrape_start = Scrape {
        buckets: Vec::new(),
        ..Scrape::default()
    };
    let interval = config.interval.as_secs_f64();
    let every = Duration::from_secs_f64((interval / 10.0).clamp(0.25, 5.0));
    let statuses = || -> Vec<Value> {
        server
            .list("weir.dev/v1alpha1", "Rollout", NAMESPACE)
            .into_iter()
            .map(|rollout| rollout["status"].clone())
            .collect()
    };
    let hang_guard = Duration::from_secs(180 + n as u64 / 2) + config.interval * 3;
    let mut last_shown = Instant::now();
    let runs: Vec<u64> = poll("every rollout initialised", every, hang_guard, || {
        let statuses = statuses();
        let ready = statuses
            .iter()
            .filter(|status| status["phase"] == "Initialized" || status["phase"] == "Succeeded")
            .count();
        if last_shown.elapsed() > Duration::from_secs(10) {
            progress(format!(
                "{ready}/{n} initialised after {:.0} s",
                started.elapsed().as_secs_f64()
            ));
            last_shown = Instant::now();
        }
        (ready == n).then(|| {
            statuses
                .iter()
                .map(|status| status["run"].as_u64().unwrap_or(0))
                .collect()
        })
    });
    let initialisation_secs = started.elapsed().as_secs_f64();
    progress(format!("all {n} initialised in {initialisation_secs:.1} s"));
    let requests_before = server.request_counts();
    let scrape_before = Scrape::of(&operator);
    let events_before = events_by_reason(&server);

    // A new revision of every Deployment at once.
    let triggered = Instant::now();
    for index in 0..n {
        server
            .merge_patch(
                "apps/v1",
                "Deployment",
                NAMESPACE,
                &name(index),
                &json!({"spec": {"template": {"metadata": {"annotations": {"release": "2"}}}}}),
                false,
            )
            .expect("a new pod template");
    }
    let mut promoted_at: Vec<Option<f64>> = vec![None; n];
    let run_guard = hang_guard
        + config.interval * (2 * (config.steps.len() as u32 + 6))
        + Duration::from_secs(n as u64 / 2);
    let mut last_shown = Instant::now();
    poll("every rollout promoted", every, run_guard, || {
        let statuses = statuses();
        for (index, status) in statuses.iter().enumerate() {
            if promoted_at[index].is_none()
                && status["phase"] == "Succeeded"
                && status["run"].as_u64() == Some(runs[index] + 1)
            {
                promoted_at[index] = Some(triggered.elapsed().as_secs_f64());
            }
        }
        let done = promoted_at.iter().filter(|at| at.is_some()).count();
        if last_shown.elapsed() > Duration::from_secs(10) {
            let mut phases: BTreeMap<String, usize> = BTreeMap::new();
            for status in &statuses {
                *phases
                    .entry(status["phase"].as_str().unwrap_or("-").to_string())
                    .or_default() += 1;
            }
            progress(format!(
                "{:.0} s after the new revision: {done}/{n} promoted; phases {phases:?}; RSS {} MiB",
                triggered.elapsed().as_secs_f64(),
                proc_status_kib(operator.id(), "VmRSS") / 1024
            ));
            last_shown = Instant::now();
        }
        (done == n).then_some(())
    });
    // Settled: all traffic back on the primaries, every target scaled to zero.
    poll("every rollout settled", every, run_guard, || {
        let back = server
            .list("networking.istio.io/v1", "VirtualService", NAMESPACE)
            .iter()
            .filter(|service| {
                service["spec"]["http"][0]["route"]
                    .as_array()
                    .is_some_and(|routes| {
                        routes.iter().all(|route| {
                            route["destination"]["host"]
                                .as_str()
                                .is_some_and(|host| !host.ends_with("-canary"))
                                || route["weight"].as_i64() == Some(0)
                        })
                    })
            })
            .count();
        let scaled_down = (0..n)
            .filter(|index| {
                server
                    .get("apps/v1", "Deployment", NAMESPACE, &name(*index))
                    .is_some_and(|d| d["spec"]["replicas"].as_i64() == Some(0))
            })
            .count();
        (back == n && scaled_down == n).then_some(())
    });
    let run_secs = triggered.elapsed().as_secs_f64();
    let requests_after = server.request_counts();
    let scrape_after = Scrape::of(&operator);
    let events_after = events_by_reason(&server);
    let rss_kib = proc_status_kib(operator.id(), "VmRSS");
    let peak_rss_kib = proc_status_kib(operator.id(), "VmHWM");
    progress(format!("all {n} promoted and settled in {run_secs:.1} s"));
    drop(operator);
    stop.store(true, Ordering::Relaxed);
    let _ = controller.join();

    let mut times: Vec<f64> = promoted_at.iter().flatten().copied().collect();
    times.sort_by(f64::total_cmp);
    let requests_window = difference(&requests_after, &requests_before);
    ScaleReport {
        rollouts: n,
        interval_secs: interval,
        steps: config.steps.clone(),
        initialisation_secs,
        run_secs,
        promotion_p50_secs: times.get(times.len() / 2).copied().unwrap_or(0.0),
        promotion_max_secs: times.last().copied().unwrap_or(0.0),
        poll_secs: every.as_secs_f64(),
        promoted: times.len(),
        lateness_window: scrape_before.lateness_until(&scrape_after),
        lateness_all: scrape_start.lateness_until(&scrape_after),
        provider_errors: scrape_after.provider_errors as u64,
        rss_kib,
        peak_rss_kib,
        requests_initialisation: requests_before,
        steps_committed: requests_window
            .get("update rollouts.weir.dev/status")
            .copied()
            .unwrap_or(0),
        requests_window,
        ticks_window: (scrape_after.ticks - scrape_before.ticks) as u64,
        events_window: difference(&events_after, &events_before),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(buckets: &[(f64, f64)], sum: f64) -> Scrape {
        Scrape {
            count: buckets.last().map_or(0.0, |b| b.1),
            buckets: buckets.to_vec(),
            sum,
            ..Scrape::default()
        }
    }

    #[test]
    fn quantiles_come_from_the_difference_of_two_scrapes() {
        let inf = f64::INFINITY;
        let before = scrape(
            &[(0.001, 10.0), (0.01, 10.0), (0.1, 10.0), (inf, 10.0)],
            0.0,
        );
        // 100 more ticks: 90 under 1 ms, 9 in (1 ms, 10 ms], 1 in (10 ms, 100 ms].
        let after = scrape(
            &[(0.001, 100.0), (0.01, 109.0), (0.1, 110.0), (inf, 110.0)],
            0.5,
        );
        let lateness = before.lateness_until(&after);
        assert_eq!(lateness.ticks, 100);
        let p50 = lateness.p50.unwrap();
        assert_eq!((p50.above, p50.at_most), (0.0, 0.001));
        assert!((p50.estimate - 0.001 * 50.0 / 90.0).abs() < 1e-12);
        let p99 = lateness.p99.unwrap();
        assert_eq!((p99.above, p99.at_most), (0.001, 0.01));
        assert!((p99.estimate - 0.01).abs() < 1e-12);
        assert_eq!(lateness.max_bucket, Some((0.01, 0.1)));
        assert!((lateness.mean - 0.005).abs() < 1e-12);
    }

    #[test]
    fn writes_are_told_from_reads() {
        assert!(is_write("update rollouts.weir.dev/status"));
        assert!(is_write("patch virtualservices.networking.istio.io"));
        assert!(is_write("create events"));
        assert!(!is_write("get rollouts.weir.dev"));
        assert!(!is_write("watch rollouts.weir.dev"));
        assert!(!is_write("GET (discovery and other paths)"));
    }
}
