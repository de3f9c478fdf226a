//! Stackdriver (Google Cloud Monitoring): `POST <address>/v3/projects/<project>/timeSeries:query`
//! with `{"query": <MQL>}` - the REST form of the gRPC `QueryTimeSeries` Flagger calls - with
//! `Authorization: Bearer <access token>`. The address defaults to
//! `https://monitoring.googleapis.com`.
//!
//! The Secret holds `project` (required when a Secret is named, as in Flagger) and
//! `serviceAccountKey`, a service account's JSON key. Without a key (or without a Secret, the
//! project then the metadata server's), Application Default Credentials are used, as in
//! Flagger: `GOOGLE_APPLICATION_CREDENTIALS`'s key file, else the metadata server (GKE Workload
//! Identity) ([`crate::gcp_credentials`]). Before each query the key is
//! exchanged for an access token with the OAuth 2.0 JWT bearer grant (RFC 7523) at the key's
//! `token_uri`: a JWT signed RS256 with the key's `private_key`, `iss` its `client_email`,
//! scope `https://www.googleapis.com/auth/monitoring.read`, valid one hour. The token is kept
//! (by the key's SHA-256) until a minute before it expires, and dropped when the API answers
//! `401`.
//!
//! The value, as in Flagger: the first series' first point's first value
//! (`timeSeriesData[0].pointData[0].values[0]`). Flagger reads it as a double, so an `int64Value`
//! (a count) reads as 0; weir reads `doubleValue` and `int64Value` (**fixed**). No series, point
//! or value: no data. MQL is deprecated by Google (support ended 2025-07-22) but the API still
//! answers it.

use base64::Engine as _;
use jiff::Timestamp;
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde_json::{Value, json};

use crate::{Plan, Reading, Request};

/// Google Cloud Monitoring's API.
pub const DEFAULT_ADDRESS: &str = "https://monitoring.googleapis.com";

/// The Secret's keys: the project and the service account's JSON key.
pub const SECRET_KEYS: [&str; 2] = ["project", "serviceAccountKey"];

/// The keys a Secret must hold when a template names one (as Flagger: the project).
pub const REQUIRED_KEYS: [&str; 1] = ["project"];

/// The keys a Secret may hold: without a key, Application Default Credentials
/// ([`crate::gcp_credentials`]).
pub const OPTIONAL_KEYS: [&str; 1] = ["serviceAccountKey"];

/// Where an exchanged token is kept among a plan's credentials (so it is struck out too).
pub const ACCESS_TOKEN: &str = "access_token";

/// The scope asked for: read-only monitoring.
const SCOPE: &str = "https://www.googleapis.com/auth/monitoring.read";

/// Google's token endpoint, when a key names none.
const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// A service account's JSON key: what signing needs of it.
pub struct ServiceAccount {
    client_email: String,
    key_id: String,
    token_uri: String,
    key: RsaKeyPair,
}

impl ServiceAccount {
    /// The key of `json` (a service account's JSON key file), or why it is not usable. The
    /// reason never holds the key.
    pub fn parse(json: &str) -> Result<ServiceAccount, String> {
        let key: Value = serde_json::from_str(json)
            .map_err(|_| "serviceAccountKey is not a service account's JSON key".to_string())?;
        let field = |name: &str| key.get(name).and_then(Value::as_str);
        if field("type").is_some_and(|kind| kind != "service_account") {
            return Err(format!(
                "serviceAccountKey is a {:?} key, not a service_account key",
                field("type").unwrap_or_default()
            ));
        }
        let client_email = field("client_email")
            .ok_or("serviceAccountKey has no client_email")?
            .to_string();
        let pem = field("private_key").ok_or("serviceAccountKey has no private_key")?;
        let body: String = pem
            .lines()
            .map(str::trim)
            .filter(|line| !line.starts_with("-----") && !line.is_empty())
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|_| "serviceAccountKey's private_key is not PEM".to_string())?;
        let key = RsaKeyPair::from_pkcs8(&der).map_err(|_| {
            "serviceAccountKey's private_key is not an RSA key in PKCS#8".to_string()
        })?;
        Ok(ServiceAccount {
            client_email,
            key_id: field("private_key_id").unwrap_or_default().to_string(),
            token_uri: field("token_uri").unwrap_or(DEFAULT_TOKEN_URI).to_string(),
            key,
        })
    }

    /// Where the key's tokens come from.
    pub fn token_uri(&self) -> &str {
        &self.token_uri
    }

    /// The JWT asserting this account at `now`, signed RS256.
    pub fn assertion(&self, now: Timestamp) -> Result<String, String> {
        let encode = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let header = json!({"alg": "RS256", "typ": "JWT", "kid": self.key_id});
        let iat = now.as_second();
        let claims = json!({
            "iss": self.client_email,
            "scope": SCOPE,
            "aud": self.token_uri,
            "iat": iat,
            "exp": iat + 3600,
        });
        let signing_input = format!(
            "{}.{}",
            encode(header.to_string().as_bytes()),
            encode(claims.to_string().as_bytes())
        );
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| "the service account's key could not sign".to_string())?;
        Ok(format!("{signing_input}.{}", encode(&signature)))
    }

    /// The token request's form body at `now`.
    pub fn token_form(&self, now: Timestamp) -> Result<String, String> {
        Ok(form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer")
            .append_pair("assertion", &self.assertion(now)?)
            .finish())
    }
}

/// The access token in a token endpoint's `200` answer, and for how many seconds it is valid
/// (`expires_in`; none said: 0, used once).
pub fn read_token(body: &[u8]) -> Result<(String, u64), String> {
    let json: Value = serde_json::from_slice(body)
        .map_err(|_| "the token endpoint answered 200 without JSON".to_string())?;
    let token = json
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|token| !token.is_empty())
        .map(str::to_string)
        .ok_or("the token endpoint's answer has no access_token")?;
    let expires_in = json.get("expires_in").and_then(Value::as_u64).unwrap_or(0);
    Ok((token, expires_in))
}

/// What a token is kept under: the SHA-256 of the service account's key (not the key).
pub fn cache_key(service_account_key: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, service_account_key.as_bytes())
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The query of `plan`, whose credentials hold an exchanged [`ACCESS_TOKEN`].
pub fn request(plan: &Plan) -> Request {
    let project = plan.credentials.get(SECRET_KEYS[0]);
    let path = |project: &str| format!("{}/v3/projects/{project}/timeSeries:query", plan.address);
    Request {
        method: http::Method::POST,
        url: path(project),
        shown: path("<project>"),
        headers: vec![
            ("content-type", "application/json".to_string()),
            (
                "authorization",
                format!("Bearer {}", plan.credentials.get(ACCESS_TOKEN)),
            ),
        ],
        body: bytes::Bytes::from(json!({"query": plan.query}).to_string()),
    }
}

/// The number in a `200` answer.
pub fn read(body: &[u8]) -> Result<Reading, String> {
    let json: Value = serde_json::from_slice(body)
        .map_err(|_| "answered 200 without a Cloud Monitoring JSON body".to_string())?;
    let errors: Vec<String> = json
        .get("partialErrors")
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .filter_map(|error| error.get("message").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let series = json
        .get("timeSeriesData")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let Some(first) = series.first() else {
        let mut reason = "the query returned no time series".to_string();
        if !errors.is_empty() {
            reason.push_str(&format!(" ({})", errors.join("; ")));
        }
        return Ok(Reading::NoData(reason));
    };
    let value = first
        .get("pointData")
        .and_then(Value::as_array)
        .and_then(|points| points.first())
        .and_then(|point| point.get("values"))
        .and_then(Value::as_array)
        .and_then(|values| values.first());
    let Some(value) = value else {
        return Ok(Reading::NoData(
            "the first series has no point with a value".into(),
        ));
    };
    let number = if let Some(double) = value.get("doubleValue") {
        // proto3 JSON: a number, or "NaN"/"Infinity" as strings.
        double
            .as_f64()
            .or_else(|| double.as_str().and_then(|text| text.parse().ok()))
    } else if let Some(integer) = value.get("int64Value") {
        // proto3 JSON writes int64 as a string.
        integer
            .as_str()
            .and_then(|text| text.parse::<i64>().ok())
            .or_else(|| integer.as_i64())
            .map(|integer| integer as f64)
    } else {
        return Err(format!(
            "the first value is not a double or an int64: {value}"
        ));
    };
    let number = number.ok_or_else(|| format!("the first value is not a number: {value}"))?;
    let remark = (series.len() > 1).then(|| {
        format!(
            "first of {} series; aggregate the query to one",
            series.len()
        )
    });
    Ok(Reading::Value(number, remark))
}

/// Google's error answers: `{"error": {"code", "message", "status"}}`, and the token endpoint's
/// `{"error": "...", "error_description": "..."}`.
pub fn error_message(json: &Value) -> Option<String> {
    let error = json.get("error")?;
    if let Some(code) = error.as_str() {
        return Some(
            match json.get("error_description").and_then(Value::as_str) {
                Some(description) => format!("{code}: {description}"),
                None => code.to_string(),
            },
        );
    }
    let message = error.get("message").and_then(Value::as_str)?;
    Some(match error.get("status").and_then(Value::as_str) {
        Some(status) => format!("{status}: {message}"),
        None => message.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_first_value_is_read_as_a_double_or_an_int64() {
        let body = br#"{"timeSeriesDescriptor":{"labelDescriptors":[{"key":"resource.project_id"}],"pointDescriptors":[{"key":"value.response_latencies_percentile","valueType":"DOUBLE","metricKind":"GAUGE"}]},"timeSeriesData":[{"labelValues":[{"stringValue":"p"}],"pointData":[{"values":[{"doubleValue":12.3}],"timeInterval":{"startTime":"2024-05-01T12:00:00Z","endTime":"2024-05-01T12:01:00Z"}}]}],"nextPageToken":"","partialErrors":[]}"#;
        assert_eq!(read(body).unwrap(), Reading::Value(12.3, None));
        let count = br#"{"timeSeriesData":[{"pointData":[{"values":[{"int64Value":"42"}]}]}]}"#;
        assert_eq!(read(count).unwrap(), Reading::Value(42.0, None));
        for body in [
            &br#"{}"#[..],
            br#"{"timeSeriesData":[]}"#,
            br#"{"timeSeriesData":[{"pointData":[]}]}"#,
            br#"{"timeSeriesData":[{"pointData":[{"values":[]}]}]}"#,
        ] {
            assert!(
                matches!(read(body).unwrap(), Reading::NoData(_)),
                "{body:?}"
            );
        }
        assert_eq!(
            error_message(&json!({"error": {"code": 400, "message": "Query parsing failed", "status": "INVALID_ARGUMENT"}})).as_deref(),
            Some("INVALID_ARGUMENT: Query parsing failed")
        );
        assert_eq!(
            error_message(
                &json!({"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
            )
            .as_deref(),
            Some("invalid_grant: Invalid JWT Signature.")
        );
    }
}
