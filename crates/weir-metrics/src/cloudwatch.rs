//! CloudWatch: `POST https://monitoring.<region>.amazonaws.com/` with the form
//! `Action=GetMetricData&Version=2010-08-01&...` (the awsQuery protocol, as Flagger's AWS SDK for
//! Go v1 sends it), signed with AWS Signature Version 4 (service `monitoring`), answered in XML.
//!
//! The template's query is a JSON array of `MetricDataQuery` objects (`Id`, `Expression`,
//! `Label`, `ReturnData`, `Period`, `MetricStat {Metric {Namespace, MetricName, Dimensions},
//! Period, Stat, Unit}`), as in Flagger; it is sent as awsQuery form parameters
//! (`MetricDataQueries.member.1.MetricStat.Metric.Dimensions.member.1.Name=...`). The window is
//! Flagger's: `StartTime` ten intervals ago, `EndTime` now, `MaxDatapoints=20`.
//!
//! Region: `provider.region` (required). Address: `https://monitoring.<region>.amazonaws.com`;
//! unlike Flagger, weir honours `provider.address` as another endpoint (a VPC endpoint, a
//! FIPS endpoint, a test double), still signing for the template's region.
//!
//! Credentials: Flagger reads no Secret for CloudWatch (its SDK's default chain: environment,
//! web identity, shared files, container, instance metadata). weir reads the Secret named by
//! `provider.secretRef` with the keys the SDK's environment uses - `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY` and optionally `AWS_SESSION_TOKEN` - and, without a `secretRef`, the
//! SDK's chain at query time ([`crate::aws_credentials`]).
//!
//! The value, as in Flagger: the first returned result's (queries with `ReturnData: false` are
//! not returned) first value, which is the newest point (CloudWatch's default `ScanBy` is
//! `TimestampDescending`). No result or no value: no data, with the result's `StatusCode` and
//! CloudWatch's messages when it gives any.
//!
//! Throttling: CloudWatch answers `400` with the code `Throttling` (no `Retry-After`); weir
//! retries it within the interval like a `429`.

use std::collections::BTreeMap;

use jiff::Timestamp;
use ring::{digest, hmac};
use serde_json::Value;

use crate::{Plan, Reading, Request};

/// The Secret's (or the environment's) keys: the access key id and the secret access key.
pub const SECRET_KEYS: [&str; 2] = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"];

/// A temporary credential's session token, sent when present.
pub const SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";

/// The service name CloudWatch is signed for.
pub const SERVICE: &str = "monitoring";

/// CloudWatch's API version (awsQuery).
const VERSION: &str = "2010-08-01";

/// How many intervals back the window starts (Flagger's).
const WINDOW_INTERVALS: i64 = 10;

/// Flagger's `MaxDatapoints`.
const MAX_DATAPOINTS: &str = "20";

/// The form's content type, as the AWS SDK sends it.
const CONTENT_TYPE: &str = "application/x-www-form-urlencoded; charset=utf-8";

/// The regional endpoint.
pub fn default_address(region: &str) -> String {
    format!("https://monitoring.{region}.amazonaws.com")
}

/// Whether `region` looks like an AWS region (`us-east-1`, `cn-north-1`, `us-gov-west-1`): it
/// becomes part of a host name and of the signature's scope.
pub fn valid_region(region: &str) -> bool {
    !region.is_empty()
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !region.starts_with('-')
        && !region.ends_with('-')
}

/// The query's `MetricDataQuery` list, or why it is not one.
pub fn queries(query: &str) -> Result<Vec<serde_json::Map<String, Value>>, String> {
    let json: Value = serde_json::from_str(query).map_err(|error| {
        format!("the query is not JSON ({error}): CloudWatch takes a JSON array of MetricDataQuery")
    })?;
    let Value::Array(items) = json else {
        return Err("the query is not a JSON array of MetricDataQuery".into());
    };
    if items.is_empty() {
        return Err("the query holds no MetricDataQuery".into());
    }
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| match item {
            Value::Object(object) if object.get("Id").is_some_and(Value::is_string) => Ok(object),
            _ => Err(format!(
                "the query's MetricDataQuery {index} is not an object with a string Id"
            )),
        })
        .collect()
}

/// `value` as awsQuery form parameters under `prefix`: objects by member name, lists as
/// `.member.N` from 1, booleans as `true`/`false`.
fn flatten(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(object) => {
            for (name, value) in object {
                flatten(&format!("{prefix}.{name}"), value, out);
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                flatten(&format!("{prefix}.member.{}", index + 1), item, out);
            }
        }
        Value::Null => {}
        Value::String(text) => out.push((prefix.to_string(), text.clone())),
        Value::Bool(flag) => out.push((prefix.to_string(), flag.to_string())),
        Value::Number(number) => out.push((prefix.to_string(), number.to_string())),
    }
}

/// The form body of `plan` at `now`.
pub fn form(plan: &Plan, now: Timestamp) -> String {
    let end = now.as_second();
    let interval = i64::try_from(plan.interval.as_secs())
        .unwrap_or(i64::MAX)
        .max(1);
    let start = end.saturating_sub(interval.saturating_mul(WINDOW_INTERVALS));
    let time = |seconds: i64| {
        Timestamp::from_second(seconds)
            .unwrap_or(Timestamp::UNIX_EPOCH)
            .to_string()
    };
    let mut parameters = vec![
        ("Action".to_string(), "GetMetricData".to_string()),
        ("Version".to_string(), VERSION.to_string()),
        ("StartTime".to_string(), time(start)),
        ("EndTime".to_string(), time(end)),
        ("MaxDatapoints".to_string(), MAX_DATAPOINTS.to_string()),
    ];
    // A plan's query was checked when the plan was made; a query that is not a list sends
    // none, which CloudWatch refuses with its own words.
    for (index, query) in queries(&plan.query).unwrap_or_default().iter().enumerate() {
        for (name, value) in query {
            flatten(
                &format!("MetricDataQueries.member.{}.{name}", index + 1),
                value,
                &mut parameters,
            );
        }
    }
    let mut body = form_urlencoded::Serializer::new(String::new());
    for (name, value) in &parameters {
        body.append_pair(name, value);
    }
    body.finish()
}

/// The signed request of `plan` at `now`.
pub fn request(plan: &Plan, now: Timestamp) -> Request {
    let body = form(plan, now);
    let url = format!("{}/", plan.address);
    let host = plan
        .address
        .split_once("://")
        .map_or(plan.address.as_str(), |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let date = amz_date(now);
    let mut headers = vec![
        ("content-type", CONTENT_TYPE.to_string()),
        ("host", host),
        ("x-amz-date", date.clone()),
    ];
    let token = plan.credentials.get(SESSION_TOKEN);
    if !token.is_empty() {
        headers.push(("x-amz-security-token", token.to_string()));
    }
    let scope = Scope {
        date: &date[..8],
        region: plan.region.as_deref().unwrap_or_default(),
        service: SERVICE,
    };
    let authorization = authorization(
        plan.credentials.get(SECRET_KEYS[0]),
        plan.credentials.get(SECRET_KEYS[1]),
        &scope,
        &date,
        &Canonical {
            method: "POST",
            path: "/",
            query: "",
            headers: &headers,
            payload: body.as_bytes(),
        },
    );
    headers.push(("authorization", authorization));
    Request {
        method: http::Method::POST,
        shown: url.clone(),
        url,
        headers,
        body: bytes::Bytes::from(body),
    }
}

/// `20150830T123600Z`: SigV4's time format.
pub fn amz_date(now: Timestamp) -> String {
    now.strftime("%Y%m%dT%H%M%SZ").to_string()
}

/// A signature's credential scope.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// `YYYYMMDD`.
    pub date: &'a str,
    /// The region, e.g. `us-east-1`.
    pub region: &'a str,
    /// The service, e.g. `monitoring`.
    pub service: &'a str,
}

/// What SigV4 signs of a request.
#[derive(Debug, Clone, Copy)]
pub struct Canonical<'a> {
    /// The method.
    pub method: &'a str,
    /// The URI-encoded path.
    pub path: &'a str,
    /// The query string, already in canonical form (sorted, encoded).
    pub query: &'a str,
    /// The headers to sign, names in lowercase.
    pub headers: &'a [(&'a str, String)],
    /// The body.
    pub payload: &'a [u8],
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn sha256_hex(data: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, data).as_ref())
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

/// The canonical request (SigV4 task 1) and its signed header list.
pub fn canonical_request(request: &Canonical<'_>) -> (String, String) {
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in request.headers {
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        headers
            .entry(name.to_ascii_lowercase())
            .and_modify(|existing| {
                existing.push(',');
                existing.push_str(&value);
            })
            .or_insert(value);
    }
    let signed = headers.keys().cloned().collect::<Vec<_>>().join(";");
    let canonical_headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}:{value}\n"))
        .collect();
    let text = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed}\n{}",
        request.method,
        request.path,
        request.query,
        sha256_hex(request.payload)
    );
    (text, signed)
}

/// The string to sign (SigV4 task 2).
pub fn string_to_sign(date_time: &str, scope: &Scope<'_>, canonical: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256\n{date_time}\n{}/{}/{}/aws4_request\n{}",
        scope.date,
        scope.region,
        scope.service,
        sha256_hex(canonical.as_bytes())
    )
}

/// The signature (SigV4 tasks 3 and 4): the key derived from the secret and the scope, then
/// the HMAC of the string to sign, in hex.
pub fn signature(secret: &str, scope: &Scope<'_>, string_to_sign: &str) -> String {
    let key = [scope.region, scope.service, "aws4_request"].iter().fold(
        hmac_sha256(format!("AWS4{secret}").as_bytes(), scope.date.as_bytes()),
        |key, part| hmac_sha256(&key, part.as_bytes()),
    );
    hex(&hmac_sha256(&key, string_to_sign.as_bytes()))
}

/// The `Authorization` header of a request signed at `date_time` (`YYYYMMDDTHHMMSSZ`).
pub fn authorization(
    access_key: &str,
    secret: &str,
    scope: &Scope<'_>,
    date_time: &str,
    request: &Canonical<'_>,
) -> String {
    let (canonical, signed) = canonical_request(request);
    let signature = signature(secret, scope, &string_to_sign(date_time, scope, &canonical));
    format!(
        "AWS4-HMAC-SHA256 Credential={access_key}/{}/{}/{}/aws4_request, SignedHeaders={signed}, Signature={signature}",
        scope.date, scope.region, scope.service
    )
}

/// A minimal XML element: enough for CloudWatch's answers (elements and text; attributes,
/// declarations and comments skipped).
#[derive(Debug, Default)]
pub(crate) struct Element {
    pub(crate) name: String,
    pub(crate) text: String,
    children: Vec<Element>,
}

impl Element {
    pub(crate) fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|child| child.name == name)
    }

    fn children<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> {
        self.children.iter().filter(move |child| child.name == name)
    }

    pub(crate) fn path(&self, names: &[&str]) -> Option<&Element> {
        names
            .iter()
            .try_fold(self, |element, name| element.child(name))
    }
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The document's root element, or `None` when `text` is not well-formed enough to read.
pub(crate) fn parse_xml(text: &str) -> Option<Element> {
    let mut stack: Vec<Element> = vec![Element::default()];
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let content = &rest[..open];
        if let Some(top) = stack.last_mut() {
            top.text.push_str(&unescape(content));
        }
        rest = &rest[open..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = &after[after.find("-->")? + 3..];
            continue;
        }
        if rest.starts_with("<?") || rest.starts_with("<!") {
            rest = &rest[rest.find('>')? + 1..];
            continue;
        }
        let close = rest.find('>')?;
        let tag = &rest[1..close];
        rest = &rest[close + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let element = stack.pop()?;
            if element.name != name.trim() {
                return None;
            }
            stack.last_mut()?.children.push(element);
        } else {
            let self_closing = tag.ends_with('/');
            let tag = tag.trim_end_matches('/');
            let name = tag.split_whitespace().next()?.to_string();
            let element = Element {
                name,
                ..Element::default()
            };
            if self_closing {
                stack.last_mut()?.children.push(element);
            } else {
                stack.push(element);
            }
        }
    }
    let mut document = stack.pop()?;
    if !stack.is_empty() {
        return None;
    }
    document.children.pop()
}

/// The number in a `200` answer.
pub fn read(body: &[u8]) -> Result<Reading, String> {
    let text = std::str::from_utf8(body)
        .map_err(|_| "answered 200 without a CloudWatch XML body".to_string())?;
    let root = parse_xml(text).ok_or("answered 200 without a CloudWatch XML body")?;
    if root.name != "GetMetricDataResponse" {
        return Err(match error_message_xml(&root) {
            Some(message) => format!("the query failed: {message}"),
            None => format!(
                "answered 200 with <{}>, not GetMetricDataResponse",
                root.name
            ),
        });
    }
    let result = root
        .child("GetMetricDataResult")
        .ok_or("the answer has no GetMetricDataResult")?;
    let messages: Vec<String> = result
        .path(&["Messages"])
        .into_iter()
        .flat_map(|messages| messages.children("member"))
        .filter_map(|member| {
            let value = member.child("Value")?.text.trim().to_string();
            let code = member
                .child("Code")
                .map(|code| code.text.trim().to_string());
            Some(match code {
                Some(code) if !code.is_empty() => format!("{code}: {value}"),
                _ => value,
            })
        })
        .collect();
    let results: Vec<&Element> = result
        .child("MetricDataResults")
        .into_iter()
        .flat_map(|results| results.children("member"))
        .collect();
    let with_messages = |reason: String| {
        if messages.is_empty() {
            reason
        } else {
            format!("{reason} ({})", messages.join("; "))
        }
    };
    let Some(first) = results.first() else {
        return Ok(Reading::NoData(with_messages(
            "the query returned no MetricDataResults".into(),
        )));
    };
    let id = first
        .child("Id")
        .map(|id| id.text.trim().to_string())
        .unwrap_or_default();
    let status = first
        .child("StatusCode")
        .map(|status| status.text.trim().to_string())
        .unwrap_or_default();
    let values: Vec<&Element> = first
        .child("Values")
        .into_iter()
        .flat_map(|values| values.children("member"))
        .collect();
    let Some(value) = values.first() else {
        return Ok(Reading::NoData(with_messages(format!(
            "result {id} has no values (StatusCode {status})"
        ))));
    };
    let value: f64 = value
        .text
        .trim()
        .parse()
        .map_err(|_| format!("result {id}'s value {:?} is not a number", value.text))?;
    let mut remarks = Vec::new();
    if results.len() > 1 {
        remarks.push(format!(
            "first of {} results; set ReturnData: false on the others",
            results.len()
        ));
    }
    if status != "Complete" && !status.is_empty() {
        remarks.push(format!("StatusCode {status}"));
    }
    Ok(Reading::Value(
        value,
        (!remarks.is_empty()).then(|| remarks.join("; ")),
    ))
}

fn error_message_xml(root: &Element) -> Option<String> {
    let error = root.path(&["Error"])?;
    let code = error.child("Code").map(|code| code.text.trim().to_string());
    let message = error
        .child("Message")
        .map(|message| message.text.trim().to_string());
    match (code, message) {
        (Some(code), Some(message)) => Some(format!("{code}: {message}")),
        (Some(text), None) | (None, Some(text)) => Some(text),
        (None, None) => None,
    }
}

/// CloudWatch's error answers: `<ErrorResponse><Error><Code>..</Code><Message>..</Message>`.
pub fn error_message(body: &[u8]) -> Option<String> {
    let root = parse_xml(std::str::from_utf8(body).ok()?)?;
    error_message_xml(&root)
}

/// Whether an error answer is CloudWatch's throttling (`400` with a throttling code), which
/// is tried again like a `429`.
pub fn throttled(body: &[u8]) -> bool {
    std::str::from_utf8(body)
        .ok()
        .and_then(parse_xml)
        .and_then(|root| {
            root.path(&["Error", "Code"])
                .map(|code| code.text.trim().to_string())
        })
        .is_some_and(|code| {
            matches!(
                code.as_str(),
                "Throttling" | "ThrottlingException" | "RequestLimitExceeded"
            )
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// AWS's published SigV4 test suite, "get-vanilla": `GET /` to `example.amazonaws.com` at
    /// 20150830T123600Z, region us-east-1, service `service`, with the documentation's example
    /// credentials.
    #[test]
    fn the_signature_matches_aws_get_vanilla_example() {
        let headers = [
            ("host", "example.amazonaws.com".to_string()),
            ("x-amz-date", "20150830T123600Z".to_string()),
        ];
        let request = Canonical {
            method: "GET",
            path: "/",
            query: "",
            headers: &headers,
            payload: b"",
        };
        let (canonical, signed) = canonical_request(&request);
        assert_eq!(
            canonical,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(signed, "host;x-amz-date");
        let scope = Scope {
            date: "20150830",
            region: "us-east-1",
            service: "service",
        };
        assert_eq!(
            string_to_sign("20150830T123600Z", &scope, &canonical),
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\nbb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63"
        );
        assert_eq!(
            authorization(
                "AKIDEXAMPLE",
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                &scope,
                "20150830T123600Z",
                &request
            ),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn queries_become_aws_query_form_parameters() {
        let query = r#"[{"Id":"e1","Expression":"m1 / m2","Label":"ErrorRate"},
            {"Id":"m1","MetricStat":{"Metric":{"Namespace":"App","MetricName":"Errors",
             "Dimensions":[{"Name":"appName","Value":"web.shop"}]},"Period":60,"Stat":"Sum"},
             "ReturnData":false}]"#;
        let mut out = Vec::new();
        for (index, query) in queries(query).unwrap().iter().enumerate() {
            for (name, value) in query {
                flatten(
                    &format!("MetricDataQueries.member.{}.{name}", index + 1),
                    value,
                    &mut out,
                );
            }
        }
        let out: BTreeMap<String, String> = out.into_iter().collect();
        assert_eq!(out["MetricDataQueries.member.1.Expression"], "m1 / m2");
        assert_eq!(out["MetricDataQueries.member.2.ReturnData"], "false");
        assert_eq!(out["MetricDataQueries.member.2.MetricStat.Period"], "60");
        assert_eq!(
            out["MetricDataQueries.member.2.MetricStat.Metric.Dimensions.member.1.Value"],
            "web.shop"
        );
        assert!(queries("{}").is_err());
        assert!(queries("[]").is_err());
        assert!(queries(r#"[{"Expression":"x"}]"#).is_err());
    }

    #[test]
    fn the_first_results_newest_value_is_read() {
        let body = br#"<GetMetricDataResponse xmlns="http://monitoring.amazonaws.com/doc/2010-08-01/">
  <GetMetricDataResult>
    <MetricDataResults>
      <member><Id>e1</Id><Label>ErrorRate</Label>
        <Timestamps><member>2024-05-01T12:03:00Z</member><member>2024-05-01T12:02:00Z</member></Timestamps>
        <Values><member>0.02</member><member>0.01</member></Values><StatusCode>Complete</StatusCode>
      </member>
    </MetricDataResults><Messages/>
  </GetMetricDataResult>
  <ResponseMetadata><RequestId>uuid</RequestId></ResponseMetadata>
</GetMetricDataResponse>"#;
        assert_eq!(read(body).unwrap(), Reading::Value(0.02, None));
        let empty = br#"<GetMetricDataResponse><GetMetricDataResult><MetricDataResults><member><Id>e1</Id><Timestamps/><Values/><StatusCode>Complete</StatusCode></member></MetricDataResults><Messages/></GetMetricDataResult></GetMetricDataResponse>"#;
        assert!(
            matches!(read(empty).unwrap(), Reading::NoData(reason) if reason.contains("e1 has no values"))
        );
        let none = br#"<GetMetricDataResponse><GetMetricDataResult><MetricDataResults/><Messages/></GetMetricDataResult></GetMetricDataResponse>"#;
        assert!(matches!(read(none).unwrap(), Reading::NoData(_)));
        let error = br#"<ErrorResponse xmlns="http://monitoring.amazonaws.com/doc/2010-08-01/"><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>r</RequestId></ErrorResponse>"#;
        assert_eq!(
            error_message(error).as_deref(),
            Some("Throttling: Rate exceeded")
        );
        assert!(throttled(error));
        assert!(read(b"<a><b></a>").is_err());
    }
}
