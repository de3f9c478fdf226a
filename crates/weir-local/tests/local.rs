//! The engine driving local rollouts for real: a SQLite file, weir's router on loopback, sample
//! apps (URL versions) or processes weir starts (command versions), load through the router.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use weir_core::machine::Command;
use weir_core::model::{EventReason, Phase, Rollout};
use weir_engine::{Engine, EngineHandle, EngineOptions, EngineStats};
use weir_local::LocalTargets;
use weir_router::RouterConfig;
use weir_store::{RolloutKey, SqliteStore, Store};
use weir_testkit::client::{get, http1_client};
use weir_testkit::engine::{Background, Load, local_providers};
use weir_testkit::fixtures::start_faulty_sample_app as sample_app;
use weir_testkit::wait::wait_for as wait_until;

/// Every rollout of these tests listens on a port the system picks.
const ANY_PORT: &str = "127.0.0.1:0";

struct Running {
    handle: EngineHandle,
    store: SqliteStore,
    targets: LocalTargets,
    /// Where the router of the rollout named at start listens.
    listen: SocketAddr,
    stats: Arc<EngineStats>,
    engine: Background,
}

/// An engine over `db` whose router for rollout `name` (namespace `default`) is bound before the
/// engine starts, on a port the system picks, so the test knows where to send load.
async fn start_engine(db: &Path, name: &str) -> Running {
    let store = SqliteStore::open(db).await.unwrap();
    let targets = LocalTargets::new(RouterConfig::default()).allowing_commands();
    let listen = targets
        .reserve_listener(
            &RolloutKey::new("default", name),
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        )
        .await
        .unwrap();
    let providers = local_providers(&targets, weir_core::catalog::SharedCatalog::default());
    let (engine, handle) = Engine::new(store.clone(), providers, EngineOptions::default());
    Running {
        handle,
        store,
        targets,
        listen,
        stats: engine.stats(),
        engine: Background::start(engine),
    }
}

impl Running {
    async fn stop(self, key: &RolloutKey) {
        use weir_engine::TargetProvider;
        self.engine.stop().await;
        self.targets.remove(key).await;
    }
}

fn rollout(primary: &str, canary: &str, steps: &str) -> Rollout {
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: shop}}\nspec:\n  target:\n    kind: local\n    listen: \"{ANY_PORT}\"\n    primary: {primary}\n    canary: {canary}\n  plan: {{canary: {{stepWeights: {steps}}}}}\n  analysis:\n    interval: 1s\n    threshold: 2\n    noData: hold\n    progressDeadline: 30s\n    metrics: [{{name: request-success-rate, thresholdRange: {{min: 95}}}}]\n"
    );
    serde_saphyr::from_str(&yaml).unwrap()
}

/// Waits (with a generous deadline, not a timing assertion) until the rollout reaches a phase.
async fn wait_for(store: &SqliteStore, key: &RolloutKey, phases: &[Phase]) -> Phase {
    let what = format!("{key} to reach {phases:?}");
    wait_until(&what, || async {
        let stored = store.get(key).await.unwrap()?;
        phases
            .contains(&stored.status.phase)
            .then_some(stored.status.phase)
    })
    .await
}

/// Load through the router of `running` (300 requests a second), from the moment it serves.
fn load(running: &Running, key: &RolloutKey) -> Load {
    Load::start(&running.targets, key, 300.0)
}

/// The body of `GET /` through the router at `address`.
async fn body_at(address: SocketAddr) -> String {
    get(&http1_client(), address, "/", &[]).await.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_canary_is_promoted_step_by_step_and_then_serves_everything() {
    let dir = tempfile::tempdir().unwrap();
    let running = start_engine(&dir.path().join("weir.db"), "shop").await;
    let (v1, v2) = (sample_app("v1", 0.0).await, sample_app("v2", 0.0).await);
    let spec = rollout(
        &format!("{{url: \"http://{v1}\", healthCheck: /healthz}}"),
        &format!("{{url: \"http://{v2}\", healthCheck: /healthz}}"),
        "[20, 50, 100]",
    );
    let key = RolloutKey::of(&spec);
    running.handle.apply(spec, None).await.unwrap();
    let load = load(&running, &key);
    assert_eq!(
        wait_for(&running.store, &key, &[Phase::Succeeded, Phase::Failed]).await,
        Phase::Succeeded
    );
    // After promotion, the router sends everything to v2: watch the next 100 requests.
    let before = running.targets.metrics(&key).await.unwrap();
    let after = wait_until("100 requests after the promotion", || async {
        let now = running.targets.metrics(&key).await?;
        let window = now.delta(&before);
        (window.versions.iter().map(|v| v.requests).sum::<u64>() >= 100).then_some(now)
    })
    .await;
    let summary = load.stop().await;
    assert_eq!(
        summary.failed, 0,
        "no request failed during the rollout: {summary}"
    );
    let window = after.delta(&before);
    let served: Vec<(String, u64)> = window
        .versions
        .iter()
        .filter(|v| v.requests > 0)
        .map(|v| (v.version.clone(), v.requests))
        .collect();
    assert_eq!(
        served.len(),
        1,
        "one version serves after promotion: {served:?}"
    );
    let events = running.store.events(&key, 0, 500).await.unwrap();
    let weights: Vec<u32> = events
        .iter()
        .filter(|stored| stored.event.reason == EventReason::Advanced)
        .map(|stored| stored.event.canary_weight.basis_points() / 100)
        .collect();
    assert_eq!(weights, vec![20, 50, 100], "each step once, in order");
    assert!(
        events.windows(2).all(|pair| pair[1].seq == pair[0].seq + 1),
        "gap-free history"
    );
    running.stop(&key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulty_canary_is_rolled_back_with_its_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let running = start_engine(&dir.path().join("weir.db"), "shop").await;
    let (v1, v2) = (sample_app("v1", 0.0).await, sample_app("v2", 30.0).await);
    let spec = rollout(
        &format!("{{url: \"http://{v1}\", healthCheck: /healthz}}"),
        &format!("{{url: \"http://{v2}\", healthCheck: /healthz}}"),
        "[20, 50, 100]",
    );
    let key = RolloutKey::of(&spec);
    running.handle.apply(spec, None).await.unwrap();
    let load = load(&running, &key);
    assert_eq!(
        wait_for(&running.store, &key, &[Phase::Succeeded, Phase::Failed]).await,
        Phase::Failed
    );
    let summary = load.stop().await;
    let v2_served = summary
        .by_version
        .get("v2")
        .map_or(0, |counts| counts.requests);
    let v1_served = summary
        .by_version
        .get("v1")
        .map_or(0, |counts| counts.requests);
    assert!(
        v2_served < v1_served,
        "the canary never got the majority: {summary}"
    );
    let stored = running.store.get(&key).await.unwrap().unwrap();
    assert_eq!(stored.status.canary_weight.basis_points(), 0);
    let events = running.store.events(&key, 0, 500).await.unwrap();
    // The evidence: failed threshold checks, or the sequential judge's verdict (weir's default
    // judge for local rollouts), whichever came first.
    let rolled_back = events
        .iter()
        .find(|e| e.event.reason == EventReason::RolledBack)
        .expect("a RolledBack event");
    let failed_checks: Vec<_> = events
        .iter()
        .filter(|e| e.event.reason == EventReason::ChecksFailed)
        .collect();
    assert!(rolled_back.event.evidence.verdict.is_some() || !failed_checks.is_empty());
    assert!(failed_checks.iter().all(|e| {
        e.event
            .evidence
            .checks
            .iter()
            .any(|c| c.value.is_some_and(|v| v < 95.0))
    }));
    running.stop(&key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sequential_judge_rolls_back_between_ticks() {
    let dir = tempfile::tempdir().unwrap();
    let running = start_engine(&dir.path().join("weir.db"), "judged").await;
    let (v1, v2) = (sample_app("v1", 0.5).await, sample_app("v2", 20.0).await);
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: judged}}\nspec:\n  target:\n    kind: local\n    listen: \"{ANY_PORT}\"\n    primary: {{url: \"http://{v1}\", healthCheck: /healthz}}\n    canary: {{url: \"http://{v2}\", healthCheck: /healthz}}\n  plan: {{canary: {{stepWeights: [20, 100]}}}}\n  analysis:\n    interval: 1s\n    threshold: 5\n    noData: hold\n    metrics: [{{name: request-success-rate, thresholdRange: {{min: 50}}}}]\n"
    );
    let spec: Rollout = serde_saphyr::from_str(&yaml).unwrap();
    let key = RolloutKey::of(&spec);
    running.handle.apply(spec, None).await.unwrap();
    let load = load(&running, &key);
    // The canary's 80% success passes the threshold check (min 50%): only the judge, comparing it
    // with the primary, can find it worse.
    assert_eq!(
        wait_for(&running.store, &key, &[Phase::Succeeded, Phase::Failed]).await,
        Phase::Failed
    );
    load.stop().await;
    let events = running.store.events(&key, 0, 500).await.unwrap();
    let rolled_back = events
        .iter()
        .find(|e| e.event.reason == EventReason::RolledBack)
        .expect("a RolledBack event");
    let verdict = rolled_back
        .event
        .evidence
        .verdict
        .as_ref()
        .expect("the judge's verdict as evidence");
    assert_eq!(verdict.judge, "sequential");
    assert!(
        verdict.evidence["eValue"]
            .as_f64()
            .is_some_and(|e| e >= 100.0),
        "{}",
        verdict.evidence
    );
    assert!(
        verdict.evidence["canaryErrors"]
            .as_u64()
            .is_some_and(|n| n > 0)
    );
    assert!(
        events
            .iter()
            .all(|e| e.event.reason != EventReason::ChecksFailed),
        "the threshold checks passed"
    );
    running.stop(&key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_judges_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let running = start_engine(&dir.path().join("weir.db"), "shop").await;
    let mut spec = rollout(
        "{url: \"http://127.0.0.1:1\"}",
        "{url: \"http://127.0.0.1:2\"}",
        "[50]",
    );
    spec.spec.analysis.judges = vec!["oracle".into()];
    let refused = running.handle.apply(spec, None).await;
    match refused {
        Err(weir_engine::EngineError::Invalid(errors)) => {
            assert_eq!(errors[0].path, "spec.analysis.judges[0]");
            assert!(errors[0].message.contains("sequential"));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    running.stop(&RolloutKey::new("default", "shop")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_versions_are_started_promoted_and_the_old_primary_stopped() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("python3 is needed to start command versions in this test");
    }
    let dir = tempfile::tempdir().unwrap();
    let running = start_engine(&dir.path().join("weir.db"), "shop").await;
    let serve = |name: &str| {
        let root = dir.path().join(name);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("index.html"), name).unwrap();
        format!(
            "{{command: [python3, -m, http.server, \"{{port}}\", --bind, 127.0.0.1, --directory, \"{}\"], startTimeout: 20s}}",
            root.display()
        )
    };
    let spec = rollout(&serve("v1"), &serve("v2"), "[50, 100]");
    let key = RolloutKey::of(&spec);
    running.handle.apply(spec, None).await.unwrap();
    let load = load(&running, &key);
    assert_eq!(
        wait_for(&running.store, &key, &[Phase::Succeeded, Phase::Failed]).await,
        Phase::Succeeded
    );
    load.stop().await;
    // The router now serves v2's directory.
    let body = body_at(running.listen).await;
    assert!(body.contains("v2"), "{body}");
    running.stop(&key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_pause_resume_and_abort_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let running = start_engine(&dir.path().join("weir.db"), "shop").await;
    let (v1, v2) = (sample_app("v1", 0.0).await, sample_app("v2", 0.0).await);
    let spec = rollout(
        &format!("{{url: \"http://{v1}\", healthCheck: /healthz}}"),
        &format!("{{url: \"http://{v2}\", healthCheck: /healthz}}"),
        "[10, 20, 30, 40, 50, 60, 70, 80, 90, 100]",
    );
    let key = RolloutKey::of(&spec);
    running.handle.apply(spec, None).await.unwrap();
    let load = load(&running, &key);
    wait_for(&running.store, &key, &[Phase::Progressing]).await;
    let paused = running
        .handle
        .command(key.clone(), Command::Pause, "alice")
        .await
        .unwrap();
    assert!(paused.status.paused);
    let weight = paused.status.canary_weight;
    // A paused run holds its weight through several ticks (counted, not timed).
    let ticks = running.stats.ticks.load(Ordering::Relaxed);
    wait_until("three ticks of the paused run", || async {
        (running.stats.ticks.load(Ordering::Relaxed) >= ticks + 3).then_some(())
    })
    .await;
    let still = running.store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        still.status.canary_weight, weight,
        "a paused run holds its weight"
    );
    let resumed = running
        .handle
        .command(key.clone(), Command::Resume, "alice")
        .await;
    assert!(resumed.is_ok(), "{resumed:?}");
    let aborted = running
        .handle
        .command(key.clone(), Command::Abort, "bob")
        .await
        .unwrap();
    assert_eq!(aborted.status.phase, Phase::Failed);
    let rejected = running
        .handle
        .command(key.clone(), Command::Pause, "carol")
        .await;
    assert!(
        matches!(rejected, Err(weir_engine::EngineError::Rejected(_))),
        "{rejected:?}"
    );
    load.stop().await;
    let events = running.store.events(&key, 0, 500).await.unwrap();
    let actors: Vec<&str> = events
        .iter()
        .filter_map(|e| e.event.evidence.actor.as_deref())
        .collect();
    assert_eq!(actors, vec!["alice", "alice", "bob"]);
    running.stop(&key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_engine_resumes_the_run_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("weir.db");
    let (v1, v2) = (sample_app("v1", 0.0).await, sample_app("v2", 0.0).await);
    let spec = rollout(
        &format!("{{url: \"http://{v1}\", healthCheck: /healthz}}"),
        &format!("{{url: \"http://{v2}\", healthCheck: /healthz}}"),
        "[10, 20, 30, 40, 50, 100]",
    );
    let key = RolloutKey::of(&spec);
    let first = start_engine(&db, "shop").await;
    first.handle.apply(spec, None).await.unwrap();
    let load = load(&first, &key);
    // Let it take a couple of steps, then stop the engine mid-run.
    wait_until("two steps before the restart", || async {
        let stored = first.store.get(&key).await.unwrap()?;
        (stored.status.steps_taken >= 2).then_some(())
    })
    .await;
    // Load stops with the engine: a process that dies takes its router's connections with it,
    // which stopping an in-process engine does not do.
    load.stop().await;
    first.stop(&key).await;
    // The restarted engine's router listens on a new port the system picks.
    let second = start_engine(&db, "shop").await;
    let load = self::load(&second, &key);
    let phase = wait_for(&second.store, &key, &[Phase::Succeeded, Phase::Failed]).await;
    let events = second.store.events(&key, 0, 500).await.unwrap();
    assert_eq!(
        phase,
        Phase::Succeeded,
        "{:#?}",
        events.iter().map(|e| &e.event.message).collect::<Vec<_>>()
    );
    load.stop().await;
    let events = second.store.events(&key, 0, 500).await.unwrap();
    let weights: Vec<u32> = events
        .iter()
        .filter(|stored| stored.event.reason == EventReason::Advanced)
        .map(|stored| stored.event.canary_weight.basis_points() / 100)
        .collect();
    assert_eq!(
        weights,
        vec![10, 20, 30, 40, 50, 100],
        "no step skipped or repeated across the restart"
    );
    assert!(events.windows(2).all(|pair| pair[1].seq == pair[0].seq + 1));
    second.stop(&key).await;
}

/// A person promotes half-way: once the run has succeeded every request reaches the promoted
/// version (the route names it in both roles, which the router accepts as one version).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_half_way_sends_all_traffic_to_the_new_version() {
    let dir = tempfile::tempdir().unwrap();
    let running = start_engine(&dir.path().join("weir.db"), "shop").await;
    let (v1, v2) = (sample_app("v1", 0.0).await, sample_app("v2", 0.0).await);
    let spec = rollout(
        &format!("{{url: \"http://{v1}\", healthCheck: /healthz}}"),
        &format!("{{url: \"http://{v2}\", healthCheck: /healthz}}"),
        "[50, 60, 70, 80, 90, 100]",
    );
    let key = RolloutKey::of(&spec);
    running.handle.apply(spec, None).await.unwrap();
    let load = load(&running, &key);
    wait_for(&running.store, &key, &[Phase::Progressing]).await;
    let promoted = running
        .handle
        .command(key.clone(), Command::Promote, "alice")
        .await
        .unwrap();
    assert!(
        promoted.status.canary_weight.basis_points() <= 6_000,
        "promoted before the end: {:?}",
        promoted.status
    );
    wait_for(&running.store, &key, &[Phase::Succeeded]).await;
    load.stop().await;
    let mut versions = Vec::new();
    for _ in 0..40 {
        let answer = body_at(running.listen).await;
        versions.push(if answer.contains("\"version\":\"v2\"") {
            "v2"
        } else {
            "other"
        });
    }
    assert!(
        versions.iter().all(|version| *version == "v2"),
        "after the promotion: {versions:?}"
    );
    let stored = running.store.get(&key).await.unwrap().unwrap();
    assert_eq!(stored.status.canary_weight.basis_points(), 0);
    running.stop(&key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_program_that_does_not_exist_rolls_back_at_once_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let running = start_engine(&dir.path().join("weir.db"), "shop").await;
    let v1 = sample_app("v1", 0.0).await;
    let spec = rollout(
        &format!("{{url: \"http://{v1}\", healthCheck: /healthz}}"),
        "{command: [\"./no-such-program-weir-test\", \"--port\", \"{port}\"]}",
        "[20, 50, 100]",
    );
    let key = RolloutKey::of(&spec);
    running.handle.apply(spec, None).await.unwrap();
    // The progress deadline is 30 s; a permanent failure ends the run long before that, but the
    // test only waits for the outcome (with a generous deadline), it does not time it.
    assert_eq!(
        wait_for(&running.store, &key, &[Phase::Succeeded, Phase::Failed]).await,
        Phase::Failed
    );
    let status = running.store.get(&key).await.unwrap().unwrap().status;
    assert!(
        status.message.contains("retrying cannot help")
            && status.message.contains("no-such-program-weir-test"),
        "{}",
        status.message
    );
    running.stop(&key).await;
}

/// The primary's record before a run (`judge_baseline`, the judges' prior): after a run that
/// promoted v2 under load, everything the router counted for v2 (as canary, then as primary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primarys_counts_before_a_run_are_the_judges_baseline() {
    use weir_engine::TargetProvider;
    let dir = tempfile::tempdir().unwrap();
    let running = start_engine(&dir.path().join("weir.db"), "shop").await;
    let (v1, v2) = (sample_app("v1", 0.0).await, sample_app("v2", 0.0).await);
    let spec = rollout(
        &format!("{{url: \"http://{v1}\", healthCheck: /healthz}}"),
        &format!("{{url: \"http://{v2}\", healthCheck: /healthz}}"),
        "[50, 100]",
    );
    let key = RolloutKey::of(&spec);
    assert_eq!(
        running.targets.judge_baseline(&key, &spec, None).await,
        None,
        "no router yet: nothing to tell"
    );
    running.handle.apply(spec.clone(), None).await.unwrap();
    let load = load(&running, &key);
    assert_eq!(
        wait_for(&running.store, &key, &[Phase::Succeeded, Phase::Failed]).await,
        Phase::Succeeded
    );
    load.stop().await;
    // The run is over, so the engine's judges no longer look. Requests the load left in flight
    // may still finish: the baseline lies between the router's counts before and after it.
    let v2_revision = spec.spec.target.local().unwrap().canary.revision();
    let v2_counts = |snapshot: weir_router::MetricsSnapshot| {
        let v2 = snapshot
            .get(&v2_revision, weir_router::Traffic::Served)
            .expect("v2 served");
        (v2.requests, v2.errors)
    };
    let before = v2_counts(running.targets.metrics(&key).await.unwrap());
    assert!(before.0 > 0);
    let baseline = running
        .targets
        .judge_baseline(&key, &spec, Some(1_000.0))
        .await
        .expect("the router counted the primary");
    let after = v2_counts(running.targets.metrics(&key).await.unwrap());
    assert!(
        before.0 <= baseline.requests
            && before.1 <= baseline.errors
            && baseline.requests <= after.0
            && baseline.errors <= after.1,
        "{before:?} <= {baseline:?} <= {after:?}"
    );
    // Counted against the threshold asked for (how many were slow depends on the machine's load).
    assert!(
        baseline.slow.is_some_and(|slow| slow <= baseline.requests),
        "{baseline:?}"
    );
    // It is the primary's whole record in this process: ten more requests, and it has them.
    for _ in 0..10 {
        assert!(body_at(running.listen).await.contains("v2"));
    }
    let again = running
        .targets
        .judge_baseline(&key, &spec, None)
        .await
        .unwrap();
    assert!(again.requests >= baseline.requests + 10, "{again:?}");
    assert_eq!(again.slow, None);
    running.stop(&key).await;
}

/// Holds a loopback port below the kernel's ephemeral range (where it never hands out ports on
/// its own), so that once the test lets go of it no other program is given it meanwhile.
fn hold_a_port() -> std::net::TcpListener {
    let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let start = 10_000 + (std::process::id() % 5_000) as u16;
    (start..low)
        .chain(10_000..start)
        .find_map(|port| std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).ok())
        .expect("a free port below the ephemeral range")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_whose_listen_address_is_taken_says_so_in_its_history_then_listens_once_free() {
    let dir = tempfile::tempdir().unwrap();
    // Only `shop`'s router is reserved; `taken` binds its own address, which the test holds.
    let running = start_engine(&dir.path().join("weir.db"), "shop").await;
    let held = hold_a_port();
    let address = held.local_addr().unwrap();
    let (v1, v2) = (sample_app("v1", 0.0).await, sample_app("v2", 0.0).await);
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: taken}}\nspec:\n  target:\n    kind: local\n    listen: \"{address}\"\n    primary: {{url: \"http://{v1}\", healthCheck: /healthz}}\n    canary: {{url: \"http://{v2}\", healthCheck: /healthz}}\n  plan: {{canary: {{steps: [{{weight: 10, pause: {{}}}}]}}}}\n  analysis: {{interval: 1s, progressDeadline: 5m}}\n"
    );
    let spec: Rollout = serde_saphyr::from_str(&yaml).unwrap();
    let key = RolloutKey::of(&spec);
    running.handle.apply(spec, None).await.unwrap();
    let target_events = || async {
        running
            .store
            .events(&key, 0, 500)
            .await
            .unwrap()
            .into_iter()
            .filter(|stored| stored.event.reason == EventReason::Target)
            .map(|stored| stored.event.message)
            .collect::<Vec<_>>()
    };
    let cannot = format!("the router cannot listen on {address} (spec.target.listen)");
    let noted = wait_until("the history to say the address is taken", || async {
        target_events()
            .await
            .into_iter()
            .find(|message| message.starts_with(&cannot))
    })
    .await;
    assert!(noted.contains("in use by another program"), "{noted}");
    // Said once, not at every tick: three more ticks try again and add nothing.
    let ticks = running.stats.ticks.load(Ordering::Relaxed);
    wait_until("three more ticks", || async {
        (running.stats.ticks.load(Ordering::Relaxed) >= ticks + 3).then_some(())
    })
    .await;
    let saying = target_events()
        .await
        .into_iter()
        .filter(|message| message.starts_with(&cannot))
        .count();
    assert_eq!(saying, 1, "{:?}", target_events().await);
    assert!(
        running.targets.metrics(&key).await.is_none(),
        "no router yet"
    );

    // Once the address is free, a later tick binds it and the run goes on.
    drop(held);
    let listens = format!("the router listens on http://{address}");
    wait_until("the router to listen once the address is free", || async {
        target_events().await.contains(&listens).then_some(())
    })
    .await;
    // It serves (v1, or v2 once the run is at its 10% step).
    let answer = get(&http1_client(), address, "/", &[]).await;
    assert!(answer.status.is_success(), "{}", answer.status);
    running.stop(&key).await;
}
