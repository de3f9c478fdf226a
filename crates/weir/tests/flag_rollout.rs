//! Progressive rollouts of a flag (`target: {kind: flag}` with a `schedule` plan) on a real
//! `weir serve`: an entry fires from the engine's timer queue at its time, the flag's weights
//! change with it (as OFREP evaluations show), promotion gives everyone the new variation and a
//! rollback returns the audience to control.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
    let answer = http::get(server.address("api"), "/api/v1/flags/shop/banner").unwrap();
    serde_json::from_str::<Value>(&answer.body).unwrap()["spec"]["defaultStrategy"].clone()
}

/// What OFREP answers for user `key`.
fn evaluate(server: &Weir, key: &str) -> Value {
    let answer = post(
        server,
        "/ns/shop/ofrep/v1/evaluate/flags/banner",
        "application/json",
        &json!({"context": {"targetingKey": key}}).to_string(),
    );
    serde_json::from_str(&answer.body).unwrap()
}

fn rollout_status(server: &Weir) -> Value {
    let answer = http::get(server.address("api"), "/api/v1/rollouts/shop/banner-green").unwrap();
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
            "schedule: 1 of 1 entries done [######--------------] 30% on the new variation"
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
    assert_eq!(strategy(&server), json!({"variation": "green"}));
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
