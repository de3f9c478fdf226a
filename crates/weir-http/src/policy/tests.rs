use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::HttpClient;

fn rules(texts: &[&str]) -> Vec<Rule> {
    texts.iter().map(|text| text.parse().unwrap()).collect()
}

fn address(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

#[test]
fn cidr_blocks_parse_match_and_refuse_nonsense() {
    let block: Cidr = "10.1.2.3/8".parse().unwrap();
    assert_eq!(block.to_string(), "10.0.0.0/8");
    assert!(block.contains("10.200.0.1".parse().unwrap()));
    assert!(!block.contains("11.0.0.1".parse().unwrap()));
    // An IPv4 address written in IPv6 form is the same address.
    assert!(block.contains("::ffff:10.9.9.9".parse().unwrap()));
    let v6: Cidr = "fe80::/10".parse().unwrap();
    assert!(v6.contains("fe80::1".parse().unwrap()));
    assert!(v6.contains("febf::1".parse().unwrap()));
    assert!(!v6.contains("fec0::1".parse().unwrap()));
    assert!(!v6.contains("10.0.0.1".parse().unwrap()));
    let everything: Cidr = "0.0.0.0/0".parse().unwrap();
    assert!(everything.contains("203.0.113.9".parse().unwrap()));
    assert!(everything.contains("0.0.0.0".parse().unwrap()));
    let one: Cidr = "[::1]".parse().unwrap();
    assert_eq!(one.to_string(), "::1/128");
    for bad in ["10.0.0.0/33", "::/129", "nonsense", "10.0.0.0/x", "1.2.3/8"] {
        assert!(bad.parse::<Cidr>().is_err(), "{bad}");
    }
}

#[test]
fn rules_are_blocks_addresses_or_host_names() {
    assert_eq!(
        "Metadata.Google.Internal.".parse::<Rule>().unwrap(),
        Rule::Host("metadata.google.internal".into())
    );
    assert!(
        matches!("169.254.169.254".parse::<Rule>().unwrap(), Rule::Cidr(block) if block.prefix() == 32)
    );
    assert!(matches!(
        "fe80::/10".parse::<Rule>().unwrap(),
        Rule::Cidr(_)
    ));
    for bad in [
        "",
        "host:80",
        "http://host",
        "a..b",
        "under_score.example",
        "10.0.0.0/40",
    ] {
        assert!(bad.parse::<Rule>().is_err(), "{bad:?}");
    }
}

#[test]
fn link_local_and_unspecified_are_refused_by_default_and_the_rest_allowed() {
    let policy = OutboundPolicy::default();
    let metadata = policy
        .check(None, address("169.254.169.254:80"))
        .unwrap_err();
    assert!(
        metadata
            .to_string()
            .contains("169.254.169.254 is a link-local address"),
        "{metadata}"
    );
    assert!(
        metadata
            .to_string()
            .contains("--allow-connect 169.254.169.254"),
        "{metadata}"
    );
    assert!(metadata.to_string().contains("docs/SECURITY.md"));
    assert!(policy.check(None, address("[fe80::1]:80")).is_err());
    assert!(
        policy
            .check(None, address("[::ffff:169.254.169.254]:80"))
            .is_err()
    );
    assert!(policy.check(None, address("0.0.0.0:8080")).is_err());
    assert!(policy.check(None, address("[::]:8080")).is_err());
    for allowed in [
        "127.0.0.1:9090",
        "10.0.0.5:80",
        "[::1]:80",
        "203.0.113.7:443",
    ] {
        assert_eq!(policy.check(None, address(allowed)), Ok(()), "{allowed}");
    }
    // Names are checked on what they resolve to, when connecting.
    assert_eq!(policy.check_url("http://metadata.example/latest"), Ok(()));
    assert!(
        policy
            .check_url("http://169.254.169.254/latest/meta-data")
            .is_err()
    );
    assert!(policy.check_url("http://[fe80::1]:8080/").is_err());
    assert!(policy.check_host("169.254.169.254", 80).is_err());
}

#[test]
fn the_most_specific_rule_wins_and_deny_wins_a_tie() {
    let policy = OutboundPolicy::new(
        rules(&["169.254.169.254", "10.0.0.0/8", "prometheus.internal"]),
        rules(&["10.1.0.0/16", "0.0.0.0/0", "10.0.0.0/8", "evil.example"]),
    );
    // An explicit allow of one address beats the default refusal of link-local addresses.
    assert_eq!(policy.check(None, address("169.254.169.254:80")), Ok(()));
    assert!(policy.check(None, address("169.254.1.1:80")).is_err());
    // 10.0.0.0/8 is both allowed and denied: deny wins the tie; 10.1/16 is denied anyway.
    let tie = policy.check(None, address("10.2.0.1:80")).unwrap_err();
    assert!(
        tie.to_string().contains("--deny-connect 10.0.0.0/8"),
        "{tie}"
    );
    assert!(policy.check(None, address("10.1.0.1:80")).is_err());
    // Everything else in IPv4 is denied by 0.0.0.0/0 ...
    assert!(policy.check(None, address("203.0.113.7:80")).is_err());
    // ... but a name rule is more specific than any block.
    assert_eq!(
        policy.check(Some("prometheus.internal"), address("203.0.113.7:9090")),
        Ok(())
    );
    assert!(policy.check_host("EVIL.example.", 80).is_err());
    assert!(
        policy
            .check(Some("evil.example"), address("[2001:db8::1]:80"))
            .is_err()
    );
    // IPv6 is not covered by 0.0.0.0/0.
    assert_eq!(policy.check(None, address("[2001:db8::1]:80")), Ok(()));
}

#[test]
fn weirs_own_listeners_are_never_a_destination() {
    let policy = OutboundPolicy::new(rules(&["127.0.0.0/8", "0.0.0.0/0"]), Vec::new());
    policy.add_own(address("127.0.0.1:7979"));
    let own = policy.check(None, address("127.0.0.1:7979")).unwrap_err();
    assert!(
        own.to_string()
            .contains("weir's own listener 127.0.0.1:7979"),
        "{own}"
    );
    // Any loopback or unspecified address reaches a loopback listener.
    assert!(
        policy
            .check(Some("localhost"), address("[::1]:7979"))
            .is_err()
    );
    assert!(policy.check(None, address("0.0.0.0:7979")).is_err());
    assert_eq!(policy.check(None, address("127.0.0.1:7980")), Ok(()));
    // A listener on every interface is reached through any of this host's addresses.
    let everywhere = OutboundPolicy::default();
    everywhere.add_own(address("0.0.0.0:7979"));
    assert!(everywhere.check(None, address("127.0.0.1:7979")).is_err());
    assert_eq!(everywhere.check(None, address("192.0.2.1:7979")), Ok(()));
}

#[test]
fn listen_policies_admit_their_blocks_only() {
    let loopback = ListenPolicy::loopback_only();
    assert_eq!(loopback.check(address("127.0.0.1:0")), Ok(()));
    assert_eq!(loopback.check(address("127.0.0.2:8080")), Ok(()));
    assert_eq!(loopback.check(address("[::1]:0")), Ok(()));
    let refused = loopback.check(address("0.0.0.0:0")).unwrap_err();
    assert!(
        refused.to_string().contains("--allow-listen 0.0.0.0/0"),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("127.0.0.0/8, ::1/128"),
        "{refused}"
    );
    assert!(loopback.check(address("[::]:0")).is_err());
    assert!(loopback.check(address("10.0.0.5:80")).is_err());
    let lan = ListenPolicy::loopback_only().allow("10.0.0.0/8".parse().unwrap());
    assert_eq!(lan.check(address("10.0.0.5:80")), Ok(()));
    // A block of interfaces does not admit all interfaces.
    assert!(lan.check(address("0.0.0.0:80")).is_err());
    let open = ListenPolicy::loopback_only().allow("0.0.0.0/0".parse().unwrap());
    assert_eq!(open.check(address("0.0.0.0:80")), Ok(()));
    assert_eq!(ListenPolicy::any().check(address("[::]:80")), Ok(()));
}

/// A server on 127.0.0.1:0 answering 200 to every connection, counting them.
async fn counting_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer).await;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                .await;
        }
    });
    (address, connections)
}

#[tokio::test]
async fn the_client_checks_what_a_name_resolves_to_and_never_connects_to_a_refused_address() {
    let (server, connections) = counting_server().await;
    let timeout = Duration::from_secs(10);
    let url = format!("http://localhost:{}/hook", server.port());

    // `localhost` passes the check made when a rollout is applied (it is a name) ...
    let policy = Arc::new(OutboundPolicy::new(
        Vec::new(),
        rules(&["127.0.0.0/8", "::1"]),
    ));
    assert_eq!(policy.check_url(&url), Ok(()));
    // ... and is refused when connecting, on the addresses it resolves to.
    let guarded = HttpClient::with_policy(Arc::clone(&policy));
    let error = guarded.get(&url, timeout).await.unwrap_err();
    assert!(error.is_refused(), "{error}");
    assert!(error.to_string().contains("not sent"), "{error}");
    assert!(error.to_string().contains("--deny-connect"), "{error}");
    // A literal address is refused the same way.
    let literal = format!("http://{server}/hook");
    assert!(
        guarded
            .get(&literal, timeout)
            .await
            .unwrap_err()
            .is_refused()
    );

    // weir's own listener, reached by name.
    let own = Arc::new(OutboundPolicy::default());
    own.add_own(server);
    let error = HttpClient::with_policy(own)
        .get(&url, timeout)
        .await
        .unwrap_err();
    assert!(error.is_refused());
    assert!(error.to_string().contains("weir's own listener"), "{error}");

    // An allowed destination is reached, through the same kind of client.
    let allowed = HttpClient::with_policy(Arc::new(OutboundPolicy::default()));
    let answer = allowed.get(&url, timeout).await.unwrap();
    assert_eq!(answer.status, http::StatusCode::OK);
    // The server saw that one connection only: the refused requests never reached it.
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}
