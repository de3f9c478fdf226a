//! `weir serve`: the engine, the HTTP API and the routers of local rollouts, in one process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use weir_api::HostPolicy;
use weir_engine::cluster::{ClusterMember, ClusterOptions};
use weir_engine::{Engine, EngineHandle, EngineOptions};
use weir_http::policy::{Cidr, ListenPolicy};
use weir_store::{Cluster, Notice, PostgresOptions, PostgresStore, SqliteStore};

/// The address `weir serve` listens on, and client verbs talk to, by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7979";

/// Arguments of `weir serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where every rollout, its status and its history live: a SQLite file, or a PostgreSQL
    /// database shared by several `weir serve` instances (`postgres://USER@HOST/DB`;
    /// docs/SCALE-OUT.md). A file given here must exist, unless --create-db; weir never creates
    /// its directory.
    /// Default: $XDG_STATE_HOME/weir/weir.db (or ~/.local/state/weir/weir.db), created with its
    /// directory when missing.
    #[arg(long, value_name = "PATH|URL", env = "WEIR_DB")]
    db: Option<PathBuf>,
    /// Create a new, empty SQLite database at --db when the file does not exist (its directory
    /// must). Without it, a --db file that does not exist stops weir: a mistyped path would
    /// otherwise start a server on an empty database, without its tokens. The line `created a
    /// new database at PATH` says when one was made.
    #[arg(long, env = "WEIR_CREATE_DB")]
    create_db: bool,
    /// With PostgreSQL: this machine's label. Local rollouts (their routers listen here) are
    /// owned only by instances with the label of the host that created them (or the one their
    /// `weir.dev/host` label names); other rollouts move freely between instances.
    /// Default: the hostname.
    #[arg(long, value_name = "LABEL", env = "WEIR_HOST_LABEL")]
    host_label: Option<String>,
    /// With PostgreSQL: how long an instance holds a rollout without renewing its lease (it
    /// renews every third of it). An instance that dies or stalls loses its rollouts to the
    /// others after at most this long. E.g. `10s`, `1m`.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::cmd_router::parse_duration, env = "WEIR_LEASE_TIME")]
    lease_time: std::time::Duration,
    /// With PostgreSQL: how long an operation waits for a database connection before it gives
    /// up. While the database cannot be reached, an API request that needs it is answered 503
    /// with Retry-After within about this long, and /readyz answers 503 (docs/SCALE-OUT.md).
    /// E.g. `3s`, `10s`.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = crate::cmd_router::parse_duration, env = "WEIR_DB_TIMEOUT")]
    db_timeout: std::time::Duration,
    /// Address of the HTTP API (REST under /api/v1, Server-Sent Events at /api/v1/watch, the
    /// OpenAPI document at /api/v1/openapi.json).
    /// Port 0 picks a free port; the bound address is printed on start.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN, env = "WEIR_LISTEN")]
    listen: SocketAddr,
    /// `text`: start-up and shutdown lines on stderr; `json`: also the addresses bound, as the
    /// first line on stdout: {"listening": {NAME: "HOST:PORT"}} (useful with port 0).
    #[arg(long, short, value_enum, default_value_t = crate::cmd_core::OutputFormat::Text)]
    output: crate::cmd_core::OutputFormat,
    /// Start the `command` of local rollouts' versions. Off by default: whoever can send a
    /// rollout to the API could otherwise run any program as this server's user. A rollout
    /// with a command version is refused (422, naming the field), and one stored earlier is
    /// not started (its history says why). See docs/SECURITY.md.
    #[arg(long, env = "WEIR_ALLOW_COMMANDS")]
    allow_commands: bool,
    /// A name clients use for this server, e.g. `--public-name weir.example.com` behind a
    /// proxy or on a LAN. Requests are answered only when their Host is localhost, a loopback
    /// address, the listen address (any IP address when listening on 0.0.0.0 or ::) or one of
    /// these names, so that a web page cannot reach the API through DNS rebinding; changes
    /// (POST, PUT, DELETE) sent by a web page must come from the server's own origin or one of
    /// these names. `*` answers any Host (and gives that defence up). Repeatable;
    /// docs/SECURITY.md.
    #[arg(
        long = "public-name",
        value_name = "NAME",
        env = "WEIR_PUBLIC_NAME",
        value_delimiter = ','
    )]
    public_name: Vec<String>,
    /// Let rollouts' routers listen (`spec.target.listen` of local targets) on addresses in
    /// CIDR, e.g. `--allow-listen 0.0.0.0/0` for every interface or `--allow-listen
    /// 10.0.0.0/8`. Default: loopback only (127.0.0.0/8, ::1); a rollout asking for another
    /// address is refused when applied. Versions weir starts always get a loopback port.
    /// Repeatable; docs/SECURITY.md.
    #[arg(long = "allow-listen", value_name = "CIDR")]
    allow_listen: Vec<Cidr>,
    /// Serve without tokens on a non-loopback address. Without it, `weir serve` refuses to
    /// listen beyond loopback while its database holds no token: anyone who can reach the
    /// address could otherwise apply, promote, abort and delete. Create one first with `weir
    /// token create --name NAME --scope admin`; docs/SECURITY.md.
    #[arg(long, env = "WEIR_INSECURE_NO_AUTH")]
    insecure_no_auth: bool,
    /// Who may read /metrics once tokens exist: `open` (anyone, for scrapers; the default) or
    /// `read` (a token with scope read or higher).
    #[arg(long, value_name = "WHO", default_value = "open", value_parser = ["open", "read"], env = "WEIR_METRICS_AUTH")]
    metrics_auth: String,
    /// How many bad tokens (unknown, expired, revoked, or a forged session cookie) one client
    /// address may send per minute before every request from it that needs a token is answered
    /// 429 for the rest of that minute, e.g. `--bad-token-limit 100` behind a proxy that many
    /// users share (then prefer a proxy that limits per user). docs/SECURITY.md.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..), env = "WEIR_BAD_TOKEN_LIMIT")]
    bad_token_limit: u32,
    #[command(flatten)]
    integrations: crate::integrations::IntegrationArgs,
    #[command(flatten)]
    tls: crate::tls::ServeTlsArgs,
    #[command(flatten)]
    limits: crate::http_server::LimitArgs,
}

/// `weir serve`.
pub fn serve(args: &ServeArgs) -> Result<ExitCode> {
    log_to_stderr();
    let db = match &args.db {
        Some(db) => db.clone(),
        None => crate::cmd_run::state_dir().join("weir.db"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // Read before anything starts, so a missing or mismatched file stops weir at once.
    let tls = args.tls.load()?;
    runtime.block_on(async {
        match postgres_url(&db) {
            Some(url) => {
                if args.lease_time < std::time::Duration::from_secs(1) {
                    anyhow::bail!(
                        "--lease-time {:?} is too short: give at least 1s (leases are renewed every third of it; 10s is the default)",
                        args.lease_time
                    );
                }
                let host = match &args.host_label {
                    Some(label) => label.clone(),
                    None => hostname(),
                };
                if args.db_timeout.is_zero() {
                    anyhow::bail!(
                        "--db-timeout 0s is too short: give a duration above zero (3s is the default)"
                    );
                }
                let settings = PostgresOptions {
                    acquire_timeout: args.db_timeout,
                };
                let store = PostgresStore::open_with(url, &host, &settings)
                    .await
                    .with_context(|| format!("cannot open {}", redacted(url)))?;
                // Listening before the tokens are first read, so that no change between that
                // read and the first notice is missed.
                let token_notices = store
                    .notices()
                    .await
                    .context("cannot listen for the database's notifications")?;
                let telemetry = weir_engine::Telemetry::new();
                let options = ClusterOptions {
                    lease_time: args.lease_time,
                    ..ClusterOptions::default()
                };
                let member =
                    ClusterMember::new(store.clone(), options, telemetry.cluster().clone());
                let ready = postgres_readiness(&store, member.liveness(), args.db_timeout);
                let notices = member
                    .join()
                    .await
                    .context("cannot join the other instances on the database")?;
                let engine_options = EngineOptions {
                    telemetry: Some(telemetry),
                    forwarder: Some(member.forwarder()),
                    ..EngineOptions::default()
                };
                let label = format!("{} as {}", redacted(url), store.instance_id());
                let start: StartMember = Box::new(move |handle, mirror, stopped| {
                    tokio::spawn(member.with_mirror(mirror).run(handle, notices, stopped))
                });
                let database = Database {
                    ready: Some(ready),
                    token_notices: Some(token_notices),
                };
                serve_with(store, args, label, tls, engine_options, Some(start), database).await
            }
            None => {
                let creation = match (&args.db, args.create_db) {
                    (None, _) => Creation::Default,
                    (Some(_), true) => Creation::Asked("--create-db"),
                    (Some(_), false) => Creation::Refused(
                        "pass --create-db to start a new, empty database there (it holds no tokens: the API is open on loopback until one is created)",
                    ),
                };
                let store = open_sqlite(&db, creation, "weir serve").await?;
                let label = db.display().to_string();
                let database = Database::default();
                serve_with(store, args, label, tls, EngineOptions::default(), None, database)
                    .await
            }
        }
    })
}

/// Whether a missing SQLite file may be created.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Creation {
    /// The default path: created, with its directory (private to the user).
    Default,
    /// The user asked for it (the flag or command named).
    Asked(&'static str),
    /// Not created; the message says how to ask.
    Refused(&'static str),
}

/// Opens the SQLite database at `path` for `command`, creating it only as `creation` allows and
/// saying on stderr when it does; weir creates no directory but the default one. Errors name
/// the path.
pub(crate) async fn open_sqlite(
    path: &std::path::Path,
    creation: Creation,
    command: &str,
) -> Result<SqliteStore> {
    let context = || format!("cannot open the database {}", path.display());
    if path.exists() {
        return SqliteStore::open_existing(path).await.with_context(context);
    }
    match creation {
        Creation::Refused(how) => {
            let directory = path
                .parent()
                .filter(|parent| !parent.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            if directory.is_dir() {
                anyhow::bail!(
                    "{}: no such database file; is the path (--db, WEIR_DB) right? Nothing was created: {how}",
                    path.display()
                );
            }
            anyhow::bail!(
                "{}: no such database file, and its directory {} does not exist; is the path (--db, WEIR_DB) right? Nothing was created (weir never creates a database's directory)",
                path.display(),
                directory.display()
            );
        }
        Creation::Default => {
            if let Some(directory) = path.parent() {
                create_private_dir(directory).with_context(|| {
                    format!("cannot create the state directory {}", directory.display())
                })?;
            }
        }
        Creation::Asked(_) => {}
    }
    let store = SqliteStore::open(path).await.with_context(context)?;
    let why = match creation {
        Creation::Asked(flag) => format!(" ({flag})"),
        _ => " (the default path; --db names another)".to_string(),
    };
    eprintln!(
        "{command}: created a new database at {}{why}",
        path.display()
    );
    Ok(store)
}

/// Creates `directory` and its missing parents, readable by this user only (it will hold the
/// database: tokens' hashes and the session-signing key).
pub(crate) fn create_private_dir(directory: &std::path::Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(directory)
}

/// The URL when `db` names a PostgreSQL database.
pub(crate) fn postgres_url(db: &std::path::Path) -> Option<&str> {
    db.to_str()
        .filter(|db| db.starts_with("postgres://") || db.starts_with("postgresql://"))
}

/// A database URL without its password, for messages.
pub(crate) fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// This machine's name (the default host label).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Starts the cluster member once the engine's handle exists, keeping the flags (OFREP) in step
/// with other instances; it runs until the future given completes.
pub(crate) type StartMember = Box<
    dyn FnOnce(
            EngineHandle,
            std::sync::Arc<dyn weir_engine::cluster::Mirror>,
            std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
        ) -> tokio::task::JoinHandle<()>
        + Send,
>;

/// Runs the cluster member beside the engine whose handle it is given, until the future given
/// completes.
pub(crate) type RunMember = Box<
    dyn FnOnce(
            EngineHandle,
            std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
        ) -> tokio::task::JoinHandle<()>
        + Send,
>;

/// What `weir serve` adds on a database several instances share (PostgreSQL).
#[derive(Default)]
struct Database {
    /// `/readyz`'s checks: the database answers, this instance's leases are live.
    ready: Option<weir_api::Readiness>,
    /// The database's change notices, which keep the tokens in memory current (without them,
    /// access control reads the tokens' stamp per request: SQLite).
    token_notices: Option<tokio::sync::mpsc::Receiver<Notice>>,
}

/// `/readyz` of an instance on PostgreSQL: the database answers (`SELECT 1`, probed every
/// second, each probe bounded by the acquire timeout) and this instance's leases are live.
fn postgres_readiness(
    store: &PostgresStore,
    leases: weir_engine::cluster::Liveness,
    db_timeout: Duration,
) -> weir_api::Readiness {
    let store = store.clone();
    weir_api::Readiness::new()
        .probe(
            "database",
            Duration::from_secs(1),
            db_timeout + Duration::from_secs(1),
            move || {
                let store = store.clone();
                async move { store.ping().await.map_err(|error| error.to_string()) }
            },
        )
        .check("leases", move || leases.check())
}

/// Tells access control of every token change (another instance's, `weir token`'s, or any
/// after a lost listening connection, when changes may have been missed).
async fn follow_tokens<S: weir_store::TokenStore>(
    auth: weir_api::Auth<S>,
    mut notices: tokio::sync::mpsc::Receiver<Notice>,
) {
    while let Some(notice) = notices.recv().await {
        if matches!(notice, Notice::TokensChanged { .. } | Notice::Reconnected) {
            auth.tokens_changed();
        }
    }
    // The listener re-connects until its receiver is dropped, so this is not expected.
    tracing::error!(
        "the database's notifications stopped: tokens created or revoked elsewhere are no longer seen"
    );
}

/// `weir serve` over an opened store. `label` names the database in messages.
async fn serve_with<S>(
    store: S,
    args: &ServeArgs,
    label: String,
    tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    engine_options: EngineOptions,
    member: Option<StartMember>,
    database: Database,
) -> Result<ExitCode>
where
    S: weir_store::Store + weir_store::FlagStore + weir_store::TokenStore,
{
    let integrations = args.integrations.integrations(Vec::new())?;
    let token_changes = match database.token_notices {
        Some(_) => weir_api::auth::TokenChanges::Announced,
        None => weir_api::auth::TokenChanges::Polled,
    };
    let auth = access_control(&store, args, tls.is_some(), token_changes).await?;
    if let Some(notices) = database.token_notices {
        tokio::spawn(follow_tokens(auth.clone(), notices));
    }
    let flags = weir_flags::Flags::open(store.clone())
        .await
        .with_context(|| format!("cannot read the flags of {label}"))?;
    // Bound before the providers are built, so the outbound policy knows the API's port
    // (with port 0 it is known only now) and refuses it as a destination.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let bound = listener.local_addr().unwrap_or(args.listen);
    let listener = crate::tls::ApiListener::new(listener, tls);
    crate::tls::warn_if_plain_on_network(&listener);
    let scheme = listener.scheme();
    integrations.outbound.add_own(bound);
    let hosts = host_policy(bound, &args.public_name, "weir serve")?;
    let listen_policy = args
        .allow_listen
        .iter()
        .fold(ListenPolicy::loopback_only(), |policy, block| {
            policy.allow(*block)
        });
    let mut targets = integrations.local_targets(listen_policy);
    if args.allow_commands {
        targets = targets.allowing_commands();
    }
    let providers =
        weir_flags::FlagTargets::new(flags.clone()).add_to(integrations.providers(&targets));
    let (engine, handle) = Engine::new(store.clone(), providers, engine_options);
    crate::listening::announce(args.output, &[("api", bound)]);
    eprintln!(
        "weir serve: API at {scheme}://{bound} (database {label}); dashboard at {scheme}://{bound}/; OFREP at {scheme}://{bound}/ofrep/v1 (namespace default; {scheme}://{bound}/ns/NAMESPACE for others); Ctrl-C stops"
    );
    let mirror = std::sync::Arc::new(weir_flags::FlagMirror::new(flags.clone()));
    let member = member.map(|start| -> RunMember {
        Box::new(move |handle, stopped| start(handle, mirror, stopped))
    });
    let flushing = flags.clone();
    let flags: MoreRoutes =
        Box::new(move |stopped| weir_api::flags_router_with_shutdown(flags, stopped));
    let auth: Guard = Box::new(move |router| auth.apply(router));
    let around = Around {
        more: Some(flags),
        hosts: Some(hosts),
        guard: Some(auth),
        ready: database.ready,
        member,
        limits: args.limits.limits(),
    };
    let stopped = run_until_stopped(listener, store, handle, engine, around).await;
    // The flags' evaluation counts since the last flush (every few seconds) are written before
    // the process ends, so a restart loses none (docs/FLAGS.md, "Evaluation counts").
    if let Err(error) = flushing.flush_evaluations(jiff::Timestamp::now()).await {
        eprintln!("weir serve: the last flag evaluation counts were not written: {error}");
    }
    stopped
}

/// Log lines on stderr at the level `RUST_LOG` names (`error`, `warn`, `info`, `debug`,
/// `trace`; default `warn`): with `info`, every change made with a token names the token
/// (never its secret).
fn log_to_stderr() {
    let level = std::env::var("RUST_LOG")
        .ok()
        .and_then(|level| level.trim().parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::WARN);
    // A second subscriber (in tests that call this twice) is refused; the first stays.
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Access control over the tokens of `store`; refuses a non-loopback `--listen` while there is
/// no token (unless `--insecure-no-auth`), saying why and what to do. `https`: the API is
/// served over TLS (the session cookie is then `Secure`). `token_changes`: how the tokens kept
/// in memory learn of changes.
async fn access_control<S: weir_store::TokenStore>(
    store: &S,
    args: &ServeArgs,
    https: bool,
    token_changes: weir_api::auth::TokenChanges,
) -> Result<weir_api::Auth<S>> {
    let has_tokens = store
        .has_tokens()
        .await
        .context("cannot read the tokens of the database")?;
    if !has_tokens && !args.listen.ip().to_canonical().is_loopback() {
        if !args.insecure_no_auth {
            anyhow::bail!(
                "refusing to listen on {}: this server has no API token, so anyone who can reach that address could apply, promote, abort and delete rollouts and flags. Create a token first (`weir token create --name admin --scope admin`, with the same --db), then give it to clients (WEIR_TOKEN); or listen on loopback (127.0.0.1); or, if something else guards the address, pass --insecure-no-auth (docs/SECURITY.md)",
                args.listen
            );
        }
        eprintln!(
            "warning: weir serve --insecure-no-auth: listening on {} without tokens; anyone who can reach it can change rollouts and flags (docs/SECURITY.md)",
            args.listen
        );
    }
    let config = weir_api::AuthConfig {
        metrics_need_token: args.metrics_auth == "read",
        // A browser sends a `Secure` cookie over HTTPS only: right when weir serves HTTPS, and
        // a cookie it would never send back over plain HTTP.
        secure_cookies: https,
        bad_credentials_per_window: args.bad_token_limit,
        token_changes,
        ..weir_api::AuthConfig::default()
    };
    weir_api::Auth::open(store.clone(), config)
        .await
        .context("cannot set up access control")
}

/// A layer put around every route of the API (access control).
pub(crate) type Guard = Box<dyn FnOnce(axum::Router) -> axum::Router + Send>;

/// The Host and Origin checks of an API bound to `bound`, with the `--public-name` values of
/// `command`; says so on stderr when they admit any Host.
pub(crate) fn host_policy(
    bound: SocketAddr,
    public_names: &[String],
    command: &'static str,
) -> Result<HostPolicy> {
    let hosts = HostPolicy::new(bound, public_names, command).map_err(anyhow::Error::msg)?;
    if hosts.admits_any_host() {
        eprintln!(
            "warning: {command} --public-name '*': requests naming any Host are answered, so a web page can reach this API through DNS rebinding (docs/SECURITY.md)"
        );
    }
    Ok(hosts)
}

/// More routes for the API, built with the future that completes when the server stops (so
/// their streams can end).
pub(crate) type MoreRoutes = Box<
    dyn FnOnce(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>) -> axum::Router
        + Send,
>;

/// What `weir serve` adds around the engine and the API (`weir operator` runs without them).
#[derive(Default)]
pub(crate) struct Around {
    /// More routes, e.g. flags.
    pub more: Option<MoreRoutes>,
    /// The Host and Origin checks in front of every route.
    pub hosts: Option<HostPolicy>,
    /// Access control around every route.
    pub guard: Option<Guard>,
    /// `/readyz`'s checks (default: always ready).
    pub ready: Option<weir_api::Readiness>,
    /// The cluster member (several instances on PostgreSQL).
    pub member: Option<RunMember>,
    /// The listener's timeouts, connection bound and shutdown grace.
    pub limits: crate::http_server::Limits,
}

/// Runs `engine` and the HTTP API on `listener` (plain HTTP or HTTPS: `listener.is_tls()`),
/// with what `around` adds, until Ctrl-C or SIGTERM, then waits for both to stop (the engine
/// finishes the step it is taking; the cluster member gives its leases back).
pub(crate) async fn run_until_stopped<S: weir_store::Store>(
    listener: crate::tls::ApiListener,
    store: S,
    handle: EngineHandle,
    engine: Engine<S>,
    around: Around,
) -> Result<ExitCode> {
    let Around {
        more,
        hosts,
        guard,
        ready,
        member,
        limits,
    } = around;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let signal = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    };
    let handle_for_member = handle.clone();
    let mut app = weir_api::router_with_shutdown(store, handle, signal());
    if let Some(more) = more {
        app = app.merge(more(Box::pin(signal())));
    }
    if let Some(guard) = guard {
        app = guard(app);
    }
    if let Some(ready) = ready {
        app = ready.apply(app);
    }
    if let Some(hosts) = hosts {
        app = hosts.apply(app);
    }
    let member = member.map(|start| start(handle_for_member, Box::pin(signal())));
    let engine = tokio::spawn(engine.run(signal()));
    tokio::spawn(async move {
        shutdown_requested().await;
        let _ = stop.send(true);
    });
    // Handlers get each client's address (`ConnectInfo<SocketAddr>`, for the rate limit of bad
    // tokens), plain or TLS alike.
    crate::http_server::serve(listener, app, limits, signal()).await;
    if let Some(member) = member {
        // It gives the leases back, so the other instances take over at once.
        let _ = member.await;
    }
    match engine.await {
        Ok(Ok(())) => Ok(ExitCode::SUCCESS),
        Ok(Err(error)) => Err(anyhow::anyhow!("the engine failed: {error}")),
        Err(error) => Err(anyhow::anyhow!("the engine stopped: {error}")),
    }
}

/// Ctrl-C or SIGTERM.
pub(crate) async fn shutdown_requested() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
