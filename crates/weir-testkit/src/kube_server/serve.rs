//! HTTP: routing, discovery, OpenAPI, lists and Tables, watches, and the write verbs.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::ApiError;
use super::discovery;
use super::external_metrics;
use super::store::{State, Validation, WriteCtx, not_found};
use super::table::{FieldSelector, LabelSelector, partial_metadata, table};
use super::types::ResourceType;

pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// What the server and its handles share.
pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub changes: watch::Receiver<u64>,
    /// Watch requests received.
    pub watches: std::sync::atomic::AtomicU64,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every write finishes
        // before it is stored), so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A streamed body fed by a channel (watch events).
pub(super) struct ChannelBody(pub(super) mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

fn json_response(
    code: u16,
    body: &Value,
    content_type: &str,
    warnings: &[String],
) -> Response<Body> {
    let mut response = Response::new(full(body.to_string()));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(value) = HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    for warning in warnings {
        let text = format!("299 - {}", Value::String(warning.clone()));
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

fn ok(body: &Value) -> Response<Body> {
    json_response(200, body, "application/json", &[])
}

fn error(error: &ApiError) -> Response<Body> {
    json_response(error.code, &error.status(), "application/json", &[])
}

fn page_not_found() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource".into(),
    )
    .with_details(json!({}))
}

/// How the client wants objects: plain, as a Table, or as metadata only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Repr {
    Plain,
    Table,
    Partial,
}

fn media_params(range: &str) -> (String, HashMap<String, String>) {
    let mut parts = range.split(';').map(str::trim);
    let media = parts.next().unwrap_or("").to_lowercase();
    let params = parts
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    (media, params)
}

fn representation(accept: &str) -> Repr {
    for range in accept.split(',') {
        let (media, params) = media_params(range);
        match params.get("as").map(String::as_str) {
            Some("Table") => return Repr::Table,
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") => return Repr::Partial,
            Some(_) => continue,
            None => {}
        }
        if matches!(media.as_str(), "application/json" | "*/*" | "application/*") {
            return Repr::Plain;
        }
    }
    Repr::Plain
}

/// The aggregated discovery version the Accept header asks for first, if any.
fn discovery_version(accept: &str) -> Option<&'static str> {
    for range in accept.split(',') {
        let (media, params) = media_params(range);
        if params.get("as").map(String::as_str) == Some("APIGroupDiscoveryList")
            && params.get("g").map(String::as_str) == Some("apidiscovery.k8s.io")
        {
            match params.get("v").map(String::as_str) {
                Some("v2") => return Some("v2"),
                Some("v2beta1") => return Some("v2beta1"),
                _ => continue,
            }
        }
        if matches!(media.as_str(), "application/json" | "*/*" | "application/*") {
            return None;
        }
    }
    None
}

fn version_body() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-weir-testkit",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-12-11T00:00:00Z",
        "goVersion": "go1.23.4",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// One request.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let header = |name: http::header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let accept = header(http::header::ACCEPT);
    let query: HashMap<String, String> =
        form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
            .filter(|(key, _)| !key.is_empty())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    let path = parts.uri.path().to_owned();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let method = parts.method.clone();
    let get = method == Method::GET;
    let external_metrics = shared.lock().external_metrics.is_some();
    let response = match segments.as_slice() {
        ["apis", external_metrics::GROUP, rest @ ..] if external_metrics => {
            serve_external_metrics(&shared, &method, rest, &parts.uri, &query)
        }
        ["version"] if get => ok(&version_body()),
        ["healthz" | "readyz" | "livez"] if get => {
            let mut response = Response::new(full("ok"));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain"),
            );
            response
        }
        ["api"] if get => {
            let state = shared.lock();
            match discovery_version(&accept) {
                Some(version) => json_response(
                    200,
                    &discovery::aggregated(&state.types, true, version),
                    &format!(
                        "application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
                    ),
                    &[],
                ),
                None => ok(&json!({
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": parts.headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("")}],
                })),
            }
        }
        ["apis"] if get => {
            let state = shared.lock();
            match discovery_version(&accept) {
                Some(version) => json_response(
                    200,
                    &with_external_metrics(
                        discovery::aggregated(&state.types, false, version),
                        state.external_metrics.is_some(),
                        external_metrics::aggregated(),
                    ),
                    &format!(
                        "application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
                    ),
                    &[],
                ),
                None => ok(&with_external_metrics(
                    discovery::api_group_list(&state.types),
                    state.external_metrics.is_some(),
                    {
                        let mut group = external_metrics::api_group();
                        if let Some(map) = group.as_object_mut() {
                            map.remove("kind");
                            map.remove("apiVersion");
                        }
                        group
                    },
                )),
            }
        }
        ["openapi", "v3"] if get => ok(&discovery::openapi_index(&shared.lock().types)),
        ["openapi", "v3", "api", version] if get => openapi(&shared, "", version),
        ["openapi", "v3", "apis", group, version] if get => openapi(&shared, group, version),
        ["api", "v1"] if get => discovery_list(&shared, "", "v1"),
        ["apis", group] if get => {
            let state = shared.lock();
            let groups = discovery::groups(&state.types);
            match groups.iter().find(|(name, _)| name == group) {
                Some((name, versions)) => ok(&discovery::api_group(name, versions)),
                None => error(&page_not_found()),
            }
        }
        ["apis", group, version] if get => discovery_list(&shared, group, version),
        ["api", version, rest @ ..] if !rest.is_empty() => {
            resource(
                &shared,
                &method,
                "",
                version,
                rest,
                &query,
                &parts.headers,
                &accept,
                body,
            )
            .await
        }
        ["apis", group, version, rest @ ..] if !rest.is_empty() => {
            resource(
                &shared,
                &method,
                group,
                version,
                rest,
                &query,
                &parts.headers,
                &accept,
                body,
            )
            .await
        }
        _ => error(&page_not_found()),
    };
    if !matches!(
        segments.as_slice(),
        ["api", _, _, ..] | ["apis", _, _, _, ..]
    ) {
        shared
            .lock()
            .count_request(method.as_str(), "(discovery and other paths)");
    }
    Ok(response)
}

/// `list` (an `APIGroupList`'s `groups` or an `APIGroupDiscoveryList`'s `items`) with `entry`
/// added when the External Metrics API is served.
fn with_external_metrics(mut list: Value, served: bool, entry: Value) -> Value {
    if served {
        for field in ["groups", "items"] {
            if let Some(entries) = list.get_mut(field).and_then(Value::as_array_mut) {
                entries.push(entry.clone());
            }
        }
    }
    list
}

/// A request under `/apis/external.metrics.k8s.io` (`rest`: the segments after the group).
fn serve_external_metrics(
    shared: &Shared,
    method: &Method,
    rest: &[&str],
    uri: &http::Uri,
    query: &HashMap<String, String>,
) -> Response<Body> {
    if method != Method::GET {
        let status = external_metrics::status(
            405,
            "MethodNotAllowed",
            &format!("the server does not allow this method on the requested resource ({method})"),
        );
        return json_response(405, &status, "application/json", &[]);
    }
    match rest {
        [] => ok(&external_metrics::api_group()),
        [external_metrics::VERSION] => ok(&external_metrics::resource_list()),
        [external_metrics::VERSION, "namespaces", namespace, name] => {
            let mut state = shared.lock();
            let Some(metrics) = state.external_metrics.as_mut() else {
                return error(&page_not_found());
            };
            metrics.requests.push(match uri.query() {
                Some(query) => format!("{}?{query}", uri.path()),
                None => uri.path().to_string(),
            });
            let (code, body) = metrics.get(
                namespace,
                name,
                query.get("labelSelector").map(String::as_str),
            );
            json_response(code, &body, "application/json", &[])
        }
        _ => error(&page_not_found()),
    }
}

fn openapi(shared: &Shared, group: &str, version: &str) -> Response<Body> {
    match discovery::openapi_document(&shared.lock().types, group, version) {
        Some(document) => ok(&document),
        None => error(&page_not_found()),
    }
}

fn discovery_list(shared: &Shared, group: &str, version: &str) -> Response<Body> {
    match discovery::resource_list(&shared.lock().types, group, version) {
        Some(list) => ok(&list),
        None => error(&page_not_found()),
    }
}

/// Where a resource request points.
pub(super) struct Target {
    pub(super) rt: ResourceType,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) sub: Option<String>,
}

fn target(state: &State, group: &str, version: &str, rest: &[&str]) -> Result<Target, ApiError> {
    let cluster_namespace_sub =
        rest.len() == 3 && rest[0] == "namespaces" && matches!(rest[2], "status" | "finalize");
    let (plural, namespace, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..] if !cluster_namespace_sub => {
            (*plural, Some(*ns), tail)
        }
        [plural, tail @ ..] => (*plural, None, tail),
        [] => return Err(page_not_found()),
    };
    let rt = state
        .types
        .iter()
        .find(|rt| rt.group == group && rt.version == version && rt.plural == plural)
        .cloned()
        .ok_or_else(page_not_found)?;
    let (name, sub) = match tail {
        [] => (None, None),
        [name] => (Some(*name), None),
        [name, sub] => (Some(*name), Some(*sub)),
        _ => return Err(page_not_found()),
    };
    if namespace.is_some() && !rt.namespaced {
        return Err(page_not_found());
    }
    if namespace.is_none() && rt.namespaced && name.is_some() {
        return Err(page_not_found());
    }
    if let Some(sub) = sub
        && !(sub == "status" && rt.status
            || sub == "scale" && rt.scale()
            || sub == "eviction" && rt.evictable())
    {
        return Err(page_not_found());
    }
    Ok(Target {
        rt,
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        sub: sub.map(str::to_owned),
    })
}

/// A create's protobuf body as JSON (kubectl's `create namespace` and `create configmap`),
/// when the client takes a JSON answer (kubectl sends
/// `Accept: application/vnd.kubernetes.protobuf,application/json`).
fn protobuf_body(rt: &ResourceType, body: &[u8], accept: &str) -> Result<Value, ApiError> {
    let takes_json = accept.trim().is_empty()
        || accept.split(',').any(|range| {
            matches!(
                media_params(range).0.as_str(),
                "application/json" | "*/*" | "application/*"
            )
        });
    if !takes_json {
        return Err(ApiError::new(
            406,
            "NotAcceptable",
            format!(
                "this test server answers in application/json only, which the request's Accept ({accept}) does not allow"
            ),
        ));
    }
    let object = super::protobuf::decode(body).map_err(|refusal| match refusal {
        super::protobuf::Refusal::Malformed(message) => ApiError::new(400, "BadRequest", message),
        super::protobuf::Refusal::Unsupported(message) => {
            ApiError::new(415, "UnsupportedMediaType", message)
        }
    })?;
    if object["kind"] != rt.kind.as_str() || object["apiVersion"] != rt.api_version().as_str() {
        return Err(ApiError::new(
            400,
            "BadRequest",
            format!(
                "the body carries {} {}, not {} {} as the URL says",
                object["apiVersion"].as_str().unwrap_or(""),
                object["kind"].as_str().unwrap_or(""),
                rt.api_version(),
                rt.kind
            ),
        ));
    }
    Ok(object)
}

fn selectors(query: &HashMap<String, String>) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let bad = |message: String| ApiError::new(400, "BadRequest", message);
    let labels =
        LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str)).map_err(bad)?;
    let fields =
        FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str)).map_err(bad)?;
    Ok((labels, fields))
}

#[allow(clippy::too_many_arguments)]
async fn resource(
    shared: &Arc<Shared>,
    method: &Method,
    group: &str,
    version: &str,
    rest: &[&str],
    query: &HashMap<String, String>,
    headers: &http::HeaderMap,
    accept: &str,
    body: Bytes,
) -> Response<Body> {
    let mut state = shared.lock();
    let target = match target(&state, group, version, rest) {
        Ok(target) => target,
        Err(e) => return error(&e),
    };
    let rt = &target.rt;
    let namespace = target.namespace.clone().unwrap_or_default();
    let repr = representation(accept);
    let verb = match (method.clone(), target.name.is_some()) {
        (Method::GET, true) => "get",
        (Method::GET, false) if query.get("watch").is_some_and(|v| v == "true" || v == "1") => {
            "watch"
        }
        (Method::GET, false) => "list",
        (Method::POST, _) => "create",
        (Method::PUT, _) => "update",
        (Method::PATCH, _) => "patch",
        (Method::DELETE, _) => "delete",
        _ => "other",
    };
    let what = match &target.sub {
        Some(sub) => format!("{}/{sub}", rt.resource_name()),
        None => rt.resource_name(),
    };
    state.count_request(verb, &what);
    if matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        state.count_write(rt);
        if query.get("dryRun").is_some_and(|v| !v.is_empty()) {
            return error(&ApiError::new(
                400,
                "BadRequest",
                "dryRun is not supported by this test server".into(),
            ));
        }
    }
    let user_agent = headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|ua| !ua.is_empty())
        .unwrap_or("unknown");
    let ctx = WriteCtx {
        manager: query
            .get("fieldManager")
            .cloned()
            .unwrap_or_else(|| user_agent.to_owned()),
        validation: match query.get("fieldValidation").map(String::as_str) {
            Some("Strict") => Validation::Strict,
            Some("Ignore") => Validation::Ignore,
            _ => Validation::Warn,
        },
        force: query.get("force").is_some_and(|v| v == "true"),
    };
    let body_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_lowercase();
    let parse_body = || -> Result<Value, ApiError> {
        if body.is_empty() {
            return Ok(json!({}));
        }
        if body_type == super::protobuf::MEDIA_TYPE {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                "this test server decodes protobuf bodies only when creating a v1 Namespace or ConfigMap - accepted media types include: application/json".to_owned(),
            ));
        }
        if !matches!(body_type.as_str(), "" | "application/json" | "*/*") {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: application/json".to_owned(),
            ));
        }
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::new(
                400,
                "BadRequest",
                format!("the body of the request could not be decoded as JSON: {e}"),
            )
        })
    };
    let sub = target.sub.as_deref();
    let rv_text = state.rv.to_string();
    let include_object = query
        .get("includeObject")
        .map_or("Metadata", String::as_str)
        .to_owned();
    let answer = |code: u16, object: &Value, warnings: &[String]| -> Response<Body> {
        let body = match repr {
            Repr::Table => table(
                rt,
                std::slice::from_ref(object),
                &rv_text,
                true,
                &include_object,
            ),
            Repr::Partial => partial_metadata(object),
            Repr::Plain => object.clone(),
        };
        json_response(code, &body, "application/json", warnings)
    };
    if let (Some("scale"), Some(name)) = (sub, target.name.as_deref()) {
        let content_type = body_type.clone();
        let result = match method.clone() {
            Method::GET => state.scale(rt, &namespace, name),
            Method::PUT => {
                parse_body().and_then(|body| state.update_scale(rt, &namespace, name, body, &ctx))
            }
            Method::PATCH => state.patch_scale(rt, &namespace, name, &content_type, &body, &ctx),
            _ => Err(ApiError::new(
                405,
                "MethodNotAllowed",
                format!(
                    "the server does not allow this method on the requested resource ({method})"
                ),
            )),
        };
        return match result {
            Ok(scale) => ok(&scale),
            Err(e) => error(&e),
        };
    }
    if let (Some("eviction"), Some(name)) = (sub, target.name.as_deref()) {
        if *method != Method::POST {
            return error(&ApiError::new(
                405,
                "MethodNotAllowed",
                format!(
                    "the server does not allow this method on the requested resource ({method})"
                ),
            ));
        }
        return match parse_body().and_then(|body| state.evict(rt, &namespace, name, body, &ctx)) {
            Ok((status, warnings)) => json_response(201, &status, "application/json", &warnings),
            Err(e) => error(&e),
        };
    }
    match (method.clone(), target.name.as_deref()) {
        (Method::GET, None) => {
            let (labels, fields) = match selectors(query) {
                Ok(selectors) => selectors,
                Err(e) => return error(&e),
            };
            if query.get("watch").is_some_and(|v| v == "true" || v == "1") {
                drop(state);
                return super::watching::start_watch(
                    shared.clone(),
                    target,
                    labels,
                    fields,
                    query,
                    repr,
                );
            }
            let items: Vec<Value> = state
                .list(rt, target.namespace.as_deref())
                .into_iter()
                .filter(|object| labels.matches(object) && fields.matches(object))
                .collect();
            let rv = state.rv.to_string();
            let body = match repr {
                Repr::Table => table(rt, &items, &rv, true, &include_object),
                Repr::Partial => json!({
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": {"resourceVersion": rv},
                    "items": items.iter().map(partial_metadata).collect::<Vec<_>>(),
                }),
                Repr::Plain => json!({
                    "kind": rt.list_kind,
                    "apiVersion": rt.api_version(),
                    "metadata": {"resourceVersion": rv},
                    "items": items,
                }),
            };
            ok(&body)
        }
        (Method::GET, Some(name)) => match state.get(rt, &namespace, name) {
            Some(object) => answer(200, &object, &[]),
            None => error(&not_found(rt, name)),
        },
        (Method::POST, None) if sub.is_none() && (target.namespace.is_some() || !rt.namespaced) => {
            let decoded = if body_type == super::protobuf::MEDIA_TYPE {
                protobuf_body(rt, &body, accept)
            } else {
                parse_body()
            };
            let result = decoded.and_then(|body| state.create(rt, &namespace, body, &ctx));
            match result {
                Ok(written) => answer(201, &written.object, &written.warnings),
                Err(e) => error(&e),
            }
        }
        (Method::PUT, Some(name)) => {
            let result =
                parse_body().and_then(|body| state.replace(rt, &namespace, name, body, sub, &ctx));
            match result {
                Ok(written) => answer(200, &written.object, &written.warnings),
                Err(e) => error(&e),
            }
        }
        (Method::PATCH, Some(name)) => {
            let content_type = headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_lowercase();
            if content_type == "application/apply-patch+yaml" && !query.contains_key("fieldManager")
            {
                return error(&ApiError::new(
                    400,
                    "BadRequest",
                    "PATCH /apply requires fieldManager: fieldManager is required for apply requests".into(),
                ));
            }
            match state.patch(rt, &namespace, name, &content_type, &body, sub, &ctx) {
                Ok(written) => {
                    let code = if written.created { 201 } else { 200 };
                    answer(code, &written.object, &written.warnings)
                }
                Err(e) => error(&e),
            }
        }
        (Method::DELETE, Some(name)) if sub.is_none() => {
            let result =
                parse_body().and_then(|options| state.delete(rt, &namespace, name, &options));
            match result {
                Ok(body) => answer(200, &body, &[]),
                Err(e) => error(&e),
            }
        }
        (Method::DELETE, None) if sub.is_none() => {
            let (labels, fields) = match selectors(query) {
                Ok(selectors) => selectors,
                Err(e) => return error(&e),
            };
            let chosen: Vec<Value> = state
                .list(rt, target.namespace.as_deref())
                .into_iter()
                .filter(|object| labels.matches(object) && fields.matches(object))
                .collect();
            let items = state.delete_collection(rt, &chosen);
            let rv = state.rv.to_string();
            ok(&json!({
                "kind": rt.list_kind,
                "apiVersion": rt.api_version(),
                "metadata": {"resourceVersion": rv},
                "items": items,
            }))
        }
        _ => error(&ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )),
    }
}
