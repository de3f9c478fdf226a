//! Webhooks with Flagger's payload and success rule, retries, idempotency keys and signatures;
//! and a notifier that logs.
//!
//! What a receiver gets (docs/WEBHOOKS.md has the whole contract):
//!
//! - `POST` with `Content-Type: application/json` and Flagger's payload, byte for byte as
//!   Flagger's Go encoder writes it: `{"name","namespace","phase","checksum","metadata"}` in that
//!   order, `metadata` left out when empty, `<`, `>` and `&` escaped as `\u003c`, `\u003e`,
//!   `\u0026`;
//! - `X-Weir-Delivery` and `Idempotency-Key`: the delivery id, the same on every retry of one
//!   delivery, different for every delivery;
//! - with a signing secret (`secretRef`), `X-Weir-Signature: sha256=<hex>`: the HMAC-SHA256 of
//!   the exact body bytes under the Secret's `hmacSecret`.
//!
//! Any status up to 202 is success, as in Flagger. A connection error, a timeout, or an answer
//! weir-http's one retry policy calls worth retrying (408, 429, a 5xx other than 501) is tried
//! again `retries` times (default 0, as in Flagger) after 0.5s, 1s, 2s, 4s, 5s, 5s, ...
//! (deterministic, no jitter); any other answer is final. Each attempt has the
//! hook's whole timeout (default 10s), as each of Flagger's does.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use serde::Serialize;
use sha2::Sha256;
use weir_core::FieldError;
use weir_core::catalog::SharedCatalog;
use weir_core::machine::Notification;
use weir_core::model::{
    Event, HMAC_SECRET_KEY, HookResult, HookType, MAX_WEBHOOK_RETRIES, Phase, RolloutStatus,
    Webhook,
};
use weir_engine::clock::{SharedClock, SystemClock};
use weir_store::RolloutKey;

use crate::text::truncate;
use weir_engine::{BoxFuture, HookRunner, Notifier, ProviderError};
pub use weir_http::retry::Backoff;
use weir_http::retry::worth_retrying;
use weir_http::{Answer, HttpClient, HttpError};

/// The timeout of one attempt when the hook sets none (Flagger's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The header carrying the delivery id.
pub const DELIVERY_HEADER: &str = "x-weir-delivery";
/// The header carrying the delivery id for receivers that de-duplicate on `Idempotency-Key`.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// The header carrying `sha256=<hex HMAC-SHA256 of the body>` when the hook has a secret.
pub const SIGNATURE_HEADER: &str = "x-weir-signature";

/// How much of a failing answer's body is kept in the hook's result (and so in the history).
const MAX_MESSAGE_CHARS: usize = 300;

/// Calls webhooks over HTTP: POSTs Flagger's payload and counts any status up to 202 as
/// success, as Flagger does, so existing Flagger receivers (load testers, gates) work unchanged.
/// Retries, idempotency keys and signatures are described in the module documentation.
#[derive(Clone)]
pub struct HttpHookRunner {
    client: HttpClient,
    catalog: SharedCatalog,
    backoff: Backoff,
    clock: SharedClock,
}

impl Default for HttpHookRunner {
    /// A runner without secrets: hooks with a `secretRef` fail (apply-time validation refuses
    /// them where a catalog is known).
    fn default() -> Self {
        HttpHookRunner::new(SharedCatalog::default())
    }
}

impl HttpHookRunner {
    /// A runner that signs with the secrets of `catalog` (a hook's `secretRef` names one; its
    /// namespace defaults to the rollout's).
    pub fn new(catalog: impl Into<SharedCatalog>) -> Self {
        HttpHookRunner {
            client: HttpClient::default(),
            catalog: catalog.into(),
            backoff: Backoff::default(),
            clock: SystemClock::shared(),
        }
    }

    /// The same runner stamping payloads with `clock`'s time (the engine's, in a process that
    /// moves time itself).
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The same runner sending through `client` (one with the process's outbound policy, so a
    /// hook's address is checked when the rollout is applied and on every connection).
    pub fn with_client(mut self, client: HttpClient) -> Self {
        self.client = client;
        self
    }

    /// The same runner with other waits between attempts (tests use short ones).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The signing key of `hook`, when it has a `secretRef`; an error names what is missing.
    fn signing_key(&self, key: &RolloutKey, hook: &Webhook) -> Result<Option<String>, String> {
        let Some(reference) = &hook.secret_ref else {
            return Ok(None);
        };
        let catalog = self.catalog.snapshot();
        let namespace = reference.namespace.as_deref().unwrap_or(&key.namespace);
        let secret = catalog.secret(reference, &key.namespace).ok_or_else(|| {
            format!(
                "not called: its secretRef names Secret {namespace}/{}, which is not loaded",
                reference.name
            )
        })?;
        match secret.get(HMAC_SECRET_KEY) {
            Some(value) if !value.is_empty() => Ok(Some(value.to_string())),
            _ => Err(format!(
                "not called: Secret {namespace}/{} has no `{HMAC_SECRET_KEY}` key",
                reference.name
            )),
        }
    }
}

/// Flagger's `CanaryWebhookPayload`, fields in its order.
#[derive(Serialize)]
struct Payload<'a> {
    name: &'a str,
    namespace: &'a str,
    phase: Phase,
    checksum: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    metadata: Cow<'a, BTreeMap<String, String>>,
}

/// The phase Flagger sends to a hook of this type: `Progressing` for the hooks it calls during
/// the analysis, the canary's phase for the others.
fn payload_phase(hook_type: HookType, status: &RolloutStatus) -> Phase {
    match hook_type {
        HookType::PreRollout | HookType::Rollout | HookType::ConfirmTrafficIncrease => {
            Phase::Progressing
        }
        _ => status.phase,
    }
}

/// The body of one call, as Flagger's Go encoder would write it.
///
/// Event hooks get Flagger's event metadata for `event` (`eventMessage`, `eventType`: `Normal`
/// or `Warning`, `timestamp`: milliseconds since the epoch; without an event: the status message,
/// `Normal` and `now_ms`), with the hook's own metadata added where it does not clash, as
/// Flagger does.
pub fn payload(
    key: &RolloutKey,
    status: &RolloutStatus,
    hook: &Webhook,
    event: Option<&Event>,
    now_ms: i64,
) -> Vec<u8> {
    let metadata = if hook.hook_type == HookType::Event {
        let (message, warning, at_ms) = match event {
            Some(event) => (
                event.message.clone(),
                event.reason.is_warning(),
                event.at.as_millisecond(),
            ),
            None => (status.message.clone(), false, now_ms),
        };
        let event_type = if warning { "Warning" } else { "Normal" };
        let mut metadata = BTreeMap::from([
            ("eventMessage".to_string(), message),
            ("eventType".to_string(), event_type.to_string()),
            ("timestamp".to_string(), at_ms.to_string()),
        ]);
        for (name, value) in &hook.metadata {
            metadata
                .entry(name.clone())
                .or_insert_with(|| value.clone());
        }
        Cow::Owned(metadata)
    } else {
        Cow::Borrowed(&hook.metadata)
    };
    let payload = Payload {
        name: &key.name,
        namespace: &key.namespace,
        phase: payload_phase(hook.hook_type, status),
        checksum: status.canary_revision.as_deref().unwrap_or_default(),
        metadata,
    };
    // Serializing strings and a string map cannot fail.
    let json = serde_json::to_string(&payload).unwrap_or_default();
    go_html_escape(&json).into_bytes()
}

/// Escapes what Go's `encoding/json` escapes and serde_json does not (`<`, `>`, `&`, U+2028,
/// U+2029). Only string contents can hold these characters, so replacing them anywhere in a
/// JSON text keeps it valid and equal in meaning.
fn go_html_escape(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            other => out.push(other),
        }
    }
    out
}

/// `sha256=<lowercase hex HMAC-SHA256 of body under key>`, the value of `X-Weir-Signature`.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        // HMAC takes keys of any length; this branch is never taken.
        return String::new();
    };
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut hex = String::with_capacity(7 + digest.len() * 2);
    hex.push_str("sha256=");
    for byte in digest.iter() {
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 0x0f)]));
    }
    hex
}

/// What one attempt came to.
enum Attempt {
    Success(String),
    /// A failure worth another attempt (transport, timeout, or an answer
    /// [`worth_retrying`]).
    Transient(String),
    /// A final answer.
    Refused(String),
}

fn classify(outcome: Result<Answer, HttpError>) -> Attempt {
    match outcome {
        Ok(answer) if answer.status.as_u16() <= 202 => Attempt::Success(answer.status.to_string()),
        Ok(answer) => {
            let body = String::from_utf8_lossy(&answer.body);
            let body = body.trim();
            let message = if body.is_empty() {
                answer.status.to_string()
            } else {
                format!("{}: {}", answer.status, truncate(body, MAX_MESSAGE_CHARS))
            };
            if worth_retrying(answer.status) {
                Attempt::Transient(message)
            } else {
                Attempt::Refused(message)
            }
        }
        // The outbound policy refused the address: it will refuse it again.
        Err(error) if error.is_refused() => Attempt::Refused(error.to_string()),
        Err(error) => Attempt::Transient(error.to_string()),
    }
}

impl HookRunner for HttpHookRunner {
    fn refuse(&self, rollout: &weir_core::model::Rollout) -> Vec<FieldError> {
        let Some(policy) = self.client.policy() else {
            return Vec::new();
        };
        rollout
            .spec
            .analysis
            .webhooks
            .iter()
            .enumerate()
            .filter_map(|(index, hook)| {
                let refusal = policy.check_url(&hook.url).err()?;
                Some(FieldError::with_value(
                    format!("spec.analysis.webhooks[{index}].url"),
                    format!("{:?}", hook.url),
                    refusal.to_string(),
                ))
            })
            .collect()
    }

    fn call<'a>(
        &'a self,
        key: &'a RolloutKey,
        status: &'a RolloutStatus,
        hook: &'a Webhook,
        delivery_id: &'a str,
    ) -> BoxFuture<'a, HookResult> {
        Box::pin(self.send(key, status, hook, delivery_id, None))
    }

    fn call_for_event<'a>(
        &'a self,
        key: &'a RolloutKey,
        status: &'a RolloutStatus,
        hook: &'a Webhook,
        delivery_id: &'a str,
        event: &'a Event,
    ) -> BoxFuture<'a, HookResult> {
        Box::pin(self.send(key, status, hook, delivery_id, Some(event)))
    }
}

impl HttpHookRunner {
    /// One delivery: the payload, its headers and signature, retries with backoff.
    async fn send(
        &self,
        key: &RolloutKey,
        status: &RolloutStatus,
        hook: &Webhook,
        delivery_id: &str,
        event: Option<&Event>,
    ) -> HookResult {
        {
            let result = |success: bool, message: String| HookResult {
                name: hook.name.clone(),
                hook_type: hook.hook_type,
                success,
                message,
            };
            let now_ms = self.clock.now().as_millisecond();
            let body = payload(key, status, hook, event, now_ms);
            let mut headers = vec![
                (DELIVERY_HEADER, delivery_id.to_string()),
                (IDEMPOTENCY_HEADER, delivery_id.to_string()),
            ];
            match self.signing_key(key, hook) {
                Ok(Some(secret)) => {
                    headers.push((SIGNATURE_HEADER, signature(secret.as_bytes(), &body)));
                }
                Ok(None) => {}
                Err(message) => return result(false, message),
            }
            let timeout = hook
                .timeout
                .map_or(DEFAULT_TIMEOUT, |timeout| timeout.get());
            let attempts = hook.retries.unwrap_or(0).min(MAX_WEBHOOK_RETRIES) + 1;
            let mut attempt = 1;
            loop {
                let outcome = self
                    .client
                    .post_json(&hook.url, headers.clone(), body.clone(), timeout)
                    .await;
                let tries = if attempt > 1 {
                    format!(" (attempt {attempt} of {attempts})")
                } else {
                    String::new()
                };
                match classify(outcome) {
                    Attempt::Success(message) => return result(true, message + &tries),
                    Attempt::Refused(message) => return result(false, message + &tries),
                    Attempt::Transient(message) if attempt >= attempts => {
                        return result(false, message + &tries);
                    }
                    Attempt::Transient(message) => {
                        tracing::debug!(hook = %hook.name, id = %delivery_id, "attempt {attempt} of {attempts} failed: {message}");
                    }
                }
                tokio::time::sleep(self.backoff.delay(attempt - 1)).await;
                attempt += 1;
            }
        }
    }
}

/// Writes notifications to the log (issue 6 brings Slack, Teams, Discord and generic webhooks).
#[derive(Clone, Default)]
pub struct LogNotifier;

impl Notifier for LogNotifier {
    fn notify<'a>(
        &'a self,
        key: &'a RolloutKey,
        _rollout: &'a weir_core::model::Rollout,
        notification: &'a Notification,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            tracing::info!(rollout = %key, severity = ?notification.severity, id = %notification.delivery_id, "{}", notification.message);
            Ok(())
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_flaggers_byte_for_byte() {
        let key = RolloutKey::new("shop", "checkout");
        let status = RolloutStatus {
            phase: Phase::WaitingPromotion,
            canary_revision: Some("abc123".into()),
            ..RolloutStatus::default()
        };
        let mut hook: Webhook = serde_json::from_str(
            r#"{"name": "load", "url": "http://t/", "metadata": {"type": "bash", "cmd": "curl -s 'http://app/?a=1&b=<2>'"}}"#,
        )
        .unwrap();
        let body = payload(&key, &status, &hook, None, 0);
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#"{"name":"checkout","namespace":"shop","phase":"Progressing","checksum":"abc123","metadata":{"cmd":"curl -s 'http://app/?a=1\u0026b=\u003c2\u003e'","type":"bash"}}"#
        );
        hook.metadata.clear();
        hook.hook_type = HookType::ConfirmPromotion;
        let body = payload(&key, &status, &hook, None, 0);
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#"{"name":"checkout","namespace":"shop","phase":"WaitingPromotion","checksum":"abc123"}"#
        );
    }

    #[test]
    fn event_payloads_carry_flaggers_event_metadata() {
        let key = RolloutKey::new("shop", "checkout");
        let status = RolloutStatus {
            phase: Phase::Progressing,
            message: "canary weight 10% (step 1 of 5)".into(),
            ..RolloutStatus::default()
        };
        let hook: Webhook = serde_json::from_str(
            r#"{"name": "feed", "type": "event", "url": "http://t/", "metadata": {"team": "a", "eventType": "mine"}}"#,
        )
        .unwrap();
        let event = Event {
            at: jiff::Timestamp::from_millisecond(42).unwrap(),
            run: 1,
            reason: weir_core::model::EventReason::ChecksFailed,
            phase: Phase::Progressing,
            canary_weight: weir_core::Weight::ZERO,
            message: "request-success-rate = 80 is out of range".into(),
            evidence: Default::default(),
        };
        let body = payload(&key, &status, &hook, Some(&event), 99);
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value["metadata"],
            serde_json::json!({"eventMessage": "request-success-rate = 80 is out of range", "eventType": "Warning", "timestamp": "42", "team": "a"})
        );
        // Without the event (an effect stored by an older weir): the status message, Normal, now.
        let body = payload(&key, &status, &hook, None, 99);
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value["metadata"],
            serde_json::json!({"eventMessage": "canary weight 10% (step 1 of 5)", "eventType": "Normal", "timestamp": "99", "team": "a"})
        );
    }

    #[test]
    fn signatures_are_hmac_sha256_in_hex() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
