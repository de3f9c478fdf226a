//! `GET /readyz` with checks: whether this server can do its work now, for a load balancer or
//! Kubernetes' readiness probe (docs/SCALE-OUT.md). `/healthz` stays a pure liveness probe: a
//! server whose database is down is alive, and restarting it would not bring the database back.
//!
//! [`Readiness::apply`] puts it in front of a router: `GET`/`HEAD /readyz` answers 200
//! `{"status": "ok", "checks": {NAME: {"ok": true}}}` when every check passes, else 503
//! `{"status": "unavailable", "checks": {NAME: {"ok": false, "message": WHY}}}`. Checks read
//! state only (an answer never waits on the database): a [`Readiness::probe`] runs in a task of
//! its own, every `every`, each run bounded by a timeout, and the request reads its last result.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// A check: `Ok` when ready, else why not.
type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The checks of `/readyz` (see the module documentation). Cheap to clone.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Vec<(&'static str, Check)>,
    /// Keeps the probes' state alive; a probe's task ends once every clone is gone.
    probes: Vec<Arc<Mutex<Result<(), String>>>>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.checks.iter().map(|(name, _)| *name).collect();
        f.debug_struct("Readiness")
            .field("checks", &names)
            .finish_non_exhaustive()
    }
}

impl Readiness {
    /// No check: `/readyz` answers 200 (what a server without a database to lose says).
    pub fn new() -> Readiness {
        Readiness::default()
    }

    /// Adds `check`, asked on every `/readyz` request; it must answer at once (read state).
    pub fn check(
        mut self,
        name: &'static str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Readiness {
        self.checks.push((name, Arc::new(check)));
        self
    }

    /// Adds a check kept by a task of its own: `probe` runs at once and then every `every`;
    /// a run that takes longer than `timeout` counts as failed (saying so). Until its first
    /// run ends the check fails ("not checked yet"). Must be called within a Tokio runtime;
    /// the task ends once this `Readiness` and its clones are dropped.
    pub fn probe<P, F>(
        mut self,
        name: &'static str,
        every: Duration,
        timeout: Duration,
        probe: P,
    ) -> Readiness
    where
        P: Fn() -> F + Send + 'static,
        F: Future<Output = Result<(), String>> + Send,
    {
        let state = Arc::new(Mutex::new(Err::<(), String>("not checked yet".to_owned())));
        let weak: Weak<Mutex<Result<(), String>>> = Arc::downgrade(&state);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every.max(Duration::from_millis(10)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let result = match tokio::time::timeout(timeout, probe()).await {
                    Ok(result) => result,
                    Err(_) => Err(format!("no answer within {:.1} s", timeout.as_secs_f64())),
                };
                let Some(state) = weak.upgrade() else { return };
                *state.lock().unwrap_or_else(PoisonError::into_inner) = result;
            }
        });
        let read = Arc::downgrade(&state);
        self.probes.push(state);
        self.check(name, move || match read.upgrade() {
            Some(state) => state.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            None => Err("the probe is gone".to_owned()),
        })
    }

    /// Every check's result, and whether all passed.
    fn report(&self) -> (bool, Value) {
        let mut ready = true;
        let mut checks = Map::new();
        for (name, check) in &self.checks {
            let result = match check() {
                Ok(()) => json!({"ok": true}),
                Err(why) => {
                    ready = false;
                    json!({"ok": false, "message": why})
                }
            };
            checks.insert((*name).to_owned(), result);
        }
        (ready, Value::Object(checks))
    }

    /// `router` with `GET`/`HEAD /readyz` answered by these checks.
    pub fn apply(self, router: Router) -> Router {
        let readiness = Arc::new(self);
        router.layer(axum::middleware::from_fn(
            move |request: Request, next: Next| {
                let readiness = Arc::clone(&readiness);
                async move {
                    let asks = request.uri().path() == "/readyz"
                        && matches!(*request.method(), Method::GET | Method::HEAD);
                    if !asks {
                        return next.run(request).await;
                    }
                    readiness.answer()
                }
            },
        ))
    }

    fn answer(&self) -> Response {
        let (ready, checks) = self.report();
        if ready {
            Json(json!({"status": "ok", "checks": checks})).into_response()
        } else {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "unavailable", "checks": checks})),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests;
