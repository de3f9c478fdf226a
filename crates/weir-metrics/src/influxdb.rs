//! InfluxDB (v2, Flux): `POST <address>/api/v2/query?org=<org>` with `Authorization: Token
//! <token>` and the JSON body `{"query": <flux>, "type": "flux", "dialect": {"annotations":
//! ["datatype", "group", "default"], "delimiter": ",", "header": true}}`, as Flagger's client
//! sends it. The Secret holds `token` and `org` (both, when a Secret is named); the address is
//! required.
//!
//! The answer is annotated CSV (`#datatype`, `#group`, `#default` rows, a header row, records;
//! tables apart by an empty line). The value is the first record's `_value`, as in Flagger.
//! Flagger accepts only a `double` there and errs on a `long` (what `count()` gives, in its
//! own documentation's example); weir reads `double`, `long` and `unsignedLong`. An empty
//! `_value` is no data, as in Flagger; **no record at all is no data too**, where Flagger
//! reads 0 (which passes a `max` threshold on a canary without any data; no Flagger template
//! we know of depends on it). A table whose header is `error,reference` is InfluxDB's in-band
//! error: its text goes into the message.

use serde_json::{Value, json};

use crate::{Plan, Reading, Request};

/// The Secret's keys: the API token and the organization.
pub const SECRET_KEYS: [&str; 2] = ["token", "org"];

/// The query of `plan`.
pub fn request(plan: &Plan) -> Request {
    let org = plan.credentials.get(SECRET_KEYS[1]);
    let path = format!("{}/api/v2/query", plan.address);
    let with_org = |org: &str| {
        if org.is_empty() {
            path.clone()
        } else {
            let parameters = form_urlencoded::Serializer::new(String::new())
                .append_pair("org", org)
                .finish();
            format!("{path}?{parameters}")
        }
    };
    let body = json!({
        "query": plan.query,
        "type": "flux",
        "dialect": {
            "annotations": ["datatype", "group", "default"],
            "delimiter": ",",
            "header": true,
        },
    });
    let mut headers = vec![
        ("content-type", "application/json".to_string()),
        ("accept", "application/csv".to_string()),
    ];
    let token = plan.credentials.get(SECRET_KEYS[0]);
    if !token.is_empty() {
        headers.push(("authorization", format!("Token {token}")));
    }
    Request {
        method: http::Method::POST,
        url: with_org(org),
        // The organization comes from the Secret: messages show its place only.
        shown: if org.is_empty() {
            path.clone()
        } else {
            format!("{path}?org=<org>")
        },
        headers,
        body: bytes::Bytes::from(body.to_string()),
    }
}

/// One CSV line's fields (RFC 4180 quoting: `"a,b"`, `""` for a quote).
pub fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut field)),
            other => field.push(other),
        }
    }
    out.push(field);
    out
}

/// The number in a `200` answer.
pub fn read(body: &[u8]) -> Result<Reading, String> {
    let text = std::str::from_utf8(body)
        .map_err(|_| "answered 200 without an annotated CSV body".to_string())?;
    let mut datatypes: Vec<String> = Vec::new();
    let mut header: Option<Vec<String>> = None;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            // A new table: its own annotations and header follow.
            datatypes.clear();
            header = None;
            continue;
        }
        let row = fields(line);
        if row[0].starts_with('#') {
            if row[0] == "#datatype" {
                datatypes = row;
            }
            continue;
        }
        let Some(columns) = &header else {
            header = Some(row);
            continue;
        };
        let column = |name: &str| columns.iter().position(|column| column == name);
        if let Some(error) = column("error") {
            let message = row.get(error).cloned().unwrap_or_default();
            let reference = column("reference")
                .and_then(|index| row.get(index))
                .filter(|reference| !reference.is_empty())
                .map(|reference| format!(" (reference {reference})"))
                .unwrap_or_default();
            return Err(format!("the query failed: {message}{reference}"));
        }
        let Some(index) = column("_value") else {
            return Err(format!(
                "the first table has no _value column ({}); keep _value in the result",
                columns
                    .iter()
                    .filter(|column| !column.is_empty())
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        let value = row.get(index).map(String::as_str).unwrap_or_default();
        if value.is_empty() {
            return Ok(Reading::NoData("the first record's _value is empty".into()));
        }
        let datatype = datatypes.get(index).map_or("double", String::as_str);
        return match datatype {
            "double" | "long" | "unsignedLong" => value
                .parse::<f64>()
                .map(|value| Reading::Value(value, None))
                .map_err(|_| format!("the first record's _value {value:?} is not a number")),
            other => Err(format!(
                "the first record's _value is a {other}, not a number: {value:?}"
            )),
        };
    }
    Ok(Reading::NoData("the query returned no records".into()))
}

/// InfluxDB's error answers: `{"code": "...", "message": "..."}`.
pub fn error_message(json: &Value) -> Option<String> {
    let message = json.get("message").and_then(Value::as_str)?;
    Some(match json.get("code").and_then(Value::as_str) {
        Some(code) if !code.is_empty() => format!("{code}: {message}"),
        _ => message.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_first_records_value_is_read_from_annotated_csv() {
        // InfluxDB's documented example, CRLF line ends.
        let body = "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,dateTime:RFC3339,double,string,string\r\n#group,false,false,true,true,false,false,true,true\r\n#default,_result,,,,,,,\r\n,result,table,_start,_stop,_time,_value,_field,_measurement\r\n,,0,2020-02-17T22:19:49Z,2020-02-18T22:19:49Z,2020-02-18T10:34:08Z,1.4,f,test\r\n,,0,2020-02-17T22:19:49Z,2020-02-18T22:19:49Z,2020-02-18T22:08:44Z,6.6,f,test\r\n\r\n";
        assert_eq!(read(body.as_bytes()).unwrap(), Reading::Value(1.4, None));
        // count(): a long, which Flagger refuses.
        let long = "#datatype,string,long,long\r\n#group,false,false,false\r\n#default,_result,,\r\n,result,table,_value\r\n,,0,42\r\n";
        assert_eq!(read(long.as_bytes()).unwrap(), Reading::Value(42.0, None));
        for body in [
            "",
            "\r\n",
            "#datatype,string,long,double\r\n#group,false,false,false\r\n#default,_result,,\r\n,result,table,_value\r\n,,0,\r\n",
        ] {
            assert!(
                matches!(read(body.as_bytes()).unwrap(), Reading::NoData(_)),
                "{body:?}"
            );
        }
        let error = "#datatype,string,string\r\n#group,true,true\r\n#default,,\r\n,error,reference\r\n,\"failed to initialize execute state: could not find bucket \"\"nope\"\"\",897\r\n";
        assert_eq!(
            read(error.as_bytes()).unwrap_err(),
            "the query failed: failed to initialize execute state: could not find bucket \"nope\" (reference 897)"
        );
        let text = "#datatype,string,long,string\r\n#group,false,false,false\r\n#default,_result,,\r\n,result,table,_value\r\n,,0,abc\r\n";
        assert!(read(text.as_bytes()).unwrap_err().contains("is a string"));
    }
}
