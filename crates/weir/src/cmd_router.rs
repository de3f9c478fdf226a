//! `weir router`: the embedded router on its own, in front of two versions of a service.
//!
//! Useful to put weir in front of a service by hand (a fixed split, A/B rules, a mirror) and to
//! benchmark the data path. All routing logic lives in weir-router; this is flag parsing and a
//! runtime.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use weir_router::{
    Backend, MatchBlock, Mirror, RouteSpec, Router, RouterConfig, SessionAffinity, Upstream, Weight,
};

/// Arguments of `weir router`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct RouterArgs {
    /// Address to accept client traffic on (HTTP/1.1 with keep-alive, and HTTP/2 cleartext with
    /// prior knowledge), e.g. 0.0.0.0:8080. Port 0 picks a free port; the bound address is
    /// printed on start.
    #[arg(long, value_name = "ADDR")]
    listen: SocketAddr,
    /// Upstream of the primary (stable) version, as http://HOST:PORT. Repeat the flag or
    /// separate with commas for several addresses; requests are spread round-robin.
    #[arg(long, required = true, value_name = "URL", value_delimiter = ',')]
    primary: Vec<Upstream>,
    /// Upstream of the canary (new) version, as http://HOST:PORT. Repeatable like --primary.
    #[arg(long, required = true, value_name = "URL", value_delimiter = ',')]
    canary: Vec<Upstream>,
    /// Share of traffic sent to the canary, in percent: 0 to 100 with up to two decimals
    /// (0.01% resolution), e.g. 10 or 2.5. Requests matched by --match go to the canary
    /// regardless.
    #[arg(long, value_name = "PERCENT", default_value = "0")]
    weight: Weight,
    /// Send requests matching RULE to the canary. RULE is one or more conditions joined by
    /// " & ", all of which must hold: KIND:NAME=VALUE (exact), KIND:NAME^=VALUE (prefix) or
    /// KIND:NAME~=REGEX (whole-value regular expression), where KIND is header, cookie or
    /// query. Repeat the flag for alternatives: a request matching ANY rule goes to the canary.
    #[arg(long = "match", value_name = "RULE")]
    matches: Vec<MatchBlock>,
    /// Serve Prometheus metrics at http://ADDR/metrics (and a health check at /healthz), e.g.
    /// 127.0.0.1:9090. Off by default.
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,
    /// `text`: start-up and shutdown lines on stderr; `json`: also the addresses bound, as the
    /// first line on stdout: {"listening": {NAME: "HOST:PORT"}} (useful with port 0).
    #[arg(long, short, value_enum, default_value_t = crate::cmd_core::OutputFormat::Text)]
    output: crate::cmd_core::OutputFormat,
    /// Name of the primary version: the `version` label of its metrics and the value of its
    /// session-affinity cookie.
    #[arg(long, value_name = "NAME", default_value = "primary")]
    primary_name: String,
    /// Name of the canary version (see --primary-name).
    #[arg(long, value_name = "NAME", default_value = "canary")]
    canary_name: String,
    /// Pin each client to the version it was first given with a cookie of this name (Flagger's
    /// sessionAffinity). A pin is ignored once its version's weight is 0, so rollbacks take
    /// effect at once.
    #[arg(long, value_name = "COOKIE")]
    sticky_cookie: Option<String>,
    /// Max-Age of the session-affinity cookie (e.g. 1h, 30m, 86400s).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration, requires = "sticky_cookie")]
    sticky_max_age: Duration,
    /// Mirror this percentage of the primary's requests to the canary (its responses are
    /// discarded and counted separately as mirror traffic), e.g. 100.
    #[arg(long, value_name = "PERCENT")]
    mirror: Option<Weight>,
    /// Most mirror copies in flight; further copies are dropped (and counted) so a slow canary
    /// never slows the primary.
    #[arg(long, value_name = "N", default_value_t = RouterConfig::default().mirror_concurrency)]
    mirror_concurrency: usize,
    /// Time allowed to connect to an upstream before answering 502.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    connect_timeout: Duration,
    /// Time allowed for an upstream's response head before answering 504.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    response_timeout: Duration,
    /// Time allowed for a client to send a request head; also the idle limit of HTTP/1.1
    /// keep-alive connections.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    header_read_timeout: Duration,
    /// Largest request head accepted, in bytes; larger heads get 431.
    #[arg(long, value_name = "BYTES", default_value_t = RouterConfig::default().max_header_bytes)]
    max_header_bytes: usize,
    /// Most client connections served at once; further clients wait in the listen backlog.
    #[arg(long, value_name = "N", default_value_t = RouterConfig::default().max_connections)]
    max_connections: usize,
    /// Serving threads, each with its own event loop, listening socket (SO_REUSEPORT) and
    /// upstream connections (default: one per CPU).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

const AFTER_HELP: &str = "\
Examples:
  weir router --listen 127.0.0.1:8080 --primary http://127.0.0.1:9001 \\
      --canary http://127.0.0.1:9002 --weight 10 --admin 127.0.0.1:9090
  weir router --listen 0.0.0.0:8080 --primary http://10.0.0.1:80,http://10.0.0.2:80 \\
      --canary http://10.0.0.3:80 --match 'header:x-canary=insider' \\
      --match 'header:user-agent~=.*Firefox.* & cookie:beta=yes'

Errors (for metrics): a request counts as an error when the client receives a 5xx status,
from the upstream or from the router (502 upstream unreachable, 504 upstream timeout).
Stops cleanly on Ctrl-C.";

/// Parses `500ms`, `2s`, `5m`, `1h` or a bare number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. 500ms, 2s, 5m, 1h"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(number),
        "" | "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number * 60),
        "h" => Duration::from_secs(number * 3600),
        _ => {
            return Err(format!(
                "invalid duration unit {unit:?} in {text:?}: use ms, s, m or h"
            ));
        }
    };
    Ok(duration)
}

/// Runs `weir router` until Ctrl-C.
pub fn router(args: &RouterArgs) -> Result<ExitCode> {
    let spec = RouteSpec {
        primary: Backend::new(args.primary_name.clone(), args.primary.clone()),
        canary: Backend::new(args.canary_name.clone(), args.canary.clone()),
        canary_weight: args.weight,
        matches: args.matches.clone(),
        session_affinity: args.sticky_cookie.as_ref().map(|name| SessionAffinity {
            cookie_name: name.clone(),
            max_age: args.sticky_max_age,
        }),
        mirror: args.mirror.map(|weight| Mirror { weight }),
    };
    spec.validate().context("invalid route")?;
    if args.mirror_concurrency == 0 && args.mirror.is_some() {
        bail!("--mirror-concurrency must be at least 1 when --mirror is set");
    }
    let config = RouterConfig {
        connect_timeout: args.connect_timeout,
        response_timeout: args.response_timeout,
        header_read_timeout: args.header_read_timeout,
        max_header_bytes: args.max_header_bytes,
        max_connections: args.max_connections.max(1),
        mirror_concurrency: args.mirror_concurrency,
        ..RouterConfig::default()
    };
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    // Thread-per-core: each serving thread has its own runtime, listening socket and upstream
    // pool (see weir_router::Router::spawn_per_core). This thread only waits for Ctrl-C and
    // serves the admin endpoint, so scrapes never compete with traffic for a serving thread.
    let router = Router::spawn_per_core("default", args.listen, spec, config, threads)?;
    let handle = router.handle();
    let listen = router.local_addr();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = runtime.block_on(async {
        let mut bound = vec![("router", listen)];
        if let Some(admin) = args.admin {
            let listener = tokio::net::TcpListener::bind(admin)
                .await
                .with_context(|| format!("cannot listen on --admin {admin}"))?;
            let admin = listener.local_addr().unwrap_or(admin);
            bound.push(("admin", admin));
            eprintln!("weir router: metrics at http://{admin}/metrics");
            tokio::spawn(weir_router::serve_admin(
                listener,
                vec![handle.clone()],
                std::future::pending(),
            ));
        }
        crate::listening::announce(args.output, &bound);
        let table = handle.spec();
        eprintln!(
            "weir router: listening on {listen} ({threads} thread(s)): {} {} {}, {} {} {}{}",
            table.primary.version,
            join(&table.primary.upstreams),
            table.canary_weight.complement(),
            table.canary.version,
            join(&table.canary.upstreams),
            table.canary_weight,
            if table.matches.is_empty() {
                String::new()
            } else {
                format!(" plus {} match rule(s)", table.matches.len())
            },
        );
        // If the signal handler cannot be installed, run until killed.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
        anyhow::Ok(())
    });
    router.stop();
    served?;
    eprintln!("weir router: stopped");
    Ok(ExitCode::SUCCESS)
}

fn join(upstreams: &[Upstream]) -> String {
    upstreams
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: RouterArgs,
    }

    #[test]
    fn flags_parse_into_a_route() {
        let cli = Cli::try_parse_from([
            "weir",
            "--listen=127.0.0.1:8080",
            "--primary=http://127.0.0.1:9001,http://127.0.0.1:9003",
            "--canary=127.0.0.1:9002",
            "--weight=12.5",
            "--match=header:x-canary=1 & query:q^=a",
            "--match=cookie:beta~=y.*",
            "--sticky-cookie=pin",
            "--sticky-max-age=30m",
            "--response-timeout=1500ms",
        ])
        .unwrap();
        let args = cli.args;
        assert_eq!(args.primary.len(), 2);
        assert_eq!(args.weight.basis_points(), 1250);
        assert_eq!(args.matches.len(), 2);
        assert_eq!(args.matches[0].conditions.len(), 2);
        assert_eq!(args.sticky_max_age, Duration::from_secs(1800));
        assert_eq!(args.response_timeout, Duration::from_millis(1500));
        for bad in [
            vec![
                "weir",
                "--listen=127.0.0.1:1",
                "--primary=http://a:1",
                "--canary=http://b:1",
                "--weight=101",
            ],
            vec![
                "weir",
                "--listen=127.0.0.1:1",
                "--primary=http://a:1",
                "--canary=http://b:1",
                "--match=x",
            ],
            vec!["weir", "--listen=127.0.0.1:1", "--primary=http://a:1"],
            vec![
                "weir",
                "--listen=127.0.0.1:1",
                "--primary=http://a:1",
                "--canary=http://b:1",
                "--sticky-max-age=1h",
            ],
        ] {
            assert!(Cli::try_parse_from(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("2 days").is_err());
        assert!(parse_duration("ms").is_err());
    }
}
