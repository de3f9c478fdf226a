//! A small HTTP/1.1 client for health checks, webhooks, notifications and metric queries: plain
//! http, or https verified against the Mozilla root certificates (webpki-roots) with rustls.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A cloneable client with a connection pool.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Default for HttpClient {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        connector.set_nodelay(true);
        // The HTTP connector refuses https:// unless told otherwise; rustls wraps it.
        connector.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config())
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        HttpClient {
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector),
        }
    }
}

/// TLS with ring and the Mozilla roots, chosen explicitly so no process-wide crypto provider has
/// to be installed first.
#[expect(
    clippy::expect_used,
    reason = "ring supports rustls's default protocol versions; this cannot fail"
)]
fn tls_config() -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        })
        .with_no_client_auth()
}

/// A response: status and (bounded) body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status code.
    pub status: StatusCode,
    /// The first 64 KiB of the body.
    pub body: Bytes,
}

const MAX_BODY: usize = 64 * 1024;

impl HttpClient {
    /// `GET url` with a timeout.
    pub async fn get(&self, url: &str, timeout: Duration) -> Result<Answer, String> {
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
    ) -> Result<Answer, String> {
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
    ) -> Result<Answer, String> {
        let mut request = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            request = request.header(name.as_ref(), value);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|error| format!("{url}: invalid request: {error}"))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|error| format!("{url}: {error}"))?;
            let status = response.status();
            let limited = http_body_util::Limited::new(response.into_body(), MAX_BODY);
            let body = match limited.collect().await {
                Ok(collected) => collected.to_bytes(),
                // An oversized or broken body still has its status.
                Err(_) => Bytes::new(),
            };
            Ok(Answer { status, body })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(format!("{url}: no answer within {timeout:?}")),
        }
    }
}
