//! How a run ends: promotion (stepwise or at once), finalising on the new primary, holding for a
//! person, and rolling back.

use super::*;

impl Machine<'_> {
    pub(super) fn promote(&mut self, message: String, evidence: Evidence) {
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
        self.status.evidence_wait_since = None;
        self.set_phase(Phase::Promoting);
        self.progressed();
        self.event(EventReason::Promoting, message, evidence);
    }

    pub(super) fn promoting_tick(&mut self, observations: &Observations) {
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
                self.route_all_to_primary();
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

    pub(super) fn finalising_tick(&mut self) {
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

    pub(super) fn held_tick(&mut self, observations: &Observations) {
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
                Failure::Forced(StoppedBy::Hook),
                "rollback requested by webhook while held".into(),
                Evidence::default(),
            );
        }
    }

    pub(super) fn fail(&mut self, failure: Failure, message: String, evidence: Evidence) {
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
        self.status.paused = false;
        self.status.waiting_for_resume = false;
        self.status.pause_until = None;
        self.status.evidence_wait_since = None;
        self.status.skip_analysis = false;
        self.status.stopped_by = Some(failure.stopped_by());
        self.route_all_to_primary();
        self.effects.push(Effect::ScaleCanary(Scale::Down));
        self.set_phase(Phase::Failed);
        self.run_hooks(HookType::PostRollout);
        let message = format!("run {} rolled back: {message}", self.status.run);
        self.notify(Severity::Error, message.clone(), &evidence);
        self.event(EventReason::RolledBack, message, evidence);
    }
}
