//! Property tests of the state machine's invariants (ARCHITECTURE.md, "Invariants") over random
//! specs and random input sequences.

use std::time::Duration;

use jiff::Timestamp;
use proptest::prelude::*;
use weir_core::machine::{
    self, Command, CommandInput, Effect, EvidenceReport, GateRef, Input, Observations, Transition,
    canary_steps, max_weight, schedule_entries,
};
use weir_core::model::{
    AbTestPlan, Analysis, CanaryPlan, CanaryStep, CheckOutcome, CheckResult,
    EvidenceDeadlineAction, FailureAction, FailureCounting, FlagTarget, HookResult, HookType,
    IterationsPlan, JudgeVerdict, MatchRule, Metric, MirrorPlan, NoDataPolicy, Pause, Phase, Plan,
    RolloutSpec, RolloutStatus, ScheduleEntry, SchedulePlan, StringMatch, Target, ThresholdRange,
    VerdictOutcome, Webhook,
};
use weir_core::{GoDuration, Weight};

const EPOCH: i64 = 1_800_000_000;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(EPOCH + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
}

// === generators ===

fn weight_percent(range: std::ops::RangeInclusive<u32>) -> impl Strategy<Value = Weight> {
    range.prop_map(Weight::from_percent)
}

fn plan_strategy() -> impl Strategy<Value = Plan> {
    prop_oneof![
        (
            weight_percent(1..=50),
            0u32..=50,
            proptest::option::of(weight_percent(1..=50)),
            proptest::option::of(weight_percent(1..=100))
        )
            .prop_map(|(step, extra, promotion, mirror)| {
                let max =
                    Weight::from_basis_points((step.basis_points() + extra * 100).min(10_000));
                Plan::Canary(CanaryPlan {
                    step_weight: Some(step),
                    max_weight: Some(max),
                    step_weight_promotion: promotion,
                    mirror_weight: mirror,
                    ..CanaryPlan::default()
                })
            }),
        proptest::collection::btree_set(1u32..=10_000, 1..6).prop_map(|weights| Plan::Canary(
            CanaryPlan {
                step_weights: Some(weights.into_iter().map(Weight::from_basis_points).collect()),
                ..CanaryPlan::default()
            }
        )),
        proptest::collection::vec(
            (
                1u32..=100,
                proptest::option::of(proptest::option::of(1u64..=600))
            ),
            1..5
        )
        .prop_map(|steps| Plan::Canary(CanaryPlan {
            steps: Some(
                steps
                    .into_iter()
                    .map(|(weight, pause)| CanaryStep {
                        weight: Weight::from_percent(weight),
                        pause: pause.map(|duration| Pause {
                            duration: duration.map(GoDuration::from_secs)
                        }),
                    })
                    .collect()
            ),
            ..CanaryPlan::default()
        })),
        (1u32..=4).prop_map(|iterations| Plan::BlueGreen(IterationsPlan { iterations })),
        (1u32..=4).prop_map(|iterations| Plan::AbTest(AbTestPlan {
            iterations,
            match_rules: vec![MatchRule {
                headers: [(
                    "x-canary".to_string(),
                    StringMatch {
                        exact: Some("1".into()),
                        ..StringMatch::default()
                    }
                )]
                .into(),
                ..MatchRule::default()
            }],
        })),
        (1u32..=4, proptest::option::of(weight_percent(1..=100))).prop_map(
            |(iterations, mirror_weight)| Plan::Mirror(MirrorPlan {
                iterations,
                mirror_weight
            })
        ),
        (proptest::collection::vec(1u32..=100, 1..5), 0i64..=1800).prop_map(|(weights, offset)| {
            Plan::Schedule(SchedulePlan {
                manual: Some(
                    weights
                        .into_iter()
                        .enumerate()
                        .map(|(index, weight)| ScheduleEntry {
                            at: at(offset + index as i64 * 600),
                            weight: Weight::from_percent(weight),
                        })
                        .collect(),
                ),
                template: None,
            })
        }),
    ]
}

fn spec_strategy() -> impl Strategy<Value = RolloutSpec> {
    (
        plan_strategy(),
        (10u64..=120, 2u64..=8, 1u32..=4),
        (
            0usize..=2,
            proptest::collection::btree_set(0usize..HookType::ALL.len(), 0..5),
        ),
        (
            prop_oneof![
                Just(NoDataPolicy::Fail),
                Just(NoDataPolicy::Hold),
                Just(NoDataPolicy::Ignore)
            ],
            prop_oneof![
                Just(FailureCounting::Total),
                Just(FailureCounting::Consecutive)
            ],
            prop_oneof![Just(FailureAction::Rollback), Just(FailureAction::Hold)],
        ),
        any::<bool>(),
    )
        .prop_map(
            |(
                plan,
                (interval, deadline_factor, threshold),
                (metrics, hook_types),
                (no_data, counting, on_failure),
                skip_analysis,
            )| {
                let analysis = Analysis {
                    interval: GoDuration::from_secs(interval),
                    threshold,
                    progress_deadline: GoDuration::from_secs(interval * deadline_factor),
                    no_data,
                    failure_counting: counting,
                    on_failure,
                    metrics: (0..metrics)
                        .map(|index| Metric {
                            name: if index == 0 {
                                "request-success-rate".into()
                            } else {
                                "request-duration".into()
                            },
                            threshold_range: Some(ThresholdRange {
                                min: Some(99.0),
                                max: None,
                            }),
                            template_ref: None,
                            template_variables: Default::default(),
                            query: None,
                            interval: None,
                        })
                        .collect(),
                    webhooks: hook_types
                        .into_iter()
                        .map(|index| Webhook {
                            name: format!("hook-{index}"),
                            hook_type: HookType::ALL[index],
                            url: "http://hooks.test/".into(),
                            timeout: None,
                            retries: None,
                            metadata: Default::default(),
                            mute_alert: index % 3 == 0,
                            secret_ref: None,
                        })
                        .collect(),
                    ..Analysis::default()
                };
                RolloutSpec {
                    target: Target::Flag(FlagTarget::default()),
                    plan,
                    analysis,
                    // Rarely: skipAnalysis promotes at once, which would hide most of the machine.
                    skip_analysis: skip_analysis && interval % 7 == 0,
                    suspend: false,
                    revert_on_deletion: false,
                    session_affinity: None,
                }
            },
        )
}

#[derive(Debug, Clone)]
enum Action {
    Tick {
        ready: (bool, bool),
        revision: u8,
        outcomes: Vec<u8>,
        hooks: Vec<bool>,
        /// The judges' report: 0 none (no judge), 1 waiting for evidence, 2 healthy.
        evidence: u8,
    },
    Command(u8),
    Verdict(u8),
    NewRevision(u8),
}

fn action_strategy() -> impl Strategy<Value = (u64, Action)> {
    let action = prop_oneof![
        8 => ((any::<bool>(), any::<bool>()), 0u8..8, proptest::collection::vec(0u8..4, 2), proptest::collection::vec(any::<bool>(), 8), 0u8..3)
            .prop_map(|(ready, revision, outcomes, hooks, evidence)| Action::Tick { ready: (ready.0 || ready.1, ready.1 || !ready.0), revision, outcomes, hooks, evidence }),
        2 => (0u8..16).prop_map(Action::Command),
        1 => (0u8..3).prop_map(Action::Verdict),
        1 => (0u8..4).prop_map(Action::NewRevision),
    ];
    (0u64..=180, action)
}

fn revision(choice: u8) -> String {
    // Mostly the same canary revision, sometimes another one.
    match choice {
        0 => "v3".into(),
        1 => "v1".into(),
        _ => "v2".into(),
    }
}

fn to_input(spec: &RolloutSpec, action: &Action) -> Input {
    match action {
        Action::Tick {
            ready,
            revision: choice,
            outcomes,
            hooks,
            evidence,
        } => {
            let checks = spec
                .analysis
                .metrics
                .iter()
                .zip(outcomes)
                .filter(|(_, outcome)| **outcome != 3)
                .map(|(metric, outcome)| CheckResult {
                    name: metric.name.clone(),
                    outcome: [CheckOutcome::Pass, CheckOutcome::Fail, CheckOutcome::NoData]
                        [*outcome as usize % 3],
                    value: None,
                    message: String::new(),
                })
                .collect();
            let hooks = spec
                .analysis
                .webhooks
                .iter()
                .zip(hooks)
                .map(|(hook, success)| HookResult {
                    name: hook.name.clone(),
                    hook_type: hook.hook_type,
                    success: *success,
                    message: String::new(),
                })
                .collect();
            Input::Tick(Observations {
                canary_revision: Some(revision(*choice)),
                primary_revision: Some("v1".into()),
                primary_ready: ready.0,
                canary_ready: ready.1,
                checks,
                hooks,
                evidence: match evidence {
                    0 => None,
                    shown => Some(EvidenceReport {
                        healthy: *shown == 2,
                        summary: format!("report {shown}"),
                    }),
                },
            })
        }
        Action::Command(choice) => Input::Command(CommandInput {
            command: command(*choice),
            actor: "prop".into(),
        }),
        Action::Verdict(choice) => Input::Verdict(JudgeVerdict {
            judge: "sequential".into(),
            outcome: [
                VerdictOutcome::Pass,
                VerdictOutcome::Fail,
                VerdictOutcome::Inconclusive,
            ][*choice as usize % 3],
            evidence: serde_json::Value::Null,
        }),
        Action::NewRevision(choice) => Input::NewRevision(revision(*choice)),
    }
}

/// The simple commands, then a person opening and closing each gate type, then opening and
/// closing the hooks that are gates when the spec has them (`hook-3`: confirm-traffic-increase,
/// `hook-4`: confirm-promotion).
fn command(choice: u8) -> Command {
    let choice = choice as usize;
    if let Some(simple) = Command::SIMPLE.get(choice) {
        return simple.clone();
    }
    let (gate, open) = if choice < 12 {
        let gate = GateRef {
            hook_type: Some(HookType::GATES[(choice - 6) % 3]),
            hook: None,
        };
        (gate, choice < 9)
    } else {
        let name = if choice.is_multiple_of(2) {
            "hook-3"
        } else {
            "hook-4"
        };
        let gate = GateRef {
            hook_type: None,
            hook: Some(name.into()),
        };
        (gate, choice < 14)
    };
    if open {
        Command::OpenGate(gate)
    } else {
        Command::CloseGate(gate)
    }
}

// === invariants ===

/// The highest canary weight the plan allows before promotion.
fn weight_cap(spec: &RolloutSpec, status: &RolloutStatus) -> Weight {
    match &spec.plan {
        Plan::Canary(canary) => max_weight(canary),
        Plan::AbTest(_) => Weight::ZERO,
        Plan::BlueGreen(_) | Plan::Mirror(_) if status.switched => Weight::FULL,
        Plan::BlueGreen(_) | Plan::Mirror(_) => Weight::ZERO,
        Plan::Schedule(_) => schedule_entries(spec)
            .iter()
            .map(|entry| entry.1)
            .max()
            .unwrap_or(Weight::ZERO),
    }
}

fn check_transition(
    spec: &RolloutSpec,
    before: &RolloutStatus,
    input: &Input,
    transition: &Transition,
) -> Result<(), TestCaseError> {
    for effect in &transition.effects {
        if let Effect::SetRoute(route) = effect {
            prop_assert_eq!(
                route.primary_weight.basis_points() + route.canary_weight.basis_points(),
                10_000,
                "weights sum to 100%: {:?}",
                route
            );
        }
    }
    let after = &transition.status;
    if after.run != before.run {
        prop_assert!(
            after.gates.is_empty() && after.alerted_hooks.is_empty(),
            "a new run starts without a person's gate decisions or alerts: {:?}",
            after
        );
    }
    for effect in &transition.effects {
        if let Effect::Notify(notification) = effect
            && let Some((_, hook)) = notification.delivery_id.split_once("/alert/")
        {
            prop_assert!(
                after.run != before.run || !before.alerted_hooks.iter().any(|h| h == hook),
                "hook {} alerted twice in run {}",
                hook,
                after.run
            );
            prop_assert!(after.alerted_hooks.iter().any(|h| h == hook));
        }
    }
    if matches!(
        after.phase,
        Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion | Phase::Held
    ) {
        prop_assert!(
            after.canary_weight <= weight_cap(spec, after),
            "weight {} above the cap {} in {:?}",
            after.canary_weight,
            weight_cap(spec, after),
            after.phase
        );
    }
    if let Input::Tick(observations) = input
        && observations
            .evidence
            .as_ref()
            .is_some_and(|report| !report.healthy)
        && spec.analysis.evidence.on_deadline != EvidenceDeadlineAction::Promote
        && !spec.skip_analysis
        && !before.skip_analysis
    {
        prop_assert!(
            !transition
                .effects
                .iter()
                .any(|effect| matches!(effect, Effect::Promote { .. })),
            "promoted on a tick without evidence of health: {:?} -> {:?}",
            before,
            after
        );
    }
    if let (Input::Tick(observations), Phase::Progressing | Phase::WaitingPromotion) =
        (input, before.phase)
    {
        let failed_metric = observations
            .checks
            .iter()
            .any(|check| check.outcome == CheckOutcome::Fail);
        let failed_hook = observations
            .hooks
            .iter()
            .any(|hook| hook.hook_type == HookType::Rollout && !hook.success);
        if before.pre_rollout_passed && (failed_metric || failed_hook) {
            prop_assert!(
                after.canary_weight <= before.canary_weight,
                "a failed check raised the weight from {} to {}",
                before.canary_weight,
                after.canary_weight
            );
        }
    }
    Ok(())
}

fn initialized(spec: &RolloutSpec) -> RolloutStatus {
    let mut setup = Observations::ready(Some("v1".into()));
    setup.primary_revision = Some("v1".into());
    match machine::step(spec, &RolloutStatus::default(), &Input::Tick(setup), at(0)) {
        Ok(transition) => transition.status,
        Err(_) => RolloutStatus::default(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_over_random_input_sequences(
        spec in spec_strategy(),
        actions in proptest::collection::vec(action_strategy(), 1..60),
        resume_point in 0usize..60,
    ) {
        prop_assert!(weir_core::validate::rollout(&rollout_of(&spec)).is_empty(), "generated spec is invalid");
        let mut status = initialized(&spec);
        let mut now = at(0);
        for (index, (delay, action)) in actions.iter().enumerate() {
            now = now.checked_add(Duration::from_secs(*delay)).unwrap_or(now);
            let input = to_input(&spec, action);
            let Ok(transition) = machine::step(&spec, &status, &input, now) else {
                continue;
            };
            check_transition(&spec, &status, &input, &transition)?;
            if index == resume_point {
                // A status written out and read back mid-run continues exactly as the original.
                let json = serde_json::to_string(&transition.status).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let restored: RolloutStatus = serde_json::from_str(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&restored, &transition.status);
                if let Some((next_delay, next_action)) = actions.get(index + 1) {
                    let next_now = now.checked_add(Duration::from_secs(*next_delay)).unwrap_or(now);
                    let next_input = to_input(&spec, next_action);
                    prop_assert_eq!(
                        machine::step(&spec, &restored, &next_input, next_now),
                        machine::step(&spec, &transition.status, &next_input, next_now)
                    );
                }
            }
            status = transition.status;
        }
        // Once nothing can progress (neither version ready), every run ends within the progress
        // deadline (plus pauses and the wait for future schedule entries).
        for command in [Command::Resume, Command::Resume] {
            let input = Input::Command(CommandInput { command, actor: "prop".into() });
            if let Ok(transition) = machine::step(&spec, &status, &input, now) {
                status = transition.status;
            }
        }
        let interval = spec.analysis.interval.get().as_secs() as i64;
        let last_entry = schedule_entries(&spec).last().map(|entry| entry.0.as_second() - now.as_second()).unwrap_or(0).max(0);
        let longest_pause = match &spec.plan {
            Plan::Canary(canary) => canary_steps(canary).iter().filter_map(|step| step.pause.flatten()).map(|d| d.get().as_secs() as i64).max().unwrap_or(0),
            _ => 0,
        };
        let bound_seconds = spec.analysis.progress_deadline.get().as_secs() as i64 + longest_pause + last_entry + 3 * interval;
        let ticks = bound_seconds / interval + 1;
        let stuck = Observations {
            canary_revision: status.canary_revision.clone(),
            primary_revision: Some("v1".into()),
            primary_ready: false,
            canary_ready: false,
            checks: Vec::new(),
            hooks: Vec::new(),
            evidence: None,
        };
        for _ in 0..ticks {
            now = now.checked_add(spec.analysis.interval.get()).unwrap_or(now);
            let input = Input::Tick(stuck.clone());
            if let Ok(transition) = machine::step(&spec, &status, &input, now) {
                check_transition(&spec, &status, &input, &transition)?;
                status = transition.status;
            }
        }
        prop_assert!(
            !matches!(status.phase, Phase::Progressing | Phase::Promoting | Phase::Finalising),
            "the run hangs in {:?} {} ticks after progress stopped: {:?}", status.phase, ticks, status
        );
    }
}

fn rollout_of(spec: &RolloutSpec) -> weir_core::model::Rollout {
    weir_core::model::Rollout {
        api_version: "weir.dev/v1alpha1".into(),
        kind: "Rollout".into(),
        metadata: weir_core::model::ObjectMeta {
            name: "prop".into(),
            ..Default::default()
        },
        spec: spec.clone(),
        status: None,
    }
}
