//! The desired state: what to roll out, how, and how to judge it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{RolloutStatus, Target};
use crate::units::{GoDuration, Weight};

/// A durable, named resource: one target, one plan, one analysis, and a status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rollout {
    /// Always `weir.dev/v1alpha1`.
    pub api_version: String,
    /// Always `Rollout`.
    pub kind: String,
    /// Name, namespace, labels and annotations.
    pub metadata: ObjectMeta,
    /// The desired rollout.
    pub spec: RolloutSpec,
    /// Where the rollout stands; written by weir, never by users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RolloutStatus>,
}

/// Kubernetes-style object metadata. Fields weir does not know are kept as they are.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// The rollout's name, unique within its namespace.
    #[serde(default)]
    pub name: String,
    /// The namespace; `default` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Any other metadata (uid, resourceVersion, ...), carried through untouched.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl ObjectMeta {
    /// The namespace, `default` when none is set.
    pub fn namespace_or_default(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }
}

/// The desired rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutSpec {
    /// What exposure means: local routes, Kubernetes Deployments, or flag variations.
    pub target: Target,
    /// How exposure grows.
    pub plan: Plan,
    /// How the canary is judged.
    #[serde(default)]
    pub analysis: Analysis,
    /// Promote every new revision at once, without analysis.
    #[serde(default, skip_serializing_if = "is_false")]
    pub skip_analysis: bool,
    /// Freeze the rollout: no tick does anything while set.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
    /// On deletion, route everything back to the primary and undo what weir set up.
    #[serde(default, skip_serializing_if = "is_false")]
    pub revert_on_deletion: bool,
    /// Pin each client to the version it was first given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<SessionAffinity>,
}

fn is_false(value: &bool) -> bool {
    !*value
}

// === impl Plan ===

/// How exposure of the canary grows. Exactly one strategy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Plan {
    /// Weighted steps of traffic.
    Canary(CanaryPlan),
    /// Test the canary without user traffic for some iterations, then switch all at once.
    BlueGreen(IterationsPlan),
    /// Send requests matching rules to the canary for some iterations.
    AbTest(AbTestPlan),
    /// Shadow a copy of traffic to the canary for some iterations, then switch.
    Mirror(MirrorPlan),
    /// Weights at set times (a flag's audience, or traffic).
    Schedule(SchedulePlan),
}

impl Plan {
    /// The plan's strategy name as written in documents.
    pub fn strategy_name(&self) -> &'static str {
        match self {
            Plan::Canary(_) => "canary",
            Plan::BlueGreen(_) => "blueGreen",
            Plan::AbTest(_) => "abTest",
            Plan::Mirror(_) => "mirror",
            Plan::Schedule(_) => "schedule",
        }
    }
}

/// A weighted canary: exactly one of `stepWeight`, `stepWeights` or `steps`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanaryPlan {
    /// Add this much canary weight after each passing interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_weight: Option<Weight>,
    /// Go through these weights, one per passing interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_weights: Option<Vec<Weight>>,
    /// Explicit steps, each a weight and an optional pause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<CanaryStep>>,
    /// The highest canary weight before promotion (default 100%, or the last of `stepWeights`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_weight: Option<Weight>,
    /// After promotion, move traffic back to the primary by this much per interval (absent:
    /// all at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_weight_promotion: Option<Weight>,
    /// Mirror this share of traffic to the canary for one interval before the first step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_weight: Option<Weight>,
}

/// One explicit canary step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CanaryStep {
    /// The canary weight during this step.
    pub weight: Weight,
    /// Stay at this weight for a while (`{duration: 10m}`) or until resumed (`{}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Pause>,
}

/// A pause on a step: timed, or until a person resumes the rollout.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pause {
    /// How long to stay; absent means until `weir resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<GoDuration>,
}

/// A plan that runs a number of passing intervals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IterationsPlan {
    /// Passing intervals needed before the switch.
    pub iterations: u32,
}

/// A/B testing: requests matching any rule go to the canary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AbTestPlan {
    /// Passing intervals needed before promotion.
    pub iterations: u32,
    /// A request goes to the canary when any rule matches; a rule matches when all its
    /// conditions do.
    #[serde(rename = "match")]
    pub match_rules: Vec<MatchRule>,
}

/// Traffic shadowing, then a switch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MirrorPlan {
    /// Passing intervals of mirrored traffic needed before the switch.
    pub iterations: u32,
    /// The share of requests copied to the canary (default 100%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_weight: Option<Weight>,
}

/// Conditions on a request; all must hold.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MatchRule {
    /// Header name -> condition. A `cookie` header condition sees the whole Cookie header.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, StringMatch>,
    /// Cookie name -> condition on its value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cookies: BTreeMap<String, StringMatch>,
    /// Query parameter -> condition on its value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query_params: BTreeMap<String, StringMatch>,
    /// Condition on the request path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<StringMatch>,
    /// Condition on the request method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<StringMatch>,
}

/// One string condition: exactly one of the fields.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StringMatch {
    /// Equal to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<String>,
    /// Starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Ends with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
    /// Matches this regular expression (RE2-like syntax).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

/// Weights at times: an explicit list, or a template that expands to one.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SchedulePlan {
    /// Explicit `{at, weight}` entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual: Option<Vec<ScheduleEntry>>,
    /// `{start, interval, increments}`: add `increments` every interval from `start` until 100%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<ScheduleTemplate>,
}

/// One scheduled weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScheduleEntry {
    /// When (RFC 3339, e.g. `2026-12-01T09:00:00Z`).
    pub at: jiff::Timestamp,
    /// The canary (target variation) weight from then on.
    pub weight: Weight,
}

/// A schedule by rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScheduleTemplate {
    /// The first step's time.
    pub start: jiff::Timestamp,
    /// Time between steps.
    pub interval: ScheduleInterval,
    /// Weight added at each step.
    pub increments: Weight,
}

/// The intervals of a schedule template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ScheduleInterval {
    /// Every hour.
    Hourly,
    /// Every day.
    Daily,
    /// Every week.
    Weekly,
}

impl ScheduleInterval {
    /// The interval's length in seconds.
    pub fn seconds(self) -> i64 {
        match self {
            ScheduleInterval::Hourly => 3_600,
            ScheduleInterval::Daily => 86_400,
            ScheduleInterval::Weekly => 604_800,
        }
    }
}

/// Session affinity: a cookie pins a client to the version it was first given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionAffinity {
    /// Cookie that pins a client to the canary.
    pub cookie_name: String,
    /// Cookie that pins a client to the primary (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_cookie_name: Option<String>,
    /// Cookie lifetime in seconds (default 86400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<u64>,
}

// === impl Analysis ===

/// How the canary is judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Analysis {
    /// Time between analysis ticks (default 60s).
    #[serde(default = "default_interval")]
    pub interval: GoDuration,
    /// Failed checks that end the run (default 1).
    #[serde(default = "default_threshold")]
    pub threshold: u32,
    /// Count failed checks over the whole run (`total`, Flagger's way) or only in a row.
    #[serde(default)]
    pub failure_counting: FailureCounting,
    /// A run that makes no progress for this long fails (default 10m).
    #[serde(default = "default_progress_deadline")]
    pub progress_deadline: GoDuration,
    /// What a check that returns no data means.
    #[serde(default)]
    pub no_data: NoDataPolicy,
    /// What happens when the analysis fails: roll back (default) or hold the weight.
    #[serde(default)]
    pub on_failure: FailureAction,
    /// Metric checks, evaluated every tick.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
    /// Webhooks: gates, tests and notifications.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<Webhook>,
    /// Judges, by name, that watch the canary continuously.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judges: Vec<String>,
    /// Who is told what happened.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<Alert>,
    /// What promotion needs when a judge watches the run: evidence of health (weir's default)
    /// or only the absence of evidence of harm (Flagger's semantics).
    #[serde(default, skip_serializing_if = "EvidenceRule::is_default")]
    pub evidence: EvidenceRule,
    /// Where the continuous judges read both versions' request and error counts: four queries
    /// on a metric provider's backend (a MetricTemplate's provider), instead of weir's router
    /// or Prometheus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_counts: Option<JudgeCounts>,
}

impl Default for Analysis {
    fn default() -> Self {
        Analysis {
            interval: default_interval(),
            threshold: default_threshold(),
            failure_counting: FailureCounting::default(),
            progress_deadline: default_progress_deadline(),
            no_data: NoDataPolicy::default(),
            on_failure: FailureAction::default(),
            metrics: Vec::new(),
            webhooks: Vec::new(),
            judges: Vec::new(),
            alerts: Vec::new(),
            evidence: EvidenceRule::default(),
            judge_counts: None,
        }
    }
}

impl Analysis {
    /// The webhooks of one type.
    pub fn hooks_of(&self, hook_type: HookType) -> impl Iterator<Item = &Webhook> {
        self.webhooks
            .iter()
            .filter(move |hook| hook.hook_type == hook_type)
    }

    /// Whether any webhook of this type is configured.
    pub fn has_hooks(&self, hook_type: HookType) -> bool {
        self.hooks_of(hook_type).next().is_some()
    }
}

fn default_interval() -> GoDuration {
    GoDuration::from_secs(60)
}

/// Counts for the continuous judges from a metric provider (`spec.analysis.judgeCounts`).
///
/// Each query returns the number of requests (or errors) of one version in the last
/// `{{ interval }}`, which weir renders as the time since its previous read, so successive reads
/// cover the run without gaps or overlaps. The provider (type, address, Secret) is the
/// template's; its query is not used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JudgeCounts {
    /// The `MetricTemplate` whose provider answers the queries.
    pub template_ref: TemplateRef,
    /// Variables for the queries (`{{ variables.x }}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub template_variables: BTreeMap<String, String>,
    /// The canary's queries.
    #[serde(default)]
    pub canary: CountQueries,
    /// The primary's queries.
    #[serde(default)]
    pub primary: CountQueries,
    /// The least time between two reads (default 30s): each read is four queries, and hosted
    /// backends limit how often they may be asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<GoDuration>,
}

/// The time between two reads of [`JudgeCounts`] when it sets none.
pub const DEFAULT_JUDGE_COUNTS_INTERVAL: GoDuration = GoDuration::from_secs(30);

impl JudgeCounts {
    /// The least time between two reads.
    pub fn interval(&self) -> GoDuration {
        self.interval.unwrap_or(DEFAULT_JUDGE_COUNTS_INTERVAL)
    }

    /// The four queries with their field paths below `judgeCounts`, in the order weir reads
    /// them: canary requests, canary errors, primary requests, primary errors.
    pub fn queries(&self) -> [(&'static str, &str); 4] {
        [
            ("canary.requests", self.canary.requests.as_str()),
            ("canary.errors", self.canary.errors.as_str()),
            ("primary.requests", self.primary.requests.as_str()),
            ("primary.errors", self.primary.errors.as_str()),
        ]
    }

    /// The metric whose placeholders the queries are rendered with ([`crate::query::variables`]):
    /// named `judgeCounts`, with these template variables and `interval` as its window.
    pub fn as_metric(&self, interval: GoDuration) -> Metric {
        Metric {
            name: "judgeCounts".into(),
            threshold_range: None,
            template_ref: Some(self.template_ref.clone()),
            template_variables: self.template_variables.clone(),
            query: None,
            interval: Some(interval),
        }
    }
}

/// One version's count queries.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CountQueries {
    /// Requests the version served in the last `{{ interval }}`.
    #[serde(default)]
    pub requests: String,
    /// Of those, the errors (counted the same way for both versions).
    #[serde(default)]
    pub errors: String,
}

fn default_threshold() -> u32 {
    1
}

fn default_progress_deadline() -> GoDuration {
    GoDuration::from_secs(600)
}

/// What promotion needs when a judge watches the run (`spec.analysis.evidence`).
///
/// With `promoteOn: health` (the default) the run promotes only once its judges show, at their
/// confidence, that the canary fails no more often than the primary plus `marginPercent`
/// percentage points (errors, and slow requests when latency is judged). Until then it holds at
/// its weight and says what it waits for; `deadline` bounds the wait and `onDeadline` says what
/// happens then. Rollouts without a judge are not affected.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct EvidenceRule {
    /// What promotion needs (default `health`).
    pub promote_on: PromotionEvidence,
    /// The tolerated excess of the canary's error (and slow-request) rate over the primary's,
    /// in percentage points (default 2: a primary at 0.5% errors tolerates a canary up to 2.5%).
    pub margin_percent: f64,
    /// Also require the evidence before raising the canary weight above this weight (default:
    /// only before the final promotion).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_weight: Option<Weight>,
    /// How long a run may hold for evidence before `onDeadline` applies (default 1h).
    pub deadline: GoDuration,
    /// What happens when the deadline passes without evidence (default `hold`).
    pub on_deadline: EvidenceDeadlineAction,
}

/// The default tolerated excess, in percentage points.
pub const DEFAULT_EVIDENCE_MARGIN_PERCENT: f64 = 2.0;

impl Default for EvidenceRule {
    fn default() -> Self {
        EvidenceRule {
            promote_on: PromotionEvidence::default(),
            margin_percent: DEFAULT_EVIDENCE_MARGIN_PERCENT,
            from_weight: None,
            deadline: GoDuration::from_secs(3600),
            on_deadline: EvidenceDeadlineAction::default(),
        }
    }
}

impl EvidenceRule {
    /// Whether every field has its default (not written out).
    pub fn is_default(&self) -> bool {
        *self == EvidenceRule::default()
    }

    /// Flagger's semantics: promote at the end of the plan unless harm was shown.
    pub fn no_harm() -> EvidenceRule {
        EvidenceRule {
            promote_on: PromotionEvidence::NoHarm,
            ..EvidenceRule::default()
        }
    }

    /// Whether moving the canary to `weight` needs evidence of health (`final_step`: the move
    /// is the promotion).
    pub fn required_for(&self, weight: Weight, final_step: bool) -> bool {
        self.promote_on == PromotionEvidence::Health
            && (final_step || self.from_weight.is_some_and(|from| weight > from))
    }
}

/// What promotion needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PromotionEvidence {
    /// Evidence that the canary is no worse than the primary by more than the margin.
    #[default]
    Health,
    /// The plan's end, unless a judge or check showed harm (Flagger's semantics; the default
    /// of imported Flagger canaries).
    NoHarm,
}

/// What happens when a run has held for evidence longer than its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum EvidenceDeadlineAction {
    /// Keep holding and say a person must decide (`weir promote` / `weir abort`); evidence that
    /// arrives later still promotes.
    #[default]
    Hold,
    /// Roll back.
    Rollback,
    /// Promote anyway, recording that it was without evidence of health.
    Promote,
}

/// How failed checks are counted against the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FailureCounting {
    /// Every failed check in the run counts; a passing one does not reset the count (Flagger).
    #[default]
    Total,
    /// Only failures in a row count; a passing check resets the count.
    Consecutive,
}

/// What a check that returns no data means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NoDataPolicy {
    /// A failed check (Flagger's behaviour).
    #[default]
    Fail,
    /// Neither pass nor fail: the weight holds until data arrives.
    Hold,
    /// Treated as a pass.
    Ignore,
}

/// What happens when the analysis fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FailureAction {
    /// Route everything back to the primary and end the run Failed.
    #[default]
    Rollback,
    /// Keep the weight where it is and wait for a person (phase Held).
    Hold,
}

/// A metric check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metric {
    /// A builtin (`request-success-rate`, `request-duration`) or a name of the user's choice.
    pub name: String,
    /// The accepted range of the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_range: Option<ThresholdRange>,
    /// A `MetricTemplate` holding the query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ref: Option<TemplateRef>,
    /// Variables for the template's query.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub template_variables: BTreeMap<String, String>,
    /// An inline query (instead of a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// The window the query looks at (default 1m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<GoDuration>,
}

/// The builtin success-rate check (a percentage).
pub const REQUEST_SUCCESS_RATE: &str = "request-success-rate";
/// The builtin latency check (milliseconds).
pub const REQUEST_DURATION: &str = "request-duration";

impl Metric {
    /// Whether this is one of the builtin checks, which need no query.
    pub fn is_builtin(&self) -> bool {
        self.name == REQUEST_SUCCESS_RATE || self.name == REQUEST_DURATION
    }
}

/// An accepted range; either bound may be open.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThresholdRange {
    /// Lowest accepted value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Highest accepted value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

impl ThresholdRange {
    /// Whether `value` lies in the range.
    pub fn contains(&self, value: f64) -> bool {
        self.min.is_none_or(|min| value >= min) && self.max.is_none_or(|max| value <= max)
    }
}

/// A reference to a named object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateRef {
    /// Its name.
    pub name: String,
    /// Its namespace (default: the rollout's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A webhook, with Flagger's types and payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Webhook {
    /// Its name, unique in the rollout.
    pub name: String,
    /// When it is called and what its answer means.
    #[serde(rename = "type", default)]
    pub hook_type: HookType,
    /// Where the payload is POSTed.
    pub url: String,
    /// Timeout of each attempt (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    /// How many times a failed call is tried again (default 0, as in Flagger; at most
    /// [`MAX_WEBHOOK_RETRIES`]): after a connection error, a timeout, 429 or a 5xx other than
    /// 501, with backoff (0.5s doubling, at most 5s between attempts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Passed through in the payload.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Do not alert when this hook fails (or, for a gate, stays closed).
    #[serde(default, skip_serializing_if = "is_false")]
    pub mute_alert: bool,
    /// A Secret whose key `hmacSecret` ([`HMAC_SECRET_KEY`]) signs every call: the header
    /// `X-Weir-Signature: sha256=<hex HMAC-SHA256 of the body>`. weir's own field (Flagger has
    /// none); its namespace defaults to the rollout's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<TemplateRef>,
}

/// The key of a webhook's Secret that holds the HMAC-SHA256 signing key.
pub const HMAC_SECRET_KEY: &str = "hmacSecret";

/// The most retries a webhook may ask for (each attempt can take its whole timeout).
pub const MAX_WEBHOOK_RETRIES: u32 = 10;

/// Webhook types (Flagger's).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum HookType {
    /// Before the canary is scaled up; a failure keeps the run Waiting.
    ConfirmRollout,
    /// First tick, before traffic; a failure counts as a failed check.
    PreRollout,
    /// Every tick before metrics; a failure counts as a failed check.
    #[default]
    Rollout,
    /// Before each weight increase; a failure holds the weight.
    ConfirmTrafficIncrease,
    /// Before promotion; a failure waits in WaitingPromotion.
    ConfirmPromotion,
    /// While running; a success (2xx) rolls back at once.
    Rollback,
    /// After the run ends; the outcome is only logged.
    PostRollout,
    /// On every event.
    Event,
}

impl HookType {
    /// Every type.
    pub const ALL: [HookType; 8] = [
        HookType::ConfirmRollout,
        HookType::PreRollout,
        HookType::Rollout,
        HookType::ConfirmTrafficIncrease,
        HookType::ConfirmPromotion,
        HookType::Rollback,
        HookType::PostRollout,
        HookType::Event,
    ];

    /// The gate types: their hooks' answers open or close a gate, and a person may open or
    /// close them too (`weir gate`).
    pub const GATES: [HookType; 3] = [
        HookType::ConfirmRollout,
        HookType::ConfirmTrafficIncrease,
        HookType::ConfirmPromotion,
    ];

    /// Whether hooks of this type are gates.
    pub fn is_gate(self) -> bool {
        HookType::GATES.contains(&self)
    }

    /// The name used in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            HookType::ConfirmRollout => "confirm-rollout",
            HookType::PreRollout => "pre-rollout",
            HookType::Rollout => "rollout",
            HookType::ConfirmTrafficIncrease => "confirm-traffic-increase",
            HookType::ConfirmPromotion => "confirm-promotion",
            HookType::Rollback => "rollback",
            HookType::PostRollout => "post-rollout",
            HookType::Event => "event",
        }
    }
}

impl std::fmt::Display for HookType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Notification routing for a rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Alert {
    /// Its name.
    pub name: String,
    /// The least severity sent.
    #[serde(default)]
    pub severity: Severity,
    /// The alert provider.
    pub provider_ref: TemplateRef,
}

/// Notification severities.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Severity {
    /// Progress.
    #[default]
    Info,
    /// Something needs attention.
    Warn,
    /// Something failed.
    Error,
}

// === impl MetricTemplate ===

/// A reusable metric query (Flagger's MetricTemplate, in weir's group).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricTemplate {
    /// Always `weir.dev/v1alpha1`.
    pub api_version: String,
    /// Always `MetricTemplate`.
    pub kind: String,
    /// Name and namespace.
    pub metadata: ObjectMeta,
    /// The provider and the query.
    pub spec: MetricTemplateSpec,
}

/// The provider and the query of a metric template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricTemplateSpec {
    /// Where the query runs.
    pub provider: MetricProvider,
    /// The query, with `{{ variable }}` placeholders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

/// A metrics backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetricProvider {
    /// `prometheus`, `datadog`, `cloudwatch`, `newrelic`, `graphite`, `stackdriver`,
    /// `influxdb`, `dynatrace`, `keptn` or `splunk`.
    #[serde(rename = "type")]
    pub provider_type: String,
    /// The backend's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// A secret holding credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<TemplateRef>,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Skip TLS verification.
    #[serde(default, skip_serializing_if = "is_false")]
    pub insecure_skip_verify: bool,
    /// Cloud region (CloudWatch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// The metric providers weir knows.
pub const METRIC_PROVIDER_TYPES: [&str; 11] = [
    "prometheus",
    "datadog",
    "cloudwatch",
    "newrelic",
    "graphite",
    "stackdriver",
    "influxdb",
    "dynatrace",
    "keptn",
    "splunk",
    // Flagger 1.43: the Kubernetes External Metrics API (weir operator only).
    "externalmetrics",
];
