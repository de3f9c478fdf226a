//! `weir operator` reading the Secret a Flagger MetricTemplate names (`secretRef`) from the
//! cluster: the in-memory API server, the real kubectl (the Secret made as a user makes one,
//! `kubectl create secret generic --from-literal`), and weir-testkit's Datadog double, which
//! checks `DD-API-KEY` and `DD-APPLICATION-KEY` on every query, so what it receives shows which
//! values weir read. One rollout lives through the Secret's life: missing (the rollout refused,
//! naming it), created (the rollout runs, queried with its values), changed (the next query
//! carries the new value), stripped of a key and deleted (the history says which), created again
//! (the canary promoted). No value appears in the operator's output, the history, the status or
//! the Kubernetes Events.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};
use weir_testkit::fixtures::runtime;
use weir_testkit::kube_cluster::{
    Cluster, NAMESPACE, rollout_status, rollout_yaml_with_analysis, text,
};
use weir_testkit::metric_doubles::MetricDouble;
use weir_testkit::process::Weir;
use weir_testkit::receiver::Receiver;
use weir_testkit::wait::wait_until;

const API_KEY: &str = "dd-api-cluster-0123456789";
const APP_KEY: &str = "dd-app-cluster-9876543210";
const ROTATED_API_KEY: &str = "dd-api-rotated-5555555555";

/// Secret `dd-creds` with `literals` (`key=value`), made as `kubectl create secret generic`
/// makes it, then applied (so a later apply changes it as a user's would).
fn apply_secret(cluster: &Cluster, literals: &[&str]) {
    apply_named_secret(cluster, "dd-creds", literals);
}

/// [`apply_secret`] for Secret `name`.
fn apply_named_secret(cluster: &Cluster, name: &str, literals: &[&str]) {
    let mut args = vec!["create", "secret", "generic", name, "-n", NAMESPACE];
    let flags: Vec<String> = literals
        .iter()
        .map(|literal| format!("--from-literal={literal}"))
        .collect();
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--dry-run=client", "-o", "yaml"]);
    let made = cluster.kubectl(&args);
    assert!(made.status.success(), "{}", text(&made.stderr));
    cluster.apply(&text(&made.stdout));
}

/// The history of `podinfo` as text, one event a line.
fn history_text(cluster: &Cluster, operator: &Weir) -> Vec<String> {
    cluster
        .history(operator, "podinfo")
        .iter()
        .map(Value::to_string)
        .collect()
}

/// Waits for a history event after the first `after` that contains every one of `needles`;
/// returns it and the history's length.
fn wait_for_event(
    cluster: &Cluster,
    operator: &Weir,
    after: usize,
    what: &str,
    needles: &[&str],
) -> (String, usize) {
    wait_until(what, || {
        let history = history_text(cluster, operator);
        history
            .iter()
            .skip(after)
            .find(|event| needles.iter().all(|needle| event.contains(needle)))
            .map(|event| (event.clone(), history.len()))
    })
}

#[test]
fn a_metric_templates_secret_is_read_from_the_cluster_followed_when_it_changes_and_missed_aloud() {
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    println!("with {}", cluster.install_flagger_crd());
    let datadog = MetricDouble::datadog(API_KEY, APP_KEY);
    // Above the threshold: every check fails on a value read with the Secret's keys, and the
    // run holds at its first step (the threshold of failed checks is out of reach).
    datadog.serve(Some(5.0));
    let template = json!({
        "apiVersion": "flagger.app/v1beta1",
        "kind": "MetricTemplate",
        "metadata": {"name": "error-percentage", "namespace": NAMESPACE},
        "spec": {
            "provider": {"type": "datadog", "address": datadog.url(), "secretRef": {"name": "dd-creds"}},
            "query": "100 * sum:trace.http.request.errors{service:{{ target }}}.as_count() / sum:trace.http.request.hits{service:{{ target }}}.as_count()",
        }
    });
    cluster.apply(&serde_json::to_string(&template).unwrap());
    cluster.apply(&rollout_yaml_with_analysis(
        "{canary: {stepWeights: [10, 50]}}",
        "{interval: 1s, threshold: 100000, evidence: {promoteOn: noHarm}, metrics: [{name: error-percentage, interval: 1m, templateRef: {name: error-percentage}, thresholdRange: {max: 1}}]}",
    ));
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let operator = Weir::start_capturing_stderr(
        env!("CARGO_BIN_EXE_weir"),
        &[
            "operator",
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
            "--namespace",
            NAMESPACE,
        ],
        &[("KUBECONFIG", kubeconfig.as_str())],
    );

    // No Secret yet: the rollout is refused, naming it.
    let refused = wait_until("the rollout refused for its missing Secret", || {
        rollout_status(&cluster.server)["message"]
            .as_str()
            .filter(|message| message.starts_with("refused"))
            .map(str::to_string)
    });
    assert!(refused.contains("Secret shop/dd-creds"), "{refused}");
    println!("without the Secret: {refused}");

    // Created: the rollout is applied again and runs, queried with the Secret's values.
    apply_secret(
        &cluster,
        &[
            &format!("datadog_api_key={API_KEY}"),
            &format!("datadog_application_key={APP_KEY}"),
        ],
    );
    cluster.wait_initialised();
    wait_until("the rollout initialised", || {
        (rollout_status(&cluster.server)["phase"] == "Initialized").then_some(())
    });
    cluster.new_revision("2");
    let (checked, length) = wait_for_event(
        &cluster,
        &operator,
        0,
        "a check on the value Datadog answered",
        &["error-percentage", "\"value\":5"],
    );
    let answered = datadog
        .seen()
        .into_iter()
        .find(|seen| seen.status == 200)
        .expect("an answered query");
    assert_eq!(answered.header("DD-API-KEY"), Some(API_KEY));
    assert_eq!(answered.header("DD-APPLICATION-KEY"), Some(APP_KEY));
    println!(
        "with the Secret: Datadog answered {} {} ({:?}); the history: {checked}",
        answered.method, answered.path, answered.query
    );

    // Changed: the next query carries the new key (which this Datadog refuses).
    apply_secret(
        &cluster,
        &[
            &format!("datadog_api_key={ROTATED_API_KEY}"),
            &format!("datadog_application_key={APP_KEY}"),
        ],
    );
    let rotated = wait_until("a query with the rotated key", || {
        datadog
            .seen()
            .into_iter()
            .find(|seen| seen.header("DD-API-KEY") == Some(ROTATED_API_KEY))
    });
    assert_eq!(rotated.status, 403);
    let (forbidden, length) = wait_for_event(
        &cluster,
        &operator,
        length,
        "the refused query in the history",
        &["error-percentage", "403"],
    );
    println!("after the change: Datadog answered 403; the history: {forbidden}");

    // A key removed: the history names the Secret and the key.
    apply_secret(&cluster, &[&format!("datadog_api_key={API_KEY}")]);
    let (keyless, length) = wait_for_event(
        &cluster,
        &operator,
        length,
        "the missing key in the history",
        &["dd-creds", "datadog_application_key"],
    );
    println!("without a key: {keyless}");

    // Deleted: forgotten, and the history says so.
    let deleted = cluster.kubectl(&["delete", "secret", "dd-creds", "-n", NAMESPACE]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let (missing, _) = wait_for_event(
        &cluster,
        &operator,
        length,
        "the deleted Secret in the history",
        &["dd-creds", "not loaded"],
    );
    println!("deleted: {missing}");

    // Created again, and the canary healthy: promoted.
    datadog.serve(Some(0.2));
    apply_secret(
        &cluster,
        &[
            &format!("datadog_api_key={API_KEY}"),
            &format!("datadog_application_key={APP_KEY}"),
        ],
    );
    let status = wait_until("the canary promoted", || {
        let status = rollout_status(&cluster.server);
        (status["phase"] == "Succeeded").then_some(status)
    });
    println!(
        "promoted: {}; queries Datadog received: {} ({} answered 200, {} refused 403)",
        status["message"],
        datadog.seen().len(),
        datadog
            .seen()
            .iter()
            .filter(|seen| seen.status == 200)
            .count(),
        datadog
            .seen()
            .iter()
            .filter(|seen| seen.status == 403)
            .count(),
    );

    // No value anywhere: the operator's output, the history, the Rollout, the Events.
    let mut everything = operator.lines();
    everything.extend(operator.stderr_lines());
    everything.extend(history_text(&cluster, &operator));
    everything.push(
        cluster
            .server
            .get("weir.dev/v1alpha1", "Rollout", NAMESPACE, "podinfo")
            .unwrap()
            .to_string(),
    );
    everything.extend(
        cluster
            .server
            .list("v1", "Event", NAMESPACE)
            .iter()
            .map(Value::to_string),
    );
    for value in [API_KEY, APP_KEY, ROTATED_API_KEY] {
        let leaks: Vec<&String> = everything
            .iter()
            .filter(|line| line.contains(value))
            .collect();
        assert!(leaks.is_empty(), "{value} printed: {leaks:#?}");
    }
    println!(
        "{} lines of output, history, status and Events hold no Secret value",
        everything.len()
    );
    drop(operator);
}

/// A Flagger AlertProvider whose Slack URL is in a Secret of the cluster (`secretRef`, key
/// `address`): the rollout waits for the Secret, then the alerts of its run go to the URL the
/// Secret holds, and the URL's path (the webhook's token) appears nowhere else.
#[test]
fn an_alert_providers_secret_is_read_from_the_cluster() {
    const TOKEN_PATH: &str = "/services/T0WEIR/B0WEIR/secret-webhook-token";
    let runtime = runtime();
    let slack = runtime.block_on(Receiver::answering(200));
    let cluster = Cluster::new(env!("CARGO_BIN_EXE_weir"));
    println!("with {}", cluster.install_flagger_crd());
    let provider = json!({
        "apiVersion": "flagger.app/v1beta1",
        "kind": "AlertProvider",
        "metadata": {"name": "on-call", "namespace": NAMESPACE},
        "spec": {"type": "slack", "channel": "deploys", "secretRef": {"name": "slack-url"}}
    });
    cluster.apply(&serde_json::to_string(&provider).unwrap());
    cluster.apply(&rollout_yaml_with_analysis(
        "{canary: {stepWeights: [50]}}",
        "{interval: 1s, evidence: {promoteOn: noHarm}, alerts: [{name: on-call, severity: info, providerRef: {name: on-call}}]}",
    ));
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let operator = Weir::start_capturing_stderr(
        env!("CARGO_BIN_EXE_weir"),
        &[
            "operator",
            "--listen",
            "127.0.0.1:0",
            "--output",
            "json",
            "--namespace",
            NAMESPACE,
        ],
        &[("KUBECONFIG", kubeconfig.as_str())],
    );
    let refused = wait_until(
        "the rollout refused for its provider's missing Secret",
        || {
            rollout_status(&cluster.server)["message"]
                .as_str()
                .filter(|message| message.starts_with("refused"))
                .map(str::to_string)
        },
    );
    assert!(refused.contains("Secret shop/slack-url"), "{refused}");
    println!("without the Secret: {refused}");

    apply_named_secret(
        &cluster,
        "slack-url",
        &[&format!("address={}", slack.url(TOKEN_PATH))],
    );
    cluster.wait_initialised();
    cluster.new_revision("2");
    wait_until("the canary promoted", || {
        (rollout_status(&cluster.server)["phase"] == "Succeeded").then_some(())
    });
    let posted = wait_until("an alert of the run at the Secret's URL", || {
        slack.received().into_iter().find(|received| {
            received.json["text"]
                .as_str()
                .is_some_and(|text| text.contains("podinfo"))
        })
    });
    println!(
        "Slack received: {} {} {}",
        posted.method, posted.path, posted.json["text"]
    );
    assert_eq!(
        (posted.method.as_str(), posted.path.as_str()),
        ("POST", TOKEN_PATH)
    );
    assert_eq!(posted.json["channel"], "deploys", "{}", posted.json);

    let mut everything = operator.lines();
    everything.extend(operator.stderr_lines());
    everything.extend(history_text(&cluster, &operator));
    let leaks: Vec<&String> = everything
        .iter()
        .filter(|line| line.contains("secret-webhook-token"))
        .collect();
    assert!(leaks.is_empty(), "the webhook's token printed: {leaks:#?}");
}
