//! Host and Origin checks: the API answers only requests addressed to it by a name it was told
//! about, and takes changes only from pages of its own origin.
//!
//! A web page can make a browser send requests to `http://127.0.0.1:7979` - to `weir serve` on
//! the reader's own machine. Cross-site, the browser will not let it send JSON (a preflight
//! weir never answers), but with *DNS rebinding* the page's own name (`evil.example`) is made to
//! resolve to 127.0.0.1, and its requests become same-origin: the browser sends anything, and
//! reads the answers. Every such request carries `Host: evil.example`, so refusing Hosts weir
//! does not answer to closes it. A page on another origin can still send simple cross-site
//! requests (forms); those carry an `Origin` header naming that page, so a change whose
//! `Origin` is not weir's own is refused (CSRF). The rules, for users, are in docs/SECURITY.md
//! ("Host and Origin checks"):
//!
//! - Admitted `Host` values (any port): `localhost`, any loopback address (`127.0.0.1`,
//!   `[::1]`), the names given with `--public-name`, and the listen address itself; when
//!   listening on every interface (`0.0.0.0`, `::`), any IP address (a rebinding attack needs a
//!   name). `--public-name '*'` admits any Host (and gives up this defence). Subdomains of
//!   `localhost` are not admitted (not every resolver keeps them on loopback).
//! - A request without a `Host` (HTTP/1.0) is refused on a loopback listener (a browser always
//!   sends one, so elsewhere it cannot be a rebinding attack).
//! - `POST`, `PUT`, `PATCH` and `DELETE` with an `Origin` header are refused unless the Origin is
//!   the request's own (`scheme://` + its `Host`) or names a `--public-name`; `Origin: null` is
//!   refused. Requests without `Origin` (curl, weir's CLI, SDKs outside browsers) are not
//!   affected. OFREP evaluations are exempt: they are reads, and OpenFeature's browser SDKs send
//!   them cross-origin.
//!
//! The refusals come before routing and before any handler or extractor, so nothing is read or
//! changed: 421 Misdirected Request (code `misdirected`) for a Host, 403 (code `forbidden`) for
//! an Origin, each naming what was refused and the setting that admits it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, header, uri::Authority};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Where users read about these checks; every refusal points there.
const DOC: &str = "docs/SECURITY.md, \"Host and Origin checks\"";

/// Which `Host` and `Origin` values a server admits (see the module documentation).
#[derive(Debug, Clone)]
pub struct HostPolicy {
    listen: SocketAddr,
    /// `--public-name` values, lower case.
    names: Vec<String>,
    /// `--public-name '*'`: any Host.
    any_name: bool,
    /// The command line that sets `--public-name` (`weir serve`, `weir run`), for messages.
    command: &'static str,
}

impl HostPolicy {
    /// The policy of a server bound to `listen` (the address actually bound) that was given
    /// `public_names` (`*` admits any Host); `command` is how the user started it (`weir
    /// serve`), named in refusals. A name that is not a host name is an error.
    pub fn new(
        listen: SocketAddr,
        public_names: &[String],
        command: &'static str,
    ) -> Result<HostPolicy, String> {
        let mut names = Vec::new();
        let mut any_name = false;
        for name in public_names {
            if name == "*" {
                any_name = true;
                continue;
            }
            let normalized = name.trim().trim_end_matches('.').to_ascii_lowercase();
            let bare = normalized.trim_start_matches('[').trim_end_matches(']');
            let valid = bare.parse::<IpAddr>().is_ok()
                || (!bare.is_empty()
                    && bare.split('.').all(|label| {
                        !label.is_empty()
                            && label
                                .bytes()
                                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
                    }));
            if !valid {
                return Err(format!(
                    "--public-name {name:?}: give a host name (weir.example.com) or an IP address, without scheme or port; `*` admits any"
                ));
            }
            names.push(bare.to_string());
        }
        Ok(HostPolicy {
            listen,
            names,
            any_name,
            command,
        })
    }

    /// Whether every Host is admitted (`--public-name '*'`): the server should say so when it
    /// starts, since it gives up the defence against DNS rebinding.
    pub fn admits_any_host(&self) -> bool {
        self.any_name
    }

    /// `router` with the checks in front of every route (and of the fallbacks).
    pub fn apply(self, router: Router) -> Router {
        router.layer(axum::middleware::from_fn_with_state(Arc::new(self), check))
    }

    fn listens_on_loopback(&self) -> bool {
        self.listen.ip().to_canonical().is_loopback()
    }

    /// Whether `host` (a Host header's host part, without port) is one this server answers to.
    fn admits(&self, host: &str) -> bool {
        let host = bare(host);
        if self.any_name || host == "localhost" || self.names.contains(&host) {
            return true;
        }
        let Ok(ip) = host.parse::<IpAddr>() else {
            return false;
        };
        let ip = ip.to_canonical();
        let listen = self.listen.ip().to_canonical();
        ip.is_loopback() || ip == listen || listen.is_unspecified()
    }

    /// Why `host` is refused, naming the setting that would admit it.
    fn misdirected(&self, shown: &str, host: &str) -> ApiError {
        let names = if self.names.is_empty() {
            String::new()
        } else {
            format!(" and {}", self.names.join(", "))
        };
        ApiError::Misdirected(format!(
            "this server does not answer to Host {shown:?}: it listens on {} and answers to localhost, loopback addresses{names}; a web page on another name could otherwise reach it (DNS rebinding). If {host:?} is this server's name, start {} with --public-name {host} (see {DOC})",
            self.listen, self.command
        ))
    }
}

fn bare(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// Whether `path` is an OFREP evaluation (`/ofrep/v1/evaluate/...`, also under
/// `/ns/{namespace}`): a read that browsers send cross-origin.
fn is_ofrep_evaluation(path: &str) -> bool {
    let rest = match path.strip_prefix("/ns/") {
        Some(namespaced) => match namespaced.find('/') {
            Some(end) => &namespaced[end..],
            None => return false,
        },
        None => path,
    };
    rest == "/ofrep/v1/evaluate/flags" || rest.starts_with("/ofrep/v1/evaluate/flags/")
}

/// The default port of an origin's scheme.
fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

async fn check(State(policy): State<Arc<HostPolicy>>, request: Request, next: Next) -> Response {
    match verdict(&policy, &request) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// `Ok` when the request may go on; the refusal otherwise.
fn verdict(policy: &HostPolicy, request: &Request) -> Result<(), ApiError> {
    let host_header = request.headers().get(header::HOST);
    let authority: Option<Authority> = match host_header {
        Some(value) => {
            let text = value.to_str().unwrap_or_default();
            match text.parse::<Authority>() {
                Ok(authority) => Some(authority),
                Err(_) => {
                    return Err(ApiError::Misdirected(format!(
                        "the Host header {text:?} is not HOST[:PORT] (see {DOC})"
                    )));
                }
            }
        }
        // HTTP/2 and absolute-form requests carry it in the URI.
        None => request.uri().authority().cloned(),
    };
    let Some(authority) = authority else {
        if policy.listens_on_loopback() {
            return Err(ApiError::Misdirected(format!(
                "the request has no Host header (HTTP/1.0?); this server listens on loopback ({}) and answers only requests that name it, e.g. Host: localhost (see {DOC})",
                policy.listen
            )));
        }
        return Ok(());
    };
    if !policy.admits(authority.host()) {
        return Err(policy.misdirected(authority.as_str(), &bare(authority.host())));
    }
    // An absolute-form URI's authority must be admitted too (hyper does not insist it equals
    // the Host header).
    if let Some(uri_authority) = request.uri().authority()
        && !policy.admits(uri_authority.host())
    {
        return Err(policy.misdirected(uri_authority.as_str(), &bare(uri_authority.host())));
    }
    let changes = matches!(
        *request.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    if !changes || is_ofrep_evaluation(request.uri().path()) {
        return Ok(());
    }
    let Some(origin) = request.headers().get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or_default();
    if same_origin(policy, origin, &authority) {
        return Ok(());
    }
    let origin_host = origin
        .split_once("://")
        .and_then(|(_, rest)| rest.parse::<Authority>().ok())
        .map_or_else(|| "NAME".to_string(), |parsed| bare(parsed.host()));
    Err(ApiError::Forbidden(format!(
        "{} refused: it comes from a web page at Origin {origin:?}, not from this server's own origin (Host {:?}), and a page on another site may not change weir (CSRF). Requests without an Origin header (curl, weir's command line) are not affected; if that page is served under this server's name, start {} with --public-name {origin_host} (see {DOC})",
        request.method(),
        authority.as_str(),
        policy.command
    )))
}

/// Whether `origin` is the request's own origin (scheme, Host and port) or names a public name.
fn same_origin(policy: &HostPolicy, origin: &str, host: &Authority) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false; // `null`, or not an origin
    };
    let scheme = scheme.to_ascii_lowercase();
    let Ok(origin) = rest.parse::<Authority>() else {
        return false;
    };
    let origin_host = bare(origin.host());
    if policy.names.contains(&origin_host) {
        return true;
    }
    let Some(default) = default_port(&scheme) else {
        return false;
    };
    origin_host == bare(host.host())
        && origin.port_u16().unwrap_or(default) == host.port_u16().unwrap_or(default)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
