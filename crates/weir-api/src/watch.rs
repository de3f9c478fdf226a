//! `GET /api/v1/watch`: status changes as Server-Sent Events.
//!
//! Each committed change is one `event: status` whose data is
//! `{namespace, name, version, phase, canaryWeight, status, events}` (a deleted rollout: phase
//! `Terminated`, status `null`). The engine's broadcast has a bounded buffer; a watcher that falls
//! behind gets `event: lagged` with how many changes it missed, and should list again (the store
//! has the full state and history). Comments keep idle connections alive through proxies.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, StreamExt};
use serde::Serialize;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use weir_core::Weight;
use weir_core::model::{Phase, RolloutStatus};
use weir_engine::StatusChange;
use weir_store::{Store, StoredEvent};

use crate::ApiState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::input::Params;

/// How often an idle stream sends a comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The data of an `event: status`.
#[derive(Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "StatusChange")]
pub(crate) struct StatusData<'a> {
    /// The rollout's namespace.
    namespace: &'a str,
    /// Its name.
    name: &'a str,
    /// Its version after the change.
    version: u64,
    /// Its phase (`Terminated` once deleted).
    phase: Phase,
    /// The canary's weight.
    canary_weight: Weight,
    /// The status; null once the rollout is deleted.
    status: Option<&'a RolloutStatus>,
    /// The events the change committed.
    events: &'a [StoredEvent],
}

struct Filter {
    namespace: Option<String>,
    name: Option<String>,
    /// Who is watching: changes of namespaces it does not see are left out.
    caller: Caller,
}

impl Filter {
    fn admits(&self, change: &StatusChange) -> bool {
        self.caller.sees(&change.key.namespace)
            && self
                .namespace
                .as_ref()
                .is_none_or(|namespace| *namespace == change.key.namespace)
            && self
                .name
                .as_ref()
                .is_none_or(|name| *name == change.key.name)
    }
}

/// `GET /api/v1/watch?namespace=&name=`
pub(crate) async fn watch<S: Store>(
    State(state): State<ApiState<S>>,
    caller: Caller,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let params = Params::parse(query, &["namespace", "name"])?;
    let filter = Filter {
        namespace: params.text("namespace"),
        name: params.text("name"),
        caller,
    };
    // Subscribed before the response starts, so a client that has the response headers misses
    // no change committed after that.
    let changes = state.engine.subscribe();
    let mut shutdown = state.shutdown.clone();
    let stopped = async move {
        if shutdown.wait_for(|stop| *stop).await.is_err() {
            // No shutdown signal wired: run until the client or the engine goes.
            std::future::pending::<()>().await;
        }
    };

    let hello = stream::once(async { Ok::<_, Infallible>(Event::default().comment("watching")) });
    let updates = stream::unfold((changes, filter), |(mut changes, filter)| async move {
        loop {
            match changes.recv().await {
                Ok(change) if filter.admits(&change) => {
                    return Some((status_event(&change), (changes, filter)));
                }
                Ok(_) => {}
                Err(RecvError::Lagged(missed)) => {
                    return Some((lagged_event(missed), (changes, filter)));
                }
                Err(RecvError::Closed) => return None,
            }
        }
    });
    let events = hello.chain(updates).take_until(Box::pin(stopped));
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

fn status_event(change: &StatusChange) -> Result<Event, Infallible> {
    let data = StatusData {
        namespace: &change.key.namespace,
        name: &change.key.name,
        version: change.version,
        phase: change.phase(),
        canary_weight: change.canary_weight(),
        status: change.status.as_ref(),
        events: &change.events,
    };
    Ok(match Event::default().event("status").json_data(&data) {
        Ok(event) => event,
        // Serializing these types cannot fail (string keys, finite numbers); should it ever,
        // the watcher is told to re-list rather than silently missing a change.
        Err(error) => Event::default().event("lagged").data(
            json!({"missed": 1, "message": format!("a change could not be encoded ({error}); list again")})
                .to_string(),
        ),
    })
}

fn lagged_event(missed: u64) -> Result<Event, Infallible> {
    let data = json!({
        "missed": missed,
        "message": format!(
            "this watcher fell behind and missed {missed} status changes; list the rollouts again"
        ),
    });
    Ok(Event::default().event("lagged").data(data.to_string()))
}
