//! Several `weir serve` instances on one real PostgreSQL database (docs/SCALE-OUT.md): rollouts
//! survive instances killed with SIGKILL and stalled with SIGSTOP past their leases, every weight
//! step is committed exactly once, histories stay gap-free, a stalled instance's commits are
//! refused (fencing), and a command sent to any instance is executed once, by the owner.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_rng::SplitMix64;
use weir_testkit::http;
use weir_testkit::postgres::PgCluster;
use weir_testkit::process::Weir;
use weir_testkit::wait::{wait_until, wait_until_within};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// Short leases, so that takeovers happen within the test; renewed every third.
const LEASE_SECONDS: u64 = 2;

/// An instance of `weir serve` on `url`.
fn serve(url: &str) -> Weir {
    serve_with_lease(url, LEASE_SECONDS)
}

/// An instance of `weir serve` on `url` holding leases for `seconds`.
fn serve_with_lease(url: &str, seconds: u64) -> Weir {
    let lease = format!("{seconds}s");
    Weir::start(
        WEIR,
        &[
            "serve",
            "--db",
            url,
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
            "--lease-time",
            &lease,
        ],
    )
}

fn post(server: &Weir, path: &str, body: &str) -> http::Response {
    http::request(
        server.address("api"),
        "POST",
        path,
        &[("Content-Type", "application/yaml")],
        body,
    )
    .unwrap()
}

fn get_json(server: &Weir, path: &str) -> Option<Value> {
    let answer = http::get(server.address("api"), path)?;
    (answer.status == 200).then(|| serde_json::from_str(&answer.body).unwrap())
}

/// This instance's id, as its `/metrics` shows it (`weir_cluster_instance{instance=...}`).
fn instance_id(server: &Weir) -> String {
    wait_until("the instance's id in /metrics", || {
        let metrics = http::get(server.address("api"), "/metrics")?.body;
        let line = metrics
            .lines()
            .find(|line| line.starts_with("weir_cluster_instance{"))?;
        let start = line.find("instance=\"")? + "instance=\"".len();
        let end = start + line[start..].find('"')?;
        Some(line[start..end].to_owned())
    })
}

/// A counter of `/metrics` (0 when absent).
fn counter(server: &Weir, name: &str) -> f64 {
    let Some(answer) = http::get(server.address("api"), "/metrics") else {
        return 0.0;
    };
    answer
        .body
        .lines()
        .find(|line| {
            line.starts_with(&format!("{name}_total ")) || line.starts_with(&format!("{name} "))
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

fn flag(index: usize) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Flag
metadata: {{name: flag-{index}, namespace: chaos}}
spec:
  variations: [{{name: \"off\", value: false}}, {{name: \"on\", value: true}}]
  defaultStrategy: {{variation: \"off\"}}
"
    )
}

/// Fifty steps of 1 % a second: long enough for the kills and a stall that meets a commit to
/// happen while every rollout still runs, on a loaded machine too.
fn rollout(index: usize) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1
kind: Rollout
metadata: {{name: roll-{index}, namespace: chaos}}
spec:
  target: {{kind: flag, flag: flag-{index}, control: \"off\", variation: \"on\"}}
  plan: {{canary: {{stepWeight: 1, maxWeight: 50}}}}
  analysis: {{interval: 1s}}
"
    )
}

/// Every rollout of namespace `chaos`, by name, as one live instance shows them.
fn rollouts(server: &Weir) -> Option<BTreeMap<String, Value>> {
    let page = get_json(server, "/api/v1/rollouts?namespace=chaos&limit=500")?;
    Some(
        page["items"]
            .as_array()?
            .iter()
            .map(|item| {
                (
                    item["metadata"]["name"].as_str().unwrap().to_owned(),
                    item.clone(),
                )
            })
            .collect(),
    )
}

fn signal(server: &Weir, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &server.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} failed");
}

#[test]
fn rollouts_survive_killed_and_stalled_instances_with_every_step_committed_once() {
    const INSTANCES: usize = 3;
    const ROLLOUTS: usize = 30;
    let postgres = PgCluster::start();
    let url = postgres.database("chaos");
    let mut instances: Vec<Weir> = (0..INSTANCES).map(|_| serve(&url)).collect();
    for index in 0..ROLLOUTS {
        let created = post(&instances[index % INSTANCES], "/api/v1/flags", &flag(index));
        assert_eq!(created.status, 201, "{}", created.body);
    }
    for index in 0..ROLLOUTS {
        let created = post(
            &instances[index % INSTANCES],
            "/api/v1/rollouts",
            &rollout(index),
        );
        assert_eq!(created.status, 201, "{}", created.body);
    }

    let seed = std::env::var("WEIR_CHAOS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| jiff::Timestamp::now().as_nanosecond() as u64);
    eprintln!("chaos seed {seed} (WEIR_CHAOS_SEED={seed} repeats these moments)");
    let mut rng = SplitMix64::new(seed);
    let mut kills = 0;
    let mut stalls = 0;
    let mut fenced = 0.0;
    let deadline = Instant::now() + Duration::from_secs(300);
    let done = |instances: &[Weir]| -> bool {
        instances.iter().find_map(rollouts).is_some_and(|all| {
            all.len() == ROLLOUTS
                && all
                    .values()
                    .all(|item| item["status"]["phase"] == "Succeeded")
        })
    };
    // Random moments: a kill (and a restart) every 0.5-2 s until five were made, a stall
    // past the lease until one of them met a commit (fencing), then let the rollouts finish.
    while kills < 5 || fenced == 0.0 {
        assert!(
            Instant::now() < deadline,
            "chaos did not reach 5 kills and a fenced commit in 300 s (kills {kills}, stalls {stalls}); seed {seed}"
        );
        assert!(
            !done(&instances) || (kills >= 5 && fenced > 0.0),
            "every rollout finished before the chaos was complete (kills {kills}, fenced {fenced}); seed {seed}"
        );
        std::thread::sleep(Duration::from_millis(500 + rng.next_u64() % 1500));
        let victim = (rng.next_u64() % INSTANCES as u64) as usize;
        if kills < 5
            && (kills < 2 || stalls > 0 && fenced > 0.0 || rng.next_u64().is_multiple_of(2))
        {
            instances[victim].kill();
            instances[victim] = serve(&url);
            kills += 1;
            eprintln!(
                "chaos: killed instance {victim} with SIGKILL and restarted it ({kills} kills)"
            );
        } else if fenced == 0.0 {
            let before = counter(&instances[victim], "weir_cluster_fencing_rejections");
            // The counter only grows: the instance may have lost leases at an earlier stall.
            let lost_before = counter(&instances[victim], "weir_cluster_leases_lost");
            signal(&instances[victim], "-STOP");
            // Past its lease: the others take its rollouts over meanwhile.
            std::thread::sleep(Duration::from_secs(LEASE_SECONDS + 2));
            signal(&instances[victim], "-CONT");
            stalls += 1;
            // Whatever it was about to commit when it stopped is refused now.
            let after = wait_until("the stalled instance to answer again", || {
                http::get(instances[victim].address("api"), "/healthz")
                    .map(|_| counter(&instances[victim], "weir_cluster_fencing_rejections"))
            });
            // Its jobs due while it was stopped run within a second of waking.
            let settled = wait_until_within(Duration::from_secs(30), "its overdue jobs", || {
                let lost = counter(&instances[victim], "weir_cluster_leases_lost");
                (lost > lost_before || after > before)
                    .then(|| counter(&instances[victim], "weir_cluster_fencing_rejections"))
            });
            fenced += settled - before;
            eprintln!(
                "chaos: stalled instance {victim} past its lease ({stalls} stalls, {fenced} fenced commits)"
            );
        }
    }
    let finished = Instant::now() + Duration::from_secs(240);
    while !done(&instances) {
        assert!(
            Instant::now() < finished,
            "rollouts did not all succeed; seed {seed}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Every history: gap-free, one run, each weight step exactly once and in order.
    let expected: Vec<u64> = (1..=50).collect();
    for index in 0..ROLLOUTS {
        let events = get_json(
            &instances[0],
            &format!("/api/v1/rollouts/chaos/roll-{index}/events?limit=500"),
        )
        .unwrap();
        let events = events["items"].as_array().unwrap();
        let seqs: Vec<u64> = events
            .iter()
            .map(|event| event["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "roll-{index}: gaps"
        );
        let steps: Vec<u64> = events
            .iter()
            .filter(|event| event["reason"] == "Advanced")
            .map(|event| event["canaryWeight"].as_f64().unwrap().round() as u64)
            .collect();
        assert_eq!(steps, expected, "roll-{index}: weight steps; seed {seed}");
        let succeeded = events
            .iter()
            .filter(|event| event["reason"] == "Succeeded")
            .count();
        assert_eq!(succeeded, 1, "roll-{index}: one success; seed {seed}");
        // Run 0 is before the first run starts (the rollout's initialisation).
        assert!(
            events
                .iter()
                .all(|event| event["run"].as_u64().unwrap() <= 1),
            "roll-{index}: one run"
        );
    }
    eprintln!(
        "chaos: {kills} kills, {stalls} stalls, {fenced} fenced commits; every step once (seed {seed})"
    );
    assert!(kills >= 5 && fenced > 0.0);
}

#[test]
fn a_command_sent_to_another_instance_is_executed_once_by_the_owner() {
    let postgres = PgCluster::start();
    let url = postgres.database("forward");
    let first = serve(&url);
    let second = serve(&url);
    let flag = flag(0).replace("chaos", "fwd");
    let created = post(&first, "/api/v1/flags", &flag);
    assert_eq!(created.status, 201, "{}", created.body);
    // A hundred steps: still progressing when the command comes.
    let slow = rollout(0).replace("chaos", "fwd").replace(
        "stepWeight: 2, maxWeight: 40",
        "stepWeight: 1, maxWeight: 99",
    );
    let created = post(&first, "/api/v1/rollouts", &slow);
    assert_eq!(created.status, 201, "{}", created.body);
    let owner = wait_until("an owner for the rollout", || {
        let view = get_json(&first, "/api/v1/rollouts/fwd/roll-0")?;
        (view["status"]["phase"] == "Progressing")
            .then(|| view["owner"]["instance"].as_str().map(str::to_owned))
            .flatten()
    });
    let ids = [instance_id(&first), instance_id(&second)];
    let (owner_server, other) = if owner == ids[0] {
        (&first, &second)
    } else {
        assert_eq!(owner, ids[1], "the owner is one of the two instances");
        (&second, &first)
    };
    let sent = Instant::now();
    let paused = http::request(
        other.address("api"),
        "POST",
        "/api/v1/rollouts/fwd/roll-0/commands",
        &[("Content-Type", "application/json")],
        r#"{"command": "pause"}"#,
    )
    .unwrap();
    let took = sent.elapsed();
    assert_eq!(paused.status, 200, "{}", paused.body);
    let answered: Value = serde_json::from_str(&paused.body).unwrap();
    assert_eq!(answered["status"]["paused"], true, "{answered:#}");
    eprintln!(
        "a pause sent to the other instance was executed by the owner and answered in {took:?}"
    );
    // Executed once, by the owner: one Paused event, and the owner counted it.
    let events = get_json(owner_server, "/api/v1/rollouts/fwd/roll-0/events?limit=500").unwrap();
    let pauses = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["reason"] == "Paused")
        .count();
    assert_eq!(pauses, 1, "{events:#}");
    assert_eq!(counter(owner_server, "weir_cluster_executed_requests"), 1.0);
    assert_eq!(counter(other, "weir_cluster_forwarded_requests"), 1.0);
    // A command the owner refuses comes back refused, with the owner's reason.
    let again = http::request(
        other.address("api"),
        "POST",
        "/api/v1/rollouts/fwd/roll-0/commands",
        &[("Content-Type", "application/json")],
        r#"{"command": "pause"}"#,
    )
    .unwrap();
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("rejected"), "{}", again.body);
}

/// What OFREP on `server` answers for flag `flag-0` of namespace `fwd` and user `user`.
fn evaluate(server: &Weir, user: &str) -> Option<String> {
    let answer = http::request(
        server.address("api"),
        "POST",
        "/ns/fwd/ofrep/v1/evaluate/flags/flag-0",
        &[("Content-Type", "application/json")],
        &format!(r#"{{"context": {{"targetingKey": "{user}"}}}}"#),
    )?;
    let body: Value = serde_json::from_str(&answer.body).ok()?;
    body["variant"].as_str().map(str::to_owned)
}

#[test]
fn every_instance_shows_every_rollout_and_a_dead_owner_until_another_takes_over() {
    let postgres = PgCluster::start();
    let url = postgres.database("follow");
    let mut first = serve(&url);
    let second = serve(&url);
    let flag = flag(0).replace("chaos", "fwd");
    let created = post(&first, "/api/v1/flags", &flag);
    assert_eq!(created.status, 201, "{}", created.body);
    let mut watch = http::open_stream(
        second.address("api"),
        "/api/v1/watch?namespace=fwd",
        &[("Accept", "text/event-stream")],
    )
    .unwrap();
    assert_eq!(watch.status, 200);
    let slow = rollout(0).replace("chaos", "fwd").replace(
        "stepWeight: 2, maxWeight: 40",
        "stepWeight: 1, maxWeight: 99",
    );
    let created = post(&first, "/api/v1/rollouts", &slow);
    assert_eq!(created.status, 201, "{}", created.body);
    let owner = instance_id(&first);
    let view = get_json(&second, "/api/v1/rollouts/fwd/roll-0").unwrap();
    assert_eq!(view["owner"]["instance"], owner.as_str(), "{view:#}");

    // The other instance's watch stream carries the owner's steps, events included.
    assert!(
        watch.read_until(r#""reason":"Advanced""#),
        "no step relayed: {}",
        watch.received
    );
    // Its OFREP serves the weights the owner's rollout has in force (the stored flag still
    // says "off" for everyone).
    wait_until("the other instance to serve the rollout's weights", || {
        (0..200)
            .any(|user| evaluate(&second, &format!("user-{user}")).as_deref() == Some("on"))
            .then_some(())
    });

    // The owner dies: the survivor shows it as the owner, its lease ageing, until it takes over.
    first.kill();
    let stale = wait_until("the dead owner shown with its lease ageing", || {
        let view = get_json(&second, "/api/v1/rollouts/fwd/roll-0")?;
        (view["owner"]["instance"] == owner.as_str()
            && view["owner"]["leaseAgeSeconds"].as_f64()? >= 1.0)
            .then_some(view)
    });
    let weight_then = stale["status"]["canaryWeight"].as_f64().unwrap();
    let survivor = instance_id(&second);
    wait_until("the survivor to take over and step on", || {
        let view = get_json(&second, "/api/v1/rollouts/fwd/roll-0")?;
        (view["owner"]["instance"] == survivor.as_str()
            && view["owner"]["epoch"].as_u64()? >= 2
            && view["status"]["canaryWeight"].as_f64()? > weight_then)
            .then_some(())
    });
    assert!(counter(&second, "weir_cluster_takeovers") >= 1.0);
    assert_eq!(counter(&second, "weir_cluster_leases_held"), 1.0);
    // `weir get` shows the owner and the age of its lease.
    let listed = weir_testkit::process::output(WEIR, &["get", "--server", &second.url("api")]);
    let table = String::from_utf8_lossy(&listed.stdout);
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default();
    assert!(
        header.contains("OWNER") && header.contains("LEASE"),
        "{table}"
    );
    let row = lines
        .find(|line| line.contains("roll-0"))
        .unwrap_or_default();
    assert!(row.contains(&survivor), "{table}");
}

#[test]
fn a_stopped_instance_gives_its_rollouts_back_at_once() {
    // Leases of five minutes: only a release, not an expiry, hands the rollout over within the
    // wait's deadline.
    let postgres = PgCluster::start();
    let url = postgres.database("leave");
    let mut first = serve_with_lease(&url, 300);
    let second = serve_with_lease(&url, 300);
    let flag = flag(0).replace("chaos", "fwd");
    assert_eq!(post(&first, "/api/v1/flags", &flag).status, 201);
    let slow = rollout(0).replace("chaos", "fwd").replace(
        "stepWeight: 2, maxWeight: 40",
        "stepWeight: 1, maxWeight: 99",
    );
    assert_eq!(post(&first, "/api/v1/rollouts", &slow).status, 201);
    let leaving = instance_id(&first);
    let view = get_json(&second, "/api/v1/rollouts/fwd/roll-0").unwrap();
    assert_eq!(view["owner"]["instance"], leaving.as_str(), "{view:#}");
    signal(&first, "-TERM");
    assert!(first.wait().success(), "SIGTERM ends weir serve cleanly");
    let staying = instance_id(&second);
    wait_until("the other instance to take the rollout over", || {
        let view = get_json(&second, "/api/v1/rollouts/fwd/roll-0")?;
        (view["owner"]["instance"] == staying.as_str()).then_some(())
    });
    assert_eq!(
        counter(&second, "weir_cluster_takeovers"),
        0.0,
        "a release, not a takeover"
    );
    assert!(counter(&second, "weir_cluster_claims") >= 1.0);
}
