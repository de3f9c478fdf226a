use axum::body::Body;

use super::*;
use crate::error::ErrorCode;

fn policy(listen: &str, names: &[&str]) -> HostPolicy {
    let names: Vec<String> = names.iter().map(ToString::to_string).collect();
    HostPolicy::new(listen.parse().unwrap(), &names, "weir serve").unwrap()
}

fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> Request {
    let mut builder = axum::http::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Body::empty()).unwrap()
}

fn code(
    policy: &HostPolicy,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Option<ErrorCode> {
    verdict(policy, &request(method, path, headers))
        .err()
        .map(|error| error.code())
}

#[test]
fn a_loopback_listener_answers_loopback_names_and_public_names_only() {
    let loopback = policy("127.0.0.1:7979", &[]);
    for host in [
        "localhost:7979",
        "LOCALHOST",
        "127.0.0.1:7979",
        "127.0.0.2",
        "[::1]:7979",
        "[::ffff:127.0.0.1]:1",
    ] {
        assert_eq!(
            code(&loopback, "GET", "/api/v1/rollouts", &[("host", host)]),
            None,
            "{host}"
        );
    }
    for host in [
        "evil.example:7979",
        "app.localhost:7979",
        "localhost.:7979",
        "10.0.0.5:7979",
        "0.0.0.0:7979",
    ] {
        assert_eq!(
            code(&loopback, "GET", "/api/v1/rollouts", &[("host", host)]),
            Some(ErrorCode::Misdirected),
            "{host}"
        );
    }
    let refused = verdict(
        &loopback,
        &request("GET", "/healthz", &[("host", "evil.example:7979")]),
    )
    .unwrap_err();
    let message = refused.to_string();
    assert!(message.contains("Host \"evil.example:7979\""), "{message}");
    assert!(message.contains("--public-name evil.example"), "{message}");
    assert!(message.contains("docs/SECURITY.md"), "{message}");
    assert_eq!(
        refused.status(),
        axum::http::StatusCode::MISDIRECTED_REQUEST
    );
    // No Host at all (HTTP/1.0): refused on loopback.
    assert_eq!(
        code(&loopback, "GET", "/healthz", &[]),
        Some(ErrorCode::Misdirected)
    );
    // An absolute-form URI naming another host is refused even with an admitted Host.
    assert_eq!(
        code(
            &loopback,
            "GET",
            "http://evil.example/healthz",
            &[("host", "localhost")]
        ),
        Some(ErrorCode::Misdirected)
    );

    let named = policy("127.0.0.1:7979", &["Example.Test"]);
    assert_eq!(
        code(&named, "GET", "/healthz", &[("host", "example.test:8443")]),
        None
    );
    assert_eq!(
        code(&named, "GET", "/healthz", &[("host", "other.test")]),
        Some(ErrorCode::Misdirected)
    );
    let any = policy("127.0.0.1:7979", &["*"]);
    assert!(any.admits_any_host());
    assert_eq!(
        code(&any, "GET", "/healthz", &[("host", "evil.example")]),
        None
    );
}

#[test]
fn other_listeners_answer_their_address_and_every_interface_any_address() {
    let one = policy("10.0.0.5:7979", &[]);
    assert_eq!(
        code(&one, "GET", "/healthz", &[("host", "10.0.0.5:7979")]),
        None
    );
    assert_eq!(
        code(&one, "GET", "/healthz", &[("host", "localhost:7979")]),
        None
    );
    assert_eq!(
        code(&one, "GET", "/healthz", &[("host", "10.0.0.6:7979")]),
        Some(ErrorCode::Misdirected)
    );
    // A client without Host is no browser: admitted off loopback.
    assert_eq!(code(&one, "GET", "/healthz", &[]), None);

    let every = policy("0.0.0.0:7979", &[]);
    assert_eq!(
        code(&every, "GET", "/healthz", &[("host", "192.0.2.7:7979")]),
        None
    );
    assert_eq!(
        code(&every, "GET", "/healthz", &[("host", "[2001:db8::1]:7979")]),
        None
    );
    assert_eq!(
        code(&every, "GET", "/healthz", &[("host", "weir.internal:7979")]),
        Some(ErrorCode::Misdirected)
    );
    let named = policy("0.0.0.0:7979", &["weir.internal"]);
    assert_eq!(
        code(&named, "GET", "/healthz", &[("host", "weir.internal:7979")]),
        None
    );
}

#[test]
fn changes_from_pages_of_other_origins_are_refused_except_ofrep_evaluations() {
    let loopback = policy("127.0.0.1:7979", &["example.test"]);
    let host = ("host", "127.0.0.1:7979");
    let post =
        |origin: &str, path: &str| code(&loopback, "POST", path, &[host, ("origin", origin)]);
    assert_eq!(
        post("http://evil.example", "/api/v1/rollouts"),
        Some(ErrorCode::Forbidden)
    );
    assert_eq!(post("null", "/api/v1/rollouts"), Some(ErrorCode::Forbidden));
    // Another port of the same host is another origin.
    assert_eq!(
        post("http://127.0.0.1:3000", "/api/v1/rollouts"),
        Some(ErrorCode::Forbidden)
    );
    assert_eq!(
        post("http://localhost:7979", "/api/v1/rollouts"),
        Some(ErrorCode::Forbidden)
    );
    assert_eq!(post("http://127.0.0.1:7979", "/api/v1/rollouts"), None);
    assert_eq!(post("https://example.test", "/api/v1/rollouts"), None);
    assert_eq!(
        post("http://evil.example", "/api/v1/flags/shop/banner/outcomes"),
        Some(ErrorCode::Forbidden)
    );
    for method in ["PUT", "PATCH", "DELETE"] {
        assert_eq!(
            code(
                &loopback,
                method,
                "/api/v1/rollouts/shop/web",
                &[host, ("origin", "http://evil.example")]
            ),
            Some(ErrorCode::Forbidden),
            "{method}"
        );
    }
    // Reads, requests without Origin and OFREP evaluations are not changes from a page.
    assert_eq!(
        code(
            &loopback,
            "GET",
            "/api/v1/rollouts",
            &[host, ("origin", "http://evil.example")]
        ),
        None
    );
    assert_eq!(code(&loopback, "POST", "/api/v1/rollouts", &[host]), None);
    for path in [
        "/ofrep/v1/evaluate/flags",
        "/ofrep/v1/evaluate/flags/banner",
        "/ns/shop/ofrep/v1/evaluate/flags",
        "/ns/shop/ofrep/v1/evaluate/flags/banner",
    ] {
        assert_eq!(post("http://app.example", path), None, "{path}");
    }
    let refused = verdict(
        &loopback,
        &request(
            "POST",
            "/api/v1/rollouts",
            &[host, ("origin", "http://evil.example")],
        ),
    )
    .unwrap_err();
    let message = refused.to_string();
    assert!(
        message.contains("Origin \"http://evil.example\""),
        "{message}"
    );
    assert!(message.contains("CSRF"), "{message}");
    assert_eq!(refused.status(), axum::http::StatusCode::FORBIDDEN);
}

#[test]
fn ofrep_evaluation_paths_are_recognised_exactly() {
    assert!(is_ofrep_evaluation("/ofrep/v1/evaluate/flags"));
    assert!(is_ofrep_evaluation("/ns/a/ofrep/v1/evaluate/flags/k"));
    assert!(!is_ofrep_evaluation("/ofrep/v1/evaluate/flagsx"));
    assert!(!is_ofrep_evaluation("/api/v1/flags"));
    assert!(!is_ofrep_evaluation("/ns/a"));
    assert!(!is_ofrep_evaluation("/ns/a/api/v1/rollouts"));
}

#[test]
fn public_names_are_host_names_or_addresses() {
    for bad in ["http://weir.example", "weir.example:7979", "", "a..b"] {
        assert!(
            HostPolicy::new(
                "127.0.0.1:0".parse().unwrap(),
                &[bad.to_string()],
                "weir serve"
            )
            .is_err(),
            "{bad:?}"
        );
    }
    for good in ["weir.example", "10.0.0.5", "[::1]", "*"] {
        assert!(
            HostPolicy::new(
                "127.0.0.1:0".parse().unwrap(),
                &[good.to_string()],
                "weir serve"
            )
            .is_ok()
        );
    }
}
