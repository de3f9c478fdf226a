//! What the engine needs from the world, as traits: a target (where traffic or exposure is
//! changed and readiness observed), a metric source, a hook runner and a notifier.
//!
//! Providers return boxed futures so the engine can hold them as trait objects, one per target
//! kind, without becoming generic over every provider.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use weir_core::FieldError;
use weir_core::machine::{Effect, Notification};
use weir_core::model::{CheckResult, Event, HookResult, Metric, Rollout, RolloutStatus, Webhook};
use weir_store::RolloutKey;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a target reports before each tick.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetObservation {
    /// The revision of the canary's current definition.
    pub canary_revision: Option<String>,
    /// The revision of the primary's definition (used at set-up).
    pub primary_revision: Option<String>,
    /// Whether the primary serves.
    pub primary_ready: bool,
    /// Whether the canary serves.
    pub canary_ready: bool,
}

/// Whether trying again can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// It may work next time (a timeout, a refused connection, a 5xx): the engine counts it and
    /// tries again at the next tick.
    Transient,
    /// It can never work as things are (settings the target cannot use, a program that does
    /// not exist, a receiver that refuses the request): the engine stops trying; a target's
    /// permanent failure rolls the run back with this reason.
    Permanent,
}

/// A failure of a provider: what happened, whether trying again can help, and its cause.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message} ({})", match .kind { ErrorKind::Transient => "transient, will retry", ErrorKind::Permanent => "permanent" })]
pub struct ProviderError {
    /// Whether trying again can help.
    pub kind: ErrorKind,
    /// What happened, in words.
    pub message: String,
    /// The underlying error, when there is one.
    #[source]
    pub source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl ProviderError {
    /// A failure that may go away by itself.
    pub fn transient(message: impl Into<String>) -> ProviderError {
        ProviderError {
            kind: ErrorKind::Transient,
            message: message.into(),
            source: None,
        }
    }

    /// A failure that trying again cannot fix.
    pub fn permanent(message: impl Into<String>) -> ProviderError {
        ProviderError {
            kind: ErrorKind::Permanent,
            message: message.into(),
            source: None,
        }
    }

    /// Target settings the provider cannot use: permanent, since trying again cannot help
    /// (they were checked when the rollout was applied, so this means a rollout stored by an
    /// older, more lenient weir).
    pub fn unusable(errors: Vec<FieldError>) -> ProviderError {
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        ProviderError::permanent(format!("unusable target settings: {}", errors.join("; ")))
    }

    /// The same failure, caused by `source`.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// Whether trying again cannot help.
    pub fn is_permanent(&self) -> bool {
        self.kind == ErrorKind::Permanent
    }
}

/// Where exposure is changed: the embedded router, Kubernetes, flags.
pub trait TargetProvider: Send + Sync + 'static {
    /// Checks the target's own settings (`spec.target`) before a rollout is accepted.
    fn validate(&self, rollout: &Rollout) -> Vec<FieldError>;

    /// What this server's policy refuses in a valid rollout (asked after [`validate`] passed):
    /// each refusal names its field and the setting that would allow it. Nothing by default.
    ///
    /// [`validate`]: TargetProvider::validate
    fn refuse(&self, _rollout: &Rollout) -> Vec<FieldError> {
        Vec::new()
    }

    /// Makes the world match a stored status (after a restart, or when a rollout is applied):
    /// routes, and which versions run. Idempotent.
    fn reconcile<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<(), ProviderError>>;

    /// Revisions and readiness, before a tick.
    fn observe<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
    ) -> BoxFuture<'a, Result<TargetObservation, ProviderError>>;

    /// Applies one desired-state effect (`SetRoute`, `ScaleCanary`, `Promote`, `Finalize`);
    /// `status` is the status committed with it.
    fn apply<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        status: &'a RolloutStatus,
        effect: &'a Effect,
    ) -> BoxFuture<'a, Result<(), ProviderError>>;

    /// Releases everything held for a rollout that is gone (listeners, processes).
    fn remove<'a>(&'a self, key: &'a RolloutKey) -> BoxFuture<'a, ()>;

    /// What both versions served since the previous call, for the judges that watch a run
    /// continuously (about once a second). `slow_above_ms` counts requests slower than that as
    /// `slow`. `None` when this target cannot tell (the default).
    fn judge_window<'a>(
        &'a self,
        _key: &'a RolloutKey,
        _rollout: &'a Rollout,
        _slow_above_ms: Option<f64>,
    ) -> BoxFuture<'a, Option<weir_analysis::Window>> {
        Box::pin(async { None })
    }

    /// What the primary served before the current run started, as the judges' prior
    /// (`slow_above_ms` as for [`TargetProvider::judge_window`]), asked once at the start of
    /// each judged run; the next [`TargetProvider::judge_window`] counts from the same moment,
    /// so nothing is counted twice. `None` when this target cannot tell (the default).
    fn judge_baseline<'a>(
        &'a self,
        _key: &'a RolloutKey,
        _rollout: &'a Rollout,
        _slow_above_ms: Option<f64>,
    ) -> BoxFuture<'a, Option<weir_analysis::Baseline>> {
        Box::pin(async { None })
    }

    /// What the target did on its own since the previous call that belongs in the rollout's
    /// history (where its router listens, a version started again on another port), oldest
    /// first. The engine records each as a `Target` event after the job that caused it.
    fn take_notes<'a>(&'a self, _key: &'a RolloutKey) -> BoxFuture<'a, Vec<String>> {
        Box::pin(async { Vec::new() })
    }

    /// Adds what this target measures itself to the engine's metrics (the embedded router's
    /// traffic, for local targets). Called once per engine, when it is built.
    fn register_metrics(&self, _telemetry: &crate::Telemetry) {}
}

/// Evaluates metric checks.
pub trait MetricSource: Send + Sync + 'static {
    /// Whether this source evaluates `metric` of `rollout`.
    fn handles(&self, rollout: &Rollout, metric: &Metric) -> bool;

    /// Problems with the metrics this source would evaluate (a query that cannot be rendered,
    /// a provider it cannot reach), reported when the rollout is applied.
    fn validate(&self, _rollout: &Rollout) -> Vec<FieldError> {
        Vec::new()
    }

    /// What this server's policy refuses in a valid rollout's metric servers (a
    /// `metricsServer` whose literal address the outbound policy refuses), asked with the
    /// target's refusals. Nothing by default.
    fn refuse(&self, _rollout: &Rollout) -> Vec<FieldError> {
        Vec::new()
    }

    /// The check's result for the tick starting now.
    fn check<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        metric: &'a Metric,
    ) -> BoxFuture<'a, CheckResult>;

    /// What both versions served since the previous call in run `run`, for the continuous
    /// judges, when this source can count requests (`None` otherwise, the default). Asked
    /// before the target's own [`TargetProvider::judge_window`].
    fn judge_window<'a>(
        &'a self,
        _key: &'a RolloutKey,
        _rollout: &'a Rollout,
        _run: u64,
    ) -> BoxFuture<'a, Option<weir_analysis::Window>> {
        Box::pin(async { None })
    }

    /// Whether this source reads the counts `rollout` names for its judges
    /// (`spec.analysis.judgeCounts`). The judges then get their windows from the first source
    /// that does, and from no other (false by default).
    fn reads_judge_counts(&self, _rollout: &Rollout) -> bool {
        false
    }
}

/// Calls webhooks.
pub trait HookRunner: Send + Sync + 'static {
    /// What this server's policy refuses in a valid rollout's webhooks (a URL whose literal
    /// address the outbound policy refuses), asked with the target's refusals: each names its
    /// field and the setting that would allow it. Nothing by default.
    fn refuse(&self, _rollout: &Rollout) -> Vec<FieldError> {
        Vec::new()
    }

    /// Calls one webhook and reports its answer.
    fn call<'a>(
        &'a self,
        key: &'a RolloutKey,
        status: &'a RolloutStatus,
        hook: &'a Webhook,
        delivery_id: &'a str,
    ) -> BoxFuture<'a, HookResult>;

    /// Calls one `event` webhook about `event` (Flagger puts its message, type and time in the
    /// payload's metadata). By default the same as [`HookRunner::call`].
    fn call_for_event<'a>(
        &'a self,
        key: &'a RolloutKey,
        status: &'a RolloutStatus,
        hook: &'a Webhook,
        delivery_id: &'a str,
        _event: &'a Event,
    ) -> BoxFuture<'a, HookResult> {
        self.call(key, status, hook, delivery_id)
    }
}

/// Tells people.
pub trait Notifier: Send + Sync + 'static {
    /// What this server's policy refuses in a valid rollout's alerts (an alert provider whose
    /// literal address the outbound policy refuses), asked with the target's refusals.
    /// Nothing by default.
    fn refuse(&self, _rollout: &Rollout) -> Vec<FieldError> {
        Vec::new()
    }

    /// Sends one notification to the rollout's alert providers (at least once; receivers
    /// de-duplicate on its delivery id).
    fn notify<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        notification: &'a Notification,
    ) -> BoxFuture<'a, Result<(), ProviderError>>;
}

/// The providers an engine runs with.
#[derive(Clone)]
pub struct Providers {
    /// One target provider per target kind this process serves.
    pub targets: Vec<(weir_core::model::TargetKind, Arc<dyn TargetProvider>)>,
    /// Metric sources, asked in order; the first that handles a metric evaluates it.
    pub metrics: Vec<Arc<dyn MetricSource>>,
    /// The webhook caller.
    pub hooks: Arc<dyn HookRunner>,
    /// The notifier.
    pub notifier: Arc<dyn Notifier>,
    /// Metric templates, alert providers and secrets that rollouts refer to by name.
    /// Shared with the providers that read it, so a change is seen by all of them at once.
    pub catalog: weir_core::catalog::SharedCatalog,
}

impl Providers {
    /// Providers with the given hook runner and notifier, and no target or metric source yet:
    /// adapters add theirs (`weir_local::LocalTargets::add_to`, [`Providers::with_metrics`]).
    pub fn new(
        catalog: impl Into<weir_core::catalog::SharedCatalog>,
        hooks: Arc<dyn HookRunner>,
        notifier: Arc<dyn Notifier>,
    ) -> Providers {
        Providers {
            targets: Vec::new(),
            metrics: Vec::new(),
            hooks,
            notifier,
            catalog: catalog.into(),
        }
    }

    /// These providers with `source` asked after the metric sources already there.
    pub fn with_metrics(mut self, source: Arc<dyn MetricSource>) -> Providers {
        self.metrics.push(source);
        self
    }

    /// These providers with `source` asked before the metric sources already there, which no
    /// longer report (at validation and refusal) the metrics `source` handles: a source of
    /// provider types the others refuse as unknown.
    pub fn with_metrics_first(mut self, source: Arc<dyn MetricSource>) -> Providers {
        let others = std::mem::take(&mut self.metrics);
        self.metrics.push(Arc::clone(&source));
        for other in others {
            self.metrics.push(Arc::new(Beside {
                first: Arc::clone(&source),
                other,
            }));
        }
        self
    }

    /// The provider for a rollout's target kind.
    pub fn target(&self, rollout: &Rollout) -> Option<&Arc<dyn TargetProvider>> {
        self.targets
            .iter()
            .find(|(kind, _)| *kind == rollout.spec.target.kind())
            .map(|(_, provider)| provider)
    }
}

/// A metric source with the metrics `first` handles left out of what it reports at validation
/// and refusal ([`Providers::with_metrics_first`]).
struct Beside {
    first: Arc<dyn MetricSource>,
    other: Arc<dyn MetricSource>,
}

impl Beside {
    /// `errors` without those about a metric `first` handles.
    fn without_firsts(&self, rollout: &Rollout, errors: Vec<FieldError>) -> Vec<FieldError> {
        let firsts: Vec<String> = rollout
            .spec
            .analysis
            .metrics
            .iter()
            .enumerate()
            .filter(|(_, metric)| self.first.handles(rollout, metric))
            .map(|(index, _)| format!("spec.analysis.metrics[{index}]"))
            .collect();
        errors
            .into_iter()
            .filter(|error| {
                !firsts.iter().any(|prefix| {
                    error
                        .path
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
                })
            })
            .collect()
    }
}

impl MetricSource for Beside {
    fn handles(&self, rollout: &Rollout, metric: &Metric) -> bool {
        self.other.handles(rollout, metric)
    }

    fn validate(&self, rollout: &Rollout) -> Vec<FieldError> {
        self.without_firsts(rollout, self.other.validate(rollout))
    }

    fn refuse(&self, rollout: &Rollout) -> Vec<FieldError> {
        self.without_firsts(rollout, self.other.refuse(rollout))
    }

    fn check<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        metric: &'a Metric,
    ) -> BoxFuture<'a, CheckResult> {
        self.other.check(key, rollout, metric)
    }

    fn judge_window<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        run: u64,
    ) -> BoxFuture<'a, Option<weir_analysis::Window>> {
        self.other.judge_window(key, rollout, run)
    }

    fn reads_judge_counts(&self, rollout: &Rollout) -> bool {
        self.other.reads_judge_counts(rollout)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use weir_core::document::{Document, load};
    use weir_core::model::CheckOutcome;

    /// A source of the metrics named `name`, refusing every other metric at validation.
    struct Named(&'static str);

    impl MetricSource for Named {
        fn handles(&self, _rollout: &Rollout, metric: &Metric) -> bool {
            metric.name == self.0
        }

        fn validate(&self, rollout: &Rollout) -> Vec<FieldError> {
            rollout
                .spec
                .analysis
                .metrics
                .iter()
                .enumerate()
                .filter(|(_, metric)| metric.name != self.0)
                .map(|(index, _)| {
                    FieldError::new(
                        format!("spec.analysis.metrics[{index}].templateRef"),
                        format!("{} does not know it", self.0),
                    )
                })
                .collect()
        }

        fn check<'a>(
            &'a self,
            _key: &'a RolloutKey,
            _rollout: &'a Rollout,
            metric: &'a Metric,
        ) -> BoxFuture<'a, CheckResult> {
            Box::pin(async move {
                CheckResult {
                    name: metric.name.clone(),
                    outcome: CheckOutcome::Pass,
                    value: None,
                    message: self.0.to_string(),
                }
            })
        }
    }

    struct Silent;

    impl HookRunner for Silent {
        fn call<'a>(
            &'a self,
            _key: &'a RolloutKey,
            _status: &'a RolloutStatus,
            _hook: &'a Webhook,
            _delivery_id: &'a str,
        ) -> BoxFuture<'a, HookResult> {
            panic!("no hook is called")
        }
    }

    impl Notifier for Silent {
        fn notify<'a>(
            &'a self,
            _key: &'a RolloutKey,
            _rollout: &'a Rollout,
            _notification: &'a Notification,
        ) -> BoxFuture<'a, Result<(), ProviderError>> {
            panic!("nothing is notified")
        }
    }

    #[test]
    fn a_source_asked_first_keeps_the_others_from_refusing_its_metrics() {
        let rollout = match load(
            br#"
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: web}
spec:
  target: {kind: flag}
  plan: {canary: {stepWeight: 10}}
  analysis:
    metrics:
      - {name: outside, thresholdRange: {max: 1}, query: "x"}
      - {name: inside, thresholdRange: {max: 1}, query: "y"}
"#,
        )
        .remove(0)
        .unwrap()
        .document
        {
            Document::Rollout(rollout) => *rollout,
            other => panic!("{other:?}"),
        };
        let silent = Arc::new(Silent);
        let providers = Providers::new(
            weir_core::catalog::Catalog::default(),
            silent.clone(),
            silent,
        )
        .with_metrics(Arc::new(Named("inside")))
        .with_metrics_first(Arc::new(Named("outside")));
        assert_eq!(providers.metrics.len(), 2);
        // Each metric is handled by its own source, the first asked first.
        let metrics = &rollout.spec.analysis.metrics;
        assert!(providers.metrics[0].handles(&rollout, &metrics[0]));
        assert!(providers.metrics[1].handles(&rollout, &metrics[1]));
        assert!(!providers.metrics[1].handles(&rollout, &metrics[0]));
        // The first refuses `inside` (which it does not handle); the other no longer refuses
        // `outside`.
        let errors: Vec<(String, String)> = providers
            .metrics
            .iter()
            .flat_map(|source| source.validate(&rollout))
            .map(|error| (error.path, error.message))
            .collect();
        assert_eq!(
            errors,
            [(
                "spec.analysis.metrics[1].templateRef".to_string(),
                "outside does not know it".to_string()
            )]
        );
        // Checks go through to the source wrapped.
        let key = RolloutKey::new("default", "web");
        let checked = run_now(providers.metrics[1].check(&key, &rollout, &metrics[1]));
        assert_eq!(checked.message, "inside");
    }

    /// Runs a future that never waits (the sources here answer at once).
    fn run_now<T>(future: BoxFuture<'_, T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }
}
