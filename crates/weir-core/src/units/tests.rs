use super::*;

#[test]
fn weight_parses_percentages_to_basis_points() {
    assert_eq!(
        Weight::parse_percent("2.5"),
        Ok(Weight::from_basis_points(250))
    );
    assert_eq!(
        Weight::parse_percent("0.01%"),
        Ok(Weight::from_basis_points(1))
    );
    assert_eq!(Weight::parse_percent(" 100 "), Ok(Weight::FULL));
    assert!(Weight::parse_percent("0.001").is_err());
    assert!(Weight::parse_percent("-1").is_err());
    assert!(Weight::parse_percent("ten").is_err());
}

#[test]
fn weight_displays_and_serializes_as_percent() {
    assert_eq!(Weight::from_basis_points(250).to_string(), "2.5%");
    assert_eq!(Weight::from_basis_points(1).to_string(), "0.01%");
    assert_eq!(Weight::from_percent(20).to_string(), "20%");
    assert_eq!(
        serde_json::to_string(&Weight::from_percent(20)).ok(),
        Some("20".into())
    );
    assert_eq!(
        serde_json::to_string(&Weight::from_basis_points(5)).ok(),
        Some("0.05".into())
    );
    let back: Weight = serde_json::from_str("0.05").unwrap_or_default();
    assert_eq!(back, Weight::from_basis_points(5));
}

#[test]
fn go_durations_parse_like_go() {
    let cases = [
        ("30s", Duration::from_secs(30)),
        ("1m", Duration::from_secs(60)),
        ("1m30s", Duration::from_secs(90)),
        ("1.5h", Duration::from_secs(5400)),
        ("250ms", Duration::from_millis(250)),
        ("2h45m", Duration::from_secs(9900)),
        ("0", Duration::ZERO),
        (".5s", Duration::from_millis(500)),
    ];
    for (text, expected) in cases {
        assert_eq!(
            GoDuration::parse(text),
            Ok(GoDuration::new(expected)),
            "{text}"
        );
    }
    for bad in ["", "10", "1x", "-5s", "s", "1..5s", "99999999999999999999h"] {
        assert!(GoDuration::parse(bad).is_err(), "{bad} should be refused");
    }
}

#[test]
fn go_durations_format_canonically_and_round_trip() {
    for text in ["1h30m", "45s", "250ms", "1m0.5s", "0s", "2h", "10m5s"] {
        let parsed = GoDuration::parse(text).unwrap_or_default();
        assert_eq!(parsed.to_string(), text);
    }
}
