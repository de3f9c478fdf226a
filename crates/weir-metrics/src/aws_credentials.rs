//! The AWS credential chain of a CloudWatch template without a `secretRef`, as Flagger's AWS SDK
//! reads it, in the SDK's order:
//!
//! 1. **environment**: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`;
//! 2. **web identity** (IRSA, how EKS pods get credentials): with `AWS_ROLE_ARN` and
//!    `AWS_WEB_IDENTITY_TOKEN_FILE` (and optionally `AWS_ROLE_SESSION_NAME`), STS's
//!    `AssumeRoleWithWebIdentity`, unsigned, at `https://sts.<region>.amazonaws.com/` (the
//!    template's region) or `AWS_ENDPOINT_URL_STS`; the token file is read again for each call
//!    (the kubelet rotates it);
//! 3. **shared credentials file**: `AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`, the
//!    profile `AWS_PROFILE` (default `default`);
//! 4. **container credentials** (ECS, EKS Pod Identity): `GET AWS_CONTAINER_CREDENTIALS_FULL_URI`
//!    (or `http://169.254.170.2` + `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`) with
//!    `Authorization` from `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` or
//!    `AWS_CONTAINER_AUTHORIZATION_TOKEN`;
//! 5. **instance metadata** (IMDSv2): a session token from `PUT /latest/api/token`, then the
//!    role under `/latest/meta-data/iam/security-credentials/` and its credentials, at
//!    `http://169.254.169.254` or `AWS_EC2_METADATA_SERVICE_ENDPOINT`, 1 s per request;
//!    `AWS_EC2_METADATA_DISABLED=true` turns it off.
//!
//! A source that is not configured (its variables unset, no file, no profile, no instance
//! metadata answering) passes to the next; a configured source that fails (STS refuses the
//! token, the container endpoint answers an error) ends the chain with its error, as in the
//! SDKs. Temporary credentials (web identity, container, instance metadata) are kept in memory
//! until five minutes before their `Expiration`.
//!
//! These requests go to endpoints weir's own environment names (never a template), so they are
//! made with a client of their own, outside the rollouts' outbound policy (the metadata
//! addresses are link-local, which that policy refuses by default).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use weir_http::HttpClient;

use crate::{Plan, Provider, cloudwatch};

/// Every variable the chain reads.
const VARIABLES: [&str; 17] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_SESSION_NAME",
    "AWS_ENDPOINT_URL_STS",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_PROFILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_EC2_METADATA_DISABLED",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "HOME",
    "USERPROFILE",
];

/// Temporary credentials are renewed this long before they expire.
const REFRESH_BEFORE: SignedDuration = SignedDuration::from_secs(5 * 60);

/// Each instance metadata request's time limit, so a machine without IMDS passes on fast.
const IMDS_TIMEOUT: Duration = Duration::from_secs(1);

/// The instance metadata session token's lifetime asked for (the SDKs' six hours).
const IMDS_TOKEN_TTL: &str = "21600";

/// STS and container endpoint requests' time limit.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The ECS agent's address of `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`.
const ECS_HOST: &str = "http://169.254.170.2";

/// The instance metadata service's address.
const IMDS_ADDRESS: &str = "http://169.254.169.254";

/// STS's API version.
const STS_VERSION: &str = "2011-06-15";

/// A key pair, with a session token and an expiry when temporary. Debug shows neither key.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key (signs, never sent).
    pub secret_access_key: String,
    /// A temporary credential's session token.
    pub session_token: Option<String>,
    /// When temporary credentials stop working.
    pub expiration: Option<Timestamp>,
    /// Where they came from, e.g. `web identity`.
    pub source: &'static str,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("source", &self.source)
            .field("expiration", &self.expiration)
            .finish_non_exhaustive()
    }
}

impl AwsCredentials {
    /// Whether these can still be used at `now`: no expiry, or more than five minutes left.
    pub fn fresh(&self, now: Timestamp) -> bool {
        self.expiration.is_none_or(|expiration| {
            now.checked_add(REFRESH_BEFORE)
                .is_ok_and(|soon| soon < expiration)
        })
    }
}

/// What the chain reads of weir's environment (a snapshot, so tests give their own).
#[derive(Debug, Clone, Default)]
pub struct Environment {
    vars: BTreeMap<&'static str, String>,
}

impl Environment {
    /// The process's variables the chain reads.
    pub fn process() -> Environment {
        Environment {
            vars: VARIABLES
                .iter()
                .filter_map(|name| Some((*name, std::env::var(name).ok()?)))
                .collect(),
        }
    }

    /// These variables (those the chain does not read are ignored).
    pub fn of<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Environment {
        Environment {
            vars: pairs
                .into_iter()
                .filter_map(|(name, value)| {
                    let name = VARIABLES.iter().find(|known| **known == name)?;
                    Some((*name, value.to_string()))
                })
                .collect(),
        }
    }

    /// A variable's value, unless unset or empty.
    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|value| !value.trim().is_empty())
    }

    fn credentials_file(&self) -> Option<PathBuf> {
        if let Some(file) = self.var("AWS_SHARED_CREDENTIALS_FILE") {
            return Some(expand_home(file, self.home()));
        }
        Some(PathBuf::from(self.home()?).join(".aws").join("credentials"))
    }

    fn home(&self) -> Option<&str> {
        self.var("HOME").or_else(|| self.var("USERPROFILE"))
    }

    fn profile(&self) -> &str {
        self.var("AWS_PROFILE").unwrap_or("default")
    }

    fn imds_disabled(&self) -> bool {
        self.var("AWS_EC2_METADATA_DISABLED")
            .is_some_and(|value| value.trim().eq_ignore_ascii_case("true"))
    }

    fn imds_endpoint(&self) -> String {
        self.var("AWS_EC2_METADATA_SERVICE_ENDPOINT")
            .unwrap_or(IMDS_ADDRESS)
            .trim_end_matches('/')
            .to_string()
    }

    fn container_uri(&self) -> Option<String> {
        if let Some(full) = self.var("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
            return Some(full.to_string());
        }
        self.var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
            .map(|relative| format!("{ECS_HOST}{relative}"))
    }
}

fn expand_home(path: &str, home: Option<&str>) -> PathBuf {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// Why no source of the chain may give credentials, when that is known without asking any
/// service (so a rollout can be refused when applied): no variables, no credentials file and
/// instance metadata disabled. `Ok` when some source may.
pub fn check_chain(env: &Environment) -> Result<(), String> {
    let static_keys =
        env.var("AWS_ACCESS_KEY_ID").is_some() && env.var("AWS_SECRET_ACCESS_KEY").is_some();
    let web_identity =
        env.var("AWS_ROLE_ARN").is_some() && env.var("AWS_WEB_IDENTITY_TOKEN_FILE").is_some();
    let file = env.credentials_file().is_some_and(|file| file.is_file());
    let container = env.container_uri().is_some();
    if static_keys || web_identity || file || container || !env.imds_disabled() {
        return Ok(());
    }
    Err(format!(
        "cloudwatch needs credentials: provider.secretRef (a Secret with AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY), or in weir's environment one of: AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY, AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, a shared \
         credentials file ({}), AWS_CONTAINER_CREDENTIALS_FULL_URI, or instance metadata (turned \
         off by AWS_EC2_METADATA_DISABLED)",
        env.credentials_file()
            .map_or("none: no HOME".into(), |file| file.display().to_string())
    ))
}

/// Temporary credentials by where they came from.
static CACHE: LazyLock<Mutex<HashMap<String, AwsCredentials>>> = LazyLock::new(Mutex::default);

fn cached(key: &str, now: Timestamp) -> Option<AwsCredentials> {
    let cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    cache.get(key).filter(|found| found.fresh(now)).cloned()
}

fn keep(key: String, credentials: &AwsCredentials) {
    CACHE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, credentials.clone());
}

/// What a source said: credentials, not configured here (with what was looked at), or a
/// failure that ends the chain.
enum Found {
    Credentials(AwsCredentials),
    Absent(String),
    Failed(String),
}

/// The chain's first credentials for a template in `region` at `now`, or why there are none:
/// a configured source's failure, or every source tried and what each lacked.
pub async fn resolve(
    env: &Environment,
    region: &str,
    now: Timestamp,
) -> Result<AwsCredentials, String> {
    let http = HttpClient::default();
    let mut tried = Vec::new();
    for source in 0..5 {
        let found = match source {
            0 => from_environment(env),
            1 => web_identity(env, region, now, &http).await,
            2 => shared_file(env),
            3 => container(env, now, &http).await,
            _ => instance_metadata(env, now, &http).await,
        };
        match found {
            Found::Credentials(credentials) => return Ok(credentials),
            Found::Failed(error) => return Err(error),
            Found::Absent(why) => tried.push(why),
        }
    }
    Err(format!("no AWS credentials: tried {}", tried.join("; ")))
}

/// Whether a CloudWatch plan signs with the chain's credentials: it has no key of a Secret.
pub fn needs_chain(plan: &Plan) -> bool {
    plan.provider == Provider::CloudWatch
        && plan.credentials.get(cloudwatch::SECRET_KEYS[0]).is_empty()
}

/// `plan` with the chain's credentials (of weir's environment, at `now`) among its own, so
/// they sign its requests and are struck out of its messages.
pub async fn complete(plan: &Plan, now: Timestamp) -> Result<Plan, String> {
    let region = plan.region.as_deref().unwrap_or_default();
    let found = resolve(&Environment::process(), region, now).await?;
    let mut plan = plan.clone();
    let credentials = &mut plan.credentials.0;
    credentials.insert(cloudwatch::SECRET_KEYS[0], found.access_key_id);
    credentials.insert(cloudwatch::SECRET_KEYS[1], found.secret_access_key);
    if let Some(token) = found.session_token {
        credentials.insert(cloudwatch::SESSION_TOKEN, token);
    }
    Ok(plan)
}

fn from_environment(env: &Environment) -> Found {
    match (
        env.var("AWS_ACCESS_KEY_ID"),
        env.var("AWS_SECRET_ACCESS_KEY"),
    ) {
        (Some(id), Some(secret)) => Found::Credentials(AwsCredentials {
            access_key_id: id.trim().to_string(),
            secret_access_key: secret.trim().to_string(),
            session_token: env
                .var("AWS_SESSION_TOKEN")
                .map(|token| token.trim().to_string()),
            expiration: None,
            source: "environment",
        }),
        _ => Found::Absent(
            "the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY not set)".into(),
        ),
    }
}

/// STS's address for `region`: `AWS_ENDPOINT_URL_STS` when set, else the regional endpoint.
pub fn sts_endpoint(env: &Environment, region: &str) -> String {
    match env.var("AWS_ENDPOINT_URL_STS") {
        Some(endpoint) => format!("{}/", endpoint.trim().trim_end_matches('/')),
        None => format!("https://sts.{region}.amazonaws.com/"),
    }
}

/// The form body of `AssumeRoleWithWebIdentity`.
pub fn assume_role_form(role_arn: &str, session_name: &str, token: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("Action", "AssumeRoleWithWebIdentity")
        .append_pair("Version", STS_VERSION)
        .append_pair("RoleArn", role_arn)
        .append_pair("RoleSessionName", session_name)
        .append_pair("WebIdentityToken", token)
        .finish()
}

async fn web_identity(env: &Environment, region: &str, now: Timestamp, http: &HttpClient) -> Found {
    let (Some(role_arn), Some(token_file)) = (
        env.var("AWS_ROLE_ARN"),
        env.var("AWS_WEB_IDENTITY_TOKEN_FILE"),
    ) else {
        return Found::Absent(
            "web identity (AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE not set)".into(),
        );
    };
    let endpoint = sts_endpoint(env, region);
    let key = format!("web identity {role_arn} {token_file} {endpoint}");
    if let Some(credentials) = cached(&key, now) {
        return Found::Credentials(credentials);
    }
    let failed = |why: String| Found::Failed(format!("web identity (role {role_arn}): {why}"));
    // Read again at each call: the kubelet rotates it.
    let token = match std::fs::read_to_string(token_file) {
        Ok(token) => token.trim().to_string(),
        Err(error) => return failed(format!("cannot read {token_file}: {error}")),
    };
    if token.is_empty() {
        return failed(format!("{token_file} is empty"));
    }
    let session_name = env
        .var("AWS_ROLE_SESSION_NAME")
        .map_or_else(|| format!("weir-{}", now.as_second()), str::to_string);
    let answer = http
        .request(
            Method::POST,
            &endpoint,
            vec![(
                "content-type",
                "application/x-www-form-urlencoded; charset=utf-8".to_string(),
            )],
            Bytes::from(assume_role_form(role_arn, &session_name, &token)),
            TIMEOUT,
        )
        .await;
    let scrub = |text: String| text.replace(&token, "[redacted]");
    let answer = match answer {
        Ok(answer) => answer,
        Err(error) => return failed(scrub(format!("STS: {error}"))),
    };
    if answer.status != StatusCode::OK {
        let text = cloudwatch::error_message(&answer.body)
            .unwrap_or_else(|| String::from_utf8_lossy(&answer.body).trim().to_string());
        return failed(scrub(format!(
            "STS {endpoint} answered {}: {text}",
            answer.status
        )));
    }
    match read_sts_credentials(&answer.body) {
        Ok(credentials) => {
            keep(key, &credentials);
            Found::Credentials(credentials)
        }
        Err(error) => failed(scrub(format!("STS {endpoint}: {error}"))),
    }
}

/// The credentials of STS's `AssumeRoleWithWebIdentityResponse` (XML).
pub fn read_sts_credentials(body: &[u8]) -> Result<AwsCredentials, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the answer is not UTF-8".to_string())?;
    let root = cloudwatch::parse_xml(text).ok_or("the answer is not XML")?;
    let credentials = root
        .path(&["AssumeRoleWithWebIdentityResult", "Credentials"])
        .ok_or("the answer has no AssumeRoleWithWebIdentityResult/Credentials")?;
    let field = |name: &str| {
        credentials
            .child(name)
            .map(|element| element.text.trim().to_string())
            .filter(|value| !value.is_empty())
            .ok_or_else(|| format!("the answer's Credentials have no {name}"))
    };
    let expiration = field("Expiration")?;
    Ok(AwsCredentials {
        access_key_id: field("AccessKeyId")?,
        secret_access_key: field("SecretAccessKey")?,
        session_token: Some(field("SessionToken")?),
        expiration: Some(
            expiration
                .parse()
                .map_err(|_| format!("the answer's Expiration {expiration:?} is not a time"))?,
        ),
        source: "web identity",
    })
}

/// The profiles of an AWS shared credentials (INI) file: `[name]` sections of `key = value`
/// lines; `#` and `;` start comments; names and keys are trimmed. A section named
/// `profile x` (the config file's form) is read as `x`.
pub fn parse_ini(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut profiles: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[') {
            let name = section.split(']').next().unwrap_or_default().trim();
            let name = name.strip_prefix("profile ").map_or(name, str::trim);
            profiles.entry(name.to_string()).or_default();
            current = Some(name.to_string());
            continue;
        }
        let (Some(section), Some((key, value))) = (&current, line.split_once('=')) else {
            continue;
        };
        // A comment after a value starts with whitespace then `#` or `;`.
        let value = [" #", "\t#", " ;", "\t;"]
            .iter()
            .filter_map(|marker| value.find(marker))
            .min()
            .map_or(value, |cut| &value[..cut]);
        profiles
            .entry(section.clone())
            .or_default()
            .insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
    }
    profiles
}

fn shared_file(env: &Environment) -> Found {
    let Some(file) = env.credentials_file() else {
        return Found::Absent("a shared credentials file (no HOME)".into());
    };
    let shown = file.display();
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Found::Absent(format!("the shared credentials file {shown} (none)"));
        }
        Err(error) => {
            return Found::Absent(format!(
                "the shared credentials file {shown} (unreadable: {error})"
            ));
        }
    };
    let profile = env.profile();
    let profiles = parse_ini(&text);
    let Some(keys) = profiles.get(profile) else {
        return Found::Absent(format!(
            "the shared credentials file {shown} (no profile {profile})"
        ));
    };
    let key = |name: &str| keys.get(name).filter(|value| !value.is_empty()).cloned();
    match (key("aws_access_key_id"), key("aws_secret_access_key")) {
        (Some(access_key_id), Some(secret_access_key)) => Found::Credentials(AwsCredentials {
            access_key_id,
            secret_access_key,
            session_token: key("aws_session_token"),
            expiration: None,
            source: "shared credentials file",
        }),
        _ => Found::Absent(format!(
            "the shared credentials file {shown} (profile {profile} has no aws_access_key_id and \
             aws_secret_access_key)"
        )),
    }
}

/// Credentials in the JSON the container endpoint and instance metadata answer
/// (`AccessKeyId`, `SecretAccessKey`, `Token`, `Expiration`).
pub fn read_json_credentials(body: &[u8], source: &'static str) -> Result<AwsCredentials, String> {
    let json: Value =
        serde_json::from_slice(body).map_err(|_| "the answer is not JSON".to_string())?;
    if let Some(code) = json.get("Code").and_then(Value::as_str)
        && code != "Success"
    {
        return Err(format!(
            "the answer's Code is {code}{}",
            json.get("Message")
                .and_then(Value::as_str)
                .map(|message| format!(": {message}"))
                .unwrap_or_default()
        ));
    }
    let field = |name: &str| {
        json.get(name)
            .and_then(Value::as_str)
            .filter(|value| !value.is_empty())
            .map(str::to_string)
    };
    let (Some(access_key_id), Some(secret_access_key)) =
        (field("AccessKeyId"), field("SecretAccessKey"))
    else {
        return Err("the answer has no AccessKeyId and SecretAccessKey".into());
    };
    let expiration = match field("Expiration") {
        Some(text) => Some(
            text.parse()
                .map_err(|_| format!("the answer's Expiration {text:?} is not a time"))?,
        ),
        None => None,
    };
    Ok(AwsCredentials {
        access_key_id,
        secret_access_key,
        session_token: field("Token"),
        expiration,
        source,
    })
}

async fn container(env: &Environment, now: Timestamp, http: &HttpClient) -> Found {
    let Some(uri) = env.container_uri() else {
        return Found::Absent(
            "container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI not set)".into(),
        );
    };
    let key = format!("container {uri}");
    if let Some(credentials) = cached(&key, now) {
        return Found::Credentials(credentials);
    }
    let failed = |why: String| Found::Failed(format!("container credentials: {why}"));
    let token = match env.var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") {
        Some(file) => match std::fs::read_to_string(file) {
            Ok(token) => Some(token.trim().to_string()),
            Err(error) => return failed(format!("cannot read {file}: {error}")),
        },
        None => env
            .var("AWS_CONTAINER_AUTHORIZATION_TOKEN")
            .map(|token| token.trim().to_string()),
    };
    let headers: Vec<(&str, String)> = token
        .iter()
        .map(|token| ("authorization", token.clone()))
        .collect();
    let scrub = |text: String| match &token {
        Some(token) if !token.is_empty() => text.replace(token.as_str(), "[redacted]"),
        _ => text,
    };
    let answer = match http
        .request(Method::GET, &uri, headers, Bytes::new(), TIMEOUT)
        .await
    {
        Ok(answer) => answer,
        Err(error) => return failed(scrub(error.to_string())),
    };
    if answer.status != StatusCode::OK {
        return failed(scrub(format!(
            "{uri} answered {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body).trim()
        )));
    }
    match read_json_credentials(&answer.body, "container credentials") {
        Ok(credentials) => {
            keep(key, &credentials);
            Found::Credentials(credentials)
        }
        Err(error) => failed(format!("{uri}: {error}")),
    }
}

async fn instance_metadata(env: &Environment, now: Timestamp, http: &HttpClient) -> Found {
    if env.imds_disabled() {
        return Found::Absent(
            "instance metadata (turned off by AWS_EC2_METADATA_DISABLED)".to_string(),
        );
    }
    let endpoint = env.imds_endpoint();
    let key = format!("instance metadata {endpoint}");
    if let Some(credentials) = cached(&key, now) {
        return Found::Credentials(credentials);
    }
    let absent = |why: String| Found::Absent(format!("instance metadata {endpoint} ({why})"));
    let token_url = format!("{endpoint}/latest/api/token");
    let token = match http
        .request(
            Method::PUT,
            &token_url,
            vec![(
                "x-aws-ec2-metadata-token-ttl-seconds",
                IMDS_TOKEN_TTL.to_string(),
            )],
            Bytes::new(),
            IMDS_TIMEOUT,
        )
        .await
    {
        Ok(answer) if answer.status == StatusCode::OK => {
            String::from_utf8_lossy(&answer.body).trim().to_string()
        }
        Ok(answer) => return absent(format!("PUT /latest/api/token answered {}", answer.status)),
        Err(error) => return absent(error.to_string()),
    };
    let scrub = |text: String| text.replace(&token, "[redacted]");
    let get = |path: String| {
        let url = format!("{endpoint}{path}");
        let token = token.clone();
        async move {
            let answer = http
                .request(
                    Method::GET,
                    &url,
                    vec![("x-aws-ec2-metadata-token", token)],
                    Bytes::new(),
                    IMDS_TIMEOUT,
                )
                .await
                .map_err(|error| error.to_string())?;
            if answer.status != StatusCode::OK {
                return Err(format!("GET {path} answered {}", answer.status));
            }
            Ok(answer.body)
        }
    };
    const ROLES: &str = "/latest/meta-data/iam/security-credentials/";
    let role = match get(ROLES.to_string()).await {
        Ok(body) => String::from_utf8_lossy(&body)
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_string(),
        // No role attached to the instance: 404.
        Err(error) => return absent(scrub(error)),
    };
    if role.is_empty() {
        return absent("no IAM role attached".into());
    }
    let body = match get(format!("{ROLES}{role}")).await {
        Ok(body) => body,
        Err(error) => return absent(scrub(error)),
    };
    match read_json_credentials(&body, "instance metadata") {
        Ok(credentials) => {
            keep(key, &credentials);
            Found::Credentials(credentials)
        }
        Err(error) => Found::Failed(format!("instance metadata {endpoint} role {role}: {error}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_credentials_file_is_read_as_the_sdk_reads_it() {
        let text = "# a comment\n; another\n[default]\naws_access_key_id = AKIADEFAULT\n\
            aws_secret_access_key=secret/default\n\n  [ ci ]  \n  AWS_ACCESS_KEY_ID\t=  AKIACI   \n\
            aws_secret_access_key = ci/secret ; rotated monthly\naws_session_token = tok#en\n\
            [profile other]\naws_access_key_id = AKIAOTHER\nno equals sign here\n";
        let profiles = parse_ini(text);
        assert_eq!(profiles["default"]["aws_access_key_id"], "AKIADEFAULT");
        assert_eq!(
            profiles["default"]["aws_secret_access_key"],
            "secret/default"
        );
        assert_eq!(profiles["ci"]["aws_access_key_id"], "AKIACI");
        assert_eq!(profiles["ci"]["aws_secret_access_key"], "ci/secret");
        assert_eq!(profiles["ci"]["aws_session_token"], "tok#en");
        assert_eq!(profiles["other"]["aws_access_key_id"], "AKIAOTHER");
        assert_eq!(profiles["other"].len(), 1);
    }

    #[test]
    fn the_shared_file_gives_its_profile_or_passes() {
        let dir = std::env::temp_dir().join(format!("weir-aws-ini-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id=A1\naws_secret_access_key=S1\n[ci]\naws_access_key_id=A2\n",
        )
        .unwrap();
        let path = file.display().to_string();
        let env = Environment::of([("AWS_SHARED_CREDENTIALS_FILE", path.as_str())]);
        let Found::Credentials(found) = shared_file(&env) else {
            panic!("default profile not read");
        };
        assert_eq!(
            (found.access_key_id.as_str(), found.session_token),
            ("A1", None)
        );
        let env = Environment::of([
            ("AWS_SHARED_CREDENTIALS_FILE", path.as_str()),
            ("AWS_PROFILE", "ci"),
        ]);
        assert!(
            matches!(shared_file(&env), Found::Absent(why) if why.contains("profile ci has no"))
        );
        let env = Environment::of([
            ("AWS_SHARED_CREDENTIALS_FILE", path.as_str()),
            ("AWS_PROFILE", "prod"),
        ]);
        assert!(matches!(shared_file(&env), Found::Absent(why) if why.contains("no profile prod")));
        let home = dir.display().to_string();
        let env = Environment::of([("HOME", home.as_str())]);
        assert!(matches!(shared_file(&env), Found::Absent(why) if why.contains("(none)")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// STS's documented answer to `AssumeRoleWithWebIdentity`.
    #[test]
    fn sts_credentials_are_read_from_its_xml() {
        let body = br#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:flagger:flagger</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/flagger/weir</Arn>
      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:weir</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE</SessionToken>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY</SecretAccessKey>
      <Expiration>2014-10-24T23:00:23Z</Expiration>
      <AccessKeyId>ASgeIAIOSFODNN7EXAMPLE</AccessKeyId>
    </Credentials>
    <Provider>arn:aws:iam::123456789012:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/X</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#;
        let credentials = read_sts_credentials(body).unwrap();
        assert_eq!(credentials.access_key_id, "ASgeIAIOSFODNN7EXAMPLE");
        assert_eq!(
            credentials.secret_access_key,
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
        );
        assert_eq!(
            credentials.session_token.as_deref(),
            Some("AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE")
        );
        let expiration: Timestamp = "2014-10-24T23:00:23Z".parse().unwrap();
        assert_eq!(credentials.expiration, Some(expiration));
        assert!(!format!("{credentials:?}").contains("EXAMPLE"));
        let error = br#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code><Message>Incorrect token audience</Message></Error><RequestId>r</RequestId></ErrorResponse>"#;
        assert!(read_sts_credentials(error).is_err());
        assert_eq!(
            cloudwatch::error_message(error).as_deref(),
            Some("InvalidIdentityToken: Incorrect token audience")
        );
    }

    #[test]
    fn metadata_credentials_are_read_from_json_and_expire_five_minutes_early() {
        let body = br#"{"Code":"Success","LastUpdated":"2026-11-28T12:00:00Z","Type":"AWS-HMAC",
            "AccessKeyId":"ASIAIMDS","SecretAccessKey":"imds/secret","Token":"imds-token",
            "Expiration":"2026-11-28T18:00:00Z"}"#;
        let credentials = read_json_credentials(body, "instance metadata").unwrap();
        assert_eq!(credentials.session_token.as_deref(), Some("imds-token"));
        let expiration: Timestamp = "2026-11-28T18:00:00Z".parse().unwrap();
        assert_eq!(credentials.expiration, Some(expiration));
        let at = |text: &str| text.parse::<Timestamp>().unwrap();
        assert!(credentials.fresh(at("2026-11-28T17:54:59Z")));
        assert!(!credentials.fresh(at("2026-11-28T17:55:00Z")));
        assert!(!credentials.fresh(at("2026-11-28T19:00:00Z")));
        assert!(
            read_json_credentials(
                br#"{"Code":"AssumeRoleUnauthorizedAccess","Message":"no"}"#,
                "x"
            )
            .is_err()
        );
        assert!(read_json_credentials(br#"{"AccessKeyId":"A"}"#, "x").is_err());
        let static_keys = AwsCredentials {
            expiration: None,
            ..credentials
        };
        assert!(static_keys.fresh(at("2099-01-01T00:00:00Z")));
    }

    #[test]
    fn the_form_and_endpoint_are_the_sdks() {
        assert_eq!(
            assume_role_form("arn:aws:iam::1:role/r", "weir-1", "a.b+c"),
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fr&RoleSessionName=weir-1&WebIdentityToken=a.b%2Bc"
        );
        assert_eq!(
            sts_endpoint(&Environment::default(), "eu-west-1"),
            "https://sts.eu-west-1.amazonaws.com/"
        );
        let env = Environment::of([("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9/")]);
        assert_eq!(sts_endpoint(&env, "eu-west-1"), "http://127.0.0.1:9/");
    }

    #[test]
    fn the_chain_is_refused_only_when_no_source_may_exist() {
        let home = std::env::temp_dir().join("weir-aws-no-home-here");
        let home = home.display().to_string();
        let off = [
            ("HOME", home.as_str()),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ];
        let error = check_chain(&Environment::of(off)).unwrap_err();
        assert!(
            error.contains("AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE"),
            "{error}"
        );
        assert!(check_chain(&Environment::of([("HOME", home.as_str())])).is_ok());
        let irsa = off.into_iter().chain([
            ("AWS_ROLE_ARN", "arn"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"),
        ]);
        assert!(check_chain(&Environment::of(irsa)).is_ok());
    }

    /// STS is asked again once the credentials are within five minutes of expiring, with the
    /// token file read again (the kubelet rotated it); until then they are kept.
    #[tokio::test(flavor = "current_thread")]
    async fn web_identity_credentials_are_kept_then_renewed_with_the_rotated_token() {
        use weir_testkit::metric_doubles_identity::{StsDouble, TemporaryKeys};
        let dir = std::env::temp_dir().join(format!("weir-aws-irsa-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let role = "arn:aws:iam::123456789012:role/weir";
        let region = "eu-west-1";
        let tokens = |run: &str, seconds: i64| {
            let file = dir.join(format!("token-{run}"));
            std::fs::write(&file, format!("first.token.{run}\n")).unwrap();
            let sts =
                StsDouble::start_with_lifetime(role, &file, TemporaryKeys::new("STS"), seconds);
            (file, sts)
        };
        let form_token = |sts: &StsDouble, index: usize| {
            let body = sts.seen()[index].body.clone();
            form_urlencoded::parse(body.as_bytes())
                .find(|(name, _)| name == "WebIdentityToken")
                .map(|(_, value)| value.into_owned())
                .unwrap()
        };

        // Four minutes of validity: renewed at every use, the file read each time.
        let (file, sts) = tokens("short", 240);
        let path = file.display().to_string();
        let url = sts.url();
        let env = Environment::of([
            ("AWS_ROLE_ARN", role),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", path.as_str()),
            ("AWS_ENDPOINT_URL_STS", url.as_str()),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]);
        let first = resolve(&env, region, Timestamp::now()).await.unwrap();
        assert_eq!(first.source, "web identity");
        assert_eq!(first.access_key_id, TemporaryKeys::new("STS").access_key_id);
        std::fs::write(&file, "rotated.token.short").unwrap();
        resolve(&env, region, Timestamp::now()).await.unwrap();
        assert_eq!(sts.seen().len(), 2);
        assert_eq!(form_token(&sts, 0), "first.token.short");
        assert_eq!(form_token(&sts, 1), "rotated.token.short");

        // An hour: kept, STS asked once.
        let (file, sts) = tokens("long", 3600);
        let path = file.display().to_string();
        let url = sts.url();
        let env = Environment::of([
            ("AWS_ROLE_ARN", role),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", path.as_str()),
            ("AWS_ENDPOINT_URL_STS", url.as_str()),
        ]);
        for _ in 0..3 {
            resolve(&env, region, Timestamp::now()).await.unwrap();
        }
        assert_eq!(sts.seen().len(), 1);
        // ... until five minutes before they expire.
        let later = Timestamp::now()
            .checked_add(SignedDuration::from_secs(56 * 60))
            .unwrap();
        resolve(&env, region, later).await.unwrap();
        assert_eq!(sts.seen().len(), 2);

        // A token STS refuses: its error, without the token.
        std::fs::write(dir.join("token-refused"), "not.the.trusted.token").unwrap();
        let refused = dir.join("token-refused").display().to_string();
        let env = Environment::of([
            ("AWS_ROLE_ARN", role),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", refused.as_str()),
            ("AWS_ENDPOINT_URL_STS", url.as_str()),
        ]);
        let error = resolve(&env, region, Timestamp::now()).await.unwrap_err();
        assert!(
            error.contains("answered 400 Bad Request: InvalidIdentityToken"),
            "{error}"
        );
        assert!(!error.contains("not.the.trusted.token"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Container credentials (ECS, EKS Pod Identity) with the token file's `Authorization`;
    /// a refused token ends the chain with the endpoint's answer, without the token.
    #[tokio::test(flavor = "current_thread")]
    async fn container_credentials_are_asked_with_the_authorization_token() {
        use weir_testkit::metric_doubles_identity::{ContainerCredentialsDouble, TemporaryKeys};
        let keys = TemporaryKeys::new("POD");
        let endpoint = ContainerCredentialsDouble::start("pod-identity-token-0001", keys.clone());
        let dir = std::env::temp_dir().join(format!("weir-aws-pod-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("eks-pod-identity-token");
        std::fs::write(&file, "pod-identity-token-0001\n").unwrap();
        let path = file.display().to_string();
        let uri = endpoint.full_uri();
        let env = Environment::of([
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri.as_str()),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", path.as_str()),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("HOME", "/nonexistent-home-of-weir-tests"),
        ]);
        let found = resolve(&env, "eu-west-1", Timestamp::now()).await.unwrap();
        assert_eq!(found.source, "container credentials");
        assert_eq!(found.access_key_id, keys.access_key_id);
        assert_eq!(
            found.session_token.as_deref(),
            Some(keys.session_token.as_str())
        );
        assert_eq!(
            endpoint.seen()[0].header("authorization"),
            Some("pod-identity-token-0001")
        );

        let refused = ContainerCredentialsDouble::start("another-token-0002", keys);
        let uri = refused.full_uri();
        let env = Environment::of([
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri.as_str()),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                "pod-identity-token-0001",
            ),
            ("HOME", "/nonexistent-home-of-weir-tests"),
        ]);
        let error = resolve(&env, "eu-west-1", Timestamp::now())
            .await
            .unwrap_err();
        assert!(
            error.starts_with("container credentials: ") && error.contains("401 Unauthorized"),
            "{error}"
        );
        assert!(!error.contains("pod-identity-token-0001"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn with_nothing_configured_every_source_is_named() {
        let home = std::env::temp_dir().join("weir-aws-no-home-here");
        let home = home.display().to_string();
        let env = Environment::of([
            ("HOME", home.as_str()),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]);
        let now = Timestamp::now();
        let error = resolve(&env, "eu-west-1", now).await.unwrap_err();
        for source in [
            "the environment",
            "web identity",
            "shared credentials file",
            "container credentials",
            "instance metadata (turned off",
        ] {
            assert!(error.contains(source), "{error}");
        }
    }
}
