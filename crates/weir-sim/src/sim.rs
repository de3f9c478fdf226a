//! Controllers driven through one pre-generated stream: the real `weir_core::machine::step`,
//! judged by a [`ThresholdJudge`] at its ticks and/or a [`SequentialJudge`] every second; the
//! machine applies the evidence rule (`spec.analysis.evidence`) to the sequential judge's
//! report, and the judge may start from the primary's counts of a pre-run period
//! ([`pre_run_baseline`]).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use weir_analysis::{
    Baseline, Judge, SequentialConfig, SequentialJudge, ThresholdConfig, ThresholdJudge, Verdict,
    Window,
};
use weir_core::machine::{self, Effect, Input, Observations};
use weir_core::model::{
    Analysis, CanaryPlan, EvidenceDeadlineAction, EvidenceRule, FlagTarget, Metric, NoDataPolicy,
    Phase, Plan, REQUEST_SUCCESS_RATE, RolloutSpec, RolloutStatus, Target, ThresholdRange,
    VerdictOutcome,
};
use weir_core::units::{GoDuration, Weight};

use crate::rng::Rng;
use crate::scenario::Scenario;
use crate::stream::{Request, RequestStream, Tally};

/// The machine's clock at the canary's first traffic (simulated second 0): 2026-01-01T00:00Z.
const EPOCH: Timestamp = Timestamp::constant(1_767_225_600, 0);

/// The primary's and the canary's revisions, as the machine sees them.
const PRIMARY_REVISION: &str = "v1";
const CANARY_REVISION: &str = "v2";

/// The generator stream of the pre-run baseline. The in-run stream uses one generator per
/// simulated second (streams 0..2^32), so this one never meets them: adding or removing the
/// baseline changes no in-run request.
const BASELINE_STREAM: u64 = 1 << 32;

/// How counters reach a controller: per-second counters, scraped every `scrape_interval_s`
/// seconds and visible `delay_s` seconds after the scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Telemetry {
    /// Counters become visible in chunks of this many seconds (1: every second).
    pub scrape_interval_s: u32,
    /// Extra delay before a scraped chunk is visible.
    pub delay_s: u32,
}

impl Telemetry {
    /// weir's embedded router: every second, no delay.
    pub const EMBEDDED: Telemetry = Telemetry {
        scrape_interval_s: 1,
        delay_s: 0,
    };

    /// The end (exclusive, in simulated seconds) of the counters visible at time `t`: second
    /// `s` is visible from `ceil((s + 1) / scrape) * scrape + delay` on.
    pub fn horizon(&self, t: i64) -> i64 {
        let scrape = i64::from(self.scrape_interval_s.max(1));
        let since = t - i64::from(self.delay_s);
        if since <= 0 {
            0
        } else {
            since / scrape * scrape
        }
    }
}

/// Settings of a simulation shared by every controller.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SimConfig {
    /// How counters reach the controllers.
    pub telemetry: Telemetry,
    /// A run that has neither promoted nor rolled back by then stops, counted as held
    /// (simulated seconds).
    pub max_duration_s: u32,
    /// Give the judges every request's latency (slow; only judges that need raw latencies do).
    pub latencies: bool,
    /// The pre-run period whose primary counts the sequential judges start from, in seconds
    /// before the canary's first traffic ([`pre_run_baseline`]); 0: no baseline.
    pub baseline_s: u32,
}

/// The default limit of a run: 2 hours, so that a run holding for evidence under the default
/// evidence deadline (1 hour) shows what happens after it.
pub const DEFAULT_MAX_DURATION_S: u32 = 2 * 60 * 60;

/// The default pre-run period: the primary's last hour before the canary's first traffic.
pub const DEFAULT_BASELINE_S: u32 = 60 * 60;

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            telemetry: Telemetry::EMBEDDED,
            max_duration_s: DEFAULT_MAX_DURATION_S,
            latencies: false,
            baseline_s: DEFAULT_BASELINE_S,
        }
    }
}

/// The primary's counts over the `seconds` before the canary's first traffic, as its router
/// would have counted them: requests ~ Poisson(rate x seconds), errors and slow requests each
/// binomial on those requests at the primary's error and slow probabilities (independent, as
/// the outcome and latency draws of a request are). Deterministic in `seed`, from a generator
/// of its own ([`BASELINE_STREAM`]), so the in-run stream is the same with or without it.
/// `None` when `seconds` is 0.
pub fn pre_run_baseline(scenario: &Scenario, seed: u64, seconds: u32) -> Option<Baseline> {
    if seconds == 0 {
        return None;
    }
    let mut rng = Rng::new(seed, BASELINE_STREAM);
    let requests = rng.poisson(scenario.rate * f64::from(seconds));
    let errors = rng.binomial(requests, scenario.primary.error_rate);
    let slow_probability = 1.0 - scenario.primary.latency.cdf(scenario.latency_threshold_ms);
    let slow = rng.binomial(requests, slow_probability);
    Some(Baseline {
        requests,
        errors,
        slow: Some(slow),
    })
}

/// A controller: a canary plan run by weir-core's machine, judged by threshold checks at its
/// ticks (Flagger's way), by a sequential judge fed every second (weir's way), or both.
#[derive(Debug, Clone)]
pub struct ControllerSpec {
    /// Its name in reports (`weir`, `flagger-style`).
    pub name: String,
    /// Canary weight added per passing tick, in percent.
    pub step_weight_percent: u32,
    /// The highest canary weight before promotion, in percent.
    pub max_weight_percent: u32,
    /// Seconds between ticks.
    pub interval_s: u32,
    /// Failed checks that roll back (Flagger's `threshold`).
    pub threshold: u32,
    /// Checks evaluated at each tick over the last `check_window_s` visible seconds.
    pub checks: Option<ThresholdConfig>,
    /// The window of the checks (Flagger's metric interval, 1m).
    pub check_window_s: u32,
    /// A judge fed every visible second; a failing verdict rolls back at once, and its
    /// evidence report is what the evidence rule reads.
    pub sequential: Option<SequentialConfig>,
    /// What promotion needs (`spec.analysis.evidence`). It applies only with a sequential
    /// judge: without one the machine gets no evidence report and promotes at the plan's end.
    pub evidence: EvidenceRule,
}

impl ControllerSpec {
    /// The Flagger-style reference: stepWeight 10, maxWeight 50, the given interval and
    /// threshold, a request-success-rate check with this minimum (percent) over a 1-minute
    /// window, no data counting as a failed check (Flagger's behaviour).
    pub fn flagger_style(interval_s: u32, threshold: u32, min_success_rate: f64) -> ControllerSpec {
        ControllerSpec {
            name: "flagger-style".into(),
            step_weight_percent: 10,
            max_weight_percent: 50,
            interval_s,
            threshold,
            checks: Some(ThresholdConfig {
                min_success_rate: Some(min_success_rate),
                max_latency_ms: None,
                no_data: NoDataPolicy::Fail,
            }),
            check_window_s: 60,
            sequential: None,
            // Flagger's semantics: the plan's end promotes unless harm was shown.
            evidence: EvidenceRule::no_harm(),
        }
    }

    /// weir: the same plan (stepWeight 10, maxWeight 50, threshold 5, the given interval), no
    /// threshold checks, the sequential judge fed every second, and weir's default evidence
    /// rule (promotion on evidence of health, margin 2 points, deadline 1h, then hold).
    pub fn weir(interval_s: u32, config: SequentialConfig) -> ControllerSpec {
        ControllerSpec {
            name: "weir".into(),
            step_weight_percent: 10,
            max_weight_percent: 50,
            interval_s,
            threshold: 5,
            checks: None,
            check_window_s: 60,
            sequential: Some(config),
            evidence: EvidenceRule::default(),
        }
    }

    /// The same controller with another evidence deadline and policy after it.
    pub fn evidence_deadline(
        mut self,
        deadline: GoDuration,
        on_deadline: EvidenceDeadlineAction,
    ) -> ControllerSpec {
        self.evidence.deadline = deadline;
        self.evidence.on_deadline = on_deadline;
        self
    }

    /// The same controller under another name.
    pub fn named(mut self, name: impl Into<String>) -> ControllerSpec {
        self.name = name.into();
        self
    }

    /// The Rollout spec the machine runs.
    pub fn rollout_spec(&self) -> RolloutSpec {
        let metrics = match &self.checks {
            Some(checks) => checks
                .min_success_rate
                .map(|min| Metric {
                    name: REQUEST_SUCCESS_RATE.into(),
                    threshold_range: Some(ThresholdRange {
                        min: Some(min),
                        max: None,
                    }),
                    template_ref: None,
                    template_variables: BTreeMap::new(),
                    query: None,
                    interval: Some(GoDuration::from_secs(u64::from(self.check_window_s))),
                })
                .into_iter()
                .chain(checks.max_latency_ms.map(|max| Metric {
                    name: weir_core::model::REQUEST_DURATION.into(),
                    threshold_range: Some(ThresholdRange {
                        min: None,
                        max: Some(max),
                    }),
                    template_ref: None,
                    template_variables: BTreeMap::new(),
                    query: None,
                    interval: Some(GoDuration::from_secs(u64::from(self.check_window_s))),
                }))
                .collect(),
            None => Vec::new(),
        };
        RolloutSpec {
            // The machine never reads the target; the simulation is the target.
            target: Target::Flag(FlagTarget::default()),
            plan: Plan::Canary(CanaryPlan {
                step_weight: Some(Weight::from_percent(self.step_weight_percent)),
                max_weight: Some(Weight::from_percent(self.max_weight_percent)),
                ..CanaryPlan::default()
            }),
            analysis: Analysis {
                interval: GoDuration::from_secs(u64::from(self.interval_s.max(1))),
                threshold: self.threshold,
                no_data: self
                    .checks
                    .as_ref()
                    .map_or(NoDataPolicy::default(), |checks| checks.no_data),
                metrics,
                judges: self
                    .sequential
                    .as_ref()
                    .map(|_| "sequential".to_string())
                    .into_iter()
                    .collect(),
                evidence: self.evidence,
                ..Analysis::default()
            },
            skip_analysis: false,
            suspend: false,
            revert_on_deletion: false,
            session_affinity: None,
        }
    }

    /// The canary weight (0..=1) in force `second` seconds after the first traffic when every
    /// check passes (the plan's schedule).
    pub fn planned_weight(&self, second: u32) -> f64 {
        let steps = self.max_weight_percent / self.step_weight_percent.max(1);
        let step = (second / self.interval_s.max(1) + 1).min(steps.max(1));
        f64::from((step * self.step_weight_percent).min(self.max_weight_percent)) / 100.0
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RunEnd {
    /// All traffic back to the primary.
    RolledBack,
    /// The canary's revision was promoted.
    Promoted,
    /// Neither, within the simulation's limit: the run was holding (for evidence of health,
    /// with weir's evidence rule) when the simulation stopped.
    Held,
}

/// What one controller did with one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    /// How the run ended.
    pub end: RunEnd,
    /// When, in seconds after the canary's first traffic.
    pub end_s: u32,
    /// Requests the canary served until then, counted from the fault's onset (from its first
    /// request in a healthy scenario).
    pub canary_requests: u64,
    /// Of which failed (errors).
    pub canary_errors: u64,
    /// Of which were slow (above the scenario's latency threshold).
    pub canary_slow: u64,
    /// Requests the canary served over the whole run (before the onset too).
    pub canary_requests_total: u64,
    /// Whether a judge's verdict (rather than the threshold of failed checks or the deadline)
    /// rolled it back.
    pub by_verdict: bool,
}

/// One controller's run in progress.
struct Live {
    spec: RolloutSpec,
    status: RolloutStatus,
    weight: f64,
    next_tick: i64,
    checks: Option<ThresholdJudge>,
    check_window_s: i64,
    sequential: Option<SequentialJudge>,
    history: Vec<Window>,
    fed: usize,
    canary: weir_analysis::VersionCounts,
    canary_total: u64,
    end: Option<(RunEnd, i64, bool)>,
}

fn at(t: i64) -> Timestamp {
    EPOCH
        .checked_add(SignedDuration::from_secs(t))
        .unwrap_or(EPOCH)
}

fn seconds_since_epoch(timestamp: Timestamp) -> i64 {
    let elapsed = timestamp.duration_since(EPOCH);
    let whole = elapsed.as_secs();
    if elapsed.subsec_nanos() > 0 {
        whole + 1
    } else {
        whole
    }
}

impl Live {
    fn new(controller: &ControllerSpec, baseline: Option<Baseline>) -> Live {
        let spec = controller.rollout_spec();
        let status = RolloutStatus {
            phase: Phase::Initialized,
            primary_revision: Some(PRIMARY_REVISION.into()),
            ..RolloutStatus::default()
        };
        let mut live = Live {
            spec,
            status,
            weight: 0.0,
            next_tick: 0,
            checks: controller.checks.clone().map(ThresholdJudge::new),
            check_window_s: i64::from(controller.check_window_s.max(1)),
            sequential: controller.sequential.clone().map(|mut config| {
                // The judge shows health within the margin the rule tolerates (percentage
                // points there, a fraction here), and starts from the pre-run baseline.
                config.health_margin = Some(controller.evidence.margin_percent / 100.0);
                config.baseline = baseline;
                SequentialJudge::new(config)
            }),
            history: Vec::new(),
            fed: 0,
            canary: weir_analysis::VersionCounts::default(),
            canary_total: 0,
            end: None,
        };
        // The run starts one interval before the canary's first traffic (the machine's first
        // tick of a run routes nothing to the canary; the next one takes the first step).
        let start = -i64::from(controller.interval_s.max(1));
        live.tick(start, 0);
        live
    }

    fn observations(&self, checks: Vec<weir_core::model::CheckResult>) -> Observations {
        Observations {
            canary_revision: Some(CANARY_REVISION.into()),
            primary_revision: Some(PRIMARY_REVISION.into()),
            primary_ready: true,
            canary_ready: true,
            checks,
            hooks: Vec::new(),
            // The evidence rule reads the sequential judge's report; without a judge there is
            // none and the rule does not apply.
            evidence: self
                .sequential
                .as_ref()
                .map(SequentialJudge::evidence_report),
        }
    }

    /// Applies a transition; returns whether the run ended.
    fn apply(&mut self, transition: machine::Transition, t: i64, by_verdict: bool) {
        let mut promoted = false;
        for effect in &transition.effects {
            match effect {
                Effect::SetRoute(route) => {
                    self.weight = f64::from(route.canary_weight.basis_points()) / 10_000.0;
                }
                Effect::Promote { .. } => promoted = true,
                _ => {}
            }
        }
        self.status = transition.status;
        if let Some(wake) = transition.wake_at {
            self.next_tick = seconds_since_epoch(wake).max(t + 1);
        }
        if self.status.phase == Phase::Failed {
            self.end = Some((RunEnd::RolledBack, t, by_verdict));
        } else if promoted || self.status.phase == Phase::Promoting {
            self.end = Some((RunEnd::Promoted, t, false));
        }
    }

    fn tick(&mut self, t: i64, horizon: i64) {
        let needs = machine::needs(&self.spec, &self.status, Some(CANARY_REVISION));
        let checks = match (&self.checks, needs.metrics) {
            (Some(judge), true) => {
                let end = horizon.min(self.history.len() as i64).max(0);
                let start = (end - self.check_window_s).max(0);
                judge.check(&self.window_sum(start as usize, end as usize))
            }
            _ => Vec::new(),
        };
        let input = Input::Tick(self.observations(checks));
        if let Ok(transition) = machine::step(&self.spec, &self.status, &input, at(t)) {
            self.apply(transition, t, false);
        }
    }

    /// Everything that happens at the boundary `t` (before second `t`'s traffic): the
    /// sequential judge reads the newly visible seconds (a failing verdict rolls back at once),
    /// then the machine ticks if it is due.
    fn decide(&mut self, t: i64, horizon: i64) {
        if self.end.is_some() {
            return;
        }
        let visible = usize::try_from(horizon)
            .unwrap_or(0)
            .min(self.history.len());
        let mut verdict = None;
        if let Some(judge) = &mut self.sequential {
            while self.fed < visible {
                let outcome = judge.observe_outcome(&self.history[self.fed]);
                self.fed += 1;
                if outcome == VerdictOutcome::Fail {
                    let name = judge.name().to_string();
                    verdict = Some(
                        Verdict {
                            outcome,
                            evidence: judge.evidence(),
                        }
                        .into_judge_verdict(&name),
                    );
                    break;
                }
            }
        }
        if let Some(verdict) = verdict
            && let Ok(transition) =
                machine::step(&self.spec, &self.status, &Input::Verdict(verdict), at(t))
        {
            self.apply(transition, t, true);
            if self.end.is_some() {
                return;
            }
        }
        if t >= self.next_tick {
            self.tick(t, horizon);
        }
    }

    /// Counts one second of traffic at the weight in force; `exposed`: whether the second
    /// counts towards the canary's exposure (it is after the fault's onset).
    fn record(&mut self, tally: &Tally, exposed: bool, raw: Option<(&[Request], &Scenario, u32)>) {
        let (canary, primary) = tally.split(self.weight);
        self.canary_total += canary.requests;
        if exposed {
            add(&mut self.canary, &canary);
        }
        let mut window = Window {
            canary_weight: self.weight,
            canary,
            primary,
            ..Window::default()
        };
        if let Some((requests, scenario, second)) = raw {
            let canary_model = scenario.canary_model(second).latency;
            let primary_model = scenario.primary.latency;
            for request in requests {
                if request.route < self.weight {
                    window
                        .canary_latencies_ms
                        .push(canary_model.quantile(request.latency));
                } else {
                    window
                        .primary_latencies_ms
                        .push(primary_model.quantile(request.latency));
                }
            }
        }
        self.history.push(window);
    }

    fn window_sum(&self, start: usize, end: usize) -> Window {
        let mut sum = Window::default();
        for window in &self.history[start.min(end)..end] {
            add(&mut sum.canary, &window.canary);
            add(&mut sum.primary, &window.primary);
            sum.canary_latencies_ms
                .extend_from_slice(&window.canary_latencies_ms);
            sum.primary_latencies_ms
                .extend_from_slice(&window.primary_latencies_ms);
            sum.canary_weight = window.canary_weight;
        }
        sum
    }

    fn result(&self, limit: i64) -> RunResult {
        let (end, end_s, by_verdict) = self.end.unwrap_or((RunEnd::Held, limit, false));
        RunResult {
            end,
            end_s: u32::try_from(end_s.max(0)).unwrap_or(u32::MAX),
            canary_requests: self.canary.requests,
            canary_errors: self.canary.errors,
            canary_slow: self.canary.slow,
            canary_requests_total: self.canary_total,
            by_verdict,
        }
    }
}

fn add(sum: &mut weir_analysis::VersionCounts, counts: &weir_analysis::VersionCounts) {
    sum.requests += counts.requests;
    sum.errors += counts.errors;
    sum.slow += counts.slow;
}

/// Runs every controller on the stream of `seed` for `scenario`, in lock-step, and returns one
/// result per controller (in order); sequential judges start from the seed's pre-run baseline
/// (`config.baseline_s`). Deterministic: the same arguments give the same results.
pub fn simulate(
    scenario: &Scenario,
    controllers: &[ControllerSpec],
    seed: u64,
    config: &SimConfig,
) -> Vec<RunResult> {
    let stream = RequestStream::new(seed, scenario.rate);
    let baseline = pre_run_baseline(scenario, seed, config.baseline_s);
    let mut lives: Vec<Live> = controllers
        .iter()
        .map(|controller| Live::new(controller, baseline))
        .collect();
    let mut requests = Vec::new();
    let mut tally = Tally::default();
    let limit = i64::from(config.max_duration_s);
    for t in 0..=limit {
        let horizon = config.telemetry.horizon(t);
        for live in &mut lives {
            live.decide(t, horizon);
        }
        if t == limit || lives.iter().all(|live| live.end.is_some()) {
            break;
        }
        let second = u32::try_from(t).unwrap_or(u32::MAX);
        stream.second(second, &mut requests);
        tally.fill(&requests, &scenario.conditions(second));
        let raw = config
            .latencies
            .then_some((requests.as_slice(), scenario, second));
        let exposed = scenario.onset_s().is_none_or(|onset| second >= onset);
        for live in lives.iter_mut().filter(|live| live.end.is_none()) {
            live.record(&tally, exposed, raw);
        }
    }
    lives.iter().map(|live| live.result(limit)).collect()
}

#[cfg(test)]
mod tests;
