//! Inputs other than ticks: a person's commands (promote, abort, pause, resume, retry, gates),
//! a judge's verdict between ticks, a new revision, deletion.

use super::*;

impl Machine<'_> {
    pub(super) fn command(&mut self, input: &CommandInput) -> Result<(), CommandRejected> {
        let phase = self.status.phase;
        let reject = |reason: &str| CommandRejected {
            command: match input.command {
                Command::PromoteStep => "promote one step",
                _ => input.command.as_str(),
            },
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
                    self.promote(
                        format!(
                            "promoted by {} to the end: the remaining steps skipped",
                            input.actor
                        ),
                        actor,
                    );
                }
                _ => return Err(reject("no run is waiting to be promoted")),
            },
            Command::PromoteStep => match phase {
                Phase::Progressing | Phase::WaitingPromotion => self
                    .promote_step(&input.actor, actor)
                    .map_err(|reason| reject(&reason))?,
                Phase::Waiting | Phase::Held => {
                    return Err(reject(
                        "the run is not moving along its plan: resume it first (or promote all the way)",
                    ));
                }
                _ => return Err(reject("no run is waiting to be promoted")),
            },
            Command::Abort => match phase {
                Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion | Phase::Held => {
                    self.fail(
                        Failure::Forced(StoppedBy::User),
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
                // A second pause is refused like a resume with nothing paused: an accepted
                // command always changes the status or records an event, and a client learns
                // that its pause found the run already paused (by whom is in the history).
                Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion
                    if self.status.paused =>
                {
                    return Err(reject("the run is already paused; resume continues it"));
                }
                Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion => {
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
                (Phase::Failed, _) if self.status.setup_failed() => {
                    self.begin_setup();
                }
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
            Command::Stop { rollback: true } => match phase {
                Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion | Phase::Held => {
                    self.fail(
                        Failure::Forced(StoppedBy::User),
                        format!("stopped by {}: everyone back to the primary", input.actor),
                        actor,
                    );
                }
                _ => return Err(reject("no run is under way")),
            },
            Command::Stop { rollback: false } => match phase {
                Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion | Phase::Held => {
                    self.stop(&input.actor, actor);
                }
                Phase::Promoting | Phase::Finalising => {
                    return Err(reject(
                        "the run is already promoting; apply the old revision to go back",
                    ));
                }
                _ => return Err(reject("no run is under way")),
            },
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

    /// A person's one step along the plan ([`Command::PromoteStep`]): the next canary step or
    /// schedule entry now, whatever holds it (a pause, the evidence, a confirm-traffic-increase
    /// gate); the step's own pause applies after it. With no step left the run promotes.
    pub(super) fn promote_step(&mut self, actor: &str, evidence: Evidence) -> Result<(), String> {
        let promote_to_end = |machine: &mut Self, evidence: Evidence| {
            machine.promote(
                format!(
                    "promoted by {actor} to the end: one step asked, and the plan had none left"
                ),
                evidence,
            );
        };
        match &self.spec.plan {
            Plan::Canary(_) => {
                let planned = steps::weight_steps(self.spec);
                let Some(next) = planned.get(self.status.steps_taken as usize).cloned() else {
                    promote_to_end(self, evidence);
                    return Ok(());
                };
                // A mirror interval not yet run is a step skipped too.
                self.status.mirror_done = true;
                self.status.mirror_weight = None;
                self.status.canary_weight = next.weight;
                self.status.steps_taken += 1;
                self.status.waiting_for_resume = false;
                self.status.pause_until = None;
                self.status.evidence_wait_since = None;
                self.set_phase(Phase::Progressing);
                self.progressed();
                self.apply_route();
                let mut message = format!(
                    "promoted one step by {actor} to {}: step {} of {}",
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
                self.event(EventReason::Advanced, message, evidence);
                Ok(())
            }
            Plan::Schedule(_) => {
                let entries = schedule_entries(self.spec);
                let taken = self.status.steps_taken as usize;
                let Some(&(at, weight)) = entries.get(taken) else {
                    promote_to_end(self, evidence);
                    return Ok(());
                };
                self.status.canary_weight = weight;
                self.status.steps_taken = taken as u32 + 1;
                self.status.triggered.push(TriggeredEntry {
                    at,
                    weight,
                    triggered_at: self.now,
                });
                self.set_phase(Phase::Progressing);
                self.progressed();
                self.apply_route();
                self.event(
                    EventReason::Advanced,
                    format!(
                        "promoted one step by {actor} to {weight}: entry {} of {} (due {at}) taken now",
                        taken + 1,
                        entries.len()
                    ),
                    evidence,
                );
                Ok(())
            }
            Plan::BlueGreen(_) | Plan::Mirror(_) | Plan::AbTest(_) => {
                Err("this plan counts iterations, not steps of weight: promote finishes it".into())
            }
        }
    }

    /// Records a person's decision about a gate for this run (see [`Command::OpenGate`]).
    pub(super) fn gate_command(
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
    pub(super) fn resolve_gate(
        &self,
        gate: &GateRef,
    ) -> Result<(HookType, Option<String>), String> {
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
    pub(super) fn gate_hooks(&self) -> String {
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

    pub(super) fn verdict(&mut self, verdict: &JudgeVerdict) {
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

    pub(super) fn target_failed(&mut self, reason: &str) {
        let message = format!("the target failed and retrying cannot help: {reason}");
        match self.status.phase {
            Phase::Waiting | Phase::Progressing | Phase::WaitingPromotion | Phase::Held => {
                self.fail(
                    Failure::Forced(StoppedBy::Target),
                    message,
                    Evidence::default(),
                );
            }
            _ => self.note(EventReason::Target, message, Evidence::default()),
        }
    }

    pub(super) fn new_revision(&mut self, revision: &str) {
        match self.status.phase {
            Phase::Initialized | Phase::Succeeded | Phase::Failed | Phase::Stopped => {
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

    /// Ends the run with the weights where they are: the canary keeps serving its share (for a
    /// flag, the audience stays split). The unchanged route is given again so that targets
    /// learn the run is over (a flag target writes the split into the flag).
    fn stop(&mut self, actor_name: &str, actor: Evidence) {
        self.status.paused = false;
        self.status.waiting_for_resume = false;
        self.status.pause_until = None;
        self.status.skip_analysis = false;
        self.status.stopped_by = Some(StoppedBy::User);
        self.set_phase(Phase::Stopped);
        self.apply_route();
        let message = format!(
            "run {} stopped by {actor_name}: the canary keeps {} (`weir abort` or `weir stop --rollback` returns everyone to the primary)",
            self.status.run, self.status.canary_weight
        );
        self.notify(Severity::Warn, message.clone(), &actor);
        self.event(EventReason::Stopped, message, actor);
    }

    pub(super) fn deleted(&mut self) {
        if self.status.phase == Phase::Terminated {
            return;
        }
        if self.spec.revert_on_deletion {
            self.route_all_to_primary();
            self.effects.push(Effect::ScaleCanary(Scale::Down));
            self.effects.push(Effect::Finalize);
        }
        if self.status.phase.in_run() {
            self.status.stopped_by = Some(StoppedBy::Deletion);
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
