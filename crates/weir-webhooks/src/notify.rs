//! Notifications to people: Slack, Microsoft Teams, Discord and generic JSON webhooks, chosen
//! per rollout by its alerts (`spec.analysis.alerts`, Flagger's semantics: an alert receives
//! notifications of its severity or higher).
//!
//! # Delivery guarantee
//!
//! Delivery is *at least once*. [`AlertNotifier::notify`] retries each provider a few times
//! with exponential backoff; if a provider still has not accepted the message it returns an
//! error, the engine keeps the notification pending in its store and delivers it again later.
//! A provider that accepted it the first time may then receive it again (this process
//! remembers recent acknowledgements and skips those, but a restart forgets them), and a
//! request that timed out may have arrived anyway. That is why every request carries the
//! notification's delivery id in the `Idempotency-Key` and `X-Weir-Delivery` headers (and, for
//! generic webhooks, as `id` in the body): receivers de-duplicate on it, together with the
//! rollout (`X-Weir-Rollout`), since ids are unique per rollout.

use std::collections::{HashSet, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use weir_core::FieldError;
use weir_core::catalog::{Catalog, SharedCatalog};
use weir_core::machine::Notification;
use weir_core::model::{
    AlertProvider, AlertProviderType, CheckOutcome, Evidence, Rollout, Severity,
};
use weir_store::RolloutKey;

use crate::text::truncate;
use weir_engine::{BoxFuture, ErrorKind, Notifier, ProviderError};
use weir_http::HttpClient;
use weir_http::retry::{Backoff, worth_retrying};

/// How hard one [`AlertNotifier::notify`] call tries each provider before giving up (the engine
/// retries the whole notification later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Requests per provider, including the first (at least 1).
    pub attempts: u32,
    /// The wait after the first failure; it doubles after each further failure.
    pub first_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// How long one request may take, connection included.
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    /// 3 attempts, waiting 0.5 s then 1 s (at most 5 s), 10 s per request: a chat service
    /// having a bad second is ridden out, while a rollout's job is never held up for long.
    fn default() -> Self {
        RetryPolicy {
            attempts: 3,
            first_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(5),
            timeout: Duration::from_secs(10),
        }
    }
}

/// The notifier of a process with alert providers: logs every notification, then sends it to
/// each provider of the rollout's alerts whose severity admits it, formatted for the provider's
/// service, with retries (see the [module documentation](self) for the delivery guarantee).
#[derive(Clone)]
pub struct AlertNotifier {
    catalog: SharedCatalog,
    client: HttpClient,
    retry: RetryPolicy,
    acknowledged: Arc<Mutex<Acknowledged>>,
}

impl AlertNotifier {
    /// A notifier resolving providers in `catalog`, with a fresh HTTP client and the default
    /// [`RetryPolicy`].
    pub fn new(catalog: impl Into<SharedCatalog>) -> AlertNotifier {
        AlertNotifier::with_options(catalog, HttpClient::default(), RetryPolicy::default())
    }

    /// A notifier with a given HTTP client (to share its connection pool) and retry policy.
    pub fn with_options(
        catalog: impl Into<SharedCatalog>,
        client: HttpClient,
        retry: RetryPolicy,
    ) -> AlertNotifier {
        AlertNotifier {
            catalog: catalog.into(),
            client,
            retry,
            acknowledged: Arc::new(Mutex::new(Acknowledged::default())),
        }
    }

    /// The providers a notification goes to, and the alerts whose provider cannot be resolved
    /// (the catalog changed since the rollout was applied).
    fn destinations(
        &self,
        rollout: &Rollout,
        severity: Severity,
    ) -> (Vec<Destination>, Vec<String>) {
        let catalog = self.catalog.snapshot();
        let namespace = rollout.metadata.namespace_or_default();
        let mut destinations: Vec<Destination> = Vec::new();
        let mut unresolved = Vec::new();
        for alert in &rollout.spec.analysis.alerts {
            // Flagger's rule: an alert gets its own severity and everything more severe.
            if severity < alert.severity {
                continue;
            }
            let reference = &alert.provider_ref;
            let provider_namespace = reference.namespace.as_deref().unwrap_or(namespace);
            let Some(provider) = catalog.alert_provider(reference, namespace) else {
                unresolved.push(format!(
                    "alert {:?}: no AlertProvider {provider_namespace}/{} is loaded",
                    alert.name, reference.name
                ));
                continue;
            };
            let Some(mut url) = Self::address(&catalog, provider) else {
                unresolved.push(format!(
                    "alert {:?}: AlertProvider {provider_namespace}/{} has no address",
                    alert.name, reference.name
                ));
                continue;
            };
            if provider.spec.provider_type == AlertProviderType::Discord {
                url = discord_native(&url);
            }
            let provider_key = format!("{provider_namespace}/{}", reference.name);
            // Two alerts naming the same provider would post the same message twice.
            if let Some(existing) = destinations.iter_mut().find(|d| d.provider == provider_key) {
                existing.alerts.push(alert.name.clone());
                continue;
            }
            destinations.push(Destination {
                alerts: vec![alert.name.clone()],
                provider: provider_key,
                provider_type: provider.spec.provider_type,
                url,
                channel: provider.spec.channel.clone(),
                username: provider.spec.username.clone(),
            });
        }
        (destinations, unresolved)
    }

    /// The provider's URL: its secret's `address` key wins over `spec.address`, as in Flagger,
    /// so a URL kept in a secret overrides a placeholder in the document.
    fn address(catalog: &Catalog, provider: &AlertProvider) -> Option<String> {
        let from_secret = provider.spec.secret_ref.as_ref().and_then(|reference| {
            catalog
                .secret(reference, provider.metadata.namespace_or_default())
                .and_then(|secret| secret.get("address"))
        });
        from_secret
            .or(provider.spec.address.as_deref())
            .map(str::to_string)
    }
}

impl Notifier for AlertNotifier {
    fn refuse(&self, rollout: &Rollout) -> Vec<FieldError> {
        let Some(policy) = self.client.policy() else {
            return Vec::new();
        };
        let catalog = self.catalog.snapshot();
        let namespace = rollout.metadata.namespace_or_default();
        let mut refusals = Vec::new();
        for (index, alert) in rollout.spec.analysis.alerts.iter().enumerate() {
            let Some(provider) = catalog.alert_provider(&alert.provider_ref, namespace) else {
                continue; // reported by the catalog's own check
            };
            let Some(url) = Self::address(&catalog, provider) else {
                continue;
            };
            // The URL may hold a token: the refusal names only its host and port.
            if let Err(refusal) = policy.check_url(&url) {
                refusals.push(FieldError::with_value(
                    format!("spec.analysis.alerts[{index}].providerRef"),
                    format!("{:?}", alert.provider_ref.name),
                    format!("AlertProvider {}: {refusal}", alert.provider_ref.name),
                ));
            }
        }
        refusals
    }

    fn notify<'a>(
        &'a self,
        key: &'a RolloutKey,
        rollout: &'a Rollout,
        notification: &'a Notification,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            tracing::info!(rollout = %key, severity = severity_name(notification.severity), id = %notification.delivery_id, "{}", notification.message);
            let (destinations, mut failures) = self.destinations(rollout, notification.severity);
            if destinations.is_empty() && failures.is_empty() {
                return Ok(());
            }
            let message = Message::new(key, rollout, notification);
            let headers = vec![
                ("idempotency-key", notification.delivery_id.clone()),
                ("x-weir-delivery", notification.delivery_id.clone()),
                ("x-weir-rollout", key.to_string()),
                (
                    "user-agent",
                    concat!("weir/", env!("CARGO_PKG_VERSION")).to_string(),
                ),
            ];
            let total = destinations.len() + failures.len();
            // Providers are independent: one slow service must not delay the others, so each
            // gets its own task (aborted if this call is dropped, since the set is dropped).
            let mut sending = tokio::task::JoinSet::new();
            for destination in destinations {
                let memory_key = format!(
                    "{key}\u{0}{}\u{0}{}",
                    notification.delivery_id, destination.provider
                );
                if self.acknowledged_contains(&memory_key) {
                    continue;
                }
                let body = message.payload(&destination).to_string().into_bytes();
                let client = self.client.clone();
                let headers = headers.clone();
                let retry = self.retry;
                sending.spawn(async move {
                    let result = post(&client, &destination.url, headers, body, retry).await;
                    (destination, memory_key, result)
                });
            }
            // Providers that cannot be reached as configured fail the same way every time.
            let mut worth_retrying = false;
            while let Some(joined) = sending.join_next().await {
                match joined {
                    Ok((_, memory_key, Ok(()))) => self.remember(memory_key),
                    Ok((destination, _, Err((kind, error)))) => {
                        let failure = format!("{}: {error}", destination.describe());
                        tracing::warn!(rollout = %key, id = %notification.delivery_id, "notification not delivered: {failure}");
                        failures.push(failure);
                        worth_retrying |= kind == ErrorKind::Transient;
                    }
                    Err(error) => {
                        failures.push(format!("a delivery task ended early: {error}"));
                        worth_retrying = true;
                    }
                }
            }
            if failures.is_empty() {
                Ok(())
            } else {
                failures.sort();
                let message = format!(
                    "notification {} not delivered to {} of {total} providers: {}",
                    notification.delivery_id,
                    failures.len(),
                    failures.join("; ")
                );
                Err(if worth_retrying {
                    ProviderError::transient(message)
                } else {
                    ProviderError::permanent(message)
                })
            }
        })
    }
}

impl AlertNotifier {
    fn acknowledged_contains(&self, memory_key: &str) -> bool {
        self.acknowledged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set
            .contains(memory_key)
    }

    fn remember(&self, memory_key: String) {
        self.acknowledged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(memory_key);
    }
}

/// The (rollout, delivery id, provider) triples recently accepted, so the engine's retry of a
/// partly delivered notification does not post it again to providers that already took it.
/// Bounded: the oldest are forgotten first, and forgetting only costs a duplicate.
#[derive(Default)]
struct Acknowledged {
    order: VecDeque<String>,
    set: HashSet<String>,
}

const ACKNOWLEDGED_KEPT: usize = 4096;

impl Acknowledged {
    fn insert(&mut self, key: String) {
        if self.set.insert(key.clone()) {
            self.order.push_back(key);
        }
        while self.order.len() > ACKNOWLEDGED_KEPT {
            if let Some(oldest) = self.order.pop_front() {
                self.set.remove(&oldest);
            }
        }
    }
}

/// One provider a notification goes to.
struct Destination {
    /// The alerts that chose it.
    alerts: Vec<String>,
    /// `namespace/name` of the AlertProvider.
    provider: String,
    provider_type: AlertProviderType,
    url: String,
    channel: Option<String>,
    username: Option<String>,
}

impl Destination {
    /// Names the alert and provider, never the URL (webhook URLs are credentials).
    fn describe(&self) -> String {
        format!(
            "alert {} (AlertProvider {}, {})",
            self.alerts
                .iter()
                .map(|alert| format!("{alert:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.provider,
            type_name(self.provider_type)
        )
    }
}

/// POSTs `body` with retries; `Err` says what the provider last answered.
async fn post(
    client: &HttpClient,
    url: &str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    retry: RetryPolicy,
) -> Result<(), (ErrorKind, String)> {
    let attempts = retry.attempts.max(1);
    let backoff = Backoff {
        first: retry.first_backoff,
        max: retry.max_backoff,
    };
    let mut last = String::new();
    for attempt in 1..=attempts {
        match client
            .post_json(url, headers.clone(), body.clone(), retry.timeout)
            .await
        {
            Ok(answer) if answer.status.is_success() => return Ok(()),
            Ok(answer) => {
                let text = String::from_utf8_lossy(&answer.body);
                let text = truncate(text.trim(), 200);
                last = if text.is_empty() {
                    format!("HTTP {}", answer.status)
                } else {
                    format!("HTTP {}: {text}", answer.status)
                };
                // The request was understood and refused: sending it again cannot help.
                if !worth_retrying(answer.status) {
                    return Err((ErrorKind::Permanent, format!("{last} (not retried)")));
                }
            }
            // The client's errors start with the URL, which may hold a token.
            Err(error) if error.is_refused() => {
                let message = error.to_string().replace(url, &redact(url));
                return Err((ErrorKind::Permanent, format!("{message} (not retried)")));
            }
            Err(error) => last = error.to_string().replace(url, &redact(url)),
        }
        if attempt < attempts {
            tokio::time::sleep(backoff.delay(attempt - 1)).await;
        }
    }
    Err((
        ErrorKind::Transient,
        format!("{last} (after {attempts} attempts)"),
    ))
}

/// Flagger posts Slack-formatted messages to Discord's Slack-compatible endpoint, the webhook
/// URL plus `/slack`, so Flagger users may have written that suffix; weir posts Discord's own
/// format, which goes to the webhook URL itself.
fn discord_native(url: &str) -> String {
    let (path, query) = match url.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (url, None),
    };
    let path = path
        .strip_suffix("/slack")
        .or_else(|| path.strip_suffix("/slack/"))
        .unwrap_or(path);
    match query {
        Some(query) => format!("{path}?{query}"),
        None => path.to_string(),
    }
}

/// Server errors, timeouts and rate limiting may pass; other answers will not change.
/// `scheme://host[:port]/…`: enough to tell which service failed without the path and query,
/// where Slack, Teams and Discord put the webhook's secret.
fn redact(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(uri) => match (uri.scheme_str(), uri.authority()) {
            (Some(scheme), Some(authority)) => {
                // The authority may carry user:password@.
                let host = authority.as_str().rsplit('@').next().unwrap_or_default();
                format!("{scheme}://{host}/…")
            }
            _ => "<the provider's address>".into(),
        },
        Err(_) => "<the provider's address>".into(),
    }
}

// === formatting ===

/// Longest message text in chat payloads.
const MAX_MESSAGE: usize = 1000;
/// Evidence lines shown in chat payloads; the rest are counted.
const MAX_EVIDENCE_LINES: usize = 10;
/// Longest evidence line.
const MAX_LINE: usize = 300;

/// What a notification says, prepared once for every provider.
struct Message<'a> {
    key: &'a RolloutKey,
    notification: &'a Notification,
    /// "what happened", bounded.
    text: String,
    /// Phase, weight, run, revision.
    facts: Vec<(&'static str, String)>,
    /// Why: one line per check, hook, verdict or actor, bounded.
    evidence: Vec<String>,
}

impl<'a> Message<'a> {
    fn new(key: &'a RolloutKey, rollout: &Rollout, notification: &'a Notification) -> Message<'a> {
        let mut facts = vec![
            ("Phase", notification.phase.to_string()),
            ("Canary weight", notification.canary_weight.to_string()),
            ("Run", notification.run.to_string()),
        ];
        if let Some(revision) = &notification.revision {
            facts.push(("Revision", truncate(revision, 80)));
        }
        Message {
            key,
            notification,
            text: truncate(&notification.message, MAX_MESSAGE),
            facts,
            evidence: evidence_lines(rollout, &notification.evidence),
        }
    }

    fn title(&self) -> String {
        format!(
            "{} {}",
            self.key,
            severity_title(self.notification.severity)
        )
    }

    /// The whole message as plain text (fallbacks, notification previews).
    fn plain(&self) -> String {
        format!(
            "[{}] {}: {}",
            severity_name(self.notification.severity),
            self.key,
            self.text
        )
    }

    fn payload(&self, destination: &Destination) -> Value {
        match destination.provider_type {
            AlertProviderType::Slack => self.slack(destination),
            AlertProviderType::Msteams => self.teams(),
            AlertProviderType::Discord => self.discord(destination),
            AlertProviderType::Generic => self.generic(),
        }
    }

    /// An incoming-webhook message: `text` for notifications and clients without attachments,
    /// an attachment coloured by severity with the facts and the evidence.
    fn slack(&self, destination: &Destination) -> Value {
        let mut fields: Vec<Value> = self
            .facts
            .iter()
            .map(
                |(name, value)| json!({"title": name, "value": slack_escape(value), "short": true}),
            )
            .collect();
        if !self.evidence.is_empty() {
            fields.push(json!({
                "title": "Evidence",
                "value": self
                    .evidence
                    .iter()
                    .map(|line| format!("• {}", slack_escape(line)))
                    .collect::<Vec<_>>()
                    .join("\n"),
                "short": false,
            }));
        }
        let fallback = slack_escape(&self.plain());
        let mut payload = json!({
            "text": fallback,
            "attachments": [{
                "color": format!("#{}", colour_hex(self.notification.severity)),
                "fallback": fallback,
                "title": slack_escape(&self.title()),
                "text": slack_escape(&self.text),
                "fields": fields,
                "footer": format!("weir · delivery {}", slack_escape(&self.notification.delivery_id)),
                "mrkdwn_in": ["text", "fields"],
            }],
        });
        if let Some(channel) = &destination.channel {
            payload["channel"] = json!(channel);
        }
        if let Some(username) = &destination.username {
            payload["username"] = json!(username);
        }
        payload
    }

    /// An Office 365 connector card (MessageCard), the format of Teams' incoming webhooks and
    /// of Flagger's msteams alerts.
    fn teams(&self) -> Value {
        let mut facts: Vec<Value> = self
            .facts
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        facts.push(json!({"name": "Delivery", "value": self.notification.delivery_id}));
        let mut sections = vec![json!({
            "text": self.text,
            "facts": facts,
            "markdown": true,
        })];
        if !self.evidence.is_empty() {
            sections.push(json!({
                "title": "Evidence",
                // Teams' markdown needs a blank line to break lines.
                "text": self
                    .evidence
                    .iter()
                    .map(|line| format!("- {line}"))
                    .collect::<Vec<_>>()
                    .join("\n\n"),
                "markdown": true,
            }));
        }
        json!({
            "@type": "MessageCard",
            "@context": "https://schema.org/extensions",
            "themeColor": colour_hex(self.notification.severity),
            "summary": truncate(&self.plain(), 200),
            "title": self.title(),
            "sections": sections,
        })
    }

    /// A Discord webhook message: one embed coloured by severity (Discord's limits: title 256,
    /// description 4096, field value 1024 characters), no mentions.
    fn discord(&self, destination: &Destination) -> Value {
        let mut description = self.text.clone();
        if !self.evidence.is_empty() {
            description.push_str("\n\n**Evidence**");
            for line in &self.evidence {
                let _ = write!(description, "\n• {line}");
            }
        }
        let fields: Vec<Value> = self
            .facts
            .iter()
            .map(|(name, value)| json!({"name": name, "value": truncate(value, 1024), "inline": true}))
            .collect();
        let mut payload = json!({
            "embeds": [{
                "title": truncate(&self.title(), 256),
                "description": truncate(&description, 4096),
                "color": colour_int(self.notification.severity),
                "fields": fields,
                "footer": {"text": truncate(&format!("weir · delivery {}", self.notification.delivery_id), 2048)},
            }],
            // Evidence quotes other systems' text: it must never ping @everyone.
            "allowed_mentions": {"parse": []},
        });
        if let Some(username) = &destination.username {
            payload["username"] = json!(truncate(username, 80));
        }
        payload
    }

    /// Every field, for programs: the evidence as weir records it, plus the text people see.
    fn generic(&self) -> Value {
        let notification = self.notification;
        json!({
            "id": notification.delivery_id,
            "rollout": {"namespace": self.key.namespace, "name": self.key.name},
            "severity": notification.severity,
            "phase": notification.phase,
            "canaryWeight": notification.canary_weight,
            "run": notification.run,
            "revision": notification.revision,
            "message": notification.message,
            "evidence": notification.evidence,
            "text": self.plain(),
            "details": self.evidence,
        })
    }
}

/// One line per piece of evidence, failures first, at most [`MAX_EVIDENCE_LINES`] of at most
/// [`MAX_LINE`] characters: chat messages stay readable when a tick had many checks.
fn evidence_lines(rollout: &Rollout, evidence: &Evidence) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(verdict) = &evidence.verdict {
        let outcome = serde_json::to_value(verdict.outcome)
            .ok()
            .and_then(|value| value.as_str().map(str::to_string))
            .unwrap_or_default();
        let summary = match verdict.evidence.get("summary").and_then(Value::as_str) {
            Some(summary) => summary.to_string(),
            None if verdict.evidence.is_null() => String::new(),
            None => verdict.evidence.to_string(),
        };
        lines.push(if summary.is_empty() {
            format!("judge {}: {outcome}", verdict.judge)
        } else {
            format!("judge {}: {outcome}: {summary}", verdict.judge)
        });
    }
    let rank = |outcome: CheckOutcome| match outcome {
        CheckOutcome::Fail => 0,
        CheckOutcome::NoData => 1,
        CheckOutcome::Pass => 2,
    };
    let mut checks: Vec<_> = evidence.checks.iter().collect();
    checks.sort_by_key(|check| rank(check.outcome));
    for check in checks {
        let outcome = match check.outcome {
            CheckOutcome::Fail => "failed",
            CheckOutcome::NoData => "had no data",
            CheckOutcome::Pass => "passed",
        };
        let mut line = format!("check {} {outcome}", check.name);
        if let Some(value) = check.value {
            let _ = write!(line, ": {value}");
        }
        let range = rollout
            .spec
            .analysis
            .metrics
            .iter()
            .find(|metric| metric.name == check.name)
            .and_then(|metric| metric.threshold_range.as_ref());
        match range.map(|range| (range.min, range.max)) {
            Some((Some(min), Some(max))) => {
                let _ = write!(line, " (accepted {min} to {max})");
            }
            Some((Some(min), None)) => {
                let _ = write!(line, " (accepted min {min})");
            }
            Some((None, Some(max))) => {
                let _ = write!(line, " (accepted max {max})");
            }
            _ => {}
        }
        if !check.message.is_empty() {
            let _ = write!(line, " - {}", check.message);
        }
        lines.push(line);
    }
    let mut hooks: Vec<_> = evidence.hooks.iter().collect();
    hooks.sort_by_key(|hook| hook.success);
    for hook in hooks {
        let outcome = if hook.success { "succeeded" } else { "failed" };
        let mut line = format!("hook {} ({}) {outcome}", hook.name, hook.hook_type);
        if !hook.message.is_empty() {
            let _ = write!(line, ": {}", hook.message);
        }
        lines.push(line);
    }
    if let Some(actor) = &evidence.actor {
        lines.push(format!("command by {actor}"));
    }
    let total = lines.len();
    let mut shown: Vec<String> = lines
        .into_iter()
        .take(MAX_EVIDENCE_LINES)
        .map(|line| truncate(&line, MAX_LINE))
        .collect();
    if total > MAX_EVIDENCE_LINES {
        shown.push(format!(
            "… and {} more (`weir history` shows them all)",
            total - MAX_EVIDENCE_LINES
        ));
    }
    shown
}

/// Slack reads `<...>` as links and mentions (`<!channel>`), so text from elsewhere is escaped.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn severity_name(severity: Severity) -> &'static str {
    match severity {
        Severity::Info => "info",
        Severity::Warn => "warn",
        Severity::Error => "error",
    }
}

fn severity_title(severity: Severity) -> &'static str {
    match severity {
        Severity::Info => "(info)",
        Severity::Warn => "(warning)",
        Severity::Error => "(error)",
    }
}

fn type_name(provider_type: AlertProviderType) -> &'static str {
    match provider_type {
        AlertProviderType::Slack => "slack",
        AlertProviderType::Msteams => "msteams",
        AlertProviderType::Discord => "discord",
        AlertProviderType::Generic => "generic",
    }
}

/// Green, amber, red.
fn colour_int(severity: Severity) -> u32 {
    match severity {
        Severity::Info => 0x2E_B6_7D,
        Severity::Warn => 0xEC_B2_2E,
        Severity::Error => 0xE0_1E_5A,
    }
}

fn colour_hex(severity: Severity) -> String {
    format!("{:06X}", colour_int(severity))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn redaction_keeps_the_host_and_drops_the_secret_path() {
        assert_eq!(
            redact("https://user:pw@hooks.slack.com/services/T0/B0/secret"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(redact("not a url"), "<the provider's address>");
    }

    #[test]
    fn discord_urls_lose_flaggers_slack_suffix() {
        assert_eq!(
            discord_native("https://discord.com/api/webhooks/1/t/slack"),
            "https://discord.com/api/webhooks/1/t"
        );
        assert_eq!(
            discord_native("https://discord.com/api/webhooks/1/t/slack?thread_id=9"),
            "https://discord.com/api/webhooks/1/t?thread_id=9"
        );
        assert_eq!(
            discord_native("https://discord.com/api/webhooks/1/t"),
            "https://discord.com/api/webhooks/1/t"
        );
    }

    #[test]
    fn the_acknowledgement_memory_is_bounded() {
        let mut memory = Acknowledged::default();
        for index in 0..ACKNOWLEDGED_KEPT + 10 {
            memory.insert(index.to_string());
        }
        assert_eq!(memory.set.len(), ACKNOWLEDGED_KEPT);
        assert!(!memory.set.contains("0"));
        assert!(memory.set.contains(&(ACKNOWLEDGED_KEPT + 9).to_string()));
    }
}
