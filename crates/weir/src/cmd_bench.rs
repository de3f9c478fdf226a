//! `weir bench blast-radius`: the deterministic simulation of faulty and healthy canaries under
//! weir and a Flagger-style controller (crates/weir-sim).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use weir_core::model::{EvidenceDeadlineAction, EvidenceRule};
use weir_core::units::GoDuration;
use weir_sim::bench::{self, DEFAULT_ALPHA};
use weir_sim::{Scenario, SimConfig, Telemetry, chart, report};

/// Arguments of `weir bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Simulate faulty and healthy canaries under weir and a Flagger-style controller and
    /// report how many users each exposes to a fault.
    ///
    /// Every controller sees the same pre-generated requests (Poisson arrivals; per request a
    /// routing, an outcome and a latency draw) through the same telemetry; controllers are
    /// weir-core's real state machine with stepWeight 10, maxWeight 50, interval 1m: weir
    /// judged every second by its sequential judge (starting from the primary's counts of the
    /// hour before the run) and promoting only on evidence of health (margin 2 points,
    /// deadline 1h, then hold), the Flagger-style reference by a success rate >= 99% check per
    /// tick with threshold 5 and Flagger's promotion at the plan's end. Reports, per scenario
    /// and controller, canary and failed requests before rollback, time to rollback, the shares
    /// promoted, rolled back and held at the limit (2h), missed detections, false rollbacks
    /// with their Clopper-Pearson interval, promotion time and the ratio to Wald's bound, and a
    /// summary line with each controller's missed-detection and promotion rates.
    /// Deterministic: the same flags print the same figures.
    ///
    /// Scenarios: S0 (healthy), S1 (0.5% -> 5% errors) and S1-r1.5/-r2/-r5/-r10, S2 (crash),
    /// S3-median10/-median50/-tail (latency), S4 (intermittent), S5-1/-0.1 (low traffic, with
    /// -healthy twins), S6 (primary incident), S7 (delayed onset), S8 (below tolerance).
    ///
    /// Exit status: 0 on success, 2 when the flags are invalid.
    BlastRadius(BlastRadiusArgs),
}

/// Output formats of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BenchOutput {
    /// A Markdown table (with the scenarios and, with --chart, the knob sweep).
    Markdown,
    /// A JSON array with one object per scenario and controller.
    Json,
}

/// What weir does when its evidence deadline passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OnDeadline {
    /// Keep holding for a person.
    Hold,
    /// Roll back.
    Rollback,
    /// Promote without evidence of health.
    Promote,
}

impl From<OnDeadline> for EvidenceDeadlineAction {
    fn from(action: OnDeadline) -> Self {
        match action {
            OnDeadline::Hold => EvidenceDeadlineAction::Hold,
            OnDeadline::Rollback => EvidenceDeadlineAction::Rollback,
            OnDeadline::Promote => EvidenceDeadlineAction::Promote,
        }
    }
}

/// Whole seconds of a duration flag, refused when it does not fit the simulation's clock.
fn whole_seconds(flag: &str, duration: GoDuration) -> Result<u32> {
    let seconds = duration.get().as_secs();
    match u32::try_from(seconds) {
        Ok(seconds) if duration.get().subsec_nanos() == 0 => Ok(seconds),
        _ => bail!("{flag} must be a whole number of seconds up to 136 years, got {duration}"),
    }
}

/// Arguments of `weir bench blast-radius`.
#[derive(Debug, Args)]
struct BlastRadiusArgs {
    /// Run only this scenario (S0, S1, S1-r2, S3-tail, ...) or family (S3, S5, `S1*` for S1
    /// and its grid); all scenarios when absent.
    #[arg(long, value_name = "NAME")]
    scenario: Option<String>,
    /// Simulated runs per scenario and controller (seeds 0..N).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    seeds: u64,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = BenchOutput::Markdown)]
    output: BenchOutput,
    /// Also sweep each controller's knobs (weir: alpha 1e-4..0.1; Flagger-style: threshold
    /// 1..10 x minimum success rate 95..99.9%) on S0 and S1, and write the Pareto chart of
    /// failed requests against false rollbacks to this SVG file.
    #[arg(long, value_name = "PATH")]
    chart: Option<PathBuf>,
    /// Custom scenario: requests per second (both versions together).
    #[arg(long, value_name = "RPS")]
    rate: Option<f64>,
    /// Custom scenario: the primary's error rate, in percent (default 0.5).
    #[arg(long, value_name = "P")]
    primary_error_rate: Option<f64>,
    /// Custom scenario: the canary's error rate, in percent (required for a custom scenario).
    #[arg(long, value_name = "P")]
    canary_error_rate: Option<f64>,
    /// Custom scenario: seconds after the canary's first request at which its fault starts.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    onset: u32,
    /// weir's bound on false rollbacks (the sequential judge's alpha).
    #[arg(long, value_name = "ALPHA", default_value_t = DEFAULT_ALPHA)]
    alpha: f64,
    /// Telemetry: counters reach the controllers in chunks of this many seconds (1: weir's
    /// embedded router; 15: a typical Prometheus scrape).
    #[arg(long, value_name = "SECONDS", default_value_t = 1)]
    scrape_interval: u32,
    /// Telemetry: extra delay before scraped counters are visible, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    lag: u32,
    /// The pre-run period whose primary counts weir's judge starts from (its baseline), before
    /// the canary's first traffic; 0: no baseline.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = GoDuration::parse)]
    baseline: GoDuration,
    /// The simulation's limit: a run that has neither promoted nor rolled back by then counts
    /// as held.
    #[arg(long, value_name = "DURATION", default_value = "2h", value_parser = GoDuration::parse)]
    max_duration: GoDuration,
    /// weir's evidence deadline (spec.analysis.evidence.deadline): how long a run holds for
    /// evidence of health before --on-deadline applies.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = GoDuration::parse)]
    evidence_deadline: GoDuration,
    /// What weir does when the evidence deadline passes (spec.analysis.evidence.onDeadline).
    #[arg(long, value_enum, value_name = "ACTION", default_value_t = OnDeadline::Hold)]
    on_deadline: OnDeadline,
    /// Threads to spread the seeds over (default: the number of CPUs). Results do not depend
    /// on it.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

/// Runs `weir bench ...`.
pub fn bench(args: &BenchArgs) -> Result<ExitCode> {
    match &args.command {
        BenchCommand::BlastRadius(args) => blast_radius(args),
    }
}

fn scenarios(args: &BlastRadiusArgs) -> Result<Vec<Scenario>> {
    let custom = args.rate.is_some()
        || args.primary_error_rate.is_some()
        || args.canary_error_rate.is_some()
        || args.onset > 0;
    if custom {
        let Some(canary) = args.canary_error_rate else {
            bail!("a custom scenario needs --canary-error-rate (in percent)");
        };
        let rate = args.rate.unwrap_or(100.0);
        let primary = args.primary_error_rate.unwrap_or(0.5);
        if !(rate > 0.0 && rate.is_finite()) {
            bail!("--rate must be a positive number of requests per second, got {rate}");
        }
        for (flag, value) in [
            ("--primary-error-rate", primary),
            ("--canary-error-rate", canary),
        ] {
            if !(0.0..=100.0).contains(&value) {
                bail!("{flag} is a percentage from 0 to 100, got {value}");
            }
        }
        return Ok(vec![Scenario::custom(
            rate,
            primary / 100.0,
            canary / 100.0,
            args.onset,
        )]);
    }
    match &args.scenario {
        None => Ok(Scenario::all()),
        Some(name) => {
            let selected = Scenario::select(name);
            if selected.is_empty() {
                let names: Vec<String> = Scenario::all()
                    .into_iter()
                    .map(|scenario| scenario.name)
                    .collect();
                bail!(
                    "no scenario named {name:?}; known: {} (or a family: S1*, S3, S5)",
                    names.join(", ")
                );
            }
            Ok(selected)
        }
    }
}

fn blast_radius(args: &BlastRadiusArgs) -> Result<ExitCode> {
    if args.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    if !(args.alpha > 0.0 && args.alpha < 1.0) {
        bail!(
            "--alpha must be between 0 and 1 (exclusive), got {}",
            args.alpha
        );
    }
    if args.scrape_interval == 0 {
        bail!("--scrape-interval must be at least 1 second");
    }
    let baseline_s = whole_seconds("--baseline", args.baseline)?;
    let max_duration_s = whole_seconds("--max-duration", args.max_duration)?;
    if max_duration_s == 0 {
        bail!("--max-duration must be at least 1s");
    }
    let scenarios = scenarios(args)?;
    let config = SimConfig {
        telemetry: Telemetry {
            scrape_interval_s: args.scrape_interval,
            delay_s: args.lag,
        },
        max_duration_s,
        baseline_s,
        ..SimConfig::default()
    };
    let evidence = EvidenceRule {
        deadline: args.evidence_deadline,
        on_deadline: args.on_deadline.into(),
        ..EvidenceRule::default()
    };
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let rows = bench::run_benchmark(
        &scenarios,
        args.alpha,
        evidence,
        0..args.seeds,
        &config,
        threads,
    );
    let sweep = match &args.chart {
        Some(path) => {
            let points = bench::run_sweep(0..args.seeds, &config, threads);
            let subtitle = format!(
                "{} seeds per point; 100 req/s; stepWeight 10, maxWeight 50, interval 1m; telemetry every {} s, lag {} s",
                args.seeds, args.scrape_interval, args.lag
            );
            std::fs::write(path, chart::pareto_svg(&points, &subtitle))
                .with_context(|| format!("cannot write the chart to {}", path.display()))?;
            Some(points)
        }
        None => None,
    };
    let mut out = std::io::stdout().lock();
    match args.output {
        BenchOutput::Json => {
            serde_json::to_writer_pretty(&mut out, &rows)?;
            writeln!(out)?;
        }
        BenchOutput::Markdown => {
            write!(out, "{}", report::markdown_scenarios(&rows))?;
            writeln!(out)?;
            write!(out, "{}", report::markdown_table(&rows))?;
            if let Some(points) = &sweep {
                writeln!(out)?;
                write!(out, "{}", report::markdown_sweep(points))?;
            }
            writeln!(out)?;
            write!(out, "{}", report::summary_line(&rows))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
