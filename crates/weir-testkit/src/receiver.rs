//! A webhook receiver: an HTTP/1.1 server on `127.0.0.1:0` that records every request it gets
//! and answers as the test tells it (status, body, delay).

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// One request the receiver got, as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    /// The method (`POST`).
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The request headers.
    pub headers: HeaderMap,
    /// The body's exact bytes.
    pub body: Bytes,
    /// The body parsed as JSON (`Null` when it is not JSON).
    pub json: serde_json::Value,
}

impl Received {
    /// The value of header `name`, if present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

/// How the receiver answers one request.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: String,
    /// How long to wait before answering.
    pub delay: Duration,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
}

impl Reply {
    /// `status` with `body`, at once.
    pub fn new(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            body: body.into(),
            delay: Duration::ZERO,
            content_type: None,
        }
    }

    /// The same answer with a `Content-Type` header.
    pub fn typed(self, content_type: &str) -> Reply {
        Reply {
            content_type: Some(content_type.to_string()),
            ..self
        }
    }

    /// The same answer, sent only after `delay` (a slow receiver: the time is what is tested).
    pub fn after(self, delay: Duration) -> Reply {
        Reply { delay, ..self }
    }
}

type Behaviour = Arc<dyn Fn(usize, &Received) -> Reply + Send + Sync>;

/// A receiver serving on the current runtime until the runtime ends.
pub struct Receiver {
    address: SocketAddr,
    log: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    /// Answers request number `index` (0 for the first) with `behaviour(index, &request)`; the
    /// request is recorded before the answer is made.
    pub async fn start(
        behaviour: impl Fn(usize, &Received) -> Reply + Send + Sync + 'static,
    ) -> Receiver {
        let behaviour: Behaviour = Arc::new(behaviour);
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .unwrap();
        let address = listener.local_addr().unwrap();
        let log: Arc<Mutex<Vec<Received>>> = Arc::default();
        let shared = Arc::clone(&log);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = Arc::clone(&shared);
                let behaviour = Arc::clone(&behaviour);
                let service = service_fn(move |request: Request<Incoming>| {
                    let log = Arc::clone(&log);
                    let behaviour = Arc::clone(&behaviour);
                    async move {
                        let (parts, body) = request.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|collected| collected.to_bytes())
                            .unwrap_or_default();
                        let received = Received {
                            method: parts.method.to_string(),
                            path: parts.uri.path().to_string(),
                            headers: parts.headers,
                            json: serde_json::from_slice(&body).unwrap_or_default(),
                            body,
                        };
                        let index = {
                            let mut log = log.lock().unwrap();
                            log.push(received.clone());
                            log.len() - 1
                        };
                        let reply = behaviour(index, &received);
                        tokio::time::sleep(reply.delay).await;
                        let mut response = Response::new(Full::new(Bytes::from(reply.body)));
                        *response.status_mut() = StatusCode::from_u16(reply.status).unwrap();
                        if let Some(content_type) = &reply.content_type {
                            response.headers_mut().insert(
                                http::header::CONTENT_TYPE,
                                http::HeaderValue::from_str(content_type).unwrap(),
                            );
                        }
                        Ok::<_, Infallible>(response)
                    }
                });
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver { address, log }
    }

    /// Always answers `status` at once, with the body `answer N` (N: the request's index).
    pub async fn answering(status: u16) -> Receiver {
        Receiver::start(move |index, _| Reply::new(status, format!("answer {index}"))).await
    }

    /// The address it bound.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `http://ADDRESS` and `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Every request so far, in order of arrival.
    pub fn received(&self) -> Vec<Received> {
        self.log.lock().unwrap().clone()
    }

    /// The one request received so far; panics, listing them, unless there is exactly one.
    pub fn only(&self) -> Received {
        let received = self.received();
        assert_eq!(received.len(), 1, "{received:#?}");
        received.into_iter().next().unwrap()
    }
}
