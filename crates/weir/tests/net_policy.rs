//! Issue 20's network attacks against the real `weir` binary, over real HTTP on loopback: DNS
//! rebinding (a foreign `Host`), cross-site changes (a foreign `Origin`), rollouts that open
//! listeners on every interface, and rollouts that make weir connect to the cloud metadata
//! service or to itself - by literal address (refused when applied) or by a name that resolves
//! to a forbidden address (refused when connecting). Each test prints what was answered, so the
//! run's output is the table of refusals (docs/SECURITY.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{Ipv4Addr, SocketAddr};

use serde_json::Value;
use weir_testkit::fixtures::{TempDb, runtime, sample_apps, start_sample_app};
use weir_testkit::http;
use weir_testkit::process::Weir;
use weir_testkit::receiver::Receiver;
use weir_testkit::wait::wait_until;
use weir_tools::sample_app::SampleAppConfig;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

const BANNER: &str = "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: banner}
spec:
  variations: [{name: blue, value: blue}, {name: green, value: green}]
  defaultStrategy: {weights: {blue: 100}}
";

fn send(
    server: &Weir,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> http::Response {
    http::request(server.address("api"), method, path, headers, body)
        .unwrap_or_else(|| panic!("no answer to {method} {path}"))
}

/// `error.code` and `error.message` of an error answer.
fn error_of(answer: &http::Response) -> (String, String) {
    let body: Value = serde_json::from_str(&answer.body)
        .unwrap_or_else(|_| panic!("not a JSON error: {} {}", answer.status, answer.body));
    (
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// A local rollout `name` in namespace `shop` routing between two URL versions, held at its
/// first step; `webhooks` is a YAML flow list.
fn rollout(name: &str, listen: &str, primary: &str, canary: &str, webhooks: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}, namespace: shop}}
spec:
  target: {{kind: local, listen: \"{listen}\", primary: {{url: \"{primary}\"}}, canary: {{url: \"{canary}\"}}}}
  plan: {{canary: {{steps: [{{weight: 20, pause: {{}}}}, {{weight: 100}}]}}}}
  analysis:
    interval: 1s
    webhooks: {webhooks}
"
    )
}

fn apply(server: &Weir, yaml: &str, headers: &[(&str, &str)]) -> http::Response {
    let mut all = vec![("Content-Type", "application/yaml")];
    all.extend_from_slice(headers);
    send(server, "POST", "/api/v1/rollouts", &all, yaml)
}

/// The field errors of a refusal (422), as `(path, message)`.
fn field_errors(answer: &http::Response) -> Vec<(String, String)> {
    let body: Value = serde_json::from_str(&answer.body).unwrap();
    body["error"]["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .map(|error| {
                    (
                        error["path"].as_str().unwrap_or_default().to_string(),
                        error["message"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the history of `shop/name` mentions `text`, and returns the history.
fn history_mentioning(server: &Weir, name: &str, text: &str) -> String {
    wait_until(
        &format!("the history of shop/{name} to say {text:?}"),
        || {
            let answer = send(
                server,
                "GET",
                &format!("/api/v1/rollouts/shop/{name}/events"),
                &[],
                "",
            );
            (answer.status == 200 && answer.body.contains(text)).then_some(answer.body)
        },
    )
}

#[test]
fn foreign_hosts_are_refused_on_every_route_and_public_names_are_admitted() {
    let db = TempDb::new();
    let server = Weir::serve(WEIR, &db.path(), &["--public-name", "example.test"]);
    let port = server.address("api").port();
    let created = send(
        &server,
        "POST",
        "/api/v1/flags",
        &[("Content-Type", "application/yaml")],
        BANNER,
    );
    assert_eq!(created.status, 201, "{}", created.body);

    let evil = format!("evil.example:{port}");
    let json = ("Content-Type", "application/json");
    let routes: [(&str, &str, &str); 10] = [
        ("GET", "/api/v1/rollouts", ""),
        ("POST", "/api/v1/rollouts", "{}"),
        ("GET", "/api/v1/watch", ""),
        ("GET", "/api/v1/flags/watch", ""),
        (
            "POST",
            "/ofrep/v1/evaluate/flags/banner",
            "{\"context\": {\"targetingKey\": \"u1\"}}",
        ),
        (
            "POST",
            "/ofrep/v1/evaluate/flags",
            "{\"context\": {\"targetingKey\": \"u1\"}}",
        ),
        (
            "POST",
            "/ns/default/ofrep/v1/evaluate/flags/banner",
            "{\"context\": {}}",
        ),
        ("GET", "/metrics", ""),
        ("GET", "/healthz", ""),
        ("DELETE", "/api/v1/flags/default/banner", ""),
    ];
    for (method, path, body) in routes {
        let answer = send(&server, method, path, &[("Host", &evil), json], body);
        let (code, message) = error_of(&answer);
        println!(
            "{method} {path} with Host {evil}: {} {code}: {message}",
            answer.status
        );
        assert_eq!(
            (answer.status, code.as_str()),
            (421, "misdirected"),
            "{method} {path}"
        );
        assert!(message.contains(&format!("Host \"{evil}\"")), "{message}");
        assert!(message.contains("--public-name evil.example"), "{message}");
        assert!(message.contains("docs/SECURITY.md"), "{message}");
    }
    // Nothing was changed: the flag is still there.
    let flag = send(&server, "GET", "/api/v1/flags/default/banner", &[], "");
    assert_eq!(flag.status, 200, "{}", flag.body);

    // The name given with --public-name is admitted, with any port; so are loopback names.
    for host in [
        format!("example.test:{port}"),
        "EXAMPLE.test".to_string(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let answer = send(&server, "GET", "/api/v1/rollouts", &[("Host", &host)], "");
        println!("GET /api/v1/rollouts with Host {host}: {}", answer.status);
        assert_eq!(answer.status, 200, "{host}: {}", answer.body);
    }
    let evaluated = send(
        &server,
        "POST",
        "/ofrep/v1/evaluate/flags/banner",
        &[("Host", &format!("example.test:{port}")), json],
        "{\"context\": {\"targetingKey\": \"u1\"}}",
    );
    assert_eq!(evaluated.status, 200, "{}", evaluated.body);

    // HTTP/1.0 without a Host, on a loopback listener.
    let bare = http::raw(
        server.address("api"),
        "GET /api/v1/rollouts HTTP/1.0\r\n\r\n",
    )
    .unwrap();
    let (code, message) = error_of(&bare);
    println!(
        "GET /api/v1/rollouts over HTTP/1.0 without Host: {} {code}: {message}",
        bare.status
    );
    assert_eq!((bare.status, code.as_str()), (421, "misdirected"));
}

#[test]
fn a_foreign_origin_cannot_change_weir_but_ofrep_evaluations_are_answered() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let db = TempDb::new();
    let server = Weir::serve(WEIR, &db.path(), &[]);
    let address = server.address("api");
    let (primary, canary) = (
        format!("http://{}", versions[0]),
        format!("http://{}", versions[1]),
    );
    let created = send(
        &server,
        "POST",
        "/api/v1/flags",
        &[("Content-Type", "application/yaml")],
        BANNER,
    );
    assert_eq!(created.status, 201, "{}", created.body);

    let web = rollout("web", "127.0.0.1:0", &primary, &canary, "[]");
    let refused = apply(&server, &web, &[("Origin", "http://evil.example")]);
    let (code, message) = error_of(&refused);
    println!(
        "POST /api/v1/rollouts with Origin http://evil.example: {} {code}: {message}",
        refused.status
    );
    assert_eq!((refused.status, code.as_str()), (403, "forbidden"));
    assert!(
        message.contains("Origin \"http://evil.example\""),
        "{message}"
    );
    assert!(message.contains("CSRF"), "{message}");
    assert!(message.contains("docs/SECURITY.md"), "{message}");
    // Another port of the same host is another origin.
    let other_port = apply(&server, &web, &[("Origin", "http://127.0.0.1:1")]);
    assert_eq!(other_port.status, 403, "{}", other_port.body);
    let missing = send(&server, "GET", "/api/v1/rollouts/shop/web", &[], "");
    assert_eq!(missing.status, 404, "nothing was applied: {}", missing.body);

    // The server's own origin, and no Origin at all (curl, the CLI), are accepted.
    let own = apply(&server, &web, &[("Origin", &format!("http://{address}"))]);
    println!(
        "POST /api/v1/rollouts with Origin http://{address}: {}",
        own.status
    );
    assert_eq!(own.status, 201, "{}", own.body);
    let api = rollout("api", "127.0.0.1:0", &primary, &canary, "[]");
    let without = apply(&server, &api, &[]);
    println!("POST /api/v1/rollouts without Origin: {}", without.status);
    assert_eq!(without.status, 201, "{}", without.body);

    // OFREP evaluations are reads that browser SDKs send cross-origin: still answered.
    let context = "{\"context\": {\"targetingKey\": \"u1\"}}";
    for path in [
        "/ofrep/v1/evaluate/flags/banner",
        "/ofrep/v1/evaluate/flags",
    ] {
        let answer = send(
            &server,
            "POST",
            path,
            &[
                ("Content-Type", "application/json"),
                ("Origin", "http://app.example"),
            ],
            context,
        );
        println!(
            "POST {path} with Origin http://app.example: {}",
            answer.status
        );
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert!(answer.body.contains("blue"), "{}", answer.body);
    }
    // Other changes from a foreign page are refused too.
    let delete = send(
        &server,
        "DELETE",
        "/api/v1/flags/default/banner",
        &[("Origin", "http://evil.example")],
        "",
    );
    assert_eq!(delete.status, 403, "{}", delete.body);
}

#[test]
fn rollouts_listen_on_loopback_only_unless_the_server_allows_more() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let (primary, canary) = (
        format!("http://{}", versions[0]),
        format!("http://{}", versions[1]),
    );
    let everywhere = rollout("web", "0.0.0.0:0", &primary, &canary, "[]");

    let db = TempDb::new();
    let closed = Weir::serve(WEIR, &db.path(), &[]);
    let refused = apply(&closed, &everywhere, &[]);
    let errors = field_errors(&refused);
    println!(
        "listen 0.0.0.0:0 on a default weir serve: {} {errors:?}",
        refused.status
    );
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(error_of(&refused).0, "unprocessable");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "spec.target.listen");
    assert!(
        errors[0].1.contains("--allow-listen 0.0.0.0/0"),
        "{errors:?}"
    );
    assert!(errors[0].1.contains("docs/SECURITY.md"), "{errors:?}");
    drop(closed);

    let db = TempDb::new();
    let open = Weir::serve(WEIR, &db.path(), &["--allow-listen", "0.0.0.0/0"]);
    let accepted = apply(&open, &everywhere, &[]);
    println!(
        "listen 0.0.0.0:0 with --allow-listen 0.0.0.0/0: {}",
        accepted.status
    );
    assert_eq!(accepted.status, 201, "{}", accepted.body);
    let history = history_mentioning(&open, "web", "the router listens on http://0.0.0.0:");
    assert!(history.contains("0.0.0.0:"), "{history}");
}

#[test]
fn the_metadata_address_is_refused_when_a_rollout_is_applied() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1"]);
    let db = TempDb::new();
    // An alert provider at the metadata address, as a server's catalog (or a file run with
    // `weir run`) may hold one.
    let catalog = db.file("catalog.yaml");
    std::fs::write(
        &catalog,
        "apiVersion: weir.dev/v1alpha1
kind: AlertProvider
metadata: {name: ops, namespace: shop}
spec: {type: generic, address: 'http://169.254.169.254/hook'}
",
    )
    .unwrap();
    let catalog = catalog.display().to_string();
    let server = Weir::serve(WEIR, &db.path(), &["--catalog", &catalog]);
    let metadata = rollout(
        "web",
        "127.0.0.1:0",
        "http://169.254.169.254:80",
        &format!("http://{}", versions[0]),
        "[{name: creds, type: pre-rollout, url: 'http://169.254.169.254/latest/meta-data/'}]
    alerts: [{name: ops, providerRef: {name: ops}}]",
    );
    let refused = apply(&server, &metadata, &[]);
    let errors = field_errors(&refused);
    for (path, message) in &errors {
        println!("{}: {path}: {message}", refused.status);
    }
    assert_eq!(refused.status, 422, "{}", refused.body);
    let paths: Vec<&str> = errors.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.target.primary.url",
            "spec.analysis.webhooks[0].url",
            "spec.analysis.alerts[0].providerRef"
        ]
    );
    for (_, message) in &errors {
        assert!(message.contains("link-local"), "{message}");
        assert!(
            message.contains("--allow-connect 169.254.169.254"),
            "{message}"
        );
    }
    let missing = send(&server, "GET", "/api/v1/rollouts/shop/web", &[], "");
    assert_eq!(missing.status, 404, "nothing was stored: {}", missing.body);

    // The setting the message names admits it.
    let db = TempDb::new();
    let allowing = Weir::serve(
        WEIR,
        &db.path(),
        &["--catalog", &catalog, "--allow-connect", "169.254.169.254"],
    );
    let accepted = apply(&allowing, &metadata, &[]);
    println!(
        "the same rollout with --allow-connect 169.254.169.254: {}",
        accepted.status
    );
    assert_eq!(accepted.status, 201, "{}", accepted.body);
}

#[test]
fn a_webhook_to_weirs_own_api_by_name_is_refused_when_connecting() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let db = TempDb::new();
    let server = Weir::serve(WEIR, &db.path(), &[]);
    let port = server.address("api").port();
    // `localhost` is a name: it passes the check made when the rollout is applied ...
    let hook = format!("http://localhost:{port}/api/v1/rollouts/shop/web/commands");
    let web = rollout(
        "web",
        "127.0.0.1:0",
        &format!("http://{}", versions[0]),
        &format!("http://{}", versions[1]),
        &format!("[{{name: self, type: pre-rollout, url: '{hook}'}}]"),
    );
    let applied = apply(&server, &web, &[]);
    assert_eq!(applied.status, 201, "{}", applied.body);
    // ... and what it resolves to is weir's own API: not sent, and the history says why.
    let history = history_mentioning(&server, "web", "weir's own listener");
    let events: Value = serde_json::from_str(&history).unwrap();
    let result = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|event| {
            event["evidence"]["hooks"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|hook| hook["name"] == "self")
        .unwrap_or_else(|| panic!("no result of hook self in {history}"));
    let message = result["message"].as_str().unwrap();
    println!("webhook {hook}: success {}: {message}", result["success"]);
    assert_eq!(result["success"], false);
    assert!(message.contains("not sent"), "{message}");
    assert!(
        message.contains("refused by weir's outbound policy"),
        "{message}"
    );
    assert!(
        message.contains(&format!("127.0.0.1:{port}"))
            || message.contains(&format!("[::1]:{port}")),
        "{message}"
    );
}

#[test]
fn a_webhook_name_resolving_to_a_denied_address_is_never_called() {
    let runtime = runtime();
    // The versions answer on 127.0.0.2; the receiver, on 127.0.0.1, is denied.
    let on = |version: &str| {
        SampleAppConfig::new(SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), 0)), version)
    };
    let (primary, canary) = runtime.block_on(async {
        (
            start_sample_app(on("v1")).await,
            start_sample_app(on("v2")).await,
        )
    });
    let receiver = runtime.block_on(Receiver::answering(200));
    let db = TempDb::new();
    let server = Weir::serve(
        WEIR,
        &db.path(),
        &["--deny-connect", "127.0.0.1", "--deny-connect", "::1"],
    );
    let hook = format!("http://localhost:{}/hook", receiver.address().port());
    let web = rollout(
        "web",
        "127.0.0.1:0",
        &format!("http://{primary}"),
        &format!("http://{canary}"),
        &format!("[{{name: load, type: pre-rollout, url: '{hook}'}}]"),
    );
    let applied = apply(&server, &web, &[]);
    assert_eq!(applied.status, 201, "{}", applied.body);
    let history = history_mentioning(&server, "web", "--deny-connect");
    let events: Value = serde_json::from_str(&history).unwrap();
    let message = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|event| {
            event["evidence"]["hooks"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find_map(|hook| {
            (hook["name"] == "load")
                .then(|| hook["message"].as_str().unwrap_or_default().to_string())
        })
        .unwrap_or_else(|| panic!("no result of hook load in {history}"));
    println!("webhook {hook} under --deny-connect 127.0.0.1 --deny-connect ::1: {message}");
    assert!(message.contains("not sent"), "{message}");
    assert!(message.contains("localhost ("), "{message}");
    // The receiver never saw a request.
    assert_eq!(receiver.received().len(), 0);
    // While a literal 127.0.0.1 webhook is refused at once, when applied.
    let literal = rollout(
        "api",
        "127.0.0.1:0",
        &format!("http://{primary}"),
        &format!("http://{canary}"),
        &format!("[{{name: load, url: '{}'}}]", receiver.url("/hook")),
    );
    let refused = apply(&server, &literal, &[]);
    let errors = field_errors(&refused);
    println!(
        "webhook {} when applied: {} {errors:?}",
        receiver.url("/hook"),
        refused.status
    );
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(errors[0].0, "spec.analysis.webhooks[0].url");
    assert!(
        errors[0].1.contains("--deny-connect 127.0.0.1/32"),
        "{errors:?}"
    );
}

#[test]
fn weir_run_listen_checks_hosts_too() {
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let db = TempDb::new();
    let file = db.file("web.yaml");
    std::fs::write(
        &file,
        rollout(
            "web",
            "127.0.0.1:0",
            &format!("http://{}", versions[0]),
            &format!("http://{}", versions[1]),
            "[]",
        ),
    )
    .unwrap();
    let run = Weir::start(
        WEIR,
        &[
            "run",
            &file.display().to_string(),
            "--db",
            &db.path().display().to_string(),
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
        ],
    );
    let api = run.address("api");
    let refused = http::request(
        api,
        "GET",
        "/api/v1/rollouts",
        &[("Host", "evil.example")],
        "",
    )
    .unwrap();
    let (code, message) = error_of(&refused);
    println!(
        "weir run --listen, GET with Host evil.example: {} {code}: {message}",
        refused.status
    );
    assert_eq!((refused.status, code.as_str()), (421, "misdirected"));
    assert!(
        message.contains("start weir run with --public-name evil.example"),
        "{message}"
    );
    let admitted = http::get(api, "/api/v1/rollouts").unwrap();
    assert_eq!(admitted.status, 200, "{}", admitted.body);
}
