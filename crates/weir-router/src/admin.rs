//! The admin endpoint: Prometheus text exposition of every listener's metrics.
//!
//! Separate from the data listeners so scraping can be bound to a private address and so a
//! scrape never competes with client connection limits. `GET /metrics` renders the metrics,
//! `GET /healthz` answers `ok`; anything else is 404.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::body::ProxyBody;
use crate::metrics::render_prometheus;
use crate::server::RouteHandle;

fn respond(handles: &[RouteHandle], request: &Request<Incoming>) -> Response<ProxyBody> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => {
            let listeners: Vec<_> = handles
                .iter()
                .map(|h| (h.metrics(), h.table().spec().canary_weight.ratio()))
                .collect();
            (
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                render_prometheus(&listeners),
            )
        }
        (&Method::GET, "/healthz") => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "ok\n".to_owned(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: try /metrics\n".to_owned(),
        ),
    };
    let mut response = Response::new(ProxyBody::full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Serves `GET /metrics` (Prometheus text for all `handles`) and `GET /healthz` on `listener`
/// until `shutdown` completes.
pub async fn serve_admin(
    listener: TcpListener,
    handles: Vec<RouteHandle>,
    shutdown: impl Future<Output = ()>,
) {
    let handles = Arc::new(handles);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let handles = handles.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let response = respond(&handles, &request);
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
