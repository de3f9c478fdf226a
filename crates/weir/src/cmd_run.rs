//! `weir run FILE`: one rollout in the foreground, with the embedded engine, a SQLite file, and
//! a live progress line. Also the machinery `weir demo` drives.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use weir_core::document::{self, Document};
use weir_core::model::{Phase, Rollout, TargetKind};
use weir_engine::{Engine, EngineHandle, EngineOptions};
use weir_local::LocalTargets;
use weir_store::{RolloutKey, SqliteStore, Store};

use crate::cmd_core::OutputFormat;
use crate::progress::{Progress, VersionHealth, summary};

/// Arguments of `weir run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The rollout (a weir Rollout with a local target; YAML or JSON).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The SQLite file that keeps the rollout's state (created when missing; its directory
    /// must exist). Run the same command again after a crash or Ctrl-C and it resumes where it
    /// was. Default: a file per rollout under $XDG_STATE_HOME/weir (or ~/.local/state/weir).
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// `text`: a live progress line; `json`: one JSON event per line, after a first line with the
    /// addresses bound: {"listening": {"router": ..., "api": ..., "metrics": ...}} (the router's
    /// is `spec.target.listen`, which may use port 0 to let the system pick one).
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    /// Serve weir's own metrics (OpenMetrics text, for Prometheus) at http://ADDR/metrics while
    /// the rollout runs: its phase, weight and checks, and the router's traffic per version
    /// (docs/METRICS.md). Off by default.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Serve weir's HTTP API (the one of `weir serve`, /metrics included) at ADDR while the
    /// rollout runs, so the client verbs can steer it from another terminal, e.g. `weir gate
    /// open shop-web --type confirm-promotion --server http://ADDR` or `weir abort`. Off by
    /// default.
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// A name clients use for the API of --listen (and --metrics-listen), e.g. `--public-name
    /// laptop.lan`: as with `weir serve`, requests are answered only when their Host is
    /// localhost, a loopback address, the listen address or one of these names (DNS rebinding
    /// defence); `*` answers any. Repeatable; docs/SECURITY.md.
    #[arg(long = "public-name", value_name = "NAME", value_delimiter = ',')]
    public_name: Vec<String>,
    #[command(flatten)]
    integrations: crate::integrations::IntegrationArgs,
    /// Timeouts and the connection bound of --listen and --metrics-listen.
    #[command(flatten)]
    limits: crate::http_server::LimitArgs,
}

/// The default state directory.
pub fn state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir).join("weir");
    }
    match std::env::var_os("HOME").filter(|home| !home.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/state/weir"),
        None => PathBuf::from(".weir"),
    }
}

/// `weir run`.
pub fn run(args: &RunArgs) -> Result<ExitCode> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let (rollout, beside) = match single_rollout(&args.file, &bytes) {
        Some(found) => found,
        None => return Ok(ExitCode::from(2)),
    };
    let integrations = match args.integrations.integrations(beside) {
        Ok(integrations) => integrations,
        Err(error) => {
            eprintln!("{error:#}");
            return Ok(ExitCode::from(2));
        }
    };
    if rollout.spec.target.kind() != TargetKind::Local {
        eprintln!(
            "{}: spec.target.kind is {:?}: `weir run` runs local targets (kind: local); Kubernetes targets run under `weir operator` (docs/KUBERNETES.md); flag rollouts run under `weir serve`, next to their flags (docs/FLAGS.md)",
            args.file.display(),
            rollout.spec.target.kind()
        );
        return Ok(ExitCode::from(2));
    }
    let listen = match weir_local::settings(&rollout) {
        Ok(config) => config.listen,
        Err(errors) => {
            eprintln!(
                "{}: Rollout {} is invalid ({} errors):",
                args.file.display(),
                rollout.metadata.name,
                errors.len()
            );
            for error in errors {
                eprintln!("  - {error}");
            }
            return Ok(ExitCode::from(2));
        }
    };
    let key = RolloutKey::of(&rollout);
    let db = match &args.db {
        Some(db) => db.clone(),
        None => {
            // The default directory is created (weir never creates the directory of a --db).
            let dir = state_dir();
            crate::cmd_serve::create_private_dir(&dir)
                .with_context(|| format!("cannot create the state directory {}", dir.display()))?;
            dir.join(format!("run-{}-{}.db", key.namespace, key.name))
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(async {
        let foreground = Foreground::start(&db, &integrations).await?;
        let router = foreground.reserve_router(&key, listen).await?;
        let mut bound = vec![("router", router)];
        if let Some(address) = args.metrics_listen {
            let served = serve_metrics(address, &foreground, args).await?;
            integrations.outbound.add_own(served);
            bound.push(("metrics", served));
        }
        if let Some(address) = args.listen {
            let served = serve_api(address, &foreground, args).await?;
            integrations.outbound.add_own(served);
            bound.push(("api", served));
        }
        crate::listening::announce(args.output, &bound);
        let outcome = foreground
            .drive(rollout, args.output == OutputFormat::Json, None)
            .await;
        foreground.shutdown(&key).await;
        outcome
    })?;
    Ok(outcome.exit_code())
}

/// Serves `/metrics` for as long as the runtime lives (the whole `weir run`); returns the address
/// bound.
async fn serve_metrics(
    address: std::net::SocketAddr,
    foreground: &Foreground,
    args: &RunArgs,
) -> Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address} for --metrics-listen"))?;
    let bound = listener.local_addr().unwrap_or(address);
    let hosts = crate::cmd_serve::host_policy(bound, &args.public_name, "weir run")?;
    let app = hosts.apply(weir_api::metrics_router(
        foreground.handle.telemetry().clone(),
    ));
    // With the timeouts and the connection bound of `weir serve`'s listener.
    tokio::spawn(crate::http_server::serve(
        listener.into(),
        app,
        args.limits.limits(),
        std::future::pending(),
    ));
    eprintln!("metrics at http://{bound}/metrics");
    Ok(bound)
}

/// Serves the HTTP API for as long as the runtime lives (the whole `weir run`); returns the
/// address bound.
async fn serve_api(
    address: std::net::SocketAddr,
    foreground: &Foreground,
    args: &RunArgs,
) -> Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address} for --listen"))?;
    let bound = listener.local_addr().unwrap_or(address);
    let hosts = crate::cmd_serve::host_policy(bound, &args.public_name, "weir run")?;
    let app = hosts.apply(weir_api::router(
        foreground.store.clone(),
        foreground.handle.clone(),
    ));
    tokio::spawn(crate::http_server::serve(
        listener.into(),
        app,
        args.limits.limits(),
        std::future::pending(),
    ));
    eprintln!("API at http://{bound} (weir promote, abort, gate ... --server http://{bound})");
    Ok(bound)
}

/// Reads exactly one valid Rollout from a file, and the catalog documents beside it (metric
/// templates, alert providers, secrets), printing every problem otherwise.
pub fn single_rollout(file: &Path, bytes: &[u8]) -> Option<(Rollout, Vec<Document>)> {
    let mut rollouts = Vec::new();
    let mut beside = Vec::new();
    let mut ok = true;
    for result in document::load(bytes) {
        match result {
            Ok(loaded) => {
                for warning in &loaded.warnings {
                    eprintln!("warning: {warning}");
                }
                match loaded.document {
                    Document::Rollout(rollout) => rollouts.push(*rollout),
                    other => beside.push(other),
                }
            }
            Err(refused) => {
                ok = false;
                eprintln!(
                    "{}: {} is invalid ({} errors):",
                    file.display(),
                    refused.subject,
                    refused.errors.len()
                );
                for error in &refused.errors {
                    eprintln!("  - {error}");
                }
            }
        }
    }
    if !ok {
        return None;
    }
    if rollouts.len() != 1 {
        eprintln!(
            "{}: expected exactly one Rollout (or Flagger Canary), found {}",
            file.display(),
            rollouts.len()
        );
        return None;
    }
    rollouts.pop().map(|rollout| (rollout, beside))
}

/// How a foreground run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Promoted,
    RolledBack,
    /// Stopped (`weir stop`), or nothing to roll out.
    Stopped,
    /// Ended by a signal (Ctrl-C, SIGTERM): the versions are stopped, the rollout's state kept.
    Interrupted(StopSignal),
}

impl Outcome {
    /// 0 promoted or stopped, 1 rolled back, 128 + the signal's number when ended by a signal
    /// (the shells' convention: 130 for Ctrl-C, 143 for SIGTERM).
    pub fn exit_code(self) -> ExitCode {
        match self {
            Outcome::Promoted | Outcome::Stopped => ExitCode::SUCCESS,
            Outcome::RolledBack => ExitCode::from(1),
            Outcome::Interrupted(signal) => ExitCode::from(signal.exit_code()),
        }
    }
}

/// A signal that ends a foreground run the way its end does: the versions weir started are
/// stopped, the history says why, and the rollout's state is kept for the next `weir run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// Ctrl-C.
    Interrupt,
    /// `kill`, systemd, a container runtime stopping weir.
    Terminate,
}

impl StopSignal {
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "SIGINT",
            StopSignal::Terminate => "SIGTERM",
        }
    }

    /// 128 + the signal's number.
    pub fn exit_code(self) -> u8 {
        match self {
            StopSignal::Interrupt => 128 + 2,
            StopSignal::Terminate => 128 + 15,
        }
    }
}

/// SIGINT and SIGTERM, caught from the moment this is made until the process exits (tokio
/// never uninstalls a handler: a signal no one waits for is then ignored, which is why a second
/// one, while weir stops, is handed to [`StopSignals::exit_on_next`]).
struct StopSignals {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn catch() -> StopSignals {
        use tokio::signal::unix::{SignalKind, signal};
        let catch = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(stream) => Some(stream),
            Err(error) => {
                // Then the signal keeps its default action: weir ends at once, and the versions'
                // guards stop them (without a word in the history).
                eprintln!("warning: cannot catch {name}: {error}");
                None
            }
        };
        StopSignals {
            interrupt: catch(SignalKind::interrupt(), "SIGINT"),
            terminate: catch(SignalKind::terminate(), "SIGTERM"),
        }
    }

    /// The next signal caught (never, when none could be caught).
    async fn next(&mut self) -> StopSignal {
        async fn one(stream: &mut Option<tokio::signal::unix::Signal>) {
            match stream {
                Some(stream) => {
                    if stream.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = one(&mut self.interrupt) => StopSignal::Interrupt,
            () = one(&mut self.terminate) => StopSignal::Terminate,
        }
    }

    /// While weir stops after a first signal (which may take as long as a version still
    /// starting needs), a second one ends it at once; the versions' guards still stop them.
    fn exit_on_next(mut self) {
        tokio::spawn(async move {
            let signal = self.next().await;
            eprintln!(
                "{} again: exiting now; the versions weir started are stopped by their guards",
                signal.name()
            );
            std::process::exit(i32::from(signal.exit_code()));
        });
    }
}

/// An engine with local targets over a SQLite file, running in the background.
pub struct Foreground {
    pub store: SqliteStore,
    pub handle: EngineHandle,
    pub targets: LocalTargets,
    stop: tokio::sync::oneshot::Sender<()>,
    engine: tokio::task::JoinHandle<()>,
}

impl Foreground {
    pub async fn start(
        db: &Path,
        integrations: &crate::integrations::Integrations,
    ) -> Result<Foreground> {
        let store = SqliteStore::open(db)
            .await
            .with_context(|| format!("cannot open {}", db.display()))?;
        // The rollout is the person's own file: it may start its commands, and its router may
        // listen anywhere it says (docs/SECURITY.md); connections follow the outbound policy.
        let targets = integrations
            .local_targets(weir_http::policy::ListenPolicy::any())
            .allowing_commands();
        let providers = integrations.providers(&targets);
        let (engine, handle) = Engine::new(store.clone(), providers, EngineOptions::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let engine = tokio::spawn(async move {
            if let Err(error) = engine
                .run(async move {
                    let _ = stopped.await;
                })
                .await
            {
                eprintln!("engine stopped: {error}");
            }
        });
        Ok(Foreground {
            store,
            handle,
            targets,
            stop,
            engine,
        })
    }

    /// Binds the rollout's router socket now (`spec.target.listen`, port 0 allowed) and returns
    /// the address bound, so it can be announced before the run starts.
    pub async fn reserve_router(
        &self,
        key: &RolloutKey,
        listen: std::net::SocketAddr,
    ) -> Result<std::net::SocketAddr> {
        let bound = self
            .targets
            .reserve_listener(key, listen)
            .await
            .map_err(|error| {
                let context = format!("cannot listen on {listen} (spec.target.listen)");
                if error.kind() == std::io::ErrorKind::AddrInUse {
                    anyhow::anyhow!(
                        "{context}: the address is in use by another program ({error}); stop that program or choose another address (port 0 lets the system pick one)"
                    )
                } else {
                    anyhow::Error::new(error).context(context)
                }
            })?;
        eprintln!("router at http://{bound}");
        Ok(bound)
    }

    /// Applies `rollout` and shows its progress until its run ends, Ctrl-C, or `until` resolves.
    pub async fn drive(
        &self,
        rollout: Rollout,
        json: bool,
        until: Option<tokio::sync::oneshot::Receiver<()>>,
    ) -> Result<Outcome> {
        let key = RolloutKey::of(&rollout);
        let config = weir_local::settings(&rollout)
            .map_err(|errors| anyhow::anyhow!("invalid local target: {errors:?}"))?;
        let canary_revision = config.canary.revision();
        let primary_revision = config.primary.revision();
        // Caught before the rollout is applied, so no version starts before a signal can stop
        // it in order.
        let mut signals = StopSignals::catch();
        let mut changes = self.handle.subscribe();
        let applied = match self.handle.apply(rollout.clone(), None).await {
            Ok(applied) => applied,
            Err(error) => bail!("cannot start the rollout: {error}"),
        };
        let progress = Progress::new(json);
        let name = key.to_string();
        // Replay what this run already recorded (after a restart), then follow live changes.
        let mut last_seq = 0;
        for stored in self
            .store
            .events(&key, 0, weir_store::MAX_PAGE)
            .await
            .unwrap_or_default()
        {
            if stored.event.run == applied.rollout.status.run && applied.rollout.status.run > 0 {
                progress.event(&name, &stored);
            }
            last_seq = stored.seq;
        }
        let mut status = applied.rollout.status.clone();
        let started = tokio::time::Instant::now();
        let timeline = weir_core::plan::dry_run(&rollout.spec, jiff::Timestamp::now());
        let mut before: Option<weir_router::metrics::MetricsSnapshot> = None;
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        let mut until = until;
        let outcome = loop {
            if let Some(done) = finished(&status, &canary_revision, &primary_revision) {
                break done;
            }
            tokio::select! {
                signal = signals.next() => {
                    let why = format!(
                        "stopped by {}: weir run stops the versions it started and keeps the rollout's state; running the same command again resumes it",
                        signal.name()
                    );
                    self.record(&key, &why, &mut changes, &mut last_seq, &progress).await;
                    progress.finish();
                    eprintln!("{why}");
                    signals.exit_on_next();
                    break Outcome::Interrupted(signal);
                }
                _ = async { match until.as_mut() { Some(receiver) => { let _ = receiver.await; } None => std::future::pending().await } } => {
                    break Outcome::Stopped;
                }
                change = changes.recv() => match change {
                    Ok(change) if change.key == key => {
                        for stored in &change.events {
                            if stored.seq > last_seq {
                                progress.event(&name, stored);
                                last_seq = stored.seq;
                            }
                        }
                        if let Some(new_status) = change.status {
                            status = new_status;
                        }
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        if let Ok(Some(stored)) = self.store.get(&key).await {
                            status = stored.status;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break Outcome::Stopped,
                },
                _ = ticker.tick() => {
                    if let Some(now) = self.targets.metrics(&key).await {
                        let window = match &before { Some(before) => now.delta(before), None => now.clone() };
                        let primary_version = if status.primary_revision.as_deref() == Some(canary_revision.as_str()) { &canary_revision } else { &primary_revision };
                        let primary = VersionHealth::from_window(&window, primary_version);
                        let canary = VersionHealth::from_window(&window, &canary_revision);
                        let left = timeline.minimum_duration.map(|total| total.get().saturating_sub(started.elapsed()));
                        progress.status(&rollout.spec, &status, &primary, &canary, left);
                        before = Some(now);
                    }
                }
            }
        };
        progress.finish();
        if matches!(outcome, Outcome::Promoted | Outcome::RolledBack) && !json {
            let events = self
                .store
                .events(&key, 0, weir_store::MAX_PAGE)
                .await
                .unwrap_or_default();
            let this_run: Vec<_> = events
                .into_iter()
                .filter(|stored| stored.event.run == status.run)
                .collect();
            println!("{}", summary(&name, &status, &this_run));
        }
        Ok(outcome)
    }

    /// Records `why` in the rollout's history (a `Target` event) and shows it, waiting a few
    /// seconds at most: the engine commits the local target's notes after each job on the
    /// rollout, and applying the stored document unchanged is such a job. When a job under way
    /// (a version still starting) holds the rollout longer, the note is committed at its end,
    /// while the engine stops.
    async fn record(
        &self,
        key: &RolloutKey,
        why: &str,
        changes: &mut tokio::sync::broadcast::Receiver<weir_engine::StatusChange>,
        last_seq: &mut u64,
        progress: &Progress,
    ) {
        self.targets.note(key, why).await;
        let name = key.to_string();
        let recorded = async {
            if let Ok(Some(stored)) = self.store.get(key).await {
                // With the version read: a document changed meanwhile (through --listen) is left
                // as it is (a conflict, and the note waits for the next job).
                let _ = self
                    .handle
                    .apply(stored.rollout, Some(stored.version))
                    .await;
            }
            loop {
                match changes.recv().await {
                    Ok(change) if change.key == *key => {
                        let mut seen = false;
                        for stored in &change.events {
                            if stored.seq > *last_seq {
                                progress.event(&name, stored);
                                *last_seq = stored.seq;
                            }
                            seen |= stored.event.message == why;
                        }
                        if seen {
                            return;
                        }
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), recorded).await;
    }

    /// Stops the engine (and with it the router and the versions it started).
    pub async fn shutdown(self, key: &RolloutKey) {
        use weir_engine::TargetProvider;
        let _ = self.stop.send(());
        let _ = self.engine.await;
        self.targets.remove(key).await;
    }
}

/// Whether the rollout is done, given the revisions of its file.
fn finished(
    status: &weir_core::model::RolloutStatus,
    canary_revision: &str,
    primary_revision: &str,
) -> Option<Outcome> {
    if status.canary_revision.as_deref() != Some(canary_revision) {
        // Nothing to roll out when both versions are the same definition.
        return (status.phase == Phase::Initialized && canary_revision == primary_revision)
            .then_some(Outcome::Stopped);
    }
    match status.phase {
        Phase::Succeeded => Some(Outcome::Promoted),
        Phase::Failed => Some(Outcome::RolledBack),
        Phase::Stopped => Some(Outcome::Stopped),
        _ => None,
    }
}
