//! The state machine: `step(spec, status, input, now) -> (status, effects, events, wake-up)`.
//!
//! It follows Flagger's phases and tick order (see `docs/STATE-MACHINE.md`) and adds what
//! Flagger's users ask for: manual promote/abort/pause/resume, retry of a failed revision without
//! editing anything, immediate rollback on a failing judge verdict between ticks, and holding the
//! weight instead of rolling back.
//!
//! The machine is pure. Time is the `now` argument; what the world looks like arrives as
//! [`Observations`]; what the world should look like leaves as [`Effect`]s, each of them desired
//! state, so applying one twice is harmless. Events leave separately because they are committed
//! with the status, before any effect is applied.
//!
//! Which hooks the engine must call before a tick is also decided here ([`needs`]), so gates are
//! evaluated in the same tick that needs them, as in Flagger.

mod commands;
mod outcome;
mod progress;
mod run;
mod steps;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::model::{
    CheckOutcome, CheckResult, Event, EventReason, Evidence, EvidenceDeadlineAction, FailureAction,
    FailureCounting, GateDecision, HookResult, HookType, JudgeVerdict, MatchRule, NoDataPolicy,
    Phase, Plan, RolloutSpec, RolloutStatus, ScheduleState, SessionAffinity, Severity, StoppedBy,
    TriggeredEntry, VerdictOutcome,
};
use crate::units::Weight;

pub use progress::EVIDENCE_RULE_JUDGE;
pub use steps::{PlannedStep, canary_steps, max_weight, schedule_entries};

// === inputs ===

/// One thing that happened to a rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Input {
    /// The timer fired; here is what the world looks like.
    Tick(Observations),
    /// A person (or a tool) asked for something.
    Command(CommandInput),
    /// A judge concluded something between ticks.
    Verdict(JudgeVerdict),
    /// The canary's definition changed.
    NewRevision(String),
    /// The target failed in a way retrying cannot fix (settings it cannot use, a program that
    /// does not exist): a run under way rolls back with this reason; otherwise it is recorded.
    TargetFailed(String),
    /// The rollout was deleted.
    Deleted,
}

/// What the engine observed for one tick. Results are looked up by name; a metric without a
/// result counts as no data, a gate without a result is closed, a rollout hook without a result
/// has failed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observations {
    /// The canary's current revision, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_revision: Option<String>,
    /// The primary's current revision, when known (used when the rollout is set up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_revision: Option<String>,
    /// Whether the primary is ready to serve.
    pub primary_ready: bool,
    /// Whether the canary is ready to serve.
    pub canary_ready: bool,
    /// Metric check results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckResult>,
    /// Webhook results (or gates opened by a person).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookResult>,
    /// What the judges watching the run have shown about the canary's health, for the
    /// evidence rule (`spec.analysis.evidence`); `None` when no judge watches the run, which
    /// the rule then does not hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<EvidenceReport>,
}

/// The judges' evidence about the canary's health, as the machine sees it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceReport {
    /// Whether the judges show, at their confidence, that the canary is no worse than the
    /// primary by more than the margin.
    pub healthy: bool,
    /// In words: what was shown, or what the run waits for and how long that should take
    /// ("waiting for evidence: 86 of ~400 canary requests; about 5m at 1.1 req/s").
    pub summary: String,
}

impl Observations {
    /// Both versions ready, nothing else: every metric reads as no data, gates are closed.
    pub fn ready(canary_revision: Option<String>) -> Observations {
        Observations {
            canary_revision,
            primary_revision: None,
            primary_ready: true,
            canary_ready: true,
            checks: Vec::new(),
            hooks: Vec::new(),
            evidence: None,
        }
    }

    /// A tick in which everything the spec asks about passes: the observations of a healthy run.
    pub fn healthy(spec: &RolloutSpec, canary_revision: Option<String>) -> Observations {
        let mut observations = Observations::ready(canary_revision);
        observations.checks = spec
            .analysis
            .metrics
            .iter()
            .map(|metric| CheckResult {
                name: metric.name.clone(),
                outcome: CheckOutcome::Pass,
                value: None,
                message: String::new(),
            })
            .collect();
        observations.hooks = spec
            .analysis
            .webhooks
            .iter()
            // A rollback hook "succeeding" asks for a rollback, so a healthy run has it refuse.
            .map(|hook| HookResult {
                name: hook.name.clone(),
                hook_type: hook.hook_type,
                success: hook.hook_type != HookType::Rollback,
                message: String::new(),
            })
            .collect();
        observations
    }
}

/// A command and who gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandInput {
    /// What was asked.
    pub command: Command,
    /// Who asked, for the history.
    pub actor: String,
}

/// Commands a person can give.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Command {
    /// Promote the canary now (also opens a confirm-promotion gate).
    Promote,
    /// Take the plan's next step now (a canary step or a schedule entry), past its pause, the
    /// evidence and any confirm-traffic-increase gate; the step's own pause then applies (Argo
    /// Rollouts' `promote` without `--full`). With no step left it promotes as [`Command::Promote`].
    /// The API's `{"command": "promote", "step": true}`, `weir promote NAME --step`.
    PromoteStep,
    /// Roll back now.
    Abort,
    /// Stop moving the weight; analysis continues.
    Pause,
    /// Continue: after a pause, at an untimed step pause, past a closed confirm-rollout gate, or
    /// out of Held (failed checks reset).
    Resume,
    /// Re-run the failed revision as it is.
    Retry,
    /// Promote without analysis at the next tick (this run, or the next one if none is running).
    SkipAnalysis,
    /// Open a gate for the current run: it passes whatever its hooks answer, until closed again
    /// or the run ends.
    OpenGate(GateRef),
    /// Close a gate for the current run: it holds whatever its hooks answer, until opened again
    /// or the run ends.
    CloseGate(GateRef),
    /// End the run where it stands (seed 004's stop): the weights stay as they are, or, with
    /// `rollback`, everything returns to the primary (the control variation).
    Stop {
        /// Return the audience to the primary as well.
        rollback: bool,
    },
}

impl Command {
    /// The commands without a payload (those the command line and the API name with a word).
    pub const SIMPLE: [Command; 7] = [
        Command::Promote,
        Command::Abort,
        Command::Pause,
        Command::Resume,
        Command::Retry,
        Command::SkipAnalysis,
        Command::Stop { rollback: false },
    ];

    /// The name used on the command line and in the API.
    pub fn as_str(&self) -> &'static str {
        match self {
            // One step is `promote` with `"step": true` in the API and `--step` on the command line.
            Command::Promote | Command::PromoteStep => "promote",
            Command::Abort => "abort",
            Command::Pause => "pause",
            Command::Resume => "resume",
            Command::Retry => "retry",
            Command::SkipAnalysis => "skip-analysis",
            Command::OpenGate(_) => "open-gate",
            Command::CloseGate(_) => "close-gate",
            Command::Stop { .. } => "stop",
        }
    }
}

/// Which gate a person opens or closes: a hook by name, or every hook of a gate type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GateRef {
    /// The gate type: confirm-rollout, confirm-traffic-increase or confirm-promotion. May be
    /// left out when `hook` names a hook; then it is that hook's type.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub hook_type: Option<HookType>,
    /// One hook, by name; absent: every hook of the type (and the type itself when it has
    /// none, so a person can hold a run at a gate no hook guards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
}

impl std::fmt::Display for GateRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.hook_type, &self.hook) {
            (Some(hook_type), Some(hook)) => write!(f, "the {hook_type} gate {hook}"),
            (Some(hook_type), None) => write!(f, "the {hook_type} gate"),
            (None, Some(hook)) => write!(f, "the gate {hook}"),
            (None, None) => f.write_str("a gate"),
        }
    }
}

// === outputs ===

/// Desired state for providers to apply. Applying an effect twice is harmless.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Effect {
    /// Set-up, before any traffic moves: make the primary exist and start it (a target that
    /// copies its workload creates the copy and its Services), without sending it traffic and
    /// without touching what serves today. The machine routes to the primary only once it is
    /// observed ready.
    Prepare,
    /// Route traffic so.
    SetRoute(Route),
    /// Scale the canary up (to serve) or down (to nothing).
    ScaleCanary(Scale),
    /// Make the primary run the canary's revision.
    Promote {
        /// The revision to promote.
        revision: String,
    },
    /// Undo what weir set up (deletion with `revertOnDeletion`).
    Finalize,
    /// Call the webhooks of a type; outcomes are only logged.
    RunHooks {
        /// Which hooks.
        hook_type: HookType,
        /// An id receivers can de-duplicate on.
        delivery_id: String,
        /// For `event` hooks: the event they hear of (its message, type and time go in the
        /// payload's metadata, as Flagger's do).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event: Option<Box<Event>>,
    },
    /// Tell people.
    Notify(Notification),
}

impl Effect {
    /// The delivery id of a one-shot effect (a hook call or a notification); `None` for desired
    /// state, which is re-applied from the status instead of being delivered once.
    pub fn delivery_id(&self) -> Option<&str> {
        match self {
            Effect::RunHooks { delivery_id, .. } => Some(delivery_id),
            Effect::Notify(notification) => Some(&notification.delivery_id),
            _ => None,
        }
    }
}

/// How traffic is split. `primary_weight + canary_weight` is always 100%.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    /// The primary's share.
    pub primary_weight: Weight,
    /// The canary's share.
    pub canary_weight: Weight,
    /// A share of requests copied to the canary, responses discarded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_weight: Option<Weight>,
    /// Requests matching any rule go to the canary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_rules: Vec<MatchRule>,
    /// Pin clients to the version they were first given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<SessionAffinity>,
}

impl Route {
    /// The route a status stands for: its weights, and the A/B rules while they are active. A
    /// target re-applies it after a restart; the machine emits it with every change.
    pub fn of(spec: &RolloutSpec, status: &RolloutStatus) -> Route {
        let match_rules = match (&spec.plan, status.match_active) {
            (Plan::AbTest(ab_test), true) => ab_test.match_rules.clone(),
            _ => Vec::new(),
        };
        Route {
            primary_weight: status.canary_weight.complement(),
            canary_weight: status.canary_weight,
            mirror_weight: status.mirror_weight,
            match_rules,
            session_affinity: spec.session_affinity.clone(),
        }
    }
}

/// Canary scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Scale {
    /// Running and serving.
    Up,
    /// Stopped.
    Down,
}

/// A message for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// How much it matters.
    pub severity: Severity,
    /// What happened and why.
    pub message: String,
    /// An id receivers can de-duplicate on.
    pub delivery_id: String,
    /// The phase after the step that sent it.
    #[serde(default)]
    pub phase: Phase,
    /// The canary's weight after that step.
    #[serde(default)]
    pub canary_weight: Weight,
    /// The run it is about.
    #[serde(default)]
    pub run: u64,
    /// The canary's revision, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Why: the checks, hooks or verdict behind it.
    #[serde(default, skip_serializing_if = "Evidence::is_empty")]
    pub evidence: Evidence,
}

/// The result of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    /// The next status.
    pub status: RolloutStatus,
    /// Desired state to apply, after the status and events are committed.
    pub effects: Vec<Effect>,
    /// History entries, committed with the status.
    pub events: Vec<Event>,
    /// When the machine next wants a tick; `None` once the rollout is gone.
    pub wake_at: Option<Timestamp>,
}

/// A command that does not apply in the current phase. Nothing changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("cannot {command} in phase {phase}: {reason}")]
pub struct CommandRejected {
    /// The command.
    pub command: &'static str,
    /// The phase it met.
    pub phase: Phase,
    /// Why it does not apply.
    pub reason: String,
}

/// What the engine must gather before the next tick.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Needs {
    /// Webhook types to call (only those configured in the spec).
    pub hooks: Vec<HookType>,
    /// Whether metric checks are evaluated.
    pub metrics: bool,
}

// === step ===

/// Advances a rollout by one input. Pure: the same arguments always give the same result.
pub fn step(
    spec: &RolloutSpec,
    status: &RolloutStatus,
    input: &Input,
    now: Timestamp,
) -> Result<Transition, CommandRejected> {
    let mut machine = Machine {
        spec,
        now,
        status: status.clone(),
        effects: Vec::new(),
        events: Vec::new(),
        wake_now: false,
        passed: Evidence::default(),
        evidence: None,
    };
    match input {
        Input::Tick(observations) => machine.tick(observations),
        Input::Command(command) => machine.command(command)?,
        Input::Verdict(verdict) => machine.verdict(verdict),
        Input::NewRevision(revision) => machine.new_revision(revision),
        Input::TargetFailed(reason) => machine.target_failed(reason),
        Input::Deleted => machine.deleted(),
    }
    Ok(machine.finish())
}

/// The hooks and checks the engine should gather for the next tick, given the canary revision
/// it sees.
pub fn needs(spec: &RolloutSpec, status: &RolloutStatus, observed_revision: Option<&str>) -> Needs {
    let mut hooks = Vec::new();
    let mut metrics = false;
    if !spec.suspend {
        match status.phase {
            phase
                if phase.is_idle()
                    && observed_revision.is_some_and(|revision| starts_run(status, revision)) =>
            {
                hooks.push(HookType::ConfirmRollout);
            }
            Phase::Waiting => hooks.push(HookType::ConfirmRollout),
            Phase::Progressing | Phase::WaitingPromotion => {
                hooks.push(HookType::Rollback);
                if status.pre_rollout_passed {
                    hooks.push(HookType::Rollout);
                    metrics = true;
                } else {
                    hooks.push(HookType::PreRollout);
                }
                if steps::plan_exhausted(spec, status) {
                    hooks.push(HookType::ConfirmPromotion);
                } else if steps::next_move_raises_weight(spec, status) {
                    hooks.push(HookType::ConfirmTrafficIncrease);
                }
            }
            Phase::Held => hooks.push(HookType::Rollback),
            _ => {}
        }
    }
    hooks.retain(|hook_type| spec.analysis.has_hooks(*hook_type));
    // A gate whose every hook a person decided in this run needs no call (outside a run the
    // decisions are stale: the next run starts without them).
    if status.phase.in_run() {
        hooks.retain(|hook_type| {
            !hook_type.is_gate()
                || spec
                    .analysis
                    .hooks_of(*hook_type)
                    .any(|hook| person_decision(status, *hook_type, Some(&hook.name)).is_none())
        });
    }
    Needs { hooks, metrics }
}

/// A person's decision in this run about one hook of a gate type (`Some(name)`: about that
/// hook, or else about the whole type) or about the type itself (`None`).
fn person_decision<'s>(
    status: &'s RolloutStatus,
    hook_type: HookType,
    hook: Option<&str>,
) -> Option<&'s GateDecision> {
    let of_type = || {
        status
            .gates
            .iter()
            .filter(move |decision| decision.hook_type == hook_type)
    };
    hook.and_then(|name| of_type().find(|decision| decision.hook.as_deref() == Some(name)))
        .or_else(|| of_type().find(|decision| decision.hook.is_none()))
}

/// When a rollout restored after a restart wants its first tick: one interval after its last
/// progress (a step is never taken early, nor twice), but no later than its next schedule
/// entry - an entry's own time guards it, and the ones missed while nothing ran are due at
/// once - and never before `now`.
pub fn resume_at(spec: &RolloutSpec, status: &RolloutStatus, now: Timestamp) -> Timestamp {
    let interval =
        SignedDuration::try_from(spec.analysis.interval.get()).unwrap_or(SignedDuration::MAX);
    let mut at = status
        .last_progress_at
        .and_then(|at| at.checked_add(interval).ok())
        .unwrap_or(now);
    if status.phase == Phase::Progressing
        && let Some(next) = steps::next_unapplied_entry_time(spec, status)
    {
        at = at.min(next);
    }
    at.max(now)
}

/// Where a schedule stands in seed 004's words, from weir's phase and the entries fired.
pub fn schedule_state(spec: &RolloutSpec, status: &RolloutStatus) -> Option<ScheduleState> {
    if !matches!(spec.plan, Plan::Schedule(_)) {
        return None;
    }
    if status.stopped_by.is_some() && !status.phase.in_run() {
        return Some(ScheduleState::Stopped);
    }
    let all_fired = !status.triggered.is_empty()
        && status.triggered.len() >= steps::schedule_entries(spec).len();
    Some(match status.phase {
        Phase::Succeeded | Phase::Promoting | Phase::Finalising => ScheduleState::Finished,
        _ if all_fired => ScheduleState::Finished,
        _ if status.triggered.is_empty() => ScheduleState::Waiting,
        _ => ScheduleState::Running,
    })
}

/// Whether seeing `revision` while idle starts a run.
fn starts_run(status: &RolloutStatus, revision: &str) -> bool {
    let is_primary = status.primary_revision.as_deref() == Some(revision);
    // A revision whose run failed or was stopped runs again only when asked (`weir retry`).
    let is_ended = matches!(status.phase, Phase::Failed | Phase::Stopped)
        && status.canary_revision.as_deref() == Some(revision);
    !is_primary && !is_ended
}

struct Machine<'a> {
    spec: &'a RolloutSpec,
    now: Timestamp,
    status: RolloutStatus,
    effects: Vec<Effect>,
    events: Vec<Event>,
    /// Ask for a tick at once (a person opened the gate the run waits at).
    wake_now: bool,
    /// The checks and hooks of this tick's passing analysis: the evidence a step is taken on.
    passed: Evidence,
    /// This tick's report of the judges, for the evidence rule.
    evidence: Option<EvidenceReport>,
}

/// How a gate answered in one tick.
struct GateAnswer {
    open: bool,
    /// The answers considered (a person's decisions appear as hook results with their actor).
    evidence: Evidence,
    /// The hooks (not persons) that kept it closed, for alerts; a hook without an answer is
    /// among them.
    refusals: Vec<HookResult>,
}

/// Why a run fails, and whether `onFailure: hold` may keep it instead.
enum Failure {
    /// The analysis failed (threshold reached, judge verdict): holdable.
    Analysis,
    /// A rollback hook, a person, the progress deadline or the target: always rolls back.
    Forced(StoppedBy),
}

impl Failure {
    fn stopped_by(&self) -> StoppedBy {
        match self {
            Failure::Analysis => StoppedBy::Judge,
            Failure::Forced(by) => *by,
        }
    }
}

impl Machine<'_> {
    fn finish(mut self) -> Transition {
        self.status.schedule_state = schedule_state(self.spec, &self.status);
        // Event hooks hear of every event, as Flagger's hear of every Kubernetes event it emits.
        if self.spec.analysis.has_hooks(HookType::Event) {
            let calls: Vec<Effect> = self
                .events
                .iter()
                .enumerate()
                .map(|(index, event)| Effect::RunHooks {
                    hook_type: HookType::Event,
                    delivery_id: self.delivery_id(&format!("event-{index}")),
                    event: Some(Box::new(event.clone())),
                })
                .collect();
            self.effects.extend(calls);
        }
        let wake_at = if self.wake_now && self.status.phase != Phase::Terminated {
            Some(self.now)
        } else {
            self.wake_at()
        };
        Transition {
            status: self.status,
            effects: self.effects,
            events: self.events,
            wake_at,
        }
    }

    fn wake_at(&self) -> Option<Timestamp> {
        if self.status.phase == Phase::Terminated {
            return None;
        }
        let mut wake = self.after(self.spec.analysis.interval.get());
        if let Some(until) = self.status.pause_until {
            wake = wake.min(until.max(self.now));
        }
        // A schedule's entries are due at their times: each fires then, not an interval after.
        if self.status.phase == Phase::Progressing
            && let Some(next) = steps::next_unapplied_entry_time(self.spec, &self.status)
        {
            wake = wake.min(next.max(self.now));
        }
        Some(wake)
    }

    fn after(&self, duration: std::time::Duration) -> Timestamp {
        let signed = SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX);
        self.now.checked_add(signed).unwrap_or(Timestamp::MAX)
    }

    // --- recording ---

    fn event(&mut self, reason: EventReason, message: impl Into<String>, mut evidence: Evidence) {
        let message = message.into();
        // A step or a promotion taken on passing checks records them, so the history shows the
        // values each decision rested on.
        if matches!(reason, EventReason::Advanced | EventReason::Promoting) && evidence.is_empty() {
            evidence = std::mem::take(&mut self.passed);
        }
        self.status.message = message.clone();
        self.events.push(Event {
            at: self.now,
            run: self.status.run,
            reason,
            phase: self.status.phase,
            canary_weight: self.status.canary_weight,
            message,
            evidence,
        });
    }

    /// Records an event only when the situation changed, so a condition that lasts many ticks
    /// (a closed gate, a canary that is not ready) is recorded once, not every tick.
    fn note(&mut self, reason: EventReason, message: String, evidence: Evidence) {
        if self.status.message != message {
            self.event(reason, message, evidence);
        }
    }

    fn set_phase(&mut self, phase: Phase) {
        if self.status.phase != phase {
            self.status.phase = phase;
            self.status.last_transition_at = Some(self.now);
        }
    }

    fn progressed(&mut self) {
        self.status.last_progress_at = Some(self.now);
    }

    /// An id for a hook call or notification that is the same however often the step is
    /// replayed (so receivers can de-duplicate) and different for every transition.
    fn delivery_id(&self, what: &str) -> String {
        format!(
            "run-{}/{}/{}/{what}",
            self.status.run,
            self.status.phase,
            self.now.as_millisecond()
        )
    }

    fn apply_route(&mut self) {
        self.effects
            .push(Effect::SetRoute(Route::of(self.spec, &self.status)));
    }

    /// Everything back to the primary: the canary at 0%, no mirror, no match rules, and the
    /// route that says so. Set-up, rollback, finalising a promotion and deletion all end here.
    fn route_all_to_primary(&mut self) {
        self.status.canary_weight = Weight::ZERO;
        self.status.mirror_weight = None;
        self.status.match_active = false;
        self.apply_route();
    }

    fn notify(&mut self, severity: Severity, message: String, evidence: &Evidence) {
        self.notify_as("notify", severity, message, evidence);
    }

    /// A notification whose delivery id ends in `what` (unique within the step).
    fn notify_as(&mut self, what: &str, severity: Severity, message: String, evidence: &Evidence) {
        let delivery_id = self.delivery_id(what);
        self.effects.push(Effect::Notify(Notification {
            severity,
            message,
            delivery_id,
            phase: self.status.phase,
            canary_weight: self.status.canary_weight,
            run: self.status.run,
            revision: self.status.canary_revision.clone(),
            evidence: evidence.clone(),
        }));
    }

    fn run_hooks(&mut self, hook_type: HookType) {
        if self.spec.analysis.has_hooks(hook_type) {
            let delivery_id = self.delivery_id(hook_type.as_str());
            self.effects.push(Effect::RunHooks {
                hook_type,
                delivery_id,
                event: None,
            });
        }
    }
}

/// A hook's answer in words, for alerts.
fn answer_of(result: &HookResult) -> String {
    if result.message.is_empty() {
        "no".into()
    } else {
        result.message.clone()
    }
}

#[cfg(test)]
mod tests;
