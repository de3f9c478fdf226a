//! `weir sample-app` and `weir load`: the trial tools of weir-tools on the command line.
//!
//! All behaviour lives in `weir_tools`; this is flag parsing, a runtime and printing.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use weir_core::GoDuration;
use weir_tools::load::{
    HeaderName, HeaderValue, LoadConfig, LoadGenerator, LoadStats, parse_header, parse_target,
};
use weir_tools::sample_app::{SampleApp, SampleAppConfig};

/// Arguments of `weir sample-app`.
#[derive(Debug, Args)]
#[command(disable_version_flag = true, after_long_help = SAMPLE_APP_HELP)]
pub struct SampleAppArgs {
    /// Address to listen on, e.g. 127.0.0.1:8080. Port 0 picks a free port; the bound address
    /// is printed on start.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Version this app reports: in every JSON body, at /version and in the `x-weir-version`
    /// response header (which `weir load` counts per version), e.g. v2.
    #[arg(long = "version", value_name = "V", value_parser = parse_version)]
    app_version: String,
    /// Share of requests answered with 500, in percent: 0 to 100 (decimals allowed), e.g. 5
    /// means 5%. /healthz and /version never fail.
    #[arg(long, value_name = "P", default_value = "0", value_parser = parse_percent)]
    error_rate: f64,
    /// Fixed delay added to every request except /healthz and /version, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 0)]
    latency_ms: u64,
    /// Extra random delay on top of --latency-ms, uniform from 0 to N milliseconds.
    #[arg(long, value_name = "N", default_value_t = 0)]
    jitter_ms: u64,
    /// Seed of the fault and jitter draws: the same seed fails the same requests (counted in
    /// arrival order) on every run.
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,
    /// `text`: start-up and shutdown lines on stderr; `json`: also the addresses bound, as the
    /// first line on stdout: {"listening": {NAME: "HOST:PORT"}} (useful with port 0).
    #[arg(long, short, value_enum, default_value_t = crate::cmd_core::OutputFormat::Text)]
    output: crate::cmd_core::OutputFormat,
}

const SAMPLE_APP_HELP: &str = "\
Endpoints (any method):
  /healthz   200 {\"status\":\"ok\",\"version\":V}, always (a faulty version still starts)
  /version   200 with V as plain text
  any other  200 {\"version\":V,\"path\":PATH} after the latency, or 500 with an \"error\" field
             at the --error-rate
Every response carries the header x-weir-version: V. Runs until Ctrl-C.

Examples:
  weir sample-app --listen 127.0.0.1:9001 --version v1
  weir sample-app --listen 127.0.0.1:9002 --version v2 --error-rate 20 --latency-ms 50

Exit status: 0 after Ctrl-C, 2 when a flag is invalid or the address cannot be bound.";

/// Arguments of `weir load`.
#[derive(Debug, Args)]
#[command(after_long_help = LOAD_HELP)]
pub struct LoadArgs {
    /// URL every request goes to (GET, or POST with --body), plain http only, e.g.
    /// http://127.0.0.1:8080/api.
    #[arg(long, value_name = "URL", value_parser = parse_load_target)]
    target: String,
    /// Requests per second, held constant whatever the responses do (decimals allowed, e.g.
    /// 0.5).
    #[arg(long, value_name = "RPS", value_parser = parse_rate)]
    rate: f64,
    /// How long to send requests, e.g. 30s, 2m, 1m30s.
    #[arg(long, value_name = "D", value_parser = parse_positive_duration)]
    duration: Duration,
    /// Most requests in flight at once. A request due while N are in flight is not sent and is
    /// counted as dropped (overload) instead of delaying the ones after it.
    #[arg(long, value_name = "N", default_value = "256", value_parser = parse_concurrency)]
    concurrency: usize,
    /// POST this body with every request (JSON unless --header sets a Content-Type), e.g. an
    /// OFREP evaluation: --body '{"context":{"targetingKey":"user-1"}}'.
    #[arg(long, value_name = "TEXT")]
    body: Option<String>,
    /// Extra request header as NAME:VALUE, e.g. x-canary:1. Repeat for several headers.
    #[arg(long, value_name = "K:V", value_parser = parse_header_arg)]
    header: Vec<(HeaderName, HeaderValue)>,
    /// Time allowed for each request, from sending it to the end of its response (also the
    /// connect timeout); longer counts as a timeout.
    #[arg(long, value_name = "D", default_value = "5s", value_parser = parse_positive_duration)]
    timeout: Duration,
    /// Format of the summary printed at the end on standard output.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// Format of `weir load`'s summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// A short human report.
    Text,
    /// One JSON object (the fields of the report).
    Json,
}

const LOAD_HELP: &str = "\
The load is open-loop: request i is sent at start + i/RPS whatever happened to the earlier
ones, so a slow server cannot slow the load down and hide its own latency. Latency is measured
from each request's scheduled time, and reported as p50/p90/p99/max.

Outcomes: 2xx (ok); other statuses by class (5xx, 4xx, 3xx); connection errors; timeouts;
dropped (overload, see --concurrency). Responses are also counted per version, from their
x-weir-version header: put weir's router in front of two `weir sample-app`s and see the split.

While it runs, a progress line on standard error (when it is a terminal) shows the requests
sent, the rate and the errors; at the end the summary goes to standard output.

Examples:
  weir load --target http://127.0.0.1:8080/ --rate 100 --duration 30s
  weir load --target http://127.0.0.1:8080/api --rate 500 --duration 2m --concurrency 64 \\
      --header 'x-canary: insider' --output json

Ctrl-C stops sending early; requests in flight are awaited and the summary still printed.

Exit status: 0 when the run completes (or is stopped with Ctrl-C), even if requests failed:
failures are results, counted in the summary. 2 when a flag is invalid (e.g. an https://
target).";

fn parse_version(text: &str) -> Result<String, String> {
    if text.is_empty() || HeaderValue::from_str(text).is_err() {
        return Err(format!(
            "{text:?} is not a usable version: it must be non-empty visible ASCII (it is sent \
             as a header), e.g. v2"
        ));
    }
    Ok(text.to_owned())
}

fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('%').parse::<f64>() {
        Ok(percent) if (0.0..=100.0).contains(&percent) => Ok(percent),
        _ => Err(format!(
            "{text:?} is not a percentage: expected a number from 0 to 100, e.g. 5 for 5%"
        )),
    }
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(format!(
            "{text:?} is not a rate: expected a positive number of requests per second, e.g. 100"
        )),
    }
}

fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let duration = GoDuration::parse(text)?.get();
    if duration.is_zero() {
        return Err(format!(
            "{text:?} is zero: expected a positive duration such as 30s or 2m"
        ));
    }
    Ok(duration)
}

fn parse_concurrency(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{text:?} is not a concurrency: expected a whole number of at least 1"
        )),
    }
}

fn parse_load_target(text: &str) -> Result<String, String> {
    parse_target(text).map_err(|error| error.to_string())?;
    Ok(text.trim().to_owned())
}

fn parse_header_arg(text: &str) -> Result<(HeaderName, HeaderValue), String> {
    parse_header(text)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs `weir sample-app` until Ctrl-C.
pub fn sample_app(args: &SampleAppArgs) -> Result<ExitCode> {
    let config = SampleAppConfig {
        listen: args.listen,
        version: args.app_version.clone(),
        error_percent: args.error_rate,
        latency: Duration::from_millis(args.latency_ms),
        jitter: Duration::from_millis(args.jitter_ms),
        seed: args.seed,
    };
    runtime()?.block_on(async {
        let app = SampleApp::bind(config)
            .await
            .context("--listen: cannot start the sample app")?;
        crate::listening::announce(args.output, &[("app", app.local_addr())]);
        eprintln!(
            "weir sample-app: version {} listening on http://{} (error rate {}%, latency {} ms{})",
            args.app_version,
            app.local_addr(),
            args.error_rate,
            args.latency_ms,
            if args.jitter_ms > 0 {
                format!(" + up to {} ms", args.jitter_ms)
            } else {
                String::new()
            },
        );
        let stats = app.stats();
        app.serve(async {
            // If the signal handler cannot be installed, run until killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await?;
        eprintln!(
            "weir sample-app: stopped after {} requests ({} injected errors)",
            stats.requests(),
            stats.injected_errors()
        );
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `weir load` and prints its summary.
pub fn load(args: &LoadArgs) -> Result<ExitCode> {
    let config = LoadConfig {
        target: args.target.clone(),
        rate: args.rate,
        duration: Some(args.duration),
        concurrency: args.concurrency,
        timeout: args.timeout,
        headers: args.header.clone(),
        body: args.body.clone().map(weir_tools::load::Bytes::from),
    };
    let generator = LoadGenerator::new(config).context("--target/--rate")?;
    let progress = std::io::stderr()
        .is_terminal()
        .then(|| Progress::start(generator.stats()));
    let summary = runtime()?.block_on(generator.run_until(async {
        // Ctrl-C stops sending early; the summary still covers what was sent. If the signal
        // handler cannot be installed, run for the whole duration.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }));
    if let Some(progress) = progress {
        progress.stop();
    }
    let mut stdout = std::io::stdout().lock();
    match args.output {
        Output::Text => write!(stdout, "{summary}")?,
        Output::Json => writeln!(stdout, "{}", serde_json::to_string_pretty(&summary)?)?,
    }
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// A one-line progress display on standard error, redrawn four times a second.
struct Progress {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Progress {
    fn start(stats: LoadStats) -> Progress {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let thread = std::thread::spawn(move || {
            let mut last = (0.0, 0);
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                let now = stats.snapshot();
                let seconds = now.elapsed_secs - last.0;
                let rate = if seconds > 0.0 {
                    (now.sent - last.1) as f64 / seconds
                } else {
                    0.0
                };
                last = (now.elapsed_secs, now.sent);
                let remaining = now
                    .duration_secs
                    .map(|total| (total - now.elapsed_secs).max(0.0))
                    .unwrap_or(0.0);
                eprint!(
                    "\r\x1b[2K{:>6.1}s  {} sent  {rate:.0} req/s  {} ok  {} errors  {} dropped  \
                     p99 {:.1} ms  {remaining:.0}s left",
                    now.elapsed_secs, now.sent, now.ok, now.failed, now.dropped, now.latency.p99_ms,
                );
            }
            eprint!("\r\x1b[2K");
        });
        Progress { done, thread }
    }

    fn stop(self) {
        self.done.store(true, Ordering::Relaxed);
        // The progress thread only prints; if it panicked there is nothing to recover.
        let _ = self.thread.join();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser, Subcommand};

    /// Mirrors main.rs's parser settings (a propagated --version flag) to check that the
    /// sample app's own --version flag does not clash with it.
    #[derive(Debug, Parser)]
    #[command(name = "weir", version, propagate_version = true)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Debug, Subcommand)]
    enum Command {
        SampleApp(SampleAppArgs),
        Load(LoadArgs),
    }

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("weir").chain(args.iter().copied()))
            .map(|cli| cli.command)
    }

    #[test]
    fn the_command_tree_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn sample_app_flags() {
        let Command::SampleApp(args) = parse(&[
            "sample-app",
            "--listen=127.0.0.1:0",
            "--version=v2",
            "--error-rate=12.5",
            "--latency-ms=30",
        ])
        .unwrap() else {
            panic!("not sample-app");
        };
        assert_eq!(args.app_version, "v2");
        assert_eq!(args.error_rate, 12.5);
        assert_eq!(args.latency_ms, 30);
        assert_eq!(args.listen.port(), 0);
        for (bad, flag) in [
            (vec!["sample-app"], "--version"),
            (
                vec!["sample-app", "--version=v1", "--error-rate=101"],
                "--error-rate",
            ),
            (
                vec!["sample-app", "--version=v1", "--error-rate=-1"],
                "--error-rate",
            ),
            (
                vec!["sample-app", "--version=", "--error-rate=1"],
                "--version",
            ),
            (
                vec!["sample-app", "--version=v1", "--listen=nowhere"],
                "--listen",
            ),
        ] {
            let error = parse(&bad).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad:?}");
            assert!(error.to_string().contains(flag), "{bad:?}: {error}");
        }
    }

    #[test]
    fn load_flags() {
        let Command::Load(args) = parse(&[
            "load",
            "--target=http://127.0.0.1:8080/x",
            "--rate=250",
            "--duration=1m30s",
            "--concurrency=8",
            "--header=x-canary: yes",
            "--header=x-b:2",
            "--output=json",
        ])
        .unwrap() else {
            panic!("not load");
        };
        assert_eq!(args.rate, 250.0);
        assert_eq!(args.duration, Duration::from_secs(90));
        assert_eq!(args.concurrency, 8);
        assert_eq!(args.header.len(), 2);
        assert_eq!(args.header[0].0, "x-canary");
        assert_eq!(args.header[0].1, "yes");
        assert_eq!(args.output, Output::Json);
        assert_eq!(args.timeout, Duration::from_secs(5));
        let base = ["--target=http://127.0.0.1:1/", "--rate=1", "--duration=1s"];
        for (extra, flag, hint) in [
            (
                "--target=https://example.com/",
                "--target",
                "https is not supported",
            ),
            ("--rate=0", "--rate", "positive number"),
            ("--duration=0s", "--duration", "positive duration"),
            ("--duration=10", "--duration", "missing a unit"),
            ("--concurrency=0", "--concurrency", "at least 1"),
            ("--header=novalue", "--header", "NAME:VALUE"),
            ("--output=yaml", "--output", "text"),
        ] {
            // Replace the base flag of the same name, if any, by the bad value.
            let name = extra.split('=').next().unwrap();
            let mut args = vec!["load"];
            args.extend(base.iter().filter(|flag| !flag.starts_with(name)));
            args.push(extra);
            let error = parse(&args).unwrap_err();
            let message = error.to_string();
            assert_eq!(error.exit_code(), 2, "{extra}");
            assert!(message.contains(flag), "{extra}: {message}");
            assert!(message.contains(hint), "{extra}: {message}");
        }
    }
}
