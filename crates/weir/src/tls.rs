//! HTTPS for `weir serve` (`--tls-cert`, `--tls-key`) and the trust of the client verbs
//! (`--ca`).
//!
//! The server side is [`ApiListener`], which [`crate::http_server::serve`] serves (its limits,
//! timeouts and graceful shutdown are the same with TLS and without). With TLS, each accepted
//! connection's handshake runs in the connection's own task, bounded by [`HANDSHAKE_TIMEOUT`],
//! so a slow or broken client never holds up another one. A plain-HTTP request sent to the
//! HTTPS port gets a short 400 answer saying to use https://, then the connection is closed.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use weir_http::tls::Roots;

/// How long a client has, from connecting, to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// `--tls-cert` and `--tls-key` of `weir serve`.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeTlsArgs {
    /// Serve HTTPS with the certificate chain in this PEM file (the server's certificate
    /// first, then any intermediates), with --tls-key. Everything on the listener (the API,
    /// OFREP, Server-Sent Events, /metrics) is then HTTPS only. Example: --tls-cert
    /// /etc/weir/tls/cert.pem. Default: plain HTTP.
    #[arg(long = "tls-cert", value_name = "PEM", env = "WEIR_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert's certificate, PEM (PKCS#8, PKCS#1 or SEC1). Example:
    /// --tls-key /etc/weir/tls/key.pem.
    #[arg(long = "tls-key", value_name = "PEM", env = "WEIR_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
}

impl ServeTlsArgs {
    /// The TLS configuration these flags ask for: none without them; an error naming the flag
    /// when only one is given, or a file cannot be used (missing, no certificate or key in
    /// it, a key that is not the certificate's).
    pub fn load(&self) -> Result<Option<Arc<rustls::ServerConfig>>> {
        let (cert, key) = match (&self.tls_cert, &self.tls_key) {
            (None, None) => return Ok(None),
            (Some(cert), Some(key)) => (cert, key),
            (Some(_), None) => bail!(
                "--tls-cert is given but --tls-key is not: HTTPS needs both, the certificate \
                 and its private key (--tls-key PEM or WEIR_TLS_KEY)"
            ),
            (None, Some(_)) => bail!(
                "--tls-key is given but --tls-cert is not: HTTPS needs both, the certificate \
                 and its private key (--tls-cert PEM or WEIR_TLS_CERT)"
            ),
        };
        let config = weir_http::tls::server_config(cert, key).map_err(|error| {
            anyhow::anyhow!("cannot serve HTTPS (--tls-cert, --tls-key): {error}")
        })?;
        Ok(Some(Arc::new(config)))
    }
}

/// `--ca` of the client verbs.
#[derive(Debug, Clone, Default, Args)]
pub struct ClientTlsArgs {
    /// Trust only the certificate authority (or self-signed certificate) in this PEM file
    /// when the server is https://, instead of the host's trust store, e.g. the CA that
    /// signed `weir serve --tls-cert`. The server's name or IP address in --server must be
    /// one its certificate names. Example: --server https://weir.internal:7979 --ca ca.pem.
    #[arg(long, global = true, value_name = "PEM", env = "WEIR_CA")]
    pub ca: Option<PathBuf>,
}

impl ClientTlsArgs {
    /// The roots an https:// server's certificate is verified against: the `--ca` file's
    /// certificates only, or the host's trust store (read only when `server` is https://: a
    /// plain-HTTP server needs none, and reading the store takes a moment).
    pub fn roots(&self, server: &str) -> Result<Roots> {
        match &self.ca {
            None if server
                .get(..8)
                .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://")) =>
            {
                Ok(Roots::System)
            }
            None => Ok(Roots::Mozilla),
            Some(path) => weir_http::tls::read_certificates(path)
                .map(Roots::Only)
                .map_err(|error| anyhow::anyhow!("--ca: {error}")),
        }
    }

    /// What to tell a person whose server's certificate was not accepted.
    pub fn hint(&self) -> String {
        match &self.ca {
            None => "if the server's certificate comes from a private CA or is self-signed, \
                     pass that CA with --ca PEM (or WEIR_CA); docs/SECURITY.md, \"TLS\""
                .to_string(),
            Some(path) => format!(
                "--ca {} is the only CA trusted: is it the CA that signed the server's \
                 certificate, and does that certificate name the host in --server? \
                 docs/SECURITY.md, \"TLS\"",
                path.display()
            ),
        }
    }
}

/// Where `weir serve` (and `weir operator`) accept connections: plain TCP, or TLS over it.
/// [`crate::http_server::serve`] accepts from it, and does each TLS handshake (with
/// [`handshake`], bounded by [`HANDSHAKE_TIMEOUT`]) in the connection's own task.
pub struct ApiListener {
    /// The bound address (none if the system would not say).
    local: Option<SocketAddr>,
    tcp: TcpListener,
    /// TLS, when served.
    tls: Option<TlsAcceptor>,
}

impl From<TcpListener> for ApiListener {
    fn from(listener: TcpListener) -> Self {
        ApiListener::plain(listener)
    }
}

impl ApiListener {
    /// Plain HTTP on `listener`.
    pub fn plain(listener: TcpListener) -> ApiListener {
        ApiListener {
            local: listener.local_addr().ok(),
            tcp: listener,
            tls: None,
        }
    }

    /// HTTPS on `listener` with `config`.
    pub fn tls(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> ApiListener {
        ApiListener {
            local: listener.local_addr().ok(),
            tcp: listener,
            tls: Some(TlsAcceptor::from(config)),
        }
    }

    /// `plain` or `tls`, as `config` says.
    pub fn new(listener: TcpListener, config: Option<Arc<rustls::ServerConfig>>) -> ApiListener {
        match config {
            Some(config) => ApiListener::tls(listener, config),
            None => ApiListener::plain(listener),
        }
    }

    /// Whether connections are served over TLS (HTTPS). The session cookie is marked `Secure`
    /// when they are.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        if self.is_tls() { "https" } else { "http" }
    }

    /// The socket connections are accepted from.
    pub(crate) fn tcp(&self) -> &TcpListener {
        &self.tcp
    }

    /// What makes an accepted connection TLS, when the listener serves HTTPS.
    pub(crate) fn acceptor(&self) -> Option<TlsAcceptor> {
        self.tls.clone()
    }
}

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The TLS handshake of one connection; `None` when it fails. A connection that starts like an
/// HTTP request gets [`answer_plain_http`] instead.
pub(crate) async fn handshake(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
) -> Option<TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    if tcp.peek(&mut first).await.ok()? == 0 {
        return None;
    }
    if first[0] != TLS_HANDSHAKE_RECORD {
        if first[0].is_ascii_uppercase() {
            answer_plain_http(tcp).await;
        }
        return None;
    }
    match acceptor.accept(tcp).await {
        Ok(stream) => Some(stream),
        Err(error) => {
            tracing::debug!("a TLS handshake failed: {error}");
            None
        }
    }
}

/// The most of a plain-HTTP request read before answering it.
const PLAIN_REQUEST_LIMIT: usize = 16 * 1024;

/// Answers a plain-HTTP request sent to the HTTPS port with 400 in the API's error shape, saying
/// to use https://, and closes the connection (after reading what the client sent, so the close
/// does not reset the connection before the client reads the answer).
async fn answer_plain_http(mut tcp: TcpStream) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 2048];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < PLAIN_REQUEST_LIMIT {
        match tcp.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => head.extend_from_slice(&buffer[..read]),
        }
    }
    let host = host_of(&head);
    let message = match host {
        Some(host) => format!(
            "this server speaks HTTPS only: send the request to https://{host} instead of \
             http://{host}"
        ),
        None => "this server speaks HTTPS only: use an https:// URL".to_string(),
    };
    let body = serde_json::to_string(&weir_api::types::ErrorBody {
        error: weir_api::types::ErrorDetail {
            code: weir_api::ErrorCode::Invalid,
            message,
            errors: Vec::new(),
        },
    })
    .unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    if tcp.write_all(answer.as_bytes()).await.is_err() || tcp.shutdown().await.is_err() {
        return;
    }
    // Whatever else the client sends (a body) is read and dropped until it closes its side.
    let mut drained = 0;
    while drained < PLAIN_REQUEST_LIMIT * 4 {
        match tcp.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => drained += read,
        }
    }
}

/// The `Host` header of a request head, when it is a plausible host name and port (it is echoed
/// in the answer).
fn host_of(head: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(head).ok()?;
    let value = text.lines().skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("host")
            .then(|| value.trim().to_string())
    })?;
    let plausible = !value.is_empty()
        && value.len() <= 255
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]_".contains(c));
    plausible.then_some(value)
}

/// A connection of [`ApiListener`]: plain or TLS.
pub enum ApiStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP (boxed: its state is large).
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for ApiStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ApiStream::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            ApiStream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ApiStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ApiStream::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            ApiStream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ApiStream::Plain(stream) => Pin::new(stream).poll_flush(cx),
            ApiStream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ApiStream::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            ApiStream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ApiStream::Plain(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            ApiStream::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ApiStream::Plain(stream) => stream.is_write_vectored(),
            ApiStream::Tls(stream) => stream.is_write_vectored(),
        }
    }
}

/// Says on stderr when the API is served in plain HTTP on an address other machines can reach.
pub fn warn_if_plain_on_network(listener: &ApiListener) {
    let Some(local) = listener.local else {
        return;
    };
    if !listener.is_tls() && !local.ip().is_loopback() {
        eprintln!(
            "warning: serving plain HTTP on {local}: requests and answers (tokens included) cross the \
             network unencrypted; give --tls-cert and --tls-key, or put a TLS proxy in front \
             (docs/SECURITY.md, \"TLS\")"
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::net::SocketAddr;

    use axum::extract::ConnectInfo;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use weir_testkit::tls::{TlsFiles, connect};

    use super::{ApiListener, host_of};

    /// Handlers can read the client's address over TLS as over plain TCP (rate limits per
    /// client address need it): axum's `ConnectInfo<SocketAddr>`, which the server adds to
    /// every request.
    #[tokio::test]
    async fn handlers_see_the_client_address_over_tls() {
        let files = TlsFiles::generate();
        let config = weir_http::tls::server_config(&files.cert, &files.key).unwrap();
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = tcp.local_addr().unwrap();
        let listener = ApiListener::tls(tcp, std::sync::Arc::new(config));
        assert!(listener.is_tls());
        let app = axum::Router::new().route(
            "/peer",
            axum::routing::get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                peer.to_string()
            }),
        );
        tokio::spawn(crate::http_server::serve(
            listener,
            app,
            crate::http_server::Limits::default(),
            std::future::pending(),
        ));
        let mut stream = connect(address, &files.ca, "localhost").await;
        let local = stream.get_ref().0.local_addr().unwrap();
        stream
            .write_all(b"GET /peer HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(&local.to_string()), "{answer}");
    }

    #[test]
    fn the_host_of_a_plain_request_is_echoed_only_when_plausible() {
        assert_eq!(
            host_of(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:7979\r\n\r\n").as_deref(),
            Some("127.0.0.1:7979")
        );
        assert_eq!(
            host_of(b"GET / HTTP/1.1\r\nhost: weir.example\r\n\r\n").as_deref(),
            Some("weir.example")
        );
        assert_eq!(host_of(b"GET / HTTP/1.1\r\nHost: a<b>\r\n\r\n"), None);
        assert_eq!(host_of(b"GET / HTTP/1.0\r\n\r\n"), None);
    }
}
