//! The web dashboard in a real browser (headless Chromium over WebDriver, see
//! `weir_testkit::webdriver`) against a real `weir serve`: the rollouts list follows a local
//! rollout live (its progress bar moves, and the weight it shows is the API's), promote on a
//! rollout waiting at a confirm-promotion gate works, and creating a flag rollout with the
//! template setting shows the server's validation error next to the field. The server has
//! tokens: the browser logs in through the login form (a wrong token is refused without being
//! shown back), keeps an HttpOnly session cookie the page's script cannot read, logs out, and
//! with a `read` token finds the commands disabled with the reason. With `WEIR_SCREENSHOTS=DIR`
//! it saves the screenshots docs/DASHBOARD.md shows.
//!
//! Without Chromium the browser test fails in CI (`CI=true`: `.ci/run` installs it) and is
//! skipped elsewhere, saying why (docs/TESTING.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use serde_json::{Value, json};
use weir_testkit::fixtures::{ClosedPort, TempDb, runtime, sample_apps};
use weir_testkit::http;
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;
use weir_testkit::webdriver::Browser;

/// A browser at 1280 px, or `None` (with the reason printed) where none is installed and this
/// is not CI.
fn browser() -> Option<Browser> {
    match Browser::start(1280, 1000) {
        Ok(browser) => Some(browser),
        Err(why) => {
            let ci = std::env::var("CI").is_ok_and(|value| value == "true" || value == "1");
            assert!(
                !ci,
                "the dashboard's browser test needs Chromium and chromedriver in CI (.ci/run installs them): {why}"
            );
            // Straight to the process's stderr: the harness's capture of `eprintln!` would hide
            // the reason of a test that passes by skipping.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: the dashboard's browser test: {why}"
            );
            None
        }
    }
}

/// Where `WEIR_SCREENSHOTS` asks the screenshots to go, if it does.
fn screenshots() -> Option<PathBuf> {
    std::env::var_os("WEIR_SCREENSHOTS").map(PathBuf::from)
}

/// Saves the window as `dir/name` (without the passing notice of the last action).
fn screenshot(browser: &Browser, dir: &std::path::Path, name: &str) {
    browser.execute("document.getElementById('toast').hidden = true", &[]);
    browser.save_screenshot(&dir.join(name));
    browser.execute("document.getElementById('toast').hidden = false", &[]);
}

/// A server with tokens, and the API as its admin token sees it.
struct Api {
    server: Weir,
    bearer: String,
}

impl Api {
    fn post(&self, path: &str, content_type: &str, body: &str) -> http::Response {
        http::request(
            self.server.address("api"),
            "POST",
            path,
            &[
                ("Content-Type", content_type),
                ("Authorization", &self.bearer),
            ],
            body,
        )
        .unwrap()
    }

    fn get_json(&self, path: &str) -> (u16, Value) {
        let answer = http::request(
            self.server.address("api"),
            "GET",
            path,
            &[("Authorization", &self.bearer)],
            "",
        )
        .unwrap();
        (
            answer.status,
            serde_json::from_str(&answer.body).unwrap_or(Value::Null),
        )
    }

    fn status_of(&self, name: &str) -> Value {
        self.get_json(&format!("/api/v1/rollouts/shop/{name}")).1["status"].clone()
    }
}

/// `weir token create --db` (before the server starts, as a first admin token is made); the
/// secret it prints once.
fn create_token(db: &std::path::Path, name: &str, scope: &str) -> String {
    let db = db.display().to_string();
    let output = weir_testkit::process::output(
        env!("CARGO_BIN_EXE_weir"),
        &[
            "token", "create", "--db", &db, "--name", name, "--scope", scope,
        ],
    );
    assert!(
        output.status.success(),
        "weir token create: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let secret = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert!(secret.starts_with("weir_"), "{secret}");
    secret
}

const FLAGS: [&str; 2] = [
    "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: banner, namespace: shop}
spec:
  variations: [{name: blue, value: blue}, {name: green, value: green}]
  defaultStrategy: {variation: blue}
",
    "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: checkout, namespace: shop}
spec:
  variations: [{name: 'off', value: false}, {name: 'on', value: true}]
  defaultStrategy: {variation: 'off'}
",
];

/// How a test reaches the dashboard: on a server without tokens the page opens at once; with
/// `Some(token)` the login form it lands on is filled in and sent, and the page asked for
/// opens after it.
fn open_dashboard(browser: &Browser, base: &str, path: &str, token: Option<&str>) {
    browser.open(&format!("{base}{path}"));
    if let Some(token) = token {
        let field = browser.wait_for("#login-token");
        browser.type_into(&field, token);
        browser.click_on("#login-submit");
        wait_until("the page after the login", || {
            (browser.execute("return document.body.dataset.page", &[]) != "login").then_some(())
        });
    }
    wait_ready(browser);
}

/// Waits until the page for the current URL has loaded its data.
fn wait_ready(browser: &Browser) {
    wait_until("the dashboard page to be ready", || {
        (browser.execute("return document.body.dataset.ready", &[]) == "true").then_some(())
    });
}

/// Every control of the page has a name a screen reader reads (a label, an `aria-label`, or a
/// button's text), and every time shows its UTC value on hover.
fn assert_accessible(browser: &Browser, page: &str) {
    let unlabelled = browser.execute(
        "return [...document.querySelectorAll('main input, main select, main button, main textarea')]
           .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                        && !(e.tagName === 'BUTTON' && e.textContent.trim()))
           .map(e => e.outerHTML.slice(0, 120));",
        &[],
    );
    assert_eq!(unlabelled, json!([]), "{page}: controls without a label");
    let untitled = browser.execute(
        "return [...document.querySelectorAll('main time')]
           .filter(t => !(t.title || '').includes('UTC')).map(t => t.outerHTML);",
        &[],
    );
    assert_eq!(untitled, json!([]), "{page}: times without their UTC value");
}

/// Clicks the element matching `selector` and confirms the dialog that asks first.
fn click_and_confirm(browser: &Browser, selector: &str) {
    browser.click_on(selector);
    browser.click_on("dialog[open] #confirm-ok");
}

#[test]
fn the_dashboard_follows_a_rollout_live_promotes_it_and_shows_schedule_errors_by_their_field() {
    let Some(browser) = browser() else {
        return;
    };
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    // The gate's hook refuses connections: the gate never opens by itself.
    let closed = ClosedPort::new();
    let db = TempDb::new();
    // Tokens first (on the database, as the first admin token is made): the server then asks
    // every request for one.
    let admin = create_token(&db.path(), "release-admin", "admin");
    let reader = create_token(&db.path(), "viewer", "read");
    let db_arg = db.path().display().to_string();
    let server = Weir::start_capturing_stderr(
        env!("CARGO_BIN_EXE_weir"),
        &[
            "serve",
            "--db",
            &db_arg,
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
        ],
        // Everything a server may log, for the check at the end that no secret is in it.
        &[("RUST_LOG", "debug")],
    );
    let base = server.url("api");
    let api = Api {
        server,
        bearer: format!("Bearer {admin}"),
    };
    let (refused, _) = get_json_without_token(&api.server, "/api/v1/rollouts");
    assert_eq!(refused, 401, "the server does not ask for a token");
    for flag in FLAGS {
        let created = api.post("/api/v1/flags", "application/yaml", flag);
        assert_eq!(created.status, 201, "{}", created.body);
    }
    // A flag rollout on a manual schedule whose entries are days away (it waits at 0%).
    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(48);
    let flag_rollout = json!({
        "apiVersion": "weir.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "banner-green", "namespace": "shop"},
        "spec": {
            "target": {"kind": "flag", "flag": "banner", "control": "blue", "variation": "green"},
            "plan": {"schedule": {"manual": [
                {"at": later.to_string(), "weight": 25},
                {"at": (later + jiff::SignedDuration::from_hours(24)).to_string(), "weight": 100},
            ]}},
        },
    });
    let created = api.post(
        "/api/v1/rollouts",
        "application/json",
        &flag_rollout.to_string(),
    );
    assert_eq!(created.status, 201, "{}", created.body);

    // Not logged in, the page asks for a token, and keeps where the reader was going.
    browser.open(&format!("{base}/rollouts"));
    browser.wait_for("#login-token");
    wait_ready(&browser);
    assert_eq!(
        browser.execute("return location.pathname + location.search", &[]),
        "/login?next=%2Frollouts"
    );
    assert_accessible(&browser, "the login");
    if let Some(dir) = screenshots() {
        screenshot(&browser, &dir, "dashboard-login.png");
    }
    // A wrong token: an error, and the token is not shown back (nor logged, below).
    let wrong = "weir_this-is-not-a-token-0123456789";
    let field = browser.wait_for("#login-token");
    browser.type_into(&field, wrong);
    browser.click_on("#login-submit");
    let refusal = wait_until("the login's error", || {
        browser.text_of("#login-form .error")
    });
    println!("a wrong token: {refusal}");
    assert!(refusal.contains("not valid"), "{refusal}");
    let page = browser.execute("return document.documentElement.outerHTML", &[]);
    assert!(
        !page.to_string().contains(wrong),
        "the page shows the wrong token"
    );
    assert_eq!(browser.execute("return location.pathname", &[]), "/login");

    // The list is open before the local rollout exists: everything it shows of it comes live.
    open_dashboard(&browser, &base, "/rollouts", Some(&admin));
    let who = browser.text_of("#session-name").unwrap_or_default();
    println!("logged in as {who}");
    assert_eq!(who, "release-admin (admin)");
    // The session cookie is there (the page works with it) but out of the script's reach.
    let cookies = browser.cookies();
    let session = cookies
        .iter()
        .find(|cookie| cookie["name"] == "weir_session")
        .unwrap_or_else(|| panic!("no session cookie: {cookies:?}"));
    println!(
        "the session cookie: httpOnly {}, sameSite {}",
        session["httpOnly"], session["sameSite"]
    );
    assert_eq!(session["httpOnly"], true, "{session}");
    assert_eq!(session["sameSite"], "Strict", "{session}");
    let visible = browser.execute("return document.cookie", &[]);
    assert!(
        !visible.to_string().contains("weir_session"),
        "the page's script reads the session cookie: {visible}"
    );
    browser.wait_for("tr[data-rollout='shop/banner-green']");
    // Every weight the row's bar shows, recorded by the page itself as it changes.
    browser.execute(
        "window.weightsSeen = [];
         new MutationObserver(() => {
           const bar = document.querySelector(\"tr[data-rollout='shop/gated'] [data-weight]\");
           if (bar && window.weightsSeen.at(-1) !== bar.dataset.weight) window.weightsSeen.push(bar.dataset.weight);
         }).observe(document.getElementById('main'), {subtree: true, childList: true, attributes: true});",
        &[],
    );
    let local = format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: gated, namespace: shop}}
spec:
  target:
    kind: local
    listen: \"127.0.0.1:0\"
    primary: {{url: \"http://{v1}\"}}
    canary: {{url: \"http://{v2}\"}}
  plan: {{canary: {{steps: [{{weight: 20, pause: {{}}}}, {{weight: 50}}]}}}}
  analysis:
    interval: 1s
    progressDeadline: 10m
    # No traffic: Flagger's semantics, or the evidence rule would hold before the gate.
    evidence: {{promoteOn: noHarm}}
    webhooks:
      - {{name: release, type: confirm-promotion, url: \"http://{hook}/\", timeout: 1s}}
",
        v1 = versions[0],
        v2 = versions[1],
        hook = closed.address(),
    );
    let created = api.post("/api/v1/rollouts", "application/yaml", &local);
    assert_eq!(created.status, 201, "{}", created.body);
    // It holds at 20% until resumed: the page shows that first...
    wait_until("the row to show the pause at 20%", || {
        let shown = browser.execute(
            "const row = document.querySelector(\"tr[data-rollout='shop/gated']\");
             return row ? row.querySelector(\"[data-role='weight']\").textContent : null;",
            &[],
        );
        (shown == "20%").then_some(())
    });
    assert_eq!(api.status_of("gated")["canaryWeight"], 20);
    // ...and moves when another client resumes the run.
    let resumed = api.post(
        "/api/v1/rollouts/shop/gated/commands",
        "application/json",
        r#"{"command": "resume", "actor": "test"}"#,
    );
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    wait_until("the rollout to wait at its confirm-promotion gate", || {
        (api.status_of("gated")["phase"] == "WaitingPromotion").then_some(())
    });
    let api_weight = api.status_of("gated")["canaryWeight"].clone();
    let shown = wait_until("the row to show the gate's phase", || {
        let shown = browser.execute(
            "const row = document.querySelector(\"tr[data-rollout='shop/gated']\");
             return row && row.dataset.phase === 'WaitingPromotion'
               ? row.querySelector(\"[data-role='weight']\").textContent : null;",
            &[],
        );
        shown.as_str().map(str::to_string)
    });
    let seen = browser.execute("return window.weightsSeen", &[]);
    println!("weights the bar showed: {seen}; now {shown}, the API says {api_weight}");
    assert_eq!(
        shown,
        format!("{api_weight}%"),
        "the page and the API disagree"
    );
    let seen: Vec<String> = serde_json::from_value(seen).unwrap();
    assert_eq!(seen.last().map(String::as_str), Some("50"), "{seen:?}");
    assert!(
        seen.iter().any(|weight| weight == "20"),
        "the bar never showed the pause at 20% ({seen:?})"
    );
    // Ticks: the paused step, the next step, and the gate.
    let ticks = browser.execute(
        "return [...document.querySelectorAll(\"tr[data-rollout='shop/gated'] .tick\")].map(t => t.className)",
        &[],
    );
    println!("ticks: {ticks}");
    assert_eq!(ticks.as_array().unwrap().len(), 3, "{ticks}");
    assert!(ticks.to_string().contains("tick-gate"), "{ticks}");
    assert!(ticks.to_string().contains("tick-pause"), "{ticks}");
    assert_accessible(&browser, "the rollouts");
    if let Some(dir) = screenshots() {
        screenshot(&browser, &dir, "dashboard-rollouts.png");
        browser.resize(390, 844);
        wait_ready(&browser);
        screenshot(&browser, &dir, "dashboard-rollouts-phone.png");
        browser.resize(1280, 1000);
    }
    // No page is wider than a phone's screen: wide tables scroll inside their box.
    browser.resize(390, 844);
    let overflow = browser.execute(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
        &[],
    );
    assert_eq!(overflow, 0, "the list is wider than a 390 px screen");
    browser.resize(1280, 1000);

    // The rollout's page, reached as a user does: by its link.
    browser.click_on("tr[data-rollout='shop/gated'] a");
    wait_ready(&browser);
    browser.wait_for("#cmd-promote");
    let history = browser.text_of("ol.history").unwrap_or_default();
    assert!(
        history.contains("waiting for confirm-promotion"),
        "{history}"
    );
    assert_accessible(&browser, "a rollout");
    if let Some(dir) = screenshots() {
        screenshot(&browser, &dir, "dashboard-rollout.png");
    }
    // Retry is not possible while the run waits: its button is disabled.
    assert_eq!(browser.enabled_of("#cmd-retry"), Some(false));
    click_and_confirm(&browser, "#cmd-promote");
    wait_until("the promotion to finish", || {
        (api.status_of("gated")["phase"] == "Succeeded").then_some(())
    });
    let phase = wait_until("the page to show the promotion", || {
        let text = browser.text_of("#rollout-phase")?;
        text.contains("Succeeded").then_some(text)
    });
    println!("after promote the page shows phase {phase}");
    let (_, events) = api.get_json("/api/v1/rollouts/shop/gated/events?limit=500");
    // The history names the token the page logged in with.
    assert!(
        events.to_string().contains("promoted by release-admin"),
        "the history does not name the session's token: {events}"
    );
    // Promote is not possible any more.
    wait_until("promote to be disabled after the run", || {
        (browser.enabled_of("#cmd-promote") == Some(false)).then_some(())
    });

    // A progressive rollout of flag `checkout`, the template setting, with increments 0.
    browser.click_on("a[data-nav='flags']");
    wait_ready(&browser);
    browser.click_on("tr[data-flag='shop/checkout'] a");
    wait_ready(&browser);
    browser.click_on("#mode-template");
    assert_accessible(&browser, "a flag");
    let increments = browser.wait_for("#tpl-increments");
    browser.type_into(&increments, "0");
    let preview = browser.text_of("#preview-count").unwrap_or_default();
    assert!(preview.starts_with("0 entries"), "{preview}");
    browser.click_on("#create-save");
    let error = wait_until("the error next to the increments field", || {
        let found = browser.execute(
            "const note = document.querySelector(\"[data-error-path='spec.plan.schedule.template.increments']\");
             return note && note.previousElementSibling && note.previousElementSibling.id === 'tpl-increments'
               ? note.textContent : null;",
            &[],
        );
        found.as_str().map(str::to_string)
    });
    println!("the form shows, next to the increments: {error}");
    assert!(error.contains("0%"), "{error}");
    assert_eq!(
        browser.execute(
            "return document.getElementById('tpl-increments').getAttribute('aria-invalid')",
            &[]
        ),
        "true"
    );
    let (missing, _) = api.get_json("/api/v1/rollouts/shop/checkout-rollout");
    assert_eq!(missing, 404, "a refused rollout was stored");
    if let Some(dir) = screenshots() {
        browser.execute(
            "document.getElementById('create-rollout').scrollIntoView()",
            &[],
        );
        screenshot(&browser, &dir, "dashboard-flag-rollout.png");
    }
    // The manual setting: a row's error lands beside that row's field.
    browser.click_on("#mode-manual");
    let weight = browser.wait_for("input[data-path='spec.plan.schedule.manual[1].weight']");
    browser.type_into(&weight, "0");
    browser.click_on("#create-save");
    let error = wait_until("the error next to the second entry's weight", || {
        let found = browser.execute(
            "const note = document.querySelector(\"[data-error-path='spec.plan.schedule.manual[1].weight']\");
             return note && note.previousElementSibling
               && note.previousElementSibling.dataset.path === 'spec.plan.schedule.manual[1].weight'
               ? note.textContent : null;",
            &[],
        );
        found.as_str().map(str::to_string)
    });
    println!("the form shows, next to entry 2's weight: {error}");
    let (missing, _) = api.get_json("/api/v1/rollouts/shop/checkout-rollout");
    assert_eq!(missing, 404, "a refused rollout was stored");

    // Corrected, the preview shows the entries the server will run, and the rollout is created.
    browser.click_on("#mode-template");
    browser.type_into(&increments, "25");
    let preview = browser.text_of("#preview-count").unwrap_or_default();
    assert!(
        preview.starts_with("4 entries, ending at 100%"),
        "{preview}"
    );
    let previewed = browser.execute(
        "return [...document.querySelectorAll('#schedule-preview li')]
           .map(li => [li.querySelector('time').getAttribute('datetime'), li.querySelector('strong').textContent]);",
        &[],
    );
    browser.click_on("#create-save");
    wait_until("the new rollout's page", || {
        (browser.execute("return location.pathname", &[]) == "/rollouts/shop/checkout-rollout")
            .then_some(())
    });
    let (found, created) = api.get_json("/api/v1/rollouts/shop/checkout-rollout");
    assert_eq!(found, 200, "{created}");
    assert_eq!(
        created["spec"]["plan"]["schedule"]["template"]["increments"], 25,
        "{created}"
    );
    // The preview is the server's expansion of the template, entry for entry.
    let (_, listed) = api.get_json("/api/v1/flag-rollouts?namespace=shop&flag=checkout");
    let served: Vec<(i64, String)> = listed["items"][0]["schedule"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let at: jiff::Timestamp = entry["at"].as_str().unwrap().parse().unwrap();
            (at.as_second(), format!("{}%", entry["weight"]))
        })
        .collect();
    let previewed: Vec<(i64, String)> = previewed
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let at: jiff::Timestamp = entry[0].as_str().unwrap().parse().unwrap();
            (at.as_second(), entry[1].as_str().unwrap().to_string())
        })
        .collect();
    println!("previewed {previewed:?}, the server runs {served:?}");
    assert_eq!(previewed, served);
    wait_ready(&browser);
    if let Some(dir) = screenshots() {
        screenshot(&browser, &dir, "dashboard-flag-rollout-created.png");
    }
    // An admin may promote the new flag rollout once the engine has started it (it then waits
    // for its first entry; the page follows it live)...
    wait_until("Promote to be enabled for an admin", || {
        (browser.enabled_of("#cmd-promote") == Some(true)).then_some(())
    });

    // Logging out returns to the login form, and the session is gone.
    browser.click_on("#logout");
    browser.wait_for("#login-token");
    assert_eq!(browser.execute("return location.pathname", &[]), "/login");
    // (WebDriver waits for the promise the script returns.)
    let session = browser.execute(
        "return fetch('/api/v1/session').then(answer => answer.status)",
        &[],
    );
    assert_eq!(session, 401, "the session outlived the logout");

    // ...a `read` token may not: Promote is disabled, and the page says why.
    open_dashboard(
        &browser,
        &base,
        "/rollouts/shop/checkout-rollout",
        Some(&reader),
    );
    browser.wait_for("#cmd-promote");
    assert_eq!(
        browser.text_of("#session-name").as_deref(),
        Some("viewer (read)")
    );
    assert_eq!(browser.enabled_of("#cmd-promote"), Some(false));
    let reason = browser.execute("return document.getElementById('cmd-promote').title", &[]);
    let note = browser.text_of("#main .actions .muted").unwrap_or_default();
    println!("with a read token, Promote is disabled: {reason} / {note}");
    assert!(reason.to_string().contains("operate"), "{reason}");
    assert!(note.contains("operate scope"), "{note}");
    // The run could be promoted: only the scope stands in the way.
    let (_, rollout) = api.get_json("/api/v1/rollouts/shop/checkout-rollout");
    assert_ne!(rollout["status"]["phase"], "Succeeded", "{rollout}");

    // No secret, right or wrong, reaches the server's log.
    let log = api.server.stderr_lines().join("\n");
    // (The log is there: the logins are in it, by the token's name.)
    assert!(log.contains("release-admin"), "{log}");
    for secret in [wrong, admin.as_str(), reader.as_str()] {
        assert!(!log.contains(secret), "a token in the log: {log}");
    }
}

fn get_json_without_token(server: &Weir, path: &str) -> (u16, Value) {
    let answer = http::get(server.address("api"), path).unwrap();
    (
        answer.status,
        serde_json::from_str(&answer.body).unwrap_or(Value::Null),
    )
}

/// Without a browser: the page and its assets come with their types and a strict policy, the
/// page's own routes answer the page, and the API's routes keep their JSON 404.
#[test]
fn the_dashboard_is_served_with_a_strict_policy_and_the_api_keeps_its_404() {
    let db = TempDb::new();
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &db.path(), &[]);
    let address = server.address("api");
    for (path, content_type) in [
        ("/", "text/html; charset=utf-8"),
        ("/rollouts/shop/gated", "text/html; charset=utf-8"),
        ("/flags", "text/html; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/style.css", "text/css; charset=utf-8"),
    ] {
        let answer = http::get(address, path).unwrap();
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert_eq!(answer.header("content-type"), Some(content_type), "{path}");
        let policy = answer.header("content-security-policy").unwrap_or_default();
        assert!(
            policy.contains("default-src 'self'") && policy.contains("script-src 'self'"),
            "{path}: {policy}"
        );
        assert!(!policy.contains("unsafe-inline"), "{path}: {policy}");
        assert_eq!(answer.header("cache-control"), Some("no-cache"), "{path}");
        // A second request with the validator costs a 304.
        let etag = answer.header("etag").unwrap().to_string();
        let again = http::request(address, "GET", path, &[("If-None-Match", &etag)], "").unwrap();
        assert_eq!(again.status, 304, "{path}");
    }
    for path in [
        "/api/v1/nothing",
        "/ui/missing.js",
        "/ofrep/v1/nothing",
        "/nowhere",
    ] {
        let answer = http::get(address, path).unwrap();
        assert_eq!(answer.status, 404, "{path}");
        let body: Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(body["error"]["code"], "not_found", "{path}: {body}");
    }
    // The API's own routes are untouched.
    assert_eq!(http::get(address, "/healthz").unwrap().status, 200);
    assert_eq!(http::get(address, "/metrics").unwrap().status, 200);
    let listed = http::get(address, "/api/v1/rollouts").unwrap();
    assert_eq!(listed.status, 200, "{}", listed.body);
    // The page's routes take no changes.
    let posted = http::request(address, "POST", "/rollouts/shop/x", &[], "").unwrap();
    assert_eq!(posted.status, 404);
}
