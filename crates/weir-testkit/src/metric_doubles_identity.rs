//! Test doubles of the identity services behind the cloud SDKs' default credential chains, each
//! an HTTP/1.1 server on `127.0.0.1:0` on a thread of its own, like
//! [`crate::metric_doubles_cloud`]. They follow each service's documented API and refuse what
//! it refuses.
//!
//! - [`StsDouble`]: AWS STS's `AssumeRoleWithWebIdentity` (awsQuery, `POST /` with the form
//!   `Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=&RoleSessionName=&
//!   WebIdentityToken=`, unsigned, as the SDKs send it). The token must equal the content of the
//!   token file the double was given (read at each request, so a test can rotate it): else `400
//!   InvalidIdentityToken`. Another role is `403 AccessDenied`; a missing parameter `400
//!   MissingParameter`; a session name outside `[\w+=,.@-]{2,64}` `400 ValidationError`; another
//!   action or version `400 InvalidAction`. The answer is STS's documented XML
//!   (`AssumeRoleWithWebIdentityResult/Credentials` with `AccessKeyId`, `SecretAccessKey`,
//!   `SessionToken`, `Expiration`), errors `<ErrorResponse><Error><Type>Sender</Type><Code>..`.
//! - [`ImdsDouble`]: EC2's instance metadata service with IMDSv2 required (`HttpTokens:
//!   required`): `PUT /latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds` (1 to
//!   21600, else `400`) answers a session token; every `GET` needs it as
//!   `X-aws-ec2-metadata-token` (none or unknown: `401`).
//!   `/latest/meta-data/iam/security-credentials/` answers the role's name,
//!   `/latest/meta-data/iam/security-credentials/<role>` its credentials as JSON (`Code`,
//!   `LastUpdated`, `Type`, `AccessKeyId`, `SecretAccessKey`, `Token`, `Expiration`); any other
//!   path `404`. A request with `X-Forwarded-For` is refused (`403`), as IMDS does.
//! - [`ContainerCredentialsDouble`]: the container credentials endpoint of ECS and EKS Pod
//!   Identity, `GET /v1/credentials` with `Authorization: <token>` (another or none: `401`),
//!   answering `AccessKeyId`, `SecretAccessKey`, `Token`, `AccountId`, `Expiration`.
//! - [`GceMetadataDouble`]: Google's metadata server (what GKE Workload Identity serves):
//!   `GET /computeMetadata/v1/instance/service-accounts/default/token` answers `{access_token,
//!   expires_in, token_type}`, `/computeMetadata/v1/project/project-id` the project, both only
//!   with `Metadata-Flavor: Google` (else `403`), and with `Metadata-Flavor: Google` on the
//!   answer; `X-Forwarded-For` is refused (`403`); other paths `404`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

pub use crate::metric_doubles::Seen;

/// Temporary AWS credentials a double issues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemporaryKeys {
    /// The access key id (`ASIA...`).
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token.
    pub session_token: String,
}

impl TemporaryKeys {
    /// Keys named after `tag`, e.g. `TemporaryKeys::new("STS")`.
    pub fn new(tag: &str) -> TemporaryKeys {
        TemporaryKeys {
            access_key_id: format!("ASIA{tag:0<16}"),
            secret_access_key: format!("{tag}/temporary/secret/access/key/000000"),
            session_token: format!(
                "IQoJb3JpZ2luX2VjE{tag}SessionToken//////////wEaCXVzLWVhc3QtMSJH"
            ),
        }
    }
}

/// What arrived.
struct Received {
    method: String,
    path: String,
    query: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

type Handler = dyn Fn(&Received) -> Response<Full<Bytes>> + Send + Sync;

/// A server on `127.0.0.1:0` answering with a handler and recording what it saw.
struct Server {
    address: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    fn start(handler: Arc<Handler>) -> Server {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let recorded = Arc::clone(&seen);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                    .await
                    .unwrap();
                bound_tx.send(listener.local_addr().unwrap()).unwrap();
                let accept = async {
                    while let Ok((stream, _)) = listener.accept().await {
                        let handler = Arc::clone(&handler);
                        let recorded = Arc::clone(&recorded);
                        let service = service_fn(move |request: Request<Incoming>| {
                            let handler = Arc::clone(&handler);
                            let recorded = Arc::clone(&recorded);
                            async move {
                                Ok::<_, Infallible>(answer(&*handler, &recorded, request).await)
                            }
                        });
                        tokio::spawn(async move {
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
        });
        let address = bound_rx.recv().unwrap();
        Server {
            address,
            seen,
            stop: Some(stop),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn answer(
    handler: &Handler,
    seen: &Mutex<Vec<Seen>>,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|body| body.to_bytes())
        .unwrap_or_default();
    let received = Received {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or_default().to_string(),
        headers: parts.headers,
        body,
    };
    let response = handler(&received);
    seen.lock().unwrap().push(Seen {
        method: received.method.clone(),
        path: received.path.clone(),
        query: form_urlencoded::parse(received.query.as_bytes())
            .into_owned()
            .collect(),
        headers: received.headers.clone(),
        body: String::from_utf8_lossy(&received.body).into_owned(),
        status: response.status().as_u16(),
    });
    response
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, content_type.parse().unwrap());
    response
}

/// `seconds` from now, to the second, as AWS writes times.
fn from_now(seconds: i64) -> String {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + seconds)
        .unwrap()
        .to_string()
}

/// An hour from now.
fn in_an_hour() -> String {
    from_now(3600)
}

const STS_REQUEST_ID: &str = "4fd1e7b2-3c8a-4f7e-9a55-0c1d2e3f4a5b";

fn sts_error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    let mut response = respond(
        status,
        "text/xml",
        format!(
            "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n  <Error>\n    \
             <Type>Sender</Type>\n    <Code>{code}</Code>\n    <Message>{message}</Message>\n  \
             </Error>\n  <RequestId>{STS_REQUEST_ID}</RequestId>\n</ErrorResponse>\n"
        ),
    );
    response
        .headers_mut()
        .insert("x-amzn-requestid", STS_REQUEST_ID.parse().unwrap());
    response
}

/// AWS STS's `AssumeRoleWithWebIdentity`; stops when dropped.
pub struct StsDouble {
    server: Server,
}

impl StsDouble {
    /// STS trusting the web identity token in `token_file` (its content when a request
    /// arrives) for role `role_arn`, issuing `keys` valid for an hour.
    pub fn start(role_arn: &str, token_file: &Path, keys: TemporaryKeys) -> StsDouble {
        StsDouble::start_with_lifetime(role_arn, token_file, keys, 3600)
    }

    /// [`StsDouble::start`] issuing credentials valid for `seconds` (STS's `DurationSeconds`
    /// ranges from 900; shorter lets a test see them renewed at every use).
    pub fn start_with_lifetime(
        role_arn: &str,
        token_file: &Path,
        keys: TemporaryKeys,
        seconds: i64,
    ) -> StsDouble {
        let role_arn = role_arn.to_string();
        let token_file: PathBuf = token_file.to_path_buf();
        let handler = move |request: &Received| {
            assume_role_with_web_identity(&role_arn, &token_file, &keys, seconds, request)
        };
        StsDouble {
            server: Server::start(Arc::new(handler)),
        }
    }

    /// `http://ADDRESS`: `AWS_ENDPOINT_URL_STS`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.server.seen()
    }
}

fn assume_role_with_web_identity(
    role_arn: &str,
    token_file: &Path,
    keys: &TemporaryKeys,
    lifetime: i64,
    request: &Received,
) -> Response<Full<Bytes>> {
    let bad = |code: &str, message: &str| sts_error(StatusCode::BAD_REQUEST, code, message);
    if request.path != "/" {
        return bad(
            "InvalidAction",
            "Could not find operation for the request path",
        );
    }
    // awsQuery takes the parameters from a POSTed form or a GET's query string.
    let form = match request.method.as_str() {
        "POST" => {
            let form_type = request
                .header("content-type")
                .is_some_and(|value| value.starts_with("application/x-www-form-urlencoded"));
            if !form_type {
                return bad(
                    "InvalidAction",
                    "Could not find operation: the body is not application/x-www-form-urlencoded",
                );
            }
            request.body.clone()
        }
        "GET" => Bytes::from(request.query.clone()),
        _ => {
            return sts_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "InvalidAction",
                "Only GET and POST are supported",
            );
        }
    };
    let params: BTreeMap<String, String> = form_urlencoded::parse(&form).into_owned().collect();
    let param = |name: &str| params.get(name).map(String::as_str);
    let version = param("Version").unwrap_or_default();
    match param("Action") {
        Some("AssumeRoleWithWebIdentity") if version == "2011-06-15" => {}
        Some(action) => {
            return bad(
                "InvalidAction",
                &format!("Could not find operation {action} for version {version}"),
            );
        }
        None => return bad("MissingAction", "Missing Action"),
    }
    for name in ["RoleArn", "RoleSessionName", "WebIdentityToken"] {
        if param(name).is_none_or(str::is_empty) {
            return bad(
                "MissingParameter",
                &format!("The request must contain the parameter {name}"),
            );
        }
    }
    let session = param("RoleSessionName").unwrap_or_default();
    let session_ok = (2..=64).contains(&session.len())
        && session
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c));
    if !session_ok {
        return bad(
            "ValidationError",
            &format!(
                "1 validation error detected: Value '{session}' at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]*"
            ),
        );
    }
    let expected = std::fs::read_to_string(token_file).unwrap_or_default();
    if param("WebIdentityToken") != Some(expected.trim()) || expected.trim().is_empty() {
        return bad(
            "InvalidIdentityToken",
            "The web identity token that was passed could not be validated by AWS. Get a new identity token from the identity provider and then retry the request.",
        );
    }
    if param("RoleArn") != Some(role_arn) {
        return sts_error(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            "Not authorized to perform sts:AssumeRoleWithWebIdentity",
        );
    }
    let role_name = role_arn.rsplit('/').next().unwrap_or_default();
    let account = role_arn.split(':').nth(4).unwrap_or_default();
    let mut response = respond(
        StatusCode::OK,
        "text/xml",
        format!(
            r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <AssumedRoleId>AROA3XFRBF23EXAMPLE:{session}</AssumedRoleId>
      <Arn>arn:aws:sts::{account}:assumed-role/{role_name}/{session}</Arn>
    </AssumedRoleUser>
    <Provider>arn:aws:iam::{account}:oidc-provider/oidc.eks.eu-central-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE</Provider>
    <Credentials>
      <AccessKeyId>{}</AccessKeyId>
      <SecretAccessKey>{}</SecretAccessKey>
      <SessionToken>{}</SessionToken>
      <Expiration>{}</Expiration>
    </Credentials>
    <SubjectFromWebIdentityToken>system:serviceaccount:weir-system:weir</SubjectFromWebIdentityToken>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata>
    <RequestId>{STS_REQUEST_ID}</RequestId>
  </ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>
"#,
            keys.access_key_id,
            keys.secret_access_key,
            keys.session_token,
            from_now(lifetime)
        ),
    );
    response
        .headers_mut()
        .insert("x-amzn-requestid", STS_REQUEST_ID.parse().unwrap());
    response
}

/// EC2's instance metadata service, IMDSv2 only; stops when dropped.
pub struct ImdsDouble {
    server: Server,
}

impl ImdsDouble {
    /// The metadata of an instance whose IAM role `role` has the credentials `keys`.
    pub fn start(role: &str, keys: TemporaryKeys) -> ImdsDouble {
        let role = role.to_string();
        let tokens: Mutex<Vec<String>> = Mutex::default();
        let handler = move |request: &Received| instance_metadata(&role, &keys, &tokens, request);
        ImdsDouble {
            server: Server::start(Arc::new(handler)),
        }
    }

    /// `http://ADDRESS`: `AWS_EC2_METADATA_SERVICE_ENDPOINT`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.server.seen()
    }
}

fn instance_metadata(
    role: &str,
    keys: &TemporaryKeys,
    tokens: &Mutex<Vec<String>>,
    request: &Received,
) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: &str| respond(status, "text/plain", body.to_string());
    if request.header("x-forwarded-for").is_some() {
        return text(StatusCode::FORBIDDEN, "Forbidden");
    }
    if request.path == "/latest/api/token" {
        if request.method != "PUT" {
            return text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
        }
        let ttl = request
            .header("x-aws-ec2-metadata-token-ttl-seconds")
            .and_then(|ttl| ttl.trim().parse::<u32>().ok());
        if !ttl.is_some_and(|ttl| (1..=21600).contains(&ttl)) {
            return text(StatusCode::BAD_REQUEST, "Bad Request");
        }
        let mut tokens = tokens.lock().unwrap();
        let token = format!("AQAEAImdsSessionToken{:04}==", tokens.len() + 1);
        tokens.push(token.clone());
        let mut response = text(StatusCode::OK, &token);
        response.headers_mut().insert(
            "x-aws-ec2-metadata-token-ttl-seconds",
            ttl.unwrap_or_default().to_string().parse().unwrap(),
        );
        return response;
    }
    if request.method != "GET" {
        return text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    }
    let known = request
        .header("x-aws-ec2-metadata-token")
        .is_some_and(|token| tokens.lock().unwrap().iter().any(|known| known == token));
    if !known {
        // IMDSv2 required: no (valid) session token, no answer.
        return text(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    const ROLES: &str = "/latest/meta-data/iam/security-credentials/";
    match request.path.strip_prefix(ROLES) {
        Some("") => text(StatusCode::OK, role),
        Some(name) if name == role => respond(
            StatusCode::OK,
            "text/plain",
            serde_json::to_string_pretty(&serde_json::json!({
                "Code": "Success",
                "LastUpdated": jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
                    .unwrap()
                    .to_string(),
                "Type": "AWS-HMAC",
                "AccessKeyId": keys.access_key_id,
                "SecretAccessKey": keys.secret_access_key,
                "Token": keys.session_token,
                "Expiration": in_an_hour(),
            }))
            .unwrap(),
        ),
        _ => respond(
            StatusCode::NOT_FOUND,
            "text/html",
            "<?xml version=\"1.0\" encoding=\"iso-8859-1\"?>\n<html><head><title>404 - Not Found</title></head><body><h1>404 - Not Found</h1></body></html>\n".into(),
        ),
    }
}

/// The ECS / EKS Pod Identity container credentials endpoint; stops when dropped.
pub struct ContainerCredentialsDouble {
    server: Server,
}

impl ContainerCredentialsDouble {
    /// The endpoint at `GET /v1/credentials`, answering `keys` (valid an hour) to a request
    /// whose `Authorization` is `token`; another or none is `401`.
    pub fn start(token: &str, keys: TemporaryKeys) -> ContainerCredentialsDouble {
        let token = token.to_string();
        let handler = move |request: &Received| container_credentials(&token, &keys, request);
        ContainerCredentialsDouble {
            server: Server::start(Arc::new(handler)),
        }
    }

    /// `http://ADDRESS/v1/credentials`: `AWS_CONTAINER_CREDENTIALS_FULL_URI`.
    pub fn full_uri(&self) -> String {
        format!("{}/v1/credentials", self.server.url())
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.server.seen()
    }
}

fn container_credentials(
    token: &str,
    keys: &TemporaryKeys,
    request: &Received,
) -> Response<Full<Bytes>> {
    let json = |status: StatusCode, body: serde_json::Value| {
        respond(status, "application/json", body.to_string())
    };
    if request.method != "GET" || request.path != "/v1/credentials" {
        return json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"code": "NotFound", "message": "Not found"}),
        );
    }
    if request.header("authorization") != Some(token) {
        return json(
            StatusCode::UNAUTHORIZED,
            serde_json::json!({"code": "AccessDeniedException", "message": "Authorization token is not valid"}),
        );
    }
    json(
        StatusCode::OK,
        serde_json::json!({
            "AccessKeyId": keys.access_key_id,
            "SecretAccessKey": keys.secret_access_key,
            "Token": keys.session_token,
            "AccountId": "123456789012",
            "Expiration": in_an_hour(),
        }),
    )
}

/// Google's metadata server (GKE Workload Identity); stops when dropped.
pub struct GceMetadataDouble {
    server: Server,
}

impl GceMetadataDouble {
    /// The metadata server of a workload in `project` whose default service account's access
    /// token is `access_token` (valid an hour).
    pub fn start(project: &str, access_token: &str) -> GceMetadataDouble {
        let project = project.to_string();
        let access_token = access_token.to_string();
        let handler = move |request: &Received| gce_metadata(&project, &access_token, request);
        GceMetadataDouble {
            server: Server::start(Arc::new(handler)),
        }
    }

    /// `ADDRESS` (host and port, no scheme): `GCE_METADATA_HOST`.
    pub fn host(&self) -> String {
        self.server.address.to_string()
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.server.seen()
    }
}

fn gce_metadata(project: &str, access_token: &str, request: &Received) -> Response<Full<Bytes>> {
    let mut response = if request.header("x-forwarded-for").is_some()
        || request.header("metadata-flavor") != Some("Google")
    {
        respond(
            StatusCode::FORBIDDEN,
            "text/html; charset=UTF-8",
            "Missing required header \"Metadata-Flavor\": \"Google\"\n".into(),
        )
    } else if request.method != "GET" {
        respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/html",
            "Method Not Allowed".into(),
        )
    } else {
        match request.path.as_str() {
            "/computeMetadata/v1/instance/service-accounts/default/token" => respond(
                StatusCode::OK,
                "application/json",
                serde_json::json!({
                    "access_token": access_token,
                    "expires_in": 3599,
                    "token_type": "Bearer",
                })
                .to_string(),
            ),
            "/computeMetadata/v1/project/project-id" => {
                respond(StatusCode::OK, "application/text", project.to_string())
            }
            _ => respond(StatusCode::NOT_FOUND, "text/html", "Not Found".into()),
        }
    };
    response
        .headers_mut()
        .insert("metadata-flavor", "Google".parse().unwrap());
    response
}
