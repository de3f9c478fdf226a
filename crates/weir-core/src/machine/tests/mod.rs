//! One test per transition of the reference (Flagger's semantics) and per addition of weir's.

mod alerts;
mod commands;
mod evidence;
mod gates;
mod runs;
mod strategies;

use super::*;
use crate::model::{HookResult, Rollout};

// === harness ===

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// A spec from the YAML of `plan:` and `analysis:` (indented under `spec:`).
fn spec(body: &str) -> RolloutSpec {
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {{name: app}}\nspec:\n  target: {{kind: flag}}\n{body}"
    );
    let rollout: Rollout = match serde_saphyr::from_str(&yaml) {
        Ok(rollout) => rollout,
        Err(error) => panic!("test spec does not parse: {error}\n{yaml}"),
    };
    let errors = crate::validate::rollout(&rollout);
    assert!(errors.is_empty(), "test spec is invalid: {errors:?}");
    rollout.spec
}

const CANARY: &str = "  plan: {canary: {stepWeight: 20, maxWeight: 60}}\n  analysis: {interval: 1m, threshold: 2, metrics: [{name: request-success-rate, thresholdRange: {min: 99}}]}\n";

/// A rollout driven through the machine, keeping everything it produced.
struct Harness {
    spec: RolloutSpec,
    status: RolloutStatus,
    now: Timestamp,
    last: Option<Transition>,
    events: Vec<Event>,
}

impl Harness {
    fn new(spec: RolloutSpec) -> Harness {
        let mut harness = Harness {
            spec,
            status: RolloutStatus::default(),
            now: at(0),
            last: None,
            events: Vec::new(),
        };
        let mut setup = Observations::ready(Some("v1".into()));
        setup.primary_revision = Some("v1".into());
        harness.input(Input::Tick(setup));
        assert_eq!(harness.status.phase, Phase::Initialized);
        harness
    }

    /// A harness with a run of revision v2 started (phase Progressing, no step taken yet).
    fn running(body: &str) -> Harness {
        let mut harness = Harness::new(spec(body));
        harness.tick(|_| {});
        assert_eq!(
            harness.status.phase,
            Phase::Progressing,
            "{:?}",
            harness.events
        );
        harness
    }

    fn input(&mut self, input: Input) -> &Transition {
        let transition = match step(&self.spec, &self.status, &input, self.now) {
            Ok(transition) => transition,
            Err(rejected) => panic!("unexpected rejection: {rejected}"),
        };
        self.status = transition.status.clone();
        self.events.extend(transition.events.iter().cloned());
        self.last.insert(transition)
    }

    /// One interval later, a tick with healthy observations of revision v2, adjusted by `edit`.
    fn tick(&mut self, edit: impl FnOnce(&mut Observations)) -> &Transition {
        self.now = self
            .now
            .checked_add(self.spec.analysis.interval.get())
            .unwrap_or(self.now);
        let mut observations = Observations::healthy(&self.spec, Some("v2".into()));
        edit(&mut observations);
        self.input(Input::Tick(observations))
    }

    fn healthy(&mut self) -> &Transition {
        self.tick(|_| {})
    }

    fn command(&mut self, command: Command) -> Result<Transition, CommandRejected> {
        let input = Input::Command(CommandInput {
            command,
            actor: "alice".into(),
        });
        let result = step(&self.spec, &self.status, &input, self.now);
        if let Ok(transition) = &result {
            self.status = transition.status.clone();
            self.events.extend(transition.events.iter().cloned());
        }
        result
    }

    fn effects(&self) -> &[Effect] {
        self.last
            .as_ref()
            .map(|t| t.effects.as_slice())
            .unwrap_or_default()
    }

    fn routes(&self) -> Vec<&Route> {
        self.effects()
            .iter()
            .filter_map(|effect| match effect {
                Effect::SetRoute(route) => Some(route),
                _ => None,
            })
            .collect()
    }

    fn weight(&self) -> u32 {
        self.status.canary_weight.basis_points() / 100
    }

    fn last_reason(&self) -> Option<EventReason> {
        self.events.last().map(|event| event.reason)
    }
}

fn failing_metric(observations: &mut Observations) {
    for check in &mut observations.checks {
        check.outcome = CheckOutcome::Fail;
        check.value = Some(90.0);
    }
}

fn hook(observations: &mut Observations, name: &str, success: bool) {
    for result in &mut observations.hooks {
        if result.name == name {
            result.success = success;
        }
    }
}

fn open_gate(hook_type: Option<HookType>, hook: Option<&str>) -> Command {
    Command::OpenGate(GateRef {
        hook_type,
        hook: hook.map(String::from),
    })
}

fn close_gate(hook_type: Option<HookType>, hook: Option<&str>) -> Command {
    Command::CloseGate(GateRef {
        hook_type,
        hook: hook.map(String::from),
    })
}

fn notifications(transition: &Transition) -> Vec<&Notification> {
    transition
        .effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Notify(notification) => Some(notification),
            _ => None,
        })
        .collect()
}

const GATED: &str = "  plan: {canary: {stepWeight: 50}}\n  analysis: {webhooks: [{name: approve, type: confirm-rollout, url: 'http://gate/'}, {name: more, type: confirm-traffic-increase, url: 'http://gate/'}, {name: ship, type: confirm-promotion, url: 'http://gate/'}]}\n";
