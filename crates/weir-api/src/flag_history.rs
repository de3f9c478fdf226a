//! A flag's change history and its evaluation counts over time (docs/FLAGS.md).
//!
//! | route | what |
//! |---|---|
//! | `GET /api/v1/flags/{namespace}/{key}/history?limit=&cursor=` | changes, newest first ([`FlagHistoryPage`]) |
//! | `GET /api/v1/flags/{namespace}/{key}/evaluations?since=` | evaluations per minute and variation ([`FlagEvaluations`]) |

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use weir_core::FieldError;
use weir_core::units::GoDuration;
use weir_flags::{EVALUATIONS_KEPT_MINUTES, Flags, minute_of};
use weir_store::{FieldChange, FlagStore, StoredFlagChange};

use crate::error::ApiError;
use crate::input::Params;

type QueryPairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// One change of a flag.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlagChangeView {
    /// Increasing with time; the history's `cursor`.
    pub id: u64,
    /// The flag's namespace.
    pub namespace: String,
    /// The flag's key.
    pub key: String,
    /// When.
    #[schemars(with = "jiff::Timestamp")]
    pub at: String,
    /// Who: the token's name (`NAME (as X)` when the request named an actor X), `api` on a
    /// server without tokens, `rollout NAMESPACE/NAME`, `trigger ID (DESCRIPTION)`.
    pub actor: String,
    /// `created`, `updated`, `deleted`, `enabled`, `disabled` (only `spec.enabled` changed),
    /// `triggered` (a trigger's use), `rollout` (a flag rollout's final strategy).
    pub action: String,
    /// The flag's version after the change (absent: deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// The caller's address (a trigger's use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Every field that changed, with its value before and after.
    pub changes: Vec<FieldChange>,
    /// The same, one line each: `spec.enabled: true -> false`.
    pub summary: Vec<String>,
}

impl FlagChangeView {
    fn of(stored: StoredFlagChange) -> FlagChangeView {
        let change = stored.change;
        FlagChangeView {
            id: stored.id,
            summary: change.changes.iter().map(ToString::to_string).collect(),
            namespace: change.key.namespace,
            key: change.key.key,
            at: change.at.to_string(),
            actor: change.actor,
            action: change.action,
            version: change.version,
            address: change.address,
            changes: change.changes,
        }
    }
}

/// `GET /api/v1/flags/{namespace}/{key}/history`: a page of changes, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlagHistoryPage {
    /// The changes, newest first.
    pub items: Vec<FlagChangeView>,
    /// Pass as `cursor` for older changes; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{1,19}$"))]
    pub next_cursor: Option<String>,
}

/// `GET /api/v1/flags/{namespace}/{key}/history?limit=&cursor=` (kept after the flag is deleted).
pub(crate) async fn history<F: FlagStore>(
    State(flags): State<Flags<F>>,
    Path((namespace, key)): Path<(String, String)>,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let params = Params::parse(query, &["limit", "cursor"])?;
    let limit = params.limit("limit").map_err(ApiError::field)?;
    let before = match params.typed("cursor") {
        None => None,
        Some(cursor) => Some(cursor.parse::<u64>().map_err(|_| {
            ApiError::field(FieldError::with_value(
                "cursor",
                format!("{cursor:?}"),
                "the nextCursor of the previous page (digits)",
            ))
        })?),
    };
    let key = crate::flags::flag_in_path(namespace, key)?;
    // One more than asked for says whether there is a next page.
    let mut found = flags.history(&key, limit + 1, before).await?;
    let more = found.len() > limit;
    found.truncate(limit);
    let next_cursor = more
        .then(|| found.last().map(|change| change.id.to_string()))
        .flatten();
    Ok(Json(FlagHistoryPage {
        items: found.into_iter().map(FlagChangeView::of).collect(),
        next_cursor,
    })
    .into_response())
}

/// One minute of evaluations.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MinuteBucket {
    /// The minute's start.
    #[schemars(with = "jiff::Timestamp")]
    pub minute: String,
    /// Evaluations per variation in that minute (variations that served none are absent).
    pub counts: BTreeMap<String, u64>,
}

/// `GET /api/v1/flags/{namespace}/{key}/evaluations`: OFREP evaluations per minute and variation.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlagEvaluations {
    /// The flag's namespace.
    pub namespace: String,
    /// The flag's key.
    pub key: String,
    /// The first minute covered.
    #[schemars(with = "jiff::Timestamp")]
    pub since: String,
    /// Minutes with evaluations, oldest first (minutes without any are absent).
    pub minutes: Vec<MinuteBucket>,
    /// The sums over `minutes`, per variation.
    pub totals: BTreeMap<String, u64>,
}

/// `GET /api/v1/flags/{namespace}/{key}/evaluations?since=`: `since` is a time (RFC 3339) or a
/// duration back from now (`90m`, `24h`; default `1h`); at most a day back.
pub(crate) async fn evaluations<F: FlagStore>(
    State(flags): State<Flags<F>>,
    Path((namespace, key)): Path<(String, String)>,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let params = Params::parse(query, &["since"])?;
    let now = Timestamp::now();
    let since = match params.typed("since") {
        None => now - jiff::SignedDuration::from_secs(3600),
        Some(text) => since_of(&text, now)?,
    };
    let earliest = minute_of(now) - EVALUATIONS_KEPT_MINUTES;
    let since_minute = minute_of(since).max(earliest);
    let key = crate::flags::flag_in_path(namespace, key)?;
    if flags.snapshot().get(&key.namespace, &key.key).is_none()
        && flags.store().get_flag(&key).await.ok().flatten().is_none()
    {
        return Err(ApiError::NotFound(format!("flag {key} not found")));
    }
    let counted = flags.evaluations(&key, since_minute).await?;
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let minutes = counted
        .into_iter()
        .map(|(minute, counts)| {
            for (variation, count) in &counts {
                *totals.entry(variation.clone()).or_default() += count;
            }
            MinuteBucket {
                minute: minute_start(minute).to_string(),
                counts,
            }
        })
        .collect();
    Ok(Json(FlagEvaluations {
        namespace: key.namespace,
        key: key.key,
        since: minute_start(since_minute).to_string(),
        minutes,
        totals,
    })
    .into_response())
}

fn minute_start(minute: i64) -> Timestamp {
    Timestamp::from_second(minute.saturating_mul(60)).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn since_of(text: &str, now: Timestamp) -> Result<Timestamp, ApiError> {
    if let Ok(at) = text.parse::<Timestamp>() {
        return Ok(at);
    }
    match GoDuration::parse(text) {
        Ok(duration) => Ok(now - jiff::SignedDuration::from_millis(duration.as_millis_i64())),
        Err(_) => Err(ApiError::field(FieldError::with_value(
            "since",
            format!("{text:?}"),
            "a time (RFC 3339, e.g. 2026-11-28T10:00:00Z) or a duration back from now (e.g. \
             90m, 24h)",
        ))),
    }
}
