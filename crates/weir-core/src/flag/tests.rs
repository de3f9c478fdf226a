#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::semver::{compare, parse};
use super::*;
use crate::model::FlagWeight;

/// A flag from its spec in YAML (flow style is fine).
fn flag(spec_yaml: &str) -> Flag {
    let yaml = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: Flag\nmetadata: {{name: new-checkout}}\nspec:\n{spec_yaml}"
    );
    serde_saphyr::from_str(&yaml).unwrap_or_else(|error| panic!("{error}\n{yaml}"))
}

fn compiled(spec_yaml: &str) -> CompiledFlag {
    let flag = flag(spec_yaml);
    let errors = crate::validate::flag(&flag);
    assert!(errors.is_empty(), "test flag is invalid: {errors:?}");
    CompiledFlag::new(flag)
}

fn context(key: Option<&str>, attributes: Value) -> EvaluationContext {
    let Value::Object(attributes) = attributes else {
        panic!("attributes are an object");
    };
    EvaluationContext {
        targeting_key: key.map(str::to_string),
        attributes,
    }
}

fn user(key: &str) -> EvaluationContext {
    context(Some(key), json!({}))
}

fn eval(flag: &CompiledFlag, context: &EvaluationContext) -> (String, Reason) {
    let evaluation = flag.evaluate(context).unwrap();
    (evaluation.variant, evaluation.reason)
}

fn served(variant: &str, reason: Reason) -> (String, Reason) {
    (variant.to_string(), reason)
}

const BOOL_VARIATIONS: &str =
    "  variations: [{name: \"off\", value: false}, {name: \"on\", value: true}]\n";

/// A flag with one clause `attribute op values` that serves "on", "off" otherwise.
fn one_clause(attribute: &str, op: &str, values: &str) -> CompiledFlag {
    compiled(&format!(
        "{BOOL_VARIATIONS}  rules: [{{clauses: [{{attribute: \"{attribute}\", op: {op}, values: {values}}}], variation: \"on\"}}]\n  defaultStrategy: {{variation: \"off\"}}\n"
    ))
}

fn holds(flag: &CompiledFlag, attributes: Value) -> bool {
    let (variant, _) = eval(flag, &context(Some("someone"), attributes));
    variant == "on"
}

// === order and reasons ===

#[test]
fn a_disabled_flag_serves_its_off_variation_or_the_first() {
    let with_off = compiled(&format!(
        "  enabled: false\n{BOOL_VARIATIONS}  offVariation: \"on\"\n  targets: {{\"off\": [alice]}}\n  defaultStrategy: {{weights: {{\"on\": 50, \"off\": 50}}}}\n"
    ));
    // Disabled comes before targets and needs no targeting key even though the flag splits.
    assert_eq!(
        eval(&with_off, &user("alice")),
        served("on", Reason::Disabled)
    );
    assert_eq!(
        eval(&with_off, &EvaluationContext::default()),
        served("on", Reason::Disabled)
    );
    let without_off = compiled(&format!(
        "  enabled: false\n{BOOL_VARIATIONS}  defaultStrategy: {{variation: \"on\"}}\n"
    ));
    assert_eq!(
        eval(&without_off, &user("bob")),
        served("off", Reason::Disabled)
    );
    let evaluation = without_off.evaluate(&user("bob")).unwrap();
    assert_eq!(evaluation.value, json!(false));
    assert_eq!(evaluation.reason.as_str(), "DISABLED");
}

#[test]
fn targets_come_before_rules_and_rules_before_the_default() {
    let flag = compiled(&format!(
        "{BOOL_VARIATIONS}  targets: {{\"off\": [alice]}}\n  rules:\n    - clauses: [{{attribute: country, op: in, values: [DE, FR]}}]\n      variation: \"on\"\n  defaultStrategy: {{variation: \"off\"}}\n"
    ));
    // alice is in DE, but her target wins.
    assert_eq!(
        eval(&flag, &context(Some("alice"), json!({"country": "DE"}))),
        served("off", Reason::TargetingMatch)
    );
    assert_eq!(
        eval(&flag, &context(Some("bob"), json!({"country": "FR"}))),
        served("on", Reason::TargetingMatch)
    );
    // Targeted flag, nothing matched: DEFAULT, not STATIC.
    assert_eq!(
        eval(&flag, &context(Some("bob"), json!({"country": "US"}))),
        served("off", Reason::Default)
    );
    // Without a targeting key, targets are skipped and rules still apply.
    assert_eq!(
        eval(&flag, &context(None, json!({"country": "DE"}))),
        served("on", Reason::TargetingMatch)
    );
}

#[test]
fn the_first_matching_rule_wins_and_its_clauses_are_anded() {
    let flag = compiled(
        "  variations: [{name: a, value: a}, {name: b, value: b}, {name: c, value: c}]\n  rules:\n    - name: both\n      clauses: [{attribute: country, op: equals, values: [DE]}, {attribute: plan, op: equals, values: [pro]}]\n      variation: a\n    - name: either-country\n      clauses: [{attribute: country, op: in, values: [DE, FR]}]\n      variation: b\n  defaultStrategy: {variation: c}\n",
    );
    let ask = |attributes| eval(&flag, &context(Some("u"), attributes)).0;
    assert_eq!(ask(json!({"country": "DE", "plan": "pro"})), "a");
    assert_eq!(ask(json!({"country": "DE", "plan": "free"})), "b");
    assert_eq!(ask(json!({"country": "FR", "plan": "pro"})), "b");
    assert_eq!(ask(json!({"plan": "pro"})), "c");
}

#[test]
fn a_flag_without_targeting_is_static_and_a_split_is_split() {
    let untargeted = compiled(&format!(
        "{BOOL_VARIATIONS}  targets: {{\"on\": []}}\n  defaultStrategy: {{variation: \"on\"}}\n"
    ));
    assert_eq!(eval(&untargeted, &user("x")), served("on", Reason::Static));
    // A static flag needs no targeting key.
    assert_eq!(
        eval(&untargeted, &EvaluationContext::default()),
        served("on", Reason::Static)
    );
    assert_eq!(Reason::Static.as_str(), "STATIC");

    let split = compiled(&format!(
        "{BOOL_VARIATIONS}  defaultStrategy: {{weights: {{\"on\": 50, \"off\": 50}}}}\n"
    ));
    assert_eq!(eval(&split, &user("x")).1, Reason::Split);
    let rule_split = compiled(&format!(
        "{BOOL_VARIATIONS}  rules: [{{clauses: [{{attribute: beta, op: equals, values: [true]}}], weights: {{\"on\": 100}}}}]\n  defaultStrategy: {{variation: \"off\"}}\n"
    ));
    assert_eq!(
        eval(&rule_split, &context(Some("x"), json!({"beta": true}))),
        served("on", Reason::Split)
    );
    assert_eq!(
        eval(&rule_split, &context(Some("x"), json!({"beta": false}))),
        served("off", Reason::Default)
    );
}

#[test]
fn the_targeting_key_may_come_as_an_attribute() {
    let flag = compiled(&format!(
        "{BOOL_VARIATIONS}  targets: {{\"on\": [alice]}}\n  defaultStrategy: {{variation: \"off\"}}\n"
    ));
    assert_eq!(
        eval(&flag, &context(None, json!({"targetingKey": "alice"}))),
        served("on", Reason::TargetingMatch)
    );
}

// === attributes ===

#[test]
fn a_missing_or_null_attribute_never_holds() {
    for op in ["equals", "startsWith", "matches", "semverGte"] {
        let flag = one_clause("version", op, "[\"1.0.0\"]");
        assert!(holds(&flag, json!({"version": "1.0.0"})), "{op}");
        assert!(!holds(&flag, json!({})), "{op}");
        assert!(!holds(&flag, json!({"version": null})), "{op}");
    }
    // Even "less than" does not hold for a number that is not there.
    let lt = one_clause("age", "lt", "[100]");
    assert!(!holds(&lt, json!({})));
    // And targetingKey without a key.
    let key = one_clause("targetingKey", "startsWith", "[\"\"]");
    assert_eq!(
        eval(&key, &EvaluationContext::default()),
        served("off", Reason::Default)
    );
    assert_eq!(eval(&key, &user("k")), served("on", Reason::TargetingMatch));
}

#[test]
fn dotted_attributes_read_nested_objects_after_top_level_keys() {
    let flag = one_clause("user.plan", "equals", "[\"pro\"]");
    assert!(holds(&flag, json!({"user": {"plan": "pro"}})));
    assert!(!holds(&flag, json!({"user": {"plan": "free"}})));
    assert!(!holds(&flag, json!({"user": "pro"})));
    assert!(!holds(&flag, json!({"user": {"plan": {"tier": "pro"}}})));
    // A top-level key with a dot in its name is read first.
    assert!(holds(
        &flag,
        json!({"user.plan": "pro", "user": {"plan": "free"}})
    ));
    let deep = one_clause("a.b.c", "gt", "[1]");
    assert!(holds(&deep, json!({"a": {"b": {"c": 2}}})));
}

// === clause operators ===

#[test]
fn equals_compares_strings_numbers_and_booleans() {
    let text = one_clause("country", "equals", "[DE]");
    assert!(holds(&text, json!({"country": "DE"})));
    assert!(!holds(&text, json!({"country": "de"})));

    let number = one_clause("level", "equals", "[3]");
    assert!(holds(&number, json!({"level": 3})));
    assert!(holds(&number, json!({"level": 3.0})));
    assert!(holds(&number, json!({"level": "3"})), "numeric string");
    assert!(holds(&number, json!({"level": "3.0"})), "numeric string");
    assert!(!holds(&number, json!({"level": "three"})));
    assert!(!holds(&number, json!({"level": true})));

    // A numeric string value against a number attribute compares as numbers too...
    let numeric_text = one_clause("level", "equals", "[\"3\"]");
    assert!(holds(&numeric_text, json!({"level": 3})));
    // ...but two strings compare as strings.
    assert!(!holds(&numeric_text, json!({"level": "3.0"})));

    // Integers beyond 2^53 compare exactly.
    let big = one_clause("id", "equals", "[9007199254740993]");
    assert!(holds(&big, json!({"id": 9_007_199_254_740_993_u64})));
    assert!(!holds(&big, json!({"id": 9_007_199_254_740_992_u64})));

    let boolean = one_clause("beta", "equals", "[true]");
    assert!(holds(&boolean, json!({"beta": true})));
    assert!(!holds(&boolean, json!({"beta": false})));
    assert!(!holds(&boolean, json!({"beta": "true"})));

    let any = one_clause("country", "in", "[DE, FR, 7]");
    assert!(holds(&any, json!({"country": "FR"})));
    assert!(holds(&any, json!({"country": 7})));
    assert!(!holds(&any, json!({"country": "US"})));
    assert!(!holds(&any, json!({"country": ["DE"]})));
}

#[test]
fn starts_with_and_ends_with_compare_strings() {
    let starts = one_clause("email", "startsWith", "[admin, root]");
    assert!(holds(&starts, json!({"email": "root@example.com"})));
    assert!(!holds(&starts, json!({"email": "user@example.com"})));
    let ends = one_clause("email", "endsWith", "[\"@example.com\"]");
    assert!(holds(&ends, json!({"email": "a@example.com"})));
    assert!(!holds(&ends, json!({"email": "a@example.org"})));
    let number = one_clause("zip", "startsWith", "[\"10\"]");
    assert!(!holds(&number, json!({"zip": 10115})), "strings only");
}

#[test]
fn matches_is_an_unanchored_regex_and_an_invalid_one_never_matches() {
    let flag = one_clause("build", "matches", "[\"^release-\\\\d+$\", \"hotfix\"]");
    assert!(holds(&flag, json!({"build": "release-42"})));
    assert!(!holds(&flag, json!({"build": "release-x"})));
    assert!(
        holds(&flag, json!({"build": "a-hotfix-branch"})),
        "unanchored"
    );
    assert!(!holds(&flag, json!({"build": 42})));
    // Validation refuses it; evaluation of an unvalidated flag just never matches it.
    let invalid = CompiledFlag::new(flag_with_clause("build", "matches", "[\"(unclosed\"]"));
    assert!(!holds(&invalid, json!({"build": "(unclosed"})));
}

fn flag_with_clause(attribute: &str, op: &str, values: &str) -> Flag {
    flag(&format!(
        "{BOOL_VARIATIONS}  rules: [{{clauses: [{{attribute: \"{attribute}\", op: {op}, values: {values}}}], variation: \"on\"}}]\n  defaultStrategy: {{variation: \"off\"}}\n"
    ))
}

#[test]
fn number_operators_compare_numbers_and_numeric_strings() {
    let cases = [
        ("gt", 18, [false, false, true]),
        ("gte", 18, [false, true, true]),
        ("lt", 18, [true, false, false]),
        ("lte", 18, [true, true, false]),
    ];
    for (op, bound, expected) in cases {
        let flag = one_clause("age", op, &format!("[{bound}]"));
        for (age, expected) in [17, 18, 19].into_iter().zip(expected) {
            assert_eq!(
                holds(&flag, json!({"age": age})),
                expected,
                "{age} {op} {bound}"
            );
            assert_eq!(
                holds(&flag, json!({"age": age.to_string()})),
                expected,
                "\"{age}\" {op} {bound}"
            );
        }
        assert!(!holds(&flag, json!({"age": "old"})), "{op}");
        assert!(!holds(&flag, json!({"age": "NaN"})), "{op}");
        assert!(!holds(&flag, json!({"age": true})), "{op}");
    }
    let fractional = one_clause("score", "gte", "[0.5, 100]");
    assert!(holds(&fractional, json!({"score": 0.75})));
    assert!(holds(&fractional, json!({"score": "1e3"})));
    assert!(!holds(&fractional, json!({"score": 0.25})));
}

#[test]
fn semver_precedence_follows_the_specification() {
    // SemVer 2.0.0, section 11's example, in ascending order.
    let ascending = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "2.0.0",
        "10.0.0",
    ];
    for (i, a) in ascending.iter().enumerate() {
        for (j, b) in ascending.iter().enumerate() {
            let (a, b) = (parse(a).unwrap(), parse(b).unwrap());
            assert_eq!(compare(&a, &b), i.cmp(&j), "{a:?} vs {b:?}");
        }
    }
    let cmp = |a: &str, b: &str| compare(&parse(a).unwrap(), &parse(b).unwrap());
    assert_eq!(cmp("v1.2.3", "1.2.3"), Ordering::Equal, "leading v");
    assert_eq!(
        cmp("1.2.3+build.5", "1.2.3+other"),
        Ordering::Equal,
        "build ignored"
    );
    assert_eq!(cmp("1.0.0-rc.1+b", "1.0.0-rc.1"), Ordering::Equal);
    assert_eq!(
        cmp("1.0.0-x-y", "1.0.0-x"),
        Ordering::Greater,
        "'-' inside pre-release"
    );
    assert_eq!(
        cmp("1.0.0-99999999999999999999999", "1.0.0-100"),
        Ordering::Greater,
        "numeric identifiers of any length"
    );
    for invalid in [
        "",
        "1",
        "1.2",
        "1.2.3.4",
        "01.2.3",
        "1.02.3",
        "1.2.3-",
        "1.2.3-01",
        "1.2.3-a..b",
        "1.2.3+",
        "1.2.3+a..b",
        "1.2.3-a_b",
        "a.b.c",
        "v",
        "vv1.2.3",
        " 1.2.3",
        "1.2.-3",
        "18446744073709551616.0.0",
    ] {
        assert!(parse(invalid).is_none(), "{invalid:?} is not a version");
    }
    assert!(parse("1.2.3-0").is_some());
    assert!(
        parse("1.2.3-0a").is_some(),
        "alphanumeric, so leading zero is fine"
    );
    assert!(
        parse("1.2.3+001").is_some(),
        "build identifiers may have leading zeros"
    );
}

#[test]
fn semver_operators_compare_versions_and_ignore_non_versions() {
    let at_least = one_clause("app", "semverGte", "[\"2.0.0-rc.1\"]");
    assert!(holds(&at_least, json!({"app": "2.0.0-rc.2"})));
    assert!(holds(&at_least, json!({"app": "2.0.0"})));
    assert!(holds(&at_least, json!({"app": "v2.0.0-rc.1+build"})));
    assert!(!holds(&at_least, json!({"app": "2.0.0-beta.9"})));
    assert!(!holds(&at_least, json!({"app": "1.99.0"})));
    assert!(!holds(&at_least, json!({"app": "2.0"})), "not a version");
    assert!(!holds(&at_least, json!({"app": 2})), "not a version");
    let cases = [
        ("semverEq", [false, true, false]),
        ("semverGt", [false, false, true]),
        ("semverLt", [true, false, false]),
        ("semverLte", [true, true, false]),
    ];
    for (op, expected) in cases {
        let flag = one_clause("app", op, "[\"1.5.0\"]");
        for (version, expected) in ["1.5.0-alpha", "1.5.0+meta", "1.5.1"]
            .into_iter()
            .zip(expected)
        {
            assert_eq!(
                holds(&flag, json!({"app": version})),
                expected,
                "{version} {op}"
            );
        }
    }
}

// === bucketing ===

#[test]
fn the_targeting_key_is_required_only_when_a_split_is_reached() {
    let flag = compiled(&format!(
        "{BOOL_VARIATIONS}  targets: {{\"on\": [alice]}}\n  rules: [{{clauses: [{{attribute: staff, op: equals, values: [true]}}], variation: \"on\"}}]\n  defaultStrategy: {{weights: {{\"on\": 10, \"off\": 90}}}}\n"
    ));
    assert_eq!(
        eval(&flag, &context(None, json!({"staff": true}))),
        served("on", Reason::TargetingMatch)
    );
    let missing = flag.evaluate(&context(None, json!({"staff": false})));
    let Err(EvaluationError::TargetingKeyMissing(message)) = missing else {
        panic!("{missing:?}");
    };
    assert!(message.contains("targetingKey"), "{message}");
    // A key that is present is enough, whatever it is.
    assert_eq!(eval(&flag, &user("")).1, Reason::Split);
}

#[test]
fn bucket_by_reads_an_attribute_string_or_number() {
    let flag = compiled(&format!(
        "{BOOL_VARIATIONS}  defaultStrategy: {{weights: {{\"on\": 50, \"off\": 50}}}}\n  bucketBy: org.id\n  salt: s1\n"
    ));
    // Everyone in an org gets the same variation, whatever their own key.
    let org = |key: &str, id: Value| {
        flag.evaluate(&context(Some(key), json!({"org": {"id": id}})))
            .map(|evaluation| evaluation.variant)
    };
    for id in 0..20 {
        let first = org("a", json!(format!("org-{id}"))).unwrap();
        assert_eq!(org("b", json!(format!("org-{id}"))).unwrap(), first);
        // A number is bucketed as its JSON text.
        assert_eq!(org("c", json!(id)), org("d", json!(id.to_string())));
    }
    // The bucket is the one of the value, with the flag's key and salt.
    let expected = if bucket("new-checkout", "s1", "acme") < 50_000 {
        "off"
    } else {
        "on"
    };
    assert_eq!(org("z", json!("acme")).unwrap(), expected);

    let missing = flag.evaluate(&user("alice"));
    let Err(EvaluationError::TargetingKeyMissing(message)) = missing else {
        panic!("{missing:?}");
    };
    assert!(message.contains("`org.id`"), "{message}");
    for invalid in [json!(true), json!({"x": 1}), json!([1])] {
        let result = flag.evaluate(&context(Some("k"), json!({"org": {"id": invalid}})));
        assert!(
            matches!(&result, Err(EvaluationError::InvalidContext(message)) if message.contains("org.id")),
            "{result:?}"
        );
    }
}

#[test]
fn bucket_reference_vectors() {
    // Pinned once, and computed independently (Python's hashlib: SHA-256 of salt\0key\0value,
    // first 8 bytes big-endian, times 100,000, >> 64): a change here changes every user's
    // variation in every split flag.
    assert_eq!(bucket("new-checkout", "", "alice"), 62_931);
    assert_eq!(bucket("new-checkout", "s1", "alice"), 20_042);
    assert_eq!(bucket("pricing", "", "user-42"), 76_997);
    // Separators keep the parts apart.
    assert_ne!(bucket("ab", "", "c"), bucket("a", "", "bc"));
}

#[test]
fn buckets_are_in_range_and_uniform() {
    let n = 100_000u32;
    let mut tenths = [0u32; 10];
    for i in 0..n {
        let b = bucket("flag", "salt", &format!("user-{i}"));
        assert!(b < 100_000);
        tenths[(b / 10_000) as usize] += 1;
    }
    // 10,000 expected per tenth; sigma about 95.
    for count in tenths {
        assert!((9_500..=10_500).contains(&count), "{tenths:?}");
    }
}

fn rollout_flag(target_units: u32) -> CompiledFlag {
    let mut flag = flag(
        "  variations: [{name: control, value: false}, {name: target, value: true}]\n  defaultStrategy: {weights: {control: 100}}\n",
    );
    let weights = BTreeMap::from([
        (
            "control".to_string(),
            FlagWeight::from_units(100_000 - target_units).unwrap(),
        ),
        (
            "target".to_string(),
            FlagWeight::from_units(target_units).unwrap(),
        ),
    ]);
    flag.spec.default_strategy.weights = Some(weights);
    assert!(crate::validate::flag(&flag).is_empty());
    CompiledFlag::new(flag)
}

#[test]
fn monotonicity_raising_the_target_weight_never_moves_anyone_back() {
    const USERS: usize = 100_000;
    let mut rng = weir_rng::SplitMix64::new(0x5eed_f1a9);
    let mut weights: Vec<u32> = (0..48).map(|_| (rng.next_u64() % 100_001) as u32).collect();
    weights.extend([0, 100_000]);
    weights.sort_unstable();
    let keys: Vec<EvaluationContext> = (0..USERS).map(|i| user(&format!("user-{i}"))).collect();
    let mut on_target = vec![false; USERS];
    for units in weights {
        let flag = rollout_flag(units);
        let mut count = 0usize;
        for (key, was_on) in keys.iter().zip(on_target.iter_mut()) {
            let evaluation = flag.evaluate(key).unwrap();
            assert_eq!(evaluation.reason, Reason::Split);
            let now_on = evaluation.variant == "target";
            assert!(
                now_on || !*was_on,
                "{key:?} moved back to control at {units} units"
            );
            *was_on = now_on;
            count += usize::from(now_on);
        }
        let share = count as f64 / USERS as f64 * 100.0;
        let weight = f64::from(units) / 1000.0;
        assert!(
            (share - weight).abs() <= 0.5,
            "at {weight}% the target has {share}% of users"
        );
        if units == 0 {
            assert_eq!(count, 0);
        }
        if units == 100_000 {
            assert_eq!(count, USERS);
        }
    }
}

/// The variation of each of `users` keys for weights `[a, b, c]` (declared in that order).
fn three_way(weights: [u32; 3], users: usize) -> Vec<String> {
    let mut flag = flag(
        "  variations: [{name: a, value: 1}, {name: b, value: 2}, {name: c, value: 3}]\n  defaultStrategy: {variation: a}\n",
    );
    flag.spec.default_strategy = Strategy {
        variation: None,
        weights: Some(BTreeMap::from(
            [("a", weights[0]), ("b", weights[1]), ("c", weights[2])]
                .map(|(name, units)| (name.to_string(), FlagWeight::from_units(units).unwrap())),
        )),
    };
    let flag = CompiledFlag::new(flag);
    (0..users)
        .map(|i| flag.evaluate(&user(&format!("u{i}"))).unwrap().variant)
        .collect()
}

#[test]
fn monotonicity_holds_between_adjacent_variations_only() {
    const USERS: usize = 20_000;
    // a and b are adjacent: moving 10% from b to a moves only b -> a.
    let before = three_way([30_000, 40_000, 30_000], USERS);
    let after = three_way([40_000, 30_000, 30_000], USERS);
    let mut moved = 0;
    for (old, new) in before.iter().zip(&after) {
        if old != new {
            assert_eq!((old.as_str(), new.as_str()), ("b", "a"));
            moved += 1;
        }
    }
    assert!((1_800..=2_200).contains(&moved), "{moved}");

    // a and c with a zero-weight b between them behave as adjacent.
    let before = three_way([30_000, 0, 70_000], USERS);
    let after = three_way([50_000, 0, 50_000], USERS);
    for (old, new) in before.iter().zip(&after) {
        if old != new {
            assert_eq!((old.as_str(), new.as_str()), ("c", "a"));
        }
    }

    // a and c with a weighted b between them: b keeps its share but some of its users change
    // (the documented limit of the guarantee).
    let before = three_way([30_000, 40_000, 30_000], USERS);
    let after = three_way([40_000, 40_000, 20_000], USERS);
    let b_to_a = before
        .iter()
        .zip(&after)
        .filter(|(old, new)| old.as_str() == "b" && new.as_str() == "a")
        .count();
    let c_to_b = before
        .iter()
        .zip(&after)
        .filter(|(old, new)| old.as_str() == "c" && new.as_str() == "b")
        .count();
    assert!(b_to_a > 0 && c_to_b > 0, "{b_to_a} {c_to_b}");
    assert!(
        before
            .iter()
            .zip(&after)
            .all(|(old, new)| !(old == "a" && new != "a")),
        "nobody leaves the variation whose weight rose"
    );
}

#[test]
fn flag_weights_round_trip_bucketeer_units() {
    let weight = FlagWeight::from_units(12_345).unwrap();
    assert_eq!(serde_json::to_string(&weight).unwrap(), "12.345");
    let back: FlagWeight = serde_json::from_str("12.345").unwrap();
    assert_eq!(back.units(), 12_345);
    // Every unit round-trips through its text.
    for units in [0, 1, 10, 999, 1_000, 12_345, 33_333, 99_999, 100_000] {
        let weight = FlagWeight::from_units(units).unwrap();
        let text = serde_json::to_string(&weight).unwrap();
        let back: FlagWeight = serde_json::from_str(&text).unwrap();
        assert_eq!(back, weight, "{units} as {text}");
    }
    let smallest: FlagWeight = serde_json::from_str("0.001").unwrap();
    assert_eq!(smallest.units(), 1);
    assert!(serde_json::from_str::<FlagWeight>("0.0001").is_err());
    assert!(serde_json::from_str::<FlagWeight>("100.001").is_err());
    assert!(serde_json::from_str::<FlagWeight>("-1").is_err());
    assert!(FlagWeight::from_units(100_001).is_none());
    // YAML too, as documents are written.
    let yaml: FlagWeight = serde_saphyr::from_str("12.345").unwrap();
    assert_eq!(yaml.units(), 12_345);
}

// === invalid flags degrade, never panic ===

#[test]
fn an_invalid_flag_evaluates_without_panicking() {
    let mut empty = flag(&format!(
        "{BOOL_VARIATIONS}  defaultStrategy: {{variation: \"on\"}}\n"
    ));
    empty.spec.variations.clear();
    let empty = CompiledFlag::new(empty);
    assert!(matches!(
        empty.evaluate(&user("x")),
        Err(EvaluationError::InvalidContext(_))
    ));

    let unknown = CompiledFlag::new(flag(&format!(
        "{BOOL_VARIATIONS}  offVariation: nope\n  targets: {{nope: [alice]}}\n  rules: [{{clauses: [], variation: nope}}, {{clauses: [{{attribute: x, op: equals, values: [{{a: 1}}]}}]}}]\n  defaultStrategy: {{weights: {{nope: 100}}}}\n"
    )));
    assert_eq!(
        eval(&unknown, &user("alice")),
        served("off", Reason::Default)
    );

    let short = CompiledFlag::new(flag(&format!(
        "{BOOL_VARIATIONS}  defaultStrategy: {{weights: {{\"on\": 0.001}}}}\n"
    )));
    for i in 0..100 {
        assert_eq!(
            eval(&short, &user(&i.to_string())),
            served("on", Reason::Split)
        );
    }
    assert!(CompiledFlag::try_new(short.flag().clone()).is_err());
    assert!(
        CompiledFlag::try_new(
            compiled(&format!(
                "{BOOL_VARIATIONS}  defaultStrategy: {{variation: \"on\"}}\n"
            ))
            .flag()
            .clone()
        )
        .is_ok()
    );
}
