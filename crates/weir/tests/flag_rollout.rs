//! Progressive rollouts of a flag (`target: {kind: flag}` with a `schedule` plan) on a real
//! `weir serve`: an entry fires from the engine's timer queue at its time, the flag's weights
//! change with it (as OFREP evaluations show), promotion gives everyone the new variation and a
//! rollback returns the audience to control. Guarded rollouts (below): the sequential judge
//! compares the variations on the outcomes an application reports, and rolls back a variation
//! that fails more often.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use weir_testkit::fixtures::TempDb;
use weir_testkit::http;
use weir_testkit::process::Weir;
use weir_testkit::wait::wait_until;

const BANNER: &str = "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: banner, namespace: shop}
spec:
  variations: [{name: blue, value: blue}, {name: green, value: green}]
  defaultStrategy: {weights: {blue: 90, green: 10}}
";

fn post(server: &Weir, path: &str, content_type: &str, body: &str) -> http::Response {
    http::request(
        server.address("api"),
        "POST",
        path,
        &[("Content-Type", content_type)],
        body,
    )
    .unwrap()
}

/// The flag's default strategy as stored.
fn strategy(server: &Weir) -> Value {
    flag_of(server, "banner")["spec"]["defaultStrategy"].clone()
}

/// Flag `key` of namespace `shop` as the API shows it.
fn flag_of(server: &Weir, key: &str) -> Value {
    let answer = http::get(server.address("api"), &format!("/api/v1/flags/shop/{key}")).unwrap();
    serde_json::from_str::<Value>(&answer.body).unwrap()
}

/// What OFREP answers for user `key`.
fn evaluate(server: &Weir, key: &str) -> Value {
    evaluate_in(server, "banner", &json!({"targetingKey": key}))
}

/// What OFREP answers for flag `flag` of namespace `shop` in `context`.
fn evaluate_in(server: &Weir, flag: &str, context: &Value) -> Value {
    let answer = post(
        server,
        &format!("/ns/shop/ofrep/v1/evaluate/flags/{flag}"),
        "application/json",
        &json!({"context": context}).to_string(),
    );
    serde_json::from_str(&answer.body).unwrap()
}

fn rollout_status(server: &Weir) -> Value {
    status_of(server, "banner-green")
}

/// The status of rollout `name` of namespace `shop`.
fn status_of(server: &Weir, name: &str) -> Value {
    let answer = http::get(
        server.address("api"),
        &format!("/api/v1/rollouts/shop/{name}"),
    )
    .unwrap();
    serde_json::from_str::<Value>(&answer.body).unwrap()["status"].clone()
}

fn weir(server: &Weir, args: &[&str]) {
    let done = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .args(["--server", &server.url("api")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
}

/// A `weir serve` over a database file that outlives it (a restart opens the same file).
struct Served {
    db: std::path::PathBuf,
    process: Weir,
}

impl Served {
    fn start(db: std::path::PathBuf) -> Served {
        let process = Weir::serve(env!("CARGO_BIN_EXE_weir"), &db, &[]);
        Served { db, process }
    }
}

/// `weir serve` with flag `banner` and a rollout of its `green` variation scheduled to 30% two
/// seconds from now; returns the entry's time.
fn set_up() -> (TempDb, Weir, jiff::Timestamp) {
    let (db, served, at) = set_up_in(TempDb::new());
    (db, served.process, at)
}

fn set_up_in(db: TempDb) -> (TempDb, Served, jiff::Timestamp) {
    let served = Served::start(db.path());
    let server = &served.process;
    let created = post(server, "/api/v1/flags", "application/yaml", BANNER);
    assert_eq!(created.status, 201, "{}", created.body);
    let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(2);
    let rollout = format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: banner-green, namespace: shop}}
spec:
  target: {{kind: flag, flag: banner, control: blue, variation: green}}
  plan:
    schedule:
      manual: [{{at: \"{at}\", weight: 30}}]
  analysis: {{interval: 1s}}
"
    );
    let applied = post(server, "/api/v1/rollouts", "application/yaml", &rollout);
    assert_eq!(applied.status, 201, "{}", applied.body);
    (db, served, at)
}

#[test]
fn a_scheduled_entry_moves_the_flags_audience_on_time_and_promotion_completes_it() {
    let (_db, server, at) = set_up();
    // Before the entry: everyone on control (unless the entry is due already: a slow start).
    wait_until("the rollout initialised", || {
        (rollout_status(&server)["phase"] != Value::Null).then_some(())
    });
    // Until the first entry the flag is as its owners left it.
    if jiff::Timestamp::now() < at {
        assert_eq!(
            strategy(&server),
            json!({"weights": {"blue": 90, "green": 10}})
        );
    }

    let weights = wait_until("the entry applied", || {
        let strategy = strategy(&server);
        (strategy["weights"]["green"] == 30).then_some(strategy)
    });
    assert_eq!(weights, json!({"weights": {"blue": 70, "green": 30}}));
    let shares = (0..2000)
        .filter(|user| evaluate(&server, &format!("user-{user}"))["value"] == "green")
        .count();
    assert!((500..700).contains(&shares), "{shares} of 2000 on green");

    // The entry fired from the timer queue, never before its time. How late is measured, not
    // asserted (a shared machine's scheduling is no test of weir): the figure is printed below
    // and docs/BENCHMARKS.md has the lateness at scale.
    let history = http::get(
        server.address("api"),
        "/api/v1/rollouts/shop/banner-green/events",
    )
    .unwrap();
    let history: Value = serde_json::from_str(&history.body).unwrap();
    let fired = history["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| {
            event["message"]
                .as_str()
                .is_some_and(|message| message.starts_with("scheduled weight 30%"))
        })
        .unwrap_or_else(|| panic!("{history:#}"))
        .clone();
    let fired_at: jiff::Timestamp = fired["at"].as_str().unwrap().parse().unwrap();
    let late = fired_at.duration_since(at);
    assert!(
        late >= jiff::SignedDuration::ZERO,
        "the entry fired {late:?} before its time"
    );

    // `weir status` shows the schedule: what is done, when it took effect, the weight now.
    let shown = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "status",
            "shop/banner-green",
            "--server",
            &server.url("api"),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(
        shown.contains(
            "schedule: FINISHED, 1 of 1 entries done [######--------------] 30% on the new variation"
        ),
        "{shown}"
    );
    let row = shown
        .lines()
        .find(|line| line.trim_start().starts_with("1  "))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        row.contains("30%") && row.contains(&fired_at.to_string()),
        "{row}"
    );

    // The schedule ends at 30%: promotion finishes it, everyone gets green.
    wait_until("waiting for promotion", || {
        (rollout_status(&server)["phase"] == "WaitingPromotion").then_some(())
    });
    // While it runs, the flag is this rollout's: no second rollout, no change of variations.
    let second = post(
        &server,
        "/api/v1/rollouts",
        "application/yaml",
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {name: banner-again, namespace: shop}
spec:
  target: {kind: flag, flag: banner, control: blue, variation: green}
  plan: {canary: {stepWeight: 10}}
",
    );
    assert_eq!(second.status, 400, "{}", second.body);
    let shown = http::get(server.address("api"), "/api/v1/flags/shop/banner").unwrap();
    let shown: Value = serde_json::from_str(&shown.body).unwrap();
    assert_eq!(shown["rolledOutBy"], "shop/banner-green", "{shown:#}");
    assert!(
        second.body.contains("spec.target.flag") && second.body.contains("shop/banner-green"),
        "{}",
        second.body
    );
    let three_variations = BANNER.replace(
        "{name: green, value: green}]",
        "{name: green, value: green}, {name: red, value: red}]",
    );
    let changed = post(
        &server,
        "/api/v1/flags",
        "application/yaml",
        &three_variations,
    );
    assert_eq!(changed.status, 409, "{}", changed.body);
    weir(&server, &["promote", "shop/banner-green"]);
    wait_until("promoted", || {
        (rollout_status(&server)["phase"] == "Succeeded").then_some(())
    });
    // The final strategy is written by the effects applied after the step that ends the run
    // is committed: wait for it rather than read it at the moment the phase changes.
    wait_until("everyone on green", || {
        (strategy(&server) == json!({"variation": "green"})).then_some(())
    });
    assert_eq!(evaluate(&server, "user-1")["value"], "green");
    // The run is over: the flag is free again (once the target has seen the end of the run,
    // which it does with the effects applied after the final commit).
    wait_until("the flag released", || {
        let shown = http::get(server.address("api"), "/api/v1/flags/shop/banner")?;
        let shown: Value = serde_json::from_str(&shown.body).ok()?;
        shown.get("rolledOutBy").is_none().then_some(())
    });
    let three_variations = three_variations.replace("{variation: blue}", "{variation: green}");
    let changed = post(
        &server,
        "/api/v1/flags",
        "application/yaml",
        &three_variations,
    );
    assert_eq!(changed.status, 200, "{}", changed.body);
    println!(
        "entry at {at} fired at {fired_at} ({} ms late); {shares} of 2000 users on green at 30%",
        late.as_millis()
    );
}

#[test]
fn an_aborted_flag_rollout_returns_the_audience_to_control() {
    let (_db, server, _at) = set_up();
    wait_until("the entry applied", || {
        (strategy(&server)["weights"]["green"] == 30).then_some(())
    });
    weir(&server, &["abort", "shop/banner-green"]);
    wait_until("rolled back", || {
        (rollout_status(&server)["phase"] == "Failed").then_some(())
    });
    // The route back to control is applied after the rollback is committed: wait for it.
    wait_until("everyone back on control", || {
        (strategy(&server) == json!({"variation": "blue"})).then_some(())
    });
    assert_eq!(evaluate(&server, "user-1")["value"], "blue");
}

#[test]
fn a_server_killed_around_an_entry_applies_it_exactly_once() {
    let (_db, mut server, at) = set_up_in(TempDb::new());
    // SIGKILL just before the entry, then repeatedly around and after its time: the kill
    // moments are the test's input, not a synchronisation.
    let path = server.db.clone();
    for offset_ms in [-700_i64, -150, 0, 40, 150, 600] {
        let kill_at = at + jiff::SignedDuration::from_millis(offset_ms);
        let wait = jiff::Timestamp::now().duration_until(kill_at);
        if wait.is_positive() {
            std::thread::sleep(std::time::Duration::try_from(wait).unwrap());
        }
        server.process.kill();
        server = Served::start(path.clone());
    }
    let applied = wait_until("the entry applied after the restarts", || {
        let strategy = strategy(&server.process);
        (strategy["weights"]["green"] == 30).then_some(strategy)
    });
    assert_eq!(applied, json!({"weights": {"blue": 70, "green": 30}}));
    let history = http::get(
        server.process.address("api"),
        "/api/v1/rollouts/shop/banner-green/events",
    )
    .unwrap();
    let history: Value = serde_json::from_str(&history.body).unwrap();
    let items = history["items"].as_array().unwrap();
    let fired = items
        .iter()
        .filter(|event| {
            event["message"]
                .as_str()
                .is_some_and(|message| message.starts_with("scheduled weight"))
        })
        .count();
    assert_eq!(fired, 1, "the entry fired exactly once: {history:#}");
    let seqs: Vec<u64> = items
        .iter()
        .map(|event| event["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap");
    println!(
        "6 SIGKILLs from 700 ms before to 600 ms after the entry: fired {fired} time(s); events {seqs:?}"
    );
}

// === Guarded flag rollouts: judged on the outcomes an application reports ===

/// A boolean flag, `off` for everyone.
const CHECKOUT: &str = "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {name: checkout, namespace: shop}
spec:
  variations: [{name: \"off\", value: false}, {name: \"on\", value: true}]
  defaultStrategy: {variation: \"off\"}
";

const OUTCOMES: &str = "/api/v1/flags/shop/checkout/outcomes";

/// `weir serve` with `flag` (flag `checkout`) and rollout `checkout-on` moving its audience
/// from `off` to `on`, guarded by the sequential judge (and a lenient builtin check, which a
/// flag rollout computes from the same reports): 20% two seconds from now, 60% five minutes
/// later. Returns once the first entry is applied: the judge works between entries.
fn guarded_rollout(flag: &str) -> (TempDb, Weir) {
    let db = TempDb::new();
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &db.path(), &[]);
    let created = post(&server, "/api/v1/flags", "application/yaml", flag);
    assert_eq!(created.status, 201, "{}", created.body);
    let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(2);
    let later = at + jiff::SignedDuration::from_mins(5);
    let rollout = format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: checkout-on, namespace: shop}}
spec:
  target: {{kind: flag, flag: checkout, control: \"off\", variation: \"on\"}}
  plan:
    schedule:
      manual: [{{at: \"{at}\", weight: 20}}, {{at: \"{later}\", weight: 60}}]
  analysis:
    interval: 1s
    judges: [sequential]
    # Computed from the reports each interval; the judge is what this test is about.
    metrics: [{{name: request-success-rate, thresholdRange: {{min: 50}}}}]
    noData: ignore
"
    );
    let applied = post(&server, "/api/v1/rollouts", "application/yaml", &rollout);
    assert_eq!(applied.status, 201, "{}", applied.body);
    wait_until("the first entry applied", || {
        (flag_of(&server, "checkout")["spec"]["defaultStrategy"]["weights"]["on"] == 20)
            .then_some(())
    });
    (db, server)
}

/// An application using flag `checkout`: it asks OFREP which variant each user gets (half the
/// users in DE, half in FR), serves them, and reports per variant what it served. Request `n`
/// of a variant fails when `n` is a multiple of that variant's `fail_every`, so the error rates
/// are exact and the same on every run.
struct App<'a> {
    server: &'a Weir,
    fail_every: BTreeMap<&'static str, u64>,
    users: u64,
    /// Per variant: requests and errors reported so far.
    sent: BTreeMap<String, (u64, u64)>,
    /// Users the split (not a rule) served `on`.
    moved: Vec<String>,
    reports: u64,
}

impl App<'_> {
    fn new(server: &Weir, on_fails_every: u64, off_fails_every: u64) -> App<'_> {
        App {
            server,
            fail_every: BTreeMap::from([("on", on_fails_every), ("off", off_fails_every)]),
            users: 0,
            sent: BTreeMap::new(),
            moved: Vec::new(),
            reports: 0,
        }
    }

    /// Serves `users` new users, then reports what each variant served (20 ms each).
    fn serve_and_report(&mut self, users: u64) {
        let mut served: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for _ in 0..users {
            let user = format!("user-{}", self.users);
            let country = if self.users.is_multiple_of(2) {
                "DE"
            } else {
                "FR"
            };
            self.users += 1;
            let answer = evaluate_in(
                self.server,
                "checkout",
                &json!({"targetingKey": user, "country": country}),
            );
            let variant = answer["variant"]
                .as_str()
                .unwrap_or_else(|| panic!("{answer}"))
                .to_string();
            if variant == "on" && answer["reason"] == "SPLIT" {
                self.moved.push(user);
            }
            let total = self.sent.entry(variant.clone()).or_default();
            total.0 += 1;
            let fails = total.0.is_multiple_of(self.fail_every[variant.as_str()]);
            total.1 += u64::from(fails);
            let batch = served.entry(variant).or_default();
            batch.0 += 1;
            batch.1 += u64::from(fails);
        }
        let variants: serde_json::Map<String, Value> = served
            .iter()
            .map(|(variant, (requests, errors))| {
                let latencies = vec![20.0; usize::try_from(*requests).unwrap()];
                (
                    variant.clone(),
                    json!({"requests": requests, "errors": errors, "latencyMs": latencies}),
                )
            })
            .collect();
        let answer = post(
            self.server,
            OUTCOMES,
            "application/json",
            &json!({"variants": variants}).to_string(),
        );
        assert_eq!(answer.status, 204, "{}", answer.body);
        self.reports += 1;
    }

    fn sent(&self, variant: &str) -> (u64, u64) {
        self.sent.get(variant).copied().unwrap_or_default()
    }
}

fn history(server: &Weir, name: &str) -> Value {
    let answer = http::get(
        server.address("api"),
        &format!("/api/v1/rollouts/shop/{name}/events"),
    )
    .unwrap();
    serde_json::from_str(&answer.body).unwrap()
}

fn metrics(server: &Weir) -> weir_testkit::metrics::Exposition {
    let answer = http::get(server.address("api"), "/metrics").unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    weir_testkit::metrics::Exposition::parse(answer.body)
}

#[test]
fn a_guarded_flag_rollout_whose_variation_fails_more_is_rolled_back_with_its_evidence() {
    let (_db, server) = guarded_rollout(CHECKOUT);
    // `on` fails one request in 5 (20%), `off` one in 100 (1%).
    let mut app = App::new(&server, 5, 100);
    let started = std::time::Instant::now();
    wait_until("the judge rolled the rollout back", || {
        app.serve_and_report(200);
        (status_of(&server, "checkout-on")["phase"] == "Failed").then_some(())
    });
    let took = started.elapsed();

    // Back to control at once: the default strategy, and every user the split had moved.
    wait_until("everyone back on off", || {
        (flag_of(&server, "checkout")["spec"]["defaultStrategy"] == json!({"variation": "off"}))
            .then_some(())
    });
    // Every OFREP answer the app got was counted as an exposure of its variant, and every
    // report added up (before the evaluations below add theirs).
    let flag = flag_of(&server, "checkout");
    let exposition = metrics(&server);
    for variant in ["on", "off"] {
        let (requests, errors) = app.sent(variant);
        assert_eq!(flag["exposures"][variant], requests, "{flag:#}");
        assert_eq!(flag["outcomes"][variant]["requests"], requests, "{flag:#}");
        assert_eq!(flag["outcomes"][variant]["errors"], errors, "{flag:#}");
        assert_eq!(flag["outcomes"][variant]["latencies"], requests, "{flag:#}");
        let labels = [
            ("namespace", "shop"),
            ("flag", "checkout"),
            ("variant", variant),
        ];
        assert_eq!(
            exposition.value("weir_flag_exposures_total", &labels),
            Some(requests as f64),
            "{}",
            exposition.text
        );
    }
    assert!(!app.moved.is_empty(), "the split moved nobody to on");
    for user in &app.moved {
        let answer = evaluate_in(&server, "checkout", &json!({"targetingKey": user}));
        assert_eq!(answer["variant"], "off", "{user}: {answer}");
    }

    // The history has the judge's verdict with its evidence, between the two entries.
    let history = history(&server, "checkout-on");
    let items = history["items"].as_array().unwrap();
    let messages: Vec<&str> = items
        .iter()
        .map(|event| event["message"].as_str().unwrap())
        .collect();
    assert!(
        messages
            .iter()
            .any(|message| message.starts_with("scheduled weight 20%")),
        "{messages:#?}"
    );
    assert!(
        !messages
            .iter()
            .any(|message| message.starts_with("scheduled weight 60%")),
        "{messages:#?}"
    );
    let rolled_back = items
        .iter()
        .find(|event| event["reason"] == "RolledBack")
        .unwrap_or_else(|| panic!("{history:#}"));
    assert!(
        rolled_back["message"]
            .as_str()
            .unwrap()
            .contains("judge sequential found the canary worse than the primary"),
        "{rolled_back:#}"
    );
    let verdict = &rolled_back["evidence"]["verdict"];
    assert_eq!(verdict["judge"], "sequential", "{rolled_back:#}");
    assert_eq!(verdict["outcome"], "fail", "{rolled_back:#}");
    let evidence = &verdict["evidence"];
    let count = |name: &str| evidence[name].as_u64().unwrap();
    let (canary_requests, canary_errors) = (count("canaryRequests"), count("canaryErrors"));
    let (primary_requests, primary_errors) = (count("primaryRequests"), count("primaryErrors"));
    // The judge saw what the app reported (from its first look on), at the rates it had.
    assert!(canary_requests > 0 && primary_requests > 0, "{evidence:#}");
    assert!(canary_requests <= app.sent("on").0, "{evidence:#}");
    assert!(primary_requests <= app.sent("off").0, "{evidence:#}");
    assert!(canary_errors * 5 + 5 > canary_requests, "{evidence:#}");
    assert!(primary_errors <= primary_requests / 100 + 1, "{evidence:#}");
    assert!(
        evidence["eValue"].as_f64().unwrap() >= evidence["threshold"].as_f64().unwrap(),
        "{evidence:#}"
    );
    println!(
        "on failed {}/{} ({:.1}%), off {}/{} ({:.1}%) over {} reports; the judge rolled back after {:.1} s on {canary_errors}/{canary_requests} vs {primary_errors}/{primary_requests}: {}",
        app.sent("on").1,
        app.sent("on").0,
        100.0 * app.sent("on").1 as f64 / app.sent("on").0 as f64,
        app.sent("off").1,
        app.sent("off").0,
        100.0 * app.sent("off").1 as f64 / app.sent("off").0 as f64,
        app.reports,
        took.as_secs_f64(),
        evidence["summary"].as_str().unwrap_or_default()
    );
}

#[test]
fn a_guarded_flag_rollout_with_equal_error_rates_is_not_rolled_back() {
    // A rule serves `on` to every user in DE whatever the weights: at 20% on the split, `on`
    // has about 60% of the requests. Judged at the default strategy's weight, `on`'s share of
    // the errors would look three times too large; judged at its share of the requests, it is
    // what it should be.
    let with_rule = CHECKOUT.replace(
        "  defaultStrategy:",
        "  rules: [{clauses: [{attribute: country, op: in, values: [DE]}], variation: \"on\"}]\n  defaultStrategy:",
    );
    let (_db, server) = guarded_rollout(&with_rule);
    // Both variants fail one request in 50 (2%).
    let mut app = App::new(&server, 50, 50);
    let judged = [("rollout", "checkout-on"), ("judge", "sequential")];
    let log_e_value = wait_until("the judge weighed errors of both variants", || {
        app.serve_and_report(200);
        let status = status_of(&server, "checkout-on");
        assert_eq!(
            status["phase"],
            "Progressing",
            "{:#}",
            history(&server, "checkout-on")
        );
        let log_e_value = metrics(&server).value("weir_rollout_judge_log_evalue", &judged)?;
        // 15 reports of 200 users: enough errors that judging at the split's weight would
        // have rolled back.
        (app.reports >= 15 && log_e_value != 0.0).then_some(log_e_value)
    });
    assert!(log_e_value < 100f64.ln(), "{log_e_value}");
    let (on, off) = (app.sent("on"), app.sent("off"));
    assert!(
        on.0 > off.0,
        "the rule gives on most requests: {on:?} {off:?}"
    );
    println!(
        "on {}/{}, off {}/{} over {} reports (on has {:.0}% of the requests at weight 20%): still Progressing, ln e-value {log_e_value:.2} (rollback at {:.2})",
        on.1,
        on.0,
        off.1,
        off.0,
        app.reports,
        100.0 * on.0 as f64 / (on.0 + off.0) as f64,
        100f64.ln()
    );
}

#[test]
fn outcome_reports_are_counted_whole_or_refused_naming_the_field() {
    let db = TempDb::new();
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &db.path(), &[]);
    let created = post(&server, "/api/v1/flags", "application/yaml", CHECKOUT);
    assert_eq!(created.status, 201, "{}", created.body);
    let report = |path: &str, body: &str| {
        let answer = post(&server, path, "application/json", body);
        let error: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
        (answer.status, error["error"].clone())
    };

    let (status, error) = report(
        "/api/v1/flags/shop/nope/outcomes",
        r#"{"variants": {"on": {"requests": 1}}}"#,
    );
    assert_eq!(
        (status, &error["code"]),
        (404, &json!("not_found")),
        "{error:#}"
    );

    let (status, error) = report(
        OUTCOMES,
        r#"{"variants": {"on": {"requests": 10, "errors": 1}, "purple": {"requests": 1}}}"#,
    );
    assert_eq!(
        (status, &error["code"]),
        (422, &json!("unprocessable")),
        "{error:#}"
    );
    assert_eq!(error["errors"][0]["path"], "variants.purple", "{error:#}");
    let message = error["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("\"purple\"") && message.contains("one of off, on"),
        "{message}"
    );

    let (status, error) = report(OUTCOMES, r#"{"variants": {"on": "#);
    assert_eq!(
        (status, &error["code"]),
        (400, &json!("invalid")),
        "{error:#}"
    );
    assert_eq!(error["errors"][0]["path"], "(body)", "{error:#}");

    let (status, error) = report(
        OUTCOMES,
        r#"{"variants": {"off": {"requests": 5}, "on": {"requests": 3, "errors": 4}}}"#,
    );
    assert_eq!(
        (status, &error["code"]),
        (400, &json!("invalid")),
        "{error:#}"
    );
    assert_eq!(
        error["errors"][0]["path"], "variants.on.errors",
        "{error:#}"
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("at most the requests (3)"),
        "{error:#}"
    );

    // Nothing of a refused report was counted, not even its right parts.
    let flag = flag_of(&server, "checkout");
    assert_eq!(flag["outcomes"]["off"]["requests"], 0, "{flag:#}");
    assert_eq!(flag["outcomes"]["on"]["requests"], 0, "{flag:#}");

    let answer = post(
        &server,
        OUTCOMES,
        "application/json",
        r#"{"variants": {"on": {"requests": 4, "errors": 1, "latencyMs": [10, 12, 30, 900]}, "off": {"requests": 5, "slow": 1}}}"#,
    );
    assert_eq!(answer.status, 204, "{}", answer.body);
    let flag = flag_of(&server, "checkout");
    let on = &flag["outcomes"]["on"];
    assert_eq!(
        (&on["requests"], &on["errors"], &on["latencies"]),
        (&json!(4), &json!(1), &json!(4)),
        "{flag:#}"
    );
    let p99 = on["latencyP99Ms"].as_f64().unwrap();
    assert!((900.0..990.0).contains(&p99), "{p99}");
    assert_eq!(flag["outcomes"]["off"]["slow"], 1, "{flag:#}");
    assert_eq!(flag["exposures"], json!({"off": 0, "on": 0}), "{flag:#}");

    // The counts are the server's: a flag read and written back is still accepted.
    let mut document = flag.clone();
    document["spec"]["defaultStrategy"] = json!({"variation": "on"});
    let written = http::request(
        server.address("api"),
        "PUT",
        "/api/v1/flags/shop/checkout",
        &[("Content-Type", "application/json")],
        &document.to_string(),
    )
    .unwrap();
    assert_eq!(written.status, 200, "{}", written.body);
}

/// Runs `weir ARGS` against `server` and returns its exit code and what it printed.
fn weir_output(server: &Weir, args: &[&str]) -> (Option<i32>, String) {
    let done = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .args(["--server", &server.url("api")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
    (done.status.code(), printed)
}

#[test]
fn a_stopped_flag_rollout_keeps_its_split_in_the_flag_and_stop_rollback_returns_control() {
    let (_db, server, at) = set_up();
    wait_until("the entry applied", || {
        (strategy(&server)["weights"]["green"] == 30).then_some(())
    });
    let status = rollout_status(&server);
    // Its one entry has fired: the schedule is finished, the run waits at 30% for a person.
    assert_eq!(status["scheduleState"], "FINISHED", "{status}");
    let triggered = status["triggered"].as_array().unwrap();
    assert_eq!(triggered.len(), 1, "{status}");
    assert_eq!(triggered[0]["at"], at.to_string());
    let fired: jiff::Timestamp = triggered[0]["triggeredAt"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(fired >= at, "fired at {fired}, due at {at}");
    println!(
        "entry due at {at} fired at {fired}: {:#} late",
        fired.duration_since(at)
    );
    let version_during_run = flag_of(&server, "banner")["version"].clone();

    let (code, printed) = weir_output(&server, &["stop", "shop/banner-green"]);
    assert_eq!(code, Some(0), "{printed}");
    println!("weir stop: {printed}");
    assert!(printed.contains("Stopped"), "{printed}");
    let status = rollout_status(&server);
    assert_eq!(
        (
            &status["phase"],
            &status["stoppedBy"],
            &status["scheduleState"]
        ),
        (&json!("Stopped"), &json!("user"), &json!("STOPPED")),
        "{status}"
    );
    // The split the run left is written into the flag itself (a new version), and the flag is
    // no longer held by the rollout.
    wait_until("the split written into the flag", || {
        let flag = flag_of(&server, "banner");
        (flag["version"] != version_during_run && flag.get("rolledOutBy").is_none()).then_some(flag)
    });
    assert_eq!(
        strategy(&server),
        json!({"weights": {"blue": 70, "green": 30}})
    );
    // A stopped run cannot be stopped again: refused with the reason, exit status 1.
    let (code, printed) = weir_output(&server, &["stop", "shop/banner-green"]);
    assert_eq!(code, Some(1), "{printed}");
    assert!(printed.contains("no run is under way"), "{printed}");

    let (_db, server, _at) = set_up();
    wait_until("the entry applied", || {
        (strategy(&server)["weights"]["green"] == 30).then_some(())
    });
    let (code, printed) = weir_output(&server, &["stop", "shop/banner-green", "--rollback"]);
    assert_eq!(code, Some(0), "{printed}");
    let status = rollout_status(&server);
    assert_eq!(
        (
            &status["phase"],
            &status["stoppedBy"],
            &status["scheduleState"]
        ),
        (&json!("Failed"), &json!("user"), &json!("STOPPED")),
        "{status}"
    );
    wait_until("everyone back on control", || {
        (strategy(&server) == json!({"variation": "blue"})).then_some(())
    });
    assert_eq!(evaluate(&server, "user-1")["value"], "blue");
}

#[test]
fn a_waiting_schedule_can_be_edited_and_the_edit_is_validated() {
    // The database outlives the server: a directory removed under it would fail its writes.
    let db = TempDb::new();
    let server = Weir::serve(env!("CARGO_BIN_EXE_weir"), &db.path(), &[]);
    let created = post(&server, "/api/v1/flags", "application/yaml", BANNER);
    assert_eq!(created.status, 201, "{}", created.body);
    let first = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    let rollout = |entries: &[(jiff::Timestamp, u32)]| {
        let manual: Vec<String> = entries
            .iter()
            .map(|(at, weight)| format!("{{at: \"{at}\", weight: {weight}}}"))
            .collect();
        format!(
            "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: banner-green, namespace: shop}}
spec:
  target: {{kind: flag, flag: banner, control: blue, variation: green}}
  plan: {{schedule: {{manual: [{}]}}}}
",
            manual.join(", ")
        )
    };
    let applied = post(
        &server,
        "/api/v1/rollouts",
        "application/yaml",
        &rollout(&[(first, 10)]),
    );
    assert_eq!(applied.status, 201, "{}", applied.body);
    wait_until("the schedule waiting", || {
        (rollout_status(&server)["scheduleState"] == "WAITING").then_some(())
    });
    let put = |body: &str| {
        http::request(
            server.address("api"),
            "PUT",
            "/api/v1/rollouts/shop/banner-green",
            &[("Content-Type", "application/yaml")],
            body,
        )
        .unwrap()
    };
    // Two entries 4 minutes apart break the seed's rule: refused with the path, nothing changes.
    let too_close = put(&rollout(&[
        (first, 10),
        (first + jiff::SignedDuration::from_mins(4), 50),
    ]));
    assert_eq!(too_close.status, 400, "{}", too_close.body);
    assert!(
        too_close.body.contains("spec.plan.schedule.manual[1].at"),
        "{}",
        too_close.body
    );
    let stored = http::get(server.address("api"), "/api/v1/rollouts/shop/banner-green").unwrap();
    let stored: Value = serde_json::from_str(&stored.body).unwrap();
    assert_eq!(
        stored["spec"]["plan"]["schedule"]["manual"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    // A valid edit of the waiting schedule is taken: it still waits, with the new entries.
    let edited = put(&rollout(&[
        (first, 5),
        (first + jiff::SignedDuration::from_mins(10), 50),
    ]));
    assert_eq!(edited.status, 200, "{}", edited.body);
    let stored = http::get(server.address("api"), "/api/v1/rollouts/shop/banner-green").unwrap();
    let stored: Value = serde_json::from_str(&stored.body).unwrap();
    assert_eq!(
        stored["spec"]["plan"]["schedule"]["manual"][1]["weight"],
        50
    );
    assert_eq!(stored["status"]["scheduleState"], "WAITING", "{stored}");
    assert_eq!(
        strategy(&server),
        json!({"weights": {"blue": 90, "green": 10}})
    );
}
