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
//! Issue 33's rollout side: every link on every page resolves (a rollout of
//! examples/local-urls.yaml, which names no namespace, included) and the list searches by name;
//! the connection indicator leaves "live" when the server is gone and says how old the data is;
//! the judge's charts show a rolled-back run's single point and the evidence of health that let
//! a run promote, with no SVG text at phone width; one step is promoted from the command line
//! and from the page. axe-core (WCAG 2.1 A and AA, `weir_testkit::webdriver::axe_core`) checks
//! each page and state.
//!
//! Without Chromium the browser test fails in CI (`CI=true`: `.ci/run` installs it) and is
//! skipped elsewhere, saying why (docs/TESTING.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::{Value, json};
use weir_testkit::engine::Load;
use weir_testkit::fixtures::{ClosedPort, TempDb, runtime, sample_apps, start_faulty_sample_app};
use weir_testkit::http;
use weir_testkit::process::Weir;
use weir_testkit::proxy::CuttableProxy;
use weir_testkit::wait::wait_until;
use weir_testkit::webdriver::{Browser, axe_core};

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
/// button's text), every time shows its UTC value on hover, and axe-core finds no WCAG 2.1 A
/// or AA violation.
fn assert_accessible(browser: &Browser, page: &str) {
    let axe = axe_core().unwrap_or_else(|why| panic!("axe-core: {why}"));
    let violations = browser.axe_violations(&axe);
    println!(
        "axe-core on {page}: {} violation(s)",
        violations.as_array().map_or(0, Vec::len)
    );
    assert_eq!(violations, json!([]), "{page}: axe-core violations");
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
    // The history names the token the page logged in with, and says it went to the end.
    assert!(
        events
            .to_string()
            .contains("promoted by release-admin to the end"),
        "the history does not name the session's token: {events}"
    );
    // A succeeded rollout shows its plan taken: every step done, the bar full.
    let shown = wait_until("the page to show the completed plan", || {
        let text = browser.text_of("#rollout-phase + dt + dd")?;
        text.contains("step 2 of 2, promoted").then_some(text)
    });
    println!("a succeeded rollout's plan: {shown}");
    assert_eq!(
        browser.execute(
            "return document.querySelectorAll('#main .summary .bar-complete .tick-done').length",
            &[]
        ),
        3,
        "every tick (two steps and the gate) taken"
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
    // A flag rollout's revisions are hashes of the flag: not shown.
    let facts = browser.text_of("#main .summary").unwrap_or_default();
    assert!(!facts.contains("Revisions"), "{facts}");
    // An admin may promote the new flag rollout once the engine has started it (it then waits
    // for its first entry; the page follows it live)...
    wait_until("Promote to be enabled for an admin", || {
        (browser.enabled_of("#cmd-promote") == Some(true)).then_some(())
    });

    // The tokens page on a phone: each token a card, its Revoke button on the screen; revoking
    // the session's own token, the last admin one, warns of both before anything happens.
    browser.click_on("a[data-nav='tokens']");
    wait_ready(&browser);
    browser.resize(390, 844);
    let revoke = "button[data-revoke='release-admin']";
    browser.wait_for(revoke);
    let reach = browser.execute(
        "const r = document.querySelector(arguments[0]).getBoundingClientRect();
         return [r.left >= 0, r.right <= document.documentElement.clientWidth,
                 document.documentElement.scrollWidth - document.documentElement.clientWidth];",
        &[json!(revoke)],
    );
    println!(
        "the Revoke button on a phone (inside on the left, on the right, page overflow): {reach}"
    );
    assert_eq!(reach, json!([true, true, 0]));
    assert_accessible(&browser, "the tokens on a phone");
    browser.click_on(revoke);
    browser.wait_for("dialog[open] #confirm-ok");
    let warning = browser.text_of("#confirm-text").unwrap_or_default();
    println!("revoking one's own last admin token: {warning}");
    assert!(warning.contains("your own session"), "{warning}");
    assert!(warning.contains("last admin token"), "{warning}");
    assert_accessible(
        &browser,
        "the warning before revoking one's own last admin token",
    );
    browser.click_on("dialog[open] #confirm-cancel");
    // Cancelled: the token still works.
    assert_eq!(api.get_json("/api/v1/tokens").0, 200);
    browser.resize(1280, 1000);

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
    // The tokens page is not offered to a read token: no form, no list.
    browser.open(&format!("{base}/tokens"));
    wait_ready(&browser);
    browser.wait_for("#tokens-admin-only");
    assert!(
        browser.find("#token-name").is_none(),
        "a read token sees the token form"
    );
    assert_accessible(&browser, "the tokens page for a read token");
    browser.open(&format!("{base}/rollouts/shop/checkout-rollout"));
    wait_ready(&browser);
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

// === issue 33: links, search, the connection, the judge, one step ===

/// An open server (no tokens, loopback): the page's session may do anything.
struct Open {
    server: Weir,
}

impl Open {
    fn post(&self, path: &str, content_type: &str, body: &str) -> http::Response {
        http::request(
            self.server.address("api"),
            "POST",
            path,
            &[("Content-Type", content_type)],
            body,
        )
        .unwrap()
    }

    fn get_json(&self, path: &str) -> Value {
        get_json_without_token(&self.server, path).1
    }

    fn status_of(&self, ns: &str, name: &str) -> Value {
        self.get_json(&format!("/api/v1/rollouts/{ns}/{name}"))["status"].clone()
    }

    fn history(&self, ns: &str, name: &str) -> Vec<Value> {
        let page = self.get_json(&format!("/api/v1/rollouts/{ns}/{name}/events?limit=500"));
        page["items"].as_array().cloned().unwrap_or_default()
    }

    /// Where local rollout `ns/name`'s router listens, as its history says.
    fn router_of(&self, ns: &str, name: &str) -> SocketAddr {
        wait_until("the router's address in the history", || {
            self.history(ns, name).iter().find_map(|event| {
                let message = event["message"].as_str()?;
                message
                    .strip_prefix("the router listens on http://")?
                    .parse()
                    .ok()
            })
        })
    }
}

fn open_server(db: &TempDb) -> Open {
    Open {
        server: Weir::serve(env!("CARGO_BIN_EXE_weir"), &db.path(), &[]),
    }
}

/// examples/local-urls.yaml as the README runs it (no namespace), with its URLs pointed at
/// `versions` and its router on a port the OS picks.
fn local_urls_example(versions: &[SocketAddr]) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/local-urls.yaml"
    );
    let example = std::fs::read_to_string(path).unwrap();
    assert!(
        !example.contains("namespace:"),
        "the example names a namespace"
    );
    example
        .replace("listen: 127.0.0.1:8080", "listen: \"127.0.0.1:0\"")
        .replace("127.0.0.1:9001", &versions[0].to_string())
        .replace("127.0.0.1:9002", &versions[1].to_string())
}

/// Every link of the page now: its address, each checked to have no empty, `undefined` or
/// `null` segment.
fn links_of(browser: &Browser, page: &str) -> Vec<String> {
    let links = browser.execute(
        "return [...document.querySelectorAll('a[href]')]
           .filter(a => a.origin === location.origin)
           .map(a => a.pathname + a.search);",
        &[],
    );
    let links: Vec<String> = serde_json::from_value(links).unwrap();
    for link in &links {
        let path = link.split('?').next().unwrap_or_default();
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        assert!(
            path == "/"
                || segments.iter().all(|segment| !segment.is_empty()
                    && *segment != "undefined"
                    && *segment != "null"),
            "{page}: a link with a missing part: {link}"
        );
        assert!(
            !link.contains("undefined") && !link.contains("null"),
            "{page}: {link}"
        );
    }
    links
}

#[test]
fn every_link_resolves_the_list_searches_by_name_and_the_indicator_tells_when_the_server_is_gone() {
    let Some(browser) = browser() else {
        return;
    };
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let db = TempDb::new();
    let api = open_server(&db);
    let base = api.server.url("api");
    // The README's first example, without a namespace: in `default`.
    let created = api.post(
        "/api/v1/rollouts",
        "application/yaml",
        &local_urls_example(&versions),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let stored: Value = serde_json::from_str(&created.body).unwrap();
    assert_eq!(stored["rollout"]["metadata"]["namespace"], "default");
    for flag in FLAGS {
        let created = api.post("/api/v1/flags", "application/yaml", flag);
        assert_eq!(created.status, 201, "{}", created.body);
    }
    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(48);
    let flag_rollout = json!({
        "apiVersion": "weir.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "banner-green", "namespace": "shop"},
        "spec": {
            "target": {"kind": "flag", "flag": "banner", "control": "blue", "variation": "green"},
            "plan": {"schedule": {"manual": [{"at": later.to_string(), "weight": 25}]}},
        },
    });
    let created = api.post(
        "/api/v1/rollouts",
        "application/json",
        &flag_rollout.to_string(),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    // Every listed rollout names its namespace.
    let listed = api.get_json("/api/v1/rollouts");
    for item in listed["items"].as_array().unwrap() {
        assert!(item["metadata"]["namespace"].is_string(), "{item}");
    }

    // Every page, and every page its links lead to, once: no link with a missing part, and
    // none leads to "Not found" or an error.
    open_dashboard(&browser, &base, "/rollouts", None);
    // Read in the page: the live list may re-render the row between finding and reading it.
    let name = wait_until("the row of default/shop-urls", || {
        browser.text_of("tr[data-rollout='default/shop-urls']")
    });
    assert!(name.starts_with("default/shop-urls"), "{name}");
    let namespaces = browser.execute(
        "return [...document.querySelectorAll('#filter-namespace option')].map(o => o.textContent)",
        &[],
    );
    assert_eq!(namespaces, json!(["all", "default", "shop"]));
    let mut queue = vec![
        "/rollouts".to_string(),
        "/flags".to_string(),
        "/tokens".to_string(),
    ];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(page) = queue.pop() {
        if !seen.insert(page.clone()) {
            continue;
        }
        browser.open(&format!("{base}{page}"));
        wait_ready(&browser);
        let heading = browser.text_of("#main h1").unwrap_or_default();
        assert_ne!(heading, "Not found", "{page}");
        assert!(
            browser.find("#main .error").is_none(),
            "{page}: {:?}",
            browser.text_of("#main .error")
        );
        for link in links_of(&browser, &page) {
            if !seen.contains(&link) {
                queue.push(link);
            }
        }
    }
    println!("pages visited through their links: {seen:?}");
    for page in [
        "/rollouts/default/shop-urls",
        "/rollouts/shop/banner-green",
        "/flags/shop/banner",
    ] {
        assert!(seen.contains(page), "no link leads to {page}: {seen:?}");
    }

    // Search by name: the rows follow the text, and the address keeps it.
    open_dashboard(&browser, &base, "/rollouts", None);
    browser.wait_for("tr[data-rollout='shop/banner-green']");
    let search = browser.wait_for("#filter-name");
    browser.type_into(&search, "URLS");
    let visible = || {
        browser.execute(
            "return [...document.querySelectorAll('tr[data-rollout]')].filter(r => !r.hidden).map(r => r.dataset.rollout)",
            &[],
        )
    };
    wait_until("the search to leave one row", || {
        (visible() == json!(["default/shop-urls"])).then_some(())
    });
    assert_eq!(
        browser.execute("return location.pathname + location.search", &[]),
        "/rollouts?name=URLS"
    );
    assert_accessible(&browser, "the rollouts searched by name");
    // Reloaded, the search is still there.
    browser.open(&format!("{base}/rollouts?name=banner"));
    wait_ready(&browser);
    assert_eq!(
        browser.execute("return document.getElementById('filter-name').value", &[]),
        "banner"
    );
    assert_eq!(visible(), json!(["shop/banner-green"]));

    // Cut off and back (a proxy between the page and the server): the page says so, reconnects
    // by itself and lists again, so what changed while it was cut off shows.
    let proxy = CuttableProxy::start(api.server.address("api")).unwrap();
    open_dashboard(&browser, &proxy.url(), "/rollouts", None);
    let state = || {
        browser.execute(
            "return document.getElementById('connection').dataset.state",
            &[],
        )
    };
    wait_until("the indicator to say live through the proxy", || {
        (state() == "live").then_some(())
    });
    proxy.cut();
    let cut_off = wait_until("the indicator to leave live when cut off", || {
        let text = browser.text_of("#connection").unwrap_or_default();
        (state() != "live" && text.contains("last update")).then_some(text)
    });
    println!("cut off, the indicator says {cut_off}");
    let later_flag_rollout = json!({
        "apiVersion": "weir.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "checkout-on", "namespace": "shop"},
        "spec": {
            "target": {"kind": "flag", "flag": "checkout", "control": "off", "variation": "on"},
            "plan": {"schedule": {"manual": [{"at": later.to_string(), "weight": 10}]}},
        },
    });
    let created = api.post(
        "/api/v1/rollouts",
        "application/json",
        &later_flag_rollout.to_string(),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    assert!(
        browser
            .find("tr[data-rollout='shop/checkout-on']")
            .is_none(),
        "the page saw a change while cut off"
    );
    proxy.restore();
    wait_until("the indicator to say live again", || {
        (state() == "live").then_some(())
    });
    browser.wait_for("tr[data-rollout='shop/checkout-on']");
    println!("reconnected: live, and the rollout created meanwhile is listed");

    // The connection: live while the server answers...
    open_dashboard(&browser, &base, "/rollouts", None);
    wait_until("the indicator to say live", || {
        (browser.text_of("#connection-state").as_deref() == Some("live")).then_some(())
    });
    assert_accessible(&browser, "the list, live");
    // ...and not once it is gone: reconnecting with the age of the last update, then offline.
    let mut server = api.server;
    server.kill();
    let reconnecting = wait_until("the indicator to leave live", || {
        let state = browser.execute(
            "return document.getElementById('connection').dataset.state",
            &[],
        );
        let text = browser.text_of("#connection").unwrap_or_default();
        (state != "live" && text.contains("last update")).then_some(format!("{state}: {text}"))
    });
    println!("the server stopped, the indicator says {reconnecting}");
    let offline = wait_until("the indicator to say offline", || {
        let text = browser.text_of("#connection").unwrap_or_default();
        text.starts_with("offline").then_some(text)
    });
    println!("then {offline}");
    assert!(
        offline.contains("last update") && offline.contains("s ago"),
        "{offline}"
    );
    assert_accessible(&browser, "the list, offline");
    if let Some(dir) = screenshots() {
        screenshot(&browser, &dir, "dashboard-offline.png");
    }
}

#[test]
fn one_step_is_promoted_from_the_command_line_and_the_page_and_the_history_says_which() {
    let Some(browser) = browser() else {
        return;
    };
    let runtime = runtime();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let db = TempDb::new();
    let api = open_server(&db);
    let base = api.server.url("api");
    let rollout = format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: stepped, namespace: shop}}
spec:
  target:
    kind: local
    listen: \"127.0.0.1:0\"
    primary: {{url: \"http://{v1}\"}}
    canary: {{url: \"http://{v2}\"}}
  plan: {{canary: {{steps: [{{weight: 20, pause: {{}}}}, {{weight: 50, pause: {{}}}}, {{weight: 80, pause: {{}}}}]}}}}
  analysis:
    interval: 1s
    progressDeadline: 10m
    evidence: {{promoteOn: noHarm}}
",
        v1 = versions[0],
        v2 = versions[1],
    );
    let created = api.post("/api/v1/rollouts", "application/yaml", &rollout);
    assert_eq!(created.status, 201, "{}", created.body);
    wait_until("the run to pause at 20%", || {
        let status = api.status_of("shop", "stepped");
        (status["canaryWeight"] == 20 && status["waitingForResume"] == true).then_some(())
    });

    // The command line: one step, past the pause, to the next step's own pause.
    let help = weir_testkit::process::output(env!("CARGO_BIN_EXE_weir"), &["promote", "--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("--step"));
    let stepped = weir_testkit::process::output(
        env!("CARGO_BIN_EXE_weir"),
        &[
            "promote",
            "shop/stepped",
            "--step",
            "--as",
            "ana",
            "--server",
            &base,
        ],
    );
    assert!(
        stepped.status.success(),
        "weir promote --step: {}",
        String::from_utf8_lossy(&stepped.stderr)
    );
    let status = api.status_of("shop", "stepped");
    assert_eq!(
        (&status["canaryWeight"], &status["phase"]),
        (&json!(50), &json!("Progressing")),
        "{status}"
    );
    let messages = |api: &Open| -> Vec<String> {
        api.history("shop", "stepped")
            .iter()
            .filter_map(|event| event["message"].as_str().map(String::from))
            .collect()
    };
    let said = messages(&api);
    println!("the command line's step: {:?}", said.last());
    assert!(
        said.iter()
            .any(|m| m.starts_with("promoted one step by ana to 50%: step 2 of 3")),
        "{said:?}"
    );
    // The API refuses `step` on another command, naming the field.
    let refused = api.post(
        "/api/v1/rollouts/shop/stepped/commands",
        "application/json",
        r#"{"command": "pause", "step": true}"#,
    );
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("only promote takes step"),
        "{}",
        refused.body
    );

    // The page: a button beside Promote, behind the same confirmation.
    open_dashboard(&browser, &base, "/rollouts/shop/stepped", None);
    browser.wait_for("#cmd-promote-one-step");
    wait_until("one step to be offered", || {
        (browser.enabled_of("#cmd-promote-one-step") == Some(true)).then_some(())
    });
    assert_accessible(&browser, "a rollout with promote one step");
    browser.click_on("#cmd-promote-one-step");
    browser.wait_for("dialog[open] #confirm-ok");
    let question = browser.text_of("#confirm-text").unwrap_or_default();
    assert!(question.starts_with("Promote one step"), "{question}");
    assert_accessible(&browser, "the one-step confirmation");
    browser.click_on("dialog[open] #confirm-ok");
    wait_until("the step to 80%", || {
        (api.status_of("shop", "stepped")["canaryWeight"] == 80).then_some(())
    });
    let history = wait_until("the page's history to say one step", || {
        let text = browser.text_of("ol.history")?;
        text.contains("promoted one step by dashboard to 80%")
            .then_some(text)
    });
    assert!(
        history.contains("promoted one step by ana to 50%"),
        "{history}"
    );
    // No step left: Promote goes to the end, and says so.
    click_and_confirm(&browser, "#cmd-promote");
    wait_until("the promotion", || {
        (api.status_of("shop", "stepped")["phase"] == "Succeeded").then_some(())
    });
    let said = messages(&api);
    assert!(
        said.iter()
            .any(|m| m.starts_with("promoted by dashboard to the end")),
        "{said:?}"
    );
    // Not possible any more: both disabled, with the reason.
    wait_until("one step to be disabled after the run", || {
        (browser.enabled_of("#cmd-promote-one-step") == Some(false)).then_some(())
    });
}

#[test]
fn the_judge_shows_what_decided_a_rolled_back_and_a_promoted_run_readable_on_a_phone() {
    let Some(browser) = browser() else {
        return;
    };
    let runtime = runtime();
    let _context = runtime.enter();
    let versions = sample_apps(&runtime, &["v1", "v2"]);
    let faulty = runtime.block_on(start_faulty_sample_app("v3", 50.0));
    let db = TempDb::new();
    let api = open_server(&db);
    let base = api.server.url("api");
    let local = |name: &str, canary: SocketAddr, evidence: &str| {
        format!(
            "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: {name}}}
spec:
  target:
    kind: local
    listen: \"127.0.0.1:0\"
    primary: {{url: \"http://{v1}\", healthCheck: /healthz}}
    canary: {{url: \"http://{canary}\", healthCheck: /healthz}}
  plan: {{canary: {{stepWeights: [50]}}}}
  analysis: {{interval: 1s, progressDeadline: 1m, evidence: {evidence}}}
",
            v1 = versions[0],
        )
    };
    // Half the canary's answers are errors: the judge rolls it back on its first window.
    let created = api.post(
        "/api/v1/rollouts",
        "application/yaml",
        &local("faulty", faulty, "{marginPercent: 5}"),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    // A healthy canary: promoted once the judges show health within 5 points.
    let created = api.post(
        "/api/v1/rollouts",
        "application/yaml",
        &local("healthy", versions[1], "{marginPercent: 5}"),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let loads = [
        Load::at(api.router_of("default", "faulty"), 50.0),
        Load::at(api.router_of("default", "healthy"), 100.0),
    ];
    for name in ["faulty", "healthy"] {
        let phase = wait_until(&format!("{name} to end its run"), || {
            let phase = api.status_of("default", name)["phase"].clone();
            (phase == "Failed" || phase == "Succeeded").then_some(phase)
        });
        println!("{name}: {phase}");
    }
    for load in loads {
        runtime.block_on(load.stop());
    }
    assert_eq!(api.status_of("default", "faulty")["phase"], "Failed");
    assert_eq!(api.status_of("default", "healthy")["phase"], "Succeeded");

    // The rolled-back run: its verdicts' e-values are drawn, a single one as a dot.
    let e_values = api
        .history("default", "faulty")
        .iter()
        .filter(|event| event["evidence"]["verdict"]["evidence"]["eValue"].is_number())
        .count();
    assert!(e_values >= 1, "no e-value in the history");
    open_dashboard(&browser, &base, "/rollouts/default/faulty", None);
    let drawn = browser.execute(
        "return document.querySelectorAll(\"#judge-evalue-1 [data-role='point']\").length",
        &[],
    );
    println!("the rolled-back run: {e_values} e-value(s) in the history, {drawn} drawn");
    assert_eq!(drawn, json!(e_values));
    let verdict = browser
        .text_of(".judge-run[data-run='1'] [data-role='verdict']")
        .unwrap_or_default();
    println!("its verdict: {verdict}");
    assert!(verdict.contains("worse than the primary"), "{verdict}");
    let counts = browser
        .text_of(".judge-run[data-run='1'] [data-role='counts']")
        .unwrap_or_default();
    assert!(counts.starts_with("canary "), "{counts}");
    assert_accessible(&browser, "a rolled-back rollout's judge");

    // The promoted run: the evidence of health that let it promote, its bound and margin.
    open_dashboard(&browser, &base, "/rollouts/default/healthy", None);
    assert!(
        browser.find("#judge-none").is_none(),
        "no judge's evidence shown"
    );
    let verdict = browser
        .text_of(".judge-run[data-run='1'] [data-role='verdict']")
        .unwrap_or_default();
    println!("the promoted run: {verdict}");
    assert!(
        verdict
            .starts_with("Evidence of health that let the run promote: evidence of health after"),
        "{verdict}"
    );
    let bound = browser.execute(
        "return document.querySelectorAll(\"#judge-health-1 [data-role='point']\").length",
        &[],
    );
    assert!(bound.as_u64().unwrap_or(0) >= 1, "no health bound drawn");
    let margin = browser
        .text_of("#judge-health-1 .limit-label")
        .unwrap_or_default();
    assert_eq!(margin, "margin 5%");
    // Its plan is shown taken.
    let plan = browser
        .text_of("#rollout-phase + dt + dd")
        .unwrap_or_default();
    assert!(plan.contains("step 1 of 1, promoted"), "{plan}");
    assert_accessible(&browser, "a promoted rollout's judge");

    // At a phone's width: no text inside the stretched SVG, axis labels at their own size, and
    // nothing wider than the screen.
    browser.resize(390, 844);
    wait_ready(&browser);
    let svg_text = browser.execute(
        "return document.querySelectorAll('main svg text').length",
        &[],
    );
    assert_eq!(svg_text, 0, "text inside a stretched SVG");
    let sizes = browser.execute(
        "return [...document.querySelectorAll('main figure.chart .y-label, main figure.chart .x-axis time')]
           .map(e => parseFloat(getComputedStyle(e).fontSize));",
        &[],
    );
    let sizes: Vec<f64> = serde_json::from_value(sizes).unwrap();
    assert!(!sizes.is_empty(), "no axis labels");
    assert!(sizes.iter().all(|size| *size >= 11.0), "{sizes:?}");
    let overflow = browser.execute(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
        &[],
    );
    assert_eq!(
        overflow, 0,
        "a rollout's page is wider than a 390 px screen"
    );
    assert_accessible(&browser, "a promoted rollout's judge on a phone");
    if let Some(dir) = screenshots() {
        browser.execute("document.getElementById('judge').scrollIntoView()", &[]);
        screenshot(&browser, &dir, "dashboard-judge-phone.png");
    }
    browser.resize(1280, 1000);
    // The list shows the promoted run's plan done, and the rolled-back one where it stopped.
    open_dashboard(&browser, &base, "/rollouts", None);
    let text = wait_until("the row of default/healthy", || {
        browser.text_of("tr[data-rollout='default/healthy']")
    });
    assert!(text.contains("step 1 of 1, promoted"), "{text}");
    if let Some(dir) = screenshots() {
        open_dashboard(&browser, &base, "/rollouts/default/faulty", None);
        browser.execute("document.getElementById('judge').scrollIntoView()", &[]);
        screenshot(&browser, &dir, "dashboard-judge.png");
    }
}
