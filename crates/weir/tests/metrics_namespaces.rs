//! `/metrics` and tokens limited to namespaces (issue 32, item 3), on the real `weir serve`
//! over real HTTP: two namespaces, each with a flag, a flag rollout, a local rollout whose
//! router has served a request, and OFREP evaluations, so that every family with a namespace
//! has series in both. With `--metrics-auth read`, a read token limited to `team-a` gets every
//! series of `team-a` and every process-wide series, and not one line that mentions `team-b`;
//! an unlimited read token gets both namespaces.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::net::SocketAddr;

use serde_json::Value;
use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::metrics::Exposition;
use weir_testkit::process::{Weir, output};
use weir_testkit::wait::wait_until;

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// Each namespace's objects: the namespace, its local rollout's name.
const NAMESPACES: [(&str, &str); 2] = [("team-a", "web-a"), ("team-b", "web-b")];

/// `weir token create` on `db` (the secret is the only line on stdout).
fn token(db: &std::path::Path, name: &str, namespace: Option<&str>) -> String {
    let db = db.display().to_string();
    let scope = if name == "admin" { "admin" } else { "read" };
    let mut args = vec![
        "token", "create", "--db", &db, "--name", name, "--scope", scope,
    ];
    if let Some(namespace) = namespace {
        args.extend(["--namespace", namespace]);
    }
    let created = output(WEIR, &args);
    assert!(
        created.status.success(),
        "weir {args:?}: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    String::from_utf8_lossy(&created.stdout).trim().to_string()
}

fn send(server: &Weir, method: &str, path: &str, secret: &str, body: &str) -> http::Response {
    let authorization = format!("Bearer {secret}");
    let content_type = if body.starts_with('{') {
        "application/json"
    } else {
        "application/yaml"
    };
    http::request(
        server.address("api"),
        method,
        path,
        &[
            ("Authorization", &authorization),
            ("Content-Type", content_type),
        ],
        body,
    )
    .unwrap_or_else(|| panic!("no answer to {method} {path}"))
}

fn created(answer: &http::Response, what: &str) {
    assert!(
        answer.status == 201 || answer.status == 200,
        "{what}: {} {}",
        answer.status,
        answer.body
    );
}

/// Where rollout `namespace/name`'s router listens, as its history says.
fn router_address(server: &Weir, admin: &str, namespace: &str, name: &str) -> SocketAddr {
    let path = format!("/api/v1/rollouts/{namespace}/{name}/events");
    wait_until(
        &format!("the router of {namespace}/{name} to listen"),
        || {
            let answer = send(server, "GET", &path, admin, "");
            let page: Value = serde_json::from_str(&answer.body).ok()?;
            page["items"].as_array()?.iter().find_map(|event| {
                event["message"]
                    .as_str()?
                    .strip_prefix("the router listens on http://")?
                    .parse()
                    .ok()
            })
        },
    )
}

/// `/metrics` as `secret` sees it.
fn scrape(server: &Weir, secret: &str) -> String {
    let answer = send(server, "GET", "/metrics", secret, "");
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body
}

/// The series of an exposition (a sample line without its value), in order.
fn series(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            line.rsplit_once(' ')
                .map_or(line, |(series, _)| series)
                .to_string()
        })
        .collect()
}

#[test]
fn a_token_limited_to_a_namespace_reads_no_metric_of_another() {
    let db = TempDb::new();
    let admin = token(&db.path(), "admin", None);
    let everything = token(&db.path(), "everything", None);
    let team_a = token(&db.path(), "team-a-reader", Some("team-a"));
    let server = Weir::serve(WEIR, &db.path(), &["--metrics-auth", "read"]);

    for (namespace, rollout) in NAMESPACES {
        let flag = format!(
            "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {{name: banner, namespace: {namespace}}}
spec:
  variations: [{{name: blue, value: blue}}, {{name: green, value: green}}]
  defaultStrategy: {{weights: {{blue: 100}}}}
"
        );
        created(
            &send(&server, "POST", "/api/v1/flags", &admin, &flag),
            "a flag",
        );
        let flag_rollout = format!(
            "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: fr, namespace: {namespace}}}
spec:
  target: {{kind: flag, flag: banner, control: blue, variation: green}}
  plan: {{canary: {{steps: [{{weight: 20, pause: {{}}}}, {{weight: 100}}]}}}}
  analysis: {{interval: 1s}}
"
        );
        created(
            &send(&server, "POST", "/api/v1/rollouts", &admin, &flag_rollout),
            "a flag rollout",
        );
        // Versions nobody answers for: the router answers 502 and counts it.
        let local = format!(
            "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {rollout}, namespace: {namespace}}}
spec:
  target: {{kind: local, listen: \"127.0.0.1:0\", primary: {{url: \"http://127.0.0.1:9\"}}, canary: {{url: \"http://127.0.0.1:9\"}}}}
  plan: {{canary: {{steps: [{{weight: 20, pause: {{}}}}]}}}}
"
        );
        created(
            &send(&server, "POST", "/api/v1/rollouts", &admin, &local),
            "a local rollout",
        );
        let router = router_address(&server, &admin, namespace, rollout);
        let routed = http::get(router, "/").expect("the router answers");
        assert_eq!(routed.status, 502, "{}", routed.body);
        let evaluated = send(
            &server,
            "POST",
            &format!("/ns/{namespace}/ofrep/v1/evaluate/flags/banner"),
            &admin,
            "{\"context\": {\"targetingKey\": \"u1\"}}",
        );
        assert_eq!(evaluated.status, 200, "{}", evaluated.body);
    }

    // Every family with a namespace has series in both namespaces (the unlimited view).
    let families = [
        "weir_rollout_phase",
        "weir_rollout_canary_weight_ratio",
        "weir_rollout_promotions_total",
        "weir_router_requests_total",
        "weir_router_errors_total",
        "weir_router_request_duration_seconds_count",
        "weir_flag_exposures_total",
        "weir_flag_reported_requests_total",
    ];
    wait_until("series of every family in both namespaces", || {
        let all = Exposition::parse(scrape(&server, &everything));
        families
            .iter()
            .all(|family| {
                NAMESPACES
                    .iter()
                    .all(|(namespace, _)| !all.all(family, &[("namespace", namespace)]).is_empty())
            })
            .then_some(())
    });

    // Compared over the whole series set: what the limited token gets is exactly what the
    // unlimited one gets, less every series that mentions team-b. Two unlimited scrapes around
    // the limited one must agree (a series may appear or go between scrapes; then look again).
    let (unlimited, limited) = wait_until("two unlimited scrapes that agree", || {
        let before = scrape(&server, &everything);
        let limited = scrape(&server, &team_a);
        let after = scrape(&server, &everything);
        (series(&before) == series(&after)).then_some((before, limited))
    });
    let leaked: Vec<&str> = limited
        .lines()
        .filter(|line| line.contains("team-b") || line.contains("web-b"))
        .collect();
    assert!(
        leaked.is_empty(),
        "the team-a token reads {} line(s) about team-b:\n{}",
        leaked.len(),
        leaked.join("\n")
    );
    let of_b: BTreeSet<String> = series(&unlimited)
        .into_iter()
        .filter(|series| series.contains("team-b"))
        .collect();
    let expected: BTreeSet<String> = series(&unlimited).difference(&of_b).cloned().collect();
    assert_eq!(
        series(&limited),
        expected,
        "the team-a token's series differ from the unlimited view less team-b's"
    );
    let of_a = expected
        .iter()
        .filter(|series| series.contains("namespace=\"team-a\""))
        .count();
    let process_wide = expected.len() - of_a;
    assert!(of_a > 0 && process_wide > 0);
    assert!(limited.trim_end().ends_with("# EOF"), "{limited}");
    assert!(
        limited.contains("weir_engine_ticks_total"),
        "process-wide series stay"
    );
    eprintln!(
        "unlimited read token: {} series, {} of them about team-b; team-a token: {} series \
         ({of_a} of team-a, {process_wide} process-wide), none about team-b",
        series(&unlimited).len(),
        of_b.len(),
        series(&limited).len()
    );
    assert!(of_b.len() >= of_a / 2, "team-b has series to leave out");

    // Without a token: 401, as before.
    let anonymous = http::get(server.address("api"), "/metrics").unwrap();
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
}
