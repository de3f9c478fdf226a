//! Local rollouts judged by CloudWatch and Stackdriver templates without credentials of their
//! own, through `weir run`: weir reads the credential chains Flagger's SDKs read (issue 31).
//! Every endpoint is a double of weir-testkit on loopback, named through the variables the SDKs
//! honour (`AWS_ENDPOINT_URL_STS`, `AWS_EC2_METADATA_SERVICE_ENDPOINT`, `GCE_METADATA_HOST`);
//! every other source of the chains is blanked in weir's environment (empty variables, a `HOME`
//! of the test's own, instance metadata turned off unless the test plays it), so no real AWS or
//! Google endpoint is ever contacted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use weir_testkit::fixtures::{
    ClosedPort, TempDb, local_rollout_judged_by_template, runtime, sample_apps,
};
use weir_testkit::metric_doubles_cloud::CloudDouble;
use weir_testkit::metric_doubles_identity::{
    ContainerCredentialsDouble, GceMetadataDouble, ImdsDouble, StsDouble, TemporaryKeys,
};
use weir_testkit::process::run_rollout_file;

const REGION: &str = "eu-central-1";
const ROLE_ARN: &str = "arn:aws:iam::123456789012:role/weir-cloudwatch";
/// A projected service account token, as the kubelet writes it for IRSA.
const WEB_IDENTITY_TOKEN: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImUyZSJ9.eyJhdWQiOlsic3RzLmFtYXpvbmF3cy5jb20iXSwic3ViIjoic3lzdGVtOnNlcnZpY2VhY2NvdW50OndlaXItc3lzdGVtOndlaXIifQ.c2lnbmF0dXJl";
/// The keys of weir's own account, which no test's chain should end at.
const UNUSED_KEY_ID: &str = "AKIAUNUSED0000000000";
const UNUSED_SECRET: &str = "unused/secret/access/key/000000000000000";

fn cloudwatch_template(address: &str) -> String {
    format!(
        r#"apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: error-percentage}}
spec:
  provider: {{type: cloudwatch, region: {REGION}, address: "{address}"}}
  query: |
    [{{"Id": "e1", "Expression": "100 * m1 / m2", "Label": "ErrorPercentage"}},
     {{"Id": "m1", "ReturnData": false, "MetricStat": {{"Metric": {{"Namespace": "Shop", "MetricName": "Errors",
       "Dimensions": [{{"Name": "app", "Value": "{{{{ target }}}}"}}]}}, "Period": 60, "Stat": "Sum"}}}},
     {{"Id": "m2", "ReturnData": false, "MetricStat": {{"Metric": {{"Namespace": "Shop", "MetricName": "Requests",
       "Dimensions": [{{"Name": "app", "Value": "{{{{ target }}}}"}}]}}, "Period": 60, "Stat": "Sum"}}}}]
"#
    )
}

fn stackdriver_template(address: &str, secret: Option<&str>) -> String {
    let (secret_doc, secret_ref) = match secret {
        Some(data) => (
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: gcp}}\nstringData: {data}\n---\n"
            ),
            ", secretRef: {name: gcp}",
        ),
        None => (String::new(), ""),
    };
    format!(
        r#"{secret_doc}apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata: {{name: error-percentage}}
spec:
  provider: {{type: stackdriver, address: "{address}"{secret_ref}}}
  query: |
    fetch k8s_container
    | metric 'istio.io/service/server/request_count'
    | filter metric.destination_workload_name == '{{{{ target }}}}'
"#
    )
}

/// The template's documents and a local rollout judged by it alone.
fn documents(template: &str, primary: &str, canary: &str) -> String {
    local_rollout_judged_by_template(
        "shop-credentials",
        template,
        primary,
        canary,
        "{name: error-percentage}",
        "{max: 1}",
    )
}

/// Weir's environment with every source of both chains blanked: empty variables (read as
/// unset), a `HOME` without `.aws`, instance metadata off, the metadata server at a closed
/// port; then `env` on top.
fn environment(home: &str, closed: &str, env: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_SESSION_NAME",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ]
    .into_iter()
    .map(|name| (name.to_string(), String::new()))
    .collect();
    let closed_url = format!("http://{closed}");
    for (name, value) in [
        ("HOME", home),
        ("USERPROFILE", home),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", closed_url.as_str()),
        ("AWS_ENDPOINT_URL_STS", closed_url.as_str()),
        ("GCE_METADATA_HOST", closed),
    ] {
        all.push((name.into(), value.into()));
    }
    for (name, value) in env {
        all.retain(|(known, _)| known != name);
        all.push((name.to_string(), value.to_string()));
    }
    all
}

/// Runs the rollout to its end with this environment; its exit code, its events and everything
/// it printed.
fn run_with_env(yaml: &str, env: &[(&str, &str)]) -> (Option<i32>, Vec<Value>, String) {
    let dir = TempDb::new();
    let home = dir.file("home");
    std::fs::create_dir_all(&home).unwrap();
    let closed = ClosedPort::new();
    let env = environment(
        &home.display().to_string(),
        &closed.address().to_string(),
        env,
    );
    let env: Vec<(&str, &str)> = env
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let outcome = run_rollout_file(env!("CARGO_BIN_EXE_weir"), yaml, &env);
    (outcome.code, outcome.events, outcome.printed)
}

fn messages(events: &[Value], reason: &str) -> Vec<String> {
    events
        .iter()
        .filter(|event| event["reason"] == reason)
        .filter_map(|event| event["message"].as_str().map(str::to_string))
        .collect()
}

/// The CloudWatch double of these tests: it knows weir's (unused) account keys, and `keys`.
fn cloudwatch_accepting(keys: &TemporaryKeys) -> CloudDouble {
    let cloudwatch = CloudDouble::cloudwatch(REGION, UNUSED_KEY_ID, UNUSED_SECRET, None);
    cloudwatch.accept(
        &keys.access_key_id,
        &keys.secret_access_key,
        Some(&keys.session_token),
    );
    cloudwatch
}

/// Asserts every CloudWatch request was signed with `keys` and accepted.
fn assert_signed_with(cloudwatch: &CloudDouble, keys: &TemporaryKeys) {
    let seen = cloudwatch.seen();
    assert!(!seen.is_empty(), "CloudWatch was never asked");
    for request in &seen {
        let authorization = request.header("authorization").unwrap_or_default();
        println!("CloudWatch received: {authorization}");
        assert!(
            authorization.starts_with(&format!(
                "AWS4-HMAC-SHA256 Credential={}/",
                keys.access_key_id
            )),
            "{authorization}"
        );
        assert_eq!(
            request.header("x-amz-security-token"),
            Some(keys.session_token.as_str())
        );
        assert_eq!(request.status, 200, "{}", request.body);
    }
}

/// IRSA: `AWS_ROLE_ARN` and `AWS_WEB_IDENTITY_TOKEN_FILE` -> STS's AssumeRoleWithWebIdentity
/// (at `AWS_ENDPOINT_URL_STS`) -> CloudWatch requests signed with the issued key and session
/// token -> promotion. The credentials are asked for once and kept for the next checks.
#[test]
fn irsa_web_identity_credentials_sign_cloudwatch_requests() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let dir = TempDb::new();
    let token_file = dir.file("token");
    std::fs::write(&token_file, format!("{WEB_IDENTITY_TOKEN}\n")).unwrap();
    let keys = TemporaryKeys::new("STS");
    let sts = StsDouble::start(ROLE_ARN, &token_file, keys.clone());
    let cloudwatch = cloudwatch_accepting(&keys);
    cloudwatch.serve(Some(0.3));
    let yaml = documents(
        &cloudwatch_template(&cloudwatch.url()),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );
    let token_path = token_file.display().to_string();
    let sts_url = sts.url();
    let (code, events, printed) = run_with_env(
        &yaml,
        &[
            ("AWS_ROLE_ARN", ROLE_ARN),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", &token_path),
            ("AWS_ROLE_SESSION_NAME", "weir-e2e"),
            ("AWS_ENDPOINT_URL_STS", &sts_url),
        ],
    );
    println!("{:#?}", messages(&events, "Advanced"));
    assert_eq!(code, Some(0), "{events:#?}\n{printed}");
    assert_signed_with(&cloudwatch, &keys);
    let calls = sts.seen();
    let checks = cloudwatch.seen().len();
    println!("STS calls: {}, CloudWatch checks: {checks}", calls.len());
    assert_eq!(calls.len(), 1, "the credentials were not kept");
    assert!(checks >= 2, "{checks}");
    let call = &calls[0];
    assert_eq!(
        (call.method.as_str(), call.path.as_str(), call.status),
        ("POST", "/", 200)
    );
    assert!(
        call.header("authorization").is_none(),
        "STS's call is unsigned"
    );
    // (Every value here is made of characters form encoding leaves as they are.)
    let form: std::collections::BTreeMap<&str, &str> = call
        .body
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .collect();
    assert_eq!(form["Action"], "AssumeRoleWithWebIdentity");
    assert_eq!(form["RoleSessionName"], "weir-e2e");
    assert_eq!(form["WebIdentityToken"], WEB_IDENTITY_TOKEN);
    for secret in [
        WEB_IDENTITY_TOKEN,
        &keys.secret_access_key,
        &keys.session_token,
    ] {
        assert!(!printed.contains(secret), "{printed}");
    }
}

/// A web identity token STS does not accept: its `InvalidIdentityToken` is in the history, the
/// check is no data and `noData: fail` rolls the canary back; the token is in no output.
#[test]
fn a_refused_web_identity_token_rolls_back_with_stss_error() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let dir = TempDb::new();
    let trusted = dir.file("trusted-token");
    std::fs::write(&trusted, "another.projected.token").unwrap();
    let token_file = dir.file("token");
    std::fs::write(&token_file, WEB_IDENTITY_TOKEN).unwrap();
    let keys = TemporaryKeys::new("STS");
    let sts = StsDouble::start(ROLE_ARN, &trusted, keys.clone());
    let cloudwatch = cloudwatch_accepting(&keys);
    cloudwatch.serve(Some(0.3));
    let yaml = documents(
        &cloudwatch_template(&cloudwatch.url()),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );
    let token_path = token_file.display().to_string();
    let sts_url = sts.url();
    let (code, events, printed) = run_with_env(
        &yaml,
        &[
            ("AWS_ROLE_ARN", ROLE_ARN),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", &token_path),
            ("AWS_ENDPOINT_URL_STS", &sts_url),
        ],
    );
    let failed = messages(&events, "ChecksFailed");
    println!("{failed:#?}");
    assert_eq!(code, Some(1), "{events:#?}");
    let all = serde_json::to_string(&events).unwrap();
    assert!(
        all.contains("cloudwatch: web identity (role arn:aws:iam::123456789012:role/weir-cloudwatch): STS")
            && all.contains("400 Bad Request: InvalidIdentityToken: The web identity token that was passed could not be validated by AWS"),
        "{all}"
    );
    assert!(
        cloudwatch.seen().is_empty(),
        "CloudWatch was asked unsigned"
    );
    assert!(!sts.seen().is_empty());
    assert!(!printed.contains(WEB_IDENTITY_TOKEN), "{printed}");
}

/// The shared credentials file of `AWS_SHARED_CREDENTIALS_FILE`, profile `AWS_PROFILE`
/// (comments and spaces as people write them); then `~/.aws/credentials`'s `default` profile.
#[test]
fn the_shared_credentials_file_profile_signs_cloudwatch_requests() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let keys = TemporaryKeys::new("FILE");
    let cloudwatch = cloudwatch_accepting(&keys);
    cloudwatch.serve(Some(0.3));
    let yaml = documents(
        &cloudwatch_template(&cloudwatch.url()),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );
    let dir = TempDb::new();
    let file = dir.file("credentials");
    std::fs::write(
        &file,
        format!(
            "# weir's CI account\n[default]\naws_access_key_id = {UNUSED_KEY_ID}\n\
             aws_secret_access_key = {UNUSED_SECRET}\n\n[ci]   ; the canary's role\n\
             aws_access_key_id     = {}\n  aws_secret_access_key={}\naws_session_token = {}\n",
            keys.access_key_id, keys.secret_access_key, keys.session_token
        ),
    )
    .unwrap();
    let path = file.display().to_string();
    let (code, events, printed) = run_with_env(
        &yaml,
        &[
            ("AWS_SHARED_CREDENTIALS_FILE", &path),
            ("AWS_PROFILE", "ci"),
        ],
    );
    assert_eq!(code, Some(0), "{events:#?}\n{printed}");
    assert_signed_with(&cloudwatch, &keys);
    assert!(!printed.contains(&keys.secret_access_key), "{printed}");

    // `~/.aws/credentials` of weir's HOME, profile `default`.
    let home_keys = TemporaryKeys::new("HOME");
    let cloudwatch = cloudwatch_accepting(&home_keys);
    cloudwatch.serve(Some(0.3));
    let yaml = documents(
        &cloudwatch_template(&cloudwatch.url()),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );
    let home = dir.file("home");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws").join("credentials"),
        format!(
            "[default]\naws_access_key_id={}\naws_secret_access_key={}\naws_session_token={}\n",
            home_keys.access_key_id, home_keys.secret_access_key, home_keys.session_token
        ),
    )
    .unwrap();
    let home = home.display().to_string();
    let (code, events, printed) = run_with_env(&yaml, &[("HOME", &home)]);
    assert_eq!(code, Some(0), "{events:#?}\n{printed}");
    assert_signed_with(&cloudwatch, &home_keys);
}

/// Instance metadata (IMDSv2): a session token, the role's name, its credentials; the double
/// refuses any GET without the session token, so promotion means weir sent it.
#[test]
fn instance_metadata_credentials_sign_cloudwatch_requests() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let keys = TemporaryKeys::new("IMDS");
    let imds = ImdsDouble::start("weir-node-role", keys.clone());
    let cloudwatch = cloudwatch_accepting(&keys);
    cloudwatch.serve(Some(0.3));
    let yaml = documents(
        &cloudwatch_template(&cloudwatch.url()),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );
    let imds_url = imds.url();
    let (code, events, printed) = run_with_env(
        &yaml,
        &[
            ("AWS_EC2_METADATA_DISABLED", ""),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", &imds_url),
        ],
    );
    assert_eq!(code, Some(0), "{events:#?}\n{printed}");
    assert_signed_with(&cloudwatch, &keys);
    let seen: Vec<(String, String, u16)> = imds
        .seen()
        .into_iter()
        .map(|request| (request.method, request.path, request.status))
        .collect();
    println!("IMDS received: {seen:#?}");
    assert_eq!(
        seen,
        [
            ("PUT", "/latest/api/token", 200),
            ("GET", "/latest/meta-data/iam/security-credentials/", 200),
            (
                "GET",
                "/latest/meta-data/iam/security-credentials/weir-node-role",
                200
            ),
        ]
        .map(|(method, path, status)| (method.to_string(), path.to_string(), status))
    );
}

/// Container credentials (ECS, EKS Pod Identity): the endpoint of
/// `AWS_CONTAINER_CREDENTIALS_FULL_URI`, asked with the token of
/// `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`.
#[test]
fn container_credentials_sign_cloudwatch_requests() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let keys = TemporaryKeys::new("POD");
    let endpoint = ContainerCredentialsDouble::start("eks-pod-identity-token-0001", keys.clone());
    let cloudwatch = cloudwatch_accepting(&keys);
    cloudwatch.serve(Some(0.3));
    let yaml = documents(
        &cloudwatch_template(&cloudwatch.url()),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );
    let dir = TempDb::new();
    let token_file = dir.file("eks-pod-identity-token");
    std::fs::write(&token_file, "eks-pod-identity-token-0001").unwrap();
    let token_path = token_file.display().to_string();
    let uri = endpoint.full_uri();
    let (code, events, printed) = run_with_env(
        &yaml,
        &[
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &uri),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", &token_path),
        ],
    );
    assert_eq!(code, Some(0), "{events:#?}\n{printed}");
    assert_signed_with(&cloudwatch, &keys);
    assert_eq!(endpoint.seen().len(), 1, "the credentials were not kept");
    assert!(
        !printed.contains("eks-pod-identity-token-0001"),
        "{printed}"
    );
}

/// No source gives credentials (instance metadata does not answer): the check is no data with
/// every source tried named, and the canary is rolled back under `noData: fail`.
#[test]
fn without_any_credentials_the_check_names_what_was_tried() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let cloudwatch = cloudwatch_accepting(&TemporaryKeys::new("NONE"));
    cloudwatch.serve(Some(0.3));
    let yaml = documents(
        &cloudwatch_template(&cloudwatch.url()),
        &versions[0].to_string(),
        &versions[1].to_string(),
    );
    // Instance metadata on, at the closed port of run_with_env.
    let (code, events, _) = run_with_env(&yaml, &[("AWS_EC2_METADATA_DISABLED", "false")]);
    assert_eq!(code, Some(1), "{events:#?}");
    let all = serde_json::to_string(&events).unwrap();
    for tried in [
        "cloudwatch: no AWS credentials: tried the environment",
        "web identity (AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE not set)",
        "/.aws/credentials (none)",
        "container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI not set)",
        "instance metadata http://127.0.0.1:",
    ] {
        assert!(all.contains(tried), "{tried}: {all}");
    }
    assert!(cloudwatch.seen().is_empty());

    // With instance metadata off as well, no source can exist: refused when applied.
    let (code, _, printed) = run_with_env(&yaml, &[]);
    assert_ne!(code, Some(0), "{printed}");
    assert!(
        printed.contains("cloudwatch needs credentials: provider.secretRef"),
        "{printed}"
    );
}

/// Stackdriver without a key: the metadata server's token (GKE Workload Identity) and, without
/// a Secret, its project; with `GOOGLE_APPLICATION_CREDENTIALS`, the key file's JWT exchange.
#[test]
fn stackdriver_reads_application_default_credentials() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let google = CloudDouble::stackdriver("shop-project");
    let metadata_token = "ya29.c.metadata-server-token-0001";
    google.accept_token(metadata_token);
    let metadata = GceMetadataDouble::start("shop-project", metadata_token);
    let host = metadata.host();
    let (primary, canary) = (versions[0].to_string(), versions[1].to_string());

    // No Secret at all: token and project from the metadata server.
    let yaml = documents(
        &stackdriver_template(&google.url(), None),
        &primary,
        &canary,
    );
    google.serve(Some(0.2));
    let (code, events, printed) = run_with_env(&yaml, &[("GCE_METADATA_HOST", &host)]);
    assert_eq!(code, Some(0), "{events:#?}\n{printed}");
    let queries: Vec<_> = google.seen();
    assert!(!queries.is_empty());
    for query in &queries {
        assert_eq!(query.path, "/v3/projects/shop-project/timeSeries:query");
        assert_eq!(
            query.header("authorization"),
            Some(format!("Bearer {metadata_token}").as_str())
        );
        assert_eq!(query.status, 200);
    }
    let asked: Vec<String> = metadata.seen().into_iter().map(|seen| seen.path).collect();
    println!("metadata server received: {asked:#?}");
    assert!(
        asked
            .iter()
            .all(|path| path.starts_with("/computeMetadata/v1/"))
    );
    assert_eq!(
        asked
            .iter()
            .filter(|path| path.ends_with("/default/token"))
            .count(),
        1,
        "the token was not kept"
    );
    assert!(
        metadata
            .seen()
            .iter()
            .all(|seen| seen.status == 200 && seen.header("metadata-flavor") == Some("Google"))
    );
    assert!(!printed.contains(metadata_token), "{printed}");

    // A Secret with the project only: the metadata server's token; a bad value rolls back.
    let yaml = documents(
        &stackdriver_template(&google.url(), Some("{project: shop-project}")),
        &primary,
        &canary,
    );
    google.serve(Some(6.0));
    let (code, events, _) = run_with_env(&yaml, &[("GCE_METADATA_HOST", &host)]);
    assert_eq!(code, Some(1), "{events:#?}");
    let all = serde_json::to_string(&events).unwrap();
    assert!(all.contains("stackdriver: 6.0000 (accepted <= 1)"), "{all}");

    // GOOGLE_APPLICATION_CREDENTIALS: the key file's service account, exchanged at its
    // token_uri (the double verifies the JWT's signature); the metadata server is not asked.
    let dir = TempDb::new();
    let key_file = dir.file("adc.json");
    std::fs::write(&key_file, google.service_account_key()).unwrap();
    let key_path = key_file.display().to_string();
    let before = metadata.seen().len();
    let yaml = documents(
        &stackdriver_template(&google.url(), Some("{project: shop-project}")),
        &primary,
        &canary,
    );
    google.serve(Some(0.2));
    let (code, events, printed) = run_with_env(
        &yaml,
        &[
            ("GCE_METADATA_HOST", &host),
            ("GOOGLE_APPLICATION_CREDENTIALS", &key_path),
        ],
    );
    assert_eq!(code, Some(0), "{events:#?}\n{printed}");
    assert_eq!(metadata.seen().len(), before);
    assert!(
        google
            .seen()
            .iter()
            .any(|seen| seen.path == "/token" && seen.status == 200)
    );
    assert!(!printed.contains("PRIVATE KEY"), "{printed}");
}

/// The doubles refuse what the services refuse: STS a wrong token, another role, a missing
/// parameter; IMDS a GET without the session token; the metadata server a request without
/// `Metadata-Flavor: Google`.
#[test]
fn the_identity_doubles_refuse_what_the_services_refuse() {
    use weir_testkit::http::request;
    let address =
        |url: &str| -> std::net::SocketAddr { url.trim_start_matches("http://").parse().unwrap() };
    let dir = TempDb::new();
    let token_file = dir.file("token");
    std::fs::write(&token_file, WEB_IDENTITY_TOKEN).unwrap();
    let sts = StsDouble::start(ROLE_ARN, &token_file, TemporaryKeys::new("STS"));
    let form = |role: &str, token: &str| {
        format!(
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn={role}&RoleSessionName=weir-e2e&WebIdentityToken={token}"
        )
    };
    let post = |body: &str| {
        request(
            address(&sts.url()),
            "POST",
            "/",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            body,
        )
        .unwrap()
    };
    let answer = post(&form(ROLE_ARN, WEB_IDENTITY_TOKEN));
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer.body.contains("<AccessKeyId>ASIASTS"),
        "{}",
        answer.body
    );
    let answer = post(&form(ROLE_ARN, "wrong.token"));
    assert_eq!(answer.status, 400);
    assert!(
        answer.body.contains("<Code>InvalidIdentityToken</Code>"),
        "{}",
        answer.body
    );
    let answer = post(&form(
        "arn:aws:iam::123456789012:role/other",
        WEB_IDENTITY_TOKEN,
    ));
    assert_eq!(answer.status, 403);
    assert!(
        answer.body.contains("<Code>AccessDenied</Code>"),
        "{}",
        answer.body
    );
    let answer = post("Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleSessionName=x1");
    assert_eq!(answer.status, 400);
    assert!(
        answer.body.contains("<Code>MissingParameter</Code>"),
        "{}",
        answer.body
    );
    let answer = post(&form(ROLE_ARN, WEB_IDENTITY_TOKEN).replace("2011-06-15", "2010-08-01"));
    assert!(
        answer.body.contains("<Code>InvalidAction</Code>"),
        "{}",
        answer.body
    );

    let imds = ImdsDouble::start("role", TemporaryKeys::new("IMDS"));
    let imds_address = address(&imds.url());
    const ROLES: &str = "/latest/meta-data/iam/security-credentials/";
    assert_eq!(
        request(imds_address, "GET", ROLES, &[], "").unwrap().status,
        401
    );
    let token = request(
        imds_address,
        "PUT",
        "/latest/api/token",
        &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
        "",
    )
    .unwrap();
    assert_eq!(token.status, 200);
    let with_token = [("X-aws-ec2-metadata-token", token.body.trim())];
    let role = request(imds_address, "GET", ROLES, &with_token, "").unwrap();
    assert_eq!((role.status, role.body.as_str()), (200, "role"));
    let wrong = [("X-aws-ec2-metadata-token", "not-issued")];
    assert_eq!(
        request(imds_address, "GET", ROLES, &wrong, "")
            .unwrap()
            .status,
        401
    );
    let no_ttl = request(imds_address, "PUT", "/latest/api/token", &[], "").unwrap();
    assert_eq!(no_ttl.status, 400);

    let metadata = GceMetadataDouble::start("p", "ya29.t");
    let metadata_address: std::net::SocketAddr = metadata.host().parse().unwrap();
    let path = "/computeMetadata/v1/project/project-id";
    assert_eq!(
        request(metadata_address, "GET", path, &[], "")
            .unwrap()
            .status,
        403
    );
    let flavored = request(
        metadata_address,
        "GET",
        path,
        &[("Metadata-Flavor", "Google")],
        "",
    )
    .unwrap();
    assert_eq!((flavored.status, flavored.body.as_str()), (200, "p"));
}
