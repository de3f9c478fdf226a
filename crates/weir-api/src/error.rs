//! Errors as the API answers them: always JSON, always with a stable code.

use axum::Json;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::types::{ErrorBody, ErrorDetail};
use weir_core::FieldError;
use weir_core::machine::CommandRejected;
use weir_engine::EngineError;
use weir_store::StoreError;

/// The stable, machine-readable kind of an error (`error.code` in the body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: the request or the document is invalid; `errors` names every field.
    Invalid,
    /// 404: no such rollout (or no such route).
    NotFound,
    /// 405: the route exists, the method does not.
    MethodNotAllowed,
    /// 409: the rollout changed since the version the client named, or already exists.
    Conflict,
    /// 409: the command does not apply in the rollout's phase.
    Rejected,
    /// 422: the request is well formed but does not fit what it refers to (an outcome report
    /// naming a variation the flag does not have); `errors` names every field.
    Unprocessable,
    /// 413: the body is larger than the route reads ([`crate::MAX_BODY_BYTES`] for documents,
    /// 64 KiB for sessions and tokens).
    PayloadTooLarge,
    /// 415: the body is neither JSON nor YAML.
    UnsupportedMediaType,
    /// 500: the server failed.
    Internal,
    /// 503: the engine is shutting down, the rollout is between owners, or the database cannot
    /// be reached (then with `Retry-After`).
    Unavailable,
    /// 421: the request's `Host` is not a name this server answers to (DNS rebinding defence;
    /// docs/SECURITY.md).
    Misdirected,
    /// 403: a change sent from a web page of another origin (CSRF defence; docs/SECURITY.md),
    /// or a token without the scope a route needs.
    Forbidden,
    /// 401: no valid token (missing, unknown, expired, revoked); `WWW-Authenticate: Bearer`.
    Unauthorized,
    /// 403: a change made with the session cookie without the session's `X-CSRF-Token`.
    Csrf,
    /// 429: too many bad tokens from this client address; `Retry-After` says when to retry.
    TooManyRequests,
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request or its document is invalid.
    #[error("{message}")]
    Invalid {
        /// In words.
        message: String,
        /// Every problem, with its field path.
        errors: Vec<FieldError>,
    },
    /// No such rollout or route.
    #[error("{0}")]
    NotFound(String),
    /// The route exists, the method does not.
    #[error("method {0} is not allowed here")]
    MethodNotAllowed(Method),
    /// A version conflict.
    #[error("{0}")]
    Conflict(String),
    /// The state machine refused a command.
    #[error(transparent)]
    Rejected(CommandRejected),
    /// A well-formed request that does not fit what it refers to.
    #[error("{message}")]
    Unprocessable {
        /// In words.
        message: String,
        /// Every problem, with its field path.
        errors: Vec<FieldError>,
    },
    /// The body is larger than the route reads (this many bytes).
    #[error("the body is larger than {}, the most this route reads", bytes_in_words(*.0))]
    PayloadTooLarge(usize),
    /// The body's content type is not one the route reads.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The server failed.
    #[error("internal error: {0}")]
    Internal(String),
    /// The engine is shutting down.
    #[error("the engine is shutting down; try again later")]
    Unavailable,
    /// No instance can take the request now (its rollout is between owners); try again.
    #[error("{0}")]
    Moving(String),
    /// The rollout's owner (another instance) refused the command.
    #[error("{0}")]
    RejectedByOwner(String),
    /// The `Host` is not one this server answers to.
    #[error("{0}")]
    Misdirected(String),
    /// A change from a page of another origin.
    #[error("{0}")]
    Forbidden(String),
    /// No valid credentials: missing, unknown, expired or revoked (never echoes them).
    #[error("{0}")]
    Unauthorized(String),
    /// A change made with a session cookie lacks the session's `X-CSRF-Token`.
    #[error("{0}")]
    Csrf(String),
    /// Too many bad credentials from this client address; retry after this many seconds.
    #[error("too many bad credentials from this address; try again in {0} s")]
    TooManyRequests(u64),
    /// The database cannot be reached now (the store's message names it, never its
    /// credentials); answered 503 with `Retry-After`.
    #[error(
        "{0}; nothing was done, try again in {DATABASE_RETRY_AFTER_SECS} s (the server answers \
         again once the database is back)"
    )]
    DatabaseUnavailable(String),
}

/// The `Retry-After` of an answer while the database cannot be reached, in seconds.
pub const DATABASE_RETRY_AFTER_SECS: u64 = 5;

/// A size limit in bytes, with its KiB or MiB when whole: `65536 bytes (64 KiB)`.
pub(crate) fn bytes_in_words(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{bytes} bytes ({} MiB)", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{bytes} bytes ({} KiB)", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

impl ApiError {
    /// A 400 with one field error.
    pub(crate) fn field(error: FieldError) -> ApiError {
        ApiError::invalid(vec![error])
    }

    /// A 400 with the given field errors.
    pub(crate) fn invalid(errors: Vec<FieldError>) -> ApiError {
        let message = match errors.as_slice() {
            [one] => one.to_string(),
            many => format!("{} problems; see errors", many.len()),
        };
        ApiError::Invalid { message, errors }
    }

    /// The error's code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Invalid { .. } => ErrorCode::Invalid,
            ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::MethodNotAllowed(_) => ErrorCode::MethodNotAllowed,
            ApiError::Conflict(_) => ErrorCode::Conflict,
            ApiError::Rejected(_) => ErrorCode::Rejected,
            ApiError::Unprocessable { .. } => ErrorCode::Unprocessable,
            ApiError::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            ApiError::UnsupportedMediaType(_) => ErrorCode::UnsupportedMediaType,
            ApiError::Internal(_) => ErrorCode::Internal,
            ApiError::Unavailable | ApiError::Moving(_) | ApiError::DatabaseUnavailable(_) => {
                ErrorCode::Unavailable
            }
            ApiError::RejectedByOwner(_) => ErrorCode::Rejected,
            ApiError::Misdirected(_) => ErrorCode::Misdirected,
            ApiError::Forbidden(_) => ErrorCode::Forbidden,
            ApiError::Unauthorized(_) => ErrorCode::Unauthorized,
            ApiError::Csrf(_) => ErrorCode::Csrf,
            ApiError::TooManyRequests(_) => ErrorCode::TooManyRequests,
        }
    }

    /// The HTTP status it is answered with.
    pub fn status(&self) -> StatusCode {
        match self.code() {
            ErrorCode::Invalid => StatusCode::BAD_REQUEST,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::Conflict | ErrorCode::Rejected => StatusCode::CONFLICT,
            ErrorCode::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Misdirected => StatusCode::MISDIRECTED_REQUEST,
            ErrorCode::Forbidden | ErrorCode::Csrf => StatusCode::FORBIDDEN,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!("API request failed: {detail}");
        }
        let errors = match &self {
            ApiError::Invalid { errors, .. } | ApiError::Unprocessable { errors, .. } => {
                errors.clone()
            }
            _ => Vec::new(),
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message: self.to_string(),
                errors,
            },
        };
        let mut response = (self.status(), Json(body)).into_response();
        match &self {
            ApiError::Unauthorized(_) => {
                response.headers_mut().insert(
                    axum::http::header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static("Bearer"),
                );
            }
            ApiError::TooManyRequests(seconds) => {
                response.headers_mut().insert(
                    axum::http::header::RETRY_AFTER,
                    axum::http::HeaderValue::from(*seconds),
                );
            }
            ApiError::DatabaseUnavailable(detail) => {
                tracing::warn!("API request failed: {detail}");
                response.headers_mut().insert(
                    axum::http::header::RETRY_AFTER,
                    axum::http::HeaderValue::from(DATABASE_RETRY_AFTER_SECS),
                );
            }
            _ => {}
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        match error {
            StoreError::NotFound(_) => ApiError::NotFound(error.to_string()),
            StoreError::Conflict { .. } | StoreError::AlreadyExists(_) => {
                ApiError::Conflict(error.to_string())
            }
            StoreError::InvalidCursor(cursor) => ApiError::field(FieldError::with_value(
                "cursor",
                format!("{cursor:?}"),
                "pass the nextCursor of a previous page",
            )),
            StoreError::Corrupt { .. } | StoreError::Database(_) => {
                ApiError::Internal(error.to_string())
            }
            StoreError::Unavailable(message) => ApiError::DatabaseUnavailable(message),
            StoreError::Fenced { .. } | StoreError::AlreadyExecuted(_) => ApiError::Moving(
                format!("{error}; the rollout is changing owner, try again in a few seconds"),
            ),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> ApiError {
        match error {
            EngineError::Invalid(errors) => ApiError::invalid(errors),
            EngineError::Refused(errors) => ApiError::Unprocessable {
                message: match errors.as_slice() {
                    [one] => one.to_string(),
                    many => format!(
                        "{} refusals by this server's policy (see errors); the first: {}",
                        many.len(),
                        many[0]
                    ),
                },
                errors,
            },
            EngineError::NotFound(key) => ApiError::NotFound(format!("rollout {key} not found")),
            EngineError::Rejected(rejected) => ApiError::Rejected(rejected),
            EngineError::Store(error) => error.into(),
            EngineError::ShuttingDown => ApiError::Unavailable,
            EngineError::Remote(remote) => {
                use weir_engine::RemoteErrorKind as Kind;
                match remote.kind {
                    Kind::Invalid => ApiError::invalid(remote.fields),
                    Kind::Refused => ApiError::Unprocessable {
                        message: remote.message,
                        errors: remote.fields,
                    },
                    Kind::NotFound => ApiError::NotFound(remote.message),
                    Kind::Rejected => ApiError::RejectedByOwner(remote.message),
                    Kind::Conflict => ApiError::Conflict(remote.message),
                    Kind::Unavailable => ApiError::Moving(remote.message),
                    Kind::Internal => ApiError::Internal(remote.message),
                }
            }
        }
    }
}

/// The answer for a path no route serves.
pub(crate) async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {method} {}", uri.path()))
}

/// The answer for a method a route does not serve.
pub(crate) async fn method_not_allowed(method: Method) -> ApiError {
    ApiError::MethodNotAllowed(method)
}

#[cfg(test)]
mod tests {
    use super::{ApiError, bytes_in_words};

    #[test]
    fn limits_are_named_in_bytes_and_whole_units() {
        assert_eq!(bytes_in_words(65536), "65536 bytes (64 KiB)");
        assert_eq!(bytes_in_words(4 * 1024 * 1024), "4194304 bytes (4 MiB)");
        assert_eq!(bytes_in_words(1000), "1000 bytes");
        assert_eq!(
            ApiError::PayloadTooLarge(65536).to_string(),
            "the body is larger than 65536 bytes (64 KiB), the most this route reads"
        );
    }
}
