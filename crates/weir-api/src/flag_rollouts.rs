//! `GET /api/v1/flag-rollouts`: the rollouts whose target is a flag, each with where its
//! schedule stands, filtered and ordered as seed 004's `ListProgressiveRollout` asks (flag keys,
//! status, type, a search keyword, order by created or updated either way, a cursor).
//!
//! The rollouts come from the [`Store`]: every page of the namespace asked for is read, and the
//! filters, the order and the page are applied here. That is fine because flag rollouts are few
//! (one running per flag) and the store keeps no index on the target's kind; the cursor is an
//! offset into the filtered, ordered list, as in `GET /api/v1/flags`.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use weir_core::FieldError;
use weir_core::machine::{schedule_entries, schedule_state};
use weir_core::model::{Phase, Plan, RolloutSpec, RolloutStatus, ScheduleState};
use weir_core::units::Weight;
use weir_store::{DEFAULT_PAGE, ListQuery, MAX_PAGE, Store, StoredRollout};

use crate::ApiState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::input::Params;
use crate::types::{
    FlagRolloutPage, FlagRolloutView, NextEntry, RolloutView, ScheduleEntryView, ScheduleSummary,
    ScheduleType,
};

type QueryPairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// The parameters this route reads.
const KNOWN: [&str; 8] = [
    "namespace",
    "flag",
    "status",
    "type",
    "search",
    "order",
    "limit",
    "cursor",
];

/// The parameters that may be given more than once (or as comma-separated lists).
const LISTS: [&str; 2] = ["flag", "status"];

/// The orders, for messages.
const ORDERS: &str = "name, created, -created, updated, -updated";

/// How the list is ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// By namespace, then name (the store's order).
    Name,
    /// Oldest first.
    Created,
    /// Newest first.
    CreatedDesc,
    /// Least recently changed first.
    Updated,
    /// Most recently changed first.
    UpdatedDesc,
}

impl Order {
    fn parse(text: &str) -> Option<Order> {
        match text {
            "name" => Some(Order::Name),
            "created" => Some(Order::Created),
            "-created" => Some(Order::CreatedDesc),
            "updated" => Some(Order::Updated),
            "-updated" => Some(Order::UpdatedDesc),
            _ => None,
        }
    }

    /// Sorts `items`, which arrive in the store's (namespace, name) order; the sort is stable,
    /// so equal times keep that order and pages never swap two rollouts.
    fn sort(self, items: &mut [FlagRolloutView]) {
        use std::cmp::Reverse;
        match self {
            Order::Name => {}
            Order::Created => items.sort_by_key(|item| item.rollout.created_at),
            Order::CreatedDesc => items.sort_by_key(|item| Reverse(item.rollout.created_at)),
            Order::Updated => items.sort_by_key(|item| item.rollout.updated_at),
            Order::UpdatedDesc => items.sort_by_key(|item| Reverse(item.rollout.updated_at)),
        }
    }
}

/// What a request asks for, read from its parameters.
#[derive(Debug)]
struct ListRequest {
    namespace: Option<String>,
    /// Flag keys; empty: every flag.
    flags: Vec<String>,
    /// Schedule states; empty: any (and rollouts without a schedule too).
    states: Vec<ScheduleState>,
    schedule_type: Option<ScheduleType>,
    /// Lower case.
    search: Option<String>,
    order: Order,
    limit: usize,
    /// Where the page starts in the filtered, ordered list.
    start: usize,
}

impl ListRequest {
    /// Reads the parameters, naming every bad one (with the values allowed) at once.
    fn read(params: &Params) -> Result<ListRequest, ApiError> {
        let mut errors = Vec::new();
        let mut states = Vec::new();
        for value in params.list("status") {
            match ScheduleState::ALL
                .into_iter()
                .find(|state| state.as_str().eq_ignore_ascii_case(&value))
            {
                Some(state) => states.push(state),
                None => errors.push(FieldError::with_value(
                    "status",
                    format!("{value:?}"),
                    format!(
                        "one of {}",
                        names(ScheduleState::ALL.map(ScheduleState::as_str))
                    ),
                )),
            }
        }
        let schedule_type = params.typed("type").and_then(|value| {
            let found = ScheduleType::ALL
                .into_iter()
                .find(|schedule_type| schedule_type.as_str().eq_ignore_ascii_case(&value));
            if found.is_none() {
                errors.push(FieldError::with_value(
                    "type",
                    format!("{value:?}"),
                    format!(
                        "one of {}",
                        names(ScheduleType::ALL.map(ScheduleType::as_str))
                    ),
                ));
            }
            found
        });
        let order = params.typed("order").map_or(Some(Order::Name), |value| {
            let order = Order::parse(&value);
            if order.is_none() {
                errors.push(FieldError::with_value(
                    "order",
                    format!("{value:?}"),
                    format!("one of {ORDERS}"),
                ));
            }
            order
        });
        let limit = params.limit("limit").unwrap_or_else(|error| {
            errors.push(error);
            DEFAULT_PAGE
        });
        let start = params.offset("cursor").map_or_else(
            |error| {
                errors.push(error);
                None
            },
            Some,
        );
        match (order, start) {
            (Some(order), Some(start)) if errors.is_empty() => Ok(ListRequest {
                namespace: params.text("namespace"),
                flags: params.list("flag"),
                states,
                schedule_type,
                search: params.text("search").map(|search| search.to_lowercase()),
                order,
                limit,
                start,
            }),
            _ => Err(ApiError::invalid(errors)),
        }
    }

    /// Whether `item` passes every filter (the namespace is the store's to filter).
    fn admits(&self, item: &FlagRolloutView) -> bool {
        let rollout = &item.rollout.document;
        let flag = rollout
            .spec
            .target
            .flag()
            .and_then(|target| target.flag.as_deref())
            .unwrap_or_default();
        let state = item.schedule.as_ref().map(|schedule| schedule.state);
        let schedule_type = item
            .schedule
            .as_ref()
            .map(|schedule| schedule.schedule_type);
        (self.flags.is_empty() || self.flags.iter().any(|key| key == flag))
            && (self.states.is_empty() || state.is_some_and(|state| self.states.contains(&state)))
            && self
                .schedule_type
                .is_none_or(|wanted| schedule_type == Some(wanted))
            && self.search.as_ref().is_none_or(|search| {
                rollout.metadata.name.to_lowercase().contains(search)
                    || flag.to_lowercase().contains(search)
            })
    }
}

fn names<const N: usize>(names: [&str; N]) -> String {
    names.join(", ")
}

/// `GET /api/v1/flag-rollouts?namespace=&flag=&status=&type=&search=&order=&limit=&cursor=`
pub(crate) async fn list<S: Store>(
    State(state): State<ApiState<S>>,
    caller: Caller,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let params = Params::parse_with_lists(query, &KNOWN, &LISTS)?;
    let request = ListRequest::read(&params)?;
    let mut items: Vec<FlagRolloutView> = all_rollouts(&state.store, request.namespace.clone())
        .await?
        .into_iter()
        .filter(|stored| caller.sees(&stored.key.namespace))
        .filter_map(view)
        .filter(|item| request.admits(item))
        .collect();
    request.order.sort(&mut items);
    let end = request.start.saturating_add(request.limit).min(items.len());
    let next_cursor = (end < items.len()).then(|| end.to_string());
    let mut items: Vec<FlagRolloutView> = items
        .into_iter()
        .skip(request.start)
        .take(request.limit)
        .collect();
    for item in &mut items {
        // Each as /api/v1/rollouts shows it, its owner included (several instances).
        let metadata = &item.rollout.document.metadata;
        let key =
            weir_store::RolloutKey::new(metadata.namespace_or_default(), metadata.name.clone());
        item.rollout.owner = crate::rollouts::owner_view(&state.store, &key).await?;
    }
    Ok(Json(FlagRolloutPage { items, next_cursor }).into_response())
}

/// Every rollout of `namespace` (all namespaces when `None`), page after page.
async fn all_rollouts<S: Store>(
    store: &S,
    namespace: Option<String>,
) -> Result<Vec<StoredRollout>, ApiError> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list(&ListQuery {
                namespace: namespace.clone(),
                phase: None,
                cursor: cursor.clone(),
                limit: MAX_PAGE,
            })
            .await?;
        all.extend(page.items);
        match page.next_cursor {
            None => return Ok(all),
            // A store that hands back the cursor it was given would loop here forever.
            Some(next) if cursor.as_ref() == Some(&next) => {
                return Err(ApiError::Internal(format!(
                    "the store returned cursor {next:?} twice while listing rollouts"
                )));
            }
            Some(next) => cursor = Some(next),
        }
    }
}

/// A stored rollout as this list shows it, or `None` when its target is not a flag.
fn view(stored: StoredRollout) -> Option<FlagRolloutView> {
    stored.rollout.spec.target.flag()?;
    let schedule = summary(&stored.rollout.spec, &stored.status);
    Some(FlagRolloutView {
        rollout: RolloutView::from(stored),
        schedule,
    })
}

/// Where a schedule stands, from the spec (the entries, a template expanded) and the status
/// (the entries of this run that took effect, the phase, the weight); `None` unless the plan is
/// a schedule.
pub(crate) fn summary(spec: &RolloutSpec, status: &RolloutStatus) -> Option<ScheduleSummary> {
    let Plan::Schedule(plan) = &spec.plan else {
        return None;
    };
    let schedule_type = ScheduleType::of(plan)?;
    let state = schedule_state(spec, status)?;
    let entries: Vec<ScheduleEntryView> = schedule_entries(spec)
        .into_iter()
        .map(|(at, weight)| ScheduleEntryView {
            at,
            weight,
            // Entries are at least 5 minutes apart, so the time names one.
            triggered_at: status
                .triggered
                .iter()
                .find(|triggered| triggered.at == at && triggered.weight == weight)
                .map(|triggered| triggered.triggered_at),
        })
        .collect();
    let done = entries
        .iter()
        .filter(|entry| entry.triggered_at.is_some())
        .count();
    let next = match state {
        ScheduleState::Waiting | ScheduleState::Running => entries
            .iter()
            .find(|entry| entry.triggered_at.is_none())
            .map(|entry| NextEntry {
                at: entry.at,
                weight: entry.weight,
            }),
        ScheduleState::Finished | ScheduleState::Stopped => None,
    };
    // Promotion hands the whole audience to the new variation (the flag's default strategy
    // becomes that variation), while the status's canary weight returns to 0 with the route.
    let weight = match status.phase {
        Phase::Promoting | Phase::Finalising | Phase::Succeeded => Weight::FULL,
        _ => status.canary_weight,
    };
    Some(ScheduleSummary {
        schedule_type,
        state,
        total: entries.len(),
        entries,
        done,
        next,
        weight,
    })
}

#[cfg(test)]
mod tests;
