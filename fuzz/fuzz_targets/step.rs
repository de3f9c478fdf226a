//! Random inputs -> machine::step, from fixed valid specs.
//!
//! The specs are the Rollouts among the committed seeds (fuzz/seeds), loaded once. The fuzzer
//! picks one and drives a sequence of ticks (with random readiness, check outcomes and hook
//! results), commands, judge verdicts, new revisions and deletion through `machine::step`,
//! feeding each transition's status into the next step, with time moving forward.
//!
//! Checked after every step: no panic; the step is deterministic; every route splits exactly
//! 100% (canary <= 100%); the status stays within 0..=100% and survives a JSON round-trip
//! unchanged (a status serialized mid-run must continue exactly as the original).

#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use jiff::{SignedDuration, Timestamp};
use libfuzzer_sys::fuzz_target;
use weir_core::Weight;
use weir_core::document::{self, Document};
use weir_core::machine::{self, Command, CommandInput, Effect, Input, Observations};
use weir_core::model::{
    CheckOutcome, CheckResult, HookResult, HookType, JudgeVerdict, RolloutSpec, RolloutStatus,
    VerdictOutcome,
};

const SEEDS: [&str; 9] = [
    include_str!("../seeds/rollout-canary.yaml"),
    include_str!("../seeds/rollout-steps.yaml"),
    include_str!("../seeds/rollout-schedule.yaml"),
    include_str!("../seeds/rollout-abtest.json"),
    include_str!("../seeds/rollout-gates.yaml"),
    include_str!("../seeds/rollout-bluegreen.yaml"),
    include_str!("../seeds/flagger-canary.yaml"),
    include_str!("../seeds/flagger-bluegreen.yaml"),
    // A spec with nothing but defaults around a short canary.
    "apiVersion: weir.dev/v1alpha1\nkind: Rollout\nmetadata: {name: tiny}\n\
     spec:\n  target: {kind: flag, flag: f, control: a, variation: b}\n  \
     plan: {canary: {stepWeights: [50]}}\n",
];

fn specs() -> &'static [RolloutSpec] {
    static SPECS: OnceLock<Vec<RolloutSpec>> = OnceLock::new();
    SPECS.get_or_init(|| {
        let specs: Vec<RolloutSpec> = SEEDS
            .iter()
            .flat_map(|text| document::load(text.as_bytes()))
            .filter_map(|result| match result {
                Ok(loaded) => match loaded.document {
                    Document::Rollout(rollout) => Some(rollout.spec),
                    Document::MetricTemplate(_) => None,
                },
                Err(_) => None,
            })
            .collect();
        assert!(specs.len() >= 6, "the seed Rollouts no longer load: {}", specs.len());
        specs
    })
}

#[derive(Debug, Arbitrary)]
struct Run {
    spec: u8,
    /// Each operation, with the seconds that pass before it.
    ops: Vec<(u16, Op)>,
}

#[derive(Debug, Arbitrary)]
enum Op {
    Tick {
        primary_ready: bool,
        canary_ready: bool,
        canary_revision: Option<u8>,
        primary_revision: Option<u8>,
        /// (metric index, outcome, value); indexes past the spec's metrics make unknown names.
        checks: Vec<(u8, u8, Option<f64>)>,
        /// (webhook index, hook type used when the index is past the spec's webhooks, success).
        hooks: Vec<(u8, u8, bool)>,
    },
    /// Every hook and metric of the spec passes.
    HealthyTick { canary_revision: Option<u8> },
    Command(u8),
    Verdict { judge: u8, outcome: u8 },
    NewRevision(u8),
    Deleted,
    /// Much time passes (days), for schedules and deadlines.
    Sleep(u16),
}

fn revision(n: u8) -> String {
    format!("rev-{}", n % 4)
}

fn input_for(spec: &RolloutSpec, op: &Op) -> Input {
    match op {
        Op::Tick {
            primary_ready,
            canary_ready,
            canary_revision,
            primary_revision,
            checks,
            hooks,
        } => {
            let metrics = &spec.analysis.metrics;
            let webhooks = &spec.analysis.webhooks;
            Input::Tick(Observations {
                canary_revision: canary_revision.map(revision),
                primary_revision: primary_revision.map(revision),
                primary_ready: *primary_ready,
                canary_ready: *canary_ready,
                checks: checks
                    .iter()
                    .take(16)
                    .map(|&(index, outcome, value)| CheckResult {
                        name: metrics
                            .get(usize::from(index))
                            .map_or_else(|| format!("unknown-{index}"), |m| m.name.clone()),
                        outcome: match outcome % 3 {
                            0 => CheckOutcome::Pass,
                            1 => CheckOutcome::Fail,
                            _ => CheckOutcome::NoData,
                        },
                        // NaN is not equal to itself, which would defeat the determinism check.
                        value: value.filter(|value| !value.is_nan()),
                        message: String::new(),
                    })
                    .collect(),
                hooks: hooks
                    .iter()
                    .take(16)
                    .map(|&(index, kind, success)| match webhooks.get(usize::from(index)) {
                        Some(hook) => HookResult {
                            name: hook.name.clone(),
                            hook_type: hook.hook_type,
                            success,
                            message: String::new(),
                        },
                        None => HookResult {
                            name: format!("person-{index}"),
                            hook_type: HookType::ALL[usize::from(kind) % HookType::ALL.len()],
                            success,
                            message: String::new(),
                        },
                    })
                    .collect(),
            })
        }
        Op::HealthyTick { canary_revision } => {
            let mut observations = Observations::healthy(spec, canary_revision.map(revision));
            observations.primary_revision = Some(revision(0));
            Input::Tick(observations)
        }
        Op::Command(n) => Input::Command(CommandInput {
            command: match n % 6 {
                0 => Command::Promote,
                1 => Command::Abort,
                2 => Command::Pause,
                3 => Command::Resume,
                4 => Command::Retry,
                _ => Command::SkipAnalysis,
            },
            actor: "fuzz".into(),
        }),
        Op::Verdict { judge, outcome } => Input::Verdict(JudgeVerdict {
            judge: spec
                .analysis
                .judges
                .get(usize::from(*judge))
                .cloned()
                .unwrap_or_else(|| format!("judge-{judge}")),
            outcome: match outcome % 3 {
                0 => VerdictOutcome::Pass,
                1 => VerdictOutcome::Fail,
                _ => VerdictOutcome::Inconclusive,
            },
            evidence: serde_json::Value::Null,
        }),
        Op::NewRevision(n) => Input::NewRevision(revision(*n)),
        Op::Deleted => Input::Deleted,
        Op::Sleep(_) => unreachable!("handled by the caller"),
    }
}

fn check_status(status: &RolloutStatus) {
    assert!(
        status.canary_weight <= Weight::FULL,
        "status canary weight above 100%: {status:#?}"
    );
    if let Some(mirror) = status.mirror_weight {
        assert!(mirror <= Weight::FULL, "status mirror weight above 100%: {status:#?}");
    }
    let json = serde_json::to_string(status).expect("a status serializes");
    let back: RolloutStatus = serde_json::from_str(&json)
        .unwrap_or_else(|error| panic!("a status does not read back: {error}\n{json}"));
    assert_eq!(&back, status, "a status changes through JSON:\n{json}");
}

fuzz_target!(|run: Run| {
    let specs = specs();
    let spec = &specs[usize::from(run.spec) % specs.len()];
    let mut status = RolloutStatus::default();
    let mut now: Timestamp = "2027-01-01T00:00:00Z".parse().expect("a valid timestamp");
    for (seconds, op) in run.ops.iter().take(256) {
        now += SignedDuration::from_secs(i64::from(*seconds));
        if let Op::Sleep(days) = op {
            now += SignedDuration::from_hours(24 * i64::from(days % 400));
            continue;
        }
        let input = input_for(spec, op);
        let result = machine::step(spec, &status, &input, now);
        assert_eq!(
            result,
            machine::step(spec, &status, &input, now),
            "step is not deterministic"
        );
        let _needs = machine::needs(spec, &status, Some("rev-1"));
        let Ok(transition) = result else { continue };
        for effect in &transition.effects {
            if let Effect::SetRoute(route) = effect {
                assert!(route.canary_weight <= Weight::FULL, "route above 100%: {route:#?}");
                assert_eq!(
                    route.primary_weight.basis_points() + route.canary_weight.basis_points(),
                    Weight::FULL.basis_points(),
                    "route does not split 100%: {route:#?}"
                );
                if let Some(mirror) = route.mirror_weight {
                    assert!(mirror <= Weight::FULL, "mirror above 100%: {route:#?}");
                }
            }
        }
        check_status(&transition.status);
        status = transition.status;
    }
});
