//! Flag rollouts in numbers: boolean flags, rollouts of them on a manual schedule, and one
//! engine with the real `flag` target (`FlagTargets` over `Flags`) over a real SQLite store -
//! what the schedule replay test (`crates/weir-flags/tests/schedule_replay.rs`) and the
//! lateness benchmark (`crates/weir-flags/examples/schedule_lateness.rs`) share.

use std::sync::{Arc, OnceLock};

use jiff::Timestamp;
use weir_core::catalog::SharedCatalog;
use weir_core::document::{Document, load};
use weir_core::model::{Flag, Plan, Rollout, ScheduleEntry, SchedulePlan, Target};
use weir_core::units::Weight;
use weir_engine::clock::SharedClock;
use weir_engine::{Engine, EngineHandle, EngineOptions, Providers};
use weir_flags::{FlagTargets, Flags};
use weir_store::SqliteStore;
use weir_webhooks::{HttpHookRunner, LogNotifier};

/// The variation users have before a rollout (`false`).
pub const CONTROL: &str = "control";
/// The variation a rollout moves them to (`true`).
pub const TARGET: &str = "target";

/// Boolean flag `key` of `namespace`: [`CONTROL`] for everyone.
pub fn flag(namespace: &str, key: &str) -> Flag {
    // Parsed once: thousands of flags differ only in their names.
    static TEMPLATE: OnceLock<Flag> = OnceLock::new();
    let template = TEMPLATE.get_or_init(|| {
        let yaml = format!(
            "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {{name: template, namespace: template}}
spec:
  variations: [{{name: {CONTROL}, value: false}}, {{name: {TARGET}, value: true}}]
  defaultStrategy: {{variation: {CONTROL}}}
"
        );
        match document(&yaml) {
            Document::Flag(flag) => *flag,
            other => panic!("not a flag: {other:?}"),
        }
    });
    let mut flag = template.clone();
    flag.metadata.name = key.to_string();
    flag.metadata.namespace = Some(namespace.to_string());
    flag
}

/// Rollout `name` of `namespace` moving flag `flag` from [`CONTROL`] to [`TARGET`] on the
/// manual schedule `entries` (time, weight in percent). Its interval is an hour (longer than
/// any gap between entries, so between entries nothing ticks but the entries themselves).
pub fn scheduled_rollout(
    namespace: &str,
    name: &str,
    flag: &str,
    entries: &[(Timestamp, f64)],
) -> Rollout {
    // Parsed once, then filled in: thousands of rollouts differ only in these fields.
    static TEMPLATE: OnceLock<Rollout> = OnceLock::new();
    let template = TEMPLATE.get_or_init(|| {
        let yaml = format!(
            "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: template, namespace: template}}
spec:
  target: {{kind: flag, flag: template, control: {CONTROL}, variation: {TARGET}}}
  plan: {{schedule: {{manual: [{{at: \"2026-01-01T00:00:00Z\", weight: 100}}]}}}}
  analysis: {{interval: 1h, progressDeadline: 2h}}
"
        );
        match document(&yaml) {
            Document::Rollout(rollout) => *rollout,
            other => panic!("not a rollout: {other:?}"),
        }
    });
    let mut rollout = template.clone();
    rollout.metadata.name = name.to_string();
    rollout.metadata.namespace = Some(namespace.to_string());
    if let Target::Flag(target) = &mut rollout.spec.target {
        target.flag = Some(flag.to_string());
    }
    let manual = entries
        .iter()
        .map(|(at, weight)| ScheduleEntry {
            at: *at,
            weight: Weight::from_percent_f64(*weight).unwrap(),
        })
        .collect();
    rollout.spec.plan = Plan::Schedule(SchedulePlan {
        manual: Some(manual),
        template: None,
    });
    rollout
}

fn document(yaml: &str) -> Document {
    match load(yaml.as_bytes()).into_iter().next() {
        Some(Ok(loaded)) => loaded.document,
        other => panic!("{yaml}: {other:?}"),
    }
}

/// An engine whose only target is the real `flag` target, not yet running.
pub struct FlagEngine {
    /// The flags the target moves.
    pub flags: Flags<SqliteStore>,
    /// The engine (start it with [`crate::engine::Background::start`] or `run`).
    pub engine: Engine<SqliteStore>,
    /// Its handle.
    pub handle: EngineHandle,
}

/// An engine over `store` taking its time from `clock`, with `FlagTargets` over the flags
/// stored in the same store (loaded now, as `weir serve` does at start-up).
pub async fn flag_engine(store: &SqliteStore, clock: SharedClock) -> FlagEngine {
    let options = EngineOptions {
        clock,
        ..EngineOptions::default()
    };
    flag_engine_with(store, options).await
}

/// [`flag_engine`] with other engine options.
pub async fn flag_engine_with(store: &SqliteStore, options: EngineOptions) -> FlagEngine {
    let flags = Flags::open(store.clone()).await.unwrap();
    let providers = FlagTargets::new(flags.clone()).add_to(Providers::new(
        SharedCatalog::default(),
        Arc::new(HttpHookRunner::default()),
        Arc::new(LogNotifier),
    ));
    let (engine, handle) = Engine::new(store.clone(), providers, options);
    FlagEngine {
        flags,
        engine,
        handle,
    }
}

/// The `q` quantile (0..=1) of `sorted` by the nearest rank (0 for none).
pub fn percentile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}
