//! Argo's `web` metric provider (`metricproviders/webmetric`): one HTTP call, the JSON answer's
//! value at `jsonPath` is the result.
//!
//! `url`, `method` (GET unless POST or PUT), `headers[{key, value}]`, `body` or `jsonBody` (sent
//! as compact JSON, with `Content-Type: application/json` unless a header sets it),
//! `timeoutSeconds` (10), `jsonPath` (`{$}`: the whole answer). A non-2xx answer, a body that is
//! not JSON or a path that finds nothing is a measurement Error, as in Argo.
//!
//! `insecure: true` is not honoured: weir's HTTP client always verifies a server's certificate
//! (against the Mozilla roots), so a self-signed server is an Error saying so.

use bytes::Bytes;
use http::Method;
use serde_json::Value;
use weir_core::argo::analysis::Outcome;

use super::{headers, seconds};

/// Argo's `timeoutSeconds` default.
const DEFAULT_TIMEOUT_SECONDS: u64 = 10;

/// Measures once.
pub(super) async fn measure(http: &weir_http::HttpClient, web: &Value) -> Outcome {
    let Some(url) = web.get("url").and_then(Value::as_str) else {
        return Outcome::Error("web: url is missing".into());
    };
    let method = match web
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("GET")
        .to_ascii_uppercase()
        .as_str()
    {
        "" | "GET" => Method::GET,
        "POST" => Method::POST,
        "PUT" => Method::PUT,
        other => {
            return Outcome::Error(format!(
                "web: method {other:?} is not supported (GET, POST or PUT)"
            ));
        }
    };
    let mut sent_headers = headers(web);
    let body = if let Some(json_body) = web.get("jsonBody").filter(|body| !body.is_null()) {
        if !sent_headers
            .iter()
            .any(|(key, _)| key.eq_ignore_ascii_case("content-type"))
        {
            sent_headers.push(("Content-Type".into(), "application/json".into()));
        }
        Bytes::from(json_body.to_string())
    } else {
        Bytes::from(
            web.get("body")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        )
    };
    let timeout = seconds(web.get("timeoutSeconds"), DEFAULT_TIMEOUT_SECONDS);
    let answer = match http.request(method, url, sent_headers, body, timeout).await {
        Ok(answer) => answer,
        Err(error) => {
            let insecure = web.get("insecure").and_then(Value::as_bool) == Some(true);
            return Outcome::Error(if insecure && error.is_certificate() {
                format!(
                    "{error} (insecure: true is not honoured: weir verifies every server's certificate)"
                )
            } else {
                error.to_string()
            });
        }
    };
    if !answer.status.is_success() {
        return Outcome::Error(format!(
            "received non 2xx response code: {}",
            answer.status.as_u16()
        ));
    }
    if answer.oversized {
        return Outcome::Error("Could not parse JSON body: the answer is too large".into());
    }
    let document: Value = match serde_json::from_slice(&answer.body) {
        Ok(document) => document,
        Err(error) => return Outcome::Error(format!("Could not parse JSON body: {error}")),
    };
    let path = web
        .get("jsonPath")
        .and_then(Value::as_str)
        .filter(|path| !path.is_empty())
        .unwrap_or("{$}");
    match json_path(&document, path) {
        Ok(value) => Outcome::json(value),
        Err(error) => Outcome::Error(format!("Could not find JSONPath in body: {error}")),
    }
}

/// The value at a Kubernetes-style JSONPath of one expression: `{$}`, `{$.a.b}`, `{.a.b}`,
/// `{$.a[0].b}`, `{$['a-b']}`, `{$.a[-1]}` (the forms Argo's examples and documentation use).
pub(super) fn json_path<'a>(document: &'a Value, path: &str) -> Result<&'a Value, String> {
    let inner = path.trim();
    let inner = inner
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or(inner)
        .trim();
    let mut rest = inner.strip_prefix('$').unwrap_or(inner);
    let mut current = document;
    while !rest.is_empty() {
        let (step, after) = if let Some(dotted) = rest.strip_prefix('.') {
            let end = dotted.find(['.', '[']).unwrap_or(dotted.len());
            (Step::Key(&dotted[..end]), &dotted[end..])
        } else if let Some(bracketed) = rest.strip_prefix('[') {
            let end = bracketed
                .find(']')
                .ok_or_else(|| format!("{path}: unclosed ["))?;
            let inside = bracketed[..end].trim();
            let step = if let Some(quoted) = inside
                .strip_prefix('\'')
                .and_then(|text| text.strip_suffix('\''))
                .or_else(|| {
                    inside
                        .strip_prefix('"')
                        .and_then(|text| text.strip_suffix('"'))
                }) {
                Step::Key(quoted)
            } else {
                Step::Index(
                    inside
                        .parse::<i64>()
                        .map_err(|_| format!("{path}: {inside:?} is not an index"))?,
                )
            };
            (step, &bracketed[end + 1..])
        } else {
            return Err(format!("{path}: unexpected {rest:?}"));
        };
        current = match step {
            Step::Key("") => current,
            Step::Key(key) => current
                .get(key)
                .ok_or_else(|| format!("{key} is not found"))?,
            Step::Index(index) => {
                let items = current
                    .as_array()
                    .ok_or_else(|| format!("[{index}]: not an array"))?;
                let position = if index < 0 {
                    i64::try_from(items.len()).unwrap_or(i64::MAX) + index
                } else {
                    index
                };
                usize::try_from(position)
                    .ok()
                    .and_then(|position| items.get(position))
                    .ok_or_else(|| format!("array index out of bounds: index {index}"))?
            }
        };
        rest = after;
    }
    Ok(current)
}

enum Step<'a> {
    Key(&'a str),
    Index(i64),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_paths_of_argos_examples_find_their_values() {
        let document = json!({"message": "ok", "data": {"ok": true, "items": [{"v": 1}, {"v": 2}]},
            "a-b": 3, "completed": false});
        let cases = [
            ("{$}", document.clone()),
            ("", document.clone()),
            ("{$.message}", json!("ok")),
            ("{$.data.ok}", json!(true)),
            ("{.data.ok}", json!(true)),
            ("{$.completed}", json!(false)),
            ("{$.data.items[0].v}", json!(1)),
            ("{$.data.items[-1].v}", json!(2)),
            ("{$['a-b']}", json!(3)),
            ("{$.data['items'][1]}", json!({"v": 2})),
        ];
        for (path, expected) in cases {
            let path = if path.is_empty() { "{$}" } else { path };
            assert_eq!(json_path(&document, path), Ok(&expected), "{path}");
        }
        assert_eq!(
            json_path(&document, "{$.nope}"),
            Err("nope is not found".to_string())
        );
        assert!(json_path(&document, "{$.data.items[5]}").is_err());
        assert!(json_path(&document, "{$.message[0]}").is_err());
    }
}
