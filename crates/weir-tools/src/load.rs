//! An open-loop, constant-rate HTTP load generator.
//!
//! Request `i` is due at `start + i / rate`, whatever happened to the requests before it: the
//! schedule never waits for responses, so a slow server cannot slow the load down and hide its
//! own slowness (coordinated omission). When [`LoadConfig::concurrency`] requests are already in
//! flight at a due time, that request is not sent and counts as *dropped (overload)*; the
//! schedule goes on. Latency is measured from a request's due time to the end of its response
//! body, so scheduler lateness counts against the server too, never in its favour.
//!
//! Requests are `GET`s (or `POST`s of a fixed body) over pooled keep-alive HTTP/1.1 connections (plain `http://` only). Each
//! request ends in exactly one outcome: a `2xx` ("ok"), another status (counted by class), a
//! connection error (cannot connect, or the connection broke before the body ended) or a
//! timeout ([`LoadConfig::timeout`] from the moment it was sent). So, at every moment,
//!
//! ```text
//! scheduled = dropped + sent
//! sent      = in_flight + ok + non_2xx + connection_errors + timeouts
//! ```
//!
//! and `in_flight` is 0 in the summary returned by [`LoadGenerator::run`].
//!
//! ```no_run
//! # async fn example() -> Result<(), weir_tools::load::LoadError> {
//! use std::time::Duration;
//! use weir_tools::load::{LoadConfig, LoadGenerator};
//!
//! let config = LoadConfig::new("http://127.0.0.1:8080/", 100.0, Some(Duration::from_secs(10)));
//! let generator = LoadGenerator::new(config)?;
//! let stats = generator.stats(); // read stats.snapshot() from another task while it runs
//! let summary = generator.run().await;
//! println!("{summary}");
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub use bytes::Bytes;
pub use http::header::{HeaderName, HeaderValue};
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::VERSION_HEADER;
use crate::histogram::Histogram;

/// At most this many distinct error messages are kept; further ones count under "other".
const MAX_ERROR_KINDS: usize = 16;

/// What load to generate.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The URL every request goes to, `http://HOST:PORT/PATH?QUERY`. `https` is refused.
    pub target: String,
    /// Requests per second (may be fractional, e.g. 0.5).
    pub rate: f64,
    /// How long to generate load; `None` runs until the `stop` future of
    /// [`LoadGenerator::run_until`] completes.
    pub duration: Option<Duration>,
    /// Most requests in flight at once (and so most connections); at least 1. Requests due
    /// while this many are in flight are dropped and counted, not delayed.
    pub concurrency: usize,
    /// Time allowed from sending a request to the end of its response body (also the connect
    /// timeout). Longer counts as a timeout.
    pub timeout: Duration,
    /// Extra headers sent with every request.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// A body: every request is then a `POST` of it (with `Content-Type: application/json`
    /// unless `headers` give one), e.g. an OFREP evaluation request.
    pub body: Option<Bytes>,
}

impl LoadConfig {
    /// `rate` requests per second to `target` for `duration`, with at most 256 in flight, a
    /// 5-second timeout and no extra headers.
    pub fn new(target: impl Into<String>, rate: f64, duration: Option<Duration>) -> LoadConfig {
        LoadConfig {
            target: target.into(),
            rate,
            duration,
            concurrency: 256,
            timeout: Duration::from_secs(5),
            headers: Vec::new(),
            body: None,
        }
    }
}

/// Why a load cannot start.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LoadError {
    /// The target is an `https://` URL.
    #[error(
        "cannot load {0}: https is not supported; the load generator speaks plain http:// \
         only, so point it at a plain-HTTP address (weir's router, or the service's own port)"
    )]
    Https(String),
    /// The target is not an absolute `http://HOST:PORT/...` URL.
    #[error("invalid target {target:?}: {reason}; expected e.g. http://127.0.0.1:8080/")]
    Target {
        /// The target as given.
        target: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The rate is not a positive, finite number.
    #[error("the rate must be a positive number of requests per second, got {0}")]
    Rate(f64),
    /// The concurrency is 0.
    #[error("the concurrency must be at least 1")]
    Concurrency,
    /// The timeout is zero.
    #[error("the timeout must be longer than 0")]
    Timeout,
}

/// Parses and checks a load target: an absolute `http://` URL with a host.
pub fn parse_target(target: &str) -> Result<Uri, LoadError> {
    let invalid = |reason: &str| LoadError::Target {
        target: target.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: Uri = target
        .trim()
        .parse()
        .map_err(|error: http::uri::InvalidUri| invalid(&error.to_string()))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(scheme) if scheme.eq_ignore_ascii_case("https") => {
            return Err(LoadError::Https(target.to_owned()));
        }
        Some(scheme) if scheme.eq_ignore_ascii_case("http") => {}
        Some(scheme) => return Err(invalid(&format!("unsupported scheme {scheme:?}"))),
        None => return Err(invalid("missing http:// scheme")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("missing host"));
    }
    Ok(uri)
}

/// Parses a `NAME:VALUE` header (spaces around the value are trimmed), e.g. `x-canary: 1`.
pub fn parse_header(text: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not a header: expected NAME:VALUE, e.g. x-canary:1"))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("{:?} is not a valid header name", name.trim()))?;
    let value = HeaderValue::from_str(value.trim())
        .map_err(|_| format!("{:?} is not a valid header value", value.trim()))?;
    Ok((name, value))
}

/// A configured load, ready to run.
#[derive(Debug)]
pub struct LoadGenerator {
    config: LoadConfig,
    uri: Uri,
    stats: LoadStats,
}

impl LoadGenerator {
    /// Checks `config` (target, rate, concurrency, timeout).
    pub fn new(config: LoadConfig) -> Result<LoadGenerator, LoadError> {
        let uri = parse_target(&config.target)?;
        if !(config.rate.is_finite() && config.rate > 0.0) {
            return Err(LoadError::Rate(config.rate));
        }
        if config.concurrency == 0 {
            return Err(LoadError::Concurrency);
        }
        if config.timeout.is_zero() {
            return Err(LoadError::Timeout);
        }
        let stats = LoadStats(Arc::new(Shared::new(&config)));
        Ok(LoadGenerator { config, uri, stats })
    }

    /// A handle on the live counters: [`LoadStats::snapshot`] can be called from any task or
    /// thread while the load runs (e.g. for a progress line), and after.
    pub fn stats(&self) -> LoadStats {
        self.stats.clone()
    }

    /// Runs for the configured duration, waits for the requests still in flight (at most the
    /// timeout), and returns the summary. With no duration, runs forever: use
    /// [`LoadGenerator::run_until`].
    pub async fn run(self) -> LoadSummary {
        self.run_until(std::future::pending()).await
    }

    /// Like [`LoadGenerator::run`], but stops scheduling early when `stop` completes.
    pub async fn run_until(self, stop: impl Future<Output = ()>) -> LoadSummary {
        let LoadGenerator { config, uri, stats } = self;
        let shared = stats.0.clone();
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.timeout));
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(config.concurrency)
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        let request = Arc::new(Template {
            uri,
            headers: config.headers.clone(),
            body: config.body.clone(),
        });
        let permits = Arc::new(Semaphore::new(config.concurrency));
        let mut tasks = JoinSet::new();
        let mut stop = std::pin::pin!(stop);

        let start = Instant::now();
        let _ = shared.start.set(start.into_std());
        let mut stopped = false;
        for i in 0u64.. {
            let offset = Duration::from_secs_f64(i as f64 / config.rate);
            if config.duration.is_some_and(|duration| offset >= duration) {
                break;
            }
            let due = start + offset;
            if due > Instant::now() {
                tokio::select! {
                    biased;
                    () = &mut stop => { stopped = true; break; }
                    () = tokio::time::sleep_until(due) => {}
                }
            }
            // Reap finished requests so the set stays as small as the concurrency.
            while tasks.try_join_next().is_some() {}
            shared.scheduled.fetch_add(1, Ordering::Relaxed);
            match permits.clone().try_acquire_owned() {
                Ok(permit) => {
                    shared.sent.fetch_add(1, Ordering::Relaxed);
                    let (client, request, shared) =
                        (client.clone(), request.clone(), shared.clone());
                    let timeout = config.timeout;
                    tasks.spawn(async move {
                        let outcome = send(&client, &request, timeout).await;
                        shared.record(outcome, due);
                        drop(permit);
                    });
                }
                Err(_) => {
                    shared.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        // A run of duration D ends at start + D even if its last request was due earlier.
        if let (false, Some(duration)) = (stopped, config.duration) {
            tokio::select! {
                biased;
                () = &mut stop => {}
                () = tokio::time::sleep_until(start + duration) => {}
            }
        }
        let _ = shared.schedule_end.set(Instant::now().into_std());
        while tasks.join_next().await.is_some() {}
        let _ = shared.end.set(Instant::now().into_std());
        stats.snapshot()
    }
}

/// Runs `config` to the end and returns its summary.
pub async fn run(config: LoadConfig) -> Result<LoadSummary, LoadError> {
    Ok(LoadGenerator::new(config)?.run().await)
}

#[derive(Debug)]
struct Template {
    uri: Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Option<Bytes>,
}

enum Outcome {
    Response {
        status: u16,
        version: Option<String>,
    },
    ConnectionError(String),
    Timeout,
}

async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    template: &Template,
    timeout: Duration,
) -> Outcome {
    let mut request = Request::new(Full::new(template.body.clone().unwrap_or_default()));
    *request.uri_mut() = template.uri.clone();
    for (name, value) in &template.headers {
        request.headers_mut().append(name.clone(), value.clone());
    }
    if template.body.is_some() {
        *request.method_mut() = http::Method::POST;
        if !request.headers().contains_key(http::header::CONTENT_TYPE) {
            request.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
    }
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|error| error_chain(&error))?;
        let (parts, body) = response.into_parts();
        body.collect().await.map_err(|error| error_chain(&error))?;
        let version = parts
            .headers
            .get(VERSION_HEADER)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        Ok::<_, String>(Outcome::Response {
            status: parts.status.as_u16(),
            version,
        })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(message)) => Outcome::ConnectionError(message),
        Err(_) => Outcome::Timeout,
    }
}

/// The error and its sources, `: `-separated, e.g. `client error (Connect): tcp connect error:
/// Connection refused (os error 111)`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// A live view of a running (or finished) load.
#[derive(Debug, Clone)]
pub struct LoadStats(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    target: String,
    rate: f64,
    duration: Option<Duration>,
    concurrency: usize,
    start: OnceLock<std::time::Instant>,
    schedule_end: OnceLock<std::time::Instant>,
    end: OnceLock<std::time::Instant>,
    scheduled: AtomicU64,
    sent: AtomicU64,
    dropped: AtomicU64,
    ok: AtomicU64,
    informational: AtomicU64,
    redirection: AtomicU64,
    client_error: AtomicU64,
    server_error: AtomicU64,
    connection_errors: AtomicU64,
    timeouts: AtomicU64,
    detail: Mutex<Detail>,
}

#[derive(Debug)]
struct Detail {
    latency: Histogram,
    by_version: BTreeMap<String, VersionCounts>,
    unversioned: u64,
    errors: BTreeMap<String, u64>,
}

impl fmt::Debug for Histogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count())
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn new(config: &LoadConfig) -> Shared {
        Shared {
            target: config.target.clone(),
            rate: config.rate,
            duration: config.duration,
            concurrency: config.concurrency,
            start: OnceLock::new(),
            schedule_end: OnceLock::new(),
            end: OnceLock::new(),
            scheduled: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            informational: AtomicU64::new(0),
            redirection: AtomicU64::new(0),
            client_error: AtomicU64::new(0),
            server_error: AtomicU64::new(0),
            connection_errors: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            detail: Mutex::new(Detail {
                latency: Histogram::new(),
                by_version: BTreeMap::new(),
                unversioned: 0,
                errors: BTreeMap::new(),
            }),
        }
    }

    fn detail(&self) -> std::sync::MutexGuard<'_, Detail> {
        // A panic while holding the lock cannot leave the counters inconsistent in a way that
        // matters for statistics, so a poisoned lock is still used.
        self.detail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, outcome: Outcome, due: Instant) {
        // Update the detail first and the outcome counter last, so a snapshot never sees an
        // outcome without its detail.
        let counter = match outcome {
            Outcome::Response { status, version } => {
                let micros = u64::try_from(due.elapsed().as_micros()).unwrap_or(u64::MAX);
                let ok = (200..300).contains(&status);
                let mut detail = self.detail();
                detail.latency.record(micros);
                match version {
                    Some(version) => {
                        let counts = detail.by_version.entry(version).or_default();
                        counts.requests += 1;
                        if ok {
                            counts.ok += 1;
                        } else {
                            counts.failed += 1;
                        }
                    }
                    None => detail.unversioned += 1,
                }
                drop(detail);
                match status {
                    200..=299 => &self.ok,
                    100..=199 => &self.informational,
                    300..=399 => &self.redirection,
                    400..=499 => &self.client_error,
                    _ => &self.server_error,
                }
            }
            Outcome::ConnectionError(message) => {
                let mut detail = self.detail();
                let kinds = detail.errors.len();
                let key = if kinds < MAX_ERROR_KINDS || detail.errors.contains_key(&message) {
                    message
                } else {
                    "other errors".to_owned()
                };
                *detail.errors.entry(key).or_default() += 1;
                drop(detail);
                &self.connection_errors
            }
            Outcome::Timeout => &self.timeouts,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl LoadStats {
    /// The counts so far. While the load runs, `in_flight` requests have no outcome yet; once
    /// [`LoadGenerator::run`] has returned, the snapshot equals its summary.
    pub fn snapshot(&self) -> LoadSummary {
        let shared = &self.0;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        // Outcomes first, then `sent`: every counted outcome belongs to a request already
        // counted as sent, so in_flight never underflows.
        let (ok, informational, redirection, client_error, server_error) = (
            load(&shared.ok),
            load(&shared.informational),
            load(&shared.redirection),
            load(&shared.client_error),
            load(&shared.server_error),
        );
        let (connection_errors, timeouts) =
            (load(&shared.connection_errors), load(&shared.timeouts));
        let dropped = load(&shared.dropped);
        let sent = load(&shared.sent);
        let scheduled = load(&shared.scheduled).max(sent + dropped);
        let non_2xx = informational + redirection + client_error + server_error;
        let done = ok + non_2xx + connection_errors + timeouts;
        let now = std::time::Instant::now();
        let (elapsed, schedule_elapsed) = match shared.start.get() {
            Some(&start) => {
                let end = shared.end.get().copied().unwrap_or(now);
                let schedule_end = shared.schedule_end.get().copied().unwrap_or(now);
                (end - start, schedule_end - start)
            }
            None => (Duration::ZERO, Duration::ZERO),
        };
        let detail = self.0.detail();
        let micros_to_ms = |micros: u64| micros as f64 / 1000.0;
        let latency = LatencySummary {
            count: detail.latency.count(),
            mean_ms: detail.latency.mean() / 1000.0,
            p50_ms: micros_to_ms(detail.latency.quantile(0.50)),
            p90_ms: micros_to_ms(detail.latency.quantile(0.90)),
            p99_ms: micros_to_ms(detail.latency.quantile(0.99)),
            max_ms: micros_to_ms(detail.latency.max()),
        };
        LoadSummary {
            target: shared.target.clone(),
            rate: shared.rate,
            duration_secs: shared.duration.map(|duration| duration.as_secs_f64()),
            concurrency: shared.concurrency,
            finished: shared.end.get().is_some(),
            elapsed_secs: elapsed.as_secs_f64(),
            achieved_rate: if schedule_elapsed.is_zero() {
                0.0
            } else {
                sent as f64 / schedule_elapsed.as_secs_f64()
            },
            scheduled,
            sent,
            dropped,
            in_flight: sent.saturating_sub(done),
            ok,
            failed: non_2xx + connection_errors + timeouts,
            status: StatusClasses {
                informational,
                redirection,
                client_error,
                server_error,
            },
            connection_errors,
            timeouts,
            latency,
            by_version: detail.by_version.clone(),
            unversioned: detail.unversioned,
            error_messages: detail.errors.clone(),
        }
    }
}

/// The counts of one version, from the `x-weir-version` response header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct VersionCounts {
    /// Responses this version sent.
    pub requests: u64,
    /// Of those, `2xx`.
    pub ok: u64,
    /// Of those, any other status.
    pub failed: u64,
}

/// Responses that were not `2xx`, by status class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatusClasses {
    /// `1xx` final statuses (unusual).
    #[serde(rename = "1xx")]
    pub informational: u64,
    /// `3xx` (redirects are not followed).
    #[serde(rename = "3xx")]
    pub redirection: u64,
    /// `4xx`.
    #[serde(rename = "4xx")]
    pub client_error: u64,
    /// `5xx`.
    #[serde(rename = "5xx")]
    pub server_error: u64,
}

impl StatusClasses {
    /// All non-`2xx` responses.
    pub fn total(&self) -> u64 {
        self.informational + self.redirection + self.client_error + self.server_error
    }
}

/// Latency of the requests that got a response (any status), from due time to the end of the
/// body, in milliseconds. Percentiles come from a log-linear histogram (at most 1.6% high).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Responses measured.
    pub count: u64,
    /// Arithmetic mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest (exact).
    pub max_ms: f64,
}

/// What a load did: a live snapshot ([`LoadStats::snapshot`]) or the final result
/// ([`LoadGenerator::run`]). Serializes to JSON; `Display` is a short human report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadSummary {
    /// The target URL.
    pub target: String,
    /// The requested rate, requests per second.
    pub rate: f64,
    /// The requested duration in seconds (`null`: until stopped).
    pub duration_secs: Option<f64>,
    /// Most requests in flight.
    pub concurrency: usize,
    /// Whether the load is over (all outcomes known).
    pub finished: bool,
    /// Seconds since the start (to the last response, once finished).
    pub elapsed_secs: f64,
    /// Requests actually sent per second of schedule.
    pub achieved_rate: f64,
    /// Requests due so far: `dropped + sent`.
    pub scheduled: u64,
    /// Requests sent: `in_flight + ok + failed`.
    pub sent: u64,
    /// Requests not sent because `concurrency` requests were in flight (overload).
    pub dropped: u64,
    /// Requests sent and not yet answered (0 once finished).
    pub in_flight: u64,
    /// `2xx` responses.
    pub ok: u64,
    /// Every other outcome: non-`2xx` statuses, connection errors and timeouts.
    pub failed: u64,
    /// Non-`2xx` responses by status class.
    pub status: StatusClasses,
    /// Requests that could not connect, or whose connection broke.
    pub connection_errors: u64,
    /// Requests with no complete response within the timeout.
    pub timeouts: u64,
    /// Latency of the responses.
    pub latency: LatencySummary,
    /// Responses per version (`x-weir-version` header).
    pub by_version: BTreeMap<String, VersionCounts>,
    /// Responses without an `x-weir-version` header.
    pub unversioned: u64,
    /// Connection errors by message (at most 16 distinct messages; the rest as "other errors").
    pub error_messages: BTreeMap<String, u64>,
}

impl fmt::Display for LoadSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let duration = match self.duration_secs {
            Some(secs) => format!("for {secs}s"),
            None => "until stopped".to_owned(),
        };
        writeln!(
            f,
            "load: {} at {} req/s {duration} (concurrency {}){}",
            self.target,
            self.rate,
            self.concurrency,
            if self.finished { "" } else { " - running" },
        )?;
        writeln!(
            f,
            "  requests: {} sent in {:.1}s ({:.1} req/s), {} dropped (overload){}",
            self.sent,
            self.elapsed_secs,
            self.achieved_rate,
            self.dropped,
            if self.in_flight > 0 {
                format!(", {} in flight", self.in_flight)
            } else {
                String::new()
            },
        )?;
        let percent = |count: u64| {
            if self.sent == 0 {
                0.0
            } else {
                count as f64 * 100.0 / self.sent as f64
            }
        };
        writeln!(
            f,
            "  outcomes: {} ok (2xx, {:.2}%), {} failed ({:.2}%): {} 5xx, {} 4xx, {} 3xx, {} 1xx, \
             {} connection errors, {} timeouts",
            self.ok,
            percent(self.ok),
            self.failed,
            percent(self.failed),
            self.status.server_error,
            self.status.client_error,
            self.status.redirection,
            self.status.informational,
            self.connection_errors,
            self.timeouts,
        )?;
        if self.latency.count > 0 {
            writeln!(
                f,
                "  latency: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms (mean {:.1} ms)",
                self.latency.p50_ms,
                self.latency.p90_ms,
                self.latency.p99_ms,
                self.latency.max_ms,
                self.latency.mean_ms,
            )?;
        }
        for (version, counts) in &self.by_version {
            writeln!(
                f,
                "  version {version}: {} responses, {} ok, {} failed",
                counts.requests, counts.ok, counts.failed
            )?;
        }
        if self.unversioned > 0 {
            writeln!(
                f,
                "  no x-weir-version header: {} responses",
                self.unversioned
            )?;
        }
        for (message, count) in &self.error_messages {
            writeln!(f, "  error x{count}: {message}")?;
        }
        Ok(())
    }
}
