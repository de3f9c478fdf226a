//! The watcher replayed on a simulated clock (issue 13): 10,000 flag rollouts in one engine with
//! the real `flag` target over a real SQLite file, each with schedule entries 5 minutes apart,
//! the clock moved one second at a time through the whole schedule. After each move the test
//! waits until the engine has done everything the move made due (`Engine::activity`), so every
//! entry must take effect at the first second on or after its time: exactly once, in order,
//! with the flag's weights, and `FINISHED` at the end. A second test stops the engine for ten
//! minutes: the entries missed are applied in one step to the latest weight due, and the
//! history says which were late and by how much.
//!
//! Run with `--nocapture` to see the lateness distribution and where the time went.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;
use weir_core::model::{
    EventReason, FlagWeight, Phase, RolloutStatus, ScheduleState, Strategy, TriggeredEntry,
};
use weir_engine::Activity;
use weir_engine::clock::{Clock, ManualClock};
use weir_flags::Flags;
use weir_store::{FlagKey, FlagStore, RolloutKey, SqliteStore, Store};
use weir_testkit::engine::{Background, until_idle};
use weir_testkit::fixtures::TempDb;
use weir_testkit::flags::{CONTROL, FlagEngine, TARGET, flag, flag_engine, percentile};
use weir_testkit::wait::no_hang_within;

/// How far the clock moves at a time.
const STEP: Duration = Duration::from_secs(1);
/// The seed's minimum gap between entries.
const GAP_SECS: i64 = 300;
/// Far above any plausible run time: only there to fail a deadlock instead of hanging.
const HANG: Duration = Duration::from_secs(3600);

/// One rollout as planned: its schedule, and where its flag started.
struct Planned {
    key: RolloutKey,
    flag: FlagKey,
    entries: Vec<(Timestamp, f64)>,
    flag_version: u64,
}

impl Planned {
    fn last_weight(&self) -> f64 {
        self.entries.last().map_or(0.0, |entry| entry.1)
    }
}

/// The replay's world: a clock, a database file, an engine running on them.
struct World {
    clock: ManualClock,
    start: Timestamp,
    _db: TempDb,
    store: SqliteStore,
    flags: Flags<weir_store::SqliteStore>,
    handle: weir_engine::EngineHandle,
    activity: watch::Receiver<Activity>,
    engine: Background,
    stats: std::sync::Arc<weir_engine::EngineStats>,
}

impl World {
    async fn new(start: Timestamp) -> World {
        let clock = ManualClock::new(start);
        let db = TempDb::new();
        let store = SqliteStore::open(&db.path()).await.unwrap();
        let (flags, handle, activity, engine, stats) = start_engine(&store, &clock).await;
        World {
            clock,
            start,
            _db: db,
            store,
            flags,
            handle,
            activity,
            engine,
            stats,
        }
    }

    /// Flag `f{index}` and rollout `r{index}` of it on schedule `entries`.
    async fn add(&self, namespace: &str, index: usize, entries: Vec<(Timestamp, f64)>) -> Planned {
        let flag_key = format!("f{index:05}");
        let (stored, _) = self
            .flags
            .apply(flag(namespace, &flag_key), None, self.clock.now())
            .await
            .unwrap();
        let name = format!("r{index:05}");
        let rollout = weir_testkit::flags::scheduled_rollout(namespace, &name, &flag_key, &entries);
        self.handle.apply(rollout, None).await.unwrap();
        Planned {
            key: RolloutKey::new(namespace, name),
            flag: FlagKey::new(namespace, flag_key),
            entries,
            flag_version: stored.version,
        }
    }

    /// Moves the clock by `by` and waits until the engine has done everything due.
    async fn advance(&mut self, by: Duration) {
        self.clock.advance(by);
        until_idle(&mut self.activity, &self.clock).await;
    }

    /// Moves the clock in [`STEP`]s until it shows `until` or later.
    async fn replay_until(&mut self, until: Timestamp) -> Duration {
        let mut slowest = Duration::ZERO;
        while self.clock.now() < until {
            let step = Instant::now();
            self.advance(STEP).await;
            slowest = slowest.max(step.elapsed());
        }
        slowest
    }

    /// The first time on the clock's grid (start + n steps) at or after `at`: when an entry
    /// due at `at` must take effect.
    fn on_grid(&self, at: Timestamp) -> Timestamp {
        let step = STEP.as_nanos() as i128;
        let since = at.duration_since(self.start).as_nanos();
        let steps = since.div_euclid(step) + i128::from(since.rem_euclid(step) != 0);
        self.start + SignedDuration::from_nanos_i128(steps * step)
    }

    async fn status(&self, key: &RolloutKey) -> RolloutStatus {
        self.store.get(key).await.unwrap().unwrap().status
    }
}

async fn start_engine(
    store: &SqliteStore,
    clock: &ManualClock,
) -> (
    Flags<SqliteStore>,
    weir_engine::EngineHandle,
    watch::Receiver<Activity>,
    Background,
    std::sync::Arc<weir_engine::EngineStats>,
) {
    let FlagEngine {
        flags,
        mut engine,
        handle,
    } = flag_engine(store, clock.shared()).await;
    let activity = engine.activity();
    let stats = engine.stats();
    (flags, handle, activity, Background::start(engine), stats)
}

/// `strategy` with `target` at `percent` and control at the rest (or everyone on one).
fn split(percent: f64) -> Strategy {
    if percent >= 100.0 {
        return Strategy {
            variation: Some(TARGET.into()),
            weights: None,
        };
    }
    Strategy {
        variation: None,
        weights: Some(BTreeMap::from([
            (
                CONTROL.to_string(),
                FlagWeight::from_percent(100.0 - percent).unwrap(),
            ),
            (
                TARGET.to_string(),
                FlagWeight::from_percent(percent).unwrap(),
            ),
        ])),
    }
}

fn on_control() -> Strategy {
    Strategy {
        variation: Some(CONTROL.into()),
        weights: None,
    }
}

/// The history's schedule events of `key`, in order.
async fn scheduled_events(store: &SqliteStore, key: &RolloutKey) -> Vec<weir_core::model::Event> {
    store
        .events(key, 0, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|stored| stored.event)
        .filter(|event| {
            event.reason == EventReason::Advanced && event.message.starts_with("scheduled weight")
        })
        .collect()
}

/// Checks that `triggered` is `planned`'s entries in order, each applied at `applied(k)`.
fn check_triggered(
    planned: &Planned,
    triggered: &[TriggeredEntry],
    applied: impl Fn(usize) -> Timestamp,
) {
    let key = &planned.key;
    assert_eq!(
        triggered.len(),
        planned.entries.len(),
        "{key}: every entry exactly once: {triggered:?}"
    );
    for (index, (entry, (at, weight))) in triggered.iter().zip(&planned.entries).enumerate() {
        assert_eq!(entry.at, *at, "{key}: entry {index} out of order");
        assert_eq!(entry.weight.percent(), *weight, "{key}: entry {index}");
        assert_eq!(
            entry.triggered_at,
            applied(index),
            "{key}: entry {index} due at {at} took effect at {}",
            entry.triggered_at
        );
    }
}

/// Checks how a schedule ended: FINISHED; promoted (the flag's stored strategy is the target
/// variation, written once when the run ended) or waiting at its last weight below 100% (the
/// split in force over the stored flag, which no step wrote).
async fn check_end(world: &World, planned: &Planned, status: &RolloutStatus) {
    let key = &planned.key;
    assert_eq!(
        status.schedule_state,
        Some(ScheduleState::Finished),
        "{key}"
    );
    let snapshot = world.flags.snapshot();
    let entry = snapshot
        .get(&planned.flag.namespace, &planned.flag.key)
        .unwrap();
    let stored = world.store.get_flag(&planned.flag).await.unwrap().unwrap();
    if planned.last_weight() >= 100.0 {
        assert_eq!(status.phase, Phase::Succeeded, "{key}: {}", status.message);
        assert_eq!(entry.rollout_strategy, None, "{key}");
        assert_eq!(stored.flag.spec.default_strategy, split(100.0), "{key}");
        assert_eq!(stored.version, planned.flag_version + 1, "{key}: one write");
        assert_eq!(world.flags.rollout_of(&planned.flag), None, "{key}");
    } else {
        assert_eq!(
            status.phase,
            Phase::WaitingPromotion,
            "{key}: {}",
            status.message
        );
        assert_eq!(
            entry.effective().spec.default_strategy,
            split(planned.last_weight()),
            "{key}"
        );
        // Every step was one commit of the rollout: the flag itself was never written.
        assert_eq!(stored.flag.spec.default_strategy, on_control(), "{key}");
        assert_eq!(stored.version, planned.flag_version, "{key}");
        assert_eq!(
            world.flags.rollout_of(&planned.flag).as_ref(),
            Some(key),
            "{key}"
        );
    }
}

/// Moves the clock an interval (an hour) at a time until every rollout has ended its run or
/// waits for promotion: promotion takes three ticks after the last entry.
async fn finish(world: &mut World, planned: &[Planned]) {
    for _ in 0..6 {
        world.advance(Duration::from_secs(3600)).await;
        let all = world.store.load_all().await.unwrap();
        if all.iter().all(|stored| {
            matches!(
                stored.status.phase,
                Phase::Succeeded | Phase::WaitingPromotion
            )
        }) {
            return;
        }
    }
    let mut phases: BTreeMap<String, usize> = BTreeMap::new();
    for stored in world.store.load_all().await.unwrap() {
        *phases
            .entry(format!("{:?}", stored.status.phase))
            .or_default() += 1;
    }
    panic!(
        "{} rollouts not done after six hours: {phases:?}",
        planned.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_flag_rollouts_replay_their_schedules_on_a_simulated_clock() {
    no_hang_within(HANG, replay(10_000)).await;
}

async fn replay(rollouts: usize) {
    let began = Instant::now();
    let start: Timestamp = "2026-03-01T00:00:00Z".parse().unwrap();
    let mut world = World::new(start).await;
    // The schedules: entries 5 minutes apart from T0 = start + 1 minute. Every fifth rollout
    // starts at T0 itself (2,000 entries due at the same instant, three times over); the
    // others start (i mod 300) seconds later, on the second or 250, 500 or 750 ms after it.
    // Even rollouts go to 100% (promotion), odd ones stop at 62.5% (a split).
    let t0 = start + SignedDuration::from_mins(1);
    let mut planned = Vec::with_capacity(rollouts);
    for index in 0..rollouts {
        let first = if index % 5 == 0 {
            t0
        } else {
            t0 + SignedDuration::from_millis((index % 300) as i64 * 1000 + (index % 4) as i64 * 250)
        };
        let weights: [f64; 3] = if index % 2 == 0 {
            [12.5, 40.0, 100.0]
        } else {
            [5.0, 25.0, 62.5]
        };
        let entries = weights
            .iter()
            .enumerate()
            .map(|(k, weight)| {
                (
                    first + SignedDuration::from_secs(GAP_SECS * k as i64),
                    *weight,
                )
            })
            .collect();
        planned.push(world.add("replay", index, entries).await);
    }
    until_idle(&mut world.activity, &world.clock).await;
    let set_up = began.elapsed();
    // Before its first entry every rollout waits at 0 and its flag is as it was.
    for planned in &planned {
        let status = world.status(&planned.key).await;
        assert_eq!(
            (status.phase, status.schedule_state),
            (Phase::Progressing, Some(ScheduleState::Waiting)),
            "{}: {}",
            planned.key,
            status.message
        );
        let snapshot = world.flags.snapshot();
        let entry = snapshot
            .get(&planned.flag.namespace, &planned.flag.key)
            .unwrap();
        assert_eq!(entry.effective().spec.default_strategy, on_control());
    }
    let commits_before = world
        .stats
        .commits
        .load(std::sync::atomic::Ordering::Relaxed);
    let batches_before = world
        .stats
        .commit_batches
        .load(std::sync::atomic::Ordering::Relaxed);

    let last = planned
        .iter()
        .filter_map(|planned| planned.entries.last())
        .map(|entry| entry.0)
        .max()
        .unwrap();
    let replaying = Instant::now();
    let slowest_step = world.replay_until(last).await;
    let replayed = replaying.elapsed();
    let steps = world.clock.now().duration_since(start).as_secs();
    let commits = world
        .stats
        .commits
        .load(std::sync::atomic::Ordering::Relaxed)
        - commits_before;
    let batches = world
        .stats
        .commit_batches
        .load(std::sync::atomic::Ordering::Relaxed)
        - batches_before;
    let finishing = Instant::now();
    finish(&mut world, &planned).await;
    let finished = finishing.elapsed();

    let checking = Instant::now();
    let mut lateness_ms: Vec<i64> = Vec::new();
    for planned in &planned {
        let status = world.status(&planned.key).await;
        check_triggered(planned, &status.triggered, |index| {
            world.on_grid(planned.entries[index].0)
        });
        for entry in &status.triggered {
            let late = entry.lateness();
            assert!(
                late >= SignedDuration::ZERO && late < SignedDuration::try_from(STEP).unwrap(),
                "{}: {late:?} late, not within one step of the clock",
                planned.key
            );
            lateness_ms.push(late.as_millis() as i64);
        }
        // One event per entry, at the time it took effect, with no lateness note.
        let events = scheduled_events(&world.store, &planned.key).await;
        let expected: Vec<(Timestamp, String)> = status
            .triggered
            .iter()
            .enumerate()
            .map(|(index, entry)| {
                (
                    entry.triggered_at,
                    format!(
                        "scheduled weight {} (entry {} of {})",
                        entry.weight,
                        index + 1,
                        planned.entries.len()
                    ),
                )
            })
            .collect();
        let seen: Vec<(Timestamp, String)> = events
            .into_iter()
            .map(|event| (event.at, event.message))
            .collect();
        assert_eq!(seen, expected, "{}", planned.key);
        check_end(&world, planned, &status).await;
    }
    let checked = checking.elapsed();
    lateness_ms.sort_unstable();
    let mut by_value: BTreeMap<i64, usize> = BTreeMap::new();
    for late in &lateness_ms {
        *by_value.entry(*late).or_default() += 1;
    }
    let mut due_at: BTreeMap<Timestamp, usize> = BTreeMap::new();
    for planned in &planned {
        for (at, _) in &planned.entries {
            *due_at.entry(*at).or_default() += 1;
        }
    }
    let busiest = due_at.values().max().copied().unwrap_or(0);
    world.engine.stop().await;
    println!(
        "{rollouts} rollouts, {} entries ({} distinct times, up to {busiest} due at one instant), clock moved {steps} x {STEP:?} then 1h steps to the end",
        lateness_ms.len(),
        due_at.len(),
    );
    println!(
        "lateness in simulated time: p50 {} ms, p99 {} ms, max {} ms; by value {by_value:?}",
        percentile(&lateness_ms, 0.5),
        percentile(&lateness_ms, 0.99),
        percentile(&lateness_ms, 1.0),
    );
    println!(
        "wall time: set-up {:.1}s (flags, rollouts, their first ticks), replay {:.1}s (slowest step {:.0} ms; {commits} commits in {batches} transactions), promotion {:.1}s, checks {:.1}s, total {:.1}s",
        set_up.as_secs_f64(),
        replayed.as_secs_f64(),
        slowest_step.as_secs_f64() * 1000.0,
        finished.as_secs_f64(),
        checked.as_secs_f64(),
        began.elapsed().as_secs_f64(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_downtime_the_overdue_entries_apply_at_once_at_the_latest_weight_due() {
    no_hang_within(HANG, downtime(200)).await;
}

async fn downtime(rollouts: usize) {
    let start: Timestamp = "2026-03-01T00:00:00Z".parse().unwrap();
    let mut world = World::new(start).await;
    // Four entries 5 minutes apart, starting within the first 50 s after T0.
    let t0 = start + SignedDuration::from_mins(1);
    let mut planned = Vec::with_capacity(rollouts);
    for index in 0..rollouts {
        let first =
            t0 + SignedDuration::from_millis((index % 50) as i64 * 1000 + (index % 2) as i64 * 500);
        let entries = [10.0, 30.0, 60.0, 100.0]
            .iter()
            .enumerate()
            .map(|(k, weight)| {
                (
                    first + SignedDuration::from_secs(GAP_SECS * k as i64),
                    *weight,
                )
            })
            .collect();
        planned.push(world.add("downtime", index, entries).await);
    }
    until_idle(&mut world.activity, &world.clock).await;
    // Every first entry on time.
    world.replay_until(t0 + SignedDuration::from_secs(50)).await;
    for planned in &planned {
        let status = world.status(&planned.key).await;
        assert_eq!(status.triggered.len(), 1, "{}", planned.key);
    }

    // Down for ten minutes and a bit: every rollout misses its second and third entries.
    world.engine.stop().await;
    world.clock.advance(Duration::from_secs(610));
    let restarted = world.clock.now();
    assert!(
        planned.iter().all(|planned| {
            planned.entries[2].0 < restarted && planned.entries[3].0 > restarted
        })
    );
    let (flags, handle, activity, engine, stats) = start_engine(&world.store, &world.clock).await;
    (
        world.flags,
        world.handle,
        world.activity,
        world.engine,
        world.stats,
    ) = (flags, handle, activity, engine, stats);
    until_idle(&mut world.activity, &world.clock).await;

    let mut late_secs: Vec<i64> = Vec::new();
    for planned in &planned {
        let status = world.status(&planned.key).await;
        check_triggered(
            &Planned {
                key: planned.key.clone(),
                flag: planned.flag.clone(),
                entries: planned.entries[..3].to_vec(),
                flag_version: planned.flag_version,
            },
            &status.triggered,
            |index| match index {
                0 => world.on_grid(planned.entries[0].0),
                _ => restarted,
            },
        );
        assert_eq!(status.canary_weight.percent(), 60.0, "{}", planned.key);
        assert_eq!(status.schedule_state, Some(ScheduleState::Running));
        // One step for both, naming each late entry and how late it was.
        let events = scheduled_events(&world.store, &planned.key).await;
        assert_eq!(events.len(), 2, "{}: {events:?}", planned.key);
        let mut late = |index: usize| {
            let at = planned.entries[index].0;
            let late = restarted.duration_since(at);
            late_secs.push(late.as_secs());
            format!(
                "{}% due at {at} was {:#} late",
                planned.entries[index].1,
                SignedDuration::from_secs(late.as_secs())
            )
        };
        let expected = format!(
            "scheduled weight 60% (entry 3 of 4); overdue entries applied at once at the latest weight due: {}, {}",
            late(1),
            late(2)
        );
        assert_eq!(events[1].message, expected, "{}", planned.key);
        assert_eq!(events[1].at, restarted);
        // The flag's audience is at the latest weight due (laid over the stored flag again
        // after the restart).
        let snapshot = world.flags.snapshot();
        let entry = snapshot
            .get(&planned.flag.namespace, &planned.flag.key)
            .unwrap();
        assert_eq!(
            entry.effective().spec.default_strategy,
            split(60.0),
            "{}",
            planned.key
        );
    }

    // The last entry, after the restart, is on time again; then the run promotes.
    let last = planned
        .iter()
        .map(|planned| planned.entries[3].0)
        .max()
        .unwrap();
    world.replay_until(last).await;
    finish(&mut world, &planned).await;
    for planned in &planned {
        let status = world.status(&planned.key).await;
        assert_eq!(status.triggered.len(), 4, "{}", planned.key);
        assert_eq!(
            status.triggered[3].triggered_at,
            world.on_grid(planned.entries[3].0),
            "{}",
            planned.key
        );
        check_end(&world, planned, &status).await;
    }
    world.engine.stop().await;
    late_secs.sort_unstable();
    println!(
        "{rollouts} rollouts down for 610 s across two entries each: {} overdue entries applied at once on restart, {}s to {}s late, each pair in one step",
        late_secs.len(),
        late_secs.first().unwrap_or(&0),
        late_secs.last().unwrap_or(&0),
    );
}
