//! Notifications over real HTTP on loopback: local receivers that record what they get (and can
//! be told to fail), alert providers of every type resolved from a catalog, severity filtering,
//! retries, the idempotency id, and one rollout rolled back by the engine end to end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use weir_core::Weight;
use weir_core::catalog::Catalog;
use weir_core::machine::Notification;
use weir_core::model::{
    CheckOutcome, CheckResult, Evidence, HookResult, HookType, JudgeVerdict, Phase, Severity,
    VerdictOutcome,
};
use weir_engine::Notifier;
use weir_http::HttpClient;
use weir_store::RolloutKey;
use weir_testkit::fixtures::{ClosedPort, catalog_and_rollout};
use weir_testkit::receiver::{Receiver, Reply};
use weir_webhooks::notify::{AlertNotifier, RetryPolicy};

// --- local receivers ---

/// A receiver answering `status` ("receiver says no") to its first `fail_first` requests, 200
/// ("ok") afterwards.
async fn failing(fail_first: usize, status: u16) -> Receiver {
    Receiver::start(move |index, _| {
        if index < fail_first {
            Reply::new(status, "receiver says no")
        } else {
            Reply::new(200, "ok")
        }
    })
    .await
}

async fn healthy() -> Receiver {
    failing(0, 200).await
}

// --- documents ---

/// One receiver per provider type, plus an error-only pager.
struct Receivers {
    slack: Receiver,
    teams: Receiver,
    discord: Receiver,
    generic: Receiver,
    pager: Receiver,
}

impl Receivers {
    async fn healthy() -> Receivers {
        Receivers {
            slack: healthy().await,
            teams: healthy().await,
            discord: healthy().await,
            generic: healthy().await,
            pager: healthy().await,
        }
    }

    /// AlertProviders of every type, the generic one's URL in a Secret (which wins over its
    /// placeholder address), and a rollout with alerts at every severity.
    fn documents(&self) -> String {
        format!(
            r##"
apiVersion: weir.dev/v1alpha1
kind: AlertProvider
metadata: {{name: chat, namespace: shop}}
spec: {{type: slack, address: "{slack}", channel: "#deploys", username: weir-bot}}
---
apiVersion: weir.dev/v1alpha1
kind: AlertProvider
metadata: {{name: teams, namespace: shop}}
spec: {{type: msteams, address: "{teams}"}}
---
apiVersion: weir.dev/v1alpha1
kind: AlertProvider
metadata: {{name: discord, namespace: shop}}
spec: {{type: discord, address: "{discord}", username: weir-bot}}
---
apiVersion: v1
kind: Secret
metadata: {{name: hook-url, namespace: shop}}
stringData: {{address: "{generic}"}}
---
apiVersion: weir.dev/v1alpha1
kind: AlertProvider
metadata: {{name: hook, namespace: shop}}
spec: {{type: generic, address: "http://127.0.0.1:9/placeholder", secretRef: {{name: hook-url}}}}
---
apiVersion: weir.dev/v1alpha1
kind: AlertProvider
metadata: {{name: pager, namespace: ops}}
spec: {{type: generic, address: "{pager}"}}
---
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: web, namespace: shop}}
spec:
  target:
    kind: local
    listen: 127.0.0.1:0
    primary: {{url: "http://127.0.0.1:19001"}}
    canary: {{url: "http://127.0.0.1:19002"}}
  plan: {{canary: {{stepWeights: [20, 50, 100]}}}}
  analysis:
    metrics:
      - {{name: request-success-rate, thresholdRange: {{min: 99}}}}
      - {{name: request-duration, thresholdRange: {{max: 500}}}}
    alerts:
      - {{name: chat, severity: info, providerRef: {{name: chat}}}}
      - {{name: teams, severity: warn, providerRef: {{name: teams}}}}
      - {{name: discord, providerRef: {{name: discord}}}}
      - {{name: hook, severity: info, providerRef: {{name: hook}}}}
      - {{name: pager, severity: error, providerRef: {{name: pager, namespace: ops}}}}
"##,
            slack = self.slack.url("/services/T000/B000/XXXX"),
            teams = self.teams.url("/webhookb2/team"),
            // Flagger's Slack-compatible Discord address: weir posts to the webhook itself.
            discord = self.discord.url("/api/webhooks/1/token/slack"),
            generic = self.generic.url("/weir"),
            pager = self.pager.url("/pager"),
        )
    }

    fn all(&self) -> [(&'static str, &Receiver); 5] {
        [
            ("slack", &self.slack),
            ("teams", &self.teams),
            ("discord", &self.discord),
            ("generic", &self.generic),
            ("pager", &self.pager),
        ]
    }
}

/// Quick retries, so the tests of failures take milliseconds.
fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        attempts: 3,
        first_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        timeout: Duration::from_secs(5),
    }
}

fn notifier(catalog: Arc<Catalog>) -> AlertNotifier {
    AlertNotifier::with_options(catalog, HttpClient::default(), fast_retries())
}

fn key() -> RolloutKey {
    RolloutKey::new("shop", "web")
}

fn rolled_back() -> Notification {
    Notification {
        severity: Severity::Error,
        message: "run 3 rolled back: canary analysis failed 2 times (threshold 2)".into(),
        delivery_id: "run-3/Failed/1763733600000/notify".into(),
        phase: Phase::Failed,
        canary_weight: Weight::ZERO,
        run: 3,
        revision: Some("v2-5f2c9a".into()),
        evidence: Evidence {
            checks: vec![
                CheckResult {
                    name: "request-duration".into(),
                    outcome: CheckOutcome::Pass,
                    value: Some(112.5),
                    message: "canary: p99 112.5 ms over 400 requests".into(),
                },
                CheckResult {
                    name: "request-success-rate".into(),
                    outcome: CheckOutcome::Fail,
                    value: Some(71.25),
                    message: "canary: 400 requests, 115 errors: 71.25% success".into(),
                },
            ],
            hooks: vec![HookResult {
                name: "smoke".into(),
                hook_type: HookType::Rollout,
                success: false,
                message: "500 Internal Server Error <!channel>".into(),
            }],
            verdict: Some(JudgeVerdict {
                judge: "sequential".into(),
                outcome: VerdictOutcome::Fail,
                evidence: json!({
                    "summary": "canary error rate 28.8% vs primary 0.2%: e-value 1.2e6 over 1/alpha",
                    "logEValue": 14.0,
                }),
            }),
            actor: None,
        },
    }
}

fn progress(severity: Severity, id: &str) -> Notification {
    Notification {
        severity,
        message: format!("{severity:?} notification"),
        delivery_id: id.into(),
        phase: Phase::Progressing,
        canary_weight: Weight::from_percent(20),
        run: 3,
        revision: Some("v2".into()),
        evidence: Evidence {
            actor: Some("alice".into()),
            ..Evidence::default()
        },
    }
}

// --- tests ---

#[tokio::test]
async fn an_error_reaches_every_provider_formatted_for_its_service_with_the_evidence() {
    let receivers = Receivers::healthy().await;
    let (catalog, rollout) = catalog_and_rollout(&receivers.documents());
    let notification = rolled_back();
    notifier(catalog)
        .notify(&key(), &rollout, &notification)
        .await
        .unwrap();

    for (name, receiver) in receivers.all() {
        let received = receiver.only();
        assert_eq!(
            received.header("idempotency-key").unwrap_or_default(),
            notification.delivery_id,
            "{name}"
        );
        assert_eq!(
            received.header("x-weir-delivery").unwrap_or_default(),
            notification.delivery_id,
            "{name}"
        );
        assert_eq!(
            received.header("x-weir-rollout").unwrap_or_default(),
            "shop/web",
            "{name}"
        );
        assert!(
            received
                .header("content-type")
                .unwrap_or_default()
                .starts_with("application/json"),
            "{name}"
        );
    }

    // Slack: a fallback text, one attachment in red with the facts and the evidence.
    let slack = receivers.slack.only();
    assert_eq!(slack.path, "/services/T000/B000/XXXX");
    let body = &slack.json;
    assert!(
        body["text"]
            .as_str()
            .unwrap()
            .contains("shop/web: run 3 rolled back"),
        "{body}"
    );
    assert_eq!(body["channel"], "#deploys");
    assert_eq!(body["username"], "weir-bot");
    let attachment = &body["attachments"][0];
    assert_eq!(attachment["color"], "#E01E5A");
    let fields: Vec<(&str, &str)> = attachment["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["title"].as_str().unwrap(), f["value"].as_str().unwrap()))
        .collect();
    assert!(fields.contains(&("Phase", "Failed")), "{fields:?}");
    assert!(fields.contains(&("Canary weight", "0%")), "{fields:?}");
    assert!(fields.contains(&("Run", "3")), "{fields:?}");
    assert!(fields.contains(&("Revision", "v2-5f2c9a")), "{fields:?}");
    let evidence = fields
        .iter()
        .find(|(title, _)| *title == "Evidence")
        .unwrap()
        .1;
    let lines: Vec<&str> = evidence.lines().collect();
    assert!(
        lines[0].starts_with("• judge sequential: fail: canary error rate 28.8%"),
        "{evidence}"
    );
    // The failed check first, with its value and what was accepted.
    assert_eq!(
        lines[1],
        "• check request-success-rate failed: 71.25 (accepted min 99) - canary: 400 requests, 115 errors: 71.25% success"
    );
    assert!(lines[2].starts_with("• check request-duration passed: 112.5 (accepted max 500)"));
    // Text from elsewhere cannot mention the channel.
    assert_eq!(
        lines[3],
        "• hook smoke (rollout) failed: 500 Internal Server Error &lt;!channel&gt;"
    );

    // Teams: a MessageCard in red with facts and an evidence section.
    let teams = receivers.teams.only().json;
    assert_eq!(teams["@type"], "MessageCard");
    assert_eq!(teams["@context"], "https://schema.org/extensions");
    assert_eq!(teams["themeColor"], "E01E5A");
    assert!(teams["summary"].as_str().unwrap().contains("rolled back"));
    assert_eq!(teams["title"], "shop/web (error)");
    let facts = teams["sections"][0]["facts"].as_array().unwrap();
    assert!(facts.contains(&json!({"name": "Phase", "value": "Failed"})));
    assert!(facts.contains(&json!({"name": "Delivery", "value": notification.delivery_id})));
    assert_eq!(teams["sections"][1]["title"], "Evidence");
    assert!(
        teams["sections"][1]["text"]
            .as_str()
            .unwrap()
            .contains("check request-success-rate failed: 71.25")
    );

    // Discord: one red embed, no mentions, at the webhook's own URL.
    let discord = receivers.discord.only();
    assert_eq!(discord.path, "/api/webhooks/1/token");
    let discord = discord.json;
    assert_eq!(discord["username"], "weir-bot");
    assert_eq!(discord["allowed_mentions"], json!({"parse": []}));
    let embed = &discord["embeds"][0];
    assert_eq!(embed["color"], 0xE0_1E_5A);
    assert_eq!(embed["title"], "shop/web (error)");
    let description = embed["description"].as_str().unwrap();
    assert!(
        description.starts_with("run 3 rolled back"),
        "{description}"
    );
    assert!(
        description.contains("check request-success-rate failed: 71.25 (accepted min 99)"),
        "{description}"
    );
    assert!(
        embed["fields"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "Run", "value": "3", "inline": true}))
    );

    // Generic: every field, the id in the body too, the evidence as recorded. Its URL came
    // from the Secret, not the placeholder address.
    let generic = receivers.generic.only();
    assert_eq!(generic.path, "/weir");
    let body = generic.json;
    assert_eq!(body["id"], notification.delivery_id);
    assert_eq!(body["rollout"], json!({"namespace": "shop", "name": "web"}));
    assert_eq!(body["severity"], "error");
    assert_eq!(body["phase"], "Failed");
    assert_eq!(body["canaryWeight"], 0);
    assert_eq!(body["run"], 3);
    assert_eq!(body["revision"], "v2-5f2c9a");
    assert_eq!(body["message"], notification.message);
    assert_eq!(
        body["evidence"],
        serde_json::to_value(&notification.evidence).unwrap()
    );
    assert_eq!(body["evidence"]["checks"][1]["value"], 71.25);
    assert_eq!(body["evidence"]["verdict"]["judge"], "sequential");
    assert!(
        body["details"][1]
            .as_str()
            .unwrap()
            .starts_with("check request-success-rate failed")
    );
    // The pager (in another namespace) got the same document.
    assert_eq!(receivers.pager.only().json, body);
}

#[tokio::test]
async fn alerts_receive_their_severity_or_higher() {
    let receivers = Receivers::healthy().await;
    let (catalog, rollout) = catalog_and_rollout(&receivers.documents());
    let notifier = notifier(catalog);
    notifier
        .notify(&key(), &rollout, &progress(Severity::Info, "info-1"))
        .await
        .unwrap();
    let got = |receiver: &Receiver| {
        receiver
            .received()
            .iter()
            .map(|r| r.header("x-weir-delivery").unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    // info: the info alerts (and `discord`, whose severity defaults to info) only.
    assert_eq!(got(&receivers.slack), ["info-1"]);
    assert_eq!(got(&receivers.discord), ["info-1"]);
    assert_eq!(got(&receivers.generic), ["info-1"]);
    assert!(got(&receivers.teams).is_empty());
    assert!(
        got(&receivers.pager).is_empty(),
        "error-only alert got info"
    );

    notifier
        .notify(&key(), &rollout, &progress(Severity::Warn, "warn-1"))
        .await
        .unwrap();
    assert_eq!(got(&receivers.teams), ["warn-1"]);
    assert_eq!(got(&receivers.slack), ["info-1", "warn-1"]);
    assert!(
        got(&receivers.pager).is_empty(),
        "error-only alert got warn"
    );
    // The colour follows the severity; the actor of a command is part of the evidence.
    let teams = receivers.teams.only().json;
    assert_eq!(teams["themeColor"], "ECB22E");
    assert_eq!(teams["sections"][1]["text"], "- command by alice");
    let slack = receivers.slack.received()[0].json.clone();
    assert_eq!(slack["attachments"][0]["color"], "#2EB67D");
    assert_eq!(
        receivers.generic.received()[0].json["canaryWeight"],
        json!(20)
    );
}

#[tokio::test]
async fn a_receiver_failing_twice_gets_three_attempts_with_the_same_id() {
    let receivers = Receivers::healthy().await;
    let flaky = failing(2, 503).await;
    let documents = receivers
        .documents()
        .replace(&receivers.generic.url("/weir"), &flaky.url("/weir"));
    let (catalog, rollout) = catalog_and_rollout(&documents);
    let notification = rolled_back();
    notifier(catalog)
        .notify(&key(), &rollout, &notification)
        .await
        .unwrap();
    let attempts = flaky.received();
    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    for attempt in &attempts {
        assert_eq!(
            attempt.header("idempotency-key").unwrap_or_default(),
            notification.delivery_id
        );
        assert_eq!(attempt.json["id"], notification.delivery_id);
    }
    assert_eq!(receivers.slack.received().len(), 1);
}

#[tokio::test]
async fn a_receiver_that_always_fails_makes_notify_fail_naming_it_and_is_retried_alone() {
    let receivers = Receivers::healthy().await;
    let broken = failing(usize::MAX, 500).await;
    let documents = receivers
        .documents()
        .replace(&receivers.pager.url("/pager"), &broken.url("/pager"));
    let (catalog, rollout) = catalog_and_rollout(&documents);
    let notifier = notifier(catalog);
    let notification = rolled_back();
    let failure = notifier
        .notify(&key(), &rollout, &notification)
        .await
        .unwrap_err();
    assert!(!failure.is_permanent(), "{failure}");
    let error = failure.message;
    assert!(
        error.contains(r#"alert "pager" (AlertProvider ops/pager, generic)"#),
        "{error}"
    );
    assert!(
        error.contains("HTTP 500 Internal Server Error: receiver says no"),
        "{error}"
    );
    assert!(error.contains("after 3 attempts"), "{error}");
    assert!(error.contains(&notification.delivery_id), "{error}");
    assert_eq!(broken.received().len(), 3);
    // The others got it once.
    for receiver in [&receivers.slack, &receivers.teams, &receivers.generic] {
        assert_eq!(receiver.received().len(), 1);
    }

    // The engine retries the whole notification later: only the provider that has not
    // accepted it is sent it again (by this process; after a restart the id de-duplicates).
    assert!(
        notifier
            .notify(&key(), &rollout, &notification)
            .await
            .is_err()
    );
    assert_eq!(broken.received().len(), 6);
    for receiver in [&receivers.slack, &receivers.teams, &receivers.generic] {
        assert_eq!(receiver.received().len(), 1);
    }
}

#[tokio::test]
async fn a_refusal_is_not_retried() {
    let receivers = Receivers::healthy().await;
    let refusing = failing(usize::MAX, 400).await;
    let documents = receivers
        .documents()
        .replace(&receivers.teams.url("/webhookb2/team"), &refusing.url("/x"));
    let (catalog, rollout) = catalog_and_rollout(&documents);
    let failure = notifier(catalog)
        .notify(&key(), &rollout, &rolled_back())
        .await
        .unwrap_err();
    assert!(failure.is_permanent(), "{failure}");
    let error = failure.message;
    assert_eq!(refusing.received().len(), 1);
    assert!(
        error
            .contains(r#"alert "teams" (AlertProvider shop/teams, msteams): HTTP 400 Bad Request"#),
        "{error}"
    );
    assert!(error.contains("not retried"), "{error}");
}

#[tokio::test]
async fn an_unreachable_provider_fails_without_revealing_its_url() {
    let receivers = Receivers::healthy().await;
    // Nothing listens there, and nothing can start to while the test holds it.
    let closed = ClosedPort::new();
    let closed = closed.address();
    let secret_url = format!("http://{closed}/services/T000/B000/TOP-SECRET-TOKEN");
    let documents = receivers.documents().replace(
        &receivers.slack.url("/services/T000/B000/XXXX"),
        &secret_url,
    );
    let (catalog, rollout) = catalog_and_rollout(&documents);
    let failure = notifier(catalog)
        .notify(&key(), &rollout, &rolled_back())
        .await
        .unwrap_err();
    assert!(!failure.is_permanent(), "{failure}");
    let error = failure.message;
    assert!(error.contains(r#"alert "chat""#), "{error}");
    assert!(error.contains(&format!("http://{closed}/…")), "{error}");
    assert!(!error.contains("TOP-SECRET-TOKEN"), "{error}");
}

#[tokio::test]
async fn a_rollout_without_alerts_only_logs() {
    let receivers = Receivers::healthy().await;
    let documents = receivers.documents();
    let without_alerts = documents.split("    alerts:").next().unwrap().to_string();
    let (catalog, rollout) = catalog_and_rollout(&without_alerts);
    assert!(rollout.spec.analysis.alerts.is_empty());
    notifier(catalog)
        .notify(&key(), &rollout, &rolled_back())
        .await
        .unwrap();
    for (name, receiver) in receivers.all() {
        assert!(receiver.received().is_empty(), "{name}");
    }
}

#[tokio::test]
async fn long_evidence_is_truncated_and_counted() {
    let receivers = Receivers::healthy().await;
    let (catalog, rollout) = catalog_and_rollout(&receivers.documents());
    let mut notification = rolled_back();
    notification.message = "x".repeat(5_000);
    notification.evidence.checks = (0..40)
        .map(|index| CheckResult {
            name: format!("check-{index}"),
            outcome: CheckOutcome::Fail,
            value: Some(f64::from(index)),
            message: "y".repeat(2_000),
        })
        .collect();
    notifier(catalog)
        .notify(&key(), &rollout, &notification)
        .await
        .unwrap();
    let slack = receivers.slack.only().json;
    let size = slack.to_string().len();
    assert!(size < 12_000, "{size} bytes");
    let fields = slack["attachments"][0]["fields"].as_array().unwrap();
    let evidence = fields.last().unwrap()["value"].as_str().unwrap();
    assert_eq!(evidence.lines().count(), 11, "{evidence}");
    assert!(
        evidence.lines().last().unwrap().contains("and 32 more"),
        "{evidence}"
    );
    let discord = receivers.discord.only().json;
    let description = discord["embeds"][0]["description"].as_str().unwrap();
    assert!(description.chars().count() <= 4096);
    // The generic document keeps everything for programs.
    let generic = receivers.generic.only().json;
    assert_eq!(generic["evidence"]["checks"].as_array().unwrap().len(), 40);
    assert_eq!(generic["message"].as_str().unwrap().len(), 5_000);
}

// --- end to end ---

mod end_to_end {
    use super::*;
    use weir_engine::{Engine, EngineOptions, TargetProvider};
    use weir_local::LocalTargets;
    use weir_router::RouterConfig;
    use weir_store::{SqliteStore, Store};
    use weir_testkit::engine::{Background, Load, local_providers};
    use weir_testkit::fixtures::start_faulty_sample_app as sample_app;
    use weir_testkit::wait::wait_for;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rolled_back_canary_notifies_the_generic_receiver_with_its_evidence() {
        let receiver = healthy().await;
        let (v1, v2) = (sample_app("v1", 0.0).await, sample_app("v2", 30.0).await);
        let documents = format!(
            r#"
apiVersion: weir.dev/v1alpha1
kind: AlertProvider
metadata: {{name: ops-hook}}
spec: {{type: generic, address: "{url}"}}
---
apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: shop}}
spec:
  target:
    kind: local
    listen: "127.0.0.1:0"
    primary: {{url: "http://{v1}", healthCheck: /healthz}}
    canary: {{url: "http://{v2}", healthCheck: /healthz}}
  plan: {{canary: {{stepWeights: [20, 50, 100]}}}}
  analysis:
    interval: 1s
    threshold: 10
    noData: hold
    progressDeadline: 30s
    metrics: [{{name: request-success-rate, thresholdRange: {{min: 95}}}}]
    alerts: [{{name: ops, severity: warn, providerRef: {{name: ops-hook}}}}]
"#,
            url = receiver.url("/weir"),
        );
        let (catalog, rollout) = catalog_and_rollout(&documents);
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("weir.db"))
            .await
            .unwrap();
        // The router binds a port the system picks; the load reads it back once it serves.
        let targets = LocalTargets::new(RouterConfig::default()).allowing_commands();
        let providers = local_providers(&targets, Arc::clone(&catalog));
        let (engine, handle) = Engine::new(store.clone(), providers, EngineOptions::default());
        let engine = Background::start(engine);
        let key = RolloutKey::of(&rollout);
        handle.apply(rollout, None).await.unwrap();

        let load = Load::start(&targets, &key, 300.0);

        // Wait (a generous deadline, not a timing assertion) for the rollback's notification.
        let received = wait_for("the error notification", || async {
            receiver
                .received()
                .into_iter()
                .find(|r| r.json["severity"] == "error")
        })
        .await;
        load.stop().await;

        let body = &received.json;
        assert_eq!(
            body["rollout"],
            json!({"namespace": "default", "name": "shop"})
        );
        assert_eq!(body["phase"], "Failed");
        assert_eq!(body["canaryWeight"], 0);
        assert_eq!(body["run"], 1);
        let message = body["message"].as_str().unwrap();
        assert!(message.starts_with("run 1 rolled back"), "{message}");
        // Why: the sequential judge's verdict (it watches every second; the threshold of 10
        // failed checks keeps the interval checks from getting there first), with its summary.
        let verdict = &body["evidence"]["verdict"];
        assert_eq!(verdict["outcome"], "fail", "{body:#}");
        assert!(verdict["evidence"]["summary"].is_string(), "{body:#}");
        let details = body["details"].as_array().unwrap();
        assert!(
            details[0].as_str().unwrap().starts_with(&format!(
                "judge {}: fail: ",
                verdict["judge"].as_str().unwrap()
            )),
            "{body:#}"
        );
        let id = body["id"].as_str().unwrap();
        assert!(id.starts_with("run-1/Failed/"), "{id}");
        assert_eq!(received.header("idempotency-key").unwrap_or_default(), id);
        assert_eq!(received.header("x-weir-delivery").unwrap_or_default(), id);

        // Delivered, so nothing stays pending; and the rollout did roll back.
        let stored = wait_for("nothing pending after delivery", || async {
            let stored = store.get(&key).await.unwrap()?;
            stored.pending_effects.is_empty().then_some(stored)
        })
        .await;
        assert_eq!(stored.status.phase, Phase::Failed);
        // A warn alert gets no info notifications: this one is the only message.
        assert_eq!(receiver.received().len(), 1, "{:#?}", receiver.received());

        engine.stop().await;
        targets.remove(&key).await;
    }
}
