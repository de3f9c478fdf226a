//! Schedule lateness benchmark (not a test): N flags, each with a progressive rollout whose
//! schedule entries fall inside one window, in one engine with the real `flag` target and a real
//! SQLite file (`synchronous = FULL`), on the system clock. Measures, for every entry, how late
//! it was, twice: *decided* - its `status.triggered[].triggeredAt` minus its `at` (the time the
//! core took the step at, committed with it) - and *in effect* - when the engine announced the
//! step committed and the flag's new weights applied (its status-change broadcast, after the
//! commit and the effects) minus `at`. The second is what users of the flag see.
//!
//! ```sh
//! cargo run --release -p weir-flags --example schedule_lateness -- --rollouts 10000 --window 30 --lead 90
//! ```
//! `--lead`: seconds from start to the window (creating the flags and applying the rollouts
//! happens first and must fit in it); `--window`: seconds over which the entries are spread
//! evenly; `--entries K`: entries per rollout, 5 minutes apart (the seed's minimum).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use std::collections::HashMap;

use tokio::sync::broadcast::error::RecvError;
use weir_engine::EngineOptions;
use weir_store::{RolloutKey, SqliteStore, Store};
use weir_testkit::flags::{FlagEngine, flag, flag_engine_with, percentile, scheduled_rollout};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == name)
        .and_then(|index| args.get(index + 1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
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
    let options = EngineOptions {
        // Room for every change of the run, so the listener below misses none.
        change_buffer: 1 << 20,
        ..EngineOptions::default()
    };
    let FlagEngine {
        flags,
        engine,
        handle,
    } = flag_engine_with(&store, options).await;
    let stats = engine.stats();
    // When each step that applied entries was announced: (rollout, entries applied) -> time.
    let mut changes = handle.subscribe();
    let (stop_listening, mut listening) = tokio::sync::oneshot::channel::<()>();
    let listener = tokio::spawn(async move {
        let mut in_effect: HashMap<(RolloutKey, usize), Timestamp> = HashMap::new();
        let mut lagged = 0u64;
        loop {
            let change = tokio::select! {
                change = changes.recv() => change,
                _ = &mut listening => break,
            };
            match change {
                Ok(change) => {
                    let seen = Timestamp::now();
                    if let Some(status) = change.status {
                        in_effect
                            .entry((change.key, status.triggered.len()))
                            .or_insert(seen);
                    }
                }
                Err(RecvError::Lagged(missed)) => lagged += missed,
                Err(RecvError::Closed) => break,
            }
        }
        (in_effect, lagged)
    });
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
        let key = format!("f{index:05}");
        flags
            .apply(flag("bench", &key), None, Timestamp::now())
            .await
            .unwrap();
        let first = window_start + step * (index as i32);
        let entries: Vec<(Timestamp, f64)> = (0..per_rollout)
            .map(|k| {
                let at = first + SignedDuration::from_secs(300 * k as i64);
                let weight = ((k + 1) * 100 / per_rollout).clamp(1, 100);
                (at, weight as f64)
            })
            .collect();
        let name = format!("r{index:05}");
        handle
            .apply(scheduled_rollout("bench", &name, &key, &entries), None)
            .await
            .unwrap();
        planned.push((
            RolloutKey::new("bench", name),
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
    let _ = stop_listening.send(());
    let (in_effect, lagged) = listener.await.unwrap();

    // Lateness from what each rollout's status says it applied, entry by entry: an entry
    // applied together with others after a delay counts with its own time.
    let mut lateness_ms: Vec<i64> = Vec::new();
    let mut effect_ms: Vec<i64> = Vec::new();
    let mut unannounced = 0usize;
    let mut missing = 0usize;
    let mut early = 0usize;
    let mut wrong = 0usize;
    for (key, entries) in &planned {
        let status = store.get(key).await.unwrap().unwrap().status;
        missing += entries.len().saturating_sub(status.triggered.len());
        for (index, (at, fired)) in entries.iter().zip(&status.triggered).enumerate() {
            // The first change that showed this entry applied.
            let announced = (index + 1..=status.triggered.len())
                .filter_map(|applied| in_effect.get(&(key.clone(), applied)))
                .min();
            match announced {
                Some(seen) => effect_ms.push(seen.duration_since(*at).as_millis() as i64),
                None => unannounced += 1,
            }
            if fired.at != *at {
                wrong += 1;
            }
            let late = fired.lateness().as_millis() as i64;
            if late < 0 {
                early += 1;
            }
            lateness_ms.push(late);
        }
    }
    lateness_ms.sort_unstable();
    effect_ms.sort_unstable();
    println!(
        "entries fired {} of {} planned ({missing} missing, {early} early, {wrong} out of order); engine ticks {}, commits {} in {} transactions, provider errors {}",
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
        "entry lateness, decided (triggeredAt - at): p50 {} ms, p90 {} ms, p99 {} ms, max {} ms",
        percentile(&lateness_ms, 0.5),
        percentile(&lateness_ms, 0.9),
        percentile(&lateness_ms, 0.99),
        percentile(&lateness_ms, 1.0),
    );
    println!(
        "entry lateness, in effect (committed and applied - at): p50 {} ms, p90 {} ms, p99 {} ms, max {} ms ({} entries; {unannounced} not seen, {lagged} changes missed)",
        percentile(&effect_ms, 0.5),
        percentile(&effect_ms, 0.9),
        percentile(&effect_ms, 0.99),
        percentile(&effect_ms, 1.0),
        effect_ms.len(),
    );
}
