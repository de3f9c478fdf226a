//! Access control: who is asking, and whether they may (docs/SECURITY.md, "Tokens and scopes").
//!
//! A server with tokens in its store ([`TokenStore`]) answers only requests that carry one, in
//! `Authorization: Bearer <secret>`, `X-API-Key: <secret>` (OFREP clients) or the signed
//! `weir_session` cookie that `POST /api/v1/session` sets (the dashboard). [`ROUTES`] says what
//! each route needs. The tokens are kept in memory and read again whenever they may have
//! changed (`auth/cache.rs`: told by the database's change notices, or a cheap stamp read per
//! request, [`TokenChanges`]), so a request's credentials need no database read, and revoking
//! a token ends its sessions at once. A server whose store holds no token at all (never created
//! one) is open, as weir was before tokens; `weir serve` then listens only on loopback.
//!
//! - Missing, unknown, expired or revoked credentials: 401 (code `unauthorized`,
//!   `WWW-Authenticate: Bearer`). A valid token without the scope: 403 (code `forbidden`) naming
//!   the scope needed. Repeated bad credentials from one client address: 429 (code
//!   `too_many_requests`, `Retry-After`) instead of 401 for that address's requests without a
//!   valid credential, until the window ends; a valid token from it still works (many users
//!   behind one proxy are not locked out by one of them).
//! - A token limited to namespaces sees nothing else: an object of another namespace answers
//!   404 as if it did not exist (done here for paths that name the namespace), lists and watch
//!   streams leave other namespaces out and OFREP answers as for an empty namespace (done by
//!   the handlers, which read the [`Caller`]); applying a document into another namespace is 403.
//! - A request authenticated by the cookie that changes something (POST, PUT, PATCH, DELETE)
//!   must carry `X-CSRF-Token` with the session's value (from the session JSON); otherwise 403
//!   (code `csrf`). Bearer and X-API-Key requests need none: a browser never adds them by itself.
//! - The actor a command records in the history is the token's name (`NAME (as X)` when the
//!   body or `X-Weir-Actor` names an actor X); every change made with a token is logged (target
//!   `weir_api::auth`, level info) with the token's name, never its secret.
//!
//! The session cookie holds `v1:<token id>:<expiry, Unix seconds>` and its HMAC-SHA-256 under a
//! key the server keeps in its store (created on the first start); the CSRF value is another
//! HMAC of the same text, so neither needs server-side session state.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use weir_core::FieldError;
use weir_store::{NewToken, StoredToken, TokenScope, TokenStore, TokenStoreError};

use crate::error::ApiError;

mod cache;

pub use cache::TokenChanges;
use cache::{TokenCache, TokenSet};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "weir_session";

/// The header that carries the CSRF value of a cookie session.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// How long a session lasts (or less: until its token expires).
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// What every secret starts with, so that scanners (and people) recognise one.
pub const SECRET_PREFIX: &str = "weir_";

/// The name of the session-signing key in the store.
const SESSION_KEY: &str = "session-hmac-sha256";

// === what each route needs ===

/// What a route needs from the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone (health, the OpenAPI document, login, the dashboard's pages).
    Public,
    /// A token allowing this scope ([`TokenScope::allows`]).
    Scope(TokenScope),
    /// Any valid token, whatever its scope (`GET /api/v1/session`).
    Authenticated,
    /// `/metrics`: open, or `read` when [`AuthConfig::metrics_need_token`].
    Metrics,
    /// Token management: an `admin` token not limited to namespaces (a limited admin could
    /// otherwise mint a token for every namespace).
    ManageTokens,
}

/// One route and what it needs.
#[derive(Debug, Clone, Copy)]
pub struct RouteAccess {
    /// The method (`GET` also admits `HEAD`).
    pub method: &'static str,
    /// The path as axum writes it: `{namespace}` is checked against a token's namespaces,
    /// `{*rest}` matches the rest of the path.
    pub path: &'static str,
    /// What it needs.
    pub access: Access,
}

const fn route(method: &'static str, path: &'static str, access: Access) -> RouteAccess {
    RouteAccess {
        method,
        path,
        access,
    }
}

const READ: Access = Access::Scope(TokenScope::Read);
const OPERATE: Access = Access::Scope(TokenScope::Operate);
const ADMIN: Access = Access::Scope(TokenScope::Admin);
const EVALUATE: Access = Access::Scope(TokenScope::Evaluate);

/// Every route of `weir serve` and what it needs: the one table the checks, the OpenAPI
/// document's security requirements and docs/SECURITY.md follow. A request matching none (an
/// unknown path, another method) needs `read`, so that probing without a token learns nothing.
pub const ROUTES: &[RouteAccess] = &[
    route("GET", "/healthz", Access::Public),
    route("GET", "/readyz", Access::Public),
    route("GET", "/metrics", Access::Metrics),
    route("GET", "/api/v1/openapi.json", Access::Public),
    route("GET", "/", Access::Public),
    route("GET", "/ui/{*rest}", Access::Public),
    // The dashboard's own routes answer its page (no data): a reload of a rollout's page must
    // show the login form, not a 401 (`dashboard::PAGES`).
    route("GET", "/rollouts/{*rest}", Access::Public),
    route("GET", "/flags/{*rest}", Access::Public),
    route("GET", "/tokens", Access::Public),
    route("GET", "/login", Access::Public),
    route("POST", "/api/v1/session", Access::Public),
    route("GET", "/api/v1/session", Access::Authenticated),
    route("DELETE", "/api/v1/session", Access::Public),
    route("GET", "/api/v1/tokens", Access::ManageTokens),
    route("POST", "/api/v1/tokens", Access::ManageTokens),
    route("DELETE", "/api/v1/tokens/{name}", Access::ManageTokens),
    route("GET", "/api/v1/rollouts", READ),
    route("POST", "/api/v1/rollouts", ADMIN),
    route("GET", "/api/v1/rollouts/{namespace}/{name}", READ),
    route("PUT", "/api/v1/rollouts/{namespace}/{name}", ADMIN),
    route("DELETE", "/api/v1/rollouts/{namespace}/{name}", ADMIN),
    route(
        "POST",
        "/api/v1/rollouts/{namespace}/{name}/commands",
        OPERATE,
    ),
    route("GET", "/api/v1/rollouts/{namespace}/{name}/events", READ),
    route("GET", "/api/v1/watch", READ),
    route("GET", "/api/v1/flag-rollouts", READ),
    route("GET", "/api/v1/flags", READ),
    route("POST", "/api/v1/flags", ADMIN),
    route("GET", "/api/v1/flags/watch", READ),
    route("GET", "/api/v1/flags/{namespace}/{key}", READ),
    route("PUT", "/api/v1/flags/{namespace}/{key}", ADMIN),
    route("DELETE", "/api/v1/flags/{namespace}/{key}", ADMIN),
    route("POST", "/api/v1/flags/{namespace}/{key}/outcomes", OPERATE),
    route("GET", "/api/v1/flags/{namespace}/{key}/history", READ),
    route("GET", "/api/v1/flags/{namespace}/{key}/evaluations", READ),
    route("GET", "/api/v1/flags/{namespace}/{key}/triggers", READ),
    route("POST", "/api/v1/flags/{namespace}/{key}/triggers", ADMIN),
    route(
        "DELETE",
        "/api/v1/flags/{namespace}/{key}/triggers/{id}",
        ADMIN,
    ),
    // The secret in the path is the credential; rate limited per client address like bad
    // credentials (`check`).
    route("POST", crate::triggers::TRIGGER_ROUTE, Access::Public),
    route("POST", "/ofrep/v1/evaluate/flags", EVALUATE),
    route("POST", "/ofrep/v1/evaluate/flags/{key}", EVALUATE),
    route("POST", "/ns/{namespace}/ofrep/v1/evaluate/flags", EVALUATE),
    route(
        "POST",
        "/ns/{namespace}/ofrep/v1/evaluate/flags/{key}",
        EVALUATE,
    ),
];

/// What a request matched in [`ROUTES`]: the access, and the path's namespace and object name.
struct Matched<'a> {
    access: Access,
    pattern: &'static str,
    namespace: Option<&'a str>,
    object: Option<&'a str>,
}

/// What `method` and `path` need (see [`ROUTES`]).
pub fn access_of(method: &Method, path: &str) -> Access {
    matched(method, path).access
}

fn matched<'a>(method: &Method, path: &'a str) -> Matched<'a> {
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for route in ROUTES.iter().filter(|route| route.method == method) {
        let pattern: Vec<&str> = route.path.split('/').skip(1).collect();
        let rest = pattern.last().is_some_and(|last| last.starts_with("{*"));
        let fixed = if rest {
            &pattern[..pattern.len() - 1]
        } else {
            &pattern[..]
        };
        if segments.len() < fixed.len() || (!rest && segments.len() != fixed.len()) {
            continue;
        }
        let mut namespace = None;
        let mut object = None;
        let fits = fixed
            .iter()
            .zip(&segments)
            .all(|(part, segment)| match *part {
                "{namespace}" => {
                    namespace = Some(*segment);
                    true
                }
                "{name}" | "{key}" => {
                    object = Some(*segment);
                    true
                }
                other if other.starts_with('{') => true,
                literal => literal == *segment,
            });
        if fits {
            return Matched {
                access: route.access,
                pattern: route.path,
                namespace,
                object,
            };
        }
    }
    Matched {
        access: READ,
        pattern: "",
        namespace: None,
        object: None,
    }
}

// === configuration ===

/// How a server checks access.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// Give the session cookie the `Secure` attribute (a server behind TLS).
    pub secure_cookies: bool,
    /// `/metrics` needs a `read` token (`weir serve --metrics-auth read`); open otherwise.
    pub metrics_need_token: bool,
    /// Bad credentials one client address may send per window before it gets 429.
    pub bad_credentials_per_window: u32,
    /// The window of that count (it starts with the address's first bad credential).
    pub bad_credentials_window: Duration,
    /// How many client addresses are remembered at most (a bound on memory).
    pub max_tracked_clients: usize,
    /// How the tokens kept in memory learn of changes: read the store's stamp per request
    /// (the default), or be told ([`Auth::tokens_changed`]) and read nothing per request.
    pub token_changes: TokenChanges,
}

impl Default for AuthConfig {
    fn default() -> AuthConfig {
        AuthConfig {
            secure_cookies: false,
            metrics_need_token: false,
            bad_credentials_per_window: 10,
            bad_credentials_window: Duration::from_secs(60),
            max_tracked_clients: 10_000,
            token_changes: TokenChanges::default(),
        }
    }
}

// === who is asking ===

/// The token a request was made with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name.
    pub name: String,
    /// Its scope.
    pub scope: TokenScope,
    /// The namespaces it is limited to (`None`: all).
    pub namespaces: Option<Vec<String>>,
    /// When the token expires.
    pub token_expires: Option<Timestamp>,
    /// The cookie session it came with, if it did.
    session: Option<Session>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Session {
    expires: Timestamp,
    csrf: String,
}

impl Principal {
    fn of(token: &StoredToken, session: Option<Session>) -> Principal {
        Principal {
            name: token.name.clone(),
            scope: token.scope,
            namespaces: token.namespaces.clone(),
            token_expires: token.expires_at,
            session,
        }
    }

    /// Whether it may see `namespace`.
    pub fn sees(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|namespaces| namespaces.iter().any(|allowed| allowed == namespace))
    }
}

/// Who is asking, for handlers: `None` on an open server (no tokens).
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller(pub(crate) Option<Arc<Principal>>);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Caller(parts.extensions.get::<Arc<Principal>>().cloned()))
    }
}

impl Caller {
    /// Whether the caller may see `namespace`.
    pub(crate) fn sees(&self, namespace: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|principal| principal.sees(namespace))
    }

    /// The namespaces the caller is limited to, if it is.
    pub(crate) fn namespaces(&self) -> Option<&[String]> {
        self.0
            .as_ref()
            .and_then(|principal| principal.namespaces.as_deref())
    }

    /// Refuses to write into `namespace` when the caller may not see it (403: the client named
    /// the namespace, so nothing is revealed).
    pub(crate) fn may_write(&self, namespace: &str) -> Result<(), ApiError> {
        match &self.0 {
            Some(principal) if !principal.sees(namespace) => Err(ApiError::Forbidden(format!(
                "token {:?} may not write to namespace {namespace:?}: it is limited to {}",
                principal.name,
                principal
                    .namespaces
                    .as_deref()
                    .unwrap_or_default()
                    .join(", ")
            ))),
            _ => Ok(()),
        }
    }

    /// The actor to record for a change: the token's name (`NAME (as CLAIMED)` when the
    /// request names another), or what the request claims on an open server.
    pub(crate) fn actor(&self, claimed: String) -> String {
        match &self.0 {
            None => claimed,
            Some(principal) if claimed == "api" || claimed == principal.name => {
                principal.name.clone()
            }
            Some(principal) => format!("{} (as {claimed})", principal.name),
        }
    }
}

// === secrets ===

/// A new secret: `weir_` and 43 characters of base64url (256 random bits).
pub fn new_secret() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|error| ApiError::Internal(format!("no random numbers: {error}")))?;
    Ok(format!("{SECRET_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// What the store keeps of `secret`: its SHA-256, lower-case hex.
pub fn secret_hash(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The largest body of the session and token routes (`{"token": ...}`, a token request).
pub const TOKEN_BODY_LIMIT: usize = 64 * 1024;

// === creating tokens (the API and `weir token create`) ===

/// A token to create, as a client gives it (validated by [`issue_token`]).
#[derive(Debug, Clone, Default)]
pub struct TokenRequest {
    /// Its name: lowercase letters, digits, '-' and '.', at most 253.
    pub name: String,
    /// `read`, `operate`, `admin` or `evaluate`.
    pub scope: String,
    /// The namespaces it is limited to; `None`: all. An empty list is refused (422): it must
    /// never mean "all".
    pub namespaces: Option<Vec<String>>,
    /// When it expires: a duration from now (`30d`, `12h`, `90m`, `2w`) or an RFC 3339 time.
    pub expires: Option<String>,
}

/// A token as the API shows it (never its secret or hash).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenView {
    /// Its name.
    pub name: String,
    /// Its scope.
    pub scope: TokenScope,
    /// Its namespaces (`null`: all).
    pub namespaces: Option<Vec<String>>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it expires (`null`: never).
    pub expires_at: Option<Timestamp>,
    /// When it was revoked.
    pub revoked_at: Option<Timestamp>,
    /// When it was last used (to within a minute).
    pub last_used_at: Option<Timestamp>,
}

impl From<&StoredToken> for TokenView {
    fn from(token: &StoredToken) -> TokenView {
        TokenView {
            name: token.name.clone(),
            scope: token.scope,
            namespaces: token.namespaces.clone(),
            created_at: token.created_at,
            expires_at: token.expires_at,
            revoked_at: token.revoked_at,
            last_used_at: token.last_used_at,
        }
    }
}

/// A token just created, with its secret (shown once, never stored).
#[derive(Debug, Clone, Serialize)]
pub struct IssuedToken {
    /// The token.
    #[serde(flatten)]
    pub token: TokenView,
    /// The secret to give clients.
    pub secret: String,
}

/// Validates `request`, creates the token in `store` and returns it with its secret. Every
/// problem of the request is named at once (400, code `invalid`; 422, code `unprocessable`,
/// when `namespaces` is an empty list, which must never mean "all"); a name in use is 409.
pub async fn issue_token<T: TokenStore>(
    store: &T,
    request: &TokenRequest,
    now: Timestamp,
) -> Result<IssuedToken, ApiError> {
    let mut errors = Vec::new();
    if !weir_core::validate::is_dns_subdomain(&request.name) {
        errors.push(FieldError::with_value(
            "name",
            format!("{:?}", request.name),
            "a token's name is at most 253 lowercase letters, digits, '-' and '.', starting and \
             ending with a letter or digit",
        ));
    }
    let scope = TokenScope::parse(&request.scope);
    if scope.is_none() {
        errors.push(FieldError::with_value(
            "scope",
            format!("{:?}", request.scope),
            format!("one of {}", TokenScope::names()),
        ));
    }
    let namespaces = request.namespaces.clone();
    // Left out means every namespace; a list names the only ones. An empty list is neither:
    // taken as "all" it would fail open.
    let no_namespace = namespaces.as_ref().is_some_and(Vec::is_empty);
    if no_namespace {
        errors.push(FieldError::with_value(
            "namespaces",
            "[]",
            "must list at least one namespace, or be left out (or null) for a token of every \
             namespace",
        ));
    }
    for (index, namespace) in namespaces.iter().flatten().enumerate() {
        if !weir_core::validate::is_dns_label(namespace) {
            errors.push(FieldError::with_value(
                format!("namespaces[{index}]"),
                format!("{namespace:?}"),
                "a namespace is at most 63 lowercase letters, digits and '-', starting and \
                 ending with a letter or digit",
            ));
        }
    }
    let expires_at = match request.expires.as_deref().map(|text| expiry(text, now)) {
        None => None,
        Some(Ok(at)) => Some(at),
        Some(Err(error)) => {
            errors.push(error);
            None
        }
    };
    let Some(scope) = scope.filter(|_| errors.is_empty()) else {
        if no_namespace {
            let message = match errors.as_slice() {
                [one] => one.to_string(),
                many => format!("{} problems; see errors", many.len()),
            };
            return Err(ApiError::Unprocessable { message, errors });
        }
        return Err(ApiError::invalid(errors));
    };
    let secret = new_secret()?;
    let token = store
        .create_token(
            &NewToken {
                name: request.name.clone(),
                scope,
                namespaces,
                expires_at,
                secret_hash: secret_hash(&secret),
            },
            now,
        )
        .await?;
    Ok(IssuedToken {
        token: TokenView::from(&token),
        secret,
    })
}

/// `30d`, `12h`, `90m`, `2w` from `now`, or an RFC 3339 time; in the future either way.
fn expiry(text: &str, now: Timestamp) -> Result<Timestamp, FieldError> {
    let refuse = |why: &str| {
        FieldError::with_value(
            "expires",
            format!("{text:?}"),
            format!(
                "{why}: give a duration from now, a number followed by m, h, d or w (30d), or \
                 an RFC 3339 time (2030-01-31T00:00:00Z)"
            ),
        )
    };
    let at = if let Ok(at) = text.parse::<Timestamp>() {
        at
    } else {
        let unit = text.chars().last().ok_or_else(|| refuse("is empty"))?;
        let seconds_per = match unit {
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return Err(refuse("is not a duration or a time")),
        };
        let count: i64 = text[..text.len() - 1]
            .parse()
            .map_err(|_| refuse("is not a duration or a time"))?;
        if count <= 0 {
            return Err(refuse("must be in the future"));
        }
        count
            .checked_mul(seconds_per)
            .and_then(|seconds| now.checked_add(SignedDuration::from_secs(seconds)).ok())
            .ok_or_else(|| refuse("is too far in the future"))?
    };
    if at <= now {
        return Err(refuse("must be in the future"));
    }
    Ok(at)
}

impl From<TokenStoreError> for ApiError {
    fn from(error: TokenStoreError) -> ApiError {
        match error {
            TokenStoreError::AlreadyExists(_) => ApiError::Conflict(error.to_string()),
            TokenStoreError::NotFound(_) => ApiError::NotFound(error.to_string()),
            TokenStoreError::Database(message) => ApiError::Internal(message),
            TokenStoreError::Unavailable(message) => ApiError::DatabaseUnavailable(message),
        }
    }
}

// === the checks ===

/// Access control for a server's API: [`Auth::apply`] puts the checks in front of a router and
/// adds the session and token routes.
pub struct Auth<T: TokenStore> {
    inner: Arc<Inner<T>>,
}

impl<T: TokenStore> Clone for Auth<T> {
    fn clone(&self) -> Self {
        Auth {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<T> {
    store: T,
    /// Every token, in memory (`auth/cache.rs`): a request's credentials are checked without a
    /// database read.
    tokens: TokenCache<T>,
    /// The session cookie's HMAC key.
    key: Vec<u8>,
    config: AuthConfig,
    /// Set once a token exists; never cleared (tokens are revoked, not deleted).
    enabled: AtomicBool,
    limiter: Mutex<Limiter>,
}

impl<T: TokenStore> Auth<T> {
    /// Access control over `store`'s tokens; creates the session key on the first start.
    pub async fn open(store: T, config: AuthConfig) -> Result<Auth<T>, TokenStoreError> {
        let mut candidate = [0u8; 32];
        getrandom::fill(&mut candidate)
            .map_err(|error| TokenStoreError::Database(format!("no random numbers: {error}")))?;
        let key = store.server_key(SESSION_KEY, &candidate).await?;
        let tokens = TokenCache::new(store.clone(), config.token_changes);
        let enabled = tokens.tokens().await?.any();
        Ok(Auth {
            inner: Arc::new(Inner {
                limiter: Mutex::new(Limiter::new(&config)),
                store,
                tokens,
                key,
                config,
                enabled: AtomicBool::new(enabled),
            }),
        })
    }

    /// Tokens may have changed (a change notice from the database, or notices may have been
    /// missed): the next request reads them again. What a server with
    /// [`TokenChanges::Announced`] calls; harmless otherwise.
    pub fn tokens_changed(&self) {
        self.inner.tokens.changed();
    }

    /// `router` with the session and token routes added and the checks in front of every
    /// route (and of the fallbacks). Apply [`crate::HostPolicy`] outside this, so a foreign Host
    /// is refused before credentials are even looked at.
    pub fn apply(self, router: Router) -> Router {
        let routes = Router::new()
            .route(
                "/api/v1/session",
                get(session_get)
                    .post(session_post::<T>)
                    .delete(session_delete::<T>),
            )
            .route(
                "/api/v1/tokens",
                get(tokens_list::<T>).post(tokens_create::<T>),
            )
            .route("/api/v1/tokens/{name}", delete(tokens_revoke::<T>))
            .layer(axum::extract::DefaultBodyLimit::max(TOKEN_BODY_LIMIT))
            .with_state(self.inner.clone());
        router
            .merge(routes)
            .layer(axum::middleware::from_fn_with_state(self.inner, check::<T>))
    }
}

impl<T: TokenStore> Inner<T> {
    /// Whether tokens are required: once any token exists (created by this server or by `weir
    /// token create` on the same database), as `tokens` say.
    fn enabled(&self, tokens: &TokenSet) -> bool {
        if self.enabled.load(Ordering::Acquire) {
            return true;
        }
        let found = tokens.any();
        if found {
            self.enabled.store(true, Ordering::Release);
        }
        found
    }

    fn mac(&self, purpose: &str, payload: &str) -> Hmac<Sha256> {
        // HMAC takes keys of any length; the key read from the store is 32 bytes.
        let mut mac = match <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key) {
            Ok(mac) => mac,
            Err(_) => unreachable_key(),
        };
        mac.update(purpose.as_bytes());
        mac.update(b":");
        mac.update(payload.as_bytes());
        mac
    }

    fn sign(&self, purpose: &str, payload: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(purpose, payload).finalize().into_bytes())
    }

    /// Whether `tag` (base64url) is `payload`'s tag for `purpose`, compared in constant time.
    fn verify(&self, purpose: &str, payload: &str, tag: &str) -> bool {
        match URL_SAFE_NO_PAD.decode(tag) {
            Ok(bytes) => self.mac(purpose, payload).verify_slice(&bytes).is_ok(),
            Err(_) => false,
        }
    }

    /// The cookie value and the session of `token`, from `now`.
    fn new_session(&self, token: &StoredToken, now: Timestamp) -> (String, Session) {
        let lifetime = SignedDuration::try_from(SESSION_LIFETIME).unwrap_or(SignedDuration::ZERO);
        let mut expires = now.checked_add(lifetime).unwrap_or(now);
        if let Some(token_expires) = token.expires_at {
            expires = expires.min(token_expires);
        }
        let payload = format!("v1:{}:{}", token.id, expires.as_second());
        let cookie = format!("{payload}.{}", self.sign("session", &payload));
        let csrf = self.sign("csrf", &payload);
        (cookie, Session { expires, csrf })
    }

    /// The token id and session a cookie value holds, if its signature is right.
    fn read_cookie(&self, value: &str) -> Option<(i64, Session)> {
        let (payload, tag) = value.rsplit_once('.')?;
        if !self.verify("session", payload, tag) {
            return None;
        }
        let mut parts = payload.split(':');
        let (Some("v1"), Some(id), Some(expires), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let id = id.parse().ok()?;
        let expires = Timestamp::from_second(expires.parse().ok()?).ok()?;
        Some((
            id,
            Session {
                expires,
                csrf: self.sign("csrf", payload),
            },
        ))
    }

    fn cookie_header(&self, value: &str, max_age: u64) -> Option<HeaderValue> {
        let secure = if self.config.secure_cookies {
            "; Secure"
        } else {
            ""
        };
        HeaderValue::from_str(&format!(
            "{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}"
        ))
        .ok()
    }

    /// The token `secret` names, if it works now; a bad one counts against `client`.
    fn by_secret(
        &self,
        tokens: &TokenSet,
        secret: &str,
        client: IpAddr,
        now: Timestamp,
    ) -> Result<StoredToken, ApiError> {
        let found = tokens.by_hash(&secret_hash(secret));
        let refusal = match found {
            None => "the token is not known to this server".to_string(),
            Some(token) => match token.usable(now) {
                Ok(()) => return Ok(token.clone()),
                Err(why) => why,
            },
        };
        self.strike(client);
        Err(ApiError::Unauthorized(refusal))
    }

    /// The principal of a request, from its credentials: `Ok(None)` when it carries none.
    fn principal(
        &self,
        tokens: &TokenSet,
        headers: &HeaderMap,
        client: IpAddr,
        now: Timestamp,
    ) -> Result<Option<(StoredToken, Option<Session>)>, ApiError> {
        match credential(headers)? {
            None => Ok(None),
            Some(Credential::Secret(secret)) => {
                Ok(Some((self.by_secret(tokens, &secret, client, now)?, None)))
            }
            Some(Credential::Cookie(value)) => {
                let Some((id, session)) = self.read_cookie(&value) else {
                    self.strike(client);
                    return Err(ApiError::Unauthorized(
                        "the session cookie is not valid: log in again".into(),
                    ));
                };
                if session.expires <= now {
                    return Err(ApiError::Unauthorized(
                        "the session has expired: log in again".into(),
                    ));
                }
                let token = tokens
                    .by_id(id)
                    .cloned()
                    .ok_or_else(|| ApiError::Unauthorized("the session's token is gone".into()))?;
                token.usable(now).map_err(ApiError::Unauthorized)?;
                Ok(Some((token, Some(session))))
            }
        }
    }

    fn strike(&self, client: IpAddr) {
        if let Ok(mut limiter) = self.limiter.lock() {
            limiter.strike(client, Instant::now());
        }
    }

    /// Seconds until `client` is below its limit of bad credentials, when it is over it now.
    /// Read before its credential is checked, so that the limit's own failure is the last 401.
    fn blocked(&self, client: IpAddr) -> Option<u64> {
        match self.limiter.lock() {
            Ok(mut limiter) => limiter.retry_after(client, Instant::now()),
            // A panic while holding the lock cannot leave the map inconsistent in a way that
            // matters here; refusing everyone would be worse.
            Err(_) => None,
        }
    }
}

/// `refused` (a 401), or 429 instead when the client was over its limit of bad credentials
/// (`blocked`, from [`Inner::blocked`]). Other errors (the database failing) are passed on as
/// they are.
fn limited(blocked: Option<u64>, refused: ApiError) -> ApiError {
    match blocked {
        Some(seconds) if matches!(refused, ApiError::Unauthorized(_)) => {
            ApiError::TooManyRequests(seconds)
        }
        _ => refused,
    }
}

/// `KeyInit::new_from_slice` fails only for MACs with a fixed key length; HMAC has none.
fn unreachable_key() -> ! {
    unreachable!("HMAC accepts keys of every length")
}

enum Credential {
    Secret(String),
    Cookie(String),
}

/// The credential a request carries: `Authorization: Bearer`, `X-API-Key`, else the cookie.
fn credential(headers: &HeaderMap) -> Result<Option<Credential>, ApiError> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let text = value.to_str().unwrap_or_default();
        return match text.split_once(' ') {
            Some((scheme, secret))
                if scheme.eq_ignore_ascii_case("bearer") && !secret.trim().is_empty() =>
            {
                Ok(Some(Credential::Secret(secret.trim().to_string())))
            }
            _ => Err(ApiError::Unauthorized(
                "the Authorization header is not `Bearer <token>`".into(),
            )),
        };
    }
    if let Some(value) = headers.get("x-api-key") {
        let secret = value.to_str().unwrap_or_default().trim();
        if secret.is_empty() {
            return Err(ApiError::Unauthorized(
                "the X-API-Key header is empty".into(),
            ));
        }
        return Ok(Some(Credential::Secret(secret.to_string())));
    }
    for value in headers.get_all(header::COOKIE) {
        let Ok(text) = value.to_str() else { continue };
        for pair in text.split(';') {
            if let Some((name, value)) = pair.trim().split_once('=')
                && name == SESSION_COOKIE
                && !value.is_empty()
            {
                return Ok(Some(Credential::Cookie(value.to_string())));
            }
        }
    }
    Ok(None)
}

fn client_of(request: &Request) -> IpAddr {
    client_in(request.extensions())
}

fn client_in(extensions: &axum::http::Extensions) -> IpAddr {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip().to_canonical())
        // Without the peer's address (a server not built with connect info), all clients share
        // one count: stricter, never looser.
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

/// The client's address (see [`client_in`]).
pub(crate) struct ClientAddr(pub(crate) IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(client_in(&parts.extensions)))
    }
}

fn changes(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The middleware: see the module documentation.
async fn check<T: TokenStore>(
    State(auth): State<Arc<Inner<T>>>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    let matched = matched(&method, &path);
    let access = match matched.access {
        Access::Metrics if auth.config.metrics_need_token => READ,
        Access::Metrics => Access::Public,
        other => other,
    };
    if matched.pattern == crate::triggers::TRIGGER_ROUTE {
        // A trigger's secret is a credential: every wrong one counts towards the client's
        // limit, and a client over it is refused before its secret is looked at.
        let client = client_of(&request);
        if let Some(seconds) = auth.blocked(client) {
            return ApiError::TooManyRequests(seconds).into_response();
        }
        let response = next.run(request).await;
        if response.status() == StatusCode::NOT_FOUND {
            auth.strike(client);
        }
        return response;
    }
    if access == Access::Public {
        return next.run(request).await;
    }
    // From memory (`auth/cache.rs`): no database read unless tokens changed.
    let tokens = match auth.tokens.tokens().await {
        Ok(tokens) => tokens,
        Err(error) => return ApiError::from(error).into_response(),
    };
    if !auth.enabled(&tokens) {
        return next.run(request).await;
    }
    let client = client_of(&request);
    let blocked = auth.blocked(client);
    let now = Timestamp::now();
    // Valid credentials are honoured even from an address over its limit of bad ones: the limit
    // stops the failures (429 instead of 401), never the callers whose token works.
    let (token, session) = match auth.principal(&tokens, request.headers(), client, now) {
        Ok(Some(found)) => found,
        Ok(None) => {
            return limited(
                blocked,
                ApiError::Unauthorized(
                    "this server needs a token: send Authorization: Bearer <token> (weir \
                         --token, WEIR_TOKEN) or log in (docs/SECURITY.md)"
                        .into(),
                ),
            )
            .into_response();
        }
        Err(error) => return limited(blocked, error).into_response(),
    };
    if let Some(session) = &session
        && changes(&method)
    {
        let given = request
            .headers()
            .get(CSRF_HEADER)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        // Compared in constant time, so the answer's timing reveals nothing of the value.
        let expected = session.csrf.as_bytes();
        if given.is_empty() || !constant_time_eq(given.as_bytes(), expected) {
            return ApiError::Csrf(format!(
                "a change made with the session cookie needs the header X-CSRF-Token with the \
                 session's csrf value (GET /api/v1/session); {}",
                if given.is_empty() {
                    "none was sent"
                } else {
                    "the one sent is not this session's"
                }
            ))
            .into_response();
        }
    }
    let principal = Principal::of(&token, session);
    let refused = match access {
        Access::Scope(needed) if !token.scope.allows(needed) => Some(ApiError::Forbidden(format!(
            "token {:?} has scope {}; {method} {} needs scope {needed}{}",
            token.name,
            token.scope,
            if matched.pattern.is_empty() {
                path.as_str()
            } else {
                matched.pattern
            },
            if needed == TokenScope::Evaluate {
                ""
            } else {
                " or higher"
            }
        ))),
        Access::ManageTokens if token.scope != TokenScope::Admin => {
            Some(ApiError::Forbidden(format!(
                "token {:?} has scope {}; managing tokens needs scope admin",
                token.name, token.scope
            )))
        }
        Access::ManageTokens if token.namespaces.is_some() => Some(ApiError::Forbidden(format!(
            "token {:?} is limited to namespaces; managing tokens needs an admin token for every \
             namespace",
            token.name
        ))),
        _ => None,
    };
    if let Some(error) = refused {
        return error.into_response();
    }
    // Objects of namespaces the token does not see do not exist for it. OFREP answers as for an
    // empty namespace itself (its own error shape).
    if let Some(namespace) = matched.namespace
        && path.starts_with("/api/")
        && !principal.sees(namespace)
    {
        let what = if matched.pattern.starts_with("/api/v1/flags/") {
            "flag"
        } else {
            "rollout"
        };
        return ApiError::NotFound(format!(
            "{what} {namespace}/{} not found",
            matched.object.unwrap_or_default()
        ))
        .into_response();
    }
    auth.tokens.touch(&token, now);
    if changes(&method) {
        tracing::info!(token = %token.name, %method, path = %path, "change made with a token");
    }
    request.extensions_mut().insert(Arc::new(principal));
    next.run(request).await
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

// === bad credentials per client address ===

struct Limiter {
    clients: HashMap<IpAddr, Strikes>,
    limit: u32,
    window: Duration,
    capacity: usize,
}

#[derive(Clone, Copy)]
struct Strikes {
    count: u32,
    since: Instant,
}

impl Limiter {
    fn new(config: &AuthConfig) -> Limiter {
        Limiter {
            clients: HashMap::new(),
            limit: config.bad_credentials_per_window.max(1),
            window: config.bad_credentials_window,
            capacity: config.max_tracked_clients.max(1),
        }
    }

    /// Seconds until `client` may try again, when it is blocked now.
    fn retry_after(&mut self, client: IpAddr, now: Instant) -> Option<u64> {
        let strikes = *self.clients.get(&client)?;
        let elapsed = now.saturating_duration_since(strikes.since);
        if elapsed >= self.window {
            self.clients.remove(&client);
            return None;
        }
        (strikes.count >= self.limit).then(|| {
            let left = self.window - elapsed;
            left.as_secs() + u64::from(left.subsec_nanos() > 0)
        })
    }

    fn strike(&mut self, client: IpAddr, now: Instant) {
        if !self.clients.contains_key(&client) && self.clients.len() >= self.capacity {
            let window = self.window;
            self.clients
                .retain(|_, strikes| now.saturating_duration_since(strikes.since) < window);
            if self.clients.len() >= self.capacity
                && let Some(oldest) = self
                    .clients
                    .iter()
                    .min_by_key(|(_, strikes)| strikes.since)
                    .map(|(client, _)| *client)
            {
                self.clients.remove(&oldest);
            }
        }
        let strikes = self.clients.entry(client).or_insert(Strikes {
            count: 0,
            since: now,
        });
        if now.saturating_duration_since(strikes.since) >= self.window {
            *strikes = Strikes {
                count: 0,
                since: now,
            };
        }
        strikes.count = strikes.count.saturating_add(1);
    }
}

// === /api/v1/session ===

/// The session JSON (`POST` and `GET /api/v1/session`).
#[derive(Debug, Serialize)]
struct SessionView {
    name: String,
    scope: TokenScope,
    namespaces: Option<Vec<String>>,
    /// The session's expiry (cookie), or the token's (bearer).
    expires: Option<Timestamp>,
    csrf: Option<String>,
    auth: bool,
}

fn session_view(principal: &Principal) -> SessionView {
    SessionView {
        name: principal.name.clone(),
        scope: principal.scope,
        namespaces: principal.namespaces.clone(),
        expires: match &principal.session {
            Some(session) => Some(session.expires),
            None => principal.token_expires,
        },
        csrf: principal
            .session
            .as_ref()
            .map(|session| session.csrf.clone()),
        auth: true,
    }
}

/// `GET /api/v1/session`
async fn session_get(caller: Caller) -> Response {
    match caller.0 {
        Some(principal) => Json(session_view(&principal)).into_response(),
        // The checks let this through without a principal only when the server is open.
        None => Json(SessionView {
            name: "anonymous".into(),
            scope: TokenScope::Admin,
            namespaces: None,
            expires: None,
            csrf: None,
            auth: false,
        })
        .into_response(),
    }
}

/// `POST /api/v1/session` with `{"token": "<secret>"}`: sets the session cookie.
async fn session_post<T: TokenStore>(
    State(auth): State<Arc<Inner<T>>>,
    ClientAddr(client): ClientAddr,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = crate::input::body_within(body, TOKEN_BODY_LIMIT)?;
    let secret = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => match map.get("token") {
            Some(Value::String(secret)) if !secret.trim().is_empty() => secret.trim().to_string(),
            _ => {
                return Err(ApiError::field(FieldError::missing(
                    "token",
                    "the token's secret (weir_...)",
                )));
            }
        },
        _ => {
            return Err(ApiError::field(FieldError::new(
                "(body)",
                "send {\"token\": \"weir_...\"}",
            )));
        }
    };
    let now = Timestamp::now();
    // A good token logs in even from an address that sent bad ones: only failures are limited.
    let blocked = auth.blocked(client);
    let tokens = auth.tokens.tokens().await?;
    let token = match auth.by_secret(&tokens, &secret, client, now) {
        Ok(token) => token,
        Err(refused) => return Err(limited(blocked, refused)),
    };
    auth.tokens.touch(&token, now);
    let (cookie, session) = auth.new_session(&token, now);
    let max_age = u64::try_from(session.expires.as_second() - now.as_second()).unwrap_or(0);
    let principal = Principal::of(&token, Some(session));
    tracing::info!(token = %token.name, "session opened");
    let mut response = Json(session_view(&principal)).into_response();
    if let Some(value) = auth.cookie_header(&cookie, max_age) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    Ok(response)
}

/// `DELETE /api/v1/session`: clears the cookie (the token stays valid: revoke it to end
/// every session).
async fn session_delete<T: TokenStore>(State(auth): State<Arc<Inner<T>>>) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Some(value) = auth.cookie_header("", 0) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

// === /api/v1/tokens ===

#[derive(Serialize)]
struct TokenList {
    items: Vec<TokenView>,
}

/// `GET /api/v1/tokens`
async fn tokens_list<T: TokenStore>(
    State(auth): State<Arc<Inner<T>>>,
) -> Result<Response, ApiError> {
    let items = auth.store.list_tokens().await?;
    Ok(Json(TokenList {
        items: items.iter().map(TokenView::from).collect(),
    })
    .into_response())
}

/// `POST /api/v1/tokens` with `{"name", "scope", "namespaces"?, "expires"?}`: 201 and the
/// token with its secret (shown once).
async fn tokens_create<T: TokenStore>(
    State(auth): State<Arc<Inner<T>>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    crate::input::format(&headers, false, Some(crate::input::Format::Json))?;
    let bytes = crate::input::body_within(body, TOKEN_BODY_LIMIT)?;
    let request = token_request(&bytes)?;
    let issued = issue_token(&auth.store, &request, Timestamp::now()).await?;
    auth.tokens.changed();
    auth.enabled.store(true, Ordering::Release);
    tracing::info!(token = %issued.token.name, scope = %issued.token.scope, "token created");
    Ok((StatusCode::CREATED, Json(issued)).into_response())
}

fn token_request(bytes: &[u8]) -> Result<TokenRequest, ApiError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|error| {
        ApiError::field(FieldError::new(
            "(body)",
            format!("is not valid JSON: {error}"),
        ))
    })?;
    let Value::Object(map) = value else {
        return Err(ApiError::field(FieldError::new(
            "(body)",
            "send {\"name\": \"...\", \"scope\": \"read\", \"namespaces\": [...], \"expires\": \"30d\"}",
        )));
    };
    let mut errors = Vec::new();
    let mut request = TokenRequest::default();
    let mut text = |field: &str, required: bool| -> Option<String> {
        match map.get(field) {
            Some(Value::String(text)) => Some(text.clone()),
            None | Some(Value::Null) if !required => None,
            None | Some(Value::Null) => {
                errors.push(FieldError::missing(field, "a string"));
                None
            }
            Some(other) => {
                errors.push(FieldError::with_value(field, other, "must be a string"));
                None
            }
        }
    };
    request.name = text("name", true).unwrap_or_default();
    request.scope = text("scope", true).unwrap_or_default();
    request.expires = text("expires", false);
    match map.get("namespaces") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            let mut namespaces = Vec::new();
            for (index, item) in items.iter().enumerate() {
                match item {
                    Value::String(namespace) => namespaces.push(namespace.clone()),
                    other => errors.push(FieldError::with_value(
                        format!("namespaces[{index}]"),
                        other,
                        "must be a string",
                    )),
                }
            }
            request.namespaces = Some(namespaces);
        }
        Some(other) => errors.push(FieldError::with_value(
            "namespaces",
            other,
            "a list of namespaces, or null for all",
        )),
    }
    for field in map.keys() {
        if !["name", "scope", "namespaces", "expires"].contains(&field.as_str()) {
            errors.push(FieldError::new(
                field.clone(),
                "unknown field; a token has name, scope, namespaces and expires",
            ));
        }
    }
    if errors.is_empty() {
        Ok(request)
    } else {
        Err(ApiError::invalid(errors))
    }
}

/// `DELETE /api/v1/tokens/{name}`: 200 and the token, revoked.
async fn tokens_revoke<T: TokenStore>(
    State(auth): State<Arc<Inner<T>>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let token = auth.store.revoke_token(&name, Timestamp::now()).await?;
    // Refused from this server's next request on (other instances: when the change notice
    // arrives, or their next poll).
    auth.tokens.changed();
    tracing::info!(token = %token.name, "token revoked");
    Ok(Json(TokenView::from(&token)).into_response())
}

#[cfg(test)]
mod tests;
