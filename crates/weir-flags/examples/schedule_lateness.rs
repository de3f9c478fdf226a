//! Schedule lateness benchmark (not a test): N flags, each with a progressive rollout whose
//! schedule entries fall inside one window, in one engine with the real `flag` target and a real
//! SQLite file (`synchronous = FULL`). Measures, for every entry, how long after its time the
//! step that applied it was committed (the event's time minus the entry's `at`).
//!
//! ```sh
//! cargo run --release -p weir-flags --example schedule_lateness -- --rollouts 10000 --window 30 --lead 90
//! ```
//! `--lead`: seconds from start to the window (creating the flags and applying the rollouts
//! happens first and must fit in it); `--window`: seconds over which the entries are spread
//! evenly; `--entries K`: entries per rollout, 5 minutes apart (the seed's minimum).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use weir_core::document::{Document, load};
use weir_core::model::{EventReason, Flag, Rollout};
use weir_engine::{Engine, EngineOptions, Providers};
use weir_flags::{FlagTargets, Flags};
use weir_store::{RolloutKey, SqliteStore, Store};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == name)
        .and_then(|index| args.get(index + 1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn flag(index: u64) -> Flag {
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Flag\nmetadata: {{name: f{index:05}, namespace: bench}}\nspec:\n  variations: [{{name: control, value: false}}, {{name: target, value: true}}]\n  defaultStrategy: {{variation: control}}\n"
    );
    match load(yaml.as_bytes()).into_iter().next() {
        Some(Ok(loaded)) => match loaded.document {
            Document::Flag(flag) => *flag,
            other => panic!("not a flag: {other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

fn rollout(index: u64, entries: &[(Timestamp, u32)]) -> Rollout {
    let manual: Vec<String> = entries
        .iter()
        .map(|(at, weight)| format!("{{at: \"{at}\", weight: {weight}}}"))
        .collect();
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: r{index:05}, namespace: bench}}\nspec:\n  target: {{kind: flag, flag: f{index:05}, control: control, variation: target}}\n  plan: {{schedule: {{manual: [{}]}}}}\n  analysis: {{interval: 1h, progressDeadline: 2h}}\n",
        manual.join(", ")
    );
    serde_saphyr::from_str(&yaml).unwrap()
}

fn percentile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let rollouts = arg("--rollouts", 10_000);
    let window = arg("--window", 30);
    let lead = arg("--lead", 90);
    let per_rollout = arg("--entries", 1).max(1);
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("lateness.db"))
        .await
        .unwrap();
    let flags = Flags::open(store.clone()).await.unwrap();
    let providers = FlagTargets::new(flags.clone()).add_to(Providers::new(
        weir_core::catalog::SharedCatalog::default(),
        Arc::new(weir_webhooks::hooks::HttpHookRunner::default()),
        Arc::new(weir_webhooks::hooks::LogNotifier),
    ));
    let (engine, handle) = Engine::new(store.clone(), providers, EngineOptions::default());
    let stats = engine.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(engine.run(async move {
        let _ = stopped.await;
    }));

    let start = Timestamp::now();
    let window_start = start + SignedDuration::from_secs(lead as i64);
    let step = SignedDuration::from_micros((window * 1_000_000 / rollouts.max(1)) as i64);
    let setting_up = Instant::now();
    let mut planned: Vec<(RolloutKey, Vec<Timestamp>)> = Vec::new();
    for index in 0..rollouts {
        flags
            .apply(flag(index), None, Timestamp::now())
            .await
            .unwrap();
        let first = window_start + step * (index as i32);
        let entries: Vec<(Timestamp, u32)> = (0..per_rollout)
            .map(|k| {
                let at = first + SignedDuration::from_secs(300 * k as i64);
                let weight = u32::try_from((k + 1) * 100 / per_rollout).unwrap_or(100);
                (at, weight.clamp(1, 100))
            })
            .collect();
        handle.apply(rollout(index, &entries), None).await.unwrap();
        planned.push((
            RolloutKey::new("bench", format!("r{index:05}")),
            entries.iter().map(|(at, _)| *at).collect(),
        ));
    }
    let set_up = setting_up.elapsed();
    println!(
        "created {rollouts} flags and applied {rollouts} rollouts in {:.1}s (the window opens {lead}s after start)",
        set_up.as_secs_f64()
    );
    let last = window_start
        + SignedDuration::from_secs((window + 300 * (per_rollout - 1)) as i64)
        + SignedDuration::from_secs(5);
    let wait = Timestamp::now().duration_until(last);
    if wait > SignedDuration::ZERO {
        tokio::time::sleep(Duration::try_from(wait).unwrap()).await;
    }
    let _ = stop.send(());
    let _ = running.await;

    let mut lateness_ms: Vec<i64> = Vec::new();
    let mut missing = 0usize;
    let mut early = 0usize;
    for (key, entries) in &planned {
        let events = store.events(key, 0, 1000).await.unwrap();
        let fired: Vec<Timestamp> = events
            .iter()
            .filter(|stored| {
                stored.event.reason == EventReason::Advanced
                    && stored.event.message.starts_with("scheduled weight")
            })
            .map(|stored| stored.event.at)
            .collect();
        if fired.len() < entries.len() {
            missing += entries.len() - fired.len();
        }
        for (at, done) in entries.iter().zip(&fired) {
            let late = done.duration_since(*at).as_millis() as i64;
            if late < 0 {
                early += 1;
            }
            lateness_ms.push(late);
        }
    }
    lateness_ms.sort_unstable();
    println!(
        "entries fired {} of {} planned ({missing} missing, {early} early); engine ticks {}, commits {} in {} transactions, provider errors {}",
        lateness_ms.len(),
        planned
            .iter()
            .map(|(_, entries)| entries.len())
            .sum::<usize>(),
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
        "entry lateness: p50 {} ms, p90 {} ms, p99 {} ms, max {} ms",
        percentile(&lateness_ms, 0.5),
        percentile(&lateness_ms, 0.9),
        percentile(&lateness_ms, 0.99),
        percentile(&lateness_ms, 1.0),
    );
}
