//! Gates opened or closed by a person.

use super::*;

// === gates opened or closed by a person ===

#[test]
fn a_person_opening_the_confirm_rollout_gate_starts_the_run() {
    let mut harness = Harness::new(spec(GATED));
    harness.tick(|obs| hook(obs, "approve", false));
    assert_eq!(harness.status.phase, Phase::Waiting);
    let opened = harness
        .command(open_gate(Some(HookType::ConfirmRollout), None))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    assert_eq!(harness.last_reason(), Some(EventReason::GateOpened));
    // The run waits at exactly this gate: the engine is asked for a tick at once.
    assert_eq!(opened.wake_at, Some(harness.now));
    // The hook still says no; the person's yes wins.
    harness.input(Input::Tick({
        let mut observations = Observations::healthy(&harness.spec, Some("v2".into()));
        hook(&mut observations, "approve", false);
        observations
    }));
    assert_eq!(harness.status.phase, Phase::Progressing);
    assert!(harness.effects().contains(&Effect::ScaleCanary(Scale::Up)));
    let started = harness.events.last().map(|event| event.evidence.clone());
    assert_eq!(
        started
            .as_ref()
            .and_then(|evidence| evidence.actor.as_deref()),
        Some("alice")
    );
    assert_eq!(
        started.map(|evidence| evidence.hooks[0].message.clone()),
        Some("opened by alice".into())
    );
}

#[test]
fn a_person_opening_the_confirm_traffic_increase_gate_lets_the_weight_move() {
    let mut harness = Harness::running(GATED);
    harness.healthy();
    assert_eq!(harness.weight(), 50);
    harness.tick(|obs| hook(obs, "more", false));
    assert_eq!(harness.weight(), 50);
    assert_eq!(harness.last_reason(), Some(EventReason::GateClosed));
    // By name; the type follows from the hook.
    let opened = harness
        .command(open_gate(None, Some("more")))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    // Mid-plan, the weight moves at the next regular tick (a step keeps its whole interval).
    assert_eq!(
        opened.wake_at,
        harness.now.checked_add(SignedDuration::from_mins(1)).ok()
    );
    assert_eq!(harness.status.gates.len(), 1);
    harness.tick(|obs| hook(obs, "more", false));
    assert_eq!(harness.weight(), 100);
    let Some(advanced) = harness.events.last() else {
        panic!("no event");
    };
    assert_eq!(advanced.reason, EventReason::Advanced);
    assert_eq!(
        advanced.evidence.actor.as_deref(),
        Some("alice"),
        "{advanced:?}"
    );
}

#[test]
fn a_gate_closed_by_a_person_stays_closed_despite_a_yes() {
    let mut harness = Harness::running(GATED);
    harness
        .command(close_gate(Some(HookType::ConfirmPromotion), Some("ship")))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    assert_eq!(harness.last_reason(), Some(EventReason::GateShut));
    for _ in 0..4 {
        // Every hook answers yes.
        harness.healthy();
    }
    assert_eq!(
        (harness.status.phase, harness.weight()),
        (Phase::WaitingPromotion, 100)
    );
    // The person's no needs no call to the hook.
    assert!(
        !needs(&harness.spec, &harness.status, Some("v2"))
            .hooks
            .contains(&HookType::ConfirmPromotion)
    );
    // No alert: the person knows why it is closed.
    assert!(
        !harness
            .effects()
            .iter()
            .any(|effect| matches!(effect, Effect::Notify(_)))
    );
    let opened = harness
        .command(open_gate(Some(HookType::ConfirmPromotion), None))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    assert_eq!(opened.wake_at, Some(harness.now));
    harness.tick(|obs| hook(obs, "ship", false));
    assert_eq!(harness.status.phase, Phase::Promoting);
    assert_eq!(
        harness
            .events
            .last()
            .and_then(|event| event.evidence.actor.clone())
            .as_deref(),
        Some("alice"),
        "the promotion records who opened the gate"
    );
}

#[test]
fn a_person_can_hold_a_gate_no_hook_guards_without_the_run_counting_as_stalled() {
    let body =
        "  plan: {canary: {stepWeight: 25}}\n  analysis: {interval: 1m, progressDeadline: 2m}\n";
    let mut harness = Harness::running(body);
    harness.healthy();
    assert_eq!(harness.weight(), 25);
    harness
        .command(close_gate(Some(HookType::ConfirmTrafficIncrease), None))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    for _ in 0..6 {
        harness.healthy();
        assert_eq!(
            (harness.status.phase, harness.weight()),
            (Phase::Progressing, 25),
            "a person holding the weight is not a stall"
        );
    }
    harness
        .command(open_gate(Some(HookType::ConfirmTrafficIncrease), None))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    harness.healthy();
    assert_eq!(
        (harness.status.phase, harness.weight()),
        (Phase::Progressing, 50),
        "opening the gate counts as progress"
    );
}

#[test]
fn gate_decisions_reset_when_a_new_run_starts() {
    let mut harness = Harness::running(GATED);
    harness
        .command(open_gate(Some(HookType::ConfirmPromotion), None))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    assert_eq!(harness.status.gates.len(), 1);
    harness.tick(|obs| obs.canary_revision = Some("v3".into()));
    assert_eq!(harness.status.run, 2);
    assert!(harness.status.gates.is_empty());
    let v3 = |obs: &mut Observations| {
        obs.canary_revision = Some("v3".into());
        hook(obs, "ship", false);
    };
    harness.tick(v3);
    harness.tick(v3);
    harness.tick(v3);
    assert_eq!(harness.status.phase, Phase::WaitingPromotion);
}

#[test]
fn who_opened_or_closed_a_gate_is_recorded_in_the_history() {
    let mut harness = Harness::running(GATED);
    harness
        .command(close_gate(None, Some("more")))
        .unwrap_or_else(|rejected| panic!("{rejected}"));
    let input = Input::Command(CommandInput {
        command: open_gate(None, Some("more")),
        actor: "bob".into(),
    });
    harness.input(input);
    let decisions: Vec<(EventReason, Option<String>, String)> = harness
        .events
        .iter()
        .filter(|event| {
            matches!(
                event.reason,
                EventReason::GateOpened | EventReason::GateShut
            )
        })
        .map(|event| {
            (
                event.reason,
                event.evidence.actor.clone(),
                event.message.clone(),
            )
        })
        .collect();
    assert_eq!(decisions.len(), 2);
    assert_eq!(
        (decisions[0].0, decisions[0].1.as_deref()),
        (EventReason::GateShut, Some("alice"))
    );
    assert_eq!(
        (decisions[1].0, decisions[1].1.as_deref()),
        (EventReason::GateOpened, Some("bob"))
    );
    assert!(
        decisions[1]
            .2
            .contains("bob opened the confirm-traffic-increase gate more for run 1"),
        "{}",
        decisions[1].2
    );
    // The latest decision about a hook replaces the earlier one.
    assert_eq!(harness.status.gates.len(), 1);
    assert!(harness.status.gates[0].open);
}

#[test]
fn gate_commands_that_name_no_gate_or_come_at_the_wrong_time_are_rejected() {
    let mut harness = Harness::new(spec(GATED));
    let idle = harness.command(open_gate(Some(HookType::ConfirmPromotion), None));
    assert!(
        idle.as_ref()
            .is_err_and(|rejected| rejected.reason.contains("no run is under way")),
        "{idle:?}"
    );
    harness.healthy();
    assert_eq!(harness.status.phase, Phase::Progressing);
    let before = harness.status.clone();
    for (command, expected) in [
        (open_gate(None, Some("nope")), "no webhook named \"nope\""),
        (
            open_gate(Some(HookType::Rollout), None),
            "rollout is not a gate",
        ),
        (
            open_gate(Some(HookType::ConfirmPromotion), Some("more")),
            "is a confirm-traffic-increase gate, not confirm-promotion",
        ),
        (open_gate(None, None), "name the gate"),
        (
            open_gate(Some(HookType::ConfirmRollout), None),
            "this run has started",
        ),
    ] {
        let result = harness.command(command);
        assert!(
            result
                .as_ref()
                .is_err_and(|rejected| rejected.reason.contains(expected)),
            "{expected}: {result:?}"
        );
        assert_eq!(harness.status, before, "a rejected command changes nothing");
    }
    let rejected = harness
        .command(open_gate(None, Some("nope")))
        .err()
        .map(|rejected| rejected.to_string())
        .unwrap_or_default();
    assert!(
        rejected.contains(
            "approve (confirm-rollout), more (confirm-traffic-increase), ship (confirm-promotion)"
        ),
        "the refusal lists the gates: {rejected}"
    );
}
