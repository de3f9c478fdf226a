use std::sync::Arc;

use weir_core::document::{Document, load};
use weir_core::model::Flag;

use super::*;

fn flag(variations: &[&str]) -> Flag {
    let variations: Vec<String> = variations
        .iter()
        .map(|name| format!("{{name: \"{name}\", value: \"{name}\"}}"))
        .collect();
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Flag\nmetadata: {{name: checkout, namespace: shop}}\nspec:\n  variations: [{}]\n  defaultStrategy: {{variation: \"off\"}}\n",
        variations.join(", "),
    );
    match load(yaml.as_bytes()).into_iter().next() {
        Some(Ok(loaded)) => match loaded.document {
            Document::Flag(flag) => *flag,
            other => panic!("not a flag: {other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

fn outcome(requests: u64, errors: u64) -> Outcome {
    Outcome {
        requests,
        errors,
        ..Outcome::default()
    }
}

fn report(entries: &[(&str, Outcome)]) -> Report {
    entries
        .iter()
        .map(|(name, outcome)| (name.to_string(), outcome.clone()))
        .collect()
}

fn paths(errors: &[FieldError]) -> Vec<&str> {
    errors.iter().map(|error| error.path.as_str()).collect()
}

#[test]
fn reports_add_up_per_variation() {
    let counters = FlagCounters::for_flag(&flag(&["off", "on"]), None);
    counters
        .add(&report(&[
            ("on", outcome(120, 24)),
            ("off", outcome(300, 3)),
        ]))
        .unwrap();
    counters.add(&report(&[("on", outcome(80, 16))])).unwrap();
    let read = counters.read();
    assert_eq!((read["on"].requests, read["on"].errors), (200, 40));
    assert_eq!((read["off"].requests, read["off"].errors), (300, 3));
    assert_eq!(read["on"].exposures, 0);
}

#[test]
fn exposures_count_per_variation_and_ignore_unknown_names() {
    let counters = FlagCounters::for_flag(&flag(&["off", "on"]), None);
    for _ in 0..3 {
        counters.expose("on");
    }
    counters.expose("off");
    counters.expose("purple");
    let read = counters.read();
    assert_eq!(read["on"].exposures, 3);
    assert_eq!(read["off"].exposures, 1);
    assert_eq!(read.len(), 2);
}

#[test]
fn a_report_with_a_wrong_count_is_refused_whole_with_every_path() {
    let counters = FlagCounters::for_flag(&flag(&["off", "on"]), None);
    let bad = report(&[
        ("off", outcome(10, 11)),
        (
            "on",
            Outcome {
                requests: 2,
                errors: 0,
                slow: 3,
                latencies_ms: vec![1.0, f64::NAN, 2.0],
            },
        ),
    ]);
    let Err(Refused::Invalid(errors)) = counters.add(&bad) else {
        panic!("accepted");
    };
    assert_eq!(
        paths(&errors),
        [
            "variants.off.errors",
            "variants.on.slow",
            "variants.on.slow",
            "variants.on.latencyMs",
            "variants.on.latencyMs[1]",
        ],
        "{errors:?}"
    );
    assert!(
        errors[0].message.contains("at most the requests (10)"),
        "{errors:?}"
    );
    // Nothing of it was counted, not even the variation that was right.
    let fine_and_bad = report(&[("on", outcome(5, 1)), ("off", outcome(1, 2))]);
    assert!(counters.add(&fine_and_bad).is_err());
    assert!(counters.read().values().all(|counts| counts.requests == 0));
}

#[test]
fn an_unknown_variation_is_refused_naming_the_known_ones() {
    let counters = FlagCounters::for_flag(&flag(&["off", "on"]), None);
    let Err(Refused::UnknownVariations(errors)) =
        counters.add(&report(&[("on", outcome(5, 0)), ("purple", outcome(5, 0))]))
    else {
        panic!("accepted");
    };
    assert_eq!(paths(&errors), ["variants.purple"]);
    assert!(
        errors[0].message.contains("\"purple\"") && errors[0].message.contains("one of off, on"),
        "{errors:?}"
    );
    assert_eq!(counters.read()["on"].requests, 0);
}

#[test]
fn counts_are_bounded_per_report() {
    let huge = outcome(MAX_REQUESTS_PER_REPORT + 1, 0);
    assert_eq!(paths(&huge.check("variants.on")), ["variants.on.requests"]);
    assert!(
        outcome(MAX_REQUESTS_PER_REPORT, MAX_REQUESTS_PER_REPORT)
            .check("x")
            .is_empty()
    );
}

#[test]
fn every_latency_lands_in_the_bucket_that_holds_it() {
    let mut x = 0.001;
    while x < 3.0e6 {
        let bucket = bucket_of(x);
        assert!(
            lower_edge(bucket) <= x * (1.0 + 1e-12) && x < upper_edge(bucket) * (1.0 + 1e-12),
            "{x} in bucket {bucket} [{}, {})",
            lower_edge(bucket),
            upper_edge(bucket)
        );
        x *= 1.013;
    }
    assert_eq!(bucket_of(0.0), 0);
    assert_eq!(bucket_of(f64::INFINITY), LATENCY_BUCKETS - 1);
    // Edges 9% apart.
    let ratio = lower_edge(100) / lower_edge(99);
    assert!((ratio - 2f64.powf(1.0 / 8.0)).abs() < 1e-9, "{ratio}");
}

#[test]
fn slow_requests_are_the_reported_ones_and_the_latencies_above_the_bound() {
    let counters = FlagCounters::for_flag(&flag(&["off", "on"]), None);
    let latencies = vec![5.0, 20.0, 180.0, 320.0, 1500.0];
    counters
        .add(&report(&[
            (
                "on",
                Outcome {
                    requests: 5,
                    latencies_ms: latencies,
                    ..Outcome::default()
                },
            ),
            (
                "off",
                Outcome {
                    requests: 10,
                    slow: 2,
                    ..Outcome::default()
                },
            ),
        ]))
        .unwrap();
    let read = counters.read();
    assert_eq!(read["on"].latencies(), 5);
    assert_eq!(read["on"].slow_above(Some(250.0)), 2);
    assert_eq!(read["on"].slow_above(Some(10.0)), 4);
    // Without a bound only reported slow counts are known.
    assert_eq!(read["on"].slow_above(None), 0);
    assert_eq!(read["off"].slow_above(Some(250.0)), 2);
    // p99 of five is the largest: the upper edge of its bucket, within 9% above it.
    let p99 = read["on"].latency_quantile(0.99).unwrap();
    assert!((1500.0..1500.0 * 1.091).contains(&p99), "{p99}");
    assert_eq!(read["off"].latency_quantile(0.99), None);
}

#[test]
fn since_is_what_was_counted_in_between() {
    let counters = FlagCounters::for_flag(&flag(&["off", "on"]), None);
    counters.add(&report(&[("on", outcome(10, 1))])).unwrap();
    let before = counters.read();
    counters
        .add(&report(&[(
            "on",
            Outcome {
                requests: 3,
                errors: 2,
                latencies_ms: vec![1.0, 2.0, 400.0],
                ..Outcome::default()
            },
        )]))
        .unwrap();
    counters.expose("on");
    let delta = counters.read()["on"].since(&before["on"]);
    assert_eq!(
        (
            delta.requests,
            delta.errors,
            delta.exposures,
            delta.latencies()
        ),
        (3, 2, 1, 3)
    );
    assert_eq!(delta.slow_above(Some(300.0)), 1);
}

#[test]
fn counters_go_on_across_changes_of_the_flag() {
    let first = FlagCounters::for_flag(&flag(&["off", "on"]), None);
    first.add(&report(&[("on", outcome(7, 1))])).unwrap();
    first.expose("off");
    // Same variations (a change of weights): the very same counters.
    let same = FlagCounters::for_flag(&flag(&["off", "on"]), Some(&first));
    assert!(Arc::ptr_eq(&first, &same));
    // A variation added: the others keep their counts, the new one starts at zero.
    let more = FlagCounters::for_flag(&flag(&["off", "on", "red"]), Some(&first));
    let read = more.read();
    assert_eq!(read["on"].requests, 7);
    assert_eq!(read["off"].exposures, 1);
    assert_eq!(read["red"].requests, 0);
    // An evaluation still holding the old entry counts into the same variation.
    first.expose("off");
    assert_eq!(more.read()["off"].exposures, 2);
}

#[test]
fn a_reader_never_sees_half_a_report() {
    let counters = FlagCounters::for_flag(&flag(&["off", "on"]), None);
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let counters = Arc::clone(&counters);
            std::thread::spawn(move || {
                for _ in 0..2_000 {
                    counters
                        .add(&report(&[("on", outcome(1, 0)), ("off", outcome(1, 0))]))
                        .unwrap();
                }
            })
        })
        .collect();
    let mut reads = 0;
    while writers.iter().any(|writer| !writer.is_finished()) || reads == 0 {
        let read = counters.read();
        assert_eq!(read["on"].requests, read["off"].requests);
        reads += 1;
    }
    for writer in writers {
        writer.join().unwrap();
    }
    assert_eq!(counters.read()["on"].requests, 8_000);
}
