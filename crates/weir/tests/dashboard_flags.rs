//! Flag management in the dashboard, in a real browser (headless Chromium over WebDriver, see
//! `weir_testkit::webdriver`) against a real `weir serve`: a flag is turned off and on again
//! through the confirmation dialog, a variation's value changed, a rule with a clause added -
//! each change seen in an OFREP evaluation over real HTTP; a refused change shows the server's
//! error beside the field it names; a waiting flag-rollout schedule is edited and deleted, and
//! the create-rollout form is offered only on a flag without a rollout. axe-core (WCAG 2.1 A and
//! AA) finds no violation on each new state, and the page fits a 390 px screen.
//!
//! Without Chromium the test fails in CI (`CI=true`) and is skipped elsewhere, saying why, as
//! `dashboard.rs` does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;
use weir_testkit::webdriver::{Browser, axe_core};

fn browser() -> Option<Browser> {
    match Browser::start(1280, 1000) {
        Ok(browser) => Some(browser),
        Err(why) => {
            let ci = std::env::var("CI").is_ok_and(|value| value == "true" || value == "1");
            assert!(
                !ci,
                "the dashboard's browser test needs Chromium and chromedriver in CI (.ci/run installs them): {why}"
            );
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: the dashboard's flag browser test: {why}"
            );
            None
        }
    }
}

/// A server without tokens (loopback only): the page's session may do anything.
struct Api {
    server: Weir,
    /// How many OFREP evaluations of flag banner were made.
    evaluations: std::cell::Cell<u64>,
}

impl Api {
    fn send(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let answer = http::request(
            self.server.address("api"),
            method,
            path,
            &[("Content-Type", "application/json")],
            body,
        )
        .unwrap();
        (
            answer.status,
            serde_json::from_str(&answer.body).unwrap_or(Value::Null),
        )
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.send("GET", path, "")
    }

    /// One OFREP evaluation of flag `key` of namespace shop for `context`, over HTTP (counted).
    fn evaluate(&self, key: &str, context: Value) -> Value {
        self.evaluations
            .set(self.evaluations.get() + u64::from(key == "banner"));
        let (status, answer) = self.send(
            "POST",
            &format!("/ns/shop/ofrep/v1/evaluate/flags/{key}"),
            &json!({ "context": context }).to_string(),
        );
        assert_eq!(status, 200, "{answer}");
        answer
    }
}

fn wait_ready(browser: &Browser) {
    wait_until("the dashboard page to be ready", || {
        (browser.execute("return document.body.dataset.ready", &[]) == "true").then_some(())
    });
}

/// axe-core finds no WCAG 2.1 A/AA violation, and every control has a name.
fn assert_accessible(browser: &Browser, axe: &str, state: &str) {
    let violations = browser.axe_violations(axe);
    println!(
        "axe-core on {state}: {} violation(s)",
        violations.as_array().map_or(0, Vec::len)
    );
    assert_eq!(violations, json!([]), "{state}: axe-core violations");
    let unlabelled = browser.execute(
        "return [...document.querySelectorAll('main input, main select, main button, main textarea')]
           .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                        && !(e.tagName === 'BUTTON' && e.textContent.trim()))
           .map(e => e.outerHTML.slice(0, 120));",
        &[],
    );
    assert_eq!(unlabelled, json!([]), "{state}: controls without a label");
}

/// The page is no wider than a 390 px phone screen.
fn assert_fits_a_phone(browser: &Browser, state: &str) {
    browser.resize(390, 844);
    let overflow = wait_until(&format!("{state} laid out at 390 px"), || {
        let width = browser.execute("return window.innerWidth", &[]);
        (width.as_u64().is_some_and(|width| width <= 400)).then(|| {
            browser.execute(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
                &[],
            )
        })
    });
    if state == "the editor with a new rule" {
        browser.execute(
            "document.getElementById('rule-0-clause-0-attribute').scrollIntoView({block: 'center'})",
            &[],
        );
        screenshot(browser, "dashboard-flag-phone.png");
    }
    browser.resize(1280, 1000);
    assert_eq!(overflow, 0, "{state} is wider than a 390 px screen");
}

/// Saves the window as `WEIR_SCREENSHOTS/name` when that variable names a directory (without
/// the passing notice of the last action), for docs/DASHBOARD.md.
fn screenshot(browser: &Browser, name: &str) {
    let Some(dir) = std::env::var_os("WEIR_SCREENSHOTS") else {
        return;
    };
    browser.execute("document.getElementById('toast').hidden = true", &[]);
    browser.save_screenshot(&std::path::Path::new(&dir).join(name));
    browser.execute("document.getElementById('toast').hidden = false", &[]);
}

/// Waits until the flag's stored version is `version`.
fn wait_version(api: &Api, version: u64) -> Value {
    wait_until(&format!("flag banner at version {version}"), || {
        let (_, flag) = api.get("/api/v1/flags/shop/banner");
        (flag["version"] == version).then_some(flag)
    })
}

/// Waits until the page shows version `version` of the flag (the editor rebuilt from it).
fn wait_page_version(browser: &Browser, version: u64) {
    wait_until(&format!("the page to show version {version}"), || {
        (browser.text_of("#flag-version").as_deref() == Some(version.to_string().as_str()))
            .then_some(())
    });
}

const BANNER: &str = r#"{
  "apiVersion": "weir.dev/v1alpha1", "kind": "Flag",
  "metadata": {"name": "banner", "namespace": "shop"},
  "spec": {
    "variations": [{"name": "blue", "value": "blue"}, {"name": "green", "value": "green"}],
    "defaultStrategy": {"variation": "green"}
  }
}"#;

const CHECKOUT: &str = r#"{
  "apiVersion": "weir.dev/v1alpha1", "kind": "Flag",
  "metadata": {"name": "checkout", "namespace": "shop"},
  "spec": {
    "variations": [
      {"name": "off", "value": false},
      {"name": "on", "value": true, "description": "the new payment page"}
    ],
    "defaultStrategy": {"variation": "off"},
    "tags": ["team:payments"]
  }
}"#;

#[test]
fn a_flag_is_managed_in_the_dashboard_and_every_change_reaches_ofrep() {
    let Some(browser) = browser() else {
        return;
    };
    let axe = axe_core().unwrap_or_else(|why| panic!("axe-core: {why}"));
    let db = TempDb::new();
    let api = Api {
        server: Weir::serve(env!("CARGO_BIN_EXE_weir"), &db.path(), &[]),
        evaluations: std::cell::Cell::new(0),
    };
    let base = api.server.url("api");
    let (status, created) = api.send("POST", "/api/v1/flags", BANNER);
    assert_eq!(status, 201, "{created}");
    let (status, created) = api.send("POST", "/api/v1/flags", CHECKOUT);
    assert_eq!(status, 201, "{created}");
    let user = json!({"targetingKey": "user-1", "country": "DE"});
    assert_eq!(api.evaluate("banner", user.clone())["value"], "green");

    // The list's search (keys and variation descriptions) stays in the address.
    browser.open(&format!("{base}/flags"));
    wait_ready(&browser);
    browser.wait_for("tr[data-flag='shop/checkout']");
    let search = browser.wait_for("#flag-search");
    browser.type_into(&search, "payment");
    wait_until("the list to show only checkout", || {
        let rows = browser.execute(
            "return [...document.querySelectorAll('#flags tbody tr')].map(r => r.dataset.flag)",
            &[],
        );
        (rows == json!(["shop/checkout"])).then_some(())
    });
    wait_until("the search in the address", || {
        (browser.execute("return location.search", &[]) == "?search=payment").then_some(())
    });
    assert_accessible(&browser, &axe, "the flags list searched");
    // The tag filter (the API's ?tag=), with the search cleared.
    browser.type_into(&search, "e");
    browser.wait_for("tr[data-flag='shop/banner']");
    browser.select_value("#flag-tag", "team:payments");
    wait_until("the list to show only the tagged flag", || {
        let rows = browser.execute(
            "return [...document.querySelectorAll('#flags tbody tr')].map(r => r.dataset.flag)",
            &[],
        );
        (rows == json!(["shop/checkout"])).then_some(())
    });
    let address = browser.execute("return location.search", &[]);
    println!("filtered by tag: {address}");
    assert_eq!(address, "?search=e&tag=team%3Apayments");
    assert_accessible(&browser, &axe, "the flags list filtered by a tag");
    assert_fits_a_phone(&browser, "the flags list filtered by a tag");
    browser.select_value("#flag-tag", "");
    browser.type_into(&search, "BANN");
    wait_until("the list to show only banner", || {
        let rows = browser.execute(
            "return [...document.querySelectorAll('#flags tbody tr')].map(r => r.dataset.flag)",
            &[],
        );
        (rows == json!(["shop/banner"])).then_some(())
    });
    browser.click_on("tr[data-flag='shop/banner'] a");
    wait_ready(&browser);
    browser.wait_for("#flag-editor");
    assert_eq!(browser.text_of("#flag-state").as_deref(), Some("on"));
    assert_accessible(&browser, &axe, "a flag's page with its editor");
    assert_fits_a_phone(&browser, "a flag's page with its editor");

    // Off, after the confirmation: OFREP serves the first variation, reason DISABLED.
    browser.click_on("#flag-toggle");
    browser.wait_for("dialog[open]");
    let question = browser.text_of("#confirm-text").unwrap_or_default();
    println!("the toggle asks: {question}");
    assert!(question.contains("off"), "{question}");
    assert_accessible(&browser, &axe, "the toggle's confirmation");
    browser.click_on("dialog[open] #confirm-ok");
    wait_version(&api, 2);
    let answer = api.evaluate("banner", user.clone());
    println!("turned off, OFREP answers {answer}");
    assert_eq!(answer["reason"], "DISABLED", "{answer}");
    assert_eq!(answer["variant"], "blue", "{answer}");
    wait_until("the page to show the flag off", || {
        (browser.text_of("#flag-state").as_deref() == Some("off")).then_some(())
    });
    // Cancelled, nothing changes; confirmed, it is on again.
    browser.click_on("#flag-toggle");
    browser.click_on("dialog[open] #confirm-cancel");
    assert_eq!(api.get("/api/v1/flags/shop/banner").1["version"], 2);
    browser.click_on("#flag-toggle");
    browser.click_on("dialog[open] #confirm-ok");
    wait_version(&api, 3);
    assert_eq!(api.evaluate("banner", user.clone())["value"], "green");
    wait_page_version(&browser, 3);

    // A variation's value: green now serves "teal".
    let value = browser.wait_for("#var-1-value");
    browser.type_into(&value, "teal");
    let tags = browser.wait_for("#flag-tags");
    browser.type_into(&tags, "team:shop, homepage");
    browser.click_on("#flag-save");
    let flag = wait_version(&api, 4);
    assert_eq!(flag["spec"]["variations"][1]["value"], "teal", "{flag}");
    assert_eq!(
        flag["spec"]["tags"],
        json!(["team:shop", "homepage"]),
        "{flag}"
    );
    let answer = api.evaluate("banner", user.clone());
    println!("green's value changed, OFREP answers {answer}");
    assert_eq!(answer["variant"], "green", "{answer}");
    assert_eq!(answer["value"], "teal", "{answer}");
    wait_page_version(&browser, 4);

    // A rule with a clause: country in DE, FR gets blue.
    browser.click_on("#rule-add");
    let attribute = browser.wait_for("#rule-0-clause-0-attribute");
    browser.type_into(&attribute, "country");
    browser.select_value("#rule-0-clause-0-op", "in");
    let values = browser.wait_for("#rule-0-clause-0-values");
    browser.type_into(&values, "DE\nFR");
    let name = browser.wait_for("#rule-0-name");
    browser.type_into(&name, "launch markets");
    browser.select_value("#rule-0-variation", "blue");
    assert_accessible(&browser, &axe, "the editor with a new rule");
    browser.execute(
        "document.getElementById('flag-editor').scrollIntoView()",
        &[],
    );
    screenshot(&browser, "dashboard-flag-editor.png");
    assert_fits_a_phone(&browser, "the editor with a new rule");
    browser.click_on("#flag-save");
    let flag = wait_version(&api, 5);
    assert_eq!(
        flag["spec"]["rules"],
        json!([{"name": "launch markets", "clauses": [{"attribute": "country", "op": "in", "values": ["DE", "FR"]}], "variation": "blue"}]),
        "{flag}"
    );
    let answer = api.evaluate("banner", user.clone());
    println!("with the rule, a user in DE gets {answer}");
    assert_eq!(answer["variant"], "blue", "{answer}");
    assert_eq!(answer["reason"], "TARGETING_MATCH", "{answer}");
    let elsewhere = api.evaluate("banner", json!({"targetingKey": "user-2", "country": "US"}));
    assert_eq!(elsewhere["variant"], "green", "{elsewhere}");
    // The rule reads as text, not JSON.
    wait_page_version(&browser, 5);
    let rules = browser.text_of("#flag-rules").unwrap_or_default();
    println!("the page reads the rule as: {rules}");
    assert!(
        rules.contains("launch markets: If country is one of DE, FR: serve blue"),
        "{rules}"
    );
    let page = browser.text_of("main").unwrap_or_default();
    assert!(
        !page.contains("\"clauses\""),
        "raw JSON on the page: {page}"
    );

    // A split that does not add up: the server's error beside the weights, nothing stored.
    browser.click_on("#default-split");
    let blue = browser.wait_for("#default-weight-0");
    browser.type_into(&blue, "30");
    let green = browser.wait_for("#default-weight-1");
    browser.type_into(&green, "60");
    browser.click_on("#flag-save");
    let error = wait_until("the error beside the default strategy's weights", || {
        let found = browser.execute(
            "const note = document.querySelector(\"[data-error-path^='spec.defaultStrategy']\");
             return note && note.previousElementSibling
               && (note.previousElementSibling.dataset.path || '').startsWith('spec.defaultStrategy')
               ? note.textContent : null;",
            &[],
        );
        found.as_str().map(str::to_string)
    });
    println!("the form shows, beside the weights: {error}");
    assert!(error.contains("90"), "{error}");
    assert_eq!(api.get("/api/v1/flags/shop/banner").1["version"], 5);
    assert_accessible(&browser, &axe, "a field error");
    browser.execute(
        "document.querySelector('[data-error-path]').scrollIntoView({block: 'center'})",
        &[],
    );
    screenshot(&browser, "dashboard-flag-error.png");
    // Corrected, it is taken.
    browser.type_into(&green, "70");
    browser.click_on("#flag-save");
    let flag = wait_version(&api, 6);
    assert_eq!(
        flag["spec"]["defaultStrategy"],
        json!({"weights": {"blue": 30, "green": 70}})
    );
    wait_page_version(&browser, 6);

    // The history: who changed what, as readable diffs.
    let history = wait_until("the history of the six versions", || {
        let text = browser.text_of("#flag-history")?;
        text.contains("version 6").then_some(text)
    });
    println!("the history reads:\n{history}");
    assert!(history.contains("state: on → off"), "{history}");
    // An open server has no token to name: the dashboard names itself.
    assert!(history.contains("by dashboard"), "{history}");
    assert!(
        history.contains("variation 2, value: green → teal"),
        "{history}"
    );
    assert!(
        !history.contains("{\""),
        "raw JSON in the history: {history}"
    );

    // Evaluations per minute: the page's totals are the API's, as a chart and as a table.
    let evaluated = wait_until("the evaluations counted", || {
        let (_, counted) = api.get("/api/v1/flags/shop/banner/evaluations?since=1h");
        let total: u64 = counted["totals"]
            .as_object()?
            .values()
            .filter_map(Value::as_u64)
            .sum();
        (total == api.evaluations.get()).then_some(counted["totals"].clone())
    });
    let legend = wait_until("the chart to show the API's totals", || {
        browser.click_on("#evaluations-refresh");
        let legend = browser.text_of("#flag-evaluations ul.legend")?;
        evaluated
            .as_object()?
            .iter()
            .all(|(variation, count)| legend.contains(&format!("{variation} {count}")))
            .then_some(legend)
    });
    println!("evaluations {evaluated}; the chart's legend: {legend}");
    browser.click_on("#flag-evaluations details summary");
    browser.wait_for("#evaluations-table tbody tr");
    assert_accessible(&browser, &axe, "the evaluations with their table");
    assert_fits_a_phone(&browser, "the evaluations with their table");
    browser.execute(
        "document.getElementById('flag-evaluations').scrollIntoView()",
        &[],
    );
    screenshot(&browser, "dashboard-flag-evaluations.png");

    // A trigger: created with its URL shown once, called over HTTP (the flag turns off, the
    // history names it and the caller), then revoked after a confirmation.
    browser.select_value("#trigger-action", "off");
    let description = browser.wait_for("#trigger-description");
    browser.type_into(&description, "checkout alert");
    browser.click_on("#trigger-create");
    browser.wait_for("#trigger-url");
    browser.wait_for("#trigger-copy");
    let url = browser.execute("return document.getElementById('trigger-url').value", &[]);
    let url = url.as_str().unwrap().to_string();
    println!(
        "the trigger's URL (shown once): {}...",
        &url[..url.len().min(60)]
    );
    assert!(
        url.starts_with(&format!("{base}/api/v1/triggers/")),
        "{url}"
    );
    browser.wait_for("#triggers tbody tr");
    assert_accessible(&browser, &axe, "a trigger just created");
    assert_fits_a_phone(&browser, "a trigger just created");
    browser.execute(
        "document.getElementById('flag-triggers').scrollIntoView()",
        &[],
    );
    screenshot(&browser, "dashboard-flag-triggers.png");
    let (_, listed) = api.get("/api/v1/flags/shop/banner/triggers");
    let secret_path = url.trim_start_matches(&base).to_string();
    assert!(
        !listed
            .to_string()
            .contains(secret_path.rsplit('/').next().unwrap()),
        "the list shows the secret: {listed}"
    );
    let (status, fired) = api.send("POST", &secret_path, "");
    assert_eq!(status, 200, "{fired}");
    let answer = api.evaluate("banner", user.clone());
    println!("after the trigger: {answer}");
    assert_eq!(answer["reason"], "DISABLED", "{answer}");
    wait_until("the page to show the flag off", || {
        (browser.text_of("#flag-state").as_deref() == Some("off")).then_some(())
    });
    let history = wait_until("the trigger's use in the history", || {
        let text = browser.text_of("#flag-history")?;
        text.contains("triggered").then_some(text)
    });
    assert!(history.contains("checkout alert"), "{history}");
    // The use is counted once the call has answered (after the flag changed): the list shows
    // it when read again, as after a reload.
    let (_, listed) = api.get("/api/v1/flags/shop/banner/triggers");
    assert_eq!(listed["items"][0]["uses"], 1, "{listed}");
    browser.open(&format!("{base}/flags/shop/banner"));
    wait_ready(&browser);
    wait_until("the trigger's use counted", || {
        (browser.text_of("#triggers tbody tr td.num").as_deref() == Some("1")).then_some(())
    });
    browser.click_on("#triggers tbody tr button");
    browser.wait_for("dialog[open]");
    assert_accessible(&browser, &axe, "the revoke confirmation");
    browser.click_on("dialog[open] #confirm-ok");
    wait_until("the trigger revoked", || {
        browser.find("#triggers").is_none().then_some(())
    });
    let (status, _) = api.send("POST", &secret_path, "");
    assert_ne!(status, 200, "a revoked trigger still works");
    let flag_now = api.get("/api/v1/flags/shop/banner").1;
    let version = flag_now["version"].as_u64().unwrap();
    wait_page_version(&browser, version);

    // A waiting flag rollout: no create form; its schedule is edited, then deleted.
    assert!(browser.find("#create-rollout").is_some(), "no create form");
    // An edit begun before a rollout of the flag starts...
    let value = browser.wait_for("#var-1-value");
    browser.type_into(&value, "navy");
    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(48);
    let rollout = json!({
        "apiVersion": "weir.dev/v1alpha1", "kind": "Rollout",
        "metadata": {"name": "banner-blue", "namespace": "shop"},
        "spec": {
            "target": {"kind": "flag", "flag": "banner", "control": "green", "variation": "blue"},
            "plan": {"schedule": {"manual": [
                {"at": later.to_string(), "weight": 40},
                {"at": (later + jiff::SignedDuration::from_hours(24)).to_string(), "weight": 100},
            ]}},
        },
    });
    let (status, created) = api.send("POST", "/api/v1/rollouts", &rollout.to_string());
    assert_eq!(status, 201, "{created}");
    browser.wait_for("#schedule-edit-banner-blue");
    // ...is refused with the server's reason: the rollout holds the variations.
    browser.click_on("#flag-save");
    let refusal = wait_until("the rollout's refusal", || {
        let text = browser.text_of("#flag-errors")?;
        text.contains("rolled out by").then_some(text)
    });
    println!("saving under the rollout: {refusal}");
    assert!(refusal.contains("shop/banner-blue"), "{refusal}");
    let (_, stored) = api.get("/api/v1/flags/shop/banner");
    assert_eq!(stored["spec"]["variations"][1]["value"], "teal", "{stored}");
    assert_accessible(&browser, &axe, "a change refused under a rollout");
    wait_until("the create form to go", || {
        browser.find("#create-rollout").is_none().then_some(())
    });
    let refused = browser.text_of("#create-refused").unwrap_or_default();
    println!("instead of the create form: {refused}");
    assert!(refused.contains("banner-blue"), "{refused}");
    browser.click_on("#schedule-edit-banner-blue");
    let weight =
        browser.wait_for("#edit-schedule input[data-path='spec.plan.schedule.manual[0].weight']");
    assert_accessible(&browser, &axe, "editing a waiting schedule");
    // Too close to the first entry: refused beside the second entry's time.
    let first_at = browser.execute(
        "return document.querySelector(\"#edit-schedule input[data-path='spec.plan.schedule.manual[0].at']\").value",
        &[],
    );
    browser.execute(
        "const e = document.querySelector(\"#edit-schedule input[data-path='spec.plan.schedule.manual[1].at']\");
         const at = new Date(arguments[0]); at.setMinutes(at.getMinutes() + 2);
         const pad = n => String(n).padStart(2, '0');
         e.value = `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T${pad(at.getHours())}:${pad(at.getMinutes())}`;
         e.dispatchEvent(new Event('input', {bubbles: true}));",
        &[first_at],
    );
    browser.click_on("#edit-save");
    let error = wait_until("the error beside the second entry's time", || {
        let found = browser.execute(
            "const note = document.querySelector(\"#edit-schedule [data-error-path='spec.plan.schedule.manual[1].at']\");
             return note && note.previousElementSibling
               && note.previousElementSibling.dataset.path === 'spec.plan.schedule.manual[1].at'
               ? note.textContent : null;",
            &[],
        );
        found.as_str().map(str::to_string)
    });
    println!("the schedule editor shows, beside entry 2's time: {error}");
    assert_accessible(&browser, &axe, "a schedule's field error");
    browser.execute(
        "const e = document.querySelector(\"#edit-schedule input[data-path='spec.plan.schedule.manual[1].at']\");
         const at = new Date(arguments[0]); at.setHours(at.getHours() + 24);
         const pad = n => String(n).padStart(2, '0');
         e.value = `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T${pad(at.getHours())}:${pad(at.getMinutes())}`;
         e.dispatchEvent(new Event('input', {bubbles: true}));",
        &[browser.execute(
            "return document.querySelector(\"#edit-schedule input[data-path='spec.plan.schedule.manual[0].at']\").value",
            &[],
        )],
    );
    browser.type_into(&weight, "15");
    browser.click_on("#edit-save");
    let edited = wait_until("the edited schedule stored", || {
        let (_, stored) = api.get("/api/v1/rollouts/shop/banner-blue");
        (stored["spec"]["plan"]["schedule"]["manual"][0]["weight"] == 15).then_some(stored)
    });
    println!(
        "the schedule after the edit: {}",
        edited["spec"]["plan"]["schedule"]
    );
    wait_until("the editor to close", || {
        browser.find("#edit-schedule").is_none().then_some(())
    });
    assert_fits_a_phone(&browser, "a flag with a waiting rollout");
    browser.execute(
        "document.getElementById('flag-rollouts-title').scrollIntoView()",
        &[],
    );
    screenshot(&browser, "dashboard-flag-schedule.png");
    browser.click_on("#schedule-delete-banner-blue");
    browser.wait_for("dialog[open]");
    assert_accessible(&browser, &axe, "the delete confirmation");
    browser.click_on("dialog[open] #confirm-ok");
    wait_until("the rollout deleted", || {
        (api.get("/api/v1/rollouts/shop/banner-blue").0 == 404).then_some(())
    });
    browser.wait_for("#create-rollout");
    assert!(browser.find("#schedule-edit-banner-blue").is_none());
}
