//! Google's Application Default Credentials for a Stackdriver template whose Secret holds no
//! `serviceAccountKey` (or that names no Secret), in the order Google's libraries (and so
//! Flagger) read them:
//!
//! 1. `GOOGLE_APPLICATION_CREDENTIALS`: the path of a service account's JSON key file, read
//!    when the plan is made (so a rollout is refused when applied if it is not such a key) and
//!    used as a Secret's `serviceAccountKey` would be (the JWT bearer grant at its `token_uri`);
//! 2. the metadata server (GKE Workload Identity, Compute Engine): `GET
//!    http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token`
//!    with `Metadata-Flavor: Google` (the host is `GCE_METADATA_HOST` when set, as Google's
//!    libraries honour), answering `{access_token, expires_in, token_type}`; the token is kept
//!    like an exchanged one, until a minute before it expires. Without a `project` in a Secret,
//!    the project is `/computeMetadata/v1/project/project-id`.
//!
//! The metadata server is an address of weir's environment (link-local), not a template's: it is
//! asked with a client of its own, outside the rollouts' outbound policy.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use http::{Method, StatusCode};
use weir_http::HttpClient;

use crate::{Credentials, Plan, stackdriver};

/// The variable naming a service account's key file.
pub const KEY_FILE: &str = "GOOGLE_APPLICATION_CREDENTIALS";

/// The variable naming the metadata server's host (and port).
pub const METADATA_HOST: &str = "GCE_METADATA_HOST";

/// The metadata server's name on Google Cloud.
const DEFAULT_METADATA_HOST: &str = "metadata.google.internal";

const TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

const PROJECT_PATH: &str = "/computeMetadata/v1/project/project-id";

/// The metadata server's base URL: `http://<GCE_METADATA_HOST or metadata.google.internal>`.
pub fn metadata_url(host: Option<&str>) -> String {
    let host = host
        .map(str::trim)
        .filter(|host| !host.is_empty())
        .unwrap_or(DEFAULT_METADATA_HOST);
    format!("http://{}", host.trim_end_matches('/'))
}

fn variable(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

/// A plan's credentials made ready: a Secret's `serviceAccountKey` checked; without one, the key
/// file of `GOOGLE_APPLICATION_CREDENTIALS` read in its place and checked; without either,
/// nothing (the metadata server is asked at query time). The error never holds the key.
pub(crate) fn plan_key(credentials: &mut Credentials) -> Result<(), String> {
    let key = credentials.get(stackdriver::SECRET_KEYS[1]);
    if !key.is_empty() {
        return stackdriver::ServiceAccount::parse(key).map(drop);
    }
    let Some(path) = variable(KEY_FILE) else {
        return Ok(());
    };
    let key = key_file(&path)?;
    credentials.0.insert(stackdriver::SECRET_KEYS[1], key);
    Ok(())
}

/// The service account key in the file at `path`, checked.
pub fn key_file(path: &str) -> Result<String, String> {
    let key = std::fs::read_to_string(path)
        .map_err(|error| format!("{KEY_FILE} {path} cannot be read: {error}"))?;
    stackdriver::ServiceAccount::parse(&key).map_err(|error| {
        format!(
            "{KEY_FILE} {path}: {}",
            error.replace("serviceAccountKey", "the file")
        )
    })?;
    Ok(key)
}

/// One GET of the metadata server.
async fn metadata_get(path: &str, timeout: Duration) -> Result<bytes::Bytes, String> {
    let base = metadata_url(variable(METADATA_HOST).as_deref());
    let url = format!("{base}{path}");
    let answer = HttpClient::default()
        .request(
            Method::GET,
            &url,
            vec![("metadata-flavor", "Google".to_string())],
            bytes::Bytes::new(),
            timeout,
        )
        .await
        .map_err(|error| {
            format!(
                "no Google credentials: no serviceAccountKey in a Secret, {KEY_FILE} not set, and \
                 the metadata server did not answer: {error}"
            )
        })?;
    if answer.status != StatusCode::OK {
        let text = String::from_utf8_lossy(&answer.body);
        let text = text.trim();
        let text = match text.char_indices().nth(200) {
            Some((cut, _)) => format!("{}...", &text[..cut]),
            None => text.to_string(),
        };
        return Err(format!(
            "the metadata server {url} answered {}: {text}",
            answer.status
        ));
    }
    Ok(answer.body)
}

/// An access token of the metadata server's default service account, kept in `tokens` under
/// `cache_key` until a minute before it expires.
pub(crate) async fn metadata_token(
    tokens: &Mutex<BTreeMap<String, (String, tokio::time::Instant)>>,
    cache_key: String,
    timeout: Duration,
) -> Result<String, String> {
    let now = tokio::time::Instant::now();
    let body = metadata_get(TOKEN_PATH, timeout).await?;
    let (token, expires_in) = stackdriver::read_token(&body)
        .map_err(|error| error.replace("token endpoint", "metadata server"))?;
    if let Some(keep) = expires_in.checked_sub(60).filter(|keep| *keep > 0) {
        tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(cache_key, (token.clone(), now + Duration::from_secs(keep)));
    }
    Ok(token)
}

/// The metadata server's project, once asked.
static PROJECT: LazyLock<Mutex<BTreeMap<String, String>>> = LazyLock::new(Mutex::default);

/// `plan` with a `project` when it has none: the metadata server's.
pub(crate) async fn complete_project(plan: &mut Plan, timeout: Duration) -> Result<(), String> {
    if !plan.credentials.get(stackdriver::SECRET_KEYS[0]).is_empty() {
        return Ok(());
    }
    let base = metadata_url(variable(METADATA_HOST).as_deref());
    let known = PROJECT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&base)
        .cloned();
    let project = match known {
        Some(project) => project,
        None => {
            let body = metadata_get(PROJECT_PATH, timeout).await?;
            let project = String::from_utf8_lossy(&body).trim().to_string();
            if project.is_empty() {
                return Err("the metadata server answered an empty project-id".into());
            }
            PROJECT
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(base, project.clone());
            project
        }
    };
    plan.credentials
        .0
        .insert(stackdriver::SECRET_KEYS[0], project);
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_host_is_googles_unless_overridden() {
        assert_eq!(metadata_url(None), "http://metadata.google.internal");
        assert_eq!(metadata_url(Some("")), "http://metadata.google.internal");
        assert_eq!(
            metadata_url(Some("127.0.0.1:8080")),
            "http://127.0.0.1:8080"
        );
    }

    /// The metadata server's documented answer.
    #[test]
    fn the_metadata_token_is_read_with_its_lifetime() {
        let body = br#"{"access_token":"ya29.c.metadata","expires_in":3599,"token_type":"Bearer"}"#;
        assert_eq!(
            stackdriver::read_token(body).unwrap(),
            ("ya29.c.metadata".to_string(), 3599)
        );
        assert!(stackdriver::read_token(br#"{"token_type":"Bearer"}"#).is_err());
    }

    #[test]
    fn a_key_file_that_is_not_a_service_account_key_is_named() {
        let dir = std::env::temp_dir().join(format!("weir-gcp-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("adc.json");
        std::fs::write(
            &file,
            r#"{"type":"authorized_user","client_id":"x","client_secret":"y","refresh_token":"z"}"#,
        )
        .unwrap();
        let path = file.display().to_string();
        let error = key_file(&path).unwrap_err();
        assert!(
            error.starts_with(&format!(
                "{KEY_FILE} {path}: the file is a \"authorized_user\" key"
            )),
            "{error}"
        );
        assert!(!error.contains("refresh_token"), "{error}");
        let missing = key_file(&dir.join("none.json").display().to_string()).unwrap_err();
        assert!(missing.contains("cannot be read"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
