//! `/api/v1/flags`: feature flags, through [`weir_flags::Flags`] (the one writer of flags).
//!
//! | route | what |
//! |---|---|
//! | `GET /api/v1/flags?namespace=&search=&tag=&order=&limit=&cursor=` | a page of flags |
//! | `POST /api/v1/flags` | apply (create or update) a Flag (JSON or YAML) |
//! | `GET /api/v1/flags/{namespace}/{key}` | one flag (`ETag`: its version) |
//! | `PUT /api/v1/flags/{namespace}/{key}` | apply, the path naming the flag |
//! | `DELETE /api/v1/flags/{namespace}/{key}` | delete |
//! | `POST /api/v1/flags/{namespace}/{key}/outcomes` | report what each variant served (`outcomes.rs`) |
//! | `GET /api/v1/flags/{namespace}/{key}/history`, `.../evaluations` | changes and evaluation counts (`flag_history.rs`) |
//! | `/api/v1/flags/{namespace}/{key}/triggers...`, `POST /api/v1/triggers/{id}/{secret}` | triggers (`triggers.rs`) |
//! | `GET /api/v1/flags/watch?namespace=` | Server-Sent Events: `event: flag`, data `{namespace, key, version}` (`version` null: deleted) for every committed change, so clients re-fetch; `event: lagged` when a watcher fell behind |

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use weir_core::FieldError;
use weir_core::document::{Document, load_value};
use weir_core::model::Flag;
use weir_flags::{FlagError, Flags};
use weir_store::{ApplyOutcome, FlagKey, FlagStore, FlagStoreError, StoredFlag};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::input::{self, Params, Precondition};

/// What the flag routes share: the flags, and the signal that ends open watches.
#[derive(Clone)]
pub(crate) struct FlagsState<F: FlagStore> {
    pub(crate) flags: Flags<F>,
    pub(crate) shutdown: tokio::sync::watch::Receiver<bool>,
}

impl<F: FlagStore> axum::extract::FromRef<FlagsState<F>> for Flags<F> {
    fn from_ref(state: &FlagsState<F>) -> Flags<F> {
        state.flags.clone()
    }
}

/// `GET /api/v1/flags/watch?namespace=`
pub(crate) async fn watch<F: FlagStore>(
    State(state): State<FlagsState<F>>,
    caller: Caller,
    query: QueryPairs,
) -> Result<impl IntoResponse, ApiError> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures_util::stream::{self, StreamExt};
    use tokio::sync::broadcast::error::RecvError;

    let params = Params::parse(query, &["namespace"])?;
    let namespace = params.text("namespace");
    // Subscribed before the response starts: a change after the headers is never missed.
    let changes = state.flags.subscribe();
    let mut shutdown = state.shutdown.clone();
    let stopped = async move {
        if shutdown.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let hello = stream::once(async {
        Ok::<_, std::convert::Infallible>(Event::default().comment("watching flags"))
    });
    let updates = stream::unfold(
        (changes, namespace, caller),
        |(mut changes, namespace, caller)| async move {
            loop {
                match changes.recv().await {
                    Ok(change)
                        if caller.sees(&change.key.namespace)
                            && namespace
                                .as_ref()
                                .is_none_or(|namespace| *namespace == change.key.namespace) =>
                    {
                        let data = serde_json::json!({
                            "namespace": change.key.namespace,
                            "key": change.key.key,
                            "version": change.version,
                        });
                        let event = Event::default().event("flag").data(data.to_string());
                        return Some((Ok(event), (changes, namespace, caller)));
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(missed)) => {
                        let data = serde_json::json!({
                            "missed": missed,
                            "message": format!("this watcher missed {missed} flag changes; fetch the flags again"),
                        });
                        let event = Event::default().event("lagged").data(data.to_string());
                        return Some((Ok(event), (changes, namespace, caller)));
                    }
                    Err(RecvError::Closed) => return None,
                }
            }
        },
    );
    let events = hello.chain(updates).take_until(Box::pin(stopped));
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(15))))
}

type QueryPairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// Fields the server writes; ignored in applied documents so that a GET can be edited and PUT.
const SERVER_FIELDS: [&str; 6] = [
    "version",
    "createdAt",
    "updatedAt",
    "rolledOutBy",
    "exposures",
    "outcomes",
];

/// A flag as the API shows it: the document with the server's fields.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FlagView {
    /// The document as applied.
    #[serde(flatten)]
    flag: Flag,
    /// Bumped by every change; the `ETag`.
    #[schemars(range(min = 1))]
    version: u64,
    /// When the flag was first applied.
    #[schemars(with = "jiff::Timestamp")]
    created_at: String,
    /// When it last changed.
    #[schemars(with = "jiff::Timestamp")]
    updated_at: String,
    /// The rollout moving this flag's audience now (`NAMESPACE/NAME`), if one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    rolled_out_by: Option<String>,
    /// OFREP evaluations per variant since the server started.
    exposures: BTreeMap<String, u64>,
    /// What applications reported per variant since the server started.
    outcomes: BTreeMap<String, OutcomeTotals>,
}

/// One variant's reported outcomes, added up.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
struct OutcomeTotals {
    requests: u64,
    errors: u64,
    /// Reported as `slow` (latencies are judged against a rollout's bound, not counted here).
    slow: u64,
    /// How many latencies were reported (`latencyMs`).
    latencies: u64,
    /// Their p99 in milliseconds (to within 9%), when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_p99_ms: Option<f64>,
}

impl FlagView {
    /// The stored flag with, while a rollout moves it, the default strategy that rollout has in
    /// force: what evaluations answer now.
    fn of<F: FlagStore>(stored: StoredFlag, flags: &Flags<F>) -> FlagView {
        let mut flag = stored.flag;
        // Every answer names the namespace, `default` included, so that a client never has to
        // know the rule to build a link (as for rollouts).
        flag.metadata.namespace = Some(stored.key.namespace.clone());
        if let Some(entry) = flags.snapshot().get(&stored.key.namespace, &stored.key.key)
            && entry.stored.version == stored.version
            && let Some(strategy) = &entry.rollout_strategy
        {
            flag.spec.default_strategy = strategy.clone();
        }
        let counts = flags.counts(&stored.key).unwrap_or_default();
        FlagView {
            exposures: counts
                .iter()
                .map(|(variant, counts)| (variant.clone(), counts.exposures))
                .collect(),
            outcomes: counts
                .iter()
                .map(|(variant, counts)| {
                    (
                        variant.clone(),
                        OutcomeTotals {
                            requests: counts.requests,
                            errors: counts.errors,
                            slow: counts.slow,
                            latencies: counts.latencies(),
                            latency_p99_ms: counts.latency_quantile(0.99),
                        },
                    )
                })
                .collect(),
            rolled_out_by: flags
                .rollout_of(&stored.key)
                .map(|rollout| rollout.to_string()),
            flag,
            version: stored.version,
            created_at: stored.created_at.to_string(),
            updated_at: stored.updated_at.to_string(),
        }
    }
}

/// `GET /api/v1/flags`: a page of flags.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FlagPage {
    /// The flags, in the order asked for.
    items: Vec<FlagView>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{1,18}$"))]
    next_cursor: Option<String>,
}

/// `POST`/`PUT` of a flag: what the apply did.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AppliedFlag {
    /// The flag after the apply.
    flag: FlagView,
    /// Created, updated or unchanged.
    outcome: ApplyOutcome,
}

impl From<FlagError> for ApiError {
    fn from(error: FlagError) -> ApiError {
        match error {
            FlagError::Invalid(errors) => ApiError::invalid(errors),
            FlagError::Store(FlagStoreError::NotFound(key)) => {
                ApiError::NotFound(format!("flag {key} not found"))
            }
            FlagError::Store(error @ FlagStoreError::Conflict { .. })
            | FlagError::Store(error @ FlagStoreError::AlreadyExists(_)) => {
                ApiError::Conflict(error.to_string())
            }
            FlagError::Store(FlagStoreError::Database(message)) => ApiError::Internal(message),
            FlagError::Store(FlagStoreError::Unavailable(message)) => {
                ApiError::DatabaseUnavailable(message)
            }
            FlagError::RolledOut(message) => ApiError::Conflict(message),
        }
    }
}

fn with_etag(status: StatusCode, version: u64, body: impl Serialize) -> Response {
    let mut response = (status, Json(body)).into_response();
    if let Ok(tag) = HeaderValue::from_str(&format!("\"{version}\"")) {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

const ORDERS: &str = "key, created, -created, updated, -updated";

/// `GET /api/v1/flags?namespace=&search=&tag=&order=&limit=&cursor=`: `search` matches keys,
/// tags and descriptions of variations; `tag` (repeatable) keeps flags with every tag given; `order` is one of key (default), created, updated (a leading `-`
/// for descending); `cursor` is the `nextCursor` of the previous page.
pub(crate) async fn list<F: FlagStore>(
    State(flags): State<Flags<F>>,
    caller: Caller,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let params = Params::parse_with_lists(
        query,
        &["namespace", "search", "tag", "order", "limit", "cursor"],
        &["tag"],
    )?;
    let (limit, start) = match (params.limit("limit"), params.offset("cursor")) {
        (Ok(limit), Ok(start)) => (limit, start),
        (limit, start) => {
            let errors = [limit.err(), start.err()].into_iter().flatten().collect();
            return Err(ApiError::invalid(errors));
        }
    };
    let order = params.typed("order").unwrap_or_else(|| "key".into());
    if !ORDERS.split(", ").any(|known| known == order) {
        return Err(ApiError::field(FieldError::with_value(
            "order",
            format!("{order:?}"),
            format!("one of {ORDERS}"),
        )));
    }
    let namespace = params.text("namespace");
    let search = params.text("search").map(|search| search.to_lowercase());
    let tags = params.list("tag");
    let snapshot = flags.snapshot();
    let mut found: Vec<StoredFlag> = snapshot
        .all()
        .map(|entry| entry.stored.clone())
        .filter(|stored| caller.sees(&stored.key.namespace))
        .filter(|stored| {
            namespace
                .as_ref()
                .is_none_or(|namespace| stored.key.namespace == *namespace)
        })
        .filter(|stored| {
            tags.iter()
                .all(|tag| stored.flag.spec.tags.iter().any(|has| has == tag))
        })
        .filter(|stored| {
            search.as_ref().is_none_or(|search| {
                stored.key.key.to_lowercase().contains(search)
                    || stored.flag.spec.tags.iter().any(|tag| tag.contains(search))
                    || stored.flag.spec.variations.iter().any(|variation| {
                        variation
                            .description
                            .as_ref()
                            .is_some_and(|text| text.to_lowercase().contains(search))
                    })
            })
        })
        .collect();
    match order.as_str() {
        "created" => found.sort_by_key(|flag| flag.created_at),
        "-created" => found.sort_by_key(|flag| std::cmp::Reverse(flag.created_at)),
        "updated" => found.sort_by_key(|flag| flag.updated_at),
        "-updated" => found.sort_by_key(|flag| std::cmp::Reverse(flag.updated_at)),
        _ => {}
    }
    let end = start.saturating_add(limit).min(found.len());
    let next_cursor = (end < found.len()).then(|| end.to_string());
    let items = found
        .into_iter()
        .skip(start)
        .take(limit)
        .map(|stored| FlagView::of(stored, &flags))
        .collect();
    Ok(Json(FlagPage { items, next_cursor }).into_response())
}

/// `GET /api/v1/flags/{namespace}/{key}`
pub(crate) async fn get_one<F: FlagStore>(
    State(flags): State<Flags<F>>,
    Path((namespace, key)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = FlagKey::new(namespace, key);
    let stored = flags
        .store()
        .get_flag(&key)
        .await
        .map_err(FlagError::from)?
        .ok_or_else(|| ApiError::NotFound(format!("flag {key} not found")))?;
    Ok(with_etag(
        StatusCode::OK,
        stored.version,
        FlagView::of(stored, &flags),
    ))
}

/// The flag a path names, or 404 when the namespace or key could not name one (a key a flag
/// cannot have, e.g. `null,null`), as for a flag that does not exist: the routes of a flag's
/// records (history, triggers) answer for deleted flags too, so they cannot ask the store.
pub(crate) fn flag_in_path(namespace: String, key: String) -> Result<FlagKey, ApiError> {
    if weir_core::validate::is_dns_label(&namespace) && weir_core::validate::is_flag_key(&key) {
        Ok(FlagKey::new(namespace, key))
    } else {
        Err(ApiError::NotFound(format!(
            "flag {namespace}/{key} not found"
        )))
    }
}

/// `POST /api/v1/flags`
pub(crate) async fn create<F: FlagStore>(
    State(flags): State<Flags<F>>,
    caller: Caller,
    query: QueryPairs,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    apply(flags, &caller, None, query, headers, body).await
}

/// `PUT /api/v1/flags/{namespace}/{key}`
pub(crate) async fn put<F: FlagStore>(
    State(flags): State<Flags<F>>,
    caller: Caller,
    Path((namespace, key)): Path<(String, String)>,
    query: QueryPairs,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    apply(
        flags,
        &caller,
        Some(FlagKey::new(namespace, key)),
        query,
        headers,
        body,
    )
    .await
}

async fn apply<F: FlagStore>(
    flags: Flags<F>,
    caller: &Caller,
    path: Option<FlagKey>,
    query: QueryPairs,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let params = Params::parse(query, &["expectedVersion"])?;
    let expected_version = params.number("expectedVersion").map_err(ApiError::field)?;
    let format = input::format(&headers, true, None)?;
    let bytes = input::body(body)?;
    let precondition = input::precondition(&headers, expected_version)?;
    let mut flag = flag_of(&bytes, format)?;
    if let Some(key) = &path {
        input::match_path(&mut flag.metadata, &key.namespace, &key.key, "flag")?;
    }
    let key = FlagKey::of(&flag);
    caller.may_write(&key.namespace)?;
    let expected_version = match precondition {
        Precondition::None => None,
        Precondition::Version(version) => Some(version),
        Precondition::Exists => match flags
            .store()
            .get_flag(&key)
            .await
            .map_err(FlagError::from)?
        {
            Some(stored) => Some(stored.version),
            None => {
                return Err(ApiError::Conflict(format!(
                    "flag {key} does not exist (If-Match: * requires that it does)"
                )));
            }
        },
    };
    let actor = caller.actor(input::actor(&headers, None)?);
    let (stored, outcome) = flags
        .apply_as(flag, expected_version, jiff::Timestamp::now(), &actor)
        .await?;
    let status = match outcome {
        ApplyOutcome::Created => StatusCode::CREATED,
        ApplyOutcome::Updated | ApplyOutcome::Unchanged => StatusCode::OK,
    };
    let version = stored.version;
    let mut response = with_etag(
        status,
        version,
        AppliedFlag {
            flag: FlagView::of(stored, &flags),
            outcome,
        },
    );
    if status == StatusCode::CREATED
        && let Ok(location) =
            HeaderValue::from_str(&format!("/api/v1/flags/{}/{}", key.namespace, key.key))
    {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// One Flag from a body, checked (structure here, rules in [`Flags::apply`]).
fn flag_of(bytes: &[u8], format: input::Format) -> Result<Flag, ApiError> {
    let mut values = input::documents(bytes, format)?;
    if values.len() != 1 {
        return Err(ApiError::field(FieldError::new(
            "(document)",
            format!(
                "holds {} documents: send one Flag per request",
                values.len()
            ),
        )));
    }
    let mut value = values.remove(0);
    if let Value::Object(map) = &mut value {
        for field in SERVER_FIELDS {
            map.remove(field);
        }
    }
    let loaded = load_value(&value).map_err(|refused| ApiError::invalid(refused.errors))?;
    match loaded.document {
        Document::Flag(flag) => Ok(*flag),
        other => Err(ApiError::field(FieldError::with_value(
            "kind",
            format!("{:?}", other.describe()),
            "this endpoint applies a Flag (rollouts go to /api/v1/rollouts)",
        ))),
    }
}

/// `DELETE /api/v1/flags/{namespace}/{key}` (with `If-Match` or `?expectedVersion=`).
pub(crate) async fn delete<F: FlagStore>(
    State(flags): State<Flags<F>>,
    caller: Caller,
    Path((namespace, key)): Path<(String, String)>,
    query: QueryPairs,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let params = Params::parse(query, &["expectedVersion"])?;
    let expected_version = params.number("expectedVersion").map_err(ApiError::field)?;
    let expected = match input::precondition(&headers, expected_version)? {
        Precondition::Version(0) => return Err(crate::rollouts::delete_of_nothing("flag")),
        Precondition::Version(version) => Some(version),
        Precondition::None | Precondition::Exists => None,
    };
    let actor = caller.actor(input::actor(&headers, None)?);
    flags
        .delete_as(&FlagKey::new(namespace, key), expected, &actor)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
