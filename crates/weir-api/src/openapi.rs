//! The OpenAPI 3.1 document, served at `/api/v1/openapi.json`.
//!
//! Written by hand (`openapi.json` beside this file) rather than generated with utoipa, for two
//! reasons. utoipa 6's builder does not compile without its `macros` feature, and utoipa +
//! utoipa-gen add about 44 s to a clean build on the critical path of a 2-core machine (measured
//! with `cargo build --timings`: utoipa-gen 21 s, then utoipa 23 s) for a nine-operation API. And
//! weir-core's types do not derive `ToSchema` (weir-core stays free of API crates), so the
//! Rollout body would be a hand-written schema anyway; `docs/ROLLOUT.md` is its reference.
//! The tests keep the document honest: it parses as OpenAPI 3.x, every `$ref` resolves, every
//! route the router serves is in it, and every operation in it is served
//! (`tests/api.rs::openapi_lists_every_route`, and the unit tests in `openapi/tests.rs`).

use axum::http::header;
use axum::response::IntoResponse;

/// The OpenAPI document, as served.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// `GET /api/v1/openapi.json`
pub(crate) async fn serve() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI_JSON)
}

#[cfg(test)]
mod tests;
