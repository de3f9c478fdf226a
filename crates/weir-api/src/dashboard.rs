//! The web dashboard: a few static files (plain HTML, CSS and JavaScript modules, no build step),
//! embedded in the binary and served at `/` (the page) and `/ui/{file}` (its assets). The page
//! talks only to the public REST API and its Server-Sent Events, so it shows exactly what the API
//! shows and can do only what the session's token may (docs/DASHBOARD.md).
//!
//! Every answer carries a strict Content-Security-Policy (`default-src 'self'`, no inline script
//! or style, no framing): the page renders names and messages that users wrote, and even if one
//! slipped past the page's escaping it could not run. The page's own routes (`/rollouts/NS/NAME`,
//! `/flags/NS/KEY`, ...) answer the same `index.html`, so a link or a reload lands on the right
//! page; anything else keeps the API's JSON 404.

use std::sync::OnceLock;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::error;

/// The policy every dashboard answer carries: only this origin's scripts, styles and
/// connections; inline SVG built by the scripts needs nothing more.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// The files, by the name under `/ui/`, with their content types.
const ASSETS: [(&str, &str, &[u8]); 12] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../dashboard/index.html"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("../dashboard/style.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../dashboard/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../dashboard/api.js"),
    ),
    (
        "ui.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../dashboard/ui.js"),
    ),
    (
        "schedule.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../dashboard/schedule.js"),
    ),
    (
        "plan.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../dashboard/plan.js"),
    ),
    (
        "rollouts.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../dashboard/rollouts.js"),
    ),
    (
        "flags.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../dashboard/flags.js"),
    ),
    (
        "flag_edit.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../dashboard/flag_edit.js"),
    ),
    (
        "flag_extras.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../dashboard/flag_extras.js"),
    ),
    (
        "tokens.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../dashboard/tokens.js"),
    ),
];

/// The first path segments of the page's own routes (each answers `index.html`).
const PAGES: [&str; 4] = ["rollouts", "flags", "tokens", "login"];

/// `GET /`: the page.
pub(crate) async fn index(headers: HeaderMap) -> Response {
    asset_named("index.html", &headers)
}

/// `GET /ui/{file}`: one of the page's assets; 404 (JSON, like the API) for anything else.
pub(crate) async fn asset(
    axum::extract::Path(file): axum::extract::Path<String>,
    headers: HeaderMap,
    method: Method,
    uri: Uri,
) -> Response {
    if ASSETS.iter().any(|(name, _, _)| *name == file) {
        asset_named(&file, &headers)
    } else {
        error::no_route(method, uri).await.into_response()
    }
}

/// Every route no handler took: the page for its own routes (GET), the API's JSON 404 otherwise
/// (so `/api/...`, `/ofrep/...` and typos keep answering as an API does).
pub(crate) async fn fallback(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let first = uri.path().trim_start_matches('/').split('/').next();
    let page = first.is_some_and(|segment| PAGES.contains(&segment));
    if page && (method == Method::GET || method == Method::HEAD) {
        asset_named("index.html", &headers)
    } else {
        error::no_route(method, uri).await.into_response()
    }
}

/// A validator per file, computed once: a hash of its bytes (FNV-1a; it only has to change when
/// the file does, i.e. with a new binary).
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|(_, _, bytes)| {
                let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                    (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
                });
                format!("\"{hash:016x}\"")
            })
            .collect()
    })
}

fn asset_named(file: &str, headers: &HeaderMap) -> Response {
    let Some(index) = ASSETS.iter().position(|(name, _, _)| *name == file) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let (_, content_type, bytes) = ASSETS[index];
    let etag = &etags()[index];
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.split(',').any(|tag| tag.trim() == etag));
    // `no-cache`: the browser keeps the file but asks every time (a cheap 304), so a new weir
    // binary's page is never mixed with an old one's modules.
    let common = [
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
    ];
    let etag_value = HeaderValue::from_str(etag).unwrap_or(HeaderValue::from_static("\"0\""));
    if fresh {
        return (
            StatusCode::NOT_MODIFIED,
            common,
            [(header::ETAG, etag_value)],
        )
            .into_response();
    }
    (
        common,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::ETAG, etag_value),
        ],
        bytes,
    )
        .into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_the_page_imports_is_served() {
        // The page's modules import each other by name; a file missing from ASSETS would be a
        // 404 only a browser notices.
        for (name, _, bytes) in ASSETS {
            let text = std::str::from_utf8(bytes).unwrap();
            for (position, _) in text.match_indices("/ui/") {
                let rest = &text[position + 4..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
                    .unwrap_or(rest.len());
                let imported = &rest[..end];
                if imported.is_empty() {
                    continue;
                }
                assert!(
                    ASSETS.iter().any(|(file, _, _)| *file == imported),
                    "{name} refers to /ui/{imported}, which is not served"
                );
            }
        }
    }

    #[test]
    fn no_asset_carries_inline_script_or_style() {
        let index = std::str::from_utf8(ASSETS[0].2).unwrap();
        assert!(!index.contains("<script>"), "inline script in index.html");
        assert!(!index.contains("style="), "inline style in index.html");
        assert!(!index.contains("<style"), "inline style in index.html");
    }

    /// A reload of any of the page's own routes must reach the page (and its login form) with no
    /// token: the access table has to agree with PAGES.
    #[test]
    fn the_page_and_its_routes_need_no_token() {
        let mut paths = vec!["/".to_string(), "/ui/app.js".to_string()];
        for page in PAGES {
            paths.push(format!("/{page}"));
        }
        paths.push("/rollouts/shop/checkout".into());
        paths.push("/flags/shop/banner".into());
        for path in paths {
            assert_eq!(
                crate::auth::access_of(&Method::GET, &path),
                crate::auth::Access::Public,
                "{path}"
            );
        }
    }
}
