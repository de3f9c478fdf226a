//! Engine scale on PostgreSQL (not a test; docs/BENCHMARKS.md, "Engine scale on PostgreSQL"):
//! N rollouts with the synthetic target and metric source, on one instance and on three, each
//! instance a separate OS process with its own `PostgresStore`, `ClusterMember` and `Engine`
//! (wired as `weir serve --db postgres://` wires them), against a throwaway PostgreSQL cluster
//! (`weir_testkit::postgres::PgCluster`, fsync on). For comparison, the same rollouts on SQLite
//! (as the `scale` example) in the same run. Then one of the three instances is SIGKILLed and
//! the time until every rollout it held is owned by another instance is measured.
//!
//! ```sh
//! cargo run --release -p weir-engine --example scale_pg -- --rollouts 10000 --interval 10 --seconds 60
//! ```
//! Options: `--lease-time SECONDS` (10, as `weir serve`), `--claim-batch N` (100, the default of
//! `ClusterOptions`), `--no-sqlite` (skip the SQLite run).
//!
//! How it works: the parent starts each instance as a child process (this program again with
//! `--child`), which prints one JSON line per event on stdout and reads commands from stdin:
//! `apply` (create its share of the rollouts through its engine), `mark` (report the tick
//! lateness, commits and memory since the previous mark), and end of input (stop, give the
//! leases back, report memory). Lateness is recorded per tick by the engine's lateness sink
//! (due time to start of the tick).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weir_core::model::{Rollout, TargetKind};
use weir_engine::cluster::{ClusterMember, ClusterOptions};
use weir_engine::synthetic::{SyntheticMetrics, SyntheticTargets};
use weir_engine::{Engine, EngineOptions, Providers, Telemetry};
use weir_store::{Cluster, PostgresStore, SqliteStore, Store};

fn args() -> Vec<String> {
    std::env::args().collect()
}

fn arg(name: &str, default: u64) -> u64 {
    text_arg(name)
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn text_arg(name: &str) -> Option<String> {
    let args = args();
    args.iter()
        .position(|arg| arg == name)
        .and_then(|index| args.get(index + 1))
        .cloned()
}

fn flag(name: &str) -> bool {
    args().iter().any(|arg| arg == name)
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

/// The same rollouts as the `scale` example: 1% steps, so every rollout commits a step on
/// every tick of the run.
fn rollout(index: u64, interval: u64) -> Rollout {
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

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

fn main() {
    if flag("--child") {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(child());
    } else {
        parent();
    }
}

// ---------------------------------------------------------------------------------------------
// The instance (child process).

fn say(line: Value) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

async fn child() {
    let backend = text_arg("--backend").unwrap();
    let db = text_arg("--db").unwrap();
    let label = text_arg("--label").unwrap_or_else(|| "bench".to_owned());
    let interval = arg("--interval", 10);
    let from = arg("--from", 0);
    let to = arg("--to", 0);
    let lease_time = Duration::from_secs(arg("--lease-time", 10));
    let claim_batch = usize::try_from(arg("--claim-batch", 100)).unwrap();
    if backend == "sqlite" {
        let store = SqliteStore::open(std::path::Path::new(&db)).await.unwrap();
        instance(store, None, interval, from, to).await;
    } else {
        let store = PostgresStore::open(&db, &label).await.unwrap();
        let telemetry = Telemetry::new();
        let options = ClusterOptions {
            lease_time,
            claim_batch,
            ..ClusterOptions::default()
        };
        let member = ClusterMember::new(store.clone(), options, telemetry.cluster().clone());
        let notices = member.join().await.unwrap();
        let engine_options = EngineOptions {
            telemetry: Some(telemetry),
            forwarder: Some(member.forwarder()),
            ..EngineOptions::default()
        };
        let cluster = Membership {
            store: store.clone(),
            member,
            notices,
            engine_options,
        };
        instance(store, Some(cluster), interval, from, to).await;
    }
}

struct Membership {
    store: PostgresStore,
    member: ClusterMember<PostgresStore>,
    notices: tokio::sync::mpsc::Receiver<weir_store::Notice>,
    engine_options: EngineOptions,
}

/// One instance: its engine (and cluster member), driven by the parent's commands on stdin.
async fn instance<S: Store>(
    store: S,
    cluster: Option<Membership>,
    interval: u64,
    from: u64,
    to: u64,
) {
    let providers = Providers {
        targets: vec![(TargetKind::Flag, Arc::new(SyntheticTargets::default()))],
        metrics: vec![Arc::new(SyntheticMetrics::default())],
        hooks: Arc::new(weir_webhooks::hooks::HttpHookRunner::default()),
        notifier: Arc::new(weir_webhooks::hooks::LogNotifier),
        catalog: Default::default(),
    };
    // Lateness samples since the last mark (drained at every mark).
    let samples: Arc<Mutex<Vec<u64>>> = Arc::default();
    let sink = {
        let samples = Arc::clone(&samples);
        Arc::new(move |late: Duration| {
            let micros = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
            samples.lock().unwrap().push(micros);
        })
    };
    let mut cluster = cluster;
    let (options, instance_id) = match &mut cluster {
        Some(cluster) => (
            std::mem::take(&mut cluster.engine_options),
            cluster.store.instance_id().to_owned(),
        ),
        None => (EngineOptions::default(), "sqlite".to_owned()),
    };
    let (engine, handle) = Engine::new(store, providers, options);
    let engine = engine.with_lateness_sink(sink);
    let stats = engine.stats();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let running = tokio::spawn(engine.run(until_stopped(stopped.clone())));
    let (held, member) = match cluster {
        Some(cluster) => {
            let store = cluster.store.clone();
            let member = tokio::spawn(cluster.member.run(
                handle.clone(),
                cluster.notices,
                until_stopped(stopped.clone()),
            ));
            (
                Box::new(move || store.held_leases().len()) as Box<dyn Fn() -> usize>,
                Some(member),
            )
        }
        None => (Box::new(|| 0_usize) as Box<dyn Fn() -> usize>, None),
    };
    // Commands from the parent; the end of input (the parent closed it, or died) stops.
    let (command_tx, mut commands) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if command_tx.send(line.trim().to_owned()).is_err() {
                return;
            }
        }
        let _ = command_tx.send("stop".to_owned());
    });
    say(json!({"joined": {"instance": instance_id, "pid": std::process::id()}}));
    let mut last_mark = Instant::now();
    let mut last_commits = 0;
    let mut last_ticks = 0;
    let mut last_fenced = 0;
    while let Some(command) = commands.recv().await {
        match command.as_str() {
            "apply" => {
                let applying = Instant::now();
                for index in from..to {
                    handle.apply(rollout(index, interval), None).await.unwrap();
                }
                say(json!({"ready": {
                    "applied": to - from,
                    "seconds": applying.elapsed().as_secs_f64(),
                    "held": held(),
                }}));
            }
            "mark" => {
                let mut window = std::mem::take(&mut *samples.lock().unwrap());
                window.sort_unstable();
                let seconds = last_mark.elapsed().as_secs_f64();
                last_mark = Instant::now();
                let commits = stats.commits.load(Ordering::Relaxed);
                let ticks = stats.ticks.load(Ordering::Relaxed);
                let fenced = stats.fenced.load(Ordering::Relaxed);
                say(json!({"report": {
                    "seconds": seconds,
                    "samples": window.len(),
                    "p50_ms": ms(percentile(&window, 0.5)),
                    "p99_ms": ms(percentile(&window, 0.99)),
                    "max_ms": ms(percentile(&window, 1.0)),
                    "ticks": ticks - last_ticks,
                    "commits": commits - last_commits,
                    "commits_per_s": (commits - last_commits) as f64 / seconds,
                    "fenced": fenced - last_fenced,
                    "provider_errors": stats.provider_errors.load(Ordering::Relaxed),
                    "held": held(),
                    "rss_mib": memory_kib("VmRSS:") as f64 / 1024.0,
                    "hwm_mib": memory_kib("VmHWM:") as f64 / 1024.0,
                }}));
                last_commits = commits;
                last_ticks = ticks;
                last_fenced = fenced;
            }
            _ => break,
        }
    }
    let _ = stop.send(true);
    if let Some(member) = member {
        let _ = member.await;
    }
    let _ = running.await;
    say(json!({"stopped": {
        "rss_mib": memory_kib("VmRSS:") as f64 / 1024.0,
        "hwm_mib": memory_kib("VmHWM:") as f64 / 1024.0,
    }}));
}

// ---------------------------------------------------------------------------------------------
// The parent: starts the database and the instances, gives the commands, measures takeover.

struct Instance {
    child: Child,
    stdin: Option<ChildStdin>,
    id: String,
}

struct Phase {
    instances: Vec<Instance>,
    events: mpsc::Receiver<(usize, Value)>,
}

impl Phase {
    fn start(backend: &str, db: &str, ranges: &[(u64, u64)], common: &[String]) -> Phase {
        let exe = std::env::current_exe().unwrap();
        let (tell, events) = mpsc::channel();
        let mut instances = Vec::new();
        for (index, (from, to)) in ranges.iter().enumerate() {
            let mut child = Command::new(&exe)
                .args(["--child", "--backend", backend, "--db", db])
                .args(["--label", &format!("bench-{index}")])
                .args(["--from", &from.to_string(), "--to", &to.to_string()])
                .args(common)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let tell = tell.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    match serde_json::from_str::<Value>(&line) {
                        Ok(value) => {
                            if tell.send((index, value)).is_err() {
                                break;
                            }
                        }
                        Err(_) => eprintln!("instance {index}: {line}"),
                    }
                }
            });
            let stdin = child.stdin.take();
            instances.push(Instance {
                child,
                stdin,
                id: String::new(),
            });
        }
        let mut phase = Phase { instances, events };
        for (index, joined) in phase.collect("joined", &phase.alive()) {
            phase.instances[index].id = joined["instance"].as_str().unwrap().to_owned();
        }
        phase
    }

    fn alive(&self) -> Vec<usize> {
        (0..self.instances.len())
            .filter(|index| self.instances[*index].stdin.is_some())
            .collect()
    }

    fn send(&mut self, to: &[usize], command: &str) {
        for index in to {
            let stdin = self.instances[*index].stdin.as_mut().unwrap();
            writeln!(stdin, "{command}").unwrap();
            stdin.flush().unwrap();
        }
    }

    /// Waits for event `kind` from each of `from`; in their order.
    fn collect(&self, kind: &str, from: &[usize]) -> Vec<(usize, Value)> {
        let mut got: Vec<Option<Value>> = vec![None; self.instances.len()];
        while from.iter().any(|index| got[*index].is_none()) {
            let (index, event) = self
                .events
                .recv_timeout(Duration::from_secs(600))
                .unwrap_or_else(|_| panic!("no {kind} from every instance within 10 min"));
            if let Some(value) = event.get(kind) {
                got[index] = Some(value.clone());
            }
        }
        from.iter()
            .map(|index| (*index, got[*index].take().unwrap()))
            .collect()
    }

    fn mark(&mut self) -> Vec<(usize, Value)> {
        let alive = self.alive();
        self.send(&alive, "mark");
        self.collect("report", &alive)
    }

    fn stop(mut self) -> Vec<(usize, Value)> {
        let alive = self.alive();
        for index in &alive {
            self.instances[*index].stdin = None;
        }
        let stopped = self.collect("stopped", &alive);
        for instance in &mut self.instances {
            let _ = instance.child.wait();
        }
        stopped
    }
}

/// What one run (one backend, a number of instances) measured.
struct Measured {
    name: String,
    applied_seconds: f64,
    steady: Vec<(usize, Value)>,
    stopped: Vec<(usize, Value)>,
}

fn parent() {
    let rollouts = arg("--rollouts", 10_000);
    let interval = arg("--interval", 10);
    let seconds = arg("--seconds", 60);
    let lease_time = arg("--lease-time", 10);
    let claim_batch = arg("--claim-batch", 100);
    let common: Vec<String> = [
        "--interval",
        &interval.to_string(),
        "--lease-time",
        &lease_time.to_string(),
        "--claim-batch",
        &claim_batch.to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "scale_pg: {rollouts} rollouts, interval {interval}s, steady state {seconds}s after a warm-up of two intervals, lease time {lease_time}s, claim batch {claim_batch}, {cpus} CPUs"
    );
    let mut results = Vec::new();

    if !flag("--no-sqlite") {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("scale.db").display().to_string();
        results.push(run(
            "SQLite, 1 instance",
            "sqlite",
            &db,
            rollouts,
            1,
            interval,
            seconds,
            &common,
        ));
    }

    let cluster = weir_testkit::postgres::PgCluster::start();
    let one = cluster.database("one");
    results.push(run(
        "PostgreSQL, 1 instance",
        "postgres",
        &one,
        rollouts,
        1,
        interval,
        seconds,
        &common,
    ));

    // Three instances, then the takeover of a killed one's rollouts.
    let three = cluster.database("three");
    let (three_result, takeover) =
        run_three(&three, rollouts, interval, seconds, lease_time, &common);
    results.push(three_result);

    print_results(&results, &takeover, lease_time);
    drop(cluster);
}

fn split(rollouts: u64, instances: u64) -> Vec<(u64, u64)> {
    (0..instances)
        .map(|i| (rollouts * i / instances, rollouts * (i + 1) / instances))
        .collect()
}

/// Starts `instances`, lets each apply its share of the rollouts, waits out the start-up burst
/// (two intervals), then measures `seconds` of steady state.
fn start_and_measure(
    backend: &str,
    db: &str,
    rollouts: u64,
    instances: u64,
    interval: u64,
    seconds: u64,
    common: &[String],
) -> (Phase, f64, Vec<(usize, Value)>) {
    let mut phase = Phase::start(backend, db, &split(rollouts, instances), common);
    let all = phase.alive();
    let applying = Instant::now();
    phase.send(&all, "apply");
    let ready = phase.collect("ready", &all);
    let applied_seconds = applying.elapsed().as_secs_f64();
    for (index, ready) in &ready {
        println!("  instance {index}: {ready}");
    }
    std::thread::sleep(Duration::from_secs(interval * 2));
    phase.mark();
    std::thread::sleep(Duration::from_secs(seconds));
    let steady = phase.mark();
    (phase, applied_seconds, steady)
}

#[allow(clippy::too_many_arguments)]
fn run(
    name: &str,
    backend: &str,
    db: &str,
    rollouts: u64,
    instances: u64,
    interval: u64,
    seconds: u64,
    common: &[String],
) -> Measured {
    println!("{name}: starting");
    let (phase, applied_seconds, steady) =
        start_and_measure(backend, db, rollouts, instances, interval, seconds, common);
    let stopped = phase.stop();
    // Each run's figures as soon as it is done (a run cut short keeps what it measured).
    println!(
        "{name}: done: {}",
        json!({"applied_seconds": applied_seconds, "steady": steady.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>()})
    );
    Measured {
        name: name.to_owned(),
        applied_seconds,
        steady,
        stopped,
    }
}

struct Takeover {
    /// Leases the killed instance held.
    held: u64,
    /// From the SIGKILL to no lease being live for the killed instance (its leases expired).
    expired_after: Option<f64>,
    /// From the SIGKILL to every lease owned by a live instance.
    reowned_after: Option<f64>,
    /// The survivors from the kill to a little after the takeover.
    survivors: Vec<(usize, Value)>,
    /// The survivors' steady state after the takeover.
    after: Vec<(usize, Value)>,
}

fn run_three(
    db: &str,
    rollouts: u64,
    interval: u64,
    seconds: u64,
    lease_time: u64,
    common: &[String],
) -> (Measured, Takeover) {
    let name = "PostgreSQL, 3 instances";
    println!("{name}: starting");
    let (mut phase, applied_seconds, steady) =
        start_and_measure("postgres", db, rollouts, 3, interval, seconds, common);
    // The observer reads the leases table through the store's summary (it never joins, so it
    // holds nothing).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let observer = runtime
        .block_on(PostgresStore::open(db, "observer"))
        .unwrap();
    let lease = Duration::from_secs(lease_time);
    let victim = 1;
    let victim_id = phase.instances[victim].id.clone();
    let held = steady
        .iter()
        .find(|(index, _)| *index == victim)
        .map_or(0, |(_, report)| report["held"].as_u64().unwrap_or(0));
    println!("{name}: SIGKILL instance {victim} ({victim_id}), holding {held} leases");
    phase.instances[victim].child.kill().unwrap();
    let killed = Instant::now();
    let _ = phase.instances[victim].child.wait();
    phase.instances[victim].stdin = None;
    let mut expired_after = None;
    let mut reowned_after = None;
    let give_up = killed + lease * 10 + Duration::from_secs(120);
    while Instant::now() < give_up {
        let summary = runtime.block_on(observer.lease_summary(lease)).unwrap();
        let victim_live = summary
            .by_owner
            .iter()
            .any(|(owner, _)| *owner == victim_id);
        if !victim_live && expired_after.is_none() {
            expired_after = Some(killed.elapsed().as_secs_f64());
        }
        if !victim_live && summary.free == 0 {
            // Every lease is live and none is the killed instance's: each has a live owner
            // (free counts unowned and expired leases).
            reowned_after = Some(killed.elapsed().as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    runtime.block_on(observer.close());
    println!(
        "{name}: the killed instance's leases expired after {expired_after:?} s, all re-owned after {reowned_after:?} s"
    );
    let survivors = phase.mark();
    println!(
        "{name}: steady state before the kill: {}",
        json!(steady.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>())
    );
    // The survivors carrying everything: steady state after the catch-up.
    std::thread::sleep(Duration::from_secs(interval * 2));
    phase.mark();
    std::thread::sleep(Duration::from_secs(seconds / 2));
    let after = phase.mark();
    let stopped = phase.stop();
    println!("{name}: done");
    (
        Measured {
            name: name.to_owned(),
            applied_seconds,
            steady,
            stopped,
        },
        Takeover {
            held,
            expired_after,
            reowned_after,
            survivors,
            after,
        },
    )
}

fn f(value: &Value, field: &str) -> f64 {
    value[field].as_f64().unwrap_or(f64::NAN)
}

fn print_results(results: &[Measured], takeover: &Takeover, lease_time: u64) {
    let sqlite = results.iter().find(|m| m.name.starts_with("SQLite"));
    let sqlite_p99 = sqlite.map(|m| f(&m.steady[0].1, "p99_ms"));
    let sqlite_commits = sqlite.map(|m| f(&m.steady[0].1, "commits_per_s"));
    let sqlite_rss = sqlite.map(|m| f(&m.steady[0].1, "rss_mib"));
    let ratio = |value: f64, base: Option<f64>| match base {
        Some(base) if base > 0.0 => format!("{:.2}x", value / base),
        _ => "-".to_owned(),
    };
    println!();
    println!(
        "| run | instance | applied in | ticks | lateness p50 | p99 | max | commits/s | leases held | RSS | peak RSS | p99 vs SQLite | commits/s vs SQLite | RSS vs SQLite |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut json_runs = Vec::new();
    for measured in results {
        let mut total_commits = 0.0;
        let mut worst_p99: f64 = 0.0;
        for (index, report) in &measured.steady {
            // The peak when it stopped (the killed instance never reported one).
            let hwm = measured
                .stopped
                .iter()
                .find(|(i, _)| i == index)
                .map_or("killed".to_owned(), |(_, s)| {
                    format!("{:.0} MiB", f(s, "hwm_mib"))
                });
            total_commits += f(report, "commits_per_s");
            worst_p99 = worst_p99.max(f(report, "p99_ms"));
            println!(
                "| {} | {index} | {:.1} s | {} | {:.2} ms | {:.2} ms | {:.1} ms | {:.0} | {} | {:.0} MiB | {hwm} | {} | {} | {} |",
                measured.name,
                measured.applied_seconds,
                report["ticks"],
                f(report, "p50_ms"),
                f(report, "p99_ms"),
                f(report, "max_ms"),
                f(report, "commits_per_s"),
                report["held"],
                f(report, "rss_mib"),
                ratio(f(report, "p99_ms"), sqlite_p99),
                ratio(
                    f(report, "commits_per_s"),
                    sqlite_commits.map(|c| c / measured.steady.len() as f64)
                ),
                ratio(f(report, "rss_mib"), sqlite_rss),
            );
        }
        println!(
            "| {} | all | | | | worst {worst_p99:.2} ms | | {total_commits:.0} | | | | | {} | |",
            measured.name,
            ratio(total_commits, sqlite_commits),
        );
        json_runs.push(json!({
            "name": measured.name,
            "applied_seconds": measured.applied_seconds,
            "steady": measured.steady.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
            "stopped": measured.stopped.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
        }));
    }
    println!();
    let secs = |value: Option<f64>| {
        value.map_or("not within the deadline".to_owned(), |s| {
            format!("{s:.2} s")
        })
    };
    println!(
        "takeover: SIGKILL of an instance holding {} leases; its leases expired after {}, every one re-owned by a live instance after {} (target: lease time {lease_time} s + 2 s = {} s)",
        takeover.held,
        secs(takeover.expired_after),
        secs(takeover.reowned_after),
        lease_time + 2
    );
    for (label, reports) in [
        ("kill to takeover", &takeover.survivors),
        ("after takeover", &takeover.after),
    ] {
        for (index, report) in reports {
            println!(
                "  {label}, instance {index}: {:.0} s, ticks {}, lateness p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms, commits/s {:.0}, held {}, fenced {}, RSS {:.0} MiB",
                f(report, "seconds"),
                report["ticks"],
                f(report, "p50_ms"),
                f(report, "p99_ms"),
                f(report, "max_ms"),
                f(report, "commits_per_s"),
                report["held"],
                report["fenced"],
                f(report, "rss_mib"),
            );
        }
    }
    println!(
        "{}",
        json!({"runs": json_runs, "takeover": {
            "held": takeover.held,
            "expired_after_s": takeover.expired_after,
            "reowned_after_s": takeover.reowned_after,
            "target_s": lease_time + 2,
            "survivors": takeover.survivors.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
            "after": takeover.after.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
        }})
    );
}
