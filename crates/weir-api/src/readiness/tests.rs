#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;

use super::Readiness;

#[test]
fn every_check_must_pass() {
    let ready = Readiness::new().check("database", || Ok(()));
    assert_eq!(ready.answer().status(), StatusCode::OK);
    let (ok, checks) = ready.report();
    assert!(ok);
    assert_eq!(checks, json!({"database": {"ok": true}}));

    let not = ready.check("leases", || Err("not live".to_owned()));
    assert_eq!(not.answer().status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        not.report(),
        (
            false,
            json!({"database": {"ok": true}, "leases": {"ok": false, "message": "not live"}})
        )
    );
    assert_eq!(Readiness::new().answer().status(), StatusCode::OK);
}

/// Asks `readiness` until its report satisfies `want` (a hang fails the test).
async fn until(readiness: &Readiness, what: &str, want: impl Fn(&serde_json::Value) -> bool) {
    let value = weir_testkit::wait::wait_for(what, || async {
        let (_, checks) = readiness.report();
        want(&checks).then_some(checks)
    })
    .await;
    assert!(want(&value));
}

#[tokio::test]
async fn a_probe_keeps_its_last_result_and_a_slow_one_fails() {
    let up = Arc::new(AtomicBool::new(true));
    let flag = Arc::clone(&up);
    let readiness = Readiness::new()
        .probe(
            "database",
            Duration::from_millis(20),
            Duration::from_secs(5),
            move || {
                let up = flag.load(Ordering::SeqCst);
                async move {
                    if up {
                        Ok(())
                    } else {
                        Err("cannot be reached".to_owned())
                    }
                }
            },
        )
        .probe(
            "hung",
            Duration::from_millis(20),
            Duration::from_millis(50),
            std::future::pending::<Result<(), String>>,
        );
    until(&readiness, "the database probe to pass", |checks| {
        checks["database"]["ok"] == json!(true)
    })
    .await;
    until(&readiness, "the hung probe to time out", |checks| {
        checks["hung"]["message"]
            .as_str()
            .is_some_and(|message| message.starts_with("no answer within"))
    })
    .await;
    up.store(false, Ordering::SeqCst);
    until(&readiness, "the database probe to fail", |checks| {
        checks["database"] == json!({"ok": false, "message": "cannot be reached"})
    })
    .await;
    up.store(true, Ordering::SeqCst);
    until(&readiness, "the database probe to pass again", |checks| {
        checks["database"]["ok"] == json!(true)
    })
    .await;
}
