//! How a rollout in the foreground looks: a live status line, event lines above it, and a closing
//! summary with the evidence. Shared by `weir run` and `weir demo`.

use std::io::Write;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use weir_core::model::{CheckOutcome, Event, EventReason, Phase, Plan, RolloutSpec, RolloutStatus};
use weir_router::metrics::{MetricsSnapshot, Traffic};
use weir_store::StoredEvent;

/// Success rate and p99 of one version over the last second-ish window.
#[derive(Debug, Clone, Default)]
pub struct VersionHealth {
    pub requests: u64,
    pub errors: u64,
    pub p99_ms: Option<f64>,
}

impl VersionHealth {
    pub fn from_window(window: &MetricsSnapshot, version: &str) -> VersionHealth {
        match window.get(version, Traffic::Served) {
            Some(series) => VersionHealth {
                requests: series.requests,
                errors: series.errors,
                p99_ms: series
                    .latency
                    .quantile(0.99)
                    .map(|p99| p99.as_secs_f64() * 1000.0),
            },
            None => VersionHealth::default(),
        }
    }

    fn describe(&self) -> String {
        if self.requests == 0 {
            return "no traffic".into();
        }
        let success = 100.0 * (self.requests - self.errors) as f64 / self.requests as f64;
        match self.p99_ms {
            Some(p99) => format!("{success:.1}% ok, p99 {p99:.0}ms"),
            None => format!("{success:.1}% ok"),
        }
    }
}

/// Steps in the plan, for "step i of n".
pub fn plan_length(spec: &RolloutSpec) -> u32 {
    match &spec.plan {
        Plan::Canary(canary) => weir_core::machine::canary_steps(canary).len() as u32,
        Plan::Schedule(_) => weir_core::machine::schedule_entries(spec).len() as u32,
        Plan::BlueGreen(plan) => plan.iterations,
        Plan::Mirror(plan) => plan.iterations,
        Plan::AbTest(plan) => plan.iterations,
    }
}

/// The live view.
pub enum Progress {
    /// A status line redrawn in place, event lines printed above it (on a terminal).
    Bar(ProgressBar),
    /// Event lines only (output redirected: no status line to redraw).
    Lines,
    /// One JSON object per event, one per line (`--output json`).
    Json,
}

impl Progress {
    pub fn new(json: bool) -> Progress {
        if json {
            return Progress::Json;
        }
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return Progress::Lines;
        }
        let bar = ProgressBar::new(100);
        let style = ProgressStyle::with_template("{spinner} [{bar:24}] {pos:>3}% {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(120));
        Progress::Bar(bar)
    }

    /// Prints an event (above the bar, or as a JSON line).
    pub fn event(&self, rollout: &str, stored: &StoredEvent) {
        match self {
            Progress::Bar(bar) => bar.println(format_event(&stored.event)),
            Progress::Lines => println!("{}", format_event(&stored.event)),
            Progress::Json => {
                let line = serde_json::json!({"rollout": rollout, "seq": stored.seq, "event": stored.event});
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
            }
        }
    }

    /// Redraws the status line.
    pub fn status(
        &self,
        spec: &RolloutSpec,
        status: &RolloutStatus,
        primary: &VersionHealth,
        canary: &VersionHealth,
        left: Option<Duration>,
    ) {
        let Progress::Bar(bar) = self else {
            return;
        };
        bar.set_position(u64::from(status.canary_weight.basis_points() / 100));
        let steps = plan_length(spec);
        let step = status.steps_taken.max(status.iterations);
        let left = left
            .map(|left| format!(" | ~{}s left", left.as_secs()))
            .unwrap_or_default();
        bar.set_message(format!(
            "{phase} | canary {weight} | step {step}/{steps} | primary {primary} | canary {canary}{left}",
            phase = status.phase,
            weight = status.canary_weight,
            primary = primary.describe(),
            canary = canary.describe(),
        ));
    }

    pub fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// One event as a line: time, phase, weight, message, and the evidence that decided it.
pub fn format_event(event: &Event) -> String {
    let mut line = format!(
        "{}  {:<16} {:>6}  {}",
        event.at.strftime("%H:%M:%S"),
        event.phase.to_string(),
        event.canary_weight.to_string(),
        event.message
    );
    let failing: Vec<String> = event
        .evidence
        .checks
        .iter()
        .filter(|check| check.outcome != CheckOutcome::Pass)
        .map(|check| match check.value {
            Some(value) => format!("{} = {value} ({})", check.name, check.message),
            None => format!("{}: {}", check.name, check.message),
        })
        .collect();
    if !failing.is_empty() {
        line.push_str(&format!("\n            evidence: {}", failing.join("; ")));
    }
    if let Some(verdict) = &event.evidence.verdict {
        let detail = match verdict.evidence["summary"].as_str() {
            Some(summary) => summary.to_string(),
            None => verdict.evidence.to_string(),
        };
        line.push_str(&format!(
            "\n            evidence ({} judge): {detail}",
            verdict.judge
        ));
    }

    line
}

/// The closing summary: the outcome, why, and the history that led there.
pub fn summary(name: &str, status: &RolloutStatus, events: &[StoredEvent]) -> String {
    let mut text = String::new();
    let outcome = match status.phase {
        Phase::Succeeded => "PROMOTED",
        Phase::Failed => "ROLLED BACK",
        Phase::Stopped => "STOPPED",
        other => other.as_str(),
    };
    text.push_str(&format!("\n{name}: {outcome} - {}\n", status.message));
    let decisive: Vec<&StoredEvent> = events
        .iter()
        .filter(|stored| {
            matches!(
                stored.event.reason,
                EventReason::ChecksFailed
                    | EventReason::RolledBack
                    | EventReason::Held
                    | EventReason::Verdict
            )
        })
        .collect();
    if !decisive.is_empty() {
        text.push_str("why:\n");
        for stored in decisive {
            text.push_str(&format!(
                "  #{:<3} {}\n",
                stored.seq,
                format_event(&stored.event)
            ));
        }
    }
    text.push_str(&format!(
        "history: {} events in run {}\n",
        events.len(),
        status.run
    ));
    text
}
