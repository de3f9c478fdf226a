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
    request_with_timeout(
        address,
        method,
        path,
        headers,
        body,
        Duration::from_secs(30),
    )
}

/// [`request`], waiting up to `timeout` for the answer (a WebDriver call that starts a browser
/// takes longer than a request to weir).
pub fn request_with_timeout(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    timeout: Duration,
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
    raw_with_timeout(address, &text, timeout)
}

/// Sends `text` as it is (a request head and body, e.g. an HTTP/1.0 request without `Host`) and
/// reads the answer until the server closes the connection; `None` when nothing answers.
pub fn raw(address: SocketAddr, text: &str) -> Option<Response> {
    raw_with_timeout(address, text, Duration::from_secs(30))
}

fn raw_with_timeout(address: SocketAddr, text: &str, timeout: Duration) -> Option<Response> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.write_all(text.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some(Response {
        status,
        head: head.to_string(),
        body: body.to_string(),
    })
}

/// The payload of a `Transfer-Encoding: chunked` body (sizes in hex, each chunk followed by
/// CRLF, a zero-size chunk at the end); what cannot be parsed is returned as it is. Works on
/// bytes: a chunk may end inside a character.
pub fn dechunk(body: &str) -> String {
    let bytes = body.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let Some(line_end) = bytes[at..].windows(2).position(|pair| pair == b"\r\n") else {
            return body.to_string();
        };
        let size_text = String::from_utf8_lossy(&bytes[at..at + line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let Ok(size) = usize::from_str_radix(size_text, 16) else {
            return body.to_string();
        };
        if size == 0 {
            return String::from_utf8_lossy(&out).into_owned();
        }
        let start = at + line_end + 2;
        let Some(chunk) = bytes.get(start..start + size) else {
            return body.to_string();
        };
        out.extend_from_slice(chunk);
        at = (start + size + 2).min(bytes.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_is_joined() {
        assert_eq!(
            dechunk("5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n"),
            "hello, world"
        );
        assert_eq!(dechunk("not chunked"), "not chunked");
    }
}
