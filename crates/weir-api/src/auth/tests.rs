#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

#[test]
fn every_route_has_its_access() {
    let cases = [
        (Method::GET, "/healthz", Access::Public),
        (Method::HEAD, "/readyz", Access::Public),
        (Method::GET, "/metrics", Access::Metrics),
        (Method::GET, "/", Access::Public),
        (Method::GET, "/ui/app.js", Access::Public),
        (Method::GET, "/api/v1/openapi.json", Access::Public),
        (Method::POST, "/api/v1/session", Access::Public),
        (Method::GET, "/api/v1/session", Access::Authenticated),
        (Method::DELETE, "/api/v1/tokens/ci", Access::ManageTokens),
        (Method::GET, "/api/v1/rollouts", READ),
        (Method::POST, "/api/v1/rollouts", ADMIN),
        (Method::PUT, "/api/v1/rollouts/a/b", ADMIN),
        (Method::POST, "/api/v1/rollouts/a/b/commands", OPERATE),
        (Method::GET, "/api/v1/rollouts/a/b/events", READ),
        (Method::GET, "/api/v1/flags/watch", READ),
        (Method::DELETE, "/api/v1/flags/a/b", ADMIN),
        (Method::POST, "/api/v1/flags/a/b/outcomes", OPERATE),
        (Method::GET, "/api/v1/flags/a/b/history", READ),
        (Method::GET, "/api/v1/flags/a/b/evaluations", READ),
        (Method::GET, "/api/v1/flags/a/b/triggers", READ),
        (Method::POST, "/api/v1/flags/a/b/triggers", ADMIN),
        (Method::DELETE, "/api/v1/flags/a/b/triggers/0123abcd", ADMIN),
        // A trigger's secret is its credential (rate limited in `check`).
        (
            Method::POST,
            "/api/v1/triggers/0123abcd/weir_secret",
            Access::Public,
        ),
        (Method::GET, "/api/v1/triggers/0123abcd/weir_secret", READ),
        (Method::POST, "/ofrep/v1/evaluate/flags", EVALUATE),
        (Method::POST, "/ns/a/ofrep/v1/evaluate/flags/k", EVALUATE),
        // Unknown paths and methods need read, so probing without a token learns nothing.
        (Method::GET, "/api/v1/rollouts/a", READ),
        (Method::PATCH, "/api/v1/rollouts/a/b", READ),
        (Method::GET, "/nowhere", READ),
        (Method::GET, "/api/v1/rollouts/a/b/events/more", READ),
    ];
    for (method, path, access) in cases {
        assert_eq!(access_of(&method, path), access, "{method} {path}");
    }
    let found = matched(&Method::POST, "/api/v1/rollouts/team-a/web/commands");
    assert_eq!(found.namespace, Some("team-a"));
    assert_eq!(found.object, Some("web"));
    let found = matched(
        &Method::DELETE,
        "/api/v1/flags/team-a/banner/triggers/0123abcd",
    );
    assert_eq!(
        (found.namespace, found.object),
        (Some("team-a"), Some("banner"))
    );
}

#[test]
fn scopes_allow_what_the_contract_says() {
    use TokenScope::*;
    let allowed = |scope: TokenScope| {
        TokenScope::ALL
            .into_iter()
            .filter(|needed| scope.allows(*needed))
            .collect::<Vec<_>>()
    };
    assert_eq!(allowed(Read), vec![Read, Evaluate]);
    assert_eq!(allowed(Operate), vec![Read, Operate, Evaluate]);
    assert_eq!(allowed(Admin), vec![Read, Operate, Admin, Evaluate]);
    assert_eq!(allowed(Evaluate), vec![Evaluate]);
}

#[test]
fn the_limiter_blocks_after_the_limit_until_the_window_ends() {
    let config = AuthConfig {
        bad_credentials_per_window: 3,
        bad_credentials_window: Duration::from_secs(60),
        max_tracked_clients: 2,
        ..AuthConfig::default()
    };
    let mut limiter = Limiter::new(&config);
    let start = Instant::now();
    let one: IpAddr = "10.0.0.1".parse().unwrap();
    for _ in 0..3 {
        assert_eq!(limiter.retry_after(one, start), None);
        limiter.strike(one, start);
    }
    assert_eq!(limiter.retry_after(one, start), Some(60));
    // Per address: another client is not affected.
    assert_eq!(
        limiter.retry_after("10.0.0.9".parse().unwrap(), start),
        None
    );
    assert_eq!(
        limiter.retry_after(one, start + Duration::from_millis(30_500)),
        Some(30)
    );
    assert_eq!(
        limiter.retry_after(one, start + Duration::from_secs(60)),
        None
    );
    // The map stays bounded: the oldest client is forgotten first.
    let (two, three): (IpAddr, IpAddr) = ("10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap());
    limiter.strike(one, start);
    limiter.strike(two, start + Duration::from_secs(1));
    limiter.strike(three, start + Duration::from_secs(2));
    assert_eq!(limiter.clients.len(), 2);
    assert!(!limiter.clients.contains_key(&one));
}

#[test]
fn expiry_takes_durations_and_times_in_the_future() {
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    assert_eq!(
        expiry("30d", now).unwrap(),
        Timestamp::from_second(1_800_000_000 + 30 * 86_400).unwrap()
    );
    assert_eq!(
        expiry("90m", now).unwrap(),
        Timestamp::from_second(1_800_005_400).unwrap()
    );
    assert!(expiry("2030-01-01T00:00:00Z", now).is_ok());
    for bad in ["", "0d", "-1d", "30", "30y", "2020-01-01T00:00:00Z", "soon"] {
        let error = expiry(bad, now).unwrap_err();
        assert_eq!(error.path, "expires", "{bad}");
    }
}

#[test]
fn secrets_are_random_prefixed_and_only_their_hash_is_kept() {
    let one = new_secret().unwrap();
    let two = new_secret().unwrap();
    assert_ne!(one, two);
    assert!(one.starts_with("weir_"));
    assert_eq!(one.len(), "weir_".len() + 43);
    let hash = secret_hash(&one);
    assert_eq!(hash.len(), 64);
    assert!(!hash.contains(&one[5..]));
    assert_eq!(
        secret_hash("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[tokio::test]
async fn cookies_are_signed_and_secure_when_asked() {
    let store = weir_store::SqliteStore::open_in_memory().await.unwrap();
    let config = AuthConfig {
        secure_cookies: true,
        ..AuthConfig::default()
    };
    let auth = Auth::open(store.clone(), config).await.unwrap();
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let issued = issue_token(
        &store,
        &TokenRequest {
            name: "web".into(),
            scope: "read".into(),
            namespaces: None,
            expires: Some("1h".into()),
        },
        now,
    )
    .await
    .unwrap();
    let token = store.list_tokens().await.unwrap().remove(0);
    assert_eq!(token.name, issued.token.name);
    let inner = &auth.inner;
    let (cookie, session) = inner.new_session(&token, now);
    // The token's expiry (1 h) comes before the session's 12 h.
    assert_eq!(session.expires, token.expires_at.unwrap());
    assert!(!cookie.contains(&issued.secret));
    let (id, read) = inner.read_cookie(&cookie).unwrap();
    assert_eq!((id, &read), (token.id, &session));
    let (payload, tag) = cookie.rsplit_once('.').unwrap();
    let other_id = payload.replacen(&format!("v1:{}:", token.id), "v1:999:", 1);
    assert!(inner.read_cookie(&format!("{other_id}.{tag}")).is_none());
    assert!(inner.read_cookie(payload).is_none());
    let header = inner.cookie_header(&cookie, 60).unwrap();
    let header = header.to_str().unwrap();
    assert!(
        header.ends_with("; HttpOnly; SameSite=Strict; Path=/; Max-Age=60; Secure"),
        "{header}"
    );
    // Another server on the same file signs with the same key: sessions survive a restart.
    let again = Auth::open(store, AuthConfig::default()).await.unwrap();
    assert!(again.inner.read_cookie(&cookie).is_some());
}

/// `namespaces: []` is refused (422, naming the field) and creates nothing: taken as "all" it
/// would fail open (issue 32).
#[tokio::test]
async fn an_empty_namespace_list_is_refused_never_all() {
    let store = weir_store::SqliteStore::open_in_memory().await.unwrap();
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let request = TokenRequest {
        name: "none".into(),
        scope: "read".into(),
        namespaces: Some(Vec::new()),
        expires: None,
    };
    let refused = issue_token(&store, &request, now).await.unwrap_err();
    assert_eq!(
        refused.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "{refused}"
    );
    let ApiError::Unprocessable { errors, .. } = &refused else {
        panic!("{refused:?}");
    };
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path, "namespaces");
    assert!(
        errors[0].message.contains("at least one namespace"),
        "{}",
        errors[0].message
    );
    // With other problems, every one is named.
    let both = TokenRequest {
        scope: "root".into(),
        ..request.clone()
    };
    let ApiError::Unprocessable { errors, .. } = issue_token(&store, &both, now).await.unwrap_err()
    else {
        panic!("not 422");
    };
    let paths: Vec<&str> = errors.iter().map(|error| error.path.as_str()).collect();
    assert_eq!(paths, ["scope", "namespaces"]);
    assert!(store.list_tokens().await.unwrap().is_empty());
    // Left out: every namespace; a list: those.
    let all = issue_token(
        &store,
        &TokenRequest {
            namespaces: None,
            ..request.clone()
        },
        now,
    )
    .await
    .unwrap();
    assert_eq!(all.token.namespaces, None);
    let one = issue_token(
        &store,
        &TokenRequest {
            name: "shop".into(),
            namespaces: Some(vec!["shop".into()]),
            ..request
        },
        now,
    )
    .await
    .unwrap();
    assert_eq!(one.token.namespaces, Some(vec!["shop".to_string()]));
}
