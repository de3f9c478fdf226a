//! A small HTTP/1.1 client for health checks, webhooks, notifications and metric queries: plain
//! http, or https verified against the Mozilla root certificates (webpki-roots) with rustls;
//! optionally under an [`OutboundPolicy`], checked on every new connection.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tower_service::Service;

use crate::policy::{OutboundPolicy, Refusal};
use crate::tls::Roots;

/// A cloneable client with a connection pool.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpsConnector<GuardedConnector>, Full<Bytes>>,
    policy: Option<Arc<OutboundPolicy>>,
    /// The most of a body read ([`MAX_BODY`] unless [`HttpClient::reading_up_to`]).
    max_body: usize,
}

impl Default for HttpClient {
    /// A client that connects anywhere (the command line's, and tests').
    fn default() -> Self {
        HttpClient::build(None, &Roots::Mozilla)
    }
}

impl HttpClient {
    /// A client that opens connections only where `policy` allows: a name is resolved here and
    /// each address it resolved to is checked, then the connection goes to an allowed address
    /// itself, so what was checked is what is reached.
    pub fn with_policy(policy: Arc<OutboundPolicy>) -> Self {
        HttpClient::build(Some(policy), &Roots::Mozilla)
    }

    /// A client that connects anywhere and verifies https servers against `roots` (the
    /// command line's: the host's trust store, or only the CA given with `--ca`).
    pub fn trusting(roots: &Roots) -> Self {
        HttpClient::build(None, roots)
    }

    /// This client, reading bodies of up to `bytes` instead of 64 KiB (the command line's, which
    /// reads whole answers of weir's API). A larger body is not read: the answer has its status,
    /// an empty body and [`Answer::oversized`].
    pub fn reading_up_to(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// The policy this client connects under, if any (adapters check URLs with it when a
    /// rollout is applied).
    pub fn policy(&self) -> Option<&Arc<OutboundPolicy>> {
        self.policy.as_ref()
    }

    fn build(policy: Option<Arc<OutboundPolicy>>, roots: &Roots) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        connector.set_nodelay(true);
        // The HTTP connector refuses https:// unless told otherwise; rustls wraps it.
        connector.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(roots))
            .https_or_http()
            .enable_http1()
            .wrap_connector(GuardedConnector {
                inner: connector,
                policy: policy.clone(),
            });
        HttpClient {
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector),
            policy,
            max_body: MAX_BODY,
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The TCP connector under TLS: without a policy, hyper's own; with one, it resolves the name,
/// keeps the addresses the policy allows and has hyper's connector open a connection to one of
/// them by address. TLS (outside it) still verifies the certificate against the URL's name.
#[derive(Clone)]
struct GuardedConnector {
    inner: HttpConnector,
    policy: Option<Arc<OutboundPolicy>>,
}

impl Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let mut inner = self.inner.clone();
        let Some(policy) = self.policy.clone() else {
            return Box::pin(async move { inner.call(uri).await.map_err(Into::into) });
        };
        Box::pin(async move {
            let host = uri.host().ok_or("the URL has no host")?.to_string();
            let port = uri
                .port_u16()
                .unwrap_or(if uri.scheme_str() == Some("https") {
                    443
                } else {
                    80
                });
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let resolved: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
                Ok(ip) => vec![SocketAddr::new(ip, port)],
                Err(_) => tokio::net::lookup_host((bare, port))
                    .await
                    .map_err(|error| format!("cannot resolve {bare}: {error}"))?
                    .collect(),
            };
            let mut refused: Option<Refusal> = None;
            let mut last_error: Option<BoxError> = None;
            for address in resolved {
                if let Err(refusal) = policy.check(Some(bare), address) {
                    refused.get_or_insert(refusal);
                    continue;
                }
                let by_address: Uri = format!("http://{address}/").parse()?;
                match inner.call(by_address).await {
                    Ok(stream) => return Ok(stream),
                    Err(error) => last_error = Some(error.into()),
                }
            }
            match (last_error, refused) {
                (Some(error), _) => Err(error),
                (None, Some(refusal)) => Err(refusal.into()),
                (None, None) => Err(format!("{bare} resolved to no address").into()),
            }
        })
    }
}

/// TLS with weir's one crypto provider ([`crate::tls::provider`]) and `roots`; the server's
/// name (or IP address) is verified against its certificate.
#[expect(
    clippy::expect_used,
    reason = "ring supports rustls's default protocol versions; this cannot fail"
)]
fn tls_config(roots: &Roots) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots.store())
        .with_no_client_auth()
}

/// A response: status and (bounded) body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status code.
    pub status: StatusCode,
    /// The response headers (e.g. `Retry-After`).
    pub headers: http::HeaderMap,
    /// The body, when it is at most the client's limit (64 KiB unless
    /// [`HttpClient::reading_up_to`]); empty otherwise, or when it broke off.
    pub body: Bytes,
    /// The body was larger than the client's limit (and `body` is empty).
    pub oversized: bool,
}

const MAX_BODY: usize = 64 * 1024;

impl HttpClient {
    /// `GET url` with a timeout.
    pub async fn get(&self, url: &str, timeout: Duration) -> Result<Answer, HttpError> {
        self.request::<&str>(Method::GET, url, Vec::new(), Bytes::new(), timeout)
            .await
    }

    /// `POST url` with a JSON body and extra headers, with a timeout.
    pub async fn post_json(
        &self,
        url: &str,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Answer, HttpError> {
        let mut all = vec![(
            header::CONTENT_TYPE.as_str(),
            "application/json".to_string(),
        )];
        all.extend(headers);
        self.request(Method::POST, url, all, Bytes::from(body), timeout)
            .await
    }

    /// Any request: method, URL, headers, body, with a timeout.
    pub async fn request<Name: AsRef<str>>(
        &self,
        method: Method,
        url: &str,
        headers: Vec<(Name, String)>,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Answer, HttpError> {
        let mut request = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            request = request.header(name.as_ref(), value);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|error| HttpError::other(format!("{url}: invalid request: {error}")))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|error| HttpError::of(url, &error))?;
            let status = response.status();
            let headers = response.headers().clone();
            let limited = http_body_util::Limited::new(response.into_body(), self.max_body);
            let (body, oversized) = match limited.collect().await {
                Ok(collected) => (collected.to_bytes(), false),
                // An oversized or broken body still has its status.
                Err(error) => (Bytes::new(), error.is::<http_body_util::LengthLimitError>()),
            };
            Ok(Answer {
                status,
                headers,
                body,
                oversized,
            })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(HttpError::other(format!(
                "{url}: no answer within {timeout:?}"
            ))),
        }
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    message: String,
    refused: bool,
    certificate: bool,
}

impl HttpError {
    fn other(message: String) -> HttpError {
        HttpError {
            message,
            refused: false,
            certificate: false,
        }
    }

    /// The error of a request to `url`: the outbound policy's refusal when that is what it was
    /// (found anywhere in the chain of causes), otherwise every cause in one line (hyper's own
    /// message alone, "client error (Connect)", says too little).
    fn of(url: &str, error: &(dyn std::error::Error + 'static)) -> HttpError {
        let mut causes = Vec::new();
        let mut next = Some(error);
        while let Some(cause) = next {
            if let Some(refusal) = cause.downcast_ref::<Refusal>() {
                return HttpError {
                    message: format!("{url}: not sent: {refusal}"),
                    refused: true,
                    certificate: false,
                };
            }
            causes.push(cause.to_string());
            next = cause.source();
        }
        if let Some(problem) = crate::tls::certificate_problem(error) {
            return HttpError {
                message: format!("{url}: the server's TLS certificate was not accepted: {problem}"),
                refused: false,
                certificate: true,
            };
        }
        HttpError::other(format!("{url}: {}", causes.join(": ")))
    }

    /// Whether the outbound policy refused the destination: trying again cannot help.
    pub fn is_refused(&self) -> bool {
        self.refused
    }

    /// Whether the server's TLS certificate was not accepted (an unknown issuer, another name,
    /// expired): trusting its CA (`--ca`) may help, trying again cannot.
    pub fn is_certificate(&self) -> bool {
        self.certificate
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HttpError {}
