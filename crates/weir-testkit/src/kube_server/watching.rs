//! Watches: newline-delimited JSON events read from the bounded history after a
//! resourceVersion, bookmarks, timeouts, selectors, 410 Expired.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::serve::{Body, ChannelBody, Repr, Shared, Target};
use super::store::State;
use super::table::{FieldSelector, LabelSelector, partial_metadata, table};
use super::types::ResourceType;

/// How often a watch that allows bookmarks gets one.
pub(crate) const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

fn line(kind: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": kind, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

fn expired(rv: u64, floor: u64) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("too old resource version: {rv} ({floor})"),
        "reason": "Expired",
        "code": 410,
    })
}

struct WatchFilter {
    rt: ResourceType,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl WatchFilter {
    fn matches(&self, object: &Value) -> bool {
        let namespace_ok = !self.rt.namespaced
            || self.namespace.as_deref().is_none_or(|ns| {
                object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    == Some(ns)
            });
        namespace_ok && self.labels.matches(object) && self.fields.matches(object)
    }
}

pub(super) fn start_watch(
    shared: Arc<Shared>,
    target: Target,
    labels: LabelSelector,
    fields: FieldSelector,
    query: &HashMap<String, String>,
    repr: Repr,
) -> Response<Body> {
    let start: Option<u64> = query
        .get("resourceVersion")
        .and_then(|rv| rv.parse().ok())
        .filter(|rv| *rv != 0);
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true")
        && repr != Repr::Table;
    let initial_events = query.get("sendInitialEvents").is_some_and(|v| v == "true");
    let include_object = query
        .get("includeObject")
        .map_or("Metadata", String::as_str)
        .to_owned();
    let filter = WatchFilter {
        rt: target.rt,
        namespace: target.namespace,
        labels,
        fields,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    shared
        .watches
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    tokio::spawn(async move {
        let options = WatchOptions {
            start,
            timeout,
            bookmarks,
            initial_events,
            repr,
            include_object,
        };
        watch_loop(shared, filter, options, tx).await;
    });
    let mut response = Response::new(BodyExt::boxed(ChannelBody(rx)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

struct WatchOptions {
    start: Option<u64>,
    timeout: Option<Duration>,
    bookmarks: bool,
    initial_events: bool,
    repr: Repr,
    include_object: String,
}

async fn watch_loop(
    shared: Arc<Shared>,
    filter: WatchFilter,
    options: WatchOptions,
    tx: mpsc::Sender<Bytes>,
) {
    let rt = &filter.rt;
    let deadline = options.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut changes = shared.changes.clone();
    let mut first = true;
    let render = |object: &Value, first: &mut bool| -> Value {
        match options.repr {
            Repr::Table => {
                let rv = object
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let columns = std::mem::take(first);
                table(
                    rt,
                    std::slice::from_ref(object),
                    &rv,
                    columns,
                    &options.include_object,
                )
            }
            Repr::Partial => partial_metadata(object),
            Repr::Plain => object.clone(),
        }
    };
    let bookmark = |rv: u64, initial_end: bool| -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line(
            "BOOKMARK",
            &json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": metadata}),
        )
    };
    let start = {
        let state = shared.lock();
        changes.borrow_and_update();
        match options.start {
            Some(rv) if rv < state.floor => Err(expired(rv, state.floor)),
            Some(rv) => Ok((Vec::new(), rv)),
            None => Ok((
                state
                    .list(rt, filter.namespace.as_deref())
                    .into_iter()
                    .filter(|object| filter.matches(object))
                    .collect::<Vec<_>>(),
                state.rv,
            )),
        }
    };
    let (initial, mut cursor) = match start {
        Ok(start) => start,
        Err(status) => {
            let _ = tx.send(line("ERROR", &status)).await;
            return;
        }
    };
    for object in &initial {
        if tx
            .send(line("ADDED", &render(object, &mut first)))
            .await
            .is_err()
        {
            return;
        }
    }
    if options.initial_events && tx.send(bookmark(cursor, true)).await.is_err() {
        return;
    }
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + BOOKMARK_EVERY, BOOKMARK_EVERY);
    loop {
        let batch = {
            let state = shared.lock();
            if cursor < state.floor {
                Err(expired(cursor, state.floor))
            } else {
                let from = state.history.partition_point(|event| event.rv <= cursor);
                let key = (rt.group.clone(), rt.plural.clone());
                let batch: Vec<(&'static str, Value)> = state
                    .history
                    .range(from..)
                    .filter(|event| event.key == key && filter.matches(&event.object))
                    .map(|event| (event.kind, State::at_version(rt, event.object.clone())))
                    .collect();
                cursor = cursor.max(state.rv);
                Ok(batch)
            }
        };
        let batch = match batch {
            Ok(batch) => batch,
            Err(status) => {
                let _ = tx.send(line("ERROR", &status)).await;
                return;
            }
        };
        for (kind, object) in batch {
            if tx
                .send(line(kind, &render(&object, &mut first)))
                .await
                .is_err()
            {
                return;
            }
        }
        let until_deadline = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = until_deadline => return,
            _ = ticker.tick(), if options.bookmarks => {
                if tx.send(bookmark(cursor, false)).await.is_err() {
                    return;
                }
            }
            () = tx.closed() => return,
        }
    }
}
