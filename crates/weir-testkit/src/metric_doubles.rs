//! Test doubles of hosted metric services, each an HTTP/1.1 server on `127.0.0.1:0` (on a
//! thread of its own, so sync and async tests alike can use one) that follows the service's
//! documented API: method, path, query parameters, authentication headers, the answer's JSON
//! as the service's documentation gives it, and its error answers. A double refuses what the
//! real service refuses (a wrong path, method, header or parameter is a 4xx with the service's
//! error shape), so a client that gets one wrong fails its test.
//!
//! - [`MetricDouble::datadog`]: `GET /api/v1/query?query=&from=&to=` (seconds) with
//!   `DD-API-KEY` and `DD-APPLICATION-KEY`; `GET /api/v1/validate`. Bad keys: 403
//!   `{"errors":["Forbidden"]}`; rate limit: 429 with `X-RateLimit-Limit`, `-Period`,
//!   `-Remaining`, `-Reset` (Datadog sends no `Retry-After`).
//! - [`MetricDouble::newrelic`]: `GET /v1/accounts/{id}/query?nrql=` with `X-Query-Key`. A
//!   missing or wrong key: 401 `{"error": ...}`; another account: 403; rate limit: 429 with
//!   `Retry-After`. The result is keyed `result` for an expression, by the function's name for
//!   a single function (`average(x)` answers `{"average": ...}`), as NRQL does.
//! - [`MetricDouble::graphite`]: `GET /render?target=...&format=json`, optionally behind basic
//!   authentication (401 with `WWW-Authenticate`); without `format=json` it answers a PNG, as
//!   graphite-web does.
//!
//! What it serves is set with [`MetricDouble::serve`] (a value, or no data), or per query with
//! [`MetricDouble::serve_for`] (the value of queries containing a text), and the next answers can
//! be made faults first ([`MetricDouble::fail_next`]).

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// Which service a double plays, with the credentials it accepts.
#[derive(Debug, Clone)]
enum Service {
    Datadog { api_key: String, app_key: String },
    NewRelic { account: String, query_key: String },
    Graphite { basic: Option<(String, String)> },
}

/// An answer the double gives before its normal ones.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// `429 Too Many Requests`, asking to wait this many seconds (`Retry-After`, or Datadog's
    /// `X-RateLimit-Reset`).
    RateLimited(u64),
    /// `503 Service Unavailable` with the service's error body.
    Unavailable,
    /// The normal answer, sent only after this long (a slow service).
    Slow(Duration),
}

/// One request the double got.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The method.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query parameters, decoded.
    pub query: BTreeMap<String, String>,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, as text (empty for a `GET`).
    pub body: String,
    /// The status the double answered.
    pub status: u16,
}

impl Seen {
    /// The value of header `name`, if present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

struct State {
    service: Service,
    value: Option<f64>,
    /// Values of the queries containing a text, first match first; others get `value`.
    values_for: Vec<(String, Option<f64>)>,
    faults: VecDeque<Fault>,
    seen: Vec<Seen>,
}

/// A running double; stops when dropped.
pub struct MetricDouble {
    address: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl MetricDouble {
    /// Datadog's API accepting these keys.
    pub fn datadog(api_key: &str, application_key: &str) -> MetricDouble {
        MetricDouble::start(Service::Datadog {
            api_key: api_key.into(),
            app_key: application_key.into(),
        })
    }

    /// New Relic's Insights query API for `account`, accepting `query_key`.
    pub fn newrelic(account: &str, query_key: &str) -> MetricDouble {
        MetricDouble::start(Service::NewRelic {
            account: account.into(),
            query_key: query_key.into(),
        })
    }

    /// graphite-web's render API, behind basic authentication when `basic` is given.
    pub fn graphite(basic: Option<(&str, &str)>) -> MetricDouble {
        MetricDouble::start(Service::Graphite {
            basic: basic.map(|(user, password)| (user.into(), password.into())),
        })
    }

    fn start(service: Service) -> MetricDouble {
        let state = Arc::new(Mutex::new(State {
            service,
            value: None,
            values_for: Vec::new(),
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
        MetricDouble {
            address,
            state,
            stop: Some(stop),
        }
    }

    /// `http://ADDRESS`: a template's `provider.address`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Serves `value` from now on (`None`: no data: no series, a null, null points).
    pub fn serve(&self, value: Option<f64>) {
        self.state.lock().unwrap().value = value;
    }

    /// Serves `value` to queries containing `text` (any query parameter's value: Datadog's
    /// `query`, New Relic's `nrql`, Graphite's `target`) from now on, instead of what
    /// [`MetricDouble::serve`] set; a later call for the same text replaces the value, and the
    /// text given first wins when several match.
    pub fn serve_for(&self, text: &str, value: Option<f64>) {
        let mut state = self.state.lock().unwrap();
        match state.values_for.iter_mut().find(|(known, _)| known == text) {
            Some((_, served)) => *served = value,
            None => state.values_for.push((text.to_string(), value)),
        }
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

impl Drop for MetricDouble {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

async fn answer(state: &Mutex<State>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, _) = request.into_parts();
    let query: BTreeMap<String, String> =
        form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let (service, value, fault) = {
        let mut state = state.lock().unwrap();
        let value = state
            .values_for
            .iter()
            .find(|(text, _)| query.values().any(|asked| asked.contains(text.as_str())))
            .map_or(state.value, |(_, value)| *value);
        (state.service.clone(), value, state.faults.pop_front())
    };
    let mut response = match fault {
        Some(Fault::RateLimited(seconds)) => rate_limited(&service, seconds),
        Some(Fault::Unavailable) => unavailable(&service),
        Some(Fault::Slow(delay)) => {
            tokio::time::sleep(delay).await;
            normal(
                &service,
                value,
                parts.method.as_str(),
                parts.uri.path(),
                &query,
                &parts.headers,
            )
        }
        None => normal(
            &service,
            value,
            parts.method.as_str(),
            parts.uri.path(),
            &query,
            &parts.headers,
        ),
    };
    if !response.headers().contains_key(http::header::CONTENT_TYPE) {
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
    }
    state.lock().unwrap().seen.push(Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query,
        headers: parts.headers,
        body: String::new(),
        status: response.status().as_u16(),
    });
    response
}

fn rate_limited(service: &Service, seconds: u64) -> Response<Full<Bytes>> {
    let mut response = match service {
        Service::Datadog { .. } => json_response(
            StatusCode::TOO_MANY_REQUESTS,
            &json!({"errors": ["Rate limit of traffic exceeded"]}),
        ),
        Service::NewRelic { .. } => json_response(
            StatusCode::TOO_MANY_REQUESTS,
            &json!({"error": "Too many requests: the query rate limit was reached"}),
        ),
        Service::Graphite { .. } => {
            let mut response = Response::new(Full::new(Bytes::from("Too Many Requests")));
            *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain"),
            );
            response
        }
    };
    let headers = response.headers_mut();
    let text = |value: String| http::HeaderValue::from_str(&value).unwrap();
    match service {
        Service::Datadog { .. } => {
            headers.insert("x-ratelimit-limit", text("300".into()));
            headers.insert("x-ratelimit-period", text("3600".into()));
            headers.insert("x-ratelimit-remaining", text("0".into()));
            headers.insert("x-ratelimit-reset", text(seconds.to_string()));
        }
        _ => {
            headers.insert(http::header::RETRY_AFTER, text(seconds.to_string()));
        }
    }
    response
}

fn unavailable(service: &Service) -> Response<Full<Bytes>> {
    match service {
        Service::Datadog { .. } => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"errors": ["Service Unavailable"]}),
        ),
        Service::NewRelic { .. } => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"error": "Service temporarily unavailable"}),
        ),
        Service::Graphite { .. } => {
            let mut response = Response::new(Full::new(Bytes::from("Service Unavailable")));
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/html"),
            );
            response
        }
    }
}

fn normal(
    service: &Service,
    value: Option<f64>,
    method: &str,
    path: &str,
    query: &BTreeMap<String, String>,
    headers: &HeaderMap,
) -> Response<Full<Bytes>> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    match service {
        Service::Datadog { api_key, app_key } => {
            let datadog_error = |status: StatusCode, message: &str| {
                json_response(status, &json!({"errors": [message]}))
            };
            if !matches!(path, "/api/v1/query" | "/api/v1/validate") {
                return datadog_error(StatusCode::NOT_FOUND, "Not found");
            }
            if method != "GET" {
                return datadog_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
            }
            if header("dd-api-key") != Some(api_key.as_str()) {
                return datadog_error(StatusCode::FORBIDDEN, "Forbidden");
            }
            if path == "/api/v1/validate" {
                return json_response(StatusCode::OK, &json!({"valid": true}));
            }
            if header("dd-application-key") != Some(app_key.as_str()) {
                return datadog_error(StatusCode::FORBIDDEN, "Forbidden");
            }
            datadog_query(value, query)
        }
        Service::NewRelic { account, query_key } => {
            let newrelic_error = |status: StatusCode, message: &str| {
                json_response(status, &json!({"error": message}))
            };
            let Some(rest) = path.strip_prefix("/v1/accounts/") else {
                return newrelic_error(StatusCode::NOT_FOUND, "Not Found");
            };
            let Some(asked) = rest.strip_suffix("/query") else {
                return newrelic_error(StatusCode::NOT_FOUND, "Not Found");
            };
            if method != "GET" {
                return newrelic_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
            }
            match header("x-query-key") {
                None => {
                    return newrelic_error(StatusCode::UNAUTHORIZED, "Missing X-Query-Key header");
                }
                Some(key) if key != query_key => {
                    return newrelic_error(StatusCode::UNAUTHORIZED, "Invalid query key");
                }
                Some(_) => {}
            }
            if asked != account {
                return newrelic_error(
                    StatusCode::FORBIDDEN,
                    "The query key is not authorized for this account",
                );
            }
            newrelic_query(value, query)
        }
        Service::Graphite { basic } => {
            if let Some((user, password)) = basic {
                let expected = format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
                );
                if header("authorization") != Some(expected.as_str()) {
                    let mut response = Response::new(Full::new(Bytes::from("Unauthorized")));
                    *response.status_mut() = StatusCode::UNAUTHORIZED;
                    response.headers_mut().insert(
                        http::header::WWW_AUTHENTICATE,
                        http::HeaderValue::from_static("Basic realm=\"graphite\""),
                    );
                    return response;
                }
            }
            let text = |status: StatusCode, body: &'static str| {
                let mut response = Response::new(Full::new(Bytes::from(body)));
                *response.status_mut() = status;
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/html"),
                );
                response
            };
            if path != "/render" && path != "/render/" {
                return text(StatusCode::NOT_FOUND, "Not Found");
            }
            if method != "GET" && method != "POST" {
                return text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
            }
            let Some(target) = query.get("target") else {
                return text(
                    StatusCode::BAD_REQUEST,
                    "Missing required parameter 'target'",
                );
            };
            if query.get("format").map(String::as_str) != Some("json") {
                let mut response = Response::new(Full::new(Bytes::from_static(b"\x89PNG\r\n")));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("image/png"),
                );
                return response;
            }
            let now = jiff::Timestamp::now().as_second();
            let datapoints: Vec<Value> = (0..5)
                .map(|step| {
                    let at = now - 60 * (5 - step);
                    // The newest point is still filling: graphite answers null for it.
                    let point = if step == 4 { None } else { value };
                    json!([point, at])
                })
                .collect();
            json_response(
                StatusCode::OK,
                &json!([{"target": target, "tags": {"name": target}, "datapoints": datapoints}]),
            )
        }
    }
}

fn datadog_query(value: Option<f64>, query: &BTreeMap<String, String>) -> Response<Full<Bytes>> {
    let bad =
        |message: String| json_response(StatusCode::BAD_REQUEST, &json!({"errors": [message]}));
    let Some(expression) = query.get("query").filter(|query| !query.trim().is_empty()) else {
        return bad("The value provided for parameter 'query' is invalid".into());
    };
    let seconds = |name: &str| query.get(name).and_then(|text| text.parse::<i64>().ok());
    let (Some(from), Some(to)) = (seconds("from"), seconds("to")) else {
        return bad("Parameters 'from' and 'to' are required, in seconds since the epoch".into());
    };
    if from >= to {
        return bad("'from' must be before 'to'".into());
    }
    let (from_ms, to_ms) = (from * 1000, to * 1000);
    // About ten buckets over the window, as Datadog's rollup gives for a range.
    let bucket = ((to_ms - from_ms) / 10).max(1000);
    let series = match value {
        None => Vec::new(),
        Some(value) => {
            let mut pointlist = Vec::new();
            let mut at = from_ms - from_ms % bucket;
            while at <= to_ms {
                // The newest bucket is still filling: it holds a partial value.
                let point = if at + bucket > to_ms {
                    value / 2.0
                } else {
                    value
                };
                pointlist.push(json!([at, point]));
                at += bucket;
            }
            vec![json!({
                "metric": expression,
                "display_name": expression,
                "aggr": "sum",
                "scope": "*",
                "expression": expression,
                "interval": bucket,
                "length": pointlist.len(),
                "start": from_ms,
                "end": to_ms,
                "query_index": 0,
                "tag_set": [],
                "pointlist": pointlist,
                "unit": [null, null],
            })]
        }
    };
    json_response(
        StatusCode::OK,
        &json!({
            "status": "ok",
            "res_type": "time_series",
            "query": expression,
            "from_date": from_ms,
            "to_date": to_ms,
            "group_by": [],
            "message": "",
            "error": null,
            "series": series,
        }),
    )
}

fn newrelic_query(value: Option<f64>, query: &BTreeMap<String, String>) -> Response<Full<Bytes>> {
    let Some(nrql) = query.get("nrql") else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": "Missing required parameter: nrql"}),
        );
    };
    // NRQL reads any whitespace, new lines included, as a separator.
    let nrql = nrql.split_whitespace().collect::<Vec<_>>().join(" ");
    let upper = nrql.to_ascii_uppercase();
    let (Some(select), Some(from)) = (upper.find("SELECT"), upper.find(" FROM ")) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": format!("NRQL Syntax Error: Error at line 1 position 1, unexpected '{}'", nrql.split_whitespace().next().unwrap_or_default())}),
        );
    };
    let selected = nrql[select + 6..from].trim();
    // A single function is keyed by its name, anything else `result`.
    let key = match selected.split_once('(') {
        Some((name, rest))
            if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && rest.ends_with(')')
                && !rest[..rest.len() - 1].contains(')') =>
        {
            name.to_string()
        }
        _ => "result".to_string(),
    };
    json_response(
        StatusCode::OK,
        &json!({
            "results": [{ key: value }],
            "performanceStats": {"inspectedCount": 42, "wallClockTime": 12},
            "metadata": {"eventTypes": ["Metric"], "messages": [], "contents": [{"function": "alias"}]},
        }),
    )
}
