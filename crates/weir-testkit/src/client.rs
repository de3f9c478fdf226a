//! HTTP from async tests: hyper's pooled client over loopback, HTTP/1.1 with keep-alive or h2c
//! with prior knowledge. (Blocking one-shot requests are in [`crate::http`].)

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::wait::DEADLINE;

/// The client every helper here takes.
pub type HttpClient = hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>;

/// An HTTP/1.1 client with a keep-alive pool.
pub fn http1_client() -> HttpClient {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .build_http()
}

/// An HTTP/2 client speaking h2c with prior knowledge.
pub fn http2_client() -> HttpClient {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// A whole answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status code.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
    /// The body, as text (invalid UTF-8 replaced).
    pub body: String,
}

impl Answer {
    /// The value of header `name`, if present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The body as JSON: `Null` when empty; panics, showing the body, when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        if self.body.is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.body))
    }
}

/// Sends `request` and reads the whole answer. An error (connection refused, reset, or no
/// answer within [`DEADLINE`]) is returned, not raised: load tests count them.
pub async fn send(client: &HttpClient, request: Request<Full<Bytes>>) -> Result<Answer, String> {
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|error| format!("{error:?}"))?;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|error| format!("{error:?}"))?
            .to_bytes();
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    tokio::time::timeout(DEADLINE, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {DEADLINE:?}")))
}

/// `method url` with `headers` and `body`; panics when no answer comes.
pub async fn request(
    client: &HttpClient,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Answer {
    let mut builder = Request::builder().method(method.clone()).uri(url);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(Full::new(body.into())).unwrap();
    send(client, request)
        .await
        .unwrap_or_else(|error| panic!("{method} {url}: {error}"))
}

/// `GET http://address{path}` with `headers`; panics when no answer comes.
pub async fn get(
    client: &HttpClient,
    address: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    request(
        client,
        Method::GET,
        &format!("http://{address}{path}"),
        headers,
        Bytes::new(),
    )
    .await
}
