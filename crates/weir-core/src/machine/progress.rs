//! A run in progress: analysis (checks and hooks), failed-check counting, stalls, and advancing
//! the weight, the schedule or the iterations to the end of the plan.

use super::*;

impl Machine<'_> {
    pub(super) fn progress_tick(&mut self, observations: &Observations) {
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
                self.fail(
                    Failure::Forced(StoppedBy::Deadline),
                    message,
                    Evidence::default(),
                );
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
        if self
            .spec
            .target
            .kubernetes()
            .is_some_and(|kubernetes| kubernetes.skip_canary == Some(true))
        {
            self.promote(
                "spec.target.skipCanary: promoting without analysis".into(),
                Evidence::default(),
            );
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
                Failure::Forced(StoppedBy::Hook),
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
            self.fail(
                Failure::Forced(StoppedBy::Deadline),
                message,
                Evidence::default(),
            );
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
        self.evidence = observations.evidence.clone();
        self.advance(&observations.hooks);
    }

    /// Evaluates rollout hooks and metric checks. Returns whether the plan may advance.
    pub(super) fn analyse(&mut self, observations: &Observations) -> bool {
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

    pub(super) fn count_failure(&mut self, message: String, evidence: Evidence) {
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
    pub(super) fn stalled(&self) -> bool {
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
    pub(super) fn traffic_held_by_person(&self) -> bool {
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

    pub(super) fn restart_run(&mut self, revision: String) {
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

    pub(super) fn advance(&mut self, hooks: &[HookResult]) {
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

    pub(super) fn advance_steps(&mut self, hooks: &[HookResult]) {
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
        if !self.evidence_allows(next.weight, false) || !self.traffic_increase_allowed(hooks) {
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
        let evidence = self.health_shown(next.weight, false);
        self.event(EventReason::Advanced, message, evidence);
    }

    pub(super) fn advance_schedule(&mut self, hooks: &[HookResult]) {
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
                // Every entry up to this one fires now, in this step's commit: once each.
                let now = self.now;
                self.status
                    .triggered
                    .extend(
                        entries[taken..=index]
                            .iter()
                            .map(|&(at, weight)| TriggeredEntry {
                                at,
                                weight,
                                triggered_at: now,
                            }),
                    );
                self.progressed();
                self.apply_route();
                self.event(
                    EventReason::Advanced,
                    format!(
                        "scheduled weight {weight} (entry {} of {}){}",
                        index + 1,
                        entries.len(),
                        lateness_note(&self.status.triggered[taken..])
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

    pub(super) fn advance_iterations(&mut self, required: u32, hooks: &[HookResult]) {
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

    pub(super) fn traffic_increase_allowed(&mut self, hooks: &[HookResult]) -> bool {
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

    pub(super) fn at_end_of_plan(&mut self, hooks: &[HookResult]) {
        if !self.evidence_allows(Weight::FULL, true) {
            return;
        }
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
        let mut evidence = evidence;
        evidence.verdict = self.health_shown(Weight::FULL, true).verdict;
        self.promote("analysis passed: promoting".into(), evidence);
    }
}

impl Machine<'_> {
    /// The evidence rule (`spec.analysis.evidence`): whether the run may move the canary to
    /// `weight` (`promotion`: the move is the final promotion). When a judge watches the run and
    /// the rule asks for evidence of health that is not there yet, the run holds at its weight
    /// and says what it waits for (one event when the wait starts, the status message kept
    /// current); past the deadline, `onDeadline` decides.
    fn evidence_allows(&mut self, weight: Weight, promotion: bool) -> bool {
        let rule = self.spec.analysis.evidence;
        let Some(report) = self.evidence.clone() else {
            return true;
        };
        if !rule.required_for(weight, promotion) {
            return true;
        }
        let waited_since = self.status.evidence_wait_since;
        if report.healthy {
            if let Some(since) = waited_since {
                self.status.evidence_wait_since = None;
                self.progressed();
                self.event(
                    EventReason::EvidenceShown,
                    format!(
                        "evidence of health after waiting {}: {}",
                        short_duration(self.now.duration_since(since)),
                        report.summary
                    ),
                    rule_evidence(&report),
                );
            }
            return true;
        }
        let since = *self.status.evidence_wait_since.get_or_insert(self.now);
        let waited = self.now.duration_since(since);
        let deadline = SignedDuration::try_from(rule.deadline.get()).unwrap_or(SignedDuration::MAX);
        let current = self.status.canary_weight;
        let before = if promotion {
            "promoting".to_string()
        } else {
            format!("going to {weight}")
        };
        // Gathering evidence is progress: the evidence deadline bounds the wait, and the
        // progress deadline still ends a run whose canary stops being ready meanwhile.
        self.progressed();
        if waited <= deadline {
            let message = format!("holding at {current} before {before}: {}", report.summary);
            self.wait_for_evidence(message, waited_since.is_none(), &report);
            return false;
        }
        let late = format!(
            "no evidence of health within spec.analysis.evidence.deadline ({})",
            rule.deadline
        );
        match rule.on_deadline {
            EvidenceDeadlineAction::Hold => {
                let message = format!(
                    "{late}: holding at {current} for a person (`weir promote` or `weir abort`); {}",
                    report.summary
                );
                let starts = !self.status.message.starts_with(&late);
                if starts {
                    self.notify(Severity::Warn, message.clone(), &Evidence::default());
                }
                self.wait_for_evidence(message, starts, &report);
                false
            }
            EvidenceDeadlineAction::Rollback => {
                self.fail(
                    Failure::Forced(StoppedBy::Deadline),
                    format!(
                        "{late}: rolling back as onDeadline says; {}",
                        report.summary
                    ),
                    rule_evidence(&report),
                );
                false
            }
            EvidenceDeadlineAction::Promote => {
                self.status.evidence_wait_since = None;
                self.progressed();
                self.event(
                    EventReason::EvidenceShown,
                    format!(
                        "{late}: {before} anyway as onDeadline says, WITHOUT evidence of health; {}",
                        report.summary
                    ),
                    rule_evidence(&report),
                );
                true
            }
        }
    }

    /// The judges' evidence of health that lets the run go to `weight` (or promote), as the
    /// evidence of the event that moves it: empty when the evidence rule does not apply there
    /// or no judge watches the run.
    pub(super) fn health_shown(&self, weight: Weight, promotion: bool) -> Evidence {
        match &self.evidence {
            Some(report)
                if report.healthy
                    && self.spec.analysis.evidence.required_for(weight, promotion) =>
            {
                rule_evidence(report)
            }
            _ => Evidence::default(),
        }
    }

    /// Holds for evidence: an event when this stage of the wait `starts`; afterwards only the
    /// status message is kept current (counts move every tick; the history keeps the start and
    /// the end of the wait).
    fn wait_for_evidence(&mut self, message: String, starts: bool, report: &EvidenceReport) {
        if starts {
            self.event(
                EventReason::WaitingForEvidence,
                message,
                rule_evidence(report),
            );
        } else {
            self.status.message = message;
        }
    }
}

/// The name under which the history records the judges' report to the evidence rule.
pub const EVIDENCE_RULE_JUDGE: &str = "evidence-rule";

/// The judges' report to the evidence rule as an event's evidence (a verdict of
/// [`EVIDENCE_RULE_JUDGE`]: pass once health is shown, inconclusive while it is not), so the
/// history keeps the evidence of health that gated a step or the promotion (docs/DASHBOARD.md).
fn rule_evidence(report: &EvidenceReport) -> Evidence {
    Evidence {
        verdict: Some(JudgeVerdict {
            judge: EVIDENCE_RULE_JUDGE.into(),
            outcome: if report.healthy {
                VerdictOutcome::Pass
            } else {
                VerdictOutcome::Inconclusive
            },
            evidence: serde_json::json!({
                "healthy": report.healthy,
                "summary": report.summary,
            }),
        }),
        ..Evidence::default()
    }
}

/// A duration in whole seconds, minutes or hours for messages (`45s`, `12m`, `1h5m`).
fn short_duration(duration: SignedDuration) -> String {
    let seconds = duration.as_secs().max(0);
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        _ if seconds % 3600 / 60 == 0 => format!("{}h", seconds / 3600),
        _ => format!("{}h{}m", seconds / 3600, seconds % 3600 / 60),
    }
}

/// What the history says about entries applied late: nothing when all were on time (within a
/// second), else which entries and by how much, so downtime shows in the history.
fn lateness_note(fired: &[TriggeredEntry]) -> String {
    let late: Vec<String> = fired
        .iter()
        .filter(|entry| entry.lateness() >= SignedDuration::from_secs(1))
        .map(|entry| {
            format!(
                "{} due at {} was {:#} late",
                entry.weight,
                entry.at,
                SignedDuration::from_secs(entry.lateness().as_secs())
            )
        })
        .collect();
    match late.len() {
        0 => String::new(),
        1 if fired.len() == 1 => format!(" ({})", late[0]),
        _ => format!(
            "; overdue entries applied at once at the latest weight due: {}",
            late.join(", ")
        ),
    }
}
