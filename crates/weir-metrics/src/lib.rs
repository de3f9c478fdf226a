//! Metric providers other than Prometheus, as Flagger calls them: a `MetricTemplate` with
//! `spec.provider.type` [`datadog`], [`newrelic`], [`graphite`], [`cloudwatch`], [`influxdb`],
//! [`dynatrace`], [`stackdriver`] or [`splunk`].
//!
//! Every provider works the same way: the template's query is rendered with the placeholders
//! every metric source shares ([`weir_core::query::variables`]), sent to the backend at the
//! template's `provider.address` (or the service's public address) with the credentials of the
//! template's `secretRef` (a catalog Secret, read from the template's namespace as in Flagger),
//! and one number is taken from the answer as the provider's module says. That number is judged
//! against the metric's `thresholdRange`.
//!
//! At the edges:
//! - an answer without a number (no series, no points, only nulls) is *no data*, which the
//!   machine treats as the rollout's `noData` says, as for Prometheus;
//! - an error answer is *no data* too, with the service's own error text in the check's message
//!   (so in the history), never a credential: every Secret value is struck out of any text that
//!   leaves this crate, and requests are shown without their credentials;
//! - `429` and `5xx` (but `501`) answers (and CloudWatch's `400 Throttling`) and requests that got no answer are tried again within
//!   the metric's interval (the time until the next check), waiting as `Retry-After` (or
//!   Datadog's `X-RateLimit-Reset`) says, else weir-http's backoff; a wait that would end after
//!   the interval is not made;
//! - each request has a timeout ([`DEFAULT_QUERY_TIMEOUT`] unless [`MetricsSource::with_timeout`]).
//!
//! A template of a provider no source of weir queries (keptn) is refused
//! here when a rollout using it is applied.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod aws_credentials;
pub mod cloudwatch;
pub mod counts;
pub mod datadog;
pub mod dynatrace;
pub mod gcp_credentials;
pub mod graphite;
pub mod influxdb;
pub mod newrelic;
pub mod splunk;
pub mod stackdriver;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use jiff::Timestamp;
use weir_analysis::Window;
use weir_core::FieldError;
use weir_core::catalog::{Catalog, SharedCatalog};
use weir_core::model::{CheckOutcome, CheckResult, JudgeCounts, Metric, MetricTemplate, Rollout};
use weir_core::units::GoDuration;
use weir_engine::clock::{SharedClock, SystemClock};
use weir_engine::{BoxFuture, MetricSource};
use weir_http::HttpClient;
use weir_http::retry::{Backoff, worth_retrying};
use weir_store::RolloutKey;

/// The providers this crate queries, by the name templates use.
pub const PROVIDERS: [&str; 8] = [
    "datadog",
    "newrelic",
    "graphite",
    "cloudwatch",
    "influxdb",
    "dynatrace",
    "stackdriver",
    "splunk",
];

/// How long one request may take before it counts as no answer.
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The interval of a metric that sets none (as weir's `{{ interval }}`).
const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// Answers can hold long point lists: read up to this many bytes.
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// How much of an error answer's text goes into a message.
const MAX_ERROR_TEXT: usize = 300;

/// A provider this crate queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Datadog's v1 timeseries query API.
    Datadog,
    /// New Relic's Insights query API (NRQL).
    NewRelic,
    /// Graphite's render API.
    Graphite,
    /// CloudWatch's GetMetricData (awsQuery, SigV4).
    CloudWatch,
    /// InfluxDB v2's Flux query API.
    InfluxDb,
    /// Dynatrace's Metrics API v2.
    Dynatrace,
    /// Google Cloud Monitoring's `timeSeries:query` (MQL), with a service account's key.
    Stackdriver,
    /// Splunk Observability's SignalFlow (`/v2/signalflow/execute`).
    Splunk,
}

impl Provider {
    /// The provider of a template's `spec.provider.type`, when this crate queries it.
    pub fn of(provider_type: &str) -> Option<Provider> {
        match provider_type {
            "datadog" => Some(Provider::Datadog),
            "newrelic" => Some(Provider::NewRelic),
            "graphite" => Some(Provider::Graphite),
            "cloudwatch" => Some(Provider::CloudWatch),
            "influxdb" => Some(Provider::InfluxDb),
            "dynatrace" => Some(Provider::Dynatrace),
            "stackdriver" => Some(Provider::Stackdriver),
            "splunk" => Some(Provider::Splunk),
            _ => None,
        }
    }

    /// The name templates use.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Datadog => "datadog",
            Provider::NewRelic => "newrelic",
            Provider::Graphite => "graphite",
            Provider::CloudWatch => "cloudwatch",
            Provider::InfluxDb => "influxdb",
            Provider::Dynatrace => "dynatrace",
            Provider::Stackdriver => "stackdriver",
            Provider::Splunk => "splunk",
        }
    }

    fn default_address(self) -> Option<&'static str> {
        match self {
            Provider::Datadog => Some(datadog::DEFAULT_ADDRESS),
            Provider::NewRelic => Some(newrelic::DEFAULT_ADDRESS),
            Provider::Stackdriver => Some(stackdriver::DEFAULT_ADDRESS),
            Provider::Graphite
            | Provider::CloudWatch
            | Provider::InfluxDb
            | Provider::Dynatrace
            | Provider::Splunk => None,
        }
    }

    /// The Secret keys the provider needs (all of them) when the template names a Secret, and
    /// whether it needs a Secret at all.
    fn secret_keys(self) -> (&'static [&'static str], bool) {
        match self {
            Provider::Datadog => (&datadog::SECRET_KEYS, true),
            Provider::NewRelic => (&newrelic::SECRET_KEYS, true),
            Provider::Graphite => (&graphite::SECRET_KEYS, false),
            // Without a Secret, from weir's environment.
            Provider::CloudWatch => (&cloudwatch::SECRET_KEYS, false),
            Provider::InfluxDb => (&influxdb::SECRET_KEYS, false),
            Provider::Dynatrace => (&dynatrace::SECRET_KEYS, true),
            // Without a Secret, Application Default Credentials.
            Provider::Stackdriver => (&stackdriver::REQUIRED_KEYS, false),
            Provider::Splunk => (&splunk::SECRET_KEYS, true),
        }
    }

    /// Secret keys the provider reads when they are there.
    fn optional_keys(self) -> &'static [&'static str] {
        match self {
            Provider::CloudWatch => &[cloudwatch::SESSION_TOKEN],
            Provider::Stackdriver => &stackdriver::OPTIONAL_KEYS,
            _ => &[],
        }
    }
}

/// Secret values by key. Debug shows the keys only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials(BTreeMap<&'static str, String>);

impl Credentials {
    /// The value of `key` (empty when absent: a plan has every key its provider needs).
    pub fn get(&self, key: &str) -> &str {
        self.0.get(key).map_or("", String::as_str)
    }

    /// `text` with every credential struck out.
    pub fn scrub(&self, text: &str) -> String {
        let mut text = text.to_string();
        for value in self.0.values() {
            // Very short values (a one-digit account id) would strike out ordinary text.
            if value.len() >= 4 {
                text = text.replace(value.as_str(), "[redacted]");
            }
        }
        text
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// What a check runs: resolved from the catalog, rendered.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The backend.
    pub provider: Provider,
    /// Its base URL, without a trailing `/`.
    pub address: String,
    /// The rendered query.
    pub query: String,
    /// The Secret's values the provider uses.
    pub credentials: Credentials,
    /// The metric's interval: the window some providers query, and the time retries may take.
    pub interval: Duration,
    /// The region signed for (CloudWatch).
    pub region: Option<String>,
}

/// One request to a backend.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The URL, query string included.
    pub url: String,
    /// The URL as messages show it: without anything from the Secret.
    pub shown: String,
    /// Credentials and other headers.
    pub headers: Vec<(&'static str, String)>,
    /// The body (empty for a `GET`).
    pub body: Bytes,
}

/// The number an answer holds, or why it holds none.
#[derive(Debug, Clone, PartialEq)]
pub enum Reading {
    /// The value, and a remark for the message (e.g. "first of 3 series").
    Value(f64, Option<String>),
    /// No number: *no data*, with the reason.
    NoData(String),
}

/// Evaluates checks whose template names one of [`PROVIDERS`].
#[derive(Clone)]
pub struct MetricsSource {
    http: HttpClient,
    catalog: SharedCatalog,
    clock: SharedClock,
    timeout: Duration,
    backoff: Backoff,
    /// Stackdriver's access tokens by [`stackdriver::cache_key`], with when they stop being used.
    tokens: Arc<Mutex<BTreeMap<String, (String, tokio::time::Instant)>>>,
    /// Per rollout, where its reads of `judgeCounts` stand.
    cursors: Arc<Mutex<HashMap<RolloutKey, counts::Cursor>>>,
}

impl MetricsSource {
    /// A source reading templates and Secrets from `catalog`, querying with its own client.
    pub fn new(catalog: impl Into<SharedCatalog>) -> MetricsSource {
        MetricsSource {
            http: HttpClient::default().reading_up_to(MAX_ANSWER),
            catalog: catalog.into(),
            clock: SystemClock::shared(),
            timeout: DEFAULT_QUERY_TIMEOUT,
            backoff: Backoff::default(),
            tokens: Arc::default(),
            cursors: Arc::default(),
        }
    }

    /// The same source querying through `http` (e.g. the process's pool under its outbound
    /// policy: a template's literal address is then checked when a rollout is applied, and every
    /// address on every connection).
    pub fn with_client(mut self, http: HttpClient) -> MetricsSource {
        self.http = http.reading_up_to(MAX_ANSWER);
        self
    }

    /// The same source taking time (Datadog's query window) from `clock`.
    pub fn with_clock(mut self, clock: SharedClock) -> MetricsSource {
        self.clock = clock;
        self
    }

    /// The same source with another timeout per request.
    pub fn with_timeout(mut self, timeout: Duration) -> MetricsSource {
        self.timeout = timeout;
        self
    }

    /// The same source with other waits between attempts (when the answer does not say).
    pub fn with_backoff(mut self, backoff: Backoff) -> MetricsSource {
        self.backoff = backoff;
        self
    }

    /// The template of `metric`, when it names one that is loaded.
    fn template<'c>(
        catalog: &'c Catalog,
        rollout: &Rollout,
        metric: &Metric,
    ) -> Option<&'c MetricTemplate> {
        let reference = metric.template_ref.as_ref()?;
        catalog.metric_template(reference, rollout.metadata.namespace_or_default())
    }

    /// What `metric` runs, or why it cannot run.
    pub fn plan(catalog: &Catalog, rollout: &Rollout, metric: &Metric) -> Result<Plan, String> {
        Self::plan_query(catalog, rollout, metric, None)
    }

    /// What one of a rollout's `judgeCounts` queries runs for a read of the last `seconds`, or
    /// why it cannot run: the template's provider with `query` instead of the template's, its
    /// placeholders filled as a check's are, `{{ interval }}` being the time since the previous
    /// read and `{{ intervalSeconds }}` the same in seconds.
    pub fn count_plan(
        catalog: &Catalog,
        rollout: &Rollout,
        counts: &JudgeCounts,
        query: &str,
        seconds: u64,
    ) -> Result<Plan, String> {
        let metric = counts.as_metric(GoDuration::from_secs(seconds.max(1)));
        Self::plan_query(catalog, rollout, &metric, Some(query))
    }

    /// [`MetricsSource::plan`] with `query` instead of the template's, when given.
    fn plan_query(
        catalog: &Catalog,
        rollout: &Rollout,
        metric: &Metric,
        query: Option<&str>,
    ) -> Result<Plan, String> {
        let template = Self::template(catalog, rollout, metric)
            .ok_or_else(|| "the metric names no loaded MetricTemplate".to_string())?;
        let name = &template.metadata.name;
        let spec = &template.spec.provider;
        let provider = Provider::of(&spec.provider_type).ok_or_else(|| unsupported(template))?;
        let mut variables = weir_core::query::variables(rollout, metric);
        let query = match query {
            Some(query) => {
                let seconds = metric
                    .interval
                    .map_or(0, |interval| interval.get().as_secs());
                variables.insert("intervalSeconds".into(), seconds.to_string());
                query
            }
            None => template
                .spec
                .query
                .as_deref()
                .ok_or_else(|| format!("MetricTemplate {name} has no query"))?,
        };
        let query =
            weir_core::query::render(query, &variables).map_err(|error| error.to_string())?;
        let region = match provider {
            Provider::CloudWatch => {
                let region = spec.region.as_deref().ok_or_else(|| {
                    format!("MetricTemplate {name}: cloudwatch needs provider.region")
                })?;
                if !cloudwatch::valid_region(region) {
                    return Err(format!(
                        "MetricTemplate {name}: provider.region {region:?} is not an AWS region"
                    ));
                }
                cloudwatch::queries(&query)
                    .map_err(|error| format!("MetricTemplate {name}: {error}"))?;
                Some(region.to_string())
            }
            _ => None,
        };
        let regional = region.as_deref().map(cloudwatch::default_address);
        let address = spec
            .address
            .as_deref()
            .or(provider.default_address())
            .or(regional.as_deref())
            .ok_or_else(|| {
                format!(
                    "MetricTemplate {name}: {} needs provider.address",
                    provider.name()
                )
            })?;
        if !address.starts_with("http://") && !address.starts_with("https://") {
            return Err(format!(
                "MetricTemplate {name}: provider.address {address:?} is not an http:// or https:// URL"
            ));
        }
        let (keys, required) = provider.secret_keys();
        let mut credentials = Credentials::default();
        match &spec.secret_ref {
            None if required => {
                return Err(format!(
                    "MetricTemplate {name}: {} needs provider.secretRef, a Secret with {}",
                    provider.name(),
                    keys.join(" and ")
                ));
            }
            None => {}
            Some(reference) => {
                let secret = catalog
                    .secret(reference, template.metadata.namespace_or_default())
                    .ok_or_else(|| format!("Secret {} is not loaded", reference.name))?;
                let missing: Vec<&str> = keys
                    .iter()
                    .copied()
                    .filter(|key| secret.get(key).is_none())
                    .collect();
                if !missing.is_empty() {
                    return Err(format!(
                        "MetricTemplate {name}: Secret {} has no {} (a {} Secret holds {})",
                        reference.name,
                        missing.join(" and "),
                        provider.name(),
                        keys.join(" and ")
                    ));
                }
                for key in keys.iter().chain(provider.optional_keys()) {
                    if let Some(value) = secret.get(key) {
                        credentials.0.insert(key, value.to_string());
                    }
                }
            }
        }
        if provider == Provider::Stackdriver {
            gcp_credentials::plan_key(&mut credentials)
                .map_err(|error| format!("MetricTemplate {name}: {error}"))?;
        }
        if provider == Provider::CloudWatch && spec.secret_ref.is_none() {
            // Flagger's SDK reads its default chain: so does weir without a Secret, at query time.
            aws_credentials::check_chain(&aws_credentials::Environment::process())
                .map_err(|error| format!("MetricTemplate {name}: {error}"))?;
        }
        Ok(Plan {
            provider,
            address: address.trim_end_matches('/').to_string(),
            query,
            credentials,
            interval: metric
                .interval
                .map_or(DEFAULT_INTERVAL, |interval| interval.get()),
            region,
        })
    }

    /// The plan's request at `now`.
    fn request(plan: &Plan, now: Timestamp) -> Request {
        match plan.provider {
            Provider::Datadog => datadog::request(plan, now),
            Provider::NewRelic => newrelic::request(plan),
            Provider::Graphite => graphite::request(plan),
            Provider::CloudWatch => cloudwatch::request(plan, now),
            Provider::InfluxDb => influxdb::request(plan),
            Provider::Dynatrace => dynatrace::request(plan, now),
            Provider::Stackdriver => stackdriver::request(plan),
            Provider::Splunk => splunk::request(plan, now),
        }
    }

    /// Queries the backend, trying again within the interval, and reads the number. `Err`: the
    /// backend's error (scrubbed).
    pub async fn run(&self, plan: &Plan) -> Result<Reading, String> {
        let exchanged;
        let plan = if plan.provider == Provider::Stackdriver {
            let token = self.google_token(plan).await?;
            let mut with_token = plan.clone();
            with_token
                .credentials
                .0
                .insert(stackdriver::ACCESS_TOKEN, token);
            gcp_credentials::complete_project(&mut with_token, self.timeout).await?;
            exchanged = with_token;
            &exchanged
        } else if aws_credentials::needs_chain(plan) {
            exchanged = aws_credentials::complete(plan, self.clock.now()).await?;
            &exchanged
        } else {
            plan
        };
        let budget = plan.interval.max(self.timeout);
        let deadline = tokio::time::Instant::now() + budget;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let now = self.clock.now();
            let request = Self::request(plan, now);
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let timeout = self.timeout.min(remaining).max(Duration::from_millis(1));
            let outcome = self
                .http
                .request(
                    request.method.clone(),
                    &request.url,
                    request.headers.clone(),
                    request.body.clone(),
                    timeout,
                )
                .await;
            let show = |text: String| {
                plan.credentials
                    .scrub(&text.replace(&request.url, &request.shown))
            };
            let (error, wait) = match outcome {
                Err(error) if error.is_refused() || error.is_certificate() => {
                    return Err(show(error.to_string()));
                }
                Err(error) => (show(error.to_string()), None),
                Ok(answer) if answer.status == StatusCode::OK => {
                    if answer.oversized {
                        return Err(format!(
                            "{}: the answer is larger than {} MiB",
                            request.shown,
                            MAX_ANSWER / (1024 * 1024)
                        ));
                    }
                    let reading = match plan.provider {
                        Provider::Datadog => datadog::read(&answer.body, now),
                        Provider::NewRelic => newrelic::read(&answer.body),
                        Provider::Graphite => graphite::read(&answer.body),
                        Provider::CloudWatch => cloudwatch::read(&answer.body),
                        Provider::InfluxDb => influxdb::read(&answer.body),
                        Provider::Dynatrace => dynatrace::read(&answer.body),
                        Provider::Stackdriver => stackdriver::read(&answer.body),
                        Provider::Splunk => splunk::read(&answer.body),
                    };
                    return reading.map_err(|error| show(format!("{}: {error}", request.shown)));
                }
                Ok(answer) => {
                    let text = show(format!(
                        "{} answered {}: {}",
                        request.shown,
                        answer.status,
                        error_text(plan.provider, &answer.body)
                    ));
                    if plan.provider == Provider::Stackdriver
                        && answer.status == StatusCode::UNAUTHORIZED
                        && let Ok(mut tokens) = self.tokens.lock()
                    {
                        // A token the API no longer takes: the next check asks for another.
                        tokens.remove(&stackdriver::cache_key(
                            plan.credentials.get(stackdriver::SECRET_KEYS[1]),
                        ));
                    }
                    let throttled = plan.provider == Provider::CloudWatch
                        && answer.status == StatusCode::BAD_REQUEST
                        && cloudwatch::throttled(&answer.body);
                    if !worth_retrying(answer.status) && !throttled {
                        return Err(text);
                    }
                    (text, self.told_wait(&answer.headers))
                }
            };
            let wait = wait.unwrap_or_else(|| self.backoff.delay(attempt - 1));
            if tokio::time::Instant::now() + wait >= deadline {
                return Err(format!(
                    "{error} (after {attempt} attempt{}; the next would end after the {} interval)",
                    if attempt == 1 { "" } else { "s" },
                    weir_core::units::GoDuration::new(plan.interval)
                ));
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// An access token for a Stackdriver plan's service account (one attempt: a refused key
    /// is final, and the query's own retries cover an unavailable service).
    async fn google_token(&self, plan: &Plan) -> Result<String, String> {
        let key = plan.credentials.get(stackdriver::SECRET_KEYS[1]);
        let cache_key = stackdriver::cache_key(key);
        let now = tokio::time::Instant::now();
        if let Ok(tokens) = self.tokens.lock()
            && let Some((token, until)) = tokens.get(&cache_key)
            && *until > now
        {
            return Ok(token.clone());
        }
        if key.is_empty() {
            // Application Default Credentials without a key file: the metadata server.
            return gcp_credentials::metadata_token(&self.tokens, cache_key, self.timeout).await;
        }
        let account = stackdriver::ServiceAccount::parse(key)?;
        let form = account.token_form(self.clock.now())?;
        let url = account.token_uri();
        let show = |text: String| plan.credentials.scrub(&text);
        let answer = self
            .http
            .request(
                Method::POST,
                url,
                vec![(
                    "content-type",
                    "application/x-www-form-urlencoded".to_string(),
                )],
                Bytes::from(form),
                self.timeout,
            )
            .await
            .map_err(|error| show(format!("token exchange: {error}")))?;
        if answer.status != StatusCode::OK {
            return Err(show(format!(
                "token exchange at {url} answered {}: {}",
                answer.status,
                error_text(Provider::Stackdriver, &answer.body)
            )));
        }
        let (token, expires_in) = stackdriver::read_token(&answer.body)
            .map_err(|error| show(format!("{url}: {error}")))?;
        // Kept until a minute before it expires (a short-lived one is used once).
        if let Some(keep) = expires_in.checked_sub(60).filter(|keep| *keep > 0)
            && let Ok(mut tokens) = self.tokens.lock()
        {
            tokens.insert(cache_key, (token.clone(), now + Duration::from_secs(keep)));
        }
        Ok(token)
    }

    /// How long an answer asks to wait: `Retry-After` (seconds or an HTTP date), else Datadog's
    /// `X-RateLimit-Reset` (seconds until the limit's period ends).
    fn told_wait(&self, headers: &HeaderMap) -> Option<Duration> {
        let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
        if let Some(after) = text("retry-after") {
            let after = after.trim();
            if let Ok(seconds) = after.parse::<u64>() {
                return Some(Duration::from_secs(seconds));
            }
            if let Ok(at) = jiff::fmt::rfc2822::parse(after) {
                let wait = at.timestamp().duration_since(self.clock.now());
                return Some(Duration::try_from(wait).unwrap_or(Duration::ZERO));
            }
        }
        text("x-ratelimit-reset")
            .and_then(|reset| reset.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
    }
}

impl MetricsSource {
    /// The judges' window of `rollout`'s `judgeCounts` in run `run` ([`counts`]): `None` when
    /// it names none; else the counts since the previous read, or an empty window (the run's
    /// first call, not yet time to read, a read that failed or held no number).
    async fn counts_window(&self, key: &RolloutKey, rollout: &Rollout, run: u64) -> Option<Window> {
        let counts = rollout.spec.analysis.judge_counts.as_ref()?;
        let step = {
            let mut cursors = self.cursors.lock().unwrap_or_else(PoisonError::into_inner);
            let (step, cursor) = counts::next_step(
                cursors.get(key).copied(),
                run,
                self.clock.now(),
                counts.interval().get(),
            );
            cursors.insert(key.clone(), cursor);
            step
        };
        let counts::Step::Read { seconds } = step else {
            return Some(Window::default());
        };
        let catalog = self.catalog.snapshot();
        let plans = counts.queries().map(|(field, query)| {
            (
                field,
                Self::count_plan(&catalog, rollout, counts, query, seconds),
            )
        });
        let [a, b, c, d] = &plans;
        let (a, b, c, d) = tokio::join!(
            self.read_count(key, a),
            self.read_count(key, b),
            self.read_count(key, c),
            self.read_count(key, d)
        );
        Some(counts::window([a, b, c, d]))
    }

    /// One count query's number, or `None` (said in the log, with the reason).
    async fn read_count(
        &self,
        key: &RolloutKey,
        (field, plan): &(&'static str, Result<Plan, String>),
    ) -> Option<f64> {
        let reason = match plan {
            Err(reason) => reason.clone(),
            Ok(plan) => match self.run(plan).await {
                Ok(Reading::Value(value, _)) if value.is_finite() && value >= 0.0 => {
                    return Some(value);
                }
                Ok(Reading::Value(value, _)) => format!("{value} is not a count"),
                Ok(Reading::NoData(reason)) => format!("no values found: {reason}"),
                Err(error) => error,
            },
        };
        tracing::warn!(
            rollout = %key,
            "judgeCounts.{field}: {reason}; the judges get an empty window"
        );
        None
    }
}

/// The refusal of a template whose provider no source of weir queries.
fn unsupported(template: &MetricTemplate) -> String {
    format!(
        "MetricTemplate {} uses provider {:?}: weir queries prometheus, {} (not yet the others)",
        template.metadata.name,
        template.spec.provider.provider_type,
        PROVIDERS.join(", ")
    )
}

/// The service's own words in an error answer: its JSON error message(s), else the start of
/// the body.
fn error_text(provider: Provider, body: &[u8]) -> String {
    let from_xml = match provider {
        Provider::CloudWatch => cloudwatch::error_message(body),
        _ => None,
    };
    let from_json = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|json| match provider {
            Provider::Datadog => datadog::error_message(&json),
            Provider::NewRelic => newrelic::error_message(&json),
            Provider::InfluxDb => influxdb::error_message(&json),
            Provider::Dynatrace => dynatrace::error_message(&json),
            Provider::Stackdriver => stackdriver::error_message(&json),
            Provider::Splunk => splunk::error_message(&json),
            Provider::Graphite | Provider::CloudWatch => None,
        });
    let text = from_xml
        .or(from_json)
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    if text.is_empty() {
        return "no error message".into();
    }
    match text.char_indices().nth(MAX_ERROR_TEXT) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// Problems with a rollout's `judgeCounts`: a template that is not loaded, of a provider this
/// crate does not query, whose Secret lacks a key; a query the provider cannot run. (Empty
/// queries and unknown placeholders are weir-core's validation's to report.)
fn validate_counts(catalog: &Catalog, rollout: &Rollout, counts: &JudgeCounts) -> Vec<FieldError> {
    const BASE: &str = "spec.analysis.judgeCounts";
    let namespace = rollout.metadata.namespace_or_default();
    let reference = &counts.template_ref;
    if reference.name.is_empty() {
        return Vec::new();
    }
    let Some(template) = catalog.metric_template(reference, namespace) else {
        return vec![FieldError::with_value(
            format!("{BASE}.templateRef.name"),
            format!("{:?}", reference.name),
            format!(
                "no MetricTemplate {}/{} is loaded (its provider answers the count queries)",
                reference.namespace.as_deref().unwrap_or(namespace),
                reference.name
            ),
        )];
    };
    let provider_type = &template.spec.provider.provider_type;
    if Provider::of(provider_type).is_none() {
        return vec![FieldError::with_value(
            format!("{BASE}.templateRef"),
            format!("{:?}", reference.name),
            format!(
                "MetricTemplate {} uses provider {provider_type:?}: judge counts are read from {}{}",
                template.metadata.name,
                PROVIDERS.join(", "),
                if provider_type == "prometheus" {
                    " (weir's router counts reach the judges through Prometheus with --prometheus)"
                } else {
                    ""
                }
            ),
        )];
    }
    if let Some(secret) = &template.spec.provider.secret_ref
        && catalog
            .secret(secret, template.metadata.namespace_or_default())
            .is_none()
    {
        return vec![FieldError::new(
            format!("{BASE}.templateRef"),
            format!(
                "MetricTemplate {}: its provider.secretRef names Secret {}, which is not loaded",
                template.metadata.name, secret.name
            ),
        )];
    }
    let mut failures: Vec<(&str, String)> = Vec::new();
    for (field, query) in counts.queries() {
        if query.trim().is_empty() {
            continue;
        }
        match MetricsSource::count_plan(catalog, rollout, counts, query, 1) {
            // Unknown placeholders: weir-core's validation names them at this path.
            Err(reason) if reason.contains("unknown variable") || reason.contains("`{{") => {}
            Err(reason) => failures.push((field, reason)),
            Ok(_) => {}
        }
    }
    // A problem of the template (address, Secret keys) is the same for every query: said once.
    // (CloudWatch's plan also reads the query, whose problem is each query's own.)
    let first = failures.first().map(|(_, reason)| reason.clone());
    if provider_type != "cloudwatch"
        && failures.len() == 4
        && failures
            .iter()
            .all(|(_, reason)| Some(reason) == first.as_ref())
    {
        return vec![FieldError::new(
            format!("{BASE}.templateRef"),
            first.unwrap_or_default(),
        )];
    }
    failures
        .into_iter()
        .map(|(field, reason)| FieldError::new(format!("{BASE}.{field}"), reason))
        .collect()
}

impl MetricSource for MetricsSource {
    fn handles(&self, rollout: &Rollout, metric: &Metric) -> bool {
        Self::template(&self.catalog.snapshot(), rollout, metric)
            .is_some_and(|template| Provider::of(&template.spec.provider.provider_type).is_some())
    }

    fn validate(&self, rollout: &Rollout) -> Vec<FieldError> {
        let catalog = self.catalog.snapshot();
        let mut errors = match &rollout.spec.analysis.judge_counts {
            Some(counts) => validate_counts(&catalog, rollout, counts),
            None => Vec::new(),
        };
        for (index, metric) in rollout.spec.analysis.metrics.iter().enumerate() {
            let Some(template) = Self::template(&catalog, rollout, metric) else {
                // No template, or one that is not loaded: the catalog's check says so.
                continue;
            };
            let path = format!("spec.analysis.metrics[{index}].templateRef");
            let provider_type = &template.spec.provider.provider_type;
            if provider_type == "prometheus" {
                continue;
            }
            if Provider::of(provider_type).is_none() {
                errors.push(FieldError::new(path, unsupported(template)));
                continue;
            }
            if let Some(reference) = &template.spec.provider.secret_ref
                && catalog
                    .secret(reference, template.metadata.namespace_or_default())
                    .is_none()
            {
                // A missing Secret is the catalog's check's to report.
                continue;
            }
            if let Err(reason) = Self::plan(&catalog, rollout, metric) {
                errors.push(FieldError::new(path, reason));
            }
        }
        errors
    }

    fn refuse(&self, rollout: &Rollout) -> Vec<FieldError> {
        let Some(policy) = self.http.policy() else {
            return Vec::new();
        };
        let catalog = self.catalog.snapshot();
        let mut refusals = Vec::new();
        if let Some(counts) = &rollout.spec.analysis.judge_counts
            && let Ok(plan) =
                Self::count_plan(&catalog, rollout, counts, &counts.canary.requests, 1)
            && let Err(refusal) = policy.check_url(&plan.address)
        {
            refusals.push(FieldError::with_value(
                "spec.analysis.judgeCounts.templateRef",
                format!("{:?}", plan.address),
                refusal.to_string(),
            ));
        }
        for (index, metric) in rollout.spec.analysis.metrics.iter().enumerate() {
            if let Ok(plan) = Self::plan(&catalog, rollout, metric)
                && let Err(refusal) = policy.check_url(&plan.address)
            {
                refusals.push(FieldError::with_value(
                    format!("spec.analysis.metrics[{index}].templateRef"),
                    format!("{:?}", plan.address),
                    refusal.to_string(),
                ));
            }
        }
        refusals
    }

    fn check<'a>(
        &'a self,
        _key: &'a RolloutKey,
        rollout: &'a Rollout,
        metric: &'a Metric,
    ) -> BoxFuture<'a, CheckResult> {
        Box::pin(async move {
            let result = |outcome, value, message| CheckResult {
                name: metric.name.clone(),
                outcome,
                value,
                message,
            };
            let plan = match Self::plan(&self.catalog.snapshot(), rollout, metric) {
                Ok(plan) => plan,
                Err(reason) => return result(CheckOutcome::NoData, None, reason),
            };
            let name = plan.provider.name();
            match self.run(&plan).await {
                Ok(Reading::Value(value, remark)) => {
                    let range = metric.threshold_range.unwrap_or_default();
                    let outcome = if range.contains(value) {
                        CheckOutcome::Pass
                    } else {
                        CheckOutcome::Fail
                    };
                    let bounds = match (range.min, range.max) {
                        (Some(min), Some(max)) => format!("[{min}, {max}]"),
                        (Some(min), None) => format!(">= {min}"),
                        (None, Some(max)) => format!("<= {max}"),
                        (None, None) => "any".into(),
                    };
                    let remark = remark
                        .map(|remark| format!(" ({remark})"))
                        .unwrap_or_default();
                    result(
                        outcome,
                        Some(value),
                        format!("{name}: {value:.4} (accepted {bounds}){remark}"),
                    )
                }
                Ok(Reading::NoData(reason)) => result(
                    CheckOutcome::NoData,
                    None,
                    format!("{name}: no values found: {reason}"),
                ),
                Err(error) => result(CheckOutcome::NoData, None, format!("{name}: {error}")),
            }
        })
    }

    fn judge_window<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        run: u64,
    ) -> BoxFuture<'a, Option<Window>> {
        Box::pin(self.counts_window(key, rollout, run))
    }

    fn reads_judge_counts(&self, rollout: &Rollout) -> bool {
        rollout.spec.analysis.judge_counts.is_some()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use weir_engine::clock::ManualClock;

    #[test]
    fn the_wait_an_answer_asks_for_is_read_from_retry_after_or_datadogs_reset() {
        let now: Timestamp = "2026-11-28T12:00:00Z".parse().unwrap();
        let clock = ManualClock::new(now);
        let source = MetricsSource::new(Catalog::default()).with_clock(clock.shared());
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().unwrap());
            }
            map
        };
        assert_eq!(
            source.told_wait(&headers(&[("retry-after", "7")])),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            source.told_wait(&headers(&[(
                "retry-after",
                "Sat, 28 Nov 2026 12:00:30 GMT"
            )])),
            Some(Duration::from_secs(30))
        );
        // A date already past: at once.
        assert_eq!(
            source.told_wait(&headers(&[(
                "retry-after",
                "Sat, 28 Nov 2026 11:00:00 GMT"
            )])),
            Some(Duration::ZERO)
        );
        assert_eq!(
            source.told_wait(&headers(&[
                ("x-ratelimit-reset", "12"),
                ("x-ratelimit-remaining", "0")
            ])),
            Some(Duration::from_secs(12))
        );
        assert_eq!(source.told_wait(&headers(&[("retry-after", "soon")])), None);
    }

    #[test]
    fn credentials_are_struck_out_and_kept_out_of_debug_output() {
        let credentials = Credentials(
            [
                ("datadog_api_key", "abcd1234".to_string()),
                ("newrelic_account_id", "1".to_string()),
            ]
            .into_iter()
            .collect(),
        );
        assert_eq!(
            credentials.scrub("key abcd1234 refused for account 1"),
            "key [redacted] refused for account 1"
        );
        let debug = format!("{credentials:?}");
        assert!(
            !debug.contains("abcd1234") && debug.contains("datadog_api_key"),
            "{debug}"
        );
    }
}
