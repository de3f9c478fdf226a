//! The operator scale benchmark (docs/BENCHMARKS.md, "Operator scale"): N rollouts in one
//! `weir operator` (the real binary) against the testkit's in-memory Kubernetes API server; a
//! new revision of all N at once; tick lateness, memory and API requests per step.
//!
//! ```text
//! bash bench/operator/run.sh --rollouts 1000 --interval 60
//! ```
//!
//! or by hand: `cargo build --release -p weir --bin weir --example operator_scale`, then
//! `target/release/examples/operator_scale --rollouts 1000 --interval 60`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use weir_testkit::operator_scale::{ScaleConfig, run};

/// N rollouts in one `weir operator` against the in-memory API server.
#[derive(Debug, Parser)]
struct Args {
    /// Rollouts (each with its own Deployment) in the one operator.
    #[arg(long, default_value_t = 1000)]
    rollouts: usize,
    /// Every rollout's analysis interval in seconds: one step per interval.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    interval: u64,
    /// The canary's step weights, in percent.
    #[arg(long, value_delimiter = ',', default_value = "10,30,50")]
    steps: Vec<u32>,
    /// The `weir` binary under test; default: `weir` beside this example's directory (the
    /// release build of the same target directory).
    #[arg(long, value_name = "PATH")]
    weir: Option<PathBuf>,
    /// Also print the report as JSON-free plain Markdown to this file.
    #[arg(long, value_name = "PATH")]
    report: Option<PathBuf>,
}

fn main() {
    let args = Args::parse();
    let binary = args.weir.unwrap_or_else(|| {
        let exe = std::env::current_exe().expect("the example's path");
        exe.parent()
            .and_then(|examples| examples.parent())
            .map(|profile| profile.join("weir"))
            .expect("a target directory")
    });
    assert!(
        binary.is_file(),
        "no weir binary at {}: build it (cargo build --release -p weir --bin weir) or pass --weir",
        binary.display()
    );
    let config = ScaleConfig {
        binary,
        rollouts: args.rollouts,
        interval: Duration::from_secs(args.interval),
        steps: args.steps,
        progress: true,
    };
    let report = run(&config);
    let markdown = report.markdown();
    print!("{markdown}");
    if let Some(path) = args.report {
        std::fs::write(&path, &markdown).expect("writing the report");
    }
}
