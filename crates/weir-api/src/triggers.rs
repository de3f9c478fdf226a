//! Flag triggers (docs/FLAGS.md, "Triggers"): secret URLs that turn a flag on or off when an
//! alerting system calls them, as Bucketeer's "Feature Flag Trigger".
//!
//! | route | what |
//! |---|---|
//! | `POST /api/v1/flags/{namespace}/{key}/triggers` | create: `{action: on/off, description}`; answers the URL (with its secret) once |
//! | `GET /api/v1/flags/{namespace}/{key}/triggers` | the flag's triggers, without secrets |
//! | `DELETE /api/v1/flags/{namespace}/{key}/triggers/{id}` | revoke |
//! | `POST /api/v1/triggers/{id}/{secret}` | use: no token, the secret is the credential |
//!
//! Only the secret's SHA-256 is stored (as for tokens). A use compares the hash of the secret
//! given with the stored one in constant time, answers 404 alike for an unknown trigger and a
//! wrong secret (hashing a secret in both cases), and is rate limited per client address by
//! the same limiter as bad credentials (`auth.rs`: every 404 counts, 429 past the limit). Every
//! use is in the flag's history with the caller's address.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use weir_core::FieldError;
use weir_flags::{FlagError, Flags};
use weir_store::{FlagStore, FlagStoreError, NewFlagTrigger, StoredFlagTrigger};

use crate::auth::{Caller, ClientAddr, new_secret, secret_hash};
use crate::error::ApiError;
use crate::input;

/// The route a trigger is used at (public: the secret is the credential).
pub const TRIGGER_ROUTE: &str = "/api/v1/triggers/{id}/{secret}";

/// The longest description.
const MAX_DESCRIPTION: usize = 256;

/// `POST /api/v1/flags/{namespace}/{key}/triggers`: what the trigger does.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TriggerRequest {
    /// `on` (set `spec.enabled: true`) or `off`.
    pub action: TriggerAction,
    /// What it is for (e.g. the alert that calls it); at most 256 characters.
    #[serde(default)]
    pub description: String,
}

/// What a trigger does to its flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TriggerAction {
    /// Turn the flag on.
    On,
    /// Turn the flag off.
    Off,
}

impl TriggerAction {
    fn as_str(self) -> &'static str {
        match self {
            TriggerAction::On => "on",
            TriggerAction::Off => "off",
        }
    }
}

/// A trigger, without its secret.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggerView {
    /// Its id (part of its URL).
    pub id: String,
    /// The flag's namespace.
    pub namespace: String,
    /// The flag's key.
    pub key: String,
    /// `on` or `off`.
    pub action: TriggerAction,
    /// What it is for.
    pub description: String,
    /// Who created it.
    pub created_by: String,
    /// When.
    #[schemars(with = "jiff::Timestamp")]
    pub created_at: String,
    /// When it was last used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<jiff::Timestamp>")]
    pub last_used_at: Option<String>,
    /// How often it was used.
    pub uses: u64,
}

impl TriggerView {
    fn of(stored: StoredFlagTrigger) -> TriggerView {
        let trigger = stored.trigger;
        TriggerView {
            id: trigger.id,
            namespace: trigger.key.namespace,
            key: trigger.key.key,
            action: if trigger.action == "on" {
                TriggerAction::On
            } else {
                TriggerAction::Off
            },
            description: trigger.description,
            created_by: trigger.created_by,
            created_at: trigger.created_at.to_string(),
            last_used_at: stored.last_used_at.map(|at| at.to_string()),
            uses: stored.uses,
        }
    }
}

/// A trigger just created: the only answer that holds its secret.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedTrigger {
    /// The trigger.
    pub trigger: TriggerView,
    /// Its URL's path, secret included: `POST` it to use the trigger. Shown once.
    pub path: String,
    /// The secret alone (also in `path`). Shown once; only its hash is stored.
    pub secret: String,
}

/// `GET /api/v1/flags/{namespace}/{key}/triggers`
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggerList {
    /// The flag's triggers, oldest first.
    pub items: Vec<TriggerView>,
}

/// `POST /api/v1/triggers/{id}/{secret}`: what the use did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggerUsed {
    /// The flag's namespace.
    pub namespace: String,
    /// The flag's key.
    pub key: String,
    /// `on` or `off`.
    pub action: TriggerAction,
    /// The flag's `spec.enabled` now.
    pub enabled: bool,
    /// The flag's version now.
    pub version: u64,
}

/// `POST /api/v1/flags/{namespace}/{key}/triggers`
pub(crate) async fn create<F: FlagStore>(
    State(flags): State<Flags<F>>,
    caller: Caller,
    Path((namespace, key)): Path<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = crate::flags::flag_in_path(namespace, key)?;
    caller.may_write(&key.namespace)?;
    let bytes = input::body(body)?;
    let request: TriggerRequest = serde_json::from_slice(&bytes).map_err(|error| {
        ApiError::field(FieldError::new(
            "(body)",
            format!("is not {{\"action\": \"on\" | \"off\", \"description\": \"...\"}}: {error}"),
        ))
    })?;
    let description = request.description.trim().to_string();
    if description.chars().count() > MAX_DESCRIPTION {
        return Err(ApiError::field(FieldError::new(
            "description",
            format!("is longer than {MAX_DESCRIPTION} characters"),
        )));
    }
    if flags.snapshot().get(&key.namespace, &key.key).is_none() {
        return Err(ApiError::NotFound(format!("flag {key} not found")));
    }
    let secret = new_secret()?;
    let id = new_id()?;
    let trigger = NewFlagTrigger {
        id: id.clone(),
        key: key.clone(),
        action: request.action.as_str().to_string(),
        description,
        secret_hash: secret_hash(&secret),
        created_by: caller.actor(input::actor(&headers, None)?),
        created_at: Timestamp::now(),
    };
    flags
        .store()
        .create_trigger(&trigger)
        .await
        .map_err(FlagError::from)?;
    let path = format!("/api/v1/triggers/{id}/{secret}");
    let created = CreatedTrigger {
        trigger: TriggerView::of(StoredFlagTrigger {
            trigger,
            last_used_at: None,
            uses: 0,
        }),
        path,
        secret,
    };
    let mut response = (StatusCode::CREATED, Json(created)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// `GET /api/v1/flags/{namespace}/{key}/triggers`
pub(crate) async fn list<F: FlagStore>(
    State(flags): State<Flags<F>>,
    Path((namespace, key)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = crate::flags::flag_in_path(namespace, key)?;
    let items = flags
        .store()
        .list_triggers(&key)
        .await
        .map_err(FlagError::from)?
        .into_iter()
        .map(TriggerView::of)
        .collect();
    Ok(Json(TriggerList { items }).into_response())
}

/// `DELETE /api/v1/flags/{namespace}/{key}/triggers/{id}`
pub(crate) async fn revoke<F: FlagStore>(
    State(flags): State<Flags<F>>,
    caller: Caller,
    Path((namespace, key, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let key = crate::flags::flag_in_path(namespace, key)?;
    caller.may_write(&key.namespace)?;
    let deleted = flags
        .store()
        .delete_trigger(&key, &id)
        .await
        .map_err(FlagError::from)?;
    if !deleted {
        return Err(ApiError::NotFound(format!(
            "flag {key} has no trigger {id:?}"
        )));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /api/v1/triggers/{id}/{secret}`
pub(crate) async fn fire<F: FlagStore>(
    State(flags): State<Flags<F>>,
    ClientAddr(client): ClientAddr,
    Path((id, secret)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let not_found = || ApiError::NotFound("no such trigger".into());
    // Hashed whether or not the trigger exists, so the answer's time does not tell.
    let given = secret_hash(&secret);
    let stored = if id.len() <= 64 {
        flags
            .store()
            .get_trigger(&id)
            .await
            .map_err(FlagError::from)?
    } else {
        None
    };
    let expected = stored.as_ref().map_or_else(
        || "0".repeat(64),
        |stored| stored.trigger.secret_hash.clone(),
    );
    let matches = crate::auth::constant_time_eq(given.as_bytes(), expected.as_bytes());
    let Some(stored) = stored.filter(|_| matches) else {
        return Err(not_found());
    };
    let trigger = stored.trigger;
    let now = Timestamp::now();
    let enabled = trigger.action == "on";
    let actor = if trigger.description.is_empty() {
        format!("trigger {}", trigger.id)
    } else {
        format!("trigger {} ({})", trigger.id, trigger.description)
    };
    // Counted before the flag changes, so a page that sees the change (its watch) and reads the
    // triggers again finds the use counted.
    if let Err(error) = flags.store().trigger_used(&trigger.id, now).await {
        tracing::warn!(trigger = %trigger.id, %error, "a trigger's use was not counted");
    }
    let flag = match flags
        .set_enabled(
            &trigger.key,
            enabled,
            now,
            &actor,
            "triggered",
            Some(client.to_string()),
        )
        .await
    {
        Ok(flag) => flag,
        Err(FlagError::Store(FlagStoreError::NotFound(key))) => {
            return Err(ApiError::Conflict(format!(
                "trigger {id}'s flag {key} no longer exists"
            )));
        }
        Err(error) => return Err(error.into()),
    };
    let action = if enabled {
        TriggerAction::On
    } else {
        TriggerAction::Off
    };
    Ok(Json(TriggerUsed {
        namespace: trigger.key.namespace,
        key: trigger.key.key,
        action,
        enabled: flag.flag.spec.enabled,
        version: flag.version,
    })
    .into_response())
}

/// A trigger's id: 16 lowercase hex digits (64 random bits).
fn new_id() -> Result<String, ApiError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|error| ApiError::Internal(format!("no random numbers: {error}")))?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}
