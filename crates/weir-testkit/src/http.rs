//! One-shot HTTP/1.1 over loopback, blocking: for tests that drive a `weir` process and have no
//! runtime of their own. Each request opens a connection and closes it (`Connection: close`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// An answer: the status code, the head (status line and headers) and the body as text.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The status line and the headers, as received.
    pub head: String,
    /// The body (chunked bodies are left as sent).
    pub body: String,
}

impl Response {
    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }
}

/// `GET path`; `None` when nothing answers (not listening yet, reset, timed out).
pub fn get(address: SocketAddr, path: &str) -> Option<Response> {
    request(address, "GET", path, &[], "")
}

/// One request with `headers` and `body`; `None` when nothing answers. The `Host` header is
/// `address` unless `headers` has one of its own (tests of weir's Host checks send others).
pub fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<Response> {
    let mut text = format!("{method} {path} HTTP/1.1\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        text.push_str(&format!("Host: {address}\r\n"));
    }
    text.push_str(&format!(
        "Connection: close\r\nContent-Length: {}\r\n",
        body.len()
    ));
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    raw(address, &text)
}

/// Sends `text` as it is (a request head and body, e.g. an HTTP/1.0 request without `Host`) and
/// reads the answer until the server closes the connection; `None` when nothing answers.
///
/// The request is written on a thread of its own while the answer is read: a server may answer
/// (413, 431) before it has read a large body and then close, and a client that finished
/// writing first could see its write fail or the answer discarded by the reset that follows.
/// An answer cut by a reset is kept when it is whole (its `Content-Length` arrived).
pub fn raw(address: SocketAddr, text: &str) -> Option<Response> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let mut writer = stream.try_clone().ok()?;
    let request = text.as_bytes().to_vec();
    let writing = std::thread::spawn(move || writer.write_all(&request).is_ok());
    let mut answer = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    let ended = loop {
        match stream.read(&mut buffer) {
            Ok(0) => break true,
            Ok(read) => answer.extend_from_slice(&buffer[..read]),
            Err(_) => break false,
        }
    };
    // Unblocks a write the server stopped reading.
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = writing.join();
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let response = Response {
        status,
        head: head.to_string(),
        body: body.to_string(),
    };
    let whole = || {
        response
            .header("content-length")
            .and_then(|length| length.parse::<usize>().ok())
            .is_some_and(|length| response.body.len() >= length)
    };
    (ended || whole()).then_some(response)
}

/// A response whose body is still arriving (Server-Sent Events): the head, and the body read so
/// far (in its transfer encoding: chunk sizes appear among the text).
#[derive(Debug)]
pub struct Stream {
    /// The status code.
    pub status: u16,
    /// The status line and the headers.
    pub head: String,
    /// The body received so far.
    pub received: String,
    stream: TcpStream,
}

/// Sends a GET of `path` with `headers` and returns once the answer's head has arrived; `None`
/// when nothing answers.
pub fn open_stream(address: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Option<Stream> {
    let mut text = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .ok()?;
    stream.write_all(text.as_bytes()).ok()?;
    let mut open = Stream {
        status: 0,
        head: String::new(),
        received: String::new(),
        stream,
    };
    if !open.read_until("\r\n\r\n") {
        return None;
    }
    let (head, body) = open.received.split_once("\r\n\r\n")?;
    open.status = head.split_whitespace().nth(1)?.parse().ok()?;
    open.head = head.to_string();
    open.received = body.to_string();
    Some(open)
}

impl Stream {
    /// Reads until the body holds `text` (true), the server closes it or [`DEADLINE`] passes
    /// (false).
    ///
    /// [`DEADLINE`]: crate::wait::DEADLINE
    pub fn read_until(&mut self, text: &str) -> bool {
        let deadline = std::time::Instant::now() + crate::wait::DEADLINE;
        let mut buffer = [0u8; 4096];
        while !self.received.contains(text) {
            if std::time::Instant::now() > deadline {
                return false;
            }
            match self.stream.read(&mut buffer) {
                Ok(0) => return false,
                Ok(count) => self
                    .received
                    .push_str(&String::from_utf8_lossy(&buffer[..count])),
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// A header's value (the first of that name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }
}
