//! Test doubles of the hosted metric services whose requests are signed or exchanged for
//! tokens, each an HTTP/1.1 server on `127.0.0.1:0` on a thread of its own, like
//! [`crate::metric_doubles`] (whose [`Fault`] and [`Seen`] they share). They follow each
//! service's documented API and refuse what the service refuses.
//!
//! - [`CloudDouble::cloudwatch`]: CloudWatch's `GetMetricData` in the awsQuery protocol,
//!   `POST /` with a form body (`Action=GetMetricData&Version=2010-08-01&...`), answered in
//!   XML. Every request's AWS Signature Version 4 is **recomputed** from what arrived (method,
//!   path, query, the headers named in `SignedHeaders`, the body's SHA-256) with the double's
//!   secret, by this module's own implementation of the documented algorithm (SHA-256 and
//!   HMAC from `sha2`/`hmac`, not the client's code), and compared: a mismatch is `403
//!   SignatureDoesNotMatch`, an unknown key `403 InvalidClientTokenId`, no `Authorization`
//!   `403 MissingAuthenticationToken`, a scope for another region or service or a date more
//!   than 15 minutes off `403 SignatureDoesNotMatch` with AWS's words, as CloudWatch answers.
//!   Throttling is CloudWatch's `400 Throttling` ("Rate exceeded", no `Retry-After`); an
//!   outage `503 ServiceUnavailable`. [`CloudDouble::accept`] adds credentials it accepts
//!   (temporary ones from [`crate::metric_doubles_identity`]'s STS or instance metadata).
//! - [`CloudDouble::influxdb`]: InfluxDB v2's `POST /api/v2/query?org=` with `Authorization:
//!   Token <token>` and a JSON body (`query`, `type: flux`, `dialect`), answering annotated CSV
//!   (CRLF lines, `#datatype`/`#group`/`#default`, a header row) as InfluxDB documents it; a
//!   `count()` query answers a `long`. A missing or wrong token: `401 {"code":"unauthorized",
//!   "message":"unauthorized access"}`; no org: `400`; an unknown org: `404`; a body that is
//!   not a Flux query: `400 {"code":"invalid",...}`; rate limit: `429` with `Retry-After`.
//!   The Debian `influxdb` package on this machine is 1.6, without `/api/v2/query` or Flux, so
//!   this double stands in for a real server.
//! - [`CloudDouble::dynatrace`]: the Metrics API v2, `GET /api/v2/metrics/query?metricSelector=
//!   &resolution=&from=&to=` (times in ms) with `Authorization: Api-Token <token>`, answering
//!   one series per result. No or a wrong token: `401 {"error":{"code":401,"message":...}}`;
//!   no `metricSelector`: `400 Constraints violated.`; rate limit: `429` with `Retry-After`
//!   and `X-RateLimit-Reset` (a Unix time in microseconds, as Dynatrace sends it).
//! - [`CloudDouble::stackdriver`]: Google's OAuth 2.0 token endpoint (`POST /token`, the JWT
//!   bearer grant: the assertion's RS256 signature is verified with the service account's
//!   public key, and its `iss`, `aud`, `scope`, `iat` and `exp` checked; refusals are
//!   `400 {"error":"invalid_grant","error_description":...}`) and Cloud Monitoring's
//!   `POST /v3/projects/{project}/timeSeries:query` (`{"query": <MQL>}`, a token it issued as
//!   `Bearer`, else `401 UNAUTHENTICATED`; another project `403 PERMISSION_DENIED`; a query
//!   that is not MQL `400 INVALID_ARGUMENT`). Faults apply to the query, not to the token.
//!   [`CloudDouble::service_account_key`] is the JSON key to put in the Secret;
//!   [`CloudDouble::accept_token`] trusts a token another issuer gave (the GCE metadata server).
//! - [`CloudDouble::splunk`]: Splunk Observability's `POST /v2/signalflow/execute?start=&stop=
//!   &immediate=true` with `X-SF-Token` and the SignalFlow program as `text/plain`, answering
//!   Server-Sent Events (`control-message` STREAM_START/JOB_START, `metadata`, `data`
//!   `[{tsId, value}]`, END_OF_CHANNEL) and ending the stream. A missing or wrong token: `401
//!   {"code":401,"message":"Unauthorized"}`; a program that publishes nothing: an `error` event.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};

pub use crate::metric_doubles::{Fault, Seen};

/// Which service a double plays, with the credentials it accepts.
#[derive(Debug, Clone)]
enum Service {
    CloudWatch {
        region: String,
        access_key: String,
        secret_key: String,
        session_token: Option<String>,
        /// Other credentials accepted ([`CloudDouble::accept`]): key id, secret, session token.
        also: Vec<(String, String, Option<String>)>,
    },
    InfluxDb {
        org: String,
        token: String,
    },
    Dynatrace {
        token: String,
    },
    Stackdriver {
        project: String,
        issued: Vec<String>,
    },
    Splunk {
        token: String,
    },
}

/// A 2048-bit RSA key made for these tests only (PKCS#8 PEM), as a service account's.
pub const TEST_SERVICE_ACCOUNT_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQCMZOZQEc/ZfXuz\nK6SroLfCmaI5TrXM02s7xsFppjFBkAUxUH7rR9aO048SGRcJI9S3jEQfsMdSqqZ5\nh2v7OpULS84uBkkyjPZ0qg/DR1U5xCfknqMCFUYbrlsZWCujvr/Epi/ReCdzzM2s\nDyhYuuHUF4hk9OyF3OGoobJ8kFm9fb1RiUrGwHGwE++WUfxbsUTLnRuGxwkJ7gj4\ns649qSWV6Q+iHP3YzDh11fdTl2YQ8uvWhkoC9KB5vSUjoQm/GeQ0okTiZHZi7cuE\nJwKuwLqCuSXYb2RFUN3gA33RYk+wbb1Xi+Waaf+0ZIe/N4FqgAJNPZl6Ktu6MqDU\nFMxzovC5AgMBAAECggEAJQ5Uw/mPlOZMCiSQ2EQZfKG0cc/WqHN9ME/rqQkWoyly\nVWvbtBpIBXbNoodAz0bH1JKPQJYWZjloq1cVJ0B1KoAdsYQzOcZ/HpfshSyE0DR4\nGx3MBLa8xH2mye+9xQCJ+Uur/2vpbeU2vB1cFt9sz+BOPedvrn14ilvzknE/XoY3\nlMN6PU5idPOWqWZ1e8P4RlhFpoI5E6oZgP3/j85WeedBtKmJnhfJgd+UeQ7RxzDQ\nScDqpWMWv7/CqSmL+uzob7QRcA5IiHXWc21WH+Bj4zhM0GV+cLo4Gc0M0ioV8H5F\nGhXioZyqbFvk0X3m5+U2fLSjkgbTjp1AvIHQhDlKKQKBgQDFEyB9qrw2zSBVTPDm\n/63RiPRWxEkQzz+RGnGZ6KLLIGqos4x/B6UQ3ElRh0obN8xiXxj40NqqCLdC1AMu\n4k5gOyC39lbjaPTXIRlJM2yfCrtUeGozCysoGaIBE6qq3jbvYKpy3wvKuQgwoTyR\nh0z09f8vtAuvpO/a3BLy7IbZZwKBgQC2XzgB7oORS5UonNTNOU1bmzX0diEJGiok\n8iBUHtS2RVco7HHMGtzeHGtQdI1NXS6YdvcX+guTXKbG6yApWfwYuqkMSKv6acqP\nUWLjDNQgJq5JD/NzQj9jugz5NzT+Qpj9YFsta0Ej8okbGY8xCZZZtPduYahW1P1n\nQZTpNu3w3wKBgFjxevZ8ehmZloApC4iV2FL7JpuKVxeZEa1ha+f0kJRwevLMphom\nzx6+7PA4yP9jvYCgPtr9F9Mpv9wPZ6hfRtQzm16rdSeJlQcKzyi0Zs+YvlcvSW7k\nGYQtnWozABHB3LVIwWS6uc2ymLmp63YaxGbCJ3vWHHgXTpFORdcRXQL9AoGBAIP4\nma4ELJ8648BU5UVxPwKYac3yoetVTMQZlr1o5iLUQMNzftHlaoksZZf+D7a5RJu+\nEwb9wdysgl+WDFsALAa1JNmnyRPX9GYLzhRh1ytA8oQaj+CLQxXmr7a0dZu9E7rf\nPHu8jpH107ORpmYk+vEFnLv63Xegf5N2CM1PG5ZfAoGBAJ3bUDd4E3v7LrH83j+f\nKa9pylBM4ZKrFNi4zSlDmaAB8sUXiR6XFKRwjAfp6mOyCrXBip4LoAEMklbbJivy\naMy4aG9vnI0RUjdXN/Pm+uIldis/CECSmTXN36V5ZlDkirRV2YkLL40cJCdLGBTW\nAB6vfzGErTx1oTZ+uVLfQH4l\n-----END PRIVATE KEY-----\n";

/// The test service account's e-mail.
pub const TEST_SERVICE_ACCOUNT: &str = "weir-canary@weir-test.iam.gserviceaccount.com";

struct State {
    service: Service,
    value: Option<f64>,
    faults: VecDeque<Fault>,
    seen: Vec<Seen>,
}

/// A running double; stops when dropped.
pub struct CloudDouble {
    address: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl CloudDouble {
    /// CloudWatch in `region`, accepting requests signed with this key pair (and this session
    /// token, when given: then a request without it is refused).
    pub fn cloudwatch(
        region: &str,
        access_key: &str,
        secret_key: &str,
        session_token: Option<&str>,
    ) -> CloudDouble {
        CloudDouble::start(Service::CloudWatch {
            region: region.into(),
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            session_token: session_token.map(str::to_string),
            also: Vec::new(),
        })
    }

    /// The CloudWatch double accepts requests signed with this key pair too (and this session
    /// token, when given), as AWS accepts any valid credentials of the account: temporary
    /// ones issued by STS or instance metadata.
    pub fn accept(&self, access_key: &str, secret_key: &str, session_token: Option<&str>) {
        if let Service::CloudWatch { also, .. } = &mut self.state.lock().unwrap().service {
            also.push((
                access_key.into(),
                secret_key.into(),
                session_token.map(str::to_string),
            ));
        }
    }

    /// The Stackdriver double's Cloud Monitoring accepts `token` as if its token endpoint had
    /// issued it (a token from another issuer, e.g. the GCE metadata server).
    pub fn accept_token(&self, token: &str) {
        if let Service::Stackdriver { issued, .. } = &mut self.state.lock().unwrap().service {
            issued.push(token.into());
        }
    }

    /// InfluxDB v2 with organization `org`, accepting `token`.
    pub fn influxdb(org: &str, token: &str) -> CloudDouble {
        CloudDouble::start(Service::InfluxDb {
            org: org.into(),
            token: token.into(),
        })
    }

    /// A Dynatrace environment accepting API token `token`.
    pub fn dynatrace(token: &str) -> CloudDouble {
        CloudDouble::start(Service::Dynatrace {
            token: token.into(),
        })
    }

    /// Google's token endpoint and Cloud Monitoring for `project`, trusting
    /// [`TEST_SERVICE_ACCOUNT`] with the key [`TEST_SERVICE_ACCOUNT_PEM`].
    pub fn stackdriver(project: &str) -> CloudDouble {
        CloudDouble::start(Service::Stackdriver {
            project: project.into(),
            issued: Vec::new(),
        })
    }

    /// Splunk Observability's SignalFlow API accepting access token `token`.
    pub fn splunk(token: &str) -> CloudDouble {
        CloudDouble::start(Service::Splunk {
            token: token.into(),
        })
    }

    /// Revokes every access token the Stackdriver double issued: the next query with one is
    /// `401 UNAUTHENTICATED`, as after a token's revocation.
    pub fn revoke_tokens(&self) {
        if let Service::Stackdriver { issued, .. } = &mut self.state.lock().unwrap().service {
            issued.clear();
        }
    }

    /// A service account's JSON key for this double (its `token_uri` here), as Google's
    /// console downloads it.
    pub fn service_account_key(&self) -> String {
        serde_json::json!({
            "type": "service_account",
            "project_id": "weir-test",
            "private_key_id": "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
            "private_key": TEST_SERVICE_ACCOUNT_PEM,
            "client_email": TEST_SERVICE_ACCOUNT,
            "client_id": "104242424242424242424",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": format!("{}/token", self.url()),
        })
        .to_string()
    }

    fn start(service: Service) -> CloudDouble {
        let state = Arc::new(Mutex::new(State {
            service,
            value: None,
            faults: VecDeque::new(),
            seen: Vec::new(),
        }));
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                    .await
                    .unwrap();
                bound_tx.send(listener.local_addr().unwrap()).unwrap();
                let accept = async {
                    while let Ok((stream, _)) = listener.accept().await {
                        let state = Arc::clone(&shared);
                        let service = service_fn(move |request: Request<Incoming>| {
                            let state = Arc::clone(&state);
                            async move { Ok::<_, Infallible>(answer(&state, request).await) }
                        });
                        tokio::spawn(async move {
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
        });
        let address = bound_rx.recv().unwrap();
        CloudDouble {
            address,
            state,
            stop: Some(stop),
        }
    }

    /// `http://ADDRESS`: a template's `provider.address`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Serves `value` from now on (`None`: no data: a result without values).
    pub fn serve(&self, value: Option<f64>) {
        self.state.lock().unwrap().value = value;
    }

    /// Answers the next request with `fault` (queued after earlier ones).
    pub fn fail_next(&self, fault: Fault) {
        self.state.lock().unwrap().faults.push_back(fault);
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }
}

impl Drop for CloudDouble {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct Received<'a> {
    method: &'a str,
    path: &'a str,
    query: &'a str,
    headers: &'a HeaderMap,
    body: &'a [u8],
}

async fn answer(state: &Mutex<State>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|body| body.to_bytes())
        .unwrap_or_default();
    let (service, value, fault) = {
        let mut state = state.lock().unwrap();
        let token_request =
            matches!(state.service, Service::Stackdriver { .. }) && parts.uri.path() == "/token";
        let fault = if token_request {
            None
        } else {
            state.faults.pop_front()
        };
        (state.service.clone(), state.value, fault)
    };
    let received = Received {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or_default(),
        headers: &parts.headers,
        body: &body,
    };
    let mut response = match fault {
        Some(Fault::RateLimited(seconds)) => rate_limited(&service, seconds),
        Some(Fault::Unavailable) => unavailable(&service),
        Some(Fault::Slow(delay)) => {
            tokio::time::sleep(delay).await;
            normal(&service, value, &received)
        }
        None => normal(&service, value, &received),
    };
    if let (Service::Stackdriver { .. }, Some(token)) =
        (&service, response.headers_mut().remove("x-issued-token"))
    {
        // The token endpoint's grant: remembered for the query endpoint.
        if let (Service::Stackdriver { issued, .. }, Ok(token)) =
            (&mut state.lock().unwrap().service, token.to_str())
        {
            issued.push(token.to_string());
        }
    }
    let query: BTreeMap<String, String> = form_urlencoded::parse(received.query.as_bytes())
        .into_owned()
        .collect();
    state.lock().unwrap().seen.push(Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query,
        headers: parts.headers.clone(),
        body: String::from_utf8_lossy(&body).into_owned(),
        status: response.status().as_u16(),
    });
    response
}

fn xml_response(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/xml"),
    );
    response.headers_mut().insert(
        "x-amzn-requestid",
        http::HeaderValue::from_static(REQUEST_ID),
    );
    response
}

const REQUEST_ID: &str = "c7e2bb3a-7c5c-4a4e-9f1e-5e0f8a3b2d11";

/// CloudWatch's (awsQuery) error answer.
fn aws_error(status: StatusCode, kind: &str, code: &str, message: &str) -> Response<Full<Bytes>> {
    let message = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    xml_response(
        status,
        format!(
            "<ErrorResponse xmlns=\"http://monitoring.amazonaws.com/doc/2010-08-01/\">\n  <Error>\n    <Type>{kind}</Type>\n    <Code>{code}</Code>\n    <Message>{message}</Message>\n  </Error>\n  <RequestId>{REQUEST_ID}</RequestId>\n</ErrorResponse>\n"
        ),
    )
}

fn influx_error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(
        serde_json::json!({"code": code, "message": message}).to_string(),
    )));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json; charset=utf-8"),
    );
    response
}

fn dynatrace_error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(
        serde_json::json!({"error": {"code": status.as_u16(), "message": message}}).to_string(),
    )));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json;charset=utf-8"),
    );
    response
}

fn google_error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(
        serde_json::json!({"error": {"code": status.as_u16(), "message": message, "status": code}})
            .to_string(),
    )));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    response
}

fn splunk_error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(
        serde_json::json!({"code": status.as_u16(), "message": message}).to_string(),
    )));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn rate_limited(service: &Service, seconds: u64) -> Response<Full<Bytes>> {
    match service {
        Service::Splunk { .. } => {
            let mut response = splunk_error(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests");
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_str(&seconds.to_string()).unwrap(),
            );
            response
        }
        // Google's APIs answer a quota with 429 RESOURCE_EXHAUSTED and no Retry-After.
        Service::Stackdriver { .. } => {
            let _ = seconds;
            google_error(
                StatusCode::TOO_MANY_REQUESTS,
                "RESOURCE_EXHAUSTED",
                "Quota exceeded for quota metric 'Time series queries' and limit 'Time series queries per minute' of service 'monitoring.googleapis.com'.",
            )
        }
        Service::Dynatrace { .. } => {
            let mut response = dynatrace_error(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests");
            let reset = (jiff::Timestamp::now().as_microsecond()
                + i64::try_from(seconds)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(1_000_000))
            .to_string();
            let headers = response.headers_mut();
            headers.insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_str(&seconds.to_string()).unwrap(),
            );
            headers.insert(
                "x-ratelimit-reset",
                http::HeaderValue::from_str(&reset).unwrap(),
            );
            headers.insert("x-ratelimit-limit", http::HeaderValue::from_static("50"));
            response
        }
        Service::InfluxDb { .. } => {
            let mut response = influx_error(
                StatusCode::TOO_MANY_REQUESTS,
                "too many requests",
                "org has exceeded its query rate limit",
            );
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_str(&seconds.to_string()).unwrap(),
            );
            response
        }
        // CloudWatch throttles with 400 and no Retry-After.
        Service::CloudWatch { .. } => aws_error(
            StatusCode::BAD_REQUEST,
            "Sender",
            "Throttling",
            "Rate exceeded",
        ),
    }
}

fn unavailable(service: &Service) -> Response<Full<Bytes>> {
    match service {
        Service::Splunk { .. } => {
            splunk_error(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable")
        }
        Service::Stackdriver { .. } => google_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "UNAVAILABLE",
            "The service is currently unavailable.",
        ),
        Service::Dynatrace { .. } => {
            dynatrace_error(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable")
        }
        Service::InfluxDb { .. } => influx_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "service temporarily unavailable",
        ),
        Service::CloudWatch { .. } => aws_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "Receiver",
            "ServiceUnavailable",
            "Service is unavailable. Please try again later.",
        ),
    }
}

fn normal(service: &Service, value: Option<f64>, request: &Received<'_>) -> Response<Full<Bytes>> {
    match service {
        Service::CloudWatch {
            region,
            access_key,
            secret_key,
            session_token,
            also,
        } => {
            // The credentials whose key id the request names, when accepted.
            let named = request
                .headers
                .get("authorization")
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.split("Credential=").nth(1))
                .and_then(|value| value.split('/').next());
            let (access_key, secret_key, session_token) = also
                .iter()
                .find(|(key, _, _)| Some(key.as_str()) == named)
                .map_or(
                    (access_key, secret_key, session_token),
                    |(key, secret, token)| (key, secret, token),
                );
            if let Err(refusal) = verify_sigv4(
                request,
                region,
                "monitoring",
                access_key,
                secret_key,
                session_token.as_deref(),
            ) {
                return refusal;
            }
            get_metric_data(value, request)
        }
        Service::InfluxDb { org, token } => influx_query(org, token, value, request),
        Service::Dynatrace { token } => dynatrace_query(token, value, request),
        Service::Splunk { token } => signalflow_execute(token, value, request),
        Service::Stackdriver { project, issued } => {
            if request.path == "/token" {
                google_token(request)
            } else {
                monitoring_query(project, issued, value, request)
            }
        }
    }
}

/// Google's token endpoint: the JWT bearer grant, checked as Google checks it.
fn google_token(request: &Received<'_>) -> Response<Full<Bytes>> {
    let oauth_error = |code: &str, description: &str| {
        let mut response = Response::new(Full::new(Bytes::from(
            serde_json::json!({"error": code, "error_description": description}).to_string(),
        )));
        *response.status_mut() = StatusCode::BAD_REQUEST;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json; charset=utf-8"),
        );
        response
    };
    if request.method != "POST" {
        return oauth_error("invalid_request", "Method not allowed");
    }
    let form: BTreeMap<String, String> =
        form_urlencoded::parse(request.body).into_owned().collect();
    let grant = form
        .get("grant_type")
        .map(String::as_str)
        .unwrap_or_default();
    if grant != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
        return oauth_error(
            "unsupported_grant_type",
            &format!("Invalid grant_type: {grant}"),
        );
    }
    let Some(assertion) = form.get("assertion") else {
        return oauth_error("invalid_request", "Missing required parameter: assertion");
    };
    let parts: Vec<&str> = assertion.split('.').collect();
    let [header, claims, signature] = parts.as_slice() else {
        return oauth_error("invalid_grant", "Invalid JWT: malformed");
    };
    use base64::Engine as _;
    let decode = |part: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .ok()
    };
    let json = |part: &str| {
        decode(part).and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
    };
    let (Some(header_json), Some(claims_json), Some(signature)) =
        (json(header), json(claims), decode(signature))
    else {
        return oauth_error("invalid_grant", "Invalid JWT: malformed");
    };
    if header_json["alg"] != "RS256" {
        return oauth_error("invalid_grant", "Invalid JWT: unsupported algorithm");
    }
    let Some(public_key) = test_public_key() else {
        return oauth_error("invalid_grant", "Invalid JWT Signature.");
    };
    let verified = ring::signature::UnparsedPublicKey::new(
        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        public_key,
    )
    .verify(format!("{header}.{claims}").as_bytes(), &signature);
    if verified.is_err() {
        return oauth_error("invalid_grant", "Invalid JWT Signature.");
    }
    if claims_json["iss"] != TEST_SERVICE_ACCOUNT {
        return oauth_error("invalid_grant", "Invalid grant: account not found");
    }
    let host = request
        .headers
        .get(http::header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if claims_json["aud"] != format!("http://{host}/token").as_str() {
        return oauth_error(
            "invalid_grant",
            "Invalid JWT: Failed audience check. The right audience is this token endpoint.",
        );
    }
    let scope = claims_json["scope"].as_str().unwrap_or_default();
    if !scope.split(' ').any(|scope| {
        matches!(
            scope,
            "https://www.googleapis.com/auth/monitoring.read"
                | "https://www.googleapis.com/auth/monitoring"
                | "https://www.googleapis.com/auth/cloud-platform"
        )
    }) {
        return oauth_error(
            "invalid_scope",
            "Invalid OAuth scope or ID token audience provided.",
        );
    }
    let now = jiff::Timestamp::now().as_second();
    let (iat, exp) = (
        claims_json["iat"].as_i64().unwrap_or(0),
        claims_json["exp"].as_i64().unwrap_or(0),
    );
    if exp <= now || iat > now + 300 || exp - iat > 3600 {
        return oauth_error(
            "invalid_grant",
            "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.",
        );
    }
    let token = format!("ya29.c.weir-test-{}-{}", now, &signature.len());
    let mut response = Response::new(Full::new(Bytes::from(
        serde_json::json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"})
            .to_string(),
    )));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json; charset=utf-8"),
    );
    response.headers_mut().insert(
        "x-issued-token",
        http::HeaderValue::from_str(&token).unwrap(),
    );
    response
}

/// The test service account's public key (RSAPublicKey DER).
fn test_public_key() -> Option<Vec<u8>> {
    use base64::Engine as _;
    let body: String = TEST_SERVICE_ACCOUNT_PEM
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .ok()?;
    let pair = ring::signature::RsaKeyPair::from_pkcs8(&der).ok()?;
    Some(
        ring::signature::KeyPair::public_key(&pair)
            .as_ref()
            .to_vec(),
    )
}

/// Cloud Monitoring's `timeSeries:query` on a token the endpoint issued.
fn monitoring_query(
    project: &str,
    issued: &[String],
    value: Option<f64>,
    request: &Received<'_>,
) -> Response<Full<Bytes>> {
    let Some(asked) = request
        .path
        .strip_prefix("/v3/projects/")
        .and_then(|rest| rest.strip_suffix("/timeSeries:query"))
    else {
        return google_error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "Requested entity was not found.",
        );
    };
    if request.method != "POST" {
        return google_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "METHOD_NOT_ALLOWED",
            "Method not allowed",
        );
    }
    let bearer = request
        .headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    if !bearer.is_some_and(|token| issued.iter().any(|issued| issued == token)) {
        return google_error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
        );
    }
    if asked != project {
        return google_error(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            &format!(
                "Permission monitoring.timeSeries.list denied (or the resource may not exist) for project {asked}."
            ),
        );
    }
    let query = serde_json::from_slice::<serde_json::Value>(request.body)
        .ok()
        .and_then(|body| {
            body.get("query")
                .and_then(|query| query.as_str())
                .map(str::to_string)
        })
        .unwrap_or_default();
    if query.trim().is_empty() {
        return google_error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "Query is empty.",
        );
    }
    if !query.trim_start().starts_with("fetch ") {
        return google_error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            &format!(
                "Query parsing failed: Line 1, column 1: expected a table operation such as 'fetch', found '{}'.",
                query.split_whitespace().next().unwrap_or_default()
            ),
        );
    }
    let descriptor = serde_json::json!({
        "labelDescriptors": [{"key": "resource.project_id"}],
        "pointDescriptors": [{"key": "value.error_rate", "valueType": "DOUBLE", "metricKind": "GAUGE"}],
    });
    let body = match value {
        None => serde_json::json!({"timeSeriesDescriptor": descriptor}),
        Some(value) => serde_json::json!({
            "timeSeriesDescriptor": descriptor,
            "timeSeriesData": [{
                "labelValues": [{"stringValue": project}],
                "pointData": [
                    {"values": [{"doubleValue": value}], "timeInterval": {"startTime": "2026-01-01T00:01:00Z", "endTime": "2026-01-01T00:01:00Z"}},
                    {"values": [{"doubleValue": value * 3.0}], "timeInterval": {"startTime": "2026-01-01T00:00:00Z", "endTime": "2026-01-01T00:00:00Z"}},
                ],
            }],
        }),
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    response
}

/// `GET /api/v2/metrics/query` as Dynatrace checks and answers it.
fn dynatrace_query(
    token: &str,
    value: Option<f64>,
    request: &Received<'_>,
) -> Response<Full<Bytes>> {
    let authorization = request
        .headers
        .get("authorization")
        .and_then(|value| value.to_str().ok());
    match authorization {
        None => {
            return dynatrace_error(StatusCode::UNAUTHORIZED, "Missing authorization parameter.");
        }
        Some(presented) if presented.strip_prefix("Api-Token ") != Some(token) => {
            return dynatrace_error(StatusCode::UNAUTHORIZED, "Token Authentication failed");
        }
        Some(_) => {}
    }
    if request.path != "/api/v2/metrics/query" {
        return dynatrace_error(StatusCode::NOT_FOUND, "HTTP 404 Not Found");
    }
    if request.method != "GET" {
        return dynatrace_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "HTTP 405 Method Not Allowed",
        );
    }
    let query: BTreeMap<String, String> = form_urlencoded::parse(request.query.as_bytes())
        .into_owned()
        .collect();
    let violated = |message: &str| {
        let mut response = Response::new(Full::new(Bytes::from(
            serde_json::json!({"error": {"code": 400, "message": "Constraints violated.",
                "constraintViolations": [{"path": "metricSelector", "message": message,
                "parameterLocation": "QUERY", "location": null}]}})
            .to_string(),
        )));
        *response.status_mut() = StatusCode::BAD_REQUEST;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json;charset=utf-8"),
        );
        response
    };
    let Some(selector) = query
        .get("metricSelector")
        .filter(|selector| !selector.trim().is_empty())
    else {
        return violated("must not be empty");
    };
    let millis = |name: &str| query.get(name).and_then(|text| text.parse::<i64>().ok());
    let (Some(from), Some(to)) = (millis("from"), millis("to")) else {
        return violated("from and to must be timestamps in milliseconds");
    };
    if from >= to {
        return dynatrace_error(
            StatusCode::BAD_REQUEST,
            "The timeframe's start must be before its end.",
        );
    }
    let data = match value {
        None => Vec::new(),
        Some(value) => vec![serde_json::json!({
            "dimensions": ["SERVICE-8E3A1F2B4C5D6E7F"],
            "dimensionMap": {"dt.entity.service": "SERVICE-8E3A1F2B4C5D6E7F"},
            "timestamps": [to],
            "values": [value],
        })],
    };
    let mut response = Response::new(Full::new(Bytes::from(
        serde_json::json!({
            "totalCount": 1,
            "nextPageKey": null,
            "resolution": query.get("resolution").cloned().unwrap_or_else(|| "1m".into()),
            "result": [{"metricId": selector, "dataPointCountRatio": 0.0001, "dimensionCountRatio": 0.0001, "data": data}],
        })
        .to_string(),
    )));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json;charset=utf-8"),
    );
    response
}

/// `POST /api/v2/query` as InfluxDB v2 checks and answers it.
fn influx_query(
    org: &str,
    token: &str,
    value: Option<f64>,
    request: &Received<'_>,
) -> Response<Full<Bytes>> {
    if request.path != "/api/v2/query" {
        return influx_error(StatusCode::NOT_FOUND, "not found", "path not found");
    }
    if request.method != "POST" {
        return influx_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed",
            "method not allowed",
        );
    }
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
    };
    let presented = header("authorization").and_then(|value| value.strip_prefix("Token "));
    if presented != Some(token) {
        return influx_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "unauthorized access",
        );
    }
    let query: BTreeMap<String, String> = form_urlencoded::parse(request.query.as_bytes())
        .into_owned()
        .collect();
    let Some(asked) = query.get("org").or(query.get("orgID")) else {
        return influx_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "Please provide either orgID or org",
        );
    };
    if asked != org {
        return influx_error(
            StatusCode::NOT_FOUND,
            "not found",
            &format!("organization name \"{asked}\" not found"),
        );
    }
    if !header("content-type").is_some_and(|value| value.starts_with("application/json")) {
        return influx_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "failed to decode request body: request body requires either spec or query",
        );
    }
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(request.body) else {
        return influx_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "failed to decode request body: invalid character in JSON",
        );
    };
    if body
        .get("type")
        .and_then(|kind| kind.as_str())
        .unwrap_or("flux")
        != "flux"
    {
        return influx_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "unknown query type; only flux is supported",
        );
    }
    let Some(flux) = body.get("query").and_then(|query| query.as_str()) else {
        return influx_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "failed to decode request body: request body requires either spec or query",
        );
    };
    let annotations = body["dialect"]["annotations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if annotations
        .iter()
        .any(|annotation| !matches!(annotation.as_str(), Some("datatype" | "group" | "default")))
    {
        return influx_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "unknown annotation; valid annotations are: datatype, group, default",
        );
    }
    if !flux.contains("from(") || !flux.contains("range(") {
        return influx_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "error in query specification while starting program: this Flux script returns no streaming data. Consider adding a \"yield\" or invoking streaming functions directly, without performing an assignment",
        );
    }
    let csv = match value {
        None => "\r\n".to_string(),
        Some(value) if flux.contains("count(") => format!(
            "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,long\r\n#group,false,false,true,true,false\r\n#default,_result,,,,\r\n,result,table,_start,_stop,_value\r\n,,0,2026-01-01T00:00:00Z,2026-01-01T00:10:00Z,{}\r\n\r\n",
            value.round() as i64
        ),
        Some(value) => format!(
            "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,dateTime:RFC3339,double,string,string\r\n#group,false,false,true,true,false,false,true,true\r\n#default,_result,,,,,,,\r\n,result,table,_start,_stop,_time,_value,_field,_measurement\r\n,,0,2026-01-01T00:00:00Z,2026-01-01T00:10:00Z,2026-01-01T00:09:00Z,{value},errors,http\r\n,,0,2026-01-01T00:00:00Z,2026-01-01T00:10:00Z,2026-01-01T00:10:00Z,{},errors,http\r\n\r\n",
            value * 3.0
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(csv)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/csv; charset=utf-8"),
    );
    response
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// SigV4's canonical query string: parameters sorted by name then value, each name and value
/// URI-encoded (unreserved characters kept, everything else `%XX`).
fn canonical_query(query: &str) -> String {
    let encode = |text: &str| {
        text.bytes()
            .map(|byte| match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (byte as char).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect::<String>()
    };
    let mut pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .map(|(name, value)| (encode(&name), encode(&value)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// Checks a request's SigV4 `Authorization` as AWS does, answering AWS's refusal if it fails.
// The refusal is the answer itself, built once per refused request of a test double.
#[allow(clippy::result_large_err)]
fn verify_sigv4(
    request: &Received<'_>,
    region: &str,
    service: &str,
    access_key: &str,
    secret_key: &str,
    session_token: Option<&str>,
) -> Result<(), Response<Full<Bytes>>> {
    let forbidden =
        |code: &str, message: &str| aws_error(StatusCode::FORBIDDEN, "Sender", code, message);
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
    };
    let Some(authorization) = header("authorization") else {
        return Err(forbidden(
            "MissingAuthenticationToken",
            "Request is missing Authentication Token",
        ));
    };
    let incomplete = || {
        aws_error(
            StatusCode::BAD_REQUEST,
            "Sender",
            "IncompleteSignature",
            &format!(
                "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters. Authorization={authorization}"
            ),
        )
    };
    let Some(fields) = authorization.strip_prefix("AWS4-HMAC-SHA256 ") else {
        return Err(incomplete());
    };
    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    for field in fields.split(',') {
        match field.trim().split_once('=') {
            Some(("Credential", value)) => credential = Some(value),
            Some(("SignedHeaders", value)) => signed_headers = Some(value),
            Some(("Signature", value)) => signature = Some(value),
            _ => {}
        }
    }
    let (Some(credential), Some(signed_headers), Some(signature)) =
        (credential, signed_headers, signature)
    else {
        return Err(incomplete());
    };
    let scope: Vec<&str> = credential.split('/').collect();
    let [key, date, scope_region, scope_service, terminator] = scope.as_slice() else {
        return Err(incomplete());
    };
    if *key != access_key {
        return Err(forbidden(
            "InvalidClientTokenId",
            "The security token included in the request is invalid.",
        ));
    }
    if *terminator != "aws4_request" {
        return Err(forbidden(
            "SignatureDoesNotMatch",
            "Credential should be scoped with a valid terminator: 'aws4_request'.",
        ));
    }
    if *scope_service != service {
        return Err(forbidden(
            "SignatureDoesNotMatch",
            &format!("Credential should be scoped to correct service: '{service}'. "),
        ));
    }
    if *scope_region != region {
        return Err(forbidden(
            "SignatureDoesNotMatch",
            &format!("Credential should be scoped to a valid region, not '{scope_region}'. "),
        ));
    }
    let names: Vec<&str> = signed_headers.split(';').collect();
    if !names.contains(&"host") {
        return Err(forbidden(
            "SignatureDoesNotMatch",
            "'Host' must be a 'SignedHeader' in the AWS Authorization.",
        ));
    }
    let Some(amz_date) = header("x-amz-date") else {
        return Err(incomplete());
    };
    let signed_at = jiff::civil::DateTime::strptime("%Y%m%dT%H%M%SZ", amz_date)
        .ok()
        .and_then(|at| at.to_zoned(jiff::tz::TimeZone::UTC).ok())
        .map(|at| at.timestamp());
    let Some(signed_at) = signed_at else {
        return Err(incomplete());
    };
    if !amz_date.starts_with(date) {
        return Err(forbidden(
            "SignatureDoesNotMatch",
            &format!(
                "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{date}' != '{}', from '{amz_date}'.",
                &amz_date[..8.min(amz_date.len())]
            ),
        ));
    }
    let now = jiff::Timestamp::now();
    let skew = (now.as_second() - signed_at.as_second()).abs();
    if skew > 15 * 60 {
        return Err(forbidden(
            "SignatureDoesNotMatch",
            &format!(
                "Signature expired: {amz_date} is now earlier than {} ({} - 15 min.)",
                now.strftime("%Y%m%dT%H%M%SZ"),
                now.strftime("%Y%m%dT%H%M%SZ")
            ),
        ));
    }
    if let Some(token) = session_token
        && header("x-amz-security-token") != Some(token)
    {
        return Err(forbidden(
            "InvalidClientTokenId",
            "The security token included in the request is invalid.",
        ));
    }
    // The canonical request, from what arrived.
    let mut canonical_headers = String::new();
    for name in &names {
        let values: Vec<String> = request
            .headers
            .get_all(*name)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .map(|value| value.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let canonical = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        request.method,
        request.path,
        canonical_query(request.query),
        hex(&Sha256::digest(request.body))
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{secret_key}").as_bytes(), date.as_bytes());
    for part in [region, service, "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let expected = hex(&hmac(&key, string_to_sign.as_bytes()));
    if expected != signature {
        return Err(forbidden(
            "SignatureDoesNotMatch",
            &format!(
                "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.\n\nThe Canonical String for this request should have been\n'{canonical}'\n\nThe String-to-Sign should have been\n'{string_to_sign}'\n"
            ),
        ));
    }
    Ok(())
}

/// `GetMetricData` on a signed request: the form checked as CloudWatch checks it, one result
/// per query that returns data, the first holding the served value (newest first, an older
/// point three times it), the others 100.
fn get_metric_data(value: Option<f64>, request: &Received<'_>) -> Response<Full<Bytes>> {
    let bad =
        |code: &str, message: &str| aws_error(StatusCode::BAD_REQUEST, "Sender", code, message);
    if request.path != "/" {
        return aws_error(
            StatusCode::NOT_FOUND,
            "Sender",
            "UnknownOperationException",
            "",
        );
    }
    if request.method != "POST" {
        return aws_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "Sender",
            "MethodNotAllowed",
            "Method Not Allowed",
        );
    }
    let content_type = request
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if !content_type.starts_with("application/x-www-form-urlencoded") {
        return bad(
            "InvalidAction",
            "Could not find operation  for version NO_VERSION_SPECIFIED",
        );
    }
    let form: BTreeMap<String, String> =
        form_urlencoded::parse(request.body).into_owned().collect();
    let get = |name: &str| form.get(name).map(String::as_str);
    let version = get("Version").unwrap_or("NO_VERSION_SPECIFIED");
    if get("Action") != Some("GetMetricData") || version != "2010-08-01" {
        return bad(
            "InvalidAction",
            &format!(
                "Could not find operation {} for version {version}",
                get("Action").unwrap_or_default()
            ),
        );
    }
    let time = |name: &str| get(name).and_then(|text| text.parse::<jiff::Timestamp>().ok());
    let (Some(start), Some(end)) = (time("StartTime"), time("EndTime")) else {
        return bad(
            "ValidationError",
            "2 validation errors detected: Value null at 'startTime' failed to satisfy constraint: Member must not be null; Value null at 'endTime' failed to satisfy constraint: Member must not be null",
        );
    };
    if start >= end {
        return bad(
            "ValidationError",
            "The parameter StartTime must be less than the parameter EndTime.",
        );
    }
    let mut returned = Vec::new();
    let mut index = 1;
    while let Some(id) = get(&format!("MetricDataQueries.member.{index}.Id")) {
        let field = |name: &str| get(&format!("MetricDataQueries.member.{index}.{name}"));
        let has_stat = form
            .keys()
            .any(|key| key.starts_with(&format!("MetricDataQueries.member.{index}.MetricStat.")));
        if has_stat == field("Expression").is_some() {
            return bad(
                "ValidationError",
                &format!(
                    "The parameter MetricDataQueries.member.{index} must contain exactly one of Expression or MetricStat."
                ),
            );
        }
        if has_stat
            && (field("MetricStat.Metric.MetricName").is_none()
                || field("MetricStat.Period").is_none()
                || field("MetricStat.Stat").is_none())
        {
            return bad(
                "ValidationError",
                &format!(
                    "The parameter MetricDataQueries.member.{index}.MetricStat must contain Metric.MetricName, Period and Stat."
                ),
            );
        }
        if field("ReturnData") != Some("false") {
            returned.push((id.to_string(), field("Label").unwrap_or(id).to_string()));
        }
        index += 1;
    }
    if index == 1 {
        return bad(
            "ValidationError",
            "1 validation error detected: Value null at 'metricDataQueries' failed to satisfy constraint: Member must not be null",
        );
    }
    let step = 60;
    let newest =
        jiff::Timestamp::from_second(end.as_second() - end.as_second() % step).unwrap_or(end);
    let older = jiff::Timestamp::from_second(newest.as_second() - step).unwrap_or(newest);
    let members: String = returned
        .iter()
        .enumerate()
        .map(|(position, (id, label))| {
            let served = if position == 0 { value } else { Some(100.0) };
            let (timestamps, values) = match served {
                Some(value) => (
                    format!("<member>{newest}</member><member>{older}</member>"),
                    format!("<member>{value}</member><member>{}</member>", value * 3.0),
                ),
                None => (String::new(), String::new()),
            };
            format!(
                "<member><Id>{id}</Id><Label>{label}</Label><Timestamps>{timestamps}</Timestamps><Values>{values}</Values><StatusCode>Complete</StatusCode></member>"
            )
        })
        .collect();
    xml_response(
        StatusCode::OK,
        format!(
            "<GetMetricDataResponse xmlns=\"http://monitoring.amazonaws.com/doc/2010-08-01/\">\n  <GetMetricDataResult>\n    <MetricDataResults>{members}</MetricDataResults>\n    <Messages/>\n  </GetMetricDataResult>\n  <ResponseMetadata>\n    <RequestId>{REQUEST_ID}</RequestId>\n  </ResponseMetadata>\n</GetMetricDataResponse>\n"
        ),
    )
}

/// `POST /v2/signalflow/execute` as Splunk Observability checks and streams it.
fn signalflow_execute(
    token: &str,
    value: Option<f64>,
    request: &Received<'_>,
) -> Response<Full<Bytes>> {
    if request.path != "/v2/signalflow/execute" {
        return splunk_error(StatusCode::NOT_FOUND, "Not Found");
    }
    if request.method != "POST" {
        return splunk_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    }
    let presented = request
        .headers
        .get("x-sf-token")
        .and_then(|value| value.to_str().ok());
    if presented != Some(token) {
        return splunk_error(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    let query: BTreeMap<String, String> = form_urlencoded::parse(request.query.as_bytes())
        .into_owned()
        .collect();
    let millis = |name: &str| query.get(name).and_then(|text| text.parse::<i64>().ok());
    let (Some(start), Some(stop)) = (millis("start"), millis("stop")) else {
        return splunk_error(
            StatusCode::BAD_REQUEST,
            "start and stop must be epoch milliseconds",
        );
    };
    if start >= stop {
        return splunk_error(StatusCode::BAD_REQUEST, "start must be before stop");
    }
    let program = String::from_utf8_lossy(request.body);
    let event = |kind: &str, json: serde_json::Value| {
        // SignalFlow pretty-prints its messages over several data: lines.
        let pretty = serde_json::to_string_pretty(&json).unwrap();
        let data: String = pretty
            .lines()
            .map(|line| format!("data: {line}\n"))
            .collect();
        format!("event: {kind}\n{data}\n")
    };
    let mut stream = event(
        "control-message",
        serde_json::json!({"type": "control-message", "event": "STREAM_START", "timestampMs": stop}),
    );
    if !program.contains(".publish(") {
        stream.push_str(&event(
            "error",
            serde_json::json!({"type": "error", "message": "Unable to compile program: the program publishes no stream", "error": 400}),
        ));
    } else {
        stream.push_str(&event(
            "control-message",
            serde_json::json!({"type": "control-message", "event": "JOB_START", "handle": "E3h5l1zAgAA", "timestampMs": stop}),
        ));
        if let Some(value) = value {
            stream.push_str(&event(
                "metadata",
                serde_json::json!({"type": "metadata", "tsId": "AAAAAKzGpQg", "properties": {"sf_metric": "errors", "sf_isPreQuantized": false}}),
            ));
            // An older point, then the newest: the newest is the one read.
            for (at, point) in [(stop - 60_000, value * 3.0), (stop, value)] {
                stream.push_str(&event(
                    "data",
                    serde_json::json!({"type": "data", "data": [{"tsId": "AAAAAKzGpQg", "value": point}], "logicalTimestampMs": at, "maxDelayMs": 0}),
                ));
            }
        }
        stream.push_str(&event(
            "control-message",
            serde_json::json!({"type": "control-message", "event": "END_OF_CHANNEL", "timestampMs": stop}),
        ));
    }
    let mut response = Response::new(Full::new(Bytes::from(stream)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    response
}
