//! The status a reconcile writes: counts, phase and message, conditions, the progress deadline,
//! and what is collected (old ReplicaSets and runs) or scaled (a workloadRef) on the way.

use super::*;

impl Pass<'_> {
    /// The `workloadRef` Deployment's size: `onsuccess` takes it to 0 once the Rollout is
    /// Healthy, `progressively` by as many pods as the Rollout has available; `never` (the
    /// default) leaves it.
    fn scale_workload(&mut self, phase: &str) {
        let Some(reference) = &self.observed.rollout.spec.workload_ref else {
            return;
        };
        let replicas = match reference.scale_down.as_deref() {
            Some("onsuccess") if phase == "Healthy" => 0,
            Some("progressively") => (self.replicas - self.status.available_replicas).max(0),
            _ => return,
        };
        self.actions.push(Action::ScaleWorkload { replicas });
    }

    /// Old ReplicaSets beyond `revisionHistoryLimit` (scaled down, no deadline pending) and
    /// finished runs beyond the history limits go, oldest first, as Argo collects them.
    fn collect_garbage(&mut self) {
        let spec = &self.observed.rollout.spec;
        let keep = spec
            .revision_history_limit
            .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT)
            .max(0);
        let mut old: Vec<&ReplicaSetView> = self
            .observed
            .replica_sets
            .iter()
            .filter(|rs| {
                rs.hash != self.hash
                    && rs.hash != self.status.stable_rs
                    && rs.replicas == 0
                    && rs.status_replicas == 0
                    && rs.scale_down_deadline.is_none()
            })
            .collect();
        old.sort_by_key(|rs| std::cmp::Reverse(rs.revision));
        let doomed: Vec<String> = old
            .iter()
            .skip(usize::try_from(keep).unwrap_or(usize::MAX))
            .map(|rs| rs.name.clone())
            .collect();
        for name in doomed {
            self.actions.push(Action::DeleteReplicaSet { name });
        }
        let limits = spec.analysis.as_ref();
        let successful = limits
            .and_then(|limits| limits.successful_run_history_limit)
            .unwrap_or(DEFAULT_RUN_HISTORY_LIMIT);
        let unsuccessful = limits
            .and_then(|limits| limits.unsuccessful_run_history_limit)
            .unwrap_or(DEFAULT_RUN_HISTORY_LIMIT);
        for (wanted_success, keep) in [(true, successful), (false, unsuccessful)] {
            let mut finished: Vec<&RunView> = self
                .observed
                .runs
                .iter()
                .filter(|run| {
                    run_completed(run) && (run.phase == Some(Phase::Successful)) == wanted_success
                })
                .collect();
            finished.sort_by_key(|run| std::cmp::Reverse(run.created));
            let doomed: Vec<String> = finished
                .iter()
                .skip(usize::try_from(keep.max(0)).unwrap_or(usize::MAX))
                .map(|run| run.name.clone())
                .collect();
            for name in doomed {
                self.actions.push(Action::DeleteRun { name });
            }
        }
    }

    /// Counts, phase, message and conditions, from what was observed and decided.
    pub(super) fn finish(mut self, strategy: &crate::argo::types::Strategy) -> Sync {
        self.collect_garbage();
        let now = self.observed.now;
        let new_rs = self.rs(&self.hash).cloned();
        let all = self.observed.replica_sets;
        self.status.replicas = all.iter().map(|rs| rs.status_replicas).sum();
        self.status.updated_replicas = new_rs.as_ref().map_or(0, |rs| rs.status_replicas);
        self.status.ready_replicas = all.iter().map(|rs| rs.ready).sum();
        let blue_green = strategy.blue_green.is_some();
        if blue_green {
            let active = self
                .rs(&self.status.blue_green.active_selector.clone())
                .cloned();
            self.status.available_replicas = active.as_ref().map_or(0, |rs| rs.available);
            self.status.hpa_replicas = active.as_ref().map_or(0, |rs| rs.status_replicas);
        } else {
            self.status.available_replicas = all.iter().map(|rs| rs.available).sum();
            self.status.hpa_replicas = self.status.replicas;
        }
        self.status.selector = selector_text(self.observed.rollout.spec.selector.as_ref());
        if blue_green && !self.status.blue_green.active_selector.is_empty() {
            let hash = format!(
                "{POD_TEMPLATE_HASH_LABEL}={}",
                self.status.blue_green.active_selector
            );
            self.status.selector = if self.status.selector.is_empty() {
                hash
            } else {
                format!("{},{hash}", self.status.selector)
            };
        }
        let updated_available = new_rs.as_ref().map_or(0, |rs| rs.available);
        // Progress: a ReplicaSet created or scaled, or pods that became available or ready.
        let before = &self.observed.status;
        let moved = self.actions.iter().any(|action| {
            matches!(
                action,
                Action::CreateReplicaSet { .. } | Action::ScaleReplicaSet { .. }
            )
        }) || (
            before.updated_replicas,
            before.available_replicas,
            before.ready_replicas,
        ) != (
            self.status.updated_replicas,
            self.status.available_replicas,
            self.status.ready_replicas,
        );
        if moved {
            self.status
                .conditions
                .retain(|c| c.reason != "ProgressDeadlineExceeded");
        }
        let (phase, message) = self.phase(strategy, updated_available);
        let rs_name = new_rs.as_ref().map_or(String::new(), |rs| rs.name.clone());
        let (phase, message) = self.progress_deadline(phase, message, moved, &rs_name);
        if phase != "Degraded" {
            let (status, reason, message) = if phase == "Healthy" {
                (
                    "True",
                    "NewReplicaSetAvailable",
                    format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
                )
            } else if phase == "Paused" {
                ("Unknown", "RolloutPaused", "Rollout is paused".to_string())
            } else {
                (
                    "True",
                    "ReplicaSetUpdated",
                    format!("ReplicaSet \"{rs_name}\" is progressing."),
                )
            };
            set_condition(
                &mut self.status,
                "Progressing",
                status,
                reason,
                &message,
                now,
            );
        }
        let available = self.status.available_replicas >= self.replicas;
        let (status, text) = if available {
            ("True", "Rollout has minimum availability")
        } else {
            ("False", "Rollout does not have minimum availability")
        };
        set_condition(
            &mut self.status,
            "Available",
            status,
            "AvailableReason",
            text,
            now,
        );
        let completed = self.status.stable_rs == self.hash;
        set_condition(
            &mut self.status,
            "Completed",
            if completed { "True" } else { "False" },
            "RolloutCompleted",
            if completed {
                "Rollout completed update to revision"
            } else {
                "Rollout not completed"
            },
            now,
        );
        let healthy = phase == "Healthy";
        set_condition(
            &mut self.status,
            "Healthy",
            if healthy { "True" } else { "False" },
            "RolloutHealthy",
            if healthy {
                "Rollout is healthy"
            } else {
                "Rollout is not healthy"
            },
            now,
        );
        let paused = !self.status.pause_conditions.is_empty()
            || self.observed.rollout.spec.paused == Some(true);
        set_condition(
            &mut self.status,
            "Paused",
            if paused { "True" } else { "False" },
            if paused {
                "RolloutPaused"
            } else {
                "RolloutResumed"
            },
            if paused {
                "Rollout is paused"
            } else {
                "Rollout is resumed"
            },
            now,
        );
        if self.observed.status.phase != phase {
            match phase.as_str() {
                "Paused" if !self.status.pause_conditions.is_empty() => {
                    let reason = self.status.pause_conditions[0].reason.clone();
                    self.event(
                        false,
                        "RolloutPaused",
                        format!("Rollout is paused ({reason})"),
                    );
                }
                _ => {}
            }
        }
        let message = if self.awaiting_evidence && phase == "Progressing" {
            format!(
                "waiting for evidence: {}: health promotes only after an analysis of this \
                 revision succeeded",
                crate::argo::PROMOTE_ON_ANNOTATION
            )
        } else {
            message
        };
        self.scale_workload(&phase);
        self.status.phase = phase;
        self.status.message = message;
        Sync {
            actions: self.actions,
            status: self.status,
            events: self.events,
            requeue_after: self.requeue,
        }
    }
}

impl Pass<'_> {
    /// Argo's progress deadline: a Rollout whose ReplicaSets make no progress (no pods created,
    /// scaled or becoming available) for `progressDeadlineSeconds` (600) while it waits for them
    /// is Degraded with `ProgressDeadlineExceeded`, and aborted with `progressDeadlineAbort`.
    /// Pauses and analyses are not waits for pods and never time out here. The last progress
    /// is the Progressing condition's `lastUpdateTime`, refreshed on every move.
    fn progress_deadline(
        &mut self,
        phase: String,
        message: String,
        moved: bool,
        rs_name: &str,
    ) -> (String, String) {
        const WAITING_FOR_PODS: [&str; 3] = [
            "more replicas need to be updated",
            "updated replicas are still becoming available",
            "old replicas are pending termination",
        ];
        let now = self.observed.now;
        let progressing = self
            .status
            .conditions
            .iter_mut()
            .find(|c| c.kind == "Progressing" && c.reason == "ReplicaSetUpdated");
        if let Some(condition) = progressing
            && moved
        {
            condition.last_update_time = now.to_string();
        }
        if phase != "Progressing" || !WAITING_FOR_PODS.contains(&message.as_str()) {
            return (phase, message);
        }
        let Some(last) = self
            .status
            .conditions
            .iter()
            .find(|c| c.kind == "Progressing" && c.reason == "ReplicaSetUpdated")
            .and_then(|c| c.last_update_time.parse::<Timestamp>().ok())
        else {
            return (phase, message);
        };
        let seconds = self
            .observed
            .rollout
            .spec
            .progress_deadline_seconds
            .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
        let deadline = last
            .checked_add(SignedDuration::from_secs(seconds))
            .unwrap_or(last);
        if now < deadline {
            self.requeue(deadline.duration_since(now));
            return (phase, message);
        }
        let text = format!("ReplicaSet \"{rs_name}\" has timed out progressing.");
        set_condition(
            &mut self.status,
            "Progressing",
            "False",
            "ProgressDeadlineExceeded",
            &text,
            now,
        );
        if self.observed.rollout.spec.progress_deadline_abort == Some(true)
            && !self.status.abort
            && self.hash != self.status.stable_rs
        {
            self.event(true, "RolloutAborted", text.clone());
            self.status.abort = true;
        }
        (
            "Degraded".into(),
            format!("ProgressDeadlineExceeded: {text}"),
        )
    }
}

impl Pass<'_> {
    /// Argo's `CalculateRolloutPhase` for the status decided: the first that holds of Degraded,
    /// Paused, Progressing, Healthy, with its message.
    fn phase(
        &self,
        strategy: &crate::argo::types::Strategy,
        updated_available: i64,
    ) -> (String, String) {
        let spec = &self.observed.rollout.spec;
        phase_of(
            &self.status,
            &PhaseInputs {
                user_paused: spec.paused == Some(true),
                restarting: spec
                    .restart_at
                    .as_ref()
                    .is_some_and(|at| self.status.restarted_at.as_ref() != Some(at)),
                replicas: self.replicas,
                updated_available,
                blue_green: strategy.blue_green.is_some(),
                routed: strategy
                    .canary
                    .as_ref()
                    .is_some_and(|canary| canary.traffic_routing.is_some()),
                post_analysis: strategy
                    .blue_green
                    .as_ref()
                    .is_some_and(|bg| bg.post_promotion_analysis.is_some()),
            },
        )
    }
}

/// What the phase depends on besides the status.
struct PhaseInputs {
    user_paused: bool,
    restarting: bool,
    replicas: i64,
    updated_available: i64,
    blue_green: bool,
    routed: bool,
    post_analysis: bool,
}

/// Argo's `CalculateRolloutPhase`: the first that holds of Degraded, Paused, Progressing, Healthy.
fn phase_of(status: &Status, inputs: &PhaseInputs) -> (String, String) {
    let PhaseInputs {
        user_paused,
        restarting,
        replicas,
        updated_available,
        blue_green,
        routed,
        post_analysis,
    } = *inputs;
    for condition in &status.conditions {
        if condition.kind == "InvalidSpec" {
            return (
                "Degraded".into(),
                format!("InvalidSpec: {}", condition.message),
            );
        }
        if condition.reason == "RolloutAborted" || condition.reason == "ProgressDeadlineExceeded" {
            return (
                "Degraded".into(),
                format!("{}: {}", condition.reason, condition.message),
            );
        }
    }
    if user_paused {
        return ("Paused".into(), "manually paused".into());
    }
    if let Some(pause) = status.pause_conditions.first() {
        return ("Paused".into(), pause.reason.clone());
    }
    if restarting {
        return ("Progressing".into(), "rollout is restarting".into());
    }
    let progressing = |message: &str| ("Progressing".to_string(), message.to_string());
    if status.updated_replicas < replicas {
        return progressing("more replicas need to be updated");
    }
    if updated_available < status.updated_replicas {
        return progressing("updated replicas are still becoming available");
    }
    if blue_green {
        if status.blue_green.active_selector.is_empty()
            || status.blue_green.active_selector != status.current_pod_hash
        {
            return progressing("active service cutover pending");
        }
        if status.stable_rs != status.current_pod_hash {
            return progressing(if post_analysis {
                "waiting for analysis to complete"
            } else {
                "waiting for post-promotion verification to complete"
            });
        }
    } else {
        // With a router, old pods may stay for their scale-down delay without traffic.
        if !routed && status.replicas > status.updated_replicas {
            return progressing("old replicas are pending termination");
        }
        if status.stable_rs != status.current_pod_hash {
            return progressing("waiting for all steps to complete");
        }
    }
    ("Healthy".into(), String::new())
}

/// Sets a condition; its times change only when what it says changes.
pub(super) fn set_condition(
    status: &mut Status,
    kind: &str,
    value: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let now = now.to_string();
    if let Some(existing) = status.conditions.iter_mut().find(|c| c.kind == kind) {
        if existing.status == value && existing.reason == reason && existing.message == message {
            return;
        }
        if existing.status != value {
            existing.last_transition_time = now.clone();
        }
        existing.status = value.into();
        existing.reason = reason.into();
        existing.message = message.into();
        existing.last_update_time = now;
        return;
    }
    status.conditions.push(Condition {
        kind: kind.into(),
        status: value.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: now.clone(),
        last_update_time: now,
    });
}

/// `matchLabels` as `key=value,...` (sorted), as a status selector is written.
fn selector_text(selector: Option<&Value>) -> String {
    let Some(labels) = selector
        .and_then(|selector| selector.get("matchLabels"))
        .and_then(Value::as_object)
    else {
        return String::new();
    };
    let mut pairs: Vec<String> = labels
        .iter()
        .map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or_default()))
        .collect();
    pairs.sort();
    pairs.join(",")
}
