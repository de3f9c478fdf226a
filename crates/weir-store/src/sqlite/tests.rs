use super::*;

#[test]
fn cursor_round_trips_any_characters() {
    for (namespace, name) in [
        ("default", "api"),
        ("a/b", "c/d.e"),
        ("", ""),
        ("ns.with.dots", "名前"),
    ] {
        let key = RolloutKey::new(namespace, name);
        assert_eq!(decode_cursor(&encode_cursor(&key)).ok(), Some(key));
    }
}

#[test]
fn malformed_cursors_are_invalid() {
    for cursor in [
        "",
        "default/api",
        "6.",
        "zz.00",
        "+f.00",
        "61",
        "ff.61",
        "61.6",
        "4A.61",
    ] {
        assert!(
            matches!(decode_cursor(cursor), Err(StoreError::InvalidCursor(c)) if c == cursor),
            "{cursor:?}"
        );
    }
}

#[test]
fn page_limit_defaults_and_caps() {
    assert_eq!(page_limit(0), DEFAULT_PAGE);
    assert_eq!(page_limit(7), 7);
    assert_eq!(page_limit(MAX_PAGE + 1), MAX_PAGE);
}
