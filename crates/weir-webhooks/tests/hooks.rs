//! Webhooks over real HTTP on loopback: a local receiver that records every request (and can be
//! told to fail, or to be slow), Flagger's payload byte for byte, the success rule, retries with
//! one idempotency key, the timeout of each attempt, signatures; and, through the engine, a
//! confirm-promotion gate that only a person opens, with signed rollout hooks on the way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use weir_core::catalog::Catalog;
use weir_core::document::{Document, load};
use weir_core::machine::{Command, GateRef};
use weir_core::model::{EventReason, HookType, Phase, Rollout, RolloutStatus, TargetKind, Webhook};
use weir_engine::synthetic::{SyntheticMetrics, SyntheticTargets};
use weir_engine::{Engine, EngineOptions, HookRunner, Providers};
use weir_store::{RolloutKey, SqliteStore, Store};
use weir_testkit::engine::Background;
use weir_testkit::fixtures::ClosedPort;
use weir_testkit::receiver::{Receiver, Reply};
use weir_testkit::wait::wait_for;
use weir_webhooks::hooks::LogNotifier;
use weir_webhooks::hooks::{Backoff, HttpHookRunner};

// --- helpers ---

fn webhook(yaml: &str) -> Webhook {
    serde_saphyr::from_str(yaml).unwrap()
}

fn key() -> RolloutKey {
    RolloutKey::new("shop", "checkout")
}

fn progressing() -> RolloutStatus {
    RolloutStatus {
        phase: Phase::Progressing,
        run: 3,
        canary_revision: Some("rev-7".into()),
        ..RolloutStatus::default()
    }
}

/// A runner with short waits between attempts (10ms doubling, at most 40ms).
fn runner(catalog: Catalog) -> HttpHookRunner {
    HttpHookRunner::new(Arc::new(catalog)).with_backoff(Backoff {
        first: Duration::from_millis(10),
        max: Duration::from_millis(40),
    })
}

fn catalog(yaml: &str) -> Catalog {
    let mut catalog = Catalog::default();
    for loaded in load(yaml.as_bytes()) {
        let document: Document = loaded.unwrap().document;
        assert!(
            catalog.add(document).is_none(),
            "only catalog documents here"
        );
    }
    catalog
}

const SIGNING_SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: hook-signing, namespace: shop}\nstringData: {hmacSecret: correct-horse-battery-staple}\n";

fn hmac_hex(key: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

// --- the runner ---

#[tokio::test]
async fn the_payload_is_flaggers_with_the_delivery_id_in_two_headers() {
    let receiver = Receiver::answering(200).await;
    let hook = webhook(&format!(
        "{{name: load-test, url: '{}', metadata: {{type: bash, cmd: 'hey -z 1m http://app/?a=1&b=2'}}}}",
        receiver.url("/hooks/load")
    ));
    let result = runner(Catalog::default())
        .call(
            &key(),
            &progressing(),
            &hook,
            "shop/checkout/run-3/load-test/1700",
        )
        .await;
    assert!(result.success, "{result:?}");
    assert_eq!(result.message, "200 OK");
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/hooks/load")
    );
    assert_eq!(request.header("content-type"), Some("application/json"));
    // Exactly what Flagger's Go encoder writes: its field order, its escaping of `&`.
    assert_eq!(
        std::str::from_utf8(&request.body).unwrap(),
        r#"{"name":"checkout","namespace":"shop","phase":"Progressing","checksum":"rev-7","metadata":{"cmd":"hey -z 1m http://app/?a=1\u0026b=2","type":"bash"}}"#
    );
    assert_eq!(
        request.header("x-weir-delivery"),
        Some("shop/checkout/run-3/load-test/1700")
    );
    assert_eq!(
        request.header("idempotency-key"),
        Some("shop/checkout/run-3/load-test/1700")
    );
    assert_eq!(
        request.header("x-weir-signature"),
        None,
        "no secret, no signature"
    );
}

#[tokio::test]
async fn up_to_202_is_success_and_203_a_final_failure() {
    for (status, success) in [
        (200, true),
        (202, true),
        (203, false),
        (403, false),
        (501, false),
    ] {
        let receiver = Receiver::answering(status).await;
        let hook = webhook(&format!(
            "{{name: gate, type: confirm-promotion, url: '{}', retries: 3}}",
            receiver.url("/gate")
        ));
        let result = runner(Catalog::default())
            .call(&key(), &progressing(), &hook, "id")
            .await;
        assert_eq!(result.success, success, "{status}: {result:?}");
        assert_eq!(result.hook_type, HookType::ConfirmPromotion);
        // An answer that is not transient is final: no retry.
        assert_eq!(receiver.received().len(), 1, "{status}");
        if !success {
            assert!(
                result.message.starts_with(&status.to_string())
                    && result.message.contains("answer 0"),
                "the status and the body: {}",
                result.message
            );
        }
    }
}

#[tokio::test]
async fn transient_failures_are_retried_with_backoff_and_one_idempotency_key() {
    // 503, 429, 500, then 200.
    let receiver = Receiver::start(|index, _| {
        Reply::new(
            [503, 429, 500, 200][index.min(3)],
            format!("answer {index}"),
        )
    })
    .await;
    let hook = webhook(&format!(
        "{{name: load, url: '{}', retries: 5}}",
        receiver.url("/")
    ));
    let started = Instant::now();
    let result = runner(Catalog::default())
        .call(&key(), &progressing(), &hook, "delivery-1")
        .await;
    let elapsed = started.elapsed();
    assert!(result.success, "{result:?}");
    assert_eq!(result.message, "200 OK (attempt 4 of 6)");
    let received = receiver.received();
    assert_eq!(received.len(), 4);
    let keys: Vec<Option<&str>> = received
        .iter()
        .map(|r| r.header("idempotency-key"))
        .collect();
    assert_eq!(keys, [Some("delivery-1"); 4]);
    // Same body every time.
    assert!(received.iter().all(|r| r.body == received[0].body));
    // Waits of 10, 20 and 40ms.
    assert!(elapsed >= Duration::from_millis(70), "{elapsed:?}");

    // Retries run out.
    let always = Receiver::answering(502).await;
    let hook = webhook(&format!(
        "{{name: load, url: '{}', retries: 2}}",
        always.url("/")
    ));
    let result = runner(Catalog::default())
        .call(&key(), &progressing(), &hook, "delivery-2")
        .await;
    assert!(!result.success);
    assert!(
        result.message.starts_with("502 Bad Gateway")
            && result.message.ends_with("(attempt 3 of 3)"),
        "{}",
        result.message
    );
    assert_eq!(always.received().len(), 3);

    // Without `retries`, one attempt (Flagger's default).
    let once = Receiver::answering(503).await;
    let hook = webhook(&format!("{{name: load, url: '{}'}}", once.url("/")));
    let result = runner(Catalog::default())
        .call(&key(), &progressing(), &hook, "delivery-3")
        .await;
    assert!(!result.success);
    assert_eq!(once.received().len(), 1);
}

#[tokio::test]
async fn each_attempt_has_the_whole_timeout() {
    // The first answer comes far too late (a minute: the bounds below are loose enough for a
    // loaded machine and still fail if the timeout is not applied); the second at once, well
    // within the timeout even on a stalled machine. The delay is the slowness under test, not
    // synchronisation.
    let receiver = Receiver::start(|index, _| {
        let reply = Reply::new(200, format!("answer {index}"));
        if index == 0 {
            reply.after(Duration::from_secs(60))
        } else {
            reply
        }
    })
    .await;
    let hook = webhook(&format!(
        "{{name: slow, url: '{}', timeout: 1s, retries: 1}}",
        receiver.url("/")
    ));
    let started = Instant::now();
    let result = runner(Catalog::default())
        .call(&key(), &progressing(), &hook, "id")
        .await;
    let elapsed = started.elapsed();
    assert!(result.success, "{result:?}");
    assert_eq!(receiver.received().len(), 2);
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(30),
        "{elapsed:?}"
    );

    // Every attempt too slow: a failure naming the timeout, after both attempts.
    let sluggish =
        Receiver::start(|_, _| Reply::new(200, "too late").after(Duration::from_secs(60))).await;
    let hook = webhook(&format!(
        "{{name: slow, url: '{}', timeout: 200ms, retries: 1}}",
        sluggish.url("/")
    ));
    let started = Instant::now();
    let result = runner(Catalog::default())
        .call(&key(), &progressing(), &hook, "id")
        .await;
    let elapsed = started.elapsed();
    assert!(!result.success);
    assert!(
        result.message.contains("no answer within 200ms"),
        "{}",
        result.message
    );
    assert!(
        elapsed >= Duration::from_millis(400) && elapsed < Duration::from_secs(30),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn a_configured_secret_signs_the_exact_body() {
    let receiver = Receiver::answering(200).await;
    let hook = webhook(&format!(
        "{{name: signed, type: pre-rollout, url: '{}', secretRef: {{name: hook-signing}}, metadata: {{note: '<é>'}}}}",
        receiver.url("/")
    ));
    let result = runner(catalog(SIGNING_SECRET))
        .call(&key(), &progressing(), &hook, "id")
        .await;
    assert!(result.success, "{result:?}");
    let received = receiver.received();
    let signature = received[0].header("x-weir-signature").unwrap();
    // What a receiver does: HMAC-SHA256 of the bytes it got, under the shared secret.
    let expected = format!(
        "sha256={}",
        hmac_hex("correct-horse-battery-staple", &received[0].body)
    );
    assert_eq!(signature, expected);
    assert_ne!(
        signature,
        format!("sha256={}", hmac_hex("another-secret", &received[0].body))
    );
}

#[tokio::test]
async fn a_secret_that_is_not_loaded_fails_the_hook_without_calling_it() {
    let receiver = Receiver::answering(200).await;
    let hook = webhook(&format!(
        "{{name: signed, url: '{}', secretRef: {{name: hook-signing}}}}",
        receiver.url("/")
    ));
    let result = runner(Catalog::default())
        .call(&key(), &progressing(), &hook, "id")
        .await;
    assert!(!result.success);
    assert!(
        result
            .message
            .contains("Secret shop/hook-signing, which is not loaded"),
        "{}",
        result.message
    );
    assert!(receiver.received().is_empty(), "never unsigned");
}

#[tokio::test]
async fn unreachable_hooks_fail_after_their_retries() {
    // Nothing listens there, and nothing can start to while the test holds it.
    let closed = ClosedPort::new();
    let hook = webhook(&format!(
        "{{name: gone, url: 'http://{}/', retries: 2}}",
        closed.address()
    ));
    let result = runner(Catalog::default())
        .call(&key(), &progressing(), &hook, "id")
        .await;
    assert!(!result.success);
    assert!(
        result.message.ends_with("(attempt 3 of 3)"),
        "{}",
        result.message
    );
}

// --- through the engine ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirm_promotion_gate_opened_by_a_person_promotes_and_the_history_says_who() {
    // The approval service never approves; the load hook checks every signature it gets.
    let approval = Receiver::answering(403).await;
    let load_hook = Receiver::start(|_, received| {
        let expected = format!(
            "sha256={}",
            hmac_hex("correct-horse-battery-staple", &received.body)
        );
        let signed = received.header("x-weir-signature") == Some(expected.as_str());
        Reply::new(if signed { 200 } else { 401 }, "")
    })
    .await;
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: checkout, namespace: shop}}
spec:
  target: {{kind: flag, flag: checkout, revision: r1}}
  plan: {{canary: {{stepWeight: 50}}}}
  analysis:
    interval: 1s
    threshold: 2
    webhooks:
      - {{name: approval, type: confirm-promotion, url: '{}'}}
      - {{name: load, url: '{}', secretRef: {{name: hook-signing}}}}
",
        approval.url("/approve"),
        load_hook.url("/load")
    );
    let rollout: Rollout = match load(yaml.as_bytes()).remove(0).unwrap().document {
        Document::Rollout(rollout) => *rollout,
        other => panic!("{other:?}"),
    };
    let catalog = Arc::new(catalog(SIGNING_SECRET));
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("weir.db"))
        .await
        .unwrap();
    let providers = Providers {
        targets: vec![(TargetKind::Flag, Arc::new(SyntheticTargets::default()))],
        metrics: vec![Arc::new(SyntheticMetrics::default())],
        hooks: Arc::new(HttpHookRunner::new(Arc::clone(&catalog))),
        notifier: Arc::new(LogNotifier),
        catalog: catalog.into(),
    };
    let (engine, handle) = Engine::new(store.clone(), providers, EngineOptions::default());
    let running = Background::start(engine);
    handle.apply(rollout, None).await.unwrap();
    let key = key();

    // The run reaches the end of its plan and waits: the hook keeps saying no, tick after tick.
    let phase = |wanted: Phase| {
        let (store, key) = (&store, &key);
        move || async move {
            let stored = store.get(key).await.unwrap()?;
            (stored.status.phase == wanted).then_some(())
        }
    };
    wait_for(
        "the run to wait for promotion",
        phase(Phase::WaitingPromotion),
    )
    .await;
    let asked = approval.received().len();
    wait_for("two more refusals of the approval hook", || async {
        (approval.received().len() >= asked + 2).then_some(())
    })
    .await;
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().status.phase,
        Phase::WaitingPromotion
    );

    // A person opens it. The command runs between ticks (one job per rollout at a time), so
    // no call to the approval hook is in flight once it returns.
    let gate = Command::OpenGate(GateRef {
        hook_type: Some(HookType::ConfirmPromotion),
        hook: None,
    });
    handle.command(key.clone(), gate, "ana").await.unwrap();
    let asked = approval.received().len();
    wait_for("the promotion", phase(Phase::Succeeded)).await;

    let events = store.events(&key, 0, 1000).await.unwrap();
    let opened = events
        .iter()
        .find(|stored| stored.event.reason == EventReason::GateOpened)
        .expect("the opening is in the history");
    assert_eq!(opened.event.evidence.actor.as_deref(), Some("ana"));
    let promoting = events
        .iter()
        .find(|stored| stored.event.reason == EventReason::Promoting)
        .expect("a promotion");
    assert_eq!(promoting.event.evidence.actor.as_deref(), Some("ana"));
    assert!(promoting.seq > opened.seq);
    // Every load-hook call was signed, and none failed.
    assert!(!load_hook.received().is_empty());
    assert!(
        events
            .iter()
            .all(|stored| stored.event.reason != EventReason::ChecksFailed),
        "{events:#?}"
    );
    // After the person's yes, the approval service was not asked again.
    assert_eq!(approval.received().len(), asked);

    running.stop().await;
}
