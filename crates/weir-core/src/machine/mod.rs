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

mod steps;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::model::{
    CheckOutcome, CheckResult, Event, EventReason, Evidence, FailureAction, FailureCounting,
    GateDecision, HookResult, HookType, JudgeVerdict, MatchRule, NoDataPolicy, Phase, Plan,
    RolloutSpec, RolloutStatus, SessionAffinity, Severity, VerdictOutcome,
};
use crate::units::Weight;

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
}

impl Command {
    /// The commands without a payload (those the command line and the API name with a word).
    pub const SIMPLE: [Command; 6] = [
        Command::Promote,
        Command::Abort,
        Command::Pause,
        Command::Resume,
        Command::Retry,
        Command::SkipAnalysis,
    ];

    /// The name used on the command line and in the API.
    pub fn as_str(&self) -> &'static str {
        match self {
            Command::Promote => "promote",
            Command::Abort => "abort",
            Command::Pause => "pause",
            Command::Resume => "resume",
            Command::Retry => "retry",
            Command::SkipAnalysis => "skip-analysis",
            Command::OpenGate(_) => "open-gate",
            Command::CloseGate(_) => "close-gate",
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
    };
    match input {
        Input::Tick(observations) => machine.tick(observations),
        Input::Command(command) => machine.command(command)?,
        Input::Verdict(verdict) => machine.verdict(verdict),
        Input::NewRevision(revision) => machine.new_revision(revision),
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

/// Whether seeing `revision` while idle starts a run.
fn starts_run(status: &RolloutStatus, revision: &str) -> bool {
    let is_primary = status.primary_revision.as_deref() == Some(revision);
    let is_failed =
        status.phase == Phase::Failed && status.canary_revision.as_deref() == Some(revision);
    !is_primary && !is_failed
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
    /// A rollback hook, a person, or the progress deadline: always rolls back.
    Forced,
}

impl Machine<'_> {
    fn finish(mut self) -> Transition {
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
        let match_rules = match (&self.spec.plan, self.status.match_active) {
            (Plan::AbTest(ab_test), true) => ab_test.match_rules.clone(),
            _ => Vec::new(),
        };
        self.effects.push(Effect::SetRoute(Route {
            primary_weight: self.status.canary_weight.complement(),
            canary_weight: self.status.canary_weight,
            mirror_weight: self.status.mirror_weight,
            match_rules,
            session_affinity: self.spec.session_affinity.clone(),
        }));
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

    // --- ticks ---

    fn tick(&mut self, observations: &Observations) {
        if self.spec.suspend {
            return;
        }
        match self.status.phase {
            Phase::Initializing => self.initialize(observations),
            Phase::Initialized | Phase::Succeeded | Phase::Failed => {
                if let Some(revision) = &observations.canary_revision {
                    self.consider_revision(revision, &observations.hooks);
                }
            }
            Phase::Waiting => self.waiting_tick(observations),
            Phase::Progressing | Phase::WaitingPromotion => self.progress_tick(observations),
            Phase::Promoting => self.promoting_tick(observations),
            Phase::Finalising => self.finalising_tick(),
            Phase::Held => self.held_tick(observations),
            Phase::Terminated => {}
        }
    }

    /// Sets up routing with the primary taking everything. As in Flagger, what runs at set-up is
    /// the primary: its revision is the promoted one.
    fn initialize(&mut self, observations: &Observations) {
        self.status.primary_revision = observations
            .primary_revision
            .clone()
            .or_else(|| observations.canary_revision.clone());
        self.status.canary_weight = Weight::ZERO;
        self.status.mirror_weight = None;
        self.status.match_active = false;
        self.apply_route();
        self.effects.push(Effect::ScaleCanary(Scale::Down));
        self.set_phase(Phase::Initialized);
        let primary = self
            .status
            .primary_revision
            .clone()
            .unwrap_or_else(|| "unknown".into());
        self.event(
            EventReason::Initialized,
            format!("initialized: the primary (revision {primary}) serves all traffic"),
            Evidence::default(),
        );
    }

    fn consider_revision(&mut self, revision: &str, hooks: &[HookResult]) {
        if starts_run(&self.status, revision) {
            self.start_run(revision.to_string(), hooks);
        }
    }

    fn reset_run(&mut self, revision: String) {
        let status = &mut self.status;
        status.run += 1;
        status.canary_revision = Some(revision);
        status.canary_weight = Weight::ZERO;
        status.mirror_weight = None;
        status.match_active = false;
        status.steps_taken = 0;
        status.iterations = 0;
        status.failed_checks = 0;
        status.last_failure = Evidence::default();
        status.pre_rollout_passed = false;
        status.mirror_done = false;
        status.switched = false;
        status.paused = false;
        status.waiting_for_resume = false;
        status.pause_until = None;
        status.gates.clear();
        status.alerted_hooks.clear();
        status.run_started_at = Some(self.now);
        status.last_progress_at = Some(self.now);
    }

    fn start_run(&mut self, revision: String, hooks: &[HookResult]) {
        self.reset_run(revision);
        if self.spec.analysis.has_hooks(HookType::ConfirmRollout) {
            let answer = self.gate(HookType::ConfirmRollout, hooks);
            if !answer.open {
                self.set_phase(Phase::Waiting);
                self.alert_closed_gate(&answer.refusals);
                let revision = self.status.canary_revision.clone().unwrap_or_default();
                self.event(
                    EventReason::WaitingForApproval,
                    format!(
                        "revision {revision} waits for confirm-rollout (or `weir gate open`, `weir resume`)"
                    ),
                    answer.evidence,
                );
                return;
            }
        }
        self.begin_progressing(Evidence::default());
    }

    fn begin_progressing(&mut self, evidence: Evidence) {
        self.set_phase(Phase::Progressing);
        self.progressed();
        self.effects.push(Effect::ScaleCanary(Scale::Up));
        self.apply_route();
        let revision = self.status.canary_revision.clone().unwrap_or_default();
        self.event(
            EventReason::RunStarted,
            format!("run {} started for revision {revision}", self.status.run),
            evidence,
        );
    }

    /// Whether all hooks of a gate type said yes (a type with no hooks is open). A person's
    /// decision in this run about a hook (or its whole type) replaces that hook's answer; a
    /// decision about a type without hooks is the gate's answer.
    fn gate(&self, hook_type: HookType, hooks: &[HookResult]) -> GateAnswer {
        let mut answer = GateAnswer {
            open: true,
            evidence: Evidence::default(),
            refusals: Vec::new(),
        };
        let mut configured = false;
        for hook in self.spec.analysis.hooks_of(hook_type) {
            configured = true;
            if let Some(decision) = person_decision(&self.status, hook_type, Some(&hook.name)) {
                answer.open &= decision.open;
                answer.evidence.hooks.push(decision.as_result(&hook.name));
                answer.evidence.actor = Some(decision.actor.clone());
                continue;
            }
            match hooks
                .iter()
                .find(|result| result.hook_type == hook_type && result.name == hook.name)
            {
                Some(result) => {
                    answer.open &= result.success;
                    answer.evidence.hooks.push(result.clone());
                    if !result.success {
                        answer.refusals.push(result.clone());
                    }
                }
                None => {
                    answer.open = false;
                    answer.refusals.push(HookResult {
                        name: hook.name.clone(),
                        hook_type,
                        success: false,
                        message: "no result".into(),
                    });
                }
            }
        }
        if !configured && let Some(decision) = person_decision(&self.status, hook_type, None) {
            answer.open = decision.open;
            answer.evidence.actor = Some(decision.actor.clone());
        }
        answer
    }

    /// Warns, once per run per hook, about hooks that failed or keep a gate closed (unless the
    /// hook says `muteAlert: true`). The notification's evidence is the hook's result.
    fn alert_hooks(&mut self, results: &[HookResult], describe: impl Fn(&HookResult) -> String) {
        for result in results {
            let muted = self
                .spec
                .analysis
                .webhooks
                .iter()
                .find(|hook| hook.name == result.name && hook.hook_type == result.hook_type)
                .is_none_or(|hook| hook.mute_alert);
            if muted || self.status.alerted_hooks.contains(&result.name) {
                continue;
            }
            self.status.alerted_hooks.push(result.name.clone());
            let evidence = Evidence {
                hooks: vec![result.clone()],
                ..Evidence::default()
            };
            let message = describe(result);
            self.notify_as(
                &format!("alert/{}", result.name),
                Severity::Warn,
                message,
                &evidence,
            );
        }
    }

    /// Alerts for the hooks that keep a gate closed (see [`Machine::alert_hooks`]).
    fn alert_closed_gate(&mut self, refusals: &[HookResult]) {
        let run = self.status.run;
        let weight = self.status.canary_weight;
        let revision = self.status.canary_revision.clone().unwrap_or_default();
        self.alert_hooks(refusals, |result| {
            let answered = answer_of(result);
            match result.hook_type {
                HookType::ConfirmRollout => format!(
                    "revision {revision} waits for approval: confirm-rollout gate {} answered {answered} (`weir gate open` starts the run)",
                    result.name
                ),
                HookType::ConfirmTrafficIncrease => format!(
                    "run {run} holds the canary at {weight}: confirm-traffic-increase gate {} answered {answered} (`weir gate open` lets the weight move)",
                    result.name
                ),
                _ => format!(
                    "run {run} waits for promotion approval: {} gate {} answered {answered} (`weir gate open` or `weir promote` promotes)",
                    result.hook_type, result.name
                ),
            }
        });
    }

    fn waiting_tick(&mut self, observations: &Observations) {
        if let Some(revision) = &observations.canary_revision
            && self.status.canary_revision.as_ref() != Some(revision)
        {
            self.status.canary_revision = Some(revision.clone());
        }
        let answer = self.gate(HookType::ConfirmRollout, &observations.hooks);
        if answer.open {
            self.begin_progressing(answer.evidence);
        } else {
            self.alert_closed_gate(&answer.refusals);
        }
    }

    fn progress_tick(&mut self, observations: &Observations) {
        // A new revision mid-run: everything back to the primary, and start over.
        if let Some(revision) = &observations.canary_revision
            && self.status.canary_revision.as_ref() != Some(revision)
        {
            self.restart_run(revision.clone());
            return;
        }
        if !observations.canary_ready {
            if self.stalled() {
                let message = format!(
                    "the canary did not become ready within the progress deadline ({})",
                    self.spec.analysis.progress_deadline
                );
                self.fail(Failure::Forced, message, Evidence::default());
            } else {
                self.note(
                    EventReason::CanaryNotReady,
                    "waiting for the canary to be ready".into(),
                    Evidence::default(),
                );
            }
            return;
        }
        if self.spec.skip_analysis || self.status.skip_analysis {
            self.promote("analysis skipped: promoting".into(), Evidence::default());
            return;
        }
        let rollback_requests: Vec<HookResult> = observations
            .hooks
            .iter()
            .filter(|hook| hook.hook_type == HookType::Rollback && hook.success)
            .filter(|hook| {
                self.spec
                    .analysis
                    .hooks_of(HookType::Rollback)
                    .any(|spec| spec.name == hook.name)
            })
            .cloned()
            .collect();
        if !rollback_requests.is_empty() {
            let names: Vec<&str> = rollback_requests
                .iter()
                .map(|hook| hook.name.as_str())
                .collect();
            let message = format!("rollback requested by webhook {}", names.join(", "));
            self.fail(
                Failure::Forced,
                message,
                Evidence {
                    hooks: rollback_requests,
                    ..Evidence::default()
                },
            );
            return;
        }
        // Flagger compares the count with the threshold at the start of the next tick.
        if self.status.failed_checks >= self.spec.analysis.threshold {
            let message = format!(
                "{} failed checks reached the threshold of {}",
                self.status.failed_checks, self.spec.analysis.threshold
            );
            let evidence = std::mem::take(&mut self.status.last_failure);
            self.fail(Failure::Analysis, message, evidence);
            return;
        }
        // A person holding the weight at a gate is not a stall, as a pause is not.
        if self.stalled() && !self.traffic_held_by_person() {
            let message = format!(
                "no progress for longer than the progress deadline ({})",
                self.spec.analysis.progress_deadline
            );
            self.fail(Failure::Forced, message, Evidence::default());
            return;
        }
        if !self.status.pre_rollout_passed {
            // First tick of the run: pre-rollout hooks, then the first step; metrics start at
            // the next tick, as in Flagger.
            let answer = self.gate(HookType::PreRollout, &observations.hooks);
            if !answer.open {
                self.alert_hooks(&answer.refusals, |result| {
                    format!(
                        "pre-rollout webhook {} failed: {} (a failed check; the run does not advance until it passes)",
                        result.name,
                        answer_of(result)
                    )
                });
                self.count_failure("pre-rollout hooks failed".into(), answer.evidence);
                return;
            }
            self.status.pre_rollout_passed = true;
        } else if !self.analyse(observations) {
            return;
        }
        if self.status.paused {
            return;
        }
        self.advance(&observations.hooks);
    }

    /// Evaluates rollout hooks and metric checks. Returns whether the plan may advance.
    fn analyse(&mut self, observations: &Observations) -> bool {
        let mut evidence = Evidence::default();
        let mut failures = Vec::new();
        let mut failed_hooks = Vec::new();
        for hook in self.spec.analysis.hooks_of(HookType::Rollout) {
            let result = observations
                .hooks
                .iter()
                .find(|result| result.hook_type == HookType::Rollout && result.name == hook.name)
                .cloned()
                .unwrap_or_else(|| HookResult {
                    name: hook.name.clone(),
                    hook_type: HookType::Rollout,
                    success: false,
                    message: "no result".into(),
                });
            if !result.success {
                failures.push(format!("webhook {} failed", hook.name));
                failed_hooks.push(result.clone());
            }
            evidence.hooks.push(result);
        }
        self.alert_hooks(&failed_hooks, |result| {
            format!(
                "rollout webhook {} failed: {} (counted as a failed check)",
                result.name,
                answer_of(result)
            )
        });
        let mut no_data = Vec::new();
        for metric in &self.spec.analysis.metrics {
            let result = observations
                .checks
                .iter()
                .find(|check| check.name == metric.name)
                .cloned()
                .unwrap_or_else(|| CheckResult {
                    name: metric.name.clone(),
                    outcome: CheckOutcome::NoData,
                    value: None,
                    message: "no result".into(),
                });
            match (result.outcome, self.spec.analysis.no_data) {
                (CheckOutcome::Pass, _) | (CheckOutcome::NoData, NoDataPolicy::Ignore) => {}
                (CheckOutcome::Fail, _) => failures.push(match result.value {
                    Some(value) => format!("{} = {value} is out of range", metric.name),
                    None => format!("{} failed", metric.name),
                }),
                (CheckOutcome::NoData, NoDataPolicy::Fail) => {
                    failures.push(format!("{} returned no data", metric.name));
                }
                (CheckOutcome::NoData, NoDataPolicy::Hold) => no_data.push(metric.name.clone()),
            }
            evidence.checks.push(result);
        }
        if !failures.is_empty() {
            self.count_failure(failures.join("; "), evidence);
            return false;
        }
        if self.spec.analysis.failure_counting == FailureCounting::Consecutive {
            self.status.failed_checks = 0;
        }
        if !no_data.is_empty() {
            self.note(
                EventReason::NoData,
                format!("holding the weight: no data yet for {}", no_data.join(", ")),
                evidence,
            );
            return false;
        }
        self.passed = evidence;
        true
    }

    fn count_failure(&mut self, message: String, evidence: Evidence) {
        self.status.failed_checks += 1;
        self.status.last_failure = evidence.clone();
        // A counted failure moves the run towards its verdict (the threshold bounds them), so it
        // is progress: the deadline is for runs that cannot be judged at all.
        self.progressed();
        let message = format!(
            "{message} (failed checks: {} of {})",
            self.status.failed_checks, self.spec.analysis.threshold
        );
        self.event(EventReason::ChecksFailed, message, evidence);
    }

    /// Whether the run has gone without progress for longer than the progress deadline while
    /// nothing legitimate (a pause, a person, a future schedule entry) holds it.
    fn stalled(&self) -> bool {
        let status = &self.status;
        if status.phase != Phase::Progressing || status.paused || status.waiting_for_resume {
            return false;
        }
        let Some(mut reference) = status.last_progress_at else {
            return false;
        };
        if let Some(until) = status.pause_until {
            if self.now < until {
                return false;
            }
            reference = reference.max(until);
        }
        if let Plan::Schedule(_) = &self.spec.plan {
            match steps::next_unapplied_entry_time(self.spec, status) {
                Some(due) if due <= self.now => reference = reference.max(due),
                // Waiting for a future entry is not a stall.
                Some(_) => return false,
                None => {}
            }
        }
        let deadline = self.spec.analysis.progress_deadline.get();
        let elapsed = self.now.duration_since(reference);
        elapsed > SignedDuration::try_from(deadline).unwrap_or(SignedDuration::MAX)
    }

    /// Whether a person closed the confirm-traffic-increase gate that the plan's next move
    /// waits for: waiting on a person, like a pause, not a stall.
    fn traffic_held_by_person(&self) -> bool {
        if !steps::next_move_raises_weight(self.spec, &self.status) {
            return false;
        }
        let hook_type = HookType::ConfirmTrafficIncrease;
        let mut hooks = self.spec.analysis.hooks_of(hook_type).peekable();
        if hooks.peek().is_none() {
            return person_decision(&self.status, hook_type, None).is_some_and(|d| !d.open);
        }
        hooks.any(|hook| {
            person_decision(&self.status, hook_type, Some(&hook.name)).is_some_and(|d| !d.open)
        })
    }

    fn restart_run(&mut self, revision: String) {
        let previous = self.status.canary_revision.clone().unwrap_or_default();
        self.reset_run(revision.clone());
        self.set_phase(Phase::Progressing);
        self.apply_route();
        self.effects.push(Effect::ScaleCanary(Scale::Up));
        self.event(
            EventReason::RunRestarted,
            format!("revision changed from {previous} to {revision} mid-run: all traffic back to the primary, run {} starts over", self.status.run),
            Evidence::default(),
        );
    }

    // --- moving along the plan ---

    fn advance(&mut self, hooks: &[HookResult]) {
        match &self.spec.plan {
            Plan::Canary(canary) => {
                if let Some(mirror) = canary.mirror_weight
                    && !self.status.mirror_done
                    && self.status.steps_taken == 0
                {
                    self.status.mirror_weight = Some(mirror);
                    self.status.mirror_done = true;
                    self.progressed();
                    self.apply_route();
                    self.event(
                        EventReason::Advanced,
                        format!("mirroring {mirror} of traffic to the canary for one interval"),
                        Evidence::default(),
                    );
                    return;
                }
                self.advance_steps(hooks);
            }
            Plan::Schedule(_) => self.advance_schedule(hooks),
            Plan::BlueGreen(plan) => self.advance_iterations(plan.iterations, hooks),
            Plan::Mirror(plan) => self.advance_iterations(plan.iterations, hooks),
            Plan::AbTest(plan) => self.advance_iterations(plan.iterations, hooks),
        }
    }

    fn advance_steps(&mut self, hooks: &[HookResult]) {
        if self.status.waiting_for_resume {
            return;
        }
        if let Some(until) = self.status.pause_until {
            if self.now < until {
                return;
            }
            self.status.pause_until = None;
            self.progressed();
        }
        let planned = steps::weight_steps(self.spec);
        let Some(next) = planned.get(self.status.steps_taken as usize).cloned() else {
            self.at_end_of_plan(hooks);
            return;
        };
        if !self.traffic_increase_allowed(hooks) {
            return;
        }
        self.status.canary_weight = next.weight;
        self.status.mirror_weight = None;
        self.status.steps_taken += 1;
        self.progressed();
        self.apply_route();
        let mut message = format!(
            "canary weight {} (step {} of {})",
            next.weight,
            self.status.steps_taken,
            planned.len()
        );
        match next.pause {
            Some(Some(duration)) => {
                self.status.pause_until = Some(self.after(duration.get()));
                message.push_str(&format!(", pausing for {duration}"));
            }
            Some(None) => {
                self.status.waiting_for_resume = true;
                message.push_str(", paused until `weir resume`");
            }
            None => {}
        }
        self.event(EventReason::Advanced, message, Evidence::default());
    }

    fn advance_schedule(&mut self, hooks: &[HookResult]) {
        let entries = schedule_entries(self.spec);
        let taken = self.status.steps_taken as usize;
        let due = entries
            .iter()
            .enumerate()
            .skip(taken)
            .take_while(|(_, entry)| entry.0 <= self.now)
            .last()
            .map(|(index, entry)| (index, entry.1));
        match due {
            Some((index, weight)) => {
                if !self.traffic_increase_allowed(hooks) {
                    return;
                }
                self.status.canary_weight = weight;
                self.status.steps_taken = index as u32 + 1;
                self.progressed();
                self.apply_route();
                let skipped = index - taken;
                let catch_up = if skipped > 0 {
                    format!(" ({skipped} earlier entries were overdue)")
                } else {
                    String::new()
                };
                self.event(
                    EventReason::Advanced,
                    format!(
                        "scheduled weight {weight} (entry {} of {}){catch_up}",
                        index + 1,
                        entries.len()
                    ),
                    Evidence::default(),
                );
            }
            None if taken >= entries.len() => {
                if self.status.canary_weight == Weight::FULL {
                    self.at_end_of_plan(hooks);
                } else if self.status.phase != Phase::WaitingPromotion {
                    self.set_phase(Phase::WaitingPromotion);
                    let weight = self.status.canary_weight;
                    self.event(
                        EventReason::WaitingPromotion,
                        format!(
                            "schedule complete at {weight}: `weir promote` finishes the rollout"
                        ),
                        Evidence::default(),
                    );
                }
            }
            None => {}
        }
    }

    fn advance_iterations(&mut self, required: u32, hooks: &[HookResult]) {
        if self.status.iterations < required {
            self.status.iterations += 1;
            let changed = match &self.spec.plan {
                Plan::AbTest(_) => !std::mem::replace(&mut self.status.match_active, true),
                Plan::Mirror(mirror) => {
                    let weight = Some(mirror.mirror_weight.unwrap_or(Weight::FULL));
                    std::mem::replace(&mut self.status.mirror_weight, weight) != weight
                }
                _ => false,
            };
            if changed {
                self.apply_route();
            }
            self.progressed();
            self.event(
                EventReason::Advanced,
                format!("iteration {} of {required}", self.status.iterations),
                Evidence::default(),
            );
            return;
        }
        self.at_end_of_plan(hooks);
    }

    fn traffic_increase_allowed(&mut self, hooks: &[HookResult]) -> bool {
        let answer = self.gate(HookType::ConfirmTrafficIncrease, hooks);
        if !answer.open {
            self.alert_closed_gate(&answer.refusals);
            self.note(
                EventReason::GateClosed,
                format!(
                    "confirm-traffic-increase holds the weight at {}",
                    self.status.canary_weight
                ),
                answer.evidence,
            );
        } else if answer.evidence.actor.is_some() {
            // The step a person let through records who did.
            self.passed.actor = answer.evidence.actor;
        }
        answer.open
    }

    fn at_end_of_plan(&mut self, hooks: &[HookResult]) {
        let GateAnswer {
            open,
            evidence,
            refusals,
        } = self.gate(HookType::ConfirmPromotion, hooks);
        if !open {
            self.alert_closed_gate(&refusals);
            if self.status.phase != Phase::WaitingPromotion {
                self.set_phase(Phase::WaitingPromotion);
                self.event(
                    EventReason::WaitingPromotion,
                    "waiting for confirm-promotion (or `weir gate open`, `weir promote`)",
                    evidence,
                );
            }
            return;
        }
        // Blue/green and mirror runs switch all traffic to the canary for one interval first.
        let switches = matches!(self.spec.plan, Plan::BlueGreen(_) | Plan::Mirror(_));
        if switches && !self.status.switched {
            self.status.switched = true;
            self.status.canary_weight = Weight::FULL;
            self.status.mirror_weight = None;
            self.set_phase(Phase::Progressing);
            self.progressed();
            self.apply_route();
            self.event(
                EventReason::Advanced,
                "switched all traffic to the canary",
                evidence,
            );
            return;
        }
        self.promote("analysis passed: promoting".into(), evidence);
    }

    fn promote(&mut self, message: String, evidence: Evidence) {
        let revision = self.status.canary_revision.clone().unwrap_or_default();
        self.effects.push(Effect::Promote {
            revision: revision.clone(),
        });
        // From here on the primary runs the canary's revision (providers read this field to know
        // which definition the primary runs).
        self.status.primary_revision = Some(revision);
        self.status.paused = false;
        self.status.waiting_for_resume = false;
        self.status.pause_until = None;
        self.set_phase(Phase::Promoting);
        self.progressed();
        self.event(EventReason::Promoting, message, evidence);
    }

    fn promoting_tick(&mut self, observations: &Observations) {
        if !observations.primary_ready {
            let progress_deadline = self.spec.analysis.progress_deadline;
            let deadline =
                SignedDuration::try_from(progress_deadline.get()).unwrap_or(SignedDuration::MAX);
            let since = self.status.last_progress_at.unwrap_or(self.now);
            if self.now.duration_since(since) > deadline {
                // The primary now runs the new revision but is unhealthy: serve from the canary,
                // which runs the same revision and is known to work.
                self.status.canary_weight = Weight::FULL;
                self.status.mirror_weight = None;
                self.status.match_active = false;
                self.apply_route();
                self.set_phase(Phase::Failed);
                self.run_hooks(HookType::PostRollout);
                let message = format!(
                    "the promoted primary did not become ready within the progress deadline ({progress_deadline}): the canary serves all traffic"
                );
                self.notify(Severity::Error, message.clone(), &Evidence::default());
                self.event(EventReason::RolledBack, message, Evidence::default());
            } else {
                self.note(
                    EventReason::Promoting,
                    "waiting for the promoted primary to be ready".into(),
                    Evidence::default(),
                );
            }
            return;
        }
        let promotion_step = match &self.spec.plan {
            Plan::Canary(canary) => canary.step_weight_promotion,
            _ => None,
        };
        match promotion_step {
            Some(step) if self.status.canary_weight > step => {
                self.status.canary_weight = self.status.canary_weight.saturating_sub(step);
                self.status.mirror_weight = None;
                self.progressed();
                self.apply_route();
                let primary = self.status.canary_weight.complement();
                self.event(
                    EventReason::Advanced,
                    format!("promotion: primary weight {primary}"),
                    Evidence::default(),
                );
            }
            _ => {
                self.status.canary_weight = Weight::ZERO;
                self.status.mirror_weight = None;
                self.status.match_active = false;
                self.apply_route();
                self.set_phase(Phase::Finalising);
                self.progressed();
                self.event(
                    EventReason::Finalising,
                    "all traffic on the promoted primary",
                    Evidence::default(),
                );
            }
        }
    }

    fn finalising_tick(&mut self) {
        self.effects.push(Effect::ScaleCanary(Scale::Down));
        self.status.primary_revision = self.status.canary_revision.clone();
        self.status.skip_analysis = false;
        self.set_phase(Phase::Succeeded);
        self.run_hooks(HookType::PostRollout);
        let revision = self.status.canary_revision.clone().unwrap_or_default();
        let message = format!(
            "run {} succeeded: revision {revision} promoted",
            self.status.run
        );
        self.notify(Severity::Info, message.clone(), &Evidence::default());
        self.event(EventReason::Succeeded, message, Evidence::default());
    }

    fn held_tick(&mut self, observations: &Observations) {
        if let Some(revision) = &observations.canary_revision
            && self.status.canary_revision.as_ref() != Some(revision)
        {
            self.restart_run(revision.clone());
            return;
        }
        let requested = observations.hooks.iter().any(|hook| {
            hook.hook_type == HookType::Rollback
                && hook.success
                && self
                    .spec
                    .analysis
                    .hooks_of(HookType::Rollback)
                    .any(|spec| spec.name == hook.name)
        });
        if requested {
            self.fail(
                Failure::Forced,
                "rollback requested by webhook while held".into(),
                Evidence::default(),
            );
        }
    }

    fn fail(&mut self, failure: Failure, message: String, evidence: Evidence) {
        if matches!(failure, Failure::Analysis)
            && self.spec.analysis.on_failure == FailureAction::Hold
        {
            self.set_phase(Phase::Held);
            let message = format!(
                "{message}; holding the canary at {} (onFailure: hold): `weir resume`, `weir promote` or `weir abort` decides",
                self.status.canary_weight
            );
            self.notify(Severity::Warn, message.clone(), &evidence);
            self.event(EventReason::Held, message, evidence);
            return;
        }
        self.status.canary_weight = Weight::ZERO;
        self.status.mirror_weight = None;
        self.status.match_active = false;
        self.status.paused = false;
        self.status.waiting_for_resume = false;
        self.status.pause_until = None;
        self.status.skip_analysis = false;
        self.apply_route();
        self.effects.push(Effect::ScaleCanary(Scale::Down));
        self.set_phase(Phase::Failed);
        self.run_hooks(HookType::PostRollout);
        let message = format!("run {} rolled back: {message}", self.status.run);
        self.notify(Severity::Error, message.clone(), &evidence);
        self.event(EventReason::RolledBack, message, evidence);
    }

    // --- other inputs ---

    fn command(&mut self, input: &CommandInput) -> Result<(), CommandRejected> {
        let phase = self.status.phase;
        let reject = |reason: &str| CommandRejected {
            command: input.command.as_str(),
            phase,
            reason: reason.to_string(),
        };
        let actor = Evidence {
            actor: Some(input.actor.clone()),
            ..Evidence::default()
        };
        match &input.command {
            Command::Promote => match phase {
                Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion | Phase::Held => {
                    if phase == Phase::Waiting {
                        self.effects.push(Effect::ScaleCanary(Scale::Up));
                    }
                    self.promote(format!("promoted by {}", input.actor), actor);
                }
                _ => return Err(reject("no run is waiting to be promoted")),
            },
            Command::Abort => match phase {
                Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion | Phase::Held => {
                    self.fail(
                        Failure::Forced,
                        format!("aborted by {}", input.actor),
                        actor,
                    );
                }
                Phase::Promoting | Phase::Finalising => {
                    return Err(reject(
                        "the primary already runs the new revision; roll forward or apply the old revision",
                    ));
                }
                _ => return Err(reject("no run is under way")),
            },
            Command::Pause => match phase {
                Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion => {
                    if !self.status.paused {
                        self.status.paused = true;
                        self.event(
                            EventReason::Paused,
                            format!(
                                "paused by {}: the weight holds at {}",
                                input.actor, self.status.canary_weight
                            ),
                            actor,
                        );
                    }
                }
                _ => return Err(reject("only a running run can be paused")),
            },
            Command::Resume => {
                if phase == Phase::Held {
                    self.status.failed_checks = 0;
                    self.status.last_failure = Evidence::default();
                    self.set_phase(Phase::Progressing);
                    self.progressed();
                    self.event(
                        EventReason::Resumed,
                        format!("resumed by {}: failed checks reset", input.actor),
                        actor,
                    );
                } else if phase == Phase::Waiting {
                    self.status.paused = false;
                    self.begin_progressing(actor);
                } else if phase.in_run() && (self.status.paused || self.status.waiting_for_resume) {
                    self.status.paused = false;
                    self.status.waiting_for_resume = false;
                    self.progressed();
                    self.event(
                        EventReason::Resumed,
                        format!("resumed by {}", input.actor),
                        actor,
                    );
                } else {
                    return Err(reject("nothing is paused or waiting"));
                }
            }
            Command::Retry => match (phase, self.status.canary_revision.clone()) {
                (Phase::Failed, Some(revision)) => {
                    self.reset_run(revision);
                    self.begin_progressing(actor);
                }
                _ => return Err(reject("only a failed run can be retried")),
            },
            Command::OpenGate(gate) => self
                .gate_command(gate, true, &input.actor, &actor)
                .map_err(|reason| reject(&reason))?,
            Command::CloseGate(gate) => self
                .gate_command(gate, false, &input.actor, &actor)
                .map_err(|reason| reject(&reason))?,
            Command::SkipAnalysis => match phase {
                Phase::Terminated => {
                    return Err(reject("the rollout is deleted"));
                }
                Phase::Promoting | Phase::Finalising => {
                    return Err(reject("the run is already promoting"));
                }
                _ => {
                    self.status.skip_analysis = true;
                    self.event(
                        EventReason::Command,
                        format!(
                            "{} asked to skip the analysis: the next tick of a run promotes",
                            input.actor
                        ),
                        actor,
                    );
                }
            },
        }
        Ok(())
    }

    /// Records a person's decision about a gate for this run (see [`Command::OpenGate`]).
    fn gate_command(
        &mut self,
        gate: &GateRef,
        open: bool,
        actor: &str,
        evidence: &Evidence,
    ) -> Result<(), String> {
        let phase = self.status.phase;
        match phase {
            Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion | Phase::Held => {}
            Phase::Promoting | Phase::Finalising => {
                return Err("the run is promoting: its gates are behind it".into());
            }
            Phase::Terminated => return Err("the rollout is deleted".into()),
            _ => {
                return Err(
                    "no run is under way, and a person's gate decision holds for one run".into(),
                );
            }
        }
        let (hook_type, hook) = self.resolve_gate(gate)?;
        if hook_type == HookType::ConfirmRollout && phase != Phase::Waiting {
            return Err(
                "confirm-rollout gates the start of a run, and this run has started".into(),
            );
        }
        match &hook {
            Some(name) => self.status.gates.retain(|decision| {
                decision.hook_type != hook_type || decision.hook.as_ref() != Some(name)
            }),
            None => self
                .status
                .gates
                .retain(|decision| decision.hook_type != hook_type),
        }
        self.status.gates.push(GateDecision {
            hook_type,
            hook: hook.clone(),
            open,
            actor: actor.to_string(),
            at: self.now,
        });
        let which = match &hook {
            Some(name) => format!("the {hook_type} gate {name}"),
            None if self.spec.analysis.has_hooks(hook_type) => {
                format!("the {hook_type} gate (all its hooks)")
            }
            None => format!("the {hook_type} gate"),
        };
        let run = self.status.run;
        if open {
            // A person's decision moves the run on, as a resume does.
            self.progressed();
            // The run waits at exactly this gate: tick now rather than an interval later.
            self.wake_now = matches!(
                (phase, hook_type),
                (Phase::Waiting, HookType::ConfirmRollout)
                    | (Phase::WaitingPromotion, HookType::ConfirmPromotion)
            );
            self.event(
                EventReason::GateOpened,
                format!(
                    "{actor} opened {which} for run {run}: it passes whatever its hooks answer"
                ),
                evidence.clone(),
            );
        } else {
            self.event(
                EventReason::GateShut,
                format!("{actor} closed {which} for run {run}: it holds whatever its hooks answer"),
                evidence.clone(),
            );
        }
        Ok(())
    }

    /// The gate type and hook a [`GateRef`] names, or why it names none.
    fn resolve_gate(&self, gate: &GateRef) -> Result<(HookType, Option<String>), String> {
        let types = HookType::GATES.map(HookType::as_str).join(", ");
        if let Some(hook_type) = gate.hook_type
            && !hook_type.is_gate()
        {
            return Err(format!(
                "{hook_type} is not a gate; a person opens or closes {types}"
            ));
        }
        let Some(name) = &gate.hook else {
            return match gate.hook_type {
                Some(hook_type) => Ok((hook_type, None)),
                None => Err(format!(
                    "name the gate: a type ({types}) or one of its hooks ({})",
                    self.gate_hooks()
                )),
            };
        };
        let Some(hook) = self
            .spec
            .analysis
            .webhooks
            .iter()
            .find(|hook| &hook.name == name)
        else {
            return Err(format!(
                "the rollout has no webhook named {name:?} (its gate hooks: {})",
                self.gate_hooks()
            ));
        };
        if !hook.hook_type.is_gate() {
            return Err(format!(
                "webhook {name:?} is a {} hook, not a gate ({types})",
                hook.hook_type
            ));
        }
        match gate.hook_type {
            Some(hook_type) if hook_type != hook.hook_type => Err(format!(
                "webhook {name:?} is a {} gate, not {hook_type}",
                hook.hook_type
            )),
            _ => Ok((hook.hook_type, Some(name.clone()))),
        }
    }

    /// The rollout's gate hooks, for messages.
    fn gate_hooks(&self) -> String {
        let hooks: Vec<String> = self
            .spec
            .analysis
            .webhooks
            .iter()
            .filter(|hook| hook.hook_type.is_gate())
            .map(|hook| format!("{} ({})", hook.name, hook.hook_type))
            .collect();
        if hooks.is_empty() {
            "none".into()
        } else {
            hooks.join(", ")
        }
    }

    fn verdict(&mut self, verdict: &JudgeVerdict) {
        if !matches!(
            self.status.phase,
            Phase::Progressing | Phase::WaitingPromotion
        ) {
            return;
        }
        let evidence = Evidence {
            verdict: Some(verdict.clone()),
            ..Evidence::default()
        };
        match verdict.outcome {
            VerdictOutcome::Fail => {
                self.fail(
                    Failure::Analysis,
                    format!(
                        "judge {} found the canary worse than the primary",
                        verdict.judge
                    ),
                    evidence,
                );
            }
            VerdictOutcome::Pass => {
                self.note(
                    EventReason::Verdict,
                    format!("judge {} passed the canary", verdict.judge),
                    evidence,
                );
            }
            VerdictOutcome::Inconclusive => {}
        }
    }

    fn new_revision(&mut self, revision: &str) {
        match self.status.phase {
            Phase::Initialized | Phase::Succeeded | Phase::Failed => {
                self.consider_revision(revision, &[]);
            }
            // Promoting and Finalising finish first: the next tick in Succeeded starts the new run.
            Phase::Progressing | Phase::WaitingPromotion | Phase::Held
                if self.status.canary_revision.as_deref() != Some(revision) =>
            {
                self.restart_run(revision.to_string());
            }
            Phase::Waiting => self.status.canary_revision = Some(revision.to_string()),
            _ => {}
        }
    }

    fn deleted(&mut self) {
        if self.status.phase == Phase::Terminated {
            return;
        }
        if self.spec.revert_on_deletion {
            self.status.canary_weight = Weight::ZERO;
            self.status.mirror_weight = None;
            self.status.match_active = false;
            self.apply_route();
            self.effects.push(Effect::ScaleCanary(Scale::Down));
            self.effects.push(Effect::Finalize);
        }
        self.set_phase(Phase::Terminated);
        let message = if self.spec.revert_on_deletion {
            "deleted: traffic reverted to the primary"
        } else {
            "deleted: routes left as they are"
        };
        self.event(EventReason::Deleted, message, Evidence::default());
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
