//! Shared pieces of the integration tests: sample apps on loopback and a plain client.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use weir_tools::sample_app::{SampleApp, SampleAppConfig, SampleAppStats};

/// Fails the test instead of hanging it forever if something deadlocks. Not a timing
/// assertion: the bound is far above any plausible run time.
pub async fn guard<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("test hung")
}

/// A sample app serving on a loopback port until dropped or stopped.
pub struct RunningApp {
    pub addr: SocketAddr,
    pub stats: SampleAppStats,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl RunningApp {
    pub async fn start(version: &str, configure: impl FnOnce(&mut SampleAppConfig)) -> RunningApp {
        let mut config = SampleAppConfig::new("127.0.0.1:0".parse().unwrap(), version);
        configure(&mut config);
        let app = SampleApp::bind(config).await.unwrap();
        let addr = app.local_addr();
        assert_ne!(addr.port(), 0);
        let stats = app.stats();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            app.serve(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        RunningApp {
            addr,
            stats,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops the app and waits for `serve` to return.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap();
    }
}

pub struct Answer {
    pub status: StatusCode,
    pub version_header: Option<String>,
    pub content_type: Option<String>,
    pub body: String,
}

pub fn client() -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

pub async fn get(client: &Client<HttpConnector, Empty<Bytes>>, url: &str) -> Answer {
    let request = Request::get(url).body(Empty::new()).unwrap();
    let response = client.request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
    };
    Answer {
        status: parts.status,
        version_header: header("x-weir-version"),
        content_type: header("content-type"),
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}
