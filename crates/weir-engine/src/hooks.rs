//! Webhooks with Flagger's payload and success rule, and a notifier that logs.

use std::time::Duration;

use serde_json::json;
use weir_core::machine::Notification;
use weir_core::model::{HookResult, RolloutStatus, Webhook};
use weir_store::RolloutKey;

use crate::http::HttpClient;
use crate::providers::{BoxFuture, HookRunner, Notifier, ProviderError};

/// Calls webhooks over HTTP: POSTs `{name, namespace, phase, checksum, metadata}` and counts any
/// status up to 202 as success, as Flagger does, so existing Flagger receivers work unchanged.
#[derive(Clone, Default)]
pub struct HttpHookRunner {
    client: HttpClient,
}

impl HookRunner for HttpHookRunner {
    fn call<'a>(
        &'a self,
        key: &'a RolloutKey,
        status: &'a RolloutStatus,
        hook: &'a Webhook,
        delivery_id: &'a str,
    ) -> BoxFuture<'a, HookResult> {
        Box::pin(async move {
            let payload = json!({
                "name": key.name,
                "namespace": key.namespace,
                "phase": status.phase,
                "checksum": status.canary_revision.clone().unwrap_or_default(),
                "metadata": hook.metadata,
            });
            let timeout = hook
                .timeout
                .map_or(Duration::from_secs(10), |timeout| timeout.get());
            let body = payload.to_string().into_bytes();
            let headers = vec![("x-weir-delivery", delivery_id.to_string())];
            let (success, message) = match self
                .client
                .post_json(&hook.url, headers, body, timeout)
                .await
            {
                Ok(answer) if answer.status.as_u16() <= 202 => (true, format!("{}", answer.status)),
                Ok(answer) => (
                    false,
                    format!(
                        "{} {}",
                        answer.status,
                        String::from_utf8_lossy(&answer.body).trim()
                    ),
                ),
                Err(error) => (false, error),
            };
            HookResult {
                name: hook.name.clone(),
                hook_type: hook.hook_type,
                success,
                message,
            }
        })
    }
}

/// Writes notifications to the log (issue 6 brings Slack, Teams, Discord and generic webhooks).
#[derive(Clone, Default)]
pub struct LogNotifier;

impl Notifier for LogNotifier {
    fn notify<'a>(
        &'a self,
        key: &'a RolloutKey,
        notification: &'a Notification,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            tracing::info!(rollout = %key, severity = ?notification.severity, id = %notification.delivery_id, "{}", notification.message);
            Ok(())
        })
    }
}
