//! Ticks: dispatch by phase, set-up, starting a run (and its confirm-rollout gate), the gates
//! and their alerts, and waiting for a run to start.

use super::*;

impl Machine<'_> {
    pub(super) fn tick(&mut self, observations: &Observations) {
        if self.spec.suspend {
            return;
        }
        match self.status.phase {
            Phase::Initializing => self.initialize(observations),
            Phase::Failed if self.status.setup_failed() => self.initialize(observations),
            Phase::Initialized | Phase::Succeeded | Phase::Failed | Phase::Stopped => {
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

    /// Sets up routing with the primary taking everything, once the primary is ready. As in
    /// Flagger, what runs at set-up is the primary: its revision is the promoted one.
    ///
    /// Until the primary is ready nothing routes to it: the first tick asks the target to
    /// prepare it ([`Effect::Prepare`]) and records the wait; past the progress deadline
    /// set-up fails (phase `Failed` in run 0), and completes later on its own should the
    /// primary become ready after all.
    pub(super) fn initialize(&mut self, observations: &Observations) {
        if !observations.primary_ready {
            self.wait_for_primary();
            return;
        }
        self.status.primary_revision = observations
            .primary_revision
            .clone()
            .or_else(|| observations.canary_revision.clone());
        self.status.stopped_by = None;
        self.route_all_to_primary();
        self.effects.push(Effect::ScaleCanary(Scale::Down));
        self.set_phase(Phase::Initialized);
        // A schedule's run starts at once and waits for its entries' times, so that at each
        // entry's time one tick applies it (the seed's WAITING is a run at 0 before its first
        // entry); other plans wait an interval, as Flagger does.
        if matches!(self.spec.plan, Plan::Schedule(_)) {
            self.wake_now = true;
        }
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

    /// Set-up's wait for the primary: the first tick prepares it; the progress deadline, counted
    /// from there, bounds the wait.
    fn wait_for_primary(&mut self) {
        if self.status.phase != Phase::Initializing {
            // Set-up failed already: it completes once the primary is ready (or `weir retry`).
            return;
        }
        let Some(since) = self.status.last_progress_at else {
            self.begin_setup();
            return;
        };
        let progress_deadline = self.spec.analysis.progress_deadline;
        let deadline =
            SignedDuration::try_from(progress_deadline.get()).unwrap_or(SignedDuration::MAX);
        if self.now.duration_since(since) <= deadline {
            return;
        }
        self.set_phase(Phase::Failed);
        self.status.stopped_by = Some(StoppedBy::Deadline);
        let message = format!(
            "set-up failed: the primary was not available within the progress deadline ({progress_deadline}); nothing routes to it and the target serves as before. Set-up completes once the primary is available; `weir retry` waits again"
        );
        self.notify(Severity::Error, message.clone(), &Evidence::default());
        self.event(EventReason::SetupFailed, message, Evidence::default());
    }

    /// Starts set-up: the target prepares the primary, and the wait for it begins.
    pub(super) fn begin_setup(&mut self) {
        self.set_phase(Phase::Initializing);
        self.status.stopped_by = None;
        self.progressed();
        self.effects.push(Effect::Prepare);
        self.event(
            EventReason::WaitingForPrimary,
            format!(
                "setting up: waiting for the primary to be available before it takes traffic (progress deadline {})",
                self.spec.analysis.progress_deadline
            ),
            Evidence::default(),
        );
    }

    pub(super) fn consider_revision(&mut self, revision: &str, hooks: &[HookResult]) {
        if !self.status.setup_failed() && starts_run(&self.status, revision) {
            self.start_run(revision.to_string(), hooks);
        }
    }

    pub(super) fn reset_run(&mut self, revision: String) {
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
        status.evidence_wait_since = None;
        status.gates.clear();
        status.alerted_hooks.clear();
        status.stopped_by = None;
        status.triggered.clear();
        status.run_started_at = Some(self.now);
        status.last_progress_at = Some(self.now);
    }

    pub(super) fn start_run(&mut self, revision: String, hooks: &[HookResult]) {
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

    pub(super) fn begin_progressing(&mut self, evidence: Evidence) {
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
    pub(super) fn gate(&self, hook_type: HookType, hooks: &[HookResult]) -> GateAnswer {
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
    pub(super) fn alert_hooks(
        &mut self,
        results: &[HookResult],
        describe: impl Fn(&HookResult) -> String,
    ) {
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
    pub(super) fn alert_closed_gate(&mut self, refusals: &[HookResult]) {
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

    pub(super) fn waiting_tick(&mut self, observations: &Observations) {
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
}
