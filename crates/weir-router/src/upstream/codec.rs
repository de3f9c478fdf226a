//! HTTP/1.1 to upstreams, sans I/O: encoding request heads and body chunks, parsing response
//! heads, and decoding response bodies out of a read buffer (RFC 9112).
//!
//! Everything here works on byte buffers; the connection code around it reads and writes
//! sockets. Response bodies are cut out of the read buffer as shared `Bytes`, so a body travels
//! from the upstream's socket to the client's without being copied; header values share the
//! head's bytes the same way.

use std::mem::MaybeUninit;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode, Version};

/// Most response header fields accepted (more is a protocol error: 502).
const MAX_HEADERS: usize = 100;
/// Longest chunk-size line (with extensions) or trailer section accepted.
const MAX_CHUNK_LINE: usize = 4 * 1024;
const MAX_TRAILERS: usize = 16 * 1024;

/// The upstream broke HTTP/1.1 (answered with 502).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid response from the upstream: {0}")]
pub(crate) struct ProtocolError(pub(crate) &'static str);

/// How a request body is framed on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestFraming {
    /// No body (nothing after the head).
    Empty,
    /// `Content-Length` bytes, as the request's own field says.
    Length,
    /// Chunked transfer coding (the length is unknown up front).
    Chunked,
}

/// Appends the request head to `out`: request line, fields, the framing field chunked bodies
/// need, and the empty line.
pub(crate) fn encode_request_head(
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    framing: RequestFraming,
    out: &mut BytesMut,
) {
    out.reserve(64 + target.len() + headers.len() * 32);
    out.put_slice(method.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(target.as_bytes());
    out.put_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    if framing == RequestFraming::Chunked {
        out.put_slice(b"transfer-encoding: chunked\r\n");
    }
    out.put_slice(b"\r\n");
}

/// Appends the framing that precedes a chunk of `len` bytes.
pub(crate) fn encode_chunk_start(len: usize, out: &mut BytesMut) {
    out.put_slice(format!("{len:x}\r\n").as_bytes());
}

/// What ends a chunk, and what ends a chunked body.
pub(crate) const CHUNK_END: &[u8] = b"\r\n";
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// A parsed response head.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    pub(crate) response: Response<()>,
    pub(crate) body: BodyDecoder,
    /// The connection may carry another request once this response has been read.
    pub(crate) keep_alive: bool,
}

/// Parses a response head from the front of `buf`, removing it. `Ok(None)`: the head is not
/// complete yet. Interim (1xx) responses are parsed like any other; the caller skips them.
pub(crate) fn parse_response_head(
    buf: &mut BytesMut,
    method: &Method,
    max_head: usize,
) -> Result<Option<ResponseHead>, ProtocolError> {
    // httparse's defaults: strict about what a response head may contain.
    let config = httparse::ParserConfig::default();
    // First pass: where the head ends (and whether it is complete). The field slots are left
    // uninitialised: zeroing them would cost more than parsing a typical head.
    let head_len = {
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut []);
        match config.parse_response_with_uninit_headers(&mut response, buf, &mut fields) {
            Ok(len) => len,
            Err(httparse::Error::TooManyHeaders) => {
                return Err(ProtocolError("too many response header fields"));
            }
            Err(_) => return Err(ProtocolError("malformed response head")),
        }
    };
    let head_len = match head_len {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial if buf.len() > max_head => {
            return Err(ProtocolError("response head too large"));
        }
        httparse::Status::Partial => return Ok(None),
    };
    // Second pass over the frozen head, so field values can share its bytes.
    let head = buf.split_to(head_len).freeze();
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    if !matches!(
        config.parse_response_with_uninit_headers(&mut parsed, &head, &mut fields),
        Ok(httparse::Status::Complete(_))
    ) {
        return Err(ProtocolError("malformed response head"));
    }
    let status = parsed
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(ProtocolError("invalid status code"))?;
    let version = if parsed.version == Some(1) {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    let mut headers = HeaderMap::with_capacity(parsed.headers.len());
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| ProtocolError("invalid header field name"))?;
        let value = HeaderValue::from_maybe_shared(head.slice_ref(field.value))
            .map_err(|_| ProtocolError("invalid header field value"))?;
        headers.append(name, value);
    }

    let mut keep_alive = version == Version::HTTP_11;
    for value in headers.get_all(header::CONNECTION) {
        for token in value.to_str().unwrap_or("").split(',') {
            let token = token.trim();
            if token.eq_ignore_ascii_case("close") {
                keep_alive = false;
            } else if token.eq_ignore_ascii_case("keep-alive") && version == Version::HTTP_10 {
                keep_alive = true;
            }
        }
    }
    let body = body_framing(status, method, &headers)?;
    if matches!(body, BodyDecoder::UntilClose) {
        keep_alive = false; // the end of the body is the end of the connection
    }
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = version;
    *response.headers_mut() = headers;
    Ok(Some(ResponseHead {
        response,
        body,
        keep_alive,
    }))
}

/// How the body of a response is delimited (RFC 9112 section 6.3).
fn body_framing(
    status: StatusCode,
    method: &Method,
    headers: &HeaderMap,
) -> Result<BodyDecoder, ProtocolError> {
    if method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(BodyDecoder::Done);
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        // Chunked only when it is the final coding; otherwise the body runs to the close.
        let last = headers
            .get_all(header::TRANSFER_ENCODING)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .rfind(|coding| !coding.is_empty());
        return Ok(match last {
            Some(coding) if coding.eq_ignore_ascii_case("chunked") => {
                BodyDecoder::Chunked(Chunked::Size)
            }
            _ => BodyDecoder::UntilClose,
        });
    }
    let mut length = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for part in value.to_str().unwrap_or("x").split(',') {
            let parsed: u64 = part
                .trim()
                .parse()
                .map_err(|_| ProtocolError("invalid content-length"))?;
            if length.is_some_and(|seen| seen != parsed) {
                return Err(ProtocolError("conflicting content-length fields"));
            }
            length = Some(parsed);
        }
    }
    Ok(match length {
        Some(0) => BodyDecoder::Done,
        Some(n) => BodyDecoder::Length(n),
        None => BodyDecoder::UntilClose,
    })
}

/// Where a chunked body's decoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chunked {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk, this many bytes to go.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer fields until an empty line.
    Trailers,
}

/// Decodes one response body out of the connection's read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyDecoder {
    /// This many bytes to go.
    Length(u64),
    Chunked(Chunked),
    /// Everything until the upstream closes the connection.
    UntilClose,
    /// The body is complete.
    Done,
}

/// One step of [`BodyDecoder::decode`].
#[derive(Debug, PartialEq)]
pub(crate) enum Decoded {
    Data(Bytes),
    Trailers(HeaderMap),
    /// The body is complete.
    End,
    /// More bytes are needed from the connection.
    NeedMore,
}

impl BodyDecoder {
    /// The bytes still to come, when known.
    pub(crate) fn remaining(&self) -> Option<u64> {
        match self {
            BodyDecoder::Length(n) => Some(*n),
            BodyDecoder::Done => Some(0),
            _ => None,
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        matches!(self, BodyDecoder::Done)
    }

    /// Takes the next piece of the body from the front of `buf`. `eof`: the upstream has closed
    /// the connection, so `buf` holds everything there will be.
    pub(crate) fn decode(
        &mut self,
        buf: &mut BytesMut,
        eof: bool,
    ) -> Result<Decoded, ProtocolError> {
        loop {
            match *self {
                BodyDecoder::Done => return Ok(Decoded::End),
                BodyDecoder::Length(remaining) => {
                    if buf.is_empty() {
                        return if eof {
                            Err(ProtocolError("connection closed before the body ended"))
                        } else {
                            Ok(Decoded::NeedMore)
                        };
                    }
                    let take = usize::try_from(remaining).map_or(buf.len(), |r| r.min(buf.len()));
                    let left = remaining - take as u64;
                    *self = if left == 0 {
                        BodyDecoder::Done
                    } else {
                        BodyDecoder::Length(left)
                    };
                    return Ok(Decoded::Data(buf.split_to(take).freeze()));
                }
                BodyDecoder::UntilClose => {
                    if !buf.is_empty() {
                        return Ok(Decoded::Data(buf.split().freeze()));
                    }
                    if eof {
                        *self = BodyDecoder::Done;
                        return Ok(Decoded::End);
                    }
                    return Ok(Decoded::NeedMore);
                }
                BodyDecoder::Chunked(state) => match decode_chunked(state, buf)? {
                    (next, Some(decoded)) => {
                        *self = next;
                        return Ok(decoded);
                    }
                    (next, None) if next != *self => *self = next,
                    (_, None) if eof => {
                        return Err(ProtocolError("connection closed inside a chunked body"));
                    }
                    (_, None) => return Ok(Decoded::NeedMore),
                },
            }
        }
    }
}

/// One step of the chunked decoder: the next state and, if one is complete, what it produced.
/// `(same state, None)` means more bytes are needed.
fn decode_chunked(
    state: Chunked,
    buf: &mut BytesMut,
) -> Result<(BodyDecoder, Option<Decoded>), ProtocolError> {
    let same = BodyDecoder::Chunked(state);
    match state {
        Chunked::Size => {
            let Some(line_end) = find_crlf(buf) else {
                return if buf.len() > MAX_CHUNK_LINE {
                    Err(ProtocolError("chunk-size line too long"))
                } else {
                    Ok((same, None))
                };
            };
            let line = &buf[..line_end];
            let digits = line
                .iter()
                .position(|b| *b == b';' || *b == b' ' || *b == b'\t')
                .map_or(line, |end| &line[..end]);
            let size = std::str::from_utf8(digits)
                .ok()
                .filter(|text| !text.is_empty() && text.len() <= 16)
                .and_then(|text| u64::from_str_radix(text, 16).ok())
                .ok_or(ProtocolError("invalid chunk size"))?;
            buf.advance(line_end + 2);
            let next = if size == 0 {
                Chunked::Trailers
            } else {
                Chunked::Data(size)
            };
            Ok((BodyDecoder::Chunked(next), None))
        }
        Chunked::Data(remaining) => {
            if buf.is_empty() {
                return Ok((same, None));
            }
            let take = usize::try_from(remaining).map_or(buf.len(), |r| r.min(buf.len()));
            let left = remaining - take as u64;
            let next = if left == 0 {
                Chunked::DataEnd
            } else {
                Chunked::Data(left)
            };
            let data = buf.split_to(take).freeze();
            Ok((BodyDecoder::Chunked(next), Some(Decoded::Data(data))))
        }
        Chunked::DataEnd => {
            if buf.len() < 2 {
                return Ok((same, None));
            }
            if &buf[..2] != b"\r\n" {
                return Err(ProtocolError("chunk data not followed by CRLF"));
            }
            buf.advance(2);
            Ok((BodyDecoder::Chunked(Chunked::Size), None))
        }
        Chunked::Trailers => {
            if buf.starts_with(b"\r\n") {
                buf.advance(2);
                return Ok((BodyDecoder::Done, Some(Decoded::End)));
            }
            // The whole trailer section (fields and the empty line) at once.
            let Some(end) = find(buf, b"\r\n\r\n") else {
                return if buf.len() > MAX_TRAILERS {
                    Err(ProtocolError("trailer section too large"))
                } else {
                    Ok((same, None))
                };
            };
            let section = buf.split_to(end + 4).freeze();
            let mut trailers = HeaderMap::new();
            for line in section[..end].split(|b| *b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let Some(colon) = line.iter().position(|b| *b == b':') else {
                    return Err(ProtocolError("malformed trailer field"));
                };
                let name = HeaderName::from_bytes(&line[..colon])
                    .map_err(|_| ProtocolError("invalid trailer field name"))?;
                let value = HeaderValue::from_maybe_shared(
                    section.slice_ref(line[colon + 1..].trim_ascii()),
                )
                .map_err(|_| ProtocolError("invalid trailer field value"))?;
                trailers.append(name, value);
            }
            Ok((BodyDecoder::Done, Some(Decoded::Trailers(trailers))))
        }
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    find(buf, b"\r\n")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse(
        bytes: &[u8],
        method: &Method,
    ) -> (Result<Option<ResponseHead>, ProtocolError>, BytesMut) {
        let mut buf = BytesMut::from(bytes);
        let head = parse_response_head(&mut buf, method, 64 * 1024);
        (head, buf)
    }

    /// Decodes everything in `wire` (delivered `step` bytes at a time) and returns the body and
    /// the trailers.
    fn decode_all(
        mut decoder: BodyDecoder,
        wire: &[u8],
        step: usize,
        eof_at_end: bool,
    ) -> Result<(Vec<u8>, Option<HeaderMap>), ProtocolError> {
        let mut buf = BytesMut::new();
        let mut fed = 0;
        let mut body = Vec::new();
        let mut trailers = None;
        loop {
            let eof = eof_at_end && fed == wire.len();
            match decoder.decode(&mut buf, eof)? {
                Decoded::Data(data) => body.extend_from_slice(&data),
                Decoded::Trailers(fields) => trailers = Some(fields),
                Decoded::End => return Ok((body, trailers)),
                Decoded::NeedMore => {
                    assert!(fed < wire.len(), "decoder wants more than the whole body");
                    let next = (fed + step).min(wire.len());
                    buf.extend_from_slice(&wire[fed..next]);
                    fed = next;
                }
            }
        }
    }

    #[test]
    fn a_request_head_is_encoded_with_its_fields_and_framing() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("example.com"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("2"));
        let mut out = BytesMut::new();
        encode_request_head(
            &Method::POST,
            "/p?q=1",
            &headers,
            RequestFraming::Chunked,
            &mut out,
        );
        assert_eq!(
            &out[..],
            b"POST /p?q=1 HTTP/1.1\r\nhost: example.com\r\nx-a: 1\r\nx-a: 2\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        let mut out = BytesMut::new();
        encode_request_head(
            &Method::GET,
            "/",
            &HeaderMap::new(),
            RequestFraming::Empty,
            &mut out,
        );
        assert_eq!(&out[..], b"GET / HTTP/1.1\r\n\r\n");
        let mut out = BytesMut::new();
        encode_chunk_start(300, &mut out);
        assert_eq!(&out[..], b"12c\r\n");
    }

    #[test]
    fn a_response_head_is_parsed_and_removed_from_the_buffer() {
        let (head, rest) = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Y: z\r\n\r\nhello",
            &Method::GET,
        );
        let head = head.unwrap().unwrap();
        assert_eq!(head.response.status(), StatusCode::OK);
        assert_eq!(head.response.headers()["x-y"], "z");
        assert_eq!(head.body, BodyDecoder::Length(5));
        assert!(head.keep_alive);
        assert_eq!(&rest[..], b"hello");
    }

    #[test]
    fn an_incomplete_head_waits_and_a_broken_one_is_an_error() {
        let partial = b"HTTP/1.1 200 OK\r\nContent-Le";
        let (head, rest) = parse(partial, &Method::GET);
        assert!(head.unwrap().is_none());
        assert_eq!(
            &rest[..],
            partial,
            "nothing is consumed until the head is complete"
        );
        assert!(parse(b"HTTP/1.1 2x0 OK\r\n\r\n", &Method::GET).0.is_err());
        assert!(parse(b"SSH-2.0-OpenSSH\r\n\r\n", &Method::GET).0.is_err());
        let huge = [b"HTTP/1.1 200 OK\r\nx: ".as_slice(), &[b'a'; 70_000]].concat();
        assert_eq!(
            parse(&huge, &Method::GET).0.unwrap_err(),
            ProtocolError("response head too large")
        );
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let framing = |head: &[u8], method: &Method| {
            parse(head, method)
                .0
                .map(|h| h.map(|h| (h.body, h.keep_alive)))
        };
        assert_eq!(
            framing(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n",
                &Method::GET
            ),
            Ok(Some((BodyDecoder::Chunked(Chunked::Size), true)))
        );
        assert_eq!(
            framing(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
                &Method::GET
            ),
            Ok(Some((BodyDecoder::UntilClose, false)))
        );
        assert_eq!(
            framing(b"HTTP/1.1 200 OK\r\n\r\n", &Method::GET),
            Ok(Some((BodyDecoder::UntilClose, false)))
        );
        assert_eq!(
            framing(
                b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
                &Method::HEAD
            ),
            Ok(Some((BodyDecoder::Done, true)))
        );
        assert_eq!(
            framing(b"HTTP/1.1 204 No Content\r\n\r\n", &Method::GET),
            Ok(Some((BodyDecoder::Done, true)))
        );
        assert_eq!(
            framing(
                b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                &Method::GET
            ),
            Ok(Some((BodyDecoder::Done, true)))
        );
        assert_eq!(
            framing(
                b"HTTP/1.1 200 OK\r\nContent-Length: 4, 4\r\n\r\n",
                &Method::GET
            ),
            Ok(Some((BodyDecoder::Length(4), true)))
        );
        assert_eq!(
            framing(
                b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                &Method::GET
            ),
            Ok(Some((BodyDecoder::Done, false)))
        );
        assert_eq!(
            framing(
                b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n",
                &Method::GET
            ),
            Ok(Some((BodyDecoder::Length(1), false)))
        );
        assert_eq!(
            framing(
                b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\nConnection: Keep-Alive\r\n\r\n",
                &Method::GET
            ),
            Ok(Some((BodyDecoder::Length(1), true)))
        );
        assert!(
            framing(
                b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n",
                &Method::GET
            )
            .is_err()
        );
        assert!(
            framing(
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                &Method::GET
            )
            .is_err()
        );
    }

    #[test]
    fn a_length_body_is_cut_out_whatever_the_reads() {
        for step in [1, 3, 64] {
            let (body, trailers) =
                decode_all(BodyDecoder::Length(11), b"hello world", step, false).unwrap();
            assert_eq!(
                (body.as_slice(), trailers),
                (b"hello world".as_slice(), None)
            );
        }
        let mut buf = BytesMut::from(&b"abcNEXT"[..]);
        let mut decoder = BodyDecoder::Length(3);
        assert_eq!(
            decoder.decode(&mut buf, false),
            Ok(Decoded::Data(Bytes::from_static(b"abc")))
        );
        assert_eq!(decoder.decode(&mut buf, false), Ok(Decoded::End));
        assert_eq!(
            &buf[..],
            b"NEXT",
            "bytes after the body stay for the next response"
        );
        assert!(decode_all(BodyDecoder::Length(20), b"short", 2, true).is_err());
    }

    #[test]
    fn a_chunked_body_is_decoded_whatever_the_reads() {
        let wire = b"5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Sum: 7\r\nX-More: a b\r\n\r\n";
        for step in [1, 2, 7, 1000] {
            let (body, trailers) =
                decode_all(BodyDecoder::Chunked(Chunked::Size), wire, step, false).unwrap();
            assert_eq!(body, b"hello 0123456789", "step {step}");
            let trailers = trailers.unwrap();
            assert_eq!(trailers["x-sum"], "7");
            assert_eq!(trailers["x-more"], "a b");
        }
        let (body, trailers) = decode_all(
            BodyDecoder::Chunked(Chunked::Size),
            b"3\r\nabc\r\n0\r\n\r\n",
            1,
            false,
        )
        .unwrap();
        assert_eq!((body.as_slice(), trailers), (b"abc".as_slice(), None));
    }

    #[test]
    fn a_broken_chunked_body_is_an_error() {
        for wire in [
            &b"zz\r\n"[..],
            b"3\r\nabcXY",
            b"3\r\nab",
            b"12345678901234567\r\n",
        ] {
            assert!(
                decode_all(BodyDecoder::Chunked(Chunked::Size), wire, 1, true).is_err(),
                "{wire:?}"
            );
        }
        let long_line = [&[b'1'; 10][..], &[b' '; MAX_CHUNK_LINE]].concat();
        let mut buf = BytesMut::from(&long_line[..]);
        assert!(
            BodyDecoder::Chunked(Chunked::Size)
                .decode(&mut buf, false)
                .is_err()
        );
    }

    #[test]
    fn a_body_until_close_ends_at_the_close() {
        let (body, _) = decode_all(BodyDecoder::UntilClose, b"all of it", 4, true).unwrap();
        assert_eq!(body, b"all of it");
    }
}
