//! Scale benchmark (not a test): N rollouts in one engine with a synthetic target and metric
//! source, real SQLite commits, tick lateness and memory measured.
//!
//! ```sh
//! cargo run --release -p weir-engine --example scale -- --rollouts 10000 --interval 10 --seconds 120
//! ```
//! Prints tick lateness p50/p90/p99/max over the steady state (after the first interval), the
//! number of ticks and commits, and the process's resident memory (VmRSS and peak VmHWM).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_core::model::{Rollout, TargetKind};
use weir_engine::synthetic::{SyntheticMetrics, SyntheticTargets};
use weir_engine::{Engine, EngineOptions, Providers};
use weir_store::SqliteStore;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == name)
        .and_then(|index| args.get(index + 1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn memory_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

fn rollout(index: u64, interval: u64) -> Rollout {
    // 1% steps keep every rollout progressing (and committing) on every tick of the run.
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: r{index:05}, namespace: bench}}\nspec:\n  target: {{kind: flag, revision: rev-{index}}}\n  plan: {{canary: {{stepWeight: 1}}}}\n  analysis:\n    interval: {interval}s\n    progressDeadline: 1h\n    metrics: [{{name: request-success-rate, thresholdRange: {{min: 99}}}}]\n"
    );
    serde_saphyr::from_str(&yaml).unwrap()
}

fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let rollouts = arg("--rollouts", 10_000);
    let interval = arg("--interval", 10);
    let seconds = arg("--seconds", 120);
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("scale.db"))
        .await
        .unwrap();
    let providers = Providers {
        targets: vec![(TargetKind::Flag, Arc::new(SyntheticTargets::default()))],
        metrics: vec![Arc::new(SyntheticMetrics::default())],
        hooks: Arc::new(weir_webhooks::hooks::HttpHookRunner::default()),
        notifier: Arc::new(weir_webhooks::hooks::LogNotifier),
        catalog: Default::default(),
    };
    let samples: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
    let sink = {
        let samples = Arc::clone(&samples);
        Arc::new(move |late: Duration| {
            let micros = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
            samples.lock().unwrap().push((Instant::now(), micros));
        })
    };
    let (engine, handle) = Engine::new(store, providers, EngineOptions::default());
    let engine = engine.with_lateness_sink(sink);
    let stats = engine.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(engine.run(async move {
        let _ = stopped.await;
    }));
    let rss_before = memory_kib("VmRSS:");
    let applying = Instant::now();
    for index in 0..rollouts {
        handle.apply(rollout(index, interval), None).await.unwrap();
    }
    println!(
        "applied {rollouts} rollouts in {:.1}s",
        applying.elapsed().as_secs_f64()
    );
    let start = Instant::now();
    let steady_from = start + Duration::from_secs(interval * 2);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let _ = stop.send(());
    let _ = running.await;

    let samples = samples.lock().unwrap();
    let mut steady: Vec<u64> = samples
        .iter()
        .filter(|(at, _)| *at >= steady_from)
        .map(|(_, late)| *late)
        .collect();
    let mut all: Vec<u64> = samples.iter().map(|(_, late)| *late).collect();
    steady.sort_unstable();
    all.sort_unstable();
    let ms = |micros: u64| micros as f64 / 1000.0;
    println!("rollouts {rollouts}, interval {interval}s, measured {seconds}s");
    println!(
        "ticks {} commits {} in {} store transactions, provider errors {}",
        stats.ticks.load(std::sync::atomic::Ordering::Relaxed),
        stats.commits.load(std::sync::atomic::Ordering::Relaxed),
        stats
            .commit_batches
            .load(std::sync::atomic::Ordering::Relaxed),
        stats
            .provider_errors
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    println!(
        "tick lateness, steady state ({} ticks after the first two intervals): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        steady.len(),
        ms(percentile(&steady, 0.5)),
        ms(percentile(&steady, 0.9)),
        ms(percentile(&steady, 0.99)),
        ms(percentile(&steady, 1.0)),
    );
    println!(
        "tick lateness, all ({} ticks incl. the start-up burst): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        all.len(),
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        ms(percentile(&all, 1.0)),
    );
    println!(
        "memory: VmRSS {} MiB (before applying: {} MiB), peak VmHWM {} MiB",
        memory_kib("VmRSS:") / 1024,
        rss_before / 1024,
        memory_kib("VmHWM:") / 1024
    );
}
