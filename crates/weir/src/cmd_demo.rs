//! `weir demo`: a real canary on loopback, end to end, in well under two minutes.
//!
//! Two versions of the sample app, weir's router in front of them, steady load through the
//! router, and a rollout with short intervals judged on the traffic the router sees. With
//! `--faulty` the canary answers 10% of requests with 500s and is rolled back.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use weir_core::model::Rollout;
use weir_store::RolloutKey;
use weir_tools::load::{LoadConfig, LoadGenerator};
use weir_tools::sample_app::{SampleApp, SampleAppConfig};

use crate::cmd_run::{Foreground, Outcome};

/// Arguments of `weir demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Give the canary a real fault (10% of its responses are 500s): weir rolls it back.
    #[arg(long)]
    faulty: bool,
    /// Requests per second through the router.
    #[arg(long, default_value_t = 200.0, value_name = "RPS")]
    rate: f64,
    /// Seconds between analysis ticks (the demo's rollout has 5 steps).
    #[arg(long, default_value_t = 3, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=60))]
    interval: u64,
    /// `text`: a live progress line and a summary; `json`: one JSON event per line, after a first
    /// line with the addresses bound: {"listening": {"router": ..., "primary": ..., "canary": ...}}.
    #[arg(long, short, value_enum, default_value_t = crate::cmd_core::OutputFormat::Text)]
    output: crate::cmd_core::OutputFormat,
}

/// The demo's rollout: a canary from 5% to 100% in five steps, judged on success rate and p99.
fn demo_rollout(
    listen: SocketAddr,
    primary: SocketAddr,
    canary: SocketAddr,
    interval: u64,
) -> Result<Rollout> {
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata:
  name: demo
  namespace: default
spec:
  target:
    kind: local
    listen: "{listen}"
    primary: {{url: "http://{primary}", healthCheck: /healthz}}
    canary: {{url: "http://{canary}", healthCheck: /healthz}}
  plan:
    canary:
      stepWeights: [5, 15, 30, 60, 100]
  analysis:
    interval: {interval}s
    threshold: 2
    progressDeadline: {deadline}s
    metrics:
      - name: request-success-rate
        thresholdRange: {{min: 99}}
      - name: request-duration
        thresholdRange: {{max: 500}}
"#,
        deadline = interval * 20,
    );
    let parsed: Rollout =
        serde_saphyr::from_str(&yaml).context("the demo rollout does not parse")?;
    Ok(parsed)
}

/// `weir demo`.
pub fn demo(args: &DemoArgs) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(run_demo(args))?;
    Ok(outcome.exit_code())
}

async fn run_demo(args: &DemoArgs) -> Result<Outcome> {
    let json = args.output == crate::cmd_core::OutputFormat::Json;
    let say = |text: String| {
        if !json {
            println!("{text}");
        }
    };
    // Two versions of the sample app on free loopback ports.
    let stable = SampleApp::bind(SampleAppConfig {
        latency: Duration::from_millis(2),
        ..SampleAppConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), "v1")
    })
    .await?;
    let mut canary_config = SampleAppConfig::new(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), "v2");
    canary_config.latency = Duration::from_millis(2);
    canary_config.seed = 7;
    if args.faulty {
        canary_config.error_percent = 10.0;
    }
    let canary = SampleApp::bind(canary_config).await?;
    let (primary_addr, canary_addr) = (stable.local_addr(), canary.local_addr());
    let (stop_apps, apps_stopped) = tokio::sync::watch::channel(false);
    for app in [stable, canary] {
        let mut stopped = apps_stopped.clone();
        tokio::spawn(app.serve(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }));
    }
    // The router's port is picked by the system and bound before the rollout starts, so the
    // load below knows where to go.
    let rollout = demo_rollout(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        primary_addr,
        canary_addr,
        args.interval,
    )?;
    let key = RolloutKey::of(&rollout);
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let foreground = Foreground::start(
        &dir.path().join("demo.db"),
        &crate::integrations::Integrations::default(),
    )
    .await?;
    let listen = foreground
        .reserve_router(&key, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await?;
    crate::listening::announce(
        args.output,
        &[
            ("router", listen),
            ("primary", primary_addr),
            ("canary", canary_addr),
        ],
    );

    say(format!(
        "weir demo: v1 (stable) at http://{primary_addr}, v2 ({}) at http://{canary_addr},\n           router at http://{listen}, {} req/s of load through it, a tick every {}s.\n",
        if args.faulty {
            "faulty: 10% of its responses are 500s"
        } else {
            "healthy"
        },
        args.rate,
        args.interval,
    ));

    // Load starts once the router serves (the first tick starts it on the reserved socket).
    let (stop_load, load_stopped) = tokio::sync::oneshot::channel::<()>();
    let load_target = format!("http://{listen}/");
    let rate = args.rate;
    let targets = foreground.targets.clone();
    let load_key = key.clone();
    let load = tokio::spawn(async move {
        let mut config = LoadConfig::new(load_target, rate, None);
        config.timeout = Duration::from_secs(2);
        // Requests before the router serves would be failures that are not the versions'
        // fault: wait for it (a poll, with a bound, in case the run fails to start).
        let waited = tokio::time::Instant::now();
        while targets.metrics(&load_key).await.is_none()
            && waited.elapsed() < Duration::from_secs(30)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        match LoadGenerator::new(config) {
            Ok(generator) => Some(
                generator
                    .run_until(async move {
                        let _ = load_stopped.await;
                    })
                    .await,
            ),
            Err(_) => None,
        }
    });

    let outcome = foreground.drive(rollout, json, None).await;
    let _ = stop_load.send(());
    let load_summary = load.await.ok().flatten();
    foreground.shutdown(&key).await;
    let _ = stop_apps.send(true);
    let outcome = outcome?;

    if let Some(summary) = load_summary.filter(|_| !json) {
        let served: Vec<String> = summary
            .by_version
            .iter()
            .map(|(version, counts)| {
                format!(
                    "{version}: {} requests ({} failed)",
                    counts.requests, counts.failed
                )
            })
            .collect();
        println!(
            "load: {} requests sent, {} failed as users saw them; by version: {}",
            summary.sent,
            summary.failed,
            served.join(", ")
        );
        match outcome {
            Outcome::Promoted => println!("v2 now serves all traffic; v1 can be retired."),
            Outcome::RolledBack => println!(
                "v1 serves all traffic again; v2 reached only the users of the first step(s) before the evidence stopped it."
            ),
            Outcome::Stopped | Outcome::Interrupted(_) => {}
        }
    }
    Ok(outcome)
}
